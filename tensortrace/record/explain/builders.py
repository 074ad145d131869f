"""The readings whose wording depends on the message in ways a template cannot say.

Most entries of ``explanations.yaml`` are templates with ``{name}`` placeholders.
The few here choose between wordings (a complex dtype or not, a meta device or a
GPU, a view of a view or of its base) or compute something from the message (the
element count a shape holds, the columns of a matrix). An entry names its builder
by the key it has in ``BUILDERS``; the loader refuses a name that is not there.

Pure string work: no torch, so that renderers of saved traces can use it.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Mapping, Optional, Tuple

Fields = Mapping[str, str]
"""The pattern's named groups; a group that did not take part is ''."""

Reading = Tuple[str, str, str]
"""title, what happened, what to do."""

Builder = Callable[[Fields], Reading]

# --- helpers for the builders -------------------------------------------------


def _indirect(modified: str, direct: str, indirect: str) -> str:
    return indirect if modified.startswith("its base") else direct


def _known_numel(shape: str) -> Optional[int]:
    """The product of the sizes other than -1 in a shape like ``"[-1, 3]"``; None for junk."""
    count = 1
    for part in shape.strip("[] ").split(","):
        part = part.strip()
        if not part or part == "-1":
            continue
        if not part.isdigit():
            return None
        count *= int(part)
    return count


def forward_name(node: str) -> str:
    """The forward operation's name for an autograd node's: "Unbind" for "UnbindBackward0".

    PyTorch 2.13 words its autograd errors with this name; earlier releases
    with the node's own. The rule is PyTorch's own (``Node::forward_op_name``):
    drop the last "Backward" when only digits follow it, so both wordings read
    the same, and a name of the new wording comes back as it is.
    """
    at = node.rfind("Backward")
    digits = node[at + len("Backward") :]
    if at < 0 or (digits and not digits.isdigit()):
        return node
    return node[:at]


# --- builders that need more than a template ----------------------------------


def inplace_saved(f: Fields) -> Reading:
    """Code because a scalar, a leaf and an op's output each read differently.

    An op's output is named by its node or its autograd node.
    """
    tensor = f["tensor"] if f["shape"].strip() else f"{f['tensor']} (a single number)"
    if f["node"]:
        node = f["node"]
        gloss = (
            "the autograd node of the operation that produced it"
            if re.search(r"Backward\d*$", node)
            else "the operation that produced it"
        )
        source = f"output {f['output']} of {node} ({gloss})"
    else:
        source = (
            "a tensor with no grad_fn of its own (a leaf, such as a parameter or an input, "
            "or a tensor that does not require grad)"
        )
    what = (
        f"Backward needs the value of {tensor}, {source}, exactly as it was when the "
        f"forward pass ran, so autograd saved it at version {f['saved']}. It is now at "
        f"version {f['now']}: an in-place operation changed it in between, and every "
        "in-place change (a method ending in `_`, `+=`, an indexed assignment like "
        "`y[0] = 1`) adds one to a tensor's version counter. Views and tensors made with "
        "detach() share that counter, so writing through them counts too."
    )
    return "A tensor saved for backward was changed in place", what, inplace_saved_fix()


def inplace_saved_fix(name: str = "") -> str:
    """What to do about a changed saved tensor, in the scenario's own name for it when known.

    The message never says which Python name holds the tensor; the tracer
    finds out from the scenario's tensors (``name_the_saved_tensor``). Until
    then the fix names no tensor at all, for a made-up name such as ``x``
    may well be another tensor of the user's scenario.
    """
    # Which operation wrote is not in the message: name none (the code may have used another),
    # only the rule: the out-of-place form drops the trailing underscore.
    if not name:
        return (
            "Make the change out-of-place so that it creates a new tensor (the operation "
            "without its trailing `_`, `+` instead of `+=`), or change a `clone()` of the "
            "tensor (also when the write went through an alias such as `.detach()` or a view), "
            "or make the change only after backward() has run."
        )
    return (
        f"Make the change out-of-place so that it creates a new tensor (`{name} = {name}.op(...)` "
        f"instead of `{name}.op_(...)`, `{name} = {name} + 1` instead of `{name} += 1`), or change "
        f"a copy (`{name}.clone()`; when the write went through an alias of `{name}`, such as "
        "`.detach()` or a view, make that alias a clone), or make the change only after "
        "backward() has run."
    )


