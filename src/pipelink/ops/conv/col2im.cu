// PipeLink's col2im (ONNX Col2Im, PyTorch's fold) over 1 to 6 spatial axes: one thread per output
// element gathers, tap index ascending, every tap of x that lands on its pixel (tap k of block l lands at
// l * stride - pad_begin + k * dilation per axis) and sums them in the accumulation type: the order the
// CPU reference (conv/col2im.py) adds them in, so both give the same values. No atomics, never
// allocates; the block geometry is resolved on the host by col2im_geometry.
//
// Macros (chosen by plan_col2im in pipelink/ops/conv/col2im.py):
//   PL_T      element type (float, double, __half, __nv_bfloat16)
//   PL_D      spatial axes (1..6)
//   PL_BLOCK  threads per block
//
// Kernel: pl_col2im(const T* x, T* y, long long n, long long C, long long K, long long L,
//                   long long img0..img5, long long blk0..blk5, long long nb0..nb5, long long st0..st5,
//                   long long dl0..dl5, long long pd0..pd5)
//   x contiguous [N, C * K, L] (K = prod(blk), L = prod(nb)), y contiguous [N, C, img0..img{D-1}] with
//   n = N * C * prod(img) elements; per axis: image size, taps, blocks, stride, dilation, begin pad.
//   Distinct buffers.
#include "common.cuh"

#ifndef PL_D
#define PL_D 2
#endif

typedef PL_T T;
typedef typename pl_acc<T>::type A;

extern "C" __global__ void __launch_bounds__(PL_BLOCK)
pl_col2im(const T* __restrict__ x, T* __restrict__ y, long long n, long long C, long long K, long long L,
          long long img0, long long img1, long long img2, long long img3, long long img4, long long img5,
          long long blk0, long long blk1, long long blk2, long long blk3, long long blk4, long long blk5,
          long long nb0, long long nb1, long long nb2, long long nb3, long long nb4, long long nb5,
          long long st0, long long st1, long long st2, long long st3, long long st4, long long st5,
          long long dl0, long long dl1, long long dl2, long long dl3, long long dl4, long long dl5,
          long long pd0, long long pd1, long long pd2, long long pd3, long long pd4, long long pd5) {
    const long long img[6] = {img0, img1, img2, img3, img4, img5};
    const long long blk[6] = {blk0, blk1, blk2, blk3, blk4, blk5};
    const long long nb[6] = {nb0, nb1, nb2, nb3, nb4, nb5};
    const long long st[6] = {st0, st1, st2, st3, st4, st5};
    const long long dl[6] = {dl0, dl1, dl2, dl3, dl4, dl5};
    const long long pd[6] = {pd0, pd1, pd2, pd3, pd4, pd5};
    PL_FOR_EACH_INDEX(i, n) {
        // the pixel's position per spatial axis, shifted into the padded image
        long long at[PL_D];
        long long rem = i;
#pragma unroll
        for (int a = PL_D - 1; a >= 0; --a) {
            at[a] = rem % img[a] + pd[a];
            rem /= img[a];
        }
        const long long plane = rem;  // n * C + c
        const T* __restrict__ src = x + plane * K * L;
        A acc = (A)0;
        for (long long k = 0; k < K; ++k) {
            // tap k's offset per axis (last axis fastest) and the block it comes from, if any
            long long digits = k, block = 0, scale = 1;
            bool lands = true;
#pragma unroll
            for (int a = PL_D - 1; a >= 0; --a) {
                const long long q = at[a] - (digits % blk[a]) * dl[a];
                digits /= blk[a];
                const long long l = q >= 0 ? q / st[a] : -1;
                lands = lands && q >= 0 && q % st[a] == 0 && l < nb[a];
                block += l * scale;
                scale *= nb[a];
            }
            if (lands) acc += pl_to_acc(src[k * L + block]);
        }
        y[i] = pl_from<T>(acc);
    }
}
