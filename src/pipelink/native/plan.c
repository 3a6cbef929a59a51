/* plan.c - reading a compiled plan's payload (docs/plan-format.md) and opening its native modules from
 * verified bytes. Every byte here comes from outside: each read is bounds-checked, each count capped,
 * each reference range-checked, and any failure is a status, never a crash. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core.h"

typedef struct Reader {
    const uint8_t* p;
    size_t n, pos;
    const char* what; /* the first thing that did not fit, for the message */
} Reader;

static int take(Reader* r, void* out, size_t k, const char* what) {
    if (r->what != NULL) return 0;
    if (k > r->n - r->pos) {
        r->what = what;
        return 0;
    }
    memcpy(out, r->p + r->pos, k); /* the format is little-endian, as are the hosts we build for */
    r->pos += k;
    return 1;
}

static uint8_t rd_u8(Reader* r, const char* what) { uint8_t v = 0; take(r, &v, 1, what); return v; }
static uint32_t rd_u32(Reader* r, const char* what) { uint32_t v = 0; take(r, &v, 4, what); return v; }
static int32_t rd_i32(Reader* r, const char* what) { int32_t v = 0; take(r, &v, 4, what); return v; }
static uint64_t rd_u64(Reader* r, const char* what) { uint64_t v = 0; take(r, &v, 8, what); return v; }
static int64_t rd_i64(Reader* r, const char* what) { int64_t v = 0; take(r, &v, 8, what); return v; }
static double rd_f64(Reader* r, const char* what) { double v = 0; take(r, &v, 8, what); return v; }

/* A count of elements of at least `min_size` bytes each: never more than the bytes left could hold. */
static uint32_t rd_count(Reader* r, size_t min_size, const char* what) {
    uint32_t k = rd_u32(r, what);
    if (r->what == NULL && (k > PLK_MAX_COUNT || (size_t)k * min_size > r->n - r->pos)) r->what = what;
    return r->what == NULL ? k : 0;
}

static char* rd_str(Reader* r, const char* what) {
    uint32_t k = rd_count(r, 1, what);
    char* s = r->what == NULL ? malloc((size_t)k + 1) : NULL;
    if (s == NULL) {
        if (r->what == NULL) r->what = "memory for a string";
        return NULL;
    }
    take(r, s, k, what);
    s[k] = '\0';
    if (r->what == NULL && strlen(s) != k) r->what = what; /* an embedded NUL */
    if (r->what != NULL) {
        free(s);
        return NULL;
    }
    return s;
}

int plk_dtype_info(int32_t dtype_id, PipeLinkDataType* dtype, uint32_t* itemsize) {
    static const struct { uint8_t code, bits; } table[] = {
        {PIPELINK_DL_FLOAT, 32}, {PIPELINK_DL_FLOAT, 16}, {PIPELINK_DL_BFLOAT, 16}, {PIPELINK_DL_FLOAT, 64},
        {PIPELINK_DL_INT, 8},    {PIPELINK_DL_INT, 32},   {PIPELINK_DL_INT, 64},    {PIPELINK_DL_UINT, 8},
        {PIPELINK_DL_BOOL, 8}};
    if (dtype_id < 0 || dtype_id >= (int32_t)(sizeof table / sizeof table[0])) return 0;
    dtype->code = table[dtype_id].code, dtype->bits = table[dtype_id].bits, dtype->lanes = 1;
    *itemsize = table[dtype_id].bits / 8;
    return 1;
}

