"""Sampling at arbitrary points (ONNX GridSample and AffineGrid): descriptors and NumPy references.

grid_sample reads x at the normalised points of a grid (the last grid axis holds the coordinates,
innermost spatial axis first), each point's taps gathered from x flattened over its spatial axes and
weighted per axis (2 taps for linear, 4 for cubic, Keys' kernel with a = -0.75 as resize's), outside
taps by the padding mode. As onnx's reference, nearest rounds halves to even and reflection reflects a
point outside the sampled extent, then its taps; border clamps each tap (as PyTorch and onnxruntime: the
reference, which clamps the point, differs for cubic only). There is no CUDA kernel: on CUDA the
reference runs on staged host copies.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...descriptor import REQUIRED, Attr, KernelContext, OperatorDescriptor, Port
from ...errors import DTypeMismatchError, InvalidArgumentError, ShapeMismatchError
from .._common import FLOATS, NUMERIC, builtin_operator, numpy_dtype
from .._dims import is_known
from .cubic import keys_weights

__all__ = ["descriptors", "GRID_SAMPLE_MODES", "PADDING_MODES", "reflect", "affine_base_grid"]

GRID_SAMPLE_MODES = ("linear", "nearest", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")


def reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Points outside ``[lo, hi]`` reflected by the borders until inside (onnx's ``_gs_reflect``); an empty
    extent (``lo == hi``) maps every point to ``lo``, as PyTorch."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    folds = np.trunc(dx / span)
    rest = dx - folds * span
    # Below and an even number of folds, or above and odd: measured from lo; else from hi.
    from_lo = below != (np.fmod(folds, 2) == 1)
    return np.where(below | above, np.where(from_lo, lo + rest, hi - rest), x)


def _compute_dtype(*dtypes: str) -> np.dtype:
    return np.dtype(np.float64 if "float64" in dtypes else np.float32)


def infer_grid_sample(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of grid_sample: x ``[N, C, D1..Dr]`` and grid ``[N, H1..Hr, r]`` give
    ``[N, C, H1..Hr]``.

    Raises
    ------
    ShapeMismatchError
        x below rank 3, a grid of another rank or batch, a last grid axis other than r, an empty
        spatial axis of x.
    InvalidArgumentError
        mode 'cubic' for other than 2 spatial axes.
    DTypeMismatchError
        mode linear or cubic of an integer x.
    """
    x, grid = tuple(in_shapes[0]), tuple(in_shapes[1])
    mode = attrs["mode"]
    if len(x) < 3:
        raise ShapeMismatchError(
            f"grid_sample: input 'x' must be [N, C, D1, ..., Dr] with r >= 1 (got {list(x)})",
            port="x",
            symbol="rank",
            expected=">= 3",
            got=len(x),
        )
    r = len(x) - 2
    if len(grid) != r + 2 or (is_known(grid[-1]) and grid[-1] != r):
        raise ShapeMismatchError(
            f"grid_sample: input 'grid' must be [N, H1, ..., H{r}, {r}] for the {r + 2}-d x {list(x)} "
            f"(got {list(grid)})",
            port="grid",
            expected=[*x[:1], *[f"H{k + 1}" for k in range(r)], r],
            got=list(grid),
        )
    if is_known(x[0], grid[0]) and x[0] != grid[0]:
        raise ShapeMismatchError(
            f"grid_sample: 'grid' has batch {grid[0]}, but 'x' has {x[0]}",
            port="grid",
            symbol="N",
            expected=x[0],
            got=grid[0],
        )
    if any(d == 0 for d in x[2:]):
        raise ShapeMismatchError(
            f"grid_sample: cannot sample the empty spatial axis of 'x' {list(x)}", port="x", got=list(x)
        )
    if mode == "cubic" and r != 2:
        raise InvalidArgumentError(
            f"grid_sample: mode 'cubic' samples 2 spatial axes (a 4-d x), as ONNX's spec (got {r}, x "
            f"{list(x)}); use mode 'linear' or 'nearest'",
            attr="mode",
            got=mode,
        )
    if mode != "nearest" and in_dtypes[0] not in FLOATS:
        raise DTypeMismatchError(
            f"grid_sample: mode {mode!r} needs a float input 'x' (got {in_dtypes[0]}); use mode "
            "'nearest' or cast",
            port="x",
            expected=sorted(FLOATS),
            got=in_dtypes[0],
        )
    return ((x[0], x[1], *grid[1:-1]),), (in_dtypes[0],)


