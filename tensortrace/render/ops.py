"""What a step ran and where its gradients flowed, as lines of plain text.

``ops_lines`` reads ``Step.ops``: at ``--ops calls`` (the default) what the
code did: one line per call it made, and one line per expression of it that
ran calls inside a function (``opt.step() writes S3 (w) · each version 1 → 2``,
``OpRecord.site``), metadata reads (``METADATA_READS``) left out and a line
repeated at once said once with ``×N``; at ``--ops all`` every recorded call,
under its expression; at ``--ops aten`` each followed by the ATen operations
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
from .text import one_line, plural, value_brief

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


_LAST_HOLDERS: List[object] = [None, None]  # (step, its holders): a loop step asks per pass


def _holders(step: Step) -> Dict[str, List[str]]:
    """The names on each storage: the step's tensors, then what operations named (``a.grad``).

    Read once per step: a loop step's passes are drawn one slice of its operations at a time.
    """
    if _LAST_HOLDERS[0] is step:
        return _LAST_HOLDERS[1]  # type: ignore[return-value]
    names = _read_holders(step)
    _LAST_HOLDERS[:] = [step, names]
    return names


def _read_holders(step: Step) -> Dict[str, List[str]]:
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


#: Calls that read what a tensor is, not its values, and change nothing: folded away at the
#: default level (``--ops calls``), as is reading ``.grad``; ``--ops all`` lists them.
METADATA_READS = frozenset(
    "Tensor." + name
    for name in (
        "dim",
        "ndim",
        "ndimension",
        "size",
        "shape",
        "numel",
        "nelement",
        "stride",
        "storage_offset",
        "element_size",
        "itemsize",
        "nbytes",
        "data_ptr",
        "_version",
        "is_leaf",
        "grad_fn",
        "requires_grad",
        "retains_grad",
        "grad",
        "dtype",
        "device",
        "get_device",
        "layout",
        "is_contiguous",
        "is_sparse",
        "is_cuda",
        "is_cpu",
        "is_meta",
        "is_mps",
        "is_nested",
        "is_quantized",
        "is_floating_point",
        "is_complex",
        "is_inference",
        "_is_view",
        "output_nr",
        "__len__",
        "names",
    )
)
LEVELS = ("none", "calls", "all", "aten")  # what ``--ops`` shows of what a step ran


def is_metadata_read(op: OpRecord) -> bool:
    """A call that only read what a tensor is (``x.dim()``, ``x.is_leaf``, ``p.grad``)."""
    return (
        op.level == "call"
        and not op.writes
        and not op.version_bumps
        and call_label(op.name) in METADATA_READS
    )


def _said(op: OpRecord) -> bool:
    """Whether a line says anything: calls that take and give no tensor
    (``torch._C._set_grad_enabled`` of a ``no_grad`` block) are left out; the JSON keeps them."""
    return bool(op.tensors.in_ or op.tensors.out or op.writes)


def folded_reads(step: Step, start: int = 0, stop: Optional[int] = None) -> int:
    """How many of the step's calls (``start:stop``) the default level folds as metadata reads."""
    return sum(1 for op in step.ops[start:stop] if _said(op) and is_metadata_read(op))


def ops_lines(step: Step, level: str, start: int = 0, stop: Optional[int] = None) -> List[str]:
    """The step's operations (``start:stop`` of them) at ``level``, indented under their calls.

    ``calls`` (the default) says what the code did: each call it made, and each expression
    that ran calls inside a function (``opt.step()``, ``model(x)``) as one line of what
    those calls made, wrote and moved; metadata reads are folded away, and a line repeated
    at once is said once with a count. ``all`` lists every recorded call, under the
    expression it ran in; ``aten`` adds the ATen operations under each.
    """
    if level == "none" or not step.ops:
        return []
    ops = step.ops
    stop = len(ops) if stop is None else max(start, min(stop, len(ops)))
    holders = _holders(step)
    sites = step.sites
    lines: List[str] = []
    hidden = 0
    index = start
    while index < stop:
        if len(lines) > 2 * MAX_SHOWN_OPS:  # what is drawn costs, not what is cut
            hidden = sum(1 for op in ops[index:stop] if op.level == "call" and _said(op))
            break
        op = ops[index]
        site = op.site if op.level == "call" and op.site is not None else None
        if site is not None and 0 <= site < len(sites):
            group = [op]
            end = index + 1
            while end < stop and (ops[end].level == "aten" or ops[end].site == site):
                group.append(ops[end])
                end += 1
            index = end
            if level == "calls":
                said = [
                    g for g in group if g.level == "call" and _said(g) and not is_metadata_read(g)
                ]
                if said:
                    lines.append(group_text(sites[site].text, said, holders))
                continue
            inner = [
                ("    " if g.level == "aten" else "  ") + op_text(g, holders)
                for g in group
                if (g.level == "call" or level == "aten") and _said(g)
            ]
            if inner:
                lines.append(one_line(sites[site].text, 200) + ":")
                lines.extend(inner)
            continue
        index += 1
        if op.level == "aten" and level != "aten" or not _said(op):
            continue
        if level == "calls" and is_metadata_read(op):
            continue
        indent = "  " if op.level == "aten" and op.parent is not None else ""
        lines.append(indent + op_text(op, holders))
    if level == "calls":
        lines = _counted(lines)
    if len(lines) > MAX_SHOWN_OPS:
        hidden += len(lines) - MAX_SHOWN_OPS
        lines = lines[:MAX_SHOWN_OPS]
    if hidden:
        lines.append(f"… and {plural(hidden, 'more operation')} (the JSON trace holds them)")
    if step.ops_omitted and stop == len(ops):
        # at least: past the limit a call counts once, its ATen operations uncounted
        # (tensortrace.record.opmodes._take_off)
        lines.append(f"… and at least {plural(step.ops_omitted, 'more operation')} not recorded")
    return lines


