"""Plain-language readings of the PyTorch errors that copy and autograd code meets.

When a step raises, the trace keeps the exception's class name and message and,
where one of the rules below recognises them, an ``Explanation``: what
happened, in terms of the mechanism (version counters, saved tensors, leaves,
views), and what to write instead. The explanation quotes what the message
names (the tensor, the graph node, the versions, the shapes), so it reads as a
statement about the user's own code rather than a generic hint.

This module is pure data and regular expressions and never imports torch:
renderers and readers of saved JSON traces use it too. Each rule was written
against the message that PyTorch really raises; ``tests/test_explain.py``
raises every one of them for real, so a PyTorch release that rewords a message
shows up as a failing test rather than as a missing explanation.

Some rules match warnings (``UserWarning``) as well, with the warning category
as the class name: the same readings help when a step warns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from .model import Explanation

# Only the head of a message is searched: every rule matches the text PyTorch
# puts first, and C++ backtraces appended after it can run to many kilobytes.
_MAX_MESSAGE = 8192

Fields = Dict[str, str]
Builder = Callable[[Fields], Tuple[str, str, str]]


@dataclass(frozen=True)
class Rule:
    """One recognised error: class names, a message pattern, and its reading."""

    topic: str
    types: Tuple[str, ...]
    pattern: re.Pattern[str]
    build: Builder


def _template(title: str, what: str, fix: str) -> Builder:
    """A builder that fills ``{name}`` placeholders from the pattern's groups."""

    def build(fields: Fields) -> Tuple[str, str, str]:
        return (
            title.format_map(fields),
            what.format_map(fields),
            fix.format_map(fields),
        )

    return build


def _rule(topic: str, types: str, pattern: str, build: Builder) -> Rule:
    return Rule(topic, tuple(types.split()), re.compile(pattern), build)


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


# --- builders that need more than a template ----------------------------------


def _inplace_saved(f: Fields) -> Tuple[str, str, str]:
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
    fix = (
        "Make the change out-of-place so that it creates a new tensor (`x = x.sigmoid()` "
        "instead of `x.sigmoid_()`, `x = x + 1` instead of `x += 1`), or change a copy "
        "(`x = x.clone()` first), or make the change only after backward() has run."
    )
    return "A tensor saved for backward was changed in place", what, fix


def _no_grad_view(f: Fields) -> Tuple[str, str, str]:
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


def _inference_view(f: Fields) -> Tuple[str, str, str]:
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


def _multi_view(f: Fields) -> Tuple[str, str, str]:
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


def _non_scalar(f: Fields) -> Tuple[str, str, str]:
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


def _numpy_requires_grad(f: Fields) -> Tuple[str, str, str]:
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


def _numpy_bit(f: Fields) -> Tuple[str, str, str]:
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


def _numpy_device(f: Fields) -> Tuple[str, str, str]:
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


def _from_numpy_dtype(f: Fields) -> Tuple[str, str, str]:
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


def _view_shape(f: Fields) -> Tuple[str, str, str]:
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
        "-1 (e.g. `x.view(-1, 4)` when the count is a multiple of 4)."
    )
    return "A new shape with the wrong number of elements", what, fix


def _matmul(f: Fields) -> Tuple[str, str, str]:
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


def _out_requires_grad(f: Fields) -> Tuple[str, str, str]:
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


# --- the rules ----------------------------------------------------------------

VERSION_PATTERN = _VERSION_PATTERN = (
    r"one of the variables needed for gradient computation has been modified by an "
    r"inplace operation: "
    r"(?P<tensor>\[(?P<ttype>[^\[\]\s]{1,200}) \[(?P<shape>[^\[\]]{0,200})\]\])"
    r"(?:, which is output (?P<output>\d{1,9}) of (?P<node>[^,\s]{1,300}),)? "
    r"is at version (?P<now>\d{1,19}); expected version (?P<saved>\d{1,19}) instead"
)

_MODIFIED = r"(?P<modified>is being|its base or another view of its base has been)"

