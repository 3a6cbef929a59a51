// PipeLink's conversions of the narrow storage types, in software on the bits: the float8s (e4m3fn, e5m2,
// e4m3fnuz, e5m2fnuz, e8m0fnu), float4_e2m1fn and the sub-byte integers (int4, uint4, int2, uint2, held one
// value per byte as ml_dtypes holds them). No dependence on cuda_fp8.h / cuda_fp4.h (whose types cover
// e4m3, e5m2 and e2m1 only). Used by the (de)quantize kernels (quantize/quantize.cu) and the any-dtype
// cast (elementwise/cast.cu); __host__ __device__, so tests/unit/test_fp8_conversion.py and
// test_fp4_conversion.py check them against ml_dtypes (and onnx's reference for e8m0's rounding modes) on
// the CPU, value by value.
//
// The formats are named by PL_Q_E4M3FN, PL_Q_E5M2, PL_Q_E4M3FNUZ, PL_Q_E5M2FNUZ, PL_Q_E8M0, PL_Q_E2M1 and
// PL_Q_INT4, PL_Q_UINT4, PL_Q_INT2, PL_Q_UINT2 (quantize.cu's quantized kinds 2 to 11; 0, 1, 12 and 13 are
// its 8- and 16-bit integers). pl_float_to_fp8 / pl_double_to_fp8 convert as ml_dtypes does (with saturate:
// as NumPy's clip to the finite range first), pl_fp8_to_float exactly; pl_float_to_e8m0 is ONNX Cast's
// conversion into e8m0 (its round_mode and saturate); pl_subint_* read and write the sub-byte integers.
#pragma once

#define PL_Q_E4M3FN 2
#define PL_Q_E5M2 3
#define PL_Q_E4M3FNUZ 4
#define PL_Q_E5M2FNUZ 5
#define PL_Q_E8M0 6
#define PL_Q_E2M1 7
#define PL_Q_INT4 8
#define PL_Q_UINT4 9
#define PL_Q_INT2 10
#define PL_Q_UINT2 11
// whether a kind is a sub-byte integer (PL_Q_INT4...PL_Q_UINT2)
#define PL_IS_SUBINT(Q) ((Q) >= PL_Q_INT4 && (Q) <= PL_Q_UINT2)
// ONNX Cast's round_mode into e8m0 (pl_float_to_e8m0)
#define PL_E8M0_UP 0
#define PL_E8M0_DOWN 1
#define PL_E8M0_NEAREST 2
#define PL_HD __host__ __device__ __forceinline__

// the sign-magnitude float8 formats: exponent bias, mantissa bits, largest finite and NaN encodings
// (without the sign), the overflow result without saturation (INF: e5m2's infinity, else the NaN), whether
// the all-ones exponent is inf/NaN (HAS_INF: e5m2) and whether the format is "fnuz" (UZ: no infinity, no
// negative zero, 0x80 its only NaN; a result that rounds to zero is +0)
template <int Q> struct pl_fp8;
template <> struct pl_fp8<PL_Q_E4M3FN> {
    static constexpr int BIAS = 7, MANT = 3;
    static constexpr unsigned MAX = 0x7e, NAN_BITS = 0x7f, INF = 0x7f;  // no inf: overflow is NaN
    static constexpr bool HAS_INF = false, UZ = false;
};
template <> struct pl_fp8<PL_Q_E5M2> {
    static constexpr int BIAS = 15, MANT = 2;
    static constexpr unsigned MAX = 0x7b, NAN_BITS = 0x7e, INF = 0x7c;
    static constexpr bool HAS_INF = true, UZ = false;
};
template <> struct pl_fp8<PL_Q_E4M3FNUZ> {
    static constexpr int BIAS = 8, MANT = 3;
    static constexpr unsigned MAX = 0x7f, NAN_BITS = 0x80, INF = 0x80;
    static constexpr bool HAS_INF = false, UZ = true;
};
template <> struct pl_fp8<PL_Q_E5M2FNUZ> {
    static constexpr int BIAS = 16, MANT = 2;
    static constexpr unsigned MAX = 0x7f, NAN_BITS = 0x80, INF = 0x80;
    static constexpr bool HAS_INF = false, UZ = true;
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

PL_HD unsigned long long pl_f64_bits(double d) {
#if defined(__CUDA_ARCH__)
    return (unsigned long long)__double_as_longlong(d);
#else
    unsigned long long b;
    memcpy(&b, &d, 8);
    return b;
#endif
}

// float32 -> float8 bits, round to nearest even; overflow saturates or gives F::INF (NaN but for e5m2)
template <int Q> PL_HD unsigned char pl_float_to_fp8(float f, bool saturate) {
    typedef pl_fp8<Q> F;
    const unsigned b = pl_f32_bits(f);
    const unsigned sign = (b >> 24) & 0x80u;
    const unsigned a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned char)(sign | F::NAN_BITS);  // fnuz: 0x80 whatever the sign
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
    if (F::UZ && bits == 0) return 0;                      // no negative zero: 0x80 is the NaN
    return (unsigned char)(sign | bits);
}

