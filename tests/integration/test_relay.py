"""The relay over an ``ApiGatewaySink`` to @connections: framing, 32 KB limit, base64 delivery,
Gone, one retry policy over real HTTP, and the text lane (coalesced text deltas that never hold
up audio)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator

import boto3
import numpy as np
import pytest
from botocore.stub import Stubber
from connections_server import Answer, ConnectionsServer, Request, always, first_then

from functions.adapters.frame_sink import (
    MANAGEMENT_CLIENT_CONFIG,
    ApiGatewaySink,
    ClientGone,
    RelayError,
    management_client,
)
from functions.adapters.relay import Relay
from voicewire.client_protocol import (
    MAX_AUDIO_PAYLOAD,
    MAX_BASE64_AUDIO_PAYLOAD,
    MAX_FRAME_BYTES,
    TurnEnd,
    TurnStart,
    decode_audio_frame,
    encode_audio_frame,
    encode_base64_audio,
)

CALLBACK_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/prod"
FAKE_CREDENTIALS = {
    "region_name": "us-east-1",
    "aws_access_key_id": "x",
    "aws_secret_access_key": "y",
}


def moto_client():
    return boto3.client(
        "apigatewaymanagementapi", endpoint_url=CALLBACK_URL, region_name="us-east-1"
    )


class Spy:
    """Records each post (moto concatenates them per connection) and passes it on."""

    def __init__(self, client):
        self.client, self.posts = client, []

    def post_to_connection(self, **kwargs):
        self.posts.append(kwargs["Data"])
        return self.client.post_to_connection(**kwargs)


def pcm(seconds: float) -> bytes:
    samples = (np.sin(np.arange(int(24_000 * seconds)) * 0.03) * 9000).astype("<i2")
    return samples.tobytes()


def turn_start() -> TurnStart:
    return TurnStart(turn_id="t-1", turn=1, mode="bidi")


# --- framing (moto's management API) --------------------------------------------------------


async def test_binary_audio_is_split_into_headed_frames_under_32_kb(aws):
    from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends

    spy = Spy(moto_client())
    relay = Relay(ApiGatewaySink(spy, "conn-1"), turn=7)
    audio = pcm(1.5)  # 72,000 bytes: needs three frames
    await relay.control(TurnStart(turn_id="t-7", turn=7, mode="bidi"))
    await relay.audio(audio)
    control, *frames = spy.posts
    assert json.loads(control)["type"] == "turn_start"
    assert len(frames) == 3 and all(len(frame) <= MAX_FRAME_BYTES for frame in frames)
    decoded = [decode_audio_frame(frame) for frame in frames]
    assert [(turn, seq) for turn, seq, _ in decoded] == [(7, 0), (7, 1), (7, 2)]
    assert b"".join(payload for _, _, payload in decoded) == audio
    assert all(len(payload) % 2 == 0 for _, _, payload in decoded)  # whole samples
    assert relay.audio_frames == 3 and relay.audio_bytes == len(audio)
    assert relay.frames == 4 and relay.bytes_sent == sum(len(post) for post in spy.posts)
    # The real boto3 call reached the (moto) management API.
    stored = apigatewaymanagementapi_backends["123456789012"]["us-east-1"].connections["conn-1"]
    assert stored.data == b"".join(spy.posts)


@pytest.mark.parametrize("delivery", ["binary", "base64"])
async def test_audio_frames_at_the_payload_limit_fit_32_kb_and_one_sample_more_splits(
    aws, delivery
):
    """The largest frame the relay makes, with the largest turn and seq numbers it can carry,
    is still within API Gateway's 32 KB frame; one more sample makes two frames."""
    limit = MAX_AUDIO_PAYLOAD if delivery == "binary" else MAX_BASE64_AUDIO_PAYLOAD
    largest = limit - limit % 2  # whole samples
    for size, frames in ((largest, 1), (largest + 2, 2)):
        spy = Spy(moto_client())
        relay = Relay(ApiGatewaySink(spy, "conn-3"), turn=2**32 - 1, delivery=delivery)
        await relay.audio(pcm(1.0)[:size])
        assert len(spy.posts) == relay.audio_frames == frames
        assert max(len(post) for post in spy.posts) <= MAX_FRAME_BYTES
    encode = encode_audio_frame if delivery == "binary" else encode_base64_audio
    assert len(encode(2**32 - 1, 2**32 - 1, bytes(largest))) <= MAX_FRAME_BYTES
    with pytest.raises(ValueError, match="exceeds"):
        encode(1, 0, bytes(limit + 1))


