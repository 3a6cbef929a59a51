/* Appends the opening process's pid to $PIPELINK_TEST_MARKER when opened: tests see which process opened
 * it. marker_op: y = 2 * x (float32). */
#include <pipelink.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    const char* name = getenv("PIPELINK_TEST_MARKER");
    FILE* f = name ? fopen(name, "a") : NULL;
    if (f) { fprintf(f, "%ld\n", (long)getpid()); fclose(f); }
}
PIPELINK_COMPUTE(marker_compute) {
    const float* x = (const float*)in[0].data; float* y = (float*)out[0].data;
    for (int64_t i = 0; i < pipelink_numel(&in[0]); ++i) y[i] = 2.0f * x[i];
    return PIPELINK_SUCCESS;
}
PIPELINK_VERSION(marker_op, 1, 0, 0)
PIPELINK_MANIFEST({"name": "marker_op", "version": "1.0.0", "entry": "marker_compute", "devices": ["cpu"],
                   "inputs": [{"name": "x", "dtype": "float32"}], "outputs": [{"name": "y", "shape": "x"}]})
