"""The record parser and its byte offsets: whatever the read size, the same records start at
the same bytes and the same error names the same line (reads split lines, records and
multi-byte characters anywhere)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambdas import chunk_format
from lambdas.chunk_format import CsvRecords, TextLines, chunk_records, jsonl_records
from lambdas.contract import MalformedFileError

READ_SIZES = [1, 2, 3, 5, 7, 13, 64 * 1024]

CSV_FILES = {
    "bom-crlf-quoted-newlines": '\ufeffid,text\r\n1,"a\r\nb"\r\n2,"Zoë, ""q"""\r\n3,"x\ny\nz"\r\n4,end\r\n\r\n'.encode(),
    "no-final-newline": b'id,text\n1,a\n2,"b\nc"',
    "multi-byte": "id,text\n1,ééé\n2,😀😀\n3,ü\n".encode(),
}
BAD_CSV = {
    "utf8-after-a-bad-row": (b"id,t\n1,a\n2,b,c\n3,\xff\n", "line 3: expected 2 fields, found 3"),
    "utf8": (b"id,t\n1,a\n2,\xc3(\n", "line 3: invalid UTF-8 at byte 3"),
    "utf8-on-bom-line": (b"\xef\xbb\xbfi\xffd,t\n1,a\n", "line 1: invalid UTF-8 at byte 2"),
    "quote-never-closed": (b'id,t\n1,"a\n2,b\n', "line 2: invalid CSV (unexpected end of data)"),
}


def offsets_and_rows(
    content: bytes, read_size: int, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[int, list[str]]]:
    monkeypatch.setattr(chunk_format, "READ_SIZE_BYTES", read_size)
    return list(CsvRecords(TextLines(io.BytesIO(content))))


@pytest.mark.parametrize("name", CSV_FILES)
def test_csv_offsets_are_record_starts_whatever_the_read_size(name, monkeypatch):
    """GIVEN a CSV WHEN parsed with reads of 1 byte to 64 KiB THEN the same rows at the same offsets,
    and reading each record from its offset gives that record first."""
    content = CSV_FILES[name]
    expected = offsets_and_rows(content, 64 * 1024, monkeypatch)
    header = content.decode("utf-8-sig").split("\n", 1)[0].strip().split(",")
    for size in READ_SIZES:
        got = offsets_and_rows(content, size, monkeypatch)
        assert got == expected, size
        for offset, row in got:
            (_, first), *_ = chunk_records(io.BytesIO(content[offset:]), "csv", header, base=offset)
            assert first.decode() == __import__("json").dumps(dict(zip(header, row)), separators=(",", ":"))


def test_csv_offsets_of_a_known_file(monkeypatch):
    content = CSV_FILES["bom-crlf-quoted-newlines"]
    offsets = [offset for offset, _ in offsets_and_rows(content, 3, monkeypatch)]
    assert offsets == [content.index(b"\r\n%s," % n) + 2 for n in (b"1", b"2", b"3", b"4")]


@pytest.mark.parametrize("name", BAD_CSV)
def test_fails_at_the_same_line_whatever_the_read_size(name, monkeypatch):
    """GIVEN a malformed CSV WHEN parsed with any read size THEN the first problem in file order is
    reported, with its line (a bad byte later in the same read does not jump the queue)."""
    content, message = BAD_CSV[name]
    for size in READ_SIZES:
        monkeypatch.setattr(chunk_format, "READ_SIZE_BYTES", size)
        with pytest.raises(MalformedFileError) as raised:
            list(CsvRecords(TextLines(io.BytesIO(content))))
        assert str(raised.value) == message, size


def test_fails_when_a_line_is_longer_than_the_limit(monkeypatch):
    """GIVEN a line past MAX_LINE_BYTES (with and without a line ending in the same read)
    WHEN read THEN the error names it, after the lines before it were handed out."""
    monkeypatch.setattr(chunk_format, "MAX_LINE_BYTES", 10)
    for size in (4, 64 * 1024):
        monkeypatch.setattr(chunk_format, "READ_SIZE_BYTES", size)
        lines = TextLines(io.BytesIO(b"short\nlines\nthis line is too long\nok\n"))
        seen: list[str] = []
        with pytest.raises(MalformedFileError, match="^line 3: longer than 10 bytes$"):
            seen.extend(lines)
        assert seen == ["short\n", "lines\n"]


def test_a_line_of_exactly_the_limit_is_read_whatever_the_read_size(monkeypatch):
    """GIVEN a line of exactly MAX_LINE_BYTES WHEN read (in one read, or in reads that end
    exactly at the limit before its line ending) THEN it is a line like any other."""
    monkeypatch.setattr(chunk_format, "MAX_LINE_BYTES", 10)
    for size in (5, 10, 64 * 1024):
        monkeypatch.setattr(chunk_format, "READ_SIZE_BYTES", size)
        assert list(TextLines(io.BytesIO(b"0123456789\nok\n"))) == ["0123456789\n", "ok\n"], size
        with pytest.raises(MalformedFileError, match="^line 2: longer than 10 bytes$"):
            list(TextLines(io.BytesIO(b"0123456789\nthis line is too long\n")))


