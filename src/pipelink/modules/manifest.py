"""The manifest of a native module (JSON) and of a legacy sidecar: parsing and validation into OpSpecs.

Never touches the library: the loader (``native.py``), the legacy binder (``legacy.py``) and the
inspector (``inspect.py``) share this so that all three agree on what a manifest may say.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from ..descriptor import REQUIRED, Attr, Port
from ..dtypes import DTYPES
from ..errors import ModuleLoadError
from ..hardware import Requirement
from ..versioning import parse_version

__all__ = ["ABI_VERSIONS", "NATIVE_ATTR_TYPES", "OpSpec", "parse_manifest"]

ABI_VERSIONS = (1,)
NATIVE_ATTR_TYPES = ("float", "int", "bool", "str", "floats", "ints", "dtype")
DEVICES = ("cpu", "cuda")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class OpSpec:
    """One operator entry of a manifest or sidecar, validated."""

    name: str
    version: Version
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    attrs: tuple[Attr, ...] = ()
    dtype_vars: dict[str, frozenset[str]] = field(default_factory=dict)
    required_features: tuple[Requirement, ...] = ()
    devices: tuple[str, ...] = ("cpu",)
    entry: dict[str, str] = field(default_factory=dict)  # device -> symbol
    context_create: str | None = None
    context_destroy: str | None = None
    workspace_size: str | None = None
    tunables: dict[str, tuple] = field(default_factory=dict)
    doc: str = ""
    signature: tuple[str, ...] | None = None  # legacy: the argument template
    returns: str = "void"  # legacy: "void" or "int" (a status code)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def symbols(self) -> list[str]:
        """Every symbol the library must export for this operator."""
        hooks = [self.context_create, self.context_destroy, self.workspace_size]
        return sorted(set(self.entry.values()) | {s for s in hooks if s})


def parse_manifest(text: str, path: Path, *, what: str = "manifest", legacy: bool = False) -> list[OpSpec]:
    """Parse and validate a manifest (or, with ``legacy``, a sidecar descriptor).

    Raises
    ------
    ModuleLoadError
        Malformed JSON (with line and column), an unknown ``abi_version``, or an invalid operator entry;
        the message names the file and the field.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise _error(
            path,
            f"the {what} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})",
            "fix the PIPELINK_MANIFEST text (every key and string in double quotes, no trailing commas)",
        ) from e
    except (RecursionError, ValueError) as e:  # nested too deeply, or a number too long to read
        raise _error(
            path, f"the {what} cannot be read ({type(e).__name__}: {e})", "fix the PIPELINK_MANIFEST text"
        ) from e
    if not isinstance(doc, dict):
        raise _error(
            path,
            f"the {what} must be a JSON object (got {type(doc).__name__})",
            'write {"abi_version": 1, "operators": [...]}',
        )
    abi = doc.get("abi_version")
    if abi not in ABI_VERSIONS:
        raise _error(
            path,
            f"the {what} declares abi_version {abi!r}, which this runtime does not know "
            f"(it supports {', '.join(map(str, ABI_VERSIONS))})",
            "rebuild the module against this PipeLink's header (pipelink include-dir) or upgrade PipeLink",
            abi_version=abi,
        )
    ops = doc.get("operators")
    if not isinstance(ops, list) or not ops:
        raise _error(
            path, f"the {what} lists no operators", 'add an "operators" list with one entry per operator'
        )
    specs = [_operator(op, i, path, what, legacy) for i, op in enumerate(ops)]
    seen: set[tuple[str, Version]] = set()
    for spec in specs:
        if (spec.name, spec.version) in seen:
            raise _error(
                path,
                f"the {what} lists operator {spec.name!r} version {spec.version} twice",
                "remove the duplicate entry",
            )
        seen.add((spec.name, spec.version))
    return specs


def _error(path: Path, problem: str, fix: str, **context: Any) -> ModuleLoadError:
    return ModuleLoadError(f"native module {path}: {problem}; {fix}", module=str(path), **context)


