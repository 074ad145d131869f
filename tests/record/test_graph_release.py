"""Walking an autograd graph in-process must never make freeing it crash, at any length.

Since PyTorch 2.13 a node that has had a Python object keeps it while the node
lives, and PyTorch frees such nodes through their objects, one nested call per
node: freeing a chain of some 45,000 walked nodes overflows an 8 MiB C stack
(``graph.py`` says more). The walk anchors each node's next nodes in its
``metadata`` so that freeing stays iterative. Each crash check runs in a
process of its own (a fork of the test's), so that a crash fails the test,
not the suite.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback

import pytest
import torch

from conftest import cli, write_scenario
from tensortrace.record.graph import ANCHOR, UNANCHORED_NODES, graph_of, walk_graph, walk_nodes
from tensortrace.record.walk import ANCHOR_PAST, ANCHORED

PRESERVED = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (
    2,
    13,
)  # node objects live with their nodes

CHAIN = """
import sys, threading, torch
from tensortrace.record.graph import walk_graph, walk_nodes

def chain(n):
    x = torch.ones(1, requires_grad=True)
    y = x
    for i in range(n):
        y = y.sin() if i % 3 == 0 else y * 1.0  # saved inputs, and a constant's None next node
    return x, y

def plain_walk(root):  # what a walk without anchors does: every node gets its Python object
    stack, seen = [root], set()
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is not None and id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append(nxt)
    return len(seen) + 1

def in_thread(work, stack_kib):
    threading.stack_size(stack_kib * 1024)
    t = threading.Thread(target=work)
    t.start()
    t.join()
"""


def _run(body: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run CHAIN + ``body`` in a forked child of this process, which has imported torch already
    (a new Python would spend 2.5 s of CPU on that): the graphs are built, walked and freed in the
    child alone, and a crash there is its exit status here (-SIGSEGV), as for a subprocess."""
    code = CHAIN + textwrap.dedent(body)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            status = 1
            try:
                faulthandler.disable()  # a crash is the result, not pytest's to report
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
                sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
                exec(compile(code, "<chain>", "exec"), {"__name__": "__main__"})
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        deadline = time.monotonic() + timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise subprocess.TimeoutExpired(code, timeout)
            time.sleep(0.02)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            code,
            os.waitstatus_to_exitcode(status),
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
        )


