"""A loop at a glance: which passes a step's loop shows in full, and what the rest say.

A step whose code holds a loop records where each pass began (``Step.loop``:
indexes into its operations, backward calls and warnings, and the one-element
tensors of the scenario, such as a loss). ``loop_parts`` cuts the step's record
into what every renderer draws, in order:

- what ran before the loop;
- the first pass, in full;
- each later pass that differs in kind from every pass shown before it: it
  made a kind of call none of them made (a ``requires_grad_``, a
  ``.grad = ...``), its gradient flowed through another graph, it warned, or
  it raised; shown in full, with the reason;
- between those, the passes that did not differ, folded into one line: how
  many, whether they made the same operations, how the scalars moved
  (``loss 1.39 → 0.82``) and which named tensors they wrote;
- what ran after the loop.

``iterations="all"`` (``--iterations all``) shows every pass in full. Nothing
here is stored: the JSON keeps every operation, flow and mark, and folding is
a way of drawing them. What a folded pass costs a renderer is reading its
operations' names, not drawing them.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from ..trace import Loop, LoopPass, Step
from .ops import call_label, flow_lines, flow_shape, is_metadata_read, repeated_flows
from .text import format_number, plural

MAX_SCALARS_SAID = 3  # scalars a folded line follows
MAX_WRITTEN_SAID = 4  # tensors a folded line names as written


class Part(NamedTuple):
    """One piece of a loop step as drawn: a run of its operations and flows, or a fold.

    ``kind``: ``before`` / ``after`` the loop, ``pass`` (one pass in full: ``first``,
    with ``why`` it is shown when it is not the first) or ``folded`` (``first`` to
    ``last``, said in ``summary``). ``ops`` and ``flows`` are ``start:stop`` slices of
    the step's lists; ``repeats`` maps a flow's index to how many passes had that tree, and
    ``again`` a flow whose tree an earlier pass drew to that pass.
    """

    kind: str
    ops: Tuple[int, int] = (0, 0)
    flows: Tuple[int, int] = (0, 0)
    first: int = 0
    last: int = 0
    why: str = ""
    summary: str = ""
    repeats: Dict[int, int] = {}
    again: Dict[int, int] = {}  # a flow's index -> the pass that first drew its tree


def loop_title(step: Step) -> str:
    """What a step's title says of its loop: `` · 20 iterations`` (empty without one)."""
    loop = step.loop
    if loop is None or not loop.passes:
        return ""
    return f" · {plural(loop.passes, 'iteration')}"


def _span(marks: Sequence[LoopPass], i: int, end: Optional[LoopPass], step: Step) -> Tuple:
    """(ops, flows, warnings) slices of pass ``i`` (from 0)."""
    start = marks[i]
    stop = marks[i + 1] if i + 1 < len(marks) else end
    n_ops, n_flows, n_warn = len(step.ops), len(step.flow), len(step.warnings)

    def cut(a: int, b: Optional[int], n: int) -> Tuple[int, int]:
        a = min(max(a, 0), n)
        b = n if b is None else min(max(b, a), n)
        return a, b

    return (
        cut(start.op, stop.op if stop else None, n_ops),
        cut(start.flow, stop.flow if stop else None, n_flows),
        cut(start.warning, stop.warning if stop else None, n_warn),
    )


def _kinds(step: Step, ops: Tuple[int, int]) -> Tuple[Tuple[str, str], ...]:
    """The calls a pass made, in order, each as (name, the expression it ran under)."""
    sites = step.sites
    out = []
    for op in step.ops[ops[0] : ops[1]]:
        if op.level != "call" or is_metadata_read(op):
            continue
        if not (op.tensors.in_ or op.tensors.out or op.writes):
            continue
        site = op.site if op.site is not None and 0 <= op.site < len(sites) else None
        out.append((call_label(op.name), sites[site].text if site is not None else ""))
    return tuple(out)


