"""SigV4 as SageMaker's front door checks it: the request's signature recomputed, then every
request event's signature checked in its chain.

A client that signs wrongly (another region or service, a stale clock, a header changed after
signing, an event chain broken) fails on AWS with a 403 or a failed stream; the local runtime
used to check only that the signature headers were there, so such a client passed locally. Here
the signatures are recomputed from what arrived, with the secret of the access key the local
stack issued, and refused with the error types and messages AWS uses.

**The request** (``verify_request``): botocore's ``SigV4Auth`` builds the canonical request, the
string to sign and the signature from the method, the path, the query, the headers named in
``SignedHeaders``, ``x-amz-date`` and ``x-amz-content-sha256``
(``STREAMING-AWS4-HMAC-SHA256-EVENTS``: the body is a signed event stream), for the credential
scope's date and this front door's region and service. botocore is not the signer being checked
(the SDK signs with ``aws_sdk_signers``), so a bug in that signer shows.

**The events** (``EventChain.verify``): each request event is an envelope with ``:date`` (a
timestamp header) and ``:chunk-signature`` (32 bytes) around the encoded event, and::

    signature_n = HMAC(signing_key(date), "AWS4-HMAC-SHA256-PAYLOAD" \\n date \\n scope \\n
                       hex(signature_n-1) \\n sha256(encoded :date header) \\n sha256(payload))

seeded by the request's signature; the last event is the envelope with an empty payload. That is
the scheme of AWS's HTTP/2 event streams (Amazon Transcribe documents it: "a signature in the
authorization header that Amazon Transcribe uses as a seed signature to sign the data frames ...
An end frame. This is a signed message in event stream encoding with an empty body",
https://docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html), and what the SDK's
``aws_sdk_signers.AsyncEventSigner`` computes. It is rebuilt here from that description, not by
calling the SDK's signer, so that the check is independent of the code it checks. A wrong
signature, an event replayed or out of order, or one signed with another key breaks the chain.

Error types and messages, as AWS services answer them (restJson1: HTTP 403, ``x-amzn-ErrorType``
and a JSON body ``{"message": ...}``, e.g. https://github.com/badslug/Paw-AWSSignature4DynamicValue/issues/5):

- ``MissingAuthenticationTokenException`` "Missing Authentication Token": no ``Authorization``
  (the common error ``MissingAuthenticationToken``, HTTP 403,
  https://docs.aws.amazon.com/cloudsearch/latest/developerguide/CommonErrors.html);
- ``IncompleteSignatureException`` "Authorization header requires 'Credential' parameter. ...
  Authorization=...": an ``Authorization`` that is not a complete SigV4 one
  (https://github.com/aws/chalice/issues/828);
- ``UnrecognizedClientException`` "The security token included in the request is invalid.": an
  access key (or session token) the stack did not issue
  (https://github.com/badslug/Paw-AWSSignature4DynamicValue/issues/5,
  https://github.com/iann0036/iamlive/issues/58: 403 on a restJson1 service);
- ``InvalidSignatureException`` with, by cause (the messages listed in
  https://docs.aws.amazon.com/IAM/latest/UserGuide/signature-v4-troubleshooting.html, in the
  exact wording services send):
  "The request signature we calculated does not match the signature you provided. Check your
  AWS Secret Access Key and signing method. Consult the service documentation for details." and
  the canonical string and string to sign (https://github.com/aws/aws-sdk-js/issues/168);
  "Signature expired: 20261201T000000Z is now earlier than 20261201T000500Z (20261201T001000Z -
  5 min.)" and "Signature not yet current: ... is still later than ... (... + 5 min.)"
  (https://github.com/remind101/logspout-kinesis/issues/21);
  "Credential should be scoped to a valid region, not 'eu-west-1'. "
  (https://github.com/aws/aws-sdk-ruby/issues/508, https://github.com/JuliaCloud/AWS.jl/issues/565);
  "Credential should be scoped to correct service: 'sagemaker'. "
  (https://github.com/aws/aws-sdk-go/issues/1836, https://github.com/JuliaCloud/AWS.jl/issues/334;
  the trailing space is AWS's);
  "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: ..."
  (the troubleshooting page above);
  "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization." (an HTTP/2
  streaming front door, https://github.com/aws/aws-sdk-js-v3/issues/3796).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamMessage

SIGNED_EVENTS = "STREAMING-AWS4-HMAC-SHA256-EVENTS"
MAX_SKEW = timedelta(minutes=5)  # what AWS allows between a signature's date and its clock
SIGV4_TIME = "%Y%m%dT%H%M%SZ"
EVENT_ALGORITHM = "AWS4-HMAC-SHA256-PAYLOAD"
MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your "
    "AWS Secret Access Key and signing method. Consult the service documentation for details."
)
# An Authorization header: AWS4-HMAC-SHA256 Credential=KEY/20261130/us-east-1/sagemaker/
#     aws4_request, SignedHeaders=host;x-amz-date, Signature=<64 hex>
_ALGORITHM = "AWS4-HMAC-SHA256"
_PARAMETER = re.compile(r"\s*(?P<name>[A-Za-z]+)=(?P<value>[^,]*)\s*")
CREDENTIAL_SCOPE = re.compile(
    r"^(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request$"
)


class SignatureRejected(Exception):
    """A request AWS refuses before the stream opens: ``status``, the error type it sends as
    ``x-amzn-ErrorType`` and its message."""

    def __init__(self, error_type: str, message: str, status: int = 403) -> None:
        super().__init__(f"{status} {error_type}: {message}")
        self.error_type, self.message, self.status = error_type, message, status


class EventSignatureRejected(Exception):
    """A request event whose signature does not continue the chain: the stream ends."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type, self.message = error_type, message


