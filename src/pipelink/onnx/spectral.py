"""ONNX DFT (opsets 17 and 20) and STFT (opset 17) lowered at import onto PipeLink's operators: the
transform along one axis is a ``matmul`` of the signal, viewed ``[..., N * channels]``, by a constant
matrix of cosines and sines built here (``reshape`` around it, ``transpose`` when the axis is not the last
signal axis); STFT's frames are a ``gather`` of constant frame indices, its window folded into the matrix
(a constant window) or a ``mul`` (a computed one).

It adds no kernel and computes nothing at run time itself. What those operators cannot express (a
computed dft_length, axis, frame_step or frame_length; an unknown dim the matrices depend on; a
combination the spec rules out) is refused with the converter's ``Unsupported``. The matrices are bounded
(``lowerings.table_problem``) before they are built.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import get_dtype
from .graph import Unsupported
from .lowerings import _check_table, _constant, _dtype, _shape, _show

__all__ = ["dft", "stft"]

#: The dtypes the spec types DFT's and STFT's signal with (and PipeLink's matmul takes).
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _flag(node: Any, name: str, default: int) -> bool:
    value = int(node.attrs.get(name, default))
    if value not in (0, 1):
        raise Unsupported(f"attribute {name}={value}; the spec allows 0 and 1")
    return bool(value)


def _int_input(g: Any, node: Any, index: int, what: str) -> int | None:
    """The scalar integer of constant input ``index`` (None when absent)."""
    value = g.const(node, index, what)
    if value is None:
        return None
    value = np.asarray(value)
    if value.dtype.kind not in "iu" or value.size != 1:
        raise Unsupported(
            f"input {index} ({what}, {node.inputs[index]!r}) must be one integer, a scalar (got "
            f"{value.dtype} of shape {list(value.shape)})"
        )
    return int(value.reshape(-1)[0])


def _signal(g: Any, node: Any, what: str) -> tuple[str, tuple]:
    """The signal's dtype and shape, after refusing what the matrices cannot be built for."""
    x = node.inputs[0]
    dtype, shape = _dtype(g, x), _shape(g, x)
    if dtype not in _FLOATS:
        raise Unsupported(f"{what} input of dtype {dtype or 'unknown'}; the spec's are {', '.join(_FLOATS)}")
    if shape is None or len(shape) < 2:
        raise Unsupported(f"{what} needs the input's rank, at least 2 (got {_show(shape)})")
    if shape[-1] not in (1, 2):
        raise Unsupported(
            f"{what} input {_show(shape)}: its last dim must be known, 1 (real) or 2 (complex: real, "
            "imaginary)"
        )
    return dtype, shape


def _bins(n_fft: int, inverse: bool, onesided: bool) -> tuple[int, int, int]:
    """The transform's (input positions it reads, output positions, output channels) along the axis:
    IRFFT reads the ``n_fft // 2 + 1`` one-sided bins and gives a real signal of ``n_fft``; RFFT gives
    ``n_fft // 2 + 1`` complex bins; the others read and give ``n_fft`` complex values."""
    half = n_fft // 2 + 1
    if inverse and onesided:
        return half, n_fft, 1
    return n_fft, half if onesided else n_fft, 2


def _matrix(length: int, channels: int, fft: tuple, dtype: str, window: Any = None) -> np.ndarray:
    """The transform ``fft`` = (n_fft, inverse, onesided) as a ``[length * channels, bins *
    out_channels]`` matrix in ``dtype``, for a signal of ``length`` positions along the axis (read as
    zero-padded or cropped to the transform's), row ``m * channels + c`` (c: 0 real, 1 imaginary), column
    ``k * out_channels + c'``; its rows scaled by a constant ``window`` (one per position) where given.

    ``y[k] = sum_m x[m] e^(s 2 pi i k m / n_fft)``, s = -1 forward, +1 inverse (scaled ``1 / n_fft``):
    ``(xr + i xi)(cos + s i sin)``. IRFFT keeps the real part of the Hermitian sum over the one-sided
    bins: bin 0 (and n_fft / 2 when even) once, every other bin twice (numpy's ``irfft``). The angles are
    float64, the matrix is written in ``dtype`` (no float64 copy of it)."""
    n_fft, inverse, onesided = fft
    read, bins, out_channels = _bins(n_fft, inverse, onesided)
    used = min(length, read)
    m = np.arange(used, dtype=np.int64)[:, None]
    k = np.arange(bins, dtype=np.int64)[None, :]
    theta = 2 * np.pi * ((m * k) % n_fft) / n_fft  # reduced exactly before the angle is formed
    sign, scale = (1.0, np.full((used, 1), 1.0 / n_fft)) if inverse else (-1.0, np.ones((used, 1)))
    if out_channels == 1:  # IRFFT: Re((xr + i xi)(cos + i sin)) * weight
        scale = scale * np.where((m == 0) | (2 * m == n_fft), 1.0, 2.0)
    if window is not None:
        scale = scale * np.asarray(window, dtype=np.float64).reshape(-1)[:used, None]
    cos, sin = np.cos(theta) * scale, np.sin(theta) * scale
    w = np.zeros((length, channels, bins, out_channels), dtype=get_dtype(dtype).numpy)
    if out_channels == 1:
        w[:used, 0, :, 0] = cos
        if channels == 2:
            w[:used, 1, :, 0] = -sin
    else:
        w[:used, 0, :, 0] = cos
        w[:used, 0, :, 1] = sign * sin
        if channels == 2:
            w[:used, 1, :, 0] = -sign * sin
            w[:used, 1, :, 1] = cos
    return w.reshape(length * channels, bins * out_channels)


