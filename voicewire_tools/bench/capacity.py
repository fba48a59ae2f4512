"""``voicewire bench capacity``: toward internet scale, on paper and by simulation.

    uv run voicewire bench capacity [--hours 2] [--routing random|least] [--json PATH]
                                    [--plot PATH]

Nothing here can run on AWS from this machine, so the figures are a model whose inputs are
measured where they can be and named where they cannot:

1. **Measured here** (the real parts, on the CPU): a turn's chunk schedule, from the replayed LLM
   recordings (``events/llm``) through the pipeline's chunker, ``cut_early`` and the speech
   server's chunk plan; each chunk's audio length, from the ONNX engine with the synthesis
   layer's trim and pauses; the CPU engine's real-time factor. And one CPU speech server under
   load, from ``bench load``'s measured curve (``--load-curve``, ``cpu_server_model``): what it
   served at once, and a model of it fed from that curve, beside each measured load.
2. **The seed's GPU figures**: on ml.g5.xlarge the seed measured 329.3 ms to the first audio of
   its whole case (one synthesis call) and 156.7 ms for its first sentence alone. With the two
   texts' audio lengths (measured here: the same model gives the same durations), a line through
   both gives the GPU's time per second of audio and a fixed part (the seed's client-to-endpoint
   round trip and the call's overhead).
3. **Published limits and prices** (``LIMITS``, ``PRICES``, dated; confirm on AWS's pages).
4. **Assumptions**, named in ``Assumptions``: link overhead, think time, conversation length,
   how long a new endpoint instance takes to serve.

**On paper** (``paper_model``): sessions per instance, Lambda concurrency, API Gateway
connections and messages, DynamoDB writes, cost per 1,000 spoken minutes.

**By simulation** (``simulate``, SimPy): sessions arrive at random (Poisson), each a conversation
of turns; each turn's chunks reach its instance at their measured times and queue for the one
synthesis thread an instance has (the speech server's), earliest deadline first across sessions,
as the server does (``speech_server.deadline_executor``: a listener who hears nothing yet before
one whose audio is queued). Out come first-audio p50/p95 and playback stalls against load and
instance count, and autoscaled runs under a ramp: the stack's target tracking (open sessions and the
engine's busy share per instance, as the container publishes them: out after 2 minutes over
either target, in after 15 under both, a new instance serving after ``provision_s``) against
the invocation count the stack used to track.

**The targets it gives** (``stacks/scaling_targets.py`` holds them): the engine's busy share an
instance is sized for (``Assumptions.utilization``, 60%: the cliff, where every listener's audio
queues, is at 100%), and the open sessions that make that share on paper
(``sessions_per_gpu_instance``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import simpy

from functions.turn import cut_early
from speech_server.chunk_plan import pause_after, plan_chunks
from voicewire.chunker import IncrementalSentenceChunker
from voicewire_tools.bench.cpu_server_model import (
    DEFAULT_CURVE,
    Chunk,
    CpuServer,
    LoadCurve,
    compare,
)
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json

RECORDINGS = Path(__file__).resolve().parents[2] / "events" / "llm"
ANSWERS = ("default", "four_sentences")
# The seed's ml.g5.xlarge figures for its case: first audio of the whole 267-character text (one
# synthesis call) and of its first sentence alone.
SEED_GPU_WHOLE_MS = 329.3
SEED_GPU_FIRST_SENTENCE_MS = 156.7


@dataclass(frozen=True)
class Assumptions:
    link_overhead_s: float = 0.06  # worker -> SageMaker -> worker -> @connections -> client
    engine_call_s: float = 0.02  # the GPU engine's fixed time per chunk (of the seed's fixed part)
    think_s: float = 4.0  # after the answer has played, until the next question arrives
    turns_per_session: int = 3  # the load bench's conversation
    provision_s: float = 360.0  # a new GPU instance launched, image pulled, model loaded
    utilization: float = 0.6  # the engine busy share an instance is sized for on paper
    worker_memory_gb: float = 1.0  # the worker Lambda (stacks/voice_api.py)


# Published quotas (AWS's quota pages; docs/aws-facts.md where verified).
LIMITS = {
    "apigw_new_connections_per_s": 500,  # per account per Region, adjustable
    "apigw_connection_hours": 2,
    "apigw_callback_rps": 10_000,  # @connections posts share the account's 10,000 RPS
    "lambda_concurrency": 1_000,  # default per account per Region, adjustable
    "lambda_scaling_per_10s": 1_000,  # each function adds up to 1,000 concurrency per 10 s
}

# On-demand prices, us-east-1, as published on AWS's pricing pages and summarized by third
# parties in 2025-2026 (checked 2026-12-01; AWS changes them: confirm before relying on them).
PRICES = {
    "date": "2026-12-01",
    "sagemaker_ml_g5_xlarge_hour": 1.408,
    "lambda_arm_gb_s": 0.0000133334,
    "lambda_request": 0.20 / 1e6,
    "apigw_ws_message": 1.00 / 1e6,  # per message, billed in 32 KB increments
    "apigw_ws_connection_minute": 0.25 / 1e6,
    "dynamodb_write_unit": 0.625 / 1e6,  # on-demand, per write request unit (1 KB)
    "data_transfer_out_gb": 0.09,
}
POST_BYTES = 9_600  # one 0.2 s PCM frame per @connections post (voicewire's relay)
# Counted in functions/adapters/ (turn_ledger.py, conversation_table.py, connections.py): a turn's
# start, claim, one claim renewal, finish and history append, each billed by item size (the
# history makes the connection's item grow: 2 KB assumed); a session's put and mark_gone.
DYNAMODB_WRITE_UNITS_PER_TURN = 5 * 2
DYNAMODB_WRITE_UNITS_PER_SESSION = 2


# --- measured inputs -------------------------------------------------------------------------


def recorded_deltas(answer: str) -> list[tuple[float, str]]:
    """The recording's text deltas: (seconds after the call, text)."""
    events = json.loads((RECORDINGS / f"{answer}.json").read_text())["events"]
    deltas = []
    for entry in events:
        delta = entry["event"].get("contentBlockDelta", {}).get("delta", {})
        if "text" in delta:
            deltas.append((entry["at_ms"] / 1000, delta["text"]))
    return deltas


