"""The explanations of PyTorch errors, checked against errors that torch really raises.

Every case below provokes its error in the installed torch and passes the real
class name and message to ``explain``: when a torch release rewords a message,
the case fails here instead of the explanation silently disappearing.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensortrace.record.explain import RULES, TOPICS, explain, name_the_saved_tensor
from tensortrace.record.explain.rules import ExplanationDataError, load_rules, parse_rules
from tensortrace.trace import ErrorInfo, Explanation, TensorState

ROOT = Path(__file__).resolve().parents[2]
TORCH = tuple(int(part) for part in torch.__version__.split(".")[:2])


# --- provoking real errors ------------------------------------------------------


def raised(fn: Callable[[], object]) -> Tuple[str, str]:
    """Run ``fn``, which must raise; its exception's class name and message."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - any torch error is what we want
        return type(exc).__name__, str(exc)
    pytest.fail("the code was expected to raise, and did not")


def warned(fn: Callable[[], object]) -> Tuple[str, str]:
    """Run ``fn``, which must warn; the first warning's category name and message."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    assert caught, "the code was expected to warn, and did not"
    return caught[0].category.__name__, str(caught[0].message)


FROM_NUMPY_READ_ONLY = """
arr = np.ones(3)
arr.flags.writeable = False
torch.from_numpy(arr)
"""
FLOAT_OF_LEAF = "float(torch.ones(1, requires_grad=True))"
# torch 2.4 converts a tensor that requires grad to a number without a word
SCALAR_WARNING_SINCE = (2, 5)
# Each of these warnings torch gives only once per process, and each is a different one:
# one new process gives the first of each (one import of torch instead of one per case).
FRESH_PROCESS_CODES = (FROM_NUMPY_READ_ONLY, FLOAT_OF_LEAF)
_fresh_warnings: Dict[str, Tuple[str, str]] = {}


def warned_in_fresh_process(code: str) -> Tuple[str, str]:
    """For warnings torch gives only once per process: the first warning ``code`` gives
    in a new process (shared by every code of FRESH_PROCESS_CODES)."""
    if code not in _fresh_warnings:
        _fresh_warnings.update(zip(FRESH_PROCESS_CODES, _first_warnings(FRESH_PROCESS_CODES)))
    return _fresh_warnings[code]


def _first_warnings(codes: Sequence[str]) -> List[Tuple[str, str]]:
    blocks = "".join(
        "with warnings.catch_warnings(record=True) as caught:\n"
        '    warnings.simplefilter("always")\n'
        + textwrap.indent(textwrap.dedent(code).strip("\n") + "\n", "    ")
        + "firsts.append(caught and [caught[0].category.__name__, str(caught[0].message)])\n"
        for code in codes
    )
    script = "import json, warnings\nimport numpy as np\nimport torch\nfirsts = []\n" + blocks
    script += "print(json.dumps(firsts))\n"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [
        tuple(pair) if pair else None for pair in json.loads(done.stdout.strip().splitlines()[-1])
    ]


def leaf(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype, requires_grad=True)


def inference_tensor(*shape: int) -> torch.Tensor:
    with torch.inference_mode():
        return torch.ones(*shape)


# --- the triggers ---------------------------------------------------------------


def modify_saved_sigmoid_output():
    x = leaf(3) * 1
    y = x.sigmoid()  # sigmoid's backward needs its own output y
    y.sigmoid_()
    y.sum().backward()


def modify_saved_output_twice_double():
    x = leaf(3, dtype=torch.float64) * 1
    z = x * x  # mul's backward needs x
    x.add_(1)
    x.add_(1)
    z.sum().backward()


def modify_saved_leaf_through_detach():
    a = leaf(3)
    y = a * a  # mul's backward needs a
    a.detach()[0] = 5  # detach() shares a's version counter
    y.sum().backward()


def modify_saved_scalar():
    y = (torch.tensor(2.0, requires_grad=True) * 1).exp()
    y.add_(1)
    y.backward()


def backward_twice():
    y = (leaf(3) * leaf(3)).sum()
    y.backward()
    y.backward()


def saved_tensor_after_backward():
    y = leaf(3).exp()
    y.sum().backward()
    return y.grad_fn._saved_result


def hooks_on_freed_saved_tensor():
    y = leaf(3).exp()
    y.sum().backward()
    y.grad_fn._raw_saved_result.register_hooks(lambda t: t, lambda t: t)


def backward_without_grad():
    torch.ones(3).sum().backward()


def backward_of_result_made_under_no_grad():
    a = leaf(3)
    with torch.no_grad():
        y = (a * 2).sum()
    y.backward()


def backward_non_scalar():
    (leaf(3) * 2).backward()


def grad_of_non_scalar():
    a = leaf(3)
    torch.autograd.grad(a * 2, a)


def backward_complex_scalar():
    (leaf(3, dtype=torch.complex64) * 2).sum().backward()


def inplace_on_leaf():
    leaf(3).add_(1)


def zero_leaf():
    leaf(3).zero_()


def set_item_of_leaf():
    w = leaf(3)
    w[0] = 5


def inplace_through_view_of_leaf():
    w = leaf(3)
    w[:2].mul_(2)


def view_made_under_no_grad_modified():
    b = leaf(3) * 1
    with torch.no_grad():
        v = b[:2]
    v.mul_(2)


def base_of_no_grad_view_modified():
    b = leaf(3) * 1
    with torch.no_grad():
        v = b[:2]
    b.mul_(2)
    return v.grad_fn


def view_of_no_grad_view_modified():
    b = leaf(3) * 1
    with torch.no_grad():
        v = b[:2]
    v[:1].mul_(2)


def split_output_modified():
    b = leaf(4) * 1
    first, _ = b.split(2)
    first.mul_(2)


def unbind_output_modified():
    b = leaf(2, 2) * 1
    first, _ = b.unbind()
    first.add_(1)


def base_of_split_output_modified():
    b = leaf(4) * 1
    first, _ = b.split(2)
    b.mul_(2)
    return first.grad_fn


class PassThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


def custom_function_view_modified():
    PassThrough.apply(leaf(3) * 1).mul_(2)


def detach_view_in_place():
    b = leaf(3) * 1
    b[:2].detach_()


def inplace_on_inference_tensor():
    inference_tensor(3).add_(1)


def set_item_of_inference_tensor():
    t = inference_tensor(3)
    t[0] = 1


def inference_tensor_saved_for_backward():
    leaf(3).exp() * inference_tensor(3)


def requires_grad_on_inference_tensor():
    inference_tensor(3).requires_grad_()


def version_of_inference_tensor():
    return inference_tensor(3)._version


def view_made_in_inference_mode_modified():
    b = leaf(3) * 1
    with torch.inference_mode():
        v = b[:2]
    v.mul_(2)


def base_of_inference_view_modified():
    b = leaf(3) * 1
    with torch.inference_mode():
        v = b[:2]
    b.mul_(2)
    return v.grad_fn


def requires_grad_off_on_non_leaf():
    (leaf(3) * 2).requires_grad_(False)


def requires_grad_attribute_on_non_leaf():
    b = leaf(3) * 2
    b.requires_grad = False


def requires_grad_on_int_tensor():
    torch.tensor([1, 2, 3], requires_grad=True)


def requires_grad_method_on_int_tensor():
    torch.arange(3).requires_grad_()


def requires_grad_attribute_on_int_tensor():
    t = torch.tensor([1, 2, 3])
    t.requires_grad = True


def data_set_to_int_tensor():
    leaf(3).data = torch.ones(3, dtype=torch.long)


def retain_grad_without_grad():
    torch.ones(3).retain_grad()


def hook_without_grad():
    torch.ones(3).register_hook(lambda g: g)


def grad_of_non_leaf():
    b = leaf(3) * 2
    b.sum().backward()
    return b.grad


def grad_for_unused_input():
    a, unused = leaf(3), leaf(2)
    torch.autograd.grad((a * 2).sum(), [a, unused])


def grad_for_input_without_grad():
    a = leaf(3)
    torch.autograd.grad((a * 2).sum(), [torch.ones(3)])


def backward_with_gradient_of_wrong_shape():
    (leaf(3) * 2).backward(torch.ones(4))


def assign_grad_of_wrong_size():
    leaf(3).grad = torch.ones(4)


def assign_grad_of_wrong_dtype():
    leaf(3).grad = torch.ones(3, dtype=torch.float64)


def numpy_of_leaf():
    leaf(3).numpy()


def numpy_of_non_leaf():
    (leaf(3) * 2).numpy()


def asarray_of_leaf():
    np.asarray(leaf(3))


def apply_on_leaf():
    leaf(3).apply_(lambda v: v)


def numpy_of_conj():
    torch.ones(3, dtype=torch.complex64).conj().numpy()


def numpy_of_neg_view():
    torch.ones(3, dtype=torch.complex64).conj().imag.numpy()


def numpy_of_meta():
    torch.ones(3, device="meta").numpy()


def numpy_of_sparse():
    torch.ones(3).to_sparse().numpy()


def numpy_of_bfloat16():
    torch.ones(3, dtype=torch.bfloat16).numpy()


def from_numpy_reversed():
    torch.from_numpy(np.arange(5.0)[::-1])


def from_numpy_objects():
    torch.from_numpy(np.array([[1], [1, 2]], dtype=object))


def from_numpy_float128():
    torch.from_numpy(np.ones(3, dtype=np.longdouble))


def from_numpy_list():
    torch.from_numpy([1, 2])


def from_numpy_big_endian():
    torch.from_numpy(np.ones(3, dtype=">f4"))


def tensor_of_tensor():
    torch.tensor(torch.ones(3))


def deepcopy_non_leaf():
    copy.deepcopy(leaf(3) * 2)


def data_set_to_other_device():
    leaf(3).data = torch.ones(3, device="meta")


def add_with_out_and_grad():
    torch.add(leaf(3), 1, out=torch.empty(3))


def exp_with_out_and_grad():
    torch.exp(leaf(3), out=torch.empty(3))


def float_into_long_in_place():
    t = torch.ones(3, dtype=torch.long)
    t *= 0.5


def inplace_on_expanded():
    torch.ones(1).expand(3).add_(1)


def copy_into_expanded():
    torch.ones(1).expand(3).copy_(torch.arange(3.0))


def overlapping_input_and_output():
    a = torch.arange(4.0)
    torch.add(a[1:], 1, out=a[:-1])


def resize_leaf():
    leaf(3).resize_(4)


def resize_leaf_under_no_grad():
    w = leaf(3)
    with torch.no_grad():
        w.resize_(4)


def resize_numpy_memory():
    torch.from_numpy(np.ones(3)).resize_(100)


def view_of_transpose():
    torch.ones(3, 4).t().view(12)


def view_with_wrong_count():
    torch.ones(3, 4).view(5)


def reshape_with_wrong_count():
    torch.ones(2, 3).reshape(-1, 4)


def view_with_two_inferred():
    torch.ones(2, 3).view(-1, -1)


def view_as_wider_dtype():
    torch.ones(3).view(torch.float64)


def view_transposed_as_narrower_dtype():
    torch.ones(3, 4).t().view(torch.int16)


def add_mismatched():
    torch.ones(3) + torch.ones(4)


def copy_mismatched():
    torch.ones(3).copy_(torch.ones(4))


def add_in_place_broadcast_larger():
    torch.ones(3).add_(torch.ones(2, 3))


def expand_non_singleton():
    torch.ones(3).expand(4)


def set_slice_mismatched():
    a = torch.ones(3)
    a[:] = torch.ones(4)


def expand_too_few_sizes():
    torch.ones(2, 3).expand(3)


def matmul_mismatched():
    torch.ones(2, 3) @ torch.ones(2, 3)


def cat_mismatched():
    torch.cat([torch.ones(2, 3), torch.ones(2, 4)])


def stack_mismatched():
    torch.stack([torch.ones(3), torch.ones(4)])


def item_of_three():
    torch.ones(3).item()


def if_on_tensor():
    return bool(torch.ones(3))


# --- the cases ------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    provoke: Callable[[], Tuple[str, str]]
    topic: str
    details: Tuple[str, ...] = ()  # captured facts the explanation must mention
    # the first torch release that raises or warns it (an earlier one has nothing to explain)
    since: Tuple[int, int] = (2, 0)
    rule: str = ""  # with ``since``: the entry only that torch reaches

    def applies(self) -> bool:
        return TORCH >= self.since


def import_missing_module():
    import tensortrace_absent_module  # noqa: F401


def err(fn):
    return lambda: raised(fn)


def warn(fn):
    return lambda: warned(fn)


CASES = (
    Case(
        "saved-output-of-sigmoid",
        err(modify_saved_sigmoid_output),
        "inplace-saved-tensor",
        ("[torch.FloatTensor [3]]", "output 0 of Sigmoid", "version 0", "version 1"),
    ),
    Case(
        "saved-tensor-changed-twice",
        err(modify_saved_output_twice_double),
        "inplace-saved-tensor",
        ("[torch.DoubleTensor [3]]", "output 0 of Add", "version 0", "version 2"),
    ),
    Case(
        "saved-leaf-changed-through-detach",
        err(modify_saved_leaf_through_detach),
        "inplace-saved-tensor",
        ("[torch.FloatTensor [3]]", "no grad_fn", "version 0", "version 1", "detach()"),
    ),
    Case(
        "saved-scalar",
        err(modify_saved_scalar),
        "inplace-saved-tensor",
        ("[torch.FloatTensor []] (a single number)", "output 0 of Exp"),
    ),
    Case("backward-twice", err(backward_twice), "backward-twice", ("retain_graph=True",)),
    Case(
        "saved-tensor-read-after-backward",
        err(saved_tensor_after_backward),
        "backward-twice",
        ("retain_graph=True",),
    ),
    Case(
        "hooks-on-freed-saved-tensor",
        err(hooks_on_freed_saved_tensor),
        "backward-twice",
        ("retain_graph=True",),
    ),
    Case("backward-without-grad", err(backward_without_grad), "no-grad-fn", ("Element 0",)),
    Case(
        "backward-of-no-grad-result",
        err(backward_of_result_made_under_no_grad),
        "no-grad-fn",
        ("Element 0", "torch.no_grad()"),
    ),
    Case(
        "backward-non-scalar",
        err(backward_non_scalar),
        "non-scalar-backward",
        (".sum().backward()", "torch.ones_like(out)"),
    ),
    Case(
        "grad-of-non-scalar",
        err(grad_of_non_scalar),
        "non-scalar-backward",
        ("grad_outputs=torch.ones_like(out)",),
    ),
    Case(
        "backward-complex",
        err(backward_complex_scalar),
        "non-scalar-backward",
        ("torch.complex64",),
    ),
    Case("inplace-on-leaf", err(inplace_on_leaf), "inplace-leaf", ("torch.no_grad()",)),
    Case("zero-leaf", err(zero_leaf), "inplace-leaf", ("torch.no_grad()",)),
    Case("set-item-of-leaf", err(set_item_of_leaf), "inplace-view", ("torch.no_grad()",)),
    Case(
        "inplace-through-view-of-leaf",
        err(inplace_through_view_of_leaf),
        "inplace-view",
        ("view of a leaf",),
    ),
    Case(
        "no-grad-view-modified",
        err(view_made_under_no_grad_modified),
        "inplace-view",
        ("torch.no_grad()", "it is now being changed in place"),
    ),
    Case(
        "base-of-no-grad-view-modified",
        err(base_of_no_grad_view_modified),
        "inplace-view",
        ("its base",),
    ),
    Case(
        "view-of-no-grad-view-modified",
        err(view_of_no_grad_view_modified),
        "inplace-view",
        ("Output 0 of Slice", "view of a view"),
    ),
    Case(
        "split-output-modified",
        err(split_output_modified),
        "inplace-view",
        ("Output 0 of Split", "x = x.clone()"),
    ),
    Case(
        "unbind-output-modified",
        err(unbind_output_modified),
        "inplace-view",
        ("Output 0 of Unbind",),
    ),
    Case(
        "base-of-split-output-modified",
        err(base_of_split_output_modified),
        "inplace-view",
        ("Output 0 of Split", "its base"),
    ),
    Case(
        "custom-function-view-modified",
        err(custom_function_view_modified),
        "inplace-view",
        ("Output 0 of PassThrough", "PassThrough.apply(x).clone()"),
    ),
    Case("detach-view", err(detach_view_in_place), "detach-view", ("v = v.detach()",)),
    Case(
        "inplace-on-inference-tensor",
        err(inplace_on_inference_tensor),
        "inference-mode",
        ("t.clone()", "version counter"),
    ),
    Case(
        "set-item-of-inference-tensor",
        err(set_item_of_inference_tensor),
        "inference-mode",
        ("t.clone()",),
    ),
    Case(
        "inference-tensor-saved",
        err(inference_tensor_saved_for_backward),
        "inference-mode",
        ("save it for backward", "torch.no_grad()"),
    ),
    Case(
        "requires-grad-on-inference-tensor",
        err(requires_grad_on_inference_tensor),
        "inference-mode",
        ("t.clone().requires_grad_()",),
    ),
    Case(
        "version-of-inference-tensor",
        err(version_of_inference_tensor),
        "inference-mode",
        ("._version",),
    ),
    Case(
        "inference-view-modified",
        err(view_made_in_inference_mode_modified),
        "inference-mode",
        ("torch.inference_mode()", "it is now being changed"),
    ),
    Case(
        "base-of-inference-view-modified",
        err(base_of_inference_view_modified),
        "inference-mode",
        ("its base",),
    ),
    Case(
        "requires-grad-off-on-non-leaf",
        err(requires_grad_off_on_non_leaf),
        "requires-grad-non-leaf",
        ("y.detach()", "retain_grad()"),
    ),
    Case(
        "requires-grad-attribute-on-non-leaf",
        err(requires_grad_attribute_on_non_leaf),
        "requires-grad-non-leaf",
    ),
    Case(
        "requires-grad-on-int-tensor",
        err(requires_grad_on_int_tensor),
        "requires-grad-dtype",
        ("int64", "torch.tensor([1., 2., 3.], requires_grad=True)"),
    ),
    Case(
        "requires-grad-method-on-int-tensor",
        err(requires_grad_method_on_int_tensor),
        "requires-grad-dtype",
    ),
    Case(
        "requires-grad-attribute-on-int-tensor",
        err(requires_grad_attribute_on_int_tensor),
        "requires-grad-dtype",
    ),
    Case(
        "data-set-to-int-tensor",
        err(data_set_to_int_tensor),
        "requires-grad-dtype",
        ("w.copy_(new)",),
    ),
    Case(
        "retain-grad-without-grad",
        err(retain_grad_without_grad),
        "requires-grad-false",
        ("retain_grad()",),
    ),
    Case(
        "hook-without-grad",
        err(hook_without_grad),
        "requires-grad-false",
        ("register_hook()",),
    ),
    Case(
        "grad-of-non-leaf",
        warn(grad_of_non_leaf),
        "non-leaf-grad",
        ("y.retain_grad()",),
    ),
    Case(
        "grad-for-unused-input",
        err(grad_for_unused_input),
        "autograd-grad-inputs",
        ("allow_unused=True",),
    ),
    Case(
        "grad-for-input-without-grad",
        err(grad_for_input_without_grad),
        "autograd-grad-inputs",
        ("requires_grad=True",),
    ),
    Case(
        "gradient-of-wrong-shape",
        err(backward_with_gradient_of_wrong_shape),
        "grad-mismatch",
        ("torch.Size([4])", "torch.Size([3])", "output 0"),
    ),
    Case(
        "assign-grad-of-wrong-size",
        err(assign_grad_of_wrong_size),
        "grad-mismatch",
        ("size [4]", "size [3]"),
    ),
    Case(
        "assign-grad-of-wrong-dtype",
        err(assign_grad_of_wrong_dtype),
        "grad-mismatch",
        ("double", "Float"),
    ),
    Case(
        "numpy-of-leaf",
        err(numpy_of_leaf),
        "numpy-requires-grad",
        ("tensor.detach().numpy()", "shares memory"),
    ),
    Case(
        "numpy-of-non-leaf",
        err(numpy_of_non_leaf),
        "numpy-requires-grad",
        ("tensor.detach().numpy()",),
    ),
    Case(
        "asarray-of-leaf",
        err(asarray_of_leaf),
        "numpy-requires-grad",
        ("tensor.detach().numpy()",),
    ),
    Case(
        "apply-on-leaf",
        err(apply_on_leaf),
        "numpy-requires-grad",
        ("apply_()", "var.detach().apply_()"),
    ),
    Case(
        "numpy-of-conj",
        err(numpy_of_conj),
        "numpy-conversion",
        ("conjugate bit", "tensor.resolve_conj().numpy()"),
    ),
    Case(
        "numpy-of-neg-view",
        err(numpy_of_neg_view),
        "numpy-conversion",
        ("negative bit", "tensor.resolve_neg().numpy()"),
    ),
    Case("numpy-of-meta", err(numpy_of_meta), "numpy-conversion", ("meta",)),
    Case("numpy-of-sparse", err(numpy_of_sparse), "numpy-conversion", ("Sparse", "to_dense()")),
    Case("numpy-of-bfloat16", err(numpy_of_bfloat16), "numpy-conversion", ("BFloat16",)),
    Case(
        "from-numpy-reversed",
        err(from_numpy_reversed),
        "from-numpy",
        ("negative stride", "arr.copy()"),
    ),
    Case(
        "from-numpy-objects",
        err(from_numpy_objects),
        "from-numpy",
        ("numpy.object_", "float32"),
    ),
    Case(
        "from-numpy-float128",
        err(from_numpy_float128),
        "from-numpy",
        ("numpy.longdouble", "astype"),
    ),
    Case("from-numpy-list", err(from_numpy_list), "from-numpy", ("got a list",)),
    Case("from-numpy-big-endian", err(from_numpy_big_endian), "from-numpy", ("byte order",)),
    Case(
        "from-numpy-read-only",
        lambda: warned_in_fresh_process(FROM_NUMPY_READ_ONLY),
        "from-numpy",
        ("read-only", "arr.copy()"),
    ),
    Case(
        "tensor-of-tensor",
        warn(tensor_of_tensor),
        "copy-construct",
        ("t.detach().clone()",),
    ),
    Case(
        "deepcopy-non-leaf",
        err(deepcopy_non_leaf),
        "deepcopy-non-leaf",
        ("y.detach().clone()",),
    ),
    Case(
        "data-set-to-other-device",
        err(data_set_to_other_device),
        "data-assign",
        ("w.copy_(new)",),
    ),
    Case(
        "add-with-out",
        err(add_with_out_and_grad),
        "out-requires-grad",
        ("add()", "torch.add(...)"),
    ),
    Case(
        "exp-with-out",
        err(exp_with_out_and_grad),
        "out-requires-grad",
        ("exp()", "torch.exp(...)"),
    ),
    Case(
        "float-into-long-in-place",
        err(float_into_long_in_place),
        "inplace-dtype",
        ("Long", "Float"),
    ),
    Case("inplace-on-expanded", err(inplace_on_expanded), "memory-overlap", ("expand()",)),
    Case("copy-into-expanded", err(copy_into_expanded), "memory-overlap", ("x.clone()",)),
    Case(
        "overlapping-input-and-output",
        err(overlapping_input_and_output),
        "memory-overlap",
        ("clone()",),
    ),
    Case("resize-leaf", err(resize_leaf), "resize-requires-grad", ("resize_()",)),
    Case(
        "resize-leaf-under-no-grad",
        err(resize_leaf_under_no_grad),
        "resize-requires-grad",
        ("even under",),
    ),
    Case(
        "resize-numpy-memory",
        err(resize_numpy_memory),
        "storage-not-resizable",
        ("torch.from_numpy()", "t.clone()"),
    ),
    Case(
        "view-of-transpose",
        err(view_of_transpose),
        "view-stride",
        ("reshape(", "contiguous().view("),
    ),
    Case(
        "view-with-wrong-count",
        err(view_with_wrong_count),
        "view-shape",
        ("12 elements", "[5]", "holds 5"),
    ),
    Case(
        "reshape-with-wrong-count",
        err(reshape_with_wrong_count),
        "view-shape",
        ("6 elements", "[-1, 4]", "multiply to 4"),
    ),
    Case("view-with-two-inferred", err(view_with_two_inferred), "view-shape", ("-1",)),
    Case(
        "view-as-wider-dtype",
        err(view_as_wider_dtype),
        "view-dtype",
        ("Float as Double", "3 elements", "divisible by 2"),
    ),
    Case(
        "view-transposed-as-narrower-dtype",
        err(view_transposed_as_narrower_dtype),
        "view-dtype",
        ("Float as Short", "stride is 4", "contiguous()"),
    ),
    Case(
        "add-mismatched",
        err(add_mismatched),
        "shape-mismatch",
        ("dimension 0", "size 3", "other 4"),
    ),
    Case(
        "copy-mismatched",
        err(copy_mismatched),
        "shape-mismatch",
        ("size 3", "other 4"),
    ),
    Case(
        "in-place-broadcast-larger",
        err(add_in_place_broadcast_larger),
        "shape-mismatch",
        ("[3]", "[2, 3]", "x = x + y"),
    ),
    Case(
        "expand-non-singleton",
        err(expand_non_singleton),
        "shape-mismatch",
        ("shape [3]", "to [4]", "size 3"),
    ),
    Case(
        "set-slice-mismatched",
        err(set_slice_mismatched),
        "shape-mismatch",
        ("shape [4]", "to [3]", "a[...] = b"),
    ),
    Case(
        "expand-too-few-sizes",
        err(expand_too_few_sizes),
        "shape-mismatch",
        ("1 size(s)", "[3]", "2 dimensions"),
    ),
    Case(
        "matmul-mismatched",
        err(matmul_mismatched),
        "shape-mismatch",
        ("2x3 (3 columns)", "2x3 (2 rows)"),
    ),
    Case(
        "cat-mismatched",
        err(cat_mismatched),
        "shape-mismatch",
        ("dimension 0", "size 4", "3 was expected"),
    ),
    Case(
        "stack-mismatched",
        err(stack_mismatched),
        "shape-mismatch",
        ("entry 0 has shape [3]", "entry 1 has [4]"),
    ),
    Case("item-of-three", err(item_of_three), "scalar-conversion", ("3 elements",)),
    Case("if-on-tensor", err(if_on_tensor), "scalar-conversion", (".any()",)),
    Case(
        "float-of-leaf",
        lambda: warned_in_fresh_process(FLOAT_OF_LEAF),
        "scalar-conversion",
        ("t.detach().item()",),
        since=SCALAR_WARNING_SINCE,
        rule="scalar-of-requires-grad",
    ),
    Case(
        "import-of-a-missing-module",
        err(import_missing_module),
        "missing-module",
        ("needs tensortrace_absent_module: pip install tensortrace_absent_module",),
    ),
)


def _text(explanation: Explanation) -> str:
    return "\n".join((explanation.title, explanation.what, explanation.fix))


def _matching_rule(type_name: str, message: str) -> int:
    """The index of the rule ``explain`` uses for this error (-1: none)."""
    for index, rule in enumerate(RULES):
        if type_name in rule.types and rule.pattern.search(message):
            return index
    return -1


@pytest.fixture(scope="module")
def provoked():
    """Each case's real class name and message, provoked once (where this torch has it)."""
    return {case.id: case.provoke() for case in CASES if case.applies()}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_real_error_is_explained_with_its_details(case, provoked):
    if not case.applies():
        pytest.skip(f"torch {torch.__version__} does not raise or warn it")
    type_name, message = provoked[case.id]
    explanation = explain(type_name, message)
    assert explanation is not None, f"not recognised: {type_name}: {message}"
    assert explanation.topic == case.topic
    text = _text(explanation)
    for detail in case.details:
        assert detail in text, f"{detail!r} missing from:\n{text}"


