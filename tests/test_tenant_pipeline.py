"""Fine-grained assertions on a tenant stack: every mechanism of docs/design.md §3."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match, Template

from lambdas import contract
from pipeline_constructs import budgets
from pipeline_constructs.stacks import shared_parameter
from tests.conftest import ssm_parameter_ref, tenant_config

LAMBDA_TRANSIENTS = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]


def definition(template: Template, machine_id: str = "PipelineWorkflow") -> dict:
    """A state machine's definition (the parent's by default; `PipelinePageWorkflow`: the page
    state machine's) with intrinsics replaced by placeholders."""
    machines = template.find_resources("AWS::StepFunctions::StateMachine")
    (machine,) = [m for logical_id, m in machines.items() if logical_id.startswith(machine_id)]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "<ref>" for p in parts))


def page_definition(template: Template) -> dict:
    """The page state machine's definition (the child: one page of chunks per execution)."""
    return definition(template, "PipelinePageWorkflow")


def section_definition(template: Template) -> dict:
    """The section state machine's definition (a file of more pages than one section holds)."""
    return definition(template, "PipelineSectionWorkflow")


def only(template: Template, resource_type: str, **properties) -> dict:
    found = template.find_resources(resource_type, {"Properties": properties} if properties else None)
    assert len(found) == 1, f"expected one {resource_type} matching {properties}, found {len(found)}"
    return next(iter(found.values()))


def function_named(template: Template, name: str) -> dict:
    return only(template, "AWS::Lambda::Function", FunctionName=name)


def policy_statements_of_role(template: Template, role_prefix: str) -> list[dict]:
    policies = template.find_resources("AWS::IAM::Policy")
    statements = []
    for policy in policies.values():
        roles = policy["Properties"]["Roles"]
        if any(r["Ref"].startswith(role_prefix) for r in roles):
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    assert statements, f"no policy for role {role_prefix}"
    return statements


def actions_of(statements: list[dict]) -> set[str]:
    out: set[str] = set()
    for s in statements:
        out |= set([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    return out


# --- event order: EventBridge rule -> SQS FIFO with a fixed message group ----------------------


def test_rule_sends_object_created_under_the_tenant_prefix_to_the_fifo_queue_with_the_tenant_as_group(acme):
    rule = only(acme, "AWS::Events::Rule", Name="acme-object-created")
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.s3"]
    assert pattern["detail-type"] == ["Object Created"]
    assert pattern["detail"]["object"]["key"] == [{"prefix": "acme/"}]
    (target,) = rule["Properties"]["Targets"]
    assert target["SqsParameters"] == {"MessageGroupId": "acme"}
    assert target["Arn"] == {"Fn::GetAtt": [_queue_id(acme), "Arn"]}


def _queue_id(template: Template) -> str:
    (queue_id,) = template.find_resources("AWS::SQS::Queue", {"Properties": {"FifoQueue": True}}).keys()
    return queue_id


def test_queue_has_the_seed_settings_and_no_dlq(acme):
    queue = only(
        acme,
        "AWS::SQS::Queue",
        QueueName="acme-event-queue.fifo",
        FifoQueue=True,
        ContentBasedDeduplication=True,
        VisibilityTimeout=30,
        MessageRetentionPeriod=14 * 24 * 3600,
        ReceiveMessageWaitTimeSeconds=20,
        SqsManagedSseEnabled=True,
    )
    assert "RedrivePolicy" not in queue["Properties"], "a DLQ would let later files overtake a failing one"


def test_queue_policy_denies_requests_without_tls(acme):
    acme.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                )
            }
        },
    )


# --- consumption: reserved concurrency 1, batch size 1, timeout below the visibility timeout --


def test_controller_runs_one_message_at_a_time_and_finishes_before_the_visibility_timeout(acme):
    controller = function_named(acme, "acme-controller")["Properties"]
    assert controller["ReservedConcurrentExecutions"] == 1
    assert controller["Timeout"] == 20 < 30
    mapping = only(acme, "AWS::Lambda::EventSourceMapping")["Properties"]
    assert mapping["BatchSize"] == 1
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [_queue_id(acme), "Arn"]}
    # A waiting message is a reported item failure, not a function error (no polling back-off).
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_controller_environment_names_its_own_workflow_queue_and_the_ledger(acme):
    env = function_named(acme, "acme-controller")["Properties"]["Environment"]["Variables"]
    assert env["TENANT_ID"] == "acme"
    # files start through the workflow's `live` alias (versions.py)
    (alias_id,) = acme.find_resources("AWS::StepFunctions::StateMachineAlias")
    assert env["STATE_MACHINE_ARN"] == {"Fn::GetAtt": [alias_id, "Arn"]}
    # the shared stack's SSM parameter, read at deploy time (no export: cells.py)
    assert env["LEDGER_TABLE_NAME"] == ssm_parameter_ref(
        acme.to_json(), shared_parameter("ledger-table-name")
    )
    assert env["QUEUE_URL"] == {"Ref": _queue_id(acme)}
    assert env["METRIC_NAMESPACE"] == "OrderedIngest"
    assert env["ON_FAILURE"] == "halt"
    # The fast hand-off's fallback: below the 5-minute metric period of the stall alarm.
    assert env["WAITING_VISIBILITY_SECONDS"] == "240"
    # What a usable file event names, and where an unusable message is quarantined.
    assert env["LANDING_PREFIX"] == "acme/"
    assert "ordered-ingest-landing-" in json.dumps(env["LANDING_BUCKET"])
    assert "ordered-ingest-work-" in json.dumps(env["WORK_BUCKET"])


def _machine_id(template: Template) -> str:
    """The parent state machine's logical id (the page state machine's is `PipelinePageWorkflow...`)."""
    (machine_id,) = [
        k
        for k in template.find_resources("AWS::StepFunctions::StateMachine")
        if k.startswith("PipelineWorkflow")
    ]
    return machine_id


def test_every_function_logs_json_to_its_own_log_group_on_a_current_runtime(acme):
    for name in ("acme-controller", "acme-split", "acme-register-chunk", "acme-close-file"):
        props = function_named(acme, name)["Properties"]
        assert props["LoggingConfig"]["LogFormat"] == "JSON"
        assert props["LoggingConfig"]["ApplicationLogLevel"] == "INFO"
        assert props["Runtime"] == "python3.14"
        log_group_id = props["LoggingConfig"]["LogGroup"]["Ref"]
        group = acme.find_resources("AWS::Logs::LogGroup")[log_group_id]
        assert group["Properties"]["LogGroupName"] == f"/aws/lambda/{name}"


def test_tenant_options_reach_the_functions(initech):
    split = function_named(initech, "initech-split")["Properties"]["Environment"]["Variables"]
    assert split["CHUNK_SIZE"] == "250"
    assert split["FORMAT"] == "csv"
    assert split["LANDING_PREFIX"] == "initech/incoming/"
    register = function_named(initech, "initech-register-chunk")["Properties"]["Environment"]["Variables"]
    assert register["SINK_URL"] == "https://initech-core.example.com/v2/records"
    assert register["SINK_TIMEOUT_SECONDS"] == "20"
    assert register["SINK_OUTAGE_BUDGET_SECONDS"] == "3600"
    assert register["SINK_BATCH_SIZE"] == "1"  # the seed's contract: one record per POST


