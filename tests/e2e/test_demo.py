"""The main command (`make demo`), small: it runs a fault scenario end to end and exits 0."""

from __future__ import annotations

import numpy as np
from PIL import Image

from demo.__main__ import main
from demo.timeline import HALT_COLOUR, OUTCOMES
from tests.conftest import ROOT


def assert_timeline_shows_a_halt(path):
    """The picture opens, and holds bars of the succeeded and the failed colour and the halt's shade
    (the exact pixel placement is checked in tests/test_demo_timeline.py)."""
    pixels = np.asarray(Image.open(path).convert("RGB")).reshape(-1, 3)
    colours = {tuple(p) for p in np.unique(pixels, axis=0)}

    def rgb(hex_colour):
        return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))

    for wanted in (OUTCOMES["SUCCEEDED"][0], OUTCOMES["FAILED"][0], HALT_COLOUR):
        assert rgb(wanted) in colours, f"{wanted} not in the timeline"


def test_the_demo_runs_a_fault_scenario_and_every_guarantee_holds(capsys, monkeypatch, tmp_path):
    """GIVEN the default tenants.yaml and a malformed file among the first tenant's files
    WHEN the demo runs
    THEN the bad file fails with its line number and reaches the alarm topic, the tenant
    halts, the demo shows `ops status` and skips the file with `ops skip`, the rest is
    delivered in order (initech's with its bearer token), the token is never printed, and
    the demo exits 0; the timeline it drew shows succeeded files, the failed one and the halt."""
    from local_runtime import sink

    monkeypatch.setattr(sink.secrets, "token_urlsafe", lambda n: "DEMO-TOKEN-MARKER")
    status = main(
        [
            "--tenants",
            str(ROOT / "tests" / "fixtures" / "tenants.yaml"),
            "--files",
            "2",
            "--records",
            "10",
            "--big-records",
            "0",
            "--scenario",
            "malformed",
            "--time-scale",
            "0.03",
            "--timeline",
            str(tmp_path / "run.png"),
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert_timeline_shows_a_halt(tmp_path / "run.png")
    assert f"timeline of the run: {tmp_path / 'run.png'}" in out
    assert "alarm topic: [ordered-ingest] acme: file failed (MalformedFileError)" in out
    assert "Error:     MalformedFileError: line 7" in out
    assert "Halted: acme" in out
    # The notification, `ops status` and the operator give the one hint for a malformed file.
    hint = (
        "have the tenant upload a corrected file, then replace the failed one with it: it runs in the failed "
        "file's place, before the files already queued"
    )
    flat = " ".join(out.split())  # the console wraps long lines
    assert f"Hint: {hint}" in flat and f"hint: {hint}" in flat
    assert f"The operator follows the hint for acme: {hint}" in flat
    assert "python -m ops replace acme --key acme/" in flat  # the order-keeping way, named first
    assert "python -m ops --endpoint-url" in out and " skip acme --reason" in out
    assert "acme: skipped s3://" in out
    assert "every guarantee held" in out
    assert (
        "initech: the core system demands a bearer token" in out
        and "ordered-ingest/initech/core-token" in out
    )
    assert "DEMO-TOKEN-MARKER" not in out and "Bearer " not in out


def test_the_demo_halts_and_resumes(capsys):
    """GIVEN a record the core system rejects in the first tenant's second file
    WHEN the demo runs --scenario halt-resume
    THEN the tenant halts, the operator's `ops resume` continues the file at that record,
    and every record arrives once, in order."""
    status = main(
        [
            "--tenants",
            str(ROOT / "tests" / "fixtures" / "tenants.yaml"),
            "--files",
            "3",
            "--records",
            "60",
            "--big-records",
            "0",
            "--scenario",
            "halt-resume",
            "--time-scale",
            "0.03",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert (
        "The operator follows the hint for acme: fix the record's problem in the core system, then resume"
        in out
    )
    assert "acme: resumed s3://" in out and "at record 42" in out
    assert "every guarantee held" in out


def test_a_run_that_times_out_says_so_with_its_own_exit_status(capsys, tmp_path):
    """GIVEN a run given no time (--timeout 0) WHEN the demo runs THEN it reports a timeout,
    naming what had not closed, with exit status 3: not a violated guarantee (1). One tenant
    is enough (a pipeline of fewer functions to start)."""
    from demo.__main__ import EXIT_TIMED_OUT

    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        "defaults:\n  sink: {url: https://core.example.com/api/records}\n"
        "tenants:\n  - {id: acme, prefix: acme/, sink: {auth: {type: none}}}\n"
    )
    status = main(
        [
            "--tenants",
            str(tenants),
            "--files",
            "1",
            "--records",
            "5",
            "--scenario",
            "slow-tenant",
            "--timeout",
            "0",
            "--time-scale",
            "0.03",
        ]
    )
    out = " ".join(capsys.readouterr().out.split())
    assert status == EXIT_TIMED_OUT, out
    assert "timed out after 0 s before the run finished: acme " in out and "Nothing was verified" in out
    assert "guarantee" not in out.split("timed out after")[1]
