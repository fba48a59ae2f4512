"""The bucket a stack's access logs go to: private, encrypted, TLS only, kept 90 days."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_s3 as s3
from constructs import Construct

LOG_DAYS = 90


def access_log_bucket(
    scope: Construct, construct_id: str, *, for_cloudfront: bool = False
) -> s3.Bucket:
    """S3's server access logs are granted by a bucket policy (the app's feature flag).
    for_cloudfront: CloudFront's standard logs also go here, and those still write through an
    ACL, so the bucket's owner is only preferred (ACLs enabled) instead of enforced."""
    bucket = s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED if for_cloudfront else None,
        lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(LOG_DAYS))],
        removal_policy=RemovalPolicy.RETAIN,
    )
    Validations.of(bucket).acknowledge(
        Acknowledgment(
            id="AwsSolutions-S1",
            reason="This is the access-log bucket itself; logging it would log its own logs.",
        )
    )
    return bucket
