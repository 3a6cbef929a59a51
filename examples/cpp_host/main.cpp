// main.cpp - the seed's section 4.5: load the LayerNorm pipeline, run it through the C API, clean up.
// Differences from the seed's sketch, where the sketch does not compile against a real API: tensors are
// DLPack DLTensors (PipeLinkTensor), the config declares its input shapes (a pipeline is compiled for
// them), outputs are passed with data NULL so the runtime allocates them, and the result is checked.
#include "pipelink/runtime.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

static PipeLinkTensor host_tensor(void* data, int32_t ndim, int64_t* shape) {
    PipeLinkTensor t{};
    t.data = data;
    t.device = {PIPELINK_DEVICE_CPU, 0};
    t.ndim = ndim;
    t.dtype = {PIPELINK_DL_FLOAT, 32, 1};
    t.shape = shape;
    return t;
}

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "./config.json";
    // 1. Initialise the PipeLink runtime
    if (pipeLinkInitialize() != PIPELINK_SUCCESS) {
        std::cerr << "Failed to initialize PipeLink: " << pipeLinkGetLastErrorMessage() << "\n";
        return -1;
    }
    // 2. Load the pipeline (a .json config is compiled by the installed Python package)
    PipeLinkPipelineHandle pipeline = nullptr;
    if (pipeLinkLoadPipeline(path, &pipeline) != PIPELINK_SUCCESS) {
        std::cerr << "Failed to load pipeline: " << pipeLinkGetLastErrorMessage() << "\n";
        return -1;
    }
    // 3. Allocate memory (the memory contract). pipeLinkMalloc hands out device memory where a GPU is usable;
    //    this CPU walkthrough fills its inputs from the host, so it asks for the host pool.
    if (pipeLinkSetMemoryAllocator(PIPELINK_ALLOCATOR_HOST) != PIPELINK_SUCCESS) {
        std::cerr << "Failed to choose host memory: " << pipeLinkGetLastErrorMessage() << "\n";
        return -1;
    }
    const int C = 1024;
    float *d_input = nullptr, *d_gamma = nullptr, *d_beta = nullptr, *d_eps = nullptr;
    pipeLinkMalloc(reinterpret_cast<void**>(&d_input), C * sizeof(float));  // [1,1024]
    pipeLinkMalloc(reinterpret_cast<void**>(&d_gamma), C * sizeof(float));
    pipeLinkMalloc(reinterpret_cast<void**>(&d_beta), C * sizeof(float));
    pipeLinkMalloc(reinterpret_cast<void**>(&d_eps), sizeof(float));
    for (int j = 0; j < C; ++j) {
        d_input[j] = std::sin(0.37f * j) * 3.0f + 0.5f;
        d_gamma[j] = 1.0f + 0.001f * j;
        d_beta[j] = 0.01f * (j % 7);
    }
    *d_eps = 1e-5f;
    // 4. Describe the tensors, in the order pipeLinkGetPipelineInfo reports
    int64_t input_shape[2] = {1, C}, param_shape[1] = {C};
    std::vector<PipeLinkTensor> inputs = {host_tensor(d_input, 2, input_shape), host_tensor(d_gamma, 1, param_shape),
                                          host_tensor(d_beta, 1, param_shape), host_tensor(d_eps, 0, nullptr)};
    std::vector<PipeLinkTensor> outputs(3, PipeLinkTensor{});  // data NULL: allocated by the runtime
    // 5. Execute the pipeline
    int rc = 0;
    if (pipeLinkExecute(pipeline, inputs.data(), static_cast<int32_t>(inputs.size()), outputs.data(),
                        static_cast<int32_t>(outputs.size())) != PIPELINK_SUCCESS) {
        std::cerr << "Pipeline execution failed: " << pipeLinkGetLastErrorMessage() << "\n";
        rc = 1;
    } else {
        // Check against LayerNorm computed here, in double.
        double mean = 0, var = 0;
        for (int j = 0; j < C; ++j) mean += d_input[j];
        mean /= C;
        for (int j = 0; j < C; ++j) var += (d_input[j] - mean) * (d_input[j] - mean);
        const double rstd = 1.0 / std::sqrt(var / C + *d_eps);
        const float* y = static_cast<const float*>(outputs[0].data);
        double worst = 0;
        for (int j = 0; j < C; ++j)
            worst = std::fmax(worst, std::fabs(y[j] - ((d_input[j] - mean) * rstd * d_gamma[j] + d_beta[j])));
        std::printf("norm_output [%lld x %lld], mean %.6f, rstd %.6f, max |error| %.2e\n",
                    static_cast<long long>(outputs[0].shape[0]), static_cast<long long>(outputs[0].shape[1]),
                    static_cast<const float*>(outputs[1].data)[0], static_cast<const float*>(outputs[2].data)[0], worst);
        rc = worst < 1e-4 ? 0 : 1;
        for (auto& out : outputs) pipeLinkFree(out.data);
    }
    // 6. Clean up
    pipeLinkFree(d_input);
    pipeLinkFree(d_gamma);
    pipeLinkFree(d_beta);
    pipeLinkFree(d_eps);
    pipeLinkDestroyPipeline(pipeline);
    pipeLinkFinalize();
    return rc;
}
