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

/* By PIPELINK_DTYPE_* value; the float8s (9, 10, 15..17: bits 0) are not plan tensors and stay refused. */
int plk_dtype_info(int32_t dtype_id, PipeLinkDataType* dtype, uint32_t* itemsize) {
    static const struct { uint8_t code, bits; } table[] = {
        {PIPELINK_DL_FLOAT, 32}, {PIPELINK_DL_FLOAT, 16}, {PIPELINK_DL_BFLOAT, 16}, {PIPELINK_DL_FLOAT, 64},
        {PIPELINK_DL_INT, 8},    {PIPELINK_DL_INT, 32},   {PIPELINK_DL_INT, 64},    {PIPELINK_DL_UINT, 8},
        {PIPELINK_DL_BOOL, 8},   {0, 0},                  {0, 0},                   {PIPELINK_DL_INT, 16},
        {PIPELINK_DL_UINT, 16},  {PIPELINK_DL_UINT, 32},  {PIPELINK_DL_UINT, 64},   {0, 0},
        {0, 0},                  {0, 0}};
    if (dtype_id < 0 || dtype_id >= (int32_t)(sizeof table / sizeof table[0]) || table[dtype_id].bits == 0) return 0;
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
    if (r->what == NULL && t->storage != PLK_STORAGE_EXTERNAL && t->storage != PLK_STORAGE_ARENA &&
        t->storage != PLK_STORAGE_CONSTANT)
        r->what = "a known tensor storage";
    if (r->what == NULL && t->storage == PLK_STORAGE_CONSTANT && t->offset != 0) r->what = "a constant at offset 0";
    return r->what == NULL;
}

/* One entry of the constants section (format 3): the bound bytes of a constant tensor, in host memory
 * aligned to 256 bytes, checked against their sha256. */
