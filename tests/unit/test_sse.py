"""SSE framing: events split across any delivery boundaries decode once, whole."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from voicewire.sse import SseDecoder, encode_sse_event

PAYLOADS = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["audio", "synthesis_complete"]),
            "seq": st.integers(0, 10_000),
            "data": st.binary(max_size=300).map(lambda b: base64.b64encode(b).decode()),
            "note": st.text(max_size=20),  # any Unicode, including multi-byte characters
        }
    ),
    max_size=8,
)


@given(PAYLOADS, st.lists(st.integers(1, 64), max_size=50))
def test_events_survive_any_split_into_delivery_chunks(payloads, cuts):
    stream = b"".join(encode_sse_event(payload) for payload in payloads)
    decoder, events, position = SseDecoder(), [], 0
    for size in cuts:
        events += decoder.feed(stream[position : position + size])
        position += size
    events += decoder.feed(stream[position:])
    assert events == payloads
    assert decoder.pending_bytes == 0


def test_a_multibyte_character_split_across_chunks_decodes_once_whole():
    stream = encode_sse_event({"note": "caf\u00e9 \u2603"})
    split = stream.index("\u00e9".encode()) + 1  # inside the two bytes of "é"
    decoder = SseDecoder()
    assert decoder.feed(stream[:split]) == []
    assert decoder.feed(stream[split:]) == [{"note": "caf\u00e9 \u2603"}]


def test_comments_and_crlf_are_tolerated_and_a_truncated_tail_is_visible():
    decoder = SseDecoder()
    events = decoder.feed(b': keep-alive\r\n\r\ndata: {"a": 1}\r\n\r\ndata: {"b"')
    assert events == [{"a": 1}]
    assert decoder.pending_bytes > 0  # the caller can tell the stream ended mid-event
