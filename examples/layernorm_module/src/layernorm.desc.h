// layernorm.desc.h - the seed's descriptor (section 4.4), read as text by `pipelink build` and by
// pipelink_add_module(... DESCRIPTOR ...), which generate the manifest and the version symbol from it.
#pragma once
#include <pipelink.h>  // the seed wrote <pipelink/core.h>; PipeLink ships a single header

struct LayerNormDescriptor {
    static constexpr const char* name = "layer_norm_v1";
    static constexpr int32_t version = 1;
    static constexpr const char* input_names[] = {"input", "gamma", "beta", "eps"};
    static constexpr const char* output_names[] = {"output", "mean", "rstd"};
    static constexpr int32_t num_inputs = 4;
    static constexpr int32_t num_outputs = 3;
    static constexpr HardwareFeature required_features[] = {
        {HW_FEATURE_FP32_SUPPORT, 1}
    };
    // PipeLink extensions (optional): the entry symbol, shape patterns and dtypes for the linker.
    static constexpr const char* entry = "layer_norm_v1_compute";
    static constexpr const char* input_shapes[] = {"N,C", "C", "C", ""};
    static constexpr const char* output_shapes[] = {"N,C", "N", "N"};
    static constexpr const char* dtypes[] = {"float32"};
};
