"""What writing a trace costs follows what changed in it, not steps times tensors.

500 tensors that no step changes, over a few hundred steps, made the command's own
process peak at gigabytes while it wrote a page of hundreds of megabytes from a 19 KB
file. A record that several steps share is written once (JSON and the page's embedded
document), the page counts unchanged rows rather than drawing them, the document is
written a piece at a time, and the aliasing notes of a step cost in proportion to it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from render_fixtures import tensor
from tensortrace.errors import TraceFormatError
from tensortrace.render import RenderOptions, render
from tensortrace.render.facts import NOTE_NAMES, aliasing_notes
from tensortrace.render.json import traces_from_dict, traces_from_json
from tensortrace.trace import Environment, ScenarioInfo, Step, Trace, evolve
from tensortrace.trace.document import record_to_dict, trace_to_dict

DOCS = Path(__file__).resolve().parents[2] / "docs"


def wide_trace(steps: int, tensors: int = 100) -> Trace:
    """``tensors`` tensors set up once, then ``steps`` steps that change one of them each."""
    states = tuple(tensor(f"x{i}", storage=f"S{i + 1}") for i in range(tensors))
    setup = Step(index=0, code="setup", line=1, tensors=states)
    out = []
    for k in range(1, steps + 1):
        changed = evolve(states[0], version=k)
        states = (changed,) + states[1:]
        out.append(Step(index=k, code=f"x0.add_({k})", line=k + 1, tensors=states))
    return Trace(
        scenario=ScenarioInfo(title="wide"),
        environment=Environment(tensortrace="0", torch="0", python="0", device="cpu"),
        setup=setup,
        steps=tuple(out),
    )


def test_a_tensor_no_step_changed_is_written_once() -> None:
    trace = wide_trace(30)
    text = render([trace], "json")
    assert text.count('"name":"x7"') == 1  # its record, once
    data = json.loads(text)
    assert data["format_version"] == 4
    assert data["steps"][12]["tensors"][7] == ["x7", 0]  # a reference to the setup's
    assert data["steps"][12]["tensors"][0]["version"] == 13  # what changed, in full
    assert traces_from_json(text.encode()) == [trace]
    again = traces_from_json(text.encode())[0]
    assert again.steps[5].tensors[7] is again.steps[20].tensors[7]  # shared when read, too


def test_a_reference_stands_for_a_tensor_unchanged_since_the_step_before() -> None:
    """``x`` moves to another storage and back (``old = x; x = y; x = old``): its record at
    step 3 equals the one of step 1, but it changed since step 2, so it is written in full
    there, and a question about changes that reads the records alone sees it."""
    a, b = tensor("x", storage="S1"), tensor("x", storage="S2")
    steps = tuple(
        Step(index=k, code=f"x = {name}", line=k, tensors=(state,))
        for k, (name, state) in enumerate([("a", a), ("b", b), ("a", a), ("a", a)], 1)
    )
    trace = Trace(
        scenario=ScenarioInfo(title="back"),
        environment=Environment(tensortrace="0", torch="0", python="0", device="cpu"),
        steps=steps,
    )
    data = json.loads(render([trace], "json"))
    assert [s["tensors"][0] for s in data["steps"]][2:] == [record_to_dict(a), ["x", 3]]
    assert traces_from_dict(data) == [trace]


def test_a_name_that_repeats_in_a_step_is_never_referred_to() -> None:
    """A reference names a tensor by name: in a step that holds two ``x``, it could not say
    which, so the step after writes its records in full."""
    one, two = tensor("x", storage="S1"), tensor("x", storage="S2")
    trace = Trace(
        scenario=ScenarioInfo(title="twice"),
        environment=Environment(tensortrace="0", torch="0", python="0", device="cpu"),
        steps=(
            Step(index=1, code="pass", line=1, tensors=(one, two)),
            Step(index=2, code="pass", line=2, tensors=(one,)),
        ),
    )
    data = json.loads(render([trace], "json"))
    assert data["steps"][1]["tensors"] == [record_to_dict(one)]
    assert traces_from_dict(data) == [trace]


@pytest.mark.parametrize("form", ["json", "html"])
def test_the_output_grows_with_the_changes_not_with_steps_times_tensors(form: str) -> None:
    small, large = (len(render([wide_trace(n)], form)) for n in (20, 60))
    per_step = (large - small) / 40
    assert per_step < 6_000, per_step  # each of 100 tensors written each step: over 20,000


def test_the_page_counts_the_unchanged_rows_of_a_wide_table() -> None:
    page = render([wide_trace(3)], "html")
    assert page.count("99 more tensors, unchanged since the step before") == 2
    full = render([wide_trace(3)], "html", RenderOptions(all_rows=True))
    row = full.count('data-tensor="x50"') // 3  # its cells in one table
    assert row > 0 and full.count('data-tensor="x50"') == 3 * row
    assert page.count('data-tensor="x50"') == row  # the first table on the page shows every row


def test_a_reference_to_nothing_is_refused_with_its_place() -> None:
    body = wide_trace(3).to_dict()
    body["steps"][1]["tensors"][4] = ["x4", 7]
    with pytest.raises(TraceFormatError, match=r"\$\.steps\[1\]\.tensors\[4\]: a reference to"):
        traces_from_dict(body)
    old = {**trace_to_dict(wide_trace(3)), "format_version": 3}
    with pytest.raises(TraceFormatError, match="only version 4 documents hold"):
        traces_from_dict(old)


def test_a_document_of_version_3_still_reads_the_same() -> None:
    trace = wide_trace(5)
    old = {**trace_to_dict(trace, references=False), "format_version": 3}
    assert traces_from_dict(old) == [trace]
    assert json.loads(render(traces_from_dict(old), "json")) == trace.to_dict()


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_the_jq_recipe_in_the_docs_expands_every_reference(tmp_path: Path) -> None:
    text = (DOCS / "json.md").read_text(encoding="utf-8")
    block = text.split("expand the references once:\n\n```console\n$ jq '", 1)[1]
    program = block.split("' trace.json\n```", 1)[0]
    trace = wide_trace(8)
    path = tmp_path / "trace.json"
    path.write_text(render([trace], "json"), encoding="utf-8")
    done = subprocess.run(["jq", program, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    expanded = json.loads(done.stdout)
    assert expanded["steps"] == trace_to_dict(trace, references=False)["steps"]


def test_aliasing_notes_cost_in_proportion_to_the_step() -> None:
    """300 views of one storage, half named by the step: each note used to list every name
    and look up the step's tensors again for each, cubic in the tensors."""
    base = tensor("base", storage="S1")

    def step(index: int, version: int) -> Step:
        views = tuple(
            evolve(base, name=f"v{i}", version=version, is_view=True, base="base")
            for i in range(300)
        )
        code = "vs = [" + ", ".join(f"v{i}" for i in range(150)) + "]\nbase.add_(1)"
        return Step(
            index=index, code=code, line=1, tensors=(evolve(base, version=version),) + views
        )

    before, after = step(1, 0), step(2, 1)
    began = time.process_time()
    notes = aliasing_notes(before, after)
    spent = time.process_time() - began
    assert len(notes) == 150 and spent < 0.5, spent
    assert len(notes[0].via) == NOTE_NAMES and notes[0].more == 151 - NOTE_NAMES
    assert notes[0].describe().endswith(f"and {151 - NOTE_NAMES} more")


