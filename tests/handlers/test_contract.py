"""The handler/infrastructure contract: environment round trip, payload keys, key formats."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from lambdas import chunk_format, contract
from lambdas.contract import (
    ControllerEnv,
    FunctionEnvironmentError,
    RegisterEnv,
    SplitEnv,
    environment,
    from_env,
)


def test_environment_round_trips_through_from_env():
    """GIVEN a config as the construct renders it WHEN the handler reads it back THEN it is equal, typed."""
    config = SplitEnv(
        tenant_id="acme",
        format="jsonl",
        chunk_size=250,
        work_bucket="work",
        landing_prefix="acme/",
        ledger_table_name="ledger",
        duplicate_files="skip",
        max_chunks=8000,
    )
    rendered = environment(config)
    assert rendered == {
        "TENANT_ID": "acme",
        "FORMAT": "jsonl",
        "CHUNK_SIZE": "250",
        "WORK_BUCKET": "work",
        "LANDING_PREFIX": "acme/",
        "LEDGER_TABLE_NAME": "ledger",
        "DUPLICATE_FILES": "skip",
        "MAX_CHUNKS": "8000",
    }
    assert from_env(SplitEnv, rendered) == config
    register = RegisterEnv(
        tenant_id="a",
        work_bucket="w",
        ledger_table_name="l",
        sink_url="https://core",
        sink_timeout_seconds=2.5,
        sink_outage_budget_seconds=3600,
        landing_prefix="a/",
    )
    assert from_env(RegisterEnv, environment(register)) == register


def test_an_implicit_variable_is_left_out_at_its_default_and_read_back_as_it():
    """`RegisterEnv.metric_namespace`: absent for the app as shipped (its templates unchanged), set
    for a qualified copy."""
    register = RegisterEnv(
        tenant_id="a",
        work_bucket="w",
        ledger_table_name="l",
        sink_url="https://core",
        sink_timeout_seconds=2.5,
        sink_outage_budget_seconds=3600,
        landing_prefix="a/",
    )
    assert "METRIC_NAMESPACE" not in environment(register)
    assert from_env(RegisterEnv, environment(register)).metric_namespace == "OrderedIngest"
    qualified = dataclasses.replace(register, metric_namespace="q1-OrderedIngest")
    assert environment(qualified)["METRIC_NAMESPACE"] == "q1-OrderedIngest"
    assert from_env(RegisterEnv, environment(qualified)) == qualified


def test_fails_when_required_variable_is_missing():
    """GIVEN WORK_BUCKET unset WHEN read THEN the error names the variable."""
    env = environment(
        SplitEnv(
            tenant_id="a",
            format="csv",
            chunk_size=1,
            work_bucket="w",
            landing_prefix="a/",
            ledger_table_name="l",
            duplicate_files="process",
            max_chunks=1,
        )
    )
    del env["WORK_BUCKET"]
    with pytest.raises(FunctionEnvironmentError, match="^environment variable WORK_BUCKET is not set"):
        from_env(SplitEnv, env)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CHUNK_SIZE", "ten", "CHUNK_SIZE='ten' is not an integer"),
        ("CHUNK_SIZE", "0", "CHUNK_SIZE=0 must be at least 1"),
        ("FORMAT", "xml", "FORMAT='xml' must be one of csv, jsonl"),
        ("DUPLICATE_FILES", "ignore", "DUPLICATE_FILES='ignore' must be one of process, skip"),
    ],
)
def test_fails_when_a_split_variable_is_invalid(name, value, message):
    env = environment(
        SplitEnv(
            tenant_id="a",
            format="csv",
            chunk_size=1,
            work_bucket="w",
            landing_prefix="a/",
            ledger_table_name="l",
            duplicate_files="process",
            max_chunks=1,
        )
    )
    env[name] = value
    with pytest.raises(FunctionEnvironmentError, match=message):
        from_env(SplitEnv, env)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "SINK_URL",
            "file:///etc/passwd",
            "SINK_URL='file:///etc/passwd' must be an http:// or https:// URL",
        ),
        ("SINK_TIMEOUT_SECONDS", "0", "SINK_TIMEOUT_SECONDS=0.0 must be greater than 0.0"),
        ("SINK_TIMEOUT_SECONDS", "soon", "SINK_TIMEOUT_SECONDS='soon' is not a number"),
    ],
)
def test_fails_when_a_register_variable_is_invalid(name, value, message):
    env = environment(
        RegisterEnv(
            tenant_id="a",
            work_bucket="w",
            ledger_table_name="l",
            sink_url="https://c",
            sink_timeout_seconds=1,
            sink_outage_budget_seconds=60,
            landing_prefix="a/",
        )
    )
    env[name] = value
    with pytest.raises(FunctionEnvironmentError, match=message):
        from_env(RegisterEnv, env)


def test_every_function_knows_its_tenant():
    """The handler wrapper binds `tenant` to every log line from the config's tenant_id."""
    for config_type in (ControllerEnv, SplitEnv, RegisterEnv, contract.CloserEnv):
        assert "tenant_id" in contract.keys_of(config_type)