def turn_requests(answer: str) -> list[tuple[float, str, bool]]:
    """The pipeline's requests for one recorded answer: (ready, sentence, fast_start)."""
    chunker = IncrementalSentenceChunker(first_max_words=6)
    requests: list[tuple[float, str, bool]] = []
    deltas = recorded_deltas(answer)
    for at, text in deltas:
        for sentence in chunker.feed(text):
            requests.append((at, sentence, cut_early(sentence, len(requests))))
    for sentence in chunker.finish():
        requests.append((deltas[-1][0], sentence, cut_early(sentence, len(requests))))
    return requests


@dataclass
class MeasuredInputs:
    answers: dict[str, list[Chunk]]
    cpu_real_time_factor: float
    gpu_real_time_factor: float
    gpu_fixed_s: float
    seed_audio_s: tuple[float, float]  # the seed's whole case and its first sentence
    sources: dict[str, str] = field(default_factory=dict)
    # The answers bench load's questions get, in its order (its clients cycle through them):
    # what the CPU server's model replays. Empty: ``answers``.
    load_answers: list[list[Chunk]] = field(default_factory=list)


def load_bench_answers() -> list[str]:
    """The recordings ``bench load``'s questions are answered with, in its order."""
    from functions.adapters.replay_llm import ReplayBedrockClient
    from voicewire_tools.bench.load import QUESTIONS

    replay = ReplayBedrockClient()
    return [replay.choose(question).name for question in QUESTIONS]


def measure_inputs(engine: Any) -> MeasuredInputs:
    """Each answer's chunks with their audio length, and the engines' real-time factors."""
    from speech_server.synthesis import trim_silence

    voice = engine.default_voice
    measured: dict[str, list[Chunk]] = {}
    busy = audio_total = 0.0
    load_order = load_bench_answers()
    for answer in dict.fromkeys([*ANSWERS, *load_order]):
        chunks = []
        for index, (ready, sentence, fast_start) in enumerate(turn_requests(answer)):
            for piece in plan_chunks(sentence, fast_start=fast_start):
                started = time.perf_counter()
                audio = trim_silence(engine.synthesize(piece, voice, 1.0), engine.sample_rate)
                seconds = len(audio) / engine.sample_rate + pause_after(piece)
                if answer in ANSWERS:
                    busy += time.perf_counter() - started
                    audio_total += seconds
                chunks.append(Chunk(ready, seconds, index))
        measured[answer] = chunks
    answers = {answer: measured[answer] for answer in ANSWERS}
    whole_text = "".join(text for _, text in recorded_deltas("four_sentences"))
    first_sentence = turn_requests("four_sentences")[0][1]
    whole_audio, first_audio = (
        len(engine.synthesize(text, voice, 1.0)) / engine.sample_rate
        for text in (whole_text, first_sentence)
    )
    per_audio_second = (
        (SEED_GPU_WHOLE_MS - SEED_GPU_FIRST_SENTENCE_MS) / 1000 / (whole_audio - first_audio)
    )
    return MeasuredInputs(
        answers=answers,
        cpu_real_time_factor=busy / audio_total,
        gpu_real_time_factor=per_audio_second,
        gpu_fixed_s=SEED_GPU_FIRST_SENTENCE_MS / 1000 - per_audio_second * first_audio,
        seed_audio_s=(whole_audio, first_audio),
        load_answers=[measured[answer] for answer in load_order],
        sources={
            "chunks": "measured here: recordings -> chunker -> chunk plan -> ONNX engine",
            "cpu_real_time_factor": f"measured here ({describe_machine()['cpu']})",
            "gpu_real_time_factor": "the seed's 329.3 ms and 156.7 ms (ml.g5.xlarge) against "
            "the audio length of its whole case and first sentence, measured here",
        },
    )


