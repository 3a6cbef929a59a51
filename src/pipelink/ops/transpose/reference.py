"""The transpose family's NumPy reference kernels and their shape rules: transpose, and as_strided (a
strided view of the input's storage copied out, whose every read is checked against the input's size)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import KernelContext
from ...errors import InvalidArgumentError
from ...shapes import is_concrete

__all__ = [
    "infer_transpose",
    "resolve_perm",
    "transpose_bind",
    "check_as_strided",
    "infer_as_strided",
    "as_strided_bind",
]


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


def check_as_strided(in_shape: tuple | None, shape, strides, offset: int) -> None:
    """Check as_strided's attributes: one stride per dim, nothing negative, and (when ``in_shape`` is known)
    every element the view reads inside the input's ``prod(in_shape)`` elements.

    Raises
    ------
    InvalidArgumentError
        ``strides`` of another length than ``shape``; a negative size, stride or offset; a read past the
        input's last element (the message gives the last element read and the input's size).
    """
    shape, strides, offset = tuple(shape), tuple(strides), int(offset)
    if len(strides) != len(shape):
        raise InvalidArgumentError(
            f"as_strided: attribute 'strides' must have one entry per dim of 'shape' {list(shape)} "
            f"(got {list(strides)})",
            attr="strides",
            got=list(strides),
        )
    for attr, value in (("shape", list(shape)), ("strides", list(strides)), ("offset", offset)):
        if min(value if isinstance(value, list) else [value], default=0) < 0:
            raise InvalidArgumentError(
                f"as_strided: attribute {attr!r} must be >= 0 (got {value}); as_strided reads forwards only",
                attr=attr,
                got=value,
            )
    if in_shape is None or not is_concrete(tuple(in_shape)) or 0 in shape:
        return  # checked again once the input's size is known; an empty view reads nothing
    size = math.prod(in_shape)
    last = offset + sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
    if last >= size:
        raise InvalidArgumentError(
            f"as_strided: the view (shape {list(shape)}, strides {list(strides)}, offset {offset}) reads "
            f"element {last}, but x {list(in_shape)} has {size} elements; every read must lie inside x",
            attr="shape",
            got=last,
            limit=size,
        )


def infer_as_strided(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of as_strided: the attribute ``shape``, x's dtype, after :func:`check_as_strided`."""
    check_as_strided(tuple(in_shapes[0]), attrs["shape"], attrs["strides"], attrs["offset"])
    return (tuple(int(d) for d in attrs["shape"]),), (in_dtypes[0],)


def as_strided_bind(ctx: KernelContext):
    shape, strides = tuple(ctx.attrs["shape"]), tuple(ctx.attrs["strides"])
    offset = int(ctx.attrs["offset"])
    check_as_strided(tuple(ctx.in_shapes[0]), shape, strides, offset)
    empty = 0 in shape

    def kernel(inputs, outputs, stream):
        if empty:
            return
        flat = inputs[0].reshape(-1)  # a contiguous input: its storage, in order
        step = flat.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat[offset:], shape, tuple(s * step for s in strides), writeable=False
        )
        np.copyto(outputs[0], view)

    return kernel
