// PipeLink's resize (ONNX Resize, nearest and linear) over up to 8 axes: one thread per output element.
// Each resized axis maps its output index to an input coordinate in double precision with the formulas
// of resize/__init__.py's source_coordinates (IEEE operations in the same order: the same coordinates);
// nearest rounds it as nearest_mode says, linear blends the two neighbours axis after axis, first
// resized axis first, in the accumulation type (float; double for double), as the CPU reference does.
// Never allocate; every index is clamped into the input.
//
// Macros (chosen by plan_resize in pipelink/ops/resize/cuda.py):
//   PL_T        element type (any numeric type for nearest, floats for linear)
//   PL_NDIM     rank (1..8)
//   PL_LINEAR   0 nearest, 1 linear; PL_NL the number of resized axes under linear (0..8)
//   PL_COORD    PL_COORD_HALF_PIXEL, PL_COORD_PYTORCH_HALF_PIXEL, PL_COORD_ASYMMETRIC,
//               PL_COORD_ALIGN_CORNERS
//   PL_NEAREST  PL_NEAREST_ROUND_PREFER_FLOOR, PL_NEAREST_ROUND_PREFER_CEIL, PL_NEAREST_FLOOR,
//               PL_NEAREST_CEIL
//   PL_BLOCK    threads per block
//
// Kernel: pl_resize(const T* x, T* y, long long n, long long din0..din7, long long dout0..dout7,
//                   double sc0..sc7, int resized)
//   x contiguous with shape din, y contiguous with shape dout (n elements); sc the per-axis scales;
//   bit k of `resized` set when axis k is resampled (else it maps to itself). Distinct buffers.
#include "common.cuh"

#define PL_COORD_HALF_PIXEL 0
#define PL_COORD_PYTORCH_HALF_PIXEL 1
#define PL_COORD_ASYMMETRIC 2
#define PL_COORD_ALIGN_CORNERS 3
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

typedef PL_T T;

// where output index o of an axis of in_size samples the input, for that axis's scale
__device__ __forceinline__ double pl_source_coordinate(long long o, long long in_size, double scale) {
    const double od = (double)o;
#if PL_COORD == PL_COORD_ASYMMETRIC
    (void)in_size;
    return od / scale;
#elif PL_COORD == PL_COORD_ALIGN_CORNERS
    const double length = (double)in_size * scale;
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

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_resize(const T* __restrict__ x, T* __restrict__ y, long long n,
          long long din0, long long din1, long long din2, long long din3,
          long long din4, long long din5, long long din6, long long din7,
          long long dout0, long long dout1, long long dout2, long long dout3,
          long long dout4, long long dout5, long long dout6, long long dout7,
          double sc0, double sc1, double sc2, double sc3, double sc4, double sc5, double sc6, double sc7,
          int resized) {
    const long long din[8] = {din0, din1, din2, din3, din4, din5, din6, din7};
    const long long dout[8] = {dout0, dout1, dout2, dout3, dout4, dout5, dout6, dout7};
    const double sc[8] = {sc0, sc1, sc2, sc3, sc4, sc5, sc6, sc7};
    PL_FOR_EACH_INDEX(i, n) {
        long long rem = i, stride = 1, base = 0;
#if PL_LINEAR
        typedef typename pl_acc<T>::type A;
        long long lo[PL_NL > 0 ? PL_NL : 1], hi[PL_NL > 0 ? PL_NL : 1];
        A w[PL_NL > 0 ? PL_NL : 1];
        int j = PL_NL - 1;  // slot of the next resized axis, walking from the last axis back
#endif
#pragma unroll
        for (int k = PL_NDIM - 1; k >= 0; --k) {
            const long long o = rem % dout[k];
            rem /= dout[k];
            if (resized & (1 << k)) {
                const double c = pl_source_coordinate(o, din[k], sc[k]);
#if PL_LINEAR
                const double top = (double)(din[k] - 1);
                const double cl = c < 0.0 ? 0.0 : (c > top ? top : c);
                const long long l = (long long)floor(cl);
                lo[j] = l * stride;
                hi[j] = (l + 1 < din[k] ? l + 1 : din[k] - 1) * stride;
                w[j] = (A)(cl - (double)l);
                --j;
#else
                base += pl_nearest(c, din[k]) * stride;
#endif
            } else {
                base += o * stride;
            }
            stride *= din[k];
        }
#if PL_LINEAR
        // every corner of the resized axes, then blended pairwise: first resized axis (slot 0) first
        A v[1 << PL_NL];
#pragma unroll
        for (int corner = 0; corner < (1 << PL_NL); ++corner) {
            long long off = base;
#pragma unroll
            for (int s = 0; s < PL_NL; ++s) off += (corner >> s) & 1 ? hi[s] : lo[s];
            v[corner] = pl_to_acc(x[off]);
        }
#pragma unroll
        for (int s = 0; s < PL_NL; ++s) {
#pragma unroll
            for (int c = 0; c < (1 << (PL_NL - s - 1)); ++c) {
                v[c] = v[2 * c] + (v[2 * c + 1] - v[2 * c]) * w[s];
            }
        }
        y[i] = pl_from<T>(v[0]);
#else
        y[i] = x[base];
#endif
    }
}
