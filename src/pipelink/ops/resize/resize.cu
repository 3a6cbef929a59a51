// PipeLink's resize (ONNX Resize, nearest, linear and cubic) over up to 8 axes: one thread per output
// element.
// Each resized axis maps its output index to an input coordinate in double precision with the formulas
// of resize/__init__.py's source_coordinates (IEEE operations in the same order: the same coordinates);
// nearest rounds it as nearest_mode says, linear blends the two neighbours axis after axis, first
// resized axis first, in the accumulation type (float; double for double), as the CPU reference does;
// cubic sums four neighbours per axis the same way, weighted by Keys' kernel (weights in double, as
// resize/__init__.py's cubic_taps). With antialias each resized axis blends the taps of
// resize/antialias.py's filter (stretched by 1 / scale when downsampling: a count known from the scale
// alone), weights in double normalised as there, summed tap by tap, first resized axis innermost.
// tf_crop_and_resize samples each resized axis's roi window (resize/crop.py's crop_coordinates); an output
// whose coordinate on any resized axis is not in [0, in - 1] (NaN included) stores `fill` instead.
// Never allocate; every index is clamped into the input.
//
// Macros (chosen by plan_resize in pipelink/ops/resize/cuda.py):
//   PL_T        element type (any numeric type for nearest, floats for linear)
//   PL_NDIM     rank (1..8)
//   PL_LINEAR   0 nearest, 1 linear or cubic; PL_NL the number of resized axes under them (0..8; cubic
//               0..3); PL_CUBIC 1 for cubic, with PL_EXCLUDE 1 for exclude_outside (cubic, antialias);
//               PL_ANTIALIAS 1 for the antialiasing filters (linear or cubic, PL_NL >= 1)
//   PL_COORD    PL_COORD_HALF_PIXEL, PL_COORD_HALF_PIXEL_SYMMETRIC, PL_COORD_PYTORCH_HALF_PIXEL,
//               PL_COORD_ASYMMETRIC, PL_COORD_ALIGN_CORNERS, PL_COORD_TF_CROP_AND_RESIZE
//   PL_NEAREST  PL_NEAREST_ROUND_PREFER_FLOOR, PL_NEAREST_ROUND_PREFER_CEIL, PL_NEAREST_FLOOR,
//               PL_NEAREST_CEIL
//   PL_BLOCK    threads per block
//
// Kernel: pl_resize(const T* x, T* y, long long n, long long din0..din7, long long dout0..dout7,
//                   double sc0..sc7, int resized, double cubic_a, double rs0..rs7, double re0..re7,
//                   double fill)
//   x contiguous with shape din, y contiguous with shape dout (n elements); sc the per-axis scales;
//   bit k of `resized` set when axis k is resampled (else it maps to itself); cubic_a the cubic
//   coefficient (unused by the other modes); rs, re each axis's roi start and end and fill the
//   extrapolation value, a value of T (tf_crop_and_resize; unused by the other modes). Distinct buffers.
#include "common.cuh"

#define PL_COORD_HALF_PIXEL 0
#define PL_COORD_PYTORCH_HALF_PIXEL 1
#define PL_COORD_ASYMMETRIC 2
#define PL_COORD_ALIGN_CORNERS 3
#define PL_COORD_HALF_PIXEL_SYMMETRIC 4
#define PL_COORD_TF_CROP_AND_RESIZE 5
#define PL_NEAREST_ROUND_PREFER_FLOOR 0
#define PL_NEAREST_ROUND_PREFER_CEIL 1
#define PL_NEAREST_FLOOR 2
#define PL_NEAREST_CEIL 3

#ifndef PL_NDIM
#define PL_NDIM 4
#endif
#ifndef PL_NL
#define PL_NL 0
#endif
#ifndef PL_CUBIC
#define PL_CUBIC 0
#endif
#ifndef PL_EXCLUDE
#define PL_EXCLUDE 0
#endif
#ifndef PL_ANTIALIAS
#define PL_ANTIALIAS 0
#endif
#define PL_TAPS (PL_CUBIC ? 4 : 2)  // neighbours per resized axis

typedef PL_T T;

