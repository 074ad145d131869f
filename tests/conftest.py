"""Shared helpers: write a scenario, trace it, look facts up by step and name,
run the command line (in this process, or as a real process where the
process boundary is what a test is about), and run example scripts as plain
Python would, several in one new Python."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import pytest

import tensortrace
from tensortrace.trace import Step, TensorState, Trace

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def has_sandbox() -> bool:
    try:
        import tensortrace.sandbox  # noqa: F401
    except ImportError:
        return False
    return True


def write_scenario(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def trace_text(
    tmp_path: Path, text: str, *, safe: Optional[bool] = None, variant: Optional[str] = None
) -> Trace:
    """Trace scenario text in this process (safe mode when available unless told)."""
    path = write_scenario(tmp_path, text)
    scenario = tensortrace.load_scenario(path)
    if safe is None:
        safe = has_sandbox()
    return tensortrace.trace(scenario, variant, safe=safe)


def state(step: Step, name: str) -> TensorState:
    for t in step.tensors:
        if t.name == name:
            return t
    raise KeyError(f"{name!r} not recorded at step {step.index}: {[t.name for t in step.tensors]}")


def comparable(result: Trace) -> dict:
    """The trace as JSON-ready data, less what legitimately differs between two runs: addresses."""
    from tensortrace.trace.document import trace_to_dict

    body = trace_to_dict(result, references=False)  # every step's records, in full
    body.pop("storages")
    for step in ([body["setup"]] if body["setup"] else []) + body["steps"]:
        for t in step["tensors"]:
            t.pop("storage_ptr"), t.pop("data_ptr")
    return body


def resolved(document: dict) -> dict:
    """A trace document (``--format json``, as data) with every step's tensors in full: the
    references of format version 4 (``[name, index]``) replaced by the records they name."""
    steps = ([document["setup"]] if document.get("setup") else []) + document["steps"]
    full: dict = {}
    for step in steps:
        step["tensors"] = [full[t[1]][t[0]] if isinstance(t, list) else t for t in step["tensors"]]
        full[step["index"]] = {t["name"]: t for t in step["tensors"]}
    return document


def step_of(trace: Trace, index: int) -> Step:
    return trace.steps[index - 1]


def fenced(path: Path, language: str) -> List[Tuple[int, str]]:
    """(line of the opening fence, text) of every ```language block of ``path``."""
    found, current, start = [], None, 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if current is None:
            if line.strip() == f"```{language}":
                current, start = [], number
        elif line.strip() == "```":
            found.append((start, "\n".join(current) + "\n"))
            current = None
        else:
            current.append(line)
    assert current is None, f"{path.name}: the ```{language} block at line {start} is not closed"
    return found


@pytest.fixture
def trace_yaml(tmp_path):
    def run(text: str, **kwargs) -> Trace:
        return trace_text(tmp_path, text, **kwargs)

    return run


# --- the command line -----------------------------------------------------------------


@dataclass
class Result:
    """What a run of the command left: exit status and the two streams.

    The field names are those of ``subprocess.CompletedProcess``, so a test reads
    the same whether the command ran in this process or in its own.
    """

    args: Sequence[str]
    returncode: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = b""
    exception: Optional[BaseException] = None


_HANDLED_BY_MAIN = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name)
)


