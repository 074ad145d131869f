"""The command line: parse, call the library, write, choose the exit status.

Nothing here knows how tracing or rendering works. Library errors
(``TensorTraceError``) are printed as one line on stderr with exit status 2;
a scenario that did not behave as declared exits 1; Ctrl-C exits 130 after
printing what was traced so far.

The annotations here are objects, not strings (no ``from __future__ import
annotations``): typer reads every command's signature at every start, and
string annotations would be compiled and evaluated anew each time.
"""

import os
import sys
from types import FrameType
from typing import Optional

import typer

from ..version import __version__

app = typer.Typer(
    name="tensortrace",
    help=(
        "See what PyTorch does to your tensors: run a scenario step by step "
        "and show storage, versions and autograd."
    ),
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class _Command(typer.core.TyperCommand):
    """A command whose help names each argument by its metavar alone (no ``<list[str]>``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, typer.core.TyperArgument):
                param.display_type_rich = lambda ctx: None


SCRIPT_ARGS = "tensortrace.script_args"


class _ScriptCommand(_Command):
    """``run``: what follows ``--`` is the Python file's own command line (``sys.argv[1:]``),
    kept apart before the command's own arguments are parsed."""

    def parse_args(self, ctx, args):
        if "--" in args:
            at = args.index("--")
            ctx.meta[SCRIPT_ARGS] = tuple(args[at + 1 :])
            args = args[:at]
        return super().parse_args(ctx, args)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


def version_text() -> str:
    import platform
    from importlib import metadata  # here: importing it costs every command about 20 ms

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"tensortrace {__version__}, torch {torch_version}, Python {platform.python_version()}"


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version_callback,
        is_eager=True,
        help="Print the versions of tensortrace, torch and Python.",
    ),
) -> None:
    """See what PyTorch does to your tensors."""


from .common import EXIT_INTERRUPTED, EXIT_OK  # noqa: E402
from .tracing import check, run  # noqa: E402
from .reading import convert, explore, list_cmd, new, render_cmd, schema, show  # noqa: E402
from .doctor import CONTEXT, doctor  # noqa: E402 (imports neither torch nor rich)

app.command(cls=_ScriptCommand)(run)
app.command(cls=_Command)(check)
app.command("render", cls=_Command)(render_cmd)
app.command(cls=_Command)(explore)
app.command(cls=_Command)(schema)
app.command("list", cls=_Command)(list_cmd)
app.command(cls=_Command)(show)
app.command(cls=_Command)(new)
app.command(cls=_Command)(convert)
app.command("doctor", cls=_Command, context_settings=CONTEXT)(doctor)


def _ending(signum: int, code: int, words: str) -> None:
    """End now, from a signal handler: the children's trees killed, no half-written file left.

    Nothing is unwound: an exception raised here could land inside an import or
    a call of torch's C++ code, which ends the process with a traceback of its own.
    """
    import signal

    from ..output import discard_unfinished
    from ..run.reaping import kill_all

    for other in _HANDLED:
        signal.signal(other, signal.SIG_IGN)  # handled once: later signals change nothing
    kill_all()
    discard_unfinished()
    try:
        os.write(2, f"tensortrace: {words}\n".encode())
    except OSError:
        pass
    os._exit(code)


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM/SIGHUP: the run stops, the child's tree is killed, exit status 128 + N."""
    _ending(signum, 128 + signum, "terminated")


def _interrupted(signum: int, frame: Optional[FrameType]) -> None:
    """Ctrl-C: the first unwinds (what was traced so far is shown); a second ends at once.

    Inside an import (torch's takes seconds) it ends at once too: unwinding
    from there would pass through torch's C++ code.
    """
    import signal

    if _interrupted_once or _importing(frame):
        _ending(signum, EXIT_INTERRUPTED, "interrupted")
    _note_interrupted()
    signal.signal(signum, _interrupted)
    raise KeyboardInterrupt


_interrupted_once = False


def _note_interrupted() -> None:
    global _interrupted_once
    _interrupted_once = True


def _importing(frame: Optional[FrameType]) -> bool:
    for _ in range(500):
        if frame is None:
            return False
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


_HANDLED: list = []  # the signals main() handles


def main(own_process: bool = False) -> None:
    """Parse the command line and run the command.

    ``tensortrace.__main__.main`` imports and calls this, with ``own_process``:
    the process is the command's alone, so it adopts what the child leaves
    behind (a subreaper) and kills it; a caller that runs the command inside
    a process of its own (a test) keeps its other children to itself.
    """
    import signal

    global _interrupted_once
    _interrupted_once = False
    from ..output import discard_unfinished  # noqa: F401 - ready before any signal comes
    from ..run import reaping

    if own_process:
        reaping.become_subreaper()  # what the child starts and leaves is this command's to kill
    handlers = {"SIGTERM": _terminated, "SIGHUP": _terminated, "SIGINT": _interrupted}
    _HANDLED[:] = []
    for name, handler in handlers.items():
        number = getattr(signal, name, None)
        if number is None:
            continue
        current = signal.getsignal(number)
        if current == signal.SIG_DFL or (
            name == "SIGINT" and current is signal.default_int_handler
        ):
            signal.signal(number, handler)
            _HANDLED.append(number)
    try:
        app()
    except BrokenPipeError:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        sys.exit(EXIT_OK)
    except KeyboardInterrupt:
        sys.stderr.write("tensortrace: interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
