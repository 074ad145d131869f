"""Jupyter notebooks as scenarios: ``nb.ipynb`` → the same ``Scenario`` records as YAML.

Each non-empty code cell is a step; the markdown cell directly above it is
its note, and a first markdown cell that starts with a ``# heading`` gives the
title and description. Inside a cell, the comment lines directly above its
first statement take the same directives as a ``.py`` file (``# expect:``
...). A step's lines count from the top of its cell, and every message names
the cell and line (``nb.ipynb: cell 3, line 2``); cells are numbered from 1 in
file order, markdown cells included.

IPython syntax is not Python. A line magic (``%matplotlib inline``,
``x = %time f()``), shell line (``!pip install ...``) or help line
(``torch.ones?``) becomes ``pass`` in
the step's code; a cell magic (``%%time``) leaves its whole cell out. Safe
mode refuses to run such a notebook, naming the first of them (runs do not
skip code silently); with ``--trust`` the rest runs and the trace's notices
say what was skipped. Reading needs ``nbformat`` (the ``notebook`` extra).
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import List, Optional, Tuple, Union

from ..errors import ScenarioError
from .pyfile import (
    all_comments,
    StepFields,
    check_classes,
    comment_lines,
    decode_source,
    parse_module,
    read_directives,
    refuse_stray_directives,
)
from .spec import Code, Scenario

#: A line that IPython reads as a magic or shell command: ``%cmd``, ``!cmd``, or
#: ``x = %cmd`` / ``x = !cmd``.
_MAGIC_RE = re.compile(
    r"^([ \t]*)"
    r"(?:[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*)?"
    r"(%{1,2}|!(?!=))(.*)$"
)
#: IPython's help syntax: ``torch.ones?``, ``??a.add_``.
_HELP_RE = re.compile(r"^([ \t]*)(\?{0,2})[A-Za-z_][\w.]*(\?{0,2})[ \t]*$")
_HEADING_RE = re.compile(r"^#[ \t]+(.+?)[ \t#]*$")

MISSING_NBFORMAT = (
    "reading notebooks needs the nbformat package, which is not installed; "
    "install it with: pip install 'tensortrace[notebook]'"
)


def at(path: str, cell: int, line: Optional[int] = None, column: Optional[int] = None) -> str:
    """``nb.ipynb: cell 3, line 2, column 5``: a notebook's place, as every message names it."""
    where = f"{path}: cell {cell}"
    if line is not None:
        where += f", line {line}"
        if column is not None:
            where += f", column {column}"
    return where


def loads_notebook(data: Union[str, bytes], path: str = "<string>") -> Scenario:
    """A notebook's text (the contents of a file called ``path``) as a scenario."""
    from .limits import MAX_EXPANDED_STEPS

    cells = _cells(decode_source(data, path, "Jupyter notebook"), path)
    title = description = None
    first_markdown = 0
    if cells and cells[0][0] == "markdown":
        lines = cells[0][1].strip().splitlines()
        heading = _HEADING_RE.match(lines[0]) if lines else None
        if heading:
            title, description = heading.group(1), "\n".join(lines[1:]).strip() or None
            first_markdown = 1
    steps, numbers, notices, refusals = [], [], [], []
    note: Optional[str] = None
    for number, (kind, source) in enumerate(cells, start=1):
        if kind != "code":
            note = (
                source.strip() or None if kind == "markdown" and number > first_markdown else None
            )
            continue
        cell_note, note = note, None
        if not source.strip():
            continue
        if len(steps) >= MAX_EXPANDED_STEPS:
            raise ScenarioError(
                f"the notebook has over {MAX_EXPANDED_STEPS:,} code cells, the limit of steps; "
                "split it into several",
                path=path,
            )
        source = _without_magics(source, path, number, notices, refusals)
        if source is None:
            continue
        made = _step(source, path, number, len(steps) + 1, cell_note)
        if made is not None:
            steps.append(made)
            numbers.append(number)
    if not steps:
        raise ScenarioError(
            "the notebook has no code cells to run; add one, such as 'a = torch.ones(3)'", path=path
        )
    scenario = Scenario(
        title=title or Path(path).name,
        path=path,
        description=description,
        steps=tuple(spec for spec, _ in steps),
        notices=tuple(notices),
        refusals=tuple(refusals),
        cells=tuple(numbers),
    )
    _validate(scenario, [fields for _, fields in steps], path)
    return scenario


def _cells(text: str, path: str) -> List[Tuple[str, str]]:
    """(cell type, source) of each cell, in order."""
    try:
        import nbformat
    except ImportError:
        raise ScenarioError(MISSING_NBFORMAT, path=path) from None
    try:
        data = json.loads(text, parse_int=_bounded_int(path))
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"the notebook is not valid JSON: {exc.msg}",
            path=path,
            line=exc.lineno,
            column=exc.colno,
        ) from None
    except RecursionError:
        raise ScenarioError("the notebook's JSON is nested too deeply to read", path=path) from None
    if not isinstance(data, dict) or not isinstance(
        data.get("cells", data.get("worksheets")), list
    ):
        raise ScenarioError(
            "this JSON is not a Jupyter notebook: it has no list of 'cells'", path=path
        )
    try:
        # nbformat's remarks on old or odd notebooks (missing cell ids ...) are not the
        # user's concern
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            notebook = nbformat.reads(text, as_version=4)
        cells = [
            (str(cell.get("cell_type", "")), _source(cell.get("source", "")))
            for cell in notebook.cells
        ]
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds for a file that is JSON but no notebook
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ScenarioError(
            f"this JSON is not a Jupyter notebook that nbformat can read ({reason})", path=path
        ) from None
    return cells


