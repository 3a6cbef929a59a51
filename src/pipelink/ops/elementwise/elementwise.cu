// PipeLink built-in elementwise kernels: unary activations, binary arithmetic (same shape and
// broadcast), bias_add and float casts. Compute in float (double for float64); never allocate, never
// assume more alignment than the launch plan chose (PL_VEC elements).
//
// Which kernels a compilation contains is chosen by macros, set by the plans of
// pipelink/ops/elementwise/cuda.py:
//   PL_T            element type (float, double, __half, __nv_bfloat16; and the integers signed char,
//                   unsigned char, short, unsigned short, int, unsigned int, long long and unsigned long
//                   long for PL_OP_ADD, PL_OP_SUB, PL_OP_MUL, which wrap around like NumPy, PL_OP_DIV
//                   (truncating), PL_OP_POW (wrapping), PL_OP_MAX, PL_OP_MIN, the remainders, the bitwise ops and the shifts;
//                   and for the unary PL_OP_NEG, PL_OP_ABS, PL_OP_SIGN, PL_OP_BITWISE_NOT and (not the
//                   64-bit ones) PL_OP_SHRINK) - every kernel but pl_cast
//   PL_UNARY_OP     one of the unary PL_OP_* codes below     -> pl_unary
//   PL_BINARY_OP    one of the binary PL_OP_* codes below    -> pl_binary, pl_binary_bcast
//   PL_BIAS_ADD     defined                                 -> pl_bias_add
//   PL_TIN, PL_TOUT input and output types                   -> pl_cast
//   PL_VEC          elements per vector access (16 / sizeof(T) at most); every pointer the kernel
//                   is given is aligned to PL_VEC * sizeof(T) bytes (the plan checks it)
//   PL_BLOCK        threads per block (the launch must use exactly this many)
//   PL_UNROLL       vectors in flight per thread per grid-stride step
//   PL_NDIM         dims of the broadcast index space (1..8), PL_INDEX64 0/1 index width there
//   PL_FAST_ACT     1 for 16-bit floats: silu, sigmoid, tanh and gelu use the hardware exp and reciprocal
//                   (relative error of the float result below 2e-5 for every input, tails included: far
//                   under half an ulp of a half or bfloat16 result, 2^-12 / 2^-9); 2 for bfloat16:
//                   as 1, and gelu's erfc fit drops to degree 3 (relative error of the float result
//                   below 3e-4, a seventh of bfloat16's half ulp); else 0 (the correctly rounded
//                   library functions)
//
// Kernel signatures (all sizes are element counts; strides are in elements and >= 0):
//   pl_unary(const T* x, T* y, long long n, P alpha, P beta)
//                                  alpha: factor of `scale`, slope of `leaky_relu`, alpha of `elu`,
//                                  `celu` and `silu`, threshold of `thresholded_relu`, lambd of `shrink`;
//                                  beta: bias of `shrink`; both unread by the other ops
//   pl_binary(const T* a, const T* b, T* y, long long n)
//   pl_binary_bcast(const T* a, const T* b, T* y, long long n,
//                   long long d0..d7, long long sa0..sa7, long long sb0..sb7)
//   pl_bias_add(const T* x, const T* bias, T* y, long long n, long long N)
//   pl_cast(const TIN* x, TOUT* y, long long n)
// ACC is float, or double when T is double (int for the 8- and 16-bit integer types and int32, long long
// for int64, T itself for uint32 and uint64: common.cuh's pl_acc); P is ACC for the floats and double for the integers (shrink compares and adds in float64, as
// the ONNX reference does). y may equal x (or a, or b): fused epilogues run these
// kernels in place, so those pointers are not __restrict__ (each element is read before the same
// thread writes it, so in-place use is safe).
#include "common.cuh"

