"""Every reader of the speech output, against frames and streams cut at any byte.

SageMaker may deliver a container frame as several ``PARTIAL`` response parts, and a response
stream's ``PayloadPart``s or an HTTP body's chunks fall wherever they fall: inside a multi-byte
UTF-8 character, inside a CRLF, 1 byte at a time. Each reader must give back exactly what was
sent, whatever the cuts:

- the local runtime's cutter itself (``partial_parts``), which the other tests rely on;
- ``SageMakerTransport.receive`` joining PARTIAL parts: from the SDK's event objects, and end
  to end through the local runtime cutting at random from a seed;
- the response-stream client (``response_stream``): ``InvokeEndpointWithResponseStream``'s
  ``PayloadPart`` bytes through boto3's own event-stream parsing, raw audio and SSE;
- the SSE decoder (``voicewire.sse``), with LF, CRLF and lone-CR line ends.
"""

from __future__ import annotations

import base64
import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import httpx
import pytest
from aws_sdk_sagemaker_runtime_http2.models import (
    ResponsePayloadPart,
    ResponseStreamEventPayloadPart,
)
from botocore.awsrequest import AWSResponse
from eventstream_encoding import RawEventStream, payload_part
from hypothesis import given
from hypothesis import strategies as st

from voicewire.speech_link.sagemaker_transport import SageMakerTransport
from voicewire.sse import SseDecoder, encode_sse_event
from voicewire_tools.local_stack.partial_parts import FragmentPolicy, RandomCuts, pieces
from voicewire_tools.response_stream import HttpResponseStream, SageMakerResponseStream

Frame = str | bytes


# Frames as a container sends them: text or bytes, any number.
FRAMES = st.lists(st.one_of(st.text(max_size=40), st.binary(max_size=300)), max_size=8)


def cut(data: bytes, at: set[int] | list[int]) -> list[bytes]:
    """``data`` cut at the offsets in ``at`` (those strictly inside it)."""
    bounds = [0, *sorted(point for point in at if 0 < point < len(data)), len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


def cut_points(data: bytes) -> st.SearchStrategy[set[int]]:
    """Any set of cut points, as likely to be next to each other or at either end as not."""
    if len(data) < 2:
        return st.just(set())
    anywhere = st.integers(1, len(data) - 1)
    return st.sets(st.one_of(anywhere, st.sampled_from([1, len(data) - 1])), max_size=12)


# --- the runtime's cutter ------------------------------------------------------------------------


@given(st.binary(max_size=2000), st.integers(0, 2**32 - 1), st.integers(1, 700))
def test_random_cuts_give_back_the_frame(data, seed, max_part):
    cutter = RandomCuts(random.Random(seed))
    parts = pieces(data, cutter.cuts(len(data)), max_part)
    assert b"".join(piece for piece, _ in parts) == data
    assert [last for _, last in parts] == [False] * (len(parts) - 1) + [True]
    assert all(len(piece) <= max_part for piece, _ in parts)
    assert all(piece for piece, _ in parts) or parts == [(b"", True)]


def test_random_cuts_cover_whole_frames_one_byte_parts_and_cuts_inside_characters():
    """What the runtime's default is for: over a run, frames left whole, 1-byte parts, and a
    cut inside every multi-byte character's bytes."""
    text = "caf\u00e9 \u2603 \U0001f600".encode()  # 2-, 3- and 4-byte characters
    inside = {4, 7, 8, 10, 11, 12}  # offsets that fall inside one of them
    cutter = FragmentPolicy.random(512_000, seed=1).for_stream()
    seen_whole = seen_single = 0
    seen_inside: set[int] = set()
    for _ in range(500):
        cuts = cutter.cuts(len(text))
        parts = pieces(text, cuts, 512_000)
        seen_whole += len(parts) == 1
        seen_single += any(len(piece) == 1 for piece, _ in parts)
        seen_inside |= inside & set(cuts)
    assert seen_whole > 50 and seen_single > 50 and seen_inside == inside


def test_the_same_seed_cuts_the_same_way():
    frames = [bytes(9600), b"x" * 17, "\u00e9t\u00e9".encode()]
    policy = FragmentPolicy.random(512_000, seed=1234)
    streams = [policy.for_stream(), policy.for_stream()]
    streams.append(FragmentPolicy.random(512_000, seed=1234).for_stream())  # a replay
    runs = [[stream.cuts(len(frame)) for frame in frames] for stream in streams]
    assert runs[2] == runs[0]  # the same seed, the same stream: the same cuts
    assert runs[1] != runs[0]  # each stream its own cuts


# --- SageMakerTransport.receive: the SDK's events ---------------------------------------------


@dataclass
class FakeOutput:
    """The SDK's output stream as ``receive`` sees it: events, then ``None``."""

    events: list[Any]
    _iterator: Iterator[Any] = field(init=False)

    def __post_init__(self) -> None:
        self._iterator = iter(self.events)

    async def receive(self) -> Any:
        return next(self._iterator, None)


@given(st.data())
async def test_the_sagemaker_reader_joins_partial_parts_cut_anywhere(data):
    frames = data.draw(FRAMES)
    events = []
    for frame in frames:
        raw = frame.encode() if isinstance(frame, str) else frame
        parts = cut(raw, data.draw(cut_points(raw)))
        # The part that completes a frame may say COMPLETE or carry no CompletionState at all.
        last_state = data.draw(st.sampled_from(["COMPLETE", None]))
        for index, part in enumerate(parts):
            state = "PARTIAL" if index < len(parts) - 1 else last_state
            events.append(
                ResponseStreamEventPayloadPart(
                    value=ResponsePayloadPart(
                        bytes_=part,
                        data_type="UTF8" if isinstance(frame, str) else "BINARY",
                        completion_state=state,
                    )
                )
            )
    transport = SageMakerTransport("kokoro-82m", region="us-east-1")
    transport._output = FakeOutput(events)
    received = [await transport.receive() for _ in frames]
    assert received == frames
    assert await transport.receive() is None


# --- SageMakerTransport.receive: through the local runtime, cut at random ----------------------


# --- the response-stream client ------------------------------------------------------------------


@pytest.fixture(scope="module")
def response_stream_client():
    """A real boto3 ``sagemaker-runtime`` client whose response body is ``payloads[0]``, each
    bytes string one ``PayloadPart`` event, parsed by botocore's own event-stream code."""
    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    payloads: list[list[bytes]] = [[]]

    def answer(request, **_):
        return AWSResponse(
            request.url,
            200,
            {"content-type": "application/vnd.amazon.eventstream"},
            RawEventStream([payload_part(part) for part in payloads[0]]),
        )

    client.meta.events.register(
        "before-send.sagemaker-runtime.InvokeEndpointWithResponseStream", answer
    )
    return client, payloads


AUDIO = st.lists(st.binary(min_size=1, max_size=400), max_size=6)


@given(AUDIO, st.data())
def test_response_stream_audio_cut_anywhere_comes_back_whole(response_stream_client, audio, data):
    client, payloads = response_stream_client
    body = b"".join(audio)
    payloads[0] = cut(body, data.draw(cut_points(body)))
    received = list(SageMakerResponseStream("kokoro-82m", client).audio("Hi."))
    assert b"".join(received) == body
    assert all(received)  # no empty audio pieces


@given(AUDIO, st.data())
def test_response_stream_sse_cut_anywhere_comes_back_whole(response_stream_client, audio, data):
    """The server's SSE framing (base64 JSON events), cut anywhere into PayloadParts."""
    client, payloads = response_stream_client
    events = [{"type": "audio", "data": base64.b64encode(chunk).decode()} for chunk in audio]
    events.append({"type": "synthesis_complete", "note": "fin \u2603"})
    body = b"".join(encode_sse_event(event) for event in events)
    payloads[0] = cut(body, data.draw(cut_points(body)))
    received = list(SageMakerResponseStream("kokoro-82m", client).audio("Hi.", sse=True))
    assert b"".join(received) == b"".join(audio)


@given(AUDIO, st.booleans(), st.data())
def test_http_response_stream_cut_anywhere_comes_back_whole(audio, sse, data):
    """The same route over plain HTTP (the speech server, locally): body chunks anywhere."""
    events = [{"type": "audio", "data": base64.b64encode(chunk).decode()} for chunk in audio]
    body = b"".join(map(encode_sse_event, events)) if sse else b"".join(audio)
    chunks = cut(body, data.draw(cut_points(body)))
    client = httpx.Client(
        transport=httpx.MockTransport(lambda _: httpx.Response(200, content=iter(chunks)))
    )
    received = list(HttpResponseStream("http://speech", client).audio("Hi.", sse=sse))
    assert b"".join(received) == b"".join(audio)


# --- the SSE decoder ---------------------------------------------------------------------------

EVENTS = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["audio", "synthesis_complete"]), "note": st.text(max_size=12)}
    ),
    max_size=5,
)
LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])


