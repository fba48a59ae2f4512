"""``voicewire bench floor``: how close voicewire's first audio is to its physical floor.

    uv run voicewire bench floor [--trials 5] [--json PATH]

The floor of a bidi turn's first audio is the moment its first chunk's text existed plus the
engine's own time to speak that chunk: nothing can be heard sooner without a faster model or a
faster LLM. For each bidi trial on the seed's four-sentence answer (the local stack, its own
ports), the worker's timings give when the first chunk was cut (``first_sentence_ms``) and when
its first audio frame was posted (``first_audio_ms``, both from the turn's acceptance); the
engine's time is measured separately, warm, by sending the same chunk straight to the speech
server (``fast_start`` as the turn sends it) and timing its first audio. Target:
measured / floor at most 1.15. The rest is broken down: the speech link, the relay's post and
the queueing between them (measured - floor), then delivery to the client (the client's first
audio after the worker's).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from voicewire.error_codes import ErrorCode
from voicewire.speech_link import AudioChunk, SpeechServerError, SpeechSession, open_speech_session
from voicewire.turn_client import run_turn
from voicewire_tools.bench.machine import machine_line
from voicewire_tools.bench.report import write_json
from voicewire_tools.bench.ttfa import ANSWERS, own_stack

ANSWER = "four_sentences"
TARGET = 1.15
ENGINE_RUNS = 3
BUSY_WAIT_SECONDS = 60.0  # longer than the four sentences' audio (~12 s) takes to play
BUSY_RETRY_SECONDS = 0.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=5)


async def engine_first_audio_ms(speech_url: str, text: str, runs: int = ENGINE_RUNS) -> float:
    """The speech server's own time to the first audio of ``text`` (median of warm runs)."""
    times = []
    async with open_speech_session(speech_url) as session:
        for _ in range(runs):
            times.append(await _first_audio_ms_when_served(session, text))
    return statistics.median(times)


async def _first_audio_ms_when_served(session: SpeechSession, text: str) -> float:
    """One request's first audio, asked again while the server says ``speech_busy``: the turn
    just measured is still playing on the server's clock (bidi's audio is made faster than it
    plays), and on a busy machine the engine refuses a second answer beside it. The engine
    alone is what this bench times, so it waits, as the refusal asks, for that audio to end."""
    deadline = time.perf_counter() + BUSY_WAIT_SECONDS
    while True:
        started = time.perf_counter()
        request_id = await session.send(text, fast_start=True)
        first: float | None = None
        try:
            async for event in session.events(request_id):
                if first is None and isinstance(event, AudioChunk):
                    first = (time.perf_counter() - started) * 1000
        except SpeechServerError as error:
            if error.code != ErrorCode.SPEECH_BUSY or time.perf_counter() > deadline:
                raise
            await asyncio.sleep(BUSY_RETRY_SECONDS)
            continue
        assert first is not None, "the speech server sent no audio"
        return first


async def measure(url: str, speech_url: str, trials: int) -> list[dict[str, Any]]:
    rows = []
    engine_cache: dict[str, float] = {}
    for trial in range(1, trials + 1):
        result = await run_turn(url, {"action": "ask", "prompt": ANSWERS[ANSWER], "mode": "bidi"})
        if result.status != "complete" or result.end is None:
            raise RuntimeError(f"bidi ended {result.status}: {result.errors}")
        timings = result.end["timings"]
        chunk = next(e.data["text"] for e in result.events if e.kind == "sentence")
        if chunk not in engine_cache:
            engine_cache[chunk] = await engine_first_audio_ms(speech_url, chunk)
        engine = engine_cache[chunk]
        floor = timings["first_sentence_ms"] + engine
        row = {
            "first_chunk": chunk,
            "first_chunk_ms": timings["first_sentence_ms"],
            "engine_ms": round(engine, 1),
            "floor_ms": round(floor, 1),
            "first_audio_ms": timings["first_audio_ms"],
            "ratio": round(timings["first_audio_ms"] / floor, 3),
            "link_relay_queueing_ms": round(timings["first_audio_ms"] - floor, 1),
            "delivery_ms": round(result.first("audio") - timings["first_audio_ms"], 1),
        }
        rows.append(row)
        print(
            f"trial {trial}/{trials}: first chunk at {row['first_chunk_ms']:.0f} ms + engine "
            f"{engine:.0f} ms = floor {floor:.0f} ms; first audio {row['first_audio_ms']:.0f} ms "
            f"({row['ratio']:.2f}x)",
            flush=True,
        )
    return rows


def report(rows: list[dict[str, Any]], machine: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "first_chunk_ms",
        "engine_ms",
        "floor_ms",
        "first_audio_ms",
        "ratio",
        "link_relay_queueing_ms",
        "delivery_ms",
    )
    medians = {key: statistics.median(row[key] for row in rows) for key in keys}
    return {"machine": machine, "trials": len(rows), "median": medians, "rows": rows}


def print_report(data: dict[str, Any]) -> bool:
    median = data["median"]
    print("\n" + machine_line(data["machine"]))
    print(f"\nbidi, {ANSWER}, {data['trials']} trials, medians (ms from the turn's acceptance)")
    print(f"  first chunk cut          {median['first_chunk_ms']:>7.0f}")
    print(f"  + engine alone (warm)    {median['engine_ms']:>7.0f}")
    print(f"  = floor                  {median['floor_ms']:>7.0f}")
    print(
        f"  first audio posted       {median['first_audio_ms']:>7.0f}   "
        f"(+{median['link_relay_queueing_ms']:.0f}: speech link, relay, queueing)"
    )
    print(f"  first audio at client    +{median['delivery_ms']:>6.0f}   (delivery)")
    met = median["ratio"] <= TARGET
    print(
        f"measured / floor: {median['ratio']:.2f} (target <= {TARGET}) {'met' if met else 'MISSED'}"
    )
    return met


def run(args: argparse.Namespace) -> dict[str, Any]:
    with own_stack(args, "measures the engine beside the turn") as (url, stack, machine):
        rows = asyncio.run(measure(url, stack.speech_url, args.trials))
    data = report(rows, machine)
    data["target_met"] = print_report(data)
    write_json(data, args.json)
    return data
