"""What the Markdown page folds, as the console does, and how a reader unfolds it: ``<details>``.

A loop step's first pass (and any that differs in kind) is written in full and
the others are one line (``loops.loop_parts``), whose ``<details>`` holds what
they ran; a step that changed no tensor is one line whose ``<details>`` holds
its table; a model's parameters are one compact table (``layout.parameter_rows``).
``markdown.py`` lays out the page and calls these. Every text from the trace goes
through ``markdown_text``'s escaping, in a ``<summary>`` as HTML text.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence

from ..trace import Step
from .layout import PARAMETER_COLUMNS, Row
from .loops import drawn_flows, folded_line, iteration_heading, loop_parts
from .markdown_text import cell, code_block, code_span, no_html, plain_cell
from .ops import ops_lines
from .text import format_shape, format_version, fact_text, grad_norm


def details(summary: str, body: str) -> str:
    """``<details>`` whose ``<summary>`` is ``summary`` (plain text, escaped here) and whose
    body is Markdown, set apart by blank lines so that a table in it is still a table."""
    return f"<details><summary>{no_html(summary)}</summary>\n\n{body}\n\n</details>"


def ops_blocks(step: Step, level: str, iterations: str = "first") -> Iterable[str]:
    """What the step ran and each backward call's gradient flow, a loop's passes folded."""
    if level == "none":
        return
    parts = loop_parts(step, iterations)
    if parts is None:
        yield from _ran(step, level, "Ran:", 0, None)
        yield from _flows(step, 0, len(step.flow))
        return
    for part in parts:
        if part.kind == "folded":
            lines = ops_lines(step, level, *part.ops) if part.ops[1] > part.ops[0] else []
            line = folded_line(part)
            yield details(line, code_block("\n".join(lines), "text")) if lines else no_html(line)
        elif part.kind == "pass":
            yield from _ran(
                step,
                level,
                f"**{no_html(iteration_heading(part, step.loop))}**",
                *part.ops,
                always=True,
            )
            yield from _flows(step, *part.flows, part)
        else:
            head = "Ran:" if part.kind == "before" else "After the loop:"
            yield from _ran(step, level, head, *part.ops)
            yield from _flows(step, *part.flows)


def _ran(
    step: Step,
    level: str,
    head: str,
    start: int,
    stop: Optional[int],
    always: bool = False,
) -> Iterable[str]:
    lines = ops_lines(step, level, start, stop)
    if lines:
        yield head + "\n\n" + code_block("\n".join(lines), "text")
    elif always:
        yield head


def _flows(step: Step, start: int, stop: int, part=None) -> Iterable[str]:
    for drawn in drawn_flows(step, start, stop, part):
        if drawn.again is not None:
            yield no_html(drawn.again[:1].upper() + drawn.again[1:]) + "."
            continue
        heading = no_html(f"{drawn.head[:1].upper()}{drawn.head[1:]}")
        yield heading + "\n\n" + code_block("\n".join(drawn.tree), "text")


def parameter_table(rows: Sequence[Row]) -> str:
    """A model's parameters (and buffers), one line each: name, shape, version,
    requires_grad, the norm of the grad; a fact that changed in the step in bold."""
    lines = [
        "| " + " | ".join(PARAMETER_COLUMNS) + " |",
        "|---|---|--:|---|---|",
    ]
    for state, changed, new in rows:
        cells: List[str] = [cell(code_span(state.name) + (" *(new)*" if new else ""))]
        for field, text in (
            ("shape", format_shape(state.shape)),
            ("version", format_version(state.version)),
            ("requires_grad", fact_text(state, "requires_grad")),
            ("grad", grad_norm(state.grad)),
        ):
            cells.append(plain_cell(text, field in changed and not new))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["details", "ops_blocks", "parameter_table"]
