"""What a page shows, decided once for every text renderer.

Which steps are drawn, which tensors get a row and which columns a table has,
which failures still need saying under a step, what the closing summary
counts, and how variants are laid side by side: these are choices about
content, not about drawing. They are made here, as plain data, and the
console and Markdown renderers draw the same decisions each in their own way,
so the two outputs can never disagree on what a step contains.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

from ..trace import Step, TensorState, Trace
from .compare import group_traces, step_indexes, steps_by_index
from .facts import (
    VALUE_FIELDS,
    all_steps,
    changed_fields,
    is_contiguous,
    shown_names,
    storage_groups,
    tensors_by_name,
)
from .text import declared_raise_met, format_dtype, plural


# Past this many rows, the console's table keeps the rows that changed and names the
# others in one line (``--all-rows`` keeps them all), as a line-by-line tracer shows
# only what changed: forty unchanged rows a step hide the one that did.
QUIET_ROWS = 12


class Row(NamedTuple):
    """One tensor in a step's table: its state, the facts that changed, and whether it is new."""

    state: TensorState
    changed: FrozenSet[str]
    new: bool


def step_wanted(step: Step, steps: Optional[FrozenSet[int]]) -> bool:
    """Whether a step is drawn; ``steps`` is what was asked for (None: all).

    Setup is drawn only when it has something to say (output, warnings, a
    failure), and a failed setup is drawn even when other steps were asked for.
    """
    if step.index == 0:
        failed = step.error is not None or not step.behaved
        worth = failed or bool(step.stdout) or bool(step.warnings)
        return worth and (steps is None or 0 in steps or failed)
    return steps is None or step.index in steps


def any_step_wanted(steps: Sequence[Optional[Step]], wanted: Optional[FrozenSet[int]]) -> bool:
    """Whether a step drawn across variants is drawn: when any variant's is."""
    return any(s is not None and step_wanted(s, wanted) for s in steps)


def table_rows(prev: Optional[Step], step: Step, options) -> Tuple[Tuple[str, ...], List[Row]]:
    """The names shown at ``step`` and the rows of its table (``options``: a RenderOptions).

    Without values, a change of values is not a change the reader could see,
    so it does not count; with ``changes_only``, unchanged rows are left out.
    """
    names = shown_names(step, options.show)
    before = tensors_by_name(prev)
    now = tensors_by_name(step)
    rows = []
    for name in names:
        changed = changed_fields(before.get(name), now[name])
        if not options.values:
            changed -= VALUE_FIELDS
        if options.changes_only and not changed:
            continue
        rows.append(Row(now[name], changed, name not in before))
    return names, rows


def quiet_rows(rows: Sequence[Row], options, *, first: bool = False) -> Tuple[List[Row], List[str]]:
    """The rows a console table draws, and the names of those it sums up as unchanged.

    Past ``QUIET_ROWS`` rows (unless ``options.all_rows``), a row is drawn only
    when something in it changed or its name is new; the rest are named. The
    ``first`` table drawn keeps every row: the reader has seen none of them yet.
    """
    if first or options.all_rows or len(rows) <= QUIET_ROWS:
        return list(rows), []
    drawn = [row for row in rows if row.changed or row.new]
    return drawn, [row.state.name for row in rows if not (row.changed or row.new)]


def unchanged_table(rows: Sequence[Row], options, *, first: bool = False) -> bool:
    """Whether a step's table is said in one line: no row of it changed and none is new.

    Not the ``first`` table drawn (the reader has seen none of its rows yet), nor with
    ``--all-rows`` or ``--changes-only`` (which says so its own way)."""
    if first or options.all_rows or options.changes_only or not rows:
        return False
    return not any(row.changed or row.new for row in rows)


def parameter_rows(rows: Sequence[Row], options, *, many: bool) -> Tuple[List[Row], List[Row]]:
    """The rows drawn as the compact table of a model's parameters, and the others.

    Only for a table of ``many`` rows (past ``QUIET_ROWS``: a model, not a lesson's
    ``nn.Linear``), and not with ``--values full``: a parameter is then one line, its
    name, shape, version, requires_grad and the norm of its grad, where its own row
    would be a block of statistics nobody reads at the first glance.
    """
    if not many or options.full_values or not options.values:
        return [], list(rows)
    params = [row for row in rows if row.state.kind in MODULE_KINDS]
    if len(params) < 2:
        return [], list(rows)
    return params, [row for row in rows if row.state.kind not in MODULE_KINDS]


MODULE_KINDS = frozenset({"parameter", "buffer"})  # what a module holds
# The columns of a model's parameters, as every renderer heads them.
PARAMETER_COLUMNS = ("parameter", "shape", "version", "requires_grad", "grad norm")


