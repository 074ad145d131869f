"""The bundled scenario library: where it lives and how names map to files.

In an installed wheel the scenarios sit inside the package
(``tensortrace/scenarios``); in a source checkout they are the top-level
``scenarios/`` folder.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import List, Optional

from .errors import ScenarioError

_PACKAGE_DIR = Path(__file__).resolve().parent


def bundled_dir() -> Optional[Path]:
    for candidate in (_PACKAGE_DIR / "scenarios", _PACKAGE_DIR.parent / "scenarios"):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    return None


def bundled_names() -> List[str]:
    folder = bundled_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder else []


def bundled_path(name: str) -> Optional[Path]:
    folder = bundled_dir()
    if folder is None:
        return None
    path = folder / f"{name}.yaml"
    return path if path.is_file() else None


def resolve_target(target: str) -> Path:
    """A path to an existing file, else a bundled scenario's name."""
    path = Path(target)
    if path.exists() or any(sep in target for sep in ("/", "\\")) or target.endswith((".yaml", ".yml")):
        return path
    found = bundled_path(target)
    if found is not None:
        return found
    close = difflib.get_close_matches(target, bundled_names(), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; run 'tensortrace list' to see the bundled scenarios"
    raise ScenarioError(f"no such file, and no bundled scenario named {target!r}{hint}", path=target)
