"""The kernel's wall, on its own: plain Python inside the confined child can do no harm.

These tests run unrestricted Python (full builtins, ``import os``) in the
forked child with the Python-level checks off (``safe=False``) and the kernel's
confinement on (``confine=True``), so that what they show holds however the
Python-level checks are beaten. Each harmful step must fail with an error that
the trace records, and the run must go on to the next step. A control run of
the same steps without confinement shows that each step does harm when nothing
stops it, so none of these tests can pass vacuously.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from typing import Dict, List

import pytest

from bystanders import bystander_process  # noqa: F401 - the fixture "bystander"
from tensortrace.run import confine
from tensortrace.trace import Trace
from tensortrace.run.runner import ConfinementUnavailable, Limits, run_scenario
from tensortrace.scenario import loads_scenario

REPORT = confine.available()
needs_wall = pytest.mark.skipif(
    not REPORT.complete,
    reason="this machine cannot build the kernel's wall: " + "; ".join(REPORT.missing),
)


def run(tmp_path: Path, steps: List[str], *, confined: bool = True, safe: bool = False) -> Trace:
    body = "\n".join(
        f"  - run: {json.dumps(step)}" for step in steps
    )  # a JSON string is a YAML string
    text = f"title: the wall\nsteps:\n{body}\n"
    path = tmp_path / "wall.yaml"
    path.write_text(text, encoding="utf-8")
    scenario = loads_scenario(text, path=str(path))
    [trace] = run_scenario(
        scenario, safe=safe, confine=confined, limits=Limits(timeout=60)
    )  # a loaded machine is slow
    return trace


def outcomes(trace: Trace) -> Dict[int, str]:
    return {s.index: (s.error.type if s.error else "ok") for s in trace.steps}


@pytest.fixture
def area(tmp_path: Path) -> Path:
    """A folder outside every path the child may read, with a secret and a file to attack."""
    folder = tmp_path / "area"
    folder.mkdir()
    (folder / "secret.txt").write_text("top secret", encoding="utf-8")
    (folder / "existing.txt").write_text("keep me", encoding="utf-8")
    return folder


def test_the_area_is_outside_every_readable_path(area: Path) -> None:
    # The secret must not sit under a path the child may read, or the test proves nothing.
    for root in confine.read_paths():
        assert not str(area).startswith(root.rstrip("/") + "/"), (
            f"{area} lies under readable {root}"
        )


FILE_ATTACKS = [
    "import os, mmap",
    "open({new!r}, 'w').write('x')",
    "open({existing!r}, 'r+').write('y')",
    "open({existing!r}, 'a').write('z')",
    "os.truncate({existing!r}, 0)",
    "os.chmod({existing!r}, 0o777)",
    "os.mkdir({newdir!r})",
    "os.symlink({existing!r}, {link!r})",
    "os.rename({existing!r}, {renamed!r})",
    "os.unlink({renamed!r})",
    "print(open({secret!r}).read())",
]


def _file_steps(area: Path) -> List[str]:
    names = {
        "new": str(area / "new.txt"),
        "existing": str(area / "existing.txt"),
        "renamed": str(area / "renamed.txt"),
        "newdir": str(area / "newdir"),
        "link": str(area / "link"),
        "secret": str(area / "secret.txt"),
    }
    return [step.format(**names) for step in FILE_ATTACKS] + [
        "x = torch.ones(2, requires_grad=True); (x * 3).sum().backward()"
    ]


@needs_wall
def test_files_cannot_be_written_created_renamed_truncated_or_read(
    tmp_path: Path, area: Path
) -> None:
    trace = run(tmp_path, _file_steps(area))
    got = outcomes(trace)
    assert got[1] == "ok"
    for index in range(2, len(FILE_ATTACKS) + 1):
        assert got[index] == "PermissionError", (
            index,
            FILE_ATTACKS[index - 1],
            trace.steps[index - 1].error,
        )
    assert got[len(FILE_ATTACKS) + 1] == "ok", "the run must go on after refused steps"
    assert "top secret" not in (trace.steps[len(FILE_ATTACKS) - 1].stdout or "")
    assert sorted(p.name for p in area.iterdir()) == ["existing.txt", "secret.txt"]
    assert (area / "existing.txt").read_text(encoding="utf-8") == "keep me"
    assert oct((area / "existing.txt").stat().st_mode & 0o777) != oct(0o777)


def test_without_the_wall_the_same_steps_do_harm(tmp_path: Path, area: Path) -> None:
    """The control: every attack above succeeds when nothing stops it."""
    trace = run(tmp_path, _file_steps(area), confined=False)
    got = outcomes(trace)
    assert all(outcome == "ok" for outcome in got.values()), trace.steps
    assert "top secret" in (trace.steps[len(FILE_ATTACKS) - 1].stdout or "")
    assert sorted(p.name for p in area.iterdir()) == ["link", "new.txt", "newdir", "secret.txt"]


DEVICE_WRITES = [
    "x = torch.ones(1)",
    "open('/dev/null', 'w').write('x')",
    "open('/dev/zero', 'r+b')",
]


@needs_wall
def test_no_device_file_can_be_opened_for_writing(tmp_path: Path) -> None:
    """Safe mode runs on the CPU only, so the wall opens no device file for writing
    (docs/safety.md, ``landlock-files``): not even ``/dev/null``, which it may read."""
    assert outcomes(run(tmp_path, DEVICE_WRITES)) == {
        1: "ok",
        2: "PermissionError",
        3: "PermissionError",
    }
    assert outcomes(run(tmp_path, DEVICE_WRITES, confined=False)) == {1: "ok", 2: "ok", 3: "ok"}


@needs_wall
def test_a_writable_shared_mapping_cannot_be_made(tmp_path: Path) -> None:
    readable = (
        confine.__file__
    )  # a file the child may read: the wall still forbids writing through a mapping
    steps = [
        "import mmap",
        "m = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)",
        (
            f"f = open({readable!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED,"
            " prot=mmap.PROT_READ | mmap.PROT_WRITE)"
        ),
        (
            f"f = open({readable!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE,"
            " prot=mmap.PROT_READ)"
        ),
    ]
    got = outcomes(run(tmp_path, steps))
    assert got == {1: "ok", 2: "PermissionError", 3: "PermissionError", 4: "ok"}


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


@needs_wall
def test_no_network_connection_can_be_opened(tmp_path: Path, listener: Listener) -> None:
    steps = [
        "import socket",
        f"socket.create_connection(('127.0.0.1', {listener.port}), timeout=2)",
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('127.0.0.1', 9))",
        "s = socket.socket(socket.AF_UNIX); s.connect('\\0tensortrace-test')",
        "a, b = socket.socketpair()",
    ]
    got = outcomes(run(tmp_path, steps))
    assert got == {
        1: "ok",
        2: "PermissionError",
        3: "PermissionError",
        4: "PermissionError",
        5: "PermissionError",
    }
    assert listener.accepted == 0


def test_the_listener_accepts_an_unconfined_connection(tmp_path: Path, listener: Listener) -> None:
    """The control for the network test: the same step connects when nothing stops it."""
    steps = [
        "import socket",
        f"socket.create_connection(('127.0.0.1', {listener.port}), timeout=2).close()",
    ]
    got = outcomes(run(tmp_path, steps, confined=False))
    assert got == {1: "ok", 2: "ok"}
    for _ in range(50):
        if listener.accepted:
            break
        threading.Event().wait(0.05)
    assert listener.accepted == 1


@needs_wall
def test_no_process_can_be_started_or_signalled(tmp_path: Path) -> None:
    steps = [
        "import os, subprocess, signal",
        "subprocess.run(['true'])",
        "os.fork()",
        "os.posix_spawn('/bin/true', ['true'], {})",
        "os.execv('/bin/true', ['true'])",
        "os.kill(os.getppid(), signal.SIGTERM)",
        "os.kill(os.getpid(), 0)",
    ]
    trace = run(tmp_path, steps)
    got = outcomes(trace)
    assert got[1] == "ok"
    for index in (2, 3, 4, 5, 6):
        assert got[index] == "PermissionError", (
            index,
            steps[index - 1],
            trace.steps[index - 1].error,
        )
    assert got[7] == "ok", "a process may still signal itself"
    assert trace.aborted is None


@needs_wall
def test_limits_cannot_be_raised_again(tmp_path: Path) -> None:
    steps = [
        "import resource",
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))",
        "resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))",
        "print(resource.getrlimit(resource.RLIMIT_FSIZE))",
    ]
    trace = run(tmp_path, steps)
    got = outcomes(trace)
    assert got[1] == "ok" and got[4] == "ok"
    assert got[2] in ("ValueError", "PermissionError") and got[3] in (
        "ValueError",
        "PermissionError",
    )
    assert trace.steps[3].stdout.strip() == "(0, 0)"


@needs_wall
def test_descriptors_opened_before_the_wall_are_closed(tmp_path: Path, area: Path) -> None:
    target = area / "opened-by-parent.txt"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        steps = ["import os", f"os.write({fd}, b'written through an inherited descriptor')"]
        got = outcomes(run(tmp_path, steps))
    finally:
        os.close(fd)
    assert got == {1: "ok", 2: "OSError"}  # EBADF: the descriptor is gone in the child
    assert target.read_text(encoding="utf-8") == ""


THREADED_STEPS = [
    "import threading, numpy as np",
    "t = threading.Thread(target=lambda: None); t.start(); t.join()",
    (
        "torch.set_num_threads(2); y = torch.randn(2000, 2000) @ torch.randn(2000, 2000)\n"
        "print(torch.get_num_threads())"
    ),
    (
        "w = torch.nn.Parameter(torch.ones(3)); opt = torch.optim.SGD([w], lr=0.1); (w *"
        " 2).sum().backward(); opt.step()"
    ),
    "a = np.arange(3.0); b = torch.from_numpy(a); b.add_(1)",
]


@needs_wall
def test_threads_torch_and_numpy_still_work_inside(tmp_path: Path) -> None:
    """torch's own thread pool runs inside the wall: in a child of a process that ran no
    tensor operation, as the command line's children are (a child of this test process,
    which may have, would keep one thread: ``tensortrace.run.forkthreads``)."""
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from pathlib import Path\n"
        "from tensortrace.run import runner\n"
        "import test_confine as t\n"
        "runner.threads_unused_before_fork = True\n"
        "trace = t.run(Path(sys.argv[2]), t.THREADED_STEPS)\n"
        "print(json.dumps([t.outcomes(trace), trace.steps[2].stdout, trace.notices]))\n"
    )
    done = subprocess.run(
        [
            "timeout",
            "-s",
            "KILL",
            "150",
            sys.executable,
            "-c",
            script,
            str(Path(__file__).parent),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got, printed, notices = json.loads(done.stdout)
    assert got == {"1": "ok", "2": "ok", "3": "ok", "4": "ok", "5": "ok"}
    assert (printed, notices) == (
        "2\n",
        [],
    )  # two threads really ran, and nothing was kept from them


@needs_wall
def test_safe_mode_is_confined_by_default_and_says_so(tmp_path: Path) -> None:
    trace = run(tmp_path, ["a = torch.ones(2)"], confined=None, safe=True)  # type: ignore[arg-type]
    conf = trace.environment.confinement
    assert conf is not None and conf.complete and conf.missing == ()
    assert set(confine.ESSENTIAL) <= set(conf.enforced)
    again = Trace.from_dict(trace.to_dict())
    assert again.environment.confinement == conf


def test_trust_mode_is_not_confined(tmp_path: Path) -> None:
    trace = run(tmp_path, ["a = torch.ones(2)"], confined=None, safe=False)  # type: ignore[arg-type]
    assert trace.environment.confinement is None


def test_a_required_wall_that_cannot_be_built_refuses_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        confine,
        "available",
        lambda: confine.Report(("seccomp",), ("landlock-files: this kernel has no Landlock",)),
    )
    scenario = loads_scenario("title: t\nsteps:\n  - print('ran')\n", path=str(tmp_path / "s.yaml"))
    started = []
    with pytest.raises(ConfinementUnavailable, match="this kernel has no Landlock"):
        run_scenario(scenario, safe=True, require_confinement=True, on_start=started.append)
    assert started == []


def test_a_missing_layer_is_recorded_in_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = confine.available()
    monkeypatch.setattr(
        confine,
        "available",
        lambda: confine.Report(
            tuple(x for x in real.enforced if x != confine.SECCOMP),
            real.missing + ("seccomp: libseccomp is not installed",),
        ),
    )
    trace = run(tmp_path, ["a = torch.ones(2)"], confined=None, safe=True)  # type: ignore[arg-type]
    conf = trace.environment.confinement
    assert conf is not None and not conf.complete
    assert any(m.startswith("seccomp:") for m in conf.missing)
    assert confine.SECCOMP not in conf.enforced


def test_the_report_on_other_platforms_names_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confine.sys, "platform", "darwin")
    report = confine.available()
    assert not report.complete and report.enforced == ()
    assert len(report.missing) == len(confine.ESSENTIAL)
    assert all("Linux only" in m for m in report.missing)


def test_docs_name_every_layer() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "safety.md").read_text(encoding="utf-8")
    for layer in confine.ESSENTIAL + (confine.LANDLOCK_NETWORK, confine.LANDLOCK_SCOPES):
        assert f"`{layer}`" in text, layer


# --- the command line -----------------------------------------------------------------


def _cli(*args: str, env: dict | None = None):
    """The command in this process (conftest's ``cli``), with the once-per-process notice reset."""
    from conftest import cli as run_cli

    from tensortrace.cli import common as cli

    cli._said_unconfined = False
    return run_cli(*args, env=env)


def _no_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    real = confine.available()
    monkeypatch.setattr(
        confine,
        "available",
        lambda: confine.Report(
            tuple(x for x in real.enforced if not x.startswith("landlock")),
            ("landlock-files: this kernel has no Landlock (Linux 5.13 or later is needed)",),
        ),
    )


@pytest.mark.parametrize("how", ["option", "environment"])
def test_require_confinement_refuses_with_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    _no_landlock(monkeypatch)
    path = tmp_path / "s.yaml"
    path.write_text("title: t\nsteps:\n  - a = torch.ones(1)\n", encoding="utf-8")
    if how == "option":
        result = _cli("run", str(path), "--require-confinement")
    else:
        result = _cli("run", str(path), env={"TENSORTRACE_REQUIRE_CONFINEMENT": "1"})
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert (
        "cannot be confined by the kernel here" in lines[0]
        and "this kernel has no Landlock" in lines[0]
    )


def test_an_unconfined_run_says_so_once_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_landlock(monkeypatch)
    paths = []
    for name in ("one", "two"):
        path = tmp_path / f"{name}.yaml"
        path.write_text("title: t\nsteps:\n  - a = torch.ones(1)\n", encoding="utf-8")
        paths.append(str(path))
    result = _cli("check", *paths)
    assert result.returncode == 0, result.stderr
    notices = [line for line in result.stderr.splitlines() if "not confined by the kernel" in line]
    assert len(notices) == 1
    assert (
        "landlock-files: this kernel has no Landlock" in notices[0]
        and "--require-confinement" in notices[0]
    )


@needs_wall
def test_a_confined_run_says_nothing_about_confinement(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("title: t\nsteps:\n  - a = torch.ones(1)\n", encoding="utf-8")
    result = _cli("run", str(path), "--format", "json", "--require-confinement")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert json.loads(result.stdout)["environment"]["confinement"]["missing"] == []


@needs_wall
def test_a_layer_that_fails_to_go_up_stops_the_run_before_any_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wall half built is not reported as a wall: the run stops, exit 2, nothing ran."""

    def broken() -> None:
        raise confine.ConfinementError("the seccomp filter could not be loaded: Invalid argument")

    monkeypatch.setattr(confine, "load_seccomp", broken)  # the forked child inherits it
    path = tmp_path / "s.yaml"
    path.write_text("title: t\nsteps:\n  - print('ran')\n", encoding="utf-8")
    result = _cli("run", str(path), "--format", "json")
    assert result.returncode == 2
    assert result.stdout == ""
    assert (
        "could not confine the child process" in result.stderr
        and "seccomp filter could not be loaded" in result.stderr
    )
    assert "Traceback" not in result.stderr


KERNEL_INTERFACES = [
    "unshare",
    "setns",
    "mount",
    "io_uring_setup",
    "bpf",
    "userfaultfd",
    "keyctl",
    "open_by_handle_at",
    "init_module",
    "ptrace",
    "process_vm_writev",
    "memfd_create",
    "pidfd_open",
    "shmget",
    "msgget",
    "semget",
    "mq_open",
    "getxattr",
    "inotify_init1",
    "fanotify_init",
    "process_madvise",
    "syslog",
    "kcmp",
]


@needs_wall
def test_kernel_interfaces_that_bypass_the_other_layers_are_refused(tmp_path: Path) -> None:
    """Each call is made with harmless arguments; the filter answers EPERM before the kernel looks
    at them."""
    steps = [
        "import ctypes, errno, os\n"
        "from tensortrace.run.seccomp import libseccomp\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.syscall.restype = ctypes.c_long\n"
        "def call(name):\n"
        "    number = libseccomp().seccomp_syscall_resolve_name(name.encode())\n"
        "    ctypes.set_errno(0)\n"
        "    rc = libc.syscall(ctypes.c_long(number), 0, 0, 0, 0, 0, 0)\n"
        "    code = ctypes.get_errno()\n"
        "    return errno.errorcode.get(code, str(code)) if rc < 0 else 'allowed'\n"
        f"print({{name: call(name) for name in {KERNEL_INTERFACES!r}}})",
    ]
    trace = run(tmp_path, steps)
    assert trace.steps[0].status == "ok", trace.steps[0].error
    answers = eval(trace.steps[0].stdout)  # a dict literal the step printed
    assert answers == {name: "EPERM" for name in KERNEL_INTERFACES}


LONG_CHAIN = """
title: a long chain
steps:
  - run: |
      x = torch.ones(1, requires_grad=True)
      y = x
      for i in range(3000):
          y = y * 1.0
    graph: [y]
"""


@needs_wall
def test_a_graph_larger_than_the_old_bound_is_drawn_whole_inside_the_wall(tmp_path: Path) -> None:
    """docs/safety.md: the graph is walked in the confined child itself (no copy is forked), so the
    wall draws it whole."""
    scenario = loads_scenario(LONG_CHAIN, path=str(tmp_path / "chain.yaml"))
    for safe in (True, False):
        [trace] = run_scenario(scenario, safe=safe, confine=safe, limits=Limits(timeout=60))
        [graph] = trace.steps[-1].graphs
        assert trace.steps[-1].status == "ok" and trace.aborted is None
        assert (
            not graph.truncated and len(graph.nodes) == 3000 + 1
        )  # every MulBackward0, and x's AccumulateGrad
        # past walk.ANCHOR_PAST nodes the walk anchors (and says so), nothing else is noted
        assert [n for n in trace.notices if "was walked" not in n] == []


# --- System V IPC, metadata, signals through descriptors ---------------------------------------

_CTYPES_CALL = (
    "import ctypes, errno, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def answer(rc):\n"
    "    return errno.errorcode.get(ctypes.get_errno(), '?') if rc < 0 else 'allowed'\n"
)
IPC_PRIVATE, IPC_CREAT, IPC_RMID = 0, 0o1000, 0
IPC_STEPS = [
    _CTYPES_CALL
    + "made = {}\n"
    + f"made['shmget'] = libc.shmget({IPC_PRIVATE}, 4096, {IPC_CREAT} | 0o600)\n"
    + f"made['msgget'] = libc.msgget({IPC_PRIVATE}, {IPC_CREAT} | 0o600)\n"
    + f"made['semget'] = libc.semget({IPC_PRIVATE}, 1, {IPC_CREAT} | 0o600)\n"
    + "ids = {name: (rc if rc >= 0 else None) for name, rc in made.items()}\n"
    + "print(({name: answer(rc) for name, rc in made.items()}, ids))",
]


def _remove_ipc(ids: Dict[str, int]) -> None:
    import ctypes

    libc = ctypes.CDLL(None)
    for name, ident in ids.items():
        if ident is not None:
            {"shmget": libc.shmctl, "msgget": libc.msgctl}.get(
                name, lambda i, c, *a: libc.semctl(i, 0, c)
            )(ident, IPC_RMID, None)


def _printed(trace: Trace, index: int = 0):
    step = trace.steps[index]
    assert step.status == "ok", step.error
    return eval(step.stdout)  # literals the step printed


@needs_wall
def test_system_v_ipc_objects_cannot_be_made(tmp_path: Path) -> None:
    answers, ids = _printed(run(tmp_path, IPC_STEPS))
    _remove_ipc(ids)
    assert answers == {"shmget": "EPERM", "msgget": "EPERM", "semget": "EPERM"}


def test_without_the_wall_ipc_objects_outlive_the_child(tmp_path: Path) -> None:
    """The control: unconfined, the same step makes a segment, a queue and a semaphore set."""
    answers, ids = _printed(run(tmp_path, IPC_STEPS, confined=False))
    _remove_ipc(ids)
    assert answers == {"shmget": "allowed", "msgget": "allowed", "semget": "allowed"}


@pytest.fixture
def segment():
    """A private (0600) shared-memory segment of this process, as another program's would be."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ident = libc.shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0o600)
    assert ident >= 0
    yield ident
    libc.shmctl(ident, IPC_RMID, None)


def _attach_steps(ident: int) -> List[str]:
    return [
        _CTYPES_CALL + "libc.shmat.restype = ctypes.c_long\n"
        "buf = ctypes.create_string_buffer(512)\n"
        f"print(answer(libc.shmat({ident}, None, 0)), answer(libc.shmctl({ident}, 2, buf)))"
    ]


@needs_wall
def test_another_process_segment_cannot_be_attached(tmp_path: Path, segment: int) -> None:
    trace = run(tmp_path, _attach_steps(segment))
    assert trace.steps[0].stdout.split() == ["EPERM", "EPERM"]  # shmat, shmctl(IPC_STAT)
    control = run(tmp_path, _attach_steps(segment), confined=False)
    assert control.steps[0].stdout.split() == ["allowed", "allowed"]


def _xattr_steps(area: Path) -> List[str]:
    secret = str(area / "secret.txt")
    steps = [
        f"import os\nprint(os.getxattr({secret!r}, 'user.owner'))",
        f"print(os.listxattr({secret!r}))",
    ]
    return steps


@needs_wall
def test_extended_attributes_of_files_outside_cannot_be_read(tmp_path: Path, area: Path) -> None:
    os.setxattr(area / "secret.txt", "user.owner", b"alice")
    trace = run(tmp_path, _xattr_steps(area))
    assert outcomes(trace) == {1: "PermissionError", 2: "PermissionError"}
    control = run(tmp_path, _xattr_steps(area), confined=False)
    assert [s.stdout.strip() for s in control.steps] == ["b'alice'", "['user.owner']"]


SIGNAL_STEPS = [
    "import fcntl, os\n"
    "def owner(fd, command, value):\n"
    "    try:\n"
    "        fcntl.fcntl(fd, command, value)\n"
    "        return 'allowed'\n"
    "    except OSError as exc:\n"
    "        return exc.__class__.__name__\n"
    "kept = [fd for fd in range(3, 256) if owner(fd, fcntl.F_GETFL, 0) == 'allowed']\n"
    "me = os.getpid()\n"  # the control sets the owner to the child itself: no signal leaves it
    "print(sorted({owner(fd, c, v) for fd in kept for c, v in\n"
    "    ((fcntl.F_SETOWN, me), (fcntl.F_SETSIG, 9), (15, 0), (fcntl.F_SETLEASE, fcntl.F_RDLCK),"
    " (fcntl.F_NOTIFY, 0))}),\n"
    "    len(kept))",
]


@needs_wall
def test_no_descriptor_can_be_set_to_signal_a_process(tmp_path: Path) -> None:
    """F_SETOWN/F_SETSIG on the event pipe would have the kernel signal whoever the child names."""
    trace = run(tmp_path, SIGNAL_STEPS)
    found, kept = trace.steps[0].stdout.rsplit(" ", 1)
    assert int(kept) >= 1, "the event pipe is open in the child"
    assert eval(found) == ["PermissionError"]
    control = run(tmp_path, SIGNAL_STEPS, confined=False)
    assert "'allowed'" in control.steps[0].stdout


INOTIFY_STEPS = [
    _CTYPES_CALL + "print(answer(libc.inotify_init1(0)), answer(libc.fanotify_init(0, 0)))"
]


@needs_wall
def test_files_cannot_be_watched(tmp_path: Path) -> None:
    trace = run(tmp_path, INOTIFY_STEPS)
    assert trace.steps[0].stdout.split() == ["EPERM", "EPERM"]
    control = run(tmp_path, INOTIFY_STEPS, confined=False)
    assert control.steps[0].stdout.split()[0] == "allowed"


# --- the user's environment -----------------------------------------------------------------

ENVIRONMENT_STEPS = [
    "import os\nprint(sorted(name for name in os.environ if 'TOKEN' in name or name == 'HOME'))",
    (
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.getenv.restype ="
        " ctypes.c_char_p\nprint(libc.getenv(b'API_TOKEN'))"
    ),
    "print(b'secret-value' in open('/proc/self/environ', 'rb').read())",
    "print(b'secret-value' in open('/proc/thread-self/environ', 'rb').read())",
    "print(b'secret-value' in open(f'/proc/{os.getppid()}/environ', 'rb').read())",
    # the strings the process started with, in its own memory
    (
        "fields = open('/proc/self/stat', 'rb').read().rsplit(b')', 1)[1].split()\n"
        "start, end = int(fields[47]), int(fields[48])\n"
        "print(b'secret-value' in ctypes.string_at(start, end - start))"
    ),
    "print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('LANG'))",
]


def _run_with_token(tmp_path: Path, confined: bool) -> Trace:
    """The steps above in a child of a process started with API_TOKEN in its environment."""
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_confine import ENVIRONMENT_STEPS, run\n"
        "from pathlib import Path\n"
        "trace = run(Path(sys.argv[2]), ENVIRONMENT_STEPS, confined=sys.argv[3] == '1')\n"
        "print(json.dumps(trace.to_dict()))\n"
    )
    env = dict(os.environ, API_TOKEN="secret-value", OMP_NUM_THREADS="1", LANG="C.UTF-8")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(Path(__file__).parent),
            str(tmp_path),
            "1" if confined else "0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    return Trace.from_dict(json.loads(done.stdout))


@needs_wall
def test_the_users_environment_does_not_reach_the_child(tmp_path: Path) -> None:
    trace = _run_with_token(tmp_path, confined=True)
    got = [(s.error.type if s.error else s.stdout.strip()) for s in trace.steps]
    assert got == [
        "[]",
        "None",
        "PermissionError",
        "PermissionError",
        "PermissionError",
        "False",
        "1 C.UTF-8",
    ], got


def test_without_the_wall_the_child_sees_the_token(tmp_path: Path) -> None:
    """The control: the same steps, unconfined, find the token everywhere."""
    trace = _run_with_token(tmp_path, confined=False)
    got = [(s.error.type if s.error else s.stdout.strip()) for s in trace.steps]
    assert got[:6] == [
        "['API_TOKEN', 'HOME']",
        "b'secret-value'",
        "True",
        "True",
        "True",
        "True",
    ], got


KILL_THE_PARENT = [
    (
        "import fcntl, os, signal\n"
        "def is_open(fd):\n"
        "    try:\n"
        "        return fcntl.fcntl(fd, fcntl.F_GETFL) is not None\n"
        "    except OSError:\n"
        "        return False\n"
        "for fd in [fd for fd in range(3, 256) if is_open(fd)]:  # the event pipe\n"
        "    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)\n"
        "    fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGKILL)\n"
        "    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getppid())"
    ),
    "print('the parent is still reading')",
]


def _run_kill_the_parent(tmp_path: Path, script: str):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", script, str(Path(__file__).parent), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_without_the_wall_the_event_pipe_kills_the_parent(tmp_path: Path) -> None:
    """The control: unconfined, the same steps have the kernel send SIGKILL to the parent."""
    script = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from pathlib import Path\n"
        "from test_confine import KILL_THE_PARENT, run\n"
        "run(Path(sys.argv[2]), KILL_THE_PARENT, confined=False)\n"
        "print('survived')\n"
    )
    done = _run_kill_the_parent(tmp_path, script)
    assert done.returncode == -9 and "survived" not in done.stdout, (
        done.returncode,
        done.stderr[-2000:],
    )


