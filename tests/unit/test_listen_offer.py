"""``listen``'s answer (``voicewire.speech_in.listen_offer``), the Lambda route that gives it
(``functions.handlers.listen``) and where its credentials come from
(``functions.access.listen_signer``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.credentials import Credentials

from functions.access.listen_answer import answer_listen
from functions.access.listen_signer import (
    AssumedRole,
    ListenSettingsError,
    ListenSigner,
)
from functions.conversation.state import MemoryConversation
from functions.handlers.listen import listen
from voicewire.client_protocol import ListenAction, parse_action
from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.speech_in.listen_offer import ListenSettings, listen_offer

KEY = Credentials("AKIAEXAMPLEEXAMPLE00", "secret" * 6, "session-token")
SETTINGS = ListenSettings(region="eu-west-1")


def query_of(url: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}


def test_the_offer_is_a_presigned_transcribe_url_for_the_asked_language_and_rate():
    offer = listen_offer(parse_action('{"action": "listen", "sample_rate": 8000}'), KEY, SETTINGS)
    url = urlsplit(offer.url)
    assert (url.scheme, url.hostname, url.port) == (
        "wss",
        "transcribestreaming.eu-west-1.amazonaws.com",
        8443,
    )
    query = query_of(offer.url)
    assert query["X-Amz-Credential"].startswith("AKIAEXAMPLEEXAMPLE00/")
    assert query["X-Amz-Credential"].endswith("/eu-west-1/transcribe/aws4_request")
    assert query["X-Amz-Security-Token"] == "session-token"
    assert (query["X-Amz-Expires"], query["sample-rate"], query["language-code"]) == (
        "15",
        "8000",
        "en-US",
    )
    assert query["partial-results-stability"] == "high"
    assert len(query["session-id"]) == 36
    assert (offer.type, offer.sample_rate, offer.expires_in_s) == ("listen", 8000, 15)


def test_each_offer_is_a_new_session():
    action = ListenAction(action="listen")
    first, second = (listen_offer(action, KEY, SETTINGS) for _ in range(2))
    assert query_of(first.url)["session-id"] != query_of(second.url)["session-id"]


@pytest.mark.parametrize(
    ("settings", "credentials", "code", "said"),
    [
        (ListenSettings(region=None), KEY, ErrorCode.LISTEN_UNAVAILABLE, "no credentials"),
        (SETTINGS, None, ErrorCode.LISTEN_UNAVAILABLE, "type your question"),
        (
            ListenSettings(region="eu-west-1", unavailable="no recognizer is installed"),
            KEY,
            ErrorCode.LISTEN_UNAVAILABLE,
            "no recognizer is installed",
        ),
        (
            ListenSettings(region="eu-west-1", languages=frozenset({"en-GB"})),
            KEY,
            ErrorCode.UNSUPPORTED_LANGUAGE,
            "expected one of: en-GB",
        ),
    ],
)
def test_what_cannot_be_offered_is_a_stable_code_saying_why(settings, credentials, code, said):
    with pytest.raises(ProtocolError) as refused:
        listen_offer(ListenAction(action="listen"), credentials, settings)
    assert refused.value.code == code
    assert said in refused.value.message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"action": "listen", "sample_rate": 4000}', "sample_rate"),
        ('{"action": "listen", "sample_rate": "16000"}', "sample_rate"),
        ('{"action": "listen", "language_code": "english"}', "language_code"),
    ],
)
def test_a_bad_listen_is_an_invalid_field(body, field):
    with pytest.raises(ProtocolError) as refused:
        parse_action(body)
    assert refused.value.code == ErrorCode.INVALID_FIELD
    assert field in refused.value.message


def message_event(body: str) -> dict:
    return {
        "requestContext": {
            "routeKey": "listen",
            "eventType": "MESSAGE",
            "messageId": "m1",
            "extendedRequestId": "e1",
            "requestTime": "05/Dec/2026:10:00:00 +0000",
            "messageDirection": "IN",
            "stage": "prod",
            "connectedAt": 1,
            "requestTimeEpoch": 1,
            "identity": {"sourceIp": "127.0.0.1"},
            "requestId": "r1",
            "domainName": "example.execute-api.eu-west-1.amazonaws.com",
            "connectionId": "c1",
            "apiId": "example",
        },
        "body": body,
        "isBase64Encoded": False,
    }


def test_the_listen_route_answers_in_its_response_body():
    signer = ListenSigner(SETTINGS, lambda: KEY)
    state = MemoryConversation()
    answered = listen(message_event('{"action": "listen"}'), signer, lambda _: state)
    assert answered["statusCode"] == 200
    frame = json.loads(answered["body"])
    assert frame["type"] == "listen" and frame["url"].startswith("wss://transcribestreaming.")
    bad = message_event('{"action": "listen", "x": ')
    refused = json.loads(listen(bad, signer, lambda _: state)["body"])
    assert (refused["type"], refused["code"]) == ("error", "invalid_json")


def test_the_signer_reads_its_settings_from_the_environment():
    signer = ListenSigner.from_env(
        {
            "AWS_REGION": "us-west-2",
            "VOICEWIRE_TRANSCRIBE_ENDPOINT": "ws://127.0.0.1:9000",
            "VOICEWIRE_LISTEN_LANGUAGES": "en-US, en-GB",
            "VOICEWIRE_LISTEN_EXPIRES_S": "120",
        }
    )
    assert signer.settings == ListenSettings(
        region="us-west-2",
        endpoint="ws://127.0.0.1:9000",
        expires_in_s=120,
        languages=frozenset({"en-US", "en-GB"}),
    )
    for expires in ("301", "0", "soon"):
        with pytest.raises(ListenSettingsError, match="VOICEWIRE_LISTEN_EXPIRES_S"):
            ListenSigner.from_env({"VOICEWIRE_LISTEN_EXPIRES_S": expires})
    limited = ListenSigner.from_env({"VOICEWIRE_MAX_LISTENS_PER_MINUTE": "4"})
    assert (limited.settings.max_per_minute, limited.settings.expires_in_s) == (4, 15)
    for limit in ("0", "-1", "many"):
        with pytest.raises(ListenSettingsError, match="VOICEWIRE_MAX_LISTENS_PER_MINUTE"):
            ListenSigner.from_env({"VOICEWIRE_MAX_LISTENS_PER_MINUTE": limit})


def test_a_url_lives_only_long_enough_to_be_opened():
    offer = listen_offer(ListenAction(action="listen"), KEY, ListenSettings(region="eu-west-1"))
    assert query_of(offer.url)["X-Amz-Expires"] == "15" and offer.expires_in_s == 15


def test_a_listen_flood_from_one_connection_is_refused_and_the_next_minute_admits_again():
    signer = ListenSigner(ListenSettings(region="eu-west-1", max_per_minute=3), lambda: KEY)
    state, other = MemoryConversation(), MemoryConversation()
    minute = 60 * 29_000_000
    answers = [
        answer_listen(ListenAction(action="listen"), signer, state, minute + i) for i in range(5)
    ]
    assert [a.type for a in answers] == ["listen"] * 3 + ["error"] * 2
    assert answers[3].code == ErrorCode.TOO_MANY_LISTENS and "at most 3" in answers[3].message
    # Another connection is not held by this one's window, and a new minute admits again.
    assert answer_listen(ListenAction(action="listen"), signer, other, minute + 5).type == "listen"
    assert answer_listen(ListenAction(action="listen"), signer, state, minute + 60).type == "listen"


def test_credentials_that_cannot_be_had_are_listen_failed_not_an_exception():
    from botocore.exceptions import ClientError, EndpointConnectionError

    def refused():
        raise ClientError(
            {
                "Error": {
                    "Code": "AccessDenied",
                    "Message": "not authorized to perform sts:AssumeRole",
                }
            },
            "AssumeRole",
        )

    def unreachable():
        raise EndpointConnectionError(endpoint_url="https://sts.amazonaws.com")

    for credentials, said in ((refused, "AccessDenied"), (unreachable, "sts.amazonaws.com")):
        signer = ListenSigner(SETTINGS, credentials)
        frame = answer_listen(ListenAction(action="listen"), signer, MemoryConversation(), 0.0)
        assert frame.type == "error" and frame.code == ErrorCode.LISTEN_FAILED
        assert said in frame.message and "type your question" in frame.message
    # The next listen, the role assumable again, is answered.
    signer = ListenSigner(SETTINGS, lambda: KEY)
    assert (
        answer_listen(ListenAction(action="listen"), signer, MemoryConversation(), 0.0).type
        == "listen"
    )


def test_the_china_regions_get_their_partitions_transcribe_host():
    offer = listen_offer(ListenAction(action="listen"), KEY, ListenSettings(region="cn-north-1"))
    assert urlsplit(offer.url).netloc == "transcribestreaming.cn-north-1.amazonaws.com.cn:8443"


class CountingSts:
    """STS's ``assume_role`` answer shape, counting calls (credentials valid ``lifetime``)."""

    def __init__(self, lifetime: timedelta) -> None:
        self.lifetime, self.calls = lifetime, []

    def assume_role(self, **request):
        self.calls.append(request)
        return {
            "Credentials": {
                "AccessKeyId": f"ASIA{len(self.calls):016d}",
                "SecretAccessKey": "s" * 40,
                "SessionToken": "token",
                "Expiration": datetime.now(UTC) + self.lifetime,
            }
        }


def test_an_assumed_role_is_kept_while_it_outlives_a_url_and_assumed_again_after():
    sts = CountingSts(timedelta(minutes=15))
    role = AssumedRole("arn:aws:iam::123456789012:role/listen", sts)
    first, again = role(), role()
    assert first is again and len(sts.calls) == 1
    assert sts.calls[0]["RoleArn"] == "arn:aws:iam::123456789012:role/listen"
    assert sts.calls[0]["DurationSeconds"] == 900
    short = CountingSts(timedelta(minutes=5))  # would expire before a 300 s URL does
    role = AssumedRole("arn:aws:iam::123456789012:role/listen", short)
    role(), role()
    assert len(short.calls) == 2


def test_a_recording_is_streamed_at_most_twice_real_time():
    from voicewire.speech_in.transcribe_client import MAX_PACE, pace_of

    assert (pace_of(1.0), pace_of(0), pace_of(2.0), MAX_PACE) == (1.0, 2.0, 2.0, 2.0)
    for pace in (2.5, -1.0):
        with pytest.raises(ValueError, match="Transcribe refuses audio sent in a burst"):
            pace_of(pace)
