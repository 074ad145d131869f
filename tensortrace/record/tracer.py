"""Run a scenario on real PyTorch and record, after every step, what is true.

``iter_trace`` yields events as the run goes (the JSON-lines stream and the
child-process runner consume them); ``trace`` collects them into a ``Trace``.
Every fact comes from PyTorch at the moment of recording; the recorder never
keeps tensors alive, retains grads, hooks or copies beyond small values.
"""

from __future__ import annotations

import contextlib
import io
import platform
import sys
import threading
import types
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..version import __version__
from ..errors import PolicyError, ScenarioError, UsageError
from ..errors import StepTimeout
from ..trace.events import Assembler, End, Event, Start
from .expectations import declared_outcome, evaluate_expectation, first_line
from .explain import name_the_saved_tensor
from .helpers import base_namespace
from .graph import UNANCHORED, UNANCHORED_NODES, proven_names, saved_suspects, view_family
from .members import expand_value as _expand
from ..trace.names import covers as _covers
from .ops import OpsSession
from ..trace import (
    Confinement,
    Declared,
    Environment,
    ErrorInfo,
    ExpectationResult,
    Graph,
    ScenarioInfo,
    Step,
    StorageInfo,
    TensorState,
    Trace,
    WarningInfo,
)
from .observe import observe
from .saved import Namer, Predictor
from .probe import StorageRegistry, plain_reads, probe_named
from .reuse import SnapshotCache
from .writes import WriteWatch
from ..scenario.spec import Code, Scenario, StepSpec
from .stepenv import PlainStackDepth, StepAlarm, install_warning_filters, scenario_warning_filters

MAX_STDOUT = 64 * 1024
MAX_NAMES = 500  # tensors recorded per step; a scenario binding more gets a notice
MAX_MESSAGE = 64 * 1024  # characters of one exception or warning message
MAX_WARNINGS = 200  # warnings recorded per step; the rest are counted
_NO_LIMIT = contextlib.nullcontext()


