"""What the run-time guards decide about an object, and the caches that keep it cheap.

The guards of :mod:`tensortrace.sandbox.guards` run on every attribute read
of a scenario, so the questions they ask (may code hold this value? may it
read attributes of this object? what may be read from this module?) are
answered here once per library object and remembered. The answers come from
the policy tables (:mod:`tensortrace.sandbox.policy`); this module only
applies them to live objects: modules, classes, functions, and instances by
the module that defined their class.
"""

from __future__ import annotations

import builtins
import sys
import threading
import types
import weakref
from typing import Any, Dict, FrozenSet, Optional, Set, Tuple

from .consumers import consumer_table
from .policy import (
    ALLOWED_MODULES,
    HOME_ROOTS,
    IMPORT_RULE,
    METACLASS,
    ONLY_MODULE_NAMES,
    REFUSED_BUILTINS,
    REFUSED_CALLS,
    REFUSED_MODULE_NAMES,
    REFUSED_MODULES,
    SAFE_INSTANCE_ROOTS,
    TRUSTED_FOREIGN_MODULES,
    module_reason,
    refused_origin,
)
from .policy import violation as _violation


def _origin_verdict(origin: Optional[str], is_callable: bool) -> Optional[str]:
    """Why objects defined in module ``origin`` are refused (a phrase), or None."""
    if not isinstance(origin, str):
        return None
    if refused_origin(origin) is not None:
        return f"comes from {origin}, which safe mode does not allow"
    root = origin.split(".", 1)[0]
    if root in HOME_ROOTS or (not is_callable and root in SAFE_INSTANCE_ROOTS):
        return None
    return f"comes from {origin}, outside torch and numpy"


class _ModuleRule:
    """What may be read from one allowed module."""

    __slots__ = ("module", "only", "refused", "verified")

    def __init__(
        self,
        module: types.ModuleType,
        only: Optional[FrozenSet[str]],
        refused: Dict[str, str],
        verified: Dict[str, Any],
    ) -> None:
        self.module = module
        self.only = only
        self.refused = refused  # name -> why (a phrase after "it")
        self.verified = verified  # name -> the value found fine on first access


