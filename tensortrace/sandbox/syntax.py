"""What the syntax-tree check knows of Python's syntax, and how it places and rewrites nodes.

The checker (:mod:`tensortrace.sandbox.checker`) walks each piece of code
once. What that walk needs to know of the syntax tree itself, apart from the
policy, lives here: the node types safe mode knows (anything else is refused
until someone has looked at it), the names of constructs it refuses by
syntax, how a refusal is placed (line and column in characters), how an
attribute chain such as ``torch.nn.functional`` is read, and how the calls
to the run-time guards are built into the tree.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, FrozenSet, List, Optional, Tuple

#: The symbol of each augmented assignment, as the guard ``_aug_store_`` takes it.
IOP_SYMBOLS = {
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


def node_types(names: str) -> FrozenSet[type]:
    return frozenset(getattr(ast, n) for n in names.split() if hasattr(ast, n))


#: Syntax safe mode knows. Anything else (async, ``except*``, ``match``, and
#: whatever a later Python adds) is refused until someone has looked at it.
ALLOWED_NODES = node_types(
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

CONSTRUCT_NAMES = {
    "AsyncFunctionDef": "'async def'",
    "AsyncFor": "'async for'",
    "AsyncWith": "'async with'",
    "Await": "'await'",
    "TryStar": "'except*'",
    "Match": "the 'match' statement",
    "TypeAlias": "the 'type' statement",
    "TemplateStr": "template strings",
}


@dataclass(frozen=True)
class Refusal:
    """One construct safe mode refuses, at a place in the source given."""

    line: int  # 1-based, relative to the source given
    column: int  # 1-based, in characters
    message: str


def attribute_name_column(node: ast.Attribute) -> Optional[int]:
    """Byte offset of the attribute's name (it ends the node's span), or None."""
    end = getattr(node, "end_col_offset", None)
    if end is None or node.end_lineno != node.lineno:
        return None
    return end - len(node.attr.encode("utf-8"))


def attribute_chain(node: ast.AST) -> Optional[Tuple[str, ...]]:
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


def guard_call(name: str, args: List[Any], where: Any) -> ast.Call:
    """``name(*args)`` placed at ``where``; str arguments become constants there."""
    pos = {
        "lineno": where.lineno,
        "col_offset": where.col_offset,
        "end_lineno": where.end_lineno,
        "end_col_offset": where.end_col_offset,
    }
    args = [ast.Constant(a, **pos) if type(a) is str else a for a in args]
    return ast.Call(ast.Name(name, _LOAD, **pos), args, [], **pos)


#: Nodes with nothing inside to check (contexts and operators).
LEAVES = node_types(
    """
    Load Store Del And Or Add Sub Mult MatMult Div Mod Pow LShift RShift BitOr BitXor
    BitAnd FloorDiv Invert Not UAdd USub Eq NotEq Lt LtE Gt GtE Is IsNot In NotIn
    """
)
