"""Frames the local SageMaker runtime cuts at random come back whole through the real client."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator

import pytest
from conftest import LocalRuntime, start_runtime_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.server import ServerConnection, serve

from voicewire_tools.local_stack.partial_parts import FragmentPolicy

# Frames as a container sends them: text (any Unicode, multi-byte characters included) or bytes.
FRAMES = st.lists(st.one_of(st.text(max_size=40), st.binary(max_size=300)), max_size=8)


async def answer_frames(websocket: ServerConnection) -> None:
    """A container that answers ``{"frames": [...]}`` with those frames: ``{"text": ...}`` as a
    text frame, ``{"bytes": base64}`` as a binary one."""
    async for message in websocket:
        for frame in json.loads(message)["frames"]:
            if "text" in frame:
                await websocket.send(frame["text"])
            else:
                await websocket.send(base64.b64decode(frame["bytes"]))


@pytest.fixture(scope="module")
async def frames_runtime(tmp_path_factory) -> AsyncIterator[LocalRuntime]:
    async with serve(answer_frames, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        local = start_runtime_for(f"ws://127.0.0.1:{port}", tmp_path_factory.mktemp("tls"))
        yield local
        await asyncio.to_thread(local.running.stop)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FRAMES, st.integers(0, 2**32 - 1))
async def test_frames_cut_by_the_runtime_come_back_whole(frames_runtime, frames, seed):
    """The production transport against the runtime's own random cuts (``fragment_seed``: a
    failure here replays with the seed hypothesis reports)."""
    runtime = frames_runtime.runtime
    runtime.fragment_policy = FragmentPolicy.random(runtime.limits.max_response_part_bytes, seed)
    message = {
        "frames": [
            {"text": frame}
            if isinstance(frame, str)
            else {"bytes": base64.b64encode(frame).decode()}
            for frame in frames
        ]
    }
    transport = frames_runtime.transport()
    await transport.connect()
    try:
        await transport.send_message(json.dumps(message).encode())
        async with asyncio.timeout(20):
            received = [await transport.receive() for _ in frames]
    finally:
        await transport.close()
    assert received == frames
