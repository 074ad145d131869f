"""What a scenario's code may do in safe mode, and how it is executed.

Scenario files are shared, so running one must not read or write the user's
files, start processes, open connections, or reach the interpreter's
internals. Safe mode (the default) enforces that at the language level, in two
layers that both look at the same policy tables below:

1. **Before anything runs**, :func:`check_source` walks the code's syntax tree
   and returns a :class:`Refusal` (line, column, message) for every construct
   the policy refuses: imports outside the allowlist, names and attributes
   starting with ``_`` (with a few harmless exceptions), builtins that reach
   outside (``open``, ``eval``, ``getattr``, ...), ``str.format``, frame and
   generator internals, and torch/numpy APIs that touch files, processes or
   the network when they are written literally (``torch.save``,
   ``np.load``, ``from torch import load``).

2. **While it runs**, the code produced by :func:`compile_safe` sends every
   attribute read through a guard (``_getattr_``) and every attribute write
   through another (``_write_``). They refuse what the static check cannot
   see: the same APIs reached another way (``m = torch; m.save``), modules
   outside the allowlist (``torch.os``), objects from outside torch/numpy
   (a logger, a file object, ``typing.get_type_hints``), and writes to
   modules and classes (``torch.load = ...``). Imports go through a guarded
   ``__import__``. A refusal at run time raises :class:`SafeModeViolation`.

Everything else is left to plain Python, so the semantics a scenario is about
stay exactly those of plain ``exec``: augmented assignment is in-place
(``a += 1``, ``w.data -= lr * w.grad``, ``x[0] += 1``), ``print`` writes to
whatever ``sys.stdout`` is when it is called, exceptions keep their types and
line numbers.

This is defence in depth, not a proof: the runner also executes each step in a
child process under OS limits. See ``docs/safety.md``.
"""

from __future__ import annotations

import ast
import builtins
import operator
import sys
import threading
import types
import weakref
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

from tensortrace.errors import PolicyError

__all__ = [
    "ALLOWED_MODULES",
    "ALLOWED_UNDERSCORE_ATTRIBUTES",
    "ALLOWED_DUNDER_METHODS",
    "Refusal",
    "SafeModeViolation",
    "check_source",
    "compile_safe",
    "safe_globals",
]

TRUST_HINT = "use --trust to run it as plain Python"

# ---------------------------------------------------------------------------
# Policy tables (pure data: checking source never imports torch or numpy)
# ---------------------------------------------------------------------------

#: Modules a scenario may import and reach as attributes. Importing one of
#: these is no more powerful than reaching it as ``torch.optim``; every other
#: module (``os``, ``torch.hub``, ``numpy.lib``, ...) is refused.
ALLOWED_MODULES: FrozenSet[str] = frozenset(
    {
        "torch",
        "torch.nn",
        "torch.nn.functional",
        "torch.nn.init",
        "torch.nn.utils",
        "torch.nn.utils.parametrize",
        "torch.nn.utils.parametrizations",
        "torch.nn.utils.rnn",
        "torch.nn.utils.stateless",
        "torch.nn.utils.prune",
        "torch.autograd",
        "torch.autograd.graph",
        "torch.autograd.functional",
        "torch.autograd.forward_ad",
        "torch.autograd.function",
        "torch.linalg",
        "torch.fft",
        "torch.special",
        "torch.optim",
        "torch.optim.lr_scheduler",
        "torch.func",
        "torch.random",
        "torch.amp",
        "torch.distributions",
        "torch.sparse",
        "torch.nested",
        "torch.testing",
        "torch.utils",
        "torch.utils.checkpoint",
        "torch.cuda",
        "torch.mps",
        "torch.cpu",
        "torch.accelerator",
        "torch.backends",
        "torch.backends.cpu",
        "torch.backends.cuda",
        "torch.backends.cudnn",
        "torch.backends.mps",
        "torch.backends.mkl",
        "torch.backends.mkldnn",
        "torch.backends.openmp",
        "torch.version",
        "numpy",
        "numpy.linalg",
        "numpy.random",
        "numpy.fft",
        "math",
        "copy",
    }
)

_FILES = "reads or writes files"
_SCRIPT = "compiles or loads code (TorchScript)"
_COMPILE = "compiles code (TorchDynamo and Inductor write caches and start worker processes)"
_PROCESSES = "starts processes or threads"
_NETWORK = "downloads from the network"
_NATIVE = "loads native libraries or registers operators"
_IMPORTS = "imports a module named by a string"
_PROFILE = "writes profiler traces to files"
_MEMORY = "works on raw memory addresses"

#: Public names of allowed modules that are refused anyway, with the reason.
_REFUSED_MODULE_NAMES: Dict[str, Dict[str, str]] = {
    "torch": {
        "load": _FILES,
        "save": _FILES,
        "from_file": _FILES,
        "get_file_path": _FILES,
        "PyTorchFileReader": _FILES,
        "PyTorchFileWriter": _FILES,
        "ScriptModuleSerializer": _FILES,
        "SerializationStorageContext": _FILES,
        "DeserializationStorageContext": _FILES,
        "import_ir_module": _FILES,
        "import_ir_module_from_buffer": _SCRIPT,
        "compile": _COMPILE,
        "cond": _COMPILE,
        "while_loop": _COMPILE,
        "fork": _PROCESSES,
        "wait": _PROCESSES,
        "prepare_multiprocessing_environment": _PROCESSES,
        "set_default_tensor_type": _IMPORTS,
        "profiler_allow_cudagraph_cupti_lazy_reinit_cuda12": _PROFILE,
        **{
            name: _SCRIPT
            for name in (
                "CompilationUnit ScriptFunction ScriptModule ScriptMethod ScriptClass "
                "ScriptClassFunction ScriptObject ScriptObjectProperty LiteScriptModule "
                "StaticModule ThroughputBenchmark BenchmarkConfig BenchmarkExecutionStats "
                "parse_ir parse_schema parse_type_comment merge_type_from_type_comment "
                "unify_type_list Graph Node Value Block Use Code ExecutionPlan "
                "GraphExecutorState Gradient ArgumentSpec CompleteArgumentSpec AliasDb "
                "TracingState ConcreteModuleType ConcreteModuleTypeBuilder ErrorReport "
                "CallStack FileCheck Future Capsule IODescriptor OperatorInfo "
                "LockingLogger NoopLogger LoggerBase DeepCopyMemoTable"
            ).split()
        },
    },
    "torch.mps": {"compile_shader": _SCRIPT, "load_metallib": _FILES},
    "torch.utils": {"set_module": "rewrites the __module__ of objects"},
    "torch.testing": {"FileCheck": _SCRIPT},
    "numpy": {
        "load": _FILES,
        "save": _FILES,
        "savez": _FILES,
        "savez_compressed": _FILES,
        "savetxt": _FILES,
        "loadtxt": _FILES,
        "genfromtxt": _FILES,
        "fromfile": _FILES,
        "fromregex": _FILES,
        "memmap": _FILES,
        "DataSource": _FILES,
        "info": "reads source files",
        "show_runtime": _NATIVE,
        "test": "runs the test suite",
    },
    "numpy.linalg": {"test": "runs the test suite"},
    "numpy.random": {"test": "runs the test suite"},
    "numpy.fft": {"test": "runs the test suite"},
}

