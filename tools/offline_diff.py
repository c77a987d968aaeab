"""Offline diff of two revisions: what a pull request changes, per tenant, without AWS access.

`make diff BASE=origin/main` (or `python -m tools.offline_diff --base REV`) synthesizes the
base revision and the working tree, then prints a per-tenant summary (resources added,
removed, changed or replaced, and every destructive change) and the full template diff of
each changed stack (`cdk diff --template`, no credentials; `--summary` leaves it out). Which
resources are *replaced* is the pinned CDK CLI's verdict, not a list kept here.

The base's tenants file is the base revision's copy of the head's; a file without one (kept
outside the repository, or new) is refused rather than compared with itself, unless
`--base-tenants` names it. When only the tenants file differs, only the cells whose inputs
changed are synthesized (`pipeline_constructs/cell_plan.py`). The base is exported with
`git archive`, not `git worktree add`: nothing is written into the shared `.git`, and nothing
is left behind by an interrupted run.

Exit code: 0 the diff is printed (with or without differences), 2 error; with `--strict` (CI),
1 when there are differences, like `diff`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pipeline_constructs import cell_plan
from pipeline_constructs.config import ConfigError, load_config
from tools import cells as cell_tools
from tools.cdk_diff_output import STATEFUL_TYPES, ResourceChange, parse

#: A tenant's stack, whatever Stage holds it and whatever its qualifier (`OrderedIngest-Tenant-<id>`,
#: `<qualifier>-OrderedIngest-Tenant-<id>`, see names.py).
TENANT_STACK = re.compile(r"^(?:(?P<stage>.+)/)?(?:[a-z][a-z0-9]*-)?OrderedIngest-Tenant-(?P<tenant>[^/]+)$")
SECTIONS = ("Parameters", "Conditions", "Mappings", "Outputs", "Rules")
EXIT_SAME, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2
#: The count the CLI ends each `cdk diff` with (one stack per run here): replaced by one for all.
CLI_COUNT = re.compile(r"^\W*Number of stacks with differences: \d+\s*$", re.MULTILINE)


class DiffError(Exception):
    """A revision cannot be read or synthesized; the message says which and how to fix it."""


@dataclass(frozen=True)
class StackTemplate:
    name: str  # the hierarchical id the CLI selects by: `Stack` or `Stage/Stack`
    path: Path
    template: dict
    assembly: Path | None = None  # the cloud assembly (`--app`) it was read from


@dataclass(frozen=True)
class ResourceDelta:
    logical_id: str
    resource_type: str
    construct_path: str
    change: str  # added | removed | changed | replaced
    destructive: bool = False


@dataclass
class StackDiff:
    name: str
    status: str  # added | removed | changed
    resources: list[ResourceDelta]
    sections: list[str]  # other template sections that differ (Outputs, Parameters, ...)
    cli_output: str = ""

    @property
    def tenant(self) -> str | None:
        found = TENANT_STACK.match(self.name)
        if not found:
            return None
        return found["tenant"] + (f" (stage {found['stage']})" if found["stage"] else "")


@dataclass
class Report:
    stacks: list[StackDiff] = field(default_factory=list)

    @property
    def different(self) -> bool:
        return bool(self.stacks)

    @property
    def destructive(self) -> list[tuple[str, ResourceDelta]]:
        return [(s.name, r) for s in self.stacks for r in s.resources if r.destructive]


# --- reading cloud assemblies ------------------------------------------------------------


def read_assembly(outdir: Path, prefix: str = "", root: Path | None = None) -> dict[str, StackTemplate]:
    """Every stack of a cloud assembly, nested assemblies (CDK Stages) included."""
    root = root or outdir
    manifest = json.loads((outdir / "manifest.json").read_text())
    stacks: dict[str, StackTemplate] = {}
    for artifact_id, artifact in manifest.get("artifacts", {}).items():
        properties = artifact.get("properties", {})
        if artifact["type"] == "aws:cloudformation:stack":
            name = artifact.get("displayName") or f"{prefix}{artifact_id}"
            path = outdir / properties["templateFile"]
            stacks[name] = StackTemplate(name, path, json.loads(path.read_text()), root)
        elif artifact["type"] == "cdk:cloud-assembly":
            nested = outdir / properties["directoryName"]
            stage = properties.get("displayName") or artifact_id
            stacks.update(read_assembly(nested, prefix=f"{prefix}{stage}/", root=root))
    return stacks


# --- comparing ----------------------------------------------------------------------------


def _construct_path(stack: str, resource: dict) -> str:
    """The resource's construct path inside its stack, as the CLI shows it (`Pipeline/Queue`).
    Empty when the template has no path metadata (the CLI adds it; an in-process App does not)."""
    path = resource.get("Metadata", {}).get("aws:cdk:path", "")
    path = path[len(stack) + 1 :] if path.startswith(stack + "/") else path.split("/", 1)[-1]
    return path.removesuffix("/Resource")


def compare_stacks(base: dict[str, StackTemplate], head: dict[str, StackTemplate]) -> list[StackDiff]:
    """Added, removed and changed stacks, with their resources' deltas (without the CLI's
    replacement verdict: see `apply_cli_verdict`)."""
    diffs: list[StackDiff] = []
    for name in sorted(set(base) | set(head)):
        old = _without_cdk_metadata(base[name].template) if name in base else {}
        new = _without_cdk_metadata(head[name].template) if name in head else {}
        if old == new:
            continue
        old_resources, new_resources = old.get("Resources", {}), new.get("Resources", {})
        resources = []
        for logical_id in sorted(set(old_resources) | set(new_resources)):
            before, after = old_resources.get(logical_id), new_resources.get(logical_id)
            if before == after:
                continue
            change = "added" if before is None else "removed" if after is None else "changed"
            resource = after or before
            resources.append(
                ResourceDelta(
                    logical_id=logical_id,
                    resource_type=resource.get("Type", "?"),
                    construct_path=_construct_path(name, resource),
                    change=change,
                    destructive=change == "removed" and _lost_on_removal(resource),
                )
            )
        status = "added" if name not in base else "removed" if name not in head else "changed"
        sections = [s for s in SECTIONS if old.get(s) != new.get(s)] if status == "changed" else []
        diffs.append(StackDiff(name=name, status=status, resources=resources, sections=sections))
    return diffs


def _without_cdk_metadata(template: dict) -> dict:
    """The template without its `AWS::CDK::Metadata` resource (the CDK version and feature flags
    in use, for AWS's analytics): like `cdk diff`, a change of it alone is no difference."""
    resources = {
        k: v for k, v in template.get("Resources", {}).items() if v.get("Type") != "AWS::CDK::Metadata"
    }
    return {**template, "Resources": resources} if "Resources" in template else template


def _lost_on_removal(resource: dict) -> bool:
    """A removed stateful resource is deleted with its data unless CloudFormation retains it."""
    retained = resource.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate")
    return resource.get("Type", "") in STATEFUL_TYPES and not retained


def apply_cli_verdict(diff: StackDiff, cli_changes: list[ResourceChange]) -> None:
    """Mark the resources the CLI says are replaced (its resource specification knows which
    property changes replace a resource) and the destructive ones, and add those it lists whose
    own template is unchanged: a property that refers to a replaced resource (an event source
    mapping's `EventSourceArn: !GetAtt Queue.Arn`) gets a new value, which may replace it too."""
    verdict = {change.logical_id: change for change in cli_changes}
    resources = []
    for delta in diff.resources:
        change = verdict.pop(delta.logical_id, None)
        if change is not None and change.replaced and delta.change == "changed":
            delta = ResourceDelta(
                delta.logical_id,
                delta.resource_type,
                delta.construct_path,
                "replaced",
                destructive=change.destructive,
            )
        resources.append(delta)
    resources += [
        ResourceDelta(
            change.logical_id,
            change.resource_type,
            change.path,
            "replaced" if change.replaced else change.change,
            destructive=change.destructive,
        )
        for change in verdict.values()
    ]
    diff.resources = sorted(resources, key=lambda r: r.logical_id)


# --- synthesizing and the CLI ------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CDK_DISABLE_CLI_TELEMETRY"] = "true"
    # No credentials are needed; do not wait on the instance metadata service for some.
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


def synth_command(source: Path, tenants: Path, outdir: Path, cell: str | None = None) -> list[str]:
    """The CLI synth of one revision (or one cell of it), with this environment's Python (the
    base revision has no virtual environment of its own)."""
    return [
        cell_tools.cdk(),
        "synth",
        "--quiet",
        "--no-notices",
        "--app",
        f"{sys.executable} app.py",
        "--output",
        str(outdir),
        "--context",
        f"tenants={tenants}",
        *(["--context", f"cell={cell}"] if cell is not None else []),
    ]


@dataclass(frozen=True)
class Synth:
    """One CLI synth: a revision's source and tenants file, a cell of it or all (None), where."""

    label: str
    source: Path
    tenants: Path
    outdir: Path
    cell: str | None = None


def synthesize(runs: list[Synth]) -> None:
    """Run the synths side by side, as many at once as there are cores."""
    failures = []

    def one(run: Synth) -> None:
        result = subprocess.run(
            synth_command(run.source, run.tenants, run.outdir, run.cell),
            cwd=run.source,
            env=_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            failures.append(f"synth of {run.label} failed (exit {result.returncode}):\n{tail}")

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(one, runs))
    if failures:
        raise DiffError("\n".join(failures))


def cli_diff(head_outdir: Path, stack: str, base_template: Path) -> str:
    """`cdk diff` of one head stack against a base template: offline, no credentials."""
    result = subprocess.run(
        [
            cell_tools.cdk(),
            "diff",
            "--no-color",
            "--no-notices",
            "--app",
            str(head_outdir),
            "--exclusively",
            "--template",
            str(base_template),
            stack,
        ],
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    output = (result.stdout + result.stderr).strip()
    if result.returncode not in (0, 1):
        raise DiffError(f"cdk diff of {stack} failed (exit {result.returncode}):\n{output}")
    return output


def build_report(base_outdirs: list[Path], head_outdirs: list[Path], scratch: Path) -> Report:
    """Compare the stacks of two sides' synthesized assemblies (a whole app each, or some cells
    each); run the CLI on every added or changed stack."""
    base = {n: s for outdir in base_outdirs for n, s in read_assembly(outdir).items()}
    head = {n: s for outdir in head_outdirs for n, s in read_assembly(outdir).items()}
    report = Report(stacks=compare_stacks(base, head))
    empty = scratch / "empty.template.json"
    empty.write_text(json.dumps({"Resources": {}}))
    for diff in report.stacks:
        if diff.status == "removed":
            continue
        assembly = head[diff.name].assembly
        assert assembly is not None
        output = cli_diff(assembly, diff.name, base[diff.name].path if diff.name in base else empty)
        apply_cli_verdict(diff, parse(output))
        diff.cli_output = CLI_COUNT.sub("", output).strip()
    return report


# --- rendering ----------------------------------------------------------------------------

_SIGN = {"added": "+", "removed": "-", "changed": "~"}


def _resource_lines(diff: StackDiff) -> list[str]:
    if diff.status != "changed":
        # A whole stack added or removed: its resources by type, and the destructive ones.
        counts: dict[str, int] = {}
        for r in diff.resources:
            counts[r.resource_type] = counts.get(r.resource_type, 0) + 1
        listed = ", ".join(
            f"{n} {t}" for t, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        )
        lines = [f"    {diff.status} {len(diff.resources)} resources: {listed}"]
        return lines + [
            f"    {r.change:<8}  {r.resource_type}  {r.logical_id}  ({r.construct_path})  DESTRUCTIVE"
            for r in diff.resources
            if r.destructive
        ]
    width = max((len(r.resource_type) for r in diff.resources), default=0)
    lines = []
    for r in diff.resources:
        flag = "  DESTRUCTIVE" if r.destructive else ""
        where = f"  ({r.construct_path})" if r.construct_path else ""
        lines.append(f"    {r.change:<8}  {r.resource_type:<{width}}  {r.logical_id}{where}{flag}")
    if diff.sections:
        lines.append(f"    also changed: {', '.join(diff.sections)}")
    return lines


def render_summary(report: Report) -> str:
    if not report.different:
        return "No difference: every stack's template is identical (CDK metadata aside)."
    tenants = [d for d in report.stacks if d.tenant]
    others = [d for d in report.stacks if not d.tenant]
    lines = ["Tenants"]
    for status in ("added", "removed", "changed"):
        names = [d.tenant for d in tenants if d.status == status]
        lines.append(f"  {status + ':':<9} {', '.join(names) if names else '-'}")
    for diff in tenants:
        lines += [
            "",
            f"{_SIGN[diff.status]} tenant {diff.tenant} (stack {diff.name}, {diff.status})",
            *_resource_lines(diff),
        ]
    if others:
        lines += ["", "Other stacks"]
        for diff in others:
            lines += [f"{_SIGN[diff.status]} stack {diff.name} ({diff.status})", *_resource_lines(diff)]
    destructive = report.destructive
    lines += [
        "",
        (
            f"Destructive changes (a queue, table, bucket, key or log group replaced or removed): "
            f"{len(destructive) or 'none'}"
        ),
    ]
    lines += [f"  {stack}: {r.resource_type} {r.logical_id} {r.change}" for stack, r in destructive]
    return "\n".join(lines)


def render_full(report: Report) -> str:
    parts = []
    for diff in report.stacks:
        if diff.status == "removed":
            parts.append(
                f"Stack {diff.name}\n(removed: not in the head revision; `cdk deploy` does not "
                f"delete it, `cdk destroy {diff.name}` does)"
            )
        else:
            parts.append(diff.cli_output)
    return "\n\n".join([*parts, f"Number of stacks with differences: {len(report.stacks)}"])


# --- revisions ----------------------------------------------------------------------------


def export_revision(repo: Path, revision: str, target: Path) -> str:
    """Write the files of `revision` into `target`; return its short commit id."""
    try:
        commit = cell_tools.git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}").strip()
    except cell_tools.CellsError:
        raise DiffError(
            f"base revision {revision!r} not found in {repo}; fetch it first "
            f"(e.g. `git fetch origin main`) or pass BASE=<branch, tag or commit>"
        ) from None
    archive = target.with_suffix(".tar")
    cell_tools.git(repo, "archive", "--format=tar", f"--output={archive}", commit)
    target.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        # The "data" filter (Python 3.11.4+) refuses absolute paths and links out of `target`.
        extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(target, **extra)
    archive.unlink()
    return commit[:12]


def base_tenants_file(repo: Path, base_source: Path, tenants: Path, base: str) -> Path:
    """The base revision's copy of the tenants file (the same repository path). `DiffError` when
    it has none: a file kept outside the repository, or new since `base`, compared with itself
    would show no difference whatever it holds."""
    try:
        relative = tenants.resolve().relative_to(repo.resolve())
    except ValueError:
        why = f"tenants file {tenants} is outside the repository {repo}, so {base} has no copy of it"
    else:
        if (base_source / relative).is_file():
            return base_source / relative
        why = f"tenants file {relative} is not in {base} (a new file), so {base} has no copy of it"
    raise DiffError(
        f"{why} to compare it with; name the base's tenants file (--base-tenants FILE):\n"
        f"  BASE_TENANTS=path/to/the/version/deployed/now  compares the two files, on the working tree's code\n"
        f"  BASE_TENANTS={tenants}  the same file: what the code change since {base} does to it"
    )


def _in_repo(repo: Path, path: str) -> Path:
    given = Path(path)
    return (given if given.is_absolute() else repo / given).resolve()


def run(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    head_tenants = _in_repo(repo, args.tenants)
    if not head_tenants.exists():
        raise DiffError(f"tenants file {head_tenants} not found; pass TENANTS=path/to/tenants.yaml")
    given = _in_repo(repo, args.base_tenants) if args.base_tenants else None
    if given is not None and not given.exists():
        raise DiffError(f"base tenants file {given} not found; pass BASE_TENANTS=path/to/tenants.yaml")
    # Another tenants file: the two files on today's code, no base revision read.
    two_files = given is not None and given != head_tenants
    with tempfile.TemporaryDirectory(prefix="offline-diff-") as scratch_dir:
        scratch = Path(scratch_dir)
        if two_files:
            base_source, base_tenants = repo, given
            base_label = f"working tree, tenants {base_tenants}"
        else:
            base_source = scratch / "base"
            commit = export_revision(repo, args.base, base_source)
            base_tenants = given or base_tenants_file(repo, base_source, head_tenants, args.base)
            shown = (
                base_tenants.relative_to(base_source)
                if base_tenants.is_relative_to(base_source)
                else base_tenants
            )
            base_label = f"{args.base} ({commit}), tenants {shown}"
        print(
            f"Offline diff\n  base: {base_label}\n  head: working tree {repo}, tenants {head_tenants}\n",
            flush=True,
        )
        base_runs, head_runs = _plan(args, repo, scratch, base_source, base_tenants, head_tenants, two_files)
        if not base_runs and not head_runs:
            print(
                "No cell is touched: the code is the same on both sides and the tenants files give every "
                "cell the same inputs."
            )
            return EXIT_SAME
        synthesize([*base_runs, *head_runs])
        report = build_report([r.outdir for r in base_runs], [r.outdir for r in head_runs], scratch)
    print(render_summary(report))
    if report.different and args.summary:
        print(
            f"\nFull template diffs left out (--summary): {len(report.stacks)} stack(s) differ; "
            "make diff without SUMMARY=1 prints them."
        )
    elif report.different:
        print("\nFull template diffs (cdk diff --template <base template>)\n")
        print(render_full(report))
    return EXIT_DIFFERENT if report.different and args.strict else EXIT_SAME


def _plan(
    args: argparse.Namespace,
    repo: Path,
    scratch: Path,
    base_source: Path,
    base_tenants: Path,
    head_tenants: Path,
    two_files: bool,
) -> tuple[list[Synth], list[Synth]]:
    """What to synthesize on each side. When only the tenants file changed (or two tenants
    files are compared: the same code on both sides), only the cells whose inputs changed
    (`cell_plan.touched`), each side with the working tree's code; when the code changed, each
    whole revision."""
    if not two_files and cell_tools.code_changed(repo, args.base, head_tenants):
        print("The code changed: every stack of both revisions is synthesized.\n", flush=True)
        return (
            [Synth("the base", base_source, base_tenants, scratch / "base.out")],
            [Synth("the head", repo, head_tenants, scratch / "head.out")],
        )
    try:
        before = load_config(base_tenants) if base_tenants.exists() else None
    except ConfigError:
        before = None
    head = load_config(head_tenants)
    names = cell_plan.touched(before, head)
    print(
        f"Only the tenants file changed: {len(names)} cell(s) touched ({', '.join(names) or 'none'}).\n",
        flush=True,
    )
    in_base = {c.name for c in cell_plan.cells_of(before)} if before is not None else set()
    in_head = {c.name for c in cell_plan.cells_of(head)}
    return (
        [
            Synth(f"the base's cell {n}", repo, base_tenants, scratch / "base" / n, n)
            for n in names
            if n in in_base
        ],
        [
            Synth(f"the head's cell {n}", repo, head_tenants, scratch / "head" / n, n)
            for n in names
            if n in in_head
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.offline_diff",
        description="Synthesize a base revision and the working tree and diff every stack, offline. "
        "Exit 0: the diff is printed, 2: error; with --strict, 1: differences.",
    )
    parser.add_argument(
        "--base", default="origin/main", help="git revision to compare with (default origin/main)"
    )
    parser.add_argument(
        "--tenants",
        default="tenants.yaml",
        help="tenants file of the head (default tenants.yaml, relative to --repo); the "
        "base uses its own copy of the same path (a file outside the repository, or "
        "new since --base, has none: give --base-tenants)",
    )
    parser.add_argument(
        "--base-tenants",
        default=None,
        help="the base's tenants file (relative to --repo; make diff BASE_TENANTS=): another "
        "file is compared with --tenants on the working tree's code, instead of two "
        "revisions; the same file as --tenants, on --base's code and the working tree's",
    )
    parser.add_argument("--repo", default=".", help="the repository (default: the current directory)")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when the revisions differ (for CI; make diff STRICT=1)"
    )
    parser.add_argument(
        "--summary",
        action="store_true",
        help="print the per-tenant summary alone, not the full template diffs (make diff SUMMARY=1)",
    )
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (DiffError, ConfigError, cell_tools.CellsError) as error:
        print(f"offline diff: {error}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
