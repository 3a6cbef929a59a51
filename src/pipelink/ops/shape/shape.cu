// PipeLink's shape kernels that are not plain strided copies: gather (embedding lookup) and where.
// Pure data movement: elements are moved bit for bit as raw words of PL_BYTES bytes (any dtype).
// Never allocate, never read outside the given tensors: gather skips an out-of-range index (its
// output rows become zeros) instead of reading past `data`, and records where it met one when asked.
//
// Macros (chosen by pipelink/ops/shape/cuda.py):
//   PL_BYTES     element size in bytes (1, 2, 4 or 8)
//   PL_INDEX_T   gather's index type: int or long long
//   PL_GATHER    defined -> pl_gather;  PL_WHERE defined -> pl_where
//   PL_BLOCK     threads per block (the launch must use exactly this many)
//   PL_NDIM      dims of where's broadcast index space (1..8); PL_INDEX64 0/1 index width
//
// Kernel signatures (sizes and strides in elements):
//   pl_gather(const W* data, const INDEX_T* indices, W* y, long long n, long long nidx, long long axis_n,
//             long long inner, long long bad)
//       data is contiguous [outer, axis_n, inner], indices [nidx] (any shape, flattened), y contiguous
//       [outer, nidx, inner]: y[o, j, k] = data[o, indices[j] (+ axis_n when negative), k], or 0 when
//       the index is outside [-axis_n, axis_n); then, when `bad` is not 0, the unsigned long long at
//       address `bad` is lowered to j (atomicMin: the first such position, whatever the thread order)
//   pl_where(const bool* c, const W* x, const W* y, W* z, long long n, long long d0..d7,
//            long long sc0..sc7, long long sx0..sx7, long long sy0..sy7)
//       z is contiguous with shape d[0..PL_NDIM-1]; each input is read with its strides (0 on
//       broadcast dims): z[i] = c[...] ? x[...] : y[...]
// The outputs never alias the inputs (the planner gives every output its own buffer): __restrict__.
#include "common.cuh"

#ifndef PL_BYTES
#define PL_BYTES 4
#endif
#ifndef PL_NDIM
#define PL_NDIM 8
#endif

typedef typename pl_word<PL_BYTES>::type W;

#if defined(PL_GATHER)
#ifndef PL_INDEX_T
#define PL_INDEX_T long long
#endif
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_gather(const W* __restrict__ data, const PL_INDEX_T* __restrict__ indices, W* __restrict__ y, long long n,
          long long nidx, long long axis_n, long long inner, long long bad) {
    PL_FOR_EACH_INDEX(i, n) {
        const pl_idx k = (pl_idx)i % (pl_idx)inner;
        const pl_idx r = (pl_idx)i / (pl_idx)inner;
        const pl_idx j = r % (pl_idx)nidx;
        const pl_idx o = r / (pl_idx)nidx;
        long long idx = (long long)indices[j];
        if (idx < 0) idx += axis_n;
        // an index outside the axis would read another row or past the buffer: write 0 instead
        const bool inside = idx >= 0 && idx < axis_n;
        y[i] = inside ? data[(o * (pl_idx)axis_n + (pl_idx)idx) * (pl_idx)inner + k] : W(0);
        if (!inside && bad != 0) atomicMin((unsigned long long*)bad, (unsigned long long)j);
    }
}
#endif  // PL_GATHER

#if defined(PL_WHERE)
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_where(const bool* __restrict__ c, const W* __restrict__ x, const W* __restrict__ y, W* __restrict__ z,
         long long n, long long d0, long long d1, long long d2, long long d3,
         long long d4, long long d5, long long d6, long long d7,
         long long sc0, long long sc1, long long sc2, long long sc3,
         long long sc4, long long sc5, long long sc6, long long sc7,
         long long sx0, long long sx1, long long sx2, long long sx3,
         long long sx4, long long sx5, long long sx6, long long sx7,
         long long sy0, long long sy1, long long sy2, long long sy3,
         long long sy4, long long sy5, long long sy6, long long sy7) {
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long s[3][8] = {{sc0, sc1, sc2, sc3, sc4, sc5, sc6, sc7},
                               {sx0, sx1, sx2, sx3, sx4, sx5, sx6, sx7},
                               {sy0, sy1, sy2, sy3, sy4, sy5, sy6, sy7}};
    PL_FOR_EACH_INDEX(i, n) {
        pl_idx off[3];
        pl_strided_offsets<PL_NDIM, 3>((pl_idx)i, d, s, off);
        z[i] = c[off[0]] ? x[off[1]] : y[off[2]];
    }
}
#endif  // PL_WHERE
