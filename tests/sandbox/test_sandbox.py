"""Safe mode: what it lets through unchanged, and what it refuses.

The first half runs scenario code both ways, ``exec(compile(...))`` and
``exec(compile_safe(...), safe_globals(...))``, and compares what came out:
values, identities, storages and version counters must be the same. The
second half is a red team: escape attempts that must be refused, statically
(with the right line) or at run time, and must have had no effect.
"""

from __future__ import annotations

import contextlib
import io
import sys
import textwrap
import traceback

import numpy as np
import pytest
import torch

from tensortrace.errors import PolicyError
from tensortrace.sandbox import (
    ALLOWED_MODULES,
    Refusal,
    SafeModeViolation,
    check_source,
    compile_safe,
    safe_globals,
)


def _same_storage(x, y):
    if x.numel() == 0 or y.numel() == 0:
        return False
    return x.device == y.device and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def _shares_memory(x, y):
    return bool(np.shares_memory(x.detach().numpy(), y.detach().numpy()))


def base() -> dict:
    return {
        "torch": torch,
        "nn": torch.nn,
        "F": torch.nn.functional,
        "same_storage": _same_storage,
        "shares_memory": _shares_memory,
    }


def run_plain(source: str, ns: dict | None = None) -> dict:
    ns = base() if ns is None else ns
    torch.manual_seed(0)
    exec(compile(textwrap.dedent(source), "<step>", "exec"), ns)
    return ns


def run_safe(source: str, ns: dict | None = None) -> dict:
    source = textwrap.dedent(source)
    assert check_source(source) == []
    ns = safe_globals(base()) if ns is None else ns
    torch.manual_seed(0)
    exec(compile_safe(source, "<step>"), ns)
    return ns


def fact(value):
    """A comparable snapshot of a value (tensors: values, version, autograd facts)."""
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            value.detach().tolist(),
            value._version,
            value.requires_grad,
            value.is_leaf,
            None if not value.is_leaf or value.grad is None else value.grad.tolist(),
        )
    if isinstance(value, np.ndarray):
        return ("ndarray", value.tolist())
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [fact(v) for v in value]
    if isinstance(value, dict):
        return "dict", {k: fact(v) for k, v in value.items()}
    return value


def assert_same(source: str, *names: str) -> dict:
    """Run both ways; the named results must be equal. Returns the safe namespace."""
    plain = run_plain(source)
    safe = run_safe(source)
    for name in names:
        assert fact(safe[name]) == fact(plain[name]), name
    return safe


# ---------------------------------------------------------------------------
# Allowed code keeps plain-Python semantics
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["+= 1", "-= b", "*= 2", "/= 2", "**= 2", "@= m"])
def test_augmented_assignment_on_a_name_stays_in_place(op):
    src = f"""
    a = torch.tensor([1., 2.])
    b = torch.tensor([0.5, 0.5])
    m = torch.eye(2)
    before = a
    ptr = a.data_ptr()
    a {op}
    same_object = a is before
    same_ptr = a.data_ptr() == ptr
    version = a._version
    """
    ns = assert_same(src, "a", "same_object", "same_ptr", "version")
    if op != "@= m":  # torch's matmul_ is not in place for @= on plain tensors
        assert ns["same_object"] and ns["same_ptr"] and ns["version"] == 1


def test_augmented_assignment_on_attributes_is_in_place():
    src = """
    w = torch.tensor([1., 2.], requires_grad=True)
    (w * w).sum().backward()
    alias = w.data
    with torch.no_grad():
        w.data -= 0.1 * w.grad
    lin = nn.Linear(2, 2)
    weight = lin.weight
    wptr = lin.weight.data_ptr()
    lin.weight.data *= 0
    still_same = lin.weight is weight and lin.weight.data_ptr() == wptr
    wv = w._version  # .data does not share the version counter: 0 in plain Python too
    lv = lin.weight._version
    zeroed = lin.weight.abs().sum().item() == 0
    """
    ns = assert_same(src, "w", "alias", "still_same", "wv", "lv", "zeroed")
    assert ns["still_same"] and ns["zeroed"]
    # The update happened in w's own memory: an alias taken before sees it.
    assert ns["alias"].tolist() == pytest.approx([0.8, 1.6])


