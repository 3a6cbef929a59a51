/* fake_cuda.c - a stand-in CUDA driver and cuBLASLt for testing the core's CUDA path on a machine without a GPU
 * (tests/native_core/test_cuda_fake.py). Built twice: as libcuda.so.1 (-DFAKE_DRIVER) and as a cuBLASLt
 * (-DFAKE_CUBLASLT). "Device" memory is host memory, so the test can fill inputs and read outputs directly.
 *
 * Driver: one device of compute capability 9.0; cuModuleLoadData takes images starting with "FAKECUBIN";
 * cuLaunchKernel runs kernels by name on the host:
 *   fake_scale(const float* x, float* y, long long n, float alpha)   y = alpha * x
 *   fake_add(const float* a, const float* b, float* y, int n)        y = a + b
 * Memory: fake_owns(ptr) says whether ptr is a live device block, fake_alloc_counts() counts cuMemAlloc and
 * cuMemAllocAsync calls; cuPointerGetAttribute answers the context, memory type (device), managed (no), ordinal.
 * cuStreamIsCapturing answers what fake_set_capturing() last said (a foreign capture), or whether the stream is
 * inside cuStreamBeginCapture/EndCapture; launches are counted (fake_launches()).
 * Graphs: between cuStreamBeginCapture and cuStreamEndCapture, the kernels, copies and cuBLASLt products
 * enqueued on that stream are recorded (parameters copied, as CUDA does) instead of run; cuGraphLaunch replays
 * an instantiated graph; cuGraphExecUpdate replaces its operations. fake_graph_counts() reports captures,
 * instantiations, updates, graph launches and live executable graphs; fake_fail_capture(k) makes the next k
 * captures end with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (a module that synchronized, say).
 * Host-to-device copies are counted (fake_htod_copies()), as are live device blocks (fake_live_blocks()).
 * cuBLASLt: column-major fp32 D = alpha op(A) op(B) + beta C (+ the bias vector for epilogue BIAS = 4),
 * strided batches included. The heuristic answers min(requested, $FAKE_LT_ALGOS or 4) candidates: candidate i
 * is algorithm 42 + i needing i * 4096 bytes of workspace; cublasLtMatmul takes any of them and
 * fake_lt_last(out) reports the algorithm of the last product and the count the last heuristic query asked for
 * (so a test sees which rank the core took). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

#ifdef FAKE_DRIVER
typedef struct Block { uintptr_t lo, hi; struct Block* next; } Block;
static Block* blocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ctx_token, capturing, launches;
static __thread void* current;

typedef struct Function { char name[128]; } Function;

/* An enqueued operation: a kernel (its parameters' values copied), a copy, or a host function (cuBLASLt). */
typedef struct Op {
    const void* fn; /* Function*, or NULL for a copy, or the host function */
    int kind;       /* 0 kernel, 1 copy, 2 host */
    uint64_t params[4];
    uint64_t dst, src;
    size_t n;
    void* arg; /* host: a copy of its argument block (owned) */
} Op;
typedef struct Graph { Op* ops; int n, cap; } Graph;
static struct { void* stream; Graph* graph; } captures[64];
static int n_captures_open, fail_captures;
static int graph_counts[5]; /* captures, instantiations, updates, launches, live executable graphs */

static void run_op(const Op* op);
static Graph* capturing_graph(void* stream) { /* under lock */
    for (int i = 0; i < 64; ++i)
        if (captures[i].graph && captures[i].stream == stream) return captures[i].graph;
    return NULL;
}
static void enqueue(void* stream, const Op* op) {
    pthread_mutex_lock(&lock);
    Graph* g = capturing_graph(stream);
    if (g != NULL) {
        if (g->n == g->cap) g->ops = realloc(g->ops, sizeof(Op) * (size_t)(g->cap = g->cap ? g->cap * 2 : 16));
        g->ops[g->n++] = *op;
    }
    pthread_mutex_unlock(&lock);
    if (g == NULL) {
        run_op(op);
        if (op->kind == 2) free(op->arg);
    }
}
static void free_graph(Graph* g) {
    for (int i = 0; g && i < g->n; ++i)
        if (g->ops[i].kind == 2) free(g->ops[i].arg);
    if (g) free(g->ops), free(g);
}
static Graph* copy_graph(const Graph* g) {
    Graph* out = calloc(1, sizeof *out);
    out->n = out->cap = g->n;
    out->ops = malloc(sizeof(Op) * (size_t)(g->n + 1));
    memcpy(out->ops, g->ops, sizeof(Op) * (size_t)g->n);
    for (int i = 0; i < g->n; ++i)
        if (out->ops[i].kind == 2) {
            size_t size = *(size_t*)g->ops[i].arg; /* a host argument block starts with its size */
            out->ops[i].arg = malloc(size);
            memcpy(out->ops[i].arg, g->ops[i].arg, size);
        }
    return out;
}

