"""What safe mode allows and refuses: the policy tables, as plain data.

Both layers of safe mode read these tables and nothing else decides what is
refused: the syntax-tree check (:mod:`tensortrace.sandbox.checker`) refuses
what is written, the run-time guards (:mod:`tensortrace.sandbox.guards`)
refuse what is reached another way. Keeping one table per rule is what keeps
the two layers from drifting apart. The wording of a refusal lives here too
(:class:`SafeModeViolation`, :func:`violation`), so that both layers say it
the same way. Checking source never imports torch or numpy, so this module
imports neither.

The tables on modules (the allowlist, refused modules and names) live in
:mod:`tensortrace.sandbox.modules`; this module re-exports them, so that
both layers read every table from one place.
"""

from __future__ import annotations

import _string
from typing import Dict, FrozenSet, Tuple

from .modules import (
    ALLOWED_MODULES,
    COMPILE,
    DANGLING,
    FILES,
    HOME_ROOTS,
    IMPORTS,
    IMPORT_RULE,
    MEMORY,
    NATIVE,
    NETWORK,
    ONLY_MODULE_NAMES,
    PROCESSES,
    PROFILE,
    REFUSED_MODULES,
    REFUSED_MODULE_NAMES,
    SAFE_INSTANCE_ROOTS,
    SCRIPT,
    STDLIB_MODULES,
    TRUSTED_FOREIGN_MODULES,
    ModuleRefusal,
    import_refusal,
    module_reason,
    refused_module_attribute,
    refused_origin,
)

#: Names a module's code may read that start with '_': its own name (the main guard,
#: ``if __name__ == "__main__":``) and its file's path. Plain strings; never written.
MODULE_NAMES = frozenset({"__name__", "__file__"})

__all__ = [
    "MODULE_NAMES",
    "ALLOWED_DUNDER_METHODS",
    "ALLOWED_MODULES",
    "ALLOWED_UNDERSCORE_ATTRIBUTES",
    "ALLOWED_UNDERSCORE_PREFIXES",
    "CLOSER_LOOK",
    "COMPILE",
    "DANGLING",
    "DEFAULT_ALIASES",
    "FILES",
    "FORMAT_HINT",
    "FORMAT_METHODS",
    "HOME_ROOTS",
    "IMPORTS",
    "IMPORT_RULE",
    "MEMORY",
    "METACLASS",
    "ModuleRefusal",
    "NATIVE",
    "NETWORK",
    "ONLY_MODULE_NAMES",
    "PROCESSES",
    "PROFILE",
    "RAW_MEMORY_PROTOCOLS",
    "REFUSED_ATTRIBUTES",
    "REFUSED_BUILTINS",
    "REFUSED_CALLS",
    "REFUSED_MODULES",
    "REFUSED_MODULE_NAMES",
    "SAFE_INSTANCE_ROOTS",
    "SCRIPT",
    "STDLIB_MODULES",
    "SafeModeViolation",
    "TRUSTED_FOREIGN_MODULES",
    "UNDERSCORE_WRITE",
    "format_is_plain",
    "import_refusal",
    "module_reason",
    "TRUST_HINT",
    "refused_module_attribute",
    "refused_origin",
    "underscore_allowed",
    "violation",
]

#: How every refusal ends: what to do instead.
TRUST_HINT = "use --trust to run it as plain Python"


class SafeModeViolation(Exception):
    """Raised at run time when scenario code reaches something safe mode refuses.

    An ``Exception`` (not a ``BaseException``), so that a tracer recording
    a step's outcome handles it like any other error; a scenario that catches
    it has still not done what was refused.
    """


def violation(what: str, because: str) -> SafeModeViolation:
    """The run-time refusal of ``what``, worded as the static check words its refusals."""
    return SafeModeViolation(f"{what} is not allowed in safe mode ({because}); {TRUST_HINT}")


