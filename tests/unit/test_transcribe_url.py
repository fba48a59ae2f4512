"""The presigned Transcribe streaming URL: its shape, its signature recomputed the way
Transcribe's developer guide spells it out, and a round trip through the local endpoint's
verifier (a URL minted with one key verifies; tampered, expired, another key, service or region
does not)."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, quote, urlsplit

import pytest
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials

from voicewire.speech_in.transcribe_url import (
    MAX_EXPIRES,
    TranscribeUrlError,
    presigned_transcribe_url,
)
from voicewire_tools.local_stack.presigned_query import PresignedQueryVerifier
from voicewire_tools.local_stack.sigv4_verifier import AccessKey, SignatureRejected, SigV4Verifier

SIGNED_AT = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC)
KEY = AccessKey("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
REGION = "us-east-1"


@pytest.fixture(autouse=True)
def signing_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore signs with its clock: fix it, so every URL here is signed at SIGNED_AT."""
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: SIGNED_AT)


def credentials(key: AccessKey = KEY, token: str | None = None) -> Credentials:
    return Credentials(key.access_key_id, key.secret_access_key, token)


def verifier(
    now: datetime = SIGNED_AT, region: str = REGION, tokens: dict[str, str] | None = None
) -> PresignedQueryVerifier:
    base = SigV4Verifier(
        {KEY.access_key_id: KEY.secret_access_key}, region, service="transcribe", clock=lambda: now
    )
    return PresignedQueryVerifier(base, max_expires=MAX_EXPIRES, session_tokens=tokens or {})


def verify(url: str, checker: PresignedQueryVerifier | None = None):
    parts = urlsplit(url)
    return (checker or verifier()).verify("GET", parts.path, parts.query, {"host": parts.netloc})


def refusal(url: str, checker: PresignedQueryVerifier | None = None) -> SignatureRejected:
    with pytest.raises(SignatureRejected) as refused:
        verify(url, checker)
    assert refused.value.status == 403
    return refused.value


def mint(**overrides) -> str:
    arguments = {
        "credentials": credentials(),
        "region": REGION,
        "language_code": "en-US",
        "sample_rate": 16_000,
    } | overrides
    return presigned_transcribe_url(**arguments)


def replace_parameter(url: str, name: str, value: str | None) -> str:
    parts = urlsplit(url)
    pairs = [(key, old) for key, old in parse_qsl(parts.query) if key != name]
    if value is not None:
        pairs.append((name, value))
    query = "&".join(f"{quote(key, safe='-_.~')}={quote(val, safe='-_.~')}" for key, val in pairs)
    return parts._replace(query=query).geturl()


# --- the URL ------------------------------------------------------------------------------


def test_the_url_is_transcribes_websocket_endpoint_with_the_request_and_a_presignature():
    url = mint(session_id="0c2e7a2e-9d2b-4f2b-8d1e-2d4c8b3a9f10")
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == (
        "wss",
        "transcribestreaming.us-east-1.amazonaws.com:8443",
        "/stream-transcription-websocket",
    )
    query = dict(parse_qsl(parts.query))
    assert query == {
        "language-code": "en-US",
        "media-encoding": "pcm",
        "sample-rate": "16000",
        "session-id": "0c2e7a2e-9d2b-4f2b-8d1e-2d4c8b3a9f10",
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": f"{KEY.access_key_id}/20261205/us-east-1/transcribe/aws4_request",
        "X-Amz-Date": "20261205T100000Z",
        "X-Amz-Expires": "300",
        "X-Amz-SignedHeaders": "host",
        "X-Amz-Signature": query["X-Amz-Signature"],
    }
    assert len(query["X-Amz-Signature"]) == 64


def test_the_signature_is_the_one_transcribes_guide_computes():
    """Recomputed from scratch with the pseudocode of the developer guide ("Setting up a
    WebSocket stream": canonical query sorted, ``host`` with its :8443, the empty payload's
    hash), independently of botocore."""
    url = mint(credentials=credentials(token="FQoGZXIvYXdzEPT//////////wEaDAnToken+/="))
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query)
    signature = dict(pairs)["X-Amz-Signature"]
    canonical_query = "&".join(
        f"{quote(name, safe='-_.~')}={quote(value, safe='-_.~')}"
        for name, value in sorted(pairs)
        if name != "X-Amz-Signature"
    )
    canonical_request = "\n".join(
        [
            "GET",
            "/stream-transcription-websocket",
            canonical_query,
            f"host:{parts.netloc}\n",
            "host",
            hashlib.sha256(b"").hexdigest(),
        ]
    )
    scope = "20261205/us-east-1/transcribe/aws4_request"
    string_to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            "20261205T100000Z",
            scope,
            hashlib.sha256(canonical_request.encode()).hexdigest(),
        ]
    )

    def sign(key: bytes, message: str) -> bytes:
        return hmac.new(key, message.encode(), hashlib.sha256).digest()

    key = sign(f"AWS4{KEY.secret_access_key}".encode(), "20261205")
    for part in ("us-east-1", "transcribe", "aws4_request"):
        key = sign(key, part)
    assert hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest() == signature


