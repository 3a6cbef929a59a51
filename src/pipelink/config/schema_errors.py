"""Turn jsonschema validation errors into friendly :class:`Problem`s with RFC 6901 pointers.

Every message names the place, states the rule, echoes the value and, where it can, suggests a fix
("did you mean ..."). Never raises for a malformed document: that is what it reports.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from jsonschema.exceptions import ValidationError

from ..errors import ErrorCode, Problem
from .schema import IS_VALID, VALIDATOR

__all__ = ["json_pointer", "schema_problems", "closest", "did_you_mean", "short_repr"]

_CODE = ErrorCode.PIPELINK_ERR_INVALID_CONFIG
_JSON_TYPES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}

_PATTERN_RULES = {
    VALIDATOR.schema["$defs"]["tensorName"][
        "pattern"
    ]: "a name starts with a letter or '_', followed by letters, digits, '_', '.', ':' or '-'",
    "^[A-Za-z_][A-Za-z0-9_]*$": "a dimension symbol is a letter or '_' followed by letters, digits or '_'",
    "^[0-9a-fA-F]{64}$": "a SHA-256 digest is exactly 64 hexadecimal digits",
    "^(cpu|cuda|gpu)(:[0-9]+(,[0-9]+)*)?$": "a device is 'cpu', 'cuda', 'cuda:N' (e.g. 'cuda:0') or a GPU "
    "list such as 'gpu:1,2'",
}


def json_pointer(parts: Iterable[str | int]) -> str:
    """RFC 6901 pointer of a path: ``["pipeline", 0, "a/b~c"] -> "/pipeline/0/a~1b~0c"``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def closest(word: object, candidates: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The candidate most similar to ``word`` (difflib ratio >= ``cutoff``), or None."""
    if not isinstance(word, str):
        return None
    matches = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def did_you_mean(word: object, candidates: Iterable[str], *, cutoff: float = 0.6) -> str:
    """``"; did you mean 'x'?"`` for the closest candidate, or ``""`` when none is close."""
    match = closest(word, candidates, cutoff=cutoff)
    return f"; did you mean {match!r}?" if match is not None else ""


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr`` clipped to ``limit`` characters, for echoing user values in messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_type(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if VALIDATOR.is_type(value, name):
            return name
    return type(value).__name__


def _label(path: Sequence[str | int]) -> str:
    """A readable name for a place: ``pipeline[1].constraints.memory_alignment``; the root is 'the config'."""
    if not path:
        return "the config"
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _context(schema: dict[str, Any], path: Sequence[str | int]) -> str:
    """What an object is, for messages: 'stage', 'scheduling constraints', 'the config'."""
    if not path:
        return "the config"
    title = schema.get("title", "")
    return title[0].lower() + title[1:] if title[:1].isalpha() else _label(path)


def _listing(values: Iterable[Any]) -> str:
    return ", ".join(repr(v) for v in values)


def _got(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return f"(got {json.dumps(value)})"  # echo JSON's spelling: null, true, false
    return f"(got {_json_type(value)} {short_repr(value)})"


def _type_matches(schema: dict[str, Any], instance: Any) -> bool:
    """Whether ``instance`` has the JSON type an ``anyOf`` branch expects (so the branch is the one meant)."""
    expected = schema.get("type")
    if expected is None and "enum" in schema:
        return any(_json_type(v) == _json_type(instance) for v in schema["enum"])
    if expected is None:
        return True
    types = [expected] if isinstance(expected, str) else list(expected)
    return any(VALIDATOR.is_type(instance, t) for t in types)


def _branch_title(schema: dict[str, Any]) -> str:
    title = schema.get("title", "")
    if title[:1].isupper():  # an editor title such as "Feature name" -> "a feature name"
        return f"a {title[0].lower()}{title[1:]}"
    if title:
        return title
    return _JSON_TYPES.get(str(schema.get("type")), "a valid value")


def _convert(err: ValidationError, alternatives: Sequence[str] = ()) -> list[Problem]:
    """Problems for one jsonschema error; ``alternatives`` are the other forms of an enclosing ``anyOf``."""
    path = list(err.absolute_path)
    where = json_pointer(path)
    what = _label(path)
    inst = err.instance
    kind = err.validator
    schema = err.schema if isinstance(err.schema, dict) else {}
    if kind == "additionalProperties" and isinstance(inst, dict):
        allowed = list(schema.get("properties", {}))
        context = _context(schema, path)
        problems = []
        for key in inst:
            if key in allowed:
                continue
            hint = did_you_mean(key, allowed) or f"; allowed keys: {_listing(allowed)}"
            problems.append(
                Problem(_CODE, json_pointer([*path, key]), f"unknown key {key!r} in {context}{hint}")
            )
        return problems
    if kind == "required" and isinstance(inst, dict):
        props = schema.get("properties", {})
        context = _context(schema, path)
        problems = []
        for key in err.validator_value:
            if key not in inst:
                help_text = props.get(key, {}).get("description", "")
                help_text = f" ({help_text})" if help_text else ""
                problems.append(
                    Problem(
                        _CODE,
                        where,
                        f"{context} at {where or '/'} is missing the required key {key!r}{help_text}",
                    )
                )
        return problems
    if kind in ("enum", "const"):
        allowed = list(err.validator_value) if kind == "enum" else [err.validator_value]
        forms = _listing(allowed) + "".join(f", or {alt}" for alt in alternatives)
        hint = did_you_mean(inst, [str(a) for a in allowed])
        return [Problem(_CODE, where, f"{what} must be one of {forms} (got {short_repr(inst)}){hint}")]
    if kind == "type":
        expected = err.validator_value
        names = [expected] if isinstance(expected, str) else list(expected)
        want = " or ".join(_JSON_TYPES.get(n, n) for n in names)
        return [Problem(_CODE, where, f"{what} must be {want} {_got(inst)}")]
    if kind == "pattern":
        rule = _PATTERN_RULES.get(err.validator_value, f"it must match the pattern {err.validator_value!r}")
        return [Problem(_CODE, where, f"{what} {short_repr(inst)} is not valid: {rule}")]
    if kind == "minItems":
        n = err.validator_value
        return [
            Problem(
                _CODE,
                where,
                f"{what} must list at least {n} item{'s' if n != 1 else ''} (got "
                f"{len(inst) if isinstance(inst, list) else short_repr(inst)})",
            )
        ]
    if kind == "minLength":
        return [Problem(_CODE, where, f"{what} must not be empty")]
    if kind == "maxLength":
        return [
            Problem(
                _CODE,
                where,
                f"{what} must be at most {err.validator_value} characters "
                f"(got {len(inst) if isinstance(inst, str) else short_repr(inst)})",
            )
        ]
    if kind == "uniqueItems" and isinstance(inst, list):
        seen: list[Any] = []
        for i, item in enumerate(inst):
            if item in seen:
                return [
                    Problem(
                        _CODE,
                        json_pointer([*path, i]),
                        f"{what} lists {short_repr(item)} more than once; list each entry once",
                    )
                ]
            seen.append(item)
    if kind in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[kind]
        why = f": {schema['description']}" if kind.endswith("aximum") and schema.get("description") else ""
        return [
            Problem(_CODE, where, f"{what} must be {op} {err.validator_value} (got {short_repr(inst)}){why}")
        ]
    if kind in ("anyOf", "oneOf"):
        return _convert_alternatives(err, path, what)
    return [Problem(_CODE, where, f"{what}: {err.message}")]


def _convert_alternatives(err: ValidationError, path: list[str | int], what: str) -> list[Problem]:
    """An ``anyOf``: report the branch whose type the value has; otherwise list every accepted form."""
    branches: list[dict[str, Any]] = [b for b in err.validator_value if isinstance(b, dict)]
    resolved = [_resolve(b) for b in branches]
    matching = [i for i, b in enumerate(resolved) if _type_matches(b, err.instance)]
    if len(matching) == 1:
        index = matching[0]
        others = [_branch_title(b) for i, b in enumerate(resolved) if i != index]
        subs = [
            e for e in (err.context or []) if e.relative_schema_path and e.relative_schema_path[0] == index
        ]
        if subs:
            return [p for sub in subs for p in _convert(sub, others)]
    forms = [_branch_title(b) for b in resolved]
    accepted = ", ".join(forms[:-1]) + f" or {forms[-1]}" if len(forms) > 1 else forms[0]
    return [Problem(_CODE, json_pointer(path), f"{what} must be {accepted} {_got(err.instance)}")]


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` (``#/$defs/x``) so a branch's title and type can be read."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = VALIDATOR.schema
        for part in ref[2:].split("/"):
            target = target[part]
        return target
    return schema


def _sort_key(problem: Problem) -> tuple:
    # Document order: numeric indices compare as numbers, keys as text.
    parts = problem.path.split("/")[1:]
    return tuple((0, int(p), "") if p.isascii() and p.isdigit() else (1, 0, p) for p in parts)


def schema_problems(doc: Any) -> list[Problem]:
    """Every schema violation of ``doc`` as friendly problems, in document order, without duplicates.

    Parameters
    ----------
    doc : Any
        The parsed config.

    Returns
    -------
    list of Problem
        Code ``PIPELINK_ERR_INVALID_CONFIG``; empty when the document matches the schema.
    """
    if IS_VALID(doc):  # the compiled check: one fast pass for the usual, valid config
        return []
    problems: dict[Problem, None] = {}  # insertion-ordered and deduplicated in constant time
    for err in VALIDATOR.iter_errors(doc):
        for problem in _convert(err):
            problems.setdefault(problem, None)
    return sorted(problems, key=_sort_key)
