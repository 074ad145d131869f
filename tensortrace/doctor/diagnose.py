"""Turn what the recorder saw into the report of a failed backward, and its fixes as edits.

``diagnose`` runs inside the failing backward call, while the graph and the
caller's frame still exist, and reads three errors PyTorch raises:

* "modified by an inplace operation" (here): the saved tensor the unpack hook
  found stale, named as the code names it (a parameter by its module path,
  ``D.2.weight``), the line that saved it, every write into its memory since,
  and fixes that fit the write: an optimizer step is moved after the other
  backward (or that backward before it, or the loss computed after it), a
  module built with ``inplace=True`` is built with ``inplace=False`` at its
  own definition line, ``x += y`` becomes ``x = x + y``, a write through a
  detached alias gets its ``clone()``;
* "backward through the graph a second time": ``freed.py``;
* "does not require grad": ``cuts.py``;
* "grad can be implicitly created only for scalar outputs": ``misuse.py``.

Each fix is a ``Fix`` with the ``Edit`` records that make it (``edits.py``),
so that ``verify.py`` can run it before it is printed.
"""

from __future__ import annotations

import ast
import re
from typing import Any, List, Optional, Tuple

import torch

from . import edits
from .messages import node_name
from .names import defined_at, inplace_edit, parameter_key, parameter_name, roots, walk_modules
from .places import assigned_names, place
from .silent import saved_record, write_record
from ..trace.doctor import Failure, Fix, Place, Saved, Write

_INPLACE = "modified by an inplace operation"
_TWICE = "backward through the graph a second time"
_NO_GRAD = "does not require grad and does not have a grad_fn"
_ALLOW = (
    "to keep the write, run forward and backward inside "
    "`with torch.autograd.graph.allow_mutation_on_saved_tensors():` (it saves a copy when "
    "a saved tensor is written)"
)


def diagnose(rec: Any, exc: BaseException, call: Any, roots_: Any, frame: Any) -> Optional[Failure]:
    """The report of a failed backward, or None for an error this does not read."""
    text = str(exc)
    tensors = tensors_of(roots_)
    if _INPLACE in text and rec.stale is not None:
        return _modified(rec, text, call, frame)
    if _TWICE in text:
        from .freed import freed

        return freed(rec, first_line(text), call, tensors, frame)
    if _NO_GRAD in text:
        from .cuts import no_grad

        return no_grad(rec, first_line(text), call, tensors, frame)
    from .misuse import NOT_SCALAR, not_scalar

    if NOT_SCALAR in text:
        return not_scalar(first_line(text), call, tensors, frame)
    return None


def first_line(text: str) -> str:
    return text.splitlines()[0][:600] if text else ""


def tensors_of(roots_: Any) -> List[Any]:
    if isinstance(roots_, torch.Tensor):
        return [roots_]
    if isinstance(roots_, (list, tuple)):
        return [t for t in roots_ if isinstance(t, torch.Tensor)]
    return []


def at(p: Optional[Place]) -> str:
    return "an unknown line" if p is None else f"{p.path}:{p.line}"


def identity_name(frame: Any, t: Any) -> Optional[str]:
    if frame is None or t is None:
        return None
    for name, value in list(frame.f_locals.items()):
        if value is t:
            return name
    return None


def saved_name(saved: Any, frame: Any) -> Optional[str]:
    """What the code called a saved tensor: a local holding it, a parameter's module path,
    the target of the line that made it (a saved output), the name a write used."""
    name = identity_name(frame, saved.original())
    if name:
        return name
    t = saved.tensor
    if t.grad_fn is None or (t._is_view() and t._base is not None and t._base.grad_fn is None):
        found = parameter_name(t, frame)
        if found:
            return found
    if saved.is_output:
        targets, _ = assigned_names(saved.spot)
        if len(targets) == 1:
            return targets[0]
    for write in saved.writes:
        if write.alias and write.alias.isidentifier():
            return write.alias
    return None


