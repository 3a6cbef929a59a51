/* execute.c - running a loaded plan on the CPU: execution contexts (arena + tensor tables + per-stage
 * services, reused from a per-pipeline free list), the checks on the caller's tensors, the stages with
 * their on_error policies and check_finite. Nothing here allocates once a context exists, except the
 * outputs the caller asked the runtime to allocate. */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

/* The stage slot whose module is running on this thread: the workspace service has no argument for it. */
static _Thread_local StageSlot* running_slot;

static void* workspace_service(uint64_t size) {
    StageSlot* slot = running_slot;
    if (slot == NULL) return NULL;
    if (size > slot->workspace_size) {
        void* grown = NULL;
        if (posix_memalign(&grown, 256, (size_t)size) != 0) return NULL;
        free(slot->workspace);
        plk_held_add(PIPELINK_DEVICE_CPU, 0, PLK_HELD_WORKSPACE, (int64_t)(size - slot->workspace_size));
        slot->workspace = grown, slot->workspace_size = size;
    }
    return slot->workspace;
}

/* CUDA plans: the device workspace made when the context was (from the module's workspace_size hook);
 * never allocated on the hot path, so a larger request is NULL. */
static void* device_workspace_service(uint64_t size) {
    StageSlot* slot = running_slot;
    return slot != NULL && size <= slot->workspace_size ? slot->workspace : NULL;
}

static void log_service(int32_t level, const char* msg) {
    static const char* names[] = {"debug", "info", "warning", "error"};
    const char* env = getenv("PIPELINK_NATIVE_LOG"); /* "debug" shows everything; warnings and errors always */
    if (level < PIPELINK_LOG_WARNING && !(env && strcmp(env, "debug") == 0)) return;
    fprintf(stderr, "pipelink.native %s: %s\n", names[level >= 0 && level <= 3 ? level : 3], msg ? msg : "(null)");
}

static void* no_cublas(void* stream) { (void)stream; return NULL; }

void plk_fill_tensor(PipeLinkTensor* t, const Plan* plan, int32_t ref) {
    memset(t, 0, sizeof *t);
    t->device.device_type = plan->device_type, t->device.device_id = plan->device_id;
    if (ref < 0) return; /* an absent optional input: data NULL, ndim 0 */
    const PlanTensor* pt = &plan->tensors[ref];
    t->ndim = pt->ndim, t->dtype = pt->dtype, t->shape = pt->shape, t->strides = pt->strides;
}

static void free_context(const Plan* plan, ExecContext* c) {
    if (c == NULL) return;
    /* CUDA: the context's last run finishes (its stream and event are waited for) before anything goes */
    if (plan->device_type == PIPELINK_DEVICE_CUDA) plk_cuda_context_free(plan, c);
    for (int32_t i = 0; c->slots && i < plan->n_stages; ++i) {
        StageSlot* s = &c->slots[i];
        const Stage* st = &plan->stages[i];
        if (st->kind == PLK_STAGE_CALL && st->call.destroy && s->services.user) st->call.destroy(s->services.user);
        if (st->kind == PLK_STAGE_CALL && st->fallback.destroy && s->fallback_services.user)
            st->fallback.destroy(s->fallback_services.user);
        free(s->in), free(s->out);
        if (plan->device_type == PIPELINK_DEVICE_CUDA) plk_cuda_free_device((uint64_t)(uintptr_t)s->workspace);
        else free(s->workspace);
        if (s->workspace) plk_held_add(plan->device_type, plan->device_id, PLK_HELD_WORKSPACE, -(int64_t)s->workspace_size);
    }
    if (c->arena) plk_held_add(plan->device_type, plan->device_id, PLK_HELD_ARENA, -(int64_t)c->held_arena);
    if (c->counted) plk_held_contexts(plan->device_type, plan->device_id, -1);
    free(c->slots), free(c->data), free(c->missing), free(c->allocated), free(c->arena), free(c);
}

