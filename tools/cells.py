"""`python -m tools.cells`: the cells of a tenants file (`pipeline_constructs/cell_plan.py`), each
synthesized, diffed and deployed by the CDK CLI as shipped, one assembly per cell.

    python -m tools.cells list                      # the cells and their tenants
    python -m tools.cells touched --base origin/main  # the cells a change touches
    python -m tools.cells synth [--cell NAME ...]   # every cell (or those), in parallel: cells.out/<cell>
    python -m tools.cells diff [--cell NAME ...]    # cdk diff of those cells against the deployed stacks
    python -m tools.cells deploy [--cell NAME ...] [-- CDK DEPLOY OPTIONS]

`deploy` deploys every target's shared cell first (the others read its SSM parameters at
deploy time), then the other cells, one after the other; one cell alone is also
`cdk deploy -c cell=<name> --all` (a target's cell: `'<target>/*'`). A change of the code, not
only of the tenants file, touches every cell (`cell_plan.touched`).

Exit codes: 0 done (`diff`: no difference), 1 `diff`: differences, 2 an error (a bad tenants
file, an unknown cell, a failed CLI run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline_constructs import capacity, cell_plan, deploy_limits
from pipeline_constructs.config import ALARMS_REACH_NOBODY, AppConfig, ConfigError, load_config, parse_config

OUTDIR = Path("cells.out")
EXIT_OK, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2

#: Runs one command (argv) and returns (exit code, output); the tests replace it.
Runner = Callable[[Sequence[str]], tuple[int, str]]


class CellsError(Exception):
    """A cell cannot be synthesized, diffed or deployed; the message says which and why."""


def run_command(argv: Sequence[str]) -> tuple[int, str]:
    env = {**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true"}
    result = subprocess.run(list(argv), env=env, capture_output=True, text=True, check=False)
    return result.returncode, (result.stdout + result.stderr)


def cdk() -> str:
    found = shutil.which("cdk")
    if not found:
        raise CellsError("the CDK CLI is not on PATH; run `make setup` (it installs node_modules/.bin/cdk)")
    return found


def selected(config: AppConfig, names: Sequence[str]) -> list[cell_plan.Cell]:
    """The cells named (every cell when none is), in the file's order: shared cells first."""
    every = cell_plan.cells_of(config)
    for name in names:
        cell_plan.cell_named(config, name)  # UnknownCell names the cells there are
    return [cell for cell in every if not names or cell.name in names]


def selector(cell: cell_plan.Cell) -> list[str]:
    """The CLI's stack selection of every stack of a cell's assembly."""
    return [f"{cell.target}/*"] if cell.target is not None else ["--all"]


def synth(
    tenants: Path,
    chosen: Sequence[cell_plan.Cell],
    *,
    outdir: Path = OUTDIR,
    jobs: int | None = None,
    runner: Runner = run_command,
    config: AppConfig | None = None,
) -> dict[str, Path]:
    """Synthesize each cell into `<outdir>/<cell>` with the CLI, `jobs` at a time (default: one
    per core); `CellsError` lists every cell that failed, with the end of its output. With
    `config` (the file's), the deploy-time limits across the cells (`_check_across_cells`)."""
    executable = cdk()

    def one(cell: cell_plan.Cell) -> tuple[cell_plan.Cell, int, str]:
        code, output = runner(
            [
                executable,
                "synth",
                "--quiet",
                "--no-notices",
                "--context",
                f"tenants={tenants}",
                "--context",
                f"cell={cell.name}",
                "--output",
                str(outdir / cell.name),
            ]
        )
        return cell, code, output

    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        results = list(pool.map(one, chosen))
    failed = [
        f"cell {cell.name} (exit {code}):\n" + "\n".join(output.strip().splitlines()[-15:])
        for cell, code, output in results
        if code != 0
    ]
    if failed:
        raise CellsError("synth failed for " + "\n".join(failed))
    assemblies = {cell.name: outdir / cell.name for cell in chosen}
    if config is not None:
        _check_across_cells(config, assemblies.values())
    return assemblies