def _taps(coord: np.ndarray, size: int, mode: str, padding: str, align: bool) -> list[tuple]:
    """Along one axis, each tap of every point as ``(index, weight, inside)``: the index within the axis,
    the weight (None for nearest) and, for padding 'zeros', where the tap lies inside x (None: everywhere;
    linear and cubic fold it into the weight). ``coord`` is in pixels."""
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if mode == "nearest":
        coord = np.rint(coord)  # halves to even, as onnx's reference and PyTorch
    # border clamps each tap, not the point (PyTorch's and onnxruntime's rule; onnx's reference clamps a
    # point beyond [lo, hi] first, which for linear and nearest gives the same, for cubic does not).
    if padding == "reflection":
        coord = reflect(coord, lo, hi)
    if mode == "nearest":
        starts, weights = [np.trunc(coord)], [None]
    else:
        base = np.floor(coord)
        frac = coord - base
        if mode == "linear":
            starts, weights = [base, base + 1], [1 - frac, frac]
        else:  # resize's Keys kernel (a = -0.75) at the distance to each of the 4 taps
            starts = [base + k for k in (-1, 0, 1, 2)]
            weights = list(np.moveaxis(keys_weights(frac, -0.75).astype(coord.dtype), -1, 0))
    taps = []
    for start, weight in zip(starts, weights, strict=True):
        # A NaN or huge coordinate becomes an index just outside: the padding rule then applies.
        index = np.clip(np.nan_to_num(start, nan=-1.0), -2.0, size + 1.0)
        if padding == "reflection":
            index = np.trunc(reflect(index, lo, hi))
        inside = None
        if padding == "zeros":
            inside = (index >= 0) & (index < size)
            if weight is not None:
                weight, inside = np.where(inside, weight, 0), None
        taps.append((np.clip(index, 0, size - 1).astype(np.intp), weight, inside))
    return taps


def _grid_sample_bind(ctx: KernelContext):
    x_shape, grid_shape = tuple(ctx.in_shapes[0]), tuple(ctx.in_shapes[1])
    n, c, spatial = x_shape[0], x_shape[1], x_shape[2:]
    points = int(np.prod(grid_shape[1:-1], dtype=np.int64))
    mode, padding, align = ctx.attrs["mode"], ctx.attrs["padding_mode"], bool(ctx.attrs["align_corners"])
    cdt = _compute_dtype(*ctx.in_dtypes)
    value_dtype = numpy_dtype(ctx.in_dtypes[0]) if mode == "nearest" else cdt
    strides = [int(np.prod(spatial[k + 1 :], dtype=np.int64)) for k in range(len(spatial))]
    batch = np.arange(n)[:, None]

    def kernel(inputs, outputs, stream):
        if outputs[0].size == 0:
            return
        # x as [N, points of x, C]: one gather per tap combination reads every channel of a point.
        values = np.ascontiguousarray(inputs[0].reshape(n, c, -1).transpose(0, 2, 1), dtype=value_dtype)
        grid = np.asarray(inputs[1], dtype=cdt).reshape(n, points, len(spatial))
        with np.errstate(invalid="ignore", over="ignore"):
            per_axis = []
            for k, size in enumerate(spatial):
                g = grid[..., len(spatial) - 1 - k]  # the grid lists the innermost axis first
                coord = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
                per_axis.append(_taps(coord, size, mode, padding, align))
            total = None
            for combo in itertools.product(*per_axis):
                flat = sum(index * stride for (index, _, _), stride in zip(combo, strides, strict=True))
                picked = values[batch, flat]
                if mode == "nearest":  # a copy of x's value (exact for any dtype), or 0 outside
                    masks = [inside for _, _, inside in combo if inside is not None]
                    total = np.where(np.logical_and.reduce(masks)[..., None], picked, 0) if masks else picked
                    continue
                picked = picked * np.prod([w for _, w, _ in combo], axis=0)[..., None]
                total = picked if total is None else total + picked
        np.copyto(outputs[0].reshape(n, c, points), total.transpose(0, 2, 1), casting="unsafe")

    return kernel


