/* api.c - the seed's C API: initialisation, the registry of live pipeline handles, loading plan files,
 * pipeline info, execution entry points and operator info.
 *
 * Handles are slot numbers with a generation, never pointers: a destroyed or made-up handle is looked up,
 * found wrong and refused. Executions pin their slot with a reference count (no lock on that path);
 * destroy marks the slot dead, waits for the pins to drop and frees. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"

#define MAX_PIPELINES 4096

extern char** environ;

typedef struct Slot {
    _Atomic uint64_t state; /* generation << 1 | live */
    _Atomic int32_t pins;
    Pipeline* pipeline;
} Slot;

static Slot slots[MAX_PIPELINES];
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER; /* load, destroy, init, finalize */
static int init_count;

/* ---- initialisation ---- */

PipeLinkStatus pipeLinkInitialize(void) {
    pthread_mutex_lock(&registry_lock);
    ++init_count;
    pthread_mutex_unlock(&registry_lock);
    return plk_ok();
}

static void destroy_slot(Slot* s, uint64_t live_state);

PipeLinkStatus pipeLinkFinalize(void) {
    pthread_mutex_lock(&registry_lock);
    if (init_count == 0) {
        pthread_mutex_unlock(&registry_lock);
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkFinalize: the runtime is not initialized "
                        "(each pipeLinkInitialize takes one pipeLinkFinalize)");
    }
    if (--init_count == 0)
        for (int i = 0; i < MAX_PIPELINES; ++i) {
            uint64_t state = atomic_load(&slots[i].state);
            if (state & 1) destroy_slot(&slots[i], state);
        }
    int last = init_count == 0;
    pthread_mutex_unlock(&registry_lock);
    if (last) plk_pool_clear();
    return plk_ok();
}

int plk_is_initialized(void) {
    pthread_mutex_lock(&registry_lock);
    int yes = init_count > 0;
    pthread_mutex_unlock(&registry_lock);
    return yes;
}

/* ---- handles ---- */

static PipeLinkPipelineHandle handle_of(int index, uint64_t state) {
    return (PipeLinkPipelineHandle)(uintptr_t)(((uint64_t)(index + 1) << 32) | (state >> 1 & 0xffffffffu));
}

/* Pin the pipeline of `h`, or NULL (with the message set) when it is not a live handle. */
static Slot* pin(PipeLinkPipelineHandle h, const char* fn) {
    uint64_t raw = (uint64_t)(uintptr_t)h;
    uint64_t index = (raw >> 32) - 1, gen = raw & 0xffffffffu;
    if (h == NULL || (raw >> 32) == 0 || index >= MAX_PIPELINES) {
        plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s: %p is not a pipeline handle (NULL, destroyed or never loaded)", fn, (void*)h);
        return NULL;
    }
    Slot* s = &slots[index];
    atomic_fetch_add(&s->pins, 1);
    uint64_t state = atomic_load(&s->state);
    if (!(state & 1) || (state >> 1 & 0xffffffffu) != gen) {
        atomic_fetch_sub(&s->pins, 1);
        plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s: pipeline handle %p is not live (destroyed, finalized, or never "
                 "loaded)", fn, (void*)h);
        return NULL;
    }
    return s;
}

static void unpin(Slot* s) { atomic_fetch_sub(&s->pins, 1); }

static void free_pipeline(Pipeline* p);

/* Called with registry_lock held and the slot live. */
static void destroy_slot(Slot* s, uint64_t live_state) {
    atomic_store(&s->state, live_state & ~(uint64_t)1); /* dead: new pins fail */
    while (atomic_load(&s->pins) != 0) sched_yield();   /* executions in flight finish */
    Pipeline* p = s->pipeline;
    s->pipeline = NULL;
    atomic_store(&s->state, ((live_state >> 1) + 1) << 1); /* the next generation, free */
    free_pipeline(p);
}

PipeLinkStatus pipeLinkDestroyPipeline(PipeLinkPipelineHandle h) {
    pthread_mutex_lock(&registry_lock);
    Slot* s = pin(h, "pipeLinkDestroyPipeline");
    if (s == NULL) {
        pthread_mutex_unlock(&registry_lock);
        return PIPELINK_ERR_INVALID_ARGUMENT;
    }
    unpin(s);
    destroy_slot(s, atomic_load(&s->state));
    pthread_mutex_unlock(&registry_lock);
    return plk_ok();
}

