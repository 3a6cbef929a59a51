// PipeLink built-in elementwise kernels: unary activations, binary arithmetic (same shape and
// broadcast), bias_add and cast. Compute in float (double for float64); never allocate, never
// assume more alignment than the launch plan chose (PL_VEC elements).
//
// Which kernels a compilation contains is chosen by macros (see pipelink/ops/cuda/__init__.py):
//   PL_T            element type (float, double, __half, __nv_bfloat16) - every kernel but pl_cast
//   PL_UNARY_OP     one of PL_OP_IDENTITY .. PL_OP_SCALE     -> pl_unary
//   PL_BINARY_OP    one of PL_OP_ADD .. PL_OP_DIV            -> pl_binary, pl_binary_bcast
//   PL_BIAS_ADD     defined                                 -> pl_bias_add
//   PL_TIN, PL_TOUT input and output types                   -> pl_cast
//   PL_VEC          elements per vector access (16 / sizeof(T) at most); every pointer the kernel
//                   is given is aligned to PL_VEC * sizeof(T) bytes (the plan checks it)
//   PL_BLOCK        threads per block (the launch must use exactly this many)
//   PL_UNROLL       vectors in flight per thread per grid-stride step
//   PL_NDIM         dims of the broadcast index space (1..8), PL_INDEX64 0/1 index width there
//   PL_FAST_ACT     1 for 16-bit types: silu and gelu use the hardware exp and reciprocal (relative
//                   error below 1e-5 for every input, tails included: far under half an ulp of a half
//                   or bfloat16 result, 2^-12 / 2^-9); else 0 (the correctly rounded library functions)
//
// Kernel signatures (all sizes are element counts; strides are in elements and >= 0):
//   pl_unary(const T* x, T* y, long long n, ACC alpha)               alpha: factor of `scale`
//   pl_binary(const T* a, const T* b, T* y, long long n)
//   pl_binary_bcast(const T* a, const T* b, T* y, long long n,
//                   long long d0..d7, long long sa0..sa7, long long sb0..sb7)
//   pl_bias_add(const T* x, const T* bias, T* y, long long n, long long N)
//   pl_cast(const TIN* x, TOUT* y, long long n)
// ACC is float, or double when T is double. y may equal x (or a) for in-place use.
#include "common.cuh"

#define PL_OP_IDENTITY 0
#define PL_OP_RELU 1
#define PL_OP_SILU 2
#define PL_OP_GELU 3
#define PL_OP_GELU_TANH 4
#define PL_OP_SCALE 5
#define PL_OP_ADD 10
#define PL_OP_SUB 11
#define PL_OP_MUL 12
#define PL_OP_DIV 13

#ifndef PL_VEC
#define PL_VEC 1
#endif
#ifndef PL_UNROLL
#define PL_UNROLL 1
#endif
#ifndef PL_NDIM
#define PL_NDIM 8
#endif
#ifndef PL_FAST_ACT
#define PL_FAST_ACT 0
#endif
#ifndef PL_INDEX64
#define PL_INDEX64 1
#endif

#if PL_INDEX64
typedef long long pl_idx;
#else
typedef unsigned int pl_idx;
#endif

// ---------------------------------------------------------------------------------------------
// Operators, in the accumulation type A.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float pl_erf(float x) { return erff(x); }
__device__ __forceinline__ double pl_erf(double x) { return erf(x); }
__device__ __forceinline__ float pl_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double pl_tanh(double x) { return tanh(x); }
// x / (1 + exp(-x)); with PL_FAST_ACT (float only) from ex2.approx and rcp: 1/inf is 0, so the
// result goes to -0 for very negative x as the exact one does
__device__ __forceinline__ float pl_silu(float x) {
#if PL_FAST_ACT
    return x * __frcp_rn(1.0f + __expf(-x));
#else
    return x / (1.0f + pl_exp(-x));
#endif
}
__device__ __forceinline__ double pl_silu(double x) { return x / (1.0 + pl_exp(-x)); }
// x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2. With PL_FAST_ACT (float only), erfc(u) for u = |x| / sqrt 2
// comes from the Chebyshev fit of exp(u^2) erfc(u) in t = 1 / (1 + u/2) (fractional error below 1.2e-7
// for every u >= 0; Numerical Recipes' erfcc), and Phi(x) = 1 - erfc(u)/2 for x >= 0: a relative error
// that stays small in both tails, unlike the absolute error bounds of the shorter erf fits.
__device__ __forceinline__ float pl_gelu(float x) {
#if PL_FAST_ACT
    const float u = fabsf(x) * 0.70710678118654752f;
    const float t = __fdividef(1.0f, fmaf(0.5f, u, 1.0f));
    float p = fmaf(t, 0.17087277f, -0.82215223f);
    p = fmaf(t, p, 1.48851587f);
    p = fmaf(t, p, -1.13520398f);
    p = fmaf(t, p, 0.27886807f);
    p = fmaf(t, p, -0.18628806f);
    p = fmaf(t, p, 0.09678418f);
    p = fmaf(t, p, 0.37409196f);
    p = fmaf(t, p, 1.00002368f);
    p = fmaf(t, p, -1.26551223f);
    const float half_erfc = 0.5f * t * __expf(fmaf(-u, u, p));
    return x * (x < 0.0f ? half_erfc : 1.0f - half_erfc);
#else
    return 0.5f * x * (1.0f + pl_erf(x * 0.70710678118654752440f));
#endif
}
__device__ __forceinline__ double pl_gelu(double x) { return 0.5 * x * (1.0 + pl_erf(x * 0.70710678118654752440)); }

