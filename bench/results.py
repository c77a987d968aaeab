"""Where the benchmarks record their figures: rows at the end of their section's table in
docs/benchmarks.md (each section holds one table; the page's opening table is kept by hand)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def append_rows(
    section: str, rows: Sequence[str], *, header: str | None = None, path: Path | None = None
) -> None:
    """Insert ``rows`` after the last row of the table of ``section`` (its heading line, e.g.
    "## Split"). A missing section is added at the end of the page with the table ``header``,
    or refused without one."""
    path = RESULTS if path is None else path
    lines = path.read_text(encoding="utf-8").splitlines()
    if section not in lines:
        if header is None:
            raise SystemExit(f"{path} has no section {section!r}; add it first")
        lines += ["", section, "", *header.splitlines()]
    start = lines.index(section)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    table = [i for i in range(start, end) if lines[i].startswith("|")]
    if not table:
        raise SystemExit(f"{path}: section {section!r} has no table")
    last = table[0]
    while last + 1 < end and lines[last + 1].startswith("|"):
        last += 1
    lines[last + 1 : last + 1] = rows
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def embedded(text: str, begin: str, end: str) -> str:
    """The block of ``text`` from the line ``begin`` to the line ``end``, both included: what a
    script generates into a page (docs/cost.md, the cost model in docs/benchmarks.md)."""
    return text[text.index(begin) : text.index(end) + len(end)]


def replace_embedded(path: Path, begin: str, end: str, block: str) -> None:
    """Put ``block`` (itself from ``begin`` to ``end``) in place of that block of ``path``."""
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace(embedded(text, begin, end), block), encoding="utf-8")
