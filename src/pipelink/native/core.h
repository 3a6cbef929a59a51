/* core.h - the native core's internal structures: a loaded plan, its stages and execution contexts.
 * Nothing here is part of the public API (pipelink/runtime.h); see docs/plan-format.md for the file. */
#ifndef PIPELINK_CORE_H_
#define PIPELINK_CORE_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../include/pipelink/runtime.h"

#define PLK_MAGIC "PLKPLAN"     /* 8 bytes with the NUL */
#define PLK_FORMAT_VERSION 5u     /* written; versions 1 (CPU plans, no cubins), 2 (no constants), 3 (no
                                     algorithm ranks) and 4 (no check stages) are still read */
#define PLK_FORMAT_VERSION_MIN 1u
#define PLK_HEADER_SIZE 64u
#define PLK_BUNDLE_MAGIC "PLKBNDL" /* 8 bytes with the NUL: several signatures of one pipeline, one plan each */
#define PLK_BUNDLE_VERSION 1u
#define PLK_MAX_SIGNATURES 64      /* plans in one bundle */
#define PLK_MAX_NDIM 32
#define PLK_MAX_COUNT (1u << 20) /* any count in a plan: tensors, stages, attrs, ... */
#define PLK_FLAG_CUDA_GRAPH 1u    /* header flags: CUDA plans run as CUDA graphs captured by the core */
#define PLK_FLAGS_KNOWN PLK_FLAG_CUDA_GRAPH
#define PLK_GRAPH_CACHE 32        /* instantiated graphs per execution context, keyed by external pointers */
#define PLK_MAX_ALGO_RANK 32      /* a product's algorithm rank is below this (the heuristic's list, format 4) */
#define PLK_ALGO_WORKSPACE_ANY UINT64_MAX /* format 3 products: the rank-0 candidate, whatever it needs */

enum { PLK_STORAGE_EXTERNAL = 0, PLK_STORAGE_ARENA = 1, PLK_STORAGE_CONSTANT = 2 /* format 3 */ };
enum { PLK_STAGE_CALL = 0, PLK_STAGE_RELAYOUT = 1, PLK_STAGE_KERNEL = 2, PLK_STAGE_MATMUL = 3, PLK_STAGE_CHECK = 4 };
enum { PLK_PARAM_PTR = 0, PLK_PARAM_I32 = 1, PLK_PARAM_I64 = 2, PLK_PARAM_F32 = 3, PLK_PARAM_F64 = 4 };
enum { PLK_ON_ERROR_FAIL = 0, PLK_ON_ERROR_IDENTITY = 1, PLK_ON_ERROR_SKIP = 2, PLK_ON_ERROR_FALLBACK = 3 };

typedef struct PlanTensor {
    char* name;
    int32_t dtype_id;
    PipeLinkDataType dtype;
    int32_t ndim;
    int64_t* shape;   /* ndim entries */
    int64_t* strides; /* contiguous strides in elements, handed to modules */
    int64_t numel;
    uint64_t nbytes;
    int32_t storage; /* PLK_STORAGE_* */
    uint64_t offset; /* in the arena */
    uint8_t* constant;        /* PLK_STORAGE_CONSTANT: its bytes in host memory (256-aligned); NULL once a CUDA
                                 plan has uploaded them */
    uint64_t device_constant; /* PLK_STORAGE_CONSTANT in CUDA plans: its device copy (in constants_device) */
} PlanTensor;

typedef struct PlanLibrary {
    char* path; /* as resolved against the plan's folder */
    uint8_t sha256[32];
    void* handle; /* dlopen of the verified private copy */
    int fd;       /* the memfd holding that copy: open while loaded, so its /proc/self/fd name is unique */
} PlanLibrary;

/* A native entry point with its attributes and optional hooks. */
typedef struct CallTarget {
    char* op_name;
    uint32_t library;
    char* entry;
    char* workspace_hook; /* "" when absent */
    char* create_hook;
    char* destroy_hook;
    PipeLinkAttr* attrs;
    int32_t n_attrs;
    int32_t n_in, n_out; /* ports it takes: a prefix of the stage's */
    PipeLinkComputeFn fn;
    PipeLinkWorkspaceSizeFn workspace_size;
    PipeLinkContextCreateFn create;
    PipeLinkContextDestroyFn destroy;
} CallTarget;