@dataclass(frozen=True)
class AccessKey:
    """An access key the local stack issues (and its runtime accepts)."""

    access_key_id: str
    secret_access_key: str = field(repr=False)

    @classmethod
    def issue(cls) -> AccessKey:
        """A new random key, shaped like AWS's (20-character id, 40-character secret) so that
        nothing downstream treats it as a placeholder."""
        alphabet = string.ascii_uppercase + string.digits
        key_id = "AKIA" + "".join(secrets.choice(alphabet) for _ in range(16))
        secret = "".join(
            secrets.choice(string.ascii_letters + string.digits + "+/") for _ in range(40)
        )
        return cls(key_id, secret)

    def boto3_kwargs(self) -> dict[str, str]:
        """What ``boto3.Session`` (or a boto3 client) takes."""
        return {
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
        }


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class SigV4Verifier:
    """Who may call this front door (access key id -> secret), and where it is."""

    keys: Mapping[str, str]
    region: str
    service: str = "sagemaker"
    clock: Callable[[], datetime] = _utc_now  # the server's clock (tests move it)

    @classmethod
    def accepting(
        cls, keys: Iterable[AccessKey], region: str, clock: Callable[[], datetime] = _utc_now
    ) -> SigV4Verifier:
        return cls({key.access_key_id: key.secret_access_key for key in keys}, region, clock=clock)

    def verify_request(self, method: str, path: str, headers: Mapping[str, str]) -> EventChain:
        """Check the request's SigV4 signature (``headers``: lower-case names, HTTP/2 pseudo
        headers included); the chain its events must continue. Raises ``SignatureRejected``."""
        authorization = headers.get("authorization")
        if not authorization:
            raise SignatureRejected(
                "MissingAuthenticationTokenException", "Missing Authentication Token"
            )
        parameters = _authorization_parameters(authorization, headers)
        credential = CREDENTIAL_SCOPE.match(parameters["Credential"])
        if credential is None:  # our words: no AWS message for this case was found
            raise SignatureRejected(
                "IncompleteSignatureException",
                "Authorization header requires a 'Credential' of the form "
                f"<key>/<YYYYMMDD>/<region>/<service>/aws4_request. Authorization={authorization}",
            )
        amz_date = headers["x-amz-date"]
        signed_headers = parameters["SignedHeaders"].split(";")
        self._check_scope(credential, amz_date, signed_headers)
        self._check_clock(amz_date)
        secret = self.keys.get(credential["key"])
        # The keys the stack issues have no session token: one in the request is not ours.
        if secret is None or "x-amz-security-token" in headers:
            raise SignatureRejected(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        request, signer = self._recompute(method, path, headers, signed_headers, amz_date, secret)
        canonical = signer.canonical_request(request)
        string_to_sign = signer.string_to_sign(request, canonical)
        expected = signer.signature(string_to_sign, request)
        if not hmac.compare_digest(expected, parameters["Signature"]):
            raise SignatureRejected(
                "InvalidSignatureException",
                f"{MISMATCH}\n\nThe Canonical String for this request should have been\n"
                f"'{canonical}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n",
            )
        return EventChain(self, credential["key"], secret, expected)

    def _check_scope(
        self, credential: re.Match[str], amz_date: str, signed_headers: list[str]
    ) -> None:
        if credential["date"] != amz_date[:8]:
            raise SignatureRejected(
                "InvalidSignatureException",
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
                f"from HTTP: '{credential['date']}' != '{amz_date[:8]}', from '{amz_date}'.",
            )
        if credential["region"] != self.region:
            raise SignatureRejected(
                "InvalidSignatureException",
                f"Credential should be scoped to a valid region, not '{credential['region']}'. ",
            )
        if credential["service"] != self.service:
            raise SignatureRejected(
                "InvalidSignatureException",
                f"Credential should be scoped to correct service: '{self.service}'. ",
            )
        if "host" not in signed_headers and ":authority" not in signed_headers:
            raise SignatureRejected(
                "InvalidSignatureException",
                "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.",
            )

    def _check_clock(self, amz_date: str) -> None:
        """AWS's message names the date signed, the bound it missed and its own clock."""
        try:
            signed = datetime.strptime(amz_date, SIGV4_TIME).replace(tzinfo=UTC)
        except ValueError:  # the wording AWS services use, as recalled (no source at hand)
            raise SignatureRejected(
                "IncompleteSignatureException",
                f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'. See "
                "http://en.wikipedia.org/wiki/ISO_8601",
            ) from None
        rejected = skew_message(signed, self.clock())
        if rejected is not None:
            raise SignatureRejected("InvalidSignatureException", rejected)

    def _recompute(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        signed_headers: list[str],
        amz_date: str,
        secret: str,
    ) -> tuple[AWSRequest, SignedHeadersOnly]:
        """The request as botocore's signer sees it: only the headers the client signed."""
        values = HTTPHeaders()
        for name in signed_headers:
            # HTTP/2 carries Host as ``:authority``; a header signed but absent signs as empty.
            value = headers.get(name)
            if value is None and name == "host":
                value = headers.get(":authority")
            values[name] = value or ""
        host = headers.get(":authority") or headers.get("host") or "localhost"
        request = AWSRequest(method=method, url=f"https://{host}{path}", headers=values)
        request.context["timestamp"] = amz_date
        # botocore takes this header as the payload hash (the canonical request's last line).
        if "x-amz-content-sha256" not in values:
            request.headers["X-Amz-Content-SHA256"] = headers.get("x-amz-content-sha256", "")
        signer = SignedHeadersOnly(
            Credentials("", secret), self.service, self.region, signed_headers
        )
        return request, signer


class SignedHeadersOnly(SigV4Auth):
    """botocore's signer, with the signed headers the client chose rather than botocore's
    own choice (it would leave out ``user-agent``, for one, which another signer may sign)."""

    def __init__(
        self, credentials: Credentials, service: str, region: str, signed: list[str]
    ) -> None:
        super().__init__(credentials, service, region)
        self._signed = signed

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        chosen = HTTPHeaders()
        for name in self._signed:
            chosen[name] = request.headers.get(name, "")
        return chosen


@dataclass
class EventChain:
    """The signatures a stream's request events must carry, each continuing the one before."""

    verifier: SigV4Verifier
    access_key_id: str
    secret: str = field(repr=False)
    prior_signature: str  # hex; the request's signature seeds the chain
    events: int = 0  # verified so far
    ended: bool = False  # the signed empty event (the end of the input) has come

    def verify(self, envelope: EventStreamMessage) -> None:
        """Check one envelope's ``:chunk-signature``; raises ``EventSignatureRejected``."""
        headers = envelope.headers
        position = f"(request event {self.events + 1})"
        if self.ended:
            raise EventSignatureRejected(
                "InvalidSignatureException", f"an event after the end of the input {position}"
            )
        date_ms, signature = headers.get(":date"), headers.get(":chunk-signature")
        if not isinstance(date_ms, int) or not isinstance(signature, bytes):
            raise EventSignatureRejected(
                "IncompleteSignatureException",
                f"a request event is not signed: it needs a ':date' timestamp and a "
                f"':chunk-signature' {position}",
            )
        extra = set(headers) - {":date", ":chunk-signature"}
        if extra:
            raise EventSignatureRejected(
                "IncompleteSignatureException",
                f"unexpected headers {sorted(extra)} on a signed envelope {position}",
            )
        signed_at = datetime.fromtimestamp(date_ms / 1000, UTC)
        stale = skew_message(signed_at, self.verifier.clock())
        if stale is not None:
            raise EventSignatureRejected("InvalidSignatureException", f"{stale} {position}")
        payload = bytes(envelope.payload)
        expected = self._signature(signed_at.strftime(SIGV4_TIME), date_ms, payload)
        if not hmac.compare_digest(expected, signature.hex()):
            raise EventSignatureRejected("InvalidSignatureException", f"{MISMATCH} {position}")
        self.prior_signature = expected
        self.events += 1
        self.ended = not payload

    def _signature(self, timestamp: str, date_ms: int, payload: bytes) -> str:
        scope = f"{timestamp[:8]}/{self.verifier.region}/{self.verifier.service}/aws4_request"
        string_to_sign = "\n".join(
            [
                EVENT_ALGORITHM,
                timestamp,
                scope,
                self.prior_signature,
                hashlib.sha256(_encoded_date_header(date_ms)).hexdigest(),
                hashlib.sha256(payload).hexdigest(),
            ]
        )
        # botocore's key derivation and HMAC (a request whose date is the event's: the signing
        # key is the one for the event's day).
        request = AWSRequest(method="POST", url="https://localhost/")
        request.context["timestamp"] = timestamp
        signer = SigV4Auth(
            Credentials(self.access_key_id, self.secret),
            self.verifier.service,
            self.verifier.region,
        )
        return signer.signature(string_to_sign, request)


def _encoded_date_header(date_ms: int) -> bytes:
    """The ``:date`` header as the event-stream format encodes it (name length, name, type 8 =
    timestamp, milliseconds since the epoch as a big-endian int64). Own code: botocore only
    decodes event streams, and the encoder the SDK's signer uses is the code under check."""
    name = b":date"
    return bytes([len(name)]) + name + bytes([8]) + struct.pack(">q", date_ms)


def skew_message(signed: datetime, now: datetime) -> str | None:
    """AWS's words for a signature dated too far from its clock, or None if it is near."""
    if signed < now - MAX_SKEW:
        return (
            f"Signature expired: {signed:{SIGV4_TIME}} is now earlier than "
            f"{now - MAX_SKEW:{SIGV4_TIME}} ({now:{SIGV4_TIME}} - 5 min.)"
        )
    if signed > now + MAX_SKEW:
        return (
            f"Signature not yet current: {signed:{SIGV4_TIME}} is still later than "
            f"{now + MAX_SKEW:{SIGV4_TIME}} ({now:{SIGV4_TIME}} + 5 min.)"
        )
    return None


def _authorization_parameters(authorization: str, headers: Mapping[str, str]) -> dict[str, str]:
    """``Credential``, ``SignedHeaders`` and ``Signature`` of a SigV4 ``Authorization``, or the
    ``IncompleteSignatureException`` AWS answers, naming every part that is missing."""
    algorithm, _, rest = authorization.partition(" ")
    parameters: dict[str, str] = {}
    if algorithm == _ALGORITHM:
        for part in rest.split(","):
            match = _PARAMETER.fullmatch(part)
            if match is not None:
                parameters[match["name"]] = match["value"]
    missing = [
        f"Authorization header requires '{name}' parameter."
        for name in ("Credential", "Signature", "SignedHeaders")
        if not parameters.get(name)
    ]
    if "x-amz-date" not in headers:
        missing.append(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
        )
    if missing:
        raise SignatureRejected(
            "IncompleteSignatureException", " ".join(missing) + f" Authorization={authorization}"
        )
    if not re.fullmatch(r"[0-9a-f]{64}", parameters["Signature"]):
        raise SignatureRejected("InvalidSignatureException", MISMATCH)
    return parameters
