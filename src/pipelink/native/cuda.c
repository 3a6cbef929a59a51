/* cuda.c - the CUDA path of the native core: the driver (libcuda.so.1) and cuBLASLt (libcublasLt.so.13)
 * opened at run time with dlopen, so the library builds with a plain C compiler and its CPU path runs
 * where there is no GPU; the types below are the few the driver and cuBLASLt ABIs need.
 *
 * Loading a CUDA plan retains the primary context of its device, loads its cubins and resolves its
 * kernels, and builds each product's cuBLASLt layouts and picks its algorithm once. An execution context
 * owns a device arena, a stream, a completion event, a cuBLASLt handle, per-product descriptors and one
 * workspace, all made once. A run checks the caller's tensors, then only launches (docs/native-core.md). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void* CUstream;
typedef void* CUevent;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUgraph;
typedef void* CUgraphExec;

enum {
    CU_ATTR_CC_MAJOR = 75,
    CU_ATTR_CC_MINOR = 76,
    CU_POINTER_CONTEXT = 1,
    CU_POINTER_MEMORY_TYPE = 2,
    CU_POINTER_IS_MANAGED = 8,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_POINTER_DEVICE_ORDINAL = 9,
    CU_STREAM_NON_BLOCKING = 1,
    CU_EVENT_DISABLE_TIMING = 2,
    CU_ERROR_NOT_READY = 600,
    CU_CAPTURE_ACTIVE = 1,
    CU_CAPTURE_MODE_THREAD_LOCAL = 1,
};

/* The driver functions the core uses, resolved through cuGetProcAddress for CUDA 12.0's ABI. */
static struct Driver {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(int*, int);
    CUresult (*DeviceGetCount)(int*);
    CUresult (*DeviceGetAttribute)(int*, int, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext*, int);
    CUresult (*DevicePrimaryCtxRelease)(int);
    CUresult (*CtxGetCurrent)(CUcontext*);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext*);
    CUresult (*CtxGetDevice)(int*);
    CUresult (*ModuleLoadData)(CUmodule*, const void*);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
    CUresult (*StreamCreate)(CUstream*, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*StreamIsCapturing)(CUstream, int*);
    CUresult (*StreamGetId)(CUstream, unsigned long long*);
    CUresult (*EventCreate)(CUevent*, unsigned);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*MemAlloc)(CUdeviceptr*, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemAllocAsync)(CUdeviceptr*, size_t, CUstream);
    CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream); /* check_finite's count */
    CUresult (*MemAllocHost)(void**, size_t);
    CUresult (*MemFreeHost)(void*);
    CUresult (*PointerGetAttribute)(void*, int, CUdeviceptr);
    CUresult (*GetErrorName)(CUresult, const char**);
    /* CUDA graphs inside the core (plans with the cuda_graph flag) */
    CUresult (*StreamBeginCapture)(CUstream, int);
    CUresult (*StreamEndCapture)(CUstream, CUgraph*);
    CUresult (*GraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
    CUresult (*GraphExecUpdate)(CUgraphExec, CUgraph, void*); /* CUDA 12's: a CUgraphExecUpdateResultInfo* */
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*GraphExecDestroy)(CUgraphExec);
    CUresult (*GraphDestroy)(CUgraph);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t); /* constants, at load */
    CUresult (*CtxSynchronize)(void);
} cu;

/* cuBLASLt, same idea. Handles and descriptors are pointers; statuses ints (0 success). */
typedef struct {
    uint64_t algo[8];
    size_t workspace_size;
    int state;
    float waves;
    int reserved[4];
} LtHeuristic;

static struct Lt {
    int (*Create)(void**);
    int (*Destroy)(void*);
    int (*MatmulDescCreate)(void**, int, int);
    int (*MatmulDescDestroy)(void*);
    int (*MatmulDescSetAttribute)(void*, int, const void*, size_t);
    int (*MatrixLayoutCreate)(void**, int, uint64_t, uint64_t, int64_t);
    int (*MatrixLayoutDestroy)(void*);
    int (*MatrixLayoutSetAttribute)(void*, int, const void*, size_t);
    int (*MatmulPreferenceCreate)(void**);
    int (*MatmulPreferenceDestroy)(void*);
    int (*MatmulPreferenceSetAttribute)(void*, int, const void*, size_t);
    int (*MatmulAlgoGetHeuristic)(void*, void*, void*, void*, void*, void*, void*, int, LtHeuristic*, int*);
    int (*Matmul)(void*, void*, const void*, const void*, void*, const void*, void*, const void*, const void*, void*,
                  void*, void*, const void*, void*, size_t, CUstream);
} lt;

enum { LT_DESC_TRANSA = 3, LT_DESC_TRANSB = 4, LT_DESC_EPILOGUE = 7, LT_DESC_BIAS_POINTER = 8 };
enum { LT_LAYOUT_BATCH_COUNT = 5, LT_LAYOUT_BATCH_STRIDE = 6 };
enum { LT_PREF_MAX_WORKSPACE = 1, LT_PREF_MIN_ALIGN_A = 5 }; /* A, B, C, D: 5, 6, 7, 8 */

static pthread_once_t driver_once = PTHREAD_ONCE_INIT, lt_once = PTHREAD_ONCE_INIT;
static char driver_error[512], lt_error[1024];
static _Atomic int driver_ready; /* set once `cu` is usable: read without opening the driver */

static const char* cu_name(CUresult r) {
    const char* name = NULL;
    if (cu.GetErrorName == NULL || cu.GetErrorName(r, &name) != 0 || name == NULL) return "CUDA_ERROR_UNKNOWN";
    return name;
}

static PipeLinkStatus cuda_fail(CUresult r, const char* what, const char* stage) {
    return plk_fail(PIPELINK_ERR_CUDA, "%s%s%s%s failed: %s (%d)", stage ? "stage '" : "", stage ? stage : "",
                    stage ? "': " : "", what, cu_name(r), r);
}

static void open_driver(void) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(driver_error, sizeof driver_error, "no NVIDIA driver on this machine (libcuda.so.1 cannot be opened)");
        return;
    }
    CUresult (*get)(const char*, void**, int, uint64_t, int*) = (CUresult(*)(const char*, void**, int, uint64_t, int*))dlsym(lib, "cuGetProcAddress_v2");
    if (get == NULL) {
        snprintf(driver_error, sizeof driver_error, "the NVIDIA driver is older than CUDA 12 (no cuGetProcAddress_v2); "
                 "update the driver");
        return;
    }
    static const struct { const char* name; size_t offset; } table[] = {
#define F(n) {"cu" #n, offsetof(struct Driver, n)}
        F(Init), F(DeviceGet), F(DeviceGetCount), F(DeviceGetAttribute), F(DevicePrimaryCtxRetain),
        F(DevicePrimaryCtxRelease), F(CtxGetCurrent), F(CtxSetCurrent), F(CtxPushCurrent), F(CtxPopCurrent),
        F(CtxGetDevice), F(ModuleLoadData), F(ModuleUnload),
        F(ModuleGetFunction), F(LaunchKernel), F(StreamCreate), F(StreamDestroy), F(StreamSynchronize),
        F(StreamWaitEvent), F(StreamIsCapturing), F(StreamGetId), F(EventCreate), F(EventDestroy), F(EventRecord), F(EventSynchronize),
        F(MemAlloc), F(MemFree), F(MemAllocAsync), F(MemFreeAsync), F(MemcpyDtoDAsync), F(MemcpyDtoHAsync),
        F(MemAllocHost), F(MemFreeHost), F(PointerGetAttribute),
        F(GetErrorName), F(StreamBeginCapture), F(StreamEndCapture), F(GraphInstantiateWithFlags), F(GraphExecUpdate),
        F(GraphLaunch), F(GraphExecDestroy), F(GraphDestroy),
        F(MemcpyHtoD), F(CtxSynchronize),
#undef F
    };
    struct Driver found;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
        void* fn = NULL;
        int status = 0;
        if (get(table[i].name, &fn, 12000, 0, &status) != 0 || fn == NULL) {
            snprintf(driver_error, sizeof driver_error, "the NVIDIA driver has no %s; update the driver", table[i].name);
            return;
        }
        memcpy((char*)&found + table[i].offset, &fn, sizeof fn);
    }
    int n = 0;
    CUresult r = found.Init(0);
    if (r == 0) r = found.DeviceGetCount(&n);
    if (r != 0 || n < 1) {
        snprintf(driver_error, sizeof driver_error, "the NVIDIA driver reports no usable GPU (cuInit/cuDeviceGetCount: %d, "
                 "%d devices)", r, n);
        return;
    }
    cu = found; /* published only whole: cu.Init != NULL means usable */
    atomic_store(&driver_ready, 1);
}

