"""Turn what the recorder saw into report records: a failed backward, a silent change.

``diagnose`` runs inside the failing backward call, while the graph and the
caller's frame still exist, and reads three errors PyTorch raises:

* "modified by an inplace operation": the saved tensor the unpack hook found
  stale, the line that saved it, every write into its memory since, and the
  fix that fits the write;
* "backward through the graph a second time": walking the failing graph from
  its roots, the first node older than an earlier backward (one without
  ``retain_graph``) is where the old graph begins; the saved tensor of the new
  graph that links to it is the carrier, and the line that used it says its
  name (``h = torch.tanh(x @ W + h @ U)`` carries ``h``);
* "does not require grad": the cuts (``detach()``, ``.data``, ``no_grad``,
  ``.numpy()``) the user's code made since the previous backward, nearest first.
"""

from __future__ import annotations

import linecache
import re
from collections import deque
from typing import Any, Dict, List, Optional, Tuple

import torch

from .places import assigned_names, place
from .messages import node_name
from ..trace.doctor import Cut, Failure, Place, Saved, Silent, Write

MAX_NODES = 100_000  # graph nodes walked to find where an old graph begins, or the leaves

_INPLACE = "modified by an inplace operation"
_TWICE = "backward through the graph a second time"
_NO_GRAD = "does not require grad and does not have a grad_fn"
_ALLOW = (
    "or, to keep the write, run forward and backward inside "
    "`with torch.autograd.graph.allow_mutation_on_saved_tensors():` (it saves a copy when "
    "a saved tensor is written)"
)


def diagnose(rec: Any, exc: BaseException, call: Any, roots: Any, frame: Any) -> Optional[Failure]:
    """The report of a failed backward, or None for an error this does not read."""
    text = str(exc)
    if _INPLACE in text and rec.stale is not None:
        return _modified(rec, text, call, frame)
    if _TWICE in text:
        return _freed(rec, text, call, _tensors(roots), frame)
    if _NO_GRAD in text:
        return _no_grad(rec, text, call, _tensors(roots), frame)
    return None


def _first(text: str) -> str:
    return text.splitlines()[0][:600] if text else ""


def _tensors(roots: Any) -> List[Any]:
    if isinstance(roots, torch.Tensor):
        return [roots]
    if isinstance(roots, (list, tuple)):
        return [t for t in roots if isinstance(t, torch.Tensor)]
    return []


def _where(spot: Any) -> str:
    p = place(spot)
    return "an unknown line" if p is None else f"{p.path}:{p.line}"


def _identity_name(frame: Any, t: Any) -> Optional[str]:
    if frame is None or t is None:
        return None
    for name, value in list(frame.f_locals.items()):
        if value is t:
            return name
    return None


def saved_name(saved: Any, frame: Any) -> Optional[str]:
    """What the code called a saved tensor: a local holding it, or the target of the line that
    made it (a saved output)."""
    name = _identity_name(frame, saved.original())
    if name:
        return name
    if saved.is_output:
        targets, _ = assigned_names(saved.spot)
        if len(targets) == 1:
            return targets[0]
    for write in saved.writes:
        if write.alias and write.alias.isidentifier():
            return write.alias
    return None


def saved_record(saved: Any, frame: Any, node: Optional[str]) -> Saved:
    t = saved.tensor
    return Saved(
        name=saved_name(saved, frame),
        node=node,
        shape=tuple(t.shape),
        dtype=str(t.dtype).replace("torch.", ""),
        place=place(saved.spot),
        version=saved.version,
    )


def _write(w: Any) -> Write:
    return Write(op=w.op, place=place(w.spot), alias=w.alias, version=w.version)


# --- modified in place ---------------------------------------------------------------


def _modified(rec: Any, text: str, call: Any, frame: Any) -> Failure:
    saved, now, node = rec.stale
    record = saved_record(saved, frame, node or node_name(saved))
    writes = tuple(_write(w) for w in saved.writes)
    name = record.name or "a saved tensor"
    at = "" if record.place is None else f" at line {record.place.line}"
    if writes:
        first = writes[0]
        where = _at(first.place)
        alias = first.alias or name
        if alias != name and alias.isidentifier():
            alias = f"{alias} (memory shared with {name})"
        headline = (
            f"{where}: {alias} is changed in place ({first.op}) after "
            f"{record.node or 'autograd'} saved {name}{at} for backward"
        )
    else:
        headline = (
            f"{_where(saved.spot)}: {name}, saved here for backward, was changed in place "
            f"(version {saved.version} -> {now}) by a write the watch did not see"
        )
    return Failure(
        kind="modified-in-place",
        headline=headline,
        error=_first(text),
        backward=place(call.spot),
        saved=record,
        writes=writes,
        fixes=_inplace_fixes(saved, record, writes, _detach_line(rec, record.name)),
    )


