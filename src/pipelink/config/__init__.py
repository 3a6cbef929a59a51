"""The config layer: read a pipeline config, validate it against the schema and the semantic rules,
and normalise it into frozen dataclasses.

Knows nothing of operators' shapes, devices or modules; the loader composes these pieces.
"""

from __future__ import annotations

from .model import (
    Constraints,
    ErrorPolicy,
    InputDecl,
    PipelineConfig,
    StageConfig,
    assign_stage_ids,
    build_config,
)
from .reader import read_config
from .schema import SCHEMA, schema_text
from .schema_errors import json_pointer
from .specifiers import parse_capability_specifier, parse_specifier
from .validate import check_document, check_warnings
from .weights import read_weights, weights_path

__all__ = [
    "read_config",
    "check_document",
    "check_warnings",
    "read_weights",
    "weights_path",
    "build_config",
    "InputDecl",
    "Constraints",
    "ErrorPolicy",
    "StageConfig",
    "PipelineConfig",
    "assign_stage_ids",
    "SCHEMA",
    "schema_text",
    "json_pointer",
    "parse_specifier",
    "parse_capability_specifier",
]