#: Modules where only the names listed are reachable (device queries only for
#: ``torch.cuda``; ``copy`` also exports the modules and tables it uses).
_ONLY_MODULE_NAMES: Dict[str, FrozenSet[str]] = {
    "copy": frozenset({"copy", "deepcopy", "replace", "Error", "error"}),
    "torch.cuda": frozenset(
        (
            "is_available is_bf16_supported is_tf32_supported is_initialized init "
            "device device_of set_device get_device_name get_device_capability "
            "get_device_properties can_device_access_peer StreamContext stream "
            "set_stream device_count get_arch_list current_device synchronize "
            "current_stream default_stream Stream Event empty_cache memory_stats "
            "memory_stats_as_nested_dict reset_accumulated_memory_stats "
            "reset_peak_memory_stats reset_max_memory_allocated reset_max_memory_cached "
            "memory_allocated max_memory_allocated memory_reserved max_memory_reserved "
            "memory_cached max_memory_cached memory_summary mem_get_info get_rng_state "
            "get_rng_state_all set_rng_state set_rng_state_all manual_seed "
            "manual_seed_all seed seed_all initial_seed OutOfMemoryError "
            "AcceleratorError CudaError DeferredCudaCallError has_half has_magma "
            "ByteStorage DoubleStorage FloatStorage HalfStorage LongStorage IntStorage "
            "ShortStorage CharStorage BoolStorage BFloat16Storage ComplexDoubleStorage "
            "ComplexFloatStorage ByteTensor CharTensor DoubleTensor FloatTensor "
            "IntTensor LongTensor ShortTensor HalfTensor BoolTensor BFloat16Tensor"
        ).split()
    ),
}

#: Submodules that exist but are refused, with the reason (for messages; any
#: module not in ALLOWED_MODULES is refused whether it is listed here or not).
_REFUSED_MODULES: Dict[str, str] = {
    "torch.hub": _NETWORK,
    "torch.jit": _SCRIPT,
    "torch.onnx": _FILES,
    "torch.package": _FILES,
    "torch.export": _COMPILE,
    "torch.compiler": _COMPILE,
    "torch.fx": "generates and runs Python code",
    "torch.distributed": "opens network connections",
    "torch.multiprocessing": _PROCESSES,
    "torch.library": _NATIVE,
    "torch.ops": _NATIVE,
    "torch.classes": _NATIVE,
    "torch.profiler": _PROFILE,
    "torch.serialization": _FILES,
    "torch.storage": "exposes storage internals",
    "torch.overrides": "exposes dispatch internals",
    "torch.utils.cpp_extension": "compiles and loads C++ code",
    "torch.utils.data": "starts worker processes",
    "torch.utils.tensorboard": _FILES,
    "torch.utils.collect_env": "runs shell commands",
    "torch.utils.benchmark": "compiles code and starts processes",
    "torch.utils.dlpack": "exchanges raw memory with other libraries",
    "torch.autograd.profiler": _PROFILE,
    "torch.autograd.profiler_legacy": _PROFILE,
    "torch.cuda.memory": "dumps memory snapshots to files",
    "torch.cuda.tunable": _FILES,
    "torch.cuda.gds": _FILES,
    "torch.cuda.jiterator": "compiles CUDA code",
    "torch.cuda.profiler": _PROFILE,
    "torch.cuda.nvtx": _PROFILE,
    "torch.cuda.graphs": _FILES,
    "torch.mps.profiler": _PROFILE,
    "numpy.lib": "contains file I/O (npyio, format) and raw-memory functions (as_strided)",
    "numpy.ctypeslib": _NATIVE,
    "numpy.f2py": "compiles and loads Fortran code",
    "numpy.distutils": "compiles code",
    "numpy.testing": "creates temporary files and runs tests",
    "numpy.rec": _FILES,
    "numpy.core": "exposes numpy internals",
}

#: Attributes refused on every object, statically and at run time.
_REFUSED_ATTRIBUTES: Dict[str, str] = {
    "format": "reaches attributes by name, as in '{0.__class__}'; use an f-string",
    "format_map": "reaches attributes by name, as in '{x.__class__}'; use an f-string",
    "tofile": _FILES,
    "dump": _FILES,
    "dumps": "pickles objects",
    "from_file": _FILES,
    "load_library": _NATIVE,
    "share_memory_": "creates shared-memory files",
    "share_memory": "creates shared-memory files",
    "compile": _COMPILE,
    "debug_dump": _FILES,
    "export_chrome_trace": _FILES,
    "export_stacks": _FILES,
    "export_memory_timeline": _FILES,
    "ctypes": _MEMORY,
    # Interpreter internals reachable without an underscore (frames give the
    # globals and builtins of trusted code).
    **{
        name: "exposes interpreter frames and code objects"
        for name in (
            "tb_frame tb_next f_back f_builtins f_code f_generator f_globals f_locals "
            "f_trace co_code gi_frame gi_code gi_yieldfrom cr_await cr_frame cr_code "
            "cr_origin ag_await ag_frame ag_code"
        ).split()
    },
}

