"""Run the pipeline of a tenants file locally, end to end, and verify the guarantees.

    python -m demo                       # default tenants.yaml, sample files, live progress
    python -m demo --scenario malformed  # inject a fault (see --help)
    python -m demo --scenario halt-resume  # a failed file halts its tenant; ops resume continues it
    python -m demo --scenario correction   # ops replace puts a corrected file in a bad one's place; ops pause, unpause
    python -m demo --serve               # keep the local pipeline up for your own files

Records and chunks are numbered from 0 in everything it prints (as the ledger, `ops` and the
failure notification number them), lines of a file from 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from demo.progress import ChunkProgress, halted_tenants, operate, progress_table, run_ops, settled
from demo.report import finish_times, report_faults, timeout_report, verdict_table
from demo.scenarios import BIG_RECORDS, SCENARIOS, Plan, inject, make_plan, upload_all
from demo.serve import (
    SERVE_LOOK_SECONDS,
    DemoConsole,
    StrayUploads,
    closed_attempt,
    file_outcome,
    newly_closed,
    print_until_stopped,
    quiet_broken_pipes_at_exit,
    serve,
    serve_banner,
)
from demo.verify import Upload, verify_tenant
from pipeline_constructs.config import ConfigError, load_config

#: The demo's names, also those of its parts (demo.scenarios, .progress, .report, .serve), which
#: tests and tools import from here.
__all__ = [
    "BIG_RECORDS",
    "EXIT_CODES",
    "EXIT_HELD",
    "EXIT_STOPPED",
    "EXIT_TIMED_OUT",
    "EXIT_USAGE",
    "EXIT_VIOLATED",
    "SCENARIOS",
    "SERVE_LOOK_SECONDS",
    "TARGETS_NOT_LOCAL",
    "ChunkProgress",
    "DemoConsole",
    "Plan",
    "StrayUploads",
    "closed_attempt",
    "file_outcome",
    "finish_times",
    "halted_tenants",
    "inject",
    "main",
    "make_plan",
    "newly_closed",
    "operate",
    "parse_args",
    "print_until_stopped",
    "progress_table",
    "quiet_broken_pipes_at_exit",
    "report_faults",
    "run",
    "run_correction",
    "run_ops",
    "serve",
    "serve_banner",
    "settled",
    "timeout_report",
    "upload_all",
    "verdict_table",
]

EXIT_HELD, EXIT_VIOLATED, EXIT_USAGE, EXIT_TIMED_OUT, EXIT_STOPPED = 0, 1, 2, 3, 130
EXIT_CODES = (
    "exit status: 0 every guarantee held; 1 a guarantee was violated (the verification table says which); "
    "2 bad usage or tenants file; 3 the run timed out before every file closed (--timeout): nothing was verified; "
    "130 stopped (Ctrl-C, SIGTERM or its output closed) before the verification: nothing was verified. "
    "--serve runs until Ctrl-C, SIGTERM or its output closes, then exits with the status of the verification "
    "before it (0 with --files 0: there is none)"
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m demo", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES
    )
    parser.add_argument(
        "--tenants", default="tenants.yaml", type=Path, help="tenants file (default: tenants.yaml)"
    )
    parser.add_argument("--files", type=int, default=5, help="files per tenant (default: 5)")
    parser.add_argument("--records", type=int, default=300, help="typical records per file (default: 300)")
    parser.add_argument(
        "--big-records",
        type=int,
        help=f"records of the one big file, given to the tenant with the largest chunk_size (default: {BIG_RECORDS} "
        "without --scenario, 0 with one, so that the scenario shows its point within a minute; 0: none)",
    )
    parser.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default="none",
        help="fault to inject: " + "; ".join(f"{k}: {v}" for k, v in SCENARIOS.items()),
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=0.1,
        help="factor applied to visibility timeouts and retry waits (default: 0.1)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600, help="give up after this many seconds (default: 600)"
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="print the pipeline's endpoint and an upload command first; after the demo files "
        "(use --files 0 to skip them), keep the pipeline running for your own files, uploaded "
        "with the AWS CLI, until Ctrl-C",
    )
    parser.add_argument(
        "--timeline",
        type=Path,
        metavar="FILE.png",
        help="at the end, draw what happened into this file (.png, .svg or .pdf): a lane per "
        "tenant, a bar per execution coloured by outcome, halts, resumes and hand-offs marked",
    )
    args = parser.parse_args(argv)
    if args.big_records is None:
        args.big_records = BIG_RECORDS if args.scenario == "none" else 0
    if args.timeline and args.scenario == "correction":
        parser.error(
            "--timeline does not draw `ops replace` and `ops pause` (it would show them as halts and "
            "resumes): run --scenario correction without it"
        )
    if args.timeline:
        from demo.timeline import SUFFIXES  # matplotlib: only when asked for

        if args.timeline.suffix.lower() not in SUFFIXES or not args.timeline.resolve().parent.is_dir():
            parser.error(
                f"--timeline {args.timeline}: give a {' or '.join(SUFFIXES)} file in an existing directory"
            )
    if args.files < 0 or args.records < 1 or args.big_records < 0:
        parser.error("--files must be >= 0, --records >= 1, --big-records >= 0")
    return args


def _stop_on_sigterm(*_: object) -> None:
    raise KeyboardInterrupt  # unwinds through LocalPipeline.close(): no process or temp dir left


#: The local runtime runs one deployment (the layout without `targets:`), like one target.
TARGETS_NOT_LOCAL = (
    "{file} declares deployment targets: the local runtime runs the single-deployment layout only; "
    "run the demo on a tenants file without 'targets:' (and without 'target:' on the tenants)"
)


def run_correction(pipe, console: Console, args: argparse.Namespace, tenant, other) -> int:
    """`--scenario correction` (demo/correction.py): its own files and steps on one tenant, then
    --serve as after any run."""
    from demo import correction
    from ops.discovery import discover

    code = correction.run(pipe, console, tenant, other, records=args.records, timeout=args.timeout)
    if args.serve:
        serve(pipe, console, discover(pipe.client))
    return code


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    console = DemoConsole(width=None if sys.stdout.isatty() else 120)
    try:
        config = load_config(args.tenants)
    except ConfigError as error:
        console.print(str(error), markup=False)
        return EXIT_USAGE
    if config.targets:
        console.print(TARGETS_NOT_LOCAL.format(file=args.tenants), markup=False)
        return EXIT_USAGE
    plan = make_plan(config, args)
    correction_tenants = None
    if args.scenario == "correction":
        from demo import correction

        try:
            correction_tenants = correction.choose_tenants(config)
        except correction.Unsuitable as error:
            console.print(f"{args.tenants}: {error}", markup=False)
            return EXIT_USAGE

    from local_runtime import LocalPipeline  # heavy import (moto, jsii): after argument checks

    started = time.monotonic()
    console.print(f"Synthesizing {args.tenants} and deploying it on a local moto server...")
    with LocalPipeline(args.tenants, time_scale=args.time_scale) as pipe:
        console.print(f"Local pipeline up in {time.monotonic() - started:.1f} s: {pipe.endpoint_url}")
        demo_files = any(plan.files.values()) or correction_tenants is not None
        if args.serve and demo_files:
            serve_banner(pipe, console, demo_files=True)  # before the demo's tables
        console.print(f"Scenario: {args.scenario} ({SCENARIOS[args.scenario]})")
        for tenant in config.tenants:
            if tenant.sink.auth.type == "bearer":  # the token itself is never shown
                console.print(
                    f"{tenant.id}: the core system demands a bearer token; the local runtime made one "
                    f"and stored it in secret {pipe.sink(tenant.id).auth.secret}",
                    markup=False,
                )
        if correction_tenants is not None:
            return run_correction(pipe, console, args, *correction_tenants)
        inject(pipe, args.scenario, config.tenants[0].id)
        if args.serve and not demo_files:  # nothing to upload, wait for or verify: no tables
            from ops.discovery import discover

            serve(pipe, console, discover(pipe.client), banner=True)
            return EXIT_HELD
        uploads: dict[str, list[Upload]] = {t.id: [] for t in config.tenants}
        chunks = ChunkProgress(pipe)
        run_started, run_started_wall = time.monotonic(), time.time()
        uploader = threading.Thread(target=upload_all, args=(pipe, plan, uploads))
        uploader.start()
        from ops.discovery import discover

        resources = discover(pipe.client)  # once: the stacks do not change
        timed_out = False
        while not timed_out:
            with Live(
                progress_table(pipe, plan, uploads, run_started, chunks),
                console=console,
                refresh_per_second=2,
            ) as live:
                while True:
                    live.update(progress_table(pipe, plan, uploads, run_started, chunks))
                    if not uploader.is_alive() and settled(pipe, resources):
                        break
                    if time.monotonic() - run_started > args.timeout:
                        timed_out = True
                        break
                    time.sleep(0.5)
                live.update(progress_table(pipe, plan, uploads, run_started, chunks))
            if timed_out or not operate(pipe, resources, console):
                break
        console.print()
        uploader.join()
        elapsed = time.monotonic() - run_started
        if timed_out:
            console.print(
                timeout_report(pipe, plan, uploads, args.timeout), markup=False, style="red", soft_wrap=True
            )
            if args.serve:
                serve(pipe, console, resources)
            return EXIT_TIMED_OUT

        verdicts = [
            verify_tenant(t, uploads[t], pipe.executions(t), pipe.sink(t).accepted) for t in plan.files
        ]
        console.print(verdict_table(verdicts))
        console.print(finish_times(pipe, list(plan.files), run_started_wall), markup=False)
        if args.scenario == "slow-tenant":
            console.print(
                f"({config.tenants[0].id}'s core system was slow; the other tenants did not wait for it)",
                markup=False,
            )
        report_faults(pipe, console)
        if args.timeline:
            from demo import timeline

            timeline.write(
                pipe,
                resources,
                args.timeline,
                origin=run_started_wall,
                end=time.time(),
                title=f"ordered ingest, {args.tenants.name}, scenario {args.scenario}",
            )
            console.print(f"timeline of the run: {args.timeline}", markup=False, soft_wrap=True)
        total = sum(v.records_delivered for v in verdicts)
        console.print(
            f"{total:,} records delivered in {elapsed:.1f} s; total run {time.monotonic() - started:.1f} s"
        )
        ok = all(v.ok for v in verdicts)
        console.print("[green]every guarantee held[/green]" if ok else "[red]a guarantee was violated[/red]")
        if args.serve:
            serve(pipe, console, resources)
    return EXIT_HELD if ok else EXIT_VIOLATED


def run(argv: list[str] | None = None) -> int:
    """`python -m demo`: `main`, and Ctrl-C, SIGTERM or a closed output before the verification
    is exit status 130 without a traceback (the local pipeline closed on the way out)."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        quiet_broken_pipes_at_exit()
        print("stopped before the verification: nothing was verified", file=sys.stderr)
        return EXIT_STOPPED


if __name__ == "__main__":
    sys.exit(run())
