// PipeLink built-in layout kernels: a tiled transpose of the last two dimensions (with a batch
// dimension) through padded shared memory, and a general permute of up to 8 dimensions.
// Pure data movement: elements are copied bit for bit as raw words of sizeof(PL_T) bytes.
// Never allocate, never read outside the given shape.
//
// Macros (chosen by plan_transpose in pipelink/ops/transpose/cuda.py):
//   PL_T          element type (only its size matters)
//   PL_TILE       tile edge (32 or 64); PL_TILE_ROWS thread rows per tile (block = PL_TILE x PL_TILE_ROWS)
//   PL_TILE_PAD   shared-memory padding in elements per tile row (1 avoids bank conflicts)
//   PL_BLOCK      threads per block of pl_permute
//   PL_NDIM       dims of the permute index space (1..8); PL_INDEX64 0/1 index width
//
// Kernel signatures (sizes and strides in elements):
//   pl_transpose(const T* x, T* y, long long batch, long long R, long long C)
//       x is contiguous [batch, R, C], y is contiguous [batch, C, R]
//       grid (tiles over C, tiles over R, batch), each capped; the kernel loops over the rest
//   pl_permute(const T* x, T* y, long long n, long long d0..d7, long long s0..s7)
//       y is contiguous with shape d[0..PL_NDIM-1]; y[i0,...] = x[sum_k i_k * s_k]  (s_k >= 0)
#include "common.cuh"

#ifndef PL_TILE
#define PL_TILE 32
#endif
#ifndef PL_TILE_ROWS
#define PL_TILE_ROWS 8
#endif
#ifndef PL_TILE_PAD
#define PL_TILE_PAD 1
#endif
#ifndef PL_NDIM
#define PL_NDIM 8
#endif

typedef typename pl_word<sizeof(PL_T)>::type W;

static_assert(PL_TILE % PL_TILE_ROWS == 0, "PL_TILE_ROWS must divide PL_TILE");

extern "C" __global__ void __launch_bounds__(PL_TILE * PL_TILE_ROWS)
pl_transpose(const PL_T* __restrict__ x_, PL_T* __restrict__ y_, long long batch, long long R, long long C) {
    __shared__ W tile[PL_TILE][PL_TILE + PL_TILE_PAD];
    const W* __restrict__ x = reinterpret_cast<const W*>(x_);
    W* __restrict__ y = reinterpret_cast<W*>(y_);
    for (long long b = blockIdx.z; b < batch; b += gridDim.z)
        pl_tile_transpose<PL_TILE, PL_TILE_ROWS>(x + b * R * C, y + b * R * C, R, C, C, R, tile);
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_permute(const PL_T* __restrict__ x_, PL_T* __restrict__ y_, long long n,
           long long d0, long long d1, long long d2, long long d3,
           long long d4, long long d5, long long d6, long long d7,
           long long s0, long long s1, long long s2, long long s3,
           long long s4, long long s5, long long s6, long long s7) {
    const W* __restrict__ x = reinterpret_cast<const W*>(x_);
    W* __restrict__ y = reinterpret_cast<W*>(y_);
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long s[1][8] = {{s0, s1, s2, s3, s4, s5, s6, s7}};
    PL_FOR_EACH_INDEX(i, n) {
        pl_idx off[1];
        pl_strided_offsets<PL_NDIM, 1>((pl_idx)i, d, s, off);
        y[i] = x[off[0]];
    }
}
