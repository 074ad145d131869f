"""Pausing Python's cyclic garbage collector around bulk work that frees nothing it makes.

Walking, reading, sending and writing a 100,000-node graph makes some hundreds
of thousands of container objects (records, tuples, lists) that all live
until the work is done. Each few hundred allocations start a collection, and
every tenth of those walks everything that survived so far, so the collector
alone can cost as much as the work. Nothing made meanwhile is garbage, so
collecting can wait until after; it then runs as it would have.

Importing is the same kind of work: a command's modules (typer, rich, the
renderers) are tens of thousands of objects that live until the process
exits. In the command line's own process (``own_process``, called by the
entry point before anything else), ``long_lived`` also moves them out of the
collector's sight afterwards (``gc.freeze``), so that no later collection,
nor the ones at exit, walks them again: about a tenth of a ``render``. In a
process that imports tensortrace as a library, the objects are the user's to
manage, and ``long_lived`` only pauses.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


_owned = False  # the command line's own process: what it imports lives until it exits


def own_process() -> None:
    """Mark this process as the command line's own.

    That is the ``tensortrace`` command, or ``python -m tensortrace``.
    """
    global _owned
    _owned = True


@contextmanager
def long_lived() -> Iterator[None]:
    """The collector off while making objects that live as long as the process (imports);
    in the command line's own process, those objects are frozen after (never walked again)."""
    with paused_gc():
        try:
            yield
        finally:
            if _owned:
                gc.freeze()


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