static int init(unsigned f) { (void)f; return 0; }
static int device_get(int* d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
static int device_count(int* n) { *n = 1; return 0; }
static int device_attribute(int* v, int attr, int dev) { (void)dev; *v = attr == 75 ? 9 : 0; return 0; }
static int retain(void** ctx, int dev) { (void)dev; *ctx = &ctx_token; return 0; }
static int release(int dev) { (void)dev; return 0; }
static int get_current(void** ctx) { *ctx = current; return 0; }
static int set_current(void* ctx) { current = ctx; return 0; }
static int push_current(void* ctx) { current = ctx; return 0; }
static int pop_current(void** ctx) { if (ctx) *ctx = current; return 0; }
static int module_load(void** m, const void* image) {
    if (memcmp(image, "FAKECUBIN", 9) != 0) return 200; /* CUDA_ERROR_INVALID_IMAGE */
    *m = (void*)image;
    return 0;
}
static int module_unload(void* m) { (void)m; return 0; }
static int module_function(void** f, void* m, const char* name) {
    (void)m;
    if (strcmp(name, "fake_scale") != 0 && strcmp(name, "fake_add") != 0) return 500; /* CUDA_ERROR_NOT_FOUND */
    Function* fn = calloc(1, sizeof *fn); /* kept: functions live as long as their module */
    snprintf(fn->name, sizeof fn->name, "%s", name);
    *f = fn;
    return 0;
}
static void run_op(const Op* op) {
    if (op->kind == 1) {
        memcpy((void*)(uintptr_t)op->dst, (const void*)(uintptr_t)op->src, op->n);
        return;
    }
    if (op->kind == 2) {
        ((void (*)(void*))op->fn)(op->arg);
        return;
    }
    const Function* fn = op->fn;
    const uint64_t* p = op->params;
    if (strcmp(fn->name, "fake_scale") == 0) {
        const float* x = (const float*)(uintptr_t)p[0];
        float* y = (float*)(uintptr_t)p[1];
        long long n = (long long)p[2];
        float alpha;
        memcpy(&alpha, &p[3], 4);
        for (long long i = 0; i < n; ++i) y[i] = alpha * x[i];
    } else {
        const float *a = (const float*)(uintptr_t)p[0], *b = (const float*)(uintptr_t)p[1];
        float* y = (float*)(uintptr_t)p[2];
        int n;
        memcpy(&n, &p[3], 4);
        for (int i = 0; i < n; ++i) y[i] = a[i] + b[i];
    }
}
static int launch(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm,
                  void* stream, void** p, void** extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shm, (void)extra;
    __atomic_add_fetch(&launches, 1, __ATOMIC_SEQ_CST);
    Op op = {.fn = f, .kind = 0};
    for (int j = 0; j < 4; ++j) memcpy(&op.params[j], p[j], j < 3 ? 8 : 4); /* both kernels: 3 × 8 bytes, then 4 */
    enqueue(stream, &op);
    return 0;
}
/* Stream ids as CUDA gives them: unique for the process's life, even when a destroyed stream's address is
 * reused by the next one; a handle the fake never made (a test's constant) is its own id. */
static struct { void* stream; unsigned long long id; } made_streams[256];
static unsigned long long next_stream_id = 1ull << 40;
static int stream_create(void** s, unsigned flags) {
    (void)flags;
    *s = malloc(1);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < 256; ++i)
        if (made_streams[i].stream == NULL) {
            made_streams[i].stream = *s, made_streams[i].id = next_stream_id++;
            break;
        }
    pthread_mutex_unlock(&lock);
    return 0;
}
static int stream_destroy(void* s) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < 256; ++i)
        if (made_streams[i].stream == s) made_streams[i].stream = NULL;
    pthread_mutex_unlock(&lock);
    free(s);
    return 0;
}
static int stream_id(void* s, unsigned long long* id) {
    pthread_mutex_lock(&lock);
    *id = (unsigned long long)(uintptr_t)s + 1;
    for (int i = 0; i < 256; ++i)
        if (made_streams[i].stream == s && s != NULL) *id = made_streams[i].id;
    pthread_mutex_unlock(&lock);
    return 0;
}
static int ok_stream(void* s) { (void)s; return 0; }
static void* last_wait[3]; /* the stream and event of the last cuStreamWaitEvent, and a count (fake_last_wait) */
static int wait_event(void* s, void* e, unsigned f) {
    (void)f;
    pthread_mutex_lock(&lock);
    last_wait[0] = s, last_wait[1] = e, last_wait[2] = (char*)last_wait[2] + 1;
    pthread_mutex_unlock(&lock);
    return 0;
}
static int is_capturing(void* s, int* status) {
    pthread_mutex_lock(&lock);
    *status = capturing || capturing_graph(s) != NULL;
    pthread_mutex_unlock(&lock);
    return 0;
}
static int begin_capture(void* s, int mode) {
    if (mode != 1) return 1; /* the core captures in thread-local mode */
    pthread_mutex_lock(&lock);
    int slot = -1;
    for (int i = 0; i < 64 && slot < 0; ++i)
        if (captures[i].graph == NULL) slot = i;
    if (slot < 0 || capturing_graph(s) != NULL) {
        pthread_mutex_unlock(&lock);
        return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
    }
    captures[slot].stream = s, captures[slot].graph = calloc(1, sizeof(Graph));
    ++n_captures_open;
    pthread_mutex_unlock(&lock);
    return 0;
}
static int end_capture(void* s, void** graph) {
    pthread_mutex_lock(&lock);
    Graph* g = NULL;
    for (int i = 0; i < 64 && g == NULL; ++i)
        if (captures[i].graph && captures[i].stream == s) g = captures[i].graph, captures[i].graph = NULL;
    int fail = g != NULL && fail_captures > 0;
    if (fail) --fail_captures;
    else if (g != NULL) ++graph_counts[0];
    pthread_mutex_unlock(&lock);
    *graph = NULL;
    if (g == NULL) return 1;
    if (fail) {
        free_graph(g);
        return 901; /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED */
    }
    *graph = g;
    return 0;
}
static int graph_instantiate(void** exec, void* graph, unsigned long long flags) {
    (void)flags;
    *exec = copy_graph(graph);
    __atomic_add_fetch(&graph_counts[1], 1, __ATOMIC_SEQ_CST), __atomic_add_fetch(&graph_counts[4], 1, __ATOMIC_SEQ_CST);
    return 0;
}
static int graph_exec_update(void* exec, void* graph, void* info) {
    (void)info;
    Graph *e = exec, *fresh = copy_graph(graph);
    for (int i = 0; i < e->n; ++i)
        if (e->ops[i].kind == 2) free(e->ops[i].arg);
    free(e->ops);
    *e = *fresh;
    free(fresh);
    __atomic_add_fetch(&graph_counts[2], 1, __ATOMIC_SEQ_CST);
    return 0;
}
static int graph_launch(void* exec, void* s) {
    const Graph* g = exec;
    pthread_mutex_lock(&lock);
    int recording = capturing_graph(s) != NULL;
    pthread_mutex_unlock(&lock);
    if (recording) return 900; /* not needed by the core: its graphs are launched outside captures */
    for (int i = 0; i < g->n; ++i) run_op(&g->ops[i]);
    __atomic_add_fetch(&graph_counts[3], 1, __ATOMIC_SEQ_CST);
    return 0;
}
static int graph_exec_destroy(void* exec) {
    free_graph(exec);
    __atomic_sub_fetch(&graph_counts[4], 1, __ATOMIC_SEQ_CST);
    return 0;
}
static int graph_destroy(void* graph) { free_graph(graph); return 0; }
static int event_create(void** e, unsigned f) { (void)f; *e = malloc(1); return 0; }
static int event_destroy(void* e) { free(e); return 0; }
static int event_record(void* e, void* s) { (void)e, (void)s; return 0; }
static int event_sync(void* e) { (void)e; return 0; }
static int mem_alloc(uint64_t* ptr, size_t n) {
    void* p = NULL;
    if (posix_memalign(&p, 256, n ? n : 1)) return 2;
    Block* b = malloc(sizeof *b);
    b->lo = (uintptr_t)p, b->hi = (uintptr_t)p + n;
    pthread_mutex_lock(&lock);
    b->next = blocks, blocks = b;
    pthread_mutex_unlock(&lock);
    *ptr = (uint64_t)(uintptr_t)p;
    return 0;
}
static int mem_free(uint64_t ptr) {
    pthread_mutex_lock(&lock);
    for (Block** b = &blocks; *b; b = &(*b)->next)
        if ((*b)->lo == ptr) {
            Block* dead = *b;
            *b = dead->next;
            pthread_mutex_unlock(&lock);
            free((void*)dead->lo), free(dead);
            return 0;
        }
    pthread_mutex_unlock(&lock);
    return 1; /* CUDA_ERROR_INVALID_VALUE */
}
static int alloc_counts[2]; /* cuMemAlloc, cuMemAllocAsync */
static int mem_alloc_legacy(uint64_t* ptr, size_t n) {
    __atomic_add_fetch(&alloc_counts[0], 1, __ATOMIC_SEQ_CST);
    return mem_alloc(ptr, n);
}
static int mem_alloc_async(uint64_t* ptr, size_t n, void* s) {
    (void)s;
    __atomic_add_fetch(&alloc_counts[1], 1, __ATOMIC_SEQ_CST);
    return mem_alloc(ptr, n);
}
static int mem_free_async(uint64_t ptr, void* s) { (void)s; return mem_free(ptr); }
static int memcpy_async(uint64_t dst, uint64_t src, size_t n, void* s) {
    Op op = {.kind = 1, .dst = dst, .src = src, .n = n};
    enqueue(s, &op);
    return 0;
}
static int memcpy_dtoh_async(void* dst, uint64_t src, size_t n, void* s) { /* page-locked memory is host memory */
    return memcpy_async((uint64_t)(uintptr_t)dst, src, n, s);
}
static int mem_alloc_host(void** p, size_t n) { return (*p = malloc(n ? n : 1)) == NULL ? 2 : 0; }
static int mem_free_host(void* p) { free(p); return 0; }
static int pointer_attribute(void* out, int attr, uint64_t ptr) {
    int found = 0;
    pthread_mutex_lock(&lock);
    for (Block* b = blocks; b && !found; b = b->next) found = ptr >= b->lo && ptr < b->hi;
    pthread_mutex_unlock(&lock);
    if (!found) return 1;
    if (attr == 9) *(int*)out = 0;                    /* DEVICE_ORDINAL */
    else if (attr == 2) *(unsigned*)out = 2;          /* MEMORY_TYPE: device */
    else if (attr == 8) *(unsigned*)out = 0;          /* IS_MANAGED */
    else if (attr == 1) *(void**)out = &ctx_token;    /* CONTEXT */
    else return 1;
    return 0;
}
static int ctx_get_device(int* dev) { *dev = 0; return current ? 0 : 201; /* CUDA_ERROR_INVALID_CONTEXT */ }
static int error_name(int r, const char** s) { (void)r; *s = "CUDA_ERROR_FAKE"; return 0; }
static int htod_copies;
static int memcpy_htod(uint64_t dst, const void* src, size_t n) {
    int known = 0;
    pthread_mutex_lock(&lock);
    for (Block* b = blocks; b && !known; b = b->next) known = dst >= b->lo && dst + n <= b->hi;
    pthread_mutex_unlock(&lock);
    if (!known) return 1; /* CUDA_ERROR_INVALID_VALUE: not inside one device block */
    memcpy((void*)dst, src, n);
    __atomic_add_fetch(&htod_copies, 1, __ATOMIC_SEQ_CST);
    return 0;
}
static int ctx_synchronize(void) { return 0; }