def no_grad_view(f: Fields) -> Reading:
    """Code because the view itself, a view of a view, and a change through the base
    each read differently."""
    changed = _indirect(
        f["modified"],
        "is now being changed in place with grad mode on",
        "its base (the tensor it looks into), or another view of that base, has since "
        "been changed in place with grad mode on",
    )
    if f["node"]:
        subject = (
            f"Output {f['output']} of {f['node']} is a view of a view that was created inside "
            f"a `torch.no_grad()` block, and it {changed}."
        )
    else:
        subject = (
            f"This view was created inside a `torch.no_grad()` block, and "
            f"{'it ' if not changed.startswith('its base') else ''}{changed}."
        )
    what = (
        f"{subject} A view shares memory with its base, and autograd cannot tell whether "
        "this change should be recorded, so it refuses rather than risk wrong gradients."
    )
    fix = (
        "Keep the view and the in-place change on the same side: both inside the "
        "`with torch.no_grad():` block (not recorded) or both outside it (recorded); or "
        "`clone()` the view to get a tensor with memory of its own."
    )
    return "A view made under no_grad was changed in place", what, fix


def inference_view(f: Fields) -> Reading:
    """Code because a change to the view and a change through its base read differently."""
    changed = _indirect(
        f["modified"],
        "it is now being changed in place outside that block",
        "its base, or another view of that base, has since been changed in place outside "
        "that block",
    )
    what = (
        "This view of a normal tensor was created inside `torch.inference_mode()`, and "
        f"{changed}. Autograd cannot tell whether the change should be recorded, so it "
        "refuses rather than risk wrong gradients."
    )
    fix = (
        "Keep the view and the in-place change on the same side: both inside the "
        "`with torch.inference_mode():` block or both outside it; or `clone()` the view."
    )
    return "A view made in inference mode was changed in place", what, fix


def multi_view(f: Fields) -> Reading:
    """Code because a change to the piece and a change through its base read differently."""
    changed = _indirect(
        f["modified"],
        "and it is being changed in place",
        "and its base, or another view of that base, has been changed in place",
    )
    what = (
        f"Output {f['output']} of {f['node']} is one of several views that one function "
        "(split, chunk, unbind, ...) returned together; they all share memory with their "
        f"base, {changed}. Autograd cannot record in-place changes to views made that way, "
        "so it refuses."
    )
    fix = (
        "Use the out-of-place operation (`x = x * 2` instead of `x.mul_(2)`), or give the "
        "piece memory of its own first (`x = x.clone()`) and change that."
    )
    return "In-place change to a view that came out of split/chunk/unbind", what, fix


def custom_function_view(f: Fields) -> Reading:
    """Code because the fix names the Function's class, which the node's name carries in the
    wording of releases before 2.13 ("PassThroughBackward") and is in 2.13's ("PassThrough")."""
    function = forward_name(f["node"])
    what = (
        f"Output {f['output']} of {f['node']} is a view (or the input itself) that a custom "
        "autograd.Function returned; changing it in place would make autograd replace that "
        "Function's own backward with its view bookkeeping and give wrong gradients, so it is "
        "refused."
    )
    fix = (
        "Return a copy from `forward` (`return x.clone()` rather than `x` or `x.view(...)`), "
        f"or clone the result before changing it: `y = {function}.apply(x).clone()`."
    )
    return "In-place change to a view returned by a custom Function", what, fix