def test_augmented_assignment_on_subscripts_is_in_place():
    src = """
    x = torch.tensor([1., 2., 3.])
    keep = x
    x[0] += 1
    x[1:] *= 10
    rows = [torch.zeros(2), torch.zeros(2)]
    first = rows[0]
    rows[0] += 5
    same_row = rows[0] is first
    d = {'k': torch.ones(1)}
    d['k'] -= 1
    v = x._version
    """
    ns = assert_same(src, "x", "keep", "rows", "same_row", "d", "v")
    assert ns["x"] is ns["keep"] and ns["same_row"]


def test_augmented_assignment_on_user_attributes_and_numbers():
    src = """
    class Counter:
        def __init__(self):
            self.n = 0
            self.items = []
    c = Counter()
    c.n += 3
    c.items += [1, 2]
    n = c.n
    items = c.items
    s = 'ab'
    s *= 2
    """
    assert_same(src, "n", "items", "s")


def test_augmented_assignment_keeps_pythons_evaluation_order():
    src = """
    log = []
    class Box:
        def __init__(self):
            self.v = torch.zeros(1)
    box = Box()
    def get_box():
        log.append('target')
        return box
    def value():
        log.append('value')
        return 1
    get_box().v += value()
    """
    assert_same(src, "log")


def test_print_writes_to_the_current_stdout_with_the_normal_signature():
    src = """
    print('a', 1, sep='-', end='!\\n')
    print(torch.tensor([1., 2.]))
    class Sink:
        def __init__(self):
            self.parts = []
        def write(self, s):
            self.parts.append(s)
        def flush(self):
            self.parts.append('<flush>')
    sink = Sink()
    print('x', file=sink, flush=True)
    """
    outputs = []
    for runner in (run_plain, run_safe):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):  # set *after* the namespace exists
            ns = runner(src)
        outputs.append((buffer.getvalue(), ns["sink"].parts))
    assert outputs[0] == outputs[1]
    assert outputs[1][0].startswith("a-1!\ntensor([1., 2.])")


def test_grad_modes_control_flow_and_definitions():
    src = """
    a = torch.ones(2, requires_grad=True)
    with torch.no_grad():
        b = a * 2
    with torch.inference_mode():
        c = a * 3
    c_inference = c.is_inference()
    total = 0
    for i in range(3):
        total += i
    while total > 0:
        total -= 1
    squares = [i * i for i in range(4) if i]
    evens = {i for i in range(6) if i % 2 == 0}
    table = {k: v for k, v in zip('abc', range(3))}
    gen_sum = sum(x for x in range(5))
    f = lambda x, *, k=2: x * k
    def g(x, /, y=1, *args, **kw):
        return x + y + len(args) + len(kw)
    try:
        raise ValueError('boom')
    except ValueError as e:
        caught = str(e)
    finally:
        done = True
    applied = [f(3), g(1, 2, 3, z=4)]
    walrus = [y := 5, y + 1]
    """
    ns = assert_same(
        src,
        "b",
        "c_inference",
        "total",
        "squares",
        "evens",
        "table",
        "gen_sum",
        "caught",
        "done",
        "applied",
        "walrus",
    )
    assert not ns["b"].requires_grad and ns["c_inference"]


def test_module_classes_and_autograd_functions():
    src = """
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
        def forward(self, x):
            return self.lin(x).relu()
    net = Net()
    out = net(torch.ones(1, 2)).sum()
    out.backward()
    grad = net.lin.weight.grad
    names = [n for n, _ in net.named_parameters()]

    class Triple(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 3
        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3
    a = torch.ones(2, requires_grad=True)
    Triple.apply(a).sum().backward()
    agrad = a.grad

    class Base:
        kind = 'base'
        def __init__(self, v):
            self.v = v
        @classmethod
        def make(cls):
            return cls(1)
        @property
        def double(self):
            return self.v * 2
        def __repr__(self):
            return f'Base({self.v})'
    class Child(Base):
        def __init__(self, v):
            Base.__init__(self, v + 1)
    child = Child.make()
    facts = [child.double, repr(child), Child.__name__, isinstance(child, Base)]
    Child.kind = 'child'
    kind = child.kind
    """
    assert_same(src, "out", "grad", "names", "agrad", "facts", "kind")


