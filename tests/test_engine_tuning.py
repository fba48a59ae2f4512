"""The engine's choice of graph: measured once per machine, kept in the cache, overridable.

The record's file handling and keys run for real (a temporary cache directory); the timings are
given where a test is about the choice, and real where it is about the measurement.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from speech_server import engine_tuning
from speech_server.cpu_identity import cpu_model, kernel_flags
from speech_server.engine_tuning import (
    TUNING_FILE,
    CandidateSpeed,
    MachineIdentity,
    measure_candidates,
    tuned,
)
from speech_server.engines import onnx_engine as onnx_engine_module
from speech_server.engines.onnx_engine import KokoroOnnxEngine
from speech_server.model_assets import bundled_model_path
from speech_server.model_rewrite import fast_model_path
from speech_server.official_voices import english_or_bundled_voices
from speech_server.settings import EngineSettings

HERE = MachineIdentity(cpu="AMD EPYC", kernel_flags=("avx2", "avx512f"), cores=2, onnxruntime="1")


def speed(model: Path, chunk_ms: float, per_frame_ms: float = 2.5) -> CandidateSpeed:
    return CandidateSpeed(
        model=engine_tuning.model_label(model),
        text_side_ms=chunk_ms * 0.1,
        vocoder_ms=chunk_ms * 0.9,
        vocoder_ms_per_frame=per_frame_ms,
        vocoder_ms_per_call=1.0,
        frames=360,
        audio_seconds=4.5,
    )


class CountingMeasure:
    """Measurements given per candidate, and how many times the engine asked for them."""

    def __init__(self, **chunk_ms: float) -> None:
        self.chunk_ms, self.calls = chunk_ms, 0

    def __call__(self, candidates, voices_path):
        self.calls += 1
        return {name: speed(path, self.chunk_ms[name]) for name, path in candidates.items()}


@pytest.fixture
def graphs(tmp_path) -> dict[str, Path]:
    files = {"original": tmp_path / "int8.onnx", "fast": tmp_path / "fast.onnx"}
    for index, path in enumerate(files.values()):
        path.write_bytes(b"x" * (10 + index))
    return files


def test_the_faster_graph_is_chosen_and_the_record_is_kept(tmp_path, graphs):
    measure = CountingMeasure(original=700.0, fast=900.0)
    record = tuned(graphs, tmp_path, directory=tmp_path, machine=HERE, measure=measure)
    assert record.choice == "original" and measure.calls == 1
    assert record.speed().chunk_ms == pytest.approx(700.0)
    assert record.speed("fast").real_time_factor == pytest.approx(0.9 / 4.5)
    again = tuned(graphs, tmp_path, directory=tmp_path, machine=HERE, measure=measure)
    assert again == record and measure.calls == 1  # read back, not measured again
    stored = json.loads((tmp_path / TUNING_FILE).read_text())
    (key, raw), = stored["records"].items()  # fmt: skip
    assert key == record.key and raw["machine"]["cpu"] == "AMD EPYC" and raw["choice"] == "original"

    faster_rewrite = CountingMeasure(original=750.0, fast=600.0)
    record = tuned(graphs, tmp_path, directory=tmp_path, machine=HERE, measure=faster_rewrite)
    assert record.choice == "original" and faster_rewrite.calls == 0  # the kept one


def test_another_machine_or_runtime_or_graph_file_is_measured_again(tmp_path, graphs):
    tuned(graphs, tmp_path, directory=tmp_path, machine=HERE,
          measure=CountingMeasure(original=700.0, fast=900.0))  # fmt: skip
    intel = HERE.model_copy(update={"cpu": "Intel Xeon", "kernel_flags": ("avx2", "amx_tile")})
    newer_runtime = HERE.model_copy(update={"onnxruntime": "2"})
    for machine in (intel, newer_runtime):
        measure = CountingMeasure(original=750.0, fast=600.0)
        record = tuned(graphs, tmp_path, directory=tmp_path, machine=machine, measure=measure)
        assert measure.calls == 1 and record.choice == "fast"
    graphs["fast"].write_bytes(b"a rewrite of another size")
    measure = CountingMeasure(original=700.0, fast=650.0)
    assert (
        tuned(graphs, tmp_path, directory=tmp_path, machine=HERE, measure=measure).choice == "fast"
    )
    assert measure.calls == 1
    records = json.loads((tmp_path / TUNING_FILE).read_text())["records"]
    assert len(records) == 4  # one per machine, runtime and set of files: none replaced
    first = tuned(graphs | {"fast": graphs["original"]}, tmp_path, directory=tmp_path,
                  machine=HERE, measure=CountingMeasure(original=1.0, fast=2.0))  # fmt: skip
    assert first.choice == "original"


@pytest.mark.parametrize(
    "content",
    ["{not json", '{"version": 1, "records": {"k": {"machine": 3}}}', '{"version": 99}', "[]"],
)
def test_an_unreadable_record_is_measured_again(tmp_path, graphs, content):
    (tmp_path / TUNING_FILE).write_text(content)
    measure = CountingMeasure(original=700.0, fast=600.0)
    assert (
        tuned(graphs, tmp_path, directory=tmp_path, machine=HERE, measure=measure).choice == "fast"
    )
    assert measure.calls == 1
    assert (
        tuned(graphs, tmp_path, directory=tmp_path, machine=HERE, measure=measure).choice == "fast"
    )
    assert measure.calls == 1


def test_a_cache_it_cannot_write_to_costs_a_measurement_not_the_engine(tmp_path, graphs, caplog):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache directory would be")
    measure = CountingMeasure(original=700.0, fast=600.0)
    record = tuned(graphs, tmp_path, directory=blocked, machine=HERE, measure=measure)
    assert record.choice == "fast" and measure.calls == 1
    assert "could not keep the engine tuning record" in caplog.text


def test_the_machine_is_named_by_its_cpu_and_its_kernel_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC 9R45\n"
        "flags\t\t: fpu sse2 avx2 fma avx512f avx512_vnni ht constant_tsc\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 9R45\nflags\t\t: fpu\n"
    )
    assert cpu_model(cpuinfo) == "AMD EPYC 9R45"
    assert kernel_flags(cpuinfo) == ("avx2", "avx512_vnni", "avx512f", "fma", "sse2")
    here = MachineIdentity.here()
    assert here.cores >= 1 and here.onnxruntime and here.cpu


@pytest.fixture
def engine_tuning_in(tmp_path, monkeypatch):
    """The engine's tuning record in ``tmp_path`` (the model files stay in the shared cache)."""

    def tuned_here(candidates, voices_path, **kwargs):
        return tuned(candidates, voices_path, directory=tmp_path, **kwargs)

    monkeypatch.setattr(onnx_engine_module, "tuned", tuned_here)
    return tmp_path


