"""The embedded local runtime: the pipeline on one machine, no AWS account, no Docker.

See `local_runtime.pipeline.LocalPipeline` and local_runtime/README.md. `LocalPipeline` is
imported on first use, so that importing a light module of the package (e.g.
`local_runtime.worker_process` for its log formatter) does not load boto3 and moto.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LocalPipeline"]


def __getattr__(name: str) -> Any:
    if name != "LocalPipeline":
        raise AttributeError(f"module 'local_runtime' has no attribute {name!r}")
    from local_runtime.pipeline import LocalPipeline

    return LocalPipeline
