"""What the command reads and writes is what the user named, and nothing a path can trick it into.

``-o`` never replaces what is there unless it is a regular file or a link:
a character device, a FIFO or a socket is written through (renaming a file
over ``/dev/null`` as root replaced the machine's device), and a directory is
one clear error. A scenario is read only from a regular file, with a size
bound, whatever a link leads to; ``check DIR`` takes only the regular files
inside the folder.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from conftest import cli

SCENARIO = "title: paths\nsteps:\n  - a = torch.ones(2)\n"


def scenario(tmp_path: Path, name: str = "s.yaml", text: str = SCENARIO) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def one_line(result) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- -o ------------------------------------------------------------------------------


def test_output_onto_a_character_device_writes_through_and_keeps_the_device(tmp_path: Path) -> None:
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null of our own
    os.chmod(device, 0o666)  # (mknod honours the umask)
    result = cli("run", str(scenario(tmp_path)), "--trust", "--format", "json", "-o", str(device))
    assert result.returncode == 0, result.stderr
    info = os.lstat(device)
    assert stat.S_ISCHR(info.st_mode) and info.st_rdev == os.makedev(1, 3)
    assert stat.S_IMODE(info.st_mode) == 0o666
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "s.yaml"]  # no temporary file left


def test_output_into_a_fifo_reaches_its_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = cli("run", str(scenario(tmp_path)), "--trust", "--format", "json", "-o", str(fifo))
    reader.join(60)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got[0])["steps"][0]["code"] == "a = torch.ones(2)"


def test_output_into_a_directory_is_one_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    result = cli("run", str(scenario(tmp_path)), "--trust", "-o", str(folder))
    assert result.returncode == 2 and result.stdout == ""
    assert one_line(result) == f"tensortrace: {folder} is a directory; give a file name to -o"
    assert list(folder.iterdir()) == []


def test_output_onto_a_link_replaces_the_link_and_leaves_its_target(tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_text("keep me", encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    result = cli("run", str(scenario(tmp_path)), "--trust", "-o", str(link))
    assert result.returncode == 0, result.stderr
    assert not link.is_symlink() and json.loads(link.read_text(encoding="utf-8"))["steps"]
    assert target.read_text(encoding="utf-8") == "keep me"


def test_output_onto_a_link_to_a_device_writes_through_it(tmp_path: Path) -> None:
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    link = tmp_path / "out.json"
    link.symlink_to(device)
    result = cli("run", str(scenario(tmp_path)), "--trust", "-o", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and stat.S_ISCHR(os.lstat(device).st_mode)
