"""The answer to a client's ``listen``: a presigned Transcribe streaming URL, minted for that
client, with what it must send there.

Both front doors answer ``listen`` with this module (the API Gateway path's ``listen`` function,
``functions/handlers/listen.py``, and the AgentCore app's ``/ws``), so the rules live once:

- the URL is signed with the credentials of a role that may only
  ``transcribe:StartStreamTranscriptionWebSocket`` (the stacks grant nothing else to it), so
  what the client holds opens a Transcribe stream and nothing more, for at most ``expires_in_s``
  seconds (Transcribe's maximum is 300);
- the language must be one this deployment offers (``languages``); the sample rate one Transcribe
  takes (8-48 kHz, checked by the action's model);
- no credentials or no region is ``listen_unavailable``: typing keeps working, and the client
  is told why it cannot speak.

``endpoint`` points the URL at the local Transcribe endpoint (``voicewire up``), which checks it
as AWS does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from voicewire.client_protocol import ListenAction, ListenOffer
from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.speech_in.transcribe_url import (
    AwsCredentials,
    TranscribeUrlError,
    presigned_transcribe_url,
)

DEFAULT_LANGUAGES = frozenset({"en-US"})  # what the agent answers in (Kokoro's English voices)
# How long a URL may be opened after it is minted: the page opens it at once, so seconds are
# enough, and a URL that leaks or is hoarded is soon useless (Transcribe checks X-Amz-Expires at
# the handshake; a stream already open goes on). 300, Transcribe's maximum, before.
URL_SECONDS = 15
# Listen actions one connection may make per clock minute: a hands-free page asks one per turn
# (and a few after a failed stream); each is a Transcribe stream the account pays for and one
# of its concurrent streams, so a connection that asks more is refused (too_many_listens).
MAX_LISTENS_PER_MINUTE = 20


@dataclass(frozen=True)
class ListenSettings:
    """How a front door mints its Transcribe URLs."""

    region: str | None
    endpoint: str | None = None  # the local Transcribe endpoint; None: AWS's, for ``region``
    expires_in_s: int = URL_SECONDS
    languages: frozenset[str] = DEFAULT_LANGUAGES
    # Transcribe's partial-results stabilization: items carry ``Stable``, and a client can act
    # on the first stable word (a voice barge-in) without waiting for the final result.
    stability: str | None = "high"
    # Why this front door cannot take speech (no recognizer installed locally...): ``listen``
    # is then ``listen_unavailable`` with this sentence, and typing keeps working.
    unavailable: str | None = None
    max_per_minute: int = MAX_LISTENS_PER_MINUTE  # per connection (``too_many_listens``)


def listen_offer(
    action: ListenAction, credentials: AwsCredentials | None, settings: ListenSettings
) -> ListenOffer:
    """The ``listen`` frame for ``action``, or ``ProtocolError``."""
    if action.language_code not in settings.languages:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_LANGUAGE,
            f"language_code {action.language_code!r} is not offered here; "
            f"expected one of: {', '.join(sorted(settings.languages))}",
        )
    if settings.unavailable:
        raise ProtocolError(ErrorCode.LISTEN_UNAVAILABLE, settings.unavailable)
    if credentials is None or not settings.region:
        raise ProtocolError(
            ErrorCode.LISTEN_UNAVAILABLE,
            "speech input is not available on this deployment (no credentials or region to "
            "sign a Transcribe URL with); type your question instead",
        )
    try:
        url = presigned_transcribe_url(
            credentials,
            settings.region,
            language_code=action.language_code,
            sample_rate=action.sample_rate,
            expires=settings.expires_in_s,
            session_id=str(uuid.uuid4()),
            endpoint=settings.endpoint,
            partial_results_stability=settings.stability,  # type: ignore[arg-type]
        )
    except TranscribeUrlError as error:
        raise ProtocolError(ErrorCode.LISTEN_UNAVAILABLE, str(error)) from error
    return ListenOffer(
        url=url,
        language_code=action.language_code,
        sample_rate=action.sample_rate,
        expires_in_s=settings.expires_in_s,
    )
