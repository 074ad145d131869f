"""The backwards predicted to fail, in words, from the versions noted after each step.

``scan.py`` finds the stale or freed saved tensor behind a named tensor; this
module keeps what it takes to say *which step* changed it: every tensor's
version as noted after each step, the steps that changed values without moving
a version, and each step's code, quoted short. It owns the prediction kinds
and their messages (``unseen.py`` adds the kinds no saved attribute shows), and
reads no tensor itself, so it is kept apart from the reading in ``saved.py``.
"""

from __future__ import annotations

import re
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from ..trace import Prediction, TensorState
from .identity import mark
from .readsaved import UNKNOWN

#: (walk.node_key, node name, attribute, saved version) of a stale saved tensor
_StaleKey = Tuple[Tuple[int, str], str, str, Optional[int]]

STALE = "backward_will_fail"  # a saved tensor's version moved: backward raises the in-place error
FREED = "backward_freed"  # backward freed the saved tensors: a second backward raises
# values changed without a version bump: backward runs, wrongly
CHANGED = "backward_uses_changed_values"
UNCHECKED = "backward_unchecked"  # CopySlices hides what its node saved; a tensor changed since
MAX_CODE = 60  # characters of a step's code quoted in a prediction
_IN_PLACE = r"\.\w+_\(|[-+*/@]=|\]\s*=[^=]|\.data\s*=[^=]"  # a line that writes into a tensor


def writes_to(name: str) -> str:
    """A regex for a line that writes in place into ``name``.

    It finds ``name.add_(``, ``name[0] =`` and ``name +=``.
    """
    return (
        rf"(?<![\w.]){re.escape(name)}(?:\.data)?(?:(?:\[[^\]]*\])*\s*(?:\.\w+_\(|[-+*/@]=)"
        rf"|(?:\[[^\]]*\])+\s*=[^=])"
    )


def short_code(code: str, hints: Sequence[str] = ()) -> str:
    """A step's code on one line, bounded.

    Of a longer step, the last line a hint (a regex) finds.
    """
    lines = [line.strip() for line in code.strip().splitlines() if line.strip()]
    text = "; ".join(lines)
    if len(lines) > 1:
        for hint in hints:  # the first hint that finds a line wins
            picked = [line for line in lines if re.search(hint, line)]
            if picked:
                text = picked[-1]
                break
    return text if len(text) <= MAX_CODE else text[: MAX_CODE - 1] + "\u2026"


