"""The speech server reports its own load for autoscaling (``speech_server.load_metrics``): open
bidirectional sessions and the engine's busy share, through boto3's real CloudWatch client (moto
behind it), from the real app on a real port."""

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
    NAMESPACE,
    OPEN_SESSIONS,
    LoadGauge,
    LoadReporter,
    MetricsTarget,
    cloudwatch_publisher,
)

TARGET = MetricsTarget("voicewire-kokoro-82m", "AllTraffic", "us-east-1", period_seconds=0.5)


def statistics(metric: str, statistic: str) -> list[float]:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    now = datetime.datetime.now(datetime.UTC)
    answer = cloudwatch.get_metric_statistics(
        Namespace=NAMESPACE, MetricName=metric, Dimensions=TARGET.dimensions,
        StartTime=now - datetime.timedelta(minutes=5), EndTime=now + datetime.timedelta(minutes=1),
        Period=60, Statistics=[statistic],
    )  # fmt: skip
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
            while True:
                frame = session.recv(timeout=10)
                if isinstance(frame, str) and json.loads(frame)["type"] == "synthesis_complete":
                    break
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