def test_every_data_entry_is_reached_by_a_real_error(provoked):
    # The promise to contributors: one data entry, one test. An entry that no
    # case above reaches (first match wins, so an earlier entry may shadow it)
    # is named here.
    reached = {_matching_rule(*provoked[case.id]) for case in CASES if case.applies()}
    # an entry for what only a later torch raises is reached where that torch is installed
    later = {case.rule for case in CASES if not case.applies()}
    unreached = [
        f"{rule.id} (entry {index + 1}, topic {rule.topic}): {rule.pattern.pattern[:60]!r}"
        for index, rule in enumerate(RULES)
        if index not in reached and rule.id not in later
    ]
    assert not unreached, (
        "explanations.yaml entries that no real error in tests/record/test_explain.py reaches; "
        "add a Case that raises each:\n" + "\n".join(unreached)
    )


def test_every_topic_is_covered_by_a_case():
    assert set(TOPICS) == {case.topic for case in CASES}


def test_topics_are_unique_slugs():
    assert len(TOPICS) == len(set(TOPICS))
    for topic in TOPICS:
        assert topic and topic == topic.lower() and " " not in topic


def test_saved_tensor_explanation_names_tensor_node_and_versions(provoked):
    explanation = explain(*provoked["saved-output-of-sigmoid"])
    assert "[torch.FloatTensor [3]]" in explanation.what
    assert "output 0 of Sigmoid" in explanation.what
    assert "saved it at version 0" in explanation.what
    assert "now at version 1" in explanation.what
    assert "detach()" in explanation.what and "Views" in explanation.what
    assert (
        "the operation without its trailing `_`" in explanation.fix
        and "sigmoid" not in explanation.fix
    )
    assert "clone()" in explanation.fix and "after backward()" in explanation.fix
    # the message names no Python name, so the fix invents none
    assert "x" not in re.findall(r"\b\w+\b", explanation.fix)


