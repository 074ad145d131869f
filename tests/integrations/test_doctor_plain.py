"""Under ``tensortrace doctor`` a script runs as plain Python runs it: torch.func transforms work
(doctor steps aside and says where), PyTorch's messages are its own word for word, the traceback
has the frames Python prints, and a file that is not Python gets one sentence."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import REPO, cli, cli_process
from tensortrace.trace.doctor import report_from_json


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def write(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def doctor(*args: str) -> tuple:
    return cli("doctor", "--no-check", *args, cwd=REPO, env={"NO_COLOR": "1", "FORCE_COLOR": None})


def plain(script: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


TRANSFORMS = """\
import torch

torch.manual_seed(0); x = torch.randn(3, requires_grad=True)
f = lambda t: (t.sin() * t).sum()
g = torch.func.grad(f)(x)
value, vjp_fn = torch.func.vjp(lambda t: t.sin() * t, x)
j = torch.func.jacrev(lambda t: t.sin() * t)(x)
h = torch.func.hessian(f)(x)
loss = (torch.sigmoid(x) * g).sum()  # doctor watches again after the transforms
loss.backward()
print(round(float(g.sum()), 4), tuple(j.shape), tuple(h.shape), round(float(x.grad.sum()), 4))
"""


NON_LEAF_GRAD = """\
import torch
x = torch.ones(2, requires_grad=True)
y = x * 2
a = y.grad
b = y.grad
y.sum().backward()
with torch.no_grad():
    c = y.grad
p = torch.nn.functional.softmax(x.view(1, 2))
q = torch.nn.functional.softmax(x.view(1, 2))
"""


def _warned_at(stderr: str) -> list:
    return [line.split(": ")[0] for line in stderr.splitlines() if "UserWarning: " in line]


def test_a_warning_from_cpp_is_shown_at_the_line_that_made_it_as_without_doctor(tmp_path):
    """PyTorch's C++ warning about a non-leaf's .grad, read on three lines, and its Python
    warning about softmax's implicit dim (``stacklevel=3``), on two: under doctor as under
    plain Python, once per line and at that line, never at doctor's watch or in torch's
    ``overrides.py``."""
    script = write(tmp_path, NON_LEAF_GRAD)
    expected = _warned_at(plain(script).stderr)
    assert [place.rsplit(":", 1)[1] for place in expected] == ["4", "5", "8", "9", "10"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NO_COLOR"] = "1"
    got = cli_process("doctor", "--no-check", str(script), cwd=REPO, env=env)
    assert got.returncode == 0, got.stderr
    assert "watch.py" not in got.stderr and "overrides.py" not in got.stderr
    assert _warned_at(got.stderr) == expected


def test_torch_func_transforms_run_untouched_and_the_report_says_where(tmp_path):
    script = write(tmp_path, TRANSFORMS)
    out = tmp_path / "r.json"
    watched = doctor("-o", str(out), str(script))
    bare = plain(script)
    assert bare.returncode == 0, bare.stderr
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout == bare.stdout
    report = report_from_json(out.read_text(encoding="utf-8"))
    assert report.failure is None and report.watched.backwards == 1
    assert [(a.what, a.place.line) for a in report.aside] == [
        ("torch.func.grad", 5),
        ("torch.func.vjp", 6),
        ("torch.func.jacrev", 7),
        ("torch.func.hessian", 8),
    ]
    text = doctor(str(script)).stderr
    assert "stepped aside for torch.func.grad at" in text and "was not watched" in text


def test_leaky_relu_in_place_is_named_as_pytorch_names_it(tmp_path):
    script = write(
        tmp_path,
        """\
        import torch
        from torch import nn

        w = torch.randn(8, 8, requires_grad=True)
        h = torch.randn(4, 8) @ w
        skip = h * h
        h = nn.functional.leaky_relu(h, 0.2, inplace=True)
        (skip + h).sum().backward()
        """,
    )
    bare = plain(script)
    watched = doctor(str(script))
    message = bare.stderr.strip().splitlines()[-1]
    assert "which is output 0 of LeakyRelu1," in message
    assert watched.stderr.strip().splitlines()[-1] == message


SHAPES = """\
import torch


def head(h):
    return h @ torch.randn(3, 2)