#: Attribute names whose reads go through the closer runtime check (the others
#: are refused statically, so the plain guard does not look at names at all).
_CLOSER_LOOK: FrozenSet[str] = frozenset(_REFUSED_ATTRIBUTES) | {"obj", "type", "resize_"}

#: Attributes starting with ``_`` that are allowed: the facts this tool is
#: about (``_version``, ``_base``, ``_is_view``, a grad_fn's ``_saved_*``), what
#: class definitions need (``__init__``), and two harmless strings.
ALLOWED_UNDERSCORE_ATTRIBUTES: FrozenSet[str] = frozenset(
    {"_version", "_base", "_is_view", "__init__", "__name__", "__version__"}
)
_ALLOWED_UNDERSCORE_PREFIX = "_saved_"

#: Special methods a class statement may define. Those that give code a hook
#: into attribute lookup, pickling, finalisation or class creation
#: (``__getattr__``, ``__reduce__``, ``__del__``, ``__init_subclass__``,
#: ``__torch_function__``, ...) are refused.
ALLOWED_DUNDER_METHODS: FrozenSet[str] = frozenset(
    (
        "__init__ __call__ __repr__ __str__ __len__ __getitem__ __setitem__ __iter__ "
        "__next__ __contains__ __enter__ __exit__ __eq__ __ne__ __lt__ __le__ __gt__ "
        "__ge__ __hash__ __bool__"
    ).split()
)

#: Builtins that are never available, and why. Reading them as a name is
#: refused unless the same code binds that name itself.
_REFUSED_BUILTINS: Dict[str, str] = {
    "open": "opens files",
    "exec": "runs code that safe mode has not checked",
    "eval": "runs code that safe mode has not checked",
    "compile": "makes code that safe mode has not checked",
    "getattr": "reaches attributes by computed name, around safe mode's checks",
    "setattr": "writes attributes by computed name, around safe mode's checks",
    "delattr": "deletes attributes by computed name, around safe mode's checks",
    "globals": "exposes the namespace and its builtins",
    "locals": "exposes the namespace and its builtins",
    "vars": "exposes namespaces and module dictionaries",
    "breakpoint": "starts the debugger",
    "memoryview": "exposes the raw buffers of objects",
}

#: Builtins refused when called (``input = torch.randn(3)`` is a fine name).
_REFUSED_CALLS: Dict[str, str] = {
    "input": "reads the terminal",
    "help": "starts pydoc, which imports modules by name",
    "exit": "ends the interpreter",
    "quit": "ends the interpreter",
    "copyright": "is meant for the interactive prompt",
    "credits": "is meant for the interactive prompt",
    "license": "is meant for the interactive prompt and reads files",
}

#: Names under which scenarios usually see modules without importing them.
_DEFAULT_ALIASES: Dict[str, str] = {
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "np": "numpy",
    "numpy": "numpy",
    "math": "math",
    "copy": "copy",
}

#: Standard-library modules that torch and numpy modules hold as attributes
#: (``torch.os``, ``np.sys``...). None of these names is also a torch or numpy
#: function, so refusing them statically has no false positives; any other
#: module is refused at run time.
_STDLIB_MODULES: FrozenSet[str] = frozenset(
    (
        "os sys ctypes importlib inspect platform threading glob subprocess builtins io "
        "pathlib shutil socket pickle tempfile multiprocessing textwrap traceback logging "
        "warnings weakref gc marshal runpy code codecs mmap atexit site sysconfig urllib "
        "http zipfile tarfile functools itertools collections contextlib dataclasses enum "
        "abc typing uuid json re struct copyreg operator numbers"
    ).split()
)

_IMPORT_RULE = "only torch, math, copy, numpy and their allowed submodules"

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
_IOP_SYMBOLS = {
    ast.Add: "+=",
    ast.Sub: "-=",
    ast.Mult: "*=",
    ast.Div: "/=",
    ast.FloorDiv: "//=",
    ast.Mod: "%=",
    ast.Pow: "**=",
    ast.LShift: "<<=",
    ast.RShift: ">>=",
    ast.BitAnd: "&=",
    ast.BitOr: "|=",
    ast.BitXor: "^=",
    ast.MatMult: "@=",
}


def _node_types(names: str) -> FrozenSet[type]:
    return frozenset(getattr(ast, n) for n in names.split() if hasattr(ast, n))


#: Syntax safe mode knows. Anything else (async, ``except*``, ``match``, and
#: whatever a later Python adds) is refused until someone has looked at it.
_ALLOWED_NODES = _node_types(
    """
    Module Expression
    FunctionDef ClassDef Return Delete Assign AugAssign AnnAssign For While If With
    Raise Try Assert Import ImportFrom Global Nonlocal Expr Pass Break Continue
    BoolOp NamedExpr BinOp UnaryOp Lambda IfExp Dict Set ListComp SetComp DictComp
    GeneratorExp Yield YieldFrom Compare Call FormattedValue JoinedStr Constant
    Attribute Subscript Starred Name List Tuple Slice
    Load Store Del And Or
    Add Sub Mult MatMult Div Mod Pow LShift RShift BitOr BitXor BitAnd FloorDiv
    Invert Not UAdd USub
    Eq NotEq Lt LtE Gt GtE Is IsNot In NotIn
    comprehension ExceptHandler arguments arg keyword alias withitem
    """
)

_CONSTRUCT_NAMES = {
    "AsyncFunctionDef": "'async def'",
    "AsyncFor": "'async for'",
    "AsyncWith": "'async with'",
    "Await": "'await'",
    "TryStar": "'except*'",
    "Match": "the 'match' statement",
    "TypeAlias": "the 'type' statement",
    "TemplateStr": "template strings",
}


# ---------------------------------------------------------------------------
# Public records
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """One construct safe mode refuses, at a place in the source given."""

    line: int  # 1-based, relative to the source given
    column: int  # 1-based, in characters
    message: str