@needs_wall
def test_the_event_pipe_cannot_signal_the_parent_even_without_landlock_scopes(
    tmp_path: Path,
) -> None:
    """On a kernel whose Landlock has no signal scopes (ABI below 6, simulated), seccomp alone
    holds.

    With O_ASYNC, F_SETSIG and F_SETOWN on its end of the event pipe, the
    child would have the kernel send SIGKILL to the parent as soon as the
    parent reads. The run happens in a process of its own, which that
    signal would kill.
    """

    script = (
        "import json, sys\nsys.path.insert(0, sys.argv[1])\nfrom pathlib import Path\nfrom"
        " tensortrace.run import confine\nconfine.landlock_abi = lambda: (5, '')\nfrom test_confine"
        " import KILL_THE_PARENT, outcomes, run\ntrace = run(Path(sys.argv[2]),"
        " KILL_THE_PARENT)\nprint(json.dumps([outcomes(trace),"
        " trace.environment.confinement.enforced, trace.steps[1].stdout]))\n"
    )
    done = _run_kill_the_parent(tmp_path, script)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    got, enforced, printed = json.loads(done.stdout)
    assert confine.LANDLOCK_SCOPES not in enforced and confine.SECCOMP in enforced
    assert (
        got == {"1": "PermissionError", "2": "ok"}
        and printed.strip() == "the parent is still reading"
    )