def test_payload_keys_are_the_typed_dicts_keys_in_order():
    assert contract.keys_of(contract.ChunkTask) == (
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
        "fault_since",
        "invocation",
    )
    # The register function's output is its next input: the progress extends the task.
    assert set(contract.keys_of(contract.ChunkTask)) < set(contract.keys_of(contract.ChunkProgress))
    assert set(contract.keys_of(contract.SplitRequest)) <= set(contract.keys_of(contract.ExecutionInput))


def test_error_classes_keep_the_names_the_workflow_matches():
    """The workflow's Retry/Catch match the Lambda errorType, i.e. the class name."""
    assert contract.SinkRetryableError.__name__ == "SinkRetryableError"
    assert contract.MalformedFileError(7, "bad").line_number == 7
    assert str(contract.MalformedFileError(7, "bad")) == "line 7: bad"


def test_work_bucket_layout():
    """Chunks and quarantined messages live under their own top-level prefix (own lifecycle)."""
    prefix = contract.chunk_prefix("acme", "evt-1")
    assert prefix == "chunks/acme/evt-1/" and prefix.startswith(contract.work_prefix("acme"))
    assert contract.chunk_index_key(prefix) == "chunks/acme/evt-1/chunk-offsets.bin"
    assert contract.manifest_key(prefix) == "chunks/acme/evt-1/manifest.json"
    assert (
        contract.quarantine_key("acme", 1_700_000_000.25, "m-1")
        == "quarantine/acme/20231114T221320.250000Z-m-1.json"
    )
    assert contract.replayed_prefix("acme") == "quarantine/acme/replayed/"
    assert not contract.quarantine_prefix("acme").startswith(contract.CHUNKS_ROOT)


@pytest.mark.parametrize(
    ("event_key", "real_key"),
    [
        ("in/red+flower.jpg", "in/red flower.jpg"),  # S3's own example
        ("in/c%2B%2B.csv", "in/c++.csv"),  # a literal plus arrives as %2B
        ("in/50%25.csv", "in/50%.csv"),
        ("in/year%3D2024/day%3D01.csv", "in/year=2024/day=01.csv"),
        ("in/%C3%A9t%C3%A9+%E6%97%A5%E6%9C%AC.csv", "in/été 日本.csv"),
        ("in/a/b/c/d.csv", "in/a/b/c/d.csv"),  # S3 leaves / . _ - letters and digits as they are
        ("in/%2Fslash.csv", "in//slash.csv"),
    ],
    ids=["space", "plus", "percent", "equals", "non-ascii", "nested", "encoded-slash"],
)
def test_s3_key_from_event_decodes_what_s3_encoded(event_key, real_key):
    assert contract.s3_key_from_event(event_key) == real_key


def test_s3_key_from_event_refuses_bytes_that_are_not_utf8():
    with pytest.raises(UnicodeDecodeError):
        contract.s3_key_from_event("in/%FF.csv")


def test_unusable_message_error_carries_only_its_reason():
    error = contract.UnusableMessageError("not JSON")
    assert (error.reason, str(error), error.log_fields) == ("not JSON", "not JSON", {"reason": "not JSON"})
    assert isinstance(error, contract.PipelineError)


def test_execution_arn_is_derived_from_the_state_machine_arn():
    """GIVEN a state machine ARN WHEN deriving an execution ARN THEN only the resource part changes."""
    assert (
        contract.execution_arn("arn:aws:states:eu-west-1:111122223333:stateMachine:acme-wf", "evt-1")
        == "arn:aws:states:eu-west-1:111122223333:execution:acme-wf:evt-1"
    )
    with pytest.raises(ValueError, match="not a state machine ARN"):
        contract.execution_arn("arn:aws:states:eu-west-1:1:activity:x", "evt-1")


@pytest.mark.parametrize("qualifier", ["live", "3"])
def test_execution_arn_of_an_alias_or_version_drops_the_qualifier(qualifier: str):
    """GIVEN the ARN of the `live` alias or of a version (what the controller starts through)
    WHEN deriving an execution ARN THEN it is the state machine's: Step Functions names an
    execution started through an alias or version after the state machine alone."""
    assert (
        contract.execution_arn(
            f"arn:aws:states:eu-west-1:111122223333:stateMachine:acme-wf:{qualifier}", "evt-1"
        )
        == "arn:aws:states:eu-west-1:111122223333:execution:acme-wf:evt-1"
    )


def test_fails_when_the_qualifier_of_a_state_machine_arn_is_empty():
    with pytest.raises(
        ValueError, match="not a state machine ARN: 'arn:aws:states:eu-west-1:1:stateMachine:acme-wf:'"
    ):
        contract.execution_arn("arn:aws:states:eu-west-1:1:stateMachine:acme-wf:", "evt-1")


def test_idempotency_key_is_sha256_of_version_and_record_index():
    """GIVEN an object version and record index WHEN keyed THEN sha256 hex of bucket/key?versionId=V#I."""
    assert (
        chunk_format.idempotency_key("landing", "acme/f.csv", "v1", 7)
        == hashlib.sha256(b"landing/acme/f.csv?versionId=v1#7").hexdigest()
    )
