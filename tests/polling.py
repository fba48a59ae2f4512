"""Waiting, in a test, for something another thread or task changes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], object], what: str, seconds: float = 10) -> None:
    """Wait until ``condition()`` is true (the gateway changes it on its own threads); fail
    naming ``what`` after ``seconds``."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        await asyncio.sleep(0.005)
