/* _hotpath.c - run()'s common case in C: inputs matched to a compiled plan, outputs from the pool, one call
 * into the native core (runtime/native_path.py owns everything else and documents the split).
 *
 * A Runner belongs to one NativeRunner. For each run it reads the inputs (pl.Tensor, PyTorch tensors, NumPy
 * arrays on the CPU), finds the plan compiled for their shapes and dtypes, takes the outputs' blocks from the
 * CUDA backend's pool (backends/cuda/_pool.c) or asks Python for host arrays, and calls the core's
 * plk_execute_joined with the GIL released. Whatever it does not know - another input type or device, a
 * signature with no plan yet, a stream being captured, a run the core refused - it answers None without
 * side effects the caller can see, and the Python path runs it (and says why). It never runs a stage itself,
 * and never allocates anything but the outputs and the returned dict.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "pipelink.h"

#define MAX_PORTS 64
#define MAX_DIMS 32
#define DTYPE_CACHE 32

/* An output pl.Tensor is built here as Tensor._trusted builds it (its __slots__ set, no __init__), without
 * the Python call; the slots' order is make_tensor's. */
#define N_SLOTS 8
static const char* const SLOT_NAMES[N_SLOTS] = {"ptr", "shape", "strides", "dtype", "device", "_owner", "_array", "_contig"};

typedef int32_t (*CapturingFn)(void*); /* plk_stream_capturing */
typedef PipeLinkStatus (*ExecuteFn)(void*, const PipeLinkTensor*, int32_t, PipeLinkTensor*, int32_t, void*, void*,
                                    int32_t*, int32_t*);
typedef struct { /* backends/cuda/_pool.c's capsule "pipelink.backends.cuda._pool.api" */
    PyObject* (*acquire)(PyObject* pool, long long nbytes, unsigned long long stream_tag);
    unsigned long long (*ptr_of)(PyObject* block);
    unsigned long long (*stream_tag)(unsigned long long handle);
} PoolAPI;

typedef struct {
    int32_t ndim;
    uint8_t code, bits;
    int64_t shape[MAX_DIMS];
} Sig;

typedef struct {
    void* handle;
    int32_t n_in, n_out;
    Sig ins[MAX_PORTS], outs[MAX_PORTS];
    PyObject* out_name[MAX_PORTS];    /* str */
    PyObject* out_shape[MAX_PORTS];   /* tuple of int */
    PyObject* out_strides[MAX_PORTS]; /* tuple of int */
    PyObject* out_dtype[MAX_PORTS];   /* pl DType */
    long long out_nbytes[MAX_PORTS];
    PyObject* out_static[MAX_PORTS]; /* static_outputs: the pl.Tensor every run writes and returns; else NULL */
    uintptr_t out_static_ptr[MAX_PORTS];
    PyObject* text; /* the signature, for last_report */
} Plan;

typedef struct {
    PyObject_HEAD
    int32_t kind, device_id; /* DLPack device type (1 cpu, 2 cuda) and index */
    PyObject* device;        /* "cpu" | "cuda:N" */
    PyObject* names;         /* tuple of input names, the plan's order */
    Plan** plans;
    int n_plans;
    ExecuteFn execute;
    CapturingFn capturing; /* CUDA: is a caller's stream being captured (asked before output blocks are taken) */
    PyObject* tensor_type; /* pl.Tensor */
    PyObject* trusted;     /* pl.Tensor._trusted */
    PyObject* slots[N_SLOTS]; /* pl.Tensor's slot descriptors (SLOT_NAMES), or all NULL: outputs via _trusted */
    PyObject* sink;        /* the pipeline: its _last_report */
    PyObject* pool;        /* CUDA: the backend's BinnedPool */
    const PoolAPI* pool_api;
    PyObject* host_output;  /* CPU: callable(shape, dtype, strides) -> (Tensor, pointer) */
    PyObject* ndarray_type; /* numpy.ndarray */
    uintptr_t main_stream;  /* CUDA: the backend's main stream (runs without PyTorch tensors go there) */
    PyObject* main_handle;  /* ... as the object `finish` takes */
    PyObject* finish;       /* callable(main_handle, keepalive): holds pl.Tensor inputs until the run is done */
    PyObject* torch_type, *torch_dtypes, *torch_stream; /* torch.Tensor, {torch.dtype: DType}, raw stream query */
    struct { PyObject* dtype; uint8_t code, bits; } dtypes[DTYPE_CACHE];
    int n_dtypes;
    long active;
    int closed;
} Runner;

