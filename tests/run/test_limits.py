"""The operating-system layer: time and memory limits, no file writes, Ctrl-C.

Limits and signals go through the real command (a subprocess). The test of
``child.apply_limits`` itself forks a process of its own to apply the limits to,
and a child that dies is recorded by the command in this process (the
scenario still runs in a forked child, and only that child dies).

No test bounds the time a command takes from its start: starting Python and
torch is what a loaded machine slows down most. A step the limit did not
stop never ends, so the subprocess's own timeout turns that into a failure,
and the recorded message names the limit that was hit.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import List, Optional

import jsonschema
import pytest

from tensortrace.scenario.schemas import trace_schema

from conftest import cli, resolved


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def _default_sigint() -> None:
    # a shell or harness may have started us with SIGINT ignored; the command must see Ctrl-C
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tensortrace(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tensortrace", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_default_sigint,
    )


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tensortrace", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


class Lines:
    """Reads a process's stdout line by line in the background."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.queue: "queue.Queue[Optional[str]]" = queue.Queue()
        self.lines: List[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def wait_for(self, count: int, timeout: float = 60) -> List[str]:
        deadline = time.monotonic() + timeout
        while len(self.lines) < count:
            line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                break
            self.lines.append(line)
        return self.lines

    def rest(self, timeout: float = 30) -> List[str]:
        self.thread.join(timeout)
        while True:
            try:
                line = self.queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return self.lines


def processes_running(path: Path) -> List[int]:
    """Processes whose command line names this scenario file (the command and its forked child)."""
    needle = str(path).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != b"Z":
            found.append(int(entry))
    return found


def wait_until_gone(path: Path, seconds: float = 5) -> List[int]:
    deadline = time.monotonic() + seconds
    left = processes_running(path)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = processes_running(path)
    return left


def kill_all(pids: List[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assert_no_traceback(result) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout


# ---------------------------------------------------------------------------
# wall-clock limit
# ---------------------------------------------------------------------------


RUNAWAY = """
title: a step that never ends
steps:
  - a = torch.ones(2)
  - b = a * 2
  - |
    while True:
        pass
  - c = a + 1
"""


def test_a_runaway_step_is_stopped_and_recorded(tmp_path):
    path = write(tmp_path, RUNAWAY)
    result = tensortrace("run", str(path), "--format", "json", "--timeout", "1")
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    data = json.loads(result.stdout)
    jsonschema.validate(data, trace_schema())
    steps = data["steps"]
    assert [s["index"] for s in steps] == [1, 2, 3]  # step 4 never ran
    assert [s["status"] for s in steps] == ["ok", "ok", "timeout"]
    assert (
        steps[2]["error"]["message"]
        == "step 3 exceeded the 1 s time limit (raise it with --timeout)"
    )
    assert steps[2]["error"]["type"] == "TimeoutError"
    assert steps[2]["behaved"] is False
    steps = resolved(data)["steps"]
    assert steps[1]["tensors"] and {t["name"] for t in steps[1]["tensors"]} == {"a", "b"}
    assert data["aborted"] == "step 3 exceeded the 1 s time limit (raise it with --timeout)"
    assert data["passed"] is False


def test_a_runaway_setup_is_stopped_and_no_step_runs(tmp_path):
    path = write(
        tmp_path, "title: t\nsetup: |\n  while True:\n      pass\nsteps:\n  - a = torch.ones(2)\n"
    )
    result = tensortrace("run", str(path), "--format", "json", "--timeout", "1")
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    data = json.loads(result.stdout)
    assert data["setup"]["status"] == "timeout"
    assert (
        data["setup"]["error"]["message"]
        == "setup exceeded the 1 s time limit (raise it with --timeout)"
    )
    assert data["setup"]["line"] == 3
    assert data["steps"] == []
    assert data["aborted"] == "setup exceeded the 1 s time limit (raise it with --timeout)"


# The tracer sets its alarm handler again for every step, so a scenario that
# means to defeat it must ignore the alarm inside the step itself; ignoring it
# in setup only (the first case) is overridden, and the alarm still works.
IGNORED_ALARM = {
    "in setup": (
        "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)",
        "while True:\n    pass",
    ),
    "in the step": (
        "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)",
        "signal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass",
    ),
}


def ignored_alarm_scenario(tmp_path: Path, where: str) -> Path:
    setup, loop = IGNORED_ALARM[where]
    indent = lambda code: textwrap.indent(code, "      ")  # noqa: E731
    return write(
        tmp_path,
        "title: the alarm is ignored\n"
        "setup: |\n" + indent(setup) + "\n"
        "steps:\n"
        "  - a = torch.ones(2)\n"
        "  - run: |\n" + indent(loop) + "\n"
        "  - c = a + 1\n",
    )


@pytest.mark.parametrize("where", sorted(IGNORED_ALARM))
def test_trusted_step_that_ignores_the_alarm_is_stopped_by_the_parent(tmp_path, where):
    path = ignored_alarm_scenario(tmp_path, where)
    result = tensortrace(
        "run", str(path), "--format", "json", "--timeout", "1", "--trust", timeout=60
    )
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    data = json.loads(result.stdout)
    steps = data["steps"]
    assert [s["index"] for s in steps] == [1, 2]
    assert steps[0]["status"] == "ok"
    assert steps[1]["status"] == "timeout"
    assert (
        steps[1]["error"]["message"]
        == "step 2 exceeded the 1 s time limit (raise it with --timeout)"
    )
    # recorded the same whichever layer stopped it (the alarm, or the parent's watchdog)
    assert steps[1]["error"]["type"] == "TimeoutError"
    assert steps[1]["error"]["qualname"] == "builtins.TimeoutError"
    assert steps[1]["line"] == 8  # the first line of the looping code
    assert data["aborted"] == "step 2 exceeded the 1 s time limit (raise it with --timeout)"
    assert wait_until_gone(path) == []


# ---------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------

HUNGRY = """
title: more memory than allowed
steps:
  - a = torch.ones(2)
  - {step}
  - c = a + 1
"""


@pytest.mark.parametrize(
    "step",
    [
        "x = torch.empty(10**10)",  # 40 GB at once
        "xs = [torch.ones(2**18) for i in range(1024)]",  # 1 GiB, one MiB at a time, all touched
    ],
    ids=["one-block", "many-blocks"],
)
def test_memory_beyond_the_limit_is_that_steps_error(tmp_path, step):
    path = write(tmp_path, HUNGRY.format(step=step))
    result = tensortrace(
        "run", str(path), "--format", "json", "--memory-limit", "256", "--timeout", "20"
    )
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    data = json.loads(result.stdout)
    steps = data["steps"]
    assert steps[0]["status"] == "ok"
    hungry = steps[1]
    assert hungry["status"] in ("raised", "killed"), hungry
    assert hungry["error"]["message"]
    if hungry["status"] == "raised":  # an exception: the run goes on
        assert (
            "memory" in hungry["error"]["message"].lower()
            or hungry["error"]["type"] == "MemoryError"
        )
        assert [s["status"] for s in steps] == ["ok", "raised", "ok"]
    else:  # the child was stopped: the run ends there, cleanly
        assert len(steps) == 2 and data["aborted"]


def test_the_same_allocation_succeeds_without_the_cap(tmp_path):
    # proves the failure above comes from --memory-limit, not from the machine
    path = write(tmp_path, HUNGRY.format(step="xs = [torch.ones(2**18) for i in range(1024)]"))
    result = tensortrace(
        "run", str(path), "--format", "json", "--memory-limit", "256", "--trust", "--timeout", "60"
    )
    assert result.returncode == 0, result.stderr
    assert [s["status"] for s in json.loads(result.stdout)["steps"]] == ["ok", "ok", "ok"]


# ---------------------------------------------------------------------------
# no file writes: the limit itself
# ---------------------------------------------------------------------------


def _in_limited_child(scenario, limits, body) -> dict:
    """Fork, apply the limits in the child, run ``body`` there; return what it reports."""
    from tensortrace.run.child import apply_limits as _apply_limits

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        report = {}
        try:
            os.close(read_fd)
            _apply_limits(scenario, limits)
            report = body()
        except BaseException as exc:  # noqa: BLE001
            report = {"crashed": f"{type(exc).__name__}: {exc}"}
        finally:
            try:
                os.write(write_fd, json.dumps(report).encode())
            finally:
                os._exit(0)
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks) or b"{}")


def test_applied_limits_make_file_writes_fail(tmp_path):
    import resource

    from tensortrace import load_scenario
    from tensortrace.run.runner import Limits

    scenario = load_scenario(write(tmp_path, "title: t\nsteps:\n  - a = 1\n"))
    new = tmp_path / "new.txt"
    existing = tmp_path / "existing.txt"
    existing.write_text("before")

    def body() -> dict:
        outcomes = {}
        for label, attempt in [
            ("write-flush", lambda: _write_and_flush(new, "escaped")),
            ("append", lambda: _write_and_flush(existing, "more", mode="a")),
            ("os-write", lambda: _os_write(tmp_path / "fd.txt", b"escaped")),
        ]:
            try:
                attempt()
                outcomes[label] = "written"
            except OSError as exc:
                outcomes[label] = f"refused errno {exc.errno}"
        outcomes["fsize"] = list(resource.getrlimit(resource.RLIMIT_FSIZE))
        outcomes["as"] = list(resource.getrlimit(resource.RLIMIT_AS))
        outcomes["cpu"] = list(resource.getrlimit(resource.RLIMIT_CPU))
        return outcomes

    report = _in_limited_child(scenario, Limits(timeout=5, memory_mb=256), body)
    assert "crashed" not in report, report
    for label in ("write-flush", "append", "os-write"):
        assert report[label].startswith("refused"), report
    assert report["fsize"] == [0, 0]
    assert report["as"][0] != resource.RLIM_INFINITY
    assert report["cpu"][0] != resource.RLIM_INFINITY
    assert not new.exists() or new.stat().st_size == 0
    assert not (tmp_path / "fd.txt").exists() or (tmp_path / "fd.txt").stat().st_size == 0
    assert existing.read_text() == "before"


def test_without_time_and_memory_limits_only_writes_are_capped(tmp_path):
    import resource

    from tensortrace import load_scenario
    from tensortrace.run.runner import Limits

    scenario = load_scenario(write(tmp_path, "title: t\nsteps:\n  - a = 1\n"))
    target = tmp_path / "new.txt"

    def body() -> dict:
        try:
            _write_and_flush(target, "escaped")
            wrote = "written"
        except OSError as exc:
            wrote = f"refused errno {exc.errno}"
        return {"wrote": wrote, "fsize": list(resource.getrlimit(resource.RLIMIT_FSIZE))}

    before_as = resource.getrlimit(resource.RLIMIT_AS)
    report = _in_limited_child(scenario, Limits(timeout=None, memory_mb=None), body)
    assert report["wrote"].startswith("refused") and report["fsize"] == [0, 0]
    assert resource.getrlimit(resource.RLIMIT_AS) == before_as  # this process is untouched
    assert not target.exists() or target.stat().st_size == 0


def _write_and_flush(path: Path, text: str, mode: str = "w") -> None:
    with open(path, mode) as f:
        f.write(text)
        f.flush()


def _os_write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(27, "short write")
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# Ctrl-C
# ---------------------------------------------------------------------------

SLEEPY = """
title: a slow third step
steps:
  - a = torch.ones(2)
  - b = a * 2
  - |
    import pathlib, time
    time.sleep({pause})
    pathlib.Path({ready!r}).write_text('sleeping')
    time.sleep(30)
  - c = a + 1
"""


def test_ctrl_c_keeps_the_streamed_steps_and_exits_130(tmp_path):
    path = write(tmp_path, SLEEPY.format(ready=str(tmp_path / "ready"), pause=0))
    proc = start("run", str(path), "--format", "jsonl", "--trust", "--timeout", "60")
    try:
        lines = Lines(proc)
        first = lines.wait_for(3)  # start, step 1, step 2
        assert len(first) == 3, (first, proc.stderr.read() if proc.poll() is not None else "")
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=20)
        stopped_in = time.monotonic() - began
        events = [json.loads(line) for line in lines.rest()]
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 130, stderr
    assert stopped_in < 10
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1 and stderr.startswith(
        "tensortrace: interrupted"
    ), stderr
    assert events[0]["event"] == "start"
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"]["index"] for s in steps] == [1, 2]
    assert all(s["step"]["status"] == "ok" for s in steps)
    ends = [e for e in events if e["event"] == "end"]
    assert len(ends) <= 1
    if ends:
        assert "interrupt" in ends[0]["aborted"].lower()
    assert wait_until_gone(path) == []  # the sleeping child was stopped too


