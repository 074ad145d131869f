"""The JSON Schema of trace documents, generated from the records' own declarations."""

from __future__ import annotations

from typing import Any, Dict

import msgspec

from .document import TraceDocument, TracesDocument
from .numbers import NumberTree
from .bounds import MAX_DATA_DEPTH, MAX_NAME
from .records import FORMAT_VERSION

_TREE = "#/$defs/NumberTree"

# What each field of each record is: the schema's descriptions (the fields themselves are
# the records').
NOTES: Dict[str, Dict[str, str]] = {
    "TraceDocument": {
        "scenario": "which scenario (and variant) ran",
        "environment": "where the scenario ran",
        "setup": "the setup as a step with index 0, or null",
        "steps": "one object per step, in order",
        "storages": "every storage allocation seen",
        "notices": "remarks about the scenario, e.g. a name in 'show' that is never bound",
        "aborted": "why the run stopped early, or null",
        "format": "always tensortrace.trace",
        "format_version": "the format's version; this tensortrace writes {version}",
        "passed": "the scenario behaved as declared",
    },
    "ScenarioInfo": {
        "title": "the scenario's title",
        "description": "the scenario's description, or null",
        "tags": "the scenario's tags",
        "source": "the scenario file, or null",
        "variant": "the variant this trace is of, or null",
    },
    "Environment": {
        "tensortrace": "the tensortrace version",
        "torch": "the torch version",
        "python": "the Python version",
        "device": "the device the scenario ran on",
        "safe": "safe mode (false under --trust)",
        "confinement": "what the kernel enforced around the child (safe mode only)",
    },
    "Confinement": {
        "enforced": "layers of the kernel's wall that were up, e.g. landlock-files, seccomp",
        "missing": "'layer: why', for each layer this machine could not enforce",
    },
    "Step": {
        "index": "the step's number; 0 is the setup",
        "code": "the step's code, as run",
        "line": "where the step's code starts in the scenario file",
        "note": "the step's note, in markdown",
        "none": (
            "the scenario's names bound to None after the step (bound, but to no tensor); "
            "empty in traces written before this was recorded"
        ),
        "cell": "the notebook cell the step came from, numbered from 1 (then line counts from the "
        "cell's top), or null when the scenario is not a notebook",
        "status": (
            "ok, raised, timeout (ran past --timeout) or killed (the child was stopped by a limit)"
        ),
        "error": "what the step raised, or null",
        "warnings": "each warning the step's own code emitted",
        "stdout": "what the step printed",
        "expectations": "each 'expect' of the step, evaluated after it",
        "raises": "the exception the scenario declared for this step, or null",
        "warns": "the warning the scenario declared for this step, or null",
        "raised_as_declared": (
            "the step raised what 'raises' declared: the class or one of its bases, and 'match'"
        ),
        "warned_as_declared": "some warning of the step matched what 'warns' declared",
        "behaved": "the step behaved as declared",
        "failures": "each way the step did not behave as declared",
        "shown": "the names the scenario shows at this step, or null for all",
        "tensors": "every named tensor after the step",
        "graphs": "the autograd graphs the step asked for with 'graph'",
        "predictions": (
            "backwards through named tensors that will fail, read from the saved tensors "
            "after the step, before any backward runs"
        ),
        "ops": (
            "what the step ran, calls and ATen operations in order (at most 2000); empty "
            "under --ops none"
        ),
        "ops_omitted": (
            "operations the step ran beyond the recorded ones and still counted: every call, "
            "but not the ATen operations of a call beyond them"
        ),
        "flow": "for each backward call the step made, the gradient through every node",
        "sites": (
            "the expressions of the code that ran calls inside them (opt.step(), model(x)), "
            "which 'site' of an operation indexes; empty in traces written before this was "
            "recorded"
        ),
        "loop": (
            "where each pass of the step's loop began, when the step's code holds one "
            "outermost for or while loop; null otherwise, and in traces written before this "
            "was recorded"
        ),
    },
    "CallSite": {
        "text": "the expression as the code wrote it, on one line",
        "line": "its first line in the scenario file (or the snooped file), or null",
    },
    "Loop": {
        "line": "the loop statement's line in the scenario file",
        "passes": "how many passes through the loop's body began",
        "marks": "where each of the first passes began (at most 1000)",
        "end": "where the code after the loop began, when the step holds some; else null",
    },
    "LoopPass": {
        "op": "the index in the step's 'ops' of the pass's first operation",
        "flow": "the index in the step's 'flow' of the pass's first backward call",
        "warning": "the index in the step's 'warnings' of the pass's first warning",
        "scalars": (
            "[name, value] of the scenario's one-element floating-point tensors on the CPU as "
            "the pass began (at most 8)"
        ),
    },
    "ErrorInfo": {
        "type": "the exception's class name, e.g. RuntimeError",
        "qualname": "module.qualname of the class",
        "message": "the exception's message, as PyTorch gave it",
        "line": "the line of the scenario file where it was raised",
        "explanation": "a plain-language explanation, when the error is a known one",
    },
    "Explanation": {
        "title": "the error in a few words",
        "what": "what happened, in plain language",
        "fix": "what to change",
        "topic": "the topic to read about",
    },
    "WarningInfo": {
        "category": "the warning's class name, e.g. UserWarning",
        "message": "the warning's message",
        "line": "the line of the scenario file that emitted it",
    },
    "ExpectationResult": {
        "expr": "the expression as written in 'expect'",
        "passed": "whether it came out true",
        "line": "its line in the scenario file",
        "error": "the error the expression raised, or null",
        "op": "for a failed single comparison, its operator, e.g. ==",
        "left": "for a failed single comparison, the repr of its left side",
        "right": "for a failed single comparison, the repr of its right side",
        "value": "for any other failed expression, the repr of its value",
    },
    "Declared": {
        "type": "the declared class name, e.g. RuntimeError or torch.OutOfMemoryError",
        "match": "a regular expression searched in the message, or null",
    },
    "TensorState": {
        "name": "the name in the scenario: a, lin.weight, xs[0], d['k']",
        "kind": "what the name holds; ndarray is a NumPy array",
        "shape": "the size of each dimension",
        "stride": "the stride of each dimension, in elements",
        "dtype": "the element type, e.g. torch.float32",
        "device": "where the data lives, e.g. cpu, cuda:0",
        "storage": (
            "the storage label (S1, S2, ... in order of first appearance); same label, same memory"
        ),
        "storage_ptr": "the storage's raw address; differs between runs",
        "storage_nbytes": "the storage's size in bytes",
        "storage_offset": "where the tensor starts in its storage, in elements",
        "data_ptr": "the tensor's own data address; differs between runs",
        "version": "the version counter (_version); null for inference tensors and arrays",
        "requires_grad": "whether autograd records operations on it",
        "is_leaf": "whether it is a leaf of the autograd graph (its .grad is filled by backward)",
        "retains_grad": "whether retain_grad() was called on this non-leaf",
        "grad_fn": "the name of the autograd node that made it, e.g. CloneBackward0",
        "grad": "the values of .grad, or null",
        "is_view": "whether it is a view of another tensor",
        "base": "the name of the tensor it is a view of, when that is named",
        "values": "the tensor's values",
        "same_as": "an earlier name bound to this very object (after b = a)",
        "unavailable": (
            "[fact, reason] for each fact PyTorch refused to give (e.g. grad_fn of a view "
            "changed under no_grad); that fact's own field then holds a placeholder (null, "
            "[], 0 or false), never a value"
        ),
    },
    "Values": {
        "kind": (
            "exact: every value in 'data'; summary: statistics in 'summary' (large tensors); "
            "unavailable: see 'reason'"
        ),
        "data": "the exact values (kind: exact): nested arrays, one level per dimension",
        "summary": (
            "statistics of a large tensor, computed chunk by chunk without copying it (kind: "
            "summary)"
        ),
        "reason": "why the values could not be read (kind: unavailable), e.g. a meta tensor",
    },
    "Summary": {
        "numel": "number of elements",
        "min": "smallest finite element, or null when there is none",
        "max": "largest finite element, or null when there is none",
        "mean": "mean of the finite elements, or null",
        "std": "standard deviation of the finite elements, or null",
        "nan_count": "number of NaN elements",
        "inf_count": "number of infinite elements",
        "head": "the first 8 elements of the flattened tensor",
    },
    "Graph": {
        "tensor": "whose graph this is",
        "root": "the id of the tensor's grad_fn node, or null when it has none",
        "nodes": "every node once, however many paths reach it",
        "truncated": "the walk stopped at its node limit",
    },
    "GraphNode": {
        "id": "the node's id: N1, N2, ... in walk order",
        "name": "the node's name, e.g. MulBackward0, AccumulateGrad",
        "leaf": "for AccumulateGrad, the name of the leaf tensor it accumulates into",
        "next": "the ids of the nodes its gradient flows to, in the order of next_functions",
        "saved": (
            "each tensor the node saved for backward (empty in traces made before this was "
            "recorded)"
        ),
    },
    "SavedTensor": {
        "attr": (
            "PyTorch's name for it on the node (its _saved_ attribute), e.g. self, other, "
            "result, tensors[0]"
        ),
        "tensor": "the named tensor it is, or null",
        "storage": "its storage label, or null when its storage has none",
        "saved_version": (
            "its version when it was saved (from PyTorch's unpack error when it moved); null "
            "when unknown or freed"
        ),
        "version": "its version now; null when unknown or freed",
        "stale": "it changed since it was saved: backward through this node raises",
        "freed": "a backward freed it: backward through this node again raises",
    },
    "Prediction": {
        "kind": (
            "backward_will_fail: a saved tensor changed since it was saved; backward_freed: a "
            "backward already freed the saved tensors; backward_uses_changed_values: backward "
            "will run, on values changed since they were saved; backward_unchecked: a tensor the "
            "node inside CopySlices may have saved changed since, so backward may fail"
        ),
        "tensor": "the named tensor whose backward will fail",
        "node": "the node whose saved tensor is the cause, e.g. MulBackward0",
        "saved": "that saved tensor's attribute, e.g. other",
        "saved_tensor": "the named tensor it is, or null",
        "saved_version": "the version it was saved at (backward_will_fail)",
        "version": "its version now (backward_will_fail)",
        "storage": "its storage label, or null",
        "changed_at_step": (
            "the step that changed it (first step after which its version passed the saved "
            "one) or that freed it; null when the trace does not show it"
        ),
        "message": "the prediction in one sentence",
    },
    "OpRecord": {
        "level": (
            "call: a call the step's code made (TorchFunctionMode); aten: an ATen operation a "
            "call ran (TorchDispatchMode)"
        ),
        "name": "e.g. torch.Tensor.detach, torch.Tensor.data.__get__, aten::zero_",
        "overload": (
            "the ATen overload, e.g. Tensor for aten::add_.Tensor; null for the default "
            "overload and for calls"
        ),
        "parent": (
            "for an ATen operation, the index in 'ops' of the call it ran under; null at the top"
        ),
        "reads": "storage labels of the tensor arguments it did not write",
        "writes": (
            "storage labels it wrote: arguments its schema marks Tensor(a!) (for a call, what "
            "its ATen operations wrote)"
        ),
        "outputs": (
            "the storage label of each tensor it returned (null: no storage); a label among "
            "reads/writes means no copy"
        ),
        "tensors": "the tensors it took and gave, by scenario name",
        "version_bumps": "each argument whose version counter the operation moved",
        "existed": (
            "per entry of outputs, whether that storage existed before the operation began "
            "(no copy); empty in traces written before this was recorded"
        ),
        "site": (
            "for a call made inside a function the code called (opt.step(), model(x)), the "
            "index in the step's 'sites' of that expression; null when the code made the call"
        ),
    },
    "OpTensors": {
        "in": "the scenario name of each tensor argument (as the step began), null when unnamed",
        "out": "the scenario name of each result (as the step ended), null when unnamed",
    },
    "VersionBump": {
        "name": "the tensor's scenario name, null when unnamed",
        "from": "its version before the operation",
        "to": "its version after",
    },
    "Flow": {
        "call": "the backward call, e.g. torch.Tensor.backward, torch.autograd.grad",
        "roots": "ids of the nodes the call started from",
        "nodes": "the graph's nodes, at most 200",
        "omitted": "nodes of the graph beyond the recorded ones",
        "notice": "why the flow is incomplete, or null",
    },
    "FlowNode": {
        "id": "F1, F2, ... in walk order from the roots",
        "name": "the node's name, e.g. MulBackward0, AccumulateGrad",
        "next": (
            "the id of each next_functions node; null: an input that takes no gradient; empty "
            "string: a node beyond the recorded ones"
        ),
        "grad_in": "the gradients that arrived at the node (PyTorch's grad_outputs); null: none",
        "grad_out": (
            "the gradient it sent along each 'next' edge (PyTorch's grad_inputs); null: nothing"
        ),
        "ran": "whether the backward call reached this node",
        "leaf": "for AccumulateGrad, the name of the leaf whose .grad it adds to",
        "leaf_grad_before": "for AccumulateGrad, the leaf's .grad before the call, null when None",
        "leaf_grad_after": "for AccumulateGrad, the leaf's .grad after the call, null when None",
    },
    "StorageInfo": {
        "label": "S1, S2, ... in order of first appearance; never reused for another allocation",
        "nbytes": "the storage's size in bytes",
        "device": "where the storage lives",
        "ptr": "the raw address; differs between runs",
        "names": "every name seen on this storage",
    },
    "TracesDocument": {
        "traces": "one trace per scenario or variant",
        "format": "always tensortrace.trace",
        "format_version": "the format's version; this tensortrace writes {version}",
    },
}


