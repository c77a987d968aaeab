"""The qualifier: what starts every name fixed per account and Region, so that two copies of
the app can share an account.

One context variable holds the qualifier in effect; `qualified()` sets it for the length of a
synth or an `ops` command, and `qualify()` puts it in front of a name. The handlers never read
it: their environment holds qualified names.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

#: The qualifier in effect: "" (the app as shipped) or the tenants file's `qualifier`. Set for
#: the length of a synth (`application.build_app`) or of an `ops` command (`--qualifier`) by
#: `qualified()`. The handlers never read it: their environment holds qualified names.
_QUALIFIER: contextvars.ContextVar[str] = contextvars.ContextVar("qualifier", default="")
#: A qualifier: lowercase letters and digits, starting with a letter (no hyphen, so a qualified
#: name reads back to one qualifier); at most `MAX_QUALIFIER_LENGTH` characters.
QUALIFIER_PATTERN = r"^[a-z][a-z0-9]*$"


@contextlib.contextmanager
def qualified(qualifier: str | None) -> Iterator[None]:
    """Render every name fixed per account and Region with `qualifier` ("" or None: none) inside."""
    token = _QUALIFIER.set(qualifier or "")
    try:
        yield
    finally:
        _QUALIFIER.reset(token)


def current_qualifier() -> str:
    return _QUALIFIER.get()


def qualify(name: str, qualifier: str | None = None) -> str:
    """`name` with the qualifier (default: the one in effect) in front: `<q>-<name>`, after the
    leading `/` of a path (`/<q>-ordered-ingest/...`) and after `alias/` of a KMS alias."""
    qualifier = current_qualifier() if qualifier is None else qualifier
    if not qualifier:
        return name
    head = next((h for h in ("alias/", "/") if name.startswith(h)), "")
    return f"{head}{qualifier}-{name.removeprefix(head)}"