def _detach_line(rec: Any, name: Optional[str]) -> Optional[Place]:
    """The latest line of the code's that made a detached alias of ``name`` (``z = y.detach()``)."""
    if not name:
        return None
    for kind, spot, _, _ in reversed(rec.cuts):
        found = place(spot)
        if (
            kind in ("detach()", ".data")
            and found is not None
            and re.search(rf"\b{re.escape(name)}\.(detach\(\)|data\b)", found.code)
        ):
            return found
    return None


def _inplace_fixes(
    saved: Any, record: Saved, writes: Tuple[Write, ...], detached: Optional[Place]
) -> Tuple[str, ...]:
    fixes: List[str] = []
    name = record.name or "the tensor"
    for w, seen in zip(writes, saved.writes):
        if w.place is None:
            continue
        line = w.place.line
        if seen.via and ("torch/nn/" in seen.via or "torch\\nn\\" in seen.via):
            built = _inplace_true_lines(w.place.path, record.place)
            where = f" ({', '.join(built)})" if built else ""
            fixes.append(
                f"line {line} runs a module or function built with inplace=True{where}: "
                "build it with inplace=False, e.g. nn.ReLU(inplace=False)"
            )
        elif w.alias and (
            w.alias.startswith(".data") or w.alias.startswith("memory shared") or w.alias != name
        ):
            hint = _clone_hint(w, name)
            if detached is not None:
                cloned = re.sub(
                    r"\.detach\(\)|\.data\b",
                    lambda m: m.group(0) + ".clone()",
                    re.sub(r"\s+#.*$", "", detached.code),
                    count=1,
                )
                hint = f"line {detached.line}: {cloned}"
            fixes.append(
                f"line {line} writes into {w.alias}, which shares memory with {name}: "
                f"clone() before writing (e.g. `{hint}`)"
            )
        else:
            rewrite = out_of_place(w.place.code)
            hint = f": `{rewrite}`" if rewrite else ""
            fixes.append(f"line {line}: write it out of place{hint}")
        break
    fixes.append(f"or clone {name} before the write, so that backward keeps the saved value")
    fixes.append(_ALLOW)
    return tuple(fixes)


def _clone_hint(w: Write, name: str) -> str:
    code = w.place.code if w.place else ""
    found = re.search(r"(\w+)\s*=\s*(.+?)\.detach\(\)\s*$", code)
    if found:
        return f"{found.group(1)} = {found.group(2)}.detach().clone()"
    if w.alias and w.alias.isidentifier():
        return f"{w.alias} = {w.alias}.clone()"
    return f"{name} = {name}.clone()"


def out_of_place(code: str) -> Optional[str]:
    """``h.relu_()`` -> ``h = h.relu()``; ``x += y`` -> ``x = x + y``; None when not that simple."""
    found = re.fullmatch(r"([A-Za-z_][\w.]*)\.(\w+)_\((.*)\)", code.strip())
    if found:
        target, method, rest = found.groups()
        return f"{target} = {target}.{method}({rest})"
    found = re.fullmatch(r"([A-Za-z_][\w.]*)\s*([-+*/@])=\s*(.+)", code.strip())
    if found:
        target, op, rest = found.groups()
        return f"{target} = {target} {op} {rest}"
    return None


def _inplace_true_lines(path: str, saved_place: Any) -> List[str]:
    """``path:line`` of the lines in the user's files involved that pass ``inplace=True``."""
    paths = [path] + ([saved_place.path] if saved_place is not None else [])
    found = []
    for name in dict.fromkeys(paths):
        for number, text in enumerate(linecache.getlines(name), 1):
            if re.search(r"inplace\s*=\s*True", text):
                found.append(f"{name}:{number}")
    return found[:4]


# --- freed graph -----------------------------------------------------------------------


