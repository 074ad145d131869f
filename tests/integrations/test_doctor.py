"""``tensortrace doctor``: each example script's report names the real lines, the script's own
traceback and exit status come through, and watching changes nothing the script computes."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import List, Tuple

import pytest
import torch

from conftest import REPO, Result, cli
from tensortrace.trace.doctor import Edit, Report, report_from_json


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    """The in-process tests train on one thread: OpenMP's pool, once started in this worker,
    does not survive the fork of a later test's child, whose own parallel work would hang."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


EXAMPLES = REPO / "examples" / "doctor"


def doctor_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python -m tensortrace doctor ARGS`` as a process of its own: for the exit status as the
    shell sees it, and for the order of the report and the traceback on a real stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_COLOR", "COLUMNS")}
    env["NO_COLOR"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "tensortrace", "doctor", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def doctor_here(*args: str, cwd: Path = REPO) -> Result:
    """``tensortrace doctor ARGS`` in this process, through the command's own ``main()``. Doctor
    runs the script inside the process that runs the command (no child), so the report, the
    script's output, its traceback and its status are the same here; a new Python for each
    example would only add the start-up of one that imports torch (2.5 s of CPU)."""
    return cli(
        "doctor", *args, cwd=cwd, env={"NO_COLOR": "1", "FORCE_COLOR": None, "COLUMNS": None}
    )


@pytest.fixture(scope="module")
def failing_on_a_real_stderr() -> subprocess.CompletedProcess:
    """The README's failing example, run once as its own process and read by the tests of the
    order on stderr and of the README's text."""
    return doctor_cli("examples/doctor/inplace_activation.py")


def example(name: str, tmp_path: Path) -> Tuple[Result, Report]:
    out = tmp_path / "report.json"
    result = doctor_here("-o", str(out), f"examples/doctor/{name}")
    return result, report_from_json(out.read_text(encoding="utf-8"))


def at(place) -> Tuple[str, int]:
    return (place.path, place.line)


def lines_of(writes) -> List[int]:
    return [w.place.line for w in writes]


# --- the examples, one by one ---------------------------------------------------------------


def test_inplace_activation_inside_a_module(tmp_path):
    result, report = example("inplace_activation.py", tmp_path)
    assert result.returncode == 1
    f = report.failure
    assert f.kind == "modified-in-place"
    path = "examples/doctor/inplace_activation.py"
    assert f.headline.startswith(f"{path}:16: h is changed in place (F.relu(inplace=True))")
    assert at(f.saved.place) == (path, 15) and f.saved.name == "h"
    assert f.saved.node == "SigmoidBackward0" and f.saved.shape == (8, 16)
    assert lines_of(f.writes) == [16] and f.writes[0].op == "F.relu(inplace=True)"
    assert at(f.backward) == (path, 27)
    (fix,) = f.fixes  # inplace=False where the module is built, checked by running it
    assert fix.edits == (
        Edit(
            path=path,
            line=11,
            end=11,
            text="        self.act = nn.ReLU(inplace=False)",
            was="        self.act = nn.ReLU(inplace=True)",
        ),
    )
    assert fix.check.verdict == "passed"
    assert report.exit_status == 1
    # the script's own traceback follows, as Python prints it
    assert result.stderr.splitlines()[-1].startswith("RuntimeError: one of the variables needed")
    assert f'File "{path}", line 27, in <module>' in result.stderr
    assert "runpy" not in result.stderr and "tensortrace/doctor" not in result.stderr


def test_helper_normalising_a_detached_alias(tmp_path):
    result, report = example("detached_alias.py", tmp_path)
    assert result.returncode == 1
    f = report.failure
    path = "examples/doctor/detached_alias.py"
    assert f.headline.startswith(f"{path}:7: t (memory shared with feats) is changed in place")
    assert f.saved.name == "feats" and at(f.saved.place) == (path, 14)
    assert lines_of(f.writes) == [7, 8]
    assert [w.alias for w in f.writes] == ["t", "t"]
    assert [w.version for w in f.writes] == [0, 1]
    (edit,) = f.fixes[0].edits
    assert (edit.line, edit.text) == (
        15,
        "stats = feats.detach().clone()  # meant for logging only",
    )
    assert f.fixes[0].check.verdict == "passed"


def test_data_write_on_a_saved_output_is_a_warning(tmp_path):
    result, report = example("data_write.py", tmp_path)
    assert result.returncode == 0 and report.failure is None
    (s,) = report.silent
    path = "examples/doctor/data_write.py"
    assert s.headline.startswith(f"{path}:9: .data of y is changed (.mul_())")
    assert s.saved.name == "y" and at(s.saved.place) == (path, 8)
    assert s.saved.node == "SigmoidBackward0"
    assert lines_of(s.writes) == [9] and s.writes[0].alias == ".data of y"
    assert s.writes[0].version is None  # .data has a version counter of its own
    assert at(s.backward) == (path, 11)
    assert s.leaves == ("w",)
    assert "grad norm" in result.stdout  # the script ran to its end


def test_numpy_write_to_a_saved_input_is_a_warning(tmp_path):
    result, report = example("numpy_write.py", tmp_path)
    assert result.returncode == 0 and report.failure is None
    (s,) = report.silent
    path = "examples/doctor/numpy_write.py"
    assert s.writes == ()  # invisible to PyTorch: found by the fingerprint
    assert s.saved.name == "x" and at(s.saved.place) == (path, 8) and s.saved.node == "MulBackward0"
    assert [at(c.place) for c in s.shares] == [(path, 9)]
    assert s.headline.startswith(f"{path}:9: x is shared with NumPy here")
    assert at(s.backward) == (path, 12) and s.leaves == ("w",)


def test_hidden_state_carried_across_iterations(tmp_path):
    result, report = example("rnn_hidden.py", tmp_path)
    assert result.returncode == 1
    f = report.failure
    path = "examples/doctor/rnn_hidden.py"
    assert f.kind == "freed-graph" and f.carrier == "h"
    assert at(f.carried_at) == (path, 12) and at(f.freed_by) == (path, 15)
    assert at(f.assigned_at) == (path, 12) and f.runs == (1, 2) and f.unit == "iteration"
    assert at(f.backward) == (path, 15) and f.backward_run == 2
    assert at(f.shared) == (path, 12) and f.shared_node == "TanhBackward0"
    assert f.headline.startswith(f"{path}:12: h carries iteration 1's graph into iteration 2;")
    (fix,) = f.fixes  # retain_graph=True is not offered: opt.step() changed U in between
    assert [(e.line, e.end, e.text) for e in fix.edits] == [(12, 11, "    h = h.detach()")]
    assert fix.check.verdict == "passed"
    assert [(w.alias, w.place.line) for w in f.blocked] == [("U", 16)]
    assert report.watched.backwards == 2


def test_detach_that_cuts_the_loss_from_the_parameters(tmp_path):
    result, report = example("detach_cut.py", tmp_path)
    assert result.returncode == 1
    f = report.failure
    path = "examples/doctor/detach_cut.py"
    assert f.kind == "no-grad"
    assert [(c.kind, *at(c.place)) for c in f.cuts] == [("detach()", path, 9)]
    assert f.headline.startswith(f"{path}:9: detach() cuts loss off the graph")
    assert at(f.backward) == (path, 11)


def test_console_report_comes_first_then_the_traceback(failing_on_a_real_stderr):
    result = failing_on_a_real_stderr
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "tensortrace doctor: backward failed: a tensor it needs was changed in place"
    assert lines[1].startswith("→ examples/doctor/inplace_activation.py:16: ")
    assert lines.index("Traceback (most recent call last):") > 5
    assert "no safe mode" in result.stderr


def test_the_scripts_traceback_spells_control_characters_as_the_report_does(tmp_path):
    script = tmp_path / "loud.py"
    script.write_text(
        "raise RuntimeError('boom \\x1b]52;c;aGk=\\x07 \\x1b[2J \\u202eevil')\n",
        encoding="utf-8",
    )
    result = doctor_here(str(script))
    assert result.returncode == 1
    assert "Traceback (most recent call last):" in result.stderr
    assert "RuntimeError: boom \\x1b]52;c;aGk=\\x07 \\x1b[2J \\u202eevil" in result.stderr
    assert not any(ch in result.stderr for ch in "\x1b\x07\u202e")


# --- running the script as python would --------------------------------------------------


ECHO = """\
import json, os, sys
print(json.dumps([sys.argv, sys.path[0], __name__, os.getcwd()]))
if len(sys.argv) > 1 and sys.argv[1] == "exit":
    sys.exit(int(sys.argv[2]))
"""


def test_script_gets_its_own_argv_path_and_main(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text(ECHO, encoding="utf-8")
    result = doctor_here(str(script), "-o", "x", "--epochs", "3")
    assert result.returncode == 0, result.stderr
    argv, path0, name, cwd = json.loads(result.stdout)
    assert argv == [str(script), "-o", "x", "--epochs", "3"]
    assert path0 == str(tmp_path) and name == "__main__" and cwd == str(REPO)
    assert result.stderr.startswith(
        "tensortrace doctor: nothing to report: watched 0 saved tensors"
    )


def test_exit_status_of_the_script_is_kept(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text(ECHO, encoding="utf-8")
    assert doctor_cli(str(script), "exit", "3").returncode == 3


def test_module_runs_with_dash_m(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg" / "train.py").write_text(ECHO, encoding="utf-8")
    result = doctor_cli("-m", "pkg.train", "exit", "4", cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    argv, path0, name, cwd = json.loads(result.stdout)
    assert argv == [str(tmp_path / "pkg" / "train.py"), "exit", "4"] and name == "__main__"


def test_missing_script_is_one_sentence(tmp_path):
    result = doctor_cli(str(tmp_path / "nope.py"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"tensortrace: {tmp_path / 'nope.py'}: no such file; give the Python script to run"
    )


def test_json_report_and_its_schema(tmp_path):
    result = doctor_here("--format", "json", "examples/doctor/data_write.py")
    assert result.returncode == 0
    report = report_from_json(result.stderr)
    assert report.silent[0].saved.name == "y"
    schema = cli("schema", "--doctor")
    assert schema.returncode == 0, schema.stderr
    assert "Report" in json.loads(schema.stdout)["$defs"]


# --- in process: nothing changes, nothing leaks ---------------------------------------------


def _inplace_errors():
    x = torch.randn(8, 4, requires_grad=True)

    def saved_output():
        y = torch.sigmoid(x)
        y.mul_(2)
        y.sum().backward()

    def saved_input():
        x2 = x.clone()
        m = x2 @ torch.randn(4, requires_grad=True)
        x2.add_(1)
        m.sum().backward()

    def saved_leaf():
        leaf = torch.randn(4, requires_grad=True)
        with torch.no_grad():
            pass
        m = x @ leaf
        with torch.no_grad():
            leaf.add_(1)
        m.sum().backward()

    def through_view():
        y = x.exp()
        z = y.exp()
        y[0].add_(1)
        z.sum().backward()

    return [saved_output, saved_input, saved_leaf, through_view]


@pytest.mark.parametrize("index", range(4))
def test_the_inplace_error_is_pytorchs_own_word_for_word(index):
    def message(watched: bool) -> str:
        import tensortrace

        case = _inplace_errors()[index]
        try:
            if watched:
                with tensortrace.doctor(os.devnull):
                    case()
            else:
                case()
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    plain = message(False)
    assert "modified by an inplace operation" in plain
    assert message(True) == plain


def test_grads_and_versions_are_the_same_under_doctor():
    import tensortrace

    def run():
        torch.manual_seed(0)
        w = torch.randn(4, 3, requires_grad=True)
        y = torch.sigmoid(torch.randn(8, 4) @ w)
        y.data.mul_(0.5)
        z = y * 2
        z.add_(1)
        z.sum().backward()
        return w.grad.clone(), y._version, z._version

    plain = run()
    with tensortrace.doctor(os.devnull) as watch:
        watched = run()
    assert torch.equal(plain[0], watched[0]) and plain[1:] == watched[1:]
    assert watch.report.silent and watch.report.watched.backwards == 1


def test_graphs_are_freed_as_without_doctor():
    import tensortrace

    with tensortrace.doctor(os.devnull):
        x = torch.randn(16, requires_grad=True)
        y = torch.sigmoid(x)  # saves its own output
        ref = weakref.ref(y)
        del y
        gc.collect()
        assert ref() is None


def test_saved_tensors_are_let_go_when_backward_frees_the_graph():
    import tensortrace

    w = torch.randn(64, 64, requires_grad=True)
    with tensortrace.doctor(os.devnull):
        h = torch.tanh(torch.randn(64, 64))  # saved by the product below, held by nothing else
        loss = (h @ w).sum()
        ref = weakref.ref(h)
        del h
        assert ref() is not None  # the graph keeps it for backward
        loss.backward()
        assert ref() is None  # and nothing of doctor's keeps it once backward freed the graph
        assert w.grad is not None


def test_a_large_tensor_changed_through_data_is_seen():
    import tensortrace

    with tensortrace.doctor(os.devnull) as watch:
        w = torch.randn(512, 512, requires_grad=True)
        y = torch.tanh(w)
        y.data.mul_(0.5)
        y.sum().backward()
    assert len(watch.report.silent) == 1


def test_a_write_into_the_array_a_tensor_was_made_from_is_seen():
    import numpy as np

    import tensortrace

    with tensortrace.doctor(os.devnull) as watch:
        array = np.ones((8, 4), dtype=np.float32)
        x = torch.from_numpy(array)
        w = torch.randn(4, requires_grad=True)
        y = x * w
        array *= 2
        y.sum().backward()
    (silent,) = watch.report.silent
    assert silent.saved.name == "x" and silent.writes == ()
    assert silent.shares[0].place.code == "x = torch.from_numpy(array)"


def test_unchanged_values_through_data_are_not_reported():
    import tensortrace

    with tensortrace.doctor(os.devnull) as watch:
        w = torch.randn(64, 64, requires_grad=True)
        y = torch.tanh(w)
        y.data.mul_(1.0)
        y.sum().backward()
    assert watch.report.silent == () and watch.report.watched.writes == 1


def test_nothing_to_report_is_one_line(tmp_path):
    import tensortrace

    out = tmp_path / "r.txt"
    with tensortrace.doctor(str(out)):
        w = torch.randn(3, requires_grad=True)
        (w * w).sum().backward()
    text = out.read_text(encoding="utf-8")
    assert text.count("\n") == 1
    assert text.startswith(
        "tensortrace doctor: nothing to report: watched 2 saved tensors, 0 writes"
    )
    assert "1 backward call " in text


# --- the README shows real output -------------------------------------------------------------


def readme_block(after: str, language: str) -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(after)
    body = text.index(f"```{language}\n", start) + len(f"```{language}\n")
    return text[body : text.index("```\n", body)]


def test_readme_shows_what_doctor_prints(failing_on_a_real_stderr):
    failing = failing_on_a_real_stderr
    assert failing.returncode == 1
    shown = readme_block("prints on stderr, before the script's own traceback", "text")
    assert failing.stderr.split("Traceback (most recent call last):")[0] == shown
    silent = doctor_here("examples/doctor/data_write.py")
    block = readme_block("$ tensortrace doctor examples/doctor/data_write.py", "text")
    assert silent.returncode == 0 and silent.stderr == block
    freed = doctor_here("examples/doctor/rnn_hidden.py")
    block = readme_block("tensortrace doctor examples/doctor/rnn_hidden.py\n", "text")
    assert freed.returncode == 1
    assert freed.stderr.split("Traceback (most recent call last):")[0] == block


def test_a_failing_block_is_reported_and_the_error_goes_on(capsys):
    import tensortrace

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        with tensortrace.doctor() as watch:
            x = torch.randn(4, requires_grad=True)
            y = x.exp()
            y.add_(1)
            y.sum().backward()
    err = capsys.readouterr().err
    here = os.path.relpath(__file__)
    assert watch.report.failure.kind == "modified-in-place"
    assert watch.report.failure.saved.name == "y"
    assert f"→ {here}:" in err and "y is changed in place (.add_())" in err
    assert torch.Tensor.backward is not None and "numpy" not in vars(torch.Tensor)  # put back


def test_a_write_through_a_view_names_the_view():
    import tensortrace

    with pytest.raises(RuntimeError):
        with tensortrace.doctor(os.devnull) as watch:
            x = torch.randn(4, 3, requires_grad=True)
            y = x.exp()
            y[0] += 1
            y.sum().backward()
    writes = watch.report.failure.writes  # y[0] += 1: an add_ into the view, then y[0] = it
    assert [w.op for w in writes] == [".add_()", "[...] ="]
    assert [w.version for w in writes] == [0, 1]
    assert [(w.alias, w.place.code) for w in writes] == [
        ("a view of y (y[...])", "y[0] += 1"),
        ("y", "y[0] += 1"),
    ]


def test_autograd_grad_failures_are_read_too():
    import tensortrace

    with pytest.raises(RuntimeError):
        with tensortrace.doctor(os.devnull) as watch:
            x = torch.randn(3, requires_grad=True)
            y = torch.sigmoid(x)
            y.mul_(2)
            torch.autograd.grad(y.sum(), x)
    failure = watch.report.failure
    assert failure.kind == "modified-in-place"
    assert failure.backward.code.startswith("torch.autograd")
    assert failure.writes[0].place.code == "y.mul_(2)"


def test_a_loss_computed_under_no_grad_names_the_block():
    import tensortrace

    with pytest.raises(RuntimeError):
        with tensortrace.doctor(os.devnull) as watch:
            w = torch.randn(3, requires_grad=True)
            with torch.no_grad():
                loss = (w * 2).sum()
            loss.backward()
    (cut,) = watch.report.failure.cuts
    assert cut.kind == "torch.no_grad()" and cut.place.code == "with torch.no_grad():"
    (fix,) = watch.report.failure.fixes
    assert "outside the `with torch.no_grad():` block" in fix.text
    assert fix.check is None and "not run" in watch.report.checked  # a block: nothing to re-run


def test_modes_of_the_code_own_run_beside_the_watch():
    """The watch is a torch function mode: a dispatch mode of the code's own does not hide
    writes from it, and a function mode the code leaves on at the end of the block stays on."""
    import tensortrace
    from torch.overrides import TorchFunctionMode, _get_current_function_mode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Theirs(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Left(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    left = Left()
    with pytest.raises(RuntimeError):
        with tensortrace.doctor(os.devnull) as watch:
            w = torch.randn(3, requires_grad=True)
            with Theirs():
                y = torch.sigmoid(w)
                y.mul_(2)
            left.__enter__()
            y.sum().backward()
    try:
        assert _get_current_function_mode() is left  # still on; doctor's own watch is gone
    finally:
        left.__exit__(None, None, None)
    assert _get_current_function_mode() is None
    assert watch.report.failure.writes[0].place.code == "y.mul_(2)"


def test_a_detach_between_steps_is_a_cut():
    import tensortrace

    with pytest.raises(RuntimeError):
        with tensortrace.doctor(os.devnull) as watch:
            w = torch.randn(3, requires_grad=True)
            (w * 2).sum().backward()
            v = torch.detach(w)
            u = w.detach()
            (v * u).sum().backward()
    assert [(c.kind, c.place.code) for c in watch.report.failure.cuts] == [
        ("detach()", "u = w.detach()"),
        ("detach()", "v = torch.detach(w)"),
    ]
