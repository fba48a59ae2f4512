"""Parsing client-link actions (``parse_action``) into models or stable error codes, without a
gateway: the limits and field rules of docs/protocol.md's client link, each at its edge."""

from __future__ import annotations

import json

import pytest

from voicewire.client_protocol import (
    MAX_MESSAGE_BYTES,
    MAX_PROMPT_CHARS,
    AskAction,
    CancelAction,
    SpeakAction,
    parse_action,
)
from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.speech_protocol import MAX_TEXT_CHARS

VOICES = frozenset({"af_heart", "bf_emma"})
VALID = {
    "ask": {
        "action": "ask",
        "prompt": "Hi?",
        "mode": "bidi",
        "voice": "af_heart",
        "speed": 1.0,
        "turn_id": "t-1",
        "text_deltas": "live",
    },
    "speak": {
        "action": "speak",
        "text": "Hi.",
        "voice": "af_heart",
        "speed": 1.0,
        "turn_id": "t-1",
    },
    "cancel": {"action": "cancel", "turn_id": "t-1"},
}


def refused(body: dict | str) -> ProtocolError:
    raw = body if isinstance(body, str) else json.dumps(body)
    with pytest.raises(ProtocolError) as raised:
        parse_action(raw, VOICES)
    return raised.value


def test_the_valid_actions_parse_with_every_field():
    assert parse_action(json.dumps(VALID["ask"]), VOICES) == AskAction(**VALID["ask"])
    assert parse_action(json.dumps(VALID["speak"]), VOICES) == SpeakAction(**VALID["speak"])
    assert parse_action(json.dumps(VALID["cancel"]), VOICES) == CancelAction(**VALID["cancel"])


# --- turn_id -----------------------------------------------------------------------------------

MALFORMED_TURN_IDS = ["", "t" * 65, "has space", "semi;colon", "slash/", "ünïcode", "new\nline"]


@pytest.mark.parametrize("action", ["ask", "speak", "cancel"])
@pytest.mark.parametrize("turn_id", MALFORMED_TURN_IDS, ids=repr)
def test_a_malformed_turn_id_is_invalid_field_and_not_echoed(action, turn_id):
    error = refused(VALID[action] | {"turn_id": turn_id})
    assert error.code == ErrorCode.INVALID_FIELD and "turn_id" in error.message
    assert error.request_id is None  # a malformed id is never sent back as the error's turn_id


@pytest.mark.parametrize("action", ["ask", "speak", "cancel"])
@pytest.mark.parametrize("turn_id", ["t" * 64, "Az09._:-"])
def test_a_turn_id_at_the_edges_of_its_rule_is_accepted(action, turn_id):
    assert parse_action(json.dumps(VALID[action] | {"turn_id": turn_id}), VOICES).turn_id == (
        turn_id
    )


# --- prompt and text lengths -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "field", "limit", "too_long"),
    [
        ("ask", "prompt", MAX_PROMPT_CHARS, ErrorCode.PROMPT_TOO_LONG),
        ("speak", "text", MAX_TEXT_CHARS, ErrorCode.TEXT_TOO_LONG),
    ],
)
def test_a_prompt_or_text_one_character_over_its_limit_is_refused(action, field, limit, too_long):
    at_limit = parse_action(json.dumps(VALID[action] | {field: "x" * limit}), VOICES)
    assert len(getattr(at_limit, field)) == limit
    error = refused(VALID[action] | {field: "x" * (limit + 1)})
    assert (
        error.code == too_long and str(limit) in error.message and str(limit + 1) in error.message
    )
    assert error.request_id == "t-1"  # the error names the turn it refused


@pytest.mark.parametrize(
    ("action", "field", "missing"),
    [("ask", "prompt", ErrorCode.MISSING_PROMPT), ("speak", "text", ErrorCode.MISSING_TEXT)],
)
@pytest.mark.parametrize("value", [None, "", " \n\t "], ids=["absent", "empty", "blank"])
def test_a_missing_or_blank_prompt_or_text_has_its_own_code(action, field, missing, value):
    body = {key: v for key, v in VALID[action].items() if key != field}
    if value is not None:
        body[field] = value
    assert refused(body).code == missing


# --- the message size --------------------------------------------------------------------------


def padded(size: int) -> str:
    """A valid ``voices`` action of exactly ``size`` bytes (unknown fields are ignored)."""
    envelope = len(json.dumps({"action": "voices", "pad": ""}))
    body = json.dumps({"action": "voices", "pad": "x" * (size - envelope)})
    assert len(body.encode()) == size
    return body


def test_a_message_of_exactly_128_kb_is_parsed():
    assert parse_action(padded(MAX_MESSAGE_BYTES)).action == "voices"


def test_a_message_one_byte_over_128_kb_is_message_too_large():
    error = refused(padded(MAX_MESSAGE_BYTES + 1))
    assert error.code == ErrorCode.MESSAGE_TOO_LARGE and "128 KB" in error.message


