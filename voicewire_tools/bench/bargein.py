"""``voicewire bench bargein``: cutting the agent off by voice on the browser page, how fast
when a person means it, and how often when nobody does.

    uv run voicewire bench bargein [--modes speech,first-word] [--trials 10] [--over-echo 5]
        [--turns 20] [--noises 3] [--echo-db -6] [--echo-delay-ms 100] [--echo-seconds 5]
        [--json F]

The real page (web/) in Debian's headless Chromium, driven by Playwright, against its own
local stack (``voicewire up``'s topology: the replay LLM, Kokoro, the Transcribe endpoint with
the offline Whisper recognizer, since "first-word" needs real words). Chromium's fake
microphone plays a WAV file (``--use-file-for-fake-audio-capture=F%noloop``) from the moment the
page opens the microphone, once per Listen; the page is asked "Tell me a story" (the replay
LLM's long answer) and Listen is pressed while its answer is heard, so the file plays over the
agent's voice. For each barge-in mode of web/listening.js (``bargeInOn``, set by rewriting the
module on its way to the page; the page's other defaults as they are):

- **barge-in latency**: Listen once the agent has spoken 1 s; the file is 0.5 s of silence,
  then a person's interruption ("Wait, stop, tell me about Paris instead.", Kokoro's
  am_michael, a voice the agent never uses). Measured on the page's clock, from the first
  microphone chunk the worklet marked as the person's voice (their first sound as the page
  hears it) to the moment the player stopped the agent's audio
  (``window.voicewireListening.stats.bargeIn``, speech_in.js: in "speech" mode the hold's
  start, when the agent paused on voice alone before the recogniser's first word confirmed the
  cut); p50
  and p95 over ``--trials``.
  Target (issue 42, 2 cores): p50 <= 300 ms.
- **over the agent's echo** (``--over-echo`` times): the same interruption 1 s into a file of
  the agent's echo (below): the harder case, timed from the person's first sound in the file.
  No target; what the echo guard costs a person who interrupts a loud echo.
- **echo**: the file is the agent's own answer (recorded once over the client link: the same
  prompt, voice and text, so the same audio), ``--echo-db`` quieter, from where the agent is
  heard when Listen is pressed, so that it comes about ``--echo-delay-ms`` after the agent's
  voice as a loudspeaker's does (the file is written anew before each Listen; Listen's own
  delay is measured and taken off; the delay reached is reported). Chromium's echo canceller
  does not remove an echo that is in the capture file, and its automatic gain brings it up to
  about the agent's level. Each of ``--turns`` agent turns is watched for ``--echo-seconds``:
  a cut is a wrong cut. Target: 0 in 20. On a loaded machine the agent's audio may come late
  and leave a gap in its voice, where the file's echo goes on although no loudspeaker would
  sound: a turn is judged up to its first gap (the seconds judged are reported), and a cut
  after one is counted apart, not as a wrong cut.
- **short noises**: a cough (150 ms of shaped noise) and Kokoro's "Mm-hm." (am_michael, 0.85 s
  of voice), each 1 s into the file, ``--noises`` turns each: a cut is a wrong cut. Target:
  none. A hold that went on (the agent paused, the recogniser heard a backchannel or nothing,
  and it resumed where it paused) is no cut: how many there were and how long they paused is
  reported beside the cuts, for the echo turns too.

Not a test: figures are printed and written with ``--json``, with the load average while it
ran. A default run takes about ten minutes on 2 cores; ``--modes``, ``--trials``,
``--over-echo``, ``--turns`` and ``--noises`` shrink it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import math
import multiprocessing
import os
import re
import shutil
import tempfile
import time
import wave
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json

MODES = ("speech", "first-word")
PROMPT = "Tell me a story"  # the replay LLM's long default answer (about 35 s of speech)
INTERRUPTION = ("Wait, stop, tell me about Paris instead.", "am_michael")
BACKCHANNEL = ("Mm-hm.", "am_michael")
KOKORO_RATE = 24_000
WAV_RATE = 48_000
LEAD_S = 0.5  # silence before the interruption
NOISE_AT_S = 1.0  # a short noise this far into its file
COUGH_S = 0.15
LATENCY_TARGET_MS = 300.0
INTERRUPT_AFTER_MS = 1000.0  # Listen once the agent has spoken this long (then LEAD_S)
OVER_ECHO_AT_S = 1.0  # the interruption over the echo starts this far into its file
ECHO_AFTER_MS = 1500.0  # the echo starts once the agent has spoken this long...
ECHO_AHEAD_MS = 3000.0  # ...and has this much audio ahead (no gap in its voice soon)
AHEAD_PATIENCE_S = 6.0  # ...or once this long has passed since the ask
RECORD_S = ECHO_AFTER_MS / 1000 + AHEAD_PATIENCE_S + 3.0  # the answer's audio the echo may need
NATURAL_DELAY_MS = 30.0  # a first guess at Listen's delay to the file's start (then measured)
CHUNK_MS = 50.0  # the microphone's chunks
TURN_WAIT_S = 60.0  # the agent's first audio, on a loaded machine
BARGE_WAIT_S = 8.0  # the interruption's cut, at most (first-word waits for Whisper)

# The page's clock, read in the page. Ask for the story; resolves once its voice has been heard
# for heardMs and its audio is aheadMs ahead of what is heard (no gap soon), or after patienceMs
# (a loaded machine may never get that far ahead).
ASK = """async ({prompt, waitMs, heardMs, aheadMs, patienceMs}) => {
    const $ = (id) => document.getElementById(id);
    const stats = window.voicewireStats;
    const before = { turn: stats.turn, scheduled: stats.secondsScheduled };
    $('prompt').value = prompt;
    $('ask').click();
    const asked = performance.now();
    for (;;) {
        const heard = stats.turn !== before.turn && stats.playing > 0 ? stats.heardMs : 0;
        const ahead = (stats.secondsScheduled - before.scheduled) * 1000 - heard;
        const waited = performance.now() - asked;
        if (heard > heardMs && (ahead >= aheadMs || waited > patienceMs)) {
            return { asked, at: performance.now(), heardMs: heard };
        }
        if (performance.now() - asked > waitMs) {
            // What the page shows then says why (an error frame, a turn that ended unheard).
            const shown = ['status', 'error', 'turn-summary', 'notice']
                .map((id) => `${id}: ${$(id).textContent.trim() || '-'}`).join('; ');
            return { error: `no audio from the agent in ${waitMs / 1000} s (turn ${stats.turn}, `
                + `${stats.framesDecoded} frames decoded, heard ${heard} ms; ${shown})` };
        }
        await new Promise((resolve) => setTimeout(resolve, 2));
    }
}"""
# Press Listen (the fake microphone starts its file); resolves at its first chunk.
LISTEN = """async () => {
    const listenAt = performance.now();
    const heardMs = window.voicewireStats.heardMs;
    const chunks = window.voicewireListening.stats.chunks;
    document.getElementById('mic').click();
    while (window.voicewireListening.stats.chunks === chunks) {
        if (performance.now() - listenAt > 10000) return { error: 'the microphone never started' };
        await new Promise((resolve) => setTimeout(resolve, 1));
    }
    return { listenAt, heardMs, firstChunkAt: performance.now() };
}"""
# Listening off first (what the file still plays is then no one's turn), then the agent stopped.
QUIET = """async () => {
    const $ = (id) => document.getElementById(id);
    if (window.voicewireListening.mode === 'open') $('mic').click();
    if (!$('cancel').disabled) $('cancel').click();
    const t = performance.now();
    while (window.voicewireStats.playing > 0 && performance.now() - t < 2000) {
        await new Promise((resolve) => setTimeout(resolve, 20));
    }
}"""
STATS = "() => window.voicewireListening.stats"
# While watching: cuts so far, and when the agent's voice first had a gap after `since` (its
# audio came late and ran out; null: none yet), on the page's clock.
WATCH = """(since) => {
    const spans = window.voicewireStats.playback;
    let gap = null;
    for (let i = 1; i < spans.length && gap === null; i++) {
        if (spans[i - 1][1] > since && spans[i][0] - spans[i - 1][1] > 20) gap = spans[i - 1][1];
    }
    return { bargeIns: window.voicewireListening.stats.bargeIns, gap, now: performance.now() };
}"""


@dataclass(frozen=True)
class Sounds:
    """What the fake microphone plays, as 48 kHz samples in -1..1."""

    interruption: NDArray[np.float32]
    backchannel: NDArray[np.float32]
    answer: NDArray[np.float32]  # the agent's answer to PROMPT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--modes", default=",".join(MODES), help="barge-in modes to measure (listening.js)"
    )
    parser.add_argument("--trials", type=int, default=10, help="interruptions per mode")
    parser.add_argument("--turns", type=int, default=20, help="echo turns per mode")
    parser.add_argument("--noises", type=int, default=3, help="turns per short noise and mode")
    parser.add_argument(
        "--over-echo", type=int, default=5, help="interruptions over the agent's echo per mode"
    )
    parser.add_argument("--echo-db", type=float, default=-6.0, help="the echo's level (dB)")
    parser.add_argument(
        "--echo-delay-ms", type=float, default=100.0, help="the loudspeaker's delay in the file"
    )
    parser.add_argument(
        "--echo-seconds", type=float, default=5.0, help="how long each echo turn is watched"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from voicewire_tools.bench.ttfa import speech_info
    from voicewire_tools.commands.demo import target
    from voicewire_tools.commands.speech_in_setup import ensure_speech_in

    if args.url:
        raise ValueError("bench bargein needs its own stack (its page and recognizer)")
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or set(modes) - set(MODES):
        raise ValueError(f"--modes: one or more of {', '.join(MODES)}")
    if shutil.which("chromium") is None:
        raise RuntimeError("bench bargein drives Debian's chromium: apt-get install chromium")
    ensure_speech_in(progress=lambda line: print(line, flush=True))
    print("speaking the interruption and the backchannel with Kokoro-82M ...", flush=True)
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as child:
        spoken = child.submit(speak_in_child, (INTERRUPTION, BACKCHANNEL)).result()
    args.listen = True  # the stack's Transcribe endpoint, with the offline recognizer
    with target(None, args) as (_url, stack):
        machine = describe_machine(speech_info(stack))
        print(machine_line(machine), flush=True)
        stack.transcribe.endpoint.recognizer.wait(120)  # loaded before the first turn
        data = asyncio.run(
            measure(
                stack,
                spoken,
                modes=modes,
                trials=args.trials,
                turns=args.turns,
                noises=args.noises,
                over_echo_trials=args.over_echo,
                echo=Echo(args.echo_db, args.echo_delay_ms, args.echo_seconds),
                progress=lambda line: print(line, flush=True),
            )
        )
    data = {"machine": machine, **data}
    print_report(data)
    write_json(data, args.json)
    return data


def speak_in_child(lines: tuple[tuple[str, str], ...]) -> list[NDArray[np.float32]]:
    """Each (text, voice) spoken by the speech server's default Kokoro-82M engine, 24 kHz."""
    from speech_server.engines.onnx_engine import KokoroOnnxEngine
    from speech_server.settings import EngineSettings

    engine = KokoroOnnxEngine.from_settings(EngineSettings())
    return [np.asarray(engine.synthesize(text, voice, 1.0), np.float32) for text, voice in lines]