def test_builtins_the_subject_needs():
    src = """
    t = torch.tensor([3., 1., 2.])
    results = [
        isinstance(t, torch.Tensor), len(t), list(range(3)), dict(a=1), tuple([1]),
        set([1, 1]), list(zip([1, 2], 'ab')), list(enumerate('ab')), sorted([3, 1]),
        min(1, 2), max([1, 5]), sum([1, 2]), abs(-2), round(2.567, 2), any([0, 1]),
        all([1, 1]), float('1.5'), int('3'), bool(0), str(1), repr('x'),
        type(t) is torch.Tensor, type(3).__name__, id(t) == id(t), hasattr(t, 'grad'),
        hasattr(torch, 'tensor'), next(iter([7])), list(map(abs, [-1])),
        list(filter(None, [0, 2])), list(reversed([1, 2])), [1, 2, 3][slice(1, None)],
        isinstance(object(), object), issubclass(bool, int), isinstance(int, type),
        type(int) is type, divmod(7, 2), format(3.14159, '.2f'), callable(len),
    ]
    class A:
        @staticmethod
        def s():
            return 's'
    results.append(A.s())
    errors = []
    for exc in (Exception, RuntimeError, ValueError, TypeError, IndexError, KeyError,
                AttributeError, ZeroDivisionError, StopIteration, AssertionError,
                NotImplementedError, ArithmeticError, LookupError):
        try:
            raise exc('m')
        except exc as e:
            errors.append(type(e).__name__)
    """
    assert_same(src, "results", "errors")


def test_imports_numpy_math_copy():
    src = """
    import numpy as np
    import math
    import copy
    import torch.nn.functional as F2
    from torch import nn as nn2
    from torch.autograd import Function
    import torch.optim as optim
    t = torch.tensor([1., 4.])
    arr = t.numpy()
    arr[0] = 9
    shared = t[0].item() == 9
    back = torch.from_numpy(np.asarray([1., 2.]))
    root = math.sqrt(16)
    deep = copy.deepcopy(t)
    deep_is_new = deep.data_ptr() != t.data_ptr()
    relu = F2.relu(torch.tensor([-1., 1.]))
    opt = optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    lr = opt.param_groups[0]['lr']
    fn_ok = issubclass(Function, object) and nn2 is nn
    rng = np.random.default_rng(0).integers(0, 10, 3)
    """
    ns = assert_same(
        src, "arr", "shared", "back", "root", "deep", "deep_is_new", "relu", "lr", "fn_ok", "rng"
    )
    assert ns["shared"] and ns["deep_is_new"]


def test_hooks_indexing_views_and_autograd_facts():
    src = """
    a = torch.tensor([1., 2., 3.], requires_grad=True)
    h = a.register_hook(lambda g: g * 2)
    b = a * a
    saved = b.grad_fn._saved_self
    b.sum().backward()
    hooked = a.grad.clone()
    a.grad.zero_()
    nf = [type(f).__name__ for f, _ in b.grad_fn.next_functions]
    saved_is_a = saved is a or torch.equal(saved, a)
    h.remove()
    c = torch.zeros(4)
    c[1:] = 5
    view = c[1:]
    base_ok = view._base is c
    is_view = view._is_view()
    v = c._version
    text = f"{c.sum():.2f}|{c[1]!r}"
    d = a.detach()
    same = same_storage(a, d) and shares_memory(a, d)
    """
    ns = assert_same(
        src, "hooked", "nf", "saved_is_a", "c", "base_ok", "is_view", "v", "text", "same"
    )
    assert ns["base_ok"] and ns["is_view"] and ns["same"] and ns["v"] == 1


def test_torch_errors_keep_their_type_message_and_line():
    src = """
    a = torch.ones(2, requires_grad=True)
    b = a.detach()
    b.sum().backward()
    """

    def failure(runner):
        with pytest.raises(RuntimeError) as info:
            runner(src)
        frames = [
            f for f in traceback.extract_tb(info.value.__traceback__) if f.filename == "<step>"
        ]
        return type(info.value), str(info.value), frames[-1].lineno

    plain, safe = failure(run_plain), failure(run_safe)
    assert safe == plain
    assert safe[2] == 4 and "does not require grad" in safe[1]


