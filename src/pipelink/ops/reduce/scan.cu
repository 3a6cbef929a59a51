// PipeLink's cumulative sum and product (cumsum, cumprod; ONNX CumSum, CumProd) along one axis of a
// contiguous x, into a contiguous y of the same shape, seen as [outer, len, inner] around the axis. Never
// allocate; read only inside x.
//
// Macros (chosen by plan_scan in pipelink/ops/reduce/cuda.py):
//   PL_SCAN       PL_SCAN_SUM or PL_SCAN_PROD: the combining operation (identity 0 or 1)
//   PL_T          element type (float, double, __half, __nv_bfloat16, signed char, unsigned char, int,
//                 long long)
//   PL_IS_INT     1 for integer types: the scan runs in unsigned long long (wrapping; the store keeps the
//                 low bits, as NumPy and ONNX give: sums and products modulo 2^64 keep them exact); 0 for
//                 floats: float (double for double), one rounding to PL_T per output
//   PL_EXCLUSIVE  1: y at k combines the elements before k (the first is the identity); 0: up to k
//   PL_REVERSE    1: the scan runs from the end of the axis
//   PL_WARP_SCAN  1 (inner == 1, a contiguous line): a warp per line, tiles of 32 elements scanned with
//                 shuffles and a carry between tiles (coalesced); 0: a thread per line, walking the axis
//                 (consecutive threads take consecutive inner indices: coalesced)
//   PL_BLOCK      threads per block (a multiple of 32)
//
// Kernel: pl_scan(const T* x, T* y, long long lines, long long len, long long inner)
//   lines = outer * inner; x and y are distinct buffers (__restrict__). Floats may differ from a
//   sequential scan in the last bits with PL_WARP_SCAN (a tree inside each tile), never in order of
//   magnitude; integers are exact.
#include "common.cuh"

#define PL_SCAN_SUM 0
#define PL_SCAN_PROD 1
#ifndef PL_SCAN
#define PL_SCAN PL_SCAN_SUM
#endif

#ifndef PL_IS_INT
#define PL_IS_INT 0
#endif
#ifndef PL_EXCLUSIVE
#define PL_EXCLUSIVE 0
#endif
#ifndef PL_REVERSE
#define PL_REVERSE 0
#endif
#ifndef PL_WARP_SCAN
#define PL_WARP_SCAN 0
#endif

typedef PL_T T;
#if PL_IS_INT
typedef unsigned long long A;
#else
typedef typename pl_acc<T>::type A;
#endif

__device__ __forceinline__ A pl_scan_load(T v) {
#if PL_IS_INT
    return (A)(long long)v;
#else
    return pl_to_acc(v);
#endif
}

__device__ __forceinline__ T pl_scan_store(A v) {
#if PL_IS_INT
    return (T)(long long)v;
#else
    return pl_from<T>(v);
#endif
}

#if PL_SCAN == PL_SCAN_PROD
__device__ __forceinline__ A pl_scan_identity() { return A(1); }
__device__ __forceinline__ A pl_scan_op(A a, A b) { return a * b; }
#else
__device__ __forceinline__ A pl_scan_identity() { return A(0); }
__device__ __forceinline__ A pl_scan_op(A a, A b) { return a + b; }
#endif

// the k-th element of a line in scan order
__device__ __forceinline__ long long pl_scan_pos(long long k, long long len) {
    return PL_REVERSE ? len - 1 - k : k;
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_scan(const T* __restrict__ x, T* __restrict__ y, long long lines, long long len, long long inner) {
#if PL_WARP_SCAN
    (void)inner;  // 1
    constexpr int WARPS = PL_BLOCK / PL_WARP;
    const int lane = threadIdx.x % PL_WARP;
    // the line is warp-uniform, so every lane of a warp runs the same iterations (full-mask shuffles)
    for (long long line = (long long)blockIdx.x * WARPS + threadIdx.x / PL_WARP; line < lines;
         line += (long long)gridDim.x * WARPS) {
        const long long base = line * len;
        A carry = pl_scan_identity();
        for (long long tile = 0; tile < len; tile += PL_WARP) {
            const long long k = tile + lane;
            const long long at = base + pl_scan_pos(k, len);
            const A v = k < len ? pl_scan_load(x[at]) : pl_scan_identity();
            A s = v;  // inclusive scan of the tile
#pragma unroll
            for (int offset = 1; offset < PL_WARP; offset <<= 1) {
                const A o = __shfl_up_sync(PL_FULL_MASK, s, offset, PL_WARP);
                if (lane >= offset) s = pl_scan_op(o, s);
            }
            const A total = __shfl_sync(PL_FULL_MASK, s, PL_WARP - 1, PL_WARP);
#if PL_EXCLUSIVE
            const A before = __shfl_up_sync(PL_FULL_MASK, s, 1, PL_WARP);
            s = lane == 0 ? pl_scan_identity() : before;
#endif
            if (k < len) y[at] = pl_scan_store(pl_scan_op(carry, s));
            carry = pl_scan_op(carry, total);
        }
    }
#else
    for (long long line = (long long)blockIdx.x * PL_BLOCK + threadIdx.x; line < lines;
         line += (long long)gridDim.x * PL_BLOCK) {
        const long long outer = line / inner;
        const long long base = outer * len * inner + (line - outer * inner);
        A acc = pl_scan_identity();
        for (long long k = 0; k < len; ++k) {
            const long long at = base + pl_scan_pos(k, len) * inner;
            const A v = pl_scan_load(x[at]);
#if PL_EXCLUSIVE
            y[at] = pl_scan_store(acc);
            acc = pl_scan_op(acc, v);
#else
            acc = pl_scan_op(acc, v);
            y[at] = pl_scan_store(acc);
#endif
        }
    }
#endif
}
