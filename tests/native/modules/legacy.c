/* Legacy kernels with their own signatures (seed sections 3.3 and 4.2), CPU versions; no pipelink.h.
 * Bound through liblegacy.so.pipelink.json without changing this file. */
#include <math.h>
#include <stdint.h>

/* C[m,n] = A[m,k] @ B[k,n], row-major; shape = [m, n, k]. */
void pipeLinkGemm(const void* A, const void* B, void* C, const int32_t* shape, void* stream) {
    const int m = shape[0], n = shape[1], k = shape[2];
    const float* a = (const float*)A; const float* b = (const float*)B; float* c = (float*)C;
    (void)stream;
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double acc = 0;
            for (int p = 0; p < k; ++p) acc += (double)a[i * k + p] * b[p * n + j];
            c[i * n + j] = (float)acc;
        }
}

void pipeLinkLayerNorm(const void* input, const void* gamma, const void* beta, void* output, void* mean,
                       void* rstd, const int32_t* shape, const float* eps, void* stream) {
    const int N = shape[0], C = shape[1];
    const float* x = (const float*)input; const float* g = (const float*)gamma; const float* bt = (const float*)beta;
    float* y = (float*)output; float* mu = (float*)mean; float* rs = (float*)rstd;
    (void)stream;
    for (int i = 0; i < N; ++i) {
        double s = 0, ss = 0;
        for (int j = 0; j < C; ++j) s += x[i * C + j];
        double m = s / C;
        for (int j = 0; j < C; ++j) { double d = x[i * C + j] - m; ss += d * d; }
        double r = 1.0 / sqrt(ss / C + (double)*eps);
        mu[i] = (float)m; rs[i] = (float)r;
        for (int j = 0; j < C; ++j) y[i * C + j] = (float)((x[i * C + j] - m) * r * g[j] + bt[j]);
    }
}

/* Status-returning legacy kernel: y = x * factor (by value); returns 2 when n is 0. */
int legacy_scale(const float* x, float* y, int64_t n, double factor) {
    if (n == 0) return 2;
    for (int64_t i = 0; i < n; ++i) y[i] = (float)(x[i] * factor);
    return 0;
}
