"""The events of a run (declared in ``trace.wire``), and the one assembler of events into a trace.

A run emits ``start`` (scenario and environment), one ``step`` per finished
step (setup is step 0), and ``end`` (storages, notices, why it stopped early).
The same three names are used by the tracer in-process, on the pipe from the
forked child, and in the ``--format jsonl`` stream. The child adds two control
events that never reach a trace: ``unusable`` (the input cannot be run, e.g. a
device this machine lacks) and ``crashed`` (the tool itself failed). Between
events it also sends the line ``ran N`` when step N's own code is done, so that
the parent stops the step's clock; the runner reads it before any decoding
(``tensortrace.run.child.ran_index``), and it is not an event.

The parent trusts nothing from the child: every line is bounded in bytes
(``MAX_EVENT_BYTES``, and ``MAX_TRACE_BYTES`` for the stream), in values and
in depth, and decoded into the typed records (``tensortrace.trace.wire``);
the ``Assembler`` then accepts only the events the scenario the parent loaded
can produce, in order, and shows that scenario's code, not the child's.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

from .document import Trace
from .records import Environment, ScenarioInfo, Step, evolve
from .wire import (  # noqa: F401 - re-exported
    ChildEvent,
    Crashed,
    Encoder,
    End,
    Event,
    InvalidEvent,
    Start,
    Unusable,
    graph_columns,
    graph_from_wire,
)
from .wire import (
    Decoder as _WireDecoder,
)

# Bytes, values and memory: a line's values are bounded by the wire decoder
# (MAX_EVENT_VALUES, MAX_STREAM_VALUES); these bound the bytes, so that the
# parent's memory for any stream stays within a few hundred MiB.
MAX_EVENT_BYTES = 32 * 1024 * 1024  # one event from the child; a step is far smaller
MAX_TRACE_BYTES = 256 * 1024 * 1024  # everything one scenario's child may send


def size_text(nbytes: int) -> str:
    """``256 MiB``, ``195 KiB``: a byte count as a person reads it."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.0f} {unit}"
    return f"{nbytes} bytes"


class EventError(ValueError):
    """What the child sent that the parent refuses: a malformed event, or one out of order."""


def encode(event: ChildEvent) -> bytes:
    """One event as one line of JSON (the wire form between child and parent)."""
    return Encoder().encode(event)


