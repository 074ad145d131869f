"""``tensortrace doctor`` on real-shaped training scripts that fail: each report names the lines
behind the failure, each fix it prints was run by doctor on a copy, and each fix, applied here
to a copy and run again as plain Python, does what its mark says. Correct training scripts get
no diagnosis at all, and compute the same under doctor.

These run processes (doctor's checks, and the fixed copies), so they are in the slow tier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from conftest import REPO, cli
from tensortrace.doctor.verify import edited_files
from tensortrace.trace.doctor import Report, report_from_json

pytestmark = pytest.mark.slow

CASES = "tests/integrations/doctor_cases"


def doctor(name: str, tmp_path: Path, *args: str) -> Tuple[int, Report, str]:
    out = tmp_path / "report.json"
    result = cli(
        "doctor",
        "-o",
        str(out),
        "--check-budget",
        "300",
        *args,
        name if name.startswith("examples/") else f"{CASES}/{name}",
        cwd=REPO,
        env={"NO_COLOR": "1", "FORCE_COLOR": None, "COLUMNS": None},
    )
    return result.returncode, report_from_json(out.read_text(encoding="utf-8")), result.stdout


DRIVER = """\
import json, os, runpy, sys
results = []
for path in list(sys.argv[1:]):
    sys.argv = [path]
    try:
        runpy.run_path(path, run_name="__main__")
        results.append("ran")
    except BaseException as exc:
        results.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
print("@@" + json.dumps(results))
"""


def run_fixed(fixes, tmp_path: Path) -> List[str]:
    """Apply each fix's edits to a copy and run the copies as plain Python, in one child."""
    copies = []
    for i, fix in enumerate(fixes):
        files = edited_files(fix.edits, str(REPO))
        assert len(files) == 1, fix
        ((_, text),) = files.items()
        copy = tmp_path / f"fixed{i}.py"
        copy.write_text(text, encoding="utf-8")
        copies.append(str(copy))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *copies],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("@@"))
    return json.loads(line[2:])


def where(place) -> int:
    return place.line


def checked(report: Report) -> Dict[str, str]:
    return {fix.text: fix.check.verdict for fix in report.failure.fixes}


def applied(report: Report, tmp_path: Path) -> None:
    """Every fix marked passed runs to its end when applied; every one marked failed fails."""
    fixes = report.failure.fixes
    outcomes = run_fixed(fixes, tmp_path)
    for fix, outcome in zip(fixes, outcomes):
        assert (outcome == "ran") == (fix.check.verdict == "passed"), (fix.text, outcome)


# --- freed graphs ---------------------------------------------------------------------------


def test_lstm_state_carried_across_batches(tmp_path):
    status, report, _ = doctor("lstm_state.py", tmp_path)
    f = report.failure
    assert status == 1 and f.kind == "freed-graph"
    assert f.carrier == "state" and where(f.assigned_at) == 17 and where(f.carried_at) == 17
    assert f.runs == (1, 2) and f.unit == "iteration"
    assert where(f.freed_by) == 20 and where(f.backward) == 20 and where(f.shared) == 17
    assert f.headline.startswith(f"{CASES}/lstm_state.py:17: state carries iteration 1's graph")
    # opt.step() changed the LSTM's weights between the two backwards: no retain_graph
    assert {w.alias for w in f.blocked} >= {"lstm.weight_ih_l0", "lstm.weight_hh_l0"}
    assert {w.place.line for w in f.blocked} == {21}
    (fix,) = f.fixes
    assert [(e.line, e.end, e.text) for e in fix.edits] == [
        (17, 16, "    state = None if state is None else tuple(t.detach() for t in state)")
    ]
    assert fix.check.verdict == "passed"
    applied(report, tmp_path)