def bounded(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters with a note of how much was left out.

    A step may raise a 40 MB message; the trace keeps its head, which is where
    PyTorch puts what matters, and says that the rest was not recorded.
    """
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit:,} more characters not recorded)"


def _exception_text(exc: object) -> str:
    """``str(exc)``, or what Python prints when that fails."""
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


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
                f"scenario {scenario.title!r} has variants ({', '.join(scenario.variant_names)}); "
                "pass variant=NAME, or use trace_variants()"
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
    wanted = scenario.device or override or "cpu"
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted.startswith("cuda"):
        index = int(wanted.split(":")[1]) if ":" in wanted else 0
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            where = "the scenario asks for" if scenario.device else "--device asks for"
            raise ScenarioError(
                f"{where} device {wanted!r}, which this machine does not have "
                f"(torch.cuda.is_available() is {torch.cuda.is_available()}); use cpu or auto",
                path=scenario.path,
                line=scenario.device_line if scenario.device else None,
                column=scenario.device_column if scenario.device else None,
            )
    elif wanted == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ScenarioError(
                "device 'mps' is not available on this machine; use cpu or auto",
                path=scenario.path,
                line=scenario.device_line if scenario.device else None,
                column=scenario.device_column if scenario.device else None,
            )
    return wanted


def check_policy(scenario: Scenario) -> None:
    """Safe mode: refuse, before anything runs, code that reaches outside the scenario."""
    from ..sandbox import check_source

    for where, reason in scenario.refusals[
        :1
    ]:  # e.g. a notebook's IPython magics, which are not Python
        raise PolicyError(reason, path=where)
    for what, code, mode in scenario.all_code():
        try:
            with _deep_recursion():
                refusals = check_source(code.source(mode), mode)
        except RecursionError:
            raise PolicyError(
                f"{what} is nested too deeply for safe mode to check; split it into simpler statements, "
                "or use --trust to run it as plain Python",
                path=scenario.path,
                line=code.line,
                column=code.column,
            ) from None
        if refusals:
            first = refusals[0]
            line, column = code.locate_source(mode, first.line, first.column)
            raise PolicyError(f"{first.message}", **scenario.place(code, line, column))


def _compile_safe() -> Callable[..., types.CodeType]:
    """``sandbox.compile_safe``, imported at its first use (once)."""
    global _COMPILE_SAFE
    if _COMPILE_SAFE is None:
        from ..sandbox import compile_safe

        _COMPILE_SAFE = compile_safe
    return _COMPILE_SAFE


_COMPILE_SAFE: Optional[Callable[..., types.CodeType]] = None
_MAX_COMPILED = 4096  # code objects a run keeps by text, for steps that repeat a text


def _relabel(code: types.CodeType, filename: str) -> types.CodeType:
    """``code`` under another file name, its nested functions' code too: a
    traceback's file name says which step (or setup piece) the line is in."""
    consts = code.co_consts
    if any(isinstance(c, types.CodeType) for c in consts):
        consts = tuple(
            _relabel(c, filename) if isinstance(c, types.CodeType) else c for c in consts
        )
    return code.replace(co_filename=filename, co_consts=consts)


@contextlib.contextmanager
def _deep_recursion(limit: int = 6000) -> Iterator[None]:
    """Room for the safe-mode checker's recursive walk of long expressions (a.abs().abs()...)."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


# --- the recorder ----------------------------------------------------------------


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
        scenario, safe=safe, device=dev, timeout=timeout, values=values, on_ran=on_ran
    )
    recorder.ops = OpsSession(scenario, on=ops, values=values, notices=recorder._notices)
    yield Start(
        scenario=ScenarioInfo(
            title=scenario.title,
            description=scenario.description,
            tags=scenario.tags,
            source=scenario.path,
            variant=scenario.variant,
        ),
        environment=Environment(
            tensortrace=__version__,
            torch=torch.__version__,
            python=platform.python_version(),
            device=dev,
            safe=safe,
            confinement=confinement,
        ),
    )
    with _fresh_torch_state(scenario.seed, dev):
        aborted = None
        if scenario.setup:
            setup = recorder.run_setup()
            yield setup
            if setup.status != "ok":
                aborted = (
                    "setup failed; no step ran" if setup.status == "raised" else setup.error.message
                )
        if aborted is None:
            for spec in scenario.steps:
                step = recorder.run_step(spec)
                yield step
                if step.status == "timeout":
                    aborted = step.error.message
                    break
        yield End(storages=recorder.storages(), notices=recorder.notices(), aborted=aborted)


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


class _Recorder:
    def __init__(
        self,
        scenario: Scenario,
        *,
        safe: bool,
        device: str,
        timeout: Optional[float],
        values: bool,
        on_ran: Optional[Callable[[int], None]] = None,
    ) -> None:
        self.scenario = scenario
        self.on_ran = on_ran or (
            lambda index: None
        )  # the user's code of a step is done; recording begins
        self.stack_memo: Dict[
            str, int
        ] = {}  # the depth the tool's own frames use, probed at the first step
        self._compiled: Dict[
            Tuple[str, str], types.CodeType
        ] = {}  # (text, mode) -> code, compiled once a run
        self.safe = safe
        self.timeout = timeout
        self.values = values
        self.registry = StorageRegistry()
        self.predictor = Predictor()  # what each step's saved tensors say about backward
        self.memo = (
            SnapshotCache()
        )  # last snapshot's records, reused while a tensor is provably unchanged
        self.writes = WriteWatch(
            scenario, safe=safe
        )  # which storages each step provably did not write
        self.initial = base_namespace()
        if safe:
            from ..sandbox import safe_globals

            self.ns = safe_globals(dict(self.initial))
        else:
            self.ns = dict(self.initial)
        self.initial_ids = {k: id(v) for k, v in self.ns.items()}
        self.nones: List[str] = []  # the names the last snapshot saw bound to None
        self.warning_filters: List[
            Any
        ] = []  # filters the scenario's own code added, kept between steps
        self.seen_names: set = set()
        self.asked: Dict[
            str, Tuple[str, Optional[int]]
        ] = {}  # name → (where, line) from show/graph
        self._notices: List[str] = list(scenario.notices)
        self.ops = OpsSession(scenario, on=False)  # what each step ran: iter_trace turns it on
        for name in scenario.show or ():
            self.asked.setdefault(name, ("show", None))
        for spec in scenario.steps:
            for name in spec.show or ():
                self.asked.setdefault(name, (f"'show' of step {spec.index}", spec.run.line))
            if isinstance(spec.graph, tuple):
                for name in spec.graph:
                    self.asked.setdefault(name, (f"'graph' of step {spec.index}", spec.run.line))

    # compiling and running -------------------------------------------------
    def compile(self, code: Code, filename: str, mode: str) -> types.CodeType:
        """``code`` compiled under ``filename``; text compiled before is only re-labelled (``_relabel``)."""
        text = code.source(mode)
        known = self._compiled.get((text, mode))
        if known is not None:
            return known if known.co_filename == filename else _relabel(known, filename)
        if self.safe:
            compile_safe = _compile_safe()
            try:  # known code comes from the checker's cache, at any depth
                compiled = compile_safe(text, filename, mode)
            except (
                RecursionError
            ):  # new code nested too deeply for this stack: checked again with room
                with _deep_recursion():
                    compiled = compile_safe(text, filename, mode)
        else:
            compiled = compile(text, filename, mode, dont_inherit=True)
        if len(self._compiled) < _MAX_COMPILED:
            self._compiled[(text, mode)] = compiled
        return compiled

    def run_setup(self) -> Step:
        text = "\n".join(c.text for c in self.scenario.setup)
        first = self.scenario.setup[0]
        status, error, warns, stdout, _ = self.execute(
            [(c, f"<setup {i}>") for i, c in enumerate(self.scenario.setup)], 0
        )
        if status == "ok":
            failures: Tuple[str, ...] = ()
        elif status == "timeout":
            failures = (error.message,)
        else:
            failures = (f"setup raised {error.type}: {first_line(error.message)}",)
        self.on_ran(0)
        with plain_reads():
            tensors, objects = self.snapshot(None)
            ops, omitted, flow = self.ops.finish(self.registry, objects)
            _, predictions = self.observe(None, 0, text, tensors, objects)
        del objects
        return Step(
            ops=ops,
            ops_omitted=omitted,
            flow=flow,
            index=0,
            code=text,
            line=first.line,
            none=tuple(self.nones),
            status=status,
            error=error,
            warnings=warns,
            stdout=stdout,
            behaved=status == "ok",
            failures=failures,
            tensors=tensors,
            predictions=predictions,
        )

    def run_step(self, spec: StepSpec) -> Step:
        status, error, warns, stdout, classes = self.execute(
            [(spec.run, f"<step {spec.index}>")], spec.index
        )
        expectations = (
            tuple(self.expectation(code, spec.index) for code in spec.expect)
            if status != "timeout" and spec.expect
            else ()
        )
        raised_ok, warned_ok, failures = declared_outcome(spec, status, error, warns, classes)
        if expectations:
            failures += [f"expectation failed: {e.expr}" for e in expectations if not e.passed]
        self.on_ran(spec.index)
        with plain_reads():
            tensors, objects = self.snapshot(spec)
            ops, omitted, flow = self.ops.finish(self.registry, objects)
            graphs, predictions = self.observe(spec, spec.index, spec.run.text, tensors, objects)
            if error is not None:
                suspects = classes.pop("saved", None)
                error = name_the_saved_tensor(
                    error,
                    tensors,
                    proven=proven_names(suspects, objects),
                    family=view_family(suspects, objects),
                )
                del suspects
        del objects
        shown = self.shown_names(spec, tensors)
        return Step(
            index=spec.index,
            code=spec.run.text,
            line=spec.run.line,
            note=spec.note,
            cell=self.cell_of(spec),
            none=tuple(self.nones),
            status=status,
            error=error,
            warnings=warns,
            stdout=stdout,
            expectations=expectations,
            raises=spec.raises if isinstance(spec.raises, Declared) else None,
            warns=spec.warns if isinstance(spec.warns, Declared) else None,
            raised_as_declared=raised_ok,
            warned_as_declared=warned_ok,
            behaved=not failures,
            failures=tuple(failures),
            shown=shown,
            tensors=tensors,
            graphs=graphs,
            predictions=predictions,
            ops=ops,
            ops_omitted=omitted,
            flow=flow,
        )

    def cell_of(self, spec: StepSpec) -> Optional[int]:
        """The notebook cell a step came from (its ``line`` counts from there); None elsewhere."""
        cells = self.scenario.cells
        return cells[spec.index - 1] if 0 < spec.index <= len(cells) else None

    def execute(self, pieces: Sequence[Tuple[Code, str]], index: int):
        """Run code with every warning enabled and output captured (rules 6 and 7)."""
        out = io.StringIO()
        status, error = "ok", None
        warns: List[WarningInfo] = []
        classes: Dict[str, Any] = {"error": None, "warnings": []}
        lines = {filename: code for code, filename in pieces}
        with warnings.catch_warnings(record=True) as caught:
            self._install_warning_filters()
            streams = sys.stdout, sys.stderr  # as contextlib.redirect_stdout and redirect_stderr do
            sys.stdout = sys.stderr = out
            try:
                try:
                    compiled = [self.compile(code, filename, "exec") for code, filename in pieces]
                    with (
                        self._time_limit(index),
                        PlainStackDepth(self.stack_memo),
                        self.ops.modes(caught),
                    ):
                        for each in compiled:
                            exec(each, self.ns)
                finally:
                    sys.stdout, sys.stderr = streams
            except StepTimeout:
                status = "timeout"
                error = ErrorInfo(
                    type="TimeoutError",
                    qualname="builtins.TimeoutError",
                    message=f"{f'step {index}' if index else 'setup'} exceeded the {self.timeout:g} s time limit (raise it with --timeout)",
                    line=pieces[0][0].line,
                )
            except (KeyboardInterrupt, GeneratorExit):
                raise
            except BaseException as exc:  # the scenario's own error: recorded, not raised
                status = "raised"
                error = _error_info(exc, lines)
                classes["error"] = type(exc)
                classes["saved"] = saved_suspects(exc, error.message)
                del exc
            self._keep_warning_filters()
            for w in caught:
                code = lines.get(w.filename)
                line = code.locate(w.lineno)[0] if code is not None else None
                if len(warns) < MAX_WARNINGS:
                    warns.append(
                        WarningInfo(
                            category=w.category.__name__,
                            message=bounded(_exception_text(w.message), MAX_MESSAGE),
                            line=line,
                        )
                    )
                elif len(warns) == MAX_WARNINGS:
                    more = len(caught) - MAX_WARNINGS
                    warns.append(
                        WarningInfo(
                            category="tensortrace.Notice",
                            message=f"{more:,} more warnings in this step were not recorded",
                            line=None,
                        )
                    )
                classes["warnings"].append((w.category, _exception_text(w.message)))
            caught.clear()
        text = out.getvalue()
        if len(text) > MAX_STDOUT:
            text = bounded(text, MAX_STDOUT) + "\n"
        return status, error, tuple(warns), text, classes

    def _install_warning_filters(self) -> None:
        """The filters the scenario's code set so far, above rule 6's "always" for everything else."""
        install_warning_filters(self.warning_filters)

    def _keep_warning_filters(self) -> None:
        """Filters set by the step persist to the next step, as they would in plain Python."""
        self.warning_filters = scenario_warning_filters()

    def _time_limit(self, index: int) -> Any:
        if not self.timeout or threading.current_thread() is not threading.main_thread():
            return _NO_LIMIT
        return StepAlarm(self.timeout)

    # expectations and declarations --------------------------------------------
    def expectation(self, code: Code, index: int) -> ExpectationResult:
        return evaluate_expectation(code, index, self.ns, self.compile)

    # observing -------------------------------------------------------------------
    def snapshot(self, spec: Optional[StepSpec]) -> Tuple[Tuple[TensorState, ...], Dict[str, Any]]:
        named = self.named_objects()
        if (
            self.asked
        ):  # only the names that show or graph ask for are checked against what was seen
            self.seen_names.update(name for name, _, _ in named)
        self.memo.window = self.writes.window(
            self.ops.level, self.ops.now, bool(spec is not None and spec.expect)
        )
        return probe_named(named, self.registry, values=self.values, memo=self.memo)

    def named_objects(self) -> List[Tuple[str, Any, str]]:
        """Every tensor-valued name, expanded as the contract says, in binding order."""
        found: List[Tuple[str, Any, str]] = []
        initial, seen, tensor = self.initial_ids, self.seen_names, torch.Tensor
        nones = self.nones = []  # bound to None: variants compared say "None", not "not bound"
        for name, value in list(self.ns.items()):
            if name in initial:
                if initial[name] == id(value):
                    continue
            if name.startswith("__"):
                continue
            seen.add(name)
            if type(value) is tensor:  # the common case, without _expand's checks
                found.append((name, value, "tensor"))
                continue
            if value is None:
                if len(nones) < MAX_NAMES:
                    nones.append(name)
                continue
            notes: List[str] = []
            _expand(name, value, found, depth=0, notes=notes)
            for note in notes:
                if note not in self._notices:
                    self._notices.append(note)
            if len(found) >= MAX_NAMES:
                note = f"more than {MAX_NAMES} tensors are bound; only the first {MAX_NAMES} are recorded"
                if note not in self._notices:
                    self._notices.append(note)
                break
        return found[:MAX_NAMES]

    def shown_names(
        self, spec: StepSpec, tensors: Sequence[TensorState]
    ) -> Optional[Tuple[str, ...]]:
        wanted = spec.show if spec.show is not None else self.scenario.show
        if wanted is None:
            return None
        return tuple(t.name for t in tensors if any(_covers(w, t.name) for w in wanted))

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
            targets = [t.name for t in tensors if any(_covers(w, t.name) for w in spec.graph)]
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

    def observe(
        self,
        spec: Optional[StepSpec],
        index: int,
        code: str,
        tensors: Sequence[TensorState],
        objects: Dict[str, Any],
    ) -> Tuple[Tuple[Graph, ...], Tuple[Any, ...]]:
        """The graphs the step draws, with what each node saved, and the backwards that will fail (``saved.py``)."""
        drawn = self.graphs(spec, tensors, objects) if spec is not None else []
        names_by_id: Dict[int, str] = {}
        for name, obj in objects.items() if drawn else ():  # names only a drawing uses
            names_by_id.setdefault(id(obj), name)
        self.predictor.note(index, code, tensors)
        self.predictor.released = self.ops.released
        observed = observe(
            self.predictor,
            index,
            drawn,
            tensors,
            objects,
            Namer(objects, tensors, self.registry),
            names_by_id,
        )
        stopped = UNANCHORED.format(n=UNANCHORED_NODES)
        if self.predictor.unanchored and stopped not in self._notices:
            self._notices.append(stopped)
        return observed

    def storages(self) -> Tuple[StorageInfo, ...]:
        return tuple(
            StorageInfo(
                label=a.label, nbytes=a.nbytes, device=a.device, ptr=a.ptr, names=tuple(a.names)
            )
            for a in self.registry.allocations
        )

    def notices(self) -> Tuple[str, ...]:
        notes = list(self._notices)
        for name, (where, line) in self.asked.items():
            if not any(_covers(name, seen) or _covers(seen, name) for seen in self.seen_names):
                at = f" (line {line})" if line else ""
                notes.append(f"{name!r} in {where}{at} is never bound in this scenario")
        return tuple(notes)


def _error_info(exc: BaseException, lines: Dict[str, Code]) -> ErrorInfo:
    from .explain import explain

    line = None
    tb = exc.__traceback__
    while tb is not None:
        code = lines.get(tb.tb_frame.f_code.co_filename)
        if code is not None:
            line = code.locate(tb.tb_lineno)[0]
        tb = tb.tb_next
    if line is None and isinstance(exc, SyntaxError) and exc.filename in lines:
        line = lines[exc.filename].locate(exc.lineno)[0]
    cls = type(exc)
    message = bounded(_exception_text(exc), MAX_MESSAGE)
    return ErrorInfo(
        type=cls.__name__,
        qualname=f"{cls.__module__}.{cls.__qualname__}",
        message=message,
        line=line,
        explanation=explain(cls.__name__, message),
    )
