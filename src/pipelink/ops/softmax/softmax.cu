// PipeLink built-in softmax over the last dimension C: y = exp(x - max) / sum(exp(x - max)).
// Register path reads each row once and writes it once; pl_softmax_big re-reads long rows.
// Never allocate, never use fast-math exponentials (accuracy is part of the contract).
//
// Macros: PL_T, PL_BLOCK, PL_GROUP, PL_VEC, PL_MAX_VEC_PER_THREAD, chosen by row_geometry in
// pipelink/ops/kernel.py, with the meaning they have in pipelink/ops/normalization/norm.cu (C % PL_VEC
// == 0; register kernel needs C <= PL_GROUP * PL_VEC * PL_MAX_VEC_PER_THREAD).
// x and y are distinct buffers (no plan runs a row kernel in place), hence __restrict__.
//
// Kernel signatures:
//   pl_softmax(const T* x, T* y, long long rows, int C)
//   pl_softmax_big(const T* x, T* y, long long rows, int C)        one block (PL_BLOCK threads) per row
// A row of all -inf gives NaN (0/0), like the NumPy reference; a NaN anywhere in a row gives NaN.
#define PL_ROW_KERNEL 1  // the row kernels' macros, types and checks (common.cuh)
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_softmax(const T* __restrict__ x, T* __restrict__ y, long long rows, int C) {
    __shared__ A smem[PL_BLOCK / PL_WARP];
    const int group = threadIdx.x / PL_GROUP;
    const int lane = threadIdx.x % PL_GROUP;
    const int nv = C / PL_VEC;
    for (long long base = (long long)blockIdx.x * PL_ROWS_PER_BLOCK; base < rows;
         base += (long long)gridDim.x * PL_ROWS_PER_BLOCK) {
        const long long row = base + group;
        const bool active = row < rows;
        const T* xr = x + row * (long long)C;
        A v[PL_MAX_VEC_PER_THREAD][PL_VEC];
        A m = pl_neg_inf<A>();
#pragma unroll
        for (int k = 0; k < PL_MAX_VEC_PER_THREAD; ++k) {
            const int j = lane + k * PL_GROUP;
            if (active && j < nv) {
                pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v[k]);
#pragma unroll
                for (int e = 0; e < PL_VEC; ++e) m = pl_op_max()(m, v[k][e]);
            }
        }
        m = pl_group_max<PL_GROUP>(m, smem);
        A s = A(0);
#pragma unroll
        for (int k = 0; k < PL_MAX_VEC_PER_THREAD; ++k) {
            const int j = lane + k * PL_GROUP;
            if (active && j < nv) {
#pragma unroll
                for (int e = 0; e < PL_VEC; ++e) {
                    v[k][e] = pl_exp(v[k][e] - m);
                    s += v[k][e];
                }
            }
        }
        s = pl_group_sum<PL_GROUP>(s, smem);
        const A inv = A(1) / s;
        if (active) {
            T* yr = y + row * (long long)C;
#pragma unroll
            for (int k = 0; k < PL_MAX_VEC_PER_THREAD; ++k) {
                const int j = lane + k * PL_GROUP;
                if (j < nv) {
#pragma unroll
                    for (int e = 0; e < PL_VEC; ++e) v[k][e] *= inv;
                    pl_store_acc<T, PL_VEC>(yr + (long long)j * PL_VEC, v[k]);
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_softmax_big(const T* __restrict__ x, T* __restrict__ y, long long rows, int C) {
    __shared__ A smem[PL_BLOCK / PL_WARP];
    const int nv = C / PL_VEC;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * (long long)C;
        A m = pl_neg_inf<A>();
        for (int j = threadIdx.x; j < nv; j += PL_BLOCK) {
            A v[PL_VEC];
            pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v);
#pragma unroll
            for (int e = 0; e < PL_VEC; ++e) m = pl_op_max()(m, v[e]);
        }
        m = pl_group_max<PL_BLOCK>(m, smem);
        A s = A(0);
        for (int j = threadIdx.x; j < nv; j += PL_BLOCK) {
            A v[PL_VEC];
            pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v);
#pragma unroll
            for (int e = 0; e < PL_VEC; ++e) s += pl_exp(v[e] - m);
        }
        s = pl_block_sum(s, smem);
        const A inv = A(1) / s;
        T* yr = y + row * (long long)C;
        for (int j = threadIdx.x; j < nv; j += PL_BLOCK) {
            A v[PL_VEC];
            pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v);
#pragma unroll
            for (int e = 0; e < PL_VEC; ++e) v[e] = pl_exp(v[e] - m) * inv;
            pl_store_acc<T, PL_VEC>(yr + (long long)j * PL_VEC, v);
        }
    }
}