def unused_input(f: Fields) -> Reading:
    """Code because torch 2.13 names the input's index, and earlier releases do not."""
    which = f"input {f['index']}" if f["index"] else "one of the inputs"
    what = (
        f"autograd.grad() was asked for the gradient with respect to {which}, but that "
        "tensor was not used to compute the outputs (it is not in their graph), so there is "
        "no gradient to give. A common cause is passing a newly computed tensor (`a * 2` "
        "written again) instead of the one that was actually used."
    )
    fix = (
        "Pass the tensor that was actually used, or add `allow_unused=True` to get None for "
        "it (with `materialize_grads=True`, zeros)."
    )
    return "autograd.grad() for an input the outputs do not depend on", what, fix


def non_scalar(f: Fields) -> Reading:
    """Code because a complex output needs another reason and another fix.

    A many-element output has its own.
    """
    if f["dtype"]:
        what = (
            "Calling backward() with no argument starts the chain rule from a gradient "
            f"of 1, which is only defined for a single real number; this output has the "
            f"complex dtype {f['dtype']}."
        )
        fix = (
            "Turn it into a real number first, e.g. `out.abs().sum().backward()` or "
            "`out.real.sum().backward()`, or pass the starting gradient yourself: "
            "`out.backward(gradient=...)`."
        )
        return "backward() on a complex output without a gradient", what, fix
    what = (
        "Calling backward() (or autograd.grad()) without a gradient starts the chain rule "
        "from a gradient of 1, which is only defined for an output holding a single "
        "number; this output has more than one element, so autograd needs to be told how "
        "much each element counts."
    )
    fix = (
        "Reduce it to one number first (`out.sum().backward()`), or pass the starting "
        "gradient yourself: `out.backward(gradient=torch.ones_like(out))` "
        "(`grad_outputs=torch.ones_like(out)` for autograd.grad())."
    )
    return "backward() on an output with more than one element", what, fix


def numpy_requires_grad(f: Fields) -> Reading:
    """Code because numpy() shares memory while other methods run Python on it: two reasons."""
    method = f["method"]
    if method == "numpy":
        what = (
            "numpy() returns an array that shares memory with the tensor, but NumPy knows "
            "nothing about autograd: changes made through the array would not be recorded "
            "and the array cannot carry gradients, so this is refused for a tensor that "
            "requires grad."
        )
    else:
        what = (
            f"{method}() works on the tensor's memory directly with a Python function, "
            "outside autograd, so it is refused for a tensor that requires grad: autograd "
            "could not record what it does."
        )
    fix = (
        f"Use `{f['instead']}`: detach() gives a tensor that shares the same memory but is "
        "cut from the graph (add `.clone()` for an independent copy)."
    )
    return f"{method}() on a tensor that requires grad", what, fix


def numpy_bit(f: Fields) -> Reading:
    """Code because the conjugate and the negative bit come from different operations."""
    if f["bit"] == "conjugate":
        lazy = "a lazy complex conjugate (from `conj()`)"
    else:
        lazy = "a lazy negation (for example the imaginary part of a `conj()` result)"
    what = (
        f"This tensor is {lazy}: it shares memory with the original and only carries a "
        f"{f['bit']} bit, a flag meaning 'apply this when reading', which a NumPy array "
        "sharing the same memory cannot represent."
    )
    fix = f"Apply the flag first, which makes a copy: `{f['instead']}`."
    return f"numpy() on a tensor with the {f['bit']} bit set", what, fix


def numpy_device(f: Fields) -> Reading:
    """Code because a meta tensor has no data at all, while a GPU tensor's data can be copied."""
    device = f["device"]
    if device == "meta":
        what = (
            "Meta tensors have a shape and a dtype but no data at all, so there is nothing "
            "for a NumPy array to hold."
        )
        fix = "Create the tensor on a real device (e.g. `device='cpu'`) when you need its values."
    else:
        what = (
            f"A NumPy array lives in CPU memory and shares it with the tensor, but this "
            f"tensor's data is on device {device}."
        )
        fix = (
            "Copy it to the CPU first: `t.cpu().numpy()` (add `.detach()` before it if the "
            "tensor requires grad)."
        )
    return f"numpy() on a {device} tensor", what, fix