async def test_base64_delivery_sends_json_text_frames(aws):
    spy = Spy(moto_client())
    relay = Relay(ApiGatewaySink(spy, "conn-2"), turn=1, delivery="base64")
    audio = pcm(1.0)
    await relay.audio(audio)
    messages = [json.loads(post) for post in spy.posts]
    assert all(len(post) <= MAX_FRAME_BYTES for post in spy.posts)
    assert [m["seq"] for m in messages] == list(range(len(messages)))
    assert {m["type"] for m in messages} == {"audio"} and {m["turn"] for m in messages} == {1}
    assert b"".join(base64.b64decode(m["data"]) for m in messages) == audio


# --- error codes (stubbed client) -------------------------------------------------------------


def stubbed(*errors: str, then_ok: bool = True):
    client = moto_client()
    stubber = Stubber(client)
    for code in errors:
        status = 410 if code == "GoneException" else 429
        stubber.add_client_error(
            "post_to_connection", service_error_code=code, http_status_code=status
        )
    if then_ok:
        stubber.add_response("post_to_connection", {})
    stubber.activate()
    return client, stubber


async def test_a_gone_client_stops_the_turn():
    client, _ = stubbed("GoneException", then_ok=False)
    relay = Relay(ApiGatewaySink(client, "gone"), turn=1)
    with pytest.raises(ClientGone):
        await relay.audio(pcm(0.1))
    assert relay.frames == 0 and relay.audio_frames == 0  # nothing counted that was not sent


async def test_every_throttling_code_is_retried():
    client, stubber = stubbed(
        "LimitExceededException", "TooManyRequestsException", "ThrottlingException"
    )
    relay = Relay(ApiGatewaySink(client, "busy", first_backoff=0.001), turn=1)
    await relay.audio(pcm(0.1))
    stubber.assert_no_pending_responses()
    assert relay.frames == 1 and relay.first_audio_posted_at is not None


async def test_retries_are_bounded_by_attempts():
    client, _ = stubbed(*["LimitExceededException"] * 3, then_ok=False)
    relay = Relay(ApiGatewaySink(client, "busy", max_attempts=3, first_backoff=0.001), turn=1)
    with pytest.raises(RelayError, match="LimitExceededException after 3 attempts") as raised:
        await relay.audio(pcm(0.1))
    assert raised.value.code == "LimitExceededException" and raised.value.attempts == 3


# --- one retry policy, over real HTTP -----------------------------------------------------------


@pytest.fixture
def connections() -> Iterator[ConnectionsServer]:
    server = ConnectionsServer()
    yield server
    server.stop()


SINK_OPTIONS = ("max_attempts", "first_backoff", "retry_budget_seconds")


def relay_to(server: ConnectionsServer, **options) -> Relay:
    """A relay over a sink to ``server``; ``options``: the sink's retry settings and the
    relay's own."""
    retries = {name: options.pop(name) for name in SINK_OPTIONS if name in options}
    client = management_client(server.url, **FAKE_CREDENTIALS)
    return Relay(ApiGatewaySink(client, "conn-1", **retries), turn=1, **options)


THROTTLED = Answer.error(429, "LimitExceededException")


def test_the_management_client_does_not_retry_by_itself():
    client = management_client(CALLBACK_URL, **FAKE_CREDENTIALS)
    assert client.meta.config.retries["total_max_attempts"] == 1  # one HTTP post per attempt
    assert client.meta.config.connect_timeout == MANAGEMENT_CLIENT_CONFIG.connect_timeout <= 1
    assert client.meta.config.read_timeout == MANAGEMENT_CLIENT_CONFIG.read_timeout <= 3
    assert client.meta.config.tcp_keepalive is True


