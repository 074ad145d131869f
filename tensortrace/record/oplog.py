"""What the op log says of an operation beyond its arguments: the name of the call the user
made, and whether each result's storage existed before the operation began ("new" or not).

Pure functions over what ``ops.OpsRecorder`` collected; the recorder imports them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import msgspec
from torch.overrides import resolve_name


# What an operation needs of a tensor, taken while it runs: (id of the tensor, (its
# identity.mark, the mark's generation), storage key or None); the key is (device, address,
# bytes, weak reference to the storage, identity for addressless storages)
Grabbed = Tuple[int, Any, Optional[Tuple[Any, int, int, Any, Optional[int]]]]


class OpEntry(msgspec.Struct, gc=False):
    """One operation as the recorder collected it while the step ran; ``finish`` names it.

    ``ins`` and ``outs`` hold what was grabbed of each tensor (``ops.Grabbed``: its id, its
    mark and generation, its storage key); ``written`` the indexes in ``ins`` that the
    operation's schema writes; ``bumps`` ``(index in ins, version before, version after)``.
    Untracked by the collector: an entry refers to no object that refers back to it.
    """

    level: str  # "call" or "aten"
    what: Any  # the function called, or the ATen operation's ``ops._Plan``
    parent: Optional[int]  # for an ATen operation, the index of the call it ran under
    ins: List[Any]
    written: Sequence[int] = ()
    outs: List[Any] = []
    bumps: List[Tuple[int, Optional[int], Optional[int]]] = []
    # a call made inside a function the user's code called: (code object, instruction offset,
    # line) of the innermost frame of the user's code, whose expression ran it (``sites``)
    site: Any = None


_CALL_NAMES: Dict[Any, str] = {}


def call_name(func: Any) -> str:
    """``torch.Tensor.detach``, ``torch.Tensor.data.__get__``, ``torch.autograd.backward``."""
    try:
        known = _CALL_NAMES.get(func)
    except TypeError:  # unhashable
        known = None
    if known is not None:
        return known
    try:
        text = resolve_name(func)
    except Exception:
        text = None
    if not text:
        module = getattr(func, "__module__", None) or ""
        qual = (
            getattr(func, "__qualname__", None)
            or getattr(func, "__name__", None)
            or type(func).__name__
        )
        text = f"{module}.{qual}" if module else qual
        if (
            text.startswith("torch.autograd.") and text.count(".") > 2
        ):  # torch.autograd.__init__.backward
            text = "torch.autograd." + text.rsplit(".", 1)[-1]
    try:
        _CALL_NAMES[func] = text
    except TypeError:
        pass
    return text


def existed_before(
    fields: List[Dict[str, Any]], rows: List[Any], before: int
) -> List[Tuple[bool, ...]]:
    """Per operation, per result: whether its storage existed before the operation began.

    It did if the registry had labelled it before the step (``before``), or if an earlier
    operation of the step touched it: its inputs count from its own start, a call's results
    from the end of the ATen operations it ran, so a call's own allocation is new to it.
    """
    first: Dict[str, Tuple[int, int]] = {}  # label -> (index, 0: read or written; 1: a result)
    ends: Dict[int, int] = {}  # a call's index -> the index of the last ATen operation it ran
    for index, f in enumerate(fields):
        if f["parent"] is not None:
            ends[f["parent"]] = index
    for index, f in enumerate(fields):
        for label in rows[index][5]:  # what its own arguments live on
            first.setdefault(label, (index, 0))
        at = (ends.get(index, index), 1) if f["level"] == "call" else (index, 1)
        for label in f["outputs"]:
            if label is not None and first.get(label, at) > at:
                first[label] = at
    return [
        tuple(
            label is not None
            and (_number(label) <= before or first.get(label, (index, 1)) <= (index, 0))
            for label in f["outputs"]
        )
        for index, f in enumerate(fields)
    ]


def _number(label: str) -> int:
    """``S12`` → 12: the registry numbers labels in order of first sight."""
    try:
        return int(label[1:])
    except ValueError:
        return 1 << 62