static int read_tensor(Reader* r, PlanTensor* t) {
    t->name = rd_str(r, "a tensor name");
    t->dtype_id = rd_i32(r, "a tensor dtype");
    t->ndim = (int32_t)rd_u32(r, "a tensor rank");
    if (r->what != NULL) return 0;
    uint32_t itemsize = 0;
    if (!plk_dtype_info(t->dtype_id, &t->dtype, &itemsize)) return r->what = "a known dtype", 0;
    if (t->ndim < 0 || t->ndim > PLK_MAX_NDIM) return r->what = "a tensor rank of at most 32", 0;
    t->shape = calloc((size_t)t->ndim + 1, sizeof(int64_t));
    t->strides = calloc((size_t)t->ndim + 1, sizeof(int64_t));
    if (t->shape == NULL || t->strides == NULL) return r->what = "memory for a shape", 0;
    int64_t span = 1; /* the product of the dimensions with zeros counted as one: bounds the strides too */
    for (int32_t d = 0; d < t->ndim; ++d) {
        int64_t v = rd_i64(r, "a tensor dimension");
        if (r->what == NULL && (v < 0 || span > INT64_MAX / 8 / (v > 0 ? v : 1))) r->what = "a dimension in range";
        if (r->what != NULL) return 0;
        t->shape[d] = v, span *= v > 0 ? v : 1;
    }
    t->numel = 1;
    for (int32_t d = 0; d < t->ndim; ++d) t->numel *= t->shape[d];
    int64_t stride = 1;
    for (int32_t d = t->ndim - 1; d >= 0; --d) t->strides[d] = stride, stride *= t->shape[d];
    t->nbytes = (uint64_t)t->numel * itemsize;
    t->storage = rd_u8(r, "a tensor storage");
    t->offset = rd_u64(r, "a tensor offset");
    if (r->what == NULL && t->storage != PLK_STORAGE_EXTERNAL && t->storage != PLK_STORAGE_ARENA)
        r->what = "a known tensor storage";
    return r->what == NULL;
}

static int read_attrs(Reader* r, CallTarget* c) {
    c->n_attrs = (int32_t)rd_count(r, 9, "an attribute count");
    if (r->what != NULL) return 0;
    c->attrs = calloc((size_t)c->n_attrs + 1, sizeof(PipeLinkAttr));
    if (c->attrs == NULL) return r->what = "memory for attributes", 0;
    for (int32_t i = 0; i < c->n_attrs && r->what == NULL; ++i) {
        PipeLinkAttr* a = &c->attrs[i];
        a->name = rd_str(r, "an attribute name");
        a->type = rd_u8(r, "an attribute type");
        if (r->what != NULL) break;
        if (a->type == PIPELINK_ATTR_FLOAT) a->count = 1, a->value.f = rd_f64(r, "a float attribute");
        else if (a->type == PIPELINK_ATTR_INT || a->type == PIPELINK_ATTR_BOOL)
            a->count = 1, a->value.i = rd_i64(r, "an int attribute");
        else if (a->type == PIPELINK_ATTR_STR) {
            a->value.s = rd_str(r, "a string attribute");
            a->count = a->value.s ? (int32_t)strlen(a->value.s) : 0;
        } else if (a->type == PIPELINK_ATTR_FLOATS || a->type == PIPELINK_ATTR_INTS) {
            a->count = (int32_t)rd_count(r, 8, "a list attribute length");
            void* block = r->what == NULL ? calloc((size_t)a->count + 1, 8) : NULL;
            if (block == NULL) break;
            take(r, block, (size_t)a->count * 8, "a list attribute");
            if (a->type == PIPELINK_ATTR_FLOATS) a->value.floats = block;
            else a->value.ints = block;
        } else r->what = "a known attribute type";
    }
    return r->what == NULL;
}

static int read_call(Reader* r, CallTarget* c, uint32_t n_libraries) {
    c->op_name = rd_str(r, "an operator name");
    c->library = rd_u32(r, "a library index");
    c->entry = rd_str(r, "an entry symbol");
    c->workspace_hook = rd_str(r, "a workspace hook");
    c->create_hook = rd_str(r, "a context_create hook");
    c->destroy_hook = rd_str(r, "a context_destroy hook");
    if (r->what == NULL && c->library >= n_libraries) r->what = "a library index in range";
    return read_attrs(r, c);
}

