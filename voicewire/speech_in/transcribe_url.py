"""The presigned URL a browser opens to stream its microphone to Amazon Transcribe streaming.

Transcribe's WebSocket API takes the whole request in the URL of the upgrade: the parameters of
``StartStreamTranscription`` (``language-code``, ``media-encoding``, ``sample-rate``, optionally
``session-id`` and partial-results stabilization) and a SigV4 signature in the query
(``X-Amz-Algorithm``, ``X-Amz-Credential`` scoped to the ``transcribe`` service,
``X-Amz-Date``, ``X-Amz-Expires`` of at most 300 s, ``X-Amz-Security-Token`` for temporary
credentials, ``X-Amz-SignedHeaders=host``, ``X-Amz-Signature``), so the microphone's audio goes
from the browser to AWS and never through voicewire. Sources: Amazon Transcribe developer guide,
"Setting up a WebSocket stream" (``streaming-websocket.html``: the URL, "The maximum value for
X-Amz-Expires is 300 (5 minutes)"; its earlier version ``websocket.html``: "X-Amz-SignedHeaders
... The only valid value is host", the payload hash of the empty string, the host with its
``:8443``); the service model (``transcribe-streaming.json`` in aws/aws-sdk-js-v3):
``MediaSampleRateHertz`` 8000-48000, ``MediaEncoding`` pcm|ogg-opus|flac, ``SessionId`` a UUID.

The signature is botocore's ``SigV4QueryAuth``, not our own: it builds the canonical request
with the ``host`` header taken from the URL (the non-default port kept, as Transcribe's guide
signs ``transcribestreaming.REGION.amazonaws.com:8443``) and the SHA-256 of the empty body, which
is what Transcribe's guide prescribes for this GET. botocore only signs ``http``/``https`` URLs,
so the URL is signed with the HTTP scheme of the same origin and handed out as ``wss``/``ws``:
the scheme is not part of what SigV4 signs.

``endpoint`` points the same URL at the local Transcribe endpoint (``ws://127.0.0.1:PORT``,
``voicewire up``), which checks it the way AWS does.
"""

from __future__ import annotations

import re
from typing import Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from voicewire.aws_domains import dns_suffix

SERVICE = "transcribe"  # the SigV4 service name (not the host's "transcribestreaming")
PATH = "/stream-transcription-websocket"
AWS_PORT = 8443
MAX_EXPIRES = 300  # seconds: the developer guide's maximum for X-Amz-Expires
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8_000, 48_000  # MediaSampleRateHertz's range in the model
MediaEncoding = Literal["pcm", "ogg-opus", "flac"]
MEDIA_ENCODINGS: tuple[MediaEncoding, ...] = ("pcm", "ogg-opus", "flac")
Stability = Literal["high", "medium", "low"]
STABILITIES: tuple[Stability, ...] = ("high", "medium", "low")
# Transcribe's language codes are all "xx-XX" (en-US, zh-HK, en-AB): checked here for shape only,
# because the list grows with the service; Transcribe (and the local endpoint) refuse a code
# they do not know with a BadRequestException.
LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}-[A-Z]{2}$")
SESSION_ID = re.compile(
    r"^[a-fA-F0-9]{8}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}-[a-fA-F0-9]{12}$"
)  # the model's SessionId pattern (36 characters)
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")  # us-east-1, us-gov-west-1, ap-southeast-2


class TranscribeUrlError(ValueError):
    """An argument the URL cannot be minted with; the message says which and why."""


class AwsCredentials(Protocol):
    """What botocore's credentials (``Credentials``, ``ReadOnlyCredentials``) carry."""

    @property
    def access_key(self) -> str: ...

    @property
    def secret_key(self) -> str: ...

    @property
    def token(self) -> str | None: ...