static PipeLinkStatus prepare_call(const Plan* plan, const CallTarget* call, StageSlot* slot, PipeLinkServices* services,
                                   const char* stage) {
    const int cuda = plan->device_type == PIPELINK_DEVICE_CUDA;
    services->abi_version = PIPELINK_ABI_VERSION;
    services->device_type = plan->device_type;
    services->log = log_service;
    services->workspace = cuda ? device_workspace_service : workspace_service;
    services->cublas_handle = cuda ? pipeLinkGetCublasHandle : no_cublas;
    if (call->workspace_size && cuda) {
        int64_t need = call->workspace_size(slot->in, call->n_in, slot->out, call->n_out, call->attrs, call->n_attrs);
        if (need > (int64_t)slot->workspace_size) { /* a fallback needing more than its call replaces its block */
            void* grown = NULL;
            PipeLinkStatus st = plk_cuda_alloc_device((uint64_t)need, &grown);
            if (st) return st;
            if (slot->workspace) plk_cuda_free_device((uint64_t)(uintptr_t)slot->workspace);
            plk_held_add(plan->device_type, plan->device_id, PLK_HELD_WORKSPACE, need - (int64_t)slot->workspace_size);
            slot->workspace = grown, slot->workspace_size = (uint64_t)need;
        }
    } else if (call->workspace_size) {
        int64_t need = call->workspace_size(slot->in, call->n_in, slot->out, call->n_out, call->attrs, call->n_attrs);
        running_slot = slot;
        if (need > 0 && workspace_service((uint64_t)need) == NULL)
            return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "stage '%s': workspace of %lld bytes", stage, (long long)need);
        running_slot = NULL;
    }
    if (call->create) {
        int status = call->create(call->attrs, call->n_attrs, services, &services->user);
        if (status)
            return plk_fail(status > 0 && status <= 13 ? (PipeLinkStatus)status : PIPELINK_ERR_MODULE_CRASH,
                            "stage '%s': operator %s's context_create returned %d", stage, call->op_name, status);
    }
    return PIPELINK_SUCCESS;
}

PipeLinkStatus plk_new_context(const Plan* plan, ExecContext** out) {
    ExecContext* c = calloc(1, sizeof *c);
    PipeLinkStatus st = PIPELINK_SUCCESS;
    if (c == NULL) return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "an execution context");
    c->data = calloc((size_t)plan->n_tensors + 1, sizeof(void*));
    c->missing = calloc((size_t)plan->n_tensors + 1, 1);
    c->allocated = calloc((size_t)plan->n_outputs + 1, 1);
    c->slots = calloc((size_t)plan->n_stages + 1, sizeof(StageSlot));
    const int host_arena = plan->arena_bytes && plan->device_type == PIPELINK_DEVICE_CPU;
    if (host_arena && posix_memalign(&c->arena, plan->arena_alignment, (size_t)plan->arena_bytes) != 0) c->arena = NULL;
    if (c->arena) c->held_arena = plan->arena_bytes, plk_held_add(PIPELINK_DEVICE_CPU, 0, PLK_HELD_ARENA, (int64_t)plan->arena_bytes);
    if (!c->data || !c->missing || !c->allocated || !c->slots || (host_arena && !c->arena)) {
        free_context(plan, c);
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "an execution context with an arena of %llu bytes",
                        (unsigned long long)plan->arena_bytes);
    }
    if (plan->device_type == PIPELINK_DEVICE_CUDA && (st = plk_cuda_context_init(plan, c)) != PIPELINK_SUCCESS) {
        free_context(plan, c);
        return st;
    }
    for (int32_t i = 0; i < plan->n_tensors; ++i)
        if (plan->tensors[i].storage == PLK_STORAGE_ARENA)
            c->data[i] = plan->device_type == PIPELINK_DEVICE_CUDA ? (void*)(uintptr_t)(c->device_arena + plan->tensors[i].offset)
                                                                   : (char*)c->arena + plan->tensors[i].offset;
    for (int32_t i = 0; i < plan->n_tensors; ++i) /* bound weights: loaded once, shared by every context */
        if (plan->tensors[i].storage == PLK_STORAGE_CONSTANT)
            c->data[i] = plan->device_type == PIPELINK_DEVICE_CUDA ? (void*)(uintptr_t)plan->tensors[i].device_constant
                                                                   : (void*)plan->tensors[i].constant;
    for (int32_t i = 0; i < plan->n_stages && !st; ++i) {
        const Stage* s = &plan->stages[i];
        StageSlot* slot = &c->slots[i];
        slot->in = calloc((size_t)s->n_in + 1, sizeof(PipeLinkTensor));
        slot->out = calloc((size_t)s->n_out + 1, sizeof(PipeLinkTensor));
        if (!slot->in || !slot->out) { st = plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "an execution context"); break; }
        for (int32_t j = 0; j < s->n_in; ++j) plk_fill_tensor(&slot->in[j], plan, s->in[j]);
        for (int32_t j = 0; j < s->n_out; ++j) plk_fill_tensor(&slot->out[j], plan, s->out[j]);
        if (s->kind != PLK_STAGE_CALL) continue;
        st = prepare_call(plan, &s->call, slot, &slot->services, s->id);
        if (!st && s->on_error == PLK_ON_ERROR_FALLBACK) st = prepare_call(plan, &s->fallback, slot, &slot->fallback_services, s->id);
    }
    if (st) {
        free_context(plan, c);
        return st;
    }
    c->counted = 1, plk_held_contexts(plan->device_type, plan->device_id, 1);
    *out = c;
    return PIPELINK_SUCCESS;
}

