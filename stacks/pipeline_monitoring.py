"""What an operator of the voice pipeline watches: the worker's EMF metrics on a dashboard, and
alarms on what means users are not being answered.

The worker publishes (``functions/worker/metrics.py``), in the ``voicewire`` namespace with the
dimensions ``mode`` (bidi, batch, speak) and ``service``: ``TimeToFirstAudio``,
``TimeToFirstText``, ``TurnTotal``, ``SpeechSessionReady`` (ms), ``Turns_<status>``,
``SpeechSessions_<origin>``, ``WorkerJobsDropped``, ``TurnRecordsFailed``,
``HistoryWritesFailed`` (counts).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

NAMESPACE = "voicewire"
SERVICE = "voicewire"
MODES = ("bidi", "batch", "speak")
STATUSES = ("complete", "cancelled", "failed")
PERIOD = Duration.minutes(5)


def turn_metric(name: str, mode: str, statistic: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"mode": mode, "service": SERVICE},
        statistic=statistic,
        period=PERIOD,
        label=f"{name} {mode} {statistic}",
    )


def summed(name: str, label: str) -> cloudwatch.MathExpression:
    """One count over every mode (missing data as 0: a quiet mode is not an error)."""
    # Ids unique across a graph that shows several of these sums.
    metrics = {f"{name.lower()}_{mode}": turn_metric(name, mode, "Sum") for mode in MODES}
    return cloudwatch.MathExpression(
        expression=" + ".join(f"FILL({key}, 0)" for key in metrics),
        using_metrics=metrics,
        label=label,
        period=PERIOD,
    )


class PipelineMonitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        worker: lambda_.IFunction,
        first_audio_alarm_ms: float = 3000.0,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name="voicewire")
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Time to first audio (ms)",
                left=[
                    turn_metric("TimeToFirstAudio", mode, statistic)
                    for mode in MODES
                    for statistic in ("p50", "p90")
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Turns by status",
                left=[summed(f"Turns_{status}", status) for status in STATUSES],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Speech session ready (ms) and duplicate jobs dropped",
                left=[turn_metric("SpeechSessionReady", mode, "p90") for mode in MODES],
                right=[summed("WorkerJobsDropped", "jobs dropped")],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Worker errors and throttles",
                left=[worker.metric_errors(period=PERIOD), worker.metric_throttles(period=PERIOD)],
                width=12,
            ),
        )
        self.alarms = [
            cloudwatch.Alarm(
                self,
                "FailedTurns",
                metric=summed("Turns_failed", "failed turns"),
                threshold=5,
                evaluation_periods=1,
                alarm_description="5 or more turns failed in 5 minutes",
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ),
            cloudwatch.Alarm(
                self,
                "SlowFirstAudio",
                metric=turn_metric("TimeToFirstAudio", "bidi", "p90"),
                threshold=first_audio_alarm_ms,
                evaluation_periods=3,
                alarm_description="p90 time to first audio of bidi turns is slow for 15 minutes",
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ),
            cloudwatch.Alarm(
                self,
                "WorkerErrors",
                metric=worker.metric_errors(period=PERIOD),
                threshold=1,
                evaluation_periods=1,
                alarm_description="The worker raised: a turn was left to Lambda's retries",
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ),
            cloudwatch.Alarm(
                self,
                "WorkerThrottles",
                metric=worker.metric_throttles(period=PERIOD),
                threshold=1,
                evaluation_periods=1,
                alarm_description="Workers were throttled: turns wait in Lambda's queue",
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ),
            cloudwatch.Alarm(
                self,
                "TurnRecordsFailed",
                metric=summed("TurnRecordsFailed", "records failed"),
                threshold=1,
                evaluation_periods=1,
                alarm_description="A turn's end could not be written to DynamoDB",
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ),
        ]
