"""Fixes for a NaN or Inf, as edits of one line of the user's code (``Edit``).

Each fix is made from the text of the line the report names, parsed with
``ast`` (a line that does not parse alone, part of a statement over several
lines, gets the fix as words only, without an edit): the call or operator
that ran the operation is found on the line, and only its source span is
rewritten, so the rest of the line stays as written. The edit says which
text it replaces, so that a tool applying it to a copy of the script can
tell when the file has changed since.

The fixes, by cause: a small floor or epsilon (``clamp_min``, ``+ eps``)
where a value reaches a pole (log, division, sqrt); ``log_softmax`` for the
log of a softmax; ``torch.linalg.vector_norm`` for the square root of a sum
of squares (its gradient at 0 is 0); a smaller learning rate or gradient
clipping for a divergence; ``torch.nan_to_num`` only where a NaN means
"nothing" (a fully masked row of attention, a missing value in the data).
"""

from __future__ import annotations

import ast
import linecache
import re
from typing import Any, List, Optional, Tuple

from ..trace.doctor import Edit, Fix
from .places import Spot, place

EPS = "1e-12"
_OPERATORS = {
    "div": ast.Div,
    "true_divide": ast.Div,
    "pow": ast.Pow,
    "mul": ast.Mult,
    "add": ast.Add,
    "sub": ast.Sub,
    "mm": ast.MatMult,
    "bmm": ast.MatMult,
    "addmm": ast.MatMult,
    "matmul": ast.MatMult,
}
_ALIASES = {
    "_softmax": ("softmax",),
    "_log_softmax": ("log_softmax", "cross_entropy"),
    "nll_loss_forward": ("nll_loss", "cross_entropy"),
    "nll_loss2d_forward": ("nll_loss", "cross_entropy"),
    "true_divide": ("div", "true_divide", "divide"),
    "div": ("div", "divide", "true_divide"),
    "addmm": ("linear", "addmm", "matmul", "mm"),
    "mm": ("mm", "matmul", "linear"),
    "pow": ("pow", "square"),
    "var_mean": ("var_mean", "var"),
    "std_mean": ("std_mean", "std"),
}


def base_op(op: str) -> str:
    """``aten.log_`` -> ``log``."""
    name = op.split(".")[-1]
    return name[:-1] if name.endswith("_") and not name.startswith("_") else name


class Line:
    """One line of the user's code, parsed: its indentation, text and tree (None when the line
    is not a statement on its own)."""

    def __init__(self, spot: Optional[Spot]) -> None:
        self.spot = spot
        self.raw = "" if spot is None else linecache.getline(spot[0], spot[1]).rstrip("\n")
        self.indent = self.raw[: len(self.raw) - len(self.raw.lstrip())]
        self.text = self.raw.strip()
        self.tree: Optional[ast.Module] = None
        if self.text:
            try:
                self.tree = ast.parse(self.text)
            except SyntaxError:
                self.tree = None

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""

    def span(self, node: ast.AST) -> Tuple[int, int]:
        """Character offsets of ``node`` in ``self.text`` (ast counts UTF-8 bytes)."""
        data = self.text.encode("utf-8")
        start = len(data[: node.col_offset].decode("utf-8", "replace"))
        end = len(data[: node.end_col_offset].decode("utf-8", "replace"))
        return start, end

    def edit(self, replacements: List[Tuple[ast.AST, str]]) -> Optional[Edit]:
        """The edit replacing each node's text by its new text (right to left)."""
        if self.spot is None or not replacements:
            return None
        text = self.text
        for node, new in sorted(replacements, key=lambda r: -self.span(r[0])[0]):
            start, end = self.span(node)
            text = text[:start] + new + text[end:]
        where = place(self.spot)
        return Edit(
            path=where.path if where else self.spot[0],
            line=self.spot[1],
            end=self.spot[1],
            text=self.indent + text,
            was=self.raw,
        )

    def insert_before(self, code: str) -> Optional[Edit]:
        if self.spot is None:
            return None
        where = place(self.spot)
        return Edit(
            path=where.path if where else self.spot[0],
            line=self.spot[1],
            end=self.spot[1] - 1,
            text=f"{self.indent}{code}",
        )


