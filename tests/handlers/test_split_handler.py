"""Split on moto: exact object version in, JSON Lines chunks + manifest out, streamed."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from lambdas import chunk_format, contract, split
from lambdas.contract import KeyOutsidePrefixError, MalformedFileError, SplitEnv
from lambdas.split import split_file
from tests.handlers.support import LEDGER_TABLE

TENANT = "acme"
LANDING = "landing"
WORK = "work"


def config(
    fmt: str = "csv", chunk_size: int = 3, duplicate_files: str = "process", max_chunks: int = 1000
) -> SplitEnv:
    return SplitEnv(
        tenant_id=TENANT,
        format=fmt,
        chunk_size=chunk_size,
        work_bucket=WORK,
        landing_prefix="acme/",
        ledger_table_name=LEDGER_TABLE,
        duplicate_files=duplicate_files,
        max_chunks=max_chunks,
    )


def chunks_of(result: dict[str, Any]) -> list[int]:
    """The chunk indexes a result's range names (still to register)."""
    return list(range(result["first_chunk"], result["last_chunk"] + 1))


def upload(s3: Any, content: bytes, key: str = "acme/f.csv") -> dict[str, Any]:
    """Put one object version; return the execution input the workflow passes (file, start record 0)."""
    version_id = s3.put_object(Bucket=LANDING, Key=key, Body=content)["VersionId"]
    return {
        "tenant": TENANT,
        "event_id": "evt-1",
        "bucket": LANDING,
        "key": key,
        "version_id": version_id,
        "size": len(content),
        "etag": "e",
        "event_time": "2024-01-01T00:00:00Z",
        "start_record": 0,
    }


def work_keys(s3: Any) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=WORK).get("Contents", []))


