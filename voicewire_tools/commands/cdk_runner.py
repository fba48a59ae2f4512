"""Running the CDK CLI for ``speech-infra`` and ``agent-infra``: checks first, then ``cdk``.

The CDK CLI is npm's ``aws-cdk`` at a pinned 2.x release (3.0.0 on npm is deprecated), run
through ``npx`` from the repository root, where ``cdk.json`` names the app. What is missing
(Node.js, AWS credentials, a region, the account's CDK bootstrap) is said in one line with its
cause and its fix, before anything slow starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CDK_CLI = "aws-cdk@2.1148.1"
BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"  # the default qualifier's


class InfraError(Exception):
    """Something the deploying machine lacks; the message says what and how to fix it."""


def cdk_command(action: str, stacks: Sequence[str], context: Mapping[str, str]) -> list[str]:
    # The app runs on this interpreter (the project's environment, with aws-cdk-lib), whatever
    # `python` means on the PATH; cdk.json says the same for those who run the CLI directly.
    command = ["npx", "--yes", CDK_CLI, action, *stacks, "--app", f"{sys.executable} app.py"]
    for name, value in context.items():
        command += ["--context", f"{name}={value}"]
    return command


def check_node() -> None:
    if shutil.which("node") is None or shutil.which("npx") is None:
        raise InfraError(
            "Node.js is not installed, and the CDK CLI runs on it: install Node.js 20 or newer "
            "(with npm's npx), then run this again"
        )


def check_account() -> tuple[str, str]:
    """The account and region the credentials reach; InfraError if there are none."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    session = boto3.Session()
    if session.get_credentials() is None:
        raise InfraError(
            "no AWS credentials found: set AWS_PROFILE, or run `aws configure` or "
            "`aws sso login`, then run this again"
        )
    region = session.region_name
    if not region:
        raise InfraError("no AWS region set: set AWS_REGION (or a profile's region)")
    try:
        account = session.client("sts").get_caller_identity()["Account"]
    except (BotoCoreError, ClientError) as error:
        raise InfraError(f"the AWS credentials do not work ({error}): renew them") from None
    return account, region


def check_bootstrap(account: str, region: str) -> None:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        boto3.client("ssm", region_name=region).get_parameter(Name=BOOTSTRAP_PARAMETER)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ParameterNotFound":
            raise InfraError(
                f"account {account} is not bootstrapped for the CDK in {region}: run "
                f"`npx {CDK_CLI} bootstrap aws://{account}/{region}` once, then this again"
            ) from None
        raise InfraError(f"could not check the CDK bootstrap ({error})") from None
    except BotoCoreError as error:
        raise InfraError(f"could not check the CDK bootstrap ({error})") from None


def run_cdk(
    action: str, stacks: Sequence[str], context: Mapping[str, str], needs_account: bool = True
) -> int:
    """Check what ``action`` needs, then run ``cdk action stacks``; returns its exit status."""
    check_node()
    env = dict(os.environ)
    env.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    if needs_account:
        account, region = check_account()
        if action == "deploy":
            check_bootstrap(account, region)
        env.setdefault("CDK_DEFAULT_ACCOUNT", account)
        env.setdefault("CDK_DEFAULT_REGION", region)
    return subprocess.run(cdk_command(action, stacks, context), cwd=ROOT, env=env).returncode
