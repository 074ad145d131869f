"""Run scenarios in a child process behind the kernel's wall, streaming steps back.

The child is forked after torch is imported (start-up stays fast), confines
itself (``tensortrace.run.confine``) in safe mode, runs the tracer, and sends every
event over a pipe (``tensortrace.trace.events``: JSON lines, never pickle). The parent
trusts nothing it receives: every event and the whole stream are bounded in
bytes, values and depth, decoded into the typed records, and accepted only in
the order the scenario it loaded can produce them; the code, lines and notes
shown are that scenario's, never the child's. Limits:

* wall clock per step (``timeout``): an alarm inside the child ends a
  runaway Python step, and the parent kills a child stuck in native code;
  the limit is for the step's own code, so the child sends a line
  ``ran N`` when step N's code is done, and the parent stops the step's clock
  until the step itself arrives: recording is the tool's time;
* wall clock per scenario (``scenario_timeout``), kept by the parent;
* in safe mode, also the kernel's wall, no file writes (RLIMIT_FSIZE = 0), a
  memory cap (RLIMIT_AS) and a CPU-time cap (RLIMIT_CPU), hard limits lowered.

A step that exceeds a limit is recorded as that step's error; what was traced
before it is kept. Where ``fork`` is unavailable, scenarios run in-process.

The child's side is ``child.py``; what the parent pays once before forking, ``warm.py``.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence

from . import child, forkthreads, reaping, warm
from .devices import cuda_started, on_the_cpu, on_the_gpu, refuse_gpu
from ..errors import Interrupted, TensorTraceError
from ..trace.events import (
    MAX_TRACE_BYTES,
    Assembler,
    Crashed,
    Decoder,
    EventError,
    LineReader,
    Plan,
    Start,
    Unusable,
    size_text,
)
from ..trace import Environment, ErrorInfo, ScenarioInfo, Step, Trace

if (
    TYPE_CHECKING
):  # pragma: no cover - the scenario module imports yaml, which rendering never needs
    from ..scenario.spec import Scenario

GRACE = 2.0  # seconds the parent waits past the step limit before killing the child
# The longest the parent blocks in select at a time. A Ctrl-C that lands after
# Python last checked for signals but before select starts does not interrupt
# it; Python handles it once select returns, so within this much.
TICK = 0.25
READ_SIZE = 1 << 20  # bytes the parent reads from the pipe at most at a time
DEFAULT_TIMEOUT = 5.0
DEFAULT_SCENARIO_TIMEOUT = 300.0
DEFAULT_MEMORY_MB = 4096
REQUIRE_ENV = "TENSORTRACE_REQUIRE_CONFINEMENT"

StartCallback = Callable[[Trace], None]
StepCallback = Callable[[Trace, Step], None]


@dataclass(frozen=True)
class Limits:
    timeout: Optional[float] = DEFAULT_TIMEOUT  # seconds per step; None: no limit
    memory_mb: Optional[int] = DEFAULT_MEMORY_MB  # extra address space for the child (safe mode)
    scenario_timeout: Optional[float] = (
        DEFAULT_SCENARIO_TIMEOUT  # seconds per scenario (each variant); None: no limit
    )


class ConfinementUnavailable(TensorTraceError):
    """The kernel's wall was required and cannot be built on this machine."""

    def __init__(self, missing: Sequence[str]) -> None:
        super().__init__(
            "safe mode cannot be confined by the kernel here, and confinement was required "
            f"(--require-confinement or {REQUIRE_ENV}=1): missing {'; '.join(missing)}. "
            "Run on Linux 5.13+ with libseccomp, or drop the requirement to run with the "
            "Python-level checks only"
        )
        self.missing = tuple(missing)


