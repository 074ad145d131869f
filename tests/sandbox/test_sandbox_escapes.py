"""Red team: the ways out of safe mode that reach native memory or generated code.

Each test writes the attack the way a scenario author would, and shows that
safe mode refuses it with a message that says why, before it has any effect:
statically when the attack is written literally, at run time when it is
reached another way. (The operating system's confinement of the child is
what makes such an escape harmless if one is ever missed; these refusals are
what make the message clear.)
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

from tensortrace.errors import PolicyError
from tensortrace.sandbox import SafeModeViolation, check_source, compile_safe, safe_globals


def namespace() -> dict:
    return safe_globals({"torch": torch, "nn": torch.nn, "np": np})


def refused_statically(source: str, *words: str) -> str:
    """The code is refused before it runs; the first message names ``words``."""
    source = textwrap.dedent(source)
    refusals = check_source(source)
    assert refusals, f"not refused: {source!r}"
    message = " | ".join(r.message for r in refusals)
    for word in words:
        assert word in message, message
    with pytest.raises(PolicyError):
        compile_safe(source, "<step>")
    return message


def refused_at_run_time(source: str, *words: str, ns: dict | None = None) -> str:
    """The code passes the static check and is stopped while it runs."""
    source = textwrap.dedent(source)
    assert check_source(source) == [], check_source(source)
    ns = namespace() if ns is None else ns
    with pytest.raises(SafeModeViolation) as info:
        exec(compile_safe(source, "<step>"), ns)
    message = str(info.value)
    assert "not allowed in safe mode" in message and "--trust" in message
    for word in words:
        assert word in message, message
    return message


def runs(source: str) -> dict:
    source = textwrap.dedent(source)
    assert check_source(source) == [], check_source(source)
    ns = namespace()
    exec(compile_safe(source, "<step>"), ns)
    return ns


# -- raw memory through numpy's and torch's exchange protocols ---------------

ARRAY_INTERFACE = "{'shape': (8,), 'typestr': '|u1', 'data': (id(print), False), 'version': 3}"


def test_a_class_with_array_interface_is_refused():
    refused_statically(
        f"""
        class Window:
            __array_interface__ = {ARRAY_INTERFACE}
        peek = np.asarray(Window())
        """,
        "'__array_interface__'",
        "read and write memory at any address",
    )


def test_array_interface_as_a_property_or_attribute_is_refused():
    refused_statically(
        f"""
        class Window:
            @property
            def __array_interface__(self):
                return {ARRAY_INTERFACE}
        """,
        "defining '__array_interface__'",
    )
    refused_statically(
        f"""
        class Window:
            pass
        w = Window()
        w.__array_struct__ = {ARRAY_INTERFACE}
        """,
        "'.__array_struct__'",
    )


def test_a_class_with_dlpack_is_refused():
    refused_statically(
        """
        class Capsule:
            def __dlpack__(self, stream=None):
                return None
            def __dlpack_device__(self):
                return (1, 0)
        t = torch.from_dlpack(Capsule())
        """,
        "'__dlpack__'",
        "'__dlpack_device__'",
    )


def test_the_protocol_names_as_strings_are_refused():
    # The class-building call of the next attack, with the name as a key.
    refused_statically(
        "M = type(torch.autograd.Function)\nX = M('X', (), {'__array_interface__':"
        f" {ARRAY_INTERFACE}}})",
        "'__array_interface__'",
    )
    refused_statically("d = dict(__dlpack__=1)", "'__dlpack__'")


# -- classes built by a metaclass obtained with type() -----------------------


@pytest.mark.parametrize(
    "cls", ["torch.autograd.Function", "torch.Tensor", "torch.autograd.graph.Node"]
)
def test_a_metaclass_obtained_with_type_is_refused(cls):
    # torch.autograd.graph.Node is an abc.ABC: its metaclass is ABCMeta.
    refused_at_run_time(
        f"""
        key = '__array' + '_interface__'
        M = type({cls})
        X = M('X', (), {{key: {ARRAY_INTERFACE}}})
        """,
        "metaclass",
        "builds classes around the checks",
    )


def test_calling_the_tensor_metaclass_directly_is_refused():
    refused_at_run_time("X = type(torch.Tensor)('X', (), {})", "metaclass")


def test_a_metaclass_reached_as_an_attribute_is_refused():
    refused_at_run_time(
        "m = torch.autograd.function\nM = m.FunctionMeta\nX = M('X', (), {})",
        "the metaclass FunctionMeta",
    )


def test_ordinary_classes_and_type_still_work():
    ns = runs(
        """
        class Double(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2
            @staticmethod
            def backward(ctx, g):
                return g * 2
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(2, 2)
        class Plain(Net):
            def __init__(self):
                Net.__init__(self)
        y = Double.apply(torch.ones(2))
        kinds = (type(y) is torch.Tensor, type(Net) is type, type(Plain()).__name__)
        """
    )
    assert ns["kinds"] == (True, True, "Plain")
    assert ns["y"].tolist() == [2.0, 2.0]


# -- renaming library objects, and re-initialising shared ones ---------------


@pytest.mark.parametrize("attr", ["__name__", "__qualname__", "__init__"])
def test_writing_names_or_init_of_library_objects_is_refused(attr):
    # make_fx pastes an operator's __name__ into the Python source it runs.
    refused_statically(
        f"op = torch.add\nop.{attr} = 'add; import os'",
        f"writing '.{attr}'",
        "can be read, not changed",
    )
    refused_statically(f"del torch.nn.Linear.{attr}", f"deleting '.{attr}'")


def test_the_write_guard_refuses_names_too():
    write = namespace()["__builtins__"]["_write_"]
    with pytest.raises(SafeModeViolation, match="can be read, not changed"):
        write(torch.add, "__name__")
    assert torch.add.__name__ == "add"


def test_calling_init_on_a_module_is_refused():
    name = torch.nn.__name__
    refused_at_run_time("m = torch.nn\nm.__init__('evil')", "'.__init__'", "re-initialises")
    refused_at_run_time("M = type(torch)\nM.__init__(torch, 'evil')", "'.__init__'")
    assert torch.nn.__name__ == name and torch.__name__ == "torch"


def test_calling_init_on_a_library_descriptor_is_refused():
    mean = torch.distributions.Normal.mean
    refused_at_run_time(
        "p = torch.distributions.Normal.mean\np.__init__(lambda self: 42)", "re-initialises"
    )
    refused_at_run_time(
        "p = torch.distributions.Normal.mean\nproperty.__init__(p, lambda self: 42)",
        "re-initialises",
    )
    assert torch.distributions.Normal.mean is mean
    assert torch.distributions.Normal(0.0, 1.0).mean.item() == 0.0


# -- dangling memory, and code generation -------------------------------------


def test_frombuffer_over_a_bytearray_is_refused():
    # The bytearray's memory is freed by clear(); the tensor still points there.
    refused_statically(
        """
        b = bytearray(64)
        t = torch.frombuffer(b, dtype=torch.uint8)
        b.clear()
        """,
        "'torch.frombuffer'",
        "freed while the tensor still points into it",
        "'bytearray'",
    )
    refused_at_run_time("m = torch\nfb = m.frombuffer", "'torch.frombuffer'")


def test_resizing_a_numpy_array_in_place_is_refused():
    refused_at_run_time(
        "a = np.zeros(4)\nt = torch.from_numpy(a)\na.resize(1 << 20, refcheck=False)",
        "'.resize' of a numpy array",
    )
    ns = runs("t = torch.zeros(2)\nt.resize_(4)\nb = np.resize(np.zeros(2), 4)")
    assert ns["t"].shape == (4,) and ns["b"].shape == (4,)


def test_linearize_is_refused():
    # torch.func.linearize traces through make_fx, which writes Python source
    # from operator names and runs it with the real builtins.
    refused_statically(
        "out, jvp = torch.func.linearize(torch.sin, torch.ones(2))",
        "'torch.func.linearize'",
        "make_fx",
    )
    refused_statically("from torch.func import linearize", "'torch.func.linearize'")
    refused_at_run_time("f = torch.func\nlin = f.linearize", "'torch.func.linearize'")
    # The other transforms stay: they do not generate code.
    ns = runs("g = torch.func.grad(lambda x: (x * x).sum())(torch.ones(2))")
    assert ns["g"].tolist() == [2.0, 2.0]


def test_numpy_scalar_type_is_refused():
    # np.ScalarType is a tuple that holds the memoryview type.
    refused_statically("mv = np.ScalarType[-1]", "'numpy.ScalarType'", "memoryview")
    refused_at_run_time("m = np\nst = m.ScalarType", "'numpy.ScalarType'")


def test_the_memoryview_type_cannot_be_reached_with_type():
    refused_at_run_time("view = np.zeros(2).data\nMV = type(view)", "memoryview")


# -- the protocols, set under a name built at run time ------------------------


def _window_over(source: np.ndarray) -> str:
    return (
        f"{{'shape': (8,), 'typestr': '|u1', 'data': ({source.ctypes.data}, False), 'version': 3}}"
    )


PROTOCOL_AT_RUN_TIME = """
pd = nn.ParameterDict()
pd['__array_' + 'interface__'] = {window}
m = nn.Module()
m.add_module('__array_' + 'interface__', nn.Module())
"""


def test_an_array_interface_set_at_run_time_reads_memory_without_safe_mode():
    """The control: plain Python reads the memory the attribute names."""
    source = np.arange(8, dtype=np.uint8) + 100
    ns = {"torch": torch, "nn": torch.nn, "np": np}
    exec(textwrap.dedent(PROTOCOL_AT_RUN_TIME.format(window=_window_over(source))), ns)
    peek = np.asarray(ns["pd"])
    assert peek.tolist() == source.tolist()
    peek[0] = 7  # ... and writes it
    assert source[0] == 7


@pytest.mark.parametrize(
    "use",
    [
        "np.asarray(pd)",
        "np.array(pd)",
        "np.asanyarray([pd])",
        "np.ascontiguousarray(pd)",
        "torch.as_tensor(pd)",
        "torch.tensor([[1.0, pd]])",
        "torch.asarray(pd)",
        "torch.from_dlpack(pd)",
        "torch.ones(2).new_tensor(pd)",
        "np.asarray(m)",
        "np.asarray(a=pd)",
        "from numpy import asarray\nasarray(pd)",
    ],
)
def test_the_protocol_consumers_take_only_plain_data(use):
    source = np.arange(8, dtype=np.uint8)
    ns = namespace()
    exec(
        compile_safe(
            textwrap.dedent(PROTOCOL_AT_RUN_TIME.format(window=_window_over(source))), "<step>"
        ),
        ns,
    )
    message = refused_at_run_time(
        use, "reads memory through the array, buffer and DLPack protocols", ns=ns
    )
    assert "object" in message


def test_the_protocol_consumers_still_take_tensors_arrays_numbers_and_lists():
    ns = runs(
        """
        t = torch.arange(4.0)
        a = np.asarray(t)
        b = np.array([[1, 2], [3, 4]], dtype=np.float32)
        c = torch.tensor([np.float64(1.5), 2, True])
        d = torch.as_tensor(b)
        e = torch.asarray([[1, 2, 3, 4], [5, 6, 7, 8]])
        f = t.new_tensor([1, 2])
        g = np.asarray(3.5)
        h = np.frombuffer(b'abcd', dtype=np.uint8)
        i = torch.from_dlpack(t)
        j = torch.tensor(t.shape)
        k = np.array(torch.ones(2, 3).shape)
        """
    )
    assert ns["a"].tolist() == [0.0, 1.0, 2.0, 3.0] and ns["b"].dtype == np.float32
    assert ns["c"].tolist() == [1.5, 2.0, 1.0] and ns["d"].shape == (2, 2)
    assert ns["e"].shape == (2, 4) and ns["f"].dtype == torch.float32 and ns["g"] == 3.5
    assert ns["h"].tolist() == [97, 98, 99, 100] and ns["i"].data_ptr() == ns["t"].data_ptr()
    assert ns["j"].tolist() == [4] and ns["k"].tolist() == [2, 3]
