"""The integer semantics of div and pow on the CPU (ONNX Div and Pow of the integer types): quotients
truncated toward zero, powers wrapping in the type. Floats pass through to NumPy. The CUDA kernels
(``elementwise.cu``: pl_divide, pl_pow) give the same answers; never a float64 detour for integers.
"""

from __future__ import annotations

import numpy as np

__all__ = ["divide", "power"]


def divide(a: np.ndarray, b: np.ndarray, out: np.ndarray, dtype=None, casting: str = "same_kind") -> None:
    """``out = a / b`` broadcast, the ufunc-like call ``reference.binary_bind`` makes: floats IEEE; integers
    truncated toward zero in their own type, as C and the ONNX reference's Div (no float64 detour, exact
    for int64 and uint64), 0 where b is 0 and the minimum / -1 wrapping to the minimum."""
    if np.dtype(out.dtype).kind not in "iu":
        np.divide(a, b, out=out, dtype=dtype, casting=casting)
        return
    q = np.floor_divide(a, b)  # 0 where b is 0 (NumPy's rule; C leaves it undefined)
    adjust = (np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))  # floored one below the truncated quotient
    np.add(q, adjust.astype(q.dtype), out=out)


def power(a: np.ndarray, b: np.ndarray, out: np.ndarray, dtype=None, casting: str = "same_kind") -> None:
    """``out = a ** b`` broadcast, the ufunc-like call ``reference.binary_bind`` makes: floats as NumPy;
    integers by squaring in the unsigned type of their width, wrapping as NumPy's power, and a negative
    exponent truncating the real power toward zero (1 for a = 1, +-1 for a = -1, else 0, a = 0 included,
    where NumPy refuses)."""
    if np.dtype(out.dtype).kind not in "iu":
        np.power(a, b, out=out, dtype=dtype, casting=casting)
        return
    a, b = np.broadcast_arrays(a, b)
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    result, base = np.ones(a.shape, unsigned), a.astype(unsigned)  # two's-complement bits: products wrap
    exponent = np.where(b < 0, 0, b).astype(unsigned)
    while exponent.any():
        np.multiply(result, base, out=result, where=(exponent & 1).astype(bool))
        np.multiply(base, base, out=base)
        exponent >>= unsigned.type(1)
    y = result.astype(a.dtype)
    if a.dtype.kind == "i":
        odd = (b & 1).astype(bool)
        small = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(a.dtype)
        y = np.where(b < 0, small, y)
    np.copyto(out, y)
