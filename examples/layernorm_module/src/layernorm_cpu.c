/* layernorm_cpu.c - the C twin of layernorm_kernel.cu: the same ABI entry and the same results, on the CPU.
 * Two passes per row (mean, then the variance of the centred values), accumulated in double. */
#include <math.h>
#include <pipelink.h>

PIPELINK_COMPUTE(layer_norm_v1_compute) {
    if (n_in != 4 || n_out != 3 || in[0].ndim != 2) return PIPELINK_ERR_INVALID_ARGUMENT;
    for (int i = 0; i < n_in; ++i)
        if (pipelink_dtype_id(&in[i]) != PIPELINK_DTYPE_FLOAT32) return PIPELINK_ERR_DTYPE_MISMATCH;
    if (in[0].device.device_type != PIPELINK_DEVICE_CPU) return PIPELINK_ERR_HARDWARE_UNSUPPORTED;
    const int64_t N = in[0].shape[0], C = in[0].shape[1];
    const float* x = (const float*)in[0].data;
    const float* gamma = (const float*)in[1].data;
    const float* beta = (const float*)in[2].data;
    const float eps = *(const float*)in[3].data;
    float* y = (float*)out[0].data;
    float* mean = (float*)out[1].data;
    float* rstd = (float*)out[2].data;
    for (int64_t i = 0; i < N; ++i) {
        const float* xr = x + i * C;
        double s = 0.0, ss = 0.0;
        for (int64_t j = 0; j < C; ++j) s += xr[j];
        const double mu = s / (double)C;
        for (int64_t j = 0; j < C; ++j) ss += (xr[j] - mu) * (xr[j] - mu);
        const double r = 1.0 / sqrt(ss / (double)C + (double)eps);
        mean[i] = (float)mu;
        rstd[i] = (float)r;
        for (int64_t j = 0; j < C; ++j) y[i * C + j] = (float)((xr[j] - mu) * r * gamma[j] + beta[j]);
    }
    return PIPELINK_SUCCESS;
}
