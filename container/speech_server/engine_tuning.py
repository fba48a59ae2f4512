"""The CPU engine's speed on this machine, measured once per CPU and kept: which graph to run,
and what the streamed vocoder and the chunk plan may count on.

Which graph onnxruntime runs fastest depends on the CPU: the rewritten graph
(``speech_server.model_rewrite``) was 1.24x faster than PyPI's int8 export on an Intel Xeon and
0.98-1.07x on an AMD EPYC of the same size, where MLAS's int8 kernels use AVX-512 VNNI. So the
engine does not guess. The first time it starts on a machine (``tuned``) it loads each candidate
graph, split where its vocoder begins, and times on a fixed calibration sentence, interleaved
over ``ROUNDS`` rounds (medians):

- the text side (phonemes to the vocoder's input features);
- the vocoder over the whole sentence and over its first ``SHORT_WINDOW_FRAMES`` frames, which
  give its cost per frame and per call (a straight line through the two: the window plan's
  cost model, ``streamed_vocoder.window_plan``).

The fastest candidate for the whole sentence is the choice (``--graph auto``, the default);
``--graph fast|original`` overrides it and still uses that graph's own measured speed. The record
goes to ``engine-tuning.json`` in the cache directory, keyed by the CPU's model name, its
vector-instruction flags, its usable cores, the onnxruntime release and the candidate files, so a
cache shared by two kinds of machine keeps one record for each, and a new onnxruntime measures
again.

The speeds in the record, never a live timing, are what the window plan and the chunk schedule
use: the same text then gives the same windows, hence the same audio bytes, on every run (a live
timing moved the seam between runs, and sometimes put it where a listener heard it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from speech_server.cpu_identity import cpu_model, kernel_flags, usable_cores
from speech_server.model_assets import Progress, cache_dir
from voicewire.cache_dir import written_atomically

logger = logging.getLogger(__name__)

TUNING_FILE = "engine-tuning.json"
# 2: measured on the sessions the engine opens (streamed_vocoder.open_sessions: the text side
# does not spin); a version 1 record is measured again.
RECORD_VERSION = 2
# Twelve words, about 3.5 s of audio: long enough that the vocoder's per-frame cost dominates.
CALIBRATION_TEXT = "The agent speaks its first sentence while it is still writing the rest."
CALIBRATION_LANG = "en-us"
SHORT_WINDOW_FRAMES = 64
ROUNDS = 3

CandidateName = Literal["original", "fast", "given"]


class CandidateSpeed(BaseModel):
    """One graph's figures on the calibration sentence (medians, milliseconds)."""

    model_config = ConfigDict(frozen=True)

    model: str  # the graph file's name and size: what was measured
    text_side_ms: float
    vocoder_ms: float  # the whole sentence decoded in one call
    vocoder_ms_per_frame: float
    vocoder_ms_per_call: float
    frames: int
    audio_seconds: float

    @property
    def chunk_ms(self) -> float:
        return self.text_side_ms + self.vocoder_ms

    @property
    def real_time_factor(self) -> float:
        """Engine time over audio time for a whole chunk: under 1 keeps up with playback."""
        return self.chunk_ms / 1000 / self.audio_seconds


class MachineIdentity(BaseModel):
    model_config = ConfigDict(frozen=True)

    cpu: str
    kernel_flags: tuple[str, ...]
    cores: int
    onnxruntime: str

    @classmethod
    def here(cls) -> MachineIdentity:
        import onnxruntime

        return cls(
            cpu=cpu_model(),
            kernel_flags=kernel_flags(),
            cores=usable_cores(),
            onnxruntime=onnxruntime.__version__,
        )


class EngineTuning(BaseModel):
    """What was measured on one machine, and the graph chosen from it."""

    model_config = ConfigDict(frozen=True)

    machine: MachineIdentity
    measured_at: str
    calibration_text: str
    candidates: dict[CandidateName, CandidateSpeed]
    choice: CandidateName

    @property
    def key(self) -> str:
        return record_key(self.machine, {n: c.model for n, c in self.candidates.items()})

    def speed(self, graph: CandidateName | None = None) -> CandidateSpeed:
        """The figures of ``graph``, by default the chosen one."""
        return self.candidates[graph or self.choice]


def model_label(path: Path) -> str:
    """What identifies a candidate file cheaply: its name and size (the rewritten graph's name
    carries its sha256; the assembled model is checked against its own)."""
    return f"{path.name}:{path.stat().st_size}"


def record_key(machine: MachineIdentity, models: Mapping[str, str]) -> str:
    identity = {"machine": machine.model_dump(mode="json"), "models": dict(sorted(models.items()))}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


Measure = Callable[[Mapping[CandidateName, Path], Path], dict[CandidateName, CandidateSpeed]]


