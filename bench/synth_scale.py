"""Synth at scale: wall time and peak memory of synthesizing N tenants, as cells.

    .venv/bin/python bench/synth_scale.py [--tenants 10 100 1000] [--paths whole cells diff]
                                         [--no-lint] [--print-only]

For each N, a generated ``tenants.yaml`` in a temporary directory (never the repository;
sharded as docs/scaling.md says), synthesized with cdk-nag on, three ways: ``whole`` (``cdk
synth``, one assembly), ``cells`` (``make synth``) and ``diff`` (``make diff`` of a change to
one tenant). Peak memory is the largest sum of the resident set sizes of the whole process
tree (Python, jsii's node kernels, the CLI's), sampled every 50 ms; cfn-lint then checks every
template (any error or warning other than W3005 fails the run). The 1-minute load average is
recorded before each run: on a shared machine it says how much of the time was someone else's.
The figures replace the "Synth at scale" section of docs/benchmarks.md unless ``--print-only``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Synth at scale"
SAMPLE_SECONDS = 0.05
#: The goals on this machine: every cell of 1,000 tenants; the diff of a change to one tenant.
GOAL_SECONDS, DIFF_GOAL_SECONDS = 90, 20
#: cfn-lint: CDK adds a DependsOn that a GetAtt already implies (as tests/test_app.py).
IGNORED_LINT_RULES = ("W3005",)


def extra_blocks(count: int) -> dict[str, Any]:
    """Top-level blocks besides `defaults`, `notifications` and `tenants`: what a file of
    `count` tenants needs to pass synth's own checks in one account, as docs/scaling.md says
    (past about 140 tenants: the rules sharded over 40 buses, IAM roles and Lambda
    concurrency raised and declared)."""
    if count <= 140:
        return {}
    return {
        "routing": {"shards": 40},
        "account_limits": {"iam_roles": 5000, "lambda_concurrent_executions": count + 200},
    }


def tenants_document(count: int) -> dict[str, Any]:
    """A valid tenants file of ``count`` tenants: ids `t0001`, ... under prefixes `t0001/`, ...,
    every tenant with the defaults, every fifth in JSON Lines, every tenth with its own sink,
    chunk size and tighter alarms (so that the templates are not all identical)."""
    tenants: list[dict[str, Any]] = []
    for index in range(1, count + 1):
        # `auth: {type: none}` on each tenant: defaults may not give it.
        tenant: dict[str, Any] = {
            "id": f"t{index:04d}",
            "prefix": f"t{index:04d}/incoming/",
            "sink": {"auth": {"type": "none"}},
        }
        if index % 5 == 0:
            tenant["format"] = "jsonl"
        if index % 10 == 0:
            tenant.update(
                chunk_size=250,
                sink={"url": f"https://core-{index}.example.com/records", "auth": {"type": "none"}},
                alarms={"stall_after_seconds": 600},
            )
        tenants.append(tenant)
    return {
        "defaults": {
            "format": "csv",
            "chunk_size": 100,
            "sink": {"url": "https://core.example.com/api/records"},
        },
        "notifications": {"emails": ["oncall@example.com"]},
        **extra_blocks(count),
        "tenants": tenants,
    }


def write_tenants_file(directory: Path, count: int) -> Path:
    path = directory / f"tenants-{count}.yaml"
    path.write_text(yaml.safe_dump(tenants_document(count), sort_keys=False), encoding="utf-8")
    return path


@dataclass(frozen=True)
class Run:
    """One synth (or lint) run: wall seconds, the process tree's peak RSS, the load before."""

    seconds: float
    peak_rss_mb: float
    load_before: float


def run_measured(
    command: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    allowed: tuple[int, ...] = (0,),
) -> Run:
    """Run ``command`` to its end; peak RSS summed over its whole process tree (psutil)."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(process.pid)
        while not stop.is_set():
            total = 0
            try:
                for proc in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        total += proc.memory_info().rss
            except psutil.Error:
                pass
            peak = max(peak, total)
            stop.wait(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    seconds = time.monotonic() - started
    stop.set()
    sampler.join()
    if process.returncode not in allowed:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}:\n{output.decode()[-4000:]}")
    return Run(seconds=seconds, peak_rss_mb=peak / 2**20, load_before=load)


def _cli_env() -> dict[str, str]:
    """The pinned CLI without credentials, its `python3` the venv's (as the Makefile sets PATH)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        PATH=f"{ROOT / 'node_modules' / '.bin'}:{Path(sys.executable).parent}:{env['PATH']}",
        CDK_DISABLE_CLI_TELEMETRY="true",
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_CONFIG_FILE=os.devnull,
    )
    return env


