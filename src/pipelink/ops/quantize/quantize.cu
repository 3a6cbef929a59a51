// PipeLink's linear (de)quantization (ONNX QuantizeLinear / DequantizeLinear) to and from int8, uint8,
// int16, uint16, the 8-bit floats (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, e8m0fnu), float4_e2m1fn and the
// sub-byte integers (int4, uint4, int2, uint2), per tensor or per axis: one thread per element, in float32
// as the CPU reference computes. The float8, float4 and sub-byte conversions are fp8.cuh's.
//
// Macros (chosen by pipelink/ops/quantize/cuda.py):
//   PL_T         the float type of x (quantize) / y (dequantize) and of the scale: float, __half,
//                __nv_bfloat16
//   PL_Q         the quantized kind: PL_Q_INT8, PL_Q_UINT8, PL_Q_INT16, PL_Q_UINT16, or one of fp8.cuh
//                (PL_Q_E4M3FN, PL_Q_E5M2, PL_Q_E4M3FNUZ, PL_Q_E5M2FNUZ, PL_Q_E8M0, PL_Q_E2M1 and PL_Q_INT4,
//                PL_Q_UINT4, PL_Q_INT2, PL_Q_UINT2), each of those stored as a byte
//   PL_SATURATE  float8 quantize: 1 clips to the largest finite value, 0 gives NaN (inf for e5m2) on
//                overflow; integers and float4_e2m1fn (no infinity) always saturate
//   PL_ROUND     e8m0 quantize: ONNX Cast's round_mode (PL_E8M0_UP, PL_E8M0_DOWN, PL_E8M0_NEAREST) of
//                pl_float_to_e8m0; no zero point (e8m0 has no zero)
//   PL_QUANTIZE / PL_DEQUANTIZE  which kernel; PL_BLOCK threads per block
//
// Kernels (n elements; the scale and zero point of element i are at (i / inner) % axis_len: inner = 1,
// axis_len = 1 per tensor; zero may be null):
//   pl_quantize(const T* x, const T* scale, const Q* zero, Q* y, long long n, long long inner,
//               long long axis_len)       y = saturate(round_half_even(x / scale) + zero)
//   pl_dequantize(const Q* x, const T* scale, const Q* zero, T* y, long long n, long long inner,
//                 long long axis_len)     y = (x - zero) * scale
#include "common.cuh"

#include "fp8.cuh"  // the kinds 2 to 11 and their conversions, shared with the cast kernel

#define PL_Q_INT8 0
#define PL_Q_UINT8 1
#define PL_Q_INT16 12
#define PL_Q_UINT16 13
#ifndef PL_Q
#define PL_Q PL_Q_E4M3FN
#endif
#ifndef PL_SATURATE
#define PL_SATURATE 1
#endif
#ifndef PL_ROUND
#define PL_ROUND PL_E8M0_UP
#endif

// the integer kinds round half to even and saturate to [PL_QMIN, PL_QMAX]; the others are floats
#define PL_Q_IS_INT (PL_Q == PL_Q_INT8 || PL_Q == PL_Q_UINT8 || PL_Q == PL_Q_INT16 || PL_Q == PL_Q_UINT16 || \
                     PL_IS_SUBINT(PL_Q))
#if PL_Q == PL_Q_INT8
typedef signed char Q;
#define PL_QMIN -128.0f
#define PL_QMAX 127.0f
#elif PL_Q == PL_Q_INT16
typedef short Q;
#define PL_QMIN -32768.0f
#define PL_QMAX 32767.0f
#elif PL_Q == PL_Q_UINT16
typedef unsigned short Q;
#define PL_QMIN 0.0f
#define PL_QMAX 65535.0f
#elif PL_IS_SUBINT(PL_Q)
typedef unsigned char Q;  // the value in the byte's low bits
#define PL_QMIN ((float)pl_subint<PL_Q>::MIN)
#define PL_QMAX ((float)pl_subint<PL_Q>::MAX)
#else
typedef unsigned char Q;
#define PL_QMIN 0.0f
#define PL_QMAX 255.0f
#endif

// the float value of a quantized element (zero points and dequantize inputs)
__device__ __forceinline__ float pl_q_value(Q v) {
#if PL_IS_SUBINT(PL_Q)
    return (float)pl_subint_value<PL_Q>(v);
#elif PL_Q >= PL_Q_E4M3FN && PL_Q <= PL_Q_E2M1
    return pl_fp8_to_float<PL_Q>((unsigned char)v);
#else
    return (float)v;
#endif
}

#if defined(PL_T) && defined(PL_QUANTIZE)
typedef PL_T T;
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_quantize(const T* __restrict__ x, const T* __restrict__ scale, const Q* __restrict__ zero, Q* __restrict__ y,
            long long n, long long inner, long long axis_len) {
    PL_FOR_EACH_INDEX(i, n) {
        const long long c = (i / inner) % axis_len;
        float v = pl_to_acc(x[i]) / pl_to_acc(scale[c]);  // IEEE division, as the reference's float32
#if PL_Q_IS_INT
        v = rintf(v);  // half to even
        if (zero != nullptr) v += pl_q_value(zero[c]);
        v = v != v ? 0.0f : fminf(fmaxf(v, PL_QMIN), PL_QMAX);  // NaN has no integer: 0
#if PL_IS_SUBINT(PL_Q)
        y[i] = pl_subint_wrap<PL_Q>((unsigned long long)(long long)v);  // in range: the value's low bits
#else
        y[i] = (Q)v;
#endif
#elif PL_Q == PL_Q_E8M0
        y[i] = (Q)pl_float_to_e8m0(v, PL_SATURATE != 0, PL_ROUND);
#else
        if (zero != nullptr) v += pl_q_value(zero[c]);
        y[i] = (Q)pl_float_to_fp8<PL_Q>(v, PL_SATURATE != 0);
#endif
    }
}
#endif

#if defined(PL_T) && defined(PL_DEQUANTIZE)
typedef PL_T T;
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_dequantize(const Q* __restrict__ x, const T* __restrict__ scale, const Q* __restrict__ zero,
              T* __restrict__ y, long long n, long long inner, long long axis_len) {
    PL_FOR_EACH_INDEX(i, n) {
        const long long c = (i / inner) % axis_len;
        float v = pl_q_value(x[i]);
        if (zero != nullptr) v -= pl_q_value(zero[c]);
        y[i] = pl_from<T>(v * pl_to_acc(scale[c]));
    }
}
#endif