def tuned(
    candidates: Mapping[CandidateName, Path],
    voices_path: Path,
    *,
    directory: Path | None = None,
    machine: MachineIdentity | None = None,
    measure: Measure | None = None,
    progress: Progress = logger.info,
) -> EngineTuning:
    """This machine's record for these candidate graphs: read from the cache, or measured now
    (once, with progress) and written there."""
    path = (directory or cache_dir()) / TUNING_FILE
    machine = machine or MachineIdentity.here()
    key = record_key(machine, {name: model_label(p) for name, p in candidates.items()})
    records = _read_records(path)
    if key in records:
        return records[key]
    progress(
        f"measuring {' and '.join(candidates)} graph{'s' if len(candidates) > 1 else ''} on "
        f"{machine.cpu} ({machine.cores} cores), once: the engine runs the faster"
    )
    speeds = (measure or measure_candidates)(candidates, voices_path)
    choice = min(speeds, key=lambda name: speeds[name].chunk_ms)
    record = EngineTuning(
        machine=machine,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        calibration_text=CALIBRATION_TEXT,
        candidates=speeds,
        choice=choice,
    )
    progress(describe(record))
    records = _read_records(path)  # another process may have written one meanwhile
    records[key] = record
    try:
        _write_records(path, records)
    except OSError as error:  # a read-only cache: run on this measurement, measure next start
        logger.warning("could not keep the engine tuning record in %s: %s", path, error)
    return record


def describe(record: EngineTuning) -> str:
    figures = ", ".join(
        f"{name} {speed.chunk_ms:.0f} ms (real-time factor {speed.real_time_factor:.2f})"
        for name, speed in record.candidates.items()
    )
    return f"engine tuning on {record.machine.cpu}: {figures}; chose {record.choice}"


def measure_candidates(
    candidates: Mapping[CandidateName, Path], voices_path: Path
) -> dict[CandidateName, CandidateSpeed]:
    """Time each candidate's split graph on the calibration sentence, interleaved."""
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
    timings: dict[str, dict[str, list[float]]] = {
        name: {"text": [], "whole": [], "short": []} for name in loaded
    }
    frames_of: dict[str, int] = {}  # each graph's own: its durations may round differently
    inputs, style = _calibration_inputs(next(iter(loaded.values()))[0])
    for round_number in range(ROUNDS + 1):  # the first round warms each session up
        for name, (_, vocoder) in loaded.items():
            started = time.perf_counter()
            text = vocoder.text_side(inputs)
            text_done = time.perf_counter()
            vocoder.decode(text, style, 0, text.frames)
            whole_done = time.perf_counter()
            vocoder.decode(text, style, 0, min(SHORT_WINDOW_FRAMES, text.frames))
            short_done = time.perf_counter()
            frames_of[name] = text.frames
            if round_number:
                timings[name]["text"].append(text_done - started)
                timings[name]["whole"].append(whole_done - text_done)
                timings[name]["short"].append(short_done - whole_done)
    speeds: dict[CandidateName, CandidateSpeed] = {}
    for name, figures in timings.items():
        frames = frames_of[name]
        whole, short = (statistics.median(figures[part]) for part in ("whole", "short"))
        per_frame = max(0.0, (whole - short) / max(1, frames - SHORT_WINDOW_FRAMES))
        speeds[name] = CandidateSpeed(  # type: ignore[index]
            model=model_label(candidates[name]),  # type: ignore[index]
            text_side_ms=round(statistics.median(figures["text"]) * 1000, 2),
            vocoder_ms=round(whole * 1000, 2),
            vocoder_ms_per_frame=round(per_frame * 1000, 4),
            vocoder_ms_per_call=round(max(0.0, short - per_frame * SHORT_WINDOW_FRAMES) * 1000, 2),
            frames=frames,
            audio_seconds=frames * 300 / 24_000,
        )
    return speeds


def _calibration_inputs(kokoro: object) -> tuple[dict[str, np.ndarray], np.ndarray]:
    from speech_server.streamed_vocoder import text_side_inputs

    tokenizer = kokoro.tokenizer  # type: ignore[attr-defined]
    tokens = tokenizer.tokenize(tokenizer.phonemize(CALIBRATION_TEXT, CALIBRATION_LANG))
    voices = kokoro.voices  # type: ignore[attr-defined]
    return text_side_inputs(tokens, voices[sorted(voices.keys())[0]], 1.0)


def _read_records(path: Path) -> dict[str, EngineTuning]:
    """The file's records; an unreadable file or record is measured again, not trusted."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        logger.warning("ignoring %s (%s): measuring again", path, error)
        return {}
    if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
        return {}
    records: dict[str, EngineTuning] = {}
    for key, raw in (data.get("records") or {}).items():
        try:
            record = EngineTuning.model_validate(raw)
        except ValidationError:
            continue
        if record.key == key:
            records[key] = record
    return records


def _write_records(path: Path, records: Mapping[str, EngineTuning]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "version": RECORD_VERSION,
        "records": {key: record.model_dump(mode="json") for key, record in records.items()},
    }
    with written_atomically(path) as partial:
        partial.write_text(json.dumps(body, indent=2) + "\n")
