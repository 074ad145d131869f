"""Errors of autograd used the wrong way, read from the message, the line and its values.

* "grad can be implicitly created only for scalar outputs": ``backward()`` of a
  tensor of more than one element. Read inside the failing backward call, as
  ``diagnose.py``'s errors are: the tensor is one of backward's roots. The
  fixes reduce it to one number first, by its sum (each element's gradient
  then 1, as ``backward(torch.ones_like(out))`` gives) or its mean.
* "a leaf Variable that requires grad is being used in an in-place operation":
  an update written without ``torch.no_grad()``. It is raised by the write,
  not by a backward, so it is read after the run from the traceback: the
  innermost frame of the user's code is the line. When that line reads a
  ``.grad`` (an update), the fix puts it under ``with torch.no_grad():``;
  otherwise there is no edit to offer that keeps the leaf a leaf, and the
  report says what to do in words.
* ``w.grad`` read as None (``TypeError: ... 'NoneType'``, ``AttributeError:
  'NoneType' object ...``) where ``w`` is not a leaf: it was made by an
  operation (``torch.randn(3, requires_grad=True) * 0.01``, ``.to(device)``),
  so backward leaves its ``.grad`` None. Read after the run from the
  traceback's frame, whose values say which tensor it is; the fix makes it a
  leaf where it is assigned: ``w = (...).detach().requires_grad_()``.
* "Can't call numpy() on Tensor that requires grad": ``.detach()`` before each
  ``.numpy()`` of the line (NumPy keeps no graph).

Each fix is an edit, run on a copy before it is printed (``verify.py``).
"""

from __future__ import annotations

import ast
from typing import Any, List, Optional, Tuple

import torch

from . import edits
from .diagnose import at, backward_receiver, first_line, identity_name
from .places import is_user_code, place
from ..trace.doctor import Failure, Fix, Place

NOT_SCALAR = "grad can be implicitly created only for scalar outputs"
LEAF_IN_PLACE = "a leaf Variable that requires grad is being used in an in-place operation"
NUMPY_OF_GRAD = "Can't call numpy() on Tensor that requires grad"
_PRIMARY = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)  # take .method() with no brackets


def not_scalar(error: str, call: Any, roots: List[Any], frame: Any) -> Failure:
    """``out.backward()`` where ``out`` holds more than one number."""
    backward = place(call.spot)
    t = roots[0] if roots else None
    name = backward_receiver(backward) or identity_name(frame, t) or "the tensor"
    size = ""
    if t is not None:
        shape = "x".join(str(n) for n in t.shape) or "()"
        size = f" holds {t.numel():,} numbers (shape {shape})"
    call_name = "backward() without a gradient"
    if backward is not None and "autograd.grad(" in backward.code:
        call_name = "torch.autograd.grad without grad_outputs"
    headline = (
        f"{at(backward)}: {name}{size}, and {call_name} starts from one number: reduce it to "
        "the loss you mean first"
    )
    fixes: List[Fix] = []
    if backward is not None:
        for reduce, why in (
            ("sum", "each element's gradient is then 1, as backward(torch.ones_like(...)) gives"),
            ("mean", f"each element's gradient is then 1/{t.numel():,}" if t is not None else ""),
        ):
            edit = _reduced(backward, reduce)
            if edit is not None:
                text = f"start from the {reduce} of {name}" + (f" ({why})" if why else "")
                fixes.append(Fix(text=text, edits=(edit,)))
    return Failure(
        kind="not-scalar",
        headline=headline,
        error=error,
        backward=backward,
        backward_run=call.run,
        fixes=tuple(fixes),
    )


def _reduced(backward: Place, reduce: str) -> Any:
    """The backward line with the tensor it starts from reduced: ``out.sum().backward()``,
    ``torch.autograd.backward(out.sum())``, ``torch.autograd.grad(out.sum(), w)``; None for
    a call given its gradient."""
    for node in edits.nodes_in(backward.path, backward.line, ast.Call):
        func = getattr(node, "func", None)
        if not isinstance(func, ast.Attribute) or func.attr not in ("backward", "grad"):
            continue
        target = func.value
        if func.attr == "grad":  # torch.autograd.grad(out, inputs), without grad_outputs
            given = len(node.args) > 2 or any(
                k.arg in ("grad_outputs", None) for k in node.keywords
            )
            if not node.args or given:
                continue
            target = node.args[0]
        elif isinstance(func.value, ast.Attribute) and func.value.attr == "autograd":
            if not node.args or len(node.args) > 1 or node.keywords:
                continue  # torch.autograd.backward(out, grad): given its gradient
            target = node.args[0]
        elif node.args or any(kw.arg in ("gradient", None) for kw in node.keywords):
            continue  # out.backward(grad): given its gradient
        text = _receiver(backward.path, target)
        if text is None:
            continue
        return edits.replace_nodes(backward.path, backward.line, [(target, f"{text}.{reduce}()")])
    return None


