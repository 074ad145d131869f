"""Fixes as code: edits of the statements at named lines of the user's files.

A fix doctor prints is made of ``Edit`` records (``trace/doctor.py``): lines
``line``..``end`` of a file become ``text``. They are built here from the
file's syntax tree, never by pasting text into a line: ``statement_at``
finds the statement a line belongs to (a call spread over several lines is
one statement), ``rewrite`` changes it through a syntax-tree transformer and
writes it back with ``ast.unparse`` at the statement's indentation, and
``insert_before``/``insert_after``/``move`` place whole statements. So an
edit never leaves a half statement behind, and what it writes parses.

``apply_edits`` makes the new text of a file (for a copy: doctor never writes
the user's files) and ``moved_line`` says where a line went, so that a check
can wait for the same backward call in the edited copy.
"""

from __future__ import annotations

import ast
import io
import os
import tokenize
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..trace.doctor import Edit

_TREES: Dict[str, Tuple[float, Optional[ast.Module], List[str]]] = {}


def read_source(path: str) -> Optional[str]:
    """The text of a Python file as Python reads it (PEP 263), or None."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
        return None


def _tree(path: str) -> Tuple[Optional[ast.Module], List[str]]:
    """The parsed file and its lines (cached while the file is unchanged)."""
    try:
        stamp = os.stat(path).st_mtime
    except OSError:
        return None, []
    known = _TREES.get(path)
    if known is not None and known[0] == stamp:
        return known[1], known[2]
    text = read_source(path)
    tree: Optional[ast.Module] = None
    lines: List[str] = []
    if text is not None:
        lines = text.splitlines()
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            tree = None
    if len(_TREES) > 64:
        _TREES.clear()
    _TREES[path] = (stamp, tree, lines)
    return tree, lines


def make(path: str, line: int, end: int, text: str) -> Edit:
    """An edit, with the lines it replaces as they are now."""
    was = "\n".join(line_text(path, n) for n in range(line, end + 1))
    return Edit(path=path, line=line, end=end, text=text, was=was)


def _real(path: str) -> str:
    return path if os.path.isabs(path) else os.path.abspath(path)


def statement_at(path: str, line: int) -> Optional[ast.stmt]:
    """The innermost statement that starts at ``line``, else the innermost one spanning it.

    A compound statement (``for``, ``with``, ``if``) counts only by its header lines:
    a line in its body belongs to a statement of the body."""
    tree, _ = _tree(_real(path))
    if tree is None:
        return None
    best: Optional[ast.stmt] = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        end = _header_end(node)
        if node.lineno <= line <= end:
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


def definition_at(path: str, line: int) -> Optional[ast.stmt]:
    """The function or class whose decorators or ``def`` line hold ``line``."""
    tree, _ = _tree(_real(path))
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            if first <= line <= node.lineno:
                return node
    return None


def _header_end(node: ast.stmt) -> int:
    """The last line of a statement that is not its body: a compound's header, else its end."""
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        return max(node.lineno, body[0].lineno - 1)
    return node.end_lineno or node.lineno


def line_text(path: str, line: int) -> str:
    """The text of one line of the file as it is on disk ('' when out of range)."""
    _, lines = _tree(_real(path))
    return lines[line - 1] if 0 < line <= len(lines) else ""


def indent_of(path: str, line: int) -> str:
    text = line_text(path, line)
    return text[: len(text) - len(text.lstrip())]


def enclosing_body(path: str, line: int) -> Optional[List[ast.stmt]]:
    """The list of statements (a block) the statement at ``line`` is part of."""
    tree, _ = _tree(_real(path))
    stmt = statement_at(path, line)
    if tree is None or stmt is None:
        return None
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(s is stmt for s in block):
                return block
    return None


def enclosing_function(path: str, line: int) -> Optional[ast.AST]:
    """The innermost function (or the module) whose code holds ``line``."""
    tree, _ = _tree(_real(path))
    if tree is None:
        return None
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is tree or node.lineno >= getattr(best, "lineno", 0):
                    best = node
    return best


def loop_around(path: str, line: int) -> Optional[ast.stmt]:
    """The innermost ``for``/``while`` loop whose body holds ``line``, in the same function."""
    scope = enclosing_function(path, line)
    if scope is None:
        return None
    best: Optional[ast.stmt] = None
    for node in _walk_scope(scope):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and node.body:
            if node.body[0].lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or node.lineno >= best.lineno:
                    best = node
    return best


