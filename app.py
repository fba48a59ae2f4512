"""CDK entry point: ``cdk synth`` / ``cdk deploy`` run it through ``cdk.json``.

Skeleton: the stacks (model cache, speech endpoint, voice pipeline) are defined in ``stacks/`` by
the infrastructure work, and this app adds none yet. It runs once ``aws-cdk-lib`` is installed.
"""

import sys

try:
    import aws_cdk as cdk
except ImportError:
    sys.exit("app.py needs aws-cdk-lib, which arrives with the CDK stacks (stacks/)")

app = cdk.App()
app.synth()
