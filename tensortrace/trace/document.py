"""The trace document (``--format json``, ``Trace.to_dict``) and its one reader.

A document is one trace, ``{"format", "format_version", <the trace's fields>,
"passed"}``, or several: ``{"format", "format_version", "traces": [...]}``
(version 1 wrote that wrapper without ``format`` and ``format_version``).
Bytes are decoded straight into the records (``documents_from_json``), Python
data is converted into them (``trace_from_dict``); either way every field is
checked against its declaration, and anything else is one ``InvalidRecord``.
"""

import functools
from typing import Annotated, Any, Callable, Dict, List, Literal, Optional, Tuple, Union

import msgspec
from msgspec import Meta, field

from .records import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_ITEMS,
    MAX_TENSORS,
    PARTS,
    READABLE_VERSIONS,
    Environment,
    Index,
    Name,
    Record,
    ScenarioInfo,
    Step,
    StorageInfo,
    TensorState,
    Text,
    Texts,
    evolve,
)
from .validate import InvalidRecord, converted, decoder, decoding, encoder


class Trace(Record):
    """One run of one scenario (or variant): its setup, steps, storages and notices."""

    scenario: ScenarioInfo
    environment: Environment
    setup: Optional[Step] = None
    steps: Annotated[Tuple[Step, ...], Meta(max_length=MAX_ITEMS)] = ()
    storages: Annotated[Tuple[StorageInfo, ...], Meta(max_length=MAX_ITEMS)] = ()
    notices: Texts = ()  # e.g. a shown name never bound
    aborted: Optional[Text] = None  # why the run stopped before its last step

    @property
    def passed(self) -> bool:
        """The scenario behaved as declared: setup and every step, run to the end."""
        if self.aborted is not None:
            return False
        if self.setup is not None and not self.setup.behaved:
            return False
        return all(step.behaved for step in self.steps)

    def to_dict(self) -> dict:
        """The trace document as JSON-ready data.

        That is ``format``, ``format_version``, the fields, and ``passed``.
        """
        return trace_to_dict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "Trace":
        """The trace a ``to_dict`` document (of any readable version) holds.

        ``InvalidRecord`` otherwise.
        """
        return trace_from_dict(data)

    def render(self, fmt: str = "console", **options: Any) -> str:
        """This trace as text in ``fmt``.

        ``options`` as ``render.notebook.render_traces`` takes them.
        """
        from .present import present

        return present("render", [self], fmt, **options)

    def _repr_html_(self) -> str:
        from .present import present

        return present("html", [self])

    def _repr_markdown_(self) -> str:
        from .present import present

        return present("markdown", [self])


RECORDS = (*PARTS, Trace)  # every kind of record a trace document holds


#: In a version 4 document, a tensor whose record an earlier step wrote in full:
#: ``[name, index]``, the same record as tensor ``name`` of the step with that ``index``.
TensorReference = Tuple[Name, Index]
Version = Literal[1, 2, 3, 4]


class DocumentStep(Step):
    """A step as a document holds it: a tensor no step changed is a reference (version 4)."""

    tensors: Annotated[
        Tuple[Union[TensorState, TensorReference], ...], Meta(max_length=MAX_TENSORS)
    ] = ()


class TraceDocument(Trace, kw_only=True):
    """A trace as its document holds it: its fields, with the format's head and ``passed``."""

    setup: Optional[DocumentStep] = None
    steps: Annotated[Tuple[DocumentStep, ...], Meta(max_length=MAX_ITEMS)] = ()
    format: Literal["tensortrace.trace"]
    format_version: Version
    passed_: Optional[bool] = field(default=None, name="passed")  # derived: read, never trusted


class TracesDocument(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """Several traces (variants, or several scenarios) in one document."""

    traces: Annotated[Tuple[TraceDocument, ...], msgspec.Meta(min_length=1, max_length=MAX_ITEMS)]
    format: Optional[Literal["tensortrace.trace"]] = None  # version 1 wrote neither
    format_version: Optional[Version] = None


class _Head(msgspec.Struct, gc=False):
    """What a document says it is, read before the rest (unknown fields skipped)."""

    format: Any = None
    format_version: Any = None
    traces: msgspec.Raw = msgspec.Raw(b"")  # empty: no such key


_TRACE_FIELDS = Trace.__struct_fields__
_STEP_FIELDS = Step.__struct_fields__
_encode = encoder().encode
_plain = msgspec.json.decode


@functools.lru_cache(maxsize=None)
def _decode(kind: type) -> Callable[[bytes], Any]:
    """The decoder of ``kind``, made on first use (making one resolves every type it reaches)."""
    return decoder(kind).decode


def trace_to_dict(trace: Trace, references: bool = True) -> Dict[str, Any]:
    """The document of one trace as JSON-ready data; ``references=False`` writes every tensor
    record in full in every step, as versions 1 to 3 did (the body of such a document)."""
    shared = with_references(trace) if references else trace
    body = _plain(_encode(shared))  # lists and dicts, as JSON has them: both ways in C
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **body, "passed": trace.passed}


#: A record of the step before, where it is written in full, and its encoding once made.
_Held = Tuple[TensorState, Tuple[str, int], Optional[bytes]]