def cli(
    *args: str,
    input: Union[str, bytes, None] = None,
    env: Optional[Mapping[str, Optional[str]]] = None,
    cwd: Union[str, Path, None] = None,
) -> Result:
    """Run ``tensortrace ARGS`` in this process, through the same ``main()`` that
    the console script and ``python -m tensortrace`` call.

    Only what a new process would have differently is set up: ``sys.argv``,
    stdin, stdout and stderr (in-memory streams that are not terminals, as
    under a pipe), the working directory, and ``env``, overrides of this
    process's environment (``None`` removes a variable). ``main()`` itself
    installs its signal handlers (put back afterwards) and maps errors to the
    exit status, exactly as for a user. Scenarios still run in a forked
    child, so what is saved is the start-up of a Python that imports torch.

    An exception that escapes ``main()`` becomes exit 1 with its traceback on
    stderr, as the interpreter would print it, so that a test that looks for
    "Traceback" sees it; it is also kept in ``exception``.
    """
    from tensortrace.cli.main import main

    argv = ["tensortrace", *map(str, args)]
    data = input.encode("utf-8") if isinstance(input, str) else (input or b"")
    stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    saved_env = {name: os.environ.get(name) for name in (env or {})}
    saved_handlers = {signum: signal.getsignal(signum) for signum in _HANDLED_BY_MAIN}
    code, exception = 0, None
    try:
        _set_environment(env or {})
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = argv
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
        try:
            main()
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:  # sys.exit("message"): the interpreter prints it and exits 1
                print(exc.code, file=sys.stderr)
                code = 1
        except Exception as exc:  # noqa: BLE001 - what a user would see as a crash
            exception = exc
            traceback.print_exc(file=sys.stderr)
            code = 1
        stdout.flush()
        stderr.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        _set_environment(saved_env)
        for signum, handler in saved_handlers.items():
            signal.signal(signum, handler)
    out, err = stdout.buffer.getvalue(), stderr.buffer.getvalue()
    return Result(
        argv[1:],
        code,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        out,
        exception,
    )


def _set_environment(values: Mapping[str, Optional[str]]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def cli_process(
    *args: str,
    input: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Union[str, Path, None] = None,
    timeout: float = 300,
) -> Result:
    """Run ``python -m tensortrace ARGS`` as a process of its own: for what only
    a real process shows (start-up, exit status as the shell sees it, signals,
    limits). ``env``, if given, is the whole environment."""
    done = subprocess.run(
        [sys.executable, "-m", "tensortrace", *map(str, args)],
        capture_output=True,
        input=None if input is None else input.encode(),
        cwd=cwd,
        env=env,
        timeout=timeout,
    )
    return Result(
        list(done.args[3:]),
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
        done.stdout,
    )


# Runs each script given as ``python SCRIPT`` would, one after the other in one new Python:
# fresh globals, its own argv, sys.path[0] its folder, its printed text, and on an error the
# traceback Python prints (from the script's own frames on) and exit status 1.
_SCRIPTS_RUNNER = r"""
import contextlib, io, json, os, runpy, sys, traceback
done = {}
for path in sys.argv[1:]:
    out, err, status = io.StringIO(), io.StringIO(), 0
    sys.argv, sys.path[0] = [path], os.path.dirname(path)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as stop:
            if isinstance(stop.code, int) or stop.code is None:
                status = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                status = 1
        except BaseException as exc:
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename != path:
                tb = tb.tb_next
            traceback.print_exception(type(exc), exc, tb)
            status = 1
    done[path] = [status, out.getvalue(), err.getvalue()]
sys.__stdout__.write(json.dumps(done))
"""


def scripts_in_one_python(
    scripts: Sequence[Path],
    *,
    cwd: Union[str, Path, None] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 300,
) -> Dict[Path, Result]:
    """Run each script (absolute paths) as ``python SCRIPT`` would, all in one new Python.

    For examples whose subject is what a script prints and raises, not its process: the
    start-up of a Python that imports torch (2.5 s of CPU) is paid once, not once a script.
    ``env``, if given, is the whole environment.
    """
    paths = [str(Path(s)) for s in scripts]
    assert all(Path(p).is_absolute() for p in paths), paths
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPTS_RUNNER, *paths],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)
    return {Path(p): Result([p], *runs[p]) for p in paths}