def test_errors_inside_guarded_operations_keep_their_type_and_line():
    src = """
    x = torch.ones(2, requires_grad=True)
    y = 1
    x.data += 1
    x += 1
    """
    for runner in (run_plain, run_safe):
        with pytest.raises(RuntimeError, match="leaf Variable") as info:
            runner(src)
        lines = [
            f.lineno
            for f in traceback.extract_tb(info.value.__traceback__)
            if f.filename == "<step>"
        ]
        assert lines[-1] == 5
    for runner in (run_plain, run_safe):
        with pytest.raises(AttributeError, match="no attribute 'nope'"):
            runner("t = torch.ones(1)\nt.nope\n")


def test_names_bound_before_an_error_stay_bound():
    src = "a = torch.ones(1)\nb = a.nope\nc = 3\n"
    ns = safe_globals(base())
    with pytest.raises(AttributeError):
        run_safe(src, ns)
    assert "a" in ns and "c" not in ns


def test_expectations_in_eval_mode():
    ns = run_safe("a = torch.tensor([1., 2.], requires_grad=True)\nb = a.detach()\nb.zero_()\n")
    for expr, expected in [
        ("same_storage(a, b)", True),
        ("not b.requires_grad", True),
        ("a._version == 1", True),
        ("a.tolist() == [0., 0.]", True),
        ("b.grad_fn is None and b.is_leaf", True),
    ]:
        assert check_source(expr, "eval") == []
        assert eval(compile_safe(expr, "<expect>", "eval"), ns) is expected


def test_namespace_holds_only_what_the_scenario_binds():
    ns = run_safe("x = torch.ones(1)\nclass K: pass\nk = K()\n")
    visible = {k for k in ns if not k.startswith("__")}
    assert visible == set(base()) | {"x", "K", "k"}


def test_torch_backend_flags_can_be_set():
    ns = run_safe(
        "old = torch.backends.cudnn.deterministic\n"
        "torch.backends.cudnn.deterministic = True\n"
        "now = torch.backends.cudnn.deterministic\n"
        "torch.backends.cudnn.deterministic = old\n"
    )
    assert ns["now"] is True


def test_library_c_code_may_import_what_it_needs():
    # torch.tensor imports torch.storage from C while the scenario's frame is current.
    ns = run_safe("t = torch.tensor([1, 2])\nn = t.numpy()\nu = torch.from_numpy(n)\n")
    assert ns["u"].tolist() == [1, 2]


def test_line_numbers_of_compiled_code_match_the_source():
    src = "a = 1\n\nb = torch.ones(1)\nc = b.nope\n"
    code = compile_safe(src, "<step>")
    assert {line for _, _, line in code.co_lines() if line} <= {1, 3, 4}


def test_column_is_counted_in_characters():
    refusals = check_source("s = 'ééé'; x.__class__\n")
    assert refusals[0].line == 1
    assert refusals[0].column == len("s = 'ééé'; x.") + 1


# ---------------------------------------------------------------------------
# Red team: escape attempts
# ---------------------------------------------------------------------------


def static_refusal(source: str, line: int, mode: str = "exec") -> Refusal:
    """The code is refused before it runs, at ``line``, and cannot be compiled."""
    source = textwrap.dedent(source)
    refusals = check_source(source, mode)
    assert refusals, f"not refused: {source!r}"
    assert line in [r.line for r in refusals], refusals
    for r in refusals:
        assert "safe mode" in r.message and "--trust" in r.message
        assert r.column >= 1
    with pytest.raises(PolicyError) as info:
        compile_safe(source, "<step>", mode)
    assert info.value.line == refusals[0].line
    return next(r for r in refusals if r.line == line)


def runtime_refusal(source: str, ns: dict | None = None, exc=SafeModeViolation) -> dict:
    """The code passes the static check but is stopped while it runs."""
    source = textwrap.dedent(source)
    assert check_source(source) == [], check_source(source)
    ns = safe_globals(base()) if ns is None else ns
    with pytest.raises(exc) as info:
        exec(compile_safe(source, "<step>"), ns)
    if exc is SafeModeViolation:
        assert "not allowed in safe mode" in str(info.value)
    ns["__error__"] = info.value
    return ns


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "marker"
    yield path
    assert not path.exists(), "an escape attempt wrote a file"


@pytest.fixture
def evilmod(tmp_path, monkeypatch):
    """A module that writes a marker when imported: proves a refused import did not happen."""
    package = tmp_path / "mods"
    package.mkdir()
    flag = tmp_path / "imported"
    (package / "evilmod_tt.py").write_text(
        f"import pathlib\npathlib.Path({str(flag)!r}).write_text('x')\nclass FloatTensor: pass\n"
    )
    monkeypatch.syspath_prepend(str(package))
    yield flag
    sys.modules.pop("evilmod_tt", None)


