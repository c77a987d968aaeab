"""`python -m ops`: the operator's CLI (status, resume, skip), against AWS or the local runtime.

The Lambda code is deployed as top-level modules (`ledger`, `operations`, ...); the CLI runs
that very code, so the protocol an operator drives is the one the functions run.
"""

from __future__ import annotations

import sys
from pathlib import Path

LAMBDAS_DIR = Path(__file__).resolve().parent.parent / "lambdas"
if str(LAMBDAS_DIR) not in sys.path:
    sys.path.insert(0, str(LAMBDAS_DIR))
