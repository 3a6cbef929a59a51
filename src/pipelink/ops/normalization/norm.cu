// PipeLink built-in row normalisations over the last dimension C: layer_norm and rms_norm.
// Each row is read from global memory once and written once (register path); rows too long for
// registers use the *_big kernels, which re-read the row. Never allocate, never use atomics.
//
// Macros (chosen by row_geometry in pipelink/ops/kernel.py, called by the plans in
// pipelink/ops/normalization/cuda.py):
//   PL_T                   element type of x, y, gamma, beta (float, double, __half, __nv_bfloat16)
//   PL_BLOCK               threads per block; the launch uses exactly this many
//   PL_GROUP               threads per row (32: a warp per row, PL_BLOCK/32 rows per block; or a
//                          multiple of 32 dividing PL_BLOCK). The *_big kernels ignore it: one
//                          block of PL_BLOCK threads per row
//   PL_VEC                 elements per vector access; C % PL_VEC == 0 so every row start stays aligned
//   PL_MAX_VEC_PER_THREAD  vectors each thread keeps in registers; the register kernels need
//                          C <= PL_GROUP * PL_VEC * PL_MAX_VEC_PER_THREAD
//   PL_HAS_GAMMA, PL_HAS_BETA  0/1: multiply by gamma[C] / add beta[C] (pointer ignored when 0)
//
// Kernel signatures (ACC = float, or double when T is double; mean/rstd may be null):
//   pl_layer_norm[_big](const T* x, const T* gamma, const T* beta, T* y, ACC* mean, ACC* rstd,
//                       long long rows, int C, ACC eps)
//   pl_rms_norm[_big](const T* x, const T* gamma, T* y, long long rows, int C, ACC eps)
// layer_norm: mean = sum(x)/C, var = sum((x-mean)^2)/C (biased), rstd = 1/sqrt(var+eps),
//             y = (x-mean)*rstd*gamma + beta.
// rms_norm:   rstd = 1/sqrt(sum(x^2)/C + eps), y = x*rstd*gamma.
// x and y are distinct buffers (no plan runs a row kernel in place), hence __restrict__.
#define PL_ROW_KERNEL 1  // the row kernels' macros, types and checks (common.cuh)
#include "common.cuh"

#ifndef PL_HAS_GAMMA
#define PL_HAS_GAMMA 1
#endif
#ifndef PL_HAS_BETA
#define PL_HAS_BETA 1
#endif

// y = (x - shift) * scale [* gamma] [+ beta] for PL_VEC elements at column j * PL_VEC
template <bool IS_RMS>
__device__ __forceinline__ void pl_norm_write(const A (&v)[PL_VEC], A shift, A scale, const T* __restrict__ gamma,
                                              const T* __restrict__ beta, T* __restrict__ yr, int j) {
    A o[PL_VEC];
#pragma unroll
    for (int e = 0; e < PL_VEC; ++e) o[e] = (v[e] - shift) * scale;
#if PL_HAS_GAMMA
    A g[PL_VEC];
    pl_load_acc<T, PL_VEC>(gamma + (long long)j * PL_VEC, g);
#pragma unroll
    for (int e = 0; e < PL_VEC; ++e) o[e] *= g[e];
#else
    (void)gamma;
#endif
#if PL_HAS_BETA
    if (!IS_RMS) {
        A b[PL_VEC];
        pl_load_acc<T, PL_VEC>(beta + (long long)j * PL_VEC, b);
#pragma unroll
        for (int e = 0; e < PL_VEC; ++e) o[e] += b[e];
    }
#else
    (void)beta;
#endif
    pl_store_acc<T, PL_VEC>(yr + (long long)j * PL_VEC, o);
}