#: Attributes refused on every object, statically and at run time.
REFUSED_ATTRIBUTES: Dict[str, str] = {
    "tofile": FILES,
    "dump": FILES,
    "dumps": "pickles objects",
    "from_file": FILES,
    "load_library": NATIVE,
    "share_memory_": "creates shared-memory files",
    "share_memory": "creates shared-memory files",
    "compile": COMPILE,
    "debug_dump": FILES,
    "export_chrome_trace": FILES,
    "export_stacks": FILES,
    "export_memory_timeline": FILES,
    "ctypes": MEMORY,
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
#: String methods whose template can walk attributes and items by name
#: (``'{0.__class__}'``, ``'{x[key]}'``). Templates whose fields are plain
#: (``'{}'``, ``'{0}'``, ``'{name!r:>8}'``) are allowed; see format_is_plain.
FORMAT_METHODS: Dict[str, str] = {
    "format": "its template reaches attributes or items by name, as in '{0.__class__}'",
    "format_map": "its template reaches attributes or items by name, as in '{x.__class__}'",
}
FORMAT_HINT = "use plain fields such as '{}' or '{0:.2f}', or an f-string"

CLOSER_LOOK: FrozenSet[str] = (
    frozenset(REFUSED_ATTRIBUTES)
    | frozenset(FORMAT_METHODS)
    | {"obj", "type", "resize_", "resize", "new_tensor"}
)

#: Why no attribute starting with ``_`` may be written or deleted, even those
#: that may be read: library code trusts them (make_fx pastes ``__name__``
#: into Python source it runs; ``__init__`` re-initialises a shared object).
UNDERSCORE_WRITE = (
    "attributes starting with '_' can be read, not changed: library code trusts them, "
    "and some of it pastes names such as __name__ into code it runs"
)
METACLASS = "a metaclass builds classes around the checks on class statements"

#: Special attributes through which numpy and torch take an object's memory
#: from an address it names: defined by a scenario, they read and write any
#: memory of the process.
RAW_MEMORY_PROTOCOLS: Dict[str, str] = {
    name: "lets numpy and torch read and write memory at any address the object names"
    for name in (
        "__array_interface__",
        "__array_struct__",
        "__cuda_array_interface__",
        "__dlpack__",
        "__dlpack_device__",
    )
}

#: Attributes starting with ``_`` that are allowed: the facts this tool is
#: about (``_version``, ``_base``, ``_is_view``, a grad_fn's ``_saved_*``), what
#: class definitions need (``__init__``), and two harmless strings.
ALLOWED_UNDERSCORE_ATTRIBUTES: FrozenSet[str] = frozenset(
    {"_version", "_base", "_is_view", "__init__", "__name__", "__version__"}
)
ALLOWED_UNDERSCORE_PREFIXES: Tuple[str, ...] = ("_saved_", "_raw_saved_")

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
REFUSED_BUILTINS: Dict[str, str] = {
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
    "bytearray": "can free its memory while a tensor made from it still points into it",
}

#: Builtins refused when called (``input = torch.randn(3)`` is a fine name).
REFUSED_CALLS: Dict[str, str] = {
    "input": "reads the terminal",
    "help": "starts pydoc, which imports modules by name",
    "exit": "ends the interpreter",
    "quit": "ends the interpreter",
    "copyright": "is meant for the interactive prompt",
    "credits": "is meant for the interactive prompt",
    "license": "is meant for the interactive prompt and reads files",
}

#: Names under which scenarios usually see modules without importing them.
DEFAULT_ALIASES: Dict[str, str] = {
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "np": "numpy",
    "numpy": "numpy",
    "math": "math",
    "copy": "copy",
}

# ---------------------------------------------------------------------------
# Questions both layers ask of the tables
# ---------------------------------------------------------------------------


def underscore_allowed(name: str) -> bool:
    """Whether an attribute starting with ``_`` is one of the harmless exceptions."""
    return (
        name == "_"
        or name in ALLOWED_UNDERSCORE_ATTRIBUTES
        or name.startswith(ALLOWED_UNDERSCORE_PREFIXES)
    )


def format_is_plain(template: str) -> bool:
    """Whether no field of this ``str.format`` template reaches an attribute or item.

    A field name such as ``0.__class__`` or ``x[key]`` makes ``format`` walk
    the object; ``''``, ``'0'`` and ``'name'`` only pick an argument. Nested
    fields in format specs (``'{:{width}}'``) are checked the same way. A
    template that does not parse is left to ``format`` itself, which raises.
    """
    try:
        parts = list(_string.formatter_parser(template))
    except ValueError:
        return True
    for _, field, spec, _ in parts:
        if field is not None and ("." in field or "[" in field):
            return False
        if spec and not format_is_plain(spec):
            return False
    return True
