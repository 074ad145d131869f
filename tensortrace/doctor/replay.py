"""The child that runs an edited copy of the user's script, for ``verify.py``.

``python -m tensortrace.doctor.replay SPEC.json`` reads a ``Spec``: the
script (or ``-m`` module) and its arguments, the edited text of each changed
file, and the backward call to wait for (``Until``: a file, a line, how many
times it must pass). It runs the script as ``python SCRIPT ARGS`` would, in
this fresh process, with the edited files served in place of the originals:
the main script is compiled from its edited text under its own file name
(so ``__file__``, ``sys.path[0]`` and relative paths are the original's), an
edited module is served by an import finder, and ``linecache`` holds the
edited lines for tracebacks. Nothing is written to the user's files.

``torch.autograd.backward`` and ``torch.autograd.grad`` are wrapped to count
the calls that return from the awaited line. When it has passed ``times``
times, the child writes its ``Outcome`` and leaves at once (``os._exit``:
the rest of the script, its ``atexit`` handlers and buffered output are not
wanted). Otherwise the outcome is how the script ended: normally, by
``SystemExit``, or with an exception and the user's line it came from.

A probe (``Spec.probes``: ``"tensortrace.doctor.some_module:factory"``) adds a
condition: the factory is called with the spec before the script runs and
returns an object with ``problems() -> list of str``, read when the child
ends; any problem fails the check. ``doctor_probe`` here is doctor's own: the
fix must also leave nothing for doctor to report.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import os
import runpy
import sys
import time
import types
from typing import Any, Dict, List, Optional, Tuple

import msgspec

MAX_TEXT = 600  # characters of an error message kept


class Until(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The backward call to wait for: the ``times``-th successful return from ``path:line``
    (``path`` absolute, ``line`` in the edited copy)."""

    path: str
    line: int
    times: int


class Spec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    target: str  # the script's absolute path, or a module name with module=True
    args: Tuple[str, ...]
    module: bool
    cwd: str
    files: Dict[str, str]  # absolute path -> edited text
    until: Optional[Until]
    result: str  # where the child writes its Outcome
    probes: Tuple[str, ...] = ()


class Outcome(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How the edited copy ran."""

    ended: str  # "reached" (the awaited backward passed), "finished", "exited", "raised"
    passes: int  # returns from the awaited line
    seconds: float
    status: int = 0  # the exit status for "exited"
    error: Optional[str] = None  # "TypeName: first line of the message"
    where: Optional[Tuple[str, int]] = None  # the innermost user line of the traceback
    problems: Tuple[str, ...] = ()  # what the probes found


def read_outcome(path: str) -> Optional[Outcome]:
    """The child's outcome, typed and bounded; None when there is none or it is not one."""
    try:
        with open(path, "rb") as handle:
            data = handle.read((1 << 16) + 1)
    except OSError:
        return None
    if not data or len(data) > 1 << 16:
        return None
    try:
        return msgspec.json.decode(data, type=Outcome)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


# --- inside the child ---------------------------------------------------------------------


class _Served(importlib.abc.MetaPathFinder):
    """Finds a module as the path finder would, and serves the edited text of a changed file."""

    def __init__(self, files: Dict[str, str]) -> None:
        self.files = files

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.origin is None:
            return None
        origin = os.path.abspath(spec.origin)
        if origin not in self.files:
            return None
        loader = _EditedLoader(name, origin, self.files[origin])
        return importlib.util.spec_from_file_location(
            name, origin, loader=loader, submodule_search_locations=spec.submodule_search_locations
        )


class _EditedLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, name: str, path: str, text: str) -> None:
        super().__init__(name, path)
        self.text = text

    def get_data(self, path: str) -> bytes:
        if os.path.abspath(path) == os.path.abspath(self.path):
            return self.text.encode("utf-8")
        return super().get_data(path)

    def path_stats(self, path: str) -> Any:
        raise OSError("edited copy: never cached")


