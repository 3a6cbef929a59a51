/* _pool.c - the CUDA backend's binned pool of per-run blocks (pool.py documents it; this is its body).
 *
 * In C because every output of every run comes from here, on the hot path of run() (runtime/_hotpath.c
 * acquires through it too): a cached block is handed out and taken back with no Python code run. It never
 * calls CUDA itself: raw blocks come from, and go back to, two Python callables (the backend's raw allocator,
 * or a test's fake). Everything runs under the GIL; a block that dies only puts its memory back on a free
 * list (or queues a large block's raw free for the next pool call): a finalizer never re-enters the pool.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>

#define MIN_SHIFT 9  /* 512 B */
#define MAX_SHIFT 24 /* 16 MiB */
#define N_BINS (MAX_SHIFT - MIN_SHIFT + 1)
#define MAX_BIN (1LL << MAX_SHIFT)

typedef struct {
    unsigned long long ptr;
    PyObject* raw;          /* owned */
    unsigned long long tag; /* cached blocks: the stream they were last handed out for (0: the backend's) */
} Entry;

typedef struct {
    Entry* items;
    Py_ssize_t n, cap;
} EntryList;

typedef struct {
    PyObject_HEAD
    PyObject* raw_alloc;
    PyObject* raw_free;
    PyObject* on_change; /* or NULL */
    EntryList bins[N_BINS];
    EntryList large;    /* released large blocks: raw frees queued for the next pool call */
    EntryList deferred; /* raw frees held while hold_frees is set (a CUDA graph capture) */
    long long in_use_bytes, in_use_blocks, raw_bytes, base_bytes, peak_bytes, pending_delta;
    long long deferred_sizes; /* bytes in `deferred`, for raw_bytes */
    long long* deferred_size; /* per deferred entry */
    Py_ssize_t deferred_size_cap;
    int hold_frees;
} Pool;

typedef struct {
    PyObject_HEAD
    unsigned long long ptr;
    long long nbytes, size;
    PyObject* raw;
    Pool* pool;
    unsigned long long tag; /* the stream it was handed out for: it is cached for that stream alone */
    int released;
    PyObject* weakrefs;
} Block;

static PyTypeObject PoolType, BlockType;

static int push(EntryList* list, unsigned long long ptr, PyObject* raw, unsigned long long tag) {
    if (list->n == list->cap) {
        Py_ssize_t cap = list->cap ? 2 * list->cap : 8;
        Entry* items = PyMem_Realloc(list->items, (size_t)cap * sizeof *items);
        if (items == NULL) return -1;
        list->items = items, list->cap = cap;
    }
    Py_INCREF(raw);
    list->items[list->n++] = (Entry){ptr, raw, tag};
    return 0;
}

/* The tag of a stream other than the backend's main stream (whose tag is 0): its raw handle + 1, so the legacy
 * default stream (handle 0) has a tag of its own. The one definition: pool.py's stream_tag and _hotpath.c call it. */
static unsigned long long stream_tag(unsigned long long handle) { return handle + 1; }

static int bin_of(long long nbytes, long long* size) {
    long long s = 1LL << MIN_SHIFT;
    int b = 0;
    while (s < nbytes) s <<= 1, ++b;
    *size = s;
    return b;
}

