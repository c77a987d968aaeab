"""The hint table (lambdas/hints.py): one hint per error type, and the runbook names each one."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from lambdas import contract
from lambdas.hints import (
    ABORTED,
    BAD_FILE,
    BY_ERROR,
    CRASH,
    CRASH_ERRORS,
    LOST,
    NOTHING,
    OTHER,
    REPLACE,
    RESUME,
    TIMED_OUT,
    commands,
    hint,
)

RUNBOOK = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


@pytest.mark.parametrize(
    "error",
    [
        contract.MalformedFileError,
        contract.FileTooLargeError,
        contract.SplitTimeLimitError,
        contract.KeyOutsidePrefixError,
    ],
)
def test_a_file_refused_as_it_is_is_replaced_by_its_correction_never_resumed(error):
    """The order-keeping way first: the correction runs in the failed file's place."""
    found = hint(error.__name__, closed_as="FAILED")
    assert found == BAD_FILE and found.action == REPLACE
    assert found.text == (
        "have the tenant upload a corrected file, then replace the failed one with it: it runs in "
        "the failed file's place, before the files already queued"
    )


@pytest.mark.parametrize("error", ["NoSuchKey", "NoSuchVersion"])
def test_a_file_whose_version_is_gone_is_replaced_by_its_upload(error):
    assert hint(error, closed_as="FAILED") == LOST and LOST.action == REPLACE


@pytest.mark.parametrize(
    "error", [contract.SinkRejectedError, contract.SinkAuthError, contract.SinkUnavailableError]
)
def test_a_cause_outside_the_file_is_fixed_then_the_file_resumed(error):
    found = hint(error.__name__, closed_as="FAILED")
    assert found.action == RESUME and "then resume" in found.text


def test_every_error_a_function_or_the_workflow_names_has_its_own_hint():
    named = {
        contract.COMPLETION_TIMED_OUT_ERROR,
        contract.COMPLETION_REJECTED_ERROR,
        "ChunkInvocationBudgetExhausted",
        contract.StaleExecutionError.__name__,
    }
    assert named <= set(BY_ERROR)
    assert hint("StaleExecutionError").action == NOTHING


def test_a_crash_past_its_retries_says_what_crashed_and_where():
    assert hint("Runtime.OutOfMemory", closed_as="FAILED", failed_in="register", chunk=17).text == (
        "register crashed repeatedly (Runtime.OutOfMemory) in chunk 17: check its memory and timeout, then resume"
    )
    assert hint("Sandbox.Timedout", closed_as="FAILED", failed_in="split", chunk=1).text == (
        "split crashed repeatedly (Sandbox.Timedout): check its memory and timeout, then resume"
    )


def test_how_the_execution_closed_decides_when_the_error_does_not():
    assert hint("States.Timeout", closed_as="TIMED_OUT") == TIMED_OUT  # the file's time limit, not a crash
    assert hint("Error", closed_as="ABORTED") == ABORTED
    assert hint("ValueError", closed_as="FAILED") == OTHER
    assert hint(None) == OTHER


def test_the_commands_follow_the_hints_action():
    bad = commands(BAD_FILE, "acme", key="acme/f.csv")
    assert bad[1] == "  python -m ops replace acme --key acme/f.csv --version VERSION_ID"
    assert bad[3] == '  python -m ops skip acme --reason "..."'  # the way out that breaks the order: last
    assert not any("ops resume" in line for line in bad)
    rejected = commands(BY_ERROR["SinkRejectedError"], "acme", key="acme/f.csv", next_record=304)
    assert rejected[1] == "  python -m ops resume acme"
    assert (
        rejected[3] == "  python -m ops replace acme --key acme/f.csv --version VERSION_ID --from-record 304"
    )
    assert not any("--from-record" in line for line in commands(BY_ERROR["SinkAuthError"], "acme"))
    assert "  python -m ops resume acme" in commands(OTHER, "acme")
    assert "  python -m ops status acme" in commands(BY_ERROR["StaleExecutionError"], "acme")


def _workflow_failed_section() -> str:
    text = html.unescape(RUNBOOK.read_text())
    start = text.index("\n## ", text.index('<a id="workflow-failed"></a>'))
    return text[start : text.index("\n## ", start + 1)]


def _rows_naming(section: str, name: str) -> list[str]:
    return [line for line in section.splitlines() if line.startswith("| ") and name in line.split(" | ")[0]]


@pytest.mark.parametrize("error", sorted(BY_ERROR))
def test_the_runbook_gives_each_errors_hint_word_for_word(error):
    rows = _rows_naming(_workflow_failed_section(), f"`{error}`")
    assert any(f"*{BY_ERROR[error].text}*" in row for row in rows), (
        f"no runbook row for `{error}` with its hint"
    )


@pytest.mark.parametrize("error", sorted(CRASH_ERRORS))
def test_the_runbook_gives_the_crash_hint_for_each_crash_error(error):
    template = CRASH.format(function="<function>", error="<error>", where=" in chunk <n>")
    rows = _rows_naming(_workflow_failed_section(), f"`{error}`")
    assert any(f"*{template}*" in row for row in rows)


def test_the_runbook_gives_the_hints_of_a_timeout_an_abort_and_any_other_error():
    section = _workflow_failed_section()
    assert f"*{TIMED_OUT.text}*" in " ".join(section.split())
    assert any(f"*{ABORTED.text}*" in row for row in _rows_naming(section, "`ABORTED`"))
    assert any(f"*{OTHER.text}*" in row for row in _rows_naming(section, "any other error"))


def test_the_runbook_says_where_a_corrected_re_upload_lands_in_the_order():
    section = " ".join(_workflow_failed_section().split())
    assert "python -m ops replace" in section
    assert "it joins the tenant's queue **behind every file already waiting there**" in section


def test_where_a_file_stopped_numbers_chunks_and_records_from_0_as_every_output_does():
    """One convention for the notification, `ops status`, `--serve` and the register function's
    errors ("chunk 2 record 50 (file record 250)"): chunks and records numbered from 0."""
    from lambdas.hints import stopped_at

    assert (
        stopped_at(250, 1000, 100, 10)
        == "chunk 2 of 10, record 250 of 1,000 (records 0-249 reached the core system)"
    )
    assert (
        stopped_at(999, 1000, 100, 10)
        == "chunk 9 of 10, record 999 of 1,000 (records 0-998 reached the core system)"
    )
    assert stopped_at(0) == "record 0 (nothing reached the core system)"
    assert stopped_at(1, 5) == "record 1 of 5 (record 0 reached the core system)"
    assert stopped_at(1000, 1000, 100, 10) == "after the last record (all 1,000 reached the core system)"
    assert hint("Runtime.ExitError", closed_as="FAILED", failed_in="register", chunk=0).text.startswith(
        "register crashed repeatedly (Runtime.ExitError) in chunk 0:"
    )