# --- the workflow ------------------------------------------------------------------------------


def test_state_machine_is_standard_named_after_the_tenant_and_logs_errors_without_data(acme):
    props = acme.find_resources("AWS::StepFunctions::StateMachine")[_machine_id(acme)]["Properties"]
    assert props["StateMachineName"] == "acme-file-ingest-workflow"
    assert props["StateMachineType"] == "STANDARD"
    assert props["LoggingConfiguration"]["Level"] == "ERROR"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
    assert props["TracingConfiguration"] == {"Enabled": False}  # tracing is opt-in (`tracing: true`)


def test_pages_run_one_at_a_time_in_order_each_as_a_child_execution_that_waits(acme):
    states = definition(acme)["States"]
    assert definition(acme)["StartAt"] == "Split"
    assert states["Split"]["Next"] == "AnyChunks"
    assert states["AnyChunks"]["Choices"] == [
        {
            "Variable": "$.split.first_chunk",
            "NumericGreaterThanPath": "$.split.last_chunk",
            "Next": "RecordSuccess",
        }
    ]
    assert states["AnyChunks"]["Default"] == "Sections"
    assert states["Sections"]["Next"] == "OneSection"
    # a file of one section runs its pages in the parent; otherwise sections run them
    assert states["OneSection"]["Default"] == "InlineEnd"
    assert states["OneSection"]["Choices"][0]["Next"] == "SectionsInOrder"
    # ... and a file that fits one page runs its chunks in the parent, without a page execution
    assert states["FitsInline"]["Choices"][0]["Next"] == "FileChunks"
    assert states["FitsInline"]["Default"] == "Pages"
    assert states["Pages"]["Next"] == "PagesInOrder"
    assert states["FilePaused"]["Type"] == "Succeed"
    for maps, items_path, task, kind in (
        ("PagesInOrder", "$.pages.first_chunks", "RunPage", "p"),
        ("SectionsInOrder", "$.sections.first_chunks", "RunSection", "s"),
    ):
        children = states[maps]
        assert children["Type"] == "Map"
        assert children["MaxConcurrency"] == 1
        assert children["ItemProcessor"]["ProcessorConfig"] == {"Mode": "INLINE"}
        assert children["ItemsPath"] == items_path
        assert children["Next"] == "RecordSuccess"
        # a child stopped for ops pause ends the file without a close and without failing it
        assert children["Catch"][0] == {
            "ErrorEquals": [contract.TENANT_PAUSED_ERROR],
            "ResultPath": None,
            "Next": "FilePaused",
        }
        assert [c["Next"] for c in children["Catch"]] == ["FilePaused", "RecordFailure"]
        run = children["ItemProcessor"]["States"][task]
        assert run["Resource"].endswith(":states:startExecution.sync:2")
        outcome = children["ItemProcessor"]["States"][run["Next"]]
        assert [c["Next"] for c in outcome["Choices"]] == [f"{task}Paused"] and outcome[
            "Default"
        ] == f"{task}Done"
        assert children["ItemProcessor"]["States"][f"{task}Paused"]["Error"] == contract.TENANT_PAUSED_ERROR
        # named after the file's parent execution, whichever execution starts it
        assert (
            run["Parameters"]["Name.$"]
            == f"States.Format('{{}}-{kind}{{}}', $.execution_name, $.first_chunk)"
        )
        assert children["ItemSelector"]["execution_name.$"] == "$$.Execution.Name"


def test_a_section_runs_its_pages_one_at_a_time_within_its_range(acme):
    states = section_definition(acme)["States"]
    per_section = budgets.max_chunks_per_page(100, 10, 3600) * budgets.max_pages_per_section()
    assert states["SectionEnd"]["Parameters"] == {
        "last.$": f"States.MathAdd($.first_chunk, {per_section - 1})"
    }
    pages = states["PagesInOrder"]
    assert pages["MaxConcurrency"] == 1 and pages["ItemsPath"] == "$.section.first_chunks"
    run = pages["ItemProcessor"]["States"]["RunPage"]
    assert run["Resource"].endswith(":states:startExecution.sync:2")
    assert run["Parameters"]["Name.$"] == "States.Format('{}-p{}', $.execution_name, $.first_chunk)"
    # the page carries the PARENT's execution name (the register function's fence)
    assert pages["ItemSelector"]["execution_name.$"] == "$.execution_name"
    assert "Retry" not in run or all("States.TaskFailed" not in r["ErrorEquals"] for r in run["Retry"])


def test_chunks_of_a_page_run_one_at_a_time_in_order(acme):
    states = page_definition(acme)["States"]
    chunks = states["ChunksInOrder"]
    assert chunks["Type"] == "Map"
    assert chunks["MaxConcurrency"] == 1
    assert chunks["ItemProcessor"]["ProcessorConfig"] == {"Mode": "INLINE"}
    assert chunks["ItemProcessor"]["StartAt"] == "RegisterChunk"
    assert chunks["ItemsPath"] == "$.page.chunks"
    assert states["PageChunks"]["Parameters"] == {
        "chunks.$": "States.ArrayRange($.first_chunk, $.page.last, 1)"
    }
    # the register function's fence checks the PARENT's execution name, which the page carries
    assert chunks["ItemSelector"]["execution_name.$"] == "$.execution_name"


def test_a_file_that_fits_one_page_runs_its_chunks_in_the_parent_as_a_page_would(acme):
    """GIVEN the parent workflow WHEN a file's chunks fit one page THEN the parent runs them
    itself, one at a time, with exactly the page's chunk states (retries, budget, pause), the
    parent's own execution name for the fence, and a pause or failure ending the file as a
    page's would."""
    states = definition(acme)["States"]
    per_page = budgets.max_chunks_per_page(100, 10, 3600)
    assert states["InlineEnd"]["Parameters"] == {
        "last.$": f"States.MathAdd($.split.first_chunk, {per_page - 1})"
    }
    assert states["FitsInline"]["Choices"][0]["Variable"] == "$.inline.last"
    assert states["FitsInline"]["Choices"][0]["NumericGreaterThanEqualsPath"] == "$.split.last_chunk"
    assert states["FileChunks"]["Parameters"] == {
        "chunks.$": "States.ArrayRange($.split.first_chunk, $.split.last_chunk, 1)"
    }
    chunks = states["ChunksInOrder"]
    assert chunks["Type"] == "Map" and chunks["MaxConcurrency"] == 1
    assert chunks["ItemProcessor"]["ProcessorConfig"] == {"Mode": "INLINE"}
    assert chunks["ItemsPath"] == "$.inline.chunks"
    assert chunks["ItemProcessor"] == page_definition(acme)["States"]["ChunksInOrder"]["ItemProcessor"]
    assert chunks["ItemSelector"]["execution_name.$"] == "$$.Execution.Name"
    assert chunks["Next"] == "RecordSuccess"
    assert [c["Next"] for c in chunks["Catch"]] == ["FilePaused", "RecordFailure"]
    assert chunks["Catch"][0]["ErrorEquals"] == [contract.TENANT_PAUSED_ERROR]