int plk_cuda_usable(void) {
    pthread_once(&driver_once, open_driver);
    return cu.Init != NULL;
}

const char* plk_cuda_unusable_reason(void) {
    pthread_once(&driver_once, open_driver);
    return cu.Init != NULL ? "a CUDA device is usable" : driver_error;
}

int plk_cuda_is_device_memory(const void* ptr) {
    if (!atomic_load(&driver_ready) || ptr == NULL) return 0;
    unsigned int type = 0, managed = 0;
    if (cu.PointerGetAttribute(&type, CU_POINTER_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)ptr) != 0) return 0; /* unknown: host */
    if (type != CU_MEMORYTYPE_DEVICE) return 0;
    return !(cu.PointerGetAttribute(&managed, CU_POINTER_IS_MANAGED, (CUdeviceptr)(uintptr_t)ptr) == 0 && managed);
}

static PipeLinkStatus need_driver(const char* what) {
    pthread_once(&driver_once, open_driver);
    if (cu.Init == NULL)
        return plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "%s needs a CUDA GPU: %s. Run a CPU plan here "
                        "(pipelink compile --device cpu)", what, driver_error);
    return PIPELINK_SUCCESS;
}

/* cuBLASLt: $PIPELINK_CUBLASLT (a path, set by the Python package to its wheel's copy when it loads this
 * library), else the loader's search for libcublasLt.so.13. */
static void open_lt(void) {
    const char* env = getenv("PIPELINK_CUBLASLT");
    const char* path = env && env[0] ? env : "libcublasLt.so.13";
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(lt_error, sizeof lt_error, "cuBLASLt cannot be opened (%s): install it (pip install "
                 "nvidia-cublas) and set PIPELINK_CUBLASLT to libcublasLt.so.13's path", dlerror());
        return;
    }
    static const struct { const char* name; size_t offset; } table[] = {
#define F(n) {"cublasLt" #n, offsetof(struct Lt, n)}
        F(Create), F(Destroy), F(MatmulDescCreate), F(MatmulDescDestroy), F(MatmulDescSetAttribute),
        F(MatrixLayoutCreate), F(MatrixLayoutDestroy), F(MatrixLayoutSetAttribute), F(MatmulPreferenceCreate),
        F(MatmulPreferenceDestroy), F(MatmulPreferenceSetAttribute), F(MatmulAlgoGetHeuristic), F(Matmul),
#undef F
    };
    struct Lt found;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
        void* fn = dlsym(lib, table[i].name);
        if (fn == NULL) {
            snprintf(lt_error, sizeof lt_error, "%s has no %s: it is not cuBLASLt 13", path, table[i].name);
            return;
        }
        memcpy((char*)&found + table[i].offset, &fn, sizeof fn);
    }
    lt = found;
}

static PipeLinkStatus need_lt(void) {
    pthread_once(&lt_once, open_lt);
    if (lt.Create == NULL) return plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "%s", lt_error);
    return PIPELINK_SUCCESS;
}

/* Make the plan's context current on this thread (a no-op when it is). */
static PipeLinkStatus bind_context(const Plan* plan) {
    CUcontext current = NULL;
    if (cu.CtxGetCurrent(&current) == 0 && current == plan->cuda_context) return PIPELINK_SUCCESS;
    CUresult r = cu.CtxSetCurrent(plan->cuda_context);
    return r ? cuda_fail(r, "cuCtxSetCurrent", NULL) : PIPELINK_SUCCESS;
}

/* ---- loading ---- */

static PipeLinkStatus load_matmul(Stage* s, void* handle) {
    MatmulCall* m = &s->matmul;
    void *desc = NULL, *pref = NULL;
    int st = lt.MatmulDescCreate(&desc, m->compute_type, m->scale_type);
    int32_t ta = m->trans[0], tb = m->trans[1];
    if (!st) st = lt.MatmulDescSetAttribute(desc, LT_DESC_TRANSA, &ta, sizeof ta);
    if (!st) st = lt.MatmulDescSetAttribute(desc, LT_DESC_TRANSB, &tb, sizeof tb);
    if (!st) st = lt.MatmulDescSetAttribute(desc, LT_DESC_EPILOGUE, &m->epilogue, sizeof m->epilogue);
    for (int i = 0; i < 3 && !st; ++i) {
        const MatmulLayout* l = &m->layout[i];
        st = lt.MatrixLayoutCreate(&m->layouts[i], m->data_type, l->rows, l->cols, l->ld);
        if (!st && l->count > 1) st = lt.MatrixLayoutSetAttribute(m->layouts[i], LT_LAYOUT_BATCH_COUNT, &l->count, sizeof l->count);
        if (!st && l->count > 1) st = lt.MatrixLayoutSetAttribute(m->layouts[i], LT_LAYOUT_BATCH_STRIDE, &l->stride, sizeof l->stride);
    }
    if (!st) st = lt.MatmulPreferenceCreate(&pref);
    if (!st) st = lt.MatmulPreferenceSetAttribute(pref, LT_PREF_MAX_WORKSPACE, &m->max_workspace, sizeof m->max_workspace);
    for (int i = 0; i < 4 && !st; ++i)
        st = lt.MatmulPreferenceSetAttribute(pref, LT_PREF_MIN_ALIGN_A + i, &m->min_align[i], sizeof m->min_align[i]);
    /* The plan's rank is the candidate's place in this very query's answer (the front end timed the
     * candidates and kept the fastest, docs/plan-format.md): ask for as many results as it did (a shorter
     * answer is not always a prefix of a longer one). */
    LtHeuristic found[PLK_MAX_ALGO_RANK];
    const int want = (int)m->algo_asked;
    int count = 0;
    memset(found, 0, sizeof found);
    if (!st)
        st = lt.MatmulAlgoGetHeuristic(handle, desc, m->layouts[0], m->layouts[1], m->layouts[2], m->layouts[2], pref, want,
                                       found, &count);
    if (pref) lt.MatmulPreferenceDestroy(pref);
    if (desc) lt.MatmulDescDestroy(desc);
    if (st) return plk_fail(PIPELINK_ERR_CUDA, "stage '%s': cuBLASLt refused the product's descriptors (status %d)", s->id, st);
    if (count < 1)
        return plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "stage '%s': cuBLASLt has no algorithm for this product "
                        "(%llux%llux%llu, epilogue %u) on this GPU; recompile the plan here", s->id,
                        (unsigned long long)m->layout[2].cols, (unsigned long long)m->layout[2].rows,
                        (unsigned long long)(m->trans[0] ? m->layout[0].rows : m->layout[0].cols), m->epilogue);
    /* A shorter answer, or a candidate at that rank that failed or needs another workspace than the plan
     * recorded, means this cuBLASLt's list is not the one the plan was compiled against (another version):
     * the heuristic's first, as without a rank. Correct either way; only the speed differs. */
    const uint32_t rank = m->algo_rank;
    const int same = count > (int)rank && found[rank].state == 0 &&
                     (m->algo_workspace == PLK_ALGO_WORKSPACE_ANY || found[rank].workspace_size == m->algo_workspace);
    m->algo_used = same ? rank : 0;
    const LtHeuristic* pick = &found[m->algo_used];
    memcpy(m->algo, pick->algo, sizeof m->algo);
    m->workspace = pick->workspace_size < m->max_workspace ? pick->workspace_size : m->max_workspace;
    float af = (float)m->alpha, bf = (float)m->beta;
    if (m->scale_type == 0) memcpy(m->alpha_bytes, &af, 4), memcpy(m->beta_bytes, &bf, 4);
    else memcpy(m->alpha_bytes, &m->alpha, 8), memcpy(m->beta_bytes, &m->beta, 8);
    return PIPELINK_SUCCESS;
}

