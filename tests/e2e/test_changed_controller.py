"""The local run follows the deployed code: a controller whose gate no longer holds lets two
files of a tenant run at once, and the G1 overlap check catches it.

The gate is "removed" by the smallest possible mutation of the real code: in the copy of
`lambdas/` that the app packages, the controller no longer asks whether the ledger's current
file is still running. Everything else (queue, poller, definition, other handlers, the ledger's
fence) is the real thing.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_runtime import LocalPipeline
from pipeline_constructs import functions
from tests.e2e.pipeline_checks import assert_no_overlap, csv_file, hold_at, wait_for

RUNNING_CHECK = "        if position.running:\n            return self._decide_running("


@pytest.fixture(scope="module")
def pipe(start_pipeline, tmp_path_factory) -> Iterator[LocalPipeline]:
    code = tmp_path_factory.mktemp("gateless") / "lambdas"
    shutil.copytree(functions.LAMBDA_SOURCE_DIR, code, ignore=shutil.ignore_patterns("__pycache__"))
    controller = code / "controller.py"
    source = controller.read_text()
    assert RUNNING_CHECK in source, "the mutation no longer applies: update this test with the controller"
    controller.write_text(source.replace(RUNNING_CHECK, RUNNING_CHECK.replace("position.running:", "False:")))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(functions, "LAMBDA_SOURCE_DIR", Path(code))
        pipe = start_pipeline([{"id": "nogate"}], chunk_size=3)
    yield pipe


def test_without_the_gate_executions_overlap_and_the_check_catches_it(pipe: LocalPipeline) -> None:
    """GIVEN the app packaged with a controller whose gate lets a file start while another runs
    WHEN three files arrive together and the first is held at its last record until another starts
    THEN their executions run at the same time and the G1 overlap check fails (the ledger's
    fence then refuses the superseded executions, which is why they do not all succeed)."""
    sink = hold_at(pipe, "nogate", "a", 8)  # a runs until b has started too
    for name in ("a", "b", "c"):
        pipe.put_file("nogate", f"{name}.csv", csv_file(name, 9))
    wait_for(lambda: len(pipe.executions("nogate")) >= 2, timeout=60, what="a second execution")
    sink.clear_faults()

    pipe.wait_until_idle(timeout=90, tenants=["nogate"])

    executions = pipe.executions("nogate")
    assert len(executions) == 3
    with pytest.raises(AssertionError, match="executions overlap"):
        assert_no_overlap(executions)
