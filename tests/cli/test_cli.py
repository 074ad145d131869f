"""The command line as a user meets it: formats, files, exit status, versions.

Most tests call the command in this process (``cli``, through the same
``main()``); the few that are about the installed command itself, its exit
status as a shell sees it, or a closed pipe, start a real process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from tensortrace.trace import FORMAT_VERSION
from tensortrace.scenario.schemas import scenario_schema, trace_schema

from conftest import REPO, cli, cli_process, resolved

GOOD = """
title: detach shares storage
steps:
  - a = torch.tensor([1., 2., 3.], requires_grad=True)
  - run: b = a.detach()
    expect:
      - same_storage(a, b)
  - run: b.sum().backward()
    raises: {type: RuntimeError, match: does not require grad}
"""

FAILING = """
title: a wrong belief
steps:
  - a = torch.ones(2)
  - run: b = a.clone()
    expect:
      - same_storage(a, b)
"""


@pytest.fixture
def good(tmp_path) -> Path:
    path = tmp_path / "good.yaml"
    path.write_text(textwrap.dedent(GOOD).lstrip(), encoding="utf-8")
    return path


@pytest.fixture
def failing(tmp_path) -> Path:
    path = tmp_path / "failing.yaml"
    path.write_text(textwrap.dedent(FAILING).lstrip(), encoding="utf-8")
    return path


def test_run_json_prints_one_valid_document(good):
    result = cli("run", str(good), "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, trace_schema())
    assert data["format"] == "tensortrace.trace" and data["format_version"] == FORMAT_VERSION
    assert data["passed"] is True
    assert data["environment"]["torch"].startswith("2.")
    steps = data["steps"]
    assert [s["index"] for s in steps] == [1, 2, 3]
    a, b = resolved(data)["steps"][1]["tensors"]
    assert a["storage"] == b["storage"] == "S1"
    assert steps[2]["status"] == "raised" and steps[2]["behaved"] is True
    assert steps[2]["error"]["explanation"]["topic"] == "no-grad-fn"


def test_run_jsonl_streams_one_line_per_step(good):
    result = cli("run", str(good), "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["event"] for line in lines] == ["start", "step", "step", "step", "end"]
    assert all(line["format_version"] == FORMAT_VERSION for line in lines)
    assert {line["scenario"]["title"] for line in lines} == {lines[0]["scenario"]["title"]}
    assert [line["step"]["index"] for line in lines[1:4]] == [1, 2, 3]
    assert lines[-1]["passed"] is True


def test_run_output_file_is_written_whole(good, tmp_path):
    out = tmp_path / "trace.json"
    result = cli("run", str(good), "--format", "json", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert json.loads(out.read_text())["passed"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "good.yaml",
        "trace.json",
    ]  # no temporary left


def test_failed_run_leaves_an_earlier_output_file_intact(tmp_path):
    out = tmp_path / "trace.json"
    out.write_text("earlier")
    result = cli("run", str(tmp_path / "missing.yaml"), "-o", str(out))
    assert result.returncode == 2
    assert out.read_text() == "earlier"


def test_run_exits_1_when_a_scenario_misbehaves(failing):
    result = cli_process("run", str(failing), "--format", "json")  # exit 1 as a shell sees it
    assert result.returncode == 1
    data = json.loads(result.stdout)
    (expectation,) = data["steps"][1]["expectations"]
    assert expectation["passed"] is False


def test_check_prints_a_line_per_scenario_and_a_summary(good, failing):
    result = cli("check", str(good), str(failing))
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert lines[0] == f"PASS {good}"
    assert lines[1] == f"FAIL {failing}: step 2 (line 4): expectation failed: same_storage(a, b)"
    assert lines[-1] == "1 passed, 1 failed"


def test_check_passes_with_exit_0(good):
    result = cli("check", str(good))
    assert result.returncode == 0
    assert result.stdout.strip().splitlines()[-1] == "1 passed, 0 failed"


def test_variants_give_one_trace_each(tmp_path):
    path = tmp_path / "variants.yaml"
    path.write_text(
        textwrap.dedent(
            """
            title: .data vs .detach() after an in-place change
            variants:
              detach: {alias: "y.detach()"}
              data:   {alias: "y.data"}
            steps:
              - x = torch.tensor([1., 2., 3.], requires_grad=True)
              - y = x.sigmoid()
              - z = ${alias}
              - z.zero_()
              - run: y.sum().backward()
                raises: {detach: RuntimeError}
            """
        ).lstrip()
    )
    result = cli("run", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, trace_schema())
    assert [t["scenario"]["variant"] for t in data["traces"]] == ["detach", "data"]
    assert data["traces"][0]["steps"][4]["status"] == "raised"
    assert data["traces"][1]["steps"][4]["status"] == "ok"
    check = cli("check", str(path))
    assert check.stdout.splitlines() == [
        f"PASS {path} [detach]",
        f"PASS {path} [data]",
        "2 passed, 0 failed",
    ]


def test_version_names_tensortrace_torch_and_python():
    result = cli_process("--version")
    assert result.returncode == 0
    import platform

    import torch

    import tensortrace as tt

    assert (
        result.stdout.strip() == f"tensortrace {tt.__version__}, torch {torch.__version__}, Python"
        f" {platform.python_version()}"
    )


def test_console_script_and_module_agree(good):
    exe = Path(sys.executable).with_name("tensortrace")
    if not exe.exists():
        pytest.skip("the console script is not installed next to this interpreter")
    script = subprocess.run(
        [str(exe), "check", str(good)], capture_output=True, text=True, timeout=300
    )
    module = cli_process("check", str(good))
    assert script.returncode == module.returncode == 0
    assert script.stdout == module.stdout


def test_unknown_format_is_a_usage_error(good):
    result = cli_process("run", str(good), "--format", "yaml")  # exit 2 as a shell sees it
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "tensortrace: --format 'yaml' is not one of console, json, jsonl, markdown, html, svg,"
        " dot, mermaid"
    )


def test_output_into_a_closed_pipe_ends_quietly(good):
    proc = subprocess.run(
        f"{sys.executable} -m tensortrace run {good} --format json | head -c 10",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout == '{\n  "forma'
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_render_reads_a_saved_trace_back(good, tmp_path):
    out = tmp_path / "trace.json"
    assert cli("run", str(good), "--format", "json", "-o", str(out)).returncode == 0
    again = cli("render", str(out), "--format", "json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(out.read_text())


def test_render_refuses_what_is_not_a_trace(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"a": 1}')
    result = cli("render", str(path))
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"tensortrace: {path}: this is not a tensortrace trace (no 'format: tensortrace.trace')"
    )
    path.write_text("{oops")
    result = cli("render", str(path))
    assert result.returncode == 2 and f"{path}:1:2: not valid JSON" in result.stderr


def test_schema_command_prints_the_scenario_schema_that_bundled_files_meet():
    import yaml

    result = cli("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema == scenario_schema()
    files = sorted((REPO / "scenarios").glob("*.yaml"))
    assert files
    for path in files:
        jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")), schema)


def test_docs_copies_of_the_schemas_are_current():
    scenario = json.loads((REPO / "docs" / "scenario.schema.json").read_text())
    trace = json.loads((REPO / "docs" / "trace.schema.json").read_text())
    assert scenario == scenario_schema(), (
        "regenerate: tensortrace schema > docs/scenario.schema.json"
    )
    assert trace == trace_schema(), (
        "regenerate: tensortrace schema --trace > docs/trace.schema.json"
    )


def test_no_color_when_not_a_terminal(good):
    result = cli(
        "run", str(good), env={"FORCE_COLOR": None}
    )  # FORCE_COLOR asks for it: test_color.py
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout


def test_safe_mode_refuses_cuda_with_its_location_before_anything_runs(tmp_path):
    """Behind the wall the GPU's driver cannot start (each layer alone stops it, seen on a
    machine with a GPU), so safe mode says so up front, on any machine, rather than let the
    child report the GPU missing; ``auto`` means the CPU there."""
    path = tmp_path / "gpu.yaml"
    path.write_text("title: gpu\ndevice: cuda\nsteps:\n  - a = torch.ones(2)\n")
    result = cli("run", str(path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"tensortrace: {path}:2:9: the scenario asks for device 'cuda', but safe mode runs"
        " scenarios on the CPU only (the GPU's driver cannot work behind its wall); use cpu,"
        " or --trust for a file you trust\n"
    )
    flag = cli("check", "detach", "--device", "cuda:1")
    assert flag.returncode == 2
    assert "--device asks for device 'cuda:1', but safe mode runs scenarios on the CPU only" in (
        flag.stderr
    )
    auto = cli("run", "detach", "--device", "auto", "--format", "json")
    assert auto.returncode == 0, auto.stderr
    assert json.loads(auto.stdout)["environment"]["device"] == "cpu"
    path.write_text("title: gpu\ndevice: auto\nsteps:\n  - a = torch.ones(2)\n")
    own = cli("run", str(path), "--format", "json")
    assert resolved(json.loads(own.stdout))["steps"][0]["tensors"][0]["device"] == "cpu"


def test_a_device_the_machine_lacks_is_refused_with_its_location(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    path = tmp_path / "gpu.yaml"
    path.write_text("title: gpu\ndevice: cuda\nsteps:\n  - a = torch.ones(2)\n")
    result = cli("run", str(path), "--trust")
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"tensortrace: {path}:2:9: the scenario asks for device 'cuda', which this machine does not"
        " have"
    )
    assert len(result.stderr.strip().splitlines()) == 1
    flag = cli("check", "detach", "--device", "cuda", "--trust")
    assert flag.returncode == 2 and "--device asks for device 'cuda'" in flag.stderr


def test_asking_for_a_step_the_scenario_lacks_is_a_usage_error(good):
    result = cli("run", str(good), "--steps", "2-9")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "tensortrace: there is no step 4, 5, 6, 7, 8: the scenario has steps 1 to 3"
    )
    assert result.stdout == ""


def test_past_a_dozen_tensors_the_console_names_the_unchanged_and_all_rows_draws_them(tmp_path):
    names = [f"w{i}" for i in range(14)]
    path = tmp_path / "many.yaml"
    path.write_text(
        "title: many\nsteps:\n  - "
        + ", ".join(names)
        + " = "
        + ", ".join(["torch.zeros(2)"] * 14)
        + "\n  - w3.add_(1)\n"
    )
    quiet = cli("run", str(path), "--width", "120")
    assert quiet.returncode == 0, quiet.stderr
    second = quiet.stdout.split("Step 2")[1]
    assert re.findall(r"^  (w\d+)\s", second, re.M) == ["w3"]  # PyTorch wrote w3 only
    assert "… 13 unchanged: w0, w1, w2, w4," in second and "--all-rows" in quiet.stdout
    loud = cli("run", str(path), "--width", "120", "--all-rows")
    assert loud.returncode == 0, loud.stderr
    second = loud.stdout.split("Step 2")[1]
    assert re.findall(r"^  (w\d+)\s", second, re.M) == names and "unchanged:" not in second
    saved = tmp_path / "many.json"
    assert cli("run", str(path), "-o", str(saved)).returncode == 0
    rendered = cli("render", str(saved), "--width", "120", "--all-rows")
    assert rendered.stdout.split("Step 2")[1].count("\n  w") == 14


def test_the_bundled_library_passes_on_cuda_with_trust():
    """Runs only where there is a GPU: each bundled scenario passes there with ``--trust``,
    and its tensors live on the GPU unless the scenario names the CPU."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA here")
    result = cli("check", str(REPO / "scenarios"), "--device", "cuda", "--trust")
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads(
        cli("run", "views", "--device", "cuda", "--trust", "--format", "json").stdout
    )
    assert {t["device"] for t in resolved(trace)["steps"][-1]["tensors"]} == {"cuda:0"}
