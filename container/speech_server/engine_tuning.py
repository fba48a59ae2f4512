"""The CPU engine's speed on this machine, measured once per CPU and kept: which graph to run,
and what the streamed vocoder and the chunk plan may count on.

Which graph onnxruntime runs fastest depends on the CPU: the rewritten graph
(``speech_server.model_rewrite``) was 1.24x faster than PyPI's int8 export on an Intel Xeon and
0.98-1.07x on an AMD EPYC of the same size, where MLAS's int8 kernels use AVX-512 VNNI. So the
engine does not guess. The first time it starts on a machine (``tuned``) it loads each candidate
graph, split where its vocoder begins, and times on a fixed calibration sentence, interleaved
round after round (``calibrate``, with the line's maths, is
``speech_server.engine_calibration``'s):

- the text side (phonemes to the vocoder's input features);
- the vocoder over ``window_sizes``: its first ``SHORT_WINDOW_FRAMES`` frames, half the
  sentence and the whole of it. A least-squares line through each size's fastest time over the
  rounds (``fit_line``) gives its cost per frame and per call: the window plan's cost model
  (``streamed_vocoder.window_plan``).

The rounds go on until two successive lines agree (``agree``: within ``SETTLED_WITHIN`` at the
short window and at the whole sentence) and the times show no noise (``noise_in``), at least
``MIN_ROUNDS`` and at most ``MAX_ROUNDS``. A line no machine can have (``implausible``: a cost
per call under ``MIN_PER_CALL_MS``, per frame of zero or less, a whole sentence no slower than
its short window, a window the line misses) is never written: while it moves or shows noise,
the rounds go on; once it has settled with only its cost per call wrong (the machine's own
curve: its cost per frame grows a little with the window, so a straight line's cost per call
comes out below zero), or when the rounds run out, the record gets ``safe_line``, which
predicts no window faster than it was measured, and the log says so.

The fastest candidate for the whole sentence is the choice (``--graph auto``, the default);
``--graph fast|original`` overrides it and still uses that graph's own measured speed. The record,
its key (this machine and the candidate files) and its file are ``speech_server.tuning_record``'s;
this module measures and decides when to.

The speeds in the record, never a live timing, are what the window plan and the chunk schedule
use: the same text then gives the same windows, hence the same audio bytes, on every run (a live
timing moved the seam between runs, and sometimes put it where a listener heard it). But a
record is only as good as the moment it was measured in: one measured while something else ran
on the same cores is twice too slow, for good. So the engine compares its warm-up at every
start with what its record predicts for the same decodes (``disagreement``, no extra work), and
a record off by more than ``RECORD_TOO_SLOW_FACTOR`` or ``RECORD_TOO_FAST_FACTOR`` is measured
again and replaced (``tuned(..., remeasure_because=...)``).
"""

from __future__ import annotations

import fcntl
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from speech_server.engine_calibration import RoundTimes, calibrate, window_sizes
from speech_server.model_assets import Progress, cache_dir
from speech_server.tuning_record import (
    TUNING_FILE,
    CandidateName,
    CandidateSpeed,
    EngineTuning,
    MachineIdentity,
    describe,
    model_label,
    read_records,
    record_key,
    write_records,
)

logger = logging.getLogger(__name__)

# Twelve words, about 3.5 s of audio: long enough that the vocoder's per-frame cost dominates.
CALIBRATION_TEXT = "The agent speaks its first sentence while it is still writing the rest."
CALIBRATION_LANG = "en-us"
# The warm-up at each start ran this many times faster than the record predicts: the record was
# measured while something else ran (a second process on 2 cores doubles every decode), and is
# measured again. Timings are one-sided (interference only slows a decode), so a start that runs
# faster than the record is no accident; two quiet processes differed by 1.15-1.35x here.
RECORD_TOO_SLOW_FACTOR = 1.5
# The warm-up ran this many times slower than the record predicts: not a busy moment (2x with a
# second process; the chunk schedule follows that at run time, ``ChunkSchedule.observe``), nor a
# cold first decode (up to 2.4x measured), but a machine that changed under the same key (a
# throttled burstable instance): measured again.
RECORD_TOO_FAST_FACTOR = 3.0

Measure = Callable[[Mapping[CandidateName, Path], Path], dict[CandidateName, CandidateSpeed]]


def tuned(
    candidates: Mapping[CandidateName, Path],
    voices_path: Path,
    *,
    directory: Path | None = None,
    machine: MachineIdentity | None = None,
    measure: Measure | None = None,
    progress: Progress = logger.info,
    remeasure_because: str | None = None,
) -> EngineTuning:
    """This machine's record for these candidate graphs: read from the cache, or measured now
    (once, with progress) and written there. ``remeasure_because``: the kept record is not to be
    trusted (``disagreement``): measured again whatever the cache holds, and replaced."""
    path = (directory or cache_dir()) / TUNING_FILE
    machine = machine or MachineIdentity.here()
    key = record_key(machine, {name: model_label(p) for name, p in candidates.items()})
    records = read_records(path)
    if key in records and remeasure_because is None:
        return records[key]
    distrusted = records.get(key)
    # One measurement at a time on this machine: two engines starting together (two test
    # workers, a server beside `voicewire up`) would each measure with the other on the same
    # cores, both twice too slow. The second waits, then takes what the first measured.
    with _measuring_alone(path):
        records = read_records(path)
        kept = records.get(key)
        if kept is not None and (remeasure_because is None or kept != distrusted):
            return kept
        return _measured(
            path, key, machine, candidates, voices_path, measure, progress, remeasure_because
        )