def _transform(g: Any, node: Any, x: str, rank: int, axis: int, plan: tuple, dtype: str) -> None:
    """The node's output: ``x`` (rank ``rank``, the transform along ``axis``, the channels last) times the
    plan's matrix (``plan``: matrix, bins, out_channels): ``transpose`` the axis next to the channels (when
    it is not), ``reshape`` to ``[..., N * channels]``, ``matmul``, ``reshape`` to ``[..., bins,
    out_channels]``, ``transpose`` back."""
    matrix, bins, out_channels = plan
    y = node.outputs[0]
    moved = axis != rank - 2
    perm = [d for d in range(rank) if d not in (axis, rank - 1)] + [axis, rank - 1]
    if moved:
        g.stage(node, "transpose", [x], [f"{y}__dft_moved"], perm=perm)
        x = f"{y}__dft_moved"
    lead = [0] * (rank - 2)  # a 0 copies the dim: the leading dims may be known only at run time
    flat, product = f"{y}__dft_signal", f"{y}__dft_product"
    shaped = f"{y}__dft_shaped" if moved else y
    g.stage(node, "reshape", [x], [flat], shape=[*lead, matrix.shape[0]])
    g.stage(node, "matmul", [flat, _constant(g, f"{y}__dft_matrix", matrix, dtype)], [product])
    g.stage(node, "reshape", [product], [shaped], shape=[*lead, bins, out_channels])
    if moved:
        g.stage(node, "transpose", [shaped], [y], perm=[int(p) for p in np.argsort(perm)])


def _plan(what: str, length: int, channels: int, dtype: str, fft: tuple, window: Any = None) -> tuple:
    """The transform's (matrix, bins, out_channels) for ``fft`` = (n_fft, inverse, onesided) (see
    :func:`_matrix`), bounded before it is built."""
    _, bins, out_channels = _bins(*fft)
    _check_table(f"{what}'s transform matrix", (length * channels, bins * out_channels), dtype)
    return _matrix(length, channels, fft, dtype, window), bins, out_channels


# -- DFT (opsets 17, 20) ----------------------------------------------------------------------------
def dft(g: Any, node: Any) -> None:
    """DFT along one axis as onnx's reference computes it (numpy's ``fft``, ``ifft``, ``irfft``; a
    one-sided forward transform the first ``n // 2 + 1`` bins): one ``matmul`` by a constant matrix
    (``reshape`` around it; ``transpose`` when the axis is not the last signal axis).

    The input ``[..., N, 1]`` (real) or ``[..., N, 2]`` (complex); dft_length zero-pads or crops the
    signal (default N; ``2 * (N - 1)`` for IRFFT); inverse scales by ``1 / dft_length``; onesided gives
    ``dft_length // 2 + 1`` bins forward (RFFT, real input), a real ``[..., dft_length, 1]`` inverse
    (IRFFT, complex input). The axis is an attribute before opset 20 (default 1), input 2 from it
    (default -2), in ``[-r, -2]`` or ``[0, r - 2]``. Needs the rank, N and the channels known, and
    dft_length and the axis constants; computes in the input's dtype, as the matmul accumulates."""
    dtype, shape = _signal(g, node, "DFT")
    rank = len(shape)
    axis = _dft_axis(g, node, rank)
    inverse, onesided = _flag(node, "inverse", 0), _flag(node, "onesided", 0)
    channels, length = shape[-1], shape[axis]
    if onesided and channels != (2 if inverse else 1):
        kind = (
            "IRFFT (onesided=1, inverse=1) takes a complex" if inverse else "RFFT (onesided=1) takes a real"
        )
        raise Unsupported(
            f"DFT input {_show(shape)}: {kind} input only (the spec), last dim {2 if inverse else 1}"
        )
    if not isinstance(length, int):
        raise Unsupported(
            f"DFT needs the input's length along axis {axis} known at import, not known only when the "
            f"model runs (got {_show(shape)}): its transform is a constant matrix of that size"
        )
    n_fft = _int_input(g, node, 1, "dft_length")
    if n_fft is None:
        n_fft = 2 * (length - 1) if inverse and onesided else length
    if n_fft < 1:
        raise Unsupported(
            f"DFT of length {n_fft} (dft_length, or the default the input gives): it must be >= 1"
        )
    plan = _plan("DFT", length, channels, dtype, (n_fft, inverse, onesided))
    _transform(g, node, node.inputs[0], rank, axis, plan, dtype)