static PyObject *s_ptr, *s_shape, *s_dtype, *s_device, *s_contig, *s_is_contiguous, *s_dl_code, *s_bits, *s_is_cuda,
    *s_get_device, *s_data_ptr, *s_last_report;

/* (code, bits) of a pl DType, cached by identity (DTypes are the dtype table's singletons). */
static int dtype_codes(Runner* r, PyObject* dtype, uint8_t* code, uint8_t* bits) {
    for (int i = 0; i < r->n_dtypes; ++i)
        if (r->dtypes[i].dtype == dtype) return *code = r->dtypes[i].code, *bits = r->dtypes[i].bits, 0;
    PyObject *c = PyObject_GetAttr(dtype, s_dl_code), *b = c ? PyObject_GetAttr(dtype, s_bits) : NULL;
    long cv = c ? PyLong_AsLong(c) : -1, bv = b ? PyLong_AsLong(b) : -1;
    Py_XDECREF(c), Py_XDECREF(b);
    if (cv < 0 || bv < 0) return PyErr_Clear(), -1;
    *code = (uint8_t)cv, *bits = (uint8_t)bv;
    if (r->n_dtypes < DTYPE_CACHE) {
        Py_INCREF(dtype);
        r->dtypes[r->n_dtypes].dtype = dtype, r->dtypes[r->n_dtypes].code = *code, r->dtypes[r->n_dtypes].bits = *bits;
        ++r->n_dtypes;
    }
    return 0;
}

static int shape_of(PyObject* shape, Sig* sig) {
    if (!PyTuple_Check(shape)) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(shape);
    if (n > MAX_DIMS) return -1;
    sig->ndim = (int32_t)n;
    for (Py_ssize_t d = 0; d < n; ++d) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        if (v < 0) return PyErr_Clear(), -1;
        sig->shape[d] = v;
    }
    return 0;
}

static int is_true_attr(PyObject* obj, PyObject* name, int call) {
    PyObject* v = call ? PyObject_CallMethodNoArgs(obj, name) : PyObject_GetAttr(obj, name);
    if (v == NULL) return PyErr_Clear(), -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t < 0 ? (PyErr_Clear(), -1) : t;
}

/* 0: a pl.Tensor of the runner's device, contiguous (pointer and signature read); -1: not usable here. */
static int read_pl_tensor(Runner* r, PyObject* v, uintptr_t* ptr, Sig* sig) {
    PyObject* device = PyObject_GetAttr(v, s_device);
    if (device == NULL) return PyErr_Clear(), -1;
    int same = device == r->device || PyUnicode_Compare(device, r->device) == 0;
    Py_DECREF(device);
    if (!same) return PyErr_Clear(), -1;
    PyObject* contig = PyObject_GetAttr(v, s_contig);
    int known = contig == Py_True;
    Py_XDECREF(contig);
    PyErr_Clear();
    if (!known && is_true_attr(v, s_is_contiguous, 0) != 1) return -1;
    PyObject *p = PyObject_GetAttr(v, s_ptr), *shape = p ? PyObject_GetAttr(v, s_shape) : NULL;
    PyObject* dtype = shape ? PyObject_GetAttr(v, s_dtype) : NULL;
    int bad = dtype == NULL || shape_of(shape, sig) != 0 || dtype_codes(r, dtype, &sig->code, &sig->bits) != 0;
    if (!bad) *ptr = (uintptr_t)PyLong_AsUnsignedLongLong(p), bad = PyErr_Occurred() != NULL;
    Py_XDECREF(p), Py_XDECREF(shape), Py_XDECREF(dtype);
    return bad ? (PyErr_Clear(), -1) : 0;
}