def alias_groups(rows: Sequence[Row]) -> Tuple[List[Row], List[Tuple[str, str, int]]]:
    """The rows that are not another name of a tensor already shown, and those others said as
    (their prefix, the prefix of the names they are, how many): ``block.ln_1.weight`` bound
    to the very object ``model.h.0.ln_1.weight`` is (``block``, ``model.h.0``, 1).

    A loop over a model's blocks (``for block in model.h``) names every tensor of the block
    twice; one line says so in place of a row per name."""
    kept: List[Row] = []
    groups: Dict[Tuple[str, str], int] = {}
    for row in rows:
        other = row.state.same_as
        prefixes = _common_tail(row.state.name, other) if other is not None else None
        if prefixes is None:
            kept.append(row)
            continue
        groups[prefixes] = groups.get(prefixes, 0) + 1
    if not groups:
        return list(rows), []
    return kept, [(a, b, n) for (a, b), n in groups.items()]


def _common_tail(name: str, other: str) -> Optional[Tuple[str, str]]:
    """(``block``, ``model.h.0``) for ``block.ln.weight`` and ``model.h.0.ln.weight``: the two
    names' heads before the dotted tail they share; None when they share none."""
    a, b = name.split("."), other.split(".")
    n = 0
    while n < min(len(a), len(b)) - 1 and a[-1 - n] == b[-1 - n]:
        n += 1
    if not n:
        return None
    return ".".join(a[: len(a) - n]), ".".join(b[: len(b) - n])


def is_quiet(traces: Sequence[Trace], options) -> bool:
    """Whether some step drawn has more rows than ``QUIET_ROWS``, so a legend says the rule."""
    if options.all_rows or options.changes_only:
        return False
    return any(
        len(shown_names(step, options.show)) > QUIET_ROWS
        for trace in traces
        for step in all_steps(trace)
        if step_wanted(step, options.steps)
    )


def shown_states(traces: Sequence[Trace], options) -> List[TensorState]:
    """Every tensor state a table of these traces shows, over all the steps drawn.

    A record that several steps share (a tensor that did not change) is listed
    once: what is asked of these states holds or fails alike for each copy.
    """
    states: Dict[int, TensorState] = {}
    for trace in traces:
        for step in all_steps(trace):
            if step_wanted(step, options.steps):
                present = tensors_by_name(step)
                for name in shown_names(step, options.show):
                    state = present[name]
                    states.setdefault(id(state), state)
    return list(states.values())


def run_columns(traces: Sequence[Trace], options) -> List[str]:
    """The columns of every table of a run (or of variants drawn together), decided once.

    A column that came and went between steps would make the reader compare
    tables that do not line up, so the choice is made over every step drawn.
    """
    return table_columns(shown_states(traces, options), options.values)


def table_columns(states: Sequence[TensorState], values: bool) -> List[str]:
    """Columns in order; the optional ones only where they tell something about ``states``.

    Shape, dtype and device show when they differ (shape only without values,
    which show it). The stride shows when a view exists or some tensor is not
    contiguous: that is when the layout of memory is the point; contiguity
    shows when it differs between the tensors. ``retains_grad`` shows once a
    non-leaf was asked to keep its grad.
    """
    columns = ["name"]
    if values:
        columns.append("values")
    # Values show their shape (a summary says it in words); without values, say it here.
    if not values and len({s.shape for s in states}) > 1:
        columns.append("shape")
    # each dtype and each layout once: a run repeats them at every step
    if any(format_dtype(dtype) != "float32" for dtype in {s.dtype for s in states}):
        columns.append("dtype")
    if len({s.device for s in states}) > 1:
        columns.append("device")
    columns.append("storage")
    layouts = {(s.shape, s.stride): s for s in states}.values()
    scattered = any(is_contiguous(s) is False for s in layouts)
    if scattered or any(s.is_view for s in states):
        columns.append("stride")
    if scattered:
        columns.append("contiguous")
    columns += ["version", "requires_grad", "is_leaf"]
    if any(s.retains_grad and not s.is_leaf for s in states):
        columns.append("retains_grad")
    columns.append("grad_fn")
    if values:
        columns.append("grad")
    return columns


def legend_marks(traces: Sequence[Trace], options) -> FrozenSet[str]:
    """The marks a legend must explain beyond the usual ones: ``offset`` and ``dash``.

    ``offset``: some storage label carries an offset (``S1+2``); ``dash``: some
    fact is shown as ``—`` (not recorded, or a name a variant never bound);
    ``refused``: some fact is shown as ``?`` (PyTorch refused to give it); ``temporaries``:
    the labels shown skip numbers, which went to storages no table shows.
    """
    states = shown_states(traces, options)
    marks = set()
    if any(s.storage is not None and (s.is_view or s.storage_offset) for s in states):
        marks.add("offset")
    columns = table_columns(states, options.values)  # run_columns, from the states at hand
    dashes = (
        s.storage is None
        or s.version is None
        or s.requires_grad is None
        or s.is_leaf is None
        or ("contiguous" in columns and is_contiguous(s) is None)
        or ("retains_grad" in columns and s.retains_grad is None)
        for s in states
    )
    if any(dashes) or _unbound_in_some_variant(traces, options):
        marks.add("dash")
    if any(s.unavailable for s in states):
        marks.add("refused")
    if _labels_skip(states):
        marks.add("temporaries")
    if is_quiet(traces, options):
        marks.add("quiet")
    return frozenset(marks)


