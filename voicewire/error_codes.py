"""Stable error codes, for both wire protocols, and the exception that carries one.

Clients branch on these codes: never rename or reuse one. ``docs/protocol.md`` lists when each is
sent.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Stable error codes. Clients branch on these; never rename one."""

    INVALID_UTF8 = "invalid_utf8"
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    UNKNOWN_TYPE = "unknown_type"
    MISSING_TEXT = "missing_text"
    TEXT_TOO_LONG = "text_too_long"
    UNKNOWN_VOICE = "unknown_voice"
    SPEED_OUT_OF_RANGE = "speed_out_of_range"
    INVALID_FIELD = "invalid_field"
    UNSUPPORTED_FORMAT = "unsupported_format"
    DUPLICATE_REQUEST_ID = "duplicate_request_id"
    UNKNOWN_REQUEST_ID = "unknown_request_id"
    TOO_MANY_PENDING = "too_many_pending"
    MODEL_LOADING = "model_loading"
    MODEL_LOAD_FAILED = "model_load_failed"
    SYNTHESIS_FAILED = "synthesis_failed"
    SPEECH_BUSY = "speech_busy"  # both links: a new answer the speech engine cannot speak in time
    # client link (API Gateway WebSocket API)
    UNKNOWN_ACTION = "unknown_action"
    MISSING_PROMPT = "missing_prompt"
    PROMPT_TOO_LONG = "prompt_too_long"
    INVALID_MODE = "invalid_mode"
    MESSAGE_TOO_LARGE = "message_too_large"
    UNKNOWN_TURN = "unknown_turn"
    LLM_THROTTLED = "llm_throttled"
    LLM_FAILED = "llm_failed"
    SPEECH_FAILED = "speech_failed"
    INTERNAL_ERROR = "internal_error"
    DELIVERY_FAILED = "delivery_failed"
    WORKER_UNAVAILABLE = "worker_unavailable"
    TURN_TIMED_OUT = "turn_timed_out"
    TURN_EXPIRED = "turn_expired"
    STATE_UNAVAILABLE = "state_unavailable"
    TOO_MANY_TURNS = "too_many_turns"
    SPEECH_LIMIT_REACHED = "speech_limit_reached"
    INVALID_HEARD_MS = "invalid_heard_ms"
    # speech in (the ``listen`` action)
    LISTEN_UNAVAILABLE = "listen_unavailable"
    UNSUPPORTED_LANGUAGE = "unsupported_language"
    TOO_MANY_LISTENS = "too_many_listens"
    LISTEN_FAILED = "listen_failed"  # for a moment: AWS refused the credentials to sign with


class ProtocolError(Exception):
    """Bad input, carrying the stable code and a sentence for a person.

    ``request_id`` is set when the offending message named one, so the client can match the error
    to what it sent.
    """

    def __init__(self, code: ErrorCode, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id
