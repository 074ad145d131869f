"""What a step ran and where its gradients flowed, as lines of plain text.

``ops_lines`` reads ``Step.ops``: one line per call the step's code made
(``--ops calls``), each followed, at ``--ops aten``, by the ATen operations
it ran, e.g.::

    Tensor.detach(a) → c (S1, no copy)
      aten::detach(a) → c (S1, no copy)
    Tensor.zero_(c) writes S1 (a, c) · c: version 0 → 1

A result whose storage existed before the call (a view, ``x.grad``,
``torch.as_tensor`` of an array: ``OpRecord.existed``) says "no copy"; one
the call allocated says "new".

Calls that take and give no tensor (``torch._C._set_grad_enabled``, which a
``no_grad`` block makes) are left out here; the JSON keeps them.

``flow_lines`` reads one ``Flow``: the backward graph as a tree from the
call's root, each edge labelled with the gradient it carried, each
``AccumulateGrad`` with the leaf whose ``.grad`` it added to and that grad
before → after. An edge that carried nothing says so. Both are shared by
the console and the markdown renderers; neither wraps or colours.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ..trace import Flow, FlowNode, OpRecord, Step, Values
from .text import format_values, one_line, plural

MAX_SHOWN_OPS = 60  # lines of operations drawn per step; the JSON holds every recorded one
MAX_SHOWN_FLOW = 80  # lines of one gradient-flow tree
VALUE_WIDTH = 40  # characters of a gradient's values on an edge


def call_label(name: str) -> str:
    """A call's name as the code would write it.

    ``torch.Tensor.detach`` → ``Tensor.detach``; ``torch.Tensor.data.__get__`` → ``Tensor.data``.
    """
    if name.startswith("torch.Tensor."):
        name = name[len("torch.") :]
    if name.endswith(".__get__"):
        name = name[: -len(".__get__")]
    return name


def _holders(step: Step) -> Dict[str, List[str]]:
    """The names on each storage: the step's tensors, then what operations named (``a.grad``)."""
    names: Dict[str, List[str]] = {}
    for state in step.tensors:
        if state.storage is not None and state.same_as is None:
            names.setdefault(state.storage, []).append(state.name)
    for op in step.ops:
        for label, who in zip(op.outputs, op.tensors.out):
            if label is not None and who is not None and who not in names.setdefault(label, []):
                names[label].append(who)
    return names


def op_text(op: OpRecord, holders: Dict[str, List[str]]) -> str:
    """One operation in one line: name(inputs) → outputs, what it wrote, the versions it moved."""
    name = op.name if op.level == "aten" else call_label(op.name)
    ins = ", ".join(n if n is not None else "·" for n in op.tensors.in_)
    text = f"{name}({ins})"
    outs = []
    known = set(op.reads) | set(op.writes)
    for i, label in enumerate(op.outputs):
        if label is not None and label in op.writes:  # an in-place result: said by "writes"
            continue
        who = op.tensors.out[i] if i < len(op.tensors.out) else None
        # existed: the storage was there before the call (x.grad, as_tensor of an array)
        existed = op.existed[i] if i < len(op.existed) else label in known
        where = "" if label is None else (f"{label}, no copy" if existed else f"{label}, new")
        if who is not None:
            outs.append(f"{who} ({where})" if where else who)
        else:
            outs.append(where.replace(", ", " (", 1) + ")" if "," in where else (where or "·"))
    if outs:
        text += " → " + ", ".join(outs)
    if op.writes:
        text += " writes " + ", ".join(
            f"{label} ({', '.join(holders[label])})" if holders.get(label) else label
            for label in op.writes
        )
    for bump in op.version_bumps:
        # an unnamed tensor's counter (the temporary of d.data.add_(1)) is not the named holder's
        who = f"{bump.name}: version" if bump.name else "an unnamed tensor's version"
        text += f" · {who} {bump.from_} → {bump.to}"
    return text


