/* c_api_test.c - the seed's C API exercised from C (driven by test_c_api.py).
 *
 *   c_api_test api DIR            every bad argument, the LayerNorm walkthrough, policies, threads
 *   c_api_test fuzz PLAN N SEED   N truncations and bit flips of a valid plan: a status, never a crash
 *
 * DIR holds what the pytest fixture prepared: ln.plk (the walkthrough with its C twin), lnw.plk (the same with
 * gamma and beta bound as constants), ops.plk, skip.plk, fail.plk, ln.json, tampered/ln.plk (its module changed after compiling) and moved/ (a plan without its
 * module). Prints one line per failed check and exits 1 if any failed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipelink/runtime.h"

void plk_sha256(const void* data, size_t n, uint8_t out[32]); /* the runtime's own, compiled in */

static int failures, checks;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        ++checks;                                                                 \
        if (!(cond)) {                                                            \
            ++failures;                                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                  \
            fprintf(stderr, __VA_ARGS__);                                         \
            fprintf(stderr, " [last message: %s]\n", pipeLinkGetLastErrorMessage()); \
        }                                                                         \
    } while (0)

#define EXPECT(call, status) CHECK((call) == (status), "%s should be %s", #call, #status)

static char dir[4096];

static const char* path_of(const char* name) {
    static _Thread_local char buf[8192];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static uint8_t* read_all(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t* b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static void write_all(const char* path, const uint8_t* b, size_t n) {
    FILE* f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static PipeLinkTensor tensor(void* data, int32_t ndim, int64_t* shape, uint8_t code, uint8_t bits) {
    PipeLinkTensor t;
    memset(&t, 0, sizeof t);
    t.data = data, t.ndim = ndim, t.shape = shape;
    t.device.device_type = PIPELINK_DEVICE_CPU;
    t.dtype.code = code, t.dtype.bits = bits, t.dtype.lanes = 1;
    return t;
}

static float frand(unsigned* seed) { return (float)rand_r(seed) / (float)RAND_MAX * 4.0f - 2.0f; }

/* ---- the LayerNorm walkthrough: input [8,1024], gamma, beta [1024], eps 0-d; out y, mean, rstd ---- */
enum { N = 8, C = 1024 };

typedef struct LNCase {
    float x[N * C], gamma[C], beta[C], eps;
    double y[N * C], mean[N], rstd[N]; /* the reference: Welford's single pass, in double */
} LNCase;

static void ln_reference(LNCase* k) {
    for (int i = 0; i < N; ++i) {
        double mean = 0, m2 = 0;
        for (int j = 0; j < C; ++j) {
            double d = k->x[i * C + j] - mean;
            mean += d / (j + 1);
            m2 += d * (k->x[i * C + j] - mean);
        }
        k->mean[i] = mean, k->rstd[i] = 1.0 / sqrt(m2 / C + k->eps);
        for (int j = 0; j < C; ++j) k->y[i * C + j] = (k->x[i * C + j] - mean) * k->rstd[i] * k->gamma[j] + k->beta[j];
    }
}

static void ln_case(LNCase* k, unsigned seed) {
    for (int i = 0; i < N * C; ++i) k->x[i] = frand(&seed) + 0.5f;
    for (int j = 0; j < C; ++j) k->gamma[j] = frand(&seed), k->beta[j] = frand(&seed);
    k->eps = 1e-5f;
    ln_reference(k);
}

static int close_to(double got, double want) { return fabs(got - want) <= 1e-4 * fabs(want) + 1e-5; }

static int ln_matches(const LNCase* k, const float* y, const float* mean, const float* rstd) {
    for (int i = 0; i < N * C; ++i)
        if (!close_to(y[i], k->y[i])) return 0;
    for (int i = 0; i < N; ++i)
        if (!close_to(mean[i], k->mean[i]) || !close_to(rstd[i], k->rstd[i])) return 0;
    return 1;
}

static int64_t x_shape[2] = {N, C}, c_shape[1] = {C}, n_shape[1] = {N};

static void ln_inputs(LNCase* k, PipeLinkTensor in[4]) {
    in[0] = tensor(k->x, 2, x_shape, PIPELINK_DL_FLOAT, 32);
    in[1] = tensor(k->gamma, 1, c_shape, PIPELINK_DL_FLOAT, 32);
    in[2] = tensor(k->beta, 1, c_shape, PIPELINK_DL_FLOAT, 32);
    in[3] = tensor(&k->eps, 0, NULL, PIPELINK_DL_FLOAT, 32);
}

static void test_layernorm(PipeLinkPipelineHandle h) {
    static LNCase k;
    ln_case(&k, 7);
    PipeLinkTensor in[4], out[3];
    ln_inputs(&k, in);

    PipeLinkPipelineInfo info;
    EXPECT(pipeLinkGetPipelineInfo(h, &info), PIPELINK_SUCCESS);
    CHECK(info.n_inputs == 4 && info.n_outputs == 3 && info.device_type == PIPELINK_DEVICE_CPU, "info counts");
    CHECK(strcmp(info.inputs[0].name, "input_tensor") == 0 && strcmp(info.inputs[3].name, "eps_scalar") == 0,
          "inputs in the config's order of first use");
    CHECK(strcmp(info.outputs[0].name, "norm_output") == 0 && strcmp(info.outputs[2].name, "rstd_tensor") == 0,
          "outputs in order of production");
    CHECK(info.inputs[0].ndim == 2 && info.inputs[0].shape[1] == C && info.inputs[3].ndim == 0, "input shapes");
    CHECK(info.outputs[1].dtype_id == PIPELINK_DTYPE_FLOAT32 && info.outputs[1].shape[0] == N, "output info");

    /* Outputs allocated by the runtime (data NULL): shape filled in, released with pipeLinkFree. */
    memset(out, 0, sizeof out);
    PipeLinkPoolStats before, after;
    pipeLinkGetMemoryPoolStats(&before);
    EXPECT(pipeLinkExecute(h, in, 4, out, 3), PIPELINK_SUCCESS);
    CHECK(out[0].data && out[0].ndim == 2 && out[0].shape[0] == N && out[0].shape[1] == C, "allocated output");
    CHECK(out[1].ndim == 1 && out[1].shape[0] == N && out[1].dtype.bits == 32, "allocated mean");
    if (out[0].data && out[1].data && out[2].data)
        CHECK(ln_matches(&k, out[0].data, out[1].data, out[2].data), "LayerNorm differs from the C reference");
    pipeLinkGetMemoryPoolStats(&after);
    CHECK(after.n_allocations == before.n_allocations + 3, "three outputs live in the pool");
    for (int i = 0; i < 3; ++i) EXPECT(pipeLinkFree(out[i].data), PIPELINK_SUCCESS);

    /* Outputs in place, poisoned first: every element written. */
    static float y[N * C], mean[N], rstd[N];
    for (int i = 0; i < N * C; ++i) y[i] = NAN;
    for (int i = 0; i < N; ++i) mean[i] = rstd[i] = NAN;
    out[0] = tensor(y, 2, x_shape, PIPELINK_DL_FLOAT, 32);
    out[1] = tensor(mean, 1, n_shape, PIPELINK_DL_FLOAT, 32);
    out[2] = tensor(rstd, 1, n_shape, PIPELINK_DL_FLOAT, 32);
    EXPECT(pipeLinkExecute(h, in, 4, out, 3), PIPELINK_SUCCESS);
    CHECK(ln_matches(&k, y, mean, rstd), "LayerNorm in place differs from the C reference");
    CHECK(pipeLinkGetLastErrorMessage()[0] == '\0', "a clean run leaves no message");
    EXPECT(pipeLinkExecuteAsync(h, in, 4, out, 3, NULL), PIPELINK_SUCCESS);

    /* A strided input (the transpose of a [C, N] block) and a byte_offset: the same results. */
    static float xt[C * N + 1];
    for (int i = 0; i < N; ++i)
        for (int j = 0; j < C; ++j) xt[1 + j * N + i] = k.x[i * C + j];
    int64_t strides[2] = {1, N};
    PipeLinkTensor strided[4];
    memcpy(strided, in, sizeof strided);
    strided[0].data = xt, strided[0].strides = strides, strided[0].byte_offset = sizeof(float);
    for (int i = 0; i < N * C; ++i) y[i] = NAN;
    EXPECT(pipeLinkExecute(h, strided, 4, out, 3), PIPELINK_SUCCESS);
    CHECK(ln_matches(&k, y, mean, rstd), "a strided input gives other results");
}

static void test_bad_execute(PipeLinkPipelineHandle h) {
    static LNCase k;
    ln_case(&k, 3);
    PipeLinkTensor in[4], out[3], bad[4];
    ln_inputs(&k, in);
    memset(out, 0, sizeof out);
    EXPECT(pipeLinkExecute(NULL, in, 4, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkExecute((PipeLinkPipelineHandle)(uintptr_t)0xdeadbeefcafeull, in, 4, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkExecute((PipeLinkPipelineHandle)(uintptr_t)1, in, 4, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkExecute(h, in, 3, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkExecute(h, in, -1, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkExecute(h, in, 4, out, 2), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkExecute(h, NULL, 4, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkExecute(h, in, 4, NULL, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkExecuteAsync(h, in, 4, out, 3, (void*)0x1234), PIPELINK_ERR_INVALID_ARGUMENT);

    memcpy(bad, in, sizeof bad), bad[0].dtype.bits = 64;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_DTYPE_MISMATCH);
    memcpy(bad, in, sizeof bad), bad[1].dtype.code = PIPELINK_DL_INT;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_DTYPE_MISMATCH);
    memcpy(bad, in, sizeof bad), bad[2].dtype.lanes = 4;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_DTYPE_MISMATCH);
    int64_t wrong[2] = {N, C + 1};
    memcpy(bad, in, sizeof bad), bad[0].shape = wrong;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_SHAPE_MISMATCH);
    CHECK(strstr(pipeLinkGetLastErrorMessage(), "[8x1025]") != NULL, "the message shows the shape given");
    int64_t rank3[3] = {N, C, 1};
    memcpy(bad, in, sizeof bad), bad[0].ndim = 3, bad[0].shape = rank3;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_SHAPE_MISMATCH);
    memcpy(bad, in, sizeof bad), bad[0].shape = NULL;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_SHAPE_MISMATCH);
    memcpy(bad, in, sizeof bad), bad[0].data = NULL;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    memcpy(bad, in, sizeof bad), bad[0].device.device_type = PIPELINK_DEVICE_CUDA;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    memcpy(bad, in, sizeof bad), bad[0].device.device_type = 99;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    int64_t negative[2] = {-C, 1};
    memcpy(bad, in, sizeof bad), bad[0].strides = negative;
    EXPECT(pipeLinkExecute(h, bad, 4, out, 3), PIPELINK_ERR_INVALID_ARGUMENT);

    static float y[N * C], y2[N * C], mean[N], rstd[N];
    PipeLinkTensor o[3] = {tensor(y, 2, x_shape, PIPELINK_DL_FLOAT, 32), tensor(mean, 1, n_shape, PIPELINK_DL_FLOAT, 32),
                           tensor(rstd, 1, n_shape, PIPELINK_DL_FLOAT, 32)};
    PipeLinkTensor bo[3];
    memcpy(bo, o, sizeof bo), bo[1].shape = c_shape;
    EXPECT(pipeLinkExecute(h, in, 4, bo, 3), PIPELINK_ERR_SHAPE_MISMATCH);
    memcpy(bo, o, sizeof bo), bo[2].dtype.code = PIPELINK_DL_BFLOAT, bo[2].dtype.bits = 16;
    EXPECT(pipeLinkExecute(h, in, 4, bo, 3), PIPELINK_ERR_DTYPE_MISMATCH);
    int64_t transposed[2] = {1, N};
    memcpy(bo, o, sizeof bo), bo[0].data = y2, bo[0].strides = transposed;
    EXPECT(pipeLinkExecute(h, in, 4, bo, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    memcpy(bo, o, sizeof bo), bo[0].data = k.x; /* written while it is read */
    EXPECT(pipeLinkExecute(h, in, 4, bo, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    CHECK(strstr(pipeLinkGetLastErrorMessage(), "overlaps input 'input_tensor'") != NULL, "names both tensors");
    memcpy(bo, o, sizeof bo), bo[2].data = mean + 4; /* two outputs sharing bytes */
    EXPECT(pipeLinkExecute(h, in, 4, bo, 3), PIPELINK_ERR_INVALID_ARGUMENT);
    memcpy(bo, o, sizeof bo), bo[0].device.device_type = PIPELINK_DEVICE_CUDA;
    EXPECT(pipeLinkExecute(h, in, 4, bo, 3), PIPELINK_ERR_INVALID_ARGUMENT);

    PipeLinkPipelineInfo info;
    EXPECT(pipeLinkGetPipelineInfo(h, NULL), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetPipelineInfo(NULL, &info), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetPipelineInfo((PipeLinkPipelineHandle)(uintptr_t)0x700000001ull, &info), PIPELINK_ERR_INVALID_ARGUMENT);
}

/* ---- policies: ops.plk (identity, fallback, check_finite, context hooks, a passthrough output) ---- */
static void test_policies(void) {
    PipeLinkPipelineHandle h = NULL;
    EXPECT(pipeLinkLoadPipeline(path_of("ops.plk"), &h), PIPELINK_SUCCESS);
    float x[24], out[7][24];
    int64_t shape[2] = {4, 6};
    unsigned seed = 11;
    for (int neg = 0; neg < 2; ++neg) {
        for (int i = 0; i < 24; ++i) x[i] = fabsf(frand(&seed)) + 0.25f;
        if (neg) x[0] = -1.0f;
        PipeLinkTensor in = tensor(x, 2, shape, PIPELINK_DL_FLOAT, 32), o[7];
        for (int k = 0; k < 7; ++k) {
            for (int i = 0; i < 24; ++i) out[k][i] = NAN;
            o[k] = tensor(out[k], 2, shape, PIPELINK_DL_FLOAT, 32);
        }
        EXPECT(pipeLinkExecute(h, &in, 1, o, 7), PIPELINK_SUCCESS);
        const char* msg = pipeLinkGetLastErrorMessage();
        int ok = 1;
        for (int i = 0; i < 24; ++i) {
            float hh = 2 * x[i];
            ok &= out[0][i] == x[i];                                /* y: halve(double(x)) */
            ok &= out[1][i] == (neg ? hh : hh + 1);                 /* a: flaky, identity */
            ok &= fabsf(out[2][i] - (neg ? 3 * hh : hh + 3)) < 1e-5f; /* c: flaky, fallback scale(alpha 3) */
            ok &= out[3][i] == hh;                                  /* d: NaN caught, identity */
            ok &= out[4][i] == hh + 5;                              /* e: offset from context_create */
            ok &= out[5][i] == x[i];                                /* x passed through */
            ok &= out[6][i] == (neg ? hh : hh + 1);                 /* t: over timeout_ms, identity */
        }
        CHECK(ok, "policy results (negative input: %d)", neg);
        if (neg)
            CHECK(strstr(msg, "'ident' identity") && strstr(msg, "'fb' fallback:core_scale") && strstr(msg, "'finite' identity")
                  && strstr(msg, "non-finite") && strstr(msg, "'slow' identity") && strstr(msg, "over its timeout_ms"),
                  "a degraded run says which stages degraded and why: %s", msg);
        else
            CHECK(msg[0] == '\0', "a clean run leaves no message");
    }
    char json[4096];
    EXPECT(pipeLinkGetOperatorInfo("core_offset", json, sizeof json), PIPELINK_SUCCESS);
    CHECK(strstr(json, "\"context_create\": \"offset_create\"") != NULL, "operator info is the manifest entry: %s", json);
    EXPECT(pipeLinkGetOperatorInfo("core_offset", json, 8), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetOperatorInfo("no_such_op", json, sizeof json), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetOperatorInfo(NULL, json, sizeof json), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetOperatorInfo("core_offset", NULL, 10), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkDestroyPipeline(h), PIPELINK_SUCCESS);
    EXPECT(pipeLinkGetOperatorInfo("core_offset", json, sizeof json), PIPELINK_ERR_INVALID_ARGUMENT);
}

/* skip.plk: x -> double -> h (output); h -> flaky (skip) -> a; a -> halve -> b. fail.plk: flaky (fail). */
static void test_skip_and_fail(void) {
    PipeLinkPipelineHandle skip = NULL, fail = NULL;
    EXPECT(pipeLinkLoadPipeline(path_of("skip.plk"), &skip), PIPELINK_SUCCESS);
    EXPECT(pipeLinkLoadPipeline(path_of("fail.plk"), &fail), PIPELINK_SUCCESS);
    float x[24];
    int64_t shape[2] = {4, 6};
    for (int i = 0; i < 24; ++i) x[i] = (float)i + 1;
    x[0] = -3;
    PipeLinkTensor in = tensor(x, 2, shape, PIPELINK_DL_FLOAT, 32), o[3];
    memset(o, 0, sizeof o);
    PipeLinkPoolStats before, after;
    pipeLinkGetMemoryPoolStats(&before);
    EXPECT(pipeLinkExecute(skip, &in, 1, o, 3), PIPELINK_ERR_MODULE_CRASH);
    CHECK(strstr(pipeLinkGetLastErrorMessage(), "'a', 'b'") != NULL, "the message names the missing outputs");
    CHECK(o[0].data != NULL && ((float*)o[0].data)[1] == 4.0f, "the output produced before the skip is returned");
    CHECK(o[1].data == NULL && o[2].data == NULL, "missing outputs stay NULL");
    pipeLinkFree(o[0].data);
    pipeLinkGetMemoryPoolStats(&after);
    CHECK(after.n_allocations == before.n_allocations, "no output leaked");

    PipeLinkTensor fo;
    memset(&fo, 0, sizeof fo);
    EXPECT(pipeLinkExecute(fail, &in, 1, &fo, 1), PIPELINK_ERR_MODULE_CRASH);
    CHECK(strstr(pipeLinkGetLastErrorMessage(), "stage 'boom'") != NULL, "the message names the stage");
    CHECK(fo.data == NULL, "a failed run returns no allocated output");
    pipeLinkGetMemoryPoolStats(&after);
    CHECK(after.n_allocations == before.n_allocations, "a failed run frees what it allocated");
    x[0] = 3;
    EXPECT(pipeLinkExecute(fail, &in, 1, &fo, 1), PIPELINK_SUCCESS);
    CHECK(fo.data && ((float*)fo.data)[0] == 3.0f, "fail.plk runs when the module succeeds");
    pipeLinkFree(fo.data);
    EXPECT(pipeLinkDestroyPipeline(skip), PIPELINK_SUCCESS);
    EXPECT(pipeLinkDestroyPipeline(fail), PIPELINK_SUCCESS);
    EXPECT(pipeLinkDestroyPipeline(skip), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkExecute(skip, &in, 1, o, 3), PIPELINK_ERR_INVALID_ARGUMENT);
}

/* ---- constants: lnw.plk is ln with gamma and beta bound by a weights file (conftest.py writes them as
 * below); the caller passes only the real inputs, x and eps ---- */
static void test_constants(void) {
    static LNCase k;
    ln_case(&k, 11);
    for (int j = 0; j < C; ++j) k.gamma[j] = (float)(j % 7) * 0.25f - 0.5f, k.beta[j] = (float)(j % 5) * 0.125f - 0.25f;
    ln_reference(&k);
    PipeLinkPipelineHandle h = NULL;
    EXPECT(pipeLinkLoadPipeline(path_of("lnw.plk"), &h), PIPELINK_SUCCESS);
    PipeLinkPipelineInfo info;
    EXPECT(pipeLinkGetPipelineInfo(h, &info), PIPELINK_SUCCESS);
    CHECK(info.n_inputs == 2 && strcmp(info.inputs[0].name, "input_tensor") == 0 &&
          strcmp(info.inputs[1].name, "eps_scalar") == 0 && info.n_outputs == 3, "only the real inputs are reported");
    PipeLinkTensor in[2] = {tensor(k.x, 2, x_shape, PIPELINK_DL_FLOAT, 32), tensor(&k.eps, 0, NULL, PIPELINK_DL_FLOAT, 32)};
    static float y[N * C], mean[N], rstd[N];
    for (int run = 0; run < 2; ++run) { /* the second run reuses the context: the constants stay */
        for (int i = 0; i < N * C; ++i) y[i] = NAN;
        for (int i = 0; i < N; ++i) mean[i] = rstd[i] = NAN;
        PipeLinkTensor out[3] = {tensor(y, 2, x_shape, PIPELINK_DL_FLOAT, 32), tensor(mean, 1, n_shape, PIPELINK_DL_FLOAT, 32),
                                 tensor(rstd, 1, n_shape, PIPELINK_DL_FLOAT, 32)};
        EXPECT(pipeLinkExecute(h, in, 2, out, 3), PIPELINK_SUCCESS);
        CHECK(ln_matches(&k, y, mean, rstd), "the walkthrough with bound gamma and beta matches the C reference");
    }
    PipeLinkTensor four[4], out[3];
    ln_inputs(&k, four);
    memset(out, 0, sizeof out);
    EXPECT(pipeLinkExecute(h, four, 4, out, 3), PIPELINK_ERR_INVALID_ARGUMENT); /* constants are no inputs */
    CHECK(strstr(pipeLinkGetLastErrorMessage(), "takes 2 inputs") != NULL, "the message gives the count");
    EXPECT(pipeLinkDestroyPipeline(h), PIPELINK_SUCCESS); /* corrupt constants: test_constants.py */
}

/* ---- what loaded pipelines hold: pipeLinkGetArenaStats ---- */
static PipeLinkArenaStats cpu_held(void) {
    PipeLinkArenaStats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    EXPECT(pipeLinkGetArenaStats(PIPELINK_DEVICE_CPU, 0, &s), PIPELINK_SUCCESS);
    return s;
}

static void test_arena_stats(void) {
    PipeLinkArenaStats bad;
    memset(&bad, 0, sizeof bad);
    EXPECT(pipeLinkGetArenaStats(PIPELINK_DEVICE_CPU, 0, NULL), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetArenaStats(PIPELINK_DEVICE_CPU, 0, &bad), PIPELINK_ERR_INVALID_ARGUMENT); /* size 0 */
    CHECK(strstr(pipeLinkGetLastErrorMessage(), "sizeof(PipeLinkArenaStats)") != NULL, "the message says what to set");
    bad.size = sizeof bad;
    EXPECT(pipeLinkGetArenaStats(PIPELINK_DEVICE_CPU, 1, &bad), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetArenaStats(PIPELINK_DEVICE_CUDA, 1025, &bad), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetArenaStats(PIPELINK_DEVICE_CUDA, -1, &bad), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetArenaStats(7, 0, &bad), PIPELINK_ERR_INVALID_ARGUMENT);
    struct { PipeLinkArenaStats s; uint64_t later[4]; } newer; /* a caller built against a later header */
    memset(&newer, 0xAB, sizeof newer);
    newer.s.size = sizeof newer;
    EXPECT(pipeLinkGetArenaStats(PIPELINK_DEVICE_CUDA, 0, &newer.s), PIPELINK_SUCCESS);
    CHECK(newer.s.size == sizeof(PipeLinkArenaStats) && newer.later[0] == 0xABABABABABABABABull,
          "the runtime fills the fields it knows and says how many bytes");

    static LNCase k;
    ln_case(&k, 12);
    for (int j = 0; j < C; ++j) k.gamma[j] = (float)(j % 7) * 0.25f - 0.5f, k.beta[j] = (float)(j % 5) * 0.125f - 0.25f;
    ln_reference(&k);
    PipeLinkArenaStats s0 = cpu_held();
    PipeLinkPipelineHandle h = NULL;
    EXPECT(pipeLinkLoadPipeline(path_of("lnw.plk"), &h), PIPELINK_SUCCESS);
    PipeLinkArenaStats s1 = cpu_held();
    CHECK(s1.constant_bytes == s0.constant_bytes + 2 * C * sizeof(float), "the bound gamma and beta count from the load");
    CHECK(s1.n_contexts == s0.n_contexts && s1.arena_bytes == s0.arena_bytes, "no context before the first run");
    PipeLinkPipelineInfo info;
    EXPECT(pipeLinkGetPipelineInfo(h, &info), PIPELINK_SUCCESS);
    CHECK(info.arena_bytes > 0, "the walkthrough's plan has an arena (the test must be able to fail)");
    PipeLinkTensor in[2] = {tensor(k.x, 2, x_shape, PIPELINK_DL_FLOAT, 32), tensor(&k.eps, 0, NULL, PIPELINK_DL_FLOAT, 32)};
    static float y[N * C], mean[N], rstd[N];
    for (int run = 0; run < 2; ++run) {
        PipeLinkTensor out[3] = {tensor(y, 2, x_shape, PIPELINK_DL_FLOAT, 32), tensor(mean, 1, n_shape, PIPELINK_DL_FLOAT, 32),
                                 tensor(rstd, 1, n_shape, PIPELINK_DL_FLOAT, 32)};
        EXPECT(pipeLinkExecute(h, in, 2, out, 3), PIPELINK_SUCCESS);
        PipeLinkArenaStats s2 = cpu_held();
        CHECK(s2.n_contexts == s0.n_contexts + 1 && s2.arena_bytes == s0.arena_bytes + info.arena_bytes,
              "one context and its arena from the first run on (run %d)", run);
        CHECK(s2.peak_bytes >= s2.arena_bytes + s2.workspace_bytes + s2.constant_bytes, "the peak covers what is held");
    }
    CHECK(ln_matches(&k, y, mean, rstd), "the run is right");
    EXPECT(pipeLinkDestroyPipeline(h), PIPELINK_SUCCESS);
    PipeLinkArenaStats s3 = cpu_held();
    CHECK(s3.n_contexts == s0.n_contexts && s3.arena_bytes == s0.arena_bytes && s3.constant_bytes == s0.constant_bytes &&
          s3.workspace_bytes == s0.workspace_bytes, "destroy gives everything back");
}

/* ---- plan files that must be refused ---- */
static PipeLinkStatus load_bytes(const uint8_t* b, size_t n, const char* name) {
    const char* p = path_of(name);
    write_all(p, b, n);
    PipeLinkPipelineHandle h = NULL;
    PipeLinkStatus st = pipeLinkLoadPipeline(p, &h);
    if (st == PIPELINK_SUCCESS) pipeLinkDestroyPipeline(h);
    else CHECK(h == NULL && pipeLinkGetLastErrorMessage()[0] != '\0', "a refused load leaves no handle and says why");
    return st;
}

static void test_bad_plans(void) {
    PipeLinkPipelineHandle h = (PipeLinkPipelineHandle)(uintptr_t)5;
    EXPECT(pipeLinkLoadPipeline(NULL, &h), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkLoadPipeline(path_of("ln.plk"), NULL), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkLoadPipeline(path_of("no-such.plk"), &h), PIPELINK_ERR_INVALID_ARGUMENT);
    CHECK(h == NULL, "a failed load sets the handle to NULL");
    size_t n = 0;
    uint8_t* plan = read_all(path_of("ln.plk"), &n);
    uint8_t* b = malloc(n);
    EXPECT(load_bytes((const uint8_t*)"hello, world\n", 13, "bad.plk"), PIPELINK_ERR_INVALID_CONFIG);
    EXPECT(load_bytes(plan, 40, "bad.plk"), PIPELINK_ERR_INTEGRITY);
    EXPECT(load_bytes(plan, n - 1, "bad.plk"), PIPELINK_ERR_INTEGRITY);
    memcpy(b, plan, n), b[8] = 6; /* a version after this runtime's (5) */
    EXPECT(load_bytes(b, n, "bad.plk"), PIPELINK_ERR_VERSION_MISMATCH);
    memcpy(b, plan, n), b[8] = 0;
    EXPECT(load_bytes(b, n, "bad.plk"), PIPELINK_ERR_VERSION_MISMATCH);
    /* a CPU plan relabelled CUDA: well formed, but compiled for compute capability 0.0 (and here, maybe, no GPU) */
    memcpy(b, plan, n), b[16] = PIPELINK_DEVICE_CUDA;
    EXPECT(load_bytes(b, n, "bad.plk"), PIPELINK_ERR_HARDWARE_UNSUPPORTED);
    { /* the policy plan relabelled CUDA: its timeout_ms cannot be measured on the device */
        size_t m = 0;
        uint8_t* ops = read_all(path_of("ops.plk"), &m);
        ops[16] = PIPELINK_DEVICE_CUDA;
        EXPECT(load_bytes(ops, m, "bad.plk"), PIPELINK_ERR_INTEGRITY);
        CHECK(strstr(pipeLinkGetLastErrorMessage(), "without timeout_ms") != NULL, "the message says why");
        free(ops);
    }
    memcpy(b, plan, n), b[16] = 42;
    EXPECT(load_bytes(b, n, "bad.plk"), PIPELINK_ERR_INTEGRITY);
    memcpy(b, plan, n), b[n / 2] ^= 0x10;
    EXPECT(load_bytes(b, n, "bad.plk"), PIPELINK_ERR_INTEGRITY);
    EXPECT(pipeLinkLoadPipeline(path_of("tampered/ln.plk"), &h), PIPELINK_ERR_INTEGRITY);
    CHECK(strstr(pipeLinkGetLastErrorMessage(), "sha256") != NULL, "a changed module is named by its digest");
    EXPECT(pipeLinkLoadPipeline(path_of("moved/ln.plk"), &h), PIPELINK_ERR_MODULE_LOAD_FAILED);
    free(b), free(plan);
}

/* ---- memory, hardware, cuBLAS ---- */
static void test_memory_and_hardware(void) {
    void* p = NULL;
    int on_stack = 0;
    /* The default allocator: device memory (ASYNC) where a CUDA device is usable, else the host pool. */
    PipeLinkPoolStats k0;
    EXPECT(pipeLinkGetMemoryPoolStats(&k0), PIPELINK_SUCCESS);
    void* has_driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (has_driver == NULL) {
        CHECK(k0.allocator == PIPELINK_ALLOCATOR_HOST, "no driver: the default allocator is HOST");
        EXPECT(pipeLinkSetMemoryAllocator(PIPELINK_ALLOCATOR_ASYNC), PIPELINK_ERR_HARDWARE_UNSUPPORTED);
        CHECK(strstr(pipeLinkGetLastErrorMessage(), "PIPELINK_ALLOCATOR_HOST") != NULL &&
              strstr(pipeLinkGetLastErrorMessage(), "libcuda.so.1") != NULL, "the message says why and what to use");
        EXPECT(pipeLinkSetMemoryAllocator(PIPELINK_ALLOCATOR_LEGACY), PIPELINK_ERR_HARDWARE_UNSUPPORTED);
        pipeLinkGetMemoryPoolStats(&k0);
        CHECK(k0.allocator == PIPELINK_ALLOCATOR_HOST, "a refused choice changes nothing");
    } else {
        CHECK(k0.allocator == PIPELINK_ALLOCATOR_ASYNC || k0.allocator == PIPELINK_ALLOCATOR_HOST,
              "with a driver: ASYNC if it has a device, else HOST");
        dlclose(has_driver);
    }
    /* The host pool, whatever the default. */
    EXPECT(pipeLinkSetMemoryAllocator(PIPELINK_ALLOCATOR_HOST), PIPELINK_SUCCESS);
    EXPECT(pipeLinkMalloc(NULL, 16), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkMalloc(&p, (size_t)1 << 62), PIPELINK_ERR_OUT_OF_MEMORY);
    CHECK(p == NULL, "a refused allocation leaves NULL");
    PipeLinkPoolStats s0, s1;
    EXPECT(pipeLinkGetMemoryPoolStats(NULL), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkClearMemoryPool(), PIPELINK_SUCCESS);
    pipeLinkGetMemoryPoolStats(&s0);
    EXPECT(pipeLinkMalloc(&p, 1000), PIPELINK_SUCCESS);
    CHECK(p != NULL && ((uintptr_t)p & 255) == 0, "256-byte aligned");
    memset(p, 0xCD, 1000);
    pipeLinkGetMemoryPoolStats(&s1);
    CHECK(s1.allocated_bytes == s0.allocated_bytes + 1024 && s1.n_allocations == s0.n_allocations + 1, "rounded to 1024");
    CHECK(s1.peak_bytes >= s1.allocated_bytes, "peak");
    EXPECT(pipeLinkFree(p), PIPELINK_SUCCESS);
    EXPECT(pipeLinkFree(p), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkFree(&on_stack), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkFree((void*)(uintptr_t)0x10), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkFree(NULL), PIPELINK_SUCCESS);
    pipeLinkGetMemoryPoolStats(&s1);
    CHECK(s1.cached_bytes == s0.cached_bytes + 1024, "a freed block is cached");
    void* q = NULL;
    EXPECT(pipeLinkMalloc(&q, 900), PIPELINK_SUCCESS);
    pipeLinkGetMemoryPoolStats(&s1);
    CHECK(q == p && s1.n_reused == s0.n_reused + 1, "the cached block is reused");
    pipeLinkFree(q);
    EXPECT(pipeLinkClearMemoryPool(), PIPELINK_SUCCESS);
    pipeLinkGetMemoryPoolStats(&s1);
    CHECK(s1.cached_bytes == 0, "clear empties the cache");

    EXPECT(pipeLinkSetMemoryAllocator((PipeLinkAllocator)7), PIPELINK_ERR_INVALID_ARGUMENT);
    pipeLinkGetMemoryPoolStats(&s1);
    CHECK(s1.allocator == PIPELINK_ALLOCATOR_HOST, "the allocator choice is reported");
    if (k0.allocator == PIPELINK_ALLOCATOR_ASYNC) { /* a GPU host: the device kinds are accepted and reported */
        EXPECT(pipeLinkSetMemoryAllocator(PIPELINK_ALLOCATOR_LEGACY), PIPELINK_SUCCESS);
        pipeLinkGetMemoryPoolStats(&s1);
        CHECK(s1.allocator == PIPELINK_ALLOCATOR_LEGACY, "the allocator choice is reported");
    }
    EXPECT(pipeLinkSetMemoryAllocator((PipeLinkAllocator)k0.allocator), PIPELINK_SUCCESS);

    EXPECT(pipeLinkValidateHardware(NULL), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkValidateHardware(""), PIPELINK_SUCCESS);
    EXPECT(pipeLinkValidateHardware("device=cpu"), PIPELINK_SUCCESS);
    EXPECT(pipeLinkValidateHardware("bogus>=1"), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkValidateHardware("compute_capability=>8.0"), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkValidateHardware("compute_capability>=eight"), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkValidateHardware("compute_capability>=8.0x"), PIPELINK_ERR_INVALID_ARGUMENT);
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    PipeLinkStatus st = pipeLinkValidateHardware("compute_capability>=8.0");
    if (driver == NULL) {
        CHECK(st == PIPELINK_ERR_HARDWARE_UNSUPPORTED, "no driver: compute_capability cannot be met");
        CHECK(strstr(pipeLinkGetLastErrorMessage(), "libcuda.so.1") != NULL, "the message says why");
        EXPECT(pipeLinkValidateHardware("device=cuda"), PIPELINK_ERR_HARDWARE_UNSUPPORTED);
        CHECK(pipeLinkGetCublasHandle(NULL) == NULL && strstr(pipeLinkGetLastErrorMessage(), "libcuda.so.1") != NULL,
              "no cuBLAS handle without a driver, and the message says why");
    } else {
        CHECK(st == PIPELINK_SUCCESS || st == PIPELINK_ERR_HARDWARE_UNSUPPORTED, "a status either way");
        EXPECT(pipeLinkValidateHardware("compute_capability>=99.0"), PIPELINK_ERR_HARDWARE_UNSUPPORTED);
        void* first = pipeLinkGetCublasHandle(NULL); /* the legacy default stream */
        CHECK(first == NULL ? pipeLinkGetLastErrorMessage()[0] != '\0' : pipeLinkGetCublasHandle(NULL) == first,
              "one cuBLAS handle per stream, reused (or a message saying why there is none)");
        dlclose(driver);
    }
}

/* ---- one pipeline, many threads: each run on fresh data compared with its reference ---- */
typedef struct Worker { PipeLinkPipelineHandle h; unsigned seed; int bad; } Worker;

static void* worker(void* arg) {
    Worker* w = arg;
    LNCase* k = malloc(sizeof *k);
    static _Thread_local float y[N * C], mean[N], rstd[N];
    for (int run = 0; run < 20; ++run) {
        ln_case(k, w->seed * 1000 + (unsigned)run);
        PipeLinkTensor in[4], out[3] = {tensor(y, 2, x_shape, PIPELINK_DL_FLOAT, 32),
                                       tensor(mean, 1, n_shape, PIPELINK_DL_FLOAT, 32),
                                       tensor(rstd, 1, n_shape, PIPELINK_DL_FLOAT, 32)};
        ln_inputs(k, in);
        if (pipeLinkExecute(w->h, in, 4, out, 3) != PIPELINK_SUCCESS || !ln_matches(k, y, mean, rstd)) ++w->bad;
    }
    free(k);
    return NULL;
}

static void test_threads(PipeLinkPipelineHandle h) {
    enum { T = 8 };
    pthread_t t[T];
    Worker w[T];
    for (int i = 0; i < T; ++i) w[i] = (Worker){h, (unsigned)i + 1, 0}, pthread_create(&t[i], NULL, worker, &w[i]);
    int bad = 0;
    for (int i = 0; i < T; ++i) pthread_join(t[i], NULL), bad += w[i].bad;
    CHECK(bad == 0, "%d of %d concurrent runs failed or differed", bad, T * 20);
}

/* Destroying a pipeline while other threads execute it: each run either finishes or is refused. */
typedef struct Racer { PipeLinkPipelineHandle h; int ok, refused, other; } Racer;

static void* racer(void* arg) {
    Racer* r = arg;
    static _Thread_local LNCase k;
    ln_case(&k, 5);
    for (int run = 0; run < 200; ++run) {
        PipeLinkTensor in[4], out[3];
        ln_inputs(&k, in);
        memset(out, 0, sizeof out);
        PipeLinkStatus st = pipeLinkExecute(r->h, in, 4, out, 3);
        if (st == PIPELINK_SUCCESS) ++r->ok;
        else if (st == PIPELINK_ERR_INVALID_ARGUMENT) ++r->refused;
        else ++r->other;
        for (int i = 0; i < 3; ++i) pipeLinkFree(out[i].data);
    }
    return NULL;
}

static void test_destroy_while_running(void) {
    enum { T = 4 };
    PipeLinkPipelineHandle h = NULL;
    EXPECT(pipeLinkLoadPipeline(path_of("ln.plk"), &h), PIPELINK_SUCCESS);
    pthread_t t[T];
    Racer r[T];
    for (int i = 0; i < T; ++i) r[i] = (Racer){h, 0, 0, 0}, pthread_create(&t[i], NULL, racer, &r[i]);
    usleep(2000);
    EXPECT(pipeLinkDestroyPipeline(h), PIPELINK_SUCCESS);
    int ok = 0, refused = 0, other = 0;
    for (int i = 0; i < T; ++i) pthread_join(t[i], NULL), ok += r[i].ok, refused += r[i].refused, other += r[i].other;
    CHECK(other == 0 && ok + refused == T * 200, "runs racing a destroy: %d ok, %d refused, %d other", ok, refused, other);
    CHECK(refused > 0, "runs after the destroy are refused");
}

static int run_api(void) {
    PipeLinkPipelineHandle h = NULL;
    CHECK(pipeLinkGetLastErrorMessage() != NULL, "never NULL");
    EXPECT(pipeLinkLoadPipeline(path_of("ln.plk"), &h), PIPELINK_ERR_INVALID_ARGUMENT); /* before Initialize */
    EXPECT(pipeLinkFinalize(), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkInitialize(), PIPELINK_SUCCESS);
    EXPECT(pipeLinkLoadPipeline(path_of("ln.plk"), &h), PIPELINK_SUCCESS);
    test_layernorm(h);
    test_bad_execute(h);
    test_threads(h);
    test_destroy_while_running();
    test_policies();
    test_skip_and_fail();
    test_constants();
    test_arena_stats();
    test_bad_plans();
    test_memory_and_hardware();

    /* A JSON config compiles through the Python package (PIPELINK_PYTHON names the interpreter). */
    PipeLinkPipelineHandle from_json = NULL;
    EXPECT(pipeLinkLoadPipeline(path_of("ln.json"), &from_json), PIPELINK_SUCCESS);
    PipeLinkPipelineInfo info;
    EXPECT(pipeLinkGetPipelineInfo(from_json, &info), PIPELINK_SUCCESS);
    CHECK(info.n_inputs == 4, "the compiled config");
    const char* python = getenv("PIPELINK_PYTHON");
    char saved[4096];
    snprintf(saved, sizeof saved, "%s", python ? python : "");
    setenv("PIPELINK_PYTHON", "/nonexistent/python3", 1);
    PipeLinkPipelineHandle none = NULL;
    EXPECT(pipeLinkLoadPipeline(path_of("ln.json"), &none), PIPELINK_ERR_INVALID_ARGUMENT);
    CHECK(strstr(pipeLinkGetLastErrorMessage(), "could not be started") && strstr(pipeLinkGetLastErrorMessage(),
          "pipelink compile"), "the message says what happened and to run pipelink compile");
    setenv("PIPELINK_PYTHON", saved, 1);
    EXPECT(pipeLinkLoadPipeline(path_of("bad.json"), &none), PIPELINK_ERR_INVALID_CONFIG); /* the CLI's exit 2 */
    setenv("PIPELINK_PYTHON", saved, 1);

    /* Destroyed and finalized handles are refused, never dereferenced. */
    EXPECT(pipeLinkDestroyPipeline(h), PIPELINK_SUCCESS);
    EXPECT(pipeLinkDestroyPipeline(h), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkGetPipelineInfo(h, &info), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkDestroyPipeline(NULL), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkFinalize(), PIPELINK_SUCCESS);
    EXPECT(pipeLinkGetPipelineInfo(from_json, &info), PIPELINK_ERR_INVALID_ARGUMENT);
    EXPECT(pipeLinkFinalize(), PIPELINK_ERR_INVALID_ARGUMENT);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}

/* ---- fuzz: truncations and bit flips; half the flips re-sign the payload so the parser sees them ---- */
static int run_fuzz(const char* plan_path, long n, unsigned seed) {
    size_t len = 0;
    uint8_t* plan = read_all(plan_path, &len);
    if (plan == NULL || len < 64) return fprintf(stderr, "cannot read %s\n", plan_path), 2;
    snprintf(dir, sizeof dir, "%s", plan_path);
    *strrchr(dir, '/') = '\0'; /* the mutated plans sit beside the valid one: same module paths */
    pipeLinkInitialize();
    uint8_t* b = malloc(len);
    int counts[16] = {0};
    for (long i = 0; i < n; ++i) {
        memcpy(b, plan, len);
        size_t m = len;
        int kind = rand_r(&seed) % 3;
        if (kind == 0) {
            m = (size_t)rand_r(&seed) % len;
        } else {
            int flips = 1 + rand_r(&seed) % 4;
            size_t lo = kind == 2 ? 64 : 0;
            for (int f = 0; f < flips; ++f) b[lo + (size_t)rand_r(&seed) % (len - lo)] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
            if (kind == 2) plk_sha256(b + 64, len - 64, b + 32);
        }
        char name[64];
        snprintf(name, sizeof name, "fuzz-%d.plk", (int)getpid());
        const char* p = path_of(name);
        write_all(p, b, m);
        PipeLinkPipelineHandle h = NULL;
        PipeLinkStatus st = pipeLinkLoadPipeline(p, &h);
        if (st == PIPELINK_SUCCESS) {
            PipeLinkPipelineInfo info;
            CHECK(pipeLinkGetPipelineInfo(h, &info) == PIPELINK_SUCCESS, "a loaded plan reports its info");
            CHECK(pipeLinkDestroyPipeline(h) == PIPELINK_SUCCESS, "a loaded plan is destroyed");
        } else {
            CHECK(st > 0 && st <= 13 && h == NULL && pipeLinkGetLastErrorMessage()[0], "a known status and a message");
        }
        counts[st >= 0 && st < 16 ? st : 15]++;
        unlink(p);
    }
    pipeLinkFinalize();
    printf("fuzz %ld: ok %d, config %d, integrity %d, version %d, module %d, hardware %d; %d failed checks\n", n,
           counts[0], counts[1], counts[5], counts[4], counts[3], counts[8], failures);
    free(b), free(plan);
    return failures ? 1 : 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "api") == 0) {
        snprintf(dir, sizeof dir, "%s", argv[2]);
        return run_api();
    }
    if (argc == 5 && strcmp(argv[1], "fuzz") == 0) return run_fuzz(argv[2], atol(argv[3]), (unsigned)atoi(argv[4]));
    fprintf(stderr, "usage: %s api DIR | fuzz PLAN N SEED\n", argv[0]);
    return 2;
}
