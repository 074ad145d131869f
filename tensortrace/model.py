"""The trace: plain, immutable records of what happened while a scenario ran.

Every record holds only str/int/float/bool/None, tuples and other records, never
a live tensor, so that a trace can be saved as JSON, loaded without torch and
rendered again. ``Trace.to_dict()`` / ``Trace.from_dict()`` are the JSON form.

Format history (``FORMAT_VERSION``):

1. First version.
2. Every ``--format jsonl`` event carries ``format``, ``format_version`` and
   the whole ``scenario`` object; in version 1, ``step`` and ``end`` events
   gave ``scenario`` as the title alone and ``variant`` beside it. The trace
   document itself did not change, so version 1 traces still load.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .codec import (  # noqa: F401 - encode_number_tree, decode_number and freeze are used from here too
    _decoder,
    _from_plain,
    _to_plain,
    decode_number,
    encode_number_tree,
    freeze,
    frozen_methods,
    quick_init,
    to_plain_leaving,
)

FORMAT_NAME = "tensortrace.trace"
FORMAT_VERSION = 2
#: Versions whose trace document ``Trace.from_dict`` reads (1 differs only in the JSON-lines events).
READABLE_VERSIONS = (1, 2)


def evolve(record: Any, **changes: Any) -> Any:
    """A copy of ``record`` with ``changes``: the one way code changes a record (records are frozen)."""
    return replace(record, **changes)


def record(cls: type) -> type:
    """A frozen dataclass: ``__init__`` from ``quick_init``, the rest from ``frozen_methods``, so
    that ``dataclass`` itself only reads the fields (writing and compiling the methods of 23
    records cost every start of the command a few percent)."""
    return frozen_methods(quick_init(dataclass(init=False, repr=False, eq=False)(cls)))


@record
class Summary:
    """Statistics of a tensor too large to record element by element.

    min/max/mean/std are over the finite elements (None when there are none,
    or when the dtype has no order, e.g. complex).
    """

    numel: int
    min: Optional[float] = None
    max: Optional[float] = None
    mean: Optional[float] = None
    std: Optional[float] = None
    nan_count: int = 0
    inf_count: int = 0
    head: Tuple[Any, ...] = ()


@record
class Values:
    """The contents of a tensor: exact when small, a summary when large.

    ``kind`` is ``exact`` (``data`` is the nested list, as tuples), ``summary``
    (``summary`` is set) or ``unavailable`` (``reason`` says why, e.g. a meta
    tensor). ``data`` and ``summary.head`` are stored JSON-ready: NaN and
    infinities as ``"nan"``, ``"inf"``, ``"-inf"``, complex numbers as strings
    such as ``"(1+2j)"``.
    """

    kind: str
    data: Any = None
    summary: Optional[Summary] = None
    reason: Optional[str] = None


@record
class TensorState:
    """One named tensor (or NumPy array) as it was right after a step."""

    name: str
    kind: str  # "tensor", "parameter", "buffer" or "ndarray"
    shape: Tuple[int, ...]
    stride: Tuple[int, ...]
    dtype: str
    device: str
    storage: Optional[str]  # stable label, "S1", "S2", ...; None without storage
    storage_ptr: Optional[int]
    storage_nbytes: Optional[int]
    storage_offset: int
    data_ptr: Optional[int]
    version: Optional[int]
    requires_grad: Optional[bool]
    is_leaf: Optional[bool]
    retains_grad: Optional[bool]
    grad_fn: Optional[str]
    grad: Optional[Values]
    is_view: bool
    base: Optional[str]  # the name of the view's base, when that is named
    values: Values
    same_as: Optional[str] = None  # an earlier name bound to this very object (b = a)
    # Facts PyTorch refused to give, as (fact, PyTorch's reason) pairs; the
    # field of such a fact holds a placeholder (None, False, 0 or ()), not a value.
    unavailable: Tuple[Tuple[str, str], ...] = ()

    def unavailable_reason(self, fact: str) -> Optional[str]:
        """Why PyTorch would not give ``fact`` (a field name) for this tensor; None when it did."""
        for name, reason in self.unavailable:
            if name == fact:
                return reason
        return None


@record
class Explanation:
    """A plain-language reading of a PyTorch error: what happened, what to do."""

    title: str
    what: str
    fix: str
    topic: str


@record
class ErrorInfo:
    """An exception a step (or an expectation) raised, as recorded."""

    type: str  # class __name__, e.g. "RuntimeError"
    qualname: str  # module.qualname, e.g. "torch.OutOfMemoryError"
    message: str
    line: Optional[int] = None  # line in the scenario file, when known
    explanation: Optional[Explanation] = None


@record
class WarningInfo:
    """One warning a step issued, with the line it came from."""

    category: str
    message: str
    line: Optional[int] = None


@record
class ExpectationResult:
    """One ``expect:`` expression, its value and whether it held."""

    expr: str
    passed: bool
    line: Optional[int] = None
    error: Optional[str] = None  # the expectation itself raised
    op: Optional[str] = None  # for a failed single comparison: "==", "is", ...
    left: Optional[str] = None
    right: Optional[str] = None
    value: Optional[str] = None  # for any other failed expression: what it evaluated to


@record
class Declared:
    """A declared exception or warning: class name and optional regex."""

    type: str
    match: Optional[str] = None


@record
class SavedTensor:
    """One tensor an autograd node saved for backward (``tensortrace/saved.py`` reads it)."""

    attr: str  # "self", "other", "result", "tensors[0]" (PyTorch's _saved_* name)
    tensor: Optional[str] = None  # the named tensor it is, when one is
    storage: Optional[str] = None  # its storage label, when the storage has one
    saved_version: Optional[int] = None  # its version when saved (None: unknown, or freed)
    version: Optional[int] = None  # its version now
    stale: bool = False  # changed since it was saved: backward through this node raises
    freed: bool = False  # a backward freed it: backward through this node again raises


@record
class Prediction:
    """Before any backward runs: a backward that will fail, and why.

    ``kind`` is ``backward_will_fail`` (a saved tensor changed since it was
    saved) or ``backward_freed`` (a backward already freed the saved tensors).
    """

    kind: str
    tensor: str  # the named tensor whose backward will fail
    node: Optional[str] = None  # the node whose saved tensor is the cause, e.g. "MulBackward0"
    saved: Optional[str] = None  # that saved tensor's attribute, e.g. "other"
    saved_tensor: Optional[str] = None  # the named tensor it is, when one is
    saved_version: Optional[int] = None
    version: Optional[int] = None
    storage: Optional[str] = None
    changed_at_step: Optional[int] = None  # the step that changed (or freed) it, when the trace shows it
    message: str = ""


@record
class GraphNode:
    """One autograd node of a drawn graph: its name, next nodes and what it saved."""

    id: str  # "N1", "N2", ... in walk order
    name: str  # e.g. "MulBackward0", "AccumulateGrad"
    leaf: Optional[str] = None  # AccumulateGrad: the name of its leaf tensor
    next: Tuple[str, ...] = ()  # ids of next_functions, in order
    saved: Tuple[SavedTensor, ...] = ()  # what it saved for backward


def node_ids(n: int) -> List[str]:
    """The ids of a graph's ``n`` nodes in walk order: "N1", "N2", ..."""
    return [f"N{i}" for i in range(1, n + 1)]