def test_gan_whose_discriminator_step_does_not_detach_the_fakes(tmp_path):
    status, report, _ = doctor("gan_no_detach.py", tmp_path)
    f = report.failure
    assert f.carrier == "fake" and where(f.assigned_at) == 15 and where(f.carried_at) == 20
    assert where(f.freed_by) == 18 and where(f.backward) == 22 and f.runs is None
    assert f.shared_node == "TanhBackward0"
    detach, recompute, retain = f.fixes
    assert detach.edits[0].line == 16 and "D(fake.detach())" in detach.edits[0].text
    assert recompute.edits[0].text == "    fake = G(torch.randn(16, 4))"
    assert "retain_graph=True" in retain.edits[0].text and retain.edits[0].line == 18
    assert set(checked(report).values()) == {"passed"}
    applied(report, tmp_path)


def test_dcgan_reusing_the_discriminators_output_for_the_generator(tmp_path):
    status, report, _ = doctor("dcgan_reuse.py", tmp_path)
    f = report.failure
    assert f.carrier == "output" and where(f.assigned_at) == 47 and where(f.carried_at) == 52
    assert where(f.freed_by) == 49 and where(f.backward) == 53
    assert f.shared.code == "return self.main(x).view(-1)"  # the node both backwards need
    # optimizerD.step() changed D's weights: retain_graph would fail, so it is not offered
    assert {w.place.line for w in f.blocked} == {50}
    (fix,) = f.fixes
    assert [(e.line, e.text.strip()) for e in fix.edits] == [
        (47, "output = netD(fake.detach())"),
        (52, "output = netD(fake)"),
    ]
    assert fix.check.verdict == "passed"
    applied(report, tmp_path)


def test_notebook_cell_run_twice_recomputes_instead_of_detaching(tmp_path):
    status, report, stdout = doctor("notebook_rerun.py", tmp_path)
    f = report.failure
    assert stdout.startswith("loss ")  # the first run of the cell printed, as it would
    assert f.carrier == "pred" and where(f.assigned_at) == 13 and where(f.carried_at) == 17
    assert f.runs == (1, 2)
    (fix,) = f.fixes  # detaching pred would leave the loss nothing; retain_graph meets opt.step
    assert [(e.line, e.text.strip()) for e in fix.edits] == [(17, "pred = model(x)")]
    assert [w.alias for w in f.blocked] == ["model.2.weight"]
    assert fix.check.verdict == "passed"
    applied(report, tmp_path)


def test_two_losses_on_a_shared_trunk(tmp_path):
    status, report, _ = doctor("two_losses.py", tmp_path)
    f = report.failure
    assert f.carrier == "features" and where(f.assigned_at) == 13 and where(f.carried_at) == 15
    assert where(f.freed_by) == 17 and where(f.backward) == 18 and f.blocked == ()
    one, retain = f.fixes
    assert [(e.line, e.text.strip()) for e in one.edits] == [
        (17, "(cls_loss + reg_loss).backward()"),
        (18, ""),
    ]
    assert retain.edits[0].text.strip() == "cls_loss.backward(retain_graph=True)"
    assert set(checked(report).values()) == {"passed"}
    applied(report, tmp_path)


# --- optimizer steps between a forward and its backward ------------------------------------


def test_gan_stepping_the_discriminator_before_the_generators_backward(tmp_path):
    status, report, _ = doctor("examples/doctor/gan_step_order.py", tmp_path)
    f = report.failure
    assert f.saved.name == "D.2.weight" and where(f.saved.place) == 17
    assert [(w.place.code, w.op) for w in f.writes] == [("opt_D.step()", ".addcdiv_()")]
    assert f.headline.startswith(
        "examples/doctor/gan_step_order.py:20: opt_D.step() updates D.2.weight"
    )
    assert "saved a saved tensor" not in f.headline
    move_step, backward_first, loss_after = f.fixes
    assert [(e.line, e.text.strip()) for e in move_step.edits] == [(20, ""), (23, "opt_D.step()")]
    assert [e.line for e in backward_first.edits] == [21, 20]
    assert [(e.line, e.text.strip()) for e in loss_after.edits] == [
        (17, ""),
        (21, "g_loss = bce(D(fake), torch.ones(16, 1))"),
    ]
    assert set(checked(report).values()) == {"passed"}
    applied(report, tmp_path)


