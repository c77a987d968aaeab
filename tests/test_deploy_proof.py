"""Tenants files that validated and synthesized but would have failed at `cdk deploy`: each
now synthesizes within every deploy-time limit, or is refused by the config with tenant,
field and fix."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from lambdas.contract import MAX_TENANT_ID_LENGTH
from pipeline_constructs import deploy_limits
from pipeline_constructs.application import build_app, new_app
from pipeline_constructs.config import (
    MAX_INVOKE_ARN_CHARS,
    MAX_SEQUENCE_PATTERN_CHARS,
    MAX_SINK_URL_CHARS,
    parse_config,
)
from tests.conftest import one_problem

SINK = {"url": "https://core.example.com", "auth": {"type": "none"}}


def caller(index: int) -> str:
    return f"arn:aws:iam::111111111111:role/core-caller-{index:03d}"


def most_callers() -> int:
    """The most completion callers of `caller`'s length that fit the function's resource policy."""
    budget = deploy_limits.LIMITS["lambda-resource-policy"].value - deploy_limits.POLICY_ENVELOPE_BYTES
    return budget // deploy_limits.permission_statement_bytes(caller(0))


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    """GIVEN one tenant with completion.wait and tracing; one with every free-text value at its
    longest (id, prefix, sink URL, invoke ARN, sequence pattern) and every option that adds to
    its policies and environments (tracing, a key, uploaders, 16 subnets and 5 security groups);
    one with the longest bearer secret; one with as many completion callers as fit."""
    directory = tmp_path_factory.mktemp("edges")
    (directory / "tenants.yaml").write_text(
        yaml.safe_dump(
            {
                "notifications": {"emails": ["oncall@example.com"]},
                "tenants": [
                    {
                        "id": "traced",
                        "prefix": "traced/",
                        "tracing": True,
                        "sink": SINK,
                        "completion": {"wait": True, "callers": [caller(0)]},
                    },
                    {
                        "id": ("deep-" + "d" * 60)[:MAX_TENANT_ID_LENGTH],
                        "prefix": ("deep/" + "p" * 600)[:511] + "/",
                        "tracing": True,
                        "duplicate_files": "skip",
                        "encryption": {"kms_key": "create"},
                        "uploaders": [
                            f"arn:aws:iam::111111111111:role/{'u' * 64}",
                            "arn:aws:iam::222222222222:root",
                        ],
                        "network": {
                            "vpc_id": "vpc-0123456789abcdef0",
                            "subnet_ids": [f"subnet-{i:017x}" for i in range(16)],
                            "security_group_ids": [f"sg-{i:017x}" for i in range(5)],
                        },
                        "sink": {
                            "url": "https://core.example.com/" + "u" * (MAX_SINK_URL_CHARS - 25),
                            "auth": {
                                "type": "sigv4",
                                "service": "execute-api",
                                "region": "eu-west-1",
                                "invoke_arn": (
                                    "arn:aws:execute-api:eu-west-1:111111111111:abc123/prod/POST/"
                                    + "r" * 2000
                                )[:MAX_INVOKE_ARN_CHARS],
                            },
                        },
                        "ordering": {
                            "by": "key_sequence",
                            "sequence_pattern": r"(?P<seq>\d+)"
                            + "x" * (MAX_SEQUENCE_PATTERN_CHARS - len(r"(?P<seq>\d+)")),
                        },
                    },
                    {
                        "id": "bearer",
                        "prefix": ("bearer/" + "p" * 600)[:511] + "/",
                        "sink": {
                            "url": "https://core.example.com/" + "u" * (MAX_SINK_URL_CHARS - 25),
                            "auth": {"type": "bearer", "secret": "s" * 512},
                        },
                    },
                    {
                        "id": "callers",
                        "prefix": "callers/",
                        "sink": SINK,
                        "completion": {"wait": True, "callers": [caller(i) for i in range(most_callers())]},
                    },
                ],
            }
        )
    )
    built = build_app(directory / "tenants.yaml", app=new_app(outdir=str(directory / "out")))
    return {stack.stack_name: stack.template for stack in built.app.synth().stacks}


def test_completion_wait_with_tracing_and_every_longest_value_synthesize_within_every_limit(edges):
    """THEN cdk-nag and the deploy-time limits pass (the synth above would have raised): the
    completion role's X-Ray grant is acknowledged, the object-created rule's description does
    not hold the prefix, the environments stay within 4 KB, the callers within 20 KB."""
    deep = f"OrderedIngest-Tenant-{('deep-' + 'd' * 60)[:MAX_TENANT_ID_LENGTH]}"
    assert set(edges) == {
        "OrderedIngest-Shared",
        "OrderedIngest-Tenant-traced",
        deep,
        "OrderedIngest-Tenant-bearer",
        "OrderedIngest-Tenant-callers",
    }
    rules = [r["Properties"] for r in edges[deep]["Resources"].values() if r["Type"] == "AWS::Events::Rule"]
    assert all("ppppp" not in r.get("Description", "") for r in rules)
    permissions = [
        r
        for r in edges["OrderedIngest-Tenant-callers"]["Resources"].values()
        if r["Type"] == "AWS::Lambda::Permission" and "core-caller" in json.dumps(r)
    ]
    assert len(permissions) == most_callers() > 40


def test_fails_when_the_completion_callers_pass_the_functions_resource_policy():
    callers = [caller(i) for i in range(most_callers() + 1)]
    problem = one_problem(
        yaml.safe_dump(
            {
                "tenants": [
                    {
                        "id": "acme",
                        "prefix": "acme/",
                        "sink": SINK,
                        "completion": {"wait": True, "callers": callers},
                    }
                ]
            }
        )
    )
    assert problem.startswith(f"tenant 'acme': field 'completion.callers' = ['{caller(0)}', ")
    assert f"over Lambda's 20,480 (one statement per principal: the first {most_callers()} fit)" in problem
    assert problem.endswith(
        "list fewer principals: one role that the core system's callers assume, or the account "
        "root 'arn:aws:iam::<account>:root' of the core system's account, which then decides who "
        "may call"
    )


def test_fails_when_the_sink_url_is_not_ascii_or_the_invoke_arn_too_long():
    """An environment counts bytes: a URL carries other characters percent-encoded."""
    problem = one_problem(
        yaml.safe_dump(
            {
                "tenants": [
                    {
                        "id": "acme",
                        "prefix": "acme/",
                        "sink": {**SINK, "url": "https://core.example.com/räksmörgås"},
                    }
                ]
            }
        )
    )
    assert "field 'sink.url'" in problem and "has characters other than ASCII: percent-encode them" in problem
    arn = "arn:aws:execute-api:eu-west-1:111111111111:abc123/prod/POST/" + "r" * MAX_INVOKE_ARN_CHARS
    problem = one_problem(
        yaml.safe_dump(
            {
                "tenants": [
                    {
                        "id": "acme",
                        "prefix": "acme/",
                        "sink": {
                            "url": "https://core.example.com",
                            "auth": {
                                "type": "sigv4",
                                "service": "execute-api",
                                "region": "eu-west-1",
                                "invoke_arn": arn,
                            },
                        },
                    }
                ]
            }
        )
    )
    assert (
        "field 'sink.auth.invoke_arn'" in problem
        and f"is too long (at most {MAX_INVOKE_ARN_CHARS} characters)" in problem
    )


def test_fails_when_the_sink_url_or_the_sequence_pattern_would_pass_a_functions_4_kb_environment():
    url = "https://core.example.com/" + "u" * MAX_SINK_URL_CHARS
    assert one_problem(
        yaml.safe_dump({"tenants": [{"id": "acme", "prefix": "acme/", "sink": {**SINK, "url": url}}]})
    ) == (
        f"tenant 'acme': field 'sink.url' = 'https://core.example.com/uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu..."
        f"uuuuuuuuuuuuuuuuuuu' ({len(url)} characters): is too long (at most {MAX_SINK_URL_CHARS} characters); "
        "use the core system's https:// endpoint"
    )
    pattern = r"(?P<seq>\d+)" + "x" * MAX_SEQUENCE_PATTERN_CHARS
    problem = one_problem(
        textwrap.dedent(f"""\
        tenants:
          - id: acme
            prefix: acme/
            sink: {{url: 'https://core.example.com', auth: {{type: none}}}}
            ordering: {{by: key_sequence, sequence_pattern: '{pattern}'}}
        """)
    )
    assert problem.startswith("tenant 'acme': field 'ordering.sequence_pattern' = ")
    assert f"is too long (at most {MAX_SEQUENCE_PATTERN_CHARS} characters)" in problem


@pytest.mark.slow
def test_1000_tenants_on_84_shards_fit_the_shared_template_with_no_wildcard_rule(tmp_path):
    """GIVEN 1,000 tenants of 20-character ids on 84 shards (the shared template was 1,088,271
    bytes, its forwarding role's policy over 10,240 characters, and each shard's status forward
    a wildcard rule: 84 against EventBridge's 30) WHEN the shared cell synthesizes THEN it is
    within every limit."""
    tenants = [
        {"id": (f"t{i:04d}-" + "x" * 20)[:20], "prefix": (f"t{i:04d}-" + "x" * 20)[:20] + "/", "sink": SINK}
        for i in range(1000)
    ]
    path = tmp_path / "tenants.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "notifications": {"emails": ["oncall@example.com"]},
                "routing": {"shards": 84},
                "account_limits": {"iam_roles": 5000, "lambda_concurrent_executions": 1200},
                "tenants": tenants,
            }
        )
    )
    config = parse_config(path.read_text())
    built = build_app(path, app=new_app(outdir=str(tmp_path / "out")), config=config, cell="shared")
    shared = next(s for s in built.app.synth().stacks if s.stack_name == "OrderedIngest-Shared")
    size = len((tmp_path / "out" / shared.template_file).read_bytes())
    assert 500_000 < size < deploy_limits.LIMITS["template-bytes"].value
    rules = [r for r in shared.template["Resources"].values() if r["Type"] == "AWS::Events::Rule"]
    assert len(rules) >= 2 * 84 and not any("wildcard" in json.dumps(r) for r in rules)
