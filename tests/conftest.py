"""Shared fixtures: the default app is synthesized once per test session."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from aws_cdk.assertions import Template

from pipeline_constructs.application import build_app

if TYPE_CHECKING:
    from pipeline_constructs.config import TenantConfig

ROOT = Path(__file__).resolve().parent.parent

# jsii and the CDK CLI run on the Node 22 that `make setup` installs into node_modules (the
# machine's Node may be end-of-life); put it first however pytest was started.
os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")
#: The tests' own tenants file (acme, globex, initech): construct tests and snapshots use it,
#: so editing the root tenants.yaml changes none of them. The user's file gets the generic
#: checks of tests/test_user_tenants.py.
FIXTURE_TENANTS = ROOT / "tests" / "fixtures" / "tenants.yaml"
DEFAULT_TENANTS = FIXTURE_TENANTS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """End-to-end tests and runs of the CDK CLI are `slow`: `make test-fast` leaves them out.
    Files with a slow test run first: with `--dist loadfile --no-loadscope-reorder` (make test)
    each file goes to the next free worker in collection order, and a long file last would end
    the run on one worker alone (xdist's own order, most tests first, did: 40 s longer)."""
    for item in items:
        if item.get_closest_marker("cli") or item.nodeid.startswith("tests/e2e/"):
            item.add_marker(pytest.mark.slow)
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def modules_loaded_twice(root: Path = ROOT) -> list[str]:
    """Files of the project under ``root`` that more than one entry of `sys.modules` was loaded
    from (``contract`` beside ``lambdas.contract``: two module objects of one file, with two
    copies of its classes and state), as "path: name, name"."""
    names: dict[Path, list[str]] = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if path.is_relative_to(root) and not path.is_relative_to(root / ".venv"):
            names.setdefault(path, []).append(name)
    return [
        f"{path.relative_to(root)}: {', '.join(sorted(found))}"
        for path, found in sorted(names.items())
        if len(found) > 1
    ]


_modules_checked = 0


@pytest.fixture(autouse=True)
def _each_file_one_module() -> Iterator[None]:
    """After every test: no file of the project loaded under two module names (checked again only
    when something was imported)."""
    global _modules_checked
    yield
    if len(sys.modules) != _modules_checked:
        twice = modules_loaded_twice()
        assert not twice, f"loaded under two module names: {twice}"
        _modules_checked = len(sys.modules)


def problems_of(yaml_text: str) -> list[str]:
    """The problems `parse_config` reports for a tenants file (dedented), which must be invalid."""
    from pipeline_constructs.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as caught:
        parse_config(textwrap.dedent(yaml_text))
    return caught.value.problems


def one_problem(yaml_text: str) -> str:
    """The one problem `parse_config` reports for a tenants file."""
    problems = problems_of(yaml_text)
    assert len(problems) == 1, problems
    return problems[0]


def tenant_config(tenant_id: str, prefix: str, **options: Any) -> TenantConfig:
    """Tenant `tenant_id` of a one-tenant file, validated as the app validates tenants.yaml.
    `options` are its keys as the file writes them (blocks as dicts); its sink is
    https://core.example.com without auth (`type: none`, on the tenant) unless they say otherwise."""
    from pipeline_constructs.config import parse_config

    # `auth: {type: none}` only on the tenant itself: defaults may not give it (config.py).
    sink = {"auth": {"type": "none"}, **options.pop("sink", {})}
    text = yaml.safe_dump(
        {
            "defaults": {"sink": {"url": "https://core.example.com"}},
            "tenants": [{"id": tenant_id, "prefix": prefix, "sink": sink, **options}],
        }
    )
    (tenant,) = parse_config(text).tenants
    return tenant


@dataclass(frozen=True)
class Synthesized:
    """Templates of one synthesized app, by stack name, plus the validation report."""

    templates: dict[str, dict]
    outdir: Path

    def template(self, stack_name: str) -> Template:
        return Template.from_json(self.templates[stack_name])

    @property
    def validation_report(self) -> dict:
        return json.loads((self.outdir / "validation-report.json").read_text())


def synthesize(tenants_file: Path, outdir: Path, cell: str | None = None) -> Synthesized:
    """The app of `tenants_file` (or its cell named `cell`) synthesized in this process."""
    from pipeline_constructs.application import new_app

    built = build_app(tenants_file, app=new_app(outdir=str(outdir)), cell=cell)
    assembly = built.app.synth()
    templates = {stack.stack_name: stack.template for stack in assembly.stacks}
    return Synthesized(templates=templates, outdir=outdir)


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory) -> Synthesized:
    return synthesize(DEFAULT_TENANTS, tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def shared_template(synthesized) -> Template:
    return synthesized.template("OrderedIngest-Shared")


@pytest.fixture(scope="session")
def acme(synthesized) -> Template:
    """The CSV tenant with default options."""
    return synthesized.template("OrderedIngest-Tenant-acme")


@pytest.fixture(scope="session")
def initech(synthesized) -> Template:
    """The tenant with non-default options."""
    return synthesized.template("OrderedIngest-Tenant-initech")


def cfn_lint_findings(
    template: dict | str, *, regions: tuple[str, ...] | None = None, ignored: tuple[str, ...] = ("W3005",)
) -> list[str]:
    """cfn-lint's errors and warnings of one template (a dict or its JSON/YAML text), each
    "<rule id> <message>", but the `ignored` rules (W3005: CDK adds a DependsOn on a role that a
    GetAtt already implies; harmless in a synthesized template): every Region and rule
    (`lint_all`), or the default rules in `regions`."""
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return list(_cfn_lint(text, regions, ignored))


@functools.cache
def _cfn_lint(text: str, regions: tuple[str, ...] | None, ignored: tuple[str, ...]) -> tuple[str, ...]:
    # The fixture apps share stacks (a tenant's stack is the same beside another notification or
    # key): a template linted before in this process is not linted again.
    from cfnlint.api import ManualArgs, lint, lint_all

    matches = lint(text, config=ManualArgs(regions=list(regions))) if regions else lint_all(text)
    return tuple(
        f"{m.rule.id} {m.message}" for m in matches if m.rule.id[0] in "EW" and m.rule.id not in ignored
    )


def share_service_models() -> None:
    """Give boto3 a fresh default session whose service models come from one botocore loader
    per process. Call it right after moto starts: `mock_aws` sets boto3's default session to
    None (so that the fake credentials apply), and a new session parses endpoints.json and each
    service model's JSON again, about 0.2 s of every test that makes clients. moto restores
    the previous default session when it stops, so nothing outlives the test but the models
    (the loader is `ops`' own, `ops.cli.shared_session`)."""
    import boto3

    from ops.cli import shared_session

    boto3.DEFAULT_SESSION = shared_session()


@pytest.fixture
def moto_account(monkeypatch: pytest.MonkeyPatch):
    """An in-process moto account with fake credentials and no endpoint override (the ops tests)."""
    from moto import mock_aws

    for name, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        share_service_models()
        yield


@contextmanager
def moto_executing_state_machines(region: str = "us-east-1") -> Iterator[None]:
    """In-process moto whose Step Functions executions run their definitions (on moto's
    threads). On exit every execution still running is stopped and its threads are joined, so
    that no later test sees its log records or its calls."""
    import boto3
    from moto import mock_aws
    from moto.stepfunctions.parser.utils import TMP_THREADS

    before = set(TMP_THREADS)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        share_service_models()
        try:
            yield
        finally:
            sfn = boto3.client("stepfunctions", region_name=region)
            for machine in sfn.list_state_machines()["stateMachines"]:
                for execution in sfn.list_executions(
                    stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
                )["executions"]:
                    sfn.stop_execution(executionArn=execution["executionArn"])
            for thread in [t for t in TMP_THREADS if t not in before]:
                thread.join(timeout=30)
                assert not thread.is_alive(), f"a Step Functions thread outlived its test: {thread.name}"


def create_ledger_table(ddb, name: str = "ledger") -> str:
    """The ledger table as the shared stack declares it (partition `tenant`, sort `entry`)."""
    ddb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "tenant", "KeyType": "HASH"},
            {"AttributeName": "entry", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "tenant", "AttributeType": "S"},
            {"AttributeName": "entry", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def normalise_asset_hashes(template: dict) -> dict:
    """Replace asset hashes so that a change of handler code does not churn every snapshot."""
    return json.loads(ASSET_HASH.sub("<asset-hash>", json.dumps(template)))


# -- Step Functions status-change events and the rules that match them ---------------------------

ACCOUNT_ARN = "arn:aws:states:us-east-1:123456789012"


def workflow_arn(name: str, qualifier: str | None = None) -> str:
    """A state machine's ARN in the tests' account, bare or qualified (`:live`, `:3`)."""
    return f"{ACCOUNT_ARN}:stateMachine:{name}" + (f":{qualifier}" if qualifier else "")


def status_change(state_machine_arn: str, status: str = "FAILED", **detail: str) -> dict:
    """A "Step Functions Execution Status Change" event as the EventBridge reference shows it
    (https://docs.aws.amazon.com/step-functions/latest/dg/cw-events.html), whose
    `stateMachineArn` is `state_machine_arn` (bare or qualified); `detail` adds fields such
    as `stateMachineAliasArn`. The execution ARN never carries the qualifier."""
    machine = state_machine_arn.split(":")[6]
    execution = f"{ACCOUNT_ARN}:execution:{machine}:evt-1"
    return {
        "version": "0",
        "id": "e",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": "123456789012",
        "time": "2026-11-30T00:00:00Z",
        "region": "us-east-1",
        "resources": [execution],
        "detail": {
            "executionArn": execution,
            "stateMachineArn": state_machine_arn,
            "name": "evt-1",
            "status": status,
            "startDate": 1,
            "stopDate": 2,
            "input": "{}",
            "output": None,
            **detail,
        },
    }


def resolved(pattern: dict, refs: dict[str, str]) -> dict:
    """An event pattern from a template with each `Ref` to a logical id in `refs` replaced by
    that ARN and each `Fn::Join` joined (what CloudFormation hands EventBridge)."""

    def walk(node):
        if isinstance(node, dict):
            if set(node) == {"Ref"} and node["Ref"] in refs:
                return refs[node["Ref"]]
            if set(node) == {"Fn::Join"}:
                separator, parts = node["Fn::Join"]
                return separator.join(walk(p) for p in parts)
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(pattern)


def pattern_matches(pattern: dict, event: dict) -> bool:
    """Whether EventBridge's content filtering matches `event` to `pattern` (moto's matcher,
    the one the local runtime routes with; it knows exact values, prefix, suffix, wildcard)."""
    from moto.events.models import EventPattern

    return EventPattern.load(json.dumps(pattern)).matches_event(event)


def ssm_parameter_ref(template: dict, parameter_name: str) -> dict:
    """`{"Ref": <the template parameter>}` that reads the SSM parameter `parameter_name` at deploy
    time (CDK's `StringParameter.value_for_string_parameter`); fails if the template has none."""
    (logical_id,) = [
        name
        for name, parameter in template.get("Parameters", {}).items()
        if parameter.get("Type") == "AWS::SSM::Parameter::Value<String>"
        and parameter.get("Default") == parameter_name
    ]
    return {"Ref": logical_id}