class Decoder(_WireDecoder):
    """The wire decoder, its refusals as ``EventError`` naming the event and the field."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.expected_step: Optional[int] = None  # the step the parent waits for, to name it

    def decode(self, line: bytes) -> ChildEvent:
        try:
            return super().decode(line)
        except InvalidEvent as exc:
            raise EventError(invalid_event_text(exc, self.expected_step)) from None


def invalid_event_text(exc: InvalidEvent, step: Optional[int]) -> str:
    """``sent an invalid step 3: $.tensors[2].version: expected int, got str``."""
    if exc.event == "step":
        what = "setup" if step == 0 else (f"step {step}" if step is not None else "step")
    else:
        what = f"{exc.event} event" if exc.event else "event"
    return f"sent an invalid {what}: {exc.path}: {exc.reason}"


def decode(line: bytes) -> ChildEvent:
    """The event on one line from the child; ``EventError`` for anything else."""
    return Decoder().decode(line)


class LineReader:
    """Splits a byte stream into lines, finding each newline once (linear in the bytes)."""

    def __init__(self, max_line: int = MAX_EVENT_BYTES) -> None:
        self.buffer = bytearray()
        self.scanned = 0
        self.max_line = max_line

    def feed(self, chunk: bytes) -> List[bytes]:
        """The complete lines that ``chunk`` finishes.

        ``EventError`` when one grows past the cap.
        """
        self.buffer += chunk
        lines: List[bytes] = []
        start = 0
        while True:
            end = self.buffer.find(b"\n", max(start, self.scanned))
            if end < 0:
                break
            # one copy, not a slice and a copy
            lines.append(bytes(memoryview(self.buffer)[start:end]))
            start = end + 1
        if start:
            del self.buffer[:start]
        self.scanned = len(self.buffer)
        if self.scanned > self.max_line:
            raise EventError(f"sent an event larger than {size_text(self.max_line)}")
        return lines


# --- what the parent expects ----------------------------------------------------------


class Plan:
    """What the scenario the parent loaded can produce: its setup and steps, with their code.

    ``steps`` holds ``(index, code, line, note)`` in the order they run; the
    setup, when there is one, is index 0. A child sends the outcome of each;
    what each step *is* comes from here.
    """

    def __init__(
        self, info: ScenarioInfo, steps: Sequence[Tuple[int, str, Optional[int], Optional[str]]]
    ) -> None:
        self.info = info
        self.steps = tuple(steps)


# --- the assembler --------------------------------------------------------------------


class Assembler:
    """Events received so far, as a trace that can be finished at any point.

    The in-process tracer and the runner both build traces here, so a trace cut
    short (a timeout, a killed child, Ctrl-C) has the same shape as a whole one.
    Given a ``plan``, it takes the events a run of that scenario sends, in
    order, and refuses (``EventError``) any other: a second ``start``, a step
    before ``start`` or after ``end``, a step that is not the next one.
    """

    def __init__(
        self,
        on_start: Optional[Callable[[Trace], None]] = None,
        on_step: Optional[Callable[[Trace, Step], None]] = None,
        plan: Optional[Plan] = None,
    ) -> None:
        self.start: Optional[Start] = None
        self.setup: Optional[Step] = None
        self.steps: List[Step] = []
        self.end: Optional[End] = None
        self.on_start = on_start
        self.on_step = on_step
        self.plan = plan
        self._next = 0  # the position in the plan of the step expected next

    @property
    def finished(self) -> bool:
        return self.end is not None

    @property
    def expected_step(self) -> Optional[int]:
        """The index of the step the plan expects next; None without a plan or past its end."""
        if self.plan is None or self._next >= len(self.plan.steps):
            return None
        return self.plan.steps[self._next][0]

    def add(self, event: Event) -> None:
        if self.plan is not None:
            event = self._as_planned(event)
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

    def _as_planned(self, event: Event) -> Event:
        """``event`` as the plan has it, or ``EventError``.

        The plan gives the scenario's own code, line and note.
        """
        plan = self.plan
        if self.end is not None:
            raise EventError(f"sent a {_kind(event)} event after the end of the run")
        if isinstance(event, Start):
            if self.start is not None:
                raise EventError("sent a second start event")
            return evolve(event, scenario=plan.info) if event.scenario != plan.info else event
        if self.start is None:
            raise EventError(f"sent a {_kind(event)} event before the start event")
        if not isinstance(event, Step):
            return event
        expected = self.expected_step
        if expected is None:
            raise EventError(
                f"sent a step {event.index} the scenario does not have (it has {_count(plan)})"
            )
        if event.index != expected:
            raise EventError(f"sent step {event.index} where step {expected} was due")
        _, code, line, note = plan.steps[self._next]
        self._next += 1
        if event.code != code or event.line != line or event.note != note:
            event = evolve(event, code=code, line=line, note=note)
        return event

    def trace(self, aborted: Optional[str] = None) -> Trace:
        start, end = self.start, self.end
        return Trace(
            scenario=start.scenario if start else ScenarioInfo(title="(not started)"),
            environment=start.environment
            if start
            else Environment(tensortrace="", torch="", python="", device=""),
            setup=self.setup,
            steps=tuple(self.steps),
            storages=end.storages if end else (),
            notices=end.notices if end else (),
            aborted=aborted if aborted is not None else (end.aborted if end else None),
        )


def _kind(event: object) -> str:
    return {Start: "start", End: "end", Step: "step"}.get(type(event), type(event).__name__.lower())


def _count(plan: Plan) -> str:
    steps = sum(1 for index, *_ in plan.steps if index)
    setup = " and a setup" if any(index == 0 for index, *_ in plan.steps) else ""
    return f"{steps} step{'s' if steps != 1 else ''}{setup}"
