"""What the kernel's wall still holds when the Python layer has fallen: plain Python, the
real builtins and ``ctypes`` in the confined child, as in ``test_confine.py``.

Each harm is tried twice: confined, where it must be refused, and without the wall,
where it must work, so that no test passes because the attempt was wrong.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
import pytest

from test_confine import _CTYPES_CALL, needs_wall, outcomes, run
from bystanders import bystander_process  # noqa: F401 - the fixture "bystander"
from tensortrace.run import argfilter, confine


def _number(name: str) -> int:
    from tensortrace.run.seccomp import libseccomp

    number = libseccomp().seccomp_syscall_resolve_name(name.encode())
    assert number >= 0, name
    return number


# --- scheduling of other processes --------------------------------------------------------


def _affinity_steps(pid: int) -> list:
    return [
        "import os",
        f"os.sched_setaffinity({pid}, {{0}})",
        "os.sched_setaffinity(0, os.sched_getaffinity(0))",
        "os.sched_setaffinity(os.getpid(), os.sched_getaffinity(0))",
    ]


@needs_wall
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs to show")
def test_another_process_cannot_be_pinned_to_a_cpu(tmp_path: Path, bystander: int) -> None:
    before = os.sched_getaffinity(bystander)
    trace = run(tmp_path, _affinity_steps(bystander))
    assert outcomes(trace) == {1: "ok", 2: "PermissionError", 3: "ok", 4: "ok"}
    assert os.sched_getaffinity(bystander) == before
    control = run(tmp_path, _affinity_steps(bystander), confined=False)
    assert outcomes(control) == {1: "ok", 2: "ok", 3: "ok", 4: "ok"}
    assert os.sched_getaffinity(bystander) == {0}, "the pinning outlives the run"


def _scheduler_steps(pid: int) -> list:
    sched_setattr = _number("sched_setattr")
    # struct sched_attr (version 0, 48 bytes): size, policy SCHED_BATCH, flags, nice 19
    attr = "(ctypes.c_uint32 * 12)(48, 3, 0, 0, 19)"
    return [
        _CTYPES_CALL + "import os",
        f"os.sched_setscheduler({pid}, os.SCHED_BATCH, os.sched_param(0))",
        f"os.sched_setparam({pid}, os.sched_param(0))",
        f"rc = libc.syscall({sched_setattr}, {pid}, {attr}, 0)\n"
        "if rc: raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))",
        "os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))",
        f"rc = libc.syscall({sched_setattr}, os.getpid(), {attr}, 0)\n"
        "if rc: raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))",
    ]


@needs_wall
def test_another_process_cannot_be_rescheduled(tmp_path: Path, bystander: int) -> None:
    before = os.sched_getscheduler(bystander)
    trace = run(tmp_path, _scheduler_steps(bystander))
    assert outcomes(trace) == {
        1: "ok",
        2: "PermissionError",
        3: "PermissionError",
        4: "PermissionError",
        5: "ok",  # its own scheduling, by pid 0 and by its own pid
        6: "ok",
    }
    assert os.sched_getscheduler(bystander) == before != os.SCHED_BATCH
    control = run(tmp_path, _scheduler_steps(bystander)[:2], confined=False)
    assert outcomes(control) == {1: "ok", 2: "ok"}
    assert os.sched_getscheduler(bystander) == os.SCHED_BATCH


# --- prctl --------------------------------------------------------------------------------

PR_SET_PDEATHSIG, PR_GET_PDEATHSIG, PR_SET_DUMPABLE = 1, 2, 4
PR_SET_PTRACER, PR_SET_CHILD_SUBREAPER, PR_SET_NAME = 0x59616D61, 36, 15


def _prctl(option: int, arg: int = 0) -> str:
    """The system call itself: the C library's prctl would drop the option's upper bits."""
    return (
        f"if libc.syscall({_number('prctl')}, ctypes.c_long({option}), ctypes.c_long({arg}),"
        " 0, 0, 0) != 0:\n"
        "    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))"
    )


def _prctl_steps() -> list:
    return [
        _CTYPES_CALL,
        _prctl(PR_SET_PDEATHSIG, 0),
        _prctl((1 << 32) | PR_SET_PDEATHSIG, 0),  # the kernel reads an int: the same option
        _prctl(PR_SET_DUMPABLE, 1),
        _prctl(PR_SET_PTRACER, 0xFFFFFFFF),  # PR_SET_PTRACER_ANY
        _prctl(PR_SET_CHILD_SUBREAPER, 1),
        "sig = ctypes.c_int(-1)\n"
        f"libc.prctl({PR_GET_PDEATHSIG}, ctypes.byref(sig), 0, 0, 0)\nprint(sig.value)",
        f"libc.prctl({PR_SET_NAME}, ctypes.c_char_p(b'renamed'), 0, 0, 0)\n"
        "name = ctypes.create_string_buffer(16)\n"
        f"libc.prctl({PR_SET_NAME + 1}, name, 0, 0, 0)\nprint(name.value.decode())",
    ]


@needs_wall
def test_prctl_takes_only_its_allow_list(tmp_path: Path) -> None:
    """The child cannot clear its death signal (it would outlive the command), make itself
    dumpable or traceable, or adopt orphans; it can still read what it is and name itself."""
    trace = run(tmp_path, _prctl_steps())
    assert outcomes(trace) == {
        1: "ok",
        2: "PermissionError",
        3: "PermissionError",
        4: "PermissionError",
        5: "PermissionError",
        6: "PermissionError",
        7: "ok",
        8: "ok",
    }
    assert trace.steps[6].stdout == "9\n"  # SIGKILL, as the child set it: still there
    assert trace.steps[7].stdout == "renamed\n"
    control = run(tmp_path, _prctl_steps(), confined=False)
    expected = {i: "ok" for i in range(1, 9)}
    if not os.path.exists("/proc/sys/kernel/yama"):
        expected[5] = "OSError"  # EINVAL: PR_SET_PTRACER is Yama's, and this kernel has none
    assert outcomes(control) == expected
    assert control.steps[6].stdout == "0\n"  # cleared by step 2


def test_the_prctl_allow_list_holds_no_option_that_acts_beyond_the_thread() -> None:
    assert {1, 4, 8, 35, 36, 38, 59, 62, 0x59616D61}.isdisjoint(argfilter.PRCTL_ALLOWED.values())


def test_the_argument_filter_compares_what_the_kernel_reads() -> None:
    """Each listed call is refused unless its first argument's low 32 bits are allowed."""
    program = argfilter.program(0xC000003E, [(203, (0, 4242)), (157, (15, 16))])
    assert len(program) < 64
    assert all(0 <= jt <= 255 and jf <= 255 for _, jt, jf, _ in program)