class CountingBody(io.BytesIO):
    """A body that counts the bytes read from it."""

    consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.consumed += len(data)
        return data


def test_a_line_without_an_end_is_refused_once_past_the_limit_not_at_the_end_of_the_body(monkeypatch):
    """GIVEN a body that is one line far longer than MAX_LINE_BYTES, no line ending anywhere
    WHEN read in small reads THEN it is refused as soon as the line passes the limit: what is
    held stays bounded, the rest of the body is never read."""
    monkeypatch.setattr(chunk_format, "MAX_LINE_BYTES", 10)
    monkeypatch.setattr(chunk_format, "READ_SIZE_BYTES", 4)
    body = CountingBody(b"x" * 1000)
    with pytest.raises(MalformedFileError, match="^line 1: longer than 10 bytes$"):
        list(TextLines(body))
    assert body.consumed <= 10 + 4


def test_invalid_utf8_after_a_blank_line_names_its_own_line_and_byte():
    """GIVEN a block that starts with a blank line WHEN the next line holds a bad byte THEN the
    error names line 2, byte 1."""
    with pytest.raises(MalformedFileError, match="^line 2: invalid UTF-8 at byte 1$"):
        list(TextLines(io.BytesIO(b"\n\xff\n")))


def test_a_jsonl_chunk_numbers_its_records_from_one():
    """Like a CSV chunk's: `(n, record)`, n counting from 1."""
    records = list(chunk_records(io.BytesIO(b'{"a":1}\n\n{"b":2}\n'), "jsonl", None, base=0))
    assert records == [(1, b'{"a":1}'), (2, b'{"b":2}')]


def test_index_entries_that_make_no_chunk_are_refused():
    """GIVEN two equal index entries (a damaged index) WHEN read as a chunk's range THEN refused:
    an empty range would make S3 answer with the whole object."""
    entries = chunk_format.INDEX_ENTRY.pack(100) * 2
    with pytest.raises(ValueError, match="index entries 100..100 do not make a chunk"):
        chunk_format.chunk_byte_range(entries)


def test_an_abort_that_fails_leaves_the_error_that_caused_it():
    """GIVEN a multipart index upload WHEN aborting it fails too THEN abort returns quietly (the
    bucket's lifecycle removes the upload), so the split's own error is the one raised."""

    class FailingAbort:
        aborts = 0

        def create_multipart_upload(self, **kwargs: Any) -> dict[str, str]:
            return {"UploadId": "upload-1"}

        def upload_part(self, **kwargs: Any) -> dict[str, str]:
            return {"ETag": "e"}

        def abort_multipart_upload(self, **kwargs: Any) -> None:
            self.aborts += 1
            raise RuntimeError("S3 is unreachable")

    s3 = FailingAbort()
    writer = chunk_format.IndexWriter(s3, "work", "index.bin", part_bytes=chunk_format.INDEX_ENTRY.size)
    for offset in range(3):  # past one part: a multipart upload is under way
        writer.add(offset)
    writer.abort()
    assert s3.aborts == 1


def test_jsonl_offsets_skip_blank_lines_whatever_the_read_size(monkeypatch):
    content = '{"a":1}\n\n  \n{"b":"é"}\r\n{"c":3}'.encode()
    expected = [(0, '{"a":1}'), (content.index(b'{"b"'), '{"b":"é"}'), (content.index(b'{"c"'), '{"c":3}')]
    for size in READ_SIZES:
        monkeypatch.setattr(chunk_format, "READ_SIZE_BYTES", size)
        assert list(jsonl_records(TextLines(io.BytesIO(content)))) == expected, size


def test_a_chunk_read_from_an_offset_keeps_a_leading_bom_like_character(monkeypatch):
    """Only the file's first line may lose a BOM: a record that starts with U+FEFF read from its
    offset keeps it (the same value Split validated)."""
    records: Any = list(chunk_records(io.BytesIO("\ufeffx,y\n".encode()), "csv", ["a", "b"], base=10))
    assert records == [(1, b'{"a":"\\ufeffx","b":"y"}')]


@pytest.mark.parametrize("every", [1, 2, 3, 7])
def test_a_scan_for_chunk_starts_yields_every_nth_record_and_counts_them_all(every, monkeypatch):
    """GIVEN a CSV with quoted newlines, a blank last line and reads of 1 byte to 64 KiB WHEN scanned for
    the starts of chunks of `every` records THEN it yields records 0, every, ... of the full parse
    at the same offsets, and counts every record."""
    base = CSV_FILES["bom-crlf-quoted-newlines"].removesuffix(b"\r\n")  # no blank line before the new records
    content = base + b"".join(b'%d,"x\r\ny"\r\n' % n for n in range(5, 20)) + b"\r\n"
    full = offsets_and_rows(content, 64 * 1024, monkeypatch)
    for size in READ_SIZES:
        monkeypatch.setattr(chunk_format, "READ_SIZE_BYTES", size)
        records = CsvRecords(TextLines(io.BytesIO(content)))
        assert list(records.scan(every)) == full[::every], size
        assert records.count == len(full) == 19