def test_saved_tensor_message_of_earlier_releases_is_understood():
    # Earlier torch releases named the backward node (SigmoidBackward0) and
    # ended with another hint; the rule reads both forms.
    message = (
        "one of the variables needed for gradient computation has been modified by an "
        "inplace operation: [torch.FloatTensor [3]], which is output 0 of "
        "SigmoidBackward0, is at version 1; expected version 0 instead. Hint: the "
        "backtrace further above shows the operation that failed to compute its "
        "gradient. The variable in question was changed in there or anywhere later. "
        "Good luck!"
    )
    explanation = explain("RuntimeError", message)
    assert explanation.topic == "inplace-saved-tensor"
    assert "output 0 of SigmoidBackward0" in explanation.what
    assert "version 0" in explanation.what and "version 1" in explanation.what


def test_leaf_rule_does_not_take_the_view_of_a_leaf_message(provoked):
    assert explain(*provoked["inplace-through-view-of-leaf"]).topic == "inplace-view"
    assert explain(*provoked["inplace-on-leaf"]).topic == "inplace-leaf"


def test_explanations_are_short_and_plain(provoked):
    for case in CASES:
        if not case.applies():
            continue
        explanation = explain(*provoked[case.id])
        assert explanation.title and "\n" not in explanation.title
        assert 1 <= explanation.what.count(". ") + 1 <= 4, explanation.what
        assert explanation.fix.strip(), case.id
        assert not re.search(r"\{[a-z_]+\}", _text(explanation)), "unfilled placeholder"