def loop_parts(step: Step, iterations: str = "first") -> Optional[List[Part]]:
    """The step cut as a loop is drawn, or None when it has no marked loop."""
    loop = step.loop
    if loop is None or not loop.marks:
        return None
    marks = loop.marks
    parts: List[Part] = []
    first = marks[0]
    if first.op or first.flow:
        parts.append(Part("before", (0, min(first.op, len(step.ops))), (0, first.flow)))
    spans = [_span(marks, i, loop.end, step) for i in range(len(marks))]
    raised = step.error is not None and loop.end is None
    recorded_all = not step.ops_omitted
    seen: set = set()
    shapes: Dict[tuple, Tuple[int, int]] = {}  # a flow's shape -> its first flow and pass
    repeats: Dict[int, int] = {}
    reference: Tuple = ()
    fold: List[int] = []

    def close_fold() -> None:
        if fold:
            parts.append(_folded(step, loop, fold, spans, reference))
            fold.clear()

    for i, (ops, flows, warns) in enumerate(spans):
        kinds = _kinds(step, ops)
        shape = tuple(flow_shape(f) for f in step.flow[flows[0] : flows[1]])
        why = []
        if i and iterations != "all":
            new = [k for k in kinds if k not in seen]
            if new:
                why.append("calls " + ", ".join(dict.fromkeys(_said_kind(k) for k in new)))
            if any(s not in shapes for s in shape):
                why.append("another gradient flow")
            if warns[1] > warns[0]:
                why.append(plural(warns[1] - warns[0], "warning"))
            if raised and i == len(spans) - 1:
                why.append("it raised")
            if not ops[1] > ops[0] and not recorded_all:
                why.append("past the operations recorded")
        shown = i == 0 or bool(why) or iterations == "all"
        again: Dict[int, int] = {}
        for position, s in enumerate(shape):
            if s in shapes:
                at, number = shapes[s]
                repeats[at] = repeats.get(at, 1) + 1
                again[flows[0] + position] = number
            else:
                shapes[s] = (flows[0] + position, i + 1)
        if shown:
            close_fold()
            why_text = "; ".join(why)
            parts.append(Part("pass", ops, flows, i + 1, i + 1, why_text, "", repeats, again))
            reference = kinds
        else:
            fold.append(i)
        seen.update(kinds)
    close_fold()
    if loop.passes > len(marks):
        parts.append(
            Part(
                "folded",
                first=len(marks) + 1,
                last=loop.passes,
                summary="not marked (past the first "
                f"{plural(len(marks), 'iteration')} a step records)",
            )
        )
    if loop.end is not None:
        end = loop.end
        parts.append(
            Part("after", (min(end.op, len(step.ops)), len(step.ops)), (end.flow, len(step.flow)))
        )
    return parts


def _said_kind(kind: Tuple[str, str]) -> str:
    name, site = kind
    return site or name


def _folded(
    step: Step, loop: Loop, fold: List[int], spans: Sequence[Tuple], reference: Tuple
) -> Part:
    """The line that sums up passes ``fold`` (indexes from 0, one after the other)."""
    first, last = fold[0] + 1, fold[-1] + 1
    same = all(_kinds(step, spans[i][0]) == reference for i in fold)
    words = ["the same operations" if same else "the same kinds of operations"]
    moved = _scalars_moved(step, loop, first, last)
    if moved:
        words.append(moved)
    written = _written(step, spans[fold[0]][0][0], spans[fold[-1]][0][1])
    if written:
        words.append("wrote " + written)
    return Part(
        "folded",
        (spans[fold[0]][0][0], spans[fold[-1]][0][1]),
        (spans[fold[0]][1][0], spans[fold[-1]][1][1]),
        first,
        last,
        summary="; ".join(words),
    )


def _after(step: Step, loop: Loop, number: int) -> Dict[str, object]:
    """The scalars after pass ``number`` (from 1): as the next pass began, or at the end."""
    if number < len(loop.marks):
        return dict(loop.marks[number].scalars)
    if loop.end is not None and number == len(loop.marks):
        return dict(loop.end.scalars)
    if number == loop.passes and step.error is None:
        found = {}
        for state in step.tensors:
            values = state.values
            if values.kind == "exact" and not isinstance(values.data, (list, tuple)):
                found[state.name] = values.data
        return found
    return {}


def _scalars_moved(step: Step, loop: Loop, first: int, last: int) -> str:
    """``loss 1.39 → 0.82``: the scalars as the folded passes began (after pass ``first - 1``)
    and after pass ``last``, those that moved."""
    start, end = _after(step, loop, first - 1), _after(step, loop, last)
    words = []
    for name, value in start.items():
        if name in end and end[name] != value:
            words.append(f"{name} {format_number(value)} → {format_number(end[name])}")
            if len(words) >= MAX_SCALARS_SAID:
                break
    return ", ".join(words)


def _written(step: Step, start: int, stop: int) -> str:
    """The named tensors on the storages the operations ``start:stop`` wrote."""
    labels: Dict[str, None] = {}
    for op in step.ops[start:stop]:
        if op.level == "call":
            labels.update(dict.fromkeys(op.writes))
    names = [
        state.name for state in step.tensors if state.storage in labels and state.same_as is None
    ]
    if not names:
        return ""
    if len(names) <= MAX_WRITTEN_SAID:
        return ", ".join(names)
    shown = MAX_WRITTEN_SAID - 1
    return ", ".join(names[:shown]) + f" and {len(names) - shown} more"


def iteration_heading(part: Part, loop: Loop) -> str:
    """``iteration 1 of 20:``, ``iteration 7 of 20 (calls p.requires_grad_()):``."""
    head = f"iteration {part.first:,} of {loop.passes:,}"
    return head + (f" ({part.why})" if part.why else "") + ":"