class SafeModeViolation(Exception):
    """Raised at run time when scenario code reaches something safe mode refuses.

    An ``Exception`` (not a ``BaseException``), so that a tracer recording
    a step's outcome handles it like any other error; a scenario that catches
    it has still not done what was refused.
    """


# ---------------------------------------------------------------------------
# Static check and transformation
# ---------------------------------------------------------------------------


def _underscore_allowed(name: str) -> bool:
    return (
        name == "_"
        or name in ALLOWED_UNDERSCORE_ATTRIBUTES
        or name.startswith(_ALLOWED_UNDERSCORE_PREFIX)
    )


def _refused_module_attribute(module: str, name: str) -> Optional[str]:
    """Why ``module.name`` is refused, as a phrase after "it" (module is allowed), or None."""
    full = f"{module}.{name}"
    if full in ALLOWED_MODULES:
        return None
    reason = _REFUSED_MODULE_NAMES.get(module, {}).get(name)
    if reason is not None:
        return reason
    only = _ONLY_MODULE_NAMES.get(module)
    if only is not None and name not in only:
        return f"is not among the names safe mode allows from {module}"
    if full in _REFUSED_MODULES:
        return f"is a module that {_REFUSED_MODULES[full]}"
    if name in _STDLIB_MODULES:
        return "is a module outside the allowlist"
    return None


def _import_refusal(module: str) -> Optional[str]:
    """The module that makes ``import module`` refused, or None.

    ALLOWED_MODULES holds every parent of each module it holds (a test pins
    that down), so one lookup covers the whole dotted path.
    """
    return None if module in ALLOWED_MODULES else module


def _attribute_name_column(node: ast.Attribute) -> Optional[int]:
    """Byte offset of the attribute's name (it ends the node's span), or None."""
    end = getattr(node, "end_col_offset", None)
    if end is None or node.end_lineno != node.lineno:
        return None
    return end - len(node.attr.encode("utf-8"))


def _chain(node: ast.AST) -> Optional[Tuple[str, ...]]:
    """``('torch', 'nn', 'functional')`` for ``torch.nn.functional``; None if not a plain chain."""
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    parts.reverse()
    return tuple(parts)


_LOAD = ast.Load()


def _guard_call(name: str, args: List[Any], where: Any) -> ast.Call:
    """``name(*args)`` placed at ``where``; str arguments become constants there."""
    pos = {
        "lineno": where.lineno,
        "col_offset": where.col_offset,
        "end_lineno": where.end_lineno,
        "end_col_offset": where.end_col_offset,
    }
    args = [ast.Constant(a, **pos) if type(a) is str else a for a in args]
    return ast.Call(ast.Name(name, _LOAD, **pos), args, [], **pos)


