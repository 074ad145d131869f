"""Real code at a glance: a training loop, a model's forward and the lessons, at 100 columns.

The goals, each counted on real runs of ``examples/train.py`` and ``tests/data/glance/gpt.py``:
``run examples/train.py`` (a 20-step MLP loop) in at most 150 lines, saying how many
iterations ran; ``snoop()`` of a 2-layer GPT's forward in at most 200 lines;
no metadata read in ``optimizer-step``'s default ``ran:``. Folding is the
renderers' business: the JSON keeps every fact, and each fold is one option away.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from tensortrace.render.ops import METADATA_READS
from tensortrace.trace import Trace

from conftest import REPO, cli, write_scenario

GLANCE = REPO / "tests" / "data" / "glance"
TRAIN = str(REPO / "examples" / "train.py")


def flat(text: str) -> str:
    """The text with its lines joined: what a line says, wherever the console wrapped it."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
def train_json(tmp_path_factory) -> str:
    """``train.py``'s trace, recorded once, rendered again by each test."""
    path = tmp_path_factory.mktemp("glance") / "train.json"
    result = cli("run", TRAIN, "-o", str(path))
    assert result.returncode == 0, result.stderr
    return str(path)


def test_a_training_loop_fits_in_150_lines_and_says_how_many_iterations_ran(train_json):
    text = cli("render", train_json, "--width", "100").stdout
    lines = text.splitlines()
    assert len(lines) <= 150, len(lines)
    assert "Step 7 · line 12 · 20 iterations" in text
    assert "iteration 1 of 20:" in text
    # the passes after the ones shown: one line, with the loss moving and the weights written
    folded = re.search(
        r"^  iterations (\d+)–20: the same operations; loss ([\d.]+) → ([\d.]+)", text, re.M
    )
    assert folded is not None
    assert float(folded.group(2)) > float(folded.group(3))  # it learned
    assert "wrote model.0.weight, model.0.bias, model.2.weight, model.2.bias" in flat(text)
    # the gradient-flow tree, drawn once with the count
    assert text.count("1. → MseLossBackward0") == 1
    assert "gradient flow of Tensor.backward (the same tree in 20 iterations):" in text
    # the calls the code wrote, under the names it wrote them
    assert "opt.step() writes S3 (model.0.weight)" in text
    assert "Tensor.grad(" not in text and "Tensor.is_sparse" not in text


def test_every_pass_is_one_option_away(train_json):
    text = cli("render", train_json, "--width", "100", "--iterations", "all").stdout
    assert "iteration 20 of 20:" in text and "iterations 3–20" not in text
    assert text.count("1. → MseLossBackward0") == 1  # the same tree: said, not redrawn
    assert text.count("the same tree as in iteration 1") == 19


def test_the_json_keeps_every_operation_and_every_mark(train_json):
    trace = Trace.from_dict(json.loads(open(train_json, encoding="utf-8").read()))
    loop = trace.steps[6].loop
    assert loop.passes == 20 and len(loop.marks) == 20
    ops = trace.steps[6].ops
    assert sum(1 for op in ops if op.name == "torch.Tensor.backward") == 20
    assert sum(1 for op in ops if op.name == "torch.Tensor.grad.__get__") >= 60
    assert len(trace.steps[6].flow) == 20


def test_a_gpt_forward_under_snoop_fits_in_200_lines():
    sys.path.insert(0, str(GLANCE))
    try:
        import gpt
    finally:
        sys.path.remove(str(GLANCE))
    stream = __import__("io").StringIO()
    saved, sys.stderr = sys.stderr, stream
    try:
        gpt.main(width=100)
    finally:
        sys.stderr = saved
    text = stream.getvalue()
    assert len(text.splitlines()) <= 200, len(text.splitlines())
    # the parameters: one compact table, once
    assert "grad norm" in text and text.count("self.transformer.h.1.mlp.c_fc.weight") == 1
    assert "block: the same objects as self.transformer.h.0 (13 tensors)" in text
    assert "iteration 2 (steps 9–10): the same operations" in text
    assert "block(x) → x (" in text


