"""The syntax-tree layer of safe mode: check scenario code, and rewrite it for the guards.

One pass over the tree of each piece of code refuses, before anything runs,
what the policy refuses when it is written literally (imports outside the
allowlist, names starting with ``_``, builtins that reach outside,
``torch.save`` written as such) and returns a :class:`Refusal` with line and
column for each, so that the user sees every problem at once. The same pass
rewrites every attribute read and write into calls of the run-time guards
(:mod:`tensortrace.sandbox.guards`), which refuse what the tree cannot show.
Everything else is left to plain Python, so a scenario's semantics stay those
of plain ``exec``. What the pass knows of the syntax tree itself (the nodes
safe mode knows, where a refusal is placed, how a guard call is built) is in
:mod:`tensortrace.sandbox.syntax`; the checks that need the whole source are
in :mod:`tensortrace.sandbox.deferred`.
"""

from __future__ import annotations

import ast
import functools
import types
from typing import Any, Callable, FrozenSet, List, Optional, Set, Tuple

from tensortrace.errors import PolicyError

from .policy import (
    ALLOWED_DUNDER_METHODS,
    ALLOWED_MODULES,
    CLOSER_LOOK,
    DEFAULT_ALIASES,
    FORMAT_HINT,
    FORMAT_METHODS,
    IMPORT_RULE,
    MODULE_NAMES,
    RAW_MEMORY_PROTOCOLS,
    REFUSED_ATTRIBUTES,
    REFUSED_BUILTINS,
    REFUSED_CALLS,
    TRUST_HINT,
    UNDERSCORE_WRITE,
    format_is_plain,
    import_refusal,
    refused_module_attribute,
    underscore_allowed,
)

__all__ = ["Refusal", "check_source", "compile_safe"]


from .deferred import DeferredChecks
from .syntax import (
    ALLOWED_NODES,
    CONSTRUCT_NAMES,
    IOP_SYMBOLS,
    LEAVES,
    Refusal,
    attribute_name_column,
    attribute_chain,
    guard_call,
)