def graph_nodes(names: Sequence[str], leaves: Sequence[Optional[str]], nexts: Sequence[Sequence[int]],
                saved: Sequence[Tuple[SavedTensor, ...]]) -> Tuple[GraphNode, ...]:
    """A graph's nodes in walk order, each from its name, leaf, next nodes (as indexes) and saved tensors."""
    ids = node_ids(len(nexts))
    return tuple([GraphNode(ids[i], names[i], leaves[i], (ids[nxt[0]],) if len(nxt) == 1 else tuple([ids[j] for j in nxt]),
                            saved[i]) for i, nxt in enumerate(nexts)])


@record
class Graph:
    """The autograd graph behind one named tensor, walked from its grad_fn."""

    tensor: str
    root: Optional[str]  # id of the tensor's grad_fn node; None: no grad_fn
    nodes: Tuple[GraphNode, ...] = ()
    truncated: bool = False


@record
class OpTensors:
    """The scenario names of an operation's tensor arguments and results (None: unnamed)."""

    in_: Tuple[Optional[str], ...] = ()
    out: Tuple[Optional[str], ...] = ()


@record
class VersionBump:
    """A tensor whose version counter an operation moved, ``from`` → ``to``."""

    name: Optional[str]
    from_: Optional[int] = None
    to: Optional[int] = None


