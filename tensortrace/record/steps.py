"""One step's recording, whoever decides what a step is.

A step of a scenario, a line of a function under ``snoop()`` and a statement
of a ``%%tensortrace`` cell all end the same way: the tensors in reach are
probed, the calls and ATen operations the code ran are named, the gradient
flow of its backward calls is read, the graphs asked for are drawn, and the
tensors autograd saved say which backward will fail. ``StepRecorder`` does
that for all three, so that they record the same facts with the same code.

What stays with each caller is its own job: running the code, or watching it
run (the tracer ``exec``s a step; the snooper hears of a line from
``sys.monitoring`` or ``sys.settrace``), and saying which names are in scope.

A step is recorded in this order, each part reading what the one before left:

1. ``modes(caught)`` (or ``watch``/``cut``/``resume`` for code that is not run
   by the caller) records the calls and ATen operations (``ops.py``);
2. ``named(pairs)`` expands the names in scope into tensors
   (``members.expand_value``: ``model.weight``, ``xs[0]``);
3. ``snapshot(named)`` probes each, reusing a record while the tensor is
   provably unchanged (``reuse.SnapshotCache``, ``writes.WriteWatch``);
4. ``complete(...)`` names the operations, reads the gradient flow, draws the
   graphs, makes the predictions (``observe.observe``) and, for the saved-tensor
   error, says which name PyTorch's message means.

Everything runs under ``reading()``: the tool's reads bypass a tensor
subclass's ``__torch_function__``, which the user's code never sees.
"""

from __future__ import annotations

import contextlib
import platform
import threading
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch

from ..trace import (
    CallSite,
    Confinement,
    Environment,
    ErrorInfo,
    Flow,
    Graph,
    Loop,
    OpRecord,
    Prediction,
    StorageInfo,
    TensorState,
)
from ..version import __version__
from .explain import name_the_carried_state, name_the_saved_tensor
from .flow import carrier_name
from .graph import UNANCHORED, UNANCHORED_NODES, proven_names, view_family
from .walk import ANCHOR, ANCHOR_PAST, ANCHORED, anchorings
from .fastpaths import notice as fast_path_notice
from .members import MAX_NAMES, expand_value
from .modestack import DISPATCH, insert, user_modes_aside
from .observe import observe
from .ops import OpsSession
from .probe import StorageRegistry, plain_reads, probe_named
from .recordability import recordable
from .reuse import SnapshotCache
from .saved import Namer, Predictor
from .writes import WriteWatch

#: What ``--ops`` (and ``snoop(ops=)``, ``%%tensortrace --ops``) accepts: ``none`` records no
#: operation and no gradient flow; ``calls``, ``all`` and ``aten`` record both levels and differ
#: only in what a rendering shows.
OPS_LEVELS = ("none", "calls", "all", "aten")

Named = List[Tuple[str, Any, str]]  # (name, object, kind) in binding order, as probe_named takes

_SPANS = threading.local()  # .open: the StepRecorders whose ``watch`` is open in this thread


class Recorded(NamedTuple):
    """What ``StepRecorder.complete`` adds to a step's snapshot."""

    graphs: Tuple[Graph, ...]
    predictions: Tuple[Prediction, ...]
    ops: Tuple[OpRecord, ...]
    ops_omitted: int
    flow: Tuple[Flow, ...]
    error: Optional[ErrorInfo]
    sites: Tuple[CallSite, ...] = ()
    loop: Optional[Loop] = None