def _check_across_cells(config: AppConfig, assemblies: Iterable[Path]) -> None:
    """Each cell's synth checked its own stacks against AWS's deploy-time limits; names unique
    per account (or Region) and rules per bus are checked again across every cell synthesized."""
    stacks = deploy_limits.assembly_stacks(
        str(p) for a in assemblies for p in sorted(a.glob("**/*.template.json"))
    )
    found = deploy_limits.check(stacks, rules_per_bus=capacity.declared_rules_per_bus(config))
    if found:
        raise CellsError(
            "the cells together break AWS's deploy-time limits:\n" + "\n".join(f"  - {v}" for v in found)
        )


def deploy(
    tenants: Path,
    chosen: Sequence[cell_plan.Cell],
    cdk_options: Sequence[str],
    *,
    outdir: Path = OUTDIR,
    runner: Runner = run_command,
    out: Callable[[str], None] = print,
    config: AppConfig | None = None,
) -> None:
    """Synthesize, then deploy each cell: shared cells first, then the others in order."""
    synth(tenants, chosen, outdir=outdir, runner=runner, config=config)
    executable = cdk()
    for cell in sorted(chosen, key=lambda c: not c.shared):  # stable: the file's order otherwise
        out(
            f"deploying cell {cell.name} ({len(cell.tenant_ids)} tenant stacks"
            f"{', the shared stack' if cell.shared else ''})"
        )
        code, output = runner(
            [
                executable,
                "deploy",
                "--app",
                str(outdir / cell.name),
                "--no-notices",
                *cdk_options,
                *selector(cell),
            ]
        )
        out(output.rstrip())
        if code != 0:
            raise CellsError(
                f"cdk deploy of cell {cell.name} failed (exit {code}); the cells before it are "
                "deployed, run the same command again to go on"
            )


def diff(
    chosen: Sequence[cell_plan.Cell],
    *,
    outdir: Path = OUTDIR,
    runner: Runner = run_command,
    out: Callable[[str], None] = print,
) -> bool:
    """`cdk diff --method template` of each synthesized cell against the deployed stacks
    (credentials needed); True if any stack differs."""
    executable = cdk()
    different = False
    for cell in chosen:
        code, output = runner(
            [
                executable,
                "diff",
                "--app",
                str(outdir / cell.name),
                "--no-notices",
                "--fail",
                "--method",
                "template",
                "**",
            ]
        )
        out(output.rstrip())
        if code not in (0, 1):
            raise CellsError(f"cdk diff of cell {cell.name} failed (exit {code})")
        different = different or code == 1
    return different


# --- which cells a change touches ------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    """`git ARGS` in `repo`: its output; `CellsError` with git's message if it fails."""
    result = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise CellsError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def code_changed(repo: Path, base: str, tenants: Path) -> list[str]:
    """The files other than the tenants file that differ between `base` and the working tree
    (untracked ones included): any of them may change what every cell synthesizes."""
    relative = _relative(repo, tenants)
    excluded = [f":(exclude){relative}"] if relative else []
    changed = git(repo, "diff", "--name-only", base, "--", ".", *excluded).split()
    untracked = git(repo, "ls-files", "--others", "--exclude-standard", "--", ".", *excluded).split()
    return sorted(set(changed) | set(untracked))


def _relative(repo: Path, path: Path) -> str | None:
    try:
        return path.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        return None


def base_config(repo: Path, base: str, tenants: Path) -> AppConfig | None:
    """The tenants file as it is at `base` (None: not there, or kept outside the repository, where
    `base` has no copy of it: every cell counts as new, none is left out; comparing the file with
    itself would leave out every cell it changes)."""
    relative = _relative(repo, tenants)
    if relative is None:
        return None
    try:
        text = git(repo, "show", f"{base}:{relative}")
    except CellsError:
        return None
    return parse_config(text, source=f"{relative} at {base}")


