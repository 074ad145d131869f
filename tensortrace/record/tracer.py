"""Run a scenario on real PyTorch and record, after every step, what is true.

``iter_trace`` yields events as the run goes (the JSON-lines stream and the
child-process runner consume them); ``trace`` collects them into a ``Trace``.
Every fact comes from PyTorch at the moment of recording; the recorder never
keeps tensors alive, retains grads, hooks or copies beyond small values.

This module runs the steps: it compiles each (``compiling.py``), executes it
with its output and warnings captured, checks what the step declared
(``expectations.py``), and hands the namespace to ``steps.StepRecorder``,
which records what is true after it, as it does for ``snoop()`` and
``%%tensortrace``.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import sys
import threading
import warnings
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..errors import ScenarioError, StepTimeout, UsageError
from ..scenario.script import main_globals, running_as_python, script_folder
from ..scenario.spec import Code, Scenario, StepSpec
from ..trace import (
    Confinement,
    Declared,
    ErrorInfo,
    ExpectationResult,
    ScenarioInfo,
    Step,
    TensorState,
    Trace,
)
from ..trace.events import Assembler, End, Event, Start
from ..trace.names import covers
from .compiling import StepCompiler, check_policy, local_names
from .expectations import declared_outcome, evaluate_expectation, first_line
from .graph import saved_suspects
from .helpers import base_namespace
from .loops import MARKER, PassMarker
from .sites import SiteReader
from .outcome import MAX_MESSAGE, MAX_WARNINGS  # noqa: F401 - a step's bounds, read from here too
from .outcome import MAX_STDOUT, beside_the_scenario, bounded, error_info, raised_at
from .outcome import warning_records
from .steps import StepRecorder, environment
from .stepenv import PlainStackDepth, StepAlarm, install_warning_filters, scenario_warning_filters
from .writes import WriteWatch

_NO_LIMIT = contextlib.nullcontext()


def _source_lines(sources: Dict[str, Code], filename: str) -> Optional[List[str]]:
    code = sources.get(filename)
    return None if code is None else code.source("exec").splitlines()


def _file_line(sources: Dict[str, Code], filename: str, line: int) -> Optional[int]:
    code = sources.get(filename)
    return None if code is None else code.locate(line)[0]


def _scenario_file(code: Any) -> bool:
    """Whether a code object is the scenario's own: of a step or a piece of its setup."""
    filename = code.co_filename
    return filename.startswith("<step ") or filename.startswith("<setup ")


@contextlib.contextmanager
def _installed(ns: Dict[str, Any], marker: Any) -> Iterator[None]:
    """``loops.MARKER`` among the builtins the step's code sees, while it runs: safe mode's own
    builtins of the run, or (``--trust``) the builtins module, as plain Python's code sees it."""
    found = ns.get("__builtins__", builtins)
    table = found if isinstance(found, dict) else vars(found)
    table[MARKER] = marker
    try:
        yield
    finally:
        table.pop(MARKER, None)


# --- the public entry points -----------------------------------------------------


def trace(
    scenario: Scenario,
    variant: Optional[str] = None,
    *,
    safe: bool = True,
    device: Optional[str] = None,
    timeout: Optional[float] = None,
    ops: bool = True,
) -> Trace:
    """Run one scenario (or one of its variants) in this process; return its trace.

    ``ops`` records what each step ran and its gradient flow (``tensortrace.record.ops``).
    """
    if scenario.variants:
        if variant is None:
            raise UsageError(
                f"scenario {scenario.title!r} has variants "
                f"({', '.join(scenario.variant_names)}); pass variant=NAME, or use trace_variants()"
            )
        scenario = scenario.for_variant(variant)
    elif variant is not None and variant != scenario.variant:
        raise UsageError(f"scenario {scenario.title!r} has no variants")
    return collect(iter_trace(scenario, safe=safe, device=device, timeout=timeout, ops=ops))


def trace_variants(scenario: Scenario, **options: Any) -> List[Trace]:
    """One trace per variant (or a single trace for a scenario without variants)."""
    return [collect(iter_trace(s, **options)) for s in scenario.resolved()]


