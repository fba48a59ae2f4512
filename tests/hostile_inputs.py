"""Bad input for both wire protocols, as tables: what a careless or hostile client may send, and
the stable error code each must get (``docs/protocol.md``). ``code=None`` marks input that is odd
but valid: it must be answered normally.

The tables are shared by tests/integration/test_hostile_input.py, which sends every row over a
real speech session, over the local stack's client WebSocket, and straight to the message Lambda
handler.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from voicewire.client_protocol import MAX_PROMPT_CHARS
from voicewire.speech_protocol import MAX_REQUEST_ID_CHARS, MAX_TEXT_CHARS


@dataclass(frozen=True)
class Hostile:
    name: str
    frame: str | bytes
    code: str | None  # None: valid, answered normally

    def __str__(self) -> str:
        return self.name


def _json(**fields: object) -> str:
    return json.dumps(fields)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# A text at the limit that is quick to speak: the limit counts what was sent, spaces included.
_AT_TEXT_LIMIT = " " * (MAX_TEXT_CHARS - 3) + "Hi."
_AT_PROMPT_LIMIT = " " * (MAX_PROMPT_CHARS - 3) + "Hi?"

SPEECH_LINK: list[Hostile] = [
    # encoding and framing
    Hostile("invalid UTF-8", b"\xff\xfe\xfd", "invalid_utf8"),
    Hostile("UTF-8 cut inside a character", b'{"text": "caf\xc3', "invalid_utf8"),
    Hostile("lone surrogate in text", '{"text": "Hi \\ud800 there."}', "invalid_utf8"),
    Hostile("lone surrogate in a key", '{"text": "Hi.", "\\udfff": 1}', "invalid_utf8"),
    Hostile("empty frame", "", "invalid_json"),
    Hostile("whitespace frame", " \n\t ", "invalid_json"),
    Hostile("plain words", "hello there", "invalid_json"),
    Hostile("truncated JSON", '{"text": "Hi', "invalid_json"),
    Hostile("array nested 50,000 deep", _nested(50_000), "invalid_json"),
    Hostile(
        "object nested 5,000 deep in a request",
        '{"text": "Hi.", "x": ' + _nested(5_000) + "}",
        "invalid_json",
    ),
    Hostile(
        "a 5,000-digit number", '{"text": "Hi.", "speed": ' + "1" * 5_000 + "}", "invalid_json"
    ),
    Hostile("NaN", '{"text": "Hi.", "speed": NaN}', "invalid_json"),
    Hostile("Infinity", '{"text": "Hi.", "speed": -Infinity}', "invalid_json"),
    Hostile("duplicate key", '{"text": "Hi.", "text": ""}', "invalid_json"),
    Hostile("message over 128 KB", _json(text="Hi.", pad="x" * 140_000), "message_too_large"),
    # not an object
    Hostile("JSON array", '["text", "Hi."]', "not_an_object"),
    Hostile("JSON string", '"Hi."', "not_an_object"),
    Hostile("JSON number", "42", "not_an_object"),
    Hostile("JSON null", "null", "not_an_object"),
    Hostile("JSON true", "true", "not_an_object"),
    # text
    Hostile("empty object", "{}", "missing_text"),
    Hostile("text null", _json(text=None), "invalid_field"),
    Hostile("text a number", _json(text=42), "invalid_field"),
    Hostile("text an array", _json(text=["Hi."]), "invalid_field"),
    Hostile("text an object", _json(text={"t": "Hi."}), "invalid_field"),
    Hostile("text empty", _json(text=""), "missing_text"),
    Hostile("text only whitespace", _json(text=" \u3000\n\t\xa0"), "missing_text"),
    Hostile("text only zero-width characters", _json(text="\u200b\u200d\ufeff"), "missing_text"),
    Hostile("text only control characters", _json(text="\x00\x07\x1b"), "missing_text"),
    Hostile("text only private-use characters", _json(text="\ue000\uf8ff"), "missing_text"),
    Hostile("text one over the limit", _json(text="x" * (MAX_TEXT_CHARS + 1)), "text_too_long"),
    Hostile("text at the limit", _json(text=_AT_TEXT_LIMIT), None),
    Hostile("control characters inside text", _json(text="Hello\x00 there\x07 friend."), None),
    Hostile("right-to-left text", _json(text="\u202eمرحبا."), None),
    Hostile("zero-width characters inside text", _json(text="Hel\u200blo the\u200dre."), None),
    Hostile("emoji only", _json(text="🎉👍🏽"), None),
    Hostile("a lone combining accent", _json(text="\u0301"), None),
    # voice
    Hostile("unknown voice", _json(text="Hi.", voice="nobody"), "unknown_voice"),
    Hostile("empty voice", _json(text="Hi.", voice=""), "unknown_voice"),
    Hostile("voice a number", _json(text="Hi.", voice=7), "invalid_field"),
    Hostile("voice 100 KB long", _json(text="Hi.", voice="v" * 100_000), "unknown_voice"),
    # speed
    Hostile("speed 0", _json(text="Hi.", speed=0), "speed_out_of_range"),
    Hostile("speed negative", _json(text="Hi.", speed=-1.0), "speed_out_of_range"),
    Hostile("speed 1e400 (infinity)", '{"text": "Hi.", "speed": 1e400}', "speed_out_of_range"),
    Hostile("speed huge", _json(text="Hi.", speed=1e9), "speed_out_of_range"),
    Hostile("speed a string", _json(text="Hi.", speed="1.0"), "invalid_field"),
    Hostile("speed a boolean", _json(text="Hi.", speed=True), "invalid_field"),
    Hostile("speed null", _json(text="Hi.", speed=None), "invalid_field"),
    # other fields
    Hostile("fast_start a string", _json(text="Hi.", fast_start="yes"), "invalid_field"),
    Hostile("fast_start a number", _json(text="Hi.", fast_start=1), "invalid_field"),
    Hostile("request_id empty", _json(text="Hi.", request_id=""), "invalid_field"),
    Hostile(
        "request_id over 128 characters",
        _json(text="Hi.", request_id="r" * (MAX_REQUEST_ID_CHARS + 1)),
        "invalid_field",
    ),
    Hostile("request_id a number", _json(text="Hi.", request_id=7), "invalid_field"),
    # type
    Hostile("unknown type", _json(type="dance", request_id="d1"), "unknown_type"),
    Hostile("type a number", _json(type=5, text="Hi."), "unknown_type"),
    Hostile("type 100 KB long", _json(type="t" * 100_000), "unknown_type"),
    Hostile(
        "cancel of an unknown request",
        _json(type="cancel", request_id="nope"),
        "unknown_request_id",
    ),
    Hostile(
        "cancel with a numeric request_id", _json(type="cancel", request_id=5), "invalid_field"
    ),
    Hostile("ping with an array request_id", _json(type="ping", request_id=["p"]), "invalid_field"),
]

CLIENT_LINK: list[Hostile] = [
    # framing (text frames: a binary frame, invalid UTF-8 and oversized frames close the
    # connection at the gateway, and are tested on their own)
    Hostile("empty message", "", "invalid_json"),
    Hostile("whitespace message", "  \n ", "invalid_json"),
    Hostile("plain words", "hello", "invalid_json"),
    Hostile("truncated JSON", '{"action": "speak", "text": "Hi', "invalid_json"),
    Hostile("array nested 15,000 deep", _nested(15_000), "invalid_json"),
    Hostile(
        "object nested 5,000 deep in a speak",
        '{"action": "speak", "text": "Hi.", "x": ' + _nested(5_000) + "}",
        "invalid_json",
    ),
    Hostile(
        "a 5,000-digit number",
        '{"action": "speak", "text": "Hi.", "speed": ' + "9" * 5_000 + "}",
        "invalid_json",
    ),
    Hostile("NaN", '{"action": "speak", "text": "Hi.", "speed": NaN}', "invalid_json"),
    Hostile(
        "duplicate action key",
        '{"action": "speak", "action": "ask", "prompt": "Hi"}',
        "invalid_json",
    ),
    Hostile("lone surrogate in text", '{"action": "speak", "text": "\\ud83d."}', "invalid_utf8"),
    Hostile(
        "lone surrogate in a voice",
        '{"action": "speak", "text": "Hi.", "voice": "\\udc00"}',
        "invalid_utf8",
    ),
    # not an object
    Hostile("JSON array", '[{"action": "speak"}]', "not_an_object"),
    Hostile("JSON string", '"speak"', "not_an_object"),
    Hostile("JSON number", "7", "not_an_object"),
    Hostile("JSON null", "null", "not_an_object"),
    # action
    Hostile("empty object", "{}", "unknown_action"),
    Hostile("action null", _json(action=None), "unknown_action"),
    Hostile("action a number", _json(action=7), "unknown_action"),
    Hostile("unknown action", _json(action="dance"), "unknown_action"),
    Hostile("action in capitals", _json(action="SPEAK", text="Hi."), "unknown_action"),
    Hostile("action 20 KB long", _json(action="a" * 20_000), "unknown_action"),
    # ask
    Hostile("ask without a prompt", _json(action="ask"), "missing_prompt"),
    Hostile("ask with an empty prompt", _json(action="ask", prompt=""), "missing_prompt"),
    Hostile("ask with a whitespace prompt", _json(action="ask", prompt=" \t\n"), "missing_prompt"),
    Hostile(
        "ask with a zero-width prompt", _json(action="ask", prompt="\u200b\u2060"), "missing_prompt"
    ),
    Hostile(
        "ask with a prompt over the limit",
        _json(action="ask", prompt="x" * (MAX_PROMPT_CHARS + 1)),
        "prompt_too_long",
    ),
    Hostile("ask with a numeric prompt", _json(action="ask", prompt=5), "invalid_field"),
    Hostile("ask with a list prompt", _json(action="ask", prompt=["Hi"]), "invalid_field"),
    Hostile(
        "ask with an unknown mode", _json(action="ask", prompt="Hi", mode="fast"), "invalid_mode"
    ),
    Hostile("ask with a numeric mode", _json(action="ask", prompt="Hi", mode=1), "invalid_field"),
    Hostile(
        "ask with unknown text_deltas",
        _json(action="ask", prompt="Hi", text_deltas="all"),
        "invalid_field",
    ),
    # speak
    Hostile("speak without text", _json(action="speak"), "missing_text"),
    Hostile("speak with empty text", _json(action="speak", text=""), "missing_text"),
    Hostile(
        "speak with control characters only",
        _json(action="speak", text="\x00\x01\x7f"),
        "missing_text",
    ),
    Hostile(
        "speak with text over the limit",
        _json(action="speak", text="x" * (MAX_TEXT_CHARS + 1)),
        "text_too_long",
    ),
    Hostile(
        "speak with an unknown voice",
        _json(action="speak", text="Hi.", voice="nobody"),
        "unknown_voice",
    ),
    Hostile(
        "speak with a numeric voice", _json(action="speak", text="Hi.", voice=7), "invalid_field"
    ),
    Hostile("speak at speed 0", _json(action="speak", text="Hi.", speed=0), "speed_out_of_range"),
    Hostile(
        "speak at a negative speed",
        _json(action="speak", text="Hi.", speed=-2),
        "speed_out_of_range",
    ),
    Hostile(
        "speak at speed 1e400",
        '{"action": "speak", "text": "Hi.", "speed": 1e400}',
        "speed_out_of_range",
    ),
    Hostile(
        "speak at a huge speed", _json(action="speak", text="Hi.", speed=1e12), "speed_out_of_range"
    ),
    Hostile(
        "speak with a string speed",
        _json(action="speak", text="Hi.", speed="fast"),
        "invalid_field",
    ),
    Hostile(
        "speak with a boolean speed", _json(action="speak", text="Hi.", speed=True), "invalid_field"
    ),
    # turn_id
    Hostile("empty turn_id", _json(action="speak", text="Hi.", turn_id=""), "invalid_field"),
    Hostile(
        "turn_id with spaces", _json(action="speak", text="Hi.", turn_id="my turn"), "invalid_field"
    ),
    Hostile(
        "turn_id of 65 characters",
        _json(action="speak", text="Hi.", turn_id="t" * 65),
        "invalid_field",
    ),
    Hostile("numeric turn_id", _json(action="speak", text="Hi.", turn_id=12), "invalid_field"),
    Hostile(
        "turn_id with a newline", _json(action="ask", prompt="Hi", turn_id="t\n1"), "invalid_field"
    ),
    # cancel
    Hostile("cancel with nothing running", _json(action="cancel"), "unknown_turn"),
    Hostile("cancel of an unknown turn", _json(action="cancel", turn_id="t-nope"), "unknown_turn"),
    Hostile(
        "cancel with a malformed turn_id",
        _json(action="cancel", turn_id="../../etc"),
        "invalid_field",
    ),
    # odd but valid
    Hostile("voices with extra fields", _json(action="voices", please=True), None),
    Hostile("speak with emoji only", _json(action="speak", text="🎉🎉"), None),
    Hostile("speak with right-to-left marks", _json(action="speak", text="\u200fHi there."), None),
]
