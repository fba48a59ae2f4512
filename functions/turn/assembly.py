"""How a turn is put together from the settings, for every front door: the agent that answers
an ask, the ``TurnRunner`` with the settings' limits, the speech session taken and given back.
What the conversation keeps of the turn is ``functions.conversation``'s.

The Lambda worker (``functions.worker.run``) and the AgentCore Runtime app
(``functions.agentcore``) both build their turns here: one implementation, two front doors.
Only what surrounds the turn differs (a claim and a DynamoDB record there, an in-memory session
here).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from functions.adapters.bedrock_request import converse_request
from functions.adapters.relay import Relay
from functions.adapters.speech_sessions import (
    KeptSpeechSession,
    ReadySession,
    release_or_abort,
)
from functions.agent.events import AgentTurn
from functions.agent.loop import BedrockAgent
from functions.settings import Settings
from functions.turn import (
    VOICEWIRE_CHUNKING,
    Chunking,
    SpeechSource,
    TurnOutcome,
    TurnRunner,
    TurnSpec,
)
from functions.wiring import Adapters
from voicewire.client_protocol import ClientError
from voicewire.speech_link import SpeechSession


def answering_agent(adapters: Adapters, history: list[dict[str, Any]], prompt: str) -> AgentTurn:
    """The agent that answers ``prompt`` after ``history`` (the settings' ``agent``: the
    built-in loop over Bedrock's converse_stream, or a Strands agent), with the settings' tools."""
    settings = adapters.settings
    if settings.agent.startswith("strands"):
        from functions.agent.strands_agent import StrandsAgentTurn, agent_factory

        return StrandsAgentTurn(
            adapters.llm_client(),
            settings.bedrock_model_id,
            history,
            prompt,
            settings.system_prompt,
            adapters.tools,
            settings.max_output_tokens,
            settings.max_tool_rounds,
            agent_factory(settings.agent),
            tool_result_status=True if settings.llm == "replay" else "auto",
        )
    request = converse_request(
        settings.bedrock_model_id,
        history,
        prompt,
        settings.system_prompt,
        settings.max_output_tokens,
        adapters.tools.tool_config(),
        cache_prompt=settings.prompt_caching,
        latency=settings.bedrock_latency,
    )
    return BedrockAgent(adapters.llm_client(), request, adapters.tools, settings.max_tool_rounds)


def turn_runner(
    spec: TurnSpec,
    relay: Relay,
    speech: SpeechSource,
    cancelled: asyncio.Event,
    settings: Settings,
    agent: AgentTurn | None = None,
    text: str | None = None,
    stop_failure: Callable[[], ClientError | None] = lambda: None,
    chunking: Chunking = VOICEWIRE_CHUNKING,
) -> TurnRunner:
    """The turn, with the settings' fillers, tool data, speech timeout and audio limit, cut as
    ``chunking`` says (the wiring's: voicewire's, or a benchmark's seed pipeline)."""
    return TurnRunner(
        spec,
        relay,
        speech,
        cancelled,
        agent=agent,
        text=text,
        stop_failure=stop_failure,
        tool_filler_seconds=settings.tool_filler_seconds or None,
        show_tool_data=settings.show_tool_data,
        speech_timeout=settings.speech_chunk_timeout_seconds,
        max_speech_seconds=settings.max_speech_seconds_per_turn,
        chunking=chunking,
    )


async def session_of(acquiring: asyncio.Task[ReadySession]) -> SpeechSession:
    return (await acquiring).session


async def hand_back(
    sessions: KeptSpeechSession,
    acquiring: asyncio.Task[ReadySession],
    speech: asyncio.Task[SpeechSession],
    outcome: TurnOutcome | None,
    runner: TurnRunner | None,
) -> ReadySession | None:
    """Keep the session for the next turn if this one left it clean, else close it. Returns how
    the session was obtained, if it was.

    An opening still under way when the turn ends (a turn cancelled early) is waited for, not
    called off: the client already has its turn_end, the wait is bounded by the open timeout,
    the session is clean and the next turn can use it; and cancelling the CRT client mid-connect
    makes awscrt resolve a cancelled future from its own thread."""
    await asyncio.gather(acquiring, speech, return_exceptions=True)
    if acquiring.cancelled() or acquiring.exception() is not None:
        return None
    ready = acquiring.result()
    completed = outcome is not None and outcome.status == "complete"
    unused = runner is not None and not runner.used_speech
    await release_or_abort(sessions, ready.session, reusable=completed or unused)
    return ready