// Register path: the group's row lives in v[][] between the reductions.
template <bool IS_RMS>
__device__ __forceinline__ void pl_norm_rows(const T* __restrict__ x, const T* __restrict__ gamma,
                                             const T* __restrict__ beta, T* __restrict__ y, A* __restrict__ mean_out,
                                             A* __restrict__ rstd_out, long long rows, int C, A eps) {
    __shared__ A smem[PL_BLOCK / PL_WARP];
    const int group = threadIdx.x / PL_GROUP;
    const int lane = threadIdx.x % PL_GROUP;
    const int nv = C / PL_VEC;
    const A inv_c = A(1) / (A)C;
    for (long long base = (long long)blockIdx.x * PL_ROWS_PER_BLOCK; base < rows;
         base += (long long)gridDim.x * PL_ROWS_PER_BLOCK) {
        const long long row = base + group;
        const bool active = row < rows;
        const T* xr = x + row * (long long)C;
        A v[PL_MAX_VEC_PER_THREAD][PL_VEC];
        A s = A(0);
#pragma unroll
        for (int k = 0; k < PL_MAX_VEC_PER_THREAD; ++k) {
            const int j = lane + k * PL_GROUP;
            if (active && j < nv) {
                pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v[k]);
            } else {
#pragma unroll
                for (int e = 0; e < PL_VEC; ++e) v[k][e] = A(0);
            }
#pragma unroll
            for (int e = 0; e < PL_VEC; ++e) s += IS_RMS ? v[k][e] * v[k][e] : v[k][e];
        }
        s = pl_group_sum<PL_GROUP>(s, smem);
        A shift, rstd;
        if (IS_RMS) {
            shift = A(0);
            rstd = pl_rsqrt(s * inv_c + eps);
        } else {
            // second reduction on the registers: sum of squared deviations (no cancellation)
            shift = s * inv_c;
            A q = A(0);
#pragma unroll
            for (int k = 0; k < PL_MAX_VEC_PER_THREAD; ++k) {
                const int j = lane + k * PL_GROUP;
                if (j < nv) {
#pragma unroll
                    for (int e = 0; e < PL_VEC; ++e) {
                        const A d = v[k][e] - shift;
                        q += d * d;
                    }
                }
            }
            q = pl_group_sum<PL_GROUP>(q, smem);
            rstd = pl_rsqrt(q * inv_c + eps);
        }
        if (active) {
            T* yr = y + row * (long long)C;
#pragma unroll
            for (int k = 0; k < PL_MAX_VEC_PER_THREAD; ++k) {
                const int j = lane + k * PL_GROUP;
                if (j < nv) pl_norm_write<IS_RMS>(v[k], shift, rstd, gamma, beta, yr, j);
            }
            if (lane == 0) {
                if (mean_out != nullptr) mean_out[row] = shift;
                if (rstd_out != nullptr) rstd_out[row] = rstd;
            }
        }
    }
}

// Fallback for long rows: one block per row, the row is read two (rms) or three (layer) times.
template <bool IS_RMS>
__device__ __forceinline__ void pl_norm_rows_big(const T* __restrict__ x, const T* __restrict__ gamma,
                                                 const T* __restrict__ beta, T* __restrict__ y,
                                                 A* __restrict__ mean_out, A* __restrict__ rstd_out, long long rows,
                                                 int C, A eps) {
    __shared__ A smem[PL_BLOCK / PL_WARP];
    const int nv = C / PL_VEC;
    const A inv_c = A(1) / (A)C;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * (long long)C;
        A s = A(0);
        for (int j = threadIdx.x; j < nv; j += PL_BLOCK) {
            A v[PL_VEC];
            pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v);
#pragma unroll
            for (int e = 0; e < PL_VEC; ++e) s += IS_RMS ? v[e] * v[e] : v[e];
        }
        s = pl_block_sum(s, smem);
        A shift, rstd;
        if (IS_RMS) {
            shift = A(0);
            rstd = pl_rsqrt(s * inv_c + eps);
        } else {
            shift = s * inv_c;
            A q = A(0);
            for (int j = threadIdx.x; j < nv; j += PL_BLOCK) {
                A v[PL_VEC];
                pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v);
#pragma unroll
                for (int e = 0; e < PL_VEC; ++e) {
                    const A d = v[e] - shift;
                    q += d * d;
                }
            }
            q = pl_block_sum(q, smem);
            rstd = pl_rsqrt(q * inv_c + eps);
        }
        T* yr = y + row * (long long)C;
        for (int j = threadIdx.x; j < nv; j += PL_BLOCK) {
            A v[PL_VEC];
            pl_load_acc<T, PL_VEC>(xr + (long long)j * PL_VEC, v);
            pl_norm_write<IS_RMS>(v, shift, rstd, gamma, beta, yr, j);
        }
        if (threadIdx.x == 0) {
            if (mean_out != nullptr) mean_out[row] = shift;
            if (rstd_out != nullptr) rstd_out[row] = rstd;
        }
    }
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_layer_norm(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta, T* __restrict__ y,
              A* __restrict__ mean, A* __restrict__ rstd, long long rows, int C, A eps) {
    pl_norm_rows<false>(x, gamma, beta, y, mean, rstd, rows, C, eps);
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_layer_norm_big(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
                  T* __restrict__ y, A* __restrict__ mean, A* __restrict__ rstd, long long rows, int C, A eps) {
    pl_norm_rows_big<false>(x, gamma, beta, y, mean, rstd, rows, C, eps);
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_rms_norm(const T* __restrict__ x, const T* __restrict__ gamma, T* __restrict__ y, long long rows, int C, A eps) {
    pl_norm_rows<true>(x, gamma, nullptr, y, nullptr, nullptr, rows, C, eps);
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_rms_norm_big(const T* __restrict__ x, const T* __restrict__ gamma, T* __restrict__ y, long long rows, int C,
                A eps) {
    pl_norm_rows_big<true>(x, gamma, nullptr, y, nullptr, nullptr, rows, C, eps);
}
