"""`python -m demo --scenario correction` (demo/correction.py): a malformed file corrected in its
place with `ops replace`, then a planned pause with `ops pause` and `ops unpause`.

The run itself is slow (a local pipeline, as the demo tests of tests/e2e/test_demo.py); the
rest checks its parts without one: the malformed file, the checks of `ops status`, the exit
status and message of a failed check, and a tenants file it cannot run on.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from demo import correction
from demo.__main__ import EXIT_HELD, EXIT_TIMED_OUT, EXIT_USAGE, EXIT_VIOLATED, SCENARIOS, main, parse_args
from demo.samples import missing_field, sample_files
from demo.verify import Upload
from tests.conftest import FIXTURE_TENANTS
from tests.e2e.pipeline_checks import E2E_TIME_SCALE

FAILED = Upload("acme/file-002.csv", "v-bad", 2, 0, expect_failure=True)
CORRECTED = Upload("acme/file-002.csv", "v-good", 2, 20)


def test_the_scenario_is_one_of_the_demo_s_and_needs_no_more_options(capsys, tmp_path):
    """It runs without the big file; --timeline, which draws no replacement or pause, is refused."""
    assert "correction" in SCENARIOS and "ops replace" in SCENARIOS["correction"]
    assert parse_args(["--scenario", "correction"]).big_records == 0
    with pytest.raises(SystemExit):
        parse_args(["--scenario", "correction", "--timeline", str(tmp_path / "run.png")])
    assert "--timeline does not draw `ops replace` and `ops pause`" in capsys.readouterr().err


def test_the_malformed_file_keeps_its_name_and_has_one_row_missing_a_field_which_split_refuses():
    from lambdas.chunk_format import file_records
    from lambdas.contract import MalformedFileError

    good = sample_files("acme", "csv", files=3, records=10)[2]
    bad = missing_field(good, 7)
    assert (bad.name, bad.file_no, bad.records) == (good.name, good.file_no, 0)
    assert len(list(file_records(io.BytesIO(good.body), "csv"))) == good.records
    with pytest.raises(MalformedFileError, match="expected 5 fields, found 4"):
        list(file_records(io.BytesIO(bad.body), "csv"))


def status(**changes):
    """`ops status TENANT --json` of the tenant after the correction, changed by ``changes``."""
    attempts = [
        {
            "version_id": "v-bad",
            "status": "FAILED",
            "replaced_by": {"key": FAILED.key, "version_id": "v-good"},
        },
        {"version_id": "v-good", "status": "SUCCEEDED", "replaced_by": None},
    ]
    return {
        "state": "idle",
        "last_24h": {"succeeded": 6, "failed": 0, "skipped": 0},
        "attempts_24h": {"total": 7, "failed": 1, "paused": 0},
        "retried_24h": [{"key": FAILED.key, "outcome": "SUCCEEDED", "attempts": attempts}],
        **changes,
    }


def problems(state):
    return correction.status_problems(state, done=6, attempts=7, paused=0, failed=FAILED, corrected=CORRECTED)


def test_ops_status_must_count_files_apart_from_attempts_and_link_the_failed_attempt_to_its_replacement():
    assert problems(status()) == []
    assert problems(status(last_24h={"succeeded": 5, "failed": 1, "skipped": 0})) == [
        "last_24h is {'succeeded': 5, 'failed': 1, 'skipped': 0}, expected 6 succeeded, 0 failed, 0 skipped"
    ]
    assert problems(status(state="halted", attempts_24h={"total": 6, "failed": 1, "paused": 0})) == [
        "state is halted, not idle",
        "attempts_24h is {'total': 6, 'failed': 1, 'paused': 0}, expected 7 in all, 1 failed, 0 paused",
    ]
    assert problems(status(retried_24h=[])) == [
        "retried_24h holds 0 entries for acme/file-002.csv, expected 1"
    ]
    unlinked = status()
    unlinked["retried_24h"][0]["attempts"][0]["replaced_by"] = None
    assert problems(unlinked) == [
        "acme/file-002.csv: the failed attempt is FAILED, replaced by None, expected "
        "FAILED, replaced by version v-good"
    ]


def test_what_the_core_system_registered_is_shown_a_line_per_run_of_one_file():
    accepted = [{"file": "0", "seq": str(n)} for n in range(3)] + [
        {"file": "2", "seq": "0"},
        {"file": "2", "seq": "1"},
    ]
    assert correction.arrivals(accepted, {"0": "file-000.csv"}) == [
        "file-000.csv: records 0 to 2 (3)",
        "2: records 0 to 1 (2)",
    ]


class _Tenant:
    id = "acme"


@pytest.mark.parametrize(
    ("raised", "code", "said"),
    [
        (
            correction.CheckFailed("ops status --json: state is halted, not idle"),
            EXIT_VIOLATED,
            "check failed: ops status --json: state is halted, not idle",
        ),
        (
            correction.TimedOut("waiting for acme to halt on file-002.csv"),
            EXIT_TIMED_OUT,
            "timed out after 600 s waiting for acme to halt on file-002.csv",
        ),
    ],
)
def test_a_check_that_fails_ends_the_run_with_its_message_and_a_non_zero_status(
    monkeypatch, raised, code, said
):
    def fail(self):
        raise raised

    monkeypatch.setattr(correction.Scenario, "malformed_file_halts", fail)
    out = io.StringIO()
    scenario = correction.Scenario(
        None, Console(file=out, width=200), _Tenant(), None, records=10, timeout=600
    )
    assert scenario.run() == code
    assert (correction.EXIT_HELD, correction.EXIT_VIOLATED, correction.EXIT_TIMED_OUT) == (
        EXIT_HELD,
        EXIT_VIOLATED,
        EXIT_TIMED_OUT,
    )
    assert said in out.getvalue() and "every guarantee held" not in out.getvalue()


def test_a_tenants_file_without_a_tenant_to_run_it_on_is_refused_before_anything_starts(tmp_path, capsys):
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        "defaults:\n  sink: {url: https://core.example.com/api/records}\n"
        "tenants:\n  - {id: acme, prefix: acme/, format: jsonl, sink: {auth: {type: none}}}\n"
    )
    assert main(["--tenants", str(tenants), "--scenario", "correction"]) == EXIT_USAGE
    assert "--scenario correction needs a tenant with format: csv" in " ".join(
        capsys.readouterr().out.split()
    )


@pytest.mark.slow
def test_the_demo_corrects_a_file_in_place_and_pauses_for_a_maintenance(capsys):
    """GIVEN the tests' tenants file WHEN the demo runs --scenario correction THEN acme halts on
    its malformed third file with the hint to replace it, `ops replace` runs the corrected
    version in its place, the core system gets the six files in order, every record once, and
    `ops status` links the failed attempt to its replacement; `ops pause` stops a file mid-way
    while globex goes on, `ops unpause` runs it on there, and the demo exits 0."""
    from lambdas import hints

    code = main(
        [
            "--tenants",
            str(FIXTURE_TENANTS),
            "--scenario",
            "correction",
            "--records",
            "10",
            "--time-scale",
            str(E2E_TIME_SCALE),
            "--timeout",
            "300",
        ]
    )
    out = capsys.readouterr().out
    assert code == EXIT_HELD, out
    text = " ".join(out.split())
    for step in ("Step 1 of 4", "Step 2 of 4", "Step 3 of 4", "Step 4 of 4"):
        assert step in text
    assert "acme is halted: acme/file-002.csv failed with MalformedFileError" in text
    assert f"hint: {hints.BAD_FILE.text}" in text  # the one hint of a malformed file (lambdas/hints.py)
    assert " replace acme --key acme/file-002.csv --version " in text and "acme: replaced s3://" in text
    assert (
        "file-000.csv: records 0 to 4 (5) file-001.csv: records 0 to 9 (10) file-002.csv: records 0 to 19 (20) "
        "file-003.csv: records 0 to 0 (1) file-004.csv: records 0 to 14 (15) file-005.csv: records 0 to 4 (5)"
        in text
    )
    assert "ok ops status --json: last_24h {'succeeded': 6, 'failed': 0, 'skipped': 0}" in text
    assert "FAILED (MalformedFileError), replaced by acme/file-002.csv (version" in text
    assert " pause acme --reason 'core system maintenance'" in text
    assert "acme is paused since" in text and "acme/file-007.csv stopped at record 10" in text
    assert "ok globex: file-000.jsonl done" in text
    assert "acme/file-007.csv runs on at record 10" in text
    assert "ok every file of the run: 9 files succeeded" in text
    assert "every guarantee held" in text and "check failed" not in text