/* Raw-free one block, or hold it while frees are held. Returns -1 with an exception set on failure. */
static int free_raw(Pool* p, PyObject* raw, long long size) {
    if (p->hold_frees) {
        if (p->deferred.n == p->deferred_size_cap) {
            Py_ssize_t cap = p->deferred_size_cap ? 2 * p->deferred_size_cap : 8;
            long long* sizes = PyMem_Realloc(p->deferred_size, (size_t)cap * sizeof *sizes);
            if (sizes == NULL) return PyErr_NoMemory(), -1;
            p->deferred_size = sizes, p->deferred_size_cap = cap;
        }
        p->deferred_size[p->deferred.n] = size;
        if (push(&p->deferred, 0, raw, 0) != 0) return PyErr_NoMemory(), -1;
        return 0;
    }
    p->raw_bytes -= size;
    PyObject* r = PyObject_CallOneArg(p->raw_free, raw);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* Account what died since the last call: queued large frees, the change report. */
static int drain(Pool* p) {
    while (p->large.n > 0) {
        Entry e = p->large.items[--p->large.n];
        long long size = (long long)e.ptr; /* large entries keep their size in `ptr` */
        int rc = free_raw(p, e.raw, size);
        Py_DECREF(e.raw);
        if (rc != 0) return -1;
    }
    if (p->pending_delta != 0 && p->on_change != NULL) {
        long long delta = p->pending_delta;
        p->pending_delta = 0;
        PyObject* r = PyObject_CallFunction(p->on_change, "L", delta);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    p->pending_delta = 0;
    return 0;
}

static void note_peak(Pool* p) {
    long long total = p->base_bytes + p->in_use_bytes;
    if (total > p->peak_bytes) p->peak_bytes = total;
}

/* ---- Block ---- */

static void block_release(Block* b) {
    if (b->released) return;
    b->released = 1;
    Pool* p = b->pool;
    p->in_use_bytes -= b->size, p->in_use_blocks -= 1;
    p->pending_delta -= b->size;
    if (b->nbytes <= MAX_BIN) {
        long long size;
        int bin = bin_of(b->size, &size);
        if (push(&p->bins[bin], b->ptr, b->raw, b->tag) == 0) return;
        PyErr_Clear(); /* no room to cache it: free it with the large ones */
    }
    if (push(&p->large, (unsigned long long)b->size, b->raw, 0) != 0) PyErr_Clear(); /* leaks one block: no memory */
}

static void Block_dealloc(Block* b) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (b->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject*)b);
    block_release(b);
    PyErr_Restore(type, value, tb);
    Py_XDECREF(b->raw);
    Py_XDECREF((PyObject*)b->pool);
    Py_TYPE(b)->tp_free((PyObject*)b);
}

static PyObject* Block_release(Block* b, PyObject* unused) {
    block_release(b);
    Py_RETURN_NONE;
}

static PyObject* Block_repr(Block* b) {
    return PyUnicode_FromFormat("PoolBlock(ptr=0x%llx, nbytes=%lld, size=%lld)", b->ptr, b->nbytes, b->size);
}

static PyObject* Block_get_ptr(Block* b, void* c) { return PyLong_FromUnsignedLongLong(b->ptr); }
static PyObject* Block_get_released(Block* b, void* c) { return PyBool_FromLong(b->released); }

static PyMethodDef Block_methods[] = {
    {"release", (PyCFunction)Block_release, METH_NOARGS,
     "Give the block back now (idempotent); tensors still pointing at it must not be used again."},
    {NULL}};

static PyMemberDef Block_members[] = {
    {"nbytes", T_LONGLONG, offsetof(Block, nbytes), READONLY, "what was asked"},
    {"size", T_LONGLONG, offsetof(Block, size), READONLY, "what the block holds (its bin, or its own size)"},
    {"raw", T_OBJECT, offsetof(Block, raw), READONLY, "the raw allocator's handle"},
    {"pool", T_OBJECT, offsetof(Block, pool), READONLY, NULL},
    {"stream", T_ULONGLONG, offsetof(Block, tag), READONLY, "the stream tag it was handed out for (acquire)"},
    {NULL}};

static PyGetSetDef Block_getset[] = {
    {"ptr", (getter)Block_get_ptr, NULL, "the block's device address", NULL},
    {"released", (getter)Block_get_released, NULL, "whether it went back to the pool", NULL},
    {NULL}};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pipelink.backends.cuda._pool.PoolBlock",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = (destructor)Block_dealloc,
    .tp_repr = (reprfunc)Block_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One block handed out by a BinnedPool; it goes back to the pool when it is garbage.",
    .tp_weaklistoffset = offsetof(Block, weakrefs),
    .tp_methods = Block_methods,
    .tp_members = Block_members,
    .tp_getset = Block_getset,
};

static Block* new_block(Pool* p, unsigned long long ptr, long long nbytes, long long size, PyObject* raw,
                        unsigned long long tag) {
    Block* b = PyObject_New(Block, &BlockType);
    if (b == NULL) return NULL;
    b->ptr = ptr, b->nbytes = nbytes, b->size = size, b->raw = raw, b->released = 0, b->weakrefs = NULL;
    b->tag = tag;
    Py_INCREF(p);
    b->pool = p;
    p->in_use_bytes += size, p->in_use_blocks += 1, p->pending_delta += size;
    note_peak(p);
    return b;
}

/* ---- Pool ---- */

static long long clear_cache(Pool* p, int* failed);

/* A raw block of `size` bytes: (pointer, handle) from raw_alloc; on MemoryError the cache is freed and the
 * request retried once. Returns a new reference to the handle, or NULL with an exception. */
