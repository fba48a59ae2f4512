"""Typed failures of a speech session; each carries a stable ``code``."""

from __future__ import annotations


class SpeechSessionError(Exception):
    def __init__(self, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.request_id = request_id


class SpeechServerError(SpeechSessionError):
    """The server answered a request with an ``error`` frame (``code`` is the server's)."""


class SpeechStreamError(SpeechSessionError):
    """The stream itself failed: ``model_stream_error`` and ``internal_stream_failure`` (from
    SageMaker), ``connection_closed`` (the server went away), ``connect_failed``,
    ``response_timeout`` (a request's next event did not come in time: a stalled server)."""


class SpeechRequestError(SpeechSessionError):
    """A text the session refused to send: the code the server would have answered with
    (``missing_text``, ``text_too_long``, ``speed_out_of_range``...), known before any round trip.
    Nothing was sent or queued; the session goes on."""
