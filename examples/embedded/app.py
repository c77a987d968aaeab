"""A team's own CDK app with ordered-ingest pipelines in its own stack (docs/library.md)."""

from pathlib import Path

from aws_cdk import App, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from pipeline_constructs import (
    DeployLimits,
    SharedResources,
    SharedResourcesProps,
    TenantPipeline,
    load_config,
)

TENANTS = Path(__file__).with_name("tenants.yaml")


class PaymentsIngest(Stack):
    """The team's alerts topic, the pipelines' shared resources and one pipeline per tenant."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id, description="Payments: ordered file intake")
        key = kms.Key(self, "AlertsKey", enable_key_rotation=True)
        key.grant_encrypt_decrypt(iam.ServicePrincipal("cloudwatch.amazonaws.com"))  # alarms publish
        alerts = sns.Topic(self, "Alerts", master_key=key, enforce_ssl=True)
        shared = SharedResources(
            self,
            "Ingest",
            SharedResourcesProps(alarm_topic_arn=alerts.topic_arn, alarm_topic_key_arn=key.key_arn),
        )
        for tenant in load_config(TENANTS).tenants:
            TenantPipeline(self, tenant.id, tenant=tenant, shared=shared.refs())


def build(outdir: str | None = None) -> App:
    """The app: one stack, checked against AWS's deploy-time limits and cdk-nag at each synth."""
    app = App(outdir=outdir)
    PaymentsIngest(app, "Payments-Ingest")
    Validations.of(app).add_plugins(DeployLimits(), AwsSolutionsChecks(app))
    return app


if __name__ == "__main__":
    build().synth()
