"""Release hygiene: one version (pyproject.toml), a changelog section for it, the Apache-2.0
license text, and no version cited in the README or docs/ that was never released."""

from __future__ import annotations

import datetime
import hashlib
import re
import tomllib

from tests.conftest import ROOT

#: Semantic Versioning 2.0.0's own pattern, without pre-release or build parts.
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")
RELEASE_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\] - (?P<date>\d{4}-\d{2}-\d{2})$", re.MULTILINE)
#: A version of this project where the docs name one (other projects' versions, such as an
#: action's tag, are not ours): a base revision, a tag command, "ordered-ingest vX.Y.Z".
CITED = re.compile(
    r"(?:BASE=|git tag (?:-a )?|git checkout |git push origin |ordered-ingest )v(\d+\.\d+\.\d+)\b"
)
#: sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def releases(changelog: str) -> list[tuple[str, datetime.date]]:
    return [
        (m["version"], datetime.date.fromisoformat(m["date"])) for m in RELEASE_HEADING.finditer(changelog)
    ]


def unreleased_citations(text: str, released: set[str]) -> list[str]:
    return [f"v{cited}" for cited in CITED.findall(text) if cited not in released]


def test_the_version_is_semantic():
    assert SEMVER.fullmatch(version()), version()


def test_the_changelog_has_unreleased_first_then_the_version_and_releases_newest_first():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = [line for line in changelog.splitlines() if line.startswith("## ")]
    assert headings[0] == "## [Unreleased]"
    found = releases(changelog)
    assert len(found) == len(headings) - 1, "every other section is `## [X.Y.Z] - YYYY-MM-DD`"
    assert found[0][0] == version(), "pyproject.toml's version is the newest release of CHANGELOG.md"
    assert all(SEMVER.fullmatch(v) for v, _ in found)
    keys = [tuple(map(int, v.split("."))) for v, _ in found]
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)
    dates = [d for _, d in found]
    assert dates == sorted(dates, reverse=True)


def test_the_license_is_apache_2_0_in_full():
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "Apache-2.0"


def test_the_readme_and_docs_cite_only_released_versions():
    released = {v for v, _ in releases((ROOT / "CHANGELOG.md").read_text())}
    for page in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert unreleased_citations(page.read_text(), released) == [], page.name


def test_fails_on_a_version_that_was_never_released():
    assert unreleased_citations("make diff BASE=v1.4.0   # a tag", {"0.1.0"}) == ["v1.4.0"]
    assert unreleased_citations("git tag -a v0.2.0 -m 'ordered-ingest v0.2.0'", {"0.1.0"}) == [
        "v0.2.0",
        "v0.2.0",
    ]
    assert unreleased_citations("make diff BASE=v0.1.0; actions/checkout@3d3c42e # v7.0.1", {"0.1.0"}) == []
