// PipeLink's indexing kernels: gather_nd (ONNX GatherND), scatter_elements (ONNX ScatterElements,
// reduction none), one_hot (ONNX OneHot) and eye_like (ONNX EyeLike).
// Pure data movement: elements are moved bit for bit as raw words of PL_BYTES bytes (any dtype).
// Never allocate, never read or write outside the given tensors: an out-of-range index gives zeros
// (gather_nd, recorded when asked, as the shape family's gather) or writes nothing (scatter_elements).
//
// Macros (chosen by pipelink/ops/indexing/cuda.py):
//   PL_BYTES     element size in bytes (1, 2, 4 or 8)
//   PL_INDEX_T   the index type: int or long long (one_hot any integer type: signed char, short, their
//                unsigned types, unsigned int, unsigned long long too)
//   PL_GATHER_ND defined -> pl_gather_nd;  PL_K its index tuple length (1..8)
//   PL_SCATTER_ELEMENTS defined -> pl_scatter_elements;  PL_NDIM its collapsed dims (1..8)
//   PL_ONE_HOT   defined -> pl_one_hot;  PL_EYE_LIKE defined -> pl_eye_like
//   PL_BLOCK     threads per block (the launch must use exactly this many)
//   PL_INDEX64   0/1 index width
//
// Kernel signatures (sizes and strides in elements):
//   pl_gather_nd(const W* data, const INDEX_T* indices, W* y, long long n, long long slice,
//                long long rows, long long batch_stride, long long bad, long long d0..d7, long long s0..s7)
//       indices is [batch, rows, PL_K] (flattened), y [batch, rows, slice] (n elements), data contiguous
//       with batch_stride elements per batch; tuple u's indices (negative + d) address the dims of data
//       after the batch dims (sizes d, strides s): y[u * slice + o] = data[batch * batch_stride +
//       sum(idx * s) + o], or 0 when an index is outside [-d, d); then, when `bad` is not 0, the unsigned
//       long long at address `bad` is lowered to that index's position u * PL_K + j in indices
//       (atomicMin: the first such position, whatever the thread order)
//   pl_scatter_elements(const INDEX_T* indices, const W* updates, W* y, long long n, long long axis_n,
//                       long long axis_stride, long long d0..d7, long long sy0..sy7)
//       y already holds data (the stage copies it first); indices and updates are contiguous of one
//       shape, collapsed to d[0..PL_NDIM-1] (n elements); y's strides at those dims are sy (0 on the
//       axis): y[offset_sy(i) + idx * axis_stride] = updates[i] with idx = indices[i] (+ axis_n when
//       negative); an idx outside [0, axis_n) writes nothing (the CPU variant raises). Duplicate
//       targets: one of the updates wins (ONNX leaves it undefined).
//   pl_one_hot(const INDEX_T* indices, const W* values, W* y, long long n, long long depth,
//              long long inner)
//       y is contiguous [outer, depth, inner] (n elements), indices [outer, inner]:
//       y[o, d, k] = values[idx == d] with idx = indices[o, k] (+ depth when negative); values holds
//       [off, on], so an index outside [-depth, depth) gives off on its whole line
//   pl_eye_like(W* y, long long n, long long cols, long long k, long long one)
//       y is contiguous [rows, cols]: y = `one` (the bits of 1 in y's dtype) where column - row == k,
//       else 0 (all zero bits: 0 for every type)
// The outputs never alias the inputs (the planner gives every output its own buffer): __restrict__.
#include "common.cuh"

#ifndef PL_BYTES
#define PL_BYTES 4
#endif
#ifndef PL_NDIM
#define PL_NDIM 8
#endif
#ifndef PL_INDEX_T
#define PL_INDEX_T long long
#endif

typedef typename pl_word<PL_BYTES>::type W;

