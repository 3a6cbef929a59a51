/* fake_cuda.c - a stand-in CUDA driver and cuBLASLt for testing the core's CUDA path on a machine without a GPU
 * (tests/native_core/test_cuda_fake.py). Built twice: as libcuda.so.1 (-DFAKE_DRIVER) and as a cuBLASLt
 * (-DFAKE_CUBLASLT). "Device" memory is host memory, so the test can fill inputs and read outputs directly.
 *
 * Driver: one device of compute capability 9.0; cuModuleLoadData takes images starting with "FAKECUBIN";
 * cuLaunchKernel runs kernels by name on the host:
 *   fake_scale(const float* x, float* y, long long n, float alpha)   y = alpha * x
 *   fake_add(const float* a, const float* b, float* y, int n)        y = a + b
 * cuStreamIsCapturing answers what fake_set_capturing() last said; launches are counted (fake_launches()), as are
 * host-to-device copies (fake_htod_copies()) and live device blocks (fake_live_blocks()).
 * cuBLASLt: column-major fp32 D = alpha op(A) op(B) + beta C (+ the bias vector for epilogue BIAS = 4),
 * strided batches included; the heuristic always finds one algorithm needing no workspace. */
#define _GNU_SOURCE
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
static int launch(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm,
                  void* stream, void** p, void** extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shm, (void)stream, (void)extra;
    const Function* fn = f;
    __atomic_add_fetch(&launches, 1, __ATOMIC_SEQ_CST);
    if (strcmp(fn->name, "fake_scale") == 0) {
        const float* x = *(const float**)p[0];
        float* y = *(float**)p[1];
        long long n = *(long long*)p[2];
        float alpha = *(float*)p[3];
        for (long long i = 0; i < n; ++i) y[i] = alpha * x[i];
    } else {
        const float *a = *(const float**)p[0], *b = *(const float**)p[1];
        float* y = *(float**)p[2];
        int n = *(int*)p[3];
        for (int i = 0; i < n; ++i) y[i] = a[i] + b[i];
    }
    return 0;
}
static int stream_create(void** s, unsigned flags) { (void)flags; *s = malloc(1); return 0; }
static int stream_destroy(void* s) { free(s); return 0; }
static int ok_stream(void* s) { (void)s; return 0; }
static int wait_event(void* s, void* e, unsigned f) { (void)s, (void)e, (void)f; return 0; }
static int is_capturing(void* s, int* status) { (void)s; *status = capturing; return 0; }
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
static int mem_alloc_async(uint64_t* ptr, size_t n, void* s) { (void)s; return mem_alloc(ptr, n); }
static int mem_free_async(uint64_t ptr, void* s) { (void)s; return mem_free(ptr); }
static int memcpy_async(uint64_t dst, uint64_t src, size_t n, void* s) { (void)s; memcpy((void*)dst, (void*)src, n); return 0; }
static int pointer_attribute(void* out, int attr, uint64_t ptr) {
    int found = 0;
    pthread_mutex_lock(&lock);
    for (Block* b = blocks; b && !found; b = b->next) found = ptr >= b->lo && ptr < b->hi;
    pthread_mutex_unlock(&lock);
    if (!found) return 1;
    if (attr == 9) *(int*)out = 0;
    else *(void**)out = &ctx_token;
    return 0;
}
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
        {"cuCtxPushCurrent", push_current}, {"cuCtxPopCurrent", pop_current}, {"cuModuleLoadData", module_load},
        {"cuModuleUnload", module_unload}, {"cuModuleGetFunction", module_function}, {"cuLaunchKernel", launch},
        {"cuStreamCreate", stream_create}, {"cuStreamDestroy", stream_destroy}, {"cuStreamSynchronize", ok_stream},
        {"cuStreamWaitEvent", wait_event}, {"cuStreamIsCapturing", is_capturing}, {"cuEventCreate", event_create},
        {"cuEventDestroy", event_destroy}, {"cuEventRecord", event_record}, {"cuEventSynchronize", event_sync},
        {"cuMemAlloc", mem_alloc}, {"cuMemFree", mem_free}, {"cuMemAllocAsync", mem_alloc_async},
        {"cuMemFreeAsync", mem_free_async}, {"cuMemcpyDtoDAsync", memcpy_async},
        {"cuPointerGetAttribute", pointer_attribute}, {"cuGetErrorName", error_name},
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
EXPORT int fake_launches(void) { return __atomic_load_n(&launches, __ATOMIC_SEQ_CST); }
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
EXPORT int cublasLtMatmulAlgoGetHeuristic(void* h, void* d, void* a, void* b, void* c, void* dd, void* p, int want,
                                          Heuristic* out, int* count) {
    (void)h, (void)d, (void)a, (void)b, (void)c, (void)dd, (void)p, (void)want;
    memset(out, 0, sizeof *out);
    out->algo[0] = 42;
    *count = 1;
    return 0;
}
static float at(const float* m, const Layout* l, int trans, uint64_t i, uint64_t j) { /* op(M)[i, j] */
    return trans ? m[j + i * (uint64_t)l->ld] : m[i + j * (uint64_t)l->ld];
}
EXPORT int cublasLtMatmul(void* h, void* d, const void* alpha, const void* A, void* la, const void* B, void* lb,
                          const void* beta, const void* C, void* lc, void* D, void* ld, const void* algo, void* ws,
                          size_t ws_size, void* stream) {
    (void)h, (void)ld, (void)ws, (void)ws_size, (void)stream;
    const Desc* desc = d;
    const Layout *a = la, *b = lb, *c = lc;
    if (((const uint64_t*)algo)[0] != 42) return 7;
    const float al = *(const float*)alpha, be = *(const float*)beta;
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
    return 0;
}
#endif