static int read_torch_tensor(Runner* r, PyObject* v, uintptr_t* ptr, Sig* sig) {
    int cuda = is_true_attr(v, s_is_cuda, 0);
    if (cuda != (r->kind == PIPELINK_DEVICE_CUDA)) return -1;
    if (cuda) {
        PyObject* dev = PyObject_CallMethodNoArgs(v, s_get_device);
        long index = dev ? PyLong_AsLong(dev) : -1;
        Py_XDECREF(dev);
        if (index != r->device_id) return PyErr_Clear(), -1;
    }
    if (is_true_attr(v, s_is_contiguous, 1) != 1) return -1;
    PyObject* tdtype = PyObject_GetAttr(v, s_dtype);
    PyObject* dtype = tdtype ? PyDict_GetItemWithError(r->torch_dtypes, tdtype) : NULL; /* borrowed */
    Py_XDECREF(tdtype);
    if (dtype == NULL || dtype_codes(r, dtype, &sig->code, &sig->bits) != 0) return PyErr_Clear(), -1;
    PyObject* shape = PyObject_GetAttr(v, s_shape); /* torch.Size: a tuple */
    int bad = shape == NULL || shape_of(shape, sig) != 0;
    Py_XDECREF(shape);
    if (bad) return PyErr_Clear(), -1;
    PyObject* p = PyObject_CallMethodNoArgs(v, s_data_ptr);
    *ptr = p ? (uintptr_t)PyLong_AsUnsignedLongLong(p) : 0;
    Py_XDECREF(p);
    return PyErr_Occurred() ? (PyErr_Clear(), -1) : 0;
}