def test_optimizer_step_lists_no_metadata_read():
    text = cli("run", "optimizer-step", "--width", "100").stdout
    ran = [line.strip() for line in text.splitlines() if line.startswith("    ")]
    reads = [line for line in ran if any(line.startswith(name + "(") for name in METADATA_READS)]
    assert reads == []
    assert "opt.step() writes S1 (lin.weight, snap), S2 (lin.bias) · each version 1 → 2" in text
    assert "opt.zero_grad() sets .grad of lin.weight, lin.bias" in text
    every = cli("run", "optimizer-step", "--width", "100", "--ops", "all").stdout
    assert every.count("Tensor.dim(lin.weight)") == 2 and "Tensor.is_leaf(lin.bias)" in every
    assert "Tensor.grad(lin.weight) → lin.weight.grad" in every


def test_a_deepcopy_is_said_as_written():
    text = cli("run", "ema-update", "--width", "100").stdout
    assert "copy.deepcopy(target) → twin.weight (S5, new), twin.bias (S6, new)" in text
    assert "Tensor.requires_grad(" not in text


def test_a_note_keeps_its_formula(tmp_path):
    path = write_scenario(
        tmp_path,
        """
        title: a formula
        steps:
          - run: w = torch.ones(2, requires_grad=True)
            note: "the grad of `w` is 2*w*x + b_1, not 2wx"
        """,
    )
    console = cli("run", str(path)).stdout
    assert "the grad of w is 2*w*x + b_1, not 2wx" in console
    markdown = cli("run", str(path), "--format", "markdown").stdout
    assert "the grad of `w` is 2\\*w\\*x + b\\_1, not 2wx" in markdown
    assert "]8;" not in console  # no OSC 8 link


def test_a_width_too_narrow_is_refused_in_one_line():
    result = cli("run", "detach", "--width", "5")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "tensortrace: --width 5 is too narrow: the console needs at least 40 columns\n"
    )


def test_graph_names_from_the_command_line_are_blamed_on_the_option():
    result = cli("run", "detach", "--graph", "nosuch")
    assert "'nosuch' in --graph is never bound in this scenario" in result.stdout
    assert "'graph' of step" not in result.stdout
    bad = cli("run", "detach", "--graph", "a b")
    assert bad.returncode == 2
    assert bad.stderr.startswith("tensortrace: --graph 'a b' is not a name")


def test_the_legend_says_where_skipped_label_numbers_went():
    text = cli("run", "optimizer-step", "--width", "100").stdout
    said = "label numbers the tables skip (S3, then S6) went to unnamed temporaries"
    assert said in flat(text)


def test_values_past_a_few_elements_are_one_line_and_full_is_one_option_away(train_json):
    text = cli("render", train_json, "--width", "100", "--steps", "2").stdout
    assert re.search(r"x \(new\)\s+\[16, 4\] x∈\[-2\.12, 3\.41\] μ=0\.0927 σ=1\.05", text)
    full = cli("render", train_json, "--width", "100", "--steps", "2", "--values", "full").stdout
    assert "[[-1.126, -1.152, -0.2506, -0.4339]," in full


def test_the_readme_quotes_what_the_loop_prints(train_json):
    readme = flat((REPO / "README.md").read_text(encoding="utf-8"))
    text = flat(cli("render", train_json, "--width", "250").stdout)  # no cell wraps
    quoted = re.findall(r"`(iterations 3–20: [^`]*|\[16, 4\] x∈[^`]*)`", readme)
    assert len(quoted) == 2
    for sample in quoted:  # each as printed, up to the ellipsis that cuts it short
        assert sample.split("…")[0].rstrip(", ") in text, sample


def test_a_line_repeated_at_once_is_said_once_with_a_count(tmp_path):
    path = write_scenario(
        tmp_path,
        """
        title: three backward calls
        setup: |
          w = torch.ones(2, requires_grad=True)
          y = (w * 3).sum()
        steps:
          - run: y.backward(retain_graph=True); y.backward(retain_graph=True); y.backward()
        """,
    )
    text = cli("run", str(path), "--width", "100").stdout
    # the first finds no .grad to write; the two after it write the same one
    assert "    Tensor.backward(y)\n    Tensor.backward(y) writes S5 (w.grad) ×2\n" in text
    every = cli("run", str(path), "--width", "100", "--ops", "all").stdout
    assert "×2" not in every and every.count("Tensor.backward(y) writes S5 (w.grad)") == 2


