"""Read "Trying to backward through the graph a second time": which backward freed what, who
carried it over, and the fix that fits.

Every backward notes which graph node it read saved tensors of (by sequence
number), the line that saved them, and (weak reference, version) of each
(``Recorder._note_read``). When a backward fails this way, walking its graph
from its roots finds the nodes an earlier backward read and freed; the one
the engine reaches first is the node both backwards need (``shared``, with
its forward line). Going back up from it, through nodes that earlier
backward also owned, to the first node of the new graph gives the edge where
the old graph enters the new one: the tensor on it is the **carrier**. Its
name comes from the frames (a variable holding it, or a tuple holding it) or
from the line where the new graph read it (``h = torch.tanh(x @ W + h @ U)``
reads and rebinds ``h``).

Fixes, in this order, each made only when the run's facts allow it:

1. detach the carrier where it crosses: before the line that reads it in the
   next iteration (``h = h.detach()``), when the new graph still reaches
   parameters of its own; or, between two different backwards, at the line
   where the first one's graph read it (``D(fake.detach())``), when an
   optimizer step between them leaves the carrier's parameters out;
2. recompute it: the line that made the carrier run again before the second
   loss reads it, with what it was made from detached for the first
   (``output = netD(fake.detach())`` ... ``output = netD(fake)``);
3. one backward through both losses (``(a + b).backward()``), when they were
   both computed before the first backward and no step runs between;
4. ``retain_graph=True`` on the first backward, never when a tensor the
   freed part saved has changed since (an optimizer step, an in-place op):
   then the second backward would fail on it, and the report names it.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import edits
from .diagnose import assigned_before, backward_receiver
from .names import parameter_name, scopes
from .places import assigned_names, place, storage_key
from .graphs import leaf_keys, leaves_under, order_and_parents, root_nodes, sequence_nr
from ..trace.doctor import Failure, Fix, Place, Write


def _seq(node: Any) -> int:
    return sequence_nr(node)


def _holds_tensors(node: Any) -> bool:
    """Whether a node saved tensors (freed ones raise when read; other saved values do not)."""
    for name in dir(node):
        if not name.startswith("_saved_"):
            continue
        try:
            value = getattr(node, name)
        except RuntimeError:
            return True
        if isinstance(value, torch.Tensor) or (
            isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value)
        ):
            return True
    return False


def _leafy(roots: List[Any], stop: Any) -> bool:
    """Whether the graph from ``roots`` reaches a leaf without passing through ``stop``."""
    return bool(leaves_under(root_nodes(roots), stop))


def _carrier_in_frames(frame: Any, node: Any) -> Tuple[Optional[str], Any]:
    """(name, value) of a variable holding the tensor whose grad_fn is ``node`` (or a tuple
    or list holding it), innermost frame first."""
    for variables, _, _ in scopes(frame):
        for name, value in variables.items():
            if isinstance(value, torch.Tensor) and value.grad_fn is node:
                return name, value
            if isinstance(value, (tuple, list)) and 0 < len(value) <= 16:
                if any(isinstance(v, torch.Tensor) and v.grad_fn is node for v in value):
                    return name, value
    return None, None


def freed(rec: Any, error: str, call: Any, roots: List[Any], frame: Any) -> Failure:
    earlier = [c for c in rec.history if c.index < call.index and not c.retain]
    owner: Dict[int, Any] = {}
    for c in earlier:
        for seq in c.nodes:
            owner.setdefault(seq, c)
    order, parent = order_and_parents(roots)
    hit = [n for n in order if _seq(n) in owner]
    backward = place(call.spot)
    if not hit:
        return _unread(rec, error, call, roots, backward)
    shared = max(hit, key=_seq)
    freer = owner[_seq(shared)]
    entry = node = shared
    while True:
        up = parent.get(id(node))
        if up is None:
            break
        s = _seq(up)
        if s >= freer.mark or (s not in freer.nodes and _holds_tensors(up)):
            break
        entry = node = up
    linker = parent.get(id(entry))
    name, value = _carrier_in_frames(frame, entry)
    use_spot = _use(call, entry, parent)
    if name is None and use_spot is not None:
        targets, reads = assigned_names(use_spot)
        carried = [n for n in reads if n in targets] or [n for n in reads if n not in targets]
        name = carried[0] if len(carried) == 1 or set(carried) & set(targets) else None
    if name is None and linker is None and roots:
        name = _root_name(frame, roots[0])
    use = place(use_spot)
    freed_by = place(freer.spot)
    loop = freer.spot == call.spot
    runs = (freer.run, call.run) if loop else None
    assigned = _assigned(name, use, backward)
    blocked = _blocked(rec, order, owner, frame)
    if loop and not blocked:
        blocked = _blocked_next(rec, order, freer, call, frame)
    shared_place = place(freer.nodes.get(_seq(shared), (None, []))[0])
    facts = _Facts(rec, call, freer, entry, name, value, use, assigned, roots, frame, loop, blocked)
    fixes = facts.fixes()
    headline = _headline(facts, backward, freed_by, shared_place, shared)
    return Failure(
        kind="freed-graph",
        headline=headline,
        error=error,
        backward=backward,
        backward_run=call.run,
        freed_by=freed_by,
        carrier=name,
        carried_at=use,
        fixes=fixes,
        shared=shared_place,
        shared_node=shared.name(),
        assigned_at=assigned,
        runs=runs,
        unit=facts._unit() if runs is not None else "run",
        blocked=blocked,
    )


def _use(call: Any, entry: Any, parent: Dict[int, Any]) -> Any:
    """The line where the new graph read the carrier: where a node saved it as an input, or
    (when the nodes that took it saved nothing, as ``h[0]`` does) saved what they made of it."""
    chain, node = [], entry
    while node is not None and len(chain) < 64:
        chain.append(_seq(node))
        node = parent.get(id(node))
    for seq in chain:
        for s, spot in reversed(call.uses):
            if s == seq:
                return spot
    return None


def _root_name(frame: Any, root: Any) -> Optional[str]:
    for variables, _, _ in scopes(frame):
        for name, value in variables.items():
            if value is root:
                return name
    return None


def _assigned(
    name: Optional[str], use: Optional[Place], backward: Optional[Place]
) -> Optional[Place]:
    """The line that gave the carrier the value that crossed: the use line itself when it
    rebinds the name (``h = f(h)``), else the last assignment before it."""
    anchor = use or backward
    if name is None or anchor is None:
        return None
    stmt = edits.statement_at(anchor.path, anchor.line)
    if stmt is not None and name in edits.bound_names(stmt) and name in edits.read_names(stmt):
        return anchor
    found = assigned_before(anchor.path, anchor.line, name, anchor.line)
    if found is None:
        found = next(iter(reversed(edits.assignments(anchor.path, anchor.line, name))), None)
    return None if found is None else place((anchor.path, found.lineno, ""))


def _blocked(rec: Any, order: List[Any], owner: Dict[int, Any], frame: Any) -> Tuple[Write, ...]:
    """Tensors the freed part saved that changed since: retain_graph=True would meet them."""
    found: Dict[int, Write] = {}
    for node in order:
        c = owner.get(_seq(node))
        if c is None:
            continue
        _, entries = c.nodes[_seq(node)]
        for ref, version in entries:
            t = ref()
            if t is None or t._version == version or storage_key(t) in found:
                continue
            name = parameter_name(t, frame) or _root_name(frame, t)
            step = _step_after(rec, c, t)
            found[storage_key(t)] = Write(
                op="optimizer step" if step is not None else "in-place write",
                place=step,
                alias=name,
                version=version,
            )
            if len(found) >= 4:
                return tuple(found.values())
    return tuple(found.values())


def _blocked_next(
    rec: Any, order: List[Any], freer: Any, call: Any, frame: Any
) -> Tuple[Write, ...]:
    """In a loop, the graph retained now is read again next iteration, after the step that ran
    between these two: the tensors this graph saved that the step updates."""
    steps = [
        (spot, ref())
        for spot, ref, count in rec.steps
        if freer.index <= count < call.index and ref() is not None
    ]
    if not steps:
        return ()
    keys: Dict[Any, Any] = {}
    for spot, opt in steps:
        for key in rec.taps.keys_of(opt):
            keys.setdefault(key, spot)
    found: Dict[Any, Write] = {}
    for node in order:
        seq = _seq(node)
        if seq < freer.mark:
            continue
        refs = list(rec.packed.get(seq, ()))
        held = [r() for r in refs]
        tensors = [s.tensor for s in held if s is not None]
        tensors += [r() for r, _ in call.nodes.get(seq, (None, []))[1]]
        for t in tensors:
            key = None if t is None else storage_key(t)
            if key in keys and key not in found:
                name = parameter_name(t, frame) or _root_name(frame, t)
                found[key] = Write(
                    op="optimizer step", place=place(keys[key]), alias=name, version=t._version
                )
                if len(found) >= 4:
                    return tuple(found.values())
    return tuple(found.values())


def _step_after(rec: Any, call: Any, t: Any) -> Optional[Place]:
    """The first optimizer step after ``call`` whose parameters include ``t``."""
    key = storage_key(t)
    for spot, ref, count in rec.steps:
        opt = ref()
        if count >= call.index and opt is not None and key in rec.taps.keys_of(opt):
            return place(spot)
    return None


class _Facts:
    """What the fixes are made from."""

    def __init__(
        self,
        rec: Any,
        call: Any,
        freer: Any,
        entry: Any,
        name: Optional[str],
        value: Any,
        use: Optional[Place],
        assigned: Optional[Place],
        roots: List[Any],
        frame: Any,
        loop: bool,
        blocked: Tuple[Write, ...],
    ) -> None:
        self.rec, self.call, self.freer, self.entry = rec, call, freer, entry
        self.name, self.value, self.use, self.assigned = name, value, use, assigned
        self.roots, self.frame, self.loop, self.blocked = roots, frame, loop, blocked
        self.backward = place(call.spot)
        self.first = place(freer.spot)

    def fixes(self) -> Tuple[Fix, ...]:
        found: List[Fix] = []
        for make in (self._detach, self._recompute, self._sum, self._retain):
            fix = make()
            if fix is not None:
                found.append(fix)
        return tuple(found)

    # 1. detach where it crosses ----------------------------------------------------------
    def _detach(self) -> Optional[Fix]:
        if self.name is None or self.use is None:
            return None
        if self.loop or self._rebinds():
            if not _leafy(self.roots, self.entry):
                return None  # the carrier is all the new graph has: detaching leaves nothing
            code = self._detach_statement()
            edit = edits.insert_before(self.use.path, self.use.line, code)
            if edit is None:
                return None
            return Fix(
                text=f"detach {self.name} before line {self.use.line} reads it, so that each "
                f"{self._unit()} has a graph of its own",
                edits=(edit,),
            )
        if not self._cut_by_a_step():
            return None
        crossings = self._first_uses()
        made = []
        for line in crossings:
            if not self._reads_more(line):
                continue
            edit = edits.reads_replaced(self.use.path, line, self.name, f"{self.name}.detach()")
            if edit is not None:
                made.append(edit)
        if not made:
            return None
        lines = ", ".join(str(e.line) for e in made)
        return Fix(
            text=f"detach {self.name} where the backward at line {self.first.line} reads it "
            f"(line {lines}), so that it stops at {self.name}",
            edits=tuple(made),
        )

    def _unit(self) -> str:
        if self.backward is not None and edits.loop_around(self.backward.path, self.backward.line):
            return "iteration"
        return "run"

    def _rebinds(self) -> bool:
        stmt = edits.statement_at(self.use.path, self.use.line)
        return stmt is not None and self.name in edits.bound_names(stmt)

    def _detach_statement(self) -> str:
        n = self.name
        if isinstance(self.value, (tuple, list)) or self._holds_sequence():
            made = f"tuple(t.detach() for t in {n})"
        else:
            made = f"{n}.detach()"
        if self._starts_as_none():
            return f"{n} = None if {n} is None else {made}"
        return f"{n} = {made}"

    def _holds_sequence(self) -> bool:
        for variables, _, _ in scopes(self.frame):
            value = variables.get(self.name)
            if value is not None:
                return isinstance(value, (tuple, list))
        return False

    def _starts_as_none(self) -> bool:
        for stmt in edits.assignments(self.use.path, self.use.line, self.name):
            value = getattr(stmt, "value", None)
            if isinstance(value, ast.Constant) and value.value is None:
                return True
        return False

    def _cut_by_a_step(self) -> bool:
        """An optimizer step between the two backwards, whose parameters the carrier's graph
        does not reach: the first backward's gradient through the carrier was not wanted."""
        reached = leaf_keys(self.entry)
        steps = [
            ref()
            for _, ref, count in self.rec.steps
            if self.freer.index <= count < self.call.index and ref() is not None
        ]
        return bool(steps) and all(not (reached & self.rec.taps.keys_of(o)) for o in steps)

    def _first_uses(self) -> List[int]:
        seq = _seq(self.entry)
        lines = []
        for s, spot in self.freer.uses:
            if s == seq and spot is not None and _absolute(spot[0]) == _absolute(self.use.path):
                lines.append(spot[1])
        return sorted(set(lines))

    def _reads_more(self, line: int) -> bool:
        """Whether the statement at ``line`` reads something else that requires grad."""
        stmt = edits.statement_at(self.use.path, line)
        if stmt is None:
            return False
        variables = _variables(self.frame)
        for read in edits.read_names(stmt):
            if read == self.name:
                continue
            value = variables.get(read)
            if isinstance(value, torch.nn.Module):
                if any(p.requires_grad for p in value.parameters()):
                    return True
            elif isinstance(value, torch.Tensor) and value.requires_grad:
                return True
        return False

    # 2. recompute ----------------------------------------------------------------------
    def _recompute(self) -> Optional[Fix]:
        if self.name is None or self.use is None or self.assigned is None:
            return None
        if self.assigned.line == self.use.line or self.assigned.path != self.use.path:
            return None
        if not self.loop and (self.first is None or self.use.line <= self.first.line):
            return None
        path = self.use.path
        code = edits.statement_source(path, self.assigned.line)
        stmt = edits.statement_at(path, self.assigned.line)
        if code is None or stmt is None or self.name not in edits.bound_names(stmt):
            return None
        made = []
        variables = _variables(self.frame)
        for read in edits.read_names(stmt):
            value = variables.get(read)
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                if _seq(value.grad_fn) in self.freer.nodes:
                    edit = edits.reads_replaced(path, self.assigned.line, read, f"{read}.detach()")
                    if edit is not None:
                        made.append(edit)
        again = edits.insert_before(path, self.use.line, code)
        if again is None:
            return None
        made.append(again)
        text = (
            f"compute {self.name} again for the backward at line {self.backward.line}: repeat "
            f"line {self.assigned.line} before line {self.use.line}"
        )
        if len(made) > 1:
            text += f", and detach what line {self.assigned.line} reads for the first backward"
        return Fix(text=text, edits=tuple(made))

    # 3. one backward for both losses ------------------------------------------------------
    def _sum(self) -> Optional[Fix]:
        first, second = self.first, self.backward
        if self.loop or first is None or second is None or first.path != second.path:
            return None
        a, b = backward_receiver(first), backward_receiver(second)
        if a is None or b is None or a == b or self.blocked:
            return None
        if any(self.freer.index <= count < self.call.index for _, _, count in self.rec.steps):
            return None
        made_b = assigned_before(second.path, second.line, b, second.line)
        if made_b is None or made_b.lineno > first.line:
            return None
        block = edits.enclosing_body(first.path, first.line)
        if block is None or not any(s.lineno == second.line for s in block):
            return None
        one = edits.rewrite(first.path, first.line, lambda s: _summed(s, a, b))
        gone = edits.delete(second.path, second.line)
        if one is None or gone is None:
            return None
        return Fix(
            text=f"one backward for both losses: `({a} + {b}).backward()` at line {first.line}, "
            f"and no backward at line {second.line}",
            edits=(one, gone),
        )

    # 4. retain_graph ------------------------------------------------------------------------
    def _retain(self) -> Optional[Fix]:
        if self.blocked or self.first is None:
            return None
        calls = [
            n
            for n in edits.nodes_in(self.first.path, self.first.line, ast.Call)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("backward", "grad")
        ]
        if len(calls) != 1:
            return None
        edit = edits.with_keyword(self.first.path, calls[0], "retain_graph", "True")
        if edit is None:
            return None
        return Fix(
            text=f"keep the graph for the second backward: retain_graph=True at line "
            f"{self.first.line} (it holds the graph's memory until then)",
            edits=(edit,),
        )


