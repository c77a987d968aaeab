"""A tenant's data plane: the split and register functions and the one role they share, which
reaches only the tenant's landing prefix, work folder and ledger items; the register function's
network (`network`) and its credentials for the core system (`sink.auth`).

Split and register share one role: IAM roles are an account quota (1,000 by default, 5,000 at
most), and four roles a tenant (this one, the controller's, the closer's, the workflow's) let
1,000 tenants share an account. Neither function can reach another tenant's data.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from lambdas import contract
from pipeline_constructs import budgets, names
from pipeline_constructs.config import BearerAuth, NetworkConfig, SigV4Auth, TenantConfig
from pipeline_constructs.functions import FunctionSpec, PipelineFunction, pipeline_function


def register_timeout(chunk_size: int, sink_timeout_seconds: int, sink_batch_size: int = 1) -> Duration:
    """See `budgets.register_timeout_seconds`."""
    return Duration.seconds(
        budgets.register_timeout_seconds(chunk_size, sink_timeout_seconds, sink_batch_size)
    )


@dataclass(frozen=True)
class DataPlane:
    """The split and register functions and ``role``, the execution role they share."""

    role: iam.Role
    split: PipelineFunction
    register: PipelineFunction


def build_data_plane(
    scope: Construct,
    tenant: TenantConfig,
    *,
    budget: budgets.PageBudget,
    landing_bucket: s3.IBucket,
    work_bucket: s3.IBucket,
    ledger_table: dynamodb.ITable,
    kms_key: kms.IKey | None,
) -> DataPlane:
    """The tenant's split (`Split`) and register (`RegisterChunk`) functions on one role
    (`DataRole`), with every statement that role needs."""
    tenant_id = tenant.id
    role = iam.Role(
        scope,
        "DataRole",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=f"Execution role of tenant {tenant_id}'s split and register functions",
    )
    split = pipeline_function(
        scope,
        "Split",
        FunctionSpec(
            tenant_id=tenant_id,
            kind="split",
            function_name=names.SPLIT_FUNCTION.render(tenant_id),
            handler="lambdas.split.handler",
            timeout=Duration.minutes(15),
            memory_size=512,
            description=f"Splits tenant {tenant_id}'s files into chunks",
        ),
        environment=contract.environment(
            contract.SplitEnv(
                tenant_id=tenant_id,
                format=tenant.format,
                chunk_size=tenant.records_per_chunk,
                work_bucket=work_bucket.bucket_name,
                landing_prefix=tenant.prefix,
                ledger_table_name=ledger_table.table_name,
                duplicate_files=tenant.duplicate_files,
                max_chunks=budget.max_file_chunks,
            )
        ),
        role=role,
        tracing=tenant.tracing,
        kms_key=kms_key,
    )
    sink = tenant.sink
    register = pipeline_function(
        scope,
        "RegisterChunk",
        FunctionSpec(
            tenant_id=tenant_id,
            kind="register",
            function_name=names.REGISTER_FUNCTION.render(tenant_id),
            handler="lambdas.register_chunk.handler",
            timeout=register_timeout(tenant.records_per_chunk, sink.timeout_seconds, sink.batch_size),
            memory_size=tenant.register_memory_mb,
            description=f"Sends tenant {tenant_id}'s records to the core system, in order",
        ),
        environment=contract.environment(
            contract.RegisterEnv(
                tenant_id=tenant_id,
                work_bucket=work_bucket.bucket_name,
                ledger_table_name=ledger_table.table_name,
                sink_url=sink.url,
                sink_timeout_seconds=sink.timeout_seconds,
                sink_outage_budget_seconds=sink.outage_budget_seconds,
                landing_prefix=tenant.prefix,
                sink_batch_size=sink.batch_size,
                # `sink.auth` but its invoke_arn (what IAM lets the function invoke, not a setting
                # of the client); a type's absent fields keep the contract's defaults.
                sink_auth=sink.auth.type,
                **{
                    f"sink_auth_{name}": value
                    for name, value in sink.auth.model_dump(exclude={"type", "invoke_arn"}).items()
                },
                metric_namespace=contract.metric_namespace(),
            )
        ),
        role=role,
        tracing=tenant.tracing,
        kms_key=kms_key,
    )
    _grant_tenant_data(role, tenant, landing_bucket, work_bucket, ledger_table)
    if tenant.network is not None:
        _attach_to_network(register.function, role, tenant.network)
    _grant_sink_auth(scope, role, tenant)
    return DataPlane(role=role, split=split, register=register)


def grant_own_ledger(role: iam.IRole, ledger_table: dynamodb.ITable, tenant_id: str, *actions: str) -> None:
    """``actions`` on only this tenant's items of the ledger (its partition)."""
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="OwnLedgerItemsOnly",
            actions=list(actions),
            resources=[ledger_table.table_arn],
            conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [tenant_id]}},
        )
    )


