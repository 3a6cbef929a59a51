// PipeLink's any-dtype cast (ints, bool, and floats to or from them), with C semantics as the CPU
// reference: float -> int truncates, anything -> bool is "!= 0". Casts between two floats use the
// vectorised pl_cast of elementwise.cu instead.
//
// Macros (chosen in pipelink/ops/elementwise/cuda.py, plan_cast_any):
//   PL_TIN, PL_TOUT  CUDA type names of the input and output (unsigned char for a float8)
//   PL_TIN_FP8, PL_TOUT_FP8  0, or the float8 format of the input / output (PL_Q_E4M3FN, PL_Q_E5M2,
//                    PL_Q_E4M3FNUZ, PL_Q_E5M2FNUZ, PL_Q_E8M0 of fp8.cuh): as ml_dtypes casts, round to
//                    nearest even (e8m0: the nearest power of two, ties up), no saturation (NaN, or inf for
//                    e5m2, past the largest finite value), every value rounded once (a 64-bit integer
//                    into e8m0, which holds it, by its bits: through a double it would round twice)
//   PL_DIRECT        1 when neither is a 16-bit float nor a float8 (a plain C cast); else the value goes
//                    through double (exact for every 16-bit float and float8, and rounded once, to odd,
//                    before the final narrowing)
//   PL_BLOCK         threads per block
//
// Kernel: pl_cast_any(const TIN* x, TOUT* y, long long n). x and y are distinct buffers (their element
// sizes may differ), so they are declared __restrict__.
#include "common.cuh"
#include "fp8.cuh"
#ifndef PL_DIRECT
#define PL_DIRECT 1
#endif
#ifndef PL_TIN_FP8
#define PL_TIN_FP8 0
#endif
#ifndef PL_TOUT_FP8
#define PL_TOUT_FP8 0
#endif
template <class T> __device__ __forceinline__ double pl_cast_in(T v) { return (double)v; }
__device__ __forceinline__ double pl_cast_in(__half v) { return (double)pl_to_acc(v); }
__device__ __forceinline__ double pl_cast_in(__nv_bfloat16 v) { return (double)pl_to_acc(v); }
template <class T> struct pl_cast_out { static __device__ __forceinline__ T from(double v) { return (T)v; } };
template <> struct pl_cast_out<bool> {
    static __device__ __forceinline__ bool from(double v) { return v != 0.0; } };
template <> struct pl_cast_out<__half> {
    static __device__ __forceinline__ __half from(double v) { return pl_from<__half>(v); } };
template <> struct pl_cast_out<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from(double v) { return pl_from<__nv_bfloat16>(v); } };

// the value of an input element as a double, and an output element from one
__device__ __forceinline__ double pl_cast_load(PL_TIN v) {
#if PL_TIN_FP8
    return (double)pl_fp8_to_float<PL_TIN_FP8>(v);
#else
    return pl_cast_in(v);
#endif
}
__device__ __forceinline__ PL_TOUT pl_cast_store(double v) {
#if PL_TOUT_FP8
    return pl_double_to_fp8<PL_TOUT_FP8>(v, false);
#else
    return pl_cast_out<PL_TOUT>::from(v);
#endif
}
// an input element into e8m0: by its value as a double, a 64-bit integer by its bits
template <class T> __device__ __forceinline__ unsigned char pl_cast_e8m0(T v) {
    return pl_double_to_fp8<PL_Q_E8M0>(pl_cast_load(v), false);
}
__device__ __forceinline__ unsigned char pl_cast_e8m0(long long v) { return pl_i64_to_e8m0(v); }
__device__ __forceinline__ unsigned char pl_cast_e8m0(unsigned long long v) { return pl_u64_to_e8m0(v); }

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_cast_any(const PL_TIN* __restrict__ x, PL_TOUT* __restrict__ y, long long n) {
    PL_FOR_EACH_INDEX(i, n) {
#if PL_TOUT_FP8 == PL_Q_E8M0
        y[i] = pl_cast_e8m0(x[i]);
#elif PL_DIRECT
        y[i] = (PL_TOUT)x[i];
#else
        y[i] = pl_cast_store(pl_cast_load(x[i]));
#endif
    }
}
