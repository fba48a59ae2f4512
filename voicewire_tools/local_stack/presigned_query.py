"""SigV4 in the query string (a presigned URL), checked as an AWS front door checks it.

Amazon Transcribe's WebSocket API authenticates the upgrade request by a presigned URL alone
(``voicewire.speech_in.transcribe_url`` mints them). The local Transcribe endpoint must refuse
what AWS refuses: a URL signed with a key the stack did not issue, for another region or
service, expired, not yet valid, or whose signature does not match what arrived. This module
recomputes the signature from the request as received, with botocore's ``SigV4Auth`` and the
secret of the access key the local stack issued, reusing ``sigv4_verifier``'s verifier (keys,
region, service, clock), its scope check and its AWS messages, so that both local front doors
answer a bad signature with the same words.

How a presigned request is signed (AWS General Reference, "Authenticating requests: query
parameters"; Transcribe's "Setting up a WebSocket stream"): the canonical query string is every
parameter but ``X-Amz-Signature``, each name and value URI-encoded (RFC 3986 unreserved
characters kept) and sorted; the canonical headers are those ``X-Amz-SignedHeaders`` names
(``host`` for Transcribe); the payload hash is the SHA-256 of the empty body. AWS decodes the
query and encodes it again, so a client that percent-encodes differently but equivalently still
passes; so does this check (it decodes, then botocore encodes).

Refusals (HTTP 403, ``x-amzn-ErrorType`` and ``{"message": ...}``, as ``sigv4_verifier``):

- no ``X-Amz-*`` parameters at all: ``MissingAuthenticationTokenException`` "Missing
  Authentication Token" (AWS's common error for an unsigned request);
- some missing, an unknown algorithm, a malformed credential or date, ``X-Amz-Expires`` not a
  whole number of seconds: ``IncompleteSignatureException``. AWS's wording for a presigned query
  was not found for Transcribe; these messages are ours and name what is wrong;
- ``X-Amz-Expires`` over Transcribe's maximum of 300 s ("The maximum value for X-Amz-Expires is
  300", Transcribe's guide; what AWS answers is not documented): ``InvalidSignatureException``,
  our words;
- the URL's time is over (``X-Amz-Date`` + ``X-Amz-Expires`` before the clock):
  ``InvalidSignatureException`` "Signature expired: DATE is now earlier than DATE (NOW - N
  sec.)": AWS's wording for an expired signature (``sigv4_verifier``'s sources), with the URL's
  lifetime in place of the 5 minutes of clock skew. Not verified against Transcribe;
- dated more than 5 minutes ahead of the clock: "Signature not yet current: ..." (AWS's);
- wrong region, service, date scope, no ``host`` signed: ``sigv4_verifier``'s scope check;
- an access key the stack did not issue, or a session token that is not the key's:
  ``UnrecognizedClientException`` "The security token included in the request is invalid.";
- a signature that does not match: ``InvalidSignatureException`` with AWS's message, the
  canonical request and the string to sign.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials

from voicewire_tools.local_stack.sigv4_verifier import (
    CREDENTIAL_SCOPE,  # one definition of a credential scope for both kinds of signature
    MAX_SKEW,
    MISMATCH,
    SIGV4_TIME,
    SignatureRejected,
    SignedHeadersOnly,  # botocore's signer over the headers the client named
    SigV4Verifier,
    skew_message,  # AWS's words for a signature dated too far from the clock
)

ALGORITHM = "AWS4-HMAC-SHA256"
AUTH_PARAMETERS = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)
SIGNATURE = "X-Amz-Signature"
SECURITY_TOKEN = "X-Amz-Security-Token"


@dataclass(frozen=True)
class PresignedCaller:
    """Who signed an accepted URL, and until when the URL was valid."""

    access_key_id: str
    signed_at: datetime
    expires_at: datetime
    parameters: dict[str, str]  # the query's parameters, decoded, signature included


@dataclass
class PresignedQueryVerifier:
    """Checks presigned URLs for one front door (its region and service) with the keys the
    local stack issued; ``max_expires`` is the service's cap on ``X-Amz-Expires``."""

    verifier: SigV4Verifier
    max_expires: int | None = None
    # access key id -> the session token it must come with (temporary credentials); a key not
    # listed here is a long-term key and must come without one.
    session_tokens: Mapping[str, str] = field(default_factory=dict)

    def verify(
        self, method: str, path: str, query: str, headers: Mapping[str, str]
    ) -> PresignedCaller:
        """Check a request by its query (``query``: the raw query string, as sent) and the
        headers it signed (``headers``: looked up by lower-case name; ``host`` at least).
        Raises ``SignatureRejected``."""
        pairs = parse_qsl(query, keep_blank_values=True)
        parameters = dict(pairs)
        if not any(name.startswith("X-Amz-") for name in parameters):
            raise SignatureRejected(
                "MissingAuthenticationTokenException", "Missing Authentication Token"
            )
        missing = [name for name in AUTH_PARAMETERS if not parameters.get(name)]
        if missing:
            raise SignatureRejected(
                "IncompleteSignatureException",
                "AWS query-string parameters must include "
                + ", ".join(f"'{name}'" for name in missing)
                + ". Re-examine the query-string parameters.",
            )
        if parameters["X-Amz-Algorithm"] != ALGORITHM:
            raise SignatureRejected(
                "IncompleteSignatureException",
                f"Unsupported AWS 'algorithm': '{parameters['X-Amz-Algorithm']}'; "
                f"use '{ALGORITHM}'.",
            )
        credential = CREDENTIAL_SCOPE.match(parameters["X-Amz-Credential"])
        if credential is None:
            raise SignatureRejected(
                "IncompleteSignatureException",
                "X-Amz-Credential must be <key>/<YYYYMMDD>/<region>/<service>/aws4_request, "
                f"not '{parameters['X-Amz-Credential']}'.",
            )
        amz_date = parameters["X-Amz-Date"]
        signed_headers = parameters["X-Amz-SignedHeaders"].split(";")
        # Region, service, date scope and a signed host: the header verifier's own check.
        self.verifier._check_scope(credential, amz_date, signed_headers)
        signed_at, expires_at = self._check_time(amz_date, parameters["X-Amz-Expires"])
        secret = self.verifier.keys.get(credential["key"])
        if secret is None or parameters.get(SECURITY_TOKEN) != self.session_tokens.get(
            credential["key"]
        ):
            raise SignatureRejected(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        unsigned = [(name, value) for name, value in pairs if name != SIGNATURE]
        request, signer = self._recompute(
            method, path, unsigned, headers, signed_headers, amz_date, credential["key"], secret
        )
        canonical = signer.canonical_request(request)
        string_to_sign = signer.string_to_sign(request, canonical)
        expected = signer.signature(string_to_sign, request)
        if not hmac.compare_digest(expected, parameters[SIGNATURE]):
            raise SignatureRejected(
                "InvalidSignatureException",
                f"{MISMATCH}\n\nThe Canonical String for this request should have been\n"
                f"'{canonical}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n",
            )
        return PresignedCaller(credential["key"], signed_at, expires_at, parameters)

    def _check_time(self, amz_date: str, expires: str) -> tuple[datetime, datetime]:
        try:
            signed_at = datetime.strptime(amz_date, SIGV4_TIME).replace(tzinfo=UTC)
        except ValueError:
            raise SignatureRejected(
                "IncompleteSignatureException",
                f"X-Amz-Date must be in ISO-8601 basic format (YYYYMMDD'T'HHMMSS'Z'), "
                f"not '{amz_date}'.",
            ) from None
        if not expires.isdigit():
            raise SignatureRejected(
                "IncompleteSignatureException",
                f"X-Amz-Expires must be a whole number of seconds, not '{expires}'.",
            )
        lifetime = int(expires)
        if self.max_expires is not None and lifetime > self.max_expires:
            raise SignatureRejected(
                "InvalidSignatureException",
                f"X-Amz-Expires must be at most {self.max_expires} seconds, not {lifetime}.",
            )
        now = self.verifier.clock()
        expires_at = signed_at + timedelta(seconds=lifetime)
        if expires_at < now:
            raise SignatureRejected(
                "InvalidSignatureException",
                f"Signature expired: {signed_at:{SIGV4_TIME}} is now earlier than "
                f"{now - timedelta(seconds=lifetime):{SIGV4_TIME}} ({now:{SIGV4_TIME}} - "
                f"{lifetime} sec.)",
            )
        if signed_at > now + MAX_SKEW:
            raise SignatureRejected("InvalidSignatureException", str(skew_message(signed_at, now)))
        return signed_at, expires_at

    def _recompute(
        self,
        method: str,
        path: str,
        unsigned: list[tuple[str, str]],
        received: Mapping[str, str],
        signed_headers: list[str],
        amz_date: str,
        access_key_id: str,
        secret: str,
    ) -> tuple[AWSRequest, SigV4Auth]:
        """The request as botocore's signer sees it: the decoded query (botocore encodes it
        again), only the signed headers, the empty body."""
        headers = HTTPHeaders()
        for name in signed_headers:
            headers[name] = received.get(name, "")  # a header signed but absent signs as empty
        host = received.get("host", "localhost")
        request = AWSRequest(method=method, url=f"http://{host}{path}", headers=headers)
        request.params = unsigned
        request.context["timestamp"] = amz_date
        signer = SignedHeadersOnly(
            Credentials(access_key_id, secret),
            self.verifier.service,
            self.verifier.region,
            signed_headers,
        )
        return request, signer
