"""VoiceAgentRuntime: the voice agent on Bedrock AgentCore Runtime, the second front door.

    client --SigV4--> bedrock-agentcore.<region>.amazonaws.com/runtimes/<arn>/invocations (SSE)
                                                               /runtimes/<arn>/ws (WebSocket)
                      -> AgentCore Runtime (a microVM per runtime session, public network)
                         -> the agent image: python -m functions.agentcore on port 8080
    agent -> Bedrock converse_stream, SageMaker bidirectional stream (the speech endpoint)

The image is ``functions/agentcore/Dockerfile`` on the context ``stacks/agent_image.py`` stages
at synth (ARM64, built by the CDK CLI at deploy). The runtime's settings are the agent's, as
VoiceApi's worker gets them (``VoiceApiSettings``: model, speech endpoint, agent, tools,
knowledge base, limits); what only the WebSocket API has (its stage, tickets, access logs,
origins) has no counterpart here: AgentCore authenticates every caller with SigV4 (IAM) itself.

The execution role is aws-cdk-lib's (``Runtime`` makes it, trusting
``bedrock-agentcore.amazonaws.com`` for this account and runtime name only): it already holds
what AgentCore documents for any agent (logs, X-Ray, ``cloudwatch:PutMetricData`` in the
``bedrock-agentcore`` namespace, workload access tokens, and the pull of the asset's repository).
This stack adds only what this agent calls: the model, the speech endpoint, and the knowledge
base when one is given.
"""

from __future__ import annotations

from pathlib import Path

import jsii
from aws_cdk import Aws, CfnOutput, Duration, Fn, IStableStringProducer, Lazy, Stack, Stage
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.agent_image import stage_agent_image
from stacks.nag_findings import acknowledge_wildcard
from stacks.voice_api import VoiceApiSettings, bedrock_resources
from voicewire.voice_catalog import OFFICIAL_VOICES

RUNTIME_NAME = "voicewire_agent"  # [a-zA-Z][a-zA-Z0-9_]{0,47}: no hyphen
ENDPOINT_NAME = "live"  # the qualifier clients name; the service's own DEFAULT also exists
# AgentCore's own default idle timeout and its longest session, stated rather than implied:
# a conversation keeps its microVM (and its history) up to 8 hours, and is let go after 15
# minutes without a request.
IDLE_SESSION_TIMEOUT = Duration.minutes(15)
MAX_SESSION_LIFETIME = Duration.hours(8)
STAGED_CONTEXT = "voicewire-agent-image"  # under the cloud assembly's directory
# The Bedrock calls of a turn: converse_stream (InvokeModelWithResponseStream) for the agent's
# answers, converse (InvokeModel) where an agent asks for a whole reply (Strands' structured
# output).
MODEL_ACTIONS = ("bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream")
SPEECH_ACTIONS = ("sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithBidirectionalStream")


def agent_environment(settings: VoiceApiSettings, region: str) -> dict[str, str]:
    """The container's environment: what ``functions.settings.Settings.from_env`` reads, as the
    Lambda worker gets it, less the API's own (table, tickets, origins, callback URL)."""
    environment = {
        "VOICEWIRE_SPEECH_TARGET": settings.speech_endpoint_name,
        "VOICEWIRE_LLM": "bedrock",
        "VOICEWIRE_BEDROCK_MODEL_ID": settings.bedrock_model_id,
        "VOICEWIRE_AGENT": settings.agent,
        "VOICEWIRE_TOOLS": ",".join(settings.tools),
        # The voices the speech endpoint has: another voice is refused before any work.
        "VOICEWIRE_VOICES": ",".join(OFFICIAL_VOICES),
        # base64 text frames until a deployment has shown that AgentCore's /ws carries binary
        # ones (unverified: docs/deploy.md).
        "VOICEWIRE_AUDIO_DELIVERY": "binary" if settings.binary_audio else "base64",
        # The worker's stall limit for the endpoint's engine (functions/worker/policy.py).
        "VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS": (
            f"{settings.worker_policy.speech_chunk_timeout_seconds:g}"
        ),
        "VOICEWIRE_MAX_TURNS_PER_MINUTE": str(settings.max_turns_per_minute),
        "VOICEWIRE_MAX_SPEECH_SECONDS_PER_TURN": str(settings.max_speech_seconds_per_turn),
        # boto3's region inside the container: the image is the same for every region, and
        # AgentCore's own starter images set it themselves rather than rely on the service.
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "POWERTOOLS_SERVICE_NAME": "voicewire",
        "POWERTOOLS_METRICS_NAMESPACE": "voicewire",
    }
    if settings.knowledge_base_id:
        environment["VOICEWIRE_KNOWLEDGE_BASE_ID"] = settings.knowledge_base_id
    return environment


