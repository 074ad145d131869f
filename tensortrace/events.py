"""The events of a run, their one codec, and the one assembler of events into a trace.

A run emits ``start`` (scenario and environment), one ``step`` per finished
step (setup is step 0), and ``end`` (storages, notices, why it stopped early).
The same three names are used by the tracer in-process, on the pipe from the
forked child, and in the ``--format jsonl`` stream. The child adds two control
events that never reach a trace: ``ran`` (a step's own code is done, and the
tool's recording, which no step limit charges, begins), ``unusable`` (the input
cannot be run, e.g. a device this machine lacks) and ``crashed`` (the tool
itself failed).

The pipe's codec is JSON lines, never pickle: the child runs untrusted code,
so the parent decodes data, not objects, and bounds what it accepts
(``MAX_EVENT_BYTES`` for one event, ``MAX_TRACE_BYTES`` for one scenario).
On the pipe, ``Encoder`` and ``Decoder`` send a tensor whose record is the
very record of the previous step (the snapshot cache reuses it) as its
index in that step, a bare integer where a record is an object, so that an
unchanged tensor is neither encoded nor decoded again, and costs the JSON
parser a number; the decoder checks every index. A graph
travels as columns (``graph_columns``): node names and saved-tensor records
once each, and per node only small indexes, so that a 100,000-node graph costs
one pass to send and one to receive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import chain
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from .codec import one_line_encoder
from .collector import paused_gc
from .model import (Environment, Graph, SavedTensor, ScenarioInfo, Step, StorageInfo, TensorState, Trace, graph_nodes, node_ids,
                    record_from_dict, record_to_dict)

MAX_EVENT_BYTES = 32 * 1024 * 1024  # one event from the child; a step is far smaller
MAX_TRACE_BYTES = 256 * 1024 * 1024  # everything one scenario's child may send


@dataclass(frozen=True)
class Start:
    scenario: ScenarioInfo
    environment: Environment


@dataclass(frozen=True)
class End:
    storages: Tuple[StorageInfo, ...]
    notices: Tuple[str, ...]
    aborted: Optional[str]


@dataclass(frozen=True)
class Unusable:
    """The child found the input unusable (exit status 2); the message is for the user."""

    message: str


@dataclass(frozen=True)
class Crashed:
    """The tool failed in the child; the message says how."""

    message: str


Event = Union[Start, Step, End]
ChildEvent = Union[Start, Step, End, Unusable, Crashed]


def size_text(nbytes: int) -> str:
    """``256 MiB``, ``195 KiB``: a byte count as a person reads it."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.0f} {unit}"
    return f"{nbytes} bytes"


class EventError(ValueError):
    """A line from the child that is not a well-formed event."""


# --- the codec ----------------------------------------------------------------------


_wire = one_line_encoder(ensure_ascii=True)  # the pipe's JSON, ASCII only; its C encoder made once


def encode(event: ChildEvent) -> bytes:
    """One event as one line of JSON (the wire form between child and parent)."""
    if isinstance(event, Step):
        data = {"event": "step", "step": record_to_dict(event)}
    elif isinstance(event, Start):
        data = {"event": "start", "scenario": record_to_dict(event.scenario), "environment": record_to_dict(event.environment)}
    elif isinstance(event, End):
        data = {"event": "end", "storages": record_to_dict(event.storages), "notices": list(event.notices), "aborted": event.aborted}
    elif isinstance(event, (Unusable, Crashed)):
        data = {"event": type(event).__name__.lower(), "message": event.message}
    else:  # pragma: no cover - a programming error
        raise TypeError(f"not an event: {event!r}")
    return _wire(data).encode("ascii") + b"\n"


def decode(line: bytes) -> ChildEvent:
    """The event on one line from the child; ``EventError`` for anything else."""
    return Decoder().decode(line)


_STEP_OWN = ("tensors", "graphs")  # a step's fields that the pipe writes its own way


class Encoder:
    """``encode``, sending a tensor record that the previous step also sent as a reference to it."""

    def __init__(self) -> None:
        self._previous: Tuple[TensorState, ...] = ()  # held, so that ids stay unique
        self._index: Dict[int, int] = {}

    def encode(self, event: ChildEvent) -> bytes:
        if not isinstance(event, Step):
            return encode(event)
        with paused_gc():  # a large graph makes many objects, all kept until the line is written
            return self._step(event)

    def _step(self, event: Step) -> bytes:
        data = record_to_dict(event, leaving=_STEP_OWN)
        data["graphs"] = [graph_columns(g) for g in event.graphs]
        known = self._index.get
        data["tensors"] = [at if (at := known(id(t))) is not None else record_to_dict(t) for t in event.tensors]
        self._previous = event.tensors
        self._index = {id(t): i for i, t in enumerate(event.tensors)}
        return _wire({"event": "step", "step": data}).encode("ascii") + b"\n"


