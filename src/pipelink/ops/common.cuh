// The one header of PipeLink's CUDA kernels (pipelink/ops/*/*.cu and the CUDA backend's helpers.cu):
// element types, float conversion, 16-byte vector access, the grid-stride loops, stride decoding and
// warp/block reductions. Device code only: it must never allocate, touch the default stream, or depend
// on any header NVRTC cannot find by itself.
//
// Compiles with nvcc and with NVRTC (with or without the CUDA include folder on the path):
// when <cuda_fp16.h> / <cuda_bf16.h> are reachable they define __half / __nv_bfloat16; otherwise
// minimal 16-bit storage types of the same names are defined here. All conversions go through
// PTX `cvt` on the raw bits, so the numerics are identical on both paths.
#pragma once

#if defined(__has_include) && !defined(PL_NO_CUDA_HEADERS)
#if __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>)
#define PL_HAVE_CUDA_FP16_HEADERS 1
#endif
#endif

#if defined(PL_HAVE_CUDA_FP16_HEADERS)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ __forceinline__ unsigned short pl_bits(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ unsigned short pl_bits(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }
__device__ __forceinline__ __half pl_half_from_bits(unsigned short b) { return __ushort_as_half(b); }
__device__ __forceinline__ __nv_bfloat16 pl_bf16_from_bits(unsigned short b) { return __ushort_as_bfloat16(b); }
#else
struct __align__(2) __half { unsigned short __x; };
struct __align__(2) __nv_bfloat16 { unsigned short __x; };
__device__ __forceinline__ unsigned short pl_bits(__half h) { return h.__x; }
__device__ __forceinline__ unsigned short pl_bits(__nv_bfloat16 h) { return h.__x; }
__device__ __forceinline__ __half pl_half_from_bits(unsigned short b) { __half h; h.__x = b; return h; }
__device__ __forceinline__ __nv_bfloat16 pl_bf16_from_bits(unsigned short b) {
    __nv_bfloat16 h; h.__x = b; return h;
}
#endif

// Launch-shape macros a plan always sets (pipelink/ops/<family>/cuda.py); these defaults only let a
// source compile on its own.
#ifndef PL_BLOCK
#define PL_BLOCK 256  // threads per block: the launch must use exactly this many
#endif
#ifndef PL_VEC
#define PL_VEC 1  // elements per vector access
#endif
#ifndef PL_UNROLL
#define PL_UNROLL 1  // vectors in flight per thread per grid-stride step
#endif
#ifndef PL_ONE_PASS
#define PL_ONE_PASS 0  // 1 when the grid covers every vector once at PL_UNROLL 1 and n < 2^31 (pl_vector_loop)
#endif
#ifndef PL_INDEX64
#define PL_INDEX64 1  // 0 when the plan proved every index and offset of a strided walk is below 2^31
#endif

#define PL_WARP 32
#define PL_FULL_MASK 0xffffffffu

// ---------------------------------------------------------------------------------------------
// Accumulation type: float for float/half/bfloat16, double for double, int for the 8- and 16-bit
// integers and int32, long long for int64, the type itself for uint32 and uint64 (whose values an int
// or a long long would not hold: comparisons, remainders and right shifts stay unsigned).
// ---------------------------------------------------------------------------------------------
template <class T> struct pl_acc { typedef float type; };
template <> struct pl_acc<double> { typedef double type; };
template <> struct pl_acc<signed char> { typedef int type; };
template <> struct pl_acc<unsigned char> { typedef int type; };
template <> struct pl_acc<short> { typedef int type; };
template <> struct pl_acc<unsigned short> { typedef int type; };
template <> struct pl_acc<int> { typedef int type; };
template <> struct pl_acc<long long> { typedef long long type; };
template <> struct pl_acc<unsigned int> { typedef unsigned int type; };
template <> struct pl_acc<unsigned long long> { typedef unsigned long long type; };

