"""How records are read, stored in chunk files and identified (split writes, register reads).

A chunk file is JSON Lines: one record per line, UTF-8, `\\n`-terminated, at most the
chunk size of records. A record is identified to the core system by its object version and
its position in the file, so the key is the same on every retry and resume, and differs
between two uploads of the same bytes.

Reads are bounded: a body is read `READ_SIZE_BYTES` at a time and a physical line may not
exceed `MAX_LINE_BYTES`, so memory stays flat whatever the file size.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Iterator
from typing import Any

READ_SIZE_BYTES = 64 * 1024
MAX_LINE_BYTES = 8 * 1024 * 1024
CONTENT_TYPE = "application/x-ndjson"


def idempotency_key(bucket: str, key: str, version_id: str, record_index: int) -> str:
    """Key the core system deduplicates on: stable across retries, distinct per version and record."""
    return hashlib.sha256(f"{bucket}/{key}?versionId={version_id}#{record_index}".encode()).hexdigest()


def encode_chunk(lines: Iterable[str]) -> bytes:
    """The bytes of one chunk file holding `lines` (serialized records, no line endings)."""
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


class LineTooLongError(ValueError):
    """A physical line exceeds `MAX_LINE_BYTES`."""

    def __init__(self, line_number: int) -> None:
        super().__init__(f"line {line_number}: longer than {MAX_LINE_BYTES} bytes")
        self.line_number = line_number


class _RawBody(io.RawIOBase):
    """Raw-IO view of a botocore StreamingBody that only ever asks it for bounded reads."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._body.read(min(len(buffer), READ_SIZE_BYTES))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


def iter_lines(body: Any) -> Iterator[tuple[int, bytes]]:
    """Yield `(line_number, raw_line)` from a streaming body, 1-based, line ending kept.

    Lines are split on b"\\n" only, so a CRLF line keeps its "\\r\\n" (what `csv` wants).
    Decoding is left to the caller so an invalid UTF-8 byte can be reported with its line.
    """
    with io.BufferedReader(_RawBody(body), buffer_size=READ_SIZE_BYTES) as stream:
        line_number = 0
        while line := stream.readline(MAX_LINE_BYTES + 1):
            line_number += 1
            if len(line) > MAX_LINE_BYTES:
                raise LineTooLongError(line_number)
            yield line_number, line