def test_markdown_and_html_fold_the_same_way_a_click_away(train_json):
    markdown = cli("render", train_json, "--format", "markdown").stdout
    assert "<details><summary>iterations 3–20: the same operations;" in markdown
    assert "<details><summary>No tensor changed: x, y, model.0.weight" in markdown
    page = cli("render", train_json, "--format", "html").stdout
    assert '<details class="tt-ops"><summary>iterations 3–20: the same operations;' in page
    assert '<details class="tt-unchanged"><summary>no tensor changed: x, y' in page


def test_a_pass_that_differs_in_kind_is_shown_with_the_reason(tmp_path):
    path = write_scenario(
        tmp_path,
        """
        title: a loop with one odd pass
        setup: |
          import warnings
          w = torch.zeros(2, requires_grad=True)
        steps:
          - run: |
              for i in range(6):
                  loss = (w * 2).sum()
                  loss.backward()
                  if i == 3:
                      warnings.warn("the fourth pass")
                  if i == 4:
                      w.requires_grad_(False)
        """,
    )
    text = flat(cli("run", str(path), "--trust", "--width", "100").stdout)
    assert "Step 1 · line 7 · 6 iterations" in text
    assert "iteration 1 of 6:" in text
    assert "iterations 2–3: the same operations" in text
    assert "iteration 4 of 6 (1 warning):" in text
    assert "iteration 5 of 6 (calls Tensor.requires_grad_):" in text
    # the last pass raised: its loss needs no grad any more, and no graph carried a gradient
    assert "iteration 6 of 6 (another gradient flow; it raised):" in text
    assert "gradient flow of Tensor.backward (the same tree in 5 iterations):" in text


def test_snoop_folds_the_passes_of_a_loop_unless_one_differs(tmp_path):
    import tensortrace
    import torch

    def f():
        w = torch.zeros(2)
        for i in range(6):
            w.add_(1.0)
            if i == 4:
                extra = w.clone()  # noqa: F841 - a new tensor in the fifth pass
        return w

    folded = tmp_path / "folded.txt"
    tensortrace.snoop(str(folded), fmt="console", width=100)(f)()
    text = folded.read_text(encoding="utf-8")
    assert re.search(r"iterations 2–4 \(steps \d+–\d+\): the same operations; changed w", text)
    assert "iteration 6 (steps" in text
    assert "extra (new)" in text  # the fifth pass, drawn
    every = tmp_path / "every.txt"
    tensortrace.snoop(str(every), fmt="console", width=100, iterations="all")(f)()
    assert "the same operations" not in every.read_text(encoding="utf-8")
    whole = tmp_path / "whole.txt"

    def g():
        w = torch.arange(12.0)
        return w

    tensortrace.snoop(str(folded), fmt="console", width=100)(g)()
    assert "[12] x∈[0., 11.] μ=5.5" in folded.read_text(encoding="utf-8")
    tensortrace.snoop(str(whole), fmt="console", width=100, values="full")(g)()
    assert "x∈" not in whole.read_text(encoding="utf-8")
    assert "9., 10., 11.]" in whole.read_text(encoding="utf-8")
    with pytest.raises(tensortrace.UsageError, match="iterations='some' is not one of first, all"):
        tensortrace.snoop(iterations="some")
    with pytest.raises(tensortrace.UsageError, match="width=5 is too narrow"):
        tensortrace.snoop(width=5)


def test_backward_calls_through_the_same_tree_are_drawn_once_with_the_first_calls_values(
    tmp_path,
):
    """Two retained backward calls in one step: one tree, whose leaf grad is the first call's
    (None → [2., 2.]), and a title that says so; the second call's [2., 2.] → [4., 4.] is in
    the table's grad column, not claimed by the tree."""
    path = write_scenario(
        tmp_path,
        """
        title: repeat
        setup: x = torch.tensor([1.0, 2.0], requires_grad=True)
        steps:
          - run: |
              y = (x * 2).sum()
              y.backward(retain_graph=True)
              y.backward(retain_graph=True)
        """,
    )
    text = cli("run", str(path), "--trust", "--width", "100").stdout
    assert (
        "gradient flow of Tensor.backward (the same tree 2 times; the first call's values):" in text
    )
    assert text.count("gradient flow of") == 1
    assert "x.grad: None → [2., 2.]" in text
    assert "[4., 4.]" in text  # what both calls left in x.grad, from the table
