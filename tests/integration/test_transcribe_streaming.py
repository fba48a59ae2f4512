"""The local Transcribe streaming endpoint on a real port, spoken to by a real WebSocket client
with URLs minted by ``presigned_transcribe_url``: the protocol AWS speaks, its refusals, its end.

The recognizer behind the endpoint is ``tests.recognizer_double.FixedWordsRecognizer``, a TEST
DOUBLE faithful to the ``Recognizer`` protocol (it hears fixed words as the audio reaches their
times): the real recognizer is the next step of issue 42.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from tests.polling import until
from tests.recognizer_double import FixedWordsRecognizer
from voicewire.speech_in.transcribe_events import (
    TranscribeException,
    TranscriptEvent,
    audio_event,
    encode_message,
    end_of_stream,
    read_result,
)
from voicewire.speech_in.transcribe_url import presigned_transcribe_url
from voicewire_tools.local_stack.sigv4_verifier import AccessKey
from voicewire_tools.local_stack.transcribe_streaming import (
    LocalTranscribeStreaming,
    RunningTranscribeStreaming,
    start_transcribe_streaming,
)

REGION = "us-east-1"
RATE = 16_000
CHUNK = b"\x10\x00\xf0\xff" * (RATE // 20)  # 100 ms of 16-bit samples
CLOSED = (1000, "Streaming completed successfully")


class Clock:
    """The endpoint's UTC clock, which a test moves (expired URLs)."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@pytest.fixture
def key() -> AccessKey:
    return AccessKey.issue()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def serve(key: AccessKey, clock: Clock) -> Iterator[Callable[..., RunningTranscribeStreaming]]:
    running: list[RunningTranscribeStreaming] = []

    def start(
        recognizer: FixedWordsRecognizer, idle_timeout: float = 15.0
    ) -> RunningTranscribeStreaming:
        endpoint = LocalTranscribeStreaming.accepting(
            recognizer, [key], REGION, idle_timeout=idle_timeout, clock=clock
        )
        running.append(start_transcribe_streaming(endpoint))
        return running[-1]

    yield start
    for server in running:
        server.stop()


def url_for(
    running: RunningTranscribeStreaming, key: AccessKey, region: str = REGION, **options
) -> str:
    return presigned_transcribe_url(
        Credentials(key.access_key_id, key.secret_access_key),
        region,
        options.pop("language_code", "en-US"),
        options.pop("sample_rate", RATE),
        endpoint=running.endpoint_url,
        **options,
    )


async def results_until_closed(ws: ClientConnection) -> list[TranscriptEvent | Exception]:
    """Every message until the endpoint closes (a normal close ends the loop quietly)."""
    return [read_result(frame) async for frame in ws]


def transcripts(events: list) -> list[tuple[str, bool, str]]:
    return [
        (r.result_id, r.is_partial, r.alternatives[0].transcript)
        for event in events
        for r in event.transcript.results
    ]


async def test_a_stream_gets_growing_partial_results_then_the_final_one(serve, key):
    recognizer = FixedWordsRecognizer()
    running = serve(recognizer)
    async with connect(url_for(running, key)) as ws:
        assert ws.response.headers["x-amzn-requestid"]
        assert len(ws.response.headers["x-amzn-sessionid"]) == 36
        for _ in range(20):  # 2 s of audio, as a microphone sends it: 100 ms at a time
            await ws.send(audio_event(CHUNK))
        await ws.send(end_of_stream())
        events = await results_until_closed(ws)
    assert (ws.close_code, ws.close_reason) == CLOSED
    assert all(isinstance(event, TranscriptEvent) for event in events)
    seen = transcripts(events)
    assert len({result_id for result_id, _, _ in seen}) == 1
    assert [partial for _, partial, _ in seen] == [True] * 5 + [False]
    texts = [text for _, _, text in seen]
    assert texts[0] == "What" and texts[-1] == "What time is it in Paris?"
    assert all(later.startswith(earlier) for earlier, later in pairwise(texts))
    final = events[-1].transcript.results[0]
    assert (final.start_time, final.end_time) == (0.05, 1.8)
    *_, paris, mark = final.alternatives[0].items
    assert (paris.content, paris.start_time, paris.end_time) == ("Paris", 1.55, 1.8)
    assert (mark.type, mark.content, mark.start_time) == ("punctuation", "?", 1.8)
    (session,) = recognizer.sessions
    assert (session.language_code, session.sample_rate, session.seconds()) == ("en-US", RATE, 2.0)
    await until(lambda: session.closed, "the recognizer session closed")
    assert running.endpoint.counters.transcript_events == 6


