"""The README's main command, small: it runs a fault scenario end to end and exits 0."""

from __future__ import annotations

from demo.__main__ import main
from tests.conftest import ROOT


def test_the_demo_runs_a_fault_scenario_and_every_guarantee_holds(capsys):
    """GIVEN the default tenants.yaml and a malformed file among the first tenant's files
    WHEN the demo runs
    THEN the bad file fails with its line number, reaches the alarm topic, the rest is
    delivered in order, and the demo exits 0."""
    status = main(
        [
            "--tenants",
            str(ROOT / "tenants.yaml"),
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
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert "alarm topic: acme: acme/file-900-malformed.csv failed with MalformedFileError: line 7" in out
    assert "every guarantee held" in out
