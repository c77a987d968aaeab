"""`python -m cloudtest`: the cloud test (`make cloud-test`).

    python -m cloudtest                    # deploy to the environment's account and Region, check, destroy
    python -m cloudtest --local            # the same scenario on the local runtime (no account)
    python -m cloudtest teardown RUN_ID    # finish the clean-up of an interrupted run

It deploys a recording core-system stand-in and two throwaway tenants (`ct-<run id>-a`, `-b`)
under a fresh run id, uploads three files per tenant, checks order, exactly-once and the
halt/resume path, prints the figures, and destroys everything it deployed, including what the
app retains by design, also after a failure, Ctrl-C or SIGTERM (`cloudtest.teardown`).

Exit codes: 0 every check held; 1 a check failed, a step timed out or failed, or the clean-up
left something (listed, with the command that finishes it); 2 refused before deploying
anything (no credentials, no Region, not bootstrapped, the app already in this Region).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cloudtest import scenario, targets, teardown

EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2
#: Where a run keeps its tenants file, assemblies and teardown state (ignored by git).
WORKDIR = targets.ROOT / "cells.out"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cloudtest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", action="store_true", help="run the scenario on the local runtime instead")
    parser.add_argument("--region", help="AWS Region (default: the environment's)")
    parser.add_argument("--profile", help="AWS profile (default: the environment's)")
    parser.add_argument("command", nargs="?", choices=("run", "teardown"), default="run")
    parser.add_argument("run_id", nargs="?", help="teardown: the run id the interrupted run printed")
    return parser


def new_run_id() -> str:
    """Six hex digits: short enough for every derived name (tenant `ct-<id>-a`)."""
    return secrets.token_hex(3)


def report(result: scenario.Report, say: Callable[[str], None]) -> int:
    say("")
    for figures in result.figures:
        say(figures.line())
    for line in result.pace:
        say(line)
    if result.ok:
        say("cloud test passed: order, exactly-once and halt/resume held")
        return EXIT_OK
    say(f"cloud test FAILED ({len(result.problems)} problems):")
    for problem in result.problems:
        say(f"  - {problem}")
    return EXIT_FAILED


def run_scenario(target: Any, say: Callable[[str], None]) -> int:
    try:
        return report(scenario.Scenario(target, say=say).run(), say)
    except TimeoutError as error:
        say(f"cloud test FAILED: {error}")
        return EXIT_FAILED


def _terminate_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class _NoInterruptions:
    """While tearing down, Ctrl-C and SIGTERM only say that the clean-up goes on."""

    def __init__(self, say: Callable[[str], None], run_id: str) -> None:
        self.say, self.run_id = say, run_id
        self.saved: dict[int, Any] = {}

    def _hold(self, signum: int, frame: Any) -> None:
        self.say(
            f"cleaning up: it goes on (to stop anyway, kill this process and run `python -m cloudtest teardown "
            f"{self.run_id}` later)"
        )

    def __enter__(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self.saved[signum] = signal.signal(signum, self._hold)

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)


def clean_up(session: Any, run_id: str, say: Callable[[str], None]) -> int:
    state = WORKDIR / f"cloud-test-{run_id}" / "teardown.json"
    say(f"destroying run {run_id}")
    with _NoInterruptions(say, run_id):
        problems = teardown.Teardown(session.client, run_id, state, say=say).run()
    if problems:
        say(
            f"clean-up incomplete ({len(problems)}); run `python -m cloudtest teardown {run_id}` again, or remove by hand:"
        )
        for problem in problems:
            say(f"  - {problem}")
        return EXIT_FAILED
    say(
        f"run {run_id}: everything it deployed is gone (keys: deletion scheduled in "
        f"{teardown.KEY_DELETION_WINDOW_DAYS} days)"
    )
    return EXIT_OK


def run_on_aws(session: Any, say: Callable[[str], None]) -> int:
    run_id = new_run_id()
    target = targets.AwsTarget(session, run_id, WORKDIR / f"cloud-test-{run_id}", say=say)
    try:
        target.preflight()
    except targets.Refused as refused:
        print(f"cloud-test: {refused}", file=sys.stderr)
        return EXIT_REFUSED
    say(f"run {run_id}: account {target.account}, Region {target.region}")
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _terminate_as_interrupt)
    code = EXIT_FAILED
    started = time.monotonic()
    try:
        target.deploy()
        say(f"deployed in {time.monotonic() - started:.0f} s")
        code = run_scenario(target, say)
    except KeyboardInterrupt:
        say("interrupted")
    except Exception as error:
        say(f"cloud test FAILED: {type(error).__name__}: {error}")
    finally:
        cleaned = clean_up(session, run_id, say)
    return code if cleaned == EXIT_OK else EXIT_FAILED


def run_locally(say: Callable[[str], None]) -> int:
    with tempfile.TemporaryDirectory(prefix="cloudtest-") as workdir:
        target = targets.LocalTarget(new_run_id(), Path(workdir))
        try:
            say(f"local runtime at {target.pipe.endpoint_url}")
            return run_scenario(target, say)
        finally:
            target.close()


def _session(args: argparse.Namespace) -> Any:
    import boto3

    # botocore reads AWS_DEFAULT_REGION and profiles; AWS_REGION is what the AWS SDKs and CLI v2 also read.
    return boto3.Session(
        region_name=args.region or os.environ.get("AWS_REGION") or None, profile_name=args.profile
    )


def main(argv: Sequence[str] | None = None, say: Callable[[str], None] = print) -> int:
    args = _parser().parse_args(argv)
    if args.command == "teardown":
        if not args.run_id:
            print("cloud-test: give the run id: python -m cloudtest teardown RUN_ID", file=sys.stderr)
            return EXIT_REFUSED
        return clean_up(_session(args), args.run_id, say)
    if args.local:
        return run_locally(say)
    os.chdir(targets.ROOT)  # the CDK CLI reads cdk.json here
    try:
        session = _session(args)
    except Exception as error:
        print(f"cloud-test: {error}", file=sys.stderr)
        return EXIT_REFUSED
    return run_on_aws(session, say)


if __name__ == "__main__":
    sys.exit(main())
