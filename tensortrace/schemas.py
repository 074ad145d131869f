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


def trace_schema() -> Dict[str, Any]:
    """The JSON trace format (``tensortrace run --format json``)."""
    values = _obj(
        {
            "kind": {"enum": ["exact", "summary", "unavailable"]},
            "data": {"description": "nested lists of numbers/booleans; NaN and infinities as strings, complex as strings"},
            "summary": _nullable(
                _obj(
                    {
                        "numel": _INT,
                        "min": _nullable({"type": "number"}),
                        "max": _nullable({"type": "number"}),
                        "mean": _nullable({"type": "number"}),
                        "std": _nullable({"type": "number"}),
                        "nan_count": _INT,
                        "inf_count": _INT,
                        "head": {"type": "array"},
                    }
                )
            ),
            "reason": _nullable(_STR),
        }
    )
    tensor = _obj(
        {
            "name": _STR,
            "kind": {"enum": ["tensor", "parameter", "buffer", "ndarray"]},
            "shape": {"type": "array", "items": _INT},
            "stride": {"type": "array", "items": _INT},
            "dtype": _STR,
            "device": _STR,
            "storage": _nullable({"type": "string", "pattern": r"^S[0-9]+$"}),
            "storage_ptr": _nullable(_INT),
            "storage_nbytes": _nullable(_INT),
            "storage_offset": _INT,
            "data_ptr": _nullable(_INT),
            "version": _nullable(_INT),
            "requires_grad": _nullable(_BOOL),
            "is_leaf": _nullable(_BOOL),
            "retains_grad": _nullable(_BOOL),
            "grad_fn": _nullable(_STR),
            "grad": _nullable({"$ref": "#/$defs/values"}),
            "is_view": _BOOL,
            "base": _nullable(_STR),
            "values": {"$ref": "#/$defs/values"},
            "same_as": _nullable(_STR),
        }
    )
    explanation = _obj({"title": _STR, "what": _STR, "fix": _STR, "topic": _STR})
    error = _obj(
        {
            "type": _STR,
            "qualname": _STR,
            "message": _STR,
            "line": _nullable(_INT),
            "explanation": _nullable(explanation),
        }
    )
    warning = _obj({"category": _STR, "message": _STR, "line": _nullable(_INT)})
    expectation = _obj(
        {
            "expr": _STR,
            "passed": _BOOL,
            "line": _nullable(_INT),
            "error": _nullable(_STR),
            "op": _nullable(_STR),
            "left": _nullable(_STR),
            "right": _nullable(_STR),
            "value": _nullable(_STR),
        }
    )
    declared = _nullable(_obj({"type": _STR, "match": _nullable(_STR)}))
    node = _obj({"id": _STR, "name": _STR, "leaf": _nullable(_STR), "next": {"type": "array", "items": _STR}})
    graph = _obj(
        {"tensor": _STR, "root": _nullable(_STR), "nodes": {"type": "array", "items": node}, "truncated": _BOOL}
    )
    step = _obj(
        {
            "index": {"type": "integer", "minimum": 0},
            "code": _STR,
            "line": _nullable(_INT),
            "note": _nullable(_STR),
            "status": {"enum": ["ok", "raised", "timeout", "killed"]},
            "error": _nullable(error),
            "warnings": {"type": "array", "items": warning},
            "stdout": _STR,
            "expectations": {"type": "array", "items": expectation},
            "raises": declared,
            "warns": declared,
            "raised_as_declared": _BOOL,
            "warned_as_declared": _BOOL,
            "behaved": _BOOL,
            "failures": {"type": "array", "items": _STR},
            "shown": _nullable({"type": "array", "items": _STR}),
            "tensors": {"type": "array", "items": {"$ref": "#/$defs/tensor"}},
            "graphs": {"type": "array", "items": graph},
        }
    )
    storage = _obj({"label": _STR, "nbytes": _INT, "device": _STR, "ptr": _INT, "names": {"type": "array", "items": _STR}})
    trace = _obj(
        {
            "format": {"const": FORMAT_NAME},
            "format_version": {"enum": list(READABLE_VERSIONS)},
            "scenario": _obj(
                {
                    "title": _STR,
                    "description": _nullable(_STR),
                    "tags": {"type": "array", "items": _STR},
                    "source": _nullable(_STR),
                    "variant": _nullable(_STR),
                }
            ),
            "environment": _obj(
                {
                    "tensortrace": _STR,
                    "torch": _STR,
                    "python": _STR,
                    "device": _STR,
                    "safe": _BOOL,
                    "confinement": _nullable(
                        _obj(
                            {
                                "enforced": {"type": "array", "items": _STR, "description": "layers of the kernel's wall that were up, e.g. landlock-files, seccomp"},
                                "missing": {"type": "array", "items": _STR, "description": "'layer: why', for each layer this machine could not enforce"},
                            }
                        )
                    ),
                },
                required=("tensortrace", "torch", "python", "device", "safe"),
            ),
            "setup": _nullable({"$ref": "#/$defs/step"}),
            "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}},
            "storages": {"type": "array", "items": storage},
            "notices": {"type": "array", "items": _STR},
            "aborted": _nullable(_STR),
            "passed": _BOOL,
        }
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://tensortrace.invalid/trace-{FORMAT_VERSION}.schema.json",
        "title": f"tensortrace trace (format version {FORMAT_VERSION})",
        "oneOf": [
            {"$ref": "#/$defs/trace"},
            _obj({"traces": {"type": "array", "items": {"$ref": "#/$defs/trace"}}}),
        ],
        "$defs": {"trace": trace, "step": step, "tensor": tensor, "values": values},
    }
