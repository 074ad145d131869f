"""What ``tensortrace.doctor()`` costs a real training loop, next to what users would pick instead.

Two small models train on CPU for 50 steps each (SGD): a CNN (two 3x3
convolutions, 16 and 32 channels, batch 32 of 3x32x32) and a transformer
block (``nn.TransformerEncoderLayer``, d_model 64, 4 heads, batch 16 of 32
tokens). Each loop runs plain, under ``with tensortrace.doctor()``, and under
``torch.autograd.set_detect_anomaly(True)``, alternating the three in one
process so that machine noise hits all of them; CPU-time medians are
compared. Peak memory is measured in a fresh process per variant: the
highest rise of the resident set over the loop, read after each forward
(when the graph and its saved tensors are alive) and after each step.

Goal: doctor at most 1.5x plain and below anomaly mode; peak memory at most
1.2x plain.

    python bench/doctor.py [--repeat N] [--steps N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tensortrace  # noqa: E402

VARIANTS = ("plain", "doctor", "anomaly")


def cnn():
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    return model, x, y, nn.functional.cross_entropy


def transformer():
    model = nn.Sequential(
        nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True),
        nn.Flatten(),
        nn.Linear(32 * 64, 10),
    )
    x, y = torch.randn(16, 32, 64), torch.randint(0, 10, (16,))
    return model, x, y, nn.functional.cross_entropy


MODELS = {"cnn": cnn, "transformer": transformer}


def context(variant: str):
    if variant == "doctor":
        return tensortrace.doctor(os.devnull)
    if variant == "anomaly":
        return torch.autograd.set_detect_anomaly(True)
    return contextlib.nullcontext()


def train(make, variant: str, steps: int) -> float:
    """CPU seconds for ``steps`` training steps of a fresh model under ``variant``."""
    torch.manual_seed(0)
    model, x, y, loss_fn = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.process_time()
    with context(variant):
        for _ in range(steps):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
    return time.process_time() - start


def peak_rise(model: str, variant: str, steps: int) -> float:
    """MiB the resident set rose by at its highest during the loop, in a fresh process."""
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", model, variant, str(steps)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def resident() -> int:
    """Bytes resident now (/proc/self/statm; 0 where there is none)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except OSError:
        return 0


def memory_child(model: str, variant: str, steps: int) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net, x, y, loss_fn = MODELS[model]()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with context(variant):  # imports paid once, not per step: not counted
        pass
    before = peak = resident()
    with context(variant):
        for _ in range(steps):
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            peak = max(peak, resident())  # the graph and its saved tensors are all alive here
            loss.backward()
            opt.step()
            peak = max(peak, resident())
    print(json.dumps((peak - before) / 2**20))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--memory-child":
        memory_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, make in MODELS.items():
        train(make, "doctor", 3)  # warm every path once
        times = {v: [] for v in VARIANTS}
        for _ in range(args.repeat):
            for variant in VARIANTS:
                times[variant].append(train(make, variant, args.steps))
        med = {v: statistics.median(t) for v, t in times.items()}
        base = med["plain"]
        print(f"{name}: {args.steps} steps, CPU-time medians of {args.repeat} alternating runs")
        for variant in VARIANTS:
            print(f"  {variant:<8} {med[variant]:7.3f} s  {med[variant] / base:5.2f}x plain")
        rise = {v: peak_rise(name, v, args.steps) for v in ("plain", "doctor")}
        ratio = (rise["doctor"] / rise["plain"]) if rise["plain"] > 0 else float("nan")
        print(
            f"  peak memory rise over the loop: plain {rise['plain']:.1f} MiB, "
            f"doctor {rise['doctor']:.1f} MiB ({ratio:.2f}x)"
        )


if __name__ == "__main__":
    main()
