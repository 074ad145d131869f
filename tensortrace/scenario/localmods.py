"""The modules beside a Python file that its code imports: read once, with the file.

``python FILE`` puts FILE's folder first on ``sys.path``, so ``import helper``
finds ``helper.py`` beside it. A run imports those modules (``script.py``);
the tool also needs their code before anything runs: safe mode checks it as
it checks the file's own (the file's code and theirs are the user's alike),
runs it from what was checked, and lets the child read only those files; and
what the recording can do (``record/recordability.py``) and what it may skip
reading (``record/writes.py``) depend on all the code that runs, not the
file's alone.

The modules are found from the import statements of the code (the file's,
then each module's, transitively): a top-level name ``helper`` with a regular
file ``helper.py`` in the folder, read as the file itself is read (bounded,
``inputs.read_regular``). A package (``helper/__init__.py``) is not read: safe
mode refuses to import it, and a trusted run imports it as Python does. A name
safe mode allows from the installation (``torch``, ``numpy``, ...) is never a
local module: the running process has imported it already, as it had before
the file's first line.
"""

from __future__ import annotations

import ast
import os
from typing import Iterable, List, Optional, Set, Tuple

from ..errors import ScenarioError
from .spec import LocalModule

MAX_MODULES = 64  # local modules one file may bring in, transitively
#: Roots the running process has imported before a file's first line: never read from the folder.
PRELOADED = frozenset({"torch", "numpy", "math", "copy", "collections", "functools", "builtins"})


def imported_roots(source: str) -> List[str]:
    """The top-level module names ``source`` imports absolutely, in order, once each."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    names: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found = [alias.name.split(".", 1)[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found = [node.module.split(".", 1)[0]]
        else:
            continue
        names.extend(n for n in found if n not in names)
    return names


def local_modules(path: str, sources: Iterable[str]) -> Tuple[LocalModule, ...]:
    """The modules beside the file ``path`` that ``sources`` (its code) import, transitively.

    ``ScenarioError`` names a module file that cannot be used (unreadable, too
    large, not text, or more than ``MAX_MODULES`` of them).
    """
    from .inputs import read_regular, Unreadable, TooLarge
    from .limits import MAX_FILE_BYTES
    from .pyfile import decode_source
    from .script import script_folder

    folder = script_folder(path)
    found: List[LocalModule] = []
    seen: Set[str] = set()
    pending = [name for source in sources for name in imported_roots(source)]
    while pending:
        name = pending.pop(0)
        if name in seen or name in PRELOADED:
            continue
        seen.add(name)
        where = os.path.join(folder, f"{name}.py")
        if not os.path.isfile(where):
            continue
        if len(found) >= MAX_MODULES:
            raise ScenarioError(
                f"imports more than {MAX_MODULES} modules from its folder; "
                "run it with --trust, where Python imports them as it goes",
                path=path,
            )
        try:
            raw, _ = read_regular(where, MAX_FILE_BYTES, "a Python module")
        except TooLarge as exc:
            raise ScenarioError(f"{exc}", path=where) from None
        except (Unreadable, OSError) as exc:
            raise ScenarioError(f"cannot be read: {_reason(exc)}", path=where) from None
        module = LocalModule(name, where, decode_source(raw, where, "Python module"))
        found.append(module)
        pending.extend(imported_roots(module.source))
    return tuple(found)


def _reason(exc: BaseException) -> Optional[str]:
    return getattr(exc, "strerror", None) or str(exc)


__all__ = ["LocalModule", "MAX_MODULES", "PRELOADED", "imported_roots", "local_modules"]
