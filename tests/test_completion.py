"""The completion callback in the templates: the parent's callback task,
its timeout, heartbeat and catches; the entry point's authorization and least privilege; the
`completion` block of tenants.yaml. Its own tenants file: one tenant waits, one does not."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from lambdas import contract
from pipeline_constructs import capacity
from pipeline_constructs.config import ConfigError, parse_config
from tests.conftest import Synthesized, synthesize
from tests.test_tenant_pipeline import definition, policy_statements_of_role

CALLER = "arn:aws:iam::111111111111:role/core-system"
OTHER_CALLER = "arn:aws:iam::222222222222:role/core-audit"
TENANTS = f"""
defaults:
  sink: {{url: "https://core.example.com/records", auth: {{type: bearer, secret: core/token}}}}
tenants:
  - id: plain
    prefix: plain/
  - id: waits
    prefix: waits/
    completion:
      wait: true
      timeout_seconds: 900
      heartbeat_seconds: 300
      callers: ["{CALLER}", "{OTHER_CALLER}"]
"""


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    directory = tmp_path_factory.mktemp("completion")
    (directory / "tenants.yaml").write_text(TENANTS, encoding="utf-8")
    return synthesize(directory / "tenants.yaml", directory / "cdk.out")


@pytest.fixture(scope="module")
def waits(synthesized: Synthesized) -> Template:
    return synthesized.template("OrderedIngest-Tenant-waits")


@pytest.fixture(scope="module")
def plain(synthesized: Synthesized) -> Template:
    return synthesized.template("OrderedIngest-Tenant-plain")


def test_the_last_chunk_leads_to_a_callback_task_with_native_timeout_and_heartbeat(waits: Template) -> None:
    """GIVEN completion.wait WHEN the parent is synthesized THEN both ways through the chunks
    end in WaitForCompletion: an AWS SDK DynamoDB UpdateItem .waitForTaskToken that leaves the
    token on the tenant's position, only for the current RUNNING execution, with the tenant's
    TimeoutSeconds and HeartbeatSeconds, then RecordSuccess."""
    states = definition(waits)["States"]
    task = states["WaitForCompletion"]

    assert states["PagesInOrder"]["Next"] == states["SectionsInOrder"]["Next"] == "WaitForCompletion"
    assert task["Resource"] == "arn:<ref>:states:::aws-sdk:dynamodb:updateItem.waitForTaskToken"
    assert (task["TimeoutSeconds"], task["HeartbeatSeconds"], task["Next"]) == (900, 300, "RecordSuccess")
    assert task["Parameters"]["Key"] == {"tenant": {"S.$": "$.tenant"}, "entry": {"S": "position"}}
    assert task["Parameters"]["ExpressionAttributeValues"][":token"] == {"S.$": "$$.Task.Token"}
    assert task["Parameters"]["ConditionExpression"] == "execution = :execution AND #status = :running"
    assert "Retry" not in task  # a retry would leave a new token; the history bound counts one attempt


def test_a_confirmed_file_goes_on_with_its_input(waits: Template) -> None:
    """GIVEN the callback task WHEN the core system confirms (SendTaskSuccess with an output)
    THEN the task's ResultPath is null, so the answer is dropped and RecordSuccess still finds
    the split result it reads. Without the key Step Functions would put the answer in place of
    the input, and RecordSuccess would fail the execution (States.Runtime, which no Catch takes):
    CDK's CustomState dropped a None ResultPath, which moto does not show."""
    states = definition(waits)["States"]

    assert "ResultPath" in states["WaitForCompletion"] and states["WaitForCompletion"]["ResultPath"] is None
    assert states["RecordSuccess"]["Parameters"]["Payload"]["content_sha256.$"].startswith(
        contract.SPLIT_RESULT_PATH
    )


@pytest.mark.parametrize("machine", ["PipelineWorkflow", "PipelineSectionWorkflow", "PipelinePageWorkflow"])
@pytest.mark.parametrize("tenant", ["waits", "plain"])
def test_no_state_replaces_its_input_unless_it_says_so(
    synthesized: Synthesized, tenant: str, machine: str
) -> None:
    """Every Task, Map and Pass state of every workflow names its ResultPath (`$` where the
    state's result is the next state's whole input, as RegisterChunk's progress is): the
    default `$` would drop the file's fields the later states read, the class of the fault
    above."""
    template = synthesized.template(f"OrderedIngest-Tenant-{tenant}")

    def unnamed(states: dict) -> list[str]:
        found = []
        for name, state in states.items():
            if state["Type"] in ("Task", "Map", "Pass") and "ResultPath" not in state:
                found.append(name)
            found += unnamed(state.get("ItemProcessor", {}).get("States", {}))
        return found

    assert unnamed(definition(template, machine)["States"]) == []