def leaf_in_place(exc: Optional[BaseException]) -> Optional[Failure]:
    """The report of an in-place write into a leaf that requires grad, from its traceback."""
    if not isinstance(exc, RuntimeError) or LEAF_IN_PLACE not in str(exc):
        return None
    found = _user_frame(exc)
    if found is None:
        return None
    where = found[1]
    name = _written(where) or "a tensor"
    fixes: tuple = ()
    if ".grad" in where.code:
        headline = (
            f"{at(where)}: this update writes in place into {name}, a leaf that requires grad, "
            "while autograd is recording: put it under torch.no_grad()"
        )
        first, last = _update_block(where)
        edit = edits.wrapped(where.path, first, "with torch.no_grad():", last)
        if edit is not None:
            what = f"line {first}" if first == last else f"lines {first}-{last}"
            fixes = (Fix(text=f"put the update under torch.no_grad() ({what})", edits=(edit,)),)
    else:
        headline = (
            f"{at(where)}: this writes in place into {name}, a leaf that requires grad: to set "
            "its values, write under torch.no_grad(); to compute from it, write the result out "
            "of place to a new name (a leaf rebound to a result is no longer a leaf)"
        )
    return Failure(
        kind="leaf-in-place",
        headline=headline,
        error=first_line(str(exc)),
        backward=where,
        fixes=fixes,
    )


def non_leaf_grad(exc: Optional[BaseException]) -> Optional[Failure]:
    """The report of a ``.grad`` read as None from a tensor that is not a leaf."""
    if not isinstance(exc, (TypeError, AttributeError)) or "NoneType" not in str(exc):
        return None
    found = _user_frame(exc)
    if found is None:
        return None
    frame, where = found
    for name in _grad_reads(where):
        t = frame.f_locals.get(name, frame.f_globals.get(name))
        if not isinstance(t, torch.Tensor) or t.grad_fn is None or t.retains_grad:
            continue
        made = [s for s in edits.assignments(where.path, where.line, name) if s.lineno < where.line]
        stmt = made[-1] if made else None
        origin = "" if stmt is None else f" at line {stmt.lineno}"
        headline = (
            f"{at(where)}: {name}.grad is None because {name} is not a leaf: it is the result of "
            f"{t.grad_fn.name()}{origin}, and backward fills .grad only for leaves; make {name} a "
            "leaf where it is made"
        )
        fixes: tuple = ()
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            value = _receiver(where.path, stmt.value)
            if value is not None:
                edit = edits.replace_nodes(
                    where.path, stmt.lineno, [(stmt.value, f"{value}.detach().requires_grad_()")]
                )
                if edit is not None:
                    text = (
                        f"make {name} a leaf at line {stmt.lineno}: detach the result and ask "
                        "for its gradient"
                    )
                    fixes = (Fix(text=text, edits=(edit,)),)
        return Failure(
            kind="non-leaf-grad",
            headline=headline,
            error=first_line(f"{type(exc).__name__}: {exc}"),
            backward=where,
            fixes=fixes,
        )
    return None


def _receiver(path: str, node: ast.AST) -> Optional[str]:
    """``node``'s source as the receiver of a method call: in brackets unless it is a name,
    an attribute, a call or a subscript (``(a + b).sum()``, ``out.sum()``)."""
    text = edits.segment(path, node)
    if text is None or isinstance(node, _PRIMARY):
        return text
    return f"({text})"


