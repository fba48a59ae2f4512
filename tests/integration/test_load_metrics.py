"""The speech server reports its own load for autoscaling (``speech_server.load_metrics``): open
bidirectional sessions and the engine's busy share, and each answer's first audio for the
endpoint's latency alarm, through boto3's real CloudWatch client (moto behind it), from the real
app on a real port."""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
import time

import boto3
import httpx
import pytest
from conftest import start_server
from speech_standin import ToneEngine
from websockets.exceptions import ConnectionClosedOK
from websockets.sync.client import connect

from speech_server.load_metrics import (
    ENGINE_BUSY,
    FIRST_AUDIO,
    MAX_DISTINCT_VALUES,
    NAMESPACE,
    OPEN_SESSIONS,
    LoadGauge,
    LoadReporter,
    MetricsTarget,
    cloudwatch_publisher,
    metric_data,
    values_with_counts,
)

TARGET = MetricsTarget("voicewire-kokoro-82m", "AllTraffic", "us-east-1", period_seconds=0.5)


def statistics(metric: str, statistic: str) -> list[float]:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    now = datetime.datetime.now(datetime.UTC)
    answer = cloudwatch.get_metric_statistics(
        Namespace=NAMESPACE,
        MetricName=metric,
        Dimensions=TARGET.dimensions,
        StartTime=now - datetime.timedelta(minutes=5),
        EndTime=now + datetime.timedelta(minutes=1),
        Period=60,
        Statistics=[statistic],
    )
    return [point[statistic] for point in answer["Datapoints"]]


async def test_a_period_publishes_open_sessions_as_a_statistic_set_and_the_busy_share(aws):
    busy = [0.0]
    gauge = LoadGauge(busy_seconds=lambda: busy[0])
    published = threading.Event()
    send = cloudwatch_publisher(TARGET)

    def publish(data):
        send(data)
        published.set()

    with gauge.session(), gauge.session():
        running = asyncio.create_task(LoadReporter(gauge, TARGET, publish, 0.02).run())
        await asyncio.sleep(0.1)  # the period has begun
        busy[0] = 0.25  # a quarter second of engine time within the half-second period
        assert await asyncio.to_thread(published.wait, 5)
    running.cancel()
    assert gauge.open_sessions == 0
    assert statistics(OPEN_SESSIONS, "Maximum") == [2.0]
    (busy_percent,) = statistics(ENGINE_BUSY, "Maximum")
    assert 35 <= busy_percent <= 50  # 0.25 s of a period of 0.5 s, and a sample's slack


async def test_a_failing_cloudwatch_is_logged_once_and_never_stops_the_reporter(caplog):
    calls = []
    third = threading.Event()

    def refuse(data):
        calls.append(data)
        if len(calls) == 3:
            third.set()
        raise RuntimeError("AccessDenied: not authorized to perform cloudwatch:PutMetricData")

    running = asyncio.create_task(LoadReporter(LoadGauge(), TARGET, refuse, 0.02).run())
    assert await asyncio.to_thread(third.wait, 5)
    running.cancel()
    warnings = [r for r in caplog.records if "load metrics not published" in r.getMessage()]
    assert len(warnings) == 1 and "AccessDenied" in warnings[0].getMessage()


def test_half_configured_metrics_are_refused_and_off_is_the_default():
    assert MetricsTarget.from_env({}) is None
    with pytest.raises(ValueError, match="needs VOICEWIRE_VARIANT_NAME"):
        MetricsTarget.from_env(
            {"VOICEWIRE_LOAD_METRICS": "cloudwatch", "VOICEWIRE_ENDPOINT_NAME": "voicewire-x"}
        )
    with pytest.raises(ValueError, match="'cloudwatch' or 'off'"):
        MetricsTarget.from_env({"VOICEWIRE_LOAD_METRICS": "emf"})