async def test_the_end_of_the_audio_finalizes_what_was_heard(serve, key):
    running = serve(FixedWordsRecognizer())
    async with connect(url_for(running, key, partial_results_stability="high")) as ws:
        for _ in range(7):  # 0.7 s: two words heard, the third not yet
            await ws.send(audio_event(CHUNK))
        await ws.send(end_of_stream())
        events = await results_until_closed(ws)
    assert (ws.close_code, ws.close_reason) == CLOSED
    assert [(partial, text) for _, partial, text in transcripts(events)] == [
        (True, "What"),
        (True, "What time"),
        (False, "What time"),
    ]
    stable = [
        [item.stable for item in event.transcript.results[0].alternatives[0].items]
        for event in events
    ]
    assert stable == [[False], [True, False], [True, True]]


async def refused(url: str) -> tuple[int, dict[str, str], dict]:
    with pytest.raises(InvalidStatus) as refusal:
        async with connect(url):
            pass
    response = refusal.value.response
    return response.status_code, dict(response.headers), json.loads(response.body)


async def test_a_forged_signature_is_refused_at_the_handshake(serve, key):
    running = serve(FixedWordsRecognizer())
    url = url_for(running, key)
    forged = url[: -len("0" * 64)] + "0" * 64
    status, headers, body = await refused(forged)
    assert status == 403
    assert headers["x-amzn-errortype"] == "InvalidSignatureException"
    assert body["message"].startswith("The request signature we calculated does not match")
    tampered = url.replace("sample-rate=16000", "sample-rate=8000")
    assert (await refused(tampered))[0] == 403
    assert running.endpoint.counters.streams_refused == 2
    assert running.endpoint.counters.streams_opened == 0


async def test_an_expired_url_is_refused_at_the_handshake(serve, key, clock):
    running = serve(FixedWordsRecognizer())
    url = url_for(running, key, expires=60)
    clock.offset = timedelta(seconds=61)
    status, headers, body = await refused(url)
    assert (status, headers["x-amzn-errortype"]) == (403, "InvalidSignatureException")
    assert body["message"].startswith("Signature expired: ")


async def test_another_key_or_region_is_refused_at_the_handshake(serve, key):
    running = serve(FixedWordsRecognizer())
    status, headers, _ = await refused(url_for(running, AccessKey.issue()))
    assert (status, headers["x-amzn-errortype"]) == (403, "UnrecognizedClientException")
    status, _, body = await refused(url_for(running, key, region="eu-west-1"))
    assert status == 403 and "valid region, not 'eu-west-1'" in body["message"]


def signed_url(running: RunningTranscribeStreaming, key: AccessKey, **parameters: str) -> str:
    """A correctly signed URL with parameters ``presigned_transcribe_url`` would refuse."""
    request = AWSRequest(
        method="GET",
        url=f"http://127.0.0.1:{running.port}/stream-transcription-websocket",
        params=parameters,
    )
    credentials = Credentials(key.access_key_id, key.secret_access_key)
    SigV4QueryAuth(credentials, "transcribe", REGION, expires=300).add_auth(request)
    return request.url.replace("http://", "ws://")


async def failure_of(url: str, *frames: bytes | str) -> TranscribeException:
    async with connect(url) as ws:
        for frame in frames:
            await ws.send(frame)
        events = await results_until_closed(ws)
    assert (ws.close_code, ws.close_reason) == CLOSED
    *_, last = events
    assert isinstance(last, TranscribeException)
    return last


async def test_invalid_parameters_are_a_bad_request_after_the_upgrade(serve, key):
    running = serve(FixedWordsRecognizer())
    failure = await failure_of(
        signed_url(running, key, **{"language-code": "fr-FR", "media-encoding": "pcm"})
    )
    assert failure.type == "BadRequestException"
    assert failure.message == (
        "2 validation errors detected: Value 'fr-FR' at 'languageCode' failed to satisfy "
        "constraint: Member must satisfy enum value set: [en-GB, en-US]; Value null at "
        "'mediaSampleRateHertz' failed to satisfy constraint: Member must not be null"
    )
    failure = await failure_of(
        signed_url(
            running,
            key,
            **{"language-code": "en-US", "media-encoding": "pcm", "sample-rate": "7000"},
        )
    )
    assert "Value '7000' at 'mediaSampleRateHertz'" in failure.message


async def test_a_garbage_or_text_frame_is_a_bad_request(serve, key):
    running = serve(FixedWordsRecognizer())
    garbage = await failure_of(url_for(running, key), audio_event(CHUNK), b"\x00" * 40)
    assert garbage.type == "BadRequestException"
    assert garbage.message.startswith("Unexpected WebSocket frame received. (")
    text = await failure_of(url_for(running, key), json.dumps({"audio": "base64..."}))
    assert text.message.startswith("Unexpected WebSocket frame received. (a text frame")
    other_event = encode_message(
        {
            ":content-type": "application/json",
            ":event-type": "ConfigurationEvent",
            ":message-type": "event",
        },
        b"{}",
    )
    wrong = await failure_of(url_for(running, key), other_event)
    assert "expected an AudioEvent" in wrong.message


