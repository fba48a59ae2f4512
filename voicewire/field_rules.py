"""Field rules both wire protocols share, raising pydantic errors whose type is a stable code.

A validator raises ``PydanticCustomError(<ErrorCode value>, ...)``; ``validate_or_raise`` turns
the first error of a failed validation into a ``ProtocolError`` with that code, or with
``invalid_field`` (and a sentence naming the field) for a plain type mismatch.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from pydantic import BaseModel, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

from voicewire.error_codes import ErrorCode, ProtocolError

MIN_SPEED = 0.5  # Kokoro's own range: the model distorts outside it
MAX_SPEED = 2.0


# What a voice cannot say and a person cannot see: control characters (a NUL ends espeak-ng's
# input, and every word after it would be lost), format characters (zero-width spaces, bidi
# overrides, a byte-order mark), private-use and unassigned code points. They are removed before
# synthesis; the zero-width (non-)joiners stay, since Indic and Persian spelling needs them.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn"})
_KEPT_INVISIBLE = frozenset("\t\n\r\u200c\u200d")
_JOINERS = str.maketrans("", "", "\u200c\u200d")


def visible_text(text: str) -> str:
    """``text`` without the characters no voice can say (a control character becomes a space,
    so the words on either side stay apart)."""
    if text.isprintable():  # the common case: nothing to remove, no per-character work
        return text
    kept = []
    for char in text:
        if char in _KEPT_INVISIBLE or unicodedata.category(char) not in _INVISIBLE_CATEGORIES:
            kept.append(char)
        elif unicodedata.category(char) == "Cc":
            kept.append(" ")
    return "".join(kept)


def speakable(text: str, limit: int, missing: ErrorCode, too_long: ErrorCode, name: str) -> str:
    """The text to speak, without invisible characters; refused when nothing is left to say
    or when the text as sent is over ``limit`` characters."""
    visible = visible_text(text)
    if not visible.translate(_JOINERS).strip():
        raise PydanticCustomError(missing.value, f"{name} is empty or only whitespace")
    if len(text) > limit:
        raise PydanticCustomError(
            too_long.value,
            f"{name} has {{length}} characters; the limit is {{limit}}",
            {"length": len(text), "limit": limit},
        )
    return visible


def shown(value: object, limit: int = 40) -> str:
    """A value a client sent, quoted for an error message and cut short, so that an error
    frame never carries a megabyte back."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def speed_in_range(speed: float) -> float:
    if not MIN_SPEED <= speed <= MAX_SPEED:  # also refuses NaN
        raise PydanticCustomError(
            ErrorCode.SPEED_OUT_OF_RANGE.value,
            "speed {speed} is outside {low}..{high}",
            {"speed": speed, "low": MIN_SPEED, "high": MAX_SPEED},
        )
    return float(speed)


def known_voice(voice: str | None, info: ValidationInfo) -> str | None:
    """Checked against ``context={"voices": ...}`` when the validator knows them."""
    voices = (info.context or {}).get("voices")
    if voice is not None and voices is not None and voice not in voices:
        raise PydanticCustomError(
            ErrorCode.UNKNOWN_VOICE.value,
            "voice {voice} is not one of: {voices}",
            {"voice": shown(voice), "voices": ", ".join(sorted(voices))},
        )
    return voice


def validate_or_raise[M: BaseModel](
    model: type[M],
    body: dict[str, Any],
    subject_id: str | None,
    voices: frozenset[str] | None = None,
    missing: dict[str, ErrorCode] | None = None,
) -> M:
    """Validate ``body``; on failure raise one ``ProtocolError`` for its first error.

    ``missing`` maps required fields to the code their absence gets (e.g. text ->
    ``missing_text``); ``subject_id`` (a request or turn id) travels with the error.
    """
    try:
        return model.model_validate(body, context={"voices": voices})
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        kind, field = first["type"], str(first["loc"][0]) if first["loc"] else "message"
        if kind in ErrorCode._value2member_map_:
            raise ProtocolError(ErrorCode(kind), first["msg"], subject_id) from None
        if kind == "missing" and missing and field in missing:
            raise ProtocolError(missing[field], f"message has no '{field}'", subject_id) from None
        raise ProtocolError(
            ErrorCode.INVALID_FIELD,
            f"field '{field}' is invalid: {first['msg']} (got {json_kind(first.get('input'))})",
            subject_id,
        ) from None


def json_kind(value: object) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "an array"
        case dict():
            return "an object"
    return type(value).__name__
