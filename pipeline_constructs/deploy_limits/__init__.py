"""AWS's deploy-time limits, checked on every synthesized cloud assembly.

CloudFormation, IAM, S3, SQS, SNS, KMS, Lambda, Step Functions, EventBridge, CloudWatch and
SSM refuse at deploy time what a template may well express: a template over 1 MB, a Lambda
environment over 4 KB, a rule description over 512 characters, a 31st wildcard rule on a bus,
two dashboards of one name in one account. Nothing here deploys to a real account before its
users do, so `application.DeployLimits` (a CDK validation plugin that every synth runs) holds
every template of the assembly against the limits of `LIMITS`, each with its AWS
documentation page, and fails the synth (`cdk synth`, `make synth`, `make diff`,
`make deploy`, the tests, the local runtime) naming the stack, the resource, the measured value
and the limit.

Values CloudFormation resolves at deploy time (`Ref`, `Fn::GetAtt`, `Fn::Sub`, SSM parameters)
are measured at their longest: an account id is 12 digits, an unknown Region 14 characters, a
resource's generated name 64 (its name when the template gives one), an ARN 80 more.

Names that must be unique are compared across every stack of the assembly: per account (IAM
roles and managed policies, dashboards, and S3 buckets, global to all accounts) or per account
and Region (everything else named), an environment-agnostic stack counting as "the account and
Region of `cdk deploy`".

The config model refuses a tenants file first where a limit follows from one field (its
bounds, `capacity.py`); this is the net under every combination it cannot foresee.
"""

from pipeline_constructs.deploy_limits.checks import (
    FUNCTION_ARN_CHARS,
    POLICY_ENVELOPE_BYTES,
    STATEMENT_ID_CHARS,
    RulesPerBus,
    StackTemplate,
    Violation,
    assembly_stacks,
    check,
    permission_statement_bytes,
)
from pipeline_constructs.deploy_limits.render import ARN_CHARS, GENERATED_NAME_CHARS, Env, Rendered, Renderer
from pipeline_constructs.deploy_limits.table import FIXES, LIMITS, NAME_PATTERNS, Limit, reference_table

__all__ = [
    "ARN_CHARS", "FIXES", "FUNCTION_ARN_CHARS", "GENERATED_NAME_CHARS", "LIMITS", "NAME_PATTERNS",
    "POLICY_ENVELOPE_BYTES", "STATEMENT_ID_CHARS", "Env", "Limit", "Rendered", "Renderer", "RulesPerBus",
    "StackTemplate", "Violation", "assembly_stacks", "check", "permission_statement_bytes", "reference_table",
]
