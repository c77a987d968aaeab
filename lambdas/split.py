"""Split: validate one exact object version in a single streamed pass and index its chunks.

Records are not copied: the pass writes one chunk index (the byte offset where each chunk
starts, a record boundary as the parser sees it) and a manifest to the work bucket, and
register reads its chunk with a ranged GET of the same pinned version (`chunk_format`): a file
is one GET and a few PUTs, not a PUT per chunk. A malformed file fails here, before any record
is sent. Memory stays flat whatever the file size, and the output carries S3 references and
counts, never records (it enters the execution history). The SHA-256 of the bytes, computed as
they stream, finds a byte-identical file that succeeded, for `duplicate_files: skip`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from lambdas.chunk_format import INDEX_ENTRY, IndexWriter, TextLines, chunk_starts
from lambdas.contract import (
    DuplicateOf,
    FileTooLargeError,
    KeyOutsidePrefixError,
    SplitEnv,
    SplitRequest,
    SplitResult,
    SplitTimeLimitError,
    chunk_index_key,
    chunk_prefix,
    execution_name,
    manifest_key,
)
from lambdas.ledger import Ledger
from lambdas.runtime import BoundLogger, aws_client, error_code, lambda_handler, pick


class _HashingBody:
    """A streaming body that hashes every byte read from it."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self.sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._body.read(size)
        self.sha256.update(data)
        return data

    def close(self) -> None:
        self._body.close()


#: Split stops this long before its deadline when the pass is not done (the error, the abort
#: of the index upload and the return must fit in it).
DEADLINE_MARGIN_SECONDS = 20
#: The remaining time is read every this many chunks (cheap, and often enough: a chunk of
#: the largest size is read in well under a second).
DEADLINE_CHECK_EVERY_CHUNKS = 64


def split_file(
    request: SplitRequest,
    *,
    config: SplitEnv,
    s3: Any,
    log: Any = None,
    ddb: Any = None,
    remaining_seconds: Callable[[], float] | None = None,
) -> SplitResult:
    """Validate and index the object version `request` names; return the manifest reference.

    The index is kept per file (named by its first execution's name), so a resumed execution
    reuses it, and splitting the pinned version again writes the same index.
    `first_chunk`..`last_chunk` is the range still to register, from the one holding
    `start_record`. The pass stops at `max_chunks` chunks (`FileTooLargeError`) and, given
    `remaining_seconds`, before the deadline (`SplitTimeLimitError`): never a Lambda timeout
    half-way. Only a file none of which was sent (`start_record` 0) is found a duplicate. `s3`,
    `ddb`: boto3 clients (`ddb`: the ledger's content items, the file's pinned chunk size).
    """
    key, version_id = request["key"], request["version_id"]
    file_id = request["event_id"]
    start_record = int(request.get("start_record") or 0)
    if request.get("tenant", config.tenant_id) != config.tenant_id:
        raise ValueError(
            f"input is for tenant {request['tenant']!r}, this function serves {config.tenant_id!r}"
        )
    if not key.startswith(config.landing_prefix):
        raise KeyOutsidePrefixError(f"key {key!r} is outside the landing prefix {config.landing_prefix!r}")
    if not file_id:
        raise ValueError("event_id is empty")
    if start_record < 0:
        raise ValueError(f"start_record {start_record} must be >= 0")

    prefix = chunk_prefix(config.tenant_id, execution_name(file_id))
    manifest = _existing_manifest(s3, config, prefix, version_id)
    if manifest is None:
        chunk_size = _pinned_chunk_size(ddb, config, file_id) or config.chunk_size
        manifest = _split(s3, config, request, prefix, chunk_size, remaining_seconds)
    elif log is not None:
        log.info(
            "the chunk index of this file exists; reusing it", extra={"chunk_count": manifest["chunk_count"]}
        )
    check_size(manifest["chunk_count"], manifest["chunk_size"], config)
    first_chunk = start_record // manifest["chunk_size"]
    content_sha256 = manifest.get("content_sha256")
    duplicate_of = None
    if config.duplicate_files == "skip" and content_sha256 and start_record == 0:
        duplicate_of = _duplicate_of(ddb, config, content_sha256, request)
        if duplicate_of is not None and log is not None:
            log.info(
                "duplicate file: the same bytes as a file that succeeded; nothing is sent",
                extra={
                    "duplicate_of_key": duplicate_of["key"],
                    "duplicate_of_version_id": duplicate_of["version_id"],
                },
            )
    return SplitResult(
        manifest_key=manifest_key(prefix),
        chunk_prefix=prefix,
        chunk_size=manifest["chunk_size"],
        chunk_count=manifest["chunk_count"],
        record_count=manifest["record_count"],
        first_chunk=manifest["chunk_count"] if duplicate_of else min(first_chunk, manifest["chunk_count"]),
        last_chunk=manifest["chunk_count"] - 1,
        content_sha256=content_sha256,
        duplicate_of=duplicate_of,
    )


