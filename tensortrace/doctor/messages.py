"""PyTorch's in-place error, word for word, for the version check doctor makes in its place.

Under ``saved_tensors_hooks`` PyTorch does not check a saved tensor's version
when backward unpacks it (torch/csrc/autograd/saved_variable.cpp: "Only
check version counter in the case without hooks"), so the unpack hook checks
and raises this message. Its wording is PyTorch's own, learnt once per
process from a real failure with no hooks on (``learn``, called before doctor
pushes its hooks): the text before the tensor, how the node is named (its
full name ``SigmoidBackward0`` in older releases; ``Sigmoid``, and
``LeakyRelu1`` for ``LeakyReluBackward1``, where PyTorch writes the forward
operation's name) and the hint after the versions, with and without anomaly
mode. tests/integrations/test_doctor.py compares the two messages.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Dict, Optional

import torch

_LEARNT: Dict[str, Any] = {}
_PREFIX = (
    "one of the variables needed for gradient computation has been modified by an inplace "
    "operation: "
)
_HINTS = {
    False: (
        " Hint: enable anomaly detection to find the operation that failed to compute its "
        "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."
    ),
    True: (
        " Hint: the backtrace further above shows the operation that failed to compute its "
        "gradient. The variable in question was changed in there or anywhere later. Good luck!"
    ),
}


def forward_op_name(name: str) -> str:
    """PyTorch's ``Node::forward_op_name``: ``SigmoidBackward0`` -> ``Sigmoid``,
    ``LeakyReluBackward1`` -> ``LeakyRelu1``; a name without ``Backward<digits>`` stays."""
    found = re.fullmatch(r"(.*)Backward(\d*)", name)
    if not found or not found.group(1):
        return name
    head, digits = found.groups()
    return head if digits in ("", "0") else head + digits


def _probe(anomaly: bool) -> Optional[str]:
    """The message of a real stale saved output (a sigmoid's, written in place)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if top is not None and top(False) is not None or _get_current_dispatch_mode() is not None:
        return None  # someone's hooks or mode are on: they would see the probe
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        context = torch.autograd.detect_anomaly(check_nan=False) if anomaly else _Nothing()
        with context, torch.enable_grad():
            a = torch.ones(2, requires_grad=True)
            b = a.sigmoid()
            b.add_(1)
            try:
                b.sum().backward()
            except RuntimeError as exc:
                return str(exc)
    return None


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def learn() -> None:
    """Read PyTorch's wording once (no hooks may be on yet)."""
    if _LEARNT:
        return
    for anomaly in (False, True):
        try:
            text = _probe(anomaly)
        except Exception:
            text = None
        if not text or "[" not in text:
            continue
        _LEARNT.setdefault("prefix", text[: text.index("[")])
        named = re.search(r", which is output 0 of (.*?),", text)
        if named:
            _LEARNT.setdefault("full", named.group(1) == "SigmoidBackward0")
        tail = text.split(" instead.", 1)
        if len(tail) == 2:
            _LEARNT[f"hint{anomaly}"] = tail[1].splitlines()[0] if tail[1] else ""


def stripped_node(name: str) -> str:
    """A node's name as PyTorch's in-place error writes it."""
    return name if _LEARNT.get("full") else forward_op_name(name)


def node_name(saved: Any) -> Optional[str]:
    """The name of the node that saved an output (None for an input)."""
    return saved.grad_fn


def stale_message(saved: Any, now: int, node: Optional[str]) -> str:
    """PyTorch's own words for a saved tensor changed in place, which hooks turn off."""
    shape = list(saved.tensor.shape)
    text = f"{_LEARNT.get('prefix', _PREFIX)}[{saved.tensor.type()} {shape}]"
    owner = None
    if saved.is_output:
        owner = node or node_name(saved)
    else:  # an input is held as itself: its grad_fn now, as PyTorch names it
        current = saved.tensor.grad_fn
        owner = None if current is None else current.name()
    if owner:
        text += f", which is output {saved.output_nr} of {stripped_node(owner)},"
    text += f" is at version {now}; expected version {saved.version} instead."
    anomaly = torch.is_anomaly_enabled()
    return text + _LEARNT.get(f"hint{anomaly}", _HINTS[anomaly])