def _labels_skip(states: Sequence[TensorState]) -> bool:
    """Whether the storage labels the tables show skip numbers (S3, then S6): the labels
    between went to storages no table shows, an unnamed temporary's."""
    numbers = set()
    for s in states:
        label = s.storage
        if label is not None and label[1:].isdecimal():
            numbers.add(int(label[1:]))
    return bool(numbers) and max(numbers) > len(numbers)


def _unbound_in_some_variant(traces: Sequence[Trace], options) -> bool:
    """Variants drawn together where a name is bound in one at a step and not in another."""
    for group in group_traces(traces):
        if len(group) < 2:
            continue
        per_trace = [steps_by_index(t) for t in group]
        for index in step_indexes(group):
            steps = [s.get(index) for s in per_trace]
            if not any_step_wanted(steps, options.steps):
                continue
            names = [set(shown_names(s, options.show)) if s is not None else set() for s in steps]
            if any(n != names[0] for n in names):
                return True
    return False


def shared_storages(step: Step, names: Sequence[str]) -> List[Tuple[str, Tuple[str, ...]]]:
    """Storages held by more than one name, where at least one of them is shown."""
    return [
        (label, group)
        for label, group in storage_groups(step).items()
        if len(group) > 1 and any(n in names for n in group)
    ]


def unshown_failures(step: Step) -> List[str]:
    """Failures not already said by the step's outcome.

    For example a failed expectation, or a timeout's message.
    """
    failed_exprs = [r.expr for r in step.expectations if not r.passed]
    said = step.error.message if step.error is not None and step.status != "raised" else None
    return [f for f in step.failures if f != said and not any(expr in f for expr in failed_exprs)]


def summary_parts(trace: Trace) -> List[str]:
    """The closing line's counts: steps, what raised, expectations.

    The verdict is added by the renderer.
    """
    steps = trace.steps
    raised = [s for s in steps if s.error is not None]
    declared = [s for s in raised if declared_raise_met(s)]
    results = [
        r for s in ((trace.setup,) if trace.setup else ()) + tuple(steps) for r in s.expectations
    ]
    passed = sum(1 for r in results if r.passed)
    parts = [plural(len(steps), "step")]
    if raised:
        words = f"{len(raised)} raised"
        if declared:
            words += f" ({len(declared)} as declared)"
        parts.append(words)
    if results:
        parts.append(f"expectations: {passed} passed, {len(results) - passed} failed")
    return parts


def has_tensor_tables(traces: Sequence[Trace]) -> bool:
    """Whether any step recorded tensors, so that a legend has something to explain."""
    return any(step.tensors for trace in traces for step in trace.steps)


# --- variants side by side -------------------------------------------------------------


def variant_codes(steps: Sequence[Optional[Step]]) -> Tuple[Optional[str], List[Optional[str]]]:
    """The code every variant ran at this step, or each one's.

    As ``(code, [])`` when they agree, else ``(None, codes)``.
    """
    codes = [s.code if s is not None else None for s in steps]
    distinct = {c for c in codes if c is not None}
    if len(distinct) == 1:
        return distinct.pop(), []
    return None, codes


def variant_notes(steps: Sequence[Optional[Step]], names: Sequence[str]) -> List[Tuple[str, str]]:
    """Notes as (variant label, note): a note every variant shares is said once, unlabelled."""
    notes = [s.note for s in steps if s is not None and s.note]
    if notes and len(set(notes)) == 1:
        return [("", notes[0])]
    return [(name, step.note) for name, step in zip(names, steps) if step is not None and step.note]


def variant_row_names(steps: Sequence[Optional[Step]], show: Optional[Sequence[str]]) -> List[str]:
    """Every name shown in any variant at this step, in order of first appearance."""
    order: Dict[str, None] = {}
    for step in steps:
        if step is not None:
            for name in shown_names(step, show):
                order.setdefault(name, None)
    return list(order)


__all__ = [
    "Row",
    "any_step_wanted",
    "has_tensor_tables",
    "is_quiet",
    "legend_marks",
    "MODULE_KINDS",
    "PARAMETER_COLUMNS",
    "alias_groups",
    "parameter_rows",
    "quiet_rows",
    "unchanged_table",
    "run_columns",
    "shared_storages",
    "step_wanted",
    "summary_parts",
    "table_columns",
    "shown_states",
    "table_rows",
    "unshown_failures",
    "variant_codes",
    "variant_notes",
    "variant_row_names",
]


def new_predictions(prev: Optional[Step], step: Step) -> List[str]:
    """The predictions to say after ``step``: those not already said after the step before."""
    said = (
        {
            (p.kind, p.tensor, p.node, p.saved, p.saved_version, p.changed_at_step)
            for p in prev.predictions
        }
        if prev
        else set()
    )
    return [
        p.message
        for p in step.predictions
        if (p.kind, p.tensor, p.node, p.saved, p.saved_version, p.changed_at_step) not in said
    ]