QUOTE_FREE_CASES = {
    "plain": b"id,t\n" + b"".join(b"%d,v%d\n" % (n, n) for n in range(40)),
    "crlf-no-final-newline": b"id,t\r\n" + b"\r\n".join(b"%d,v" % n for n in range(40)),
    "lone-cr-in-a-field": b"id,t\n" + b"".join(b"%d,v\n" % n for n in range(20)) + b"20,a\rb\n21,c\n",
    "blank-lines-at-the-end": b"id,t\n" + b"".join(b"%d,v\n" % n for n in range(30)) + b"\n\r\n\n",
    "blank-line-inside": b"id,t\n" + b"".join(b"%d,v\n" % n for n in range(30)) + b"\n31,v\n",
    "nul": b"id,t\n" + b"".join(b"%d,v\n" % n for n in range(30)) + b"30,a\0b\n",
    "one-column": b"id\n" + b"".join(b"%d\n" % n for n in range(30)) + b"x,y\n",
    "one-column-blank-line-inside": b"id\n" + b"".join(b"%d\n" % n for n in range(30)) + b"\n31\n",
    "one-column-crlf-blank-line-inside": b"id\r\n"
    + b"".join(b"%d\r\n" % n for n in range(30))
    + b"\r\n31\r\n",
    "too-few-fields-late": b"id,t,u\n" + b"".join(b"%d,v,w\n" % n for n in range(30)) + b"30,v\n",
    "field-past-the-limit": b"id,t\n"
    + b"".join(b"%d,v\n" % n for n in range(30))
    + b"30,"
    + b"x" * 300
    + b"\n",
}


def parse_all(content: bytes, every: int) -> tuple[list[tuple[int, list[str]]], int, str | None]:
    records = CsvRecords(TextLines(io.BytesIO(content)))
    got: list[tuple[int, list[str]]] = []
    try:
        got.extend(records.scan(every))
    except MalformedFileError as error:
        return got, records.count, str(error)
    return got, records.count, None


@pytest.mark.parametrize("name", QUOTE_FREE_CASES)
def test_quote_free_blocks_read_exactly_as_the_csv_module_reads_them(name, monkeypatch):
    """GIVEN quote-free CSVs, good and bad in the ways a block check could get wrong (a lone CR, NUL,
    blank lines, one column, a short row, a field past csv's size limit) WHEN scanned with the
    quote-free check and with the csv module alone, at many read sizes
    THEN the same records, offsets, count and error."""
    content = QUOTE_FREE_CASES[name]
    previous = csv.field_size_limit(256)  # the csv module's own limit, small enough to reach
    try:
        for size in READ_SIZES:
            monkeypatch.setattr(chunk_format, "READ_SIZE_BYTES", size)
            for every in (1, 4):
                fast = parse_all(content, every)
                with monkeypatch.context() as slow_only:
                    slow_only.setattr(chunk_format, "_quote_free_rows", lambda text, width: None)
                    slow = parse_all(content, every)
                assert fast == slow, (size, every)
    finally:
        csv.field_size_limit(previous)


def test_a_quote_free_block_is_read_without_the_csv_module(monkeypatch):
    """The check is taken (else the parity above proves nothing): a plain file's later blocks
    never reach the csv reader."""
    calls: list[str] = []
    real = chunk_format._quote_free_rows
    monkeypatch.setattr(
        chunk_format, "_quote_free_rows", lambda text, width: calls.append(text) or real(text, width)
    )
    monkeypatch.setattr(chunk_format, "READ_SIZE_BYTES", 16)
    _got, count, error = parse_all(QUOTE_FREE_CASES["plain"], 1)
    assert (count, error) == (40, None) and len(calls) > 10
    assert all(real(text, 2) is not None for text in calls)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data())
def test_a_csv_record_is_encoded_exactly_as_json_dumps_encodes_its_object(data):
    """Any header (unique, non-empty names) and any row of its width, whatever the characters
    (quotes, backslashes, control characters, %, non-ASCII, surrogate pairs): the record's bytes
    are those of `json.dumps(dict(zip(header, row)), separators=(",", ":"))`, keys in header order."""
    header = data.draw(st.lists(st.text(min_size=1), min_size=1, max_size=6, unique=True))
    row = data.draw(st.lists(st.text(), min_size=len(header), max_size=len(header)))
    expected = json.dumps(dict(zip(header, row)), separators=(",", ":")).encode("utf-8")
    assert chunk_format.csv_record_encoder(header)(row) == expected


def test_csv_records_of_a_chunk_are_its_rows_as_json_objects():
    body = '1,"Zoë, ""q""",100%\n2,"a\nb",\\\n'.encode()
    assert list(chunk_records(io.BytesIO(body), "csv", ["id", 'na"me', "%s"], base=0)) == [
        (1, b'{"id":"1","na\\"me":"Zo\\u00eb, \\"q\\"","%s":"100%"}'),
        (2, b'{"id":"2","na\\"me":"a\\nb","%s":"\\\\"}'),
    ]