#if defined(PL_UNARY_OP)
template <class A> __device__ __forceinline__ A pl_unary_apply(A x, A alpha) {
#if PL_UNARY_OP == PL_OP_RELU
    (void)alpha;
    return x < A(0) ? A(0) : x;  // NaN propagates, like numpy.maximum(x, 0)
#elif PL_UNARY_OP == PL_OP_SILU
    (void)alpha;
    return pl_silu(x);
#elif PL_UNARY_OP == PL_OP_GELU
    (void)alpha;
    return pl_gelu(x);
#elif PL_UNARY_OP == PL_OP_GELU_TANH
    (void)alpha;
    const A inner = A(0.79788456080286535588) * (x + A(0.044715) * x * x * x);
    return A(0.5) * x * (A(1) + pl_tanh(inner));
#elif PL_UNARY_OP == PL_OP_SCALE
    return x * alpha;
#elif PL_UNARY_OP == PL_OP_IDENTITY
    (void)alpha;
    return x;
#else
#error "unknown PL_UNARY_OP"
#endif
}
#endif

#if defined(PL_BINARY_OP)
template <class A> __device__ __forceinline__ A pl_binary_apply(A a, A b) {
#if PL_BINARY_OP == PL_OP_ADD
    return a + b;
#elif PL_BINARY_OP == PL_OP_SUB
    return a - b;
#elif PL_BINARY_OP == PL_OP_MUL
    return a * b;
#elif PL_BINARY_OP == PL_OP_DIV
    return a / b;
#else
#error "unknown PL_BINARY_OP"
#endif
}
#endif

#if defined(PL_T)
typedef PL_T T;
typedef typename pl_acc<T>::type A;
typedef pl_vec<T, PL_VEC> V;

// First vector index of this thread, and the grid-stride step, in vectors.
#define PL_GRID_START ((long long)blockIdx.x * (PL_BLOCK * PL_UNROLL) + threadIdx.x)
#define PL_GRID_STEP ((long long)gridDim.x * (PL_BLOCK * PL_UNROLL))
// Index of the one tail element (n % PL_VEC of them) this thread owns, if any.
#define PL_TAIL_INDEX(nv) ((nv) * PL_VEC + (long long)blockIdx.x * PL_BLOCK + threadIdx.x)

#if defined(PL_UNARY_OP)
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_unary(const T* __restrict__ x, T* __restrict__ y, long long n, A alpha) {
    const long long nv = n / PL_VEC;
    for (long long base = PL_GRID_START; base < nv; base += PL_GRID_STEP) {
        V v[PL_UNROLL];
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) v[u] = pl_load<T, PL_VEC>(x + j * PL_VEC);
        }
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) {
#if PL_UNARY_OP != PL_OP_IDENTITY
#pragma unroll
                for (int k = 0; k < PL_VEC; ++k) v[u].v[k] = pl_from<T>(pl_unary_apply(pl_to_acc(v[u].v[k]), alpha));
#endif
                pl_store<T, PL_VEC>(y + j * PL_VEC, v[u]);
            }
        }
    }
    const long long t = PL_TAIL_INDEX(nv);
    if (t < n) {
#if PL_UNARY_OP == PL_OP_IDENTITY
        y[t] = x[t];  // bit-exact copy
#else
        y[t] = pl_from<T>(pl_unary_apply(pl_to_acc(x[t]), alpha));
#endif
    }
}
#endif  // PL_UNARY_OP

#if defined(PL_BINARY_OP)
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_binary(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, long long n) {
    const long long nv = n / PL_VEC;
    for (long long base = PL_GRID_START; base < nv; base += PL_GRID_STEP) {
        V va[PL_UNROLL], vb[PL_UNROLL];
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) {
                va[u] = pl_load<T, PL_VEC>(a + j * PL_VEC);
                vb[u] = pl_load<T, PL_VEC>(b + j * PL_VEC);
            }
        }
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) {
#pragma unroll
                for (int k = 0; k < PL_VEC; ++k) {
                    va[u].v[k] = pl_from<T>(pl_binary_apply(pl_to_acc(va[u].v[k]), pl_to_acc(vb[u].v[k])));
                }
                pl_store<T, PL_VEC>(y + j * PL_VEC, va[u]);
            }
        }
    }
    const long long t = PL_TAIL_INDEX(nv);
    if (t < n) y[t] = pl_from<T>(pl_binary_apply(pl_to_acc(a[t]), pl_to_acc(b[t])));
}

