/* native_core_harness.c - host time of pipeLinkExecuteAsync vs the bare launches it makes (benchmarks/native_core.py).
 *
 *   native_core_harness PLAN LAUNCHES ITERATIONS
 *
 * LAUNCHES describes the plan's kernel launches, one per line (written by native_core.py from the same compiled
 * steps): "CUBIN_PATH KERNEL GX GY GZ BX BY BZ SHMEM NPARAMS" then per parameter "p" (a pointer: the scratch
 * buffer), "n" (a null pointer), "i32:V", "i64:V", "f32:V" or "f64:V". Both loops enqueue ITERATIONS runs in
 * batches of 10 on one stream, timing only the enqueueing (the stream is drained between batches), and print
 * host microseconds per run. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipelink/runtime.h"

typedef int (*GetProc)(const char*, void**, int, uint64_t, int*);
static int (*cuInit_)(unsigned);
static int (*cuModuleLoadData_)(void**, const void*);
static int (*cuModuleGetFunction_)(void**, void*, const char*);
static int (*cuLaunchKernel_)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
static int (*cuStreamCreate_)(void**, unsigned);
static int (*cuStreamSynchronize_)(void*);
static int (*cuMemAlloc_)(uint64_t*, size_t);

typedef struct Launch {
    void* function;
    unsigned dims[7];
    int n;
    uint64_t values[64];
    void* args[64];
} Launch;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void* read_file(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void* b = malloc(*n);
    if (b && fread(b, 1, *n, f) != *n) free(b), b = NULL;
    fclose(f);
    return b;
}

int main(int argc, char** argv) {
    if (argc != 4) return fprintf(stderr, "usage: %s PLAN LAUNCHES ITERATIONS\n", argv[0]), 2;
    int iterations = atoi(argv[3]);
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
    GetProc get = cuda ? (GetProc)dlsym(cuda, "cuGetProcAddress_v2") : NULL;
    if (!get) return fprintf(stderr, "no CUDA driver\n"), 1;
#define RESOLVE(name) get(#name, (void**)&name##_, 12000, 0, NULL)
    RESOLVE(cuInit), RESOLVE(cuModuleLoadData), RESOLVE(cuModuleGetFunction);
    RESOLVE(cuLaunchKernel), RESOLVE(cuStreamCreate), RESOLVE(cuStreamSynchronize), RESOLVE(cuMemAlloc);
    cuInit_(0);

    PipeLinkPipelineHandle h = NULL;
    PipeLinkPipelineInfo info;
    if (pipeLinkInitialize() || pipeLinkLoadPipeline(argv[1], &h) || pipeLinkGetPipelineInfo(h, &info))
        return fprintf(stderr, "%s\n", pipeLinkGetLastErrorMessage()), 1;
    /* Loading made the plan's primary context current on this thread: the modules below load into it. */
    PipeLinkTensor tensors[64];
    memset(tensors, 0, sizeof tensors);
    uint64_t scratch = 0;
    size_t biggest = 0;
    for (int i = 0; i < info.n_inputs + info.n_outputs && i < 64; ++i) {
        const PipeLinkTensorInfo* t = i < info.n_inputs ? &info.inputs[i] : &info.outputs[i - info.n_inputs];
        size_t bytes = t->dtype.bits / 8;
        for (int d = 0; d < t->ndim; ++d) bytes *= (size_t)t->shape[d];
        uint64_t ptr = 0;
        if (cuMemAlloc_(&ptr, bytes ? bytes : 1)) return fprintf(stderr, "cuMemAlloc failed\n"), 1;
        if (bytes > biggest) biggest = bytes, scratch = ptr;
        tensors[i].data = (void*)(uintptr_t)ptr;
        tensors[i].device.device_type = PIPELINK_DEVICE_CUDA;
        tensors[i].ndim = t->ndim, tensors[i].shape = (int64_t*)t->shape, tensors[i].dtype = t->dtype;
    }

    Launch launches[256];
    int n_launches = 0;
    FILE* f = fopen(argv[2], "r");
    char cubin_path[4096], kernel[512];
    while (f && n_launches < 256 && fscanf(f, "%4095s %511s", cubin_path, kernel) == 2) {
        Launch* l = &launches[n_launches++];
        int ok = 1;
        for (int d = 0; d < 7; ++d) ok = ok && fscanf(f, "%u", &l->dims[d]) == 1;
        ok = ok && fscanf(f, "%d", &l->n) == 1 && l->n >= 0 && l->n <= 64;
        if (!ok) return fprintf(stderr, "%s: a malformed launch record for %s\n", argv[2], kernel), 1;
        for (int j = 0; j < l->n; ++j) {
            char p[64];
            if (fscanf(f, "%63s", p) != 1) return fprintf(stderr, "%s: a launch record ends early\n", argv[2]), 1;
            l->values[j] = 0;
            if (p[0] == 'p') l->values[j] = scratch;
            else if (strncmp(p, "i32:", 4) == 0) { int32_t v = (int32_t)strtol(p + 4, NULL, 10); memcpy(&l->values[j], &v, 4); }
            else if (strncmp(p, "i64:", 4) == 0) { int64_t v = strtoll(p + 4, NULL, 10); memcpy(&l->values[j], &v, 8); }
            else if (strncmp(p, "f32:", 4) == 0) { float v = strtof(p + 4, NULL); memcpy(&l->values[j], &v, 4); }
            else if (strncmp(p, "f64:", 4) == 0) { double v = strtod(p + 4, NULL); memcpy(&l->values[j], &v, 8); }
            l->args[j] = &l->values[j];
        }
        size_t n = 0;
        void* bytes = read_file(cubin_path, &n);
        void* module = NULL;
        if (!bytes || cuModuleLoadData_(&module, bytes) || cuModuleGetFunction_(&l->function, module, kernel))
            return fprintf(stderr, "cannot load %s from %s\n", kernel, cubin_path), 1;
        free(bytes);
    }
    if (f) fclose(f);

    void* stream = NULL;
    cuStreamCreate_(&stream, 1);
    const int batch = 10;
    double core = 0, bare = 0;
    for (int round = 0; round < 2; ++round) { /* round 0 warms up */
        core = bare = 0;
        for (int done = 0; done < iterations; done += batch) {
            double t0 = now_us();
            for (int k = 0; k < batch; ++k)
                if (pipeLinkExecuteAsync(h, tensors, info.n_inputs, tensors + info.n_inputs, info.n_outputs, stream))
                    return fprintf(stderr, "%s\n", pipeLinkGetLastErrorMessage()), 1;
            core += now_us() - t0;
            cuStreamSynchronize_(stream);
            t0 = now_us();
            for (int k = 0; k < batch; ++k)
                for (int i = 0; i < n_launches; ++i) {
                    Launch* l = &launches[i];
                    cuLaunchKernel_(l->function, l->dims[0], l->dims[1], l->dims[2], l->dims[3], l->dims[4], l->dims[5],
                                    l->dims[6], stream, l->args, NULL);
                }
            bare += now_us() - t0;
            cuStreamSynchronize_(stream);
        }
    }
    const double runs = (double)((iterations + batch - 1) / batch * batch);
    printf("stages %d launches %d execute_async_us %.3f bare_launches_us %.3f\n", info.n_stages, n_launches,
           core / runs, bare / runs);
    pipeLinkDestroyPipeline(h);
    pipeLinkFinalize();
    return 0;
}