def test_qualified_class_name_is_accepted(provoked):
    type_name, message = provoked["backward-twice"]
    assert explain(f"builtins.{type_name}", message).topic == "backward-twice"


def test_same_message_under_another_class_is_not_explained(provoked):
    _, message = provoked["backward-twice"]
    assert explain("ValueError", message) is None


def test_unknown_error_is_not_explained():
    assert explain("RuntimeError", "something else entirely went wrong") is None
    assert explain("KeyError", "'x'") is None
    assert explain("", "") is None


def test_an_unexplained_real_error_gives_none():
    type_name, message = raised(lambda: torch.ones(3)[5])
    assert explain(type_name, message) is None


_TYPES = sorted({name for rule in RULES for name in rule.types}) + ["KeyError", "Exception"]


@settings(max_examples=300, deadline=None)
@given(type_name=st.sampled_from(_TYPES) | st.text(max_size=30), message=st.text())
def test_explain_never_raises_on_arbitrary_text(type_name, message):
    result = explain(type_name, message)
    assert result is None or isinstance(result, Explanation)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_explain_never_raises_on_mangled_torch_messages(provoked, data):
    type_name, message = provoked[data.draw(st.sampled_from(sorted(provoked)))]
    cut = data.draw(st.integers(0, len(message)))
    insert = data.draw(st.text(max_size=20) | st.from_regex(r"[0-9\[\], -]{0,12}", fullmatch=True))
    mangled = message[:cut] + insert + message[cut:]
    # numbers replaced by arbitrary ones, as other shapes and versions would give
    number = data.draw(st.from_regex(r"-?[0-9]{1,25}", fullmatch=True))
    renumbered = re.sub(r"\d+", number, message)
    for text in (mangled, renumbered, message[:cut]):
        result = explain(type_name, text)
        assert result is None or isinstance(result, Explanation)


