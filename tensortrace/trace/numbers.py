"""Numbers as a trace holds them: JSON-ready, non-finite floats and complex numbers spelled.

JSON has no NaN or infinity, so they travel as the strings ``"nan"``,
``"inf"`` and ``"-inf"``, and complex numbers as text such as ``"(1+2j)"``;
a tensor's exact values are nested tuples of such scalars (``NumberTree``).
"""

import abc
import math
from typing import Any


class NumberTree(abc.ABC):  # noqa: B024 - a type to register kinds with, never subclassed
    """The type of a tensor's exact values: a scalar, or nested tuples of them.

    Never instantiated: ``Values.data`` holds the tree itself (tuples and
    scalars are registered as its kinds). The decoder reads the tree
    (``tensortrace.trace.validate.number_tree``), checking element types and
    depth without recursion.
    """


for _kind in (tuple, bool, int, float, str):
    NumberTree.register(_kind)


def spell(value: float) -> str:
    """A non-finite float's JSON spelling."""
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def encode_number_tree(value: Any) -> Any:
    """Nested lists of numbers, JSON-safe.

    NaN and infinities are spelled as strings, and complex numbers as text.
    """
    if isinstance(value, (list, tuple)):
        return [encode_number_tree(v) for v in value]
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return spell(value)
    return value


_SPELLINGS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def decode_number(value: Any) -> Any:
    """A spelled non-finite float as the float; anything else as it is."""
    if isinstance(value, str) and value in _SPELLINGS:
        return _SPELLINGS[value]
    return value


def freeze(value: Any) -> Any:
    """Lists become tuples, so that loaded traces compare equal to recorded ones."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value