def test_lambda_tasks_retry_only_transient_lambda_errors_with_the_seed_settings(acme):
    states = definition(acme)["States"]
    register = page_definition(acme)["States"]["ChunksInOrder"]["ItemProcessor"]["States"]["RegisterChunk"]
    for task in (states["Split"], register):
        transient = [r for r in task["Retry"] if "Lambda.ServiceException" in r["ErrorEquals"]]
        assert transient == [
            {
                "ErrorEquals": LAMBDA_TRANSIENTS,
                "IntervalSeconds": 1,
                "MaxAttempts": 3,
                "BackoffRate": 2,
                "JitterStrategy": "FULL",
            }
        ]
        # CDK's default retrier (6 attempts, 2 s) must be off: no other retrier on these errors.
        others = [r for r in task["Retry"] if r is not transient[0]]
        assert not any(set(r["ErrorEquals"]) & set(LAMBDA_TRANSIENTS) for r in others)


CRASHES = [
    "Runtime.ExitError",
    "Runtime.OutOfMemory",
    "Sandbox.Timedout",
    "Lambda.Unknown",
    "Lambda.ClientExecutionTimeoutException",
    "States.Timeout",
]


def lambda_tasks(template: Template) -> dict[str, dict]:
    """Every Lambda task of the tenant's three workflows, by state name."""
    states = definition(template)["States"]
    register = page_definition(template)["States"]["ChunksInOrder"]["ItemProcessor"]["States"][
        "RegisterChunk"
    ]
    tasks = {
        name: state for name, state in states.items() if state.get("Resource", "").endswith(":lambda:invoke")
    }
    assert set(tasks) == {"Split", "RecordSuccess", "RecordFailure"}
    return {**tasks, "RegisterChunk": register}


def test_every_lambda_task_retries_a_crashed_runtime_with_backoff_a_bounded_number_of_times(acme):
    """GIVEN any Lambda step of the workflows WHEN its runtime dies (killed, out of memory, timed
    out, or Lambda cannot tell) THEN the step is retried with backoff, CRASH_RETRIES times: a crash
    is transient until it repeats (docs/design.md 4.11)."""
    for name, task in lambda_tasks(acme).items():
        crash = [r for r in task["Retry"] if "Runtime.ExitError" in r["ErrorEquals"]]
        assert crash == [
            {
                "ErrorEquals": CRASHES,
                "IntervalSeconds": 2,
                "MaxAttempts": budgets.CRASH_RETRIES,
                "BackoffRate": 2,
                "JitterStrategy": "FULL",
            }
        ], name


def test_register_and_split_fail_the_file_saying_what_crashed_once_the_retries_are_spent(acme):
    """GIVEN register or split crashing on every attempt WHEN the retries are spent THEN the
    error stays the runtime's and the cause says which step crashed, how often and where."""
    page = page_definition(acme)["States"]["ChunksInOrder"]["ItemProcessor"]["States"]
    assert page["RegisterChunk"]["Catch"] == [
        {"ErrorEquals": CRASHES, "ResultPath": "$.crash", "Next": "ChunkCrashed"}
    ]
    attempts = budgets.CRASH_RETRIES + 1
    assert page["ChunkCrashed"]["Parameters"] == {
        "Error.$": "$.crash.Error",
        "Cause.$": f"States.Format('register crashed {attempts} times in a row in chunk {{}} of the file "
        "(last: {})', $.chunk_index, $.crash.Error)",
    }
    assert page["ChunkCrashed"]["Next"] == "RegisterCrashed"
    assert page["RegisterCrashed"] == {
        "Type": "Fail",
        "ErrorPath": "$.crash.Error",
        "CausePath": "$.crash.Cause",
    }
    states = definition(acme)["States"]
    assert states["Split"]["Catch"][0] == {
        "ErrorEquals": CRASHES,
        "ResultPath": "$.error",
        "Next": "SplitCrashed",
    }
    assert (
        states["SplitCrashed"]["Next"] == "RecordFailure"
        and states["SplitCrashed"]["ResultPath"] == "$.error"
    )
    assert states["SplitCrashed"]["Parameters"]["Cause.$"].startswith(
        f"States.Format('split crashed {attempts} times"
    )


def test_the_core_system_is_retried_by_the_register_handler_not_the_workflow(acme):
    """A core-system fault is not a workflow retry (the handler spends its budget per fault
    episode), and no retrier takes every error."""
    register = lambda_tasks(acme)["RegisterChunk"]
    errors = [e for r in register["Retry"] for e in r["ErrorEquals"]]
    assert (
        "SinkRetryableError" not in errors
        and "States.ALL" not in errors
        and "States.TaskFailed" not in errors
    )


def test_a_chunk_loops_until_done_and_waits_while_the_core_system_is_down(acme):
    processor = page_definition(acme)["States"]["ChunksInOrder"]["ItemProcessor"]["States"]
    assert processor["RegisterChunk"]["Next"] == "ChunkDone"
    assert processor["RegisterChunk"]["ResultPath"] == "$"  # the progress is the next try's task
    choice = processor["ChunkDone"]
    # a pause comes first: a paused chunk is neither done nor waiting for the core system
    assert choice["Choices"][0] == {"Variable": "$.paused", "BooleanEquals": True, "Next": "ChunkPaused"}
    assert processor["ChunkPaused"]["Error"] == contract.TENANT_PAUSED_ERROR
    assert choice["Choices"][1] == {"Variable": "$.done", "BooleanEquals": True, "Next": "ChunkRegistered"}
    assert choice["Choices"][2] == {
        "Variable": "$.invocation",
        "NumericGreaterThanEquals": 84,
        "Next": "ChunkOverBudget",
    }
    assert choice["Choices"][3] == {
        "Variable": "$.retry_after_seconds",
        "NumericGreaterThan": 0,
        "Next": "WaitForCoreSystem",
    }
    page = page_definition(acme)["States"]
    assert page["ChunksInOrder"]["Catch"] == [
        {"ErrorEquals": [contract.TENANT_PAUSED_ERROR], "ResultPath": None, "Next": "PagePaused"}
    ]
    assert page["PagePaused"]["Result"] == {"paused": True} and page["PagePaused"]["End"] is True
    assert (
        processor["RegisterChunk"]["ResultSelector"]["invocation.$"]
        == "States.MathAdd($.Payload.invocation, 1)"
    )
    assert choice["Default"] == "RegisterChunk"
    assert processor["WaitForCoreSystem"] == {
        "Type": "Wait",
        "Comment": processor["WaitForCoreSystem"]["Comment"],
        "SecondsPath": "$.retry_after_seconds",
        "Next": "RegisterChunk",
    }


