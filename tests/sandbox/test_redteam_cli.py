"""Escape attempts end to end, through the real command, in safe mode: one table.

Each scenario tries to reach outside: write a marker file, read a file, start
a process, or get code run where the guards do not look. In safe mode the
attempt must be refused, either before anything runs (exit 2, one line naming
``file:line:column`` and the construct) or while it runs (exit 1, the step's
recorded error is ``SafeModeViolation``), and the marker must not exist
afterwards.

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
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple, Union

import pytest
import torch

from conftest import Result, cli, cli_process, resolved

HINT = "use --trust to run it as plain Python"

# What --trust shows, which proves the attempt real.
REACHES = "the marker file appears"
READS = "the secret's value is in the trace"
REFUSED_TOO = "refused as in safe mode"
NOTHING = "nothing to show"


@dataclass(frozen=True)
class Attempt:
    """One row: the scenario, what safe mode answers, and what --trust shows.

    ``scenario`` is dedented; ``{marker}`` and ``{secret}`` in it become the paths
    of the marker file and of a saved tensor holding 4242. ``message`` is the one
    line, or how it starts where it goes on to list what is allowed: stderr for exit 2
    (``{path}`` is the scenario's path), or the error recorded at step ``where`` for
    exit 1. ``statuses`` are the steps' statuses
    in the trace of a run that got to run.
    """

    id: str
    scenario: str
    status: int
    message: str = ""
    where: Union[int, str, None] = None
    statuses: Sequence[str] = ()
    trust: str = REACHES
    args: Tuple[str, ...] = ()
    name: str = "attempt.yaml"
    code: str = ""  # for exit 1: the code recorded for step ``where``


VARIANTS = """
title: the attack is in the second variant
variants:
  plain: {what: "a.clone()"}
  sneaky: {what: "torch.save(a, '{marker}')"}
steps:
  - a = torch.ones(1)
  - b = ${what}
"""

PROTOCOL_STEPS = [
    "import torch",
    "import numpy as np",
    "pd = torch.nn.ParameterDict()",
    "pd['__array_' + 'interface__'] = "
    "{'shape': (8,), 'typestr': '|u1', 'data': (id(pd), False), 'version': 3}",
]
PROTOCOL_NOTEBOOK = json.dumps(
    {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": [line],
            }
            for line in PROTOCOL_STEPS
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
)
ONLY = "(only torch, numpy, math, copy, collections, functools and their allowed submodules)"
PROTOCOL_MESSAGE = (
    "'__array_interface__' on a ParameterDict object is not allowed in safe mode"
    " (it lets numpy and torch read and write memory at any address the object names)"
)
PROTOCOL_WRITE = PROTOCOL_STEPS[3]


ATTEMPTS: List[Attempt] = [
    # --- refused before anything runs: exit 2, one line ------------------------------
    Attempt(
        # torch.hub fetches any URL urllib can open; file:// copies a local file
        "download-through-torch-hub",
        """
        title: fetch a url
        steps:
          - a = torch.ones(1)
          - torch.hub.download_url_to_file('file://{secret}', '{marker}', progress=False)
        """,
        2,
        "{path}:4:5: 'torch.hub' is not allowed in safe mode"
        " (it is a module that downloads from the network)",
    ),
    Attempt(
        "start-a-process-with-subprocess",
        """
        title: start a process
        steps:
          - |
            import subprocess
            subprocess.run(['touch', '{marker}'])
        """,
        2,
        "{path}:4:5: 'import subprocess' is not allowed in safe mode " + ONLY,
    ),
    Attempt(
        "numpy-memmap-from-numpy-lib",
        """
        title: a memory-mapped file
        steps:
          - run: |
              from numpy.lib.format import open_memmap
              mm = open_memmap('{marker}', mode='w+', dtype='float32', shape=(2,))
        """,
        2,
        "{path}:4:7: 'from numpy.lib.format import open_memmap' is not allowed in safe mode "
        + ONLY,
    ),
    Attempt(
        "profiler-trace-export",
        """
        title: export a profiler trace
        steps:
          - |
            with torch.autograd.profiler.profile() as prof:
                y = torch.ones(2) * 2
            prof.export_chrome_trace('{marker}')
        """,
        2,
        "{path}:4:10: 'torch.autograd.profiler' is not allowed in safe mode"
        " (it is a module that writes profiler traces to files)",
    ),
    Attempt(
        "pathlib-write",
        """
        title: write with pathlib
        steps:
          - a = torch.ones(2)
          - |
            import pathlib
            pathlib.Path('{marker}').write_text(str(a.tolist()))
        """,
        2,
        "{path}:5:5: 'import pathlib' is not allowed in safe mode " + ONLY,
    ),
    Attempt(
        "print-into-an-opened-file",
        """
        title: print into a file
        steps:
          - print('escaped', file=open('{marker}', 'w'))
        """,
        2,
        "{path}:3:27: 'open' is not available in safe mode (it opens files)",
    ),
    Attempt(
        # __del__ would run whenever the object dies, also inside the tool's own code
        "finalizer-that-writes-when-collected",
        """
        title: a finalizer
        steps:
          - |
            class Evil:
                def __del__(self):
                    open('{marker}', 'w').write('x')
            e = Evil()
          - del e
        """,
        2,
        "{path}:5:9: defining '__del__' is not allowed in safe mode (allowed special methods: ",
    ),
    Attempt(
        "torch-function-override-runs-code-inside-torch",
        """
        title: intercept every torch call
        steps:
          - |
            class Spy(torch.Tensor):
                @classmethod
                def __torch_function__(cls, func, types, args=(), kwargs=None):
                    open('{marker}', 'w').write('x')
                    return super().__torch_function__(func, types, args, kwargs or {})
            a = torch.ones(2).as_subclass(Spy)
          - b = a + 1
        """,
        2,
        "{path}:6:9: defining '__torch_function__' is not allowed in safe mode"
        " (allowed special methods: ",
    ),
    Attempt(
        "reading-a-saved-tensor",
        """
        title: read a file
        steps:
          - stolen = torch.load('{secret}')
        """,
        2,
        "{path}:3:14: 'torch.load' is not allowed in safe mode (it reads or writes files)",
        trust=READS,
    ),
    Attempt(
        # the attack is in the YAML itself: nothing may construct Python objects from it
        "python-yaml-tag-even-with-trust",
        """
        title: code in the data
        seed: !!python/object/apply:os.system ['touch {marker}']
        steps:
          - a = torch.ones(1)
        """,
        2,
        "{path}:2:7: YAML tags such as !!python/... are not allowed in scenario files"
        " (they could run code)",
        trust=REFUSED_TOO,
    ),
    Attempt(
        # the location is where the placeholder is used
        "attack-hidden-in-a-variant-placeholder",
        VARIANTS,
        2,
        "{path}:7:9: 'torch.save' is not allowed in safe mode (it reads or writes files)",
        args=("--format", "console"),
    ),
    Attempt(
        # nothing of variant 'plain' is streamed before the file is refused
        "a-refused-variant-stops-the-run-before-anything-runs",
        VARIANTS,
        2,
        "{path}:7:9: 'torch.save' is not allowed in safe mode (it reads or writes files)",
        args=("--format", "jsonl"),
    ),
    # --- refused while running: exit 1, a SafeModeViolation recorded -------------------
    Attempt(
        "os-system-reached-through-torch",
        """
        title: a module reached as an attribute
        steps:
          - |
            m = torch
            o = m.os
            o.system('touch {marker}')
        """,
        1,
        "'torch.os' is not allowed in safe mode"
        " (it is the module os, which safe mode does not allow)",
        where=1,
        statuses=["raised"],
    ),
    Attempt(
        "torch-save-from-setup-through-a-container",
        """
        title: an attempt in setup
        setup: |
          mods = [torch]
          mods[0].save(torch.ones(1), '{marker}')
        steps:
          - a = torch.ones(1)
        """,
        1,
        "'torch.save' is not allowed in safe mode (it reads or writes files)",
        where="setup",
        statuses=[],  # a failing setup: no step ran
    ),
    Attempt(
        "torch-save-inside-an-expectation",
        """
        title: an attempt in an expectation
        steps:
          - run: a = torch.ones(1)
            expect:
              - "(lambda lib: lib.save(a, '{marker}'))(torch) is None"
        """,
        1,
        "'torch.save' is not allowed in safe mode (it reads or writes files)",
        where="expect 1",
        statuses=["ok"],
    ),
    Attempt(
        # the hook runs inside autograd's engine, called from C++
        "torch-save-inside-a-backward-hook",
        """
        title: an attempt in a gradient hook
        steps:
          - |
            mods = [torch]
            a = torch.ones(2, requires_grad=True)
            h = a.register_hook(lambda g: mods[0].save(g, '{marker}'))
          - a.sum().backward()
        """,
        1,
        "'torch.save' is not allowed in safe mode (it reads or writes files)",
        where=2,
        statuses=["ok", "raised"],
    ),
    Attempt(
        # forward runs when nn.Module.__call__ (trusted code) calls it
        "torch-save-inside-a-module-forward",
        """
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
        1,
        "'torch.save' is not allowed in safe mode (it reads or writes files)",
        where=2,
        statuses=["ok", "raised"],
    ),
    Attempt(
        "numpy-savetxt-through-a-default-argument",
        """
        title: numpy hidden in a default argument
        steps:
          - |
            import numpy as np
            def keep(xp=np):
                xp.savetxt('{marker}', xp.zeros(1))
          - keep()
        """,
        1,
        "'numpy.savetxt' is not allowed in safe mode (it reads or writes files)",
        where=2,
        statuses=["ok", "raised"],
    ),
    Attempt(
        "reading-through-an-alias",
        """
        title: read a file through an alias
        steps:
          - |
            lib = [torch][0]
            stolen = lib.load('{secret}')
        """,
        1,
        "'torch.load' is not allowed in safe mode (it reads or writes files)",
        where=1,
        trust=READS,
        statuses=["raised"],
    ),
    Attempt(
        # the recorder calls numel(); a patched one would run scenario code outside any step
        "patching-a-tensor-method-that-the-tool-calls",
        """
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
        1,
        "writing 'numel' on the class Tensor is not allowed in safe mode"
        " (classes from torch, numpy and Python are shared by everything that runs;",
        where=1,
        statuses=["raised", "ok"],  # the recorder was not affected
    ),
    Attempt(
        # a name built at run time gets past the checks on names; the module refuses it
        "protocol-name-built-at-run-time-py",
        "\n".join(PROTOCOL_STEPS) + "\n",
        1,
        PROTOCOL_MESSAGE,
        where=2,  # the imports are no steps of a .py file
        trust=NOTHING,
        name="attempt.py",
        code=PROTOCOL_WRITE,
        statuses=["ok", "raised"],
    ),
    Attempt(
        "protocol-name-built-at-run-time-ipynb",
        PROTOCOL_NOTEBOOK,
        1,
        PROTOCOL_MESSAGE,
        where=4,
        trust=NOTHING,
        name="attempt.ipynb",
        code=PROTOCOL_WRITE,
        statuses=["ok", "ok", "ok", "raised"],
    ),
    # --- what safe mode must still allow -----------------------------------------------
    Attempt(
        # docs/safety.md: "Writes to ordinary objects ... are allowed: self.lin = nn.Linear(2, 2)"
        "scenario-classes-can-set-and-read-their-attributes",
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
        0,
        statuses=["ok", "ok", "ok"],
        trust=NOTHING,
    ),
]


# --- running a row -------------------------------------------------------------------


def safe_run(path: Path, attempt: Attempt) -> Result:
    """Safe mode: in this process where it is refused before anything runs (no child is
    forked, so the process makes no difference), as a process of its own otherwise."""
    args = ("run", str(path), "--format", "json", "--timeout", "20", *attempt.args)
    if attempt.status == 2:
        return cli(*args)
    return cli_process(*args, timeout=120)


def trusted_run(path: Path) -> Result:
    result = cli("run", str(path), "--format", "json", "--timeout", "20", "--trust")
    assert result.exception is None, result.stderr
    return result


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


def assert_refused_before_running(result: Result, path: Path, attempt: Attempt) -> None:
    """Exit 2 with the one line ``tensortrace: FILE:LINE:COLUMN: ...`` of the table."""
    assert result.returncode == 2, (result.returncode, result.stderr, result.stdout[:500])
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("tensortrace: " + attempt.message.replace("{path}", str(path))), line
    assert line.endswith(HINT if "safe mode" in attempt.message else ")"), line


def assert_refused_while_running(result: Result, attempt: Attempt) -> dict:
    """Exit 1 and, at ``where``, a recorded SafeModeViolation saying the table's message."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    errors = errors_of(data)
    assert [e[0] for e in errors] == [attempt.where], errors
    _, kind, message = errors[0]
    assert kind == "SafeModeViolation", errors
    assert message.startswith(attempt.message) and message.endswith(HINT), message
    return data


def assert_trust_shows_it_real(path: Path, attempt: Attempt, marker: Path) -> None:
    if attempt.trust == NOTHING:
        return
    assert not marker.exists()
    result = trusted_run(path)
    if attempt.trust == REACHES:
        assert marker.exists(), (
            "no effect even with --trust",
            result.stdout[-2000:],
            result.stderr,
        )
    elif attempt.trust == READS:
        steps = resolved(json.loads(result.stdout))["steps"]
        stolen = [t for s in steps for t in s["tensors"] if t["name"] == "stolen"]
        assert stolen and stolen[-1]["values"]["data"] == [4242.0], result.stderr
    else:
        assert result.returncode == 2 and not marker.exists()
        assert attempt.message.replace("{path}", str(path)) in result.stderr


def write_attempt(tmp_path: Path, attempt: Attempt, marker: Path, secret: Path) -> Path:
    text = textwrap.dedent(attempt.scenario).lstrip("\n")
    text = text.replace("{marker}", str(marker)).replace("{secret}", str(secret))
    path = tmp_path / attempt.name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=lambda a: a.id)
def test_safe_mode_answers_each_attempt(tmp_path: Path, attempt: Attempt) -> None:
    marker, secret = tmp_path / "marker", tmp_path / "secret.pt"
    torch.save(torch.tensor([4242.0]), secret)
    path = write_attempt(tmp_path, attempt, marker, secret)
    result = safe_run(path, attempt)
    if attempt.status == 2:
        assert_refused_before_running(result, path, attempt)
    elif attempt.status == 1:
        data = assert_refused_while_running(result, attempt)
        assert [s["status"] for s in data["steps"]] == list(attempt.statuses)
        if attempt.code:
            assert data["steps"][attempt.where - 1]["code"].strip() == attempt.code
    else:
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert errors_of(data) == []
        assert [s["status"] for s in data["steps"]] == list(attempt.statuses)
    assert not marker.exists()
    if attempt.trust == READS:
        assert "4242" not in result.stdout + result.stderr
    assert_trust_shows_it_real(path, attempt, marker)
