// PipeLink's linear (de)quantization (ONNX QuantizeLinear / DequantizeLinear) to and from int8, uint8 and
// the Hopper 8-bit floats (e4m3fn, e5m2), per tensor or per axis: one thread per element, in float32 as
// the CPU reference computes. The float8 conversions are done in software on the bits (round to nearest
// even, no dependence on cuda_fp8.h), and are __host__ __device__ so tests/unit can check them against
// ml_dtypes on the CPU, value by value.
//
// Macros (chosen by pipelink/ops/quantize/cuda.py):
//   PL_T         the float type of x (quantize) / y (dequantize) and of the scale: float, __half,
//                __nv_bfloat16
//   PL_Q         the quantized kind: PL_Q_INT8, PL_Q_UINT8, PL_Q_E4M3FN, PL_Q_E5M2 (stored as bytes)
//   PL_SATURATE  float8 quantize: 1 clips to the largest finite value, 0 gives NaN (e4m3fn) or inf
//                (e5m2) on overflow; integers always saturate
//   PL_QUANTIZE / PL_DEQUANTIZE  which kernel; PL_BLOCK threads per block
//
// Kernels (n elements; the scale and zero point of element i are at (i / inner) % axis_len: inner = 1,
// axis_len = 1 per tensor; zero may be null):
//   pl_quantize(const T* x, const T* scale, const Q* zero, Q* y, long long n, long long inner,
//               long long axis_len)       y = saturate(round_half_even(x / scale) + zero)
//   pl_dequantize(const Q* x, const T* scale, const Q* zero, T* y, long long n, long long inner,
//                 long long axis_len)     y = (x - zero) * scale
#include "common.cuh"

#define PL_Q_INT8 0
#define PL_Q_UINT8 1
#define PL_Q_E4M3FN 2
#define PL_Q_E5M2 3
#ifndef PL_Q
#define PL_Q PL_Q_E4M3FN
#endif
#ifndef PL_SATURATE
#define PL_SATURATE 1
#endif
#define PL_HD __host__ __device__ __forceinline__

// float8 formats: exponent bias, mantissa bits, largest finite and NaN encodings (without the sign), and
// whether the format has an infinity (e5m2: 0x7c) or spends that pattern on finite values (e4m3fn)
template <int Q> struct pl_fp8;
template <> struct pl_fp8<PL_Q_E4M3FN> {
    static constexpr int BIAS = 7, MANT = 3;
    static constexpr unsigned MAX = 0x7e, NAN_BITS = 0x7f, INF = 0x7f;  // no inf: overflow is NaN
};
template <> struct pl_fp8<PL_Q_E5M2> {
    static constexpr int BIAS = 15, MANT = 2;
    static constexpr unsigned MAX = 0x7b, NAN_BITS = 0x7e, INF = 0x7c;
};

#if !defined(__CUDACC_RTC__)
#include <cstring>  // host builds (the unit test's): memcpy
#endif
PL_HD unsigned pl_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
#endif
}
PL_HD float pl_bits_f32(unsigned u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

// float32 -> float8 bits, round to nearest even; overflow saturates or gives F::INF (NaN for e4m3fn)
template <int Q> PL_HD unsigned char pl_float_to_fp8(float f, bool saturate) {
    typedef pl_fp8<Q> F;
    const unsigned b = pl_f32_bits(f);
    const unsigned sign = (b >> 24) & 0x80u;
    const unsigned a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned char)(sign | F::NAN_BITS);
    unsigned bits;
    if (a < ((unsigned)(127 - F::BIAS + 1) << 23)) {
        // below the smallest normal: a multiple of the subnormal quantum 2^(1 - BIAS - MANT); the
        // scaling by a power of two is exact, rintf rounds half to even, and q = 2^MANT encodes the
        // smallest normal by itself
        const float per_quantum = pl_bits_f32((unsigned)(127 + F::BIAS + F::MANT - 1) << 23);
        bits = (unsigned)rintf(pl_bits_f32(a) * per_quantum);
    } else {
        const int drop = 23 - F::MANT;
        const unsigned r = (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >> drop;  // RNE
        bits = r - ((unsigned)(127 - F::BIAS) << F::MANT);
    }
    if (bits > F::MAX) bits = saturate ? F::MAX : F::INF;  // inf lands here as well
    return (unsigned char)(sign | bits);
}

// float8 bits -> float32, exact
template <int Q> PL_HD float pl_fp8_to_float(unsigned char v) {
    typedef pl_fp8<Q> F;
    const unsigned sign = (unsigned)(v & 0x80u) << 24;
    const unsigned e = (v & 0x7fu) >> F::MANT, m = v & ((1u << F::MANT) - 1u);
    const unsigned top = (1u << (7 - F::MANT)) - 1u;  // the all-ones exponent
    unsigned out;
    if (Q == PL_Q_E4M3FN && (v & 0x7fu) == F::NAN_BITS) {
        out = 0x7fc00000u;
    } else if (Q == PL_Q_E5M2 && e == top) {
        out = m ? 0x7fc00000u : 0x7f800000u;
    } else if (e == 0) {
        // m * 2^(1 - BIAS - MANT): exact in float32
        const float quantum = pl_bits_f32((unsigned)(127 - F::BIAS - F::MANT + 1) << 23);
        return pl_bits_f32(sign | pl_f32_bits((float)m * quantum));
    } else {
        out = ((e + 127 - F::BIAS) << 23) | (m << (23 - F::MANT));
    }
    return pl_bits_f32(sign | out);
}

#if PL_Q == PL_Q_INT8
typedef signed char Q;
#define PL_QMIN -128.0f
#define PL_QMAX 127.0f
#else
typedef unsigned char Q;
#define PL_QMIN 0.0f
#define PL_QMAX 255.0f
#endif

// the float value of a quantized element (zero points and dequantize inputs)
__device__ __forceinline__ float pl_q_value(Q v) {
#if PL_Q == PL_Q_E4M3FN || PL_Q == PL_Q_E5M2
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
#if PL_Q == PL_Q_INT8 || PL_Q == PL_Q_UINT8
        v = rintf(v);  // half to even
        if (zero != nullptr) v += pl_q_value(zero[c]);
        v = v != v ? 0.0f : fminf(fmaxf(v, PL_QMIN), PL_QMAX);  // NaN has no integer: 0
        y[i] = (Q)v;
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
