"""The device names a scenario file or ``--device`` may give.

One pattern, read by the scenario loader, the command line and the JSON
Schema, so that the three can never disagree on what a device is.
"""

from __future__ import annotations

import re

# cpu, cuda, cuda:N, mps, or auto (the best the machine has).
DEVICE_PATTERN = r"^(cpu|cuda(:\d+)?|mps|auto)$"
DEVICE_RE = re.compile(DEVICE_PATTERN)
DEVICE_CHOICES = "cpu, cuda, cuda:N, mps, auto"


def is_device_name(text: str) -> bool:
    """True for the names above; whether the machine has that device is decided later."""
    return DEVICE_RE.match(text) is not None


__all__ = ["DEVICE_CHOICES", "DEVICE_PATTERN", "DEVICE_RE", "is_device_name"]