def test_the_message_limit_counts_utf8_bytes_not_characters():
    euros = "€" * (MAX_MESSAGE_BYTES // 3 + 1)  # 3 UTF-8 bytes each
    body = json.dumps({"action": "voices", "pad": euros}, ensure_ascii=False)
    assert len(body) < MAX_MESSAGE_BYTES < len(body.encode())
    assert refused(body).code == ErrorCode.MESSAGE_TOO_LARGE


def test_the_size_is_checked_before_the_json():
    assert refused("x" * (MAX_MESSAGE_BYTES + 1)).code == ErrorCode.MESSAGE_TOO_LARGE
    assert refused("x" * MAX_MESSAGE_BYTES).code == ErrorCode.INVALID_JSON


# --- field types -------------------------------------------------------------------------------

# Each field of each action with values of every wrong JSON type: strings (prompt, text, voice,
# mode, turn_id, text_deltas) and a number (speed: strictly, so "1.0" and true are refused).
WRONG_TYPES = {
    "prompt": [7, 1.5, True, None, ["Hi?"], {}],
    "text": [7, 1.5, True, None, ["Hi."], {}],
    "voice": [7, True, ["af_heart"], {}],
    "speed": ["1.0", True, None, [1.0], {}],
    "mode": [7, True, None, ["bidi"], {}],
    "turn_id": [7, 1.5, True, ["t-1"], {}],
    "text_deltas": [7, True, None, ["live"], {}],
}
FIELDS_OF = {
    "ask": ("prompt", "voice", "speed", "mode", "turn_id", "text_deltas"),
    "speak": ("text", "voice", "speed", "turn_id"),
    "cancel": ("turn_id",),
}


@pytest.mark.parametrize(
    ("action", "field", "value"),
    [
        (action, field, value)
        for action, fields in FIELDS_OF.items()
        for field in fields
        for value in WRONG_TYPES[field]
    ],
)
def test_a_field_of_the_wrong_type_is_invalid_field_naming_it(action, field, value):
    error = refused(VALID[action] | {field: value})
    assert error.code == ErrorCode.INVALID_FIELD
    assert field in error.message
    assert error.request_id == (None if field == "turn_id" else "t-1")


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("mode", "fast", ErrorCode.INVALID_MODE),
        ("text_deltas", "every-token", ErrorCode.INVALID_FIELD),
        ("voice", "nobody", ErrorCode.UNKNOWN_VOICE),
        ("speed", 2.01, ErrorCode.SPEED_OUT_OF_RANGE),
        ("speed", 0.49, ErrorCode.SPEED_OUT_OF_RANGE),
    ],
)
def test_a_string_or_number_outside_its_set_has_its_own_code(field, value, code):
    assert refused(VALID["ask"] | {field: value}).code == code


# --- heard_ms, word_timings, history (issue 28) ------------------------------------------------


@pytest.mark.parametrize("action", ["ask", "speak", "cancel"])
@pytest.mark.parametrize("heard_ms", [0, 1250, 1250.5])
def test_heard_ms_is_a_number_of_milliseconds_from_zero(action, heard_ms):
    parsed = parse_action(json.dumps(VALID[action] | {"heard_ms": heard_ms}), VOICES)
    assert parsed.heard_ms == heard_ms and isinstance(parsed.heard_ms, float)
    assert parse_action(json.dumps(VALID[action]), VOICES).heard_ms is None
    # null is "not given", like leaving the field out
    assert parse_action(json.dumps(VALID[action] | {"heard_ms": None}), VOICES).heard_ms is None


@pytest.mark.parametrize("action", ["ask", "speak", "cancel"])
@pytest.mark.parametrize("heard_ms", [-1, -0.001, "1250", True, [1], {"ms": 1}])
def test_a_bad_heard_ms_is_invalid_heard_ms_naming_the_value(action, heard_ms):
    error = refused(VALID[action] | {"heard_ms": heard_ms})
    assert error.code == ErrorCode.INVALID_HEARD_MS and "heard_ms" in error.message
    assert error.request_id == "t-1"  # the turn it was about


def test_a_nan_or_infinite_heard_ms_is_refused_whatever_parsed_it():
    assert refused('{"action": "cancel", "heard_ms": NaN}').code == ErrorCode.INVALID_JSON
    for value in (float("nan"), float("inf")):  # a lenient parser's numbers, given directly
        with pytest.raises(ValueError, match="heard_ms"):
            CancelAction(action="cancel", heard_ms=value)


def test_word_timings_are_on_unless_turned_off_and_must_be_a_boolean():
    assert parse_action(json.dumps(VALID["ask"]), VOICES).word_timings is True
    off = parse_action(json.dumps(VALID["speak"] | {"word_timings": False}), VOICES)
    assert off.word_timings is False
    assert refused(VALID["ask"] | {"word_timings": "no"}).code == ErrorCode.INVALID_FIELD


def test_history_is_an_action_and_is_routed():
    from voicewire.client_protocol import CLIENT_ACTIONS, HistoryAction

    assert parse_action('{"action": "history"}') == HistoryAction(action="history")
    assert "history" in CLIENT_ACTIONS  # API Gateway's routes and the local gateway's
