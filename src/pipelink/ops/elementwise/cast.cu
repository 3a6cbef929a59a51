// PipeLink's any-dtype cast (ints, bool, and floats to or from them), with C semantics as the CPU
// reference: float -> int truncates, anything -> bool is "!= 0". Casts between two floats use the
// vectorised pl_cast of elementwise.cu instead.
//
// Macros (chosen in pipelink/ops/elementwise/cuda.py, plan_cast_any):
//   PL_TIN, PL_TOUT  CUDA type names of the input and output (unsigned char for a type of fp8.cuh)
//   PL_TIN_KIND, PL_TOUT_KIND  0, or the fp8.cuh kind of the input / output, each held as a byte:
//                    a float8 (PL_Q_E4M3FN, PL_Q_E5M2, PL_Q_E4M3FNUZ, PL_Q_E5M2FNUZ, PL_Q_E8M0) or
//                    float4_e2m1fn (PL_Q_E2M1): as ml_dtypes casts, round to nearest even (e8m0: the nearest
//                    power of two, ties up), no saturation (NaN, or inf for e5m2, past the largest finite
//                    value; float4_e2m1fn, with no infinity, saturates to +-6), every value rounded once (a
//                    64-bit integer into e8m0, which holds it, by its bits: through a double it would round
//                    twice); or a sub-byte integer (PL_Q_INT4, PL_Q_UINT4, PL_Q_INT2, PL_Q_UINT2): into one,
//                    an integer (or bool) keeps its low bits (two's complement), a float is truncated toward
//                    zero and gives 0 outside the range (NaN and inf too), as ml_dtypes casts; out of one,
//                    its value as an integer (into an unsigned type a negative one wraps: int4 -1 is uint8
//                    255, as ONNX's Cast and ml_dtypes have it; into every float exact)
//   PL_TIN_FLOAT     1 when the input is a float of any width (a float8 and float4_e2m1fn too)
//   PL_DIRECT        1 when neither is a 16-bit float nor a type of fp8.cuh (a plain C cast); else the
//                    value goes through double (exact for every 16-bit float, float8, float4 and sub-byte
//                    integer, and rounded once, to odd, before the final narrowing)
//   PL_BLOCK         threads per block
//
// Kernel: pl_cast_any(const TIN* x, TOUT* y, long long n). x and y are distinct buffers (their element
// sizes may differ), so they are declared __restrict__.
#include "common.cuh"
#include "fp8.cuh"
#ifndef PL_DIRECT
#define PL_DIRECT 1
#endif
#ifndef PL_TIN_KIND
#define PL_TIN_KIND 0
#endif
#ifndef PL_TOUT_KIND
#define PL_TOUT_KIND 0
#endif
#ifndef PL_TIN_FLOAT
#define PL_TIN_FLOAT 0
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
// an integer value into a plain output type: as C converts it (into an unsigned type modulo 2^N, ONNX's
// wrap; into bool != 0), a 16-bit float through double
template <class T> struct pl_cast_int_out { static __device__ __forceinline__ T from(long long v) { return (T)v; } };
template <> struct pl_cast_int_out<__half> {
    static __device__ __forceinline__ __half from(long long v) { return pl_cast_out<__half>::from((double)v); } };
template <> struct pl_cast_int_out<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from(long long v) {
        return pl_cast_out<__nv_bfloat16>::from((double)v); } };

// the value of an input element as a double, and an output element from one
__device__ __forceinline__ double pl_cast_load(PL_TIN v) {
#if PL_IS_SUBINT(PL_TIN_KIND)
    return (double)pl_subint_value<PL_TIN_KIND>(v);
#elif PL_TIN_KIND
    return (double)pl_fp8_to_float<PL_TIN_KIND>(v);
#else
    return pl_cast_in(v);
#endif
}
__device__ __forceinline__ PL_TOUT pl_cast_store(double v) {
#if PL_IS_SUBINT(PL_TOUT_KIND)
    return pl_subint_from_double<PL_TOUT_KIND>(v);
#elif PL_TOUT_KIND
    return pl_double_to_fp8<PL_TOUT_KIND>(v, false);
#else
    return pl_cast_out<PL_TOUT>::from(v);
#endif
}
#if PL_IS_SUBINT(PL_TOUT_KIND)
// an input element into a sub-byte integer: a float by its value (pl_cast_store), an integer or bool by
// its low bits (a sub-byte one by its value's)
__device__ __forceinline__ unsigned char pl_cast_subint(PL_TIN v) {
#if PL_TIN_FLOAT
    return pl_cast_store(pl_cast_load(v));
#elif PL_IS_SUBINT(PL_TIN_KIND)
    return pl_subint_wrap<PL_TOUT_KIND>((unsigned long long)(long long)pl_subint_value<PL_TIN_KIND>(v));
#else
    return pl_subint_wrap<PL_TOUT_KIND>((unsigned long long)v);
#endif
}
#endif
#if PL_IS_SUBINT(PL_TIN_KIND)
// a sub-byte integer's value into the output: as an integer (a negative one wraps into an unsigned type,
// as ml_dtypes casts int4 -1 to uint8 255), into a float8 or float4 through double (exact)
__device__ __forceinline__ PL_TOUT pl_cast_from_subint(PL_TIN v) {
    const long long value = pl_subint_value<PL_TIN_KIND>(v);
#if PL_TOUT_KIND
    return pl_cast_store((double)value);
#else
    return pl_cast_int_out<PL_TOUT>::from(value);
#endif
}
#endif
// an input element into e8m0: by its value as a double, a 64-bit integer by its bits
template <class T> __device__ __forceinline__ unsigned char pl_cast_e8m0(T v) {
    return pl_double_to_fp8<PL_Q_E8M0>(pl_cast_load(v), false);
}
__device__ __forceinline__ unsigned char pl_cast_e8m0(long long v) { return pl_i64_to_e8m0(v); }
__device__ __forceinline__ unsigned char pl_cast_e8m0(unsigned long long v) { return pl_u64_to_e8m0(v); }

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_cast_any(const PL_TIN* __restrict__ x, PL_TOUT* __restrict__ y, long long n) {
    PL_FOR_EACH_INDEX(i, n) {
#if PL_TOUT_KIND == PL_Q_E8M0
        y[i] = pl_cast_e8m0(x[i]);
#elif PL_IS_SUBINT(PL_TOUT_KIND)
        y[i] = pl_cast_subint(x[i]);
#elif PL_IS_SUBINT(PL_TIN_KIND)
        y[i] = pl_cast_from_subint(x[i]);
#elif PL_DIRECT
        y[i] = (PL_TOUT)x[i];
#else
        y[i] = pl_cast_store(pl_cast_load(x[i]));
#endif
    }
}
