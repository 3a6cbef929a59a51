"""Seed-style descriptor headers (``*.desc.h``): parse their ``static constexpr`` fields and generate the
manifest and version-symbol C source a module is built with.

Standard library only, and runnable as a script (CMake's ``pipelink_add_module`` calls
``python descheader.py layernorm.desc.h -o manifest.c``) without importing the ``pipelink`` package.
It reads the header as text: nothing in it is compiled or executed.

Fields of each ``struct ... { ... };`` (seed section 3.1, plus optional PipeLink extensions):

==================== ===================================================== ==========================
field                meaning                                               default
==================== ===================================================== ==========================
name                 operator name (a C identifier)                        required
version              ``1`` (major only) or ``"1.2.0"``                     required
version_minor/patch  with an integer ``version``                           0
input_names[]        input ports, in order                                 required
output_names[]       output ports, in order                                required
num_inputs/outputs   checked against the name lists                        -
required_features[]  ``{HW_FEATURE_TENSOR_CORE, 8}`` pairs                  none
entry                compute symbol                                        ``<name>_compute``
devices[]            ``"cuda"`` / ``"cpu"``                                from the sources built
input_shapes[]       per input ``"N,C"``, ``""`` (0-d), ``"...,C"``        any shape
output_shapes[]      per output, a pattern or the name of an input         the first input's shape
dtypes[]             allowed dtypes (one type variable T for all ports)    any
optional_inputs[]    inputs that may be absent                             none
attrs[]              ``"eps:float=1e-5"`` (``name:type[=default]``)        none
==================== ===================================================== ==========================
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["DescriptorError", "parse_descriptor_header", "manifest_from_header", "generate_source", "main"]

FEATURES = {
    "COMPUTE_CAPABILITY": "compute_capability",
    "TENSOR_CORE": "tensor_core",
    "FP16_SUPPORT": "fp16",
    "BF16_SUPPORT": "bf16",
    "TF32_SUPPORT": "tf32",
    "FP8_SUPPORT": "fp8",
    "FP32_SUPPORT": "fp32",
    "FP64_SUPPORT": "fp64",
    "ATOMIC_DOUBLE": "atomic_double",
}
_TOKEN_RE = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)
_FIELD_RE = re.compile(
    r"static\s+constexpr\s+[^=;]*?\b(?P<name>\w+)\s*(?P<array>\[\s*\d*\s*\])?\s*=\s*"
    r"(?P<value>[^;]*);",
    re.S,
)


class DescriptorError(ValueError):
    """A descriptor header that cannot be turned into a manifest (the message names file and field)."""


def _strip_comments(text: str) -> str:
    return _TOKEN_RE.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", text)


def _structs(text: str) -> list[tuple[str, str]]:
    out = []
    for m in re.finditer(r"\bstruct\s+(\w+)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            if text[i] == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
            i += 1
        body = text[m.end() : i - 1]
        if "static constexpr" in body:
            out.append((m.group(1), body))
    return out


def _value(raw: str) -> Any:
    raw = raw.strip()
    if raw.startswith("{"):
        inner, items, depth, cur = raw[1 : raw.rindex("}")], [], 0, ""
        for tok in re.findall(r'"(?:\\.|[^"\\])*"|[{},]|[^{},"]+', inner):
            if tok == "{":
                depth += 1
            elif tok == "}":
                depth -= 1
            if tok == "," and depth == 0:
                items.append(cur)
                cur = ""
            else:
                cur += tok
        if cur.strip():
            items.append(cur)
        return [_value(item) for item in items]
    if raw.startswith('"'):
        return json.loads(raw)
    if re.fullmatch(r"[-+]?\d+[uUlL]*", raw):
        return int(raw.rstrip("uUlL"))
    if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?[fF]?", raw):
        return float(raw.rstrip("fF"))
    return raw  # an identifier such as HW_FEATURE_TENSOR_CORE


def parse_descriptor_header(path: str | Path) -> list[dict[str, Any]]:
    """The ``static constexpr`` fields of every descriptor struct in a header, as dicts (with ``struct``)."""
    path = Path(path)
    text = _strip_comments(path.read_text(encoding="utf-8"))
    found = []
    for struct, body in _structs(text):
        fields: dict[str, Any] = {"struct": struct}
        for m in _FIELD_RE.finditer(body):
            fields[m["name"]] = _value(m["value"])
        found.append(fields)
    if not found:
        raise DescriptorError(
            f"{path}: no descriptor struct with 'static constexpr' fields found; write "
            f'struct MyOpDescriptor {{ static constexpr const char* name = "my_op"; ... }};'
        )
    return found


def _shape(text: Any, where: str) -> Any:
    if not isinstance(text, str):
        raise DescriptorError(f'{where}: a shape must be a string such as "N,C" (got {text!r})')
    dims = [d.strip() for d in text.split(",") if d.strip()]
    return [int(d) if d.lstrip("-").isascii() and d.lstrip("-").isdigit() else d for d in dims]


def _operator(fields: dict[str, Any], path: Path, devices: list[str]) -> dict[str, Any]:
    where = f"{path}: struct {fields['struct']}"

    def need(key: str, kind: type) -> Any:
        if not isinstance(fields.get(key), kind):
            raise DescriptorError(f"{where}: field {key!r} is missing or not a {kind.__name__}")
        return fields[key]

    name = need("name", str)
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise DescriptorError(
            f"{where}: name {name!r} is not a C identifier (it is part of the version symbol)"
        )
    version = fields.get("version")
    if isinstance(version, int):
        version = f"{version}.{int(fields.get('version_minor', 0))}.{int(fields.get('version_patch', 0))}"
    if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise DescriptorError(f'{where}: version {version!r} must be an integer or "MAJOR.MINOR.PATCH"')
    ins, outs = need("input_names", list), need("output_names", list)
    for key, names in (("num_inputs", ins), ("num_outputs", outs)):
        if key in fields and fields[key] != len(names):
            raise DescriptorError(f"{where}: {key} is {fields[key]}, but {len(names)} names are listed")
    in_shapes = fields.get("input_shapes", [None] * len(ins))
    out_shapes = fields.get("output_shapes", [None] * len(outs))
    if len(in_shapes) != len(ins) or len(out_shapes) != len(outs):
        raise DescriptorError(f"{where}: input_shapes/output_shapes need one entry per port")
    dtypes = fields.get("dtypes")
    optional = set(fields.get("optional_inputs", []))
    inputs = []
    for port, shape in zip(ins, in_shapes, strict=True):
        entry: dict[str, Any] = {"name": port}
        if shape is not None:
            entry["shape"] = _shape(shape, f"{where}: input {port!r}")
        if dtypes:
            entry["dtype"] = "T"
        if port in optional:
            entry["optional"] = True
        inputs.append(entry)
    outputs = []
    for port, shape in zip(outs, out_shapes, strict=True):
        entry = {
            "name": port,
            "shape": ins[0]
            if shape is None
            else shape
            if shape in ins
            else _shape(shape, f"{where}: output {port!r}"),
        }
        if dtypes:
            entry["dtype"] = "T"
        outputs.append(entry)
    features = []
    for pair in fields.get("required_features", []):
        if not (isinstance(pair, list) and len(pair) == 2 and str(pair[0]).startswith("HW_FEATURE_")):
            raise DescriptorError(f"{where}: required_features entry {pair!r} must be {{HW_FEATURE_X, N}}")
        key = str(pair[0])[len("HW_FEATURE_") :]
        if key not in FEATURES:
            raise DescriptorError(
                f"{where}: unknown feature {pair[0]} (known: "
                f"{', '.join('HW_FEATURE_' + k for k in FEATURES)})"
            )
        minimum = float(pair[1])
        if key == "COMPUTE_CAPABILITY" and minimum >= 10:
            minimum /= 10  # {HW_FEATURE_COMPUTE_CAPABILITY, 80} means 8.0
        features.append({"feature": FEATURES[key], "minimum": minimum})
    attrs = []
    for text in fields.get("attrs", []):
        m = re.fullmatch(r"(\w+)(?::(\w+))?(?:=(.+))?", str(text).strip())
        if not m:
            raise DescriptorError(f'{where}: attrs entry {text!r} must be "name:type=default"')
        attr: dict[str, Any] = {"name": m[1], "type": m[2] or "float"}
        if m[3] is not None:
            attr["default"] = json.loads(m[3]) if attr["type"] != "str" else m[3]
        attrs.append(attr)
    op: dict[str, Any] = {
        "name": name,
        "version": version,
        "entry": fields.get("entry", f"{name}_compute"),
        "devices": list(fields.get("devices", devices)),
        "inputs": inputs,
        "outputs": outputs,
        "attrs": attrs,
        "required_features": features,
    }
    if dtypes:
        op["dtype_vars"] = {"T": list(dtypes)}
    return op


def manifest_from_header(
    path: str | Path, *, devices: list[str] | tuple[str, ...] = ("cuda",)
) -> dict[str, Any]:
    """The manifest (a dict with ``abi_version`` 1) for every descriptor in the header.

    Raises
    ------
    DescriptorError
        A missing or malformed field, naming the file, the struct and the field.
    """
    path = Path(path)
    return {
        "abi_version": 1,
        "operators": [_operator(f, path, list(devices)) for f in parse_descriptor_header(path)],
    }


def _c_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def generate_source(path: str | Path, *, devices: list[str] | tuple[str, ...] = ("cuda",)) -> str:
    """The C source defining ``pipelink_manifest()``, its ELF section and one version symbol per operator."""
    manifest = manifest_from_header(path, devices=devices)
    lines = [f"/* Generated by PipeLink from {Path(path).name}; do not edit. */", "#include <pipelink.h>", ""]
    for op in manifest["operators"]:
        major, minor, patch = op["version"].split(".")
        lines.append(f"PIPELINK_VERSION({op['name']}, {major}, {minor}, {patch})")
    lines += ["", f"PIPELINK_MANIFEST_TEXT({_c_string(json.dumps(manifest, ensure_ascii=False))})", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``descheader.py DESC.h -o OUT.c [--devices cuda,cpu]``; exit status 2 with a message on errors."""
    parser = argparse.ArgumentParser(description="Generate a PipeLink manifest source from a .desc.h header")
    parser.add_argument("header")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--devices", default="cuda", help="comma-separated default devices (cuda,cpu)")
    args = parser.parse_args(argv)
    try:
        source = generate_source(args.header, devices=[d for d in args.devices.split(",") if d])
    except (OSError, DescriptorError) as e:
        print(f"error[PIPELINK_ERR_INVALID_ARGUMENT]: {e}", file=sys.stderr)
        return 2
    Path(args.output).write_text(source, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