def affine_base_grid(sizes: tuple[int, ...], align: bool) -> np.ndarray:
    """The homogeneous points ``[x, y, (z,) 1]`` of a grid of ``sizes`` (outermost first) in [-1, 1],
    as ``[prod(sizes), r + 1]`` float64, the innermost axis's coordinate first (onnx's reference)."""
    axes = []
    for size in sizes:
        i = np.arange(size, dtype=np.float64)
        if size <= 1:
            axes.append(np.zeros(size))  # PyTorch's one point at the centre (onnx's reference divides by 0)
        else:
            axes.append(-1 + 2 * i / (size - 1) if align else (2 * i + 1) / size - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([*(m.reshape(-1) for m in reversed(mesh)), np.ones(mesh[0].size)], axis=-1)


def infer_affine_grid(in_shapes: tuple, in_dtypes: tuple, attrs: Mapping[str, Any]) -> tuple[tuple, tuple]:
    """Output rule of affine_grid: theta ``[N, 2, 3]`` and size ``[N, C, H, W]`` give ``[N, H, W, 2]``;
    theta ``[N, 3, 4]`` and size ``[N, C, D, H, W]`` give ``[N, D, H, W, 3]``.

    Raises
    ------
    InvalidArgumentError
        A size of other than 4 or 5 values, or a negative one.
    ShapeMismatchError
        theta not ``[N, r, r + 1]`` for the size's r, or its N not the size's.
    """
    theta, size = tuple(in_shapes[0]), tuple(attrs["size"])
    if len(size) not in (4, 5) or any(s < 0 for s in size):
        raise InvalidArgumentError(
            f"affine_grid: 'size' must be [N, C, H, W] or [N, C, D, H, W], none negative (got {list(size)})",
            attr="size",
            got=list(size),
        )
    r = len(size) - 2
    expected = (r, r + 1)
    if len(theta) != 3 or any(is_known(d) and d != e for d, e in zip(theta[1:], expected, strict=True)):
        raise ShapeMismatchError(
            f"affine_grid: input 'theta' must be [N, {r}, {r + 1}] for the {r}-d size {list(size)} "
            f"(got {list(theta)})",
            port="theta",
            expected=["N", r, r + 1],
            got=list(theta),
        )
    if is_known(theta[0]) and theta[0] != size[0]:
        raise ShapeMismatchError(
            f"affine_grid: 'theta' has batch {theta[0]}, but 'size' {list(size)} says {size[0]}",
            port="theta",
            symbol="N",
            expected=size[0],
            got=theta[0],
        )
    return ((theta[0], *size[2:], r),), (in_dtypes[0],)


def _affine_grid_bind(ctx: KernelContext):
    size = tuple(ctx.attrs["size"])
    base = affine_base_grid(size[2:], bool(ctx.attrs["align_corners"]))
    out_shape = tuple(ctx.out_shapes[0])

    def kernel(inputs, outputs, stream):
        theta = np.asarray(inputs[0], dtype=np.float64)
        # Each point p of the base grid moved by theta: grid[n, p] = theta[n] @ p, in float64.
        np.copyto(outputs[0], np.einsum("pk,nik->npi", base, theta).reshape(out_shape), casting="unsafe")

    return kernel


def descriptors() -> list[OperatorDescriptor]:
    """Fresh descriptors of grid_sample and affine_grid (one set per registry)."""
    align = Attr(
        "align_corners",
        "bool",
        False,
        doc="-1 and 1 are the corner pixels' centres (else their outer edges)",
    )
    return [
        builtin_operator(
            "grid_sample",
            doc="Sample x [N, C, D1..Dr] at the normalised points of grid [N, H1..Hr, r]: y [N, C, H1..Hr].",
            inputs=[
                Port("x", dtype="T", doc="[N, C, D1, ..., Dr], r >= 1"),
                Port("grid", dtype="G", doc="[N, H1, ..., Hr, r]: points in [-1, 1], innermost axis first"),
            ],
            outputs=[Port("y", dtype="T", doc="[N, C, H1, ..., Hr]")],
            attrs=[
                Attr(
                    "mode",
                    "str",
                    "linear",
                    choices=GRID_SAMPLE_MODES,
                    doc="'linear' blends 2 taps per axis, 'cubic' 4 (2 spatial axes only); both need floats",
                ),
                Attr(
                    "padding_mode",
                    "str",
                    "zeros",
                    choices=PADDING_MODES,
                    doc="taps outside x: 0, the edge's value, or reflected into x",
                ),
                align,
            ],
            dtype_vars={"T": NUMERIC, "G": FLOATS},
            infer=infer_grid_sample,
            bind=_grid_sample_bind,
            onnx="GridSample",
        ),
        builtin_operator(
            "affine_grid",
            doc="The sampling grid of affine matrices theta [N, 2, 3] (or [N, 3, 4]): [N, H, W, 2] (or 3-d).",
            inputs=[Port("theta", dtype="T", doc="[N, 2, 3] (2-d) or [N, 3, 4] (3-d)")],
            outputs=[Port("grid", dtype="T", doc="[N, H, W, 2] or [N, D, H, W, 3]")],
            attrs=[
                Attr("size", "ints", REQUIRED, doc="[N, C, H, W] or [N, C, D, H, W] of the sampled image"),
                align,
            ],
            dtype_vars={"T": FLOATS},
            infer=infer_affine_grid,
            bind=_affine_grid_bind,
            onnx="AffineGrid",
        ),
    ]