class StepRecorder:
    """The recording side of one run: storages, kept records, predictions and operations.

    ``code`` is all the code the run will execute, read once to decide how deep
    its operations can be recorded (``recordability.recordable``: code using
    ``torch.compile`` records none). ``ops`` False records no operation at all.
    ``writes`` proves which storages a step did not write (safe mode only);
    without it every kept record's memory is compared again. ``notices``
    collects what the run should say once (shared with the caller's own).
    """

    def __init__(
        self,
        code: str,
        *,
        ops: bool = True,
        values: bool = True,
        writes: Optional[WriteWatch] = None,
        notices: Optional[List[str]] = None,
        scope: str = "bound",
    ) -> None:
        self.values = values
        self.notices: List[str] = notices if notices is not None else []
        self.scope = scope  # how the MAX_NAMES notice says the names were found
        self.registry = StorageRegistry()
        self.memo = SnapshotCache()  # a record is kept while its tensor is provably unchanged
        self.predictor = Predictor()  # what each step's saved tensors say about backward
        self.writes = writes if writes is not None else WriteWatch(None, safe=False)
        self.ops = OpsSession(None, on=False, values=values)
        if ops:
            self.ops.level, why = recordable(code)
            if why is not None:
                self.notices.append(why)
        self.nones: List[str] = []  # the names the last ``named`` saw bound to None
        self._watched: Any = None  # the modes ``watch`` entered, until it leaves them
        self._anchorings = anchorings()  # walks that wrote anchors, when last said

    @property
    def level(self) -> Optional[str]:
        """``aten``, ``call`` or None: how deep this run's operations are recorded."""
        return self.ops.level

    # recording the operations --------------------------------------------------
    def modes(self, caught: List[Any]) -> Any:
        """The context that records one step's operations, entered around its code.

        ``caught`` is the step's list of recorded warnings: a warning PyTorch raises
        inside the modes is placed back where plain PyTorch places it.
        """
        return self.ops.modes(caught)

    @contextlib.contextmanager
    def watch(self, caught: List[Any]):
        """Record operations over code the caller does not run itself (a function under
        ``snoop()``), whose steps end at ``cut`` and begin again at ``resume``.

        The modes are entered once, for the whole span: leaving a mode at each line would
        pop whatever mode the user's code entered above it.
        """
        modes = self.ops.modes(caught)
        # a snooped function called from a snooped line: its own trace holds what it runs, and
        # the outer line would see the inner recording's own reads
        with unrecorded():
            with modes:
                self._watched = modes
                open_spans = _SPANS.__dict__.setdefault("open", [])
                open_spans.append(self)
                try:
                    yield
                finally:
                    open_spans.pop()
                    self.cut()
                    self._watched = None

    def cut(self) -> None:
        """End the operations of the current step: the tool's own reads are not the code's."""
        now = self.ops.now
        if now is None:
            return
        now.paused = True
        if now.pending:
            now.settle()
        modes = self._watched
        if now.aten_off and modes is not None and modes.aten is not None:
            # past ops.MAX_OPS the step took the dispatch mode off the stack: the next step
            # of the span records ATen operations again
            insert(DISPATCH, modes.aten)
            now.aten_off = False

    def resume(self, caught: List[Any]) -> None:
        """Begin recording the next step's operations in a span that ``watch`` opened."""
        if self._watched is not None:
            self.ops.modes(caught)  # the same modes, pointed at a new step's recording

    # naming and probing ------------------------------------------------------------
    def named(self, pairs: Iterable[Tuple[str, Any]]) -> Named:
        """The tensors that ``pairs`` (name, value, in binding order) hold, under their names.

        A module stands for its parameters and buffers, a list or dict for its
        items (two levels deep); names bound to None are kept in ``nones``. At most
        ``MAX_NAMES`` tensors are recorded, with a notice.
        """
        found: Named = []
        notes: List[str] = []
        nones = self.nones = []
        tensor = torch.Tensor
        for name, value in pairs:
            if type(value) is tensor:  # the common case, without expand_value's checks
                found.append((name, value, "tensor"))
                continue
            if value is None:
                if len(nones) < MAX_NAMES:
                    nones.append(name)
                continue
            expand_value(name, value, found, depth=0, notes=notes)
            if len(found) >= MAX_NAMES:
                notes.append(
                    f"more than {MAX_NAMES} tensors are {self.scope}; "
                    f"only the first {MAX_NAMES} are recorded"
                )
                break
        for note in notes:
            self.notice(note)
        return found[:MAX_NAMES]

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """The context every read of a step's recording runs in.

        No mode sees the tool's reads (``modestack.user_modes_aside``): not a mode the
        user's code left on (a counting mode would count them), nor, in a span that
        ``watch`` opened, the recording's own. A tensor subclass's ``__torch_function__``
        does not see them either (``probe.plain_reads``). The user's code is not running
        meanwhile.
        """
        with user_modes_aside(), plain_reads():
            yield

    def snapshot(
        self, named: Named, *, expectations: bool = False
    ) -> Tuple[Tuple[TensorState, ...], Dict[str, Any]]:
        """Each named tensor's record now, and name -> object for the rest of the step.

        ``expectations``: code of the step ran after its operations were recorded,
        so the write proof (``writes.py``) does not hold for it.
        """
        self.memo.window = self.writes.window(self.ops.level, self.ops.now, expectations)
        return probe_named(named, self.registry, values=self.values, memo=self.memo)

    def complete(
        self,
        index: int,
        code: str,
        tensors: Sequence[TensorState],
        objects: Dict[str, Any],
        *,
        drawn: Sequence[Tuple[str, Any]] = (),
        error: Optional[ErrorInfo] = None,
        suspects: Optional[List[Any]] = None,
    ) -> Recorded:
        """Operations, flow, graphs and predictions of step ``index`` (after ``snapshot``).

        ``drawn``: (name, grad_fn) of each graph to draw. ``suspects``: what
        ``graph.saved_suspects`` found for a saved-tensor error, to say which of
        the names PyTorch's message means.
        """
        done = self.ops.finish(self.registry, objects)
        ops, omitted = done.ops, done.omitted
        if index in self.predictor.gaps:  # did the step's own code write, or what ran before it?
            self.predictor.wrote[index] = (
                frozenset(label for op in ops for label in op.writes)
                if self.ops.level is not None
                else None
            )
        for module in self.ops.aside:
            self.notice(fast_path_notice(module))
        graphs, predictions = self._observe(
            index, code, drawn, tensors, objects, None if omitted else ops
        )
        if error is not None:
            error = name_the_saved_tensor(
                error,
                tensors,
                proven=proven_names(suspects, objects),
                family=view_family(suspects, objects),
            )
            carrier = carrier_name(self.ops.carried, self.predictor.targets(tensors, objects))
            if carrier is not None:
                error = name_the_carried_state(error, carrier[0], itself=carrier[1])
        return Recorded(
            graphs, predictions, done.ops, done.omitted, done.flows, error, done.sites, done.loop
        )

    def _observe(
        self,
        index: int,
        code: str,
        drawn: Sequence[Tuple[str, Any]],
        tensors: Sequence[TensorState],
        objects: Dict[str, Any],
        ops: Optional[Sequence[OpRecord]] = None,
    ) -> Tuple[Tuple[Graph, ...], Tuple[Prediction, ...]]:
        names_by_id: Dict[int, str] = {}
        for name, obj in objects.items() if drawn else ():  # names only a drawing uses
            names_by_id.setdefault(id(obj), name)
        predictor = self.predictor
        predictor.note(index, code, tensors, objects)
        predictor.released = self.ops.released
        namer = Namer(objects, tensors, self.registry)
        observed = observe(predictor, index, drawn, tensors, objects, namer, names_by_id, ops)
        if predictor.unanchored:
            self.notice(UNANCHORED.format(n=UNANCHORED_NODES))
        if anchorings() != self._anchorings:  # a walk wrote into the nodes' metadata: say so
            self._anchorings = anchorings()
            self.notice(ANCHORED.format(n=ANCHOR_PAST, key=ANCHOR))
        return observed

    # the run's end -------------------------------------------------------------------
    def notice(self, note: str) -> None:
        """Say ``note`` once in the trace's notices."""
        if note not in self.notices:
            self.notices.append(note)

    def storages(self) -> Tuple[StorageInfo, ...]:
        """Every allocation the run labelled, with the names seen on it."""
        return tuple(
            StorageInfo(
                label=a.label, nbytes=a.nbytes, device=a.device, ptr=a.ptr, names=tuple(a.names)
            )
            for a in self.registry.allocations
        )


@contextlib.contextmanager
def unrecorded():
    """The tool's own work while a span that ``watch`` opened (in this thread) is recording
    a line: its operations are not the line's."""
    open_spans = getattr(_SPANS, "open", None)
    now = open_spans[-1].ops.now if open_spans else None
    if now is None or now.paused:
        yield
        return
    now.paused = True
    try:
        yield
    finally:
        now.paused = False


def environment(device: str, safe: bool, confinement: Optional[Confinement] = None) -> Environment:
    """What a trace records of where it ran: this tool's, torch's and Python's versions."""
    return Environment(
        tensortrace=__version__,
        torch=str(torch.__version__),  # a plain str: TorchVersion is a subclass msgspec refuses
        python=platform.python_version(),
        device=device,
        safe=safe,
        confinement=confinement,
    )


__all__ = ["OPS_LEVELS", "Recorded", "StepRecorder", "environment", "unrecorded"]
