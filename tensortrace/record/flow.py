"""Record the gradients one backward call sends through its graph.

When a step calls ``.backward()``, ``torch.autograd.backward`` or
``torch.autograd.grad`` (``opmodes.CallMode`` sees the call), ``FlowRecorder.arm``
walks the graph from the call's roots and puts a pre-hook
(``Node.register_prehook``: the gradient arriving at the node, recorded even
when the node then raises) and a hook (``Node.register_hook``: the gradients
it sends on) on each of the first ``MAX_FLOW_NODES`` nodes; ``disarm``
removes every one of them when the call returns or raises. Each
``AccumulateGrad`` node's leaf has its ``.grad`` read before and after the
call. The hooks return None, so the gradients are
unchanged; nothing retains a grad, and a gradient's values are summarised in
the hook (``values.tensor_values``), never kept.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .modestack import user_modes_aside
from .walk import ANCHOR_PAST, anchor_all, next_nodes, node_key, node_name
from .identity import mark, storage_ref
from ..trace import Flow, FlowNode, Values, evolve
from .values import EXACT_LIMIT, tensor_values

MAX_FLOW_NODES = 200  # nodes recorded per backward call; the rest are counted
MAX_FLOWS = 20  # backward calls recorded per step; the rest are counted
MAX_COUNTED = 100_000  # nodes counted beyond those, at most

# the calls that run the engine
BACKWARD_CALLS = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)
_NOT_RECORDED = Values(kind="unavailable", reason="values not recorded")
_STRIDED = torch.strided
_FLOATS = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16})


def _small_values(g: Any) -> Optional[Values]:
    """The values of a small, plain, finite float gradient on the CPU, read directly.

    None: take the general path.

    A gradient is usually such a tensor, and this is what ``values.tensor_values``
    would record for it, without its checks for every other kind of tensor.
    """
    if (
        type(g) is not torch.Tensor
        or g.layout is not _STRIDED
        or g.device.type != "cpu"
        or g.dtype not in _FLOATS
    ):
        return None
    if g.dim() > 1 or g.numel() > EXACT_LIMIT:
        return None
    data = g.tolist()
    if g.dim() == 0:
        return Values(kind="exact", data=data) if math.isfinite(data) else None
    for x in data:
        if not math.isfinite(x):
            return None
    return Values(kind="exact", data=tuple(data))


_TRANSFORMED = (
    "a backward call inside a torch.func transform (grad, jacrev, vmap, hessian): its "
    "gradient flow is not recorded, since its tensors are wrappers without storage"
)
_peek_transform = torch._C._functorch.peek_interpreter_stack
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def _in_transform(args: Sequence[Any], kwargs: Dict[str, Any]) -> bool:
    """Whether a backward call runs inside a ``torch.func`` transform, or on its wrapped tensors.

    Hooks there would read wrapped gradients, which have no storage to read
    (PyTorch then refuses: "Cannot access data pointer"), so the call runs unwatched.
    """
    if _peek_transform() is not None:
        return True
    for a in list(args) + list(kwargs.values()):
        items = a if isinstance(a, (list, tuple)) else (a,)
        if any(isinstance(t, torch.Tensor) and _wrapped(t) for t in items):
            return True
    return False


def _frees(func: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> bool:
    """Whether a backward call frees the saved tensors of the nodes it runs: retain_graph
    (which defaults to create_graph) is false. ``Tensor.backward(self, gradient, retain_graph,
    create_graph)``, ``autograd.backward(tensors, grad_tensors, retain_graph, create_graph)``,
    ``autograd.grad(outputs, inputs, grad_outputs, retain_graph, create_graph)``."""
    at = 3 if func is BACKWARD_CALLS[2] else 2
    retain = kwargs.get("retain_graph", args[at] if len(args) > at else None)
    create = kwargs.get("create_graph", args[at + 1] if len(args) > at + 1 else False)
    return not (create if retain is None else retain)


MAX_FREED = 200_000  # nodes remembered as run by a freeing backward


def _carried(armed: Any, keys: List[Any], freed: Dict[Any, None]) -> Any:
    """(F, N) when this call stopped at a node F an earlier freeing backward ran, reached
    from a node N no such backward ran, and none of its roots was run by one: the graph was
    built, after that backward, on a tensor of the graph it freed (a state carried over)."""
    if any(keys[i] in freed for i in armed.roots):
        return None  # the same graph again: backward twice
    for at, entry in enumerate(armed.nodes):
        if entry.ran and not entry.done and keys[at] in freed:
            for before, other in enumerate(armed.nodes):
                if at in other.next and keys[before] not in freed:
                    return keys[at], keys[before]
    return None


def carrier_name(carried: Any, targets: Sequence[Tuple[str, Any]]) -> Optional[Tuple[str, bool]]:
    """The name to detach for a state carried over (``FlowRecorder.carried``): (a name bound
    to the carried tensor itself, True), else (the named tensor nearest above the node built
    on it, False); None when no name reaches it."""
    if carried is None:
        return None
    freed_key, built_key = carried
    best: Optional[Tuple[int, str]] = None
    for name, fn in targets:
        if node_key(fn) == freed_key:
            return name, True
        depth, level, seen = 0, [fn], {id(fn)}
        while level and len(seen) < 500 and (best is None or depth < best[0]):
            if any(node_key(node) == built_key for node in level):
                best = (depth, name)
                break
            depth += 1
            following = []
            for node in level:
                for nxt, _ in next_nodes(node):
                    if nxt is not None and id(nxt) not in seen:
                        seen.add(id(nxt))
                        following.append(nxt)
            level = following
    return (best[1], False) if best is not None else None


def is_backward(func: Any) -> bool:
    """Whether ``func`` is one of the calls that run the autograd engine."""
    return func is BACKWARD_CALLS[0] or func is BACKWARD_CALLS[1] or func is BACKWARD_CALLS[2]


def _roots(func: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
    first = (
        args[0]
        if args
        else kwargs.get("tensors" if func is BACKWARD_CALLS[1] else "outputs", kwargs.get("self"))
    )
    if isinstance(first, torch.Tensor):
        return [first]
    if isinstance(first, (list, tuple)):
        return [t for t in first if isinstance(t, torch.Tensor)]
    return []


class _Node:
    __slots__ = (
        "node",
        "name",
        "next",
        "grad_in",
        "grad_out",
        "ran",
        "done",
        "leaf",
        "before",
        "after",
    )

    def __init__(self, node: Any) -> None:
        self.node = node
        self.name = node_name(node)
        self.next: List[Optional[int]] = []
        self.grad_in: Tuple[Optional[Values], ...] = ()
        self.grad_out: Tuple[Optional[Values], ...] = ()
        self.ran = False
        self.done = False  # it returned: a node that raised (a stale saved tensor) freed nothing
        # (identity.mark, storage_ref) of an AccumulateGrad's leaf, never a weak reference to it
        self.leaf: Any = None
        self.before: Optional[Values] = None
        self.after: Optional[Values] = None


class _Armed:
    __slots__ = ("func", "nodes", "roots", "handles", "omitted", "notice", "frees")

    def __init__(self, func: Any, frees: bool = True) -> None:
        self.func = func
        self.frees = frees  # the call frees what its nodes saved (no retain_graph, no create_graph)
        self.nodes: List[_Node] = []
        self.roots: List[int] = []
        self.handles: List[Any] = []
        self.omitted = 0
        self.notice: Optional[str] = None


class FlowRecorder:
    """The backward calls of one step.

    ``owner.paused`` silences the op modes while a hook reads values.
    """

    def __init__(self, owner: Any, *, values: bool = True) -> None:
        self.owner = owner
        self.values = values
        self.calls: List[_Armed] = []
        self.skipped: List[Any] = []  # backward calls beyond MAX_FLOWS (their functions)
        # walk.node_key of a CopySlices node a freeing backward ran -> its name: PyTorch then
        # drops the node it wraps, whose saved tensors no attribute shows, and a second
        # backward raises
        shared = getattr(owner, "released", None)
        self.released: Dict[Tuple[int, str], str] = shared if shared is not None else {}
        # walk.node_key of every node a freeing backward ran (the run's, the newest kept)
        self.freed: Dict[Tuple[int, str], None] = {}
        # (the node that found its saved tensors freed, the node built on it after that) of a
        # backward that started from a graph built on a freed one: a state carried over
        self.carried: Optional[Tuple[Tuple[int, str], Tuple[int, str]]] = None

    def _summary(self, grads: Any) -> Tuple[Optional[Values], ...]:
        if not self.values:
            return tuple(None if g is None else _NOT_RECORDED for g in grads)
        quick = [_small_values(g) for g in grads]
        if all(q is not None or g is None for q, g in zip(quick, grads)):
            return tuple(quick)
        owner = self.owner
        paused, owner.paused = owner.paused, True
        try:  # no mode sees the reads: the user's would count them
            with (
                user_modes_aside(),
                warnings.catch_warnings(),
                torch._C.DisableTorchFunctionSubclass(),
            ):
                warnings.simplefilter("ignore")
                return tuple(None if g is None else tensor_values(g) for g in grads)
        finally:
            owner.paused = paused

    def _leaf_grad(self, variable: Any) -> Optional[Values]:
        try:
            with torch._C.DisableTorchFunctionSubclass():
                grad = variable.grad
        except Exception:
            return None
        return None if grad is None else self._summary((grad,))[0]

    def arm(self, func: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Optional[_Armed]:
        if len(self.calls) >= MAX_FLOWS:
            self.skipped.append(func)
            return None
        armed = _Armed(func, _frees(func, args, kwargs))
        self.calls.append(armed)
        if _in_transform(args, kwargs):
            armed.notice = _TRANSFORMED
            return armed
        try:
            # a subclass's __torch_function__ never sees these reads
            with torch._C.DisableTorchFunctionSubclass():
                self._walk(armed, _roots(func, args, kwargs))
        except Exception as exc:  # never let recording break the user's backward call
            self.disarm(armed)
            text = f"the gradient flow could not be recorded ({type(exc).__name__}: {exc})"
            armed.notice = text.splitlines()[0][:300]
        return armed

    def _walk(self, armed: _Armed, tensors: List[Any]) -> None:
        index: Dict[int, int] = {}
        for t in tensors:
            fn = t.grad_fn
            if fn is not None and id(fn) not in index:
                index[id(fn)] = len(armed.nodes)
                armed.roots.append(len(armed.nodes))
                armed.nodes.append(_Node(fn))
        at = 0
        beyond: Dict[int, Any] = {}
        while at < len(armed.nodes):
            entry = armed.nodes[at]
            at += 1
            # at most MAX_FLOW_NODES: short enough to free without anchors (walk.py)
            for nxt, _ in next_nodes(entry.node):
                if nxt is None:
                    entry.next.append(None)
                    continue
                k = index.get(id(nxt))
                if k is None and len(armed.nodes) < MAX_FLOW_NODES:
                    k = index[id(nxt)] = len(armed.nodes)
                    armed.nodes.append(_Node(nxt))
                elif k is None:
                    k = -1
                    beyond.setdefault(id(nxt), nxt)
                entry.next.append(k)
        for entry in armed.nodes:
            self._hook(armed, entry)
        armed.omitted = self._count(beyond, index, armed)
        if armed.omitted >= MAX_COUNTED:
            armed.notice = (
                f"the graph has more than {MAX_FLOW_NODES + MAX_COUNTED:,} nodes; "
                f"the first {MAX_FLOW_NODES} are recorded"
            )

    def _count(self, beyond: Dict[int, Any], index: Dict[int, int], armed: _Armed) -> int:
        """The nodes past the recorded ones; a walk past ``ANCHOR_PAST`` nodes anchors them
        all (``walk.py``: freeing them stays iterative)."""
        seen = set(beyond)
        stack = list(beyond.values())
        walked: List[Any] = []
        anchoring = False
        while stack and len(seen) < MAX_COUNTED:
            node = stack.pop()
            if not anchoring:
                walked.append(node)
                if len(walked) + len(index) > ANCHOR_PAST:
                    anchoring = True
                    anchor_all([entry.node for entry in armed.nodes] + walked)
                    walked = []
            for nxt, _ in next_nodes(node, anchor=anchoring):
                if nxt is not None and id(nxt) not in seen and id(nxt) not in index:
                    seen.add(id(nxt))
                    stack.append(nxt)
        return len(seen)

    def _hook(self, armed: _Armed, entry: _Node) -> None:
        node = entry.node
        variable = getattr(node, "variable", None) if entry.name == "AccumulateGrad" else None
        if isinstance(variable, torch.Tensor):
            entry.leaf = (mark(variable), storage_ref(variable))
            entry.before = self._leaf_grad(variable)

        def arrived(grad_outputs: Any) -> None:
            entry.ran = True
            entry.grad_in = self._summary(grad_outputs)

        def sent(grad_inputs: Any, grad_outputs: Any) -> None:
            entry.done = True
            entry.grad_out = self._summary(grad_inputs)

        armed.handles.append(node.register_prehook(arrived))
        armed.handles.append(node.register_hook(sent))

    def disarm(self, armed: _Armed) -> None:
        """Remove every hook of this call and read its leaves' grads; keep no node alive."""
        for handle in armed.handles:
            try:
                handle.remove()
            except Exception:
                pass
        armed.handles = []
        keys = [node_key(entry.node) for entry in armed.nodes]
        if self.carried is None:
            self.carried = _carried(armed, keys, self.freed)
        if armed.frees:
            for entry, key in zip(armed.nodes, keys):
                if entry.done:
                    self.freed[key] = None
            while len(self.freed) > MAX_FREED:
                del self.freed[next(iter(self.freed))]
        for entry in armed.nodes:
            variable = getattr(entry.node, "variable", None) if entry.leaf is not None else None
            if isinstance(variable, torch.Tensor):
                entry.after = self._leaf_grad(variable)
            if armed.frees and entry.done and entry.name.endswith("CopySlices"):
                self.released[node_key(entry.node)] = entry.name
            entry.node = None

    def finish(
        self, start: Dict[int, Tuple[str, Any]], end: Dict[int, Tuple[str, Any]], call_name: Any
    ) -> Tuple[Flow, ...]:
        """The step's backward calls as records.

        Leaves are named by the namespace, calls by ``call_name``.
        """
        if not self.calls:
            return ()
        if self.skipped:
            more = len(self.skipped)
            note = (
                f"{more:,} more backward call{'s' if more != 1 else ''} in this step; "
                f"the first {MAX_FLOWS} are recorded"
            )
            flows_more = [Flow(call=call_name(self.skipped[-1]), notice=note)]
        else:
            flows_more = []

        def leaf_name(ref: Any) -> Optional[str]:
            if ref is None:
                return None
            mark_, sref = ref
            for index in (end, start):  # a mark is an address: the storage tells live from dead
                hit = index.get(mark_)
                if hit is not None and (sref is None or hit[1] is None or hit[1] is sref):
                    return hit[0]
            return None

        flows = []
        for armed in self.calls:
            ids = [f"F{i + 1}" for i in range(len(armed.nodes))]
            nodes = tuple(
                FlowNode(
                    id=ids[i],
                    name=e.name,
                    next=tuple(None if k is None else ("" if k < 0 else ids[k]) for k in e.next),
                    grad_in=e.grad_in,
                    grad_out=e.grad_out,
                    ran=e.ran,
                    leaf=leaf_name(e.leaf),
                    leaf_grad_before=e.before,
                    leaf_grad_after=e.after,
                )
                for i, e in enumerate(armed.nodes)
            )
            flows.append(
                Flow(
                    call=call_name(armed.func),
                    roots=tuple(ids[i] for i in armed.roots),
                    nodes=nodes,
                    omitted=armed.omitted,
                    notice=armed.notice,
                )
            )
        self.calls, self.skipped = [], []
        return tuple(flows + flows_more)


