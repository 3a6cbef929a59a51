// PipeLink built-in comparison and logical kernels: equal, less, greater, less_equal, greater_equal
// (any numeric T, and bool for equal), logical_and / or / xor / not (bool) and the float predicates
// is_nan / is_inf, with a bool output stored as one byte, 0 or 1. Same shape (vectorised) and NumPy broadcast. Never allocate, never assume more
// alignment than the launch plan chose (PL_VEC elements).
//
// Comparisons follow IEEE on the values: 16-bit floats are widened to float exactly (pl_to_acc of
// common.cuh) and compared there, so any comparison with NaN is false (equal(NaN, NaN) too) and
// -0.0 == 0.0. Integers are compared in their own type. Bool inputs are read as bytes, any non-zero
// byte being true.
//
// Macros, set by the plans of pipelink/ops/compare/cuda.py:
//   PL_T            input element type (float, double, __half, __nv_bfloat16, signed char, short, int,
//                   long long, their unsigned types; unsigned char for bool inputs, with PL_BOOL_IN 1)
//   PL_CMP_OP       one of the PL_CMP_* codes below: the one-input codes (PL_CMP_NOT, PL_CMP_ISNAN,
//                   PL_CMP_ISINF) -> pl_predicate, any other -> pl_compare, pl_compare_bcast
//   PL_DETECT_POS, PL_DETECT_NEG  PL_CMP_ISINF: 1 to report +inf / -inf (ONNX IsInf's attributes)
//   PL_BOOL_IN      1 when the inputs are bool (required by the logical codes), else 0
//   PL_VEC          input elements per vector access (16 / sizeof(T) at most); the inputs are aligned to
//                   PL_VEC * sizeof(T) bytes and the output to PL_VEC bytes (the plan checks it)
//   PL_BLOCK        threads per block (the launch must use exactly this many)
//   PL_UNROLL       vectors in flight per thread per grid-stride step; PL_ONE_PASS as common.cuh says
//   PL_NDIM         dims of the broadcast index space (1..8), PL_INDEX64 0/1 index width there
//
// Kernel signatures (sizes are element counts; strides are in elements and >= 0):
//   pl_compare(const T* a, const T* b, unsigned char* y, long long n)
//   pl_compare_bcast(const T* a, const T* b, unsigned char* y, long long n,
//                    long long d0..d7, long long sa0..sa7, long long sb0..sb7)
//   pl_predicate(const T* x, unsigned char* y, long long n)
// y may equal a or x for bool inputs (each element is read before the same thread writes it), so no
// pointer is __restrict__.
#include "common.cuh"

#define PL_CMP_EQ 1
#define PL_CMP_LT 2
#define PL_CMP_GT 3
#define PL_CMP_LE 4
#define PL_CMP_GE 5
#define PL_CMP_AND 6
#define PL_CMP_OR 7
#define PL_CMP_XOR 8
#define PL_CMP_NOT 9
#define PL_CMP_ISNAN 10
#define PL_CMP_ISINF 11
#define PL_CMP_UNARY(op) ((op) >= PL_CMP_NOT)

#ifndef PL_NDIM
#define PL_NDIM 8
#endif
#ifndef PL_BOOL_IN
#define PL_BOOL_IN 0
#endif

#if defined(PL_T) && defined(PL_CMP_OP)
typedef PL_T T;
typedef unsigned char B;  // a bool element: one byte, 0 or 1

// The value a comparison reads: bool bytes as true / false, 16-bit floats widened (exactly) to float,
// every other type as itself.
#if PL_BOOL_IN
__device__ __forceinline__ bool pl_cmp_value(unsigned char x) { return x != 0; }
#else
template <class V> __device__ __forceinline__ V pl_cmp_value(V x) { return x; }
__device__ __forceinline__ float pl_cmp_value(__half x) { return pl_to_acc(x); }
__device__ __forceinline__ float pl_cmp_value(__nv_bfloat16 x) { return pl_to_acc(x); }
#endif

#if PL_CMP_OP >= PL_CMP_AND && PL_CMP_OP <= PL_CMP_NOT && !PL_BOOL_IN
#error "the logical PL_CMP_* codes need bool inputs (PL_BOOL_IN 1)"
#endif