EXPORT int cuGetProcAddress_v2(const char* name, void** fn, int version, uint64_t flags, int* status) {
    (void)version, (void)flags;
    static const struct { const char* name; void* fn; } table[] = {
        {"cuInit", init}, {"cuDeviceGet", device_get}, {"cuDeviceGetCount", device_count},
        {"cuDeviceGetAttribute", device_attribute}, {"cuDevicePrimaryCtxRetain", retain},
        {"cuDevicePrimaryCtxRelease", release}, {"cuCtxGetCurrent", get_current}, {"cuCtxSetCurrent", set_current},
        {"cuCtxGetDevice", ctx_get_device}, {"cuCtxPushCurrent", push_current}, {"cuCtxPopCurrent", pop_current}, {"cuModuleLoadData", module_load},
        {"cuModuleUnload", module_unload}, {"cuModuleGetFunction", module_function}, {"cuLaunchKernel", launch},
        {"cuStreamCreate", stream_create}, {"cuStreamDestroy", stream_destroy}, {"cuStreamSynchronize", ok_stream},
        {"cuStreamWaitEvent", wait_event}, {"cuStreamIsCapturing", is_capturing}, {"cuStreamGetId", stream_id}, {"cuEventCreate", event_create},
        {"cuEventDestroy", event_destroy}, {"cuEventRecord", event_record}, {"cuEventSynchronize", event_sync},
        {"cuMemAlloc", mem_alloc_legacy}, {"cuMemFree", mem_free}, {"cuMemAllocAsync", mem_alloc_async},
        {"cuMemFreeAsync", mem_free_async}, {"cuMemcpyDtoDAsync", memcpy_async},
        {"cuMemcpyDtoHAsync", memcpy_dtoh_async}, {"cuMemAllocHost", mem_alloc_host}, {"cuMemFreeHost", mem_free_host},
        {"cuPointerGetAttribute", pointer_attribute}, {"cuGetErrorName", error_name},
        {"cuStreamBeginCapture", begin_capture}, {"cuStreamEndCapture", end_capture},
        {"cuGraphInstantiateWithFlags", graph_instantiate}, {"cuGraphExecUpdate", graph_exec_update},
        {"cuGraphLaunch", graph_launch}, {"cuGraphExecDestroy", graph_exec_destroy}, {"cuGraphDestroy", graph_destroy},
        {"cuMemcpyHtoD", memcpy_htod}, {"cuCtxSynchronize", ctx_synchronize},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i)
        if (strcmp(table[i].name, name) == 0) {
            *fn = table[i].fn;
            if (status) *status = 0;
            return 0;
        }
    *fn = NULL;
    return 500;
}

