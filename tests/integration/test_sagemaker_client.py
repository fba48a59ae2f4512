"""The SageMaker client as production builds it, and what it takes to open a stream.

The SDK's default transport (aiohttp) cannot carry a duplex event stream; a deployed turn would
fail before its first byte. These tests build the client through the production code (nothing
injected) and check what opening a stream needs.
"""

from __future__ import annotations

import boto3
import pytest
from smithy_http.aio.aiohttp import AIOHTTPClient
from smithy_http.aio.crt import AWSCRTHTTPClient

from voicewire.speech_link import SpeechSession, SpeechStreamError, sagemaker_client
from voicewire.speech_link.sagemaker_client import (
    Boto3CredentialsResolver,
    DuplexCRTClient,
    LocalCATrustingCRTClient,
    build_client,
)


async def test_the_production_client_has_a_duplex_http2_transport():
    client = await build_client("eu-west-1")
    config = await client._ensure_setup()  # what every call uses, after the SDK's own set-up
    try:
        transport = config.transport
        assert type(transport) is DuplexCRTClient  # the system trust store, not a local CA
        assert isinstance(transport, AWSCRTHTTPClient)
        assert transport.SUPPORTS_DUPLEX_STREAMING is True
        assert transport._config.force_http_2 is True
        assert config.endpoint_uri == "https://runtime.sagemaker.eu-west-1.amazonaws.com:8443"
        assert config.region == "eu-west-1"
        assert isinstance(config.aws_credentials_identity_resolver, Boto3CredentialsResolver)
    finally:
        await client.close()


async def test_the_local_trust_survives_the_sdks_copy_of_its_config(tmp_path):
    """The SDK deep-copies its config when a client is set up; the copy of the transport must
    still trust the local CA (the base class's copy would not)."""
    from voicewire_tools.local_stack.local_tls import LocalTls

    tls = LocalTls.create(tmp_path)
    client = await build_client(
        "us-east-1", endpoint_uri="https://localhost:1", trusted_ca_file=tls.ca_file
    )
    config = await client._ensure_setup()
    try:
        assert isinstance(config.transport, LocalCATrustingCRTClient)
        assert config.transport.ca_file == tls.ca_file
    finally:
        await client.close()


async def test_a_transport_without_duplex_support_cannot_open_the_stream(
    sagemaker_runtime, monkeypatch
):
    """What every deployed turn did before the CRT transport: refused before any traffic. The
    same session over the production transport opens (``test_speech_link``)."""
    opened_before = sagemaker_runtime.runtime.counters.streams_opened
    monkeypatch.setattr(sagemaker_client, "duplex_transport", lambda *_: AIOHTTPClient())
    session = SpeechSession(sagemaker_runtime.transport())
    with pytest.raises(SpeechStreamError) as raised:
        await session.open()
    assert raised.value.code == "connect_failed"
    assert "does not support duplex" in raised.value.message
    assert sagemaker_runtime.runtime.counters.streams_opened == opened_before


async def test_no_credentials_is_a_typed_error(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    resolver = Boto3CredentialsResolver(boto3.Session(region_name="us-east-1"))
    with pytest.raises(SpeechStreamError) as raised:
        await resolver.get_identity(properties={})
    assert raised.value.code == "no_credentials"


async def test_clients_share_the_costly_parts_but_not_their_connections():
    first, second = await build_client("us-east-1"), await build_client("us-east-1")
    try:
        one = (await first._ensure_setup()).transport
        two = (await second._ensure_setup()).transport
        assert one is not two and one._connections is not two._connections
        assert one._tls_ctx is two._tls_ctx and one._eventloop is two._eventloop
    finally:
        await first.close()
        await second.close()