@pytest.mark.parametrize(
    "source, line",
    [
        ("import os", 1),
        ("x = 1\nimport os as o", 2),
        ("from os import system", 1),
        ("from subprocess import *", 1),
        ("import importlib", 1),
        ("import builtins", 1),
        ("import torch.utils.cpp_extension", 1),
        ("from torch.utils import cpp_extension", 1),
        ("from numpy import ctypeslib", 1),
        ("from torch import load", 1),
        ("from torch import save as keep", 1),
        ("from torch import os", 1),
        ("from . import sibling", 1),
        ("import torch._C", 1),
        ("from torch import _C", 1),
        ("import numpy.lib.npyio", 1),
    ],
)
def test_imports_outside_the_allowlist_are_refused(source, line):
    r = static_refusal(source, line)
    assert "import" in r.message


def test_import_refusal_message_names_the_construct():
    (r,) = check_source("import os\n")
    assert r == Refusal(
        1,
        1,
        "'import os' is not allowed in safe mode (only torch, numpy, math, copy, collections, "
        "functools and their allowed submodules); use --trust to run it as plain Python",
    )


def test_dunder_import_is_refused_and_missing():
    static_refusal("m = __import__('os')", 1)
    assert "__import__" in safe_globals({})["__builtins__"]  # the guarded one
    guarded = safe_globals({})["__builtins__"]["__import__"]
    with pytest.raises(SafeModeViolation):
        guarded("os", None, None, None, 0)
    with pytest.raises(SafeModeViolation):
        guarded("torch", None, None, ("load",), 0)
    with pytest.raises(SafeModeViolation):
        guarded("evil_not_loaded_module", None, None, [], 0)


@pytest.mark.parametrize(
    "source, line",
    [
        ("x = ().__class__.__bases__[0].__subclasses__()", 1),
        ("t = torch.ones(1)\nsub = type(t).__subclasses__()", 2),
        ("d = dict.__class__", 1),
        ("b = __builtins__['open']", 1),
        ("g = globals()['__builtins__']", 1),
        ("v = vars()", 1),
        ("v = vars(torch)['save']", 1),
        ("l = locals()", 1),
        ("s = torch.__dict__['save']", 1),
        ("f = getattr(torch, 'lo' + 'ad')", 1),
        ("setattr(torch, 'load', None)", 1),
        ("delattr(torch, 'load')", 1),
        ("exec('import os')", 1),
        ("eval('1')", 1),
        ("c = compile('1', '<x>', 'eval')", 1),
        ("with open('x', 'w') as f:\n    pass", 1),
        ("breakpoint()", 1),
        ("help(torch)", 1),
        ("input('? ')", 1),
        ("exit()", 1),
        ("m = memoryview(b'x')", 1),
        ("frame = (x for x in []).gi_frame.f_globals", 1),
        ("g = (x for x in [])\ncode = g.gi_code", 2),
        ("try:\n    1/0\nexcept Exception as e:\n    tb = e.__traceback__", 4),
        ("f = lambda b=__builtins__: b", 1),
        ("f = lambda o=open: o", 1),
        ("f = lambda: 0\ng = f.__globals__", 2),
        ("s = '{0.__class__}'.format(torch.ones(1))", 1),
        ("s = str.format('{0.__class__}', 1)", 1),
        ("s = '{x.__class__}'.format_map({'x': 1})", 1),
        ("s = f'{torch.__class__}'", 1),
        ("@exec\ndef f():\n    pass", 1),
        ("@torch.compile\ndef f(x):\n    return x", 1),
        ("class A:\n    def __getattr__(self, name):\n        return 1", 2),
        ("class A:\n    def __reduce__(self):\n        return (print, ())", 2),
        ("class A:\n    __slots__ = ()", 2),
        ("def __init__():\n    pass", 1),
        ("class A(metaclass=type):\n    pass", 1),
        ("X = type('X', (), {'__getattr__': lambda s, n: 1})", 1),
        ("def f(_getattr_, /):\n    return 1", 1),
        ("def f(*, _write_=None):\n    return 1", 1),
        ("try:\n    pass\nexcept Exception as _write_:\n    pass", 3),
        ("def f():\n    global _getattr_\n    _getattr_ = None", 2),
        ("[_x := 1]", 1),
        ("import torch as _t", 1),
        ("try:\n    pass\nexcept* Exception:\n    pass", 1),
        ("async def f():\n    pass", 1),
        ("match 1:\n    case _:\n        pass", 1),
    ],
)
def test_reaching_interpreter_internals_is_refused(source, line):
    static_refusal(source, line)