def test_explain_never_raises_on_non_strings():
    assert explain(None, None) is None  # type: ignore[arg-type]
    assert explain("RuntimeError", b"bytes") is None  # type: ignore[arg-type]


def test_long_messages_are_handled_quickly():
    message = "expand(" * 20000 + "x, size=[3]): " + "(" * 50000
    assert explain("RuntimeError", message) is None


def test_module_does_not_import_torch():
    code = (
        "import sys, tensortrace.record.explain; assert 'torch' not in sys.modules, 'torch"
        " imported'"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_importing_does_not_read_the_data_file():
    code = (
        "import tensortrace.record.explain as e; from tensortrace.record.explain.rules import"
        " load_rules; assert load_rules.cache_info().currsize == 0, 'read on import'; assert"
        " e.explain('RuntimeError', 'Trying to backward through the graph a second time'); assert"
        " load_rules.cache_info().currsize == 1"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_data_file_is_read_once():
    assert load_rules() is load_rules() is RULES


# --- the data file is checked when it is read ------------------------------------

_GOOD = {
    "id": "example",
    "topic": "example-topic",
    "types": ["RuntimeError"],
    "pattern": r"bad value (?P<value>\d+)",
    "title": "A bad value",
    "what": "The value {value} is bad.",
    "fix": "Use a good one.",
}


def test_a_well_formed_entry_becomes_a_rule():
    (rule,) = parse_rules([dict(_GOOD)])
    assert (rule.id, rule.topic, rule.types) == ("example", "example-topic", ("RuntimeError",))
    assert rule.build({"value": "7"}) == ("A bad value", "The value 7 is bad.", "Use a good one.")


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"colour": "red"}, "unknown key(s) colour"),
        ({"id": None}, "id must be a lower-case slug"),
        ({"topic": "Shape Mismatch"}, "topic must be a lower-case slug"),
        ({"types": "RuntimeError"}, "types must be a non-empty list"),
        ({"types": []}, "types must be a non-empty list"),
        ({"pattern": "(unclosed"}, "pattern does not compile"),
        (
            {"what": "The value {valu} is bad."},
            "what uses {valu}, which the pattern does not capture",
        ),
        ({"fix": "Use { a good one."}, "fix is not a valid template"),
        ({"title": ""}, "title must be non-empty text"),
        ({"builder": "matmul"}, "an entry with a builder has no title, what, fix"),
        (
            {"builder": "no_such_builder", "title": None, "what": None, "fix": None},
            "no builder 'no_such_builder'",
        ),
        ({"fix": None}, "an entry has title, what and fix, or a builder"),
    ],
)
def test_a_malformed_entry_is_refused_with_its_name(change, problem):
    entry = {**_GOOD, **change}
    entry = {key: value for key, value in entry.items() if value is not None or key == "id"}
    with pytest.raises(ExplanationDataError) as caught:
        parse_rules([dict(_GOOD, id="first"), entry])
    message = str(caught.value)
    assert "entry 2" in message and problem in message, message
    assert "explanations.yaml" in message


