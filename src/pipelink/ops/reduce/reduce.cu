// PipeLink's reductions (reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod) over any set of
// axes, and
// argmax / argmin / hardmax over one axis (pl_arg_reduce, compiled instead when PL_ARG is set): a strided
// row reduction. Output element `row` (row-major over the kept dims) folds the `count` elements of the
// reduced dims; a group of PL_GROUP threads walks them (consecutive threads take consecutive reduced
// indices, so a reduction over trailing axes reads coalesced) and combines through pl_group_reduce.
// Never allocate; read only inside x.
//
// Macros (chosen by plan_reduce in pipelink/ops/reduce/cuda.py):
//   PL_T          element type (float, double, __half, __nv_bfloat16, the integers signed char, short,
//                 int, long long and their unsigned types; bool for max and min)
//   PL_IS_INT     1 for integer types and bool: sum and product accumulate in unsigned long long
//                 (wrapping; the store keeps the low bits, as NumPy and ONNX give), max and min in long
//                 long (unsigned long long for uint64: pl_int_key); 0 for floats: float (double for
//                 double), max and min NaN-propagating
//   PL_LOWEST     integers: the lowest value of PL_T (the max of nothing)
//   PL_HIGHEST    integers: the highest value of PL_T (the min of nothing)
//   PL_REDUCE     PL_RED_SUM, PL_RED_MEAN (floats only; 0 / 0 is NaN for an empty reduction), PL_RED_MAX,
//                 PL_RED_MIN, PL_RED_PROD (1 for an empty reduction)
//   PL_BLOCK      threads per block; PL_GROUP threads per output (32, or PL_BLOCK for long reductions)
//   PL_NDIM_K, PL_NDIM_R  dims (1..8) of the kept and reduced index spaces; PL_INDEX64 0/1 index width
//
// Kernel: pl_reduce(const T* x, T* y, long long rows, long long count, long long dk0..dk7,
//                   long long sk0..sk7, long long dr0..dr7, long long sr0..sr7)
//   y is contiguous [rows]; x[row, r] is at offset(row over dk/sk) + offset(r over dr/sr) (elements).
//   x and y are distinct buffers (__restrict__).
//
// With PL_ARG (PL_ARG_MAX or PL_ARG_MIN, set by plan_arg_reduce) the file holds pl_arg_reduce instead:
//   PL_T, PL_IS_INT, PL_BLOCK, PL_GROUP, PL_NDIM_K, PL_NDIM_R, PL_INDEX64 as above (PL_NDIM_R is 1: one
//   axis); PL_LAST 1: ties go to the last index (select_last_index), 0: to the first
//   PL_ONE_HOT    1 (hardmax, floats, PL_ARG_MAX): y has x's shape and type; each group writes its whole
//                 line, 1 at the index of the extreme and 0 elsewhere (nothing for an empty line)
// Kernel: pl_arg_reduce(const T* x, long long* y, ...the arguments of pl_reduce...)  (T* y with PL_ONE_HOT)
//   y[row] = the index r in [0, count) of the extreme of x[row, r]: values compare in long long
//   (integers; unsigned long long for uint64) or in float / double (exact for 16-bit types); a NaN beats every number (np.argmax /
//   np.argmin); equal values, and NaNs among themselves, go to the lower index (the higher with
//   PL_LAST). That order is total, so the tree of pl_arg_group gives the sequential answer whatever
//   the geometry: deterministic. count >= 1 (the plan refuses an empty axis).
#include "common.cuh"

#define PL_RED_SUM 0
#define PL_RED_MEAN 1
#define PL_RED_MAX 2
#define PL_RED_PROD 3
#define PL_RED_MIN 4

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

// The type integers (and bool) compare in: long long holds every value but uint64's.
template <class T> struct pl_int_key { typedef long long type; };
template <> struct pl_int_key<unsigned long long> { typedef unsigned long long type; };

#ifndef PL_ARG  // the value reductions
typedef PL_T T;
#if PL_IS_INT && (PL_REDUCE == PL_RED_MAX || PL_REDUCE == PL_RED_MIN)
typedef typename pl_int_key<T>::type A;
#elif PL_IS_INT
typedef unsigned long long A;
#else
typedef typename pl_acc<T>::type A;
#endif

struct pl_op_prod {
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a * b; }
};

struct pl_op_min {
    // NaN-propagating minimum
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return (a != a || a < b) ? a : b; }
};

#if PL_REDUCE == PL_RED_MAX
typedef pl_op_max Op;
#elif PL_REDUCE == PL_RED_MIN
typedef pl_op_min Op;
#elif PL_REDUCE == PL_RED_PROD
typedef pl_op_prod Op;
#else
typedef pl_op_sum Op;
#endif