// float8 bits -> float32, exact
template <int Q> PL_HD float pl_fp8_to_float(unsigned char v) {
    typedef pl_fp8<Q> F;
    const unsigned sign = (unsigned)(v & 0x80u) << 24;
    const unsigned e = (v & 0x7fu) >> F::MANT, m = v & ((1u << F::MANT) - 1u);
    const unsigned top = (1u << (7 - F::MANT)) - 1u;  // the all-ones exponent
    unsigned out;
    if (F::UZ ? v == 0x80u : !F::HAS_INF && (v & 0x7fu) == F::NAN_BITS) {
        out = 0x7fc00000u;
    } else if (F::HAS_INF && e == top) {
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
    const unsigned long long b = pl_f64_bits(d);
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

// float8_e8m0fnu: 2^(e - 127) for e < 0xff, 0xff NaN; no sign, no zero, no infinity.
// As ml_dtypes converts: the nearest power of two, ties up (1.5 * 2^k gives 2^(k + 1)), below 2^-127 the
// smallest (0x00), from 1.5 * 2^127 on NaN; zero, negatives, inf and NaN are NaN. With saturate, as NumPy's
// clip to [2^-127, 2^127] first: zero and negatives (-inf too) give 0x00, overflow and inf 0xfe.
template <> PL_HD unsigned char pl_double_to_fp8<PL_Q_E8M0>(double d, bool saturate) {
    const unsigned long long b = pl_f64_bits(d);
    const int e = (int)((b >> 52) & 0x7ffu);
    const unsigned long long m = b & ((1ull << 52) - 1u);
    if (e == 0x7ff && (m || !saturate)) return 0xff;                      // NaN; inf unsaturated
    if ((b >> 63) || (e == 0 && m == 0)) return saturate ? 0x00 : 0xff;  // -inf clips to the smallest
    if (e == 0x7ff) return 0xfe;
    const int r = e - 1023 + 127 + (int)((m >> 51) & 1u);  // the exponent, plus one from the half on
    if (r <= 0) return 0x00;
    return r > 0xfe ? (saturate ? 0xfe : 0xff) : (unsigned char)r;
}
template <> PL_HD unsigned char pl_float_to_fp8<PL_Q_E8M0>(float f, bool saturate) {
    return pl_double_to_fp8<PL_Q_E8M0>((double)f, saturate);  // exact: a float is a double
}
template <> PL_HD float pl_fp8_to_float<PL_Q_E8M0>(unsigned char v) {
    if (v == 0xffu) return pl_bits_f32(0x7fc00000u);
    return pl_bits_f32(v ? (unsigned)v << 23 : 0x00400000u);  // 2^-127 is a float subnormal
}
// a 64-bit integer -> e8m0 as ml_dtypes (rounded once: through a double, one past 2^53 would round twice)
PL_HD unsigned char pl_u64_to_e8m0(unsigned long long v) {
    if (v == 0) return 0xff;
#if defined(__CUDA_ARCH__)
    const int top = 63 - __clzll((long long)v);  // the leading one: the exponent
#else
    int top = 63;
    while (!((v >> top) & 1u)) --top;
#endif
    return (unsigned char)(127 + top + (top > 0 ? (int)((v >> (top - 1)) & 1u) : 0));
}
PL_HD unsigned char pl_i64_to_e8m0(long long v) { return v < 0 ? 0xff : pl_u64_to_e8m0((unsigned long long)v); }

// float32 -> e8m0 bits as ONNX's Cast (onnx.numpy_helper.to_float8e8m0): the float's exponent field (its
// sign is not read; zero gives 0x00), plus one when any fraction bit is set (PL_E8M0_UP), never
// (PL_E8M0_DOWN), or from the half on (PL_E8M0_NEAREST: ties up, but for the subnormals' exponent 0,
// whose half is 2^-127 itself); with saturate the largest exponent does not round up into NaN; inf and NaN
// give 0xff
PL_HD unsigned char pl_float_to_e8m0(float f, bool saturate, int round) {
    const unsigned b = pl_f32_bits(f), e = (b >> 23) & 0xffu, frac = b & 0x7fffffu;
    if (e == 0xffu) return 0xff;
    bool up = false;
    if (round == PL_E8M0_UP) up = frac != 0;
    if (round == PL_E8M0_NEAREST) up = (frac & 0x400000u) && ((frac & 0x3fffffu) || e > 0);
    if (saturate && e == 0xfeu) up = false;
    return (unsigned char)(e + (up ? 1u : 0u));
}

// float4_e2m1fn: sign (0x8), 2 exponent bits (bias 1), 1 mantissa bit, in a byte's low 4 bits (the high
// bits zero when written; read as ml_dtypes reads them, any set bit above the magnitude's is the sign):
// +-0, 0.5, 1, 1.5, 2, 3, 4, 6; no infinity, no NaN.
// As ml_dtypes converts: round to nearest even, every magnitude past 6 (inf too) 6 whatever saturate says
// (the format has no infinity to overflow into), a value rounding to zero keeps its sign, and NaN gives a
// zero of the opposite sign (NaN -> 0x8, -NaN -> 0x0).
template <> PL_HD unsigned char pl_float_to_fp8<PL_Q_E2M1>(float f, bool saturate) {
    (void)saturate;  // always saturated: there is no infinity
    const unsigned b = pl_f32_bits(f);
    const unsigned sign = (b >> 28) & 0x8u;
    const unsigned a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned char)(sign ^ 0x8u);
    unsigned bits;
    if (a < 0x3f800000u) {
        // below 1 (the smallest normal): a multiple of the subnormal quantum 0.5, rounded half to even;
        // 2 quanta encode 1.0 by themselves (exponent 1, mantissa 0)
        bits = (unsigned)rintf(pl_bits_f32(a) * 2.0f);
    } else {
        const unsigned r = (a + ((1u << 21) - 1u) + ((a >> 22) & 1u)) >> 22;  // RNE to 1 mantissa bit
        bits = r - (126u << 1);
    }
    return (unsigned char)(sign | (bits > 7u ? 7u : bits));  // inf lands past 7 as well
}
template <> PL_HD float pl_fp8_to_float<PL_Q_E2M1>(unsigned char v) {
    const unsigned sign = v > 0x7u ? 0x80000000u : 0u, e = (v >> 1) & 0x3u, m = v & 0x1u;
    if (e == 0) return pl_bits_f32(sign | (m ? 0x3f000000u : 0u));  // 0.5 or zero
    return pl_bits_f32(sign | ((e + 126u) << 23) | (m << 22));
}

// The sub-byte integers, one value per byte as ml_dtypes holds them: the value in the low BITS bits (two's
// complement for int4 and int2: -1 is 0x0f, 0x03), the high bits zero when written and unread when read.
template <int Q> struct pl_subint;
template <> struct pl_subint<PL_Q_INT4> { static constexpr int BITS = 4, MIN = -8, MAX = 7; };
template <> struct pl_subint<PL_Q_UINT4> { static constexpr int BITS = 4, MIN = 0, MAX = 15; };
template <> struct pl_subint<PL_Q_INT2> { static constexpr int BITS = 2, MIN = -2, MAX = 1; };
template <> struct pl_subint<PL_Q_UINT2> { static constexpr int BITS = 2, MIN = 0, MAX = 3; };

// the value of a byte: its low bits, sign-extended for the signed types
template <int Q> PL_HD int pl_subint_value(unsigned char b) {
    typedef pl_subint<Q> I;
    const int v = b & ((1 << I::BITS) - 1), top = 1 << (I::BITS - 1);
    return I::MIN < 0 ? (v ^ top) - top : v;
}
// an integer's low bits (two's complement): ONNX Cast's wrap of an integer into a narrower one, as
// ml_dtypes casts; a value of the type's range is stored as itself
template <int Q> PL_HD unsigned char pl_subint_wrap(unsigned long long v) {
    return (unsigned char)(v & ((1u << pl_subint<Q>::BITS) - 1u));
}
// a float truncated toward zero; outside the type's range (inf too) and NaN 0, as ml_dtypes casts
template <int Q> PL_HD unsigned char pl_subint_from_double(double d) {
    typedef pl_subint<Q> I;
    const double t = trunc(d);
    return t >= I::MIN && t <= I::MAX ? pl_subint_wrap<Q>((unsigned long long)(long long)t) : 0;
}