class _Checker:
    """One pass over the syntax tree: collects refusals and rewrites attribute access.

    Children are handled before a node is rewritten, and inserted guard calls
    are never visited, so they are not subject to the underscore rule. Checks
    that depend on the whole source (is ``open`` bound by this code? what does
    ``np`` name here?) are recorded during the pass and decided at the end.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.has_imports = "import" in source
        self.problems: List[Tuple[ast.AST, str, Optional[int]]] = []
        self.bound: Set[str] = set()
        self.imported: Dict[str, str] = {}
        self.builtin_loads: List[ast.Name] = []
        self.builtin_calls: List[Tuple[ast.Call, str, int]] = []
        self.chains: List[Tuple[ast.Attribute, Tuple[str, ...], bool]] = []
        self.method_defs: Set[int] = set()

    # -- driver -------------------------------------------------------------

    def run(self, tree: ast.AST) -> ast.AST:
        tree = self.visit(tree)
        self._decide_deferred()
        return tree

    def refusals(self) -> List[Refusal]:
        lines = self.source.splitlines()
        seen: Set[Tuple[int, int, str]] = set()
        out: List[Refusal] = []
        for node, message, col_offset in self.problems:
            line = getattr(node, "lineno", 1)
            offset = getattr(node, "col_offset", 0) if col_offset is None else col_offset
            if 1 <= line <= len(lines):
                prefix = lines[line - 1].encode("utf-8")[:offset]
                column = len(prefix.decode("utf-8", "replace")) + 1
            else:
                column = offset + 1
            key = (line, column, message)
            if key not in seen:
                seen.add(key)
                out.append(Refusal(line, column, f"{message}; {TRUST_HINT}"))
        out.sort(key=lambda r: (r.line, r.column))
        return out

    def refuse(self, node: ast.AST, message: str, col_offset: Optional[int] = None) -> None:
        self.problems.append((node, message, col_offset))

    def visit(self, node: Any) -> Any:
        handler = _HANDLERS.get(type(node))
        if handler is not None:
            return handler(self, node)
        if type(node) not in _ALLOWED_NODES:
            name = type(node).__name__
            what = _CONSTRUCT_NAMES.get(name, f"'{name}' syntax")
            self.refuse(node, f"{what} is not allowed in safe mode")
            return node
        self.children(node)
        return node

    def children(self, node: ast.AST) -> None:
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST) and type(item) not in _LEAVES:
                        new = self.visit(item)
                        if new is not item:
                            value[i] = new
            elif isinstance(value, ast.AST) and type(value) not in _LEAVES:
                new = self.visit(value)
                if new is not value:
                    setattr(node, field, new)

    # -- names ----------------------------------------------------------------

    def check_name(self, node: ast.AST, name: str, what: str = "name") -> None:
        if name[:1] == "_" and name != "_":
            self.refuse(
                node,
                f"'{name}' is not allowed in safe mode ({what}s starting with '_' "
                "reach interpreter internals)",
            )

    def v_name(self, node: ast.Name) -> ast.AST:
        name = node.id
        if name[:1] == "_":
            self.check_name(node, name)
        if type(node.ctx) is ast.Load:
            if name in _REFUSED_BUILTINS:
                self.builtin_loads.append(node)
        else:
            self.bound.add(name)
        return node

    def v_arg(self, node: ast.arg) -> ast.AST:
        self.bound.add(node.arg)
        self.check_name(node, node.arg, "parameter name")
        if node.annotation is not None:
            node.annotation = self.visit(node.annotation)
        return node

    def v_global(self, node: ast.AST) -> ast.AST:
        for name in node.names:  # type: ignore[attr-defined]
            self.check_name(node, name)
        return node

    def v_except(self, node: ast.ExceptHandler) -> ast.AST:
        if node.name:
            self.bound.add(node.name)
            self.check_name(node, node.name)
        self.children(node)
        return node

    # -- imports --------------------------------------------------------------

    def v_import(self, node: ast.Import) -> ast.AST:
        for a in node.names:
            text = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
            if _import_refusal(a.name) is not None:
                self.refuse(node, f"'{text}' is not allowed in safe mode ({_IMPORT_RULE})")
            elif a.asname:
                self.imported[a.asname] = a.name
            else:
                top = a.name.split(".")[0]
                self.imported[top] = top
            if a.asname:
                self.check_name(node, a.asname)
        return node

    def v_import_from(self, node: ast.ImportFrom) -> ast.AST:
        module = node.module or ""
        names = ", ".join(a.name for a in node.names)
        if node.level:
            self.refuse(
                node,
                f"'from {'.' * node.level}{module} import {names}' is not allowed in "
                f"safe mode (relative import; {_IMPORT_RULE})",
            )
            return node
        if _import_refusal(module) is not None:
            self.refuse(
                node,
                f"'from {module} import {names}' is not allowed in safe mode ({_IMPORT_RULE})",
            )
            return node
        for a in node.names:
            if a.name == "*":
                self.refuse(node, f"'from {module} import *' is not allowed in safe mode")
                continue
            if a.name.startswith("_"):
                self.refuse(
                    node,
                    f"'from {module} import {a.name}' is not allowed in safe mode "
                    "(names starting with '_' reach interpreter internals)",
                )
                continue
            if a.asname:
                self.check_name(node, a.asname)
            reason = _refused_module_attribute(module, a.name)
            if reason is not None:
                self.refuse(
                    node,
                    f"'from {module} import {a.name}' is not allowed in safe mode "
                    f"('{module}.{a.name}' {reason})",
                )
            elif f"{module}.{a.name}" in ALLOWED_MODULES:
                self.imported[a.asname or a.name] = f"{module}.{a.name}"
        return node

    # -- attributes ------------------------------------------------------------

    def check_attribute(self, node: ast.Attribute, is_load: bool) -> None:
        attr = node.attr
        if attr[:1] == "_" and not _underscore_allowed(attr):
            self.refuse(
                node,
                f"'.{attr}' is not allowed in safe mode (attributes starting with '_' "
                "reach interpreter internals; allowed: _version, _base, _is_view, "
                "_saved_*, __init__, __name__, __version__)",
                _attribute_name_column(node),
            )
        elif attr in _REFUSED_ATTRIBUTES:
            self.refuse(
                node,
                f"'.{attr}' is not allowed in safe mode (it {_REFUSED_ATTRIBUTES[attr]})",
                _attribute_name_column(node),
            )
        root = node.value
        while type(root) is ast.Attribute:
            root = root.value
        if type(root) is ast.Name and (root.id in _DEFAULT_ALIASES or self.has_imports):
            chain = _chain(node)
            if chain is not None:
                self.chains.append((node, chain, is_load))

    def v_attribute(self, node: ast.Attribute) -> ast.AST:
        is_load = type(node.ctx) is ast.Load
        self.check_attribute(node, is_load)
        value = node.value
        if type(value) not in _LEAVES:
            value = self.visit(value)
        if is_load:
            closely = node.attr in _CLOSER_LOOK or node.attr[:1] == "_"
            return _guard_call("_getattr_closely_" if closely else "_getattr_", [value, node.attr], node)
        node.value = _guard_call("_write_", [value, node.attr], node.value)
        return node

    def v_aug_assign(self, node: ast.AugAssign) -> ast.AST:
        target = node.target
        if not isinstance(target, ast.Attribute):
            # Names and subscripts: Python's own in-place operation, nothing to guard.
            self.children(node)
            return node
        # obj.attr op= value  ->  _aug_store_(_aug_load_(obj, 'attr'), value, 'op')
        # The same order as Python: obj, read obj.attr, value, in-place op, write.
        self.check_attribute(target, False)
        obj = self.visit(target.value)
        value = self.visit(node.value)
        load = _guard_call("_aug_load_", [obj, target.attr], target)
        store = _guard_call("_aug_store_", [load, value, _IOP_SYMBOLS[type(node.op)]], node)
        return ast.Expr(
            store,
            lineno=node.lineno,
            col_offset=node.col_offset,
            end_lineno=node.end_lineno,
            end_col_offset=node.end_col_offset,
        )

    # -- calls and definitions --------------------------------------------------

    def v_call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if type(func) is ast.Name:
            if func.id in _REFUSED_CALLS or func.id == "type":
                self.builtin_calls.append((node, func.id, len(node.args) + len(node.keywords)))
        self.children(node)
        return node

    def v_function(self, node: ast.FunctionDef) -> ast.AST:
        name = node.name
        self.bound.add(name)
        if name[:1] == "_" and name != "_":
            is_method = id(node) in self.method_defs
            if not is_method or name not in ALLOWED_DUNDER_METHODS:
                where = "" if is_method else " outside a class"
                self.refuse(
                    node,
                    f"defining '{name}'{where} is not allowed in safe mode (allowed "
                    f"special methods: {', '.join(sorted(ALLOWED_DUNDER_METHODS))})",
                )
        self.children(node)
        return node

    def v_class(self, node: ast.ClassDef) -> ast.AST:
        self.bound.add(node.name)
        self.check_name(node, node.name, "class name")
        for kw in node.keywords:
            label = f"{kw.arg}=..." if kw.arg else "**kwargs"
            self.refuse(
                kw if hasattr(kw, "lineno") else node,
                f"class keyword '{label}' is not allowed in safe mode "
                "(metaclasses and class keywords run code while the class is built)",
            )
        for child in node.body:
            if type(child) is ast.FunctionDef:
                self.method_defs.add(id(child))
        self.children(node)
        return node

    def v_comprehension(self, node: ast.comprehension) -> ast.AST:
        if node.is_async:
            self.refuse(node.target, "'async for' is not allowed in safe mode")
        self.children(node)
        return node

    # -- decisions that need the whole source ----------------------------------

    def _decide_deferred(self) -> None:
        bound = self.bound
        for node in self.builtin_loads:
            if node.id not in bound:
                self.refuse(
                    node,
                    f"'{node.id}' is not available in safe mode "
                    f"(it {_REFUSED_BUILTINS[node.id]})",
                )
        for call, name, nargs in self.builtin_calls:
            if name in bound:
                continue
            if name in _REFUSED_CALLS:
                self.refuse(
                    call, f"'{name}()' is not available in safe mode (it {_REFUSED_CALLS[name]})"
                )
            elif nargs > 1:
                self.refuse(
                    call,
                    "'type()' with three arguments is not allowed in safe mode "
                    "(it builds classes around the checks on class statements)",
                )
        aliases = {k: v for k, v in _DEFAULT_ALIASES.items() if k not in bound}
        aliases.update(self.imported)
        for node, chain, is_load in self.chains:
            base = aliases.get(chain[0])
            if base is None:
                continue
            for part in chain[1:-1]:
                base = f"{base}.{part}"
                if base not in ALLOWED_MODULES:
                    base = None
                    break
            if base is None:
                continue
            attr = chain[-1]
            reason = _refused_module_attribute(base, attr)
            if reason is not None:
                self.refuse(node, f"'{base}.{attr}' is not allowed in safe mode (it {reason})")
            elif not is_load and not base.startswith("torch.backends."):
                # (torch.backends flags such as cudnn.deterministic are settings;
                # the runtime guard lets only those through.)
                verb = "writing" if type(node.ctx) is ast.Store else "deleting"
                self.refuse(
                    node,
                    f"{verb} '{base}.{attr}' is not allowed in safe mode "
                    "(modules are shared by everything that runs)",
                )


_HANDLERS = {
    ast.Name: _Checker.v_name,
    ast.arg: _Checker.v_arg,
    ast.Global: _Checker.v_global,
    ast.Nonlocal: _Checker.v_global,
    ast.ExceptHandler: _Checker.v_except,
    ast.Import: _Checker.v_import,
    ast.ImportFrom: _Checker.v_import_from,
    ast.Attribute: _Checker.v_attribute,
    ast.AugAssign: _Checker.v_aug_assign,
    ast.Call: _Checker.v_call,
    ast.FunctionDef: _Checker.v_function,
    ast.ClassDef: _Checker.v_class,
    ast.comprehension: _Checker.v_comprehension,
}

#: Nodes with nothing inside to check (contexts, operators, constants).
_LEAVES = _node_types(
    """
    Load Store Del And Or Add Sub Mult MatMult Div Mod Pow LShift RShift BitOr BitXor
    BitAnd FloorDiv Invert Not UAdd USub Eq NotEq Lt LtE Gt GtE Is IsNot In NotIn Constant
    """
)


def _parse(source: str, mode: str) -> ast.AST:
    if mode not in ("exec", "eval"):
        raise ValueError(f"mode must be 'exec' or 'eval', not {mode!r}")
    return ast.parse(source, mode=mode)


class _LRU:
    """A small thread-safe least-recently-used cache."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: Dict[Any, Any] = {}
        self.lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            value = self.items.pop(key, None)
            if value is not None:
                self.items[key] = value  # most recent last
            return value

    def put(self, key: Any, value: Any) -> None:
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                del self.items[next(iter(self.items))]

    def clear(self) -> None:
        with self.lock:
            self.items.clear()


