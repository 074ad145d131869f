"""Check fixes by running them: each on an edited copy of the script, in a child process.

A fix is code (``Fix.edits``: lines of a file and what they become,
``edits.py`` builds them from the file's syntax tree). ``check_fixes``
applies each fix's edits to copies of the files in memory (the user's files
are never written), runs the script in a fresh Python (``replay.py``) with the
copies served in place of the originals, and waits until the backward that
failed has passed there, one run more than in the failing run (a loop's next
iteration too), or the script ends, or the time budget is spent. Each fix
comes back with a ``Check``: passed, failed (with the error the copy met and
its line), or unchecked (and why).

Use it for any fix a watch suggests::

    from tensortrace.doctor.verify import Script, Target, check_fixes

    script = Script.of("train.py", ["--epochs", "3"])        # what the user ran
    target = Target(path="train.py", line=42, run=2)          # the backward's 2nd run failed
    fixes = check_fixes(script, fixes, target, budget=60.0)   # Fix records, each with .check

``probes`` adds conditions the copy must meet: ``"module:factory"`` names in
this package, called in the child before the script runs (``replay.py`` says
how); ``DOCTOR_PROBE`` fails a fix that leaves doctor something to report.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import msgspec

from ..trace.doctor import Check, Edit, Fix
from .edits import apply_edits, overlapping, read_source
from .replay import Outcome, Spec, Until, read_outcome

DOCTOR_PROBE = "tensortrace.doctor.replay:doctor_probe"
DEFAULT_BUDGET = 60.0  # seconds of wall time for all the checks of one report
MAX_PARALLEL = 4


@dataclass(frozen=True)
class Script:
    """What the user ran: a script's path (or a module name) and its arguments."""

    target: str
    args: Tuple[str, ...] = ()
    module: bool = False
    cwd: str = ""

    @classmethod
    def of(cls, target: str, args: Sequence[str] = (), module: bool = False) -> "Script":
        return cls(
            target=target if module else os.path.abspath(target),
            args=tuple(args),
            module=module,
            cwd=os.getcwd(),
        )


@dataclass(frozen=True)
class Target:
    """The backward call to wait for: ``path:line`` as places write it; ``run``: which of
    that line's backward calls failed (1 for the first)."""

    path: str
    line: int
    run: int = 1


def _absolute(path: str, cwd: str) -> str:
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(cwd, path))


def edited_files(edits: Sequence[Edit], cwd: str) -> Dict[str, str]:
    """Absolute path -> the file's text with its edits made; {} when a file cannot be read,
    the edits overlap, or the result does not parse."""
    if overlapping(edits):
        return {}
    by_file: Dict[str, List[Edit]] = {}
    for e in edits:
        by_file.setdefault(_absolute(e.path, cwd), []).append(e)
    files = {}
    for path, mine in by_file.items():
        text = read_source(path)
        if text is None:
            return {}
        new = apply_edits(text, mine)
        try:
            compile(new, path, "exec")
        except (SyntaxError, ValueError):
            return {}
        files[path] = new
    return files


def locate(line: int, text: str, edits: Sequence[Edit]) -> Optional[int]:
    """Where ``line`` of ``text`` is once ``edits`` are made: its new number, the line that
    replaced it one for one, or where a moved copy of it went; None when it is gone."""
    rows: List[Tuple[Optional[int], str]] = [
        (n, part) for n, part in enumerate(text.splitlines(), 1)
    ]
    for e in sorted(edits, key=lambda e: (e.line, e.end), reverse=True):
        new = e.text.split("\n") if e.text else []
        old = rows[e.line - 1 : e.end]
        if len(old) == len(new) == 1:
            rows[e.line - 1 : e.end] = [(old[0][0], new[0])]
        else:
            rows[e.line - 1 : e.end] = [(None, part) for part in new]
    for index, (n, _) in enumerate(rows, 1):
        if n == line:
            return index
    original = text.splitlines()[line - 1].strip() if 0 < line <= len(text.splitlines()) else ""
    for index, (n, part) in enumerate(rows, 1):
        if n is None and original and part.strip() == original:
            return index
    return None


def check_fixes(
    script: Script,
    fixes: Sequence[Fix],
    target: Optional[Target],
    *,
    budget: float = DEFAULT_BUDGET,
    probes: Sequence[str] = (),
) -> Tuple[Fix, ...]:
    """``fixes`` with a ``check`` each (those without edits are left as they are)."""
    runs: List[Tuple[int, Spec, str]] = []
    checked: Dict[int, Check] = {}
    scratch = tempfile.mkdtemp(prefix="tensortrace-check-")
    try:
        for index, fix in enumerate(fixes):
            if not fix.edits:
                continue
            files = edited_files(fix.edits, script.cwd)
            if not files:
                checked[index] = Check(
                    verdict="unchecked",
                    detail="its edits could not be made on a copy (the file changed, or the "
                    "result does not parse)",
                )
                continue
            until = _until(script, target, fix.edits, files)
            spec = Spec(
                target=script.target,
                args=script.args,
                module=script.module,
                cwd=script.cwd,
                files=files,
                until=until,
                result=os.path.join(scratch, f"outcome-{index}.json"),
                probes=tuple(probes),
            )
            path = os.path.join(scratch, f"spec-{index}.json")
            with open(path, "wb") as handle:
                handle.write(msgspec.json.encode(spec))
            runs.append((index, spec, path))
        checked.update(_run_all(runs, target, budget))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tuple(
        msgspec.structs.replace(fix, check=checked[i]) if i in checked else fix
        for i, fix in enumerate(fixes)
    )


