"""`patched`: an attribute replaced for the duration of a `with` block, then put back. Every
patch of moto for the local run (moto_sfn_patches.py, moto_delivery_patches.py) is made of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def patched(target: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, original)