def _summed(stmt: ast.stmt, a: str, b: str) -> Optional[ast.stmt]:
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    func = stmt.value.func
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return None
    func.value = ast.BinOp(
        left=ast.Name(a, ast.Load()), op=ast.Add(), right=ast.Name(b, ast.Load())
    )
    return stmt


def _variables(frame: Any) -> Dict[str, Any]:
    found: Dict[str, Any] = {}
    for variables, _, _ in reversed(scopes(frame)):
        found.update(variables)
    return found


def _absolute(path: str) -> str:
    import os

    return os.path.abspath(path)


def _headline(
    f: _Facts,
    backward: Optional[Place],
    freed_by: Optional[Place],
    shared: Optional[Place],
    node: Any,
) -> str:
    b = "?" if backward is None else backward.line
    first = "an earlier backward" if freed_by is None else f"the backward at line {freed_by.line}"
    if f.name is not None and f.use is not None and f.loop:
        unit = f._unit()
        k = f.freer.run
        return (
            f"{f.use.path}:{f.use.line}: {f.name} carries {unit} {k}'s graph into {unit} {k + 1}; "
            f"{first} freed that graph in {unit} {k}, and runs into it again in {unit} {k + 1}"
        )
    if f.name is not None and f.assigned is not None:
        return (
            f"{f.assigned.path}:{f.assigned.line}: {f.name}, made here, takes the backward at line "
            f"{b} into the graph that {first} freed"
        )
    where = "" if shared is None else f" (the {node.name()} of line {shared.line})"
    return (
        f"{'an unknown line' if backward is None else f'{backward.path}:{backward.line}'}: this "
        f"backward runs through a graph{where} that {first} already freed"
    )


def _unread(
    rec: Any, error: str, call: Any, roots: List[Any], backward: Optional[Place]
) -> Failure:
    """No earlier backward of the last few read this graph: say what is known."""
    earlier = [c for c in rec.calls if c.index < call.index and not c.retain]
    first = place(earlier[-1].spot) if earlier else None
    headline = (
        f"{'an unknown line' if backward is None else f'{backward.path}:{backward.line}'}: this "
        "backward runs through a graph an earlier backward already freed"
        + ("" if first is None else f" (the last one without retain_graph: line {first.line})")
    )
    return Failure(
        kind="freed-graph",
        headline=headline,
        error=error,
        backward=backward,
        backward_run=call.run,
        freed_by=first,
    )


__all__ = ["freed"]
