"""The Lambda functions, in-process and unchanged: each handler is called with its event and a
context, as the Lambda service would.

``InvocationType="Event"`` answers 202 at once and runs the function on a background thread, as
unkindly as Lambda does (``AsyncBehaviour``): a failed invocation is run again after a delay,
with the same request id (Lambda retries twice, ~1 and ~2 minutes later; the local delays are
shorter), and an event can be delivered twice on request (Lambda's queue may do so even when
nothing failed). The context's remaining time counts down from the function's timeout.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from functions.worker.policy import WORKER_POLICY

logger = logging.getLogger(__name__)


@dataclass
class AsyncBehaviour:
    """How asynchronous invocations are delivered and retried."""

    retry_delays: tuple[float, ...] = (1.0, 2.0)  # one delay per retry; () turns retries off
    timeout_seconds: float = WORKER_POLICY.timeout_seconds
    duplicate_next: int = 0  # deliver each of the next N events twice (a second request id)


@dataclass
class InvocationRecord:
    """One run of a function, for tests and logs."""

    name: str
    request_id: str
    attempt: int  # 0: the first delivery; 1, 2: Lambda's retries
    duplicate: bool = False
    error: str | None = None  # repr of what it raised, if it failed
    result: Any = None  # what it returned, if it did


@dataclass
class LocalLambdaContext:
    function_name: str
    memory_limit_in_mb: int = 1024
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    timeout_seconds: float = WORKER_POLICY.timeout_seconds
    started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:local:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        left = self.started + self.timeout_seconds - time.monotonic()
        return max(0, int(left * 1000))


class LocalFunctions:
    """Calls the real handler modules (``functions.handlers.*``)."""

    def __init__(self, behaviour: AsyncBehaviour | None = None) -> None:
        from functions.handlers import authorizer, connect, disconnect, listen, messages, worker

        self.modules = {
            "authorizer": authorizer,
            "connect": connect,
            "disconnect": disconnect,
            "listen": listen,
            "messages": messages,
            "worker": worker,
        }
        self.behaviour = behaviour or AsyncBehaviour()
        self.invocations: list[InvocationRecord] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def call(
        self, name: str, event: dict[str, Any], context: LocalLambdaContext | None = None
    ) -> dict[str, Any]:
        context = context or LocalLambdaContext(f"voicewire-{name}")
        return self.modules[name].handler(event, context)

    def invoke_in_background(self, name: str, event: dict[str, Any]) -> None:
        with self._lock:
            duplicate = self.behaviour.duplicate_next > 0
            if duplicate:
                self.behaviour.duplicate_next -= 1
        self._start(name, event, duplicate=False)
        if duplicate:
            self._start(name, event, duplicate=True)

    def _start(self, name: str, event: dict[str, Any], duplicate: bool) -> None:
        request_id = str(uuid.uuid4())
        thread = threading.Thread(
            target=self._deliver,
            args=(name, event, request_id, duplicate),
            name=f"lambda-{name}",
            daemon=True,
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _deliver(self, name: str, event: dict[str, Any], request_id: str, duplicate: bool) -> None:
        delays = self.behaviour.retry_delays
        for attempt in range(len(delays) + 1):
            record = InvocationRecord(name, request_id, attempt, duplicate)
            with self._lock:
                self.invocations.append(record)
            context = LocalLambdaContext(
                f"voicewire-{name}",
                aws_request_id=request_id,
                timeout_seconds=self.behaviour.timeout_seconds,
            )
            try:
                record.result = self.call(name, event, context)
                return
            except BaseException as error:  # the runtime died or the handler raised: retried
                record.error = repr(error)
                logger.error("%s failed (attempt %d): %r", name, attempt + 1, error)
            if attempt < len(delays):
                time.sleep(delays[attempt])
        logger.error("%s: event dropped after %d attempts", name, len(delays) + 1)

    def wait(self, timeout: float = 30) -> None:
        """Let background invocations finish (for a clean shutdown)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive or time.monotonic() > deadline:
                return
            alive[0].join(max(0.0, deadline - time.monotonic()))


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
