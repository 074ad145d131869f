"""``tensortrace doctor`` and the first NaN or Inf: each example names the line that made it, in
forward or in backward, with the reason its operands give; the fixes it offers, applied to a
copy of the script, make the run finite; correct scripts get no report; the script runs as
plain Python does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest
import torch

from conftest import REPO, Result, cli
from tensortrace.trace.doctor import Report, report_from_json, report_schema

EXAMPLES = REPO / "examples" / "doctor"
MODES = ("risky", "every-op")  # --nan, --nan-all
FLAGS = {"losses": [], "risky": ["--nan"], "every-op": ["--nan-all"]}


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    """One intra-op thread, as in test_doctor.py: OpenMP's pool does not survive a fork."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def doctor_here(*args: str, cwd: Path = REPO) -> Result:
    return cli(
        "doctor", *args, cwd=cwd, env={"NO_COLOR": "1", "FORCE_COLOR": None, "COLUMNS": None}
    )


def run(
    script: Path, mode: str, tmp_path: Path, cwd: Path = REPO, check: bool = False
) -> Tuple[Result, Report]:
    """``tensortrace doctor [--nan | --nan-all] SCRIPT``, as ``mode`` (the report's ``watch``)
    says; the fixes are run on copies only with ``check``."""
    out = tmp_path / f"report-{mode}.json"
    flags = FLAGS[mode] + ([] if check else ["--no-check"])
    result = doctor_here(*flags, "-o", str(out), str(script), cwd=cwd)
    return result, report_from_json(out.read_text(encoding="utf-8"))


def line_of(script: Path, text: str) -> int:
    """The number of the one line of ``script`` that contains ``text``."""
    found = [
        i
        for i, line in enumerate(script.read_text(encoding="utf-8").splitlines(), 1)
        if text in line
    ]
    assert len(found) == 1, (script, text, found)
    return found[0]