// General broadcast: y is contiguous with shape d[0..PL_NDIM-1] (row-major); a and b are read
// with per-dimension element strides sa/sb (0 on broadcast dimensions).
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_binary_bcast(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, long long n,
                long long d0, long long d1, long long d2, long long d3,
                long long d4, long long d5, long long d6, long long d7,
                long long sa0, long long sa1, long long sa2, long long sa3,
                long long sa4, long long sa5, long long sa6, long long sa7,
                long long sb0, long long sb1, long long sb2, long long sb3,
                long long sb4, long long sb5, long long sb6, long long sb7) {
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long sa[8] = {sa0, sa1, sa2, sa3, sa4, sa5, sa6, sa7};
    const long long sb[8] = {sb0, sb1, sb2, sb3, sb4, sb5, sb6, sb7};
    const long long step = (long long)gridDim.x * PL_BLOCK;
    for (long long i = (long long)blockIdx.x * PL_BLOCK + threadIdx.x; i < n; i += step) {
        pl_idx rem = (pl_idx)i, oa = 0, ob = 0;
#pragma unroll
        for (int k = PL_NDIM - 1; k > 0; --k) {
            const pl_idx dk = (pl_idx)d[k];
            const pl_idx q = rem / dk;
            const pl_idx r = rem - q * dk;
            oa += r * (pl_idx)sa[k];
            ob += r * (pl_idx)sb[k];
            rem = q;
        }
        oa += rem * (pl_idx)sa[0];
        ob += rem * (pl_idx)sb[0];
        y[i] = pl_from<T>(pl_binary_apply(pl_to_acc(a[oa]), pl_to_acc(b[ob])));
    }
}
#endif  // PL_BINARY_OP

#if defined(PL_BIAS_ADD)
// y[..., c] = x[..., c] + bias[c] with N = bias length; PL_VEC divides N.
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_bias_add(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y, long long n, long long N) {
    const long long nv = n / PL_VEC;
    for (long long base = PL_GRID_START; base < nv; base += PL_GRID_STEP) {
        V vx[PL_UNROLL], vb[PL_UNROLL];
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) {
                const pl_idx col = (pl_idx)(j * PL_VEC) % (pl_idx)N;
                vx[u] = pl_load<T, PL_VEC>(x + j * PL_VEC);
                vb[u] = pl_load<T, PL_VEC>(bias + col);
            }
        }
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) {
#pragma unroll
                for (int k = 0; k < PL_VEC; ++k) {
                    vx[u].v[k] = pl_from<T>(pl_to_acc(vx[u].v[k]) + pl_to_acc(vb[u].v[k]));
                }
                pl_store<T, PL_VEC>(y + j * PL_VEC, vx[u]);
            }
        }
    }
    const long long t = PL_TAIL_INDEX(nv);
    if (t < n) y[t] = pl_from<T>(pl_to_acc(x[t]) + pl_to_acc(bias[(pl_idx)t % (pl_idx)N]));
}
#endif  // PL_BIAS_ADD
#endif  // PL_T

#if defined(PL_TIN) && defined(PL_TOUT)
// y = (TOUT)x, through the wider of the two accumulation types; rounding to nearest even, and
// double -> 16-bit rounded once (no double rounding through float).
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_cast(const PL_TIN* __restrict__ x, PL_TOUT* __restrict__ y, long long n) {
    const long long nv = n / PL_VEC;
    const long long step = (long long)gridDim.x * (PL_BLOCK * PL_UNROLL);
    for (long long base = (long long)blockIdx.x * (PL_BLOCK * PL_UNROLL) + threadIdx.x; base < nv; base += step) {
        pl_vec<PL_TIN, PL_VEC> vi[PL_UNROLL];
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) vi[u] = pl_load<PL_TIN, PL_VEC>(x + j * PL_VEC);
        }
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) {
                pl_vec<PL_TOUT, PL_VEC> vo;
#pragma unroll
                for (int k = 0; k < PL_VEC; ++k) vo.v[k] = pl_from<PL_TOUT>(pl_to_acc(vi[u].v[k]));
                pl_store<PL_TOUT, PL_VEC>(y + j * PL_VEC, vo);
            }
        }
    }
    const long long t = nv * PL_VEC + (long long)blockIdx.x * PL_BLOCK + threadIdx.x;
    if (t < n) y[t] = pl_from<PL_TOUT>(pl_to_acc(x[t]));
}
#endif  // PL_TIN && PL_TOUT
