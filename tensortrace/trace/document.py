"""The trace document (``--format json``, ``Trace.to_dict``) and its one reader.

A document is one trace, ``{"format", "format_version", <the trace's fields>,
"passed"}``, or several: ``{"format", "format_version", "traces": [...]}``
(version 1 wrote that wrapper without ``format`` and ``format_version``).
Bytes are decoded straight into the records (``documents_from_json``), Python
data is converted into them (``trace_from_dict``); either way every field is
checked against its declaration, and anything else is one ``InvalidRecord``.
"""

import functools
from typing import Annotated, Any, Callable, Dict, List, Literal, Optional, Tuple

import msgspec
from msgspec import Meta, field

from .records import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_ITEMS,
    PARTS,
    READABLE_VERSIONS,
    Environment,
    Record,
    ScenarioInfo,
    Step,
    StorageInfo,
    Text,
    Texts,
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


class TraceDocument(Trace, kw_only=True):
    """A trace as its document holds it: its fields, with the format's head and ``passed``."""

    format: Literal["tensortrace.trace"]
    format_version: Literal[1, 2, 3]
    passed_: Optional[bool] = field(default=None, name="passed")  # derived: read, never trusted


class TracesDocument(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """Several traces (variants, or several scenarios) in one document."""

    traces: Annotated[Tuple[TraceDocument, ...], msgspec.Meta(min_length=1, max_length=MAX_ITEMS)]
    format: Optional[Literal["tensortrace.trace"]] = None  # version 1 wrote neither
    format_version: Optional[Literal[1, 2, 3]] = None


class _Head(msgspec.Struct, gc=False):
    """What a document says it is, read before the rest (unknown fields skipped)."""

    format: Any = None
    format_version: Any = None
    traces: msgspec.Raw = msgspec.Raw(b"")  # empty: no such key


_TRACE_FIELDS = len(Trace.__struct_fields__)
_encode = encoder().encode
_plain = msgspec.json.decode


@functools.lru_cache(maxsize=None)
def _decode(kind: type) -> Callable[[bytes], Any]:
    """The decoder of ``kind``, made on first use (making one resolves every type it reaches)."""
    return decoder(kind).decode


def trace_to_dict(trace: Trace) -> Dict[str, Any]:
    """The document of one trace as JSON-ready data."""
    body = _plain(_encode(trace))  # lists and dicts, as JSON has them: both ways in C
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **body, "passed": trace.passed}


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
    return Trace(*msgspec.structs.astuple(document)[:_TRACE_FIELDS])


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
