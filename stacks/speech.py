"""The SageMaker side: where the model's weights live, who may read them, and the endpoint.

    SpeechFoundation   the weights bucket (encrypted, versioned, private, TLS only, access
                       logged), the SageMaker execution role (its logs, reading that bucket),
                       and a managed policy for clients: invoke this project's endpoints only
    SpeechModelCache   (stacks/speech_model_cache.py) the model's files into the bucket
    SpeechEndpoint     one per model (``kokoro-82m`` first): the image (its engine's target of
                       container/Dockerfile, built at deploy time with Docker media types, or a
                       prebuilt ``image_uri``), the model with its weights mounted from the
                       bucket, the endpoint config and endpoint, target-tracking autoscaling and
                       alarms (on the container's own figures: sessions, engine load, first audio)

No CloudFormation property enables bidirectional streaming: the image's label
``com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true`` declares it
(docs/aws-facts.md).
The weights are uncompressed under ``models/<name>/`` in the bucket (``S3Prefix``, no tarball),
mounted at ``/opt/ml/model``: the endpoint never reaches a model hub.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aws_cdk import (
    Acknowledgment,
    ArnFormat,
    CfnOutput,
    Duration,
    RemovalPolicy,
    Stack,
    Validations,
)
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from speech_server.gpu_pairing import (
    IMAGE_CUDA,
    INFERENCE_AMI,
    INFERENCE_AMIS,
    driver_runs,
    is_gpu_instance,
)
from speech_server.load_metrics import ENGINE_BUSY, FIRST_AUDIO, OPEN_SESSIONS
from speech_server.load_metrics import NAMESPACE as LOAD_METRICS_NAMESPACE
from stacks import scaling_targets as scaling
from stacks.access_logs import access_log_bucket
from stacks.endpoint_autoscaling import EndpointAutoscaling, TargetTracking
from stacks.lambda_bundle import ROOT
from stacks.nag_findings import acknowledge_wildcard
from stacks.speech_image import DOCKER_MEDIA_TYPES, SPEECH_DOCKERFILE, engine_target

ENDPOINT_PREFIX = "voicewire-"  # every endpoint of this project is named with it
VARIANT = "AllTraffic"
# The bucket's ARN is exported under a fixed name, always (an export a deployed stack imports
# cannot be removed): SpeechModelCache imports it, and cdk-nag's finding for the copy's grant
# names it exactly (CDK's generated export names carry a hash).
WEIGHTS_ARN_EXPORT = "voicewire-weights-bucket-arn"


class SpeechFoundation(Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)
        access_logs = access_log_bucket(self, "AccessLogs")
        self.weights = s3.Bucket(
            self,
            "Weights",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            # SpeechModelCache replaces files in place: keep an old version a month, for rollback.
            lifecycle_rules=[s3.LifecycleRule(noncurrent_version_expiration=Duration.days(30))],
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="weights/",
            removal_policy=RemovalPolicy.RETAIN,  # weights are slow to assemble again
        )
        self.execution_role = iam.Role(
            self, "ExecutionRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com")
        )
        # Reading the weights, and nothing else of the bucket (not grant_read's Get*/List*).
        weights_objects = self.weights.arn_for_objects("models/*")
        reading = iam.Policy(
            self,
            "WeightsReading",
            roles=[self.execution_role],
            statements=[
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[weights_objects]),
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[self.weights.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": ["models/*"]}},
                ),
            ],
        )
        acknowledge_wildcard(
            reading,
            self.resolve(weights_objects),
            "The weights of every model under models/ of this bucket, whatever their file names.",
        )
        endpoint_logs = self.format_arn(
            service="logs",
            resource="log-group",
            resource_name="/aws/sagemaker/Endpoints/*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        logging = iam.Policy(
            self,
            "EndpointLogging",
            roles=[self.execution_role],
            statements=[
                iam.PolicyStatement(
                    actions=[
                        "logs:CreateLogGroup",
                        "logs:CreateLogStream",
                        "logs:PutLogEvents",
                        "logs:DescribeLogStreams",
                    ],
                    resources=[endpoint_logs],
                ),
                # The container's own load figures, which the endpoint scales on
                # (speech_server/load_metrics.py), and nothing else.
                iam.PolicyStatement(
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": LOAD_METRICS_NAMESPACE}},
                ),
                iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
            ],
        )
        acknowledge_wildcard(
            logging,
            self.resolve(endpoint_logs),
            "SageMaker names an endpoint's log group after the endpoint when it starts.",
        )
        acknowledge_wildcard(
            logging,
            "*",
            "cloudwatch:PutMetricData and ecr:GetAuthorizationToken have no resource-level "
            "permissions; the metric namespace is pinned by a condition.",
        )
        endpoints = self.format_arn(
            service="sagemaker", resource="endpoint", resource_name=f"{ENDPOINT_PREFIX}*"
        )
        self.invoke_policy = iam.ManagedPolicy(
            self,
            "InvokeSpeech",
            description="Invoke voicewire's speech endpoints (the bidirectional stream included)",
            statements=[
                iam.PolicyStatement(
                    actions=[
                        "sagemaker:InvokeEndpoint",
                        "sagemaker:InvokeEndpointWithBidirectionalStream",
                    ],
                    resources=[endpoints],
                )
            ],
        )
        acknowledge_wildcard(
            self.invoke_policy,
            self.resolve(endpoints),
            "Every endpoint this project deploys is named voicewire-<model>; clients of any of "
            "them, and of none other.",
        )
        CfnOutput(self, "WeightsBucket", value=self.weights.bucket_name)
        self.export_value(self.weights.bucket_arn, name=WEIGHTS_ARN_EXPORT)


ENGINE_ENVIRONMENT = {
    # The GPU engine: hexgrad's KPipeline over the mounted model directory, on CUDA or not at
    # all (the server refuses to start without a working GPU: speech_server/gpu_check.py).
    "torch": {
        "VOICEWIRE_ENGINE": "torch",
        "VOICEWIRE_DEVICE": "cuda",
        "VOICEWIRE_MODEL_DIR": "/opt/ml/model",
    },
    # The CPU engine: the int8 ONNX model and the official voices (model_weights.py).
    "onnx": {
        "VOICEWIRE_ENGINE": "onnx",
        "VOICEWIRE_MODEL_PATH": "/opt/ml/model/model.onnx",
        "VOICEWIRE_VOICES_PATH": "/opt/ml/model/voices.npz",
    },
}
DEFAULT_INSTANCE = {"torch": "ml.g5.xlarge", "onnx": "ml.c7i.xlarge"}
# The p90 of answers' first audio (the container's own FirstAudio, speech_server.load_metrics)
# above which the endpoint alarms: a few times what each engine takes when it is not queueing
# (the seed measured ~80-160 ms on an ml.g5.xlarge; the CPU engine's first chunk, 250-500 ms on
# 2 cores), so it fires when answers queue behind one another, not on a slow sentence.
FIRST_AUDIO_ALARM_MS = {"torch": 1000, "onnx": 2500}


@dataclass(frozen=True)
class EndpointSettings:
    model: str = "kokoro-82m"
    engine: str = "torch"  # torch (GPU) or onnx (CPU)
    # torch: one A10G (Kokoro-82M needs ~1 GB of GPU memory); onnx: 4 vCPUs.
    instance_type: str | None = None
    image_uri: str | None = None  # a prebuilt image: no Docker engine needed to deploy
    # GPU variants: the AMI whose NVIDIA driver runs the image's CUDA (gpu_pairing.py); without
    # one SageMaker gives an ml.g5 driver 470, which runs no CUDA 12.
    inference_ami: str | None = None
    # Autoscaling (stacks/scaling_targets.py says why these).
    min_instances: int = scaling.MIN_INSTANCES
    max_instances: int = scaling.MAX_INSTANCES
    target_engine_busy_percent: float = scaling.TARGET_ENGINE_BUSY_PERCENT
    target_sessions_per_instance: float = scaling.TARGET_SESSIONS_PER_INSTANCE
    scale_out_cooldown_seconds: int = scaling.SCALE_OUT_COOLDOWN_SECONDS
    scale_in_cooldown_seconds: int = scaling.SCALE_IN_COOLDOWN_SECONDS
    # Loading the model on a fresh instance (image pull, weights, warm-up) takes minutes.
    startup_timeout_seconds: int = 900
    # The p90 first audio that alarms; default: the engine's (FIRST_AUDIO_ALARM_MS).
    first_audio_alarm_ms: int | None = None

    @property
    def endpoint_name(self) -> str:
        return ENDPOINT_PREFIX + self.model

    @property
    def instance(self) -> str:
        return self.instance_type or DEFAULT_INSTANCE[self.engine]

    @property
    def first_audio_alarm(self) -> int:
        return self.first_audio_alarm_ms or FIRST_AUDIO_ALARM_MS[self.engine]

    @property
    def ami(self) -> str | None:
        """The inference AMI the variant names: the pairing's on a GPU, none on a CPU."""
        if not is_gpu_instance(self.instance):
            return None
        return self.inference_ami or INFERENCE_AMI

    def check(self) -> None:
        """Refuse, at synth, an endpoint that could not work as configured."""
        if self.engine not in ENGINE_ENVIRONMENT:
            raise ValueError(f"engine must be one of {sorted(ENGINE_ENVIRONMENT)}")
        if self.engine == "torch" and not is_gpu_instance(self.instance):
            raise ValueError(
                f"the torch engine needs a GPU instance (ml.g5.xlarge ...), not {self.instance}: "
                "use the onnx engine on a CPU instance"
            )
        ami = self.ami
        if ami is not None:
            if ami not in INFERENCE_AMIS:
                raise ValueError(f"unknown inference AMI {ami!r}: one of {sorted(INFERENCE_AMIS)}")
            if not driver_runs(IMAGE_CUDA, INFERENCE_AMIS[ami]):
                cuda = ".".join(map(str, IMAGE_CUDA))
                raise ValueError(
                    f"{ami}'s NVIDIA driver cannot run the image's CUDA {cuda} "
                    "(container/speech_server/gpu_pairing.py)"
                )
        if self.image_uri is not None:
            ecr_image(self.image_uri)  # raises if SageMaker could not pull it
        else:
            engine_target(self.engine)  # raises if the Dockerfile cannot build its image