class _Checker(DeferredChecks):
    """One pass over the syntax tree: collects refusals and rewrites attribute access.

    Children are handled before a node is rewritten, and inserted guard calls
    are never visited, so they are not subject to the underscore rule. Checks
    that depend on the whole source (is ``open`` bound by this code? what does
    ``np`` name here?) are recorded during the pass and decided at the end
    (:class:`~tensortrace.sandbox.deferred.DeferredChecks`).
    """

    def __init__(self, source: str, local: FrozenSet[str] = frozenset()) -> None:
        self.source = source
        self.has_imports = "import" in source
        super().__init__()
        self.local = local  # the modules beside the file: its own code, checked as it is
        self.problems: List[Tuple[ast.AST, str, Optional[int]]] = []
        self.method_defs: Set[int] = set()

    # -- driver -------------------------------------------------------------

    def run(self, tree: ast.AST) -> ast.AST:
        tree = self.visit(tree)
        self.decide_deferred()
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
        if type(node) not in ALLOWED_NODES:
            name = type(node).__name__
            what = CONSTRUCT_NAMES.get(name, f"'{name}' syntax")
            self.refuse(node, f"{what} is not allowed in safe mode")
            return node
        self.children(node)
        return node

    def children(self, node: ast.AST) -> None:
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST) and type(item) not in LEAVES:
                        new = self.visit(item)
                        if new is not item:
                            value[i] = new
            elif isinstance(value, ast.AST) and type(value) not in LEAVES:
                new = self.visit(value)
                if new is not value:
                    setattr(node, field, new)

    # -- names ----------------------------------------------------------------

    def check_name(self, node: ast.AST, name: str, what: str = "name") -> None:
        if name in RAW_MEMORY_PROTOCOLS:
            self.refuse(
                node, f"'{name}' is not allowed in safe mode (it {RAW_MEMORY_PROTOCOLS[name]})"
            )
        elif name[:1] == "_" and name != "_":
            self.refuse(
                node,
                f"'{name}' is not allowed in safe mode ({what}s starting with '_' "
                "reach interpreter internals)",
            )

    def v_name(self, node: ast.Name) -> ast.AST:
        name = node.id
        if name[:1] == "_" and not (name in MODULE_NAMES and type(node.ctx) is ast.Load):
            self.check_name(node, name)
        if type(node.ctx) is ast.Load:
            if name in REFUSED_BUILTINS:
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
            if a.name in self.local:
                self.imported[a.asname or a.name] = a.name
                if a.asname:
                    self.check_name(node, a.asname)
                continue
            if import_refusal(a.name) is not None:
                self.refuse(node, f"'{text}' is not allowed in safe mode ({IMPORT_RULE})")
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
                f"safe mode (relative import; {IMPORT_RULE})",
            )
            return node
        if module in self.local:  # the user's own module: its names are checked as it runs
            for a in node.names:
                if a.name == "*" or a.name.startswith("_"):
                    self.refuse(
                        node,
                        f"'from {module} import {a.name}' is not allowed in safe mode "
                        "(it imports every name, or one starting with '_')",
                    )
                elif a.asname:
                    self.check_name(node, a.asname)
            return node
        if import_refusal(module) is not None:
            self.refuse(
                node,
                f"'from {module} import {names}' is not allowed in safe mode ({IMPORT_RULE})",
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
            reason = refused_module_attribute(module, a.name)
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
        if attr in RAW_MEMORY_PROTOCOLS:
            self.refuse(
                node,
                f"'.{attr}' is not allowed in safe mode (it {RAW_MEMORY_PROTOCOLS[attr]})",
                attribute_name_column(node),
            )
        elif attr[:1] == "_" and not is_load:
            verb = "deleting" if type(node.ctx) is ast.Del else "writing"
            self.refuse(
                node,
                f"{verb} '.{attr}' is not allowed in safe mode ({UNDERSCORE_WRITE})",
                attribute_name_column(node),
            )
        elif attr[:1] == "_" and not underscore_allowed(attr):
            self.refuse(
                node,
                f"'.{attr}' is not allowed in safe mode (attributes starting with '_' "
                "reach interpreter internals; allowed: _version, _base, _is_view, "
                "_saved_*, _raw_saved_*, __init__, __name__, __version__)",
                attribute_name_column(node),
            )
        elif attr in REFUSED_ATTRIBUTES:
            self.refuse(
                node,
                f"'.{attr}' is not allowed in safe mode (it {REFUSED_ATTRIBUTES[attr]})",
                attribute_name_column(node),
            )
        elif attr in FORMAT_METHODS:
            # A literal template is judged here; any other is judged by the
            # guard when it runs, on the string it is called on.
            template = node.value
            if type(template) is ast.Constant and type(template.value) is str:
                if not format_is_plain(template.value):
                    self.refuse(
                        node,
                        f"'.{attr}' with this template is not allowed in safe mode "
                        f"({FORMAT_METHODS[attr]}; {FORMAT_HINT})",
                        attribute_name_column(node),
                    )
            elif type(template) is ast.Name and template.id == "str":
                # str.format(template, ...): the template is an argument.
                self.str_formats.append(node)
        root = node.value
        while type(root) is ast.Attribute:
            root = root.value
        if type(root) is ast.Name and (root.id in DEFAULT_ALIASES or self.has_imports):
            chain = attribute_chain(node)
            if chain is not None:
                self.chains.append((node, chain, is_load))

    def v_attribute(self, node: ast.Attribute) -> ast.AST:
        is_load = type(node.ctx) is ast.Load
        self.check_attribute(node, is_load)
        value = node.value
        if type(value) not in LEAVES:
            value = self.visit(value)
        if is_load:
            closely = node.attr in CLOSER_LOOK or node.attr[:1] == "_"
            return guard_call(
                "_getattr_closely_" if closely else "_getattr_", [value, node.attr], node
            )
        node.value = guard_call("_write_", [value, node.attr], node.value)
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
        load = guard_call("_aug_load_", [obj, target.attr], target)
        store = guard_call("_aug_store_", [load, value, IOP_SYMBOLS[type(node.op)]], node)
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
            if func.id in REFUSED_CALLS or func.id == "type":
                self.builtin_calls.append((node, func.id, len(node.args) + len(node.keywords)))
        self.children(node)
        return node

    def v_function(self, node: ast.FunctionDef) -> ast.AST:
        name = node.name
        self.bound.add(name)
        if name in RAW_MEMORY_PROTOCOLS:
            self.refuse(
                node,
                f"defining '{name}' is not allowed in safe mode (it {RAW_MEMORY_PROTOCOLS[name]})",
            )
        elif name[:1] == "_" and name != "_":
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

    def v_keyword(self, node: ast.keyword) -> ast.AST:
        if node.arg in RAW_MEMORY_PROTOCOLS:
            self.refuse(
                node if hasattr(node, "lineno") else node.value,
                f"'{node.arg}' is not allowed in safe mode (it {RAW_MEMORY_PROTOCOLS[node.arg]})",
            )
        self.children(node)
        return node

    def v_constant(self, node: ast.Constant) -> ast.AST:
        if type(node.value) is str and node.value in RAW_MEMORY_PROTOCOLS:
            self.refuse(
                node,
                f"'{node.value}' is not allowed in safe mode "
                f"(it {RAW_MEMORY_PROTOCOLS[node.value]})",
            )
        return node

    def v_comprehension(self, node: ast.comprehension) -> ast.AST:
        if node.is_async:
            self.refuse(node.target, "'async for' is not allowed in safe mode")
        self.children(node)
        return node


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
    ast.keyword: _Checker.v_keyword,
    ast.Constant: _Checker.v_constant,
}


