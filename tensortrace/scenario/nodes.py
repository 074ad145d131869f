"""Typed values out of composed YAML nodes, each error placed at the node it is about.

A scenario file is read from the node tree that :mod:`.yamlread` composes,
not from plain Python values, so that every value keeps its line and column
and every message can point at the place in the file. :class:`NodeReader`
holds the questions every part of the format asks of a node (is it a string,
a list of names, a piece of code? which keys does this mapping have, after
merge keys, and are any unknown or given twice?); the steps
(:mod:`.steps`) and the document (:mod:`.loader`) are built on it.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Dict, List, Optional, Tuple

import yaml

from ..errors import ScenarioError
from .limits import MAX_NUMBER_CHARS
from .spec import Code
from .yamlread import MERGE_TAG

_NAME_RE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\[(\d+|'[^']*'|\"[^\"]*\")\])*$"
)


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


class NodeReader:
    """Reads the composed YAML nodes of one file, so that every value keeps its position."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        # one per file: it remembers each node it constructed
        self._constructor = yaml.SafeLoader("")

    # errors ------------------------------------------------------------------
    def error(self, node: Optional[yaml.Node], message: str) -> ScenarioError:
        if node is None:
            return ScenarioError(message, path=self.path)
        return ScenarioError(
            message,
            path=self.path,
            line=node.start_mark.line + 1,
            column=node.start_mark.column + 1,
        )

    # scalar helpers ----------------------------------------------------------
    def scalar(self, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return node
        if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER_CHARS:
            raise self.error(
                node,
                f"this number is {len(node.value):,} characters long; a scenario's numbers "
                f"are at most {MAX_NUMBER_CHARS} (quote it to make it a string)",
            )
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            if "python/" in str(exc.problem):
                raise self.error(
                    node,
                    "YAML tags such as !!python/... are not allowed in scenario files "
                    "(they could run code)",
                ) from None
            raise self.error(node, f"invalid value: {exc.problem}") from None

    def kind(self, node: yaml.Node) -> str:
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        value = self.scalar(node)
        if value is None:
            return "empty"
        return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
            type(value), type(value).__name__
        )

    def string(self, node: yaml.Node, what: str) -> str:
        value = self.scalar(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, str):
            raise self.error(node, f"{what} must be a string, not {self.kind(node)}")
        return value

    def string_list(self, node: yaml.Node, what: str) -> Tuple[str, ...]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{what} must be a list of strings, not {self.kind(node)}")
        return tuple(self.string(item, f"each item of {what}") for item in node.value)

    def names(self, node: yaml.Node, what: str) -> Tuple[str, ...]:
        items = self.string_list(node, what) if isinstance(node, yaml.SequenceNode) else None
        if items is None:
            raise self.error(
                node,
                f"{what} must be a list of names such as [a, b, lin.weight], not {self.kind(node)}",
            )
        for item, item_node in zip(items, node.value):
            if not _NAME_RE.match(item.strip()):
                raise self.error(
                    item_node,
                    f"{item!r} in {what} is not a name (write a, lin.weight, xs[0] or d['k'])",
                )
        return tuple(i.strip() for i in items)

    def code(self, node: yaml.Node, what: str) -> Code:
        text = self.string(node, what)
        mark = node.start_mark
        style = getattr(node, "style", None)
        if style in ("|", ">"):
            first = mark.line + 1  # the block's text starts on the line after the indicator
            indent = 0
            for raw in self.lines[first:]:
                if raw.strip():
                    indent = len(raw) - len(raw.lstrip(" "))
                    break
            return Code(text=text, line=first + 1, column=indent + 1, block=True)
        column = mark.column + 1 + (1 if style in ("'", '"') else 0)
        return Code(text=text, line=mark.line + 1, column=column)

    def mapping(self, node: yaml.Node, what: str) -> Dict[str, Tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping, not {self.kind(node)}")
        result: Dict[str, Tuple[yaml.Node, yaml.Node]] = {}
        merged: List[Dict[str, Tuple[yaml.Node, yaml.Node]]] = []
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                merged.extend(self.merged(value_node, what))
                continue
            key = self.scalar(key_node)
            if not isinstance(key, str):
                raise self.error(
                    key_node, f"keys in {what} must be strings, not {self.kind(key_node)}"
                )
            if key in result:
                first = result[key][0].start_mark.line + 1
                raise self.error(
                    key_node, f"duplicate key {key!r} (first given on line {first}); keep only one"
                )
            result[key] = (key_node, value_node)
        # YAML's merge keys: the mapping's own keys win, then the merged
        # mappings in the order given. Merged values keep the lines where
        # they are written, so that messages point there.
        for source in merged:
            for key, pair in source.items():
                result.setdefault(key, pair)
        return result

    def merged(self, node: yaml.Node, what: str) -> List[Dict[str, Tuple[yaml.Node, yaml.Node]]]:
        """The mappings a merge key (``<<: *base`` or ``<<: [*a, *b]``) brings in."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        out = []
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                raise self.error(
                    source,
                    f"a merge key ('<<') in {what} must name a mapping, not {self.kind(source)}",
                )
            out.append(self.mapping(source, what))
        return out

    def check_keys(
        self, fields: Dict[str, Tuple[yaml.Node, yaml.Node]], allowed: Tuple[str, ...], what: str
    ) -> None:
        for key, (key_node, _) in fields.items():
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = (
                    f"; did you mean {close[0]!r}?"
                    if close
                    else f" (allowed: {', '.join(allowed)})"
                )
                raise self.error(key_node, f"unknown key {key!r} in {what}{hint}")

    def optional_string(self, node: Optional[yaml.Node], what: str) -> Optional[str]:
        if node is None:
            return None
        if isinstance(node, yaml.ScalarNode) and self.scalar(node) is None:
            return None
        return self.string(node, what)