def synth_whole(tenants_file: Path, outdir: Path) -> Run:
    cdk = str(ROOT / "node_modules" / ".bin" / "cdk")
    return run_measured(
        [cdk, "synth", "--quiet", "-c", f"tenants={tenants_file}", "-o", str(outdir)], env=_cli_env()
    )


def synth_cells(tenants_file: Path, outdir: Path) -> Run:
    return run_measured(
        [
            sys.executable,
            "-m",
            "tools.cells",
            "synth",
            "--tenants",
            str(tenants_file),
            "--outdir",
            str(outdir),
        ],
        env=_cli_env(),
    )


def diff_one_tenant(tenants_file: Path, scratch: Path) -> Run:
    """The offline diff of a change to the first tenant's chunk size (one shard cell each side)."""
    changed = scratch / "changed.yaml"
    document = yaml.safe_load(tenants_file.read_text())
    document["tenants"][0]["chunk_size"] = 77
    changed.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "tools.offline_diff",
        "--base-tenants",
        str(tenants_file),
        "--tenants",
        str(changed),
    ]
    return run_measured(command, env=_cli_env(), allowed=(0, 1))


def lint(outdir: Path) -> tuple[Run, int, list[str]]:
    """cfn-lint over every template of the cells, in one process: (run, templates, findings)."""
    templates = sorted(str(p) for p in outdir.glob("*/*.template.json"))
    command = [
        str(Path(sys.executable).parent / "cfn-lint"),
        "--format",
        "parseable",
        "--ignore-checks",
        *IGNORED_LINT_RULES,
        "--",
        *templates,
    ]
    load = os.getloadavg()[0]
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    findings = [line for line in result.stdout.splitlines() if line.strip()]
    # cfn-lint exits with a bit mask of the levels found (2 errors, 4 warnings, 8 informational).
    if result.returncode & 1:
        raise RuntimeError(f"cfn-lint failed to run:\n{result.stderr[-4000:]}")
    return Run(seconds=seconds, peak_rss_mb=0.0, load_before=load), len(templates), findings


#: CloudFormation's largest template (uploaded through S3, as the CDK CLI does).
TEMPLATE_LIMIT_BYTES = 1_000_000
#: EventBridge's default largest event pattern (characters; adjustable).
EVENT_PATTERN_LIMIT = 2048
#: A landing bucket name as long as a real one (`ordered-ingest-landing-<12 digits>-<region>`).
SAMPLE_BUCKET = "ordered-ingest-landing-123456789012-ap-northeast-1"


def unmatched_pattern_characters(shared: dict[str, Any]) -> int:
    """The unmatched-uploads rule's pattern as EventBridge receives it (the bucket name resolved)."""
    (rule,) = [
        r
        for r in shared["Resources"].values()
        if r["Type"] == "AWS::Events::Rule"
        and r["Properties"].get("Name") == "ordered-ingest-unmatched-uploads"
    ]
    pattern = rule["Properties"]["EventPattern"]
    pattern["detail"]["bucket"]["name"] = [SAMPLE_BUCKET]
    return len(json.dumps(pattern, separators=(",", ":")))


def assembly_figures(outdir: Path) -> dict[str, Any]:
    """Cells, stacks, the largest templates and the shared stack's size: what grows with the tenants."""
    found = list(outdir.glob("*/*.template.json"))
    templates = {p.name.removesuffix(".template.json"): p.stat().st_size for p in found}
    (shared_path,) = [p for p in found if p.name == "OrderedIngest-Shared.template.json"]
    shared = json.loads(shared_path.read_text())
    return {
        "cell_count": len({p.parent for p in found}),
        "stacks": len(templates),
        "shared_kb": templates["OrderedIngest-Shared"] / 1024,
        "largest_tenant_kb": max(v for k, v in templates.items() if k.startswith("OrderedIngest-Tenant-"))
        / 1024,
        "over_limit": sorted(k for k, v in templates.items() if v > TEMPLATE_LIMIT_BYTES),
        "shared_resources": len(shared["Resources"]),
        "unmatched_pattern": unmatched_pattern_characters(shared),
        "assembly_mb": sum(p.stat().st_size for p in outdir.rglob("*") if p.is_file()) / 2**20,
    }