# --- on paper ----------------------------------------------------------------------------------


def paper_model(inputs: MeasuredInputs, assumptions: Assumptions) -> dict[str, Any]:
    """One deployment's capacity and cost, from averages."""
    chunks = [chunk for answer in inputs.answers.values() for chunk in answer]
    turns = len(inputs.answers)
    audio_per_turn = sum(chunk.audio_s for chunk in chunks) / turns
    last_text = statistics.mean(max(c.ready_s for c in a) for a in inputs.answers.values())
    # A turn lasts until its audio has played (from its first chunk's text); the user then thinks.
    first_ready = statistics.mean(a[0].ready_s for a in inputs.answers.values())
    turn_cycle = first_ready + audio_per_turn + assumptions.think_s
    speaking_share = audio_per_turn / turn_cycle
    # Engine seconds per second of speech, the fixed per-chunk time included.
    chunks_per_turn = len(chunks) / turns
    gpu_load = (
        inputs.gpu_real_time_factor + assumptions.engine_call_s * chunks_per_turn / audio_per_turn
    )
    sessions_per_instance = assumptions.utilization / (gpu_load * speaking_share)
    # The worker Lambda holds a turn until its last frame is posted: the LLM's text, then the
    # last chunk's synthesis and posts (0.5 s on a GPU, generously).
    worker_s = last_text + 0.5
    # The relay's posts (voicewire bench posts counted 220 audio, 42 text and 8 sentence posts
    # on the default answer): an audio frame per 0.2 s, a text_delta per 0.1 s of the LLM's
    # text, a sentence frame per chunk request, turn_start and turn_end.
    requests_per_turn = statistics.mean(
        len({c.request for c in answer}) for answer in inputs.answers.values()
    )
    posts_per_turn = math.ceil(
        audio_per_turn * 24_000 * 2 / POST_BYTES + last_text / 0.1 + requests_per_turn + 2
    )
    spoken_minutes = 1_000
    turns_per_1000_min = spoken_minutes * 60 / audio_per_turn
    session_minutes = turns_per_1000_min * turn_cycle / 60  # connections open meanwhile
    instance_hours = spoken_minutes / 60 * gpu_load / assumptions.utilization
    costs = {
        "sagemaker": instance_hours * PRICES["sagemaker_ml_g5_xlarge_hour"],
        "lambda": turns_per_1000_min
        * (
            worker_s * assumptions.worker_memory_gb * PRICES["lambda_arm_gb_s"]
            + 2 * PRICES["lambda_request"]  # the ask route and the worker
        ),
        "api_gateway": turns_per_1000_min * posts_per_turn * PRICES["apigw_ws_message"]
        + session_minutes * PRICES["apigw_ws_connection_minute"],
        "dynamodb": (
            turns_per_1000_min * DYNAMODB_WRITE_UNITS_PER_TURN
            + turns_per_1000_min / assumptions.turns_per_session * DYNAMODB_WRITE_UNITS_PER_SESSION
        )
        * PRICES["dynamodb_write_unit"],
        "data_transfer": spoken_minutes * 60 * 24_000 * 2 / 1e9 * PRICES["data_transfer_out_gb"],
    }
    costs["total"] = sum(costs.values())
    concurrent_per_1000 = 1_000  # sessions at once, for the limits below
    requests_per_session_minute = chunks_per_turn * 60 / turn_cycle
    return {
        "audio_per_turn_s": audio_per_turn,
        "requests_per_session_minute": requests_per_session_minute,
        # The targets of stacks/scaling_targets.py: the engine's busy share an instance is
        # sized for, and the open sessions that make it.
        "target_engine_busy_percent": assumptions.utilization * 100,
        "target_sessions_per_instance": math.floor(sessions_per_instance),
        # What an invocation-count target would have to be for the same sessions, if SageMaker
        # counted each synthesis request (it counts a bidirectional stream once).
        "sized_target_requests_per_minute": sessions_per_instance * requests_per_session_minute,
        "turn_cycle_s": turn_cycle,
        "speaking_share": speaking_share,
        "gpu_engine_seconds_per_audio_second": gpu_load,
        "sessions_per_gpu_instance": sessions_per_instance,
        "sessions_per_cpu_instance": assumptions.utilization
        / (inputs.cpu_real_time_factor * speaking_share),
        "worker_seconds_per_turn": worker_s,
        "posts_per_turn": posts_per_turn,
        "per_1000_concurrent_sessions": {
            "gpu_instances": concurrent_per_1000 / sessions_per_instance,
            "lambda_concurrency": concurrent_per_1000 * worker_s / turn_cycle,
            "new_connections_per_s_if_all_arrive_in_a_minute": concurrent_per_1000 / 60,
            "callback_posts_per_s": concurrent_per_1000 * posts_per_turn / turn_cycle,
        },
        "cost_per_1000_spoken_minutes_usd": costs,
    }