/* A C-contiguous NumPy array (CPU plans), read through the buffer protocol. */
static int read_ndarray(Runner* r, PyObject* v, uintptr_t* ptr, Sig* sig) {
    Py_buffer view;
    if (PyObject_GetBuffer(v, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return PyErr_Clear(), -1;
    const char* f = view.format ? view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') ++f;
    int ok = f[0] != '\0' && f[1] == '\0' && view.ndim <= MAX_DIMS;
    uint8_t code = 0, bits = (uint8_t)(view.itemsize * 8);
    switch (ok ? f[0] : 0) {
        case '?': code = PIPELINK_DL_BOOL; break;
        case 'b': case 'h': case 'i': case 'l': case 'q': code = PIPELINK_DL_INT; break;
        case 'B': case 'H': case 'I': case 'L': case 'Q': code = PIPELINK_DL_UINT; break;
        case 'e': case 'f': case 'd': code = PIPELINK_DL_FLOAT; break;
        default: ok = 0;
    }
    if (ok) {
        sig->ndim = view.ndim, sig->code = code, sig->bits = bits;
        for (int d = 0; d < view.ndim; ++d) sig->shape[d] = view.shape[d];
        *ptr = (uintptr_t)view.buf;
    }
    PyBuffer_Release(&view);
    return ok ? 0 : -1;
}

static int same_sig(const Sig* a, const Sig* b) {
    if (a->ndim != b->ndim || a->code != b->code || a->bits != b->bits) return 0;
    return memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fill(PipeLinkTensor* t, const Sig* sig, uintptr_t ptr, int32_t kind, int32_t device_id) {
    t->data = (void*)ptr;
    t->device.device_type = kind, t->device.device_id = device_id;
    t->ndim = sig->ndim, t->shape = (int64_t*)sig->shape, t->strides = NULL, t->byte_offset = 0;
    t->dtype.code = sig->code, t->dtype.bits = sig->bits, t->dtype.lanes = 1;
}

static PyObject* run_values(Runner* r, PyObject** values, Py_ssize_t n_in);

/* A pl.Tensor of (ptr, shape, dtype, device, strides, owner, contiguous): _trusted's arguments. */
static PyObject* make_tensor(Runner* r, PyObject* const* a) {
    if (r->slots[0] == NULL) return PyObject_Vectorcall(r->trusted, a, 7 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    PyTypeObject* type = (PyTypeObject*)r->tensor_type;
    PyObject* t = type->tp_alloc(type, 0);
    PyObject* values[N_SLOTS] = {a[0], a[1], a[4], a[2], a[3], a[5], Py_None, a[6]};
    for (int i = 0; t != NULL && i < N_SLOTS; ++i)
        if (Py_TYPE(r->slots[i])->tp_descr_set(r->slots[i], t, values[i]) != 0) Py_CLEAR(t);
    return t;
}

/* The body of Runner.run, counted in r->active from before it reads a plan until it returns: the Python
 * calls inside (a PyTorch stream query, Tensor._trusted) may let another thread close the runner, which
 * then waits for `active` to drop before it frees the plans. The inputs are held for the whole call:
 * reading them may run Python code (a tensor subclass's attributes), which may change the caller's dict. */
static PyObject* run(Runner* r, PyObject* given) {
    if (!PyDict_Check(given)) Py_RETURN_NONE;
    const Py_ssize_t n_in = PyTuple_GET_SIZE(r->names);
    if (PyDict_GET_SIZE(given) != n_in || n_in > MAX_PORTS) Py_RETURN_NONE;
    PyObject* values[MAX_PORTS];
    Py_ssize_t held = 0;
    for (; held < n_in; ++held) {
        PyObject* v = PyDict_GetItemWithError(given, PyTuple_GET_ITEM(r->names, held)); /* borrowed */
        if (v == NULL) break;
        values[held] = Py_NewRef(v);
    }
    PyObject* result = held == n_in ? run_values(r, values, n_in) : (PyErr_Clear(), Py_NewRef(Py_None));
    for (Py_ssize_t i = 0; i < held; ++i) Py_DECREF(values[i]);
    return result;
}

static PyObject* run_values(Runner* r, PyObject** values, Py_ssize_t n_in) {
    const double t0 = now_s();
    Sig sigs[MAX_PORTS];
    uintptr_t ptrs[MAX_PORTS];
    int n_torch = 0;
    for (Py_ssize_t i = 0; i < n_in; ++i) {
        PyObject* v = values[i];
        int rc = -1;
        if (Py_TYPE(v) == (PyTypeObject*)r->tensor_type) rc = read_pl_tensor(r, v, &ptrs[i], &sigs[i]);
        else if (r->torch_type != NULL && PyObject_TypeCheck(v, (PyTypeObject*)r->torch_type))
            rc = read_torch_tensor(r, v, &ptrs[i], &sigs[i]), n_torch += rc == 0;
        else if (r->kind == PIPELINK_DEVICE_CPU && r->ndarray_type != NULL && Py_TYPE(v) == (PyTypeObject*)r->ndarray_type)
            rc = read_ndarray(r, v, &ptrs[i], &sigs[i]);
        if (rc != 0) Py_RETURN_NONE;
    }
    Plan* plan = NULL;
    for (int k = 0; k < r->n_plans && plan == NULL; ++k) {
        Plan* p = r->plans[k];
        int hit = 1;
        for (Py_ssize_t i = 0; i < n_in && hit; ++i) hit = same_sig(&p->ins[i], &sigs[i]);
        if (hit) plan = p;
    }
    if (plan == NULL) Py_RETURN_NONE; /* a new signature: Python compiles it */
    uintptr_t stream = 0, join = 0;
    int keep = 0;
    if (r->kind == PIPELINK_DEVICE_CUDA) {
        if (n_torch > 0 && n_torch < n_in) Py_RETURN_NONE; /* mixed: the Python path orders both */
        if (n_torch > 0) { /* PyTorch's current stream, and our main stream joins it after the run */
            PyObject* s = PyObject_CallFunction(r->torch_stream, "i", (int)r->device_id);
            stream = s ? (uintptr_t)PyLong_AsUnsignedLongLong(s) : 0;
            Py_XDECREF(s);
            if (PyErr_Occurred()) return PyErr_Clear(), Py_NewRef(Py_None);
            if (stream != r->main_stream) join = r->main_stream;
            /* A capture allocates nothing: the pool would take a new block for the capturing stream (its first
             * use), which invalidates the capture. The Python path records the run with out= buffers, or
             * refuses it. Our main stream is never captured by anyone else. */
            if (stream != r->main_stream && plan->n_out > 0 && plan->out_static[0] == NULL && r->capturing((void*)stream) != 0)
                Py_RETURN_NONE;
        } else {
            stream = r->main_stream;
            keep = n_in > 0; /* pl.Tensor inputs: held until the run is done (their blocks) */
        }
    }
    PipeLinkTensor ins[MAX_PORTS], outs[MAX_PORTS];
    for (Py_ssize_t i = 0; i < n_in; ++i) fill(&ins[i], &sigs[i], ptrs[i], r->kind, r->device_id);
    PyObject* made[MAX_PORTS] = {NULL};
    PyObject* result = NULL;
    int32_t n_out = plan->n_out;
    for (int32_t j = 0; j < n_out; ++j) {
        uintptr_t ptr = 0;
        if (plan->out_static[j] != NULL) {
            ptr = plan->out_static_ptr[j];
            made[j] = Py_NewRef(plan->out_static[j]);
        } else if (r->kind == PIPELINK_DEVICE_CUDA) {
            /* cached for the run's stream (pool.py): tag 0 is the backend's main stream */
            unsigned long long tag = stream == r->main_stream ? 0 : r->pool_api->stream_tag(stream);
            PyObject* block = r->pool_api->acquire(r->pool, plan->out_nbytes[j], tag);
            if (block == NULL) goto fail; /* out of memory: the Python path raises it with its context */
            ptr = (uintptr_t)r->pool_api->ptr_of(block);
            PyObject* args[] = {NULL, PyLong_FromUnsignedLongLong(ptr), plan->out_shape[j], plan->out_dtype[j], r->device,
                                plan->out_strides[j], block, Py_True};
            made[j] = args[1] ? make_tensor(r, args + 1) : NULL;
            Py_XDECREF(args[1]);
            Py_DECREF(block);
        } else {
            PyObject* got = PyObject_CallFunctionObjArgs(r->host_output, plan->out_shape[j], plan->out_dtype[j],
                                                         plan->out_strides[j], NULL);
            if (got != NULL && PyTuple_Check(got) && PyTuple_GET_SIZE(got) == 2) {
                ptr = (uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(got, 1));
                if (!PyErr_Occurred()) made[j] = Py_NewRef(PyTuple_GET_ITEM(got, 0));
            }
            Py_XDECREF(got);
        }
        if (made[j] == NULL) goto fail;
        fill(&outs[j], &plan->outs[j], ptr, r->kind, r->device_id);
    }
    int32_t capturing = 0, replayed = 0;
    PipeLinkStatus st;
    Py_BEGIN_ALLOW_THREADS
    st = r->execute(plan->handle, ins, (int32_t)n_in, outs, n_out, (void*)stream, (void*)join,
                    r->kind == PIPELINK_DEVICE_CUDA ? &capturing : NULL, &replayed);
    Py_END_ALLOW_THREADS
    if (st != PIPELINK_SUCCESS || capturing) goto fail; /* refused, failed, or inside a capture: Python's */
    if (keep) { /* the inputs themselves, not the caller's dict (which it may refill before the run ends) */
        PyObject* held = PyTuple_New(n_in);
        for (Py_ssize_t i = 0; held != NULL && i < n_in; ++i) PyTuple_SET_ITEM(held, i, Py_NewRef(values[i]));
        PyObject* done = held ? PyObject_CallFunctionObjArgs(r->finish, r->main_handle, held, NULL) : NULL;
        Py_XDECREF(held);
        if (done == NULL) goto fail;
        Py_DECREF(done);
    }
    result = PyDict_New();
    for (int32_t j = 0; result != NULL && j < n_out; ++j)
        if (PyDict_SetItem(result, plan->out_name[j], made[j]) != 0) Py_CLEAR(result);
    for (int32_t j = 0; j < n_out; ++j) Py_XDECREF(made[j]);
    if (result == NULL) return NULL;
    PyObject* report = Py_BuildValue("(OdO)", plan->text, now_s() - t0, replayed ? Py_True : Py_False);
    if (report == NULL || PyObject_SetAttr(r->sink, s_last_report, report) != 0) Py_CLEAR(result);
    Py_XDECREF(report);
    return result;
fail:
    for (int32_t j = 0; j < n_out; ++j) Py_XDECREF(made[j]);
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* Runner.run(given) -> {name: Tensor}, or None: the Python path runs it. */
static PyObject* Runner_run(Runner* r, PyObject* given) {
    if (r->closed) Py_RETURN_NONE;
    ++r->active;
    PyObject* result = run(r, given);
    --r->active;
    return result;
}

static int sig_from(PyObject* item, Sig* sig) { /* (shape tuple, code, bits) */
    PyObject* shape;
    int code, bits;
    if (!PyArg_ParseTuple(item, "Oii", &shape, &code, &bits)) return -1;
    if (shape_of(shape, sig) != 0) return PyErr_SetString(PyExc_ValueError, "a shape must be a tuple of ints >= 0"), -1;
    sig->code = (uint8_t)code, sig->bits = (uint8_t)bits;
    return 0;
}

static void plan_free(Plan* p) {
    for (int32_t j = 0; j < p->n_out; ++j)
        Py_XDECREF(p->out_name[j]), Py_XDECREF(p->out_shape[j]), Py_XDECREF(p->out_strides[j]), Py_XDECREF(p->out_dtype[j]),
            Py_XDECREF(p->out_static[j]);
    Py_XDECREF(p->text);
    PyMem_Free(p);
}

/* add_plan(handle, inputs, outputs, text, static=None): inputs ((shape, code, bits), ...) in the names' order;
 * outputs ((name, shape, strides, DType, code, bits, nbytes), ...) in the plan's order; static, for
 * static_outputs, the pl.Tensor of each output that every run writes and returns. */
static PyObject* Runner_add_plan(Runner* r, PyObject* args) {
    unsigned long long handle;
    PyObject *ins, *outs, *text, *statics = Py_None;
    if (!PyArg_ParseTuple(args, "KO!O!U|O", &handle, &PyTuple_Type, &ins, &PyTuple_Type, &outs, &text, &statics))
        return NULL;
    if (statics != Py_None && (!PyTuple_Check(statics) || PyTuple_GET_SIZE(statics) != PyTuple_GET_SIZE(outs)))
        return PyErr_SetString(PyExc_ValueError, "static must be None or one pl.Tensor per output"), NULL;
    if (PyTuple_GET_SIZE(ins) != PyTuple_GET_SIZE(r->names) || PyTuple_GET_SIZE(outs) > MAX_PORTS)
        return PyErr_Format(PyExc_ValueError, "a plan of %zd inputs (the runner takes %zd) and %zd outputs (at most %d)",
                            PyTuple_GET_SIZE(ins), PyTuple_GET_SIZE(r->names), PyTuple_GET_SIZE(outs), MAX_PORTS);
    Plan* p = PyMem_Calloc(1, sizeof *p);
    Plan** grown = p ? PyMem_Realloc(r->plans, (size_t)(r->n_plans + 1) * sizeof *grown) : NULL;
    if (grown == NULL) return PyMem_Free(p), PyErr_NoMemory();
    r->plans = grown;
    p->handle = (void*)(uintptr_t)handle, p->n_in = (int32_t)PyTuple_GET_SIZE(ins);
    for (int32_t i = 0; i < p->n_in; ++i)
        if (sig_from(PyTuple_GET_ITEM(ins, i), &p->ins[i]) != 0) return plan_free(p), NULL;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(outs); ++j) {
        PyObject *name, *shape, *strides, *dtype;
        int code, bits;
        long long nbytes;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(outs, j), "UO!O!OiiL", &name, &PyTuple_Type, &shape, &PyTuple_Type,
                              &strides, &dtype, &code, &bits, &nbytes) ||
            shape_of(shape, &p->outs[j]) != 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "an output shape must be a tuple of ints >= 0");
            return plan_free(p), NULL;
        }
        p->outs[j].code = (uint8_t)code, p->outs[j].bits = (uint8_t)bits;
        p->out_name[j] = Py_NewRef(name), p->out_shape[j] = Py_NewRef(shape), p->out_strides[j] = Py_NewRef(strides);
        p->out_dtype[j] = Py_NewRef(dtype), p->out_nbytes[j] = nbytes, p->n_out = (int32_t)j + 1;
        if (statics != Py_None) {
            PyObject* t = PyTuple_GET_ITEM(statics, j);
            PyObject* ptr = Py_TYPE(t) == (PyTypeObject*)r->tensor_type ? PyObject_GetAttr(t, s_ptr) : NULL;
            p->out_static_ptr[j] = ptr ? (uintptr_t)PyLong_AsUnsignedLongLong(ptr) : 0;
            Py_XDECREF(ptr);
            if (ptr == NULL || PyErr_Occurred()) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a static output must be a pl.Tensor");
                return plan_free(p), NULL;
            }
            p->out_static[j] = Py_NewRef(t);
        }
    }
    p->text = Py_NewRef(text);
    r->plans[r->n_plans++] = p;
    Py_RETURN_NONE;
}