# The loader checks every step before anything runs, and the tracer compiles
# each step later (variants and re-runs compile the same text again): keep
# recent results so a piece of code is parsed and walked once. Code objects
# and refusal lists are immutable, and compile() does not change a tree.
_CHECKED = _LRU(512)  # (source, mode) -> (refusals, transformed tree)
_COMPILED = _LRU(512)  # (source, filename, mode) -> code object


def _checked(source: str, mode: str) -> Tuple[Tuple[Refusal, ...], ast.AST]:
    key = (source, mode)
    hit = _CHECKED.get(key)
    if hit is None:
        checker = _Checker(source)
        tree = checker.run(_parse(source, mode))
        hit = (tuple(checker.refusals()), tree)
        _CHECKED.put(key, hit)
    return hit


def check_source(source: str, mode: str = "exec") -> List[Refusal]:
    """Every construct safe mode refuses in this code, in source order.

    ``mode`` is ``'exec'`` for steps and setup, ``'eval'`` for expectations.
    The caller has already checked that the source compiles; an empty list
    means the code may be compiled with :func:`compile_safe`.
    """
    return list(_checked(source, mode)[0])


def compile_safe(source: str, filename: str, mode: str = "exec") -> types.CodeType:
    """A code object whose attribute access goes through the runtime guards.

    Line numbers are those of ``source``. Code that :func:`check_source` would
    refuse raises :class:`PolicyError`, so a caller that forgot the check still
    cannot run it.
    """
    key = (source, filename, mode)
    code = _COMPILED.get(key)
    if code is None:
        refusals, tree = _checked(source, mode)
        if refusals:
            first = refusals[0]
            raise PolicyError(first.message, path=filename, line=first.line, column=first.column)
        code = compile(tree, filename, mode, dont_inherit=True)
        _COMPILED.put(key, code)
    return code


# ---------------------------------------------------------------------------
# Runtime guards
# ---------------------------------------------------------------------------

