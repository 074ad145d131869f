"""PyTorch's intra-op threads across the runner's fork, for a process that may have used them.

OpenMP's thread pool does not survive fork (GNU OpenMP has no fork handler):
in the child of a process that ran a parallel operation, the first parallel
operation on more than one thread waits forever for threads that are not
there. PyTorch's own pool (pthreadpool) does the opposite: it starts its
threads again in the child, where the kernel's wall, which holds one thread,
then refuses to go up. So the parent forks at one thread (``one_thread_for_fork``)
and restores its own count at once, and in the child ``torch.set_num_threads``
keeps one thread however many a scenario asks for (``ThreadRequests``), which
the trace's notices then say, naming the step. The command line's process,
which runs no tensor operation before it forks, needs neither.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, List, Optional, Tuple

from ..trace import Step, evolve
from ..trace.events import End


def one_thread_for_fork() -> Optional[int]:
    """Set this process to one intra-op thread; the count to restore once the child is forked.

    A child forked at one thread has no OpenMP pool to wait for and no
    pthreadpool threads started again inside the wall. None: it is one already.
    """
    import torch

    threads = torch.get_num_threads()
    if threads <= 1:
        return None
    torch.set_num_threads(1)
    return threads


def restore_threads(threads: Optional[int]) -> None:
    """Give this process back the count ``one_thread_for_fork`` returned."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def openmp_binds() -> bool:
    """Whether the OpenMP runtime loaded here pins each of its threads to CPUs.

    ``OMP_PROC_BIND``, ``OMP_PLACES`` or ``GOMP_CPU_AFFINITY`` make it do so, read
    when the library was loaded; asked of the library itself
    (``omp_get_proc_bind``), not guessed from the environment. Pinning a new
    thread is a ``sched_setaffinity`` on the thread's id, which the wall
    refuses (it allows the call on the child's own pid only), and OpenMP then
    ends the process.
    """
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            libraries = {line.split()[-1] for line in f if "libgomp" in line or "libiomp" in line}
    except OSError:
        return False
    for path in sorted(libraries):
        try:
            if ctypes.CDLL(path).omp_get_proc_bind() != 0:  # omp_proc_bind_false
                return True
        except (OSError, AttributeError):
            continue
    return False


#: Why a child keeps one thread: forked from a process that may have used OpenMP's pool.
FORKED = (
    "this scenario ran in a process forked from one that may have used PyTorch's threads "
    "already, whose OpenMP threads do not survive fork, so a second thread could wait forever; "
    "run it with the tensortrace command to use more"
)
#: Why a child keeps one thread: OpenMP would pin its threads, which the wall refuses.
PINNED = (
    "OpenMP was asked to pin its threads to CPUs (OMP_PROC_BIND, OMP_PLACES or "
    "GOMP_CPU_AFFINITY), which safe mode's wall refuses for any thread but the first, so a "
    "second thread could not start; unset them, or use --trust, to use more"
)


class ThreadRequests:
    """In the child: ``torch.set_num_threads(n)`` with n > 1 keeps one thread, and is remembered.

    Any other argument (1, 0, a float) goes to PyTorch as it is, so that its
    own answer, or its own error, is what the step records. ``why`` ends the notice.
    """

    def __init__(self, why: str = FORKED) -> None:
        import torch

        self.why = why
        self._said_anyway = False
        self._real: Callable[[Any], None] = torch.set_num_threads
        self._pending: Optional[int] = None  # the first count asked for in the step under way
        self.asked: List[Tuple[str, int]] = []  # (where, count) per step that asked for more
        torch.set_num_threads = self._set_num_threads  # the name scenarios use
        if getattr(torch._C, "set_num_threads", None) is self._real:  # the same, from torch._C
            torch._C.set_num_threads = self._set_num_threads

    def keep_one(self) -> None:
        """One thread from now on, and the end of the run says so even if no step asks for more."""
        self._real(1)
        self._said_anyway = True

    def _set_num_threads(self, threads: Any) -> None:
        try:
            count = operator.index(threads)
        except TypeError:
            count = 1
        if count > 1:
            self._pending = count if self._pending is None else self._pending
            threads = 1
        self._real(threads)

    def passed(self, event: Any) -> Any:
        """``event`` as the parent should get it: the end of the run says what was kept from it."""
        if isinstance(event, Step) and self._pending is not None:
            self.asked.append((_place(event), self._pending))
            self._pending = None
        elif isinstance(event, End) and (self.asked or self._said_anyway):
            return evolve(event, notices=event.notices + (self.notice(),))
        return event

    def notice(self) -> str:
        """One sentence naming the first step that asked for more than one thread."""
        if not self.asked:
            return f"the scenario ran on one thread: {self.why}"
        where, count = self.asked[0]
        later = len(self.asked) - 1
        steps = "step" if later == 1 else "steps"
        also = f", as did {later} later {steps} asking for more" if later else ""
        return f"torch.set_num_threads({count}) in {where} kept one thread{also}: {self.why}"


def _place(step: Step) -> str:
    name = "setup" if step.index == 0 else f"step {step.index}"
    if step.line is None:
        return name
    cell = f"cell {step.cell}, " if step.cell is not None else ""
    return f"{name} ({cell}line {step.line})"


__all__ = [
    "FORKED",
    "PINNED",
    "ThreadRequests",
    "one_thread_for_fork",
    "openmp_binds",
    "restore_threads",
]
