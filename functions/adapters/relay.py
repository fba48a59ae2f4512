"""Frames to one WebSocket client through API Gateway's ``@connections`` API.

JSON control frames go as text; audio goes as binary frames of at most 32 KB (API Gateway's frame
limit) with the 9-byte header of ``voicewire.client_protocol``, or as base64 JSON text frames for
connections opened with ``?audio=base64``. Posts are sequential, so frames arrive in order.

- ``GoneException`` (410): the client left. ``ConnectionGone`` stops the turn; the caller marks
  the connection gone.
- ``LimitExceededException`` / throttling: retried with exponential backoff, a bounded number of
  times, then ``RelayError``: never an endless loop, never a silent drop.
Every posted byte is counted, for the turn record.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from pydantic import BaseModel

from voicewire.client_protocol import (
    MAX_AUDIO_PAYLOAD,
    MAX_BASE64_AUDIO_PAYLOAD,
    AudioDelivery,
    dump_control,
    encode_audio_frame,
    encode_base64_audio,
    split_audio,
)

logger = logging.getLogger(__name__)

_RETRYABLE = frozenset(
    {"LimitExceededException", "TooManyRequestsException", "ThrottlingException"}
)


class ConnectionGone(Exception):
    """The client disconnected (``GoneException``)."""


class RelayError(Exception):
    """A post failed for good (retries exhausted, or an error that no retry fixes)."""


@dataclass
class Relay:
    client: Any  # boto3 "apigatewaymanagementapi" client, endpoint_url = the stage's callback URL
    connection_id: str
    turn: int
    delivery: AudioDelivery = "binary"
    max_attempts: int = 5
    first_backoff: float = 0.05
    frames: int = 0
    bytes_sent: int = 0
    audio_frames: int = 0
    audio_bytes: int = 0
    # A thread lock, not an asyncio one: a post cancelled by its caller still finishes in its
    # thread, and the next frame (say the turn_end) must not overtake it.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    async def control(self, frame: BaseModel) -> None:
        await self._post(dump_control(frame))

    async def audio(self, pcm: bytes) -> None:
        """Post PCM as one or more audio frames (split at 32 KB, never inside a sample)."""
        binary = self.delivery == "binary"
        limit = MAX_AUDIO_PAYLOAD if binary else MAX_BASE64_AUDIO_PAYLOAD
        for payload in split_audio(pcm, limit):
            encode = encode_audio_frame if binary else encode_base64_audio
            await self._post(encode(self.turn, self.audio_frames, payload))
            self.audio_frames += 1
            self.audio_bytes += len(payload)

    async def _post(self, data: bytes) -> None:
        await asyncio.to_thread(self._post_in_order, data)

    def _post_in_order(self, data: bytes) -> None:
        with self._lock:  # one post at a time: frames must arrive in order
            self._post_with_retries(data)
            self.frames += 1
            self.bytes_sent += len(data)

    def _post_with_retries(self, data: bytes) -> None:
        delay = self.first_backoff
        for attempt in range(1, self.max_attempts + 1):
            try:
                self.client.post_to_connection(ConnectionId=self.connection_id, Data=data)
                return
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                if code == "GoneException":
                    raise ConnectionGone(self.connection_id) from error
                if code not in _RETRYABLE or attempt == self.max_attempts:
                    raise RelayError(f"posting to {self.connection_id} failed: {code}") from error
                logger.warning("post throttled (%s), retry %d in %.2f s", code, attempt, delay)
                time.sleep(delay)
                delay *= 2