def test_actor_critic_stepping_the_critic_before_the_actors_backward(tmp_path):
    status, report, _ = doctor("actor_critic.py", tmp_path)
    f = report.failure
    assert f.saved.name == "critic.2.weight" and where(f.saved.place) == 16
    assert f.writes[0].place.code == "opt_critic.step()"
    detach, move_step, backward_first, loss_after = f.fixes
    assert "advantage.detach()" in detach.edits[0].text and detach.edits[0].line == 19
    assert [fix.check.verdict for fix in f.fixes] == ["passed", "passed", "passed", "failed"]
    assert "modified by an inplace operation" in loss_after.check.detail
    applied(report, tmp_path)


# --- in-place activations and augmented assignments ----------------------------------------


def test_in_place_leaky_relu_of_the_discriminator_not_the_generator(tmp_path):
    status, report, _ = doctor("gan_inplace.py", tmp_path)
    f = report.failure
    assert where(f.writes[0].place) == 30 and where(f.saved.place) == 29
    (fix,) = f.fixes  # D's own definition line, not the header comment nor G's line 12
    assert [(e.line, e.text.strip()) for e in fix.edits] == [
        (23, "self.act = nn.LeakyReLU(0.2, inplace=False)")
    ]
    assert "D.act" in fix.text and fix.check.verdict == "passed"
    assert "which is output 0 of LeakyRelu1," in f.error  # PyTorch's word, as it prints it
    applied(report, tmp_path)


def test_in_place_relu_in_a_residual_block(tmp_path):
    status, report, _ = doctor("resblock_inplace.py", tmp_path)
    f = report.failure
    assert where(f.saved.place) == 16 and where(f.writes[0].place) == 17
    (fix,) = f.fixes
    assert [(e.line, e.text.strip()) for e in fix.edits] == [
        (10, "self.relu = nn.ReLU(inplace=False)")
    ]
    assert fix.check.verdict == "passed"
    applied(report, tmp_path)


def test_augmented_assignment_onto_a_saved_relu_output(tmp_path):
    status, report, _ = doctor("residual_add.py", tmp_path)
    f = report.failure
    assert where(f.writes[0].place) == 17 and f.saved.node == "ReluBackward0"
    (fix,) = f.fixes
    assert [(e.line, e.text.strip()) for e in fix.edits] == [(17, "out = out + x")]
    assert fix.check.verdict == "passed"
    applied(report, tmp_path)


# --- a loss that does not require grad -----------------------------------------------------


def test_loss_built_on_argmax_names_the_argmax(tmp_path):
    status, report, _ = doctor("argmax_loss.py", tmp_path)
    f = report.failure
    assert f.kind == "no-grad" and [(c.kind, c.place.line) for c in f.cuts] == [("argmax", 12)]
    assert "nothing" not in f.headline  # the logits require grad: never "nothing requires grad"
    (fix,) = f.fixes
    assert "softmax" in fix.edits[0].text and fix.check.verdict == "passed"
    applied(report, tmp_path)


def test_every_parameter_frozen_names_the_freezing_not_an_unrelated_detach(tmp_path):
    status, report, _ = doctor("frozen.py", tmp_path)
    f = report.failure
    assert [(c.kind, c.place.line) for c in f.cuts] == [
        ("requires_grad=False on every parameter of model", 10)
    ]
    assert "detach" not in f.headline
    (fix,) = f.fixes
    assert [e.text.strip() for e in fix.edits] == [
        "for p in model.head.parameters():\n    p.requires_grad = True"
    ]
    assert fix.check.verdict == "passed"
    applied(report, tmp_path)


# --- plain loops used the wrong way: a loss left per sample, updates, non-leaf weights ------


def test_a_loss_left_per_sample_is_reduced_by_its_sum_or_its_mean(tmp_path):
    status, report, _ = doctor("unreduced_loss.py", tmp_path)
    f = report.failure
    assert status == 1 and f.kind == "not-scalar" and where(f.backward) == 14
    assert f.headline.startswith(
        f"{CASES}/unreduced_loss.py:14: loss holds 32 numbers (shape 32x1)"
    )
    assert f.error == "grad can be implicitly created only for scalar outputs"
    total, mean = f.fixes
    assert [(e.line, e.text.strip()) for e in total.edits] == [(14, "loss.sum().backward()")]
    assert [(e.line, e.text.strip()) for e in mean.edits] == [(14, "loss.mean().backward()")]
    assert set(checked(report).values()) == {"passed"}
    applied(report, tmp_path)


