"""Engine settings, from command-line flags or the environment (the container has no flags)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

EngineName = Literal["onnx", "torch"]
ENGINE_NAMES: tuple[EngineName, ...] = ("onnx", "torch")
GraphForm = Literal["auto", "fast", "original"]
GRAPH_FORMS: tuple[GraphForm, ...] = ("auto", "fast", "original")
VocoderMode = Literal["streamed", "whole"]
VOCODER_MODES: tuple[VocoderMode, ...] = ("streamed", "whole")
DEFAULT_MODEL_DIR = Path("/opt/ml/model")  # where SageMaker mounts the model data


@dataclass(frozen=True)
class EngineSettings:
    """What to load. Every field has an environment variable, read by ``from_env``:

    ``VOICEWIRE_ENGINE`` (onnx | torch), ``VOICEWIRE_GRAPH`` (auto | fast | original: the ONNX
    engine's graph as this machine runs it fastest, measured once per CPU, ``engine_tuning``; the
    int8 graph rewritten for speed, ``model_rewrite``; or as PyPI has it), ``VOICEWIRE_VOCODER``
    (streamed | whole: the ONNX engine's first window of a request's audio sent before the rest
    is decoded, ``streamed_vocoder``, or every chunk decoded in one call), ``VOICEWIRE_VOICE``,
    ``VOICEWIRE_MODEL_PATH`` and
    ``VOICEWIRE_VOICES_PATH`` (user-given ONNX model and voices files), ``VOICEWIRE_MODEL_DIR``
    (the torch engine's model directory), ``VOICEWIRE_DEVICE`` (torch device), ``VOICEWIRE_LANG``
    (espeak-ng language of the ONNX engine for every voice; by default each voice's own, from
    ``voicewire.voice_catalog``), ``VOICEWIRE_ENGINE_RECHECK`` (on | off: whether a start whose
    warm-up disagrees with the engine-tuning record measures again and replaces it,
    ``engine_tuning``; off keeps the record as it is, as a test run does, so that every server it
    starts plans the same windows).
    """

    engine: EngineName = "onnx"
    graph: GraphForm = "auto"
    vocoder: VocoderMode = "streamed"
    voice: str | None = None
    model_path: Path | None = None
    voices_path: Path | None = None
    model_dir: Path = field(default=DEFAULT_MODEL_DIR)
    device: str | None = None
    lang: str | None = None
    recheck_tuning: bool = field(default_factory=lambda: _recheck_from_env(os.environ))

    def __post_init__(self) -> None:
        if self.engine not in ENGINE_NAMES:
            raise ValueError(f"engine must be one of {ENGINE_NAMES}, not {self.engine!r}")
        if self.graph not in GRAPH_FORMS:
            raise ValueError(f"graph must be one of {GRAPH_FORMS}, not {self.graph!r}")
        if self.vocoder not in VOCODER_MODES:
            raise ValueError(f"vocoder must be one of {VOCODER_MODES}, not {self.vocoder!r}")
        if (self.model_path is None) != (self.voices_path is None):
            raise ValueError("give both a model path and a voices path, or neither")

    @classmethod
    def from_env(cls, **overrides: object) -> EngineSettings:
        """Environment first, then every override that is not ``None`` (flags win)."""
        env = os.environ
        values: dict[str, object] = {
            "engine": env.get("VOICEWIRE_ENGINE", "onnx"),
            "graph": env.get("VOICEWIRE_GRAPH", "auto"),
            "vocoder": env.get("VOICEWIRE_VOCODER", "streamed"),
            "voice": env.get("VOICEWIRE_VOICE") or None,
            "model_path": _path(env.get("VOICEWIRE_MODEL_PATH")),
            "voices_path": _path(env.get("VOICEWIRE_VOICES_PATH")),
            "model_dir": _path(env.get("VOICEWIRE_MODEL_DIR")) or DEFAULT_MODEL_DIR,
            "device": env.get("VOICEWIRE_DEVICE") or None,
            "lang": env.get("VOICEWIRE_LANG") or None,
        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls(**values)  # type: ignore[arg-type]


def _recheck_from_env(env: Mapping[str, str]) -> bool:
    value = env.get("VOICEWIRE_ENGINE_RECHECK", "on").strip().lower()
    if value not in ("on", "off"):
        raise ValueError(f"VOICEWIRE_ENGINE_RECHECK must be on or off, not {value!r}")
    return value == "on"


def _path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None
