"""Fixes are checked by running them: edits of named lines, made on copies in a child process,
never on the user's files; each fix comes back passed, failed (with the copy's error) or
unchecked (and why)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tensortrace.doctor import edits
from tensortrace.doctor.verify import Script, Target, check_fixes, locate
from tensortrace.trace.doctor import Edit, Fix

RNN = """\
import torch

torch.manual_seed(0)
W = torch.randn(3, 5, requires_grad=True)
U = torch.randn(5, 5, requires_grad=True)
opt = torch.optim.SGD([W, U], lr=0.01)
h = torch.zeros(1, 5)
for step in range(3):
    h = torch.tanh(torch.randn(1, 3) @ W + h @ U)
    loss = h.pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained")
"""


def write(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def with_retain(stmt: ast.stmt) -> ast.stmt:
    stmt.value.keywords.append(ast.keyword(arg="retain_graph", value=ast.Constant(True)))
    return stmt


def test_a_fix_that_works_passes_and_one_that_does_not_fails_with_its_error(tmp_path):
    script = write(tmp_path, RNN)
    before = script.read_text(encoding="utf-8")
    path = str(script)
    detach = Fix(text="detach h", edits=(edits.insert_before(path, 9, "h = h.detach()"),))
    retain = Fix(text="retain", edits=(edits.rewrite(path, 12, with_retain),))
    assert retain.edits[0].text == "    loss.backward(retain_graph=True)"
    checked = check_fixes(Script.of(path), [detach, retain], Target(path, 12, run=2), budget=120)
    assert checked[0].check.verdict == "passed", checked[0].check
    assert checked[0].check.detail == "the backward at line 12 passed 3 times on a copy"
    assert checked[1].check.verdict == "failed"
    assert checked[1].check.detail.startswith("RuntimeError: one of the variables needed")
    assert checked[1].check.detail.endswith(f"at {path}:12")
    assert script.read_text(encoding="utf-8") == before  # the user's file is never written


def test_an_edited_module_is_served_to_the_script_that_imports_it(tmp_path):
    write(tmp_path, "def scale():\n    return 1\n", name="helper.py")
    script = write(
        tmp_path,
        """\
        import sys
        import helper
        if helper.scale() != 2:
            sys.exit(3)
        print(__file__)
        """,
    )
    fix = Fix(
        text="scale 2",
        edits=(Edit(path=str(tmp_path / "helper.py"), line=2, end=2, text="    return 2"),),
    )
    unfixed = Fix(text="nothing", edits=(Edit(path=str(script), line=1, end=1, text="import sys"),))
    checked = check_fixes(Script.of(str(script)), [fix, unfixed], None, budget=120)
    assert checked[0].check.verdict == "passed", checked[0].check
    assert checked[0].check.detail == "a copy ran to its end"
    assert checked[1].check == checked[1].check.__class__(
        verdict="failed", detail="a copy exited with status 3"
    )


def test_a_copy_that_runs_past_the_budget_is_unchecked(tmp_path):
    script = write(tmp_path, "import time\ntime.sleep(60)\n")
    fix = Fix(text="x", edits=(Edit(path=str(script), line=1, end=0, text="x = 1"),))
    (checked,) = check_fixes(Script.of(str(script)), [fix], Target(str(script), 2), budget=2)
    assert checked.check.verdict == "unchecked"
    assert "within the time budget" in checked.check.detail


def test_edits_that_do_not_parse_are_not_run(tmp_path):
    script = write(tmp_path, "x = 1\n")
    fix = Fix(text="x", edits=(Edit(path=str(script), line=1, end=1, text="x = ("),))
    (checked,) = check_fixes(Script.of(str(script)), [fix], None, budget=10)
    assert checked.check.verdict == "unchecked"


def test_advice_without_edits_is_left_as_it_is(tmp_path):
    script = write(tmp_path, "x = 1\n")
    advice = Fix(text="think again")
    assert check_fixes(Script.of(str(script)), [advice], None, budget=10) == (advice,)


# --- edits from the syntax tree -------------------------------------------------------------


SOURCE = """\
def train(model, opt, x):
    for step in range(3):
        loss = model(
            x,
        ).sum()  # the loss
        opt.step()
        loss.backward()
"""


def test_a_statement_over_several_lines_is_edited_whole(tmp_path):
    path = str(write(tmp_path, SOURCE))
    stmt = edits.statement_at(path, 4)
    assert (stmt.lineno, stmt.end_lineno) == (3, 5)
    edit = edits.rewrite(path, 4, lambda s: edits.replace_reads(s, "x", "x.detach()"))
    assert edit == Edit(
        path=path,
        line=3,
        end=5,
        text="        loss = model(x.detach()).sum()  # the loss",
        was="        loss = model(\n            x,\n        ).sum()  # the loss",
    )
    assert edits.statement_at(path, 2).lineno == 2  # a loop's header is the loop


def test_a_move_keeps_the_statement_and_the_awaited_line_follows_it(tmp_path):
    path = str(write(tmp_path, SOURCE))
    moved = edits.move(path, 6, after=7)
    new = edits.apply_edits(SOURCE, moved)
    assert new.splitlines()[-2:] == ["        loss.backward()", "        opt.step()"]
    assert locate(7, SOURCE, moved) == 6
    assert locate(6, SOURCE, moved) == 7
    assert edits.move(path, 6, after=1) == ()  # not in the same block: no move


@pytest.mark.parametrize("line", [3, 4, 5])
def test_inserting_before_any_line_of_a_statement_goes_before_the_statement(tmp_path, line):
    path = str(write(tmp_path, SOURCE))
    edit = edits.insert_before(path, line, "x = x.detach()")
    assert edit == Edit(path=path, line=3, end=2, text="        x = x.detach()")