def test_the_server_counts_its_sessions_and_engine_time_and_publishes_them(aws):
    engine = ToneEngine(seconds_per_chunk=0.3)
    server = start_server(lambda: engine, metrics=TARGET)

    def ping() -> dict:
        return httpx.get(f"{server.base_url}/ping").json()

    try:
        assert ping()["open_sessions"] == 0
        with connect(server.ws_url) as session:
            session.send(json.dumps({"text": "Hello there, this is a test.", "request_id": "r"}))
            # A later sentence of the same answer: no listener waits on it, so not counted.
            session.send(json.dumps({"text": "And more.", "request_id": "s", "fast_start": False}))
            completes = []
            while len(completes) < 2:
                frame = session.recv(timeout=10)
                if isinstance(frame, str) and json.loads(frame)["type"] == "synthesis_complete":
                    completes.append(json.loads(frame))
            during = ping()
            deadline = time.monotonic() + 10
            while not statistics(OPEN_SESSIONS, "Maximum") and time.monotonic() < deadline:
                time.sleep(0.1)
        assert during["open_sessions"] == 1 and during["engine_busy_seconds"] >= 0.3
        deadline = time.monotonic() + 5
        while ping()["open_sessions"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        server.stop()
    assert max(statistics(OPEN_SESSIONS, "Maximum")) == 1.0
    assert max(statistics(ENGINE_BUSY, "Maximum")) > 10.0
    # One answer, one first-audio figure: the one its synthesis_complete reported.
    assert sum(statistics(FIRST_AUDIO, "SampleCount")) == 1
    (first_audio,) = statistics(FIRST_AUDIO, "Maximum")
    assert first_audio == round(completes[0]["first_audio_ms"]) >= 300  # a 0.3 s chunk


def test_first_audio_goes_as_values_with_counts_that_cloudwatch_takes(aws):
    """Percentiles need values, not a statistic set; a busy minute's many distinct figures are
    rounded coarser to fit PutMetricData's 150 values per datum, and none is lost."""
    figures = [100.4, 100.4, 99.6, 250.0] + [300 + n * 0.7 for n in range(1000)]
    values, counts = values_with_counts(figures)
    assert len(values) <= MAX_DISTINCT_VALUES and sum(counts) == len(figures)
    assert values == sorted(values) and all(v % 10 == 0 for v in values)  # 10 ms steps
    assert values_with_counts([100.4, 100.4, 99.6]) == ([100.0], [3.0])
    data = metric_data(TARGET, [1], 10.0, figures)
    assert [d["MetricName"] for d in data] == [OPEN_SESSIONS, ENGINE_BUSY, FIRST_AUDIO]
    assert data[-1]["Unit"] == "Milliseconds"
    cloudwatch_publisher(TARGET)(data)  # moto checks the shape as CloudWatch does
    assert sum(statistics(FIRST_AUDIO, "SampleCount")) == len(figures)
    # A minute that answered nothing sends no figure: the alarm sees missing data, not a zero.
    assert FIRST_AUDIO not in [d["MetricName"] for d in metric_data(TARGET, [1], 0.0)]


def test_a_session_idle_past_the_workers_keep_time_is_closed_and_uncounted():
    """The worker keeps a finished session up to 55 s for its next turn; one idle longer (held
    by a frozen or gone Lambda environment) is closed, so OpenSessions counts conversations."""
    server = start_server(lambda: ToneEngine(), session_idle_seconds=0.6)

    def ping() -> dict:
        return httpx.get(f"{server.base_url}/ping").json()

    try:
        with connect(server.ws_url) as idle, connect(server.ws_url) as talking:
            assert ping()["open_sessions"] == 2
            for _ in range(4):  # a message every 0.3 s keeps a session open
                time.sleep(0.3)
                talking.send(json.dumps({"type": "ping"}))
                assert json.loads(talking.recv(timeout=5))["type"] == "pong"
            with pytest.raises(ConnectionClosedOK):
                idle.recv(timeout=5)
            assert (idle.close_code, idle.close_reason) == (1000, "idle for 0.6 s")
            assert ping()["open_sessions"] == 1
    finally:
        server.stop()
