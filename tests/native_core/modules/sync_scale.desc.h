// sync_scale.desc.h - a CUDA module that synchronizes its stream inside its compute (sync_scale.cu): what a
// CUDA graph cannot capture. tests/native_core/test_cuda_gpu.py runs it in a cuda_graph plan.
#pragma once
#include <pipelink.h>

struct SyncScaleDescriptor {
    static constexpr const char* name = "sync_scale";
    static constexpr int32_t version = 1;
    static constexpr const char* input_names[] = {"x"};
    static constexpr const char* output_names[] = {"y"};
    static constexpr int32_t num_inputs = 1;
    static constexpr int32_t num_outputs = 1;
    static constexpr HardwareFeature required_features[] = {
        {HW_FEATURE_FP32_SUPPORT, 1}
    };
    static constexpr const char* entry = "sync_scale_compute";
    static constexpr const char* input_shapes[] = {"N,C"};
    static constexpr const char* output_shapes[] = {"N,C"};
    static constexpr const char* dtypes[] = {"float32"};
};
