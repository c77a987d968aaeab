"""The ledger: each tenant's position and the record of each file (docs/architecture.md, "Ledger").

One DynamoDB table, partition key `tenant`, sort key `entry`: the tenant's `position` (the
current file, its execution and state, `next_record`, halted or paused, the waiting message),
a `file#...` history item per closed or skipped attempt (written in the close's transaction),
and `event#`, `version#` and `content#` items that make a second event for a file or a
version, or a byte-identical re-upload, a duplicate.

Every position write is conditional on what the writer read, so a stale writer can never move
a tenant backwards: transitions bump `seq`, progress only grows, and a close or progress write
names its execution. The gate decides from the position alone, so Step Functions forgetting
closed executions after 90 days cannot wedge a tenant. The boto3 client is passed in: the
handlers, the `ops` CLI and the tests share this code.
"""

from __future__ import annotations

from lambdas.ledger.claims import ControllerLedger
from lambdas.ledger.handoff import hand_off, start_execution
from lambdas.ledger.history import HistoryLedger
from lambdas.ledger.operator import OperatorLedger
from lambdas.ledger.position import (
    CLOSE_TRIES,
    CONTENT_PREFIX,
    DUPLICATE,
    EVENT_DAYS,
    EVENT_PREFIX,
    FAILED,
    HISTORY_DAYS,
    HISTORY_PREFIX,
    MAX_TEXT,
    PAUSED,
    POSITION,
    RECENT_ATTEMPTS,
    REPLACEMENT_PREFIX,
    RUNNING,
    SKIPPED,
    SUCCEEDED,
    VERSION_PREFIX,
    WAITING_DAYS,
    WAITING_PREFIX,
    AlreadyClaimed,
    LedgerConflict,
    Position,
    version_digest,
    version_entry,
)
from lambdas.ledger.progress import WorkflowLedger


class Ledger(ControllerLedger, WorkflowLedger, OperatorLedger, HistoryLedger):
    """The ledger of one tenant in one table; `ddb` is a boto3 DynamoDB client. Each role's
    transitions live in their own module: the controller's (`claims`), the workflow's
    (`progress`), the operator's (`operator`), the history (`history`)."""


__all__ = [
    "CLOSE_TRIES",
    "CONTENT_PREFIX",
    "DUPLICATE",
    "EVENT_DAYS",
    "EVENT_PREFIX",
    "FAILED",
    "HISTORY_DAYS",
    "HISTORY_PREFIX",
    "MAX_TEXT",
    "PAUSED",
    "POSITION",
    "RECENT_ATTEMPTS",
    "REPLACEMENT_PREFIX",
    "RUNNING",
    "SKIPPED",
    "SUCCEEDED",
    "VERSION_PREFIX",
    "WAITING_DAYS",
    "WAITING_PREFIX",
    "AlreadyClaimed",
    "Ledger",
    "LedgerConflict",
    "Position",
    "hand_off",
    "start_execution",
    "version_digest",
    "version_entry",
]
