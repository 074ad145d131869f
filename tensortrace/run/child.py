"""The forked child's side of a run: limits, the kernel's wall, the tracer, events on the pipe.

``child_main`` never returns. It sends each event as a JSON line, and, when a step's own
code is done, the line ``ran N`` (``RAN``), so that the parent stops the step's clock:
recording is the tool's time.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, Optional

from . import forkthreads
from ..errors import TensorTraceError
from ..trace import Explanation, Step, evolve
from ..trace.events import Crashed, Encoder, EventError, Unusable, encode

if TYPE_CHECKING:  # pragma: no cover - the scenario module imports yaml
    from ..scenario.spec import Scenario
    from .runner import Limits


def child_main(
    write_fd: int,
    scenario: Scenario,
    safe: bool,
    device: Optional[str],
    limits: Limits,
    parent: int,
    confine: bool,
    ops: bool = True,
    threads_unused_before_fork: bool = False,
) -> None:
    """Runs in the forked child; never returns."""
    code = 0
    try:
        os.setpgid(0, 0)  # Ctrl-C reaches the parent, which then stops the child
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _die_with_parent(parent)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        from ..record import tracer  # torch, imported in the parent already

        # forked at one thread (OpenMP's threads do not survive fork): asking for more keeps one
        threads = None if threads_unused_before_fork else forkthreads.ThreadRequests()
        if confine and forkthreads.openmp_binds():  # the wall would refuse to pin a thread
            threads = threads or forkthreads.ThreadRequests()
            threads.why = forkthreads.PINNED
            threads.keep_one()

        report = None
        if safe or confine:
            _scrub_environment()  # before the first step: no token of the user's reaches a trace
            apply_limits(scenario, limits)
        if confine:
            report = _confine(write_fd, scenario)
        capped = (safe or confine) and limits.memory_mb
        encoder = (
            Encoder()
        )  # an unchanged tensor's record is sent as a reference to the previous step's
        for event in tracer.iter_trace(
            scenario,
            safe=safe,
            device=device,
            timeout=limits.timeout,
            confinement=report,
            checked=True,
            on_ran=lambda index: _send(write_fd, RAN + b"%d\n" % index),  # the step clock stops
            ops=ops,
        ):
            event = threads.passed(event) if threads is not None else event
            _send(
                write_fd,
                encoder.encode(_blame_memory_limit(event, limits.memory_mb) if capped else event),
            )
    except TensorTraceError as exc:  # e.g. a device this machine lacks: the user's to fix
        _send(write_fd, encode(Unusable(str(exc))))
        code = 2
    except BaseException as exc:  # report, never print a traceback from the child
        try:
            _send(write_fd, encode(Crashed(f"{type(exc).__name__}: {exc}")))
        except BaseException:
            pass
        code = 3
    finally:
        os._exit(code)


def _send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _die_with_parent(parent: int) -> None:
    """If the command is killed (SIGTERM, SIGHUP, SIGKILL), its child must not run on."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(3)


def _confine(write_fd: int, scenario: Scenario):
    """Put this child behind the kernel's wall; a layer that fails to go up ends the run."""
    from . import confine
    from ..trace import Confinement

    extra = [scenario.path] if scenario.path and os.path.exists(scenario.path) else []
    # the modules beside a Python file that it imports (checked, and run from the text read
    # then): readable, for the lines of their tracebacks; nothing else of the folder is
    extra += [m.path for m in scenario.modules if os.path.exists(m.path)]
    try:
        report = confine.confine(keep_fds=(write_fd,), extra_read=extra)
    except confine.ConfinementError as exc:
        raise TensorTraceError(
            f"safe mode could not confine the child process: {exc}; nothing ran"
        ) from None
    return Confinement(enforced=report.enforced, missing=report.missing)


_cache_folder_made = False
_cache_folder: Optional[str] = None  # torch's inductor cache folder, as made before the wall