class Verdicts:
    """The verdicts of safe mode on live objects, and what they share (built once per process).

    Verdicts on *library* objects are cached (by id, holding a reference, or
    by module name); objects made by the scenario are never held, so the
    guards do not change what gets freed when.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.refused_ids: Dict[int, Tuple[Any, str]] = {}
        self.module_rules: Dict[int, _ModuleRule] = {}
        self.origin_cache: Dict[Tuple[Any, bool], Optional[str]] = {}
        # module name -> verdict for instances of classes defined there
        self.instance_origins: Dict[str, Optional[str]] = {}
        # id -> library function whose bound methods are fine (functions of
        # modules and classes live as long as those do)
        self.library_methods: Dict[int, Any] = {}
        self.user_classes: "weakref.WeakSet[type]" = weakref.WeakSet()
        # the run's own code beyond its file: the modules beside it (``local.py``) by id, and
        # the module names whose objects are home (theirs, and ``__main__`` for a Python file)
        self.home_modules: Dict[int, types.ModuleType] = {}
        self.home_roots: FrozenSet[str] = frozenset()
        self.dangerous_types: Set[type] = {
            types.FrameType,
            types.TracebackType,
            types.CodeType,
            types.CellType,
        }
        for name, reason in {**REFUSED_BUILTINS, **REFUSED_CALLS}.items():
            obj = getattr(builtins, name, None)
            if obj is not None:
                self.refuse_object(obj, f"builtins.{name}", reason)
        self.refuse_object(builtins.__import__, "builtins.__import__", "imports modules by name")
        self.refuse_object(
            builtins.__build_class__,
            "builtins.__build_class__",
            "builds classes around the checks on class statements",
        )
        self.plain_values: Set[type] = {
            int,
            float,
            bool,
            complex,
            str,
            bytes,
            type(None),
            tuple,
            list,
            dict,
            set,
            frozenset,
            slice,
            range,
        }
        self.plain_subjects: Set[type] = {
            int,
            float,
            bool,
            complex,
            str,
            bytes,
            tuple,
            list,
            dict,
            set,
            frozenset,
        }
        self.storage_types: Tuple[type, ...] = ()
        self.tensor_types: Tuple[type, ...] = ()
        # id -> object, for the allowed names of collections and functools:
        # they come from outside torch and numpy but are plain tools.
        self.trusted: Dict[int, Any] = {}
        self.learning_names = False
        for module_name in TRUSTED_FOREIGN_MODULES:
            module = sys.modules.get(module_name) or __import__(module_name)
            for name in ONLY_MODULE_NAMES.get(module_name, ()):
                value = getattr(module, name, None)
                if value is not None:
                    self.trusted[id(value)] = value
        self.numpy_arrays: Tuple[type, ...] = ()
        self.numpy_learned = False
        # id -> (np.asarray and kin, the stand-in that takes only plain data)
        self.consumers: Dict[int, Tuple[Any, Any]] = {}

    # -- set-up -----------------------------------------------------------

    def set_home(self, roots: Any) -> None:
        """A new run: the module names whose objects are its own code (never cached)."""
        self.home_roots = frozenset(roots)
        self.home_modules = {}

    def home_module(self, module: types.ModuleType) -> None:
        """A module beside the run's file, made now: its attributes are read as the file's."""
        self.home_modules[id(module)] = module

    def is_home_module(self, module: Any) -> bool:
        return self.home_modules.get(id(module)) is module

    def refuse_object(self, obj: Any, label: str, reason: str) -> None:
        self.refused_ids[id(obj)] = (obj, f"is {label}, which {reason}")

    def learn_loaded_libraries(self) -> None:
        """Fast paths for torch and numpy types, and their refused objects, once imported."""
        torch = sys.modules.get("torch")
        if torch is not None and not self.storage_types:
            fast = [
                torch.Tensor,
                torch.nn.Parameter,
                torch.Size,
                torch.dtype,
                torch.device,
                torch.layout,
                torch.memory_format,
            ]
            self.plain_values.update(fast)
            self.plain_subjects.update(fast)
            self.storage_types = (torch.UntypedStorage, torch.TypedStorage)
            self.tensor_types = (torch.Tensor,)
            self.module_rule(torch)
        numpy = sys.modules.get("numpy")
        if numpy is not None and not self.numpy_learned and hasattr(numpy, "ndarray"):
            self.numpy_learned = True
            self.plain_values.add(numpy.ndarray)
            self.numpy_arrays = (numpy.ndarray,)
            self.plain_subjects.add(numpy.ndarray)
            self.module_rule(numpy)
        if len(self.consumers) < 2 * sum(m is not None for m in (torch, numpy)):
            self.consumers = consumer_table()
        # Objects refused by name are refused wherever they turn up, even
        # before the scenario reads the module that exports them.
        if not self.learning_names:
            self.learning_names = True
            try:
                for name in REFUSED_MODULE_NAMES:
                    module = sys.modules.get(name)
                    if module is not None and id(module) not in self.module_rules:
                        self.module_rule(module)
            finally:
                self.learning_names = False

    def module_rule(self, module: types.ModuleType) -> _ModuleRule:
        rule = self.module_rules.get(id(module))
        if rule is not None and rule.module is module:
            return rule
        name = getattr(module, "__name__", None)
        if not (
            isinstance(name, str) and name in ALLOWED_MODULES and sys.modules.get(name) is module
        ):
            reason = module_reason(name)
            raise _violation(
                f"module '{name}'",
                f"it is a module that {reason}" if reason else IMPORT_RULE,
            )
        with self.lock:
            self.learn_loaded_libraries()
            only = ONLY_MODULE_NAMES.get(name)
            refused: Dict[str, str] = dict(REFUSED_MODULE_NAMES.get(name, {}))
            prefix = name + "."
            for full, entry in REFUSED_MODULES.items():
                if (
                    full.startswith(prefix)
                    and "." not in full[len(prefix) :]
                    and full not in ALLOWED_MODULES
                ):
                    refused[full[len(prefix) :]] = f"is a module that {entry.reason}"
            # The objects refused by name are refused wherever they turn up
            # (m = torch; m.save, or as an attribute of anything else). Other
            # names are checked, and their verdict kept, on first access.
            namespace = vars(module)
            for key, reason in REFUSED_MODULE_NAMES.get(name, {}).items():
                if key in namespace:
                    self.refuse_object(namespace[key], f"{name}.{key}", reason)
            rule = _ModuleRule(module, only, refused, {})
            self.module_rules[id(module)] = rule
            return rule

    # -- verdicts ---------------------------------------------------------

    def is_trusted(self, obj: Any) -> bool:
        """One of the allowed collections/functools objects, or an instance of such a class."""
        trusted = self.trusted
        return trusted.get(id(obj)) is obj or trusted.get(id(type(obj))) is type(obj)

    def origin(self, origin: Any, is_callable: bool) -> Optional[str]:
        if self.home_roots and isinstance(origin, str):
            if origin.split(".", 1)[0] in self.home_roots:
                return None  # the run's own code: never cached, another run may differ
        key = (origin, is_callable)
        try:
            return self.origin_cache[key]
        except (KeyError, TypeError):
            verdict = _origin_verdict(origin, is_callable)
            if isinstance(origin, str):
                self.origin_cache[key] = verdict
                if not is_callable:
                    self.instance_origins[origin] = verdict
            return verdict

    def value_verdict(self, value: Any) -> Optional[str]:
        """Why this object must not be handed to scenario code (a phrase), or None."""
        tv = type(value)
        if tv in self.plain_values or self.is_trusted(value):
            return None
        entry = self.refused_ids.get(id(value))
        if entry is not None and entry[0] is value:
            return entry[1]
        if isinstance(value, types.ModuleType):
            name = getattr(value, "__name__", None)
            if name in ALLOWED_MODULES and sys.modules.get(name) is value:
                return None
            if self.is_home_module(value):
                return None
            reason = module_reason(name)
            return f"is the module {name}, which " + (
                reason if reason else "safe mode does not allow"
            )
        if tv in self.dangerous_types:
            return f"is a {tv.__name__} object (interpreter internals)"
        if tv is types.BuiltinFunctionType:
            owner = value.__self__
            if owner is not None and not isinstance(owner, types.ModuleType):
                return None  # a method bound to an object, such as t.sum
            origin = getattr(value, "__module__", None) or getattr(owner, "__name__", None)
            return self.origin(origin, True)
        if tv is types.MethodType:
            return self.value_verdict(value.__func__)
        if isinstance(value, type):
            if value in self.dangerous_types:
                return f"is the {value.__name__} type (interpreter internals)"
            verdict = self.origin(getattr(value, "__module__", None), True)
            if verdict is None and issubclass(value, type):
                return f"is the metaclass {value.__qualname__}, and {METACLASS}"
            return verdict
        if callable(value):
            origin = getattr(value, "__module__", None)
            if not isinstance(origin, str):
                origin = getattr(tv, "__module__", None)
            return self.origin(origin, True)
        return self.origin(getattr(tv, "__module__", None), False)

    def subject_verdict(self, obj: Any) -> Optional[str]:
        """Why no attribute of this object may be read or written (a phrase), or None."""
        tv = type(obj)
        if tv in self.dangerous_types:
            return f"is a {tv.__name__} object (interpreter internals)"
        if isinstance(obj, BaseException) or self.is_trusted(obj):
            return None  # whoever raised it; what it holds is checked as it is read
        if isinstance(obj, type):
            if issubclass(obj, BaseException):
                return None
            entry = self.refused_ids.get(id(obj))
            if entry is not None and entry[0] is obj:
                return entry[1]
            if obj in self.dangerous_types:
                return f"is the {obj.__name__} type (interpreter internals)"
            return self.origin(getattr(obj, "__module__", None), True)
        return self.origin(getattr(tv, "__module__", None), False)
