// PipeLink's 2-d pooling over NCHW (max_pool2d, avg_pool2d): one thread per output element walks its
// window's kH x kW taps. Window geometry (strides, dilations, pads, ceil_mode) is resolved on the host
// by conv/window.py, exactly as for the CPU reference; taps outside the input are skipped, never read.
//
// Macros (chosen by plan_pool2d in pipelink/ops/pool/cuda.py):
//   PL_T          element type (float, double, __half, __nv_bfloat16; signed char / unsigned char for max)
//   PL_POOL       PL_POOL_MAX (padding never wins; NaN propagates; a window of padding only gives the
//                 lowest value, as the CPU's padded buffer does) or PL_POOL_AVG
//   PL_IS_INT     1 for the 8-bit integer types (max only: compared exactly in int); PL_LOWEST their
//                 lowest value
//   PL_COUNT_PAD  avg: 1 divides by the taps inside the explicitly padded input (count_include_pad;
//                 never the taps past the pads that ceil_mode adds), 0 by the taps on the input
//   PL_BLOCK      threads per block
//
// Kernel: pl_pool2d(const T* x, T* y, long long n, long long H, long long W, long long OH, long long OW,
//                   int kh, int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pb, int pr)
//   x contiguous [N, C, H, W], y contiguous [N, C, OH, OW], n = N * C * OH * OW. Distinct buffers.
#include "common.cuh"

#define PL_POOL_MAX 0
#define PL_POOL_AVG 1
#ifndef PL_IS_INT
#define PL_IS_INT 0
#endif
#ifndef PL_COUNT_PAD
#define PL_COUNT_PAD 0
#endif

typedef PL_T T;
typedef typename pl_acc<T>::type A;  // int for the 8-bit integers (exact), float or double for floats

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_pool2d(const T* __restrict__ x, T* __restrict__ y, long long n, long long H, long long W, long long OH,
          long long OW, int kh, int kw, int sh, int sw, int dh, int dw, int pt, int pl, int pb, int pr) {
    PL_FOR_EACH_INDEX(i, n) {
        const long long ow = i % OW;
        const long long oh = (i / OW) % OH;
        const long long plane = i / (OW * OH);  // n * C + c
        const T* __restrict__ src = x + plane * H * W;
        const long long h0 = oh * sh - pt, w0 = ow * sw - pl;
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
        for (int a = 0; a < kh; ++a) {
            const long long ih = h0 + (long long)a * dh;
#if PL_POOL == PL_POOL_AVG && PL_COUNT_PAD
            const bool row_padded = ih >= -pt && ih < H + pb;
#endif
            for (int b = 0; b < kw; ++b) {
                const long long iw = w0 + (long long)b * dw;
                const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
#if PL_POOL == PL_POOL_MAX
                if (inside) {
                    acc = op(acc, pl_to_acc(src[ih * W + iw]));
                }
#else
                if (inside) acc += pl_to_acc(src[ih * W + iw]);
#if PL_COUNT_PAD
                taps += (row_padded && iw >= -pl && iw < W + pr) ? 1 : 0;
#else
                taps += inside ? 1 : 0;
#endif
#endif
            }
        }
#if PL_POOL == PL_POOL_AVG
        acc = acc / (A)taps;  // no tap at all: 0 / 0 = NaN, as the reference gives
#endif
        y[i] = pl_from<T>(acc);
    }
}
