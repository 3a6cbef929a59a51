"""The shipped JSON Schema of a pipeline config, loaded once, and its validator.

Only loads and exposes the schema; turning validation errors into friendly problems is ``schema_errors``.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["SCHEMA", "VALIDATOR", "schema_text", "TENSOR_NAME_PATTERN"]

SCHEMA: dict[str, Any] = json.loads(
    resources.files(__package__).joinpath("schema.json").read_text(encoding="utf-8")
)
VALIDATOR = Draft202012Validator(SCHEMA)
TENSOR_NAME_PATTERN: str = SCHEMA["$defs"]["tensorName"]["pattern"]


def schema_text() -> str:
    """The schema as pretty-printed JSON text (what ``pipelink schema`` prints).

    Returns
    -------
    str
        Indented JSON, ending with a newline.
    """
    return json.dumps(SCHEMA, indent=2, ensure_ascii=False) + "\n"