class Decoder:
    """``decode`` for one child's stream, resolving a tensor sent as an index against the previous step."""

    def __init__(self) -> None:
        self._previous: Tuple[TensorState, ...] = ()

    def decode(self, line: bytes) -> ChildEvent:
        try:
            with paused_gc():  # a large graph makes many objects, all kept in the event
                event = _decode(json.loads(line), self._tensors)
        except EventError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            raise EventError(f"a malformed event: {type(exc).__name__}: {exc}") from None
        if isinstance(event, Step):
            self._previous = event.tensors
        return event

    def _tensors(self, items: Any) -> Tuple[TensorState, ...]:
        if not isinstance(items, list):
            raise TypeError(f"expected a list of tensors, got {type(items).__name__}")
        out = []
        previous = self._previous
        count = len(previous)
        for item in items:
            if type(item) is not int:  # a record (the codec refuses anything but an object)
                out.append(record_from_dict(TensorState, item))
            elif 0 <= item < count:
                out.append(previous[item])
            else:
                raise ValueError(f"a reference to tensor {item!r} of a previous step that has {count}")
        return tuple(out)


def _decode(data: Any, tensors: Callable[[Any], Tuple[TensorState, ...]]) -> ChildEvent:
    kind = data["event"]
    if kind == "step":
        body = data["step"]
        if type(body) is not dict:
            raise TypeError(f"expected an object for the step, got {type(body).__name__}")
        items = body.get("tensors", [])
        graphs = body.get("graphs", [])
        if not isinstance(graphs, list):
            raise TypeError(f"expected a list of graphs, got {type(graphs).__name__}")
        return record_from_dict(Step, body, given={"tensors": tensors(items), "graphs": tuple(graph_from_columns(g) for g in graphs)})
    if kind == "start":
        return Start(record_from_dict(ScenarioInfo, data["scenario"]), record_from_dict(Environment, data["environment"]))
    if kind == "end":
        storages = tuple(record_from_dict(StorageInfo, s) for s in data["storages"])
        return End(storages=storages, notices=tuple(str(n) for n in data["notices"]), aborted=data["aborted"])
    if kind in ("unusable", "crashed"):
        message = str(data["message"])
        return Unusable(message) if kind == "unusable" else Crashed(message)
    raise EventError(f"an unknown event {kind!r}")


class LineReader:
    """Splits a byte stream into lines, finding each newline once (linear in the bytes)."""

    def __init__(self, max_line: int = MAX_EVENT_BYTES) -> None:
        self.buffer = bytearray()
        self.scanned = 0
        self.max_line = max_line

    def feed(self, chunk: bytes) -> List[bytes]:
        """The complete lines that ``chunk`` finishes; ``EventError`` when one grows past the cap."""
        self.buffer += chunk
        lines: List[bytes] = []
        start = 0
        while True:
            end = self.buffer.find(b"\n", max(start, self.scanned))
            if end < 0:
                break
            lines.append(bytes(self.buffer[start:end]))
            start = end + 1
        if start:
            del self.buffer[:start]
        self.scanned = len(self.buffer)
        if self.scanned > self.max_line:
            raise EventError(f"an event larger than {size_text(self.max_line)}")
        return lines


# --- graphs as columns ----------------------------------------------------------------

_NODES = "$nodes"


def graph_columns(graph: Graph) -> Dict[str, Any]:
    """A graph as the pipe sends it; the plain record where its ids are not "N1", "N2", ... in order."""
    nodes = graph.nodes
    ids = node_ids(len(nodes))
    if [node.id for node in nodes] != ids:
        return record_to_dict(graph)
    index = dict(zip(ids, range(len(ids))))
    names: Dict[str, int] = {}
    saved: Dict[SavedTensor, int] = {}
    sets: Dict[int, int] = {}  # by the id of a node's saved tuple (the walk shares equal ones): its index
    kept_sets: List[Any] = []  # those tuples, alive while their ids are keys
    name_at: List[int] = []
    nexts: List[List[int]] = []
    kept: List[int] = []
    try:
        for node in nodes:
            at = names.get(node.name)
            name_at.append(at if at is not None else names.setdefault(node.name, len(names)))
            nxt = node.next
            nexts.append([index[nxt[0]]] if len(nxt) == 1 else [index[n] for n in nxt])
            k = sets.get(id(node.saved))
            if k is None:
                k = sets[id(node.saved)] = len(kept_sets)
                kept_sets.append(node.saved)
            kept.append(k)
    except KeyError:  # a next node that is not in the graph: only the plain record says it
        return record_to_dict(graph)
    for group in kept_sets:
        for record in group:
            saved.setdefault(record, len(saved))
    return {
        "tensor": graph.tensor, "root": graph.root, "truncated": graph.truncated,
        _NODES: {
            "names": list(names), "name": name_at, "leaf": [node.leaf for node in nodes], "next": nexts,
            "saved": [record_to_dict(s) for s in saved], "sets": [[saved[s] for s in group] for group in kept_sets],
            "kept": kept,
        },
    }


