"""Pausing Python's cyclic garbage collector around bulk work that makes many objects and frees none.

Walking, reading, sending and writing a 100,000-node graph makes some hundreds
of thousands of container objects (records, tuples, lists) that all live
until the work is done. Each few hundred allocations start a collection, and
every tenth of those walks everything that survived so far, so the collector
alone can cost as much as the work. Nothing made meanwhile is garbage, so
collecting can wait until after; it then runs as it would have.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector off meanwhile (and on after, only if it was on before)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
