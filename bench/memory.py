"""Peak memory of a traced run over an untraced one, measured in the same run.

A scenario holds a 10^8-element float32 tensor (400 MB) through clone,
detach and an in-place change. Each mode runs in a fresh subprocess, and the
peak resident set size is read from the kernel. Two ratios are printed:

* whole process: peak RSS traced / peak RSS untraced;
* scenario only: (peak - RSS after importing torch) traced / untraced,
  which is the stricter one (the import's cost is the same for both).

Target: at most 1.10 for the scenario-only ratio.

    python bench/memory.py [--elements N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

STEPS = ["a = torch.ones({n})", "b = a.clone()", "c = a.detach()", "c.mul_(2)", "d = b[::2]"]

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import torch
    import tensortrace
    from tensortrace.record.helpers import base_namespace

    def rss_kb():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    mode, n = sys.argv[1], int(sys.argv[2])
    steps = {steps!r}
    text = "title: memory\\nsteps:\\n" + "".join(f"  - {{s.format(n=n)}}\\n" for s in steps)
    scenario = tensortrace.loads_scenario(text, path="memory.yaml")
    torch.ones(1).clone()  # warm the allocator and dispatcher alike in both modes
    base = rss_kb()
    if mode == "untraced":
        ns = base_namespace()
        for s in steps:
            exec(s.format(n=n), ns)
    else:
        trace = tensortrace.trace(scenario, safe=(mode == "safe"))
        assert trace.passed, trace
        big = [t for t in trace.steps[-1].tensors if t.name == "a"][0]
        assert big.values.kind == "summary" and big.values.summary.numel == n
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({{"base_kb": base, "peak_kb": peak}}))
    """
).format(steps=STEPS)


def measure(mode: str, n: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(n)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=10**8)
    args = parser.parse_args()
    plain = measure("untraced", args.elements)
    print(f"elements: {args.elements:,} (float32, {args.elements * 4 / 2**20:,.0f} MiB per tensor)")
    print(
        f"untraced: peak {plain['peak_kb'] / 1024:,.0f} MiB, after import"
        f" {plain['base_kb'] / 1024:,.0f} MiB"
    )
    worst = 0.0
    for mode in ("trust", "safe"):
        traced = measure(mode, args.elements)
        whole = traced["peak_kb"] / plain["peak_kb"]
        scenario = (traced["peak_kb"] - traced["base_kb"]) / max(
            1, plain["peak_kb"] - plain["base_kb"]
        )
        worst = max(worst, scenario)
        print(
            f"traced ({mode}): peak {traced['peak_kb'] / 1024:,.0f} MiB; "
            f"ratio whole process {whole:.3f}, scenario only {scenario:.3f}"
        )
    verdict = "within" if worst <= 1.10 else "OVER"
    print(f"worst scenario-only ratio {worst:.3f}: {verdict} the 1.10 target")


if __name__ == "__main__":
    main()
