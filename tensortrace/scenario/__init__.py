"""Reading scenarios: YAML files, ``.py`` files and notebooks into one ``Scenario``.

No torch here. ``spec`` declares the scenario and its steps; ``loader`` reads
YAML through ``yamlread`` and checks every field; ``pyfile`` and ``notebook``
read code; ``library`` finds the bundled scenarios; ``schemas`` is the scenario
file's JSON Schema; ``inputs`` reads any file the user named, bounded.
"""

from .limits import MAX_EXPANDED_STEPS, MAX_FILE_BYTES, MAX_VARIANTS
from .loader import load_scenario, loads_scenario, validate_code
from .spec import Code, Declaration, Expectations, Scenario, StepSpec, placeholders_in

__all__ = [
    "Code",
    "Declaration",
    "Expectations",
    "MAX_EXPANDED_STEPS",
    "MAX_FILE_BYTES",
    "MAX_VARIANTS",
    "Scenario",
    "StepSpec",
    "load_scenario",
    "loads_scenario",
    "placeholders_in",
    "validate_code",
]