def test_every_close_is_recorded_then_failures_fail_the_execution(acme):
    states = definition(acme)["States"]
    for name in ("Split", "PagesInOrder"):
        assert states[name]["Catch"][-1:] == [
            {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "RecordFailure"}
        ]
    assert states["PagesInOrder"]["Next"] == "RecordSuccess"
    assert states["RecordSuccess"]["Next"] == "FileIngested"
    assert states["RecordSuccess"]["Parameters"]["Payload"] == {
        "execution_name.$": "$$.Execution.Name",
        "status": "SUCCEEDED",
        "content_sha256.$": "$.split.content_sha256",
        "duplicate_of.$": "$.split.duplicate_of",
    }
    failure = states["RecordFailure"]
    assert failure["Next"] == "IngestFailed"
    assert failure["Parameters"]["Payload"] == {
        "execution_name.$": "$$.Execution.Name",
        "status": "FAILED",
        "error.$": "$.error.Error",
        "cause.$": "$.error.Cause",
    }
    # A closer that cannot record does not change the file's outcome: the status rule records it.
    assert states["RecordSuccess"]["Catch"][0]["Next"] == "FileIngested"
    assert failure["Catch"][0]["Next"] == "IngestFailed"
    assert states["IngestFailed"] == {
        "Type": "Fail",
        "ErrorPath": "$.error.Error",
        "CausePath": "$.error.Cause",
    }


def test_status_changes_of_the_tenants_executions_reach_its_closer(acme):
    rule = only(acme, "AWS::Events::Rule", Name="acme-sfn-status")["Properties"]
    assert rule["EventPattern"]["source"] == ["aws.states"]
    assert rule["EventPattern"]["detail-type"] == ["Step Functions Execution Status Change"]
    # its file workflow's ARN, bare or qualified by a version or alias (tests/test_versions.py)
    machine = {"Ref": _machine_id(acme)}
    assert rule["EventPattern"]["detail"]["stateMachineArn"] == [
        machine,
        {"prefix": {"Fn::Join": ["", [machine, ":"]]}},
    ]
    assert set(rule["EventPattern"]["detail"]["status"]) == {
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "TIMED_OUT",
        "ABORTED",
    }
    (target,) = rule["Targets"]
    closer_id = next(
        k
        for k, v in acme.find_resources("AWS::Lambda::Function").items()
        if v["Properties"]["FunctionName"] == "acme-close-file"
    )
    assert target["Arn"] == {"Fn::GetAtt": [closer_id, "Arn"]}


def test_records_never_travel_between_states_only_references(acme):
    states = definition(acme)["States"]
    split_output = states["Split"]["ResultSelector"]
    assert set(split_output) == {
        "manifest_key.$",
        "chunk_prefix.$",
        "chunk_size.$",
        "chunk_count.$",
        "record_count.$",
        "first_chunk.$",
        "last_chunk.$",  # a range, never a list of every chunk
        "content_sha256.$",
        "duplicate_of.$",  # a hash and an object reference, never content
    }
    assert states["PagesInOrder"]["ResultPath"] is None, "page results must not pile up in the state"
    # the child's description, read by the next state only: the Map's item ends there
    assert states["PagesInOrder"]["ItemProcessor"]["States"]["RunPage"]["ResultPath"] == "$.child"
    chunks = page_definition(acme)["States"]["ChunksInOrder"]
    assert chunks["ResultPath"] is None, "chunk results must not pile up in the state"
    assert {k.removesuffix(".$") for k in chunks["ItemSelector"]} == {
        "tenant",
        "bucket",
        "key",
        "version_id",
        "execution_name",
        "chunk_prefix",
        "chunk_size",
        "chunk_count",
        "record_count",
        "chunk_index",
        "start_record",
        "invocation",  # fault_since: absent, no fault yet
    }


def test_register_timeout_fits_a_chunk_at_the_slowest_answer_within_lambdas_limit(acme, initech):
    # acme: 100 records x 10 s + 30 s margin = 1030 s > 15 min: capped, the handler returns before it.
    assert function_named(acme, "acme-register-chunk")["Properties"]["Timeout"] == 900
    # initech: 250 x 20 s: capped too.
    assert function_named(initech, "initech-register-chunk")["Properties"]["Timeout"] == 900


def test_register_timeout_is_derived_from_chunk_size_and_sink_timeout():
    from pipeline_constructs.data_plane import register_timeout

    assert register_timeout(3, 1).to_seconds() == 60  # at least a minute
    assert register_timeout(10, 10).to_seconds() == 130
    assert register_timeout(1000, 60).to_seconds() == 900  # Lambda's limit
    assert (
        register_timeout(1000, 60, 100).to_seconds() == 10 * 60 + 30
    )  # 10 batches of 100 at the slowest answer
    assert register_timeout(1000, 60, 1000).to_seconds() == 90  # one batch


def test_batch_size_reaches_the_register_function_and_sets_its_timeout(tmp_path):
    """GIVEN chunk_size 1000, sink timeout 60 s and batches of 100 WHEN synthesized THEN the register
    function gets SINK_BATCH_SIZE 100 and a timeout of 10 requests x 60 s + 30 s."""
    from aws_cdk import App, Stack

    from pipeline_constructs.shared import SharedResources, SharedResourcesProps
    from pipeline_constructs.tenant_pipeline import TenantPipeline

    stack = Stack(App(outdir=str(tmp_path)), "MyStack")
    shared = SharedResources(stack, "Shared", SharedResourcesProps())
    batched = tenant_config("batched", "b/", chunk_size=1000, sink={"timeout_seconds": 60, "batch_size": 100})
    TenantPipeline(stack, "Batched", tenant=batched, shared=shared.refs())
    register = function_named(Template.from_stack(stack), "batched-register-chunk")["Properties"]
    assert register["Environment"]["Variables"]["SINK_BATCH_SIZE"] == "100"
    assert register["Timeout"] == 630


def test_the_register_functions_memory_is_the_tenants_option_and_only_its(acme, tmp_path):
    """GIVEN no register_memory_mb THEN the register function has 256 MB (a seventh of a vCPU);
    GIVEN 1769 THEN it gets one vCPU's memory, and split and the controller keep theirs."""
    from aws_cdk import App, Stack

    from pipeline_constructs.shared import SharedResources, SharedResourcesProps
    from pipeline_constructs.tenant_pipeline import TenantPipeline

    assert function_named(acme, "acme-register-chunk")["Properties"]["MemorySize"] == 256
    stack = Stack(App(outdir=str(tmp_path)), "MyStack")
    shared = SharedResources(stack, "Shared", SharedResourcesProps())
    TenantPipeline(
        stack, "Fast", tenant=tenant_config("fast", "f/", register_memory_mb=1769), shared=shared.refs()
    )
    template = Template.from_stack(stack)
    assert function_named(template, "fast-register-chunk")["Properties"]["MemorySize"] == 1769
    assert function_named(template, "fast-split")["Properties"]["MemorySize"] == 512
    assert function_named(template, "fast-controller")["Properties"]["MemorySize"] == 256


# --- least privilege -----------------------------------------------------------------------------


