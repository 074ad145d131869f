"""A process the confined child must not be able to touch, for the wall's tests."""

from __future__ import annotations

import subprocess
from typing import Iterator

import pytest


@pytest.fixture(name="bystander")
def bystander_process() -> Iterator[int]:
    """Another process of this user without capabilities, as every process of a user other
    than root is. (The kernel lets a process without capabilities reschedule another only
    when that one holds none the first lacks: a child of root could not touch root's own
    processes even before, but any other user's child could touch all of that user's.)"""
    import sys

    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tensortrace.run.privileges import drop_capabilities\n"
            "import sys, time\n"
            "drop_capabilities()\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline() == "ready\n"
    yield process.pid
    process.kill()
    process.wait()