static void drop_plans(Runner* r) {
    for (int k = 0; k < r->n_plans; ++k) plan_free(r->plans[k]);
    PyMem_Free(r->plans);
    r->plans = NULL, r->n_plans = 0;
}

static PyObject* Runner_drop_plans(Runner* r, PyObject* unused) {
    if (r->active) return PyErr_SetString(PyExc_RuntimeError, "runs are inside the core: close the runner first"), NULL;
    drop_plans(r);
    Py_RETURN_NONE;
}

/* set_torch(torch.Tensor, {torch.dtype: DType}, torch._C._cuda_getCurrentRawStream or None) */
static PyObject* Runner_set_torch(Runner* r, PyObject* args) {
    PyObject *type, *dtypes, *stream;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyType_Type, &type, &PyDict_Type, &dtypes, &stream)) return NULL;
    Py_XSETREF(r->torch_type, Py_NewRef(type));
    Py_XSETREF(r->torch_dtypes, Py_NewRef(dtypes));
    Py_XSETREF(r->torch_stream, Py_NewRef(stream));
    Py_RETURN_NONE;
}

static int Runner_init(Runner* r, PyObject* args, PyObject* kwargs) {
    static char* kw[] = {"names", "kind", "device_id", "device", "execute", "tensor_type", "sink", "pool", "main_stream",
                         "main_handle", "finish", "host_output", "ndarray_type", "capturing", NULL};
    PyObject *names, *device, *tensor_type, *sink, *pool = Py_None, *main_handle = Py_None, *finish = Py_None;
    PyObject *host_output = Py_None, *ndarray_type = Py_None;
    int kind, device_id;
    unsigned long long execute, main_stream = 0, capturing = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!iiUKOO|$OKOOOOK", kw, &PyTuple_Type, &names, &kind, &device_id,
                                     &device, &execute, &tensor_type, &sink, &pool, &main_stream, &main_handle, &finish,
                                     &host_output, &ndarray_type, &capturing))
        return -1;
    if (PyTuple_GET_SIZE(names) > MAX_PORTS) return PyErr_Format(PyExc_ValueError, "at most %d inputs", MAX_PORTS), -1;
    if (execute == 0 || !PyType_Check(tensor_type)) return PyErr_SetString(PyExc_ValueError, "execute and tensor_type"), -1;
    if (kind == PIPELINK_DEVICE_CUDA) {
        PyObject* mod = PyImport_ImportModule("pipelink.backends.cuda._pool");
        PyObject* capsule = mod ? PyObject_GetAttrString(mod, "api") : NULL;
        Py_XDECREF(mod);
        r->pool_api = capsule ? PyCapsule_GetPointer(capsule, "pipelink.backends.cuda._pool.api") : NULL;
        Py_XDECREF(capsule);
        if (r->pool_api == NULL) return -1;
        if (pool == Py_None || finish == Py_None || capturing == 0)
            return PyErr_SetString(PyExc_ValueError, "a CUDA runner needs pool=, finish= and capturing="), -1;
    } else if (kind == PIPELINK_DEVICE_CPU) {
        if (host_output == Py_None) return PyErr_SetString(PyExc_ValueError, "a CPU runner needs host_output="), -1;
    } else {
        return PyErr_Format(PyExc_ValueError, "kind must be 1 (CPU) or 2 (CUDA), got %d", kind), -1;
    }
    PyObject* trusted = PyObject_GetAttrString(tensor_type, "_trusted");
    if (trusted == NULL) return -1;
    for (int i = 0; i < N_SLOTS; ++i) Py_CLEAR(r->slots[i]);
    int slotted = 1; /* every name a member descriptor (a __slots__ entry) of the type itself */
    for (int i = 0; i < N_SLOTS && slotted; ++i) {
        PyObject* d = PyDict_GetItemString(((PyTypeObject*)tensor_type)->tp_dict, SLOT_NAMES[i]); /* borrowed */
        slotted = d != NULL && Py_TYPE(d) == &PyMemberDescr_Type;
        r->slots[i] = slotted ? Py_NewRef(d) : NULL;
    }
    for (int i = 0; i < N_SLOTS && !slotted; ++i) Py_CLEAR(r->slots[i]);
    r->kind = kind, r->device_id = device_id, r->execute = (ExecuteFn)(uintptr_t)execute;
    r->capturing = (CapturingFn)(uintptr_t)capturing;
    r->main_stream = (uintptr_t)main_stream;
    Py_XSETREF(r->names, Py_NewRef(names));
    Py_XSETREF(r->device, Py_NewRef(device));
    Py_XSETREF(r->tensor_type, Py_NewRef(tensor_type));
    Py_XSETREF(r->trusted, trusted);
    Py_XSETREF(r->sink, Py_NewRef(sink));
    Py_XSETREF(r->pool, Py_NewRef(pool));
    Py_XSETREF(r->main_handle, Py_NewRef(main_handle));
    Py_XSETREF(r->finish, Py_NewRef(finish));
    Py_XSETREF(r->host_output, Py_NewRef(host_output));
    Py_XSETREF(r->ndarray_type, ndarray_type == Py_None ? NULL : Py_NewRef(ndarray_type));
    return 0;
}

