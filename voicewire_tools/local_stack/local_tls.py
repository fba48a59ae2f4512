"""TLS for the local SageMaker runtime: a throwaway certificate authority and one server
certificate, made fresh for each stack with ``trustme`` (python-trio's library made for exactly
this, on top of ``cryptography``: certificates for local servers that a client is told to trust).

The CRT HTTP client negotiates HTTP/2 only through TLS's ALPN (it has no cleartext HTTP/2), so
the local front door must speak TLS, and the client must trust this CA: ``ca_file`` is what
``voicewire.speech_link.sagemaker_client`` loads into its trust store in local mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme

# The names the local runtime is reached by; the certificate is valid for each.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class LocalTls:
    ca_file: Path  # PEM: the authority's certificate, for the client's trust store
    server_file: Path  # PEM: the server's private key and certificate chain, for the server

    @classmethod
    def create(cls, directory: Path, names: tuple[str, ...] = LOCAL_NAMES) -> LocalTls:
        """Make a new authority and a certificate for ``names``; write both into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        authority = trustme.CA(organization_name="voicewire local stack")
        server = authority.issue_cert(*names)
        tls = cls(directory / "local-ca.pem", directory / "local-runtime.pem")
        authority.cert_pem.write_to_path(str(tls.ca_file))
        server.private_key_and_cert_chain_pem.write_to_path(str(tls.server_file))
        tls.server_file.chmod(0o600)  # it holds a private key
        return tls
