// PipeLink's shape kernels that are not plain strided copies: gather (embedding lookup),
// gather_elements (ONNX GatherElements), where, and concat (every part in one launch).
// Pure data movement: elements are moved bit for bit as raw words of PL_BYTES bytes (any dtype; concat
// moves 16-byte words when every part's rows allow it).
// Never allocate, never read outside the given tensors: gather skips an out-of-range index (its
// output rows become zeros; gather_elements: its output element) instead of reading past `data`, and
// records where it met one when asked.
//
// Macros (chosen by pipelink/ops/shape/cuda.py):
//   PL_BYTES     element size in bytes (1, 2, 4 or 8)
//   PL_INDEX_T   gather's and gather_elements' index type: int or long long
//   PL_GATHER    defined -> pl_gather;  PL_WHERE defined -> pl_where;  PL_CONCAT defined -> pl_concat
//   PL_GATHER_ELEMENTS defined -> pl_gather_elements;  PL_TRILU defined -> pl_trilu
//   PL_SCATTER_ND defined -> pl_scatter_nd;  PL_K its index depth (0..8)
//   PL_UPPER     trilu: 1 keeps the upper triangle (j - i >= k), 0 the lower (j - i <= k)
//   PL_BLOCK     threads per block (the launch must use exactly this many)
//   PL_PARTS     concat's parts that have elements (1..64); PL_UNROLL words in flight per thread
//   PL_NDIM      dims of where's broadcast index space, or of gather_elements' collapsed indices (1..8)
//   PL_INDEX64   0/1 index width
//
// Kernel signatures (sizes and strides in elements):
//   pl_gather(const W* data, const INDEX_T* indices, W* y, long long n, long long nidx, long long axis_n,
//             long long inner, long long bad)
//       data is contiguous [outer, axis_n, inner], indices [nidx] (any shape, flattened), y contiguous
//       [outer, nidx, inner]: y[o, j, k] = data[o, indices[j] (+ axis_n when negative), k], or 0 when
//       the index is outside [-axis_n, axis_n); then, when `bad` is not 0, the unsigned long long at
//       address `bad` is lowered to j (atomicMin: the first such position, whatever the thread order)
//   pl_gather_elements(const W* data, const INDEX_T* indices, W* y, long long n, long long axis_n,
//                      long long axis_stride, long long bad, long long d0..d7, long long sd0..sd7)
//       indices and y are contiguous of one shape, collapsed to d[0..PL_NDIM-1] (n elements); data is
//       contiguous, its strides at those dims are sd (0 on the axis; indices may be smaller than data on
//       every dim): y[i] = data[offset_sd(i) + idx * axis_stride] with idx = indices[i] (+ axis_n when
//       negative), or 0 when idx is outside [0, axis_n); then, when `bad` is not 0, the unsigned long
//       long at address `bad` is lowered to i (atomicMin: the first such position)
//   pl_where(const bool* c, const W* x, const W* y, W* z, long long n, long long d0..d7,
//            long long sc0..sc7, long long sx0..sx7, long long sy0..sy7)
//       z is contiguous with shape d[0..PL_NDIM-1]; each input is read with its strides (0 on
//       broadcast dims): z[i] = c[...] ? x[...] : y[...]
//   pl_scatter_nd(const INDEX_T* indices, const W* updates, W* y, long long n, long long slice,
//                 long long d0..d7, long long s0..s7)
//       y already holds data (the stage copies it first); indices is [rows, PL_K], updates [rows, slice]
//       (n = rows * slice elements); row u's indices (negative + d) address y's first PL_K dims (sizes d,
//       element strides s): y[sum(idx * s) + o] = updates[u * slice + o]. A row with an index outside
//       [-d, d) writes nothing (the CPU variant raises). Duplicate rows: one of them wins (ONNX leaves it
//       undefined).
//   pl_trilu(const W* x, W* y, long long n, long long rows, long long cols, long long k)
//       x and y contiguous [..., rows, cols]: y = x where column j and row i keep (PL_UPPER), else 0 (all
//       zero bits: 0 for every type); k is clamped to [-rows, cols] by the plan
//   pl_concat(W* y, long long rows, long long row,
//             const W* src0, long long len0, long long blocks0, ..., src63, len63, blocks63)
//       (sizes in words) y is [rows, row]; part i < PL_PARTS is a contiguous [rows, len_i] block landing
//       at column len_0 + ... + len_{i-1} of every row; it is copied by blocks_i blocks of the grid
//       (the grid is their sum, parts in order), which walk it grid-stride. Slots from PL_PARTS on are
//       unused (null, 0, 0): the signature always has the 64 the operator allows.
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

#if PL_BYTES == 16
typedef uint4 W;  // concat's 16-byte words (vector loads and stores)
#else
typedef typename pl_word<PL_BYTES>::type W;
#endif

#if defined(PL_GATHER)
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

