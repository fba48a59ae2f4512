"""Frames to one WebSocket client through API Gateway's ``@connections`` API.

JSON control frames go as text; audio goes as binary frames of at most 32 KB (API Gateway's frame
limit) with the 9-byte header of ``voicewire.client_protocol``, or as base64 JSON text frames for
connections opened with ``?audio=base64``.

Two lanes, each posting one frame at a time, so that audio never waits behind text:

- the *ordered lane* (``control()`` and ``audio()``: turn_start, sentence, audio, error,
  turn_end): frames are posted in call order, one after the other, so they arrive in order.
- the *text lane* (``text()``): text deltas are buffered and coalesced, then posted as one
  ``text_delta`` at most every ``text_interval`` (or, with ``text_flush="sentence"``, at each
  ``flush_text()``), concurrently with the ordered lane. Text deltas arrive in order among
  themselves (``seq`` 0, 1, 2, ...) but may arrive before or after the sentence and audio frames
  posted around them. ``finish_text()`` posts what is left and waits for the lane: the turn calls
  it before its ``turn_end``, so ``turn_end`` still arrives after everything.

Failures:

- ``GoneException`` (410): the client left. ``ConnectionGone`` stops the turn; the caller marks
  the connection gone.
- Throttling (429), 5xx and connection errors: retried here, and only here (the boto3 client of
  ``management_client()`` does not retry), with short jittered exponential backoff, bounded by
  attempts and by a time budget, then ``RelayError``: never an endless loop, never a silent drop.
- Anything else (403, 413, 400...): no retry fixes it, ``RelayError`` at once.

A failure of the text lane surfaces at the next ``text()`` call and at ``finish_text()``.
Every posted byte is counted, for the turn record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import boto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from pydantic import BaseModel

from voicewire.client_protocol import (
    MAX_AUDIO_PAYLOAD,
    MAX_BASE64_AUDIO_PAYLOAD,
    AudioDelivery,
    TextDelta,
    dump_control,
    encode_audio_frame,
    encode_base64_audio,
    split_audio,
)

logger = logging.getLogger(__name__)

# Retries belong to the relay alone. botocore's own retry modes also retry 429 and 5xx, with
# backoffs of up to many seconds, under the relay's retries: measured, 2 relay attempts made 6
# HTTP posts over 3 s. For a live audio stream a frame that late is worse than a clear failure,
# so botocore makes exactly one attempt per relay attempt, and gives up on a dead endpoint fast.
MANAGEMENT_CLIENT_CONFIG = Config(
    retries={"total_max_attempts": 1},
    connect_timeout=1.0,  # a callback endpoint that cannot be reached in 1 s is not coming back
    read_timeout=3.0,  # a post answers in tens of ms; 3 s is far past any useful frame
    tcp_keepalive=True,  # the worker posts for the whole turn: keep its connections alive
)


def management_client(callback_url: str, **client_kwargs: Any) -> Any:
    """The boto3 ``apigatewaymanagementapi`` client for a stage's callback URL, without
    botocore retries (``MANAGEMENT_CLIENT_CONFIG``): the relay retries. A ``config`` given in
    ``client_kwargs`` is merged over that one."""
    config = MANAGEMENT_CLIENT_CONFIG
    if "config" in client_kwargs:
        config = config.merge(client_kwargs.pop("config"))
    return boto3.client(
        "apigatewaymanagementapi", endpoint_url=callback_url, config=config, **client_kwargs
    )


_THROTTLING = frozenset(
    {"LimitExceededException", "TooManyRequestsException", "ThrottlingException"}
)
# The request may not have reached API Gateway, or its answer was lost: worth another try.
_CONNECTION_ERRORS = (
    EndpointConnectionError,
    ConnectionClosedError,
    ReadTimeoutError,
    ConnectTimeoutError,
)

TextFlush = Literal["interval", "sentence"]


class ConnectionGone(Exception):
    """The client disconnected (``GoneException``)."""


class RelayError(Exception):
    """A post failed for good (retries exhausted, or an error that no retry fixes).

    ``code``: the AWS error code (``LimitExceededException``, ``ForbiddenException``...), or the
    botocore exception's name for a connection error; ``attempts``: the posts made."""

    def __init__(self, message: str, code: str, attempts: int) -> None:
        super().__init__(message)
        self.code = code
        self.attempts = attempts


def _is_retryable(error: ClientError) -> bool:
    code = error.response.get("Error", {}).get("Code", "")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    return code in _THROTTLING or code == "InternalServerError" or status >= 500