class Predictor:
    """Keeps the per-step versions it needs and makes each step's predictions."""

    def __init__(self) -> None:
        self.versions: Dict[Tuple[str, Optional[str]], List[Tuple[int, int]]] = {}
        self.codes: Dict[int, str] = {}
        # walk.node_key of a node seen freed -> the step it was first seen so
        self.freed_since: Dict[Tuple[int, str], int] = {}
        # a walk stopped at nodes that could not anchor their next ones (graph.UNANCHORED)
        self.unanchored = False
        self._last: Dict[int, TensorState] = {}  # the last step's records, by identity
        # (name, storage) -> (version, values) last noted; and the steps that changed the values
        # without moving the version (``.data``, NumPy): autograd cannot see those writes
        self._values: Dict[Tuple[str, Optional[str]], Tuple[int, Any]] = {}
        self.silent: Dict[Tuple[str, Optional[str]], List[Tuple[int, int]]] = {}
        # ((name, storage), step) of such a write -> the values before it
        self.silent_before: Dict[Tuple[Tuple[str, Optional[str]], int], Any] = {}
        # name -> (identity.mark, id, (name, storage)) of the tensor it was bound to last
        self._held: Dict[str, Tuple[Any, int, Tuple[str, Optional[str]]]] = {}
        self._objects: Dict[str, Any] = {}
        # walk.node_key of a walked node -> the step first seen
        self.node_first: Dict[Tuple[int, str], int] = {}
        # node_key of each CopySlices node a freeing backward ran (flow.FlowRecorder.released)
        self.released: Dict[Tuple[int, str], str] = {}
        # such a node -> the step its prediction was first made
        self.released_since: Dict[Tuple[int, str], int] = {}
        # node_key of a CopySlices node walked -> (the step first seen, its base's
        # (name, storage) keys, the storages the step's writes into it touched, or None):
        # what it wraps saved tensors no attribute shows (unseen.py)
        self.slices: Dict[Tuple[int, str], Tuple[int, Tuple[Any, ...], Any]] = {}
        # node_keys of the nodes this step's walk reached that the previous step's walk reached
        self.reached_before: Set[Tuple[int, str]] = set()
        self.walked = -1  # the last step whose walk ``node_first`` holds
        # (node_key, node, attribute, saved version) of a stale saved tensor -> the step first
        # seen stale: the step that made it so, when its node was reached the step before
        self.stale_since: Dict[_StaleKey, Optional[int]] = {}
        # a step that code ran before without being recorded (snoop's max_iterations) -> what
        # ran ("2 runs of line 5"), and the storages the step's own operations wrote (None:
        # not recorded)
        self.gaps: Dict[int, str] = {}
        self.wrote: Dict[int, Optional[FrozenSet[str]]] = {}

    def note(
        self,
        index: int,
        code: str,
        states: Sequence[TensorState],
        objects: Optional[Dict[str, Any]] = None,
    ) -> None:
        """Step ``index``'s code, and each tensor's version where it differs from the one last noted
        (``changed_at`` looks for the first step past a version, which is always such a step).

        ``objects`` (the named values) tell a tensor whose memory ``w.data = ...`` replaced,
        the same object at the same version on another storage, from a new tensor bound to
        the name."""
        self.codes[index] = code
        self._objects = objects or {}
        versions = self.versions
        # a record kept from the last step (the snapshot reuses the very record) has the
        # name, storage and version noted then
        last, self._last = self._last, {id(s): s for s in states}
        for s in states:
            if last.get(id(s)) is s:
                continue
            version = s.version
            if version is not None:
                self._note_values(index, s)
                seen = versions.get((s.name, s.storage))
                if seen is None:
                    versions[(s.name, s.storage)] = [(index, version)]
                elif seen[-1][1] != version:
                    seen.append((index, version))
        self._objects = {}  # holds no user object past this call

    def names_on(self, storage: Optional[str]) -> List[str]:
        """The names on ``storage`` in the last step noted."""
        if storage is None:
            return []
        return [s.name for s in self._last.values() if s.storage == storage]

    def _note_values(self, index: int, s: TensorState) -> None:
        """Note a step that changed ``s``'s values while its version stayed (a silent write)."""
        key = (s.name, s.storage)
        before = self._values.get(key)
        obj = self._objects.get(s.name)
        held = (mark(obj), id(obj), key) if obj is not None else None
        last_held = self._held.get(s.name)
        if held is not None:
            self._held[s.name] = held
        if before is None and last_held is not None and held is not None:
            # the very tensor on other memory: ``.data`` was set (its version stays)
            if last_held[:2] == held[:2] and last_held[2] != key:
                before = self._values.get(last_held[2])
        values = s.values
        if values is None or values.kind == "unavailable":
            return
        self._values[key] = (s.version, values)
        if before is not None and before[0] == s.version and before[1] != values:
            self.silent.setdefault(key, []).append((index, s.version))
            self.silent_before[(key, index)] = before[1]

    def changed_at(
        self,
        name: Optional[str],
        storage: Optional[str],
        saved_version: int,
        version: int,
        states: Sequence[TensorState],
    ) -> Optional[int]:
        """The first step after which the saved tensor's version was past ``saved_version``.

        Read from the versions noted under each name: only a name whose notes
        began at or below ``saved_version`` can tell (one first noted past it was
        bound to the tensor after the change: ``b = a`` after ``a.add_(1)``).
        None when no name tells.
        """
        keys = (
            [(name, storage)]
            if name is not None
            else [
                (s.name, s.storage)
                for s in states
                if storage is not None and s.storage == storage and s.version == version
            ]
        )
        steps = []
        for key in keys:
            seen = self.versions.get(key, ())
            if not seen or seen[0][1] > saved_version:
                continue
            for index, at in seen:
                if at > saved_version:
                    steps.append(index)
                    break
        return min(steps) if steps else None

    @staticmethod
    def targets(states: Sequence[TensorState], objects: Dict[str, Any]) -> List[Tuple[str, Any]]:
        """Each named tensor that requires grad and has a grad_fn (an alias ``b = a`` once)."""
        import torch

        targets: List[Tuple[str, Any]] = []
        for state in states:
            if state.same_as is not None or not state.requires_grad or state.grad_fn is None:
                continue
            obj = objects.get(state.name)
            if not isinstance(obj, torch.Tensor):
                continue
            try:
                fn = obj.grad_fn
            except Exception:
                continue
            if fn is not None:
                targets.append((state.name, fn))
        return targets

    def predictions(
        self,
        index: int,
        targets: Sequence[Tuple[str, Any]],
        found: Optional[Dict[str, Any]],
        states: Sequence[TensorState],
    ) -> Tuple[Prediction, ...]:
        freed_now: Dict[Tuple[int, str], int] = {}
        stale_now: Dict[_StaleKey, Optional[int]] = {}
        out: List[Prediction] = []
        for (name, _), stale, freed in zip(
            targets, (found or {}).get("stale", ()), (found or {}).get("freed", ())
        ):
            if stale is not None:
                out.append(self._stale(index, name, stale, states, stale_now))
            if freed is not None:
                node, entry, key = freed
                step = freed_now[key] = self.freed_since.get(key, index)
                out.append(self._freed(name, node, entry[0], step))
        self.freed_since = freed_now
        self.stale_since = stale_now
        return tuple(out)

    def _culprit(
        self,
        index: int,
        found: list,
        states: Sequence[TensorState],
        stale_now: Dict[_StaleKey, Optional[int]],
    ) -> Optional[int]:
        """The step that made a saved tensor stale: the step its node was first seen so, when
        the walk reached that node the step before (the version counter moved in between,
        whichever alias wrote it); else what the versions noted under names tell."""
        node, (attr, saved, storage, saved_version, version, _, _), node_key = found[:3]
        key = (node_key, node, attr, saved_version)
        if key in stale_now:
            return stale_now[key]
        if key in self.stale_since:
            step = self.stale_since[key]
        elif node_key in self.reached_before:
            step = index
        else:
            step = self.changed_at(saved, storage, saved_version, version, states)
        stale_now[key] = step
        return step

    def _stale(
        self,
        index: int,
        name: str,
        found: list,
        states: Sequence[TensorState],
        stale_now: Dict[_StaleKey, Optional[int]],
    ) -> Prediction:
        node, (attr, saved, storage, saved_version, version, _, _), _, reads = found
        step = self._culprit(index, found, states, stale_now)
        what = f"`{saved}`" if saved is not None else "an unnamed tensor"
        # an unnamed one at the version of the named tensors on its storage shares their
        # counter (a view)
        partners = [
            s.name
            for s in states
            if saved is None
            and storage
            and s.storage == storage
            and s.version == version
            and s.kind != "ndarray"
        ]
        shared = f", in the storage of {', '.join(f'`{n}`' for n in partners)}" if partners else ""
        where = f" ({storage}{shared})" if storage else ""
        now = f"`{saved}` is" if saved is not None else "it is"
        # the line of the step that wrote: through the saved tensor's name, or another on its
        # storage (the write may have gone through an alias since renamed or deleted)
        writers = [saved] if saved is not None else partners
        others = [s.name for s in states if storage and s.storage == storage]
        hints = (
            [writes_to(n) for n in writers + [n for n in others if n not in writers]]
            + [_IN_PLACE]
            + [rf"(?<![\w.]){re.escape(n)}(?!\w)" for n in writers]
        )
        unseen = self.unrecorded_before(step, storage)
        if unseen is not None:
            when = f" (changed before {step_name(step)}, in {unseen})"
            step = None
        elif step is not None:
            code = short_code(self.codes.get(step, ""), hints)
            when = f" (changed by `{code}` at {step_name(step)})"
        else:
            when = ""
        # a custom Function's backward that hands ctx on may or may not read what it saved
        maybe = reads == UNKNOWN
        message = (
            f"backward through `{name}` {'may' if maybe else 'will'} fail: {node} saved "
            f"{what}{where} at version {saved_version}, "
            f"and {now} now at version {version}{when}."
        )
        if maybe:
            message += (
                " Its backward passes `ctx` on, so whether it reads `ctx.saved_tensors` (which "
                'raises "modified by an inplace operation") cannot be told from its code.'
            )
        return Prediction(
            kind=UNCHECKED if maybe else STALE,
            tensor=name,
            node=node,
            saved=attr,
            saved_tensor=saved,
            saved_version=saved_version,
            version=version,
            storage=storage,
            changed_at_step=step,
            message=message,
        )

    def unrecorded_before(self, step: Optional[int], storage: Optional[str]) -> Optional[str]:
        """What ran unrecorded right before ``step`` ("2 runs of line 5 that were not
        recorded"), when the write into ``storage`` may have come from there: the step's
        own recorded operations did not write it."""
        if step is None or step not in self.gaps:
            return None
        wrote = self.wrote.get(step)
        if wrote is not None and storage is not None and storage in wrote:
            return None
        return self.gaps[step]

    def _freed(self, name: str, node: str, attr: str, step: Optional[int]) -> Prediction:
        code = short_code(self.codes.get(step, ""), [r"\bbackward\(", r"\bgrad\("])
        when = f"at {step_name(step)} (`{code}`)" if step is not None else "by an earlier backward"
        message = (
            f"backward through `{name}` a second time will fail: "
            f"its saved tensors were freed {when}; "
            f"{node} needs its saved `{attr}`."
        )
        return Prediction(
            kind=FREED, tensor=name, node=node, saved=attr, changed_at_step=step, message=message
        )


def step_name(index: int) -> str:
    return "setup" if index == 0 else f"step {index}"
