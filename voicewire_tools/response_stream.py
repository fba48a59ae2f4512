"""One text in, its audio out as it arrives: ``POST /invocations`` on AWS or on a local server.

- ``SageMakerResponseStream``: boto3 ``invoke_endpoint_with_response_stream``; the body is an
  event stream of ``PayloadPart.Bytes`` (or ``ModelStreamError`` / ``InternalStreamFailure``).
- ``HttpResponseStream``: the same route over plain HTTP (the speech server, locally).

Both yield audio bytes as they arrive. With ``sse=True`` the server wraps the audio in SSE
events of base64 JSON (the seed's path, kept to measure its cost); the incremental SSE decoder
reassembles events across payload parts, whatever their boundaries.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
from botocore.exceptions import EventStreamError

from voicewire.error_codes import ProtocolError
from voicewire.speech_link.errors import SpeechRequestError, SpeechServerError, SpeechStreamError
from voicewire.speech_protocol import validate_synthesis_request
from voicewire.sse import SseDecoder


def invocation_body(
    text: str,
    *,
    audio_format: str = "pcm16",
    voice: str | None = None,
    speed: float | None = None,
    fast_start: bool | None = None,
) -> bytes:
    """``POST /invocations``'s body: ``speech_protocol``'s synthesis request, validated as the
    server validates it (``SpeechRequestError`` before any request), and the audio format."""
    options = {"voice": voice, "speed": speed, "fast_start": fast_start}
    body: dict[str, Any] = {"text": text} | {k: v for k, v in options.items() if v is not None}
    try:
        request = validate_synthesis_request(body)
    except ProtocolError as refused:
        raise SpeechRequestError(refused.code, refused.message) from None
    return json.dumps(request.model_dump(exclude_none=True) | {"format": audio_format}).encode()


def audio_from_parts(parts: Iterable[bytes], sse: bool) -> Iterator[bytes]:
    """Audio bytes from a stream of delivery chunks; SSE events are reassembled first."""
    if not sse:
        yield from (part for part in parts if part)
        return
    decoder = SseDecoder()
    for event in _sse_events(decoder, parts):
        match event.get("type"):
            case "audio":
                yield base64.b64decode(event["data"])
            case "error":
                raise SpeechServerError(str(event.get("code")), str(event.get("message")))
    if decoder.pending_bytes:
        raise SpeechStreamError("truncated", "the SSE stream ended in the middle of an event")


def _sse_events(decoder: SseDecoder, parts: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    for part in parts:
        yield from decoder.feed(part)
    yield from decoder.end()


class HttpResponseStream:
    def __init__(self, base_url: str, client: httpx.Client | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.Client(timeout=httpx.Timeout(10, read=120))

    def audio(self, text: str, *, sse: bool = False, **options: Any) -> Iterator[bytes]:
        headers = {"content-type": "application/json"}
        if sse:
            headers["accept"] = "text/event-stream"
        request = self._client.build_request(
            "POST",
            f"{self.base_url}/invocations",
            content=invocation_body(text, **options),
            headers=headers,
        )
        try:
            response = self._client.send(request, stream=True)
        except httpx.TransportError as error:
            raise SpeechStreamError("connect_failed", str(error)) from error
        try:
            if response.status_code != 200:
                response.read()
                _raise_error_body(response.content, response.status_code)
            yield from audio_from_parts(response.iter_raw(), sse)
        except httpx.TransportError as error:  # the server aborted the body
            raise SpeechStreamError("connection_closed", str(error)) from error
        finally:
            response.close()


class SageMakerResponseStream:
    def __init__(self, endpoint_name: str, client: Any | None = None) -> None:
        """``client`` is a boto3 ``sagemaker-runtime`` client (default: a new one)."""
        if client is None:
            import boto3

            client = boto3.client("sagemaker-runtime")
        self.endpoint_name = endpoint_name
        self._client = client

    def audio(self, text: str, *, sse: bool = False, **options: Any) -> Iterator[bytes]:
        response = self._client.invoke_endpoint_with_response_stream(
            EndpointName=self.endpoint_name,
            Body=invocation_body(text, **options),
            ContentType="application/json",
            Accept="text/event-stream" if sse else "*/*",
        )
        yield from audio_from_parts(_payload_parts(response["Body"]), sse)


_STREAM_ERRORS = {
    "ModelStreamError": "model_stream_error",
    "InternalStreamFailure": "internal_stream_failure",
}


def _payload_parts(body: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    try:
        yield from _payload_parts_of(body)
    except EventStreamError as error:
        # botocore raises modeled stream exceptions instead of yielding them.
        details = error.response.get("Error", {})
        code = _STREAM_ERRORS.get(details.get("Code", ""), "stream_error")
        raise SpeechStreamError(code, details.get("Message", str(error))) from error


def _payload_parts_of(body: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for event in body:
        if "PayloadPart" in event:
            yield event["PayloadPart"]["Bytes"]
        elif "ModelStreamError" in event:
            raise SpeechStreamError(
                "model_stream_error", event["ModelStreamError"].get("Message", "model failed")
            )
        elif "InternalStreamFailure" in event:
            raise SpeechStreamError(
                "internal_stream_failure",
                event["InternalStreamFailure"].get("Message", "SageMaker's stream failed"),
            )


def _raise_error_body(content: bytes, status: int) -> None:
    try:
        error = json.loads(content)
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = f"http_{status}", content.decode("utf-8", "replace")[:200]
    raise SpeechServerError(code, message)
