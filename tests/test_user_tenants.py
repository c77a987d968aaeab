"""Generic checks of the USER's tenants file: whatever tenants it declares, it synthesizes
(cdk-nag on), every template is valid (cfn-lint), and every tenant has the mechanisms the
guarantees rest on. `make test` runs them on `tenants.yaml`, `make test TENANTS=path` on
another file (the `TENANTS` environment variable). They name no tenant: adding, removing or
changing tenants never breaks them, only a file that would deploy a broken pipeline does.

The construct tests and snapshots use the tests' own file (tests/fixtures/tenants.yaml).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from pipeline_constructs import names
from pipeline_constructs.config import AppConfig, load_config
from tests.conftest import ROOT, Synthesized, cfn_lint_findings, synthesize

USER_TENANTS = Path(os.environ.get("TENANTS") or ROOT / "tenants.yaml")


@pytest.fixture(scope="module")
def config() -> AppConfig:
    return load_config(USER_TENANTS)


@pytest.fixture(scope="module")
def user_app(config, tmp_path_factory) -> Synthesized:
    # cdk-nag runs in the synth: an unacknowledged finding raises here
    return synthesize(USER_TENANTS, tmp_path_factory.mktemp("user-cdk.out"))


def tenant_templates(user_app: Synthesized, config: AppConfig) -> dict[str, Template]:
    found = {}
    for tenant in config.tenants:
        stack = names.TENANT_STACK.render(tenant.id)
        matches = [name for name in user_app.templates if name == stack or name.endswith(f"/{stack}")]
        assert len(matches) == 1, f"tenant {tenant.id}: expected one stack {stack}, found {matches}"
        found[tenant.id] = user_app.template(matches[0])
    return found


def test_the_users_tenants_file_synthesizes_with_cdk_nag_clean(user_app):
    (nag,) = [r for r in user_app.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []


def test_every_template_of_the_users_file_is_valid(user_app):
    for name, template in user_app.templates.items():
        assert cfn_lint_findings(template) == [], name


def test_every_tenant_of_the_users_file_has_the_mechanisms_the_guarantees_rest_on(user_app, config):
    """Per tenant, whatever its options: its queue, a controller that handles one message at a
    time, a rule that sends its prefix's uploads to its queue with a dead-letter queue, the
    workflow's Maps one item at a time, the status rule, and the alarms that page."""
    for tenant_id, template in tenant_templates(user_app, config).items():
        tenant = next(t for t in config.tenants if t.id == tenant_id)
        queues = template.find_resources("AWS::SQS::Queue")
        fifo = tenant.ordering.by == "arrival"
        queue_name = (names.QUEUE if fifo else names.SEQUENCE_QUEUE).render(tenant_id)
        assert [q for q in queues.values() if q["Properties"].get("QueueName") == queue_name], tenant_id
        controller = [
            f
            for f in template.find_resources("AWS::Lambda::Function").values()
            if f["Properties"]["FunctionName"] == names.CONTROLLER_FUNCTION.render(tenant_id)
        ]
        assert len(controller) == 1 and controller[0]["Properties"]["ReservedConcurrentExecutions"] == 1, (
            tenant_id
        )
        (mapping,) = template.find_resources("AWS::Lambda::EventSourceMapping").values()
        assert mapping["Properties"]["BatchSize"] == 1, tenant_id
        rules = {
            r["Properties"]["Name"]: r["Properties"]
            for r in template.find_resources("AWS::Events::Rule").values()
            if "Name" in r["Properties"]
        }
        created = rules.get(names.RULE.render(tenant_id))
        if created is not None:  # on the default bus, or on the tenant's shard bus
            assert json.dumps(created["EventPattern"]).count(tenant.prefix) >= 1, tenant_id
            assert all("DeadLetterConfig" in target for target in created["Targets"]), tenant_id
        machines = template.find_resources("AWS::StepFunctions::StateMachine")
        assert len(machines) == 3, tenant_id
        for machine in machines.values():
            parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
            definition = json.loads("".join(p if isinstance(p, str) else "<ref>" for p in parts))
            maps = [s for s in _states(definition) if s["Type"] == "Map"]
            assert maps and all(m["MaxConcurrency"] == 1 for m in maps), tenant_id
        alarms = {
            a["Properties"]["AlarmName"] for a in template.find_resources("AWS::CloudWatch::Alarm").values()
        }
        for alarm in ("stall", "workflow-failed", "intake-dlq", "quarantine"):
            assert f"{tenant_id}-{alarm}" in alarms, (tenant_id, alarm)


def _states(definition: dict) -> list[dict]:
    found = []
    for state in definition["States"].values():
        found.append(state)
        if "ItemProcessor" in state:
            found += _states(state["ItemProcessor"])
    return found


def test_every_iam_policy_of_the_users_file_passes_parliament(user_app):
    """Whatever the file declares (uploaders, keys, secrets...): every policy of its templates
    passes parliament, or its finding is acknowledged in tools/iam_lint_acknowledgements.yaml
    (`make iam-lint TENANTS=...` prints them)."""
    from tools import iam_lint

    templates, environments = iam_lint.assembly_templates(user_app.outdir)  # the targets' Stages too
    new = iam_lint.unacknowledged(iam_lint.lint(templates, environments), iam_lint.load_acknowledgements())
    assert new == [], "parliament findings nobody acknowledged:\n" + "\n".join(map(str, new))
