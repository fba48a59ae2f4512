"""AWS event-stream messages (``application/vnd.amazon.eventstream``) for tests.

botocore only decodes this format; the Stubber cannot return event streams. A ``before-send``
handler that answers with these bytes makes boto3 parse a real ``EventStream`` through its own
code path. The encoding is ``smithy_aws_event_stream``'s (AWS's own, which the SageMaker SDK
uses), so botocore's decoder checks it independently.
"""

from __future__ import annotations

import json

from smithy_aws_event_stream.events import EventMessage


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    return EventMessage(headers=dict(headers), payload=payload).encode()


def payload_part(data: bytes) -> bytes:
    return encode_message(
        {
            ":event-type": "PayloadPart",
            ":content-type": "application/octet-stream",
            ":message-type": "event",
        },
        data,
    )


def stream_exception(kind: str, message: str) -> bytes:
    return encode_message(
        {
            ":exception-type": kind,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps({"Message": message, "ErrorCode": kind}).encode(),
    )


class RawEventStream:
    """What botocore reads an event-stream body from: an object with ``stream()``."""

    def __init__(self, messages: list[bytes]) -> None:
        self._messages = messages

    def stream(self, **_: object):
        yield from self._messages

    def close(self) -> None:
        pass