def check_size(
    chunk_count: int, chunk_size: int, config: SplitEnv, *, stopped_at_byte: int | None = None
) -> None:
    """Refuse a file of more chunks than the workflow may run with a bounded history. During the
    pass (`stopped_at_byte`) the count is only known to be over the limit: Split stops there."""
    if chunk_count <= config.max_chunks:
        return
    counted = (
        f"the file has {chunk_count} chunks"
        if stopped_at_byte is None
        else f"the file has more than {config.max_chunks} chunks"
    )
    stopped = "" if stopped_at_byte is None else f" (Split stopped reading at byte {stopped_at_byte})"
    raise FileTooLargeError(
        f"{counted} of {chunk_size} records{stopped}; at most {config.max_chunks} chunks "
        f"({config.max_chunks * chunk_size} records) fit the workflow's bounded history. Nothing was sent: "
        "split the file into smaller files, or raise chunk_size (see docs/scaling.md, 'Largest file')",
        chunk_count=chunk_count,
        max_chunks=config.max_chunks,
    )


def _duplicate_of(
    ddb: Any, config: SplitEnv, content_sha256: str, request: SplitRequest
) -> DuplicateOf | None:
    """The file of the tenant with these bytes that succeeded, unless it is this very version."""
    earlier = Ledger(ddb, config.ledger_table_name, config.tenant_id).processed_content(content_sha256)
    if earlier is None or (earlier["key"], earlier["version_id"]) == (request["key"], request["version_id"]):
        return None
    return earlier


def _existing_manifest(s3: Any, config: SplitEnv, prefix: str, version_id: str) -> dict[str, Any] | None:
    """The manifest of an earlier split of the same version, if the work bucket still has it
    and its chunk index. The index is written before the manifest and the bucket's lifecycle
    expires objects by age, so the index goes first: if it is there, the manifest describes
    it. A manifest of the chunk files of an older release (no index) is split again."""
    try:
        body = s3.get_object(Bucket=config.work_bucket, Key=manifest_key(prefix))["Body"]
    except Exception as error:  # botocore ClientError
        if _not_found(error):  # expired, or never written
            return None
        raise
    manifest: dict[str, Any] = json.loads(body.read())
    if manifest.get("source", {}).get("version_id") != version_id:
        return None
    index_key = chunk_index_key(prefix)
    if manifest.get("chunk_index_key") != index_key or not _exists(s3, config, index_key):
        return None  # the index expired before the manifest, or chunk files of an older release
    return manifest


def _exists(s3: Any, config: SplitEnv, key: str) -> bool:
    try:
        s3.head_object(Bucket=config.work_bucket, Key=key)
    except Exception as error:  # botocore ClientError
        if _not_found(error):
            return False
        raise
    return True


def _not_found(error: BaseException) -> bool:
    """S3's answer for a missing key: NoSuchKey to GET, 404 to HEAD (given s3:ListBucket)."""
    return error_code(error) in ("NoSuchKey", "404", "NotFound")


