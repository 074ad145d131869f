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
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "null",
        "s.yaml",
    ]  # no temporary file left


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


# --- reading -------------------------------------------------------------------------

SECRET = "hunter2-token: the first key of a private file\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A private file outside the scenario folder, shaped so that a loader would quote it."""
    folder = tmp_path / "private"
    folder.mkdir()
    path = folder / "credentials"
    path.write_text(SECRET + "title: t\nsteps: []\n", encoding="utf-8")
    return path


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    folder = tmp_path / "shared"
    folder.mkdir()
    return folder


def test_a_link_to_a_proc_file_is_refused_without_reading_it(shared: Path) -> None:
    link = shared / "k.yaml"
    link.symlink_to("/proc/self/status")
    result = cli("run", str(link))
    assert result.returncode == 2 and result.stdout == ""
    line = one_line(result)
    assert line.startswith(f"tensortrace: {link}: is a file of /proc"), line
    assert "Name:" not in result.stderr and "Pid" not in result.stderr


def test_a_fifo_is_refused_instead_of_waiting_for_a_writer(shared: Path) -> None:
    fifo = shared / "s.yaml"
    os.mkfifo(fifo)
    stop = threading.Event()

    def writer() -> (
        None
    ):  # a writer that comes after a while: reading the FIFO would get a scenario
        stop.wait(3)
        while not stop.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader
                stop.wait(0.05)
                continue
            os.write(fd, SCENARIO.encode())
            os.close(fd)
            return

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        result = cli("run", str(fifo), "--trust")
    finally:
        stop.set()
        thread.join(5)
    assert result.returncode == 2
    assert one_line(result) == (
        f"tensortrace: {fifo}: is a FIFO (named pipe), not a scenario file; "
        "give a .yaml, .py or .ipynb file"
    )


def test_a_character_device_is_refused(shared: Path) -> None:
    device = shared / "s.yaml"
    os.mknod(device, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    result = cli("run", str(device))
    assert result.returncode == 2
    assert "is a character device, not a scenario file" in one_line(result)


def test_an_error_in_a_file_reached_through_a_link_outside_quotes_nothing_of_it(
    shared: Path, outside: Path
) -> None:
    link = shared / "k.yaml"
    link.symlink_to(outside)
    result = cli("run", str(link))
    assert result.returncode == 2
    line = one_line(result)
    assert "hunter2" not in result.stderr + result.stdout
    assert f"is a link to {outside}, outside its folder" in line
    # The same file, in its own folder, is quoted as usual: the control.
    direct = cli("run", str(outside))
    assert direct.returncode == 2 and "hunter2-token" in direct.stderr


def test_check_of_a_folder_takes_only_its_regular_files(shared: Path, outside: Path) -> None:
    scenario(shared, "a.yaml")
    (shared / "b.yaml").symlink_to("/proc/self/status")
    (shared / "c.yaml").symlink_to(outside)
    os.mkfifo(shared / "d.yaml")
    (shared / "e.yaml").symlink_to(
        "a.yaml"
    )  # a link that stays inside is an ordinary file of the folder
    result = cli("check", str(shared), "--trust")
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    assert [line.split()[1] for line in result.stdout.splitlines()[:2]] == [
        str(shared / "a.yaml"),
        str(shared / "e.yaml"),
    ]
    skipped = sorted(line for line in result.stderr.splitlines() if ": skipped: " in line)
    assert skipped == [
        f"tensortrace: {shared / 'b.yaml'}: skipped: a link to a file outside the folder",
        f"tensortrace: {shared / 'c.yaml'}: skipped: a link to a file outside the folder",
        f"tensortrace: {shared / 'd.yaml'}: skipped: not a regular file",
    ]


def test_a_scenario_is_read_with_a_bound_not_trusted_from_its_size(tmp_path: Path) -> None:
    from tensortrace.scenario.inputs import TooLarge, read_regular

    path = scenario(tmp_path)
    data, real = read_regular(path, 1 << 20)
    assert data == SCENARIO.encode() and real == str(path.resolve())
    with pytest.raises(TooLarge):
        read_regular(path, 10)


def test_output_onto_a_link_into_proc_writes_to_the_descriptor_and_keeps_the_link(
    tmp_path: Path,
) -> None:
    """-o /dev/stdout (a link to /proc/self/fd/1) writes where the descriptor goes, a file too."""
    target = tmp_path / "redirected.json"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{fd}")
        result = cli("run", str(scenario(tmp_path)), "--trust", "--format", "json", "-o", str(link))
    finally:
        os.close(fd)
    assert result.returncode == 0, result.stderr
    assert os.readlink(link) == f"/proc/self/fd/{fd}"
    assert json.loads(target.read_text(encoding="utf-8"))["steps"][0]["code"] == "a = torch.ones(2)"


def test_output_through_a_unix_socket_and_never_onto_a_block_device(tmp_path: Path) -> None:
    import socket

    from tensortrace.errors import UsageError
    from tensortrace.output import Output

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "sock"))
    server.listen(1)
    got = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            got.append(b"".join(iter(lambda: conn.recv(4096), b"")))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    out = Output(str(tmp_path / "sock"))
    out.write("through the socket\n")
    out.commit()
    thread.join(10)
    server.close()
    assert got == [b"through the socket\n"] and stat.S_ISSOCK(os.lstat(tmp_path / "sock").st_mode)

    block = tmp_path / "disk"
    os.mknod(block, 0o600 | stat.S_IFBLK, os.makedev(7, 0))  # a loop device's node: never opened
    with pytest.raises(UsageError, match="is a block device"):
        Output(str(block))
    assert stat.S_ISBLK(os.lstat(block).st_mode)


def test_explore_does_not_read_a_proc_file_to_guess_its_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link to /proc/kmsg would block the first read for ever: it must not be opened at all."""
    from tensortrace.cli.tracefile import is_saved_trace

    link = tmp_path / "k"
    link.symlink_to("/proc/self/status")
    real_open = Path.open

    def no_proc(self: Path, *args, **kwargs):
        assert os.path.realpath(self).startswith("/proc/") is False, f"{self} was opened"
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", no_proc)
    assert is_saved_trace(str(link)) is False
    saved = tmp_path / "t"
    saved.write_text('{"traces": []}', encoding="utf-8")
    assert is_saved_trace(str(saved)) is True
