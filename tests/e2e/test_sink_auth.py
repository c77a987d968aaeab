"""Sink authentication end to end: the local core system enforces each tenant's `sink.auth`
(bearer token from Secrets Manager, SigV4 signature), a rotation mid-run costs nothing, a
wrong token halts the tenant with an error naming the secret, and no credential is written
anywhere (worker logs, execution histories, the ledger)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from ops.cli import EXIT_HALTED
from tests.e2e.pipeline_checks import (
    assert_files_in_order,
    assert_no_overlap,
    assert_records_in_file_order,
    csv_file,
    halted,
    hold_at,
    log_lines,
    ops,
    status,
    wait_for,
)

BEARER_SECRET = "ordered-ingest/bearer/core-token"
ROTATING_SECRET = "ordered-ingest/rotating/core-token"
WRONG_SECRET = "ordered-ingest/wrong/core-token"
API_ARN = "arn:aws:execute-api:eu-west-1:111111111111:a1b2c3d4e5/prod/POST/records"

#: Every token a test made up or read; the last test looks for each of them everywhere.
SEEN_TOKENS: set[str] = set()


def bearer(secret: str) -> dict[str, Any]:
    return {"sink": {"auth": {"type": "bearer", "secret": secret}}}


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [
            {"id": "bearer", **bearer(BEARER_SECRET)},
            {"id": "rotating", **bearer(ROTATING_SECRET)},
            {"id": "wrong", **bearer(WRONG_SECRET)},
            {
                "id": "signed",
                "sink": {
                    "auth": {
                        "type": "sigv4",
                        "service": "execute-api",
                        "region": "eu-west-1",
                        "invoke_arn": API_ARN,
                    }
                },
            },
        ],
        chunk_size=3,
    )


def secret_value(pipe: LocalPipeline, secret: str) -> str:
    token = pipe.client("secretsmanager").get_secret_value(SecretId=secret)["SecretString"]
    SEEN_TOKENS.add(token)
    return token


def test_a_bearer_tenant_sends_its_records_with_the_secrets_token(pipe: LocalPipeline) -> None:
    """GIVEN a tenant with `auth: {type: bearer}` whose secret the local runtime created, and a
    core system that refuses any other token
    WHEN two files are processed
    THEN every record is registered once, in order, and no request was refused."""
    token = secret_value(pipe, BEARER_SECRET)
    assert pipe.sink("bearer").auth.token == token and token.startswith("tok-")
    first = pipe.put_file("bearer", "b0.csv", csv_file("b0", 5))
    second = pipe.put_file("bearer", "b1.csv", csv_file("b1", 4))

    pipe.wait_until_idle(timeout=60, tenants=["bearer"])

    executions = pipe.executions("bearer")
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED"]
    assert_files_in_order(executions, [first[0], second[0]])
    assert_records_in_file_order(pipe.sink("bearer").accepted, [("b0", 5), ("b1", 4)])
    assert pipe.sink("bearer").auth_refusals == []


def test_a_rotation_while_files_flow_fails_nothing_and_registers_each_record_once(
    pipe: LocalPipeline,
) -> None:
    """GIVEN a bearer tenant sending three files, the third held at its first record (503)
    WHEN, once records flow, the secret gets a new value and the core system switches to it
    THEN the register function's cached token is refused (401), it reads the secret again and
    sends the same request with the new token: every file succeeds, every record is registered
    exactly once and in order."""
    sink = hold_at(pipe, "rotating", "r2", 0)  # records still to come when the switch happens
    old = secret_value(pipe, ROTATING_SECRET)
    files = [pipe.put_file("rotating", f"r{n}.csv", csv_file(f"r{n}", 12)) for n in range(3)]
    wait_for(lambda: len(sink.accepted) >= 4, timeout=60, what="the first records to arrive")

    new = f"{old}-rotated"
    SEEN_TOKENS.add(new)
    pipe.client("secretsmanager").put_secret_value(SecretId=ROTATING_SECRET, SecretString=new)
    sink.accept_token(new)
    wait_for(lambda: sink.auth_refusals, timeout=60, what="the cached token to be refused")
    sink.clear_faults()
    pipe.wait_until_idle(timeout=90, tenants=["rotating"])

    executions = pipe.executions("rotating")
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * 3
    assert_no_overlap(executions)
    assert_files_in_order(executions, [key for key, _ in files])
    assert_records_in_file_order(sink.accepted, [(f"r{n}", 12) for n in range(3)])
    refusals = sink.auth_refusals
    assert refusals and {r.status for r in refusals} == {401}, refusals
    assert len(sink.accepted) > 4  # the switch happened while records were still to come


def test_a_wrong_token_halts_the_tenant_with_an_error_naming_the_secret(pipe: LocalPipeline) -> None:
    """GIVEN a core system that accepts a token other than the secret's (the secret is stale)
    WHEN a file arrives, then a second one
    THEN the first file fails with SinkAuthError naming the secret and HTTP 401 (after one
    refresh), nothing is registered, the tenant halts (the second file waits), `ops status`
    shows the error; once the secret holds the accepted token, `ops resume` delivers both files."""
    sink = pipe.sink("wrong")
    secret_value(pipe, WRONG_SECRET)
    accepted = "tok-only-the-core-system-knows-it"
    SEEN_TOKENS.add(accepted)
    sink.accept_token(accepted)
    first = pipe.put_file("wrong", "w0.csv", csv_file("w0", 4))
    wait_for(lambda: halted(pipe, "wrong"), timeout=60, what="the tenant to halt")
    second = pipe.put_file("wrong", "w1.csv", csv_file("w1", 2))

    message = (
        f"chunk 0 record 0 (file record 0): the core system refused the credentials (HTTP 401 after reading the "
        f"secret again) of secret '{WRONG_SECRET}'; fix or rotate the credential, then resume the file"
    )
    (failed,) = pipe.executions("wrong")
    assert (failed["key"], failed["status"]) == (first[0], "FAILED")
    # The page execution's failure, as the parent sees it (States.TaskFailed of the .sync child).
    assert contract.SinkAuthError.__name__ in failed["cause"] and message in failed["cause"]
    assert sink.accepted == [] and [r.status for r in sink.auth_refusals] == [401, 401]
    failure = status(pipe, "wrong")["last_failure"]
    assert (failure["error"], failure["cause"]) == (contract.SinkAuthError.__name__, message)
    code, out = ops(pipe, "status", "wrong")
    assert code == EXIT_HALTED and f"secret '{WRONG_SECRET}'" in out and "python -m ops resume wrong" in out

    pipe.client("secretsmanager").put_secret_value(SecretId=WRONG_SECRET, SecretString=accepted)
    code, out = ops(pipe, "resume", "wrong")
    assert code == 0, out
    pipe.wait_until_idle(timeout=60, tenants=["wrong"])
    assert_records_in_file_order(sink.accepted, [("w0", 4), ("w1", 2)])
    assert pipe.executions("wrong")[-1]["key"] == second[0]


def test_a_sigv4_tenant_signs_every_request(pipe: LocalPipeline) -> None:
    """GIVEN a tenant with `auth: {type: sigv4}` and a core system that verifies each signature
    (recomputed with botocore from the request and the workers' credentials)
    WHEN a file is processed THEN every record is registered, no request was refused, and the
    chunks shared the register worker's kept connection."""
    pipe.put_file("signed", "s0.csv", csv_file("s0", 7))
    pipe.wait_until_idle(timeout=60, tenants=["signed"])
    assert [e["status"] for e in pipe.executions("signed")] == ["SUCCEEDED"]
    assert_records_in_file_order(pipe.sink("signed").accepted, [("s0", 7)])
    assert pipe.sink("signed").auth_refusals == []
    # the warm worker keeps its connection across its invocations: not one connection per chunk (3)
    assert pipe.sink("signed").connections < 3


@pytest.mark.parametrize("tenant", ["bearer", "signed"])
def test_credentials_hold_over_kept_connections_the_core_system_cuts(
    pipe: LocalPipeline, tenant: str
) -> None:
    """GIVEN a core system that checks each request's credential, closes connections idle for 50 ms
    and cuts one after an answer at random (two in five)
    WHEN two files are processed THEN every record is registered once, in order, nothing is refused,
    and the register functions' own counts match the core system's: each connection it accepted was
    opened by an invocation, the cut ones were replaced (reconnects counted), the rest kept."""
    sink = pipe.sink(tenant).close_connections(idle_after=0.05, at_random=0.4, seed=3)
    before = sink.connections
    try:
        first = pipe.put_file(tenant, "k0.csv", csv_file("k0", 8))
        second = pipe.put_file(tenant, "k1.csv", csv_file("k1", 7))
        pipe.wait_until_idle(timeout=90, tenants=[tenant])
    finally:
        sink.close_connections()
    executions = pipe.executions(tenant)[-2:]
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED"]
    assert_files_in_order(executions, [first[0], second[0]])
    accepted = [r for r in sink.accepted if r["file"] in ("k0", "k1")]
    assert_records_in_file_order(accepted, [("k0", 8), ("k1", 7)])
    assert sink.auth_refusals == []
    records = [r for r in log_lines(pipe, tenant, "register") if "sink_reconnects" in r]
    opened = sum(r["sink_connections"] for r in records)
    reconnects = sum(r["sink_reconnects"] for r in records)
    assert opened == sink.connections  # every connection the core system accepted, counted by its opener
    assert 1 <= reconnects <= sink.connections - before  # at most one per connection it cut


def everything_written(pipe: LocalPipeline) -> str:
    """Every log line the workers wrote, the history of every execution (children included) and
    every ledger item, as text."""
    parts = [pipe.logs(name) for name in pipe.deployment.functions]
    sfn = pipe.client("stepfunctions")
    for machine in sfn.list_state_machines()["stateMachines"]:
        for execution in sfn.list_executions(stateMachineArn=machine["stateMachineArn"])["executions"]:
            history = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)
            parts.append(json.dumps(history["events"], default=str))
            parts.append(
                json.dumps(sfn.describe_execution(executionArn=execution["executionArn"]), default=str)
            )
    ddb = pipe.client("dynamodb")
    for table in ddb.list_tables()["TableNames"]:
        parts.append(json.dumps(ddb.scan(TableName=table)["Items"]))
    return "\n".join(parts)


def test_no_credential_is_written_anywhere(pipe: LocalPipeline) -> None:
    """GIVEN the files of the tests above (bearer, rotation, wrong token, sigv4)
    WHEN every worker log line, every execution's history and every ledger item is read
    THEN none holds a token, an Authorization header or a signature."""
    text = everything_written(pipe)
    assert (
        len(SEEN_TOKENS) >= 4 and "SinkAuthError" in text and WRONG_SECRET in text
    )  # the reads found something
    for token in SEEN_TOKENS:
        assert token not in text
    assert "Bearer " not in text and "AWS4-HMAC-SHA256" not in text and "Signature=" not in text