/* For the test (through ctypes): device memory, the capture switch, the launch count. */
EXPORT int fake_mem_alloc(uint64_t* ptr, size_t n) { return mem_alloc(ptr, n); }
EXPORT int fake_mem_free(uint64_t ptr) { return mem_free(ptr); }
EXPORT void fake_set_capturing(int on) { capturing = on; }
EXPORT int fake_owns(uint64_t ptr) { /* a live block of the fake's device memory */
    int found = 0;
    pthread_mutex_lock(&lock);
    for (Block* b = blocks; b && !found; b = b->next) found = ptr >= b->lo && ptr < b->hi;
    pthread_mutex_unlock(&lock);
    return found;
}
EXPORT void fake_alloc_counts(int out[2]) { out[0] = alloc_counts[0], out[1] = alloc_counts[1]; }
EXPORT int fake_launches(void) { return __atomic_load_n(&launches, __ATOMIC_SEQ_CST); }
EXPORT void fake_last_wait(void* out[3]) {
    pthread_mutex_lock(&lock);
    out[0] = last_wait[0], out[1] = last_wait[1], out[2] = last_wait[2];
    pthread_mutex_unlock(&lock);
}
EXPORT void fake_graph_counts(int out[5]) {
    for (int i = 0; i < 5; ++i) out[i] = __atomic_load_n(&graph_counts[i], __ATOMIC_SEQ_CST);
}
EXPORT void fake_fail_capture(int k) { fail_captures = k; }
/* For the fake cuBLASLt: run `fn(arg)` now, or record it when `stream` is being captured. `arg` starts with
 * its size (a size_t) and is copied. */
