"""The child's lifetime: it never outlives the command, and no wait for it is unbounded.

The runner forks one child per variant. Whatever happens in the parent (the
run ends, a limit passes, an event is refused, Ctrl-C, an exception from the
Python API's caller, a SIGTERM), the child and everything it started are
killed and reaped before the parent goes on:

* the child leads a process group of its own, and ``kill_tree`` kills the
  group (what it started and left in it) and the child, with ``SIGKILL``,
  which no process can ignore or outlive stopped;
* the command line makes itself a *subreaper* (``become_subreaper``), so a
  process the child started that left the group is adopted by the command
  rather than by PID 1 when its parent dies, and is killed with the rest. The
  Python API does not: adoption would hand the caller's process every orphan
  of its other children to reap. Safe mode's child cannot start a process at
  all (seccomp), so its tree is the child alone;
* the child set ``PR_SET_PDEATHSIG`` before the wall, and the wall refuses to
  let it change that, so a command killed with ``SIGKILL`` takes the child
  with it;
* every wait is polled against a deadline (``reap``): a child that closed
  its pipe and sleeps, one that stopped itself, one stuck in the kernel.

``LIVE`` holds the children forked and not reaped yet, so that a signal
handler can kill them all at once (``kill_all``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Dict, Iterator, Optional

PR_SET_CHILD_SUBREAPER = 36
POLL = 0.02  # seconds between two looks at a child that should be ending
STOP_PATIENCE = 5.0  # seconds a killed child may take to be reaped before the parent goes on

LIVE: Dict[int, None] = {}  # pids of children forked and not reaped yet
_subreaper = False


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (Linux 3.4+); whether it is now.

    Only for a process that owns all its children, as the command line does.
    """
    global _subreaper
    if _subreaper:
        return True
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper = False
    return _subreaper


def _adopted() -> Iterator[int]:
    """Processes whose parent is now this one, other than the children it forked itself."""
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit() or int(name) in LIVE:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(me).encode():
            yield int(name)


def kill_tree(pid: int) -> None:
    """SIGKILL the child, its process group and, under a subreaper, what it left behind."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if _subreaper:
        _kill_adopted()


def _kill_adopted(deadline: Optional[float] = None) -> None:
    """Kill and reap the orphans this subreaper adopted, and theirs, until none is left."""
    deadline = deadline if deadline is not None else time.monotonic() + STOP_PATIENCE
    while time.monotonic() < deadline:
        orphans = list(_adopted())
        if not orphans:
            return
        for orphan in orphans:
            for kill, target in ((os.killpg, orphan), (os.kill, orphan)):
                try:
                    kill(target, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for orphan in orphans:
            reap(orphan, time.monotonic() + POLL * 10)


def reap(pid: int, deadline: Optional[float]) -> Optional[int]:
    """The child's wait status once it has ended, or None if it has not by ``deadline``.

    Polled, never blocking past the deadline (``None``: no deadline): a child that
    stopped itself, or sleeps with its pipe closed, does not end on its own.
    """
    delay = POLL / 4
    while True:
        try:
            ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            LIVE.pop(pid, None)
            return 0  # reaped elsewhere: nothing more to wait for
        if ended is not None:
            # what it started and left in its group goes with it: while it is not reaped,
            # its pid, and so its group's id, cannot name another process
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _, status = os.waitpid(pid, 0)  # ended: this returns at once
            LIVE.pop(pid, None)
            if _subreaper:
                _kill_adopted()
            return status
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, POLL)


def stop(pid: int) -> Optional[int]:
    """Kill the child's tree and reap the child; its wait status, or None if the kernel has
    not let it end within ``STOP_PATIENCE`` (then it is left, killed, for later)."""
    kill_tree(pid)
    return reap(pid, time.monotonic() + STOP_PATIENCE)


def kill_all() -> None:
    """Kill every live child's tree at once, without waiting: for a signal handler."""
    for pid in list(LIVE):
        kill_tree(pid)


__all__ = ["LIVE", "become_subreaper", "kill_all", "kill_tree", "reap", "stop"]