/* ---- loading ---- */

static PipeLinkStatus read_file(const char* path, uint8_t** out, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkLoadPipeline: cannot open %s (%s)", path, strerror(errno));
    /* Sized from the file (+1: the read that finds its end needs no growth): plans with constants are large. */
    struct stat sb;
    int sized = fstat(fileno(f), &sb) == 0 && sb.st_size > 0 && (uint64_t)sb.st_size < ((uint64_t)1 << 32);
    size_t cap = sized ? (size_t)sb.st_size + 1 : 1 << 16, len = 0, got;
    uint8_t* buf = malloc(cap);
    while (buf != NULL && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t* grown = cap < ((size_t)1 << 32) ? realloc(buf, cap *= 2) : NULL;
            if (grown == NULL) free(buf);
            buf = grown;
        }
    }
    fclose(f);
    if (buf == NULL) return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeLinkLoadPipeline: reading %s", path);
    *out = buf, *n = len;
    return PIPELINK_SUCCESS;
}

static uint32_t le32(const uint8_t* p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t* p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* The payload after a 64-byte header (a plan's or a bundle's): its announced size, then its SHA-256. `what`
 * names the file in messages ("plan", "plan bundle"). */
static PipeLinkStatus check_payload(const uint8_t* b, size_t n, const char* what, const char* path) {
    uint64_t payload = le64(b + 24);
    if (payload != n - PLK_HEADER_SIZE)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "%s %s is truncated or padded: its header announces %llu payload "
                        "bytes, the file holds %zu", what, path, (unsigned long long)payload, n - PLK_HEADER_SIZE);
    uint8_t digest[32];
    plk_sha256(b + PLK_HEADER_SIZE, (size_t)payload, digest);
    if (memcmp(digest, b + 32, 32) != 0)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "%s %s is corrupt: the payload's sha256 differs from its header's",
                        what, path);
    return PIPELINK_SUCCESS;
}

/* Check the envelope (docs/plan-format.md): magic, version, device, size, checksum. */
static PipeLinkStatus check_envelope(const uint8_t* b, size_t n, const char* path, uint32_t* version_out,
                                     int32_t* device_type, int32_t* device_id, uint32_t* flags) {
    if (n < 8 || memcmp(b, PLK_MAGIC, 8) != 0)
        return plk_fail(PIPELINK_ERR_INVALID_CONFIG, "%s is not a PipeLink plan (no PLKPLAN magic); write one with "
                        "`pipelink compile CONFIG -o model.plk`", path);
    if (n < PLK_HEADER_SIZE)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "plan %s is truncated: %zu bytes, shorter than its header", path, n);
    uint32_t version = le32(b + 8), header = le32(b + 12);
    if (version < PLK_FORMAT_VERSION_MIN || version > PLK_FORMAT_VERSION)
        return plk_fail(PIPELINK_ERR_VERSION_MISMATCH, "plan %s has format version %u; this runtime reads versions %u "
                        "to %u: recompile it with the PipeLink that ships this runtime", path, version,
                        PLK_FORMAT_VERSION_MIN, PLK_FORMAT_VERSION);
    *version_out = version;
    if (header != PLK_HEADER_SIZE)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "plan %s: header size %u, expected %u", path, header, PLK_HEADER_SIZE);
    /* Offset 20: u16 device id, u16 flags (an i32 device id before flags existed: the same bytes when 0). */
    *device_type = (int32_t)le32(b + 16), *device_id = (int32_t)(le32(b + 20) & 0xffffu), *flags = le32(b + 20) >> 16;
    PipeLinkStatus st = check_payload(b, n, "plan", path);
    if (st) return st;
    if (*device_type == PIPELINK_DEVICE_CUDA && version < 2)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "plan %s: a version 1 plan cannot be a CUDA plan", path);
    if (*device_type == PIPELINK_DEVICE_CUDA && (*device_id < 0 || *device_id > 1024))
        return plk_fail(PIPELINK_ERR_INTEGRITY, "plan %s names CUDA device %d", path, *device_id);
    if (*device_type != PIPELINK_DEVICE_CPU && *device_type != PIPELINK_DEVICE_CUDA)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "plan %s names device type %d, which is not a PipeLink device", path, *device_type);
    if (*flags & ~PLK_FLAGS_KNOWN)
        return plk_fail(PIPELINK_ERR_VERSION_MISMATCH, "plan %s has header flags 0x%x this runtime does not know; "
                        "recompile it with the PipeLink that ships this runtime", path, *flags);
    if ((*flags & PLK_FLAG_CUDA_GRAPH) && *device_type != PIPELINK_DEVICE_CUDA)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "plan %s: the cuda_graph flag is set on a CPU plan", path);
    return PIPELINK_SUCCESS;
}

