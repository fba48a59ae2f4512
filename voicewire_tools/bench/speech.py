"""``voicewire bench speech``: the speech server's first audio, the seed's measurement and ours.

    uv run voicewire bench speech [--trials 5] [--speech-url ws://...] [--json PATH]

Without ``--speech-url`` it starts ``voicewire serve-speech`` (CPU engine) on a free port and
measures against that one running server. Over one WebSocket session per case it sends the
seed's case, a 267-character four-sentence text, whole and as its first sentence only, with the
first-chunk cut (``fast_start``) on and off, ``--trials`` times each, and prints medians of:

- ``ttfb``: send -> first binary audio frame (what the seed measured);
- ``audible``: send -> first sample above the silence threshold, i.e. ``ttfb`` plus any silence
  at the head of the audio (what a listener hears);
- ``total``: send -> ``synthesis_complete``;
- ``stall``: silence a listener would hear after the first audio, playing each frame at real time
  from its arrival (a frame that arrives after its turn to play stalls playback).

It then checks the project's targets: the whole text costs at most 10% more than its first
sentence, and the cut at least halves first-audio time against the cut turned off. The engine's
real-time factor is the synthesis time of the whole text without the cut over its audio length.
Seed figures (GPU, ml.g5.xlarge): 329.3 ms whole vs 156.7 ms first sentence.

Last, with the server it started (same machine, interleaved, ``--trials`` each), a 5-word
message's first audio byte from the server against the plain int8 model's whole decode of the
same text (kokoro-onnx's ``create`` on PyPI's int8 export, in this process): what the engine's
choice of graph, its streamed vocoder and the server's path give over running the model as it
comes. Target: at most 0.6x.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from voicewire.speech_protocol import (
    ErrorFrame,
    SynthesisComplete,
    SynthesisRequest,
    dump_frame,
    read_server_frame,
)
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json

SEED_TEXT = (
    "Voice agents feel slow when they wait for the whole answer before speaking. "
    "Streaming sends each new sentence to the speech model as soon as it exists. "
    "First audio then arrives within a fraction of one second. "
    "The rest follows while the answer is still being written."
)
FIRST_SENTENCE = SEED_TEXT[: SEED_TEXT.index(".") + 1]
SAMPLE_RATE = 24_000
SILENCE = 0.01 * 32768
FIVE_WORDS = "Your parcel arrives on Thursday."  # bench engine's 5-word chunk
FIVE_WORD_TARGET = 0.6  # the server's first byte over the plain int8 whole decode, at most


@dataclass
class Trial:
    ttfb_ms: float
    audible_ms: float
    total_ms: float
    audio_seconds: float
    stall_ms: float
    server_elapsed_ms: float


async def one_trial(ws: ClientConnection, text: str, fast_start: bool) -> Trial:
    sent = time.perf_counter()
    await ws.send(dump_frame(SynthesisRequest(text=text, fast_start=fast_start)))
    first_byte = audible = None
    audio = bytearray()
    play_clock = stall = 0.0  # when the next frame is due to play, and the silences so far
    while True:
        frame = await ws.recv()
        now = time.perf_counter()
        if isinstance(frame, bytes):
            if first_byte is None:
                first_byte = play_clock = now
            if now > play_clock:
                stall += now - play_clock
                play_clock = now
            play_clock += len(frame) / 2 / SAMPLE_RATE
            if audible is None:
                samples = np.frombuffer(frame, dtype="<i2")
                loud = np.flatnonzero(np.abs(samples) > SILENCE)
                if loud.size:
                    # The first loud sample plays this long after the stream's first sample.
                    audible = first_byte + (len(audio) // 2 + loud[0]) / SAMPLE_RATE
            audio += frame
            continue
        message = read_server_frame(json.loads(frame))
        if isinstance(message, SynthesisComplete):
            assert first_byte is not None and audible is not None, "no audio"
            return Trial(
                ttfb_ms=(first_byte - sent) * 1000,
                audible_ms=(audible - sent) * 1000,
                total_ms=(now - sent) * 1000,
                audio_seconds=len(audio) / 2 / SAMPLE_RATE,
                stall_ms=stall * 1000,
                server_elapsed_ms=message.elapsed_ms,
            )
        if isinstance(message, ErrorFrame):
            refused = f"{message.code}: {message.message}"
            raise RuntimeError(f"the speech server refused the text: {refused}")


async def run_cases(url: str, trials: int) -> dict[str, list[Trial]]:
    cases = {
        "whole, cut on": (SEED_TEXT, True),
        "first sentence, cut on": (FIRST_SENTENCE, True),
        "whole, cut off": (SEED_TEXT, False),
        "first sentence, cut off": (FIRST_SENTENCE, False),
    }
    results: dict[str, list[Trial]] = {}
    async with connect(url, max_size=None) as ws:
        await one_trial(ws, "Warm up.", True)
        for name, (text, fast_start) in cases.items():
            results[name] = [await one_trial(ws, text, fast_start) for _ in range(trials)]
    return results


def median(trials: list[Trial], field: str) -> float:
    return statistics.median(getattr(trial, field) for trial in trials)


def report(results: dict[str, list[Trial]]) -> dict[str, float]:
    header = ("ttfb ms", "audible ms", "total ms", "audio s", "stall ms")
    print(f"\n{'case':<26}" + "".join(f"{title:>11}" for title in header))
    for name, trials in results.items():
        fields = ("ttfb_ms", "audible_ms", "total_ms", "audio_seconds", "stall_ms")
        print(f"{name:<26}" + "".join(f"{median(trials, field):>11.2f}" for field in fields))
    whole_on = median(results["whole, cut on"], "ttfb_ms")
    first_on = median(results["first sentence, cut on"], "ttfb_ms")
    whole_off = median(results["whole, cut off"], "ttfb_ms")
    first_off = median(results["first sentence, cut off"], "ttfb_ms")
    off = results["whole, cut off"]
    rtf = statistics.median(t.server_elapsed_ms / 1000 / t.audio_seconds for t in off)
    figures = {
        "whole_over_first_sentence_cut_on": whole_on / first_on,
        "whole_over_first_sentence_cut_off": whole_off / first_off,
        "cut_on_over_cut_off_whole": whole_on / whole_off,
        "engine_real_time_factor": rtf,
    }
    on, off = (
        figures["whole_over_first_sentence_cut_on"],
        figures["whole_over_first_sentence_cut_off"],
    )
    print(f"\nwhole text vs first sentence, cut on:  {on:.2f}x  (target <= 1.10; seed 2.10x)")
    print(f"whole text vs first sentence, cut off: {off:.2f}x")
    print(
        f"cut on vs cut off, whole text:          {figures['cut_on_over_cut_off_whole']:.2f}x"
        f"  (target <= 0.50)"
    )
    print(f"engine real-time factor (synthesis s / audio s): {rtf:.2f}")
    return figures


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def local_server() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "voicewire_tools.cli", "serve-speech", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/ping").status_code == 200:
                    break
            if process.poll() is not None:
                raise RuntimeError("voicewire serve-speech exited")
            time.sleep(0.1)
        yield f"ws://127.0.0.1:{port}/invocations-bidirectional-stream"
    finally:
        process.terminate()
        process.wait(30)


RUNS_TURNS = False  # no stack: --url does not apply


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument(
        "--speech-url", help="a running speech server's WebSocket URL (default: start one)"
    )


async def five_words_against_plain_int8(url: str, trials: int, voice: str) -> dict[str, Any]:
    """The server's first audio byte for ``FIVE_WORDS`` against kokoro-onnx's whole decode of
    it on the int8 graph, interleaved (one waits while the other runs)."""
    from kokoro_onnx import Kokoro

    from speech_server.model_assets import bundled_model_path
    from speech_server.official_voices import english_or_bundled_voices

    voices, _ = english_or_bundled_voices()
    plain = Kokoro(str(bundled_model_path()), str(voices))
    plain.create("Warm up.", voice=voice, lang="en-us")
    server_ms, plain_ms = [], []
    async with connect(url, max_size=None) as ws:
        await one_trial(ws, "Warm up.", True)
        for _ in range(trials):
            server_ms.append((await one_trial(ws, FIVE_WORDS, True)).ttfb_ms)
            started = time.perf_counter()
            plain.create(FIVE_WORDS, voice=voice, lang="en-us")
            plain_ms.append((time.perf_counter() - started) * 1000)
    server, whole = statistics.median(server_ms), statistics.median(plain_ms)
    ratio = server / whole
    print(
        f"\n5 words ({FIVE_WORDS!r}, {voice}): the server's first audio byte {server:.0f} ms, "
        f"the plain int8 model's whole decode {whole:.0f} ms: {ratio:.2f}x "
        f"(target <= {FIVE_WORD_TARGET}: {'met' if ratio <= FIVE_WORD_TARGET else 'MISSED'})"
    )
    return {
        "server_first_byte_ms": server,
        "plain_int8_whole_ms": whole,
        "ratio": ratio,
        "server_values": server_ms,
        "plain_values": plain_ms,
        "target_met": ratio <= FIVE_WORD_TARGET,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    print(f"seed text: {len(SEED_TEXT)} characters, 4 sentences; first: {len(FIRST_SENTENCE)}")
    five_words = None
    with contextlib.nullcontext(args.speech_url) if args.speech_url else local_server() as url:
        info = httpx.get(url.replace("ws", "http", 1).split("/invocations")[0] + "/ping").json()
        machine = describe_machine(info)
        print(machine_line(machine), flush=True)
        results = asyncio.run(run_cases(url, args.trials))
        figures = report(results)
        if not args.speech_url:  # the plain model runs here: beside a server on this machine
            voice = info.get("default_voice") or "af_heart"
            five_words = asyncio.run(five_words_against_plain_int8(url, args.trials, voice))
    trials = {name: [asdict(t) for t in ts] for name, ts in results.items()}
    data = {"machine": machine, "trials": trials, "figures": figures, "five_words": five_words}
    write_json(data, args.json)
    return data