def _walk_scope(scope: ast.AST):
    """The nodes of a function or module, without those of functions defined inside it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def assignments(path: str, line: int, name: str) -> List[ast.stmt]:
    """The statements of the function holding ``line`` that bind ``name``, in line order."""
    scope = enclosing_function(path, line)
    if scope is None:
        return []
    found = []
    for node in _walk_scope(scope):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.With)):
            if name in bound_names(node):
                found.append(node)
    return sorted(found, key=lambda n: n.lineno)


def bound_names(stmt: ast.AST) -> Tuple[str, ...]:
    """The plain names a statement binds (its targets)."""
    if isinstance(stmt, ast.Assign):
        targets: Sequence[ast.AST] = stmt.targets
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, ast.For):
        targets = [stmt.target]
    elif isinstance(stmt, ast.With):
        targets = [item.optional_vars for item in stmt.items if item.optional_vars is not None]
    else:
        return ()
    names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return tuple(dict.fromkeys(names))


def read_names(node: ast.AST) -> Tuple[str, ...]:
    """The plain names an expression or statement reads, in order of appearance."""
    found = [
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    ]
    return tuple(dict.fromkeys(found))


# --- making edits ------------------------------------------------------------------------


def _span(stmt: ast.stmt) -> Tuple[int, int]:
    return stmt.lineno, stmt.end_lineno or stmt.lineno


def _indented(code: str, indent: str) -> str:
    return "\n".join(indent + part if part.strip() else part for part in code.splitlines())


def _comment(path: str, stmt: ast.stmt) -> str:
    """A comment closing the statement's last line (kept by a rewrite), else ''."""
    start, end = _span(stmt)
    text = "\n".join(line_text(path, n).strip() for n in range(start, end + 1))
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return ""
    last = end - start + 1
    for tok in tokens:
        if tok.type == tokenize.COMMENT and tok.start[0] == last:
            return "  " + tok.string
    return ""


def rewrite(
    path: str, line: int, change: Callable[[ast.stmt], Optional[ast.stmt]]
) -> Optional[Edit]:
    """The statement at ``line`` rewritten by ``change`` (which gets a copy), or None when
    ``change`` returns None or leaves it as it was."""
    stmt = statement_at(path, line)
    if stmt is None or _header_end(stmt) != (stmt.end_lineno or stmt.lineno):
        return None  # only simple statements are rewritten whole
    before = ast.unparse(stmt)
    new = change(ast.parse(before).body[0])
    if new is None:
        return None
    after = ast.unparse(ast.fix_missing_locations(new))
    if after == before:
        return None
    start, end = _span(stmt)
    return make(
        path,
        start,
        end,
        _indented(after, indent_of(path, start)) + _comment(path, stmt),
    )


def insert_before(path: str, line: int, code: str) -> Optional[Edit]:
    """``code`` (whole statements) put before the statement at ``line``, at its indentation."""
    stmt = statement_at(path, line)
    if stmt is None or not _parses(code):
        return None
    start = stmt.lineno
    return make(path, start, start - 1, _indented(code, indent_of(path, start)))


def insert_after(path: str, line: int, code: str) -> Optional[Edit]:
    """``code`` put after the (whole) statement at ``line``, at its indentation."""
    stmt = statement_at(path, line)
    if stmt is None or not _parses(code):
        return None
    start, end = _span(stmt)
    return make(path, end + 1, end, _indented(code, indent_of(path, start)))


def delete(path: str, line: int) -> Optional[Edit]:
    stmt = statement_at(path, line)
    if stmt is None:
        return None
    start, end = _span(stmt)
    return make(path, start, end, "")


def wrapped(path: str, line: int, header: str, last: Optional[int] = None) -> Optional[Edit]:
    """The statement at ``line`` (through the one at ``last``, of the same block) put inside
    the block ``header`` opens (``with torch.no_grad():``), at the statement's indentation."""
    first = statement_at(path, line)
    final = first if last is None else statement_at(path, last)
    if first is None or final is None:
        return None
    start, end = first.lineno, _span(final)[1]
    indent = indent_of(path, start)
    code = f"{header}\n{_indented(_dedented(path, start, end), '    ')}"
    if not _parses(code):
        return None
    return make(path, start, end, _indented(code, indent))


