"""Powertools logger and metrics shared by the handlers (one namespace, one service)."""

import warnings

from aws_lambda_powertools import Logger, Metrics

logger = Logger(service="voicewire")
metrics = Metrics(namespace="voicewire", service="voicewire")

# A worker invocation that dies or is retried (Lambda runs it again) publishes no metric of its
# own, by design: the retry's turn does. Powertools warns on every such flush; its documentation
# says to filter the warning where empty flushes are expected.
warnings.filterwarnings("ignore", "No application metrics to publish")