@pytest.mark.parametrize(
    "source, line",
    [
        ("torch.os.system('true')", 1),
        ("sys = torch.sys", 1),
        ("o = np.os", 1),
        ("o = torch.serialization.os", 1),
        ("x = torch.nn.functional.importlib", 1),
        ("torch.hub.load('someone/repo', 'model')", 1),
        ("torch.ops.load_library('libx.so')", 1),
        ("torch.classes.load_library('libx.so')", 1),
        ("torch.library.Library('x', 'DEF')", 1),
        ("torch.utils.cpp_extension.load_inline('x', '')", 1),
        ("torch.utils.data.DataLoader([1], num_workers=2)", 1),
        ("torch.multiprocessing.Process(target=print)", 1),
        ("torch.distributed.init_process_group('gloo')", 1),
        ("torch.jit.load('m.pt')", 1),
        ("torch.jit.save(None, 'm.pt')", 1),
        ("torch.package.PackageExporter('p')", 1),
        ("torch.onnx.export(None, (), 'm.onnx')", 1),
        ("torch.export.save(None, 'm.pt2')", 1),
        ("torch.profiler.profile()", 1),
        ("f = torch.compile(lambda x: x)", 1),
        ("nn.Linear(2, 2).compile()", 1),
        ("torch.set_default_tensor_type('torch.DoubleTensor')", 1),
        ("torch.cuda.list_gpu_processes()", 1),
        ("torch.cuda.memory._dump_snapshot('x')", 1),
        ("torch.ScriptModule()", 1),
        ("w = torch.PyTorchFileWriter('x')", 1),
        ("a = np.lib.npyio", 1),
        ("a = np.lib.stride_tricks.as_strided", 1),
        ("np.load('x.npy')", 1),
        ("np.DataSource()", 1),
        ("np.testing.assert_equal(1, 1)", 1),
        ("import copy\nr = copy.copyreg", 2),
        ("torch.ones(2).share_memory_()", 1),
        ("t = torch.ones(2)\nt.untyped_storage()._share_filename_cpu_()", 2),
        ("torch.load = lambda *a: None", 1),
        ("del torch.save", 1),
        ("F.relu = None", 1),
        ("x = torch.ones(1)\nx.numpy().ctypes", 2),
    ],
)
def test_apis_that_touch_files_processes_or_the_network_are_refused(source, line):
    static_refusal(source, line)


def test_static_message_names_the_api_and_the_reason():
    (r,) = check_source("x = 1\ntorch.save(x, 'f')\n")
    assert (r.line, r.column) == (2, 1)
    assert r.message.startswith(
        "'torch.save' is not allowed in safe mode (it reads or writes files)"
    )
    (r,) = check_source("t.numpy().tofile('f')\n")
    assert r.column == len("t.numpy().") + 1 and "'.tofile'" in r.message


def test_every_refusal_is_reported():
    refusals = check_source("import os\nx = y.__class__\nopen('f')\n")
    assert [r.line for r in refusals] == [1, 2, 3]


# -- escapes that write files: refused, and the file is not there --------------


def test_torch_save_is_refused_literally_and_indirectly(marker):
    static_refusal(f"torch.save(torch.ones(1), {str(marker)!r})", 1)
    runtime_refusal(f"m = torch\nm.save(torch.ones(1), {str(marker)!r})")
    run_plain(f"torch.save(torch.ones(1), {str(marker)!r})")  # the attempt is real
    assert marker.exists()
    marker.unlink()


def test_numpy_save_is_refused_literally_and_indirectly(marker):
    static_refusal(f"np.save({str(marker)!r}, np.zeros(1))", 1)
    static_refusal(f"import numpy\nnumpy.savetxt({str(marker)!r}, numpy.zeros(1))", 2)
    runtime_refusal(f"import numpy as xp\nm = xp\nm.save({str(marker)!r}, m.zeros(1))")
    runtime_refusal(
        f"m = [np][0]\nm.memmap({str(marker)!r}, mode='w+', shape=(1,))",
        ns=safe_globals({**base(), "np": np}),
    )


