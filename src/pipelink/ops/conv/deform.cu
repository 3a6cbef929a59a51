// PipeLink's deform_conv2d (ONNX DeformConv, DCNv2) and deform_im2col, its sampled columns.
// pl_deform_conv2d: one thread per output element y[n, m, oh, ow] sums, over its group's input channels
// and the kernel's taps, w[m, c, i, j] times the bilinear sample of x[n, c] at the tap's deformed position
// times the tap's mask. pl_deform_im2col: one thread per column element cols[n, c * kh * kw + k, p]
// writes that sample times its mask (the product with w, cuBLASLt's, then gives the convolution).
// The sample follows the CPU reference (conv/deform_sampling.py) exactly in what it picks: the position is
// ((oh * sh - pad_top) + dy) + i * dh (the same for the width), added in the accumulation type in that
// order (adds only: nothing to contract into an FMA), floored; each of the four corners outside the
// image reads 0, and the weights are applied even to a zero corner so a non-finite position gives NaN on
// both sides. Never allocates, no atomics; the geometry (output size, groups) is resolved on the host by
// deform_geometry.
//
// Macros (chosen by plan_deform_conv2d in conv/deform.py and plan_deform_im2col in conv/deform_im2col.py):
//   PL_T      element type (float, double, __half, __nv_bfloat16)
//   PL_BIAS   1: add b[m] (pl_deform_conv2d)
//   PL_MASK   1: multiply each sample by its mask
//   PL_BLOCK  threads per block
//
// Kernel: pl_deform_conv2d(const T* x, const T* w, const T* offset, const T* b, const T* mask, T* y,
//                          long long n, long long C, long long H, long long W, long long M,
//                          long long Cg, long long Mg, long long G, long long kh, long long kw,
//                          long long oh, long long ow, long long sh, long long sw, long long pt,
//                          long long pl, long long dh, long long dw)
//   x [N, C, H, W], w [M, Cg, kh, kw] (Cg = C / group, Mg = M / group), offset [N, G * 2 * kh * kw, oh, ow]
//   (per offset group, per tap: dy then dx), b [M], mask [N, G * kh * kw, oh, ow] (G offset groups of
//   C / G channels), y [N, M, oh, ow] with n = N * M * oh * ow elements; all contiguous, distinct buffers.
//
// Kernel: pl_deform_im2col(const T* x, const T* offset, const T* mask, T* cols, long long n, long long C,
//                          long long H, long long W, long long G, long long kh, long long kw, long long oh,
//                          long long ow, long long sh, long long sw, long long pt, long long pl,
//                          long long dh, long long dw)
//   x, offset and mask as above, cols [N, C * kh * kw, oh * ow] with n = N * C * kh * kw * oh * ow
//   elements; all contiguous, distinct buffers.
#include "common.cuh"

#ifndef PL_BIAS
#define PL_BIAS 0
#endif
#ifndef PL_MASK
#define PL_MASK 0
#endif

typedef PL_T T;
typedef typename pl_acc<T>::type A;

// x's pixel (r, c) of one plane, 0 outside the image (the comparisons are made on the floored position,
// before any conversion, so a NaN or a huge position reads 0)
__device__ __forceinline__ A pl_pixel(const T* __restrict__ plane, A r, A c, long long H, long long W) {
    const bool inside = r >= (A)0 && r < (A)H && c >= (A)0 && c < (A)W;
    return inside ? pl_to_acc(plane[(long long)r * W + (long long)c]) : (A)0;
}

