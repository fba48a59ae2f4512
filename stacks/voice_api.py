"""VoiceApi: the WebSocket API, its Lambda functions, the session table and their permissions.

    client --wss--> API Gateway WebSocket API (stage ``prod``)
                      $connect    -> authorizer (token in the query string) -> connect
                      $disconnect -> disconnect
                      ask | speak | cancel | $default -> messages --Event--> worker
    worker -> Bedrock converse_stream, SageMaker bidirectional stream, @connections, DynamoDB

The functions run the code of ``functions/`` unchanged, from one asset built without Docker
(``stacks/lambda_bundle.py``). The worker's timeout and asynchronous-invocation settings come
from ``functions/worker/policy.py`` for the speech endpoint's engine: the values the worker's
idempotency design relies on.

Two settings depend on the account and the deployment, and ``agent-infra deploy`` sets them:
``access_logs`` (a stage with access logs needs the account's API Gateway CloudWatch role, which
a fresh account lacks; without it the stage cannot be created) and ``binary_audio`` (audio as
binary frames by default, only once ``agent-infra check`` has shown this deployment carries
them; else base64 text frames).

The token secret is an SSM SecureString created by ``agent-infra`` before deploying (CloudFormation
cannot create SecureString parameters); the stack only names it and lets the authorizer read it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import jsii
from aws_cdk import (
    Acknowledgment,
    Annotations,
    ArnFormat,
    AssetHashType,
    BundlingOptions,
    CfnOutput,
    DockerImage,
    Duration,
    ILocalBundling,
    RemovalPolicy,
    Stack,
    Validations,
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

from functions.access.tickets import TOKEN_SECRET_PARAMETER
from functions.adapters.session_table import PARTITION_KEY, SORT_KEY, TTL_ATTRIBUTE
from functions.worker.policy import WorkerPolicy, worker_policy_for
from stacks import scaling_targets as scaling
from stacks.lambda_bundle import LAMBDA_PLATFORM, LAMBDA_PYTHON, ROOT, build_bundle
from stacks.nag_findings import acknowledge_wildcard
from stacks.pipeline_monitoring import PipelineMonitoring
from voicewire.client_protocol import CLIENT_ACTIONS
from voicewire.speech_in.listen_offer import MAX_LISTENS_PER_MINUTE
from voicewire.voice_catalog import OFFICIAL_VOICES

# ask, speak, cancel, voices, history: the messages function's. ``listen`` has a function of its
# own (a two-way route whose role may only start a Transcribe stream).
LISTEN_ROUTE = "listen"
ROUTES = tuple(action for action in CLIENT_ACTIONS if action != LISTEN_ROUTE)
TOKEN_QUERY_PARAMETER = "token"


@dataclass(frozen=True)
class VoiceApiSettings:
    bedrock_model_id: str
    speech_endpoint_name: str = "kokoro-82m"
    speech_engine: str = "torch"  # the endpoint's: the worker's time limits follow from it
    # Conversations the speech fleet holds at its largest (instances x sessions per instance,
    # stacks/speech.py, from docs/capacity.md): what the stage's shared throttle is sized for.
    speech_capacity_sessions: int = int(
        scaling.MAX_INSTANCES * scaling.TARGET_SESSIONS_PER_INSTANCE
    )
    token_parameter_name: str = TOKEN_SECRET_PARAMETER
    stage_name: str = "prod"
    # Browser origins that may connect (empty: any); see functions/access/origins.py.
    allowed_origins: tuple[str, ...] = ()
    max_turns_per_minute: int = 30  # per connection
    max_listens_per_minute: int = MAX_LISTENS_PER_MINUTE  # per connection: Transcribe URLs
    max_speech_seconds_per_turn: float = 360.0
    # The stage's JSON access logs: only where the account has API Gateway's CloudWatch role.
    access_logs: bool = False
    # Audio as binary frames by default: only once agent-infra check proved them here.
    binary_audio: bool = False
    # Who answers (builtin, strands, strands:module:function), with which tools
    # (functions/tools), and the Bedrock Knowledge Base search_docs asks instead of the docs.
    agent: str = "builtin"
    tools: tuple[str, ...] = ("current_time", "search_docs")
    knowledge_base_id: str | None = None

    @property
    def stage_throttle(self) -> tuple[float, int]:
        """The stage's route throttle (rate per second, burst), which every client shares.

        Each connection is held to its own limits by the functions (``max_turns_per_minute``,
        ``max_speech_seconds_per_turn``); this one only stops what the whole deployment could
        not serve anyway: every conversation the speech fleet holds at its largest, each at its
        own turn limit, each turn an action and a cancel. One fixed figure for every client
        (50/s before) throttled a busy deployment's ordinary traffic as one."""
        per_second = self.speech_capacity_sessions * self.max_turns_per_minute / 60 * 2
        rate = float(max(10, math.ceil(per_second)))
        return rate, int(2 * rate)

    @property
    def worker_policy(self) -> WorkerPolicy:
        return worker_policy_for(self.speech_engine, self.max_speech_seconds_per_turn)


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


