"""The benchmarks write their rows into their own section's table of docs/benchmarks.md."""

from __future__ import annotations

import threading
import time

import pytest

from bench import results, small_files


def test_rows_go_to_the_end_of_their_sections_table_and_nothing_else_moves(tmp_path):
    """GIVEN a page with two sections WHEN rows are appended to the first, and to a section the
    page lacks (with its header) THEN each row ends its own table and the rest stays as it was."""
    page = tmp_path / "benchmarks.md"
    page.write_text(
        "# Benchmarks\n\n## Split\n\n| a |\n| --- |\n| 1 |\n\n## Later\n\ntext\n", encoding="utf-8"
    )
    results.append_rows("## Split", ["| 2 |"], path=page)
    results.append_rows(small_files.SECTION, ["| first |"], header=small_files.HEADER, path=page)
    results.append_rows(small_files.SECTION, ["| second |"], header=small_files.HEADER, path=page)
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\n## Split\n\n| a |\n| --- |\n| 1 |\n| 2 |\n\n## Later\n\ntext\n")
    assert text.count(small_files.SECTION) == 1
    assert text.endswith(small_files.HEADER + "\n| first |\n| second |\n")
    with pytest.raises(SystemExit, match="no section"):
        results.append_rows("## Missing", ["| x |"], path=page)


def test_a_row_fills_every_column_of_the_header_and_the_parse_is_timed():
    """GIVEN one run's figures WHEN its row is made THEN it has a cell for each column of the
    table; and moto's parse of a workflow definition takes a measurable, positive time."""
    figures = {
        "per_minute": 97.4,
        "p50": 0.5,
        "p95": 1.1,
        "runtime_cpu": 0.45,
        "functions_cpu": 0.07,
        "moto_requests": 38.04,
        "moto_requests_cpu": 0.18,
        "moto_interpreter_cpu": 0.17,
        "parse": 0.106,
        "definition_kb": 13.6,
    }
    row = small_files.table_row(200, 10, figures)
    columns = small_files.HEADER.splitlines()[0].count("|")
    assert row.count("|") == columns
    assert "| 97 | 0.50 s | 1.10 s |" in row
    assert "| 0.45 s / 0.07 s | 0.18 s (38.0 requests) / 0.17 s | 106 ms (13.6 KB) |" in row
    definition = '{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}'
    assert small_files.parse_seconds(definition, repeat=1) > 0


def _spin(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU."""
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        pass


def test_moto_threads_are_timed_by_role_and_the_rest_is_not():
    """GIVEN threads started inside the block whose targets are werkzeug's, moto's Step Functions'
    and someone else's, one of werkzeug's started before it and one after WHEN they end THEN each
    of moto's roles holds the CPU and count of its threads started inside, and nothing else counts."""

    def request() -> None:
        _spin(0.02)

    def interpret() -> None:
        _spin(0.03)

    def other() -> None:
        _spin(0.02)

    release = threading.Event()

    def early_request() -> None:
        release.wait()
        _spin(0.02)

    for target in (request, early_request):
        target.__module__ = "werkzeug.serving"
    interpret.__module__ = "moto.stepfunctions.parser.backend.execution_worker"
    early = threading.Thread(target=early_request)
    early.start()
    with small_files.moto_thread_cpu() as spent:
        threads = [threading.Thread(target=t) for t in (request, request, interpret, other)]
        for thread in threads:
            thread.start()
        release.set()
        for thread in [*threads, early]:
            thread.join()
    late = threading.Thread(target=request)
    late.start()
    late.join()
    assert dict(spent.threads) == {"requests": 2, "interpreter": 1}
    assert 0.04 <= spent.seconds["requests"] < 0.07
    assert 0.03 <= spent.seconds["interpreter"] < 0.05
