"""Names and stand-ins the handler tests share (fixtures live in conftest.py)."""

from __future__ import annotations

REGION = "us-east-1"
LEDGER_TABLE = "ledger"
TENANT = "acme"


class Context:
    """The part of the Lambda context object the handlers use."""

    def __init__(self, seconds: float = 60) -> None:
        self.seconds = seconds

    def get_remaining_time_in_millis(self) -> int:
        return int(self.seconds * 1000)
