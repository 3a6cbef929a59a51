/* accounting.c - what the loaded pipelines hold on each device besides pipeLinkMalloc's pool: the execution
 * contexts' arenas and workspaces and the plans' constants (pipeLinkGetArenaStats). Lock-free counters, moved
 * where that memory is allocated and freed (a context made or freed, a plan loaded or destroyed, a CPU
 * module's workspace growing), never on a run that allocates nothing. */
#include <stddef.h>

#include "core.h"

#define HELD_CUDA_DEVICES 1025 /* the CUDA device numbers a plan may name: 0 to 1024 */

typedef struct Held {
    _Atomic uint64_t bytes[PLK_HELD_KINDS];
    _Atomic uint64_t total, peak; /* arena + workspace + constant bytes, and their most */
    _Atomic int32_t contexts;
} Held;

static Held held[1 + HELD_CUDA_DEVICES]; /* the CPU, then CUDA devices by number */

static Held* held_of(int32_t device_type, int32_t device_id) {
    if (device_type == PIPELINK_DEVICE_CPU && device_id == 0) return &held[0];
    if (device_type == PIPELINK_DEVICE_CUDA && device_id >= 0 && device_id < HELD_CUDA_DEVICES) return &held[1 + device_id];
    return NULL;
}

void plk_held_add(int32_t device_type, int32_t device_id, int kind, int64_t bytes) {
    Held* h = held_of(device_type, device_id);
    if (h == NULL || bytes == 0 || kind < 0 || kind >= PLK_HELD_KINDS) return;
    /* Unsigned arithmetic wraps: adding a negative delta's two's complement subtracts it. */
    atomic_fetch_add(&h->bytes[kind], (uint64_t)bytes);
    uint64_t total = atomic_fetch_add(&h->total, (uint64_t)bytes) + (uint64_t)bytes;
    uint64_t peak = atomic_load(&h->peak);
    while (bytes > 0 && total > peak && !atomic_compare_exchange_weak(&h->peak, &peak, total)) {}
}

void plk_held_contexts(int32_t device_type, int32_t device_id, int32_t delta) {
    Held* h = held_of(device_type, device_id);
    if (h != NULL) atomic_fetch_add(&h->contexts, delta);
}

PipeLinkStatus pipeLinkGetArenaStats(int32_t device_type, int32_t device_id, PipeLinkArenaStats* stats) {
    if (stats == NULL) return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkGetArenaStats: stats is NULL");
    const uint32_t first = (uint32_t)(offsetof(PipeLinkArenaStats, peak_bytes) + sizeof stats->peak_bytes);
    if (stats->size < first)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkGetArenaStats: stats->size is %u; set it to "
                        "sizeof(PipeLinkArenaStats) (%u bytes in this runtime) before the call", stats->size,
                        (unsigned)sizeof(PipeLinkArenaStats));
    const Held* h = held_of(device_type, device_id);
    if (h == NULL)
        return plk_fail(PIPELINK_ERR_INVALID_ARGUMENT, "pipeLinkGetArenaStats: device type %d, id %d is not a device "
                        "the core runs plans on (PIPELINK_DEVICE_CPU with id 0, or PIPELINK_DEVICE_CUDA with 0 to %d)",
                        (int)device_type, (int)device_id, HELD_CUDA_DEVICES - 1);
    /* Every field this runtime knows fits: a caller built against a newer header passes a larger size. */
    stats->size = (uint32_t)sizeof(PipeLinkArenaStats);
    stats->n_contexts = atomic_load(&h->contexts);
    stats->arena_bytes = atomic_load(&h->bytes[PLK_HELD_ARENA]);
    stats->workspace_bytes = atomic_load(&h->bytes[PLK_HELD_WORKSPACE]);
    stats->constant_bytes = atomic_load(&h->bytes[PLK_HELD_CONSTANT]);
    stats->peak_bytes = atomic_load(&h->peak);
    return plk_ok();
}
