"""Python files as scenarios: ``snippet.py`` → the same ``Scenario`` records as YAML.

Each top-level statement is a step (a compound statement, with its
decorators, is one step; statements sharing a line are one step). A leading
run of import statements is the scenario's setup. A block of comments at
column 0 directly above a statement is its note, and its directive comments
(``# expect:``, ``# raises:``, ``# warns:``, ``# show:``, ``# graph:``) are the
step's declarations. The module docstring, or a header comment separated from
the code by a blank line, gives the title and description. Lines keep the
file's own numbers. The rules are documented in docs/scenario-format.md.
"""

from __future__ import annotations

import ast
import codecs
import io
import re
import tokenize
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

from .declared_names import scenario_classes, unknown_class
from ..errors import ScenarioError
from ..trace import Declared
from .spec import Code, Scenario, StepSpec

#: A directive comment: ``# expect: a._version == 1``.
DIRECTIVE_RE = re.compile(r"^#[ \t]*(expect|raises|warns|show|graph)[ \t]*:[ \t]?(.*)$")
_NAME_RE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\[(\d+|'[^']*'|\"[^\"]*\")\])*$"
)
_CLASS_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_CODING_RE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")

#: Makes the ScenarioError for a problem at (line, column) of the text being read.
ErrorAt = Callable[[str, Optional[int], Optional[int]], ScenarioError]


def loads_python(data: Union[str, bytes], path: str = "<string>") -> Scenario:
    """A ``.py`` file's text (the contents of a file called ``path``) as a scenario."""
    from .limits import MAX_EXPANDED_STEPS, compile_check

    text = decode_source(data, path, "Python file")

    def error(
        message: str, line: Optional[int] = None, column: Optional[int] = None
    ) -> ScenarioError:
        return ScenarioError(message, path=path, line=line, column=column)

    tree = parse_module(text, error)
    lines = text.splitlines()
    body = list(tree.body)
    title = description = None
    if body and _is_docstring(body[0]):
        doc = body.pop(0).value.value.strip()
        title, _, rest = doc.partition("\n")
        description = rest.strip() or None
    groups = _group(body)
    if not groups:
        raise error(
            "the file has no statements to run; write at least one, such as 'a = torch.ones(3)'"
        )
    every_comment = all_comments(text)
    comments = comment_lines(every_comment)
    used: set = set()
    blocks = [_block_above(start, comments, used) for start, _, _ in groups]
    setup_count = 0
    while setup_count < len(groups) and all(
        isinstance(s, (ast.Import, ast.ImportFrom)) for s in groups[setup_count][2]
    ):
        if any(DIRECTIVE_RE.match(t) for _, t in blocks[setup_count]):
            break
        setup_count += 1
    if setup_count == len(groups):
        setup_count = 0  # nothing but imports: they are what there is to trace
    if title is None and setup_count and blocks[0]:
        # comments right above the first import: the file's header, as there is no step
        # to give a note to
        body_lines = [
            _uncomment(t)
            for _, t in blocks[0]
            if not t.startswith("#!") and not _CODING_RE.match(t.encode("utf-8", "replace"))
        ]
        title = body_lines[0].strip() if body_lines else None
        description = "\n".join(body_lines[1:]).strip() or None
    if title is None:
        title, description = _header(comments, used, groups[0][0])
    refuse_stray_directives(every_comment, used, error)
    if len(groups) - setup_count > MAX_EXPANDED_STEPS:
        raise error(
            f"the file has {len(groups) - setup_count:,} top-level statements, "
            f"over the limit of {MAX_EXPANDED_STEPS:,} steps; "
            "split it into several files"
        )
    setup: Tuple[Code, ...] = ()
    if setup_count:
        setup = (_code(lines, groups[0][0], groups[setup_count - 1][1]),)
    steps = []
    all_fields = []
    for number, ((start, end, _), block) in enumerate(
        zip(groups[setup_count:], blocks[setup_count:]), start=1
    ):
        fields = read_directives(block, number, error)
        all_fields.append(fields)
        steps.append(fields.spec(number, _code(lines, start, end)))
    scenario = Scenario(
        title=(title or Path(path).name).strip() or Path(path).name,
        path=path,
        description=description,
        setup=setup,
        steps=tuple(steps),
        notices=_main_guard_notices(tree),
        script=True,
    )
    # The whole file compiled, so each step does on its own: only the expectations are new code.
    for spec in scenario.steps:
        for code in spec.expect:
            compile_check(code, "eval", path, f"an expectation of step {spec.index}")
    check_classes(scenario, all_fields, error, source=text)
    return scenario