def ops_lines(step: Step, level: str) -> List[str]:
    """The step's operations at ``level`` (``calls`` or ``aten``), indented under their calls."""
    if level == "none" or not step.ops:
        return []
    holders = _holders(step)
    lines: List[str] = []
    hidden = 0
    for op in step.ops:
        if op.level == "aten" and level != "aten":
            continue
        # e.g. torch._C._set_grad_enabled of a no_grad block
        if not (op.tensors.in_ or op.tensors.out or op.writes):
            continue
        if len(lines) >= MAX_SHOWN_OPS:
            hidden += 1
            continue
        indent = "  " if op.level == "aten" and op.parent is not None else ""
        lines.append(indent + op_text(op, holders))
    if hidden:
        lines.append(f"… and {plural(hidden, 'more operation')} (the JSON trace holds them)")
    if step.ops_omitted:
        # at least: past the limit a call counts once, its ATen operations uncounted
        # (tensortrace.record.opmodes._take_off)
        lines.append(f"… and at least {plural(step.ops_omitted, 'more operation')} not recorded")
    return lines


def _grad(values: Optional[Values]) -> str:
    return "nothing" if values is None else one_line(format_values(values), VALUE_WIDTH)


def _grads(values: Sequence[Optional[Values]]) -> str:
    if not values:
        return "nothing"
    return "; ".join(_grad(v) for v in values)


def flow_lines(flow: Flow) -> List[str]:
    """The gradients of one backward call as an indented tree with values on the edges."""
    nodes = {n.id: n for n in flow.nodes}
    lines: List[str] = [f"gradient flow of {call_label(flow.call)}:"]
    if flow.notice:
        lines.append(f"  ({flow.notice})")
    if not flow.nodes and not flow.notice:
        lines.append("  (no graph: none of the tensors it started from has a grad_fn)")
    drawn: set = set()
    stack: List[Tuple[str, str, str]] = []  # (node id, prefix for its line, edge text)
    for root in reversed(flow.roots):
        stack.append((root, "  ", f"{_grads(nodes[root].grad_in)} → "))
    while stack:
        if len(lines) >= MAX_SHOWN_FLOW:
            lines.append(
                f"  … ({plural(len(flow.nodes) - len(drawn), 'more node')} in the JSON trace)"
            )
            break
        node_id, prefix, edge = stack.pop()
        if node_id == "":  # an edge into no recorded node
            lines.append(prefix + edge)
            continue
        node = nodes.get(node_id)
        if node is None:
            continue
        if node_id in drawn:
            lines.append(f"{prefix}{edge}{node.name} [{node_id}, above]")
            continue
        drawn.add(node_id)
        lines.append(f"{prefix}{edge}{_node_text(node)}")
        child_prefix = prefix.replace("└─ ", "   ").replace("├─ ", "│  ")
        children = []
        for i, nxt in enumerate(node.next):
            sent = node.grad_out[i] if i < len(node.grad_out) else None
            children.append((nxt, sent))
        for position in range(len(children) - 1, -1, -1):
            nxt, sent = children[position]
            branch = "└─ " if position == len(children) - 1 else "├─ "
            carried = _grad(sent) if node.ran else "not run"
            if nxt is None:
                stack.append(
                    ("", child_prefix + branch, f"{carried} → (an input that needs no gradient)")
                )
            elif nxt == "":
                stack.append(
                    ("", child_prefix + branch, f"{carried} → (a node beyond the recorded ones)")
                )
            else:
                stack.append((nxt, child_prefix + branch, f"{carried} → "))
    if flow.omitted:
        lines.append(f"  … and {plural(flow.omitted, 'more node')} not recorded")
    return lines


def _node_text(node: FlowNode) -> str:
    text = node.name
    if not node.ran:
        text += " (never reached)"
    if node.leaf is not None or node.name == "AccumulateGrad":
        who = node.leaf or "an unnamed leaf"
        before = (
            "None"
            if node.leaf_grad_before is None
            else one_line(format_values(node.leaf_grad_before), VALUE_WIDTH)
        )
        after = (
            "None"
            if node.leaf_grad_after is None
            else one_line(format_values(node.leaf_grad_after), VALUE_WIDTH)
        )
        text += f" → {who}.grad: {before} → {after}"
    return text


__all__ = ["call_label", "flow_lines", "op_text", "ops_lines"]
