"""``voicewire bench voice``: a question asked aloud to the agent's first spoken answer (voice to
voice), its parts, and the recognizer's word error rate on the questions and on the agent's own
speech.

    uv run voicewire bench voice [--questions 20] [--llm local] [--end-of-turn-ms 700] [--json F]

The questions of ``voicewire bench recognizer`` (twenty, each spoken by Kokoro-82M in a voice the
agent never answers with) are asked one at a time on the local stack (``voicewire up``'s
topology, with its Transcribe endpoint and offline recognizer), each as ``voicewire ask --audio``
asks one: ``listen``, the recording streamed to the Transcribe URL at real time, the turn's end
decided as a live client decides it (a final result, then a wait without a new one that depends
on whether it reads as finished: ``voicewire.speech_in.end_of_turn``), the transcript asked on
the same connection.
For each, measured at the client on one clock:

- **voice to voice**: from the moment the speaker stopped (the end of the last final result's
  words, on the stream's real-time schedule) to the agent's first audio frame;
- its parts: **final** (speech end -> the final result: the recognizer's end-of-utterance
  silence and its last decode), **end of turn** (the final -> the client's decision), then, from
  the turn's ``turn_end`` timings (counted from the moment the front door accepted the ask):
  **first text** (the LLM's), **first chunk** (first sentence cut -> its first audio sent:
  synthesis), and **rest** (whatever is left: the ask's trip, the relay, delivery);
- the **word error rate** of the transcripts against the questions; and of the agent's answers
  as the recognizer hears them (their audio, resampled to 16 kHz, against their text): a second
  check of what Kokoro says, beside ``bench words``' recall.

Targets on a 2-core machine (issue 42): voice to voice p50 <= 1.5 s with the replay LLM, <= 1.0 s
with ``--llm local``; word error rate <= 10% on the questions.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from voicewire.speech_in.end_of_turn import EndOfTurn
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json
from voicewire_tools.bench.speech_in import (
    KOKORO_RATE,
    QUESTIONS,
    resample,
    speak_with_kokoro,
    word_error_rate,
)

RATE = 16_000
LEAD_S, TAIL_S = 0.3, 2.0  # silence around each question, as a microphone has it
NOISE_DB = -60.0
TARGETS = {"replay": 1500.0, "local": 1000.0, "bedrock": 1500.0}  # voice to voice p50, ms
WER_TARGET = 0.10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="how many to ask")
    parser.add_argument(
        "--end-of-turn-ms",
        type=float,
        nargs=2,
        metavar=("COMPLETE", "INCOMPLETE"),
        default=(EndOfTurn.complete_ms, EndOfTurn.incomplete_ms),
        help="the client's wait after a final result that reads as a finished sentence, and "
        "after one that does not (voicewire/speech_in/end_of_turn.py; the page's defaults)",
    )
    parser.add_argument(
        "--pace",
        type=float,
        default=1.0,
        help="stream at this many times real time (at most 2: Transcribe refuses bursts)",
    )


def question_pcm(audio: np.ndarray) -> bytes:
    """A question as a microphone sends it: lead and tail silence, a faint noise floor, 16 kHz
    16-bit samples."""
    padded = np.concatenate(
        [
            np.zeros(int(LEAD_S * KOKORO_RATE), np.float32),
            np.asarray(audio, np.float32),
            np.zeros(int(TAIL_S * KOKORO_RATE), np.float32),
        ]
    )
    at_rate = resample(padded, KOKORO_RATE, RATE)
    noise = np.random.default_rng(0).normal(0.0, 10 ** (NOISE_DB / 20), len(at_rate))
    return (np.clip(at_rate + noise, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def turn_figures(result: Any) -> dict[str, Any]:
    """One spoken turn's figures (ms), from its events on the client's clock."""
    events = result.events
    stopped = next((e.at_ms for e in events if e.kind == "end_of_speech"), math.nan)
    final = next(
        (e.at_ms for e in events if e.kind == "heard" and e.data["final"] and e.data["text"]),
        math.nan,
    )
    decided = next((e.at_ms for e in events if e.kind == "end_of_turn"), math.nan)
    first_audio = result.first("audio")
    timings = (result.end or {}).get("timings") or {}
    voice_to_voice = (first_audio if first_audio is not None else math.nan) - stopped
    first_text = timings.get("first_text_ms") or math.nan
    first_chunk = (timings.get("first_audio_ms") or math.nan) - (
        timings.get("first_sentence_ms") or math.nan
    )
    final_ms, end_of_turn_ms = final - stopped, decided - final
    rest = voice_to_voice - final_ms - end_of_turn_ms - (timings.get("first_audio_ms") or math.nan)
    transcript = next((e.data["text"] for e in events if e.kind == "end_of_speech"), "")
    answer = "".join(e.data["text"] for e in events if e.kind == "text_delta")
    return {
        "voice_to_voice_ms": voice_to_voice,
        "final_ms": final_ms,
        "end_of_turn_ms": end_of_turn_ms,
        "first_text_ms": first_text,
        "first_chunk_ms": first_chunk,
        "rest_ms": rest,
        "transcript": transcript,
        "answer": answer,
        "status": result.status,
    }


async def ask_aloud(url: str, pcm: bytes, end_of_turn: EndOfTurn, pace: float) -> Any:
    from voicewire.speech_in.spoken_question import SpokenQuestion
    from voicewire.turn_client import run_turn

    question = SpokenQuestion(pcm, RATE, pace=pace, end_of_turn=end_of_turn)
    return await run_turn(url, {"action": "ask", "mode": "bidi"}, prepare=question)


def answer_wer(recognizer: Any, results: list[Any], texts: list[str]) -> float:
    """The recognizer's word error rate on the agent's answers (their audio, their text)."""
    heard, said = [], []
    for result, text in zip(results, texts, strict=True):
        if not result.audio or not text:
            continue
        audio = np.frombuffer(bytes(result.audio), "<i2").astype(np.float32) / 32768
        words = recognizer.transcribe(resample(audio, 24_000, RATE))
        heard.append(" ".join(word.text for word in words))
        said.append(text)
    return word_error_rate(" ".join(said), " ".join(heard)) if said else math.nan


def summary(values: list[float]) -> dict[str, float]:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return {"p50": math.nan, "p95": math.nan, "n": 0}
    return {
        "p50": round(float(np.percentile(finite, 50)), 0),
        "p95": round(float(np.percentile(finite, 95)), 0),
        "n": len(finite),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from voicewire_tools.bench.ttfa import speech_info
    from voicewire_tools.commands.demo import target
    from voicewire_tools.commands.speech_in_setup import ensure_speech_in

    if not 1 <= args.questions <= len(QUESTIONS):
        raise ValueError(f"--questions must be 1 to {len(QUESTIONS)}")
    if args.url:
        raise ValueError("bench voice needs its own stack (its recognizer is measured too)")
    ensure_speech_in(progress=lambda line: print(line, flush=True))
    questions = QUESTIONS[: args.questions]
    print(f"speaking {len(questions)} questions with Kokoro-82M ...", flush=True)
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as child:
        spoken = child.submit(speak_with_kokoro, questions).result()
    end_of_turn = EndOfTurn(*args.end_of_turn_ms)
    args.listen = True  # the stack's Transcribe endpoint, with the offline recognizer
    results = []
    with target(None, args) as (url, stack):
        machine = describe_machine(speech_info(stack))
        print(machine_line(machine), flush=True)
        stack.transcribe.endpoint.recognizer.wait(120)  # loaded before the first question
        for question in spoken:
            result = asyncio.run(
                ask_aloud(url, question_pcm(question.audio), end_of_turn, args.pace)
            )
            figures = turn_figures(result)
            print(
                f"  {figures['voice_to_voice_ms']:6.0f} ms  heard {figures['transcript']!r}",
                flush=True,
            )
            results.append((result, figures))
        recognizer = stack.transcribe.endpoint.recognizer.wait()
        llm = stack.llm
        agent_wer = answer_wer(
            recognizer, [r for r, _ in results], [f["answer"] for _, f in results]
        )
    figures = [f for _, f in results]
    question_wer = word_error_rate(
        " ".join(q.text for q in spoken), " ".join(f["transcript"] for f in figures)
    )
    data = {
        "machine": machine,
        "llm": llm,
        "questions": len(spoken),
        "end_of_turn_ms": list(args.end_of_turn_ms),
        "pace": args.pace,
        "parts": {
            part: summary([f[part] for f in figures])
            for part in (
                "voice_to_voice_ms",
                "final_ms",
                "end_of_turn_ms",
                "first_text_ms",
                "first_chunk_ms",
                "rest_ms",
            )
        },
        "question_wer": round(question_wer, 4),
        "answer_wer": round(agent_wer, 4) if not math.isnan(agent_wer) else None,
        "complete": sum(f["status"] == "complete" for f in figures),
        "turns": figures,
    }
    print_report(data)
    write_json(data, args.json)
    return data


def print_report(data: dict[str, Any]) -> None:
    parts = data["parts"]
    print(f"\nvoice to voice, {data['questions']} spoken questions, llm {data['llm']}:")
    for name, figures in parts.items():
        label = name.removesuffix("_ms")
        print(f"  {label:<16} p50 {figures['p50']:7.0f} ms   p95 {figures['p95']:7.0f} ms")
    target = TARGETS.get(data["llm"], math.inf)
    met = parts["voice_to_voice_ms"]["p50"] <= target
    verdict = "met" if met else "MISSED"
    print(f"  target: voice to voice p50 <= {target:.0f} ms with this LLM: {verdict}")
    print(
        f"word error rate: {data['question_wer']:.1%} on the questions (target <= "
        f"{WER_TARGET:.0%}), {data['answer_wer']:.1%} on the agent's answers"
        if data["answer_wer"] is not None
        else f"word error rate: {data['question_wer']:.1%} on the questions"
    )
    print(f"complete turns: {data['complete']} of {data['questions']}")
