// PipeLink built-in softmax over the last dimension C: y = exp(t - max) / sum(exp(t - max)), with t = x
// (pl_softmax*) or t = x * scale + bias (pl_softmax_scaled*: attention's scaled, masked scores in one pass).
// Register path reads each row once and writes it once; the _big kernels re-read long rows.
// Never allocate, never use fast-math exponentials (accuracy is part of the contract).
//
// Macros: PL_T, PL_BLOCK, PL_GROUP, PL_VEC, PL_MAX_VEC_PER_THREAD, chosen by row_geometry in
// pipelink/ops/kernel.py, with the meaning they have in pipelink/ops/normalization/norm.cu (C % PL_VEC
// == 0; register kernel needs C <= PL_GROUP * PL_VEC * PL_MAX_VEC_PER_THREAD). The scaled kernels also
// take (ops/softmax/cuda.py: plan_softmax):
//   PL_SOFTMAX_BIAS  0 no bias; 1 bias contiguous along the row (bc == 1, read in vectors of PL_VEC: every
//                    row's bias offset is a multiple of PL_VEC); 2 one bias value per row (bc == 0);
//                    3 bias read element by element with stride bc along the row
//   PL_BIAS_NDIM     how many of d0..d7 decode a row index into its bias offset (1..8)
//   PL_INDEX64       0 when rows and every bias offset are below 2^31 (32-bit decoding)
// x and y are distinct buffers (no plan runs a row kernel in place), hence __restrict__.
//
// Kernel signatures:
//   pl_softmax(const T* x, T* y, long long rows, int C)
//   pl_softmax_big(const T* x, T* y, long long rows, int C)        one block (PL_BLOCK threads) per row
//   pl_softmax_scaled(const T* x, const T* bias, T* y, long long rows, int C, A scale, long long bc,
//                     long long d0..d7, long long bs0..bs7)
//   pl_softmax_scaled_big(same arguments)
//       t[r, j] = x[r, j] * scale + bias[off(r) + j * bc], where off(r) = sum_k i_k * bs_k for row r
//       decoded row-major over the leading dims d0..d(PL_BIAS_NDIM-1) (0 strides on broadcast dims);
//       bias is null and unread with PL_SOFTMAX_BIAS 0. A is float (double for double). The product is
//       rounded before the sum (__fmul_rn: no FMA), as NumPy computes x * scale + bias.
// A row of all -inf gives NaN (0/0), like the NumPy reference; a NaN anywhere in a row gives NaN.
#define PL_ROW_KERNEL 1  // the row kernels' macros, types and checks (common.cuh)
#include "common.cuh"

#ifndef PL_SOFTMAX_BIAS
#define PL_SOFTMAX_BIAS 0
#endif
#ifndef PL_BIAS_NDIM
#define PL_BIAS_NDIM 1
#endif
#if PL_SOFTMAX_BIAS < 0 || PL_SOFTMAX_BIAS > 3
#error "PL_SOFTMAX_BIAS must be 0..3"
#endif
#if PL_BIAS_NDIM < 1 || PL_BIAS_NDIM > 8
#error "PL_BIAS_NDIM must be 1..8"
#endif

__device__ __forceinline__ float pl_mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double pl_mul_rn(double a, double b) { return __dmul_rn(a, b); }

// What a row kernel does to each vector it loads, before the max: nothing (t = x) ...
struct pl_row_plain {
    __device__ __forceinline__ void operator()(int j, A (&v)[PL_VEC]) const {
        (void)j;
        (void)v;
    }
};

// ... or t = x * scale + bias, for one row (b: the row's bias; b0: its one value with PL_SOFTMAX_BIAS 2).
struct pl_row_scaled {
    const T* b;
    A scale;
    A b0;
    long long bc;
    __device__ __forceinline__ void operator()(int j, A (&v)[PL_VEC]) const {
#if PL_SOFTMAX_BIAS == 1
        A bv[PL_VEC];
        pl_load_acc<T, PL_VEC>(b + (long long)j * PL_VEC, bv);
#endif
#pragma unroll
        for (int e = 0; e < PL_VEC; ++e) {
            A t = pl_mul_rn(v[e], scale);
#if PL_SOFTMAX_BIAS == 1
            t = t + bv[e];
#elif PL_SOFTMAX_BIAS == 2
            t = t + b0;
#elif PL_SOFTMAX_BIAS == 3
            t = t + pl_to_acc(b[((long long)j * PL_VEC + e) * bc]);
#endif
            v[e] = t;
        }
    }
};

// The transform of row `row` of a scaled kernel: its bias offset decoded once, here.
__device__ __forceinline__ pl_row_scaled pl_scaled_row(const T* __restrict__ bias, A scale, long long bc,
                                                       const long long (&d)[8], const long long (&s)[1][8],
                                                       long long row) {
    pl_row_scaled f;
    f.b = bias;
    f.scale = scale;
    f.b0 = A(0);
    f.bc = bc;
#if PL_SOFTMAX_BIAS
    pl_idx off[1];
    pl_strided_offsets<PL_BIAS_NDIM, 1>((pl_idx)row, d, s, off);
    f.b = bias + (long long)off[0];
#if PL_SOFTMAX_BIAS == 2
    f.b0 = pl_to_acc(f.b[0]);
#endif
#else
    (void)d;
    (void)s;
    (void)row;
#endif
    return f;
}

