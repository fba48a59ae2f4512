"""AWS's endpoints in every partition: the URLs the functions and the speech link build come from
botocore's partition data, not from ``amazonaws.com`` written into them (the China Regions'
endpoints end in ``amazonaws.com.cn``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from functions.events import MessageEvent
from functions.handlers.messages import callback_url
from voicewire.aws_domains import dns_suffix
from voicewire.speech_link.sagemaker_client import runtime_endpoint

EVENTS = Path(__file__).resolve().parents[2] / "events" / "apigw"


@pytest.mark.parametrize(
    ("region", "suffix"),
    [
        ("us-east-1", "amazonaws.com"),
        ("cn-north-1", "amazonaws.com.cn"),
        ("us-gov-west-1", "amazonaws.com"),
        ("cn-east-9", "amazonaws.com.cn"),
    ],
)
def test_each_partitions_endpoints(region, suffix):
    assert dns_suffix(region) == suffix
    assert runtime_endpoint(region) == f"https://runtime.sagemaker.{region}.{suffix}:8443"


def test_the_management_api_of_a_china_region_stage():
    event = MessageEvent.model_validate(json.loads((EVENTS / "ask_bidi.json").read_text()))
    settings = SimpleNamespace(callback_url=None, region="cn-northwest-1")
    url = callback_url(event, SimpleNamespace(settings=settings))  # type: ignore[arg-type]
    api, stage = event.request_context.api_id, event.request_context.stage
    assert url == f"https://{api}.execute-api.cn-northwest-1.amazonaws.com.cn/{stage}"