# --- reading the text ---------------------------------------------------------------------


def decode_source(data: Union[str, bytes], path: str, what: str) -> str:
    """The text of a Python file or notebook: size, NUL bytes and encoding (PEP 263) checked."""
    from .limits import MAX_FILE_BYTES

    if isinstance(data, bytes):
        if len(data) > MAX_FILE_BYTES:
            raise ScenarioError(
                f"the text is over the {MAX_FILE_BYTES:,}-byte limit for scenario files", path=path
            )
        if b"\x00" in data:
            raise ScenarioError(f"this is a binary file, not a {what}", path=path)
        encoding = "utf-8-sig"
        if what == "Python file":
            for head in data.splitlines()[:2]:
                found = _CODING_RE.match(head)
                if found:
                    try:
                        encoding = codecs.lookup(found.group(1).decode("ascii")).name
                    except (LookupError, UnicodeDecodeError):
                        raise ScenarioError(
                            "the coding declaration names an unknown encoding "
                            f"{found.group(1).decode('ascii', 'replace')!r}; "
                            "save the file as UTF-8",
                            path=path,
                            line=data.splitlines().index(head) + 1,
                        ) from None
                    encoding = "utf-8-sig" if encoding == "utf-8" else encoding
                    break
        try:
            data = data.decode(encoding)
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            name = "UTF-8" if encoding == "utf-8-sig" else encoding
            raise ScenarioError(
                f"the file is not valid {name} text; save it as UTF-8",
                path=path,
                line=line,
                column=column,
            ) from None
    if "\x00" in data:
        raise ScenarioError(f"this is a binary file, not a {what}", path=path)
    if not data.strip():
        needed = (
            "at least one Python statement"
            if what == "Python file"
            else "a notebook with at least one code cell"
        )
        raise ScenarioError(
            f"the file is empty; write {needed}, such as 'a = torch.ones(3)'", path=path
        )
    return data


#: Characters that look like a space but that Python does not take as one.
_ODD_SPACES = {"\u3000", "\u00a0", "\u2002", "\u2003", "\u2009", "\u200b", "\ufeff", "\u202f"}


