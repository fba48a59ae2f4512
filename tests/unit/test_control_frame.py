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


def json_object_or_none(frame: bytes) -> dict | None:
    """The rule, spelled out as its definition: the whole frame, as UTF-8, is a JSON object."""
    try:
        decoded = json.loads(frame.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return decoded if isinstance(decoded, dict) else None


@given(
    st.lists(st.integers(-32768, 32767), min_size=100, max_size=2000),
    st.integers(0, 255),
)
def test_pcm_is_audio_even_when_it_starts_with_a_brace(samples, high_byte):
    # The first sample's low byte is "{" (0x7b): the fast path cannot tell it from JSON.
    samples[0] = np.int16(np.uint16(0x7B | high_byte << 8).view(np.int16))
    frame = np.array(samples, dtype="<i2").tobytes()
    assert frame[:1] == b"{"
    assert decode_control_frame(frame) is json_object_or_none(frame) is None


@given(
    st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=20), max_size=5),
    st.sampled_from(["", " ", "\n", " \t"]),
    st.none() | st.integers(0, 200),
    st.none() | st.binary(min_size=1, max_size=3),
)
def test_a_json_object_damaged_anywhere_is_control_only_if_still_a_json_object(
    payload, leading, cut, inserted
):
    frame = (leading + json.dumps(payload)).encode()
    if cut is not None:  # truncated, or something spliced in, at any point
        cut = cut % (len(frame) + 1)
        frame = frame[:cut] + (inserted or b"") + frame[cut + (0 if inserted else 1) :]
    decoded = decode_control_frame(frame)
    assert decoded == json_object_or_none(frame)
    if cut is None:
        assert decoded == payload  # undamaged: always control


@given(st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=20), max_size=5))
def test_every_json_object_is_control(payload):
    assert decode_control_frame(json.dumps(payload).encode()) == payload
