// PipeLink's pooling over NCHW and NCDHW (max_pool2d, avg_pool2d, max_pool3d, avg_pool3d): one thread per
// output element walks its window's taps. Window geometry (strides, dilations, pads, ceil_mode) is resolved
// on the host by conv/window.py, exactly as for the CPU reference; taps outside the input are skipped,
// never read. One window walk (pl_pool_window, over D x H x W) serves both ranks: the 2-d kernel calls it
// with a unit depth, constants the compiler folds away.
//
// Macros (chosen by plan_pool in pipelink/ops/pool/cuda.py):
//   PL_T          element type (float, double, __half, __nv_bfloat16; signed char / unsigned char for max)
//   PL_NDIM       2 (the kernel pl_pool2d) or 3 (pl_pool3d): the number of spatial axes
//   PL_POOL       PL_POOL_MAX (padding never wins; NaN propagates; a window of padding only gives the
//                 lowest value, as the CPU's padded buffer does) or PL_POOL_AVG
//   PL_IS_INT     1 for the 8-bit integer types (max only: compared exactly in int); PL_LOWEST their
//                 lowest value
//   PL_COUNT_PAD  avg: 1 divides by the taps inside the explicitly padded input (count_include_pad;
//                 never the taps past the pads that ceil_mode adds), 0 by the taps on the input
//   PL_BLOCK      threads per block
//
// Kernels (x contiguous, y contiguous, n = the number of outputs; distinct buffers):
//   pl_pool2d(const T* x, T* y, long long n, long long H, long long W, long long OH, long long OW,
//             int kh, int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pb, int pr)
//     x [N, C, H, W], y [N, C, OH, OW]
//   pl_pool3d(const T* x, T* y, long long n, long long D, long long H, long long W, long long OD,
//             long long OH, long long OW, int kd, int kh, int kw, int sd, int sh, int sw, int dd, int dh,
//             int dw, int pf, int pt, int pl, int pk, int pb, int pr)
//     x [N, C, D, H, W], y [N, C, OD, OH, OW]; pads front, top, left, then back (pk), bottom, right
#include "common.cuh"

#define PL_POOL_MAX 0
#define PL_POOL_AVG 1
#ifndef PL_IS_INT
#define PL_IS_INT 0
#endif
#ifndef PL_COUNT_PAD
#define PL_COUNT_PAD 0
#endif
#ifndef PL_NDIM
#define PL_NDIM 2
#endif

typedef PL_T T;
typedef typename pl_acc<T>::type A;  // int for the 8-bit integers (exact), float or double for floats

// The pooled value of one window of the plane src [D, H, W] whose first tap is (d0, h0, w0), possibly
// on the padding. The begin pads (pf, pt, pl) and end pads (pk, pb, pr) bound the explicitly padded input.
static __device__ __forceinline__ A pl_pool_window(const T* __restrict__ src, long long D, long long H,
                                                   long long W, long long d0, long long h0, long long w0,
                                                   int kd, int kh, int kw, int dd, int dh, int dw, int pf,
                                                   int pt, int pl, int pk, int pb, int pr) {
#if PL_POOL == PL_POOL_MAX
#if PL_IS_INT
    A acc = (A)(PL_LOWEST);
#else
    A acc = pl_neg_inf<A>();
#endif
    const pl_op_max op;
#else
    A acc = A(0);
    int taps = 0;
#endif
    for (int c = 0; c < kd; ++c) {
        const long long id = d0 + (long long)c * dd;
        const bool depth_inside = id >= 0 && id < D;
#if PL_POOL == PL_POOL_AVG && PL_COUNT_PAD
        const bool depth_padded = id >= -pf && id < D + pk;
#endif
        for (int a = 0; a < kh; ++a) {
            const long long ih = h0 + (long long)a * dh;
            const bool row_inside = depth_inside && ih >= 0 && ih < H;
#if PL_POOL == PL_POOL_AVG && PL_COUNT_PAD
            const bool row_padded = depth_padded && ih >= -pt && ih < H + pb;
#endif
            for (int b = 0; b < kw; ++b) {
                const long long iw = w0 + (long long)b * dw;
                const bool inside = row_inside && iw >= 0 && iw < W;
#if PL_POOL == PL_POOL_MAX
                if (inside) acc = op(acc, pl_to_acc(src[(id * H + ih) * W + iw]));
#else
                if (inside) acc += pl_to_acc(src[(id * H + ih) * W + iw]);
#if PL_COUNT_PAD
                taps += (row_padded && iw >= -pl && iw < W + pr) ? 1 : 0;
#else
                taps += inside ? 1 : 0;
#endif
#endif
            }
        }
    }
#if PL_POOL == PL_POOL_AVG
    acc = acc / (A)taps;  // no tap at all: 0 / 0 = NaN, as the reference gives
#endif
    return acc;
}

#if PL_NDIM == 2
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_pool2d(const T* __restrict__ x, T* __restrict__ y, long long n, long long H, long long W, long long OH,
          long long OW, int kh, int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pb, int pr) {
    PL_FOR_EACH_INDEX(i, n) {
        const long long ow = i % OW;
        const long long oh = (i / OW) % OH;
        const long long plane = i / (OW * OH);  // n * C + c
        const A acc = pl_pool_window(x + plane * H * W, 1, H, W, 0, oh * sh - pt, ow * sw - pl, 1, kh, kw, 1,
                                     dh, dw, 0, pt, pl, 0, pb, pr);
        y[i] = pl_from<T>(acc);
    }
}
#elif PL_NDIM == 3
extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_pool3d(const T* __restrict__ x, T* __restrict__ y, long long n, long long D, long long H, long long W,
          long long OD, long long OH, long long OW, int kd, int kh, int kw, int sd, int sh, int sw, int dd,
          int dh, int dw, int pf, int pt, int pl, int pk, int pb, int pr) {
    PL_FOR_EACH_INDEX(i, n) {
        const long long ow = i % OW;
        const long long oh = (i / OW) % OH;
        const long long od = (i / (OW * OH)) % OD;
        const long long plane = i / (OW * OH * OD);  // n * C + c
        const A acc = pl_pool_window(x + plane * D * H * W, D, H, W, od * sd - pf, oh * sh - pt, ow * sw - pl,
                                     kd, kh, kw, dd, dh, dw, pf, pt, pl, pk, pb, pr);
        y[i] = pl_from<T>(acc);
    }
}
#else
#error "PL_NDIM must be 2 or 3"
#endif
