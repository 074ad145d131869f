"""The builtins of safe mode that need more than a name: type, hasattr, __import__, __build_class__.

Each keeps the builtin's behaviour for what scenarios write (``type(x)``,
``hasattr(t, 'grad')``, ``import torch.nn as nn``, class statements) and
refuses the forms that reach around the checks: three-argument ``type()``
and metaclasses, imports outside the allowlist, class keywords and classes
carrying raw-memory protocols. The run-time guards
(:mod:`tensortrace.sandbox.guards`) put them in a scenario's ``__builtins__``.
"""

from __future__ import annotations

import builtins
import sys
import types
from typing import TYPE_CHECKING, Any, Optional

from .policy import (
    ALLOWED_MODULES,
    IMPORT_RULE,
    METACLASS,
    RAW_MEMORY_PROTOCOLS,
    SafeModeViolation,
    import_refusal,
)
from .policy import violation as _violation
from .protocols import shield_class

if TYPE_CHECKING:
    from .guards import _Runtime
    from .local import LocalModules


def backend_flag(module: types.ModuleType, name: str) -> bool:
    """``torch.backends.cudnn.deterministic = True`` and the like are settings, not patches."""
    mname = getattr(module, "__name__", "")
    if not (
        isinstance(mname, str) and mname.startswith("torch.backends.") and mname in ALLOWED_MODULES
    ):
        return False
    prop_type = getattr(sys.modules.get("torch.backends"), "ContextProp", None)
    for klass in type(module).__mro__:
        descriptor = klass.__dict__.get(name)
        if descriptor is not None:
            return prop_type is not None and isinstance(descriptor, (prop_type, property))
    return False


def make_type_proxy(rt: "_Runtime") -> type:
    """``type`` for scenarios: ``type(x)`` and ``isinstance(c, type)`` as usual.

    The three-argument form is refused (it would build classes around the
    checks on class statements), and ``type(SomeClass)`` gives this proxy
    back rather than the real ``type``, so ``type(int) is type`` still holds.
    """

    class _TypeMeta(type):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            if len(args) != 1 or kwargs:
                raise _violation(
                    "'type()' with three arguments",
                    "it builds classes around the checks on class statements",
                )
            result = type(args[0])
            if result is type or result is _TypeMeta:
                return proxy
            if result in rt.dangerous_types:
                raise _violation(f"type() of a {result.__name__} object", "interpreter internals")
            if issubclass(result, type):
                raise _violation(
                    f"type() of the class {args[0].__qualname__}",
                    f"it is a metaclass, and {METACLASS}",
                )
            entry = rt.refused_ids.get(id(result))
            if entry is not None and entry[0] is result:
                raise _violation("type() of this object", f"the type {entry[1]}")
            return result

        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, type)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, type)

        def __repr__(cls) -> str:
            return "<class 'type'>"

    proxy = _TypeMeta("type", (), {"__doc__": type.__doc__, "__module__": "builtins"})
    return proxy


def make_hasattr(rt: "_Runtime"):
    real_hasattr = builtins.hasattr

    def hasattr(obj: Any, name: str) -> bool:  # the builtin's name, on purpose
        """hasattr(), answering for modules as safe mode sees them."""
        if isinstance(obj, types.ModuleType):
            # As the scenario would see it. (Checking the name first also keeps
            # torch from importing a lazily loaded internal module to answer.)
            try:
                rt.guards["_getattr_closely_"](obj, name)
            except (AttributeError, SafeModeViolation):
                return False
            return True
        return real_hasattr(obj, name)

    return hasattr


def make_import(rt: "_Runtime", local: Optional["LocalModules"] = None):
    """``__import__`` for scenarios; ``local``: the run's modules beside its Python file."""
    real_import = builtins.__import__

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):
        if type(fromlist) is list and not fromlist and not level and isinstance(name, str):
            # PyImport_Import: C code of torch or numpy importing what *it* needs
            # (torch.tensor imports torch.storage) while a scenario's frame is
            # the current one. The module goes back to that C code, not to the
            # scenario; an import statement never passes a list here.
            if name.split(".", 1)[0] in ("torch", "numpy") or name in sys.modules:
                return real_import(name, globals, locals, fromlist, level)
            raise _violation(f"importing '{name}' from library code", IMPORT_RULE)
        if level:
            raise _violation("a relative import", IMPORT_RULE)
        if not isinstance(name, str):
            raise TypeError(f"__import__() argument 1 must be str, not {type(name).__name__}")
        top = name.split(".", 1)[0]
        if local is not None and top in local.names:
            if name != top:
                raise _violation(
                    f"'import {name}'", f"{top} is a module beside the file, not a package"
                )
            module = local.load(name)
            if not fromlist:
                return module
            return types.SimpleNamespace(
                **{item: rt.guards["_getattr_closely_"](module, item) for item in fromlist}
            )
        if import_refusal(name) is not None:
            raise _violation(f"'import {name}'", IMPORT_RULE)
        top = real_import(name, None, None, fromlist, 0)
        if fromlist:
            module = sys.modules[name]
            names = {}
            for item in fromlist:
                if item == "*":
                    raise _violation(
                        f"'from {name} import *'", "it imports every name, internals included"
                    )
                names[item] = rt.guards["_getattr_closely_"](module, item)
            # 'from numpy import asarray' binds what the guards hand out, as 'np.asarray' does
            return types.SimpleNamespace(**names)
        return top

    return __import__


def make_build_class(rt: "_Runtime"):
    real_build_class = builtins.__build_class__

    def __build_class__(func, name, *bases, **kwargs):
        if kwargs:
            raise _violation(
                f"class keywords ({', '.join(kwargs)})",
                "metaclasses and class keywords run code while the class is built",
            )
        for base in bases:
            verdict = rt.subject_verdict(base) if isinstance(base, type) else None
            if verdict is not None:
                raise _violation(
                    f"subclassing {getattr(base, '__qualname__', base)}", f"the class {verdict}"
                )
        cls = real_build_class(func, name, *bases)
        # (Bases from libraries may have them: a subclass of ndarray is fine.)
        for protocol in sorted(RAW_MEMORY_PROTOCOLS.keys() & vars(cls).keys()):
            raise _violation(f"a class with '{protocol}'", f"it {RAW_MEMORY_PROTOCOLS[protocol]}")
        shield_class(cls)  # no instance of it can carry a protocol either
        rt.user_classes.add(cls)
        return cls

    return __build_class__