static int read_refs(Reader* r, int32_t* n, int32_t** refs, int32_t n_tensors, int allow_absent) {
    *n = (int32_t)rd_count(r, 4, "a port count");
    if (r->what != NULL) return 0;
    *refs = calloc((size_t)*n + 1, sizeof(int32_t));
    if (*refs == NULL) return r->what = "memory for ports", 0;
    for (int32_t i = 0; i < *n && r->what == NULL; ++i) {
        int32_t v = rd_i32(r, "a tensor reference");
        if (r->what == NULL && (v >= n_tensors || v < (allow_absent ? -1 : 0))) r->what = "a tensor reference in range";
        (*refs)[i] = v;
    }
    return r->what == NULL;
}

static int read_stage(Reader* r, Stage* s, const Plan* plan) {
    s->kind = rd_u8(r, "a stage kind");
    s->id = rd_str(r, "a stage id");
    if (r->what != NULL) return 0;
    if (s->kind == PLK_STAGE_RELAYOUT) {
        s->alias_if_contiguous = rd_u8(r, "a relayout flag");
        if (!read_refs(r, &s->n_in, &s->in, plan->n_tensors, 0) || !read_refs(r, &s->n_out, &s->out, plan->n_tensors, 0))
            return 0;
        if (s->n_in != 1 || s->n_out != 1) return r->what = "a relayout with one source and one target", 0;
        const PlanTensor *a = &plan->tensors[s->in[0]], *b = &plan->tensors[s->out[0]];
        if (a->dtype_id != b->dtype_id || a->numel != b->numel) return r->what = "a relayout between equal tensors", 0;
        if (s->alias_if_contiguous && b->storage != PLK_STORAGE_ARENA) return r->what = "an aliasing relayout into the arena", 0;
        return 1;
    }
    if (s->kind != PLK_STAGE_CALL) return r->what = "a known stage kind", 0;
    s->op_version = rd_str(r, "an operator version");
    s->op_json = rd_str(r, "an operator manifest");
    s->on_error = rd_u8(r, "an on_error policy");
    s->check_finite = rd_u8(r, "a check_finite flag");
    s->timeout_ms = rd_f64(r, "a timeout");
    if (r->what == NULL && !(s->timeout_ms >= 0 && s->timeout_ms < 1e12)) r->what = "a timeout in [0, 1e12) ms";
    if (r->what == NULL && (s->on_error < 0 || s->on_error > PLK_ON_ERROR_FALLBACK)) r->what = "a known on_error policy";
    if (!read_call(r, &s->call, (uint32_t)plan->n_libraries)) return 0;
    if (!read_refs(r, &s->n_in, &s->in, plan->n_tensors, 1) || !read_refs(r, &s->n_out, &s->out, plan->n_tensors, 0))
        return 0;
    s->call.n_in = s->n_in, s->call.n_out = s->n_out;
    if (s->on_error == PLK_ON_ERROR_FALLBACK) {
        if (!read_call(r, &s->fallback, (uint32_t)plan->n_libraries)) return 0;
        s->fallback.n_in = (int32_t)rd_u32(r, "the fallback's input count");
        s->fallback.n_out = (int32_t)rd_u32(r, "the fallback's output count");
        if (r->what == NULL && (s->fallback.n_in < 0 || s->fallback.n_in > s->n_in || s->fallback.n_out < 0 ||
                                s->fallback.n_out > s->n_out))
            r->what = "fallback ports within the stage's";
    }
    return r->what == NULL;
}

/* Rules a well-formed plan keeps: external tensors are each one input or one output, arena tensors fit
 * in the arena, and no stage writes a pipeline input. */
