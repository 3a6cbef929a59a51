// PipeLink's top_k (ONNX TopK) along one axis of a contiguous x, seen as [outer, len, inner] around the
// axis: values (PL_T) and indices (int64) of the k first elements of each line in the output order, both
// contiguous [outer, k, inner]. Never allocate; read only inside x.
//
// The output order (pl_topk_before) is total: by value, descending (PL_LARGEST) or ascending, equal values
// by the lower index, and a NaN above every number either way (first among the largest, last among the
// smallest; NaNs among themselves by index), as onnx's reference orders them. -0.0 and +0.0 are equal.
//
// A block per line (a grid-stride loop over the lines). The line is read in windows into PL_SLOTS
// shared slots of (value, index) after the `have` best found so far (at most k); each window is sorted
// together with them (a bitonic sort of the next power of two above the slots in use) and the first k
// kept. Once k are kept, only an element before the k-th enters a window (a warp-aggregated shared
// counter), so on a long line (a 50,257-entry vocabulary) most windows sort a few candidates or none.
// The plan guarantees k <= PL_SLOTS / 2 when len > PL_SLOTS (each window then reads at least
// PL_SLOTS / 2 elements), k <= len, and len below the index type's sentinel.
//
// Macros (chosen by plan_top_k in pipelink/ops/reduce/topk_cuda.py):
//   PL_T           element type (float, double, __half, __nv_bfloat16, signed char, unsigned char, int,
//                  long long); values compare in pl_acc<T> (float for 16-bit types: exact)
//   PL_IS_INT      1 for integer types (no NaN)
//   PL_LARGEST     1: the largest first; 0: the smallest first
//   PL_SLOTS       shared slots (a power of two, 32..4096)
//   PL_WIDE_INDEX  0: indices within a line kept as unsigned short (len < 65535); 1: unsigned int
//   PL_BLOCK       threads per block (a multiple of 32)
//
// Kernel: pl_top_k(const T* x, T* values, long long* indices, long long lines, long long len,
//                  long long inner, long long k)
//   lines = outer * inner. values are copied from x (bit-exact). k = 0 writes nothing.
#include "common.cuh"

#ifndef PL_IS_INT
#define PL_IS_INT 0
#endif
#ifndef PL_LARGEST
#define PL_LARGEST 1
#endif
#ifndef PL_SLOTS
#define PL_SLOTS 4096
#endif
#ifndef PL_WIDE_INDEX
#define PL_WIDE_INDEX 1
#endif

typedef PL_T T;
typedef typename pl_acc<T>::type A;
#if PL_WIDE_INDEX
typedef unsigned int I;
#define PL_NONE 0xffffffffu  // an empty slot: after every element
#else
typedef unsigned short I;
#define PL_NONE ((unsigned short)0xffffu)
#endif

// Whether (va, ia) comes strictly before (vb, ib) in the output order.
__device__ __forceinline__ bool pl_topk_before(A va, I ia, A vb, I ib) {
    if (ia == PL_NONE) return false;
    if (ib == PL_NONE) return true;
#if !PL_IS_INT
    const bool nan_a = va != va, nan_b = vb != vb;
    if (nan_a || nan_b) return nan_a && nan_b ? ia < ib : (PL_LARGEST ? nan_a : nan_b);
#endif
    if (va == vb) return ia < ib;
#if PL_LARGEST
    return va > vb;
#else
    return va < vb;
#endif
}

// Sort the first n slots (a power of two) in the output order; every thread of the block calls it.
__device__ __forceinline__ void pl_topk_bitonic(A* sv, I* si, int n) {
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < (n >> 1); t += PL_BLOCK) {
                const int i = 2 * t - (t & (stride - 1));  // i has bit `stride` clear; its partner i + stride
                const int j = i + stride;
                const A vi = sv[i], vj = sv[j];
                const I ii = si[i], ij = si[j];
                const bool forward = (i & size) == 0;  // this run ascends in the output order
                if (forward ? pl_topk_before(vj, ij, vi, ii) : pl_topk_before(vi, ii, vj, ij)) {
                    sv[i] = vj;
                    sv[j] = vi;
                    si[i] = ij;
                    si[j] = ii;
                }
            }
            __syncthreads();
        }
    }
}

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_top_k(const T* __restrict__ x, T* __restrict__ values, long long* __restrict__ indices, long long lines,
         long long len, long long inner, long long k) {
    __shared__ A sv[PL_SLOTS];
    __shared__ I si[PL_SLOTS];
    __shared__ int s_count;
    if (k <= 0) return;  // uniform: nothing to write
    const int lane = threadIdx.x % PL_WARP;
    for (long long line = blockIdx.x; line < lines; line += gridDim.x) {
        const long long outer = line / inner, in = line - outer * inner;
        const T* xl = x + outer * len * inner + in;
        int have = 0;  // the best elements so far, sorted, in slots [0, have); the same in every thread
        for (long long pos = 0; pos < len;) {
            const long long room = PL_SLOTS - have;
            const int window = (int)(len - pos < room ? len - pos : room);
            const bool full = have == k;  // then only an element before the k-th can enter
            const A tv = full ? sv[k - 1] : A(0);
            const I ti = full ? si[k - 1] : (I)PL_NONE;
            if (threadIdx.x == 0) s_count = 0;
            __syncthreads();
            if (!full) {  // every element of the window enters, in order
                for (int r = threadIdx.x; r < window; r += PL_BLOCK) {
                    sv[have + r] = pl_to_acc(xl[(pos + r) * inner]);
                    si[have + r] = (I)(pos + r);
                }
                if (threadIdx.x == 0) s_count = window;
            } else {
                for (int r0 = 0; r0 < window; r0 += PL_BLOCK) {  // whole warps: the ballot sees all lanes
                    const int r = r0 + threadIdx.x;
                    A v = A(0);
                    bool take = false;
                    if (r < window) {
                        v = pl_to_acc(xl[(pos + r) * inner]);
                        take = pl_topk_before(v, (I)(pos + r), tv, ti);
                    }
                    const unsigned mask = __ballot_sync(PL_FULL_MASK, take);
                    int first = 0;
                    if (lane == 0 && mask) first = atomicAdd(&s_count, __popc(mask));
                    first = __shfl_sync(PL_FULL_MASK, first, 0);
                    if (take) {
                        const int slot = have + first + __popc(mask & ((1u << lane) - 1u));
                        sv[slot] = v;
                        si[slot] = (I)(pos + r);
                    }
                }
            }
            __syncthreads();
            const int total = have + s_count;
            if (total > have) {
                int n = 1;
                while (n < total) n <<= 1;
                for (int s = total + threadIdx.x; s < n; s += PL_BLOCK) {
                    sv[s] = A(0);
                    si[s] = (I)PL_NONE;
                }
                __syncthreads();
                pl_topk_bitonic(sv, si, n);
            }
            have = total < k ? total : (int)k;
            pos += window;
            __syncthreads();  // s_count and the k-th are read before the next window resets them
        }
        for (long long j = threadIdx.x; j < k; j += PL_BLOCK) {
            const long long at = (outer * k + j) * inner + in;
            const long long idx = (long long)si[j];
            values[at] = xl[idx * inner];
            indices[at] = idx;
        }
        __syncthreads();  // the slots are reused by the next line
    }
}