ExecContext* plk_take_context(Pipeline* p, uint64_t stream_id, PipeLinkStatus* st) {
    pthread_mutex_lock(&p->pool_lock);
    ExecContext** at = &p->free_contexts; /* the idle context that last ran on this stream, else the newest idle */
    for (ExecContext** k = at; stream_id != 0 && *k != NULL; k = &(*k)->next)
        if ((*k)->stream_id == stream_id) {
            at = k;
            break;
        }
    ExecContext* c = *at;
    if (c != NULL) *at = c->next;
    pthread_mutex_unlock(&p->pool_lock);
    if (c != NULL) return c;
    if ((*st = plk_new_context(&p->plan, &c)) != PIPELINK_SUCCESS) return NULL;
    pthread_mutex_lock(&p->pool_lock);
    if (p->n_contexts < (int32_t)(sizeof p->all_contexts / sizeof p->all_contexts[0])) p->all_contexts[p->n_contexts++] = c;
    else c->next = (ExecContext*)c; /* marks a context outside the pool: freed after its run */
    pthread_mutex_unlock(&p->pool_lock);
    return c;
}

void plk_give_context(Pipeline* p, ExecContext* c) {
    if (c->next == c) { free_context(&p->plan, c); return; }
    pthread_mutex_lock(&p->pool_lock);
    c->next = p->free_contexts, p->free_contexts = c;
    pthread_mutex_unlock(&p->pool_lock);
}

void plk_pipeline_free_contexts(Pipeline* p) {
    for (int32_t i = 0; i < p->n_contexts; ++i) free_context(&p->plan, p->all_contexts[i]);
    p->n_contexts = 0, p->free_contexts = NULL;
}

/* ---- the caller's tensors ---- */

static int is_contiguous(const PipeLinkTensor* t) {
    if (t->strides == NULL) return 1;
    int64_t want = 1;
    for (int32_t d = t->ndim - 1; d >= 0; --d) {
        if (t->shape[d] != 1 && t->strides[d] != want) return 0;
        want *= t->shape[d];
    }
    return 1;
}

