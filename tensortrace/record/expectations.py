"""Expectations and declarations: did the step behave as its scenario said it would.

``evaluate_expectation`` runs one ``expect`` expression after its step (rule 2
of the format) and, for a failed single comparison, keeps both sides' reprs.
``declared_outcome`` compares what a step raised and warned with its
``raises`` and ``warns`` (rules 4 to 6). Neither records tensors: that is the
tracer's job.
"""

from __future__ import annotations

import ast
import contextlib
import io
import operator
import re
import types
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import StepTimeout
from ..trace import Declared, ErrorInfo, ExpectationResult, WarningInfo
from ..scenario.spec import Code, StepSpec

MAX_REPR = 300


def evaluate_expectation(
    code: Code,
    index: int,
    ns: Dict[str, Any],
    compile_code: Callable[[Code, str, str], types.CodeType],
) -> ExpectationResult:
    """Evaluate one expectation in ``ns``; its warnings and output are not the step's (rule 6)."""
    expr = code.text.strip()
    filename = f"<expect {index}>"
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        parts = _split_comparison(expr)
        try:
            if parts is None:
                value = eval(compile_code(code, filename, "eval"), ns)
                if bool(value):
                    return ExpectationResult(expr=expr, passed=True, line=code.line)
                return ExpectationResult(
                    expr=expr, passed=False, line=code.line, value=short_repr(value)
                )
            left_src, op_name, right_src = parts
            left = eval(compile_code(code.with_text(left_src), filename, "eval"), ns)
            right = eval(compile_code(code.with_text(right_src), filename, "eval"), ns)
            passed = bool(_COMPARE[op_name](left, right))
            if passed:
                return ExpectationResult(expr=expr, passed=True, line=code.line)
            return ExpectationResult(
                expr=expr,
                passed=False,
                line=code.line,
                op=op_name,
                left=short_repr(left),
                right=short_repr(right),
            )
        except (KeyboardInterrupt, StepTimeout):
            raise
        except BaseException as exc:
            return ExpectationResult(
                expr=expr,
                passed=False,
                line=code.line,
                error=f"{type(exc).__name__}: {first_line(str(exc))}",
            )


def declared_outcome(
    spec: StepSpec,
    status: str,
    error: Optional[ErrorInfo],
    warns: Sequence[WarningInfo],
    classes: Dict[str, Any],
) -> Tuple[bool, bool, List[str]]:
    """Whether the declared exception and warning happened, and every way the step misbehaved."""
    raises = spec.raises if isinstance(spec.raises, Declared) else None
    warned = spec.warns if isinstance(spec.warns, Declared) else None
    raised_ok = bool(
        raises is not None
        and status == "raised"
        and raises.type in class_names(classes["error"])
        and _message_matches(raises.match, error.message)
    )
    warned_ok = bool(
        warned is not None
        and any(
            warned.type in class_names(cls) and _message_matches(warned.match, message)
            for cls, message in classes["warnings"]
        )
    )
    failures: List[str] = []
    if status == "timeout":
        failures.append(error.message)
    elif raises is None and error is not None:
        failures.append(f"raised {error.type}: {first_line(error.message)}")
    elif raises is not None and error is None:
        failures.append(f"expected {_declared_text(raises)}, but nothing was raised")
    elif raises is not None and not raised_ok:
        failures.append(
            f"expected {_declared_text(raises)}, "
            f"but it raised {error.type}: {first_line(error.message)}"
        )
    if warned is not None and not warned_ok and status != "timeout":
        got = ", ".join(sorted({w.category for w in warns})) or "no warning"
        failures.append(f"expected warning {_declared_text(warned)}, but got {got}")
    return raised_ok, warned_ok, failures


_COMPARE: Dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "is": operator.is_,
    "is not": operator.is_not,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
}
_OP_NAMES = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}


def _split_comparison(expr: str) -> Optional[Tuple[str, str, str]]:
    """``left op right`` of a single comparison, so failed values can be shown."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None
    node = tree.body
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return None
    left = ast.get_source_segment(expr, node.left)
    right = ast.get_source_segment(expr, node.comparators[0])
    if left is None or right is None:
        return None
    return f"({left})", _OP_NAMES[type(node.ops[0])], f"({right})"


def short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<unprintable {type(value).__name__}: {exc}>"
    text = re.sub(r"\s*\n\s*", " ", text)
    return text if len(text) <= MAX_REPR else text[: MAX_REPR - 1] + "…"


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _declared_text(decl: Declared) -> str:
    return f"{decl.type} matching {decl.match!r}" if decl.match else decl.type


def _message_matches(pattern: Optional[str], message: str) -> bool:
    return pattern is None or re.search(pattern, message, re.DOTALL) is not None


def class_names(cls: type) -> Tuple[str, ...]:
    """Every name a declaration may use for this class.

    That is ``__name__`` and ``module.qualname`` of it and of its bases.
    """
    names: List[str] = []
    for klass in getattr(cls, "__mro__", (cls,)):
        names.append(klass.__name__)
        names.append(f"{klass.__module__}.{klass.__qualname__}")
    return tuple(names)