# --- sound files --------------------------------------------------------------------------------


def at_wav_rate(audio: NDArray[np.floating], rate: int = KOKORO_RATE) -> NDArray[np.float32]:
    from voicewire_tools.bench.speech_in import resample

    return resample(np.asarray(audio, np.float32), rate, WAV_RATE)


def silence(seconds: float) -> NDArray[np.float32]:
    return np.zeros(int(seconds * WAV_RATE), np.float32)


def cough(seconds: float = COUGH_S, seed: int = 7) -> NDArray[np.float32]:
    """A cough-like burst: noise, low-passed a little (a cough is breathy, not hiss), with a
    sharp attack and a decay; peak about -6 dBFS."""
    count = int(seconds * WAV_RATE)
    noise = np.random.default_rng(seed).normal(0.0, 1.0, count)
    smooth = np.convolve(noise, np.ones(6) / 6, mode="same")  # a gentle low-pass
    t = np.arange(count) / WAV_RATE
    envelope = np.minimum(1.0, t / 0.01) * np.exp(-t / (seconds / 3))
    burst = smooth * envelope
    return (0.5 * burst / np.max(np.abs(burst))).astype(np.float32)


def write_wav(path: Path, samples: NDArray[np.floating], rate: int = WAV_RATE) -> Path:
    """Mono 16-bit samples in -1..1 as a WAV file (what Chromium's fake microphone plays)."""
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    with wave.open(str(path), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(pcm)
    return path


class NoAnswerAudio(RuntimeError):
    """The turn recorded for the echo ended without audio (a failed turn: on a loaded machine
    the speech container may miss SageMaker's 250 ms accept, which the local runtime enforces)."""


RECORD_TRIES = 3


async def recorded_answer(
    url: str, seconds: float, progress: Callable[[str], None]
) -> NDArray[np.float32]:
    """record_answer, asked again (at most RECORD_TRIES in all) after a turn that failed."""
    for attempt in range(1, RECORD_TRIES + 1):
        try:
            return await record_answer(url, seconds)
        except NoAnswerAudio as failed:
            if attempt == RECORD_TRIES:
                raise
            progress(f"{failed}; asking again")
    raise AssertionError("unreachable")


async def record_answer(url: str, seconds: float) -> NDArray[np.float32]:
    """The first ``seconds`` of the agent's answer to PROMPT as the page will hear it (the
    page's defaults: bidi, the default voice, speed 1), as 24 kHz samples; the rest of the turn
    is cancelled."""
    import json

    from websockets.asyncio.client import connect

    from voicewire.client_protocol import decode_audio_frame

    audio = bytearray()
    ended: dict[str, Any] = {}
    async with connect(url, max_size=None) as socket, asyncio.timeout(TURN_WAIT_S + seconds):
        await socket.send(json.dumps({"action": "ask", "prompt": PROMPT, "mode": "bidi"}))
        turn, turn_id = None, None
        async for frame in socket:
            if isinstance(frame, bytes):
                number, _seq, payload = decode_audio_frame(frame)
                if number == turn:
                    audio += payload
                if len(audio) >= seconds * KOKORO_RATE * 2:
                    await socket.send(json.dumps({"action": "cancel", "turn_id": turn_id}))
                    break
                continue
            data = json.loads(frame)
            if data.get("type") == "turn_start":
                turn, turn_id = data["turn"], data["turn_id"]
            elif data.get("type") in ("turn_end", "error"):
                ended = data
                break
    if not audio:
        why = ended.get("error_code") or ended.get("code") or ended.get("status") or "no end"
        raise NoAnswerAudio(f"the agent's answer could not be recorded: no audio ({why})")
    return np.frombuffer(bytes(audio), "<i2").astype(np.float32) / 32768


def sound_files(folder: Path, sounds: Sounds) -> dict[str, Path]:
    return {
        "interruption": write_wav(
            folder / "interruption.wav",
            np.concatenate([silence(LEAD_S), sounds.interruption, silence(2.0)]),
        ),
        "cough": write_wav(
            folder / "cough.wav", np.concatenate([silence(NOISE_AT_S), cough(), silence(3.0)])
        ),
        "backchannel": write_wav(
            folder / "backchannel.wav",
            np.concatenate([silence(NOISE_AT_S), sounds.backchannel, silence(3.0)]),
        ),
    }


# --- the browser --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def page_hearing(base_url: str, wav: Path, *, mode: str) -> AsyncIterator[Any]:
    """A fresh headless Chromium whose fake microphone plays ``wav`` (once per Listen), with
    the page open and connected, and listening.js's ``bargeInOn`` set to ``mode`` (the module
    is rewritten on its way to the page: the page itself has no such switch)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=shutil.which("chromium"),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--autoplay-policy=no-user-gesture-required",
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={wav}%noloop",
            ],
        )
        try:
            page = await browser.new_page()

            async def set_mode(route: Any) -> None:
                response = await route.fetch()
                body = await response.text()
                body, count = re.subn(
                    r'bargeInOn: "[a-z-]+"', f'bargeInOn: "{mode}"', body, count=1
                )
                if count != 1:
                    raise RuntimeError("listening.js has no bargeInOn default to set")
                await route.fulfill(response=response, body=body)

            await page.route("**/listening.js", set_mode)
            await page.goto(f"{base_url}/")
            await page.wait_for_function(
                "() => document.getElementById('status').dataset.state === 'open'",
                timeout=30_000,
            )
            options = await page.evaluate("() => window.voicewireListening.options")
            if options["bargeInOn"] != mode:
                raise RuntimeError(f"the page runs {options['bargeInOn']}, not {mode}")
            yield page
        finally:
            await browser.close()


async def one_turn(
    page: Any,
    watch_s: float,
    *,
    until_cut: bool = False,
    heard_ms: float = 0.0,
    ahead_ms: float = 0.0,
    before_listen: Callable[[dict[str, Any]], None] | None = None,
    until_gap: bool = False,
) -> dict[str, Any]:
    """Ask for the story; once its voice has been heard for ``heard_ms`` with ``ahead_ms`` of
    audio ahead, ``before_listen`` (the echo's file is written then) and Listen (the file
    starts); watch for ``watch_s`` (or until a cut, with ``until_cut``; or until a gap in the
    agent's voice, with ``until_gap``); then stop listening and the agent."""
    before = await page.evaluate(STATS)
    asked = await page.evaluate(
        ASK,
        {
            "prompt": PROMPT,
            "waitMs": TURN_WAIT_S * 1e3,
            "heardMs": heard_ms,
            "aheadMs": ahead_ms,
            "patienceMs": AHEAD_PATIENCE_S * 1e3,
        },
    )
    if "error" in asked:
        raise RuntimeError(asked["error"])
    if before_listen is not None:
        before_listen(asked)
    started = await page.evaluate(LISTEN)
    if "error" in started:
        raise RuntimeError(started["error"])
    began = time.monotonic()
    while time.monotonic() < began + watch_s:
        now = await page.evaluate(WATCH, started["listenAt"])
        if until_cut and now["bargeIns"] > before["bargeIns"]:
            break
        if until_gap and now["gap"] is not None:
            break
        await asyncio.sleep(0.05)
    now = await page.evaluate(WATCH, started["listenAt"])
    stats = await page.evaluate(STATS)
    await page.evaluate(QUIET)
    events = [e for e in stats["events"] if e["at"] >= started["listenAt"]]
    cut = stats["bargeIns"] > before["bargeIns"]
    held = stats["holds"] > before["holds"]
    hearing = next(
        (e["at"] for e in events if e["type"] == "state" and e["state"] == "hearing"), None
    )
    return {
        "cut": cut,
        "barge_in": stats.get("bargeIn") if cut else None,
        # "speech" paused the agent on voice alone; resumedAt: it went on (no barge-in)
        "hold": stats.get("hold") if held else None,
        "asked": asked,
        "started": started,
        "gap_at": now["gap"],  # the agent's voice first had a gap (None: no gap)
        "ended_at": now["now"],
        "hearing_at": hearing,
        "events": events,
        "max_run_ms": stats["maxRunMs"],
        "heard": next(  # the recogniser's last words for it
            (e["text"] for e in reversed(events) if e.get("text")), ""
        ),
    }


@dataclass(frozen=True)
class Echo:
    """How the agent's voice comes back into the microphone."""

    db: float = -6.0  # its level, against the agent's
    delay_ms: float = 100.0  # its delay after the agent's voice
    seconds: float = 5.0  # how long each echo turn is watched


async def measure(
    stack: Any,
    spoken: list[NDArray[np.float32]],
    *,
    modes: tuple[str, ...] = MODES,
    trials: int = 10,
    turns: int = 20,
    noises: int = 3,
    over_echo_trials: int = 5,
    echo: Echo = Echo(),
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Every scenario in every mode on this stack (listen=True); ``spoken``: Kokoro's 24 kHz
    interruption and backchannel."""
    progress(f"recording the agent's answer to {PROMPT!r} ...")
    answer = await recorded_answer(stack.ws_url, RECORD_S + echo.seconds, progress)
    sounds = Sounds(
        interruption=at_wav_rate(spoken[0]),
        backchannel=at_wav_rate(spoken[1]),
        answer=at_wav_rate(answer),
    )
    loads = [os.getloadavg()[0]]

    def done(line: str) -> None:
        progress(line)
        loads.append(os.getloadavg()[0])

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bargein-") as folder:
        files = sound_files(Path(folder), sounds)
        for mode in modes:
            progress(f"mode {mode}:")
            page = functools.partial(page_hearing, stack.base_url, mode=mode)
            latency = await interruptions(page(files["interruption"]), trials, done)
            over = await over_echo(page, Path(folder), sounds, echo, over_echo_trials, done)
            echoes = await echo_turns(page, Path(folder), sounds.answer, echo, turns, done)
            noise = {
                kind: await noise_turns(page(files[kind]), kind, noises, done)
                for kind in ("cough", "backchannel")
            }
            results[mode] = summarize(latency, echoes, noise, over)
    return {
        "date": time.strftime("%Y-%m-%d"),
        "load_average": {
            "before": round(loads[0], 2),
            "mean": round(float(np.mean(loads)), 2),
            "max": round(max(loads), 2),
        },
        "settings": {
            "trials": trials,
            "turns": turns,
            "noises": noises,
            "over_echo": over_echo_trials,
            "echo_db": echo.db,
            "echo_delay_ms": echo.delay_ms,
            "echo_seconds": echo.seconds,
            "answer_recorded_s": round(len(answer) / KOKORO_RATE, 1),
        },
        "modes": results,
    }


async def interruptions(
    opening: contextlib.AbstractAsyncContextManager, trials: int, done: Callable[[str], None]
) -> list[float]:
    """The interruption over the agent's voice, ``trials`` times: each cut's latency (NaN: no
    cut within BARGE_WAIT_S)."""
    latency: list[float] = []
    if not trials:
        return latency
    async with opening as page:
        for trial in range(trials):
            turn = await one_turn(page, BARGE_WAIT_S, until_cut=True, heard_ms=INTERRUPT_AFTER_MS)
            latency.append(latency_ms(turn))
            done(f"  interruption {trial + 1}: {_ms(latency[-1])} (heard {turn['heard']!r})")
    return latency


class EchoFile:
    """The fake microphone's file for turns with the agent's echo in it, written anew before
    each Listen (Chromium reads it at each start of the fake device): the answer from where the
    agent is heard then, so that it comes ``echo.delay_ms`` after the agent's voice (Listen's
    own delay to the file's start is measured and taken off); ``over`` is added to it at
    ``over_at_s`` (a person speaking over the echo)."""

    def __init__(
        self,
        path: Path,
        answer: NDArray[np.float32],
        echo: Echo,
        over: NDArray[np.float32] | None = None,
        over_at_s: float = 0.0,
    ) -> None:
        self.path = write_wav(path, silence(1.0))
        self.answer, self.echo, self.over, self.over_at_s = answer, echo, over, over_at_s
        self.took: list[float] = []  # from the ask's answer to the file's start, measured

    def guess(self) -> float:
        return float(np.median(self.took)) if self.took else NATURAL_DELAY_MS

    def write(self, asked: dict[str, Any]) -> None:
        skip_ms = asked["heardMs"] + self.guess() - self.echo.delay_ms
        start = max(0, int(skip_ms / 1000 * WAV_RATE))
        samples = 10 ** (self.echo.db / 20) * self.answer[start:]
        if self.over is not None:
            at = int(self.over_at_s * WAV_RATE)
            end = at + len(self.over)
            samples = np.concatenate([samples, silence(max(0.0, (end - len(samples)) / WAV_RATE))])
            samples[at:end] += self.over
        write_wav(self.path, samples)

    def delay_ms(self, turn: dict[str, Any]) -> float:
        """How late the echo came after the agent's voice in this turn (about)."""
        took = turn["started"]["firstChunkAt"] - CHUNK_MS - turn["asked"]["at"]
        delay = self.echo.delay_ms + took - self.guess()
        self.took.append(took)
        return delay

    @contextlib.asynccontextmanager
    async def opened(
        self, page: Callable[[Path], contextlib.AbstractAsyncContextManager]
    ) -> AsyncIterator[Any]:
        async with page(self.path) as opened:
            await opened.evaluate(LISTEN)  # the capture's first start is slower than the next
            await opened.evaluate(QUIET)
            yield opened


async def echo_turns(
    page: Callable[[Path], contextlib.AbstractAsyncContextManager],
    folder: Path,
    answer: NDArray[np.float32],
    echo: Echo,
    turns: int,
    done: Callable[[str], None],
) -> list[dict[str, Any]]:
    """``turns`` agent turns with their own voice in the microphone (EchoFile), each watched
    for ``echo.seconds``. Judged up to the first gap in the agent's voice: on a loaded machine
    its audio may come late and run out, and the file's echo would go on where no loudspeaker
    sounds (a person speaking in the agent's pause), and run ahead of it after."""
    results: list[dict[str, Any]] = []
    if not turns:
        return results
    file = EchoFile(folder / "echo.wav", answer, echo)
    async with file.opened(page) as opened:
        for number in range(turns):
            turn = await one_turn(
                opened,
                echo.seconds,
                heard_ms=ECHO_AFTER_MS,
                ahead_ms=ECHO_AHEAD_MS,
                before_listen=file.write,
                until_gap=True,
            )
            delay = file.delay_ms(turn)
            listened = turn["started"]["listenAt"]
            barge = turn["barge_in"]
            judged_to = turn["gap_at"] if turn["gap_at"] is not None else turn["ended_at"]
            if barge:
                judged_to = min(judged_to, barge["stoppedAt"])
            in_gap = bool(barge) and turn["gap_at"] is not None
            results.append(
                {
                    "cut": bool(barge) and not in_gap,
                    "cut_in_gap": in_gap,
                    "held": turn["hold"] is not None and not barge,
                    "paused_ms": paused_ms(turn),
                    "echo_delay_ms": delay,
                    "judged_s": max(0.0, judged_to - listened) / 1000,
                }
            )
            said = "CUT" if results[-1]["cut"] else "not cut"
            if results[-1]["held"]:
                said += f" (paused {_ms(results[-1]['paused_ms'])})"
            if in_gap:
                said = "cut after a gap in the agent's voice (not judged)"
            done(
                f"  echo turn {number + 1}: {said}, {results[-1]['judged_s']:.1f} s judged, "
                f"the echo about {delay:.0f} ms late"
            )
    return results


async def over_echo(
    page: Callable[[Path], contextlib.AbstractAsyncContextManager],
    folder: Path,
    sounds: Sounds,
    echo: Echo,
    trials: int,
    done: Callable[[str], None],
) -> list[float]:
    """The interruption spoken over the agent's echo (EchoFile with the interruption added
    OVER_ECHO_AT_S in), ``trials`` times: the latency of each cut from the person's first sound
    in the file (its time after the capture's start; the page cannot tell it from the echo by
    itself), NaN for none; a cut before it (on the echo) is -1."""
    latency: list[float] = []
    if not trials:
        return latency
    lead = first_sound_s(sounds.interruption)
    file = EchoFile(
        folder / "over_echo.wav", sounds.answer, echo, sounds.interruption, OVER_ECHO_AT_S
    )
    async with file.opened(page) as opened:
        for trial in range(trials):
            turn = await one_turn(
                opened,
                BARGE_WAIT_S,
                until_cut=True,
                heard_ms=INTERRUPT_AFTER_MS,
                before_listen=file.write,
            )
            file.delay_ms(turn)
            spoke = turn["started"]["firstChunkAt"] - CHUNK_MS + (OVER_ECHO_AT_S + lead) * 1000
            barge = turn["barge_in"]
            ms = math.nan if not barge else barge["stoppedAt"] - spoke
            latency.append(-1.0 if ms < 0 else ms)
            said = "cut before the person spoke" if ms < 0 else _ms(ms)
            done(f"  interruption over the echo {trial + 1}: {said} (heard {turn['heard']!r})")
    return latency


def first_sound_s(audio: NDArray[np.floating], floor_db: float = -40.0) -> float:
    """Where the first sample above ``floor_db`` is, in seconds (WAV_RATE samples)."""
    loud = np.flatnonzero(np.abs(audio) >= 10 ** (floor_db / 20))
    return float(loud[0]) / WAV_RATE if len(loud) else 0.0


async def noise_turns(
    opening: contextlib.AbstractAsyncContextManager,
    kind: str,
    noises: int,
    done: Callable[[str], None],
) -> list[dict[str, Any]]:
    """A short noise over the agent's voice, ``noises`` times: was it cut?"""
    results: list[dict[str, Any]] = []
    if not noises:
        return results
    async with opening as page:
        for number in range(noises):
            turn = await one_turn(page, NOISE_AT_S + 4.0)  # a hold and its resume
            paused = paused_ms(turn)
            results.append(
                {
                    "cut": turn["cut"],
                    "held": turn["hold"] is not None and not turn["cut"],
                    "paused_ms": paused,
                    "max_run_ms": turn["max_run_ms"],
                    "heard": turn["heard"],
                }
            )
            said = "CUT" if turn["cut"] else "not cut"
            if not turn["cut"] and turn["hold"] is not None:
                said += f", paused {_ms(paused)} then went on"
            done(f"  {kind} {number + 1}: {said} (heard {turn['heard']!r})")
    return results


def paused_ms(turn: dict[str, Any]) -> float:
    """How long a hold paused the agent before it went on; NaN: no hold, or one that ended in a
    cut or had not ended when the turn was stopped."""
    hold = turn["hold"]
    if not hold or turn["cut"] or hold.get("resumedAt") is None:
        return math.nan
    return float(hold["resumedAt"] - hold["heldAt"])


def latency_ms(turn: dict[str, Any]) -> float:
    """First voice chunk to the player's stop, on the page's clock; NaN: no cut."""
    barge = turn["barge_in"]
    if not barge or barge.get("voiceAt") is None:
        return math.nan
    return float(barge["stoppedAt"] - barge["voiceAt"])


def summarize(
    latency: list[float], echo: list[dict], noise: dict[str, list], over: list[float]
) -> dict[str, Any]:
    delays = [e["echo_delay_ms"] for e in echo if not math.isnan(e["echo_delay_ms"])]
    over_echo = latencies(over)
    over_echo["cut_on_echo"] = sum(v < 0 for v in over)
    return {
        "latency_ms": latencies(latency),
        "over_echo_latency_ms": over_echo,  # the interruption over the agent's echo
        "echo": {
            "turns": len(echo),
            "cut": sum(e["cut"] for e in echo),
            "cut_in_gap": sum(e["cut_in_gap"] for e in echo),  # not judged
            "held": sum(e["held"] for e in echo),  # paused, then went on
            "judged_s": round(sum(e["judged_s"] for e in echo), 1),
            "delay_ms_p50": _pct(delays, 50),
        },
        "noises": {
            kind: {
                "turns": len(trials),
                "cut": sum(t["cut"] for t in trials),
                "held": sum(t["held"] for t in trials),  # paused, then went on: no cut
                "paused_ms": latencies([t["paused_ms"] for t in trials]),
            }
            for kind, trials in noise.items()
        },
    }


def latencies(values: list[float]) -> dict[str, Any]:
    measured = [v for v in values if v >= 0]  # NaN (no cut) and -1 (a cut on echo) are out
    return {
        "p50": _pct(measured, 50),
        "p95": _pct(measured, 95),
        "n": len(measured),
        "missed": len(values) - len(measured),
        "values": [round(v) for v in measured],
    }


def _pct(values: list[float], percent: float) -> float | None:
    return round(float(np.percentile(values, percent))) if values else None


def _ms(value: float) -> str:
    return "none" if math.isnan(value) else f"{value:.0f} ms"


def targets(figures: dict[str, Any]) -> dict[str, bool | None]:
    """Which of issue 42's targets a mode met (None: not measured)."""
    latency = figures["latency_ms"]
    noises = figures["noises"]
    return {
        "latency": None
        if latency["p50"] is None
        else latency["p50"] <= LATENCY_TARGET_MS and latency["missed"] == 0,
        "echo": None if not figures["echo"]["turns"] else figures["echo"]["cut"] == 0,
        "noises": None
        if not any(n["turns"] for n in noises.values())
        else all(n["cut"] == 0 for n in noises.values()),
    }


def print_report(data: dict[str, Any]) -> None:
    settings = data["settings"]
    load = data["load_average"]
    print(
        f"\nbarge-in on the page, {settings['trials']} interruptions, {settings['turns']} echo "
        f"turns ({settings['echo_db']:+.0f} dB, {settings['echo_delay_ms']:.0f} ms late in the "
        f"file), {settings['noises']} of each short noise, per mode; load average "
        f"{load['before']} before, {load['mean']} mean, {load['max']} max"
    )
    for mode, figures in data["modes"].items():
        latency = figures["latency_ms"]
        met = targets(figures)
        word = {True: "met", False: "MISSED", None: "not measured"}
        print(f"  {mode}:")
        if latency["n"]:
            print(
                f"    barge-in latency p50 {latency['p50']} ms, p95 {latency['p95']} ms "
                f"({latency['n']} cuts, {latency['missed']} missed): target p50 <= "
                f"{LATENCY_TARGET_MS:.0f} ms {word[met['latency']]}"
            )
        else:
            print(f"    barge-in latency: no cut in {latency['missed']} interruptions")
        over = figures["over_echo_latency_ms"]
        if over["n"] or over["missed"]:
            print(
                f"    over the agent's echo: p50 {over['p50']} ms, p95 {over['p95']} ms "
                f"({over['n']} cuts, {over['missed'] - over['cut_on_echo']} missed, "
                f"{over['cut_on_echo']} cut on the echo before the person spoke)"
            )
        echo = figures["echo"]
        print(
            f"    echo: {echo['cut']} cut of {echo['turns']} turns, {echo['judged_s']} s of echo "
            f"judged in all (the echo {echo['delay_ms_p50']} ms late, p50; "
            f"{echo['cut_in_gap']} more cut after a gap in the agent's voice, not judged; "
            f"{echo['held']} paused, then went on): target 0 {word[met['echo']]}"
        )
        noises = ", ".join(
            f"{kind} {n['cut']} cut of {n['turns']}"
            + (f" ({n['held']} paused, p50 {n['paused_ms']['p50']} ms)" if n["held"] else "")
            for kind, n in figures["noises"].items()
        )
        print(f"    short noises: {noises}: target none {word[met['noises']]}")
