"""Versions and the `live` alias in the template (pipeline_constructs/versions.py): each deploy
publishes a version of the three state machines, files start through the alias, and a parent
version starts only the child versions it was published with."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Template

from pipeline_constructs import workflows
from tests.conftest import pattern_matches, resolved, status_change, synthesize, workflow_arn

MACHINES = {
    "Workflow": "acme-file-ingest-workflow",
    "SectionWorkflow": "acme-file-ingest-section",
    "PageWorkflow": "acme-file-ingest-page",
}


def _one(template: Template, resource_type: str, prefix: str) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, v) for k, v in template.find_resources(resource_type).items() if k.startswith(prefix)]
    return found


def _parts(definition_string: Any) -> list[Any]:
    return definition_string["Fn::Join"][1] if isinstance(definition_string, dict) else [definition_string]


@pytest.mark.parametrize("machine", MACHINES)
def test_each_deploy_publishes_a_version_of_each_state_machine_and_keeps_the_earlier_ones(acme, machine):
    """GIVEN a tenant stack THEN each of its three state machines has a version resource tied to
    its revision (a new revision replaces it: a new version) and retained on replacement and
    deletion (in-flight executions keep it, the alias can go back to it)."""
    machine_id, _ = _one(acme, "AWS::StepFunctions::StateMachine", f"Pipeline{machine}")
    _, version = _one(acme, "AWS::StepFunctions::StateMachineVersion", f"Pipeline{machine}Version")
    assert version["Properties"]["StateMachineArn"] == {"Ref": machine_id}
    assert version["Properties"]["StateMachineRevisionId"] == {
        "Fn::GetAtt": [machine_id, "StateMachineRevisionId"]
    }
    assert version["UpdateReplacePolicy"] == "Retain"
    assert version["DeletionPolicy"] == "Retain"


def test_the_live_alias_routes_every_file_to_the_version_this_deploy_published(acme):
    (alias,) = acme.find_resources("AWS::StepFunctions::StateMachineAlias").values()
    version_id, _ = _one(acme, "AWS::StepFunctions::StateMachineVersion", "PipelineWorkflowVersion")
    assert alias["Properties"]["Name"] == "live"
    assert alias["Properties"]["RoutingConfiguration"] == [
        {"StateMachineVersionArn": {"Fn::GetAtt": [version_id, "Arn"]}, "Weight": 100}
    ]
    assert "DeploymentPreference" not in alias["Properties"]  # all at once: files are strictly serial


def test_the_parent_and_the_section_start_the_children_by_their_versions(acme):
    """GIVEN the three definitions THEN the parent's RunPage and RunSection and the section's
    RunPage name the page and section *version* ARNs: a parent on version N starts the children
    of version N, whatever was deployed since."""
    page_version, _ = _one(acme, "AWS::StepFunctions::StateMachineVersion", "PipelinePageWorkflowVersion")
    section_version, _ = _one(
        acme, "AWS::StepFunctions::StateMachineVersion", "PipelineSectionWorkflowVersion"
    )
    for machine, expected in (
        ("Workflow", {page_version, section_version}),
        ("SectionWorkflow", {page_version}),
    ):
        _, props = _one(acme, "AWS::StepFunctions::StateMachine", f"Pipeline{machine}")
        versions = acme.find_resources("AWS::StepFunctions::StateMachineVersion")
        named = {
            p["Fn::GetAtt"][0]
            for p in _parts(props["Properties"]["DefinitionString"])
            if isinstance(p, dict) and p.get("Fn::GetAtt", [""])[0] in versions
        }
        assert named == expected, machine
    # ... and nowhere the unqualified child ARN (which would run the children's latest revision)
    _, parent = _one(acme, "AWS::StepFunctions::StateMachine", "PipelineWorkflow")
    text = json.dumps(parent["Properties"]["DefinitionString"])
    assert (
        ":stateMachine:acme-file-ingest-page" not in text
        and ":stateMachine:acme-file-ingest-section" not in text
    )


def test_the_shared_workflow_role_is_granted_the_unqualified_child_arns_not_their_versions(acme):
    """Step Functions authorizes starting a version on the unqualified ARN (CDK's grant on the
    version ARN authorizes nothing, aws/aws-cdk#30265, and would make a cycle: the role's policy
    naming a version of a state machine that depends on that policy)."""
    policies = json.dumps(acme.find_resources("AWS::IAM::Policy"))
    for version_id in acme.find_resources("AWS::StepFunctions::StateMachineVersion"):
        assert version_id not in policies


def test_ops_finds_the_alias_it_resumes_through(acme):
    outputs = acme.find_outputs("*")
    (alias_id,) = acme.find_resources("AWS::StepFunctions::StateMachineAlias")
    (alias_output,) = [o for k, o in outputs.items() if k.startswith("PipelineStateMachineAliasArn")]
    assert alias_output["Value"] == {"Fn::GetAtt": [alias_id, "Arn"]}


# --- a change to the page publishes a new version of all three -----------------------------------


def _deployed_definitions(template: dict[str, Any]) -> dict[str, str]:
    """Each state machine's definition as CloudFormation would resolve it, modelling a version
    ARN as its state machine's name and revision (a digest of that machine's resolved
    definition): what decides whether a deploy publishes a new version."""
    resources = template["Resources"]
    versions = {
        k: v["Properties"]["StateMachineArn"]["Ref"]
        for k, v in resources.items()
        if v["Type"] == "AWS::StepFunctions::StateMachineVersion"
    }
    resolved: dict[str, str] = {}

    def resolve(machine_id: str) -> str:
        if machine_id not in resolved:
            text = ""
            for part in _parts(resources[machine_id]["Properties"]["DefinitionString"]):
                if isinstance(part, str):
                    text += part
                elif "Fn::GetAtt" in part and part["Fn::GetAtt"][0] in versions:
                    child = versions[part["Fn::GetAtt"][0]]
                    revision = hashlib.sha256(resolve(child).encode()).hexdigest()[:12]
                    text += f"<{resources[child]['Properties']['StateMachineName']}:{revision}>"
                else:
                    text += "<ref>"
            resolved[machine_id] = text
        return resolved[machine_id]

    return {resources[m]["Properties"]["StateMachineName"]: resolve(m) for m in set(versions.values())}


@pytest.fixture(scope="module")
def page_changed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """One tenant synthesized twice: as is, and with only the page definition changed (a
    comment on the page's definition, which no other definition carries)."""
    directory = tmp_path_factory.mktemp("versions")
    tenants = directory / "tenants.yaml"
    tenants.write_text(
        "defaults: {sink: {url: https://core.example.com/r, auth: {type: bearer, secret: core/token}}}\ntenants:\n  - {id: acme, prefix: acme/}\n"
    )
    before = synthesize(tenants, directory / "before").templates["OrderedIngest-Tenant-acme"]
    with pytest.MonkeyPatch.context() as patch:
        build_page = workflows.build_page_definition
        patch.setattr(
            workflows,
            "build_page_definition",
            lambda **kwargs: {**build_page(**kwargs), "Comment": "a changed page"},
        )
        after = synthesize(tenants, directory / "after").templates["OrderedIngest-Tenant-acme"]
    return before, after


def test_a_change_to_the_page_definition_publishes_new_section_and_file_versions(page_changed):
    """GIVEN the page definition changed and nothing else WHEN deployed THEN the section's and
    the parent's definitions change too (they name the new page version), so the deploy
    publishes new versions of all three and the alias moves to a parent that starts the new
    page; a file already running keeps its parent version and so the old page."""
    before, after = (_deployed_definitions(t) for t in page_changed)
    assert (
        "a changed page" in after["acme-file-ingest-page"]
        and "a changed page" not in before["acme-file-ingest-page"]
    )
    for machine in MACHINES.values():
        assert before[machine] != after[machine], machine

    # the parent's template text is the same: only the pinned page version makes it change
    def parent(t):
        return next(
            v
            for v in t["Resources"].values()
            if v["Properties"].get("StateMachineName") == "acme-file-ingest-workflow"
        )

    assert (
        parent(page_changed[0])["Properties"]["DefinitionString"]
        == parent(page_changed[1])["Properties"]["DefinitionString"]
    )


def test_nothing_changed_publishes_nothing(page_changed, tmp_path: Path):
    """GIVEN the same app synthesized again THEN every resolved definition is the same: no new
    revision, so no version is replaced and the alias stays where it is (a rollback made by
    hand is kept until the next deploy that changes a workflow)."""
    before, _ = page_changed
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        "defaults: {sink: {url: https://core.example.com/r, auth: {type: bearer, secret: core/token}}}\ntenants:\n  - {id: acme, prefix: acme/}\n"
    )
    again = synthesize(tenants, tmp_path / "again").templates["OrderedIngest-Tenant-acme"]
    assert _deployed_definitions(again) == _deployed_definitions(before)
    assert again["Resources"] == before["Resources"]


