"""What a scenario may hold, and the one check that a piece of its code compiles.

The readers of YAML files, ``.py`` files and notebooks share these, so that
each input is bounded alike and a syntax error points into the file the same
way whichever reader found it.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

from ..errors import ScenarioError
from .spec import Code, position

MAX_FILE_BYTES = 1024 * 1024
MAX_VARIANTS = 32  # side by side, more are unreadable; each is traced in a child of its own
MAX_EXPANDED_STEPS = 5000  # steps times variants: what the variants make the tool run
# What placeholders may make of a file: one text filled in, and all of them in every variant.
MAX_FILLED_TEXT = MAX_FILE_BYTES
MAX_FILLED_TOTAL = 16 * MAX_FILE_BYTES
# The longest number a scenario or notebook may write: a seed (2**64) has 20 digits.
# Python refuses to read a whole number past 4,300 digits, and one this long is a trap.
MAX_NUMBER_CHARS = 100


def compile_check(code: Code, mode: str, path: Optional[str], what: str) -> None:
    """``ScenarioError`` at the file's line and column unless ``code`` compiles in ``mode``."""
    try:
        compile(code.source(mode), f"<{what}>", mode, dont_inherit=True)
    except SyntaxError as exc:
        line, column = code.locate_source(mode, exc.lineno, exc.offset)
        # Python counts lines from the start of the step; the file counts from its top.
        reason = re.sub(
            r"\bon line (\d+)",
            lambda m: f"on line {code.locate_source(mode, int(m.group(1)))[0]}",
            exc.msg or "",
        )
        kind = "is not a valid Python expression" if mode == "eval" else "is not valid Python"
        comparison = _as_comparison(code.source(mode)) if mode == "eval" else None
        if comparison is not None:
            source, offset, suggestion = comparison
            line, column = code.locate_source(mode, *position(source, offset))
            reason = (
                "an expectation is an expression that must come out true, and '=' assigns; "
                f"compare with '==': {suggestion}"
            )
        raise ScenarioError(
            f"{what} {kind}: {reason}", path=path, line=line, column=column
        ) from None
    except ValueError as exc:  # e.g. source code string cannot contain null bytes
        raise ScenarioError(
            f"{what} is not valid Python: {exc}", path=path, line=code.line, column=code.column
        ) from None
    except (RecursionError, MemoryError):
        raise ScenarioError(
            f"{what} is nested too deeply for Python to compile; split it into simpler statements",
            path=path,
            line=code.line,
            column=code.column,
        ) from None


_LONE_EQUALS = re.compile(r"(?<![=!<>:])=(?!=)")


def _as_comparison(source: str) -> Optional[Tuple[str, int, str]]:
    """(source, offset of its '=', the expression with '==') when one '=' is all that is wrong."""
    found = list(_LONE_EQUALS.finditer(source))
    if len(found) != 1:
        return None
    at = found[0].start()
    candidate = f"{source[:at].rstrip()} == {source[at + 1 :].lstrip()}"
    try:
        compile(candidate, "<expectation>", "eval", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return source, at, candidate
