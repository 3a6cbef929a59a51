/* An operator that copies x to y and then writes `extra` more floats past the end of y: the bug checked
 * mode's guard bytes catch (without it, it silently corrupts whatever the arena holds next). */
#include <pipelink.h>

PIPELINK_COMPUTE(overrun_copy_compute) {
    int64_t n = pipelink_numel(&in[0]);
    int64_t extra = pipelink_attr_int(attrs, n_attrs, "extra", 0);
    const float* x = (const float*)in[0].data;
    float* y = (float*)out[0].data;
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
    for (int64_t i = n; i < n + extra; ++i) y[i] = -1.0f;
    return PIPELINK_SUCCESS;
}

PIPELINK_VERSION(overrun_copy, 1, 0, 0)
PIPELINK_MANIFEST(
  {"name": "overrun_copy", "version": "1.0.0", "entry": "overrun_copy_compute", "devices": ["cpu"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}],
   "attrs": [{"name": "extra", "type": "int", "default": 0}]})
