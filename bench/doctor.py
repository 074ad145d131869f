"""What ``tensortrace.doctor()`` costs a real training loop, next to what users would pick instead.

Two small models train on CPU for 50 steps each (SGD): a CNN (two 3x3
convolutions, 16 and 32 channels, batch 32 of 3x32x32) and a transformer
block (``nn.TransformerEncoderLayer``, d_model 64, 4 heads, batch 16 of 32
tokens). Each loop runs plain, under ``with tensortrace.doctor()``, under
``torch.autograd.set_detect_anomaly(True)``, under an empty dispatch mode
(what any Python ``TorchDispatchMode`` costs), an empty function mode (what
any ``TorchFunctionMode`` costs: doctor's write watch is one) and identity
saved-tensor hooks, alternating in one process so that machine noise hits all
of them; CPU-time medians are compared. ``--real`` times real-size steps
instead (MNIST, word language model and nanoGPT shapes), ``--scripts`` whole
training scripts as ``tensortrace doctor`` runs them.

Peak memory is measured in a fresh process per variant, two ways, beside
the floor any Python dispatch mode sets (an empty ``TorchDispatchMode``
that only calls the operation, on for the whole loop):

* the resident set's highest rise over the loop, read after each forward
  (when the graph and its saved tensors are alive) and after each step. Every
  variant's process first enters and leaves each context once, so all load
  the same modules: otherwise one-time costs of the process land on one
  variant only (Python's table of interned strings doubling when the first
  step's imports cross its size; ~3.7 MiB here). It still counts what the
  first step pays once: the objects PyTorch makes for each ATen operation a
  Python dispatch mode sees for the first time (the floor shows them).
* the live heap at its highest (glibc's in-use bytes, with
  ``PYTHONMALLOC=malloc`` so that Python's objects count too), over the loop
  after one warm step: the graph, its saved tensors and doctor's records.
  Printed where glibc's ``mallinfo2`` exists.

Goal: doctor at most 1.5x plain and below anomaly mode; peak memory at most
1.2x plain.

The NaN and Inf watch has its own rows: ``doctor`` is the default (the loss
looked at once per backward, no dispatch mode), ``doctor-nan`` (``--nan``: the
outputs and gradients of log, division, sqrt, exp, pow... checked),
``doctor-nan-all`` (``--nan-all``: every operation's output and every node's
gradient checked) beside ``anomaly`` (whose ``check_nan`` checks every node's
output in backward), ``bare`` (doctor with its NaN watch off: what the
default's loss check adds is ``doctor`` over ``bare``) and ``check``, the
floor of checking every operation: a dispatch mode that only calls the
operation and looks at its output once (one sum).
``mlp`` is the op-dense loop of the GPU goal (Linear 512-1024-1024-10, Adam,
batch 256), here on the CPU.

    python bench/doctor.py [--repeat N] [--steps N] [--models cnn,mlp] [--variants plain,...]
    python bench/doctor.py --real [--models mnist,nanogpt] [--variants plain,doctor,bare]
    python bench/doctor.py --scripts [--variants plain,doctor,bare]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import json
import os
import resource
import runpy
import statistics
import subprocess
import sys
import time

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tensortrace  # noqa: E402

# mode: an empty dispatch mode; fmode: an empty function mode (doctor's watch is one);
# hooks: identity saved-tensor hooks. fmode and hooks together are doctor's floor.
VARIANTS = ("plain", "doctor", "anomaly", "mode", "fmode", "hooks")
# the NaN watch's rows (--variants)
NAN_VARIANTS = ("bare", "doctor-nan", "doctor-nan-all", "check")
MEMORY_VARIANTS = ("plain", "doctor", "mode")


class EmptyMode(TorchDispatchMode):
    """A dispatch mode that only calls the operation: what any Python mode costs."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class CheckMode(TorchDispatchMode):
    """The floor of a per-operation NaN check: call the operation, look at its output once."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from tensortrace.doctor import finite

        out = func(*args, **(kwargs or {}))
        for t in finite.tensors_in(out):
            finite.kinds(t)
        return out


class Bare:
    """Doctor with its NaN and Inf watch off: the rest of doctor alone."""

    def __enter__(self):
        from tensortrace.doctor import session

        self.saved = session._watch_nonfinite
        session._watch_nonfinite = lambda rec, level: None
        self.doctor = tensortrace.doctor(os.devnull)
        self.doctor.__enter__()

    def __exit__(self, *exc):
        from tensortrace.doctor import session

        try:
            self.doctor.__exit__(*exc)
        finally:
            session._watch_nonfinite = self.saved


class EmptyFunctionMode(TorchFunctionMode):
    """A function mode that only calls the function: what doctor's write watch costs at least."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


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


def mlp():
    model = nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
    return model, x, y, nn.functional.cross_entropy


