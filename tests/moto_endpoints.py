"""SageMaker endpoints on moto as the stacks deploy them: a model whose container environment
names the engine (stacks/speech.py's ENGINE_ENVIRONMENT), an endpoint config with one variant
``AllTraffic``, and the endpoint, scaled to a number of instances the way autoscaling does it
(UpdateEndpointWeightsAndCapacities). moto knows only older instance types (no ml.g5, ml.c7i):
tests use ml.g4dn.xlarge for a GPU and ml.c5.xlarge for a CPU."""

from __future__ import annotations

import boto3

ROLE = "arn:aws:iam::123456789012:role/voicewire-sagemaker"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/voicewire-speech:v1"


def deploy_endpoint(
    name: str,
    engine: str | None,
    instance_type: str,
    instances: int = 1,
    variant: str = "AllTraffic",
) -> None:
    """``engine`` None: an endpoint voicewire did not deploy (its container says no engine)."""
    sagemaker = boto3.client("sagemaker", region_name="us-east-1")
    environment = {"VOICEWIRE_ENGINE": engine} if engine else {"SOMEONE_ELSES": "model"}
    sagemaker.create_model(
        ModelName=f"{name}-model",
        ExecutionRoleArn=ROLE,
        PrimaryContainer={"Image": IMAGE, "Environment": environment},
    )
    sagemaker.create_endpoint_config(
        EndpointConfigName=f"{name}-config",
        ProductionVariants=[
            {
                "VariantName": variant,
                "ModelName": f"{name}-model",
                "InitialInstanceCount": 1,
                "InstanceType": instance_type,
            }
        ],
    )
    sagemaker.create_endpoint(EndpointName=name, EndpointConfigName=f"{name}-config")
    if instances != 1:
        sagemaker.update_endpoint_weights_and_capacities(
            EndpointName=name,
            DesiredWeightsAndCapacities=[
                {"VariantName": variant, "DesiredInstanceCount": instances}
            ],
        )