static const char* check_plan(const Plan* plan) {
    uint8_t* role = calloc((size_t)plan->n_tensors + 1, 1); /* 1 input, 2 output */
    if (role == NULL) return "memory to check the plan";
    const char* bad = NULL;
    for (int32_t i = 0; i < plan->n_inputs && !bad; ++i) {
        if (plan->tensors[plan->inputs[i]].storage != PLK_STORAGE_EXTERNAL || role[plan->inputs[i]]) bad = "inputs that are distinct external tensors";
        else role[plan->inputs[i]] = 1;
    }
    for (int32_t i = 0; i < plan->n_outputs && !bad; ++i) {
        if (plan->tensors[plan->outputs[i]].storage != PLK_STORAGE_EXTERNAL || role[plan->outputs[i]]) bad = "outputs that are distinct external tensors";
        else role[plan->outputs[i]] = 2;
    }
    for (int32_t i = 0; i < plan->n_tensors && !bad; ++i) {
        const PlanTensor* t = &plan->tensors[i];
        if (t->storage == PLK_STORAGE_EXTERNAL && !role[i]) bad = "every external tensor an input or an output";
        if (t->storage == PLK_STORAGE_ARENA && (t->offset > plan->arena_bytes || t->nbytes > plan->arena_bytes - t->offset))
            bad = "arena tensors inside the arena";
    }
    for (int32_t i = 0; i < plan->n_stages && !bad; ++i)
        for (int32_t j = 0; j < plan->stages[i].n_out && !bad; ++j)
            if (role[plan->stages[i].out[j]] == 1) bad = "stages that never write a pipeline input";
    free(role);
    return bad;
}

PipeLinkStatus plk_plan_parse(const uint8_t* bytes, size_t n, const char* where, Plan* plan) {
    Reader r = {bytes, n, 0, NULL};
    memset(plan, 0, sizeof *plan);
    plan->name = rd_str(&r, "the pipeline name");
    plan->arena_bytes = rd_u64(&r, "the arena size");
    plan->arena_alignment = rd_u32(&r, "the arena alignment");
    if (r.what == NULL && (plan->arena_alignment < 16 || plan->arena_alignment > 65536 ||
                           (plan->arena_alignment & (plan->arena_alignment - 1))))
        r.what = "an arena alignment that is a power of two in [16, 65536]";
    if (r.what == NULL && plan->arena_bytes > ((uint64_t)1 << 48)) r.what = "an arena size below 2^48";
    plan->n_tensors = (int32_t)rd_count(&r, 25, "the tensor count");
    plan->tensors = r.what == NULL ? calloc((size_t)plan->n_tensors + 1, sizeof(PlanTensor)) : NULL;
    for (int32_t i = 0; plan->tensors && i < plan->n_tensors && r.what == NULL; ++i) read_tensor(&r, &plan->tensors[i]);
    if (r.what == NULL) {
        read_refs(&r, &plan->n_inputs, &plan->inputs, plan->n_tensors, 0);
        read_refs(&r, &plan->n_outputs, &plan->outputs, plan->n_tensors, 0);
    }
    plan->n_libraries = (int32_t)rd_count(&r, 36, "the library count");
    plan->libraries = r.what == NULL ? calloc((size_t)plan->n_libraries + 1, sizeof(PlanLibrary)) : NULL;
    for (int32_t i = 0; plan->libraries && i < plan->n_libraries && r.what == NULL; ++i) {
        plan->libraries[i].path = rd_str(&r, "a library path");
        take(&r, plan->libraries[i].sha256, 32, "a library sha256");
    }
    plan->n_stages = (int32_t)rd_count(&r, 5, "the stage count");
    plan->stages = r.what == NULL ? calloc((size_t)plan->n_stages + 1, sizeof(Stage)) : NULL;
    for (int32_t i = 0; plan->stages && i < plan->n_stages && r.what == NULL; ++i) read_stage(&r, &plan->stages[i], plan);
    if (r.what == NULL && r.pos != r.n) r.what = "the end of the payload";
    if (r.what == NULL && (plan->tensors == NULL || plan->libraries == NULL || plan->stages == NULL))
        r.what = "memory for the plan";
    const char* bad = r.what == NULL ? check_plan(plan) : NULL;
    plan->read_in_place = bad == NULL && r.what == NULL ? calloc((size_t)plan->n_tensors + 1, 1) : NULL;
    if (r.what == NULL && bad == NULL && plan->read_in_place == NULL) bad = "memory for the plan";
    for (int32_t i = 0; plan->read_in_place && i < plan->n_stages; ++i)
        for (int32_t j = 0; plan->stages[i].kind == PLK_STAGE_CALL && j < plan->stages[i].n_in; ++j)
            if (plan->stages[i].in[j] >= 0) plan->read_in_place[plan->stages[i].in[j]] = 1;
    if (r.what != NULL || bad != NULL) {
        PipeLinkStatus st = plk_fail(PIPELINK_ERR_INTEGRITY,
                                     "plan %s is malformed: expected %s at payload byte %zu; recompile it with "
                                     "`pipelink compile`",
                                     where, r.what ? r.what : bad, r.pos);
        plk_plan_free(plan);
        return st;
    }
    return PIPELINK_SUCCESS;
}