// ---------------------------------------------------------------------------------------------
// Conversions. to float: exact for every 16-bit value. from float: round to nearest even.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float pl_f16_bits_to_float(unsigned short b) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
    return f;
}
__device__ __forceinline__ float pl_bf16_bits_to_float(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short pl_float_to_f16_bits(float f) {
    unsigned short b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}
__device__ __forceinline__ unsigned short pl_float_to_bf16_bits(float f) {
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}
// double -> float rounding to odd: a following round-to-nearest to a narrower type (<= 22 bits of
// significand) is then the correctly rounded double -> narrow conversion (no double rounding).
__device__ __forceinline__ float pl_double_to_float_odd(double d) {
    float f = __double2float_rz(d);
    if ((double)f != d && f == f) {
        f = __uint_as_float(__float_as_uint(f) | 1u);
    }
    return f;
}

// to the accumulation type
__device__ __forceinline__ float pl_to_acc(float x) { return x; }
__device__ __forceinline__ double pl_to_acc(double x) { return x; }
__device__ __forceinline__ float pl_to_acc(__half x) { return pl_f16_bits_to_float(pl_bits(x)); }
__device__ __forceinline__ float pl_to_acc(__nv_bfloat16 x) { return pl_bf16_bits_to_float(pl_bits(x)); }
__device__ __forceinline__ int pl_to_acc(signed char x) { return (int)x; }
__device__ __forceinline__ int pl_to_acc(unsigned char x) { return (int)x; }
__device__ __forceinline__ int pl_to_acc(short x) { return (int)x; }
__device__ __forceinline__ int pl_to_acc(unsigned short x) { return (int)x; }
__device__ __forceinline__ int pl_to_acc(int x) { return x; }
__device__ __forceinline__ long long pl_to_acc(long long x) { return x; }
__device__ __forceinline__ unsigned int pl_to_acc(unsigned int x) { return x; }
__device__ __forceinline__ unsigned long long pl_to_acc(unsigned long long x) { return x; }

// from float or double to any element type: pl_from<T>(value)
template <class T> struct pl_convert;
template <> struct pl_convert<float> {
    static __device__ __forceinline__ float from(float x) { return x; }
    static __device__ __forceinline__ float from(double x) { return (float)x; }
};
template <> struct pl_convert<double> {
    static __device__ __forceinline__ double from(float x) { return (double)x; }
    static __device__ __forceinline__ double from(double x) { return x; }
};
template <> struct pl_convert<__half> {
    static __device__ __forceinline__ __half from(float x) { return pl_half_from_bits(pl_float_to_f16_bits(x)); }
    static __device__ __forceinline__ __half from(double x) {
        return pl_half_from_bits(pl_float_to_f16_bits(pl_double_to_float_odd(x)));
    }
};
template <> struct pl_convert<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from(float x) {
        return pl_bf16_from_bits(pl_float_to_bf16_bits(x));
    }
    static __device__ __forceinline__ __nv_bfloat16 from(double x) {
        return pl_bf16_from_bits(pl_float_to_bf16_bits(pl_double_to_float_odd(x)));
    }
};
// 8-bit integers keep the low 8 bits of the int result: two's-complement wrap-around, like NumPy
template <> struct pl_convert<signed char> {
    static __device__ __forceinline__ signed char from(int x) { return (signed char)(x & 0xff); }
};
template <> struct pl_convert<unsigned char> {
    static __device__ __forceinline__ unsigned char from(int x) { return (unsigned char)(x & 0xff); }
};
// 16-bit integers likewise keep the low 16 bits
template <> struct pl_convert<short> {
    static __device__ __forceinline__ short from(int x) { return (short)(x & 0xffff); }
};
template <> struct pl_convert<unsigned short> {
    static __device__ __forceinline__ unsigned short from(int x) { return (unsigned short)(x & 0xffff); }
};
template <> struct pl_convert<int> {
    static __device__ __forceinline__ int from(int x) { return x; }
};
template <> struct pl_convert<long long> {
    static __device__ __forceinline__ long long from(long long x) { return x; }
};
template <> struct pl_convert<unsigned int> {
    static __device__ __forceinline__ unsigned int from(unsigned int x) { return x; }
};
template <> struct pl_convert<unsigned long long> {
    static __device__ __forceinline__ unsigned long long from(unsigned long long x) { return x; }
};
template <class T, class A> __device__ __forceinline__ T pl_from(A x) { return pl_convert<T>::from(x); }

