"""Walk an autograd graph into plain ``GraphNode`` records, iteratively.

The walk follows ``grad_fn.next_functions`` with an explicit stack, so a
100,000-node graph neither hits Python's recursion limit nor takes long. Node
objects are held only for the duration of the walk (identity by ``id`` is
only valid while they are alive) and dropped before returning.

Observing must not disturb: in PyTorch, once a Python object has been made
for an autograd node, it lives as long as the node, and freeing a long chain
of such nodes later recurses once per node and can overflow the C stack (a
crash the untraced program would not have). So only small graphs are walked
in this process; a larger one is walked in a forked copy of the process,
which sends the records back and exits without freeing anything.

It also finds, for a backward that failed on a changed saved tensor, the
saved tensors themselves, so that the explanation names one of the
scenario's tensors only when identity proves it (``saved_suspects``).
"""

from __future__ import annotations

import gc
import json
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .model import Graph, GraphNode
from .saved import saved_records, saved_table

MAX_NODES = 250_000
INLINE_NODES = 2_000  # a chain this long of node objects frees safely


def walk_graph(tensor_name: str, grad_fn: Any, names_by_id: Dict[int, str], *, max_nodes: int = MAX_NODES,
               namer: Any = None) -> Graph:
    """The graph behind a tensor whose ``grad_fn`` is given (None: no graph).

    With ``namer`` (a ``saved.Namer``), each node also records what it saved for backward.
    """
    graph = _walk(tensor_name, grad_fn, names_by_id, max_nodes=min(max_nodes, INLINE_NODES), namer=namer)
    if not graph.truncated or max_nodes <= INLINE_NODES:
        return graph
    try:
        walked = run_forked(lambda: _walk_plain(grad_fn, names_by_id, max_nodes, namer))
    except ForkRefused:  # safe mode's wall: walking on here could crash when the chain is freed later
        return graph  # the first INLINE_NODES nodes, marked truncated (``FORK_REFUSED`` says why)
    if walked is not None:
        return _assemble(tensor_name, walked)
    return _walk(tensor_name, grad_fn, names_by_id, max_nodes=max_nodes, namer=namer)


FORK_REFUSED = (
    "a graph of more than {n:,} nodes is drawn (and read for predictions) up to its first {n:,}: safe mode's wall "
    "forbids the separate process that walks a larger one without disturbing it; use --trust to draw it whole"
)


class ForkRefused(Exception):
    """The kernel refused the forked copy that walks a large graph (safe mode's wall)."""


def run_forked(work: Any) -> Any:
    """``work()``'s JSON-ready result, computed in a forked copy that exits without freeing; None if that failed.

    Raises ``ForkRefused`` where no new process may be made (safe mode's wall).
    """
    if not hasattr(os, "fork"):
        return None
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise ForkRefused(str(exc)) from None
    if pid == 0:  # pragma: no cover - runs in the forked copy
        try:
            gc.disable()  # nothing here is freed anyway; collecting would only cost time
            os.close(read_fd)
            data = json.dumps(work()).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view):]
        finally:
            os._exit(0)  # leave without freeing the nodes this copy touched
    os.close(write_fd)
    chunks = []
    with os.fdopen(read_fd, "rb") as pipe:
        while True:
            chunk = pipe.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if status != 0 or not chunks:
        return None
    return json.loads(b"".join(chunks))


def walk_nodes(roots: Sequence[Any], max_nodes: int) -> Tuple[List[Any], List[List[int]], List[int], bool]:
    """Every node reachable from ``roots``, iteratively, each once however many paths reach it.

    Returns the nodes in walk order (the list also keeps them alive, so their
    ids stay unique), each node's ``next_functions`` as indexes into it, each
    root's index (-1: beyond ``max_nodes``), and whether ``max_nodes`` cut the walk.
    """
    index: Dict[int, int] = {}
    order: List[Any] = []
    nexts: List[List[int]] = []
    truncated = False
    root_at: List[int] = []
    for root in roots:
        at = index.get(id(root))
        if at is None:
            if len(order) >= max_nodes:
                truncated = True
                root_at.append(-1)
                continue
            at = index[id(root)] = len(order)
            order.append(root)
            nexts.append([])
            stack = [root]
            while stack:
                node = stack.pop()
                children = nexts[index[id(node)]]
                for nxt, _ in getattr(node, "next_functions", ()) or ():
                    if nxt is None:
                        continue
                    j = index.get(id(nxt))
                    if j is None:
                        if len(order) >= max_nodes:
                            truncated = True
                            continue
                        j = index[id(nxt)] = len(order)
                        order.append(nxt)
                        nexts.append([])
                        stack.append(nxt)
                    children.append(j)
        root_at.append(at)
    return order, nexts, root_at, truncated