PipeLinkStatus plk_cuda_load(Plan* plan) {
    PipeLinkStatus st = need_driver("this plan (compiled for CUDA)");
    if (st) return st;
    int dev = 0, major = 0, minor = 0;
    CUresult r = cu.DeviceGet(&dev, plan->device_id);
    if (r) return plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "the plan was compiled for cuda:%d, which this machine does "
                           "not have (%s); recompile it for a device here", plan->device_id, cu_name(r));
    cu.DeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, dev), cu.DeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, dev);
    if ((uint32_t)(major * 10 + minor) != plan->compute_capability)
        return plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "the plan's kernels were compiled for compute capability "
                        "%u.%u, but cuda:%d is %d.%d; recompile the plan on this GPU (pipelink compile --device "
                        "cuda:%d)", plan->compute_capability / 10, plan->compute_capability % 10, plan->device_id, major,
                        minor, plan->device_id);
    for (int32_t i = 0; i < plan->n_tensors; ++i) {
        const PlanTensor* t = &plan->tensors[i];
        if (plan->align[i] > 256 || (t->storage == PLK_STORAGE_ARENA && t->offset % plan->align[i]))
            return plk_fail(PIPELINK_ERR_INTEGRITY, "plan: tensor '%s' breaks the %u-byte alignment its kernels assume "
                            "(cuBLASLt takes 256: keep the stages' memory_alignment at 256 and recompile)", t->name,
                            plan->align[i]);
    }
    if ((r = cu.DevicePrimaryCtxRetain(&plan->cuda_context, dev)) != 0) {
        plan->cuda_context = NULL;
        return cuda_fail(r, "cuDevicePrimaryCtxRetain", NULL);
    }
    if ((st = bind_context(plan))) return st;
    for (int32_t i = 0; i < plan->n_cubins; ++i)
        if ((r = cu.ModuleLoadData(&plan->cubins[i].module, plan->cubins[i].bytes)) != 0) {
            plan->cubins[i].module = NULL;
            return plk_fail(r == 209 ? PIPELINK_ERR_HARDWARE_UNSUPPORTED : PIPELINK_ERR_MODULE_LOAD_FAILED,
                            "plan: cubin %d cannot be loaded on cuda:%d (%s); recompile the plan on this GPU", i,
                            plan->device_id, cu_name(r));
        }
    void* handle = NULL;
    for (int32_t i = 0; i < plan->n_stages; ++i) {
        Stage* s = &plan->stages[i];
        if (s->kind == PLK_STAGE_KERNEL) {
            KernelLaunch* k = &s->kernel;
            if ((r = cu.ModuleGetFunction(&k->function, plan->cubins[k->cubin].module, k->name)) != 0)
                return plk_fail(PIPELINK_ERR_MODULE_LOAD_FAILED, "stage '%s': kernel %s is not in its cubin (%s)", s->id,
                                k->name, cu_name(r));
        } else if (s->kind == PLK_STAGE_MATMUL) {
            if (handle == NULL && (st = need_lt()) != PIPELINK_SUCCESS) return st;
            if (handle == NULL && lt.Create(&handle) != 0) return plk_fail(PIPELINK_ERR_CUDA, "cublasLtCreate failed");
            st = load_matmul(s, handle);
            if (!st && s->matmul.workspace > plan->workspace_bytes) plan->workspace_bytes = s->matmul.workspace;
            if (st) break;
        }
    }
    if (handle) lt.Destroy(handle);
    return st;
}

/* The plan's constants (bound weights) in one device block, each at a 256-byte aligned offset, copied
 * once; the host copies are freed. Called after plk_cuda_load (the context is current). */
PipeLinkStatus plk_cuda_load_constants(Plan* plan) {
    uint64_t total = 0;
    for (int32_t i = 0; i < plan->n_tensors; ++i)
        if (plan->tensors[i].storage == PLK_STORAGE_CONSTANT) total += (plan->tensors[i].nbytes + 255) / 256 * 256;
    if (total == 0) return PIPELINK_SUCCESS;
    PipeLinkStatus st = bind_context(plan);
    if (st) return st;
    CUresult r = cu.MemAlloc(&plan->constants_device, (size_t)total);
    if (r) {
        plan->constants_device = 0;
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "the plan's constants (bound weights): %llu bytes of device memory "
                        "on cuda:%d (%s)", (unsigned long long)total, plan->device_id, cu_name(r));
    }
    uint64_t offset = 0;
    for (int32_t i = 0; i < plan->n_tensors; ++i) {
        PlanTensor* t = &plan->tensors[i];
        if (t->storage != PLK_STORAGE_CONSTANT) continue;
        t->device_constant = plan->constants_device + offset;
        offset += (t->nbytes + 255) / 256 * 256;
        if (t->nbytes && (r = cu.MemcpyHtoD(t->device_constant, t->constant, (size_t)t->nbytes)) != 0)
            return plk_fail(PIPELINK_ERR_CUDA, "copying constant '%s' (%llu bytes) to cuda:%d failed: %s (%d)", t->name,
                            (unsigned long long)t->nbytes, plan->device_id, cu_name(r), r);
    }
    /* A copy from pageable memory may return before its DMA is done; runs use other streams. */
    if ((r = cu.CtxSynchronize()) != 0) return cuda_fail(r, "cuCtxSynchronize after copying the constants", NULL);
    for (int32_t i = 0; i < plan->n_tensors; ++i)
        if (plan->tensors[i].storage == PLK_STORAGE_CONSTANT) free(plan->tensors[i].constant), plan->tensors[i].constant = NULL;
    return PIPELINK_SUCCESS;
}

void plk_cuda_unload(Plan* plan) {
    for (int32_t i = 0; i < plan->n_stages; ++i)
        for (int j = 0; plan->stages[i].kind == PLK_STAGE_MATMUL && j < 3; ++j)
            if (plan->stages[i].matmul.layouts[j]) lt.MatrixLayoutDestroy(plan->stages[i].matmul.layouts[j]);
    if (plan->cuda_context == NULL) return;
    bind_context(plan);
    if (plan->constants_device) cu.MemFree(plan->constants_device), plan->constants_device = 0;
    for (int32_t i = 0; i < plan->n_cubins; ++i)
        if (plan->cubins[i].module) cu.ModuleUnload(plan->cubins[i].module), plan->cubins[i].module = NULL;
    cu.DevicePrimaryCtxRelease(plan->device_id);
    plan->cuda_context = NULL;
}