#define PL_OP_IDENTITY 0
#define PL_OP_RELU 1
#define PL_OP_SILU 2
#define PL_OP_GELU 3
#define PL_OP_GELU_TANH 4
#define PL_OP_SCALE 5
#define PL_OP_SIGMOID 6
#define PL_OP_TANH 7
#define PL_OP_HARDSWISH 8
#define PL_OP_ERF 9
#define PL_OP_EXP 20
#define PL_OP_SQRT 21
#define PL_OP_NEG 22
#define PL_OP_ABS 23
#define PL_OP_LOG 24
#define PL_OP_RECIPROCAL 25
#define PL_OP_LEAKY_RELU 26
#define PL_OP_SIN 27
#define PL_OP_COS 28
#define PL_OP_FLOOR 29
#define PL_OP_CEIL 30
#define PL_OP_ROUND 31
#define PL_OP_SIGN 32
#define PL_OP_SOFTPLUS 33
#define PL_OP_SOFTSIGN 34
#define PL_OP_MISH 35
#define PL_OP_ELU 36
#define PL_OP_CELU 37
#define PL_OP_THRESHOLDED_RELU 38
#define PL_OP_TAN 39
#define PL_OP_ASIN 40
#define PL_OP_ACOS 41
#define PL_OP_ATAN 42
#define PL_OP_SINH 43
#define PL_OP_COSH 44
#define PL_OP_ASINH 45
#define PL_OP_ACOSH 46
#define PL_OP_ATANH 47
#define PL_OP_SHRINK 48
#define PL_OP_BITWISE_NOT 49
#define PL_OP_ADD 10
#define PL_OP_SUB 11
#define PL_OP_MUL 12
#define PL_OP_DIV 13
#define PL_OP_POW 14
#define PL_OP_MAX 15
#define PL_OP_MIN 16
#define PL_OP_PRELU 17
#define PL_OP_MOD 18
#define PL_OP_FMOD 19
#define PL_OP_BITWISE_AND 50
#define PL_OP_BITWISE_OR 51
#define PL_OP_BITWISE_XOR 52
#define PL_OP_SHIFT_LEFT 53
#define PL_OP_SHIFT_RIGHT 54

#ifndef PL_NDIM
#define PL_NDIM 8
#endif
#ifndef PL_FAST_ACT
#define PL_FAST_ACT 0
#endif

// ---------------------------------------------------------------------------------------------
// Operators, in the accumulation type A.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float pl_erf(float x) { return erff(x); }
__device__ __forceinline__ double pl_erf(double x) { return erf(x); }
__device__ __forceinline__ float pl_tanh_lib(float x) { return tanhf(x); }
__device__ __forceinline__ double pl_tanh_lib(double x) { return tanh(x); }
__device__ __forceinline__ float pl_sqrt(float x) { return sqrtf(x); }  // IEEE-rounded (NVRTC's default)
__device__ __forceinline__ double pl_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float pl_abs(float x) { return fabsf(x); }  // abs(-0) = +0, NaN stays NaN
__device__ __forceinline__ double pl_abs(double x) { return fabs(x); }
// the integers (int for the 8-bit ones and int32, long long for int64): negation in the unsigned type,
// so the dtype's minimum wraps to itself as in NumPy (and the 8-bit store keeps the low bits)
__device__ __forceinline__ int pl_abs(int x) { return x < 0 ? (int)(0u - (unsigned int)x) : x; }
__device__ __forceinline__ long long pl_abs(long long x) {
    return x < 0 ? (long long)(0ull - (unsigned long long)x) : x;
}
__device__ __forceinline__ float pl_neg(float x) { return -x; }
__device__ __forceinline__ double pl_neg(double x) { return -x; }
__device__ __forceinline__ int pl_neg(int x) { return (int)(0u - (unsigned int)x); }
__device__ __forceinline__ long long pl_neg(long long x) { return (long long)(0ull - (unsigned long long)x); }
// uint32 and uint64: |x| is x, -x wraps (2^N - x), as NumPy's absolute and negative of unsigned types (the
// 8- and 16-bit unsigned types compute in int: the int overloads, and the store keeps the low bits)
__device__ __forceinline__ unsigned int pl_abs(unsigned int x) { return x; }
__device__ __forceinline__ unsigned long long pl_abs(unsigned long long x) { return x; }
__device__ __forceinline__ unsigned int pl_neg(unsigned int x) { return 0u - x; }
__device__ __forceinline__ unsigned long long pl_neg(unsigned long long x) { return 0ull - x; }
__device__ __forceinline__ float pl_log(float x) { return logf(x); }  // log(0) = -inf, log(x < 0) = NaN
__device__ __forceinline__ double pl_log(double x) { return log(x); }
__device__ __forceinline__ float pl_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double pl_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float pl_sin(float x) { return sinf(x); }  // full range reduction, not __sinf
__device__ __forceinline__ double pl_sin(double x) { return sin(x); }
__device__ __forceinline__ float pl_cos(float x) { return cosf(x); }
__device__ __forceinline__ double pl_cos(double x) { return cos(x); }
// tan, the inverse and the hyperbolic functions: the library's (a few ulp), IEEE at the edges: NaN
// out of the domain (asin(2), acosh(0.5), atanh(2), tan(inf)), +-inf for atanh(+-1) and on overflow
__device__ __forceinline__ float pl_tan(float x) { return tanf(x); }
__device__ __forceinline__ double pl_tan(double x) { return tan(x); }
__device__ __forceinline__ float pl_asin(float x) { return asinf(x); }
__device__ __forceinline__ double pl_asin(double x) { return asin(x); }
__device__ __forceinline__ float pl_acos(float x) { return acosf(x); }
__device__ __forceinline__ double pl_acos(double x) { return acos(x); }
__device__ __forceinline__ float pl_atan(float x) { return atanf(x); }
__device__ __forceinline__ double pl_atan(double x) { return atan(x); }
__device__ __forceinline__ float pl_sinh(float x) { return sinhf(x); }
__device__ __forceinline__ double pl_sinh(double x) { return sinh(x); }
__device__ __forceinline__ float pl_cosh(float x) { return coshf(x); }
__device__ __forceinline__ double pl_cosh(double x) { return cosh(x); }
__device__ __forceinline__ float pl_asinh(float x) { return asinhf(x); }
__device__ __forceinline__ double pl_asinh(double x) { return asinh(x); }
__device__ __forceinline__ float pl_acosh(float x) { return acoshf(x); }
__device__ __forceinline__ double pl_acosh(double x) { return acosh(x); }
__device__ __forceinline__ float pl_atanh(float x) { return atanhf(x); }
__device__ __forceinline__ double pl_atanh(double x) { return atanh(x); }
// ONNX Shrink: x + bias below -lambd, x - bias above lambd, else 0 (NaN compares false: 0). Floats in
// their accumulation type; integers in double, truncated toward zero as the reference's astype (the
// descriptor refuses a lambd and bias that would take a result out of the dtype's range)
template <class A, class P> __device__ __forceinline__ A pl_shrink(A x, P lambd, P bias) {
    const P v = (P)x;
    return (A)(v < -lambd ? v + bias : (v > lambd ? v - bias : P(0)));
}
__device__ __forceinline__ float pl_floor(float x) { return floorf(x); }
__device__ __forceinline__ double pl_floor(double x) { return floor(x); }
__device__ __forceinline__ float pl_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ double pl_ceil(double x) { return ceil(x); }
__device__ __forceinline__ float pl_rint(float x) { return rintf(x); }  // halves to even (ONNX Round)
__device__ __forceinline__ double pl_rint(double x) { return rint(x); }
__device__ __forceinline__ float pl_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double pl_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float pl_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double pl_log1p(double x) { return log1p(x); }
// ln(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): no overflow for large x, no cancellation below
template <class A> __device__ __forceinline__ A pl_softplus(A x) {
    return (x > A(0) ? x : A(0)) + pl_log1p(pl_exp(-pl_abs(x)));  // NaN: log1p(exp(NaN)) is NaN
}
// -1, 0 or 1; sign(-0) = +0 and NaN stays NaN (numpy.sign, the ONNX reference)
template <class A> __device__ __forceinline__ A pl_sign(A x) {
    return x > A(0) ? A(1) : (x < A(0) ? A(-1) : (x == A(0) ? A(0) : x));
}
// x * clip(x / 6 + 1/2, 0, 1) (ONNX HardSwish); written with comparisons so NaN propagates
template <class A> __device__ __forceinline__ A pl_hardswish(A x) {
    A t = x * A(1.0 / 6.0) + A(0.5);
    t = t < A(0) ? A(0) : t;
    t = t > A(1) ? A(1) : t;
    return x * t;
}