def backward_receiver(p: Optional[Place]) -> Optional[str]:
    """``loss`` for a line ``loss.backward(...)`` (or ``torch.autograd.backward(loss)``)."""
    if p is None:
        return None
    try:
        tree = ast.parse(p.code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "backward" and isinstance(node.func.value, ast.Name):
                return node.func.value.id
            if node.func.attr in ("backward", "grad") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Name):
                    return first.id
    return None


def assigned_before(path: str, line: int, name: str, before: int) -> Optional[ast.stmt]:
    """The last statement before line ``before`` (in the function of ``line``) binding ``name``."""
    found = [s for s in edits.assignments(path, line, name) if s.lineno < before]
    return found[-1] if found else None


# --- modified in place ---------------------------------------------------------------


def _modified(rec: Any, text: str, call: Any, frame: Any) -> Failure:
    saved, now, node = rec.stale
    record = saved_record(saved, saved_name(saved, frame), node or node_name(saved))
    writes = tuple(write_record(w) for w in saved.writes)
    backward = place(call.spot)
    first = _first_write(saved, writes)
    name = record.name or "a saved tensor"
    where_saved = "" if record.place is None else f" at line {record.place.line}"
    if first is None:
        headline = (
            f"{at(record.place)}: {name}, saved here for backward, was changed in place "
            f"(version {saved.version} -> {now}) by a write the watch did not see"
        )
        fixes: Tuple[Fix, ...] = (Fix(text=f"clone {name} before the write; or, {_ALLOW}"),)
    else:
        seen, w = first
        if seen.via and "/optim/" in seen.via.replace("\\", "/"):
            headline, fixes = _stepped(record, w, backward, frame)
        else:
            alias = w.alias or name
            if alias != name and alias.isidentifier():
                alias = f"{alias} (memory shared with {name})"
            headline = (
                f"{at(w.place)}: {alias} is changed in place ({w.op}) after "
                f"{record.node or 'autograd'} saved {name}{where_saved} for backward"
            )
            fixes = _inplace_fixes(rec, seen, w, record, frame)
    return Failure(
        kind="modified-in-place",
        headline=headline,
        error=text.splitlines()[0][:600] if text else "",
        backward=backward,
        backward_run=call.run,
        saved=record,
        writes=writes,
        fixes=fixes,
    )


def _first_write(saved: Any, writes: Tuple[Write, ...]) -> Optional[Tuple[Any, Write]]:
    """The write that moved the saved tensor off its version (else the first seen)."""
    pairs = list(zip(saved.writes, writes))
    for seen, w in pairs:
        if w.place is not None and w.version == saved.version:
            return seen, w
    for seen, w in pairs:
        if w.place is not None:
            return seen, w
    return None


def _inplace_fixes(rec: Any, seen: Any, w: Write, record: Saved, frame: Any) -> Tuple[Fix, ...]:
    name = record.name or "the tensor"
    path, line = w.place.path, w.place.line
    module = None if seen.module is None else seen.module()
    if seen.via and "/nn/" in seen.via.replace("\\", "/"):
        fix = _module_fix(module, frame) if module is not None else None
        if fix is None:
            fix = _functional_fix(path, line)
        if fix is not None:
            return (fix,)
        return (
            Fix(
                text=f"line {line} runs a module or function built with inplace=True: "
                "build it with inplace=False"
            ),
        )
    alias = w.alias or ""
    if alias.startswith(".data") or alias.startswith("memory shared") or (alias and alias != name):
        fix = _clone_fix(rec, w, name)
        return (
            (fix,)
            if fix is not None
            else (Fix(text=f"clone {name} before the write; or, {_ALLOW}"),)
        )
    fix = _out_of_place_fix(path, line)
    if fix is not None:
        return (fix,)
    return (Fix(text=f"clone {name} before the write at line {line}; or, {_ALLOW}"),)