# --- by simulation ---------------------------------------------------------------------------


@dataclass
class TurnRecord:
    start_s: float
    first_audio_s: float
    stall_s: float


@dataclass
class Instance:
    engine: simpy.PriorityResource
    ready_at: float
    sessions: int = 0  # conversations with a session open here (what OpenSessions counts)
    requests: int = 0  # synthesis requests started (what InvocationsPerInstance would count)
    busy_s: float = 0.0  # engine time spent (what EngineBusy measures)


class Deployment:
    """Endpoint instances, each one synthesis thread (the speech server's), and the routing of
    a new session to one of them."""

    def __init__(
        self, env: simpy.Environment, instances: int, routing: str, rng: random.Random
    ) -> None:
        self.env, self.routing, self.rng = env, routing, rng
        self.instances = [Instance(simpy.PriorityResource(env, 1), 0.0) for _ in range(instances)]

    def serving(self) -> list[Instance]:
        return [i for i in self.instances if i.ready_at <= self.env.now]

    def route(self) -> Instance:
        live = self.serving()
        if self.routing == "least":
            return min(live, key=lambda i: len(i.engine.queue) + i.engine.count)
        return self.rng.choice(live)  # SageMaker's default routing: random


@dataclass
class Scenario:
    sessions_per_minute: float | list[tuple[float, float]]  # a rate, or (from_s, rate) steps
    instances: int
    hours: float
    autoscale: bool = False
    max_instances: int = 16
    # Target tracking, per-instance averages (None: that policy is absent). The stack's: open
    # sessions and the engine's busy share; the one it used to have: requests per minute.
    target_sessions: float | None = 38.0
    target_busy_percent: float | None = 60.0
    target_requests_per_minute: float | None = None

    def load_ratios(self, sessions: float, busy_percent: float, requests: float) -> list[float]:
        """Each policy's metric over its target (above 1: that policy wants more instances)."""
        pairs = (
            (sessions, self.target_sessions),
            (busy_percent, self.target_busy_percent),
            (requests, self.target_requests_per_minute),
        )
        return [value / target for value, target in pairs if target]


