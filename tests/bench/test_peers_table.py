"""The peers bench's verdicts: a row past its goal by more than half fails the script, unless it
is named as a known miss; a known miss whose scenario did not pass still fails."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[2] / "bench" / "peers.py"


@pytest.fixture()
def peers():
    spec = importlib.util.spec_from_file_location("peers_bench", PEERS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_row_past_its_goal_by_more_than_half_fails(peers, capsys):
    table = peers.Table()
    table.row("met", 0.4, 1.0, 0.5)
    table.row("near", 0.7, 1.0, 0.5)  # 1.4x the goal: printed as a miss, within the noise
    table.row("far", 0.9, 1.0, 0.5)  # 1.8x the goal
    assert table.failed == ["far"]
    assert table.verdicts == ["far (0.90x, goal <=0.5x)"]  # the log's last line says by how much
    out = capsys.readouterr().out
    assert "no (within noise)" in out and "NO (fails)" in out


def test_a_known_miss_is_printed_and_fails_only_when_it_did_not_pass(peers, capsys):
    table = peers.Table(["far", "broken"])
    table.row("far", 0.9, 1.0, 0.5)
    table.row("broken", 0.1, 1.0, 0.5, passed=False)
    table.row("other", 0.9, 1.0, 0.5)
    assert table.failed == ["broken", "other"]
    assert table.verdicts == [
        "broken (0.10x, goal <=0.5x, did not pass)",
        "other (0.90x, goal <=0.5x)",
    ]
    assert "NO (known miss)" in capsys.readouterr().out


def test_an_absolute_row_fails_with_its_figure_in_seconds(peers, capsys):
    table = peers.Table()
    table.row("render410x4", 0.5, 0.04, 0.2, absolute=True)
    assert table.verdicts == ["render410x4 (0.500s, goal <=0.2s)"]


def test_a_multi_process_row_judges_the_median_of_each_process_ratio(peers, capsys):
    # three processes: each figure's median gives 0.9 / 1.2 = 0.75x, past the fail line of a
    # 0.5x goal, while two of the three processes measured ours near half the peer's (0.46x, 0.45x)
    got = {
        "ours_per_step": 0.9,
        "peer_per_line": 1.2,
        "runs": [
            {"ours_per_step": 0.6, "peer_per_line": 1.3},
            {"ours_per_step": 0.9, "peer_per_line": 2.0},
            {"ours_per_step": 1.0, "peer_per_line": 1.2},
        ],
    }
    ratio = peers._median_ratio(got, "ours_per_step", "peer_per_line")
    assert ratio == 0.6 / 1.3
    table = peers.Table()
    table.row("step40", got["ours_per_step"], got["peer_per_line"], 0.5, ratio=ratio)
    assert table.failed == []
    assert "0.46x" in capsys.readouterr().out
    assert peers._median_ratio({"ours_per_step": 1.0, "peer_per_line": 2.0}, "a", "b") is None
