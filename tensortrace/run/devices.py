"""Where a run may use the GPU: safe mode runs on the CPU only, and a trusted CUDA run
stays in the calling process, since a forked child cannot use CUDA.

Nothing here starts CUDA in the parent unless a trusted run asks for ``auto``
(which then runs in this process anyway).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

from ..errors import ScenarioError

if TYPE_CHECKING:  # pragma: no cover
    from ..scenario.spec import Scenario


def refuse_gpu(scenario: "Scenario", device: Optional[str]) -> None:
    """Safe mode runs on the CPU only: refuse, before anything runs, a run that asks for CUDA.

    The NVIDIA driver cannot work behind the wall: on a machine with a GPU,
    each of Landlock, seccomp and the memory cap alone makes CUDA's start-up
    fail, so the child would report the GPU missing, which is not the truth.
    """
    wanted = scenario.device_for(device)
    if not wanted.startswith("cuda"):
        return
    own = bool(scenario.device)
    raise ScenarioError(
        f"{'the scenario' if own else '--device'} asks for device {wanted!r}, but safe mode "
        "runs scenarios on the CPU only (the GPU's driver cannot work behind its wall); "
        "use cpu, or --trust for a file you trust",
        path=scenario.path,
        line=scenario.device_line if own else None,
        column=scenario.device_column if own else None,
    )


def on_the_gpu(scenario: "Scenario", device: Optional[str]) -> bool:
    """Whether a trusted run of ``scenario`` uses CUDA (``auto`` asks torch, here).

    Such a run stays in this process: a forked child cannot use CUDA once its parent
    has so much as counted the GPUs ("Cannot re-initialize CUDA in forked subprocess"),
    which a notebook or a script calling the Python API usually has.
    """
    wanted = scenario.device_for(device)
    if wanted == "auto":
        import torch

        return torch.cuda.is_available()
    return wanted.startswith("cuda")


def cuda_started() -> bool:
    """Whether this process has started CUDA (asking does not start it)."""
    import torch

    return torch.cuda.is_initialized()


def on_the_cpu(scenario: "Scenario") -> "Scenario":
    """The scenario with ``device: auto`` made ``cpu``, as safe mode runs (see ``refuse_gpu``)."""
    return dataclasses.replace(scenario, device="cpu") if scenario.device == "auto" else scenario


__all__ = ["cuda_started", "on_the_cpu", "on_the_gpu", "refuse_gpu"]