def measure(count: int, paths: Sequence[str], run_lint: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="synth-scale-") as scratch:
        directory = Path(scratch)
        tenants_file = write_tenants_file(directory, count)
        row: dict[str, Any] = {"tenants": count}
        for path in paths:
            if path == "whole":
                run = synth_whole(tenants_file, directory / "out-whole")
            elif path == "cells":
                run = synth_cells(tenants_file, directory / "cells.out")
            else:
                run = diff_one_tenant(tenants_file, directory)
            row[path] = run
            print(
                f"{count} tenants, {path}: {run.seconds:.1f} s, peak {run.peak_rss_mb:.0f} MB "
                f"(load {run.load_before:.1f})",
                flush=True,
            )
        cells_out = directory / "cells.out"
        if not cells_out.exists():
            synth_cells(tenants_file, cells_out)
        row.update(assembly_figures(cells_out))
        if run_lint:
            run, templates, findings = lint(cells_out)
            row["lint"], row["lint_templates"], row["lint_findings"] = run, templates, findings
            print(
                f"{count} tenants, cfn-lint of {templates} templates: {run.seconds:.1f} s, "
                f"{len(findings)} findings",
                flush=True,
            )
            for finding in findings[:20]:
                print(f"  {finding}")
        return row


def table(rows: list[dict[str, Any]], paths: Sequence[str]) -> str:
    today = date.today().isoformat()
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    header = ["date", "machine", "tenants", "cells", "stacks"]
    for path in paths:
        header += [f"{path}", f"{path} peak RSS", f"{path} load"]
    header += [
        "cfn-lint (all templates)",
        "lint findings",
        "shared template",
        "largest tenant template",
        "templates over 1 MB",
        "unmatched-uploads pattern",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        cells = [today, machine, f"{row['tenants']:,}", f"{row['cell_count']:,}", f"{row['stacks']:,}"]
        for path in paths:
            run: Run = row[path]
            cells += [f"{run.seconds:.1f} s", f"{run.peak_rss_mb:,.0f} MB", f"{run.load_before:.1f}"]
        lint_run: Run | None = row.get("lint")
        cells += [
            f"{lint_run.seconds:.1f} s" if lint_run else "-",
            f"{len(row['lint_findings'])}" if lint_run else "-",
            f"{row['shared_kb']:.0f} KB ({row['shared_resources']} resources)",
            f"{row['largest_tenant_kb']:.0f} KB",
            f"{len(row['over_limit'])}",
            f"{row['unmatched_pattern']:,} chars"
            + (f" (over {EVENT_PATTERN_LIMIT:,})" if row["unmatched_pattern"] > EVENT_PATTERN_LIMIT else ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record(rows: list[dict[str, Any]], paths: Sequence[str], command: str) -> None:
    """Replace the table of the "Synth at scale" section, keeping its prose."""
    text = RESULTS.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    end = len(text) if end == -1 else end + 1
    section = text[start:end]
    table_start = section.index("\n| date |") + 1
    table_end = section.find("\n\n", table_start)
    table_end = len(section) if table_end == -1 else table_end
    new_section = (section[:table_start] + table(rows, paths) + section[table_end:]).replace(
        section[section.index("Reproduce: `") : section.index("`", section.index("Reproduce: `") + 12) + 1],
        f"Reproduce: `{command}`",
    )
    RESULTS.write_text(text[:start] + new_section + text[end:], encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument(
        "--paths", nargs="+", choices=["whole", "cells", "diff"], default=["whole", "cells", "diff"]
    )
    parser.add_argument("--no-lint", action="store_true", help="skip cfn-lint")
    parser.add_argument("--print-only", action="store_true", help="do not write docs/benchmarks.md")
    args = parser.parse_args(argv)
    if not (ROOT / "node_modules" / ".bin" / "cdk").exists():
        parser.error("node_modules/.bin/cdk is missing: run `make setup`")
    if not shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) and not args.no_lint:
        parser.error("cfn-lint is missing from the venv: run `make setup`")
    rows = [measure(count, args.paths, not args.no_lint) for count in args.tenants]
    print(table(rows, args.paths))
    if not args.print_only:
        command = ".venv/bin/python bench/synth_scale.py" + (
            " " + " ".join(sys.argv[1:]) if sys.argv[1:] else ""
        )
        record(rows, args.paths, command)
    failed = [row["tenants"] for row in rows if row.get("lint_findings") or row["over_limit"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
