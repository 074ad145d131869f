"""``%load_ext tensortrace`` in a real kernel: one notebook, run once, read cell by cell."""

from __future__ import annotations

import html
import re

import pytest

from conftest import REPO, fenced

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

CELLS = [
    "%load_ext tensortrace",
    # 1: the user's own code, traced statement by statement in the notebook's namespace
    "%%tensortrace --graph c\n"
    "import torch\n"
    "a = torch.zeros(4)\n"
    "b = a[1:]\n"
    "for _ in range(2):\n"
    "    b.add_(1)\n"
    "c = (torch.ones(2, requires_grad=True) * 3).sum()\n"
    "print('printed by the cell')\n"
    "b.sum()",
    # 2: what the cell bound is there, as after a plain run
    "print(a.tolist(), b.tolist(), a._version, "
    "sorted(k for k in globals() if 'tensortrace' in k.lower()))",
    # 3: a scenario, traced as tensortrace run traces it
    "%tensortrace detach",
    # 4: the user's error: recorded, shown, then raised in the notebook
    "%%tensortrace\nx = torch.ones(2, 3)\ny = x.t().view(-1)",
    "print('x' in globals(), 'y' in globals())",
    "%tensortrace nosuch",
    # 7: the recording a scenario gets: the ATen operations, a prediction, a gradient flow
    "%%tensortrace --ops aten\n"
    "w = torch.ones(3, requires_grad=True)\n"
    "s = torch.sigmoid(w)\n"
    "s.mul_(2)\n"
    "(w * 3).sum().backward()",
    # 8: an option run does not take is one sentence
    "%%tensortrace --ops every\nq = 1",
]
# the examples of README.md and docs/python.md, run after the cells above
EXAMPLES = [
    (f"{path.name}:{line}", text)
    for path in (REPO / "README.md", REPO / "docs" / "python.md")
    for line, text in fenced(path, "ipython")
]


@pytest.fixture(scope="module")
def notebook():
    cells = CELLS + [text for _, text in EXAMPLES]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True)
    client.execute()
    return nb


def _outputs(nb, index, kind):
    return [o for o in nb.cells[index].outputs if o.output_type == kind]


def _shown_text(nb, index):
    (shown,) = _outputs(nb, index, "display_data")
    assert shown.data["text/html"].startswith("<div")
    return html.unescape(re.sub(r"<[^>]+>", "", shown.data["text/html"])), shown.data["text/plain"]


def test_the_cell_magic_shows_each_statement_with_its_real_facts(notebook):
    text, plain = _shown_text(notebook, 1)
    for code in (
        "a = torch.zeros(4)",
        "b = a[1:]",
        "for _ in range(2):",
        "c = (torch.ones(2, requires_grad=True) * 3).sum()",
    ):
        assert code in text, code
    assert "shared memory: S1 holds a, b" in text
    assert (
        "SumBackward0" in text and "MulBackward0" in text
    )  # the graph of c, asked for with --graph
    assert "b.add_(1)" in plain
    assert text.count("b.add_(1)") == 1  # the loop is one step, shown whole
    assert not _outputs(notebook, 1, "error")


def test_the_cell_runs_as_a_plain_cell_does(notebook):
    (printed,) = _outputs(notebook, 1, "stream")
    assert printed.text == "printed by the cell\n"
    (value,) = _outputs(notebook, 1, "execute_result")
    assert value.data["text/plain"] == "tensor(6.)"
    _, plain = _shown_text(notebook, 1)
    assert "Tensor.sum(b)" in plain  # what the last line ran, without drawing its value
    assert "__repr__" not in plain
    (after,) = _outputs(notebook, 2, "stream")
    assert after.text == "[0.0, 2.0, 2.0, 2.0] [2.0, 2.0, 2.0] 2 []\n"


def test_the_line_magic_traces_a_bundled_scenario(notebook):
    text, _ = _shown_text(notebook, 3)
    assert "detach(): same memory, same version counter, no graph" in text
    assert "b = a.detach()" in text and "PASSED" in text


def test_an_error_in_the_cell_is_recorded_then_raised(notebook):
    text, _ = _shown_text(notebook, 4)
    assert "y = x.t().view(-1)" in text and "RuntimeError" in text
    (error,) = _outputs(notebook, 4, "error")
    assert error.ename == "RuntimeError" and "view size is not compatible" in error.evalue
    (after,) = _outputs(notebook, 5, "stream")
    assert after.text == "True False\n"


def test_a_bad_target_is_one_sentence(notebook):
    (said,) = _outputs(notebook, 6, "stream")
    assert said.name == "stderr"
    assert said.text.startswith(
        "tensortrace: nosuch: no such file, and no bundled scenario named 'nosuch'"
    )
    assert not _outputs(notebook, 6, "error")


def test_the_documented_examples_run_and_show_a_trace(notebook):
    assert len(EXAMPLES) >= 4
    for i, (where, text) in enumerate(EXAMPLES, len(CELLS)):
        cell = notebook.cells[i]
        assert not _outputs(notebook, i, "error"), f"{where}: {_outputs(notebook, i, 'error')}"
        assert not [o for o in _outputs(notebook, i, "stream") if o.name == "stderr"], where
        if text.startswith("%tensortrace") or text.startswith("%%tensortrace"):
            shown, _ = _shown_text(notebook, i)
            assert "PASSED" in shown, where
        assert cell.source == text


def test_the_cell_magic_titles_its_trace_with_the_cells_own_number(notebook):
    """The notebook shows In [2] beside the cell; the trace says cell [2], not the next number."""
    text, _ = _shown_text(notebook, 1)
    assert notebook.cells[1].execution_count == 2
    assert "cell [2]" in text and "cell [3]" not in text


def test_the_cell_magic_records_operations_predictions_and_gradient_flow(notebook):
    """What a scenario's step records, a cell's statement records: the same recorder."""
    _, plain = _shown_text(notebook, 7)
    said = " ".join(plain.split())  # a long line wraps at the notebook's width
    assert "aten::sigmoid(w) → s (S5, new)" in said  # --ops aten: the ATen level is shown
    assert "aten::mul_(s) writes S5 (s) · s: version 0 → 1" in said
    assert "backward through `s` will fail: SigmoidBackward0 saved `s` (S5) at version 0" in said
    assert "gradient flow of Tensor.backward" in said
    assert "AccumulateGrad → w.grad: None → [3., 3., 3.]" in said
    assert not _outputs(notebook, 7, "error")


def test_an_unknown_ops_level_is_one_sentence(notebook):
    (said,) = _outputs(notebook, 8, "stream")
    assert said.name == "stderr"
    assert said.text == (
        "tensortrace: %%tensortrace: --ops 'every' is not one of none, calls, all, aten\n"
    )
    assert not _outputs(notebook, 8, "error") and not _outputs(notebook, 8, "display_data")
