"""Variants of one scenario, compared: which facts differ, said in a few words.

Traces with the same title and source and a ``variant`` name are variants of
one scenario, rendered side by side. Storage labels are numbered per run, so
two variants are compared on *who shares memory with whom*, never on the
label itself.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ..trace import ExpectationResult, Step, TensorState, Trace
from .facts import FIELDS, all_steps, fact, storage_groups, tensors_by_name
from .text import fact_text, format_values, one_line, outcome, storage_names


def group_traces(traces: Sequence[Trace]) -> List[List[Trace]]:
    """Traces grouped by scenario, in order of first appearance; variants share a group."""
    groups: List[List[Trace]] = []
    by_key: Dict[tuple, List[Trace]] = {}
    for trace in traces:
        if trace.scenario.variant is None:
            groups.append([trace])
            continue
        key = (trace.scenario.title, trace.scenario.source)
        if key in by_key:
            by_key[key].append(trace)
        else:
            by_key[key] = [trace]
            groups.append(by_key[key])
    return groups


def variant_name(trace: Trace, position: int) -> str:
    return trace.scenario.variant or f"#{position + 1}"


def steps_by_index(trace: Trace) -> Dict[int, Step]:
    return {step.index: step for step in all_steps(trace)}


def step_indexes(traces: Sequence[Trace]) -> List[int]:
    """Every step index any of the traces recorded, in order."""
    seen = set()
    for trace in traces:
        seen.update(step.index for step in all_steps(trace))
    return sorted(seen, key=_index_order)


def _index_order(index: object) -> tuple:
    """Numbers in order, then anything else a record may hold there, by spelling; no TypeError."""
    if isinstance(index, (int, float)) and index == index:
        return (0, index, "")
    return (1, 0, repr(index))


def comparable_fact(step: Optional[Step], state: Optional[TensorState], field: str) -> object:
    """A fact as compared across variants: storage means the set of names sharing it."""
    if step is None or state is None:
        return ("absent",)
    if field == "storage":
        if state.storage is None:
            return None
        partners = tuple(n for n in storage_groups(step)[state.storage] if n != state.name)
        return (partners, state.storage_offset)
    return fact(state, field)


def differing_fields(steps: Sequence[Optional[Step]], name: str) -> frozenset:
    """The facts of ``name`` that are not the same in every variant at this step."""
    states = [tensors_by_name(s).get(name) for s in steps]
    if any(st is None for st in states):
        return frozenset(FIELDS) if any(st is not None for st in states) else frozenset()
    pairs = list(zip(steps, states))
    return frozenset(
        f for f in FIELDS if len({_key(comparable_fact(s, st, f)) for s, st in pairs}) > 1
    )


def _key(value: object) -> str:
    return repr(value)


def describe_fact(step: Optional[Step], state: Optional[TensorState], field: str) -> str:
    """A fact in the words the variant summary uses: a table cell's spelling, on one short line.

    Storage is said as who shares it, since labels are numbered per run.
    """
    if step is None or state is None:
        return "absent"
    if field in ("values", "grad"):
        return one_line(format_values(getattr(state, field)), 40)
    if field == "storage":
        if state.storage is None:
            return "no storage"
        partners = [n for n in storage_names(step, state) if n != state.name]
        return ("shared with " + ", ".join(partners)) if partners else "its own storage"
    return fact_text(state, field)


def _spread(descriptions: Sequence[str], names: Sequence[str]) -> str:
    """``1 in detach, 0 in data``: variants with the same value are named together."""
    order: List[str] = []
    holders: Dict[str, List[str]] = {}
    for text, name in zip(descriptions, names):
        if text not in holders:
            holders[text] = []
            order.append(text)
        holders[text].append(name)
    return ", ".join(f"{text} in {', '.join(holders[text])}" for text in order)


def _everywhere(count: int) -> str:
    return "in both" if count == 2 else "in all"


def variant_differences(traces: Sequence[Trace]) -> Tuple[str, ...]:
    """What differs between the variants, step by step, each difference said once.

    A difference that persists over several steps is reported where it first
    appears (or where it changes), not again at every later step.
    """
    names = [variant_name(t, i) for i, t in enumerate(traces)]
    per_trace = [steps_by_index(t) for t in traces]
    lines: List[str] = []
    last: Dict[str, tuple] = {}
    for index in step_indexes(traces):
        steps = [s.get(index) for s in per_trace]
        where = "setup" if index == 0 else f"step {index}"
        outcomes = [outcome(s) for s in steps]
        if len(set(outcomes)) > 1:
            lines.append(f"{where}: {_spread(outcomes, names)}")
        lines.extend(_expectation_differences(where, steps, names))
        for name in _names(steps):
            fields = differing_fields(steps, name)
            states = [tensors_by_name(s).get(name) for s in steps]
            signature = tuple(
                (f, tuple(describe_fact(s, st, f) for s, st in zip(steps, states)))
                for f in FIELDS
                if f in fields
            ) + ((("bound", _bindings(steps, states, name)),) if fields else ())
            if signature == last.get(name, ()):
                continue
            last[name] = signature
            if not fields:
                continue
            words = _tensor_words(steps, states, fields, names, name)
            lines.append(f"{where}, {name}: " + "; ".join(words))
    return tuple(lines)


def _names(steps: Sequence[Optional[Step]]) -> List[str]:
    seen: Dict[str, None] = {}
    for step in steps:
        for state in step.tensors if step is not None else ():
            seen.setdefault(state.name, None)
    return list(seen)


def _bindings(steps: Sequence[Optional[Step]], states, name: str) -> Tuple[str, ...]:
    """What ``name`` is bound to in each variant: ``a tensor``, ``None`` or ``not bound``."""
    return tuple(
        "a tensor"
        if st is not None
        else ("None" if s is not None and name in s.none else "not bound")
        for s, st in zip(steps, states)
    )


def _tensor_words(steps, states, fields, names, name: str = "") -> List[str]:
    if any(st is None for st in states):
        bindings = _bindings(steps, states, name)
        if "None" in bindings:  # bound to None is not unbound: say which
            return [_spread(bindings, names)]
        present = [n for n, st in zip(names, states) if st is not None]
        absent = [n for n, st in zip(names, states) if st is None]
        return [f"bound in {', '.join(present)}, not in {', '.join(absent)}"]
    words = []
    if "storage" not in fields:
        shared = describe_fact(steps[0], states[0], "storage")
        if shared.startswith("shared"):
            words.append(f"storage {shared} {_everywhere(len(states))}")
    for field in FIELDS:
        if field in fields:
            described = [describe_fact(s, st, field) for s, st in zip(steps, states)]
            label = "storage" if field == "storage" else field
            words.append(f"{label} {_spread(described, names)}")
    return words


def _expectation_differences(where: str, steps, names) -> List[str]:
    results: Dict[str, List[Optional[bool]]] = {}
    for position, step in enumerate(steps):
        for result in step.expectations if step is not None else ():
            results.setdefault(result.expr, [None] * len(steps))[position] = result.passed
    lines = []
    for expr, passed in results.items():
        if None in passed or len(set(passed)) < 2:
            continue
        words = ["holds" if p else "fails" for p in passed]
        lines.append(f"{where}: `{expr}` {_spread(words, names)}")
    return lines


def merged_expectations(
    steps: Sequence[Optional[Step]], names: Sequence[str]
) -> List[Tuple[str, ExpectationResult]]:
    """Expectations as (variant label, result); one that held in every variant is said once.

    The label is empty for those said once; the others follow, variant by variant.
    """
    present = [(n, s) for n, s in zip(names, steps) if s is not None]
    common: List[Tuple[str, ExpectationResult]] = []
    shared_exprs = set()
    if len(present) > 1:
        for result in present[0][1].expectations:
            if result.expr in shared_exprs:
                continue
            if all(
                any(r.expr == result.expr and r.passed for r in s.expectations) for _, s in present
            ):
                shared_exprs.add(result.expr)
                common.append(("", result))
    rest = [
        (name, r) for name, step in present for r in step.expectations if r.expr not in shared_exprs
    ]
    return common + rest
