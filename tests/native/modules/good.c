/* A well-formed module with three operators: scale_add (workspace, context hooks, optional input),
 * row_sum (a dtype variable over float32/float64) and attr_probe (echoes its attributes). */
#include <pipelink.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { int64_t calls; } ScaleState;

/* y = alpha * x + b, computed through the workspace (so the workspace must be writable and large enough). */
PIPELINK_COMPUTE(scale_add_compute) {
    const PipeLinkServices* s = PIPELINK_SERVICES(context);
    if (n_in != 2 || n_out != 1 || s == NULL || s->abi_version != PIPELINK_ABI_VERSION) return PIPELINK_ERR_INVALID_ARGUMENT;
    if (in[0].dtype.code != PIPELINK_DL_FLOAT || in[0].dtype.bits != 32) return PIPELINK_ERR_DTYPE_MISMATCH;
    int64_t n = pipelink_numel(&in[0]);
    int64_t c = in[0].shape[in[0].ndim - 1];
    float* tmp = (float*)s->workspace((uint64_t)n * sizeof(float));
    if (tmp == NULL) return PIPELINK_ERR_OUT_OF_MEMORY;
    double alpha = pipelink_attr_float(attrs, n_attrs, "alpha", 1.0);
    const float* x = (const float*)in[0].data;
    const float* b = (const float*)in[1].data; /* NULL when the optional input is absent */
    for (int64_t i = 0; i < n; ++i) tmp[i] = (float)(alpha * x[i]) + (b ? b[i % c] : 0.0f);
    float* y = (float*)out[0].data;
    for (int64_t i = 0; i < n; ++i) y[i] = tmp[i];
    if (s->user) ((ScaleState*)s->user)->calls += 1;
    return PIPELINK_SUCCESS;
}

PIPELINK_EXTERN_C PIPELINK_EXPORT int64_t scale_add_workspace(const PipeLinkTensor* in, int32_t n_in,
        const PipeLinkTensor* out, int32_t n_out, const PipeLinkAttr* attrs, int32_t n_attrs) {
    return pipelink_numel(&in[0]) * (int64_t)sizeof(float);
}

PIPELINK_EXTERN_C PIPELINK_EXPORT int scale_add_create(const PipeLinkAttr* attrs, int32_t n_attrs,
        const PipeLinkServices* services, void** state) {
    ScaleState* st = (ScaleState*)calloc(1, sizeof(ScaleState));
    if (st == NULL) return PIPELINK_ERR_OUT_OF_MEMORY;
    char msg[96];
    snprintf(msg, sizeof msg, "scale_add context created (alpha=%g)", pipelink_attr_float(attrs, n_attrs, "alpha", 1.0));
    services->log(PIPELINK_LOG_INFO, msg);
    *state = st;
    return PIPELINK_SUCCESS;
}

static int64_t destroyed = 0;
PIPELINK_EXTERN_C PIPELINK_EXPORT void scale_add_destroy(void* state) { free(state); destroyed += 1; }
PIPELINK_EXTERN_C PIPELINK_EXPORT int64_t good_destroyed_count(void) { return destroyed; }

/* y[i] = sum_j x[i, j], for float32 and float64, honouring the strides it is given. */
PIPELINK_COMPUTE(row_sum_compute) {
    int64_t rows = in[0].shape[0], cols = in[0].shape[1];
    int64_t rs = in[0].strides[0], cs = in[0].strides[1];
    if (in[0].dtype.bits == 64) {
        const double* x = (const double*)in[0].data; double* y = (double*)out[0].data;
        for (int64_t i = 0; i < rows; ++i) { double acc = 0; for (int64_t j = 0; j < cols; ++j) acc += x[i * rs + j * cs]; y[i] = acc; }
    } else {
        const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
        for (int64_t i = 0; i < rows; ++i) { double acc = 0; for (int64_t j = 0; j < cols; ++j) acc += x[i * rs + j * cs]; y[i] = (float)acc; }
    }
    return PIPELINK_SUCCESS;
}