def sse_stream(events: list[dict[str, Any]], ends: list[bytes], comment: bool) -> bytes:
    """``events`` as SSE, each line ended as ``ends`` says (the standard allows all three),
    with a comment line before each event if ``comment``."""
    out = b""
    for index, event in enumerate(events):
        end = ends[index % len(ends)]
        if comment:
            out += b": keep-alive" + end
        out += b"data: " + json.dumps(event, ensure_ascii=False).encode() + end + end
    return out


@given(EVENTS, st.lists(LINE_ENDS, min_size=1, max_size=3), st.booleans(), st.data())
def test_sse_cut_anywhere_decodes_the_same_events(events, ends, comment, data):
    stream = sse_stream(events, ends, comment)
    decoder = SseDecoder()
    decoded = []
    for chunk in cut(stream, data.draw(cut_points(stream))):
        decoded += decoder.feed(chunk)
    decoded += decoder.end()
    assert decoded == events
    assert decoder.pending_bytes == 0


def test_sse_every_single_and_double_cut_of_a_crlf_stream():
    """Exhaustively, where the property test only samples: a CRLF stream with multi-byte
    characters, cut once or twice at every pair of offsets (the regression: a cut between the
    CR and LF of an event's blank line merged that event into the next one)."""
    events = [{"note": "caf\u00e9"}, {"note": "\u2603\U0001f600"}, {"n": 1}]
    stream = sse_stream(events, [b"\r\n"], comment=True)
    for first in range(1, len(stream)):
        for second in range(first, len(stream)):
            decoder = SseDecoder()
            decoded = []
            for chunk in cut(stream, {first, second}):
                decoded += decoder.feed(chunk)
            decoded += decoder.end()
            assert decoded == events, (first, second)
            assert decoder.pending_bytes == 0


def test_sse_a_stream_ending_in_a_lone_cr_is_whole_once_ended():
    decoder = SseDecoder()
    assert decoder.feed(b'data: {"a": 1}\r\r') == []  # the last CR might start a CRLF
    assert decoder.end() == [{"a": 1}]
    assert decoder.pending_bytes == 0


def test_sse_a_truncated_event_stays_pending_after_the_end():
    decoder = SseDecoder()
    assert decoder.feed(b'data: {"a": 1}\r\n\r\ndata: {"b"') == [{"a": 1}]
    assert decoder.end() == []
    assert decoder.pending_bytes > 0