def chunk_lines(s3: Any, result: dict[str, Any]) -> list[list[str]]:
    """The serialized records of every chunk the output lists, in order, read as Register reads
    them: its two index entries out of their index block, then a ranged GET of the pinned
    landing version."""
    manifest = json.loads(s3.get_object(Bucket=WORK, Key=result["manifest_key"])["Body"].read())
    source = manifest["source"]
    chunks = []
    for index in chunks_of(result):
        block = s3.get_object(
            Bucket=WORK,
            Key=contract.chunk_index_key(result["chunk_prefix"]),
            Range=chunk_format.index_block_range(index // chunk_format.INDEX_BLOCK_ENTRIES),
        )
        entries = chunk_format.chunk_entries_from_block(block["Body"].read(), index)
        start, end = chunk_format.chunk_byte_range(entries)
        body = s3.get_object(
            Bucket=source["bucket"],
            Key=source["key"],
            VersionId=source["version_id"],
            Range=f"bytes={start}-{end - 1}",
        )["Body"]
        records = chunk_format.chunk_records(body, manifest["format"], manifest["csv_header"], base=start)
        chunks.append([record.decode() for _, record in records])
    return chunks


def index_offsets(s3: Any, result: dict[str, Any]) -> list[int]:
    """Every entry of the chunk index."""
    data = s3.get_object(Bucket=WORK, Key=contract.chunk_index_key(result["chunk_prefix"]))["Body"].read()
    return [offset for (offset,) in chunk_format.INDEX_ENTRY.iter_unpack(data)]


def chunk_records(s3: Any, result: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [[json.loads(line) for line in lines] for lines in chunk_lines(s3, result)]


def csv_file(n: int) -> bytes:
    return ("id,name\n" + "".join(f"{i},name-{i}\n" for i in range(n))).encode()


@pytest.mark.parametrize(
    ("records", "expected_chunks"),
    [(0, []), (1, [[0]]), (3, [[0, 1, 2]]), (4, [[0, 1, 2], [3]])],
    ids=["zero", "one", "exactly-chunk-size", "chunk-size-plus-one"],
)
def test_chunks_hold_chunk_size_records_in_file_order(buckets, records, expected_chunks):
    """GIVEN a CSV file of N records and chunk_size 3 WHEN split
    THEN ceil(N/3) chunks, in order, and a manifest."""
    ref = upload(buckets, csv_file(records))

    result = split_file(ref, config=config(chunk_size=3), s3=buckets)

    assert result == {
        "manifest_key": "chunks/acme/evt-1/manifest.json",
        "chunk_prefix": "chunks/acme/evt-1/",
        "chunk_size": 3,
        "chunk_count": len(expected_chunks),
        "record_count": records,
        "first_chunk": 0,
        "last_chunk": len(expected_chunks) - 1,
        "content_sha256": hashlib.sha256(csv_file(records)).hexdigest(),
        "duplicate_of": None,
    }
    assert chunk_records(buckets, result) == [
        [{"id": str(i), "name": f"name-{i}"} for i in chunk] for chunk in expected_chunks
    ]
    # one index object, however many chunks: no record is copied
    assert work_keys(buckets) == ["chunks/acme/evt-1/chunk-offsets.bin", "chunks/acme/evt-1/manifest.json"]
    lines = csv_file(records).splitlines(keepends=True)
    starts = [sum(map(len, lines[: 1 + i])) for i in range(records)]  # after the header
    assert index_offsets(buckets, result) == [starts[chunk[0]] for chunk in expected_chunks] + [
        len(csv_file(records))
    ]
    manifest = json.loads(buckets.get_object(Bucket=WORK, Key=result["manifest_key"])["Body"].read())
    assert manifest["source"] == {
        "bucket": LANDING,
        "key": "acme/f.csv",
        "version_id": ref["version_id"],
        "etag": "e",
        "size": ref["size"],
    }
    assert (manifest["chunk_size"], manifest["chunk_count"], manifest["record_count"]) == (
        3,
        len(expected_chunks),
        records,
    )


@pytest.mark.parametrize(
    "content",
    [b"", b"id,name\n", b"id,name", b"id,name\n\n\r\n"],
    ids=["empty", "header-only", "header-no-newline", "header-blank-lines"],
)
def test_empty_or_header_only_file_succeeds_with_zero_chunks(buckets, content):
    """GIVEN a file with no records WHEN split THEN success, zero chunks: the index holds only the end."""
    result = split_file(upload(buckets, content), config=config(), s3=buckets)

    assert (result["chunk_count"], result["record_count"], chunks_of(result)) == (0, 0, [])
    assert work_keys(buckets) == ["chunks/acme/evt-1/chunk-offsets.bin", "chunks/acme/evt-1/manifest.json"]
    assert index_offsets(buckets, result) == [len(content)]


def test_csv_quoted_commas_newlines_and_quotes_survive(buckets):
    """GIVEN quoted fields with commas, an embedded newline and doubled quotes WHEN split
    THEN values are exact."""
    content = b'id,text\n1,"hello, world"\n2,"line one\nline two"\n3,"say ""hi"""\n'

    result = split_file(upload(buckets, content), config=config(chunk_size=10), s3=buckets)

    assert chunk_records(buckets, result) == [
        [
            {"id": "1", "text": "hello, world"},
            {"id": "2", "text": "line one\nline two"},
            {"id": "3", "text": 'say "hi"'},
        ]
    ]


@pytest.mark.parametrize("chunk_size", [1, 2, 3])
def test_csv_chunks_start_at_record_boundaries_not_at_quoted_newlines(buckets, chunk_size):
    """GIVEN a CSV (BOM, CRLF) whose records hold quoted newlines, so that they fall where a chunk
    would start if offsets were raw line starts WHEN split and each chunk read back by its range
    THEN every index entry is the first byte of a record and the chunks hold exactly the records."""
    rows = [
        ("1", "plain"),
        ("2", "two\r\nlines"),
        ("3", "three\nlines\nhere"),
        ("4", '"quoted"\nand, comma'),
        ("5", "last"),
    ]
    body = "\ufeffid,text\r\n" + "".join(f'{i},"{t.replace(chr(34), chr(34) * 2)}"\r\n' for i, t in rows)
    content = body.encode()
    ref = upload(buckets, content)

    result = split_file(ref, config=config(chunk_size=chunk_size), s3=buckets)

    records = [{"id": i, "text": t} for i, t in rows]
    expected = [records[i : i + chunk_size] for i in range(0, len(records), chunk_size)]
    assert chunk_records(buckets, result) == expected
    offsets = index_offsets(buckets, result)
    assert offsets[-1] == len(content)
    for chunk, offset in zip(expected, offsets):
        assert content[offset:].startswith(f'{chunk[0]["id"]},"'.encode())


def test_jsonl_index_points_at_the_first_record_of_each_chunk_past_blank_lines(buckets):
    """GIVEN JSON Lines with blank lines between records WHEN split (chunks of 2)
    THEN each entry is the start of the chunk's first record line, the last one the file's end."""
    content = b'{"id":0}\n\n{"id":1}\n  \n{"id":2}\r\n{"id":3}\n\n{"id":4}\n\n'
    result = split_file(
        upload(buckets, content, key="acme/f.jsonl"), config=config("jsonl", chunk_size=2), s3=buckets
    )

    assert index_offsets(buckets, result) == [
        0,
        content.index(b'{"id":2}'),
        content.index(b'{"id":4}'),
        len(content),
    ]
    assert chunk_lines(buckets, result) == [['{"id":0}', '{"id":1}'], ['{"id":2}', '{"id":3}'], ['{"id":4}']]
    manifest = json.loads(buckets.get_object(Bucket=WORK, Key=result["manifest_key"])["Body"].read())
    assert (manifest["format"], manifest["csv_header"], manifest["chunk_index_entry_bytes"]) == (
        "jsonl",
        None,
        8,
    )


def test_a_malformed_last_line_is_found_before_any_index_is_written(buckets):
    """GIVEN 2,000 good records and a bad last one (chunks of 10: several would be indexed)
    WHEN split THEN the error names the last line and no index, part or manifest exists:
    nothing can be sent."""
    content = csv_file(2000) + b"2000,a,extra\n"
    calls: list[str] = []

    class SpyS3:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(buckets, name)

    with pytest.raises(MalformedFileError, match="^line 2002: expected 2 fields, found 3$"):
        split_file(upload(buckets, content), config=config(chunk_size=10), s3=SpyS3())
    assert calls == ["get_object", "get_object"]  # the manifest (absent), then the file; nothing written
    assert work_keys(buckets) == []


def test_bom_and_crlf_are_not_part_of_names_or_values(buckets):
    """GIVEN a UTF-8 BOM and CRLF line endings WHEN split
    THEN the first column is 'id' and no value ends in CR."""
    content = "\ufeffid,name\r\n1,Zoë\r\n2,b\r\n\r\n".encode()

    result = split_file(upload(buckets, content), config=config(chunk_size=10), s3=buckets)

    assert chunk_records(buckets, result) == [[{"id": "1", "name": "Zoë"}, {"id": "2", "name": "b"}]]


def test_trailing_blank_lines_are_ignored(buckets):
    """GIVEN empty lines after the last record WHEN split THEN they are not records."""
    result = split_file(upload(buckets, b"id,name\n1,a\n\n\n"), config=config(), s3=buckets)
    assert result["record_count"] == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"id,name\n1,a\n2\n3,c\n", "line 3: expected 2 fields, found 1"),
        # the record on line 3 spans lines 3-4, so the bad one starts on line 5
        (b'id,name\n1,a\n2,"x\ny"\n4,d,extra\n', "line 5: expected 2 fields, found 3"),
        (b"id,name\r\n1,a\r\n\r\n3,c\r\n", "line 3: expected 2 fields, found 0"),
        (b'id,name\n1,"open\n', "line 2: invalid CSV (unexpected end of data)"),
        (b'id,name\n1,"a"b\n', "line 2: invalid CSV (',' expected after '\"')"),
        (b"id,id\n1,2\n", "line 1: duplicate column name at position 2"),
        (b"id,,x\n1,2,3\n", "line 1: empty column name at position 2"),
        (b"\nid,name\n1,2\n", "line 1: empty header"),
        (b"id,name\n1,a\n2,\xff\xfe\n", "line 3: invalid UTF-8 at byte 3"),
    ],
    ids=[
        "too-few-fields",
        "after-multiline-record",
        "blank-line-inside",
        "unterminated-quote",
        "junk-after-quote",
        "duplicate-header",
        "empty-header-name",
        "blank-header",
        "invalid-utf8",
    ],
)
def test_fails_when_csv_is_malformed(buckets, content, message):
    """GIVEN a malformed CSV WHEN split
    THEN MalformedFileError names the physical line, and neither index nor manifest is written."""
    with pytest.raises(MalformedFileError) as raised:
        split_file(upload(buckets, content), config=config(chunk_size=1), s3=buckets)

    assert str(raised.value) == message
    assert work_keys(buckets) == []