def _callee(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def find_call(line: Line, op: str) -> Optional[ast.AST]:
    """The call (``torch.log(p)``, ``p.log()``) or operator (``a / b``) on the line that ran
    ``op``; None when there is none, or more than one (which one ran cannot be told)."""
    if line.tree is None:
        return None
    name = base_op(op)
    names = (name,) + _ALIASES.get(name, ())
    operator = _OPERATORS.get(name)
    found = []
    for node in ast.walk(line.tree):
        if isinstance(node, ast.Call) and _callee(node) in names:
            found.append(node)
        elif (
            operator is not None
            and isinstance(node, (ast.BinOp, ast.AugAssign))
            and isinstance(node.op, operator)
        ):
            found.append(node)
    return found[0] if len(found) == 1 else None


def operand_texts(spot: Optional[Spot], op: str) -> List[Optional[str]]:
    """The source of each operand of the call that ran ``op``, in order (the tensor a method is
    called on first): ``s / s.sum(1)`` gives ``["s", "s.sum(1)"]``."""
    line = Line(spot)
    node = find_call(line, op)
    if node is None or (isinstance(node, ast.Call) and _callee(node) != base_op(op)):
        return []  # another call that ran it inside (cross_entropy for nll_loss): other operands
    found: List[Optional[str]] = []
    for position in range(8):
        arg = _argument(node, position)
        if arg is None:
            break
        found.append(None if isinstance(arg, ast.Constant) else line.segment(arg))
    return found


def is_whole_value(spot: Optional[Spot], op: str) -> bool:
    """Whether the call that ran ``op`` is the whole value the line assigns."""
    line = Line(spot)
    node = find_call(line, op)
    if node is None or line.tree is None or not line.tree.body:
        return False
    stmt = line.tree.body[0]
    return isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and (
        stmt.value is node or stmt is node
    )


def call_text(spot: Optional[Spot], op: str) -> Optional[str]:
    line = Line(spot)
    node = find_call(line, op)
    return line.segment(node) if node is not None else None


def _argument(node: ast.AST, position: int = 0) -> Optional[ast.AST]:
    """The operand at ``position`` of a call or operator: ``torch.f(x)`` and ``x.f()`` give x for
    0; ``a / b`` gives b for 1."""
    if isinstance(node, ast.BinOp):
        return node.left if position == 0 else node.right
    if isinstance(node, ast.AugAssign):
        return node.target if position == 0 else node.value
    if isinstance(node, ast.Call):
        f = node.func
        method = isinstance(f, ast.Attribute) and not _is_namespace(f.value)
        if method:
            if position == 0:
                return f.value
            position -= 1
        if position < len(node.args):
            return node.args[position]
    return None


def _is_namespace(node: ast.AST) -> bool:
    """``torch``, ``torch.special``, ``F``, ``np``: a module, not a tensor the method is on."""
    text = ast.unparse(node)
    return bool(re.fullmatch(r"(torch(\.\w+)*|F|nn\.functional|np|numpy|math)", text))


def _wrapped(text: str, method: str) -> str:
    """``text.method`` with parentheses where the precedence needs them."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return f"({text}).{method}"
    simple = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    return f"{text}.{method}" if simple else f"({text}).{method}"


def _fix(text: str, edit: Optional[Edit], code: str = "") -> Fix:
    """A fix in words, with its edit; the code in the words only when there is no edit to show
    it (a statement over several lines)."""
    if edit is None and code:
        text = f"{text}: {code}"
    return Fix(text=text, edits=() if edit is None else (edit,))


# --- the fixes, one builder per kind of cause -----------------------------------------------


def floor_operand(spot: Optional[Spot], op: str, position: int, floor: str = EPS) -> Optional[Fix]:
    """``torch.log(p)`` -> ``torch.log(p.clamp_min(1e-12))``; ``x / d`` -> ``x / d.clamp_min()``
    (the operand at ``position``)."""
    line = Line(spot)
    node = find_call(line, op)
    arg = None if node is None else _argument(node, position)
    if arg is None:
        return None
    old = line.segment(arg)
    new = _wrapped(old, f"clamp_min({floor})")
    return _fix(f"keep {old} at {floor} or more", line.edit([(arg, new)]), new)


def epsilon_inside(spot: Optional[Spot], op: str) -> Optional[Fix]:
    """``torch.sqrt(s)`` -> ``torch.sqrt(s + 1e-12)``; ``x ** 0.5`` -> ``(x + 1e-12) ** 0.5``."""
    line = Line(spot)
    node = find_call(line, op)
    arg = None if node is None else _argument(node, 0)
    if arg is None:
        return None
    old = line.segment(arg)
    inside = isinstance(node, ast.Call) and arg in node.args
    new = f"{old} + {EPS}" if inside else f"({old} + {EPS})"
    return _fix(
        "add a small epsilon inside, so that the slope stays finite at 0",
        line.edit([(arg, new)]),
        f"{old} + {EPS}",
    )


def vector_norm(spot: Optional[Spot], op: str) -> Optional[Fix]:
    """``torch.sqrt(((a - b) ** 2).sum(1))`` -> ``torch.linalg.vector_norm(a - b, dim=1)``, whose
    gradient at 0 is 0."""
    line = Line(spot)
    node = find_call(line, op)
    arg = None if node is None else _argument(node, 0)
    if not isinstance(arg, ast.Call) or _callee(arg) != "sum":
        return None
    summed = _argument(arg, 0)
    rest = arg.args[1:] if not _is_method(arg) else arg.args
    if not (
        isinstance(summed, ast.BinOp)
        and isinstance(summed.op, ast.Pow)
        and isinstance(summed.right, ast.Constant)
        and summed.right.value == 2
    ):
        return None
    parts = [line.segment(summed.left)]
    if rest:
        parts.append(f"dim={line.segment(rest[0])}")
    parts += [line.segment(k) for k in arg.keywords]
    new = f"torch.linalg.vector_norm({', '.join(parts)})"
    return _fix(
        "use torch.linalg.vector_norm: the same value, and its gradient at 0 is 0",
        line.edit([(node, new)]),
        new,
    )


def _is_method(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Attribute) and not _is_namespace(node.func.value)


def log_softmax(spot: Optional[Spot], op: str, producer_spot: Optional[Spot]) -> Optional[Fix]:
    """``torch.log(torch.softmax(z, 1))``, or ``torch.log(p)`` with ``p = torch.softmax(z, 1)``
    on an earlier line -> ``torch.log_softmax(z, 1)``: finite for finite logits."""
    line = Line(spot)
    node = find_call(line, op)
    arg = None if node is None else _argument(node, 0)
    soft: Optional[ast.Call] = None
    source = line
    if isinstance(arg, ast.Call) and _callee(arg) == "softmax":
        soft = arg
    elif producer_spot is not None and isinstance(arg, ast.Name):
        source = Line(producer_spot)
        soft = next(
            (
                n
                for n in ast.walk(source.tree)
                if source.tree is not None
                if isinstance(n, ast.Call) and _callee(n) == "softmax"
            ),
            None,
        )
    if node is None or soft is None:
        return None
    head = source.segment(soft.func)
    new = re.sub(r"softmax$", "log_softmax", head) + source.segment(soft)[len(head) :]
    return _fix(
        "take the log-probabilities with log_softmax: it never makes -inf from finite logits",
        line.edit([(node, new)]),
        new,
    )


def nonzero_divisor(spot: Optional[Spot], op: str) -> Optional[Fix]:
    """``x / d`` -> ``x / torch.where(d == 0, 1, d)``: the quotient where d is 0 becomes x."""
    line = Line(spot)
    node = find_call(line, op)
    arg = None if node is None else _argument(node, 1)
    if arg is None:
        return None
    old = line.segment(arg)
    new = f"torch.where({old} == 0, 1, {old})"
    return _fix(f"divide by 1 where {old} is 0", line.edit([(arg, new)]), new)


def add_keyword(spot: Optional[Spot], op: str, keyword: str, why: str) -> Optional[Fix]:
    """``x.var()`` -> ``x.var(correction=0)``."""
    line = Line(spot)
    node = find_call(line, op)
    if not isinstance(node, ast.Call):
        return None
    old = line.segment(node)
    if not old.endswith(")"):
        return None
    inner = old[old.index("(", len(line.segment(node.func))) + 1 : -1].strip()
    new = f"{old[:-1]}{', ' if inner else ''}{keyword})"
    return _fix(why, line.edit([(node, new)]), new)


def nan_to_num_around(spot: Optional[Spot], op: str, why: str) -> Optional[Fix]:
    """``torch.softmax(s, -1)`` -> ``torch.nan_to_num(torch.softmax(s, -1), nan=0.0)``."""
    line = Line(spot)
    node = find_call(line, op)
    if node is None:
        return None
    new = f"torch.nan_to_num({line.segment(node)}, nan=0.0)"
    return _fix(why, line.edit([(node, new)]), new)


def nan_to_num_operand(spot: Optional[Spot], name: str, why: str) -> Optional[Fix]:
    """``out = model(x)`` -> ``out = model(torch.nan_to_num(x))``: for data whose NaN mean
    missing values."""
    line = Line(spot)
    if line.tree is None:
        return None
    target = next(
        (
            n
            for n in ast.walk(line.tree)
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        ),
        None,
    )
    if target is None:
        return None
    new = f"torch.nan_to_num({name})"
    return _fix(why, line.edit([(target, new)]), new)


def exp_bounded(spot: Optional[Spot], op: str, limit: str) -> Optional[Fix]:
    line = Line(spot)
    node = find_call(line, op)
    arg = None if node is None else _argument(node, 0)
    if arg is None:
        return None
    old = line.segment(arg)
    new = _wrapped(old, f"clamp_max({limit})")
    return _fix("bound what goes into it", line.edit([(arg, new)]), new)


# --- a divergence: the optimizer's learning rate, or clipping ------------------------------


def smaller_lr(step: Any) -> Optional[Fix]:
    """The optimizer's construction with its ``lr`` divided by 10, where ``lr`` is a number
    written in the call (``SGD(model.parameters(), lr=5.0)``)."""
    if step is None or step.lr is None or step.spot is None:
        return None
    lower = _shorter(step.lr / 10)
    words = f"lower the learning rate (lr={_shorter(step.lr)} now), e.g. to {lower}"
    found = _constructor(step.spot[0], step.kind, step.lr)
    if found is None:
        return _fix(words, None)
    lineno, constant = found
    line = Line((step.spot[0], lineno, step.spot[2]))
    if line.tree is None:
        return _fix(words, None)
    node = _same_constant(line, constant)
    return _fix(words, line.edit([(node, lower)]) if node is not None else None)


def _shorter(value: float) -> str:
    return f"{value:.6g}" if "e" not in f"{value:.6g}" else repr(value)


def _constructor(path: str, kind: str, lr: float) -> Optional[Tuple[int, ast.Constant]]:
    """(line, the ``lr`` constant) of the call building an optimizer of class ``kind``."""
    source = "".join(linecache.getlines(path))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _callee(node) == kind):
            continue
        values = [k.value for k in node.keywords if k.arg == "lr"]
        if not values and len(node.args) > 1:
            values = [node.args[1]]
        for v in values:
            if isinstance(v, ast.Constant) and isinstance(v.value, (int, float)):
                if abs(float(v.value) - lr) <= 1e-12 * max(1.0, abs(lr)):
                    return v.lineno, v
    return None


def _same_constant(line: Line, constant: ast.Constant) -> Optional[ast.AST]:
    for node in ast.walk(line.tree):
        if isinstance(node, ast.Constant) and node.value == constant.value:
            return node
    return None


def clip_gradients(step: Any) -> Optional[Fix]:
    """``torch.nn.utils.clip_grad_norm_(...)`` on the line before ``opt.step()``."""
    if step is None or step.spot is None:
        return None
    line = Line(step.spot)
    receiver = re.match(r"([A-Za-z_][\w.]*)\.step\s*\(", line.text)
    if receiver is None:
        return None
    params = f'[p for group in {receiver.group(1)}.param_groups for p in group["params"]]'
    code = f"torch.nn.utils.clip_grad_norm_({params}, max_norm=1.0)"
    words = "clip the gradients before the step (torch.nn.utils.clip_grad_norm_, max_norm=1.0)"
    imports_torch = re.search(
        r"^\s*import torch\b", "".join(linecache.getlines(step.spot[0])), re.M
    )
    return _fix(words, line.insert_before(code) if imports_torch else None)