def test_a_hand_written_update_is_put_under_no_grad_whole(tmp_path):
    status, report, _ = doctor("manual_sgd.py", tmp_path)
    f = report.failure
    assert status == 1 and f.kind == "leaf-in-place" and where(f.backward) == 14
    assert f.headline.startswith(f"{CASES}/manual_sgd.py:14: this update writes in place into w,")
    (fix,) = f.fixes  # both updates and both zero_() lines: w's alone would stop at b's
    (edit,) = fix.edits
    assert (edit.line, edit.end) == (14, 17)
    assert edit.text.splitlines() == [
        "    with torch.no_grad():",
        "        w -= lr * w.grad",
        "        b -= lr * b.grad",
        "        w.grad.zero_()",
        "        b.grad.zero_()",
    ]
    assert fix.check.verdict == "passed"
    applied(report, tmp_path)


def test_an_in_place_activation_on_a_leaf_gets_words_not_an_edit(tmp_path):
    # x = x.relu() would run, and make x a non-leaf whose .grad stays None: not offered
    status, report, _ = doctor("leaf_relu.py", tmp_path)
    f = report.failure
    assert status == 1 and f.kind == "leaf-in-place" and where(f.backward) == 7
    assert "write the result out of place to a new name" in f.headline
    assert f.fixes == ()


def test_weights_scaled_at_creation_are_made_leaves_where_they_are_made(tmp_path):
    status, report, _ = doctor("scaled_init.py", tmp_path)
    f = report.failure
    assert status == 1 and f.kind == "non-leaf-grad" and where(f.backward) == 13
    assert f.headline.startswith(
        f"{CASES}/scaled_init.py:13: w.grad is None because w is not a leaf: it is the result of "
        "MulBackward0 at line 8"
    )
    assert f.error.startswith("TypeError: unsupported operand type(s)")
    (fix,) = f.fixes
    assert [(e.line, e.text.strip()) for e in fix.edits] == [
        (8, "w = (torch.randn(3, requires_grad=True) * 0.01).detach().requires_grad_()")
    ]
    assert fix.check.verdict == "passed"
    applied(report, tmp_path)


def test_numpy_of_outputs_that_require_grad_detaches_those_and_only_those(tmp_path):
    status, report, _ = doctor("numpy_metric.py", tmp_path)
    f = report.failure
    assert status == 1 and f.kind == "numpy-requires-grad" and where(f.backward) == 17
    (fix,) = f.fixes  # labels requires no grad: left as it is
    assert [(e.line, e.text.strip()) for e in fix.edits] == [
        (
            17,
            "accuracy = (np.argmax(logits.detach().numpy(), axis=1) == labels.numpy()).mean()",
        )
    ]
    assert fix.check.verdict == "passed"
    applied(report, tmp_path)


def test_a_leafs_grad_read_before_any_backward_is_not_called_a_non_leaf(tmp_path):
    status, report, _ = doctor("grad_before_backward.py", tmp_path)
    assert status == 1 and report.failure is None


# --- correct scripts -----------------------------------------------------------------------


CORRECT = ["cnn.py", "lstm_lm.py", "tiny_gpt.py", "gan.py"]


def test_correct_training_scripts_get_no_diagnosis_and_compute_the_same(tmp_path):
    plain = subprocess.run(
        [
            sys.executable,
            "-c",
            DRIVER,
            *[f"examples/doctor/correct/{name}" for name in CORRECT],
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    printed = [line for line in plain.stdout.splitlines() if not line.startswith("@@")]
    watched = []
    for name in CORRECT:
        status, report, stdout = doctor(f"examples/doctor/correct/{name}", tmp_path)
        assert status == 0
        assert report.failure is None and report.silent == () and report.starved == ()
        assert report.watched.backwards >= 3
        watched += stdout.splitlines()
    assert watched == printed  # the same losses, to the last digit printed
