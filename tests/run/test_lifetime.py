"""The child never outlives the command, and nothing the parent waits for is unbounded.

Each test runs the real command (or the Python API) in a process of its own, so
that signals, exit statuses and the processes left behind are those a user
gets; the scenarios run with ``--trust``, as plain Python, since they do what
only code that has beaten the Python-level checks could do (close the event
pipe, stop itself, start a process in a session of its own).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest

TIMEOUT = 120  # seconds a command may take here before the test calls it hung


def children_of(pid: int) -> List[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def wait_for(condition, seconds: float = 60.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def command(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tensortrace", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def scenario(tmp_path: Path, *steps: str, name: str = "s.yaml") -> Path:
    body = "".join(f"  - run: {json.dumps(step)}\n" for step in steps)
    path = tmp_path / name
    path.write_text(f"title: lifetime\nsteps:\n{body}", encoding="utf-8")
    return path


CLOSE_PIPE = "import os\nfor fd in range(3, 256):\n    try: os.close(fd)\n    except OSError: pass"


def finished(process: subprocess.Popen) -> tuple:
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the command hung: {err[-2000:]}")
    return process.returncode, out, err


# --- waits with a deadline ----------------------------------------------------------------


@pytest.mark.parametrize(
    "then",
    [
        "import time\ntime.sleep(600)",
        "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)",
        "import signal, time\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\n"
        "time.sleep(600)",
    ],
    ids=["sleeps", "stops", "ignores-signals"],
)
def test_a_child_that_closes_its_pipe_and_lingers_is_killed(tmp_path: Path, then: str) -> None:
    path = scenario(tmp_path, "x = 1", CLOSE_PIPE + "\n" + then, "y = 2")
    began = time.monotonic()
    process = command(
        "run",
        "--trust",
        str(path),
        "--timeout",
        "600",
        "--scenario-timeout",
        "8",
        "--format",
        "json",
    )
    code, out, err = finished(process)
    assert time.monotonic() - began < 60
    assert "Traceback" not in err
    assert code == 1, err
    data = json.loads(out)
    assert [s["status"] for s in data["steps"]] == ["ok", "killed"]
    assert "closed its pipe to the tracer but did not end" in data["steps"][1]["error"]["message"]
    assert children_of(process.pid) == []


def test_the_scenario_timeout_holds_when_the_pipe_closes_and_the_child_sleeps(
    tmp_path: Path,
) -> None:
    """With a scenario limit shorter than the grace after the pipe closes, the limit decides."""
    path = scenario(tmp_path, CLOSE_PIPE + "\nimport time\ntime.sleep(600)")
    process = command(
        "run",
        "--trust",
        str(path),
        "--timeout",
        "600",
        "--scenario-timeout",
        "1",
        "--format",
        "json",
    )
    code, out, _ = finished(process)
    assert code == 1
    step = json.loads(out)["steps"][0]
    assert step["status"] == "timeout"
    assert "reached its 1 s time limit" in step["error"]["message"]


# --- the whole tree -------------------------------------------------------------------------


def test_a_process_the_child_starts_in_a_session_of_its_own_is_killed_too(tmp_path: Path) -> None:
    """The command adopts what the child leaves behind (a subreaper) and kills it."""
    marker = tmp_path / "pid"
    path = scenario(
        tmp_path,
        "import subprocess\n"
        "p = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        f"open({str(marker)!r}, 'w').write(str(p.pid))",
        "z = 3",
    )
    process = command("run", "--trust", str(path), "--format", "json")
    code, _, err = finished(process)
    assert code == 0, err
    escaped = int(marker.read_text())
    assert wait_for(lambda: not alive(escaped), 10), "the process the child started lives on"


API_RUN = """
import sys, tensortrace
print('ready', flush=True)
try:
    tensortrace.trace(sys.argv[1], safe=False, timeout=600)
except KeyboardInterrupt:
    print('KeyboardInterrupt', flush=True)
except Exception as exc:
    print(type(exc).__name__, flush=True)
