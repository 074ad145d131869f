"""The memory protocols, closed where they live: on torch modules and on the scenario's classes.

Wrapping the functions that read ``__array_interface__`` closes names, not the class:
``np.atleast_1d(pd)``, like most NumPy functions, reads it too. So the objects that
could carry such a name refuse it, when it is written and when it is read, whichever
function reads it; ``protocol_property.py`` then calls every top-level NumPy and torch
function with an object that holds one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from tensortrace.sandbox import SafeModeViolation, compile_safe, safe_globals
from tensortrace.sandbox.protocols import PROTOCOL_NAMES, Shield, closed, is_protocol_name

WINDOW = "{'shape': (8,), 'typestr': '|u1', 'data': (id(pd), False), 'version': 3}"


def safe_run(source: str) -> dict:
    ns = safe_globals({"torch": torch, "nn": torch.nn, "np": np})
    with closed():  # as while a safe-mode step runs
        exec(compile_safe(textwrap.dedent(source), "<step>"), ns)
    return ns


@pytest.mark.parametrize(
    "write",
    [
        "pd = nn.ParameterDict()\npd['__array_' + 'interface__'] = " + WINDOW,
        "pd = nn.ParameterDict({'__array_' + 'struct__': 1})",
        "md = nn.ModuleDict()\nmd['__arr' + 'ay__'] = nn.Identity()",
        "md = nn.ModuleDict({'__dl' + 'pack__': nn.Identity()})",
        "import collections\n"
        "s = nn.Sequential(collections.OrderedDict([('__arr' + 'ay__', nn.Identity())]))",
        "m = nn.Module()\nm.add_module('__array_' + 'interface__', nn.Module())",
        "m = nn.Module()\nm.register_module('__dl' + 'pack__', nn.Module())",
        "m = nn.Module()\nm.register_buffer('__array_' + 'interface__', torch.ones(1))",
        "m = nn.Module()\nm.register_parameter('__arr' + 'ay__', nn.Parameter(torch.ones(1)))",
        "m = nn.Sequential(nn.Linear(2, 2))\nm.set_submodule('__arr' + 'ay__', nn.Identity())",
        "pd = nn.ParameterDict()\npd.update({'__array_' + 'interface__': 1})",
        "pd = nn.ParameterDict()\npd.setdefault('__array_priority__', 1)",
    ],
)
def test_a_torch_module_refuses_a_protocol_name_written_at_run_time(write: str) -> None:
    with pytest.raises(SafeModeViolation, match="is not allowed in safe mode"):
        safe_run(write)


def test_the_same_writes_work_in_plain_python_the_control() -> None:
    pd = torch.nn.ParameterDict()
    window = np.arange(8, dtype=np.uint8) + 100
    pd["__array_" + "interface__"] = {
        "shape": (8,),
        "typestr": "|u1",
        "data": (window.ctypes.data, False),
        "version": 3,
    }
    assert np.atleast_1d(pd).tolist() == window.tolist()  # what the closure prevents


CACHED = """
import functools
class Box:
    pass
cp = functools.cached_property(lambda self: {window})
cp.attrname = '__array_' + 'interface__'
Box.window = cp
b = Box()
b.window
"""


def test_an_instance_of_a_scenario_class_never_reads_as_a_protocol() -> None:
    """``cached_property`` writes the instance's ``__dict__`` under a name the scenario chose."""
    window = np.arange(8, dtype=np.uint8)
    source = CACHED.format(
        window=f"{{'shape': (8,), 'typestr': '|u1', 'data': ({window.ctypes.data}, False), "
        "'version': 3}"
    )
    ns = safe_run(source)
    assert "__array_interface__" in vars(ns["b"])  # it got there ...
    for read in (np.atleast_1d, np.sum, np.add.reduce, lambda b: np.concatenate([b])):
        with pytest.raises(SafeModeViolation, match="'__array_interface__' on a Box object"):
            read(ns["b"])  # ... and is refused wherever it is read


def test_shields_leave_every_other_answer_as_it_was() -> None:
    ns = safe_run(
        """
        class Box:
            pass
        class Mine(torch.Tensor):
            pass
        b = Box()
        t = torch.ones(2).as_subclass(Mine)
        lin = nn.Linear(2, 2)
        found = (hasattr(b, '__arr' + 'ay__'), hasattr(lin, '__array_' + 'interface__'),
                 hasattr(Box, '__arr' + 'ay__'))
        """
    )
    assert ns["found"] == (False, False, False)
    assert np.asarray(ns["t"]).tolist() == [1.0, 1.0]  # Tensor.__array__ is not shadowed
    assert isinstance(vars(ns["Box"])["__array_interface__"], Shield)
    assert "__array__" not in vars(ns["Mine"])  # torch.Tensor defines it: no shield


def test_torch_modules_are_left_as_they_were_once_the_steps_are_done() -> None:
    before = dict(vars(torch.nn.Module))
    with closed():
        with closed():  # nested: the inner end changes nothing
            pass
        assert isinstance(vars(torch.nn.Module)["__array_interface__"], Shield)
    assert dict(vars(torch.nn.Module)) == before


def test_the_names_are_the_protocols_and_their_families() -> None:
    assert {"__array_interface__", "__array_struct__", "__array__", "__dlpack__"} <= PROTOCOL_NAMES
    assert {"__buffer__", "__cuda_array_interface__", "__torch_function__"} <= PROTOCOL_NAMES
    assert is_protocol_name("__array_something_new__") and is_protocol_name("__dlpack_x__")
    assert not is_protocol_name("weight") and not is_protocol_name("__init__")


def test_a_safe_mode_run_refuses_at_the_line_that_writes_it(tmp_path: Path) -> None:
    from tensortrace.run.runner import run_scenario
    from tensortrace.scenario import loads_scenario

    steps = [
        "pd = torch.nn.ParameterDict()",
        "pd['__array_' + 'interface__'] = " + WINDOW,
        "lin = torch.nn.Linear(2, 2)\nq = torch.nn.ParameterDict({'w': torch.ones(1)})",
    ]
    body = "".join(f"  - run: {json.dumps(s)}\n" for s in steps)
    scenario = loads_scenario(f"title: t\nsteps:\n{body}", path=str(tmp_path / "s.yaml"))
    [trace] = run_scenario(scenario, safe=True)
    assert [s.status for s in trace.steps] == ["ok", "raised", "ok"]
    assert trace.steps[1].error.type == "SafeModeViolation"
    assert "'__array_interface__' on a ParameterDict object" in trace.steps[1].error.message


def test_every_numpy_and_torch_function_leaves_the_memory_unread() -> None:
    """The property: whatever holder, protocol and argument position Hypothesis picks, no
    top-level function of NumPy or torch reads (or writes) the memory the object names."""
    script = Path(__file__).with_name("protocol_property.py")
    done = subprocess.run(
        [sys.executable, str(script), "6"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["functions"] > 900  # every one, not a chosen few
    assert result["readers"] == {}
