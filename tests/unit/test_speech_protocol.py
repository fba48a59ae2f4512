"""Parsing speech-link messages into models or stable error codes, without a server."""

from __future__ import annotations

import json

import pytest

from voicewire.speech_protocol import (
    MAX_REQUEST_ID_CHARS,
    CancelMessage,
    CloseMessage,
    ErrorCode,
    ProtocolError,
    SynthesisRequest,
    parse_client_message,
)

VOICES = frozenset({"jm_kumo", "jf_alpha"})


def test_text_and_binary_frames_parse_the_same():
    text = '{"text": "Hi.", "voice": "jf_alpha", "speed": 1.25, "request_id": "r1"}'
    assert parse_client_message(text, VOICES) == parse_client_message(text.encode(), VOICES)
    request = parse_client_message(text, VOICES)
    assert request == SynthesisRequest(text="Hi.", voice="jf_alpha", speed=1.25, request_id="r1")
    assert request.fast_start is True


def test_integers_are_valid_speeds_and_unknown_fields_are_ignored():
    request = parse_client_message('{"text": "Hi.", "speed": 2, "future_field": 1}', VOICES)
    assert request.speed == 2.0


def test_cancel_and_close_messages():
    assert parse_client_message('{"type": "cancel", "request_id": "r9"}') == CancelMessage(
        type="cancel", request_id="r9"
    )
    assert parse_client_message('{"type": "cancel"}').request_id is None
    assert isinstance(parse_client_message('{"type": "close"}'), CloseMessage)


def test_without_a_voice_list_any_voice_is_accepted():
    assert parse_client_message('{"text": "Hi.", "voice": "af_heart"}').voice == "af_heart"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ('{"text": "Hi.", "speed": NaN}', ErrorCode.INVALID_JSON),  # not JSON: RFC 8259 has no NaN
        ('{"text": "Hi.", "speed": 1e400}', ErrorCode.SPEED_OUT_OF_RANGE),  # infinity
        ('{"text": "Hi.", "speed": true}', ErrorCode.INVALID_FIELD),
        ('{"text": "Hi.", "request_id": ""}', ErrorCode.INVALID_FIELD),
        ('{"text": "Hi.", "request_id": 7}', ErrorCode.INVALID_FIELD),
        ('{"text": "Hi.", "voice": 7}', ErrorCode.INVALID_FIELD),
        ('{"type": "cancel", "request_id": 5}', ErrorCode.INVALID_FIELD),
        ('{"type": null, "text": ""}', ErrorCode.MISSING_TEXT),
        ("null", ErrorCode.NOT_AN_OBJECT),
    ],
)
def test_edge_cases_map_to_stable_codes(raw, code):
    with pytest.raises(ProtocolError) as raised:
        parse_client_message(raw, VOICES)
    assert raised.value.code == code
    assert "pydantic" not in raised.value.message.lower()


# Every field of a synthesis request, with values of each wrong JSON type. The right types:
# text and voice strings, speed a number, request_id a 1..128-character string, fast_start a
# boolean (strictly: 1 and "true" are not booleans, true is not a number).
WRONG_TYPES = {
    "text": [7, 1.5, True, None, [], {}],
    "voice": [7, True, [], {"name": "jf_alpha"}],
    "speed": ["1.0", True, None, [], {}],
    "request_id": [7, True, [], {}, "", "r" * (MAX_REQUEST_ID_CHARS + 1)],
    "fast_start": ["true", 1, 0, None, [], {}],
}


@pytest.mark.parametrize(
    ("field", "value"),
    [(field, value) for field, values in WRONG_TYPES.items() for value in values],
    ids=lambda item: item if isinstance(item, str) and len(item) < 20 else None,
)
def test_a_synthesis_field_of_the_wrong_type_is_invalid_field_naming_it(field, value):
    body = {"text": "Hi.", "voice": "jf_alpha", "speed": 1.0, "request_id": "r1"} | {field: value}
    with pytest.raises(ProtocolError) as raised:
        parse_client_message(json.dumps(body), VOICES)
    assert raised.value.code == ErrorCode.INVALID_FIELD
    assert f"'{field}'" in raised.value.message
    # The id travels with the error only when it was a valid one.
    assert raised.value.request_id == (None if field == "request_id" else "r1")


@pytest.mark.parametrize("kind", ["cancel", "ping"])
@pytest.mark.parametrize("value", [7, "", "r" * (MAX_REQUEST_ID_CHARS + 1)])
def test_cancel_and_ping_refuse_a_malformed_request_id(kind, value):
    with pytest.raises(ProtocolError) as raised:
        parse_client_message(json.dumps({"type": kind, "request_id": value}))
    assert raised.value.code == ErrorCode.INVALID_FIELD and raised.value.request_id is None


def test_a_request_id_of_exactly_the_limit_is_accepted():
    longest = "r" * MAX_REQUEST_ID_CHARS
    assert parse_client_message(json.dumps({"text": "Hi.", "request_id": longest})).request_id == (
        longest
    )
    cancel = parse_client_message(json.dumps({"type": "cancel", "request_id": longest}))
    assert cancel.request_id == longest
