"""Escape attempts end to end, through the real command, in safe mode.

Each scenario tries to reach outside: write a marker file, read a file, start
a process, or get code run where the guards do not look. In safe mode the
attempt must be refused, either before anything runs (exit 2, one line naming
``file:line:column`` and the construct) or while it runs (the step's recorded
error is ``SafeModeViolation``), and the marker must not exist afterwards.

The same scenario under ``--trust`` does reach outside, which shows that each
attempt is real and that the test could fail. Safe-mode runs of attempts that
get to run start the command as a real process, so that the confined child
is forked from the process a user runs; an attempt refused before anything
runs never reaches a child, and the ``--trust`` counter-checks only need the
attempt to work: those call the same command in this process (each scenario
still runs in a forked child), which is faster.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import List

import pytest
import torch

from conftest import Result, cli, cli_process

SAFE_MODE_HINT = "use --trust to run it as plain Python"


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "attempt.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def run_safe(path: Path, *extra: str) -> Result:
    """Safe mode, in a process of its own: for attempts that get to run."""
    return cli_process("run", str(path), "--format", "json", "--timeout", "20", *extra, timeout=120)


def check_safe(path: Path, *extra: str) -> Result:
    """Safe mode, in this process: for attempts refused before anything runs,
    where no child is forked and the process makes no difference."""
    return cli("run", str(path), "--format", "json", "--timeout", "20", *extra)


def run_trusted(path: Path) -> Result:
    result = cli("run", str(path), "--format", "json", "--timeout", "20", "--trust")
    assert result.exception is None, result.stderr
    return result


def assert_refused_before_running(
    result: Result, path: Path, line: int, column: int, *names: str
) -> str:
    """Exit 2 with one line ``tensortrace: FILE:LINE:COLUMN: ...`` that names the construct."""
    assert result.returncode == 2, (result.returncode, result.stderr, result.stdout[:500])
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    message = lines[0]
    assert message.startswith(f"tensortrace: {path}:{line}:{column}: "), message
    for name in names:
        assert name in message, message
    assert (
        "not allowed in safe mode" in message
        or "not available in safe mode" in message
        or "not allowed in scenario files" in message
    )
    return message


def trace_of(result) -> dict:
    data = json.loads(result.stdout)
    return data


def errors_of(data: dict) -> List[tuple]:
    """(where, type, message) of every recorded error: setup, steps and expectations."""
    found = []
    if data.get("setup") and data["setup"].get("error"):
        found.append(("setup", data["setup"]["error"]["type"], data["setup"]["error"]["message"]))
    for step in data["steps"]:
        if step["error"]:
            found.append((step["index"], step["error"]["type"], step["error"]["message"]))
        for e in step["expectations"]:
            if e.get("error"):
                kind, _, message = e["error"].partition(": ")
                found.append((f"expect {step['index']}", kind, message))
    return found


def assert_refused_while_running(result: Result, where, *names: str) -> str:
    """Exit 1 and, at ``where``, a recorded SafeModeViolation naming the construct."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    data = trace_of(result)
    errors = errors_of(data)
    at = [e for e in errors if e[0] == where]
    assert at, errors
    _, kind, message = at[0]
    assert kind == "SafeModeViolation", errors
    assert "not allowed in safe mode" in message and SAFE_MODE_HINT in message, message
    for name in names:
        assert name in message, message
    return message


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "marker"


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file the scenario should not be able to read: a saved tensor holding 4242."""
    path = tmp_path / "secret.pt"
    torch.save(torch.tensor([4242.0]), path)
    return path


def assert_trust_reaches_outside(path: Path, marker: Path) -> None:
    assert not marker.exists()
    result = run_trusted(path)
    assert marker.exists(), (
        "the attempt did not work even with --trust",
        result.stdout[-2000:],
        result.stderr,
    )
    marker.unlink()


# ---------------------------------------------------------------------------
# refused before anything runs
# ---------------------------------------------------------------------------


def test_download_through_torch_hub(tmp_path, marker, secret):
    # torch.hub fetches any URL urllib can open; file:// copies a local file
    path = write(
        tmp_path,
        f"""
        title: fetch a url
        steps:
          - a = torch.ones(1)
          - torch.hub.download_url_to_file('file://{secret}', '{marker}', progress=False)
        """,
    )
    assert_refused_before_running(check_safe(path), path, 4, 5, "'torch.hub'", "network")
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_start_a_process_with_subprocess(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: start a process
        steps:
          - |
            import subprocess
            subprocess.run(['touch', '{marker}'])
        """,
    )
    assert_refused_before_running(check_safe(path), path, 4, 5, "'import subprocess'")
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_numpy_memmap_from_numpy_lib(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: a memory-mapped file
        steps:
          - run: |
              from numpy.lib.format import open_memmap
              mm = open_memmap('{marker}', mode='w+', dtype='float32', shape=(2,))
        """,
    )
    assert_refused_before_running(
        check_safe(path), path, 4, 7, "'from numpy.lib.format import open_memmap'"
    )
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_profiler_trace_export(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: export a profiler trace
        steps:
          - |
            with torch.autograd.profiler.profile() as prof:
                y = torch.ones(2) * 2
            prof.export_chrome_trace('{marker}')
        """,
    )
    assert_refused_before_running(
        check_safe(path), path, 4, 10, "'torch.autograd.profiler'", "profiler traces"
    )
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_pathlib_write(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: write with pathlib
        steps:
          - a = torch.ones(2)
          - |
            import pathlib
            pathlib.Path('{marker}').write_text(str(a.tolist()))
        """,
    )
    assert_refused_before_running(check_safe(path), path, 5, 5, "'import pathlib'")
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_print_into_an_opened_file(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: print into a file
        steps:
          - print('escaped', file=open('{marker}', 'w'))
        """,
    )
    assert_refused_before_running(check_safe(path), path, 3, 27, "'open'", "opens files")
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_finalizer_that_writes_when_collected(tmp_path, marker):
    # __del__ would run whenever the object dies, also inside the tool's own code
    path = write(
        tmp_path,
        f"""
        title: a finalizer
        steps:
          - |
            class Evil:
                def __del__(self):
                    open('{marker}', 'w').write('x')
            e = Evil()
          - del e
        """,
    )
    message = assert_refused_before_running(check_safe(path), path, 5, 9, "'__del__'")
    assert "defining" in message
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_torch_function_override_runs_code_inside_torch(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: intercept every torch call
        steps:
          - |
            class Spy(torch.Tensor):
                @classmethod
                def __torch_function__(cls, func, types, args=(), kwargs=None):
                    open('{marker}', 'w').write('x')
                    return super().__torch_function__(func, types, args, kwargs or {{}})
            a = torch.ones(2).as_subclass(Spy)
          - b = a + 1
        """,
    )
    assert_refused_before_running(check_safe(path), path, 6, 9, "'__torch_function__'")
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_reading_a_saved_tensor(tmp_path, secret):
    path = write(
        tmp_path,
        f"""
        title: read a file
        steps:
          - stolen = torch.load('{secret}')
        """,
    )
    result = check_safe(path)
    assert_refused_before_running(result, path, 3, 14, "'torch.load'", "reads or writes files")
    assert "4242" not in result.stdout + result.stderr
    trusted = run_trusted(path)  # the attempt is real: the value is in the trace
    assert trusted.returncode == 0
    assert json.loads(trusted.stdout)["steps"][0]["tensors"][0]["values"]["data"] == [4242.0]


def test_python_yaml_tag_is_refused_even_with_trust(tmp_path, marker):
    # the attack is in the YAML itself: nothing may construct Python objects from it
    path = write(
        tmp_path,
        f"""
        title: code in the data
        seed: !!python/object/apply:os.system ['touch {marker}']
        steps:
          - a = torch.ones(1)
        """,
    )
    assert_refused_before_running(check_safe(path), path, 2, 7, "!!python")
    assert not marker.exists()
    trusted = run_trusted(path)
    assert trusted.returncode == 2 and not marker.exists()
    assert f"{path}:2:7: YAML tags such as !!python/... are not allowed" in trusted.stderr


VARIANTS = """
title: the attack is in the second variant
variants:
  plain: {{what: "a.clone()"}}
  sneaky: {{what: "torch.save(a, '{marker}')"}}
steps:
  - a = torch.ones(1)
  - b = ${{what}}
"""


def test_attack_hidden_in_a_variant_placeholder(tmp_path, marker):
    path = write(tmp_path, VARIANTS.format(marker=marker))
    result = check_safe(path, "--format", "console")
    # the location is where the placeholder is used
    message = result.stderr.strip()
    assert result.returncode == 2, result.stderr
    assert (
        message
        == f"tensortrace: {path}:7:9: 'torch.save' is not allowed in safe mode (it reads or writes files); {SAFE_MODE_HINT}"
    )
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_a_refused_variant_stops_the_run_before_anything_runs(tmp_path, marker):
    path = write(tmp_path, VARIANTS.format(marker=marker))
    result = check_safe(path, "--format", "jsonl")
    assert result.returncode == 2
    assert not marker.exists()
    assert result.stdout == "", "variant 'plain' ran and was streamed before the file was refused"
    assert (
        len(result.stderr.strip().splitlines()) == 1
        and f"{path}:7:9: 'torch.save'" in result.stderr
    )


# ---------------------------------------------------------------------------
# refused while running
# ---------------------------------------------------------------------------


def test_os_system_reached_through_torch(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: a module reached as an attribute
        steps:
          - |
            m = torch
            o = m.os
            o.system('touch {marker}')
        """,
    )
    result = run_safe(path)
    assert_refused_while_running(result, 1, "'torch.os'")
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_torch_save_from_setup_through_a_container(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: an attempt in setup
        setup: |
          mods = [torch]
          mods[0].save(torch.ones(1), '{marker}')
        steps:
          - a = torch.ones(1)
        """,
    )
    result = run_safe(path)
    assert_refused_while_running(result, "setup", "'torch.save'")
    assert trace_of(result)["steps"] == []  # a failing setup: no step ran
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_torch_save_inside_an_expectation(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: an attempt in an expectation
        steps:
          - run: a = torch.ones(1)
            expect:
              - "(lambda lib: lib.save(a, '{marker}'))(torch) is None"
        """,
    )
    result = run_safe(path)
    assert_refused_while_running(result, "expect 1", "'torch.save'")
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_torch_save_inside_a_backward_hook(tmp_path, marker):
    # the hook runs inside autograd's engine, called from C++
    path = write(
        tmp_path,
        f"""
        title: an attempt in a gradient hook
        steps:
          - |
            mods = [torch]
            a = torch.ones(2, requires_grad=True)
            h = a.register_hook(lambda g: mods[0].save(g, '{marker}'))
          - a.sum().backward()
        """,
    )
    result = run_safe(path)
    assert_refused_while_running(result, 2, "'torch.save'")
    assert trace_of(result)["steps"][0]["status"] == "ok"
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_torch_save_inside_a_module_forward(tmp_path, marker):
    # forward runs when nn.Module.__call__ (trusted code) calls it
    path = write(
        tmp_path,
        f"""
        title: an attempt in forward
        steps:
          - |
            class Net(nn.Module):
                def forward(self, x):
                    lib = [torch][0]
                    lib.save(x, '{marker}')
                    return x * 2
            net = Net()
          - out = net(torch.ones(2))
        """,
    )
    result = run_safe(path)
    assert_refused_while_running(result, 2, "'torch.save'")
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_numpy_savetxt_through_a_default_argument(tmp_path, marker):
    path = write(
        tmp_path,
        f"""
        title: numpy hidden in a default argument
        steps:
          - |
            import numpy as np
            def keep(xp=np):
                xp.savetxt('{marker}', xp.zeros(1))
          - keep()
        """,
    )
    result = run_safe(path)
    assert_refused_while_running(result, 2, "'numpy.savetxt'")
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


