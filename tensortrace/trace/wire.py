"""The events of a run and their one wire form: JSON lines, decoded into the records.

A run emits ``start`` (scenario and environment), one ``step`` per finished
step (setup is step 0), and ``end`` (storages, notices, why it stopped early);
a child adds ``unusable`` (the input cannot be run) and ``crashed`` (the tool
itself failed). Each event is a tagged record: ``{"event": "start", ...}``.

The pipe's codec is JSON lines, never pickle: the child runs untrusted code,
so the parent decodes data, not objects, straight into the declared records
(msgspec, in C), and bounds what it accepts. On the pipe a tensor whose record
is the very record of the previous step (the snapshot cache reuses it) travels
as its index in that step, a bare integer, so that an unchanged tensor is
neither encoded nor decoded again and stays one shared record in the parent;
a graph travels as columns (node names and saved tensors once each, per node
only small indexes). The decoder checks every index.
"""

from typing import Annotated, Any, Dict, List, Optional, Tuple, Union

import msgspec
from msgspec import Meta, field

from .records import (
    MAX_ITEMS,
    MAX_NODES,
    MAX_TENSORS,
    Environment,
    Graph,
    GraphNode,
    Index,
    Name,
    Record,
    SavedTensor,
    ScenarioInfo,
    Step,
    StorageInfo,
    TensorState,
    Text,
    Texts,
    graph_nodes,
    node_ids,
)
from .validate import InvalidRecord, decoder, decoding, encoder, value_count


class Start(Record, tag="start", tag_field="event"):
    """The run began: what the scenario is and where it runs."""

    scenario: ScenarioInfo
    environment: Environment


class End(Record, tag="end", tag_field="event"):
    """The run is over: the storages it saw, its notices, why it stopped early."""

    storages: Annotated[Tuple[StorageInfo, ...], Meta(max_length=MAX_ITEMS)]
    notices: Texts
    aborted: Optional[Text]


class Unusable(Record, tag="unusable", tag_field="event"):
    """The child found the input unusable (exit status 2); the message is for the user."""

    message: Text


class Crashed(Record, tag="crashed", tag_field="event"):
    """The tool failed in the child; the message says how."""

    message: Text


Event = Union[Start, Step, End]
ChildEvent = Union[Start, Step, End, Unusable, Crashed]

# --- the wire's own forms of a step ------------------------------------------------


class _Columns(Record):
    """A graph's nodes as columns: each distinct name and saved tensor once, per node indexes."""

    names: Annotated[Tuple[Name, ...], Meta(max_length=MAX_NODES)]
    name: Annotated[Tuple[Index, ...], Meta(max_length=MAX_NODES)]
    leaf: Annotated[Tuple[Optional[Name], ...], Meta(max_length=MAX_NODES)]
    next: Annotated[
        Tuple[Annotated[Tuple[Index, ...], Meta(max_length=MAX_NODES)], ...],
        Meta(max_length=MAX_NODES),
    ]
    saved: Annotated[Tuple[SavedTensor, ...], Meta(max_length=MAX_ITEMS)]
    sets: Annotated[
        Tuple[Annotated[Tuple[Index, ...], Meta(max_length=MAX_ITEMS)], ...],
        Meta(max_length=MAX_NODES),
    ]
    kept: Annotated[Tuple[Index, ...], Meta(max_length=MAX_NODES)]


class _WireGraph(Record):
    """A graph on the pipe: as columns when its ids are N1, N2, ... in order, else its nodes."""

    tensor: Name
    root: Optional[Name]
    truncated: bool = False
    nodes: Annotated[Tuple[GraphNode, ...], Meta(max_length=MAX_NODES)] = ()
    columns: Optional[_Columns] = field(default=None, name="$nodes")


class _WireStep(Step):
    """A step on the pipe: a tensor may be the index of the previous step's very record."""

    tensors: Annotated[Tuple[Union[Index, TensorState], ...], Meta(max_length=MAX_TENSORS)] = ()
    graphs: Annotated[Tuple[_WireGraph, ...], Meta(max_length=MAX_TENSORS)] = ()


class _StepEvent(Record, tag="step", tag_field="event"):
    step: _WireStep


_FIELDS = list(Step.__struct_fields__)
_TENSORS, _GRAPHS = _FIELDS.index("tensors"), _FIELDS.index("graphs")
_encode = encoder().encode

