"""Sample files for the demo: every record says which file and position it comes from, so the
verification can check order, duplicates and gaps from what the core system received."""

from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import dataclass

HEADER = ("file", "seq", "customer", "amount", "note")
NOTES = ("", "plain", "comma, inside", 'quote "inside"', "line one\nline two")


@dataclass(frozen=True)
class SampleFile:
    tenant: str
    name: str
    body: bytes
    records: int
    file_no: int


def record(file_no: int, seq: int, rng: random.Random) -> dict:
    return {
        "file": file_no,
        "seq": seq,
        "customer": f"C{rng.randrange(10_000):05d}",
        "amount": f"{rng.randrange(1, 1_000_000) / 100:.2f}",
        "note": NOTES[seq % len(NOTES)],
    }


def csv_body(file_no: int, records: int, rng: random.Random) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=HEADER, lineterminator="\r\n")
    writer.writeheader()
    for seq in range(records):
        writer.writerow(record(file_no, seq, rng))
    return out.getvalue().encode()


def jsonl_body(file_no: int, records: int, rng: random.Random) -> bytes:
    return "".join(json.dumps(record(file_no, seq, rng)) + "\n" for seq in range(records)).encode()


BODIES = {"csv": csv_body, "jsonl": jsonl_body}


def sample_files(
    tenant: str, fmt: str, *, files: int, records: int, big_records: int = 0, seed: int = 7
) -> list[SampleFile]:
    """``files`` files of varied sizes around ``records`` (the first one empty when there are
    several, to show that an empty file succeeds); if ``big_records``, the last one has that many."""
    rng = random.Random(f"{seed}-{tenant}")
    sizes = [max(1, int(records * factor)) for factor in (0.5, 1, 2, 0.1, 1.5)]
    out = []
    for file_no in range(files):
        count = sizes[file_no % len(sizes)]
        if big_records and file_no == files - 1:
            count = big_records
        extension = "csv" if fmt == "csv" else "jsonl"
        out.append(
            SampleFile(
                tenant=tenant,
                name=f"file-{file_no:03d}.{extension}",
                body=BODIES[fmt](file_no, count, rng),
                records=count,
                file_no=file_no,
            )
        )
    return out


def malformed(tenant: str, fmt: str, file_no: int, records: int, bad_line: int) -> SampleFile:
    """A file whose line ``bad_line`` (1-based, the header is line 1 for CSV) is broken."""
    rng = random.Random(file_no)
    lines = BODIES[fmt](file_no, records, rng).decode().replace("line one\nline two", "line one").splitlines()
    lines[bad_line - 1] = "this,line,is,broken" if fmt == "csv" else "{not json"
    body = ("\n".join(lines) + "\n").encode()
    return SampleFile(tenant, f"file-{file_no:03d}-malformed.{fmt}", body, 0, file_no)


def missing_field(sample: SampleFile, record: int) -> SampleFile:
    """``sample`` (a CSV file) with the last field of its record ``record`` (0-based) left out:
    a row with a missing field, which Split refuses (the whole file fails, nothing of it is
    sent). Same name: its correction is ``sample`` itself, uploaded under the same key."""
    rows = list(csv.reader(io.StringIO(sample.body.decode(), newline="")))
    rows[record + 1] = rows[record + 1][:-1]  # rows[0] is the header
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return SampleFile(sample.tenant, sample.name, out.getvalue().encode(), 0, sample.file_no)