def _module_fix(module: Any, frame: Any) -> Optional[Fix]:
    """``inplace=False`` where the module that wrote was built (its own definition line)."""
    found = defined_at(module, frame)
    if found is None:
        return None
    path, call = found
    shown = place((path, call.lineno, ""))
    edit = inplace_edit(shown.path if shown else path, call, module)
    if edit is None:
        return None
    label = type(module).__name__
    for root_name, root, _, _ in roots(frame):
        for dotted, m, _ in walk_modules(root_name, root):
            if m is module:
                label = f"{dotted} ({type(module).__name__})"
                break
        else:
            continue
        break
    return Fix(
        text=f"build {label} with inplace=False, at {edit.path}:{edit.line} where it is made",
        edits=(edit,),
    )


def _functional_fix(path: str, line: int) -> Optional[Fix]:
    """``F.relu(x, inplace=True)`` on the line itself: ``inplace=False`` there."""
    for call in edits.nodes_in(path, line, ast.Call):
        for kw in getattr(call, "keywords", []):
            if kw.arg == "inplace":
                edit = edits.replace_nodes(path, kw.value.lineno, [(kw.value, "False")])
                if edit is not None:
                    return Fix(text=f"pass inplace=False at line {line}", edits=(edit,))
    return None


def _out_of_place_fix(path: str, line: int) -> Optional[Fix]:
    """``h.relu_()`` -> ``h = h.relu()``; ``x += y`` -> ``x = x + y``."""
    stmt = edits.statement_at(path, line)
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        op = edits.segment(path, stmt)
        target = stmt.target.id
        value = edits.segment(path, stmt.value)
        symbol = _OPS.get(type(stmt.op))
        if op is None or value is None or symbol is None:
            return None
        edit = edits.replace_nodes(path, line, [(stmt, f"{target} = {target} {symbol} {value}")])
        return Fix(text=f"write line {line} out of place", edits=(edit,)) if edit else None
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr.endswith("_")
            and not func.attr.endswith("__")
            and isinstance(func.value, ast.Name)
        ):
            target = func.value.id
            call = edits.segment(path, stmt.value)
            if call is None:
                return None
            new = re.sub(rf"\.{re.escape(func.attr)}\(", f".{func.attr[:-1]}(", call, count=1)
            edit = edits.replace_nodes(path, line, [(stmt, f"{target} = {new}")])
            return Fix(text=f"write line {line} out of place", edits=(edit,)) if edit else None
    return None


_OPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.MatMult: "@",
    ast.Pow: "**",
    ast.FloorDiv: "//",
    ast.Mod: "%",
}


def _clone_fix(rec: Any, w: Write, name: str) -> Optional[Fix]:
    """``clone()`` after the ``detach()``/``.data`` that made the alias the write went through."""
    for kind, spot, _, _ in reversed(rec.cuts):
        p = place(spot)
        if kind not in ("detach()", ".data") or p is None:
            continue
        if not re.search(rf"\b{re.escape(name)}\.(detach\(\)|data\b)", p.code):
            continue
        for node in edits.nodes_in(p.path, p.line, ast.AST):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "detach"
                or isinstance(node, ast.Attribute)
                and node.attr == "data"
                and isinstance(node.ctx, ast.Load)
            ):
                text = edits.segment(p.path, node)
                if text is None:
                    continue
                edit = edits.replace_nodes(p.path, p.line, [(node, f"{text}.clone()")])
                if edit is not None:
                    return Fix(
                        text=f"clone at line {p.line}, so that the write at line {w.place.line} "
                        f"goes to a copy of {name}",
                        edits=(edit,),
                    )
    return None


# --- an optimizer step between a forward and its backward -----------------------------------


