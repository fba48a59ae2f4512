"""``voicewire bench``: a one-trial smoke run of each benchmark on the local stack, and the
seed's baseline it compares against. Figures are a benchmark's business; these tests check that
each mode ran as it claims and that the report and the picture are written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from functions.turn import VOICEWIRE_CHUNKING
from voicewire_tools.bench import ttfa
from voicewire_tools.bench.machine import describe_machine
from voicewire_tools.seed_pipeline import SeedSentenceChunker


def test_the_seed_chunker_is_the_articles_regex():
    chunker = SeedSentenceChunker()
    assert chunker.feed("Dr. Smith paid $29.") == ["Dr."]  # no abbreviations; the tail waits
    assert chunker.feed(" He left! Then") == ["Smith paid $29.", "He left!"]
    assert chunker.finish() == ["Then"]
    assert chunker.finish() == []


async def test_ttfa_runs_the_seeds_modes_and_voicewires_and_reports_them(stack, tmp_path: Path):
    results = await ttfa.run_trials(stack.ws_url, stack, ["four_sentences"], 1)
    turns = {mode: trials[0] for mode, trials in results["four_sentences"].items()}
    assert set(turns) == set(ttfa.MODES)
    assert all(turn.status == "complete" and turn.audio for turn in turns.values())

    def sentences(mode: str) -> list[str]:
        return [e.data["text"] for e in turns[mode].events if e.kind == "sentence"]

    answer = "".join(e.data["text"] for e in turns["seed_bidi"].events if e.kind == "text_delta")
    # The seed's bidi speaks the regex's whole sentences; voicewire's cuts its first one early.
    assert sentences("seed_bidi") == [s for s in re.split(r"(?<=[.!?])\s+", answer) if s]
    assert len(sentences("bidi")[0].split()) <= 6 < len(sentences("seed_bidi")[0].split())
    assert len(sentences("seed_batch")) == len(sentences("batch")) == 1
    # The stack is back to voicewire's pipeline afterwards.
    assert stack.adapters.chunking is VOICEWIRE_CHUNKING

    data = ttfa.report(
        results, describe_machine({"engine": "onnx", "default_voice": "af_heart"}), 1
    )
    assert set(data["modes"]) == set(ttfa.MODES)
    first_audio = data["modes"]["bidi"]["first_audio_ms"]
    assert first_audio["values"] == [turns["bidi"].end["timings"]["first_audio_ms"]]
    assert first_audio["median"] == first_audio["min"] == first_audio["max"]
    assert data["machine"]["cores"] >= 1 and data["machine"]["engine"] == "onnx"
    json.dumps(data)  # what --json writes
    picture = tmp_path / "ttfa.png"
    ttfa.plot(results, picture)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 10_000


def test_the_bench_command_knows_its_benchmarks():
    from voicewire_tools.cli import build_parser

    args = build_parser().parse_args(["bench", "ttfa", "--trials", "1", "--answers", "default"])
    assert args.benchmark == "ttfa" and args.trials == 1 and args.speech_port == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "nothing"])


def test_a_benchmark_without_turns_refuses_a_stack_url(capsys):
    from voicewire_tools.cli import main

    with pytest.raises(SystemExit, match="--url names a stack to run turns on"):
        main(["bench", "chunker", "--url", "wss://example.invalid/"])


def test_a_bench_against_a_ticketed_api_mints_a_ticket_per_connection(monkeypatch, tmp_path):
    from voicewire_tools import deployed_tickets
    from voicewire_tools.bench import load
    from voicewire_tools.cli import main
    from voicewire_tools.local_stack.stack import LocalStack, StackOptions

    options = StackOptions(port=0, speech_port=0, runtime_port=0, tokens=True)
    local = LocalStack(options, lambda line: None)
    local.start()
    # The short recorded answer for both turns: the tickets are the point, not the speech.
    monkeypatch.setattr(load, "QUESTIONS", ("Hello, who are you?",))
    try:
        # Two turns, one after the other: two connections, the second refused if it reused the
        # first's ticket (one client: the CPU engine is not what this checks).
        command = ["bench", "load", "--url", local.ws_url, "--clients", "1", "--turns", "2"]
        # A ticket opens one connection: without minting, the bench is refused, and says why.
        with pytest.raises(SystemExit, match=r"HTTP 403.*add --mint-tickets"):
            main(command)
        # The deployed secret as agent-infra reads it from SSM (over moto in test_infra_cli).
        monkeypatch.setattr(deployed_tickets, "deployed_secret", lambda: local.token_secret)
        report = tmp_path / "load.json"
        main([*command, "--mint-tickets", "--json", str(report)])
        (row,) = json.loads(report.read_text())["loads"]
        assert row["turns"] == 2 and row["errors"] == 0  # two connections, two tickets
    finally:
        local.stop()
    with pytest.raises(SystemExit, match="--mint-tickets mints connect tickets"):
        main(["bench", "load", "--mint-tickets"])  # no --url: there is nothing to mint for


def test_playback_gaps_are_the_silences_after_the_first_audio():
    from voicewire.turn_client import TimedEvent, TurnResult
    from voicewire_tools.bench.stalls import playback_gaps

    def audio(at_ms: float, ms: float) -> TimedEvent:
        return TimedEvent(at_ms, "audio", {"bytes": int(ms * 48)})  # 48 bytes per ms of audio

    turn = TurnResult(
        events=[
            TimedEvent(0.0, "turn_start", {}),
            audio(100, 200),  # plays 100-300
            audio(150, 200),  # queued: plays 300-500
            audio(600, 100),  # arrives 100 ms after the queue ran dry: a gap
            audio(650, 100),  # plays 700-800, in time
            audio(800.5, 100),  # half a millisecond late: scheduling noise, not a silence
        ]
    )
    assert playback_gaps(turn) == [100]


def test_stalls_reports_every_recording_and_judges_voicewires_modes(capsys):
    from voicewire.turn_client import TimedEvent, TurnResult
    from voicewire_tools.bench import stalls
    from voicewire_tools.bench.ttfa import RECORDINGS

    assert {"short", "default", "four_sentences", "long_markdown"} <= set(RECORDINGS)

    def turn(*arrivals: float) -> TurnResult:
        events = [TimedEvent(0.0, "sentence", {"text": "Hello there."})]
        events += [TimedEvent(at, "audio", {"bytes": 200 * 48}) for at in arrivals]
        return TurnResult(events=events)

    clean, late = turn(100, 150, 200), turn(100, 500)  # the second: 200 ms of silence
    machine = {"cpu": "AMD EPYC", "cores": 2, "python": "3.12"}

    def judged(seed_bidi: TurnResult, bidi: TurnResult) -> tuple[bool, dict]:
        data = {
            "machine": machine,
            "answers": {
                name: stalls.report({"seed_bidi": [seed_bidi], "bidi": [bidi]}, machine)
                for name in ("short", "long_markdown")
            },
        }
        return stalls.print_report(data), data

    met, data = judged(seed_bidi=late, bidi=clean)
    assert met  # the seed's silences are shown, not judged
    assert data["answers"]["long_markdown"]["modes"]["seed_bidi"]["stall_ms"]["max"] == 200
    out = capsys.readouterr().out
    assert "short: silences" in out and "long_markdown: silences" in out and ": met" in out
    met, _ = judged(seed_bidi=clean, bidi=late)
    assert not met and "MISSED" in capsys.readouterr().out


async def test_floor_puts_the_engine_beside_the_turns_first_chunk(stack):
    from voicewire_tools.bench import floor

    (row,) = await floor.measure(stack.ws_url, stack.speech_url, 1)
    assert len(row["first_chunk"].split()) <= 6  # the pipeline's first chunk, cut early
    assert row["floor_ms"] == pytest.approx(row["first_chunk_ms"] + row["engine_ms"], abs=0.2)
    assert row["ratio"] == pytest.approx(row["first_audio_ms"] / row["floor_ms"], abs=0.001)
    assert row["link_relay_queueing_ms"] == pytest.approx(
        row["first_audio_ms"] - row["floor_ms"], abs=0.2
    )
    data = floor.report([row], {"cpu": "x", "cores": 2, "python": "3.12"})
    assert data["median"]["ratio"] == row["ratio"]


def test_transport_counts_each_deliverys_bytes_and_the_sse_cuts():
    import random

    import numpy as np

    from voicewire_tools.bench import transport

    tone = (np.sin(np.arange(24_000 * 2) * 2 * np.pi * 220 / 24_000) * 8000).astype("<i2")
    pcm = tone.tobytes()
    frames = [pcm[i : i + 9600] for i in range(0, len(pcm), 9600)]  # 0.2 s frames, as served
    sizes = transport.wire_bytes(frames)
    assert sizes["pcm"] == len(pcm) == 96_000
    assert sizes["binary"] == len(pcm) + 9 * 3  # three 32 KB frames, a 9-byte header each
    assert 1.33 < sizes["base64 json"] / len(pcm) < 1.35  # base64's 4/3 and a small envelope
    assert sizes["base64 sse"] > sizes["base64 json"] * 0.99
    assert sizes["opus"] < sizes["mp3"] < len(pcm) / 4
    check = transport.alignment(frames, random.Random(1))
    assert check["recovered_every_byte"] is True
    assert check["delivery_chunks"] > check["events"] / 2 and check["cuts_mid_event"] > 0
    assert check["cuts_mid_mp3_frame"] <= check["cuts_mid_event"]


async def test_load_runs_clients_at_once_and_checks_every_frame(stack):
    from voicewire_tools.bench import load

    # Two short recorded answers at once: what it checks is every frame of turns that overlap,
    # not their length.
    questions = ("Hello, who are you?", "Hi there, what can you do?")
    row = await load.one_load(stack.ws_url, stack, clients=2, turns=1, questions=questions)
    assert row["clients"] == 2 and row["turns"] == 2
    assert row["errors"] == 0 and row["frame_problems"] == []
    assert row["first_audio_ms"]["p50"] <= row["first_audio_ms"]["p95"]
    assert row["peak_rss_mb"] > 100  # the stack and its speech server were measured


def test_frame_problems_finds_a_gap_and_a_short_count():
    from voicewire.turn_client import TimedEvent, TurnResult
    from voicewire_tools.bench.load import frame_problems

    def audio(seq: int) -> TimedEvent:
        return TimedEvent(float(seq), "audio", {"seq": seq, "bytes": 4})

    whole = TurnResult(events=[audio(0), audio(1)], audio=bytearray(8))
    whole.end = {"audio_frames": 2, "audio_bytes": 8}
    assert frame_problems(whole) == []
    gap = TurnResult(events=[audio(0), audio(2)], audio=bytearray(8))
    gap.end = {"audio_frames": 3, "audio_bytes": 12}
    assert len(frame_problems(gap)) == 3  # the gap, the frame count, the byte count


def test_engine_bench_compares_the_streamed_vocoder_with_the_whole_decode(onnx_engine):
    from voicewire_tools.bench.engine import TEXTS, streamed

    # One voice and the two shorter texts keep the smoke test short (the 24 words were half of
    # its 104 s with the other worker beside it, 2026-12-07); the bench runs four and three.
    voices = ("bm_george",)
    texts = {label: TEXTS[label] for label in ("5 words", "12 words")}
    figures, _ = streamed(onnx_engine, "af_heart", rounds=1, voices=voices, runs=2, texts=texts)
    assert set(figures["first_audio"]) == set(texts)
    for row in figures["first_audio"].values():
        assert 0 < row["streamed_first_ms"] <= row["streamed_total_ms"]
        # The split of the first audio: its text side, then its first window's frames.
        assert row["text_side_ms"] > 0 and row["first_window_ms"] > 0
        assert 0 < row["first_window_frames"] <= row["frames"]
    assert len(figures["quality"]) == len(texts) * len(voices)
    for check in figures["quality"]:
        assert check["windows"] in (1, 2)
        assert check["runs"] == 2 and check["identical"]  # the same bytes on both runs
        # The same speech: far above what two different sentences score.
        assert check["correlation"] > 0.95
        assert check["seam"] >= 0 and 0 <= check["seam_rank"] <= 1 and check["stall_ms"] >= 0
    recognized = figures["recognizer"]
    assert recognized["words"] == sum(len(t.split()) for t in texts.values()) * len(voices)
    assert set(recognized["errors"]) == {"whole", "streamed", "whole_with_noise"}


def test_seam_prominence_finds_a_click_at_the_seam():
    import numpy as np

    from voicewire_tools.bench.engine import seam_prominence, seam_rank

    rng = np.random.default_rng(7)
    whole = (0.1 * rng.standard_normal(48000)).astype(np.float32)
    seam = 24000
    rendered = whole + (0.002 * rng.standard_normal(48000)).astype(np.float32)
    clicked = rendered.copy()
    clicked[seam : seam + 48] += 0.9
    assert seam_prominence(rendered, whole, seam, 24000) < 1.5
    assert seam_prominence(clicked, whole, seam, 24000) > 3
    assert seam_rank(clicked, whole, seam, 24000) == 1.0  # more prominent than every other place
    # After a streamed chunk's seam the audio is the whole decode's. Identical places are no
    # comparison: making them exact does not make an ordinary seam stand out more (counted, they
    # took this seam's rank from 0.50 to 0.58).
    exact_after = rendered.copy()
    exact_after[seam:] = whole[seam:]
    assert seam_rank(exact_after, whole, seam, 24000) <= seam_rank(rendered, whole, seam, 24000)


def capacity_inputs():
    from voicewire_tools.bench.capacity import Chunk, MeasuredInputs

    # A turn: a 1.5 s first chunk ready at 0.9 s, then four 4 s chunks as the text arrives.
    chunks = [Chunk(0.9, 1.5, 0), *(Chunk(1.5 + i, 4.0, i + 1) for i in range(4))]
    return MeasuredInputs(
        answers={"synthetic": chunks},
        cpu_real_time_factor=0.3,
        gpu_real_time_factor=0.012,
        gpu_fixed_s=0.13,
        seed_audio_s=(15.0, 1.6),
    )


def test_capacity_turns_come_from_the_recordings_through_the_pipelines_chunker():
    from voicewire_tools.bench.capacity import turn_requests

    requests = turn_requests("four_sentences")
    assert len(requests) >= 4
    times = [ready for ready, _, _ in requests]
    assert times == sorted(times) and times[0] > 0.3  # the LLM's first token comes first
    assert requests[0][2] is True  # the first sentence starts fast
    assert len(requests[0][1].split()) <= 6  # the pipeline's first_max_words


def test_capacity_simulation_queues_when_an_instance_is_overloaded():
    from voicewire_tools.bench.capacity import Assumptions, Scenario, simulate

    inputs, assumptions = capacity_inputs(), Assumptions()
    light = simulate(inputs, assumptions, Scenario(10, 1, 0.5))
    # 120 sessions a minute ask ~1.9 engine-minutes a minute of one instance: its queue grows all
    # half hour. (400 a minute took 81 s to simulate on 2 cores, over 300 s on a slower CI
    # machine: the queue the simulation keeps grows with the overload.)
    heavy = simulate(inputs, assumptions, Scenario(120, 1, 0.5))
    spread = simulate(inputs, assumptions, Scenario(120, 8, 0.5))
    # Unloaded: the first chunk's text, its synthesis and the link, nothing more.
    service = assumptions.engine_call_s + 1.5 * inputs.gpu_real_time_factor
    assert light["first_audio_p50_s"] == pytest.approx(0.9 + service + 0.06, abs=0.01)
    assert heavy["first_audio_p95_s"] > 10 * light["first_audio_p95_s"]
    assert spread["first_audio_p95_s"] < heavy["first_audio_p95_s"]
    assert light["stalled_turns"] == 0


def test_capacity_autoscaling_adds_instances_under_load():
    from voicewire_tools.bench.capacity import Assumptions, Scenario, simulate

    scenario = Scenario([(0.0, 20.0), (600.0, 300.0)], 1, 1.0, autoscale=True)
    result = simulate(capacity_inputs(), Assumptions(provision_s=120), scenario)
    instances = [serving for _, serving, _ in result["timeline"]]
    assert instances[0] == 1 and max(instances) > 2


def test_capacity_autoscaling_counts_sessions_that_have_not_loaded_the_engine_yet():
    """Open sessions lead the engine's busy share: conversations that arrived but whose audio is
    not being made yet already count, so the policy on sessions scales out where the engine's
    share alone would not (here the engine is nearly idle: a GPU 100x faster than the seed's)."""
    from dataclasses import replace

    from voicewire_tools.bench.capacity import Assumptions, Scenario, simulate

    fast = replace(capacity_inputs(), gpu_real_time_factor=0.0001)
    ramp = [(0.0, 20.0), (300.0, 200.0)]
    both = Scenario(ramp, 1, 0.5, autoscale=True, target_sessions=10, target_busy_percent=60)
    busy = Scenario(ramp, 1, 0.5, autoscale=True, target_sessions=None, target_busy_percent=60)
    assumptions = Assumptions(provision_s=60, engine_call_s=0.001)
    scaled = max(n for _, n, _ in simulate(fast, assumptions, both)["timeline"])
    unscaled = max(n for _, n, _ in simulate(fast, assumptions, busy)["timeline"])
    assert unscaled == 1 < scaled


def test_capacity_report_prices_a_spoken_minute_and_draws_its_picture(tmp_path: Path):
    import argparse

    from voicewire_tools.bench.capacity import PRICES, Assumptions, capacity_report, plot

    args = argparse.Namespace(loads="20,200", hours=0.25, routing="least", ramp_hours=1.1)
    inputs, assumptions = capacity_inputs(), Assumptions()
    report = capacity_report(inputs, assumptions, args)
    costs = report["paper"]["cost_per_1000_spoken_minutes_usd"]
    assert costs["total"] == pytest.approx(sum(v for k, v in costs.items() if k != "total"))
    # The parts that follow from the inputs alone, worked out here: 1,000 minutes of 24 kHz
    # 16-bit audio leave AWS once; the GPU is busy for the engine's time per audio second
    # (its real-time factor plus a fixed time per chunk), sized at the utilization target.
    spoken_s = 1_000 * 60
    assert costs["data_transfer"] == pytest.approx(
        spoken_s * 24_000 * 2 / 1e9 * PRICES["data_transfer_out_gb"]
    )
    (chunks,) = inputs.answers.values()
    engine_s_per_audio_s = inputs.gpu_real_time_factor + assumptions.engine_call_s * len(
        chunks
    ) / sum(chunk.audio_s for chunk in chunks)
    gpu_hours = spoken_s / 3600 * engine_s_per_audio_s / assumptions.utilization
    assert costs["sagemaker"] == pytest.approx(gpu_hours * PRICES["sagemaker_ml_g5_xlarge_hour"])
    assert report["paper"]["sessions_per_gpu_instance"] > 1
    # The targets: the busy share the paper sizes for, and the sessions that make it.
    assert report["paper"]["target_engine_busy_percent"] == 60
    assert report["paper"]["target_sessions_per_instance"] == int(
        report["paper"]["sessions_per_gpu_instance"]
    )
    assert set(report["autoscaled"]) == {"sessions_and_busy", "busy_only", "invocations"}
    assert {row["instances"] for row in report["sweep"]} == {1, 2, 4, 8}
    picture = tmp_path / "capacity.png"
    plot(report, str(picture))
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_capacity_takes_the_cpu_server_from_the_measured_load_curve():
    from voicewire_tools.bench.capacity import Chunk, cpu_server_report
    from voicewire_tools.bench.cpu_server_model import DEFAULT_CURVE, LoadCurve

    curve = LoadCurve.from_json(DEFAULT_CURVE)
    # A turn whose first text is ready at 0.5 s (the measured p50 is 0.97 s), then three more.
    chunks = [Chunk(0.5, 1.5, 0), *(Chunk(1.0 + i, 4.0, i + 1) for i in range(3))]
    report = cpu_server_report(curve, [chunks], turn_cycle_s=30.0)
    assert report["served_at_once"] == 4  # 8 clients had turns refused
    assert report["model"]["engine_s_per_audio_s"] == pytest.approx(
        1 / max(p.audio_s_per_wall_s for p in curve.points)
    )
    # Fitted to the single client's measured p50; every load measured has the model beside it.
    single = report["compared"][0]
    assert single["model"]["first_audio_p50_s"] == pytest.approx(
        single["measured"]["first_audio_p50_s"], abs=0.01
    )
    assert [row["clients"] for row in report["compared"]] == [p.clients for p in curve.points]
    # A bench client asks again once its last frame is sent: 4 of them ask for more audio per
    # second than 4 conversations that listen and think.
    assert report["conversations_per_server"] > 4


def test_chunker_bench_times_the_chunker_on_a_markdown_answer():
    from voicewire_tools.bench import chunker

    figures = chunker.measure(2)
    assert figures["sentences_per_pass"] >= 10
    # Throughput and the mean cost per fragment come from the same timing: each is the other
    # through the number of characters per fragment.
    per_fragment = figures["characters"] / figures["fragments"]
    assert figures["characters_per_second"] == pytest.approx(
        per_fragment / (figures["fragment_cost_us"] / 1e6)
    )
    assert 0 < figures["sentence_delay_median_us"] <= figures["sentence_delay_p99_us"]


async def test_posts_bench_counts_a_turns_posts_by_kind(stack):
    from voicewire_tools.bench import posts

    # The four-sentence answer (267 characters streamed over 2.2 s): sentences enough to count,
    # without speaking the default story twice (~30 s of audio each, minutes on a slow machine).
    live, sentence = await posts.measure_all(stack, "0", 1, "What is Kokoro's latency?")
    assert (live["text_deltas"], sentence["text_deltas"]) == ("live", "sentence")
    # About the same audio either way. Not the same frames: the speech server decodes a chunk
    # whole or streamed, and cuts a chunk for time, by the pace its engine keeps
    # (container/speech_server/chunk_schedule.py follows it under load), and the frames follow
    # the pieces (223 against 238, then 233 against 206, on a 1.7x slower 2-core machine,
    # 2026-12-06). The bytes differ by the pauses of chunks cut elsewhere (0.25% and 5.2%).
    assert live["audio"] > 10 and sentence["audio"] > 10
    assert abs(live["audio_bytes"] - sentence["audio_bytes"]) <= 0.1 * live["audio_bytes"]
    # The same answer, cut the same way, whichever way its text is sent.
    assert live["sentence"] == sentence["sentence"] >= 2
    # Per sentence: one text post at each cut (and one for the text after the last); live ones,
    # coalesced per ~100 ms over an answer that streams for seconds, are more.
    assert 1 <= sentence["text_delta"] <= sentence["sentence"] + 1 < live["text_delta"]
    assert stack.gateway.post_faults.latency_seconds == 0.0


async def test_session_bench_compares_a_kept_session_with_a_new_one(stack):
    from functions.adapters.replay_llm import ReplayBedrockClient
    from voicewire_tools.bench import session
    from voicewire_tools.bench.capacity import turn_requests

    try:
        turns = await session.warm_against_cold(stack, 1)
    finally:
        stack.keep_speech_sessions(True)
    assert set(turns) == {"speak warm", "speak new", "ask warm", "ask new"}
    # An ask cannot speak before the LLM has written its first chunk (the recording's pace): a
    # bound no machine's speed moves. Whether a speak (no LLM) speaks sooner is the bench's
    # figure, not asserted: one trial each on a loaded machine can come out either way.
    prompt = session.ASK["prompt"]
    answer = ReplayBedrockClient().choose(prompt).name
    first_chunk_ms = turn_requests(answer)[0][0] * 1000 * stack.options.llm_pace
    for mode in ("warm", "new"):
        assert turns[f"ask {mode}"]["min"] >= first_chunk_ms
        assert len(turns[f"speak {mode}"]["values"]) == 1 and turns[f"speak {mode}"]["min"] > 0


async def test_speech_bench_times_one_message_to_first_byte_audible_and_total(speech_server):
    from websockets.asyncio.client import connect

    from voicewire_tools.bench import speech

    async with connect(speech_server.ws_url, max_size=None) as ws:
        trial = await speech.one_trial(ws, speech.FIRST_SENTENCE, True)
    assert 0 < trial.ttfb_ms <= trial.audible_ms <= trial.total_ms
    assert trial.audio_seconds > 1
    assert trial.stall_ms >= 0


async def test_speech_bench_sets_five_words_against_the_plain_int8_model(speech_server):
    from voicewire_tools.bench import speech

    figures = await speech.five_words_against_plain_int8(speech_server.ws_url, 2, "af_heart")
    assert len(figures["server_values"]) == len(figures["plain_values"]) == 2
    assert figures["server_first_byte_ms"] > 0 and figures["plain_int8_whole_ms"] > 0
    assert figures["ratio"] == pytest.approx(
        figures["server_first_byte_ms"] / figures["plain_int8_whole_ms"]
    )
    assert figures["target_met"] == (figures["ratio"] <= speech.FIVE_WORD_TARGET)


def test_word_errors_count_substitutions_insertions_and_deletions():
    from voicewire_tools.bench.recognizer import word_errors

    assert word_errors("Your parcel arrives on Thursday.", "your parcel arrives on thursday") == 0
    assert word_errors("your parcel arrives", "your parcel of rides") == 2
    assert word_errors("a b c", "") == 3


def test_the_recognizer_hears_kokoro_offline(onnx_engine):
    from voicewire_tools.bench.recognizer import transcribe, word_errors

    text = "We fixed the billing error, and the refund reaches your card tomorrow."
    heard = transcribe(onnx_engine.synthesize(text, "af_heart", 1.0), onnx_engine.sample_rate)
    assert word_errors(text, heard) <= 6  # a weak recognizer, but it hears most of it
    silence = transcribe(np.zeros(24000, np.float32), 24000)
    assert word_errors(text, silence) >= 10


async def test_tools_bench_measures_the_preamble_the_filler_and_the_answer(stack):
    from voicewire_tools.bench import tools

    # bidi only: what the assertions read (batch runs the same cases, after the whole answer).
    rows = await tools.run_cases(stack.ws_url, stack, [2000.0], trials=1, modes=("bidi",))
    by = {(row["case"], row["mode"]): row for row in rows}
    assert len(rows) == len(tools.CASES)
    for row in rows:
        assert row["first_audio_ms"] > 0 and row["result_to_sentence_ms"] > 0
    assert by[("no preamble, no filler", "bidi")]["result_to_audio_ms"] > 0
    assert by[("preamble", "bidi")]["result_to_audio_ms"] is None  # the preamble's may follow
    # Nothing said before a 2 s tool, unless a filler (due at 1.2 s) or a preamble is: told by
    # the order of the frames, not by how fast this machine speaks them (bench figures).
    said = {case: by[(case, "bidi")]["sentences_before_result"] for case, _ in by}
    assert said["no preamble, no filler"] == 0
    assert said["no preamble, filler"] >= 1 and said["preamble"] >= 1
    assert stack.adapters.settings.tool_latency_ms == 0  # the stack is given back as it was


def test_words_bench_reports_the_checks_and_the_first_audio_cost(onnx_engine):
    import asyncio

    from speech_server.synthesis import Synthesizer
    from voicewire_tools.bench.words import _checked, _first_audio_cost, _speak

    text = "The plan ships on Monday. Then we measure it again."
    synthesizer = Synthesizer(onnx_engine)
    try:
        audio, words, first = asyncio.run(_speak(synthesizer, text, "af_heart", timed=True))
        row = _checked(text, audio, words)
        cost = asyncio.run(_first_audio_cost(synthesizer, "af_heart", trials=1))
    finally:
        synthesizer.close()
    assert first is not None and first > 0
    assert row["words_match"] and row["silences"] >= 1
    assert row["worst_ms"] <= 100 and row["far"] == []
    assert 0 < row["recognized"] <= len(words) and row["inside_share"] > row["shifted_share"]
    assert cost["with_ms"] > 0 and cost["without_ms"] > 0
    assert abs(cost["difference_ms"] - (cost["with_ms"] - cost["without_ms"])) <= 0.11


async def test_the_seeds_turns_open_a_speech_session_each_as_the_seeds_agent_did(stack):
    """A kept session carries the last turn's playback clock, and the speech server would cut a
    seed turn's text early as if it continued that audio: the seed's turns never reuse one."""
    from voicewire.turn_client import run_turn

    speak = {"action": "speak", "text": "One short sentence."}
    try:
        stack.use_baseline("seed")
        before = stack.runtime_counters.streams_opened
        for _ in range(2):
            assert (await run_turn(stack.ws_url, speak)).status == "complete"
        assert stack.runtime_counters.streams_opened == before + 2
    finally:
        stack.use_baseline("voicewire")
    before = stack.runtime_counters.streams_opened
    for _ in range(2):
        assert (await run_turn(stack.ws_url, speak)).status == "complete"
    assert stack.runtime_counters.streams_opened <= before + 1  # voicewire keeps its session
