"""State machine versions and the `live` alias: each deploy publishes a version of every
state machine of a tenant, the controller starts files through the parent's alias, and an
execution (with its children) finishes on the versions it started with (docs/operations.md,
"Versions, aliases and rollback").

A version is tied to its state machine's revision and kept (`Retain`) on update and delete:
the earlier one is the rollback target and what in-flight executions run on, which
CloudFormation's default would delete (https://github.com/aws/aws-cdk/issues/27250,
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-stepfunctions-statemachineversion.html).
Step Functions keeps up to 1,000 versions per state machine, deleted by hand
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_PublishStateMachineVersion.html).
Children are pinned: a parent names its children's versions, so it starts only those of its
own deploy. StartExecution of a version is authorized on the unqualified ARN, narrowed by
`states:StateMachineQualifier` (https://docs.aws.amazon.com/step-functions/latest/dg/auth-version-alias.html):
CDK's task would grant the version ARN, which authorizes nothing
(https://github.com/aws/aws-cdk/issues/30265), hence `workflows._grant_start_child`.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from lambdas import contract

#: The alias the controller and `ops resume` start executions through.
ALIAS_NAME = contract.WORKFLOW_ALIAS.render()


def publish_version(
    scope: Construct, construct_id: str, state_machine: sfn.StateMachine, description: str
) -> sfn.CfnStateMachineVersion:
    """A version of `state_machine`'s current revision, kept when a later deploy replaces it."""
    machine = state_machine.node.default_child
    assert isinstance(machine, sfn.CfnStateMachine)
    version = sfn.CfnStateMachineVersion(
        scope,
        construct_id,
        state_machine_arn=state_machine.state_machine_arn,
        # Replacement on change: a new revision publishes a new version.
        state_machine_revision_id=machine.attr_state_machine_revision_id,
        description=description,
    )
    # UpdateReplacePolicy and DeletionPolicy Retain: in-flight executions and their children
    # keep their version, and the alias can be pointed back at it (rollback). Not
    # RetainExceptOnCreate like the named resources: a version has no name that could block a
    # retried create (DeleteStateMachine deletes its versions), and a deploy that publishes one
    # and then rolls back would delete it under executions that started on it through `live`.
    version.apply_removal_policy(RemovalPolicy.RETAIN)
    return version


def live_alias(
    scope: Construct, construct_id: str, version: sfn.CfnStateMachineVersion, description: str
) -> sfn.CfnStateMachineAlias:
    """The `live` alias, all executions on `version` (the one this deploy published)."""
    return sfn.CfnStateMachineAlias(
        scope,
        construct_id,
        name=ALIAS_NAME,
        description=description,
        routing_configuration=[
            sfn.CfnStateMachineAlias.RoutingConfigurationVersionProperty(
                state_machine_version_arn=version.attr_arn, weight=100
            )
        ],
    )