#: Roots of the modules whose functions and classes scenarios may use.
#: "__scenario__" is the module name of the scenario's own code (its classes
#: and functions): what it defines itself is as much home as torch.
_HOME_ROOTS = frozenset({"torch", "numpy", "math", "copy", "builtins", "tensortrace", "__scenario__"})
#: Foreign modules whose *instances* are plain data (named tuples, enums,
#: weak references, context managers, ...); their functions and classes are
#: still refused.
_SAFE_INSTANCE_ROOTS = frozenset(
    {
        "collections",
        "_collections",
        "_collections_abc",
        "typing",
        "typing_extensions",
        "enum",
        "numbers",
        "abc",
        "types",
        "weakref",
        "_weakref",
        "_weakrefset",
        "contextlib",
        "dataclasses",
    }
)
#: Library modules whose objects are refused wherever they turn up (a module
#: that is merely not allowed, such as torch.storage, can still define objects
#: that scenarios hold: storages).
_REFUSED_ORIGINS: Tuple[str, ...] = (
    "torch.serialization",
    "torch.hub",
    "torch.jit",
    "torch.onnx",
    "torch.package",
    "torch.export",
    "torch._export",
    "torch.compiler",
    "torch._dynamo",
    "torch._inductor",
    "torch.fx",
    "torch.distributed",
    "torch.multiprocessing",
    "torch.library",
    "torch._library",
    "torch.profiler",
    "torch.autograd.profiler",
    "torch.autograd.profiler_legacy",
    "torch.utils.cpp_extension",
    "torch.utils.data",
    "torch.utils.tensorboard",
    "torch.utils.collect_env",
    "torch.utils.benchmark",
    "torch.cuda.tunable",
    "torch.cuda.gds",
    "torch.cuda.jiterator",
    "torch.cuda.graphs",
    "torch.mps.profiler",
    "torch._higher_order_ops",
    "torch._utils_internal",
    "numpy.ctypeslib",
    "numpy.f2py",
    "numpy.testing",
    "numpy._pytesttester",
    "numpy.lib._npyio_impl",
    "numpy.lib.npyio",
    "numpy.lib.format",
    "numpy.lib._datasource",
    "numpy.lib._stride_tricks_impl",
    "numpy.lib.stride_tricks",
    "numpy._core.memmap",
)

def _origin_verdict(origin: Optional[str], is_callable: bool) -> Optional[str]:
    """Why objects defined in module ``origin`` are refused (a phrase), or None."""
    if not isinstance(origin, str):
        return None
    for refused in _REFUSED_ORIGINS:
        if origin == refused or origin.startswith(refused + "."):
            return f"comes from {origin}, which safe mode does not allow"
    root = origin.split(".", 1)[0]
    if root in _HOME_ROOTS or (not is_callable and root in _SAFE_INSTANCE_ROOTS):
        return None
    return f"comes from {origin}, outside torch and numpy"


def _violation(what: str, because: str) -> SafeModeViolation:
    return SafeModeViolation(f"{what} is not allowed in safe mode ({because}); {TRUST_HINT}")


class _ModuleRule:
    """What may be read from one allowed module."""

    __slots__ = ("module", "only", "refused", "verified")

    def __init__(self, module: types.ModuleType, only: Optional[FrozenSet[str]],
                 refused: Dict[str, str], verified: Dict[str, Any]) -> None:
        self.module = module
        self.only = only
        self.refused = refused  # name -> why (a phrase after "it")
        self.verified = verified  # name -> the value found fine on first access


