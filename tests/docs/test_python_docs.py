"""docs/python.md's examples run: its ```python blocks, in order, as one script
(its ```ipython blocks run in a real kernel, in tests/integrations/test_jupyter.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Tuple

import pytest

from conftest import REPO, Result, fenced, scripts_in_one_python

PAGE = REPO / "docs" / "python.md"


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> Tuple[Path, Dict[str, Result]]:
    """The page's ```python blocks in order as one script, and its error example as a script of
    its own, each run as ``NO_COLOR=1 python SCRIPT`` would, both in one Python (one start-up
    that imports torch). The folder they ran in, and each run by script name."""
    cwd = tmp_path_factory.mktemp("python-docs")
    blocks = fenced(PAGE, "python")
    (error,) = [b for b in blocks if "except tensortrace.PolicyError" in b[1]]
    scripts = {"example.py": blocks, "error_example.py": [(0, "import tensortrace\n"), error]}
    for name, parts in scripts.items():
        (cwd / name).write_text("".join(text for _, text in parts), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_COLOR", "COLUMNS")}
    env["NO_COLOR"] = "1"
    runs = scripts_in_one_python([cwd / name for name in scripts], cwd=cwd, env=env)
    return cwd, {path.name: result for path, result in runs.items()}


def test_every_python_example_runs(examples):
    assert len(fenced(PAGE, "python")) >= 6
    tmp_path, runs = examples
    result = runs["example.py"]
    assert result.returncode == 0, f"docs/python.md examples failed:\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert "detach(): same memory, same version counter, no graph passed" in out
    assert "(0.0, 1.0, 1.0) True" in out
    assert "['clone-detach', 'detach-clone', 'torch-tensor', 'new-tensor', 'deepcopy']" in out
    assert "pass safe=False to run it as plain Python" in out
    assert "['torch.Tensor.mul_', 'aten::mul_']" in out  # snoop(): what a line ran
    assert "backward through `y` will fail: SigmoidBackward0 saved `y` (S" in out
    assert "changed by `y.mul_(2)` at step 3" in out and "torch.Tensor.backward" in out
    assert "1 True" in out.splitlines()[-1]
    # the training step, line by line: step() bumps the weight's version, zero_grad() drops its grad
    rows = [
        line.split(" ", 1)[1].rsplit(" version ", 1)
        for line in out.splitlines()
        if line[:1].isdigit() and " version " in line
    ]
    codes = [code for code, _ in rows]
    assert codes == [
        "loss = torch.nn.functional.mse_loss(model(x), y)",
        "loss.backward()",
        "opt.step()",
        "opt.zero_grad()",
        "return loss",
    ]
    versions = [int(facts.split()[0]) for _, facts in rows]
    grads = [facts.split()[-1] for _, facts in rows]
    assert (
        versions[1] == versions[0]
        and versions[2] == versions[1] + 1
        and versions[4] == versions[3] == versions[2]
    )
    assert grads == ["False", "True", "True", "False", "False"]
    assert (tmp_path / "train_step.json").is_file() and (
        tmp_path / "block.md"
    ).read_text().startswith("#")


def test_the_error_example_prints_what_the_comment_says(examples):
    (block,) = [b for b in fenced(PAGE, "python") if "except tensortrace.PolicyError" in b[1]]
    promised = block[1].split("# ", 1)[1].strip()
    head, tail = promised.split("(...)")
    result = examples[1]["error_example.py"]
    assert result.returncode == 0, result.stderr
    said = result.stdout.strip()
    assert said.startswith(head) and said.endswith(tail), said
