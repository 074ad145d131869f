"""What the user's code calls a tensor or a module, read from the frames that hold them.

``scopes`` collects the variables of the user's frames (innermost first, then
their globals). A parameter is named by its module path, as ``tensortrace
run`` names it (``D.2.weight``): found by the memory it lives in, so a saved
``weight.t()`` is named after its weight. ``defined_at`` finds the
expression that built a module (``nn.LeakyReLU(0.2, inplace=True)``) by
following the path from a variable to the module through the syntax trees
of the classes and the script that built each level: ``self.act = ...`` in
a user class's ``__init__``, the k-th argument of an ``nn.Sequential(...)``,
an assignment at the top of the script.
"""

from __future__ import annotations

import ast
import inspect
import os
from collections import deque
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from . import edits
from .places import is_user_code, storage_key

MAX_MODULES = 20_000  # modules walked when looking for a parameter's or a module's name


def scopes(frame: Any, depth: int = 16) -> List[Tuple[Dict[str, Any], str, int]]:
    """(variables, file, line) of the user's frames from ``frame`` outwards: each frame's
    locals, then (once) its globals."""
    found: List[Tuple[Dict[str, Any], str, int]] = []
    seen_globals = set()
    while frame is not None and depth > 0:
        depth -= 1
        code = frame.f_code
        if is_user_code(code):
            where = (code.co_filename, frame.f_lineno)
            if frame.f_locals is not frame.f_globals:
                found.append((dict(frame.f_locals), *where))
            if id(frame.f_globals) not in seen_globals:
                seen_globals.add(id(frame.f_globals))
                found.append((dict(frame.f_globals), code.co_filename, 0))  # the module's level
        frame = frame.f_back
    return found


def roots(frame: Any) -> List[Tuple[str, torch.nn.Module, str, int]]:
    """(variable, module, file, line) for every module a user frame holds by name."""
    found, seen = [], set()
    for variables, path, line in scopes(frame):
        for name, value in variables.items():
            if isinstance(value, torch.nn.Module) and id(value) not in seen and name != "self":
                seen.add(id(value))
                found.append((name, value, path, line))
    for variables, path, line in scopes(frame):
        value = variables.get("self")
        if isinstance(value, torch.nn.Module) and id(value) not in seen:
            seen.add(id(value))
            found.append(("self", value, path, line))
    return found


def _children(m: Any) -> Dict[str, Any]:
    try:
        own = object.__getattribute__(m, "__dict__")
    except AttributeError:
        return {}
    modules = own.get("_modules")
    return dict(modules) if isinstance(modules, dict) else {}


def _parameters(m: Any) -> Iterator[Tuple[str, Any]]:
    try:
        own = object.__getattribute__(m, "__dict__")
    except AttributeError:
        return
    for field in ("_parameters", "_buffers"):
        for key, t in dict(own.get(field) or {}).items():
            if t is not None:
                yield key, t


def walk_modules(name: str, module: Any) -> Iterator[Tuple[str, Any, List[Tuple[Any, str]]]]:
    """(dotted path, module, [(parent, key), ...]) for ``module`` and every module under it."""
    todo: deque = deque([(name, module, [])])
    seen = set()
    while todo and len(seen) < MAX_MODULES:
        path, m, chain = todo.popleft()
        if id(m) in seen:
            continue
        seen.add(id(m))
        yield path, m, chain
        for key, child in _children(m).items():
            if child is not None:
                todo.append((f"{path}.{key}", child, chain + [(m, key)]))


def parameter_name(t: Any, frame: Any) -> Optional[str]:
    """``D.2.weight`` for a parameter (or a view of one, or a buffer) of a module the user's
    frames hold; None when it is none of those."""
    key = storage_key(t)
    if key is None:
        return None
    for name, module, _, _ in roots(frame):
        for path, m, _ in walk_modules(name, module):
            for pname, p in _parameters(m):
                if p is t or storage_key(p) == key:
                    return f"{path}.{pname}"
    return None


def parameter_key(dotted: str, frame: Any) -> Optional[int]:
    """The memory of the parameter ``parameter_name`` calls ``dotted``."""
    for name, module, _, _ in roots(frame):
        for path, m, _ in walk_modules(name, module):
            for pname, p in _parameters(m):
                if f"{path}.{pname}" == dotted:
                    return storage_key(p)
    return None


def parameters_named(params: List[Any], frame: Any) -> Dict[int, str]:
    """id(parameter) -> module path, for those of ``params`` a user frame's modules hold."""
    wanted = {id(p) for p in params}
    found: Dict[int, str] = {}
    for name, module, _, _ in roots(frame):
        for path, m, _ in walk_modules(name, module):
            for pname, p in _parameters(m):
                if id(p) in wanted and id(p) not in found:
                    found[id(p)] = f"{path}.{pname}"
    return found


