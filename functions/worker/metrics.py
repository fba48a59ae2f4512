"""The turn's CloudWatch metrics (EMF, through Powertools): one count per ending, the timings,
how the speech session was obtained. ``stacks/pipeline_monitoring.py`` alarms on them."""

from __future__ import annotations

from aws_lambda_powertools.metrics import MetricUnit

from functions.adapters.speech_sessions import ReadySession
from functions.observability import metrics
from voicewire.client_protocol import Timings


def publish_turn_metrics(status: str, timings: Timings, ready: ReadySession | None) -> None:
    metrics.add_metric(name=f"Turns_{status}", unit=MetricUnit.Count, value=1)
    for name, value in (
        ("TimeToFirstAudio", timings.first_audio_ms),
        ("TimeToFirstText", timings.first_text_ms),
        ("TurnTotal", timings.total_ms),
    ):
        if value is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Milliseconds, value=value)
    if ready is not None:
        metrics.add_metric(
            name="SpeechSessionReady", unit=MetricUnit.Milliseconds, value=ready.ready_ms
        )
        metrics.add_metric(name=f"SpeechSessions_{ready.origin}", unit=MetricUnit.Count, value=1)


def publish_count(name: str) -> None:
    """One occurrence of something an operator alarms on (a dropped job, a lost record)."""
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