def graph_from_columns(data: Any) -> Graph:
    """The graph ``graph_columns`` sent, every index checked (the child is not trusted)."""
    if not isinstance(data, dict) or _NODES not in data:
        return record_from_dict(Graph, data)
    columns = data[_NODES]
    names, name_at, leaves, nexts = columns["names"], columns["name"], columns["leaf"], columns["next"]
    kept = columns["kept"]
    n = len(name_at)
    _check_list(names, str, None, "node names")
    _check_list(name_at, int, len(names), "node name indexes")
    _check_list(kept, int, len(columns["sets"]), "saved-tensor sets")
    if not (len(leaves) == len(nexts) == len(kept) == n):
        raise ValueError("graph columns of different lengths")
    _check_list(leaves, (str, type(None)), None, "leaf names")
    saved = [record_from_dict(SavedTensor, s) for s in _list(columns["saved"], "saved tensors")]
    sets = []
    for group in _list(columns["sets"], "saved-tensor sets"):
        _check_list(group, int, len(saved), "a saved-tensor set")
        sets.append(tuple(saved[i] for i in group))
    _list(nexts, "next nodes")
    if not set(map(type, nexts)) <= {list}:
        raise TypeError("expected lists of next nodes")
    _check_list(list(chain.from_iterable(nexts)), int, n, "next nodes")
    nodes = graph_nodes([names[i] for i in name_at], leaves, nexts, [sets[k] for k in kept])
    return Graph(tensor=str(data["tensor"]), root=data["root"] if data["root"] is None else str(data["root"]),
                 nodes=nodes, truncated=bool(data["truncated"]))


def _list(value: Any, what: str) -> list:
    if type(value) is not list:
        raise TypeError(f"expected a list of {what}, got {type(value).__name__}")
    return value


def _check_list(value: Any, kind: Any, bound: Optional[int], what: str) -> None:
    """A list of ``kind`` (exactly: no bool for int), each below ``bound`` and not negative when given."""
    _list(value, what)
    kinds = set(kind) if isinstance(kind, tuple) else {kind}
    if not set(map(type, value)) <= kinds:
        raise TypeError(f"expected {what}")
    if bound is not None and value and not (0 <= min(value) and max(value) < bound):
        raise ValueError(f"{what} out of range")


# --- the assembler --------------------------------------------------------------------


class Assembler:
    """Events received so far, as a trace that can be finished at any point.

    The in-process tracer and the runner both build traces here, so a trace cut
    short (a timeout, a killed child, Ctrl-C) has the same shape as a whole one.
    """

    def __init__(
        self,
        on_start: Optional[Callable[[Trace], None]] = None,
        on_step: Optional[Callable[[Trace, Step], None]] = None,
    ) -> None:
        self.start: Optional[Start] = None
        self.setup: Optional[Step] = None
        self.steps: List[Step] = []
        self.end: Optional[End] = None
        self.on_start = on_start
        self.on_step = on_step

    @property
    def finished(self) -> bool:
        return self.end is not None

    def add(self, event: Event) -> None:
        if isinstance(event, Step):
            if event.index == 0:
                self.setup = event
            else:
                self.steps.append(event)
            if self.on_step:
                self.on_step(self.trace(), event)
        elif isinstance(event, Start):
            self.start = event
            if self.on_start:
                self.on_start(self.trace())
        elif isinstance(event, End):
            self.end = event

    def trace(self, aborted: Optional[str] = None) -> Trace:
        start, end = self.start, self.end
        return Trace(
            scenario=start.scenario if start else ScenarioInfo(title="(not started)"),
            environment=start.environment if start else Environment(tensortrace="", torch="", python="", device=""),
            setup=self.setup,
            steps=tuple(self.steps),
            storages=end.storages if end else (),
            notices=end.notices if end else (),
            aborted=aborted if aborted is not None else (end.aborted if end else None),
        )