def test_jsonl_objects_pass_through_verbatim_and_blank_lines_are_skipped(buckets):
    """GIVEN JSON Lines with blank lines, unicode and high-precision numbers WHEN split
    THEN each object is one chunk line, unchanged (no float round trip)."""
    lines = [
        '{"id":1,"amount":0.10000000000000000555}',
        '{"id":2,"name":"Zoë","nested":{"a":[1,2]}}',
        '{"id":3}',
    ]
    content = f"{lines[0]}\n\n{lines[1]}\r\n   \n{lines[2]}".encode()

    ref = upload(buckets, content, key="acme/f.jsonl")
    result = split_file(ref, config=config("jsonl", chunk_size=2), s3=buckets)

    assert result["record_count"] == 3
    assert chunk_lines(buckets, result) == [lines[:2], lines[2:]]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"id":1}\n[1,2]\n', "line 2: not a JSON object"),
        (b'{"id":1}\n\n{"id":\n', "line 3: invalid JSON (Expecting value at column 7)"),
        (b'{"id":NaN}\n', "line 1: invalid JSON (NaN is not valid JSON)"),
        (b'{"id":1}\n"text"\n', "line 2: not a JSON object"),
    ],
    ids=["array", "truncated", "nan", "string"],
)
def test_fails_when_jsonl_line_is_not_a_json_object(buckets, content, message):
    """GIVEN a JSONL file with a bad line WHEN split THEN MalformedFileError names that line."""
    with pytest.raises(MalformedFileError) as raised:
        split_file(upload(buckets, content, key="acme/f.jsonl"), config=config("jsonl"), s3=buckets)
    assert str(raised.value) == message


