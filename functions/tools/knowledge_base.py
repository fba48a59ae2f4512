"""``search_docs`` over a Bedrock Knowledge Base: its ``retrieve`` API instead of the shipped docs.

Same name, description and input for the model as the docs search (``search_docs``), and the same
reply shape (``matches`` of ``file``, ``heading``, ``excerpt``, ``summary``, ``score``), so a
deployment switches by giving a knowledge-base id (``VOICEWIRE_KNOWLEDGE_BASE_ID``); the worker's
role may then ``bedrock:Retrieve`` on that knowledge base only (``stacks/voice_api.py``).

``retrieve`` (boto3 ``bedrock-agent-runtime``): ``knowledgeBaseId``, ``retrievalQuery {text}``,
``retrievalConfiguration {vectorSearchConfiguration {numberOfResults}}`` in; ``retrievalResults``
of ``{content {text}, location {type, s3Location {uri} | webLocation {url} | ...}, score}`` out.
The call blocks, so it runs in a thread: a barge-in cannot stop it, only stop waiting for it (the
registry's timeout bounds it too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config

from functions.tools.registry import Tool
from functions.tools.search_docs import MATCHES, SearchDocsInput, excerpt, first_sentence

# A retrieve answers in well under a second; the tool's own timeout (10 s) bounds the wait.
RETRIEVE_CONFIG = Config(
    connect_timeout=2, read_timeout=8, retries={"mode": "standard", "total_max_attempts": 2}
)


def retrieve_client(**client_kwargs: Any) -> Any:
    return boto3.client("bedrock-agent-runtime", config=RETRIEVE_CONFIG, **client_kwargs)


def _where(location: dict[str, Any]) -> str:
    """A result's source as a voice can name it: the file's name, else its URL or type."""
    for key, field in (
        ("s3Location", "uri"),
        ("webLocation", "url"),
        ("confluenceLocation", "url"),
        ("sharePointLocation", "url"),
        ("salesforceLocation", "url"),
    ):
        if key in location:
            return str(location[key].get(field, "")).rsplit("/", 1)[-1] or key
    return str(location.get("type", "the knowledge base")).lower()


def knowledge_base_tool(
    knowledge_base_id: str,
    client: Callable[[], Any] = retrieve_client,
    latency_seconds: float = 0.0,
) -> Tool:
    made: list[Any] = []  # one client per environment, made at the first call

    def retrieve(query: str) -> dict[str, Any]:
        if not made:
            made.append(client())
        return made[0].retrieve(
            knowledgeBaseId=knowledge_base_id,
            retrievalQuery={"text": query},
            retrievalConfiguration={"vectorSearchConfiguration": {"numberOfResults": MATCHES}},
        )

    async def search_docs(given: SearchDocsInput) -> dict[str, object]:
        if latency_seconds:
            await asyncio.sleep(latency_seconds)
        answer = await asyncio.to_thread(retrieve, given.query)
        matches = []
        for result in answer.get("retrievalResults", []):
            opening = excerpt(result.get("content", {}).get("text", ""))
            score = round(float(result.get("score", 0)), 3)
            matches.append(
                {
                    "file": _where(result.get("location", {})),
                    "heading": "",
                    "excerpt": opening,
                    "summary": first_sentence(opening),
                    "score": score,
                }
            )
        return {"query": given.query, "matches": matches}

    return Tool(
        "search_docs",
        "Search the documentation this assistant knows. Use it to answer questions about it.",
        SearchDocsInput,
        search_docs,
    )
