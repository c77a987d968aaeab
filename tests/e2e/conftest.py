"""Fixtures of the end-to-end tests: a `LocalPipeline` per test module (starting one costs
seconds: synthesis, moto, deployment, worker processes), closed when the module ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import E2E_TIME_SCALE, write_tenants


@pytest.fixture(scope="module")
def start_pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., LocalPipeline]]:
    """``start_pipeline([{"id": "acme"}], chunk_size=3)`` -> a running pipeline for the module."""
    opened: list[LocalPipeline] = []

    def start(
        tenants: list[dict[str, Any]],
        *,
        chunk_size: int = 3,
        time_scale: float = E2E_TIME_SCALE,
        routing: dict[str, Any] | None = None,
        status_events: bool = False,
    ) -> LocalPipeline:
        path = write_tenants(
            tmp_path_factory.mktemp("tenants"), tenants, chunk_size=chunk_size, routing=routing
        )
        pipe = LocalPipeline(path, time_scale=time_scale, status_events=status_events)
        opened.append(pipe)
        pipe.start()
        return pipe

    yield start
    for pipe in opened:
        pipe.close()