// ---------------------------------------------------------------------------------------------
// Vector access: N elements of T in one aligned transaction (N * sizeof(T) in {1..16} bytes).
// The caller guarantees the address is a multiple of N * sizeof(T).
// ---------------------------------------------------------------------------------------------
template <class T, int N> struct alignas(sizeof(T) * N) pl_vec {
    T v[N];
};

template <class T, int N>
__device__ __forceinline__ pl_vec<T, N> pl_load(const T* __restrict__ p) {
    return *reinterpret_cast<const pl_vec<T, N>*>(p);
}
template <class T, int N>
__device__ __forceinline__ void pl_store(T* __restrict__ p, const pl_vec<T, N>& v) {
    *reinterpret_cast<pl_vec<T, N>*>(p) = v;
}
// load N elements and widen them to the accumulation type
template <class T, int N>
__device__ __forceinline__ void pl_load_acc(const T* __restrict__ p, typename pl_acc<T>::type (&out)[N]) {
    pl_vec<T, N> v = pl_load<T, N>(p);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = pl_to_acc(v.v[i]);
}
// narrow N accumulation values to T and store them
template <class T, int N>
__device__ __forceinline__ void pl_store_acc(T* __restrict__ p, const typename pl_acc<T>::type (&in)[N]) {
    pl_vec<T, N> v;
#pragma unroll
    for (int i = 0; i < N; ++i) v.v[i] = pl_from<T>(in[i]);
    pl_store<T, N>(p, v);
}

// ---------------------------------------------------------------------------------------------
// Reductions. pl_group_sum / pl_group_max reduce over aligned groups of GROUP consecutive threads
// (GROUP a power of two, or a multiple of 32 up to the block size). For GROUP > 32 every thread
// of the block must call them (they use __syncthreads) with `smem` of PL_BLOCK / 32 entries.
// ---------------------------------------------------------------------------------------------
template <class A> __device__ __forceinline__ A pl_neg_inf();
template <> __device__ __forceinline__ float pl_neg_inf<float>() { return __uint_as_float(0xff800000u); }
template <> __device__ __forceinline__ double pl_neg_inf<double>() {
    return __longlong_as_double(0xfff0000000000000LL);
}

struct pl_op_sum {
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const { return a + b; }
};
struct pl_op_max {
    // NaN-propagating maximum
    template <class A> __device__ __forceinline__ A operator()(A a, A b) const {
        return (a != a || a > b) ? a : b;
    }
};

template <int WIDTH, class A, class Op> __device__ __forceinline__ A pl_warp_reduce(A v, Op op) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) {
        v = op(v, __shfl_xor_sync(PL_FULL_MASK, v, offset, PL_WARP));
    }
    return v;
}