@dataclass
class Relay:
    """The frames of one turn to one connection. Its coroutines are called from one asyncio
    loop; the posts themselves run in threads (boto3 blocks; its clients are thread-safe)."""

    client: Any  # boto3 "apigatewaymanagementapi" client, endpoint_url = the stage's callback URL
    connection_id: str
    turn: int
    delivery: AudioDelivery = "binary"
    max_attempts: int = 5
    first_backoff: float = 0.05  # the first retry waits 25-50 ms (jittered), then doubles
    # Audio more than ~1 s late is worse than a clear failure: retries stop once the next pause
    # would end past this budget, counted from the first attempt of the post.
    retry_budget_seconds: float = 1.0
    text_interval: float = 0.1  # at most one text post per interval (interval mode)
    text_flush: TextFlush = "interval"
    frames: int = 0
    bytes_sent: int = 0
    audio_frames: int = 0
    audio_bytes: int = 0
    text_posts: int = 0
    text_deltas: int = 0
    first_audio_posted_at: float | None = None  # time.monotonic() when the first audio post ended
    # Thread locks, not asyncio ones: a post cancelled by its caller still finishes in its thread,
    # and the next frame of its lane (say the turn_end) must not overtake it.
    _ordered_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _text_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # Both lanes' threads update the shared counters.
    _counts_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # --- the text lane's state, touched only from the event loop
    _text_turn_id: str | None = field(default=None, init=False, repr=False)
    # Text buffered, not yet handed to a post; how many of its leading chars flush_text() made due.
    _text_pending: str = field(default="", init=False, repr=False)
    _text_flush_chars: int = field(default=0, init=False, repr=False)
    _text_finishing: bool = field(default=False, init=False, repr=False)
    _text_discarded: bool = field(default=False, init=False, repr=False)
    _text_seq: int = field(default=0, init=False, repr=False)
    _text_next_post_at: float = field(default=0.0, init=False, repr=False)  # monotonic; 0: at once
    _text_failure: Exception | None = field(default=None, init=False, repr=False)
    _text_wakeup: asyncio.Event | None = field(default=None, init=False, repr=False)
    _text_task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.text_flush not in ("interval", "sentence"):
            raise ValueError(
                f"text_flush must be 'interval' or 'sentence', not {self.text_flush!r}"
            )

    # --- the ordered lane ---------------------------------------------------------------------

    async def control(self, frame: BaseModel) -> None:
        """Post a control frame on the ordered lane (after every frame posted before it)."""
        await asyncio.to_thread(self._post_ordered, dump_control(frame))

    async def audio(self, pcm: bytes) -> None:
        """Post PCM as one or more audio frames (split at 32 KB, never inside a sample)."""
        limit = MAX_AUDIO_PAYLOAD if self.delivery == "binary" else MAX_BASE64_AUDIO_PAYLOAD
        for payload in split_audio(pcm, limit):
            await asyncio.to_thread(self._post_audio_frame, payload)

    def _post_ordered(self, data: bytes) -> None:
        with self._ordered_lock:  # one post at a time: frames must arrive in order
            self._post_with_retries(data)
            self._count(data)

    def _post_audio_frame(self, payload: bytes) -> None:
        # The sequence number is taken and counted under the lock, in the thread: a post whose
        # caller was cancelled still completes, and the next frame must not reuse its number.
        encode = encode_audio_frame if self.delivery == "binary" else encode_base64_audio
        with self._ordered_lock:
            data = encode(self.turn, self.audio_frames, payload)
            self._post_with_retries(data)
            self._count(data)
            self.audio_frames += 1
            self.audio_bytes += len(payload)
            if self.first_audio_posted_at is None:
                self.first_audio_posted_at = time.monotonic()

    # --- the text lane ------------------------------------------------------------------------

    async def text(self, turn_id: str, text: str) -> None:
        """Buffer a text delta for the text lane; it is posted, joined with its neighbours, at
        the next text post (re-raises the lane's failure, if a text post failed)."""
        self._raise_text_failure()
        if self._text_discarded:
            return  # a cancelled turn posts nothing more
        if self._text_turn_id is None:
            self._text_turn_id = turn_id
        elif turn_id != self._text_turn_id:
            raise ValueError(f"a relay carries one turn ({self._text_turn_id}), not {turn_id}")
        self.text_deltas += 1
        self._text_pending += text
        self._wake_text_lane()

    def flush_text(self) -> None:
        """Post what is buffered now, without waiting for the interval (``sentence`` mode: the
        only moments text is posted, with ``finish_text()``). Returns at once."""
        self._raise_text_failure()
        if self._text_pending:
            self._text_flush_chars = len(self._text_pending)
            self._wake_text_lane()

    async def finish_text(self) -> None:
        """Post what is buffered and wait until the text lane is idle (and stopped); re-raise
        its failure (``ConnectionGone``, ``RelayError``) if a text post failed."""
        task = self._text_task
        if task is not None and not task.done():
            assert self._text_wakeup is not None
            self._text_finishing = True
            self._text_wakeup.set()
            # Waits without cancelling the lane if our caller is cancelled: the last text post
            # then still completes, and the lane stops by itself.
            await asyncio.wait({task})
        self._raise_text_failure()

    def discard_text(self) -> None:
        """Drop the buffered text, and any text given later: a cancelled turn posts nothing more
        (a text post already in flight completes)."""
        self._text_discarded = True
        self._text_pending = ""
        self._text_flush_chars = 0

    async def close(self) -> None:
        """Stop the text lane without posting what is buffered; return once no text post is in
        flight.

        Cancelling the lane does not stop a post already running in its thread, so close waits
        for it (it holds the text lock until answered): a Lambda frozen after its handler
        returns must not leave a post half-sent, to land, or not, at the next thaw.
        """
        self.discard_text()
        task, self._text_task = self._text_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if not self._text_lock.acquire(blocking=False):
                await asyncio.to_thread(self._text_lock.acquire)
            self._text_lock.release()

    def _raise_text_failure(self) -> None:
        if self._text_failure is not None:
            raise self._text_failure

    def _wake_text_lane(self) -> None:
        if self._text_wakeup is None:
            self._text_wakeup = asyncio.Event()
        self._text_wakeup.set()
        if self._text_task is None or self._text_task.done():
            self._text_finishing = False
            self._text_task = asyncio.create_task(
                self._run_text_lane(), name=f"relay-text-{self.connection_id}"
            )

    async def _run_text_lane(self) -> None:
        """Post coalesced text deltas, one at a time, until finishing with nothing left."""
        try:
            while (text := await self._next_text_post()) is not None:
                assert self._text_turn_id is not None
                frame = TextDelta(turn_id=self._text_turn_id, seq=self._text_seq, text=text)
                self._text_seq += 1
                self._text_next_post_at = time.monotonic() + self.text_interval
                await asyncio.to_thread(self._post_text, dump_control(frame))
        except Exception as failure:  # kept for text() and finish_text() to raise
            self._text_failure = failure

    async def _next_text_post(self) -> str | None:
        """Wait until buffered text is due; take it. ``None``: finishing, nothing left."""
        assert self._text_wakeup is not None
        while True:
            self._text_wakeup.clear()  # anything that changes the state below sets it again
            pending = self._text_pending
            if not pending and self._text_finishing:
                return None
            take = 0
            timeout: float | None = None  # wait for a wake-up only
            if pending and (self._text_finishing or self.text_flush == "interval"):
                take = len(pending)
                if not self._text_finishing and not self._text_flush_chars:
                    timeout = self._text_next_post_at - time.monotonic()
                    take = take if timeout <= 0 else 0
            elif pending and self._text_flush_chars:
                take = self._text_flush_chars  # sentence mode: up to the flush
            if take:
                self._text_pending = pending[take:]
                self._text_flush_chars = max(0, self._text_flush_chars - take)
                return pending[:take]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._text_wakeup.wait(), timeout)

    def _post_text(self, data: bytes) -> None:
        with self._text_lock:
            self._post_with_retries(data)
            self._count(data, text=True)

    # --- posting ------------------------------------------------------------------------------

    def _count(self, data: bytes, text: bool = False) -> None:
        with self._counts_lock:
            self.frames += 1
            self.bytes_sent += len(data)
            if text:
                self.text_posts += 1

    def _post_with_retries(self, data: bytes) -> None:
        started = time.monotonic()
        for attempt in range(1, self.max_attempts + 1):
            try:
                self.client.post_to_connection(ConnectionId=self.connection_id, Data=data)
                return
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                if code == "GoneException":
                    raise ConnectionGone(self.connection_id) from error
                if not _is_retryable(error):
                    raise self._failed(code, attempt) from error
                failure: Exception = error
            except _CONNECTION_ERRORS as error:
                code, failure = type(error).__name__, error
            # Equal jitter: half the step, plus up to another half at random, so that the
            # retries of concurrent posts spread out.
            step = self.first_backoff * 2 ** (attempt - 1)
            pause = step / 2 + random.uniform(0, step / 2)
            elapsed = time.monotonic() - started
            if attempt == self.max_attempts or elapsed + pause > self.retry_budget_seconds:
                raise self._failed(code, attempt) from failure
            logger.warning("post failed (%s), retry %d in %.3f s", code, attempt, pause)
            time.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _failed(self, code: str, attempts: int) -> RelayError:
        plural = "" if attempts == 1 else "s"
        return RelayError(
            f"posting to {self.connection_id} failed: {code} after {attempts} attempt{plural}",
            code,
            attempts,
        )
