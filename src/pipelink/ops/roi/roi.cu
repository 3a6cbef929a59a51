// PipeLink's roi_align (ONNX RoiAlign-16) over NCHW x: one thread per output element (roi r, channel c,
// bin ph, pw). Each thread reads its roi and batch index (run-time data), computes the roi's geometry and
// sampling grid (sampling_ratio, or ceil(bin size) per axis when it is 0) with the formulas of
// roi/__init__.py in the accumulation type, products and sums rounded one by one (no FMA: the same sample
// points as the CPU reference, hence the same pixels), and walks the bin's grid_h x grid_w points.
// A point off the image ([-1, H] x [-1, W]) reads pixel 0 with weight 0, as onnx's reference.
// A roi whose batch index is outside [0, N), whose scaled coordinates are not finite, or whose adaptive
// grid exceeds PL_MAX_GRID points per axis writes NaN and reads nothing of x (so does every roi of an x
// with an empty spatial axis). Never allocates.
//
// Macros (chosen by plan_roi_align in pipelink/ops/roi/cuda.py):
//   PL_T           element type (float, double, __half, __nv_bfloat16)
//   PL_MAX         0: the mean of the points; 1: the largest weighted pixel, folded as onnx's reference
//                  (if v > best: best = v; the first value of a fold is taken as it is, NaN included)
//   PL_HALF_PIXEL  1: the scaled roi shifted by -0.5; 0 (output_half_pixel): no shift, rois at least 1 x 1
//   PL_MAX_GRID    the most points per axis of an adaptive grid
//   PL_BLOCK       threads per block
//
// Kernel: pl_roi_align(const T* x, const T* rois, const long long* batch, T* y, long long n, long long N,
//                      long long C, long long H, long long W, long long OH, long long OW, double scale,
//                      int ratio)
//   x contiguous [N, C, H, W], rois contiguous [R, 4] (x1, y1, x2, y2), batch [R], y contiguous
//   [R, C, OH, OW] with n = R * C * OH * OW elements; scale the spatial_scale (a float32 value for the
//   float types), ratio the sampling_ratio (0: adaptive). Distinct buffers.
#include "common.cuh"

#ifndef PL_MAX
#define PL_MAX 0
#endif
#ifndef PL_HALF_PIXEL
#define PL_HALF_PIXEL 1
#endif
#ifndef PL_MAX_GRID
#define PL_MAX_GRID 1024
#endif

typedef PL_T T;
typedef typename pl_acc<T>::type A;  // float for float and the half types, double for double