def _user_frame(exc: BaseException) -> Optional[Tuple[Any, Place]]:
    """The innermost frame of the user's code in ``exc``'s traceback, and its line."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        if is_user_code(tb.tb_frame.f_code):
            found = (tb.tb_frame, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    frame, line = found
    where = place((frame.f_code.co_filename, line, frame.f_code.co_name))
    return None if where is None else (frame, where)


def _grad_reads(where: Place) -> List[str]:
    """The names whose ``.grad`` the line reads (``w`` of ``w -= lr * w.grad``)."""
    names = []
    for node in edits.nodes_in(where.path, where.line, ast.Attribute):
        value = getattr(node, "value", None)
        if getattr(node, "attr", None) == "grad" and isinstance(value, ast.Name):
            names.append(value.id)
    return list(dict.fromkeys(names))


def _update_block(where: Place) -> Tuple[int, int]:
    """The first and last lines of the statements around ``where`` that, like it, are simple
    statements reading a ``.grad``: the whole update (``w -= ...; b -= ...; w.grad.zero_()``)."""
    body = edits.enclosing_body(where.path, where.line) or []
    stmt = edits.statement_at(where.path, where.line)
    index = next((i for i, s in enumerate(body) if s is stmt), None)
    if index is None:
        return where.line, where.line

    def update(s: ast.stmt) -> bool:
        simple = isinstance(s, (ast.AugAssign, ast.Assign, ast.Expr))
        return simple and any(
            isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(s)
        )

    low = high = index
    while low > 0 and update(body[low - 1]):
        low -= 1
    while high + 1 < len(body) and update(body[high + 1]):
        high += 1
    return body[low].lineno, body[high].lineno


def _written(where: Place) -> Optional[str]:
    """What the line writes into: ``w`` of ``w -= ...``, ``w.add_(...)``, ``w[0] = ...``."""
    stmt = edits.statement_at(where.path, where.line)
    node: Any = None
    if isinstance(stmt, ast.AugAssign):
        node = stmt.target
    elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        node = stmt.targets[0]
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if isinstance(func, ast.Attribute) and func.attr.endswith("_"):
            node = func.value
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, (ast.Name, ast.Attribute)):
        return edits.segment(where.path, node)
    return None


def numpy_of_grad(exc: Optional[BaseException]) -> Optional[Failure]:
    """The report of ``.numpy()`` (or NumPy reading a tensor) refused for a tensor that
    requires grad: the line, and ``.detach()`` before each ``.numpy()`` on it."""
    if not isinstance(exc, RuntimeError) or NUMPY_OF_GRAD not in str(exc):
        return None
    found = _user_frame(exc)
    if found is None:
        return None
    frame, where = found
    pairs = []
    calls = sorted(
        edits.nodes_in(where.path, where.line, ast.Call),
        key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)),
    )
    for node in calls:
        func = getattr(node, "func", None)
        if isinstance(func, ast.Attribute) and func.attr == "numpy" and not node.args:
            value = func.value
            inner = getattr(value, "func", None)
            if isinstance(value, ast.Call) and getattr(inner, "attr", None) == "detach":
                continue
            if isinstance(value, ast.Name):  # a name: only a tensor that requires grad
                held = frame.f_locals.get(value.id, frame.f_globals.get(value.id))
                if not isinstance(held, torch.Tensor) or not held.requires_grad:
                    continue
            text = _receiver(where.path, value)
            if text is not None:
                pairs.append((value, text))
    fixes: tuple = ()
    edit = edits.replace_nodes(where.path, where.line, [(n, f"{t}.detach()") for n, t in pairs])
    if edit is not None:
        names = ", ".join(dict.fromkeys(t for _, t in pairs))
        fixes = (Fix(text=f"detach {names} before .numpy() (NumPy keeps no graph)", edits=(edit,)),)
    return Failure(
        kind="numpy-requires-grad",
        headline=(
            f"{at(where)}: NumPy cannot hold a tensor that requires grad; detach it first (the "
            "NumPy copy is then cut off the graph: compute what needs gradients in torch)"
        ),
        error=first_line(str(exc)),
        backward=where,
        fixes=fixes,
    )


def after_run(exc: Optional[BaseException]) -> Optional[Failure]:
    """The report of an error raised outside backward that this module reads, else None."""
    return leaf_in_place(exc) or non_leaf_grad(exc) or numpy_of_grad(exc)


__all__ = [
    "LEAF_IN_PLACE",
    "NOT_SCALAR",
    "after_run",
    "leaf_in_place",
    "non_leaf_grad",
    "not_scalar",
]