static int Runner_traverse(Runner* r, visitproc visit, void* arg) {
    Py_VISIT(r->sink);
    Py_VISIT(r->pool);
    Py_VISIT(r->finish);
    Py_VISIT(r->host_output);
    Py_VISIT(r->main_handle);
    Py_VISIT(r->trusted);
    for (int i = 0; i < N_SLOTS; ++i) Py_VISIT(r->slots[i]);
    return 0;
}

static int Runner_clear(Runner* r) {
    Py_CLEAR(r->names); Py_CLEAR(r->device); Py_CLEAR(r->tensor_type); Py_CLEAR(r->trusted); Py_CLEAR(r->sink);
    Py_CLEAR(r->pool); Py_CLEAR(r->main_handle); Py_CLEAR(r->finish); Py_CLEAR(r->host_output);
    Py_CLEAR(r->ndarray_type); Py_CLEAR(r->torch_type); Py_CLEAR(r->torch_dtypes); Py_CLEAR(r->torch_stream);
    for (int i = 0; i < r->n_dtypes; ++i) Py_CLEAR(r->dtypes[i].dtype);
    for (int i = 0; i < N_SLOTS; ++i) Py_CLEAR(r->slots[i]);
    r->n_dtypes = 0;
    return 0;
}

static void Runner_dealloc(Runner* r) {
    PyObject_GC_UnTrack(r);
    drop_plans(r);
    Runner_clear(r);
    Py_TYPE(r)->tp_free((PyObject*)r);
}

