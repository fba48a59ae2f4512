import json
from pathlib import Path

import pytest

from speech_server.chunk_schedule import STREAMED_FIRST_SHARE
from voicewire_tools.bench.cpu_server_model import (
    DEFAULT_CURVE,
    Chunk,
    CpuServer,
    LoadCurve,
    compare,
    simulate_clients,
)

# A turn: a 1.5 s first chunk whose text is ready at 0.9 s, then three 4 s chunks.
ANSWER = [Chunk(0.9, 1.5, 0), Chunk(1.5, 4.0, 1), Chunk(2.5, 4.0, 2), Chunk(3.5, 4.0, 3)]


def load_row(clients: int, p50_ms: float, refused: int = 0, timed_out: int = 0) -> dict:
    return {
        "clients": clients,
        "turns": 3 * clients,
        "first_audio_ms": {"p50": p50_ms, "p95": 1.5 * p50_ms},
        "refused": refused,
        "timed_out": timed_out,
        "audio_seconds_per_wall_second": 3.0,
        "wall_seconds": 30.0,
    }


def test_the_curve_the_docs_cite_is_a_bench_load_file():
    curve = LoadCurve.from_json(DEFAULT_CURVE)
    assert [p.clients for p in curve.points] == [1, 2, 4, 8, 16]
    assert curve.machine["cores"] == 2
    # Measured: 4 clients all spoke; at 8, 3 turns were refused.
    assert curve.served_at_once().clients == 4


def test_served_at_once_is_the_most_clients_with_every_turn_spoken(tmp_path: Path):
    path = tmp_path / "load.json"
    rows = [load_row(1, 900), load_row(4, 1200), load_row(8, 1500, refused=2), load_row(2, 1000)]
    path.write_text(json.dumps({"machine": {}, "loads": rows}))
    curve = LoadCurve.from_json(path)
    assert curve.single().clients == 1  # sorted by clients
    assert curve.served_at_once().clients == 4
    # 4 clients x 3 turns in 30 s: 10 s a turn. A conversation's turn cycle of 25 s asks the
    # engine for 2.5x less audio per second: 10 such conversations.
    assert curve.served_at_once().turn_s == pytest.approx(10.0)
    assert curve.conversations_per_server(turn_cycle_s=25.0) == pytest.approx(10.0)
    rows[1] = load_row(4, 1200, timed_out=1)
    path.write_text(json.dumps({"machine": {}, "loads": rows}))
    assert LoadCurve.from_json(path).served_at_once().clients == 2


def test_a_file_that_is_not_a_load_curve_is_refused_with_its_name(tmp_path: Path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"figures": {}}))
    with pytest.raises(ValueError, match=r"other\.json is not a bench load"):
        LoadCurve.from_json(path)


def test_one_client_hears_the_first_window_after_its_text_and_the_fixed_part():
    server = CpuServer(engine_s_per_audio_s=0.2, fixed_s=0.3)
    result = simulate_clients(server, [ANSWER], clients=1, turns=1)
    first_window = 1.5 * 0.2 * STREAMED_FIRST_SHARE
    assert result.first_audio_p50_s == pytest.approx(0.9 + first_window + 0.3)
    assert result.refused == 0


def test_a_new_answer_is_refused_only_past_the_engines_load():
    # Two answers at once: (1 + 1) x 1.0 engine-seconds per audio second is over 1.5: the
    # second to ask is refused; at 0.5 both fit.
    slow = simulate_clients(CpuServer(1.0, 0.0), [ANSWER], clients=2, turns=1)
    fast = simulate_clients(CpuServer(0.5, 0.0), [ANSWER], clients=2, turns=1)
    assert (slow.refused, fast.refused) == (1, 0)
    # One alone is never refused, however slow the engine.
    assert simulate_clients(CpuServer(5.0, 0.0), [ANSWER], clients=1, turns=3).refused == 0


def test_a_new_answer_goes_before_later_chunks_whose_listeners_have_audio():
    # Two answers are under way (their listeners have seconds queued, their later chunks wait
    # for the engine) when a third question comes: earliest deadline first, its first chunk
    # waits for at most the step on the engine, not for the others' queued chunks.
    late = [Chunk(3.0, 1.5, 0), *ANSWER[1:]]
    server = CpuServer(0.3, 0.0, max_load=10.0)
    result = simulate_clients(server, [ANSWER, ANSWER, late], clients=3, turns=1)
    alone = simulate_clients(server, [late], clients=1, turns=1)
    longest_step = 4.0 * 0.3
    assert result.first_audio_p95_s <= alone.first_audio_p50_s + longest_step


def test_the_model_is_fitted_to_the_single_clients_measured_first_audio(tmp_path: Path):
    path = tmp_path / "load.json"
    rows = [load_row(1, 1400), load_row(4, 2400)]
    path.write_text(json.dumps({"machine": {}, "loads": rows, "turns_per_client": 3}))
    curve = LoadCurve.from_json(path)
    server = CpuServer.from_curve(curve, [ANSWER])
    assert server.engine_s_per_audio_s == pytest.approx(1 / 3.0)
    rows_compared = compare(curve, server, [ANSWER])
    assert rows_compared[0]["model"]["first_audio_p50_s"] == pytest.approx(1.4, abs=0.01)
    assert rows_compared[1]["measured"]["first_audio_p50_s"] == pytest.approx(2.4)
    # More clients on the same engine: never sooner.
    assert (
        rows_compared[1]["model"]["first_audio_p95_s"]
        >= rows_compared[0]["model"]["first_audio_p95_s"]
    )
