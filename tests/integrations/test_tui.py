"""`tensortrace explore`: the terminal explorer, driven through textual's pilot.

Every check compares what the explorer shows with the facts the trace
recorded (storage labels, step indexes, names), never with a list written
here. Snapshots (tests/integrations/__snapshots__/test_tui/) pin three bundled scenarios
at 80x24; update them with ``pytest tests/integrations/test_tui.py --snapshot-update``
after looking at the change.
"""

from __future__ import annotations

import asyncio
import html
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("textual")

from tensortrace.cli.tracefile import load_traces  # noqa: E402
from tensortrace.render.explore import FOLLOW_MARK  # noqa: E402
from tensortrace.render.facts import all_steps  # noqa: E402
from tensortrace.tui import INSTALL_HINT  # noqa: E402
from tensortrace.tui.app import ExplorerApp  # noqa: E402
from tensortrace.tui.export import offline_svg  # noqa: E402

from conftest import REPO, cli  # noqa: E402

SIZE = (80, 24)
SCREENSHOT = REPO / "docs" / "explore-detach.svg"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Saved JSON traces of a few bundled scenarios, recorded once for the module."""
    folder = tmp_path_factory.mktemp("explore")

    def save(name: str) -> Path:
        path = folder / f"{name}.json"
        if not path.exists():
            result = cli("run", name, "-o", str(path))
            assert result.returncode in (0, 1), result.stderr
        return path

    return save


@pytest.fixture(autouse=True)
def _colour(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)


def drive(app: ExplorerApp, *keys: str, check=None):
    """Run the app headless at 80x24, press ``keys``, then call ``check(app, pilot)`` (may be
    async)."""

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
            if check is not None:
                result = check(app, pilot)
                if asyncio.iscoroutine(result):
                    await result

    asyncio.run(go())
    return app


def pane_text(app: ExplorerApp, selector: str) -> str:
    """The plain text a pane shows (what it was given, drawn 80 columns wide)."""
    from rich.console import Console

    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(app.query_one(selector).content)
    return console.export_text()


def table_names(app: ExplorerApp):
    return list(app.table._names)


def followed_rows(app: ExplorerApp):
    """The names whose row carries the follow mark, as drawn."""
    return [
        name
        for i, name in enumerate(table_names(app))
        if app.table.get_row_at(i)[0].plain.startswith(FOLLOW_MARK)
    ]


# --- moving between steps -------------------------------------------------------------


def test_keys_move_between_steps(saved):
    traces = load_traces(str(saved("detach")))
    steps = all_steps(traces[0])
    seen = []

    async def check(app, pilot):
        for key in ("right", "right", "l" if False else "j", "k", "left", "left", "left"):
            await pilot.press(key)
            await pilot.pause()
            seen.append((app.state.step.index, app.query_one("#steps").highlighted))

    drive(ExplorerApp(traces), check=check)
    indexes = [s.index for s in steps]
    assert seen == [
        (indexes[1], 1),
        (indexes[2], 2),
        (indexes[3], 3),
        (indexes[2], 2),
        (indexes[1], 1),
        (indexes[0], 0),
        (indexes[0], 0),
    ]


def test_the_table_is_the_steps_tensors_with_changes_marked(saved, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")  # marks, not colours, carry the change
    traces = load_traces(str(saved("detach")))
    step2 = all_steps(traces[0])[1]
    step1 = all_steps(traces[0])[0]

    def check(app, pilot):
        assert app.state.step.index == step2.index
        assert table_names(app) == [t.name for t in step2.tensors]
        headers = [str(c.label) for c in app.table.columns.values()]
        ver = headers.index("ver")
        before = {t.name: t.version for t in step1.tensors}
        for i, state in enumerate(step2.tensors):
            cell = app.table.get_row_at(i)[ver].plain
            changed = before.get(state.name) != state.version
            assert cell == f"{state.version}{'*' if changed else ''}"

    app = drive(ExplorerApp(traces), "right", check=check)
    assert app.no_color


def test_filter_keeps_the_matching_names_and_escape_clears_it(saved):
    traces = load_traces(str(saved("views")))
    steps = all_steps(traces[0])
    last = steps[-1]
    everyone = [t.name for t in last.tensors]
    needle = everyone[-1][-1]  # one letter of a name: some names have it, maybe not all

    async def check(app, pilot):
        await pilot.press("slash")
        for ch in needle:
            await pilot.press(ch)
        await pilot.pause()
        assert table_names(app) == [n for n in everyone if needle.lower() in n.lower()]
        await pilot.press("z", "z", "z", "q")  # typed into the filter, not taken as keys
        await pilot.pause()
        assert app.is_running and app.state.filter == needle + "zzzq"
        assert table_names(app) == [n for n in everyone if (needle + "zzzq") in n]
        await pilot.press("escape")
        await pilot.pause()
        assert app.state.filter == "" and table_names(app) == everyone

    drive(ExplorerApp(traces), *["right"] * (len(steps) - 1), check=check)


def test_following_a_storage_marks_every_tensor_on_it_at_every_step(saved):
    traces = load_traces(str(saved("views")))
    steps = all_steps(traces[0])
    first = steps[0]
    name = first.tensors[0].name
    label = first.tensors[0].storage
    assert label is not None
    marked = []
    listed = []

    async def check(app, pilot):
        await pilot.press("s")
        await pilot.pause()
        assert app.state.follow == label
        for position in range(len(steps)):
            marked.append(followed_rows(app))
            listed.append(str(app.query_one("#steps").get_option_at_index(position).prompt))
            await pilot.press("right")
            await pilot.pause()

    drive(ExplorerApp(traces), check=check)
    # the rows marked are exactly the tensors the trace recorded on that storage, step by step
    assert marked == [[t.name for t in s.tensors if t.storage == label] for s in steps]
    assert any(len(names) > 1 for names in marked), "views shares a storage between names"
    # the step list marks the steps that wrote it or bound a name on it
    prev = None
    for step, line in zip(steps, listed):
        before = {t.name: t for t in prev.tensors} if prev else {}
        touched = any(
            t.storage == label
            and (
                t.name not in before
                or before[t.name].version != t.version
                or before[t.name].storage != t.storage
                or before[t.name].values != t.values
            )
            for t in step.tensors
        )
        assert line.startswith(FOLLOW_MARK) == touched, (step.index, line)
        prev = step
    assert name in marked[0]


def test_the_selected_tensor_is_shown_in_full_below_the_table(saved):
    from tensortrace.render.text import format_values

    traces = load_traces(str(saved("views")))
    steps = all_steps(traces[0])
    last = steps[-1]
    wide = max(last.tensors, key=lambda t: len(t.shape))  # the 2-D one: its values take lines
    assert len(wide.shape) == 2
    cards = {}

    async def check(app, pilot):
        await pilot.press("slash", *wide.name, "enter")
        await pilot.pause()
        cards["selected"] = app.table.selected
        cards["text"] = pane_text(app, "#card")

    drive(ExplorerApp(traces), *["right"] * (len(steps) - 1), check=check)
    assert cards["selected"] == wide.name
    values = format_values(wide.values, wide.shape)
    assert "\n" in values
    card_lines = [line.strip() for line in cards["text"].splitlines()]
    for line in values.splitlines():
        assert line.strip() in card_lines
    assert f"selected: {wide.name}" in cards["text"]


def test_s_again_stops_following(saved):
    traces = load_traces(str(saved("detach")))
    app = drive(ExplorerApp(traces), "s", "s")
    assert app.state.follow is None


def test_variant_switch_keeps_the_step(saved):
    traces = load_traces(str(saved("detach-vs-data")))
    assert len(traces) == 2 and traces[0].scenario.variant != traces[1].scenario.variant
    titles = []

    async def check(app, pilot):
        index = app.state.step.index
        titles.append(pane_text(app, "#title"))
        await pilot.press("v")
        await pilot.pause()
        assert app.state.trace.scenario.variant == traces[1].scenario.variant
        assert app.state.step.index == index
        names = [t.name for t in app.state.step.tensors]
        assert table_names(app) == names
        titles.append(pane_text(app, "#title"))
        await pilot.press("v")
        await pilot.pause()
        assert app.state.trace.scenario.variant == traces[0].scenario.variant

    drive(ExplorerApp(traces), "right", "right", check=check)
    assert traces[0].scenario.variant in titles[0] and traces[1].scenario.variant in titles[1]


def test_a_followed_storage_is_followed_into_the_other_variant_by_name(saved):
    traces = load_traces(str(saved("detach-vs-data")))
    followed = {}

    async def check(app, pilot):
        name = app.table.selected
        await pilot.press("s", "v")
        await pilot.pause()
        followed["name"] = name
        followed["label"] = app.state.follow
        followed["marked"] = followed_rows(app)
        followed["step"] = app.state.step

    drive(ExplorerApp(traces), "right", check=check)
    step = followed["step"]
    label = next(t.storage for t in step.tensors if t.name == followed["name"])
    assert followed["label"] == label
    assert followed["marked"] == [t.name for t in step.tensors if t.storage == label]


@pytest.mark.parametrize("key,suffix", [("m", ".md"), ("h", ".html")])
def test_export_writes_the_current_step(saved, tmp_path, key, suffix):
    traces = load_traces(str(saved("detach")))
    app = drive(ExplorerApp(traces, export_dir=tmp_path), "right", "e", key)
    written = sorted(tmp_path.iterdir())
    assert [p.suffix for p in written] == [suffix]
    assert app.last_export == written[0]
    assert any(str(written[0]) in n.message for n in app._notifications)  # says where
    text = written[0].read_text(encoding="utf-8")
    if suffix == ".html":  # what the page draws (its embedded JSON data keeps the whole trace)
        drawn = re.sub(r"<script\b.*?</script>", "", text, flags=re.S)
        text = html.unescape(re.sub(r"<[^>]+>", "", drawn))
    assert "b.zero_()" in text  # step 2's code
    assert "(a * 2).sum().backward()" not in text  # step 5's is not in the view
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_export_keeps_to_the_filter(saved, tmp_path):
    traces = load_traces(str(saved("views")))
    last = all_steps(traces[0])[-1]
    name = last.tensors[-1].name
    keys = ["right"] * (len(all_steps(traces[0])) - 1) + ["slash", *name, "enter", "e", "m"]
    drive(ExplorerApp(traces, export_dir=tmp_path), *keys)
    (written,) = tmp_path.iterdir()
    rows = re.findall(r"^\| `([^`|]+)`", written.read_text(encoding="utf-8"), re.M)
    tensor_rows = [r for r in rows if r in {t.name for t in last.tensors}]
    assert tensor_rows and set(tensor_rows) == {
        n for n in (t.name for t in last.tensors) if name in n
    }


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
def test_q_and_ctrl_c_quit_cleanly(saved, key):
    traces = load_traces(str(saved("detach")))
    still = []

    async def check(app, pilot):
        await pilot.press(key)
        await pilot.pause()
        still.append(app.is_running)

    app = drive(ExplorerApp(traces), check=check)
    assert still == [False] and app.return_code == 0


def test_graphs_toggle(saved):
    traces = load_traces(str(saved("saved-tensors")))
    with_graph = next(i for i, s in enumerate(all_steps(traces[0])) if s.graphs)
    shown = []

    async def check(app, pilot):
        graphs = app.query_one("#graphs")
        shown.append(graphs.display)
        text = pane_text(app, "#graphs")
        assert f"graph of {all_steps(traces[0])[with_graph].graphs[0].tensor}" in text
        await pilot.press("g")
        await pilot.pause()
        shown.append(graphs.display)

    drive(ExplorerApp(traces), *["right"] * with_graph, check=check)
    assert shown == [True, False]


def test_what_a_step_ran_its_gradient_flow_saved_tensors_and_predictions_are_shown(saved):
    """Step.ops, Step.flow, Step.predictions and GraphNode.saved, as the trace recorded them."""
    traces = load_traces(str(saved("backward-twice")))
    first = traces[0].steps[0]
    assert first.predictions and first.flow and first.ops  # what the pane must show
    texts = {}

    def check(app, pilot):
        texts["outcome"] = pane_text(app, "#outcome")
        texts["graphs"] = pane_text(app, "#graphs")

    drive(ExplorerApp(traces), check=check)
    outcome = " ".join(texts["outcome"].split())
    assert "⚠ predicted: " + " ".join(first.predictions[0].message.split()) in outcome
    assert "Tensor.backward(y)" in outcome  # the calls the step made
    assert (
        "gradient flow of Tensor.backward" in outcome and "x.grad: None → [2., 4., 6.]" in outcome
    )
    assert "saved: other, self: freed by backward" in texts["graphs"]


# --- the command ------------------------------------------------------------------------


def test_explore_refuses_without_a_terminal():
    result = cli("explore", "detach")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "terminal" in lines[0] and "tensortrace run" in lines[0], (
        result.stderr
    )


@pytest.mark.parametrize("target", ["no-such-scenario", "missing.yaml", "missing.json"])
def test_bad_input_says_what_run_says(target, tmp_path):
    explored = cli("explore", target, cwd=tmp_path)
    shown = cli("render" if target.endswith(".json") else "run", target, cwd=tmp_path)
    assert explored.returncode == shown.returncode == 2
    assert explored.stderr == shown.stderr and len(explored.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["duplicate-key.yaml", "bad-regex.yaml", "empty-steps.yaml"])
def test_a_broken_scenario_says_what_run_says(name):
    path = REPO / "tests" / "bad_inputs" / name
    explored, ran = cli("explore", str(path)), cli("run", str(path))
    assert explored.returncode == ran.returncode == 2
    assert explored.stderr == ran.stderr and explored.stderr.count("\n") == 1, explored.stderr


def test_a_broken_json_trace_is_one_line(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text('{"format": "tensortrace.trace", ', encoding="utf-8")
    result = cli("explore", str(path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "trace.json" in result.stderr


def test_without_textual_it_says_how_to_install():
    code = (
        "import sys; sys.modules['textual'] = None; from tensortrace.cli.main import main; "
        "sys.argv = ['tensortrace', 'explore', 'detach']; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip()
        == f"tensortrace: explore needs the textual package; install it with: {INSTALL_HINT}"
    )


def test_explore_at_a_terminal_traces_then_explores(monkeypatch):
    """The README's command, as a person at a terminal runs it; the app driven by the pilot."""
    import tensortrace.cli.reading as cli_module
    import tensortrace.tui as tui

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    commands = [
        line.strip()
        for line in readme.splitlines()
        if line.strip().startswith("tensortrace explore ")
    ]
    assert commands, "README.md shows no 'tensortrace explore' command"
    found = {}

    def explorer(traces):
        def check(app, pilot):
            found["follow"] = app.state.follow
            found["marked"] = followed_rows(app)
            found["storages"] = {t.name: t.storage for t in app.state.step.tensors}

        drive(ExplorerApp(traces), "s", check=check)
        found["traces"] = traces
        return 0

    monkeypatch.setattr(cli_module, "_interactive", lambda: True)
    monkeypatch.setattr(tui, "explore", explorer)
    for command in commands:
        result = cli(*shlex.split(command)[1:])
        assert result.returncode == 0, result.stderr
        storages = found["storages"]
        first = next(iter(storages))
        assert found["follow"] == storages[first]
        assert found["marked"] == [n for n, s in storages.items() if s == storages[first]]


