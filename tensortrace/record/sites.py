"""Which expression of the user's code a call ran under: ``opt.step()``, ``model(x)``.

The function mode sees the calls PyTorch dispatches, wherever they are made:
``Tensor.add_`` made by the user's ``x.add_(1)``, and ``Tensor.add_`` made by
``torch.optim.SGD.step`` for the user's ``opt.step()``. The second is not a call
the user wrote, so a step says ``opt.step()`` in its stead. ``call_site`` tells
the two apart while the call runs, from the Python frames above it: the frames
that dispatch it to the mode and the function's own body do not count; if the
next frame is the user's code, the user made the call; otherwise the innermost
frame of the user's code further up is running the expression the call is
made under, and its code object and instruction offset are kept (a few
attribute reads a call; no string is made while the step runs).

``SiteReader`` turns those into ``CallSite`` records after the step: the
instruction's source position (``co_positions``, Python 3.11 and later: the
exact expression; before, the whole line) cut from the code's source text.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch._compile
import torch._jit_internal
import torch.overrides

from ..trace import CallSite

# Frames PyTorch puts between a call and the mode that sees it.
_DISPATCH = frozenset(
    module.__file__ for module in (torch.overrides, torch._jit_internal, torch._compile)
)
# Safe mode's guards stand between the scenario's code and what it calls: not the code's frames.
_SANDBOX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sandbox", "")
MAX_SITE_TEXT = 200  # characters of an expression kept (on one line)

Site = Tuple[Any, int, Optional[int]]  # (code object, f_lasti, f_lineno)


def _own_codes(func: Any) -> Tuple[Any, ...]:
    """The code objects of ``func``'s own Python body (through ``functools.wraps``)."""
    codes = []
    seen = 0
    while func is not None and seen < 4:
        code = getattr(func, "__code__", None)
        if code is not None:
            codes.append(code)
        func = getattr(func, "__wrapped__", None)
        seen += 1
    return tuple(codes)


def call_site(frame: Any, func: Any, users: Callable[[Any], bool]) -> Optional[Site]:
    """Where the user's code ran ``func``, called from ``frame``: None when the user's code
    made the call itself (or no frame of it is running); else the innermost frame of the
    user's code, as (code, instruction offset, line), whose expression the call was made under.

    ``users`` says whether a code object is the user's code (a scenario's steps, the function
    ``snoop()`` traces).
    """
    own = _own_codes(func)
    f = frame
    while f is not None:
        code = f.f_code
        name = code.co_filename
        if name in _DISPATCH or code in own or name.startswith(_SANDBOX):
            f = f.f_back
            continue
        break
    if f is None or users(f.f_code):
        return None
    while f is not None and not users(f.f_code):
        f = f.f_back
    if f is None:
        return None
    return (f.f_code, f.f_lasti, f.f_lineno)


class SiteReader:
    """Turns the sites of a step's calls into ``CallSite`` records, each distinct one once.

    ``lines(filename)`` gives the source lines a code object was compiled from (None when
    unknown); ``place(filename, line)`` its line in the file the user reads.
    """

    def __init__(
        self,
        lines: Callable[[str], Optional[List[str]]],
        place: Callable[[str, int], Optional[int]] = lambda filename, line: line,
    ) -> None:
        self.lines = lines
        self.place = place
        self._positions: Dict[Any, List[Any]] = {}

    def records(self, sites: List[Optional[Site]]) -> Tuple[List[Optional[int]], List[CallSite]]:
        """Per call, the index of its site in the returned list (None: the code made it)."""
        found: Dict[Tuple[str, Optional[int]], int] = {}
        made: List[CallSite] = []
        indexes: List[Optional[int]] = []
        read: Dict[Tuple[int, int], Optional[Tuple[str, Optional[int]]]] = {}
        for site in sites:
            if site is None:
                indexes.append(None)
                continue
            key = (id(site[0]), site[1])
            if key not in read:
                read[key] = self._read(site)
            text = read[key]
            if text is None:
                indexes.append(None)
                continue
            at = found.get(text)
            if at is None:
                at = found[text] = len(made)
                made.append(CallSite(text=text[0], line=text[1]))
            indexes.append(at)
        return indexes, made

    def _read(self, site: Site) -> Optional[Tuple[str, Optional[int]]]:
        code, lasti, lineno = site
        source = self.lines(code.co_filename)
        if not source:
            return None
        start = end = lineno
        first = last = None
        positions = self._positions_of(code)
        if positions is not None and 0 <= lasti // 2 < len(positions):
            start, end, first, last = positions[lasti // 2]
        if start is None or not 1 <= start <= len(source):
            return None
        end = start if end is None or end < start or end > len(source) else end
        pieces = [line.rstrip("\n") for line in source[start - 1 : end]]
        if first is not None and last is not None:
            # columns count UTF-8 bytes
            encoded = [p.encode("utf-8") for p in pieces]
            encoded[-1] = encoded[-1][:last]
            encoded[0] = encoded[0][first:]
            pieces = [p.decode("utf-8", "replace") for p in encoded]
        text = " ".join(" ".join(p.split()) for p in pieces).strip()
        if not text:
            return None
        if len(text) > MAX_SITE_TEXT:
            text = text[: MAX_SITE_TEXT - 1] + "…"
        return text, self.place(code.co_filename, start)

    def _positions_of(self, code: Any) -> Optional[List[Any]]:
        if not hasattr(code, "co_positions"):  # before Python 3.11: the line
            return None
        known = self._positions.get(code)
        if known is None:
            known = self._positions[code] = list(code.co_positions())
        return known


__all__ = ["MAX_SITE_TEXT", "SiteReader", "call_site"]
