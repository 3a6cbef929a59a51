"""The cast kernel's source, used by ``cuda_ops.py``'s ``cast`` binding.

Left here only until the operator catalogue owns it (issue 11: an operator is one unit); the backend's
compiler moved to ``backends/cuda/compiler.py`` and its helper kernels to ``backends/cuda/helpers.cu``.
"""

from __future__ import annotations

__all__ = ["CAST_SOURCE"]

# Casts between any two dtypes with C semantics (as the CPU reference). PL_TIN / PL_TOUT are CUDA type
# names; PL_DIRECT=1 when neither is a 16-bit float (a plain C cast), else the value goes through double
# (exact for every 16-bit float, and rounded once, to odd, before the final narrowing).
CAST_SOURCE = r"""
#include "common.cuh"
#ifndef PL_DIRECT
#define PL_DIRECT 1
#endif
template <class T> __device__ __forceinline__ double pl_cast_in(T v) { return (double)v; }
__device__ __forceinline__ double pl_cast_in(__half v) { return (double)pl_to_acc(v); }
__device__ __forceinline__ double pl_cast_in(__nv_bfloat16 v) { return (double)pl_to_acc(v); }
template <class T> struct pl_cast_out { static __device__ __forceinline__ T from(double v) { return (T)v; } };
template <> struct pl_cast_out<bool> {
    static __device__ __forceinline__ bool from(double v) { return v != 0.0; } };
template <> struct pl_cast_out<__half> {
    static __device__ __forceinline__ __half from(double v) { return pl_from<__half>(v); } };
template <> struct pl_cast_out<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from(double v) { return pl_from<__nv_bfloat16>(v); } };

extern "C" __global__ void pl_cast_any(const PL_TIN* __restrict__ x, PL_TOUT* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
#if PL_DIRECT
        y[i] = (PL_TOUT)x[i];
#else
        y[i] = pl_cast_out<PL_TOUT>::from(pl_cast_in(x[i]));
#endif
    }
}
"""