#if PL_FAST_ACT
// 2^x from the hardware approximation (MUFU.EX2; relative error ~2^-22, subnormal results kept).
__device__ __forceinline__ float pl_exp2_approx(float x) {
    float y;
    asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// 1/x from the hardware approximation (MUFU.RCP; relative error ~2^-23; 1/inf = 0).
__device__ __forceinline__ float pl_rcp_approx(float x) {
    float y;
    asm("rcp.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

// 1 / (1 + exp(-x)); with PL_FAST_ACT (float only) from the hardware exp and reciprocal: 1/inf is 0,
// so the result goes to 0 for very negative x as the exact one does
__device__ __forceinline__ float pl_sigmoid(float x) {
#if PL_FAST_ACT
    return __frcp_rn(1.0f + __expf(-x));
#else
    return 1.0f / (1.0f + pl_exp(-x));
#endif
}
__device__ __forceinline__ double pl_sigmoid(double x) { return 1.0 / (1.0 + pl_exp(-x)); }
// x / (1 + exp(-alpha x)) (ONNX Swish; alpha 1: SiLU, alpha * x is then x exactly), from the same
// pieces as pl_sigmoid
__device__ __forceinline__ float pl_silu(float x, float alpha) {
#if PL_FAST_ACT
    return x * __frcp_rn(1.0f + __expf(-(alpha * x)));
#else
    return x / (1.0f + pl_exp(-(alpha * x)));
#endif
}
__device__ __forceinline__ double pl_silu(double x, double alpha) { return x / (1.0 + pl_exp(-(alpha * x))); }
// tanh. With PL_FAST_ACT (float only): for |x| >= 0.25, 1 - 2 / (exp(2|x|) + 1) with the sign of x
// (absolute error a few float ulps, relative < 1e-6 there); below, the odd Taylor polynomial to x^7
// (relative error < 4e-7), which keeps tiny inputs exact where the exp form would cancel.
__device__ __forceinline__ float pl_tanh(float x) {
#if PL_FAST_ACT
    const float ax = fabsf(x);
    if (ax < 0.25f) {
        const float x2 = x * x;
        float p = fmaf(x2, -0.053968254f, 0.13333334f);  // -17/315, 2/15
        p = fmaf(x2, p, -0.33333334f);
        return fmaf(x * x2, p, x);
    }
    const float r = 1.0f - 2.0f * __frcp_rn(1.0f + __expf(2.0f * ax));
    return copysignf(r, x);
#else
    return pl_tanh_lib(x);
#endif
}
__device__ __forceinline__ double pl_tanh(double x) { return pl_tanh_lib(x); }
// x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2.
// With PL_FAST_ACT (float only), for u = |x| / sqrt 2 and t = 1 / (1 + u/2):
//     erfc(u) / 2 = t * 2^(-x^2 log2(e) / 2 + Q(t)),  Q(t) = log2(e) P(t) - 1,
// where P(t) is a degree-5 minimax fit of ln(exp(u^2) erfc(u) / t) over u in [0, 10] (absolute error
// 7.7e-6, so erfc(u) has a relative error below 8e-6 for every u: both tails stay accurate, unlike the
// short erf fits whose absolute error bound loses all relative accuracy for negative x). The factors
// 1/2 and log2(e) are folded into the coefficients, so an element costs one reciprocal, one exp2,
// 5 FMAs for Q and ~7 other operations (the degree-9 fit of Numerical Recipes' erfcc used before cost
// 4 FMAs and 3 multiplications more; on an H200 bf16 gelu was issue-bound at 78% of copy bandwidth).
// Then Phi(x) = h for x < 0 and 1 - h for x >= 0, with h = erfc(u) / 2.
// Float result vs the exact value: relative error below 1.3e-5 over the float range.
__device__ __forceinline__ float pl_gelu(float x) {
#if PL_FAST_ACT
    const float t = pl_rcp_approx(fmaf(fabsf(x), 0.35355339f, 1.0f));  // 1 / (1 + |x| / (2 sqrt 2))
#if PL_FAST_ACT >= 2
    // bfloat16: the same fit at degree 3 (absolute error of P 2.8e-4): two FMAs fewer per element
    float q = fmaf(t, -4.992574377e-01f, 9.959147047e-01f);
    q = fmaf(t, q, 1.318232517e+00f);
    q = fmaf(t, q, -2.814494596e+00f);
#else
    float q = fmaf(t, 3.300921321e-01f, -1.023181915e+00f);
    q = fmaf(t, q, 6.845652461e-01f);
    q = fmaf(t, q, 3.670915365e-01f);
    q = fmaf(t, q, 1.468676329e+00f);
    q = fmaf(t, q, -2.827232361e+00f);
#endif
    const float h = t * pl_exp2_approx(fmaf(x * x, -0.72134752f, q));  // -log2(e) / 2
    return x * (x < 0.0f ? h : 1.0f - h);
#else
    return 0.5f * x * (1.0f + pl_erf(x * 0.70710678118654752440f));
#endif
}
__device__ __forceinline__ double pl_gelu(double x) { return 0.5 * x * (1.0 + pl_erf(x * 0.70710678118654752440)); }

#if defined(PL_UNARY_OP)
// the type of pl_unary's alpha and beta (P above)
template <class T> struct pl_param { typedef typename pl_acc<T>::type type; };
template <> struct pl_param<signed char> { typedef double type; };
template <> struct pl_param<unsigned char> { typedef double type; };
template <> struct pl_param<short> { typedef double type; };
template <> struct pl_param<unsigned short> { typedef double type; };
template <> struct pl_param<int> { typedef double type; };
template <> struct pl_param<unsigned int> { typedef double type; };
template <> struct pl_param<long long> { typedef double type; };
template <> struct pl_param<unsigned long long> { typedef double type; };

template <class A, class P> __device__ __forceinline__ A pl_unary_apply(A x, P alpha, P beta) {
#if PL_UNARY_OP != PL_OP_SHRINK
    (void)beta;
#endif
#if PL_UNARY_OP == PL_OP_RELU
    (void)alpha;
    return x < A(0) ? A(0) : x;  // NaN propagates, like numpy.maximum(x, 0)
#elif PL_UNARY_OP == PL_OP_SILU
    return pl_silu(x, alpha);
#elif PL_UNARY_OP == PL_OP_GELU
    (void)alpha;
    return pl_gelu(x);
#elif PL_UNARY_OP == PL_OP_GELU_TANH
    (void)alpha;
    const A inner = A(0.79788456080286535588) * (x + A(0.044715) * x * x * x);
    return A(0.5) * x * (A(1) + pl_tanh_lib(inner));
#elif PL_UNARY_OP == PL_OP_SIGMOID
    (void)alpha;
    return pl_sigmoid(x);
#elif PL_UNARY_OP == PL_OP_TANH
    (void)alpha;
    return pl_tanh(x);
#elif PL_UNARY_OP == PL_OP_HARDSWISH
    (void)alpha;
    return pl_hardswish(x);
#elif PL_UNARY_OP == PL_OP_ERF
    (void)alpha;
    return pl_erf(x);
#elif PL_UNARY_OP == PL_OP_EXP
    (void)alpha;
    return pl_exp(x);
#elif PL_UNARY_OP == PL_OP_SQRT
    (void)alpha;
    return pl_sqrt(x);
#elif PL_UNARY_OP == PL_OP_SCALE
    return x * alpha;
#elif PL_UNARY_OP == PL_OP_NEG
    (void)alpha;
    return pl_neg(x);
#elif PL_UNARY_OP == PL_OP_ABS
    (void)alpha;
    return pl_abs(x);
#elif PL_UNARY_OP == PL_OP_LOG
    (void)alpha;
    return pl_log(x);
#elif PL_UNARY_OP == PL_OP_RECIPROCAL
    (void)alpha;
    return A(1) / x;  // 1/0 = inf (IEEE)
#elif PL_UNARY_OP == PL_OP_LEAKY_RELU
    return x < A(0) ? alpha * x : x;  // alpha: the negative slope; NaN propagates
#elif PL_UNARY_OP == PL_OP_SIN
    (void)alpha;
    return pl_sin(x);
#elif PL_UNARY_OP == PL_OP_COS
    (void)alpha;
    return pl_cos(x);
#elif PL_UNARY_OP == PL_OP_FLOOR
    (void)alpha;
    return pl_floor(x);
#elif PL_UNARY_OP == PL_OP_CEIL
    (void)alpha;
    return pl_ceil(x);
#elif PL_UNARY_OP == PL_OP_ROUND
    (void)alpha;
    return pl_rint(x);
#elif PL_UNARY_OP == PL_OP_SIGN
    (void)alpha;
    return pl_sign(x);
#elif PL_UNARY_OP == PL_OP_SOFTPLUS
    (void)alpha;
    return pl_softplus(x);
#elif PL_UNARY_OP == PL_OP_SOFTSIGN
    (void)alpha;
    return x / (A(1) + pl_abs(x));  // +-inf gives inf / inf = NaN, as the formula
#elif PL_UNARY_OP == PL_OP_MISH
    (void)alpha;
    return x * pl_tanh_lib(pl_softplus(x));
#elif PL_UNARY_OP == PL_OP_ELU
    return x < A(0) ? alpha * pl_expm1(x) : x;  // NaN propagates
#elif PL_UNARY_OP == PL_OP_CELU
    return x < A(0) ? alpha * pl_expm1(x / alpha) : x;  // alpha 0: x / 0 = -inf, so -0 (the limit)
#elif PL_UNARY_OP == PL_OP_THRESHOLDED_RELU
    return x > alpha ? x : A(0);  // a NaN is not above alpha: 0
#elif PL_UNARY_OP == PL_OP_TAN
    (void)alpha;
    return pl_tan(x);
#elif PL_UNARY_OP == PL_OP_ASIN
    (void)alpha;
    return pl_asin(x);
#elif PL_UNARY_OP == PL_OP_ACOS
    (void)alpha;
    return pl_acos(x);
#elif PL_UNARY_OP == PL_OP_ATAN
    (void)alpha;
    return pl_atan(x);
#elif PL_UNARY_OP == PL_OP_SINH
    (void)alpha;
    return pl_sinh(x);
#elif PL_UNARY_OP == PL_OP_COSH
    (void)alpha;
    return pl_cosh(x);
#elif PL_UNARY_OP == PL_OP_ASINH
    (void)alpha;
    return pl_asinh(x);
#elif PL_UNARY_OP == PL_OP_ACOSH
    (void)alpha;
    return pl_acosh(x);
#elif PL_UNARY_OP == PL_OP_ATANH
    (void)alpha;
    return pl_atanh(x);
#elif PL_UNARY_OP == PL_OP_SHRINK
    return pl_shrink(x, alpha, beta);  // alpha: lambd, beta: bias
#elif PL_UNARY_OP == PL_OP_BITWISE_NOT
    (void)alpha;
    return ~x;  // integers only; the 8-bit store keeps the low bits
#elif PL_UNARY_OP == PL_OP_IDENTITY
    (void)alpha;
    return x;
#else
#error "unknown PL_UNARY_OP"
#endif
}
#endif

#if defined(PL_BINARY_OP)
// Integer sums, differences and products wrap around (two's complement, like NumPy): computed in the
// unsigned type of the same width, where C++ defines the wrap, and cast back.
template <class A> struct pl_wrap { typedef A type; };
template <> struct pl_wrap<int> { typedef unsigned int type; };
template <> struct pl_wrap<long long> { typedef unsigned long long type; };
template <class A> __device__ __forceinline__ A pl_wrapped(typename pl_wrap<A>::type v) { return (A)v; }
// Remainders. Floats: fmod (the dividend's sign; NaN for b = 0 or an infinite a); mod (NumPy's and
// Python's: the divisor's sign, a zero result signed as b). Integers: truncated (fmod) or floored (mod),
// and, as NumPy gives, 0 for b = 0 and for the minimum % -1 (C leaves both undefined; -1 only of a
// signed type: an unsigned I(-1) is the maximum, an ordinary divisor).
__device__ __forceinline__ float pl_fmod_float(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double pl_fmod_float(double a, double b) { return fmod(a, b); }
__device__ __forceinline__ float pl_copysign(float a, float b) { return copysignf(a, b); }
__device__ __forceinline__ double pl_copysign(double a, double b) { return copysign(a, b); }
template <class A> __device__ __forceinline__ A pl_remainder(A a, A b, bool floored) {
    const A r = pl_fmod_float(a, b);
    if (!floored) return r;
    if (r == A(0)) return pl_copysign(A(0), b);
    return (r < A(0)) != (b < A(0)) ? r + b : r;
}
template <class I> __device__ __forceinline__ I pl_int_remainder(I a, I b, bool floored) {
    if (b == I(0) || (I(-1) < I(0) && b == I(-1))) return I(0);  // x % -1 is 0: no overflow for the minimum
    const I r = a % b;
    return floored && r != I(0) && ((r < I(0)) != (b < I(0))) ? r + b : r;
}
__device__ __forceinline__ int pl_remainder(int a, int b, bool floored) { return pl_int_remainder(a, b, floored); }
__device__ __forceinline__ long long pl_remainder(long long a, long long b, bool floored) {
    return pl_int_remainder(a, b, floored);
}
__device__ __forceinline__ unsigned int pl_remainder(unsigned int a, unsigned int b, bool floored) {
    return pl_int_remainder(a, b, floored);
}
__device__ __forceinline__ unsigned long long pl_remainder(unsigned long long a, unsigned long long b, bool floored) {
    return pl_int_remainder(a, b, floored);
}
// Quotients. Floats: IEEE (x / 0 is +-inf or NaN). Integers: truncated toward zero as C and the ONNX
// reference's Div; 0 for b = 0 (the reference's floor_divide gives it; C leaves it undefined) and, for a
// signed type, the minimum / -1 wraps to the minimum (negated in the unsigned type).
__device__ __forceinline__ float pl_divide(float a, float b) { return a / b; }
__device__ __forceinline__ double pl_divide(double a, double b) { return a / b; }
template <class I> __device__ __forceinline__ I pl_int_divide(I a, I b) {
    typedef typename pl_wrap<I>::type U;
    if (b == I(0)) return I(0);
    if (I(-1) < I(0) && b == I(-1)) return (I)(U(0) - (U)a);
    return a / b;
}
__device__ __forceinline__ int pl_divide(int a, int b) { return pl_int_divide(a, b); }
__device__ __forceinline__ long long pl_divide(long long a, long long b) { return pl_int_divide(a, b); }
__device__ __forceinline__ unsigned int pl_divide(unsigned int a, unsigned int b) { return pl_int_divide(a, b); }
__device__ __forceinline__ unsigned long long pl_divide(unsigned long long a, unsigned long long b) {
    return pl_int_divide(a, b);
}
// Integer powers: by squaring in the unsigned type, wrapping around as NumPy's power; a negative exponent
// (signed types) truncates the real power toward zero: 1 for a = 1, +-1 for a = -1, else 0 (0 for a = 0
// too, where the real power is infinite: NumPy refuses it, C's pow would overflow).
template <class I> __device__ __forceinline__ I pl_int_pow(I a, I b) {
    typedef typename pl_wrap<I>::type U;
    if (I(-1) < I(0) && b < I(0)) return a == I(1) ? I(1) : (a == I(-1) ? ((b & I(1)) ? I(-1) : I(1)) : I(0));
    U r = U(1), x = (U)a;
    for (U e = (U)b; e != U(0); e >>= 1) {
        if (e & U(1)) r *= x;
        x *= x;
    }
    return (I)r;
}
__device__ __forceinline__ int pl_pow(int a, int b) { return pl_int_pow(a, b); }
__device__ __forceinline__ long long pl_pow(long long a, long long b) { return pl_int_pow(a, b); }
__device__ __forceinline__ unsigned int pl_pow(unsigned int a, unsigned int b) { return pl_int_pow(a, b); }
__device__ __forceinline__ unsigned long long pl_pow(unsigned long long a, unsigned long long b) {
    return pl_int_pow(a, b);
}

// ONNX BitShift (opset 28, the integers): a left shift in the unsigned type (bits past the top, the sign
// bit included, drop); a right shift of a signed value is arithmetic (sign-extending, as NVCC's >> of a
// negative int). An amount below 0 or of at least the element's bit width (which C leaves undefined)
// gives what the sign fill alone gives: 0, or -1 for a right shift of a negative value.
template <class I> __device__ __forceinline__ I pl_shift(I a, I b, bool left) {
    typedef typename pl_wrap<I>::type U;
    if (b < I(0) || b >= I(8 * sizeof(PL_T))) return left || a >= I(0) ? I(0) : I(-1);
    return left ? (I)((U)a << (U)b) : (I)(a >> b);
}

template <class A> __device__ __forceinline__ A pl_binary_apply(A a, A b) {
    typedef typename pl_wrap<A>::type U;
#if PL_BINARY_OP == PL_OP_ADD
    return pl_wrapped<A>((U)a + (U)b);
#elif PL_BINARY_OP == PL_OP_SUB
    return pl_wrapped<A>((U)a - (U)b);
#elif PL_BINARY_OP == PL_OP_MUL
    return pl_wrapped<A>((U)a * (U)b);
#elif PL_BINARY_OP == PL_OP_DIV
    return pl_divide(a, b);
#elif PL_BINARY_OP == PL_OP_POW
    return pl_pow(a, b);
#elif PL_BINARY_OP == PL_OP_MAX
    return (a > b || a != a) ? a : b;  // a NaN on either side propagates, as numpy.maximum
#elif PL_BINARY_OP == PL_OP_MIN
    return (a < b || a != a) ? a : b;
#elif PL_BINARY_OP == PL_OP_PRELU
    return a < A(0) ? b * a : a;  // b: the slope; NaN propagates
#elif PL_BINARY_OP == PL_OP_MOD
    return pl_remainder(a, b, true);
#elif PL_BINARY_OP == PL_OP_FMOD
    return pl_remainder(a, b, false);
#elif PL_BINARY_OP == PL_OP_BITWISE_AND
    return a & b;  // integers only: on the sign-extended values, the 8-bit store keeps the low bits
#elif PL_BINARY_OP == PL_OP_BITWISE_OR
    return a | b;
#elif PL_BINARY_OP == PL_OP_BITWISE_XOR
    return a ^ b;
#elif PL_BINARY_OP == PL_OP_SHIFT_LEFT
    return pl_shift(a, b, true);
#elif PL_BINARY_OP == PL_OP_SHIFT_RIGHT
    return pl_shift(a, b, false);
#else
#error "unknown PL_BINARY_OP"
#endif
}
#endif

#if defined(PL_T)
typedef PL_T T;
typedef typename pl_acc<T>::type A;
typedef pl_vec<T, PL_VEC> V;
#if defined(PL_UNARY_OP)
typedef typename pl_param<T>::type P;
#endif

#if defined(PL_UNARY_OP)
extern "C" __global__ void __launch_bounds__(PL_BLOCK) pl_unary(const T* x, T* y, long long n, P alpha, P beta) {
    V v[PL_UNROLL];
    pl_vector_loop(
        n, [&](int u, long long j) { v[u] = pl_load<T, PL_VEC>(x + j * PL_VEC); },
        [&](int u, long long j) {
#if PL_UNARY_OP != PL_OP_IDENTITY
#pragma unroll
            for (int k = 0; k < PL_VEC; ++k) v[u].v[k] = pl_from<T>(pl_unary_apply(pl_to_acc(v[u].v[k]), alpha, beta));
#endif
            pl_store<T, PL_VEC>(y + j * PL_VEC, v[u]);
        },
        [&](long long t) {
#if PL_UNARY_OP == PL_OP_IDENTITY
            y[t] = x[t];  // bit-exact copy
#else
            y[t] = pl_from<T>(pl_unary_apply(pl_to_acc(x[t]), alpha, beta));
#endif
        });
}
#endif  // PL_UNARY_OP

#if defined(PL_BINARY_OP)
extern "C" __global__ void __launch_bounds__(PL_BLOCK) pl_binary(const T* a, const T* b, T* y, long long n) {
    V va[PL_UNROLL], vb[PL_UNROLL];
    pl_vector_loop(
        n,
        [&](int u, long long j) {
            va[u] = pl_load<T, PL_VEC>(a + j * PL_VEC);
            vb[u] = pl_load<T, PL_VEC>(b + j * PL_VEC);
        },
        [&](int u, long long j) {
#pragma unroll
            for (int k = 0; k < PL_VEC; ++k) {
                va[u].v[k] = pl_from<T>(pl_binary_apply(pl_to_acc(va[u].v[k]), pl_to_acc(vb[u].v[k])));
            }
            pl_store<T, PL_VEC>(y + j * PL_VEC, va[u]);
        },
        [&](long long t) { y[t] = pl_from<T>(pl_binary_apply(pl_to_acc(a[t]), pl_to_acc(b[t]))); });
}

// General broadcast: y is contiguous with shape d[0..PL_NDIM-1] (row-major); a and b are read
// with per-dimension element strides sa/sb (0 on broadcast dimensions).
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_binary_bcast(const T* a, const T* b, T* y, long long n,
                long long d0, long long d1, long long d2, long long d3,
                long long d4, long long d5, long long d6, long long d7,
                long long sa0, long long sa1, long long sa2, long long sa3,
                long long sa4, long long sa5, long long sa6, long long sa7,
                long long sb0, long long sb1, long long sb2, long long sb3,
                long long sb4, long long sb5, long long sb6, long long sb7) {
    const long long d[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    const long long s[2][8] = {{sa0, sa1, sa2, sa3, sa4, sa5, sa6, sa7}, {sb0, sb1, sb2, sb3, sb4, sb5, sb6, sb7}};
    PL_FOR_EACH_INDEX(i, n) {
        pl_idx off[2];
        pl_strided_offsets<PL_NDIM, 2>((pl_idx)i, d, s, off);
        y[i] = pl_from<T>(pl_binary_apply(pl_to_acc(a[off[0]]), pl_to_acc(b[off[1]])));
    }
}
#endif  // PL_BINARY_OP

#if defined(PL_BIAS_ADD)
// y[..., c] = x[..., c] + bias[c] with N = bias length; PL_VEC divides N. bias is never an output.
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_bias_add(const T* x, const T* __restrict__ bias, T* y, long long n, long long N) {
    V vx[PL_UNROLL], vb[PL_UNROLL];
    pl_vector_loop(
        n,
        [&](int u, long long j) {
            const pl_idx col = (pl_idx)(j * PL_VEC) % (pl_idx)N;
            vx[u] = pl_load<T, PL_VEC>(x + j * PL_VEC);
            vb[u] = pl_load<T, PL_VEC>(bias + col);
        },
        [&](int u, long long j) {
#pragma unroll
            for (int k = 0; k < PL_VEC; ++k) vx[u].v[k] = pl_from<T>(pl_to_acc(vx[u].v[k]) + pl_to_acc(vb[u].v[k]));
            pl_store<T, PL_VEC>(y + j * PL_VEC, vx[u]);
        },
        [&](long long t) { y[t] = pl_from<T>(pl_to_acc(x[t]) + pl_to_acc(bias[(pl_idx)t % (pl_idx)N])); });
}
#endif  // PL_BIAS_ADD
#endif  // PL_T

#if defined(PL_TIN) && defined(PL_TOUT)
// y = (TOUT)x, through the wider of the two accumulation types; rounding to nearest even, and
// double -> 16-bit rounded once (no double rounding through float). x and y have different types, so
// they never alias.
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_cast(const PL_TIN* __restrict__ x, PL_TOUT* __restrict__ y, long long n) {
    pl_vec<PL_TIN, PL_VEC> vi[PL_UNROLL];
    pl_vector_loop(
        n, [&](int u, long long j) { vi[u] = pl_load<PL_TIN, PL_VEC>(x + j * PL_VEC); },
        [&](int u, long long j) {
            pl_vec<PL_TOUT, PL_VEC> vo;
#pragma unroll
            for (int k = 0; k < PL_VEC; ++k) vo.v[k] = pl_from<PL_TOUT>(pl_to_acc(vi[u].v[k]));
            pl_store<PL_TOUT, PL_VEC>(y + j * PL_VEC, vo);
        },
        [&](long long t) { y[t] = pl_from<PL_TOUT>(pl_to_acc(x[t])); });
}
#endif  // PL_TIN && PL_TOUT
