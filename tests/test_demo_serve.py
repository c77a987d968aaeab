"""`python -m demo --serve`: the endpoint and the upload command first, then each file as it
closes, until Ctrl-C, SIGTERM or a closed output ends it without a traceback.

The loop and its interrupt handling on a fake output; two runs of `python -m demo --serve` in a
process of their own (slow: the local pipeline starts in 20 to 40 s), stopped as a terminal's
Ctrl-C stops it (SIGINT to the whole process group) and as `| head -5` does (the read end of
its output closed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from demo.__main__ import EXIT_HELD, EXIT_STOPPED, DemoConsole, print_until_stopped, serve_banner
from tests.conftest import FIXTURE_TENANTS, ROOT


class Pipe:
    """A stand-in for the reading end of stdout: keeps what is written until `close()`, then
    fails every write as a pipe whose reader went away does."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.closed = False

    def write(self, text: str) -> int:
        if self.closed:
            raise BrokenPipeError(32, "Broken pipe")
        self.written.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    @property
    def text(self) -> str:
        return "".join(self.written)


#: What `serve_banner` reads of a local pipeline.
PIPE = SimpleNamespace(
    tenant_ids=["acme", "globex"],
    endpoint_url="http://127.0.0.1:4566",
    landing_bucket="landing",
    tenants={"acme": SimpleNamespace(prefix="acme/"), "globex": SimpleNamespace(prefix="g/")},
)


def looks(*batches: list[str], then: BaseException | None = None):
    """`new_lines` that returns each batch in turn, then raises `then` (or returns nothing)."""
    pending = list(batches)
    calls: list[int] = []

    def new_lines() -> list[str]:
        calls.append(1)
        if pending:
            return pending.pop(0)
        if then is not None:
            raise then
        return []

    return new_lines, calls


@pytest.fixture
def unraisable(monkeypatch) -> list[object]:
    """What reaches the interpreter's hook for exceptions it cannot raise (at exit, in atexit)."""
    shown: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", shown.append)
    return shown


def test_serve_prints_each_look_in_order_and_stops_on_ctrl_c(unraisable):
    # GIVEN two looks with new lines, and Ctrl-C during the third wait
    out = Pipe()
    new_lines, _ = looks(
        ["acme: s3://.../acme/a.csv SUCCEEDED: 3 records registered"],
        ["no tenant: s3://b/x.csv matches no tenant prefix", "acme: s3://.../acme/b.csv SUCCEEDED"],
    )
    waits: list[int] = []

    def wait() -> None:
        waits.append(1)
        if len(waits) == 3:
            raise KeyboardInterrupt

    # WHEN the loop runs THEN it returns (no KeyboardInterrupt escapes) after printing in order
    print_until_stopped(DemoConsole(file=out, width=120), new_lines, wait)
    assert out.text.splitlines() == [
        "acme: s3://.../acme/a.csv SUCCEEDED: 3 records registered",
        "no tenant: s3://b/x.csv matches no tenant prefix",
        "acme: s3://.../acme/b.csv SUCCEEDED",
        "stopping",
    ]
    # AND at exit, the BrokenPipeError of a node process the Ctrl-C ended is not shown; others are
    sys.unraisablehook(SimpleNamespace(exc_value=BrokenPipeError(32, "Broken pipe")))
    other = SimpleNamespace(exc_value=ValueError("kept"))
    sys.unraisablehook(other)
    assert unraisable == [other]


def test_serve_stops_when_its_output_closes_without_an_error(unraisable):
    # GIVEN an output whose reader goes away after the first line
    out = Pipe()
    new_lines, calls = looks(["acme: s3://.../acme/a.csv SUCCEEDED"], ["acme: s3://.../acme/b.csv SUCCEEDED"])
    console = DemoConsole(file=out, width=120)

    # WHEN the second line is printed to the closed output
    print_until_stopped(console, new_lines, wait=out.close)

    # THEN the loop ends there, as on Ctrl-C, and prints nothing more (not even "stopping")
    assert out.text == "acme: s3://.../acme/a.csv SUCCEEDED\n"
    assert len(calls) == 2 and console.quiet


def test_serve_stops_when_its_output_is_closed_before_the_banner(unraisable):
    """`python -m demo --serve --files 0 | head -5`: the reader may be gone by the banner."""
    out = Pipe()
    out.close()
    console = DemoConsole(file=out, width=120)
    new_lines, calls = looks()
    print_until_stopped(
        console, new_lines, wait=lambda: None, first=lambda: serve_banner(PIPE, console, demo_files=False)
    )
    assert out.written == [] and calls == []