def run_all(
    scenarios: Sequence[Scenario],
    *,
    safe: bool = True,
    device: Optional[str] = None,
    limits: Limits = Limits(),
    on_start: Optional[StartCallback] = None,
    on_step: Optional[StepCallback] = None,
    isolate: bool = True,
    confine: Optional[bool] = None,
    require_confinement: bool = False,
    ops: bool = True,
) -> List[Trace]:
    """Trace every variant of every scenario; callbacks see each step as it finishes.

    In safe mode nothing runs until every variant of every scenario has passed
    the policy check, which runs once each. ``confine`` (default: the same as
    ``safe``) puts the child behind the kernel's wall; it is separate from
    ``safe`` so that the wall can be shown to hold on its own, with plain Python
    inside. ``require_confinement`` refuses to run, before anything runs,
    where the wall would be incomplete. ``ops`` records what each step ran
    (``tensortrace.record.ops``). Ctrl-C raises ``Interrupted`` with the traces so far.
    """
    from ..record import tracer  # imports torch

    warm.freeze_imported_objects()
    confine = safe if confine is None else confine
    variants = [variant for scenario in scenarios for variant in scenario.resolved()]
    if safe:  # the device is checked in the child: asking CUDA here would make it unusable there
        for variant in variants:
            tracer.check_policy(variant)
            refuse_gpu(variant, device)
        variants = [on_the_cpu(variant) for variant in variants]
        device = "cpu" if device == "auto" else device
    if confine and require_confinement:
        require_kernel_confinement(isolate)
    # a trusted run on the GPU stays in this process (on_the_gpu), and so does every trusted
    # run once CUDA has started here: after a backward with CUDA, a forked child cannot run
    # backward ("Unable to handle autograd's threading in combination with fork-based
    # multiprocessing"), even on the CPU
    forked = isolate and hasattr(os, "fork")
    forked = forked and (
        safe or not (cuda_started() or any(on_the_gpu(v, device) for v in variants))
    )
    if forked:
        warm.import_once_for_all(variants)
        warm.warm_for_children(variants, explanations=len(variants) > 1)
        if confine:
            child.prepare_lazy_imports()
    traces: List[Trace] = []
    for variant in variants:
        assembler = Assembler(on_start, on_step)
        run_one = _run_forked if forked else _run_inline
        try:
            traces.append(
                run_one(
                    variant,
                    assembler,
                    safe=safe,
                    device=device,
                    limits=limits,
                    confine=confine,
                    ops=ops,
                )
            )
        except KeyboardInterrupt:
            raise Interrupted(traces + [assembler.trace(aborted="interrupted (Ctrl-C)")]) from None
    return traces


def prepare(scenarios: Sequence[Scenario], *, confine: bool = True) -> None:
    """Pay, before the first of several ``run_all`` calls, what each would pay on its first run.

    ``check`` runs its files one by one; without this, the file that first
    needs ``torch._dynamo`` (an optimizer) is charged seconds of importing
    that every later file then shares.
    """
    from ..record import tracer  # noqa: F401 - imports torch

    warm.freeze_imported_objects()
    if hasattr(os, "fork"):
        variants = [variant for scenario in scenarios for variant in scenario.resolved()]
        warm.import_once_for_all(variants)
        warm.warm_for_children(variants, explanations=True)
        if confine:
            child.prepare_lazy_imports()


def run_scenario(scenario: Scenario, **options) -> List[Trace]:
    """``run_all`` for one scenario (all its variants)."""
    return run_all([scenario], **options)


def require_kernel_confinement(isolate: bool = True) -> None:
    """Raise ``ConfinementUnavailable`` unless every layer of the kernel's wall can go up here."""
    from . import confine

    if not (isolate and hasattr(os, "fork")):
        raise ConfinementUnavailable(
            [
                "a child process: this platform cannot fork, so steps would run unconfined "
                "in this process"
            ]
        )
    report = confine.available()
    if not report.complete:
        raise ConfinementUnavailable(report.missing)


def _run_inline(
    scenario: Scenario, assembler: Assembler, *, safe, device, limits, confine, ops=True
) -> Trace:
    from ..record import tracer
    from ..trace import Confinement

    report = (
        Confinement(
            missing=("all layers: the steps ran in the calling process, with no child to confine",)
        )
        if confine
        else None
    )
    for event in tracer.iter_trace(
        scenario,
        safe=safe,
        device=device,
        timeout=limits.timeout,
        confinement=report,
        checked=True,
        ops=ops,
    ):
        assembler.add(event)
    return assembler.trace()


# The command line's process runs no tensor operation before it forks, so its
# children keep PyTorch's threads; a process that may have (the Python API, a
# notebook) gives its children one thread, since OpenMP's pool does not survive
# fork and the child's first parallel operation would wait for it forever
# (``tensortrace.run.forkthreads``).
threads_unused_before_fork = False

_ENDING_SIGNALS = {
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
}


# --- the parent --------------------------------------------------------------------