__device__ __forceinline__ A pl_reduce_identity() {
#if PL_REDUCE == PL_RED_MAX && PL_IS_INT
    return (A)(PL_LOWEST);
#elif PL_REDUCE == PL_RED_MAX
    return pl_neg_inf<A>();
#elif PL_REDUCE == PL_RED_MIN && PL_IS_INT
    return (A)(PL_HIGHEST);
#elif PL_REDUCE == PL_RED_MIN
    return -pl_neg_inf<A>();
#elif PL_REDUCE == PL_RED_PROD
    return A(1);
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
#else  // PL_ARG: argmax / argmin
#define PL_ARG_MAX 0
#define PL_ARG_MIN 1
#ifndef PL_LAST
#define PL_LAST 0
#endif
#ifndef PL_ONE_HOT
#define PL_ONE_HOT 0
#endif

typedef PL_T T;
#if PL_IS_INT
typedef typename pl_int_key<T>::type A;  // every integer value of PL_T is exact in it
#else
typedef typename pl_acc<T>::type A;  // float for 16-bit types (exact), double for double
#endif
#if PL_ONE_HOT
typedef T Y;  // hardmax: x's type and shape
#else
typedef long long Y;  // the index
#endif

__device__ __forceinline__ A pl_arg_load(T v) {
#if PL_IS_INT
    return (A)v;
#else
    return pl_to_acc(v);
#endif
}

// Whether candidate (va, ia) is kept over (vb, ib). An index < 0 is no candidate (a lane that saw no
// element), which loses to any.
__device__ __forceinline__ bool pl_arg_wins(A va, long long ia, A vb, long long ib) {
    if (ia < 0 || ib < 0) return ib < 0;
    const bool tie_to_a = PL_LAST ? ia > ib : ia < ib;
#if !PL_IS_INT
    const bool nan_a = va != va, nan_b = vb != vb;
    if (nan_a || nan_b) return nan_a && nan_b ? tie_to_a : nan_a;
#endif
    if (va == vb) return tie_to_a;
#if PL_ARG == PL_ARG_MAX
    return va > vb;
#else
    return va < vb;
#endif
}

// pl_group_reduce for a (value, index) pair: the best candidate of each aligned group of GROUP threads,
// in every thread of it. GROUP > 32: every thread of the block must call it (it synchronises).
template <int GROUP>
__device__ __forceinline__ void pl_arg_group(A& v, long long& i, A* smem_v, long long* smem_i) {
    constexpr int WIDTH = GROUP < PL_WARP ? GROUP : PL_WARP;
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) {
        const A ov = __shfl_xor_sync(PL_FULL_MASK, v, offset, PL_WARP);
        const long long oi = __shfl_xor_sync(PL_FULL_MASK, i, offset, PL_WARP);
        if (!pl_arg_wins(v, i, ov, oi)) {
            v = ov;
            i = oi;
        }
    }
    if constexpr (GROUP > PL_WARP) {
        constexpr int WARPS = GROUP / PL_WARP;
        const int warp = threadIdx.x / PL_WARP;
        if (threadIdx.x % PL_WARP == 0) {
            smem_v[warp] = v;
            smem_i[warp] = i;
        }
        __syncthreads();
        const int first = (warp / WARPS) * WARPS;
        v = smem_v[first];
        i = smem_i[first];
#pragma unroll
        for (int w = 1; w < WARPS; ++w) {
            if (!pl_arg_wins(v, i, smem_v[first + w], smem_i[first + w])) {
                v = smem_v[first + w];
                i = smem_i[first + w];
            }
        }
        __syncthreads();  // the arrays may be reused by the next row
    } else {
        (void)smem_v;
        (void)smem_i;
    }
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_arg_reduce(const T* __restrict__ x, Y* __restrict__ y, long long rows, long long count,
              long long dk0, long long dk1, long long dk2, long long dk3,
              long long dk4, long long dk5, long long dk6, long long dk7,
              long long sk0, long long sk1, long long sk2, long long sk3,
              long long sk4, long long sk5, long long sk6, long long sk7,
              long long dr0, long long dr1, long long dr2, long long dr3,
              long long dr4, long long dr5, long long dr6, long long dr7,
              long long sr0, long long sr1, long long sr2, long long sr3,
              long long sr4, long long sr5, long long sr6, long long sr7) {
    constexpr int ROWS_PER_BLOCK = PL_BLOCK / PL_GROUP;
    __shared__ A smem_v[PL_BLOCK / PL_WARP];
    __shared__ long long smem_i[PL_BLOCK / PL_WARP];
    const long long dk[8] = {dk0, dk1, dk2, dk3, dk4, dk5, dk6, dk7};
    const long long sk[1][8] = {{sk0, sk1, sk2, sk3, sk4, sk5, sk6, sk7}};
    const long long dr[8] = {dr0, dr1, dr2, dr3, dr4, dr5, dr6, dr7};
    const long long sr[1][8] = {{sr0, sr1, sr2, sr3, sr4, sr5, sr6, sr7}};
    const int lane = threadIdx.x % PL_GROUP;
    // every thread of the block runs the same iterations: pl_arg_group may synchronise the block
    for (long long first = (long long)blockIdx.x * ROWS_PER_BLOCK; first < rows;
         first += (long long)gridDim.x * ROWS_PER_BLOCK) {
        const long long row = first + threadIdx.x / PL_GROUP;
        A best = A(0);
        long long best_i = -1;
        if (row < rows) {
            pl_idx base[1];
            pl_strided_offsets<PL_NDIM_K, 1>((pl_idx)row, dk, sk, base);
            // one axis: the reduced index r is the index along it
            for (long long r = lane; r < count; r += PL_GROUP) {
                pl_idx off[1];
                pl_strided_offsets<PL_NDIM_R, 1>((pl_idx)r, dr, sr, off);
                const A v = pl_arg_load(x[base[0] + off[0]]);
                if (pl_arg_wins(v, r, best, best_i)) {
                    best = v;
                    best_i = r;
                }
            }
        }
        pl_arg_group<PL_GROUP>(best, best_i, smem_v, smem_i);
#if PL_ONE_HOT
        if (row < rows) {  // every lane of the group holds the line's best index
            pl_idx base[1];
            pl_strided_offsets<PL_NDIM_K, 1>((pl_idx)row, dk, sk, base);
            for (long long r = lane; r < count; r += PL_GROUP) {
                pl_idx off[1];
                pl_strided_offsets<PL_NDIM_R, 1>((pl_idx)r, dr, sr, off);
                y[base[0] + off[0]] = pl_from<T>(r == best_i ? A(1) : A(0));
            }
        }
#else
        if (row < rows && lane == 0) y[row] = best_i;
#endif
    }
}
#endif  // PL_ARG
