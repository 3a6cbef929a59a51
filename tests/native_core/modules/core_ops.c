/* Operators for the native core's C tests: a workspace user, a data-dependent failure, a NaN producer and
 * a stateful operator with context hooks. Each fails only when its input's first element is negative, so
 * one plan exercises both the happy path and every on_error policy. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <pipelink.h>

/* y = alpha * x, staged through the runtime's workspace (checks the workspace service). */
PIPELINK_COMPUTE(scale_compute) {
    const PipeLinkServices* s = PIPELINK_SERVICES(context);
    const int64_t n = pipelink_numel(&in[0]);
    float* tmp = (float*)s->workspace((uint64_t)n * sizeof(float));
    if (tmp == NULL) return PIPELINK_ERR_OUT_OF_MEMORY;
    const double alpha = pipelink_attr_float(attrs, n_attrs, "alpha", 1.0);
    for (int64_t i = 0; i < n; ++i) tmp[i] = (float)(alpha * ((const float*)in[0].data)[i]);
    for (int64_t i = 0; i < n; ++i) ((float*)out[0].data)[i] = tmp[i];
    return PIPELINK_SUCCESS;
}

int64_t scale_workspace(const PipeLinkTensor* in, int32_t n_in, const PipeLinkTensor* out, int32_t n_out,
                        const PipeLinkAttr* attrs, int32_t n_attrs) {
    return pipelink_numel(&in[0]) * (int64_t)sizeof(float);
}

/* y = x + alpha; fails with PIPELINK_ERR_MODULE_CRASH when x[0] < 0. */
PIPELINK_COMPUTE(flaky_compute) {
    const float* x = (const float*)in[0].data;
    if (x[0] < 0) return PIPELINK_ERR_MODULE_CRASH;
    const double alpha = pipelink_attr_float(attrs, n_attrs, "alpha", 0.0);
    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) ((float*)out[0].data)[i] = (float)(x[i] + alpha);
    return PIPELINK_SUCCESS;
}

/* y = x, with a NaN in the last element when x[0] < 0 (for check_finite). */
PIPELINK_COMPUTE(nanify_compute) {
    const float* x = (const float*)in[0].data;
    const int64_t n = pipelink_numel(&in[0]);
    for (int64_t i = 0; i < n; ++i) ((float*)out[0].data)[i] = x[i];
    if (x[0] < 0) ((float*)out[0].data)[n - 1] = NAN;
    return PIPELINK_SUCCESS;
}

/* y = x + 1, after sleeping attr "ms" milliseconds when x[0] < 0 (for timeout_ms). */
PIPELINK_COMPUTE(sleepy_compute) {
    const float* x = (const float*)in[0].data;
    if (x[0] < 0) {
        const struct timespec pause = {0, (long)(pipelink_attr_float(attrs, n_attrs, "ms", 0.0) * 1e6)};
        nanosleep(&pause, NULL);
    }
    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) ((float*)out[0].data)[i] = x[i] + 1.0f;
    return PIPELINK_SUCCESS;
}

/* y = x + offset, the offset read once by context_create from the attrs into per-stage state. */
typedef struct { float offset; } OffsetState;

int offset_create(const PipeLinkAttr* attrs, int32_t n_attrs, const PipeLinkServices* services, void** state) {
    OffsetState* s = (OffsetState*)malloc(sizeof *s);
    if (s == NULL) return PIPELINK_ERR_OUT_OF_MEMORY;
    s->offset = (float)pipelink_attr_float(attrs, n_attrs, "offset", 0.0);
    *state = s;
    return PIPELINK_SUCCESS;
}

void offset_destroy(void* state) { free(state); }

PIPELINK_COMPUTE(offset_compute) {
    const OffsetState* s = (const OffsetState*)PIPELINK_SERVICES(context)->user;
    if (s == NULL) return PIPELINK_ERR_INVALID_ARGUMENT;
    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i)
        ((float*)out[0].data)[i] = ((const float*)in[0].data)[i] + s->offset;
    return PIPELINK_SUCCESS;
}

PIPELINK_VERSION(core_scale, 1, 0, 0)
PIPELINK_VERSION(core_flaky, 1, 0, 0)
PIPELINK_VERSION(core_nanify, 1, 0, 0)
PIPELINK_VERSION(core_offset, 1, 0, 0)
PIPELINK_VERSION(core_sleepy, 1, 0, 0)
PIPELINK_MANIFEST(
  {"name": "core_scale", "version": "1.0.0", "entry": "scale_compute", "workspace_size": "scale_workspace",
   "devices": ["cpu"], "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}],
   "attrs": [{"name": "alpha", "type": "float", "default": 1.0}]},
  {"name": "core_flaky", "version": "1.0.0", "entry": "flaky_compute", "devices": ["cpu"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}],
   "attrs": [{"name": "alpha", "type": "float", "default": 0.0}]},
  {"name": "core_nanify", "version": "1.0.0", "entry": "nanify_compute", "devices": ["cpu"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]},
  {"name": "core_offset", "version": "1.0.0", "entry": "offset_compute", "context_create": "offset_create",
   "context_destroy": "offset_destroy", "devices": ["cpu"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}],
   "attrs": [{"name": "offset", "type": "float", "default": 0.0}]},
  {"name": "core_sleepy", "version": "1.0.0", "entry": "sleepy_compute", "devices": ["cpu"],
   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}],
   "attrs": [{"name": "ms", "type": "float", "default": 0.0}]})