def folded_line(part: Part) -> str:
    """``iterations 2–20: the same operations; loss 1.39 → 0.82; wrote w, b``."""
    which = (
        f"iteration {part.first:,}"
        if part.first == part.last
        else f"iterations {part.first:,}–{part.last:,}"
    )
    return f"{which}: {part.summary}"


def repeat_note(part: Part, index: int) -> str:
    """`` (the same tree in 20 iterations)`` after a flow's title when later passes repeat it."""
    count = part.repeats.get(index, 1)
    return f" (the same tree in {count:,} iterations)" if count > 1 else ""


def again_line(part: Part, index: int, call: str) -> Optional[str]:
    """``gradient flow of Tensor.backward: the same tree as in iteration 1`` for a flow whose
    tree an earlier pass drew; None for one to draw."""
    number = part.again.get(index)
    if number is None:
        return None
    return f"gradient flow of {call}: the same tree as in iteration {number:,}"


class DrawnFlow(NamedTuple):
    """One of a step's gradient flows as every renderer draws it: ``again``, the one line that
    stands for a tree drawn before in the loop (then ``head`` and ``tree`` are empty); else
    the tree's title, with what repeats it, and its rows."""

    again: Optional[str]
    head: str
    tree: List[str]


def drawn_flows(
    step: Step, start: int, stop: int, part: Optional[Part] = None
) -> Iterator[DrawnFlow]:
    """The step's flows ``start:stop``: a run of calls through the same tree drawn once
    (``repeated_flows``), or, within a loop's ``part``, a tree an earlier pass drew said in
    one line (``again_line``) and one later passes repeat noted (``repeat_note``)."""
    if part is None:
        drawn = repeated_flows(step.flow, start, stop)
    else:
        drawn = [(index, repeat_note(part, index)) for index in range(start, stop)]
    for index, repeated in drawn:
        flow = step.flow[index]
        again = again_line(part, index, call_label(flow.call)) if part is not None else None
        if again is not None:
            yield DrawnFlow(again, "", [])
            continue
        head, *tree = flow_lines(flow)
        yield DrawnFlow(None, head[:-1] + repeated + ":", tree)


# --- loops of line-by-line traces (snoop(), %%tensortrace) -------------------------------


class Fold(NamedTuple):
    """Passes of a loop in a trace whose steps are lines: ``steps`` (positions in the trace's
    steps) are not drawn; ``line`` says them in their stead, before the first of them."""

    steps: Tuple[int, ...]
    line: str


def _place(step: Step) -> Tuple[Optional[int], Optional[int]]:
    return step.cell, step.line


def _passes(
    steps: Sequence[Step], start: int, stop: int, after: Sequence[int]
) -> Optional[Tuple[List[range], int]]:
    """The passes of a loop whose header is the line of step ``start``, as ranges of step
    positions, and the position after the loop; None when that line does not come back.
    ``after[i]`` is the position of the next step on step ``i``'s line (or past the end).

    A line comes back as a loop's header: the steps between two of its runs are the body
    (lines after it); after its last run, the steps on the body's lines (a pass cut short
    by ``break`` or an error) are a last pass."""
    head = _place(steps[start])
    if head[1] is None:
        return None
    passes: List[range] = []
    at = start
    body_end = head[1]
    while after[at] < stop and all(
        steps[k].cell == head[0] and (steps[k].line or 0) > head[1]
        for k in range(at + 1, after[at])
    ):
        k = after[at]
        passes.append(range(at, k))
        body_end = max([body_end] + [steps[j].line or 0 for j in range(at + 1, k)])
        at = k
    if not passes:
        return None
    # after the last run of the header: a cut pass, then the loop's exit
    k = at + 1
    while k < stop and steps[k].cell == head[0] and head[1] < (steps[k].line or 0) <= body_end:
        k += 1
    if k > at + 1:
        passes.append(range(at, k))
        return passes, k
    return passes, at  # the header's last run, where the loop found no more passes: drawn


def _next_same(steps: Sequence[Step]) -> List[int]:
    """For each step, the position of the next step on the same line (``len(steps)``: none)."""
    found = [len(steps)] * len(steps)
    last: Dict[Tuple[Optional[int], Optional[int]], int] = {}
    for position in range(len(steps) - 1, -1, -1):
        place = _place(steps[position])
        found[position] = last.get(place, len(steps))
        last[place] = position
    return found


def line_folds(steps: Sequence[Step], iterations: str = "first") -> Dict[int, Fold]:
    """The folds of the loops in steps that are lines (``snoop()``), by the position of the
    first step each replaces; empty for ``iterations="all"`` and for a scenario's steps,
    whose lines never come back."""
    folds: Dict[int, Fold] = {}
    if iterations == "all" or len(steps) < 3:
        return folds
    _fold_range(steps, 0, len(steps), folds, _next_same(steps))
    return folds


