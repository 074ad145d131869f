"""A scenario file's YAML composed into nodes that keep their positions, or one clear refusal.

``compose_fast`` uses libyaml where it reads a text as PyYAML's pure-Python
reader does; ``compose`` is the pure-Python reader, whose errors it words as
``ScenarioError`` with line and column (a tab, a bad indentation, a
character YAML does not allow, nesting too deep). ``refuse_tags`` keeps
scenario files plain data, and ``refuse_expansion`` keeps what aliases and
merge keys make of them in proportion to the text. ``loader.py`` builds the
scenario from the nodes.
"""

from __future__ import annotations

import re
from typing import Optional

import yaml

from ..errors import ScenarioError
from .spec import position


_FAST_LOADER = getattr(yaml, "CSafeLoader", None)  # libyaml, where PyYAML was built with it
# libyaml composes nested nodes by recursing in C, past Python's recursion limit:
# 100,000 nested brackets crash the process. Only a text that cannot nest deeper
# than this goes to it (10,000 levels were measured to compose safely).
_FAST_DEPTH = 5000
# Where libyaml and the pure-Python reader were found to differ: libyaml takes a
# tab after a key and a byte-order mark inside the text, which the other refuses.
_UNLIKE = re.compile("[\t\ufeff]")


def _deepest(text: str) -> int:
    """A bound on how deep the text's nodes can nest: every level opens with a bracket,
    a brace, an indicator (``-``, ``?``, ``:``) or more indentation than the last."""
    indicators = sum(text.count(c) for c in "[{-?:")
    return indicators + max(map(len, text.splitlines()), default=0) + 1


def compose_fast(text: str) -> Optional[yaml.Node]:
    """The nodes as libyaml composes them, or None where the pure-Python reader must speak.

    libyaml composes the same nodes, marks and styles about ten times faster,
    says what is wrong in other words, places some empty nodes elsewhere, and
    takes some texts the other refuses (``_UNLIKE``). So a text it refuses,
    a text holding such a character or one the pure-Python reader refuses,
    and any scenario the builder refuses, is read again by ``compose``
    (``yaml.SafeLoader``), whose words and places every refusal uses.
    """
    if (
        _FAST_LOADER is None
        or _UNLIKE.search(text)
        or yaml.reader.Reader.NON_PRINTABLE.search(text)
        or _deepest(text) > _FAST_DEPTH
    ):
        return None
    loader = _FAST_LOADER(text)
    try:
        return loader.get_single_node()
    except (yaml.YAMLError, RecursionError):
        return None
    finally:
        loader.dispose()


