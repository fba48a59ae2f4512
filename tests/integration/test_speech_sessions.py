"""The worker's kept speech session: reused only when it is sure to work, over the real
SageMaker path (SDK, local runtime, speech server)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import start_runtime_for

from functions.adapters.speech_sessions import KeptSpeechSession, SessionPolicy
from voicewire.speech_link import SpeechSession, SpeechStreamError


def keeper(runtime, **policy) -> KeptSpeechSession:
    return KeptSpeechSession(runtime.session, SessionPolicy(**policy))


async def test_a_clean_session_is_reused_by_the_next_turn(sagemaker_runtime):
    sessions = keeper(sagemaker_runtime)
    counters = sagemaker_runtime.runtime.counters
    opened_before = counters.streams_opened
    first = await sessions.acquire()
    audio, _ = await first.session.synthesize("First turn.")
    await sessions.release(first.session, reusable=True)
    second = await sessions.acquire()
    try:
        assert (first.origin, second.origin) == ("opened", "reused")
        assert second.session is first.session and not second.stale_discarded
        assert counters.streams_opened == opened_before + 1  # one stream for both turns
        more, completed = await second.session.synthesize("Second turn, same stream.")
        assert completed.status == "complete" and audio and more
    finally:
        await sessions.release(second.session, reusable=False)
    assert not second.session.is_open  # not reusable: closed, not kept


@pytest.mark.parametrize(
    ("reusable", "busy", "keep_warm"),
    [(False, False, True), (True, True, True), (True, False, False)],
    ids=["turn-not-complete", "answer-pending", "reuse-off"],
)
async def test_a_session_is_kept_only_when_clean_and_allowed(
    sagemaker_runtime, reusable, busy, keep_warm
):
    sessions = keeper(sagemaker_runtime, keep_warm=keep_warm)
    first = await sessions.acquire()
    if busy:
        await first.session.send("Still being answered when the turn ends.")
    await sessions.release(first.session, reusable=reusable)
    second = await sessions.acquire()
    try:
        assert second.origin == "opened" and second.session is not first.session
        assert not first.session.is_open
    finally:
        await sessions.release(second.session, reusable=False)


async def test_a_session_idle_too_long_is_replaced(sagemaker_runtime):
    sessions = keeper(sagemaker_runtime, max_idle_seconds=0.0)
    first = await sessions.acquire()
    await sessions.release(first.session, reusable=True)
    await asyncio.sleep(0.01)
    second = await sessions.acquire()
    try:
        assert second.origin == "opened" and second.stale_discarded
        assert not first.session.is_open
    finally:
        await sessions.release(second.session, reusable=False)


async def test_a_kept_session_whose_container_went_away_is_replaced(
    onnx_engine, server_factory, tmp_path
):
    """The container behind a kept session stops (as when SageMaker replaces an instance);
    the next turn gets a new session on the container that took its place."""
    first_server = server_factory(lambda: onnx_engine)
    local = start_runtime_for(first_server.base_url.replace("http://", "ws://"), tmp_path)
    try:
        sessions = keeper(local)
        first = await sessions.acquire()
        await first.session.synthesize("Before the container goes.")
        await sessions.release(first.session, reusable=True)
        first_server.server.should_exit = True
        async with asyncio.timeout(10):
            await first.session.wait_ended()  # the runtime reports a model stream error
        second_server = server_factory(lambda: onnx_engine)
        local.runtime.endpoints = {"kokoro-82m": second_server.base_url.replace("http", "ws")}
        second = await sessions.acquire()
        audio, completed = await second.session.synthesize("After.")
        await sessions.release(second.session, reusable=False)
    finally:
        local.running.stop()
    assert second.origin == "opened" and second.stale_discarded
    assert completed.status == "complete" and audio


class SilentTransport:
    """A connection that opens and takes messages but never answers (a half-dead peer)."""

    target = "a silent peer"

    async def connect(self) -> None:
        self.closed = asyncio.Event()

    async def send_message(self, payload: bytes) -> None:
        pass

    async def receive(self) -> str | bytes | None:
        await self.closed.wait()
        return None

    async def close(self, graceful: bool = True) -> None:
        self.closed.set()


async def test_a_kept_session_that_does_not_answer_a_ping_is_replaced(sagemaker_runtime):
    silent = SpeechSession(SilentTransport())
    opened = [silent]
    sessions = KeptSpeechSession(
        lambda: opened.pop() if opened else sagemaker_runtime.session(),
        SessionPolicy(probe_seconds=0.2),
    )
    first = await sessions.acquire()
    assert first.session is silent
    await sessions.release(silent, reusable=True)
    second = await sessions.acquire()
    try:
        assert second.origin == "opened" and second.stale_discarded
        assert second.session is not silent and not silent.is_open
        assert second.ready_ms >= 200  # it waited for the probe, then opened
    finally:
        await sessions.release(second.session, reusable=False)


async def test_a_session_that_cannot_open_is_a_typed_error(sagemaker_runtime):
    """SageMaker refuses the stream: the transport sent before the answer, so the refusal is
    the first request's error (``connect_failed``), and the session is not kept."""
    sessions = keeper(sagemaker_runtime)
    sessions._open_session = lambda: sagemaker_runtime.session("no-such-endpoint")
    ready = await sessions.acquire()
    request_id = await ready.session.send("Never spoken.")
    with pytest.raises(SpeechStreamError) as raised:
        async with asyncio.timeout(30):
            async for _ in ready.session.events(request_id):
                pass
    await sessions.release(ready.session, reusable=True)
    assert raised.value.code == "connect_failed" and "not found" in raised.value.message
    assert not ready.session.is_open and sessions._kept is None


async def test_calling_off_an_opening_leaves_nothing_open(sagemaker_runtime):
    sessions = keeper(sagemaker_runtime)
    opened: list[SpeechSession] = []
    connecting = asyncio.Event()

    def open_session() -> SpeechSession:
        opened.append(sagemaker_runtime.session())
        connect = opened[-1]._transport.connect

        async def noted_connect() -> None:
            connecting.set()
            await connect()

        opened[-1]._transport.connect = noted_connect
        return opened[-1]

    sessions._open_session = open_session
    acquiring = asyncio.create_task(sessions.acquire())
    async with asyncio.timeout(10):
        await connecting.wait()  # under way: the client is connecting
    acquiring.cancel()
    with pytest.raises(asyncio.CancelledError):
        await acquiring
    assert len(opened) == 1 and not opened[0].is_open