def simulate(
    inputs: MeasuredInputs,
    assumptions: Assumptions,
    scenario: Scenario,
    routing: str = "random",
    seed: int = 7,
) -> dict[str, Any]:
    """Run one scenario; the turns' first audio and stalls, and the instance count over time."""
    rng = random.Random(seed)
    env = simpy.Environment()
    deployment = Deployment(env, scenario.instances, routing, rng)
    turns: list[TurnRecord] = []
    started: list[float] = []  # every turn's start, served or not by the end
    answers = list(inputs.answers.values())
    horizon = scenario.hours * 3600
    timeline: list[tuple[float, int, int]] = []  # (time, serving instances, sessions)

    def rate_at(now: float) -> float:
        if isinstance(scenario.sessions_per_minute, list):
            current = 0.0
            for since, rate in scenario.sessions_per_minute:
                if now >= since:
                    current = rate
            return current
        return scenario.sessions_per_minute

    def synthesize(instance: Instance, chunk: Chunk, deadline: float) -> Any:
        with instance.engine.request(priority=deadline) as slot:
            yield slot
            instance.requests += 1
            seconds = assumptions.engine_call_s + chunk.audio_s * inputs.gpu_real_time_factor
            instance.busy_s += seconds
            yield env.timeout(seconds)

    def turn(instance: Instance) -> Any:
        start = env.now
        started.append(start)
        chunks = rng.choice(answers)
        first_audio = None
        playing_until = stall = 0.0
        for chunk in chunks:
            ready = start + chunk.ready_s  # the recording's pace: the LLM's first token included
            if env.now < ready:
                yield env.timeout(ready - env.now)
            # The deadline (PlaybackClock.runs_out): since when the listener has waited for
            # the first audio, then when the queued audio ends.
            deadline = ready if first_audio is None else playing_until
            yield env.process(synthesize(instance, chunk, deadline))
            heard = env.now + assumptions.link_overhead_s
            if first_audio is None:
                first_audio, playing_until = heard - start, heard
            stall += max(0.0, heard - playing_until)
            playing_until = max(playing_until, heard) + chunk.audio_s
        turns.append(TurnRecord(start, first_audio or 0.0, stall))
        if playing_until > env.now:
            yield env.timeout(playing_until - env.now)

    def session() -> Any:
        instance = deployment.route()
        instance.sessions += 1
        try:
            for _ in range(assumptions.turns_per_session):
                yield env.process(turn(instance))
                yield env.timeout(rng.expovariate(1 / assumptions.think_s))
        finally:
            instance.sessions -= 1

    def arrivals() -> Any:
        while env.now < horizon:
            rate = rate_at(env.now)
            if rate <= 0:
                yield env.timeout(60)
                continue
            yield env.timeout(rng.expovariate(rate / 60))
            env.process(session())

    def autoscaler() -> Any:
        # Target tracking, each policy on a per-instance average over the last minute: out after
        # 2 minutes with any policy over its target (then 2 minutes of cooldown), in after 15
        # minutes with every policy under 90% of its target.
        over = under = 0
        last_change = -math.inf
        previous_requests, previous_busy = 0, 0.0
        while True:
            yield env.timeout(60)
            live = deployment.serving()
            requests = sum(i.requests for i in deployment.instances)
            busy = sum(i.busy_s for i in deployment.instances)
            count = max(1, len(live))
            ratios = scenario.load_ratios(
                sessions=sum(i.sessions for i in live) / count,
                busy_percent=(busy - previous_busy) / 60 / count * 100,
                requests=(requests - previous_requests) / count,
            )
            previous_requests, previous_busy = requests, busy
            timeline.append((env.now, len(live), sum(i.sessions for i in live)))
            if not scenario.autoscale:
                continue
            over = over + 1 if max(ratios) > 1 else 0
            under = under + 1 if max(ratios) < 0.9 else 0
            pending = len(deployment.instances) - len(live)
            if over >= 2 and not pending and env.now - last_change >= 120:
                wanted = math.ceil(len(live) * max(ratios))
                for _ in range(min(scenario.max_instances, wanted) - len(deployment.instances)):
                    deployment.instances.append(
                        Instance(simpy.PriorityResource(env, 1), env.now + assumptions.provision_s)
                    )
                last_change, over = env.now, 0
            elif under >= 15 and len(live) > 1 and env.now - last_change >= 900:
                idle = min(live, key=lambda i: i.sessions)
                if idle.sessions == 0:
                    deployment.instances.remove(idle)
                    last_change, under = env.now, 0

    env.process(arrivals())
    env.process(autoscaler())
    env.run(until=horizon + 600)  # turns begun before the horizon get 10 minutes to finish
    warm_up = 0.0 if scenario.autoscale else 600.0
    settled = [t for t in turns if t.start_s >= warm_up]
    begun = sum(1 for start in started if warm_up <= start < horizon)
    # A turn not finished 10 minutes after the horizon has no first audio to count: it counts as
    # never (infinite), so an overloaded deployment's percentiles say so.
    first = sorted(t.first_audio_s for t in settled if t.start_s < horizon)
    first += [math.inf] * max(0, begun - len(first))
    return {
        "turns": begun,
        "first_audio_p50_s": _percentile(first, 50),
        "first_audio_p95_s": _percentile(first, 95),
        "stalled_turns": sum(1 for t in settled if t.stall_s > 0.1) / max(1, len(settled)),
        "stall_p95_s": _percentile(sorted(t.stall_s for t in settled), 95),
        "timeline": timeline,
        "turn_records": [asdict(t) for t in turns] if scenario.autoscale else [],
    }


def _percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    index = min(len(values) - 1, max(0, math.ceil(pct / 100 * len(values)) - 1))
    return values[index]


# --- the command -------------------------------------------------------------------------------

LOADS = (15, 30, 60, 120, 240, 360)  # new sessions per minute
SATURATED_PLOT_S = 60.0  # where the picture draws a p95 that grows without bound
INSTANCE_COUNTS = (1, 2, 4, 8)


