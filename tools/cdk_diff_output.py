"""Read what `cdk diff` prints: which resources of which stack it adds, removes or replaces.

The pull-request check and the offline diff both read the pinned CLI's own verdict on
replacement (from its bundled CloudFormation resource specification), not a hand-kept list of
immutable properties. The CLI prints one line per resource:

    [~] AWS::SQS::Queue Pipeline/Queue PipelineQueueC13966F5 replace

(prefix, type, construct path when known, logical id, impact) and one `Stack <name>` line
before each stack's differences.

`python -m tools.cdk_diff_output cdk-diff.log` lists the destructive changes of a saved log
and exits 1 if there is any (0 if none, 2 if the log cannot be read); `--allow` reports them
and exits 0 (the pull-request label `allow-destructive-changes`).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: Resources whose replacement or removal loses data or messages in flight: a replaced FIFO
#: queue drops its backlog (G3), a replaced ledger table forgets which files were processed
#: (G2), a replaced bucket loses the landed files, a replaced key makes what it encrypted
#: unreadable.
STATEFUL_TYPES = frozenset(
    {
        "AWS::SQS::Queue",
        "AWS::DynamoDB::Table",
        "AWS::DynamoDB::GlobalTable",
        "AWS::S3::Bucket",
        "AWS::KMS::Key",
        "AWS::Logs::LogGroup",
    }
)

#: Impacts that end the life of the deployed resource (the CLI's wording).
DESTRUCTIVE_IMPACTS = frozenset({"replace", "may be replaced", "destroy"})

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STACK = re.compile(r"^Stack (?P<name>\S+)")
_RESOURCE = re.compile(
    r"^\[(?P<op>[+\-~←])\] (?P<type>[A-Za-z0-9]+::[A-Za-z0-9:]+) (?P<rest>.+?)"
    r"(?: (?P<impact>replace|may be replaced|destroy|orphan|import))?(?: \(OR .*\))?$"
)
_OPS = {"+": "added", "-": "removed", "~": "changed", "←": "imported"}


@dataclass(frozen=True)
class ResourceChange:
    """One resource line of `cdk diff`."""

    stack: str
    change: str  # added | removed | changed | imported
    resource_type: str
    logical_id: str
    path: str  # construct path, "" when the CLI does not know it
    impact: str  # replace | may be replaced | destroy | orphan | import | ""

    @property
    def replaced(self) -> bool:
        return self.impact in ("replace", "may be replaced")

    @property
    def destructive(self) -> bool:
        """Removes or replaces a resource that holds data (see STATEFUL_TYPES)."""
        # A removal the CLI calls "orphan" (DeletionPolicy Retain or RetainExceptOnCreate) leaves
        # the resource in place.
        return self.impact in DESTRUCTIVE_IMPACTS and self.resource_type in STATEFUL_TYPES

    def describe(self) -> str:
        verb = "replaced" if self.replaced else ("removed" if self.change == "removed" else self.change)
        where = f" ({self.path})" if self.path else ""
        return f"{self.stack}: {self.resource_type} {self.logical_id}{where} {verb}"


def parse(text: str) -> list[ResourceChange]:
    """Every resource line of a `cdk diff` output, attributed to the stack it follows."""
    changes: list[ResourceChange] = []
    stack = ""
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if found := _STACK.match(line):
            stack = found["name"]
            continue
        if found := _RESOURCE.match(line):
            words = found["rest"].split(" ")
            logical_id, path = words[-1], " ".join(words[:-1])
            changes.append(
                ResourceChange(
                    stack=stack,
                    change=_OPS[found["op"]],
                    resource_type=found["type"],
                    logical_id=logical_id,
                    path=path,
                    impact=found["impact"] or ("destroy" if found["op"] == "-" else ""),
                )
            )
    return changes


def destructive(changes: list[ResourceChange]) -> list[ResourceChange]:
    return [change for change in changes if change.destructive]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.cdk_diff_output",
        description="List the destructive changes in a saved `cdk diff` output; exit 1 if any "
        "(0: none or --allow, 2: the log cannot be read).",
    )
    parser.add_argument("log", type=Path, help="the saved output of `cdk diff`")
    parser.add_argument(
        "--allow",
        action="store_true",
        help="report destructive changes but exit 0 (the allow-destructive-changes label)",
    )
    args = parser.parse_args(argv)
    try:
        text = args.log.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        print(f"cannot read {args.log}: {error}", file=sys.stderr)
        return 2
    found = destructive(parse(text))
    if not found:
        print("No destructive change: no queue, table, bucket, key or log group is replaced or removed.")
        return 0
    print(f"{len(found)} destructive change(s): the deployed resource and what it holds are lost.")
    for change in found:
        print(f"  {change.describe()}")
    if args.allow:
        print("Allowed by the pull request's label allow-destructive-changes.")
        return 0
    print(
        "Fix: keep the resource's construct id and its replacement properties (names, FIFO, key "
        "schema), or, if the loss is intended and the resource is drained, add the label "
        "allow-destructive-changes to the pull request."
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