def _counted(lines: List[str]) -> List[str]:
    """Lines repeated one after the other said once, with how many times: ``… ×3``."""
    out: List[str] = []
    count = 0
    for position, line in enumerate(lines):
        count += 1
        if position + 1 < len(lines) and lines[position + 1] == line:
            continue
        out.append(f"{line} ×{count}" if count > 1 else line)
        count = 0
    return out


MAX_GROUP_ITEMS = 4  # tensors named in one line of what an expression made, wrote or moved


def group_text(site: str, calls: Sequence[OpRecord], holders: Dict[str, List[str]]) -> str:
    """One expression of the code and what the calls it ran did, on one line:
    ``opt.step() writes S3 (w), S4 (b) · w: version 1 → 2; b: version 1 → 2``."""
    made: List[str] = []
    written: List[str] = []
    moved: Dict[Optional[str], List[Optional[int]]] = {}
    setters: Dict[str, List[str]] = {}  # attribute -> the tensors it was set on (p.grad = None)
    for op in calls:
        if op.name.startswith("torch.Tensor.") and op.name.endswith(".__set__"):
            attribute = op.name[len("torch.Tensor.") : -len(".__set__")]
            on = setters.setdefault(attribute, [])
            on.extend(n for n in op.tensors.in_[:1] if n is not None and n not in on)
        known = set(op.reads) | set(op.writes)
        for i, label in enumerate(op.outputs):
            if label is None or label in op.writes:
                continue
            existed = op.existed[i] if i < len(op.existed) else label in known
            if not existed and label not in made:
                made.append(label)
        for label in op.writes:
            if label not in written:
                written.append(label)
        for bump in op.version_bumps:
            if bump.name is None:
                continue
            if bump.name in moved:
                moved[bump.name][1] = bump.to
            else:
                moved[bump.name] = [bump.from_, bump.to]
    text = one_line(site, 120)
    if made:
        named = [
            f"{', '.join(holders[label])} ({label}, new)" for label in made if holders.get(label)
        ]
        unnamed = [f"{label} (new)" for label in made if not holders.get(label)]
        if len(unnamed) > 2:  # the temporaries of a forward: counted
            unnamed = [plural(len(unnamed), "unnamed new tensor")]
        text += " → " + _some(named + unnamed, "new tensor")
    if written:
        text += " writes " + _some(
            [
                f"{label} ({', '.join(holders[label])})" if holders.get(label) else label
                for label in written
            ],
            "storage",
        )
    for attribute, on in setters.items():
        text += f" sets .{attribute}" + (" of " + _some(on, "tensor") if on else "")
    if moved:
        steps = {tuple(v) for v in moved.values()}
        named = {n for label in written for n in holders.get(label, ())}
        if len(steps) == 1 and len(moved) > 1 and set(moved) <= named:
            a, b = steps.pop()  # every tensor it wrote moved alike: said once
            text += f" · each version {a} → {b}"
        else:
            text += " · " + _some(
                [f"{name}: version {a} → {b}" for name, (a, b) in moved.items()], "version", "; "
            )
    return text


def _some(items: List[str], word: str, joint: str = ", ") -> str:
    """At most ``MAX_GROUP_ITEMS`` items, then how many more."""
    if len(items) <= MAX_GROUP_ITEMS:
        return joint.join(items)
    rest = len(items) - MAX_GROUP_ITEMS + 1
    return joint.join(items[: MAX_GROUP_ITEMS - 1]) + f"{joint}and {plural(rest, 'more ' + word)}"


def flow_shape(flow: Flow) -> tuple:
    """What makes two gradient flows the same tree: nodes, edges, leaves, what ran."""
    return (
        flow.call,
        flow.roots,
        flow.omitted,
        flow.notice,
        tuple((n.name, n.next, n.leaf, n.ran) for n in flow.nodes),
    )


def repeated_flows(
    flows: Sequence[Flow], start: int = 0, stop: Optional[int] = None
) -> List[Tuple[int, str]]:
    """The flows ``start:stop`` to draw, each with what its title adds: a run of backward
    calls that sent their gradients through the same tree is drawn once, with its first call's
    gradients (later retained calls add to ``.grad``), `` (the same tree 3 times; the first
    call's values)``."""
    stop = len(flows) if stop is None else stop
    out: List[Tuple[int, str]] = []
    index = start
    while index < stop:
        shape = flow_shape(flows[index])
        end = index + 1
        while end < stop and flow_shape(flows[end]) == shape:
            end += 1
        count = end - index
        out.append(
            (index, f" (the same tree {count} times; the first call's values)" if count > 1 else "")
        )
        index = end
    return out


def _grad(values: Optional[Values]) -> str:
    return "nothing" if values is None else one_line(value_brief(values), VALUE_WIDTH)


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
            else one_line(value_brief(node.leaf_grad_before), VALUE_WIDTH)
        )
        after = (
            "None"
            if node.leaf_grad_after is None
            else one_line(value_brief(node.leaf_grad_after), VALUE_WIDTH)
        )
        text += f" → {who}.grad: {before} → {after}"
    return text


__all__ = [
    "LEVELS",
    "METADATA_READS",
    "call_label",
    "flow_lines",
    "flow_shape",
    "folded_reads",
    "group_text",
    "is_metadata_read",
    "op_text",
    "ops_lines",
    "repeated_flows",
]
