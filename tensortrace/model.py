"""The trace's records, re-exported from ``tensortrace.trace`` where they are declared.

Kept so that the rest of the package imports records from here as before;
``tensortrace.trace.records`` holds the declarations and the format history.
"""

from __future__ import annotations

from typing import Any

from .trace import *  # noqa: F403 - the records, re-exported under their old home
from .trace import Step
from .trace import __all__ as _RECORD_NAMES
from .trace.document import check_format as _check_format
from .trace.validate import InvalidRecord, converted, encoder


def record(cls: type) -> type:
    """``cls`` as a frozen msgspec Struct, methods and properties kept: for the render side's own
    small records (options, outline lines), which never travel. A Struct's methods are made in
    C, where ``dataclass`` compiles five functions per class at every start of the command."""
    import msgspec

    annotations = cls.__dict__.get("__annotations__", {})
    fields = [(name, kind, cls.__dict__[name]) if name in cls.__dict__ else (name, kind)
              for name, kind in annotations.items()]
    namespace = {key: value for key, value in cls.__dict__.items()
                 if key not in annotations and key not in ("__annotations__", "__dict__", "__weakref__")}
    return msgspec.defstruct(cls.__name__, fields, namespace=namespace, module=cls.__module__, frozen=True)


def check_format(data: Any) -> None:
    """``TraceFormatError`` unless ``data`` says it is a trace document of a version this reads."""
    from .errors import TraceFormatError

    try:
        _check_format(data)
    except InvalidRecord as exc:
        raise TraceFormatError(exc.reason) from None


def record_to_dict(record: Any) -> Any:
    """A record (or a tuple of them) as JSON-ready data, as the trace document holds it."""
    import msgspec

    return msgspec.json.decode(encoder().encode(record))


def record_from_dict(cls: type, data: Any) -> Any:
    """A record of type ``cls`` from its JSON-ready data, every field checked (``InvalidRecord``)."""
    return converted(data, cls)


def step_to_dict(step: Step) -> dict:
    """One step as JSON-ready data (the unit of ``--format jsonl``)."""
    return record_to_dict(step)


def step_from_dict(data: Any) -> Step:
    return record_from_dict(Step, data)


__all__ = [*_RECORD_NAMES, "check_format", "record", "record_from_dict", "record_to_dict",
           "step_from_dict", "step_to_dict"]
