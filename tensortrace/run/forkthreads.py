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


class ThreadRequests:
    """In the child: ``torch.set_num_threads(n)`` with n > 1 keeps one thread, and is remembered.

    Any other argument (1, 0, a float) goes to PyTorch as it is, so that its
    own answer, or its own error, is what the step records.
    """

    def __init__(self) -> None:
        import torch

        self._real: Callable[[Any], None] = torch.set_num_threads
        self._pending: Optional[int] = None  # the first count asked for in the step under way
        self.asked: List[Tuple[str, int]] = []  # (where, count) per step that asked for more
        torch.set_num_threads = self._set_num_threads  # the name scenarios use
        if getattr(torch._C, "set_num_threads", None) is self._real:  # the same, from torch._C
            torch._C.set_num_threads = self._set_num_threads

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
        elif isinstance(event, End) and self.asked:
            return evolve(event, notices=event.notices + (self.notice(),))
        return event

    def notice(self) -> str:
        """One sentence naming the first step that asked for more than one thread."""
        where, count = self.asked[0]
        later = len(self.asked) - 1
        steps = "step" if later == 1 else "steps"
        also = f", as did {later} later {steps} asking for more" if later else ""
        return (
            f"torch.set_num_threads({count}) in {where} kept one thread{also}: this scenario "
            "ran in a process forked from one that may have used PyTorch's threads already, "
            "whose OpenMP threads do not survive fork, so a second thread could wait forever; "
            "run it with the tensortrace command to use more"
        )


def _place(step: Step) -> str:
    name = "setup" if step.index == 0 else f"step {step.index}"
    if step.line is None:
        return name
    cell = f"cell {step.cell}, " if step.cell is not None else ""
    return f"{name} ({cell}line {step.line})"


__all__ = ["ThreadRequests", "one_thread_for_fork", "restore_threads"]
