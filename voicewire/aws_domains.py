"""Where AWS's endpoints live in a Region: ``amazonaws.com``, or ``amazonaws.com.cn`` in the China
Regions (GovCloud shares the first). Taken from botocore's partition data rather than written
into URLs, so the same code reaches SageMaker's front door and API Gateway's management API in
every partition."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import botocore.loaders

DEFAULT_SUFFIX = "amazonaws.com"


@cache
def _partitions() -> list[dict[str, Any]]:
    return list(botocore.loaders.create_loader().load_data("endpoints")["partitions"])


@cache
def dns_suffix(region: str) -> str:
    """The DNS suffix of ``region``'s partition (botocore's endpoint data: a Region it lists,
    else the partition whose Region pattern matches; ``amazonaws.com`` for an unknown one)."""
    partitions = _partitions()
    for partition in partitions:
        if region in partition.get("regions", {}):
            return str(partition["dnsSuffix"])
    for partition in partitions:
        if re.match(partition.get("regionRegex", "$^"), region):
            return str(partition["dnsSuffix"])
    return DEFAULT_SUFFIX