def _measured(
    path: Path,
    key: str,
    machine: MachineIdentity,
    candidates: Mapping[CandidateName, Path],
    voices_path: Path,
    measure: Measure | None,
    progress: Progress,
    remeasure_because: str | None,
) -> EngineTuning:
    progress(
        f"measuring {' and '.join(candidates)} graph{'s' if len(candidates) > 1 else ''} on "
        f"{machine.cpu} ({machine.cores} cores)"
        + (f" again ({remeasure_because})" if remeasure_because else ", once")
        + ": the engine runs the faster"
    )
    started = time.perf_counter()
    speeds = (measure or measure_candidates)(candidates, voices_path)
    choice = min(speeds, key=lambda name: speeds[name].chunk_ms)
    record = EngineTuning(
        machine=machine,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        calibration_text=CALIBRATION_TEXT,
        candidates=speeds,
        choice=choice,
        measured_in_s=round(time.perf_counter() - started, 1),
        remeasured_because=remeasure_because,
    )
    progress(describe(record))
    records = read_records(path)  # another process may have written one meanwhile
    records[key] = record
    try:
        write_records(path, records)
    except OSError as error:  # a read-only cache: run on this measurement, measure next start
        logger.warning("could not keep the engine tuning record in %s: %s", path, error)
    return record


@contextmanager
def _measuring_alone(path: Path) -> Iterator[None]:
    """An exclusive lock (``flock``) on a file beside the record, held while measuring; where
    the cache cannot hold it (read-only), measuring goes on unlocked."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115 (held below)
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def disagreement(decodes: Sequence[tuple[int, float]], speed: CandidateSpeed) -> str | None:
    """Why ``speed`` (a record's figures for the graph the engine runs) cannot be what this
    machine does, by the engine's own vocoder decodes at its warm-up (frames, seconds); None
    when it can. The fastest decode for its size is the one compared: a decode is only ever
    slowed (a cold first run, another process), so it is the closest to the machine's speed."""
    ratios = [
        seconds * 1000 / speed.vocoder_ms_for(frames)
        for frames, seconds in decodes
        if frames > 0 and speed.vocoder_ms_for(frames) > 0
    ]
    if not ratios:
        return None
    ratio = min(ratios)
    record = (
        f"the record ({speed.vocoder_ms_per_call:.1f} ms a call + "
        f"{speed.vocoder_ms_per_frame:.2f} ms a frame)"
    )
    if ratio * RECORD_TOO_SLOW_FACTOR <= 1:
        return (
            f"the warm-up's vocoder ran {1 / ratio:.1f}x faster than {record} predicts: "
            "the record was measured on a busier machine"
        )
    if ratio >= RECORD_TOO_FAST_FACTOR:
        return (
            f"the warm-up's vocoder ran {ratio:.1f}x slower than {record} predicts: "
            "not the machine it was measured on"
        )
    return None


def measure_candidates(
    candidates: Mapping[CandidateName, Path], voices_path: Path
) -> dict[CandidateName, CandidateSpeed]:
    """Time each candidate's split graph on the calibration sentence, interleaved, until its
    vocoder's line settles (``calibrate``)."""
    from kokoro_onnx import Kokoro

    from speech_server.streamed_vocoder import (
        DEFAULT_VOCODER_SPEED,
        StreamedVocoder,
        open_sessions,
        split_graph,
    )

    loaded = {}
    for name, model in candidates.items():
        split = split_graph(model)
        text_side, vocoder = open_sessions(split)  # as the engine opens them
        kokoro = Kokoro.from_session(text_side, str(voices_path))
        # The speed given here only plans windows, which this measurement does not use.
        loaded[name] = (kokoro, StreamedVocoder(text_side, vocoder, DEFAULT_VOCODER_SPEED))
    inputs, style = _calibration_inputs(next(iter(loaded.values()))[0])
    frames_of: dict[str, int] = {}  # each graph's own: its durations may round differently

    def timed_round() -> dict[str, RoundTimes]:
        times = {}
        for name, (_, vocoder) in loaded.items():
            started = time.perf_counter()
            text = vocoder.text_side(inputs)
            text_seconds = time.perf_counter() - started
            frames_of[name] = text.frames
            windows = {}
            for frames in window_sizes(text.frames):
                started = time.perf_counter()
                vocoder.decode(text, style, 0, frames)
                windows[frames] = time.perf_counter() - started
            times[name] = RoundTimes(text_seconds, windows)
        return times

    calibrated = calibrate(timed_round)
    speeds: dict[CandidateName, CandidateSpeed] = {}
    for name, result in calibrated.items():
        frames = frames_of[name]
        speeds[name] = CandidateSpeed(  # type: ignore[index]
            model=model_label(candidates[name]),  # type: ignore[index]
            text_side_ms=round(result.text_ms, 2),
            vocoder_ms=round(result.windows_ms[frames], 2),
            vocoder_ms_per_frame=round(result.line.per_frame_ms, 4),
            vocoder_ms_per_call=round(result.line.per_call_ms, 2),
            frames=frames,
            audio_seconds=frames * 300 / 24_000,
            fit=result.fit,
            rounds=result.rounds,
            fit_reason=result.reason,
        )
    return speeds


def _calibration_inputs(kokoro: object) -> tuple[dict[str, np.ndarray], np.ndarray]:
    from speech_server.streamed_vocoder import text_side_inputs

    tokenizer = kokoro.tokenizer  # type: ignore[attr-defined]
    tokens = tokenizer.tokenize(tokenizer.phonemize(CALIBRATION_TEXT, CALIBRATION_LANG))
    voices = kokoro.voices  # type: ignore[attr-defined]
    return text_side_inputs(tokens, voices[sorted(voices.keys())[0]], 1.0)
