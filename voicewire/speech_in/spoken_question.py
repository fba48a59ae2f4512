"""A question asked aloud, from a recording: ``listen`` on the turn's connection, the recording
streamed to the URL it answers with (``transcribe_client``), and the transcript as the ``ask``'s
prompt, on the same connection (its history, its ticket), as the page does with a microphone.

``SpokenQuestion`` is ``voicewire.turn_client.run_turn``'s ``prepare``. Its events, on the turn's
clock: ``listen`` (the offer: sample rate, expiry; never the URL, which is a credential),
``heard`` (each partial and final result), ``end_of_speech`` (where the last final result ends,
in the audio as it was streamed: at ``pace`` 1, the moment the speaker stopped), then the
turn's own. A question nobody can answer is raised as ``NothingHeard``; a refused ``listen`` as
``ListenRefused`` with its stable code.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from voicewire.speech_in.end_of_turn import EndOfTurn
from voicewire.speech_in.transcribe_client import HeardText, transcribe


class ListenRefused(Exception):
    """The front door answered ``listen`` with an error frame (its code and message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


class NothingHeard(Exception):
    """The recording gave no words (silence, noise): there is no question to ask."""


@dataclass
class SpokenQuestion:
    pcm: bytes  # 16-bit little-endian mono
    sample_rate: int
    pace: float = 1.0  # 1: as spoken; up to 2 (transcribe_client.MAX_PACE); 0: that fastest
    language_code: str = "en-US"
    limit_seconds: float = 30
    # None: the question is the whole recording; a rule: the turn ends as a live client ends it
    # (a final result, then the rule's wait without a new one: ``end_of_turn``).
    end_of_turn: EndOfTurn | None = None

    async def __call__(self, websocket: Any, emit: Callable[..., None]) -> dict[str, Any]:
        offer = await self._offer(websocket)
        emit(
            "listen",
            {k: offer[k] for k in ("language_code", "sample_rate", "expires_in_s") if k in offer},
        )
        streamed_at = time.perf_counter()

        def heard(result: HeardText) -> None:
            emit("heard", {"text": result.text, "final": result.final, "end_s": result.end_s})

        transcription = await transcribe(
            offer["url"],
            self.pcm,
            self.sample_rate,
            pace=self.pace,
            on_result=heard,
            end_of_turn=self.end_of_turn,
        )
        if transcription.decided_ms is not None and self.end_of_turn is not None:
            waited = self.end_of_turn.wait_ms(transcription.finals[-1].text)
            emit("end_of_turn", {"after_ms": waited})
        if not transcription.text:
            raise NothingHeard(
                f"nothing was recognized in {transcription.audio_s:.1f} s of audio; no turn "
                "was asked"
            )
        last = transcription.finals[-1]
        # Where the speaker stopped, on the turn's clock: the stream began ``streamed_at``, and
        # its samples left at ``pace`` times real time.
        stopped = streamed_at + (last.end_s / self.pace if self.pace > 0 else 0.0)
        emit("end_of_speech", {"text": transcription.text, "audio_s": last.end_s}, stopped)
        return {"prompt": transcription.text}

    async def _offer(self, websocket: Any) -> dict[str, Any]:
        await websocket.send(
            json.dumps(
                {
                    "action": "listen",
                    "language_code": self.language_code,
                    "sample_rate": self.sample_rate,
                }
            )
        )
        async with asyncio.timeout(self.limit_seconds):
            async for frame in websocket:
                if not isinstance(frame, str):
                    continue
                data = json.loads(frame)
                if data.get("type") == "listen":
                    return dict(data)
                if data.get("type") == "error":
                    raise ListenRefused(str(data.get("code")), str(data.get("message")))
        raise ConnectionError("the connection closed before the answer to listen")
