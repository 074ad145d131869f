"""tensortrace against the tools people would reach for instead, side by side in one run.

Each row is a ratio against a peer measured in the same run (these machines
are noisy, so the two alternate, and a row is the median over alternating
rounds of CPU time, never the fastest round), or an absolute figure where the
goal is one:

* startup: ``tensortrace run SCENARIO --format json`` over ``python -c "import torch"`` (wall);
* render: CPU seconds of ``tensortrace render trace.json`` over a Python that imports the
  libraries it draws with (rich, typer, msgspec);
* stepN: the cost of one traced step with N named tensors, in-process, over
  torchsnooper's cost of one traced line with the same N tensors (at 4 and 40
  tensors, five processes: each figure's median, and the median of their ratios);
* cli-stepN: the same step from the command line with ``--format json`` (CPU,
  the difference between two step counts: the child, the pipe, the parent's
  writing), over the step in process (stepN's ours);
* op-call: one recorded call with its ATen operation (a step looping over
  ``t.add_(1)``, default recording), less the untraced call, over the same
  call recorded by PyTorch's own ``DebugMode``;
* snoopN: ``@tensortrace.snoop()`` with its default output (the console, on
  stderr), per traced line with N tensors in scope, over ``@torchsnooper.snoop()``
  with its own default output, in-process;
* run-consoleN: ``tensortrace run`` with the default console output from the
  command line, CPU per step (the difference between two step counts), over
  torchsnooper's per line with N tensors;
* render410xN[-ma/-ht]: CPU seconds of ``tensortrace render`` of a saved trace of 410
  steps x N tensors (console, markdown, html), against 0.2 s + 0.05 ms a tensor row;
* growth-steps / growth-tensors: cost per step at 800 steps over at 50, and
  per tensor-step at 400 tensors over at 4 (linear growth: about 1);
* graph-800: walking and writing an 800-node autograd graph as Graphviz dot,
  over ``torchviz.make_dot(y).source``;
* graph-100k: CPU seconds that a whole command-line run with a 100,000-node
  graph adds to the untraced run of the same code, with the defaults, over that untraced run;
* mem-peak: peak memory of a scenario holding a 10^8-element tensor, traced
  over untraced (``bench/memory.py``'s scenario-only ratio);
* mem-cpu: CPU time of that scenario through the command line with the
  defaults, over the untraced run;
* check: the slowest bundled scenario's time per variant in ``check`` over the median.

A row whose scenario does not pass, or that misses its goal by more than
half, fails the script (exit status 1); a miss within that is printed as a
miss only. ``--allow-miss ROW,...`` names rows known to miss by more: they
are printed as misses, and fail the script only when their scenario does
not pass. The peers are installed, once, into ``bench/.peers-lib`` (git
ignores it) and put on the path of the measuring processes only: they are
never the project's dependencies.

    python bench/peers.py [--quick] [--code DIR] [--only GROUP,...] [--allow-miss ROW,...]
                          [--no-fail]

``--code DIR`` measures the tensortrace checked out at DIR (e.g. an older
checkout) with this environment, for before/after numbers in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
PEERS = HERE / ".peers-lib"
PEER_PACKAGES = [
    "torchsnooper",
    "pysnooper",
    "torchviz",
    "graphviz",
    "setuptools<81",
]  # setuptools: pkg_resources
SLACK = 1.5  # a measure fails the script only past its goal by this factor (noisy machines)

ENV: Dict[str, str] = dict(os.environ)


def ensure_peers() -> None:
    if (PEERS / "torchsnooper").is_dir() and (PEERS / "torchviz").is_dir():
        return
    print(f"installing the peers into {PEERS} ...", flush=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(PEERS),
            *PEER_PACKAGES,
        ],
        check=True,
    )


def byte_compile(package: Path) -> None:
    """Write the package's bytecode, as ``pip install`` does, so that start-up is measured as users
    meet it (an editable install under ``PYTHONDONTWRITEBYTECODE=1`` would compile every module on
    every start)."""
    import compileall

    compileall.compile_dir(str(package), quiet=1)


# --- running and timing --------------------------------------------------------------


def run_timed(cmd: Sequence[str], cwd: Optional[str] = None) -> Tuple[float, float, int, str]:
    """(wall seconds, CPU seconds of the process and its children, exit status, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(list(cmd), capture_output=True, text=True, env=ENV, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.returncode, out.stdout


def worker(name: str, *args: object, processes: int = 1) -> dict:
    """Run ``WORKERS[name]`` in a fresh process (imports and caches alike for every measure).

    With ``processes`` > 1 it runs that many in turn and gives each figure's median over them,
    and under ``"runs"`` each process's own figures: a figure can settle at one of two levels
    for a whole process (at 40 tensors, six processes of the same code measured ours at
    0.58-0.68 ms or 0.94-1.01 ms a step, and torchsnooper at 1.3-2.5 ms), which no number of
    rounds inside one process averages out.
    """
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, *map(str, args)]
    runs = []
    for _ in range(processes):
        out = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
        if out.returncode != 0:
            raise RuntimeError(f"worker {name} failed:\n{out.stderr[-3000:]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if processes == 1:
        return runs[0]
    medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    return {**medians, "runs": runs}


def _median_ratio(got: dict, ours: str, peer: str) -> Optional[float]:
    """The median over a multi-process worker's runs of each run's ``ours / peer``; None for one
    process (the row divides the two figures)."""
    runs = got.get("runs")
    if not runs:
        return None
    return statistics.median(r[ours] / r[peer] if r[peer] > 0 else float("inf") for r in runs)


def alternate(a: Callable[[], float], b: Callable[[], float], repeat: int) -> Tuple[float, float]:
    """Medians of ``a()`` and ``b()``, taken in turn so that machine noise hits both."""
    xs, ys = [], []
    for _ in range(repeat):
        xs.append(a())
        ys.append(b())
    return statistics.median(xs), statistics.median(ys)


def steps_yaml(tensors: int, steps: int) -> str:
    """A scenario binding ``tensors`` small tensors, then changing one of them per step."""
    body = "".join(f"  - t{k % tensors}.add_(1)\n" for k in range(steps))
    return f"title: steps\nsetup: |\n    {binding(tensors)}\nsteps:\n{body}"


def binding(tensors: int) -> str:
    """One line binding ``tensors`` small tensors, each its own storage.

    One line, so that torchsnooper reports it once: at 400 tensors, a line
    each cost it seconds a run, and the noise of those seconds swamped the
    difference the step rows measure.
    """
    names = ", ".join(f"t{i}" for i in range(tensors))
    return f"{names}{',' if tensors == 1 else ''} = " + ", ".join(["torch.zeros(4)"] * tensors)


# --- workers: each prints one JSON line ---------------------------------------------------


def w_steps(tensors: str, steps: str, repeat: str) -> dict:
    """In-process, in the steady state: tensortrace's cost per step and torchsnooper's per line.

    Both are differences between a run of ``2 * steps`` steps (lines) and one
    of ``steps``, less the untraced runs' difference, so that binding the N
    tensors at the start is not spread over the steps; each round gives one
    such difference per tool, and the result is each one's median over
    ``repeat`` rounds, in CPU time (the fastest round moved 1.86x -> 2.33x on
    the same code between two runs).
    """
    n, k, r = int(tensors), int(steps), int(repeat)
    import gc
    import io

    import torch
    import tensortrace
    from tensortrace.record.helpers import base_namespace

    sys.path.append(str(PEERS))
    import torchsnooper

    gc.freeze()
    sink = io.StringIO()

    def prepare(count: int) -> Dict[str, Callable[[], float]]:
        scenario = tensortrace.loads_scenario(steps_yaml(n, count), path="steps.yaml")
        code = [binding(n)] + [f"t{j % n}.add_(1)" for j in range(count)]
        compiled = [compile(line, "<step>", "exec") for line in code]
        source = "def f():\n" + "".join(f"    {line}\n" for line in code)
        plain_ns: dict = {"torch": torch}
        exec(source, plain_ns)
        snoop_ns: dict = {"torch": torch, "torchsnooper": torchsnooper, "sink": sink}
        exec("@torchsnooper.snoop(output=sink)\n" + source, snoop_ns)

        def untraced() -> float:
            ns = base_namespace()
            start = time.process_time()
            for each in compiled:
                exec(each, ns)
            return time.process_time() - start

        def traced() -> float:
            start = time.process_time()
            result = tensortrace.trace(scenario)
            elapsed = time.process_time() - start
            assert result.passed, result.aborted
            return elapsed

        def timed(f: Callable[[], None]) -> Callable[[], float]:
            def run() -> float:
                sink.seek(0)
                sink.truncate()
                start = time.process_time()
                f()
                return time.process_time() - start

            return run

        return {
            "traced": traced,
            "untraced": untraced,
            "snooped": timed(snoop_ns["f"]),
            "plain": timed(plain_ns["f"]),
        }

    short, long = prepare(k), prepare(2 * k)
    short["traced"](), short["snooped"]()  # warm
    # Each round times all eight runs in turn, so that a burst of machine noise
    # hits ours and the peer alike; each round gives one cost per step and per line.
    ours, peer = [], []
    for _ in range(r):
        got = {}
        for which in ("traced", "snooped", "untraced", "plain"):
            got[which] = (long[which]() - short[which]()) / k
        ours.append(got["traced"] - got["untraced"])
        peer.append(got["snooped"] - got["plain"])
    return {"ours_per_step": statistics.median(ours), "peer_per_line": statistics.median(peer)}


def w_snoop(tensors: str, lines: str, repeat: str) -> dict:
    """``@tensortrace.snoop()`` with its default output (the console, on stderr) and
    ``@torchsnooper.snoop()`` with its own, per traced line, in-process.

    Each is the difference between a function of ``2 * lines`` lines and one of
    ``lines``, less the plain functions' difference; a round times all six in
    turn, and each result is the median over ``repeat`` rounds, in CPU time.
    """
    n, k, r = int(tensors), int(lines), int(repeat)
    import contextlib
    import gc
    import io

    import torch
    import tensortrace

    sys.path.append(str(PEERS))
    import torchsnooper

    gc.freeze()
    sink = io.StringIO()
    folder = Path(tempfile.mkdtemp(prefix="tensortrace-snoop-"))

    def functions(count: int) -> Dict[str, Callable[[], object]]:
        code = [binding(n)] + [f"t{j % n}.add_(1)" for j in range(count)]
        source = "def f():\n" + "".join(f"    {line}\n" for line in code)
        path = folder / f"lines{count}.py"  # snoop() shows each line from its file, as for a user's
        path.write_text(source)
        compiled = compile(source, str(path), "exec")
        made = {}
        for which in ("plain", "ours", "peer"):
            ns: dict = {"torch": torch}
            exec(compiled, ns)
            made[which] = ns["f"]
        made["ours"] = tensortrace.snoop()(made["ours"])
        made["peer"] = torchsnooper.snoop(output=sink)(made["peer"])
        return made

    def timed(f: Callable[[], object]) -> float:
        sink.seek(0)
        sink.truncate()
        with contextlib.redirect_stderr(sink):
            start = time.process_time()
            f()
            return time.process_time() - start

    short, long = functions(k), functions(2 * k)
    timed(short["ours"]), timed(short["peer"])  # warm
    ours, peer = [], []
    for _ in range(r):
        got = {which: (timed(long[which]) - timed(short[which])) / k for which in long}
        ours.append(got["ours"] - got["plain"])
        peer.append(got["peer"] - got["plain"])
    return {"ours_per_line": statistics.median(ours), "peer_per_line": statistics.median(peer)}


def step_files(folder: Path, tensors: int, *counts: int) -> Dict[int, Path]:
    """Scenario files of ``steps_yaml(tensors, k)`` for each step count ``k``."""
    files = {}
    for k in counts:
        files[k] = folder / f"steps{tensors}x{k}.yaml"
        files[k].write_text(steps_yaml(tensors, k))
    return files


def cli_per_step(
    tt: Sequence[str], files: Dict[int, Path], extra: Sequence[str], rounds: int
) -> Tuple[float, set]:
    """CPU per step of ``tensortrace run`` from the command line: the median, over ``rounds``
    alternating pairs, of the difference between the longer and the shorter scenario."""
    k1, k2 = sorted(files)
    per, codes = [], set()
    for _ in range(rounds):
        _, short, c1, _ = run_timed([*tt, "run", str(files[k1]), *extra])
        _, long, c2, _ = run_timed([*tt, "run", str(files[k2]), *extra])
        per.append((long - short) / (k2 - k1))
        codes |= {c1, c2}
    return statistics.median(per), codes


def w_graph(nodes: str, repeat: str) -> dict:
    """Walking and writing an autograd graph as dot, and torchviz doing the same."""
    import torch

    sys.path.append(str(PEERS))
    import torchviz
    from tensortrace.record.graph import walk_graph
    from tensortrace.trace import Environment, ScenarioInfo, Step, Trace
    from tensortrace.render import render

    x = torch.ones(3, requires_grad=True)
    y = x
    for _ in range(int(nodes) - 1):
        y = y * 1.0001

    def ours() -> float:
        start = time.perf_counter()
        graph = walk_graph("y", y.grad_fn, {id(x): "x", id(y): "y"})
        step = Step(index=1, code="y = ...", line=1, graphs=(graph,))
        trace = Trace(
            ScenarioInfo(title="graph"),
            Environment(tensortrace="", torch="", python="", device="cpu"),
            steps=(step,),
        )
        text = render([trace], "dot")
        elapsed = time.perf_counter() - start
        assert len(graph.nodes) == int(nodes) and "MulBackward0" in text
        return elapsed

    def peer() -> float:
        start = time.perf_counter()
        text = torchviz.make_dot(y).source
        elapsed = time.perf_counter() - start
        assert "MulBackward0" in text
        return elapsed

    ours(), peer()
    a, b = alternate(ours, peer, int(repeat))
    return {"ours": a, "peer": b}


def w_check(repeat: str) -> dict:
    """Each bundled scenario through the runner, in order, as ``tensortrace check`` runs them: its
    fastest round per variant."""
    from tensortrace.scenario.library import bundled_names, bundled_path
    from tensortrace.run import runner
    from tensortrace.run.runner import run_all
    from tensortrace.scenario import load_scenario

    if hasattr(runner, "prepare"):  # as 'tensortrace check' does before its first file
        runner.prepare([load_scenario(bundled_path(name)) for name in bundled_names()])
    times: Dict[str, List[float]] = {}
    for _ in range(int(repeat)):
        for name in bundled_names():
            scenario = load_scenario(bundled_path(name))
            start = time.perf_counter()
            traces = run_all([scenario])
            times.setdefault(name, []).append(
                (time.perf_counter() - start) / len(traces)
            )  # per variant
            assert all(t.aborted is None for t in traces), (name, [t.aborted for t in traces])
    return {name: min(ts) for name, ts in times.items()}  # noise only ever adds time


def w_ops(calls: str, repeat: str) -> dict:
    """One call with its ATen operation recorded by the tracer (default recording, in process), and
    by PyTorch's ``DebugMode``, each less the untraced call: the difference between a loop of
    ``2 * calls`` calls and one of ``calls``, medians over ``repeat`` alternating rounds, CPU."""
    k, r = int(calls), int(repeat)
    import gc

    import torch
    from torch.utils._debug_mode import DebugMode

    from tensortrace.record.tracer import trace
    from tensortrace.scenario import loads_scenario

    gc.freeze()

    def loop(count: int) -> str:
        return f"for _ in range({count}):\n    t.add_(1)"

    def prepare(count: int) -> Dict[str, Callable[[], float]]:
        code = loop(count)
        scenario = loads_scenario(
            "title: ops\nsetup: t = torch.zeros(4)\nsteps:\n  - run: |\n"
            + textwrap.indent(code, "      ")
            + "\n",
            path="ops.yaml",
        )
        compiled = compile(code, "<ops>", "exec")

        def traced() -> float:
            start = time.process_time()
            result = trace(scenario, safe=False, ops=True)
            elapsed = time.process_time() - start
            assert result.passed and result.steps[-1].ops, result.aborted
            return elapsed

        def plain() -> float:
            ns = {"t": torch.zeros(4)}
            start = time.process_time()
            exec(compiled, ns)
            return time.process_time() - start

        def debug() -> float:
            ns = {"t": torch.zeros(4)}
            start = time.process_time()
            with DebugMode():
                exec(compiled, ns)
            return time.process_time() - start

        return {"traced": traced, "plain": plain, "debug": debug}

    short, long = prepare(k), prepare(2 * k)
    short["traced"](), short["debug"]()  # warm
    ours, peer = [], []
    for _ in range(r):
        got = {which: (long[which]() - short[which]()) / k for which in long}
        ours.append(got["traced"] - got["plain"])
        peer.append(got["debug"] - got["plain"])
    return {"ours": statistics.median(ours), "peer": statistics.median(peer)}


WORKERS = {"steps": w_steps, "snoop": w_snoop, "graph": w_graph, "check": w_check, "ops": w_ops}


# --- the rows ------------------------------------------------------------------------------


class Table:
    def __init__(self, allowed: Sequence[str] = ()) -> None:
        self.failed: List[str] = []
        self.verdicts: List[str] = []  # each failed row with its figure, for the last line of a log
        self.allowed = set(allowed)  # rows known to miss by more than SLACK: printed, not failed
        print(f"{'name':<16}{'ours':>12}{'peer':>12}{'ratio':>9}  {'goal':<10}ok", flush=True)

    def row(
        self,
        name: str,
        ours: float,
        peer: float,
        goal: float,
        *,
        absolute: bool = False,
        unit: str = "s",
        passed: bool = True,
        note: str = "",
        ratio: Optional[float] = None,
    ) -> None:
        if ratio is None:
            ratio = ours / peer if peer > 0 else float("inf")
        value = ours if absolute else ratio
        ok = passed and value <= goal
        known = name in self.allowed and passed
        fails = not passed or (value > goal * SLACK and not known)
        goal_text = f"<={goal:g}{unit}" if absolute else f"<={goal:g}x"
        if fails:
            figure = _fmt(ours, unit) if absolute else f"{ratio:.2f}x"
            self.failed.append(name)
            self.verdicts.append(
                f"{name} ({figure}, goal {goal_text}{'' if passed else ', did not pass'})"
            )
        if ok:
            mark = "yes"
        elif fails:
            mark = "NO (fails)"
        else:
            mark = "NO (known miss)" if value > goal * SLACK else "no (within noise)"
        print(
            f"{name:<16}{_fmt(ours, unit):>12}{_fmt(peer, unit):>12}{ratio:>8.2f}x "
            f" {goal_text:<10}{mark}" + (f"  {note}" if note else ""),
            flush=True,
        )


def _fmt(value: float, unit: str) -> str:
    if unit == "s" and value < 0.1:
        return f"{value * 1e3:.3f}ms"
    return f"{value:.3f}{unit}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and sizes (CI)")
    parser.add_argument("--code", help="measure the tensortrace checked out in this folder")
    parser.add_argument(
        "--only",
        help=(
            "comma-separated row groups: startup,render,steps,cli,ops,"
            "snoop,console,render-size,growth,graph,mem,check"
        ),
    )
    parser.add_argument(
        "--allow-miss",
        default="",
        help="comma-separated rows known to miss their goal by more than half: printed, not failed",
    )
    parser.add_argument(
        "--no-fail",
        action="store_true",
        help="print misses but exit 0 (while goals are still being worked on)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.worker:
        print(json.dumps(WORKERS[args.worker](*rest)))
        return 0
    if args.code:
        ENV["PYTHONPATH"] = os.pathsep.join(
            [str(Path(args.code).resolve())] + [p for p in [ENV.get("PYTHONPATH")] if p]
        )
    ensure_peers()
    byte_compile(
        Path(args.code).resolve() / "tensortrace" if args.code else HERE.parent / "tensortrace"
    )
    quick = args.quick
    only = set(args.only.split(",")) if args.only else None
    want = lambda group: only is None or group in only  # noqa: E731
    py = sys.executable
    tt = [py, "-m", "tensortrace"]
    table = Table([row for row in args.allow_miss.split(",") if row])
    tmp = Path(tempfile.mkdtemp(prefix="tensortrace-peers-"))
    os.chdir(
        tmp
    )  # 'python -m' and '-c' put the working folder first on the path: never a checkout's

    if want("startup") or want("render"):
        r = 3 if quick else 7
        codes = set()

        def ours_run() -> float:
            wall, _, code, _ = run_timed(tt + ["run", "detach-vs-data", "--format", "json"])
            codes.add(code)
            return wall

        ours, peer = alternate(ours_run, lambda: run_timed([py, "-c", "import torch"])[0], r)
        if want("startup"):
            table.row(
                "startup", ours, peer, 1.10, passed=codes == {0}, note=f"wall; exit {sorted(codes)}"
            )
        trace_file = tmp / "trace.json"
        trace_file.write_text(run_timed(tt + ["run", "detach-vs-data", "--format", "json"])[3])
        if want("render"):
            rendered = set()

            def render_run() -> float:
                _, cpu, code, _ = run_timed(tt + ["render", str(trace_file)])
                rendered.add(code)
                return cpu

            # the floor: a Python that imports the libraries a render draws with (an absolute
            # goal of 0.2 s was met or missed by the machine's speed: 0.45 s on one whose
            # floor alone took over 0.25 s)
            floor = [py, "-c", "import rich.console, typer, msgspec"]
            ours, peer = alternate(render_run, lambda: run_timed(floor)[1], r + 2)
            table.row(
                "render",
                ours,
                peer,
                1.25,
                passed=rendered == {0},
                note=f"CPU vs importing rich, typer and msgspec; exit {sorted(rendered)}",
            )

    per_step: Dict[int, float] = {}
    if want("steps") or want("cli"):
        for n in (4, 40, 400):
            if n == 400 and not want("steps"):
                continue
            got = worker(
                "steps",
                n,
                (40 if quick else 100) * (2 if n >= 400 else 5),  # a cheap step needs more steps
                5 if quick else 9,
                processes=1 if n >= 400 else 5,  # 400 tensors: 40 s a process, and steady
            )
            per_step[n] = got["ours_per_step"]
            if want("steps"):
                # the ratio is the median of each process's own: ours and the peer's figures
                # share a process's level more often than not (ratios 0.40-0.57 at 40 tensors
                # in six processes whose figures each moved by 1.7x)
                table.row(
                    f"step{n}",
                    got["ours_per_step"],
                    got["peer_per_line"],
                    0.6 if n == 4 else 0.5,
                    ratio=_median_ratio(got, "ours_per_step", "peer_per_line"),
                    note="per step vs torchsnooper per line"
                    + (
                        f", median of {len(got['runs'])} processes' ratios" if "runs" in got else ""
                    ),
                )

    if want("cli"):
        for n in (4, 40):
            # 1,600 steps apart: start-up's noise (a tenth of a second and more between runs)
            # then moves the figure per step by under a tenth of a millisecond
            files = step_files(tmp, n, 10, 1610)
            ours, codes = cli_per_step(tt, files, ["--format", "json"], 3 if quick else 5)
            table.row(
                f"cli-step{n}",
                ours,
                per_step[n],
                1.5,
                passed=codes == {0},
                note="CPU per step from the CLI, --format json, vs the step in process",
            )

    if want("ops"):
        got = worker("ops", 400, 5 if quick else 9)
        table.row(
            "op-call",
            got["ours"],
            got["peer"],
            0.3,
            note="one recorded call + ATen op vs DebugMode's (goal: 90k of its 306k instructions)",
        )

    snooped: Dict[int, dict] = {}
    if want("snoop") or want("console"):
        for n in (4, 40, 400):
            lines = 20 if n >= 400 else (50 if quick else 100)
            snooped[n] = worker("snoop", n, lines, 3 if quick else 7)
            if want("snoop"):
                goal = 1.0 if n == 4 else 0.5
                got = snooped[n]
                table.row(
                    f"snoop{n}",
                    got["ours_per_line"],
                    got["peer_per_line"],
                    goal,
                    note="snoop() default output per line vs torchsnooper's",
                )

    if want("console"):
        for n in (4, 40, 400):
            # as cli-stepN: the two runs a second and more apart
            files = step_files(tmp, n, 10, 160 if n >= 400 else 1610)
            ours, codes = cli_per_step(tt, files, [], 3 if quick else 5)
            goal = 1.0 if n == 4 else 0.5
            table.row(
                f"run-console{n}",
                ours,
                snooped[n]["peer_per_line"],
                goal,
                passed=codes == {0},
                note="CLI, console output, CPU per step vs torchsnooper per line",
            )

    if want("render-size"):
        forms = ["console"] if quick else ["console", "markdown", "html"]
        for n in (4, 40):
            saved = tmp / f"trace410x{n}.json"
            (tmp / f"steps410x{n}.yaml").write_text(steps_yaml(n, 410))
            made = run_timed(tt + ["run", str(tmp / f"steps410x{n}.yaml"), "-o", str(saved)])
            for form in forms:
                cpus, codes = [], {made[2]}
                for _ in range(3 if quick else 5):
                    _, cpu, code, _ = run_timed(tt + ["render", str(saved), "--format", form])
                    cpus.append(cpu)
                    codes.add(code)
                rows = 410 * n
                table.row(
                    f"render410x{n}" + ("" if form == "console" else f"-{form[:2]}"),
                    statistics.median(cpus),
                    run_timed([py, "-c", "pass"])[1],
                    0.2 + 0.05e-3 * rows,
                    absolute=True,
                    passed=codes == {0},
                    note=f"CPU; {form}; goal 0.2 s + 0.05 ms x {rows} rows",
                )

    if want("growth"):
        a = worker("steps", 40, 50, 3 if quick else 5)["ours_per_step"]
        b = worker("steps", 40, 800, 1 if quick else 3)["ours_per_step"]
        table.row("growth-steps", b, a, 1.5, note="per step at 800 steps / at 50")
        c = worker("steps", 4, 50, 3 if quick else 5)["ours_per_step"] / 4
        d = worker("steps", 400, 50, 3 if quick else 5)["ours_per_step"] / 400
        table.row("growth-tensors", d, c, 1.5, note="per tensor-step at 400 tensors / at 4")

    if want("graph"):
        got = worker("graph", 800, 5 if quick else 15)
        table.row(
            "graph-800",
            got["ours"],
            got["peer"],
            0.5,
            note="walk + dot vs torchviz.make_dot(y).source",
        )
        big = tmp / "graph.yaml"
        code = "y = x\nfor _ in range(100_000):\n    y = y * 1.0"
        big.write_text(
            "title: big graph\nsetup: x = torch.ones(1, requires_grad=True)\nsteps:\n  - run: |\n"
            + textwrap.indent(code, "      ")
            + "\n    graph: [y]\n"
        )
        plain = f"import torch\nx = torch.ones(1, requires_grad=True)\n{code}\n"
        ours_runs, peer_cpus = [], []
        # the fastest of three each, quick or not: measured at 3.4 s and 4.6 s over untraced in
        # two quick runs of the same code (the fastest of two), across its goal's fail line
        for _ in range(3):
            ours_runs.append(run_timed(tt + ["run", str(big), "--format", "json"]))
            peer_cpus.append(run_timed([py, "-c", plain])[1])
        o_cpu, p_cpu = min(run[1] for run in ours_runs), min(peer_cpus)
        o_code = max(run[2] for run in ours_runs)  # every run must pass
        nodes = min(_graph_nodes(run[3]) for run in ours_runs)
        table.row(
            "graph-100k",
            o_cpu - p_cpu,
            p_cpu,
            0.7,  # was 3 s over an untraced run of 4.2 s: a ratio follows the machine's speed
            passed=o_code == 0 and nodes == 100_001,
            note=f"CPU over untraced; exit {o_code}, {nodes:,} nodes, {o_cpu:.1f}s in all",
        )

    if want("mem"):
        sys.path.insert(0, str(HERE))
        if args.code:
            sys.path.insert(0, str(Path(args.code).resolve()))
        import memory  # bench/memory.py

        os.environ.update(ENV)
        plain = memory.measure("untraced", 10**8)
        traced = memory.measure("trust", 10**8)
        ours = traced["peak_kb"] - traced["base_kb"]
        table.row(
            "mem-peak",
            ours / 1024,
            (plain["peak_kb"] - plain["base_kb"]) / 1024,
            1.10,
            unit="MiB",
            note="scenario only, --trust, in-process",
        )
        mem = tmp / "mem.yaml"
        mem.write_text(
            "title: memory\nsteps:\n" + "".join(f"  - {s.format(n=10**8)}\n" for s in memory.STEPS)
        )
        plain_code = "import torch\n" + "\n".join(s.format(n=10**8) for s in memory.STEPS)
        ours_runs, peer_runs, codes = [], [], set()
        for _ in range(1 if quick else 3):
            _, cpu, code, out = run_timed(tt + ["run", str(mem), "--format", "json"])
            ours_runs.append(cpu)
            codes.add((code, json.loads(out).get("aborted") if out.strip() else "no output"))
            peer_runs.append(run_timed([py, "-c", plain_code])[1])
        table.row(
            "mem-cpu",
            statistics.median(ours_runs),
            statistics.median(peer_runs),
            1.3,
            passed=codes == {(0, None)},
            note=f"CLI, defaults; exit/aborted {sorted(codes)}",
        )

    if want("check"):
        times = worker(
            "check", 2 if quick else 3
        )  # one noisy sample of one scenario would be the row's maximum
        median = statistics.median(times.values())
        worst = max(times, key=times.get)
        table.row("check", times[worst], median, 3.0, note=f"slowest: {worst}")

    if table.failed:
        print(
            f"FAILED (past the goal by more than {SLACK:g}x, or did not pass):"
            f" {', '.join(table.verdicts)}"
        )
        return 0 if args.no_fail else 1
    return 0


def _graph_nodes(text: str) -> int:
    try:
        data = json.loads(text)
        return max((len(g["nodes"]) for s in data["steps"] for g in s["graphs"]), default=0)
    except (ValueError, KeyError, TypeError):
        return 0


if __name__ == "__main__":
    sys.exit(main())