RUNS_TURNS = False  # no stack: --url does not apply


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hours", type=float, default=1.0, help="simulated time per scenario")
    parser.add_argument("--routing", choices=["random", "least"], default="random")
    parser.add_argument(
        "--ramp-hours",
        type=float,
        default=2.0,
        help="simulated time of each autoscaled run (its load steps up at 0, 30 and 60 minutes)",
    )
    parser.add_argument(
        "--loads",
        default=",".join(map(str, LOADS)),
        help="new sessions per minute, comma-separated",
    )
    parser.add_argument(
        "--load-curve",
        type=Path,
        default=DEFAULT_CURVE,
        help="a `voicewire bench load --json` file: one CPU server measured, the CPU instance's "
        "figures (default: the one docs/capacity.md cites)",
    )


def run(args: argparse.Namespace) -> None:
    from speech_server.engines.onnx_engine import KokoroOnnxEngine
    from speech_server.settings import EngineSettings

    assumptions = Assumptions()
    print("measuring the chunk schedule and the engine on this machine...", flush=True)
    engine = KokoroOnnxEngine.from_settings(EngineSettings.from_env(voice=args.voice))
    inputs = measure_inputs(engine)
    machine = describe_machine({"engine": engine.name, "default_voice": engine.default_voice})
    print(machine_line(machine))
    report = capacity_report(inputs, assumptions, args)
    print_report(report)
    report["machine"] = machine
    write_json(report, args.json)
    if args.plot:
        plot(report, args.plot)


def capacity_report(
    inputs: MeasuredInputs, assumptions: Assumptions, args: argparse.Namespace
) -> dict[str, Any]:
    loads = [float(x) for x in str(args.loads).split(",") if x]
    sweep = []
    for instances in INSTANCE_COUNTS:
        print(f"simulating {instances} instance(s) at {len(loads)} loads...", flush=True)
        for load in loads:
            result = simulate(
                inputs, assumptions, Scenario(load, instances, args.hours), args.routing
            )
            result.pop("turn_records")
            result.pop("timeline")
            sweep.append({"instances": instances, "sessions_per_minute": load, **result})
    ramp_top = max(loads)
    ramp = [(0.0, ramp_top / 8), (1800.0, ramp_top / 2), (3600.0, ramp_top)]
    paper = paper_model(inputs, assumptions)
    cpu_server = cpu_server_report(
        LoadCurve.from_json(Path(getattr(args, "load_curve", None) or DEFAULT_CURVE)),
        inputs.load_answers or list(inputs.answers.values()),
        paper["turn_cycle_s"],
    )
    from stacks import scaling_targets as stack

    hours = args.ramp_hours
    policies = {
        # What the stack deploys: open sessions and the engine's busy share.
        "sessions_and_busy": Scenario(
            ramp,
            1,
            hours,
            autoscale=True,
            target_sessions=stack.TARGET_SESSIONS_PER_INSTANCE,
            target_busy_percent=stack.TARGET_ENGINE_BUSY_PERCENT,
        ),
        # The engine's busy share alone: the truth of the load, but it moves only once the
        # sessions' audio is being made.
        "busy_only": Scenario(
            ramp,
            1,
            hours,
            autoscale=True,
            target_sessions=None,
            target_busy_percent=stack.TARGET_ENGINE_BUSY_PERCENT,
        ),
        # What the stack tracked before: SageMaker's invocations, 60 per instance per minute,
        # were SageMaker to count each synthesis request (it counts a stream once).
        "invocations": Scenario(
            ramp,
            1,
            hours,
            autoscale=True,
            target_sessions=None,
            target_busy_percent=None,
            target_requests_per_minute=60.0,
        ),
    }
    autoscaled = {}
    for name, scenario in policies.items():
        print(f"simulating the autoscaled ramp ({name})...", flush=True)
        result = simulate(inputs, assumptions, scenario, args.routing)
        autoscaled[name] = {
            "targets": {
                "sessions": scenario.target_sessions,
                "busy_percent": scenario.target_busy_percent,
                "requests_per_minute": scenario.target_requests_per_minute,
            },
            "ramp": ramp,
            "first_audio_p50_s": result["first_audio_p50_s"],
            "first_audio_p95_s": result["first_audio_p95_s"],
            "stalled_turns": result["stalled_turns"],
            "timeline": result["timeline"],
            "instance_hours": sum(n for _, n, _ in result["timeline"]) / 60,
            "p95_by_10_minutes": _p95_by_window(result["turn_records"], 600),
        }
    return {
        "inputs": {
            "cpu_real_time_factor": inputs.cpu_real_time_factor,
            "gpu_real_time_factor": inputs.gpu_real_time_factor,
            "gpu_fixed_s": inputs.gpu_fixed_s,
            "seed_audio_s": inputs.seed_audio_s,
            "chunks_per_answer": {k: len(v) for k, v in inputs.answers.items()},
            "audio_per_answer_s": {k: sum(c.audio_s for c in v) for k, v in inputs.answers.items()},
            "sources": inputs.sources,
        },
        "assumptions": asdict(assumptions),
        "limits": LIMITS,
        "prices": PRICES,
        "paper": paper,
        "cpu_server": cpu_server,
        "stack_targets": {
            "sessions_per_instance": stack.TARGET_SESSIONS_PER_INSTANCE,
            "engine_busy_percent": stack.TARGET_ENGINE_BUSY_PERCENT,
        },
        "routing": args.routing,
        "sweep": sweep,
        "autoscaled": autoscaled,
    }


