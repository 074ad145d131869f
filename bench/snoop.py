"""What ``@tensortrace.snoop()`` costs over the same function untraced, measured in the same run.

A training step of a small MLP (Linear 64-128-10, SGD, batch 32: 9,610
parameters in four tensors) is timed plain, traced with values, and traced
with ``values=False``, alternating so that machine noise hits all three; the
trace is rendered to JSON in a temporary file, as a user's ``snoop("t.json")``
would. A second pair times a function that only calls a small Python helper
in a loop, to show what the line tracer costs the calls it does not trace.

Prints the medians and the ratios to the plain run. Targets: at most 5x a
plain step with values (each of the step's lines probes every tensor in
scope), and at most 10 microseconds per line run past max_iterations in the second.

    python bench/snoop.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tensortrace  # noqa: E402


def train_step(model, x, y, opt):
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def helper(i):
    return i + 1


def calls(n):
    total = 0
    for i in range(n):
        total = helper(total)
    return total


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.json")
        modes = {
            "plain": train_step,
            "snoop": tensortrace.snoop(out)(train_step),
            "snoop(values=False)": tensortrace.snoop(out, values=False)(train_step),
        }
        for fn in modes.values():  # warm up: imports, first allocations
            fn(model, x, y, opt)
        times = {name: [] for name in modes}
        for _ in range(args.repeat):
            for name, fn in modes.items():
                times[name].append(timed(fn, model, x, y, opt))
        n = 20000
        untraced = {"plain": calls, "snoop": tensortrace.snoop(out, max_iterations=1)(calls)}
        call_times = {name: [] for name in untraced}
        for _ in range(args.repeat):
            for name, fn in untraced.items():
                call_times[name].append(timed(fn, n))
    base = statistics.median(times["plain"])
    print(f"training step, median of {args.repeat}:")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:22s} {median * 1000:9.2f} ms   {median / base:6.1f}x plain")
    base = statistics.median(call_times["plain"])
    print(f"{n:,} calls of an untraced helper (one loop line recorded, the rest counted):")
    for name, values in call_times.items():
        median = statistics.median(values)
        print(f"  {name:22s} {median * 1000:9.2f} ms   {median / base:6.1f}x plain")
    extra = statistics.median(call_times["snoop"]) - base
    print(f"  {extra / (2 * n) * 1e6:.2f} microseconds per line run (two lines per iteration)")


if __name__ == "__main__":
    main()
