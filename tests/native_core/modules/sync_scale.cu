// sync_scale.cu - y = 2 x, then cudaStreamSynchronize on the run's stream: a module that synchronizes inside
// its compute, so a capture of it is invalidated (the core's cuda_graph mode falls back to eager runs).
#include <cuda_runtime.h>
#include <pipelink.h>

namespace {
__global__ void scale2(const float* __restrict__ x, float* __restrict__ y, long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
}  // namespace

PIPELINK_COMPUTE(sync_scale_compute) {
    if (n_in != 1 || n_out != 1) return PIPELINK_ERR_INVALID_ARGUMENT;
    if (in[0].device.device_type != PIPELINK_DEVICE_CUDA) return PIPELINK_ERR_HARDWARE_UNSUPPORTED;
    const long long n = pipelink_numel(&in[0]);
    if (n > 0)
        scale2<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>((const float*)in[0].data,
                                                                             (float*)out[0].data, n);
    if (cudaGetLastError() != cudaSuccess) return PIPELINK_ERR_CUDA;
    // Inside a stream capture this fails (and invalidates the capture): reported as the module's failure,
    // and taken off the runtime's per-thread last error so that the next call starts clean.
    if (cudaStreamSynchronize((cudaStream_t)stream) == cudaSuccess) return PIPELINK_SUCCESS;
    (void)cudaGetLastError();
    return PIPELINK_ERR_CUDA;
}