def parse_module(text: str, error: ErrorAt, what: str = "the file") -> ast.Module:
    """The syntax tree; a file Python cannot compile is one error at its line and column."""
    try:
        return compile(text, "<scenario>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        line, column = exc.lineno, exc.offset
        named = re.search(r"character U\+([0-9A-Fa-f]{4,6})", exc.msg or "")
        if named and chr(int(named.group(1), 16)) in _ODD_SPACES:
            ch = chr(int(named.group(1), 16))
            source = (
                text.splitlines()[line - 1] if line and 0 < line <= len(text.splitlines()) else ""
            )
            odd = source.find(ch) if ch in source else (column or 1) - 1
            name = unicodedata.name(ch, "an invisible character").lower()
            lead = " at the start of the line" if not source[:odd].strip() else ""
            origin = (
                " (common in code copied from Chinese or Japanese web pages)"
                if ch == "\u3000"
                else ""
            )
            raise error(
                f"{what} is not valid Python: the line has a U+{ord(ch):04X} "
                f"{name}{lead}{origin}, which Python does not "
                "take as a space; replace it with ordinary spaces",
                line,
                odd + 1,
            ) from None
        reason = exc.msg or "invalid syntax"
        if isinstance(exc, TabError):
            reason += "; indent with spaces only (or with tabs only), never a mix"
        raise error(f"{what} is not valid Python: {reason}", line, column) from None
    except ValueError as exc:
        raise error(f"{what} is not valid Python: {exc}", None, None) from None
    except (RecursionError, MemoryError):
        raise error(
            f"{what} is nested too deeply for Python to compile; split it into simpler statements",
            None,
            None,
        ) from None


def comment_lines(found: Dict[int, Tuple[int, str]]) -> Dict[int, str]:
    """Line number → text of each comment that starts at column 0 (only those make notes)."""
    return {line: text for line, (column, text) in found.items() if column == 0}


def all_comments(text: str) -> Dict[int, Tuple[int, str]]:
    """Line number → (column, text) of every comment, trailing ones included."""
    found: Dict[int, Tuple[int, str]] = {}
    if "#" not in text:
        return found
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                found[tok.start[0]] = (tok.start[1], tok.string.rstrip())
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # the file compiled; whatever tokenize still stumbles on has no comments to give
    return found


def refuse_stray_directives(found: Dict[int, Tuple[int, str]], used: set, error: ErrorAt) -> None:
    """A directive comment not directly above a statement would be ignored: refuse it."""
    for n, (column, comment) in sorted(found.items()):
        found = DIRECTIVE_RE.match(comment)
        if found and n not in used:
            raise error(
                f"'# {found.group(1)}:' applies to the statement directly below it, "
                "and this one has none; "
                "put it on a line of its own, at the start of the line, "
                "right above a top-level statement (no blank line between)",
                n,
                column + 1,
            )


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _group(body: List[ast.stmt]) -> List[Tuple[int, int, List[ast.stmt]]]:
    """(first line, last line, statements) of each step; statements sharing a line go together."""
    groups: List[Tuple[int, int, List[ast.stmt]]] = []
    for node in body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
        end = node.end_lineno or node.lineno
        if groups and start <= groups[-1][1]:
            first, last, nodes = groups[-1]
            groups[-1] = (first, max(last, end), nodes + [node])
        else:
            groups.append((start, end, [node]))
    return groups


def _code(lines: List[str], start: int, end: int) -> Code:
    return Code(text="\n".join(lines[start - 1 : end]) + "\n", line=start, column=1, block=True)


def _block_above(start: int, comments: Dict[int, str], used: set) -> List[Tuple[int, str]]:
    """The comment lines directly above line ``start`` (no blank line between), top first."""
    block = []
    line = start - 1
    while line in comments and line not in used:
        block.append((line, comments[line]))
        used.add(line)
        line -= 1
    return block[::-1]


def _header(
    comments: Dict[int, str], used: set, first_code: int
) -> Tuple[Optional[str], Optional[str]]:
    """Title and description from the top comment block, when a blank line sets it apart."""
    lines = sorted(n for n in comments if n < first_code and n not in used)
    texts = []
    for n in lines:
        text = comments[n]
        if n <= 2 and (text.startswith("#!") or _CODING_RE.match(text.encode("utf-8", "replace"))):
            used.add(n)
            continue
        if texts and n != texts[-1][0] + 1:
            break
        if DIRECTIVE_RE.match(text):
            break
        texts.append((n, text))
    if not texts:
        return None, None
    used.update(n for n, _ in texts)
    body = [_uncomment(t) for _, t in texts]
    title = body[0].strip()
    description = "\n".join(body[1:]).strip() or None
    return title or None, description


def _uncomment(text: str) -> str:
    text = text[1:]
    return text[1:] if text.startswith(" ") else text


def _main_guard_notices(tree: ast.Module) -> Tuple[str, ...]:
    """A notice for each ``if __name__ == "__main__":``: its body runs (a Python file's
    ``__name__`` is ``__main__``, as under ``python FILE``), as one step."""
    notes = []
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
        ):
            notes.append(
                f"line {node.lineno}: the body of 'if __name__ == \"__main__\":' runs as one "
                "step; move that code to the top level to trace it statement by statement"
            )
    return tuple(notes)


# --- directives ---------------------------------------------------------------------------