def test_fails_when_key_is_outside_the_landing_prefix(buckets):
    """GIVEN a FileRef for another tenant's key WHEN split
    THEN it is refused before reading and nothing is written."""
    ref = upload(buckets, csv_file(2), key="beta/f.csv")

    class NoRead:
        def __getattr__(self, name: str) -> Any:
            return getattr(buckets, name)

        def get_object(self, **kwargs: Any) -> None:
            raise AssertionError("read an object outside the tenant prefix")

    with pytest.raises(KeyOutsidePrefixError, match="'beta/f.csv' is outside the landing prefix 'acme/'"):
        split_file(ref, config=config(), s3=NoRead())
    assert work_keys(buckets) == []


def test_fails_when_the_request_is_for_another_tenant(buckets):
    """GIVEN an input naming tenant beta WHEN acme's Split gets it THEN it is refused before
    reading and nothing is written; an input that names no tenant is acme's own."""
    ref = upload(buckets, csv_file(2))
    with pytest.raises(ValueError, match="input is for tenant 'beta', this function serves 'acme'"):
        split_file({**ref, "tenant": "beta"}, config=config(), s3=buckets)
    assert work_keys(buckets) == []
    untagged = {name: value for name, value in ref.items() if name != "tenant"}
    assert split_file(untagged, config=config(), s3=buckets)["record_count"] == 2


@pytest.mark.parametrize(
    ("code", "missing"),
    [("NoSuchKey", True), ("404", True), ("NotFound", True), ("403", False), ("AccessDenied", False)],
)
def test_only_s3_s_answers_for_a_missing_key_count_as_missing(code, missing):
    """GIVEN an S3 error WHEN Split asks whether a work object is missing (a manifest, an index)
    THEN only the answers for a missing key say so; any other error is raised, not taken for
    "split again"."""
    from botocore.exceptions import ClientError

    error = ClientError({"Error": {"Code": code, "Message": "m"}}, "HeadObject")
    assert split._not_found(error) is missing


def test_reads_exactly_the_announced_object_version(buckets):
    """GIVEN two versions of the same key WHEN the first version is split
    THEN its records, not the newer ones."""
    first = upload(buckets, b"id,name\n1,first\n")
    upload(buckets, b"id,name\n2,second\n3,second\n")

    result = split_file(first, config=config(), s3=buckets)

    assert chunk_records(buckets, result) == [[{"id": "1", "name": "first"}]]
    assert result["record_count"] == 1  # the index is of the first version's bytes too
    assert result["content_sha256"] == hashlib.sha256(b"id,name\n1,first\n").hexdigest()


class SpyBody:
    """StreamingBody stand-in that fails on an unbounded read and tracks how much was read."""

    def __init__(self, body: Any, limit: int) -> None:
        self._body, self._limit = body, limit
        self.consumed = 0
        self.sizes: list[int | None] = []

    def read(self, amt: int | None = None) -> bytes:
        self.sizes.append(amt)
        if amt is None or amt < 0 or amt > self._limit:
            raise AssertionError(f"unbounded read: read({amt})")
        data = self._body.read(amt)
        self.consumed += len(data)
        return data

    def close(self) -> None:
        self._body.close()


