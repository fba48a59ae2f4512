"""The worker: one asynchronous invocation per turn, from the message route.

The handler parses the job, names the invocation (its request id claims the turn; its remaining
time is the turn's deadline) and runs the job (``functions.worker.run``) on the execution
environment's event loop, which outlives the invocation, so that a speech session kept for the
next turn stays usable. The job always returns normally: a turn that fails still ends, and
Lambda has nothing to retry.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.environment_loop import run_in_environment
from functions.observability import logger, metrics
from functions.wiring import current_adapters
from functions.worker.guards import Invocation
from functions.worker.job import WorkerJob
from functions.worker.run import run_job
from voicewire.speech_link import sagemaker_client

# While Lambda initializes the environment, not on the first turn's critical path: importing
# the SageMaker SDK and awscrt takes ~0.7 s, building boto3's session ~0.1 s.
sagemaker_client.shared_boto3_session()


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    job = WorkerJob.model_validate(event)
    logger.append_keys(connection_id=job.connection_id, turn_id=job.turn_id)
    # Dimensions are per invocation: a warm environment must not carry the last turn's mode.
    metrics.clear_metrics()
    metrics.add_dimension(name="mode", value=job.mode)
    invocation = Invocation(
        request_id=context.aws_request_id,
        deadline=time.monotonic() + context.get_remaining_time_in_millis() / 1000,
    )
    # Not asyncio.run: the environment's loop outlives the invocation, and so can its session.
    status = run_in_environment(run_job(job, current_adapters(), invocation))
    return {"status": status}