class _Run:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.passes = 0
        self.start = time.monotonic()
        self.probes: List[Any] = []

    def outcome(self, ended: str, **more: Any) -> Outcome:
        problems: List[str] = []
        for probe in self.probes:
            try:
                problems.extend(str(p)[:MAX_TEXT] for p in probe.problems())
            except Exception as exc:  # a probe that fails is a problem of the check, said so
                problems.append(f"the check itself failed: {type(exc).__name__}: {exc}"[:MAX_TEXT])
        return Outcome(
            ended=ended,
            passes=self.passes,
            seconds=round(time.monotonic() - self.start, 3),
            problems=tuple(problems[:8]),
            **more,
        )

    def write(self, outcome: Outcome) -> None:
        temporary = self.spec.result + ".part"
        with open(temporary, "wb") as handle:
            handle.write(msgspec.json.encode(outcome))
        os.replace(temporary, self.spec.result)

    def wrap(self, original: Any) -> Any:
        run = self
        until = self.spec.until

        def call(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if until is not None:
                frame = sys._getframe(1)
                while frame is not None:
                    name = frame.f_code.co_filename
                    if name == until.path:
                        if frame.f_lineno == until.line:
                            run.passes += 1
                            if run.passes >= until.times:
                                run.finish(run.outcome("reached"))
                        break
                    frame = frame.f_back
            return result

        call.__wrapped__ = original  # type: ignore[attr-defined]
        call.__doc__ = original.__doc__
        return call

    def finish(self, outcome: Outcome) -> None:
        self.write(outcome)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _user_line(exc: BaseException, files: Dict[str, str], target: str) -> Optional[Tuple[str, int]]:
    """The innermost traceback line in the script's own files (the edited ones or its folder)."""
    tb = exc.__traceback__
    here = os.path.dirname(target)
    found = None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in files or name == target or (here and name.startswith(here + os.sep)):
            found = (name, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:MAX_TEXT]


def run(spec: Spec) -> Outcome:
    state = _Run(spec)
    for path, text in spec.files.items():
        linecache.cache[path] = (len(text), None, text.splitlines(keepends=True), path)
    sys.meta_path.insert(0, _Served(dict(spec.files)))
    import torch

    torch.autograd.backward = state.wrap(torch.autograd.backward)
    torch.autograd.grad = state.wrap(torch.autograd.grad)
    for name in spec.probes:
        module_name, _, factory = name.partition(":")
        if not module_name.startswith("tensortrace."):
            raise SystemExit(f"probe {name!r}: only tensortrace's own probes run here")
        state.probes.append(getattr(importlib.import_module(module_name), factory)(spec))
    if spec.module:
        found = importlib.util.find_spec(spec.target)
        argv0 = found.origin if found is not None and found.origin else spec.target
        sys.path[0:1] = [spec.cwd]
    else:
        argv0 = spec.target
        sys.path[0:1] = [os.path.dirname(spec.target)]
    sys.argv = [argv0, *spec.args]
    try:
        if spec.module:
            runpy.run_module(spec.target, run_name="__main__", alter_sys=True)
        elif spec.target in spec.files:
            _run_edited_main(spec.target, spec.files[spec.target])
        else:
            runpy.run_path(spec.target, run_name="__main__")
    except SystemExit as stop:
        code = stop.code
        status = 0 if code is None else code if isinstance(code, int) else 1
        if status == 0:
            return state.outcome("finished")
        return state.outcome("exited", status=status)
    except BaseException as exc:  # the copy's own error: what the check reports
        return state.outcome(
            "raised", error=_first_line(exc), where=_user_line(exc, spec.files, spec.target)
        )
    return state.outcome("finished")


def _run_edited_main(path: str, text: str) -> None:
    """Run edited source as ``__main__`` under the original file name (as runpy would)."""
    code = compile(text, path, "exec")
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=path, __builtins__=__builtins__, __spec__=None, __loader__=None, __cached__=None
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


class _DoctorProbe:
    """The fix must leave nothing for doctor to report: no failure it reads, no silent change,
    no starved step."""

    def __init__(self, spec: Spec) -> None:
        from .recorder import Recorder

        self.rec = Recorder()
        self.rec.start()

    def problems(self) -> List[str]:
        from .silent import silent_records

        found = [s.headline for s in silent_records(self.rec)]
        found += [s.headline for s in self.rec.starved_records()]
        return found


def doctor_probe(spec: Spec) -> Any:
    return _DoctorProbe(spec)


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tensortrace.doctor.replay SPEC.json", file=sys.stderr)
        return 2
    with open(argv[1], "rb") as handle:
        spec = msgspec.json.decode(handle.read(), type=Spec)
    os.chdir(spec.cwd)
    state = _Run(spec)
    state.finish(run(spec))  # leaves at once: the script's threads and atexit are not waited for
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
