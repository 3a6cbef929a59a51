// The CUDA backend's own helper kernels (not operators): a strided copy and a count of non-finite
// values. Compiled by backends/cuda/helpers.py with pipelink/ops on the include path (for common.cuh).
//
// Macros: PL_ELEM  an unsigned type of the element size (1, 2, 4 or 8 bytes) for pl_strided_copy.
// Kernels:
//   pl_strided_copy(const ELEM* src, ELEM* dst, long long n, long long d0..d7, long long s0..s7,
//                   long long t0..t7)
//       dst[dst_offset(i)] = src[src_offset(i)] for every logical index i, row-major over d0..d7
//       (unused trailing dims are 1); s* / t* are the source / destination strides in elements (any
//       sign, or zero). src and dst are distinct allocations, hence __restrict__.
//   pl_nonfinite_{f32,f16,bf16,f64}(const U* x, long long n, unsigned long long* out)
//       *out += the number of elements whose exponent bits are all ones (NaN or Inf).
#define PL_INDEX64 1  // strides may be negative: 64-bit signed offsets
#include "common.cuh"

#ifndef PL_ELEM
#define PL_ELEM unsigned int
#endif

extern "C" __global__ void pl_strided_copy(
    const PL_ELEM* __restrict__ src, PL_ELEM* __restrict__ dst, long long n,
    long long d0, long long d1, long long d2, long long d3,
    long long d4, long long d5, long long d6, long long d7,
    long long s0, long long s1, long long s2, long long s3,
    long long s4, long long s5, long long s6, long long s7,
    long long t0, long long t1, long long t2, long long t3,
    long long t4, long long t5, long long t6, long long t7) {
    const long long dims[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long strides[2][8] = {{s0, s1, s2, s3, s4, s5, s6, s7}, {t0, t1, t2, t3, t4, t5, t6, t7}};
    PL_FOR_EACH_INDEX(i, n) {
        pl_idx off[2];
        pl_strided_offsets<8, 2>(i, dims, strides, off);
        dst[off[1]] = src[off[0]];
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
