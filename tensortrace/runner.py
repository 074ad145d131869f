"""Run scenarios in a child process under OS limits, streaming steps back.

The child is forked after torch is imported (start-up stays fast), runs the
tracer, and sends every event as one JSON line over a pipe. The parent never
unpickles anything from it: it rebuilds records from plain JSON. Limits:

* wall clock per step (``timeout``): an alarm inside the child ends a
  runaway Python step, and the parent kills a child stuck in native code;
* in safe mode, also no file writes (RLIMIT_FSIZE = 0), a memory cap
  (RLIMIT_AS) and a CPU-time cap (RLIMIT_CPU).

A step that exceeds a limit is recorded as that step's error; what was traced
before it is kept. Where ``fork`` is unavailable, scenarios run in-process.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

from .errors import TensorTraceError
from .model import (
    Environment,
    ErrorInfo,
    ScenarioInfo,
    Step,
    StorageInfo,
    Trace,
    record_from_dict,
    record_to_dict,
)
from .scenario import Scenario

GRACE = 2.0  # seconds the parent waits past the step limit before killing the child
DEFAULT_TIMEOUT = 5.0
DEFAULT_MEMORY_MB = 4096

StepCallback = Callable[[Trace, Step], None]


@dataclass(frozen=True)
class Limits:
    timeout: Optional[float] = DEFAULT_TIMEOUT  # seconds per step; None: no limit
    memory_mb: Optional[int] = DEFAULT_MEMORY_MB  # extra address space for the child (safe mode)


class Interrupted(Exception):
    """Ctrl-C during a run; ``traces`` holds what was traced so far."""

    def __init__(self, traces: List[Trace]) -> None:
        super().__init__("interrupted")
        self.traces = traces


def run_scenario(
    scenario: Scenario,
    *,
    safe: bool = True,
    device: Optional[str] = None,
    limits: Limits = Limits(),
    on_start: Optional[Callable[[Trace], None]] = None,
    on_step: Optional[StepCallback] = None,
    isolate: bool = True,
) -> List[Trace]:
    """Trace every variant of a scenario; callbacks see each step as it finishes."""
    from . import tracer  # imports torch

    variants = scenario.resolved()
    if safe:  # refuse unusable input before anything runs (the device is checked in the child,
        # since asking CUDA anything here would make it unusable in a forked child)
        for variant in variants:
            tracer.check_policy(variant)
    traces: List[Trace] = []
    for variant in variants:
        if isolate and hasattr(os, "fork"):
            result = _run_forked(variant, safe=safe, device=device, limits=limits, on_start=on_start, on_step=on_step, done=traces)
        else:
            result = _run_inline(variant, safe=safe, device=device, limits=limits, on_start=on_start, on_step=on_step, done=traces)
        traces.append(result)
    return traces


def _run_inline(scenario, *, safe, device, limits, on_start, on_step, done) -> Trace:
    from . import tracer

    partial = _Partial()
    try:
        for event in tracer.iter_trace(scenario, safe=safe, device=device, timeout=limits.timeout):
            partial.add(event, on_start, on_step)
    except KeyboardInterrupt:
        raise Interrupted(done + [partial.trace(aborted="interrupted (Ctrl-C)")]) from None
    return partial.trace()


class _Partial:
    """Events received so far, as a trace that can be finished at any point."""

    def __init__(self) -> None:
        self.scenario: Optional[ScenarioInfo] = None
        self.environment: Optional[Environment] = None
        self.setup: Optional[Step] = None
        self.steps: List[Step] = []
        self.storages: tuple = ()
        self.notices: tuple = ()
        self.aborted: Optional[str] = None
        self.finished = False

    def add(self, event, on_start, on_step) -> None:
        from .tracer import Finished, Started

        if isinstance(event, Started):
            self.scenario, self.environment = event.scenario, event.environment
            if on_start:
                on_start(self.trace())
        elif isinstance(event, Step):
            if event.index == 0:
                self.setup = event
            else:
                self.steps.append(event)
            if on_step:
                on_step(self.trace(), event)
        elif isinstance(event, Finished):
            self.storages, self.notices, self.aborted = event.storages, event.notices, event.aborted
            self.finished = True

    def trace(self, aborted: Optional[str] = None) -> Trace:
        return Trace(
            scenario=self.scenario or ScenarioInfo(title="(not started)"),
            environment=self.environment or Environment(tensortrace="", torch="", python="", device=""),
            setup=self.setup,
            steps=tuple(self.steps),
            storages=self.storages,
            notices=self.notices,
            aborted=aborted if aborted is not None else self.aborted,
        )


# --- the child -------------------------------------------------------------------


def _child_main(write_fd: int, scenario: Scenario, safe: bool, device: Optional[str], limits: Limits, parent: int) -> None:
    """Runs in the forked child; never returns."""
    code = 0
    try:
        os.setpgid(0, 0)  # Ctrl-C reaches the parent, which then stops the child
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _die_with_parent(parent)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        import torch

        from . import tracer

        torch.set_num_threads(1)
        if safe:
            _apply_limits(scenario, limits)
        out = os.fdopen(write_fd, "w", encoding="utf-8", buffering=1)
        for event in tracer.iter_trace(scenario, safe=safe, device=device, timeout=limits.timeout):
            out.write(json.dumps(_encode(event), allow_nan=False) + "\n")
        out.flush()
    except TensorTraceError as exc:  # e.g. a device this machine lacks: the user's to fix
        os.write(write_fd, (json.dumps({"event": "unusable", "message": str(exc)}) + "\n").encode())
        code = 2
    except BaseException as exc:  # report, never print a traceback from the child
        try:
            msg = {"event": "crashed", "message": f"{type(exc).__name__}: {exc}"}
            os.write(write_fd, (json.dumps(msg) + "\n").encode())
        except Exception:
            pass
        code = 3
    finally:
        os._exit(code)


def _die_with_parent(parent: int) -> None:
    """If the command is killed (SIGTERM, SIGHUP, SIGKILL), its child must not run on."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(3)