/* ---- execution contexts ---- */

PipeLinkStatus plk_cuda_context_init(const Plan* plan, ExecContext* c) {
    PipeLinkStatus st = bind_context(plan);
    if (st) return st;
    CUresult r = 0;
    c->descs = calloc((size_t)plan->n_stages + 1, sizeof(void*));
    c->bias_set = calloc((size_t)plan->n_stages + 1, sizeof(uint64_t));
    c->kernel_values = calloc((size_t)plan->n_stages + 1, sizeof(uint64_t*));
    c->kernel_ptrs = calloc((size_t)plan->n_stages + 1, sizeof(void**));
    if (!c->descs || !c->bias_set || !c->kernel_values || !c->kernel_ptrs)
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "an execution context");
    if (plan->arena_bytes && (r = cu.MemAlloc(&c->device_arena, (size_t)plan->arena_bytes)) != 0) {
        c->device_arena = 0;
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "a device arena of %llu bytes for an execution context (%s)",
                        (unsigned long long)plan->arena_bytes, cu_name(r));
    }
    if (c->device_arena) c->held_arena = plan->arena_bytes; /* counted in pipeLinkGetArenaStats until freed */
    plk_held_add(PIPELINK_DEVICE_CUDA, plan->device_id, PLK_HELD_ARENA, (int64_t)c->held_arena);
    if (plan->workspace_bytes && (r = cu.MemAlloc(&c->workspace, (size_t)plan->workspace_bytes)) != 0) {
        c->workspace = 0;
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "a cuBLASLt workspace of %llu bytes (%s)",
                        (unsigned long long)plan->workspace_bytes, cu_name(r));
    }
    if (c->workspace) c->held_workspace = plan->workspace_bytes;
    plk_held_add(PIPELINK_DEVICE_CUDA, plan->device_id, PLK_HELD_WORKSPACE, (int64_t)c->held_workspace);
    for (int32_t i = 0; i < plan->n_stages; ++i) { /* check_finite counts a stage's outputs in host memory */
        const Stage* s = &plan->stages[i];
        const int checked = (s->kind == PLK_STAGE_CALL || s->kind == PLK_STAGE_CHECK) && s->check_finite;
        for (int32_t j = 0; checked && j < s->n_out; ++j)
            if (plan->tensors[s->out[j]].nbytes > c->check_bytes) c->check_bytes = plan->tensors[s->out[j]].nbytes;
    }
    if (c->check_bytes && (r = cu.MemAllocHost(&c->check_host, (size_t)c->check_bytes)) != 0) {
        c->check_host = NULL;
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "%llu bytes of page-locked host memory for check_finite (%s)",
                        (unsigned long long)c->check_bytes, cu_name(r));
    }
    if ((r = cu.StreamCreate(&c->stream, CU_STREAM_NON_BLOCKING)) != 0) return c->stream = NULL, cuda_fail(r, "cuStreamCreate", NULL);
    if ((r = cu.EventCreate(&c->done, CU_EVENT_DISABLE_TIMING)) != 0) return c->done = NULL, cuda_fail(r, "cuEventCreate", NULL);
    if (plan->flags & PLK_FLAG_CUDA_GRAPH) { /* the graph cache's keys and this run's, in one block */
        const size_t n = (size_t)plan->n_inputs + (size_t)plan->n_outputs + 1;
        if ((c->graph_key = calloc(n * (PLK_GRAPH_CACHE + 1), sizeof(uint64_t))) == NULL)
            return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "an execution context's graph cache");
        for (int g = 0; g < PLK_GRAPH_CACHE; ++g) c->graphs[g].key = c->graph_key + n * (size_t)(g + 1);
    }
    for (int32_t i = 0; i < plan->n_stages; ++i) {
        const Stage* s = &plan->stages[i];
        if (s->kind == PLK_STAGE_KERNEL) {
            const KernelLaunch* k = &s->kernel;
            c->kernel_values[i] = calloc((size_t)k->n_params + 1, sizeof(uint64_t));
            c->kernel_ptrs[i] = calloc((size_t)k->n_params + 1, sizeof(void*));
            if (!c->kernel_values[i] || !c->kernel_ptrs[i]) return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "an execution context");
            for (int32_t j = 0; j < k->n_params; ++j) {
                c->kernel_values[i][j] = k->params[j].kind == PLK_PARAM_PTR ? 0 : k->params[j].bits;
                c->kernel_ptrs[i][j] = &c->kernel_values[i][j]; /* little-endian: a 4-byte scalar is its first bytes */
            }
        } else if (s->kind == PLK_STAGE_MATMUL) {
            const MatmulCall* m = &s->matmul;
            if ((st = need_lt())) return st;
            if (c->lt == NULL && lt.Create(&c->lt) != 0) return c->lt = NULL, plk_fail(PIPELINK_ERR_CUDA, "cublasLtCreate failed");
            int32_t ta = m->trans[0], tb = m->trans[1];
            int e = lt.MatmulDescCreate(&c->descs[i], m->compute_type, m->scale_type);
            if (!e) e = lt.MatmulDescSetAttribute(c->descs[i], LT_DESC_TRANSA, &ta, sizeof ta);
            if (!e) e = lt.MatmulDescSetAttribute(c->descs[i], LT_DESC_TRANSB, &tb, sizeof tb);
            if (!e) e = lt.MatmulDescSetAttribute(c->descs[i], LT_DESC_EPILOGUE, &m->epilogue, sizeof m->epilogue);
            if (e) return plk_fail(PIPELINK_ERR_CUDA, "stage '%s': a cuBLASLt descriptor (status %d)", s->id, e);
        }
    }
    return PIPELINK_SUCCESS;
}

void plk_cuda_context_free(const Plan* plan, ExecContext* c) {
    if (plan->cuda_context == NULL || bind_context(plan) != PIPELINK_SUCCESS) return;
    if (c->done) cu.EventSynchronize(c->done), cu.EventDestroy(c->done); /* its last run may still be queued */
    if (c->stream) cu.StreamSynchronize(c->stream), cu.StreamDestroy(c->stream);
    for (int g = 0; g < PLK_GRAPH_CACHE; ++g)
        if (c->graphs[g].exec) cu.GraphExecDestroy(c->graphs[g].exec), c->graphs[g].exec = NULL;
    free(c->graph_key);
    if (c->device_arena) cu.MemFree(c->device_arena);
    if (c->workspace) cu.MemFree(c->workspace);
    if (c->check_host) cu.MemFreeHost(c->check_host), c->check_host = NULL;
    plk_held_add(PIPELINK_DEVICE_CUDA, plan->device_id, PLK_HELD_ARENA, -(int64_t)c->held_arena);
    plk_held_add(PIPELINK_DEVICE_CUDA, plan->device_id, PLK_HELD_WORKSPACE, -(int64_t)c->held_workspace);
    c->held_arena = c->held_workspace = 0;
    for (int32_t i = 0; i < plan->n_stages; ++i) {
        if (c->descs && c->descs[i]) lt.MatmulDescDestroy(c->descs[i]);
        if (c->kernel_values) free(c->kernel_values[i]);
        if (c->kernel_ptrs) free(c->kernel_ptrs[i]);
    }
    if (c->lt) lt.Destroy(c->lt);
    free(c->descs), free(c->bias_set), free(c->kernel_values), free(c->kernel_ptrs);
}

