"""VoiceApi: the WebSocket API, its Lambda functions, the session table and their permissions.

    client --wss--> API Gateway WebSocket API (stage ``prod``)
                      $connect    -> authorizer (token in the query string) -> connect
                      $disconnect -> disconnect
                      ask | speak | cancel | $default -> messages --Event--> worker
    worker -> Bedrock converse_stream, SageMaker bidirectional stream, @connections, DynamoDB

The functions run the code of ``functions/`` unchanged, from one asset built without Docker
(``stacks/lambda_bundle.py``). The worker's timeout and asynchronous-invocation settings come
from ``functions/worker_policy.py``: the values the worker's idempotency design relies on.

The token secret is an SSM SecureString created by ``agent-infra`` before deploying (CloudFormation
cannot create SecureString parameters); the stack only names it and lets the authorizer read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import jsii
from aws_cdk import (
    AssetHashType,
    BundlingOptions,
    CfnOutput,
    DockerImage,
    Duration,
    ILocalBundling,
    RemovalPolicy,
    Stack,
)
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from functions.adapters.session_table import PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE
from functions.worker_policy import WORKER_POLICY
from stacks.lambda_bundle import LAMBDA_PLATFORM, LAMBDA_PYTHON, ROOT, build_bundle

ROUTES = ("ask", "speak", "cancel")
TOKEN_QUERY_PARAMETER = "token"


@dataclass(frozen=True)
class VoiceApiSettings:
    bedrock_model_id: str
    speech_endpoint_name: str = "kokoro-82m"
    token_parameter_name: str = "/voicewire/token-secret"
    stage_name: str = "prod"
    # Per-route throttling of the stage: a voice client sends a few messages per turn.
    throttle_rate: float = 50.0
    throttle_burst: int = 100


# One JSON line per connect, message and disconnect: who, which route, how it went, how long.
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "connectionId": "$context.connectionId",
    "eventType": "$context.eventType",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "error": "$context.error.message",
    "integrationLatency": "$context.integration.latency",
    "sourceIp": "$context.identity.sourceIp",
    "requestTime": "$context.requestTimeEpoch",
}


@jsii.implements(apigw.IAccessLogSettings)
class StageAccessLogs:
    """The stage's access logs, as JSON lines in ``log_group`` (never the request data: the
    connect URL carries the token)."""

    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._destination = apigw.LogGroupLogDestination(log_group)

    @property
    def destination(self) -> apigw.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigateway.AccessLogFormat:
        return apigateway.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS))


@jsii.implements(ILocalBundling)
class LocalPythonBundling:
    """CDK's local bundling: the asset is built here by uv, in seconds, with no Docker engine."""

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_options: object) -> bool:
        build_bundle(Path(output_dir))
        return True


def functions_code() -> lambda_.Code:
    """One asset for every function: the bundle is built once per synth."""
    return lambda_.Code.from_asset(
        str(ROOT / "functions"),  # what the Docker fallback would mount; the bundler reads ROOT
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            image=lambda_.Runtime.PYTHON_3_12.bundling_image,
            local=LocalPythonBundling(),
            command=[
                "bash",
                "-c",
                "echo 'build the bundle with uv (stacks/lambda_bundle.py)'; exit 1",
            ],
        ),
    )


def bedrock_resources(model_id: str, region: str, account: str) -> list[str]:
    """What ``bedrock:InvokeModelWithResponseStream`` must be allowed on for ``model_id``.

    A cross-region inference profile (``us.``, ``eu.``, ``apac.``, ``global.`` ...) routes each
    request to the foundation model in one of several regions: the profile's ARN here, and the
    model's ARN in every region (the set of regions is AWS's to change, so ``*`` for the region,
    the model itself still named)."""
    prefix, _, base_model = model_id.partition(".")
    if prefix in ("us", "eu", "apac", "us-gov", "jp", "au", "ca", "global") and base_model:
        return [
            f"arn:aws:bedrock:{region}:{account}:inference-profile/{model_id}",
            f"arn:aws:bedrock:*::foundation-model/{base_model}",
        ]
    return [f"arn:aws:bedrock:{region}::foundation-model/{model_id}"]


