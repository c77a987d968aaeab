"""State machine versions and the `live` alias: each deploy publishes a version of every
state machine of a tenant, the controller starts files through the parent's alias, and an
execution (with its children) finishes on the versions it started with.

How it fits together (docs/operations.md, "Versions, aliases and rollback"):

- `publish_version`: an `AWS::StepFunctions::StateMachineVersion` tied to the state machine's
  revision (`StateMachineRevisionId`). The property needs replacement when it changes, so a
  deploy that changes a definition publishes a new version; `Retain` on update and delete
  keeps the earlier one, the rollback target (and the version in-flight executions run on;
  CloudFormation's default would delete it: aws/aws-cdk#27250, and
  https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-stepfunctions-statemachineversion.html
  warns not to delete a version long-running workflows name).
  Step Functions keeps up to 1,000 versions per state machine, deleted by hand
  (https://docs.aws.amazon.com/step-functions/latest/apireference/API_PublishStateMachineVersion.html).
- `live_alias`: an `AWS::StepFunctions::StateMachineAlias` named `live` routing 100 % to the
  parent's new version. Each deploy points it at the version it published.
- Children are pinned: the parent's definition names the page and section *versions*
  (definitions.py `_run_child`), and the section's the page version. A change to the page
  definition publishes a page version, which changes the section's and the parent's
  definitions, which publishes versions of both: a parent on version N starts only the
  children of version N, whatever was deployed since.
- IAM: Step Functions authorizes StartExecution of a version or alias on the *unqualified*
  state machine ARN, narrowed by the `states:StateMachineQualifier` condition key
  (https://docs.aws.amazon.com/step-functions/latest/dg/auth-version-alias.html), so the
  workflow role's grant on the children is the literal unqualified ARN
  (`workflows._grant_start_child`; CDK's StepFunctionsStartExecution would write the
  version ARN, which authorizes nothing: aws/aws-cdk#30265, and would make a cycle between the
  shared role's policy and the children it names).
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from lambdas import contract

#: The alias the controller and `ops resume` start executions through.
ALIAS_NAME = contract.WORKFLOW_ALIAS.render()


def publish_version(scope: Construct, construct_id: str, state_machine: sfn.StateMachine,
                    description: str) -> sfn.CfnStateMachineVersion:
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


def live_alias(scope: Construct, construct_id: str, version: sfn.CfnStateMachineVersion,
               description: str) -> sfn.CfnStateMachineAlias:
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