def test_ctrl_c_with_an_output_file_writes_what_was_traced(tmp_path):
    ready = tmp_path / "ready"
    # the pause lets the command read step 2's event before Ctrl-C (see the test after this one)
    path = write(tmp_path, SLEEPY.format(ready=str(ready), pause=1))
    out = tmp_path / "out.json"
    proc = start("run", str(path), "--format", "json", "-o", str(out), "--trust", "--timeout", "60")
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.communicate()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert stdout == ""
    data = json.loads(out.read_text(encoding="utf-8"))
    jsonschema.validate(data, trace_schema())
    assert [s["index"] for s in data["steps"]] == [1, 2]
    assert "interrupt" in data["aborted"].lower()
    assert data["passed"] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "out.json",
        "ready",
        "scenario.yaml",
    ]  # no temporary left
    assert wait_until_gone(path) == []


def test_ctrl_c_keeps_steps_that_were_sent_but_not_yet_read(tmp_path):
    ready = tmp_path / "ready"
    path = write(
        tmp_path,
        f"""
        title: step 2 ends while the command is not reading
        steps:
          - a = torch.ones(2)
          - |
            import time
            time.sleep(1)
            b = a * 2
          - |
            import pathlib, time
            pathlib.Path({str(ready)!r}).write_text('sleeping')
            time.sleep(30)
        """,
    )
    proc = start("run", str(path), "--format", "jsonl", "--trust", "--timeout", "60")
    try:
        lines = Lines(proc)
        assert len(lines.wait_for(2)) == 2  # start, step 1; step 2 takes a second
        os.kill(proc.pid, signal.SIGSTOP)  # the command stops reading; its child goes on
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists()  # step 2 is finished and sent: step 3 is sleeping
        os.kill(proc.pid, signal.SIGINT)
        os.kill(proc.pid, signal.SIGCONT)
        code = proc.wait(timeout=20)
        events = [json.loads(line) for line in lines.rest()]
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(processes_running(path))
    assert code == 130
    assert [e["step"]["index"] for e in events if e["event"] == "step"] == [1, 2]


