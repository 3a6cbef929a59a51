// PipeLink built-in inference batch norm over channel dim 1 of x[N, C, *spatial]:
// y = (x - mean[c]) * rsqrt(var[c] + eps) * gamma[c] + beta[c]. Parameters have x's dtype.
// Never allocate, never update running statistics (inference only).
//
// Macros (chosen by plan_batch_norm in pipelink/ops/batch_norm/cuda.py):
//   PL_T, PL_BLOCK, PL_UNROLL    element type, threads per block, vectors in flight per thread
//   PL_VEC            elements per vector access. With S = prod(spatial) > 1, PL_VEC divides S and a
//                     vector lies in one channel; with S == 1 (PL_CHANNEL_LAST 1), PL_VEC divides C
//                     and the lanes of a vector are consecutive channels
//   PL_HAS_GAMMA, PL_HAS_BETA   0/1 (pointer ignored when 0)
//   PL_INDEX64        0/1: 64-bit channel arithmetic (needed when n >= 2^32)
// y may equal x (in-place use), so x and y are not __restrict__; the parameters are never outputs.
//
// Kernel signature (ACC = float, or double when T is double):
//   pl_batch_norm(const T* x, const T* mean, const T* var, const T* gamma, const T* beta, T* y,
//                 long long n, long long C, long long S, ACC eps)      n = N * C * S
#include "common.cuh"

#ifndef PL_HAS_GAMMA
#define PL_HAS_GAMMA 1
#endif
#ifndef PL_HAS_BETA
#define PL_HAS_BETA 1
#endif
#ifndef PL_CHANNEL_LAST
#define PL_CHANNEL_LAST 0
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

// y = (x - mean) * scale + shift for element e (channel (e / S) % C) of value v
__device__ __forceinline__ A pl_bn_apply(A v, pl_idx c, const T* __restrict__ mean, const T* __restrict__ var,
                                         const T* __restrict__ gamma, const T* __restrict__ beta, A eps) {
    A m, scale, shift;
    pl_bn_coeffs(mean, var, gamma, beta, c, eps, m, scale, shift);
    return (v - m) * scale + shift;
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_batch_norm(const T* x, const T* __restrict__ mean, const T* __restrict__ var, const T* __restrict__ gamma,
              const T* __restrict__ beta, T* y, long long n, long long C, long long S, A eps) {
    pl_vec<T, PL_VEC> v[PL_UNROLL];
    pl_vector_loop(
        n, [&](int u, long long j) { v[u] = pl_load<T, PL_VEC>(x + j * PL_VEC); },
        [&](int u, long long j) {
            const pl_idx e0 = (pl_idx)(j * PL_VEC);
#if PL_CHANNEL_LAST
            // the lanes of a vector are consecutive channels
            const pl_idx c0 = e0 % (pl_idx)C;
#pragma unroll
            for (int k = 0; k < PL_VEC; ++k) {
                v[u].v[k] = pl_from<T>(pl_bn_apply(pl_to_acc(v[u].v[k]), c0 + k, mean, var, gamma, beta, eps));
            }
#else
            // a vector lies in one channel: its coefficients are computed once
            A m, scale, shift;
            pl_bn_coeffs(mean, var, gamma, beta, (e0 / (pl_idx)S) % (pl_idx)C, eps, m, scale, shift);
#pragma unroll
            for (int k = 0; k < PL_VEC; ++k) v[u].v[k] = pl_from<T>((pl_to_acc(v[u].v[k]) - m) * scale + shift);
#endif
            pl_store<T, PL_VEC>(y + j * PL_VEC, v[u]);
        },
        [&](long long t) {
            const pl_idx c = ((pl_idx)t / (pl_idx)S) % (pl_idx)C;
            y[t] = pl_from<T>(pl_bn_apply(pl_to_acc(x[t]), c, mean, var, gamma, beta, eps));
        });
}