def test_reading_through_an_alias(tmp_path, secret):
    path = write(
        tmp_path,
        f"""
        title: read a file through an alias
        steps:
          - |
            lib = [torch][0]
            stolen = lib.load('{secret}')
        """,
    )
    result = run_safe(path)
    assert_refused_while_running(result, 1, "'torch.load'")
    assert "4242" not in result.stdout
    trusted = run_trusted(path)
    assert "4242" in trusted.stdout


def test_patching_a_tensor_method_that_the_tool_calls(tmp_path, marker):
    # the tool's own recorder calls numel(); a patched one would run scenario code outside any step
    path = write(
        tmp_path,
        f"""
        title: patch a library class
        steps:
          - |
            lib = [torch][0]
            original = lib.Tensor.numel
            def spy(self):
                lib.save(torch.zeros(1), '{marker}')
                return original(self)
            T = type(torch.ones(1))
            T.numel = spy
          - a = torch.ones(2)
        """,
    )
    result = run_safe(path)
    message = assert_refused_while_running(result, 1, "writing 'numel' on the class Tensor")
    assert "shared by everything" in message
    assert trace_of(result)["steps"][1]["status"] == "ok"  # the recorder was not affected
    assert not marker.exists()
    assert_trust_reaches_outside(path, marker)


# ---------------------------------------------------------------------------
# what safe mode must still allow
# ---------------------------------------------------------------------------


