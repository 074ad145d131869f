"""Facts derived from snapshots: what changed, what shares memory, why it changed.

The trace stores what was observed after each step and nothing twice; these
pure functions read two consecutive snapshots and say what a reader wants to
know about them ("a's values changed in this step", "b shares S1 with a").
Every renderer uses them, so the console, Markdown and the variant summary
agree on what counts as a change.
"""

from __future__ import annotations

import keyword
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import msgspec

from ..trace import Step, TensorState, Trace, evolve
from .structs import record
from ..trace.names import covers, expand

# The facts a table shows, in column order, and what changed_fields reports.
FIELDS: Tuple[str, ...] = (
    "values",
    "shape",
    "dtype",
    "device",
    "storage",
    "stride",
    "contiguous",
    "version",
    "requires_grad",
    "is_leaf",
    "retains_grad",
    "grad_fn",
    "grad",
)

# The facts that ``values=False`` leaves out.
VALUE_FIELDS = frozenset({"values", "grad"})

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# The fields of a tensor's record that hold floats; the rest compare exactly with ``==``.
FLOAT_FIELDS = ("grad", "values")
_written = msgspec.json.Encoder().encode  # values hold only JSON's own types


def same(a: object, b: object) -> bool:
    """Equal, a zero's sign included: ``-0.0 == 0.0`` in Python, but the two show apart.

    ``==`` first, in C; then, for what holds floats (values, a tensor's record),
    their JSON, which writes the sign.
    """
    if a is b:
        return True
    if a != b:
        return False
    try:
        if type(a) is TensorState:
            return (a.values is b.values or _written(a.values) == _written(b.values)) and (
                a.grad is b.grad or _written(a.grad) == _written(b.grad)
            )
        return not isinstance(a, (msgspec.Struct, float)) or _written(a) == _written(b)
    except (TypeError, ValueError, msgspec.EncodeError):  # what JSON cannot hold: not the same
        return False


def fact(state: TensorState, field: str) -> object:
    """The comparable value of one fact; ``storage`` is the label with the offset."""
    if field == "storage":
        return (state.storage, state.storage_offset)
    if field == "contiguous":
        return is_contiguous(state)
    return getattr(state, field)