// The bilinear sample of one plane for tap k (of a kw-wide kernel) of the output pixel whose window
// starts at (top, left), moved by (dy, dx)
__device__ __forceinline__ A pl_deform_sample(const T* __restrict__ plane, A top, A left, A dy, A dx,
                                              long long k, long long kw, long long dh, long long dw,
                                              long long H, long long W) {
    const A py = (top + dy) + (A)((k / kw) * dh);
    const A px = (left + dx) + (A)((k % kw) * dw);
    const A y0 = floor(py), x0 = floor(px);
    const A fy = py - y0, fx = px - x0;
    const A gy = (A)1 - fy, gx = (A)1 - fx;
    const A v00 = pl_pixel(plane, y0, x0, H, W), v01 = pl_pixel(plane, y0, x0 + (A)1, H, W);
    const A v10 = pl_pixel(plane, y0 + (A)1, x0, H, W), v11 = pl_pixel(plane, y0 + (A)1, x0 + (A)1, H, W);
    return gy * (gx * v00 + fx * v01) + fy * (gx * v10 + fx * v11);
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_deform_conv2d(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ offset,
                 const T* __restrict__ b, const T* __restrict__ mask, T* __restrict__ y, long long n,
                 long long C, long long H, long long W, long long M, long long Cg, long long Mg, long long G,
                 long long kh, long long kw, long long oh, long long ow, long long sh, long long sw,
                 long long pt, long long pl, long long dh, long long dw) {
    const long long taps = kh * kw, pixels = oh * ow;
    const long long Co = C / G;  // input channels per offset group (G >= 1)
    PL_FOR_EACH_INDEX(i, n) {
        const long long q = i % pixels;  // oh * ow + ow
        const long long m = (i / pixels) % M;
        const long long batch = i / (pixels * M);
        const A top = (A)((q / ow) * sh - pt), left = (A)((q % ow) * sw - pl);
        const long long first = (m / Mg) * Cg;  // the group's first input channel
        const T* __restrict__ offs = offset + batch * G * 2 * taps * pixels + q;
#if PL_MASK
        const T* __restrict__ masks = mask + batch * G * taps * pixels + q;
#endif
        const T* __restrict__ wm = w + m * Cg * taps;
        A acc = (A)0;
        for (long long ci = 0; ci < Cg; ++ci) {
            const long long c = first + ci;
            const long long g = c / Co;
            const T* __restrict__ plane = x + (batch * C + c) * H * W;
            for (long long k = 0; k < taps; ++k) {
                const A dy = pl_to_acc(offs[((g * taps + k) * 2) * pixels]);
                const A dx = pl_to_acc(offs[((g * taps + k) * 2 + 1) * pixels]);
                A sample = pl_deform_sample(plane, top, left, dy, dx, k, kw, dh, dw, H, W);
#if PL_MASK
                sample *= pl_to_acc(masks[(g * taps + k) * pixels]);
#endif
                acc += sample * pl_to_acc(wm[ci * taps + k]);
            }
        }
#if PL_BIAS
        acc += pl_to_acc(b[m]);
#endif
        y[i] = pl_from<T>(acc);
    }
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_deform_im2col(const T* __restrict__ x, const T* __restrict__ offset, const T* __restrict__ mask,
                 T* __restrict__ cols, long long n, long long C, long long H, long long W, long long G,
                 long long kh, long long kw, long long oh, long long ow, long long sh, long long sw,
                 long long pt, long long pl, long long dh, long long dw) {
    const long long taps = kh * kw, pixels = oh * ow;
    const long long Co = C / G;  // input channels per offset group (G >= 1)
    PL_FOR_EACH_INDEX(i, n) {
        const long long q = i % pixels;  // oh * ow + ow
        const long long k = (i / pixels) % taps;
        const long long c = (i / (pixels * taps)) % C;
        const long long batch = i / (pixels * taps * C);
        const long long g = c / Co;
        const A top = (A)((q / ow) * sh - pt), left = (A)((q % ow) * sw - pl);
        const T* __restrict__ offs = offset + (batch * G * 2 * taps + (g * taps + k) * 2) * pixels + q;
        A sample = pl_deform_sample(x + (batch * C + c) * H * W, top, left, pl_to_acc(offs[0]),
                                    pl_to_acc(offs[pixels]), k, kw, dh, dw, H, W);
#if PL_MASK
        sample *= pl_to_acc(mask[(batch * G * taps + g * taps + k) * pixels + q]);
#endif
        cols[i] = pl_from<T>(sample);
    }
}
