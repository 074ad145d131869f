"""How deep a scenario's steps can be recorded: ATen operations, calls only, or nothing.

Decided from the code's names (attributes, names, imports), never from words
in its comments or strings: a comment that mentions ``torch.compile`` leaves
recording on.
"""

from __future__ import annotations

import ast
from typing import Optional, Set, Tuple

#: The names in a scenario's code (attributes, names, imports; never words in
#: comments or strings) that turn recording off, the level still recorded, and
#: why. Dynamo skips compiling any frame while a non-infra TorchDispatchMode is
#: on the stack ("non-infra torch dispatch mode present, this is not supported
#: today in torch.compile", torch/_dynamo/convert_frame.py) and would trace into
#: a TorchFunctionMode; under a TorchDispatchMode, ``clone()`` of an inference
#: tensor leaves the copy at version 0 where plain PyTorch gives 1
#: (tests/record/test_ops.py pins it); ``torch.jit.trace`` under a TorchDispatchMode
#: records a graph that fails ("aten::view() Expected a value of type 'Tensor'").
#: Recording must not change what the scenario shows, so these fall back.
UNRECORDABLE = (
    (
        ("compile", "compiler"),
        None,
        "the scenario uses torch.compile, which does not compile under a "
        "TorchDispatchMode (dynamo would run the code eagerly), "
        "so its operations were not recorded",
    ),
    (
        ("_dynamo",),
        None,
        "the scenario uses torch._dynamo, which does not compile under a TorchDispatchMode, "
        "so its operations were not recorded",
    ),
    (
        ("inference_mode",),
        "call",
        "the scenario uses torch.inference_mode, whose tensors' version counters a "
        "TorchDispatchMode changes, so only the calls it made were recorded, "
        "not their ATen operations",
    ),
    (
        ("jit",),
        "call",
        "the scenario uses torch.jit, whose tracer records a wrong graph under a "
        "TorchDispatchMode, so only the calls it made were recorded, not their ATen operations",
    ),
)


def _names_used(code: str) -> Optional[Set[str]]:
    """Every identifier the code uses: names, attributes, imported modules and names; None when
    the code does not parse (then its words decide)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    used: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.alias):
            used.update(node.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            used.update(node.module.split("."))
    return used


def recordable(code: str) -> Tuple[Optional[str], Optional[str]]:
    """The deepest level a scenario whose code is ``code`` can be recorded at, and why not deeper.

    The level is ``aten``, ``call`` or None (nothing).
    """
    level: Optional[str] = "aten"
    notes = []
    if not any(word in code for words, _, _ in UNRECORDABLE for word in words):
        return level, None  # every name it could use is in its text: none of them, no parse
    used = _names_used(code)
    for words, fallback, why in UNRECORDABLE:
        if any(word in used if used is not None else word in code for word in words):
            notes.append(why)
            level = fallback if level is not None else None
    return level, (notes[0] if notes else None)


__all__ = ["UNRECORDABLE", "recordable"]