class VoiceApi(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, settings: VoiceApiSettings, **kwargs: object
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings
        self.table = dynamodb.TableV2(
            self,
            "Sessions",
            partition_key=dynamodb.Attribute(
                name=PARTITION_KEY, type=dynamodb.AttributeType.STRING
            ),
            sort_key=dynamodb.Attribute(name=SORT_KEY, type=dynamodb.AttributeType.STRING),
            billing=dynamodb.Billing.on_demand(),
            time_to_live_attribute=TTL_ATTRIBUTE,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=RemovalPolicy.DESTROY,  # session state only: two hours of life
        )
        code = functions_code()
        token_parameter_arn = self.format_arn(
            service="ssm",
            resource="parameter",
            resource_name=settings.token_parameter_name.lstrip("/"),
        )
        self.worker = self._function(
            "Worker", "worker", code, timeout=Duration.seconds(WORKER_POLICY.timeout_seconds),
            memory=1024,
        )  # fmt: skip
        self.worker.configure_async_invoke(
            retry_attempts=WORKER_POLICY.async_retry_attempts,
            max_event_age=Duration.seconds(WORKER_POLICY.max_event_age_seconds),
        )
        self.messages = self._function("Messages", "messages", code)
        self.connect = self._function("Connect", "connect", code)
        self.disconnect = self._function("Disconnect", "disconnect", code)
        self.authorizer = self._function("Authorizer", "authorizer", code)

        for function in (self.worker, self.messages, self.connect, self.disconnect):
            self.table.grant_read_write_data(function)
        self.worker.grant_invoke(self.messages)
        self.messages.add_environment("VOICEWIRE_WORKER_FUNCTION", self.worker.function_name)
        self.authorizer.add_to_role_policy(
            iam.PolicyStatement(actions=["ssm:GetParameter"], resources=[token_parameter_arn])
        )
        self.worker.add_to_role_policy(
            iam.PolicyStatement(
                # The bidirectional stream's own action, and InvokeEndpoint, which AWS's
                # documentation also names for it (which one IAM checks is unverified).
                actions=[
                    "sagemaker:InvokeEndpoint",
                    "sagemaker:InvokeEndpointWithBidirectionalStream",
                ],
                resources=[
                    self.format_arn(
                        service="sagemaker",
                        resource="endpoint",
                        resource_name=settings.speech_endpoint_name,
                    )
                ],
            )
        )
        self.worker.add_to_role_policy(
            iam.PolicyStatement(
                actions=["bedrock:InvokeModelWithResponseStream"],
                resources=bedrock_resources(settings.bedrock_model_id, self.region, self.account),
            )
        )

        self.api = apigw.WebSocketApi(
            self,
            "Api",
            api_name="voicewire",
            connect_route_options=apigw.WebSocketRouteOptions(
                integration=integrations.WebSocketLambdaIntegration(
                    "ConnectIntegration", self.connect
                ),
                authorizer=authorizers.WebSocketLambdaAuthorizer(
                    "TokenAuthorizer",
                    self.authorizer,
                    identity_source=[f"route.request.querystring.{TOKEN_QUERY_PARAMETER}"],
                ),
            ),
            disconnect_route_options=apigw.WebSocketRouteOptions(
                integration=integrations.WebSocketLambdaIntegration(
                    "DisconnectIntegration", self.disconnect
                )
            ),
            default_route_options=apigw.WebSocketRouteOptions(
                # Not "Default": CDK leaves a child of that id out of logical ids.
                integration=integrations.WebSocketLambdaIntegration(
                    "DefaultIntegration", self.messages
                )
            ),
        )
        for route in ROUTES:
            self.api.add_route(
                route,
                integration=integrations.WebSocketLambdaIntegration(
                    f"{route.capitalize()}Integration", self.messages
                ),
            )
        access_logs = logs.LogGroup(
            self, "AccessLogs", retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )  # fmt: skip
        self.stage = apigw.WebSocketStage(
            self,
            "Stage",
            web_socket_api=self.api,
            stage_name=settings.stage_name,
            auto_deploy=True,
            throttle=apigw.ThrottleSettings(
                rate_limit=settings.throttle_rate, burst_limit=settings.throttle_burst
            ),
            access_log_settings=StageAccessLogs(access_logs),
        )
        for function in (self.worker, self.messages):
            self.stage.grant_management_api_access(function)

        self.wss_url = CfnOutput(self, "WebSocketUrl", value=self.stage.url)
        self.callback_url = CfnOutput(self, "CallbackUrl", value=self.stage.callback_url)

    def _function(
        self,
        name: str,
        handler: str,
        code: lambda_.Code,
        timeout: Duration | None = None,
        memory: int = 512,
    ) -> lambda_.Function:
        settings = self.settings
        return lambda_.Function(
            self,
            name,
            runtime=lambda_.Runtime.PYTHON_3_12,  # the bundle's wheels are for this version
            architecture=lambda_.Architecture.ARM_64,
            code=code,
            handler=f"functions.handlers.{handler}.handler",
            # API Gateway waits 29 s for an integration; the route functions answer in ms.
            timeout=timeout or Duration.seconds(10),
            memory_size=memory,
            logging_format=lambda_.LoggingFormat.JSON,
            log_group=logs.LogGroup(
                self,
                f"{name}Logs",
                retention=logs.RetentionDays.ONE_MONTH,
                removal_policy=RemovalPolicy.DESTROY,
            ),
            environment={
                "VOICEWIRE_TABLE": self.table.table_name,
                "VOICEWIRE_SPEECH_TARGET": settings.speech_endpoint_name,
                "VOICEWIRE_LLM": "bedrock",
                "VOICEWIRE_BEDROCK_MODEL_ID": settings.bedrock_model_id,
                "VOICEWIRE_TOKEN_SECRET_PARAMETER": settings.token_parameter_name,
                "POWERTOOLS_SERVICE_NAME": "voicewire",
                "POWERTOOLS_METRICS_NAMESPACE": "voicewire",
            },
        )


assert LAMBDA_PYTHON == "3.12" and LAMBDA_PLATFORM.startswith("aarch64")  # matches the functions
