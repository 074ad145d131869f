"""docs/python.md's examples run: its ```python blocks, in order, as one script
(its ```ipython blocks run in a real kernel, in tests/integrations/test_jupyter.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

from conftest import REPO, fenced

PAGE = REPO / "docs" / "python.md"


def run_script(blocks: List[Tuple[int, str]], cwd: Path) -> subprocess.CompletedProcess:
    script = cwd / "example.py"
    script.write_text("".join(text for _, text in blocks), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FORCE_COLOR", "COLUMNS")}
    env["NO_COLOR"] = "1"
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )


def test_every_python_example_runs(tmp_path):
    blocks = fenced(PAGE, "python")
    assert len(blocks) >= 6
    result = run_script(blocks, tmp_path)
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


def test_the_error_example_prints_what_the_comment_says(tmp_path):
    (block,) = [b for b in fenced(PAGE, "python") if "except tensortrace.PolicyError" in b[1]]
    promised = block[1].split("# ", 1)[1].strip()
    head, tail = promised.split("(...)")
    result = run_script([(0, "import tensortrace\n"), block], tmp_path)
    assert result.returncode == 0, result.stderr
    said = result.stdout.strip()
    assert said.startswith(head) and said.endswith(tail), said