@record
class OpRecord:
    """One operation a step ran: a call the user wrote (``call``) or an ATen operation (``aten``).

    ``reads``/``writes``/``outputs`` are storage labels: what the tensor
    arguments not marked written live on, what the operation's schema says
    it writes (``Tensor(a!)``), and what its results live on. ``parent`` is
    the index (in ``Step.ops``) of the call an ATen operation ran under.
    """

    level: str  # "call" or "aten"
    name: str  # "torch.Tensor.detach", "aten::zero_", ...
    overload: Optional[str] = None  # ATen overload name ("Tensor" for aten::add_.Tensor); None: default
    parent: Optional[int] = None
    reads: Tuple[str, ...] = ()
    writes: Tuple[str, ...] = ()
    outputs: Tuple[Optional[str], ...] = ()
    tensors: OpTensors = OpTensors()
    version_bumps: Tuple[VersionBump, ...] = ()


@record
class FlowNode:
    """One node of the graph a backward call ran, and the gradients through it.

    ``grad_in`` is what arrived at the node (one entry per output of the
    forward operation; PyTorch's ``grad_outputs``), ``grad_out`` what it
    sent on, one entry per ``next`` edge (PyTorch's ``grad_inputs``); None:
    nothing. ``ran`` is False for a node the call never reached.
    """

    id: str  # "F1", "F2", ... in walk order
    name: str
    next: Tuple[Optional[str], ...] = ()  # ids of next_functions; None: an input that takes no gradient
    grad_in: Tuple[Optional[Values], ...] = ()
    grad_out: Tuple[Optional[Values], ...] = ()
    ran: bool = False
    leaf: Optional[str] = None  # AccumulateGrad: the name of the leaf it adds to
    leaf_grad_before: Optional[Values] = None
    leaf_grad_after: Optional[Values] = None


@record
class Flow:
    """The gradients one backward call (``.backward()``, ``autograd.backward``, ``autograd.grad``) sent."""

    call: str
    roots: Tuple[str, ...] = ()  # ids of the nodes the call started from
    nodes: Tuple[FlowNode, ...] = ()
    omitted: int = 0  # nodes of the graph beyond the recorded ones
    notice: Optional[str] = None


@record
class Step:
    """One step (index 0 is ``setup``) and everything observed after it."""

    index: int
    code: str
    line: Optional[int]
    note: Optional[str] = None
    status: str = "ok"  # "ok", "raised", "timeout", "killed"
    error: Optional[ErrorInfo] = None
    warnings: Tuple[WarningInfo, ...] = ()
    stdout: str = ""
    expectations: Tuple[ExpectationResult, ...] = ()
    raises: Optional[Declared] = None
    warns: Optional[Declared] = None
    raised_as_declared: bool = False  # the error matched ``raises`` (class or a base, and match)
    warned_as_declared: bool = False  # some warning matched ``warns``
    behaved: bool = True
    failures: Tuple[str, ...] = ()  # why the step did not behave as declared
    shown: Optional[Tuple[str, ...]] = None  # names the scenario shows here (None: all)
    tensors: Tuple[TensorState, ...] = ()
    graphs: Tuple[Graph, ...] = ()
    predictions: Tuple[Prediction, ...] = ()  # backwards that will fail, read after the step
    ops: Tuple[OpRecord, ...] = ()  # what the step ran (``--ops``); empty when not recorded
    ops_omitted: int = 0  # operations counted beyond the recorded ones (the bound is tensortrace.ops.MAX_OPS)
    flow: Tuple[Flow, ...] = ()  # one per backward call the step made


@record
class StorageInfo:
    """One allocation the run saw: its label, size, device, address and the names on it."""

    label: str
    nbytes: int
    device: str
    ptr: int
    names: Tuple[str, ...] = ()  # every name seen living on it, in order


@record
class ScenarioInfo:
    """What the scenario says about itself: title, description, tags, file and variant."""

    title: str
    description: Optional[str] = None
    tags: Tuple[str, ...] = ()
    source: Optional[str] = None
    variant: Optional[str] = None


# The layers of the kernel's wall (``tensortrace.confine`` builds them), by the
# names traces record; the wall has a hole unless every essential one is up.
CONFINEMENT_ESSENTIAL = ("closed-descriptors", "no-new-privs", "no-capabilities", "landlock-files", "seccomp")
CONFINEMENT_EXTRA = ("landlock-network", "landlock-scopes")


