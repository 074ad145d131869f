"""The render side's own small records (options, outline lines), made frozen msgspec Structs.

They never travel, so they are not trace records; a Struct's methods are made in C, where
``dataclass`` would compile five functions per class at every start of the command.
"""

from __future__ import annotations

import msgspec


def record(cls: type) -> type:
    """``cls`` as a frozen msgspec Struct, its methods and properties kept."""
    annotations = cls.__dict__.get("__annotations__", {})
    fields = [
        (name, kind, cls.__dict__[name]) if name in cls.__dict__ else (name, kind)
        for name, kind in annotations.items()
    ]
    skipped = ("__annotations__", "__dict__", "__weakref__")
    namespace = {
        key: value
        for key, value in cls.__dict__.items()
        if key not in annotations and key not in skipped
    }
    return msgspec.defstruct(
        cls.__name__, fields, namespace=namespace, module=cls.__module__, frozen=True
    )
