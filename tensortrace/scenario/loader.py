"""Scenario files: YAML text → validated, immutable ``Scenario`` records.

Everything a user can get wrong in a file is reported here, before anything
runs, as a ``ScenarioError`` naming file, line and column: decoding, YAML
syntax, tags (only plain data is allowed), duplicate and merge keys, the shape
of every key, and the Python of every step and expectation. The records
themselves live in ``spec.py``; values are read from the YAML nodes by
``nodes.py``, and steps and variants by ``steps.py``. The contract is the
scenario format, version 1 (see docs/scenario-format.md).
"""

from __future__ import annotations

import dataclasses

from pathlib import Path
from typing import Optional, Tuple, Union

import yaml

from .declared_names import scenario_classes, unknown_class
from .devices import DEVICE_RE as _DEVICE_RE
from .limits import MAX_EXPANDED_STEPS, MAX_FILE_BYTES, compile_check
from ..errors import ScenarioError
from .spec import Code, Scenario, position, placeholders_in
from .steps import RESERVED_VARIANT_NAMES, STEP_KEYS, StepReader
from .yamlread import compose, compose_fast, refuse_expansion, refuse_tags

__all__ = [
    "RESERVED_VARIANT_NAMES",
    "STEP_KEYS",
    "TOP_LEVEL_KEYS",
    "load_scenario",
    "loads_scenario",
    "validate_code",
]

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
        scenario = loads_scenario(raw, path=shown)
    except ScenarioError:
        if not leaves_folder(path, real):
            raise
        raise ScenarioError(
            f"is a link to {real}, outside its folder, and that file is not a valid scenario "
            "(nothing of it is quoted, since such a link may lead to a private file)",
            path=shown,
        ) from None
    if not scenario.script:
        return scenario
    from .localmods import local_modules

    sources = [code.source(mode) for _, code, mode in scenario.all_code()]
    return dataclasses.replace(scenario, modules=local_modules(shown, sources))


def loads_scenario(data: Union[str, bytes], path: str = "<string>") -> Scenario:
    """Parse scenario text (the contents of a file called ``path``)."""
    suffix = Path(path).suffix.lower()
    # Python files and notebooks: the same records, from their own readers
    if suffix in (".py", ".ipynb"):
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
            refuse_expansion(root, path)
            return _Builder(path, text).scenario(root)
        except ScenarioError:
            # refused: read again below, so that every refusal is worded and placed
            # as the pure-Python reader sees it
            pass
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


class _Builder(StepReader):
    """Builds the scenario from the document's nodes (steps are read by ``StepReader``)."""

    # the document ------------------------------------------------------------
    def scenario(self, root: yaml.Node) -> Scenario:
        if not isinstance(root, yaml.MappingNode):
            raise self.error(
                root,
                "a scenario file must be a mapping with 'title' and 'steps', "
                f"not {self.kind(root)}",
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
                f"the scenario would run {expanded:,} steps ({len(steps_node.value):,} steps "
                f"× {max(1, len(variants or ())):,} variants), "
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
            # rule 10: a literal ${
            scenario = scenario.map_text(lambda text: text.replace("$${", "${"))
            validate_code(scenario)
        self.check_declared_classes(scenario)
        return scenario

    def check_declared_classes(self, scenario: Scenario) -> None:
        """Every name in 'raises'/'warns' must name a class, or it could never match.

        Said now, not after the run.
        """
        if not self.class_names:
            return
        own = scenario_classes(code.text for _, code, mode in scenario.all_code() if mode == "exec")
        for node, name, what, warning in self.class_names:
            problem = unknown_class(name, warning, own)
            if problem is not None:
                raise self.error(node, f"{what}: {problem}")


def validate_code(scenario: Scenario) -> None:
    """Every piece of code must be valid Python; a SyntaxError points into the file."""
    for what, code, mode in scenario.all_code():
        compile_check(code, mode, scenario.path, what)