#if !PL_CMP_UNARY(PL_CMP_OP)
template <class V> __device__ __forceinline__ bool pl_compare_apply(V a, V b) {
#if PL_CMP_OP == PL_CMP_EQ
    return a == b;  // IEEE: false when either side is NaN; -0 == +0
#elif PL_CMP_OP == PL_CMP_LT
    return a < b;
#elif PL_CMP_OP == PL_CMP_GT
    return a > b;
#elif PL_CMP_OP == PL_CMP_LE
    return a <= b;
#elif PL_CMP_OP == PL_CMP_GE
    return a >= b;
#elif PL_CMP_OP == PL_CMP_AND
    return a && b;
#elif PL_CMP_OP == PL_CMP_OR
    return a || b;
#elif PL_CMP_OP == PL_CMP_XOR
    return a != b;
#else
#error "unknown PL_CMP_OP"
#endif
}

__device__ __forceinline__ B pl_compare_at(const T& a, const T& b) {
    return pl_compare_apply(pl_cmp_value(a), pl_cmp_value(b)) ? B(1) : B(0);
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK) pl_compare(const T* a, const T* b, B* y, long long n) {
    pl_vec<T, PL_VEC> va[PL_UNROLL], vb[PL_UNROLL];
    pl_vector_loop(
        n,
        [&](int u, long long j) {
            va[u] = pl_load<T, PL_VEC>(a + j * PL_VEC);
            vb[u] = pl_load<T, PL_VEC>(b + j * PL_VEC);
        },
        [&](int u, long long j) {
            pl_vec<B, PL_VEC> r;
#pragma unroll
            for (int k = 0; k < PL_VEC; ++k) r.v[k] = pl_compare_at(va[u].v[k], vb[u].v[k]);
            pl_store<B, PL_VEC>(y + j * PL_VEC, r);
        },
        [&](long long t) { y[t] = pl_compare_at(a[t], b[t]); });
}

// General broadcast: y is contiguous with shape d[0..PL_NDIM-1] (row-major); a and b are read with
// per-dimension element strides sa / sb (0 on broadcast dimensions).
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_compare_bcast(const T* a, const T* b, B* y, long long n,
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
        y[i] = pl_compare_at(a[off[0]], b[off[1]]);
    }
}
#else   // the one-input codes
#ifndef PL_DETECT_POS
#define PL_DETECT_POS 1
#endif
#ifndef PL_DETECT_NEG
#define PL_DETECT_NEG 1
#endif

#if PL_CMP_OP == PL_CMP_ISINF
__device__ __forceinline__ bool pl_is_pos_inf(float v) { return v == -pl_neg_inf<float>(); }
__device__ __forceinline__ bool pl_is_pos_inf(double v) { return v == -pl_neg_inf<double>(); }
#endif

__device__ __forceinline__ B pl_predicate_at(const T& x) {
    const auto v = pl_cmp_value(x);
#if PL_CMP_OP == PL_CMP_NOT
    return v ? B(0) : B(1);
#elif PL_CMP_OP == PL_CMP_ISNAN
    return v != v ? B(1) : B(0);
#elif PL_CMP_OP == PL_CMP_ISINF
    return (PL_DETECT_POS && pl_is_pos_inf(v)) || (PL_DETECT_NEG && pl_is_pos_inf(-v)) ? B(1) : B(0);
#else
#error "unknown PL_CMP_OP"
#endif
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK) pl_predicate(const T* x, B* y, long long n) {
    pl_vec<T, PL_VEC> v[PL_UNROLL];
    pl_vector_loop(
        n, [&](int u, long long j) { v[u] = pl_load<T, PL_VEC>(x + j * PL_VEC); },
        [&](int u, long long j) {
            pl_vec<B, PL_VEC> r;
#pragma unroll
            for (int k = 0; k < PL_VEC; ++k) r.v[k] = pl_predicate_at(v[u].v[k]);
            pl_store<B, PL_VEC>(y + j * PL_VEC, r);
        },
        [&](long long t) { y[t] = pl_predicate_at(x[t]); });
}
#endif  // PL_CMP_OP
#endif  // PL_T && PL_CMP_OP
