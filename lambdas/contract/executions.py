"""Step Functions executions: their names, their ARNs and the statuses that close them.

A file's execution is named after the event that announced the file (`execution_name`), so that
the controller's StartExecution is idempotent and the ledger claims the file by its event id; a
name Step Functions would refuse, or one too long for the page and section suffixes, is
shortened by a digest, never cut short.
"""

from __future__ import annotations

import hashlib
import json
import re

from lambdas.contract.names import MAX_FILE_EXECUTION_NAME, NAME_DIGEST_CHARS

CLOSED_STATUSES = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})
FAILED_STATUSES = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})


def execution_arn(state_machine_arn: str, execution_name: str) -> str:
    """`arn:P:states:R:A:stateMachine:NAME` -> `arn:P:states:R:A:execution:NAME:EXEC`.

    A version or alias ARN (`...:stateMachine:NAME:live`, `...:NAME:3`) gives the same: an
    execution started through one is named after the state machine, without the qualifier
    (docs/operations.md, "Versions, aliases and rollback")."""
    parts = state_machine_arn.split(":")
    if len(parts) not in (7, 8) or parts[5] != "stateMachine" or not all(parts[6:]):
        raise ValueError(f"not a state machine ARN: {state_machine_arn!r}")
    return ":".join([*parts[:5], "execution", parts[6], execution_name])


#: A plain execution name: what Step Functions accepts and CloudWatch Logs can log (letters,
#: digits, `-`; `_` too, kept for hashed names).
_PLAIN_NAME = re.compile(r"[0-9A-Za-z-]+")
_NOT_PLAIN = re.compile(r"[^0-9A-Za-z-]")
#: How a resumed attempt's name ends: `<first attempt's name>-r<attempt>`.
RESUME_SUFFIX = "-r{}"
_RESUMED = re.compile(r"-r[0-9]+$")


def execution_name(event_id: str, attempt: int = 0) -> str:
    """The name of a file's execution: attempt `attempt` (0 the first; `ops resume` makes the
    next) at the file of event `event_id`. At most `MAX_FILE_EXECUTION_NAME` characters, so
    its page and section executions' names fit too, whatever the attempt.

    The event id itself (`<event id>-r<attempt>` once resumed), as the seed design names
    executions, when that fits and the id is made of letters, digits and hyphens and does not
    end like a resume. Any other id (too long, or characters Step Functions refuses or cannot
    log) is named `<its first letters, digits and hyphens>_<digest of the id>`, then
    `-r<attempt>` (an attempt number too long even for that: a digest of id and attempt).

    Deterministic: the controller's StartExecution is idempotent on it, and the ledger claims
    the file by its event id. Different (event id, attempt) pairs never share a name: a plain
    name has no `_`, and parses back to one id and attempt; a hashed name's digest is of the id
    (or of id and attempt).
    """
    suffix = RESUME_SUFFIX.format(attempt) if attempt else ""
    if (
        len(event_id) + len(suffix) <= MAX_FILE_EXECUTION_NAME
        and _PLAIN_NAME.fullmatch(event_id)
        and not _RESUMED.search(event_id)
    ):
        return event_id + suffix
    hashed: list[object] = [event_id]
    room = MAX_FILE_EXECUTION_NAME - len(suffix) - 1 - NAME_DIGEST_CHARS
    if room < 0:
        hashed, suffix, room = [event_id, attempt], "", MAX_FILE_EXECUTION_NAME - 1 - NAME_DIGEST_CHARS
    readable = _NOT_PLAIN.sub("", event_id)[:room]
    return f"{readable}_{name_digest(json.dumps(hashed))}{suffix}"


def name_digest(text: str) -> str:
    """The first `NAME_DIGEST_CHARS` hex digits of the SHA-256 of `text`."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:NAME_DIGEST_CHARS]
