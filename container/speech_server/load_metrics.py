"""What loads this instance, published for the endpoint's autoscaling.

SageMaker's ``InvocationsPerInstance`` counts invocations, and a bidirectional session is one
invocation however long it lasts and however much it asks: warm, busy sessions go uncounted and
the fleet would not grow when it should. So the container reports its own load, each minute:

- ``OpenSessions``: bidirectional sessions open, sampled every second (a statistic set: the
  minute's average, minimum and maximum);
- ``EngineBusy``: the percentage of the minute the synthesis thread spent in the engine. The
  engine is one thread per instance (``speech_server.synthesis``), so this is how close the
  instance is to the cliff where every listener's audio queues (docs/capacity.md);
- ``FirstAudio``: each answer's first audio (a fast-start request, whose listener waits), in
  milliseconds from the server starting on it to its first audio frame, queueing behind other
  sessions included; sent as values with counts, so CloudWatch gives percentiles. The endpoint's
  latency alarm watches its p90: SageMaker's own ``ModelLatency`` times an invocation, and a
  bidirectional session is one invocation however many answers it carries.

Every instance publishes under the same dimensions (``EndpointName``, ``VariantName``), so the
``Average`` across instances is the per-instance figure target tracking needs; stacks/speech.py
scales on both. It goes out with ``cloudwatch:PutMetricData`` (the execution role may publish to
this namespace only): SageMaker documents no extraction of embedded-metric-format lines from an
endpoint's log stream, and a deployed container reaches CloudWatch by default
(docs/aws-facts.md). Publishing never touches speech: it runs on its own thread, and a failure
is logged, not raised.

Configured by the environment the endpoint stack sets: ``VOICEWIRE_LOAD_METRICS=cloudwatch``,
``VOICEWIRE_ENDPOINT_NAME``, ``VOICEWIRE_VARIANT_NAME``, ``VOICEWIRE_METRICS_REGION``; off
otherwise (a laptop). ``GET /ping`` shows the same figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

NAMESPACE = "voicewire/speech"
OPEN_SESSIONS = "OpenSessions"
ENGINE_BUSY = "EngineBusy"
FIRST_AUDIO = "FirstAudio"
# PutMetricData takes at most 150 distinct values per datum (CloudWatch API reference,
# MetricDatum.Values): a busy minute's figures are rounded coarser until they fit.
MAX_DISTINCT_VALUES = 150
PERIOD_SECONDS = 60.0  # CloudWatch's standard resolution, what target tracking evaluates
SAMPLE_SECONDS = 1.0


@dataclass
class LoadGauge:
    """The instance's load as it is now: sessions open, and the engine's busy time so far."""

    open_sessions: int = 0
    busy_seconds: Callable[[], float] = lambda: 0.0  # the synthesizer's, once the model loaded
    # The answers' first-audio figures since the last call (the synthesizer's, once loaded).
    take_first_audio_ms: Callable[[], list[float]] = list

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Counts one bidirectional session while it is open."""
        self.open_sessions += 1
        try:
            yield
        finally:
            self.open_sessions -= 1


@dataclass(frozen=True)
class MetricsTarget:
    endpoint_name: str
    variant_name: str
    region: str | None
    period_seconds: float = PERIOD_SECONDS

    @property
    def dimensions(self) -> list[dict[str, str]]:
        return [
            {"Name": "EndpointName", "Value": self.endpoint_name},
            {"Name": "VariantName", "Value": self.variant_name},
        ]

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> MetricsTarget | None:
        """Where to publish, or None when publishing is off; a half-configured one is an error."""
        kind = env.get("VOICEWIRE_LOAD_METRICS", "off")
        if kind == "off":
            return None
        if kind != "cloudwatch":
            raise ValueError(f"VOICEWIRE_LOAD_METRICS must be 'cloudwatch' or 'off', not {kind!r}")
        missing = [
            name
            for name in ("VOICEWIRE_ENDPOINT_NAME", "VOICEWIRE_VARIANT_NAME")
            if not env.get(name)
        ]
        if missing:
            raise ValueError(f"VOICEWIRE_LOAD_METRICS=cloudwatch needs {' and '.join(missing)}")
        return cls(
            env["VOICEWIRE_ENDPOINT_NAME"],
            env["VOICEWIRE_VARIANT_NAME"],
            env.get("VOICEWIRE_METRICS_REGION") or None,
            float(env.get("VOICEWIRE_LOAD_METRICS_PERIOD_SECONDS", PERIOD_SECONDS)),
        )


