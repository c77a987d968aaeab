"""The embedded local runtime: the pipeline on one machine, no AWS account, no Docker.

See `local_runtime.pipeline.LocalPipeline` and DESIGN.md section 6.
"""

from local_runtime.events import ProgressEvent, ProgressEvents
from local_runtime.pipeline import LocalPipeline, Notification, Tenant
from local_runtime.sink import SinkRequest, SinkServer

__all__ = [
    "LocalPipeline",
    "Notification",
    "ProgressEvent",
    "ProgressEvents",
    "SinkRequest",
    "SinkServer",
    "Tenant",
]