def _walk(tensor_name: str, grad_fn: Any, names_by_id: Dict[int, str], *, max_nodes: int, namer: Any = None,
          reads: Optional[Dict[int, Any]] = None) -> Graph:
    if grad_fn is None:
        return Graph(tensor=tensor_name, root=None)
    return _assemble(tensor_name, _walk_plain(grad_fn, names_by_id, max_nodes, namer, reads))


def _walk_plain(grad_fn: Any, names_by_id: Dict[int, str], max_nodes: int, namer: Any = None,
                reads: Optional[Dict[int, Any]] = None) -> Dict[str, Any]:
    """The graph as parallel lists indexed by walk order (cheap to send as JSON)."""
    order, nexts, _, truncated = walk_nodes([grad_fn], max_nodes)
    names = [node_name(node) for node in order]
    leaves = [_leaf_name(node, names_by_id) if name == "AccumulateGrad" else None for node, name in zip(order, names)]
    plain = {"names": names, "leaves": leaves, "next": nexts, "truncated": truncated}
    if namer is not None:
        plain["saved_table"], plain["saved"] = saved_table(order, namer, reads)
    return plain


def _assemble(tensor_name: str, plain: Dict[str, Any]) -> Graph:
    saved = saved_records(plain.get("saved_table"), plain.get("saved")) or [()] * len(plain["names"])
    nodes = tuple(
        GraphNode(id=f"N{i + 1}", name=name, leaf=leaf, next=tuple(f"N{j + 1}" for j in nxt), saved=kept)
        for i, (name, leaf, nxt, kept) in enumerate(zip(plain["names"], plain["leaves"], plain["next"], saved))
    )
    return Graph(tensor=tensor_name, root="N1", nodes=nodes, truncated=bool(plain["truncated"]))


def node_name(node: Any) -> str:
    """A grad_fn's name as users see it: "CopyBackwards", not "torch::autograd::CopyBackwards"."""
    try:
        name = str(node.name())
    except Exception:
        name = type(node).__name__
    return name.rsplit("::", 1)[-1]  # "torch::autograd::AccumulateGrad" → "AccumulateGrad"


def _leaf_name(node: Any, names_by_id: Dict[int, str]) -> Optional[str]:
    variable = getattr(node, "variable", None)  # AccumulateGrad's leaf tensor
    if variable is None:
        return None
    return names_by_id.get(id(variable), "(unnamed leaf)")


# --- which tensors a failed backward had saved -----------------------------------

SUSPECT_NODES = INLINE_NODES  # nodes searched for saved tensors (a chain this long frees safely)


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
    roots = _backward_roots(exc)
    found: List[Any] = []
    seen: Dict[int, Any] = {}
    stack = [fn for fn in (_grad_fn(t) for t in roots) if fn is not None]
    while stack and len(seen) < SUSPECT_NODES:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        for saved in _raw_saved(node):
            try:
                data = saved.data
                if int(data._version) == version:
                    found.append(data)
            except Exception:  # released, or not a tensor: not a suspect
                continue
        for nxt, _ in getattr(node, "next_functions", ()) or ():
            if nxt is not None and id(nxt) not in seen:
                stack.append(nxt)
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
    out: List[Any] = []
    for attr in dir(node):
        if not attr.startswith("_raw_saved_"):
            continue
        try:
            value = getattr(node, attr)
        except Exception:
            continue
        out.extend(value if isinstance(value, (tuple, list)) else (value,))
    return out


_INPLACE_VERSIONS = re.compile(r"modified by an inplace operation.*?is at version (\d+); expected version \d+", re.DOTALL)


def saved_suspects(exc: BaseException, message: str) -> Optional[List[Any]]:
    """For the saved-tensor error, the tensors its backward had saved at the reported version."""
    found = _INPLACE_VERSIONS.search(message[:8192])
    if found is None:
        return None
    try:
        return saved_tensors_of_failed_backward(exc, int(found.group(1))) or None
    except Exception:
        return None


def proven_names(suspects: Optional[List[Any]], objects: Dict[str, Any]) -> Optional[Tuple[str, ...]]:
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
    if len({key[0] for key in keys}) != 1:  # saved tensors on several storages fit: PyTorch means one of them
        return None
    ids = {id(s) for s in suspects}
    return tuple(
        name for name, obj in objects.items()
        if isinstance(obj, torch.Tensor) and (id(obj) in ids or _place(obj) in keys)
    )


def _place(t: Any) -> Optional[Tuple[int, int, Tuple[int, ...], Tuple[int, ...], int]]:
    try:
        return (int(t.untyped_storage()._cdata), int(t.storage_offset()), tuple(t.shape), tuple(t.stride()), int(t._version))
    except Exception:
        return None
