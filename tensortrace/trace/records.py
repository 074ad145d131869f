"""The trace: plain, immutable, typed records of what happened while a scenario ran.

Every record holds only str/int/float/bool/None, tuples and other records, never
a live tensor, so that a trace can be saved as JSON, loaded without torch and
rendered again. Each record is declared once, here, as a frozen ``msgspec``
Struct: the declarations are the types the recorder fills, the bounds every
decoded byte is checked against (``tensortrace.trace.wire``), and the source
of the trace's JSON Schema (``tensortrace.trace.schema``).

Records are trees (no record refers back to an ancestor), so they are made
with ``gc=False``: a trace of a 250,000-node graph adds nothing for the
garbage collector to walk. Unknown fields are refused: a writer of a newer
format says so in ``format_version``, which this reader refuses first.

Format history (``FORMAT_VERSION``):

1. First version.
2. Every ``--format jsonl`` event carries ``format``, ``format_version`` and
   the whole ``scenario`` object; in version 1, ``step`` and ``end`` events
   gave ``scenario`` as the title alone and ``variant`` beside it. The trace
   document itself did not change.
3. Traces are validated when read: types, enumerations and bounds as
   declared here; a document that breaks one is refused, never guessed at.
   The data is that of version 2 (one-line records may be spaced
   differently), so versions 1 and 2 are read through the same records.
   ``OpRecord.existed`` says, per result, whether its storage existed before
   the operation (empty when absent: the renderer then compares with the
   operation's arguments, as before).
4. A tensor record that an earlier step of the trace holds too (a tensor no
   step changed) is written once, where it first appears; later steps list
   it as ``[name, index]``: the same record as tensor ``name`` of the step
   with that ``index``. A document's size then grows with what changed, not
   with steps times tensors. Versions 1 to 3 are read as before. The
   ``--format jsonl`` events did not change (each step is complete).
"""

import math
from typing import Annotated, Any, List, Literal, Optional, Sequence, Tuple, Union

import msgspec
from msgspec import Meta, field
from msgspec.structs import force_setattr, replace

from .bounds import (  # noqa: F401 - re-exported: the records' bounds
    MAX_DATA_DEPTH,
    MAX_DIMS,
    MAX_ITEMS,
    MAX_NAME,
    MAX_NODES,
    MAX_OPS,
    MAX_TENSORS,
    MAX_TEXT,
)
from .numbers import NumberTree, spell

FORMAT_NAME = "tensortrace.trace"
FORMAT_VERSION = 4
#: Versions whose trace document this reads (1 and 2 hold the same data as 3; 4 writes
#: unchanged tensors as references).
READABLE_VERSIONS = (1, 2, 3, 4)


Name = Annotated[str, Meta(max_length=MAX_NAME)]
Text = Annotated[str, Meta(max_length=MAX_TEXT)]
Count = Annotated[int, Meta(ge=0)]
Index = Count
Names = Annotated[Tuple[Name, ...], Meta(max_length=MAX_ITEMS)]
OptionalNames = Annotated[Tuple[Optional[Name], ...], Meta(max_length=MAX_ITEMS)]
Texts = Annotated[Tuple[Text, ...], Meta(max_length=MAX_ITEMS)]
Dims = Annotated[Tuple[int, ...], Meta(max_length=MAX_DIMS)]

# Non-finite floats have no JSON spelling; they travel as these strings.
Spelling = Literal["nan", "inf", "-inf"]
Number = Union[float, Spelling]
Scalar = Union[bool, int, float, Annotated[str, Meta(max_length=MAX_NAME)]]


