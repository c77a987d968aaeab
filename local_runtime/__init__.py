"""The embedded local runtime: the pipeline on one machine, no AWS account, no Docker.

See `local_runtime.pipeline.LocalPipeline` and local_runtime/README.md. The names below are
imported on first use, so that importing a light module of the package (e.g.
`local_runtime.worker_process` for its log formatter) does not load boto3 and moto.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LocalPipeline": "local_runtime.pipeline",
    "Notification": "local_runtime.observation",
    "ProgressEvent": "local_runtime.progress",
    "ProgressEvents": "local_runtime.progress",
    "SinkRequest": "local_runtime.sink",
    "SinkServer": "local_runtime.sink",
    "Tenant": "local_runtime.deploy",
}
__all__ = [
    "LocalPipeline",
    "Notification",
    "ProgressEvent",
    "ProgressEvents",
    "SinkRequest",
    "SinkServer",
    "Tenant",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'local_runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
