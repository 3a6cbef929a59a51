/* A shared library with a kernel but no PipeLink manifest and no sidecar. */
#include <stdint.h>
void plain_kernel(const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }
