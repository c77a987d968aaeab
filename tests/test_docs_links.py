"""The README is a front door and the docs link to each other: a section moved from one page to
another must not leave a dead link behind.

Anchors are computed as GitHub renders headings (lower case, punctuation dropped, spaces to
hyphens, a repeated heading numbered -1, -2, ...), plus every explicit `<a id="...">`.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

#: A front door: what it is, the two commands, the first tenant, links (docs/ holds the rest).
README_MAX_LINES = 300

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
EXPLICIT = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def _prose(text: str) -> str:
    """The text without fenced code blocks (their `# comments` are not headings, their
    brackets not links)."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    # inline HTML, but not inside a code span (`targets.<name>` keeps its `name`, as on GitHub)
    text = "".join(
        part if index % 2 else re.sub(r"<[^>]+>", "", part) for index, part in enumerate(heading.split("`"))
    )
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _prose(page.read_text(encoding="utf-8"))
    found: set[str] = set(EXPLICIT.findall(text))
    seen: dict[str, int] = {}
    for heading in HEADING.findall(text):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        found.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    return found


def links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(_prose(page.read_text(encoding="utf-8")))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)
    ]  # https:, mailto: ... are not ours


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def dead_links(page: Path) -> list[str]:
    dead = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / unquote(path)).resolve() if path else page
        if not resolved.exists():
            dead.append(f"{target}: no file {_shown(resolved)}")
        elif anchor and resolved.suffix == ".md" and unquote(anchor) not in anchors(resolved):
            dead.append(f"{target}: no heading or <a id> '{anchor}' in {_shown(resolved)}")
    return dead


def test_the_readme_is_a_front_door_of_at_most_300_lines():
    """GIVEN the README WHEN its lines are counted THEN it stays a front door: reference,
    runbooks and rationale live in docs/."""
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move sections to docs/ (at most {README_MAX_LINES})"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page):
    """GIVEN a page of the README or docs/ WHEN each relative link is resolved THEN its file
    exists and, for a link into a markdown page, so does its heading or explicit anchor."""
    assert dead_links(page) == []


def test_the_checker_finds_a_dead_file_and_a_dead_anchor(tmp_path):
    """GIVEN a page with a link to a missing file, one to a missing heading and two good ones
    WHEN it is checked THEN exactly the two dead ones are reported (the check is not vacuous)."""
    (tmp_path / "other.md").write_text('# Other page\n\n## The `ops` CLI: status\n\n<a id="kept"></a>\n')
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#the-ops-cli-status) [ok too](other.md#kept) [self](#page)\n"
        "[gone](missing.md) [moved](other.md#scaling)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert [line.split(":")[0] for line in dead_links(page)] == ["missing.md", "other.md#scaling"]