def _freed(rec: Any, text: str, call: Any, roots: List[Any], frame: Any) -> Failure:
    earlier = [c for c in rec.calls if c.index < call.index and not c.retain]
    parent, old = _old_edge(roots, max((c.mark for c in earlier), default=-1))
    seq = None if old is None else old._sequence_nr()
    freer = next((c for c in earlier if seq is not None and c.mark > seq), None)
    freed_by = None if freer is None else place(freer.spot)
    carrier, carried = _carrier(rec, old, roots, frame)
    backward = place(call.spot)
    fixes: List[str] = []
    if carrier and carried is not None and backward is not None:
        fixes.append(
            f"detach {carrier} before the new graph uses it: "
            f"`{carrier} = {carrier}.detach()` "
            f"before line {carried.line} (each iteration then has its own graph)"
        )
        where = f"{carried.path}:{carried.line}"
        headline = (
            f"{where}: {carrier} still carries the graph that the backward at "
            f"{_short(freed_by, carried, backward)} freed; detach it "
            f"(`{carrier} = {carrier}.detach()`) before this line"
        )
    else:
        headline = (
            f"{_at(backward)}: this backward runs through a graph that the backward at "
            f"{_short(freed_by, backward, backward)} already freed"
        )
    first = "the first backward" if freed_by is None else f"the backward at line {freed_by.line}"
    fixes.append(
        f"or, if both backward calls are meant to go through the same graph, pass "
        f"retain_graph=True to {first}"
    )
    return Failure(
        kind="freed-graph",
        headline=headline,
        error=_first(text),
        backward=backward,
        freed_by=freed_by,
        carrier=carrier,
        carried_at=carried,
        fixes=tuple(fixes),
    )


def _short(p: Any, here: Any, backward: Any) -> str:
    """``line N`` in the same file as ``here``, else ``path:line``; noting an earlier run of the
    failing backward's own line (a loop)."""
    if p is None:
        return "an earlier line"
    text = f"line {p.line}" if here is not None and here.path == p.path else f"{p.path}:{p.line}"
    if backward is not None and (backward.path, backward.line) == (p.path, p.line):
        text += " (its run in an earlier iteration)"
    return text


def _at(p: Any) -> str:
    return "an earlier line" if p is None else f"{p.path}:{p.line}"


def _old_edge(roots: List[Any], mark: int) -> Tuple[Any, Any]:
    """(the newer node, the first node older than ``mark`` it links to), walking from the roots."""
    todo: deque = deque((None, t.grad_fn) for t in roots if t.grad_fn is not None)
    seen = set()
    while todo and len(seen) < MAX_NODES:
        parent, node = todo.popleft()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        try:
            if node._sequence_nr() < mark and type(node).__name__ != "AccumulateGrad":
                return parent, node
        except RuntimeError:
            continue
        todo.extend((node, child) for child, _ in node.next_functions)
    return None, None


def _carrier(rec: Any, old: Any, roots: List[Any], frame: Any) -> Tuple[Optional[str], Any]:
    """The name of the tensor that links the new graph to ``old``, and the line that used it."""
    if old is None:
        return None, None
    for root in roots:
        if root.grad_fn is old:
            return _identity_name(frame, root), place(_spot_of_frame(frame))
    # the node that links to the old graph ran just before the failure, and released what it
    # saved: the recorder notes which node each input the running backward read came from
    seq = old._sequence_nr()
    for node_seq, spot in reversed(rec.unpacked):
        if node_seq != seq:
            continue
        targets, reads = assigned_names(spot)
        carried = [n for n in reads if n in targets]
        return (carried[0] if carried else None), place(spot)
    return None, None