def _operator(op: Any, index: int, path: Path, what: str, legacy: bool) -> OpSpec:
    where = f"operators[{index}]"
    if not isinstance(op, dict):
        raise _error(
            path, f"{what} {where} must be an object", "describe the operator with name, version, ..."
        )

    def need(key: str, kind: type | tuple, example: str) -> Any:
        value = op.get(key)
        if not isinstance(value, kind):
            raise _error(
                path,
                f"{what} {where}: field {key!r} is missing or not a {_kind(kind)} (got {value!r})",
                f"add it, e.g. {example}",
            )
        return value

    name = need("name", str, '"name": "my_op"')
    where = f"operator {name!r}"
    if not _NAME_RE.match(name):
        raise _error(
            path,
            f"{what}: operator name {name!r} is not a C identifier",
            "use letters, digits and underscores (it is part of the version symbol)",
        )
    try:
        version = parse_version(need("version", (str, int), '"version": "1.0.0"'))
    except ValueError as e:
        raise _error(path, f"{what} {where}: {e}", 'write "version": "MAJOR.MINOR.PATCH"') from e
    raw_devices = op.get("devices", ["cpu"])
    devices = tuple(raw_devices) if isinstance(raw_devices, list) else ()
    bad = [d for d in devices if not isinstance(d, str) or d not in DEVICES]
    if bad or not devices or len(set(devices)) != len(devices):
        raise _error(
            path,
            f"{what} {where}: devices {raw_devices!r} (a list of distinct names from {list(DEVICES)})",
            'write "devices": ["cpu"] or ["cuda"]',
        )
    key = "symbol" if legacy else "entry"
    entry_value = need(key, (str, dict), f'"{key}": "{name}_compute"')
    entry = {d: entry_value for d in devices} if isinstance(entry_value, str) else dict(entry_value)
    missing = [d for d in devices if not isinstance(entry.get(d), str) or not entry[d]]
    if missing:
        raise _error(
            path,
            f"{what} {where}: {key} names no symbol for device {missing[0]!r}",
            f'give "{key}" as a string or a {{device: symbol}} object covering {list(devices)}',
        )
    dtype_vars = {}
    for var, names in _mapping(op, "dtype_vars", path, f"{what} {where}", '{"T": ["float32"]}').items():
        dtype_vars[var] = frozenset(_dtype_names(names, path, f"{what} {where}: dtype_vars[{var!r}]"))
    spec = OpSpec(
        name=name,
        version=version,
        devices=devices,
        entry=entry,
        dtype_vars=dtype_vars,
        inputs=_ports(op, "inputs", path, f"{what} {where}", dtype_vars, is_input=True),
        outputs=_ports(op, "outputs", path, f"{what} {where}", dtype_vars, is_input=False),
        attrs=_attrs(op.get("attrs", []), path, f"{what} {where}"),
        required_features=_features(op.get("required_features", []), path, f"{what} {where}"),
        context_create=_symbol(op, "context_create", path, f"{what} {where}"),
        context_destroy=_symbol(op, "context_destroy", path, f"{what} {where}"),
        workspace_size=_symbol(op, "workspace_size", path, f"{what} {where}"),
        tunables=_tunables(op, path, f"{what} {where}"),
        doc=str(op.get("doc", "")),
        raw=op,
    )
    if legacy:
        signature = need("signature", list, '"signature": ["in:A", "out:C", "stream"]')
        spec.signature = tuple(str(s) for s in signature)
        spec.returns = str(op.get("returns", "void"))
        if spec.returns not in ("void", "int"):
            raise _error(
                path, f"{what} {where}: returns {spec.returns!r}", 'write "returns": "void" or "int"'
            )
    return spec


def _mapping(op: dict, key: str, path: Path, where: str, example: str) -> dict:
    value = op.get(key) or {}
    if not isinstance(value, dict):
        raise _error(path, f"{where}: {key!r} must be an object (got {value!r})", f'write "{key}": {example}')
    return value


def _symbol(op: dict, key: str, path: Path, where: str) -> str | None:
    value = op.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise _error(path, f"{where}: {key!r} must name a symbol (got {value!r})", "give the function's name")
    return value


def _tunables(op: dict, path: Path, where: str) -> dict[str, tuple]:
    tunables = _mapping(op, "tunables", path, where, '{"block": [128, 256]}')
    for name, values in tunables.items():
        if not isinstance(values, list) or not values or not all(_is_scalar(v) for v in values):
            raise _error(
                path,
                f"{where}: tunable {name!r} must be a non-empty list of numbers or strings (got {values!r})",
                'write "tunables": {"block": [128, 256]}',
            )
    return {k: tuple(v) for k, v in tunables.items()}


def _is_scalar(value: Any) -> bool:
    return isinstance(value, int | float | str) and not isinstance(value, bool)


def _kind(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(
        {str: "string", int: "integer", dict: "object", list: "list"}.get(k, k.__name__) for k in kinds
    )


def _dtype_names(value: Any, path: Path, where: str) -> list[str]:
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, list) else None
    if names is None or any(n not in DTYPES for n in names):
        raise _error(
            path,
            f"{where}: {value!r} is not a dtype name or a list of them",
            f"use names from {sorted(DTYPES)}",
        )
    return names