/* ---- a run ---- */

static PipeLinkStatus check_device_tensor(const Plan* plan, const PipeLinkTensor* t, int32_t ref, const char* role,
                                          int32_t index) {
    const PlanTensor* want = &plan->tensors[ref];
    PipeLinkStatus st = plk_check_tensor(t, want, role, index, 1, PIPELINK_DEVICE_CUDA);
    if (st) return st;
    if (t->device.device_id != plan->device_id)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s %d ('%s') is on cuda:%d; this plan runs on cuda:%d", role,
                        index, want->name, t->device.device_id, plan->device_id);
    if (want->numel == 0) return PIPELINK_SUCCESS;
    uint64_t ptr = (uint64_t)(uintptr_t)t->data + t->byte_offset;
    int ordinal = -1;
    if (cu.PointerGetAttribute(&ordinal, CU_POINTER_DEVICE_ORDINAL, ptr) != 0 || ordinal != plan->device_id)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s %d ('%s'): %p is not memory of cuda:%d (the driver does not "
                        "know it there); pass a device pointer of the plan's device", role, index, want->name,
                        (void*)(uintptr_t)ptr, plan->device_id);
    if (ptr % plan->align[ref])
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s %d ('%s') at %p is not %u-byte aligned, as the plan's "
                        "kernels assume; pass aligned buffers (cudaMalloc's are)", role, index, want->name,
                        (void*)(uintptr_t)ptr, plan->align[ref]);
    return PIPELINK_SUCCESS;
}

static PipeLinkStatus run_kernel(const Stage* s, ExecContext* c, int32_t i, CUstream stream) {
    const KernelLaunch* k = &s->kernel;
    uint64_t* values = c->kernel_values[i];
    for (int32_t j = 0; j < k->n_params; ++j)
        if (k->params[j].kind == PLK_PARAM_PTR)
            values[j] = k->params[j].tensor >= 0 ? (uint64_t)(uintptr_t)c->data[k->params[j].tensor] : 0;
    CUresult r = cu.LaunchKernel(k->function, k->dims[0], k->dims[1], k->dims[2], k->dims[3], k->dims[4], k->dims[5],
                                 k->dims[6], stream, c->kernel_ptrs[i], NULL);
    return r ? cuda_fail(r, "cuLaunchKernel", s->id) : PIPELINK_SUCCESS;
}

static PipeLinkStatus run_matmul(const Stage* s, ExecContext* c, int32_t i, CUstream stream) {
    const MatmulCall* m = &s->matmul;
    if (m->bias >= 0) {
        uint64_t bias = (uint64_t)(uintptr_t)c->data[m->bias];
        if (bias != c->bias_set[i]) { /* the descriptor keeps it between runs */
            int e = lt.MatmulDescSetAttribute(c->descs[i], LT_DESC_BIAS_POINTER, &bias, sizeof bias);
            if (e) return plk_fail(PIPELINK_ERR_CUDA, "stage '%s': setting the bias pointer (status %d)", s->id, e);
            c->bias_set[i] = bias;
        }
    }
    char* op[4];
    for (int j = 0; j < 4; ++j) op[j] = c->data[m->operand[j]];
    for (int32_t call = 0; call < m->n_calls; ++call) {
        const int64_t* off = &m->offsets[call * 3];
        int e = lt.Matmul(c->lt, c->descs[i], m->alpha_bytes, op[0] + off[0] * m->itemsize, m->layouts[0],
                          op[1] + off[1] * m->itemsize, m->layouts[1], m->beta_bytes, op[2] + off[2] * m->itemsize,
                          m->layouts[2], op[3] + off[2] * m->itemsize, m->layouts[2], m->algo,
                          (void*)(uintptr_t)c->workspace, (size_t)m->workspace, stream);
        if (e) return plk_fail(PIPELINK_ERR_CUDA, "stage '%s': cublasLtMatmul failed (status %d)", s->id, e);
    }
    return PIPELINK_SUCCESS;
}

PipeLinkStatus plk_cuda_copy(void* dst, const void* src, uint64_t nbytes, void* stream) {
    CUresult r = nbytes ? cu.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, (size_t)nbytes, (CUstream)stream) : 0;
    return r ? cuda_fail(r, "cuMemcpyDtoDAsync (on_error 'identity')", NULL) : PIPELINK_SUCCESS;
}

PipeLinkStatus plk_cuda_count_nonfinite(ExecContext* c, const PipeLinkTensor* t, void* stream, int64_t* bad) {
    *bad = 0;
    const int floating = t->dtype.code == PIPELINK_DL_FLOAT || t->dtype.code == PIPELINK_DL_BFLOAT;
    const uint64_t nbytes = (uint64_t)pipelink_numel(t) * (t->dtype.bits / 8u);
    if (!floating || nbytes == 0) return PIPELINK_SUCCESS;
    if (nbytes > c->check_bytes) /* sized at context creation from the plan's own tensors: never here */
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "check_finite: %llu bytes exceed the context's %llu", (unsigned long long)nbytes,
                        (unsigned long long)c->check_bytes);
    CUresult r = cu.MemcpyDtoHAsync(c->check_host, (CUdeviceptr)(uintptr_t)t->data, (size_t)nbytes, (CUstream)stream);
    if (!r) r = cu.StreamSynchronize((CUstream)stream);
    if (r) return cuda_fail(r, "check_finite (copying a stage's output to the host)", NULL);
    PipeLinkTensor host = *t;
    host.data = c->check_host;
    *bad = plk_count_nonfinite(&host);
    return PIPELINK_SUCCESS;
}

/* A built-in stage's check_finite (PLK_STAGE_CHECK, after its launches): its outputs counted on the host, and
 * its on_error (fail, identity, skip) when one holds a NaN or an Inf. */
static PipeLinkStatus run_check(const Plan* plan, const Stage* s, ExecContext* c, CUstream stream, char* degraded, size_t cap) {
    for (int32_t j = 0; j < s->n_out; ++j) {
        PipeLinkTensor t;
        plk_fill_tensor(&t, plan, s->out[j]);
        t.data = c->data[s->out[j]];
        int64_t bad = 0;
        PipeLinkStatus st = plk_cuda_count_nonfinite(c, &t, stream, &bad);
        if (st) return st;
        if (bad == 0) continue;
        char what[160], why[320];
        snprintf(what, sizeof what, "stage '%s' (a built-in kernel)", s->id);
        snprintf(why, sizeof why, "produced %lld non-finite values (NaN/Inf) in output '%s'", (long long)bad,
                 plan->tensors[s->out[j]].name);
        return plk_apply_policy(plan, s, c, PIPELINK_ERR_MODULE_CRASH, what, why, degraded, cap, stream);
    }
    return PIPELINK_SUCCESS;
}

