"""Parsing speech-link messages into models or stable error codes, without a server."""

from __future__ import annotations

import pytest

from voicewire.speech_protocol import (
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
        ('{"text": "Hi.", "speed": NaN}', ErrorCode.SPEED_OUT_OF_RANGE),
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