class _Runtime:
    """The guard functions and the state they share (built once per process).

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
        self.dangerous_types: Set[type] = {
            types.FrameType,
            types.TracebackType,
            types.CodeType,
            types.CellType,
        }
        for name, reason in {**_REFUSED_BUILTINS, **_REFUSED_CALLS}.items():
            obj = getattr(builtins, name, None)
            if obj is not None:
                self.refuse_object(obj, f"builtins.{name}", reason)
        self.refuse_object(builtins.__import__, "builtins.__import__", "imports modules by name")
        self.refuse_object(builtins.__build_class__, "builtins.__build_class__",
                           "builds classes around the checks on class statements")
        self.plain_values: Set[type] = {
            int, float, bool, complex, str, bytes, type(None), tuple, list, dict, set,
            frozenset, slice, range,
        }
        self.plain_subjects: Set[type] = {
            int, float, bool, complex, str, bytes, tuple, list, dict, set, frozenset,
        }
        self.storage_types: Tuple[type, ...] = ()
        self.numpy_learned = False
        self.type_proxy = _make_type_proxy(self)
        self.guards = self._make_guards()
        self.builtins = self._make_builtins()
        self.learn_loaded_libraries()

    # -- set-up -----------------------------------------------------------

    def refuse_object(self, obj: Any, label: str, reason: str) -> None:
        self.refused_ids[id(obj)] = (obj, f"is {label}, which {reason}")

    def learn_loaded_libraries(self) -> None:
        """Fast paths for torch and numpy types, and their refused objects, once imported."""
        torch = sys.modules.get("torch")
        if torch is not None and not self.storage_types:
            fast = [torch.Tensor, torch.nn.Parameter, torch.Size, torch.dtype,
                    torch.device, torch.layout, torch.memory_format]
            self.plain_values.update(fast)
            self.plain_subjects.update(fast)
            self.storage_types = (torch.UntypedStorage, torch.TypedStorage)
            self.module_rule(torch)
        numpy = sys.modules.get("numpy")
        if numpy is not None and not self.numpy_learned and hasattr(numpy, "ndarray"):
            self.numpy_learned = True
            self.plain_values.add(numpy.ndarray)
            self.plain_subjects.add(numpy.ndarray)
            self.module_rule(numpy)

    def module_rule(self, module: types.ModuleType) -> _ModuleRule:
        rule = self.module_rules.get(id(module))
        if rule is not None and rule.module is module:
            return rule
        name = getattr(module, "__name__", None)
        if not (isinstance(name, str) and name in ALLOWED_MODULES and sys.modules.get(name) is module):
            reason = _REFUSED_MODULES.get(name, "") if isinstance(name, str) else ""
            raise _violation(
                f"module '{name}'",
                f"it is a module that {reason}" if reason else _IMPORT_RULE,
            )
        with self.lock:
            self.learn_loaded_libraries()
            only = _ONLY_MODULE_NAMES.get(name)
            refused: Dict[str, str] = dict(_REFUSED_MODULE_NAMES.get(name, {}))
            prefix = name + "."
            for full, reason in _REFUSED_MODULES.items():
                if full.startswith(prefix) and "." not in full[len(prefix):]:
                    refused[full[len(prefix):]] = f"is a module that {reason}"
            # The objects refused by name are refused wherever they turn up
            # (m = torch; m.save, or as an attribute of anything else). Other
            # names are checked, and their verdict kept, on first access.
            namespace = vars(module)
            for key, reason in _REFUSED_MODULE_NAMES.get(name, {}).items():
                if key in namespace:
                    self.refuse_object(namespace[key], f"{name}.{key}", reason)
            rule = _ModuleRule(module, only, refused, {})
            self.module_rules[id(module)] = rule
            return rule

    # -- verdicts ---------------------------------------------------------

    def origin(self, origin: Any, is_callable: bool) -> Optional[str]:
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
        if tv in self.plain_values:
            return None
        entry = self.refused_ids.get(id(value))
        if entry is not None and entry[0] is value:
            return entry[1]
        if isinstance(value, types.ModuleType):
            name = getattr(value, "__name__", None)
            if name in ALLOWED_MODULES and sys.modules.get(name) is value:
                return None
            reason = _REFUSED_MODULES.get(name) if isinstance(name, str) else None
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
            return self.origin(getattr(value, "__module__", None), True)
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
        if isinstance(obj, BaseException):
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
            if name in _REFUSED_ATTRIBUTES:
                raise _violation(f"'.{name}'", f"it {_REFUSED_ATTRIBUTES[name]}")
            if name[:1] == "_" and not _underscore_allowed(name):
                raise _violation(f"'.{name}'", "attributes starting with '_' reach interpreter internals")
            if name == "obj" and _isinstance(obj, BaseException):
                raise _violation("'.obj' of an exception", "it can hold objects of trusted code")
            if name in ("type", "resize_") and rt.storage_types and (
                _isinstance(obj, rt.storage_types)
                or (_isinstance(obj, _type) and issubclass(obj, rt.storage_types))
            ):
                why = _IMPORTS if name == "type" else "can leave tensors pointing outside their memory"
                raise _violation(f"'.{name}' of a storage", f"it {why}")

        def module_getattr(module: types.ModuleType, name: str) -> Any:
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
            if verdict is not None and not _isinstance(obj, BaseException):
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
            return _getattr_(obj, name)

        def _write_(obj: Any, name: str) -> Any:
            if _type(obj) in plain_subjects:
                return obj
            if name in _CLOSER_LOOK or name[:1] == "_":
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
                if _backend_flag(obj, name):
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
            if name in _CLOSER_LOOK or name[:1] == "_":
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
            "abs all any ascii bin bool bytearray bytes callable chr classmethod complex "
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
                and name not in ("BaseExceptionGroup", "ExceptionGroup", "SystemExit",
                                 "KeyboardInterrupt")
            ):
                table[name] = value
        # What plain exec finds for a class body's ``__module__ = __name__``.
        table["__name__"] = "builtins"
        table["type"] = self.type_proxy
        table["hasattr"] = _make_hasattr(self)
        table["__import__"] = _make_import(self)
        table["__build_class__"] = _make_build_class(self)
        table.update(self.guards)
        return table


def _backend_flag(module: types.ModuleType, name: str) -> bool:
    """``torch.backends.cudnn.deterministic = True`` and the like are settings, not patches."""
    mname = getattr(module, "__name__", "")
    if not (isinstance(mname, str) and mname.startswith("torch.backends.") and mname in ALLOWED_MODULES):
        return False
    prop_type = getattr(sys.modules.get("torch.backends"), "ContextProp", None)
    for klass in type(module).__mro__:
        descriptor = klass.__dict__.get(name)
        if descriptor is not None:
            return prop_type is not None and isinstance(descriptor, (prop_type, property))
    return False


def _make_type_proxy(rt: _Runtime) -> type:
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
            return result

        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, type)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, type)

        def __repr__(cls) -> str:
            return "<class 'type'>"

    proxy = _TypeMeta("type", (), {"__doc__": type.__doc__, "__module__": "builtins"})
    return proxy


def _make_hasattr(rt: _Runtime):
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


def _make_import(rt: _Runtime):
    real_import = builtins.__import__

    def __import__(name, globals=None, locals=None, fromlist=(), level=0):
        if type(fromlist) is list and not fromlist and not level and isinstance(name, str):
            # PyImport_Import: C code of torch or numpy importing what *it* needs
            # (torch.tensor imports torch.storage) while a scenario's frame is
            # the current one. The module goes back to that C code, not to the
            # scenario; an import statement never passes a list here.
            if name.split(".", 1)[0] in ("torch", "numpy") or name in sys.modules:
                return real_import(name, globals, locals, fromlist, level)
            raise _violation(f"importing '{name}' from library code", _IMPORT_RULE)
        if level:
            raise _violation("a relative import", _IMPORT_RULE)
        if not isinstance(name, str):
            raise TypeError(f"__import__() argument 1 must be str, not {type(name).__name__}")
        if _import_refusal(name) is not None:
            raise _violation(f"'import {name}'", _IMPORT_RULE)
        top = real_import(name, None, None, fromlist, 0)
        if fromlist:
            module = sys.modules[name]
            for item in fromlist:
                if item == "*":
                    raise _violation(f"'from {name} import *'", "it imports every name, internals included")
                rt.guards["_getattr_closely_"](module, item)
        return top

    return __import__


def _make_build_class(rt: _Runtime):
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
        rt.user_classes.add(cls)
        return cls

    return __build_class__


_RUNTIME: Optional[_Runtime] = None
_RUNTIME_LOCK = threading.Lock()


def _runtime() -> _Runtime:
    global _RUNTIME
    if _RUNTIME is None:
        with _RUNTIME_LOCK:
            if _RUNTIME is None:
                _RUNTIME = _Runtime()
    return _RUNTIME


def safe_globals(base: dict) -> dict:
    """A namespace for code from :func:`compile_safe`.

    ``base`` (torch, nn, F, same_storage, shares_memory, ...) plus
    ``__builtins__``: the builtins safe mode allows and the runtime guards the
    compiled code calls. The guards live in ``__builtins__`` so that the
    scenario's namespace holds only what the scenario binds.
    """
    rt = _runtime()
    rt.learn_loaded_libraries()
    namespace = dict(base)
    namespace["__builtins__"] = dict(rt.builtins)
    return namespace