// where output index o of an axis of in_size (out_size outputs) samples the input, for that axis's scale
// (and, in tf_crop_and_resize, its roi window from start to end)
__device__ __forceinline__ double pl_source_coordinate(long long o, long long in_size, long long out_size,
                                                       double scale, double start, double end) {
    const double od = (double)o;
#if PL_COORD != PL_COORD_HALF_PIXEL_SYMMETRIC
    (void)out_size;
#endif
#if PL_COORD != PL_COORD_TF_CROP_AND_RESIZE
    (void)start;
    (void)end;
#endif
#if PL_COORD == PL_COORD_TF_CROP_AND_RESIZE
    // crop.py's operations in its order, every multiply rounded (no fma): the reference's coordinate
    const double span = (double)(in_size - 1);
    const double length = __dmul_rn((double)in_size, scale);
    const double c = length == 1.0 ? __dmul_rn(end - start, span) / 2.0
                                   : __dmul_rn(__dmul_rn(od, end - start), span) / (length - 1.0);
    return c + __dmul_rn(start, span);
#elif PL_COORD == PL_COORD_HALF_PIXEL_SYMMETRIC
    // rounded multiplies: no contraction into an fma, so the coordinate is the reference's to the bit
    const double adjustment = (double)out_size / __dmul_rn((double)in_size, scale);
    const double offset = __dmul_rn((double)in_size / 2.0, 1.0 - adjustment);
    return offset + (od + 0.5) / scale - 0.5;
#elif PL_COORD == PL_COORD_ASYMMETRIC
    (void)in_size;
    return od / scale;
#elif PL_COORD == PL_COORD_ALIGN_CORNERS
    const double length = __dmul_rn((double)in_size, scale);  // rounded: no fma into length - 1
    return length != 1.0 ? od * (((double)in_size - 1.0) / (length - 1.0)) : 0.0;
#else
#if PL_COORD == PL_COORD_PYTORCH_HALF_PIXEL
    if ((double)in_size * scale <= 1.0) return 0.0;
#else
    (void)in_size;
#endif
    return (od + 0.5) / scale - 0.5;
#endif
}

__device__ __forceinline__ long long pl_clamp_index(double v, long long in_size) {
    v = v < 0.0 ? 0.0 : v;
    const double top = (double)(in_size - 1);
    return (long long)(v > top ? top : v);
}

#if !PL_LINEAR
__device__ __forceinline__ long long pl_nearest(double c, long long in_size) {
#if PL_NEAREST == PL_NEAREST_FLOOR
    return pl_clamp_index(floor(c), in_size);
#elif PL_NEAREST == PL_NEAREST_CEIL
    return pl_clamp_index(ceil(c), in_size);
#else
    const double f = floor(c);
    const bool halfway = c - f == 0.5;
#if PL_NEAREST == PL_NEAREST_ROUND_PREFER_FLOOR
    return pl_clamp_index(halfway ? f : floor(c + 0.5), in_size);
#else
    return pl_clamp_index(halfway ? ceil(c) : floor(c + 0.5), in_size);
#endif
#endif
}
#endif

#if PL_ANTIALIAS
// The filter at distance d (resize/antialias.py): linear's triangle clip(1 - |d|, 0, 1), Keys' cubic
// (resize/cubic.py's keys, the same expressions); PL_HALF_WIDTH its half-width at scale 1.
#define PL_HALF_WIDTH (PL_CUBIC ? 2.0 : 1.0)
__device__ __forceinline__ double pl_filter(double d, double a) {
    d = fabs(d);
#if PL_CUBIC
    return d <= 1.0 ? ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
                    : (d < 2.0 ? ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a : 0.0);
#else
    (void)a;
    const double w = 1.0 - d;
    return w > 0.0 ? w : 0.0;
#endif
}

// One resized axis's taps at one output: tap t reads input first + t (clamped into the axis), weighted by
// pl_filter((start + t - ratio) * scale) / norm (/ renorm with PL_EXCLUDE, 0 outside the axis).
struct pl_taps {
    long long first, count, start, size, stride;
    double ratio, scale, norm, renorm;
};

__device__ __forceinline__ double pl_tap_weight(const pl_taps& f, long long t, double a) {
    const double w = pl_filter(((double)(f.start + t) - f.ratio) * f.scale, a) / f.norm;
#if PL_EXCLUDE
    const long long at = f.first + t;
    return at < 0 || at >= f.size ? 0.0 : w / f.renorm;
#else
    return w;
#endif
}

__device__ __forceinline__ long long pl_tap_offset(const pl_taps& f, long long t) {
    const long long at = f.first + t;
    return (at < 0 ? 0 : (at >= f.size ? f.size - 1 : at)) * f.stride;
}

