/* native_core_service.c - the seed's service shape from C threads (benchmarks/native_core.py).
 *
 *   native_core_service PLAN THREADS SECONDS
 *
 * Loads PLAN once; each of THREADS pthreads owns a stream and its own output buffers (the inputs are shared
 * and read-only), and runs pipeLinkExecuteAsync + cuStreamSynchronize in a loop. Prints the aggregate runs/s
 * over SECONDS after a warm-up: the core's thread scaling with no Python (and no GIL) in the loop. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipelink/runtime.h"

typedef int (*GetProc)(const char*, void**, int, uint64_t, int*);
static int (*cuInit_)(unsigned);
static int (*cuStreamCreate_)(void**, unsigned);
static int (*cuStreamSynchronize_)(void*);
static int (*cuMemAlloc_)(uint64_t*, size_t);
static int (*cuCtxGetCurrent_)(void**);
static int (*cuCtxSetCurrent_)(void*);

static PipeLinkPipelineHandle plan;
static PipeLinkPipelineInfo info;
static PipeLinkTensor inputs[64];
static void* context;
static atomic_int stop, failed;
static atomic_llong runs;

static size_t bytes_of(const PipeLinkTensorInfo* t) {
    size_t bytes = t->dtype.bits / 8;
    for (int d = 0; d < t->ndim; ++d) bytes *= (size_t)t->shape[d];
    return bytes ? bytes : 1;
}

static int tensor_of(const PipeLinkTensorInfo* t, PipeLinkTensor* out) {
    uint64_t ptr = 0;
    if (cuMemAlloc_(&ptr, bytes_of(t))) return 1;
    memset(out, 0, sizeof *out);
    out->data = (void*)(uintptr_t)ptr;
    out->device.device_type = PIPELINK_DEVICE_CUDA;
    out->ndim = t->ndim, out->shape = (int64_t*)t->shape, out->dtype = t->dtype;
    return 0;
}

static void* worker(void* arg) {
    (void)arg;
    cuCtxSetCurrent_(context);
    PipeLinkTensor outputs[16];
    void* stream = NULL;
    for (int i = 0; i < info.n_outputs && i < 16; ++i)
        if (tensor_of(&info.outputs[i], &outputs[i])) return atomic_store(&failed, 1), NULL;
    if (cuStreamCreate_(&stream, 1)) return atomic_store(&failed, 1), NULL;
    while (!atomic_load(&stop)) {
        if (pipeLinkExecuteAsync(plan, inputs, info.n_inputs, outputs, info.n_outputs, stream) ||
            cuStreamSynchronize_(stream)) {
            fprintf(stderr, "%s\n", pipeLinkGetLastErrorMessage());
            return atomic_store(&failed, 1), NULL;
        }
        atomic_fetch_add(&runs, 1);
    }
    return NULL;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void nap(double seconds) {
    struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&t, NULL);
}

int main(int argc, char** argv) {
    if (argc != 4) return fprintf(stderr, "usage: %s PLAN THREADS SECONDS\n", argv[0]), 2;
    int threads = atoi(argv[2]);
    double seconds = atof(argv[3]);
    if (threads < 1 || threads > 256 || seconds <= 0) return fprintf(stderr, "bad THREADS or SECONDS\n"), 2;
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
    GetProc get = cuda ? (GetProc)dlsym(cuda, "cuGetProcAddress_v2") : NULL;
    if (!get) return fprintf(stderr, "no CUDA driver\n"), 1;
#define RESOLVE(name) get(#name, (void**)&name##_, 12000, 0, NULL)
    RESOLVE(cuInit), RESOLVE(cuStreamCreate), RESOLVE(cuStreamSynchronize), RESOLVE(cuMemAlloc);
    RESOLVE(cuCtxGetCurrent), RESOLVE(cuCtxSetCurrent);
    cuInit_(0);
    if (pipeLinkInitialize() || pipeLinkLoadPipeline(argv[1], &plan) || pipeLinkGetPipelineInfo(plan, &info))
        return fprintf(stderr, "%s\n", pipeLinkGetLastErrorMessage()), 1;
    cuCtxGetCurrent_(&context); /* loading made the plan's primary context current */
    for (int i = 0; i < info.n_inputs && i < 64; ++i)
        if (tensor_of(&info.inputs[i], &inputs[i])) return fprintf(stderr, "cuMemAlloc failed\n"), 1;
    pthread_t pool[256];
    for (int k = 0; k < threads; ++k) pthread_create(&pool[k], NULL, worker, NULL);
    nap(0.3); /* contexts, streams and cuBLASLt workspaces made: then count */
    long long first = atomic_load(&runs);
    double begin = now_s();
    nap(seconds);
    long long last = atomic_load(&runs);
    double end = now_s();
    atomic_store(&stop, 1);
    for (int k = 0; k < threads; ++k) pthread_join(pool[k], NULL);
    if (atomic_load(&failed)) return 1;
    printf("threads %d runs_per_s %.1f\n", threads, (double)(last - first) / (end - begin));
    pipeLinkDestroyPipeline(plan);
    pipeLinkFinalize();
    return 0;
}