template <int GROUP, class A, class Op> __device__ __forceinline__ A pl_group_reduce(A v, Op op, A* smem) {
    if constexpr (GROUP <= PL_WARP) {
        (void)smem;
        return pl_warp_reduce<GROUP>(v, op);
    } else {
        constexpr int WARPS = GROUP / PL_WARP;
        const int warp = threadIdx.x / PL_WARP;
        const int lane = threadIdx.x % PL_WARP;
        v = pl_warp_reduce<PL_WARP>(v, op);
        if (lane == 0) smem[warp] = v;
        __syncthreads();
        const int first = (warp / WARPS) * WARPS;
        A r = smem[first];
#pragma unroll
        for (int w = 1; w < WARPS; ++w) r = op(r, smem[first + w]);
        __syncthreads();  // smem may be reused by the next reduction
        return r;
    }
}
template <int GROUP, class A> __device__ __forceinline__ A pl_group_sum(A v, A* smem) {
    return pl_group_reduce<GROUP>(v, pl_op_sum(), smem);
}
template <int GROUP, class A> __device__ __forceinline__ A pl_group_max(A v, A* smem) {
    return pl_group_reduce<GROUP>(v, pl_op_max(), smem);
}
// whole-block sum, result in every thread (all threads must call)
template <class A> __device__ __forceinline__ A pl_block_sum(A v, A* smem) { return pl_group_sum<PL_BLOCK>(v, smem); }

// reciprocal square root in the accumulation type
__device__ __forceinline__ float pl_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double pl_rsqrt(double x) { return rsqrt(x); }
__device__ __forceinline__ float pl_exp(float x) { return expf(x); }
__device__ __forceinline__ double pl_exp(double x) { return exp(x); }

// Raw words: kernels that only move elements copy them bit for bit as an unsigned word of their size.
template <int BYTES> struct pl_word;
template <> struct pl_word<1> { typedef unsigned char type; };
template <> struct pl_word<2> { typedef unsigned short type; };
template <> struct pl_word<4> { typedef unsigned int type; };
template <> struct pl_word<8> { typedef unsigned long long type; };

// ---------------------------------------------------------------------------------------------
// Grid-stride loops and indexing.
// ---------------------------------------------------------------------------------------------
// pl_idx: the index type of strided walks. 64-bit signed (strides may be negative in the backend's
// copies), or 32-bit unsigned when the plan set PL_INDEX64 0 (32-bit division is several times cheaper).
#if PL_INDEX64
typedef long long pl_idx;
#else
typedef unsigned int pl_idx;
#endif

// for (i = this thread's first element; i < n; i += threads in the grid): one element per step.
#define PL_FOR_EACH_INDEX(i, n)                                                           \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n); \
         i += (long long)gridDim.x * blockDim.x)

// The vectorised grid-stride loop of the flat kernels over n elements seen as n / PL_VEC vectors.
// Each step, a thread loads PL_UNROLL vectors PL_BLOCK apart (all loads issued before any use, so they
// are in flight together), then computes and stores them; the n % PL_VEC tail elements go one per
// thread to the first threads. load(u, j) loads vector j into the caller's slot u; apply(u, j) computes
// and stores slot u as vector j; tail(t) handles element t. Called with lambdas that capture the
// caller's slot array by reference: after inlining and unrolling, u is a constant and the slots stay
// in registers. With PL_ONE_PASS each thread has at most one vector, indexed in 32 bits, and no loop:
// a small kernel finishes sooner (ops/kernel.py:flat_launch says when a plan sets it).
template <class Load, class Apply, class Tail>
__device__ __forceinline__ void pl_vector_loop(long long n, Load load, Apply apply, Tail tail) {
#if PL_ONE_PASS
    static_assert(PL_UNROLL == 1, "PL_ONE_PASS launches one vector per thread");
    const int nv = (int)(n / PL_VEC);
    const int j = (int)blockIdx.x * PL_BLOCK + (int)threadIdx.x;
    if (j < nv) {
        load(0, j);
        apply(0, j);
    }
    const int t = nv * PL_VEC + j;
    if (t < (int)n) tail(t);
#else
    const long long nv = n / PL_VEC;
    const long long step = (long long)gridDim.x * (PL_BLOCK * PL_UNROLL);
    for (long long base = (long long)blockIdx.x * (PL_BLOCK * PL_UNROLL) + threadIdx.x; base < nv;
         base += step) {
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) load(u, j);
        }
