"""Safe mode's cost over --trust, measured side by side in the same run.

Two measurements, alternating the modes so that machine noise hits both:

* command line: wall time of ``tensortrace run SCENARIO --format json``
  with and without ``--trust`` (start-up, policy check, forked child,
  tracing, output);
* library: ``tensortrace.trace(scenario, safe=...)`` in this process
  (policy check, guarded execution, tracing), without start-up.

* the kernel's wall: the forked runner with and without confinement (the
  Python-level checks off in both, so only the wall differs), and the time
  ``confine()`` itself takes inside a fresh child.

Prints the median of each mode and their ratio. Targets: safe over trust at
most 1.10; the wall adds at most 50 ms per scenario.

    python bench/safe_mode.py [--scenario NAME_OR_FILE] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def time_cli(target: str, trust: bool) -> float:
    cmd = [sys.executable, "-m", "tensortrace", "run", target, "--format", "json"] + (
        ["--trust"] if trust else []
    )
    start = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="detach-vs-data")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()

    import tensortrace
    from tensortrace.scenario.library import resolve_target

    scenario = tensortrace.load_scenario(resolve_target(args.scenario))
    print(
        f"scenario: {args.scenario} ({len(scenario.steps)} steps,"
        f" {len(scenario.resolved())} variant(s))"
    )

    lib = {True: [], False: []}
    for _ in range(3):  # warm up imports and caches alike
        tensortrace.trace_variants(scenario, safe=True)
        tensortrace.trace_variants(scenario, safe=False)
    for _ in range(args.repeat * 5):
        for safe in (True, False):
            start = time.perf_counter()
            tensortrace.trace_variants(scenario, safe=safe)
            lib[safe].append(time.perf_counter() - start)
    safe_ms, trust_ms = statistics.median(lib[True]) * 1e3, statistics.median(lib[False]) * 1e3
    print(
        f"library:      safe {safe_ms:7.2f} ms   trust {trust_ms:7.2f} ms   ratio"
        f" {safe_ms / trust_ms:.3f}"
    )

    wall_cost(scenario, args.repeat)

    cli = {True: [], False: []}
    time_cli(args.scenario, True)
    for _ in range(args.repeat):
        for trust in (False, True):
            cli[trust].append(time_cli(args.scenario, trust))
    safe_s, trust_s = statistics.median(cli[False]), statistics.median(cli[True])
    ratio = safe_s / trust_s
    print(f"command line: safe {safe_s:7.3f} s    trust {trust_s:7.3f} s    ratio {ratio:.3f}")
    print(
        f"command-line ratio {ratio:.3f}: {'within' if ratio <= 1.10 else 'OVER'} the 1.10 target"
    )


def wall_cost(scenario, repeat: int) -> None:
    """The kernel's wall: whole forked runs with and without it, and confine() on its own."""
    import os

    from tensortrace.run import confine
    from tensortrace.run.runner import run_scenario

    report = confine.available()
    if not report.complete:
        print(
            f"kernel wall: not measured, this machine cannot build it ({'; '.join(report.missing)})"
        )
        return
    runs = {True: [], False: []}
    for _ in range(2):
        run_scenario(scenario, safe=False, confine=True)
    for _ in range(repeat * 3):
        for confined in (True, False):
            start = time.perf_counter()
            run_scenario(scenario, safe=False, confine=confined)
            runs[confined].append(time.perf_counter() - start)
    setup = []
    for _ in range(repeat * 3):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            start = time.perf_counter()
            confine.confine(keep_fds=(write_fd,))
            os.write(write_fd, f"{time.perf_counter() - start}".encode())
            os._exit(0)
        os.close(write_fd)
        setup.append(float(os.read(read_fd, 64) or b"nan"))
        os.close(read_fd)
        os.waitpid(pid, 0)
    with_ms, without_ms = statistics.median(runs[True]) * 1e3, statistics.median(runs[False]) * 1e3
    added = with_ms - without_ms
    setup_ms = statistics.median(setup) * 1e3
    print(
        f"kernel wall:  confined {with_ms:7.2f} ms   unconfined {without_ms:7.2f} ms   added"
        f" {added:6.2f} ms per scenario"
    )
    print(f"kernel wall:  confine() itself {setup_ms:6.2f} ms (median of {len(setup)} children)")
    print(
        f"kernel wall adds {max(added, setup_ms):.1f} ms:"
        f" {'within' if max(added, setup_ms) <= 50 else 'OVER'} the 50 ms target"
    )


if __name__ == "__main__":
    main()