def metric_data(
    target: MetricsTarget,
    session_samples: list[int],
    busy_percent: float,
    first_audio_ms: Sequence[float] = (),
) -> list[dict[str, Any]]:
    """One period's figures as ``PutMetricData``'s ``MetricData`` (no ``FirstAudio`` datum in a
    minute that answered nothing: CloudWatch then has no data, which the alarm treats as fine)."""
    data = [
        {
            "MetricName": OPEN_SESSIONS,
            "Dimensions": target.dimensions,
            "StatisticValues": {
                "SampleCount": float(len(session_samples)),
                "Sum": float(sum(session_samples)),
                "Minimum": float(min(session_samples)),
                "Maximum": float(max(session_samples)),
            },
            "Unit": "Count",
        },
        {
            "MetricName": ENGINE_BUSY,
            "Dimensions": target.dimensions,
            "Value": round(min(100.0, busy_percent), 2),
            "Unit": "Percent",
        },
    ]
    if first_audio_ms:
        values, counts = values_with_counts(first_audio_ms)
        data.append(
            {
                "MetricName": FIRST_AUDIO,
                "Dimensions": target.dimensions,
                "Values": values,
                "Counts": counts,
                "Unit": "Milliseconds",
            }
        )
    return data


def values_with_counts(samples: Sequence[float]) -> tuple[list[float], list[float]]:
    """``samples`` as PutMetricData's ``Values`` and ``Counts``: whole milliseconds, or coarser
    steps (10, 100, ... ms) when a minute holds more distinct figures than a datum may carry."""
    step = 1.0
    while True:
        rounded = Counter(round(sample / step) * step for sample in samples)
        if len(rounded) <= MAX_DISTINCT_VALUES:
            ordered = sorted(rounded)
            return ordered, [float(rounded[value]) for value in ordered]
        step *= 10


class LoadReporter:
    """Samples the gauge and publishes a period's figures at the end of each period."""

    def __init__(
        self,
        gauge: LoadGauge,
        target: MetricsTarget,
        publish: Callable[[list[dict[str, Any]]], None],
        sample_every: float = SAMPLE_SECONDS,
    ) -> None:
        self.gauge, self.target, self.publish = gauge, target, publish
        self.period = target.period_seconds
        self.sample_every = min(sample_every, self.period / 10)
        self.published = 0  # periods published, for the log and the tests
        self._failing = False

    async def run(self) -> None:
        while True:
            started, busy_before = time.monotonic(), self.gauge.busy_seconds()
            samples: list[int] = []
            while not samples or time.monotonic() - started < self.period:
                await asyncio.sleep(self.sample_every)
                samples.append(self.gauge.open_sessions)
            elapsed = time.monotonic() - started
            busy = (self.gauge.busy_seconds() - busy_before) / elapsed * 100
            first_audio = self.gauge.take_first_audio_ms()
            await self._publish(metric_data(self.target, samples, busy, first_audio))

    async def _publish(self, data: list[dict[str, Any]]) -> None:
        try:
            await asyncio.to_thread(self.publish, data)
        except Exception as error:  # CloudWatch unreachable, throttled, denied: never fatal
            if not self._failing:
                logger.warning("load metrics not published (%s); retrying each minute", error)
            self._failing = True
            return
        if self._failing:
            logger.info("load metrics published again")
        self._failing = False
        self.published += 1


def cloudwatch_publisher(target: MetricsTarget) -> Callable[[list[dict[str, Any]]], None]:
    """``PutMetricData`` through boto3, to ``NAMESPACE`` (the client is made on first use, on
    the publishing thread)."""
    clients: list[Any] = []

    def publish(data: list[dict[str, Any]]) -> None:
        if not clients:
            import boto3

            clients.append(boto3.client("cloudwatch", region_name=target.region))
        clients[0].put_metric_data(Namespace=NAMESPACE, MetricData=data)

    return publish