def test_a_missing_key_and_a_repeated_id_are_refused_with_the_entry():
    with pytest.raises(ExplanationDataError, match=r"entry 1 \(example\): missing pattern"):
        parse_rules([{k: v for k, v in _GOOD.items() if k != "pattern"}])
    with pytest.raises(
        ExplanationDataError, match=r"entry 2 \(example\): id 'example' is already used by entry 1"
    ):
        parse_rules([dict(_GOOD), dict(_GOOD)])
    with pytest.raises(ExplanationDataError, match="entry 1: an entry is a mapping"):
        parse_rules(["just a string"])
    with pytest.raises(ExplanationDataError, match="non-empty list"):
        parse_rules({"id": "example"})


# --- naming the saved tensor from the scenario's own names -------------------------


def _state(name: str, storage: str, version: int, grad_fn: str = None, shape=(3,)) -> TensorState:
    return TensorState(
        name=name,
        kind="tensor",
        shape=shape,
        stride=(1,),
        dtype="float32",
        device="cpu",
        storage=storage,
        storage_ptr=None,
        storage_nbytes=12,
        storage_offset=0,
        data_ptr=None,
        version=version,
        requires_grad=True,
        is_leaf=grad_fn is None,
        retains_grad=False,
        grad_fn=grad_fn,
        grad=None,
        is_view=False,
        base=None,
        values=None,
    )


