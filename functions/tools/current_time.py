"""``current_time``: the local time in a time zone, from the IANA database (``zoneinfo``).

The database comes from the system or, where it has none (a Lambda image), from the ``tzdata``
wheel; a zone neither knows is an error the model can say.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tzdata  # noqa: F401  # zoneinfo's database where the system has none: imported, so bundled
from pydantic import BaseModel, Field

from functions.tools.registry import Tool


class CurrentTimeInput(BaseModel):
    time_zone: str = Field(
        "UTC",
        min_length=1,
        max_length=64,
        description="An IANA time zone such as Europe/Paris or America/New_York.",
    )


def spoken_time(moment: datetime) -> str:
    """``3:07 PM on Thursday, December 3``: what a voice says (no leading zero, no seconds)."""
    hour = moment.strftime("%I").lstrip("0")
    return f"{hour}:{moment:%M %p} on {moment:%A, %B} {moment.day}"


def current_time_tool(latency_seconds: float = 0.0, now: type[datetime] = datetime) -> Tool:
    """The tool; ``latency_seconds`` delays every answer (``voicewire up --tool-latency-ms``)."""

    async def current_time(given: CurrentTimeInput) -> dict[str, str]:
        if latency_seconds:
            await asyncio.sleep(latency_seconds)
        try:
            zone = ZoneInfo(given.time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{given.time_zone!r} is not a known IANA time zone") from None
        moment = now.now(UTC).astimezone(zone)
        return {
            "time_zone": given.time_zone,
            "local_time": moment.isoformat(timespec="seconds"),
            "spoken": spoken_time(moment),
        }

    return Tool(
        "current_time",
        "The current local date and time in a time zone. Use it whenever the user asks what "
        "time or day it is somewhere.",
        CurrentTimeInput,
        current_time,
    )