def test_temporary_credentials_put_their_token_in_the_signed_query():
    url = mint(credentials=credentials(token="session/token+="))
    assert dict(parse_qsl(urlsplit(url).query))["X-Amz-Security-Token"] == "session/token+="
    assert "X-Amz-Security-Token" not in dict(parse_qsl(urlsplit(mint()).query))
    # A refreshable credential is frozen first; read-only credentials work as they are.
    frozen = ReadOnlyCredentials(KEY.access_key_id, KEY.secret_access_key, None)
    assert verify(mint(credentials=frozen)).access_key_id == KEY.access_key_id


def test_an_endpoint_points_the_url_at_the_local_endpoint():
    url = mint(endpoint="ws://127.0.0.1:8444", partial_results_stability="medium")
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc) == ("ws", "127.0.0.1:8444")
    query = dict(parse_qsl(parts.query))
    assert query["enable-partial-results-stabilization"] == "true"
    assert query["partial-results-stability"] == "medium"
    assert verify(url).parameters["sample-rate"] == "16000"
    assert urlsplit(mint(endpoint="wss://transcribe.example:9443/")).scheme == "wss"


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"sample_rate": 7_999}, "8000 to 48000"),
        ({"sample_rate": 48_001}, "8000 to 48000"),
        ({"sample_rate": 16_000.0}, "whole number"),
        ({"sample_rate": True}, "whole number"),
        ({"media_encoding": "mp3"}, "pcm, ogg-opus, flac"),
        ({"language_code": "english"}, "such as en-US"),
        ({"region": "US-EAST-1"}, "such as us-east-1"),
        ({"expires": 0}, "1 to 300"),
        ({"expires": 301}, "1 to 300"),
        ({"expires": 1.5}, "whole number"),
        ({"session_id": "not-a-uuid"}, "UUID"),
        ({"partial_results_stability": "max"}, "high, medium, low"),
        ({"endpoint": "http://127.0.0.1:8444"}, "ws://host:port"),
        ({"endpoint": "ws://127.0.0.1:8444/elsewhere"}, "only a scheme"),
        ({"credentials": Credentials("", "")}, "access key and a secret key"),
    ],
)
def test_arguments_transcribe_would_refuse_are_refused_with_a_clear_message(overrides, says):
    with pytest.raises(TranscribeUrlError, match=says):
        mint(**overrides)


def test_the_limits_themselves_are_accepted():
    for rate in (8_000, 44_100, 48_000):
        assert verify(mint(sample_rate=rate))
    for media_encoding in ("ogg-opus", "flac"):
        assert verify(mint(media_encoding=media_encoding))
    assert verify(mint(expires=1))


# --- the round trip through the local endpoint's verifier -----------------------------------


def test_a_url_minted_with_an_issued_key_verifies_until_it_expires():
    url = mint(expires=60)
    caller = verify(url, verifier(now=SIGNED_AT + timedelta(seconds=60)))
    assert caller.access_key_id == KEY.access_key_id
    assert caller.expires_at == SIGNED_AT + timedelta(seconds=60)
    expired = refusal(url, verifier(now=SIGNED_AT + timedelta(seconds=61)))
    assert expired.error_type == "InvalidSignatureException"
    assert expired.message == (
        "Signature expired: 20261205T100000Z is now earlier than 20261205T100001Z "
        "(20261205T100101Z - 60 sec.)"
    )


