"""``with tensortrace.doctor(): train()`` and ``tensortrace doctor SCRIPT``: watch, then report.

The script runs as ``python SCRIPT ARGS...`` would run it: ``runpy`` with
``run_name="__main__"``, its own ``sys.argv``, ``sys.path[0]`` its folder
(the working directory for ``-m``), in this process. It is the user's own
code, so there is no safe mode; the report says so once.

When the script fails, the report comes first on stderr, then the script's
own traceback as Python prints it (without this tool's frames, nor the frames
that exist only because doctor's function mode saw the call: PyTorch's
``handle_torch_function`` and the first entry of the function it handed
over), and the script's exit status: 1 for an uncaught exception, a
``SystemExit``'s code kept. A file that is not Python text is refused in one
sentence before anything runs (exit status 2).

Before the report is written, each fix that is code is checked on a copy of
the script (``verify.py``: the script runs again, in a child, as often as
there are fixes, within ``check_budget`` seconds in all); ``check=False``
turns that off.
"""

from __future__ import annotations

import importlib.util
import os

import msgspec
import runpy
import shutil
import sys
import time
import traceback
import warnings
from types import TracebackType
from typing import Any, List, Optional, Sequence, Tuple, Union

from ..errors import TensorTraceError, UsageError
from ..scenario.script import running_as_python, script_folder
from ..trace.doctor import LINE_KINDS, REPORT_VERSION, Aside, Report, Watched, report_json

FORMATS = ("console", "json")
_HERE = os.path.dirname(os.path.abspath(__file__))
NOT_CHECKED = "the fixes were not run (tensortrace doctor SCRIPT runs each on a copy of the script)"
_DISPATCH = tuple(
    os.path.join("torch", *parts) for parts in (("_ops.py",), ("utils", "_python_dispatch.py"))
)
_OVERRIDES = os.path.join("torch", "overrides.py")


class doctor:
    """Watch a block of your own training code: why backward failed, or what changed silently.

    ``with tensortrace.doctor(): train()``. ``output``: a file to write the
    report to (atomically; ``fmt`` ``console`` or ``json``, by default from
    the suffix), else stderr. The last report is kept as ``.report``. An
    exception leaving the block goes on unchanged, after its report. The
    first NaN or Inf of a loss (or of what ``torch.autograd.grad`` returns) is
    reported with its line and iteration; ``nan=True`` also finds the
    operation that made it, among those that make NaN or Inf from ordinary
    numbers (log, division, sqrt, exp, pow...) and their gradients, and
    ``nan="all"`` checks every operation (slower each: docs/doctor.md).
    """

    def __init__(
        self,
        output: Optional[str] = None,
        *,
        fmt: Optional[str] = None,
        width: Optional[int] = None,
        target: str = "<block>",
        nan: Union[bool, str] = False,
    ) -> None:
        self.level = nan_level(nan)
        self.output = None if output is None else os.fspath(output)
        self.fmt = check_format(fmt, self.output)
        self.width = width
        self.target = target
        self.report: Optional[Report] = None
        self.nan = nan
        self.nonfinite_after: Optional[float] = None  # seconds the run took to its NaN or Inf
        self.nonfinite_whole: Optional[float] = None  # and to its end
        self.recorder: Any = None  # the last run's recorder, after finish()
        self._recorder: Any = None

    def __enter__(self) -> "doctor":
        from .recorder import Recorder

        if self._recorder is not None:
            raise UsageError("this doctor() is already watching; use a new one for a nested block")
        self._recorder = Recorder()
        self._recorder.start()
        _watch_nonfinite(self._recorder, self.level)
        return self

    def __exit__(self, kind: Any, exc: Optional[BaseException], tb: Any) -> bool:
        self.finish(exc)
        try:
            write_report(self.report, self.output, self.fmt, width=self.width)
        except (TensorTraceError, OSError) as problem:
            if exc is None:
                raise
            warnings.warn(
                f"tensortrace: the doctor report could not be written: {problem}",
                RuntimeWarning,
                stacklevel=2,
            )
        return False

    def finish(self, exc: Optional[BaseException], status: Optional[int] = None) -> Report:
        """Stop watching, and make the report of what was seen (``exc``: what left the block)."""
        from .places import place
        from .silent import silent_records

        rec, self._recorder = self._recorder, None
        nonfinite, self.nonfinite_after, self.nonfinite_whole = _stop_nonfinite(rec)
        rec.stop()
        self.recorder = rec
        self.report = Report(
            version=REPORT_VERSION,
            target=self.target,
            watched=Watched(saved=rec.saved, writes=rec.writes, backwards=rec.backwards),
            failure=rec.failure_for(exc) or _read_after_run(exc),
            silent=silent_records(rec),
            exit_status=status,
            starved=rec.starved_records(),
            aside=tuple(
                Aside(what=what, place=place(spot), times=times)
                for (what, spot), times in rec.asides.items()
            ),
            checked=NOT_CHECKED,
            nonfinite=nonfinite,
        )
        return self.report