def with_references(trace: Trace) -> Trace:
    """The trace as a document writes it: a tensor whose record is the one it had in the step
    before (unchanged, the recorder shares it; or equal, read back from a file) is written as
    ``[name, index]``, naming the step where that record is written in full. So a reference
    always stands for "unchanged since the step before", and one hop reaches its record.
    Not a trace to use: its steps hold references where records belong, which only the
    encoder reads.
    """
    steps = ([trace.setup] if trace.setup is not None else []) + list(trace.steps)
    if len({step.index for step in steps}) != len(steps):
        return trace  # indices that repeat could not say which step is meant
    # the step before's records by name: (record, where written in full, its encoding or None)
    before: Dict[str, _Held] = {}
    written = []
    for step in steps:
        now: Dict[str, Optional[_Held]] = {}
        items: List[Any] = []
        for state in step.tensors:
            where, encoded = (state.name, step.index), None
            held = before.get(state.name)
            if held is not None:
                old, old_where, old_encoded = held
                if old is state:
                    where = old_where
                else:
                    encoded = _encode(state)
                    if (old_encoded if old_encoded is not None else _encode(old)) == encoded:
                        where = old_where
            items.append(state if where[1] == step.index else where)
            # a name that repeats in a step could not say which record is meant: never referred to
            now[state.name] = (state, where, encoded) if state.name not in now else None
        before = {name: held for name, held in now.items() if held is not None}
        written.append(evolve(step, tensors=tuple(items)))
    setup = written.pop(0) if trace.setup is not None else None
    return evolve(trace, setup=setup, steps=tuple(written))


def _resolved(document: "TraceDocument") -> Tuple[Optional[Step], Tuple[Step, ...]]:
    """The document's setup and steps with every tensor reference replaced by its record."""
    full: Dict[int, Dict[str, TensorState]] = {}  # a step's index -> its records by name
    refers = document.format_version >= 4

    def step(doc: DocumentStep, path: str) -> Step:
        states: List[TensorState] = []
        for i, item in enumerate(doc.tensors):
            if type(item) is tuple:
                name, index = item
                state = full.get(index, {}).get(name) if refers else None
                if state is None:
                    why = (
                        f"a reference to tensor {name!r} of step {index}, which no earlier "
                        "step holds"
                        if refers
                        else "a reference, which only version 4 documents hold"
                    )
                    raise InvalidRecord(f"{path}.tensors[{i}]", why)
                item = state
            states.append(item)
        full[doc.index] = {state.name: state for state in states}
        fields = {name: getattr(doc, name) for name in _STEP_FIELDS}
        return Step(**{**fields, "tensors": tuple(states)})

    setup = step(document.setup, "$.setup") if document.setup is not None else None
    steps = tuple(step(s, f"$.steps[{i}]") for i, s in enumerate(document.steps))
    return setup, steps


class NotThisFormat(InvalidRecord):
    """Data that is no trace document at all, or one of a version this does not read."""


def check_format(head: Any) -> None:
    """``InvalidRecord`` unless ``head`` names a trace document of a version this reads.

    ``head`` is a dict, or the head read from bytes.
    """
    fmt, version = (
        (head.get("format"), head.get("format_version"))
        if isinstance(head, dict)
        else (getattr(head, "format", None), getattr(head, "format_version", None))
    )
    if fmt != FORMAT_NAME:
        raise NotThisFormat(
            "$.format", "this is not a tensortrace trace (no 'format: tensortrace.trace')"
        )
    if type(version) is not int or version not in READABLE_VERSIONS:
        shown = (
            version
            if type(version) in (int, str, float, bool, type(None))
            else type(version).__name__
        )
        raise NotThisFormat(
            "$.format_version",
            f"trace format version {shown!r} is not supported (this "
            f"tensortrace reads versions {', '.join(map(str, READABLE_VERSIONS))}); "
            "re-run the scenario with this version",
        )


def _trace(document: TraceDocument) -> Trace:
    setup, steps = _resolved(document)
    fields = {name: getattr(document, name) for name in _TRACE_FIELDS}
    return Trace(**{**fields, "setup": setup, "steps": steps})


def trace_from_dict(data: Any) -> Trace:
    """One trace from its document as Python data (``json.loads`` of ``--format json``)."""
    check_format(data)
    return _trace(converted(data, TraceDocument))


def traces_from_dict(data: Any) -> List[Trace]:
    """The traces of a document as Python data: one trace, or a ``{"traces": [...]}`` wrapper."""
    if not (isinstance(data, dict) and "traces" in data):
        return [trace_from_dict(data)]
    if "format" in data or "format_version" in data:
        check_format(data)
    return [_trace(t) for t in converted(data, TracesDocument).traces]


def traces_from_json(text: bytes) -> List[Trace]:
    """The traces of a document's bytes, decoded straight into the records."""
    if not text.strip():
        raise NotThisFormat("$", "this is not a tensortrace trace (the file is empty)")
    try:
        head = decoding(_decode(_Head), text)
    except InvalidRecord as exc:
        if exc.path == "$" and exc.reason.startswith("expected object"):
            raise NotThisFormat(
                "$", "this is not a tensortrace trace (not a JSON object)"
            ) from None
        raise
    if not head.traces:
        check_format(head)
        return [_trace(decoding(_decode(TraceDocument), text))]
    if head.format is not None or head.format_version is not None:
        check_format(head)
    return [_trace(t) for t in decoding(_decode(TracesDocument), text).traces]


def record_to_dict(record: Any) -> Any:
    """A record (or a tuple of them) as JSON-ready data, as the trace document holds it."""
    return msgspec.json.decode(encoder().encode(record))


def record_from_dict(kind: type, data: Any) -> Any:
    """A record of type ``kind`` from its JSON-ready data.

    Every field is checked (``InvalidRecord``).
    """
    return converted(data, kind)


def step_to_dict(step: Step) -> dict:
    """One step as JSON-ready data (the unit of ``--format jsonl``)."""
    return record_to_dict(step)


def step_from_dict(data: Any) -> Step:
    """One step from its JSON-ready data, every field checked (``InvalidRecord``)."""
    return record_from_dict(Step, data)