// The taps of coordinate c on an axis of in_size at `scale` (antialias.py's antialias_taps).
__device__ __forceinline__ pl_taps pl_filter_taps(double c, long long in_size, long long stride,
                                                  double scale, double a) {
    pl_taps f;
    f.scale = scale < 1.0 ? scale : 1.0;
    f.start = (long long)floor(-PL_HALF_WIDTH / f.scale) + 1;
    f.count = 2 - 2 * f.start;
    const double base = floor(c);
    const bool whole = c == base;  // a whole coordinate counts as 1 past the previous index
    f.ratio = whole ? 1.0 : c - base;
    f.first = (long long)base - (whole ? 1 : 0) + f.start;
    f.size = in_size;
    f.stride = stride;
    double norm = 0.0;  // the raw weights' sum, in tap order
    for (long long t = 0; t < f.count; ++t) {
        norm += pl_filter(((double)(f.start + t) - f.ratio) * f.scale, a);
    }
    f.norm = norm;
    f.renorm = 1.0;
#if PL_EXCLUDE
    double renorm = 0.0;
    for (long long t = 0; t < f.count; ++t) renorm += pl_tap_weight(f, t, a);
    f.renorm = renorm == 0.0 ? 1.0 : renorm;
#endif
    return f;
}
#endif

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_resize(const T* __restrict__ x, T* __restrict__ y, long long n,
          long long din0, long long din1, long long din2, long long din3,
          long long din4, long long din5, long long din6, long long din7,
          long long dout0, long long dout1, long long dout2, long long dout3,
          long long dout4, long long dout5, long long dout6, long long dout7,
          double sc0, double sc1, double sc2, double sc3, double sc4, double sc5, double sc6, double sc7,
          int resized, double cubic_a,
          double rs0, double rs1, double rs2, double rs3, double rs4, double rs5, double rs6, double rs7,
          double re0, double re1, double re2, double re3, double re4, double re5, double re6, double re7,
          double fill) {
    const long long din[8] = {din0, din1, din2, din3, din4, din5, din6, din7};
    const long long dout[8] = {dout0, dout1, dout2, dout3, dout4, dout5, dout6, dout7};
    const double sc[8] = {sc0, sc1, sc2, sc3, sc4, sc5, sc6, sc7};
    const double rs[8] = {rs0, rs1, rs2, rs3, rs4, rs5, rs6, rs7};
    const double re[8] = {re0, re1, re2, re3, re4, re5, re6, re7};
#if PL_COORD == PL_COORD_TF_CROP_AND_RESIZE
    const T fill_value = pl_from<T>((typename pl_acc<T>::type)fill);  // exact: fill is a value of T
#else
    (void)fill;
#endif
    PL_FOR_EACH_INDEX(i, n) {
        long long rem = i, stride = 1, base = 0;
#if PL_COORD == PL_COORD_TF_CROP_AND_RESIZE
        bool outside = false;  // sampled outside x on some resized axis: y[i] is fill_value
#endif
#if PL_LINEAR
        typedef typename pl_acc<T>::type A;
#if PL_ANTIALIAS
        pl_taps ax[PL_NL > 0 ? PL_NL : 1];
#else
        long long tap[PL_NL > 0 ? PL_NL : 1][PL_TAPS];
        A w[PL_NL > 0 ? PL_NL : 1][PL_TAPS];
#endif
        int j = PL_NL - 1;  // slot of the next resized axis, walking from the last axis back
#else
        (void)cubic_a;
#endif
#pragma unroll
        for (int k = PL_NDIM - 1; k >= 0; --k) {
            const long long o = rem % dout[k];
            rem /= dout[k];
            if (resized & (1 << k)) {
#if PL_COORD == PL_COORD_TF_CROP_AND_RESIZE
                // outside x (NaN included): y[i] is the fill; the taps sample x's start (never NaN)
                const double raw = pl_source_coordinate(o, din[k], dout[k], sc[k], rs[k], re[k]);
                const bool in_x = raw >= 0.0 && raw <= (double)(din[k] - 1);
                outside = outside || !in_x;
                const double c = in_x ? raw : 0.0;
#else
                const double c = pl_source_coordinate(o, din[k], dout[k], sc[k], rs[k], re[k]);
#endif
#if PL_ANTIALIAS
                ax[j] = pl_filter_taps(c, din[k], stride, sc[k], cubic_a);
                --j;
#elif PL_LINEAR && PL_CUBIC
                const double f = floor(c), t = c - f, a = cubic_a;
                double ws[4], sum = 0.0;
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const double d = fabs((double)(q - 1) - t);
                    double wq = d <= 1.0 ? ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
                                         : (d < 2.0 ? ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a : 0.0);
                    long long at = (long long)f + q - 1;
                    if (PL_EXCLUDE && (at < 0 || at >= din[k])) wq = 0.0;
                    ws[q] = wq;
                    sum += wq;
                    at = at < 0 ? 0 : (at >= din[k] ? din[k] - 1 : at);
                    tap[j][q] = at * stride;
                }
#pragma unroll
                for (int q = 0; q < 4; ++q) w[j][q] = (A)(PL_EXCLUDE ? ws[q] / sum : ws[q]);
                --j;
#elif PL_LINEAR
                const double top = (double)(din[k] - 1);
                const double cl = c < 0.0 ? 0.0 : (c > top ? top : c);
                const long long l = (long long)floor(cl);
                tap[j][0] = l * stride;
                tap[j][1] = (l + 1 < din[k] ? l + 1 : din[k] - 1) * stride;
                w[j][1] = (A)(cl - (double)l);
                --j;
#else
                base += pl_nearest(c, din[k]) * stride;
#endif
            } else {
                base += o * stride;
            }
            stride *= din[k];
        }
#if PL_COORD == PL_COORD_TF_CROP_AND_RESIZE
        if (outside) {
            y[i] = fill_value;
            continue;
        }
#endif
#if PL_ANTIALIAS
        // The taps of every resized axis, slot 0 (the first resized axis) fastest, as nested sums:
        // acc[s] sums slot s's taps of acc[s - 1] (of x for slot 0), each weighted, and is folded into
        // acc[s + 1] when slot s has run through its taps (so the first resized axis sums innermost).
        long long t[PL_NL], part[PL_NL];
        double wt[PL_NL];
        A acc[PL_NL];
#pragma unroll
        for (int s = 0; s < PL_NL; ++s) {
            t[s] = 0;
            part[s] = pl_tap_offset(ax[s], 0);
            wt[s] = pl_tap_weight(ax[s], 0, cubic_a);
            acc[s] = (A)0;
        }
        for (bool more = true; more;) {
            long long off = base;
#pragma unroll
            for (int s = 0; s < PL_NL; ++s) off += part[s];
            acc[0] += pl_to_acc(x[off]) * (A)wt[0];
            for (int s = 0;; ++s) {  // advance the odometer
                if (++t[s] < ax[s].count) {
                    part[s] = pl_tap_offset(ax[s], t[s]);
                    wt[s] = pl_tap_weight(ax[s], t[s], cubic_a);
                    break;
                }
                if (s + 1 == PL_NL) {  // the last slot ran through its taps: acc[s] is the value
                    more = false;
                    break;
                }
                acc[s + 1] += acc[s] * (A)wt[s + 1];
                acc[s] = (A)0;
                t[s] = 0;
                part[s] = pl_tap_offset(ax[s], 0);
                wt[s] = pl_tap_weight(ax[s], 0, cubic_a);
            }
        }
        y[i] = pl_from<T>(acc[PL_NL - 1]);
#elif PL_LINEAR
        // every combination of the resized axes' neighbours (slot s the s-th digit, base PL_TAPS), then
        // combined axis by axis: first resized axis (slot 0) first
        constexpr int COMBOS = PL_CUBIC ? 1 << (2 * PL_NL) : 1 << PL_NL;
        A v[COMBOS];
#pragma unroll
        for (int combo = 0; combo < COMBOS; ++combo) {
            long long off = base;
            int digits = combo;
#pragma unroll
            for (int s = 0; s < PL_NL; ++s) {
                off += tap[s][digits % PL_TAPS];
                digits /= PL_TAPS;
            }
            v[combo] = pl_to_acc(x[off]);
        }
        int live = COMBOS;
#pragma unroll
        for (int s = 0; s < PL_NL; ++s) {
            live /= PL_TAPS;
#pragma unroll
            for (int c = 0; c < live; ++c) {
#if PL_CUBIC
                const A* g = v + 4 * c;
                v[c] = ((g[0] * w[s][0] + g[1] * w[s][1]) + g[2] * w[s][2]) + g[3] * w[s][3];
#else
                v[c] = v[2 * c] + (v[2 * c + 1] - v[2 * c]) * w[s][1];
#endif
            }
        }
        y[i] = pl_from<T>(v[0]);
#else
        y[i] = x[base];
#endif
    }
}
