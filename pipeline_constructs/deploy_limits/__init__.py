"""AWS's deploy-time limits, checked on every synthesized cloud assembly.

AWS refuses at deploy time much that a template may express (a template over 1 MB, a Lambda
environment over 4 KB, a 31st wildcard rule on a bus), and nothing here deploys to a real
account before its users do. So `application.DeployLimits`, a CDK validation plugin every
synth runs, holds every template against `LIMITS` (each with its AWS documentation page) and
fails the synth naming the stack, the resource, the value and the limit. Values resolved at
deploy time are taken at their longest (`render.py`); names that must be unique are compared
across every stack of the assembly. The config model refuses what follows from one field
first (`capacity.py`); this is the net under every combination it cannot foresee.
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
    "ARN_CHARS",
    "FIXES",
    "FUNCTION_ARN_CHARS",
    "GENERATED_NAME_CHARS",
    "LIMITS",
    "NAME_PATTERNS",
    "POLICY_ENVELOPE_BYTES",
    "STATEMENT_ID_CHARS",
    "Env",
    "Limit",
    "Rendered",
    "Renderer",
    "RulesPerBus",
    "StackTemplate",
    "Violation",
    "assembly_stacks",
    "check",
    "permission_statement_bytes",
    "reference_table",
]
