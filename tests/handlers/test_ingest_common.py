"""Shared helpers: keys, environment reading, JSON logs."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator

import pytest

import ingest_common
from ingest_common import ConfigError


@pytest.fixture
def clean_package_logger() -> Iterator[logging.Logger]:
    """The `ingest` logger as a fresh process would have it; restored afterwards."""
    package = logging.getLogger(ingest_common.LOGGER_NAME)
    saved = (package.handlers[:], package.level)
    package.handlers, package.level = [], logging.NOTSET
    yield package
    package.handlers, package.level = saved


def test_idempotency_key_is_sha256_of_version_and_record_index():
    """GIVEN an object version and record index WHEN keyed THEN sha256 hex of bucket/key?versionId=V#I."""
    assert ingest_common.idempotency_key("landing", "acme/f.csv", "v1", 7) == hashlib.sha256(
        b"landing/acme/f.csv?versionId=v1#7"
    ).hexdigest()


def test_chunk_key_is_zero_padded():
    assert ingest_common.chunk_key("acme/evt-1/", 12) == "acme/evt-1/chunk-000012.jsonl"


def test_fails_when_required_variable_is_missing(monkeypatch):
    """GIVEN WORK_BUCKET unset WHEN read THEN the error names the variable."""
    monkeypatch.delenv("WORK_BUCKET", raising=False)
    with pytest.raises(ConfigError, match="^environment variable WORK_BUCKET is not set"):
        ingest_common.env("WORK_BUCKET")


@pytest.mark.parametrize(
    ("value", "message"),
    [("ten", "CHUNK_SIZE='ten' is not an integer"), ("0", "CHUNK_SIZE=0 must be at least 1")],
)
def test_fails_when_integer_variable_is_invalid(monkeypatch, value, message):
    monkeypatch.setenv("CHUNK_SIZE", value)
    with pytest.raises(ConfigError, match=message):
        ingest_common.env_int("CHUNK_SIZE")


def test_outside_lambda_logs_are_json_lines_with_level_and_extra_fields(clean_package_logger, capsys):
    """GIVEN no Lambda JSON log format WHEN a handler logs with extra fields
    THEN stderr gets one JSON object per record that `{ $.level = "ERROR" }` matches."""
    ingest_common.configure_logging()
    ingest_common.configure_logging()  # idempotent: still one handler

    log = ingest_common.get_logger("controller")
    log.info("gate busy", extra={"tenant": "acme", "chunk_index": 3})
    log.error("boom", extra={"tenant": "acme"})

    entries = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(e["level"], e["message"], e["logger"], e["tenant"]) for e in entries] == [
        ("INFO", "gate busy", "ingest.controller", "acme"),
        ("ERROR", "boom", "ingest.controller", "acme"),
    ]
    assert entries[0]["chunk_index"] == 3
    assert entries[0]["timestamp"].endswith("+00:00")


def test_in_lambda_json_mode_the_runtime_formats_logs(clean_package_logger, monkeypatch):
    """GIVEN AWS_LAMBDA_LOG_FORMAT=JSON WHEN logging is configured THEN no second formatter is installed."""
    monkeypatch.setenv("AWS_LAMBDA_LOG_FORMAT", "JSON")
    ingest_common.configure_logging()
    assert clean_package_logger.handlers == []