/* _make_tensor(ptr, shape, dtype, device, strides, owner, contiguous): the outputs' constructor, for tests. */
static PyObject* Runner_make_tensor(Runner* r, PyObject* const* args, Py_ssize_t n) {
    if (n != 7) return PyErr_SetString(PyExc_TypeError, "_make_tensor takes Tensor._trusted's 7 arguments"), NULL;
    return make_tensor(r, args);
}

static PyMethodDef Runner_methods[] = {
    {"_make_tensor", (PyCFunction)(void (*)(void))Runner_make_tensor, METH_FASTCALL,
     "_make_tensor(ptr, shape, dtype, device, strides, owner, contiguous): an output pl.Tensor, as run() makes it."},
    {"run", (PyCFunction)Runner_run, METH_O, "run(given) -> {name: Tensor}, or None: the Python path runs it."},
    {"add_plan", (PyCFunction)Runner_add_plan, METH_VARARGS, "add_plan(handle, inputs, outputs, text, static=None)"},
    {"drop_plans", (PyCFunction)Runner_drop_plans, METH_NOARGS, "Forget every plan (none may be running)."},
    {"set_torch", (PyCFunction)Runner_set_torch, METH_VARARGS, "set_torch(torch.Tensor, dtypes, raw_stream)"},
    {NULL}};

