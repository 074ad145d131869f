"""The readers of the array, buffer and DLPack protocols, taking only plain data in safe mode.

``np.asarray(obj)`` reads ``obj.__array_interface__``, and ``torch.from_dlpack``
calls ``obj.__dlpack__()``: an object whose protocol attribute names an
address lets them read and write any memory of the process. The checks refuse
those names where they are written, but a library method can set an
attribute whose name is built at run time (``module.add_module('__array_' +
'interface__', ...)``, ``nn.ParameterDict()[name] = {...}``). So in safe mode
the consumers themselves take only what carries no such protocol of its own:
tensors, numpy arrays and scalars, Python numbers, strings and bytes, and
(nested) lists and tuples of them; anything else is refused with
:class:`SafeModeViolation`, whatever its attributes are called. The guards
hand scenario code these wrappers wherever it reaches the real functions
(``np.asarray``, ``from numpy import asarray``, ``t.new_tensor``).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

from .policy import RAW_MEMORY_PROTOCOLS, violation

#: module -> {function name: the keyword its data may also be given as}
CONSUMERS: Dict[str, Dict[str, str]] = {
    "numpy": {
        "array": "object",
        "asarray": "a",
        "asanyarray": "a",
        "ascontiguousarray": "a",
        "asfortranarray": "a",
        "asarray_chkfinite": "a",
        "require": "a",
        "frombuffer": "buffer",
        "from_dlpack": "x",
        "copy": "a",
        "asmatrix": "data",
    },
    "torch": {
        "tensor": "data",
        "as_tensor": "data",
        "asarray": "obj",
        "from_dlpack": "ext_tensor",
        "frombuffer": "buffer",
    },
}
#: methods of tensors that read their argument like torch.tensor
METHODS = {"new_tensor": "data"}
_MAX_DEPTH = 64
_WHY = (
    "it reads memory through the array, buffer and DLPack protocols; safe mode passes it only "
    "tensors, numpy arrays, numbers, strings and (nested) lists and tuples of them"
)


def _plain_types() -> Tuple[type, ...]:
    found: list = [int, float, complex, bool, str, bytes, type(None), range]
    torch = sys.modules.get("torch")
    numpy = sys.modules.get("numpy")
    if torch is not None:
        found.append(torch.Tensor)
    if numpy is not None:
        found += [numpy.ndarray, numpy.generic]
    return tuple(found)


def _plain_sequence(item: Any) -> bool:
    """A list or tuple of a subclass (``torch.Size``, a named tuple) that carries no protocol."""
    return isinstance(item, (list, tuple)) and not any(
        hasattr(item, name) for name in RAW_MEMORY_PROTOCOLS
    )


def _first_refused(data: Any, plain: Tuple[type, ...]) -> Optional[Any]:
    """The first object in ``data`` (walking lists and tuples) that is not plain data, or None."""
    stack = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is list or kind is tuple or _plain_sequence(item):
            if depth >= _MAX_DEPTH:
                return item
            if not all(type(x) in (int, float, bool) for x in item):
                stack.extend((x, depth + 1) for x in item)
        elif not isinstance(item, plain):
            return item
    return None


def guarded(real: Callable[..., Any], label: str, keyword: str) -> Callable[..., Any]:
    """``real``, taking only plain data as its data argument (the first, or ``keyword``)."""

    def consumer(*args: Any, **kwargs: Any) -> Any:
        data = args[0] if args else kwargs.get(keyword)
        plain = _plain_types()
        if type(data) not in plain:
            bad = _first_refused(data, plain)
            if bad is not None:
                raise violation(f"'{label}' of a {type(bad).__name__} object", _WHY)
        return _warning_from_caller(real, args, kwargs)

    consumer.__name__ = getattr(real, "__name__", label)
    consumer.__qualname__ = getattr(real, "__qualname__", label)
    consumer.__doc__ = getattr(real, "__doc__", None)
    consumer.__module__ = getattr(real, "__module__", None) or label.split(".", 1)[0]
    return consumer


def _warning_from_caller(real: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``real(*args, **kwargs)``, its warnings issued from the scenario's line, not this file's.

    A warning PyTorch issues from C++ names the innermost Python frame, which would
    be this wrapper: the trace would show it without the line that caused it. So
    the call's warnings are caught and issued again, under the scenario's own
    filters and registry, at the caller's file and line, as plain Python would.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = real(*args, **kwargs)
    if caught:
        caller = sys._getframe(2)
        registry = caller.f_globals.setdefault("__warningregistry__", {})
        for w in caught:
            warnings.warn_explicit(
                w.message,
                w.category,
                caller.f_code.co_filename,
                caller.f_lineno,
                module=caller.f_globals.get("__name__"),
                registry=registry,
                module_globals=caller.f_globals,
            )
    return result


def consumer_table() -> Dict[int, Tuple[Any, Callable[..., Any]]]:
    """id(real function) -> (the function, its guarded stand-in), for the modules imported."""
    table: Dict[int, Tuple[Any, Callable[..., Any]]] = {}
    for module_name, names in CONSUMERS.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, keyword in names.items():
            real = getattr(module, name, None)
            if real is not None:
                table[id(real)] = (real, guarded(real, f"{module_name}.{name}", keyword))
    return table


def guarded_method(bound: Any, name: str) -> Any:
    """A tensor's ``new_tensor`` (bound), taking only plain data."""
    return guarded(bound, f"Tensor.{name}", METHODS[name])


__all__ = ["CONSUMERS", "METHODS", "consumer_table", "guarded", "guarded_method"]
