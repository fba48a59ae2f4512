"""Powertools logger and metrics shared by the handlers (one namespace, one service)."""

from aws_lambda_powertools import Logger, Metrics

logger = Logger(service="voicewire")
metrics = Metrics(namespace="voicewire", service="voicewire")
