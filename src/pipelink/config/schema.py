"""The shipped JSON Schema of a pipeline config, loaded once, and its validator.

Only loads and exposes the schema; turning validation errors into friendly problems is ``schema_errors``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators

from .fastcheck import compile_check, plain_item_classes

__all__ = ["SCHEMA", "VALIDATOR", "IS_VALID", "schema_text", "TENSOR_NAME_PATTERN"]

SCHEMA: dict[str, Any] = json.loads(
    resources.files(__package__).joinpath("schema.json").read_text(encoding="utf-8")
)


@functools.cache
def _python_regex(pattern: str) -> re.Pattern[str]:
    # JSON Schema patterns are ECMA-262, where '$' matches only at the very end; Python's '$' also
    # matches before a final newline, which would let "name\n" pass as a name. '\Z' is ECMA's '$'.
    return re.compile(re.sub(r"(?<!\\)\$$", r"\\Z", pattern))


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _python_regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_DEFAULT_ITEMS = Draft202012Validator.VALIDATORS["items"]


def _items(validator: Any, items: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    # jsonschema checks an array item by item through several Python calls each; a large numeric table
    # in 'attrs' took minutes. A type-only items schema is checked in one pass, falling back to
    # jsonschema (for its messages) only when some item is wrong.
    plain = plain_item_classes(items)
    if plain is not None and isinstance(instance, list) and set(map(type, instance)) <= plain:
        return
    yield from _DEFAULT_ITEMS(validator, items, instance, schema)


_Validator = validators.extend(Draft202012Validator, {"pattern": _pattern, "items": _items})
VALIDATOR = _Validator(SCHEMA)
IS_VALID = compile_check(SCHEMA, _python_regex)
TENSOR_NAME_PATTERN: str = SCHEMA["$defs"]["tensorName"]["pattern"]


def schema_text() -> str:
    """The schema as pretty-printed JSON text (what ``pipelink schema`` prints).

    Returns
    -------
    str
        Indented JSON, ending with a newline.
    """
    return json.dumps(SCHEMA, indent=2, ensure_ascii=False) + "\n"