def test_streams_the_body_in_bounded_reads_and_writes_no_record(buckets):
    """GIVEN a ~1 MB file WHEN split THEN every read is bounded (<= 64 KiB), the body is read to
    its end once, and the only objects written are the 11-entry index and the manifest."""
    content = ("id,payload\n" + "".join(f"{i},{'x' * 90}\n" for i in range(10_000))).encode()
    ref = upload(buckets, content)
    spy: dict[str, SpyBody] = {}
    written: list[tuple[str, int]] = []

    class SpyS3:
        def __getattr__(self, name: str) -> Any:
            return getattr(buckets, name)

        def get_object(self, **kwargs: Any) -> dict[str, Any]:
            response = buckets.get_object(**kwargs)
            spy["body"] = response["Body"] = SpyBody(response["Body"], limit=64 * 1024)
            return response

        def put_object(self, **kwargs: Any) -> Any:
            written.append((kwargs["Key"], len(kwargs["Body"])))
            return buckets.put_object(**kwargs)

    result = split_file(ref, config=config(chunk_size=1000), s3=SpyS3())

    assert result["chunk_count"] == 10
    assert spy["body"].consumed == len(content)
    assert max(spy["body"].sizes) <= 64 * 1024
    assert [key for key, _ in written] == [
        "chunks/acme/evt-1/chunk-offsets.bin",
        "chunks/acme/evt-1/manifest.json",
    ]
    assert written[0][1] == 11 * 8


def test_a_large_index_is_uploaded_in_parts_holding_one_part_at_most(buckets):
    """GIVEN more entries than one part holds (S3's minimum part, 5 MiB) WHEN they are written
    THEN a multipart upload carries them, no buffer ever exceeds a part, and the object is every
    entry in order."""
    part = 5 * 1024 * 1024
    entries = part // 8 * 2 + 3  # two full parts and a short last one
    calls: list[str] = []

    class SpyS3:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(buckets, name)

    writer = chunk_format.IndexWriter(SpyS3(), WORK, "chunks/acme/evt-1/chunk-offsets.bin", part_bytes=part)
    biggest = 0
    for offset in range(0, entries * 100, 100):
        writer.add(offset)
        biggest = max(biggest, len(writer._buffer))
    writer.close()

    assert biggest < part
    assert calls == [
        "create_multipart_upload",
        "upload_part",
        "upload_part",
        "upload_part",
        "complete_multipart_upload",
    ]
    data = buckets.get_object(Bucket=WORK, Key="chunks/acme/evt-1/chunk-offsets.bin")["Body"].read()
    assert len(data) == entries * 8
    assert chunk_format.chunk_byte_range(data[8 * 70_000 : 8 * 70_002]) == (7_000_000, 7_000_100)
    assert chunk_format.INDEX_ENTRY.unpack(data[-8:]) == ((entries - 1) * 100,)


