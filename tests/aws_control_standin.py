"""A real HTTP server that speaks what moto does not: Bedrock's model-access API (REST-JSON:
``GET /foundation-model-availability/{modelId}``, ``GET /use-case-for-model-access``), Bedrock
runtime's ``POST /model/{modelId}/converse``, Service Quotas' ``ListServiceQuotas`` and
``ListAWSDefaultServiceQuotas`` (JSON 1.1, ``X-Amz-Target``) and Lambda's
``GET /2016-08-19/account-settings`` (``GetAccountSettings``, which moto answers "Not yet
implemented"), with the response and error shapes of botocore's service models. boto3's real
clients reach it through ``AWS_ENDPOINT_URL_<SERVICE>``, next to moto for the rest."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from loopback_http import LoopbackServer


@dataclass
class Account:
    """What the stand-in answers; ``calls`` records each request's operation."""

    agreement: str = "AVAILABLE"  # AVAILABLE | PENDING | NOT_AVAILABLE | ERROR
    authorization: str = "AUTHORIZED"
    entitlement: str = "AVAILABLE"
    region: str = "AVAILABLE"
    use_case_submitted: bool = True
    converse_error: tuple[str, str] | None = None  # (error type, message)
    quotas: dict[str, float] = field(default_factory=dict)  # SageMaker's: quota name -> value
    # Other services' quotas with a value applied to the account (ListServiceQuotas lists only
    # those), and AWS's defaults (ListAWSDefaultServiceQuotas): service code -> name -> value.
    applied: dict[str, dict[str, float]] = field(default_factory=dict)
    defaults: dict[str, dict[str, float]] = field(default_factory=dict)
    # Lambda's AccountLimit: 1000 is the documented default; new accounts have less.
    lambda_concurrency: int = 1000
    lambda_unreserved: int | None = None  # None: nothing reserved, all of it
    calls: list[str] = field(default_factory=list)


def serve(account: Account) -> LoopbackServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = unquote(self.path)
            if path.startswith("/foundation-model-availability/"):
                model = path.removeprefix("/foundation-model-availability/")
                account.calls.append(f"GetFoundationModelAvailability {model}")
                self._json(
                    200,
                    {
                        "modelId": model,
                        "agreementAvailability": {"status": account.agreement},
                        "authorizationStatus": account.authorization,
                        "entitlementAvailability": account.entitlement,
                        "regionAvailability": account.region,
                    },
                )
            elif path.rstrip("/") == "/2016-08-19/account-settings":
                account.calls.append("GetAccountSettings")
                unreserved = account.lambda_unreserved
                self._json(
                    200,
                    {
                        "AccountLimit": {
                            "TotalCodeSize": 80530636800,
                            "CodeSizeUnzipped": 262144000,
                            "CodeSizeZipped": 52428800,
                            "ConcurrentExecutions": account.lambda_concurrency,
                            "UnreservedConcurrentExecutions": (
                                account.lambda_concurrency if unreserved is None else unreserved
                            ),
                        },
                        "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0},
                    },
                )
            elif path == "/use-case-for-model-access":
                account.calls.append("GetUseCaseForModelAccess")
                if account.use_case_submitted:
                    self._json(200, {"formData": "eyJjb21wYW55TmFtZSI6ICJFeGFtcGxlIn0="})
                else:
                    self._error(404, "ResourceNotFoundException", "No use case found")
            else:
                self._error(404, "UnknownOperationException", path)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            target = self.headers.get("X-Amz-Target", "")
            if target in (
                "ServiceQuotasV20190624.ListServiceQuotas",
                "ServiceQuotasV20190624.ListAWSDefaultServiceQuotas",
            ):
                operation = target.split(".")[1]
                code = body["ServiceCode"]
                account.calls.append(f"{operation} {code}")
                if operation == "ListServiceQuotas":
                    listed = account.quotas if code == "sagemaker" else account.applied.get(code)
                else:
                    listed = account.defaults.get(code)
                quotas = [
                    {
                        "ServiceCode": code,
                        "QuotaName": name,
                        "Value": value,
                        # A quota's code is the same in both lists.
                        "QuotaCode": f"L-{index:08X}"
                        if code == "sagemaker"
                        else f"L-{zlib.crc32(name.encode()):08X}",
                        "Adjustable": True,
                    }
                    for index, (name, value) in enumerate((listed or {}).items())
                ]
                self._json(200, {"Quotas": quotas}, "application/x-amz-json-1.1")
            elif self.path.endswith("/converse"):
                account.calls.append(f"Converse {unquote(self.path.split('/')[2])}")
                if account.converse_error:
                    self._error(403, *account.converse_error)
                else:
                    account.agreement = "AVAILABLE"  # the first invocation subscribes
                    self._json(
                        200,
                        {
                            "output": {
                                "message": {"role": "assistant", "content": [{"text": "OK"}]}
                            },
                            "stopReason": "max_tokens",
                            "usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4},
                            "metrics": {"latencyMs": 120},
                        },
                    )
            else:
                self._error(404, "UnknownOperationException", self.path)

        def _json(self, status: int, payload: dict, kind: str = "application/json") -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, kind: str, message: str) -> None:
            data = json.dumps({"message": message}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Amzn-ErrorType", f"{kind}:http://internal.amazon.com/coral/")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return LoopbackServer(Handler, name="aws-control-standin")
