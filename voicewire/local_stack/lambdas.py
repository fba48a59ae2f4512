"""The Lambda functions, in-process and unchanged: each handler is called with its event and a
context, as the Lambda service would; ``InvocationType="Event"`` runs the worker on a background
thread and answers 202 at once, as the service does."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class LocalLambdaContext:
    function_name: str
    memory_limit_in_mb: int = 1024
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:local:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


class LocalFunctions:
    """Calls the real handler modules (``functions.handlers.*``)."""

    def __init__(self) -> None:
        from functions.handlers import authorizer, connect, disconnect, messages, worker

        self.modules = {
            "authorizer": authorizer,
            "connect": connect,
            "disconnect": disconnect,
            "messages": messages,
            "worker": worker,
        }
        self._threads: list[threading.Thread] = []

    def call(self, name: str, event: dict[str, Any]) -> dict[str, Any]:
        return self.modules[name].handler(event, LocalLambdaContext(f"voicewire-{name}"))

    def invoke_in_background(self, name: str, event: dict[str, Any]) -> None:
        def run() -> None:
            try:
                self.call(name, event)
            except Exception:  # a real async invocation's failure lands in its logs too
                logger.exception("%s failed", name)

        thread = threading.Thread(target=run, name=f"lambda-{name}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def wait(self, timeout: float = 30) -> None:
        """Let background invocations finish (for a clean shutdown)."""
        for thread in list(self._threads):
            thread.join(timeout)


@dataclass
class LocalLambdaClient:
    """The ``invoke`` of boto3's Lambda client, backed by ``LocalFunctions``."""

    functions: LocalFunctions
    names: dict[str, str]  # function name -> handler module name

    def invoke(
        self, FunctionName: str, InvocationType: str = "RequestResponse", Payload: bytes = b"{}"
    ) -> dict[str, Any]:
        module = self.names[FunctionName]
        event = json.loads(Payload)
        if InvocationType == "Event":
            self.functions.invoke_in_background(module, event)
            return {"StatusCode": 202}
        result = self.functions.call(module, event)
        return {"StatusCode": 200, "Payload": json.dumps(result).encode()}
