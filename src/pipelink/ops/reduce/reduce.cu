// PipeLink's reductions (reduce_sum, reduce_mean, reduce_max) over any set of axes: a strided row
// reduction. Output element `row` (row-major over the kept dims) folds the `count` elements of the
// reduced dims; a group of PL_GROUP threads walks them (consecutive threads take consecutive reduced
// indices, so a reduction over trailing axes reads coalesced) and combines through pl_group_reduce.
// Never allocate; read only inside x.
//
// Macros (chosen by plan_reduce in pipelink/ops/reduce/cuda.py):
//   PL_T          element type (float, double, __half, __nv_bfloat16, signed char, unsigned char, int,
//                 long long)
//   PL_IS_INT     1 for integer types: sum accumulates in unsigned long long (wrapping; the store keeps
//                 the low bits, as NumPy and ONNX give), max in long long; 0 for floats: float (double
//                 for double), max NaN-propagating
//   PL_LOWEST     integers: the lowest value of PL_T (the max of nothing)
//   PL_REDUCE     PL_RED_SUM, PL_RED_MEAN (floats only; 0 / 0 is NaN for an empty reduction), PL_RED_MAX
//   PL_BLOCK      threads per block; PL_GROUP threads per output (32, or PL_BLOCK for long reductions)
//   PL_NDIM_K, PL_NDIM_R  dims (1..8) of the kept and reduced index spaces; PL_INDEX64 0/1 index width
//
// Kernel: pl_reduce(const T* x, T* y, long long rows, long long count, long long dk0..dk7,
//                   long long sk0..sk7, long long dr0..dr7, long long sr0..sr7)
//   y is contiguous [rows]; x[row, r] is at offset(row over dk/sk) + offset(r over dr/sr) (elements).
//   x and y are distinct buffers (__restrict__).
#include "common.cuh"

#define PL_RED_SUM 0
#define PL_RED_MEAN 1
#define PL_RED_MAX 2

#ifndef PL_NDIM_K
#define PL_NDIM_K 8
#endif
#ifndef PL_NDIM_R
#define PL_NDIM_R 8
#endif
#ifndef PL_GROUP
#define PL_GROUP 32
#endif
#ifndef PL_IS_INT
#define PL_IS_INT 0
#endif

typedef PL_T T;
#if PL_IS_INT && PL_REDUCE == PL_RED_MAX
typedef long long A;
#elif PL_IS_INT
typedef unsigned long long A;
#else
typedef typename pl_acc<T>::type A;
#endif

#if PL_REDUCE == PL_RED_MAX
typedef pl_op_max Op;
#else
typedef pl_op_sum Op;
#endif

__device__ __forceinline__ A pl_reduce_identity() {
#if PL_REDUCE == PL_RED_MAX && PL_IS_INT
    return (A)(PL_LOWEST);
#elif PL_REDUCE == PL_RED_MAX
    return pl_neg_inf<A>();
#else
    return A(0);
#endif
}

__device__ __forceinline__ A pl_reduce_load(T v) {
#if PL_IS_INT
    return (A)v;
#else
    return pl_to_acc(v);
#endif
}

__device__ __forceinline__ T pl_reduce_store(A v, long long count) {
#if PL_REDUCE == PL_RED_MEAN
    v = v / (A)count;
#else
    (void)count;
#endif
#if PL_IS_INT
    return (T)v;
#else
    return pl_from<T>(v);
#endif
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_reduce(const T* __restrict__ x, T* __restrict__ y, long long rows, long long count,
          long long dk0, long long dk1, long long dk2, long long dk3,
          long long dk4, long long dk5, long long dk6, long long dk7,
          long long sk0, long long sk1, long long sk2, long long sk3,
          long long sk4, long long sk5, long long sk6, long long sk7,
          long long dr0, long long dr1, long long dr2, long long dr3,
          long long dr4, long long dr5, long long dr6, long long dr7,
          long long sr0, long long sr1, long long sr2, long long sr3,
          long long sr4, long long sr5, long long sr6, long long sr7) {
    constexpr int ROWS_PER_BLOCK = PL_BLOCK / PL_GROUP;
    __shared__ A smem[PL_BLOCK / PL_WARP];
    const long long dk[8] = {dk0, dk1, dk2, dk3, dk4, dk5, dk6, dk7};
    const long long sk[1][8] = {{sk0, sk1, sk2, sk3, sk4, sk5, sk6, sk7}};
    const long long dr[8] = {dr0, dr1, dr2, dr3, dr4, dr5, dr6, dr7};
    const long long sr[1][8] = {{sr0, sr1, sr2, sr3, sr4, sr5, sr6, sr7}};
    const int lane = threadIdx.x % PL_GROUP;
    const Op op;
    // every thread of the block runs the same iterations: pl_group_reduce may synchronise the block
    for (long long first = (long long)blockIdx.x * ROWS_PER_BLOCK; first < rows;
         first += (long long)gridDim.x * ROWS_PER_BLOCK) {
        const long long row = first + threadIdx.x / PL_GROUP;
        A acc = pl_reduce_identity();
        if (row < rows) {
            pl_idx base[1];
            pl_strided_offsets<PL_NDIM_K, 1>((pl_idx)row, dk, sk, base);
            for (long long r = lane; r < count; r += PL_GROUP) {
                pl_idx off[1];
                pl_strided_offsets<PL_NDIM_R, 1>((pl_idx)r, dr, sr, off);
                acc = op(acc, pl_reduce_load(x[base[0] + off[0]]));
            }
        }
        acc = pl_group_reduce<PL_GROUP>(acc, op, smem);
        if (row < rows && lane == 0) y[row] = pl_reduce_store(acc, count);
    }
}
