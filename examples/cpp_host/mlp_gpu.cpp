// mlp_gpu.cpp - the transformer MLP block (layer_norm -> gemm + bias + GELU -> gemm + bias + residual) on the
// GPU through the C API: a CUDA plan (`pipelink compile mlp_block.json -o mlp_block.plk --device cuda`), inputs
// in device memory from pipeLinkMalloc (the default allocator on a GPU host), pipeLinkExecute (returns when the output is ready) and pipeLinkExecuteAsync on
// the application's own stream, each checked against the block computed here on the CPU, in double.
#include "pipelink/runtime.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace {
constexpr int T = 8, D = 256, H = 1024;  // tokens, model width, hidden width (mlp_block.json)

PipeLinkTensor device_tensor(void* data, int32_t ndim, int64_t* shape) {
    PipeLinkTensor t{};
    t.data = data;
    t.device = {PIPELINK_DEVICE_CUDA, 0};
    t.ndim = ndim;
    t.dtype = {PIPELINK_DL_FLOAT, 32, 1};
    t.shape = shape;
    return t;
}

// y = x + gelu(layer_norm(x) @ w1 + b1) @ w2 + b2, GELU in its erf form.
std::vector<double> reference(const std::vector<std::vector<float>>& in) {
    const auto &x = in[0], &g = in[1], &b = in[2], &w1 = in[3], &b1 = in[4], &w2 = in[5], &b2 = in[6];
    std::vector<double> y(T * D);
    for (int t = 0; t < T; ++t) {
        double mean = 0, var = 0;
        for (int j = 0; j < D; ++j) mean += x[t * D + j];
        mean /= D;
        for (int j = 0; j < D; ++j) var += (x[t * D + j] - mean) * (x[t * D + j] - mean);
        const double rstd = 1.0 / std::sqrt(var / D + 1e-5);
        std::vector<double> h(D), u(H);
        for (int j = 0; j < D; ++j) h[j] = (x[t * D + j] - mean) * rstd * g[j] + b[j];
        for (int k = 0; k < H; ++k) {
            double s = b1[k];
            for (int j = 0; j < D; ++j) s += h[j] * w1[j * H + k];
            u[k] = 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
        }
        for (int j = 0; j < D; ++j) {
            double s = b2[j] + x[t * D + j];
            for (int k = 0; k < H; ++k) s += u[k] * w2[k * D + j];
            y[t * D + j] = s;
        }
    }
    return y;
}

double worst_error(float* d_y, const std::vector<double>& ref) {
    std::vector<float> y(T * D);
    cudaMemcpy(y.data(), d_y, y.size() * sizeof(float), cudaMemcpyDeviceToHost);
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::fmax(worst, std::fabs(y[i] - ref[i]) / (1.0 + std::fabs(ref[i])));
    return worst;
}
}  // namespace

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "./mlp_block.plk";
    if (pipeLinkInitialize() != PIPELINK_SUCCESS) return std::fprintf(stderr, "%s\n", pipeLinkGetLastErrorMessage()), 1;
    PipeLinkPipelineHandle pipeline = nullptr;
    if (pipeLinkLoadPipeline(path, &pipeline) != PIPELINK_SUCCESS)
        return std::fprintf(stderr, "Failed to load %s: %s\n", path, pipeLinkGetLastErrorMessage()), 1;
    PipeLinkPoolStats pool{};
    pipeLinkGetMemoryPoolStats(&pool);
    if (pool.allocator == PIPELINK_ALLOCATOR_HOST)  // the default only where no CUDA device is usable
        return std::fprintf(stderr, "pipeLinkMalloc serves host memory here: no usable CUDA device\n"), 1;

    // Inputs in pipelineinfo order: x, gamma, beta, w1, b1, w2, b2 (deterministic values, scaled like a layer).
    int64_t shapes[7][2] = {{T, D}, {D, 0}, {D, 0}, {D, H}, {H, 0}, {H, D}, {D, 0}};
    const int32_t ndims[7] = {2, 1, 1, 2, 1, 2, 1};
    std::vector<std::vector<float>> host(7);
    std::vector<float*> dev(7, nullptr);
    std::vector<PipeLinkTensor> inputs;
    for (int i = 0; i < 7; ++i) {
        const size_t n = static_cast<size_t>(shapes[i][0]) * (ndims[i] == 2 ? shapes[i][1] : 1);
        const double scale = i == 3 ? 1.0 / std::sqrt(double(D)) : i == 5 ? 1.0 / std::sqrt(double(H)) : 0.5;
        host[i].resize(n);
        for (size_t j = 0; j < n; ++j) host[i][j] = static_cast<float>(scale * std::sin(0.7 * j + 1.3 * i) + (i == 1));
        if (pipeLinkMalloc(reinterpret_cast<void**>(&dev[i]), n * sizeof(float)) != PIPELINK_SUCCESS)
            return std::fprintf(stderr, "pipeLinkMalloc: %s\n", pipeLinkGetLastErrorMessage()), 1;
        cudaMemcpy(dev[i], host[i].data(), n * sizeof(float), cudaMemcpyHostToDevice);
        inputs.push_back(device_tensor(dev[i], ndims[i], shapes[i]));
    }
    const std::vector<double> ref = reference(host);
    float* d_y = nullptr;
    if (pipeLinkMalloc(reinterpret_cast<void**>(&d_y), T * D * sizeof(float)) != PIPELINK_SUCCESS)
        return std::fprintf(stderr, "pipeLinkMalloc: %s\n", pipeLinkGetLastErrorMessage()), 1;
    int64_t y_shape[2] = {T, D};
    PipeLinkTensor output = device_tensor(d_y, 2, y_shape);

    int rc = 0;
    cudaMemset(d_y, 0xff, T * D * sizeof(float));  // NaN: a run that writes nothing is caught
    if (pipeLinkExecute(pipeline, inputs.data(), 7, &output, 1) != PIPELINK_SUCCESS) {
        std::fprintf(stderr, "pipeLinkExecute failed: %s\n", pipeLinkGetLastErrorMessage());
        rc = 1;
    }
    const double sync_error = rc ? 1.0 : worst_error(d_y, ref);

    cudaStream_t stream = nullptr;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaMemsetAsync(d_y, 0xff, T * D * sizeof(float), stream);
    if (!rc && pipeLinkExecuteAsync(pipeline, inputs.data(), 7, &output, 1, stream) != PIPELINK_SUCCESS) {
        std::fprintf(stderr, "pipeLinkExecuteAsync failed: %s\n", pipeLinkGetLastErrorMessage());
        rc = 1;
    }
    cudaStreamSynchronize(stream);
    const double async_error = rc ? 1.0 : worst_error(d_y, ref);
    std::printf("mlp_block [%d x %d] on cuda:0: max error %.2e (Execute), %.2e (ExecuteAsync on the app's stream)\n",
                T, D, sync_error, async_error);
    if (sync_error > 1e-3 || async_error > 1e-3) rc = 1;

    cudaStreamDestroy(stream);
    for (float* p : dev) pipeLinkFree(p);  // back to the pool's cache; pipeLinkFinalize empties it
    pipeLinkFree(d_y);
    pipeLinkDestroyPipeline(pipeline);
    pipeLinkFinalize();
    return rc;
}