def test_a_walked_100k_node_chain_is_freed_in_process():
    done = _run(
        """
        x, y = chain(100_000)
        graph = walk_graph("y", y.grad_fn, {id(x): "x"})
        print(len(graph.nodes), graph.truncated, flush=True)
        del y, graph
        print("freed", flush=True)
    """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["100001", "False", "freed"]


def test_a_walked_chain_is_freed_on_a_small_thread_stack():
    """The stack freeing takes is bounded, not merely below 8 MiB: 256 KiB frees 20,000 walked
    nodes."""
    done = _run(
        """
        x, y = chain(20_000)
        print(len(walk_nodes([y.grad_fn], 10**6).order), flush=True)
        box = [y]
        del y
        in_thread(box.clear, 256)
        print("freed", flush=True)
    """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["20001", "freed"]


@pytest.mark.skipif(
    not PRESERVED, reason="before PyTorch 2.13 a node's Python object died with its last reference"
)
def test_without_anchors_the_same_free_crashes():
    """The control: the checks above would catch a walk that stopped anchoring."""
    done = _run(
        """
        x, y = chain(20_000)
        print(plain_walk(y.grad_fn), flush=True)
        box = [y]
        del y
        in_thread(box.clear, 256)
        print("freed", flush=True)
    """
    )
    assert done.returncode < 0, (done.returncode, done.stdout)  # killed by a signal (SIGSEGV)
    assert done.stdout.split() == ["20001"]


def _reference(roots):
    """The walk ``walk_nodes`` must equal: a stack, children pushed in order, each node once."""
    index, order, nexts = {}, [], []
    for root in roots:
        if id(root) in index:
            continue
        index[id(root)] = len(order)
        order.append(root)
        nexts.append([])
        stack = [root]
        while stack:
            node = stack.pop()
            children = nexts[index[id(node)]]
            for nxt, _ in node.next_functions:
                if nxt is None:
                    continue
                if id(nxt) not in index:
                    index[id(nxt)] = len(order)
                    order.append(nxt)
                    nexts.append([])
                    stack.append(nxt)
                children.append(index[id(nxt)])
    return order, nexts


def _shapes():
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(2, requires_grad=True)
    chain = a
    for _ in range(5):
        chain = chain * 2
    diamond = (a * 2) + (a * 3)
    shared = a * b
    mixed = (shared.sin() * shared.cos() + shared).sum() * chain.sum()
    stacked = torch.stack([a, b, a * b, chain]).exp()
    return [a, b], {"chain": chain, "diamond": diamond, "mixed": mixed, "stacked": stacked}


@pytest.mark.parametrize("name", ["chain", "diamond", "mixed", "stacked"])
def test_the_walk_visits_nodes_in_the_plain_order_and_leaves_a_small_graphs_metadata(name):
    """A graph of at most ANCHOR_PAST nodes frees safely without anchors: its nodes'
    metadata stays as plain PyTorch leaves it (empty)."""
    _, shapes = _shapes()
    root = shapes[name].grad_fn
    expected_order, expected_nexts = _reference([root])
    walk = walk_nodes([root], 10_000)
    assert [id(n) for n in walk.order] == [id(n) for n in expected_order]
    assert walk.nexts == expected_nexts and not walk.truncated and not walk.unanchored
    assert not walk.anchored and all(dict(node.metadata) == {} for node in walk.order)


def test_a_walk_past_the_bound_anchors_each_next_node_of_every_node_it_walked():
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(ANCHOR_PAST + 50):
        y = y * 1.0
    walk = walk_nodes([y.grad_fn], 10_000)
    assert walk.anchored and len(walk.order) == ANCHOR_PAST + 51
    for node in walk.order:
        nexts = [fn for fn, _ in node.next_functions]
        if not nexts:
            continue
        kept = node.metadata[ANCHOR]
        kept = kept if isinstance(kept, tuple) else (kept,)
        assert {id(k) for k in kept if k is not None} == {id(n) for n in nexts if n is not None}


def test_several_roots_share_one_walk():
    _, shapes = _shapes()
    roots = [shapes["mixed"].grad_fn, shapes["chain"].grad_fn, shapes["diamond"].grad_fn]
    expected_order, expected_nexts = _reference(roots)
    walk = walk_nodes(roots, 10_000)
    assert [id(n) for n in walk.order] == [
        id(n) for n in expected_order
    ] and walk.nexts == expected_nexts
    assert walk.root_at[1] == [id(n) for n in walk.order].index(id(roots[1]))


def test_the_walk_stops_at_max_nodes_and_says_so():
    _, shapes = _shapes()
    walk = walk_nodes([shapes["chain"].grad_fn], 3)
    assert len(walk.order) == 3 and walk.truncated and not walk.unanchored
    graph, stopped = graph_of("chain", shapes["chain"].grad_fn, {}, max_nodes=3)
    assert graph.truncated and len(graph.nodes) == 3 and not stopped


def test_the_walk_changes_no_gradient():
    def grads(walk: bool):
        (a, b), shapes = _shapes()
        if walk:
            for out in shapes.values():
                walk_graph("t", out.grad_fn, {})
        sum(out.sum() for out in shapes.values()).backward()
        return a.grad.tolist(), b.grad.tolist()

    assert grads(True) == grads(False)


class _Bare:
    """A node-like object without ``metadata``: it cannot anchor its next nodes."""

    def __init__(self, nxt):
        self.next_functions = ((nxt, 0),) if nxt is not None else ()


def test_nodes_that_cannot_anchor_stop_the_walk_at_the_old_bound():
    node = None
    for _ in range(UNANCHORED_NODES + 10):
        node = _Bare(node)
    walk = walk_nodes([node], 10**6)
    assert walk.truncated and walk.unanchored
    assert (
        len(walk.order) == UNANCHORED_NODES + 1
    )  # the next nodes of the first UNANCHORED_NODES, and the root
    few = node
    for _ in range(UNANCHORED_NODES + 10 - 5):
        few = few.next_functions[0][0]
    assert not walk_nodes([few], 10**6).truncated


FREED_IN_SAFE_MODE = """
title: long chains drawn whole and freed in safe mode
setup: x = torch.ones(1, requires_grad=True)
steps:
  - run: |
      y = x
      for _ in range(50_000):
          y = y * 1.0
    graph: [y]
  - run: |
      z = x
      for _ in range(50_000):
          z = z * 1.0
      z.sum().backward()
      z = None
  - y = None
"""


def test_safe_mode_draws_a_long_chain_whole_and_frees_it(tmp_path):
    """50,000 nodes: walked without anchors, freeing them overflows the child's 8 MiB stack (40,000
    does not).

    Step 2's backward call is walked by the gradient-flow recorder and freed in the same step.
    """
    path = write_scenario(tmp_path, FREED_IN_SAFE_MODE)
    result = cli("run", str(path), "--format", "json", "--timeout", "120")
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["aborted"] is None, data["aborted"]
    assert data["environment"]["safe"]
    [graph] = data["steps"][0]["graphs"]
    assert (
        len(graph["nodes"]) == 50_001 and not graph["truncated"]
    )  # every MulBackward0, and x's AccumulateGrad
    assert graph["nodes"][-1] == {
        "id": "N50001",
        "name": "AccumulateGrad",
        "leaf": "x",
        "next": [],
        "saved": [],
    }
    assert [s["status"] for s in data["steps"]] == ["ok", "ok", "ok"]
    assert data["notices"] == [ANCHORED.format(n=ANCHOR_PAST, key=ANCHOR)]