def _spot_of_frame(frame: Any) -> Any:
    if frame is None:
        return None
    return (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


# --- does not require grad ----------------------------------------------------------


def _no_grad(rec: Any, text: str, call: Any, roots: List[Any], frame: Any) -> Failure:
    recent = [c for c in rec.cuts if c[3] == call.index - 1] or list(rec.cuts)
    cuts = tuple(
        Cut(kind=kind, place=place(spot))
        for kind, spot, _, _ in reversed(recent)
        if spot is not None
    )
    name = next((n for n in (_identity_name(frame, t) for t in roots) if n), None) or "the tensor"
    backward = place(call.spot)
    if cuts:
        cut = cuts[0]
        headline = (
            f"{cut.place.path}:{cut.place.line}: {cut.kind} cuts {name} off the graph, "
            f"so the backward at line {backward.line if backward else '?'} has no path "
            "to anything that requires grad"
        )
        fixes = (_CUT_FIXES.get(cut.kind, "remove the cut on the path to the loss"),)
    else:
        headline = (
            f"{_at(backward)}: {name} does not require grad, and no detach(), .data, "
            "no_grad or .numpy() was seen on its way: nothing it was computed from "
            "requires grad"
        )
        fixes = ("check requires_grad of the inputs and parameters the loss is computed from",)
    return Failure(
        kind="no-grad",
        headline=headline,
        error=_first(text),
        backward=backward,
        cuts=cuts,
        fixes=fixes,
    )


_CUT_FIXES = {
    "detach()": "remove .detach() on the path from the parameters to the loss "
    "(detach only what you log or store)",
    ".data": "use the tensor itself instead of .data on the path to the loss",
    "torch.no_grad()": "compute the loss outside the torch.no_grad() block",
    ".numpy()": "keep the computation in torch: a NumPy round trip makes a tensor with no graph",
}


# --- silent changes -------------------------------------------------------------------


def silent_entry(rec: Any, saved: Any, node: Any, call: Any, frame: Any) -> None:
    """Count a backward that read ``saved`` changed; the first time, make its record."""
    name = None if node is None else node.name()
    key = (saved.spot, name, tuple(saved.tensor.shape))
    entry = rec.silent.get(key)
    if entry is not None:
        entry["times"] += 1
        return
    views = rec.numpy_views.get(saved.key)
    shares = () if views is None else (Cut(kind="NumPy", place=place(views)),)
    shares = tuple(c for c in shares if c.place is not None)
    record = saved_record(saved, frame, name)
    writes = tuple(_write(w) for w in saved.writes)
    backward = place(call.spot)
    rec.silent[key] = {
        "headline": _silent_headline(record, writes, shares, backward),
        "saved": record,
        "backward": backward,
        "writes": writes,
        "shares": shares,
        "leaves": _leaves(node, frame),
        "times": 1,
    }


def _silent_headline(
    saved: Saved, writes: Tuple[Write, ...], shares: Tuple[Cut, ...], backward: Any
) -> str:
    name = saved.name or "a saved tensor"
    node = saved.node or "autograd"
    at = "" if saved.place is None else f" at line {saved.place.line}"
    late = "" if backward is None else f" at line {backward.line}"
    if writes and writes[0].place is not None:
        w = writes[0]
        return (
            f"{w.place.path}:{w.place.line}: {w.alias or name} is changed ({w.op}) "
            f"after {node} saved {name}{at}; no version changed, so the backward{late} "
            "used the new values"
        )
    if shares:
        view = shares[0].place
        return (
            f"{view.path}:{view.line}: {name} is shared with NumPy here, and its values "
            f"changed after {node} saved it{at}; the backward{late} used the new values"
        )
    return (
        f"{_at(saved.place)}: {name}, saved here by {node}, changed before the backward{late} "
        "without a PyTorch write: look for NumPy or other writes between these lines"
    )


def silent_records(rec: Any) -> Tuple[Silent, ...]:
    return tuple(Silent(**entry) for entry in rec.silent.values())


def _leaves(node: Any, frame: Any) -> Tuple[str, ...]:
    """Names of the leaves whose gradients flow through ``node``."""
    if node is None:
        return ()
    names = _leaf_names(frame)
    found: List[str] = []
    todo, seen = deque([node]), set()
    while todo and len(seen) < MAX_NODES:
        n = todo.popleft()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        variable = getattr(n, "variable", None)
        if isinstance(variable, torch.Tensor):
            found.append(names.get(id(variable), f"a leaf of shape {list(variable.shape)}"))
        todo.extend(child for child, _ in n.next_functions)
    return tuple(dict.fromkeys(found))


def _leaf_names(frame: Any) -> Dict[int, str]:
    names: Dict[int, str] = {}
    if frame is None:
        return names
    scope = dict(frame.f_globals)
    scope.update(frame.f_locals)
    for name, value in scope.items():
        if isinstance(value, torch.Tensor):
            names.setdefault(id(value), name)
        elif isinstance(value, torch.nn.Module):
            for pname, p in value.named_parameters():
                names.setdefault(id(p), f"{name}.{pname}")
    return names


__all__ = ["diagnose", "out_of_place", "saved_name", "silent_entry", "silent_records"]