def from_numpy_dtype(f: Fields) -> Reading:
    """Code because object and string arrays need building, numeric ones only converting."""
    what = (
        f"Tensors can only be made from NumPy arrays of these types: {f['supported']}; this "
        f"array has type {f['dtype']}."
    )
    if f["dtype"] in ("numpy.object_", "numpy.str_", "numpy.bytes_"):
        fix = (
            "Build a numeric array first (for ragged lists, pad them to equal length), "
            "e.g. `np.array(rows, dtype=np.float32)`, then convert it."
        )
    else:
        fix = "Convert the array first, e.g. `torch.from_numpy(arr.astype(np.float64))`."
    return "A NumPy array of an unsupported type", what, fix


def _minus_one_example(numel: str) -> str:
    """An example that fits this count: ``x.view(-1, d)`` for a divisor d of it."""
    try:
        n = int(numel)
    except ValueError:
        return ""
    if n < 2:
        return " (e.g. `x.view(-1)`)"
    d = next((k for k in range(2, min(n, 10_000)) if n % k == 0), n)
    return f" (e.g. `x.view(-1, {d})`: {n} is a multiple of {d})"


def view_shape(f: Fields) -> Reading:
    """Code because it works out how many elements the asked-for shape holds."""
    count = _known_numel(f["shape"])
    if count is None:
        holds = ""
    elif "-1" in f["shape"]:
        holds = f" (its other sizes multiply to {count}, which does not divide {f['numel']})"
    else:
        holds = f" (it holds {count})"
    what = (
        "view() and reshape() keep every element and only change how they are arranged, "
        f"so the new shape must hold exactly {f['numel']} elements, and {f['shape']} does "
        f"not{holds}."
    )
    fix = (
        f"Choose sizes whose product is {f['numel']}, or let one size be worked out with "
        f"-1{_minus_one_example(f['numel'])}."
    )
    return "A new shape with the wrong number of elements", what, fix


def matmul(f: Fields) -> Reading:
    """Code because it reads the columns and rows out of the two shapes."""
    cols = f["a"].split("x")[-1]
    rows = f["b"].split("x")[0]
    what = (
        "Matrix multiplication needs the number of columns of the first matrix to equal "
        f"the number of rows of the second; the first is {f['a']} ({cols} columns) and the "
        f"second is {f['b']} ({rows} rows)."
    )
    fix = (
        "Transpose one side (`a @ b.T`) or reshape the inputs so the inner sizes agree; "
        "print `.shape` of both to check."
    )
    return "Matrix shapes that cannot be multiplied", what, fix


def out_requires_grad(f: Fields) -> Reading:
    """Code because the message may leave the operation unnamed, and the call must still read."""
    op = f["op"] or "this function"
    call = f"torch.{f['op']}(...)" if f["op"] else "torch.<op>(...)"
    what = (
        f"{op}() was given an `out=` tensor to write its result into, but one of its "
        "arguments requires grad; autograd cannot record a write into a tensor you "
        "supplied, so `out=` is refused when gradients are needed."
    )
    fix = (
        f"Let it return a new tensor (`y = {call}` without `out=`), or, if no gradient is "
        "needed, make the "
        "call inside `with torch.no_grad():`."
    )
    return f"{op}() with out= on a tensor that requires grad", what, fix


BUILDERS: Dict[str, Builder] = {
    builder.__name__: builder
    for builder in (
        inplace_saved,
        no_grad_view,
        inference_view,
        custom_function_view,
        unused_input,
        multi_view,
        non_scalar,
        numpy_requires_grad,
        numpy_bit,
        numpy_device,
        from_numpy_dtype,
        view_shape,
        matmul,
        out_requires_grad,
    )
}

__all__ = ["BUILDERS", "Builder", "Fields", "Reading"]