/* One parameter of a kernel launch: a pointer to a plan tensor (-1: null) or a scalar's bytes. */
typedef struct KernelParam {
    int32_t kind;   /* PLK_PARAM_* */
    int32_t tensor; /* PLK_PARAM_PTR */
    uint32_t align; /* PLK_PARAM_PTR: the byte alignment the kernel assumes */
    uint64_t bits;  /* scalars: the value's bytes (little-endian, 4 or 8) */
} KernelParam;

/* A launch of a built-in kernel from one of the plan's cubins (PLK_STAGE_KERNEL). */
typedef struct KernelLaunch {
    uint32_t cubin;
    char* name;
    uint32_t dims[7]; /* grid x, y, z, block x, y, z, dynamic shared memory */
    int32_t n_params;
    KernelParam* params;
    void* function; /* CUfunction, resolved at load */
} KernelLaunch;

/* A column-major cuBLASLt layout. */
typedef struct MatmulLayout {
    uint64_t rows, cols;
    int64_t ld;
    int32_t count; /* strided batch count (1: not batched) */
    int64_t stride;
} MatmulLayout;

/* The cuBLASLt calls of one product (PLK_STAGE_MATMUL), in cuBLASLt's order (A, B, C, D). */
typedef struct MatmulCall {
    int32_t data_type, compute_type, scale_type;
    uint8_t trans[2];
    uint32_t epilogue;
    MatmulLayout layout[3]; /* A, B, C = D */
    double alpha, beta;
    int32_t operand[4]; /* plan tensors of A, B, C, D */
    int32_t bias;       /* plan tensor of the BIAS epilogue's vector, or -1 */
    int32_t n_calls;
    int64_t* offsets; /* 3 per call: A, B, C/D, in elements */
    uint32_t itemsize;
    uint64_t max_workspace;
    uint32_t min_align[4];
    uint32_t algo_rank;      /* format 4: the chosen candidate's place in the heuristic's list (0 before) */
    uint32_t algo_asked;     /* format 4: how many results the query that ranked it asked for (1 before) */
    uint64_t algo_workspace; /* format 4: the workspace it needs (PLK_ALGO_WORKSPACE_ANY before) */
    /* made at load (cuda.c) */
    uint32_t algo_used; /* the rank taken: algo_rank, or 0 when this cuBLASLt's list differs (fallback) */
    void* layouts[3];
    uint64_t algo[8]; /* cublasLtMatmulAlgo_t */
    uint64_t workspace;
    uint8_t alpha_bytes[8], beta_bytes[8]; /* in the scale type */
} MatmulCall;

typedef struct Stage {
    int32_t kind; /* PLK_STAGE_* */
    char* id;
    /* PLK_STAGE_CALL */
    char* op_version;
    char* op_json; /* the operator's manifest entry */
    int32_t on_error;     /* PLK_STAGE_CALL and PLK_STAGE_CHECK (a built-in's check_finite, after its launches) */
    int32_t check_finite; /* the same */
    double timeout_ms; /* 0: none */
    CallTarget call;
    CallTarget fallback; /* on_error == FALLBACK */
    /* both kinds: tensor refs (-1: an absent optional input); a relayout reads in[0] and writes out[0] */
    int32_t n_in, n_out;
    int32_t* in;
    int32_t* out;
    int32_t alias_if_contiguous; /* relayout: read a contiguous source in place instead of copying */
    KernelLaunch kernel;         /* PLK_STAGE_KERNEL */
    MatmulCall matmul;           /* PLK_STAGE_MATMUL */
} Stage;

typedef struct PlanCubin {
    uint8_t sha256[32];
    uint64_t size;
    uint8_t* bytes;
    void* module; /* CUmodule, loaded at load */
} PlanCubin;

