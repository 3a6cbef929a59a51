/* pool.c - the host memory pool behind pipeLinkMalloc/pipeLinkFree (CuPy's pool, simplified):
 * - a request is rounded up to a power of two (at least 256 bytes) and served from that size class's cache
 *   of freed blocks, else from the system (256-byte aligned);
 * - every live block is in a hash table, so freeing a pointer the pool never handed out is a status.
 * - device blocks (outputs of CUDA plans the runtime allocated) are in the same table, so pipeLinkFree
 *   takes them back too (cuMemFree, not cached) and the stats count them.
 * One mutex guards it: it is not on pipeLinkExecute's path except for outputs the runtime allocates. */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define MIN_CLASS 8 /* 256 bytes */
#define N_CLASSES 48

typedef struct Cached { struct Cached* next; } Cached; /* lives inside a freed block */
typedef struct Entry { void* ptr; int32_t size_class; uint64_t device_bytes; } Entry; /* size_class -1: device */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Cached* cache[N_CLASSES];
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

static int table_insert(void* p, int32_t size_class, uint64_t device_bytes) {
    if ((table_used + 1) * 2 > table_cap && !table_grow()) return 0;
    size_t j = slot_of(p, table_cap);
    while (table[j].ptr != NULL && table[j].ptr != TOMBSTONE) j = (j + 1) & (table_cap - 1);
    if (table[j].ptr == NULL) ++table_used;
    table[j].ptr = p, table[j].size_class = size_class, table[j].device_bytes = device_bytes;
    return 1;
}

PipeLinkStatus pipeLinkMalloc(void** ptr, size_t nbytes) {
    if (ptr == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkMalloc: ptr is NULL; pass the address of a pointer");
    *ptr = NULL;
    int32_t c = MIN_CLASS;
    while (c < N_CLASSES && ((size_t)1 << c) < nbytes) ++c;
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
    if (p != NULL && !table_insert(p, c, 0)) free(p), p = NULL;
    if (p == NULL) {
        pthread_mutex_unlock(&lock);
        return plk_fail(PIPELINK_ERR_OUT_OF_MEMORY, "pipeLinkMalloc: the system refused %zu bytes (pool: %llu allocated, "
                        "%llu cached; pipeLinkClearMemoryPool returns the cache)", size,
                        (unsigned long long)stats.allocated_bytes, (unsigned long long)stats.cached_bytes);
    }
    stats.allocated_bytes += size, ++stats.n_allocations;
    if (stats.allocated_bytes > stats.peak_bytes) stats.peak_bytes = stats.allocated_bytes;
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
    Cached* block = ptr;
    block->next = cache[c], cache[c] = block;
    stats.allocated_bytes -= size, --stats.n_allocations, stats.cached_bytes += size;
    pthread_mutex_unlock(&lock);
    return 0;
}

int32_t plk_pool_allocator(void) {
    pthread_mutex_lock(&lock);
    int32_t kind = stats.allocator;
    pthread_mutex_unlock(&lock);
    return kind;
}

int plk_pool_track_device(void* ptr, uint64_t size) {
    pthread_mutex_lock(&lock);
    int ok = table_insert(ptr, -1, size);
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
    pthread_mutex_unlock(&lock);
}

PipeLinkStatus pipeLinkClearMemoryPool(void) {
    plk_pool_clear();
    return plk_ok();
}

PipeLinkStatus pipeLinkGetMemoryPoolStats(PipeLinkPoolStats* out) {
    if (out == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkGetMemoryPoolStats: stats is NULL");
    pthread_mutex_lock(&lock);
    *out = stats;
    pthread_mutex_unlock(&lock);
    return plk_ok();
}

PipeLinkStatus pipeLinkSetMemoryAllocator(PipeLinkAllocator kind) {
    if (kind != PIPELINK_ALLOCATOR_ASYNC && kind != PIPELINK_ALLOCATOR_LEGACY)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkSetMemoryAllocator: kind must be "
                        "PIPELINK_ALLOCATOR_ASYNC (0) or PIPELINK_ALLOCATOR_LEGACY (1) (got %d)", (int)kind);
    pthread_mutex_lock(&lock);
    stats.allocator = (int32_t)kind;
    pthread_mutex_unlock(&lock);
    return plk_ok();
}
