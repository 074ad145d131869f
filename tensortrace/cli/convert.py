"""A loaded scenario written back as a YAML scenario file (``tensortrace convert``).

Used for Python files and notebooks: the YAML holds the same setup, steps,
notes and declarations, so running it gives the same steps and outcomes.
What a YAML file cannot say is refused rather than dropped: a notebook whose
magics safe mode would refuse converts only with those lines left out, and a
notice in the YAML's description says so.

Control and bidirectional characters (a U+202E in a comment, an ESC in a
string) are written as escapes, spelled as every output spells them
(``\\u202e``, ``\\x1b``): a string that holds one is written double-quoted,
and each such character in it as its escape, so the YAML never holds one raw
and still loads back to the same text.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import yaml

from ..trace import Declared
from ..render.visible import has_invisible, visible
from ..scenario.spec import Scenario


class _Dumper(yaml.SafeDumper):
    """Code and notes as literal blocks (``|``), the way people write scenarios by hand."""

    # In a double-quoted string, C0 and C1 controls as visible spells them (\x1b, not \e or \x1B).
    ESCAPE_REPLACEMENTS = {
        **{chr(c): f"x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))},
        **{"\t": "t", "\n": "n", '"': '"', "\\": "\\", "\u2028": "L", "\u2029": "P"},
    }

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # list items indented under their key, as the bundled scenarios are
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if has_invisible(value):  # double-quoted: the one style where such a character can be escaped
        style: Optional[str] = '"'
    else:
        style = "|" if "\n" in value.rstrip("\n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def scenario_yaml(scenario: Scenario) -> str:
    """The YAML text of ``scenario``; it loads back to the same steps.

    That is checked before the text is returned.
    """
    from ..scenario.loader import loads_scenario

    # YAML reads ${ as a placeholder; $${ is a literal one
    scenario = scenario.map_text(lambda text: text.replace("${", "$${"))
    data: Dict[str, Any] = {"title": scenario.title}
    description = scenario.description or ""
    if scenario.notices:
        left = "\n".join(f"- {n}" for n in scenario.notices)
        description = f"{description}\n\nConverted with these notices:\n\n{left}".strip()
    if description:
        data["description"] = description
    if scenario.tags:
        data["tags"] = list(scenario.tags)
    if scenario.seed:
        data["seed"] = scenario.seed
    if scenario.device:
        data["device"] = scenario.device
    if scenario.setup:
        data["setup"] = _code("\n".join(c.text for c in scenario.setup))
    if scenario.show is not None:
        data["show"] = list(scenario.show)
    data["steps"] = [_step(spec) for spec in scenario.steps]
    # one comment line, whatever the name
    source = "".join(ch if ch.isprintable() else "?" for ch in scenario.path or "a Python file")
    text = f"# Converted from {source} by 'tensortrace convert'.\n" + yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=1_000_000,
        default_flow_style=False,
    )
    # PyYAML escapes C0 and C1 itself but writes bidi controls as they are; each one left is
    # inside a double-quoted string (``_str``), where visible's spelling is a YAML escape.
    text = visible(text)
    # what is written must load: a bug here is ours, not the user's
    loads_scenario(text, path="<converted>.yaml")
    return text


def _code(text: str) -> str:
    """Code as it is run; a single line without its newline reads better as a plain YAML string."""
    stripped = text.rstrip("\n")
    return stripped if "\n" not in stripped else stripped + "\n"


def _step(spec) -> Any:
    run = _code(spec.run.text)
    fields: Dict[str, Any] = {"run": run}
    if spec.note:
        fields["note"] = spec.note
    expect = spec.expect if isinstance(spec.expect, tuple) else ()
    if expect:
        fields["expect"] = [c.text.strip() for c in expect]
    for key in ("raises", "warns"):
        declared: Optional[Declared] = getattr(spec, key)
        if declared is not None:
            fields[key] = (
                declared.type
                if declared.match is None
                else {"type": declared.type, "match": declared.match}
            )
    if spec.show is not None:
        fields["show"] = list(spec.show)
    if spec.graph is not None:
        fields["graph"] = True if spec.graph is True else list(spec.graph)
    return fields


__all__: List[str] = ["scenario_yaml"]
