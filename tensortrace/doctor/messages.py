"""PyTorch's in-place error, word for word, for the version check doctor makes in its place.

Under ``saved_tensors_hooks`` PyTorch does not check a saved tensor's version
when backward unpacks it (torch/csrc/autograd/saved_variable.cpp: "Only
check version counter in the case without hooks"), so the unpack hook checks
and raises this message, which tests/integrations/test_doctor.py compares with PyTorch's.
"""

from __future__ import annotations

from typing import Any, Optional

import torch


def stripped_node(name: str) -> str:
    """A node's name as PyTorch's in-place error writes it: ``SigmoidBackward0`` -> ``Sigmoid``."""
    for end in ("Backward0", "Backward1", "Backward2", "Backward3", "Backward"):
        if name.endswith(end) and len(name) > len(end):
            return name[: -len(end)]
    return name


def node_name(saved: Any) -> Optional[str]:
    """The name of the node that saved an output (None for an input)."""
    return saved.grad_fn


def stale_message(saved: Any, now: int, node: Optional[str]) -> str:
    """PyTorch's own words for a saved tensor changed in place
    (torch/csrc/autograd/saved_variable.cpp), which hooks turn off."""
    shape = list(saved.tensor.shape)
    text = (
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{saved.tensor.type()} {shape}]"
    )
    owner = None
    if saved.is_output:
        owner = node or node_name(saved)
    else:  # an input is held as itself: its grad_fn now, as PyTorch names it
        current = saved.tensor.grad_fn
        owner = None if current is None else current.name()
    if owner:
        text += f", which is output {saved.output_nr} of {stripped_node(owner)},"
    text += f" is at version {now}; expected version {saved.version} instead."
    if torch.is_anomaly_enabled():
        text += (
            " Hint: the backtrace further above shows the operation that failed to compute "
            "its gradient. The variable in question was changed in there or anywhere later. "
            "Good luck!"
        )
    else:
        text += (
            " Hint: enable anomaly detection to find the operation that failed to compute its "
            "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."
        )
    return text