def _ports(
    op: dict, key: str, path: Path, where: str, dtype_vars: dict, *, is_input: bool
) -> tuple[Port, ...]:
    items = op.get(key)
    if not isinstance(items, list) or (not is_input and not items):
        raise _error(path, f"{where}: {key!r} must be a list of ports", f'write "{key}": [{{"name": "x"}}]')
    ports, names = [], set()
    for i, item in enumerate(items):
        item = {"name": item} if isinstance(item, str) else item
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _error(path, f"{where}: {key}[{i}] needs a string 'name'", 'write {"name": "x", ...}')
        pname = item["name"]
        if pname in names:
            raise _error(path, f"{where}: port {pname!r} appears twice in {key!r}", "rename one of them")
        names.add(pname)
        dtype = item.get("dtype")
        if isinstance(dtype, list):
            dtype = frozenset(_dtype_names(dtype, path, f"{where}: {key}[{i}].dtype"))
        elif (
            isinstance(dtype, str)
            and dtype not in dtype_vars
            and dtype not in DTYPES
            and not dtype.startswith("attr:")
        ):
            raise _error(
                path,
                f"{where}: {key}[{i}].dtype {dtype!r} is neither a dtype nor a declared type variable",
                f'declare it in "dtype_vars" or use one of {sorted(DTYPES)}',
            )
        shape = item.get("shape")
        if not _is_pattern(shape, op):
            raise _error(
                path,
                f"{where}: {key}[{i}].shape {shape!r} is not a pattern",
                'write e.g. ["...", "C"], ["M", "K"] or the name of an input',
            )
        if (
            isinstance(shape, str)
            and not is_input
            and shape not in names
            and shape not in {p.get("name") if isinstance(p, dict) else p for p in op.get("inputs", [])}
        ):
            raise _error(
                path,
                f"{where}: output {pname!r} has the shape of {shape!r}, which is no input",
                "name an input port or give a pattern",
            )
        ports.append(Port(pname, shape=shape, dtype=dtype, optional=bool(item.get("optional", False))))
    return tuple(ports)


def _is_pattern(shape: Any, op: dict) -> bool:
    """None, an input's name, ``{"broadcast": [input names]}`` or a list of dims (ints >= 0, names, "...")."""
    if shape is None or isinstance(shape, str):
        return True
    if isinstance(shape, dict):
        inputs = {p.get("name") if isinstance(p, dict) else p for p in op.get("inputs") or []}
        names = shape.get("broadcast")
        return (
            list(shape) == ["broadcast"]
            and isinstance(names, list)
            and all(isinstance(n, str) and n in inputs for n in names)
        )
    if isinstance(shape, list):
        dims_ok = all(isinstance(d, str) or (type(d) is int and d >= 0) for d in shape)
        return dims_ok and shape.count("...") <= 1
    return False


def _attrs(items: Any, path: Path, where: str) -> tuple[Attr, ...]:
    if not isinstance(items, list):
        raise _error(
            path, f"{where}: 'attrs' must be a list", 'write "attrs": [{"name": "eps", "type": "float"}]'
        )
    attrs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _error(
                path, f"{where}: attrs[{i}] needs a string 'name'", 'write {"name": "eps", "type": "float"}'
            )
        kind = item.get("type", "float")
        if kind not in NATIVE_ATTR_TYPES:
            raise _error(
                path,
                f"{where}: attribute {item['name']!r} has type {kind!r}",
                f"use one of {list(NATIVE_ATTR_TYPES)}",
            )
        default = item.get("default", REQUIRED)
        if isinstance(default, list):
            default = tuple(default)
        attrs.append(Attr(item["name"], kind, default, doc=str(item.get("doc", ""))))
    return tuple(attrs)


def _features(items: Any, path: Path, where: str) -> tuple[Requirement, ...]:
    out = []
    for item in items if isinstance(items, list) else [None]:
        if isinstance(item, str):
            item = {"feature": item}
        if not isinstance(item, dict) or not isinstance(item.get("feature"), str):
            raise _error(
                path,
                f"{where}: required_features entry {item!r} is invalid",
                'write [{"feature": "tensor_core", "minimum": 8}]',
            )
        minimum = item.get("minimum", 1)
        if not isinstance(minimum, int | float) or isinstance(minimum, bool) or minimum != minimum:
            raise _error(
                path,
                f"{where}: required feature {item['feature']!r} has minimum {minimum!r}, not a number",
                'write [{"feature": "tensor_core", "minimum": 8}]',
            )
        out.append(Requirement(item["feature"], float(minimum)))
    return tuple(out)