/* out[0] = [alpha, count, flag, sum(weights), sum(dims), strlen(mode), n_attrs, block] */
PIPELINK_COMPUTE(attr_probe_compute) {
    double* y = (double*)out[0].data;
    const PipeLinkAttr* w = pipelink_find_attr(attrs, n_attrs, "weights");
    const PipeLinkAttr* d = pipelink_find_attr(attrs, n_attrs, "dims");
    const PipeLinkAttr* m = pipelink_find_attr(attrs, n_attrs, "mode");
    if (!w || w->type != PIPELINK_ATTR_FLOATS || !d || d->type != PIPELINK_ATTR_INTS || !m || m->type != PIPELINK_ATTR_STR)
        return PIPELINK_ERR_INVALID_ARGUMENT;
    double sw = 0, sd = 0;
    for (int32_t i = 0; i < w->count; ++i) sw += w->value.floats[i];
    for (int32_t i = 0; i < d->count; ++i) sd += (double)d->value.ints[i];
    y[0] = pipelink_attr_float(attrs, n_attrs, "alpha", -1);
    y[1] = (double)pipelink_attr_int(attrs, n_attrs, "count", -1);
    y[2] = (double)pipelink_attr_int(attrs, n_attrs, "flag", -1);
    y[3] = sw; y[4] = sd; y[5] = (double)strlen(m->value.s) + 1000.0 * (m->count == (int32_t)strlen(m->value.s));
    y[6] = (double)n_attrs;
    y[7] = (double)pipelink_attr_int(attrs, n_attrs, "block", -1);
    return PIPELINK_SUCCESS;
}

/* sizeof/offsetof facts for the Python ctypes mirrors. */
PIPELINK_EXTERN_C PIPELINK_EXPORT void good_layout(int64_t* o) {
    o[0] = sizeof(PipeLinkTensor); o[1] = offsetof(PipeLinkTensor, ndim); o[2] = offsetof(PipeLinkTensor, dtype);
    o[3] = offsetof(PipeLinkTensor, shape); o[4] = offsetof(PipeLinkTensor, strides); o[5] = offsetof(PipeLinkTensor, byte_offset);
    o[6] = sizeof(PipeLinkAttr); o[7] = offsetof(PipeLinkAttr, value); o[8] = sizeof(PipeLinkServices);
    o[9] = offsetof(PipeLinkServices, user); o[10] = offsetof(PipeLinkServices, workspace);
}

PIPELINK_VERSION(scale_add, 1, 0, 0)
PIPELINK_VERSION(row_sum, 1, 1, 0)
PIPELINK_VERSION(attr_probe, 1, 0, 0)

PIPELINK_MANIFEST(
  {"name": "scale_add", "version": "1.0.0", "entry": "scale_add_compute", "devices": ["cpu"],
   "context_create": "scale_add_create", "context_destroy": "scale_add_destroy",
   "workspace_size": "scale_add_workspace",
   "inputs": [{"name": "x", "shape": ["...", "C"], "dtype": "float32"},
              {"name": "b", "shape": ["C"], "dtype": "float32", "optional": true}],
   "outputs": [{"name": "y", "shape": "x", "dtype": "float32"}],
   "attrs": [{"name": "alpha", "type": "float", "default": 1.0}],
   "doc": "y = alpha * x + b"},
  {"name": "row_sum", "version": "1.1.0", "entry": "row_sum_compute", "devices": ["cpu"],
   "inputs": [{"name": "x", "shape": ["N", "C"], "dtype": "T"}],
   "outputs": [{"name": "y", "shape": ["N"], "dtype": "T"}],
   "dtype_vars": {"T": ["float32", "float64"]},
   "required_features": [{"feature": "fp64", "minimum": 1}]},
  {"name": "attr_probe", "version": "1.0.0", "entry": "attr_probe_compute", "devices": ["cpu"],
   "inputs": [{"name": "x", "shape": ["K"], "dtype": "float64"}],
   "outputs": [{"name": "y", "shape": [8], "dtype": "float64"}],
   "attrs": [{"name": "alpha", "type": "float", "default": 0.5}, {"name": "count", "type": "int", "default": 3},
             {"name": "flag", "type": "bool", "default": false}, {"name": "weights", "type": "floats"},
             {"name": "dims", "type": "ints", "default": [1, 2]}, {"name": "mode", "type": "str", "default": "fast"}],
   "tunables": {"block": [64, 128]}}
)