INFERENCE_PROFILE_PREFIXES = ("us", "eu", "apac", "us-gov", "jp", "au", "ca", "global")


def foundation_model_of(model_id: str) -> str:
    """The foundation model behind a model id or a cross-region inference profile's id."""
    prefix, _, base_model = model_id.partition(".")
    return base_model if prefix in INFERENCE_PROFILE_PREFIXES and base_model else model_id


def bedrock_resources(
    model_id: str, region: str, account: str, partition: str = "aws"
) -> list[str]:
    """What ``bedrock:InvokeModelWithResponseStream`` must be allowed on for ``model_id``.

    A cross-region inference profile (``us.``, ``eu.``, ``apac.``, ``global.`` ...) routes each
    request to the foundation model in one of several regions: the profile's ARN here, and the
    model's ARN in every region (the set of regions is AWS's to change, so ``*`` for the region,
    the model itself still named). ``partition``: the stack's (``aws``, ``aws-cn``,
    ``aws-us-gov``; a token at synth)."""
    base_model = foundation_model_of(model_id)
    if base_model != model_id:
        return [
            f"arn:{partition}:bedrock:{region}:{account}:inference-profile/{model_id}",
            f"arn:{partition}:bedrock:*::foundation-model/{base_model}",
        ]
    return [f"arn:{partition}:bedrock:{region}::foundation-model/{model_id}"]


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
        policy = settings.worker_policy
        self.worker = self._function(
            "Worker",
            "worker",
            code,
            timeout=Duration.seconds(policy.timeout_seconds),
            memory=1024,
        )
        self.worker.add_environment(
            "VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS", f"{policy.speech_chunk_timeout_seconds:g}"
        )
        self.worker.add_environment("VOICEWIRE_AGENT", settings.agent)
        self.worker.add_environment("VOICEWIRE_TOOLS", ",".join(settings.tools))
        if settings.knowledge_base_id:
            self.worker.add_environment("VOICEWIRE_KNOWLEDGE_BASE_ID", settings.knowledge_base_id)
            # search_docs' knowledge base, and nothing else of Bedrock's agent runtime.
            self.worker.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["bedrock:Retrieve"],
                    resources=[
                        self.format_arn(
                            service="bedrock",
                            resource="knowledge-base",
                            resource_name=settings.knowledge_base_id,
                        )
                    ],
                )
            )
        self.worker.configure_async_invoke(
            retry_attempts=policy.async_retry_attempts,
            max_event_age=Duration.seconds(policy.max_event_age_seconds),
        )
        self.messages = self._function("Messages", "messages", code)
        self.connect = self._function("Connect", "connect", code)
        self.disconnect = self._function("Disconnect", "disconnect", code)
        self.authorizer = self._function("Authorizer", "authorizer", code)
        self.listen = self._function("Listen", "listen", code)

        for function in (self.worker, self.messages, self.connect, self.disconnect):
            self.table.grant_read_write_data(function)
        # The authorizer records each connect ticket's first use, and needs nothing else.
        self.table.grant(self.authorizer, "dynamodb:PutItem")
        # listen counts the connection's listens (its rate window: two conditional updates).
        self.table.grant(self.listen, "dynamodb:UpdateItem")
        self.listen.add_environment(
            "VOICEWIRE_MAX_LISTENS_PER_MINUTE", str(settings.max_listens_per_minute)
        )
        # The function itself, not grant_invoke's "<arn>:*" (every version and alias).
        self.messages.add_to_role_policy(
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"], resources=[self.worker.function_arn]
            )
        )
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
        model_access_arns = bedrock_resources(
            settings.bedrock_model_id, self.region, self.account, self.partition
        )
        model_access = iam.Policy(
            self,
            "ModelAccess",
            roles=[self.worker.role],
            statements=[
                iam.PolicyStatement(
                    actions=["bedrock:InvokeModelWithResponseStream"],
                    resources=model_access_arns,
                )
            ],
        )
        profile_routes = [arn for arn in model_access_arns if ":*::" in arn]
        for arn in profile_routes:
            acknowledge_wildcard(
                model_access,
                self.resolve(arn),
                "An inference profile routes each request to its foundation model in one of "
                "several regions, a set AWS may change: the region is a wildcard, the model is "
                "named.",
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
        # Two-way: API Gateway sends the function's answer (the presigned URL) to the client.
        self.api.add_route(
            LISTEN_ROUTE,
            integration=integrations.WebSocketLambdaIntegration("ListenIntegration", self.listen),
            return_response=True,
        )
        self._grant_listen()
        rate, burst = settings.stage_throttle
        self.stage = apigw.WebSocketStage(
            self,
            "Stage",
            web_socket_api=self.api,
            stage_name=settings.stage_name,
            auto_deploy=True,
            throttle=apigw.ThrottleSettings(rate_limit=rate, burst_limit=burst),
            access_log_settings=self._access_logs(),
        )
        if not settings.access_logs:
            Validations.of(self.stage).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-APIG1",
                    reason="The account has no API Gateway CloudWatch role (agent-infra deploy "
                    "checked): a stage with access logs could not be created. The functions "
                    "log every connect, message and turn themselves.",
                )
            )
        connections_arn = self.format_arn(
            service="execute-api",
            resource=self.api.api_id,
            resource_name=f"{settings.stage_name}/*/@connections/*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        manage_connections = iam.Policy(
            self,
            "ManageConnections",
            roles=[self.worker.role, self.messages.role],
            statements=[
                iam.PolicyStatement(
                    actions=["execute-api:ManageConnections"],
                    resources=[connections_arn],
                )
            ],
        )
        acknowledge_wildcard(
            manage_connections,
            self.resolve(connections_arn),
            "Connection ids are made by API Gateway at run time: the grant is this API's "
            "stage's @connections, any connection, any of POST, GET and DELETE.",
        )
        Validations.of(self.api).acknowledge(
            Acknowledgment(
                id="AwsSolutions-APIG4",
                reason="API Gateway allows an authorizer on $connect only; every other route's "
                "messages arrive on a connection that $connect's token authorizer admitted.",
            )
        )

        self.monitoring = PipelineMonitoring(self, "Monitoring", self.worker)

        self.wss_url = CfnOutput(self, "WebSocketUrl", value=self.stage.url)
        self.callback_url = CfnOutput(self, "CallbackUrl", value=self.stage.callback_url)

    def _access_logs(self) -> StageAccessLogs | None:
        """The stage's access logs where the account can take them; else none, said at synth
        and acknowledged, since creating the stage would fail (docs/aws-facts.md)."""
        if self.settings.access_logs:
            group = logs.LogGroup(
                self,
                "AccessLogs",
                retention=logs.RetentionDays.ONE_MONTH,
                removal_policy=RemovalPolicy.DESTROY,
            )
            return StageAccessLogs(group)
        Annotations.of(self).add_warning_v2(
            "voicewire:no-access-logs",
            "The WebSocket stage has no access logs: they need the account's API Gateway "
            "CloudWatch role, which a fresh account lacks (agent-infra deploy checks, and "
            "creates it with --create-api-logging-role). With the role in place: "
            "-c access_logs=true.",
        )
        return None

    def _grant_listen(self) -> None:
        """The listen function signs Transcribe streaming URLs with its role's credentials, so
        that role may start a streaming transcription over a WebSocket and, besides, only count
        the connection's listens (no read, no @connections: its answer is the route's
        response)."""
        statement = iam.PolicyStatement(
            actions=["transcribe:StartStreamTranscriptionWebSocket"], resources=["*"]
        )
        self.listen.add_to_role_policy(statement)
        acknowledge_wildcard(
            self.listen.role,  # type: ignore[arg-type]
            "*",
            "Amazon Transcribe's streaming actions have no resource type to name (the Service "
            "Authorization Reference lists none for StartStreamTranscriptionWebSocket): '*' is "
            "the only resource, and this role may do nothing else.",
        )

    def _function(
        self,
        name: str,
        handler: str,
        code: lambda_.Code,
        timeout: Duration | None = None,
        memory: int = 512,
    ) -> lambda_.Function:
        settings = self.settings
        log_group = logs.LogGroup(
            self,
            f"{name}Logs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        # Its own role, allowed to write its own log group: not the managed
        # AWSLambdaBasicExecutionRole, which may write to every log group of the account.
        role = iam.Role(
            self, f"{name}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")
        )
        log_group.grant_write(role)
        function = lambda_.Function(
            self,
            name,
            role=role,
            runtime=lambda_.Runtime.PYTHON_3_12,  # the bundle's wheels are for this version
            architecture=lambda_.Architecture.ARM_64,
            code=code,
            handler=f"functions.handlers.{handler}.handler",
            # API Gateway waits 29 s for an integration; the route functions answer in ms.
            timeout=timeout or Duration.seconds(10),
            memory_size=memory,
            logging_format=lambda_.LoggingFormat.JSON,
            log_group=log_group,
            environment={
                "VOICEWIRE_TABLE": self.table.table_name,
                "VOICEWIRE_SPEECH_TARGET": settings.speech_endpoint_name,
                "VOICEWIRE_LLM": "bedrock",
                "VOICEWIRE_BEDROCK_MODEL_ID": settings.bedrock_model_id,
                "VOICEWIRE_TOKEN_SECRET_PARAMETER": settings.token_parameter_name,
                # The voices SpeechModelCache puts beside the model: requests for another voice
                # are refused before any work, and the voices action lists these.
                "VOICEWIRE_VOICES": ",".join(OFFICIAL_VOICES),
                "VOICEWIRE_ALLOWED_ORIGINS": ",".join(settings.allowed_origins),
                "VOICEWIRE_MAX_TURNS_PER_MINUTE": str(settings.max_turns_per_minute),
                "VOICEWIRE_MAX_SPEECH_SECONDS_PER_TURN": str(settings.max_speech_seconds_per_turn),
                "VOICEWIRE_AUDIO_DELIVERY": "binary" if settings.binary_audio else "base64",
                "POWERTOOLS_SERVICE_NAME": "voicewire",
                "POWERTOOLS_METRICS_NAMESPACE": "voicewire",
            },
        )
        Validations.of(function).acknowledge(
            Acknowledgment(
                id="AwsSolutions-L1",
                reason="Python 3.12: the version the bundle's native wheels are built for and the "
                "tests run; a newer runtime follows with the project's Python.",
            )
        )
        return function


assert LAMBDA_PYTHON == "3.12" and LAMBDA_PLATFORM.startswith("aarch64")  # matches the functions