PipeLinkStatus plk_check_tensor(const PipeLinkTensor* t, const PlanTensor* want, const char* role, int32_t index,
                                int contiguous, int32_t device_type) {
    if (device_type == PIPELINK_DEVICE_CPU && t->device.device_type != PIPELINK_DEVICE_CPU &&
        t->device.device_type != PIPELINK_DEVICE_CUDA_HOST)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s %d ('%s') is on device type %d; this CPU plan takes host "
                        "memory (PIPELINK_DEVICE_CPU)", role, index, want->name, t->device.device_type);
    if (device_type == PIPELINK_DEVICE_CUDA && t->device.device_type != PIPELINK_DEVICE_CUDA)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s %d ('%s') is on device type %d; this CUDA plan takes device "
                        "memory (PIPELINK_DEVICE_CUDA)", role, index, want->name, t->device.device_type);
    if (t->dtype.code != want->dtype.code || t->dtype.bits != want->dtype.bits || t->dtype.lanes != 1)
        return plk_fail(PIPELINK_ERR_DTYPE_MISMATCH, "%s %d ('%s') has dtype (code %u, bits %u, lanes %u), but the plan "
                        "takes dtype id %d (code %u, bits %u, lanes 1)", role, index, want->name, t->dtype.code,
                        t->dtype.bits, t->dtype.lanes, want->dtype_id, want->dtype.code, want->dtype.bits);
    int same = t->ndim == want->ndim && (t->ndim == 0 || t->shape != NULL);
    for (int32_t d = 0; same && d < t->ndim; ++d) same = t->shape[d] == want->shape[d];
    if (!same) {
        char shape_want[256] = "", shape_got[256] = "";
        for (int32_t d = 0; d < want->ndim && d < 16; ++d)
            snprintf(shape_want + strlen(shape_want), sizeof shape_want - strlen(shape_want), "%s%lld", d ? "x" : "", (long long)want->shape[d]);
        for (int32_t d = 0; t->shape && t->ndim == want->ndim && d < t->ndim && d < 16; ++d) /* only then readable */
            snprintf(shape_got + strlen(shape_got), sizeof shape_got - strlen(shape_got), "%s%lld", d ? "x" : "", (long long)t->shape[d]);
        return plk_fail(PIPELINK_ERR_SHAPE_MISMATCH, "%s %d ('%s') has rank %d shape [%s]%s, but the plan was compiled "
                        "for rank %d shape [%s]; compile a plan for this shape (pipelink compile --shape)", role, index,
                        want->name, t->ndim, shape_got, t->shape || t->ndim == 0 ? "" : " (shape is NULL)", want->ndim, shape_want);
    }
    for (int32_t d = 0; t->strides && d < t->ndim; ++d)
        if (t->strides[d] < 0)
            return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s %d ('%s') has a negative stride", role, index, want->name);
    if (contiguous && !is_contiguous(t))
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s %d ('%s') must be contiguous (strides NULL or row-major)",
                        role, index, want->name);
    if (t->data == NULL && want->numel > 0)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s %d ('%s') has data NULL", role, index, want->name);
    return PIPELINK_SUCCESS;
}

/* The bytes a caller's tensor spans: [*lo, *hi). Strides are non-negative (checked before). */
static void extent(const PipeLinkTensor* t, const PlanTensor* want, uintptr_t* lo, uintptr_t* hi) {
    uint64_t last = 0; /* the element offset of the last element */
    for (int32_t d = 0; d < t->ndim; ++d)
        last += (uint64_t)(t->shape[d] > 0 ? t->shape[d] - 1 : 0) * (uint64_t)(t->strides ? t->strides[d] : want->strides[d]);
    *lo = (uintptr_t)t->data + t->byte_offset;
    *hi = want->numel ? *lo + (uintptr_t)((last + 1) * (want->nbytes / (uint64_t)want->numel)) : *lo;
}