def test_a_saved_trace_explores_without_torch(saved):
    path = saved("detach")
    code = (
        "import sys, asyncio; sys.modules['torch'] = None\n"
        "from tensortrace.cli.tracefile import load_traces, is_saved_trace\n"
        "from tensortrace.tui.app import ExplorerApp\n"
        "assert is_saved_trace(sys.argv[1])\n"
        "app = ExplorerApp(load_traces(sys.argv[1]))\n"
        "async def go():\n"
        "    async with app.run_test(size=(80, 24)) as pilot:\n"
        "        await pilot.press('right', 's', 'right', 'q')\n"
        "asyncio.run(go())\n"
        "print(app.state.step.index, app.state.follow, app.return_code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    storage = all_steps(load_traces(str(path))[0])[1].tensors[0].storage
    assert result.stdout.split() == ["3", storage, "0"]


def test_a_json_trace_is_told_from_a_scenario_by_its_contents(saved, tmp_path):
    copy = tmp_path / "trace.txt"
    copy.write_text(saved("detach").read_text(encoding="utf-8"), encoding="utf-8")
    from tensortrace.cli.tracefile import is_saved_trace

    assert is_saved_trace(str(copy)) and is_saved_trace(str(saved("detach")))
    assert not is_saved_trace(str(REPO / "scenarios" / "detach.yaml")) and not is_saved_trace(
        "detach"
    )


# --- snapshots and the README's screenshot ------------------------------------------------


@pytest.mark.parametrize(
    "name,keys",
    [
        ("detach", ("right", "s")),
        ("views", ("right", "right", "s")),
        ("backward-twice", ("right",)),  # step 2 raises: the error and its explanation
    ],
)
def test_snapshot(saved, snap_compare, name, keys):
    traces = load_traces(str(saved(name)))
    # "_" pauses once more, so that a layout the last key started has settled
    assert snap_compare(ExplorerApp(traces, color=True), press=(*keys, "_"), terminal_size=SIZE)


def test_readme_screenshot_is_offline_and_shown():
    svg = SCREENSHOT.read_text(encoding="utf-8")
    assert "<svg" in svg and "http://www.w3.org/2000/svg" in svg
    assert not re.search(r"url\(\s*[\"']?https?:", svg), "the screenshot would download a font"
    assert "following" in svg and "S1" in svg
    assert "docs/explore-detach.svg" in (REPO / "README.md").read_text(encoding="utf-8")


def test_offline_svg_removes_the_web_fonts(saved, tmp_path):
    traces = load_traces(str(saved("detach")))
    shots = []
    drive(
        ExplorerApp(traces),
        "right",
        "s",
        check=lambda app, pilot: shots.append(app.export_screenshot()),
    )
    assert re.search(r"url\(\"https?:", shots[0])  # what textual writes
    cleaned = offline_svg(shots[0])
    assert (
        not re.search(r"url\(\s*[\"']?https?:", cleaned) and 'local("FiraCode-Regular")' in cleaned
    )
    if os.environ.get("TENSORTRACE_REGEN_SCREENSHOT"):
        from tensortrace.tui.export import write_svg

        write_svg(shots[0], SCREENSHOT)


def test_a_python_file_explores_as_its_scenario_does(monkeypatch):
    """`tensortrace explore examples/detach.py`: the .py file is traced through run's loader, with
    its own lines."""
    import tensortrace.cli.reading as cli_module
    import tensortrace.tui as tui

    found = {}

    def explorer(traces):
        def check(app, pilot):
            found["step"] = app.state.step
            found["marked"] = followed_rows(app)

        drive(ExplorerApp(traces), "right", "right", "s", check=check)
        return 0

    monkeypatch.setattr(cli_module, "_interactive", lambda: True)
    monkeypatch.setattr(tui, "explore", explorer)
    result = cli("explore", str(REPO / "examples" / "detach.py"))
    assert result.returncode == 0, result.stderr
    step = found["step"]
    source = (REPO / "examples" / "detach.py").read_text(encoding="utf-8").splitlines()
    assert step.code.strip() == "b = a.detach()"
    assert step.line == source.index("b = a.detach()") + 1  # the file's own line
    assert {t.name: t.storage for t in step.tensors} == {"a": "S1", "b": "S1"}
    assert found["marked"] == ["a", "b"]  # following a's storage marks both


def test_a_loop_steps_passes_fold_and_i_shows_every_one(tmp_path):
    """The explorer folds a loop step's passes as ``run`` does; ``i`` unfolds them."""
    path = tmp_path / "loop.json"
    result = cli("run", str(REPO / "examples" / "train.py"), "-o", str(path))
    assert result.returncode == 0, result.stderr
    traces = load_traces(str(path))
    loop = next(i for i, s in enumerate(all_steps(traces[0])) if s.loop is not None)
    seen = []

    async def check(app, pilot):
        seen.append(pane_text(app, "#outcome"))
        await pilot.press("i")
        await pilot.pause()
        seen.append(pane_text(app, "#outcome"))

    drive(ExplorerApp(traces), *["right"] * loop, check=check)
    folded, every = (" ".join(text.split()) for text in seen)
    assert "iteration 1 of 20:" in folded and "iterations 3–20: the same operations" in folded
    assert "iteration 20 of 20:" not in folded
    assert "iteration 20 of 20:" in every and "the same operations" not in every
