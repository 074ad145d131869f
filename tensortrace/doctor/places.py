"""Where in the user's own files something happened, and what the code called it.

A hook that PyTorch calls (a pack hook, a dispatch mode, a patched
``backward``) sits under the user's line, below frames of torch itself
(``nn.Module.__call__``, ``torch.nn.functional``), of this package, of the
standard library and of installed packages. ``user_frame`` walks out to the
innermost frame in a file of the user's own: inside ``nn.Module.forward``
that is the module's line. Whether a code object is the user's is decided once
per code object, so the walk costs a few dictionary probes.

Names come from what the frame itself holds (its locals, by identity or by
shared memory) and from the text of the line (``y.data``, the target of an
assignment). Reading source goes through ``linecache``, as tracebacks do.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import sys
import sysconfig
from types import CodeType, FrameType
from typing import Any, Dict, Optional, Tuple

import torch

from ..trace.doctor import Place

# (filename, line, function): what a hook keeps of a frame, made into a Place only for a report
Spot = Tuple[str, int, str]

_MAX_DEPTH = 200  # frames walked out of a hook before giving up


def _tool_dirs() -> Tuple[str, ...]:
    """Folders whose files are never the user's: torch, this package, the standard library,
    installed packages."""
    dirs = {os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(path)
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


_TOOLS = _tool_dirs()
_OWN: Dict[CodeType, bool] = {}  # code object -> in a file of the user's


def is_user_code(code: CodeType) -> bool:
    """True for code written in one of the user's files (not torch's, ours, the stdlib's)."""
    known = _OWN.get(code)
    if known is None:
        name = code.co_filename
        if name.startswith("<"):
            known = name in ("<stdin>", "<string>") or name.startswith("<ipython-input")
        else:
            path = os.path.realpath(name)
            known = not path.startswith(_TOOLS) and "site-packages" not in path
        _OWN[code] = known
    return known


def user_frame(frame: Optional[FrameType]) -> Optional[FrameType]:
    """The innermost frame, from ``frame`` outwards, that runs the user's own code."""
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        if is_user_code(frame.f_code):
            return frame
        frame = frame.f_back
        depth += 1
    return None


def spot_of(frame: Optional[FrameType]) -> Optional[Spot]:
    """The user's line that ``frame`` (a hook's caller) runs under, as a small tuple."""
    found = user_frame(frame)
    if found is None:
        return None
    return (found.f_code.co_filename, found.f_lineno, found.f_code.co_name)


def caller_spot(depth: int = 2) -> Optional[Spot]:
    """``spot_of`` the frame ``depth`` levels above the caller."""
    return spot_of(sys._getframe(depth))


def place(spot: Optional[Spot]) -> Optional[Place]:
    """The record of a spot, with the text of its line."""
    if spot is None:
        return None
    filename, line, function = spot
    return Place(
        path=_shown_path(filename),
        line=line,
        function=function,
        code=linecache.getline(filename, line).strip()[:200],
    )


def _shown_path(filename: str) -> str:
    """A path relative to the working directory when it is under it, as tracebacks show it."""
    if filename.startswith("<"):
        return filename
    try:
        relative = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if relative.startswith("..") else relative


def line_text(spot: Optional[Spot]) -> str:
    """The stripped source of a spot's line ('' when unknown)."""
    return "" if spot is None else linecache.getline(spot[0], spot[1]).strip()


def storage_key(t: Any) -> Optional[int]:
    """The address of the memory a tensor lives in (its views share it), or None."""
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


def name_in(frame: Optional[FrameType], t: Any, key: Optional[int]) -> Optional[str]:
    """What the code at ``frame`` calls the tensor ``t`` whose memory is ``key``.

    ``y`` for the very object; ``.data of y`` when the line reads ``y.data``;
    ``z (shares memory with y)`` for another local on the same memory.
    """
    if frame is None:
        return None
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    same, sharing = None, []
    for name, value in list(frame.f_locals.items()):
        if not isinstance(value, torch.Tensor) or name.startswith("__"):
            continue
        if value is t:
            same = name
        elif key is not None and storage_key(value) == key:
            sharing.append(name)
    for name in ([same] if same else []) + sharing:
        if re.search(rf"\b{re.escape(name)}\.data\b", text):
            return f".data of {name}"
    if same:
        return same
    for name in sharing:
        if re.search(rf"\b{re.escape(name)}\s*\[", text):
            return f"a view of {name} ({name}[...])"
    if sharing:
        return f"memory shared with {sharing[0]}"
    return None


def sharing_names(frame: Optional[FrameType], key: Optional[int]) -> Tuple[str, ...]:
    """Locals of ``frame`` whose tensors live in the memory ``key``."""
    if frame is None or key is None:
        return ()
    return tuple(
        name
        for name, value in list(frame.f_locals.items())
        if isinstance(value, torch.Tensor) and storage_key(value) == key
    )


def assigned_names(spot: Optional[Spot]) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """(names the statement at ``spot`` assigns, names its value reads); ((), ()) when unknown."""
    text = line_text(spot)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return (), ()
    if not tree.body:
        return (), ()
    stmt = tree.body[0]
    if isinstance(stmt, ast.Assign):
        targets = [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) and isinstance(stmt.target, ast.Name):
        targets = [stmt.target.id]
    else:
        return (), ()
    value = getattr(stmt, "value", None)
    reads = (
        []
        if value is None
        else [
            n.id for n in ast.walk(value) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        ]
    )
    return tuple(dict.fromkeys(targets)), tuple(dict.fromkeys(reads))
