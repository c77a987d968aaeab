"""A tenant on a private network (docs/core-system.md, "Private core systems") on the local runtime."""

from __future__ import annotations

import pytest

from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import assert_records_in_file_order, csv_file

NETWORK = {"vpc_id": "vpc-0123456789abcdef0", "subnet_ids": ["subnet-0123456789abcdef0"],
           "security_group_ids": ["sg-0123456789abcdef0"]}


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline([{"id": "private", "network": NETWORK}], chunk_size=3)


def test_a_tenant_on_a_private_network_deploys_and_runs_locally(pipe: LocalPipeline) -> None:
    """GIVEN a tenant with `network` (moto keeps the VpcConfig and attaches nothing) WHEN a file
    arrives THEN its register function, deployed with the tenant's subnets, delivers it."""
    register = pipe.tenants["private"].functions["register"]
    config = pipe.client("lambda").get_function_configuration(FunctionName=register)
    assert config["VpcConfig"]["SubnetIds"] == NETWORK["subnet_ids"]
    pipe.put_file("private", "d.csv", csv_file("d", 3))
    pipe.wait_until_idle(timeout=120, tenants=["private"])
    assert_records_in_file_order(pipe.sink("private").accepted, [("d", 3)])
