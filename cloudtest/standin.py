"""The cloud test's recording core-system stand-in, a small stack of its own: a Lambda
function behind an IAM-authorized function URL (only the test tenants' register functions,
granted `sink.auth: {type: sigv4, service: lambda}`, can call it) that records each request in
a DynamoDB table (`standin_function/recorder.py`). Everything in it is destroyed with it:
throwaway by design, unlike the pipeline's retained resources.

    cdk deploy --app "python -m cloudtest.standin" -c run_id=<id>   # what `python -m cloudtest` runs
"""

from __future__ import annotations

import sys
from pathlib import Path

from aws_cdk import App, CfnOutput, Duration, RemovalPolicy, Stack, Tags, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from cloudtest.runs import RUN_TAG, standin_function_name, standin_stack_name
from pipeline_constructs.application import new_app
from pipeline_constructs.functions import RUNTIME

CODE = Path(__file__).resolve().parent / "standin_function"


class CoreStandInStack(Stack):
    """`self.function`, `self.url`, `self.table`; outputs `FunctionUrl`, `FunctionArn`, `TableName`."""

    def __init__(self, scope: Construct, run_id: str, **kwargs: object) -> None:
        super().__init__(
            scope,
            standin_stack_name(run_id),
            description=f"ordered-ingest cloud test {run_id}: "
            "a recording core-system stand-in (deleted by the test)",
            **kwargs,
        )
        self.table = dynamodb.TableV2(
            self,
            "Requests",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing=dynamodb.Billing.on_demand(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
        name = standin_function_name(run_id)
        log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/lambda/{name}",
            retention=logs.RetentionDays.ONE_DAY,
            removal_policy=RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Execution role of {name}: its table and its log group",
        )
        self.function = lambda_.Function(
            self,
            "Recorder",
            function_name=name,
            runtime=RUNTIME,
            architecture=lambda_.Architecture.ARM_64,
            code=lambda_.Code.from_asset(str(CODE)),
            handler="recorder.handler",
            role=role,
            timeout=Duration.seconds(10),
            memory_size=256,
            log_group=log_group,
            environment={"TABLE_NAME": self.table.table_name},
            description="Records what the cloud test's tenants send; keeps the core system's contract",
        )
        log_group.grant_write(role)
        self.table.grant_read_write_data(role)
        self.url = self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM)
        CfnOutput(self, "FunctionUrl", value=self.url.url)
        CfnOutput(self, "FunctionArn", value=self.function.function_arn)
        CfnOutput(self, "TableName", value=self.table.table_name)
        Tags.of(self).add(RUN_TAG, run_id)


def build(run_id: str, app: App | None = None) -> tuple[App, CoreStandInStack]:
    app = app or new_app()
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, CoreStandInStack(app, run_id)


def main() -> int:
    app = new_app()
    run_id = app.node.try_get_context("run_id")
    if not run_id:
        print("cloudtest.standin: give the run id: -c run_id=<id>", file=sys.stderr)
        return 1
    build(run_id, app)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