# --- the status rule still matches executions started through the alias ---------------------------

ARN = workflow_arn("acme-file-ingest-workflow")


def _status_rule(template: Template) -> dict[str, Any]:
    """acme's status rule's pattern with its state machine's ARN in place of the `Ref`."""
    machine_id, _ = _one(template, "AWS::StepFunctions::StateMachine", "PipelineWorkflow")
    (rule,) = [
        r
        for r in template.find_resources("AWS::Events::Rule").values()
        if r["Properties"]["Name"] == "acme-sfn-status"
    ]
    return resolved(rule["Properties"]["EventPattern"], {machine_id: ARN})


@pytest.mark.parametrize(
    ("state_machine_arn", "detail"),
    [
        (ARN, {"stateMachineAliasArn": f"{ARN}:live", "stateMachineVersionArn": f"{ARN}:7"}),
        (ARN, {"stateMachineVersionArn": f"{ARN}:7"}),
        (ARN, {}),
        (f"{ARN}:live", {}),
        (f"{ARN}:3", {}),
    ],
    ids=["bare-alias-fields", "bare-version-field", "bare", "alias-qualified", "version-qualified"],
)
@pytest.mark.parametrize("status", ["RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"])
def test_the_status_rule_matches_executions_started_through_the_alias_or_a_version(
    acme, state_machine_arn, detail, status
):
    """GIVEN acme's status rule WHEN an execution started through the `live` alias or a version
    changes status THEN its event matches whichever way it names the state machine: the bare
    ARN with the alias and version as fields of their own, or the ARN qualified by them (AWS
    documents the bare ARN for DescribeExecution, not for the event)."""
    assert pattern_matches(_status_rule(acme), status_change(state_machine_arn, status, **detail))


@pytest.mark.parametrize(
    "other",
    [
        workflow_arn("globex-file-ingest-workflow"),
        workflow_arn("globex-file-ingest-workflow", "live"),
        workflow_arn("acme-eu-file-ingest-workflow"),  # a tenant whose id starts with acme's
        workflow_arn("acme-eu-file-ingest-workflow", "3"),
        workflow_arn("acme-file-ingest-page"),
        workflow_arn("acme-file-ingest-page", "3"),
        workflow_arn("acme-file-ingest-section", "2"),
        workflow_arn("acme-file-ingest-workflowx"),  # not one of the app's names, still not acme's
    ],
)
def test_the_status_rule_matches_no_other_state_machine(acme, other):
    """GIVEN acme's status rule (its ARN, or its ARN and ':' as a prefix) WHEN another tenant's
    workflow, or acme's own page or section machine, changes status, bare or qualified THEN the
    event does not match: the closer sees only its file workflow's executions."""
    assert not pattern_matches(_status_rule(acme), status_change(other))
