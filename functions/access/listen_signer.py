"""Who may speak to the agent, and where: the credentials and settings a front door mints
Transcribe streaming URLs with (``voicewire.speech_in.listen_offer`` holds the rules).

On AWS the credentials are those of a role that may only
``transcribe:StartStreamTranscriptionWebSocket``: the ``listen`` function's execution role
(``stacks/voice_api.py``), or, for the AgentCore app, a role it assumes for just that
(``stacks/agent_runtime.py``). The local stack hands in a key its Transcribe endpoint accepts
(``use_listen_signer``).

Environment: ``AWS_REGION`` (Lambda sets it), ``VOICEWIRE_LISTEN_ROLE_ARN`` (a role to assume
and sign with, instead of the process's own credentials: the AgentCore app's, whose own role can
do much more), ``VOICEWIRE_TRANSCRIBE_ENDPOINT`` (a ``ws://`` endpoint instead of AWS's; the
local stack), ``VOICEWIRE_LISTEN_LANGUAGES`` (``en-US,en-GB``; default ``en-US``),
``VOICEWIRE_LISTEN_EXPIRES_S`` (1-300, default 15: long enough to open the URL),
``VOICEWIRE_MAX_LISTENS_PER_MINUTE`` (per connection, default 20).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from voicewire.speech_in.listen_offer import (
    DEFAULT_LANGUAGES,
    MAX_LISTENS_PER_MINUTE,
    URL_SECONDS,
    ListenSettings,
)
from voicewire.speech_in.transcribe_url import MAX_EXPIRES, AwsCredentials

# What ``ListenSigner.from_env`` reads besides AWS's own (``functions.settings``'s
# ``environment_variables`` includes them: the stacks' tests check every name they set).
ENVIRONMENT_VARIABLES = frozenset(
    {
        "VOICEWIRE_LISTEN_ROLE_ARN",
        "VOICEWIRE_TRANSCRIBE_ENDPOINT",
        "VOICEWIRE_LISTEN_LANGUAGES",
        "VOICEWIRE_LISTEN_EXPIRES_S",
        "VOICEWIRE_MAX_LISTENS_PER_MINUTE",
    }
)


class ListenSettingsError(ValueError):
    """An environment variable the listen signer cannot run with; the message names it."""


@dataclass
class ListenSigner:
    """The settings, and where fresh credentials come from at each ``listen`` (a Lambda role's
    are rotated by the runtime, an assumed role's expire)."""

    settings: ListenSettings
    credentials: Callable[[], AwsCredentials | None]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ListenSigner:
        environ = os.environ if environ is None else environ
        languages = frozenset(
            part.strip()
            for part in environ.get("VOICEWIRE_LISTEN_LANGUAGES", "").split(",")
            if part.strip()
        )
        raw_expires = environ.get("VOICEWIRE_LISTEN_EXPIRES_S", str(URL_SECONDS))
        try:
            expires = int(raw_expires)
        except ValueError:
            expires = 0
        if not 1 <= expires <= MAX_EXPIRES:
            raise ListenSettingsError(
                f"VOICEWIRE_LISTEN_EXPIRES_S must be 1 to {MAX_EXPIRES} seconds, not "
                f"{raw_expires!r}"
            )
        raw_limit = environ.get("VOICEWIRE_MAX_LISTENS_PER_MINUTE", str(MAX_LISTENS_PER_MINUTE))
        if not raw_limit.isdigit() or int(raw_limit) < 1:
            raise ListenSettingsError(
                f"VOICEWIRE_MAX_LISTENS_PER_MINUTE must be a whole number of 1 or more, not "
                f"{raw_limit!r}"
            )
        settings = ListenSettings(
            region=environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION"),
            endpoint=environ.get("VOICEWIRE_TRANSCRIBE_ENDPOINT") or None,
            expires_in_s=expires,
            languages=languages or DEFAULT_LANGUAGES,
            max_per_minute=int(raw_limit),
        )
        role_arn = environ.get("VOICEWIRE_LISTEN_ROLE_ARN")
        return cls(settings, AssumedRole(role_arn) if role_arn else _own_credentials)


def _own_credentials() -> AwsCredentials | None:
    """The process's own credentials (a Lambda function's execution role's, rotated by
    Lambda)."""
    import boto3

    return boto3.Session().get_credentials()


class AssumedRole:
    """Credentials of ``role_arn``, assumed with STS and kept until they have less left than a
    URL may live (``MAX_EXPIRES``) plus a margin: a URL signed with them stays valid for all of
    its ``X-Amz-Expires``."""

    DURATION_SECONDS = 900  # STS's minimum
    MARGIN_SECONDS = 60

    def __init__(self, role_arn: str, sts_client: object | None = None) -> None:
        self.role_arn = role_arn
        self._sts = sts_client
        self._credentials: AwsCredentials | None = None
        self._expires_at = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> AwsCredentials:
        with self._lock:
            if time.time() > self._expires_at - MAX_EXPIRES - self.MARGIN_SECONDS:
                self._assume()
            assert self._credentials is not None
            return self._credentials

    def _assume(self) -> None:
        from botocore.credentials import Credentials

        if self._sts is None:
            import boto3

            self._sts = boto3.client("sts")
        answer = self._sts.assume_role(  # type: ignore[attr-defined]
            RoleArn=self.role_arn,
            RoleSessionName="voicewire-listen",
            DurationSeconds=self.DURATION_SECONDS,
        )["Credentials"]
        self._credentials = Credentials(
            answer["AccessKeyId"], answer["SecretAccessKey"], answer["SessionToken"]
        )
        self._expires_at = answer["Expiration"].timestamp()


_current: ListenSigner | None = None


def current_listen_signer() -> ListenSigner:
    global _current
    if _current is None:
        _current = ListenSigner.from_env()
    return _current


def use_listen_signer(signer: ListenSigner | None) -> ListenSigner | None:
    """Install the signer the ``listen`` handler uses (the local stack, tests); None: from the
    environment again. Returns the one installed before."""
    global _current
    previous, _current = _current, signer
    return previous