def test_ctrl_c_then_a_closed_output_still_stops_quietly(unraisable):
    """Ctrl-C of `python -m demo --serve | head`: the reader ends too, before "stopping"."""
    out = Pipe()

    def wait() -> None:
        out.close()
        raise KeyboardInterrupt

    print_until_stopped(DemoConsole(file=out, width=120), looks(["a line"])[0], wait)
    assert out.text == "a line\n"


def test_a_closed_output_in_another_thread_stops_the_main_thread(unraisable):
    """A Live table's refresh thread meets the closed output: the main thread stops as on
    Ctrl-C (rich's default would end that thread alone, and the run would go on unread)."""
    out = Pipe()
    out.close()
    console = DemoConsole(file=out, width=120)
    stopped = threading.Event()

    def wait() -> None:
        printer = threading.Thread(target=console.print, args=("a table",))
        printer.start()
        printer.join()
        stopped.wait(10)  # the SIGINT arrives here, as KeyboardInterrupt
        raise AssertionError("the main thread was not stopped")

    print_until_stopped(console, looks()[0], wait)
    assert console.quiet and out.written == []


def test_serve_banner_gives_the_endpoint_and_an_upload_command():
    out = Pipe()
    serve_banner(PIPE, DemoConsole(file=out, width=120), demo_files=False)
    assert out.text.splitlines() == [
        "",
        "The local pipeline is running. Endpoint: http://127.0.0.1:4566 (any access key; region us-east-1). "
        "Tenant prefixes: acme: acme/, globex: g/",
        "Upload a file:",
        "  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test aws --endpoint-url http://127.0.0.1:4566 --region "
        "us-east-1 s3 cp my.csv s3://landing/acme/my.csv",
        "Executions and the records the core system registered are printed below, and so is every upload outside "
        "the tenant prefixes (no tenant ingests it). Ctrl-C stops.",
    ]


# --- python -m demo --serve, in a process of its own --------------------------------------------


def _start(*args: str) -> subprocess.Popen:
    """`python -m demo --serve` in a new session (its own process group, as a terminal's job)."""
    return subprocess.Popen(
        [sys.executable, "-m", "demo", "--serve", "--tenants", str(FIXTURE_TENANTS), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _read_until_the_upload_command(process: subprocess.Popen) -> list[str]:
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("  AWS_ACCESS_KEY_ID=test"):
            return lines
    raise AssertionError("no upload command before the output ended:\n" + "\n".join(lines))


@pytest.fixture
def watchdog():
    """Kill a run's process group if it outlives the test's patience."""
    timers: list[threading.Timer] = []

    def watch(process: subprocess.Popen, seconds: float = 300) -> None:
        timer = threading.Timer(
            seconds, lambda: process.poll() is None and os.killpg(process.pid, signal.SIGKILL)
        )
        timer.start()
        timers.append(timer)

    yield watch
    for timer in timers:
        timer.cancel()


@pytest.mark.slow
def test_ctrl_c_ends_serve_cleanly_after_the_endpoint_came_first(watchdog):
    # GIVEN `python -m demo --serve --files 0` (the pipeline up for your own files)
    process = _start("--files", "0")
    watchdog(process)
    before = _read_until_the_upload_command(process)
    # THEN the endpoint and the upload command came first, no table before them
    assert any(
        line.startswith("The local pipeline is running. Endpoint: http://127.0.0.1:") for line in before
    )
    assert not any(mark in line for line in before for mark in ("┏", "│", "verification"))
    # WHEN Ctrl-C is pressed: SIGINT to every process of the group (the CDK's node process too)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=120)
    # THEN it stops, exits 0 (there was nothing to verify) and no traceback is printed
    assert process.returncode == EXIT_HELD, err
    assert "stopping" in out.splitlines()
    assert "┏" not in out and "Traceback" not in err and "Exception ignored" not in err, err


@pytest.mark.slow
def test_a_closed_output_ends_serve_cleanly(watchdog):
    # GIVEN `python -m demo --serve` with one small demo file per tenant, read as by `| head`
    process = _start("--files", "1", "--records", "5", "--big-records", "0")
    watchdog(process)
    _read_until_the_upload_command(process)
    # WHEN the reader goes away while the demo's files run
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    code = process.wait(timeout=180)
    err = process.stderr.read()
    # THEN the run stops at its next line, before the verification: exit 130, no traceback
    assert code == EXIT_STOPPED, err
    assert "stopped before the verification: nothing was verified" in err
    assert "Traceback" not in err and "Exception ignored" not in err, err