def test_the_kept_environment_is_short_and_never_holds_credentials() -> None:
    from tensortrace.run.childenv import kept_environment

    environ = {
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TZ": "UTC",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "CUDA_VISIBLE_DEVICES": "0",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "HOME": "/root",
        "USER": "root",
        "PATH": "/usr/bin",
        "API_TOKEN": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "TORCH_HUB_TOKEN": "x",
        "CUDA_API_KEY": "x",
        "PYTORCH_PASSWORD": "x",
        "SSH_AUTH_SOCK": "/tmp/a",
    }
    assert sorted(kept_environment(environ)) == [
        "CUBLAS_WORKSPACE_CONFIG",
        "CUDA_VISIBLE_DEVICES",
        "LANG",
        "LC_ALL",
        "MKL_NUM_THREADS",
        "OMP_NUM_THREADS",
        "PYTORCH_CUDA_ALLOC_CONF",
        "TZ",
    ]


def test_docs_list_what_the_child_keeps() -> None:
    from tensortrace.run.childenv import KEPT_NAMES, KEPT_PREFIXES

    text = (Path(__file__).resolve().parents[2] / "docs" / "safety.md").read_text(encoding="utf-8")
    for name in sorted(KEPT_NAMES):
        assert f"`{name}`" in text or f"({name})" in text or f"`{name}`)" in text, name
    for prefix in KEPT_PREFIXES:
        assert f"`{prefix}*`" in text, prefix
    for name in confine.PROC_SELF_READ:
        assert f"`{name.rsplit('/', 1)[1]}`" in text, name


def _priority_steps(pid: int) -> List[str]:
    return [
        "import os",
        f"os.setpriority(os.PRIO_PROCESS, {pid}, 19)",
        f"print(os.getpriority(os.PRIO_PROCESS, {pid}))",
        "os.setpriority(os.PRIO_PROCESS, 0, 5)",
    ]


@needs_wall
def test_the_priority_of_another_process_cannot_be_lowered(tmp_path: Path, bystander: int) -> None:
    before = os.getpriority(os.PRIO_PROCESS, bystander)
    steps = _priority_steps(bystander) + ["os.setpriority(os.PRIO_USER, 0, 19)"]
    trace = run(tmp_path, steps)
    assert outcomes(trace) == {
        1: "ok",
        2: "PermissionError",
        3: "ok",
        4: "ok",
        5: "PermissionError",
    }
    assert os.getpriority(os.PRIO_PROCESS, bystander) == before < 19
    control = run(
        tmp_path, _priority_steps(bystander), confined=False
    )  # (never PRIO_USER: every process)
    assert outcomes(control) == {1: "ok", 2: "ok", 3: "ok", 4: "ok"}
    assert os.getpriority(os.PRIO_PROCESS, bystander) == 19
