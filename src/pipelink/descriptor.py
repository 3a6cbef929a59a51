"""Operator descriptors: the machine-readable contract of an operator (seed section 3.1).

A descriptor names the operator and its semantic version, its ports (with symbolic shape patterns and
dtype rules), its attributes, the hardware it needs, and one or more *variants* (a CPU kernel, a CUDA
kernel, a native module entry...) chosen per device. It holds no state from a pipeline.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from .dtypes import DTYPES, FLOAT_DTYPES
from .errors import DTypeMismatchError, InvalidArgumentError, PipeLinkError, ShapeMismatchError
from .hardware import Requirement
from .shapes import Bindings, Mismatch, broadcast_shapes, match_pattern, substitute
from .versioning import parse_version

__all__ = [
    "Port",
    "Attr",
    "Variant",
    "VariantDeclined",
    "KernelContext",
    "OperatorDescriptor",
    "REQUIRED",
    "ATTR_TYPES",
    "infer_outputs",
]

REQUIRED = object()
ATTR_TYPES = ("float", "int", "bool", "str", "floats", "ints", "dtype", "any")
ANY_DTYPE = frozenset(DTYPES)


@dataclass(frozen=True)
class Port:
    """An input or output of an operator.

    Parameters
    ----------
    name : str
    shape : list, str, dict or None
        Inputs: a pattern of ints, dimension symbols and at most one ``"..."`` (None: any shape).
        Outputs: the name of an input (same shape), a pattern whose symbols are bound by the inputs, or
        ``{"broadcast": [input names]}``.
    dtype : str or frozenset, optional
        Inputs: a type variable (``"T"``, constrained by the descriptor's ``dtype_vars``), a dtype name, or
        a set of allowed names (None: any). Outputs: a type variable, a dtype name, or ``"attr:NAME"``
        (the dtype given by an attribute).
    optional : bool
        An input that may be left out (the kernel receives None).
    contiguous : bool
        The kernel needs a contiguous buffer; the linker inserts a relayout for a strided view.
    """

    name: str
    shape: Any = None
    dtype: Any = None
    optional: bool = False
    contiguous: bool = True
    doc: str = ""


@dataclass(frozen=True)
class Attr:
    """A named attribute with a type and a default (``REQUIRED`` when it has none)."""

    name: str
    type: str = "float"
    default: Any = REQUIRED
    choices: tuple | None = None
    doc: str = ""

    def coerce(self, value: Any, *, where: str) -> Any:
        """Check and convert one attribute value; raises InvalidArgumentError with the rule and the value."""
        t = self.type
        ok = True
        if t == "float":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            value = float(value) if ok else value
        elif t == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif t == "bool":
            ok = isinstance(value, bool)
        elif t == "str" or t == "dtype":
            ok = isinstance(value, str) and (t == "str" or value in DTYPES)
        elif t in ("floats", "ints"):
            kind = float if t == "floats" else int
            ok = isinstance(value, list | tuple) and all(
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and (kind is float or isinstance(v, int))
                for v in value
            )
            value = tuple(kind(v) for v in value) if ok else value
        if not ok:
            raise InvalidArgumentError(
                f"{where}: attribute {self.name!r} must be of type {t} (got {value!r})", attr=self.name
            )
        if self.choices is not None and value not in self.choices:
            raise InvalidArgumentError(
                f"{where}: attribute {self.name!r} must be one of {list(self.choices)} (got {value!r})",
                attr=self.name,
            )
        return value


@dataclass
class KernelContext:
    """Everything a variant may use to prepare a launch for one stage and one input signature."""

    stage: str
    attrs: Mapping[str, Any]
    in_shapes: tuple
    in_dtypes: tuple
    out_shapes: tuple
    out_dtypes: tuple
    backend: Any
    params: Mapping[str, Any] = field(default_factory=dict)  # tuned launch/compile parameters
    services: Any = None  # runtime services for native modules
    timeout_ms: float | None = None  # the stage's timeout, for kernels that wait (collectives) to honour


Kernel = Callable[[list, list, Any], Any]  # kernel(inputs, outputs, stream)


@dataclass
class Variant:
    """One implementation of an operator.

    ``bind(ctx)`` returns the kernel callable ``kernel(inputs, outputs, stream)`` for one stage and one
    signature; everything that does not change between runs is computed there, not in the kernel.
    """

    device: str  # "cpu" | "cuda"
    bind: Callable[[KernelContext], Kernel]
    name: str = ""
    required_features: tuple[Requirement, ...] = ()
    dtypes: frozenset[str] | None = None  # input dtypes this variant supports (None: all)
    priority: int = 0  # higher is tried first among variants of one device
    source: str = "builtin"  # "builtin" | "python" | path of a native module
    supports_graphs: bool = True
    tunables: Mapping[str, tuple] = field(default_factory=dict)
    origin: Any = None  # the Python function of a Python operator (rebuilt by reference in workers)
    # A host (device "cpu") variant that may run for a device backend on copies staged to host memory and
    # back (Python operators: their functions take NumPy arrays). Without it, a device never picks it.
    host_ok: bool = False


class VariantDeclined(Exception):
    """Raised by a variant's ``bind`` when it cannot serve this stage's configuration (a library that is
    not installed, a geometry the library rejects). Not an error: the registry passes over the variant,
    with the message as the reason the load report gives, and binds the next one that fits
    (:meth:`~pipelink.modules.registry.OperatorRegistry.bind_variant`)."""


@dataclass
class OperatorDescriptor:
    """The contract of one operator version."""

    name: str
    version: Version
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    attrs: tuple[Attr, ...] = ()
    dtype_vars: Mapping[str, frozenset[str]] = field(default_factory=dict)
    required_features: tuple[Requirement, ...] = ()
    variants: list[Variant] = field(default_factory=list)
    infer: Callable[[tuple, tuple, Mapping[str, Any]], tuple] | None = None
    doc: str = ""
    source: str = "builtin"
    onnx: str = ""  # the ONNX operator this one implements ("" when ONNX has none), for docs and import
    # How many of its outputs the operator makes for these attributes (split: its part count), when that
    # is fewer than its ports; a stage naming more is refused at load. None: every port.
    output_count: Callable[[Mapping[str, Any]], int] | None = None
    # Its one output is its one input's elements in the same order under another shape (reshape, identity):
    # a plan may run the stage as a view, no kernel, its output aliasing its input's memory
    # (runtime/executor.plan_views says when). Its kernels must still copy, for stages that cannot be views.
    view: bool = False

    def __post_init__(self):
        self.version = parse_version(self.version)
        self.inputs = tuple(self.inputs)
        self.outputs = tuple(self.outputs)
        self.attrs = tuple(self.attrs)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(sorted({v.device for v in self.variants}))

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    def attr(self, name: str) -> Attr | None:
        return next((a for a in self.attrs if a.name == name), None)

    def resolve_attrs(self, given: Mapping[str, Any], *, where: str) -> dict[str, Any]:
        """Attribute values with defaults filled in; unknown or missing ones are errors."""
        known = {a.name for a in self.attrs}
        unknown = sorted(set(given) - known)
        if unknown:
            hint = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            raise InvalidArgumentError(
                f"{where}: operator {self.name!r} has no attribute {unknown[0]!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else f"; it takes {sorted(known) or 'none'}"),
                attr=unknown[0],
            )
        out: dict[str, Any] = {}
        for a in self.attrs:
            if a.name in given:
                out[a.name] = a.coerce(given[a.name], where=where)
            elif a.default is REQUIRED:
                raise InvalidArgumentError(
                    f"{where}: operator {self.name!r} needs attribute {a.name!r}", attr=a.name
                )
            else:
                out[a.name] = a.default
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description (``pipelink ops``, manifests, ``get_operator_info``)."""

        def port(p: Port) -> dict[str, Any]:
            d: dict[str, Any] = {"name": p.name}
            if p.shape is not None:
                d["shape"] = p.shape
            if p.dtype is not None:
                d["dtype"] = sorted(p.dtype) if isinstance(p.dtype, frozenset) else p.dtype
            if p.optional:
                d["optional"] = True
            return d

        return {
            "name": self.name,
            "version": str(self.version),
            "inputs": [port(p) for p in self.inputs],
            "outputs": [port(p) for p in self.outputs],
            "attrs": [
                {"name": a.name, "type": a.type, **({} if a.default is REQUIRED else {"default": a.default})}
                for a in self.attrs
            ],
            "dtype_vars": {k: sorted(v) for k, v in self.dtype_vars.items()},
            "required_features": [
                {"feature": r.feature, "minimum": r.minimum} for r in self.required_features
            ],
            "devices": list(self.devices),
            "source": self.source,
            "doc": self.doc,
            "onnx": self.onnx,
        }


def infer_outputs(
    desc: OperatorDescriptor,
    in_shapes: tuple,
    in_dtypes: tuple,
    attrs: Mapping[str, Any],
    *,
    stage: str,
    tensors: tuple[str, ...] = (),
) -> tuple[tuple, tuple]:
    """Check the inputs against the ports and compute output shapes and dtypes.

    ``in_shapes[i]`` / ``in_dtypes[i]`` are None for an absent optional input. Shapes may hold symbols.

    Raises
    ------
    ShapeMismatchError, DTypeMismatchError
        Naming the stage, the port, the dimension symbol and both values.
    """
    # Trailing optional ports may be left out of both tuples: they are absent.
    missing = len(desc.inputs) - len(in_shapes)
    in_shapes, in_dtypes = tuple(in_shapes) + (None,) * missing, tuple(in_dtypes) + (None,) * missing
    bindings = Bindings()
    types: dict[str, str] = {}
    type_origin: dict[str, str] = {}
    for i, port in enumerate(desc.inputs):
        shape, dtype = in_shapes[i], in_dtypes[i]
        tensor = tensors[i] if i < len(tensors) else port.name
        if shape is None:
            continue
        where = f"input {port.name!r} (tensor {tensor!r})"
        if dtype is not None:
            _check_dtype(desc, port, dtype, types, type_origin, stage=stage, where=where)
        problem = match_pattern(port.shape, tuple(shape), bindings, where)
        if problem is not None:
            raise _shape_error(stage, port.name, tensor, problem)
    if desc.infer is not None:
        try:
            return desc.infer(tuple(in_shapes), tuple(in_dtypes), attrs)
        except PipeLinkError as e:
            # An operator's own rule knows its ports, not the stage: add it.
            e.context.setdefault("stage", stage)
            if f"stage {stage!r}" not in e.message:
                e.message = f"stage {stage!r}: {e.message}"
                e.args = (e.message,)
            raise
    by_name = {p.name: i for i, p in enumerate(desc.inputs)}
    out_shapes, out_dtypes = [], []
    for port in desc.outputs:
        rule = port.shape
        if isinstance(rule, str):
            shape = in_shapes[by_name[rule]]
        elif isinstance(rule, dict) and "broadcast" in rule:
            shapes = [
                tuple(in_shapes[by_name[n]]) for n in rule["broadcast"] if in_shapes[by_name[n]] is not None
            ]
            result = broadcast_shapes(*shapes)
            if isinstance(result, Mismatch):
                names = [n for n in rule["broadcast"] if in_shapes[by_name[n]] is not None]
                raise ShapeMismatchError(
                    f"stage {stage!r}: inputs {names} with shapes {[list(s) for s in shapes]} do not "
                    f"broadcast ({result.symbol}: {result.expected} vs {result.got})",
                    stage=stage,
                    port=names[-1],
                    symbol=result.symbol,
                    expected=result.expected,
                    got=result.got,
                )
            shape = result
        elif rule is None:
            shape = in_shapes[0]
        else:
            shape = substitute(rule, bindings)
        out_shapes.append(tuple(shape))
        out_dtypes.append(_output_dtype(port, types, attrs, in_dtypes))
    return tuple(out_shapes), tuple(out_dtypes)


def _check_dtype(desc, port, dtype, types, type_origin, *, stage, where):
    rule = port.dtype
    if rule is None:
        return
    if isinstance(rule, str) and rule in desc.dtype_vars:
        allowed = desc.dtype_vars[rule]
        if dtype not in allowed:
            raise DTypeMismatchError(
                f"stage {stage!r} {where}: dtype {dtype} is not supported (allowed: {sorted(allowed)})",
                stage=stage,
                port=port.name,
                expected=sorted(allowed),
                got=dtype,
            )
        bound = types.get(rule)
        if bound is None:
            types[rule], type_origin[rule] = dtype, where
        elif bound != dtype:
            raise DTypeMismatchError(
                f"stage {stage!r} {where}: dtype is {dtype}, but {type_origin[rule]} is {bound}; "
                f"insert a 'cast' stage or feed matching dtypes",
                stage=stage,
                port=port.name,
                symbol=rule,
                expected=bound,
                got=dtype,
            )
        return
    allowed = frozenset([rule]) if isinstance(rule, str) else frozenset(rule)
    if dtype not in allowed:
        raise DTypeMismatchError(
            f"stage {stage!r} {where}: dtype is {dtype}, expected {' or '.join(sorted(allowed))}",
            stage=stage,
            port=port.name,
            expected=sorted(allowed),
            got=dtype,
        )


def _output_dtype(port: Port, types: dict[str, str], attrs: Mapping[str, Any], in_dtypes: tuple) -> str:
    rule = port.dtype
    if rule is None:
        return next(d for d in in_dtypes if d is not None)
    if isinstance(rule, str) and rule.startswith("attr:"):
        return str(attrs[rule[5:]])
    if isinstance(rule, str) and rule in types:
        return types[rule]
    if isinstance(rule, str) and rule in DTYPES:
        return rule
    # A type variable no input bound (all inputs absent): fall back to the first input dtype.
    return next((d for d in in_dtypes if d is not None), "float32")


def _shape_error(stage: str, port: str, tensor: str, problem: Mismatch) -> ShapeMismatchError:
    if problem.symbol == "rank":
        msg = (
            f"stage {stage!r} input {port!r} (tensor {tensor!r}) {problem.reason}, "
            f"got a tensor with {problem.got}"
        )
    elif problem.symbol == "...":
        msg = (
            f"stage {stage!r} input {port!r} (tensor {tensor!r}): leading dimensions are "
            f"{list(problem.got)}, but {list(problem.expected)} {problem.reason}"
        )
    else:
        msg = (
            f"stage {stage!r} input {port!r} (tensor {tensor!r}): dimension {problem.symbol} is "
            f"{problem.got}, but {problem.expected} {problem.reason or 'elsewhere'}"
        )
    return ShapeMismatchError(
        msg,
        stage=stage,
        port=port,
        tensor=tensor,
        symbol=problem.symbol,
        expected=problem.expected,
        got=problem.got,
    )


FLOATS = frozenset(FLOAT_DTYPES)
