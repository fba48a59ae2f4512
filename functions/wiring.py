"""How the handlers reach the outside world: built once per Lambda container from the
environment, or handed in by the local stack and the tests (``use_adapters``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import boto3

from functions.adapters.bedrock_request import ConverseStreamClient, bedrock_client
from functions.adapters.connect_tickets import ConnectTickets
from functions.adapters.connections import Connections
from functions.adapters.conversation_table import TableConversation
from functions.adapters.frame_sink import management_client
from functions.adapters.speech_sessions import KeptSpeechSession, SessionPolicy
from functions.adapters.table_items import TableItems, dynamodb_client
from functions.adapters.turn_ledger import TurnLedger
from functions.settings import Settings, SettingsError
from functions.tools import ToolRegistry, sample_tools
from functions.tools.search_docs import DEFAULT_DOCS
from functions.turn import VOICEWIRE_CHUNKING, Chunking
from voicewire.speech_link import SpeechSession, open_speech_session


@dataclass
class Adapters:
    settings: Settings
    dynamodb: Any  # boto3 dynamodb *client* (thread-safe; a resource must not be shared)
    lambda_client: Any  # boto3 lambda client
    management_client_for: Callable[[str], Any]  # callback URL -> apigatewaymanagementapi client
    llm_client: Callable[[], ConverseStreamClient]
    speech_session: Callable[[], SpeechSession]
    token_secret: Callable[[], str]
    # The time tickets are checked at: the real clock, except when sample events are replayed
    # at the moment they were recorded (``voicewire replay``).
    clock: Callable[[], float] = time.time
    # How turns cut their text: voicewire's; the local stack hands in the seed's pipeline for
    # ``voicewire bench ttfa``'s baseline modes (``voicewire_tools.seed_pipeline``).
    chunking: Chunking = VOICEWIRE_CHUNKING
    _management_clients: dict[str, Any] = field(default_factory=dict)
    _tools: tuple[Settings, ToolRegistry] | None = None

    # The session table, one object per job over one ``TableItems`` (built once, with the
    # settings' table name when first used): what a handler needs names what it does.
    @cached_property
    def session_items(self) -> TableItems:
        return TableItems(self.dynamodb, self.settings.table_name)

    @cached_property
    def tickets(self) -> ConnectTickets:
        return ConnectTickets(self.session_items)

    @cached_property
    def connections(self) -> Connections:
        return Connections(self.session_items)

    @cached_property
    def turns(self) -> TurnLedger:
        return TurnLedger(self.session_items)

    def conversation(self, connection_id: str) -> TableConversation:
        """The connection's conversation, for the rules (``functions.conversation.rules``)."""
        return TableConversation(self.connections, self.turns, connection_id)

    @property
    def tools(self) -> ToolRegistry:
        """The tools the agent may call, as the settings name them (made again when the
        settings are replaced, as the local stack and the tests do)."""
        settings = self.settings
        if self._tools is None or self._tools[0] is not settings:
            docs = (Path(settings.docs_path),) if settings.docs_path else DEFAULT_DOCS
            registry = sample_tools(
                settings.tools,
                latency_seconds=settings.tool_latency_ms / 1000,
                docs=docs,
                timeout_seconds=settings.tool_timeout_seconds,
                knowledge_base_id=settings.knowledge_base_id,
            )
            self._tools = (settings, registry)
        return self._tools[1]

    @cached_property
    def speech_sessions(self) -> KeptSpeechSession:
        """The worker's sessions: opened through ``speech_session`` (looked up at each open, so
        it can be replaced), one kept warm between turns when the settings allow."""
        policy = SessionPolicy(
            keep_warm=self.settings.speech_session_reuse,
            max_idle_seconds=self.settings.speech_session_max_idle_seconds,
        )
        return KeptSpeechSession(lambda: self.speech_session(), policy)

    def management_client(self, callback_url: str) -> Any:
        if callback_url not in self._management_clients:
            self._management_clients[callback_url] = self.management_client_for(callback_url)
        return self._management_clients[callback_url]

    @classmethod
    def from_env(cls, settings: Settings | None = None) -> Adapters:
        settings = settings or Settings.from_env()
        if settings.llm == "local":
            # Not in a deployment's code: the Lambda bundle and the AgentCore image carry no
            # llama.cpp (voicewire_tools/local_stack/local_llm.py is the local stack's to hand in).
            raise SettingsError(
                "VOICEWIRE_LLM=local runs on voicewire's local stack (voicewire up --llm local), "
                "which hands its model in; a deployment's functions reach Bedrock"
            )

        # One Bedrock client per execution environment: built (and its TLS connection made)
        # once, not on every turn's path to first audio.
        bedrock = bedrock_client() if settings.llm == "bedrock" else None

        def llm_client() -> ConverseStreamClient:
            if settings.llm == "replay":
                from functions.adapters.replay_llm import ReplayBedrockClient

                return ReplayBedrockClient()
            return bedrock

        def token_secret() -> str:
            from aws_lambda_powertools.utilities import parameters

            if settings.token_secret_parameter is None:
                raise RuntimeError("VOICEWIRE_TOKEN_SECRET_PARAMETER is not set")
            # Cached for 5 minutes: one SSM call per container, not per connection.
            return str(
                parameters.get_parameter(settings.token_secret_parameter, decrypt=True, max_age=300)
            )

        return cls(
            settings=settings,
            dynamodb=dynamodb_client(),
            lambda_client=boto3.client("lambda"),
            management_client_for=management_client,
            llm_client=llm_client,
            speech_session=lambda: open_speech_session(settings.speech_target),
            token_secret=token_secret,
        )


_current: Adapters | None = None


def current_adapters() -> Adapters:
    global _current
    if _current is None:
        _current = Adapters.from_env()
    return _current


def use_adapters(adapters: Adapters | None) -> Adapters | None:
    """Install the adapters every handler uses (the local stack, tests); None: from env again.

    Returns the ones installed before, so a caller can put them back."""
    global _current
    previous, _current = _current, adapters
    return previous