def compose(text: str, path: str) -> yaml.Node:
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
    except yaml.reader.ReaderError as exc:
        line, column = (
            position(text, exc.position) if isinstance(exc.position, int) else (None, None)
        )
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise ScenarioError(
            f"the file contains the character {char!r} (U+{ord(char):04X}), "
            "which YAML does not allow; remove it",
            path=path,
            line=line,
            column=column,
        ) from None
    except RecursionError:
        raise ScenarioError(
            "the YAML is nested too deeply to read; flatten it", path=path
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if "python/" in str(problem) or "!!python" in str(problem):
            problem = (
                "YAML tags such as !!python/... are not allowed in scenario files "
                "(they could run code)"
            )
        elif mark is not None and str(exc.problem).startswith("expected <block end>"):
            problem = _indentation_problem(text, mark, exc.context, exc.context_mark)
        elif mark is not None and "found character '\\t'" in str(exc.problem):
            lines = text.splitlines()
            indenting = mark.line < len(lines) and not lines[mark.line][: mark.column].strip()
            where = (
                "a tab indents this line" if indenting else "a tab stands where YAML takes spaces"
            )
            problem = (
                f"{where}; YAML indents and separates with spaces only: replace the tab with spaces"
            )
        else:
            problem = f"invalid YAML: {problem}"
            if exc.context and exc.problem:
                started = exc.context_mark
                if started is not None and mark is not None and started.line != mark.line:
                    problem += (
                        f" ({exc.context} that starts at line {started.line + 1}, "
                        f"column {started.column + 1})"
                    )
                else:
                    problem += f" ({exc.context})"
        raise ScenarioError(
            problem,
            path=path,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"invalid YAML: {exc}", path=path) from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        raise ScenarioError(
            "the file is empty; a scenario needs at least 'title' and 'steps'", path=path
        )
    refuse_tags(node, path)
    refuse_expansion(node, path)
    return node


def _indentation_problem(
    text: str, mark: yaml.Mark, context: Optional[str], started: Optional[yaml.Mark]
) -> str:
    """PyYAML's "expected <block end>" said as what it is: a line indented out of step."""
    lines = text.splitlines()
    shown = lines[mark.line].strip() if mark.line < len(lines) else ""
    block = "list" if context and "collection" in context else "mapping"
    where = (
        f" that starts at line {started.line + 1}, column {started.column + 1}"
        if started is not None
        else ""
    )
    return (
        f"bad indentation: the line {shown!r} does not line up with the {block}{where}; "
        "indent it exactly as far as the keys or '- ' items it belongs with"
    )


_PLAIN_TAGS = {
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")
}
#: The tag of a merge key (``<<: *defaults``), allowed as a mapping key only.
MERGE_TAG = "tag:yaml.org,2002:merge"


def refuse_tags(root: yaml.Node, path: str) -> None:
    """Only plain YAML data: a ``!!python/...`` or custom tag is refused wherever it is."""
    stack = [root]
    seen = set()  # aliases make the node graph a DAG, or even cyclic: visit each node once
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag not in _PLAIN_TAGS:
            if "python/" in node.tag:
                message = (
                    "YAML tags such as !!python/... are not allowed in scenario files "
                    "(they could run code)"
                )
            else:
                message = (
                    f"the YAML tag {node.tag!r} is not allowed in scenario files; "
                    "write plain strings, numbers, lists and mappings"
                )
            raise ScenarioError(
                message, path=path, line=node.start_mark.line + 1, column=node.start_mark.column + 1
            )
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((value,) if key.tag == MERGE_TAG else (key, value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


#: Nodes a document may hold once its aliases and merge keys are expanded: more than
#: a 1 MiB file can write out (about two bytes a node), so that only aliases reach it.
MAX_EXPANDED_NODES = 1_000_000
#: Merge keys within merged mappings, this deep at most (the reader follows each level).
MAX_MERGE_DEPTH = 64


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def refuse_expansion(root: yaml.Node, path: str) -> None:
    """Refuse a document whose aliases and merge keys expand it out of proportion to its text.

    An alias is the node it names, so ``<<: [*a, *a]`` nested 40 times is a
    1 KB text that reads as 2**40 values, and ``&s {<<: *s}`` reads as itself
    forever. Each node's expanded size and merge depth is counted once, walking
    the composed nodes without recursion, before anything reads them.
    """
    size: dict = {}  # id -> expanded node count (capped just past the bound)
    merges: dict = {}  # id -> merge keys nested inside, deepest chain
    open_ = set()  # ids on the current path: meeting one again is a loop
    stack = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_.discard(key)
            kids = _children(node)
            total = 1 + sum(size[id(k)] for k in kids)
            depth = 0
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    depth = max(depth, merges[id(v)] + (k.tag == MERGE_TAG))
            else:
                depth = max((merges[id(k)] for k in kids), default=0)
            if total > MAX_EXPANDED_NODES:
                raise _expansion_error(
                    node,
                    path,
                    f"its aliases and merge keys ('<<') expand it to over "
                    f"{MAX_EXPANDED_NODES:,} values",
                )
            if depth > MAX_MERGE_DEPTH:
                raise _expansion_error(
                    node, path, f"merge keys ('<<') nest over {MAX_MERGE_DEPTH} levels deep"
                )
            size[key], merges[key] = total, depth
            continue
        if key in size:
            continue
        if key in open_:
            raise _expansion_error(
                node, path, "this node holds an alias of itself, so it never ends"
            )
        open_.add(key)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) in open_:
                raise _expansion_error(
                    kid, path, "this node holds an alias of itself, so it never ends"
                )
            if id(kid) not in size:
                stack.append((kid, False))


def _expansion_error(node: yaml.Node, path: str, problem: str) -> ScenarioError:
    return ScenarioError(
        f"{problem}; write the values out instead",
        path=path,
        line=node.start_mark.line + 1,
        column=node.start_mark.column + 1,
    )