def test_a_url_from_the_future_is_not_yet_current():
    refused = refusal(mint(), verifier(now=SIGNED_AT - timedelta(minutes=6)))
    assert refused.message.startswith("Signature not yet current: 20261205T100000Z")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("sample-rate", "48000"),
        ("language-code", "en-GB"),
        ("X-Amz-Expires", "299"),
        ("X-Amz-Date", "20261205T100001Z"),
        ("session-id", "0c2e7a2e-9d2b-4f2b-8d1e-2d4c8b3a9f10"),  # a parameter added
        ("X-Amz-Signature", "0" * 64),
    ],
)
def test_a_tampered_url_does_not_match_its_signature(name, value):
    refused = refusal(replace_parameter(mint(), name, value))
    assert refused.error_type == "InvalidSignatureException"
    assert refused.message.startswith("The request signature we calculated does not match")


def test_the_host_is_signed():
    parts = urlsplit(mint(endpoint="ws://127.0.0.1:8444"))
    with pytest.raises(SignatureRejected, match="does not match"):
        verifier().verify("GET", parts.path, parts.query, {"host": "127.0.0.1:9999"})


def test_an_equivalent_encoding_of_the_same_query_still_verifies():
    """AWS canonicalizes what arrived (decode, then encode), so must the check."""
    url = mint(credentials=credentials(token="a/b+c="), endpoint="ws://127.0.0.1:8444")
    checker = verifier(tokens={KEY.access_key_id: "a/b+c="})
    assert verify(url, checker)
    lower_hex = url.replace("%2F", "%2f").replace("%2B", "%2b").replace("%3D", "%3d")
    assert lower_hex != url and verify(lower_hex, checker)


def test_another_region_or_service_is_refused_with_aws_words():
    refused = refusal(mint(region="eu-west-1"))
    assert refused.message == "Credential should be scoped to a valid region, not 'eu-west-1'. "
    request = AWSRequest(
        method="GET",
        url="https://transcribestreaming.us-east-1.amazonaws.com:8443/stream-transcription-websocket",
        params={"language-code": "en-US", "media-encoding": "pcm", "sample-rate": "16000"},
    )
    SigV4QueryAuth(credentials(), "transcribestreaming", REGION, expires=300).add_auth(request)
    refused = refusal(request.url.replace("https://", "wss://"))
    assert refused.message == "Credential should be scoped to correct service: 'transcribe'. "


def test_a_key_the_stack_did_not_issue_or_a_wrong_secret_is_refused():
    stranger = AccessKey.issue()
    refused = refusal(mint(credentials=credentials(stranger)))
    assert (refused.error_type, refused.message) == (
        "UnrecognizedClientException",
        "The security token included in the request is invalid.",
    )
    wrong_secret = AccessKey(KEY.access_key_id, stranger.secret_access_key)
    assert refusal(mint(credentials=credentials(wrong_secret))).error_type == (
        "InvalidSignatureException"
    )


def test_a_session_token_must_be_the_keys():
    temporary = verifier(tokens={KEY.access_key_id: "the-token"})
    assert verify(mint(credentials=credentials(token="the-token")), temporary)
    for token in (None, "another-token"):
        refused = refusal(mint(credentials=credentials(token=token)), temporary)
        assert refused.error_type == "UnrecognizedClientException"
    # A long-term key comes without a token.
    assert refusal(mint(credentials=credentials(token="the-token"))).error_type == (
        "UnrecognizedClientException"
    )


def test_a_lifetime_over_transcribes_maximum_is_refused():
    request = AWSRequest(
        method="GET",
        url="https://transcribestreaming.us-east-1.amazonaws.com:8443/stream-transcription-websocket",
        params={"language-code": "en-US", "media-encoding": "pcm", "sample-rate": "16000"},
    )
    SigV4QueryAuth(credentials(), "transcribe", REGION, expires=3600).add_auth(request)
    refused = refusal(request.url.replace("https://", "wss://"))
    assert refused.message == "X-Amz-Expires must be at most 300 seconds, not 3600."


def test_missing_signature_parameters_are_named():
    assert refusal(replace_parameter(mint(), "X-Amz-Signature", None)).message == (
        "AWS query-string parameters must include 'X-Amz-Signature'. "
        "Re-examine the query-string parameters."
    )
    unsigned = "wss://h:1/stream-transcription-websocket?language-code=en-US&sample-rate=16000"
    refused = refusal(unsigned)
    assert (refused.error_type, refused.message) == (
        "MissingAuthenticationTokenException",
        "Missing Authentication Token",
    )
    refused = refusal(replace_parameter(mint(), "X-Amz-Algorithm", "AWS4-HMAC-SHA1"))
    assert refused.error_type == "IncompleteSignatureException"