static PyObject* raw_block(Pool* p, long long size, unsigned long long* ptr) {
    PyObject* got = PyObject_CallFunction(p->raw_alloc, "L", size);
    if (got == NULL && PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        int failed = 0;
        long long freed = clear_cache(p, &failed);
        if (failed || freed == 0) {
            if (failed) Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
            else PyErr_Restore(type, value, tb);
            return NULL;
        }
        Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
        got = PyObject_CallFunction(p->raw_alloc, "L", size);
    }
    if (got == NULL) return NULL;
    PyObject *ptr_obj = NULL, *raw = NULL;
    if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "raw_alloc must return (pointer, handle)");
        return NULL;
    }
    ptr_obj = PyTuple_GET_ITEM(got, 0), raw = PyTuple_GET_ITEM(got, 1);
    *ptr = PyLong_AsUnsignedLongLong(ptr_obj);
    if (PyErr_Occurred()) return Py_DECREF(got), NULL;
    Py_INCREF(raw);
    Py_DECREF(got);
    p->raw_bytes += size;
    return raw;
}

/* The hot path's acquire (also the method's body): a new block for work queued on stream `tag`, or NULL with an
 * exception. A cached block is reused only for the stream it was last handed out for: that stream's order puts
 * its new work after the old, which another stream's would not (the run that wrote it may still be running). */
static PyObject* pool_acquire(Pool* p, long long nbytes, unsigned long long tag) {
    if (nbytes < 0) return PyErr_Format(PyExc_ValueError, "a block size must be >= 0 (got %lld)", nbytes);
    if ((p->large.n || p->pending_delta) && drain(p) != 0) return NULL;
    long long size = nbytes;
    int bin = -1;
    if (nbytes <= MAX_BIN) {
        bin = bin_of(nbytes, &size);
        EntryList* cached = &p->bins[bin];
        Py_ssize_t i = cached->n - 1; /* the most recently released of this stream's: one stream, the last */
        while (i >= 0 && cached->items[i].tag != tag) --i;
        if (i >= 0) {
            Entry e = cached->items[i];
            cached->items[i] = cached->items[--cached->n];
            Block* b = new_block(p, e.ptr, nbytes, size, e.raw, tag); /* takes the list's reference */
            if (b == NULL) cached->items[cached->n++] = e;
            else if (p->on_change != NULL && drain(p) != 0) return Py_DECREF(b), NULL;
            return (PyObject*)b;
        }
    }
    unsigned long long ptr = 0;
    PyObject* raw = raw_block(p, size, &ptr);
    if (raw == NULL) return NULL;
    Block* b = new_block(p, ptr, nbytes, size, raw, tag);
    if (b == NULL) return Py_DECREF(raw), NULL;
    if (p->on_change != NULL && drain(p) != 0) return Py_DECREF(b), NULL;
    return (PyObject*)b;
}

static PyObject* Pool_acquire(Pool* p, PyObject* args, PyObject* kwargs) {
    static char* kw[] = {"nbytes", "stream", NULL};
    long long nbytes;
    PyObject* stream = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "L|O", kw, &nbytes, &stream)) return NULL;
    unsigned long long tag = stream != NULL ? PyLong_AsUnsignedLongLong(stream) : 0; /* a negative: OverflowError */
    if (tag == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    return pool_acquire(p, nbytes, tag);
}

/* Free every cached block (raw frees held while hold_frees is set). Returns the bytes freed. */
static long long clear_cache(Pool* p, int* failed) {
    long long freed = 0;
    for (int bin = 0; bin < N_BINS; ++bin) {
        EntryList* list = &p->bins[bin];
        long long size = 1LL << (MIN_SHIFT + bin);
        while (list->n > 0) {
            Entry e = list->items[--list->n];
            int rc = free_raw(p, e.raw, size);
            Py_DECREF(e.raw);
            if (rc != 0) return *failed = 1, freed;
            freed += size;
        }
    }
    return freed;
}

static PyObject* Pool_flush(Pool* p, PyObject* unused) {
    int held = p->hold_frees;
    p->hold_frees = 0;
    while (p->deferred.n > 0) {
        Py_ssize_t i = --p->deferred.n;
        Entry e = p->deferred.items[i];
        int rc = free_raw(p, e.raw, p->deferred_size[i]);
        Py_DECREF(e.raw);
        if (rc != 0) return p->hold_frees = held, NULL;
    }
    p->hold_frees = held;
    Py_RETURN_NONE;
}

