"""The checks the syntax-tree walk records, and decides once it has seen the whole source.

Some refusals depend on code that may come later in the same piece: ``open``
is refused only when the code does not bind that name itself, ``np.save``
only when ``np`` still names numpy, ``str.format`` only when ``str`` is the
builtin. The checker (:mod:`tensortrace.sandbox.checker`) records each such
place during its one pass, with the names the code binds and imports, and
asks :meth:`DeferredChecks.decide_deferred` at the end.
"""

from __future__ import annotations

import ast
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

from .policy import (
    ALLOWED_MODULES,
    DEFAULT_ALIASES,
    FORMAT_HINT,
    REFUSED_BUILTINS,
    REFUSED_CALLS,
    refused_module_attribute,
    underscore_allowed,
)
from .syntax import attribute_name_column


class DeferredChecks:
    """What the walk records for later, and the decisions made on it at the end."""

    def __init__(self) -> None:
        self.bound: Set[str] = set()
        self.imported: Dict[str, str] = {}
        self.builtin_loads: List[ast.Name] = []
        self.builtin_calls: List[Tuple[ast.Call, str, int]] = []
        self.chains: List[Tuple[ast.Attribute, Tuple[str, ...], bool]] = []
        self.str_formats: List[ast.Attribute] = []
        self.local: FrozenSet[str] = frozenset()  # modules beside the file (the user's own)

    def refuse(self, node: ast.AST, message: str, col_offset: Optional[int] = None) -> None:
        """Record a refusal (the checker keeps them)."""
        raise NotImplementedError

    def decide_deferred(self) -> None:
        """Refuse, now that every binding is known, what was recorded during the walk."""
        bound = self.bound
        for node in self.str_formats:
            if "str" not in bound:
                self.refuse(
                    node,
                    f"'str.{node.attr}' is not allowed in safe mode (the template is an "
                    f"argument it cannot check; {FORMAT_HINT})",
                    attribute_name_column(node),
                )
        for node in self.builtin_loads:
            if node.id not in bound:
                self.refuse(
                    node,
                    f"'{node.id}' is not available in safe mode (it {REFUSED_BUILTINS[node.id]})",
                )
        for call, name, nargs in self.builtin_calls:
            if name in bound:
                continue
            if name in REFUSED_CALLS:
                self.refuse(
                    call, f"'{name}()' is not available in safe mode (it {REFUSED_CALLS[name]})"
                )
            elif nargs > 1:
                self.refuse(
                    call,
                    "'type()' with three arguments is not allowed in safe mode "
                    "(it builds classes around the checks on class statements)",
                )
        aliases = {k: v for k, v in DEFAULT_ALIASES.items() if k not in bound}
        aliases.update(self.imported)
        for node, chain, is_load in self.chains:
            base = aliases.get(chain[0])
            if base is None or base in self.local:  # the user's own module: checked as it runs
                continue
            for part in chain[1:-1]:
                base = f"{base}.{part}"
                if base not in ALLOWED_MODULES:
                    base = None
                    break
            if base is None:
                continue
            attr = chain[-1]
            if attr[:1] == "_" and not underscore_allowed(attr):
                continue  # refused already, by the rule on '_' names
            reason = refused_module_attribute(base, attr)
            if reason is not None:
                self.refuse(node, f"'{base}.{attr}' is not allowed in safe mode (it {reason})")
            elif not is_load and not base.startswith("torch.backends."):
                # (torch.backends flags such as cudnn.deterministic are settings;
                # the runtime guard lets only those through.)
                verb = "writing" if type(node.ctx) is ast.Store else "deleting"
                self.refuse(
                    node,
                    f"{verb} '{base}.{attr}' is not allowed in safe mode "
                    "(modules are shared by everything that runs)",
                )