def _hook(kind: type) -> Dict[str, Any]:
    if kind is NumberTree:
        return {"$ref": _TREE}
    raise NotImplementedError(kind)


def trace_schema() -> Dict[str, Any]:
    """The trace document format (``tensortrace run --format json``): one trace, or several."""
    (one, several), defs = msgspec.json.schema_components(
        [TraceDocument, TracesDocument], schema_hook=_hook, ref_template="#/$defs/{name}"
    )
    defs["NumberTree"] = {
        "description": (
            "a tensor's exact values: a scalar, or arrays nested one level per dimension "
            f"(at most {MAX_DATA_DEPTH}); NaN and infinities as the strings nan, inf, -inf, "
            "complex numbers as strings such as (1+2j)"
        ),
        "anyOf": [
            {"type": "boolean"},
            {"type": "integer"},
            {"type": "number"},
            {"type": "string", "maxLength": MAX_NAME},
            {"type": "array", "items": {"$ref": _TREE}},
        ],
    }
    for name, notes in NOTES.items():
        name = "DocumentStep" if name == "Step" else name  # a step as the document holds it
        for key, text in notes.items():
            props = defs[name]["properties"]
            # a new dict: msgspec shares dicts
            props[key] = {**props[key], "description": text.format(version=FORMAT_VERSION)}
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://tensortrace.invalid/trace-{FORMAT_VERSION}.schema.json",
        "title": f"tensortrace trace (format version {FORMAT_VERSION})",
        "anyOf": [one, several],
        "$defs": defs,
    }
    return msgspec.json.decode(msgspec.json.encode(schema))  # as JSON has it: defaults () become []
