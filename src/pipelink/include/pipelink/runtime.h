/*
 * pipelink/runtime.h - the C API of the PipeLink native core (the seed's section 4.5), libpipelink_runtime.
 *
 *   cc app.c -I"$(pipelink include-dir)" -L"$(pipelink lib-dir)" -lpipelink_runtime
 *   CMake: find_package(PipeLink) then target_link_libraries(app PRIVATE PipeLink::runtime)
 *
 * Model: SQLite. Opaque handles; every call returns a PipeLinkStatus (the numbers of pipelink.errors.ErrorCode)
 * and leaves a message for the calling thread in pipeLinkGetLastErrorMessage(). No argument a caller can
 * pass crashes the process: NULLs, wrong counts, shapes, dtypes or devices, destroyed or made-up handles
 * and corrupt plan files are all statuses. A crash *inside* a native module is not caught here (Python's
 * isolation "process" is the answer to that).
 *
 * A pipeline is loaded from a compiled plan (`pipelink compile CONFIG -o model.plk`, or Pipeline.save;
 * docs/plan-format.md). Given a ".json" config, pipeLinkLoadPipeline runs `python3 -m pipelink compile`
 * (the interpreter named by $PIPELINK_PYTHON, else python3) and loads the result; when that fails, the
 * message says to run `pipelink compile` and load the .plk.
 *
 * CPU plans call native modules; CUDA plans launch built-in kernels (embedded cubins) and cuBLASLt products
 * and call native modules' CUDA entry points (docs/native-core.md, "The CUDA path"). The CUDA driver (libcuda.so.1) and cuBLASLt ($PIPELINK_CUBLASLT,
 * else libcublasLt.so.13) are opened at run time: without them a CUDA plan is PIPELINK_ERR_HARDWARE_UNSUPPORTED.
 */
#ifndef PIPELINK_RUNTIME_H_
#define PIPELINK_RUNTIME_H_

#include "../pipelink.h" /* PipeLinkStatus, PipeLinkTensor (DLTensor), dtype and device codes */