def _apply_limits(scenario: Scenario, limits: Limits) -> None:
    import resource

    import tempfile

    # torch imports some modules lazily (e.g. torch._dynamo when an optimizer
    # is created) that ask for the temporary folder; Python probes it by
    # writing a file, so find it while writing is still allowed.
    tempfile.gettempdir()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with an error instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    if limits.memory_mb:
        try:
            with open("/proc/self/statm") as f:
                current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            current = 0
        cap = current + limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    if limits.timeout:
        steps = len(scenario.steps) + 1
        cpu = int(limits.timeout * steps * 2) + 10
        used = int(sum(os.times()[:2])) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (used + cpu, used + cpu + 5))


def _encode(event) -> dict:
    from .tracer import Finished, Started

    if isinstance(event, Started):
        return {"event": "started", "scenario": record_to_dict(event.scenario), "environment": record_to_dict(event.environment)}
    if isinstance(event, Step):
        return {"event": "step", "step": record_to_dict(event)}
    assert isinstance(event, Finished)
    return {
        "event": "finished",
        "storages": record_to_dict(event.storages),
        "notices": list(event.notices),
        "aborted": event.aborted,
    }


def _decode(data: dict):
    from .tracer import Finished, Started

    kind = data.get("event")
    if kind == "started":
        return Started(record_from_dict(ScenarioInfo, data["scenario"]), record_from_dict(Environment, data["environment"]))
    if kind == "step":
        return record_from_dict(Step, data["step"])
    if kind == "finished":
        storages = tuple(record_from_dict(StorageInfo, s) for s in data["storages"])
        return Finished(storages=storages, notices=tuple(data["notices"]), aborted=data["aborted"])
    raise ValueError(f"unexpected event {kind!r}")


# --- the parent --------------------------------------------------------------------


def _run_forked(scenario: Scenario, *, safe, device, limits, on_start, on_step, done) -> Trace:
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(read_fd)
        _child_main(write_fd, scenario, safe, device, limits, parent)
    os.close(write_fd)
    partial = _Partial()
    buffer = b""
    crashed: Optional[str] = None
    unusable: Optional[str] = None
    patience = (limits.timeout + GRACE) if limits.timeout else None
    deadline = time.monotonic() + patience if patience else None
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([read_fd], [], [], wait)
            if not ready:  # the step ran past its limit and the alarm did not end it
                _kill(pid)
                return partial.trace(aborted=_synthesise_stop(partial, scenario, limits, "timeout", on_step))
            chunk = os.read(read_fd, 1 << 20)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                data = json.loads(line)
                if data.get("event") == "unusable":
                    unusable = data.get("message")
                    continue
                if data.get("event") == "crashed":
                    crashed = data.get("message")
                    continue
                partial.add(_decode(data), on_start, on_step)
                if deadline is not None:
                    deadline = time.monotonic() + patience
    except KeyboardInterrupt:
        _kill(pid)
        _drain(read_fd, buffer, partial, on_start, on_step)  # steps that finished before Ctrl-C count
        raise Interrupted(done + [partial.trace(aborted="interrupted (Ctrl-C)")]) from None
    finally:
        os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if unusable is not None:
        raise TensorTraceError(unusable)
    if partial.finished:
        return partial.trace()
    if crashed and partial.scenario is None:
        raise TensorTraceError(f"the scenario could not be started: {crashed}", path=scenario.path)
    reason = _death_reason(status, crashed)
    return partial.trace(aborted=_synthesise_stop(partial, scenario, limits, reason, on_step))


def _drain(read_fd: int, buffer: bytes, partial: "_Partial", on_start, on_step) -> None:
    """Read what a stopped child had already sent, keeping every complete event."""
    try:
        while True:
            chunk = os.read(read_fd, 1 << 20)
            if not chunk:
                break
            buffer += chunk
    except OSError:
        pass
    for line in buffer.split(b"\n")[:-1]:
        try:
            data = json.loads(line)
            if data.get("event") in ("started", "step", "finished"):
                partial.add(_decode(data), on_start, on_step)
        except (ValueError, KeyError, TypeError):
            break


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
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


def _synthesise_stop(partial: _Partial, scenario: Scenario, limits: Limits, reason: str, on_step) -> str:
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
        message = f"{what} exceeded the {limits.timeout:g} s time limit"
        status = "timeout"
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
            qualname="builtins.TimeoutError" if status == "timeout" else "tensortrace.ProcessKilled",
            message=message,
            line=line,
        ),
        behaved=False,
        failures=(message,),
    )
    if partial.scenario is None:
        partial.scenario = ScenarioInfo(title=scenario.title, description=scenario.description, tags=scenario.tags, source=scenario.path, variant=scenario.variant)
    partial.add(step, None, on_step)
    return message