MODELS = {"cnn": cnn, "transformer": transformer, "mlp": mlp}


# Real-size training steps, shaped after pytorch/examples and nanoGPT (CPU-sized batches): what
# "a real script" costs per step, where each operation is large next to a Python call.


def mnist():
    """pytorch/examples mnist/main.py's Net, batch 64."""
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, 1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, 1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(9216, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, 10),
        nn.LogSoftmax(dim=1),
    )
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    return model, x, y, nn.functional.nll_loss


class WordLM(nn.Module):
    """pytorch/examples word_language_model's LSTM (emsize 200, nhid 200, 2 layers, tied)."""

    def __init__(self, vocab=10000, dim=200):
        super().__init__()
        self.encoder = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, 2, dropout=0.2)
        self.decoder = nn.Linear(dim, vocab)
        self.decoder.weight = self.encoder.weight
        self.vocab = vocab

    def forward(self, x):
        out, _ = self.rnn(self.encoder(x))
        return self.decoder(out).view(-1, self.vocab)


def word_lm():
    x, y = torch.randint(0, 10000, (35, 20)), torch.randint(0, 10000, (35 * 20,))
    return WordLM(), x, y, nn.functional.cross_entropy


def nanogpt():
    """A nanoGPT-shaped model (4 layers, 4 heads, 128 wide, block 64, batch 12, 65 tokens)."""
    layer = nn.TransformerEncoderLayer(
        128, 4, 512, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
    )
    model = nn.Sequential(
        nn.Embedding(65, 128),
        nn.TransformerEncoder(layer, 4, enable_nested_tensor=False),
        nn.LayerNorm(128),
        nn.Linear(128, 65),
        nn.Flatten(0, 1),
    )
    x, y = torch.randint(0, 65, (12, 64)), torch.randint(0, 65, (12 * 64,))
    return model, x, y, nn.functional.cross_entropy


REAL = {"mnist": mnist, "word_lm": word_lm, "nanogpt": nanogpt}


def context(variant: str):
    if variant == "doctor":
        return tensortrace.doctor(os.devnull)
    if variant == "doctor-nan":
        return tensortrace.doctor(os.devnull, nan=True)
    if variant == "doctor-nan-all":
        return tensortrace.doctor(os.devnull, nan="all")
    if variant == "bare":
        return Bare()
    if variant == "check":
        return CheckMode()
    if variant == "anomaly":
        return torch.autograd.set_detect_anomaly(True)
    if variant == "mode":
        return EmptyMode()
    if variant == "fmode":
        return EmptyFunctionMode()
    if variant == "hooks":
        return torch.autograd.graph.saved_tensors_hooks(_identity, _identity)
    return contextlib.nullcontext()


def _identity(t):
    return t


def train(make, variant: str, steps: int) -> float:
    """CPU seconds for ``steps`` training steps of a fresh model under ``variant``."""
    torch.manual_seed(0)
    model, x, y, loss_fn = make()
    kind = torch.optim.Adam if make is mlp else torch.optim.SGD
    opt = kind(model.parameters(), lr=0.01)
    start = time.process_time()
    with context(variant):
        for _ in range(steps):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
    return time.process_time() - start


