/* pool.c - the memory pool behind pipeLinkMalloc/pipeLinkFree (CuPy's pool, simplified):
 * - a request is rounded up to a power of two (at least 256 bytes) and served from that size class's cache
 *   of freed blocks, else from the system: host memory (256-byte aligned) with PIPELINK_ALLOCATOR_HOST,
 *   device memory with PIPELINK_ALLOCATOR_ASYNC (cuMemAllocAsync on a runtime stream, synchronized) or
 *   _LEGACY (cuMemAlloc). The default is ASYNC when a CUDA device is usable, else HOST. Device blocks are
 *   cached per device (the current context's, else device 0's primary context);
 * - every live block is in a hash table, so freeing a pointer the pool never handed out is a status.
 * - device blocks of outputs of CUDA plans the runtime allocated are in the same table, so pipeLinkFree
 *   takes them back too (cuMemFree, not cached) and the stats count them.
 * One mutex guards it: it is not on pipeLinkExecute's path except for outputs the runtime allocates. */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define MIN_CLASS 8 /* 256 bytes */
#define N_CLASSES 48

typedef struct Cached { struct Cached* next; } Cached; /* lives inside a freed host block */
/* size_class -1: a device output of a CUDA plan (device_bytes); else a pool block, on device `device`
 * (its CUDA ordinal) or on the host (device -1). */
typedef struct Entry { void* ptr; int32_t size_class; int32_t device; uint64_t device_bytes; } Entry;
typedef struct DeviceBlock { void* ptr; int32_t device; } DeviceBlock;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Cached* cache[N_CLASSES];
static struct { DeviceBlock* items; size_t n, cap; } device_cache[N_CLASSES]; /* freed device blocks */
static int allocator_chosen; /* 0 until the first use or pipeLinkSetMemoryAllocator: then stats.allocator holds */
static Entry* table; /* open addressing; ptr NULL is empty, (void*)1 a tombstone */
static size_t table_cap, table_used;
static PipeLinkPoolStats stats;

#define TOMBSTONE ((void*)1)

