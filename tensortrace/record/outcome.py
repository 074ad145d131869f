"""How a step ended, as records: its error, its warnings, its output, each within bounds.

The tracer reads them from a step it ran; the snooper from an exception that
left the user's line. Both record the same ``ErrorInfo``, explanation
included, so a trace says the same thing about the same failure whoever made it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..trace import ErrorInfo, WarningInfo

MAX_STDOUT = 64 * 1024  # characters of a step's printed output
MAX_MESSAGE = 64 * 1024  # characters of one exception or warning message
MAX_WARNINGS = 200  # warnings recorded per step; the rest are counted


def bounded(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters with a note of how much was left out.

    A step may raise a 40 MB message; the trace keeps its head, which is where
    PyTorch puts what matters, and says that the rest was not recorded.
    """
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit:,} more characters not recorded)"


def exception_text(exc: object) -> str:
    """``str(exc)``, or what Python prints when that fails."""
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


def first_line(exc: BaseException) -> str:
    """The first line of what ``exc`` says: a failure's one-line summary."""
    text = exception_text(exc).strip()
    return text.splitlines()[0] if text else ""


def error_info(exc: BaseException, line: Optional[int]) -> ErrorInfo:
    """The record of an exception the code raised at ``line``, explained where we can."""
    from .explain import explain

    cls = type(exc)
    message = bounded(exception_text(exc), MAX_MESSAGE)
    return ErrorInfo(
        type=cls.__name__,
        qualname=f"{cls.__module__}.{cls.__qualname__}",
        message=message,
        line=line,
        explanation=explain(cls.__name__, message),
    )


def beside_the_scenario(error: ErrorInfo, exc: BaseException, path: Optional[str]) -> ErrorInfo:
    """``error`` of a missing module that sits beside the scenario file ``path``: never told
    to ``pip install`` it. A YAML scenario (or a notebook) does not import from its folder;
    only a Python file runs as ``python FILE`` does, its folder first on ``sys.path``."""
    name = getattr(exc, "name", None)
    if not isinstance(exc, ModuleNotFoundError) or not isinstance(name, str) or not path:
        return error
    import os

    from ..trace import Explanation, evolve

    top = name.split(".", 1)[0]
    folder = os.path.dirname(os.path.abspath(path))
    found = next(
        (
            each
            for each in (f"{top}.py", os.path.join(top, "__init__.py"))
            if os.path.isfile(os.path.join(folder, each))
        ),
        None,
    )
    if found is None:
        return error
    return evolve(
        error,
        explanation=Explanation(
            title=f"{top} is {found}, beside the scenario, not an installed module",
            what=(
                f"{found} sits in the scenario's folder ({folder}), but a YAML scenario or a "
                "notebook does not import from its folder: only a Python file runs as "
                "`python FILE` does, with its folder first on sys.path."
            ),
            fix=(
                f"Run the code as a .py file in that folder (tensortrace run FILE.py), which "
                f"imports {top} from there, or copy what the scenario needs from {found} into it."
            ),
            topic="missing-module",
        ),
    )


def raised_at(exc: BaseException, lines: Dict[str, Any]) -> Optional[int]:
    """The line of the step's own code where ``exc`` was raised, the innermost one.

    ``lines`` maps each compiled piece's file name to its ``Code`` (whose
    ``locate`` turns a line of the piece into a line of the file).
    """
    line = None
    tb = exc.__traceback__
    while tb is not None:
        code = lines.get(tb.tb_frame.f_code.co_filename)
        if code is not None:
            line = code.locate(tb.tb_lineno)[0]
        tb = tb.tb_next
    if line is None and isinstance(exc, SyntaxError) and exc.filename in lines:
        line = lines[exc.filename].locate(exc.lineno)[0]
    return line


def warning_records(
    caught: List[Any], lines: Dict[str, Any]
) -> Tuple[Tuple[WarningInfo, ...], List[Tuple[Any, str]]]:
    """The step's warnings as records (at most ``MAX_WARNINGS``, then one counting the rest),
    and each one's (category, message) for the step's declared ``warns``."""
    warns: List[WarningInfo] = []
    classes: List[Tuple[Any, str]] = []
    for w in caught:
        code = lines.get(w.filename)
        line = code.locate(w.lineno)[0] if code is not None else None
        if len(warns) < MAX_WARNINGS:
            message = bounded(exception_text(w.message), MAX_MESSAGE)
            warns.append(WarningInfo(category=w.category.__name__, message=message, line=line))
        elif len(warns) == MAX_WARNINGS:
            more = len(caught) - MAX_WARNINGS
            warns.append(
                WarningInfo(
                    category="tensortrace.Notice",
                    message=f"{more:,} more warnings in this step were not recorded",
                    line=None,
                )
            )
        classes.append((w.category, exception_text(w.message)))
    return tuple(warns), classes


__all__ = [
    "MAX_MESSAGE",
    "MAX_STDOUT",
    "MAX_WARNINGS",
    "bounded",
    "error_info",
    "exception_text",
    "first_line",
    "raised_at",
    "warning_records",
]