async def test_audio_at_another_sample_rate_is_a_bad_request(serve, key):
    running = serve(FixedWordsRecognizer())
    fmt = struct.pack("<HHIIHH", 1, 1, 48_000, 96_000, 2, 16)
    wav = b"RIFF" + struct.pack("<I", 36) + b"WAVEfmt " + struct.pack("<I", 16) + fmt
    failure = await failure_of(url_for(running, key), audio_event(wav + CHUNK))
    assert failure.type == "BadRequestException"
    assert "WAV header at 48000 Hz, but the stream's sample-rate is 16000" in failure.message
    one_second_at_48k = b"\x00\x00" * 48_000
    failure = await failure_of(url_for(running, key), audio_event(one_second_at_48k))
    assert "3.00 s of audio at 16000 Hz" in failure.message


async def test_a_stream_without_audio_for_the_idle_timeout_ends(serve, key):
    recognizer = FixedWordsRecognizer()
    running = serve(recognizer, idle_timeout=0.8)
    failure = await failure_of(url_for(running, key))
    assert (failure.type, failure.message) == (
        "BadRequestException",
        "Your request timed out because no new audio was received for 0.8 seconds.",
    )
    # After some audio, the clock restarts from the last AudioEvent.
    async with connect(url_for(running, key)) as ws:
        await ws.send(audio_event(CHUNK * 4))  # 0.4 s: "What" heard
        events = await results_until_closed(ws)
    assert transcripts(events[:1])[0][1:] == (True, "What")
    assert isinstance(events[-1], TranscribeException)
    assert "no new audio was received" in events[-1].message
    await until(lambda: all(s.closed for s in recognizer.sessions), "sessions closed")


async def test_a_failing_recognizer_is_an_internal_failure(serve, key):
    recognizer = FixedWordsRecognizer(fail_on_feed=2)
    running = serve(recognizer)
    failure = await failure_of(url_for(running, key), *[audio_event(CHUNK)] * 3)
    assert failure.type == "InternalFailureException"
    assert failure.message.startswith("A problem occurred while processing the audio.")
    await until(lambda: recognizer.sessions[0].closed, "the failed session closed")


async def test_a_client_that_goes_away_releases_its_session(serve, key):
    recognizer = FixedWordsRecognizer()
    running = serve(recognizer)
    async with connect(url_for(running, key)) as ws:
        await ws.send(audio_event(CHUNK))
    await until(lambda: recognizer.sessions and recognizer.sessions[0].closed, "session closed")


async def test_queued_audio_sent_in_one_burst_is_too_big_as_on_aws(serve, key):
    """Seconds of audio at once (a page's queue flushed when the socket opens): Transcribe
    wants it at the pace it was spoken, and refuses a burst."""
    running = serve(FixedWordsRecognizer())
    failure = await failure_of(url_for(running, key), *[audio_event(CHUNK)] * 40)
    assert failure.type == "BadRequestException"
    assert failure.message.startswith("Your stream is too big.")


async def test_audio_at_twice_real_time_is_taken(serve, key):
    running = serve(FixedWordsRecognizer())
    async with connect(url_for(running, key)) as ws:
        for _ in range(30):  # 3 s of audio in 1.5 s
            await ws.send(audio_event(CHUNK))
            await asyncio.sleep(0.05)
        await ws.send(end_of_stream())
        events = await results_until_closed(ws)
    assert not any(isinstance(event, Exception) for event in events), events
    assert transcripts(events)[-1][1] is False  # a final result


async def test_a_stream_beyond_the_accounts_concurrent_streams_is_limit_exceeded(serve, key):
    running = serve(FixedWordsRecognizer())
    running.endpoint.max_streams = 1
    async with connect(url_for(running, key)) as first:
        await first.send(audio_event(CHUNK))
        await until(lambda: running.endpoint.counters.live == 1, "the first stream open")
        # Refused as soon as it opens: no audio is sent (the close may come before a send).
        failure = await failure_of(url_for(running, key))
        assert failure.type == "LimitExceededException"
        assert "limit of concurrent streams" in failure.message
        await first.send(end_of_stream())
        assert not any(isinstance(e, Exception) for e in await results_until_closed(first))
    await until(lambda: running.endpoint.counters.live == 0, "the first stream closed")
    async with connect(url_for(running, key)) as again:  # a place is free again
        await again.send(audio_event(CHUNK))
        await again.send(end_of_stream())
        assert not any(isinstance(e, Exception) for e in await results_until_closed(again))
    assert running.endpoint.counters.streams_over_quota == 1