def test_tofile_and_from_file_are_refused(marker):
    static_refusal(f"torch.ones(2).numpy().tofile({str(marker)!r})", 1)
    static_refusal(f"a = torch.ones(2).numpy()\na.dump({str(marker)!r})", 2)
    static_refusal(f"torch.from_file({str(marker)!r}, shared=True, size=4)", 1)
    static_refusal(f"torch.UntypedStorage.from_file({str(marker)!r}, True, 4)", 1)
    run_plain(f"torch.from_file({str(marker)!r}, shared=True, size=4)")  # the attempt is real
    assert marker.exists()
    marker.unlink()


def test_open_hidden_behind_a_deleted_name_is_still_missing(marker):
    runtime_refusal(f"open = None\ndel open\nf = open({str(marker)!r}, 'w')", exc=NameError)


def test_safe_builtins_leave_out_everything_that_reaches_outside():
    table = safe_globals({})["__builtins__"]
    for name in (
        "open",
        "exec",
        "eval",
        "compile",
        "getattr",
        "setattr",
        "delattr",
        "globals",
        "locals",
        "vars",
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "memoryview",
        "copyright",
        "credits",
        "license",
    ):
        assert name not in table, name
    assert table["print"] is print and table["super"] is super


def test_string_imports_inside_torch_are_refused(evilmod):
    ns = runtime_refusal(
        "s = torch.ones(1).untyped_storage()\nt = s.type('evilmod_tt.FloatTensor')"
    )
    assert "storage" in str(ns["__error__"])
    runtime_refusal("m = torch\nm.set_default_tensor_type('evilmod_tt.FloatTensor')")
    assert not evilmod.exists()
    try:
        with pytest.raises(Exception), pytest.warns(UserWarning):
            # The attempt is real: plain Python imports the module named by the string.
            run_plain("torch.set_default_tensor_type('evilmod_tt.FloatTensor')")
    finally:
        torch.set_default_dtype(torch.float32)
    assert evilmod.exists()


def test_library_c_code_cannot_import_new_modules(evilmod):
    guarded = safe_globals({})["__builtins__"]["__import__"]
    with pytest.raises(SafeModeViolation):
        guarded("evilmod_tt", {}, {}, [], 0)
    assert not evilmod.exists()


def test_functions_from_outside_torch_are_refused_even_in_torch_modules(marker):
    # typing.get_type_hints evaluates string annotations with unrestricted eval.
    payload = f"open({str(marker)!r}, 'w')"
    ns = runtime_refusal(
        "ck = torch.utils.checkpoint\n"
        "def f(x: 'payload'):\n"
        "    return x\n"
        "hints = ck.get_type_hints(f)\n"
    )
    assert "typing" in str(ns["__error__"])
    # The attempt is real in plain Python.
    plain = base()
    exec(
        "import torch.utils.checkpoint as ck\n"
        f"def f(x: {payload!r}):\n    return x\n"
        "ck.get_type_hints(f, globalns={})\n",
        plain,
    )
    assert marker.exists()
    marker.unlink()


def test_modules_reached_indirectly_are_refused():
    runtime_refusal("m = torch\no = m.os")
    runtime_refusal("m = F\ni = m.importlib")
    runtime_refusal("m = torch.cuda\ntun = m.tunable")
    runtime_refusal("m = torch\nops = m.ops")
    runtime_refusal("m = torch\nh = m.hub")
    runtime_refusal("import numpy\nm = numpy\nlib = m.lib\nio = lib.npyio")
    runtime_refusal(
        "m = torch.get_device_module('cpu')\nd = m.synchronize\n"
        "mt = torch.get_device_module('mtia')\nx = mt.is_available"
    )


def test_objects_from_outside_torch_are_refused():
    # a logging.Logger in torch.autograd.graph: its handlers hold file objects
    ns = runtime_refusal("g = torch.autograd.graph\nlog = g.log\nh = log.handlers")
    assert "logging" in str(ns["__error__"])


def test_exception_objects_do_not_leak_trusted_objects():
    runtime_refusal(
        "try:\n    torch.ones(1).nope\nexcept AttributeError as e:\n    leaked = e.obj\n"
    )


