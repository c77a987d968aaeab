"""The cloud test's scenario (`python -m cloudtest`, `make cloud-test`) on the local runtime: the
same code that checks a real account, through boto3 and `ops` with the runtime's endpoint URL,
so it is exercised on every `make test`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cloudtest import scenario
from cloudtest.runs import tenant_ids
from cloudtest.targets import LocalTarget

#: Slower than the other modules' 0.03 (a controller's 20 s timeout: 6 s, so a loaded machine does
#: not time it out): this module's point is the cloud test's code, and no step of the scenario
#: waits for a timeout (hand-offs are kicks, the halt is a rejection), so it costs nothing.
CLOUD_TIME_SCALE = 0.3


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTarget]:
    local = LocalTarget("e2e001", tmp_path_factory.mktemp("cloud"), time_scale=CLOUD_TIME_SCALE)
    yield local
    local.close()


@pytest.fixture(scope="module")
def ran(target: LocalTarget) -> tuple[scenario.Report, list[str]]:
    """The scenario, run once for the module: each test below stands alone on its outcome."""
    lines: list[str] = []
    return scenario.Scenario(target, say=lines.append).run(), lines


def test_the_cloud_scenario_holds_order_exactly_once_and_halt_resume_on_the_local_runtime(
    target: LocalTarget,
    ran: tuple[scenario.Report, list[str]],
) -> None:
    """GIVEN the cloud test's two tenants (SigV4 to the stand-in, as on AWS), their names qualified,
    and a core system that refuses one record of the first tenant's second file
    WHEN the scenario uploads three files per tenant, waits for the halt, lets the core system
    accept and runs `ops resume`
    THEN every check holds, and the figures come from real executions."""
    report, lines = ran

    assert report.problems == [], "\n".join(lines)
    halting, steady = tenant_ids("e2e001")
    assert any(line.startswith(f"{halting} halted on file-2.csv") for line in lines), lines
    assert f"{halting}: the resumed file went on at record {scenario.REJECTED_SEQ}, the one refused" in lines
    assert [f.tenant for f in report.figures] == [halting, steady]
    records = scenario.FILES_PER_TENANT * scenario.RECORDS_PER_FILE
    assert [f.records for f in report.figures] == [records, records]
    # two hand-offs each: after file 1 and file 2 (the halting tenant: after the resumed file 2;
    # the wait for the operator is no hand-off)
    assert [len(f.handoff_gaps) for f in report.figures] == [2, 2]
    assert all(f.records_per_second > 0 for f in report.figures)
    # the pace model's steps, measured from the histories and the stand-in's arrival times
    assert [line.split(":")[0] for line in report.pace] == [halting, steady]
    assert all("not measured" not in line for line in report.pace), report.pace
    # every request was signed: the sink refused none for its credentials
    assert all(not target.pipe.sink(t).auth_refusals for t in target.tenant_ids)
    # under the run's qualifier (on AWS, beside a deployment of the app): every stack, and ops found them
    assert target.qualifier == "cte2e001"
    assert sorted(target.pipe.templates) == [
        "cte2e001-OrderedIngest-Shared",
        f"cte2e001-OrderedIngest-Tenant-{halting}",
        f"cte2e001-OrderedIngest-Tenant-{steady}",
    ]


def test_the_checks_fail_when_a_record_reaches_the_core_system_twice(
    target: LocalTarget,
    ran: tuple[scenario.Report, list[str]],
) -> None:
    """GIVEN the scenario's run (`ran`) WHEN the stand-in's record shows one record registered twice (a
    broken idempotency layer) THEN the scenario's check names it."""
    steady = target.tenant_ids[1]
    broken = scenario.Scenario(target, say=lambda _: None)
    broken.uploads[steady] = [
        scenario.verify.Upload(
            key=e["key"],
            version_id=e["version_id"],
            file_id=f"{steady}-{n}",
            records=scenario.RECORDS_PER_FILE,
        )
        for n, e in enumerate(broken.executions(steady), start=1)
    ]
    received = target.core.received(steady)
    doubled = [*received, received[0]]
    original = target.core.received
    try:
        target.core.received = lambda tenant: doubled if tenant == steady else original(tenant)  # type: ignore[method-assign]  # a stand-in for one test
        broken.check_tenant(steady)
    finally:
        target.core.received = original  # type: ignore[method-assign]  # a stand-in for one test
    assert any("registered twice" in p for p in broken.report.problems), broken.report.problems
    assert any("registered 2 times" in p for p in broken.report.problems), broken.report.problems