def presigned_transcribe_url(
    credentials: AwsCredentials,
    region: str,
    language_code: str,
    sample_rate: int,
    media_encoding: MediaEncoding = "pcm",
    expires: int = MAX_EXPIRES,
    session_id: str | None = None,
    endpoint: str | None = None,
    *,
    partial_results_stability: Stability | None = None,
) -> str:
    """A ``wss://transcribestreaming.{region}.{suffix}:8443/stream-transcription-websocket``
    URL, valid for ``expires`` seconds from now, that starts one streaming transcription.

    ``credentials``: botocore credentials (``session.get_credentials()``; a refreshable one is
    frozen first); their session token, if any, is signed into the URL. ``endpoint``:
    ``ws://host:port`` or ``wss://host:port`` instead of AWS's (the local endpoint).
    ``partial_results_stability``: turns on partial-results stabilization at that level (items
    of partial results then say whether they are ``Stable``). Raises ``TranscribeUrlError``.
    """
    frozen = _frozen(credentials)
    _check_region(region)
    _check_language_code(language_code)
    _check_sample_rate(sample_rate)
    if media_encoding not in MEDIA_ENCODINGS:
        raise TranscribeUrlError(
            f"media_encoding must be one of {', '.join(MEDIA_ENCODINGS)}, not {media_encoding!r}"
        )
    if isinstance(expires, bool) or not isinstance(expires, int):
        raise TranscribeUrlError(f"expires must be a whole number of seconds, not {expires!r}")
    if not 1 <= expires <= MAX_EXPIRES:
        raise TranscribeUrlError(
            f"expires must be 1 to {MAX_EXPIRES} seconds (Transcribe's maximum for "
            f"X-Amz-Expires), not {expires}"
        )
    parameters = {
        "language-code": language_code,
        "media-encoding": media_encoding,
        "sample-rate": str(sample_rate),
    }
    if session_id is not None:
        if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
            raise TranscribeUrlError(
                f"session_id must be a UUID (8-4-4-4-12 hexadecimal digits), not {session_id!r}"
            )
        parameters["session-id"] = session_id
    if partial_results_stability is not None:
        if partial_results_stability not in STABILITIES:
            raise TranscribeUrlError(
                f"partial_results_stability must be one of {', '.join(STABILITIES)}, "
                f"not {partial_results_stability!r}"
            )
        parameters["enable-partial-results-stabilization"] = "true"
        parameters["partial-results-stability"] = partial_results_stability
    socket_scheme, origin = _origin(endpoint, region)
    request = AWSRequest(method="GET", url=f"{origin}{PATH}", params=parameters)
    SigV4QueryAuth(frozen, SERVICE, region, expires=expires).add_auth(request)
    signed = urlsplit(request.url)
    return urlunsplit((socket_scheme, *signed[1:]))


def _frozen(credentials: AwsCredentials) -> Credentials:
    """A fixed key, secret and token: a refreshable credential could change between the
    signature and the token written beside it."""
    freeze = getattr(credentials, "get_frozen_credentials", None)
    if callable(freeze):
        credentials = freeze()
    access_key = getattr(credentials, "access_key", None)
    secret_key = getattr(credentials, "secret_key", None)
    if not access_key or not secret_key:
        raise TranscribeUrlError(
            "credentials need an access key and a secret key (botocore's Credentials, e.g. "
            "boto3.Session().get_credentials())"
        )
    return Credentials(access_key, secret_key, getattr(credentials, "token", None) or None)


def _check_region(region: str) -> None:
    if not isinstance(region, str) or not REGION.fullmatch(region):
        raise TranscribeUrlError(f"region must be an AWS region such as us-east-1, not {region!r}")


def _check_language_code(language_code: str) -> None:
    if not isinstance(language_code, str) or not LANGUAGE_CODE.fullmatch(language_code):
        raise TranscribeUrlError(
            f"language_code must be a Transcribe language code such as en-US, not {language_code!r}"
        )


def _check_sample_rate(sample_rate: int) -> None:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int):
        raise TranscribeUrlError(f"sample_rate must be a whole number of Hz, not {sample_rate!r}")
    if not MIN_SAMPLE_RATE <= sample_rate <= MAX_SAMPLE_RATE:
        raise TranscribeUrlError(
            f"sample_rate must be {MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE} Hz (Transcribe's "
            f"range), not {sample_rate}"
        )


def _origin(endpoint: str | None, region: str) -> tuple[str, str]:
    """The WebSocket scheme to hand out, and the HTTP origin botocore signs."""
    if endpoint is None:
        # The partition's suffix: amazonaws.com.cn in the China Regions (botocore's data).
        return "wss", f"https://transcribestreaming.{region}.{dns_suffix(region)}:{AWS_PORT}"
    parts = urlsplit(endpoint)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise TranscribeUrlError(
            f"endpoint must be ws://host:port or wss://host:port, not {endpoint!r}"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise TranscribeUrlError(
            f"endpoint must name only a scheme, a host and a port, not {endpoint!r} "
            f"(the path is always {PATH})"
        )
    http_scheme = "https" if parts.scheme == "wss" else "http"
    return parts.scheme, f"{http_scheme}://{parts.netloc}"