def test_auto_runs_the_recorded_choice_and_graph_overrides_it(engine_tuning_in):
    """A record that chose the rewritten graph, and made it the slower vocoder per frame: auto
    runs it with its speed; --graph original runs the original with the original's speed."""
    original = bundled_model_path()
    candidates = {"original": original, "fast": fast_model_path(original)}
    voices, _ = english_or_bundled_voices()
    measured = {"original": speed(original, 900.0, per_frame_ms=2.0),
                "fast": speed(candidates["fast"], 800.0, per_frame_ms=4.0)}  # fmt: skip
    tuned(candidates, voices, directory=engine_tuning_in, measure=lambda *_: measured)

    auto = KokoroOnnxEngine.from_settings(EngineSettings())
    assert auto.graph == "fast" and auto.vocoder.speed.seconds_per_frame == pytest.approx(0.004)
    assert auto.real_time_factor == pytest.approx(0.8 / 4.5)
    chosen = KokoroOnnxEngine.from_settings(EngineSettings(graph="original"))
    assert chosen.graph == "original" and chosen.vocoder.speed.seconds_per_frame == pytest.approx(
        0.002
    )
    # A different graph really runs: the rewrite's audio is not the int8 graph's.
    text = "Your parcel arrives on Thursday."
    assert not np.array_equal(auto.synthesize(text, "af_heart", 1.0),
                              chosen.synthesize(text, "af_heart", 1.0))  # fmt: skip
    # Each engine's windows follow its own graph's speed: the slower vocoder's first is longer.
    side, _ = next(auto.text_sides(text, "af_heart", 1.0))
    assert auto.vocoder.plan(side)[0][1] >= chosen.vocoder.plan(side)[0][1]


def test_the_measurement_times_each_half_of_the_real_graph():
    original = bundled_model_path()
    voices, _ = english_or_bundled_voices()
    (name, measured), = measure_candidates({"original": original}, voices).items()  # fmt: skip
    assert name == "original" and measured.model == engine_tuning.model_label(original)
    assert measured.frames > 200 and measured.audio_seconds == measured.frames * 300 / 24_000
    assert 0 < measured.text_side_ms < measured.vocoder_ms
    # The vocoder's cost model reproduces its whole-sentence time it was fitted on.
    modelled = measured.vocoder_ms_per_call + measured.vocoder_ms_per_frame * measured.frames
    assert modelled == pytest.approx(measured.vocoder_ms, rel=0.35)
    assert measured.real_time_factor > 0
