// PipeLink's float8 conversions (e4m3fn, e5m2), in software on the bits: round to nearest even, no
// dependence on cuda_fp8.h. Used by the (de)quantize kernels (quantize/quantize.cu) and the any-dtype cast
// (elementwise/cast.cu); __host__ __device__, so tests/unit/test_fp8_conversion.py checks them against
// ml_dtypes on the CPU, value by value.
//
// The formats are named by PL_Q_E4M3FN and PL_Q_E5M2 (quantize.cu's quantized kinds 2 and 3; 0 and 1 are
// its integers).
#pragma once

#define PL_Q_E4M3FN 2
#define PL_Q_E5M2 3
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

// float64 -> float8 bits, rounded once (round to nearest even, as ml_dtypes): the double is first cut to
// a float rounded to odd (its dropped bits, if any, kept as the last bit), which the float32 rounding
// above then rounds correctly (a float has 21 more significand bits than any float8). Past float's
// range the value is FLT_MAX (beyond every float8: overflow), under it a signed tiny float (below every
// float8: zero).
PL_HD unsigned pl_double_to_float_odd_bits(double d) {
    unsigned long long b;
#if defined(__CUDA_ARCH__)
    b = (unsigned long long)__double_as_longlong(d);
#else
    memcpy(&b, &d, 8);
#endif
    const unsigned sign = (unsigned)(b >> 63) << 31;
    const int e = (int)((b >> 52) & 0x7ffu);
    const unsigned long long m = b & ((1ull << 52) - 1u);
    if (e == 0x7ff) return sign | (m ? 0x7fc00000u : 0x7f800000u);  // NaN, inf
    if (e == 0 && m == 0) return sign;                                // +-0
    const int fe = e - 1023 + 127;
    if (fe >= 255) return sign | 0x7f7fffffu;  // FLT_MAX
    if (fe <= 0) return sign | 1u;             // the smallest float: rounds to a signed zero
    const unsigned sticky = (m & ((1ull << 29) - 1u)) != 0;
    return sign | ((unsigned)fe << 23) | (unsigned)(m >> 29) | sticky;
}
template <int Q> PL_HD unsigned char pl_double_to_fp8(double d, bool saturate) {
    return pl_float_to_fp8<Q>(pl_bits_f32(pl_double_to_float_odd_bits(d)), saturate);
}
