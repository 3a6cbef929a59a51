// PipeLink built-in rotary_embedding (ONNX RotaryEmbedding): each head of x has its first rotary_dim
// elements rotated in rotary_dim / 2 pairs (x1, x2) -> (cos * x1 - sin * x2, sin * x1 + cos * x2), the
// rest copied. Pair k of a head is elements (2k, 2k+1) when interleaved, else (k, k + rotary_dim / 2).
// cos/sin of token (b, s) are row p of the caches: p = position_ids[b, s] (negative counts from the end)
// with position ids, else p = b * S + s (caches [B, S, rotary_dim / 2]). Computed in float (double never:
// no double rotary), rounded once on the store. Never allocate.
//
// Macros (chosen by plan_rotary_embedding in pipelink/ops/rotary/cuda.py):
//   PL_T, PL_BLOCK        element type, threads per block
//   PL_HEADS_OUTER        0/1: x is [B, H, S, D] (1) or [B, S, H * D] (0)
//   PL_INTERLEAVED        0/1: pairs are adjacent elements (1) or the two halves (0)
//   PL_HAS_POSITIONS      0/1: position_ids given (PL_INDEX_T int or long long)
//   PL_INDEX64            0/1: 64-bit index arithmetic (x or a cache has 2^31 elements or more)
// A thread owns one slot of a head: a pair (it writes both of its elements) or a copied element, so it
// reads only what it writes and y may equal x. A position id outside [-max_pos, max_pos) zeroes its
// token's rotated elements (never an out-of-bounds read); then, when `bad` is not 0, the unsigned long
// long at address `bad` is lowered to the id's position b * S + s (atomicMin: the first such position).
//
// Kernel signature:
//   pl_rotary_embedding(const T* x, const T* cos_cache, const T* sin_cache, const INDEX_T* position_ids,
//                       T* y, long long n, long long S, long long H, long long D, long long rotary_dim,
//                       long long max_pos, long long bad)          n = B * S * H * (D - rotary_dim / 2)
#include "common.cuh"

#ifndef PL_HAS_POSITIONS
#define PL_HAS_POSITIONS 0
#endif
#ifndef PL_INDEX_T
#define PL_INDEX_T long long
#endif
typedef PL_T T;

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_rotary_embedding(const T* x, const T* __restrict__ cos_cache, const T* __restrict__ sin_cache,
                    const PL_INDEX_T* __restrict__ position_ids, T* y, long long n, long long S, long long H,
                    long long D, long long rotary_dim, long long max_pos, long long bad) {
    const pl_idx half = (pl_idx)(rotary_dim / 2);
    const pl_idx slots = (pl_idx)D - half;  // pairs, then the copied elements
    PL_FOR_EACH_INDEX(i, n) {
        const pl_idx slot = (pl_idx)i % slots;
        const pl_idx head = (pl_idx)i / slots;  // head rows in x's memory order
        const pl_idx base = head * (pl_idx)D;
        if (slot >= half) {  // past the rotary part: copied
            const pl_idx e = base + (pl_idx)rotary_dim + (slot - half);
            y[e] = x[e];
            continue;
        }
#if PL_HEADS_OUTER
        const pl_idx s = head % (pl_idx)S;
        const pl_idx b = head / (pl_idx)S / (pl_idx)H;
#else
        const pl_idx s = (head / (pl_idx)H) % (pl_idx)S;
        const pl_idx b = head / (pl_idx)H / (pl_idx)S;
#endif
        pl_idx row = b * (pl_idx)S + s;
#if PL_INTERLEAVED
        const pl_idx e1 = base + 2 * slot, e2 = e1 + 1;
#else
        const pl_idx e1 = base + slot, e2 = e1 + half;
#endif
#if PL_HAS_POSITIONS
        long long p = (long long)position_ids[row];
        if (p < 0) p += max_pos;
        if (p < 0 || p >= max_pos) {  // another token's row or past the cache: zeros instead
            y[e1] = pl_from<T>(0.0f);
            y[e2] = pl_from<T>(0.0f);
            if (bad != 0) atomicMin((unsigned long long*)bad, (unsigned long long)row);
            continue;
        }
        row = (pl_idx)p;
#else
        (void)position_ids;
        (void)max_pos;
        (void)bad;
#endif
        const float c = pl_to_acc(cos_cache[row * half + slot]);
        const float sn = pl_to_acc(sin_cache[row * half + slot]);
        const float x1 = pl_to_acc(x[e1]), x2 = pl_to_acc(x[e2]);
        y[e1] = pl_from<T>(c * x1 - sn * x2);
        y[e2] = pl_from<T>(sn * x1 + c * x2);
    }
}
