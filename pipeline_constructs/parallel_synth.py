"""`cdk synth` of many tenants in several processes (issue 10: 1,000 tenants in one synth).

Synthesizing is a conversation between Python and the jsii kernel (node), one round trip per
construct call, about 330 per tenant stack: one process uses about one core whatever the
machine has. With `-c synth_workers=N` (default ``auto``: one worker per available core once
there are `MIN_TENANTS_PER_WORKER` tenants per worker) ``app.py`` does not build the app
itself. It starts N worker processes (`python -O -m pipeline_constructs.parallel_synth`):
worker i builds the whole app's shared stacks and the i-th contiguous slice of the tenant
stacks (the last worker also the extra dashboard stacks) and writes its own cloud assembly;
then the parent merges the N assemblies into the one the CLI reads (`merge_assemblies`).

The merged assembly is the serial one (`tests/test_parallel_synth.py` compares them file by
file): stacks built by several workers (the shared stacks) must come out byte-identical, or
the merge stops and names the file. Tenant stacks reference the shared stack's exports, and
every tenant references the same ones, so each worker's shared template is the same.

Workers run with ``-O``: it turns off jsii's runtime type checks of every call (about a
sixth of the time); the tests, the local runtime and ``synth_workers=1`` keep them on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The context key that sets the number of workers: a positive integer or ``auto``.
WORKERS_CONTEXT = "synth_workers"
#: A worker's slice, ``<index>/<count>``, in its environment.
PART_ENV = "ORDERED_INGEST_SYNTH_PART"
#: ``auto`` starts a second worker only when each would build at least this many tenant
#: stacks: below that, a worker's start (about 2 s: Python, node, the CDK library) and the
#: shared stacks every worker builds cost more than the split saves.
MIN_TENANTS_PER_WORKER = 100
#: The dashboard stacks' build and synth time as a share of the tenant stacks' (measured: 10 s
#: against 180 s for 1,000 tenants, docs/benchmarks.md "Synth at scale").
DASHBOARD_WORK = 0.055
#: What the CLI sets (aws-cdk cx-api): the output directory and the context, whose overflow the
#: CLI writes to a file when the context is too large for the environment.
OUTDIR_ENV = "CDK_OUTDIR"
CONTEXT_ENV = "CDK_CONTEXT_JSON"
CONTEXT_OVERFLOW_ENV = "CONTEXT_OVERFLOW_LOCATION_ENV"
MANIFEST = "manifest.json"
TREE = "tree.json"
VALIDATION_REPORT = "validation-report.json"
_ROOT = Path(__file__).resolve().parent.parent


class ParallelSynthError(RuntimeError):
    """A worker failed, or two workers wrote different contents for the same file."""


@dataclass(frozen=True)
class Part:
    """Worker `index` of `count`: which tenant stacks it builds, and whether it builds the
    dashboard stacks (the last worker: they come after every tenant stack, as in one process)."""

    index: int
    count: int

    def slice(self, total: int) -> range:
        """The tenants (positions in the tenants file) of this part: contiguous, so that the
        parts' stacks, taken in order, are the tenants file's order, and balanced by work: the
        last part also builds the extra dashboards, worth `DASHBOARD_WORK` of the tenants."""
        work = total * (1 + DASHBOARD_WORK)

        def bound(index: int) -> int:
            return total if index >= self.count else min(total, round(index * work / self.count))

        return range(bound(self.index), bound(self.index + 1))

    @property
    def builds_dashboards(self) -> bool:
        return self.index == self.count - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> Part:
        index, count = (int(value) for value in text.split("/"))
        if not 0 <= index < count:
            raise ValueError(f"{PART_ENV}={text!r}: want <index>/<count> with 0 <= index < count")
        return cls(index, count)


def part_from_environment(environ: Mapping[str, str] = os.environ) -> Part | None:
    value = environ.get(PART_ENV)
    return Part.parse(value) if value else None


def cli_context(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The context the CLI passes to the app, read without starting the CDK library."""
    context = json.loads(environ.get(CONTEXT_ENV) or "{}")
    overflow = environ.get(CONTEXT_OVERFLOW_ENV)
    if overflow:
        context.update(json.loads(Path(overflow).read_text()))
    return context


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def workers_for(tenant_count: int, requested: Any = "auto", cores: int | None = None) -> int:
    """How many workers synthesize `tenant_count` tenants: ``requested`` (context
    `WORKERS_CONTEXT`) if it is a number, else one per core, as long as each has at least
    `MIN_TENANTS_PER_WORKER` tenants. Never more workers than tenants."""
    if requested in (None, "auto"):
        cores = cores or available_cores()
        return max(1, min(cores, tenant_count // MIN_TENANTS_PER_WORKER))
    try:
        workers = int(requested)
    except (TypeError, ValueError):
        workers = 0
    if workers < 1 or str(requested).strip() != str(workers):
        raise ValueError(
            f"context {WORKERS_CONTEXT}={requested!r} is not valid; give a whole number of processes "
            f"(1: synthesize in this process) or 'auto'"
        )
    return max(1, min(workers, tenant_count))


def synthesize(tenants_file: str | Path, outdir: str | Path, workers: int,
               environ: Mapping[str, str] = os.environ) -> None:
    """Build the app of `tenants_file` in `workers` processes and write the merged cloud
    assembly to `outdir` (what ``app.synth()`` writes). Raises `ParallelSynthError` with the
    failing workers' output (a cdk-nag finding, a construct error) if any worker fails."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".synth-parts-", dir=outdir.parent) as scratch:
        parts = [Path(scratch) / f"part-{index}" for index in range(workers)]
        logs = [Path(scratch) / f"part-{index}.log" for index in range(workers)]
        processes = []
        for index, (part_dir, log) in enumerate(zip(parts, logs, strict=True)):
            env = {**environ, PART_ENV: str(Part(index, workers)), OUTDIR_ENV: str(part_dir),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), environ.get("PYTHONPATH")]))}
            with log.open("wb") as output:
                processes.append(subprocess.Popen(
                    [sys.executable, "-O", "-m", "pipeline_constructs.parallel_synth", str(tenants_file)],
                    env=env, stdout=output, stderr=subprocess.STDOUT, cwd=os.getcwd(),
                ))
        failed = [(index, log) for index, (process, log) in enumerate(zip(processes, logs, strict=True))
                  if process.wait() != 0]
        if failed:
            raise ParallelSynthError("\n".join(
                f"synth worker {Part(index, workers)} failed:\n{log.read_text(errors='replace').rstrip()}"
                for index, log in failed
            ))
        merge_assemblies(parts, outdir)


def merge_assemblies(parts: Sequence[Path], outdir: Path) -> None:
    """Merge the parts' cloud assemblies (same app, disjoint tenant stacks) into `outdir`.

    Files and directories present in one part are moved; a file present in several parts (a
    shared stack's template, the asset of the Lambda code) must be identical in each. The
    manifest, the construct tree and the validation report are merged, in part order, with
    the stacks before the other artifacts as one process writes them. Nested assemblies (the
    Stages of deployment targets) are merged the same way."""
    outdir.mkdir(parents=True, exist_ok=True)
    for name in _ordered_union(sorted(entry.name for entry in part.iterdir()) for part in parts):
        sources = [part / name for part in parts if (part / name).exists()]
        target = outdir / name
        if name == MANIFEST:
            _write_json(target, _merge_manifests([_read_json(source) for source in sources]))
        elif name == TREE:
            _write_json(target, _merge_trees([_read_json(source) for source in sources]))
        elif name == VALIDATION_REPORT:
            _write_json(target, _merge_reports([_read_json(source) for source in sources]))
        elif sources[0].is_dir() and (sources[0] / MANIFEST).exists():
            merge_assemblies(sources, target)
        else:
            _move_identical(sources, target)


def _move_identical(sources: list[Path], target: Path) -> None:
    first = sources[0]
    for other in sources[1:]:
        if not _same_content(first, other):
            raise ParallelSynthError(
                f"synth workers wrote different contents for {target.name}; synthesize in one process "
                f"(-c {WORKERS_CONTEXT}=1) and report this"
            )
    if target.exists():
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    shutil.move(str(first), str(target))


def _same_content(a: Path, b: Path) -> bool:
    if a.is_dir() != b.is_dir():
        return False
    if a.is_file():
        return a.read_bytes() == b.read_bytes()
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all(_same_content(a / n, b / n) for n in names)


def _merge_manifests(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    merged = dict(manifests[0])
    artifacts: dict[str, Any] = {}
    for manifest in manifests:
        for artifact_id, artifact in manifest.get("artifacts", {}).items():
            _keep_one(artifacts, artifact_id, artifact, MANIFEST)
    merged["artifacts"] = _stacks_first(artifacts, lambda artifact: artifact.get("type"))
    missing = [entry for manifest in manifests for entry in manifest.get("missing", [])]
    if missing:
        merged["missing"] = _unique(missing)
    return merged


#: Artifact types that one process writes in construct order, before the tree and reports.
_STACK_ARTIFACTS = ("aws:cloudformation:stack", "cdk:asset-manifest", "cdk:cloud-assembly")


def _stacks_first(entries: dict[str, Any], kind) -> dict[str, Any]:
    first = {key: value for key, value in entries.items() if kind(value) in _STACK_ARTIFACTS}
    return {**first, **{key: value for key, value in entries.items() if key not in first}}


def _merge_trees(trees: list[dict[str, Any]]) -> dict[str, Any]:
    merged = dict(trees[0])
    root = trees[0]["tree"]
    for tree in trees[1:]:
        root = _merge_node(root, tree["tree"])
    # The tree's own node ("Tree") last, as in one process.
    children = root.get("children", {})
    if "Tree" in children:
        root = {**root, "children": {**{k: v for k, v in children.items() if k != "Tree"}, "Tree": children["Tree"]}}
    merged["tree"] = root
    return merged


def _merge_node(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One construct node seen by two workers: the same node (a stack, a Stage) whose children
    each worker built in part."""
    if {k: v for k, v in a.items() if k != "children"} != {k: v for k, v in b.items() if k != "children"}:
        raise ParallelSynthError(
            f"synth workers disagree on {a.get('path')!r} in {TREE}; synthesize in one process "
            f"(-c {WORKERS_CONTEXT}=1) and report this"
        )
    if "children" not in a and "children" not in b:
        return a
    children = dict(a.get("children", {}))
    for child_id, child in b.get("children", {}).items():
        children[child_id] = _merge_node(children[child_id], child) if child_id in children else child
    return {**a, "children": children}


def _merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    merged = dict(reports[0])
    plugins: dict[str, dict[str, Any]] = {}
    for report in reports:
        for plugin in report.get("pluginReports", []):
            into = plugins.setdefault(plugin["pluginName"], {**plugin, "violations": [], "suppressedViolations": []})
            if plugin.get("conclusion") != "success":
                into["conclusion"] = plugin.get("conclusion")
            for key in ("violations", "suppressedViolations"):
                into[key] = into[key] + plugin.get(key, [])
    for plugin in plugins.values():
        for key in ("violations", "suppressedViolations"):
            plugin[key] = _grouped_by_rule(_unique(plugin[key]))
    merged["pluginReports"] = list(plugins.values())
    return merged


def _grouped_by_rule(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A report lists the findings rule by rule (each rule where it is first found), construct
    order inside a rule: the parts' findings, concatenated, sorted back into that order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for finding in findings:
        groups.setdefault(finding.get("ruleName", ""), []).append(finding)
    return [finding for group in groups.values() for finding in group]


def _keep_one(into: dict[str, Any], key: str, value: Any, where: str) -> None:
    if key in into and into[key] != value:
        raise ParallelSynthError(
            f"synth workers disagree on {key!r} in {where}; synthesize in one process "
            f"(-c {WORKERS_CONTEXT}=1) and report this"
        )
    into.setdefault(key, value)


def _unique(items: Iterable[Any]) -> list[Any]:
    """`items` without repeats (the shared stacks' findings, reported by every worker), in order."""
    seen: set[Any] = set()
    kept = []
    for item in items:
        key = _finding_key(item) if isinstance(item, dict) else json.dumps(item, sort_keys=True)
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


def _finding_key(finding: dict[str, Any]) -> Any:
    """What tells two report entries apart: the rule (with its finding), the constructs it names
    and the acknowledgement. (A whole entry serialized would cost seconds at 1,000 tenants.)"""
    constructs = tuple(c.get("constructPath") for c in finding.get("violatingConstructs", []))
    return (finding.get("ruleName"), constructs, finding.get("acknowledgedId"), finding.get("acknowledgedAt"),
            finding.get("reason"), finding.get("description"))


def _ordered_union(lists: Iterable[Iterable[str]]) -> list[str]:
    return list(dict.fromkeys(name for names in lists for name in names))


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def _write_json(path: Path, value: Any) -> None:
    """As the CDK writes them: the tree on one line, the others indented."""
    compact = path.name == TREE
    path.write_text(json.dumps(value, separators=(",", ":")) if compact else json.dumps(value, indent=2))


def _worker(tenants_file: str) -> None:
    """One worker: its part of the app, synthesized to `CDK_OUTDIR` (set by `synthesize`)."""
    from pipeline_constructs import jsii_channel

    jsii_channel.install()
    from pipeline_constructs.application import build_app, new_app

    part = part_from_environment()
    app = new_app()
    build_app(tenants_file, app=app, part=part)
    app.synth()


if __name__ == "__main__":
    _worker(sys.argv[1])