def touched_cells(repo: Path, base: str, tenants: Path) -> tuple[list[str], str]:
    """The cells the change from `base` to the working tree touches, and why."""
    head = load_config(tenants)
    code = code_changed(repo, base, tenants)
    if code:
        shown = ", ".join(code[:5]) + (f" and {len(code) - 5} more" if len(code) > 5 else "")
        return [cell.name for cell in cell_plan.cells_of(head)], f"the code changed ({shown}): every cell"
    if _relative(repo, tenants) is None:
        return cell_plan.touched(
            None, head
        ), f"{base} has no copy of a tenants file outside the repository: every cell"
    try:
        before = base_config(repo, base, tenants)
    except ConfigError:
        before = None  # not valid for today's code: compare with nothing
    return cell_plan.touched(before, head), "the tenants file changed"


# --- the command line --------------------------------------------------------------------


def computed_chunk_sizes(config: AppConfig, shown: int = 5) -> str:
    """The summary line of the chunk sizes the pace model chose (`chunk_size` left out), by size,
    and how many tenants write their own."""
    by_size: dict[int, list[str]] = {}
    for tenant in config.tenants:
        if tenant.chunk_size is None:
            by_size.setdefault(tenant.records_per_chunk, []).append(tenant.id)
    sizes = [
        f"{size:,} ({', '.join(ids[:shown])}{f' and {len(ids) - shown} more' if len(ids) > shown else ''})"
        for size, ids in sorted(by_size.items())
    ]
    written = sum(tenant.chunk_size is not None for tenant in config.tenants)
    return (
        f"chunk_size computed from the sink settings: {'; '.join(sizes) or 'none'}; "
        f"written in the tenants file: {written} tenant(s)"
    )


def main(argv: list[str] | None = None, *, runner: Runner = run_command) -> int:
    args, cdk_options = _parser().parse_known_args(argv)
    tenants = Path(args.tenants)
    try:
        config = load_config(tenants)
        if args.command == "list":
            for cell in cell_plan.cells_of(config):
                what = "the shared stack and dashboards, " if cell.shared else ""
                print(
                    f"{cell.name}: {what}{len(cell.tenant_ids)} tenant stack(s)"
                    f"{'' if cell.target is None else f' (target {cell.target})'}"
                )
            return EXIT_OK
        if args.command == "touched":
            names, why = touched_cells(Path(args.repo), args.base, tenants)
            print(f"{len(names)} cell(s) touched: {why}", file=sys.stderr)
            print("\n".join(names))
            return EXIT_OK
        chosen = selected(config, args.cell)
        if args.command == "synth":
            for name, path in synth(
                tenants, chosen, outdir=args.outdir, jobs=args.jobs, runner=runner, config=config
            ).items():
                print(f"{name}: {path}")
            print(computed_chunk_sizes(config))
            if config.tenants_without_credentials:  # on purpose (configuration.md, sink.auth): shown
                unauthenticated = config.tenants_without_credentials
                print(
                    f"without credentials ({len(unauthenticated)} tenant(s), sink.auth type none): "
                    f"{', '.join(unauthenticated)}"
                )
            # The cells' CLI output (where the shared stack's warning is) is not shown: once here.
            if config.notifications.reach_nobody:
                print(f"warning: {ALARMS_REACH_NOBODY}", file=sys.stderr)
            return EXIT_OK
        if args.command == "diff":
            return EXIT_DIFFERENT if diff(chosen, outdir=args.outdir, runner=runner) else EXIT_OK
        deploy(
            tenants,
            chosen,
            [o for o in cdk_options if o != "--"],
            outdir=args.outdir,
            runner=runner,
            config=config,
        )
        return EXIT_OK
    except (ConfigError, cell_plan.UnknownCell, CellsError) as error:
        print(f"cells: {error}", file=sys.stderr)
        return EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.cells", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("list", "touched", "synth", "diff", "deploy"))
    parser.add_argument("--tenants", default="tenants.yaml", help="the tenants file (default tenants.yaml)")
    parser.add_argument(
        "--cell", action="append", default=[], help="a cell (repeat for more; default: every cell)"
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="synth: cells synthesized at once (default: cores)"
    )
    parser.add_argument(
        "--outdir", type=Path, default=OUTDIR, help="where each cell's assembly goes (default cells.out)"
    )
    parser.add_argument("--base", default="origin/main", help="touched: the revision to compare with")
    parser.add_argument("--repo", default=".", help="touched: the repository (default: here)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
