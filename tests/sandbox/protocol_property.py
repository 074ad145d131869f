"""Every top-level NumPy and torch function, given an object that holds a memory protocol.

Run as a script, in a process of its own (the functions change global state: print
options, error handlers, grad mode), by ``test_protocol_class.py``. Hypothesis picks
the object: which kind of holder (a torch module, an instance of a class the
scenario defined), which protocol, how the protocol names the memory. Every
function is then called with the object in several argument positions, twice, with
the memory it names holding other bytes the second time. A function that read the
memory through the protocol gives two different answers, or changed the memory;
one that did not gives the same answer both times. Prints the functions that
read it, as JSON (none, once safe mode closes the protocols where they live).
"""

from __future__ import annotations

import json
import re
import sys
import warnings

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensortrace.sandbox import compile_safe, safe_globals

try:
    from tensortrace.sandbox.protocols import closed
except ImportError:  # a version of the tool that did not close them: the script still runs
    from contextlib import nullcontext as closed

CANARY = np.zeros(64, dtype=np.uint8)
# functions whose answer is about the call itself, or that change what the calls after see
# (and empty*: it returns whatever memory it was given, canary bytes included)
SKIP = re.compile(
    r"^(set|save|load|seed|manual_seed|use_|show|info|test|compile|export|from_file|empty)"
)
ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def protocol_value(name: str) -> object:
    """What the protocol attribute holds: a way to the canary's memory."""
    if name == "__array_interface__":
        return {"shape": (64,), "typestr": "|u1", "data": (CANARY.ctypes.data, False), "version": 3}
    if name == "__array_struct__":
        return CANARY.__array_struct__
    if name == "__array__":
        return lambda *args, **kwargs: CANARY
    if name == "__dlpack__":
        return lambda *args, **kwargs: torch.from_numpy(CANARY).__dlpack__()
    return lambda *args, **kwargs: (1, 0)  # __dlpack_device__


def scenario_instance() -> object:
    """An object of a class the scenario defined, built by safe mode's own class statement."""
    ns = safe_globals({"torch": torch, "np": np})
    exec(compile_safe("class Box:\n    pass\nbox = Box()\n", "<scenario>"), ns)
    return ns["box"]


def holder(kind: str, name: str) -> object:
    obj = {
        "parameter-dict": torch.nn.ParameterDict,
        "module-dict": torch.nn.ModuleDict,
        "linear": lambda: torch.nn.Linear(2, 2),
        "scenario-class": scenario_instance,
    }[kind]()
    # as library code writing the instance's __dict__ would (functools.cached_property)
    obj.__dict__[name] = protocol_value(name)
    return obj


def summary(call) -> str:
    """What a call gave, memory and all, with addresses left out."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = call()
    except BaseException as exc:  # noqa: BLE001 - any answer counts
        return f"raised {type(exc).__name__}"
    return ADDRESS.sub("?", _spelled(result))


def _spelled(value: object, depth: int = 0) -> str:
    if isinstance(value, torch.Tensor):
        try:
            return "tensor " + value.detach().cpu().contiguous().numpy().tobytes().hex()
        except Exception:  # noqa: BLE001 - a tensor numpy cannot take
            return "tensor " + repr(value)
    if isinstance(value, np.ndarray):
        return "array " + value.tobytes().hex() if value.dtype != object else repr(value)
    if isinstance(value, (list, tuple)) and depth < 3:
        return "[" + ", ".join(_spelled(v, depth + 1) for v in list(value)[:64]) + "]"
    try:
        return repr(value)[:2000]
    except Exception:  # noqa: BLE001
        return type(value).__name__


def functions():
    found = []
    for module in (np, torch):
        for name in dir(module):
            if name.startswith("_") or SKIP.match(name):
                continue
            function = getattr(module, name, None)
            if callable(function) and not isinstance(function, type):
                found.append((f"{module.__name__}.{name}", function))
    return found


FUNCTIONS = functions()
READERS: dict = {}


@settings(
    max_examples=int(sys.argv[1]) if len(sys.argv) > 1 else 8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(
    kind=st.sampled_from(["parameter-dict", "module-dict", "linear", "scenario-class"]),
    name=st.sampled_from(
        ["__array_interface__", "__array_struct__", "__array__", "__dlpack__", "__dlpack_device__"]
    ),
)
def every_function_leaves_the_memory_unread(kind: str, name: str) -> None:
    with closed():  # as while a safe-mode step runs
        obj = holder(kind, name)
        for label, function in FUNCTIONS:
            for position, args in enumerate(((obj,), (obj, obj), ([obj],), (1, obj))):
                answers = []
                for fill in (0x11, 0x22):
                    CANARY[:] = fill
                    answers.append(summary(lambda: function(*args)))
                    if not (CANARY == fill).all():
                        answers.append("wrote the memory")
                if len(set(answers)) > 1:
                    READERS.setdefault(f"{label} (args {position}, {kind}, {name})", answers[:2])


if __name__ == "__main__":
    every_function_leaves_the_memory_unread()
    print(json.dumps({"functions": len(FUNCTIONS), "readers": READERS}))