static PyMemberDef Runner_members[] = {
    {"closed", T_INT, offsetof(Runner, closed), 0, "while set, run() answers None (the Python path decides)"},
    {"active", T_LONG, offsetof(Runner, active), READONLY, "runs inside the core now"},
    {"n_plans", T_INT, offsetof(Runner, n_plans), READONLY, NULL},
    {NULL}};

static PyTypeObject RunnerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pipelink.runtime._hotpath.Runner",
    .tp_basicsize = sizeof(Runner),
    .tp_dealloc = (destructor)Runner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "run()'s common case in C, for one NativeRunner (runtime/native_path.py).",
    .tp_traverse = (traverseproc)Runner_traverse,
    .tp_clear = (inquiry)Runner_clear,
    .tp_methods = Runner_methods,
    .tp_members = Runner_members,
    .tp_init = (initproc)Runner_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hotpath", "run()'s common case in C (native_path.py).", -1};

PyMODINIT_FUNC PyInit__hotpath(void) {
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_ptr, "ptr"); INTERN(s_shape, "shape"); INTERN(s_dtype, "dtype"); INTERN(s_device, "device");
    INTERN(s_contig, "_contig"); INTERN(s_is_contiguous, "is_contiguous"); INTERN(s_dl_code, "dl_code");
    INTERN(s_bits, "bits"); INTERN(s_is_cuda, "is_cuda"); INTERN(s_get_device, "get_device");
    INTERN(s_data_ptr, "data_ptr"); INTERN(s_last_report, "_last_report");
    if (PyType_Ready(&RunnerType) < 0) return NULL;
    PyObject* m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&RunnerType);
    if (PyModule_AddObject(m, "Runner", (PyObject*)&RunnerType) != 0) return Py_DECREF(m), NULL;
    return m;
}