RULES: Tuple[Rule, ...] = (
    # -- version counter and saved tensors -----------------------------------
    _rule("inplace-saved-tensor", "RuntimeError", _VERSION_PATTERN, _inplace_saved),
    _rule(
        "backward-twice",
        "RuntimeError",
        r"Trying to backward through the graph a second time",
        _template(
            "Backward through a graph whose saved values were already freed",
            "To save memory, the first backward() or autograd.grad() through this graph "
            "freed the intermediate values (saved tensors) that it kept for computing "
            "gradients. A second backward through the same graph, or reading a saved "
            "tensor such as `y.grad_fn._saved_self` afterwards, needs them and finds them "
            "gone.",
            "Pass `retain_graph=True` to the first call (`loss.backward(retain_graph=True)`) "
            "if you really need a second pass, or recompute the forward (build `loss` "
            "again from the inputs) before each backward.",
        ),
    ),
    _rule(
        "backward-twice",
        "RuntimeError",
        r"Calling register_hooks on a saved tensor after it has been freed",
        _template(
            "Hooks on a saved tensor that was already freed",
            "backward() or autograd.grad() already ran through this graph and, to save "
            "memory, freed the tensors it had saved for computing gradients, so there is "
            "no saved tensor left to put hooks on.",
            "Register the hooks before running backward, or pass `retain_graph=True` to "
            "the backward call that comes first.",
        ),
    ),
    # -- backward's starting point ---------------------------------------------
    _rule(
        "no-grad-fn",
        "RuntimeError",
        r"element (?P<index>\d{1,9}) of tensors does not require grad and does not have "
        r"a grad_fn",
        _template(
            "backward() on a tensor that is not part of any graph",
            "Element {index} of the tensors given to backward() (for `y.backward()`, y "
            "itself) has requires_grad=False and no grad_fn (the record of the operation "
            "that produced it), so it is not connected to any autograd graph. That happens "
            "when none of its inputs required grad, or when it was computed under "
            "`torch.no_grad()`, from a `.detach()`ed tensor, or in an integer dtype.",
            "Create the inputs you want gradients for with `requires_grad=True` (e.g. "
            "`w = torch.ones(3, requires_grad=True)`) and compute the output from them "
            "outside `torch.no_grad()` and without `.detach()`.",
        ),
    ),
    _rule(
        "non-scalar-backward",
        "RuntimeError",
        r"grad can be implicitly created only for (?:real )?scalar outputs"
        r"(?: but got (?P<dtype>[\w.]{1,100}))?",
        _non_scalar,
    ),
    # -- leaves and in-place changes -------------------------------------------
    _rule(
        "inplace-leaf",
        "RuntimeError",
        r"(?<!view of )\ba leaf Variable that requires grad (?:is being|has been) used in "
        r"an in-place operation",
        _template(
            "In-place change to a leaf that requires grad",
            "A leaf is a tensor you created yourself with requires_grad=True (a model "
            "parameter, for example); autograd takes gradients with respect to its value "
            "and collects them in its `.grad`. Changing it in place (`add_()`, `zero_()`, "
            "`copy_()`, `w -= ...`) while autograd is recording would replace that very "
            "value, so it is refused.",
            "Make the update with autograd switched off, as optimizers do: "
            "`with torch.no_grad(): w -= lr * w.grad`; or compute a new tensor instead "
            "(`w2 = w + 1`).",
        ),
    ),
    _rule(
        "inplace-view",
        "RuntimeError",
        r"a view of a leaf Variable that requires grad is being used in an in-place "
        r"operation",
        _template(
            "In-place change through a view of a leaf that requires grad",
            "The tensor being changed is a view of a leaf that requires grad: it shares "
            "the leaf's memory (e.g. `w[0]`, `w[:2]`, `w.view(...)`), so writing into it, "
            "including `w[0] = 5`, changes the leaf in place, which autograd refuses while "
            "it is recording.",
            "Do the write with autograd off: `with torch.no_grad(): w[0] = 5`; or change a "
            "copy instead (`w2 = w.clone(); w2[0] = 5`).",
        ),
    ),
    _rule(
        "inplace-view",
        "RuntimeError",
        r"(?:A view was created|Output (?P<output>\d{1,9}) of (?P<node>\S{1,300}) is a "
        r"view of a view which was created) in no_grad mode and " + _MODIFIED
        + r" modified inplace with grad mode enabled",
        _no_grad_view,
    ),
    _rule(
        "inplace-view",
        "RuntimeError",
        r"Output (?P<output>\d{1,9}) of (?P<node>\S{1,300}) is a view and " + _MODIFIED
        + r" modified inplace\. This view is the output of a function that returns "
        r"multiple views",
        _multi_view,
    ),
    _rule(
        "inplace-view",
        "RuntimeError",
        r"Output (?P<output>\d{1,9}) of (?P<node>\S{1,300}) is a view and " + _MODIFIED
        + r" modified inplace\. This view was created inside a custom Function",
        _template(
            "In-place change to a view returned by a custom Function",
            "Output {output} of {node} is a view (or the input itself) that a custom "
            "autograd.Function returned; changing it in place would make autograd replace "
            "that Function's own backward with its view bookkeeping and give wrong "
            "gradients, so it is refused.",
            "Return a copy from `forward` (`return x.clone()` rather than `x` or "
            "`x.view(...)`), or clone the result before changing it: "
            "`y = {node}.apply(x).clone()`.",
        ),
    ),
    _rule(
        "detach-view",
        "RuntimeError",
        r"Can't detach views in-place\. Use detach\(\) instead",
        _template(
            "detach_() on a view",
            "detach_() cuts a tensor out of the autograd graph in place, changing the "
            "tensor object itself; this tensor is a view (a slice, `.view()`, `.t()`, ...) "
            "that shares memory and autograd history with its base, and views cannot be "
            "detached in place.",
            "Use `v = v.detach()`, which returns a new tensor that shares the same memory "
            "but is cut from the graph, instead of `v.detach_()`.",
        ),
    ),
    # -- inference mode ----------------------------------------------------------
    _rule(
        "inference-mode",
        "RuntimeError",
        r"Inplace update to inference tensor outside InferenceMode is not allowed",
        _template(
            "In-place change to an inference tensor outside inference mode",
            "This tensor was created inside `torch.inference_mode()`, which makes an "
            "inference tensor: it has no version counter (the count of in-place changes "
            "that autograd checks), so outside that block it may not be changed in place, "
            "not even through a view or an indexed assignment.",
            "Clone it outside the block to get a normal tensor and change the clone "
            "(`t = t.clone(); t.add_(1)`), or create it under `torch.no_grad()` instead of "
            "`torch.inference_mode()`.",
        ),
    ),
    _rule(
        "inference-mode",
        "RuntimeError",
        r"Inference tensors cannot be saved for backward",
        _template(
            "An inference tensor used where backward needs its value",
            "This computation requires grad, and its backward needs the value of a tensor "
            "that was created inside `torch.inference_mode()`. Inference tensors have no "
            "version counter, so autograd could not check later that the value is "
            "unchanged, and refuses to save it for backward.",
            "Use a normal copy in code that needs gradients (`t = t.clone()`, outside "
            "inference mode), or create the tensor under `torch.no_grad()` instead of "
            "`torch.inference_mode()`.",
        ),
    ),
    _rule(
        "inference-mode",
        "RuntimeError",
        r"Setting requires_grad=True on inference tensor outside InferenceMode is not "
        r"allowed",
        _template(
            "requires_grad on an inference tensor",
            "This tensor was created inside `torch.inference_mode()`; inference tensors "
            "are never part of an autograd graph, so requires_grad cannot be switched on "
            "for them (this also covers wrapping one in `nn.Parameter`).",
            "Make a normal copy outside the block and use that: "
            "`t = t.clone().requires_grad_()`.",
        ),
    ),
    _rule(
        "inference-mode",
        "RuntimeError",
        r"Inference tensors do not track version counter",
        _template(
            "Reading the version of an inference tensor",
            "This tensor was created inside `torch.inference_mode()`; inference tensors "
            "skip the version counter (the count of in-place changes) to save time, so "
            "`._version` has no value to give.",
            "Create the tensor under `torch.no_grad()` instead of `torch.inference_mode()` "
            "where versions matter, or use a copy made outside the block "
            "(`t = t.clone()`).",
        ),
    ),
    _rule(
        "inference-mode",
        "RuntimeError",
        r"A view was created in inference mode and " + _MODIFIED
        + r" modified inplace in normal mode",
        _inference_view,
    ),
    # -- requires_grad -----------------------------------------------------------
    _rule(
        "requires-grad-non-leaf",
        "RuntimeError",
        r"you can only change requires_grad flags of leaf variables",
        _template(
            "Changing requires_grad of a computed tensor",
            "Only a leaf (a tensor you created, not the result of an operation on tensors "
            "that require grad) can have requires_grad set by hand; this tensor was "
            "computed by an operation (it has a grad_fn), so its requires_grad follows "
            "from its inputs.",
            "To use its value without tracking, take `y = y.detach()` (then "
            "`y.requires_grad_()` makes it a new leaf if you need one); to read its "
            "gradient, call `y.retain_grad()` before backward.",
        ),
    ),
    _rule(
        "requires-grad-dtype",
        "RuntimeError",
        r"(?i:only) Tensors of floating point (?:and complex )?dtype can require gradients",
        _template(
            "requires_grad on an integer or bool tensor",
            "A gradient measures how a result changes when a value changes by a tiny "
            "amount, which only makes sense for floating point (or complex) values; this "
            "tensor has an integer or bool dtype (`torch.tensor([1, 2, 3])` and "
            "`torch.arange(3)` both give int64).",
            "Create it as floating point, e.g. `torch.tensor([1., 2., 3.], "
            "requires_grad=True)`, `torch.arange(3.0, requires_grad=True)` or "
            "`t.float().requires_grad_()`.",
        ),
    ),
    _rule(
        "requires-grad-dtype",
        "RuntimeError",
        r"data set to a tensor that requires gradients must be floating point or complex "
        r"dtype",
        _template(
            "`.data` set to an integer or bool tensor",
            "Assigning `.data` replaces the tensor's contents, dtype included, and this "
            "tensor requires grad, which an integer or bool tensor cannot.",
            "Convert the new value first (`w.data = new.float()`), or better, copy the "
            "values in without autograd: `with torch.no_grad(): w.copy_(new)`.",
        ),
    ),
    _rule(
        "requires-grad-false",
        "RuntimeError",
        r"can't retain_grad on Tensor that has requires_grad=False",
        _template(
            "retain_grad() on a tensor that does not require grad",
            "retain_grad() asks backward to keep this tensor's gradient in its `.grad`, "
            "but the tensor has requires_grad=False, so no gradient will ever flow to it.",
            "Compute it from tensors created with `requires_grad=True` before calling "
            "`retain_grad()`; a tensor you created yourself needs `t.requires_grad_()` "
            "instead, and then gets `.grad` without retain_grad().",
        ),
    ),
    _rule(
        "requires-grad-false",
        "RuntimeError",
        r"cannot register a hook on a tensor that doesn't require gradient",
        _template(
            "A gradient hook on a tensor that does not require grad",
            "register_hook() runs a function on this tensor's gradient during backward, "
            "but the tensor has requires_grad=False, so it will never get a gradient.",
            "Register the hook on a tensor that requires grad (created with "
            "`requires_grad=True`, or computed from one).",
        ),
    ),
    _rule(
        "non-leaf-grad",
        "UserWarning",
        r"The \.grad attribute of a Tensor that is not a leaf Tensor is being accessed",
        _template(
            "Reading .grad of a computed tensor",
            "Only leaves (tensors you created with requires_grad=True) get their `.grad` "
            "filled in by backward(); this tensor was computed by an operation (it has a "
            "grad_fn), so its `.grad` stays None.",
            "Call `y.retain_grad()` before backward() to keep its gradient, or read the "
            "`.grad` of the leaf you created.",
        ),
    ),
    # -- autograd.grad and gradient values ------------------------------------
    _rule(
        "autograd-grad-inputs",
        "RuntimeError",
        r"The differentiated Tensor at index (?P<index>\d{1,9}) appears to not have been "
        r"used in the graph",
        _template(
            "autograd.grad() for an input the outputs do not depend on",
            "autograd.grad() was asked for the gradient with respect to input {index}, but "
            "that tensor was not used to compute the outputs (it is not in their graph), "
            "so there is no gradient to give. A common cause is passing a newly computed "
            "tensor (`a * 2` written again) instead of the one that was actually used.",
            "Pass the tensor that was actually used, or add `allow_unused=True` to get None "
            "for it (with `materialize_grads=True`, zeros).",
        ),
    ),
    _rule(
        "autograd-grad-inputs",
        "RuntimeError",
        r"One of the differentiated Tensors does not require grad",
        _template(
            "autograd.grad() for an input that does not require grad",
            "Every input passed to autograd.grad() must require grad, since only then can "
            "the outputs depend on it through the graph; one of them has "
            "requires_grad=False.",
            "Create that input with `requires_grad=True` (or call `t.requires_grad_()` on "
            "it) before computing the outputs from it.",
        ),
    ),
    _rule(
        "grad-mismatch",
        "RuntimeError",
        r"Mismatch in shape: grad_output\[(?P<index>\d{1,9})\] has a shape of "
        r"(?P<given>torch\.Size\(\[[^\]]{0,200}\]\)) and output\[\d{1,9}\] has a shape "
        r"of (?P<expected>torch\.Size\(\[[^\]]{0,200}\]\))",
        _template(
            "A starting gradient of the wrong shape",
            "The gradient given for output {index} has shape {given}, but that output has "
            "shape {expected}; the gradient you pass to backward() (or as `grad_outputs`) "
            "holds one weight per output element, so it must have exactly the output's "
            "shape.",
            "Pass a gradient of the output's shape, e.g. "
            "`out.backward(torch.ones_like(out))`.",
        ),
    ),
    _rule(
        "grad-mismatch",
        "RuntimeError",
        r"attempting to assign a gradient of size '(?P<given>[^']{0,200})' to a tensor of "
        r"size '(?P<expected>[^']{0,200})'",
        _template(
            "Assigning a .grad of the wrong size",
            "`.grad` must have the same shape as its tensor, and this assigns a gradient "
            "of size {given} to a tensor of size {expected}.",
            "Assign a tensor of the same shape (e.g. `w.grad = torch.zeros_like(w)`), or "
            "`w.grad = None` to clear it.",
        ),
    ),
    _rule(
        "grad-mismatch",
        "RuntimeError",
        r"attempting to assign a gradient with dtype '(?P<given>[^']{0,100})' to a tensor "
        r"with grad_dtype '(?P<expected>[^']{0,100})'",
        _template(
            "Assigning a .grad of the wrong dtype",
            "`.grad` must have the tensor's gradient dtype ({expected}, which is the "
            "tensor's own dtype unless grad_dtype was set), but the assigned gradient has "
            "dtype {given}.",
            "Convert it first: `w.grad = g.to(w.dtype)`.",
        ),
    ),
    # -- NumPy -------------------------------------------------------------------
    _rule(
        "numpy-requires-grad",
        "RuntimeError",
        r"Can't call (?P<method>\w{1,100})\(\) on (?:Tensor|Variable) that requires grad\. "
        r"Use (?P<instead>\S{1,200}) instead",
        _numpy_requires_grad,
    ),
    _rule(
        "numpy-conversion",
        "RuntimeError",
        r"Can't call numpy\(\) on Tensor that has (?P<bit>conjugate|negative) bit set\. "
        r"Use (?P<instead>\S{1,200}) instead",
        _numpy_bit,
    ),
    _rule(
        "numpy-conversion",
        "TypeError",
        r"can't convert (?P<device>\S{1,100}) device type tensor to numpy",
        _numpy_device,
    ),
    _rule(
        "numpy-conversion",
        "TypeError",
        r"can't convert (?P<layout>\w{1,100}) layout tensor to numpy",
        _template(
            "numpy() on a {layout} tensor",
            "numpy() shares a tensor's memory as a plain dense array, and this tensor uses "
            "the {layout} layout, which stores only some of the elements.",
            "Convert it first: `t.to_dense().numpy()`.",
        ),
    ),
    _rule(
        "numpy-conversion",
        "TypeError",
        r"Got unsupported ScalarType (?P<dtype>\w{1,100})",
        _template(
            "numpy() on a tensor of a type NumPy lacks",
            "NumPy has no {dtype} type, so numpy() cannot share this tensor's memory as "
            "an array.",
            "Convert to a type NumPy has first, which makes a copy: `t.float().numpy()`.",
        ),
    ),
    _rule(
        "from-numpy",
        "ValueError",
        r"At least one stride in the given numpy array is negative",
        _template(
            "A NumPy array with negative strides",
            "Turning an array into a tensor (torch.from_numpy(), torch.as_tensor(), even "
            "torch.tensor()) goes through the array's memory layout, and this array steps "
            "backwards through memory (a negative stride, from `arr[::-1]` or `np.flip`), "
            "which tensors cannot do.",
            "Make a copy with ordinary strides first: `torch.from_numpy(arr.copy())`; or "
            "convert the unflipped array and flip in torch (`.flip(0)`).",
        ),
    ),
    _rule(
        "from-numpy",
        "TypeError",
        r"can't convert np\.ndarray of type (?P<dtype>[\w.]{1,100})\. The only supported "
        r"types are: (?P<supported>[^.]{1,500})\.",
        _from_numpy_dtype,
    ),
    _rule(
        "from-numpy",
        "TypeError",
        r"expected np\.ndarray \(got (?P<got>[\w.]{1,100})\)",
        _template(
            "torch.from_numpy() on something that is not an array",
            "torch.from_numpy() shares the memory of a NumPy array and accepts nothing "
            "else; it got a {got}.",
            "Use `torch.tensor(data)` (always copies) or `torch.as_tensor(data)` for lists "
            "and other sequences, or `np.asarray(data)` first.",
        ),
    ),
    _rule(
        "from-numpy",
        "ValueError",
        r"given numpy array has byte order different from the native byte order",
        _template(
            "A NumPy array in the other byte order",
            "This array stores its numbers in the other byte order (big-endian instead of "
            "little-endian, or the reverse) than this machine, and torch.from_numpy() "
            "shares memory as it is, without converting.",
            "Convert the array first: "
            "`torch.from_numpy(arr.astype(arr.dtype.newbyteorder('=')))`.",
        ),
    ),
    _rule(
        "from-numpy",
        "UserWarning",
        r"The given NumPy array is not writable",
        _template(
            "A tensor sharing a read-only NumPy array",
            "torch.from_numpy() shares the array's memory, but the array is read-only "
            "(e.g. from `np.broadcast_to`, a memory map or a bytes buffer); tensors have no "
            "read-only mode, so an in-place change to the tensor would write to memory "
            "that must not change.",
            "Copy the array first (`torch.from_numpy(arr.copy())`), or use "
            "`torch.tensor(arr)`, which always copies.",
        ),
    ),
    # -- copies ------------------------------------------------------------------
    _rule(
        "copy-construct",
        "UserWarning",
        r"To copy construct from a tensor, it is recommended to use "
        r"sourceTensor\.detach\(\)\.clone\(\)",
        _template(
            "torch.tensor() on a tensor",
            "torch.tensor(t) copies the data into a new leaf that is not connected to t's "
            "autograd graph; spelling that out says clearly what happens to gradients.",
            "Write `t.detach().clone()` for a copy outside the graph, or "
            "`t.detach().clone().requires_grad_(True)` for a new leaf that requires grad; "
            "use `t.clone()` if gradients should flow back to t.",
        ),
    ),
    _rule(
        "deepcopy-non-leaf",
        "RuntimeError",
        r"Only Tensors created explicitly by the user \(graph leaves\) support the "
        r"deepcopy protocol",
        _template(
            "copy.deepcopy() of a computed tensor",
            "copy.deepcopy() can copy leaves (tensors you created, such as parameters), "
            "but this tensor was computed by an operation and has a grad_fn: its place in "
            "the autograd graph cannot be copied.",
            "Copy the value without its history: `y.detach().clone()`; use `y.clone()` if "
            "gradients should flow back through the copy.",
        ),
    ),
    _rule(
        "data-assign",
        "RuntimeError",
        r"Attempted to call `variable\.set_data\(tensor\)`, but `variable` and `tensor` "
        r"have incompatible tensor type",
        _template(
            "`.data` set to a tensor of another kind",
            "Assigning `.data` swaps in another tensor's contents, which is only allowed "
            "when both are the same kind of tensor (device and layout); here they differ.",
            "Convert the new value first (`w.data = new.to(w.device)`), or better, copy "
            "the values in without autograd: `with torch.no_grad(): w.copy_(new)`.",
        ),
    ),
    # -- writing into existing tensors -----------------------------------------
    _rule(
        "out-requires-grad",
        "RuntimeError",
        r"(?P<op>[\w.]{0,100})\(\): functions with out=\.\.\. arguments don't support "
        r"automatic differentiation, but one of the arguments requires grad",
        _out_requires_grad,
    ),
    _rule(
        "inplace-dtype",
        "RuntimeError",
        r"result type (?P<result>\w{1,100}) can't be cast to the desired output type "
        r"(?P<out>\w{1,100})",
        _template(
            "An in-place result that does not fit the tensor's dtype",
            "An in-place operation (or one with `out=`) writes its result into an "
            "existing tensor, which keeps its dtype, {out}; the result has dtype {result}, "
            "which cannot be stored there without losing information (e.g. fractions in "
            "an integer tensor).",
            "Use the out-of-place form, which picks a suitable dtype (`x = x * 0.5` "
            "instead of `x *= 0.5`), or convert the tensor first (`x = x.float()`).",
        ),
    ),
    _rule(
        "memory-overlap",
        "RuntimeError",
        r"unsupported operation: more than one element of the written-to tensor refers to "
        r"a single memory location",
        _template(
            "Writing into a tensor whose elements share memory",
            "Several elements of the tensor being written point at the same memory "
            "location (e.g. it was made by `expand()`, which repeats a value with stride 0 "
            "instead of copying it), so an in-place write would be ambiguous.",
            "Give it memory of its own first: `x = x.clone()` (or build it with `repeat()` "
            "instead of `expand()`), then change it.",
        ),
    ),
    _rule(
        "memory-overlap",
        "RuntimeError",
        r"unsupported operation: some elements of the input tensor and the written-to "
        r"tensor refer to a single memory location",
        _template(
            "Input and output of an in-place write overlap",
            "The input and the tensor being written share part of the same memory (e.g. "
            "`a[1:]` and `a[:-1]` of one tensor), so writing would overwrite input values "
            "before they are read.",
            "Clone the input first: `a[1:].copy_(a[:-1].clone())`.",
        ),
    ),
    _rule(
        "resize-requires-grad",
        "RuntimeError",
        r"cannot resize variables that require grad",
        _template(
            "resize_() on a tensor that requires grad",
            "resize_() changes a tensor's shape and memory in place, which autograd cannot "
            "record, so it is refused for a tensor that requires grad, even under "
            "`torch.no_grad()`.",
            "Create a new tensor of the size you need instead, e.g. "
            "`w = torch.zeros(4, requires_grad=True)`, or `torch.cat([w, extra])` to keep "
            "gradients flowing.",
        ),
    ),
    _rule(
        "storage-not-resizable",
        "RuntimeError",
        r"Trying to resize storage that is not resizable",
        _template(
            "Growing a tensor whose memory belongs to someone else",
            "This tensor's memory is not its own to grow: typically it is a NumPy array's "
            "memory shared through torch.from_numpy(), or another fixed buffer.",
            "Work on a copy that owns its memory (`t = t.clone()` before `resize_()`), or "
            "create a new tensor of the size you need.",
        ),
    ),
    # -- views and shapes --------------------------------------------------------
    _rule(
        "view-stride",
        "RuntimeError",
        r"view size is not compatible with input tensor's size and stride",
        _template(
            "view() on a tensor whose memory layout does not allow it",
            "view() never copies: it reads the same memory with a new shape and new "
            "strides (the steps between elements), which is impossible here because the "
            "elements are not laid out in the needed order (e.g. after `t()`, "
            "`transpose()`, `permute()` or a stepped slice).",
            "Use `x.reshape(...)`, which makes a view when it can and a copy when it must, "
            "or `x.contiguous().view(...)`, which first copies into row-major order.",
        ),
    ),
    _rule(
        "view-shape",
        "RuntimeError",
        r"shape '(?P<shape>\[[^\]]{0,200}\])' is invalid for input of size "
        r"(?P<numel>\d{1,19})",
        _view_shape,
    ),
    _rule(
        "view-shape",
        "RuntimeError",
        r"^only one dimension can be inferred",
        _template(
            "More than one -1 in a new shape",
            "In a shape for view() or reshape(), -1 means 'work this size out from the "
            "others', which is only possible for one of them; this shape has several.",
            "Give all sizes but one, e.g. `x.view(2, -1)`.",
        ),
    ),
    _rule(
        "view-dtype",
        "RuntimeError",
        r"self\.size\(-1\) must be divisible by (?P<ratio>\d{1,9}) to view (?P<src>\w{1,100}) "
        r"as (?P<dst>\w{1,100}) \(different element sizes\), but got (?P<got>\d{1,19})",
        _template(
            "Viewing a tensor as a wider dtype",
            "Viewing {src} as {dst} reads the same bytes as elements of a different size, "
            "so the last dimension must divide evenly: it has {got} elements, which is not "
            "divisible by {ratio}.",
            "Make the last dimension a multiple of {ratio} (slice or pad it), or convert "
            "values instead of reinterpreting bytes: `x.to(dtype)`.",
        ),
    ),
    _rule(
        "view-dtype",
        "RuntimeError",
        r"self\.stride\(-1\) must be 1 to view (?P<src>\w{1,100}) as (?P<dst>\w{1,100}) "
        r"\(different element sizes\), but got (?P<got>\d{1,19})",
        _template(
            "Viewing a non-contiguous tensor as another dtype",
            "Viewing {src} as {dst} reads the same bytes as elements of a different size, "
            "which needs the elements of the last dimension to sit next to each other "
            "(stride 1); here that stride is {got}.",
            "Copy into row-major order first: `x.contiguous().view(dtype)`.",
        ),
    ),
    _rule(
        "shape-mismatch",
        "RuntimeError",
        r"The size of tensor a \((?P<a>\d{1,19})\) must match the size of tensor b "
        r"\((?P<b>\d{1,19})\) at non-singleton dimension (?P<dim>\d{1,9})",
        _template(
            "Shapes that do not broadcast",
            "Element-wise operations (and copy_()) line the two shapes up from the last "
            "dimension; at dimension {dim} one tensor has size {a} and the other {b}, and "
            "broadcasting can only stretch a dimension of size 1.",
            "Make the shapes agree, each dimension equal or 1: slice, reshape or add a "
            "size-1 dimension (`b.unsqueeze(0)`); print `.shape` of both to check.",
        ),
    ),
    _rule(
        "shape-mismatch",
        "RuntimeError",
        r"output with shape (?P<out>\[[^\]]{0,200}\]) doesn't match the broadcast shape "
        r"(?P<bcast>\[[^\]]{0,200}\])",
        _template(
            "An in-place result larger than the tensor",
            "An in-place operation writes its result into the existing tensor, whose "
            "shape is {out}, but broadcasting the inputs gives shape {bcast}, which does "
            "not fit.",
            "Use the out-of-place form, which can return a larger tensor (`x = x + y` "
            "instead of `x += y`), or make the other operand broadcast to {out}.",
        ),
    ),
    _rule(
        "shape-mismatch",
        "RuntimeError",
        r"The expanded size of the tensor \((?P<target>-?\d{1,19})\) must match the "
        r"existing size \((?P<existing>\d{1,19})\) at non-singleton dimension "
        r"(?P<dim>\d{1,9})\.\s+Target sizes: (?P<tsizes>\[[^\]]{0,200}\])\.\s+Tensor "
        r"sizes: (?P<sizes>\[[^\]]{0,200}\])",
        _template(
            "Stretching a dimension that is not of size 1",
            "A tensor of shape {sizes} cannot be stretched to {tsizes}: expand() (also used "
            "by copy_() and by `a[...] = b` to fit the source to the target) only stretches "
            "dimensions of size 1, and dimension {dim} has size {existing}, not {target}.",
            "Make the shapes match, put a size-1 dimension where values should repeat "
            "(`x.unsqueeze(...)`), or use `repeat()` for real copies; in `a[...] = b`, b "
            "must fit the selected part of a.",
        ),
    ),
    _rule(
        "shape-mismatch",
        "RuntimeError",
        r"expand\((?P<tensor>[^\n]{1,300}?), size=(?P<size>\[[^\]]{0,200}\])\): the number "
        r"of sizes provided \((?P<given>\d{1,9})\) must be greater or equal to the number "
        r"of dimensions in the tensor \((?P<ndim>\d{1,9})\)",
        _template(
            "expand() with too few sizes",
            "expand() was given {given} size(s), {size}, for a tensor with {ndim} "
            "dimensions ({tensor}); it can add new leading dimensions but never drop any.",
            "Give at least {ndim} sizes, using -1 to keep a dimension as it is (e.g. "
            "`x.expand(5, -1, -1)` adds a leading dimension of 5 to a 2-d tensor).",
        ),
    ),
    _rule(
        "shape-mismatch",
        "RuntimeError",
        r"mat1 and mat2 shapes cannot be multiplied \((?P<a>\d{1,19}x\d{1,19}) and "
        r"(?P<b>\d{1,19}x\d{1,19})\)",
        _matmul,
    ),
    _rule(
        "shape-mismatch",
        "RuntimeError",
        r"Sizes of tensors must match except in dimension (?P<dim>\d{1,9})\. Expected size "
        r"(?P<expected>\d{1,19}) but got size (?P<got>\d{1,19}) for tensor number "
        r"(?P<index>\d{1,9}) in the list",
        _template(
            "torch.cat() of tensors with different shapes",
            "torch.cat() joins tensors along dimension {dim}, so all their other "
            "dimensions must match; tensor number {index} has size {got} where {expected} "
            "was expected.",
            "Make the other dimensions agree (slice or pad), or join along the dimension "
            "where they differ (`dim=`).",
        ),
    ),
    _rule(
        "shape-mismatch",
        "RuntimeError",
        r"stack expects each tensor to be equal size, but got (?P<s1>\[[^\]]{0,200}\]) at "
        r"entry (?P<i>\d{1,9}) and (?P<s2>\[[^\]]{0,200}\]) at entry (?P<j>\d{1,9})",
        _template(
            "torch.stack() of tensors with different shapes",
            "torch.stack() puts tensors side by side along a new dimension, so they must "
            "all have the same shape; entry {i} has shape {s1} and entry {j} has {s2}.",
            "Make the shapes equal (slice or pad), or use `torch.cat()` to join along an "
            "existing dimension.",
        ),
    ),
    # -- tensors as Python values -----------------------------------------------
    _rule(
        "scalar-conversion",
        "RuntimeError",
        r"a Tensor with (?P<n>\d{1,19}) elements cannot be converted to Scalar",
        _template(
            "item() on a tensor with {n} elements",
            "item() (and `float()`, `int()`) turns a one-element tensor into a Python "
            "number, but this tensor has {n} elements.",
            "Reduce it first (`t.sum().item()`), pick one element (`t[0].item()`), or use "
            "`t.tolist()` to get them all.",
        ),
    ),
    _rule(
        "scalar-conversion",
        "RuntimeError",
        r"Boolean value of Tensor with more than one value is ambiguous",
        _template(
            "A tensor with several elements used as True/False",
            "`if`, `while`, `and`, `or` and `not` need a single True or False, but this "
            "tensor has more than one element, and it is unclear whether 'any' or 'all' "
            "is meant.",
            "Say which: `(t > 0).any()`, `(t > 0).all()`, or `torch.equal(a, b)` to compare "
            "whole tensors.",
        ),
    ),
    _rule(
        "scalar-conversion",
        "UserWarning",
        r"Converting a tensor with requires_grad=True to a scalar may lead to unexpected "
        r"behavior",
        _template(
            "A tensor that requires grad turned into a Python number",
            "A Python number has no autograd history, so anything computed from it gets "
            "no gradient back to this tensor.",
            "Write `t.detach().item()` (or `float(t.detach())`) when that is intended; keep "
            "the computation in tensors if gradients should flow.",
        ),
    ),
)


def _unique(items: Tuple[str, ...]) -> Tuple[str, ...]:
    return tuple(dict.fromkeys(items))


TOPICS: Tuple[str, ...] = _unique(tuple(rule.topic for rule in RULES))


def explain(type_name: str, message: str) -> Optional[Explanation]:
    """Match a PyTorch error by its class name and message; None when unknown.

    ``type_name`` may be qualified (``builtins.RuntimeError``); only its last
    part counts. The first rule whose class and pattern both match wins.
    """
    if not isinstance(type_name, str) or not isinstance(message, str):
        return None
    name = type_name.rsplit(".", 1)[-1]
    head = message[:_MAX_MESSAGE]
    for rule in RULES:
        if name not in rule.types:
            continue
        match = rule.pattern.search(head)
        if match is None:
            continue
        title, what, fix = rule.build(match.groupdict(default=""))
        return Explanation(title=title, what=what, fix=fix, topic=rule.topic)
    return None


__all__ = ["RULES", "Rule", "TOPICS", "explain"]
