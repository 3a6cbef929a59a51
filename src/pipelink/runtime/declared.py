"""The pipeline's declared input shapes checked against one input signature, at plan time.

A declaration may use dimension symbols (``"shape": ["N", 4]``): a symbol is one value across every
declared input of a run, exactly as a symbol of an operator's ports is at load (``pipelink.shapes``). This
runs once per new input signature; a signature that fails it is never planned, so never cached.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError, ShapeMismatchError
from ..graph.linker import LinkedGraph
from ..shapes import Bindings, match_pattern

__all__ = ["check_declared_shapes", "check_declared_dtype"]


def check_declared_dtype(graph: LinkedGraph, name: str, got: str) -> None:
    """Check input ``name``'s dtype (a dtype name) against its declaration, if it declares one.

    Raises
    ------
    InvalidArgumentError
        Naming the input, both dtypes and what to do.
    """
    decl = (graph.config.inputs or {}).get(name)
    if decl is not None and decl.dtype and got != decl.dtype:
        raise InvalidArgumentError(
            f"input {name!r} has dtype {got}, but the pipeline declares {decl.dtype}; convert it first",
            input=name,
            expected=decl.dtype,
            got=got,
        )


def check_declared_shapes(graph: LinkedGraph, signature: tuple) -> None:
    """Check every declared input shape of ``signature`` (``(name, shape, dtype, contiguous)`` rows).

    Raises
    ------
    InvalidArgumentError
        An input whose rank or fixed dimensions differ from its declaration.
    ShapeMismatchError
        A dimension symbol bound to two values (by two inputs, or twice by one), naming the symbol, the
        inputs and both values.
    """
    decls = graph.config.inputs or {}
    bindings = Bindings()
    for name, shape, _, _ in signature:
        decl = decls.get(name)
        if decl is None or decl.shape is None:
            continue
        want, got = list(decl.shape), list(shape)
        # Literal dimensions and rank first: they are the input's own fault, whatever the others are.
        fixed = zip(want, got, strict=False)
        if len(want) != len(got) or any(isinstance(w, int) and w != g for w, g in fixed):
            raise InvalidArgumentError(
                f"input {name!r} has shape {got}, but the pipeline declares {want}",
                input=name,
                expected=want,
                got=got,
            )
        problem = match_pattern(want, tuple(got), bindings, f"input {name!r}")
        if problem is not None:
            raise ShapeMismatchError(
                f"input {name!r} has shape {got} (declared {want}): dimension {problem.symbol} is "
                f"{problem.got}, but {problem.expected} {problem.reason}; feed inputs whose "
                f"{problem.symbol} agree",
                input=name,
                port=name,
                symbol=problem.symbol,
                expected=problem.expected,
                got=problem.got,
            )
