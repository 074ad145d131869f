"""JSON Schemas: of scenario files (for editors) and of JSON traces (for consumers).

Both are written out by hand as the contract; tests validate real scenario
files and real traces against them, and check that the copies in ``docs/``
are current.
"""

from __future__ import annotations

from typing import Any, Dict

from .devices import DEVICE_PATTERN
from .model import FORMAT_NAME, FORMAT_VERSION, READABLE_VERSIONS

_CODE = {"type": "string", "minLength": 1, "description": "Python statements"}
_NAMES = {"type": "array", "items": {"type": "string"}}
_DECLARED = {
    "oneOf": [
        {"type": "string", "description": "exception or warning class name, e.g. RuntimeError"},
        {
            "type": "object",
            "properties": {"type": {"type": "string"}, "match": {"type": "string", "description": "regex searched in the message"}},
            "required": ["type"],
            "additionalProperties": False,
        },
    ]
}


def scenario_schema() -> Dict[str, Any]:
    """The scenario file format, version 1."""
    declared_or_per_variant = {
        "anyOf": [
            _DECLARED,
            {
                "type": "object",
                "propertyNames": {"not": {"enum": ["type", "match"]}},
                "additionalProperties": _DECLARED,
                "description": "per variant name",
            },
        ]
    }
    step = {
        "oneOf": [
            {"type": "string", "description": "code of a step"},
            {
                "type": "object",
                "properties": {
                    "run": _CODE,
                    "note": {"type": "string", "description": "markdown shown with the step"},
                    "expect": {
                        "oneOf": [
                            {"type": "array", "items": {"type": "string"}},
                            {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
                        ],
                        "description": "Python expressions that must be true after the step",
                    },
                    "raises": declared_or_per_variant,
                    "warns": declared_or_per_variant,
                    "show": _NAMES,
                    "graph": {"oneOf": [_NAMES, {"type": "boolean"}]},
                },
                "required": ["run"],
                "additionalProperties": False,
            },
        ]
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://tensortrace.invalid/scenario-1.schema.json",
        "title": "tensortrace scenario (format version 1)",
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1},
            "description": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "seed": {"type": "integer"},
            "device": {"type": "string", "pattern": DEVICE_PATTERN},
            "setup": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
            "show": _NAMES,
            "steps": {"type": "array", "items": step, "minItems": 1},
            "variants": {
                "type": "object",
                "propertyNames": {"not": {"enum": ["type", "match", "all"]}},
                "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}},
                "minProperties": 1,
            },
        },
        "required": ["title", "steps"],
        "additionalProperties": False,
    }


def _nullable(schema: Dict[str, Any]) -> Dict[str, Any]:
    return {"oneOf": [{"type": "null"}, schema]}


def _obj(properties: Dict[str, Any], required: Any = None) -> Dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else list(required),
        "additionalProperties": False,
    }


