"""The options and arguments the commands share, defined once so that help and defaults agree."""

from __future__ import annotations

import os

import typer

from ..errors import UsageError

TARGETS = typer.Argument(
    ...,
    metavar="SCENARIO",
    show_default=False,
    autocompletion=lambda incomplete: _complete_scenario(incomplete),
    help=(
        "Scenario files (.yaml, .py, .ipynb), or names of bundled scenarios "
        "(see 'tensortrace list')."
    ),
)
CHECK_TARGETS = typer.Argument(
    ...,
    metavar="SCENARIO",
    show_default=False,
    help=(
        "Scenario files (.yaml, .py, .ipynb), folders (every .yaml file in them, sorted), "
        "or names of bundled scenarios."
    ),
)
FORMATS = ("console", "json", "jsonl", "markdown", "html", "svg", "dot", "mermaid")


def _complete_format(incomplete: str) -> list:
    return [f for f in FORMATS if f.startswith(incomplete)]


def _complete_scenario(incomplete: str) -> list:
    """Bundled scenario names (files complete as files in the shell)."""
    from ..scenario.library import bundled_names

    return [n for n in bundled_names() if n.startswith(incomplete)]


COLOR = typer.Option(
    "auto",
    "--color",
    metavar="WHEN",
    help=(
        "Colour the console output: auto (on a terminal, unless NO_COLOR is set; "
        "FORCE_COLOR forces it, for less -R), always or never."
    ),
    autocompletion=lambda incomplete: [
        w for w in ("auto", "always", "never") if w.startswith(incomplete)
    ],
)
FORMAT = typer.Option(
    None,
    "--format",
    "-f",
    metavar="FORMAT",
    show_default=False,
    autocompletion=_complete_format,
    help=(
        "console, json, jsonl, markdown, html, svg, dot or mermaid. "
        "Default: what the -o file's suffix names "
        "(.json, .jsonl, .md, .html, .svg, .dot, .mmd), else console."
    ),
)
OUTPUT = typer.Option(
    None,
    "--output",
    "-o",
    metavar="FILE",
    help="Write to this file (atomically) instead of stdout.",
)
DEVICE = typer.Option(
    None,
    "--device",
    metavar="DEVICE",
    help=(
        "Device for scenarios that do not name one: cpu, cuda, cuda:N, mps, auto."
        " Safe mode runs on the CPU only: cuda needs --trust."
    ),
)
TRUST = typer.Option(
    False, "--trust", help="Run steps as plain Python, without safe mode. Only for files you trust."
)
TIMEOUT = typer.Option(
    5.0, "--timeout", metavar="SECONDS", help="Wall-clock limit per step, in seconds (0: none)."
)
MEMORY = typer.Option(
    4096,
    "--memory-limit",
    metavar="MIB",
    help="Memory a scenario may use in safe mode, in MiB (0: no cap).",
)
SCENARIO_TIMEOUT = typer.Option(
    300.0,
    "--scenario-timeout",
    metavar="SECONDS",
    help="Wall-clock limit per scenario (each variant), in seconds (0: none).",
)
REQUIRE = typer.Option(
    False,
    "--require-confinement",
    envvar="TENSORTRACE_REQUIRE_CONFINEMENT",
    help=(
        "Refuse to run in safe mode unless the kernel can confine the child "
        "(Landlock, seccomp). Also TENSORTRACE_REQUIRE_CONFINEMENT=1."
    ),
)
STEP = typer.Option(
    None,
    "--step",
    metavar="N",
    help="Show only this step (0: the setup, when the scenario has one).",
)
STEPS = typer.Option(
    None, "--steps", metavar="RANGE", help="Show only these steps, e.g. 2-5 or 1,3 (0: the setup)."
)
CHANGES = typer.Option(
    False, "--changes-only", help="Show only the rows that changed in each step."
)
SHOW = typer.Option(
    None,
    "--show",
    metavar="NAMES",
    help=(
        "Names to show, comma-separated (e.g. a,b,lin.weight); a module or list stands for "
        "what it holds (lin: lin.weight, lin.bias), as in the scenario's show."
    ),
)
ALL_ROWS = typer.Option(
    False,
    "--all-rows",
    help="Console: draw every tensor's row in each step. Past 12 tensors, a step draws the rows "
    "that changed and names the others in one line.",
)
NO_VALUES = typer.Option(False, "--no-values", help="Leave out the values and grad columns.")
VALUES = typer.Option(
    "summary",
    "--values",
    metavar="HOW",
    help=(
        "summary (the default: past 6 elements, a tensor is one line of shape, range, mean, "
        "standard deviation and first values; a model's parameters one line each) or full "
        "(every recorded element)."
    ),
)
ITERATIONS = typer.Option(
    "first",
    "--iterations",
    metavar="WHICH",
    help=(
        "A loop's passes: first (the default: the first in full, and any that differs in kind; "
        "the others summed up in one line) or all."
    ),
)
WIDTH = typer.Option(
    None,
    "--width",
    metavar="COLUMNS",
    help="Width of console output in columns (at least 40).",
)
OPS = typer.Option(
    "calls",
    "--ops",
    metavar="LEVEL",
    help=(
        "What each step ran: none (not recorded), "
        "calls (what the code did: the calls it wrote, each call made inside a function it "
        "called said as that call, e.g. opt.step(); metadata reads and repeats folded; shown "
        "by default), all (every recorded call) or aten (and the ATen operations under them). "
        "JSON holds both levels, and each backward call's gradient flow, unless none."
    ),
)
GRAPH = typer.Option(
    None,
    "--graph",
    metavar="NAMES",
    help=(
        "Draw the autograd graph of these names (comma-separated) "
        "as it stands after the last step, as a 'graph:' key on the last step would."
    ),
)


def wants_color(color: str, is_terminal: bool) -> bool:
    """Whether to colour: ``--color always``/``never`` decide.

    With auto, NO_COLOR turns colour off, FORCE_COLOR on (for ``less -R``), else colour
    goes to a terminal only.
    """
    if color not in ("auto", "always", "never"):
        raise UsageError(f"--color {color!r}: use auto, always or never")
    if color != "auto":
        return color == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    return is_terminal