def _stepped(
    record: Saved, w: Write, backward: Optional[Place], frame: Any
) -> Tuple[str, Tuple[Fix, ...]]:
    step = w.place
    opt = _step_receiver(step)
    stepping = f"{opt}.step()" if opt else "the optimizer step"
    name = record.name or "a parameter"
    saved_at = (
        " it was saved"
        if record.place is None
        else f" the forward at line {record.place.line} saved it"
    )
    headline = (
        f"{step.path}:{step.line}: {stepping} updates {name} in place after{saved_at}; "
        f"the backward at line {backward.line if backward else '?'} needs the value from before "
        "the step"
    )
    fixes: List[Fix] = []
    loss = backward_receiver(backward)
    if backward is not None and backward.path == step.path:
        path = step.path
        loss_stmt = (
            assigned_before(path, backward.line, loss, step.line) if loss is not None else None
        )
        link = _link_fix(path, loss, loss_stmt, record, frame)
        if link is not None:
            fixes.append(link)
        after = edits.move(path, step.line, after=backward.line)
        if after:
            fixes.append(
                Fix(
                    text=f"move `{_code(step)}` below `{_code(backward)}` (line {backward.line})",
                    edits=after,
                )
            )
        block = _block_between(path, step.line, backward.line)
        if block:
            first_line = block[0]
            moved = edits.move_block(path, first_line, backward.line, before=step.line)
            if moved:
                span = (
                    f"line {backward.line}"
                    if first_line == backward.line
                    else f"lines {first_line}-{backward.line}"
                )
                fixes.append(
                    Fix(
                        text=f"run {loss or 'the other loss'}'s backward before `{_code(step)}`: "
                        f"move {span} above line {step.line}",
                        edits=moved,
                    )
                )
        if loss_stmt is not None:
            later = edits.move(path, loss_stmt.lineno, after=step.line)
            if later:
                fixes.append(
                    Fix(
                        text=f"compute {loss} after `{_code(step)}`: move line {loss_stmt.lineno} "
                        f"below line {step.line}",
                        edits=later,
                    )
                )
    if not fixes:
        fixes.append(
            Fix(
                text=f"call {stepping} only after the backward at line "
                f"{backward.line if backward else '?'} has run"
            )
        )
    return headline, tuple(fixes)


def _code(p: Place) -> str:
    return re.sub(r"\s+#.*$", "", p.code)


def _step_receiver(step: Optional[Place]) -> Optional[str]:
    if step is None:
        return None
    found = re.search(r"([A-Za-z_][\w.]*)\.step\(", step.code)
    return found.group(1) if found else None


def _block_between(path: str, step_line: int, backward_line: int) -> List[int]:
    """Lines of the statements after the step up to the backward, when all are in one block."""
    block = edits.enclosing_body(path, step_line)
    if block is None or not any(s.lineno == backward_line for s in block):
        return []
    return [s.lineno for s in block if step_line < s.lineno <= backward_line]


def _link_fix(
    path: str, loss: Optional[str], loss_stmt: Optional[ast.stmt], record: Saved, frame: Any
) -> Optional[Fix]:
    """Detach the tensor through which the loss reaches the stepped parameter (an advantage
    computed from a critic, read by the actor's loss)."""
    if loss_stmt is None or frame is None or record.name is None:
        return None
    from .graphs import leaf_keys

    variables = dict(frame.f_globals)
    variables.update(frame.f_locals)
    target = parameter_key(record.name, frame)
    if target is None:
        return None
    for name in edits.read_names(loss_stmt):
        value = variables.get(name)
        if not isinstance(value, torch.Tensor) or value.grad_fn is None:
            continue
        if target in leaf_keys(value.grad_fn):
            edit = edits.reads_replaced(path, loss_stmt.lineno, name, f"{name}.detach()")
            if edit is not None:
                return Fix(
                    text=f"detach {name} in {loss}'s line (line {loss_stmt.lineno}): {loss} then "
                    f"does not reach {record.name}, which the step changes",
                    edits=(edit,),
                )
    return None


__all__ = [
    "assigned_before",
    "at",
    "backward_receiver",
    "diagnose",
    "first_line",
    "identity_name",
    "saved_name",
    "tensors_of",
]
