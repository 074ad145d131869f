"""The steps of a YAML scenario, their expectations and declarations, and its variants.

A step is code, or a mapping with ``run`` and the keys that say what the
step should show and do (``expect``, ``raises``, ``warns``, ``show``,
``graph``). Expectations and declarations may be given per variant, so the
variants are read here too, with the placeholders that must have a value in
each. Every check names the step and the key, at the node's line and column.
"""

from __future__ import annotations

import difflib
import re
from typing import Dict, List, Optional, Tuple, Union

import yaml

from ..errors import ScenarioError
from ..trace import Declared
from .limits import MAX_FILLED_TEXT, MAX_FILLED_TOTAL, MAX_VARIANTS
from .nodes import NodeReader
from .spec import Code, Declaration, Expectations, Scenario, StepSpec, placeholders_in, position

STEP_KEYS = ("run", "note", "expect", "raises", "warns", "show", "graph")
RESERVED_VARIANT_NAMES = ("type", "match", "all")


class StepReader(NodeReader):
    """Reads steps and variants; remembers the class names they declare, to check at the end."""

    def __init__(self, path: str, text: str) -> None:
        super().__init__(path, text)
        # (node, name, what, is a warning): checked once the scenario's own classes are known
        self.class_names: List[Tuple[yaml.Node, str, str, bool]] = []

    def variants(self, node: yaml.Node) -> Dict[str, Dict[str, str]]:
        fields = self.mapping(node, "'variants'")
        if not fields:
            raise self.error(
                node, "'variants' is empty; give at least one variant or remove the key"
            )
        if len(fields) > MAX_VARIANTS:
            raise self.error(
                node,
                f"'variants' has {len(fields):,} variants, over the limit of {MAX_VARIANTS}; "
                "split the scenario into several files",
            )
        result: Dict[str, Dict[str, str]] = {}
        for name, (key_node, value_node) in fields.items():
            if name in RESERVED_VARIANT_NAMES:
                raise self.error(
                    key_node,
                    f"a variant cannot be named {name!r} (reserved: type, match, all); rename it",
                )
            if not re.match(r"^[A-Za-z0-9_.-]+$", name):
                raise self.error(
                    key_node,
                    f"variant name {name!r} may use only letters, digits, '_', '-' and '.'",
                )
            values = self.mapping(value_node, f"variant {name!r}")
            result[name] = {}
            for key, (_, v_node) in values.items():
                value = self.scalar(v_node) if isinstance(v_node, yaml.ScalarNode) else None
                if not isinstance(value, str):
                    raise self.error(
                        v_node,
                        f"the value of {key!r} in variant {name!r} must be a string, "
                        f"not {self.kind(v_node)}; "
                        'quote it (e.g. "0.10") so that YAML keeps it exactly as written',
                    )
                result[name][key] = value
        return result

    def check_placeholders(self, scenario: Scenario) -> None:
        """Every placeholder has a value in every variant, and what they make stays bounded.

        The size each text will have once filled in is counted before any is
        made: a short value used many times over could otherwise make gigabytes
        of code out of a small file.
        """
        variants = scenario.variants or {}
        total = 0
        texts = [(code, code.text, True) for _, code, _ in scenario.all_code()]
        texts += [(spec.run, spec.note, False) for spec in scenario.steps if spec.note]
        for code, text, is_code in texts:
            used = placeholders_in(text)
            if not used:
                continue
            for key, offset in used:
                for name, values in variants.items():
                    if is_code and key not in values:
                        line, column = code.locate(*position(text, offset))
                        raise ScenarioError(
                            f"placeholder ${{{key}}} has no value in variant {name!r}; "
                            f"add '{key}: ...' to it",
                            path=self.path,
                            line=line,
                            column=column,
                        )
            rest = len(text) - sum(len(key) + 3 for key, _ in used)
            for name, values in variants.items():
                size = rest + sum(len(values.get(key, "")) for key, _ in used)
                total += size
                if size > MAX_FILLED_TEXT or total > MAX_FILLED_TOTAL:
                    what = (
                        f"in variant {name!r} this text would be {size:,} characters long, "
                        f"over the limit of {MAX_FILLED_TEXT:,}"
                        if size > MAX_FILLED_TEXT
                        else f"the variants' filled-in code would be over {MAX_FILLED_TOTAL:,} "
                        "characters long"
                    )
                    raise ScenarioError(
                        f"placeholders make too much code: {what}; "
                        "use shorter values or fewer placeholders",
                        path=self.path,
                        line=code.line,
                        column=code.column,
                    )

    def step(
        self, index: int, node: yaml.Node, variants: Optional[Dict[str, Dict[str, str]]]
    ) -> StepSpec:
        if isinstance(node, yaml.ScalarNode):
            value = self.scalar(node)
            if isinstance(value, str) and not value.strip():
                raise self.error(node, f"step {index} is empty; give it some code, or remove it")
            if not isinstance(value, str):
                raise self.error(
                    node,
                    f"step {index} must be code (a string) or a mapping with 'run', "
                    f"not {self.kind(node)}",
                )
            return StepSpec(index=index, run=self.code(node, f"step {index}"))
        if not isinstance(node, yaml.MappingNode):
            raise self.error(
                node,
                f"step {index} must be code (a string) or a mapping with 'run', "
                f"not {self.kind(node)}",
            )
        fields = self.mapping(node, f"step {index}")
        if "run" not in fields:
            if len(fields) == 1 or not set(fields) & set(STEP_KEYS):
                raise self.error(
                    node,
                    f"step {index} has no 'run'; YAML read the step as a mapping "
                    "because it contains ': '. Quote the step, "
                    "or write it as 'run: |' followed by the code on the next lines",
                )
            raise self.error(
                node, f"step {index} has no 'run'; add 'run: <code>' with the step's Python code"
            )
        self.check_keys(fields, STEP_KEYS, f"step {index}")

        def get(key: str) -> Optional[yaml.Node]:
            return fields[key][1] if key in fields else None

        run = self.code(get("run"), f"'run' of step {index}")
        if not run.text.strip():
            raise self.error(get("run"), f"'run' of step {index} is empty; give the step some code")
        note = self.optional_string(get("note"), f"'note' of step {index}")
        expect = (
            self.expectations(get("expect"), index, variants) if get("expect") is not None else ()
        )
        raises = (
            self.declaration(get("raises"), "raises", index, variants)
            if get("raises") is not None
            else None
        )
        warns = (
            self.declaration(get("warns"), "warns", index, variants)
            if get("warns") is not None
            else None
        )
        show = (
            self.names(get("show"), f"'show' of step {index}") if get("show") is not None else None
        )
        graph: Union[None, bool, Tuple[str, ...]] = None
        if get("graph") is not None:
            g = get("graph")
            value = self.scalar(g) if isinstance(g, yaml.ScalarNode) else None
            if isinstance(value, bool):
                graph = value or None
            else:
                graph = self.names(g, f"'graph' of step {index}")
        return StepSpec(
            index=index,
            run=run,
            note=note,
            expect=expect,
            raises=raises,
            warns=warns,
            show=show,
            graph=graph,
        )

    def expectations(
        self, node: yaml.Node, index: int, variants: Optional[Dict[str, Dict[str, str]]]
    ) -> Expectations:
        what = f"'expect' of step {index}"
        if isinstance(node, yaml.MappingNode):
            fields = self.mapping(node, what)
            result: Dict[str, Tuple[Code, ...]] = {}
            for name, (key_node, value_node) in fields.items():
                self.check_variant_key(key_node, name, variants, what)
                result[name] = self.expectation_list(value_node, f"{what} for {name!r}")
            return result
        return self.expectation_list(node, what, variants)

    def expectation_list(
        self, node: yaml.Node, what: str, variants: Optional[Dict[str, Dict[str, str]]] = None
    ) -> Tuple[Code, ...]:
        if isinstance(node, yaml.ScalarNode) and isinstance(self.scalar(node), str):
            return (self.code(node, what),)
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(
                node, f"{what} must be a list of Python expressions, not {self.kind(node)}"
            )
        for item in node.value:
            if isinstance(item, yaml.MappingNode):
                raise self.error(item, self.mapping_item_hint(item, what, variants))
        return tuple(self.code(item, f"each item of {what}") for item in node.value)

    def mapping_item_hint(
        self, item: yaml.MappingNode, what: str, variants: Optional[Dict[str, Dict[str, str]]]
    ) -> str:
        """An expectation that YAML read as a mapping.

        Either per-variant ones written as list items, or an unquoted ': '.
        """
        keys = [self.scalar(k) for k, _ in item.value]
        if variants and keys and all(k == "all" or k in variants for k in keys):
            first = keys[0]
            return (
                f"each item of {what} must be an expression, not a mapping; "
                "to expect by variant, drop the '- ': "
                f"'expect:' takes one mapping, with '{first}:' (a variant name, or 'all') "
                "indented under it and holding a list of expressions"
            )
        return (
            f"each item of {what} must be an expression, not a mapping; "
            "YAML read ': ' as a key, so quote the expression"
        )

    def check_variant_key(
        self,
        key_node: yaml.Node,
        name: str,
        variants: Optional[Dict[str, Dict[str, str]]],
        what: str,
    ) -> None:
        if not variants:
            raise self.error(
                key_node, f"{what} is a mapping by variant name, but the scenario has no 'variants'"
            )
        if name != "all" and name not in variants:
            close = difflib.get_close_matches(name, list(variants), n=1)
            hint = (
                f"; did you mean {close[0]!r}?" if close else f" (variants: {', '.join(variants)})"
            )
            raise self.error(key_node, f"{what} names an unknown variant {name!r}{hint}")

    def declaration(
        self, node: yaml.Node, key: str, index: int, variants: Optional[Dict[str, Dict[str, str]]]
    ) -> Declaration:
        what = f"'{key}' of step {index}"
        if isinstance(node, yaml.MappingNode):
            fields = self.mapping(node, what)
            if set(fields) <= {"type", "match"}:
                return self.declared(node, what, key)
            result: Dict[str, Optional[Declared]] = {}
            for name, (key_node, value_node) in fields.items():
                if name in ("type", "match"):
                    raise self.error(
                        key_node, f"{what} mixes 'type'/'match' with variant names; use one form"
                    )
                self.check_variant_key(key_node, name, variants, what)
                result[name] = self.declared(value_node, f"{what} for {name!r}", key)
            return result
        return self.declared(node, what, key)

    def declared(self, node: yaml.Node, what: str, key: str) -> Declared:
        if isinstance(node, yaml.ScalarNode):
            name = self.string(node, what).strip()
            self.check_class_name(node, name, what, key == "warns")
            return Declared(type=name)
        fields = self.mapping(node, what)
        self.check_keys(fields, ("type", "match"), what)
        if "type" not in fields:
            raise self.error(node, f"{what} needs 'type', e.g. {{type: RuntimeError, match: ...}}")
        type_node = fields["type"][1]
        name = self.string(type_node, f"'type' in {what}").strip()
        self.check_class_name(type_node, name, what, key == "warns")
        match = None
        if "match" in fields:
            match_node = fields["match"][1]
            match = self.string(match_node, f"'match' in {what}")
            try:
                re.compile(match, re.DOTALL)
            except re.error as exc:
                raise self.error(
                    match_node, f"'match' in {what} is not a valid regular expression: {exc}"
                ) from None
        return Declared(type=name, match=match)

    def check_class_name(self, node: yaml.Node, name: str, what: str, warning: bool) -> None:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", name):
            raise self.error(
                node, f"{what}: {name!r} is not a class name such as RuntimeError or UserWarning"
            )
        self.class_names.append((node, name, what, warning))