def _parse(source: str, mode: str) -> ast.AST:
    if mode not in ("exec", "eval"):
        raise ValueError(f"mode must be 'exec' or 'eval', not {mode!r}")
    return ast.parse(source, mode=mode)


# The loader checks every step before anything runs, and the tracer compiles
# each step later (variants and re-runs compile the same text again): keep
# recent results so that a piece of code is parsed and walked once. Code
# objects and refusal lists are immutable, and compile() does not change a
# tree. lru_cache keeps nothing of a call that raised (a RecursionError on
# deeply nested code, a PolicyError), so such code is tried afresh each time.


@functools.lru_cache(maxsize=512)
def _checked(
    source: str, mode: str, local: FrozenSet[str] = frozenset()
) -> Tuple[Tuple[Refusal, ...], ast.AST]:
    checker = _Checker(source, local)
    tree = checker.run(_parse(source, mode))
    return tuple(checker.refusals()), tree


@functools.lru_cache(maxsize=512)
def _compiled(
    source: str, filename: str, mode: str, local: FrozenSet[str] = frozenset()
) -> types.CodeType:
    refusals, tree = _checked(source, mode, local)
    if refusals:
        first = refusals[0]
        raise PolicyError(first.message, path=filename, line=first.line, column=first.column)
    return compile(tree, filename, mode, dont_inherit=True)


def check_source(
    source: str, mode: str = "exec", local: FrozenSet[str] = frozenset()
) -> List[Refusal]:
    """Every construct safe mode refuses in this code, in source order.

    ``mode`` is ``'exec'`` for steps and setup, ``'eval'`` for expectations.
    ``local``: the modules beside the Python file (``import helper`` of one is
    the user's own code, checked on its own as this is).
    The caller has already checked that the source compiles; an empty list
    means the code may be compiled with :func:`compile_safe`.
    """
    return list(_checked(source, mode, local)[0])


def compile_safe(
    source: str,
    filename: str,
    mode: str = "exec",
    local: FrozenSet[str] = frozenset(),
    transform: Optional[Callable[[ast.Module], Optional[ast.Module]]] = None,
) -> Optional[types.CodeType]:
    """A code object whose attribute access goes through the runtime guards.

    Line numbers are those of ``source``. Code that :func:`check_source` would
    refuse raises :class:`PolicyError`, so a caller that forgot the check still
    cannot run it. ``transform`` is given the checked (guarded) tree and returns
    a new one to compile, leaving the one it was given unchanged (it is cached), or
    None, which is returned: the caller's own additions (the tracer's loop marks),
    made after the checks, with names no scenario can write.
    """
    if transform is None:
        return _compiled(source, filename, mode, local)
    refusals, tree = _checked(source, mode, local)
    if refusals:
        first = refusals[0]
        raise PolicyError(first.message, path=filename, line=first.line, column=first.column)
    changed = transform(tree)
    return None if changed is None else compile(changed, filename, mode, dont_inherit=True)