def with_hook_notes(flows: Tuple[Flow, ...], objects: Dict[str, Any]) -> Tuple[Flow, ...]:
    """The flows, each saying which named tensors' hooks (``register_hook``) ran in it: a hook runs
    between what is sent to the node it feeds and what that node receives (its ``grad_in``)."""
    if not flows:
        return flows
    hooked = []
    for name, obj in objects.items():
        try:
            if isinstance(obj, torch.Tensor) and obj._backward_hooks:
                hooked.append((name, obj.is_leaf, obj.grad_fn))
        except Exception:
            continue
    if not hooked:
        return flows
    out = []
    for flow in flows:
        names = {n.name for n in flow.nodes}
        leaves = {n.leaf for n in flow.nodes if n.leaf is not None}
        ran = [
            f"`{name}`"
            for name, leaf, fn in hooked
            if (name in leaves if leaf else fn is not None and node_name(fn) in names)
        ]
        if ran:
            note = (
                f"{', '.join(ran)} {'has a hook' if len(ran) == 1 else 'have hooks'} "
                "(register_hook): a hook runs between the gradient sent to the node it feeds "
                "and what that node receives, so that node's grad_in is the hook's result, "
                "not what was sent"
            )
            flow = evolve(flow, notice=f"{flow.notice}; {note}" if flow.notice else note)
        out.append(flow)
    return tuple(out)


__all__ = ["BACKWARD_CALLS", "MAX_FLOW_NODES", "FlowRecorder", "is_backward", "with_hook_notes"]