def plain_python(script: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# --- each example names the right line ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_log_of_an_underflowed_softmax_is_named_in_forward(tmp_path, mode):
    script = EXAMPLES / "nan_log_softmax.py"
    result, report = run(script, mode, tmp_path)
    assert result.returncode == 0
    nf = report.nonfinite
    assert nf is not None and nf.watch == mode
    assert (nf.symptom.what, nf.symptom.value, nf.symptom.iteration) == ("loss", "nan", 3)
    assert nf.symptom.names == ("loss",)
    assert nf.symptom.place.line == line_of(script, "loss.backward()")
    origin = nf.origin
    assert (origin.phase, origin.op, origin.made, origin.iteration) == (
        "forward",
        "aten.log",
        ("-inf",),
        3,
    )
    assert origin.place.line == line_of(script, "torch.log(p)")
    assert origin.call == "torch.log(p)"
    p = origin.operands[0]
    assert (p.name, p.nan, p.posinf, p.neginf) == ("p", 0, 0, 0) and p.zeros >= 1
    assert origin.count == p.zeros  # each zero made one -inf
    assert nf.rule == "softmax-underflow"
    assert nf.headline.startswith(
        "loss became NaN at iteration 3: the first non-finite value was made by `torch.log(p)` "
        f"at examples/doctor/nan_log_softmax.py:{origin.place.line} (p had "
    )
    # the NaN itself: 0 × -inf in the product with the one-hot targets
    assert nf.then is None or nf.then.op == "aten.mul"
    if mode == "every-op":
        assert nf.then is not None and nf.then.made == ("nan",)
        assert nf.then.place.line == origin.place.line


@pytest.mark.parametrize("mode", MODES)
def test_zero_over_zero_in_a_normalisation_is_named_in_forward(tmp_path, mode):
    script = EXAMPLES / "nan_normalise.py"
    result, report = run(script, mode, tmp_path)
    nf = report.nonfinite
    assert result.returncode == 0 and nf is not None
    assert (nf.symptom.what, nf.symptom.value, nf.symptom.iteration) == ("loss", "nan", 0)
    origin = nf.origin
    assert (origin.phase, origin.op, origin.made) == ("forward", "aten.div", ("nan",))
    assert origin.place.line == line_of(script, "weights = s / s.sum(dim=1, keepdim=True)")
    assert origin.name == "weights"
    num, den = origin.operands
    assert (num.name, den.name) == ("s", "s.sum(dim=1, keepdim=True)")
    assert den.zeros >= 1 and num.zeros >= den.zeros * 6  # each zero sum is a row of 6 zeros
    assert nf.rule == "zero-over-zero"
    assert "0/0 = NaN" in nf.why


@pytest.mark.parametrize("mode", MODES)
def test_sqrt_at_zero_is_named_in_backward_when_forward_is_finite(tmp_path, mode):
    script = EXAMPLES / "nan_sqrt_backward.py"
    result, report = run(script, mode, tmp_path)
    assert "step 0: loss 0." in result.stdout  # the forward of the first step is finite
    nf = report.nonfinite
    assert nf is not None
    assert (nf.symptom.what, nf.symptom.value, nf.symptom.iteration) == ("gradient", "nan", 0)
    assert set(nf.symptom.names) == {"embed.weight", "embed.bias"}
    assert nf.symptom.place.line == line_of(script, "loss.backward()")
    origin = nf.origin
    assert (origin.phase, origin.node, origin.op, origin.made) == (
        "backward",
        "SqrtBackward0",
        "aten.sqrt",
        ("inf",),
    )
    assert origin.place.line == line_of(script, "dist = torch.sqrt(")
    assert origin.from_finite
    assert nf.rule == "sqrt-at-zero"
    assert "in backward, by the gradient of `torch.sqrt(" in nf.headline
    # then the NaN: inf × 0 in the gradient of the square, the same line
    assert nf.then.node == "PowBackward0" and nf.then.made == ("nan",)


@pytest.mark.parametrize("mode", MODES)
def test_divergence_after_large_steps_is_named_with_its_losses(tmp_path, mode):
    script = EXAMPLES / "nan_divergence.py"
    result, report = run(script, mode, tmp_path)
    nf = report.nonfinite
    assert nf is not None
    assert (nf.symptom.what, nf.symptom.value) == ("loss", "inf")
    origin = nf.origin
    assert origin.place.line == line_of(script, "loss = ((model(x) - y) ** 2).mean()")
    assert origin.iteration == nf.symptom.iteration > 5
    assert origin.from_finite and origin.made == ("inf",)
    assert nf.rule == "divergence"
    assert "the loss grew from" in nf.why
    assert len(nf.losses) >= 5 and nf.losses[-1] > 1e3 * min(nf.losses)
    assert [e.line for f in nf.fixes for e in f.edits] == [
        line_of(script, "lr=0.5"),
        line_of(script, "opt.step()"),
    ]


def test_the_first_inf_of_an_optimizer_step_is_named_with_every_op(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(
        "import torch\n"
        "w = torch.full((3,), 1e38, requires_grad=True)\n"
        "opt = torch.optim.SGD([w], lr=3e38)\n"
        "for step in range(2):\n"
        "    opt.zero_grad()\n"
        "    loss = -w.sum()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "print(w)\n",
        encoding="utf-8",
    )
    _, default = run(script, "risky", tmp_path, cwd=tmp_path)
    _, every = run(script, "every-op", tmp_path, cwd=tmp_path)
    for report in (default, every):
        s = report.nonfinite.symptom
        assert (s.what, s.value, s.names, s.iteration, s.place.line) == (
            "parameter",
            "inf",
            ("w",),
            0,
            8,
        )
    # by default the step is not watched: the next loss shows what it left
    assert default.nonfinite.origin is None and "--nan-all" in default.nonfinite.headline
    origin = every.nonfinite.origin
    assert (origin.phase, origin.place.line, origin.from_finite) == ("optimizer", 8, True)
    assert origin.made == ("inf",)


def test_a_nan_already_in_the_data_is_named_where_it_is_first_read(tmp_path):
    script = tmp_path / "data.py"
    script.write_text(
        "import numpy as np\n"
        "import torch\n"
        "x = torch.from_numpy(np.array([[1.0, 2.0, 3.0], [4.0, np.nan, 6.0]], np.float32))\n"
        "lin = torch.nn.Linear(3, 1)\n"
        "loss = lin(x).pow(2).mean()\n"
        "loss.backward()\n",
        encoding="utf-8",
    )
    _, report = run(script, "every-op", tmp_path, cwd=tmp_path)
    nf = report.nonfinite
    assert nf.origin is None and nf.entered is not None
    assert nf.entered.place.line == 5
    assert "already held NaN" in nf.headline
    assert [e.text.strip() for f in nf.fixes for e in f.edits] == [
        "loss = lin(torch.nan_to_num(x)).pow(2).mean()"
    ]


# --- the fixes offered work when applied ------------------------------------------------------


def apply(fix, script: Path, into: Path) -> Path:
    from tensortrace.doctor.edits import apply_edits

    text = script.read_text(encoding="utf-8")
    lines = text.splitlines()
    for edit in fix.edits:
        assert edit.was == "\n".join(lines[edit.line - 1 : edit.end])
    into.write_text(apply_edits(text, fix.edits), encoding="utf-8")
    return into


@pytest.mark.parametrize(
    "name",
    ["nan_log_softmax.py", "nan_normalise.py", "nan_sqrt_backward.py", "nan_divergence.py"],
)
def test_each_fix_offered_makes_the_run_finite(tmp_path, name):
    """The doctor runs each fix on a copy, watched for NaN and Inf: each passes. Applied here
    to a copy too, and run under --nan-all to its end, each leaves nothing to report."""
    script = EXAMPLES / name
    _, report = run(script, "risky", tmp_path, check=True)
    fixes = [f for f in report.nonfinite.fixes if f.edits]
    assert fixes, report.nonfinite.fixes
    assert [f.check.verdict for f in fixes] == ["passed"] * len(fixes), fixes
    assert "ran on a copy of" in report.checked
    for i, fix in enumerate(fixes):
        fixed = apply(fix, script, tmp_path / f"fixed{i}.py")
        result, after = run(fixed, "every-op", tmp_path)
        assert result.returncode == 0, (fix, result.stderr)
        assert after.nonfinite is None, (fix.edits, after.nonfinite and after.nonfinite.headline)


def test_the_fix_for_a_log_of_softmax_is_log_softmax_on_the_same_line():
    script = EXAMPLES / "nan_log_softmax.py"
    result = doctor_here("--nan", "--no-check", "-f", "json", str(script))
    (first,) = report_from_json(result.stderr).nonfinite.fixes[0].edits
    assert first.line == first.end == line_of(script, "torch.log(p)")
    assert first.text == "    loss = -(onehot * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()"


# --- correct scripts: nothing to report -------------------------------------------------------

CORRECT = {
    "cnn.py": """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))
for _ in range(5):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print(round(loss.item(), 4))
""",
    "causal.py": """
import torch
from torch import nn
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
head = nn.Linear(16, 5)
opt = torch.optim.SGD([*layer.parameters(), *head.parameters()], lr=0.01)
mask = nn.Transformer.generate_square_subsequent_mask(6)  # -inf above the diagonal
x, y = torch.randn(4, 6, 16), torch.randint(0, 5, (4, 6))
for _ in range(4):
    opt.zero_grad()
    out = head(layer(x, src_mask=mask, is_causal=True))
    loss = nn.functional.cross_entropy(out.reshape(-1, 5), y.reshape(-1))
    loss.backward()
    opt.step()
print(round(loss.item(), 4))
""",
    "logmask.py": """
import torch
torch.manual_seed(0)
q = torch.randn(4, 5, 8, requires_grad=True)
keep = (torch.rand(4, 5, 5) > 0.3).float()
keep[:, :, 0] = 1.0
for _ in range(3):
    scores = q @ q.transpose(1, 2) + torch.log(keep)  # -inf where masked, on purpose
    attn = torch.softmax(scores, dim=-1)
    loss = (attn @ q).pow(2).mean() + torch.sqrt(q.pow(2).sum() + 1.0)
    loss.backward()
    q.grad = None
print(round(loss.item(), 4))
""",
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_scripts_get_nothing_to_report(tmp_path, name, mode):
    script = tmp_path / name
    script.write_text(CORRECT[name], encoding="utf-8")
    result, report = run(script, mode, tmp_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert report.nonfinite is None and report.failure is None and not report.silent
    text = doctor_here(*FLAGS[mode], "--no-check", str(script), cwd=tmp_path)
    assert text.stderr.startswith("tensortrace doctor: nothing to report")


# --- the script runs as plain Python does -----------------------------------------------------


@pytest.mark.parametrize("name", ["nan_log_softmax.py", "nan_sqrt_backward.py"])
def test_values_stdout_and_status_are_those_of_plain_python(tmp_path, name):
    script = EXAMPLES / name
    plain = plain_python(script)
    for mode in MODES:
        result, report = run(script, mode, tmp_path)
        assert report.nonfinite is not None
        assert (result.returncode, result.stdout) == (plain.returncode, plain.stdout)


def test_an_error_of_the_watch_stops_it_and_not_the_script(tmp_path, monkeypatch):
    from tensortrace.doctor import finite

    def broken(t):
        raise RuntimeError("a check that fails")

    monkeypatch.setattr(finite, "kinds", broken)
    script = EXAMPLES / "nan_normalise.py"
    plain = plain_python(script)
    with pytest.warns(RuntimeWarning, match="the NaN and Inf watch stopped"):
        result, report = run(script, "risky", tmp_path)
    assert (result.returncode, result.stdout) == (plain.returncode, plain.stdout)


# --- off the CPU: sums read at boundaries, never one host read per operation --------------------


def deferred(monkeypatch) -> List[int]:
    """Make the CPU take the path another device takes (sums kept, read at boundaries); the
    list counts the host reads."""
    from tensortrace.doctor import finite
    from tensortrace.doctor import session
    from tensortrace.doctor.nonfinite import NonFiniteWatch

    reads: List[int] = []
    add = finite.Readings.add

    def counted(self, values, then):
        reads.append(values.numel())
        return add(self, values, then)

    def watch(rec, level):
        rec.nonfinite = NonFiniteWatch(rec, level=level, defer=True)
        rec.nonfinite.start()

    monkeypatch.setattr(finite.Readings, "add", counted)
    monkeypatch.setattr(session, "_watch_nonfinite", watch)
    return reads


@pytest.mark.parametrize(
    "name, line",
    [
        ("nan_log_softmax.py", "torch.log(p)"),
        ("nan_normalise.py", "weights = s / s.sum"),
        ("nan_sqrt_backward.py", "dist = torch.sqrt("),
        ("nan_divergence.py", "loss = ((model(x) - y) ** 2).mean()"),
    ],
)
def test_the_device_path_names_the_same_lines_reading_only_at_boundaries(
    tmp_path, monkeypatch, name, line
):
    script = EXAMPLES / name
    _, now = run(script, "every-op", tmp_path)
    reads = deferred(monkeypatch)
    result, later = run(script, "every-op", tmp_path)
    assert result.returncode == 0
    a, b = now.nonfinite, later.nonfinite
    assert b.origin.place.line == a.origin.place.line == line_of(script, line)
    assert (b.origin.op, b.origin.node) == (a.origin.op, a.origin.node)
    assert b.origin.made == a.origin.made
    assert b.symptom.what == a.symptom.what
    backwards = now.watched.backwards
    # one read per boundary (a backward's loss, an optimizer's gradients and parameters, the
    # operations since the last boundary), not one per operation: far fewer than were checked
    assert len(reads) <= 5 * (backwards + 1)
    assert sum(reads) > 3 * len(reads)


# --- the report: JSON, schema, console --------------------------------------------------------


def test_the_json_report_holds_the_finding_and_the_schema_describes_it(tmp_path):
    _, report = run(EXAMPLES / "nan_normalise.py", "risky", tmp_path)
    schema = report_schema()
    assert "NonFinite" in schema["$defs"] and "nonfinite" in schema["$defs"]["Report"]["properties"]
    old = (
        (tmp_path / "report-risky.json")
        .read_text(encoding="utf-8")
        .replace('"nonfinite"', '"ignored"')
    )
    with pytest.raises(Exception):
        report_from_json(old)  # unknown fields are refused
    without = report_from_json(
        '{"version": 1, "target": "t", "watched": {"saved": 0, "writes": 0, "backwards": 0},'
        ' "failure": null, "silent": []}'
    )
    assert without.nonfinite is None  # reports written before the field still load


def test_the_console_report_says_the_line_then_why_then_the_fix():
    """The headline names the line, then the reason in its operands; then the operation with
    its operands counted, where the loss showed it, and the fixes."""
    result = doctor_here("--nan", "--no-check", "examples/doctor/nan_normalise.py")
    lines = result.stderr.splitlines()
    assert lines[0] == "tensortrace doctor: loss became NaN"
    assert lines[1].startswith(
        "→ loss became NaN at iteration 0: the first non-finite value was made by "
        "`s / s.sum(dim=1, keepdim=True)` at examples/doctor/nan_normalise.py:18"
    )
    assert lines[1].endswith("(s.sum(dim=1, keepdim=True) had 7 zeros and s had 83; 0/0 = NaN)")
    labels = [line[:12].strip() for line in lines[2:]]
    assert labels.index("made") < labels.index("backward") < labels.index("fix")
    assert "examples/doctor/nan_normalise.py:18  - " in result.stderr  # the edit, line out
    assert "the fixes were not run (--no-check)" in result.stderr


def test_a_block_in_code_reports_too(tmp_path):
    import tensortrace

    out = tmp_path / "r.json"
    with tensortrace.doctor(str(out), nan=True) as watch:
        w = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
        torch.sqrt(w).sum().backward()
    nf = watch.report.nonfinite
    assert nf.symptom.what == "gradient" and nf.symptom.names == ("w",)
    assert nf.origin.node == "SqrtBackward0" and nf.rule == "sqrt-at-zero"
    assert w.grad[0].item() == float("inf")  # the gradient itself is untouched


def test_by_default_only_the_loss_is_checked_and_the_report_points_to_nan(tmp_path):
    """No dispatch mode by default: the loss that went NaN is named at its backward line and
    iteration, and the report says to run again with --nan for the operation."""
    script = EXAMPLES / "nan_log_softmax.py"
    result, report = run(script, "losses", tmp_path)
    assert result.returncode == 0
    nf = report.nonfinite
    assert nf.watch == "losses" and nf.origin is None and nf.entered is None
    assert (nf.symptom.what, nf.symptom.value, nf.symptom.iteration) == ("loss", "nan", 3)
    assert nf.symptom.place.line == line_of(script, "loss.backward()")
    assert nf.headline == (
        f"loss became NaN at iteration 3 (examples/doctor/nan_log_softmax.py:"
        f"{nf.symptom.place.line}); run again with --nan to find the operation that made it"
    )


def test_the_default_watch_never_turns_its_dispatch_mode_on(monkeypatch):
    import tensortrace
    from tensortrace.doctor.nanmode import NanMode
    from tensortrace.doctor.nonfinite import NonFiniteWatch

    seen = {"mode": 0, "call": 0}
    dispatch, call = NanMode.__torch_dispatch__, NonFiniteWatch.call

    def counted_dispatch(self, *args, **kwargs):
        seen["mode"] += 1
        return dispatch(self, *args, **kwargs)

    def counted_call(self, *args, **kwargs):
        seen["call"] += 1
        return call(self, *args, **kwargs)

    monkeypatch.setattr(NanMode, "__torch_dispatch__", counted_dispatch)
    monkeypatch.setattr(NonFiniteWatch, "call", counted_call)
    for nan in (False, True):
        with tensortrace.doctor(os.devnull, nan=nan) as watch:
            w = torch.ones(3, requires_grad=True)
            for step in range(3):
                loss = torch.log(w * w * (1 - step)).sum()  # step 1: log(0) = -inf
                loss.backward()
        nf = watch.report.nonfinite
        assert (nf.symptom.what, nf.symptom.value, nf.symptom.iteration) == ("loss", "-inf", 1)
        if not nan:
            assert seen == {"mode": 0, "call": 0} and nf.origin is None
            assert "run again with --nan" in nf.headline
        else:
            assert seen["mode"] > 0 and seen["call"] > 0
            assert nf.origin.op == "aten.log" and nf.rule == "log-of-zero"


def test_doctor_refuses_a_nan_level_it_does_not_know():
    import tensortrace
    from tensortrace.errors import UsageError

    with pytest.raises(UsageError, match="nan is False \\(the default\\), True or 'all'"):
        tensortrace.doctor(nan="every")


def test_nan_all_checks_every_operation_where_nan_checks_the_risky_ones(tmp_path):
    """A matrix product that overflows is not among the operations --nan checks: it names no
    origin and points to --nan-all, which names the product."""
    script = tmp_path / "overflow.py"
    script.write_text(
        "import torch\n"
        "x = torch.full((2, 4), 1e20)\n"
        "w = torch.full((4, 3), 1e20, requires_grad=True)\n"
        "y = x @ w\n"
        "loss = y.sum()\n"
        "loss.backward()\n",
        encoding="utf-8",
    )
    _, risky = run(script, "risky", tmp_path, cwd=tmp_path)
    _, every = run(script, "every-op", tmp_path, cwd=tmp_path)
    for report in (risky, every):
        s = report.nonfinite.symptom
        assert (s.what, s.value, s.place.line) == ("loss", "inf", 6)
    assert risky.nonfinite.watch == "risky" and risky.nonfinite.origin is None
    assert "run again with --nan-all to check every operation" in risky.nonfinite.headline
    origin = every.nonfinite.origin
    assert every.nonfinite.watch == "every-op"
    assert (origin.op, origin.place.line, origin.made, origin.from_finite) == (
        "aten.mm",
        4,
        ("inf",),
        True,
    )


@pytest.mark.parametrize("flags", [(), ("--nan",)])
def test_the_readme_shows_what_doctor_prints_for_a_nan(flags):
    text = (REPO / "README.md").read_text(encoding="utf-8")
    command = " ".join(["$ tensortrace doctor", *flags, "examples/doctor/nan_log_softmax.py"])
    start = text.index("```text\n", text.index(command + "\n")) + len("```text\n")
    shown = text[start : text.index("```\n", start)]
    result = doctor_here(*flags, "examples/doctor/nan_log_softmax.py")
    assert result.returncode == 0 and result.stderr == shown


def test_docs_json_documents_every_field_of_the_finding():
    import msgspec

    from tensortrace.trace.nonfinite import NonFinite

    doc = (REPO / "docs" / "json.md").read_text(encoding="utf-8")
    part = doc[doc.index("(`nonfinite`)") :]
    fields = set()
    for record in msgspec.json.schema(NonFinite)["$defs"].values():
        fields |= set(record.get("properties", {}))
    assert sorted(f for f in fields if f"`{f}`" not in part and f'"{f}"' not in part) == []


def test_a_fix_that_only_slows_a_divergence_fails_its_check(tmp_path):
    """With lr=50 a tenth of it still diverges: its copy overflows too, and is marked failed
    with what doctor found there; clipping the gradients passes."""
    script = tmp_path / "steep.py"
    text = (EXAMPLES / "nan_divergence.py").read_text(encoding="utf-8")
    script.write_text(text.replace("lr=0.5", "lr=50.0"), encoding="utf-8")
    _, report = run(script, "risky", tmp_path, cwd=tmp_path, check=True)
    lower, clip = report.nonfinite.fixes
    assert "lr=5" in lower.edits[0].text
    assert lower.check.verdict == "failed"
    assert lower.check.detail.startswith("doctor still reports: loss became inf at iteration")
    assert clip.check.verdict == "passed"
    assert "to its end" in report.checked


def test_the_copy_of_a_divergence_fails_while_its_loss_still_grows():
    """The probe a divergence's fixes run under: a loss that grows a thousandfold, the last
    three rising, is a problem before anything overflows."""
    from tensortrace.doctor.nancheck import probe_risky, probe_risky_growth

    for make, grows in ((probe_risky_growth, True), (probe_risky, False)):
        watched = make(None)
        try:
            w = torch.ones(3, requires_grad=True)
            for step in range(5):
                (w * 10.0**step).sum().backward()
            problems = watched.problems()
        finally:
            watched.watch.stop()
            watched.rec.stop()
        assert bool(problems) == grows
        if grows:
            assert problems[0].startswith("the loss still grows: 3 at iteration 0")
