"""The boto3 clients ops runs with: AWS with the default credentials, or a local endpoint with
any, each session sharing the process's service models.
"""

from __future__ import annotations

import functools
from typing import Any

import boto3
import botocore.loaders
import botocore.session


@functools.cache
def _service_models() -> botocore.loaders.Loader:
    """One loader per process: a new session parses each service's model again, and the demo
    and the tests run commands in-process, one session each."""
    return botocore.loaders.create_loader()


def shared_session(**options: Any) -> boto3.session.Session:
    """A new boto3 session (`boto3.session.Session` options) whose models come from the process's loader."""
    core = botocore.session.get_session()
    core.register_component("data_loader", _service_models())
    return boto3.session.Session(botocore_session=core, **options)


class Clients:
    """boto3 clients for AWS (default credentials) or a local endpoint (any credentials)."""

    def __init__(self, region: str | None, endpoint_url: str | None) -> None:
        session = shared_session(region_name=region or ("us-east-1" if endpoint_url else None))
        if endpoint_url and session.get_credentials() is None:
            session = shared_session(
                region_name=session.region_name, aws_access_key_id="local", aws_secret_access_key="local"
            )
        self._session, self._endpoint = session, endpoint_url

    def __call__(self, service: str) -> Any:
        return self._session.client(service, endpoint_url=self._endpoint)