static int read_constant(Reader* r, Plan* plan) {
    int32_t ref = rd_i32(r, "a constant's tensor");
    uint8_t sha[32], digest[32];
    take(r, sha, 32, "a constant's sha256");
    uint64_t size = rd_u64(r, "a constant's size");
    if (r->what != NULL) return 0;
    if (ref < 0 || ref >= plan->n_tensors) return r->what = "a constant's tensor in range", 0;
    PlanTensor* t = &plan->tensors[ref];
    if (t->storage != PLK_STORAGE_CONSTANT) return r->what = "a constant for a tensor of constant storage", 0;
    if (t->constant != NULL) return r->what = "one constant per constant tensor", 0;
    if (size != t->nbytes) return r->what = "a constant of its tensor's size (dtype and shape)", 0;
    if (size > r->n - r->pos) return r->what = "a constant inside the payload", 0;
    void* mem = NULL;
    if (posix_memalign(&mem, 256, size ? (size_t)size : 1) != 0) return r->what = "memory for a constant", 0;
    t->constant = mem;
    take(r, mem, (size_t)size, "a constant");
    plk_sha256(mem, (size_t)size, digest);
    if (memcmp(digest, sha, 32) != 0) return r->what = "a constant matching its sha256", 0;
    return 1;
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

/* A kernel's reference to one of its stage's ports (u8 none/in/out, u32 position): a plan tensor or -1. */
static int32_t read_port(Reader* r, const Stage* s, int allow_none) {
    uint8_t which = rd_u8(r, "a port kind");
    uint32_t pos = rd_u32(r, "a port position");
    if (r->what != NULL) return -1;
    if (which == 0 && allow_none) return -1;
    if (which == 1 && pos < (uint32_t)s->n_in) return s->in[pos];
    if (which == 2 && pos < (uint32_t)s->n_out) return s->out[pos];
    r->what = "a port of the stage";
    return -1;
}

static int read_kernel(Reader* r, Stage* s, const Plan* plan) {
    KernelLaunch* k = &s->kernel;
    k->cubin = rd_u32(r, "a cubin index");
    k->name = rd_str(r, "a kernel name");
    for (int d = 0; d < 7; ++d) k->dims[d] = rd_u32(r, "a launch dimension");
    if (r->what == NULL && k->cubin >= (uint32_t)plan->n_cubins) r->what = "a cubin index in range";
    for (int d = 0; r->what == NULL && d < 6; ++d)
        if (k->dims[d] == 0 || k->dims[d] > 0x7fffffffu) r->what = "launch dimensions in [1, 2^31)";
    k->n_params = (int32_t)rd_count(r, 5, "a parameter count");
    if (r->what != NULL) return 0;
    k->params = calloc((size_t)k->n_params + 1, sizeof(KernelParam));
    if (k->params == NULL) return r->what = "memory for parameters", 0;
    for (int32_t i = 0; i < k->n_params && r->what == NULL; ++i) {
        KernelParam* q = &k->params[i];
        q->kind = rd_u8(r, "a parameter kind");
        if (q->kind == PLK_PARAM_PTR) {
            q->tensor = read_port(r, s, 1);
            q->align = rd_u32(r, "a pointer alignment");
            if (r->what == NULL && (q->align == 0 || q->align > 4096 || (q->align & (q->align - 1))))
                r->what = "a pointer alignment that is a power of two up to 4096";
        } else if (q->kind == PLK_PARAM_I32 || q->kind == PLK_PARAM_F32) {
            q->bits = rd_u32(r, "a 4-byte scalar");
        } else if (q->kind == PLK_PARAM_I64 || q->kind == PLK_PARAM_F64) {
            q->bits = rd_u64(r, "an 8-byte scalar");
        } else {
            r->what = "a known parameter kind";
        }
    }
    return r->what == NULL;
}

/* The last element a column-major operand touches, from its element offset: inside the tensor? */
static int operand_fits(const MatmulLayout* l, int64_t offset, const PlanTensor* t) {
    if (l->rows == 0 || l->cols == 0) return 1;
    if (offset < 0 || l->ld < (int64_t)l->rows || l->count < 1 || l->stride < 0) return 0;
    if (l->rows > (1ull << 40) || l->cols > (1ull << 40) || l->ld > (1ll << 40) || l->stride > (1ll << 40)) return 0;
    __int128 last = (__int128)offset + (__int128)(l->count - 1) * l->stride + (__int128)(l->cols - 1) * l->ld + l->rows;
    return last <= t->numel;
}

static int read_matmul(Reader* r, Stage* s, const Plan* plan) {
    MatmulCall* m = &s->matmul;
    m->data_type = rd_i32(r, "a cuBLASLt data type");
    m->compute_type = rd_i32(r, "a cuBLASLt compute type");
    m->scale_type = rd_i32(r, "a cuBLASLt scale type");
    m->trans[0] = rd_u8(r, "transa"), m->trans[1] = rd_u8(r, "transb");
    m->epilogue = rd_u32(r, "an epilogue");
    for (int i = 0; i < 3; ++i) {
        MatmulLayout* l = &m->layout[i];
        l->rows = rd_u64(r, "layout rows"), l->cols = rd_u64(r, "layout columns");
        l->ld = rd_i64(r, "a leading dimension"), l->count = rd_i32(r, "a batch count");
        l->stride = rd_i64(r, "a batch stride");
    }
    m->alpha = rd_f64(r, "alpha"), m->beta = rd_f64(r, "beta");
    for (int i = 0; i < 4; ++i) m->operand[i] = read_port(r, s, 0);
    m->bias = read_port(r, s, 1);
    for (int i = 0; i < 4 && r->what == NULL; ++i)
        if (m->operand[i] < 0) r->what = "matmul operands that are present tensors";
    m->n_calls = (int32_t)rd_count(r, 24, "a call count");
    if (r->what != NULL) return 0;
    m->offsets = calloc((size_t)m->n_calls * 3 + 1, sizeof(int64_t));
    if (m->offsets == NULL) return r->what = "memory for offsets", 0;
    for (int32_t i = 0; i < m->n_calls * 3; ++i) m->offsets[i] = rd_i64(r, "an operand offset");
    m->itemsize = rd_u32(r, "an item size");
    m->max_workspace = rd_u64(r, "a workspace limit");
    for (int i = 0; i < 4; ++i) m->min_align[i] = rd_u32(r, "an operand alignment");
    m->algo_rank = 0, m->algo_asked = 1, m->algo_workspace = PLK_ALGO_WORKSPACE_ANY; /* format 3: the first */
    if (plan->version >= 4) {
        m->algo_rank = rd_u32(r, "an algorithm rank");
        m->algo_asked = rd_u32(r, "the number of candidates asked");
        m->algo_workspace = rd_u64(r, "an algorithm's workspace");
    }
    if (r->what != NULL) return 0;
    if (m->algo_asked < 1 || m->algo_asked > PLK_MAX_ALGO_RANK || m->algo_rank >= m->algo_asked)
        return r->what = "an algorithm rank below the candidates asked, at most 32", 0;
    if (plan->version >= 4 && m->algo_workspace > m->max_workspace)
        return r->what = "an algorithm workspace within the workspace limit", 0;
    /* cudaDataType: 0 f32, 1 f64, 2 f16, 14 bf16; scale types 0 f32, 1 f64 */
    uint32_t want = m->data_type == 0 ? 4 : m->data_type == 1 ? 8 : m->data_type == 2 || m->data_type == 14 ? 2 : 0;
    if (want == 0 || want != m->itemsize) return r->what = "a known cuBLASLt data type and its item size", 0;
    if (m->scale_type != 0 && m->scale_type != 1) return r->what = "a float or double scale type", 0;
    if (m->trans[0] > 1 || m->trans[1] > 1 || m->max_workspace > (1ull << 34)) return r->what = "transposes and a workspace limit in range", 0;
    for (int i = 0; i < 4; ++i)
        if (m->min_align[i] == 0 || m->min_align[i] > 256 || (m->min_align[i] & (m->min_align[i] - 1)))
            return r->what = "operand alignments that are powers of two up to 256", 0;
    for (int i = 0; i < 4; ++i) {
        const PlanTensor* t = &plan->tensors[m->operand[i]];
        if (t->dtype.bits / 8 != m->itemsize) return r->what = "matmul operands of the product's item size", 0;
        for (int32_t c = 0; c < m->n_calls; ++c)
            if (!operand_fits(&m->layout[i < 2 ? i : 2], m->offsets[c * 3 + (i < 2 ? i : 2)], t))
                return r->what = "matmul operands inside their tensors", 0;
    }
    int writes_output = 0;
    for (int32_t j = 0; j < s->n_out; ++j) writes_output |= s->out[j] == m->operand[3];
    if (!writes_output) return r->what = "a matmul writing one of its stage's outputs", 0;
    if (m->bias >= 0 && plan->tensors[m->bias].numel < (int64_t)m->layout[2].rows)
        return r->what = "a bias vector of the output's columns", 0;
    return 1;
}

static int read_stage(Reader* r, Stage* s, const Plan* plan) {
    s->kind = rd_u8(r, "a stage kind");
    s->id = rd_str(r, "a stage id");
    if (r->what != NULL) return 0;
    if (s->kind == PLK_STAGE_KERNEL || s->kind == PLK_STAGE_MATMUL) {
        if (plan->device_type != PIPELINK_DEVICE_CUDA) return r->what = "stages of a CPU plan", 0;
        if (!read_refs(r, &s->n_in, &s->in, plan->n_tensors, 1) || !read_refs(r, &s->n_out, &s->out, plan->n_tensors, 0))
            return 0;
        return s->kind == PLK_STAGE_KERNEL ? read_kernel(r, s, plan) : read_matmul(r, s, plan);
    }
    if (s->kind == PLK_STAGE_RELAYOUT) {
        s->alias_if_contiguous = rd_u8(r, "a relayout flag");
        if (!read_refs(r, &s->n_in, &s->in, plan->n_tensors, 0) || !read_refs(r, &s->n_out, &s->out, plan->n_tensors, 0))
            return 0;
        if (s->n_in != 1 || s->n_out != 1) return r->what = "a relayout with one source and one target", 0;
        const PlanTensor *a = &plan->tensors[s->in[0]], *b = &plan->tensors[s->out[0]];
        /* A copy between tensors of one size: the same dtype, or one as wide (a bitcast copies the bytes). */
        if (a->dtype.bits != b->dtype.bits || a->numel != b->numel) return r->what = "a relayout between equal tensors", 0;
        if (s->alias_if_contiguous && b->storage != PLK_STORAGE_ARENA) return r->what = "an aliasing relayout into the arena", 0;
        return 1;
    }
    if (s->kind == PLK_STAGE_CHECK) { /* a built-in stage's check_finite, after its launches (format 5) */
        if (plan->device_type != PIPELINK_DEVICE_CUDA || plan->version < 5)
            return r->what = "check stages in CUDA plans of format 5 or later", 0;
        if (!read_refs(r, &s->n_in, &s->in, plan->n_tensors, 1) || !read_refs(r, &s->n_out, &s->out, plan->n_tensors, 0))
            return 0;
        s->on_error = rd_u8(r, "an on_error policy");
        s->check_finite = rd_u8(r, "a check_finite flag");
        if (r->what != NULL) return 0;
        if (s->n_out < 1 || s->check_finite != 1) return r->what = "a check of one output or more, check_finite set", 0;
        if (s->on_error != PLK_ON_ERROR_FAIL && s->on_error != PLK_ON_ERROR_IDENTITY && s->on_error != PLK_ON_ERROR_SKIP)
            return r->what = "a check stage's on_error: fail, identity or skip", 0;
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
    /* On the device a call is asynchronous: the host cannot time it (timeout_ms). (Policies and check_finite
     * decide on the host after the call, which a CUDA graph cannot replay: api.c refuses them in graph plans.) */
    if (r->what == NULL && plan->device_type == PIPELINK_DEVICE_CUDA && s->timeout_ms != 0)
        r->what = "a native call of a CUDA plan without timeout_ms";
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
 * in the arena, every constant tensor has its bytes, and no stage writes a pipeline input or a constant. */
static const char* check_plan(const Plan* plan) {
    uint8_t* role = calloc((size_t)plan->n_tensors + 1, 1); /* 1 input, 2 output, 3 constant */
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
        if (t->storage == PLK_STORAGE_CONSTANT && t->constant == NULL && !bad) bad = "a constant for every constant tensor";
        if (t->storage == PLK_STORAGE_CONSTANT) role[i] = 3;
    }
    for (int32_t i = 0; i < plan->n_stages && !bad; ++i)
        for (int32_t j = 0; j < plan->stages[i].n_out && !bad; ++j)
            if (role[plan->stages[i].out[j]] == 1 || role[plan->stages[i].out[j]] == 3)
                bad = "stages that never write a pipeline input or a constant";
    free(role);
    return bad;
}

PipeLinkStatus plk_plan_parse(const uint8_t* bytes, size_t n, const char* where, uint32_t version, int32_t device_type,
                              int32_t device_id, Plan* plan) {
    Reader r = {bytes, n, 0, NULL};
    memset(plan, 0, sizeof *plan);
    plan->device_type = device_type, plan->device_id = device_id, plan->version = version;
    plan->name = rd_str(&r, "the pipeline name");
    plan->arena_bytes = rd_u64(&r, "the arena size");
    plan->arena_alignment = rd_u32(&r, "the arena alignment");
    if (r.what == NULL && (plan->arena_alignment < 16 || plan->arena_alignment > 65536 ||
                           (plan->arena_alignment & (plan->arena_alignment - 1))))
        r.what = "an arena alignment that is a power of two in [16, 65536]";
    if (r.what == NULL && plan->arena_bytes > ((uint64_t)1 << 48)) r.what = "an arena size below 2^48";
    if (version >= 2) plan->compute_capability = rd_u32(&r, "a compute capability");
    plan->n_tensors = (int32_t)rd_count(&r, 25, "the tensor count");
    plan->tensors = r.what == NULL ? calloc((size_t)plan->n_tensors + 1, sizeof(PlanTensor)) : NULL;
    for (int32_t i = 0; plan->tensors && i < plan->n_tensors && r.what == NULL; ++i) {
        read_tensor(&r, &plan->tensors[i]);
        if (r.what == NULL && version < 3 && plan->tensors[i].storage == PLK_STORAGE_CONSTANT)
            r.what = "no constant tensors before format version 3";
    }
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
    if (version >= 2) {
        plan->n_cubins = (int32_t)rd_count(&r, 40, "the cubin count");
        plan->cubins = r.what == NULL ? calloc((size_t)plan->n_cubins + 1, sizeof(PlanCubin)) : NULL;
        if (r.what == NULL && plan->cubins == NULL) r.what = "memory for the plan";
        for (int32_t i = 0; plan->cubins && i < plan->n_cubins && r.what == NULL; ++i) {
            PlanCubin* c = &plan->cubins[i];
            take(&r, c->sha256, 32, "a cubin sha256");
            c->size = rd_u64(&r, "a cubin size");
            if (r.what == NULL && (c->size == 0 || c->size > r.n - r.pos)) r.what = "a cubin inside the payload";
            if (r.what == NULL && (c->bytes = malloc((size_t)c->size)) == NULL) r.what = "memory for a cubin";
            take(&r, c->bytes, (size_t)c->size, "a cubin");
            uint8_t digest[32];
            if (r.what == NULL) plk_sha256(c->bytes, (size_t)c->size, digest);
            if (r.what == NULL && memcmp(digest, c->sha256, 32) != 0) r.what = "a cubin matching its sha256";
        }
    }
    if (version >= 3) { /* constants: bound weights (docs/plan-format.md) */
        plan->n_constants = (int32_t)rd_count(&r, 44, "the constant count");
        if (r.what == NULL && plan->tensors == NULL) r.what = "memory for the plan";
        for (int32_t i = 0; i < plan->n_constants && r.what == NULL; ++i) read_constant(&r, plan);
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
        for (int32_t j = 0; plan->stages[i].kind != PLK_STAGE_RELAYOUT && j < plan->stages[i].n_in; ++j)
            if (plan->stages[i].in[j] >= 0) plan->read_in_place[plan->stages[i].in[j]] = 1;
    plan->align = bad == NULL && r.what == NULL ? calloc((size_t)plan->n_tensors + 1, sizeof(uint32_t)) : NULL;
    if (r.what == NULL && bad == NULL && plan->align == NULL) bad = "memory for the plan";
    for (int32_t i = 0; plan->align && i < plan->n_tensors; ++i) plan->align[i] = 1;
    for (int32_t i = 0; plan->align && i < plan->n_stages; ++i) {
        const Stage* s = &plan->stages[i];
        for (int32_t j = 0; s->kind == PLK_STAGE_KERNEL && j < s->kernel.n_params; ++j) {
            const KernelParam* q = &s->kernel.params[j];
            if (q->kind == PLK_PARAM_PTR && q->tensor >= 0 && q->align > plan->align[q->tensor]) plan->align[q->tensor] = q->align;
        }
        for (int j = 0; s->kind == PLK_STAGE_MATMUL && j < 4; ++j) {
            int32_t t = s->matmul.operand[j];
            if (s->matmul.min_align[j] > plan->align[t]) plan->align[t] = s->matmul.min_align[j];
        }
    }
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
        free(plan->tensors[i].name), free(plan->tensors[i].shape), free(plan->tensors[i].strides),
            free(plan->tensors[i].constant);
    for (int32_t i = 0; plan->stages && i < plan->n_stages; ++i) {
        Stage* s = &plan->stages[i];
        free(s->id), free(s->op_version), free(s->op_json), free(s->in), free(s->out);
        free_call(&s->call), free_call(&s->fallback);
        free(s->kernel.name), free(s->kernel.params), free(s->matmul.offsets);
    }
    for (int32_t i = 0; plan->libraries && i < plan->n_libraries; ++i) {
        if (plan->libraries[i].handle) dlclose(plan->libraries[i].handle), close(plan->libraries[i].fd);
        free(plan->libraries[i].path);
    }
    free(plan->name), free(plan->tensors), free(plan->inputs), free(plan->outputs), free(plan->libraries);
    free(plan->stages), free(plan->read_in_place), free(plan->align);
    for (int32_t i = 0; plan->cubins && i < plan->n_cubins; ++i) free(plan->cubins[i].bytes);
    free(plan->cubins);
    memset(plan, 0, sizeof *plan);
}