def websocket_url(runtime_arn: str, endpoint_name: str = ENDPOINT_NAME) -> str:
    """``wss://bedrock-agentcore.<region>.<suffix>/runtimes/<url-encoded ARN>/ws?qualifier=...``
    as CloudFormation computes it: the ARN exists only once the runtime does, so its ``:`` and
    ``/`` are encoded by splitting and joining (the ARN holds no other reserved character). A
    client signs it (``agent-infra url``) before connecting."""
    encoded = Fn.join("%2F", Fn.split("/", Fn.join("%3A", Fn.split(":", runtime_arn))))
    return Fn.join(
        "",
        [
            f"wss://bedrock-agentcore.{Aws.REGION}.{Aws.URL_SUFFIX}/runtimes/",
            encoded,
            f"/ws?qualifier={endpoint_name}",
        ],
    )


@jsii.implements(IStableStringProducer)
class _RuntimeRoleArn:
    """The runtime's role's ARN, once the runtime (which makes the role) exists."""

    def __init__(self, stack: VoiceAgentRuntime) -> None:
        self.stack = stack

    def produce(self) -> str:
        return self.stack.runtime.role.role_arn


class VoiceAgentRuntime(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        settings: VoiceApiSettings,
        image_context: Path | None = None,
        **kwargs: object,
    ) -> None:
        """``image_context``: where to stage the image's build context (default: beside the
        cloud assembly, which the asset is copied into)."""
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings
        staged = stage_agent_image(image_context or Path(Stage.of(self).outdir) / STAGED_CONTEXT)
        artifact = agentcore.AgentRuntimeArtifact.from_asset(
            str(staged.directory), platform=ecr_assets.Platform.LINUX_ARM64
        )
        self.listen_role = self._listen_role()
        self.runtime = agentcore.Runtime(
            self,
            "Runtime",
            runtime_name=RUNTIME_NAME,
            description="voicewire: the voice agent (functions/agentcore), /invocations and /ws",
            agent_runtime_artifact=artifact,
            # Public: the agent reaches Bedrock and SageMaker over their public endpoints, as
            # the Lambda worker does; no VPC to keep.
            network_configuration=agentcore.RuntimeNetworkConfiguration.using_public_network(),
            protocol_configuration=agentcore.ProtocolType.HTTP,
            environment_variables={
                **agent_environment(settings, Aws.REGION),
                "VOICEWIRE_LISTEN_ROLE_ARN": self.listen_role.role_arn,
            },
            lifecycle_configuration=agentcore.LifecycleConfiguration(
                idle_runtime_session_timeout=IDLE_SESSION_TIMEOUT,
                max_lifetime=MAX_SESSION_LIFETIME,
            ),
        )
        # An endpoint of ours, on the version this deploy made: clients name it as the
        # qualifier, and it moves with each deploy as the service's DEFAULT does.
        self.endpoint = self.runtime.add_endpoint(
            ENDPOINT_NAME, description="voicewire: the agent's current version"
        )
        self._grant_agent_calls(settings)
        self.listen_role.grant_assume_role(self.runtime.role)
        self._acknowledge_the_constructs_grants()

        self.runtime_arn = CfnOutput(
            self,
            "RuntimeArn",
            value=self.runtime.agent_runtime_arn,
            description="agent-infra url --runtime-arn ARN signs a /ws URL for it",
        )
        self.endpoint_arn = CfnOutput(
            self, "RuntimeEndpointArn", value=self.endpoint.agent_runtime_endpoint_arn
        )
        self.websocket_url = CfnOutput(
            self,
            "WebSocketUrl",
            value=websocket_url(self.runtime.agent_runtime_arn),
            description="unsigned: a client connects with SigV4 headers or a presigned URL",
        )

    def _grant_agent_calls(self, settings: VoiceApiSettings) -> None:
        """What a turn calls, on exactly the resources it calls them on."""
        role = self.runtime.role
        model_arns = bedrock_resources(
            settings.bedrock_model_id, self.region, self.account, self.partition
        )
        model_access = iam.Policy(
            self,
            "ModelAccess",
            roles=[role],
            statements=[iam.PolicyStatement(actions=list(MODEL_ACTIONS), resources=model_arns)],
        )
        for arn in (arn for arn in model_arns if ":*::" in arn):
            acknowledge_wildcard(
                model_access,
                self.resolve(arn),
                "An inference profile routes each request to its foundation model in one of "
                "several regions, a set AWS may change: the region is a wildcard, the model is "
                "named.",
            )
        statements = [
            # Both: the bidirectional stream's own action, and InvokeEndpoint, which AWS's
            # documentation also names for it (which one IAM checks is unverified).
            iam.PolicyStatement(
                actions=list(SPEECH_ACTIONS),
                resources=[
                    self.format_arn(
                        service="sagemaker",
                        resource="endpoint",
                        resource_name=settings.speech_endpoint_name,
                    )
                ],
            )
        ]
        if settings.knowledge_base_id:
            # search_docs' knowledge base, and nothing else of Bedrock's agent runtime.
            statements.append(
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
        iam.Policy(self, "AgentCalls", roles=[role], statements=statements)

    def _listen_role(self) -> iam.Role:
        """``listen`` on ``/ws`` hands the client a Transcribe URL signed with credentials: not
        the runtime's (which reach Bedrock and SageMaker), but those of a role that may only
        start a streaming transcription, and which only the runtime's role may assume
        (``functions/access/listen_signer.py``'s ``AssumedRole``). Made before the runtime,
        whose environment names it; the runtime's role, made by the runtime, is named in its
        trust policy when the template is written."""
        role = iam.Role(
            self,
            "ListenRole",
            assumed_by=iam.ArnPrincipal(Lazy.string(_RuntimeRoleArn(self))),
            description="voicewire: signs the Transcribe streaming URLs /ws hands its clients",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["transcribe:StartStreamTranscriptionWebSocket"], resources=["*"]
            )
        )
        acknowledge_wildcard(
            role,
            "*",
            "Amazon Transcribe's streaming actions have no resource type to name (the Service "
            "Authorization Reference lists none for StartStreamTranscriptionWebSocket): '*' is "
            "the only resource, and this role may do nothing else.",
        )
        return role

    def _acknowledge_the_constructs_grants(self) -> None:
        """cdk-nag's findings on what aws-cdk-lib's Runtime grants its role for every agent
        (``addExecutionRolePermissions``), each for exactly the resource it names."""
        policy = self.runtime.role.node.find_child("DefaultPolicy")
        logs = "arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:"
        runtime_logs = f"{logs}/aws/bedrock-agentcore/runtimes/*"
        acknowledge_wildcard(
            policy,
            runtime_logs,
            "AgentCore writes the runtime's logs to a group named after the runtime's id and "
            "endpoint, which the service makes at creation: the construct grants the "
            "runtimes' prefix.",
        )
        acknowledge_wildcard(
            policy,
            f"{runtime_logs}:log-stream:*",
            "The runtime's log streams are made per session by AgentCore.",
        )
        acknowledge_wildcard(
            policy,
            f"{logs}*",
            "logs:DescribeLogGroups alone: it lists groups and reads nothing in them, and IAM "
            "takes no narrower resource for it.",
        )
        acknowledge_wildcard(
            policy,
            "*",
            "Actions that take no resource: X-Ray's trace segments, telemetry and sampling; "
            "ecr:GetAuthorizationToken (the image pull itself names the asset repository); "
            "cloudwatch:PutMetricData, held to the bedrock-agentcore namespace by a condition.",
        )
        acknowledge_wildcard(
            policy,
            "arn:<AWS::Partition>:bedrock-agentcore:<AWS::Region>:<AWS::AccountId>:"
            "workload-identity-directory/default/workload-identity/*",
            "The agent's workload identity is made by AgentCore with the runtime; the grant is "
            "the account's default directory, which AgentCore documents for runtimes.",
        )