def test_the_workflow_may_start_wait_for_and_stop_only_its_own_child_executions(acme):
    """`.sync:2` needs StartExecution on the child state machine, Describe/StopExecution on its
    executions, and the managed rule through which Step Functions learns that a child closed.
    The workflow role (the three state machines) may start the tenant's page and section state
    machines, named by their fixed names (no reference: the children share the role), and
    invoke the tenant's split, register and closer functions; nothing else."""
    statements = policy_statements_of_role(acme, "PipelineWorkflowRole")
    starts = [s for s in statements if s["Action"] == "states:StartExecution"]
    started = json.dumps([s["Resource"] for s in starts])
    assert (
        ":stateMachine:acme-file-ingest-page" in started
        and ":stateMachine:acme-file-ingest-section" in started
    )
    assert ":stateMachine:acme-file-ingest-workflow" not in started  # the controller starts files
    wait = [s for s in statements if s["Action"] == ["states:DescribeExecution", "states:StopExecution"]]
    waited = json.dumps([s["Resource"] for s in wait])
    assert ":execution:acme-file-ingest-page*" in waited and ":execution:acme-file-ingest-section*" in waited
    rule = next(s for s in statements if "events:PutRule" in s["Action"])
    assert json.dumps(rule["Resource"]).endswith(
        ':rule/StepFunctionsGetEventsForStepFunctionsExecutionRule"]]}'
    )
    invoked = json.dumps([s["Resource"] for s in statements if s["Action"] == "lambda:InvokeFunction"])
    for function in ("Split", "RegisterChunk", "Closer"):
        assert f"Pipeline{function}" in invoked, function
    assert "PipelineController" not in invoked


@pytest.mark.parametrize("kind", ["Page", "Section"])
def test_the_child_state_machines_log_errors_without_data_and_trace_like_the_parent(acme, kind):
    machines = acme.find_resources("AWS::StepFunctions::StateMachine")
    (props,) = [m["Properties"] for k, m in machines.items() if k.startswith(f"Pipeline{kind}Workflow")]
    assert props["StateMachineName"] == f"acme-file-ingest-{kind.lower()}"
    assert props["LoggingConfiguration"]["Level"] == "ERROR"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
    assert props["TracingConfiguration"] == {"Enabled": False}  # as the parent: opt-in
    # a child never outlives its file: the same time limit as the parent
    child = page_definition(acme) if kind == "Page" else section_definition(acme)
    assert child["TimeoutSeconds"] == definition(acme)["TimeoutSeconds"] > 0