# The peak of this process's own memory: VmHWM starts afresh at exec, while getrusage's
# ru_maxrss keeps the peak of the process it was forked from (a large test worker).
PEAK = """
import sys
from tensortrace.__main__ import main
sys.argv = ["tensortrace", *sys.argv[1:]]
try:
    main()
except SystemExit as stop:
    code = stop.code
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(peak // 1024, code)
"""


@pytest.mark.parametrize("form", ["html", "json"])
def test_the_commands_own_memory_stays_under_512_mib(tmp_path: Path, form: str) -> None:
    """500 unchanged tensors over 300 steps: the command's process (not the child that
    traces) peaks far under 512 MiB while it writes (1.7 GB for the page before)."""
    steps = "".join(f"  - k = {i}\n" for i in range(300))
    path = tmp_path / "wide.yaml"
    path.write_text(
        f"title: wide\nsetup: xs = [torch.ones(3) * i for i in range(500)]\nsteps:\n{steps}",
        encoding="utf-8",
    )
    out = tmp_path / f"wide.{form}"
    done = subprocess.run(
        # generous limits: on a loaded machine a step of 500 tensors may take seconds
        [sys.executable, "-c", PEAK, "run", str(path), "-o", str(out), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak, code = done.stdout.split()
    assert code == "0", done.stderr[-2000:]
    assert int(peak) < 512, peak
    assert out.stat().st_size < 20 * 2**20
