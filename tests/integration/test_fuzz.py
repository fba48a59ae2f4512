"""Property-based fuzzing of what strangers' input reaches: both protocols' parsers, a real speech
session, the chunker and the markdown filter. No exception escapes but the documented
``ProtocolError``, every error can be sent back, and no session dies."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect

from voicewire.chunker import IncrementalSentenceChunker
from voicewire.client_protocol import ClientError, dump_control, parse_action
from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.speech_protocol import ErrorFrame, dump_frame, parse_client_message
from voicewire.speech_text import SpeechTextFilter

# Any Unicode but surrogates (which a str from a WebSocket text frame cannot hold), weighted
# towards what breaks text handling: controls, format characters, markdown, sentence ends.
ODD_CHARACTERS = st.sampled_from(
    list("\x00\x07\x1b\t\n\r \u200b\u200d\u202e\ufeff\ue000*_`#>-|~[]()!.?…。؟\\\"'🎉")
)
ANY_TEXT = st.text(
    st.one_of(st.characters(exclude_categories=["Cs"]), ODD_CHARACTERS), max_size=300
)
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), ANY_TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
SPEECH_FIELDS = st.sampled_from(["text", "voice", "speed", "request_id", "type", "fast_start"])
SPEECH_TYPES = st.sampled_from([None, "synthesize", "cancel", "ping", "dance", 7])
SPEECH_MESSAGES = st.one_of(
    st.binary(max_size=200),
    ANY_TEXT,
    st.builds(
        lambda fields, kind: json.dumps({**fields, **({"type": kind} if kind else {})}),
        st.dictionaries(st.one_of(SPEECH_FIELDS, st.text(max_size=4)), JSON_VALUES, max_size=6),
        SPEECH_TYPES,
    ),
    st.builds(lambda text: json.dumps({"text": text}), ANY_TEXT),
)
CLIENT_FIELDS = st.sampled_from(
    ["action", "prompt", "text", "mode", "voice", "speed", "turn_id", "text_deltas"]
)
CLIENT_MESSAGES = st.one_of(
    ANY_TEXT,
    st.builds(
        lambda fields, action: json.dumps({**fields, "action": action}),
        st.dictionaries(CLIENT_FIELDS, JSON_VALUES, max_size=6),
        st.sampled_from(["ask", "speak", "cancel", "voices", "dance", None, 3]),
    ),
)


@settings(max_examples=500)
@given(SPEECH_MESSAGES)
def test_the_speech_parser_raises_only_protocol_errors_that_can_be_sent(raw):
    try:
        message = parse_client_message(raw, frozenset({"af_heart"}))
    except ProtocolError as error:
        assert error.code in ErrorCode
        assert len(dump_frame(ErrorFrame.of(error))) < 2_000  # always serializable, never an echo
        return
    text = getattr(message, "text", None)
    assert text is None or text.strip()  # an accepted text has something visible in it


@settings(max_examples=500)
@given(CLIENT_MESSAGES)
def test_the_client_parser_raises_only_protocol_errors_that_can_be_sent(raw):
    try:
        parse_action(raw, frozenset({"af_heart"}))
    except ProtocolError as error:
        frame = ClientError(code=error.code, message=error.message, turn_id=error.request_id)
        assert len(dump_control(frame)) < 2_000


class BriefEngine:
    """A tenth of a second of tone per text: the session's handling is under test, not Kokoro."""

    name, sample_rate = "brief", 24_000
    voices, default_voice = frozenset({"af_heart"}), "af_heart"

    def synthesize(self, text: str, voice: str, speed: float) -> np.ndarray:
        return np.full(2_400, 0.2, np.float32)

    def synthesize_stream(self, text: str, voice: str, speed: float):
        yield self.synthesize(text, voice, speed)


@pytest.fixture(scope="module")
def brief_server():
    from conftest import start_server

    running = start_server(BriefEngine)
    yield running
    running.stop()


async def _exchange(url: str, messages: list[str | bytes]) -> list[dict]:
    """Send ``messages`` back to back, then a ping; every frame up to its pong, as JSON (audio
    frames are left out). The connection must stay open throughout."""
    controls: list[dict] = []
    async with connect(url, max_size=None) as ws:
        for message in messages:
            await ws.send(message)
        await ws.send(json.dumps({"type": "ping", "request_id": "fuzz-end"}))
        async with asyncio.timeout(30):
            while True:
                frame = await ws.recv()
                if isinstance(frame, bytes):
                    continue
                control = json.loads(frame)
                if control == {"type": "pong", "request_id": "fuzz-end"}:
                    break
                controls.append(control)
        await ws.send(json.dumps({"text": "Still here.", "request_id": "fuzz-after"}))
        async with asyncio.timeout(30):
            while (control := json.loads(await _next_text(ws)))["type"] != "synthesis_complete":
                pass
        controls.append(control)
    return controls


async def _next_text(ws) -> str:
    while isinstance(frame := await ws.recv(), bytes):
        pass
    return frame


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        SPEECH_MESSAGES.filter(lambda raw: b'"close"' not in _as_bytes(raw)),
        min_size=1,
        max_size=12,
    )
)
def test_no_message_sequence_kills_a_speech_session(brief_server, messages):
    controls = asyncio.run(_exchange(brief_server.ws_url, messages))
    for control in controls:
        assert control["type"] in {"synthesis_start", "synthesis_complete", "pong", "error"}
        if control["type"] == "error":
            assert control["code"] in ErrorCode.__members__.values()
            assert control["code"] != ErrorCode.SYNTHESIS_FAILED
    assert controls[-1]["request_id"] == "fuzz-after" and controls[-1]["status"] == "complete"


def _as_bytes(raw: str | bytes) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode("utf-8")


def _chunk_all(text: str, cuts: list[int]) -> list[str]:
    chunker = IncrementalSentenceChunker()
    chunks: list[str] = []
    previous = 0
    for cut in [*sorted(set(cuts)), len(text)]:
        chunks += chunker.feed(text[previous:cut])
        previous = cut
    return chunks + chunker.finish()


@settings(max_examples=400)
@given(ANY_TEXT, st.data())
def test_the_chunker_takes_any_text_in_any_pieces(text, data):
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=20))
    chunks = _chunk_all(text, cuts)
    assert chunks == _chunk_all(text, [])  # fragmentation never changes what is said
    assert all(chunk and chunk == chunk.strip() for chunk in chunks)


@settings(max_examples=400)
@given(ANY_TEXT, st.data())
def test_the_markdown_filter_takes_any_text_in_any_pieces(text, data):
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=20))))

    def filtered(points: list[int]) -> str:
        speech = SpeechTextFilter()
        pieces, previous = [], 0
        for cut in [*points, len(text)]:
            pieces.append(speech.feed(text[previous:cut]))
            previous = cut
        return "".join(pieces) + speech.flush()

    assert filtered(cuts) == filtered([])
