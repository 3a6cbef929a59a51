"""``pipelink inspect``: what a native module declares and exports, read without ever running it here.

The version symbols and needed libraries always come from the ELF dynamic section (pyelftools). The
manifest comes from the ``.pipelink_manifest`` section, else a legacy sidecar, and only as a last resort
from calling ``pipelink_manifest()`` in a child process (the probe): this process never opens the
library. Never registers anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..descriptor import REQUIRED
from ..errors import ModuleLoadError
from ..versioning import version_symbol
from .elfinfo import read_elf
from .image import probe_image, read_image
from .manifest import OpSpec
from .native import _parse, _read_sidecar, sidecar_path

__all__ = ["inspect_library", "format_inspect"]


def _manifest_by_probing(image) -> str:
    text = probe_image(image, manifest=True)
    if text is None:
        raise ModuleLoadError(
            f"native module {image.path}: pipelink_manifest() returned NULL", module=str(image.path)
        )
    return text


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _port(p: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": p.name}
    if p.shape is not None:
        d["shape"] = p.shape
    if p.dtype is not None:
        d["dtype"] = sorted(p.dtype) if isinstance(p.dtype, frozenset) else p.dtype
    if p.optional:
        d["optional"] = True
    return d


def _operator(spec: OpSpec, exports: set[str], problems: list[str]) -> dict[str, Any]:
    vsym = version_symbol(spec.name, spec.version)
    has_vsym = vsym in exports
    if not has_vsym and spec.signature is None:
        problems.append(f"operator {spec.name!r} {spec.version}: version symbol {vsym} is not exported")
    for sym in spec.symbols:
        if sym not in exports:
            problems.append(f"operator {spec.name!r}: symbol {sym!r} named in the manifest is not exported")
    op: dict[str, Any] = {
        "name": spec.name,
        "version": str(spec.version),
        "devices": list(spec.devices),
        "entry": dict(spec.entry),
        "inputs": [_port(p) for p in spec.inputs],
        "outputs": [_port(p) for p in spec.outputs],
        "attrs": [
            {
                "name": a.name,
                "type": a.type,
                **({} if a.default is REQUIRED else {"default": _plain(a.default)}),
            }
            for a in spec.attrs
        ],
        "dtype_vars": {k: sorted(v) for k, v in spec.dtype_vars.items()},
        "required_features": [{"feature": r.feature, "minimum": r.minimum} for r in spec.required_features],
        "tunables": {k: list(v) for k, v in spec.tunables.items()},
        "version_symbol": vsym,
        "version_symbol_exported": has_vsym,
    }
    for hook in ("context_create", "context_destroy", "workspace_size"):
        if getattr(spec, hook):
            op[hook] = getattr(spec, hook)
    if spec.signature is not None:
        op["signature"] = list(spec.signature)
        op["returns"] = spec.returns
    return op


def inspect_library(path: str | Path, *, sidecar: str | Path | None = None, allow_load: bool = True) -> dict:
    """Describe a native module.

    Parameters
    ----------
    path : str or Path
        The shared library.
    sidecar : str or Path, optional
        A legacy sidecar (default: ``<path>.pipelink.json`` when it exists).
    allow_load : bool
        Whether the library may be opened in a child process to call ``pipelink_manifest()`` when the
        manifest is in no ELF section (modules built with this header always have the section). This
        process never opens it.

    Returns
    -------
    dict
        ``path``, ``sha256``, ``size``, ``machine``, ``abi_version``, ``manifest_source`` ("section",
        "function", "sidecar" or a combination), ``operators`` (name, version, devices, entry, ports, attrs,
        dtype_vars, required_features, tunables, version_symbol and whether it is exported), the exported
        ``version_symbols``, the ``needed`` libraries and ``problems`` (empty when it would load).

    Raises
    ------
    ModuleLoadError
        Missing file, not an ELF shared library, no manifest, malformed manifest, unknown ABI version.
    """
    image = read_image(path)
    p = image.path
    elf = read_elf(image.data, p)
    side = Path(sidecar) if sidecar is not None else sidecar_path(p)
    specs: list[OpSpec] = []
    sources = []
    abi = None
    if elf.manifest_text is not None or ("pipelink_manifest" in elf.exports and allow_load):
        text, where = (
            (elf.manifest_text, "section")
            if elf.manifest_text is not None
            else (_manifest_by_probing(image), "function")
        )
        specs += _parse(text, p)
        sources.append(where)
        abi = 1
    if side.is_file():
        specs += _parse(_read_sidecar(side), side, what="sidecar", legacy=True)
        sources.append("sidecar")
        abi = 1
    if not sources:
        hint = (
            " (it exports pipelink_manifest(); pass allow_load=True)"
            if "pipelink_manifest" in elf.exports
            else ""
        )
        raise ModuleLoadError(
            f"native module {p}: no PipeLink manifest found (no '.pipelink_manifest' section, "
            f"no sidecar {side.name}){hint}",
            module=str(p),
        )
    problems: list[str] = []
    operators = [_operator(spec, elf.exports, problems) for spec in specs]
    declared = {op["version_symbol"] for op in operators}
    for sym in elf.version_symbols:
        if sym not in declared:
            problems.append(
                f"version symbol {sym} is exported but the manifest declares no such operator version"
            )
    return {
        "path": str(p),
        "sha256": image.sha256,
        "size": len(image.data),
        "machine": elf.machine,
        "abi_version": abi,
        "manifest_source": "+".join(sources),
        "operators": operators,
        "version_symbols": elf.version_symbols,
        "needed": list(elf.needed),
        "problems": problems,
    }


def _shape_text(shape: Any) -> str:
    if shape is None:
        return "any"
    if isinstance(shape, str):
        return f"like {shape}"
    if isinstance(shape, dict):
        return "broadcast(" + ", ".join(shape.get("broadcast", [])) + ")"
    return "[" + ", ".join(str(d) for d in shape) + "]"


def format_inspect(info: dict) -> str:
    """Human-readable text of :func:`inspect_library`'s result (for the CLI)."""
    lines = [
        f"module   {info['path']}",
        f"sha256   {info['sha256']}",
        f"abi      {info['abi_version']} (manifest from {info['manifest_source']}, {info['machine']}, "
        f"{info['size']} bytes)",
    ]
    if info.get("needed"):
        lines.append(f"needs    {', '.join(info['needed'])}")
    for op in info["operators"]:
        mark = "ok" if op["version_symbol_exported"] else ("sidecar" if "signature" in op else "MISSING")
        lines += [
            "",
            f"operator {op['name']} {op['version']}  [{', '.join(op['devices'])}]",
            f"  entry    {', '.join(sorted(set(op['entry'].values())))}",
            f"  version  {op['version_symbol']} ({mark})",
        ]
        for kind in ("inputs", "outputs"):
            for port in op[kind]:
                dtype = port.get("dtype", "any")
                dtype = "|".join(dtype) if isinstance(dtype, list) else dtype
                opt = " (optional)" if port.get("optional") else ""
                lines.append(
                    f"  {kind[:-1]:<8} {port['name']}: {_shape_text(port.get('shape'))} {dtype}{opt}"
                )
        for attr in op["attrs"]:
            default = f" = {attr['default']!r}" if "default" in attr else " (required)"
            lines.append(f"  attr     {attr['name']}: {attr['type']}{default}")
        for var, names in op["dtype_vars"].items():
            lines.append(f"  dtype    {var} in {{{', '.join(names)}}}")
        for req in op["required_features"]:
            lines.append(f"  requires {req['feature']} >= {req['minimum']:g}")
        for name, values in op["tunables"].items():
            lines.append(f"  tunable  {name}: {values}")
        if "signature" in op:
            lines.append(f"  legacy   {' '.join(op['signature'])} -> {op['returns']}")
    lines += ["", "version symbols: " + (", ".join(info["version_symbols"]) or "none")]
    for problem in info["problems"]:
        lines.append(f"problem: {problem}")
    return "\n".join(lines)