def test_controller_can_only_start_and_describe_its_own_workflow_and_touch_its_own_ledger_items(acme):
    statements = policy_statements_of_role(acme, "PipelineControllerRole")
    by_sid = {s.get("Sid"): s for s in statements}
    start = next(s for s in statements if s["Action"] == "states:StartExecution")
    # authorized on the unqualified ARN, only through the `live` alias
    assert start["Resource"] == {"Ref": _machine_id(acme)}
    assert start["Condition"] == {"StringEquals": {"states:StateMachineQualifier": "live"}}
    describe = by_sid["DescribeOwnExecutions"]
    assert describe["Action"] == "states:DescribeExecution"
    assert describe["Resource"]["Fn::Join"][1][-1] == ":execution:acme-file-ingest-workflow:*"
    ledger = by_sid["OwnLedgerItemsOnly"]
    assert sorted(ledger["Action"]) == [
        "dynamodb:DeleteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
    ]
    assert ledger["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["acme"]}}
    assert "states:ListExecutions" not in actions_of(statements), "the gate replaces ListExecutions"
    assert "sqs:ChangeMessageVisibility" in actions_of(statements)  # a waiting message's visibility
    quarantine = by_sid["QuarantineUnusableMessages"]
    assert quarantine["Action"] == "s3:PutObject"
    assert quarantine["Resource"]["Fn::Join"][1][-1] == "/quarantine/acme/*"
    assert ":s3:::ordered-ingest-work-" in quarantine["Resource"]["Fn::Join"][1]
    assert [a for a in actions_of(statements) if a.startswith("s3:")] == ["s3:PutObject"]


def test_quarantine_alarm_pages_on_the_first_quarantined_message_of_the_tenant(acme):
    alarm = alarms_by_name(acme)["acme-quarantine"]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        "OrderedIngest",
        "QuarantinedMessages",
        "Sum",
    )
    assert alarm["Dimensions"] == [{"Name": "Tenant", "Value": "acme"}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert "python -m ops quarantine list acme" in alarm["AlarmDescription"]
    assert alarm["AlarmDescription"].endswith("docs/operations.md#quarantine")


def test_register_and_closer_touch_only_their_tenants_ledger_items(acme):
    for role, actions in (
        ("PipelineDataRole", ["dynamodb:GetItem", "dynamodb:UpdateItem"]),
        (
            "PipelineCloserRole",
            [
                "dynamodb:DeleteItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:Query",
                "dynamodb:UpdateItem",
            ],
        ),
    ):
        ledger = {s.get("Sid"): s for s in policy_statements_of_role(acme, role)}["OwnLedgerItemsOnly"]
        assert sorted(ledger["Action"]) == actions
        assert ledger["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["acme"]}}


def test_closer_can_hand_off_on_its_own_queue_notify_and_stop_only_its_own_executions(acme):
    by_sid = {s.get("Sid"): s for s in policy_statements_of_role(acme, "PipelineCloserRole")}
    assert by_sid["HandOffOnOwnQueue"]["Action"] == "sqs:ChangeMessageVisibility"
    assert by_sid["HandOffOnOwnQueue"]["Resource"] == {"Fn::GetAtt": [_queue_id(acme), "Arn"]}
    assert sorted(by_sid["DescribeAndStopOwnExecutions"]["Action"]) == [
        "states:DescribeExecution",
        "states:StopExecution",
    ]
    assert (
        by_sid["DescribeAndStopOwnExecutions"]["Resource"]["Fn::Join"][1][-1]
        == ":execution:acme-file-ingest-workflow:*"
    )
    assert by_sid["NotifyFailures"]["Action"] == "sns:Publish"


def test_duplicate_files_reaches_split_with_its_tenants_ledger(acme, initech):
    """initech skips duplicate files, acme processes them: both splits know the ledger (they
    share the data-plane role with register, which reads and writes the tenant's items only)."""
    for template, tenant, mode in ((acme, "acme", "process"), (initech, "initech", "skip")):
        env = function_named(template, f"{tenant}-split")["Properties"]["Environment"]["Variables"]
        assert env["DUPLICATE_FILES"] == mode
        assert "LEDGER_TABLE_NAME" in env
        ledger = {s.get("Sid"): s for s in policy_statements_of_role(template, "PipelineDataRole")}[
            "OwnLedgerItemsOnly"
        ]
        assert ledger["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [tenant]}}


def test_split_and_register_share_one_data_role_and_the_workflow_one_role(acme):
    """Four roles a tenant (IAM roles are an account quota): the controller's, the closer's,
    the data plane's (split and register), the workflow's (its three state machines)."""
    roles = acme.find_resources("AWS::IAM::Role")
    assert len(roles) == 4
    functions = {
        f["Properties"]["FunctionName"]: f["Properties"]["Role"]["Fn::GetAtt"][0]
        for f in acme.find_resources("AWS::Lambda::Function").values()
    }
    assert functions["acme-split"] == functions["acme-register-chunk"]
    assert len({functions["acme-split"], functions["acme-controller"], functions["acme-close-file"]}) == 3
    machines = {
        m["Properties"]["RoleArn"]["Fn::GetAtt"][0]
        for m in acme.find_resources("AWS::StepFunctions::StateMachine").values()
    }
    assert len(machines) == 1 and machines.pop().startswith("PipelineWorkflowRole")


def test_a_success_close_carries_splits_content_hash_and_duplicate_a_failure_does_not(acme):
    states = definition(acme)["States"]
    success = states["RecordSuccess"]["Parameters"]["Payload"]
    assert success["content_sha256.$"] == "$.split.content_sha256"
    assert success["duplicate_of.$"] == "$.split.duplicate_of"
    failure = states["RecordFailure"]["Parameters"]["Payload"]
    assert not {"content_sha256", "content_sha256.$", "duplicate_of", "duplicate_of.$"} & set(failure)


def test_split_and_register_read_only_their_tenant_prefix_and_write_only_their_tenant_chunks(initech):
    """Split reads whichever file the tenant drops and writes its chunk index; register reads
    its chunk with a ranged GET of the landing object version: read access to the tenant's
    landing prefix (no write, no other tenant), read and write to its own work folder only."""
    statements = policy_statements_of_role(initech, "PipelineDataRole")
    by_sid = {s.get("Sid"): s for s in statements}
    read = by_sid["ReadOwnLandingPrefix"]
    assert sorted(read["Action"]) == ["s3:GetObject", "s3:GetObjectVersion"]
    assert read["Resource"]["Fn::Join"][1][-1] == "/initech/incoming/*"
    assert ":s3:::ordered-ingest-landing-" in read["Resource"]["Fn::Join"][1]
    write = by_sid["OwnChunks"]
    assert sorted(write["Action"]) == ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"]
    assert write["Resource"]["Fn::Join"][1][-1] == "/chunks/initech/*"
    listing = by_sid["ListOwnChunks"]
    assert listing["Action"] == "s3:ListBucket"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["chunks/initech/*"]}}
    s3_statements = [s for s in statements if any(a.startswith("s3:") for a in actions_of([s]))]
    assert {s["Sid"] for s in s3_statements} == {"ReadOwnLandingPrefix", "OwnChunks", "ListOwnChunks"}
    env = function_named(initech, "initech-register-chunk")["Properties"]["Environment"]["Variables"]
    assert env["LANDING_PREFIX"] == "initech/incoming/"


def test_stack_outputs_let_ops_find_the_tenants_resources(acme):
    outputs = {k: v["Value"] for k, v in acme.to_json()["Outputs"].items() if not k.startswith("Export")}
    values = list(outputs.values())
    assert "acme" in values and "acme/" in values and "halt" in values
    assert {"Ref": _queue_id(acme)} in values and {"Ref": _machine_id(acme)} in values


def test_no_function_role_has_a_managed_policy_or_an_s3_wildcard_action(synthesized):
    for name, template in synthesized.templates.items():
        for role in Template.from_json(template).find_resources("AWS::IAM::Role").values():
            assert "ManagedPolicyArns" not in role["Properties"], name
        for policy in Template.from_json(template).find_resources("AWS::IAM::Policy").values():
            actions = actions_of(policy["Properties"]["PolicyDocument"]["Statement"])
            assert not any(a.startswith("s3:") and "*" in a for a in actions), (name, actions)


# --- alarms ------------------------------------------------------------------------------------


def alarms_by_name(template: Template) -> dict[str, dict]:
    return {
        a["Properties"]["AlarmName"]: a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
    }


def test_every_alarm_notifies_the_topic_and_tells_what_to_do_first(acme):
    alarms = alarms_by_name(acme)
    assert set(alarms) == {
        "acme-controller-error-logs",
        "acme-split-error-logs",
        "acme-register-error-logs",
        "acme-closer-error-logs",
        "acme-queue-age",
        "acme-stall",
        "acme-paused",
        "acme-quarantine",
        "acme-sink-errors",
        "acme-workflow-failed",
        "acme-workflow-timed-out",
        "acme-workflow-aborted",
        "acme-workflow-throttled",
        "acme-intake-dlq",
        "acme-intake-failed",
    }
    for name, alarm in alarms.items():
        (action,) = alarm["AlarmActions"]
        assert action == ssm_parameter_ref(acme.to_json(), shared_parameter("alarm-topic-arn")), name
        first = (
            "First: python -m ops dlq list acme" if "-intake-" in name else "First: python -m ops status acme"
        )
        assert first in alarm["AlarmDescription"], name
        assert "Runbook: docs/operations.md#" in alarm["AlarmDescription"], name
        assert alarm["TreatMissingData"] == "notBreaching"


def test_no_alarm_watches_the_controller_errors_metric(acme):
    for alarm in alarms_by_name(acme).values():
        assert alarm.get("MetricName") != "Errors", "busy-gate waits fail the controller on purpose"


@pytest.mark.parametrize(
    ("key", "metric_name"),
    [
        ("failed", "ExecutionsFailed"),
        ("timed-out", "ExecutionsTimedOut"),
        ("aborted", "ExecutionsAborted"),
        ("throttled", "ExecutionThrottled"),
    ],
)
def test_workflow_alarms_count_executions_under_the_state_machines_arn_or_its_live_alias(
    acme, key, metric_name
):
    """GIVEN files started through the `live` alias, and no word from AWS on which ARN the
    `StateMachineArn` dimension of their executions carries THEN each workflow alarm watches
    its metric under both, the unqualified ARN and `<ARN>:live`, and fires at 1 on the larger
    (not the sum: an execution published under both counts once)."""
    (machine,) = acme.find_resources(
        "AWS::StepFunctions::StateMachine", {"Properties": {"StateMachineName": "acme-file-ingest-workflow"}}
    )
    alarm = alarms_by_name(acme)[f"acme-workflow-{key}"]
    assert (
        alarm["Threshold"],
        alarm["ComparisonOperator"],
        alarm["EvaluationPeriods"],
        alarm["TreatMissingData"],
    ) == (1, "GreaterThanOrEqualToThreshold", 1, "notBreaching")
    assert "MetricName" not in alarm
    expression, unqualified, alias = alarm["Metrics"]
    own = metric_name[0].lower() + metric_name[1:]
    assert expression == {
        "Id": "expr_1",
        "ReturnData": True,
        "Label": f"{metric_name} of tenant acme",
        "Expression": f"IF(FILL({own}, 0) >= FILL({own}Live, 0), FILL({own}, 0), FILL({own}Live, 0))",
    }

    def watched(arn: object, metric_id: str) -> dict:
        return {
            "Id": metric_id,
            "ReturnData": False,
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/States",
                    "MetricName": metric_name,
                    "Dimensions": [{"Name": "StateMachineArn", "Value": arn}],
                },
                "Period": 300,
                "Stat": "Sum",
            },
        }

    assert unqualified == watched({"Ref": machine}, own)
    assert alias == watched({"Fn::Join": ["", [{"Ref": machine}, ":live"]]}, f"{own}Live")