/* A JSON config: compile it through the Python package into a temporary plan (PIPELINK_PYTHON, default
 * python3), then load that. */
static PipeLinkStatus compile_config(const char* path, char* plan_path, size_t cap) {
    const char* python = getenv("PIPELINK_PYTHON");
    if (python == NULL || python[0] == '\0') python = "python3";
    const char* tmp = getenv("TMPDIR");
    snprintf(plan_path, cap, "%s/pipelink-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    int fd = mkstemp(plan_path);
    if (fd < 0) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkLoadPipeline: no temporary file for the plan of %s", path);
    close(fd);
    /* posix_spawn, not fork: the host may be multi-threaded. stdout is dropped, stderr kept (errors). */
    char* argv[] = {(char*)python, "-m", "pipelink", "compile", (char*)path, "-o", plan_path, "--device", "cpu", NULL};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    if (posix_spawnp(&pid, python, &actions, NULL, argv, environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        unlink(plan_path);
        int code = pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        char what[64];
        if (pid < 0) snprintf(what, sizeof what, "could not be started");
        else if (code < 0) snprintf(what, sizeof what, "was killed");
        else snprintf(what, sizeof what, "failed with exit %d (its message is on stderr)", code);
        /* The CLI exits 2 for an invalid config or usage, 1 for anything else. */
        return plk_fail(code == 2 ? PIPELINK_ERR_INVALID_CONFIG : PIPELINK_ERR_INVALID_ARGUMENT,
                        "pipeLinkLoadPipeline: %s is a JSON config and `%s -m pipelink compile` %s. Compile it "
                        "yourself with `pipelink compile %s -o model.plk` (the Python package must be installed) "
                        "and load the .plk", path, python, what, path);
    }
    return PIPELINK_SUCCESS;
}

static void make_info(const Plan* plan, const int32_t* refs, int32_t n, PipeLinkTensorInfo* info) {
    for (int32_t i = 0; i < n; ++i) {
        const PlanTensor* t = &plan->tensors[refs[i]];
        info[i].name = t->name, info[i].dtype = t->dtype, info[i].dtype_id = t->dtype_id;
        info[i].ndim = t->ndim, info[i].shape = t->shape;
    }
}

/* Free a loaded pipeline (not registered, or detached from its slot), the other plans of its bundle too. */
static void free_pipeline(Pipeline* p) {
    if (p == NULL) return;
    for (int32_t i = 0; i < p->n_more; ++i) free_pipeline(p->more[i]);
    free(p->more), free(p->bundle_shapes);
    plk_pipeline_free_contexts(p);
    plk_held_add(p->plan.device_type, p->plan.device_id, PLK_HELD_CONSTANT, -(int64_t)p->held_constants);
    pthread_mutex_destroy(&p->pool_lock);
    plk_cuda_unload(&p->plan);
    plk_plan_free(&p->plan);
    free(p->input_info), free(p->output_info), free(p);
}

/* One plan from its bytes (a whole .plk: envelope and payload), loaded: libraries from `dir`, a CUDA plan's
 * cubins, products and constants on its device. */
static PipeLinkStatus load_plan(const uint8_t* bytes, size_t n, const char* path, const char* dir, Pipeline** out) {
    *out = NULL;
    Pipeline* p = calloc(1, sizeof *p);
    int32_t device_type = 0, device_id = 0;
    uint32_t version = 0, flags = 0;
    PipeLinkStatus st = p ? check_envelope(bytes, n, path, &version, &device_type, &device_id, &flags)
                          : plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "a pipeline");
    if (!st) st = plk_plan_parse(bytes + PLK_HEADER_SIZE, n - PLK_HEADER_SIZE, path, version, device_type, device_id, &p->plan);
    for (int32_t i = 0; !st && (flags & PLK_FLAG_CUDA_GRAPH) && i < p->plan.n_stages; ++i) {
        const Stage* s = &p->plan.stages[i];
        if ((s->kind == PLK_STAGE_CALL || s->kind == PLK_STAGE_CHECK) && (s->on_error != PLK_ON_ERROR_FAIL || s->check_finite)) {
            st = plk_fail(PIPELINK_ERR_INTEGRITY, "plan %s is corrupt: a cuda_graph plan has a stage with an on_error "
                          "policy or check_finite ('%s'), which decide on the host after the stage runs", path, s->id);
            plk_plan_free(&p->plan);
        }
    }
    if (st) return free(p), st;
    p->plan.flags = flags;
    pthread_mutex_init(&p->pool_lock, NULL);
    st = plk_plan_open_libraries(&p->plan, dir);
    if (!st && device_type == PIPELINK_DEVICE_CUDA) st = plk_cuda_load(&p->plan);
    if (!st && device_type == PIPELINK_DEVICE_CUDA) st = plk_cuda_load_constants(&p->plan);
    p->input_info = calloc((size_t)p->plan.n_inputs + 1, sizeof(PipeLinkTensorInfo));
    p->output_info = calloc((size_t)p->plan.n_outputs + 1, sizeof(PipeLinkTensorInfo));
    if (!st && (!p->input_info || !p->output_info)) st = plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeline info");
    if (st) return free_pipeline(p), st;
    make_info(&p->plan, p->plan.inputs, p->plan.n_inputs, p->input_info);
    make_info(&p->plan, p->plan.outputs, p->plan.n_outputs, p->output_info);
    /* The constants stay loaded with the plan: a CUDA plan's device block (256-byte aligned offsets), a CPU
     * plan's host copies. Counted for pipeLinkGetArenaStats until it is freed. */
    for (int32_t i = 0; i < p->plan.n_tensors; ++i)
        if (p->plan.tensors[i].storage == PLK_STORAGE_CONSTANT)
            p->held_constants += device_type == PIPELINK_DEVICE_CUDA ? (p->plan.tensors[i].nbytes + 255) / 256 * 256
                                                                     : p->plan.tensors[i].nbytes;
    plk_held_add(device_type, device_id, PLK_HELD_CONSTANT, (int64_t)p->held_constants);
    *out = p;
    return PIPELINK_SUCCESS;
}

/* Whether two plans of a bundle take and give the same tensors (names, dtypes, ranks, in order) on the same
 * device: the signatures of one pipeline. */
static int same_ports(const Plan* a, const Plan* b) {
    if (a->device_type != b->device_type || a->device_id != b->device_id || a->n_inputs != b->n_inputs ||
        a->n_outputs != b->n_outputs)
        return 0;
    for (int32_t i = 0; i < a->n_inputs + a->n_outputs; ++i) {
        const PlanTensor* x = &a->tensors[i < a->n_inputs ? a->inputs[i] : a->outputs[i - a->n_inputs]];
        const PlanTensor* y = &b->tensors[i < b->n_inputs ? b->inputs[i] : b->outputs[i - b->n_inputs]];
        if (strcmp(x->name, y->name) != 0 || x->dtype_id != y->dtype_id || x->ndim != y->ndim) return 0;
    }
    return 1;
}

/* A bundle (docs/plan-format.md, "Several signatures"): its first plan, holding the others in `more`, with
 * the info of dimensions that differ between them reported as -1. */
static PipeLinkStatus load_bundle(const uint8_t* b, size_t n, const char* path, const char* dir, Pipeline** out) {
    *out = NULL;
    if (n < PLK_HEADER_SIZE)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "plan bundle %s is truncated: %zu bytes, shorter than its header", path, n);
    uint32_t version = le32(b + 8), header = le32(b + 12), count = le32(b + 16);
    if (version != PLK_BUNDLE_VERSION)
        return plk_fail(PIPELINK_ERR_VERSION_MISMATCH, "plan bundle %s has format version %u; this runtime reads "
                        "version %u: recompile it with the PipeLink that ships this runtime", path, version,
                        PLK_BUNDLE_VERSION);
    if (header != PLK_HEADER_SIZE || le32(b + 20) != 0)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "plan bundle %s: a malformed header", path);
    if (count < 1 || count > PLK_MAX_SIGNATURES)
        return plk_fail(PIPELINK_ERR_INTEGRITY, "plan bundle %s holds %u plans; a bundle holds 1 to %d", path, count,
                        PLK_MAX_SIGNATURES);
    PipeLinkStatus st = check_payload(b, n, "plan bundle", path);
    if (st) return st;
    Pipeline* members[PLK_MAX_SIGNATURES] = {NULL};
    size_t at = PLK_HEADER_SIZE;
    for (uint32_t k = 0; k < count && !st; ++k) {
        uint64_t len = n - at >= 8 ? le64(b + at) : UINT64_MAX;
        if (len == UINT64_MAX || len > n - at - 8) {
            st = plk_fail(PIPELINK_ERR_INTEGRITY, "plan bundle %s: plan %u runs past the end of the file", path, k);
            break;
        }
        st = load_plan(b + at + 8, (size_t)len, path, dir, &members[k]);
        at += 8 + (size_t)len;
        if (!st && k > 0 && !same_ports(&members[0]->plan, &members[k]->plan))
            st = plk_fail(PIPELINK_ERR_INTEGRITY, "plan bundle %s: plan %u takes or gives other tensors than plan 0 "
                          "(the plans of a bundle are signatures of one pipeline)", path, k);
    }
    if (!st && at != n) st = plk_fail(PIPELINK_ERR_INTEGRITY, "plan bundle %s: bytes after its last plan", path);
    Pipeline* first = members[0];
    if (!st && count > 1) {
        first->more = calloc(count - 1, sizeof *first->more);
        size_t dims = 0;
        for (int32_t i = 0; i < first->plan.n_inputs + first->plan.n_outputs; ++i)
            dims += (size_t)(i < first->plan.n_inputs ? first->input_info[i] : first->output_info[i - first->plan.n_inputs]).ndim;
        first->bundle_shapes = calloc(dims + 1, sizeof *first->bundle_shapes);
        if (first->more == NULL || first->bundle_shapes == NULL) st = plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "a plan bundle");
    }
    if (st) {
        for (uint32_t k = 0; k < count; ++k) free_pipeline(members[k]);
        return st;
    }
    if (count > 1) {
        for (uint32_t k = 1; k < count; ++k) first->more[first->n_more++] = members[k];
        int64_t* dim = first->bundle_shapes;
        for (int32_t i = 0; i < first->plan.n_inputs + first->plan.n_outputs; ++i) {
            PipeLinkTensorInfo* info = i < first->plan.n_inputs ? &first->input_info[i] : &first->output_info[i - first->plan.n_inputs];
            for (int32_t d = 0; d < info->ndim; ++d) {
                dim[d] = info->shape[d];
                for (int32_t k = 0; k < first->n_more; ++k) {
                    const PipeLinkTensorInfo* other = i < first->plan.n_inputs ? &first->more[k]->input_info[i]
                                                                               : &first->more[k]->output_info[i - first->plan.n_inputs];
                    if (other->shape[d] != dim[d]) dim[d] = -1;
                }
            }
            info->shape = dim, dim += info->ndim;
        }
    }
    *out = first;
    return PIPELINK_SUCCESS;
}