def test_an_aborted_index_upload_leaves_nothing(buckets):
    """GIVEN a part of the index was uploaded and the parse then failed WHEN split aborts the index
    THEN the multipart upload is aborted and nothing is visible."""
    writer = chunk_format.IndexWriter(
        buckets, WORK, "chunks/acme/evt-1/chunk-offsets.bin", part_bytes=5 * 1024 * 1024
    )
    for offset in range(5 * 1024 * 1024 // 8):
        writer.add(offset)
    assert buckets.list_multipart_uploads(Bucket=WORK).get("Uploads")
    writer.abort()
    assert not buckets.list_multipart_uploads(Bucket=WORK).get("Uploads")
    assert work_keys(buckets) == []


@pytest.fixture
def handler_env(monkeypatch: pytest.MonkeyPatch, ledger_table: str) -> None:
    """The deployed environment, with the tenant's ledger (split reads a file's pinned chunk size)."""
    for name, value in contract.environment(config("csv", chunk_size=2)).items():
        monkeypatch.setenv(name, value)


def test_handler_returns_only_references_and_counts(buckets, handler_env, logs):
    """GIVEN the deployed environment WHEN the handler splits 3 records
    THEN its output has no record content."""
    content = b"id,secret\n1,TOPSECRET\n2,b\n3,c\n"
    result = split.handler(upload(buckets, content), None)

    assert result == {
        "manifest_key": "chunks/acme/evt-1/manifest.json",
        "chunk_prefix": "chunks/acme/evt-1/",
        "chunk_size": 2,
        "chunk_count": 2,
        "record_count": 3,
        "first_chunk": 0,
        "last_chunk": 1,
        "content_sha256": hashlib.sha256(content).hexdigest(),
        "duplicate_of": None,
    }
    assert "TOPSECRET" not in json.dumps(result) + logs.text()
    assert logs.errors() == []


def test_handler_logs_malformed_file_at_error_with_line_and_no_content(buckets, handler_env, logs):
    """GIVEN a malformed file WHEN the handler runs THEN MalformedFileError is raised and logged at ERROR
    with the line number, never the record."""
    with pytest.raises(MalformedFileError, match="^line 3: expected 2 fields, found 3$"):
        split.handler(upload(buckets, b"id,secret\n1,a\n2,TOPSECRET,extra\n"), None)

    (error,) = logs.errors()
    assert error.line_number == 3
    assert error.key == "acme/f.csv"
    assert "TOPSECRET" not in logs.text()


def test_fails_when_format_is_unknown(monkeypatch, handler_env):
    """GIVEN FORMAT=xml WHEN the handler starts
    THEN a FunctionEnvironmentError names the variable and the allowed values."""
    monkeypatch.setenv(contract.env_name("format"), "xml")
    with pytest.raises(contract.FunctionEnvironmentError, match="FORMAT='xml' must be one of csv, jsonl"):
        split.handler({}, None)


# --- resume: the chunk index is kept per file ------------------------------------------------


def test_a_resumed_file_reuses_its_index_and_lists_chunks_from_the_start_record(buckets):
    """GIVEN a file split once (10 records, chunks of 3) WHEN it is split again from record 7
    THEN nothing is read from the landing bucket nor written, and the chunks listed start with chunk 2."""
    request = upload(buckets, csv_file(10))
    first = split_file(request, config=config(), s3=buckets)
    buckets.delete_object(
        Bucket=LANDING, Key="acme/f.csv", VersionId=request["version_id"]
    )  # could not be read again
    calls: list[str] = []

    class SpyS3:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(buckets, name)

    resumed = split_file({**request, "start_record": 7}, config=config(), s3=SpyS3())

    assert chunks_of(first) == [0, 1, 2, 3]
    assert resumed == {**first, "first_chunk": 2}
    assert calls == ["get_object", "head_object"]  # the manifest, the index's existence


def test_a_resume_after_the_index_expired_splits_the_pinned_version_again(buckets):
    """GIVEN the work bucket's lifecycle deleted the index (it is older than the manifest)
    WHEN the file is resumed THEN the same version is split again into the same index."""
    request = upload(buckets, csv_file(10))
    first = split_file(request, config=config(), s3=buckets)
    before = index_offsets(buckets, first)
    buckets.delete_object(Bucket=WORK, Key=contract.chunk_index_key(first["chunk_prefix"]))

    resumed = split_file({**request, "start_record": 3}, config=config(), s3=buckets)

    assert chunks_of(resumed) == [1, 2, 3]
    assert index_offsets(buckets, resumed) == before
    assert chunk_lines(buckets, resumed)[0] == [
        '{"id":"3","name":"name-3"}',
        '{"id":"4","name":"name-4"}',
        '{"id":"5","name":"name-5"}',
    ]


def test_a_manifest_of_chunk_files_from_an_older_release_is_split_again(buckets):
    """GIVEN a manifest written by the release that copied records into chunk files (no index)
    WHEN the file is resumed THEN it is split again and gets an index (Register needs one)."""
    request = upload(buckets, csv_file(4))
    old = {
        "source": {"bucket": LANDING, "key": "acme/f.csv", "version_id": request["version_id"]},
        "chunk_size": 3,
        "chunk_count": 2,
        "record_count": 4,
    }
    buckets.put_object(Bucket=WORK, Key="chunks/acme/evt-1/manifest.json", Body=json.dumps(old).encode())

    resumed = split_file({**request, "start_record": 3}, config=config(), s3=buckets)

    assert chunks_of(resumed) == [1]
    assert chunk_lines(buckets, resumed) == [['{"id":"3","name":"name-3"}']]


def test_an_index_of_another_version_is_not_reused(buckets):
    """GIVEN the folder holds the index of another version (a replaced upload under the same
    event id cannot happen, but the check costs nothing) WHEN split THEN the pinned version is split."""
    other = upload(buckets, csv_file(2))
    split_file(other, config=config(), s3=buckets)
    request = {**upload(buckets, csv_file(5)), "event_id": "evt-1"}

    result = split_file(request, config=config(), s3=buckets)

    assert (result["record_count"], chunks_of(result)) == (5, [0, 1])


def test_fails_when_the_file_has_more_chunks_than_the_workflow_may_run(buckets):
    """GIVEN max_chunks 3 (chunks of 3 records) WHEN a file of 10 records (4 chunks) is split
    THEN FileTooLargeError names the limit in chunks and records and what to do; nothing was
    sent (Split runs before the first record is registered), and no manifest was written."""
    request = upload(buckets, csv_file(10))
    with pytest.raises(
        contract.FileTooLargeError,
        match=r"the file has more than 3 chunks of 3 records \(Split stopped reading at byte \d+\); "
        r"at most 3 chunks \(9 records\) fit the workflow's bounded history",
    ):
        split_file(request, config=config(max_chunks=3), s3=buckets)
    assert (
        split_file(upload(buckets, csv_file(9)), config=config(max_chunks=3), s3=buckets)["chunk_count"] == 3
    )


def test_a_reused_index_of_more_chunks_than_the_workflow_now_runs_is_refused(buckets):
    """GIVEN a file split into 4 chunks of 3 records WHEN it is resumed after max_chunks came
    down to 3 THEN the reused index is refused as a too large file, with its chunk count and
    size, not run past the bounded history."""
    request = upload(buckets, csv_file(10))
    assert split_file(request, config=config(), s3=buckets)["chunk_count"] == 4
    with pytest.raises(
        contract.FileTooLargeError,
        match=r"the file has 4 chunks of 3 records; at most 3 chunks \(9 records\) fit",
    ):
        split_file({**request, "start_record": 3}, config=config(max_chunks=3), s3=buckets)


def test_a_too_large_file_is_refused_as_soon_as_its_chunks_pass_the_limit_not_after_a_full_pass(buckets):
    """GIVEN max_chunks 3 (chunks of 3 records) and a file whose 20th line is malformed WHEN it
    is split THEN the refusal is FileTooLargeError (reading stopped at the 4th chunk), not
    the malformed line further on: a file far over the limit is not read to its end."""
    lines = csv_file(30).decode().splitlines()
    lines[20] = "not,a,valid,row,with,too,many,fields"
    request = upload(buckets, ("\n".join(lines) + "\n").encode())
    with pytest.raises(contract.FileTooLargeError) as refused:
        split_file(request, config=config(max_chunks=3), s3=buckets)
    assert refused.value.chunk_count == 4


def test_fails_before_the_deadline_when_the_pass_would_not_finish_in_time(buckets):
    """GIVEN an invocation whose time left drops below Split's margin part-way WHEN a file of
    200 chunks is split THEN SplitTimeLimitError says how far the pass got and what to do,
    before Lambda would time the function out; no manifest is left to reuse."""
    request = upload(buckets, csv_file(600))  # 200 chunks of 3
    clock = iter([60.0] * 2 + [5.0] * 100)
    with pytest.raises(
        contract.SplitTimeLimitError,
        match=r"did not finish within Split's time limit: 192 chunks \(\d+ bytes\) were read\. "
        r"Nothing was sent: split the file into smaller files",
    ):
        split_file(request, config=config(), s3=buckets, remaining_seconds=lambda: next(clock))
    assert (
        split_file(request, config=config(), s3=buckets, remaining_seconds=lambda: 60.0)["chunk_count"] == 200
    )


def test_fails_when_start_record_is_negative(buckets):
    request = upload(buckets, csv_file(1))
    with pytest.raises(ValueError, match="start_record -1 must be >= 0"):
        split_file({**request, "start_record": -1}, config=config(), s3=buckets)


# --- duplicate files: the content's hash, and `duplicate_files: skip` ---------------------------


def processed(ddb: Any, content: bytes, key: str, version_id: str, event_id: str = "evt-0") -> None:
    """The ledger after a file with `content` SUCCEEDED (its close remembers the content)."""
    from lambdas.contract import FileRef
    from lambdas.ledger import Ledger

    ledger = Ledger(ddb, LEDGER_TABLE, TENANT)
    ledger.claim(
        ledger.read(),
        FileRef(
            tenant=TENANT,
            event_id=event_id,
            bucket=LANDING,
            key=key,
            version_id=version_id,
            size=len(content),
            etag=None,
            event_time="",
        ),
        event_id,
        1.0,
    )
    ledger.record_close(
        event_id,
        "SUCCEEDED",
        halt_on_failure=True,
        now=2.0,
        content_sha256=hashlib.sha256(content).hexdigest(),
    )


def test_the_content_hash_is_of_the_bytes_streamed_and_kept_in_the_manifest(buckets):
    """A big file read in many pieces: the hash is of every byte, not of the records."""
    content = b"\xef\xbb\xbfid,name\r\n" + b"".join(b"%d,n\r\n" % i for i in range(200_000))
    result = split_file(upload(buckets, content), config=config(chunk_size=50_000), s3=buckets)
    assert result["content_sha256"] == hashlib.sha256(content).hexdigest()
    manifest = json.loads(buckets.get_object(Bucket=WORK, Key=result["manifest_key"])["Body"].read())
    assert manifest["content_sha256"] == result["content_sha256"]


def test_skip_sends_nothing_for_the_bytes_of_a_file_that_succeeded(buckets, ddb, ledger_table, logs):
    """GIVEN acme/a.csv succeeded WHEN the same bytes arrive as acme/b.csv (duplicate_files: skip)
    THEN no chunk is to be sent and the result names a.csv's version and event."""
    content = csv_file(4)
    first = upload(buckets, content, key="acme/a.csv")
    processed(ddb, content, "acme/a.csv", first["version_id"])
    again = upload(buckets, content, key="acme/b.csv")
    result = split_file(again, config=config(duplicate_files="skip"), s3=buckets, ddb=ddb, log=logs_adapter())
    assert chunks_of(result) == [] and result["record_count"] == 4
    assert result["duplicate_of"] == {
        "key": "acme/a.csv",
        "version_id": first["version_id"],
        "event_id": "evt-0",
    }
    assert "duplicate file" in " ".join(logs.at(20))


def test_skip_processes_different_bytes_and_the_same_version_again(buckets, ddb, ledger_table):
    content = csv_file(4)
    first = upload(buckets, content, key="acme/a.csv")
    processed(ddb, content, "acme/a.csv", first["version_id"])
    other = split_file(
        upload(buckets, csv_file(5), key="acme/b.csv"),
        config=config(duplicate_files="skip"),
        s3=buckets,
        ddb=ddb,
        log=logs_adapter(),
    )
    assert (other["duplicate_of"], chunks_of(other)) == (None, [0, 1])
    same_version = split_file(
        {**first, "event_id": "evt-9"}, config=config(duplicate_files="skip"), s3=buckets, ddb=ddb
    )
    assert (same_version["duplicate_of"], chunks_of(same_version)) == (None, [0, 1])


def test_process_sends_a_duplicate_again_without_reading_the_ledger(buckets, ddb, ledger_table):
    content = csv_file(4)
    first = upload(buckets, content, key="acme/a.csv")
    processed(ddb, content, "acme/a.csv", first["version_id"])
    result = split_file(upload(buckets, content, key="acme/b.csv"), config=config(), s3=buckets, ddb=None)
    assert (result["duplicate_of"], chunks_of(result)) == (None, [0, 1])


def test_a_resumed_file_is_never_found_a_duplicate(buckets, ddb, ledger_table):
    """Part of it was sent already: it goes on from its start record."""
    content = csv_file(7)
    request = upload(buckets, content, key="acme/b.csv")
    split_file(request, config=config(), s3=buckets)
    processed(ddb, content, "acme/a.csv", "v-other")
    resumed = split_file(
        {**request, "start_record": 3}, config=config(duplicate_files="skip"), s3=buckets, ddb=ddb
    )
    assert (resumed["duplicate_of"], chunks_of(resumed)) == (None, [1, 2])


def logs_adapter() -> Any:
    from lambdas.runtime import BoundLogger, get_logger

    return BoundLogger(get_logger("split"), {})


def test_a_file_split_again_after_chunk_size_changed_keeps_the_chunk_size_it_started_with(
    buckets, ddb, ledger_table
):
    """GIVEN file evt-1 started with chunks of 3 (pinned in the ledger by its first register
    invocation) and its chunk index expired WHEN it resumes at record 7 after chunk_size became 5
    THEN split cuts the same chunks of 3 again (chunk 2 holds record 7): the records keep their
    batches and keys."""
    from lambdas.contract import FileRef
    from lambdas.ledger import Ledger

    request = upload(buckets, csv_file(10))
    first = split_file(request, config=config(), s3=buckets, ddb=ddb)
    ledger = Ledger(ddb, LEDGER_TABLE, TENANT)
    ledger.claim(ledger.read(), FileRef(**{k: request[k] for k in FileRef.__annotations__}), "evt-1", 1.0)
    ledger.pin_settings("evt-1", 3, 1)
    for key in work_keys(buckets):
        buckets.delete_object(Bucket=WORK, Key=key)

    resumed = split_file({**request, "start_record": 7}, config=config(chunk_size=5), s3=buckets, ddb=ddb)

    assert (resumed["chunk_size"], resumed["first_chunk"]) == (3, 2)
    assert index_offsets(buckets, resumed) == index_offsets(buckets, first)
    fresh = split_file({**request, "event_id": "evt-2"}, config=config(chunk_size=5), s3=buckets, ddb=ddb)
    assert fresh["chunk_size"] == 5  # another file: the setting as it is now
