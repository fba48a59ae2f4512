"""The CPU engine's tuning record: what ``speech_server.engine_tuning`` measured on one machine,
how a record is keyed, and how the records are kept.

The records live in ``engine-tuning.json`` in the cache directory, one per key: the CPU's model
name, its vector-instruction flags, its usable cores, the onnxruntime release and the candidate
files (name and size), so a cache shared by two kinds of machine keeps one record for each, and
a new onnxruntime measures again. A file or record that cannot be read, or of another
``RECORD_VERSION``, is measured again, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from speech_server.cpu_identity import cpu_model, kernel_flags, usable_cores
from speech_server.engine_calibration import FitKind
from voicewire.cache_dir import written_atomically

logger = logging.getLogger(__name__)

TUNING_FILE = "engine-tuning.json"
# 2: measured on the sessions the engine opens (streamed_vocoder.open_sessions: the text side
# does not spin); a version 1 record is measured again.
# 3: the vocoder's line fitted over three window sizes and rounds until it settles, never with a
# cost per call of zero (version 2 clamped a line through two points at 0: 0.0 ms per call in
# most records, and one noisy round decided the plan for good); a version 2 record is measured
# again.
RECORD_VERSION = 3

CandidateName = Literal["original", "fast", "given"]


class CandidateSpeed(BaseModel):
    """One graph's figures on the calibration sentence (milliseconds, each the fastest of its
    rounds: a decode is only ever slowed, never sped up)."""

    model_config = ConfigDict(frozen=True)

    model: str  # the graph file's name and size: what was measured
    text_side_ms: float
    vocoder_ms: float  # the whole sentence decoded in one call
    vocoder_ms_per_frame: float
    vocoder_ms_per_call: float
    frames: int
    audio_seconds: float
    # How the vocoder's two costs were obtained, and over how many rounds (0: not measured in
    # rounds, a test's own figures).
    fit: FitKind = "line"
    rounds: int = 0
    fit_reason: str | None = None  # why the safe line: what the fitted one was

    @property
    def chunk_ms(self) -> float:
        return self.text_side_ms + self.vocoder_ms

    @property
    def real_time_factor(self) -> float:
        """Engine time over audio time for a whole chunk: under 1 keeps up with playback."""
        return self.chunk_ms / 1000 / self.audio_seconds

    def vocoder_ms_for(self, frames: int) -> float:
        """What a decode of ``frames`` frames costs by the record: the window plan's cost model."""
        return self.vocoder_ms_per_call + self.vocoder_ms_per_frame * frames


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
    measured_in_s: float = 0.0  # what the measurement cost the start that made it
    # Why a record under the same key was measured again (``disagreement``); None: the first.
    remeasured_because: str | None = None

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


def describe(record: EngineTuning) -> str:
    figures = ", ".join(
        f"{name} {speed.chunk_ms:.0f} ms (real-time factor {speed.real_time_factor:.2f}; "
        f"vocoder {speed.vocoder_ms_per_call:.1f} ms a call + {speed.vocoder_ms_per_frame:.2f} "
        f"ms a frame, {speed.fit}, {speed.rounds} rounds)"
        for name, speed in record.candidates.items()
    )
    return (
        f"engine tuning on {record.machine.cpu}: {figures}; chose {record.choice} "
        f"(measured in {record.measured_in_s:.1f} s)"
    )


def read_records(path: Path) -> dict[str, EngineTuning]:
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


def write_records(path: Path, records: Mapping[str, EngineTuning]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "version": RECORD_VERSION,
        "records": {key: record.model_dump(mode="json") for key, record in records.items()},
    }
    with written_atomically(path) as partial:
        partial.write_text(json.dumps(body, indent=2) + "\n")
