"""Safe mode's cost over --trust, measured side by side in the same run.

Two measurements, alternating the modes so that machine noise hits both:

* command line: wall time of ``tensortrace run SCENARIO --format json``
  with and without ``--trust`` (start-up, policy check, forked child,
  tracing, output);
* library: ``tensortrace.trace(scenario, safe=...)`` in this process
  (policy check, guarded execution, tracing), without start-up.

Prints the median of each mode and their ratio. Target: at most 1.10.

    python bench/safe_mode.py [--scenario NAME_OR_FILE] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def time_cli(target: str, trust: bool) -> float:
    cmd = [sys.executable, "-m", "tensortrace", "run", target, "--format", "json"] + (["--trust"] if trust else [])
    start = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="detach-vs-data")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()

    import tensortrace
    from tensortrace.library import resolve_target

    scenario = tensortrace.load_scenario(resolve_target(args.scenario))
    print(f"scenario: {args.scenario} ({len(scenario.steps)} steps, {len(scenario.resolved())} variant(s))")

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
    print(f"library:      safe {safe_ms:7.2f} ms   trust {trust_ms:7.2f} ms   ratio {safe_ms / trust_ms:.3f}")

    cli = {True: [], False: []}
    time_cli(args.scenario, True)
    for _ in range(args.repeat):
        for trust in (False, True):
            cli[trust].append(time_cli(args.scenario, trust))
    safe_s, trust_s = statistics.median(cli[False]), statistics.median(cli[True])
    ratio = safe_s / trust_s
    print(f"command line: safe {safe_s:7.3f} s    trust {trust_s:7.3f} s    ratio {ratio:.3f}")
    print(f"command-line ratio {ratio:.3f}: {'within' if ratio <= 1.10 else 'OVER'} the 1.10 target")


if __name__ == "__main__":
    main()
