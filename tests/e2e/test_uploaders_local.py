"""A tenant with `uploaders` on the local runtime: its access point is not created (moto's
CloudFormation has no model of it and evaluates no policy: tests/test_uploaders.py asserts the
policies on the templates), and files put into the landing bucket run as any other."""

from __future__ import annotations

import pytest

from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import assert_records_in_file_order, csv_file


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline([{"id": "loaded", "uploaders": ["arn:aws:iam::222222222222:role/loaded-uploader"]}],
                          chunk_size=3)


def test_a_tenant_with_uploaders_deploys_and_runs_locally(pipe: LocalPipeline) -> None:
    """GIVEN a tenant with an uploader (its stack holds an access point moto cannot create)
    WHEN a file arrives in the landing bucket THEN it is delivered in order."""
    pipe.put_file("loaded", "u.csv", csv_file("u", 4))
    pipe.wait_until_idle(timeout=300, tenants=["loaded"])
    assert_records_in_file_order(pipe.sink("loaded").accepted, [("u", 4)])
