// PipeLink built-in as_strided: y = x's storage read as a strided view (torch.as_strided(...).contiguous()),
// a contiguous y. Pure data movement, bit for bit, in words of PL_BYTES bytes (one element, or up to 16
// bytes of whole elements when the host merged an aligned contiguous inner run). Never allocate; the host
// (ops/transpose/cuda.py: plan_as_strided) proved every read lies inside x.
//
// Macros:
//   PL_BYTES       the word moved (1, 2, 4, 8 or 16 bytes)
//   PL_BLOCK       threads per block of pl_as_strided; PL_UNROLL words each thread has in flight
//   PL_NDIM        dims of the walk (1..8); PL_INDEX64 0/1 index width (common.cuh)
//   PL_TILE, PL_TILE_ROWS  the tile of pl_as_strided_tiled (block PL_TILE x PL_TILE_ROWS)
//
// Kernel signatures (sizes, strides and offsets in words):
//   pl_as_strided(const W* x, W* y, long long n, long long offset, long long d0..d7, long long s0..s7)
//       y[i] = x[offset + sum_k i_k * s_k] for the row-major index (i_0 .. i_{PL_NDIM-1}) of i over
//       d0..d(PL_NDIM-1); y has n words
//   pl_as_strided_tiled(const W* x, W* y, long long offset, long long cols, long long rows, long long xr,
//                       long long yc, long long nbatch, long long d0..d7, long long s0..s7,
//                       long long t0..t7)
//       a transposing view: y's innermost dim (rows of the tile, x stride xr) is not x's contiguous one
//       (cols of the tile, x stride 1, y stride yc). For batch b (row-major over d0..d(PL_NDIM-1), x
//       strides s, y strides t): y[t(b) + c * yc + r] = x[offset + s(b) + r * xr + c]. Each tile is
//       read along c and written along r, both coalesced, through padded shared memory.
//       grid (tiles over cols, tiles over rows, batches), each capped; the kernel loops over the rest.
#include "common.cuh"

#ifndef PL_BYTES
#define PL_BYTES 4
#endif
#ifndef PL_NDIM
#define PL_NDIM 8
#endif
#ifndef PL_TILE
#define PL_TILE 32
#endif
#ifndef PL_TILE_ROWS
#define PL_TILE_ROWS 8
#endif
#if PL_NDIM < 1 || PL_NDIM > 8
#error "PL_NDIM must be 1..8"
#endif

template <int B> struct pl_layout_word { typedef typename pl_word<B>::type type; };
template <> struct pl_layout_word<16> { typedef uint4 type; };
typedef typename pl_layout_word<PL_BYTES>::type W;

static_assert(PL_TILE % PL_TILE_ROWS == 0, "PL_TILE_ROWS must divide PL_TILE");

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_as_strided(const W* __restrict__ x, W* __restrict__ y, long long n, long long offset,
              long long d0, long long d1, long long d2, long long d3,
              long long d4, long long d5, long long d6, long long d7,
              long long s0, long long s1, long long s2, long long s3,
              long long s4, long long s5, long long s6, long long s7) {
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long s[1][8] = {{s0, s1, s2, s3, s4, s5, s6, s7}};
    const W* __restrict__ xv = x + offset;
    const long long step = (long long)gridDim.x * PL_BLOCK;
    for (long long base = (long long)blockIdx.x * PL_BLOCK + threadIdx.x; base < n; base += PL_UNROLL * step) {
        // every load of the step issued before any store: PL_UNROLL words in flight per thread
        W v[PL_UNROLL];
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long i = base + u * step;
            if (i < n) {
                pl_idx off[1];
                pl_strided_offsets<PL_NDIM, 1>((pl_idx)i, d, s, off);
                v[u] = xv[off[0]];
            }
        }
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long i = base + u * step;
            if (i < n) y[i] = v[u];
        }
    }
}

extern "C" __global__ void __launch_bounds__(PL_TILE * PL_TILE_ROWS)
pl_as_strided_tiled(const W* __restrict__ x, W* __restrict__ y, long long offset, long long cols,
                    long long rows, long long xr, long long yc, long long nbatch,
                    long long d0, long long d1, long long d2, long long d3,
                    long long d4, long long d5, long long d6, long long d7,
                    long long s0, long long s1, long long s2, long long s3,
                    long long s4, long long s5, long long s6, long long s7,
                    long long t0, long long t1, long long t2, long long t3,
                    long long t4, long long t5, long long t6, long long t7) {
    __shared__ W tile[PL_TILE][PL_TILE + 1];  // +1: a column of the tile spans every bank
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long st[2][8] = {{s0, s1, s2, s3, s4, s5, s6, s7}, {t0, t1, t2, t3, t4, t5, t6, t7}};
    for (long long b = blockIdx.z; b < nbatch; b += gridDim.z) {
        pl_idx off[2];
        pl_strided_offsets<PL_NDIM, 2>((pl_idx)b, d, st, off);
        pl_tile_transpose<PL_TILE, PL_TILE_ROWS>(x + offset + (long long)off[0], y + (long long)off[1], rows, cols, xr, yc,
                                                 tile);
    }
}
