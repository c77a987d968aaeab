"""How records are read, where chunks start, and how a record is identified (split writes the
index, register reads its chunk).

Records are never copied: Split writes a chunk index, one fixed-width entry per chunk (the byte
offset where its first record starts) plus the end of the data, and register reads entries `i`
and `i + 1`, then exactly those bytes of the same object version, with the same parser.
Offsets are record boundaries as the CSV parser sees them, so a quoted newline never splits a
record. A record's key is its object version and position in the file: the same on every retry
and resume, different between two uploads of the same bytes. Reads are bounded
(`READ_SIZE_BYTES`, `MAX_LINE_BYTES`), so memory stays flat whatever the file size.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import hashlib
import io
import json
import struct
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate, chain, repeat
from json.encoder import encode_basestring_ascii
from typing import Any

from lambdas.contract import MalformedFileError

READ_SIZE_BYTES = 64 * 1024
MAX_LINE_BYTES = 8 * 1024 * 1024
#: One entry of a chunk index: a byte offset, big-endian unsigned 64 bits. Fixed width, so
#: entry `i` is at `i * INDEX_ENTRY.size` and a chunk's range is one 16-byte ranged GET.
INDEX_ENTRY = struct.Struct(">Q")
#: Past this size the index is uploaded in parts of this size (S3's minimum part is 5 MiB);
#: Split never holds more than one part. 10M chunks make an 80 MB index: 10 parts.
INDEX_PART_BYTES = 8 * 1024 * 1024


def idempotency_key(bucket: str, key: str, version_id: str, record_index: int) -> str:
    """Key the core system deduplicates on: stable across retries, distinct per version and record."""
    return hashlib.sha256(f"{bucket}/{key}?versionId={version_id}#{record_index}".encode()).hexdigest()


class TextLines:
    """The body's lines decoded as UTF-8 (a leading BOM dropped, line endings kept), with the
    byte offset where each starts (in the body, plus `base`: where a ranged read began).

    Works a block (`READ_SIZE_BYTES` of complete lines) at a time: one decode and one split
    per block, not per line, which is most of Split's speed. A bad byte or an overlong line
    still fails at its own line, after every line before it was handed out (a parse error on
    an earlier line is reported first, as a line-by-line reader would).
    """

    def __init__(self, body: Any, *, base: int = 0) -> None:
        self._body = body
        self._base = base
        self._first = 0  # index (0-based) of the first line of the block being read
        self._starts = [base]  # where each line of that block starts, and where the next block does

    def offset_of(self, line_index: int) -> int:
        """Where line `line_index` (0-based, counted from the start of the body) starts: a line
        of the block being read, or the first line after it (the next one to be read)."""
        return self._starts[line_index - self._first]

    @property
    def end(self) -> int:
        """Once every line was read: where the data ends."""
        return self._starts[-1]

    @property
    def block_starts(self) -> list[int]:
        """Where each line of the block last handed out starts, and where the next block does."""
        return self._starts

    def __iter__(self) -> Iterator[str]:
        # Lines are handed out by C iterators (one StringIO per block): Python code runs once a
        # block, not once a line.
        return chain.from_iterable(_lines_of(text) for text in self.blocks())

    def blocks(self) -> Iterator[str]:
        """The text of each block of complete lines (`block_starts` tells where its lines start)."""
        lines_before, offset = 0, self._base
        pending: list[bytes] = []  # a line not finished by the last read
        pending_bytes = 0
        while True:
            data = self._body.read(READ_SIZE_BYTES)
            if data:
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # no line ends in this read
                    pending.append(data)
                    pending_bytes += len(data)
                    if pending_bytes > MAX_LINE_BYTES:
                        raise MalformedFileError(lines_before + 1, f"longer than {MAX_LINE_BYTES} bytes")
                    continue
                block = b"".join([*pending, data[:cut]])
                pending, pending_bytes = [data[cut:]], len(data) - cut
            elif pending_bytes:  # the last line, without a line ending
                block, pending, pending_bytes = b"".join(pending), [], 0
            else:
                return
            text, problem = self._block(block, lines_before, offset)
            yield text
            if problem is not None:
                raise problem
            lines_before += len(self._starts) - 1
            offset = self._starts[-1]

    def _block(self, block: bytes, lines_before: int, offset: int) -> tuple[str, MalformedFileError | None]:
        """The lines of one block of complete lines, and the problem found after them (if any);
        records where each line starts."""
        parts = block.split(b"\n")
        if not parts[-1]:
            parts.pop()  # the block ends with a line ending
        self._first = lines_before
        self._starts = list(accumulate((len(part) + 1 for part in parts), initial=offset))
        self._starts[-1] = offset + len(block)  # the last line may have no line ending
        problem: MalformedFileError | None = None
        if max(map(len, parts)) > MAX_LINE_BYTES:
            bad = next(i for i, part in enumerate(parts) if len(part) > MAX_LINE_BYTES)
            problem = MalformedFileError(lines_before + bad + 1, f"longer than {MAX_LINE_BYTES} bytes")
            block = b"".join(part + b"\n" for part in parts[:bad])
        at_file_start = lines_before == 0 and self._base == 0
        skip = len(codecs.BOM_UTF8) if at_file_start and block.startswith(codecs.BOM_UTF8) else 0
        try:
            text = block[skip:].decode("utf-8")
        except UnicodeDecodeError as error:
            at = skip + error.start
            line_start = block.rfind(b"\n", 0, at) + 1
            bad = block.count(b"\n", 0, at)
            problem = MalformedFileError(
                lines_before + bad + 1, f"invalid UTF-8 at byte {at - max(line_start, skip) + 1}"
            )
            text = block[skip:line_start].decode("utf-8")  # the lines before it are still handed out
        return text, problem


def _lines_of(text: str) -> Iterable[str]:
    """The lines of a block, line endings kept, split at LF only (a lone CR is data to csv)."""
    return io.StringIO(text, newline="\n")


def _quote_free_rows(text: str, width: int) -> list[str] | None:
    """The lines of a block if csv would read each as one record of `width` fields with no
    error (no quote, no NUL, no CR but in CRLF, no blank line, `width - 1` commas each, no
    line past the field size limit); else None, and the csv module reads the block."""
    if '"' in text or "\0" in text or text.count("\r") != text.count("\r\n"):
        return None
    rows = text.split("\n")
    if not rows[-1]:
        rows.pop()  # the block ends with a line ending
    if not rows or "" in rows or "\r" in rows or max(map(len, rows)) > csv.field_size_limit():
        return None
    if set(map(str.count, rows, repeat(",", len(rows)))) != {width - 1}:
        return None
    return rows


def _check_header(row: list[str]) -> list[str]:
    seen: set[str] = set()
    for position, name in enumerate(row, start=1):
        if not name:
            raise MalformedFileError(1, f"empty column name at position {position}")
        if name in seen:
            raise MalformedFileError(1, f"duplicate column name at position {position}")
        seen.add(name)
    return row


class CsvRecords:
    """The records of a CSV file as `(start offset, fields)`.

    Without `header` the first row is the header (checked, then kept in `header`); with it the
    lines are a chunk read from its offset. Blank lines are fine only at the end of the file.
    The csv module asks for one line at a time and stops at the end of a record, so the bytes
    consumed before a record is read are where it starts, quoted newlines or not.
    """

    def __init__(self, lines: TextLines, header: list[str] | None = None) -> None:
        self._lines = lines
        self.header = header
        self.count = 0

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        return self.scan(1)

    def scan(self, every: int) -> Iterator[tuple[int, list[str]]]:
        """Validate every record; yield `(start offset, fields)` of records 0, `every`,
        2 x `every`, ... (the first record of each chunk). `count` counts them all once the
        scan is over.

        A block that starts between records and has no quote (most blocks of most files) is
        checked as a whole (`_quote_free_rows`: what csv would find, in C-level passes);
        any other block goes through the csv module, which also names the line of a problem.
        """
        lines = self._lines
        blocks = lines.blocks()
        handoff: list[str] = []  # the block the driver gives the csv reader next
        lines_loaded = 0  # lines of the blocks taken so far
        quote_free_lines = 0  # lines read without the csv reader

        def reader_blocks() -> Iterator[Iterable[str]]:
            nonlocal lines_loaded
            while True:
                text = handoff.pop() if handoff else next(blocks, None)  # a record goes on past its block
                if text is None:
                    return
                lines_loaded += len(lines.block_starts) - 1
                yield _lines_of(text)

        reader = csv.reader(chain.from_iterable(reader_blocks()), strict=True)
        header = self.header
        width = len(header) if header else -1  # no row matches until the header is known
        first_blank: int | None = None
        count = offset = 0
        try:
            while True:
                consumed = reader.line_num + quote_free_lines
                if consumed == lines_loaded and header is not None and first_blank is None:
                    text = next(blocks, None)  # between records, between blocks
                    if text is None:
                        return
                    rows = _quote_free_rows(text, width)
                    if rows is None:
                        handoff.append(text)
                    else:
                        starts = lines.block_starts
                        for k in range(-count % every, len(rows), every):
                            yield starts[k], rows[k].removesuffix("\r").split(",")
                        count += len(rows)
                        quote_free_lines += len(rows)
                        lines_loaded += len(rows)
                        continue
                wanted = count % every == 0
                if wanted:  # before the read: a record that spans two blocks starts in the earlier one
                    offset = lines.offset_of(consumed)
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except csv.Error as error:
                    raise MalformedFileError(consumed + 1, f"invalid CSV ({error})") from None
                if len(row) == width and first_blank is None:
                    count += 1
                    if wanted:
                        yield offset, row
                    continue
                if not row:
                    first_blank = first_blank or consumed + 1
                    continue
                if header is None:
                    if first_blank is not None:
                        raise MalformedFileError(1, "empty header")
                    header = self.header = _check_header(row)
                    width = len(header)
                    continue
                if first_blank is not None:
                    raise MalformedFileError(first_blank, f"expected {width} fields, found 0")
                raise MalformedFileError(consumed + 1, f"expected {width} fields, found {len(row)}")
        finally:
            self.count = count


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def jsonl_records(lines: TextLines) -> Iterator[tuple[int, str]]:
    """Each non-blank line as `(start offset, text)`, validated as one JSON object.

    The text is passed on verbatim (stripped): numbers stay exact (no float round trip);
    NaN/Infinity are refused because they are not JSON and the core system could not parse them.
    """
    for index, text in enumerate(lines):
        text = text.strip()
        if not text:
            continue
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as error:
            problem = f"invalid JSON ({error.msg} at column {error.colno})"
            raise MalformedFileError(index + 1, problem) from None
        except (ValueError, RecursionError) as error:
            problem = str(error) if isinstance(error, ValueError) else "nested too deeply"
            raise MalformedFileError(index + 1, f"invalid JSON ({problem})") from None
        if not isinstance(value, dict):
            raise MalformedFileError(index + 1, "not a JSON object")
        yield lines.offset_of(index), text


def chunk_starts(
    fmt: str, lines: TextLines, chunk_size: int
) -> tuple[Iterator[int], Callable[[], int], CsvRecords | None]:
    """Validate every record of a whole file; where each chunk's first record starts, the
    number of records (once the offsets are all out), and for CSV the parser (its `header`)."""
    if fmt == "csv":
        records = CsvRecords(lines)
        return (offset for offset, _ in records.scan(chunk_size)), lambda: records.count, records
    count = 0

    def starts() -> Iterator[int]:
        nonlocal count
        for offset, _ in jsonl_records(lines):
            if count % chunk_size == 0:
                yield offset
            count += 1

    return starts(), lambda: count, None


def chunk_records(body: Any, fmt: str, header: list[str] | None, *, base: int) -> Iterator[tuple[int, bytes]]:
    """The records of one chunk read from its offset `base`, serialized as the core system gets
    them (JSON, UTF-8): jsonl lines verbatim, CSV rows as objects keyed by the header.
    Yields `(n, record)`, n counting from 1."""
    lines = TextLines(body, base=base)
    if fmt == "jsonl":
        for n, (_, text) in enumerate(jsonl_records(lines), start=1):
            yield n, text.encode("utf-8")
        return
    if not header:
        raise ValueError("a CSV chunk needs the file's header")
    encode = csv_record_encoder(header)
    for n, (_, row) in enumerate(CsvRecords(lines, header), start=1):
        yield n, encode(row)


def file_records(body: Any, fmt: str) -> Iterator[bytes]:
    """Every record of a whole file, in order, as the core system gets it (`chunk_records`'
    serialization; a CSV file's header is its first row). `MalformedFileError` at a bad record."""
    lines = TextLines(body)
    if fmt == "jsonl":
        for _, text in jsonl_records(lines):
            yield text.encode("utf-8")
        return
    records = CsvRecords(lines)
    encode: Callable[[list[str]], bytes] | None = None
    for _, row in records:
        if encode is None:
            assert records.header is not None
            encode = csv_record_encoder(records.header)
        yield encode(row)


def csv_record_encoder(header: list[str]) -> Callable[[list[str]], bytes]:
    """A CSV row (as wide as its header, whose names are unique: `CsvRecords` sees to both) as
    the object the core system gets: the bytes of `json.dumps(dict(zip(header, row)),
    separators=(",", ":"))`, from one format string per chunk: `json.dumps` with separators
    builds an encoder for every call, and encoding is most of the register function's CPU in
    batch mode."""
    template = (
        "{" + ",".join(encode_basestring_ascii(name).replace("%", "%%") + ":%s" for name in header) + "}"
    )
    return lambda row: (template % tuple(map(encode_basestring_ascii, row))).encode("ascii")


# --- the chunk index ---------------------------------------------------------------------


#: Index entries read at once by a warm register function: one ranged GET serves this many
#: chunks of a file (8 KiB), not one GET per chunk.
INDEX_BLOCK_ENTRIES = 1024


def index_block_range(block: int) -> str:
    """The HTTP Range of index block `block`: entries `block x INDEX_BLOCK_ENTRIES` up to and
    including the first entry of the next block (the block's last chunk's end). S3 returns
    what exists of a range that runs past the object's end."""
    first = block * INDEX_BLOCK_ENTRIES * INDEX_ENTRY.size
    return f"bytes={first}-{first + (INDEX_BLOCK_ENTRIES + 1) * INDEX_ENTRY.size - 1}"


def chunk_entries_from_block(block_bytes: bytes, chunk_index: int) -> bytes:
    """The two index entries of `chunk_index` out of its block (`index_block_range`)."""
    offset = (chunk_index % INDEX_BLOCK_ENTRIES) * INDEX_ENTRY.size
    return block_bytes[offset : offset + 2 * INDEX_ENTRY.size]


def chunk_byte_range(entries: bytes) -> tuple[int, int]:
    """`(start, end)` of a chunk from its two index entries (end exclusive)."""
    if len(entries) != 2 * INDEX_ENTRY.size:
        raise ValueError(f"expected two index entries ({2 * INDEX_ENTRY.size} bytes), got {len(entries)}")
    start, end = INDEX_ENTRY.unpack_from(entries, 0)[0], INDEX_ENTRY.unpack_from(entries, INDEX_ENTRY.size)[0]
    if end <= start:
        raise ValueError(f"index entries {start}..{end} do not make a chunk")
    return start, end


class IndexWriter:
    """Streams index entries to one S3 object: one PUT while it fits in a part, a multipart
    upload past that. Holds at most one part; nothing is visible until `close` (an aborted or
    failed split leaves no index; the bucket's lifecycle removes an incomplete upload)."""

    def __init__(self, s3: Any, bucket: str, key: str, part_bytes: int = INDEX_PART_BYTES) -> None:
        self._s3, self._bucket, self._key, self._part_bytes = s3, bucket, key, part_bytes
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self.entries = 0

    def add(self, offset: int) -> None:
        self._buffer += INDEX_ENTRY.pack(offset)
        self.entries += 1
        if len(self._buffer) >= self._part_bytes:
            self._upload_part()

    def _upload_part(self) -> None:
        if self._upload_id is None:
            self._upload_id = self._s3.create_multipart_upload(
                Bucket=self._bucket, Key=self._key, ContentType="application/octet-stream"
            )["UploadId"]
        number = len(self._parts) + 1
        etag = self._s3.upload_part(
            Bucket=self._bucket,
            Key=self._key,
            UploadId=self._upload_id,
            PartNumber=number,
            Body=bytes(self._buffer),
        )["ETag"]
        self._parts.append({"PartNumber": number, "ETag": etag})
        self._buffer = bytearray()

    def close(self) -> None:
        """Write what is left and make the index visible."""
        if self._upload_id is None:
            self._s3.put_object(
                Bucket=self._bucket,
                Key=self._key,
                Body=bytes(self._buffer),
                ContentType="application/octet-stream",
            )
            return
        if self._buffer:
            self._upload_part()
        self._s3.complete_multipart_upload(
            Bucket=self._bucket,
            Key=self._key,
            UploadId=self._upload_id,
            MultipartUpload={"Parts": self._parts},
        )

    def abort(self) -> None:
        """Give up an unfinished multipart upload (best effort: the lifecycle is the backstop)."""
        if self._upload_id is not None:
            with contextlib.suppress(Exception):
                self._s3.abort_multipart_upload(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id)
