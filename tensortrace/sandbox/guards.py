"""The run-time layer of safe mode: the guards that checked code calls, and its builtins.

The syntax-tree check sees only what is written. Code compiled by
:func:`tensortrace.sandbox.checker.compile_safe` sends every attribute read
through ``_getattr_`` and every write through ``_write_``; this module
supplies them, with a guarded ``__import__``, ``__build_class__``, ``type``
and ``hasattr``, in the ``__builtins__`` of the namespace that
:func:`safe_globals` builds. They refuse what is reached another way
(``m = torch; m.save``), modules outside the allowlist, objects from outside
torch and numpy, and writes to modules and classes, by raising
:class:`SafeModeViolation`. What is refused comes from
:mod:`tensortrace.sandbox.policy`, and the verdicts on live objects (with
the caches that keep them cheap) from :mod:`tensortrace.sandbox.verdicts`;
the builtins that need more than a name are built in
:mod:`tensortrace.sandbox.scenario_builtins`.
"""

from __future__ import annotations

import builtins
import operator
import threading
import types
from typing import Any, Dict, Optional, Sequence, Tuple

from .policy import (
    CLOSER_LOOK,
    FORMAT_HINT,
    FORMAT_METHODS,
    IMPORTS,
    REFUSED_ATTRIBUTES,
    UNDERSCORE_WRITE,
    SafeModeViolation,
    format_is_plain,
    underscore_allowed,
)
from .policy import violation as _violation
from .consumers import METHODS as CONSUMER_METHODS
from .consumers import guarded_method
from .local import LocalModules, Source
from .verdicts import Verdicts
from .scenario_builtins import (
    backend_flag,
    make_build_class,
    make_hasattr,
    make_import,
    make_type_proxy,
)

__all__ = ["SafeModeViolation", "safe_globals"]


_IOP_FUNCTIONS = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
    "@=": operator.imatmul,
}