def _error(type_name: str, message: str) -> ErrorInfo:
    return ErrorInfo(
        type=type_name,
        qualname=f"builtins.{type_name}",
        message=message,
        explanation=explain(type_name, message),
    )


def test_the_saved_tensor_is_named_when_identity_proves_it(provoked):
    error = _error(*provoked["saved-output-of-sigmoid"])
    tensors = [
        _state("x", "S1", 0),
        _state("y", "S2", 1, "SigmoidBackward0"),
        _state("k", "S3", 1, "ExpBackward0"),
    ]
    assert name_the_saved_tensor(error, tensors) == error  # no proof of identity: no name
    named = name_the_saved_tensor(error, tensors, proven=("y",))
    assert (
        named.explanation.what
        == error.explanation.what
        + " In this scenario that is `y` (storage S2), saved at version 0 and now at version 1."
    )
    assert named.message == error.message and named.explanation.title == error.explanation.title


def test_the_fix_for_a_named_saved_tensor_uses_that_name(provoked):
    error = _error(*provoked["saved-output-of-sigmoid"])
    tensors = [_state("x", "S1", 0), _state("z", "S2", 1, "SigmoidBackward0")]
    fix = name_the_saved_tensor(error, tensors, proven=("z",)).explanation.fix
    # the message does not say which operation wrote: the fix names none the code may not have used
    assert "`z = z.op(...)` instead of `z.op_(...)`" in fix and "sigmoid" not in fix
    assert "`z.clone()`" in fix and "after backward()" in fix
    assert "x" not in re.findall(r"\b\w+\b", fix)


