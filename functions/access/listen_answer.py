"""The answer to a client's ``listen``, for both front doors (the ``listen`` Lambda function and
the AgentCore app's ``/ws``): admitted by the connection's listen window, signed with fresh
credentials, and every way it can fail an ``error`` frame with a stable code, never an exception
that closes the conversation.

- More than ``max_per_minute`` listens in a clock minute on one connection: ``too_many_listens``.
  Each URL opens a Transcribe stream that the account pays for and that counts against its
  concurrent streams (25 by default): one connection must not hoard them. A URL lives only
  ``expires_in_s`` (15 s): enough to open it, not to keep a stack of them.
- The credentials cannot be had from AWS (the AgentCore app's AssumeRole refused while a new
  trust policy propagates, STS unreachable or throttling): ``listen_failed``, saying so; typing
  keeps working and a later ``listen`` may succeed. Not ``listen_unavailable``, which says this
  API takes no speech at all (the page then turns Listen off for good).
- What the offer's rules refuse (``voicewire.speech_in.listen_offer``): their code.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from functions.access.listen_signer import ListenSigner
from functions.conversation.state import ConversationState
from functions.failure_frames import failure_frame
from functions.observability import logger
from voicewire.client_protocol import ClientError as ErrorFrame
from voicewire.client_protocol import ListenAction, ListenOffer
from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.speech_in.listen_offer import listen_offer


def answer_listen(
    action: ListenAction, signer: ListenSigner, state: ConversationState, now: float
) -> ListenOffer | ErrorFrame:
    """The ``listen`` frame for ``action`` on the conversation ``state``, or the error frame
    that says why not. Blocking (the signer may call STS): a front door runs it in a thread."""
    try:
        limit = signer.settings.max_per_minute
        if not state.admit_listen(limit, now):
            raise ProtocolError(
                ErrorCode.TOO_MANY_LISTENS,
                f"at most {limit} listens a minute on one connection: wait a moment before "
                "listening again, or type your question",
            )
        try:
            credentials = signer.credentials()
        except (BotoCoreError, ClientError) as error:
            logger.warning("listen: no credentials to sign with", error=str(error))
            raise ProtocolError(
                ErrorCode.LISTEN_FAILED,
                "speech input is unavailable for a moment (the credentials to sign a "
                f"Transcribe URL with could not be had: {_said(error)}); type your question, "
                "or press Listen again shortly",
            ) from error
        return listen_offer(action, credentials, signer.settings)
    except ProtocolError as error:
        logger.info("listen refused", code=error.code.value)
        return failure_frame(error)


def _said(error: Exception) -> str:
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return f"{details.get('Code', 'error')}: {details.get('Message', '')}".strip(": ")
    return str(error)