/* The stages of one run, eagerly, on `stream`; `degraded` collects what on_error policies rescued. */
static PipeLinkStatus run_stages(const Plan* plan, ExecContext* c, CUstream stream, char* degraded, size_t cap) {
    PipeLinkStatus st = PIPELINK_SUCCESS;
    for (int32_t i = 0; i < plan->n_stages && !st; ++i) {
        const Stage* s = &plan->stages[i];
        if (s->kind != PLK_STAGE_CALL && plk_skip_if_missing(plan, s, c, degraded, cap)) continue;
        if (s->kind == PLK_STAGE_KERNEL) st = run_kernel(s, c, i, stream);
        else if (s->kind == PLK_STAGE_CALL) st = plk_run_call(plan, s, c, &c->slots[i], degraded, cap, stream);
        else if (s->kind == PLK_STAGE_MATMUL) st = run_matmul(s, c, i, stream);
        else if (s->kind == PLK_STAGE_CHECK) st = run_check(plan, s, c, stream, degraded, cap);
        else if (s->alias_if_contiguous) c->data[s->out[0]] = c->data[s->in[0]]; /* device inputs are contiguous */
        else if (plan->tensors[s->in[0]].nbytes) {
            CUresult r = cu.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)c->data[s->out[0]], (CUdeviceptr)(uintptr_t)c->data[s->in[0]],
                                            (size_t)plan->tensors[s->in[0]].nbytes, stream);
            if (r) st = cuda_fail(r, "cuMemcpyDtoDAsync", s->id);
        }
    }
    return st;
}

/* ---- CUDA graphs inside the core (plans with the cuda_graph flag; docs/native-core.md) ----
 *
 * A context's first run is eager (the warm-up: cuBLASLt and modules load what they need, the cuBLAS handle
 * of its stream is made). From its second run, the stages are captured once on the context's own stream
 * (thread-local mode: other threads' allocations do not break it) and instantiated; later runs with the same
 * external pointers launch the graph on the run's stream. Up to PLK_GRAPH_CACHE graphs per context, keyed by
 * the inputs' and outputs' pointers; a miss re-captures and updates the least recently used graph in place
 * (cuGraphExecUpdate), instantiating anew only when the update is refused. A capture that fails (a module
 * that synchronizes or allocates, a launch refused during capture) turns graph mode off for the pipeline:
 * that run and all later ones are eager, and that run's message says why (on a success status). */

static void graph_give_up(Pipeline* p, char* why, size_t cap, const char* what, const char* detail) {
    atomic_store(&p->graph_off, 1);
    snprintf(why, cap, "cuda_graph: capturing pipeline '%s' failed (%s: %s); it runs eagerly from now on (a "
             "module that synchronizes or allocates inside its compute cannot be captured)", p->plan.name, what, detail);
}

/* Capture the stages on the context's stream into graph slot `g` (replacing what it held). Returns nonzero
 * when the capture failed and graph mode was turned off (`why` says why); nothing was run then. */
static int capture(Pipeline* p, ExecContext* c, int g, const uint64_t* key, size_t n, char* why, size_t cap) {
    const Plan* plan = &p->plan;
    CUstream cs = c->stream;
    CUgraph graph = NULL;
    for (int32_t i = 0; i < plan->n_stages; ++i) /* modules ask for the stream's cuBLAS handle: made outside */
        if (plan->stages[i].kind == PLK_STAGE_CALL) {
            pipeLinkGetCublasHandle(cs); /* without cuBLAS a module gets NULL, in capture or not */
            break;
        }
    CUresult r = cu.StreamBeginCapture(cs, CU_CAPTURE_MODE_THREAD_LOCAL);
    if (r) return graph_give_up(p, why, cap, "cuStreamBeginCapture", cu_name(r)), 1;
    char none[8] = ""; /* graph plans carry no on_error policy (plan.c): nothing is degraded */
    PipeLinkStatus st = run_stages(plan, c, cs, none, sizeof none);
    char stage_error[512];
    snprintf(stage_error, sizeof stage_error, "%s", st ? pipeLinkGetLastErrorMessage() : "");
    r = cu.StreamEndCapture(cs, &graph); /* always: the stream leaves capture mode whatever happened */
    if (st || r || graph == NULL) {
        if (graph) cu.GraphDestroy(graph);
        graph_give_up(p, why, cap, st ? "a stage during capture" : "cuStreamEndCapture", st ? stage_error : cu_name(r));
        return 1;
    }
    if (c->graphs[g].exec) {
        /* Its last launch (at the latest, this context's previous run) finishes before it changes: a miss
         * waits for that run, a hit never does. */
        uint64_t info[8] = {0}; /* CUgraphExecUpdateResultInfo (24 bytes), with room to spare */
        cu.EventSynchronize(c->done);
        if (cu.GraphExecUpdate(c->graphs[g].exec, graph, info) != 0) {
            cu.GraphExecDestroy(c->graphs[g].exec);
            c->graphs[g].exec = NULL;
        }
    }
    if (c->graphs[g].exec == NULL && (r = cu.GraphInstantiateWithFlags(&c->graphs[g].exec, graph, 0)) != 0) {
        c->graphs[g].exec = NULL;
        cu.GraphDestroy(graph);
        return graph_give_up(p, why, cap, "cuGraphInstantiate", cu_name(r)), 1;
    }
    cu.GraphDestroy(graph); /* the executable graph is independent of it */
    memcpy(c->graphs[g].key, key, n * sizeof *key);
    return 0;
}

/* The stages of one run in graph mode, on `run` (c->data holds this run's pointers). */
static PipeLinkStatus run_graph(Pipeline* p, ExecContext* c, CUstream run, char* why, size_t cap, int32_t* launched) {
    const Plan* plan = &p->plan;
    const size_t n = (size_t)plan->n_inputs + (size_t)plan->n_outputs;
    if (c->graph_runs++ == 0) return run_stages(plan, c, run, why, cap); /* the warm-up */
    uint64_t* key = c->graph_key;
    for (int32_t i = 0; i < plan->n_inputs; ++i) key[i] = (uint64_t)(uintptr_t)c->data[plan->inputs[i]];
    for (int32_t i = 0; i < plan->n_outputs; ++i) key[plan->n_inputs + i] = (uint64_t)(uintptr_t)c->data[plan->outputs[i]];
    int hit = -1, victim = 0;
    for (int g = 0; g < PLK_GRAPH_CACHE && hit < 0; ++g) {
        if (c->graphs[g].exec && memcmp(c->graphs[g].key, key, n * sizeof *key) == 0) hit = g;
        else if (c->graphs[victim].exec && (!c->graphs[g].exec || c->graphs[g].used < c->graphs[victim].used)) victim = g;
    }
    if (hit < 0) {
        if (capture(p, c, victim, key, n, why, cap)) return run_stages(plan, c, run, why + strlen(why), cap - strlen(why));
        hit = victim;
    }
    c->graphs[hit].used = ++c->graph_clock;
    CUresult r = cu.GraphLaunch(c->graphs[hit].exec, run);
    if (r) return cuda_fail(r, "cuGraphLaunch", NULL);
    if (launched != NULL) *launched = 1;
    return PIPELINK_SUCCESS;
}