def test_error_log_filters_match_error_lines_runtime_errors_and_timeouts_for_every_function(acme):
    filters = acme.find_resources("AWS::Logs::MetricFilter")
    assert len(filters) == 4
    for f in filters.values():
        assert f["Properties"]["FilterPattern"] == (
            '{ ($.level = "ERROR") || ($.log_level = "ERROR") || ($.record.status = "timeout") '
            '|| ($.record.status = "error") || ($.record.status = "failure") }'
        )
    alarm = alarms_by_name(acme)["acme-split-error-logs"]
    assert alarm["MetricName"] == "ErrorLogLines-acme-split"
    assert alarm["Namespace"] == "OrderedIngest"


@pytest.mark.parametrize(
    ("alarm", "threshold", "metric"),
    [("initech-stall", 600, "HeadMessageWaitSeconds"), ("initech-paused", 14400, "PausedSeconds")],
)
def test_thresholds_come_from_tenants_yaml(initech, alarm, threshold, metric):
    props = alarms_by_name(initech)[alarm]
    assert props["Threshold"] == threshold
    assert props["MetricName"] == metric


def test_the_queue_age_alarm_reads_0_while_the_tenant_is_paused(initech):
    """GIVEN a tenant paused by ops pause (its files wait on purpose) THEN the queue-age alarm,
    at the tenant's threshold, watches the queue's age only in periods without PausedSeconds."""
    props = alarms_by_name(initech)["initech-queue-age"]
    assert props["Threshold"] == 7200
    expression, age, paused = props["Metrics"]
    assert expression["Expression"] == "IF(FILL(paused, 0) > 0, 0, age)" and expression["ReturnData"] is True
    assert age["MetricStat"]["Metric"]["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert paused["MetricStat"]["Metric"]["MetricName"] == contract.PAUSED_METRIC
    assert age["MetricStat"]["Period"] == paused["MetricStat"]["Period"] == 300


def test_stall_alarm_reads_the_controllers_head_wait_metric_for_this_tenant(acme):
    stall = alarms_by_name(acme)["acme-stall"]
    assert stall["Namespace"] == "OrderedIngest"
    assert stall["Dimensions"] == [{"Name": "Tenant", "Value": "acme"}]
    assert stall["Statistic"] == "Maximum"
    assert stall["Threshold"] == 1800


def test_queue_age_is_a_backlog_alarm_of_six_hours_by_default(acme):
    """A burst of files waiting behind each other is normal: the default must not page on it."""
    assert alarms_by_name(acme)["acme-queue-age"]["Threshold"] == 6 * 3600


def test_functions_send_info_system_records_so_the_timeout_report_reaches_the_filter(acme):
    for function in acme.find_resources("AWS::Lambda::Function").values():
        logging_config = function["Properties"]["LoggingConfig"]
        assert (logging_config["LogFormat"], logging_config["SystemLogLevel"]) == ("JSON", "INFO")


def sink_errors_alarm(template: Template, name: str) -> tuple[dict, dict[str, dict]]:
    alarm = alarms_by_name(template)[name]
    return alarm, {m["Id"]: m for m in alarm["Metrics"]}


def test_sink_errors_alarm_pages_on_the_failed_share_of_tries_past_a_count(acme):
    """GIVEN the default tenant THEN sink-errors fires when at least 10 tries failed in 5 minutes
    and they are at least half of all tries, from the register function's EMF metrics."""
    alarm, metrics = sink_errors_alarm(acme, "acme-sink-errors")
    assert alarm["Threshold"] == 0.5
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    (expression,) = [m for m in metrics.values() if "Expression" in m]
    assert expression["Expression"] == "IF(errors >= 10, errors / (errors + acknowledged), 0)"
    for metric_id, name in (("errors", "SinkErrors"), ("acknowledged", "SinkRequests")):
        stat = metrics[metric_id]["MetricStat"]
        assert stat["Metric"] == {
            "Namespace": "OrderedIngest",
            "MetricName": name,
            "Dimensions": [{"Name": "Tenant", "Value": "acme"}],
        }
        assert (stat["Period"], stat["Stat"], metrics[metric_id]["ReturnData"]) == (300, "Sum", False)


def test_sink_errors_threshold_comes_from_tenants_yaml(initech):
    _, metrics = sink_errors_alarm(initech, "initech-sink-errors")
    assert any(m.get("Expression", "").startswith("IF(errors >= 20,") for m in metrics.values())


def test_workflow_times_out_after_the_outage_budget_plus_six_hours_by_default(acme):
    assert definition(acme)["TimeoutSeconds"] == 3600 + 6 * 3600


def test_workflow_time_limit_comes_from_tenants_yaml(initech):
    assert definition(initech)["TimeoutSeconds"] == 14400


@pytest.fixture
def solo(tmp_path):
    """A TenantPipeline in a user-defined stack, next to the shared resources."""
    from aws_cdk import App, Stack

    from pipeline_constructs.shared import SharedResources, SharedResourcesProps
    from pipeline_constructs.tenant_pipeline import TenantPipeline

    stack = Stack(App(outdir=str(tmp_path)), "MyStack")
    shared = SharedResources(stack, "Shared", SharedResourcesProps())
    return TenantPipeline(stack, "Solo", tenant=tenant_config("solo", "s/"), shared=shared.refs())


def test_the_construct_is_reusable_in_any_stack_with_its_documented_attributes(solo):
    """GIVEN shared resources and a TenantPipeline in one user-defined stack, given a tenant's
    options as `tenants.yaml` writes them
    WHEN it is synthesized
    THEN it produces the tenant's queue, workflow and alarms and exposes them as attributes."""
    from aws_cdk import Stack

    template = Template.from_stack(Stack.of(solo))
    template.has_resource_properties("AWS::SQS::Queue", {"QueueName": "solo-event-queue.fifo"})
    template.resource_count_is("AWS::CloudWatch::Alarm", len(solo.alarms))
    template.resource_count_is("AWS::Logs::MetricFilter", 4)
    assert set(solo.functions) == {"controller", "split", "register", "closer"}
    assert set(solo.log_groups) == {"controller", "split", "register", "closer", "workflow"}
    assert solo.state_machine.state_machine_name is not None and solo.queue.fifo
    assert (solo.tenant_id, solo.landing_prefix) == ("solo", "s/")


def test_the_metric_factory_names_the_tenants_metrics(solo):
    """GIVEN a TenantPipeline
    WHEN the metrics of its factory (`pipeline.metrics`) are read
    THEN each names the metric the handlers, metric filters and services publish for this tenant."""
    from aws_cdk import Stack
    from aws_cdk.aws_cloudwatch import Metric

    from lambdas import contract

    metrics = solo.metrics
    head = metrics.head_message_wait()
    assert (head.namespace, head.metric_name, head.statistic) == (
        "OrderedIngest",
        "HeadMessageWaitSeconds",
        "Maximum",
    )
    assert head.dimensions == {"Tenant": "solo"}
    errors = metrics.error_log_lines("register")
    assert (
        errors.metric_name
        == contract.error_log_metric_name("solo", "register")
        == "ErrorLogLines-solo-register"
    )
    stack = Stack.of(solo)
    arn = solo.state_machine.state_machine_arn
    for executions, name in (
        (metrics.executions_failed(), "ExecutionsFailed"),
        (metrics.executions_timed_out(), "ExecutionsTimedOut"),
        (metrics.executions_aborted(), "ExecutionsAborted"),
        (metrics.executions_throttled(), "ExecutionThrottled"),
        (metrics.executions_succeeded(), "ExecutionsSucceeded"),
    ):
        watched = [m for m in executions.using_metrics.values() if isinstance(m, Metric)]
        assert {(m.namespace, m.metric_name, m.statistic) for m in watched} == {("AWS/States", name, "Sum")}
        assert [stack.resolve(m.dimensions) for m in watched] == [
            {"StateMachineArn": stack.resolve(arn)},
            {"StateMachineArn": stack.resolve(f"{arn}:live")},
        ]
    age = metrics.queue_age()
    assert (age.namespace, age.metric_name) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
    assert stack.resolve(age.dimensions) == {"QueueName": stack.resolve(solo.queue.queue_name)}
    quarantined = metrics.quarantined_messages()
    assert (quarantined.metric_name, quarantined.statistic, quarantined.dimensions) == (
        "QuarantinedMessages",
        "Sum",
        {"Tenant": "solo"},
    )


# --- intake: EventBridge retries, the tenant's dead-letter queue and its alarms ------------------


def _intake_dlq_id(template: Template) -> str:
    (dlq_id,) = template.find_resources(
        "AWS::SQS::Queue", {"Properties": {"QueueName": "acme-intake-dlq"}}
    ).keys()
    return dlq_id


@pytest.mark.parametrize("rule_name", ["acme-object-created", "acme-sfn-status"])
def test_every_rule_target_retries_a_day_then_dead_letters_into_the_tenants_intake_dlq(acme, rule_name):
    (target,) = only(acme, "AWS::Events::Rule", Name=rule_name)["Properties"]["Targets"]
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [_intake_dlq_id(acme), "Arn"]}}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 24 * 3600}