static size_t slot_of(void* p, size_t cap) { return (size_t)(((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull) & (cap - 1); }

static int table_grow(void) {
    size_t cap = table_cap ? table_cap * 2 : 1024;
    Entry* t = calloc(cap, sizeof(Entry));
    if (t == NULL) return 0;
    for (size_t i = 0; i < table_cap; ++i) {
        if (table[i].ptr == NULL || table[i].ptr == TOMBSTONE) continue;
        size_t j = slot_of(table[i].ptr, cap);
        while (t[j].ptr != NULL) j = (j + 1) & (cap - 1);
        t[j] = table[i];
    }
    free(table);
    table = t, table_cap = cap, table_used = stats.n_allocations;
    return 1;
}

static Entry* table_find(void* p) {
    if (table_cap == 0) return NULL;
    for (size_t j = slot_of(p, table_cap), k = 0; k < table_cap; j = (j + 1) & (table_cap - 1), ++k) {
        if (table[j].ptr == p) return &table[j];
        if (table[j].ptr == NULL) return NULL;
    }
    return NULL;
}

static int table_insert(void* p, int32_t size_class, int32_t device, uint64_t device_bytes) {
    if ((table_used + 1) * 2 > table_cap && !table_grow()) return 0;
    size_t j = slot_of(p, table_cap);
    while (table[j].ptr != NULL && table[j].ptr != TOMBSTONE) j = (j + 1) & (table_cap - 1);
    if (table[j].ptr == NULL) ++table_used;
    table[j].ptr = p, table[j].size_class = size_class, table[j].device = device, table[j].device_bytes = device_bytes;
    return 1;
}

/* The allocator in effect: the caller's choice, else ASYNC where a CUDA device is usable, else HOST. */
static int32_t allocator_kind(void) {
    pthread_mutex_lock(&lock);
    int chosen = allocator_chosen;
    int32_t kind = stats.allocator;
    pthread_mutex_unlock(&lock);
    if (chosen) return kind;
    int32_t found = plk_cuda_usable() ? PIPELINK_ALLOCATOR_ASYNC : PIPELINK_ALLOCATOR_HOST; /* opens the driver once */
    pthread_mutex_lock(&lock);
    if (!allocator_chosen) allocator_chosen = 1, stats.allocator = found;
    kind = stats.allocator;
    pthread_mutex_unlock(&lock);
    return kind;
}

static int32_t size_class(size_t nbytes) {
    int32_t c = MIN_CLASS;
    while (c < N_CLASSES && ((size_t)1 << c) < nbytes) ++c;
    return c;
}

static void count_allocation(size_t size) { /* under lock */
    stats.allocated_bytes += size, ++stats.n_allocations;
    if (stats.allocated_bytes > stats.peak_bytes) stats.peak_bytes = stats.allocated_bytes;
}

/* A device block of size class c: a cached one of the same device, else a new one. */
static PipeLinkStatus device_malloc(void** ptr, int32_t c, int legacy) {
    const size_t size = (size_t)1 << c;
    int32_t device = -1;
    PipeLinkStatus st = plk_cuda_pool_device(&device);
    if (st) return st;
    void* p = NULL;
    pthread_mutex_lock(&lock);
    for (size_t i = device_cache[c].n; i-- > 0 && p == NULL;)
        if (device_cache[c].items[i].device == device) {
            p = device_cache[c].items[i].ptr;
            device_cache[c].items[i] = device_cache[c].items[--device_cache[c].n];
            stats.cached_bytes -= size, ++stats.n_reused;
        }
    pthread_mutex_unlock(&lock);
    if (p == NULL && (st = plk_cuda_pool_alloc(device, (uint64_t)size, legacy, &p)) != PIPELINK_SUCCESS) return st;
    pthread_mutex_lock(&lock);
    if (!table_insert(p, c, device, 0)) {
        pthread_mutex_unlock(&lock);
        plk_cuda_free_device((uint64_t)(uintptr_t)p);
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeLinkMalloc: the pool's table of live blocks");
    }
    count_allocation(size);
    pthread_mutex_unlock(&lock);
    *ptr = p;
    return plk_ok();
}

PipeLinkStatus pipeLinkMalloc(void** ptr, size_t nbytes) {
    if (ptr == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkMalloc: ptr is NULL; pass the address of a pointer");
    *ptr = NULL;
    int32_t c = size_class(nbytes);
    if (c >= N_CLASSES)
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeLinkMalloc: %zu bytes is more than the pool serves (2^%d)", nbytes, N_CLASSES - 1);
    int32_t kind = allocator_kind();
    if (kind != PIPELINK_ALLOCATOR_HOST) return device_malloc(ptr, c, kind == PIPELINK_ALLOCATOR_LEGACY);
    return plk_pool_malloc_host(ptr, nbytes);
}

PipeLinkStatus plk_pool_malloc_host(void** ptr, size_t nbytes) {
    *ptr = NULL;
    int32_t c = size_class(nbytes);
    if (c >= N_CLASSES)
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeLinkMalloc: %zu bytes is more than the pool serves (2^%d)", nbytes, N_CLASSES - 1);
    size_t size = (size_t)1 << c;
    pthread_mutex_lock(&lock);
    void* p = cache[c];
    if (p != NULL) {
        cache[c] = cache[c]->next;
        stats.cached_bytes -= size, ++stats.n_reused;
    } else if (posix_memalign(&p, 256, size) != 0) {
        p = NULL;
    }
    if (p != NULL && !table_insert(p, c, -1, 0)) free(p), p = NULL;
    if (p == NULL) {
        pthread_mutex_unlock(&lock);
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeLinkMalloc: the system refused %zu bytes (pool: %llu allocated, "
                        "%llu cached; pipeLinkClearMemoryPool returns the cache)", size,
                        (unsigned long long)stats.allocated_bytes, (unsigned long long)stats.cached_bytes);
    }
    count_allocation(size);
    pthread_mutex_unlock(&lock);
    *ptr = p;
    return plk_ok();
}

PipeLinkStatus pipeLinkFree(void* ptr) {
    if (plk_pool_release(ptr) != 0)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkFree: %p was not allocated by pipeLinkMalloc (or was "
                        "freed already)", ptr);
    return plk_ok();
}

int plk_pool_release(void* ptr) {
    if (ptr == NULL) return 0;
    pthread_mutex_lock(&lock);
    Entry* e = table_find(ptr);
    if (e == NULL) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    int32_t c = e->size_class;
    e->ptr = TOMBSTONE;
    if (c < 0) {
        stats.allocated_bytes -= e->device_bytes, --stats.n_allocations;
        pthread_mutex_unlock(&lock);
        plk_cuda_free_device((uint64_t)(uintptr_t)ptr);
        return 0;
    }
    size_t size = (size_t)1 << c;
    if (e->device >= 0) { /* a device block: kept (host-side) for the next request of its class and device */
        if (device_cache[c].n == device_cache[c].cap) {
            size_t cap = device_cache[c].cap ? device_cache[c].cap * 2 : 16;
            DeviceBlock* grown = realloc(device_cache[c].items, cap * sizeof *grown);
            if (grown == NULL) { /* no room to cache it: give it back */
                stats.allocated_bytes -= size, --stats.n_allocations;
                pthread_mutex_unlock(&lock);
                plk_cuda_free_device((uint64_t)(uintptr_t)ptr);
                return 0;
            }
            device_cache[c].items = grown, device_cache[c].cap = cap;
        }
        device_cache[c].items[device_cache[c].n].ptr = ptr, device_cache[c].items[device_cache[c].n++].device = e->device;
    } else {
        Cached* block = ptr;
        block->next = cache[c], cache[c] = block;
    }
    stats.allocated_bytes -= size, --stats.n_allocations, stats.cached_bytes += size;
    pthread_mutex_unlock(&lock);
    return 0;
}

int32_t plk_pool_allocator(void) { return allocator_kind(); }

int plk_pool_track_device(void* ptr, uint64_t size) {
    pthread_mutex_lock(&lock);
    int ok = table_insert(ptr, -1, -1, size);
    if (ok) {
        stats.allocated_bytes += size, ++stats.n_allocations;
        if (stats.allocated_bytes > stats.peak_bytes) stats.peak_bytes = stats.allocated_bytes;
    }
    pthread_mutex_unlock(&lock);
    return ok ? 0 : -1;
}

void plk_pool_clear(void) {
    pthread_mutex_lock(&lock);
    for (int c = 0; c < N_CLASSES; ++c)
        while (cache[c] != NULL) {
            Cached* next = cache[c]->next;
            free(cache[c]);
            cache[c] = next;
        }
    stats.cached_bytes = 0;
    for (int c = 0; c < N_CLASSES; ++c) {
        for (size_t i = 0; i < device_cache[c].n; ++i) plk_cuda_free_device((uint64_t)(uintptr_t)device_cache[c].items[i].ptr);
        free(device_cache[c].items);
        device_cache[c].items = NULL, device_cache[c].n = device_cache[c].cap = 0;
    }
    pthread_mutex_unlock(&lock);
}

PipeLinkStatus pipeLinkClearMemoryPool(void) {
    plk_pool_clear();
    return plk_ok();
}

PipeLinkStatus pipeLinkGetMemoryPoolStats(PipeLinkPoolStats* out) {
    if (out == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkGetMemoryPoolStats: stats is NULL");
    allocator_kind(); /* the kind in effect is reported, chosen by default if nobody chose */
    pthread_mutex_lock(&lock);
    *out = stats;
    pthread_mutex_unlock(&lock);
    return plk_ok();
}

PipeLinkStatus pipeLinkSetMemoryAllocator(PipeLinkAllocator kind) {
    if (kind != PIPELINK_ALLOCATOR_ASYNC && kind != PIPELINK_ALLOCATOR_LEGACY && kind != PIPELINK_ALLOCATOR_HOST)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkSetMemoryAllocator: kind must be "
                        "PIPELINK_ALLOCATOR_ASYNC (0), PIPELINK_ALLOCATOR_LEGACY (1) or PIPELINK_ALLOCATOR_HOST (2) "
                        "(got %d)", (int)kind);
    if (kind != PIPELINK_ALLOCATOR_HOST && !plk_cuda_usable())
        return plk_fail(PIPELINK_ERR_HARDWARE_UNSUPPORTED, "pipeLinkSetMemoryAllocator: %s allocates device memory, "
                        "and %s; use PIPELINK_ALLOCATOR_HOST", kind == PIPELINK_ALLOCATOR_ASYNC ?
                        "PIPELINK_ALLOCATOR_ASYNC" : "PIPELINK_ALLOCATOR_LEGACY", plk_cuda_unusable_reason());
    pthread_mutex_lock(&lock);
    stats.allocator = (int32_t)kind, allocator_chosen = 1;
    pthread_mutex_unlock(&lock);
    return plk_ok();
}