static PyObject* Pool_clear(Pool* p, PyObject* unused) {
    if (drain(p) != 0) return NULL;
    int failed = 0;
    long long freed = clear_cache(p, &failed);
    if (failed) return NULL;
    if (!p->hold_frees) {
        PyObject* r = Pool_flush(p, NULL);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    return PyLong_FromLongLong(freed);
}

static PyObject* Pool_drain(Pool* p, PyObject* unused) {
    if (drain(p) != 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject* Pool_stats(Pool* p, PyObject* unused) {
    if (drain(p) != 0) return NULL;
    PyObject* bins = PyDict_New();
    if (bins == NULL) return NULL;
    long long cached = 0;
    for (int bin = 0; bin < N_BINS; ++bin) {
        if (p->bins[bin].n == 0) continue;
        long long size = 1LL << (MIN_SHIFT + bin);
        cached += size * p->bins[bin].n;
        PyObject *k = PyLong_FromLongLong(size), *v = PyLong_FromSsize_t(p->bins[bin].n);
        if (k == NULL || v == NULL || PyDict_SetItem(bins, k, v) != 0) {
            Py_XDECREF(k), Py_XDECREF(v), Py_DECREF(bins);
            return NULL;
        }
        Py_DECREF(k), Py_DECREF(v);
    }
    PyObject* out = Py_BuildValue("{s:L,s:L,s:L,s:L,s:N}", "in_use_bytes", p->in_use_bytes, "in_use_blocks",
                                  p->in_use_blocks, "cached_bytes", cached, "raw_bytes", p->raw_bytes, "bins", bins);
    return out;
}

static int Pool_init(Pool* p, PyObject* args, PyObject* kwargs) {
    static char* names[] = {"raw_alloc", "raw_free", "on_change", NULL};
    PyObject *alloc, *free_, *on_change = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$O", names, &alloc, &free_, &on_change)) return -1;
    Py_INCREF(alloc), Py_INCREF(free_);
    Py_XSETREF(p->raw_alloc, alloc);
    Py_XSETREF(p->raw_free, free_);
    if (on_change != Py_None) {
        Py_INCREF(on_change);
        Py_XSETREF(p->on_change, on_change);
    }
    return 0;
}

static void free_list(EntryList* list) {
    for (Py_ssize_t i = 0; i < list->n; ++i) Py_DECREF(list->items[i].raw);
    PyMem_Free(list->items);
    list->items = NULL, list->n = list->cap = 0;
}

static int Pool_traverse(Pool* p, visitproc visit, void* arg) {
    Py_VISIT(p->raw_alloc);
    Py_VISIT(p->raw_free);
    Py_VISIT(p->on_change);
    return 0;
}

static int Pool_clear_refs(Pool* p) {
    Py_CLEAR(p->raw_alloc);
    Py_CLEAR(p->raw_free);
    Py_CLEAR(p->on_change);
    return 0;
}

static void Pool_dealloc(Pool* p) {
    PyObject_GC_UnTrack(p);
    /* Blocks hold the pool: none is alive here. Cached blocks are dropped with their handles (the raw
     * allocator's objects free themselves, or the device goes away with the process). */
    for (int bin = 0; bin < N_BINS; ++bin) free_list(&p->bins[bin]);
    free_list(&p->large);
    free_list(&p->deferred);
    PyMem_Free(p->deferred_size);
    Pool_clear_refs(p);
    Py_TYPE(p)->tp_free((PyObject*)p);
}

static PyObject* Pool_get_hold(Pool* p, void* c) { return PyBool_FromLong(p->hold_frees); }
static int Pool_set_hold(Pool* p, PyObject* v, void* c) {
    int t = v == NULL ? 0 : PyObject_IsTrue(v);
    if (t < 0) return -1;
    p->hold_frees = t;
    return 0;
}
static PyObject* Pool_get_base(Pool* p, void* c) { return PyLong_FromLongLong(p->base_bytes); }
static int Pool_set_base(Pool* p, PyObject* v, void* c) {
    long long b = v == NULL ? 0 : PyLong_AsLongLong(v);
    if (b == -1 && PyErr_Occurred()) return -1;
    p->base_bytes = b;
    note_peak(p);
    return 0;
}

static PyMethodDef Pool_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))Pool_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(nbytes, stream=0): a block of at least nbytes bytes (0: a 512 B block) for work on `stream` (a tag: "
     "the raw handle of the stream, 0 for the backend's own); cached blocks are reused for their stream only."},
    {"clear", (PyCFunction)Pool_clear, METH_NOARGS,
     "Free every cached block (and the held frees unless frees are held); returns the bytes freed."},
    {"flush", (PyCFunction)Pool_flush, METH_NOARGS, "Perform the raw frees held while hold_frees was set."},
    {"drain", (PyCFunction)Pool_drain, METH_NOARGS, "Perform the queued raw frees of released large blocks."},
    {"stats", (PyCFunction)Pool_stats, METH_NOARGS,
     "in_use_bytes, in_use_blocks, cached_bytes, raw_bytes and bins (bin size -> cached blocks)."},
    {NULL}};