def _until(
    script: Script, target: Optional[Target], edits: Sequence[Edit], files: Dict[str, str]
) -> Optional[Until]:
    if target is None:
        return None
    path = _absolute(target.path, script.cwd)
    line: Optional[int] = target.line
    if path in files:
        mine = [e for e in edits if _absolute(e.path, script.cwd) == path]
        original = read_source(path) or ""
        line = locate(target.line, original, mine)
    if line is None:
        return None
    return Until(path=path, line=line, times=target.run + 1)


def _run_all(
    runs: List[Tuple[int, Spec, str]], target: Optional[Target], budget: float
) -> Dict[int, Check]:
    """Run the children, a few at a time, within ``budget`` seconds of wall time in all."""
    deadline = time.monotonic() + budget
    parallel = max(1, min(MAX_PARALLEL, os.cpu_count() or 1, len(runs) or 1))
    waiting = list(runs)
    running: List[Tuple[int, Spec, subprocess.Popen, float]] = []
    found: Dict[int, Check] = {}
    paths = {index: path for index, _, path in runs}
    try:
        while waiting or running:
            while waiting and len(running) < parallel and time.monotonic() < deadline:
                index, spec, path = waiting.pop(0)
                running.append((index, spec, _start(path, spec.cwd), time.monotonic()))
            if not running:
                break
            time.sleep(0.05)
            for entry in list(running):
                index, spec, child, started = entry
                late = time.monotonic() >= deadline
                if child.poll() is None and not late:
                    continue
                if child.poll() is None:
                    _stop(child)
                    found[index] = _late(spec, target, time.monotonic() - started)
                else:
                    outcome = read_outcome(spec.result)
                    found[index] = verdict(outcome, spec, target, child.returncode, paths[index])
                running.remove(entry)
    finally:
        for _, _, child, _ in running:
            _stop(child)
    for index, spec, _ in waiting:
        found[index] = Check(
            verdict="unchecked", detail=f"no time was left in the {budget:g} s budget"
        )
    return found


def _start(spec_path: str, cwd: str) -> subprocess.Popen:
    """The child, in a session of its own (so that what it starts is stopped with it); its
    stderr goes to a file beside the spec (a pipe could fill and stall it)."""
    with open(spec_path + ".err", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tensortrace.doctor.replay", spec_path],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )


def _stop(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _late(spec: Spec, target: Optional[Target], seconds: float) -> Check:
    where = "" if target is None else f" the backward at line {target.line}"
    return Check(
        verdict="unchecked",
        detail=f"the copy did not reach{where or ' its end'} within the time budget "
        f"({seconds:.0f} s; --check-budget gives it more)",
    )


def _tail(spec_path: str) -> str:
    """The last line the child wrote on stderr."""
    try:
        with open(spec_path + ".err", "rb") as err:
            err.seek(0, os.SEEK_END)
            err.seek(max(0, err.tell() - 4096))
            data = err.read()
    except OSError:
        return ""
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def verdict(
    outcome: Optional[Outcome],
    spec: Spec,
    target: Optional[Target],
    status: Optional[int] = None,
    spec_path: str = "",
) -> Check:
    """The check a child's outcome makes (``status``: its exit status)."""
    backward = "" if target is None else f"the backward at line {target.line}"
    if outcome is None:
        tail = _tail(spec_path) if spec_path else ""
        return Check(
            verdict="failed",
            detail=f"the copy ended without a result (exit status {status})"
            + (f": {tail}" if tail else ""),
        )
    if outcome.problems:
        return Check(verdict="failed", detail=f"doctor still reports: {outcome.problems[0]}")
    needed = 1 if target is None else target.run
    if outcome.ended == "reached":
        return Check(
            verdict="passed",
            detail=f"{backward} passed {_times(outcome.passes)} on a copy",
        )
    if outcome.ended == "finished":
        if spec.until is None or outcome.passes >= needed:
            passed = f"; {backward} passed {_times(outcome.passes)}" if backward else ""
            return Check(
                verdict="passed",
                detail=f"a copy ran to its end{passed}",
            )
        return Check(
            verdict="failed",
            detail=f"a copy ended without running {backward or 'the backward'}",
        )
    if outcome.ended == "exited":
        return Check(verdict="failed", detail=f"a copy exited with status {outcome.status}")
    where = ""
    if outcome.where is not None:
        path, line = outcome.where
        shown = os.path.relpath(path, spec.cwd) if path.startswith(spec.cwd + os.sep) else path
        where = f" at {shown}:{line}"
    return Check(verdict="failed", detail=f"{outcome.error}{where}")


def _times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


__all__ = ["DOCTOR_PROBE", "Script", "Target", "check_fixes", "edited_files", "locate", "verdict"]