def _read_after_run(exc: Optional[BaseException]) -> Any:
    """``misuse.after_run``'s report of an error raised by a line, or None. A failure of that
    reading is a warning: the script's own exception goes on unchanged."""
    if exc is None:
        return None
    from .misuse import after_run

    try:
        return after_run(exc)
    except Exception as problem:
        warnings.warn(
            "tensortrace doctor: reading the script's error failed "
            f"({type(problem).__name__}: {problem}); the error goes on unchanged",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


NAN_LEVELS = {False: "losses", True: "risky", "all": "every-op"}


def nan_level(nan: Any) -> str:
    """``nan=False`` (the losses only), ``True`` (and the operations that make NaN or Inf from
    ordinary numbers) or ``"all"`` (every operation): the watch's level (``nonfinite.LEVELS``)."""
    if isinstance(nan, (bool, str)) and nan in NAN_LEVELS:
        return NAN_LEVELS[nan]
    raise UsageError(f"doctor(nan={nan!r}): nan is False (the default), True or 'all'")


def _watch_nonfinite(rec: Any, level: str) -> None:
    """The NaN and Inf watch (nonfinite.py), on top of the recorder's own hooks."""
    from .nonfinite import NonFiniteWatch

    rec.nonfinite = NonFiniteWatch(rec, level=level)
    rec.nonfinite.start()


def _stop_nonfinite(rec: Any) -> Tuple[Any, Optional[float], Optional[float]]:
    """The record of the run's first NaN or Inf (or None), the seconds the run took to it, and
    to its end; the watch's hooks are removed."""
    from . import nanrules, symptoms

    watch, rec.nonfinite = rec.nonfinite, None
    if watch is None:  # not watched (the benchmark's doctor without it)
        return None, None, None
    try:
        seen = symptoms.finish(watch)
        whole = time.monotonic() - watch.started
        if seen is None:
            return None, None, whole
        return nanrules.diagnosis(seen, watch.level), seen.after, whole
    finally:
        watch.stop()
        if watch.broken is not None:
            warnings.warn(
                "tensortrace doctor: the NaN and Inf watch stopped after an error of its own "
                f"({watch.broken}); the script ran on unchanged",
                RuntimeWarning,
                stacklevel=2,
            )


def check_format(fmt: Optional[str], output: Optional[str]) -> str:
    """``console`` or ``json``: as asked, else json for a ``.json`` file, else console."""
    if fmt is None:
        return "json" if output and output.lower().endswith(".json") else "console"
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: doctor writes {' or '.join(FORMATS)}")
    return fmt


def render_report(
    report: Report, fmt: str, *, width: Optional[int] = None, color: bool = False
) -> str:
    if fmt == "json":
        return report_json(report)
    from ..render.doctor import render_console

    return render_console(report, width=width, color=color)


def write_report(
    report: Any, path: Optional[str], fmt: str, *, width: Optional[int] = None
) -> None:
    """To ``path`` (atomically), or to stderr."""
    if path is None or path == "-":
        stream = sys.stderr
        tty = bool(getattr(stream, "isatty", lambda: False)())
        if width is None and tty:
            width = shutil.get_terminal_size().columns
        color = tty and not os.environ.get("NO_COLOR") and fmt == "console"
        stream.write(render_report(report, fmt, width=width, color=color))
        stream.flush()
        return
    from ..output import Output

    out = Output(path)
    try:
        out.write(render_report(report, fmt, width=width))
        out.commit()
    except BaseException:
        out.discard()
        raise


# --- the command line --------------------------------------------------------------------


def run_target(
    target: str,
    args: Sequence[str],
    *,
    module: bool = False,
    output: Optional[str] = None,
    fmt: Optional[str] = None,
    width: Optional[int] = None,
    check: bool = True,
    check_budget: Optional[float] = None,
    nan: Union[bool, str] = False,
) -> int:
    """Run a script (or ``-m`` module) under the doctor; the script's exit status."""
    form = check_format(fmt, output)
    budget = _check_budget(check_budget)
    if output not in (None, "-"):
        from ..output import Output

        Output(output).discard()  # a folder that is not there: said now, before the script runs
    argv0 = _check_target(target, module)
    watch = doctor(output, fmt=form, width=width, target=target, nan=nan)
    folder = os.getcwd() if module else script_folder(target)
    exc: Optional[BaseException] = None
    status = 0
    watch.__enter__()
    try:
        with running_as_python(argv0, args, folder):
            if module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
    except SystemExit as stop:
        status = _exit_status(stop)
    except KeyboardInterrupt as stop:
        exc, status = stop, 130
    except BaseException as failure:  # the script's own error: reported, then shown as Python would
        exc, status = failure, 1
    report = watch.finish(exc, status)
    if check:
        report = _checked(report, watch.recorder, target, args, module, budget)
        report = _checked_nonfinite(report, watch, target, args, module, budget)
    else:
        report = msgspec.structs.replace(
            report,
            checked="the fixes were not run (--no-check); each is an edit of the lines shown",
        )
    watch.report = report
    write_report(report, output, form, width=width)
    if exc is not None:
        _print_traceback(exc)
    return status


def _check_budget(budget: Optional[float]) -> float:
    from .verify import DEFAULT_BUDGET

    if budget is None:
        return DEFAULT_BUDGET
    if not budget > 0 or budget != budget or budget == float("inf"):
        raise UsageError(f"--check-budget {budget}: give the seconds the checks may take, e.g. 60")
    return float(budget)


def _checked(
    report: Report, rec: Any, target: str, args: Sequence[str], module: bool, budget: float
) -> Report:
    """The report with each fix that is code run on a copy of the script (``verify.py``)."""
    from .verify import DOCTOR_PROBE, Script, Target, check_fixes

    failure = report.failure
    wanted = failure is not None and any(getattr(f, "edits", ()) for f in failure.fixes)
    wanted = wanted or any(f.edits for s in report.starved for f in s.fixes)
    if not wanted:
        return msgspec.structs.replace(report, checked=None)
    took = rec.failed_after
    if took is not None and took * 1.5 + 5 > budget:
        note = (
            f"the fixes were not run: the script took {took:.0f} s to reach the failing backward, "
            f"more than the checks' budget allows ({budget:g} s; --check-budget raises it)"
        )
        return msgspec.structs.replace(report, checked=note)
    script = Script.of(target, args, module)
    runs = 0
    if failure is not None:
        # a failure raised by a line (a write refused in place, a None .grad, .numpy()) has no
        # backward of its own to wait for: the copy runs to its end (or its budget)
        point = None
        if failure.backward is not None and failure.kind not in LINE_KINDS:
            point = Target(failure.backward.path, failure.backward.line, failure.backward_run)
        fixes = check_fixes(script, failure.fixes, point, budget=budget)
        runs += sum(1 for f in fixes if getattr(f, "check", None) is not None)
        report = msgspec.structs.replace(
            report, failure=msgspec.structs.replace(failure, fixes=fixes)
        )
    starved = []
    for entry, record in zip(rec.starved.values(), report.starved):
        spot, run = entry["target"] or (None, 1)
        from .places import place

        where = place(spot)
        point = None if where is None else Target(where.path, where.line, run)
        fixes = check_fixes(script, record.fixes, point, budget=budget, probes=(DOCTOR_PROBE,))
        runs += sum(1 for f in fixes if f.check is not None)
        starved.append(msgspec.structs.replace(record, fixes=fixes))
    times = "once" if runs == 1 else "twice" if runs == 2 else f"{runs} times"
    note = (
        f"each fix marked ✓ or ✗ ran on a copy of {target} (the script ran again, {times}; "
        "--no-check skips this); your files were not changed"
    )
    return msgspec.structs.replace(report, starved=tuple(starved), checked=note)


def _checked_nonfinite(
    report: Report, watch: "doctor", target: str, args: Sequence[str], module: bool, budget: float
) -> Report:
    """The report with the fixes of its NaN or Inf run on copies (``nancheck.py``)."""
    from .nancheck import checked

    return checked(
        report, target, args, module, budget, watch.nonfinite_after, watch.nonfinite_whole
    )


def _check_target(target: str, module: bool) -> str:
    if module:
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as problem:
            raise UsageError(f"-m {target}: {problem}") from None
        if spec is None:
            raise UsageError(f"-m {target}: no module of that name on the path")
        return spec.origin or target
    if not os.path.isfile(target):
        what = "is a directory" if os.path.isdir(target) else "no such file"
        raise UsageError(f"{target}: {what}; give the Python script to run")
    _check_python(target)
    return target


def _check_python(target: str) -> None:
    """One sentence for a file Python could not read as source (binary, not text)."""
    import io
    import tokenize

    try:
        with open(target, "rb") as handle:
            data = handle.read()
    except OSError as problem:
        raise UsageError(f"{target}: {problem.strerror or problem}") from None
    if b"\x00" in data:
        raise UsageError(f"{target}: this is a binary file, not a Python script")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        raise UsageError(
            f"{target}: this is not Python text (not valid in its encoding); give the "
            "Python script to run"
        ) from None
    if target.lower().endswith(".ipynb"):
        raise UsageError(
            f"{target}: this is a notebook, not a Python script; export it with "
            "`jupyter nbconvert --to script`, or use `with tensortrace.doctor():` in a cell"
        )


def _exit_status(stop: SystemExit) -> int:
    code = stop.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_traceback(exc: BaseException) -> None:
    """The traceback Python would print, without runpy's and this tool's frames."""
    from ..render.visible import visible  # control characters spelled, as the report spells them

    for each in _chain(exc):
        each.__traceback__ = _trimmed(each.__traceback__)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    sys.stderr.write(visible(text))
    sys.stderr.flush()


def _chain(exc: BaseException) -> List[BaseException]:
    found: List[BaseException] = []
    while exc is not None and exc not in found:
        found.append(exc)
        exc = exc.__cause__ or exc.__context__
    return found


def _ours(tb: TracebackType) -> bool:
    name = tb.tb_frame.f_code.co_filename
    if name.startswith(_HERE) or name == "<frozen runpy>":
        return True
    return os.path.basename(name) == "runpy.py" and name.startswith(os.path.dirname(os.__file__))


def _dispatch(tb: TracebackType) -> bool:
    """A frame of PyTorch's Python dispatch (``torch/_ops.py``) that only exists because
    a dispatch mode called the operation."""
    return tb.tb_frame.f_code.co_filename.endswith(_DISPATCH)


def _handing(frames: List[TracebackType], i: int) -> bool:
    """Whether ``frames[i]`` only exists because doctor's function mode saw the call: PyTorch's
    ``handle_torch_function`` (``torch/overrides.py``) handing it to doctor's handler, or the
    torch function's first entry that called it (the handler calls the function again)."""
    at = frames[i].tb_frame.f_code.co_filename
    if at.endswith(_OVERRIDES):
        return i + 1 < len(frames) and _ours(frames[i + 1])
    torch = sys.modules.get("torch")
    home = os.path.join(os.path.dirname(getattr(torch, "__file__", None) or os.sep), "")
    return (
        torch is not None
        and at.startswith(home)
        and i + 2 < len(frames)
        and frames[i + 1].tb_frame.f_code.co_filename.endswith(_OVERRIDES)
        and _ours(frames[i + 2])
    )


def _trimmed(tb: Optional[TracebackType]) -> Optional[TracebackType]:
    frames: List[TracebackType] = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    kept: List[TracebackType] = []
    dropped = False
    for i, each in enumerate(frames):
        if _ours(each) or _handing(frames, i) or (dropped and _dispatch(each)):
            dropped = True
            continue
        dropped = False
        kept.append(each)
    for each, following in zip(kept, kept[1:] + [None]):
        each.tb_next = following
    return kept[0] if kept else None