def is_contiguous(state: TensorState) -> Optional[bool]:
    """Whether the elements lie in row-major order with no gaps, as ``is_contiguous()`` says.

    Derived from shape and stride, the way PyTorch decides it: dimensions of
    size 1 may have any stride, and a tensor without elements is contiguous.
    None when the stride does not describe the shape (a sparse tensor has none).
    """
    if len(state.stride) != len(state.shape):
        return None
    if any(size == 0 for size in state.shape):
        return True
    expected = 1
    for size, stride in zip(reversed(state.shape), reversed(state.stride)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def changed_fields(prev: Optional[TensorState], cur: TensorState) -> frozenset:
    """The facts of ``cur`` that differ from ``prev`` (every fact when ``prev`` is None)."""
    if prev is None:
        return frozenset(FIELDS)
    if same(prev, cur):  # the same record, or an equal one read back: no change
        return frozenset()
    changed = {f for f in FIELDS if fact(prev, f) != fact(cur, f)}
    changed.update(f for f in FLOAT_FIELDS if not same(getattr(prev, f), getattr(cur, f)))
    return frozenset(changed)


def tensors_by_name(step: Optional[Step]) -> Dict[str, TensorState]:
    if step is None:
        return {}
    return {t.name: t for t in step.tensors}


def storage_groups(step: Step) -> Dict[str, Tuple[str, ...]]:
    """Each storage label of the step and the names living on it, in table order."""
    groups: Dict[str, list] = {}
    for state in step.tensors:
        if state.storage is not None:
            groups.setdefault(state.storage, []).append(state.name)
    return {label: tuple(names) for label, names in groups.items()}


def sharing_partners(step: Step, name: str) -> Tuple[str, ...]:
    """The other names on the same storage as ``name`` in this step."""
    state = tensors_by_name(step).get(name)
    if state is None or state.storage is None:
        return ()
    return tuple(n for n in storage_groups(step)[state.storage] if n != name)


def root_name(name: str) -> str:
    """The Python name a shown name hangs from: ``lin.weight`` -> ``lin``, ``xs[0]`` -> ``xs``."""
    match = _IDENTIFIER.match(name)
    return match.group(0) if match else name


def mentioned_names(code: str) -> frozenset:
    """Identifiers that appear in the code (a plain scan: good enough to tell who was named)."""
    return frozenset(w for w in _IDENTIFIER.findall(code) if not keyword.iskeyword(w))


@record
class AliasNote:
    """``name`` changed although the step never named it: it shares ``storage`` with ``via``."""

    name: str
    fields: Tuple[str, ...]  # "values" and/or "version"
    storage: str
    via: Tuple[str, ...]  # the first NOTE_NAMES of them; ``more`` counts the rest
    same_object: Optional[str] = None  # a name in ``via`` bound to this very object
    # the recorded calls that wrote it, when the code names none of ``via``
    by: Tuple[str, ...] = ()
    more: int = 0  # names on the same storage beyond those in ``via``

    def describe(self) -> str:
        what = " and ".join(self.fields)
        if self.same_object is not None:
            return f"{self.name} changed ({what}): {self.same_object} is the same object"
        written = f" (written by {', '.join(self.by)})" if self.by else ""
        more = f" and {self.more} more" if self.more else ""
        return (
            f"{self.name} changed ({what}): "
            f"it shares {self.storage} with {', '.join(self.via)}{more}{written}"
        )


#: How many names a note lists; the rest are counted. Each note then costs the same
#: however many tensors share the storage, and a step's notes cost in proportion to them.
NOTE_NAMES = 8


def aliasing_notes(prev_step: Optional[Step], step: Step) -> Tuple[AliasNote, ...]:
    """Changes that reached a tensor through memory it shares with a tensor the code names.

    A tensor counts when its values or version changed in this step, the step's
    code does not mention it (or, where the op log shows who wrote its storage,
    writes it through other names only: ``v = b[:2]; v.mul_(2)`` mentions ``b``
    to take the view), and some other tensor on the same storage is mentioned.
    A name that is new in this step is never a note.

    What every note of a storage shares (the names the code mentions on it, the
    one of them bound to each object, the calls that wrote it) is found once per
    storage, so that a step costs in proportion to its tensors and operations.
    """
    before = tensors_by_name(prev_step)
    mentioned = mentioned_names(step.code)
    storages: Optional[Dict[str, "_OnStorage"]] = None  # made for the first candidate
    writers: Optional[Dict[str, set]] = None  # storage -> the names the writes went through
    notes = []
    for state in step.tensors:
        old = before.get(state.name)
        if old is None or state.storage is None or same(old, state):
            continue
        if root_name(state.name) in mentioned:
            if writers is None:
                writers = _written_through(step)
            through = writers.get(state.storage)
            if not through or state.name in through:
                continue
        fields = tuple(f for f in ("values", "version") if not same(fact(old, f), fact(state, f)))
        if not fields:
            continue
        if storages is None:
            storages = _storages(step, mentioned)
        found = storages[state.storage]
        via, more = _listed(found.via, state.name)
        if via:
            alias = found.objects.get(state.same_as or state.name)
            if alias == state.name:  # mentioned itself, written through another name
                alias = None
            notes.append(AliasNote(state.name, fields, state.storage, via, alias, more=more))
            continue
        names, by = found.written(state.name)
        if names:
            via, more = _listed(names, state.name)
            notes.append(AliasNote(state.name, fields, state.storage, via, None, by, more=more))
    return tuple(notes)


def _written_through(step: Step) -> Dict[str, set]:
    """Per storage the step's operations wrote, the names of the tensors they were called on
    (calls, or ATen operations outside any recorded call)."""
    found: Dict[str, set] = {}
    for op in step.ops:
        if op.writes and (op.level == "call" or op.parent is None):
            names = {n for n in op.tensors.in_ if n is not None}
            for label in op.writes:
                found.setdefault(label, set()).update(names)
    return found


def _listed(names: Sequence[str], own: str) -> Tuple[Tuple[str, ...], int]:
    """The first ``NOTE_NAMES`` of ``names`` but ``own``, and how many more there are."""
    listed: List[str] = []
    for name in names:
        if name != own:
            if len(listed) == NOTE_NAMES:
                return tuple(listed), len(names) - NOTE_NAMES - (own in names)
            listed.append(name)
    return tuple(listed), 0


class _OnStorage:
    """What the notes of one storage share, found once."""

    __slots__ = ("group", "via", "objects", "step", "label", "_written")

    def __init__(self, step: Step, label: str) -> None:
        self.step, self.label = step, label
        self.group: List[str] = []  # its names, in table order
        self.via: List[str] = []  # those the code mentions
        self.objects: Dict[str, str] = {}  # object (its first name) -> first mentioned name
        self._written: Any = False  # not looked for yet

    def written(self, name: str) -> Tuple[List[str], Tuple[str, ...]]:
        """The named tensors on it but ``name`` that a recorded call wrote, and those calls.

        That is a write made inside a call the code made (``opt.step()`` writes
        ``lin.weight``), which the code never names. The calls are found once.
        """
        if self._written is False:
            self._written = _writes(self.step, self.label, frozenset(self.group))
        via: Dict[str, None] = {}
        by: Dict[str, None] = {}
        for call, names in self._written:
            others = [n for n in names if n != name]
            if others:
                via.update(dict.fromkeys(others))
                by[call] = None
        return list(via), tuple(by)


def _storages(step: Step, mentioned: frozenset) -> Dict[str, _OnStorage]:
    found: Dict[str, _OnStorage] = {}
    for state in step.tensors:
        if state.storage is None:
            continue
        group = found.get(state.storage)
        if group is None:
            group = found[state.storage] = _OnStorage(step, state.storage)
        group.group.append(state.name)
        if root_name(state.name) in mentioned:
            group.via.append(state.name)
            group.objects.setdefault(state.same_as or state.name, state.name)
    return found


def _writes(step: Step, storage: str, group: frozenset) -> List[Tuple[str, Tuple[str, ...]]]:
    """Each recorded call of the step that wrote ``storage``, with its named tensors on it."""
    found = []
    for op in step.ops:
        if op.level != "call" or storage not in op.writes:
            continue
        names = tuple(n for n in op.tensors.in_ if n is not None and n in group)
        if names:
            call = op.name[len("torch.") :] if op.name.startswith("torch.") else op.name
            found.append((call, names))
    return found


def all_steps(trace: Trace) -> Tuple[Step, ...]:
    """Setup (when recorded) and the steps, in the order they ran."""
    return ((trace.setup,) if trace.setup is not None else ()) + tuple(trace.steps)


def with_previous(trace: Trace) -> Iterator[Tuple[Optional[Step], Step]]:
    """Each step with the one that ran before it (setup precedes step 1)."""
    prev: Optional[Step] = None
    for step in all_steps(trace):
        yield prev, step
        prev = step


def shown_names(step: Step, override: Optional[Sequence[str]] = None) -> Tuple[str, ...]:
    """Names a table shows: the command line's, else the step's, else every tensor.

    The command line's names stand for what they cover, as the scenario's
    ``show`` does (``lin`` for ``lin.weight`` and ``lin.bias``). Names that
    are not bound at this step are left out; order is the one asked for.
    """
    present = tensors_by_name(step)
    if override:
        return expand(tuple(override), present)
    wanted = tuple(step.shown) if step.shown is not None else tuple(present)
    seen = set()
    names = []
    for name in wanted:
        if name in present and name not in seen:
            seen.add(name)
            names.append(name)
    return tuple(names)


def unmatched_names(trace: Trace, wanted: Sequence[str]) -> Tuple[str, ...]:
    """The names in ``wanted`` that stand for no tensor at any step of the trace."""
    recorded = {state.name for step in all_steps(trace) for state in step.tensors}
    return tuple(w for w in dict.fromkeys(wanted) if not any(covers(w, name) for name in recorded))


def with_show_notices(trace: Trace, wanted: Sequence[str], where: str = "--show") -> Trace:
    """The trace with a notice for each name in ``wanted`` that no step ever bound.

    Worded as the tracer words it for the scenario's own ``show``, so a name
    given on the command line is reported the same way, in every format.
    """
    notes = tuple(
        f"{name!r} in {where} is never bound in this scenario"
        for name in unmatched_names(trace, wanted)
    )
    return evolve(trace, notices=trace.notices + notes) if notes else trace


__all__ = [
    "FIELDS",
    "VALUE_FIELDS",
    "AliasNote",
    "aliasing_notes",
    "all_steps",
    "changed_fields",
    "fact",
    "is_contiguous",
    "mentioned_names",
    "root_name",
    "sharing_partners",
    "shown_names",
    "storage_groups",
    "tensors_by_name",
    "unmatched_names",
    "with_show_notices",
    "with_previous",
]