def collect(events: Iterator[Event]) -> Trace:
    """The trace that a whole run's events make."""
    assembler = Assembler()
    for event in events:
        assembler.add(event)
    return assembler.trace()


def resolve_device(scenario: Scenario, override: Optional[str]) -> str:
    """The scenario's own device wins; else --device; else cpu. Checks availability."""
    wanted = scenario.device_for(override)
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    where = {
        "path": scenario.path,
        "line": scenario.device_line if scenario.device else None,
        "column": scenario.device_column if scenario.device else None,
    }
    if wanted.startswith("cuda"):
        index = int(wanted.split(":")[1]) if ":" in wanted else 0
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            asks = "the scenario asks for" if scenario.device else "--device asks for"
            raise ScenarioError(
                f"{asks} device {wanted!r}, which this machine does not have "
                f"(torch.cuda.is_available() is {torch.cuda.is_available()}); use cpu or auto",
                **where,
            )
    elif wanted == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ScenarioError(
                "device 'mps' is not available on this machine; use cpu or auto", **where
            )
    return wanted


# --- the run ---------------------------------------------------------------------


def iter_trace(
    scenario: Scenario,
    *,
    safe: bool = True,
    device: Optional[str] = None,
    timeout: Optional[float] = None,
    values: bool = True,
    confinement: Optional[Confinement] = None,
    checked: bool = False,
    on_ran: Optional[Callable[[int], None]] = None,
    ops: bool = True,
) -> Iterator[Event]:
    """Run the scenario step by step, yielding a ``Start``, the steps, an ``End``.

    Raises ``ScenarioError`` (before anything runs) for a scenario that cannot
    be run: variants left unresolved, an unavailable device, or, in safe mode,
    code the policy refuses. ``on_ran(index)`` is called when a step's own code
    (and its expectations) is done and the recording of its facts begins.
    ``ops`` records what each step ran and the gradient flow of its backward
    calls (``tensortrace.record.ops``).
    """
    if scenario.variants:
        raise UsageError("resolve the scenario's variants first (Scenario.resolved())")
    if safe and not checked:  # the runner checks once, before anything runs
        check_policy(scenario)
    dev = resolve_device(scenario, device)
    recorder = _Recorder(
        scenario, safe=safe, device=dev, timeout=timeout, values=values, on_ran=on_ran, ops=ops
    )
    yield Start(
        scenario=ScenarioInfo(
            title=scenario.title,
            description=scenario.description,
            tags=scenario.tags,
            source=scenario.path,
            variant=scenario.variant,
        ),
        environment=environment(dev, safe, confinement),
    )
    with (
        _fresh_torch_state(scenario.seed, dev),
        _protocols_closed(safe),
        _as_python_runs(scenario),
    ):
        aborted = None
        if scenario.setup:
            setup = recorder.run_setup()
            yield setup
            if setup.status != "ok":
                failed = setup.status == "raised"
                aborted = "setup failed; no step ran" if failed else setup.error.message
        if aborted is None:
            for spec in scenario.steps:
                step = recorder.run_step(spec)
                yield step
                if step.status == "timeout":
                    aborted = step.error.message
                    break
        yield End(storages=recorder.steps.storages(), notices=recorder.notices(), aborted=aborted)


def _protocols_closed(safe: bool) -> ContextManager[None]:
    """In safe mode, torch modules refuse the memory protocols' names while steps run."""
    if not safe:
        return contextlib.nullcontext()
    from ..sandbox.protocols import closed

    return closed()


@contextlib.contextmanager
def _fresh_torch_state(seed: int, device: str) -> Iterator[None]:
    """Rule 1: every scenario starts from reset global torch state, and leaves it so."""

    def reset() -> None:
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
        torch.autograd.set_detect_anomaly(False)
        torch.set_printoptions(profile="default")
        if torch.get_default_device() != torch.device("cpu"):
            torch.set_default_device(None)

    reset()
    torch.manual_seed(seed)
    if device != "cpu":
        torch.set_default_device(device)
    try:
        yield
    finally:
        reset()