def _fold_range(
    steps: Sequence[Step], start: int, stop: int, folds: Dict[int, Fold], after: Sequence[int]
) -> None:
    i = start
    while i < stop:
        found = _passes(steps, i, stop, after) if after[i] < stop else None
        if found is None:
            i += 1
            continue
        passes, beyond = found
        shown: List[range] = []
        seen: set = set()
        pending: List[range] = []
        for number, span in enumerate(passes, 1):
            why = _line_pass_differs(steps, span, seen) if number > 1 else ""
            kinds = _line_kinds(steps, span)
            if number == 1 or why:
                if pending:
                    _add_fold(steps, passes, pending, folds)
                    pending = []
                shown.append(span)
                _fold_range(steps, span.start + 1, span.stop, folds, after)  # loops inside it
            else:
                pending.append(span)
            seen.update(kinds)
        if pending:
            _add_fold(steps, passes, pending, folds)
        i = max(beyond, i + 1)


def _line_signature(steps: Sequence[Step], span: range) -> tuple:
    return tuple((steps[j].line, _kinds(steps[j], (0, len(steps[j].ops)))) for j in span)


def _line_kinds(steps: Sequence[Step], span: range) -> set:
    kinds = set()
    for j in span:
        step = steps[j]
        kinds.add(("line", step.line))
        kinds.update(_kinds(step, (0, len(step.ops))))
    return kinds


def _line_pass_differs(steps: Sequence[Step], span: range, seen: set) -> str:
    """Why a pass of lines is drawn although it is not the first (empty: it folds)."""
    for j in span:
        step = steps[j]
        prev = steps[j - 1] if j else None
        if step.error is not None or step.status != "ok":
            return "raised"
        if step.warnings:
            return "warned"
        if prev is not None and _new_predictions(prev, step):
            return "a prediction"
        before = {t.name: t for t in prev.tensors} if prev is not None else {}
        for state in step.tensors:
            old = before.get(state.name)
            if old is None:
                return "a new tensor"
            if old.requires_grad != state.requires_grad:
                return "requires_grad changed"
    if not _line_kinds(steps, span) <= seen:
        return "other operations"
    return ""


def _new_predictions(prev: Step, step: Step) -> bool:
    said = {(p.kind, p.tensor, p.node, p.saved) for p in prev.predictions}
    return any((p.kind, p.tensor, p.node, p.saved) not in said for p in step.predictions)


def _add_fold(
    steps: Sequence[Step], passes: Sequence[range], pending: List[range], folds: Dict[int, Fold]
) -> None:
    first = passes.index(pending[0]) + 1
    last = passes.index(pending[-1]) + 1
    positions = tuple(j for span in pending for j in span)
    which = f"iteration {first:,}" if first == last else f"iterations {first:,}–{last:,}"
    numbers = (steps[positions[0]].index, steps[positions[-1]].index)
    where = f"step {numbers[0]}" if numbers[0] == numbers[1] else f"steps {numbers[0]}–{numbers[1]}"
    reference = _line_signature(steps, passes[0])
    same = all(_line_signature(steps, span) == reference for span in pending)
    words = [f"{which} ({where}): the same {'operations' if same else 'kinds of operations'}"]
    before = steps[pending[0].start - 1] if pending[0].start else None
    moved = _steps_moved(before, steps[positions[-1]], positions, steps)
    if moved:
        words.append(moved)
    folds[positions[0]] = Fold(positions, "; ".join(words))


def _steps_moved(
    before: Optional[Step], end: Step, positions: Sequence[int], steps: Sequence[Step]
) -> str:
    """What the folded steps changed: scalars from → to, and the named tensors written."""
    start = {t.name: t for t in before.tensors} if before is not None else {}
    words = []
    changed: List[str] = []
    for state in end.tensors:
        old = start.get(state.name)
        if old is None or state.same_as is not None:
            continue
        if old.values != state.values or old.version != state.version:
            if _scalar(old) is not None and _scalar(state) is not None:
                if len(words) < MAX_SCALARS_SAID:
                    words.append(
                        f"{state.name} {format_number(_scalar(old))} → "
                        f"{format_number(_scalar(state))}"
                    )
            else:
                changed.append(state.name)
    if changed:
        shown = changed[:MAX_WRITTEN_SAID]
        more = len(changed) - len(shown)
        words.append("changed " + ", ".join(shown) + (f" and {more} more" if more else ""))
    return "; ".join(words)


def _scalar(state) -> object:
    values = state.values
    if values.kind == "exact" and not isinstance(values.data, (list, tuple)):
        return values.data
    return None


__all__ = [
    "Fold",
    "Part",
    "again_line",
    "folded_line",
    "iteration_heading",
    "line_folds",
    "loop_parts",
    "loop_title",
    "repeat_note",
]