def test_writes_to_modules_and_library_classes_are_refused():
    load, add = torch.load, torch.Tensor.add
    runtime_refusal("m = torch\nm.load = lambda *a: None")
    runtime_refusal("torch.Tensor.add = None")
    runtime_refusal("T = type(torch.ones(1))\nT.add = None")
    runtime_refusal("import math\nm = math\nm.pi = 3")
    runtime_refusal("m = torch\ndel m.save")
    assert torch.load is load and torch.Tensor.add is add
    import math

    assert math.pi == pytest.approx(3.14159, abs=1e-4)


def test_three_argument_type_is_refused_at_run_time():
    runtime_refusal("T = type\nX = T('X', (), {})")
    runtime_refusal("T = type(int)\nX = T('X', (), {})")


def test_refused_classes_cannot_be_subclassed():
    runtime_refusal("m = torch\nclass S(m.ScriptModule):\n    pass")


def test_refusal_inside_a_function_and_a_hook_is_still_refused():
    ns = safe_globals(base())
    run_safe(
        "def leak(m):\n"
        "    return m.os\n"
        "a = torch.ones(1, requires_grad=True)\n"
        "h = a.register_hook(lambda g: leak(torch))\n",
        ns,
    )
    with pytest.raises(SafeModeViolation):
        exec(compile_safe("(a * 2).sum().backward()", "<step>"), ns)


def test_caught_violations_have_had_no_effect(marker):
    ns = run_safe(
        "try:\n"
        "    m = torch\n"
        f"    m.save(torch.ones(1), {str(marker)!r})\n"
        "except Exception as e:\n"
        "    caught = type(e).__name__\n"
    )
    assert ns["caught"] == "SafeModeViolation"


def test_allowed_module_list_is_what_the_docs_promise():
    for name in ("torch", "torch.nn", "torch.nn.functional", "math", "copy", "numpy"):
        assert name in ALLOWED_MODULES
    for name in (
        "os",
        "sys",
        "torch.hub",
        "torch.jit",
        "numpy.lib.npyio",
        "torch.utils.data.dataloader",
    ):
        assert name not in ALLOWED_MODULES
    # Allowed for one name each: the rest of them stays out of reach.
    for source in (
        "import numpy.lib\nx = numpy.lib.npyio",
        "import torch.utils.data\nx = torch.utils.data.DataLoader",
    ):
        assert check_source(source), source


def test_allowed_modules_hold_their_parents():
    # The import check looks the whole dotted name up once; that relies on this.
    for name in ALLOWED_MODULES:
        parts = name.split(".")
        for i in range(1, len(parts)):
            assert ".".join(parts[:i]) in ALLOWED_MODULES, name


def test_only_backend_flags_can_be_written_on_torch_backends():
    runtime_refusal("torch.backends.cudnn.is_available = lambda: True")
    assert torch.backends.cudnn.is_available.__module__ == "torch.backends.cudnn"


def test_ending_the_interpreter_is_not_available():
    table = safe_globals({})["__builtins__"]
    assert "SystemExit" not in table and "KeyboardInterrupt" not in table
    static_refusal("quit()", 1)


def test_guards_do_not_keep_scenario_objects_alive():
    import gc
    import weakref

    ns = run_safe(
        """
        class Holder:
            def __init__(self):
                self.t = torch.ones(3)
            def get(self):
                return self.t
        h = Holder()
        got = h.get().sum()
        fn = lambda: h.t
        fn_t = fn()
        Holder.extra = 1
        """
    )
    refs = [
        weakref.ref(ns["h"]),
        weakref.ref(ns["Holder"]),
        weakref.ref(ns["fn"]),
        weakref.ref(ns["h"].t),
    ]
    ns.clear()
    gc.collect()
    assert [r() for r in refs] == [None, None, None, None]


def test_hasattr_answers_for_modules_as_safe_mode_sees_them():
    ns = run_safe(
        "answers = [hasattr(torch, 'tensor'), hasattr(torch, 'save'), hasattr(torch, 'os'),\n      "
        "     hasattr(torch, '_dynamo'), hasattr(torch, 'onnx'), hasattr(torch.ones(1), 'grad')]\n"
    )
    assert ns["answers"] == [True, False, False, False, False, True]