def test_scenario_classes_can_set_and_read_their_attributes(tmp_path):
    # docs/safety.md: "Writes to ordinary objects ... are allowed: ... self.lin = nn.Linear(2, 2)"
    path = write(
        tmp_path,
        """
        title: a small module of our own
        steps:
          - |
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lin = nn.Linear(2, 2)
                def forward(self, x):
                    return self.lin(x).relu()
            net = Net()
          - |
            class Box:
                pass
            box = Box()
            box.t = torch.ones(2)
            total = box.t.sum()
          - out = net(torch.ones(1, 2)).sum()
        """,
    )
    result = run_safe(path)
    assert result.returncode == 0, errors_of(trace_of(result))


PROTOCOL_STEPS = [
    "import torch",
    "import numpy as np",
    "pd = torch.nn.ParameterDict()",
    "pd['__array_' + 'interface__'] = {'shape': (8,), 'typestr': '|u1', 'data': (id(pd), False), 'version': 3}",
    "peek = np.asarray(pd)",
]


@pytest.mark.parametrize("suffix", [".py", ".ipynb"])
def test_a_protocol_name_built_at_run_time_is_refused_where_it_is_read(tmp_path, suffix):
    """Setting '__array_interface__' under a computed name gets past the checks on names;
    np.asarray still refuses the object, from a .py file and from a notebook."""
    if suffix == ".py":
        path = write(tmp_path, "\n".join(PROTOCOL_STEPS) + "\n", name="attempt.py")
    else:
        cells = [
            {
                "cell_type": "code",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": [line],
            }
            for line in PROTOCOL_STEPS
        ]
        notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        path = write(tmp_path, json.dumps(notebook), name="attempt.ipynb")
    result = run_safe(path)
    assert result.returncode == 1, result.stderr
    [(where, kind, message)] = errors_of(trace_of(result))
    assert kind == "SafeModeViolation" and "'numpy.asarray' of a ParameterDict object" in message
    assert trace_of(result)["steps"][where - 1]["code"].strip() == "peek = np.asarray(pd)"
