// layernorm_kernel.cu - LayerNorm over the last dimension of an [N, C] float32 tensor (seed section 4.2).
// One block per row; the mean and the variance are block reductions (warp shuffles, then one warp over
// the per-warp partial sums); the variance is computed from the centred values (two passes, stable).
// Exports the PipeLink ABI entry (layer_norm_v1_compute) and the seed's legacy signature (pipeLinkLayerNorm).
#include <cuda_runtime.h>
#include <pipelink.h>

namespace {

constexpr int kBlock = 256;

// The sum of `v` over the block; every thread gets the result. `shared` holds kBlock / 32 + 1 floats.
__device__ float block_sum(float v, float* shared) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < kBlock / 32 ? shared[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) shared[kBlock / 32] = v;
    }
    __syncthreads();
    const float total = shared[kBlock / 32];
    __syncthreads();  // `shared` is reused by the next reduction
    return total;
}

// eps is read on the device from `eps_ptr` (a pipeline tensor) when it is not NULL.
__global__ void __launch_bounds__(kBlock) layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                                            const float* __restrict__ beta, const float* eps_ptr,
                                                            float* __restrict__ y, float* __restrict__ mean,
                                                            float* __restrict__ rstd, int C) {
    __shared__ float shared[kBlock / 32 + 1];
    const size_t row = blockIdx.x;
    const float* xr = x + row * C;
    float* yr = y + row * C;
    float s = 0.0f;
    for (int j = threadIdx.x; j < C; j += kBlock) s += xr[j];
    const float mu = block_sum(s, shared) / C;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < C; j += kBlock) {
        const float d = xr[j] - mu;
        ss += d * d;
    }
    const float var = block_sum(ss, shared) / C;
    const float r = rsqrtf(var + *eps_ptr);
    if (threadIdx.x == 0) {
        mean[row] = mu;
        rstd[row] = r;
    }
    for (int j = threadIdx.x; j < C; j += kBlock) yr[j] = (xr[j] - mu) * r * gamma[j] + beta[j];
}

int launch(const float* x, const float* gamma, const float* beta, const float* eps, float* y, float* mean, float* rstd,
           int N, int C, cudaStream_t stream) {
    if (N == 0) return PIPELINK_SUCCESS;
    layer_norm_kernel<<<N, kBlock, 0, stream>>>(x, gamma, beta, eps, y, mean, rstd, C);
    return cudaGetLastError() == cudaSuccess ? PIPELINK_SUCCESS : PIPELINK_ERR_CUDA;
}

}  // namespace

// PipeLink ABI: in = {input[N,C], gamma[C], beta[C], eps[]}, out = {output[N,C], mean[N], rstd[N]}.
PIPELINK_COMPUTE(layer_norm_v1_compute) {
    if (n_in != 4 || n_out != 3 || in[0].ndim != 2) return PIPELINK_ERR_INVALID_ARGUMENT;
    for (int i = 0; i < n_in; ++i)
        if (pipelink_dtype_id(&in[i]) != PIPELINK_DTYPE_FLOAT32) return PIPELINK_ERR_DTYPE_MISMATCH;
    if (in[0].device.device_type != PIPELINK_DEVICE_CUDA) return PIPELINK_ERR_HARDWARE_UNSUPPORTED;
    return launch((const float*)in[0].data, (const float*)in[1].data, (const float*)in[2].data,
                  (const float*)in[3].data, (float*)out[0].data, (float*)out[1].data, (float*)out[2].data,
                  (int)in[0].shape[0], (int)in[0].shape[1], (cudaStream_t)stream);
}

// The seed's legacy signature; `eps` points to device-readable memory, like every other argument.
extern "C" PIPELINK_EXPORT void pipeLinkLayerNorm(const void* input_ptr, const void* gamma_ptr, const void* beta_ptr,
                                                  void* output_ptr, void* mean_ptr, void* rstd_ptr,
                                                  const int32_t* shape, const float* eps_ptr, cudaStream_t stream) {
    launch(static_cast<const float*>(input_ptr), static_cast<const float*>(gamma_ptr),
           static_cast<const float*>(beta_ptr), eps_ptr, static_cast<float*>(output_ptr),
           static_cast<float*>(mean_ptr), static_cast<float*>(rstd_ptr), shape[0], shape[1], stream);
}
