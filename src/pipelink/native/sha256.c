/* sha256.c - SHA-256 (FIPS 180-4), to check native modules and plan payloads against their digests.
 * Plans with constants (bound weights) hash hundreds of megabytes at load: x86-64 processors with the SHA
 * extensions (SHA-NI) take them through it, about ten times the portable code's speed; the choice is made
 * once, from CPUID. -DPLK_SHA256_PORTABLE keeps the portable code only (the tests compare both). */
#include <pthread.h>
#include <string.h>

#include "core.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(PLK_SHA256_PORTABLE)
#define PLK_SHA_NI 1
#include <cpuid.h>
#include <immintrin.h>
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block(uint32_t h[8], const uint8_t* p) { /* the portable compression of one 64-byte block */
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; ++i) {
        uint32_t t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void blocks_portable(uint32_t h[8], const uint8_t* p, size_t n_blocks) {
    for (size_t i = 0; i < n_blocks; ++i) block(h, p + 64 * i);
}

#ifdef PLK_SHA_NI
/* Intel's SHA extensions: the state as ABEF/CDGH, four rounds per pair of sha256rnds2, the message schedule
 * in four registers M[g % 4] (W[4g .. 4g+3]) advanced by sha256msg1/msg2 (Intel's reference sequence). */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_sha_ni(uint32_t h[8], const uint8_t* p, size_t n_blocks) {
    const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL); /* big-endian words */
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&h[0]), 0xB1); /* CDAB */
    __m128i state1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&h[4]), 0x1B); /* EFGH */
    __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);  /* ABEF */
    state1 = _mm_blend_epi16(state1, tmp, 0xF0);        /* CDGH */
    for (size_t b = 0; b < n_blocks; ++b, p += 64) {
        const __m128i abef = state0, cdgh = state1;
        __m128i m[4];
#pragma GCC unroll 16
        for (int g = 0; g < 16; ++g) {
            if (g < 4) m[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(p + 16 * g)), mask);
            __m128i msg = _mm_add_epi32(m[g & 3], _mm_loadu_si128((const __m128i*)&K[4 * g]));
            state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
            if (g >= 3 && g <= 14) { /* W of the next group: msg2 finishes what msg1 began */
                m[(g + 1) & 3] = _mm_add_epi32(m[(g + 1) & 3], _mm_alignr_epi8(m[g & 3], m[(g - 1) & 3], 4));
                m[(g + 1) & 3] = _mm_sha256msg2_epu32(m[(g + 1) & 3], m[g & 3]);
            }
            state0 = _mm_sha256rnds2_epu32(state0, state1, _mm_shuffle_epi32(msg, 0x0E));
            if (g >= 1 && g <= 12) m[(g - 1) & 3] = _mm_sha256msg1_epu32(m[(g - 1) & 3], m[g & 3]);
        }
        state0 = _mm_add_epi32(state0, abef);
        state1 = _mm_add_epi32(state1, cdgh);
    }
    tmp = _mm_shuffle_epi32(state0, 0x1B);              /* FEBA */
    state1 = _mm_shuffle_epi32(state1, 0xB1);           /* DCHG */
    state0 = _mm_blend_epi16(tmp, state1, 0xF0);        /* h[0..3] */
    state1 = _mm_alignr_epi8(state1, tmp, 8);           /* h[4..7] */
    _mm_storeu_si128((__m128i*)&h[0], state0);
    _mm_storeu_si128((__m128i*)&h[4], state1);
}
#endif

static void (*compress)(uint32_t h[8], const uint8_t* p, size_t n_blocks) = blocks_portable;
static pthread_once_t compress_once = PTHREAD_ONCE_INIT;

static void choose_compress(void) {
#ifdef PLK_SHA_NI
    unsigned a = 0, b = 0, c = 0, d = 0;
    int ssse3_sse41 = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 9)) && (c & (1u << 19));
    if (ssse3_sse41 && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29))) compress = blocks_sha_ni;
#endif
}

void plk_sha256(const void* data, size_t n, uint8_t out[32]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const uint8_t* p = (const uint8_t*)data;
    size_t full = n / 64 * 64;
    pthread_once(&compress_once, choose_compress);
    compress(h, p, full / 64);
    /* The tail, a 0x80 byte, zeros and the length in bits: one or two more blocks. */
    uint8_t tail[128] = {0};
    size_t rest = n - full;
    if (rest) memcpy(tail, p + full, rest);
    tail[rest] = 0x80;
    size_t len = rest + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; ++i) tail[len - 1 - i] = (uint8_t)(bits >> (8 * i));
    compress(h, tail, len / 64);
    for (int i = 0; i < 8; ++i) {
        out[4 * i] = (uint8_t)(h[i] >> 24), out[4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(h[i] >> 8), out[4 * i + 3] = (uint8_t)h[i];
    }
}

void plk_hex(const uint8_t* bytes, size_t n, char* out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; ++i) out[2 * i] = digits[bytes[i] >> 4], out[2 * i + 1] = digits[bytes[i] & 15];
    out[2 * n] = '\0';
}
