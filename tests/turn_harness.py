"""Running one turn against real parts: the speech server on a real port, moto's @connections
API behind a recording spy, and the replay LLM."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import boto3
from botocore.exceptions import ClientError

from functions.adapters.llm import converse_request
from functions.adapters.relay import Relay
from functions.adapters.replay_llm import ReplayBedrockClient
from functions.turn import TurnOutcome, TurnRunner, TurnSpec
from voicewire.client_protocol import decode_audio_frame
from voicewire.speech_link import open_speech_session

CALLBACK_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/prod"


@dataclass
class RecordingConnection:
    """Wraps the real boto3 client; remembers every frame and when it was posted."""

    client: object
    posts: list[tuple[float, bytes]] = field(default_factory=list)
    gone_after: int | None = None
    on_post: object = None
    latency: float = 0.0  # each post takes this long, as a signed HTTPS round trip on AWS
    answered: list[tuple[float, bytes]] = field(default_factory=list)  # when each post returned

    def post_to_connection(self, **kwargs):
        if self.gone_after is not None and len(self.posts) >= self.gone_after:
            raise ClientError(
                {
                    "Error": {"Code": "GoneException", "Message": "gone"},
                    "ResponseMetadata": {"HTTPStatusCode": 410},
                },
                "PostToConnection",
            )
        self.posts.append((time.monotonic(), kwargs["Data"]))
        if self.on_post is not None:
            self.on_post(kwargs["Data"])
        time.sleep(self.latency)
        response = self.client.post_to_connection(**kwargs)
        self.answered.append((time.monotonic(), kwargs["Data"]))
        return response

    def frames(self) -> list[dict | tuple[int, int, bytes]]:
        """Control frames as dicts, audio frames as (turn, seq, payload)."""
        out = []
        for _, data in self.posts:
            out.append(decode_audio_frame(data) if data[:1] == b"\xa1" else json.loads(data))
        return out


async def run_turn(
    speech_server,
    mode: str,
    prompt: str = "",
    text: str | None = None,
    cancel_when=None,
    gone_after: int | None = None,
    voice: str | None = None,
    pace: float = 1.0,
    speech_opening=None,
    post_latency: float = 0.0,
    text_flush: str = "interval",
) -> tuple[TurnOutcome, RecordingConnection, ReplayBedrockClient]:
    """``speech_opening``: an async function that returns the open session, run as a task as
    the worker does (default: a session opened before the turn starts)."""
    client = boto3.client("apigatewaymanagementapi", endpoint_url=CALLBACK_URL)
    connection = RecordingConnection(client, gone_after=gone_after, latency=post_latency)
    cancelled = asyncio.Event()
    loop = asyncio.get_running_loop()
    if cancel_when is not None:
        connection.on_post = lambda data: (
            cancel_when(data) and loop.call_soon_threadsafe(cancelled.set)
        )
    relay = Relay(connection, "conn-1", turn=3, text_flush=text_flush)
    llm = ReplayBedrockClient(pace=pace)

    def runner_for(speech) -> TurnRunner:
        return TurnRunner(
            TurnSpec("turn-3", 3, mode, time.time(), voice=voice),
            relay,
            speech,
            cancelled,
            llm=llm,
            llm_request=converse_request("replay", [], prompt),
            text=text,
        )

    if speech_opening is None:
        async with open_speech_session(speech_server.ws_url) as speech:
            outcome = await runner_for(speech).run()
        return outcome, connection, llm
    opening = asyncio.create_task(speech_opening())
    try:
        outcome = await runner_for(opening).run()
    finally:
        if not opening.cancelled() and opening.done() and opening.exception() is None:
            await opening.result().close()
    return outcome, connection, llm
