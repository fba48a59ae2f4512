"""The control-frame rule: a frame is control only if the whole of it is a JSON object."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from voicewire.control_frame import decode_control_frame


def test_a_json_object_is_a_control_frame():
    frame = {"type": "synthesis_complete", "request_id": "r1", "audio_bytes": 9600}
    assert decode_control_frame(json.dumps(frame).encode()) == frame
    assert decode_control_frame(b' \n{"type": "error"}') == {"type": "error"}


def test_pcm_that_begins_with_an_open_brace_stays_audio():
    pcm = np.array([0x227B, -1, 0x7FFF, 12], dtype="<i2").tobytes()  # starts with 0x7b, '{'
    assert pcm[:1] == b"{"
    assert decode_control_frame(pcm) is None


def test_other_json_and_non_json_are_audio():
    for frame in [b"[1, 2]", b'"text"', b"42", b"null", b"{", b"{not json}", b"", b"\xff\xfe{}"]:
        assert decode_control_frame(frame) is None, frame


def test_silence_is_audio_even_though_it_is_valid_utf8():
    assert decode_control_frame(bytes(9600)) is None


@given(st.binary(min_size=1, max_size=2000))
def test_random_audio_starting_with_a_brace_is_audio_unless_it_is_a_json_object(tail):
    frame = b"{" + tail
    decoded = decode_control_frame(frame)
    if decoded is not None:  # only if the bytes really are a JSON object
        assert json.loads(frame.decode("utf-8")) == decoded


@given(st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=20), max_size=5))
def test_every_json_object_is_control(payload):
    assert decode_control_frame(json.dumps(payload).encode()) == payload