def test_a_timeout_fails_the_file_with_completion_timed_out_and_keeps_the_input(waits: Template) -> None:
    """GIVEN the callback task WHEN it times out (or its heartbeats stop) THEN CompletionTimedOut
    sets the error and goes to RecordFailure (on_failure applies); any other error (a
    rejection) goes to RecordFailure directly. Every catch puts the error beside the input."""
    states = definition(waits)["States"]
    catches = states["WaitForCompletion"]["Catch"]

    assert catches == [
        {
            "ErrorEquals": ["States.Timeout", "States.HeartbeatTimeout"],
            "ResultPath": "$.error",
            "Next": "CompletionTimedOut",
        },
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "RecordFailure"},
    ]
    timed_out = states["CompletionTimedOut"]
    assert timed_out["ResultPath"] == "$.error" and timed_out["Next"] == "RecordFailure"
    assert timed_out["Parameters"]["Error"] == contract.COMPLETION_TIMED_OUT_ERROR


def test_a_resumed_file_with_nothing_left_to_send_still_waits(waits: Template) -> None:
    states = definition(waits)["States"]

    assert states["AnyChunks"]["Choices"][0]["Next"] == "ResumedAfterLastRecord"
    resumed = states["ResumedAfterLastRecord"]
    assert resumed["Choices"][0]["Next"] == "WaitForCompletion" and resumed["Default"] == "RecordSuccess"


def test_without_completion_the_workflow_has_no_wait_and_no_entry_point(plain: Template) -> None:
    states = definition(plain)["States"]

    assert not {"WaitForCompletion", "CompletionTimedOut", "ResumedAfterLastRecord"} & set(states)
    assert states["PagesInOrder"]["Next"] == "RecordSuccess"
    assert not plain.find_resources(
        "AWS::Lambda::Function", {"Properties": {"FunctionName": "plain-completion"}}
    )
    assert not plain.find_resources(
        "AWS::Lambda::Permission", {"Properties": {"Action": "lambda:InvokeFunction", "Principal": CALLER}}
    )