def statement_source(path: str, line: int) -> Optional[str]:
    """The statement at ``line``, as its file writes it (dedented), or None."""
    stmt = statement_at(path, line)
    if stmt is None:
        return None
    return _dedented(path, *_span(stmt))


def _dedented(path: str, start: int, end: int) -> str:
    """Lines ``start``..``end`` less the indentation of the first."""
    indent = indent_of(path, start)
    lines = [line_text(path, n) for n in range(start, end + 1)]
    return "\n".join(part[len(indent) :] if part.startswith(indent) else part for part in lines)


def move(
    path: str, line: int, after: Optional[int] = None, before: Optional[int] = None
) -> Tuple[Edit, ...]:
    """The statement at ``line`` taken out and put after the statement at ``after`` (or before
    the one at ``before``); () when the two are not in the same block."""
    stmt = statement_at(path, line)
    anchor = statement_at(path, after if after is not None else before or 0)
    code = statement_source(path, line)
    if stmt is None or anchor is None or code is None or stmt is anchor:
        return ()
    block = enclosing_body(path, line)
    if block is None or not any(s is anchor for s in block):
        return ()
    put = (
        insert_after(path, anchor.lineno, code)
        if after is not None
        else insert_before(path, anchor.lineno, code)
    )
    gone = delete(path, line)
    if put is None or gone is None:
        return ()
    return (gone, put)


def move_block(
    path: str, first: int, last: int, after: Optional[int] = None, before: Optional[int] = None
) -> Tuple[Edit, ...]:
    """The statements from the one at ``first`` to the one at ``last`` (one block, in a row)
    moved after the statement at ``after`` (or before the one at ``before``)."""
    block = enclosing_body(path, first)
    head, tail = statement_at(path, first), statement_at(path, last)
    anchor = statement_at(path, after if after is not None else before or 0)
    if block is None or head is None or tail is None or anchor is None:
        return ()
    ids = [id(s) for s in block]
    if id(head) not in ids or id(tail) not in ids or id(anchor) not in ids:
        return ()
    lo, hi = ids.index(id(head)), ids.index(id(tail))
    if lo > hi or lo <= ids.index(id(anchor)) <= hi:
        return ()
    parts = [statement_source(path, s.lineno) for s in block[lo : hi + 1]]
    if any(p is None for p in parts):
        return ()
    code = "\n".join(p for p in parts if p is not None)
    put = (
        insert_after(path, anchor.lineno, code)
        if after is not None
        else insert_before(path, anchor.lineno, code)
    )
    start, end = head.lineno, tail.end_lineno or tail.lineno
    if put is None:
        return ()
    return (make(path, start, end, ""), put)


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


_VALUED = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)


class ReplaceName(ast.NodeTransformer):
    """Every read of ``name`` (outside nested functions) becomes ``expr`` (an expression)."""

    def __init__(self, name: str, expr: str) -> None:
        self.name, self.expr = name, expr
        self.count = 0

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.name and isinstance(node.ctx, ast.Load):
            self.count += 1
            return ast.copy_location(ast.parse(self.expr, mode="eval").body, node)
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node


def replace_reads(
    stmt: ast.stmt, name: str, expr: str, *, value_only: bool = True
) -> Optional[ast.stmt]:
    """``stmt`` with reads of ``name`` in its value replaced by ``expr``; None when it has none."""
    swap = ReplaceName(name, expr)
    if value_only and isinstance(stmt, _VALUED):
        if stmt.value is None:
            return None
        stmt.value = swap.visit(stmt.value)
    else:
        stmt = swap.visit(stmt)
    return stmt if swap.count else None


def segment(path: str, node: ast.AST) -> Optional[str]:
    """The source text of ``node`` (from this module's parse of ``path``), as written."""
    start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    if start is None or end is None:
        return None
    lines = [line_text(path, n).encode("utf-8") for n in range(start, end + 1)]
    if len(lines) == 1:
        return lines[0][node.col_offset : node.end_col_offset].decode("utf-8", "replace")
    lines[0] = lines[0][node.col_offset :]
    lines[-1] = lines[-1][: node.end_col_offset]
    return b"\n".join(lines).decode("utf-8", "replace")