# --- descriptors whose commands carry upper bits ----------------------------------------------

F_SETOWN = 8


@needs_wall
def test_fcntl_with_upper_bits_set_is_still_refused(tmp_path: Path) -> None:
    """fcntl's command is an int to the kernel: F_SETOWN with bit 32 set is F_SETOWN, and it
    must be refused like F_SETOWN itself (it would let the kernel signal the parent)."""
    fcntl = _number("fcntl")
    steps = [
        _CTYPES_CALL + "r, w = os.pipe()",
        f"if libc.syscall({fcntl}, r, ctypes.c_long((1 << 32) | {F_SETOWN}), os.getppid()):\n"
        "    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))\n"
        "import fcntl\nprint(fcntl.fcntl(r, fcntl.F_GETOWN) == os.getppid())",
    ]
    assert outcomes(run(tmp_path, steps)) == {1: "ok", 2: "PermissionError"}
    control = run(tmp_path, steps, confined=False)
    assert outcomes(control) == {1: "ok", 2: "ok"} and control.steps[1].stdout == "True\n"


# --- threads --------------------------------------------------------------------------------

THREAD_STEPS = [
    "import threading, time\n"
    "threading.stack_size(64 * 1024)\n"
    "stop = threading.Event()\n"
    "started = []",
    "try:\n"
    "    for _ in range({count}):\n"
    "        t = threading.Thread(target=stop.wait, daemon=True)\n"
    "        t.start()\n"
    "        started.append(t)\n"
    "finally:\n"
    "    print(len(started))\n"
    "    stop.set()\n"
    "    for t in started:\n"
    "        t.join()",
    "x = torch.ones(3, requires_grad=True); (x * 2).sum().backward(); print(x.grad)",
]


@needs_wall
def test_threads_are_capped(tmp_path: Path) -> None:
    """Plain Python could start threads until the machine has no process ids left (1,500
    were started, out of 32,768); the wall caps the child's threads, and the run goes on."""
    cap = confine.thread_cap()
    asked = cap + 100
    steps = [step.format(count=asked) for step in THREAD_STEPS]
    trace = run(tmp_path, steps)
    got = outcomes(trace)
    assert got[2] == "RuntimeError", trace.steps[1].error  # "can't start new thread"
    assert int(trace.steps[1].stdout) < cap
    assert got[3] == "ok"
    control = run(tmp_path, steps, confined=False)
    assert outcomes(control) == {1: "ok", 2: "ok", 3: "ok"}
    assert int(control.steps[1].stdout) == asked


@needs_wall
def test_the_thread_cap_leaves_room_for_torchs_threads() -> None:
    assert confine.thread_cap() >= 4 * (os.cpu_count() or 1) + 32


def test_root_gives_the_child_a_real_user_id_of_its_own() -> None:
    """The kernel counts threads per real user and never limits root's: the child of root
    counts its threads under an id no process of the machine uses, and keeps root's
    effective id (its files are read as before)."""
    if os.getuid() != 0:
        pytest.skip("only a child of root changes its real user id; others keep theirs")
    uid = confine.counting_uid(os.getpid())
    assert uid != 0 and uid not in {int(p.stat().st_uid) for p in Path("/proc").glob("[0-9]*")}
    assert uid < (1 << 31)


@needs_wall
def test_openmp_asked_to_pin_threads_runs_on_one_thread_and_says_so(tmp_path: Path) -> None:
    """OMP_PROC_BIND makes OpenMP pin each new thread by its id, which the wall refuses; the
    run keeps one thread and says why, rather than OpenMP ending the child."""
    import json
    import sys

    path = tmp_path / "threads.yaml"
    path.write_text(
        "title: pinned\nsteps:\n"
        "  - 'torch.set_num_threads(2); y = torch.randn(300, 300) @ torch.randn(300, 300)'\n"
        "  - 'print(torch.get_num_threads())'\n",
        encoding="utf-8",
    )
    env = {**os.environ, "OMP_PROC_BIND": "true", "OMP_NUM_THREADS": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "tensortrace", "run", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [s["status"] for s in data["steps"]] == ["ok", "ok"]
    assert data["steps"][1]["stdout"] == "1\n"
    [notice] = data["notices"]
    assert notice.startswith("torch.set_num_threads(2) in step 1 (line 3) kept one thread")
    assert "OMP_PROC_BIND" in notice