async def test_throttling_is_retried_by_the_relay_alone(connections):
    connections.script = first_then(2, THROTTLED)
    relay = relay_to(connections)
    await relay.control(turn_start())
    # Two throttled posts, then the delivery: one HTTP request per relay attempt, no more.
    assert [r.status for r in connections.requests] == [429, 429, 200]
    assert len(connections.delivered()) == 1 and relay.frames == 1
    assert json.loads(connections.requests[-1].body)["type"] == "turn_start"


async def test_throttling_that_lasts_ends_within_the_retry_budget(connections):
    connections.script = always(THROTTLED)
    budget, first_backoff = 0.4, 0.02
    relay = relay_to(
        connections,
        max_attempts=100,
        retry_budget_seconds=budget,
        first_backoff=first_backoff,
    )
    started = time.monotonic()
    with pytest.raises(RelayError, match="LimitExceededException after") as raised:
        await relay.control(turn_start())
    elapsed = time.monotonic() - started
    attempts = len(connections.requests)
    assert raised.value.code == "LimitExceededException" and raised.value.attempts == attempts
    assert attempts >= 3  # it did retry, with short pauses
    # The budget, not the attempts, stopped it; no pause goes past the budget, so only the
    # last post's own round trip (local: milliseconds) can exceed it.
    assert attempts < 100 and elapsed < budget + 0.15
    assert relay.frames == 0


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(403, "ForbiddenException"), (413, "PayloadTooLargeException"), (400, "BadRequestException")],
)
async def test_an_error_no_retry_fixes_fails_at_once(connections, status, error_type):
    connections.script = always(Answer.error(status, error_type))
    relay = relay_to(connections)
    with pytest.raises(RelayError, match=f"{error_type} after 1 attempt$") as raised:
        await relay.control(turn_start())
    assert raised.value.code == error_type and raised.value.attempts == 1
    assert len(connections.requests) == 1


@pytest.mark.parametrize("failure", [Answer.error(500, "InternalServerError"), Answer(status=502)])
async def test_server_errors_are_retried(connections, failure):
    connections.script = first_then(1, failure)
    relay = relay_to(connections, first_backoff=0.01)
    await relay.audio(pcm(0.05))
    assert [r.status for r in connections.requests] == [failure.status, 200]
    assert relay.audio_frames == 1


async def test_a_gone_client_over_http_is_not_retried(connections):
    connections.script = always(Answer.error(410, "GoneException"))
    relay = relay_to(connections)
    with pytest.raises(ClientGone):
        await relay.audio(pcm(0.05))
    assert len(connections.requests) == 1 and relay.audio_frames == 0


async def test_an_unreachable_endpoint_is_retried_then_fails(connections):
    url = connections.url
    connections.stop()  # nothing listens on that port any more: connection refused
    sink = ApiGatewaySink(
        management_client(url, **FAKE_CREDENTIALS), "conn-1", max_attempts=3, first_backoff=0.01
    )
    relay = Relay(sink, turn=1)
    with pytest.raises(RelayError, match="EndpointConnectionError after 3 attempts") as raised:
        await relay.control(turn_start())
    assert raised.value.code == "EndpointConnectionError" and raised.value.attempts == 3


# --- the text lane ---------------------------------------------------------------------------


def text_posts(server: ConnectionsServer) -> list[tuple[Request, dict]]:
    """The delivered text deltas, in seq order."""
    posts = [(r, json.loads(r.body)) for r in server.delivered() if r.is_text_delta]
    return sorted(posts, key=lambda post: post[1]["seq"])


async def wait_for(condition) -> None:
    """Poll ``condition`` (the server's log changes in its threads) for up to 3 s."""
    for _ in range(1500):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("the condition did not become true within 3 s")