// Rows that fit the registers: PL_GROUP threads per row, PL_ROWS_PER_BLOCK rows per block, each row read
// and written once. row_of(row) gives the row's transform (evaluated for an inactive group's row 0 too).
template <class RowOf>
__device__ __forceinline__ void pl_softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long rows,
                                                int C, RowOf row_of) {
    __shared__ A smem[PL_BLOCK / PL_WARP];
    const int group = threadIdx.x / PL_GROUP;
    const int lane = threadIdx.x % PL_GROUP;
    const int nv = C / PL_VEC;
    for (long long base = (long long)blockIdx.x * PL_ROWS_PER_BLOCK; base < rows;
         base += (long long)gridDim.x * PL_ROWS_PER_BLOCK) {
        const long long row = base + group;
        const bool active = row < rows;
        const T* xr = x + row * (long long)C;
        const auto f = row_of(active ? row : 0);
        A v[PL_MAX_VEC_PER_THREAD][PL_VEC];
        A m = pl_neg_inf<A>();
#pragma unroll
        for (int k = 0; k < PL_MAX_VEC_PER_THREAD; ++k) {
            const int j = lane + k * PL_GROUP;
            if (active && j < nv) {
                pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v[k]);
                f(j, v[k]);
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

// Long rows: one block per row, the row read three times (max, sum, store).
template <class RowOf>
__device__ __forceinline__ void pl_softmax_rows_big(const T* __restrict__ x, T* __restrict__ y,
                                                    long long rows, int C, RowOf row_of) {
    __shared__ A smem[PL_BLOCK / PL_WARP];
    const int nv = C / PL_VEC;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * (long long)C;
        const auto f = row_of(row);
        A m = pl_neg_inf<A>();
        for (int j = threadIdx.x; j < nv; j += PL_BLOCK) {
            A v[PL_VEC];
            pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v);
            f(j, v);
#pragma unroll
            for (int e = 0; e < PL_VEC; ++e) m = pl_op_max()(m, v[e]);
        }
        m = pl_group_max<PL_BLOCK>(m, smem);
        A s = A(0);
        for (int j = threadIdx.x; j < nv; j += PL_BLOCK) {
            A v[PL_VEC];
            pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v);
            f(j, v);
#pragma unroll
            for (int e = 0; e < PL_VEC; ++e) s += pl_exp(v[e] - m);
        }
        s = pl_block_sum(s, smem);
        const A inv = A(1) / s;
        T* yr = y + row * (long long)C;
        for (int j = threadIdx.x; j < nv; j += PL_BLOCK) {
            A v[PL_VEC];
            pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v);
            f(j, v);
#pragma unroll
            for (int e = 0; e < PL_VEC; ++e) v[e] = pl_exp(v[e] - m) * inv;
            pl_store_acc<T, PL_VEC>(yr + (long long)j * PL_VEC, v);
        }
    }
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_softmax(const T* __restrict__ x, T* __restrict__ y, long long rows, int C) {
    pl_softmax_rows(x, y, rows, C, [](long long) { return pl_row_plain(); });
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_softmax_big(const T* __restrict__ x, T* __restrict__ y, long long rows, int C) {
    pl_softmax_rows_big(x, y, rows, C, [](long long) { return pl_row_plain(); });
}

#define PL_SOFTMAX_SCALED_PARAMS                                                                         \
    const T *__restrict__ x, const T *__restrict__ bias, T *__restrict__ y, long long rows, int C,       \
        A scale, long long bc, long long d0, long long d1, long long d2, long long d3, long long d4,     \
        long long d5, long long d6, long long d7, long long bs0, long long bs1, long long bs2,           \
        long long bs3, long long bs4, long long bs5, long long bs6, long long bs7
#define PL_SOFTMAX_SCALED_DECODE                                                                         \
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};                                             \
    const long long s[1][8] = {{bs0, bs1, bs2, bs3, bs4, bs5, bs6, bs7}}

extern "C" __global__ void __launch_bounds__(PL_BLOCK) pl_softmax_scaled(PL_SOFTMAX_SCALED_PARAMS) {
    PL_SOFTMAX_SCALED_DECODE;
    pl_softmax_rows(x, y, rows, C, [&](long long row) { return pl_scaled_row(bias, scale, bc, d, s, row); });
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK) pl_softmax_scaled_big(PL_SOFTMAX_SCALED_PARAMS) {
    PL_SOFTMAX_SCALED_DECODE;
    pl_softmax_rows_big(x, y, rows, C,
                        [&](long long row) { return pl_scaled_row(bias, scale, bc, d, s, row); });
}
