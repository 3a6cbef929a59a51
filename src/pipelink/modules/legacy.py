"""Binding legacy kernels (their own C signature) through a declared argument template in a sidecar.

A sidecar (``libfoo.so.pipelink.json``) is a manifest whose operators name a ``symbol`` and a
``signature``: one template item per C argument, in order. The kernel's source is never changed.

Template language (``DTYPE`` is one of float32, float64, int32, int64, uint8, bool)::

    in:NAME               const void*   data of input port NAME (NULL for an absent optional input)
    out:NAME              void*         data of output port NAME
    shape:[A,B,...]:DTYPE const DTYPE*  a host array of dimensions: symbols bound by the ports' shape
                                        patterns, or integer literals (DTYPE int32 or int64)
    dim:SYMBOL:DTYPE      DTYPE         one dimension, by value
    attr:NAME:DTYPE       DTYPE         the value of attribute NAME, by value
    scalar_ptr:NAME:DTYPE const DTYPE*  a pointer to a host scalar: attribute NAME's value, or the data of
                                        input port NAME (CPU: passed as is; CUDA: copied to the host on
                                        every call, which synchronises, so prefer ``in:NAME`` there)
    stream                void*         the stream (cudaStream_t; NULL on the CPU)
    context               void*         the host-services table (PipeLinkServices*)
    null                  void*         NULL

``"returns": "void"`` (default) or ``"int"`` (a PipeLink status code; non-zero raises).
Example: the seed's ``pipeLinkGemm(A, B, C, shape, stream)`` is
``["in:A", "in:B", "out:C", "shape:[M,N,K]:int32", "stream"]``.
"""

from __future__ import annotations

import ctypes
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..descriptor import KernelContext
from ..errors import InvalidArgumentError, ModuleLoadError, ShapeMismatchError
from ..shapes import ELLIPSIS, Bindings, match_pattern
from .manifest import OpSpec
from .native import status_error
from .services import data_ptr, device_of, make_services, stream_handle

__all__ = ["TemplateItem", "parse_template", "legacy_bind", "SCALAR_TYPES"]

SCALAR_TYPES = {
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "bool": ctypes.c_bool,
}
_ITEM_RE = re.compile(
    r"^(?P<kind>in|out|dim|attr|scalar_ptr):(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"(?::(?P<dtype>[a-z0-9]+))?$"
)
_SHAPE_RE = re.compile(r"^shape:\[(?P<dims>[^\]]*)\]:(?P<dtype>int32|int64)$")


@dataclass(frozen=True)
class TemplateItem:
    """One C argument: its kind, the port/attr/symbol it names, its C type and, for shape, its dims."""

    kind: str
    name: str = ""
    dtype: str = ""
    dims: tuple = ()


def parse_template(spec: OpSpec, path: Path) -> list[TemplateItem]:
    """Parse and check a signature against the operator's ports, attrs and shape symbols.

    Raises
    ------
    ModuleLoadError
        An unknown item, a name that is no port or attribute, a symbol no port binds, a bad dtype.
    """
    inputs = {p.name for p in spec.inputs}
    outputs = {p.name for p in spec.outputs}
    attrs = {a.name for a in spec.attrs}
    symbols = {
        d
        for p in spec.inputs + spec.outputs
        if isinstance(p.shape, list)
        for d in p.shape
        if isinstance(d, str) and d != ELLIPSIS
    }

    def fail(item: str, why: str) -> ModuleLoadError:
        return ModuleLoadError(
            f"native module {path}: operator {spec.name!r} signature item {item!r}: {why}; "
            f"see the template language in docs/native-modules.md",
            module=str(path),
            operator=spec.name,
        )

    items = []
    for text in spec.signature or ():
        if text in ("stream", "context", "null"):
            items.append(TemplateItem(text))
            continue
        m = _SHAPE_RE.match(text)
        if m:
            dims = tuple(
                int(d) if d.strip().lstrip("-").isascii() and d.strip().lstrip("-").isdigit() else d.strip()
                for d in m["dims"].split(",")
                if d.strip()
            )
            unknown = [d for d in dims if isinstance(d, str) and d not in symbols]
            if unknown:
                raise fail(
                    text, f"symbol {unknown[0]!r} appears in no port's shape pattern {sorted(symbols)}"
                )
            items.append(TemplateItem("shape", dtype=m["dtype"], dims=dims))
            continue
        m = _ITEM_RE.match(text)
        if not m:
            raise fail(
                text,
                "not a template item (in:, out:, shape:[..]:T, dim:, attr:, scalar_ptr:, stream, "
                "context, null)",
            )
        kind, name, dtype = m["kind"], m["name"], m["dtype"] or ""
        if kind in ("dim", "attr", "scalar_ptr") and dtype not in SCALAR_TYPES:
            raise fail(text, f"needs a C type, one of {sorted(SCALAR_TYPES)}")
        if kind == "in" and name not in inputs or kind == "out" and name not in outputs:
            raise fail(text, f"{name!r} is not an {'input' if kind == 'in' else 'output'} port")
        if kind == "dim" and name not in symbols:
            raise fail(text, f"symbol {name!r} appears in no port's shape pattern")
        if kind == "attr" and name not in attrs or kind == "scalar_ptr" and name not in attrs | inputs:
            raise fail(text, f"{name!r} is not an attribute{' or input' if kind == 'scalar_ptr' else ''}")
        items.append(TemplateItem(kind, name, dtype))
    return items