PipeLinkStatus plk_cuda_execute(Pipeline* p, const PipeLinkTensor* inputs, PipeLinkTensor* outputs, void* stream, int async,
                                void* join, int32_t* refuse_capture, int32_t* replayed) {
    const Plan* plan = &p->plan;
    PipeLinkStatus st = PIPELINK_SUCCESS;
    for (int32_t i = 0; i < plan->n_inputs && !st; ++i) st = check_device_tensor(plan, &inputs[i], plan->inputs[i], "input", i);
    for (int32_t i = 0; i < plan->n_outputs && !st; ++i)
        if (outputs[i].data != NULL) st = check_device_tensor(plan, &outputs[i], plan->outputs[i], "output", i);
    if (!st) st = plk_check_overlaps(plan, inputs, outputs);
    if (!st) st = bind_context(plan);
    if (st) return st;
    int capturing = 0;
    if (async) {
        CUresult r = cu.StreamIsCapturing((CUstream)stream, &capturing);
        if (r) return cuda_fail(r, "cuStreamIsCapturing (is `stream` a stream of this device?)", NULL);
        capturing = capturing == CU_CAPTURE_ACTIVE;
        if (capturing && refuse_capture != NULL) return *refuse_capture = 1, plk_ok();
    }
    for (int32_t i = 0; capturing && i < plan->n_stages; ++i) {
        const Stage* s = &plan->stages[i];
        if ((s->kind == PLK_STAGE_CALL || s->kind == PLK_STAGE_CHECK) && (s->on_error != PLK_ON_ERROR_FAIL || s->check_finite))
            return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeline '%s' cannot run inside a stream capture: stage '%s' "
                            "has %s, decided on the host after the stage runs; run it outside the capture", plan->name,
                            s->id, s->check_finite ? "check_finite" : "an on_error policy");
    }
    for (int32_t i = 0; capturing && i < plan->n_outputs; ++i)
        if (outputs[i].data == NULL)
            return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "output %d ('%s') has data NULL during a stream capture: the "
                            "graph would own the block; pass preallocated outputs when capturing", i,
                            plan->tensors[plan->outputs[i]].name);
    ExecContext* c = NULL;
    if (capturing) {
        /* The graph bakes this context's arena in: it leaves the pool for good. Nothing may be created
         * (cuMemAlloc) or waited on (events) inside a capture, so it must exist, idle, from an earlier run
         * the caller synchronized (the warm-up every capture needs). */
        pthread_mutex_lock(&p->pool_lock);
        c = p->free_contexts;
        if (c != NULL) p->free_contexts = c->next; /* never given back; freed with the pipeline (all_contexts) */
        pthread_mutex_unlock(&p->pool_lock);
        if (c == NULL)
            return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeline '%s' has no idle execution context to capture: "
                            "run it once (and synchronize) before capturing, and capture it no more often than it "
                            "was run concurrently before", plan->name);
    }
    /* The stream's id (unique for the process's life, unlike a handle a destroyed stream's successor may
     * reuse): a context whose last run was on this very stream needs no wait, stream order covers it. */
    unsigned long long id = 0;
    if (!capturing && async && cu.StreamGetId((CUstream)stream, &id) != 0) id = 0;
    if (!capturing && (c = plk_take_context(p, id, &st)) == NULL) return st;
    CUstream run = async ? (CUstream)stream : c->stream;
    CUresult r = 0;
    if (!capturing && !async && cu.StreamGetId(run, &id) != 0) id = 0; /* pipeLinkExecute: the context's stream */
    const int ordered = c->stream_id == 0 || (id != 0 && c->stream_id == id); /* never ran, or ran on `run` */
    if (!capturing && !ordered && (r = cu.StreamWaitEvent(run, c->done, 0)) != 0) st = cuda_fail(r, "cuStreamWaitEvent", NULL);
    if (!capturing) c->stream_id = id != 0 ? id : UINT64_MAX;
    for (int32_t i = 0; i < plan->n_inputs; ++i)
        c->data[plan->inputs[i]] = (char*)inputs[i].data + inputs[i].byte_offset;
    memset(c->allocated, 0, (size_t)plan->n_outputs);
    memset(c->missing, 0, (size_t)plan->n_tensors);
    int legacy = 0; /* read only when an output is allocated: the pool's lock stays off the common path */
    for (int32_t i = 0; i < plan->n_outputs && !st; ++i) {
        const PlanTensor* t = &plan->tensors[plan->outputs[i]];
        if (outputs[i].data != NULL) {
            c->data[plan->outputs[i]] = (char*)outputs[i].data + outputs[i].byte_offset;
            continue;
        }
        CUdeviceptr mem = 0;
        const size_t bytes = t->nbytes ? (size_t)t->nbytes : 1;
        legacy = plk_pool_allocator() == PIPELINK_ALLOCATOR_LEGACY;
        if ((r = legacy ? cu.MemAlloc(&mem, bytes) : cu.MemAllocAsync(&mem, bytes, run)) != 0) {
            st = plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "output %d ('%s'): %llu device bytes (%s)", i, t->name,
                          (unsigned long long)t->nbytes, cu_name(r));
            break;
        }
        c->allocated[i] = 1;
        c->data[plan->outputs[i]] = (void*)(uintptr_t)mem;
    }
    char degraded[768];
    degraded[0] = '\0';
    if (!st && (plan->flags & PLK_FLAG_CUDA_GRAPH) && !capturing && !atomic_load(&p->graph_off))
        st = run_graph(p, c, run, degraded, sizeof degraded, replayed);
    else if (!st)
        st = run_stages(plan, c, run, degraded, sizeof degraded); /* inside the caller's capture: into the caller's graph */
    /* Recorded even after a failure: what was enqueued still uses the arena, and the context's next user
     * waits for it. */
    if (!capturing && (r = cu.EventRecord(c->done, run)) != 0 && !st) st = cuda_fail(r, "cuEventRecord", NULL);
    /* The joining stream waits for the event just recorded (its state now: the context's next run re-records it). */
    if (!st && join != NULL && join != (void*)run && (r = cu.StreamWaitEvent((CUstream)join, c->done, 0)) != 0)
        st = cuda_fail(r, "cuStreamWaitEvent (the joining stream)", NULL);
    if (!st && !async && (r = cu.StreamSynchronize(run)) != 0) st = cuda_fail(r, "the run (cuStreamSynchronize)", NULL);
    /* Outputs a skip left missing fail the run; those made are still returned (the caller frees them). */
    const PipeLinkStatus lost = st ? PIPELINK_SUCCESS : plk_missing_outputs(plan, c, degraded);
    for (int32_t i = 0; i < plan->n_outputs; ++i) {
        if (!c->allocated[i]) continue;
        const PlanTensor* t = &plan->tensors[plan->outputs[i]];
        void* mem = c->data[plan->outputs[i]];
        if (st || c->missing[plan->outputs[i]] || plk_pool_track_device(mem, t->nbytes) != 0) {
            if (legacy) cu.MemFree((CUdeviceptr)(uintptr_t)mem);
            else cu.MemFreeAsync((CUdeviceptr)(uintptr_t)mem, run);
            if (!st && !c->missing[plan->outputs[i]])
                st = plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "tracking output %d's device block", i);
            continue;
        }
        PipeLinkTensor* o = &outputs[i];
        o->data = mem;
        o->device.device_type = PIPELINK_DEVICE_CUDA, o->device.device_id = plan->device_id;
        o->ndim = t->ndim, o->dtype = t->dtype, o->shape = t->shape, o->strides = NULL, o->byte_offset = 0;
    }
    if (!capturing) plk_give_context(p, c);
    if (st) return st;
    if (lost) return lost;
    plk_ok();
    if (degraded[0]) /* the message, on a success status; policies' entries start with a space */
        plk_fail(PIPELINK_SUCCESS, "run degraded:%s%s", degraded[0] == ' ' ? "" : " ", degraded);
    return PIPELINK_SUCCESS;
}

int32_t plk_stream_capturing(void* stream) {
    if (!atomic_load(&driver_ready)) return 0; /* no driver open yet: nothing of ours is being captured */
    int status = 0;
    if (cu.StreamIsCapturing((CUstream)stream, &status) != 0) return -1;
    return status == CU_CAPTURE_ACTIVE;
}

/* A device block the runtime allocated (pipeLinkFree, pipeLinkClearMemoryPool), in its own context whatever
 * the calling thread's is: the context the driver names, else (stream-ordered memory may name none) the
 * primary context of its device. cuMemFree waits for work using it. */