__device__ __forceinline__ float pl_mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double pl_mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float pl_add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double pl_add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float pl_ceil(float a) { return ceilf(a); }
__device__ __forceinline__ double pl_ceil(double a) { return ceil(a); }
__device__ __forceinline__ float pl_nan(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double pl_nan(double) { return __longlong_as_double(0x7ff8000000000000LL); }
__device__ __forceinline__ bool pl_finite(A v) { return v - v == (A)0; }  // false for inf and NaN

// One sample point of one axis: on the image or not, its low and high pixel and their weights
// (a point off the image: pixel 0, weights 0).
struct pl_tap {
    long long lo, hi;
    A w_lo, w_hi;
    bool inside;
};

__device__ __forceinline__ pl_tap pl_axis_tap(A start, A bin, long long b, int p, int points, long long extent) {
    pl_tap t;
    A at = pl_add_rn(pl_add_rn(start, pl_mul_rn((A)b, bin)), pl_mul_rn((A)p + (A)0.5, bin) / (A)points);
    t.inside = !(at < (A)-1 || at > (A)extent);
    if (!t.inside) {
        t.lo = t.hi = 0;
        t.w_lo = t.w_hi = (A)0;
        return t;
    }
    at = at < (A)0 ? (A)0 : at;
    t.lo = (long long)at;  // 0 <= at <= extent: a pixel index (or extent, clamped next)
    if (t.lo >= extent - 1) {
        t.lo = t.hi = extent - 1;
        at = (A)t.lo;
    } else {
        t.hi = t.lo + 1;
    }
    const A frac = pl_add_rn(at, -(A)t.lo);
    t.w_hi = frac;
    t.w_lo = pl_add_rn((A)1, -frac);
    return t;
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_roi_align(const T* __restrict__ x, const T* __restrict__ rois, const long long* __restrict__ batch,
             T* __restrict__ y, long long n, long long N, long long C, long long H, long long W, long long OH,
             long long OW, double scale, int ratio) {
    const A s = (A)scale;
    const A offset = PL_HALF_PIXEL ? (A)0.5 : (A)0;
    PL_FOR_EACH_INDEX(i, n) {
        const long long pw = i % OW;
        const long long ph = (i / OW) % OH;
        const long long c = (i / (OW * OH)) % C;
        const long long r = i / (OW * OH * C);
        const long long b = batch[r];
        const T* __restrict__ roi = rois + 4 * r;
        const A x0 = pl_add_rn(pl_mul_rn(pl_to_acc(roi[0]), s), -offset);
        const A y0 = pl_add_rn(pl_mul_rn(pl_to_acc(roi[1]), s), -offset);
        const A x1 = pl_add_rn(pl_mul_rn(pl_to_acc(roi[2]), s), -offset);
        const A y1 = pl_add_rn(pl_mul_rn(pl_to_acc(roi[3]), s), -offset);
        A width = pl_add_rn(x1, -x0), height = pl_add_rn(y1, -y0);
        bool ok = b >= 0 && b < N && H > 0 && W > 0 && pl_finite(x0) && pl_finite(y0) && pl_finite(x1) && pl_finite(y1) &&
                  pl_finite(width) && pl_finite(height);
#if !PL_HALF_PIXEL
        width = width < (A)1 ? (A)1 : width;  // a malformed roi is taken as 1 x 1
        height = height < (A)1 ? (A)1 : height;
#endif
        const A bin_h = height / (A)OH, bin_w = width / (A)OW;
        int gh = ratio, gw = ratio;
        if (ratio <= 0) {
            const A fh = pl_ceil(bin_h), fw = pl_ceil(bin_w);
            ok = ok && fh <= (A)PL_MAX_GRID && fw <= (A)PL_MAX_GRID;
            gh = ok && fh > (A)0 ? (int)fh : 0;  // no point at all: the bin is 0
            gw = ok && fw > (A)0 ? (int)fw : 0;
        }
        if (!ok) {
            y[i] = pl_from<T>(pl_nan((A)0));
            continue;
        }
        const T* __restrict__ src = x + (b * C + c) * H * W;
        A acc = (A)0;
        bool any = false;
        for (int iy = 0; iy < gh; ++iy) {
            const pl_tap ty = pl_axis_tap(y0, bin_h, ph, iy, gh, H);
            for (int ix = 0; ix < gw; ++ix) {
                const pl_tap tx = pl_axis_tap(x0, bin_w, pw, ix, gw, W);
                const bool on = ty.inside && tx.inside;
                const A w1 = on ? pl_mul_rn(ty.w_lo, tx.w_lo) : (A)0;
                const A w2 = on ? pl_mul_rn(ty.w_lo, tx.w_hi) : (A)0;
                const A w3 = on ? pl_mul_rn(ty.w_hi, tx.w_lo) : (A)0;
                const A w4 = on ? pl_mul_rn(ty.w_hi, tx.w_hi) : (A)0;
                // off the image: pixel 0 for all four, as the reference (0 * its value: a NaN shows)
                const long long lo = on ? ty.lo * W : 0, hi = on ? ty.hi * W : 0;
                const long long left = on ? tx.lo : 0, right = on ? tx.hi : 0;
                const A t1 = pl_mul_rn(w1, pl_to_acc(src[lo + left]));
                const A t2 = pl_mul_rn(w2, pl_to_acc(src[lo + right]));
                const A t3 = pl_mul_rn(w3, pl_to_acc(src[hi + left]));
                const A t4 = pl_mul_rn(w4, pl_to_acc(src[hi + right]));
#if PL_MAX
                A v = t1;
                if (t2 > v) v = t2;
                if (t3 > v) v = t3;
                if (t4 > v) v = t4;
                if (!any) {
                    acc = v;
                    any = true;
                } else if (v > acc) {
                    acc = v;
                }
#else
                acc += ((t1 + t2) + t3) + t4;
#endif
            }
        }
#if !PL_MAX
        const long long count = (long long)gh * gw;
        acc = acc / (A)(count > 0 ? count : 1);
#endif
        y[i] = pl_from<T>(acc);
    }
}
