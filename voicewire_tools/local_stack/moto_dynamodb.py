"""moto's DynamoDB, made atomic per request, as DynamoDB is.

DynamoDB applies each request (a conditional UpdateItem included) atomically: of two writers
with the same condition, exactly one succeeds. moto evaluates the condition and writes without a
lock, so two threads can both pass it, and a test of the pipeline's races would find races that
AWS does not have (or miss the point of a fix). One lock around moto's DynamoDB request handler
restores the guarantee, for the in-process mock and for the moto server alike.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

_lock = threading.RLock()


def make_moto_dynamodb_atomic() -> None:
    """Serialize moto's DynamoDB requests (idempotent: patches once per process)."""
    from moto.dynamodb.responses import DynamoHandler

    if getattr(DynamoHandler.call_action, "voicewire_atomic", False):
        return
    handle = DynamoHandler.call_action

    @functools.wraps(handle)
    def call_action_atomically(self: Any) -> Any:
        with _lock:
            return handle(self)

    call_action_atomically.voicewire_atomic = True  # type: ignore[attr-defined]
    DynamoHandler.call_action = call_action_atomically  # type: ignore[method-assign]