typedef struct Plan {
    int32_t device_type, device_id;
    char* name;
    uint64_t arena_bytes;
    uint32_t arena_alignment;
    int32_t n_tensors;
    PlanTensor* tensors;
    int32_t n_inputs, n_outputs;
    int32_t* inputs; /* tensor indices, pipeline order */
    int32_t* outputs;
    int32_t n_libraries;
    PlanLibrary* libraries;
    int32_t n_stages;
    Stage* stages;
    uint8_t* read_in_place; /* per tensor: a module reads it directly (so a caller's copy must be contiguous) */
    uint32_t compute_capability; /* CUDA plans: major * 10 + minor the cubins were built for */
    int32_t n_cubins;
    PlanCubin* cubins;
    uint32_t* align; /* per tensor: the byte alignment its kernels assume (CUDA plans) */
    void* cuda_context; /* CUcontext: the device's primary context, retained while loaded */
    uint64_t workspace_bytes; /* the largest cuBLASLt workspace a stage needs */
    uint32_t flags;           /* PLK_FLAG_*, from the header (docs/plan-format.md) */
    uint32_t version;         /* the file's format version (what a record holds depends on it) */
    int32_t n_constants;        /* tensors of PLK_STORAGE_CONSTANT (bound weights), loaded once */
    uint64_t constants_device;  /* CUDA plans: the one device block holding every constant (cuMemAlloc) */
} Plan;

/* Per stage and execution context: the tensor arrays handed to the module, its services and state. */
typedef struct StageSlot {
    PipeLinkTensor* in;
    PipeLinkTensor* out;
    PipeLinkServices services;
    PipeLinkServices fallback_services;
    void* workspace;
    uint64_t workspace_size;
} StageSlot;

/* What one execution needs of its own: the arena, the tensor pointers, the stage slots. */
typedef struct ExecContext {
    struct ExecContext* next; /* the pipeline's free list */
    void* arena;
    void** data;      /* per plan tensor, this run */
    uint8_t* missing; /* per plan tensor: not produced this run (skip) */
    uint8_t* allocated; /* per output: allocated by the runtime this run */
    StageSlot* slots;
    /* CUDA plans */
    uint64_t device_arena;
    void* stream;  /* CUstream: pipeLinkExecute's */
    void* done;    /* CUevent: recorded after each run; waited on by the next run using this context */
    uint64_t stream_id; /* cuStreamGetId of its last run's stream: 0 never ran, UINT64_MAX unknown (cuda.c) */
    void* lt;      /* cublasLtHandle_t */
    void** descs;  /* per stage: its cublasLtMatmulDesc_t (the bias pointer differs per context) */
    uint64_t* bias_set; /* per stage: the bias pointer its desc holds */
    uint64_t workspace;
    uint64_t** kernel_values; /* per kernel stage: parameter values; kernel_ptrs points at them */
    void*** kernel_ptrs;
    void* check_host;     /* page-locked host memory: check_finite stages' outputs are counted there (cuda.c) */
    uint64_t check_bytes; /* its size: the largest output of a check_finite stage */
    /* CUDA plans with PLK_FLAG_CUDA_GRAPH (cuda.c): an LRU cache of graphs this context captured */
    struct {
        uint64_t* key; /* the external pointers (inputs, then outputs) the graph bakes in */
        void* exec;    /* CUgraphExec; NULL: empty */
        uint64_t used; /* graph_clock at its last launch */
    } graphs[PLK_GRAPH_CACHE];
    uint64_t* graph_key; /* this run's external pointers (the keys live in the same block) */
    uint64_t graph_clock;
    uint64_t graph_runs; /* runs of this context in graph mode: the first is eager (warm-up) */
    /* accounting.c: what this context added to its device's counts, taken back when it is freed */
    uint64_t held_arena, held_workspace; /* its arena; its cuBLASLt workspace (modules' are in the slots) */
    int32_t counted;                     /* counted in the device's n_contexts */
} ExecContext;

typedef struct Pipeline {
    Plan plan;
    PipeLinkTensorInfo* input_info;
    PipeLinkTensorInfo* output_info;
    pthread_mutex_t pool_lock; /* guards the free list only (held for a pointer swap) */
    ExecContext* free_contexts;
    ExecContext* all_contexts[64]; /* every context made, to free them; more than 64 concurrent runs
                                      get a context of their own that is freed after the run */
    int32_t n_contexts;
    _Atomic int graph_off; /* PLK_FLAG_CUDA_GRAPH plans: a capture failed, every run is eager from then on */
    uint64_t held_constants; /* the constants' bytes counted for its device (accounting.c) while it is loaded */
    struct Pipeline** more;  /* a bundle's other signatures (this is its first); execute picks by shapes */
    int32_t n_more;
    int64_t* bundle_shapes;  /* a bundle's info shapes: -1 where its signatures differ */
} Pipeline;

