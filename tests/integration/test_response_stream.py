"""The response-stream clients of ``POST /invocations``: plain HTTP, and boto3's real code path."""

from __future__ import annotations

import boto3
import httpx
import pytest
from botocore.awsrequest import AWSResponse
from eventstream_encoding import RawEventStream, payload_part, stream_exception

from voicewire.speech_link import SpeechServerError, SpeechStreamError
from voicewire_tools.response_stream import HttpResponseStream, SageMakerResponseStream

TEXT = "Streaming back, chunk by chunk. Then done."


@pytest.fixture(scope="module")
def reference_pcm(shared_speech_server) -> bytes:
    return b"".join(HttpResponseStream(shared_speech_server.base_url).audio(TEXT))


def test_http_stream_yields_audio_as_it_arrives(speech_server, reference_pcm):
    parts = list(HttpResponseStream(speech_server.base_url).audio(TEXT))
    assert len(parts) > 1
    assert len(b"".join(parts)) == len(reference_pcm) > 48_000


def test_http_sse_variant_reassembles_the_same_audio(speech_server, reference_pcm):
    audio = b"".join(HttpResponseStream(speech_server.base_url).audio(TEXT, sse=True))
    assert len(audio) == len(reference_pcm)


def test_http_errors_carry_the_servers_code(speech_server):
    with pytest.raises(SpeechServerError) as raised:
        list(HttpResponseStream(speech_server.base_url).audio("Hi.", voice="nobody"))
    assert raised.value.code == "unknown_voice"


def boto3_client_bridged_to(base_url: str, fail_after: int | None = None, split: int = 0):
    """A real boto3 sagemaker-runtime client whose HTTP send is answered by the local speech
    server: the request boto3 built is replayed as a real POST, and each delivery chunk comes
    back as a PayloadPart event (optionally re-cut into ``split``-byte parts, or followed by a
    ModelStreamError after ``fail_after`` parts)."""
    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    seen = {}

    def answer(request, **_):
        seen["url"], seen["headers"] = request.url, dict(request.headers)
        body = request.body if isinstance(request.body, bytes) else request.body.read()
        # SageMaker hands the container X-Amzn-SageMaker-Accept as its Accept header.
        accept = request.headers.get("X-Amzn-SageMaker-Accept", b"*/*")
        local = httpx.post(
            f"{base_url}/invocations",
            content=body,
            headers={"accept": accept.decode() if isinstance(accept, bytes) else accept},
            timeout=120,
        )
        data = local.content
        size = split or 9600
        parts = [data[i : i + size] for i in range(0, len(data), size)]
        messages = [payload_part(part) for part in parts]
        if fail_after is not None:
            messages = [*messages[:fail_after], stream_exception("ModelStreamError", "model died")]
        return AWSResponse(
            request.url,
            200,
            {"content-type": "application/vnd.amazon.eventstream"},
            RawEventStream(messages),
        )

    client.meta.events.register(
        "before-send.sagemaker-runtime.InvokeEndpointWithResponseStream", answer
    )
    return client, seen


def test_boto3_response_stream_yields_payload_parts(speech_server, reference_pcm):
    client, seen = boto3_client_bridged_to(speech_server.base_url)
    parts = list(SageMakerResponseStream("kokoro-82m", client).audio(TEXT))
    assert seen["url"].endswith("/endpoints/kokoro-82m/invocations-response-stream")
    assert len(parts) > 1 and len(b"".join(parts)) == len(reference_pcm)


def test_boto3_sse_events_split_at_odd_boundaries_reassemble(speech_server, reference_pcm):
    # 7-byte payload parts: every SSE event, and many base64 runs, span several parts.
    client, _ = boto3_client_bridged_to(speech_server.base_url, split=7)
    audio = b"".join(SageMakerResponseStream("kokoro-82m", client).audio(TEXT, sse=True))
    assert len(audio) == len(reference_pcm)


def test_boto3_model_stream_error_mid_stream_is_typed(speech_server):
    client, _ = boto3_client_bridged_to(speech_server.base_url, fail_after=2)
    received = []
    with pytest.raises(SpeechStreamError) as raised:
        for part in SageMakerResponseStream("kokoro-82m", client).audio(TEXT):
            received.append(part)
    assert raised.value.code == "model_stream_error"
    assert len(received) == 2