def _grant_tenant_data(
    role: iam.Role,
    tenant: TenantConfig,
    landing_bucket: s3.IBucket,
    work_bucket: s3.IBucket,
    ledger_table: dynamodb.ITable,
) -> None:
    """Read only the tenant's landing prefix; indexes live under the tenant's own work folder."""
    role.add_to_policy(
        iam.PolicyStatement(
            # Split reads whichever file the tenant drops; register reads its chunk with a ranged
            # GET of the pinned landing object version.
            sid="ReadOwnLandingPrefix",
            actions=["s3:GetObject", "s3:GetObjectVersion"],
            resources=[landing_bucket.arn_for_objects(f"{tenant.prefix}*")],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="OwnChunks",
            # Split writes the chunk index and manifest (PutObject covers the multipart upload of a
            # large index; Abort gives up one of a failed split) and reads them when a resumed file
            # reuses them; register reads them (ranged GETs of the index).
            actions=["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"],
            resources=[work_bucket.arn_for_objects(f"{contract.work_prefix(tenant.id)}*")],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            # Without it a missing manifest answers 403 instead of 404.
            sid="ListOwnChunks",
            actions=["s3:ListBucket"],
            resources=[work_bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{contract.work_prefix(tenant.id)}*"]}},
        )
    )
    # Register's fence and progress; split looks up the content of files that succeeded
    # (duplicate_files: skip).
    grant_own_ledger(role, ledger_table, tenant.id, "dynamodb:GetItem", "dynamodb:UpdateItem")


def _attach_to_network(function: lambda_.Function, role: iam.Role, network: NetworkConfig) -> None:
    """The register function (only it: it alone calls the core system) runs in the tenant's
    subnets. The L1 `VpcConfig` by id: the L2 `vpc=` would need the subnets' Availability Zones
    (a lookup or more config) and attaches the AWS managed policy AWSLambdaVPCAccessExecutionRole
    (`*` on every ENI action); Lambda needs neither.

    Lambda manages the function's network interfaces with its execution role (the data role
    split shares): the EC2 actions of AWSLambdaVPCAccessExecutionRole (v3,
    https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaVPCAccessExecutionRole.html),
    scoped only where the Lambda guide allows it
    (https://docs.aws.amazon.com/lambda/latest/dg/configuring-vpc.html#configuring-vpc-permissions):
    Describe on `*` (it works on `*` only), Create in the configured subnets and security
    groups, Delete and the address assignments on every interface (none is known in advance,
    and Lambda must be able to delete those left in a VPC `network` no longer names). The
    function depends on the role's policy, so CloudFormation grants these before Lambda checks
    them at creation."""
    cfn_function = function.node.default_child
    assert isinstance(cfn_function, lambda_.CfnFunction)
    cfn_function.vpc_config = lambda_.CfnFunction.VpcConfigProperty(
        subnet_ids=list(network.subnet_ids), security_group_ids=list(network.security_group_ids)
    )
    stack = Stack.of(function)

    def ec2_arn(resource: str, name: str) -> str:
        return stack.format_arn(service="ec2", resource=resource, resource_name=name)

    role.add_to_policy(
        iam.PolicyStatement(
            sid="RegisterVpcDescribe",
            actions=["ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"],
            resources=["*"],
        )
    )
    # EC2 authorizes CreateNetworkInterface on the new interface (no id yet, and no ec2:Subnet
    # key: the Service Authorization Reference lists only request tags for it), the subnet and
    # each security group: naming the subnets and groups is what scopes it.
    role.add_to_policy(
        iam.PolicyStatement(
            sid="RegisterVpcCreateInterfaces",
            actions=["ec2:CreateNetworkInterface"],
            resources=[
                ec2_arn("network-interface", "*"),
                *(ec2_arn("subnet", subnet) for subnet in network.subnet_ids),
                *(ec2_arn("security-group", group) for group in network.security_group_ids),
            ],
        )
    )
    # Every interface (the only resource type of these actions), no condition: see above.
    role.add_to_policy(
        iam.PolicyStatement(
            sid="RegisterVpcManageInterfaces",
            actions=[
                "ec2:DeleteNetworkInterface",
                "ec2:AssignPrivateIpAddresses",
                "ec2:UnassignPrivateIpAddresses",
            ],
            resources=[ec2_arn("network-interface", "*")],
        )
    )


def _grant_sink_auth(scope: Construct, role: iam.Role, tenant: TenantConfig) -> None:
    """The register function's credentials for the core system: read its bearer token's secret,
    or invoke the IAM-authorized API or function URL it signs for. Split shares the role, so each
    statement holds only for credentials used by the register function
    (`lambda:SourceFunctionArn`, built from the fixed function name: no cycle)."""
    auth = tenant.sink.auth
    if not isinstance(auth, BearerAuth | SigV4Auth):
        return
    register_only = {
        "ArnEquals": {
            "lambda:SourceFunctionArn": Stack.of(scope).format_arn(
                service="lambda",
                resource="function",
                resource_name=names.REGISTER_FUNCTION.render(tenant.id),
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            )
        }
    }
    if isinstance(auth, BearerAuth):
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadOwnSinkToken",
                actions=["secretsmanager:GetSecretValue"],
                resources=[sink_secret_arn(scope, auth.secret)],
                conditions=register_only,
            )
        )
    elif auth.service == "execute-api":
        role.add_to_policy(
            iam.PolicyStatement(
                sid="InvokeOwnSinkApi",
                actions=["execute-api:Invoke"],
                resources=[auth.invoke_arn],
                conditions=register_only,
            )
        )
    else:
        # Function URLs created since October 2025 need both actions
        # (https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html); InvokeFunction only
        # through the URL, InvokeFunctionUrl only of an IAM-authorized URL.
        role.add_to_policy(
            iam.PolicyStatement(
                sid="InvokeOwnSinkFunctionUrl",
                actions=["lambda:InvokeFunctionUrl"],
                resources=[auth.invoke_arn],
                conditions={**register_only, "StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="InvokeOwnSinkFunctionThroughUrl",
                actions=["lambda:InvokeFunction"],
                resources=[auth.invoke_arn],
                conditions={**register_only, "Bool": {"lambda:InvokedViaFunctionUrl": "true"}},
            )
        )


def sink_secret_arn(scope: Construct, secret: str) -> str:
    """The ARN IAM matches a bearer token's secret by: a full ARN as given; a name in this
    account and Region, with the 6 characters Secrets Manager appends to it (`-??????`)."""
    if secret.startswith("arn:"):
        return secret
    return Stack.of(scope).format_arn(
        service="secretsmanager",
        resource="secret",
        resource_name=f"{secret}-??????",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
