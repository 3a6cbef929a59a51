// The CUDA backend's own helper kernels (not operators): a strided copy and a count of non-finite
// values. Compiled by backends/cuda/helpers.py with pipelink/ops on the include path (for common.cuh).
//
// Macros (pl_strided_copy): PL_ELEM  an unsigned type of the moved unit (1, 2, 4, 8 bytes, or uint4 for
//   16-byte vectors when the host merged aligned runs of elements); PL_NDIM  how many of the 8 dims are
//   walked (the last PL_NDIM; the host pads in front with dims of 1); PL_COPY32  1 when the host proved
//   n and every offset of both walks below 2^31 (32-bit index math, several times cheaper to divide).
// Kernels:
//   pl_strided_copy(const ELEM* src, ELEM* dst, long long n, long long d0..d7, long long s0..s7,
//                   long long t0..t7)
//       dst[dst_offset(i)] = src[src_offset(i)] for every logical index i, row-major over d0..d7
//       (unused leading dims are 1); s* / t* are the source / destination strides in units of ELEM (any
//       sign, or zero). src and dst are distinct allocations, hence __restrict__. Each thread issues
//       PL_COPY_UNROLL loads, a grid apart, before it stores them (loads in flight together).
//   pl_nonfinite_{f32,f16,bf16,f64}(const U* x, long long n, unsigned long long* out)
//       *out += the number of elements whose exponent bits are all ones (NaN or Inf).
#define PL_INDEX64 1  // the flat kernels of this file index with 64 bits
#include "common.cuh"

#ifndef PL_ELEM
#define PL_ELEM unsigned int
#endif
#ifndef PL_NDIM
#define PL_NDIM 8
#endif
#ifndef PL_COPY32
#define PL_COPY32 0
#endif
#define PL_COPY_UNROLL 4  // helpers.py's COPY_UNROLL sizes the grid with the same number
#if PL_NDIM < 1 || PL_NDIM > 8
#error "PL_NDIM must be 1..8"
#endif

#if PL_COPY32
typedef unsigned int pl_copy_u;  // the logical index and dims: unsigned division
typedef int pl_copy_s;           // offsets: strides may be negative
#else
typedef unsigned long long pl_copy_u;
typedef long long pl_copy_s;
#endif

extern "C" __global__ void pl_strided_copy(
    const PL_ELEM* __restrict__ src, PL_ELEM* __restrict__ dst, long long n,
    long long d0, long long d1, long long d2, long long d3,
    long long d4, long long d5, long long d6, long long d7,
    long long s0, long long s1, long long s2, long long s3,
    long long s4, long long s5, long long s6, long long s7,
    long long t0, long long t1, long long t2, long long t3,
    long long t4, long long t5, long long t6, long long t7) {
    const long long dl[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long sl[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
    const long long tl[8] = {t0, t1, t2, t3, t4, t5, t6, t7};
    pl_copy_u d[PL_NDIM];
    pl_copy_s s[PL_NDIM], t[PL_NDIM];
#pragma unroll
    for (int k = 0; k < PL_NDIM; ++k) {
        d[k] = (pl_copy_u)dl[8 - PL_NDIM + k];
        s[k] = (pl_copy_s)sl[8 - PL_NDIM + k];
        t[k] = (pl_copy_s)tl[8 - PL_NDIM + k];
    }
    const pl_copy_u total = (pl_copy_u)n;
    const pl_copy_u step = (pl_copy_u)gridDim.x * blockDim.x;
    for (pl_copy_u base = (pl_copy_u)blockIdx.x * blockDim.x + threadIdx.x; base < total;
         base += PL_COPY_UNROLL * step) {
        PL_ELEM v[PL_COPY_UNROLL];
        pl_copy_s to[PL_COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < PL_COPY_UNROLL; ++u) {
            pl_copy_u rem = base + u * step;
            if (rem < total) {
                pl_copy_s so = 0, dof = 0;
#pragma unroll
                for (int k = PL_NDIM - 1; k > 0; --k) {
                    const pl_copy_u q = rem / d[k];
                    const pl_copy_s r = (pl_copy_s)(rem - q * d[k]);
                    so += r * s[k];
                    dof += r * t[k];
                    rem = q;
                }
                so += (pl_copy_s)rem * s[0];
                to[u] = dof + (pl_copy_s)rem * t[0];
                v[u] = src[so];
            }
        }
#pragma unroll
        for (int u = 0; u < PL_COPY_UNROLL; ++u) {
            if (base + u * step < total) dst[to[u]] = v[u];
        }
    }
}

template <class U>
__device__ __forceinline__ void pl_count(const U* __restrict__ x, long long n, U mask, unsigned long long* out) {
    unsigned long long c = 0;
    PL_FOR_EACH_INDEX(i, n) { c += (x[i] & mask) == mask; }
    for (int off = 16; off > 0; off >>= 1) c += __shfl_down_sync(0xffffffffu, c, off);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(out, c);
}
extern "C" __global__ void pl_nonfinite_f32(const unsigned int* x, long long n, unsigned long long* out) {
    pl_count<unsigned int>(x, n, 0x7f800000u, out);
}
extern "C" __global__ void pl_nonfinite_f16(const unsigned short* x, long long n, unsigned long long* out) {
    pl_count<unsigned short>(x, n, (unsigned short)0x7c00u, out);
}
extern "C" __global__ void pl_nonfinite_bf16(const unsigned short* x, long long n, unsigned long long* out) {
    pl_count<unsigned short>(x, n, (unsigned short)0x7f80u, out);
}
extern "C" __global__ void pl_nonfinite_f64(const unsigned long long* x, long long n,
                                            unsigned long long* out) {
    pl_count<unsigned long long>(x, n, 0x7ff0000000000000ull, out);
}