def replace_nodes(path: str, line: int, pairs: Sequence[Tuple[ast.AST, str]]) -> Optional[Edit]:
    """The lines holding ``pairs``' nodes with each node's text replaced, the rest of the
    lines kept as written (comments, layout). Nodes come from ``statement_at`` and the other
    look-ups here, whose positions are those of the file on disk."""
    if not pairs:
        return None
    start = min(n.lineno for n, _ in pairs)
    end = max(n.end_lineno or n.lineno for n, _ in pairs)
    lines = [line_text(path, n).encode("utf-8") for n in range(start, end + 1)]
    ordered = sorted(pairs, key=lambda p: (p[0].lineno, p[0].col_offset), reverse=True)
    for node, code in ordered:
        first, last = node.lineno - start, (node.end_lineno or node.lineno) - start
        head = lines[first][: node.col_offset]
        tail = lines[last][node.end_col_offset :]
        lines[first : last + 1] = (head + code.encode("utf-8") + tail).split(b"\n")
    text = b"\n".join(lines).decode("utf-8", "replace")
    return make(path, start, end, text)


def nodes_in(path: str, line: int, kind: type = ast.AST) -> List[ast.AST]:
    """The nodes of kind ``kind`` inside the statement at ``line``."""
    stmt = statement_at(path, line)
    if stmt is None:
        return []
    top = stmt
    if _header_end(stmt) != (stmt.end_lineno or stmt.lineno):  # a compound: its header only
        top = ast.Module(body=[], type_ignores=[])
        heads = [getattr(stmt, f, None) for f in ("test", "iter", "target", "items")]
        top.body = [ast.Expr(h) for h in heads if isinstance(h, ast.AST)]
    return [n for n in ast.walk(top) if isinstance(n, kind)]


def with_keyword(path: str, call: ast.Call, keyword: str, value: str) -> Optional[Edit]:
    """``call`` given ``keyword=value`` (its value replaced when it already has one)."""
    for kw in call.keywords:
        if kw.arg == keyword:
            return replace_nodes(path, call.lineno, [(kw.value, value)])
    text = segment(path, call)
    if text is None or not text.endswith(")"):
        return None
    inner = text[:-1].rstrip()
    separator = "" if inner.endswith("(") else " " if inner.endswith(",") else ", "
    return replace_nodes(path, call.lineno, [(call, f"{inner}{separator}{keyword}={value})")])


def reads_replaced(path: str, line: int, name: str, expr: str) -> Optional[Edit]:
    """The statement at ``line`` with each read of ``name`` in it written ``expr``."""
    found = [
        n
        for n in nodes_in(path, line, ast.Name)
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
    ]
    return replace_nodes(path, line, [(n, expr) for n in found]) if found else None


# --- applying edits ----------------------------------------------------------------------


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """``text`` with ``edits`` made (they must not overlap); line numbers are the original's."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    for e in sorted(edits, key=lambda e: (e.line, e.end), reverse=True):
        new = [part + "\n" for part in e.text.split("\n")] if e.text else []
        lines[e.line - 1 : e.end] = new
    return "".join(lines)


def moved_line(line: int, edits: Sequence[Edit]) -> Optional[int]:
    """Where ``line`` of the original is after ``edits``; None when an edit replaced it."""
    shift = 0
    for e in edits:
        added = len(e.text.split("\n")) if e.text else 0
        removed = e.end - e.line + 1
        if e.line <= line <= e.end:
            if added == removed == 1:
                continue  # a one-line rewrite keeps its line
            return None
        if e.end < line:
            shift += added - removed
    return line + shift


def overlapping(edits: Sequence[Edit]) -> bool:
    """Whether two edits of one file touch the same lines."""
    spans = sorted((e.path, e.line, max(e.end, e.line - 1)) for e in edits)
    for (p1, _, e1), (p2, s2, _) in zip(spans, spans[1:]):
        if p1 == p2 and s2 <= e1:
            return True
    return False


__all__ = [
    "ReplaceName",
    "apply_edits",
    "assignments",
    "bound_names",
    "definition_at",
    "delete",
    "enclosing_body",
    "enclosing_function",
    "indent_of",
    "insert_after",
    "insert_before",
    "line_text",
    "loop_around",
    "make",
    "move",
    "move_block",
    "moved_line",
    "nodes_in",
    "reads_replaced",
    "replace_nodes",
    "segment",
    "with_keyword",
    "overlapping",
    "read_names",
    "read_source",
    "replace_reads",
    "rewrite",
    "statement_at",
    "statement_source",
    "wrapped",
]
