"""Python operators: ``@pl.operator`` turns a function into a registered descriptor with one variant.

The function receives its input arrays and preallocated output arrays and writes outputs in place (the
memory contract); it never allocates or returns its results.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..descriptor import REQUIRED, Attr, KernelContext, OperatorDescriptor, Port, Variant
from ..dtypes import DTYPES
from ..errors import InvalidArgumentError
from ..hardware import Requirement
from .registry import OperatorRegistry, registry

__all__ = ["operator", "python_kernel"]

_TYPE_OF = {float: "float", int: "int", bool: "bool", str: "str"}


def python_kernel(fn: Callable, *, n_in: int) -> Callable[[KernelContext], Callable]:
    """A ``Variant.bind`` for a function ``fn(*inputs, *outputs, stream=None, **attrs)``."""
    takes_stream = _accepts(fn, "stream")

    def bind(ctx: KernelContext):
        attrs = dict(ctx.attrs)
        if takes_stream:

            def kernel(inputs, outputs, stream):
                fn(*inputs, *outputs, stream=stream, **attrs)

        else:

            def kernel(inputs, outputs, stream):
                fn(*inputs, *outputs, **attrs)

        return kernel

    return bind


def _accepts(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _ports(
    spec: Sequence[str] | Mapping[str, Any],
    shapes: Mapping[str, Any],
    dtypes: Mapping[str, Any],
    optional: Sequence[str],
    what: str,
) -> tuple[Port, ...]:
    if isinstance(spec, str):
        raise InvalidArgumentError(f"{what} must be a list of port names or a dict (got the string {spec!r})")
    items = spec.items() if isinstance(spec, Mapping) else ((n, None) for n in spec)
    ports = []
    for name, shape in items:
        ports.append(
            Port(name, shape=shapes.get(name, shape), dtype=dtypes.get(name), optional=name in optional)
        )
    return tuple(ports)


def operator(
    name: str,
    *,
    version: str = "1.0.0",
    inputs: Sequence[str] | Mapping[str, Any],
    outputs: Sequence[str] | Mapping[str, Any],
    shapes: Mapping[str, Any] | None = None,
    dtypes: Mapping[str, Any] | None = None,
    dtype_vars: Mapping[str, Sequence[str]] | None = None,
    attrs: Mapping[str, Any] | Sequence[Attr] | None = None,
    device: str = "cpu",
    optional: Sequence[str] = (),
    required_features: Sequence[str | Requirement] = (),
    registry_: OperatorRegistry | None = None,
    doc: str | None = None,
) -> Callable:
    """Register a Python function as an operator.

    Parameters
    ----------
    name, version : str
        The operator's name and semantic version.
    inputs, outputs : list of str, or dict of name -> shape pattern
        Ports, in the order the function takes them (inputs first, then outputs).
    shapes : dict, optional
        Output shape rules: ``{"y": "x"}`` (same as input x), ``{"c": ["M", "N"]}``,
        ``{"z": {"broadcast": ["a", "b"]}}``. An output without a rule has the first input's shape.
    dtypes : dict, optional
        Port dtype rules (a dtype name, a set of names, or a type variable of ``dtype_vars``). By default
        every input and output shares one type variable ``"T"`` over all dtypes.
    attrs : dict of name -> default, or list of Attr
        Attribute defaults; the type comes from the default (``REQUIRED`` for none).
    device : str
        ``"cpu"`` (arrays are NumPy) or ``"cuda"`` (arguments are ``pl.Tensor`` and ``stream=``). A
        ``"cpu"`` operator also runs in pipelines on a GPU: PipeLink copies its inputs to host memory and
        its outputs back, and ``load_report.staged`` lists the stage.

    Returns
    -------
    callable
        A decorator returning the function unchanged, with ``.descriptor`` set.
    """
    shapes = dict(shapes or {})
    in_names = list(inputs)
    out_names = list(outputs)
    if dtypes is None:
        dtypes = {n: "T" for n in in_names + out_names}
        dtype_vars = {"T": list(DTYPES)}
    attr_list = _attrs(attrs)
    if device not in ("cpu", "cuda"):
        raise InvalidArgumentError(f"operator {name!r}: device must be 'cpu' or 'cuda' (got {device!r})")
    reqs = tuple(r if isinstance(r, Requirement) else Requirement(str(r)) for r in required_features)

    def decorate(fn: Callable) -> Callable:
        desc = OperatorDescriptor(
            name=name,
            version=version,
            inputs=_ports(inputs, {}, dtypes, optional, "inputs"),
            outputs=_ports(outputs, shapes, dtypes, (), "outputs"),
            attrs=attr_list,
            dtype_vars={k: frozenset(v) for k, v in (dtype_vars or {}).items()},
            variants=[
                Variant(
                    device=device,
                    bind=python_kernel(fn, n_in=len(in_names)),
                    name=f"python:{fn.__name__}",
                    source="python",
                    required_features=reqs,
                    origin=fn,
                    host_ok=device == "cpu",
                )
            ],
            doc=doc or (inspect.getdoc(fn) or "").split("\n")[0],
            source="python",
        )
        (registry_ or registry).register(desc, replace=True)
        fn.descriptor = desc
        return fn

    return decorate


def _attrs(attrs) -> tuple[Attr, ...]:
    if not attrs:
        return ()
    if not isinstance(attrs, Mapping):
        return tuple(attrs)
    out = []
    for key, default in attrs.items():
        if isinstance(default, Attr):
            out.append(default)
        elif default is REQUIRED:
            out.append(Attr(key, "any", REQUIRED))
        elif isinstance(default, list | tuple):
            kind = "ints" if all(isinstance(v, int) for v in default) else "floats"
            out.append(Attr(key, kind, tuple(default)))
        else:
            out.append(Attr(key, _TYPE_OF.get(type(default), "any"), default))
    return tuple(out)