class Record(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """Base of every trace record: frozen, outside the garbage collector, no unknown fields."""


class Summary(Record):
    """Statistics of a tensor too large to record element by element.

    min/max/mean/std are over the finite elements (None when there are none,
    or when the dtype has no order, e.g. complex); an overflow to infinity
    is held spelled, like ``head``: ``"inf"``, ``"-inf"``, ``"nan"``.
    """

    numel: Count
    min: Optional[Number] = None
    max: Optional[Number] = None
    mean: Optional[Number] = None
    std: Optional[Number] = None
    nan_count: Count = 0
    inf_count: Count = 0
    head: Annotated[Tuple[Scalar, ...], Meta(max_length=MAX_ITEMS)] = ()

    def __post_init__(self) -> None:
        for name in ("min", "max", "mean", "std"):
            value = getattr(self, name)
            if type(value) is float and not math.isfinite(value):
                force_setattr(self, name, spell(value))


class Values(Record):
    """The contents of a tensor: exact when small, a summary when large.

    ``kind`` is ``exact`` (``data`` is the nested list, as tuples), ``summary``
    (``summary`` is set) or ``unavailable`` (``reason`` says why, e.g. a meta
    tensor). ``data`` and ``summary.head`` are stored JSON-ready: NaN and
    infinities as ``"nan"``, ``"inf"``, ``"-inf"``, complex numbers as strings
    such as ``"(1+2j)"``.
    """

    kind: Literal["exact", "summary", "unavailable"]
    data: Optional[NumberTree] = None
    summary: Optional[Summary] = None
    reason: Optional[Text] = None


class TensorState(Record):
    """One named tensor (or NumPy array) as it was right after a step."""

    name: Name
    kind: Literal["tensor", "parameter", "buffer", "ndarray"]
    shape: Dims
    stride: Dims
    dtype: Name
    device: Name
    storage: Optional[Name]  # stable label, "S1", "S2", ...; None without storage
    storage_ptr: Optional[int]
    storage_nbytes: Optional[int]
    storage_offset: int
    data_ptr: Optional[int]
    version: Optional[int]
    requires_grad: Optional[bool]
    is_leaf: Optional[bool]
    retains_grad: Optional[bool]
    grad_fn: Optional[Name]
    grad: Optional[Values]
    is_view: bool
    base: Optional[Name]  # the name of the view's base, when that is named
    values: Values
    same_as: Optional[Name] = None  # an earlier name bound to this very object (b = a)
    # Facts PyTorch refused to give, as (fact, PyTorch's reason) pairs; the
    # field of such a fact holds a placeholder (None, False, 0 or ()), not a value.
    unavailable: Annotated[Tuple[Tuple[Name, Text], ...], Meta(max_length=64)] = ()

    def unavailable_reason(self, fact: str) -> Optional[str]:
        """Why PyTorch would not give ``fact`` (a field name) for this tensor; None when it did."""
        for name, reason in self.unavailable:
            if name == fact:
                return reason
        return None


class Explanation(Record):
    """A plain-language reading of a PyTorch error: what happened, what to do."""

    title: Text
    what: Text
    fix: Text
    topic: Name


class ErrorInfo(Record):
    """An exception a step (or an expectation) raised, as recorded."""

    type: Name  # class __name__, e.g. "RuntimeError"
    qualname: Name  # module.qualname, e.g. "torch.OutOfMemoryError"
    message: Text
    line: Optional[int] = None  # line in the scenario file, when known
    explanation: Optional[Explanation] = None


class WarningInfo(Record):
    """One warning a step issued, with the line it came from."""

    category: Name
    message: Text
    line: Optional[int] = None


class ExpectationResult(Record):
    """One ``expect:`` expression, its value and whether it held."""

    expr: Text
    passed: bool
    line: Optional[int] = None
    error: Optional[Text] = None  # the expectation itself raised
    op: Optional[Name] = None  # for a failed single comparison: "==", "is", ...
    left: Optional[Text] = None
    right: Optional[Text] = None
    value: Optional[Text] = None  # for any other failed expression: what it evaluated to


class Declared(Record):
    """A declared exception or warning: class name and optional regex."""

    type: Name
    match: Optional[Text] = None


class SavedTensor(Record):
    """One tensor an autograd node saved for backward (``tensortrace/record/saved.py`` reads it)."""

    attr: Name  # "self", "other", "result", "tensors[0]" (PyTorch's _saved_* name)
    tensor: Optional[Name] = None  # the named tensor it is, when one is
    storage: Optional[Name] = None  # its storage label, when the storage has one
    saved_version: Optional[int] = None  # its version when saved (None: unknown, or freed)
    version: Optional[int] = None  # its version now
    stale: bool = False  # changed since it was saved: backward through this node raises
    freed: bool = False  # a backward freed it: backward through this node again raises


PREDICTION_KINDS = (
    "backward_will_fail",
    "backward_freed",
    "backward_uses_changed_values",
    "backward_unchecked",
)


class Prediction(Record):
    """Before any backward runs: a backward that will fail (or mislead), and why.

    ``kind`` is ``backward_will_fail`` (a saved tensor changed since it was
    saved), ``backward_freed`` (a backward already freed the saved tensors)
    ``backward_uses_changed_values`` (backward will run, on values that
    changed since they were saved) or ``backward_unchecked`` (a CopySlices
    node hides what its in-place node saved, and a tensor it may have saved
    changed since: backward may fail).
    """

    kind: Literal[
        "backward_will_fail", "backward_freed", "backward_uses_changed_values", "backward_unchecked"
    ]
    tensor: Name  # the named tensor whose backward will fail
    node: Optional[Name] = None  # the node whose saved tensor is the cause, e.g. "MulBackward0"
    saved: Optional[Name] = None  # that saved tensor's attribute, e.g. "other"
    saved_tensor: Optional[Name] = None  # the named tensor it is, when one is
    saved_version: Optional[int] = None
    version: Optional[int] = None
    storage: Optional[Name] = None
    # the step that changed (or freed) it, when the trace shows it
    changed_at_step: Optional[Index] = None
    message: Text = ""


class GraphNode(Record):
    """One autograd node of a drawn graph: its name, next nodes and what it saved."""

    id: Name  # "N1", "N2", ... in walk order
    name: Name  # e.g. "MulBackward0", "AccumulateGrad"
    leaf: Optional[Name] = None  # AccumulateGrad: the name of its leaf tensor
    next: Names = ()  # ids of next_functions, in order
    # what it saved for backward
    saved: Annotated[Tuple[SavedTensor, ...], Meta(max_length=MAX_ITEMS)] = ()


def node_ids(n: int) -> List[str]:
    """The ids of a graph's ``n`` nodes in walk order: "N1", "N2", ..."""
    return [f"N{i}" for i in range(1, n + 1)]


def graph_nodes(
    names: Sequence[str],
    leaves: Sequence[Optional[str]],
    nexts: Sequence[Sequence[int]],
    saved: Sequence[Tuple[SavedTensor, ...]],
) -> Tuple[GraphNode, ...]:
    """A graph's nodes in walk order, from names, leaves, next nodes (indexes), saved tensors."""
    ids = node_ids(len(nexts))
    return tuple(
        [
            GraphNode(
                ids[i],
                names[i],
                leaves[i],
                (ids[nxt[0]],) if len(nxt) == 1 else tuple([ids[j] for j in nxt]),
                saved[i],
            )
            for i, nxt in enumerate(nexts)
        ]
    )


class Graph(Record):
    """The autograd graph behind one named tensor, walked from its grad_fn."""

    tensor: Name
    root: Optional[Name]  # id of the tensor's grad_fn node; None: no grad_fn
    nodes: Annotated[Tuple[GraphNode, ...], Meta(max_length=MAX_NODES)] = ()
    truncated: bool = False


class OpTensors(Record):
    """The scenario names of an operation's tensor arguments and results (None: unnamed)."""

    in_: OptionalNames = field(default=(), name="in")
    out: OptionalNames = ()


class VersionBump(Record):
    """A tensor whose version counter an operation moved, ``from`` → ``to``."""

    name: Optional[Name]
    from_: Optional[int] = field(default=None, name="from")
    to: Optional[int] = None


_LABELS = Names


class OpRecord(Record):
    """One operation a step ran: a call the user wrote (``call``) or an ATen operation (``aten``).

    ``reads``/``writes``/``outputs`` are storage labels: what the tensor
    arguments not marked written live on, what the operation's schema says
    it writes (``Tensor(a!)``), and what its results live on. ``parent`` is
    the index (in ``Step.ops``) of the call an ATen operation ran under.
    """

    level: Literal["call", "aten"]
    name: Name  # "torch.Tensor.detach", "aten::zero_", ...
    # ATen overload name ("Tensor" for aten::add_.Tensor); None: default
    overload: Optional[Name] = None
    parent: Optional[Index] = None
    reads: _LABELS = ()
    writes: _LABELS = ()
    outputs: OptionalNames = ()
    tensors: OpTensors = OpTensors()
    version_bumps: Annotated[Tuple[VersionBump, ...], Meta(max_length=MAX_ITEMS)] = ()
    # per result: its storage existed before the operation began (``x.grad``, ``torch.as_tensor``
    # of an array); empty in traces written before this was recorded
    existed: Annotated[Tuple[bool, ...], Meta(max_length=MAX_ITEMS)] = ()
    # a call made inside another function the code called (``opt.step()``, ``model(x)``): the
    # index in ``Step.sites`` of that expression as the code wrote it; None: the code made it
    site: Optional[Index] = None


class CallSite(Record):
    """An expression of the user's code that ran calls inside it: ``opt.step()``, ``model(x)``."""

    text: Text  # as written, on one line
    line: Optional[int] = None  # its first line in the scenario file (or the snooped file)


class LoopPass(Record):
    """Where one pass through a loop began: indexes into its step's lists, and small values.

    ``op``, ``flow`` and ``warning`` index ``Step.ops``, ``Step.flow`` and ``Step.warnings``:
    what the pass did runs from there up to the next pass's indexes (the step's ends for the
    last one). ``scalars`` are the scenario's one-element floating-point tensors on the CPU
    as the pass began (at most ``record.loops.MAX_SCALARS``, by name).
    """

    op: Index = 0
    flow: Index = 0
    warning: Index = 0
    scalars: Annotated[Tuple[Tuple[Name, Number], ...], Meta(max_length=MAX_ITEMS)] = ()


class Loop(Record):
    """The passes of the one outermost loop a step's code holds, marked as each began.

    ``passes`` counts every pass; ``marks`` holds the first ones (``record.loops.MAX_MARKS``).
    ``end``, when code follows the loop in the step, is where that code began.
    """

    line: Optional[int] = None  # the loop statement's line in the scenario file
    passes: Count = 0
    marks: Annotated[Tuple[LoopPass, ...], Meta(max_length=MAX_ITEMS)] = ()
    end: Optional[LoopPass] = None


_GRADS = Annotated[Tuple[Optional[Values], ...], Meta(max_length=MAX_ITEMS)]


class FlowNode(Record):
    """One node of the graph a backward call ran, and the gradients through it.

    ``grad_in`` is what arrived at the node (one entry per output of the
    forward operation; PyTorch's ``grad_outputs``), ``grad_out`` what it
    sent on, one entry per ``next`` edge (PyTorch's ``grad_inputs``); None:
    nothing. ``ran`` is False for a node the call never reached.
    """

    id: Name  # "F1", "F2", ... in walk order
    name: Name
    next: OptionalNames = ()  # None: an input that takes no gradient
    grad_in: _GRADS = ()
    grad_out: _GRADS = ()
    ran: bool = False
    leaf: Optional[Name] = None  # AccumulateGrad: the name of the leaf it adds to
    leaf_grad_before: Optional[Values] = None
    leaf_grad_after: Optional[Values] = None


class Flow(Record):
    """The gradients one ``.backward()``, ``autograd.backward`` or ``autograd.grad`` call sent."""

    call: Name
    roots: _LABELS = ()  # ids of the nodes the call started from
    nodes: Annotated[Tuple[FlowNode, ...], Meta(max_length=MAX_NODES)] = ()
    omitted: Count = 0  # nodes of the graph beyond the recorded ones
    notice: Optional[Text] = None


STEP_STATUSES = ("ok", "raised", "timeout", "killed")


class Step(Record):
    """One step (index 0 is ``setup``) and everything observed after it."""

    index: Index
    code: Text
    line: Optional[int]
    note: Optional[Text] = None
    # a notebook's cell (from 1); ``line`` counts in it
    cell: Optional[Annotated[int, Meta(ge=1)]] = None
    status: Literal["ok", "raised", "timeout", "killed"] = "ok"
    error: Optional[ErrorInfo] = None
    warnings: Annotated[Tuple[WarningInfo, ...], Meta(max_length=MAX_ITEMS)] = ()
    stdout: Text = ""
    expectations: Annotated[Tuple[ExpectationResult, ...], Meta(max_length=MAX_ITEMS)] = ()
    raises: Optional[Declared] = None
    warns: Optional[Declared] = None
    raised_as_declared: bool = False  # the error matched ``raises`` (class or a base, and match)
    warned_as_declared: bool = False  # some warning matched ``warns``
    behaved: bool = True
    failures: Texts = ()  # why the step did not behave as declared
    shown: Optional[Names] = None  # names shown here (None: all)
    tensors: Annotated[Tuple[TensorState, ...], Meta(max_length=MAX_TENSORS)] = ()
    none: Names = ()  # the scenario's names bound to None after the step (bound, but to no tensor)
    graphs: Annotated[Tuple[Graph, ...], Meta(max_length=MAX_TENSORS)] = ()
    # read after the step
    predictions: Annotated[Tuple[Prediction, ...], Meta(max_length=MAX_ITEMS)] = ()
    # what the step ran (``--ops``)
    ops: Annotated[Tuple[OpRecord, ...], Meta(max_length=MAX_OPS)] = ()
    # operations counted beyond the recorded ones (tensortrace.record.ops.MAX_OPS)
    ops_omitted: Count = 0
    # one per backward call the step made
    flow: Annotated[Tuple[Flow, ...], Meta(max_length=MAX_ITEMS)] = ()
    # the expressions of the code that ran calls inside them (``OpRecord.site``)
    sites: Annotated[Tuple[CallSite, ...], Meta(max_length=MAX_ITEMS)] = ()
    # the passes of the step's loop, when its code is (or holds) one outermost loop
    loop: Optional[Loop] = None


class StorageInfo(Record):
    """One allocation the run saw: its label, size, device, address and the names on it."""

    label: Name
    nbytes: int
    device: Name
    ptr: int
    names: Names = ()  # every name seen on it, in order


class ScenarioInfo(Record):
    """What the scenario says about itself: title, description, tags, file and variant."""

    title: Text
    description: Optional[Text] = None
    tags: Names = ()
    source: Optional[Text] = None
    variant: Optional[Name] = None


# The layers of the kernel's wall (``tensortrace.run.confine`` builds them), by the
# names traces record; the wall has a hole unless every essential one is up.
CONFINEMENT_ESSENTIAL = (
    "closed-descriptors",
    "no-new-privs",
    "no-capabilities",
    "landlock-files",
    "seccomp",
)
CONFINEMENT_EXTRA = ("landlock-network", "landlock-scopes", "thread-limit")


class Confinement(Record):
    """What the kernel enforced around the child that ran a safe-mode scenario."""

    enforced: Names = ()  # e.g. "landlock-files", "seccomp"
    missing: Texts = ()  # "layer: why it is not enforced here"

    @property
    def complete(self) -> bool:
        """Every layer the wall needs is up."""
        return all(layer in self.enforced for layer in CONFINEMENT_ESSENTIAL)


class Environment(Record):
    """Where the trace was recorded: tool, torch and Python versions, device, safe mode."""

    tensortrace: Name
    torch: Name
    python: Name
    device: Name
    safe: bool = True
    confinement: Optional[Confinement] = None  # safe mode only; None under --trust


def evolve(record: Any, **changes: Any) -> Any:
    """A copy of ``record`` with ``changes``: the one way code changes a (frozen) record."""
    return replace(record, **changes)


PARTS = (
    Summary,
    Values,
    TensorState,
    Explanation,
    ErrorInfo,
    WarningInfo,
    ExpectationResult,
    Declared,
    SavedTensor,
    Prediction,
    GraphNode,
    Graph,
    OpTensors,
    VersionBump,
    OpRecord,
    CallSite,
    LoopPass,
    Loop,
    FlowNode,
    Flow,
    Step,
    StorageInfo,
    ScenarioInfo,
    Confinement,
    Environment,
)
