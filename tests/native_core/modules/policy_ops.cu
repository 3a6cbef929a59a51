// policy_ops.cu - the CUDA twins of core_ops.c's flaky, nanify and scale operators, for the core's on_error
// policies and check_finite on the device (tests/native_core/test_cuda_gpu.py). Each misbehaves only when its
// input's first element is negative, so one plan runs clean and degraded.
#include <cmath>
#include <cuda_runtime.h>
#include <pipelink.h>

namespace {
__global__ void affine(const float* __restrict__ x, float* __restrict__ y, long long n, float alpha, float beta) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i] + beta;
}

// y = x, with a NaN in the last element when x[0] < 0: decided on the device, no synchronization.
__global__ void nanify(const float* __restrict__ x, float* __restrict__ y, long long n) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = (i == n - 1 && x[0] < 0.0f) ? NAN : x[i];
}

unsigned blocks(long long n) { return (unsigned)((n + 255) / 256); }

int launched() { return cudaGetLastError() == cudaSuccess ? PIPELINK_SUCCESS : PIPELINK_ERR_CUDA; }
}  // namespace

// y = alpha x.
PIPELINK_COMPUTE(pol_scale_compute) {
    const long long n = pipelink_numel(&in[0]);
    const float alpha = (float)pipelink_attr_float(attrs, n_attrs, "alpha", 1.0);
    if (n > 0) affine<<<blocks(n), 256, 0, (cudaStream_t)stream>>>((const float*)in[0].data, (float*)out[0].data, n, alpha, 0.0f);
    return launched();
}

// y = x + alpha; returns PIPELINK_ERR_MODULE_CRASH when x[0] < 0 (it reads x[0] back: synchronizes its stream).
PIPELINK_COMPUTE(pol_flaky_compute) {
    float first = 0.0f;
    if (cudaMemcpyAsync(&first, in[0].data, sizeof first, cudaMemcpyDeviceToHost, (cudaStream_t)stream) != cudaSuccess ||
        cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess)
        return PIPELINK_ERR_CUDA;
    if (first < 0.0f) return PIPELINK_ERR_MODULE_CRASH;
    const long long n = pipelink_numel(&in[0]);
    const float alpha = (float)pipelink_attr_float(attrs, n_attrs, "alpha", 0.0);
    if (n > 0) affine<<<blocks(n), 256, 0, (cudaStream_t)stream>>>((const float*)in[0].data, (float*)out[0].data, n, 1.0f, alpha);
    return launched();
}

PIPELINK_COMPUTE(pol_nanify_compute) {
    const long long n = pipelink_numel(&in[0]);
    if (n > 0) nanify<<<blocks(n), 256, 0, (cudaStream_t)stream>>>((const float*)in[0].data, (float*)out[0].data, n);
    return launched();
}

PIPELINK_VERSION(pol_scale, 1, 0, 0)
PIPELINK_VERSION(pol_flaky, 1, 0, 0)
PIPELINK_VERSION(pol_nanify, 1, 0, 0)
PIPELINK_MANIFEST(
  {"name": "pol_scale", "version": "1.0.0", "entry": "pol_scale_compute", "devices": ["cuda"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}],
   "attrs": [{"name": "alpha", "type": "float", "default": 1.0}]},
  {"name": "pol_flaky", "version": "1.0.0", "entry": "pol_flaky_compute", "devices": ["cuda"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}],
   "attrs": [{"name": "alpha", "type": "float", "default": 0.0}]},
  {"name": "pol_nanify", "version": "1.0.0", "entry": "pol_nanify_compute", "devices": ["cuda"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]})
