"""Scenario files: YAML text → validated, immutable ``Scenario`` records.

Everything a user can get wrong in a file is reported here, before anything
runs, as a ``ScenarioError`` naming file, line and column: decoding, YAML
syntax, tags (only plain data is allowed), duplicate and merge keys, the shape
of every key, and the Python of every step and expectation. The records
themselves live in ``scenario.py``. The contract is the scenario format,
version 1 (see docs/scenario-format.md).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import yaml

from .declared_names import scenario_classes, unknown_class
from .devices import DEVICE_RE as _DEVICE_RE
from .limits import MAX_EXPANDED_STEPS, MAX_FILE_BYTES, MAX_VARIANTS, compile_check
from ..errors import ScenarioError
from ..trace import Declared
from .spec import Code, Declaration, Expectations, Scenario, StepSpec, position, placeholders_in
from .yamlread import MERGE_TAG, compose, compose_fast, refuse_tags


TOP_LEVEL_KEYS = (
    "title",
    "description",
    "tags",
    "seed",
    "device",
    "setup",
    "show",
    "steps",
    "variants",
)
STEP_KEYS = ("run", "note", "expect", "raises", "warns", "show", "graph")
RESERVED_VARIANT_NAMES = ("type", "match", "all")
_NAME_RE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*|\[(\d+|'[^']*'|\"[^\"]*\")\])*$"
)


def load_scenario(path: Union[str, Path]) -> Scenario:
    """Read and validate a scenario file; ``ScenarioError`` says what is wrong and where.

    Only a regular file is read, and at most ``MAX_FILE_BYTES`` of it,
    wherever its links lead (see :mod:`tensortrace.scenario.inputs`). When a link
    leads out of the folder it sits in, an error names the file but quotes
    nothing of it: such a link may point at a private file.
    """
    from .inputs import TooLarge, Unreadable, leaves_folder, read_regular

    path = Path(path)
    shown = str(path)
    try:
        raw, real = read_regular(path, MAX_FILE_BYTES)
    except TooLarge as exc:
        raise ScenarioError(f"{exc}; split it into smaller scenarios", path=shown) from None
    except Unreadable as exc:
        raise ScenarioError(f"{exc}; give a .yaml, .py or .ipynb file", path=shown) from None
    except FileNotFoundError:
        raise ScenarioError(
            "no such file; check the path, or run 'tensortrace list' for bundled scenarios",
            path=shown,
        ) from None
    except PermissionError:
        raise ScenarioError("cannot be read (permission denied)", path=shown) from None
    except OSError as exc:
        raise ScenarioError(f"cannot be read: {exc.strerror or exc}", path=shown) from None
    try:
        return loads_scenario(raw, path=shown)
    except ScenarioError:
        if not leaves_folder(path, real):
            raise
        raise ScenarioError(
            f"is a link to {real}, outside its folder, and that file is not a valid scenario "
            "(nothing of it is quoted, since such a link may lead to a private file)",
            path=shown,
        ) from None


def loads_scenario(data: Union[str, bytes], path: str = "<string>") -> Scenario:
    """Parse scenario text (the contents of a file called ``path``)."""
    suffix = Path(path).suffix.lower()
    if suffix in (
        ".py",
        ".ipynb",
    ):  # Python files and notebooks: the same records, from their own readers
        from .notebook import loads_notebook
        from .pyfile import loads_python

        return (loads_python if suffix == ".py" else loads_notebook)(data, path)
    text = _decode(data, path)
    if not text.strip():
        raise ScenarioError(
            "the file is empty; a scenario needs at least 'title' and 'steps'", path=path
        )
    root = compose_fast(text)
    if root is not None:
        try:
            refuse_tags(root, path)
            return _Builder(path, text).scenario(root)
        except ScenarioError:
            pass  # refused: read again below, so that every refusal is worded and placed as the pure-Python reader sees it
    root = compose(text, path)
    return _Builder(path, text).scenario(root)


def _decode(data: Union[str, bytes], path: str) -> str:
    if isinstance(data, str):
        text = data
    else:
        if len(data) > MAX_FILE_BYTES:
            raise ScenarioError(
                f"the text is over the {MAX_FILE_BYTES:,}-byte limit for scenario files", path=path
            )
        if b"\x00" in data:
            raise ScenarioError("this is a binary file, not a YAML scenario", path=path)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            raise ScenarioError(
                "the file is not valid UTF-8 text; save it as UTF-8",
                path=path,
                line=line,
                column=column,
            ) from None
    if "\x00" in text:
        raise ScenarioError("this is a binary file, not a YAML scenario", path=path)
    return text


class _Builder:
    """Walks the composed YAML nodes, so that every value keeps its position."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        self._constructor = yaml.SafeLoader(
            ""
        )  # one per file: it remembers each node it constructed
        # (node, name, what, is a warning): checked once the scenario's own classes are known
        self.class_names: List[Tuple[yaml.Node, str, str, bool]] = []

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
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            if "python/" in str(exc.problem):
                raise self.error(
                    node,
                    "YAML tags such as !!python/... are not allowed in scenario files (they could run code)",
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

    # the document ------------------------------------------------------------
    def scenario(self, root: yaml.Node) -> Scenario:
        if not isinstance(root, yaml.MappingNode):
            raise self.error(
                root,
                f"a scenario file must be a mapping with 'title' and 'steps', not {self.kind(root)}",
            )
        fields = self.mapping(root, "the scenario")
        self.check_keys(fields, TOP_LEVEL_KEYS, "the scenario")
        for required in ("title", "steps"):
            if required not in fields:
                raise self.error(
                    root,
                    f"the scenario has no {required!r}; add '{required}: ...' at the top level",
                )

        def get(key: str) -> Optional[yaml.Node]:
            return fields[key][1] if key in fields else None

        title = self.string(get("title"), "'title'").strip()
        if not title:
            raise self.error(get("title"), "'title' is empty; give the scenario a one-line title")
        description = self.optional_string(get("description"), "'description'")
        tags = self.string_list(get("tags"), "'tags'") if get("tags") is not None else ()
        seed = 0
        if get("seed") is not None:
            seed = self.scalar(get("seed"))
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise self.error(
                    get("seed"), f"'seed' must be a whole number, not {self.kind(get('seed'))}"
                )
            if not -(2**63) <= seed < 2**64:
                raise self.error(
                    get("seed"),
                    "'seed' must be between -2**63 and 2**64 - 1 (what torch.manual_seed accepts)",
                )
        device = None
        device_line = device_column = None
        if get("device") is not None:
            device = self.string(get("device"), "'device'").strip()
            device_line = get("device").start_mark.line + 1
            device_column = get("device").start_mark.column + 1
            if not _DEVICE_RE.match(device):
                raise self.error(
                    get("device"), f"device {device!r} is not one of cpu, cuda, cuda:N, mps, auto"
                )
        setup: Tuple[Code, ...] = ()
        if get("setup") is not None:
            node = get("setup")
            if isinstance(node, yaml.SequenceNode):
                setup = tuple(self.code(item, "each item of 'setup'") for item in node.value)
            else:
                setup = (self.code(node, "'setup'"),)
        show = self.names(get("show"), "'show'") if get("show") is not None else None
        variants = self.variants(get("variants")) if get("variants") is not None else None

        steps_node = get("steps")
        if not isinstance(steps_node, yaml.SequenceNode):
            raise self.error(
                steps_node, f"'steps' must be a list of steps, not {self.kind(steps_node)}"
            )
        if not steps_node.value:
            raise self.error(
                steps_node, "'steps' is empty; add at least one step such as '- a = torch.ones(3)'"
            )
        expanded = len(steps_node.value) * max(1, len(variants or ()))
        if expanded > MAX_EXPANDED_STEPS:
            raise self.error(
                steps_node,
                f"the scenario would run {expanded:,} steps ({len(steps_node.value):,} steps × {max(1, len(variants or ())):,} variants), "
                f"over the limit of {MAX_EXPANDED_STEPS:,}; split it into several files",
            )
        steps = tuple(self.step(i + 1, node, variants) for i, node in enumerate(steps_node.value))

        scenario = Scenario(
            title=title,
            path=self.path,
            description=description,
            tags=tags,
            seed=seed,
            device=device,
            device_line=device_line,
            device_column=device_column,
            setup=setup,
            show=show,
            steps=steps,
            variants=variants,
        )
        if variants:
            self.check_placeholders(scenario)
            for name in variants:
                validate_code(scenario.for_variant(name))  # every variant's code compiles
        else:
            for code in list(setup) + [s.run for s in steps]:
                for key, offset in placeholders_in(code.text):
                    line, column = code.locate(*position(code.text, offset))
                    raise ScenarioError(
                        f"placeholder ${{{key}}} is used but the scenario has no 'variants'; "
                        "define variants, or write $${ for a literal ${",
                        path=self.path,
                        line=line,
                        column=column,
                    )
            scenario = scenario.map_text(
                lambda text: text.replace("$${", "${")
            )  # rule 10: a literal ${
            validate_code(scenario)
        self.check_declared_classes(scenario)
        return scenario

    def check_declared_classes(self, scenario: Scenario) -> None:
        """Every name in 'raises'/'warns' must name a class, or it could never match: say so now, not after the run."""
        if not self.class_names:
            return
        own = scenario_classes(code.text for _, code, mode in scenario.all_code() if mode == "exec")
        for node, name, what, warning in self.class_names:
            problem = unknown_class(name, warning, own)
            if problem is not None:
                raise self.error(node, f"{what}: {problem}")

    def optional_string(self, node: Optional[yaml.Node], what: str) -> Optional[str]:
        if node is None:
            return None
        if isinstance(node, yaml.ScalarNode) and self.scalar(node) is None:
            return None
        return self.string(node, what)

    def variants(self, node: yaml.Node) -> Dict[str, Dict[str, str]]:
        fields = self.mapping(node, "'variants'")
        if not fields:
            raise self.error(
                node, "'variants' is empty; give at least one variant or remove the key"
            )
        if len(fields) > MAX_VARIANTS:
            raise self.error(
                node,
                f"'variants' has {len(fields):,} variants, over the limit of {MAX_VARIANTS}; split the scenario into several files",
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
                        f"the value of {key!r} in variant {name!r} must be a string, not {self.kind(v_node)}; "
                        'quote it (e.g. "0.10") so that YAML keeps it exactly as written',
                    )
                result[name][key] = value
        return result

    def check_placeholders(self, scenario: Scenario) -> None:
        for _, code, _ in scenario.all_code():
            for key, offset in placeholders_in(code.text):
                for name, values in (scenario.variants or {}).items():
                    if key not in values:
                        line, column = code.locate(*position(code.text, offset))
                        raise ScenarioError(
                            f"placeholder ${{{key}}} has no value in variant {name!r}; add '{key}: ...' to it",
                            path=self.path,
                            line=line,
                            column=column,
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
                    f"step {index} must be code (a string) or a mapping with 'run', not {self.kind(node)}",
                )
            return StepSpec(index=index, run=self.code(node, f"step {index}"))
        if not isinstance(node, yaml.MappingNode):
            raise self.error(
                node,
                f"step {index} must be code (a string) or a mapping with 'run', not {self.kind(node)}",
            )
        fields = self.mapping(node, f"step {index}")
        if "run" not in fields:
            if len(fields) == 1 or not set(fields) & set(STEP_KEYS):
                raise self.error(
                    node,
                    f"step {index} has no 'run'; YAML read the step as a mapping because it contains ': '. "
                    "Quote the step, or write it as 'run: |' followed by the code on the next lines",
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
        """An expectation that YAML read as a mapping: per-variant ones written as list items, or an unquoted ': '."""
        keys = [self.scalar(k) for k, _ in item.value]
        if variants and keys and all(k == "all" or k in variants for k in keys):
            first = keys[0]
            return (
                f"each item of {what} must be an expression, not a mapping; to expect by variant, drop the '- ': "
                f"'expect:' takes one mapping, with '{first}:' (a variant name, or 'all') indented under it "
                "and holding a list of expressions"
            )
        return f"each item of {what} must be an expression, not a mapping; YAML read ': ' as a key, so quote the expression"

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


def validate_code(scenario: Scenario) -> None:
    """Every piece of code must be valid Python; a SyntaxError points into the file."""
    for what, code, mode in scenario.all_code():
        compile_check(code, mode, scenario.path, what)