/* Read the whole file, check its sha256, and dlopen a private in-memory copy of exactly those bytes, so
 * a file swapped after the check is never what runs. */
static PipeLinkStatus open_verified(PlanLibrary* lib, const char* path) {
    FILE* f = fopen(path, "rb");
    if (f == NULL)
        return plk_fail(PIPELINK_ERR_MODULE_LOAD_FAILED, "native module %s: cannot open it (%s); the plan names it, "
                        "so keep it beside the plan or recompile", path, strerror(errno));
    uint8_t* bytes = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap) {
            uint8_t* grown = realloc(bytes, cap = cap ? cap * 2 : 1 << 16);
            if (grown == NULL) { free(bytes); fclose(f); return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "reading %s", path); }
            bytes = grown;
        }
        got = fread(bytes + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    uint8_t digest[32];
    plk_sha256(bytes, n, digest);
    if (memcmp(digest, lib->sha256, 32) != 0) {
        char want[65], have[65];
        plk_hex(lib->sha256, 32, want), plk_hex(digest, 32, have);
        free(bytes);
        return plk_fail(PIPELINK_ERR_INTEGRITY, "native module %s: sha256 is %s, but the plan was compiled with %s; "
                        "the file changed since: recompile the plan", path, have, want);
    }
    int fd = (int)memfd_create("pipelink-module", MFD_CLOEXEC);
    if (fd < 0) { free(bytes); return plk_fail(PIPELINK_ERR_MODULE_LOAD_FAILED, "native module %s: memfd_create failed (%s)", path, strerror(errno)); }
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, bytes + off, n - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    free(bytes);
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    lib->handle = off == n ? dlopen(proc, RTLD_NOW | RTLD_LOCAL) : NULL;
    const char* why = lib->handle ? NULL : (off == n ? dlerror() : "short write to the private copy");
    /* The loader knows a library by its name: keep the fd (and so the name) until dlclose. */
    if (lib->handle == NULL) close(fd);
    else lib->fd = fd;
    if (lib->handle == NULL)
        return plk_fail(PIPELINK_ERR_MODULE_LOAD_FAILED, "native module %s: the dynamic loader refused it (%s); "
                        "check the libraries it needs (`pipelink inspect`)", path, why ? why : "unknown");
    return PIPELINK_SUCCESS;
}

static PipeLinkStatus bind_symbol(void* lib, const char* libpath, const char* sym, const char* what, void** out) {
    *out = NULL;
    if (sym[0] == '\0') return PIPELINK_SUCCESS;
    *out = dlsym(lib, sym);
    if (*out == NULL)
        return plk_fail(PIPELINK_ERR_MODULE_LOAD_FAILED, "native module %s: the plan names %s %s, which it does not "
                        "export; recompile the plan against this module", libpath, what, sym);
    return PIPELINK_SUCCESS;
}

