"""Read "element 0 of tensors does not require grad": the cut between the loss and what
requires grad, and the fix that fits it.

A tensor that does not require grad keeps no graph, so the way back from the
loss is read from the code and the values its frame holds now: the loss's
assignment, the names it reads, their assignments, and so on. At each
statement, the values say whether what it reads requires grad (a tensor, or a
module with a parameter that does) while what it makes does not: that
statement is the cut, and its syntax says which operation it is:

* ``argmax``/``argmin``, a comparison, an integer or bool cast: no gradient
  exists; the fix is a differentiable stand-in (the expected index under
  ``softmax``) or training on the scores;
* ``.item()``, ``float()``, ``.tolist()`` then ``torch.tensor(value)``: a round
  trip through Python numbers; the fix keeps the tensor;
* ``.detach()``, ``.data``, ``.numpy()``;
* a ``with torch.no_grad():`` block around it, or a function decorated with
  ``@torch.no_grad()`` it calls (the recorder saw the decorator enter);
* a module all of whose parameters are frozen (the recorder saw where:
  ``requires_grad = False`` or ``requires_grad_(False)``).

When nothing on the way requires grad, the report says so, and names the
tensors the loss was made from.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from . import edits
from .diagnose import assigned_before, at, backward_receiver, identity_name
from .names import owner_of, scopes
from .places import place, storage_key
from ..trace.doctor import Cut, Failure, Fix, Place

MAX_STATEMENTS = 64  # statements followed back from the loss
_NO_GRADIENT = {"argmax", "argmin", "argsort", "sign", "long", "int", "bool", "byte", "round"}
_PYTHON = {"item", "tolist"}
_MAKERS = {"tensor", "as_tensor", "from_numpy", "array", "asarray"}
_GRAD_OFF = {"no_grad", "inference_mode"}
_FACTORIES = {"randn", "rand", "zeros", "ones", "empty", "full", "tensor", "randint", "arange"}


class _Cut:
    def __init__(self, kind: str, path: str, line: int, fix: Optional[Fix] = None) -> None:
        self.kind, self.path, self.line, self.fix = kind, path, line, fix


def _receiver(backward: Optional[Place]) -> Tuple[Optional[str], List[str]]:
    """(the loss's name, the names its expression reads) for a line ``loss.backward()``,
    ``(a * b).sum().backward()`` or ``torch.autograd.backward(loss)``."""
    name = backward_receiver(backward)
    if name is not None or backward is None:
        return name, [name] if name else []
    for call in edits.nodes_in(backward.path, backward.line, ast.Call):
        func = getattr(call, "func", None)
        if isinstance(func, ast.Attribute) and func.attr == "backward":
            return None, list(edits.read_names(func.value))
        if isinstance(func, ast.Attribute) and func.attr == "grad" and call.args:
            return None, list(edits.read_names(call.args[0]))
    return None, []


def no_grad(rec: Any, error: str, call: Any, roots: List[Any], frame: Any) -> Failure:
    backward = place(call.spot)
    name, reads = _receiver(backward)
    if name is None and roots:
        name = identity_name(frame, roots[0])
    found: List[_Cut] = []
    sources: List[Tuple[str, int]] = []
    if reads and backward is not None:
        walk = _Walk(rec, frame, backward.path)
        found = walk.find(reads, backward.line)
        sources = walk.sources
    loss = name or "the loss"
    b = "?" if backward is None else backward.line
    if found:
        made = [
            (c, place((walk.real if c.path == walk.path else c.path, c.line, ""))) for c in found
        ]
        cuts = tuple(Cut(kind=c.kind, place=p) for c, p in made if p is not None)
        first, where = made[0]
        headline = (
            f"{at(where)}: {first.kind} cuts {loss} off the graph here, so the backward at line "
            f"{b} has no path to what requires grad"
        )
        fixes: Tuple[Fix, ...] = (first.fix,) if first.fix is not None else ()
    else:
        cuts = ()
        made = ", ".join(f"{n} (line {line})" for n, line in sources[:4]) or "its inputs"
        headline = (
            f"{at(backward)}: nothing {loss} is computed from requires grad: {made}; "
            "give the parameters requires_grad=True"
        )
        fixes = _requires_grad_fix(sources, backward)
    return Failure(
        kind="no-grad",
        headline=headline,
        error=error,
        backward=backward,
        backward_run=call.run,
        cuts=cuts,
        fixes=fixes,
    )


def _requires_grad_fix(
    sources: List[Tuple[str, int]], backward: Optional[Place]
) -> Tuple[Fix, ...]:
    if backward is None:
        return ()
    for name, line in sources:
        for call in edits.nodes_in(backward.path, line, ast.Call):
            func = getattr(call, "func", None)
            attr = getattr(func, "attr", None) or getattr(func, "id", None)
            if attr in _FACTORIES:
                edit = edits.with_keyword(backward.path, call, "requires_grad", "True")
                if edit is not None:
                    return (
                        Fix(
                            text=f"make {name} with requires_grad=True (line {line})",
                            edits=(edit,),
                        ),
                    )
    return ()


class _Walk:
    """Back from the loss through the statements that made it."""

    def __init__(self, rec: Any, frame: Any, path: str) -> None:
        self.rec = rec
        self.frame = frame
        self.path = path
        self.real = frame.f_code.co_filename if frame is not None else path
        self.values: Dict[str, Any] = {}
        for variables, _, _ in reversed(scopes(frame)):
            self.values.update(variables)
        self.seen: Set[int] = set()
        self.trail: List[ast.stmt] = []  # statements from the loss back, in order
        self.sources: List[Tuple[str, int]] = []

    def find(self, names: List[str], before: int) -> List[_Cut]:
        """The cuts on the way back from ``names`` (read at line ``before``), nearest first."""
        found: List[_Cut] = []
        todo = [(name, before) for name in names]
        while todo and len(self.seen) < MAX_STATEMENTS and len(found) < 5:
            name, line = todo.pop(0)
            stmt = assigned_before(self.path, line, name, line)
            if stmt is None:
                found = edits.assignments(self.path, line, name)
                stmt = found[-1] if found else None
            if stmt is None or stmt.lineno in self.seen:
                continue
            self.seen.add(stmt.lineno)
            self.trail.append(stmt)
            cut = self._at(stmt, name)
            if cut is not None:
                found.append(cut)
                continue
            for read in edits.read_names(getattr(stmt, "value", stmt) or stmt):
                value = self.values.get(read)
                if _plain_data(value):  # a number or list may have come out of a tensor
                    if not _made_here(self.path, stmt, read):
                        todo.append((read, stmt.lineno))
                elif isinstance(value, torch.Tensor) and not value.requires_grad:
                    if not _made_here(self.path, stmt, read):
                        todo.append((read, stmt.lineno))
                    if edits.assignments(self.path, stmt.lineno, read) == []:
                        self.sources.append((read, stmt.lineno))
                    elif read not in dict(self.sources):
                        made = edits.assignments(self.path, stmt.lineno, read)
                        self.sources.append((read, made[0].lineno))
        return sorted(found, key=lambda c: c.line, reverse=True)

    def _at(self, stmt: ast.stmt, name: str) -> Optional[_Cut]:
        """The cut this statement makes, if it makes one."""
        value = getattr(stmt, "value", None)
        if value is None:
            return None
        block = self._no_grad_block(stmt)
        wants, frozen = self._upstream(value)
        if block is not None and (wants or frozen):
            return _Cut("torch.no_grad()", self.path, block.lineno, self._outside(stmt, block))
        decorated = self._decorated(value)
        if decorated is not None:
            return decorated
        if wants:
            return self._operation(stmt, value, name)
        if frozen is not None:
            return self._frozen(*frozen)
        return None

    def _upstream(self, value: ast.AST) -> Tuple[bool, Optional[Tuple[str, Any]]]:
        """(whether it reads something that requires grad, a module it reads whose parameters
        are all frozen)."""
        wants, frozen = False, None
        for read in edits.read_names(value):
            v = self.values.get(read)
            if isinstance(v, torch.Tensor) and v.requires_grad:
                wants = True
            elif isinstance(v, torch.nn.Module):
                params = list(v.parameters())
                if any(p.requires_grad for p in params):
                    wants = True
                elif params and frozen is None:
                    frozen = (read, v)
        return wants, frozen

    def _no_grad_block(self, stmt: ast.stmt) -> Optional[ast.With]:
        scope = edits.enclosing_function(self.path, stmt.lineno)
        if scope is None:
            return None
        for node in ast.walk(scope):
            if isinstance(node, ast.With) and any(s is stmt for s in ast.walk(node)):
                for item in node.items:
                    call = item.context_expr
                    func = getattr(call, "func", None)
                    if (
                        getattr(func, "attr", None) in _GRAD_OFF
                        or getattr(func, "id", None) in _GRAD_OFF
                    ):
                        return node
        return None

    def _outside(self, stmt: ast.stmt, block: ast.With) -> Optional[Fix]:
        code = edits.statement_source(self.path, stmt.lineno)
        if code is None:
            return None
        if len(block.body) == 1:
            edit = edits.replace_nodes(self.path, block.lineno, [(block, code)])
            return (
                Fix(
                    text="compute it outside the `with torch.no_grad():` block at line "
                    f"{block.lineno}",
                    edits=(edit,),
                )
                if edit
                else None
            )
        gone = edits.delete(self.path, stmt.lineno)
        put = edits.insert_after(self.path, block.lineno, code)
        if gone is None or put is None:
            return None
        return Fix(
            text=f"move line {stmt.lineno} out of the `with torch.no_grad():` block at line "
            f"{block.lineno}",
            edits=(gone, put),
        )

    def _decorated(self, value: ast.AST) -> Optional[_Cut]:
        """A call to a function the recorder saw enter ``torch.no_grad()`` as a decorator."""
        kinds = {kind for kind, _, _, _ in self.rec.cuts if kind.startswith("@torch.no_grad()")}
        if not kinds:
            return None
        for node in ast.walk(value):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            fn = self.values.get(node.func.id)
            qual = getattr(fn, "__qualname__", None)
            if qual is None or f"@torch.no_grad() on {qual}" not in kinds:
                continue
            target = getattr(fn, "__wrapped__", fn)
            code = getattr(target, "__code__", None)
            if code is None:
                continue
            return _Cut(
                f"@torch.no_grad() on {qual}",
                code.co_filename,
                code.co_firstlineno,
                self._undecorate(code.co_filename, code.co_firstlineno, qual),
            )
        return None

    def _undecorate(self, path: str, line: int, qual: str) -> Optional[Fix]:
        node = edits.definition_at(path, line)
        for deco in getattr(node, "decorator_list", []):
            text = edits.segment(path, deco) or ""
            if ("no_grad" in text or "inference_mode" in text) and deco.lineno == deco.end_lineno:
                if edits.line_text(path, deco.lineno).strip() != f"@{text}":
                    continue  # not alone on its line: not an edit made safely
                edit = edits.make(path, deco.lineno, deco.lineno, "")
                return Fix(
                    text=f"take @torch.no_grad() off {qual} (line {deco.lineno}), or call the "
                    "model itself for the loss",
                    edits=(edit,),
                )
        return None

    def _operation(self, stmt: ast.stmt, value: ast.AST, name: str) -> _Cut:
        line = stmt.lineno
        for node in ast.walk(value):
            if isinstance(node, ast.Compare):
                return _Cut("a comparison", self.path, line)
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            attr = getattr(func, "attr", None) or getattr(func, "id", None)
            if attr in ("argmax", "argmin"):
                return _Cut(attr, self.path, line, self._soft(node, attr))
            if attr in _PYTHON or attr in ("float", "int") and isinstance(func, ast.Name):
                return _Cut(
                    f".{attr}()" if attr in _PYTHON else f"{attr}()",
                    self.path,
                    line,
                    self._python(node),
                )
            if attr == "detach":
                return _Cut("detach()", self.path, line, self._unwrap(node, "detach()"))
            if attr == "numpy":
                return _Cut(
                    ".numpy()",
                    self.path,
                    line,
                    Fix(
                        text="keep the computation in torch: a NumPy round trip makes a tensor "
                        "with no graph"
                    ),
                )
            if attr in _MAKERS:
                return _Cut(
                    f"torch.{attr}(...)" if attr in ("tensor", "as_tensor") else attr,
                    self.path,
                    line,
                    self._python(node),
                )
            if attr in _NO_GRADIENT:
                return _Cut(attr, self.path, line)
        for node in ast.walk(value):
            if isinstance(node, ast.Attribute) and node.attr == "data":
                return _Cut(".data", self.path, line, self._unwrap(node, ".data"))
        return _Cut("an operation without a gradient", self.path, line)

    def _soft(self, call: ast.Call, attr: str) -> Optional[Fix]:
        """``x.argmax(dim=1)`` -> the expected index under ``softmax`` (argmin: of ``-x``)."""
        func = call.func
        if not isinstance(func, ast.Attribute):
            return None
        x = edits.segment(self.path, func.value)
        dim = next(
            (edits.segment(self.path, k.value) for k in call.keywords if k.arg == "dim"), None
        )
        if dim is None and call.args:
            dim = edits.segment(self.path, call.args[0])
        if x is None or dim is None:
            return None
        scores = x if attr == "argmax" else f"(-{x})"
        soft = (
            f"({scores}.softmax(dim={dim}) * torch.arange({x}.shape[{dim}], device={x}.device))"
            f".sum(dim={dim})"
        )
        edit = edits.replace_nodes(self.path, call.lineno, [(call, soft)])
        if edit is None:
            return None
        return Fix(
            text=f"{attr} has no gradient: use the expected index under softmax instead (or "
            "train on the scores themselves, e.g. cross_entropy)",
            edits=(edit,),
        )

    def _unwrap(self, node: ast.AST, what: str) -> Optional[Fix]:
        inner = node.func.value if isinstance(node, ast.Call) else getattr(node, "value", None)
        text = None if inner is None else edits.segment(self.path, inner)
        if text is None:
            return None
        edit = edits.replace_nodes(self.path, node.lineno, [(node, text)])
        if edit is None:
            return None
        return Fix(
            text=f"remove {what} at line {node.lineno}: the loss needs the graph", edits=(edit,)
        )

    def _python(self, node: ast.Call) -> Optional[Fix]:
        """A round trip through Python numbers: keep the tensor, here and where it is made back
        into a tensor on the way to the loss."""
        made = []
        for stmt in self.trail:
            for call in ast.walk(stmt):
                if not isinstance(call, ast.Call):
                    continue
                func = call.func
                attr = getattr(func, "attr", None) or getattr(func, "id", None)
                if attr in _PYTHON and isinstance(func, ast.Attribute):
                    inner = edits.segment(self.path, func.value)
                elif attr in ("float", "int", "tensor", "as_tensor") and len(call.args) == 1:
                    inner = edits.segment(self.path, call.args[0])
                else:
                    continue
                if inner is not None:
                    made.append((stmt.lineno, call, inner))
        found = []
        for line in sorted({line for line, _, _ in made}):
            pairs = [(c, text) for n, c, text in made if n == line]
            pairs = [
                p for p in pairs if not any(p[0] is not q[0] and _inside(p[0], q[0]) for q in pairs)
            ]
            edit = edits.replace_nodes(self.path, line, pairs)
            if edit is not None:
                found.append(edit)
        if not found:
            return None
        return Fix(
            text="keep the tensor: no .item()/float() and no torch.tensor(...) on the way to "
            "the loss",
            edits=tuple(found),
        )

    def _frozen(self, read: str, module: Any) -> _Cut:
        keys = {storage_key(p) for p in module.parameters()}
        spots = [self.rec.taps.freezes[k] for k in keys if k in self.rec.taps.freezes]
        spot = spots[-1] if spots else None
        path, line = (spot[0], spot[1]) if spot else (self.path, 0)
        return _Cut(
            f"requires_grad=False on every parameter of {read}", path, line, self._thaw(path, line)
        )

    def _thaw(self, path: str, line: int) -> Optional[Fix]:
        """Unfreeze what an optimizer updates, right after the freezing."""
        if not line:
            return None
        optimizers = [v for v in self.values.values() if isinstance(v, torch.optim.Optimizer)]
        for opt in optimizers:
            params = [p for g in opt.param_groups for p in g["params"]]
            if not params or any(p.requires_grad for p in params):
                continue
            found = owner_of(params, self.frame)
            if found is None:
                continue
            owner = found[0]
            loop = edits.loop_around(path, line)
            inside = loop is not None and any(
                s is edits.statement_at(path, line) for s in getattr(loop, "body", [])
            )
            anchor = loop.lineno if inside else line
            code = f"for p in {owner}.parameters():\n    p.requires_grad = True"
            edit = edits.insert_after(path, anchor, code)
            if edit is not None:
                return Fix(
                    text=f"unfreeze what the optimizer updates ({owner}) after the freezing",
                    edits=(edit,),
                )
        return None


def _plain_data(value: Any) -> bool:
    """A Python number, or a list or tuple of them (what .item() and .tolist() make)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float, complex)):
        return True
    return (
        isinstance(value, (list, tuple))
        and 0 < len(value)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value[:16])
    )


def _inside(node: ast.AST, other: ast.AST) -> bool:
    return any(n is node for n in ast.walk(other))


def _made_here(path: str, stmt: ast.stmt, name: str) -> bool:
    return name in edits.bound_names(stmt)


__all__ = ["no_grad"]
