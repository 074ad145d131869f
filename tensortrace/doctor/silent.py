"""What changes silently: saved tensors read changed, and parameters a cut starved of gradients.

A backward that read a saved tensor whose contents changed without a version
bump (``.data``, ``.data =``, NumPy) becomes a ``Silent`` record. Its "wrong"
list names the leaves whose gradients the change altered, found by running:
before a backward starts, for a changed tensor whose contents as saved were
kept (``Recorder.originals``, bounded), the node that saved it is called
twice on the same upstream gradient (ones), once reading the new values and
once the old (the unpack hook hands it the kept copy), and each of the
node's inputs whose gradient differs is followed down to its leaves. A
node's call is its own computation with no hooks, and never frees the graph.
Where no copy was kept (NumPy writes, too large a tensor), the list is every
leaf under the node, and says so.

An optimizer step over parameters that a forward used but no backward gave a
gradient becomes a ``Starved`` record naming the ``detach()`` whose graph
reached them (``taps.py`` remembers it per line), with a fix that moves the
detach to where it was meant.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import edits
from .graphs import find, leaves_under
from .names import owner_of, parameters_named
from .places import place, storage_key
from ..trace.doctor import Cut, Fix, Saved, Silent, Starved, Write

_NO_DISPATCH = torch._C._DisableTorchDispatch


def saved_record(saved: Any, name: Optional[str], node: Optional[str]) -> Saved:
    t = saved.tensor
    return Saved(
        name=name,
        node=node,
        shape=tuple(t.shape),
        dtype=str(t.dtype).replace("torch.", ""),
        place=place(saved.spot),
        version=saved.version,
    )


def write_record(w: Any) -> Write:
    return Write(op=w.op, place=place(w.spot), alias=w.alias, version=w.version)


# --- which gradients a change alters -----------------------------------------------------


def probe_changes(rec: Any, roots_: Any) -> None:
    """For each saved tensor changed since its kept copy, the inputs of its node whose gradient
    the change alters: ``rec.altered[id(saved)]`` = their positions (``node.next_functions``)."""
    from .fingerprint import fingerprint

    for key, (ref, copy, _) in list(rec.originals.items()):
        saved = ref()
        if saved is None or key in rec.altered or saved.fp is None:
            continue
        if fingerprint(saved.tensor) == saved.fp:
            continue
        node = find(roots_ if isinstance(roots_, (list, tuple)) else [roots_], saved.seq)
        if node is None or hasattr(node, "_forward_cls"):  # a Function of the user's: not run
            continue
        metadata = getattr(node, "_input_metadata", None)
        if metadata is None:
            continue
        grads = [
            torch.ones(m.shape, dtype=m.dtype, device=m.device)
            if m.dtype.is_floating_point or m.dtype.is_complex
            else None
            for m in metadata
        ]
        with _NO_DISPATCH(), torch.no_grad():
            now = node(*grads)
            rec.substitute = {id(saved): copy}
            try:
                before = node(*grads)
            finally:
                rec.substitute = {}
        now = now if isinstance(now, tuple) else (now,)
        before = before if isinstance(before, tuple) else (before,)
        rec.altered[key] = tuple(
            i
            for i, (a, b) in enumerate(zip(now, before))
            if (a is None) != (b is None) or (a is not None and not torch.equal(a, b))
        )


def _leaf_names(leaves: List[Any], frame: Any) -> Tuple[str, ...]:
    named = parameters_named(leaves, frame)
    plain: Dict[int, str] = {}
    from .names import scopes

    for variables, _, _ in scopes(frame):
        for name, value in variables.items():
            if isinstance(value, torch.Tensor) and not name.startswith("_"):
                plain.setdefault(id(value), name)
    out = [
        plain.get(id(t)) or named.get(id(t)) or f"a leaf of shape {list(t.shape)}" for t in leaves
    ]
    return tuple(dict.fromkeys(out))


def affected(
    rec: Any, saved: Any, node: Any, frame: Any
) -> Tuple[Tuple[str, ...], Tuple[str, ...], bool]:
    """(leaves whose gradients the change altered, leaves under the node it did not, exact)."""
    if node is None:
        return (), (), False
    try:
        edges = [child for child, _ in node.next_functions]
    except RuntimeError:
        return (), (), False
    altered = rec.altered.get(id(saved))
    if altered is None:
        return _leaf_names(leaves_under(edges), frame), (), False
    hit = leaves_under([edges[i] for i in altered if i < len(edges)])
    hit_ids = {id(t) for t in hit}
    rest = [t for t in leaves_under(edges) if id(t) not in hit_ids]
    return _leaf_names(hit, frame), _leaf_names(rest, frame), True


# --- silent changes ------------------------------------------------------------------------


def silent_entry(rec: Any, saved: Any, node: Any, call: Any, frame: Any) -> None:
    """Count a backward that read ``saved`` changed; the first time, make its record."""
    from .diagnose import saved_name

    name = None if node is None else node.name()
    first = saved.writes[0] if saved.writes else None
    if first is not None and first.spot is not None:  # one warning per write, however many
        key: Tuple[Any, ...] = (first.spot, saved.key)  # nodes saved what it changed
    else:
        key = (saved.spot, name, tuple(saved.tensor.shape))
    entry = rec.silent.get(key)
    if entry is not None:
        if entry["call"] != call.index:
            entry["call"] = call.index
            entry["times"] += 1
        wrong, same, exact = affected(rec, saved, node, frame)
        merged = tuple(dict.fromkeys(entry["leaves"] + wrong))
        entry["leaves"] = merged
        entry["unaffected"] = tuple(
            n for n in dict.fromkeys(entry["unaffected"] + same) if n not in merged
        )
        entry["exact"] = entry["exact"] and exact
        return
    views = rec.numpy_views.get(saved.key)
    shares = () if views is None else (Cut(kind="NumPy", place=place(views)),)
    shares = tuple(c for c in shares if c.place is not None)
    record = saved_record(saved, saved_name(saved, frame), name)
    writes = tuple(write_record(w) for w in saved.writes)
    backward = place(call.spot)
    wrong, same, exact = affected(rec, saved, node, frame)
    rec.silent[key] = {
        "headline": _silent_headline(record, writes, shares, backward, exact and not wrong),
        "saved": record,
        "backward": backward,
        "writes": writes,
        "shares": shares,
        "leaves": wrong,
        "unaffected": same,
        "exact": exact,
        "times": 1,
        "call": call.index,
    }


def _silent_headline(
    saved: Saved, writes: Tuple[Write, ...], shares: Tuple[Cut, ...], backward: Any, same: bool
) -> str:
    name = saved.name or "a saved tensor"
    node = saved.node or "autograd"
    at = "" if saved.place is None else f" at line {saved.place.line}"
    late = "" if backward is None else f" at line {backward.line}"
    used = (
        "read the new values, though no gradient came out different"
        if same
        else "used the new values"
    )
    if writes and writes[0].place is not None:
        w = writes[0]
        how = "rebound to new memory" if w.op == ".data =" else f"changed ({w.op})"
        return (
            f"{w.place.path}:{w.place.line}: {w.alias or name} is {how} "
            f"after {node} saved {name}{at}; no version changed, so the backward{late} {used}"
        )
    if shares:
        view = shares[0].place
        return (
            f"{view.path}:{view.line}: {name} is shared with NumPy here, and its values "
            f"changed after {node} saved it{at}; the backward{late} {used}"
        )
    where = "an unknown line" if saved.place is None else f"{saved.place.path}:{saved.place.line}"
    return (
        f"{where}: {name}, saved here by {node}, changed before the backward{late} "
        "without a PyTorch write: look for NumPy or other writes between these lines"
    )


def silent_records(rec: Any) -> Tuple[Silent, ...]:
    found = []
    for entry in rec.silent.values():
        fields = {k: v for k, v in entry.items() if k != "call"}
        if fields["exact"] and not fields["leaves"]:
            fields["headline"] = _silent_headline(
                fields["saved"], fields["writes"], fields["shares"], fields["backward"], True
            )
        found.append(Silent(**fields))
    return tuple(found)


# --- parameters starved of gradients -------------------------------------------------------


def _spot_of(frame: Any) -> Any:
    return (
        None if frame is None else (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
    )


def starved_entry(rec: Any, optimizer: Any, hungry: List[Any], cuts: List[Any], frame: Any) -> None:
    """An optimizer step found parameters without gradients: those of ``hungry`` a
    ``detach()`` at one of ``cuts`` (lines, since the optimizer's last step) cut off."""
    keys = {storage_key(p) for p in hungry}
    cut_spot, cut_keys = None, frozenset()
    for spot in reversed(cuts):
        cut_keys = keys & rec.taps.detach_leaves.get(spot, frozenset())
        if cut_keys:
            cut_spot = spot
            break
    if cut_spot is None:
        return
    params = [p for p in hungry if storage_key(p) in cut_keys]
    step = _spot_of(frame)
    key = (step, cut_spot)
    entry = rec.starved.get(key)
    if entry is not None:
        entry["times"] += 1
        return
    owner = owner_of(params, frame)
    names = parameters_named(params, frame)
    listed = tuple(names.get(id(p), f"a parameter of shape {list(p.shape)}") for p in params)
    who = f"{owner[0]}'s parameters" if owner is not None else f"{len(params)} parameters"
    step_place = place(step)
    cut = None if cut_spot is None else Cut(kind="detach()", place=place(cut_spot))
    at = "an optimizer step" if step_place is None else f"the step at line {step_place.line}"
    headline = (
        f"{_where(cut.place)}: detach() cuts {who} off the loss: {at} found no gradient for "
        "them, though they took part in the forward"
    )
    last = rec.calls[-1] if rec.calls else None
    rec.starved[key] = {
        "headline": headline,
        "step": step_place,
        "cut": cut,
        "parameters": listed,
        "times": 1,
        "fixes": _starved_fixes(cut_spot, last),
        "target": None if last is None else (last.spot, last.run),
    }


def _where(p: Any) -> str:
    return "an unknown line" if p is None else f"{p.path}:{p.line}"


def _starved_fixes(cut_spot: Any, last: Any) -> Tuple[Fix, ...]:
    """Move the ``detach()`` off the line that feeds the starved loss: take it off the
    assignment, and put it on the reads of that name meant to be cut (those whose loss is
    not the one the starving backward ran)."""
    if cut_spot is None:
        return ()
    path, line, _ = cut_spot
    stmt = edits.statement_at(path, line)
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return ()
    target = stmt.targets[0]
    if not isinstance(target, ast.Name):
        return ()
    calls = [
        n
        for n in edits.nodes_in(path, line, ast.Call)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "detach"
        and not n.args
    ]
    if len(calls) != 1:
        return ()
    inner = edits.segment(path, calls[0].func.value)
    undo = edits.replace_nodes(path, line, [(calls[0], inner or "")])
    if undo is None or inner is None:
        return ()
    name = target.id
    keep = {_loss_line(path, last), None if last is None or last.spot is None else last.spot[1]}
    block = edits.enclosing_body(path, line) or []
    moved = [undo]
    for later in block:
        if later.lineno <= stmt.lineno or later.lineno in keep:
            continue  # the starving loss keeps reading the tensor itself
        if name in edits.bound_names(later):
            break
        if name in edits.read_names(later):
            edit = edits.reads_replaced(path, later.lineno, name, f"{name}.detach()")
            if edit is not None:
                moved.append(edit)
    text = f"detach {name} where it is read for the other loss, not where it is made"
    if len(moved) == 1:
        text = f"remove .detach() from line {line}, so that the backward reaches the parameters"
    return (Fix(text=text, edits=tuple(moved)),)


def _loss_line(path: str, last: Any) -> Optional[int]:
    """The line that assigned the loss the last backward ran (``g_loss = ...``)."""
    if last is None or last.spot is None or last.spot[0] != path:
        return None
    stmt = edits.statement_at(path, last.spot[1])
    if stmt is None:
        return None
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Attribute) and n.attr == "backward"]
    if not calls or not isinstance(calls[0].value, ast.Name):
        return None
    found = [
        s
        for s in edits.assignments(path, last.spot[1], calls[0].value.id)
        if s.lineno < last.spot[1]
    ]
    return found[-1].lineno if found else None


def starved_records(rec: Any) -> Tuple[Starved, ...]:
    return tuple(
        Starved(
            headline=e["headline"],
            step=e["step"],
            cut=e["cut"],
            parameters=e["parameters"],
            times=e["times"],
            fixes=e["fixes"],
        )
        for e in rec.starved.values()
    )


__all__ = [
    "affected",
    "probe_changes",
    "saved_record",
    "silent_entry",
    "silent_records",
    "starved_entry",
    "starved_records",
    "write_record",
]
