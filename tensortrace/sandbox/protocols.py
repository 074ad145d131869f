"""The protocols through which libraries take an object's memory, closed where they live.

``np.atleast_1d(obj)``, like most NumPy functions, reads ``obj.__array_interface__``
and returns a view of whatever address it names; ``torch.from_dlpack`` calls
``obj.__dlpack__()``. The checks refuse these names where code writes them, and
the consumers in :mod:`.consumers` take only plain data, but most functions that
convert their argument are not consumers anyone wrapped, and a library method
can give an object such an attribute under a name built at run time
(``nn.ParameterDict()['__array_' + 'interface__'] = {...}``). So the names are
refused on the objects that could hold them, whichever function reads them:

* **torch modules**, the library objects that turn strings into attributes
  (``ParameterDict``, ``ModuleDict``, ``Sequential`` from an ``OrderedDict``,
  ``add_module``, ``register_buffer``, ``register_parameter``, ``setattr``
  through ``set_submodule`` or ``functional_call``): while safe-mode code runs
  (``closed``), ``nn.Module`` refuses such a name when it is written, and a
  *shield*, a data descriptor on the class, refuses to read one that reached an
  instance some other way (a ``__dict__`` written by library code);
* **classes the scenario defines** get the same shields when they are built
  (``shield_class``), for each name no base class defines: a value that
  library code writes into an instance's ``__dict__`` (``functools.cached_property``
  with its ``attrname`` set to such a name) is never read as the protocol.

A shield answers "no such attribute" when the object does not hold the name
(``hasattr`` stays false, and a base class's own protocol, ``Tensor.__array__``,
is never shadowed), and raises :class:`SafeModeViolation` when it does. The
kernel's wall is still the guarantee: this layer is defence in depth, and says
which line did it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Callable, Dict, Iterator, List, Tuple

from .policy import RAW_MEMORY_PROTOCOLS, violation

#: The names a library reads on an object to take its memory, or to hand the object's
#: own code its operations: the memory protocols and their kin.
PROTOCOL_NAMES = frozenset(
    set(RAW_MEMORY_PROTOCOLS)
    | {
        "__array__",
        "__array_priority__",
        "__array_ufunc__",
        "__array_function__",
        "__array_wrap__",
        "__array_finalize__",
        "__array_prepare__",
        "__array_namespace__",
        "__buffer__",
        "__release_buffer__",
        "__torch_function__",
        "__torch_dispatch__",
    }
)
_PREFIXES = ("__array", "__dlpack", "__cuda_array")


def is_protocol_name(name: object) -> bool:
    """Whether ``name`` is one of the protocols, or of their families (``__array_*``)."""
    return type(name) is str and (name in PROTOCOL_NAMES or name.startswith(_PREFIXES))


def _refusal(name: str, holder: object) -> Exception:
    reason = RAW_MEMORY_PROTOCOLS.get(
        name, "makes numpy and torch take the object's memory or call its code"
    )
    return violation(f"'{name}' on a {type(holder).__name__} object", f"it {reason}")


def _holds(obj: Any, name: str) -> bool:
    """Whether the instance itself holds ``name``: in its ``__dict__``, or as a module's entry."""
    try:
        state = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return False
    if name in state:
        return True
    return any(name in (state.get(part) or ()) for part in ("_parameters", "_buffers", "_modules"))


class Shield:
    """A class's stand-in for one protocol name: absent, unless an instance holds it."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is not None and _holds(obj, self.name):
            raise _refusal(self.name, obj)
        raise AttributeError(self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        raise _refusal(self.name, obj)

    def __delete__(self, obj: Any) -> None:
        raise AttributeError(self.name)


def _defined(cls: type, name: str) -> bool:
    return any(name in vars(klass) for klass in cls.__mro__)


def shield_class(cls: type) -> None:
    """Give a class the scenario defines a shield for each protocol name no base defines."""
    for name in sorted(PROTOCOL_NAMES):
        if not _defined(cls, name):
            type.__setattr__(cls, name, Shield(name))


# --- nn.Module, while safe-mode code runs --------------------------------------------------

_lock = threading.Lock()
_depth = 0
_installed: List[Tuple[str, Any]] = []  # (attribute of nn.Module, what it was; None: absent)


def _refusing(real: Callable[..., Any]) -> Callable[..., Any]:
    """``real`` (a method of nn.Module whose first argument after self is a name), refusing
    the protocol names."""

    def method(self: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        if is_protocol_name(name):
            raise _refusal(name, self)
        return real(self, name, *args, **kwargs)

    method.__name__ = real.__name__
    method.__qualname__ = real.__qualname__
    method.__doc__ = real.__doc__
    method.__wrapped_by_tensortrace__ = real  # type: ignore[attr-defined]
    return method


_NAMED_WRITES = ("__setattr__", "add_module", "register_buffer", "register_parameter")


def _install() -> None:
    torch = sys.modules.get("torch")
    if torch is None:  # nothing to close: no module can exist
        return
    module = torch.nn.Module
    changes: Dict[str, Any] = {}
    for name in _NAMED_WRITES:
        changes[name] = _refusing(vars(module)[name])
    for name in sorted(PROTOCOL_NAMES):
        if not _defined(module, name):
            changes[name] = Shield(name)
    for name, value in changes.items():
        _installed.append((name, vars(module).get(name)))
        type.__setattr__(module, name, value)


def _uninstall() -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    module = torch.nn.Module
    while _installed:
        name, before = _installed.pop()
        if before is None:
            type.__delattr__(module, name)
        else:
            type.__setattr__(module, name, before)


@contextlib.contextmanager
def closed() -> Iterator[None]:
    """While safe-mode code runs: ``nn.Module`` refuses the protocol names (nests)."""
    global _depth
    with _lock:
        if _depth == 0:
            _install()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _uninstall()


__all__ = ["PROTOCOL_NAMES", "Shield", "closed", "is_protocol_name", "shield_class"]