def cpu_server_report(
    curve: LoadCurve, answers: list[list[Chunk]], turn_cycle_s: float
) -> dict[str, Any]:
    """One CPU speech server, from the load bench's measured curve (``cpu_server_model``):
    what it served at once, what that holds of conversations, and the model fed from the curve
    beside each measured load."""
    server = CpuServer.from_curve(curve, answers)
    served = curve.served_at_once()
    return {
        "curve": curve.source,
        "machine": curve.machine,
        "served_at_once": served.clients if served else 0,
        "turn_s_at_that_load": served.turn_s if served else None,
        "conversations_per_server": curve.conversations_per_server(turn_cycle_s),
        "model": {
            "engine_s_per_audio_s": server.engine_s_per_audio_s,
            "fixed_s": server.fixed_s,
            "max_load": server.max_load,
            "sources": server.sources,
        },
        "compared": compare(curve, server, answers),
    }


def _p95_by_window(records: list[dict[str, float]], window: float) -> list[tuple[float, float]]:
    buckets: dict[int, list[float]] = {}
    for record in records:
        buckets.setdefault(int(record["start_s"] // window), []).append(record["first_audio_s"])
    return [(k * window, _percentile(sorted(v), 95)) for k, v in sorted(buckets.items())]


def print_report(report: dict[str, Any]) -> None:
    inputs, paper = report["inputs"], report["paper"]
    print(
        f"inputs: GPU {inputs['gpu_real_time_factor'] * 1000:.1f} ms per audio second + "
        f"{inputs['gpu_fixed_s'] * 1000:.0f} ms per call (seed figures), CPU real-time factor "
        f"{inputs['cpu_real_time_factor']:.3f} (here); audio per answer "
        + ", ".join(f"{k} {v:.1f} s" for k, v in inputs["audio_per_answer_s"].items())
    )
    print(
        f"on paper: a turn cycle {paper['turn_cycle_s']:.1f} s, speaking "
        f"{paper['speaking_share']:.0%} of it; {paper['sessions_per_gpu_instance']:.0f} sessions "
        "per ml.g5.xlarge at "
        f"{report['assumptions']['utilization']:.0%} engine use "
        f"({paper['sessions_per_cpu_instance']:.1f} per 2-core CPU instance)"
    )
    cpu = report["cpu_server"]
    model = cpu["model"]
    print(
        f"one CPU speech server, measured ({cpu['curve']}, {cpu['machine'].get('cpu', '?')}, "
        f"{cpu['machine'].get('cores', '?')} cores): {cpu['served_at_once']} clients at once "
        f"all spoken, {cpu['conversations_per_server']:.1f} conversations by their turn cycle; "
        f"the model fed from it: {model['engine_s_per_audio_s']:.3f} engine s per audio s, "
        f"{model['fixed_s'] * 1000:.0f} ms fixed"
    )
    print(f"  {'clients':>7} | {'measured p50 / p95, refused':>28} | model p50 / p95, refused")
    for row in cpu["compared"]:
        measured, modelled = row["measured"], row["model"]
        print(
            f"  {row['clients']:>7} | {_s(measured['first_audio_p50_s'])} / "
            f"{_s(measured['first_audio_p95_s'])}, {measured['refused']:>3} | "
            f"{_s(modelled['first_audio_p50_s'])} / {_s(modelled['first_audio_p95_s'])}, "
            f"{modelled['refused']:>3}"
        )
    per_1000 = paper["per_1000_concurrent_sessions"]
    print(
        f"  per 1,000 concurrent sessions: {per_1000['gpu_instances']:.1f} GPU instances, "
        f"Lambda concurrency {per_1000['lambda_concurrency']:.0f}, "
        f"{per_1000['callback_posts_per_s']:.0f} @connections posts/s"
    )
    costs = paper["cost_per_1000_spoken_minutes_usd"]
    print(
        "  cost per 1,000 spoken minutes (USD, prices of "
        f"{report['prices']['date']}): " + ", ".join(f"{k} {v:.3f}" for k, v in costs.items())
    )
    print(f"simulation ({report['routing']} routing): first audio p50 / p95, stalled turns")
    print(
        f"{'sessions/min':>12} | "
        + " | ".join(f"{n} instance(s)".center(26) for n in INSTANCE_COUNTS)
    )
    loads = sorted({row["sessions_per_minute"] for row in report["sweep"]})
    for load in loads:
        cells = []
        for instances in INSTANCE_COUNTS:
            row = next(
                r
                for r in report["sweep"]
                if r["instances"] == instances and r["sessions_per_minute"] == load
            )
            cells.append(
                f"{row['first_audio_p50_s']:5.2f} / {row['first_audio_p95_s']:6.2f} s, "
                f"{row['stalled_turns']:4.0%}".center(26)
            )
        print(f"{load:>12.0f} | " + " | ".join(cells))
    stack = report["stack_targets"]
    agrees = abs(stack["sessions_per_instance"] / paper["target_sessions_per_instance"] - 1) < 0.1
    print(
        f"autoscaling targets: {paper['target_sessions_per_instance']} open sessions and "
        f"{paper['target_engine_busy_percent']:.0f}% engine busy per instance (the sizing above); "
        f"stacks/scaling_targets.py has {stack['sessions_per_instance']:g} and "
        f"{stack['engine_busy_percent']:g}%"
        + ("" if agrees else " -- UPDATE stacks/scaling_targets.py: it disagrees by more than 10%")
    )
    for name, auto in report["autoscaled"].items():
        peak = max((n for _, n, _ in auto["timeline"]), default=0)
        targets = ", ".join(f"{k} {v:g}" for k, v in auto["targets"].items() if v)
        print(
            f"autoscaled ({name}: {targets}) under the ramp {auto['ramp']}: "
            f"p50 {auto['first_audio_p50_s']:.2f} s, p95 {auto['first_audio_p95_s']:.2f} s, "
            f"stalled turns {auto['stalled_turns']:.0%}, up to {peak} instances, "
            f"{auto['instance_hours']:.1f} instance-hours"
        )


def _s(seconds: float | None) -> str:
    return "     -" if seconds is None else f"{seconds:5.2f} s"


def plot(report: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    ceiling = SATURATED_PLOT_S
    for instances in INSTANCE_COUNTS:
        rows = [r for r in report["sweep"] if r["instances"] == instances]
        loads = [r["sessions_per_minute"] for r in rows]
        p95 = [min(r["first_audio_p95_s"], ceiling) for r in rows]
        (line,) = left.plot(loads, p95, marker="o", label=f"{instances} instance(s)")
        saturated = [(x, y) for x, y in zip(loads, p95, strict=True) if y >= ceiling]
        if saturated:
            left.scatter(*zip(*saturated, strict=True), marker="x", s=80, color=line.get_color())
    left.axhline(ceiling, color="grey", linewidth=0.5)
    left.text(0, ceiling * 1.1, "x: saturated (queue grows without bound)", fontsize=8)
    left.set_xlabel("new sessions per minute")
    left.set_ylabel("first audio p95 (s)")
    left.set_yscale("log")
    left.set_title("fixed instances (ml.g5.xlarge, simulated; p95 capped at 60 s)")
    left.legend()
    twin = right.twinx()
    for (name, auto), colour in zip(
        report["autoscaled"].items(), ("tab:blue", "tab:orange", "tab:green"), strict=False
    ):
        times = [t / 60 for t, _, _ in auto["timeline"]]
        label = name.replace("_", " ")
        right.step(
            times, [n for _, n, _ in auto["timeline"]], where="post", color=colour, label=label
        )
        twin.plot(
            [t / 60 for t, _ in auto["p95_by_10_minutes"]],
            [p for _, p in auto["p95_by_10_minutes"]],
            color=colour,
            linestyle=":",
            marker="o",
        )
    right.set_xlabel("minutes (load ramps up at 0, 30 and 60)")
    right.set_ylabel("serving instances (steps)")
    twin.set_ylabel("first audio p95 per 10 minutes (dots)")
    right.legend(loc="upper left")
    right.set_title("autoscaled under a ramp")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"picture written to {path}")