def test_ctrl_c_during_check_exits_130(tmp_path):
    ready = tmp_path / "ready"
    path = write(tmp_path, SLEEPY.format(ready=str(ready), pause=0))
    proc = start("check", str(path), "--trust", "--timeout", "60")
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.communicate()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == ["tensortrace: interrupted"]
    assert wait_until_gone(path) == []


def test_terminating_the_command_also_ends_its_child(tmp_path):
    path = write(
        tmp_path, "title: t\nsteps:\n  - a = torch.ones(2)\n  - |\n    while True:\n        pass\n"
    )
    proc = start("run", str(path), "--format", "jsonl", "--timeout", "0")
    try:
        lines = Lines(proc)
        assert len(lines.wait_for(2)) == 2  # start, step 1: step 2 is spinning now
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        left = wait_until_gone(path, seconds=3)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(processes_running(path))
    assert left == [], "the forked child is still running after the command was terminated"


# ---------------------------------------------------------------------------
# a child that dies
# ---------------------------------------------------------------------------


def test_a_killed_child_is_that_steps_error(tmp_path):
    path = write(
        tmp_path,
        """
        title: the step kills its own process
        steps:
          - a = torch.ones(2)
          - |
            import os
            os.kill(os.getpid(), 9)
          - c = a + 1
        """,
    )
    result = cli("run", str(path), "--format", "json", "--trust")
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    data = json.loads(result.stdout)
    jsonschema.validate(data, trace_schema())
    steps = data["steps"]
    assert [s["index"] for s in steps] == [1, 2]
    assert steps[0]["status"] == "ok"
    killed = steps[1]
    assert killed["status"] == "killed" and killed["behaved"] is False
    assert "step 2" in killed["error"]["message"] and "SIGKILL" in killed["error"]["message"]
    assert killed["line"] == 5
    assert data["aborted"] == killed["error"]["message"]
    check = cli("check", str(path), "--trust")
    assert check.returncode == 1
    assert check.stdout.splitlines()[0].startswith(
        f"FAIL {path}: step 2 (line 5): step 2 was killed"
    )