def _pinned_chunk_size(ddb: Any, config: SplitEnv, file_id: str) -> int | None:
    """The chunk size the tenant's current file was started with, if it is this file and
    register pinned one (`Ledger.pin_settings`): a file split again (its index expired, or a
    split that crashed) after `chunk_size` changed keeps its chunks, so its records keep
    their batches and keys."""
    if ddb is None:
        return None
    position = Ledger(ddb, config.ledger_table_name, config.tenant_id).read()
    return position.chunk_size if position.file_id == file_id else None


def _split(
    s3: Any,
    config: SplitEnv,
    request: SplitRequest,
    prefix: str,
    chunk_size: int,
    remaining_seconds: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """Validate the pinned version in one streamed pass into chunks of `chunk_size` records,
    writing the chunk index as it goes, then the manifest (last: it marks completion). Refuses
    a file as soon as it has one chunk more than `max_chunks`, and stops before the deadline."""
    bucket, key, version_id = request["bucket"], request["key"], request["version_id"]
    body = _HashingBody(s3.get_object(Bucket=bucket, Key=key, VersionId=version_id)["Body"])
    lines = TextLines(body)
    index = IndexWriter(s3, config.work_bucket, chunk_index_key(prefix))
    try:
        starts, record_count, csv_records = chunk_starts(config.format, lines, chunk_size)
        for offset in starts:
            index.add(offset)  # where the next chunk's first record starts
            check_size(index.entries, chunk_size, config, stopped_at_byte=offset)
            if (
                remaining_seconds is not None
                and index.entries % DEADLINE_CHECK_EVERY_CHUNKS == 0
                and remaining_seconds() < DEADLINE_MARGIN_SECONDS
            ):
                raise SplitTimeLimitError(
                    f"validating the file did not finish within Split's time limit: {index.entries} chunks "
                    f"({offset} bytes) were read. Nothing was sent: split the file into smaller files "
                    "(see docs/scaling.md, 'Largest file')",
                    bytes_read=offset,
                    chunks_indexed=index.entries,
                )
        index.add(lines.end)  # the end of the data: the last chunk's end
        index.close()
    except BaseException:
        index.abort()
        raise
    finally:
        body.close()

    manifest = {
        "source": {
            "bucket": bucket,
            "key": key,
            "version_id": version_id,
            "etag": request.get("etag"),
            "size": request.get("size"),
        },
        "tenant": config.tenant_id,
        "event_id": request["event_id"],
        "format": config.format,
        # Register parses a CSV chunk with the header Split validated (None for jsonl).
        "csv_header": csv_records.header if csv_records is not None else None,
        "chunk_prefix": prefix,
        "chunk_size": chunk_size,
        "chunk_count": index.entries - 1,
        "record_count": record_count(),
        "chunk_index_key": chunk_index_key(prefix),
        "chunk_index_entry_bytes": INDEX_ENTRY.size,
        # Every byte was read: the parse reads the body to its end (or fails the file).
        "content_sha256": body.sha256.hexdigest(),
    }
    s3.put_object(
        Bucket=config.work_bucket,
        Key=manifest_key(prefix),
        Body=json.dumps(manifest, indent=2).encode("utf-8"),
        ContentType="application/json",
    )
    return manifest


@lambda_handler(
    "split",
    SplitEnv,
    log_fields=lambda event: pick(event, "event_id", "key", "version_id", "start_record"),
    clients=("s3", "dynamodb"),
)
def handler(event: SplitRequest, config: SplitEnv, log: BoundLogger, context: Any) -> SplitResult:
    """Step Functions task entry point (`SplitRequest` in, `SplitResult` out)."""
    log.info("split started")
    ddb = aws_client("dynamodb")
    result = split_file(
        event,
        config=config,
        s3=aws_client("s3"),
        log=log,
        ddb=ddb,
        remaining_seconds=lambda: context.get_remaining_time_in_millis() / 1000,
    )
    log.info("split finished", extra=pick(result, "chunk_count", "record_count"))
    return result