EXPORT void fake_enqueue_host(void* stream, void (*fn)(void*), const void* arg) {
    size_t size = *(const size_t*)arg;
    Op op = {.fn = (const void*)fn, .kind = 2, .arg = malloc(size)};
    memcpy(op.arg, arg, size);
    enqueue(stream, &op);
}
EXPORT int fake_htod_copies(void) { return __atomic_load_n(&htod_copies, __ATOMIC_SEQ_CST); }
EXPORT int fake_live_blocks(void) {
    int n = 0;
    pthread_mutex_lock(&lock);
    for (Block* b = blocks; b; b = b->next) ++n;
    pthread_mutex_unlock(&lock);
    return n;
}
#endif

#ifdef FAKE_CUBLASLT
typedef struct Desc { int trans[2]; uint32_t epilogue; const float* bias; } Desc;
typedef struct Layout { uint64_t rows, cols; int64_t ld; int32_t count; int64_t stride; } Layout;

EXPORT int cublasLtCreate(void** h) { *h = malloc(1); return 0; }
EXPORT int cublasLtDestroy(void* h) { free(h); return 0; }
EXPORT int cublasLtMatmulDescCreate(void** d, int compute, int scale) {
    (void)compute;
    *d = calloc(1, sizeof(Desc));
    return scale == 0 ? 0 : 7; /* fp32 scale only */
}
EXPORT int cublasLtMatmulDescDestroy(void* d) { free(d); return 0; }
EXPORT int cublasLtMatmulDescSetAttribute(void* d, int attr, const void* buf, size_t n) {
    Desc* desc = d;
    if (attr == 3 && n == 4) memcpy(&desc->trans[0], buf, 4);
    else if (attr == 4 && n == 4) memcpy(&desc->trans[1], buf, 4);
    else if (attr == 7 && n == 4) memcpy(&desc->epilogue, buf, 4);
    else if (attr == 8 && n == 8) memcpy(&desc->bias, buf, 8);
    else return 7; /* CUBLAS_STATUS_INVALID_VALUE */
    return 0;
}
EXPORT int cublasLtMatrixLayoutCreate(void** l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
    Layout* layout = calloc(1, sizeof *layout);
    layout->rows = rows, layout->cols = cols, layout->ld = ld, layout->count = 1;
    *l = layout;
    return type == 0 ? 0 : 7;
}
EXPORT int cublasLtMatrixLayoutDestroy(void* l) { free(l); return 0; }
EXPORT int cublasLtMatrixLayoutSetAttribute(void* l, int attr, const void* buf, size_t n) {
    Layout* layout = l;
    if (attr == 5 && n == 4) memcpy(&layout->count, buf, 4);
    else if (attr == 6 && n == 8) memcpy(&layout->stride, buf, 8);
    else return 7;
    return 0;
}
EXPORT int cublasLtMatmulPreferenceCreate(void** p) { *p = malloc(1); return 0; }
EXPORT int cublasLtMatmulPreferenceDestroy(void* p) { free(p); return 0; }
EXPORT int cublasLtMatmulPreferenceSetAttribute(void* p, int attr, const void* buf, size_t n) {
    (void)p, (void)buf;
    return (attr == 1 && n == 8) || (attr >= 5 && attr <= 8 && n == 4) ? 0 : 7;
}
typedef struct { uint64_t algo[8]; size_t workspace_size; int state; float waves; int reserved[4]; } Heuristic;
enum { FAKE_ALGO_FIRST = 42, FAKE_ALGO_MAX = 32 };
static uint64_t last_algo;
static int last_want;
EXPORT void fake_lt_last(uint64_t out[2]) {
    out[0] = __atomic_load_n(&last_algo, __ATOMIC_SEQ_CST), out[1] = (uint64_t)__atomic_load_n(&last_want, __ATOMIC_SEQ_CST);
}
EXPORT int cublasLtMatmulAlgoGetHeuristic(void* h, void* d, void* a, void* b, void* c, void* dd, void* p, int want,
                                          Heuristic* out, int* count) {
    (void)h, (void)d, (void)a, (void)b, (void)c, (void)dd, (void)p;
    const char* env = getenv("FAKE_LT_ALGOS");
    int have = env && env[0] ? atoi(env) : 4;
    if (have > FAKE_ALGO_MAX) have = FAKE_ALGO_MAX;
    if (want < 1) return 7; /* CUBLAS_STATUS_INVALID_VALUE */
    __atomic_store_n(&last_want, want, __ATOMIC_SEQ_CST);
    *count = want < have ? want : have;
    for (int i = 0; i < *count; ++i) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].algo[0] = FAKE_ALGO_FIRST + (uint64_t)i;
        out[i].workspace_size = (size_t)i * 4096;
    }
    return 0;
}
static float at(const float* m, const Layout* l, int trans, uint64_t i, uint64_t j) { /* op(M)[i, j] */
    return trans ? m[j + i * (uint64_t)l->ld] : m[i + j * (uint64_t)l->ld];
}
/* A product's arguments, copied (cuBLASLt reads its descriptors when the call is made, and so when captured). */
typedef struct Product {
    size_t size; /* fake_enqueue_host's convention */
    Desc desc;
    Layout a, b, c;
    float alpha, beta;
    const void *A, *B, *C;
    void* D;
} Product;
static void product(void* arg);
EXPORT int cublasLtMatmul(void* h, void* d, const void* alpha, const void* A, void* la, const void* B, void* lb,
                          const void* beta, const void* C, void* lc, void* D, void* ld, const void* algo, void* ws,
                          size_t ws_size, void* stream) {
    (void)h, (void)ld, (void)ws, (void)ws_size;
    const uint64_t id = ((const uint64_t*)algo)[0];
    if (id < FAKE_ALGO_FIRST || id >= FAKE_ALGO_FIRST + FAKE_ALGO_MAX) return 7; /* not one the heuristic gave */
    __atomic_store_n(&last_algo, id, __ATOMIC_SEQ_CST);
    Product p = {sizeof p, *(const Desc*)d, *(const Layout*)la, *(const Layout*)lb, *(const Layout*)lc,
                 *(const float*)alpha, *(const float*)beta, A, B, C, D};
    /* The fake driver records it during a capture of `stream`, else runs it now. */
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void (*enqueue_host)(void*, void (*)(void*), const void*) =
        driver ? (void (*)(void*, void (*)(void*), const void*))dlsym(driver, "fake_enqueue_host") : NULL;
    if (enqueue_host) enqueue_host(stream, product, &p);
    else product(&p);
    if (driver) dlclose(driver);
    return 0;
}
static void product(void* arg) {
    const Product* p = arg;
    const Desc* desc = &p->desc;
    const Layout *a = &p->a, *b = &p->b, *c = &p->c;
    const void *A = p->A, *B = p->B, *C = p->C;
    void* D = p->D;
    const float al = p->alpha, be = p->beta;
    const uint64_t m = c->rows, n = c->cols, k = desc->trans[0] ? a->rows : a->cols;
    for (int32_t batch = 0; batch < c->count; ++batch) {
        const float* pa = (const float*)A + batch * a->stride;
        const float* pb = (const float*)B + batch * b->stride;
        const float* pc = (const float*)C + batch * c->stride;
        float* pd = (float*)D + batch * c->stride;
        for (uint64_t j = 0; j < n; ++j)
            for (uint64_t i = 0; i < m; ++i) {
                double s = 0;
                for (uint64_t q = 0; q < k; ++q) s += (double)at(pa, a, desc->trans[0], i, q) * at(pb, b, desc->trans[1], q, j);
                double v = al * s + (be != 0 ? be * pc[i + j * (uint64_t)c->ld] : 0.0);
                if (desc->epilogue & 4) v += desc->bias[i];
                pd[i + j * (uint64_t)c->ld] = (float)v;
            }
    }
}
#endif
