"""Scenario records: the immutable ``Scenario``, its steps and their code.

A ``Scenario`` is pure data, built by ``loader.py`` from a file and read by the
runner and the tracer. Variants live here too: ``${name}`` placeholders and
their substitution, which turns one scenario into one record per variant. The
contract is the scenario format, version 1 (see docs/scenario-format.md).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from ..errors import ScenarioError
from ..trace import Declared

_PLACEHOLDER_RE = re.compile(r"\$\$\{|\$\{([^}]*)\}")


@dataclass(frozen=True)
class Code:
    """A piece of Python taken from the file, and where its text starts there.

    ``line``/``column`` (1-based) locate the first character of the code;
    ``block`` is True for ``|``/``>`` block scalars, whose lines are all
    indented by ``column - 1`` spaces in the file.
    """

    text: str
    line: int
    column: int
    block: bool = False

    def locate(self, lineno: Optional[int], offset: Optional[int] = None) -> Tuple[int, int]:
        """Map a (line, column) inside ``text`` (1-based) to the file."""
        lineno = max(1, lineno or 1)
        offset = max(1, offset or 1)
        if self.block:
            return self.line + lineno - 1, self.column + offset - 1
        if lineno == 1:
            return self.line, self.column + offset - 1
        return self.line + lineno - 1, offset

    def with_text(self, text: str) -> "Code":
        return dataclasses.replace(self, text=text)

    def source(self, mode: str) -> str:
        """The text as it is compiled: an expression ('eval') without surrounding whitespace."""
        return self.text.strip() if mode == "eval" else self.text

    def locate_source(
        self, mode: str, lineno: Optional[int], offset: Optional[int] = None
    ) -> Tuple[int, int]:
        """Like ``locate``, for a (line, column) inside ``source(mode)``."""
        if mode != "eval":
            return self.locate(lineno, offset)
        lead = self.text[: len(self.text) - len(self.text.lstrip())]
        lineno, offset = max(1, lineno or 1), max(1, offset or 1)
        if lineno == 1:  # only the first line of the expression was shifted by the stripping
            offset += len(lead) - (lead.rfind("\n") + 1)
        return self.locate(lineno + lead.count("\n"), offset)


Declaration = Union[None, Declared, Dict[str, Optional[Declared]]]
Expectations = Union[Tuple[Code, ...], Dict[str, Tuple[Code, ...]]]


@dataclass(frozen=True)
class StepSpec:
    index: int  # 1-based
    run: Code
    note: Optional[str] = None
    expect: Expectations = ()
    raises: Declaration = None
    warns: Declaration = None
    show: Optional[Tuple[str, ...]] = None
    graph: Union[None, bool, Tuple[str, ...]] = None


@dataclass(frozen=True)
class LocalModule:
    """A module beside a Python file that its code imports (``localmods.py``): its name, its
    file (absolute) and its text."""

    name: str
    path: str
    source: str


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario. With ``variants``, call ``for_variant`` before tracing."""

    title: str
    path: Optional[str] = None
    description: Optional[str] = None
    tags: Tuple[str, ...] = ()
    seed: int = 0
    device: Optional[str] = None
    device_line: Optional[int] = None
    device_column: Optional[int] = None
    setup: Tuple[Code, ...] = ()
    show: Optional[Tuple[str, ...]] = None
    steps: Tuple[StepSpec, ...] = ()
    variants: Optional[Dict[str, Dict[str, str]]] = None
    variant: Optional[str] = None  # set on a resolved variant
    # Python files and notebooks (pyscenario.py, notebook.py): remarks shown with the trace (e.g. a
    # notebook's skipped magics), what safe mode refuses before running as (location, reason), and a
    # notebook's cell number for each step (whose lines then count from the top of its cell).
    notices: Tuple[str, ...] = ()
    refusals: Tuple[Tuple[str, str], ...] = ()
    cells: Tuple[int, ...] = ()
    # A Python file runs as ``python FILE ARGS`` would (``script.py``): ``__name__`` is
    # ``__main__``, and ``argv`` are its ARGS (``tensortrace run FILE -- ARGS``).
    script: bool = False
    argv: Tuple[str, ...] = ()
    modules: Tuple[LocalModule, ...] = ()  # the modules beside it that its code imports
    # names the command line asked to draw (``--graph``): drawn after the last step, and a
    # name never bound is blamed on the option, not on the file
    graph_option: Tuple[str, ...] = ()

    def place(self, code: Code, line: Optional[int], column: Optional[int]) -> Dict[str, object]:
        """The path, line and column of an error at (line, column) of the file.

        In a notebook, the cell too.
        """
        if self.cells:
            for spec in self.steps:
                expect = spec.expect if isinstance(spec.expect, tuple) else ()
                if code is spec.run or any(code is c for c in expect):
                    where = f"{self.path}: cell {self.cells[spec.index - 1]}, line {line}" + (
                        f", column {column}" if column else ""
                    )
                    return {"path": where}
        return {"path": self.path, "line": line, "column": column}

    def all_code(self) -> Iterator[Tuple[str, Code, str]]:
        """(what, code, mode) for the setup, every step and every expectation (of every variant)."""
        for code in self.setup:
            yield "setup", code, "exec"
        for spec in self.steps:
            yield f"step {spec.index}", spec.run, "exec"
            expect = spec.expect
            for code in sum(expect.values(), ()) if isinstance(expect, dict) else expect:
                yield f"an expectation of step {spec.index}", code, "eval"

    def map_text(self, change: Callable[[str], str]) -> "Scenario":
        """The same scenario with ``change`` applied to its code and notes.

        The code is the setup, the runs and the expectations.
        """

        def fill(code: Code) -> Code:
            text = change(code.text)
            return code if text == code.text else code.with_text(text)

        def expect(decl: Any) -> Any:
            if isinstance(decl, dict):
                return {key: tuple(fill(c) for c in codes) for key, codes in decl.items()}
            return tuple(fill(c) for c in decl)

        def step(spec: StepSpec) -> StepSpec:
            run, expected = fill(spec.run), expect(spec.expect)
            note = change(spec.note) if spec.note else spec.note
            if run is spec.run and expected == spec.expect and note == spec.note:
                return spec  # unchanged (the usual case): the same spec, not a copy
            return dataclasses.replace(spec, run=run, expect=expected, note=note)

        steps = tuple(step(spec) for spec in self.steps)
        return dataclasses.replace(self, setup=tuple(fill(c) for c in self.setup), steps=steps)

    def device_for(self, override: Optional[str]) -> str:
        """The device this scenario asks for: its own, else ``--device``, else cpu."""
        return self.device or override or "cpu"

    @property
    def variant_names(self) -> Tuple[str, ...]:
        return tuple(self.variants) if self.variants else ()

    def resolved(self) -> List["Scenario"]:
        """One scenario per variant (placeholders filled in), or [self]."""
        if not self.variants:
            return [self]
        return [self.for_variant(name) for name in self.variants]

    def for_variant(self, name: str) -> "Scenario":
        if not self.variants or name not in self.variants:
            known = ", ".join(self.variant_names) or "none"
            raise ScenarioError(f"no variant named {name!r} (variants: {known})", path=self.path)
        values = self.variants[name]

        def fill(code: Code) -> Code:
            return code.with_text(_substitute(code.text, values, self.path, code))

        steps = []
        for spec in self.steps:
            expect = spec.expect
            if isinstance(expect, dict):
                expect = tuple(expect.get("all", ())) + tuple(expect.get(name, ()))
            steps.append(
                dataclasses.replace(
                    spec,
                    run=fill(spec.run),
                    note=_substitute(spec.note, values, self.path, spec.run)
                    if spec.note
                    else spec.note,
                    expect=tuple(fill(c) for c in expect),
                    raises=_pick(spec.raises, name),
                    warns=_pick(spec.warns, name),
                )
            )
        result = dataclasses.replace(
            self,
            setup=tuple(fill(c) for c in self.setup),
            steps=tuple(steps),
            variants=None,
            variant=name,
        )
        return result


def _pick(decl: Declaration, variant: str) -> Optional[Declared]:
    if isinstance(decl, dict):
        if variant in decl:
            return decl[variant]
        return decl.get("all")
    return decl


def _substitute(text: str, values: Dict[str, str], path: Optional[str], code: Code) -> str:
    def repl(m: re.Match) -> str:
        if m.group(0) == "$${":
            return "${"
        key = m.group(1)
        if key not in values:
            line, column = code.locate(*position(text, m.start()))
            raise ScenarioError(
                f"placeholder ${{{key}}} has no value in this variant; "
                f"add '{key}: ...' to every variant",
                path=path,
                line=line,
                column=column,
            )
        return values[key]

    return _PLACEHOLDER_RE.sub(repl, text)


def placeholders_in(text: str) -> List[Tuple[str, int]]:
    """Each ``${name}`` used in the text, with its character offset."""
    return [(m.group(1), m.start()) for m in _PLACEHOLDER_RE.finditer(text) if m.group(0) != "$${"]


def position(text: str, offset: int) -> Tuple[int, int]:
    """1-based (line, column) of a character offset in text."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column