def test_only_the_configured_callers_may_invoke_the_entry_point(waits: Template) -> None:
    """GIVEN completion.callers WHEN synthesized THEN the entry point's resource policy allows
    lambda:InvokeFunction to exactly those principals (SigV4, IAM-authenticated); no function
    URL, no public or service principal."""
    (function_id,) = waits.find_resources(
        "AWS::Lambda::Function", {"Properties": {"FunctionName": "waits-completion"}}
    )
    permissions = [
        p["Properties"]
        for p in waits.find_resources("AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [function_id, "Arn"]}
    ]

    assert sorted((p["Action"], p["Principal"]) for p in permissions) == [
        ("lambda:InvokeFunction", CALLER),
        ("lambda:InvokeFunction", OTHER_CALLER),
    ]
    assert not waits.find_resources("AWS::Lambda::Url")


def test_the_entry_point_answers_only_its_tenants_tokens_and_reads_only_its_position(waits: Template) -> None:
    """Least privilege: the entry point's role reads and updates only the tenant's ledger items,
    and SendTask* only on the tenant's file state machine; the workflow's role may write the
    token only to the tenant's own items."""
    statements = [
        s
        for s in policy_statements_of_role(waits, "PipelineCompletionRole")
        if not str(s["Action"]).startswith(("logs:", "['logs:"))
    ]
    (machine_id,) = [
        k
        for k in waits.find_resources("AWS::StepFunctions::StateMachine")
        if k.startswith("PipelineWorkflow")
    ]

    assert len(statements) == 2
    ledger, answer = statements
    assert ledger["Action"] == ["dynamodb:GetItem", "dynamodb:UpdateItem"]
    assert ledger["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["waits"]}}
    assert answer["Action"] == [
        "states:SendTaskFailure",
        "states:SendTaskHeartbeat",
        "states:SendTaskSuccess",
    ]
    assert answer["Resource"] == {"Ref": machine_id}
    token = next(
        s
        for s in policy_statements_of_role(waits, "PipelineWorkflowRole")
        if s.get("Sid") == "LeaveCompletionTokenOnOwnPosition"
    )
    assert token["Action"] == "dynamodb:UpdateItem"
    assert token["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["waits"]}}


def test_the_stacks_are_cdk_nag_clean(synthesized: Synthesized) -> None:
    report = synthesized.validation_report
    (nag,) = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []


def test_the_entry_point_is_an_output_for_the_core_system_owners(waits: Template) -> None:
    outputs = waits.find_outputs("*")
    (name,) = [o["Value"] for key, o in outputs.items() if key.startswith("PipelineCompletionFunctionName")]
    assert name == {
        "Ref": next(
            iter(
                waits.find_resources(
                    "AWS::Lambda::Function", {"Properties": {"FunctionName": "waits-completion"}}
                )
            )
        )
    }


# --- tenants.yaml --------------------------------------------------------------------------


def _tenants(completion: str) -> str:
    return (
        "tenants:\n  - id: acme\n    prefix: acme/\n    sink: {url: 'https://core.example.com/r', auth: {type: none}}\n"
        f"    completion: {completion}\n"
    )


def _problems(completion: str) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(_tenants(completion))
    return raised.value.problems


def test_fails_when_the_heartbeat_is_not_shorter_than_the_timeout() -> None:
    assert _problems(
        f"{{wait: true, timeout_seconds: 600, heartbeat_seconds: 600, callers: ['{CALLER}']}}"
    ) == [
        "tenant 'acme': field 'completion.heartbeat_seconds' = 600: is not shorter than completion.timeout_seconds "
        "(600); use a whole number of seconds shorter than completion.timeout_seconds, or leave it out (no heartbeat "
        "needed)"
    ]


def test_fails_when_nobody_may_answer() -> None:
    assert _problems("{wait: true}") == [
        "tenant 'acme': field 'completion.callers' = []: is empty: nobody could confirm a file, so every file would "
        "time out; list the IAM role ARNs of the core system, e.g. 'arn:aws:iam::111111111111:role/core-system'"
    ]


def test_fails_when_a_caller_is_not_a_principal_arn() -> None:
    assert _problems("{wait: true, callers: ['core-system']}") == [
        "tenant 'acme': field 'completion.callers' = ['core-system']: 'core-system' is not an IAM role, user or "
        "account root ARN; list the IAM role ARNs of the core system, e.g. "
        "'arn:aws:iam::111111111111:role/core-system'"
    ]


def test_fails_when_the_wait_outlasts_the_file_time_limit() -> None:
    problems = _problems(f"{{wait: true, timeout_seconds: 604800, callers: ['{CALLER}']}}")
    assert problems == [
        "tenant 'acme': field 'completion.timeout_seconds' = 604800: is not shorter than the file's time limit "
        "(25200 s): the execution would time out before the completion wait does; use a shorter "
        "completion.timeout_seconds, or a longer file_time_limit_seconds"
    ]


def test_fails_when_the_timeout_is_out_of_range_in_the_projects_words() -> None:
    assert _problems(f"{{wait: true, timeout_seconds: 0, callers: ['{CALLER}']}}") == [
        "tenant 'acme': field 'completion.timeout_seconds' = 0: is less than 1; use a whole number of seconds from "
        "1 to 604800 (default 3600), shorter than the file's file_time_limit_seconds"
    ]


def test_a_tenant_with_completion_needs_one_iam_role_more() -> None:
    config = parse_config(
        _tenants(f"{{wait: true, callers: ['{CALLER}']}}").replace(
            "tenants:\n",
            "tenants:\n  - id: plain\n    prefix: plain/\n    sink: {url: 'https://core.example.com/r', auth: {type: none}}\n",
        )
    )

    need = capacity.iam_roles(config.tenants)

    assert need.count == 2 * capacity.ROLES_PER_TENANT + 1
    assert need.how.endswith("+ 1 per tenant with completion.wait x 1")


def test_completion_in_defaults_applies_to_every_tenant() -> None:
    text = (
        f"defaults:\n  completion: {{wait: true, timeout_seconds: 120, callers: ['{CALLER}']}}\n"
        + _tenants("{timeout_seconds: 60}")
    )
    (tenant,) = parse_config(text).tenants
    assert (tenant.completion.wait, tenant.completion.timeout_seconds, tenant.completion.callers) == (
        True,
        60,
        [CALLER],
    )


def test_the_entry_points_error_logs_page_like_the_other_functions(waits: Template, plain: Template) -> None:
    waits.has_resource_properties("AWS::CloudWatch::Alarm", {"AlarmName": "waits-completion-error-logs"})
    assert not plain.find_resources(
        "AWS::CloudWatch::Alarm", {"Properties": {"AlarmName": "plain-completion-error-logs"}}
    )