# Bounds on what the parent decodes. The reader bounds a line's bytes; these
# bound the memory the decoded records may take, before a line is decoded:
# each value (``value_count``) may become an object of up to ~100 bytes, and
# each byte of text up to 4 (a string holding one character beyond U+FFFF is
# stored 4 bytes a character). A real step's event holds a few thousand
# values; a graph of 250,000 nodes about 1.3 million.
MAX_EVENT_VALUES = 3_000_000
VALUE_COST = 96  # bytes of memory charged per value
MAX_STREAM_COST = 320 * 1024 * 1024  # bytes of memory one run's records may take, at most


def memory_cost(line: bytes, values: int) -> int:
    """At most how many bytes of memory decoding ``line`` (of ``values`` values) may take: its
    text once, or four times where it holds any character beyond ASCII (raw or escaped)."""
    wide = not line.isascii() or b"\\u" in line
    return len(line) * (4 if wide else 1) + VALUE_COST * values


class InvalidEvent(InvalidRecord):
    """An event that breaks its declaration; ``event`` is its kind when that was readable."""

    def __init__(self, event: Optional[str], path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.event = event


def encode(event: ChildEvent) -> bytes:
    """One event as one line of JSON (the wire form between child and parent)."""
    return Encoder().encode(event)


def decode(line: bytes) -> ChildEvent:
    """The event on one line from the child; ``InvalidEvent`` for anything else."""
    return Decoder().decode(line)


class Encoder:
    """``encode``, sending a tensor record that the previous step also sent as a reference to it."""

    def __init__(self) -> None:
        self._previous: Tuple[TensorState, ...] = ()  # held, so that ids stay unique
        self._index: Dict[int, int] = {}

    def encode(self, event: ChildEvent) -> bytes:
        if type(event) is not Step:
            return _encode(event) + b"\n"
        known = self._index.get
        fields = list(msgspec.structs.astuple(event))
        fields[_TENSORS] = tuple(
            [at if (at := known(id(t))) is not None else t for t in event.tensors]
        )
        fields[_GRAPHS] = tuple([graph_columns(g) for g in event.graphs])
        self._previous = event.tensors
        self._index = {id(t): i for i, t in enumerate(event.tensors)}
        return _encode(_StepEvent(_WireStep(*fields))) + b"\n"


_decoders: List[Any] = []  # the event decoder, made on first use: only a parent decodes events


def _decode_event(line: bytes) -> Any:
    if not _decoders:
        _decoders.append(decoder(Union[Start, _StepEvent, End, Unusable, Crashed]).decode)
    return _decoders[0](line)


class Decoder:
    """``decode`` for one child's stream: every value counted, every field and index checked."""

    def __init__(
        self, max_event_values: int = MAX_EVENT_VALUES, max_stream_cost: int = MAX_STREAM_COST
    ) -> None:
        self._previous: Tuple[TensorState, ...] = ()
        self._budget = max_stream_cost
        self._max_event = max_event_values

    def decode(self, line: bytes) -> ChildEvent:
        count = value_count(line)
        if count > self._max_event:
            raise InvalidEvent(None, "$", f"an event of more than {self._max_event:,} values")
        self._budget -= memory_cost(line, count)
        if self._budget < 0:
            raise InvalidEvent(
                None, "$", f"more than one run may send (records of {MAX_STREAM_COST >> 20} MiB)"
            )
        try:
            event = decoding(_decode_event, line)
        except InvalidRecord as exc:
            raise _blamed(exc, line) from None
        if type(event) is not _StepEvent:
            return event
        try:
            step = self._step(event.step)
        except InvalidRecord as exc:
            raise InvalidEvent("step", exc.path, exc.reason) from None
        self._previous = step.tensors
        return step

    def _step(self, wire: _WireStep) -> Step:
        fields = list(msgspec.structs.astuple(wire))
        previous, count = self._previous, len(self._previous)
        tensors = []
        for i, item in enumerate(wire.tensors):
            if type(item) is int:
                if item >= count:
                    raise InvalidRecord(
                        f"$.tensors[{i}]",
                        f"a reference to tensor {item} of a previous step that has {count}",
                    )
                item = previous[item]
            tensors.append(item)
        fields[_TENSORS] = tuple(tensors)
        fields[_GRAPHS] = tuple(
            [graph_from_wire(g, f"$.graphs[{i}]") for i, g in enumerate(wire.graphs)]
        )
        return Step(*fields)


_KINDS = {
    b'"start"': "start",
    b'"step"': "step",
    b'"end"': "end",
    b'"unusable"': "unusable",
    b'"crashed"': "crashed",
}


def _blamed(exc: InvalidRecord, line: bytes) -> InvalidEvent:
    """The error with the event's kind, and a step's path read from the step itself."""
    if exc.path == "$.step" or exc.path.startswith(("$.step.", "$.step[")):
        return InvalidEvent("step", exc.under("$.step").path, exc.reason)
    head = line[:40].replace(b" ", b"")
    kind = next((k for tag, k in _KINDS.items() if head.startswith(b'{"event":' + tag)), None)
    return InvalidEvent(kind, exc.path, exc.reason)


# --- graphs as columns ----------------------------------------------------------------


def graph_columns(graph: Graph) -> _WireGraph:
    """A graph as the pipe sends it.

    The plain record where its ids are not "N1", "N2", ... in order.
    """
    nodes = graph.nodes
    ids = node_ids(len(nodes))
    plain = _WireGraph(graph.tensor, graph.root, graph.truncated, nodes)
    if [node.id for node in nodes] != ids:
        return plain
    index = dict(zip(ids, range(len(ids))))
    names: Dict[str, int] = {}
    # by the id of a node's saved tuple (the walk shares equal ones): its index
    sets: Dict[int, int] = {}
    kept_sets: List[Any] = []  # those tuples, alive while their ids are keys
    name_at: List[int] = []
    nexts: List[Tuple[int, ...]] = []
    kept: List[int] = []
    try:
        for node in nodes:
            at = names.get(node.name)
            name_at.append(at if at is not None else names.setdefault(node.name, len(names)))
            nxt = node.next
            nexts.append((index[nxt[0]],) if len(nxt) == 1 else tuple([index[n] for n in nxt]))
            k = sets.get(id(node.saved))
            if k is None:
                k = sets[id(node.saved)] = len(kept_sets)
                kept_sets.append(node.saved)
            kept.append(k)
    except KeyError:  # a next node that is not in the graph: only the plain record says it
        return plain
    saved: Dict[SavedTensor, int] = {}
    for group in kept_sets:
        for record in group:
            saved.setdefault(record, len(saved))
    columns = _Columns(
        names=tuple(names),
        name=tuple(name_at),
        leaf=tuple([node.leaf for node in nodes]),
        next=tuple(nexts),
        saved=tuple(saved),
        sets=tuple([tuple([saved[s] for s in group]) for group in kept_sets]),
        kept=tuple(kept),
    )
    return _WireGraph(graph.tensor, graph.root, graph.truncated, (), columns)


def graph_from_wire(wire: _WireGraph, at: str = "$") -> Graph:
    """The graph ``graph_columns`` sent, every index checked against what it indexes."""
    columns = wire.columns
    if columns is None:
        return Graph(wire.tensor, wire.root, wire.nodes, wire.truncated)
    if wire.nodes:
        raise InvalidRecord(f"{at}.nodes", "a graph sent both as nodes and as columns")
    n = len(columns.name)
    where = f"{at}.$nodes"
    for key in ("leaf", "next", "kept"):
        if len(getattr(columns, key)) != n:
            raise InvalidRecord(
                f"{where}.{key}", f"{len(getattr(columns, key))} entries for {n} nodes"
            )
    _below(columns.name, len(columns.names), f"{where}.name")
    _below(columns.kept, len(columns.sets), f"{where}.kept")
    for i, group in enumerate(columns.sets):
        _below(group, len(columns.saved), f"{where}.sets[{i}]")
    for i, nxt in enumerate(columns.next):
        _below(nxt, n, f"{where}.next[{i}]")
    saved = columns.saved
    sets = [tuple([saved[i] for i in group]) for group in columns.sets]
    names = columns.names
    nodes = graph_nodes(
        [names[i] for i in columns.name],
        columns.leaf,
        columns.next,
        [sets[k] for k in columns.kept],
    )
    return Graph(wire.tensor, wire.root, nodes, wire.truncated)


def _below(indexes: Tuple[int, ...], bound: int, at: str) -> None:
    if indexes and max(indexes) >= bound:
        raise InvalidRecord(at, f"an index {max(indexes)} past the {bound} it indexes")