sys.stdin.readline()  # the caller's program goes on: its death would not end the child
"""


def _open_descriptors(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def test_an_interrupt_through_the_python_api_kills_the_child(tmp_path: Path) -> None:
    """Even while the parent waits for a child that closed its pipe, and while the caller's
    program lives on (so no death signal would help)."""
    path = scenario(tmp_path, "import time\ntime.sleep(2)\n" + CLOSE_PIPE + "\ntime.sleep(600)")
    process = subprocess.Popen(
        [sys.executable, "-c", API_RUN, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout.readline() == "ready\n"
        assert wait_for(lambda: bool(children_of(process.pid)), TIMEOUT)
        [child] = children_of(process.pid)
        assert wait_for(lambda: 0 < _open_descriptors(child) <= 3, TIMEOUT)  # the pipe closed
        process.send_signal(signal.SIGINT)
        said = process.stdout.readline().strip()
        assert said in ("Interrupted", "KeyboardInterrupt"), said
        assert wait_for(lambda: not alive(child), 10), "the child outlives the interrupted call"
    finally:
        process.stdin.write("\n")
        process.stdin.flush()
        code, _, err = finished(process)
    assert "Traceback" not in err, err


# --- signals, handled once ------------------------------------------------------------------


def _child_when_running(process: subprocess.Popen) -> Optional[int]:
    found: List[int] = []
    wait_for(lambda: bool(found.extend(children_of(process.pid)) or found), TIMEOUT)
    return found[0] if found else None


@pytest.mark.parametrize("second", [None, 0.0, 0.05], ids=["once", "twice", "twice-later"])
def test_sigterm_ends_the_run_once_without_a_traceback(tmp_path: Path, second) -> None:
    path = scenario(tmp_path, "import time\ntime.sleep(600)")
    out = tmp_path / "out.html"
    process = command("run", "--trust", str(path), "--timeout", "600", "-o", str(out))
    child = _child_when_running(process)
    assert child is not None
    process.send_signal(signal.SIGTERM)
    if second is not None:
        time.sleep(second)
        try:
            process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    code, _, err = finished(process)
    assert code == 128 + signal.SIGTERM
    assert "Traceback" not in err and "terminate called" not in err, err
    assert err.strip() == "tensortrace: terminated"
    assert wait_for(lambda: not alive(child), 10)
    assert not out.exists() and list(tmp_path.glob(".out.html.*")) == []


@pytest.mark.parametrize("delay", [0.3, 1.0, 2.0])
def test_sigterm_while_torch_is_still_importing_has_no_traceback(delay: float) -> None:
    process = command("list")
    time.sleep(delay)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.01)
    try:
        process.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass
    code, _, err = finished(process)
    assert "Traceback" not in err and "terminate called" not in err, err
    assert code in (0, 128 + signal.SIGTERM, -signal.SIGTERM)  # -15: before main() began


def test_a_second_ctrl_c_ends_at_once_and_kills_the_child(tmp_path: Path) -> None:
    path = scenario(tmp_path, "import time\ntime.sleep(600)")
    process = command("run", "--trust", str(path), "--timeout", "600")
    child = _child_when_running(process)
    assert child is not None
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    code, _, err = finished(process)
    assert code == 130
    assert "Traceback" not in err, err
    assert wait_for(lambda: not alive(child), 10)


def test_ctrl_c_still_shows_what_was_traced(tmp_path: Path) -> None:
    path = scenario(tmp_path, "a = torch.ones(2)", "import time\ntime.sleep(600)")
    process = command("run", "--trust", str(path), "--timeout", "600", "--format", "json")
    child = _child_when_running(process)
    assert child is not None
    time.sleep(3.0)  # step 1 is done, step 2 sleeps
    process.send_signal(signal.SIGINT)
    code, out, err = finished(process)
    assert code == 130 and "Traceback" not in err, err
    assert json.loads(out)["steps"][0]["status"] == "ok"
    assert wait_for(lambda: not alive(child), 10)
