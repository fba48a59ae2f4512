"""Several producers, one consumer, true arrival order: how a bidi turn's text and audio tasks
feed the one lane that posts to the client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True, slots=True)
class AudioOut:
    """A piece of the turn's audio for the client (16-bit PCM; the relay frames it)."""

    pcm: bytes


# What the turn's one lane posts: audio, or a control frame (a pydantic model tagged by its
# ``type``: ``sentence``, ``words``, ``tool_start``...).
Item = AudioOut | BaseModel


async def in_arrival_order(
    queue: asyncio.Queue[Any], producers: list[Coroutine[Any, Any, None]]
) -> AsyncIterator[Item]:
    """Run the producers; yield what they queue in arrival order; re-raise their failures.

    Each producer's end is queued as ``None`` (a failure as the exception itself), so the
    consumer sees a failure in order with the items queued before it."""
    tasks = [asyncio.create_task(producer) for producer in producers]
    remaining = len(tasks)

    def finished(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            queue.put_nowait(task.exception())
        else:
            queue.put_nowait(None)

    for task in tasks:
        task.add_done_callback(finished)
    try:
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