def _run_forked(
    scenario: Scenario, assembler: Assembler, *, safe, device, limits, confine, ops=True
) -> Trace:
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    threads = None if threads_unused_before_fork else forkthreads.one_thread_for_fork()
    # no signal between the fork and the child's being known, so that it is always killed
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _ENDING_SIGNALS)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(read_fd)
            child.child_main(
                write_fd,
                scenario,
                safe,
                device,
                limits,
                parent,
                confine,
                ops,
                threads_unused_before_fork,
            )
        reaping.LIVE[pid] = None
    except BaseException:  # the fork failed: nothing to follow
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(read_fd)
        raise
    finally:  # the child never gets here: it ends in child_main
        forkthreads.restore_threads(threads)  # signals still blocked: nothing cuts this short
        os.close(write_fd)
    try:
        # a signal that came since the fork is handled here, with the child known and the
        # pipe's writing end closed: a Ctrl-C stops the child below, it is never left running
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return _follow(pid, read_fd, scenario, assembler, limits)
    except BaseException:  # Ctrl-C, the API caller's own exception, a refused event...
        reaping.stop(pid)  # ... the child never outlives this call
        raise
    finally:
        os.close(read_fd)
        if pid in reaping.LIVE:
            reaping.stop(pid)


def _follow(pid: int, read_fd: int, scenario: Scenario, assembler: Assembler, limits) -> Trace:
    """Read the child's events until it ends, a limit passes or it misbehaves; reap it."""
    reader = LineReader()
    decoder = Decoder()
    assembler.plan = plan_of(scenario)
    buffer = bytearray(
        READ_SIZE
    )  # read into, again and again: no allocation of a megabyte per read
    last_index = (
        -1
    )  # the index of the last step received; a mark past it: the step under way has run its code
    received = 0
    notes: dict = {}  # "unusable" / "crashed" messages from the child
    patience = (limits.timeout + GRACE) if limits.timeout else None
    began = time.monotonic()
    step_deadline = began + patience if patience else None
    scenario_deadline = began + limits.scenario_timeout if limits.scenario_timeout else None
    status: Optional[int] = None  # the child's wait status, once reaped
    try:
        while True:
            deadlines = [d for d in (step_deadline, scenario_deadline) if d is not None]
            wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else TICK
            ready, _, _ = select.select([read_fd], [], [], min(wait, TICK))
            if not ready:
                # a process the child started may hold the pipe open after the child ended
                status = reaping.reap(pid, deadline=time.monotonic())
                if status is not None:
                    _drain(read_fd, reader, decoder, assembler, block=False)
                    break
            if not ready and (not deadlines or time.monotonic() < min(deadlines)):
                continue  # only the tick passed
            if not ready:  # a limit passed and the child did not end the step itself
                reaping.stop(pid)
                return assembler.trace(
                    aborted=_synthesise_stop(
                        assembler, scenario, limits, _which_limit(scenario_deadline)
                    )
                )
            size = os.readv(read_fd, [buffer])
            if not size:
                break
            received += size
            if received > MAX_TRACE_BYTES:
                raise EventError(f"sent more than {size_text(MAX_TRACE_BYTES)} of trace")
            for line in reader.feed(memoryview(buffer)[:size]):
                if line.startswith(child.RAN):
                    if child.ran_index(line) > last_index:
                        step_deadline = None  # the step's code is done: recording is the tool's
                    continue
                decoder.expected_step = assembler.expected_step
                event = decoder.decode(line)
                if isinstance(event, (Unusable, Crashed)):
                    notes[type(event)] = event.message
                    continue
                assembler.add(event)
                if isinstance(event, Step):
                    last_index = event.index
                if patience is not None:
                    step_deadline = time.monotonic() + patience
    except EventError as exc:
        reaping.stop(pid)
        return assembler.trace(
            aborted=_synthesise_stop(
                assembler, scenario, limits, f"the child {exc}; the tracer stopped reading it"
            )
        )
    except KeyboardInterrupt:
        reaping.stop(pid)
        _drain(read_fd, reader, decoder, assembler)  # steps that finished before Ctrl-C count
        raise
    if status is None:  # the pipe closed: the child ends now, unless it closed it to linger
        ending = time.monotonic() + GRACE
        status = reaping.reap(pid, min(ending, scenario_deadline or ending))
    if status is None:
        over = scenario_deadline is not None and time.monotonic() >= scenario_deadline
        status = reaping.stop(pid)
        if over or not assembler.finished:
            reason = (
                "scenario-timeout"
                if over
                else "closed its pipe to the tracer but did not end, and was killed"
            )
            return assembler.trace(aborted=_synthesise_stop(assembler, scenario, limits, reason))
    if Unusable in notes:
        raise TensorTraceError(notes[Unusable])
    if assembler.finished:
        return assembler.trace()
    crashed = notes.get(Crashed)
    if crashed and assembler.start is None:
        raise TensorTraceError(f"the scenario could not be started: {crashed}", path=scenario.path)
    reason = _death_reason(status or 0, crashed)
    return assembler.trace(aborted=_synthesise_stop(assembler, scenario, limits, reason))


