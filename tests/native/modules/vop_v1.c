/* Operator "vop" major version 1 (1.2.3): y = x + 1. Loaded side by side with vop_v2.c. */
#include <pipelink.h>
PIPELINK_COMPUTE(vop_v1_compute) {
    const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) y[i] = x[i] + 1.0f;
    return PIPELINK_SUCCESS;
}
PIPELINK_VERSION(vop, 1, 2, 3)
PIPELINK_MANIFEST({"name": "vop", "version": "1.2.3", "entry": "vop_v1_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]})