def _bind_symbols(spec: OpSpec, ctx: KernelContext) -> dict[str, Any]:
    bindings = Bindings()
    ports = list(zip(spec.inputs, ctx.in_shapes, strict=False)) + list(
        zip(spec.outputs, ctx.out_shapes, strict=False)
    )
    for port, shape in ports:
        if shape is None or not isinstance(port.shape, list):
            continue
        problem = match_pattern(port.shape, tuple(shape), bindings, f"port {port.name!r}")
        if problem is not None:
            raise ShapeMismatchError(
                f"stage {ctx.stage!r}: port {port.name!r} of {spec.name!r}: dimension {problem.symbol} is "
                f"{problem.got}, but {problem.expected} elsewhere",
                stage=ctx.stage,
                port=port.name,
                symbol=problem.symbol,
                expected=problem.expected,
                got=problem.got,
            )
    return bindings.values


def legacy_bind(path: Path, spec: OpSpec, device: str, fn: Any):
    """A ``Variant.bind`` that calls ``fn`` with the arguments the signature template describes."""
    items = parse_template(spec, path)
    argtypes = []
    for item in items:
        if item.kind in ("dim", "attr"):
            argtypes.append(SCALAR_TYPES[item.dtype])
        else:
            argtypes.append(ctypes.c_void_p)
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int if spec.returns == "int" else None
    in_index = {p.name: i for i, p in enumerate(spec.inputs)}
    out_index = {p.name: i for i, p in enumerate(spec.outputs)}

    def bind(ctx: KernelContext):
        values = _bind_symbols(spec, ctx)
        attrs = {**ctx.attrs, **ctx.params}
        services = make_services(ctx, device_of(ctx, device)[0])
        static: list[Any] = [None] * len(items)
        keep: list[Any] = [services, fn]
        in_pos, out_pos, stream_pos, host_scalars = [], [], [], []
        for pos, item in enumerate(items):
            if item.kind == "in":
                in_pos.append((pos, in_index[item.name]))
            elif item.kind == "out":
                out_pos.append((pos, out_index[item.name]))
            elif item.kind == "stream":
                stream_pos.append(pos)
            elif item.kind == "context":
                static[pos] = services.pointer.value
            elif item.kind == "shape":
                dims = [d if isinstance(d, int) else values.get(d) for d in item.dims]
                if any(not isinstance(d, int | np.integer) for d in dims):
                    raise InvalidArgumentError(
                        f"stage {ctx.stage!r}: {spec.name!r} shape argument {list(item.dims)}"
                        f" has unbound dimensions {dims}"
                    )
                block = (SCALAR_TYPES[item.dtype] * len(dims))(*dims)
                keep.append(block)
                static[pos] = ctypes.addressof(block)
            elif item.kind == "dim":
                static[pos] = int(values[item.name])
            elif item.kind == "attr":
                static[pos] = attrs[item.name]
            elif item.kind == "scalar_ptr" and item.name in attrs:
                cell = SCALAR_TYPES[item.dtype](attrs[item.name])
                keep.append(cell)
                static[pos] = ctypes.addressof(cell)
            elif item.kind == "scalar_ptr":
                if device == "cpu":
                    in_pos.append((pos, in_index[item.name]))
                else:
                    cell = SCALAR_TYPES[item.dtype]()
                    keep.append(cell)
                    static[pos] = ctypes.addressof(cell)
                    host_scalars.append(
                        [cell, in_index[item.name], np.dtype(item.dtype.replace("bool", "bool_")), None]
                    )
        name, stage, ptr, returns_status = spec.name, ctx.stage, data_ptr, spec.returns == "int"
        # A device scalar read on the host cannot be captured: a graph would replay the value of its capture.
        graph_safe = not host_scalars

        def kernel(inputs, outputs, stream, _keep=keep):
            args = list(static)
            for pos, i in in_pos:
                args[pos] = ptr(inputs[i])
            for pos, i in out_pos:
                args[pos] = ptr(outputs[i])
            for pos in stream_pos:
                args[pos] = stream_handle(stream)
            for entry in host_scalars:
                _read_host_scalar(entry, inputs[entry[1]])
            status = fn(*args)
            if returns_status and status:
                raise status_error(status, module=path, operator=name, stage=stage)

        kernel.graph_safe = graph_safe
        return kernel

    return bind


def _read_host_scalar(entry: list, x: Any) -> None:
    """Copy the device scalar ``x`` into its host cell (``entry``: cell, input index, dtype, last source).

    Reading a device value waits for the device. A PyTorch tensor unchanged since the last read (the same
    object, its version counter unchanged: PyTorch bumps it on every in-place write) is not read again.
    """
    cell, _, dt, last = entry
    owner = getattr(x, "_owner", None)
    version = getattr(owner, "_version", None)
    if last is not None and version is not None and last[0]() is owner and last[1:] == (version, x.ptr):
        return
    cell.value = np.asarray(x.cpu() if hasattr(x, "cpu") else x).astype(dt).reshape(-1)[0].item()
    if version is not None:
        try:
            entry[3] = (weakref.ref(owner), version, x.ptr)
        except TypeError:  # an owner without weak references: read every run
            entry[3] = None
