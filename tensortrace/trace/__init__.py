"""The records of a trace, typed and frozen, their one JSON form, and the events of a run.

Pure data: this package imports nothing else of tensortrace, never torch or
rich. ``records`` declares every record once; ``numbers`` spells what JSON
cannot hold; ``document`` reads and writes trace documents; ``wire`` is the
events and their encoding on the pipe from a run's child; ``schema``
generates the JSON Schema from the declarations; ``validate`` turns any
violation into one ``InvalidRecord`` naming the field.
"""

from .document import (
    RECORDS,
    Trace,
    record_from_dict,
    record_to_dict,
    step_from_dict,
    step_to_dict,
)
from .numbers import decode_number, encode_number_tree, freeze
from .records import (
    CONFINEMENT_ESSENTIAL,
    CONFINEMENT_EXTRA,
    FORMAT_NAME,
    FORMAT_VERSION,
    READABLE_VERSIONS,
    Confinement,
    Declared,
    Environment,
    ErrorInfo,
    ExpectationResult,
    Explanation,
    Flow,
    FlowNode,
    Graph,
    GraphNode,
    OpRecord,
    OpTensors,
    Prediction,
    SavedTensor,
    ScenarioInfo,
    Step,
    StorageInfo,
    Summary,
    TensorState,
    Values,
    VersionBump,
    WarningInfo,
    evolve,
    graph_nodes,
    node_ids,
)
from .validate import InvalidRecord

__all__ = [
    "CONFINEMENT_ESSENTIAL",
    "CONFINEMENT_EXTRA",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "RECORDS",
    "Confinement",
    "Declared",
    "Environment",
    "ErrorInfo",
    "ExpectationResult",
    "Explanation",
    "Flow",
    "FlowNode",
    "Graph",
    "GraphNode",
    "InvalidRecord",
    "OpRecord",
    "OpTensors",
    "Prediction",
    "SavedTensor",
    "ScenarioInfo",
    "Step",
    "StorageInfo",
    "Summary",
    "TensorState",
    "Trace",
    "Values",
    "VersionBump",
    "WarningInfo",
    "decode_number",
    "encode_number_tree",
    "evolve",
    "freeze",
    "graph_nodes",
    "node_ids",
    "record_from_dict",
    "record_to_dict",
    "step_from_dict",
    "step_to_dict",
]
