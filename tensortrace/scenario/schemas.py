"""JSON Schemas: of scenario files (for editors) and of JSON traces (for consumers).

The scenario schema is written out here as the contract; the trace schema is
generated from the trace's records (``tensortrace.trace.schema``). Tests
validate real scenario files and real traces against them, and check that the
copies in ``docs/`` are current.
"""

from __future__ import annotations

from typing import Any, Dict

from .devices import DEVICE_PATTERN
from ..trace.schema import trace_schema  # noqa: F401 - re-exported: the trace's schema, generated

_CODE = {"type": "string", "minLength": 1, "description": "Python statements"}
_NAMES = {"type": "array", "items": {"type": "string"}}
_DECLARED = {
    "oneOf": [
        {"type": "string", "description": "exception or warning class name, e.g. RuntimeError"},
        {
            "type": "object",
            "properties": {
                "type": {"type": "string"},
                "match": {"type": "string", "description": "regex searched in the message"},
            },
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
                            {
                                "type": "object",
                                "additionalProperties": {
                                    "type": "array",
                                    "items": {"type": "string"},
                                },
                            },
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
            "setup": {
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
            },
            "show": _NAMES,
            "steps": {"type": "array", "items": step, "minItems": 1},
            "variants": {
                "type": "object",
                "propertyNames": {"not": {"enum": ["type", "match", "all"]}},
                "additionalProperties": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                },
                "minProperties": 1,
            },
        },
        "required": ["title", "steps"],
        "additionalProperties": False,
    }