@record
class Confinement:
    """What the kernel enforced around the child that ran a safe-mode scenario."""

    enforced: Tuple[str, ...] = ()  # layer names, e.g. "landlock-files", "seccomp"
    missing: Tuple[str, ...] = ()  # "layer: why it is not enforced here", one sentence each

    @property
    def complete(self) -> bool:
        """Every layer the wall needs is up."""
        return all(layer in self.enforced for layer in CONFINEMENT_ESSENTIAL)


@record
class Environment:
    """Where the trace was recorded: tool, torch and Python versions, device, safe mode."""

    tensortrace: str
    torch: str
    python: str
    device: str
    safe: bool = True
    confinement: Optional[Confinement] = None  # safe mode only; None under --trust


@record
class Trace:
    """One run of one scenario (or variant): its setup, steps, storages and notices."""

    scenario: ScenarioInfo
    environment: Environment
    setup: Optional[Step] = None
    steps: Tuple[Step, ...] = ()
    storages: Tuple[StorageInfo, ...] = ()
    notices: Tuple[str, ...] = ()  # trace-level remarks, e.g. a shown name never bound
    aborted: Optional[str] = None  # why the run stopped before its last step

    @property
    def passed(self) -> bool:
        """The scenario behaved as declared: setup and every step, run to the end."""
        if self.aborted is not None:
            return False
        if self.setup is not None and not self.setup.behaved:
            return False
        return all(step.behaved for step in self.steps)

    def to_dict(self) -> dict:
        body = _to_plain(self)
        body["passed"] = self.passed
        return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **body}

    def render(self, fmt: str = "console", **options: Any) -> str:
        """This trace as text in ``fmt``; ``options`` as ``render.notebook.render_traces`` takes them."""
        from .render.notebook import render_traces

        return render_traces([self], fmt, **options)

    def _repr_html_(self) -> str:
        from .render.notebook import html

        return html([self])

    def _repr_markdown_(self) -> str:
        from .render.notebook import markdown

        return markdown([self])

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        from .errors import TraceFormatError

        check_format(data)
        body = {k: v for k, v in data.items() if k not in ("format", "format_version", "passed")}
        try:
            return _from_plain(cls, body)
        except (TypeError, KeyError, ValueError) as exc:
            raise TraceFormatError(f"the trace is malformed: {exc}") from None


def check_format(data: Any) -> None:
    """``TraceFormatError`` unless ``data`` says it is a trace document of a version this reads."""
    from .errors import TraceFormatError

    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise TraceFormatError("this is not a tensortrace trace (no 'format: tensortrace.trace')")
    version = data.get("format_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise TraceFormatError(
            f"trace format version {version!r} is not supported (this tensortrace reads "
            f"versions {', '.join(map(str, READABLE_VERSIONS))}); re-run the scenario with this version"
        )


def step_to_dict(step: Step) -> dict:
    """One step as JSON-ready data (the unit of ``--format jsonl``)."""
    return _to_plain(step)


def step_from_dict(data: dict) -> Step:
    return _from_plain(Step, data)


def record_from_dict(cls: type, data: Any, given: Optional[Dict[str, Any]] = None) -> Any:
    """Any record type from its ``to_dict`` form (used for streamed events); the fields in
    ``given`` are taken as they are, already records, and not read from ``data``."""
    if given is None:
        return _from_plain(cls, data)
    return _decoder(cls)(data, given)


def record_to_dict(record: Any, leaving: Tuple[str, ...] = ()) -> Any:
    """A record as JSON-ready data; the fields named in ``leaving`` are None, in their place, to be filled."""
    return to_plain_leaving(record, leaving) if leaving else _to_plain(record)


__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Declared",
    "Environment",
    "ErrorInfo",
    "ExpectationResult",
    "Explanation",
    "Flow",
    "FlowNode",
    "Graph",
    "GraphNode",
    "OpRecord",
    "OpTensors",
    "Prediction",
    "SavedTensor",
    "ScenarioInfo",
    "Step",
    "StorageInfo",
    "Summary",
    "TensorState",
    "Trace",
    "Values",
    "VersionBump",
    "WarningInfo",
    "evolve",
    "step_from_dict",
    "step_to_dict",
]
