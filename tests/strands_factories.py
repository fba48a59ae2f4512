"""Agent factories for ``--agent strands:strands_factories:NAME`` in the tests."""

from __future__ import annotations

from strands import Agent

MADE: list[Agent] = []


def careful_agent(**options):
    """A user's own agent: voicewire's model and tools, a system prompt of its own."""
    agent = Agent(callback_handler=None, **{**options, "system_prompt": "Be careful."})
    MADE.append(agent)
    return agent


def not_an_agent(**options):
    return "an agent, honestly"