PipeLinkStatus pipeLinkLoadPipeline(const char* path, PipeLinkPipelineHandle* out) {
    if (out == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkLoadPipeline: out is NULL; pass the address of a handle");
    *out = NULL;
    if (path == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkLoadPipeline: path is NULL");
    if (!plk_is_initialized()) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkLoadPipeline: call pipeLinkInitialize first");
    char compiled[4096] = "";
    size_t len = strlen(path);
    PipeLinkStatus st;
    if (len >= 5 && strcmp(path + len - 5, ".json") == 0) {
        if ((st = compile_config(path, compiled, sizeof compiled))) return st;
    }
    const char* file = compiled[0] ? compiled : path;
    uint8_t* bytes = NULL;
    size_t n = 0;
    st = read_file(file, &bytes, &n);
    if (compiled[0]) unlink(compiled);
    if (st) return st;
    /* Libraries resolve against the plan's folder (the writer stored them relative to it). */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", file);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = '\0'; else snprintf(dir, sizeof dir, ".");
    Pipeline* p = NULL;
    if (n >= 8 && memcmp(bytes, PLK_BUNDLE_MAGIC, 8) == 0) st = load_bundle(bytes, n, path, dir[0] ? dir : "/", &p);
    else st = load_plan(bytes, n, path, dir[0] ? dir : "/", &p);
    free(bytes);
    if (st) return st;
    pthread_mutex_lock(&registry_lock);
    int index = -1;
    for (int i = 0; i < MAX_PIPELINES && index < 0; ++i)
        if (!(atomic_load(&slots[i].state) & 1)) index = i;
    if (index < 0) {
        pthread_mutex_unlock(&registry_lock);
        free_pipeline(p);
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeLinkLoadPipeline: %d pipelines are loaded already; destroy some", MAX_PIPELINES);
    }
    slots[index].pipeline = p;
    uint64_t state = atomic_load(&slots[index].state) | 1;
    atomic_store(&slots[index].state, state);
    *out = handle_of(index, state);
    pthread_mutex_unlock(&registry_lock);
    return plk_ok();
}

PipeLinkStatus pipeLinkGetPipelineInfo(PipeLinkPipelineHandle h, PipeLinkPipelineInfo* info) {
    if (info == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkGetPipelineInfo: info is NULL");
    Slot* s = pin(h, "pipeLinkGetPipelineInfo");
    if (s == NULL) return PIPELINK_ERR_INVALID_ARGUMENT;
    const Pipeline* p = s->pipeline;
    info->name = p->plan.name, info->device_type = p->plan.device_type;
    info->n_inputs = p->plan.n_inputs, info->n_outputs = p->plan.n_outputs, info->n_stages = p->plan.n_stages;
    info->inputs = p->input_info, info->outputs = p->output_info, info->arena_bytes = p->plan.arena_bytes;
    unpin(s);
    return plk_ok();
}

/* ---- execution ---- */

static int takes(const Plan* plan, const PipeLinkTensor* inputs) {
    for (int32_t i = 0; i < plan->n_inputs; ++i) {
        const PlanTensor* want = &plan->tensors[plan->inputs[i]];
        const PipeLinkTensor* t = &inputs[i];
        if (t->ndim != want->ndim || (t->ndim > 0 && t->shape == NULL)) return 0;
        for (int32_t d = 0; d < t->ndim; ++d)
            if (t->shape[d] != want->shape[d]) return 0;
    }
    return 1;
}

/* The plan of a bundle whose input shapes these are (a single plan: itself; its own checks follow). */
static Pipeline* signature_for(Pipeline* p, const PipeLinkTensor* inputs, int32_t n_inputs, PipeLinkStatus* st) {
    if (p->n_more == 0 || inputs == NULL || n_inputs != p->plan.n_inputs) return p;
    if (takes(&p->plan, inputs)) return p;
    for (int32_t k = 0; k < p->n_more; ++k)
        if (takes(&p->more[k]->plan, inputs)) return p->more[k];
    char shapes[512] = ""; /* each plan's input shapes: "(8x1024 1024), (16x1024 1024)" */
    for (int32_t k = -1; k < p->n_more; ++k) {
        const Plan* plan = k < 0 ? &p->plan : &p->more[k]->plan;
        size_t at = strlen(shapes);
        snprintf(shapes + at, sizeof shapes - at, "%s(", k < 0 ? "" : ", ");
        for (int32_t i = 0; i < plan->n_inputs; ++i) {
            const PlanTensor* t = &plan->tensors[plan->inputs[i]];
            for (int32_t d = 0; d < t->ndim; ++d) {
                at = strlen(shapes);
                snprintf(shapes + at, sizeof shapes - at, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
            }
            at = strlen(shapes);
            snprintf(shapes + at, sizeof shapes - at, "%s", t->ndim == 0 ? "()" : "");
            if (i + 1 < plan->n_inputs) at = strlen(shapes), snprintf(shapes + at, sizeof shapes - at, " ");
        }
        at = strlen(shapes);
        snprintf(shapes + at, sizeof shapes - at, ")");
    }
    *st = plk_fail(PIPELINK_ERR_SHAPE_MISMATCH, "pipeline '%s' has no signature for these input shapes; its plans take "
                   "%s; compile one for them (pipelink compile --shape)", p->plan.name, shapes);
    return NULL;
}

static PipeLinkStatus execute(const char* fn, PipeLinkPipelineHandle h, const PipeLinkTensor* inputs, int32_t n_inputs,
                              PipeLinkTensor* outputs, int32_t n_outputs, void* stream, int async, void* join,
                              int32_t* capturing, int32_t* replayed) {
    Slot* s = pin(h, fn);
    if (s == NULL) return PIPELINK_ERR_INVALID_ARGUMENT;
    PipeLinkStatus st = PIPELINK_SUCCESS;
    Pipeline* p = signature_for(s->pipeline, inputs, n_inputs, &st);
    if (p == NULL) return unpin(s), st;
    if (n_inputs != p->plan.n_inputs || n_outputs != p->plan.n_outputs)
        st = plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s: pipeline '%s' takes %d inputs and %d outputs (got %d and %d); "
                      "pipeLinkGetPipelineInfo lists them", fn, p->plan.name, p->plan.n_inputs, p->plan.n_outputs, n_inputs, n_outputs);
    else if ((inputs == NULL && n_inputs > 0) || (outputs == NULL && n_outputs > 0))
        st = plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s: %s is NULL, but the pipeline has %d of them", fn,
                      inputs == NULL && n_inputs > 0 ? "inputs" : "outputs", inputs == NULL && n_inputs > 0 ? n_inputs : n_outputs);
    else if (p->plan.device_type == PIPELINK_DEVICE_CUDA)
        st = plk_cuda_execute(p, inputs, outputs, stream, async, join, capturing, replayed);
    else if (stream != NULL || join != NULL)
        st = plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s: pipeline '%s' is a CPU plan; pass a NULL stream", fn, p->plan.name);
    else
        st = plk_pipeline_execute(p, inputs, outputs);
    unpin(s);
    return st;
}

PipeLinkStatus pipeLinkExecute(PipeLinkPipelineHandle h, const PipeLinkTensor* inputs, int32_t n_inputs,
                               PipeLinkTensor* outputs, int32_t n_outputs) {
    return execute("pipeLinkExecute", h, inputs, n_inputs, outputs, n_outputs, NULL, 0, NULL, NULL, NULL);
}

PipeLinkStatus pipeLinkExecuteAsync(PipeLinkPipelineHandle h, const PipeLinkTensor* inputs, int32_t n_inputs,
                                    PipeLinkTensor* outputs, int32_t n_outputs, void* stream) {
    return execute("pipeLinkExecuteAsync", h, inputs, n_inputs, outputs, n_outputs, stream, 1, NULL, NULL, NULL);
}

PipeLinkStatus plk_execute_joined(PipeLinkPipelineHandle h, const PipeLinkTensor* inputs, int32_t n_inputs,
                                  PipeLinkTensor* outputs, int32_t n_outputs, void* stream, void* join, int32_t* capturing,
                                  int32_t* replayed) {
    if (capturing != NULL) *capturing = 0;
    if (replayed != NULL) *replayed = 0;
    return execute("pipeLinkExecuteAsync", h, inputs, n_inputs, outputs, n_outputs, stream, 1, join, capturing, replayed);
}

/* ---- operators ---- */

PipeLinkStatus pipeLinkGetOperatorInfo(const char* name, char* json, size_t capacity) {
    if (name == NULL || json == NULL)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkGetOperatorInfo: %s is NULL", name == NULL ? "name" : "json");
    PipeLinkStatus st = PIPELINK_SUCCESS;
    int found = 0;
    pthread_mutex_lock(&registry_lock); /* no pipeline is destroyed while we read it */
    for (int i = 0; i < MAX_PIPELINES && !found; ++i) {
        if (!(atomic_load(&slots[i].state) & 1)) continue;
        const Plan* plan = &slots[i].pipeline->plan;
        for (int32_t k = 0; k < plan->n_stages && !found; ++k) {
            const Stage* s = &plan->stages[k];
            if (s->kind != PLK_STAGE_CALL || strcmp(s->call.op_name, name) != 0) continue;
            found = 1;
            size_t need = strlen(s->op_json) + 1;
            if (need > capacity)
                st = plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkGetOperatorInfo: operator %s's info needs %zu "
                              "bytes, the buffer has %zu", name, need, capacity);
            else
                memcpy(json, s->op_json, need);
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (!found)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkGetOperatorInfo: no loaded pipeline uses operator '%s'", name);
    return st ? st : plk_ok();
}