def _which_limit(scenario_deadline: Optional[float]) -> str:
    over = scenario_deadline is not None and time.monotonic() >= scenario_deadline
    return "scenario-timeout" if over else "timeout"


def plan_of(scenario: Scenario) -> Plan:
    """What a run of ``scenario`` sends, from the scenario itself: the parent shows this,
    not the child's word."""
    info = ScenarioInfo(
        title=scenario.title,
        description=scenario.description,
        tags=scenario.tags,
        source=scenario.path,
        variant=scenario.variant,
    )
    steps = []
    if scenario.setup:
        steps.append((0, "\n".join(c.text for c in scenario.setup), scenario.setup[0].line, None))
    steps.extend((spec.index, spec.run.text, spec.run.line, spec.note) for spec in scenario.steps)
    return Plan(info, steps)


def _drain(
    read_fd: int, reader: LineReader, decoder: Decoder, assembler: Assembler, block: bool = True
) -> None:
    """Keep every complete event a stopped child had already sent.

    ``block=False`` reads only what is there already: a process the child
    started may hold the pipe open, and would never let it end.
    """
    try:
        while True:
            if not block and not select.select([read_fd], [], [], 0)[0]:
                break
            chunk = os.read(read_fd, READ_SIZE)
            if not chunk:
                break
            for line in reader.feed(chunk):
                if line.startswith(child.RAN):
                    continue
                decoder.expected_step = assembler.expected_step
                event = decoder.decode(line)
                if not isinstance(event, (Unusable, Crashed)):
                    assembler.add(event)
    except (OSError, EventError):
        pass


def _death_reason(status: int, crashed: Optional[str]) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "used up its CPU-time limit"
        if sig == signal.SIGKILL:
            return "was killed (SIGKILL; most often the system ran out of memory)"
        return f"was killed by signal {signal.Signals(sig).name}"
    if crashed:
        return f"stopped the tracer: {crashed}"
    return f"ended the process (exit status {os.WEXITSTATUS(status)})"


def _synthesise_stop(partial: Assembler, scenario: Scenario, limits: Limits, reason: str) -> str:
    """Record the step that was running when the child stopped, and say why."""
    if partial.steps:
        index = partial.steps[-1].index + 1
    elif partial.setup is not None:
        index = 1
    else:
        index = 0 if scenario.setup else 1
    if index == 0:
        code = scenario.setup[0]
        text, line, note = "\n".join(c.text for c in scenario.setup), code.line, None
        what = "setup"
    elif index <= len(scenario.steps):
        spec = scenario.steps[index - 1]
        text, line, note = spec.run.text, spec.run.line, spec.note
        what = f"step {index}"
    else:
        return f"the tracer stopped after the last step: {reason}"
    if reason == "timeout":
        message = f"{what} exceeded the {limits.timeout:g} s time limit (raise it with --timeout)"
        status = "timeout"
    elif reason == "scenario-timeout":
        message = (
            f"{what} was running when the scenario reached its "
            f"{limits.scenario_timeout:g} s time limit "
            "(raise it with --scenario-timeout)"
        )
        status = "timeout"
    elif reason.startswith("the child "):  # a refused event says itself which step it was
        message = reason
        status = "killed"
    else:
        message = f"{what} {reason}"
        status = "killed"
    step = Step(
        index=index,
        code=text,
        line=line,
        note=note,
        status=status,
        error=ErrorInfo(
            type="TimeoutError" if status == "timeout" else "ProcessKilled",
            qualname="builtins.TimeoutError"
            if status == "timeout"
            else "tensortrace.ProcessKilled",
            message=message,
            line=line,
        ),
        behaved=False,
        failures=(message,),
    )
    if partial.start is None:
        info = ScenarioInfo(
            title=scenario.title,
            description=scenario.description,
            tags=scenario.tags,
            source=scenario.path,
            variant=scenario.variant,
        )
        partial.start = Start(info, Environment(tensortrace="", torch="", python="", device=""))
    partial.plan = None  # the step is the parent's own, made from the scenario
    partial.add(step)
    return message