_INT = {"type": "integer"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_NUMBER_OR_SPELLING = {"oneOf": [{"type": "number"}, {"enum": ["nan", "inf", "-inf"]}]}


def _d(schema: Dict[str, Any], description: str) -> Dict[str, Any]:
    """``schema`` with a description, which editors show as help."""
    return {**schema, "description": description}


def _list(items: Dict[str, Any]) -> Dict[str, Any]:
    return {"type": "array", "items": items}


def trace_schema() -> Dict[str, Any]:
    """The JSON trace format (``tensortrace run --format json``)."""
    values = _obj(
        {
            "kind": _d({"enum": ["exact", "summary", "unavailable"]}, "exact: every value in 'data'; summary: statistics in 'summary' (large tensors); unavailable: see 'reason'"),
            "data": {"description": "nested lists of numbers/booleans; NaN and infinities as strings, complex as strings"},
            "summary": _d(
                _nullable(
                    _obj(
                        {
                            "numel": _d(_INT, "number of elements"),
                            "min": _d(_nullable({"type": "number"}), "smallest finite element, or null when there is none"),
                            "max": _d(_nullable({"type": "number"}), "largest finite element, or null when there is none"),
                            "mean": _d(_nullable({"type": "number"}), "mean of the finite elements, or null"),
                            "std": _d(_nullable({"type": "number"}), "standard deviation of the finite elements, or null"),
                            "nan_count": _d(_INT, "number of NaN elements"),
                            "inf_count": _d(_INT, "number of infinite elements"),
                            "head": _d({"type": "array"}, "the first 8 elements of the flattened tensor"),
                        }
                    )
                ),
                "statistics of a large tensor, computed chunk by chunk without copying it (kind: summary)",
            ),
            "reason": _d(_nullable(_STR), "why the values could not be read (kind: unavailable), e.g. a meta tensor"),
        }
    )
    tensor = _obj(
        {
            "name": _d(_STR, "the name in the scenario: a, lin.weight, xs[0], d['k']"),
            "kind": _d({"enum": ["tensor", "parameter", "buffer", "ndarray"]}, "what the name holds; ndarray is a NumPy array"),
            "shape": _d(_list(_INT), "the size of each dimension"),
            "stride": _d(_list(_INT), "the stride of each dimension, in elements"),
            "dtype": _d(_STR, "the element type, e.g. torch.float32"),
            "device": _d(_STR, "where the data lives, e.g. cpu, cuda:0"),
            "storage": _d(_nullable({"type": "string", "pattern": r"^S[0-9]+$"}), "the storage label (S1, S2, ... in order of first appearance); same label, same memory"),
            "storage_ptr": _d(_nullable(_INT), "the storage's raw address; differs between runs"),
            "storage_nbytes": _d(_nullable(_INT), "the storage's size in bytes"),
            "storage_offset": _d(_INT, "where the tensor starts in its storage, in elements"),
            "data_ptr": _d(_nullable(_INT), "the tensor's own data address; differs between runs"),
            "version": _d(_nullable(_INT), "the version counter (_version); null for inference tensors and arrays"),
            "requires_grad": _d(_nullable(_BOOL), "whether autograd records operations on it"),
            "is_leaf": _d(_nullable(_BOOL), "whether it is a leaf of the autograd graph (its .grad is filled by backward)"),
            "retains_grad": _d(_nullable(_BOOL), "whether retain_grad() was called on this non-leaf"),
            "grad_fn": _d(_nullable(_STR), "the name of the autograd node that made it, e.g. CloneBackward0"),
            "grad": _d(_nullable({"$ref": "#/$defs/values"}), "the values of .grad, or null"),
            "is_view": _d(_BOOL, "whether it is a view of another tensor"),
            "base": _d(_nullable(_STR), "the name of the tensor it is a view of, when that is named"),
            "values": _d({"$ref": "#/$defs/values"}, "the tensor's values"),
            "same_as": _d(_nullable(_STR), "an earlier name bound to this very object (after b = a)"),
            "unavailable": _d(
                _list({"type": "array", "prefixItems": [_STR, _STR], "items": False, "minItems": 2, "maxItems": 2}),
                "[fact, reason] for each fact PyTorch refused to give (e.g. grad_fn of a view changed under no_grad); "
                "that fact's own field then holds a placeholder (null, [], 0 or false), never a value",
            ),
        }
    )
    tensor["required"] = [name for name in tensor["required"] if name != "unavailable"]  # traces before it lack it
    explanation = _obj(
        {
            "title": _d(_STR, "the error in a few words"),
            "what": _d(_STR, "what happened, in plain language"),
            "fix": _d(_STR, "what to change"),
            "topic": _d(_STR, "the topic to read about"),
        }
    )
    error = _obj(
        {
            "type": _d(_STR, "the exception's class name, e.g. RuntimeError"),
            "qualname": _d(_STR, "module.qualname of the class"),
            "message": _d(_STR, "the exception's message, as PyTorch gave it"),
            "line": _d(_nullable(_INT), "the line of the scenario file where it was raised"),
            "explanation": _d(_nullable(explanation), "a plain-language explanation, when the error is a known one"),
        }
    )
    warning = _obj(
        {
            "category": _d(_STR, "the warning's class name, e.g. UserWarning"),
            "message": _d(_STR, "the warning's message"),
            "line": _d(_nullable(_INT), "the line of the scenario file that emitted it"),
        }
    )
    expectation = _obj(
        {
            "expr": _d(_STR, "the expression as written in 'expect'"),
            "passed": _d(_BOOL, "whether it came out true"),
            "line": _d(_nullable(_INT), "its line in the scenario file"),
            "error": _d(_nullable(_STR), "the error the expression raised, or null"),
            "op": _d(_nullable(_STR), "for a failed single comparison, its operator, e.g. =="),
            "left": _d(_nullable(_STR), "for a failed single comparison, the repr of its left side"),
            "right": _d(_nullable(_STR), "for a failed single comparison, the repr of its right side"),
            "value": _d(_nullable(_STR), "for any other failed expression, the repr of its value"),
        }
    )
    declared = _nullable(
        _obj(
            {
                "type": _d(_STR, "the declared class name, e.g. RuntimeError or torch.OutOfMemoryError"),
                "match": _d(_nullable(_STR), "a regular expression searched in the message, or null"),
            }
        )
    )
    saved_tensor = _obj(
        {
            "attr": _d(_STR, "PyTorch's name for it on the node (its _saved_ attribute), e.g. self, other, result, tensors[0]"),
            "tensor": _d(_nullable(_STR), "the named tensor it is, or null"),
            "storage": _d(_nullable(_STR), "its storage label, or null when its storage has none"),
            "saved_version": _d(_nullable(_INT), "its version when it was saved (from PyTorch's unpack error when it moved); null when unknown or freed"),
            "version": _d(_nullable(_INT), "its version now; null when unknown or freed"),
            "stale": _d(_BOOL, "it changed since it was saved: backward through this node raises"),
            "freed": _d(_BOOL, "a backward freed it: backward through this node again raises"),
        }
    )
    prediction = _obj(
        {
            "kind": _d({"enum": ["backward_will_fail", "backward_freed", "backward_uses_changed_values"]},
                       "backward_will_fail: a saved tensor changed since it was saved; backward_freed: a backward already freed the saved tensors; "
                       "backward_uses_changed_values: a saved tensor's values changed without a version bump, so backward runs on the changed values"),
            "tensor": _d(_STR, "the named tensor whose backward will fail"),
            "node": _d(_nullable(_STR), "the node whose saved tensor is the cause, e.g. MulBackward0"),
            "saved": _d(_nullable(_STR), "that saved tensor's attribute, e.g. other"),
            "saved_tensor": _d(_nullable(_STR), "the named tensor it is, or null"),
            "saved_version": _d(_nullable(_INT), "the version it was saved at (backward_will_fail)"),
            "version": _d(_nullable(_INT), "its version now (backward_will_fail)"),
            "storage": _d(_nullable(_STR), "its storage label, or null"),
            "changed_at_step": _d(_nullable(_INT), "the step that changed it (first step after which its version passed the saved one) or that freed it; null when the trace does not show it"),
            "message": _d(_STR, "the prediction in one sentence"),
        }
    )
    node = _obj(
        {
            "id": _d(_STR, "the node's id: N1, N2, ... in walk order"),
            "name": _d(_STR, "the node's name, e.g. MulBackward0, AccumulateGrad"),
            "leaf": _d(_nullable(_STR), "for AccumulateGrad, the name of the leaf tensor it accumulates into"),
            "next": _d(_list(_STR), "the ids of the nodes its gradient flows to, in the order of next_functions"),
            "saved": _d(_list(saved_tensor), "each tensor the node saved for backward (empty in traces made before this was recorded)"),
        },
        required=["id", "name", "leaf", "next"],  # "saved" is newer: older traces lack it
    )
    graph = _obj(
        {
            "tensor": _d(_STR, "whose graph this is"),
            "root": _d(_nullable(_STR), "the id of the tensor's grad_fn node, or null when it has none"),
            "nodes": _d(_list(node), "every node once, however many paths reach it"),
            "truncated": _d(_BOOL, "the walk stopped at its node limit"),
        }
    )
    op = _obj(
        {
            "level": _d({"enum": ["call", "aten"]}, "call: a call the step's code made (TorchFunctionMode); aten: an ATen operation a call ran (TorchDispatchMode)"),
            "name": _d(_STR, "e.g. torch.Tensor.detach, torch.Tensor.data.__get__, aten::zero_"),
            "overload": _d(_nullable(_STR), "the ATen overload, e.g. Tensor for aten::add_.Tensor; null for the default overload and for calls"),
            "parent": _d(_nullable(_INT), "for an ATen operation, the index in 'ops' of the call it ran under; null at the top"),
            "reads": _d(_list(_STR), "storage labels of the tensor arguments it did not write"),
            "writes": _d(_list(_STR), "storage labels it wrote: arguments its schema marks Tensor(a!) (for a call, what its ATen operations wrote)"),
            "outputs": _d(_list(_nullable(_STR)), "the storage label of each tensor it returned (null: no storage); a label among reads/writes means no copy"),
            "tensors": _d(
                _obj(
                    {
                        "in": _d(_list(_nullable(_STR)), "the scenario name of each tensor argument (as the step began), null when unnamed"),
                        "out": _d(_list(_nullable(_STR)), "the scenario name of each result (as the step ended), null when unnamed"),
                    }
                ),
                "the tensors it took and gave, by scenario name",
            ),
            "version_bumps": _d(
                _list(
                    _obj(
                        {
                            "name": _d(_nullable(_STR), "the tensor's scenario name, null when unnamed"),
                            "from": _d(_nullable(_INT), "its version before the operation"),
                            "to": _d(_nullable(_INT), "its version after"),
                        }
                    )
                ),
                "each argument whose version counter the operation moved",
            ),
        }
    )
    flow_node = _obj(
        {
            "id": _d(_STR, "F1, F2, ... in walk order from the roots"),
            "name": _d(_STR, "the node's name, e.g. MulBackward0, AccumulateGrad"),
            "next": _d(_list(_nullable(_STR)), "the id of each next_functions node; null: an input that takes no gradient; empty string: a node beyond the recorded ones"),
            "grad_in": _d(_list(_nullable({"$ref": "#/$defs/values"})), "the gradients that arrived at the node (PyTorch's grad_outputs); null: none"),
            "grad_out": _d(_list(_nullable({"$ref": "#/$defs/values"})), "the gradient it sent along each 'next' edge (PyTorch's grad_inputs); null: nothing"),
            "ran": _d(_BOOL, "whether the backward call reached this node"),
            "leaf": _d(_nullable(_STR), "for AccumulateGrad, the name of the leaf whose .grad it adds to"),
            "leaf_grad_before": _d(_nullable({"$ref": "#/$defs/values"}), "for AccumulateGrad, the leaf's .grad before the call, null when None"),
            "leaf_grad_after": _d(_nullable({"$ref": "#/$defs/values"}), "for AccumulateGrad, the leaf's .grad after the call, null when None"),
        }
    )
    flow = _obj(
        {
            "call": _d(_STR, "the backward call, e.g. torch.Tensor.backward, torch.autograd.grad"),
            "roots": _d(_list(_STR), "ids of the nodes the call started from"),
            "nodes": _d(_list(flow_node), "the graph's nodes, at most 200"),
            "omitted": _d(_INT, "nodes of the graph beyond the recorded ones"),
            "notice": _d(_nullable(_STR), "why the flow is incomplete, or null"),
        }
    )
    step = _obj(
        {
            "index": _d({"type": "integer", "minimum": 0}, "the step's number; 0 is the setup"),
            "code": _d(_STR, "the step's code, as run"),
            "line": _d(_nullable(_INT), "where the step's code starts in the scenario file"),
            "note": _d(_nullable(_STR), "the step's note, in markdown"),
            "status": _d({"enum": ["ok", "raised", "timeout", "killed"]}, "ok, raised, timeout (ran past --timeout) or killed (the child was stopped by a limit)"),
            "error": _d(_nullable(error), "what the step raised, or null"),
            "warnings": _d(_list(warning), "each warning the step's own code emitted"),
            "stdout": _d(_STR, "what the step printed"),
            "expectations": _d(_list(expectation), "each 'expect' of the step, evaluated after it"),
            "raises": _d(declared, "the exception the scenario declared for this step, or null"),
            "warns": _d(declared, "the warning the scenario declared for this step, or null"),
            "raised_as_declared": _d(_BOOL, "the step raised what 'raises' declared: the class or one of its bases, and 'match'"),
            "warned_as_declared": _d(_BOOL, "some warning of the step matched what 'warns' declared"),
            "behaved": _d(_BOOL, "the step behaved as declared"),
            "failures": _d(_list(_STR), "each way the step did not behave as declared"),
            "shown": _d(_nullable(_list(_STR)), "the names the scenario shows at this step, or null for all"),
            "tensors": _d(_list({"$ref": "#/$defs/tensor"}), "every named tensor after the step"),
            "graphs": _d(_list(graph), "the autograd graphs the step asked for with 'graph'"),
            "predictions": _d(_list(prediction), "backwards through named tensors that will fail, read from the saved tensors after the step, before any backward runs"),
            "ops": _d(_list(op), "what the step ran, calls and ATen operations in order (at most 2000); empty under --ops none"),
            "ops_omitted": _d(_INT, "operations the step ran beyond the recorded ones and still counted: every call, but not the ATen operations of a call beyond them"),
            "flow": _d(_list(flow), "for each backward call the step made, the gradient through every node"),
        }
    )
    step["required"] = [name for name in step["required"] if name not in ("predictions", "ops", "ops_omitted", "flow")]  # older traces lack them
    storage = _obj(
        {
            "label": _d(_STR, "S1, S2, ... in order of first appearance; never reused for another allocation"),
            "nbytes": _d(_INT, "the storage's size in bytes"),
            "device": _d(_STR, "where the storage lives"),
            "ptr": _d(_INT, "the raw address; differs between runs"),
            "names": _d(_list(_STR), "every name seen on this storage"),
        }
    )
    trace = _obj(
        {
            "format": _d({"const": FORMAT_NAME}, "always tensortrace.trace"),
            "format_version": _d({"enum": list(READABLE_VERSIONS)}, f"the trace format's version; this tensortrace writes {FORMAT_VERSION}"),
            "scenario": _d(
                _obj(
                    {
                        "title": _d(_STR, "the scenario's title"),
                        "description": _d(_nullable(_STR), "the scenario's description, or null"),
                        "tags": _d(_list(_STR), "the scenario's tags"),
                        "source": _d(_nullable(_STR), "the scenario file, or null"),
                        "variant": _d(_nullable(_STR), "the variant this trace is of, or null"),
                    }
                ),
                "which scenario (and variant) ran",
            ),
            "environment": _d(
                _obj(
                    {
                        "tensortrace": _d(_STR, "the tensortrace version"),
                        "torch": _d(_STR, "the torch version"),
                        "python": _d(_STR, "the Python version"),
                        "device": _d(_STR, "the device the scenario ran on"),
                        "safe": _d(_BOOL, "safe mode (false under --trust)"),
                        "confinement": _d(
                            _nullable(
                                _obj(
                                    {
                                        "enforced": {"type": "array", "items": _STR, "description": "layers of the kernel's wall that were up, e.g. landlock-files, seccomp"},
                                        "missing": {"type": "array", "items": _STR, "description": "'layer: why', for each layer this machine could not enforce"},
                                    }
                                )
                            ),
                            "what the kernel enforced around the child (safe mode only)",
                        ),
                    },
                    required=("tensortrace", "torch", "python", "device", "safe"),
                ),
                "where the scenario ran",
            ),
            "setup": _d(_nullable({"$ref": "#/$defs/step"}), "the setup as a step with index 0, or null"),
            "steps": _d(_list({"$ref": "#/$defs/step"}), "one object per step, in order"),
            "storages": _d(_list(storage), "every storage allocation seen"),
            "notices": _d(_list(_STR), "remarks about the scenario, e.g. a name in 'show' that is never bound"),
            "aborted": _d(_nullable(_STR), "why the run stopped early, or null"),
            "passed": _d(_BOOL, "the scenario behaved as declared"),
        }
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://tensortrace.invalid/trace-{FORMAT_VERSION}.schema.json",
        "title": f"tensortrace trace (format version {FORMAT_VERSION})",
        "oneOf": [
            {"$ref": "#/$defs/trace"},
            _obj(
                {
                    "format": _d({"const": FORMAT_NAME}, "always tensortrace.trace"),
                    "format_version": _d({"enum": list(READABLE_VERSIONS)}, f"the format's version; this tensortrace writes {FORMAT_VERSION}"),
                    "traces": _d(_list({"$ref": "#/$defs/trace"}), "one trace per scenario or variant"),
                },
                required=("traces",),
            ),
        ],
        "$defs": {"trace": trace, "step": step, "tensor": tensor, "values": values},
    }
