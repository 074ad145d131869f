"""Both layers of safe mode refuse the same modules, for the same reason.

The syntax-tree check and the run-time guards read one table of refused
modules. These tests go through every entry and exercise both layers for
real: the module written in scenario code, the module reached at run time,
and, where the table says so, an object the module defines reached at run
time. A module added to one layer only, or a reason that differs between
them, fails here.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch

from tensortrace.sandbox import SafeModeViolation, check_source, compile_safe, safe_globals
from tensortrace.sandbox.policy import ALLOWED_MODULES, REFUSED_MODULES


def _import(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # an optional dependency, such as tensorboard
        pytest.skip(f"{name} cannot be imported here: {exc}")


def _defined_object(module: types.ModuleType, name: str):
    """A function or class defined in module ``name`` or below it, or None.

    Objects that torch re-exports under a refused name (``torch.get_file_path``)
    are left out: they are refused by name, and this is about their origin.
    """
    reexported = {id(v) for v in vars(torch).values()}
    for value in vars(module).values():
        origin = getattr(value, "__module__", None)
        if (
            isinstance(value, (type, types.FunctionType))
            and id(value) not in reexported
            and isinstance(origin, str)
            and (origin == name or origin.startswith(name + "."))
        ):
            return value
    return None


def _run_safe(source: str, **values) -> None:
    assert check_source(source) == [], check_source(source)
    ns = safe_globals({"torch": torch, **values})
    exec(compile_safe(source, "<step>"), ns)


@pytest.mark.parametrize("name", sorted(REFUSED_MODULES))
def test_refused_module_is_refused_by_the_static_check(name):
    refusals = check_source(f"import {name}\n")
    assert refusals and "'import " in refusals[0].message
    parent, _, child = name.rpartition(".")
    if parent in ALLOWED_MODULES and not child.startswith("_"):
        # Written as an attribute of an allowed module: the table's reason.
        (r,) = check_source(f"import {parent}\nm = {name}\n")
        assert f"'{name}' is not allowed" in r.message
        assert REFUSED_MODULES[name].reason in r.message


@pytest.mark.parametrize("name", sorted(REFUSED_MODULES))
def test_refused_module_is_refused_by_the_runtime_guards(name):
    module = _import(name)
    # Reached as a value the static check cannot see.
    with pytest.raises(SafeModeViolation) as info:
        _run_safe("n = box[0].__name__\n", box=[module])
    assert REFUSED_MODULES[name].reason in str(info.value)
    parent, _, child = name.rpartition(".")
    if parent in ALLOWED_MODULES and not child.startswith("_"):
        # Reached through an alias of its parent: the same reason.
        with pytest.raises(SafeModeViolation) as info:
            _run_safe(f"m = box[0]\nc = m.{child}\n", box=[importlib.import_module(parent)])
        assert REFUSED_MODULES[name].reason in str(info.value)


@pytest.mark.parametrize("name", sorted(n for n, e in REFUSED_MODULES.items() if e.objects))
def test_objects_of_a_refused_module_are_refused_wherever_they_turn_up(name):
    value = _defined_object(_import(name), name)
    if value is None:
        pytest.skip(f"{name} defines no function or class at its top level")

    holder = types.SimpleNamespace(found=value)  # plain data, as safe mode sees it
    with pytest.raises(SafeModeViolation) as info:
        _run_safe("f = holder.found\n", holder=holder)
    assert "which safe mode does not allow" in str(info.value)


def test_objects_of_modules_refused_as_modules_only_stay_usable():
    # torch.cuda re-exports its memory statistics from torch.cuda.memory, and
    # storages come from torch.storage: the modules are refused, not these.
    assert torch.cuda.memory_allocated.__module__ == "torch.cuda.memory"
    assert not REFUSED_MODULES["torch.cuda.memory"].objects
    _run_safe("f = torch.cuda.memory_allocated\ns = torch.ones(1).untyped_storage()\n")
    with pytest.raises(SafeModeViolation):
        _run_safe("m = torch.cuda\nmem = m.memory\n")