def owner_of(params: List[Any], frame: Any) -> Optional[Tuple[str, Any]]:
    """The deepest module (path, module) whose parameters include all of ``params``."""
    wanted = {id(p) for p in params}
    best: Optional[Tuple[str, Any]] = None
    for name, module, _, _ in roots(frame):
        for path, m, _ in walk_modules(name, module):
            mine = {id(p) for p in m.parameters()} if wanted else set()
            if wanted <= mine and (best is None or path.count(".") > best[0].count(".")):
                best = (path, m)
    return best


# --- where a module was built ---------------------------------------------------------------


def defined_at(target: Any, frame: Any) -> Optional[Tuple[str, ast.expr]]:
    """(file, the expression that built ``target``): a ``Call`` in the user's source."""
    for name, module, path, line in roots(frame):
        for _, m, chain in walk_modules(name, module):
            if m is target:
                return _built(name, path, line, chain, target)
    return None


def _built(
    root: str, path: str, line: int, chain: List[Tuple[Any, str]], target: Any
) -> Optional[Tuple[str, ast.expr]]:
    """Follow ``chain`` (parent, key) from the root variable to ``target``, keeping the
    expression that built each level."""
    where: Optional[Tuple[str, ast.expr]] = _assigned(path, line, root, None)
    for depth, (parent, key) in enumerate(chain):
        child = _children(parent).get(key)
        found = _in_class(parent, key)
        if found is None and where is not None:
            found = _in_container(where, key)
        if found is None and depth == 0:
            found = _assigned(path, line, root, key)
        if found is None:
            return None
        where = found
        if child is target:
            break
    return where


def _assigned(
    path: str, line: int, name: str, attribute: Optional[str]
) -> Optional[Tuple[str, ast.expr]]:
    """The value of the last assignment to ``name`` (or ``name.attribute``) in the code around
    ``path:line`` that builds something (a call)."""
    scope = edits.enclosing_function(path, line)
    if scope is None:
        return None
    best = None
    for node in ast.walk(scope):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        for t in node.targets:
            if attribute is None and isinstance(t, ast.Name) and t.id == name:
                best = node
            elif (
                attribute is not None
                and isinstance(t, ast.Attribute)
                and t.attr == attribute
                and isinstance(t.value, ast.Name)
                and t.value.id == name
            ):
                best = node
    return None if best is None else (path, best.value)


def _in_class(parent: Any, key: str) -> Optional[Tuple[str, ast.expr]]:
    """``self.<key> = <call>`` in the methods of the parent's own class (a user class)."""
    for cls in type(parent).__mro__:
        if cls is torch.nn.Module or cls is object:
            break
        try:
            path = inspect.getsourcefile(cls)
            code = getattr(cls.__init__, "__code__", None)
        except (TypeError, OSError):
            continue
        if path is None or code is None or not is_user_code(code):
            continue
        path = os.path.abspath(path)
        try:
            _, start = inspect.getsourcelines(cls)
        except (OSError, TypeError):
            continue
        klass = edits.statement_at(path, start)
        if not isinstance(klass, ast.ClassDef):
            continue
        for node in ast.walk(klass):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                for t in node.targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and t.attr == key
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        return path, node.value
    return None


def _in_container(where: Tuple[str, ast.expr], key: str) -> Optional[Tuple[str, ast.expr]]:
    """The ``key``-th module given to ``nn.Sequential(...)`` or ``nn.ModuleList([...])``."""
    path, call = where
    if not isinstance(call, ast.Call) or not key.isdigit():
        return None
    items: List[ast.expr] = list(call.args)
    if len(items) == 1 and isinstance(items[0], (ast.List, ast.Tuple)):
        items = list(items[0].elts)
    if any(isinstance(i, ast.Starred) for i in items) or int(key) >= len(items):
        return None
    return path, items[int(key)]


def inplace_edit(path: str, call: ast.expr, module: Any) -> Optional[Any]:
    """The edit that builds ``module`` (made by ``call``) with ``inplace=False``."""
    if not isinstance(call, ast.Call):
        return None
    for kw in call.keywords:
        if kw.arg == "inplace":
            return edits.replace_nodes(path, call.lineno, [(kw.value, "False")])
    try:
        names = [p for p in inspect.signature(type(module)).parameters]
    except (TypeError, ValueError):
        names = []
    if "inplace" in names and names.index("inplace") < len(call.args):
        return edits.replace_nodes(
            path, call.lineno, [(call.args[names.index("inplace")], "False")]
        )
    return None


__all__ = [
    "defined_at",
    "inplace_edit",
    "owner_of",
    "parameter_key",
    "parameter_name",
    "parameters_named",
    "roots",
    "scopes",
    "walk_modules",
]