async def test_text_deltas_are_coalesced_while_audio_flows(connections):
    connections.script = always(Answer(delay=0.03))  # each post: a 30 ms round trip
    relay = relay_to(connections)
    words = [f"word{i} " for i in range(40)]

    async def write() -> None:
        for word in words:
            await relay.text("t-1", word)
            await asyncio.sleep(0.01)

    async def speak() -> None:
        for _ in range(10):
            await relay.audio(pcm(0.1))

    started = time.monotonic()
    await relay.control(turn_start())
    await asyncio.gather(write(), speak())
    await relay.finish_text()
    duration = time.monotonic() - started
    await relay.control(TurnEnd(turn_id="t-1", status="complete", timings={}, **counts(relay)))

    posts = text_posts(connections)
    # Nothing lost, nothing duplicated, and in order.
    assert "".join(delta["text"] for _, delta in posts) == "".join(words)
    assert [delta["seq"] for _, delta in posts] == list(range(len(posts)))
    assert all(delta["turn_id"] == "t-1" for _, delta in posts)
    assert [r for r, _ in posts] == sorted((r for r, _ in posts), key=lambda r: r.started)
    # At most one text post per 100 ms (and the first one at once).
    assert len(posts) <= duration / 0.1 + 2
    assert relay.text_posts == len(posts) and relay.text_deltas == 40
    # Audio went out alongside: some audio post was in flight at the same time as a text post
    # (the lanes do not wait for each other; one lane would make their intervals disjoint).
    audio = [r for r in connections.delivered() if r.body[:1] == b"\xa1"]
    assert [decode_audio_frame(r.body)[1] for r in audio] == list(range(10))
    assert any(t.started < a.ended and a.started < t.ended for a in audio for t, _ in posts)
    # The ordered lane kept its order: turn_start first, turn_end last after everything.
    everything = sorted(connections.delivered(), key=lambda r: r.started)
    assert json.loads(everything[0].body)["type"] == "turn_start"
    assert json.loads(everything[-1].body)["type"] == "turn_end"
    assert everything[-1].started >= max(r.ended for r in everything[:-1])
    assert relay.frames == len(everything)
    assert relay.bytes_sent == sum(len(r.body) for r in everything)
    assert audio[0].ended <= relay.first_audio_posted_at <= audio[1].started
    assert relay._text_lane._task is not None and relay._text_lane._task.done()  # none running


def counts(relay: Relay) -> dict[str, int]:
    return {"audio_bytes": relay.audio_bytes, "audio_frames": relay.audio_frames}


async def test_an_audio_post_does_not_wait_behind_a_text_post(connections):
    slow_text = Answer(delay=0.5)  # a text post stuck in a slow round trip
    connections.script = lambda index, r: slow_text if r.is_text_delta else Answer(delay=0.03)
    relay = relay_to(connections)
    await relay.text("t-1", "Hello")
    await wait_for(lambda: any(r.is_text_delta for r in connections.requests))
    started = time.monotonic()
    await relay.audio(pcm(0.05))
    took = time.monotonic() - started
    text_request = next(r for r in connections.requests if r.is_text_delta)
    audio_request = next(r for r in connections.requests if not r.is_text_delta)
    # The audio frame went out and was answered while the text post was still in flight.
    assert text_request.started < audio_request.started
    assert audio_request.ended < text_request.ended or text_request.ended == 0
    assert took < 0.3  # one round trip (30 ms), not queued behind the 500 ms text post
    await relay.finish_text()
    assert [delta["text"] for _, delta in text_posts(connections)] == ["Hello"]


async def test_the_first_delta_goes_at_once_then_one_post_per_interval(connections):
    relay = relay_to(connections, text_interval=0.2)
    given = time.monotonic()
    await relay.text("t-1", "a")
    await wait_for(lambda: len(text_posts(connections)) == 1)  # "a" is posted at once
    for piece in ["b", "c", "d"]:
        await relay.text("t-1", piece)
        await asyncio.sleep(0.01)
    await wait_for(lambda: len(text_posts(connections)) == 2)
    (first, one), (second, two) = text_posts(connections)
    assert (one["text"], two["text"]) == ("a", "bcd")
    # The interval runs from the first post, which cannot have started before "a" was given.
    assert first.started < given + relay.text_interval <= second.started
    await relay.finish_text()
    assert relay.text_posts == 2