class SpeechEndpoint(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        foundation: SpeechFoundation,
        settings: EndpointSettings,
        model_files_digest: str | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings.check()
        self.settings = settings
        role = foundation.execution_role
        if settings.image_uri:
            image = settings.image_uri
            # A repository of another account must also allow this role in its own policy.
            repository = ecr_image(image)
            repository_arn = self.format_arn(
                service="ecr",
                region=repository.region,
                account=repository.account,
                resource="repository",
                resource_name=repository.name,
            )
        else:
            asset = ecr_assets.DockerImageAsset(
                self,
                "Image",
                directory=str(ROOT),
                file=str(SPEECH_DOCKERFILE.relative_to(ROOT)),
                # The engine's own image: the torch engine's CUDA one, or the ONNX engine's.
                target=engine_target(settings.engine),
                # x86_64: the GPU instances and the CPU ones the stack names (ml.c7i).
                platform=ecr_assets.Platform.LINUX_AMD64,
                # Docker v2 media types: SageMaker refuses an OCI manifest (speech_image.py).
                outputs=[DOCKER_MEDIA_TYPES],
            )
            image, repository_arn = asset.image_uri, asset.repository.repository_arn
        # Pulling this image's repository only (GetAuthorizationToken is in the foundation's
        # policy): SageMaker pulls with the execution role.
        image_pull = iam.Policy(
            self,
            "ImagePull",
            roles=[role],
            statements=[
                iam.PolicyStatement(actions=list(IMAGE_PULL_ACTIONS), resources=[repository_arn])
            ],
        )
        model = sagemaker.CfnModel(
            self,
            "Model",
            execution_role_arn=role.role_arn,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image,
                model_data_source=sagemaker.CfnModel.ModelDataSourceProperty(
                    s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                        s3_uri=f"s3://{foundation.weights.bucket_name}/models/{settings.model}/",
                        s3_data_type="S3Prefix",
                        compression_type="None",
                    )
                ),
                environment={
                    **ENGINE_ENVIRONMENT[settings.engine],
                    # The container's load, for the scaling policies below.
                    "VOICEWIRE_LOAD_METRICS": "cloudwatch",
                    "VOICEWIRE_ENDPOINT_NAME": settings.endpoint_name,
                    "VOICEWIRE_VARIANT_NAME": VARIANT,
                    "VOICEWIRE_METRICS_REGION": self.region,
                    # New files, new model: the endpoint rolls onto them (SpeechModelCache).
                    **(
                        {"VOICEWIRE_MODEL_FILES_SHA256": model_files_digest}
                        if model_files_digest
                        else {}
                    ),
                },
            ),
        )
        # SageMaker checks that the role may pull the image when the model is created: the
        # model waits for the pull policy (nothing else orders them; CDK's own SageMaker Model
        # construct adds the same dependency for the same reason).
        model.node.add_dependency(image_pull)
        config = sagemaker.CfnEndpointConfig(
            self,
            "Config",
            production_variants=[
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=VARIANT,
                    model_name=model.attr_model_name,
                    initial_instance_count=settings.min_instances,
                    initial_variant_weight=1.0,
                    instance_type=settings.instance,
                    container_startup_health_check_timeout_in_seconds=settings.startup_timeout_seconds,
                    model_data_download_timeout_in_seconds=settings.startup_timeout_seconds,
                    inference_ami_version=settings.ami,
                )
            ],
        )
        Validations.of(config).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SM2",
                reason="GPU instance storage is encrypted by AWS; the model data are public "
                "weights, and a customer-managed key would add a key policy to keep for nothing.",
            )
        )
        endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=settings.endpoint_name,
            endpoint_config_name=config.attr_endpoint_config_name,
            # An update (a new image, instance type, AMI) keeps the instance count autoscaling
            # reached, instead of going back to the config's initial count.
            retain_all_variant_properties=True,
        )
        dimensions = {"EndpointName": settings.endpoint_name, "VariantName": VARIANT}
        # Registered around each endpoint update, so that an instance-type change deploys
        # (stacks/endpoint_autoscaling.py says how and why).
        self.autoscaling = EndpointAutoscaling(
            self,
            "Autoscaling",
            endpoint=endpoint,
            config=config,
            variant=VARIANT,
            min_capacity=settings.min_instances,
            max_capacity=settings.max_instances,
            policies=[
                TargetTracking(
                    name=f"{settings.endpoint_name}-{metric}",
                    namespace=LOAD_METRICS_NAMESPACE,
                    metric=metric,
                    unit=unit,
                    dimensions=dimensions,
                    target=target,
                    scale_out_cooldown_seconds=settings.scale_out_cooldown_seconds,
                    scale_in_cooldown_seconds=settings.scale_in_cooldown_seconds,
                )
                for metric, unit, target in (
                    (ENGINE_BUSY, "Percent", settings.target_engine_busy_percent),
                    (OPEN_SESSIONS, "Count", settings.target_sessions_per_instance),
                )
            ],
        )
        errors = cloudwatch.Metric(
            namespace="AWS/SageMaker",
            metric_name="Invocation5XXErrors",
            dimensions_map=dimensions,
            statistic="Sum",
            period=Duration.minutes(5),
        )
        cloudwatch.Alarm(
            self,
            "InvocationErrors",
            metric=errors,
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="The speech endpoint answered with 5xx errors",
        )
        # What a listener waits for, as the container measures it (load_metrics.FIRST_AUDIO):
        # SageMaker's ModelLatency times an invocation, and a bidirectional session is one
        # invocation however many answers it carries.
        first_audio = cloudwatch.Metric(
            namespace=LOAD_METRICS_NAMESPACE,
            metric_name=FIRST_AUDIO,
            dimensions_map=dimensions,
            statistic="p90",
            period=Duration.minutes(5),
        )
        cloudwatch.Alarm(
            self,
            "FirstAudioP90",
            metric=first_audio,
            threshold=settings.first_audio_alarm,
            evaluation_periods=3,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"Answers' first audio is slow: p90 over "
            f"{settings.first_audio_alarm} ms from the speech server, for 15 minutes (answers "
            "queue behind one another: docs/capacity.md)",
        )
        busy = cloudwatch.Metric(
            namespace=LOAD_METRICS_NAMESPACE,
            metric_name=ENGINE_BUSY,
            dimensions_map=dimensions,
            statistic="Maximum",
            period=Duration.minutes(1),
        )
        cloudwatch.Alarm(
            self,
            "EngineSaturated",
            metric=busy,
            threshold=95,
            evaluation_periods=5,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="An instance's speech engine has been busy over 95% for 5 minutes: "
            "its listeners' audio queues (docs/capacity.md); the fleet is at its maximum or "
            "scaling is not keeping up",
        )
        CfnOutput(self, "EndpointName", value=settings.endpoint_name)


# What SageMaker's execution role needs on an image's repository to pull it.
IMAGE_PULL_ACTIONS = (
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
    "ecr:BatchCheckLayerAvailability",
)
_ECR_IMAGE = re.compile(
    r"(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d)"
    r"\.amazonaws\.com(?:\.cn)?/(?P<name>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"(?::[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})?"
)


@dataclass(frozen=True)
class EcrImage:
    account: str
    region: str
    name: str  # the repository


def ecr_image(uri: str) -> EcrImage:
    """The ECR repository of an image URI (SageMaker pulls real-time images from ECR only)."""
    match = _ECR_IMAGE.fullmatch(uri)
    if match is None:
        raise ValueError(
            f"image_uri {uri!r} is not an Amazon ECR image "
            "(ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPOSITORY[:TAG|@sha256:DIGEST]): SageMaker "
            "pulls a real-time endpoint's image from ECR"
        )
    return EcrImage(match["account"], match["region"], match["name"])
