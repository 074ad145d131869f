"""Reading scenarios: YAML files, ``.py`` files and notebooks into one ``Scenario``.

No torch here. ``spec`` declares the scenario and its steps; ``loader`` reads
YAML through ``yamlread`` and checks every field; ``pyfile`` and ``notebook``
read code; ``library`` finds the bundled scenarios; ``schemas`` is the scenario
file's JSON Schema; ``inputs`` reads any file the user named, bounded.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# name -> the module that defines it, imported on first use: a command that only needs the
# device names (``scenario.devices``) must not pay for yaml and the loader
_LAZY = {
    "MAX_EXPANDED_STEPS": "limits",
    "MAX_FILE_BYTES": "limits",
    "MAX_VARIANTS": "limits",
    "load_scenario": "loader",
    "loads_scenario": "loader",
    "validate_code": "loader",
    "Code": "spec",
    "Declaration": "spec",
    "Expectations": "spec",
    "Scenario": "spec",
    "StepSpec": "spec",
    "placeholders_in": "spec",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tensortrace.scenario' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = sorted(_LAZY)