def test_a_saved_tensor_no_name_refers_to_is_called_an_unnamed_intermediate(provoked):
    error = _error(*provoked["saved-output-of-sigmoid"])
    lookalike = [
        _state("y", "S2", 1, "SigmoidBackward0")
    ]  # same shape, version and creator, not proven
    named = name_the_saved_tensor(error, lookalike, proven=())
    assert "`y`" not in named.explanation.what
    assert named.explanation.what.startswith(
        error.explanation.what + " In this scenario that is an unnamed intermediate"
    )


def test_other_errors_are_left_as_they_are(provoked):
    tensors = [_state("y", "S2", 1, "SigmoidBackward0")]
    other = _error(*provoked["backward-twice"])
    assert name_the_saved_tensor(other, tensors, proven=("y",)) == other
    unexplained = ErrorInfo(type="KeyError", qualname="builtins.KeyError", message="'x'")
    assert name_the_saved_tensor(unexplained, tensors, proven=("y",)) == unexplained


@pytest.mark.parametrize(
    "numel, shape, divisor", [(3, "(-1, 4)", 3), (12, "(5, -1)", 2), (7, "(2, 2)", 7)]
)
def test_the_view_fix_suggests_a_shape_that_fits_the_count(numel, shape, divisor):
    """Raised for real: the suggested view(-1, d) must work on this tensor."""
    import torch

    x = torch.arange(float(numel))
    with pytest.raises(RuntimeError) as caught:
        x.view(*eval(shape))
    fix = explain("RuntimeError", str(caught.value)).fix
    assert f"`x.view(-1, {divisor})`" in fix
    assert x.view(-1, divisor).numel() == numel


def test_the_unused_input_is_named_where_pytorch_names_it(provoked):
    """torch 2.13 says which input ("at index 1"); earlier releases say "One of the
    differentiated Tensors". Both are explained, each with what its message gives."""
    message = provoked["grad-for-unused-input"][1]
    what = explain(*provoked["grad-for-unused-input"]).what
    found = re.search(r"at index (\d+)", message)
    assert (f"input {found.group(1)}" if found else "one of the inputs") in what
    older = (
        "One of the differentiated Tensors appears to not have been used in the graph. "
        "Set allow_unused=True if this is the desired behavior."
    )
    newer = older.replace(
        "One of the differentiated Tensors", "The differentiated Tensor at index 1"
    )
    assert "one of the inputs" in explain("RuntimeError", older).what
    assert "input 1" in explain("RuntimeError", newer).what


@pytest.mark.parametrize(
    "node, function", [("PassThroughBackward", "PassThrough"), ("PassThrough", "PassThrough")]
)
def test_both_wordings_of_a_view_error_name_the_function_to_call(node, function):
    """Before 2.13 PyTorch names the node (PassThroughBackward), from 2.13 the forward
    operation (PassThrough, PyTorch PR 180383): the fix calls the Function's class either way."""
    message = (
        f"Output 0 of {node} is a view and is being modified inplace. This view was created "
        "inside a custom Function (or because an input was returned as-is) and the autograd "
        "logic to handle view+inplace would override the custom backward associated with the "
        "custom Function, leading to incorrect gradients. This behavior is forbidden."
    )
    explanation = explain("RuntimeError", message)
    assert f"`y = {function}.apply(x).clone()`" in explanation.fix
    assert f"Output 0 of {node} is a view" in explanation.what


@pytest.mark.parametrize(
    "node, op",
    [
        ("UnbindBackward0", "Unbind"),
        ("SameBackward", "Same"),
        ("Unbind", "Unbind"),
        ("AddBackward12", "Add"),
        ("FooBackwardBackward", "FooBackward"),
        ("CopySlices", "CopySlices"),
        ("BackwardHook", "BackwardHook"),
    ],
)
def test_a_node_name_reads_as_pytorch_2_13_names_the_forward_operation(node, op):
    from tensortrace.record.explain.builders import forward_name

    assert forward_name(node) == op