/* A caller's output that shares bytes with an input or another output would be read after it is written. */
PipeLinkStatus plk_check_overlaps(const Plan* plan, const PipeLinkTensor* inputs, const PipeLinkTensor* outputs) {
    for (int32_t i = 0; i < plan->n_outputs; ++i) {
        if (outputs[i].data == NULL) continue;
        uintptr_t lo, hi, a, b;
        extent(&outputs[i], &plan->tensors[plan->outputs[i]], &lo, &hi);
        for (int32_t j = 0; j < plan->n_inputs + i; ++j) {
            const int is_input = j < plan->n_inputs;
            const PipeLinkTensor* other = is_input ? &inputs[j] : &outputs[j - plan->n_inputs];
            const PlanTensor* info = &plan->tensors[is_input ? plan->inputs[j] : plan->outputs[j - plan->n_inputs]];
            if (other->data == NULL) continue;
            extent(other, info, &a, &b);
            if (lo < b && a < hi)
                return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "output %d ('%s') overlaps %s '%s'; pass separate buffers",
                                i, plan->tensors[plan->outputs[i]].name, is_input ? "input" : "output", info->name);
        }
    }
    return PIPELINK_SUCCESS;
}

/* Copy a strided tensor into a contiguous one (element by element; strides in elements). */
static void strided_copy(void* dst, const PipeLinkTensor* src, uint32_t itemsize) {
    const char* base = (const char*)src->data + src->byte_offset;
    if (is_contiguous(src)) {
        memcpy(dst, base, (size_t)pipelink_numel(src) * itemsize);
        return;
    }
    int64_t idx[PLK_MAX_NDIM] = {0}, n = pipelink_numel(src);
    char* out = dst;
    for (int64_t i = 0; i < n; ++i) {
        int64_t off = 0;
        for (int32_t d = 0; d < src->ndim; ++d) off += idx[d] * src->strides[d];
        memcpy(out + i * itemsize, base + off * itemsize, itemsize);
        for (int32_t d = src->ndim - 1; d >= 0; --d) {
            if (++idx[d] < src->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* Non-finite elements of a float tensor (NaN/Inf: all exponent bits set for 16-bit floats). */
int64_t plk_count_nonfinite(const PipeLinkTensor* t) {
    int64_t n = pipelink_numel(t), bad = 0;
    if (t->dtype.code == PIPELINK_DL_FLOAT && t->dtype.bits == 32)
        for (int64_t i = 0; i < n; ++i) bad += !isfinite(((const float*)t->data)[i]);
    else if (t->dtype.code == PIPELINK_DL_FLOAT && t->dtype.bits == 64)
        for (int64_t i = 0; i < n; ++i) bad += !isfinite(((const double*)t->data)[i]);
    else if (t->dtype.bits == 16 && (t->dtype.code == PIPELINK_DL_FLOAT || t->dtype.code == PIPELINK_DL_BFLOAT)) {
        uint16_t mask = t->dtype.code == PIPELINK_DL_FLOAT ? 0x7C00 : 0x7F80;
        for (int64_t i = 0; i < n; ++i) bad += (((const uint16_t*)t->data)[i] & mask) == mask;
    }
    return bad;
}

/* ---- running ---- */

static int call(const CallTarget* c, StageSlot* slot, PipeLinkServices* services, void* stream) {
    running_slot = slot;
    int status = c->fn(slot->in, c->n_in, slot->out, c->n_out, c->attrs, c->n_attrs, services, stream);
    running_slot = NULL;
    return status;
}

/* One call stage with its checks and policy. Returns 0, or the failure the caller must report. */
PipeLinkStatus plk_missing_outputs(const Plan* plan, const ExecContext* c, const char* degraded) {
    char missing[512];
    missing[0] = '\0';
    for (int32_t i = 0; i < plan->n_outputs; ++i)
        if (c->missing[plan->outputs[i]])
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s'%s'", missing[0] ? ", " : "",
                     plan->tensors[plan->outputs[i]].name);
    if (missing[0] == '\0') return PIPELINK_SUCCESS;
    return plk_fail(PIPELINK_ERR_MODULE_CRASH, "outputs %s are missing: stages degraded:%s", missing, degraded);
}

int plk_skip_if_missing(const Plan* plan, const Stage* s, ExecContext* c, char* degraded, size_t cap) {
    for (int32_t j = 0; j < s->n_in; ++j)
        if (s->in[j] >= 0 && c->missing[s->in[j]]) { /* an earlier skip: this stage cannot run */
            for (int32_t k = 0; k < s->n_out; ++k) c->missing[s->out[k]] = 1;
            snprintf(degraded + strlen(degraded), cap - strlen(degraded), " '%s' skipped (input '%s' missing);",
                     s->id, plan->tensors[s->in[j]].name);
            return 1;
        }
    return 0;
}

PipeLinkStatus plk_run_call(const Plan* plan, const Stage* s, ExecContext* c, StageSlot* slot, char* degraded,
                            size_t cap, void* stream) {
    if (plk_skip_if_missing(plan, s, c, degraded, cap)) return PIPELINK_SUCCESS;
    const int device = plan->device_type == PIPELINK_DEVICE_CUDA;
    for (int32_t j = 0; j < s->n_in; ++j) slot->in[j].data = s->in[j] >= 0 ? c->data[s->in[j]] : NULL;
    for (int32_t j = 0; j < s->n_out; ++j) slot->out[j].data = c->data[s->out[j]];
    struct timespec t0, t1;
    if (s->timeout_ms > 0) clock_gettime(CLOCK_MONOTONIC, &t0);
    int status = call(&s->call, slot, &slot->services, stream);
    char why[256];
    double ms = 0;
    if (s->timeout_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    }
    if (status != 0) {
        snprintf(why, sizeof why, "returned status %d (%s)", status, plk_status_name(status));
    } else if (ms > s->timeout_ms && s->timeout_ms > 0) {
        /* Measured after the call, as Python's executor does: a hung module is not stopped here. */
        status = PIPELINK_ERR_TIMEOUT;
        snprintf(why, sizeof why, "took %.1f ms, over its timeout_ms of %g; its outputs were discarded", ms, s->timeout_ms);
    } else if (s->check_finite) {
        for (int32_t j = 0; j < s->n_out && status == 0; ++j) {
            int64_t bad = 0;
            if (!device) {
                bad = plk_count_nonfinite(&slot->out[j]);
            } else {
                PipeLinkStatus counted = plk_cuda_count_nonfinite(c, &slot->out[j], stream, &bad);
                if (counted) return counted; /* the device failed: no policy rescues that */
            }
            if (bad) {
                status = PIPELINK_ERR_MODULE_CRASH;
                snprintf(why, sizeof why, "produced %lld non-finite values (NaN/Inf) in output '%s'", (long long)bad,
                         plan->tensors[s->out[j]].name);
            }
        }
    }
    if (status == 0) return PIPELINK_SUCCESS;
    PipeLinkStatus code = status > 0 && status <= 13 ? (PipeLinkStatus)status : PIPELINK_ERR_MODULE_CRASH;
    if (s->on_error == PLK_ON_ERROR_FALLBACK) {
        int fb = call(&s->fallback, slot, &slot->fallback_services, stream);
        if (fb != 0)
            return plk_fail(PIPELINK_ERR_MODULE_CRASH, "stage '%s': fallback %s failed too (status %d, %s); original "
                            "error: operator %s %s", s->id, s->fallback.op_name, fb, plk_status_name(fb), s->call.op_name, why);
        for (int32_t k = s->fallback.n_out; k < s->n_out; ++k) c->missing[s->out[k]] = 1;
        snprintf(degraded + strlen(degraded), cap - strlen(degraded), " '%s' fallback:%s (%s);", s->id,
                 s->fallback.op_name, why);
        return PIPELINK_SUCCESS;
    }
    char what[256];
    snprintf(what, sizeof what, "stage '%s' (operator %s %s)", s->id, s->call.op_name, s->op_version);
    return plk_apply_policy(plan, s, c, code, what, why, degraded, cap, device ? stream : NULL);
}

PipeLinkStatus plk_apply_policy(const Plan* plan, const Stage* s, ExecContext* c, PipeLinkStatus code, const char* what,
                                const char* why, char* degraded, size_t cap, void* stream) {
    const int device = plan->device_type == PIPELINK_DEVICE_CUDA;
    if (s->on_error == PLK_ON_ERROR_IDENTITY) {
        int32_t k = 0;
        for (int32_t j = 0; j < s->n_in && k < s->n_out; ++j) {
            if (s->in[j] < 0) continue;
            const PlanTensor *a = &plan->tensors[s->in[j]], *b = &plan->tensors[s->out[k]];
            if (a->nbytes != b->nbytes)
                return plk_fail(code, "%s %s; its on_error 'identity' cannot copy input '%s' (%llu bytes) to output "
                                "'%s' (%llu bytes)", what, why, a->name, (unsigned long long)a->nbytes, b->name,
                                (unsigned long long)b->nbytes);
            if (!device) {
                memmove(c->data[s->out[k]], c->data[s->in[j]], (size_t)a->nbytes);
            } else {
                PipeLinkStatus copied = plk_cuda_copy(c->data[s->out[k]], c->data[s->in[j]], a->nbytes, stream);
                if (copied) return copied;
            }
            ++k;
        }
        snprintf(degraded + strlen(degraded), cap - strlen(degraded), " '%s' identity (%s);", s->id, why);
        return PIPELINK_SUCCESS;
    }
    if (s->on_error == PLK_ON_ERROR_SKIP) {
        for (int32_t k = 0; k < s->n_out; ++k) c->missing[s->out[k]] = 1;
        snprintf(degraded + strlen(degraded), cap - strlen(degraded), " '%s' skipped (%s);", s->id, why);
        return PIPELINK_SUCCESS;
    }
    return plk_fail(code, "%s %s", what, why);
}

static PipeLinkStatus run_stages(const Plan* plan, ExecContext* c, const PipeLinkTensor* inputs, char* degraded, size_t cap) {
    for (int32_t i = 0; i < plan->n_stages; ++i) {
        const Stage* s = &plan->stages[i];
        if (s->kind == PLK_STAGE_RELAYOUT) {
            int32_t src = s->in[0], dst = s->out[0];
            if (c->missing[src]) { c->missing[dst] = 1; continue; }
            const PipeLinkTensor* given = NULL;
            for (int32_t k = 0; k < plan->n_inputs; ++k)
                if (plan->inputs[k] == src) given = &inputs[k];
            PipeLinkTensor view;
            if (given == NULL) { /* an intermediate: contiguous, in the arena or an output */
                plk_fill_tensor(&view, plan, src);
                view.data = c->data[src];
                given = &view;
            }
            if (s->alias_if_contiguous && is_contiguous(given)) {
                c->data[dst] = (char*)given->data + given->byte_offset;
            } else {
                if (plan->tensors[dst].storage == PLK_STORAGE_ARENA)
                    c->data[dst] = (char*)c->arena + plan->tensors[dst].offset;
                uint32_t itemsize = plan->tensors[src].dtype.bits / 8;
                strided_copy(c->data[dst], given, itemsize);
            }
            continue;
        }
        PipeLinkStatus st = plk_run_call(plan, s, c, &c->slots[i], degraded, cap, NULL);
        if (st) return st;
    }
    return PIPELINK_SUCCESS;
}

/* A device pointer labelled CPU would crash the module that reads it: refused when the driver is open (one
 * cuPointerGetAttribute; nothing when it is not). */
static PipeLinkStatus check_host_memory(const PipeLinkTensor* t, const PlanTensor* want, const char* role, int32_t index) {
    if (!plk_cuda_is_device_memory((const char*)t->data + t->byte_offset)) return PIPELINK_SUCCESS;
    return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "%s %d ('%s') at %p is CUDA device memory, but this CPU plan "
                    "reads host memory; copy it to the host (or pipeLinkSetMemoryAllocator(PIPELINK_ALLOCATOR_HOST) "
                    "before pipeLinkMalloc), or run a CUDA plan", role, index, want->name, t->data);
}

PipeLinkStatus plk_pipeline_execute(Pipeline* p, const PipeLinkTensor* inputs, PipeLinkTensor* outputs) {
    const Plan* plan = &p->plan;
    PipeLinkStatus st;
    for (int32_t i = 0; i < plan->n_inputs; ++i)
        if ((st = plk_check_tensor(&inputs[i], &plan->tensors[plan->inputs[i]], "input", i, plan->read_in_place[plan->inputs[i]], PIPELINK_DEVICE_CPU)) ||
            (st = check_host_memory(&inputs[i], &plan->tensors[plan->inputs[i]], "input", i)))
            return st;
    for (int32_t i = 0; i < plan->n_outputs; ++i) {
        if (outputs[i].data == NULL) continue;
        if ((st = plk_check_tensor(&outputs[i], &plan->tensors[plan->outputs[i]], "output", i, 1, PIPELINK_DEVICE_CPU)) ||
            (st = check_host_memory(&outputs[i], &plan->tensors[plan->outputs[i]], "output", i)))
            return st;
    }
    if ((st = plk_check_overlaps(plan, inputs, outputs))) return st;
    st = PIPELINK_SUCCESS;
    ExecContext* c = plk_take_context(p, 0, &st);
    if (c == NULL) return st;
    memset(c->missing, 0, (size_t)plan->n_tensors);
    uint8_t* allocated = c->allocated;
    memset(allocated, 0, (size_t)plan->n_outputs);
    for (int32_t i = 0; i < plan->n_inputs; ++i)
        c->data[plan->inputs[i]] = (char*)inputs[i].data + inputs[i].byte_offset;
    for (int32_t i = 0; i < plan->n_outputs && !st; ++i) {
        const PlanTensor* t = &plan->tensors[plan->outputs[i]];
        if (outputs[i].data == NULL) {
            void* mem = NULL;
            if ((st = plk_pool_malloc_host(&mem, t->nbytes ? (size_t)t->nbytes : 1))) break;
            allocated[i] = 1;
            c->data[plan->outputs[i]] = mem;
        } else {
            c->data[plan->outputs[i]] = (char*)outputs[i].data + outputs[i].byte_offset;
        }
    }
    char degraded[1024];
    degraded[0] = '\0'; /* not zero-filled: this is the hot path */
    if (!st) st = run_stages(plan, c, inputs, degraded, sizeof degraded);
    /* Outputs a skip left missing fail the run; those made are still returned (the caller frees them). */
    const PipeLinkStatus lost = st ? PIPELINK_SUCCESS : plk_missing_outputs(plan, c, degraded);
    for (int32_t i = 0; i < plan->n_outputs; ++i) {
        if (!allocated[i]) continue;
        const PlanTensor* t = &plan->tensors[plan->outputs[i]];
        if (st || c->missing[plan->outputs[i]]) {
            plk_pool_release(c->data[plan->outputs[i]]);
            continue;
        }
        PipeLinkTensor* o = &outputs[i];
        o->data = c->data[plan->outputs[i]];
        o->device.device_type = PIPELINK_DEVICE_CPU, o->device.device_id = 0;
        o->ndim = t->ndim, o->dtype = t->dtype, o->shape = t->shape, o->strides = NULL, o->byte_offset = 0;
    }
    plk_give_context(p, c);
    if (st) return st;
    if (lost) return lost;
    if (degraded[0]) {
        plk_ok();
        plk_fail(PIPELINK_SUCCESS, "run degraded:%s", degraded); /* the message, with a success status */
        return PIPELINK_SUCCESS;
    }
    return plk_ok();
}
