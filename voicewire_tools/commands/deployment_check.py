"""What only a deployment can prove, checked in a few seconds from outside (``agent-infra check``).

Three questions, each answered plainly:

1. **Does audio posted through ``@connections`` arrive as binary frames?** The worker posts each
   audio frame's raw bytes (``0xA1`` header, PCM) with ``PostToConnection``, which has no frame
   type parameter; AWS documents nothing about the frame type the client then gets. If it were a
   text frame, its bytes would not be valid UTF-8: a browser (and most clients) would fail the
   connection with close code 1007. So a deployed API sends base64 JSON text frames unless it
   was deployed with binary audio on (``agent-infra deploy --binary-audio``), and this check is
   how a deployment earns that: it speaks a short text on a plain connection (the API's default
   delivery, which ``turn_start`` names), then on one that asks for binary frames
   (``?audio=binary``), and says whether the binary frames arrived as binary.
2. **Time to first audio of a ``speak`` turn**: as this client sees it (from sending the action
   to the first audio frame) and as the turn reports it (``timings.first_audio_ms``).
3. **bidi against batch**: one ``ask`` in each mode on the same prompt, and the ratio of their
   first audio (batch / bidi: how much sooner streaming speaks).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from voicewire.client_protocol import AUDIO_FRAME_MARKER, decode_audio_frame
from voicewire.turn_client import INVALID_UTF8_CLOSE, binary_arrived_as_text, with_query

SPEAK_TEXT = "Hello, this is voicewire checking your deployment."
ASK_PROMPT = "Why does streaming make voice agents feel faster?"
TEXT_VERDICT = (
    "binary posts arrive as text frames: keep base64 (the default); "
    "do not deploy with --binary-audio"
)


class CheckFailed(Exception):
    """The deployment could not be checked (unreachable, refused, a turn that failed)."""


@dataclass
class TurnProbe:
    """One turn as this client saw it."""

    status: str = "no_turn_end"
    announced_delivery: str | None = None  # what turn_start said the connection gets
    audio_delivery: str | None = None  # "binary", "base64", or "text" (raw bytes in a text frame)
    first_audio_ms: float | None = None  # this client's clock, from sending the action
    reported: dict[str, Any] = field(default_factory=dict)  # the turn_end's timings
    audio_bytes: int = 0
    close_code: int | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CheckReport:
    url: str
    default_delivery: str | None = None  # the API's, as its turn_start says
    binary_audio: bool | None = None  # binary frames asked for arrived as binary frames
    binary_as_text: bool | None = None  # ... or as text frames (a 1007 close, or not JSON)
    base64_audio: bool | None = None
    plain: TurnProbe | None = None  # the speak turn on a plain connection (the API's default)
    binary: TurnProbe | None = None  # the speak turn on a connection asking for binary frames
    speak: TurnProbe | None = None  # the speak turn timed (over a delivery that works)
    bidi: TurnProbe | None = None
    batch: TurnProbe | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def batch_over_bidi(self) -> float | None:
        bidi = self.bidi.reported.get("first_audio_ms") if self.bidi else None
        batch = self.batch.reported.get("first_audio_ms") if self.batch else None
        return batch / bidi if bidi and batch else None

    @property
    def ok(self) -> bool:
        return not self.problems


async def probe_turn(url: str, message: dict[str, Any], limit_seconds: float = 60) -> TurnProbe:
    """Send one action on a new connection and follow its turn to ``turn_end``."""
    probe = TurnProbe()
    current_turn: int | None = None
    try:
        async with connect(url, max_size=None, open_timeout=15) as websocket:
            sent = time.perf_counter()
            await websocket.send(json.dumps(message))
            async with asyncio.timeout(limit_seconds):
                async for frame in websocket:
                    if _take_frame(probe, frame, current_turn, sent):
                        return probe
                    if isinstance(frame, str) and (data := _json(frame)) is not None:
                        if data.get("type") == "turn_start":
                            current_turn = data.get("turn")
                            probe.announced_delivery = (data.get("audio") or {}).get("delivery")
                        if data.get("type") == "error" and current_turn is None:
                            return probe  # refused before the turn started
    except InvalidStatus as error:
        status = error.response.status_code
        hint = " (a token is needed: --token)" if status in (401, 403) else ""
        raise CheckFailed(f"the WebSocket handshake was refused with HTTP {status}{hint}") from None
    except (OSError, TimeoutError, InvalidHandshake) as error:
        raise CheckFailed(f"cannot reach {url}: {error}") from None
    except ConnectionClosed as closed:
        if binary_arrived_as_text(closed):
            probe.close_code = INVALID_UTF8_CLOSE
            if probe.audio_delivery is None:
                probe.audio_delivery = "text"  # raw audio bytes in a text frame: not UTF-8
        else:
            frame = closed.rcvd or closed.sent
            probe.close_code = frame.code if frame is not None else None
    return probe


def _take_frame(probe: TurnProbe, frame: str | bytes, turn: int | None, sent: float) -> bool:
    """Record ``frame``; True once the turn has ended."""
    at = round((time.perf_counter() - sent) * 1000, 1)
    if isinstance(frame, bytes):
        if frame[:1] == bytes([AUDIO_FRAME_MARKER]):
            frame_turn, _, payload = decode_audio_frame(frame)
            if frame_turn == turn:
                _audio(probe, "binary", at, len(payload))
        return False
    data = _json(frame)
    if data is None:  # a text frame that is not JSON: raw bytes delivered as text
        if turn is not None and probe.audio_delivery is None:
            probe.audio_delivery = "text"
        return False
    kind = data.get("type")
    if kind == "audio" and data.get("turn") == turn:
        _audio(probe, "base64", at, len(base64.b64decode(data.get("data", ""))))
    elif kind == "error":
        probe.errors.append(data)
    elif kind == "turn_end":
        probe.status = str(data.get("status"))
        probe.reported = dict(data.get("timings") or {})
        return True
    return False


def _audio(probe: TurnProbe, delivery: str, at: float, size: int) -> None:
    probe.audio_delivery = probe.audio_delivery or delivery
    if probe.first_audio_ms is None:
        probe.first_audio_ms = at
    probe.audio_bytes += size


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


async def check(
    url: str,
    token: str | None = None,
    prompt: str = ASK_PROMPT,
    mint: Callable[[], str | None] | None = None,
    connection_url: Callable[[dict[str, str]], str] | None = None,
) -> CheckReport:
    """Run the three checks against a client-link URL (``wss://.../stage``). Each check opens a
    connection, and a connect ticket opens one: ``mint`` gives a fresh ticket for each (else
    ``token``, or the URL's own, is used for all, which a ticket-checking API refuses after the
    first). ``connection_url``: makes each connection's URL from its query instead (an
    AgentCore runtime's presigned URL carries its query inside the signature; ``url`` then only
    names the target in the report)."""
    report = CheckReport(url=url)

    def ticketed(**query: str) -> str:
        if connection_url is not None:
            return connection_url(query)
        return with_query(url, token=(mint() if mint is not None else None) or token, **query)

    speak = {"action": "speak", "text": SPEAK_TEXT}
    report.plain = await probe_turn(ticketed(), speak)
    # An API from before turn_start named its delivery sent binary frames by default.
    report.default_delivery = report.plain.announced_delivery or (
        "binary" if report.plain.audio_delivery in ("binary", "text") else None
    )
    report.binary = (
        report.plain
        if report.default_delivery == "binary"
        else await probe_turn(ticketed(audio="binary"), speak)
    )
    report.binary_audio = report.binary.audio_delivery == "binary"
    report.binary_as_text = report.binary.audio_delivery == "text"
    delivery: dict[str, str] = {}
    report.speak = report.binary
    if not report.binary_audio:
        delivery = {"audio": "base64"}
        report.speak = (
            report.plain
            if report.plain.audio_delivery == "base64"
            else await probe_turn(ticketed(**delivery), speak)
        )
        report.base64_audio = report.speak.audio_delivery == "base64"
        if not report.base64_audio:
            report.problems.append("no audio arrived, neither as binary nor as base64 frames")
        if report.default_delivery == "binary":
            report.problems.append(
                "this API sends binary audio by default, and it does not arrive as binary "
                "frames: deploy it without --binary-audio (stack setting binary_audio=false)"
            )
    if report.speak.status != "complete":
        report.problems.append(_turn_problem("speak", report.speak))
        return report
    for mode in ("bidi", "batch"):
        probe = await probe_turn(
            ticketed(**delivery), {"action": "ask", "prompt": prompt, "mode": mode}
        )
        setattr(report, mode, probe)
        if probe.status != "complete" or probe.first_audio_ms is None:
            report.problems.append(_turn_problem(f"ask ({mode})", probe))
    return report


def _turn_problem(name: str, probe: TurnProbe) -> str:
    codes = ", ".join(f"{e.get('code')}: {e.get('message')}" for e in probe.errors)
    detail = f" ({codes})" if codes else ""
    return f"the {name} turn ended {probe.status}{detail}"


def render(report: CheckReport) -> str:
    lines = [f"voicewire deployment check: {report.url}", ""]
    speak = report.speak
    default = report.default_delivery or "unknown"
    if report.binary_audio:
        lines.append("audio delivery   binary frames: PostToConnection's bytes arrive as binary")
        if report.default_delivery != "binary":
            lines += [
                f"                 (this API's default is {default}: to send binary frames to",
                "                 every client, agent-infra deploy --binary-audio)",
            ]
    elif report.binary_as_text:
        how = (
            "closed the connection (1007: a text frame that is not UTF-8)"
            if report.binary and report.binary.close_code == INVALID_UTF8_CLOSE
            else "arrived as text frames"
        )
        lines += [
            f"audio delivery   {TEXT_VERDICT}.",
            f"                 NOT binary: raw audio posted to @connections {how};",
            "                 base64 JSON text frames, which every client accepts, carry it"
            + (" (checked: it works)." if report.base64_audio else "."),
        ]
    elif report.binary_audio is False:
        status = report.binary.status if report.binary else "unknown"
        lines += [
            "audio delivery   unknown: no audio arrived on the connection asking for binary",
            f"                 frames (its turn ended {status}); keep base64 (the default).",
        ]
    if speak and speak.first_audio_ms is not None:
        reported = speak.reported.get("first_audio_ms")
        lines.append(
            f"speak            first audio {speak.first_audio_ms:.0f} ms here"
            + (f", {reported:.0f} ms reported by the turn" if reported is not None else "")
        )
    if report.bidi and report.batch:
        bidi, batch = report.bidi.reported, report.batch.reported
        if bidi.get("first_audio_ms") and batch.get("first_audio_ms"):
            lines.append(
                f"ask              first audio bidi {bidi['first_audio_ms']:.0f} ms, "
                f"batch {batch['first_audio_ms']:.0f} ms: batch / bidi "
                f"{report.batch_over_bidi:.2f}x"
            )
    lines.append("")
    if report.ok:
        lines.append("all checks passed")
    else:
        lines += [f"problem: {problem}" for problem in report.problems]
    return "\n".join(lines)