#ifdef __cplusplus
extern "C" {
#endif

#define PIPELINK_RUNTIME_VERSION_MAJOR 0
#define PIPELINK_RUNTIME_VERSION_MINOR 2 /* 2: pipeLinkGetArenaStats */

/* Exported from libpipelink_runtime (built with hidden visibility: only these functions are its ABI). */
#if defined(__GNUC__)
#define PIPELINK_API __attribute__((visibility("default")))
#else
#define PIPELINK_API
#endif

typedef struct PipeLinkPipeline_* PipeLinkPipelineHandle; /* opaque; validated on every call */

/* One input or output of a pipeline. Pointers stay valid until the pipeline is destroyed. */
typedef struct PipeLinkTensorInfo {
    const char* name;
    PipeLinkDataType dtype;
    int32_t dtype_id; /* PipeLinkDTypeId */
    int32_t ndim;
    const int64_t* shape;
} PipeLinkTensorInfo;

/* What pipeLinkGetPipelineInfo reports: inputs and outputs in the order Execute takes them. Bound weights
 * (the config's weights file) are constants inside the plan, loaded once: they are not inputs. */
typedef struct PipeLinkPipelineInfo {
    const char* name;
    int32_t device_type; /* PIPELINK_DEVICE_* the plan was compiled for */
    int32_t n_inputs;
    int32_t n_outputs;
    int32_t n_stages;
    const PipeLinkTensorInfo* inputs;
    const PipeLinkTensorInfo* outputs;
    uint64_t arena_bytes; /* one arena of this size per execution context */
} PipeLinkPipelineInfo;

/* Where pipeLinkMalloc's memory comes from, and how the device outputs of CUDA plans (data NULL) are
 * allocated:
 *   ASYNC   device memory: pipeLinkMalloc with cuMemAllocAsync on a runtime stream (synchronized before it
 *           returns); CUDA outputs with cuMemAllocAsync on the run's stream.
 *   LEGACY  device memory: cuMemAlloc for both (synchronous).
 *   HOST    host memory for pipeLinkMalloc (256-byte aligned); CUDA outputs as with ASYNC.
 * Default: ASYNC when a CUDA device is usable (libcuda.so.1 opens and reports a device), else HOST; chosen on
 * first use and reported in PipeLinkPoolStats.allocator. ASYNC or LEGACY without a usable device is
 * PIPELINK_ERR_HARDWARE_UNSUPPORTED. Device memory comes from the calling thread's current CUDA context's
 * device, else device 0 (its primary context). Inside a stream capture no allocator is used: pass
 * preallocated outputs. A host program feeding a CPU plan sets HOST (or allocates its own host memory). */
typedef enum PipeLinkAllocator {
    PIPELINK_ALLOCATOR_ASYNC = 0,
    PIPELINK_ALLOCATOR_LEGACY = 1,
    PIPELINK_ALLOCATOR_HOST = 2
} PipeLinkAllocator;

/* The memory pool of pipeLinkMalloc: blocks are rounded up to a power of two (at least 256 bytes); a freed
 * block (host or device) is cached for the next request of its size class (and device) until
 * pipeLinkClearMemoryPool. The allocated counts include the device blocks of runtime-allocated CUDA outputs
 * (not cached). */
typedef struct PipeLinkPoolStats {
    uint64_t allocated_bytes; /* live blocks, as rounded */
    uint64_t peak_bytes;      /* the most allocated_bytes ever was */
    uint64_t cached_bytes;    /* freed blocks kept for reuse */
    uint64_t n_allocations;   /* live blocks */
    uint64_t n_reused;        /* requests served from the cache */
    int32_t allocator;        /* PipeLinkAllocator */
} PipeLinkPoolStats;

/* What the loaded pipelines hold on one device besides the pool above: the arena of every execution context
 * (one per context, PipeLinkPipelineInfo.arena_bytes each, made on a context's first run and kept until its
 * pipeline is destroyed), the contexts' workspaces (CUDA plans' cuBLASLt workspace, native modules' workspace
 * hook or service) and the plans' constants (bound weights: a CUDA plan's device block, a CPU plan's host
 * copies). PipeLinkPoolStats has no size field, so these come in a struct of their own that has one: set
 * `size` to sizeof(PipeLinkArenaStats) before the call; the runtime fills the fields it knows that fit in
 * `size` and writes back how many bytes it filled. Fields are only ever added at the end. */
typedef struct PipeLinkArenaStats {
    uint32_t size;            /* in: sizeof(PipeLinkArenaStats) as the caller was built; out: bytes filled */
    int32_t n_contexts;       /* execution contexts alive on the device (each holds one arena) */
    uint64_t arena_bytes;     /* their arenas */
    uint64_t workspace_bytes; /* their workspaces */
    uint64_t constant_bytes;  /* loaded plans' constants */
    uint64_t peak_bytes;      /* the most arena + workspace + constant bytes held at once on the device */
} PipeLinkArenaStats;

/* Reference-counted: each Initialize needs one Finalize. The last Finalize destroys the pipelines still
 * loaded and empties the pool cache. Every other call except the memory functions needs it first. */
PIPELINK_API PipeLinkStatus pipeLinkInitialize(void);
PIPELINK_API PipeLinkStatus pipeLinkFinalize(void);

/* Load a compiled plan (.plk) or a JSON config (compiled through the Python package). Native modules are
 * read once, checked against the plan's sha256 and opened from those verified bytes. */
PIPELINK_API PipeLinkStatus pipeLinkLoadPipeline(const char* path, PipeLinkPipelineHandle* out);
/* Waits for executions of this pipeline in other threads, then frees it; the handle is dead afterwards. */
PIPELINK_API PipeLinkStatus pipeLinkDestroyPipeline(PipeLinkPipelineHandle h);
/* The plan's inputs and outputs. Whether the plan runs as CUDA graphs (its cuda_graph flag, written by
 * `pipelink compile --cuda-graph`) is not reported here: the struct has no spare field. */
PIPELINK_API PipeLinkStatus pipeLinkGetPipelineInfo(PipeLinkPipelineHandle h, PipeLinkPipelineInfo* info);

/* Run once; returns when the outputs are ready. Thread-safe: concurrent calls on one pipeline each take an
 * execution context (its own arena; on CUDA also its own stream) from the pipeline's small pool.
 * inputs:  n_inputs tensors in pipelineinfo order; the plan's dtype and shape. CPU plans: host memory
 *          (PIPELINK_DEVICE_CPU or _CUDA_HOST), strides NULL (contiguous) or any non-negative strides
 *          (copied). CUDA plans: contiguous device memory of the plan's device (PIPELINK_DEVICE_CUDA and its
 *          number), aligned as its kernels assume (256 bytes, as cudaMalloc gives), already written.
 * outputs: n_outputs tensors. data NULL: the runtime allocates the output with pipeLinkMalloc (release it
 *          with pipeLinkFree) and fills in data, device, dtype, ndim and shape (shape then points at the
 *          pipeline's own array). Otherwise it is written in place after its dtype, shape and device are
 *          checked (contiguous only).
 * A stage that fails follows its on_error policy: identity and fallback degrade and the run succeeds;
 * skip leaves its outputs (and everything that reads them) missing: then PIPELINK_ERR_MODULE_CRASH is
 * returned, the message names the missing outputs, and a missing runtime-allocated output has data NULL.
 * CUDA plans with the cuda_graph flag: each execution context runs eagerly once, then captures its stages
 * into a CUDA graph per set of input/output pointers (up to 8, least recently used replaced) and replays it;
 * a capture that fails turns graph mode off for the pipeline, and that run succeeds with the message
 * "PIPELINK_SUCCESS: run degraded: cuda_graph: ..." (docs/native-core.md). */
PIPELINK_API PipeLinkStatus pipeLinkExecute(PipeLinkPipelineHandle h, const PipeLinkTensor* inputs, int32_t n_inputs,
                               PipeLinkTensor* outputs, int32_t n_outputs);
/* As pipeLinkExecute, ordered on `stream` (a CUstream/cudaStream_t) for CUDA plans: enqueues the run and
 * returns without waiting (runtime-allocated outputs come from stream-ordered memory). Safe inside the
 * caller's stream capture once the pipeline has run (and been synchronized) before, with preallocated
 * outputs: the captured graph keeps its execution context for good. CPU plans take a NULL stream and run
 * synchronously. */
PIPELINK_API PipeLinkStatus pipeLinkExecuteAsync(PipeLinkPipelineHandle h, const PipeLinkTensor* inputs, int32_t n_inputs,
                                    PipeLinkTensor* outputs, int32_t n_outputs, void* stream);

/* Memory from the runtime's pool (256-byte aligned): device or host memory as the allocator says (see
 * PipeLinkAllocator). pipeLinkFree takes back pool blocks (cached) and the device blocks of outputs a CUDA
 * plan allocated (freed); of a pointer the runtime did not hand out (or already took back) it is
 * PIPELINK_ERR_INVALID_ARGUMENT, never a crash; pipeLinkFree(NULL) is a no-op. The stats count host and
 * device blocks. A freed device block is handed out again at once (no stream ordering, unlike cudaFree, which
 * waits): free it once the work using it is complete. A CPU plan handed device memory (labelled CPU) refuses it with PIPELINK_ERR_INVALID_ARGUMENT
 * when the CUDA driver is open in the process. */
PIPELINK_API PipeLinkStatus pipeLinkMalloc(void** ptr, size_t nbytes);
PIPELINK_API PipeLinkStatus pipeLinkFree(void* ptr);
PIPELINK_API PipeLinkStatus pipeLinkGetMemoryPoolStats(PipeLinkPoolStats* stats);
PIPELINK_API PipeLinkStatus pipeLinkClearMemoryPool(void);
PIPELINK_API PipeLinkStatus pipeLinkSetMemoryAllocator(PipeLinkAllocator kind);
/* The memory loaded pipelines hold on a device (PipeLinkArenaStats): device_type PIPELINK_DEVICE_CPU with
 * device_id 0, or PIPELINK_DEVICE_CUDA with the device's number (0 to 1024). Another device, a NULL `stats` or
 * a `size` below the first version's struct is PIPELINK_ERR_INVALID_ARGUMENT. Counters are read without a
 * lock: each is exact, a read racing a context being made may see one field updated and not the next. */
PIPELINK_API PipeLinkStatus pipeLinkGetArenaStats(int32_t device_type, int32_t device_id, PipeLinkArenaStats* stats);

/* Requirements separated by commas or spaces: "compute_capability>=8.0", "device=cuda", "device=cpu".
 * Operators: >= > <= < == !=. Without an NVIDIA driver (libcuda.so.1) a CUDA requirement is
 * PIPELINK_ERR_HARDWARE_UNSUPPORTED; a malformed string is PIPELINK_ERR_INVALID_ARGUMENT. */
PIPELINK_API PipeLinkStatus pipeLinkValidateHardware(const char* requirements);

/* The manifest entry (JSON) of an operator used by a loaded pipeline, NUL-terminated in json[capacity].
 * Too small a buffer is PIPELINK_ERR_INVALID_ARGUMENT (the message says how many bytes it needs). */
PIPELINK_API PipeLinkStatus pipeLinkGetOperatorInfo(const char* name, char* json, size_t capacity);

/* A cuBLAS handle (cublasHandle_t) bound to `stream` (cublasSetStream), one per stream, created on first
 * request and reused (seed 3.3). NULL without a CUDA driver or libcublas.so.13 (found beside
 * $PIPELINK_CUBLASLT, else by the loader); the message says why. */
PIPELINK_API void* pipeLinkGetCublasHandle(void* stream);

/* The message of the calling thread's last call ("" after a call that succeeded cleanly). Never NULL. */
PIPELINK_API const char* pipeLinkGetLastErrorMessage(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PIPELINK_RUNTIME_H_ */
