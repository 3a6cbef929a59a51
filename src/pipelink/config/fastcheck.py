"""A compiled yes/no check of a document against the config schema, for the common case: a valid config.

jsonschema walks a 10,000-stage pipeline in seconds (several Python calls per value); this compiles the
schema once into nested closures that answer "certainly valid" in one pass. It never reports problems:
when it answers False (invalid, or a case it does not decide), jsonschema runs and explains. It must
never answer True for a document jsonschema rejects (tests/unit/test_config_fastcheck.py checks this).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["compile_check", "plain_item_classes"]

Check = Callable[[Any], bool]

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: v.__class__ is dict,
    "array": lambda v: v.__class__ is list,
    "string": lambda v: v.__class__ is str,
    "boolean": lambda v: v.__class__ is bool,
    "null": lambda v: v is None,
    "number": lambda v: v.__class__ is int or v.__class__ is float,
    # jsonschema counts 2.0 as an integer; deciding only exact ints is safe (False means "ask jsonschema").
    "integer": lambda v: v.__class__ is int,
}
# The exact classes of a type (a subclass, e.g. an IntEnum, is left to jsonschema).
_PLAIN_CLASSES = {
    "number": frozenset({int, float}),
    "string": frozenset({str}),
    "integer": frozenset({int}),
    "boolean": frozenset({bool}),
    "array": frozenset({list}),
    "object": frozenset({dict}),
}
_IGNORED = {"title", "description", "default", "$schema", "$id", "$defs", "examples", "$comment"}


def plain_item_classes(items: Any) -> frozenset[type] | None:
    """For an items schema that is only a type, the exact classes of a valid item; else None."""
    if isinstance(items, dict) and set(items) - _IGNORED == {"type"} and isinstance(items["type"], str):
        return _PLAIN_CLASSES.get(items["type"])
    return None


def compile_check(schema: dict[str, Any], regex: Callable[[str], Any]) -> Check:
    """A function ``doc -> bool`` that is True only for documents valid against ``schema``.

    Parameters
    ----------
    schema : dict
        A draft 2020-12 schema using only type, properties, required, additionalProperties, items,
        enum, pattern, minimum/maximum/exclusiveMinimum, minLength/maxLength, minItems, uniqueItems,
        anyOf and local ``$ref``.
    regex : callable
        Compiles a schema pattern into an object with ``search`` (with ECMA-262 anchoring).

    Raises
    ------
    ValueError
        For a keyword this compiler does not know (so a schema change cannot silently skip a rule).
    """
    defs: dict[str, Check] = {}

    def ref(name: str) -> Check:
        def check(v: Any) -> bool:
            return defs[name](v)

        return check

    def compile_node(node: dict[str, Any]) -> Check:
        unknown = (
            set(node)
            - _IGNORED
            - {
                "type",
                "properties",
                "required",
                "additionalProperties",
                "items",
                "enum",
                "pattern",
                "minimum",
                "maximum",
                "exclusiveMinimum",
                "minLength",
                "maxLength",
                "minItems",
                "uniqueItems",
                "anyOf",
                "$ref",
            }
        )
        if unknown:
            raise ValueError(f"fastcheck: unsupported schema keyword(s) {sorted(unknown)}")
        checks: list[Check] = []
        if "$ref" in node:
            prefix = "#/$defs/"
            if not node["$ref"].startswith(prefix):
                raise ValueError(f"fastcheck: only local $defs references (got {node['$ref']!r})")
            checks.append(ref(node["$ref"][len(prefix) :]))
        if "type" in node:
            names = [node["type"]] if isinstance(node["type"], str) else list(node["type"])
            tests = [_TYPES[n] for n in names]
            checks.append(tests[0] if len(tests) == 1 else _any_of(tests))
        if "enum" in node:
            allowed = node["enum"]
            if all(isinstance(a, str) for a in allowed):
                strings = frozenset(allowed)
                checks.append(lambda v: v.__class__ is not str or v in strings)
            else:
                checks.append(lambda v: any(v.__class__ is a.__class__ and v == a for a in allowed))
        if "pattern" in node:
            compiled = regex(node["pattern"])
            checks.append(lambda v: v.__class__ is not str or compiled.search(v) is not None)
        if "minLength" in node or "maxLength" in node:
            lo, hi = node.get("minLength", 0), node.get("maxLength", float("inf"))
            checks.append(lambda v: v.__class__ is not str or lo <= len(v) <= hi)
        for key, ok in (
            ("minimum", lambda v, b: v >= b),
            ("maximum", lambda v, b: v <= b),
            ("exclusiveMinimum", lambda v, b: v > b),
        ):
            if key in node:
                bound = node[key]
                checks.append(lambda v, ok=ok, bound=bound: not _TYPES["number"](v) or ok(v, bound))
        if "minItems" in node:
            n = node["minItems"]
            checks.append(lambda v: v.__class__ is not list or len(v) >= n)
        if node.get("uniqueItems"):
            checks.append(_unique)
        if "items" in node:
            items = node["items"]
            plain = plain_item_classes(items)
            if plain is not None:  # a type-only item schema: one C-level pass over the classes
                checks.append(lambda v: v.__class__ is not list or set(map(type, v)) <= plain)
            else:
                checks.append(_each(compile_node(items)))
        if "anyOf" in node:
            checks.append(_any_of([compile_node(b) for b in node["anyOf"]]))
        if {"properties", "required", "additionalProperties"} & node.keys():
            checks.append(_object_check(node, compile_node))
        if len(checks) == 1:
            return checks[0]
        return _all_of(checks)

    for name, sub in schema.get("$defs", {}).items():
        defs[name] = compile_node(sub)
    return compile_node(schema)


# Plain loops, not all()/any() over generators: these run once per value of a document (10,000 stages).
def _all_of(checks: list[Check]) -> Check:
    checks = tuple(checks)

    def check(v: Any) -> bool:
        for c in checks:  # noqa: SIM110 (a loop: no generator per call)
            if not c(v):
                return False
        return True

    return check


def _any_of(checks: list[Check]) -> Check:
    checks = tuple(checks)

    def check(v: Any) -> bool:
        for c in checks:  # noqa: SIM110
            if c(v):
                return True
        return False

    return check


def _each(item: Check) -> Check:
    def check(v: Any) -> bool:
        if v.__class__ is not list:
            return True
        for x in v:  # noqa: SIM110
            if not item(x):
                return False
        return True

    return check


def _unique(v: Any) -> bool:
    if v.__class__ is not list:
        return True
    if not all(x.__class__ in (str, int, float) for x in v):
        return False  # undecided (lists, objects, booleans): let jsonschema judge
    return len({(x.__class__ is str, x) for x in v}) == len(v)


def _object_check(node: dict[str, Any], compile_node: Callable[[dict[str, Any]], Check]) -> Check:
    props = {k: compile_node(s) for k, s in node.get("properties", {}).items()}
    required = tuple(node.get("required", ()))
    extra = node.get("additionalProperties", True)
    extra_check = compile_node(extra) if isinstance(extra, dict) else None

    def check(v: Any) -> bool:
        if v.__class__ is not dict:
            return True
        for key in required:
            if key not in v:
                return False
        for key, value in v.items():
            sub = props.get(key)
            if sub is not None:
                if not sub(value):
                    return False
            elif extra is False or extra_check is not None and not extra_check(value):
                return False
        return True

    return check