def peak_rise(model: str, variant: str, steps: int) -> dict:
    """MiB of the resident set's and the live heap's highest rise, each in a fresh process."""
    found = {}
    for measure, env in (("rss", {}), ("heap", {"PYTHONMALLOC": "malloc"})):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", model, variant, str(steps), measure],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **env},
        )
        found[measure] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def resident() -> int:
    """Bytes resident now (/proc/self/statm; 0 where there is none)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except OSError:
        return 0


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def heap_reader():
    """A function returning the bytes malloc has handed out and not had back (glibc), or None."""
    try:
        info = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    info.restype = _MallInfo2

    def in_use() -> int:
        got = info()
        return got.uordblks + got.hblkhd

    return in_use


def memory_child(model: str, variant: str, steps: int, measure: str) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net, x, y, loss_fn = MODELS[model]()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for each in ("doctor", "anomaly", "mode"):  # the same modules loaded in every variant
        with context(each):
            pass
    read = resident if measure == "rss" else heap_reader()
    if read is None:
        print(json.dumps(None))
        return

    def step() -> int:
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        high = read()  # the graph and its saved tensors are all alive here
        loss.backward()
        opt.step()
        return max(high, read())

    before = read()
    with context(variant):
        if measure == "heap":
            step()  # one warm step: what the process pays once is not the loop's
            before = read()
        peak = max(step() for _ in range(steps))
    print(json.dumps(max(0, peak - before) / 2**20))


def memory_line(what: str, rise: dict, unit: str = "MiB") -> str:
    """One line: plain, doctor and its ratio, and the floor an empty dispatch mode sets."""
    if any(rise[v] is None for v in MEMORY_VARIANTS):
        return f"    {what}: not measured here"
    base = rise["plain"]

    def ratio(v: str) -> float:
        return rise[v] / base if base > 0 else float("nan")

    return (
        f"    {what}: plain {base:.2f} {unit}, doctor {rise['doctor']:.2f} {unit} "
        f"({ratio('doctor'):.2f}x); floor, an empty dispatch mode: "
        f"{rise['mode']:.2f} {unit} ({ratio('mode'):.2f}x)"
    )


SCRIPTS = {  # examples/doctor/correct/ scripts, and steps that make each run a second or two
    "cnn.py": 60,
    "lstm_lm.py": 200,
    "tiny_gpt.py": 80,
    "gan.py": 800,
}


def run_script(path: str, steps: int, variant: str) -> float:
    """CPU seconds of one run of a training script, as ``tensortrace doctor`` runs it (runpy,
    in this process, its own argv), plain or under doctor."""
    saved = sys.argv[:]
    sys.argv = [path, str(steps)]
    start = time.process_time()
    try:
        with context(variant), contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = saved
    return time.process_time() - start


def scripts(repeat: int, variants: list) -> None:
    """Whole training scripts (examples/doctor/correct/): plain against doctor (or the variants
    asked for), alternating in one process, CPU-time medians (interpreter start-up and imports
    left out: paid once)."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "doctor")
    for name, steps in SCRIPTS.items():
        path = os.path.normpath(os.path.join(folder, "correct", name))
        for variant in variants:
            run_script(path, 2, variant)  # warm every path once
        times = {v: [] for v in variants}
        for _ in range(repeat):
            for variant in times:
                times[variant].append(run_script(path, steps, variant))
        med = {v: statistics.median(t) for v, t in times.items()}
        low = {v: min(t) for v, t in times.items()}
        print(f"{name} ({steps} steps), CPU-time medians of {repeat} alternating runs:")
        for variant in variants:
            print(
                f"  {variant:<10} {med[variant]:6.2f} s  {med[variant] / med['plain']:5.2f}x plain"
                f"  ({low[variant] / low['plain']:.2f}x by the fastest runs)"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--memory-child":
        memory_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--models", help="which loops, by name (default: the small ones)")
    parser.add_argument(
        "--variants", help="which variants, by name (default: all but the NaN watch's rows)"
    )
    parser.add_argument(
        "--no-memory", action="store_true", help="time only: skip the peak-memory processes"
    )
    parser.add_argument(
        "--real",
        action="store_true",
        help="time real-size training steps (MNIST, word language model, nanoGPT shapes) "
        "instead of the small loops",
    )
    parser.add_argument(
        "--scripts",
        action="store_true",
        help="instead, time whole training scripts as users run them: python SCRIPT against "
        "tensortrace doctor --no-check SCRIPT",
    )
    args = parser.parse_args()
    default = ("plain", "doctor") if args.scripts else VARIANTS
    variants = [v for v in (args.variants or ",".join(default)).split(",") if v]
    if "plain" not in variants:
        variants.insert(0, "plain")
    torch.set_num_threads(1)
    if args.scripts:
        scripts(args.repeat, variants)
        return
    loops = REAL if args.real else MODELS
    names = args.models.split(",") if args.models else list(loops)
    for name in names:
        make = {**MODELS, **REAL}[name]
        for variant in variants:
            train(make, variant, 2)  # warm every path once
        times = {v: [] for v in variants}
        for _ in range(args.repeat):
            for variant in variants:
                times[variant].append(train(make, variant, args.steps))
        med = {v: statistics.median(t) for v, t in times.items()}
        base = med["plain"]
        print(f"{name}: {args.steps} steps, CPU-time medians of {args.repeat} alternating runs")
        notes = {
            "mode": "  (an empty dispatch mode, on throughout)",
            "fmode": "  (floor: an empty function mode, on throughout)",
            "hooks": "  (floor: identity saved-tensor hooks alone)",
            "check": "  (floor of --nan-all: one look at each operation's output)",
            "bare": "  (doctor without its NaN watch)",
            "doctor": "  (the default: the loss checked at each backward)",
            "doctor-nan": "  (--nan)",
            "doctor-nan-all": "  (--nan-all)",
        }
        for variant in variants:
            note = notes.get(variant, "")
            print(f"  {variant:<10} {med[variant]:7.3f} s  {med[variant] / base:5.2f}x plain{note}")
        if args.no_memory or args.real:
            continue
        rise = {v: peak_rise(name, v, args.steps) for v in MEMORY_VARIANTS}
        print("  peak memory, a fresh process per variant:")
        print(
            memory_line("resident set rise over the loop", {v: r["rss"] for v, r in rise.items()})
        )
        print(
            memory_line(
                "live heap, highest, after a warm step", {v: r["heap"] for v, r in rise.items()}
            )
        )


if __name__ == "__main__":
    main()
