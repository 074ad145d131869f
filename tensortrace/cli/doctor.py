"""The ``tensortrace doctor`` command: its options, registered on the app by ``cli.py``.

Everything after SCRIPT belongs to the script (``allow_interspersed_args``
off, unknown options kept), so ``tensortrace doctor train.py -o x`` gives the
script its own ``-o``. Importing this imports neither torch nor rich.
"""

from typing import List, Optional

import typer

from .options import WIDTH

CONTEXT = {
    "allow_extra_args": True,
    "ignore_unknown_options": True,
    "allow_interspersed_args": False,
}

_SCRIPT = typer.Argument(
    None,
    metavar="SCRIPT [ARGS]...",
    show_default=False,
    help="The Python script to run, then its own arguments (all that follows SCRIPT).",
)
_MODULE = typer.Option(
    None,
    "-m",
    "--module",
    metavar="MODULE",
    help="Run a module as python -m does; the arguments after it are its own.",
)
_FORMAT = typer.Option(
    None,
    "--format",
    "-f",
    metavar="FORMAT",
    show_default=False,
    help="console or json. Default: json for an -o file ending .json, else console.",
)
_NO_CHECK = typer.Option(
    False,
    "--no-check",
    help="Do not run the fixes: by default each fix that is code runs on a copy of the script "
    "(the script runs again, in a child process, once per fix).",
)
_CHECK_BUDGET = typer.Option(
    None,
    "--check-budget",
    metavar="SECONDS",
    show_default=False,
    help="Wall-clock seconds the fixes' runs may take in all. Default: 60.",
)
_OUTPUT = typer.Option(
    None,
    "--output",
    "-o",
    metavar="FILE",
    help="Write the report to this file (atomically) instead of stderr.",
)
_NAN = typer.Option(
    False,
    "--nan",
    help="Find the operation that made the first NaN or Inf: check the outputs and gradients "
    "of log, division, sqrt, exp, pow... (by default only the losses are checked; slower: see "
    "docs/doctor.md).",
)
_NAN_ALL = typer.Option(
    False,
    "--nan-all",
    help="As --nan, but check every operation's output and every gradient (slower still).",
)


def doctor(
    ctx: typer.Context,
    script: Optional[str] = _SCRIPT,
    module: Optional[str] = _MODULE,
    fmt: Optional[str] = _FORMAT,
    output: Optional[str] = _OUTPUT,
    width: Optional[int] = WIDTH,
    no_check: bool = _NO_CHECK,
    check_budget: Optional[float] = _CHECK_BUDGET,
    nan: bool = _NAN,
    nan_all: bool = _NAN_ALL,
) -> None:
    """Run your script as python would (your own code, no safe mode); name the line that broke
    backward, or where the first NaN or Inf showed (--nan: the operation that made it)."""
    from .common import guarded

    def body() -> int:
        from ..errors import UsageError
        from ..doctor.session import run_target

        args: List[str] = list(ctx.args)
        watch = "all" if nan_all else nan
        checks = {"check": not no_check, "check_budget": check_budget, "nan": watch}
        if module is not None:
            args = ([script] if script is not None else []) + args
            return run_target(
                module, args, module=True, output=output, fmt=fmt, width=width, **checks
            )
        if script is None:
            raise UsageError(
                "give the script to run (tensortrace doctor train.py ARGS...), or -m MODULE"
            )
        return run_target(script, args, output=output, fmt=fmt, width=width, **checks)

    guarded(body)