class _Runtime(Verdicts):
    """The guard functions and the builtins that scenario code calls (built once per process).

    The verdicts they ask for, and the caches behind them, come from
    :class:`~tensortrace.sandbox.verdicts.Verdicts`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.type_proxy = make_type_proxy(self)
        self.guards = self._make_guards()
        self.builtins = self._make_builtins()
        self.learn_loaded_libraries()

    # -- the guards -------------------------------------------------------

    def _make_guards(self) -> Dict[str, Any]:
        rt = self
        plain_values = self.plain_values
        plain_subjects = self.plain_subjects
        refused_ids = self.refused_ids
        module_rules = self.module_rules
        instance_origins = self.instance_origins
        library_methods = self.library_methods
        dangerous_types = self.dangerous_types
        module_type = types.ModuleType
        builtin_type = types.BuiltinFunctionType
        method_type = types.MethodType
        missing = object()
        _getattr = getattr
        _isinstance = isinstance
        _type = type
        _id = id

        def look_closer(obj: Any, name: str) -> None:
            if name in REFUSED_ATTRIBUTES:
                raise _violation(f"'.{name}'", f"it {REFUSED_ATTRIBUTES[name]}")
            if (
                name in FORMAT_METHODS
                and not (_isinstance(obj, str) and format_is_plain(obj))
                and not _isinstance(obj, module_type)  # numpy.lib.format: the module rules decide
            ):
                what = "this template" if _isinstance(obj, str) else "a template it cannot see"
                raise _violation(f"'.{name}' with {what}", f"{FORMAT_METHODS[name]}; {FORMAT_HINT}")
            if name[:1] == "_" and not underscore_allowed(name):
                raise _violation(
                    f"'.{name}'", "attributes starting with '_' reach interpreter internals"
                )
            if name == "obj" and _isinstance(obj, BaseException):
                raise _violation("'.obj' of an exception", "it can hold objects of trusted code")
            if (
                name in ("type", "resize_")
                and rt.storage_types
                and (
                    _isinstance(obj, rt.storage_types)
                    or (_isinstance(obj, _type) and issubclass(obj, rt.storage_types))
                )
            ):
                why = (
                    IMPORTS if name == "type" else "can leave tensors pointing outside their memory"
                )
                raise _violation(f"'.{name}' of a storage", f"it {why}")
            if name == "resize" and _isinstance(obj, rt.numpy_arrays):
                raise _violation(
                    "'.resize' of a numpy array",
                    "with refcheck=False it frees memory that tensors and other arrays still "
                    "point into; use np.resize, which makes a new array",
                )
            if name == "__init__" and not init_allowed(obj):
                raise _violation(
                    "'.__init__' of this object",
                    "calling it again re-initialises a module, descriptor or library object "
                    "that everything else shares; call __init__ on classes and super()",
                )

        def init_allowed(obj: Any) -> bool:
            """Whether calling ``__init__`` again on ``obj`` re-initialises nothing shared.

            ``super().__init__()``, ``Base.__init__(self)``, and ``self.__init__()`` on
            the scenario's own objects.
            """
            if _type(obj) is super:
                return True
            if _isinstance(obj, _type):
                return not (
                    issubclass(obj, (module_type, type))
                    or hasattr(obj, "__get__")
                    or hasattr(obj, "__set__")
                    or hasattr(obj, "__delete__")
                )
            return _type(obj) in rt.user_classes

        def module_getattr(module: types.ModuleType, name: str) -> Any:
            if rt.home_modules and rt.is_home_module(module):  # beside the file: the user's own
                value = _getattr(module, name)
                tv = _type(value)
                return value if tv in plain_values else check_value(value, tv, name)
            value = module_value(module, name)
            swap = rt.consumers.get(_id(value))
            return swap[1] if swap is not None and swap[0] is value else value

        def module_value(module: types.ModuleType, name: str) -> Any:
            rule = module_rules.get(_id(module))
            if rule is None or rule.module is not module:
                rule = rt.module_rule(module)
            value = rule.verified.get(name, missing)
            if value is not missing and _getattr(module, name, missing) is value:
                return value
            if name in rule.refused:
                raise _violation(f"'{module.__name__}.{name}'", f"it {rule.refused[name]}")
            if rule.only is not None and name not in rule.only:
                raise _violation(
                    f"'{module.__name__}.{name}'",
                    f"it is not among the names safe mode allows from {module.__name__}",
                )
            value = _getattr(module, name)
            if _type(value) in plain_values:
                return value
            verdict = rt.value_verdict(value)
            if verdict is not None:
                if name in _getattr(module, "__dict__", ()):
                    rule.refused[name] = verdict  # a module attribute: remember
                raise _violation(f"'{module.__name__}.{name}'", f"it {verdict}")
            if name in _getattr(module, "__dict__", ()):
                rule.verified[name] = value
            return value

        def check_subject(obj: Any, tobj: type, name: str) -> None:
            if tobj not in dangerous_types and not _isinstance(obj, _type):
                try:
                    verdict = instance_origins[tobj.__module__]
                except (KeyError, TypeError, AttributeError):
                    verdict = rt.subject_verdict(obj)
            else:
                verdict = rt.subject_verdict(obj)
            # (The verdict cached per module does not know the trusted objects
            # of collections and functools, so those are asked about here.)
            if (
                verdict is not None
                and not _isinstance(obj, BaseException)
                and not rt.is_trusted(obj)
            ):
                raise _violation(f"'.{name}'", f"the object {verdict}")

        def check_value(value: Any, tv: type, name: str) -> Any:
            entry = refused_ids.get(_id(value))
            if entry is not None and entry[0] is value:
                raise _violation(f"'.{name}'", f"the value {entry[1]}")
            verdict = rt.value_verdict(value)
            if verdict is not None:
                raise _violation(f"'.{name}'", f"the value {verdict}")
            if tv is method_type:
                func = value.__func__
                if isinstance(_getattr(func, "__module__", None), str):
                    library_methods[_id(func)] = func  # a library function: long-lived
            return value

        def _getattr_(obj: Any, name: str) -> Any:
            tobj = _type(obj)
            if tobj not in plain_subjects:
                if _isinstance(obj, module_type):
                    return module_getattr(obj, name)
                check_subject(obj, tobj, name)
            value = _getattr(obj, name)
            tv = _type(value)
            if tv in plain_values:
                return value
            if tv is builtin_type:
                owner = value.__self__
                if owner is not None and not _isinstance(owner, module_type):
                    return value  # a method bound to an object, such as t.sum
            elif tv is method_type and library_methods.get(_id(value.__func__)) is value.__func__:
                return value
            return check_value(value, tv, name)

        def _getattr_closely_(obj: Any, name: str) -> Any:
            look_closer(obj, name)
            if name in CONSUMER_METHODS and _isinstance(obj, rt.tensor_types):
                return guarded_method(_getattr_(obj, name), name)
            return _getattr_(obj, name)

        def _write_(obj: Any, name: str) -> Any:
            if name[:1] == "_":
                raise _violation(f"changing '.{name}'", UNDERSCORE_WRITE)
            if _type(obj) in plain_subjects:
                return obj
            if name in CLOSER_LOOK or name[:1] == "_":
                look_closer(obj, name)
            if _isinstance(obj, _type):
                if obj in rt.user_classes:
                    return obj
                raise _violation(
                    f"writing '{name}' on the class {obj.__qualname__}",
                    "classes from torch, numpy and Python are shared by everything that "
                    "runs; classes the scenario defines may be changed",
                )
            if _isinstance(obj, module_type):
                if backend_flag(obj, name) or rt.is_home_module(obj):
                    return obj
                raise _violation(
                    f"writing '{_getattr(obj, '__name__', '?')}.{name}'",
                    "modules are shared by everything that runs",
                )
            verdict = rt.subject_verdict(obj)
            if verdict is not None:
                raise _violation(f"writing '.{name}'", f"the object {verdict}")
            return obj

        def _aug_load_(obj: Any, name: str) -> Tuple[Any, str, Any]:
            _write_(obj, name)
            if name in CLOSER_LOOK or name[:1] == "_":
                look_closer(obj, name)
            return (obj, name, _getattr_(obj, name))

        def _aug_store_(ref: Tuple[Any, str, Any], operand: Any, op: str) -> None:
            obj, name, current = ref
            setattr(obj, name, _IOP_FUNCTIONS[op](current, operand))

        return {
            "_getattr_": _getattr_,
            "_getattr_closely_": _getattr_closely_,
            "_write_": _write_,
            "_aug_load_": _aug_load_,
            "_aug_store_": _aug_store_,
        }

    # -- builtins -----------------------------------------------------------

    def _make_builtins(self) -> Dict[str, Any]:
        names = (
            "abs all any ascii bin bool bytes callable chr classmethod complex "
            "dict dir divmod enumerate filter float format frozenset hash hex id int "
            "isinstance issubclass iter len list map max min next object oct ord pow "
            "print property range repr reversed round set slice sorted staticmethod str "
            "sum super tuple zip"
        ).split()
        table: Dict[str, Any] = {name: getattr(builtins, name) for name in names}
        table["Ellipsis"] = Ellipsis
        table["NotImplemented"] = NotImplemented
        for name, value in vars(builtins).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and not name.startswith("_")
                # except* is refused; raising SystemExit or KeyboardInterrupt
                # would end the runner, like exit().
                and name
                not in ("BaseExceptionGroup", "ExceptionGroup", "SystemExit", "KeyboardInterrupt")
            ):
                table[name] = value
        # What plain exec finds for a class body's ``__module__ = __name__``.
        table["__name__"] = "builtins"
        table["type"] = self.type_proxy
        table["hasattr"] = make_hasattr(self)
        table["__import__"] = make_import(self)
        table["__build_class__"] = make_build_class(self)
        table.update(self.guards)
        return table


_RUNTIME: Optional[_Runtime] = None
_RUNTIME_LOCK = threading.Lock()


def _runtime() -> _Runtime:
    global _RUNTIME
    if _RUNTIME is None:
        with _RUNTIME_LOCK:
            if _RUNTIME is None:
                _RUNTIME = _Runtime()
    return _RUNTIME


def safe_globals(base: dict, local: Sequence[Source] = (), home: Sequence[str] = ()) -> dict:
    """A namespace for code from :func:`compile_safe`, for one run.

    ``base`` (torch, nn, F, same_storage, shares_memory, ...) plus
    ``__builtins__``: the builtins safe mode allows and the runtime guards the
    compiled code calls. The guards live in ``__builtins__`` so that the
    scenario's namespace holds only what the scenario binds. ``local``: the
    modules beside a Python file, which its imports run (:mod:`.local`);
    ``home``: other module names whose objects are the run's own code
    (``__main__``, a Python file's).
    """
    rt = _runtime()
    rt.learn_loaded_libraries()
    modules = LocalModules(local) if local else None
    rt.set_home(tuple(home) + tuple(modules.names if modules is not None else ()))
    namespace = dict(base)
    builtins_table = namespace["__builtins__"] = dict(rt.builtins)
    if modules is not None:
        modules.builtins, modules.home = builtins_table, rt
        builtins_table["__import__"] = make_import(rt, modules)
    return namespace
