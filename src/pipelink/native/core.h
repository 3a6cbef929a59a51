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
#define PLK_FORMAT_VERSION 1u
#define PLK_HEADER_SIZE 64u
#define PLK_MAX_NDIM 32
#define PLK_MAX_COUNT (1u << 20) /* any count in a plan: tensors, stages, attrs, ... */

enum { PLK_STORAGE_EXTERNAL = 0, PLK_STORAGE_ARENA = 1 };
enum { PLK_STAGE_CALL = 0, PLK_STAGE_RELAYOUT = 1 };
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

typedef struct Stage {
    int32_t kind; /* PLK_STAGE_* */
    char* id;
    /* PLK_STAGE_CALL */
    char* op_version;
    char* op_json; /* the operator's manifest entry */
    int32_t on_error;
    int32_t check_finite;
    double timeout_ms; /* 0: none */
    CallTarget call;
    CallTarget fallback; /* on_error == FALLBACK */
    /* both kinds: tensor refs (-1: an absent optional input); a relayout reads in[0] and writes out[0] */
    int32_t n_in, n_out;
    int32_t* in;
    int32_t* out;
    int32_t alias_if_contiguous; /* relayout: read a contiguous source in place instead of copying */
} Stage;

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
PipeLinkStatus plk_plan_parse(const uint8_t* bytes, size_t n, const char* where, Plan* plan);
PipeLinkStatus plk_plan_open_libraries(Plan* plan, const char* plan_dir);
void plk_plan_free(Plan* plan);
int plk_dtype_info(int32_t dtype_id, PipeLinkDataType* dtype, uint32_t* itemsize);

/* execute.c */
PipeLinkStatus plk_pipeline_execute(Pipeline* p, const PipeLinkTensor* inputs, PipeLinkTensor* outputs);
void plk_pipeline_free_contexts(Pipeline* p);

/* pool.c */
void plk_pool_clear(void);
int plk_pool_release(void* ptr); /* pipeLinkFree without touching the message: 0, or -1 if unknown */

#endif /* PIPELINK_CORE_H_ */