#pragma unroll
        for (int u = 0; u < PL_UNROLL; ++u) {
            const long long j = base + (long long)u * PL_BLOCK;
            if (j < nv) apply(u, j);
        }
    }
    const long long t = nv * PL_VEC + (long long)blockIdx.x * PL_BLOCK + threadIdx.x;
    if (t < n) tail(t);
#endif
}

// The tiled transpose of one rows x cols block through shared memory: yb[c * y_row + r] = xb[r * x_row + c],
// read along c (x's stride-1 dim) and written along r (y's), each thread block looping over the tiles of its
// grid position (blockIdx.x over column tiles, blockIdx.y over row tiles; block TILE x ROWS threads).
// tile is the caller's __shared__ [TILE][TILE + pad] array (pad 1: a column of the tile spans every bank).
template <int TILE, int ROWS, class W, int COLS>
__device__ __forceinline__ void pl_tile_transpose(const W* xb, W* yb, long long rows, long long cols, long long x_row,
                                                  long long y_row, W (&tile)[TILE][COLS]) {
    const long long tiles_c = (cols + TILE - 1) / TILE;
    const long long tiles_r = (rows + TILE - 1) / TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (long long tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        for (long long tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
            const long long c = tc * TILE + tx;
#pragma unroll
            for (int i = ty; i < TILE; i += ROWS) {
                const long long r = tr * TILE + i;
                if (r < rows && c < cols) tile[i][tx] = xb[r * x_row + c];
            }
            __syncthreads();
            const long long r = tr * TILE + tx;
#pragma unroll
            for (int i = ty; i < TILE; i += ROWS) {
                const long long cc = tc * TILE + i;
                if (cc < cols && r < rows) yb[cc * y_row + r] = tile[tx][i];
            }
            __syncthreads();
        }
    }
}

// Stride decoding: the offsets, in elements, of logical element i of a row-major walk over the dims
// d[0..NDIM-1], in each of NOPS operands with element strides s[op][0..NDIM-1].
template <int NDIM, int NOPS>
__device__ __forceinline__ void pl_strided_offsets(pl_idx i, const long long (&d)[8],
                                                   const long long (&s)[NOPS][8], pl_idx (&off)[NOPS]) {
    pl_idx rem = i;
#pragma unroll
    for (int op = 0; op < NOPS; ++op) off[op] = 0;
#pragma unroll
    for (int k = NDIM - 1; k > 0; --k) {
        const pl_idx dk = (pl_idx)d[k];
        const pl_idx q = rem / dk;
        const pl_idx r = rem - q * dk;
#pragma unroll
        for (int op = 0; op < NOPS; ++op) off[op] += r * (pl_idx)s[op][k];
        rem = q;
    }
#pragma unroll
    for (int op = 0; op < NOPS; ++op) off[op] += rem * (pl_idx)s[op][0];
}

// ---------------------------------------------------------------------------------------------------
// Row kernels (normalization/norm.cu, softmax/softmax.cu): they define PL_ROW_KERNEL before including
// this header and get the defaults of their geometry macros (chosen by row_geometry in ops/kernel.py),
// the element and accumulator types T and A, and the checks of the geometry.
#ifdef PL_ROW_KERNEL
#ifndef PL_VEC
#define PL_VEC 1
#endif
#ifndef PL_GROUP
#define PL_GROUP PL_BLOCK
#endif
#ifndef PL_MAX_VEC_PER_THREAD
#define PL_MAX_VEC_PER_THREAD 4
#endif

typedef PL_T T;
typedef typename pl_acc<T>::type A;
#define PL_ROWS_PER_BLOCK (PL_BLOCK / PL_GROUP)

static_assert(PL_BLOCK % PL_GROUP == 0, "PL_GROUP must divide PL_BLOCK");
static_assert(PL_GROUP <= PL_WARP ? (PL_WARP % PL_GROUP == 0) : (PL_GROUP % PL_WARP == 0),
              "PL_GROUP must be a power of two below 32 or a multiple of 32");
#endif  // PL_ROW_KERNEL