/* errors.c */
PipeLinkStatus plk_fail(PipeLinkStatus status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
PipeLinkStatus plk_ok(void);
const char* plk_status_name(int status);
int plk_is_initialized(void);

/* sha256.c */
void plk_sha256(const void* data, size_t n, uint8_t out[32]);
void plk_hex(const uint8_t* bytes, size_t n, char* out); /* out: 2n+1 chars */

/* plan.c */
PipeLinkStatus plk_plan_parse(const uint8_t* bytes, size_t n, const char* where, uint32_t version, int32_t device_type,
                              int32_t device_id, Plan* plan);
PipeLinkStatus plk_plan_open_libraries(Plan* plan, const char* plan_dir);
void plk_plan_free(Plan* plan);
int plk_dtype_info(int32_t dtype_id, PipeLinkDataType* dtype, uint32_t* itemsize);

/* execute.c */
PipeLinkStatus plk_pipeline_execute(Pipeline* p, const PipeLinkTensor* inputs, PipeLinkTensor* outputs);
void plk_pipeline_free_contexts(Pipeline* p);
void plk_fill_tensor(PipeLinkTensor* t, const Plan* plan, int32_t ref);
PipeLinkStatus plk_check_tensor(const PipeLinkTensor* t, const PlanTensor* want, const char* role, int32_t index,
                                int contiguous, int32_t device_type);
PipeLinkStatus plk_check_overlaps(const Plan* plan, const PipeLinkTensor* inputs, const PipeLinkTensor* outputs);
PipeLinkStatus plk_new_context(const Plan* plan, ExecContext** out);
/* An idle context (made when none is): preferably the one whose last run was on the stream `stream_id`
 * (cuStreamGetId; 0: none named), so one thread's runs on its own stream keep their context and never wait
 * for another stream's work. */
ExecContext* plk_take_context(Pipeline* p, uint64_t stream_id, PipeLinkStatus* st);
void plk_give_context(Pipeline* p, ExecContext* c);
/* One native call stage with its checks and policy (degraded: what a policy rescued, appended). */
PipeLinkStatus plk_run_call(const Plan* plan, const Stage* s, ExecContext* c, StageSlot* slot, char* degraded,
                            size_t cap, void* stream);
/* A stage's on_error identity or skip after its failure `why` (`what` names the stage), else the failure
 * `code`: identity copies its inputs to its outputs (a device copy on `stream` in CUDA plans), skip leaves its
 * outputs missing; `degraded` says what was rescued. Fallbacks are plk_run_call's (they call a module). */
PipeLinkStatus plk_apply_policy(const Plan* plan, const Stage* s, ExecContext* c, PipeLinkStatus code, const char* what,
                                const char* why, char* degraded, size_t cap, void* stream);
/* Non-finite elements (NaN/Inf) of a float tensor in host memory; 0 for other dtypes. */
int64_t plk_count_nonfinite(const PipeLinkTensor* t);
/* After a run: PIPELINK_ERR_MODULE_CRASH naming the pipeline outputs an on_error skip left missing (with what
 * `degraded` says), else PIPELINK_SUCCESS. */
PipeLinkStatus plk_missing_outputs(const Plan* plan, const ExecContext* c, const char* degraded);
/* A stage whose input an earlier skip left missing: its outputs are missing too, and `degraded` says so.
 * Returns 1 when the stage must not run. */
int plk_skip_if_missing(const Plan* plan, const Stage* s, ExecContext* c, char* degraded, size_t cap);

/* cuda.c: the CUDA path (driver and cuBLASLt opened at run time) */
/* The on_error and check_finite of a native call on the device (execute.c's plk_run_call): a device copy
 * queued on `stream` (identity), and the non-finite count of a device tensor, copied to the context's
 * page-locked buffer and counted there (synchronizes `stream`). */
PipeLinkStatus plk_cuda_copy(void* dst, const void* src, uint64_t nbytes, void* stream);
PipeLinkStatus plk_cuda_count_nonfinite(ExecContext* c, const PipeLinkTensor* t, void* stream, int64_t* bad);
PipeLinkStatus plk_cuda_load(Plan* plan);   /* context, modules, functions, cuBLASLt descriptors */
void plk_cuda_unload(Plan* plan);
PipeLinkStatus plk_cuda_load_constants(Plan* plan); /* one device block, copied once; host copies freed */
PipeLinkStatus plk_cuda_context_init(const Plan* plan, ExecContext* c);
void plk_cuda_context_free(const Plan* plan, ExecContext* c);
/* async: on `stream`, no wait; else on the context's stream, waited for. `join` (a stream, or NULL) waits for the
 * run's end; `capturing` non-NULL: a `stream` being captured runs nothing and sets it to 1 (Python's run());
 * `replayed` non-NULL: set to 1 when the run launched a graph the core captured (cuda_graph plans), else 0. */
PipeLinkStatus plk_cuda_execute(Pipeline* p, const PipeLinkTensor* inputs, PipeLinkTensor* outputs, void* stream,
                                int async, void* join, int32_t* capturing, int32_t* replayed);
int plk_cuda_free_device(uint64_t ptr); /* 0 when freed (0 is a no-op) */
PipeLinkStatus plk_cuda_alloc_device(uint64_t size, void** ptr); /* device memory of the current context */
int plk_cuda_usable(void);                   /* the driver opens and has a device (opens it once; no message) */
const char* plk_cuda_unusable_reason(void);  /* why not, when it is not */
/* pipeLinkMalloc's device: the current context's, else device 0's (its primary context, retained once). */
PipeLinkStatus plk_cuda_pool_device(int32_t* device);
PipeLinkStatus plk_cuda_pool_alloc(int32_t device, uint64_t size, int legacy, void** ptr);
/* Whether the driver is open and says `ptr` is device (not managed) memory; never opens the driver. */
int plk_cuda_is_device_memory(const void* ptr);

/* accounting.c: what loaded pipelines hold per device beside the pool (pipeLinkGetArenaStats). Counted where
 * the memory is allocated and freed: contexts (arenas, workspaces) and plans (constants), never per run. */
enum { PLK_HELD_ARENA = 0, PLK_HELD_WORKSPACE = 1, PLK_HELD_CONSTANT = 2, PLK_HELD_KINDS = 3 };
void plk_held_add(int32_t device_type, int32_t device_id, int kind, int64_t bytes); /* bytes < 0: freed */
void plk_held_contexts(int32_t device_type, int32_t device_id, int32_t delta);

/* pool.c */
void plk_pool_clear(void);
int plk_pool_release(void* ptr); /* pipeLinkFree without touching the message: 0, or -1 if unknown */
int plk_pool_track_device(void* ptr, uint64_t size); /* a device block the runtime allocated; 0 when tracked */
int32_t plk_pool_allocator(void);                    /* PipeLinkAllocator in effect (default chosen on first use) */
PipeLinkStatus plk_pool_malloc_host(void** ptr, size_t nbytes); /* a host block whatever the allocator */

/* api.c: the entry of Python's run() (runtime/_hotpath.c), exported but not part of runtime.h's API: it is
 * pipeLinkExecuteAsync, and then `join` (a CUstream, or NULL) waits for the run's end; when `capturing` is
 * non-NULL, a stream being captured runs nothing, sets *capturing to 1 and returns success (the caller runs it
 * its own way); when `replayed` is non-NULL, it says whether the run launched a graph the core captured. */
PIPELINK_API PipeLinkStatus plk_execute_joined(PipeLinkPipelineHandle h, const PipeLinkTensor* inputs, int32_t n_inputs,
                                               PipeLinkTensor* outputs, int32_t n_outputs, void* stream, void* join,
                                               int32_t* capturing, int32_t* replayed);

/* cuda.c: whether work queued on `stream` (a CUstream) now goes into a CUDA graph being captured: 1, 0, or -1
 * when the driver refuses the question (not a stream of this process). 0 while the driver is not open. The hot
 * path (runtime/_hotpath.c) asks it before taking output blocks from the pool: a capture must allocate nothing. */
PIPELINK_API int32_t plk_stream_capturing(void* stream);

#endif /* PIPELINK_CORE_H_ */
