"""What one cloud test run names: everything carries its run id (six hex digits), the app's
names its qualifier too, so a run deploys beside the app already in the account and Region."""

from __future__ import annotations

#: The tag every stack of one run carries (`<key>=<run id>`): teardown deletes only those.
RUN_TAG = "ordered-ingest-cloud-test"


def qualifier(run_id: str) -> str:
    """The run's `qualifier` (tenants.yaml): `ct<run id>`, so every name of the run's copy of the
    app starts `ct<run id>-` and none is the deployed app's (`contract.qualify`)."""
    return f"ct{run_id}"


def tenant_ids(run_id: str) -> tuple[str, str]:
    """The run's two tenants: the first is made to halt, the second runs through."""
    return f"ct-{run_id}-a", f"ct-{run_id}-b"


def standin_stack_name(run_id: str) -> str:
    return f"OrderedIngestCloudTest-{run_id}-CoreStandIn"


def standin_function_name(run_id: str) -> str:
    """Known before the deploy, so the tenants' `invoke_arn` can name it."""
    return f"ordered-ingest-cloud-test-{run_id}-core"