int plk_cuda_free_device(uint64_t ptr) {
    CUcontext owner = NULL, popped = NULL;
    int ordinal = -1, primary = 0;
    if (ptr == 0) return 0;
    if (cu.MemFree == NULL) return -1;
    if (cu.PointerGetAttribute(&owner, CU_POINTER_CONTEXT, (CUdeviceptr)ptr) != 0 || owner == NULL) {
        int dev = 0;
        if (cu.PointerGetAttribute(&ordinal, CU_POINTER_DEVICE_ORDINAL, (CUdeviceptr)ptr) != 0 ||
            cu.DeviceGet(&dev, ordinal) != 0 || cu.DevicePrimaryCtxRetain(&owner, dev) != 0)
            return -1;
        primary = 1;
    }
    CUresult r = cu.CtxPushCurrent(owner);
    if (r == 0) r = cu.MemFree((CUdeviceptr)ptr), cu.CtxPopCurrent(&popped);
    if (primary) cu.DevicePrimaryCtxRelease(ordinal);
    return r == 0 ? 0 : -1;
}

/* ---- pipeLinkMalloc's device memory (pool.c caches the blocks) ---- */

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext pool_primary; /* device 0's primary context, retained once, for threads with no context */
static struct { CUcontext context; CUstream stream; } pool_streams[64]; /* ASYNC: one stream per context */

PipeLinkStatus plk_cuda_pool_device(int32_t* device) {
    PipeLinkStatus st = need_driver("pipeLinkMalloc of device memory (PIPELINK_ALLOCATOR_ASYNC or _LEGACY)");
    if (st) return st;
    CUcontext current = NULL;
    int dev = 0;
    *device = 0;
    if (cu.CtxGetCurrent(&current) != 0 || current == NULL) return PIPELINK_SUCCESS; /* device 0 */
    CUresult r = cu.CtxGetDevice(&dev);
    if (r) return cuda_fail(r, "pipeLinkMalloc: cuCtxGetDevice", NULL);
    *device = dev;
    return PIPELINK_SUCCESS;
}

PipeLinkStatus plk_cuda_pool_alloc(int32_t device, uint64_t size, int legacy, void** ptr) {
    CUcontext context = NULL, popped = NULL;
    CUstream stream = NULL;
    CUresult r = 0;
    int pushed = 0;
    pthread_mutex_lock(&pool_lock);
    if (cu.CtxGetCurrent(&context) != 0 || context == NULL) {
        int dev = 0;
        if (pool_primary == NULL && (r = cu.DeviceGet(&dev, 0)) == 0 && (r = cu.DevicePrimaryCtxRetain(&pool_primary, dev)) != 0)
            pool_primary = NULL;
        if ((context = pool_primary) != NULL && (r = cu.CtxPushCurrent(context)) == 0) pushed = 1;
    }
    for (int i = 0; !r && !legacy && i < 64 && stream == NULL; ++i) {
        if (pool_streams[i].context == context) stream = pool_streams[i].stream;
        else if (pool_streams[i].context == NULL && (r = cu.StreamCreate(&stream, CU_STREAM_NON_BLOCKING)) == 0)
            pool_streams[i].context = context, pool_streams[i].stream = stream;
    }
    pthread_mutex_unlock(&pool_lock);
    CUdeviceptr mem = 0;
    if (!r && legacy) r = cu.MemAlloc(&mem, (size_t)size);
    else if (!r && stream == NULL) r = 2; /* CUDA_ERROR_OUT_OF_MEMORY: 64 contexts have a stream already */
    else if (!r && (r = cu.MemAllocAsync(&mem, (size_t)size, stream)) == 0 && (r = cu.StreamSynchronize(stream)) != 0)
        cu.MemFreeAsync(mem, stream), mem = 0;
    if (pushed) cu.CtxPopCurrent(&popped);
    if (r)
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeLinkMalloc: %llu bytes of device memory on cuda:%d (%s, %s); "
                        "pipeLinkClearMemoryPool returns cached blocks", (unsigned long long)size, device,
                        legacy ? "cuMemAlloc" : "cuMemAllocAsync", cu_name(r));
    *ptr = (void*)(uintptr_t)mem;
    return PIPELINK_SUCCESS;
}

PipeLinkStatus plk_cuda_alloc_device(uint64_t size, void** ptr) {
    CUdeviceptr mem = 0;
    CUresult r = cu.MemAlloc(&mem, size ? (size_t)size : 1);
    if (r) return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "%llu bytes of device memory (%s)", (unsigned long long)size, cu_name(r));
    *ptr = (void*)(uintptr_t)mem;
    return PIPELINK_SUCCESS;
}

/* ---- cuBLAS handles per stream (seed 3.3; pipelink.h's services.cublas_handle) ---- */

/* libcublas.so.13 beside $PIPELINK_CUBLASLT when that is set (the wheel ships both in one folder), else the
 * loader's search. */
static struct { int (*Create)(void**); int (*SetStream)(void*, void*); } blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static char blas_error[1024];

static void open_blas(void) {
    char path[4096] = "libcublas.so.13";
    const char* lt_path = getenv("PIPELINK_CUBLASLT");
    const char* slash = lt_path ? strrchr(lt_path, '/') : NULL;
    if (slash != NULL) snprintf(path, sizeof path, "%.*s/libcublas.so.13", (int)(slash - lt_path), lt_path);
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void* create = lib ? dlsym(lib, "cublasCreate_v2") : NULL;
    void* set_stream = lib ? dlsym(lib, "cublasSetStream_v2") : NULL;
    if (create == NULL || set_stream == NULL) {
        snprintf(blas_error, sizeof blas_error, "cuBLAS cannot be opened from %s (%s): install it (pip install "
                 "nvidia-cublas) and set PIPELINK_CUBLASLT to libcublasLt.so.13's path (libcublas.so.13 beside it)",
                 path, lib ? "no cublasCreate_v2" : dlerror());
        return;
    }
    memcpy(&blas.SetStream, &set_stream, sizeof set_stream);
    memcpy(&blas.Create, &create, sizeof create);
}

#define MAX_STREAM_HANDLES 1024
static struct { void* stream; void* handle; } stream_handles[MAX_STREAM_HANDLES];
static int n_stream_handles;
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;

void* pipeLinkGetCublasHandle(void* stream) {
    if (need_driver("pipeLinkGetCublasHandle")) return NULL;
    pthread_once(&blas_once, open_blas);
    if (blas.Create == NULL) {
        plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "pipeLinkGetCublasHandle: %s", blas_error);
        return NULL;
    }
    void* found = NULL;
    int status = 0;
    pthread_mutex_lock(&handles_lock);
    for (int i = 0; i < n_stream_handles && !found; ++i)
        if (stream_handles[i].stream == stream) found = stream_handles[i].handle;
    if (found == NULL && n_stream_handles < MAX_STREAM_HANDLES && (status = blas.Create(&found)) == 0) {
        if ((status = blas.SetStream(found, stream)) == 0) {
            stream_handles[n_stream_handles].stream = stream, stream_handles[n_stream_handles].handle = found;
            ++n_stream_handles;
        } else {
            found = NULL; /* a handle bound to no stream is of no use; it is not kept */
        }
    }
    pthread_mutex_unlock(&handles_lock);
    if (found == NULL)
        plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeLinkGetCublasHandle: no handle for stream %p (%d streams have one; "
                 "cublasCreate/cublasSetStream status %d)", stream, n_stream_handles, status);
    else
        plk_ok();
    return found;
}