@dataclass
class StepFields:
    """What a step's comment block says: its note and declarations."""

    note: Optional[str] = None
    expect: List[Code] = field(default_factory=list)
    raises: Optional[Declared] = None
    warns: Optional[Declared] = None
    show: Optional[Tuple[str, ...]] = None
    graph: Union[None, bool, Tuple[str, ...]] = None
    # (name, is a warning, what, line, column)
    classes: List[Tuple[str, bool, str, int, int]] = field(default_factory=list)

    def spec(self, index: int, run: Code) -> StepSpec:
        return StepSpec(
            index=index,
            run=run,
            note=self.note,
            expect=tuple(self.expect),
            raises=self.raises,
            warns=self.warns,
            show=self.show,
            graph=self.graph,
        )


def read_directives(block: List[Tuple[int, str]], index: int, error: ErrorAt) -> StepFields:
    """The note and declarations of step ``index`` from its (line, text) comments at column 0."""
    fields = StepFields()
    note: List[str] = []
    for line, text in block:
        found = DIRECTIVE_RE.match(text)
        if not found:
            note.append(_uncomment(text))
            continue
        key, value = found.group(1), found.group(2).rstrip()
        column = found.start(2) + 1
        stripped = value.strip()
        column += len(value) - len(value.lstrip())
        what = f"'# {key}:' of step {index}"
        if not stripped:
            raise error(
                f"{what} is empty; write what it declares after the colon", line, found.end(1) + 2
            )
        if key == "expect":
            fields.expect.append(Code(text=stripped, line=line, column=column))
        elif key in ("raises", "warns"):
            if getattr(fields, key) is not None:
                raise error(
                    f"a step may declare '# {key}:' once; step {index} has a second one here",
                    line,
                    1,
                )
            setattr(
                fields, key, _declared(stripped, what, key == "warns", line, column, fields, error)
            )
        else:
            if (key == "show" and fields.show is not None) or (
                key == "graph" and fields.graph is not None
            ):
                raise error(
                    f"a step may declare '# {key}:' once; step {index} has a second one here",
                    line,
                    1,
                )
            if key == "graph" and stripped.lower() == "true":
                fields.graph = True
                continue
            names = tuple(n.strip() for n in stripped.split(","))
            for name in names:
                if not _NAME_RE.match(name):
                    raise error(
                        f"{name!r} in {what} is not a name (write a, lin.weight, xs[0] or d['k'])",
                        line,
                        column,
                    )
            setattr(fields, key, names)
    fields.note = "\n".join(note).strip() or None
    return fields


def _declared(
    value: str, what: str, warning: bool, line: int, column: int, fields: StepFields, error: ErrorAt
) -> Declared:
    """``RuntimeError`` or ``RuntimeError, match: does not require grad``."""
    name, sep, rest = value.partition(",")
    name = name.strip()
    match = None
    if sep:
        found = re.match(r"^[ \t]*match[ \t]*:[ \t]?(.*)$", rest)
        if not found or not found.group(1).strip():
            at = column + len(value) - len(rest) + len(rest) - len(rest.lstrip())
            raise error(
                f"{what}: after the class name, write ', match: <regular expression>'", line, at
            )
        match = found.group(1).strip()
        try:
            re.compile(match, re.DOTALL)
        except re.error as exc:
            raise error(
                f"the match of {what} is not a valid regular expression: {exc}",
                line,
                column + value.index(match),
            ) from None
    if not _CLASS_RE.match(name):
        raise error(
            f"{what}: {name!r} is not a class name such as RuntimeError or UserWarning",
            line,
            column,
        )
    fields.classes.append((name, warning, what, line, column))
    return Declared(type=name, match=match)


def check_classes(
    scenario: Scenario, all_fields: List[StepFields], error: ErrorAt, source: Optional[str] = None
) -> None:
    """Each declared class must be Python's, torch's, or one the file defines or imports."""
    if not any(fields.classes for fields in all_fields):
        return
    codes = (
        [source]
        if source is not None
        else [code.text for _, code, mode in scenario.all_code() if mode == "exec"]
    )
    own = scenario_classes(codes)
    for fields in all_fields:
        for name, warning, what, line, column in fields.classes:
            problem = unknown_class(name, warning, own)
            if problem is not None:
                raise error(f"{what}: {problem}", line, column)