#if defined(PL_GATHER_ELEMENTS)
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_gather_elements(const W* __restrict__ data, const PL_INDEX_T* __restrict__ indices, W* __restrict__ y,
                   long long n, long long axis_n, long long axis_stride, long long bad,
                   long long d0, long long d1, long long d2, long long d3,
                   long long d4, long long d5, long long d6, long long d7,
                   long long sd0, long long sd1, long long sd2, long long sd3,
                   long long sd4, long long sd5, long long sd6, long long sd7) {
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long s[1][8] = {{sd0, sd1, sd2, sd3, sd4, sd5, sd6, sd7}};
    PL_FOR_EACH_INDEX(i, n) {
        long long idx = (long long)indices[i];
        if (idx < 0) idx += axis_n;
        // an index outside the axis would read another element or past the buffer: write 0 instead
        const bool inside = idx >= 0 && idx < axis_n;
        W v = W(0);
        if (inside) {
            pl_idx off[1];
            pl_strided_offsets<PL_NDIM, 1>((pl_idx)i, d, s, off);
            v = data[off[0] + (pl_idx)idx * (pl_idx)axis_stride];
        }
        y[i] = v;
        if (!inside && bad != 0) atomicMin((unsigned long long*)bad, (unsigned long long)i);
    }
}
#endif  // PL_GATHER_ELEMENTS

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

#if defined(PL_SCATTER_ND)
#ifndef PL_K
#define PL_K 1
#endif
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_scatter_nd(const PL_INDEX_T* __restrict__ indices, const W* __restrict__ updates, W* __restrict__ y,
              long long n, long long slice, long long d0, long long d1, long long d2, long long d3,
              long long d4, long long d5, long long d6, long long d7,
              long long s0, long long s1, long long s2, long long s3,
              long long s4, long long s5, long long s6, long long s7) {
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long s[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
    PL_FOR_EACH_INDEX(i, n) {
        const long long u = (long long)i / slice;
        const long long o = (long long)i - u * slice;
        long long offset = o;
        bool inside = true;
#pragma unroll
        for (int k = 0; k < PL_K; ++k) {
            long long v = (long long)indices[u * PL_K + k];
            if (v < 0) v += d[k];
            inside = inside && v >= 0 && v < d[k];
            offset += v * s[k];
        }
        if (inside) y[offset] = updates[i];
    }
}
#endif  // PL_SCATTER_ND

#if defined(PL_TRILU)
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_trilu(const W* __restrict__ x, W* __restrict__ y, long long n, long long rows, long long cols,
         long long k) {
    PL_FOR_EACH_INDEX(i, n) {
        const pl_idx j = (pl_idx)i % (pl_idx)cols;
        const pl_idx r = ((pl_idx)i / (pl_idx)cols) % (pl_idx)rows;
        const long long diagonal = (long long)j - (long long)r;
        const bool keep = PL_UPPER ? diagonal >= k : diagonal <= k;
        y[i] = keep ? x[i] : W(0);
    }
}
#endif  // PL_TRILU

#if defined(PL_CONCAT)
#ifndef PL_PARTS
#define PL_PARTS 1
#endif
#if PL_PARTS < 1 || PL_PARTS > 64
#error "PL_PARTS must be 1..64"
#endif
#define PL_CONCAT_SLOTS(M)                                                                          \
    M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) M(16)      \
    M(17) M(18) M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)       \
    M(32) M(33) M(34) M(35) M(36) M(37) M(38) M(39) M(40) M(41) M(42) M(43) M(44) M(45) M(46)       \
    M(47) M(48) M(49) M(50) M(51) M(52) M(53) M(54) M(55) M(56) M(57) M(58) M(59) M(60) M(61)       \
    M(62) M(63)
#define PL_CONCAT_PARAM(i) , const W* __restrict__ src##i, long long len##i, long long blocks##i
// The part this block copies: the one whose block range [start, start + blocks_i) holds blockIdx.x
// (slots past PL_PARTS compile away).
#define PL_CONCAT_PICK(i)                                                          \
    if (i < PL_PARTS) {                                                            \
        if (bx >= start && bx < start + blocks##i) {                               \
            src = src##i;                                                          \
            len = len##i;                                                          \
            col = ccol;                                                            \
            first = start;                                                         \
            nblocks = blocks##i;                                                   \
        }                                                                          \
        start += blocks##i;                                                        \
        ccol += len##i;                                                            \
    }

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_concat(W* __restrict__ y, long long rows, long long row PL_CONCAT_SLOTS(PL_CONCAT_PARAM)) {
    const long long bx = blockIdx.x;
    const W* src = nullptr;
    long long len = 0, col = 0, first = 0, nblocks = 0;
    long long start = 0, ccol = 0;
    PL_CONCAT_SLOTS(PL_CONCAT_PICK)
    if (src == nullptr || nblocks == 0) return;  // a block past the parts' ranges (none is launched)
    const pl_idx n = (pl_idx)(rows * len);
    const pl_idx plen = (pl_idx)len, prow = (pl_idx)row, pcol = (pl_idx)col;
    const pl_idx step = (pl_idx)nblocks * PL_BLOCK;
    for (pl_idx base = (pl_idx)(bx - first) * PL_BLOCK + threadIdx.x; base < n; base += PL_UNROLL * step) {
        W v[PL_UNROLL];
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {  // every load issued before any store: in flight together
            const pl_idx i = base + (pl_idx)u * step;
            if (i < n) v[u] = src[i];
        }
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const pl_idx i = base + (pl_idx)u * step;
            if (i < n) {
                const pl_idx r = i / plen;
                y[r * prow + pcol + (i - r * plen)] = v[u];
            }
        }
    }
}
#endif  // PL_CONCAT