def _bounded_int(path: str):
    """``int`` for the JSON reader, refusing a number longer than any notebook holds.

    Python refuses to read a whole number past 4,300 digits with a ``ValueError``
    that is no notebook's concern; a notebook's numbers (cell counts, versions)
    are short.
    """
    from .limits import MAX_NUMBER_CHARS

    def read(digits: str) -> int:
        if len(digits) > MAX_NUMBER_CHARS:
            raise ScenarioError(
                f"the notebook's JSON holds a number {len(digits):,} digits long; "
                f"a notebook's numbers are at most {MAX_NUMBER_CHARS}",
                path=path,
            )
        return int(digits)

    return read


def _source(value: object) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return str(value)


def _without_magics(
    source: str, path: str, cell: int, notices: List[str], refusals: List[Tuple[str, str]]
) -> Optional[str]:
    """The cell as Python: each IPython line ``pass``, or None for a cell magic's cell."""
    lines = source.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip())
    if lines[first].lstrip().startswith("%%"):
        magic = lines[first].strip()
        refusals.append(
            (
                at(path, cell, first + 1),
                f"{magic!r} is an IPython cell magic, not Python; safe mode refuses the notebook; "
                "remove it, or use --trust to skip its cell",
            )
        )
        notices.append(
            f"cell {cell} was skipped: it starts with the IPython cell magic {magic!r}, "
            "which is not Python"
        )
        return None
    try:
        compile(source, "<cell>", "exec", dont_inherit=True)
        return source  # valid Python: a '%' or '!' that starts a line is inside an expression
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    out = []
    for number, line in enumerate(lines, start=1):
        found = _MAGIC_RE.match(line)
        asked = _HELP_RE.match(line)
        if not found and not (asked and (asked.group(2) or asked.group(3))):
            out.append(line)
            continue
        if found:
            what = "a shell command" if found.group(2) == "!" else "an IPython line magic"
        else:
            found, what = asked, "IPython's help syntax"
        shown = line.strip()
        refusals.append(
            (
                at(path, cell, number, len(found.group(1)) + 1),
                f"{shown!r} is {what}, not Python; safe mode refuses the notebook; "
                "remove it, or use --trust to skip it",
            )
        )
        notices.append(f"cell {cell}, line {number}: {shown!r} was skipped ({what}, not Python)")
        out.append(f"{found.group(1)}pass  # skipped: {shown}")
    if all(
        not line.strip() or line.lstrip().startswith(("#", "pass  # skipped: ")) for line in out
    ):
        return None  # nothing but IPython lines (and comments): no step
    return "\n".join(out) + "\n"


def _step(
    source: str, path: str, cell: int, index: int, note: Optional[str]
) -> Optional[Tuple[object, StepFields]]:
    """The step a cell makes, with its directives; None for a cell of comments only."""

    def error(
        message: str, line: Optional[int] = None, column: Optional[int] = None
    ) -> ScenarioError:
        return ScenarioError(message, path=at(path, cell, line, column))

    tree = parse_module(source, error, what=f"cell {cell}")
    if not tree.body:
        return None
    lines = source.splitlines()
    start = min(
        [tree.body[0].lineno] + [d.lineno for d in getattr(tree.body[0], "decorator_list", ())]
    )
    every_comment = all_comments(source)
    comments = comment_lines(every_comment)
    block = []
    line = start - 1
    while line in comments:
        block.insert(0, (line, comments[line]))
        line -= 1
    refuse_stray_directives(every_comment, {n for n, _ in block}, error)
    fields = read_directives(block, index, error)
    fields.note = "\n\n".join(n for n in (note, fields.note) if n) or None
    code = Code(
        text="\n".join(lines[start - 1 :]).rstrip("\n") + "\n", line=start, column=1, block=True
    )
    return fields.spec(index, code), fields


def _validate(scenario: Scenario, all_fields: List[StepFields], path: str) -> None:
    """Expectations must compile and declared classes exist; errors name the cell."""
    from .limits import compile_check

    for spec, fields, cell in zip(scenario.steps, all_fields, scenario.cells):

        def error(
            message: str, line: Optional[int] = None, column: Optional[int] = None
        ) -> ScenarioError:
            return ScenarioError(message, path=at(path, cell, line, column))

        for code in spec.expect:
            try:
                compile_check(code, "eval", None, f"an expectation of step {spec.index}")
            except ScenarioError as exc:
                raise error(exc.message, exc.line, exc.column) from None
        check_classes(scenario, [fields], error)
