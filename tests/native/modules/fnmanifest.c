/* A module whose manifest exists only as the return value of pipelink_manifest() (no ELF section, as an
 * older or hand-written module may be): reading it means running code, so it is asked in a probe process.
 * Its constructor records the opening pid in $PIPELINK_TEST_MARKER. fn_op: y = x + 10 (float32). */
#include <pipelink.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    const char* name = getenv("PIPELINK_TEST_MARKER");
    FILE* f = name ? fopen(name, "a") : NULL;
    if (f) { fprintf(f, "%ld\n", (long)getpid()); fclose(f); }
}
PIPELINK_COMPUTE(fn_op_compute) {
    const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) y[i] = x[i] + 10.0f;
    return PIPELINK_SUCCESS;
}
PIPELINK_VERSION(fn_op, 1, 0, 0)
PIPELINK_EXTERN_C PIPELINK_EXPORT const char* pipelink_manifest(void) {
    return "{\"abi_version\": 1, \"operators\": [{\"name\": \"fn_op\", \"version\": \"1.0.0\", "
           "\"entry\": \"fn_op_compute\", \"inputs\": [{\"name\": \"x\", \"dtype\": \"float32\"}], "
           "\"outputs\": [{\"name\": \"y\", \"shape\": \"x\"}]}]}";
}
