"""VoicePage (optional): the browser page (``web/``) on CloudFront, pointed at the VoiceApi.

    agent-infra deploy --with-page --bedrock-model-id ...    (or cdk deploy -c page=true)

A private bucket holds ``web/`` as it is in the repository (no build step) and a ``config.json``
of ``{"url": <the VoiceApi's wss:// URL>, "tickets": true}``, which the page offers as its API
(``tickets``: connecting needs a connect ticket, so the page waits for one and says so; the
local stack answers the same fields for its own API, ``voicewire_tools/local_stack/gateway.py``,
and the page connects by itself there when no ticket is needed). CloudFront
serves them over HTTPS only, reading the bucket through an origin access control (the bucket
stays private), with the page's security headers (``voicewire_tools/page_headers.py``: the same
Content-Security-Policy the local stack sends, under which the browser tests run). Each deploy
copies the files with CDK's ``BucketDeployment`` and invalidates the distribution's cache, so a
new page is live when the deploy ends.

The page needs a connect ticket from the application's backend (or ``agent-infra token``);
nothing secret is published. If the API restricts browser origins (``allowed_origins``), add
the distribution's origin (the ``PageUrl`` output, without its trailing ``/``) to them.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnOutput, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudfront as cloudfront
from aws_cdk import aws_cloudfront_origins as origins
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3_deployment
from constructs import Construct

from stacks.access_logs import access_log_bucket
from stacks.lambda_bundle import ROOT
from stacks.nag_findings import acknowledge_bucket_deployment
from stacks.voice_api import VoiceApi
from voicewire_tools.page_headers import CONTENT_SECURITY_POLICY

PAGE_FOLDER = ROOT / "web"
CONFIG_FILE = "config.json"  # read by web/app.js: {"url": "wss://...", "tickets": true}


class VoicePage(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, api: VoiceApi, **kwargs: object
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # One bucket for both kinds of access log: S3's and CloudFront's standard logs.
        access_logs = access_log_bucket(self, "AccessLogs", for_cloudfront=True)
        self.content = s3.Bucket(
            self,
            "Content",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="content/",
            # The deployment below empties it when the stack goes: nothing here is precious.
            removal_policy=RemovalPolicy.DESTROY,
        )
        headers = cloudfront.ResponseHeadersPolicy(
            self,
            "SecurityHeaders",
            comment="voicewire page: voicewire_tools/page_headers.py",
            security_headers_behavior=cloudfront.ResponseSecurityHeadersBehavior(
                content_security_policy=cloudfront.ResponseHeadersContentSecurityPolicy(
                    content_security_policy=CONTENT_SECURITY_POLICY, override=True
                ),
                content_type_options=cloudfront.ResponseHeadersContentTypeOptions(override=True),
                frame_options=cloudfront.ResponseHeadersFrameOptions(
                    frame_option=cloudfront.HeadersFrameOption.DENY, override=True
                ),
                # A ticket may sit in the page's address: it must not leave in a Referer.
                referrer_policy=cloudfront.ResponseHeadersReferrerPolicy(
                    referrer_policy=cloudfront.HeadersReferrerPolicy.NO_REFERRER, override=True
                ),
                strict_transport_security=cloudfront.ResponseHeadersStrictTransportSecurity(
                    access_control_max_age=Duration.days(365), override=True
                ),
            ),
        )
        self.distribution = cloudfront.Distribution(
            self,
            "Distribution",
            comment="voicewire: the browser page",
            default_root_object="index.html",
            default_behavior=cloudfront.BehaviorOptions(
                origin=origins.S3BucketOrigin.with_origin_access_control(self.content),
                viewer_protocol_policy=cloudfront.ViewerProtocolPolicy.REDIRECT_TO_HTTPS,
                allowed_methods=cloudfront.AllowedMethods.ALLOW_GET_HEAD,
                cache_policy=cloudfront.CachePolicy.CACHING_OPTIMIZED,
                response_headers_policy=headers,
            ),
            price_class=cloudfront.PriceClass.PRICE_CLASS_100,
            http_version=cloudfront.HttpVersion.HTTP2_AND_3,
            enable_logging=True,
            log_bucket=access_logs,
            log_file_prefix="cloudfront/",
        )
        for finding, reason in (
            (
                "AwsSolutions-CFR1",
                "A demo page for the team's own users; the API decides who may talk to it "
                "(connect tickets, origins), not the country a page is read from.",
            ),
            (
                "AwsSolutions-CFR2",
                "Static files only, cached at the edge; the API behind the page has its own "
                "throttling and per-connection limits.",
            ),
            (
                "AwsSolutions-CFR4",
                "The distribution's default *.cloudfront.net certificate: CloudFront sets its "
                "TLS policy; a custom domain with its own certificate can set TLSv1.2_2021.",
            ),
        ):
            Validations.of(self.distribution).acknowledge(Acknowledgment(id=finding, reason=reason))

        copy_logs = logs.LogGroup(self, "CopyLogs", retention=logs.RetentionDays.ONE_MONTH)
        deployment = s3_deployment.BucketDeployment(
            self,
            "Files",
            sources=[
                s3_deployment.Source.asset(str(PAGE_FOLDER)),
                # The API's URL is known at deploy time only: CDK fills it in then. Its
                # $connect always has the ticket authorizer (stacks/voice_api.py).
                s3_deployment.Source.json_data(
                    CONFIG_FILE, {"url": api.stage.url, "tickets": True}
                ),
            ],
            destination_bucket=self.content,
            prune=True,
            retain_on_delete=False,  # destroying the stack empties the bucket, so it can go
            distribution=self.distribution,
            distribution_paths=["/*"],  # the new page is what everyone gets once deployed
            log_group=copy_logs,
        )
        acknowledge_bucket_deployment(
            deployment,
            "the page's bucket",
            self.resolve(self.content.arn_for_objects("*")),
            extra_wildcards=(
                (
                    "*",
                    "CloudFront's invalidation actions take no resource narrower than *; CDK's "
                    "BucketDeployment grants exactly cloudfront:CreateInvalidation and "
                    "GetInvalidation.",
                ),
            ),
        )

        self.page_url = CfnOutput(
            self, "PageUrl", value=f"https://{self.distribution.distribution_domain_name}/"
        )