# --- the fast tier: python -m pytest -m "not slow" ----------------------------------------
# Modules whose tests each start processes, build wheels, drive a browser or a TUI, or run
# hypothesis at length; and single tests of a second or more in otherwise quick modules.
# The whole suite (what CI runs) still runs them all.
SLOW_MODULES = {
    "run/test_limits.py",
    "sandbox/test_redteam_cli.py",
    "record/test_graph_release.py",
    "docs/test_readme.py",
    "docs/test_python_docs.py",
    "scenario/test_pyfile.py",
    "cli/test_properties.py",
    "record/test_unwritten.py",
    "render/test_prose.py",
    "render/test_plaincode.py",
    "integrations/test_tui.py",
    "render/test_html_browser.py",
    "integrations/test_doctor.py",
    "render/test_hostile.py",
    "trace/test_trust.py",
    "run/test_confine.py",
    "sandbox/test_sandbox_escapes.py",
    "cli/test_paths.py",
    "scenario/test_bad_inputs.py",
    "record/test_fidelity.py",
    "integrations/test_jupyter.py",
    "docs/test_torch_matrix.py",
    "integrations/test_doctor_nan.py",
    "integrations/test_doctor_plain.py",
    "integrations/test_doctor_verify.py",
    "run/test_lifetime.py",
    "run/test_wall_holds.py",
    "render/test_render_cost.py",
    "cli/test_scripts.py",
}
SLOW_TESTS = (
    "run/test_runner.py::test_a_compiling_scenario",
    "run/test_runner.py::test_an_optimizer_scenario",
    "run/test_runner.py::test_a_process_that_ran_parallel_work",
    "run/test_runner.py::test_a_scenario_asking_for_threads_after_parallel_work",
    "run/test_runner.py::test_a_scenario_without_optimizers",
    "run/test_runner.py::test_recording_a_step_is_never_charged",
    "scenario/test_library.py::test_wheel_installs",
    "scenario/test_library.py::test_the_whole_library_passes_check",
    "record/test_semantics.py::test_a_fifty_thousand_op_chain",
    "record/test_explain.py::test_real_error_is_explained",
    "record/test_explain.py::test_explain_never_raises",
    "trace/test_bounds.py::test_a_variant_bomb",
    "cli/test_cli.py::test_run_exits_1",
    "cli/test_cli.py::test_console_script_and_module_agree",
    "cli/test_cli.py::test_schema_command",
    "record/test_saved.py::test_predictions_agree_with_backward",
    "record/test_explain.py::test_every_data_entry_is_reached",  # provokes every error
    "render/test_console_lines.py::test_any_text_draws_as_rich_draws_it",
    "render/test_console_lines.py::test_pages_are_the_same_through_rich[svg",
    "render/test_console_table.py::test_pages_are_the_same_through_the_table[svg",
    "cli/test_cli.py::test_output_into_a_closed_pipe",
    "record/test_ops.py::test_the_aten_operations_of_the_call_that_crosses_the_limit",
    "integrations/test_snoop.py::test_a_training_step_records_each_parameters_version",
)


# --- what a torch release may change: tools/torch-matrix runs -m torch_matrix under each ----------
# predictions against the real backward, explanations of PyTorch's messages, observation of
# what autograd saves and shows, and the bundled scenarios' own checks (their contract)
TORCH_MODULES = {
    "record/test_predictions_real.py",
    "record/test_saved.py",
    "record/test_explain.py",
    "record/test_observe.py",
    "record/test_differential.py",
    "record/test_semantics.py",
    "record/test_flow.py",
    "record/test_undisturbed.py",
    "record/test_graph_release.py",
}
TORCH_TESTS = ("scenario/test_library.py::test_the_whole_library_passes_check",)


def tier_name(path: Path) -> str:
    """A test file as SLOW_MODULES names it: its path under tests/, with slashes."""
    path = Path(path).resolve()
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else path.name


def pytest_collection_modifyitems(config, items):
    for item in items:
        file = tier_name(Path(str(item.fspath)))
        if file in SLOW_MODULES or any(f"{file}::{item.name}".startswith(t) for t in SLOW_TESTS):
            item.add_marker(pytest.mark.slow)
        if file in TORCH_MODULES or any(f"{file}::{item.name}".startswith(t) for t in TORCH_TESTS):
            item.add_marker(pytest.mark.torch_matrix)
