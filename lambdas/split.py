"""Split: stream one exact object version into JSON Lines chunk files plus a manifest.

Memory stays flat whatever the file size: the body is read in bounded pieces, parsed line by
line, and only the chunk being filled is held. The output carries S3 references and counts,
never records (it enters the execution history).

The SHA-256 of the bytes is computed while they stream (kept in the manifest, returned to the
workflow for the success close). With `duplicate_files: skip`, a file whose bytes are those of
a file of the tenant that succeeded (the ledger's `content#<sha256>`, another object version)
is returned with no chunks to send and `duplicate_of` naming that file.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from chunk_format import CONTENT_TYPE, MAX_LINE_BYTES, LineTooLongError, encode_chunk, iter_lines
from contract import (
    FileTooLargeError,
    KeyOutsidePrefixError,
    MalformedFileError,
    DuplicateOf,
    SplitEnv,
    SplitRequest,
    SplitResult,
    chunk_key,
    chunk_prefix,
    manifest_key,
)
from ledger import Ledger
from runtime import BoundLogger, aws_client, error_code, lambda_handler, pick


def _text_lines(body: Any) -> Iterator[tuple[int, str]]:
    """Decode the body line by line as UTF-8 (BOM dropped), naming the line of a bad byte."""
    try:
        for line_number, raw in iter_lines(body):
            if line_number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            try:
                yield line_number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise MalformedFileError(line_number, f"invalid UTF-8 at byte {error.start + 1}") from None
    except LineTooLongError as error:
        raise MalformedFileError(error.line_number, f"longer than {MAX_LINE_BYTES} bytes") from None


def _check_header(row: list[str]) -> list[str]:
    seen: set[str] = set()
    for position, name in enumerate(row, start=1):
        if not name:
            raise MalformedFileError(1, f"empty column name at position {position}")
        if name in seen:
            raise MalformedFileError(1, f"duplicate column name at position {position}")
        seen.add(name)
    return row


def csv_records(lines: Iterator[tuple[int, str]]) -> Iterator[dict[str, str]]:
    """Records of a CSV file whose first row is the header."""
    reader = csv.reader((text for _, text in lines), strict=True)
    header: list[str] | None = None
    first_blank: int | None = None  # blank lines are fine only at the end of the file
    while True:
        start = reader.line_num + 1  # physical line where the next record starts
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise MalformedFileError(start, f"invalid CSV ({error})") from None
        if not row:
            first_blank = first_blank or start
            continue
        if header is None:
            if first_blank is not None:
                raise MalformedFileError(1, "empty header")
            header = _check_header(row)
            continue
        if first_blank is not None:
            raise MalformedFileError(first_blank, f"expected {len(header)} fields, found 0")
        if len(row) != len(header):
            raise MalformedFileError(start, f"expected {len(header)} fields, found {len(row)}")
        yield dict(zip(header, row))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def jsonl_lines(lines: Iterator[tuple[int, str]]) -> Iterator[str]:
    """Each non-blank line, validated as one JSON object and passed on verbatim.

    Verbatim keeps numbers exact (no float round trip); NaN/Infinity are refused because
    they are not JSON and the core system could not parse them.
    """
    for line_number, text in lines:
        text = text.strip()
        if not text:
            continue
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as error:
            problem = f"invalid JSON ({error.msg} at column {error.colno})"
            raise MalformedFileError(line_number, problem) from None
        except (ValueError, RecursionError) as error:
            problem = str(error) if isinstance(error, ValueError) else "nested too deeply"
            raise MalformedFileError(line_number, f"invalid JSON ({problem})") from None
        if not isinstance(value, dict):
            raise MalformedFileError(line_number, "not a JSON object")
        yield text


def _serialized_records(fmt: str, body: Any) -> Iterator[str]:
    lines = _text_lines(body)
    if fmt == "jsonl":
        return jsonl_lines(lines)
    return (json.dumps(record, separators=(",", ":")) for record in csv_records(lines))


class _HashingBody:
    """A streaming body that hashes every byte read from it."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self.sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._body.read(size)
        self.sha256.update(data)
        return data

    def close(self) -> None:
        self._body.close()


class _ChunkWriter:
    """Fills one chunk at a time and writes it as soon as it is full."""

    def __init__(self, s3: Any, bucket: str, prefix: str, size: int) -> None:
        self._s3, self._bucket, self._prefix, self._size = s3, bucket, prefix, size
        self._lines: list[str] = []
        self.chunk_count = 0
        self.record_count = 0

    def add(self, line: str) -> None:
        self._lines.append(line)
        self.record_count += 1
        if len(self._lines) == self._size:
            self.flush()

    def flush(self) -> None:
        if not self._lines:
            return
        self._s3.put_object(
            Bucket=self._bucket,
            Key=chunk_key(self._prefix, self.chunk_count),
            Body=encode_chunk(self._lines),
            ContentType=CONTENT_TYPE,
        )
        self._lines = []
        self.chunk_count += 1