def test_a_child_that_exits_is_that_steps_error(tmp_path):
    path = write(
        tmp_path,
        """
        title: the step ends its own process
        steps:
          - a = torch.ones(2)
          - |
            import os
            os._exit(0)
          - c = a + 1
        """,
    )
    result = cli("run", str(path), "--format", "json", "--trust")
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    steps = json.loads(result.stdout)["steps"]
    assert [s["status"] for s in steps] == ["ok", "killed"]
    assert "exit status 0" in steps[1]["error"]["message"]


def test_the_parent_never_blocks_in_select_for_more_than_a_tick(monkeypatch):
    """A Ctrl-C that lands after Python last checked for signals but before select
    starts is handled only when select returns: so select never waits past TICK."""
    import types

    from tensortrace.run import runner
    from tensortrace.scenario import loads_scenario

    waits = []
    real = runner.select.select

    def recording(rlist, wlist, xlist, timeout=None):
        waits.append(timeout)
        return real(rlist, wlist, xlist, timeout)

    monkeypatch.setattr(runner, "select", types.SimpleNamespace(select=recording))
    scenario = loads_scenario(
        "title: a slow step\nsteps:\n  - |\n    import time\n    time.sleep(1)\n"
    )
    [trace] = runner.run_all([scenario], safe=False, limits=runner.Limits(timeout=60))
    assert trace.aborted is None and trace.steps[0].status == "ok"
    assert len(waits) >= 4  # the second's sleep spanned several ticks
    assert all(w is not None and w <= runner.TICK for w in waits), waits