#if defined(PL_GATHER_ND)
#ifndef PL_K
#define PL_K 1
#endif
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_gather_nd(const W* __restrict__ data, const PL_INDEX_T* __restrict__ indices, W* __restrict__ y,
             long long n, long long slice, long long rows, long long batch_stride, long long bad,
             long long d0, long long d1, long long d2, long long d3,
             long long d4, long long d5, long long d6, long long d7,
             long long s0, long long s1, long long s2, long long s3,
             long long s4, long long s5, long long s6, long long s7) {
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long s[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
    PL_FOR_EACH_INDEX(i, n) {
        const long long u = i / slice;
        const long long o = i - u * slice;
        long long offset = (u / rows) * batch_stride + o;
        int first_bad = -1;
#pragma unroll
        for (int j = 0; j < PL_K; ++j) {
            long long v = (long long)indices[u * PL_K + j];
            if (v < 0) v += d[j];
            // an index outside its dim would read another slice or past the buffer: write 0 instead
            if ((v < 0 || v >= d[j]) && first_bad < 0) first_bad = j;
            offset += v * s[j];
        }
        y[i] = first_bad < 0 ? data[offset] : W(0);
        if (first_bad >= 0 && bad != 0)
            atomicMin((unsigned long long*)bad, (unsigned long long)(u * PL_K + first_bad));
    }
}
#endif  // PL_GATHER_ND

#if defined(PL_SCATTER_ELEMENTS)
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_scatter_elements(const PL_INDEX_T* __restrict__ indices, const W* __restrict__ updates, W* __restrict__ y,
                    long long n, long long axis_n, long long axis_stride,
                    long long d0, long long d1, long long d2, long long d3,
                    long long d4, long long d5, long long d6, long long d7,
                    long long sy0, long long sy1, long long sy2, long long sy3,
                    long long sy4, long long sy5, long long sy6, long long sy7) {
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long s[1][8] = {{sy0, sy1, sy2, sy3, sy4, sy5, sy6, sy7}};
    PL_FOR_EACH_INDEX(i, n) {
        long long idx = (long long)indices[i];
        if (idx < 0) idx += axis_n;
        if (idx >= 0 && idx < axis_n) {  // out of range: nothing written (never past the buffer)
            pl_idx off[1];
            pl_strided_offsets<PL_NDIM, 1>((pl_idx)i, d, s, off);
            y[off[0] + (pl_idx)idx * (pl_idx)axis_stride] = updates[i];
        }
    }
}
#endif  // PL_SCATTER_ELEMENTS

#if defined(PL_ONE_HOT)
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_one_hot(const PL_INDEX_T* __restrict__ indices, const W* __restrict__ values, W* __restrict__ y,
           long long n, long long depth, long long inner) {
    const W off = values[0], on = values[1];
    PL_FOR_EACH_INDEX(i, n) {
        const pl_idx k = (pl_idx)i % (pl_idx)inner;
        const pl_idx r = (pl_idx)i / (pl_idx)inner;
        const pl_idx at = r % (pl_idx)depth;
        const pl_idx o = r / (pl_idx)depth;
        const PL_INDEX_T raw = indices[o * (pl_idx)inner + k];
        // an unsigned index at or past depth matches nothing (uint64's past 2^63 must not wrap negative)
        const bool is_unsigned = (PL_INDEX_T)(-1) > (PL_INDEX_T)0;
        long long idx = is_unsigned && (unsigned long long)raw >= (unsigned long long)depth ? depth : (long long)raw;
        if (idx < 0) idx += depth;
        y[i] = idx == (long long)at ? on : off;
    }
}
#endif  // PL_ONE_HOT

#if defined(PL_EYE_LIKE)
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_eye_like(W* __restrict__ y, long long n, long long cols, long long k, long long one) {
    PL_FOR_EACH_INDEX(i, n) {
        const pl_idx j = (pl_idx)i % (pl_idx)cols;
        const pl_idx r = (pl_idx)i / (pl_idx)cols;
        y[i] = (long long)j - (long long)r == k ? (W)one : W(0);
    }
}
#endif  // PL_EYE_LIKE