def _dft_axis(g: Any, node: Any, rank: int) -> int:
    """DFT's axis, non-negative: the attribute before opset 20, constant input 2 from it."""
    if g.opset >= 20:  # (the import refuses an axis attribute from 20, an axis input before, as malformed)
        axis = _int_input(g, node, 2, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = int(node.attrs.get("axis", 1))
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise Unsupported(
            f"DFT axis {axis} of a rank-{rank} input: the spec accepts [-{rank}, -2] and [0, {rank - 2}] "
            "(the last dim holds the real and imaginary parts)"
        )
    return axis % rank


# -- STFT (opset 17) --------------------------------------------------------------------------------
def stft(g: Any, node: Any) -> None:
    """STFT as onnx's reference computes it: frames ``f * frame_step + [0, frame_length)`` of the signal
    ``[B, L, 1 or 2]`` (``gather`` along the length by a constant table: ``[B, frames, frame_length,
    channels]``, ``frames = (L - frame_length) // frame_step + 1``), times the window, then the DFT of
    each frame (``reshape``, ``matmul``, ``reshape``): ``[B, frames, bins, 2]``, ``frame_length // 2 +
    1`` bins when onesided (default; real signals only, as the spec), else ``frame_length``.

    A constant window is folded into the DFT matrix, a computed one multiplied in (``unsqueeze``,
    ``mul``). frame_length defaults to the window's length, else L. Needs L and the channels known,
    frame_step and frame_length constants, the window's length known."""
    dtype, shape = _signal(g, node, "STFT")
    if len(shape) != 3 or not isinstance(shape[1], int):
        raise Unsupported(
            f"STFT needs the signal's shape [batch, length, 1 or 2], the length known (got {_show(shape)})"
        )
    signal, y = node.inputs[0], node.outputs[0]
    length, channels = shape[1], shape[2]
    step = _int_input(g, node, 1, "frame_step")
    if step is None or step < 1:
        raise Unsupported(f"STFT frame_step {step}: it must be given, >= 1")
    window = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    frame = _int_input(g, node, 3, "frame_length")
    if window:
        frame = _window_length(g, window, frame, dtype)
    frame = length if frame is None else frame
    if not 1 <= frame <= length:
        raise Unsupported(
            f"STFT frame_length {frame} for a signal of length {length}: it must be in [1, {length}]"
        )
    onesided = _flag(node, "onesided", 1)
    if onesided and channels == 2:
        raise Unsupported(
            "STFT of a complex signal: a one-sided output needs a real one (the spec); set onesided=0"
        )
    frames = (length - frame) // step + 1
    _check_table("STFT's frame indices", (frames, frame), "int64")
    constant = window in g.constants
    weights = np.asarray(g.constants[window]).reshape(-1) if constant else None
    plan = _plan("STFT", frame, channels, dtype, (frame, False, onesided), weights)
    starts = np.arange(frames, dtype=np.int64)[:, None] * step
    table = _constant(g, f"{y}__stft_frames", starts + np.arange(frame, dtype=np.int64)[None, :], "int64")
    framed = f"{y}__stft_framed"
    g.stage(node, "gather", [signal, table], [framed], axis=1)
    if window and not constant:
        column, weighted = f"{y}__stft_window", f"{y}__stft_weighted"
        g.stage(node, "unsqueeze", [window], [column], axes=[1])
        g.stage(node, "mul", [framed, column], [weighted])
        framed = weighted
    _transform(g, node, framed, 4, 2, plan, dtype)


def _window_length(g: Any, window: str, frame: int | None, dtype: str) -> int:
    """STFT's frame length where a window is given: the window's, which frame_length must equal."""
    wshape, wdtype = _shape(g, window), _dtype(g, window)
    if wdtype is not None and wdtype != dtype:
        raise Unsupported(f"STFT window of {wdtype} for a signal of {dtype}: the spec types them alike")
    if wshape is None or len(wshape) != 1 or not isinstance(wshape[0], int):
        raise Unsupported(f"STFT needs the window 1-d, its length known at import (got {_show(wshape)})")
    if frame is not None and frame != wshape[0]:
        raise Unsupported(
            f"STFT window of length {wshape[0]} and frame_length {frame}: the spec needs them equal"
        )
    return wshape[0]
