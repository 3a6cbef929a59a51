// PipeLink built-in inference batch norm over channel dim 1 of x[N, C, *spatial]:
// y = (x - mean[c]) * rsqrt(var[c] + eps) * gamma[c] + beta[c]. Parameters have x's dtype.
// Never allocate, never update running statistics (inference only).
//
// Macros (chosen by pipelink/ops/cuda/__init__.py):
//   PL_T, PL_BLOCK, PL_UNROLL    as in elementwise.cu
//   PL_VEC            elements per vector access. With S = prod(spatial) > 1, PL_VEC divides S and a
//                     vector lies in one channel; with S == 1 (PL_CHANNEL_LAST 1), PL_VEC divides C
//                     and the lanes of a vector are consecutive channels
//   PL_HAS_GAMMA, PL_HAS_BETA   0/1 (pointer ignored when 0)
//   PL_INDEX64        0/1: 64-bit channel arithmetic (needed when n >= 2^32)
//
// Kernel signature (ACC = float, or double when T is double):
//   pl_batch_norm(const T* x, const T* mean, const T* var, const T* gamma, const T* beta, T* y,
//                 long long n, long long C, long long S, ACC eps)      n = N * C * S
#include "common.cuh"

#ifndef PL_VEC
#define PL_VEC 1
#endif
#ifndef PL_UNROLL
#define PL_UNROLL 1
#endif
#ifndef PL_HAS_GAMMA
#define PL_HAS_GAMMA 1
#endif
#ifndef PL_HAS_BETA
#define PL_HAS_BETA 1
#endif
#ifndef PL_CHANNEL_LAST
#define PL_CHANNEL_LAST 0
#endif
#ifndef PL_INDEX64
#define PL_INDEX64 1
#endif

#if PL_INDEX64
typedef unsigned long long pl_idx;
#else
typedef unsigned int pl_idx;
#endif

typedef PL_T T;
typedef typename pl_acc<T>::type A;

// scale = rsqrt(var+eps)*gamma and shift = beta for channel c; y = (x - mean) * scale + shift
__device__ __forceinline__ void pl_bn_coeffs(const T* __restrict__ mean, const T* __restrict__ var,
                                             const T* __restrict__ gamma, const T* __restrict__ beta, pl_idx c,
                                             A eps, A& m, A& scale, A& shift) {
    m = pl_to_acc(mean[c]);
    scale = pl_rsqrt(pl_to_acc(var[c]) + eps);
#if PL_HAS_GAMMA
    scale *= pl_to_acc(gamma[c]);
#else
    (void)gamma;
#endif
#if PL_HAS_BETA
    shift = pl_to_acc(beta[c]);
#else
    (void)beta;
    shift = A(0);
#endif
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_batch_norm(const T* __restrict__ x, const T* __restrict__ mean, const T* __restrict__ var,
              const T* __restrict__ gamma, const T* __restrict__ beta, T* __restrict__ y, long long n, long long C,
              long long S, A eps) {
    const long long nv = n / PL_VEC;
    const long long step = (long long)gridDim.x * (PL_BLOCK * PL_UNROLL);
    for (long long base = (long long)blockIdx.x * (PL_BLOCK * PL_UNROLL) + threadIdx.x; base < nv; base += step) {
        pl_vec<T, PL_VEC> v[PL_UNROLL];
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) v[u] = pl_load<T, PL_VEC>(x + j * PL_VEC);
        }
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) {
                const pl_idx e0 = (pl_idx)(j * PL_VEC);
#if PL_CHANNEL_LAST
                const pl_idx c0 = e0 % (pl_idx)C;
#pragma unroll
                for (int k = 0; k < PL_VEC; ++k) {
                    A m, scale, shift;
                    pl_bn_coeffs(mean, var, gamma, beta, c0 + k, eps, m, scale, shift);
                    v[u].v[k] = pl_from<T>((pl_to_acc(v[u].v[k]) - m) * scale + shift);
                }
#else
                const pl_idx c = (e0 / (pl_idx)S) % (pl_idx)C;
                A m, scale, shift;
                pl_bn_coeffs(mean, var, gamma, beta, c, eps, m, scale, shift);
#pragma unroll
                for (int k = 0; k < PL_VEC; ++k) v[u].v[k] = pl_from<T>((pl_to_acc(v[u].v[k]) - m) * scale + shift);
#endif
                pl_store<T, PL_VEC>(y + j * PL_VEC, v[u]);
            }
        }
    }
    // n % PL_VEC tail elements (only when the plan could not vectorise the whole tensor)
    const long long t = nv * PL_VEC + (long long)blockIdx.x * PL_BLOCK + threadIdx.x;
    if (t < n) {
        const pl_idx c = ((pl_idx)t / (pl_idx)S) % (pl_idx)C;
        A m, scale, shift;
        pl_bn_coeffs(mean, var, gamma, beta, c, eps, m, scale, shift);
        y[t] = pl_from<T>((pl_to_acc(x[t]) - m) * scale + shift);
    }
}
