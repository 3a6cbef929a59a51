/* Operator "vop" major version 2 (2.0.0): y = x + 2. */
#include <pipelink.h>
PIPELINK_COMPUTE(vop_v2_compute) {
    const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) y[i] = x[i] + 2.0f;
    return PIPELINK_SUCCESS;
}
PIPELINK_VERSION(vop, 2, 0, 0)
PIPELINK_MANIFEST({"name": "vop", "version": "2.0.0", "entry": "vop_v2_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]})