async def test_sentence_mode_posts_text_only_at_flush_and_finish(connections):
    relay = relay_to(connections, text_flush="sentence")
    await relay.text("t-1", "Hello, ")
    await relay.text("t-1", "world.")
    await relay.control(turn_start())  # the text lane runs while this posts...
    assert relay._text_lane._pending == "Hello, world."  # ... and leaves the text buffered
    flushed_at = time.monotonic()
    relay.flush_text()
    await relay.text("t-1", " Next")  # after the cut: the next sentence's text
    await wait_for(lambda: len(text_posts(connections)) == 1)
    finished_at = time.monotonic()
    await relay.finish_text()
    posts = text_posts(connections)
    assert [(d["seq"], d["text"]) for _, d in posts] == [(0, "Hello, world."), (1, " Next")]
    # Each text post started only once its text was due: at the cut, then at the finish. An
    # earlier post would have split the text differently, or started before those moments.
    (first, _), (second, _) = posts
    assert flushed_at <= first.started and finished_at <= second.started


@pytest.mark.parametrize(
    ("failure", "raised"),
    [
        (Answer.error(410, "GoneException"), ClientGone),
        (Answer.error(403, "ForbiddenException"), RelayError),
    ],
)
async def test_a_failed_text_post_surfaces_at_finish_and_next_text(connections, failure, raised):
    connections.script = lambda index, r: failure if r.is_text_delta else Answer()
    relay = relay_to(connections)
    await relay.text("t-1", "Hello")
    with pytest.raises(raised):
        await relay.finish_text()
    with pytest.raises(raised):
        await relay.text("t-1", " again")
    assert len(connections.requests) == 1 and relay.text_posts == 0
    assert relay._text_lane._task is not None and relay._text_lane._task.done()


async def test_a_text_failure_surfaces_at_the_next_text_call(connections):
    connections.script = always(Answer.error(410, "GoneException"))
    relay = relay_to(connections)
    await relay.text("t-1", "Hello")
    await wait_for(lambda: relay._text_lane._task is not None and relay._text_lane._task.done())
    with pytest.raises(ClientGone):
        await relay.text("t-1", " again")


async def test_discarded_text_is_never_posted(connections):
    relay = relay_to(connections, text_flush="sentence")
    await relay.text("t-1", "Hello, ")
    relay.discard_text()  # the turn was cancelled
    await relay.text("t-1", "world.")
    await relay.finish_text()
    assert connections.requests == [] and relay.text_posts == 0
    assert relay._text_lane._task is not None and relay._text_lane._task.done()


async def test_close_stops_the_text_lane_without_posting(connections):
    relay = relay_to(connections, text_interval=0.2)
    await relay.text("t-1", "a")  # posted at once
    await wait_for(lambda: len(connections.delivered()) == 1)
    await relay.text("t-1", "b")  # held back for the interval
    task = relay._text_lane._task
    await relay.close()
    # Nothing can post "b" now: the lane is stopped and no text post is in flight (a post is in
    # flight until it is answered).
    assert task is not None and task.done()
    assert not relay._text_lane.posting
    assert [delta["text"] for _, delta in text_posts(connections)] == ["a"]
    assert len(connections.requests) == 1 and relay.text_posts == 1


async def test_close_returns_only_once_the_text_post_in_flight_is_answered(connections):
    """A post already in its thread is not stopped by cancelling the lane: close waits for its
    answer, so nothing is left half-sent when a Lambda handler returns."""
    connections.script = always(Answer(delay=0.4))
    relay = relay_to(connections, text_interval=0.2)
    await relay.text("t-1", "a")
    await wait_for(lambda: len(connections.requests) == 1)  # received, not yet answered
    await relay.close()
    assert relay.text_posts == 1  # counted after its answer came
    assert not relay._text_lane.posting
