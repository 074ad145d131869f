"""The rules of ``explanations.yaml``: reading, checking and compiling them, once.

The data file is read on the first explanation asked for, not on import: the
renderers import this package on their way to the first line of output, and most
runs explain nothing. Every entry is checked when the file is read, so a slip in
the data (an unknown key, a placeholder the pattern does not capture, a pattern
that does not compile, a builder that does not exist) is an error that names
the entry rather than an explanation that silently goes missing or half-filled.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Tuple

from ...errors import TensorTraceError

if TYPE_CHECKING:
    from .builders import Builder, Fields, Reading

DATA_FILE = "explanations.yaml"

# Kept as text, compiled (and cached by re) on first use rather than at import.
_SLUG = r"[a-z0-9]+(?:-[a-z0-9]+)*"
_CLASS_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_REQUIRED = ("id", "topic", "types", "pattern")
_TEXTS = ("title", "what", "fix")
_KEYS = frozenset(_REQUIRED + _TEXTS + ("builder",))


class ExplanationDataError(TensorTraceError):
    """An entry of the explanations data file that cannot be used as a rule."""

    slug = "explanation-data"


@dataclass(frozen=True)
class Rule:
    """One recognised error: class names, a message pattern, and its reading."""

    id: str
    topic: str
    types: Tuple[str, ...]
    pattern: "re.Pattern[str]"
    build: Builder


def _template(title: str, what: str, fix: str) -> Builder:
    """A builder that fills ``{name}`` placeholders from the pattern's groups."""

    def build(fields: Fields) -> Reading:
        return (
            title.format_map(fields),
            what.format_map(fields),
            fix.format_map(fields),
        )

    return build


def _placeholders(text: str) -> List[str]:
    """The ``{name}`` fields a template uses; ValueError for a malformed template."""
    import string

    return [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]


def _rule(entry: Any, where: str) -> Rule:
    """The rule an entry describes; ExplanationDataError naming ``where`` when it is malformed."""
    from .builders import BUILDERS

    def refuse(problem: str) -> ExplanationDataError:
        return ExplanationDataError(f"{where}: {problem}", path=DATA_FILE)

    if not isinstance(entry, Mapping):
        raise refuse(f"an entry is a mapping, not {type(entry).__name__}")
    unknown = sorted(str(key) for key in entry if key not in _KEYS)
    if unknown:
        raise refuse(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}")
    missing = [key for key in _REQUIRED if key not in entry]
    if missing:
        raise refuse(f"missing {', '.join(missing)}")
    for key in _REQUIRED[:2]:
        if not isinstance(entry[key], str) or not re.fullmatch(_SLUG, entry[key]):
            raise refuse(f"{key} must be a lower-case slug such as 'backward-twice'")
    types = entry["types"]
    if (
        not isinstance(types, list)
        or not types
        or not all(isinstance(name, str) and re.fullmatch(_CLASS_NAME, name) for name in types)
    ):
        raise refuse("types must be a non-empty list of class names such as [RuntimeError]")
    if not isinstance(entry["pattern"], str) or not entry["pattern"]:
        raise refuse("pattern must be a non-empty string")
    try:
        pattern = re.compile(entry["pattern"])
    except re.error as exc:
        raise refuse(f"pattern does not compile: {exc}") from None
    texts = [key for key in _TEXTS if key in entry]
    if "builder" in entry:
        if texts:
            raise refuse(f"an entry with a builder has no {', '.join(texts)}")
        if entry["builder"] not in BUILDERS:
            raise refuse(f"no builder {entry['builder']!r}; known: {', '.join(sorted(BUILDERS))}")
        build = BUILDERS[entry["builder"]]
    else:
        if len(texts) != len(_TEXTS):
            raise refuse("an entry has title, what and fix, or a builder")
        for key in _TEXTS:
            if not isinstance(entry[key], str) or not entry[key].strip():
                raise refuse(f"{key} must be non-empty text")
            try:
                used = _placeholders(entry[key])
            except ValueError as exc:
                raise refuse(f"{key} is not a valid template ({exc}); write {{{{ for a brace")
            unknown_fields = sorted(set(used) - set(pattern.groupindex))
            if unknown_fields:
                raise refuse(
                    f"{key} uses {', '.join('{' + n + '}' for n in unknown_fields)}, "
                    "which the pattern does not capture as (?P<name>...)"
                )
        build = _template(entry["title"], entry["what"], entry["fix"])
    return Rule(entry["id"], entry["topic"], tuple(types), pattern, build)


def parse_rules(entries: Any) -> Tuple[Rule, ...]:
    """The rules of a loaded data file, in its order; ExplanationDataError when one is malformed."""
    if not isinstance(entries, list) or not entries:
        raise ExplanationDataError("the file must hold a non-empty list of entries", path=DATA_FILE)
    rules: List[Rule] = []
    seen: Dict[str, int] = {}
    for number, entry in enumerate(entries, start=1):
        name = entry.get("id") if isinstance(entry, Mapping) else None
        where = f"entry {number}" + (f" ({name})" if isinstance(name, str) else "")
        rule = _rule(entry, where)
        if rule.id in seen:
            raise ExplanationDataError(
                f"{where}: id {rule.id!r} is already used by entry {seen[rule.id]}", path=DATA_FILE
            )
        seen[rule.id] = number
        rules.append(rule)
    return tuple(rules)


@functools.lru_cache(maxsize=None)
def load_rules() -> Tuple[Rule, ...]:
    """Every rule of the shipped data file, in order; read and checked on the first call only."""
    import yaml  # here, not at import time: most runs never explain an error

    # Beside this module, as library.py finds the bundled scenarios: the wheel
    # installs unpacked, and importlib.resources alone costs milliseconds.
    text = Path(__file__).with_name(DATA_FILE).read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        entries = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise ExplanationDataError(f"not valid YAML: {exc}", path=DATA_FILE) from None
    return parse_rules(entries)


__all__ = ["DATA_FILE", "ExplanationDataError", "Rule", "load_rules", "parse_rules"]
