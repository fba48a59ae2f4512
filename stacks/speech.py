"""The SageMaker side: where the model's weights live, who may read them, and the endpoint.

    SpeechFoundation   the weights bucket (encrypted, versioned, private, TLS only, access
                       logged), the SageMaker execution role (its logs, reading that bucket),
                       and a managed policy for clients: invoke this project's endpoints only
    SpeechModelCache   (stacks/speech_model_cache.py) the model's files into the bucket
    SpeechEndpoint     one per model (``kokoro-82m`` first): the image (built from
                       container/Dockerfile at deploy time, or a prebuilt ``image_uri``), the
                       model with its weights mounted from the bucket, the endpoint config and
                       endpoint, target-tracking autoscaling and alarms

No CloudFormation property enables bidirectional streaming: the image's label
``com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true`` declares it (AWS-FACTS.md).
The weights are uncompressed under ``models/<name>/`` in the bucket (``S3Prefix``, no tarball),
mounted at ``/opt/ml/model``: the endpoint never reaches a model hub.
"""

from __future__ import annotations

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
from aws_cdk import aws_applicationautoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from stacks.access_logs import access_log_bucket
from stacks.lambda_bundle import ROOT
from stacks.nag_findings import acknowledge_wildcard

ENDPOINT_PREFIX = "voicewire-"  # every endpoint of this project is named with it
VARIANT = "AllTraffic"
METRICS_NAMESPACE = "/aws/sagemaker/Endpoints"  # where SageMaker's container metrics go
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
                    actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents",
                             "logs:DescribeLogStreams"],
                    resources=[endpoint_logs],
                ),
                iam.PolicyStatement(
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": METRICS_NAMESPACE}},
                ),
                iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
            ],
        )  # fmt: skip
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
    # The GPU engine: hexgrad's KPipeline over the mounted model directory.
    "torch": {"VOICEWIRE_ENGINE": "torch", "VOICEWIRE_MODEL_DIR": "/opt/ml/model"},
    # The CPU engine: the int8 ONNX model and the official voices (model_weights.py).
    "onnx": {
        "VOICEWIRE_ENGINE": "onnx",
        "VOICEWIRE_MODEL_PATH": "/opt/ml/model/model.onnx",
        "VOICEWIRE_VOICES_PATH": "/opt/ml/model/voices.npz",
    },
}
DEFAULT_INSTANCE = {"torch": "ml.g5.xlarge", "onnx": "ml.c7i.xlarge"}


@dataclass(frozen=True)
class EndpointSettings:
    model: str = "kokoro-82m"
    engine: str = "torch"  # torch (GPU) or onnx (CPU)
    # torch: one A10G (Kokoro-82M needs ~1 GB of GPU memory); onnx: 4 vCPUs.
    instance_type: str | None = None
    image_uri: str | None = None  # a prebuilt image: no Docker engine needed to deploy
    min_instances: int = 1
    max_instances: int = 4
    # Bidirectional sessions per instance per minute before scaling out: a session is a turn.
    target_invocations_per_instance: int = 60
    # Loading the model on a fresh instance (image pull, weights, warm-up) takes minutes.
    startup_timeout_seconds: int = 900
    p90_latency_alarm_ms: int = 2000

    @property
    def endpoint_name(self) -> str:
        return ENDPOINT_PREFIX + self.model

    @property
    def instance(self) -> str:
        return self.instance_type or DEFAULT_INSTANCE[self.engine]


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
        if settings.engine not in ENGINE_ENVIRONMENT:
            raise ValueError(f"engine must be one of {sorted(ENGINE_ENVIRONMENT)}")
        self.settings = settings
        role = foundation.execution_role
        if settings.image_uri:
            image = settings.image_uri
        else:
            asset = ecr_assets.DockerImageAsset(
                self,
                "Image",
                directory=str(ROOT),
                file="container/Dockerfile",
                platform=ecr_assets.Platform.LINUX_AMD64,  # the GPU instances are x86_64
            )
            # Pulling this image only (GetAuthorizationToken is in the foundation's policy).
            iam.Policy(
                self,
                "ImagePull",
                roles=[role],
                statements=[
                    iam.PolicyStatement(
                        actions=[
                            "ecr:BatchGetImage",
                            "ecr:GetDownloadUrlForLayer",
                            "ecr:BatchCheckLayerAvailability",
                        ],
                        resources=[asset.repository.repository_arn],
                    )
                ],
            )
            image = asset.image_uri
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
                    # New files, new model: the endpoint rolls onto them (SpeechModelCache).
                    **(
                        {"VOICEWIRE_MODEL_FILES_SHA256": model_files_digest}
                        if model_files_digest
                        else {}
                    ),
                },
            ),
        )
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
            self, "Endpoint", endpoint_name=settings.endpoint_name,
            endpoint_config_name=config.attr_endpoint_config_name,
        )  # fmt: skip
        target = autoscaling.ScalableTarget(
            self,
            "Scaling",
            service_namespace=autoscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"endpoint/{settings.endpoint_name}/variant/{VARIANT}",
            scalable_dimension="sagemaker:variant:DesiredInstanceCount",
            min_capacity=settings.min_instances,
            max_capacity=settings.max_instances,
        )
        target.node.add_dependency(endpoint)
        target.scale_to_track_metric(
            "SessionsPerInstance",
            target_value=settings.target_invocations_per_instance,
            predefined_metric=autoscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
            # Out quickly (a new instance takes minutes to load), in slowly (cold starts hurt).
            scale_out_cooldown=Duration.minutes(2),
            scale_in_cooldown=Duration.minutes(15),
        )
        dimensions = {"EndpointName": settings.endpoint_name, "VariantName": VARIANT}
        errors = cloudwatch.Metric(
            namespace="AWS/SageMaker", metric_name="Invocation5XXErrors",
            dimensions_map=dimensions, statistic="Sum", period=Duration.minutes(5),
        )  # fmt: skip
        cloudwatch.Alarm(
            self, "InvocationErrors", metric=errors, threshold=1, evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="The speech endpoint answered with 5xx errors",
        )  # fmt: skip
        latency = cloudwatch.Metric(
            namespace="AWS/SageMaker", metric_name="ModelLatency",
            dimensions_map=dimensions, statistic="p90", period=Duration.minutes(5),
        )  # fmt: skip
        cloudwatch.Alarm(
            self, "ModelLatencyP90", metric=latency,
            threshold=settings.p90_latency_alarm_ms * 1000,  # ModelLatency is in microseconds
            evaluation_periods=3, treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description="The speech model's p90 latency is high",
        )  # fmt: skip
        CfnOutput(self, "EndpointName", value=settings.endpoint_name)
