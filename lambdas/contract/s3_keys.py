"""Object keys as S3 events carry them, and what a key names.

S3 URL-encodes the key of an event notification; `s3_key_from_event` is the one decoder, applied
once when an event enters the system. `sequence_of` reads the sequence number a tenant ordered by
key sequence puts in its key names.
"""

from __future__ import annotations

import re
import urllib.parse

#: The characters S3 never encodes in the object key of an event notification (letters,
#: digits, `/`, `.`, `_`, `-`). A tenant prefix made of them reads the same encoded or not, so
#: the rule's prefix filter (matched on the encoded key) and IAM (on the real key) agree.
S3_EVENT_KEY_SAFE_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-")


def s3_key_from_event(raw: str) -> str:
    """The object key an S3 event announces: S3 URL-encodes it ("red flower.jpg" arrives as
    "red+flower.jpg", a literal "+" as "%2B", "=" as "%3D", UTF-8 bytes as %XX).

    The one decoder: the controller applies it once, when an event enters the system; every
    payload after that carries the real key. Same as powertools' `unquote_plus`.
    """
    return urllib.parse.unquote_plus(raw, encoding="utf-8", errors="strict")


def sequence_of(key: str, pattern: str) -> int | None:
    """The sequence number in an object key: the named group `seq` of `pattern` (or its only
    group, or the whole match) searched in the key. None if the key has none."""
    match = re.search(pattern, key)
    if match is None:
        return None
    groups = match.groupdict()
    text = groups["seq"] if "seq" in groups else (match.group(1) if match.re.groups else match.group(0))
    return int(text) if text and text.isascii() and text.isdigit() else None