static PipeLinkStatus bind_call(Plan* plan, CallTarget* c) {
    PlanLibrary* lib = &plan->libraries[c->library];
    void* sym;
    PipeLinkStatus st;
    if (c->entry[0] == '\0') return plk_fail(PIPELINK_ERR_INTEGRITY, "plan: operator %s has no entry symbol", c->op_name);
    if ((st = bind_symbol(lib->handle, lib->path, c->entry, "entry point", &sym))) return st;
    c->fn = (PipeLinkComputeFn)sym;
    if ((st = bind_symbol(lib->handle, lib->path, c->workspace_hook, "workspace hook", &sym))) return st;
    c->workspace_size = (PipeLinkWorkspaceSizeFn)sym;
    if ((st = bind_symbol(lib->handle, lib->path, c->create_hook, "context_create hook", &sym))) return st;
    c->create = (PipeLinkContextCreateFn)sym;
    if ((st = bind_symbol(lib->handle, lib->path, c->destroy_hook, "context_destroy hook", &sym))) return st;
    c->destroy = (PipeLinkContextDestroyFn)sym;
    return PIPELINK_SUCCESS;
}

PipeLinkStatus plk_plan_open_libraries(Plan* plan, const char* plan_dir) {
    for (int32_t i = 0; i < plan->n_libraries; ++i) {
        PlanLibrary* lib = &plan->libraries[i];
        if (lib->path[0] != '/') { /* relative to the plan's folder */
            size_t k = strlen(plan_dir) + strlen(lib->path) + 2;
            char* full = malloc(k);
            if (full == NULL) return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "resolving %s", lib->path);
            snprintf(full, k, "%s/%s", plan_dir, lib->path);
            free(lib->path);
            lib->path = full;
        }
        PipeLinkStatus st = open_verified(lib, lib->path);
        if (st) return st;
    }
    for (int32_t i = 0; i < plan->n_stages; ++i) {
        Stage* s = &plan->stages[i];
        PipeLinkStatus st = PIPELINK_SUCCESS;
        if (s->kind == PLK_STAGE_CALL) st = bind_call(plan, &s->call);
        if (!st && s->kind == PLK_STAGE_CALL && s->on_error == PLK_ON_ERROR_FALLBACK) st = bind_call(plan, &s->fallback);
        if (st) return st;
    }
    return PIPELINK_SUCCESS;
}

static void free_call(CallTarget* c) {
    free(c->op_name), free(c->entry), free(c->workspace_hook), free(c->create_hook), free(c->destroy_hook);
    for (int32_t i = 0; c->attrs && i < c->n_attrs; ++i) {
        free((void*)c->attrs[i].name);
        if (c->attrs[i].type == PIPELINK_ATTR_STR) free((void*)c->attrs[i].value.s);
        if (c->attrs[i].type == PIPELINK_ATTR_FLOATS || c->attrs[i].type == PIPELINK_ATTR_INTS)
            free((void*)c->attrs[i].value.floats);
    }
    free(c->attrs);
}

void plk_plan_free(Plan* plan) {
    for (int32_t i = 0; plan->tensors && i < plan->n_tensors; ++i)
        free(plan->tensors[i].name), free(plan->tensors[i].shape), free(plan->tensors[i].strides);
    for (int32_t i = 0; plan->stages && i < plan->n_stages; ++i) {
        Stage* s = &plan->stages[i];
        free(s->id), free(s->op_version), free(s->op_json), free(s->in), free(s->out);
        free_call(&s->call), free_call(&s->fallback);
    }
    for (int32_t i = 0; plan->libraries && i < plan->n_libraries; ++i) {
        if (plan->libraries[i].handle) dlclose(plan->libraries[i].handle), close(plan->libraries[i].fd);
        free(plan->libraries[i].path);
    }
    free(plan->name), free(plan->tensors), free(plan->inputs), free(plan->outputs), free(plan->libraries);
    free(plan->stages), free(plan->read_in_place);
    memset(plan, 0, sizeof *plan);
}
