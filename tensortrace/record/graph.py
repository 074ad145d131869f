"""Walk an autograd graph into plain ``GraphNode`` records, in this process.

The walk itself (iterative, each node anchoring its next nodes so that freeing
a walked graph takes a bounded stack) is ``walk.py``'s; this module turns a
walk into records, with what each node saved for backward.

It also finds, for a backward that failed on a changed saved tensor, the
saved tensors themselves, so that the explanation names one of the
scenario's tensors only when identity proves it (``saved_suspects``).
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..trace import Graph, graph_nodes
from .saved import raw_saved, saved_records, saved_table
from .walk import (  # noqa: F401 - re-exported: the walk's names, where callers knew them
    ANCHOR,
    MAX_NODES,
    UNANCHORED,
    UNANCHORED_NODES,
    Walk,
    next_nodes,
    node_name,
    walk_nodes,
)


def walk_graph(
    tensor_name: str,
    grad_fn: Any,
    names_by_id: Dict[int, str],
    *,
    max_nodes: int = MAX_NODES,
    namer: Any = None,
) -> Graph:
    """The graph behind a tensor whose ``grad_fn`` is given (None: no graph).

    With ``namer`` (a ``saved.Namer``), each node also records what it saved for backward.
    """
    return graph_of(tensor_name, grad_fn, names_by_id, max_nodes=max_nodes, namer=namer)[0]


def graph_of(
    tensor_name: str,
    grad_fn: Any,
    names_by_id: Dict[int, str],
    *,
    max_nodes: int,
    namer: Any = None,
    reads: Optional[Dict[int, Any]] = None,
    walks: Optional[Dict[int, Walk]] = None,
) -> Tuple[Graph, bool]:
    """The graph behind ``grad_fn``, and whether its walk stopped at nodes that could not anchor.

    (That stop is ``UNANCHORED``.) With ``namer``, each node records what it
    saved (read once per node into ``reads``, when given).
    ``walks``, when given, keeps the walk under the root's id.
    """
    if grad_fn is None:
        return Graph(tensor=tensor_name, root=None), False
    walk = walk_nodes([grad_fn], max_nodes)
    if walks is not None:
        walks[id(grad_fn)] = walk
    order = walk.order
    names = _names(order)
    leaves = [
        _leaf_name(node, names_by_id) if name == "AccumulateGrad" else None
        for node, name in zip(order, names)
    ]
    saved = (
        saved_records(*saved_table(order, namer, reads)) if namer is not None else [()] * len(order)
    )
    nodes = graph_nodes(names, leaves, walk.nexts, saved)
    return Graph(
        tensor=tensor_name, root="N1", nodes=nodes, truncated=walk.truncated
    ), walk.unanchored


# A node's name per kind of node, where its Python type stands for one kind (PyTorch gives
# each generated kind its own type; kinds without one share "CppFunction", and those are
# asked each time).
_NAMES: Dict[type, str] = {}


def _names(order: Sequence[Any]) -> List[str]:
    names = []
    for node in order:
        cls = type(node)
        name = _NAMES.get(cls)
        if name is None:
            name = node_name(node)
            if name == cls.__name__:
                _NAMES[cls] = name
        names.append(name)
    return names


def _leaf_name(node: Any, names_by_id: Dict[int, str]) -> Optional[str]:
    variable = getattr(node, "variable", None)  # AccumulateGrad's leaf tensor
    if variable is None:
        return None
    return names_by_id.get(id(variable), "(unnamed leaf)")


# --- which tensors a failed backward had saved -----------------------------------


def saved_tensors_of_failed_backward(exc: BaseException, version: int) -> List[Any]:
    """The tensors saved in the graph a failed backward ran on, now at ``version``.

    PyTorch's "modified by an inplace operation" error describes the saved
    tensor only by shape, creator and versions, which many tensors may share.
    The roots of that backward are still alive in the locals of torch's own
    frames on the exception's traceback; walking their graph and reading each
    node's saved tensors (``_raw_saved_*``, which never raises for a changed
    version) gives the very objects, so the recorder can name one of the
    scenario's tensors only when identity proves it. Call only while the
    exception is alive; keep the result no longer than the step's snapshot.
    """
    roots = [fn for fn in (_grad_fn(t) for t in _backward_roots(exc)) if fn is not None]
    found: List[Any] = []
    for node in walk_nodes(roots, MAX_NODES).order:
        for saved in _raw_saved(node):
            try:
                data = saved.data
                if int(data._version) == version:
                    found.append(data)
            except Exception:  # released, or not a tensor: not a suspect
                continue
    return found


def _backward_roots(exc: BaseException) -> List[Any]:
    import torch

    roots: List[Any] = []
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if "/torch/autograd/" in filename:
            for value in list(tb.tb_frame.f_locals.values()):
                items = value if type(value) in (tuple, list) else (value,)
                roots.extend(v for v in items if isinstance(v, torch.Tensor))
        tb = tb.tb_next
    return roots


def _grad_fn(t: Any) -> Any:
    try:
        return t.grad_fn
    except Exception:
        return None


def _raw_saved(node: Any) -> List[Any]:
    """Every raw saved tensor of ``node``, the elements of a saved list one by one."""
    out: List[Any] = []
    for _, value, _ in raw_saved(node):
        out.extend(value if isinstance(value, (tuple, list)) else (value,))
    return out


_INPLACE_VERSIONS = re.compile(
    r"modified by an inplace operation.*?is at version (\d+); expected version \d+", re.DOTALL
)


def saved_suspects(exc: BaseException, message: str) -> Optional[List[Any]]:
    """For the saved-tensor error, the tensors its backward had saved at the reported version."""
    found = _INPLACE_VERSIONS.search(message[:8192])
    if found is None:
        return None
    try:
        return saved_tensors_of_failed_backward(exc, int(found.group(1))) or None
    except Exception:
        return None


def proven_names(
    suspects: Optional[List[Any]], objects: Dict[str, Any]
) -> Optional[Tuple[str, ...]]:
    """The names that identity proves are the changed saved tensor; None when that cannot be proved.

    None also when the saved tensors at the reported version lie on more
    than one storage: the message means one of them, and does not say which.

    A name qualifies when its object is a suspect, or lives on the very same
    storage object at the same place and version (a saved output comes back
    as a new tensor object on its storage, sharing its version counter).
    """
    import torch

    if not suspects:
        return None
    keys = {_place(s) for s in suspects} - {None}
    # saved tensors on several storages fit: PyTorch means one of them
    if len({key[0] for key in keys}) != 1:
        return None
    ids = {id(s) for s in suspects}
    return tuple(
        name
        for name, obj in objects.items()
        if isinstance(obj, torch.Tensor) and (id(obj) in ids or _place(obj) in keys)
    )


def view_family(suspects: Optional[List[Any]], objects: Dict[str, Any]) -> Tuple[str, ...]:
    """The names that share a version counter with the changed saved tensors.

    That is their view base and its other views (a saved ``w[:2]`` is a view of
    ``w``, and every write to ``w`` moves it).
    """
    import torch

    bases = []
    for s in suspects or ():
        try:
            bases.append(s._base if s._base is not None else s)
        except Exception:
            continue
    if not bases:
        return ()
    ids = {id(b) for b in bases}
    names = []
    for name, obj in objects.items():
        if not isinstance(obj, torch.Tensor):
            continue
        try:
            base = obj._base
        except Exception:
            continue
        if id(obj) in ids or (base is not None and id(base) in ids):
            names.append(name)
    return tuple(names)


def _place(t: Any) -> Optional[Tuple[int, int, Tuple[int, ...], Tuple[int, ...], int]]:
    try:
        return (
            int(t.untyped_storage()._cdata),
            int(t.storage_offset()),
            tuple(t.shape),
            tuple(t.stride()),
            int(t._version),
        )
    except Exception:
        return None