static PyMemberDef Pool_members[] = {
    {"in_use_bytes", T_LONGLONG, offsetof(Pool, in_use_bytes), READONLY, "bytes of the blocks handed out"},
    {"in_use_blocks", T_LONGLONG, offsetof(Pool, in_use_blocks), READONLY, NULL},
    {"raw_bytes", T_LONGLONG, offsetof(Pool, raw_bytes), READONLY, "bytes obtained from the raw allocator"},
    {"peak_bytes", T_LONGLONG, offsetof(Pool, peak_bytes), 0, "the most of base_bytes + in_use_bytes seen"},
    {NULL}};

static PyGetSetDef Pool_getset[] = {
    {"hold_frees", (getter)Pool_get_hold, (setter)Pool_set_hold, "hold raw frees (during a capture)", NULL},
    {"base_bytes", (getter)Pool_get_base, (setter)Pool_set_base,
     "bytes held beside the pool (arenas), counted into peak_bytes", NULL},
    {NULL}};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pipelink.backends.cuda._pool.BinnedPool",
    .tp_basicsize = sizeof(Pool),
    .tp_dealloc = (destructor)Pool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A caching allocator of device blocks (pool.py documents it).",
    .tp_traverse = (traverseproc)Pool_traverse,
    .tp_clear = (inquiry)Pool_clear_refs,
    .tp_methods = Pool_methods,
    .tp_members = Pool_members,
    .tp_getset = Pool_getset,
    .tp_init = (initproc)Pool_init,
    .tp_new = PyType_GenericNew,
};

/* The C entries the hot path uses (runtime/_hotpath.c), through the capsule "pipelink.backends.cuda._pool.api";
 * _hotpath.c declares the same struct. */
typedef struct {
    /* a new block for work on stream `tag` (0: the backend's), or NULL with an exception */
    PyObject* (*acquire)(PyObject* pool, long long nbytes, unsigned long long tag);
    unsigned long long (*ptr_of)(PyObject* block);
    unsigned long long (*stream_tag)(unsigned long long handle);
} PoolAPI;

static PyObject* api_acquire(PyObject* pool, long long nbytes, unsigned long long tag) {
    if (!PyObject_TypeCheck(pool, &PoolType)) return PyErr_SetString(PyExc_TypeError, "not a BinnedPool"), NULL;
    return pool_acquire((Pool*)pool, nbytes, tag);
}
static unsigned long long api_ptr_of(PyObject* block) { return ((Block*)block)->ptr; }
static const PoolAPI api = {api_acquire, api_ptr_of, stream_tag};

static PyObject* module_stream_tag(PyObject* m, PyObject* arg) {
    unsigned long long handle = PyLong_AsUnsignedLongLong(arg); /* a negative handle: OverflowError */
    if (handle == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    return PyLong_FromUnsignedLongLong(stream_tag(handle));
}

static PyMethodDef module_methods[] = {
    {"stream_tag", module_stream_tag, METH_O,
     "stream_tag(handle): the pool's tag of a stream other than the backend's main stream (whose tag is 0)."},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pool", "The CUDA backend's binned pool (pool.py).", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit__pool(void) {
    if (PyType_Ready(&PoolType) < 0 || PyType_Ready(&BlockType) < 0) return NULL;
    PyObject* m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject* capsule = PyCapsule_New((void*)&api, "pipelink.backends.cuda._pool.api", NULL);
    if (capsule == NULL || PyModule_AddObject(m, "api", capsule) != 0) return Py_XDECREF(capsule), Py_DECREF(m), NULL;
    Py_INCREF(&PoolType), Py_INCREF(&BlockType);
    if (PyModule_AddObject(m, "BinnedPool", (PyObject*)&PoolType) != 0 ||
        PyModule_AddObject(m, "PoolBlock", (PyObject*)&BlockType) != 0)
        return Py_DECREF(m), NULL;
    PyModule_AddIntConstant(m, "MIN_BIN", 1 << MIN_SHIFT);
    PyModule_AddIntConstant(m, "MAX_BIN", 1 << MAX_SHIFT);
    return m;
}
