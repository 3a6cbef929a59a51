"""The transpose family's NumPy reference kernel and its shape rule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError

__all__ = ["infer_transpose", "resolve_perm", "transpose_bind"]


def resolve_perm(perm, ndim: int) -> tuple[int, ...]:
    """The axis permutation of transpose: ``perm`` itself, or the reversed axes when it is empty.

    Raises
    ------
    InvalidArgumentError
        ``perm`` is not a permutation of ``0 .. ndim-1``.
    """
    perm = tuple(perm or ())
    if not perm:
        return tuple(range(ndim - 1, -1, -1))
    if sorted(perm) != list(range(ndim)):
        raise InvalidArgumentError(
            f"transpose: attribute 'perm' must be a permutation of 0..{ndim - 1}, one entry per axis "
            f"of the {ndim}-d input (got {list(perm)})",
            attr="perm",
            got=list(perm),
        )
    return perm


def infer_transpose(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of transpose: x's shape permuted by ``perm``, x's dtype."""
    shape = tuple(in_shapes[0])
    perm = resolve_perm(attrs["perm"], len(shape))
    return (tuple(shape[p] for p in perm),), (in_dtypes[0],)


def transpose_bind(ctx: KernelContext):
    perm = resolve_perm(ctx.attrs["perm"], len(ctx.in_shapes[0]))

    def kernel(inputs, outputs, stream):
        np.copyto(outputs[0], inputs[0].transpose(perm))

    return kernel
