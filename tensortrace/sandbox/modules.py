"""Which modules safe mode allows, which it refuses and why, and what may be read from them.

Part of the policy tables (:mod:`tensortrace.sandbox.policy` re-exports all
of it): the allowlist of modules, the public names of allowed modules that
are refused anyway, the refused modules with their reasons, and the
questions both layers ask of these tables (may this module be imported? why
is ``module.name`` refused? which refused module defined this object?).
Modules are the largest part of the policy and change on their own (a new
torch release adds submodules), so they live apart from the rules on
attributes, names and builtins. Plain data: no torch, no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional

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
        "torch.utils.data",
        "numpy",
        "numpy.linalg",
        "numpy.random",
        "numpy.fft",
        "numpy.lib",
        "numpy.lib.stride_tricks",
        "math",
        "copy",
        "collections",
        "functools",
    }
)

FILES = "reads or writes files"
SCRIPT = "compiles or loads code (TorchScript)"
COMPILE = "compiles code (TorchDynamo and Inductor write caches and start worker processes)"
PROCESSES = "starts processes or threads"
NETWORK = "downloads from the network"
NATIVE = "loads native libraries or registers operators"
IMPORTS = "imports a module named by a string"
PROFILE = "writes profiler traces to files"
MEMORY = "works on raw memory addresses"
DANGLING = "makes a tensor over memory that can be freed while the tensor still points into it"

#: Public names of allowed modules that are refused anyway, with the reason.
REFUSED_MODULE_NAMES: Dict[str, Dict[str, str]] = {
    "torch": {
        "load": FILES,
        "save": FILES,
        "from_file": FILES,
        "get_file_path": FILES,
        "PyTorchFileReader": FILES,
        "PyTorchFileWriter": FILES,
        "ScriptModuleSerializer": FILES,
        "SerializationStorageContext": FILES,
        "DeserializationStorageContext": FILES,
        "import_ir_module": FILES,
        "import_ir_module_from_buffer": SCRIPT,
        "compile": COMPILE,
        "cond": COMPILE,
        "while_loop": COMPILE,
        "fork": PROCESSES,
        "wait": PROCESSES,
        "prepare_multiprocessing_environment": PROCESSES,
        "set_default_tensor_type": IMPORTS,
        "frombuffer": DANGLING,
        "profiler_allow_cudagraph_cupti_lazy_reinit_cuda12": PROFILE,
        **{
            name: SCRIPT
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
    "torch.mps": {"compile_shader": SCRIPT, "load_metallib": FILES},
    "torch.func": {
        "linearize": "generates Python source from operator names and runs it (through make_fx)",
    },
    "torch.utils": {"set_module": "rewrites the __module__ of objects"},
    "torch.testing": {"FileCheck": SCRIPT},
    "numpy": {
        "load": FILES,
        "save": FILES,
        "savez": FILES,
        "savez_compressed": FILES,
        "savetxt": FILES,
        "loadtxt": FILES,
        "genfromtxt": FILES,
        "fromfile": FILES,
        "fromregex": FILES,
        "memmap": FILES,
        "DataSource": FILES,
        "info": "reads source files",
        "show_runtime": NATIVE,
        "test": "runs the test suite",
        "ScalarType": "holds the memoryview type, which exposes the raw buffers of objects",
    },
    "numpy.linalg": {"test": "runs the test suite"},
    "numpy.random": {"test": "runs the test suite"},
    "numpy.fft": {"test": "runs the test suite"},
    "numpy.lib.stride_tricks": {"as_strided": MEMORY},
}

#: Modules where only the names listed are reachable (device queries only for
#: ``torch.cuda``; ``copy`` also exports the modules and tables it uses).
ONLY_MODULE_NAMES: Dict[str, FrozenSet[str]] = {
    "copy": frozenset({"copy", "deepcopy", "replace", "Error", "error"}),
    # Containers that are plain data. Not namedtuple, which generates code.
    "collections": frozenset({"OrderedDict", "defaultdict", "deque", "Counter"}),
    # Not wraps or update_wrapper (they write __name__ and __dict__ onto any
    # object), total_ordering (adds methods to any class) or singledispatch
    # (evaluates annotations as code).
    "functools": frozenset(
        {"partial", "reduce", "lru_cache", "cache", "cached_property", "cmp_to_key"}
    ),
    # Datasets only: a DataLoader with workers starts processes.
    "torch.utils.data": frozenset({"TensorDataset"}),
    "numpy.lib": frozenset({"stride_tricks"}),
    "numpy.lib.stride_tricks": frozenset({"sliding_window_view"}),
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


@dataclass(frozen=True)
class ModuleRefusal:
    """Why a module is refused, and how far the refusal reaches.

    ``reason`` is a phrase after "it is a module that". With ``objects`` the
    functions and classes *defined* in the module (or below it) are refused
    too, wherever they turn up: a refused module is often reachable through
    objects it defines. Without it only the module itself is refused, because
    torch or numpy re-export objects defined there that scenarios are meant
    to use (storages come from ``torch.storage``, ``torch.cuda.memory_allocated``
    from ``torch.cuda.memory``, most of numpy from ``numpy.lib``).
    """

    reason: str
    objects: bool = True


def _module_only(reason: str) -> ModuleRefusal:
    return ModuleRefusal(reason, objects=False)


#: The one table of refused modules, read by the syntax-tree check (imports
#: and attribute chains such as ``torch.hub``) and by the run-time guards
#: (modules reached any other way, and objects defined in them). Any module
#: not in ALLOWED_MODULES is refused whether it is listed here or not; an
#: entry here adds the reason to the message and, with ``objects``, refuses
#: what the module defines.
REFUSED_MODULES: Dict[str, ModuleRefusal] = {
    "torch.hub": ModuleRefusal(NETWORK),
    "torch.jit": ModuleRefusal(SCRIPT),
    "torch.onnx": ModuleRefusal(FILES),
    "torch.package": ModuleRefusal(FILES),
    "torch.export": ModuleRefusal(COMPILE),
    "torch._export": ModuleRefusal(COMPILE),
    "torch.compiler": ModuleRefusal(COMPILE),
    "torch._dynamo": ModuleRefusal(COMPILE),
    "torch._inductor": ModuleRefusal(COMPILE),
    "torch._higher_order_ops": ModuleRefusal(COMPILE),
    "torch.fx": ModuleRefusal("generates and runs Python code"),
    "torch.distributed": ModuleRefusal("opens network connections"),
    "torch.multiprocessing": ModuleRefusal(PROCESSES),
    "torch.library": ModuleRefusal(NATIVE),
    "torch._library": ModuleRefusal(NATIVE),
    "torch.ops": ModuleRefusal(NATIVE),
    "torch.classes": _module_only(NATIVE),
    "torch.profiler": ModuleRefusal(PROFILE),
    "torch.serialization": ModuleRefusal(FILES),
    "torch._utils_internal": ModuleRefusal(FILES),
    "torch.storage": _module_only("exposes storage internals"),
    "torch.overrides": _module_only("exposes dispatch internals"),
    "torch.utils.cpp_extension": ModuleRefusal("compiles and loads C++ code"),
    "torch.utils.data.dataloader": ModuleRefusal("starts worker processes"),
    "torch.utils.data._utils": ModuleRefusal("starts worker processes"),
    "torch.utils.tensorboard": ModuleRefusal(FILES),
    "torch.utils.collect_env": ModuleRefusal("runs shell commands"),
    "torch.utils.benchmark": ModuleRefusal("compiles code and starts processes"),
    "torch.utils.dlpack": _module_only("exchanges raw memory with other libraries"),
    "torch.autograd.profiler": ModuleRefusal(PROFILE),
    "torch.autograd.profiler_legacy": ModuleRefusal(PROFILE),
    "torch.cuda.memory": _module_only("dumps memory snapshots to files"),
    "torch.cuda.tunable": ModuleRefusal(FILES),
    "torch.cuda.gds": ModuleRefusal(FILES),
    "torch.cuda.jiterator": ModuleRefusal("compiles CUDA code"),
    "torch.cuda.profiler": _module_only(PROFILE),
    "torch.cuda.nvtx": _module_only(PROFILE),
    "torch.cuda.graphs": ModuleRefusal(FILES),
    "torch.mps.profiler": ModuleRefusal(PROFILE),
    "numpy.lib.npyio": ModuleRefusal(FILES),
    "numpy.lib._npyio_impl": ModuleRefusal(FILES),
    "numpy.lib.format": ModuleRefusal(FILES),
    "numpy.lib._datasource": ModuleRefusal(FILES),
    "numpy.lib._stride_tricks_impl": ModuleRefusal(MEMORY),
    "numpy._core.memmap": ModuleRefusal(FILES),
    "numpy.ctypeslib": ModuleRefusal(NATIVE),
    "numpy.f2py": ModuleRefusal("compiles and loads Fortran code"),
    "numpy.distutils": _module_only("compiles code"),
    "numpy.testing": ModuleRefusal("creates temporary files and runs tests"),
    "numpy._pytesttester": ModuleRefusal("runs the test suite"),
    "numpy.rec": _module_only(FILES),
    "numpy.core": _module_only("exposes numpy internals"),
}


#: Standard-library modules that torch and numpy modules hold as attributes
#: (``torch.os``, ``np.sys``...). None of these names is also a torch or numpy
#: function, so refusing them statically has no false positives; any other
#: module is refused at run time.
STDLIB_MODULES: FrozenSet[str] = frozenset(
    (
        "os sys ctypes importlib inspect platform threading glob subprocess builtins io "
        "pathlib shutil socket pickle tempfile multiprocessing textwrap traceback logging "
        "warnings weakref gc marshal runpy code codecs mmap atexit site sysconfig urllib "
        "http zipfile tarfile functools itertools collections contextlib dataclasses enum "
        "abc typing uuid json re struct copyreg operator numbers"
    ).split()
)

IMPORT_RULE = "only torch, numpy, math, copy, collections, functools and their allowed submodules"


#: Roots of the modules whose functions and classes scenarios may use.
#: "__scenario__" is the module name of the scenario's own code (its classes
#: and functions): what it defines itself is as much home as torch.
HOME_ROOTS: FrozenSet[str] = frozenset(
    {"torch", "numpy", "math", "copy", "builtins", "tensortrace", "__scenario__"}
)
#: Modules outside torch and numpy from which the names ONLY_MODULE_NAMES
#: lists are allowed (the objects themselves, and instances of those classes).
TRUSTED_FOREIGN_MODULES: FrozenSet[str] = frozenset({"collections", "functools"})
#: Foreign modules whose *instances* are plain data (named tuples, enums,
#: weak references, context managers, ...); their functions and classes are
#: still refused.
SAFE_INSTANCE_ROOTS: FrozenSet[str] = frozenset(
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


# ---------------------------------------------------------------------------
# Questions both layers ask of the module tables
# ---------------------------------------------------------------------------


def module_reason(module: object) -> Optional[str]:
    """Why the module named ``module`` is refused, or None.

    The reason is a phrase after "it is a module that".
    """
    entry = REFUSED_MODULES.get(module) if isinstance(module, str) else None
    return entry.reason if entry is not None else None


def refused_module_attribute(module: str, name: str) -> Optional[str]:
    """Why ``module.name`` is refused, as a phrase after "it" (module is allowed), or None."""
    full = f"{module}.{name}"
    if full in ALLOWED_MODULES:
        return None
    reason = REFUSED_MODULE_NAMES.get(module, {}).get(name)
    if reason is not None:
        return reason
    if full in REFUSED_MODULES:  # before the allowlist of names, as the guards do
        return f"is a module that {REFUSED_MODULES[full].reason}"
    only = ONLY_MODULE_NAMES.get(module)
    if only is not None and name not in only:
        return f"is not among the names safe mode allows from {module}"
    if name in STDLIB_MODULES:
        return "is a module outside the allowlist"
    return None


def import_refusal(module: str) -> Optional[str]:
    """The module that makes ``import module`` refused, or None.

    ALLOWED_MODULES holds every parent of each module it holds (a test pins
    that down), so one lookup covers the whole dotted path.
    """
    return None if module in ALLOWED_MODULES else module


def refused_origin(origin: str) -> Optional[str]:
    """The refused module that defines objects of module ``origin``, or None."""
    for name, entry in REFUSED_MODULES.items():
        if entry.objects and (origin == name or origin.startswith(name + ".")):
            return name
    return None