w = torch.randn(4, 5, requires_grad=True)
h = torch.sigmoid(torch.randn(2, 4) @ w)  # saved: doctor's write watch is on
out = head(h)
"""


def test_the_traceback_has_the_frames_python_prints(tmp_path):
    script = write(tmp_path, SHAPES)
    bare = plain(script)
    watched = doctor(str(script))
    assert bare.returncode == watched.returncode == 1
    shown = watched.stderr[watched.stderr.index("Traceback (most recent call last):") :]
    assert shown == bare.stderr
    assert "torch/_ops.py" not in shown and "tensortrace" not in shown


def test_a_failed_backward_has_the_frames_python_prints(tmp_path):
    """Tensor.backward hands itself to doctor's function mode: neither that hand-over
    (torch/overrides.py) nor the first entry into backward that made it is shown."""
    script = write(
        tmp_path,
        """\
        import torch

        w = torch.randn(3, requires_grad=True)
        y = torch.sigmoid(w)
        y.mul_(2)
        y.sum().backward()
        """,
    )
    bare = plain(script)
    watched = doctor(str(script))
    assert bare.returncode == watched.returncode == 1
    shown = watched.stderr[watched.stderr.index("Traceback (most recent call last):") :]
    assert shown == bare.stderr
    assert "overrides.py" not in shown and "tensortrace" not in shown


@pytest.mark.parametrize(
    "data, said",
    [
        (b"\x7fELF\x02\x01\x00\x00binary", "this is a binary file, not a Python script"),
        (b"x = '\xff\xfe'\n", "this is not Python text (not valid in its encoding)"),
    ],
)
def test_a_file_that_is_not_python_is_one_sentence_and_exit_2(tmp_path, data, said):
    path = tmp_path / "model.py"
    path.write_bytes(data)
    result = doctor(str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"tensortrace: {path}: {said}")


def test_a_notebook_is_pointed_to_its_export(tmp_path):
    path = tmp_path / "train.ipynb"
    path.write_text('{"cells": [], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}', "utf-8")
    result = doctor(str(path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "jupyter nbconvert --to script" in result.stderr


def test_check_budget_must_be_seconds(tmp_path):
    script = write(tmp_path, "print(1)\n")
    result = cli("doctor", "--check-budget", "0", str(script), cwd=REPO)
    assert result.returncode == 2 and "--check-budget 0.0" in result.stderr
    assert result.stdout == ""  # refused before the script ran


def test_the_schema_describes_fixes_and_their_checks():
    import json

    result = cli("schema", "--doctor")
    assert result.returncode == 0, result.stderr
    defs = json.loads(result.stdout)["$defs"]
    assert {"Fix", "Edit", "Check", "Starved", "Aside"} <= set(defs)
    assert set(defs["Check"]["properties"]["verdict"]["enum"]) == {"passed", "failed", "unchecked"}


def _compiled_write(watching):
    """A torch.compile'd function writes into a saved tensor; the backward fails."""

    @torch.compile
    def double(y):
        y.mul_(2)
        return y

    w = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as raised:
        with watching:
            y = torch.sigmoid(w)
            with torch.no_grad():
                double(y)
            y.sum().backward()
    return raised.value


def test_a_compiled_function_runs_under_the_write_watch_alone():
    """Dynamo traces doctor's function mode along with the code: the graph it compiles holds
    the code's calls only, and a write made inside it still fails backward as without doctor
    (found by the version check, without the write's line)."""
    import contextlib

    from tensortrace.doctor.recorder import Recorder

    rec = Recorder()

    @contextlib.contextmanager
    def alone():
        rec.start()  # no NaN watch: no dispatch mode, so dynamo compiles
        try:
            yield
        finally:
            rec.stop()

    failure = rec.failure_for(_compiled_write(alone()))
    assert failure.kind == "modified-in-place" and failure.writes == ()
    assert "a write the watch did not see" in failure.headline


def test_a_compiled_function_runs_eagerly_under_doctor_nan_and_its_write_is_named():
    """Under doctor --nan the NaN watch's dispatch mode is on while a saved tensor is alive,
    and dynamo compiles no frame then: the function runs as plain Python, its write is seen.
    By default no dispatch mode is on, as in the test above."""
    import tensortrace

    watching = tensortrace.doctor(os.devnull, nan=True)
    _compiled_write(watching)
    failure = watching.report.failure
    assert failure.kind == "modified-in-place"
    assert [(w.op, w.place.code, w.place.function) for w in failure.writes] == [
        (".mul_()", "y.mul_(2)", "double")
    ]