def _scrub_environment() -> None:
    """Keep only the variables Python, torch, NumPy and BLAS read (``childenv``).

    The inductor cache folder is named for the child, so that torch finds the
    one made before the wall without looking up the user's name.
    """
    from . import childenv

    childenv.scrub({"TORCHINDUCTOR_CACHE_DIR": _cache_folder} if _cache_folder else {})


def prepare_lazy_imports() -> None:
    """Make the folder torch's lazy imports create exist before the wall forbids writing.

    Done in the parent, once per process: the folder is on disk, so every
    confined child finds it there.

    Optimizers, ``torch.func`` and other ``_disable_dynamo`` functions import
    ``torch._dynamo`` on first use, and that import runs
    ``os.makedirs(<inductor cache folder>, exist_ok=True)``, which succeeds
    without writing when the folder exists. torch's own function for the
    folder's name is loaded from its file, since importing its package would
    import 800 modules.
    """
    global _cache_folder_made, _cache_folder
    if _cache_folder_made:
        return
    _cache_folder_made = True
    import importlib.util

    try:
        import torch

        path = os.path.join(
            os.path.dirname(torch.__file__), "_inductor", "runtime", "cache_dir_utils.py"
        )
        spec = importlib.util.spec_from_file_location("_tensortrace_inductor_cache_dir", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or module.default_cache_dir()
        os.makedirs(os.path.abspath(folder), exist_ok=True)
        _cache_folder = os.path.abspath(folder)
    except Exception:  # another torch, or an unwritable folder: the import will say so itself
        pass


def _blame_memory_limit(event: object, memory_mb: int) -> object:
    """A step that failed to allocate under the memory cap, with the cap named as the cause.

    The cap is tensortrace's, not the machine's: the same step may well run in
    plain Python, so the explanation says which option lifts it.
    """
    if not isinstance(event, Step) or event.error is None:
        return event
    error = event.error
    if error.type != "MemoryError" and "can't allocate memory" not in error.message[:1000]:
        return event
    cause = (
        f"The scenario's memory limit (--memory-limit, {memory_mb} MiB) caused this: "
        "safe mode caps the memory a scenario may use."
    )
    fix = f"Raise the limit, e.g. --memory-limit {memory_mb * 4}, or lift it with --memory-limit 0."
    if error.explanation is None:
        explanation = Explanation(
            title="Out of memory under tensortrace's memory limit",
            what=cause,
            fix=fix,
            topic="memory-limit",
        )
    else:
        explanation = evolve(
            error.explanation,
            what=f"{error.explanation.what} {cause}",
            fix=f"{error.explanation.fix} {fix}",
        )
    return evolve(event, error=evolve(error, explanation=explanation))


def apply_limits(scenario: Scenario, limits: Limits) -> None:
    import resource

    import tempfile

    # torch imports some modules lazily (e.g. torch._dynamo when an optimizer
    # is created) that ask for the temporary folder; Python probes it by
    # writing a file, so find it while writing is still allowed.
    tempfile.gettempdir()
    signal.signal(
        signal.SIGXFSZ, signal.SIG_IGN
    )  # a write past the limit fails with an error instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    if limits.memory_mb:
        try:
            with open("/proc/self/statm") as f:
                current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            current = 0
        cap = current + limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    if limits.timeout:
        steps = len(scenario.steps) + 1
        cpu = int(limits.timeout * steps * 2) + 10
        used = int(sum(os.times()[:2])) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (used + cpu, used + cpu + 5))


RAN = b"ran "  # a line the child sends when a step's own code is done: ``ran N``


def ran_index(line: bytes) -> int:
    """N of a ``ran N`` line; ``EventError`` for anything else (the child is untrusted).

    A false N only moves the parent from the step's limit to the scenario's,
    which a child could always reach by sending its step late.
    """
    digits = line[len(RAN) :]
    if not (0 < len(digits) <= 9 and digits.isdigit()):
        raise EventError("sent a malformed ran line")
    return int(digits)