def split_file(request: SplitRequest, *, config: SplitEnv, s3: Any, log: Any = None, ddb: Any = None) -> SplitResult:
    """Split the object version `request` names into chunks; return the manifest reference.

    Chunks are kept per file (the event id), so an execution that resumes the file reuses
    them; if they expired from the work bucket (or were never complete), the pinned version is
    split again, which writes the same chunks. `first_chunk`..`last_chunk` is the range still
    to register, from the one holding `start_record`; a file of more than `max_chunks` chunks
    is refused (`FileTooLargeError`) before any record is sent. `s3` is a boto3 S3 client;
    `ddb` a DynamoDB client,
    needed with `duplicate_files: skip` only. A file is only ever found a duplicate before any
    of it was sent (`start_record` 0): a resumed file goes on.
    """
    key, version_id = request["key"], request["version_id"]
    file_id = request["event_id"]
    start_record = int(request.get("start_record") or 0)
    if request.get("tenant", config.tenant_id) != config.tenant_id:
        raise ValueError(f"input is for tenant {request['tenant']!r}, this function serves {config.tenant_id!r}")
    if not key.startswith(config.landing_prefix):
        raise KeyOutsidePrefixError(f"key {key!r} is outside the landing prefix {config.landing_prefix!r}")
    if not file_id or "/" in file_id:
        raise ValueError(f"event_id {file_id!r} is not a single path segment")
    if start_record < 0:
        raise ValueError(f"start_record {start_record} must be >= 0")

    prefix = chunk_prefix(config.tenant_id, file_id)
    manifest = _existing_manifest(s3, config, prefix, version_id, start_record)
    if manifest is None:
        manifest = _split(s3, config, request, prefix)
    elif log is not None:
        log.info("chunks of this file exist; reusing them", extra={"chunk_count": manifest["chunk_count"]})
    check_size(manifest["chunk_count"], manifest["chunk_size"], config)
    first_chunk = start_record // manifest["chunk_size"]
    content_sha256 = manifest.get("content_sha256")
    duplicate_of = None
    if config.duplicate_files == "skip" and content_sha256 and start_record == 0:
        duplicate_of = _duplicate_of(ddb, config, content_sha256, request)
        if duplicate_of is not None and log is not None:
            log.info("duplicate file: the same bytes as a file that succeeded; nothing is sent",
                     extra={"duplicate_of_key": duplicate_of["key"],
                            "duplicate_of_version_id": duplicate_of["version_id"]})
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


def check_size(chunk_count: int, chunk_size: int, config: SplitEnv) -> None:
    """Refuse a file of more chunks than the workflow may run with a bounded history."""
    if chunk_count > config.max_chunks:
        raise FileTooLargeError(
            f"the file has {chunk_count} chunks of {chunk_size} records; at most {config.max_chunks} chunks "
            f"({config.max_chunks * chunk_size} records) fit the workflow's bounded history. Nothing was sent: "
            "split the file into smaller files, or raise chunk_size (see README, 'Largest file')",
            chunk_count=chunk_count,
            max_chunks=config.max_chunks,
        )


def _duplicate_of(ddb: Any, config: SplitEnv, content_sha256: str, request: SplitRequest) -> DuplicateOf | None:
    """The file of the tenant with these bytes that succeeded, unless it is this very version."""
    earlier = Ledger(ddb, config.ledger_table_name, config.tenant_id).processed_content(content_sha256)
    if earlier is None or (earlier["key"], earlier["version_id"]) == (request["key"], request["version_id"]):
        return None
    return earlier


def _existing_manifest(
    s3: Any, config: SplitEnv, prefix: str, version_id: str, start_record: int
) -> dict[str, Any] | None:
    """The manifest of an earlier split of the same version, if the work bucket still has it and
    every chunk from the one holding `start_record` on. Chunks are written in order and the
    bucket's lifecycle expires objects by age, so the first chunk still needed is the first
    to go: if it is there, so are the ones after it."""
    try:
        body = s3.get_object(Bucket=config.work_bucket, Key=manifest_key(prefix))["Body"]
    except Exception as error:  # botocore ClientError
        if _not_found(error):  # expired, or never written
            return None
        raise
    manifest = json.loads(body.read())
    if manifest.get("source", {}).get("version_id") != version_id:
        return None
    first_needed = start_record // manifest["chunk_size"]
    if first_needed < manifest["chunk_count"] and not _chunk_exists(s3, config, prefix, first_needed):
        return None  # chunks expired before the manifest: split again
    return manifest


def _chunk_exists(s3: Any, config: SplitEnv, prefix: str, index: int) -> bool:
    try:
        s3.head_object(Bucket=config.work_bucket, Key=chunk_key(prefix, index))
    except Exception as error:  # botocore ClientError
        if _not_found(error):
            return False
        raise
    return True


def _not_found(error: BaseException) -> bool:
    """S3's answer for a missing key: NoSuchKey to GET, 404 to HEAD (given s3:ListBucket)."""
    return error_code(error) in ("NoSuchKey", "404", "NotFound")


def _split(s3: Any, config: SplitEnv, request: SplitRequest, prefix: str) -> dict[str, Any]:
    """Stream the pinned version into chunk files, then write the manifest (last: it marks completion)."""
    bucket, key, version_id = request["bucket"], request["key"], request["version_id"]
    body = _HashingBody(s3.get_object(Bucket=bucket, Key=key, VersionId=version_id)["Body"])
    writer = _ChunkWriter(s3, config.work_bucket, prefix, config.chunk_size)
    try:
        for line in _serialized_records(config.format, body):
            writer.add(line)
    finally:
        body.close()
    writer.flush()

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
        "chunk_prefix": prefix,
        "chunk_size": config.chunk_size,
        "chunk_count": writer.chunk_count,
        "record_count": writer.record_count,
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


@lambda_handler("split", SplitEnv, log_fields=lambda event: pick(event, "event_id", "key", "version_id", "start_record"))
def handler(event: SplitRequest, config: SplitEnv, log: BoundLogger, context: Any) -> SplitResult:
    """Step Functions task entry point (`SplitRequest` in, `SplitResult` out)."""
    log.info("split started")
    ddb = aws_client("dynamodb") if config.duplicate_files == "skip" else None
    result = split_file(event, config=config, s3=aws_client("s3"), log=log, ddb=ddb)
    log.info("split finished", extra=pick(result, "chunk_count", "record_count"))
    return result