def _as_python_runs(scenario: Scenario) -> Any:
    """A Python file's run sees ``sys.argv`` and ``sys.path[0]`` as under ``python FILE ARGS``."""
    if not scenario.script or not scenario.path:
        return _NO_LIMIT
    return running_as_python(scenario.path, scenario.argv, script_folder(scenario.path))


class _Recorder:
    """One scenario's run: its namespace, its steps run in turn, and what each left.

    What is true after a step is recorded by ``self.steps`` (a ``StepRecorder``);
    this class runs the code and says which names the scenario bound.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        safe: bool,
        device: str,
        timeout: Optional[float],
        values: bool,
        on_ran: Optional[Callable[[int], None]] = None,
        ops: bool = True,
    ) -> None:
        self.scenario = scenario
        # the user's code of a step is done; recording begins
        self.on_ran = on_ran or (lambda index: None)
        self.stack_memo: Dict[str, int] = {}  # the depth the tool's frames use, probed once
        self.compile = StepCompiler(safe, local_names(scenario))
        self.safe = safe
        self.timeout = timeout
        self._notices: List[str] = list(scenario.notices)
        self.steps = StepRecorder(
            # what runs: the code's own, and that of the modules beside it that it imports
            "\n".join(
                [code.text for _, code, _ in scenario.all_code()]
                + [m.source for m in scenario.modules]
            ),
            ops=ops,
            values=values,
            writes=WriteWatch(scenario, safe=safe),  # storages a step provably did not write
            notices=self._notices,
        )
        # the code of each step and setup piece by its file name, to read back the expressions
        # a call ran under (``sites``): a function a step defines runs in later steps too
        sources: Dict[str, Code] = {}
        self.sources = sources
        self.steps.ops.users = _scenario_file
        # closures over the table alone: the recorder must not hold this object (a cycle would
        # keep a step's recording alive until the collector runs)
        self.steps.ops.reader = SiteReader(
            lambda filename: _source_lines(sources, filename),
            lambda filename, line: _file_line(sources, filename, line),
        )
        self.initial = base_namespace()
        if scenario.script and scenario.path:  # its module is __main__, as under python FILE
            self.initial.update(main_globals(scenario.path))
        if safe:
            from ..sandbox import safe_globals

            self.ns = safe_globals(
                dict(self.initial),
                local=[(m.name, m.path, m.source) for m in scenario.modules],
                home=("__main__",) if scenario.script else (),
            )
        else:
            self.ns = dict(self.initial)
        self.initial_ids = {k: id(v) for k, v in self.ns.items()}
        self.warning_filters: List[Any] = []  # filters the scenario's code added, kept
        self.seen_names: set = set()
        # name -> (where, line) from show/graph: a name never bound gets a notice
        self.asked: Dict[str, Tuple[str, Optional[int]]] = {}
        for name in scenario.graph_option:  # asked for on the command line, not by the file
            self.asked.setdefault(name, ("--graph", None))
        for name in scenario.show or ():
            self.asked.setdefault(name, ("show", None))
        for spec in scenario.steps:
            for name in spec.show or ():
                self.asked.setdefault(name, (f"'show' of step {spec.index}", spec.run.line))
            if isinstance(spec.graph, tuple):
                for name in spec.graph:
                    self.asked.setdefault(name, (f"'graph' of step {spec.index}", spec.run.line))

    # running -----------------------------------------------------------------------
    def run_setup(self) -> Step:
        text = "\n".join(c.text for c in self.scenario.setup)
        first = self.scenario.setup[0]
        pieces = [(c, f"<setup {i}>") for i, c in enumerate(self.scenario.setup)]
        status, error, warns, stdout, _ = self.execute(pieces, 0)
        if status == "ok":
            failures: Tuple[str, ...] = ()
        elif status == "timeout":
            failures = (error.message,)
        else:
            failures = (f"setup raised {error.type}: {first_line(error.message)}",)
        self.on_ran(0)
        with self.steps.reading():
            tensors, objects = self.snapshot(None)
            done = self.steps.complete(0, text, tensors, objects)
        del objects
        return Step(
            ops=done.ops,
            ops_omitted=done.ops_omitted,
            flow=done.flow,
            sites=done.sites,
            index=0,
            code=text,
            line=first.line,
            none=tuple(self.steps.nones),
            status=status,
            error=error,
            warnings=warns,
            stdout=stdout,
            behaved=status == "ok",
            failures=failures,
            tensors=tensors,
            predictions=done.predictions,
        )

    def run_step(self, spec: StepSpec) -> Step:
        pieces = [(spec.run, f"<step {spec.index}>")]
        status, error, warns, stdout, classes = self.execute(pieces, spec.index)
        expectations = (
            tuple(self.expectation(code, spec.index) for code in spec.expect)
            if status != "timeout" and spec.expect
            else ()
        )
        raised_ok, warned_ok, failures = declared_outcome(spec, status, error, warns, classes)
        if expectations:
            failures += [f"expectation failed: {e.expr}" for e in expectations if not e.passed]
        self.on_ran(spec.index)
        with self.steps.reading():
            tensors, objects = self.snapshot(spec)
            done = self.steps.complete(
                spec.index,
                spec.run.text,
                tensors,
                objects,
                drawn=self.graphs(spec, tensors, objects),
                error=error,
                suspects=classes.pop("saved", None),
            )
        del objects
        return Step(
            index=spec.index,
            code=spec.run.text,
            line=spec.run.line,
            note=spec.note,
            cell=self.cell_of(spec),
            none=tuple(self.steps.nones),
            status=status,
            error=done.error,
            warnings=warns,
            stdout=stdout,
            expectations=expectations,
            raises=spec.raises if isinstance(spec.raises, Declared) else None,
            warns=spec.warns if isinstance(spec.warns, Declared) else None,
            raised_as_declared=raised_ok,
            warned_as_declared=warned_ok,
            behaved=not failures,
            failures=tuple(failures),
            shown=self.shown_names(spec, tensors),
            tensors=tensors,
            graphs=done.graphs,
            predictions=done.predictions,
            ops=done.ops,
            ops_omitted=done.ops_omitted,
            flow=done.flow,
            sites=done.sites,
            loop=done.loop,
        )

    def cell_of(self, spec: StepSpec) -> Optional[int]:
        """The notebook cell a step came from (its ``line`` counts from there); None elsewhere."""
        cells = self.scenario.cells
        return cells[spec.index - 1] if 0 < spec.index <= len(cells) else None

    def execute(self, pieces: Sequence[Tuple[Code, str]], index: int):
        """Run code with every warning enabled and output captured (rules 6 and 7)."""
        out = io.StringIO()
        status, error = "ok", None
        classes: Dict[str, Any] = {"error": None, "warnings": []}
        lines = {filename: code for code, filename in pieces}
        self.sources.update(lines)
        with warnings.catch_warnings(record=True) as caught:
            install_warning_filters(self.warning_filters)  # the scenario's, above "always"
            streams = sys.stdout, sys.stderr  # as contextlib.redirect_stdout and redirect_stderr do
            sys.stdout = sys.stderr = out
            try:
                try:
                    compiled = [self.compile(code, filename, "exec") for code, filename in pieces]
                    marks = self._loop_marks(pieces, index, caught)
                    if marks is not None:
                        compiled = [marks[0]]
                    with (
                        self._time_limit(index),
                        PlainStackDepth(self.stack_memo),
                        self.steps.modes(caught),
                        marks[1] if marks is not None else _NO_LIMIT,
                    ):
                        for each in compiled:
                            exec(each, self.ns)
                finally:
                    sys.stdout, sys.stderr = streams
            except StepTimeout:
                status = "timeout"
                error = self._timeout_error(index, pieces[0][0].line)
            except (KeyboardInterrupt, GeneratorExit):
                raise
            except BaseException as exc:  # the scenario's own error: recorded, not raised
                status = "raised"
                error = beside_the_scenario(
                    error_info(exc, raised_at(exc, lines)), exc, self.scenario.path
                )
                classes["error"] = type(exc)
                classes["saved"] = saved_suspects(exc, error.message)
                del exc
            # filters set by the step persist to the next step, as they would in plain Python
            self.warning_filters = scenario_warning_filters()
            warns, classes["warnings"] = warning_records(caught, lines)
            caught.clear()
        text = out.getvalue()
        if len(text) > MAX_STDOUT:
            text = bounded(text, MAX_STDOUT) + "\n"
        return status, error, warns, text, classes

    def _loop_marks(
        self, pieces: Sequence[Tuple[Code, str]], index: int, caught: List[Any]
    ) -> Optional[Tuple[Any, Any]]:
        """A step's code with its loop's passes marked, and the context that puts the marker
        where that code finds it (``loops.py``); None for setup, an unmarked step, or a run
        that records no operations."""
        if not index or len(pieces) != 1 or self.steps.level is None:
            return None
        code, filename = pieces[0]
        compiled = self.compile.with_loop_marks(code, filename)
        if compiled is None:
            return None
        marker = PassMarker(
            lambda: self.steps.ops.now, caught, self.ns, lambda line: code.locate(line)[0]
        )
        return compiled, _installed(self.ns, marker)

    def _timeout_error(self, index: int, line: Optional[int]) -> ErrorInfo:
        what = f"step {index}" if index else "setup"
        return ErrorInfo(
            type="TimeoutError",
            qualname="builtins.TimeoutError",
            message=f"{what} exceeded the {self.timeout:g} s time limit (raise it with --timeout)",
            line=line,
        )

    def _time_limit(self, index: int) -> Any:
        if not self.timeout or threading.current_thread() is not threading.main_thread():
            return _NO_LIMIT
        return StepAlarm(self.timeout)

    def expectation(self, code: Code, index: int) -> ExpectationResult:
        return evaluate_expectation(code, index, self.ns, self.compile)

    # what the scenario bound ---------------------------------------------------------
    def snapshot(self, spec: Optional[StepSpec]) -> Tuple[Tuple[TensorState, ...], Dict[str, Any]]:
        expecting = bool(spec is not None and spec.expect)
        return self.steps.snapshot(self.named_objects(), expectations=expecting)

    def named_objects(self) -> List[Tuple[str, Any, str]]:
        """Every tensor-valued name, expanded as the contract says, in binding order."""
        return self.steps.named(self._bound())

    def _bound(self) -> Iterator[Tuple[str, Any]]:
        """The names the scenario's code bound (not the tool's own, nor dunders), in order."""
        initial, seen = self.initial_ids, self.seen_names
        for name, value in list(self.ns.items()):
            if name in initial and initial[name] == id(value):
                continue
            if name.startswith("__"):
                continue
            seen.add(name)
            yield name, value

    def shown_names(
        self, spec: StepSpec, tensors: Sequence[TensorState]
    ) -> Optional[Tuple[str, ...]]:
        wanted = spec.show if spec.show is not None else self.scenario.show
        if wanted is None:
            return None
        return tuple(t.name for t in tensors if any(covers(w, t.name) for w in wanted))

    def graphs(
        self, spec: StepSpec, tensors: Sequence[TensorState], objects: Dict[str, Any]
    ) -> List[Tuple[str, Any]]:
        """The (name, grad_fn) of each graph the step asks to draw."""
        if not spec.graph:
            return []
        if spec.graph is True:
            shown = self.shown_names(spec, tensors)
            targets = [
                t.name
                for t in tensors
                if t.grad_fn is not None and (shown is None or t.name in shown)
            ]
        else:
            targets = [t.name for t in tensors if any(covers(w, t.name) for w in spec.graph)]
        result = []
        for name in targets:
            obj = objects.get(name)
            if isinstance(obj, torch.Tensor):
                try:
                    grad_fn = obj.grad_fn
                except Exception:  # PyTorch refuses it; the table says why
                    continue
                result.append((name, grad_fn))
        return result

    # the run's end -------------------------------------------------------------------
    def notices(self) -> Tuple[str, ...]:
        notes = list(self._notices)
        for name, (where, line) in self.asked.items():
            if not any(covers(name, seen) or covers(seen, name) for seen in self.seen_names):
                at = f" (line {line})" if line else ""
                notes.append(f"{name!r} in {where}{at} is never bound in this scenario")
        return tuple(notes)


__all__ = ["check_policy", "collect", "iter_trace", "resolve_device", "trace", "trace_variants"]
