"""The relay to @connections: framing, 32 KB limit, base64 delivery, Gone and throttling."""

from __future__ import annotations

import base64
import json

import boto3
import numpy as np
import pytest
from botocore.stub import Stubber

from functions.adapters.relay import ConnectionGone, Relay, RelayError
from voicewire.client_protocol import MAX_FRAME_BYTES, TurnStart, decode_audio_frame

CALLBACK_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/prod"


def management_client():
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


async def test_binary_audio_is_split_into_headed_frames_under_32_kb(aws):
    from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends

    spy = Spy(management_client())
    relay = Relay(spy, "conn-1", turn=7)
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


async def test_base64_delivery_sends_json_text_frames(aws):
    spy = Spy(management_client())
    relay = Relay(spy, "conn-2", turn=1, delivery="base64")
    audio = pcm(1.0)
    await relay.audio(audio)
    messages = [json.loads(post) for post in spy.posts]
    assert all(len(post) <= MAX_FRAME_BYTES for post in spy.posts)
    assert [m["seq"] for m in messages] == list(range(len(messages)))
    assert {m["type"] for m in messages} == {"audio"} and {m["turn"] for m in messages} == {1}
    assert b"".join(base64.b64decode(m["data"]) for m in messages) == audio


def stubbed(*errors: str, then_ok: bool = True):
    client = management_client()
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
    relay = Relay(client, "gone", turn=1)
    with pytest.raises(ConnectionGone):
        await relay.audio(pcm(0.1))
    assert relay.frames == 0 and relay.audio_frames == 0  # nothing counted that was not sent


async def test_throttled_posts_are_retried_with_backoff():
    client, stubber = stubbed("LimitExceededException", "TooManyRequestsException")
    relay = Relay(client, "busy", turn=1, first_backoff=0.001)
    await relay.audio(pcm(0.1))
    stubber.assert_no_pending_responses()
    assert relay.frames == 1


async def test_retries_are_bounded():
    client, _ = stubbed(*["LimitExceededException"] * 3, then_ok=False)
    relay = Relay(client, "busy", turn=1, max_attempts=3, first_backoff=0.001)
    with pytest.raises(RelayError, match="LimitExceededException"):
        await relay.audio(pcm(0.1))