def test_intake_dlq_is_a_standard_encrypted_queue_that_keeps_events_two_weeks(acme):
    dlq = acme.to_json()["Resources"][_intake_dlq_id(acme)]["Properties"]
    assert "FifoQueue" not in dlq, "EventBridge refuses a FIFO queue as a dead-letter queue"
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_intake_dlq_policy_denies_requests_without_tls_and_lets_only_the_tenants_rules_send(acme):
    dlq_id = _intake_dlq_id(acme)
    (policy,) = [
        p["Properties"]
        for p in acme.find_resources("AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": dlq_id}]
    ]
    statements = policy["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in statements
    )
    senders = [s for s in statements if s["Effect"] == "Allow"]
    assert {s["Principal"]["Service"] for s in senders} == {"events.amazonaws.com"}
    assert {s["Action"] for s in senders} == {"sqs:SendMessage"}
    rules = {k for k, v in acme.find_resources("AWS::Events::Rule").items()}
    assert {s["Condition"]["ArnEquals"]["aws:SourceArn"]["Fn::GetAtt"][0] for s in senders} == rules


def test_intake_dlq_alarm_fires_on_one_visible_message(acme):
    alarm = alarms_by_name(acme)["acme-intake-dlq"]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        "Maximum",
    )
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [_intake_dlq_id(acme), "QueueName"]}}
    ]
    assert alarm["Threshold"] == 1
    assert "python -m ops dlq replay acme" in alarm["AlarmDescription"]


def test_intake_failed_alarm_sums_failed_and_undeliverable_invocations_of_both_rules(acme):
    alarm = alarms_by_name(acme)["acme-intake-failed"]
    assert alarm["Threshold"] == 1
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["ReturnData"] is True
    watched = {
        (m["MetricStat"]["Metric"]["MetricName"], m["MetricStat"]["Metric"]["Dimensions"][0]["Value"]): m[
            "Id"
        ]
        for m in alarm["Metrics"]
        if "MetricStat" in m
    }
    assert set(watched) == {
        (metric, rule)
        for metric in ("FailedInvocations", "InvocationsFailedToBeSentToDlq")
        for rule in ("acme-object-created", "acme-sfn-status")
    }
    for m in alarm["Metrics"]:
        if "MetricStat" in m:
            assert m["MetricStat"]["Metric"]["Namespace"] == "AWS/Events"
            assert m["MetricStat"]["Metric"]["Dimensions"][0]["Name"] == "RuleName"
            assert m["MetricStat"]["Stat"] == "Sum" and m["ReturnData"] is False
    # every metric counts, and a rule that published nothing counts as 0
    assert sorted(expression["Expression"].split(" + ")) == sorted(f"FILL({i}, 0)" for i in watched.values())


def test_stack_outputs_let_ops_find_the_intake_dlq_and_the_closer(acme):
    outputs = {k: v["Value"] for k, v in acme.to_json()["Outputs"].items()}
    closer_id = next(
        k
        for k, v in acme.find_resources("AWS::Lambda::Function").items()
        if v["Properties"]["FunctionName"] == "acme-close-file"
    )
    assert next(v for k, v in outputs.items() if k.startswith("PipelineIntakeDlqUrl")) == {
        "Ref": _intake_dlq_id(acme)
    }
    assert next(v for k, v in outputs.items() if k.startswith("PipelineCloserFunctionName")) == {
        "Ref": closer_id
    }


TRACED = """
defaults:
  sink: {url: "https://core.example.com/records", auth: {type: bearer, secret: core/token}}
tenants:
  - {id: traced, prefix: traced/, tracing: true}
  - {id: plain, prefix: plain/}
"""


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> dict[str, Template]:
    """A tenant with `tracing: true` beside one without, synthesized with cdk-nag on."""
    from aws_cdk import App

    from pipeline_constructs.application import build_app

    root = tmp_path_factory.mktemp("traced")
    (root / "tenants.yaml").write_text(TRACED)
    built = build_app(root / "tenants.yaml", app=App(outdir=str(root / "cdk.out")))
    built.app.synth()  # cdk-nag runs here: tracing must leave no unacknowledged finding
    return {tenant: Template.from_stack(stack) for tenant, stack in built.tenants.items()}


def test_tracing_is_opt_in_per_tenant_on_every_state_machine_and_function(traced):
    """GIVEN `tracing: true` on one tenant WHEN synthesized THEN its three state machines trace
    and its four functions trace actively; the other tenant's trace nothing (cost)."""
    for tenant, on in (("traced", True), ("plain", False)):
        machines = traced[tenant].find_resources("AWS::StepFunctions::StateMachine").values()
        assert [m["Properties"]["TracingConfiguration"] for m in machines] == [{"Enabled": on}] * 3, tenant
        functions = traced[tenant].find_resources("AWS::Lambda::Function").values()
        assert [f["Properties"].get("TracingConfig") for f in functions] == [
            {"Mode": "Active"} if on else None
        ] * 4, tenant
