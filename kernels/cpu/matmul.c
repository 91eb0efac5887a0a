// Y = X·Wᵀ for fp32 or bf16 weights: the reference and the tiled, vectorized,
// OpenMP fast path (see matmul.h). Vectors use GCC vector extensions so one source
// compiles to AVX-512, AVX2 and baseline clones selected at load time (ifunc).
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/threads.h"

#include <stdint.h>
#include <string.h>

#include "formats/error.h"

#pragma GCC diagnostic ignored "-Wpsabi" // v16 never crosses a non-inlined call
// a += w·x as fused multiply-adds (ISO C mode turns contraction off by default)
#ifndef __clang__
#pragma GCC optimize("fp-contract=fast")
#endif

static inline float w_at(const void *w, kvq_dtype wt, size_t i) {
    if (wt == KVQ_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)w + 2 * i, 2);
        return kvq_bf16_to_f32(h);
    }
    return ((const float *)w)[i];
}

void kvq_matmul_ref(float *y, const float *x, const void *w, kvq_dtype wt, int T, int in, int out) {
    KVQ_ASSERT(wt == KVQ_DTYPE_F32 || wt == KVQ_DTYPE_BF16);
    for (int t = 0; t < T; t++)
        for (int o = 0; o < out; o++) {
            float s = 0.0f;
            for (int k = 0; k < in; k++) s += x[(size_t)t * in + k] * w_at(w, wt, (size_t)o * in + k);
            y[(size_t)t * out + o] = s;
        }
}

// ---- fast path
//
// bf16 trick: a 64-byte load of 32 bf16 weights viewed as 16 uint32 words gives the
// even elements as (word << 16) and the odd ones as (word & 0xffff0000), two plain
// float vectors with no widening shuffles. Activations are permuted to match once per
// call (per 32-block: the 16 even elements, then the 16 odd ones), which costs T·in
// against the product's T·in·out. fp32 weights use the activations as they are.

typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef uint32_t v16u __attribute__((vector_size(64), aligned(2)));

#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

static inline __attribute__((always_inline)) void load_w2(const void *w, kvq_dtype wt, size_t i,
                                                          v16 *a, v16 *b) {
    if (wt == KVQ_DTYPE_BF16) {
        v16u u = *(const v16u *)((const uint16_t *)w + i);
        v16u lo = u << 16, hi = u & 0xffff0000u;
        memcpy(a, &lo, sizeof *a);
        memcpy(b, &hi, sizeof *b);
    } else {
        *a = *(const v16 *)((const float *)w + i);
        *b = *(const v16 *)((const float *)w + i + 16);
    }
}

// Lanes summed as a tree (j + j+8, then + j+4, + j+2, + j+1): 4 vector adds instead of 15
// dependent scalar ones per accumulator; every tile uses it, so results still do not depend
// on how tokens were batched.
typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef float v4 __attribute__((vector_size(16), aligned(4)));
static inline __attribute__((always_inline)) float hsum(const v16 *v) {
#ifdef KVQ_HSUM_SERIAL
    float s = 0.0f;
    for (int j = 0; j < 16; j++) s += (*v)[j];
    return s;
#else
    v8 a = __builtin_shufflevector(*v, *v, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector(*v, *v, 8, 9, 10, 11, 12, 13, 14, 15);
    v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (b[0] + b[2]) + (b[1] + b[3]);
#endif
}

static inline __attribute__((always_inline)) float tail_dot(const float *x, const void *w,
                                                           kvq_dtype wt, size_t wrow, int k, int in) {
    float s = 0.0f;
    for (; k < in; k++) s += x[k] * w_at(w, wt, wrow + k);
    return s;
}

// Register tiles, accumulators in named locals so they stay in registers: 4 weight
// rows × 4 tokens (prefill) and 8 rows × 1 token (decode: eight FMA chains hide
// latency while weights stream). x is the (possibly permuted) activation matrix.
static inline __attribute__((always_inline)) void tile4x4(float *y, const float *x, const void *w,
                                                          kvq_dtype wt, int in, int out, int r0, int t0) {
    v16 a00 = {0}, a01 = {0}, a02 = {0}, a03 = {0}, a10 = {0}, a11 = {0}, a12 = {0}, a13 = {0};
    v16 a20 = {0}, a21 = {0}, a22 = {0}, a23 = {0}, a30 = {0}, a31 = {0}, a32 = {0}, a33 = {0};
    const float *x0 = x + (size_t)t0 * in, *x1 = x0 + in, *x2 = x1 + in, *x3 = x2 + in;
    size_t w0 = (size_t)r0 * in, w1 = w0 + in, w2 = w1 + in, w3 = w2 + in;
    int k = 0;
    for (; k + 32 <= in; k += 32) {
        v16 A0 = *(const v16 *)(x0 + k), A1 = *(const v16 *)(x1 + k), A2 = *(const v16 *)(x2 + k),
            A3 = *(const v16 *)(x3 + k);
        v16 B0 = *(const v16 *)(x0 + k + 16), B1 = *(const v16 *)(x1 + k + 16),
            B2 = *(const v16 *)(x2 + k + 16), B3 = *(const v16 *)(x3 + k + 16);
        v16 Wa, Wb;
        load_w2(w, wt, w0 + k, &Wa, &Wb);
        a00 += Wa * A0; a00 += Wb * B0; a01 += Wa * A1; a01 += Wb * B1; a02 += Wa * A2; a02 += Wb * B2; a03 += Wa * A3; a03 += Wb * B3;
        load_w2(w, wt, w1 + k, &Wa, &Wb);
        a10 += Wa * A0; a10 += Wb * B0; a11 += Wa * A1; a11 += Wb * B1; a12 += Wa * A2; a12 += Wb * B2; a13 += Wa * A3; a13 += Wb * B3;
        load_w2(w, wt, w2 + k, &Wa, &Wb);
        a20 += Wa * A0; a20 += Wb * B0; a21 += Wa * A1; a21 += Wb * B1; a22 += Wa * A2; a22 += Wb * B2; a23 += Wa * A3; a23 += Wb * B3;
        load_w2(w, wt, w3 + k, &Wa, &Wb);
        a30 += Wa * A0; a30 += Wb * B0; a31 += Wa * A1; a31 += Wb * B1; a32 += Wa * A2; a32 += Wb * B2; a33 += Wa * A3; a33 += Wb * B3;
    }
    const v16 *acc[4][4] = {{&a00, &a01, &a02, &a03}, {&a10, &a11, &a12, &a13},
                            {&a20, &a21, &a22, &a23}, {&a30, &a31, &a32, &a33}};
    const float *xs[4] = {x0, x1, x2, x3};
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < 4; t++)
            y[(size_t)(t0 + t) * out + r0 + r] =
                hsum(acc[r][t]) + tail_dot(xs[t], w, wt, (size_t)(r0 + r) * in, k, in);
}

static inline __attribute__((always_inline)) void tile8x1(float *y, const float *x, const void *w,
                                                          kvq_dtype wt, int in, int out, int r0, int t) {
    v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0}, Wa, Wb;
    const float *xt = x + (size_t)t * in;
    size_t w0 = (size_t)r0 * in, n = in, es = wt == KVQ_DTYPE_BF16 ? 2 : 4;
    const char *pf = r0 + 16 <= out ? (const char *)w + (w0 + 8 * n) * es : NULL;
    int k = 0;
    for (; k + 32 <= in; k += 32) {
        v16 A = *(const v16 *)(xt + k), B = *(const v16 *)(xt + k + 16);
        if (pf) // the next 8 rows, same columns: 8 strided streams defeat the hardware prefetcher
            for (int j = 0; j < 8; j++) __builtin_prefetch(pf + (j * n + k) * es);
        load_w2(w, wt, w0 + k, &Wa, &Wb);         a0 += Wa * A; a0 += Wb * B;
        load_w2(w, wt, w0 + n + k, &Wa, &Wb);     a1 += Wa * A; a1 += Wb * B;
        load_w2(w, wt, w0 + 2 * n + k, &Wa, &Wb); a2 += Wa * A; a2 += Wb * B;
        load_w2(w, wt, w0 + 3 * n + k, &Wa, &Wb); a3 += Wa * A; a3 += Wb * B;
        load_w2(w, wt, w0 + 4 * n + k, &Wa, &Wb); a4 += Wa * A; a4 += Wb * B;
        load_w2(w, wt, w0 + 5 * n + k, &Wa, &Wb); a5 += Wa * A; a5 += Wb * B;
        load_w2(w, wt, w0 + 6 * n + k, &Wa, &Wb); a6 += Wa * A; a6 += Wb * B;
        load_w2(w, wt, w0 + 7 * n + k, &Wa, &Wb); a7 += Wa * A; a7 += Wb * B;
    }
    const v16 *acc[8] = {&a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7};
    for (int r = 0; r < 8; r++)
        y[(size_t)t * out + r0 + r] = hsum(acc[r]) + tail_dot(xt, w, wt, (size_t)(r0 + r) * in, k, in);
}

static inline __attribute__((always_inline)) void tile1x1(float *y, const float *x, const void *w,
                                                          kvq_dtype wt, int in, int out, int r, int t) {
    v16 a = {0}, Wa, Wb;
    const float *xt = x + (size_t)t * in;
    int k = 0;
    for (; k + 32 <= in; k += 32) {
        load_w2(w, wt, (size_t)r * in + k, &Wa, &Wb);
        a += Wa * *(const v16 *)(xt + k);
        a += Wb * *(const v16 *)(xt + k + 16);
    }
    y[(size_t)t * out + r] = hsum(&a) + tail_dot(xt, w, wt, (size_t)r * in, k, in);
}

// One block of output rows [r0, r1) for all tokens. Decode (T < 4) uses 8-row tiles;
// prefill walks X in chunks of 64 tokens so the chunk stays in L2 while the block's
// weight rows stay in L1. Every tile sums in the same order, so results do not depend
// on how tokens were batched.
CLONES static void rows_block(float *y, const float *x, const void *w, kvq_dtype wt, int T,
                              int in, int out, int r0, int r1) {
    if (T < 4) {
        for (int t = 0; t < T; t++) {
            int r = r0;
            for (; r + 8 <= r1; r += 8) tile8x1(y, x, w, wt, in, out, r, t);
            for (; r < r1; r++) tile1x1(y, x, w, wt, in, out, r, t);
        }
        return;
    }
    for (int c0 = 0; c0 < T; c0 += 64) {
        int c1 = c0 + 64 < T ? c0 + 64 : T, r = r0;
        for (; r + 4 <= r1; r += 4) {
            int t = c0;
            for (; t + 4 <= c1; t += 4) tile4x4(y, x, w, wt, in, out, r, t);
            for (; t < c1; t++)
                for (int rr = r; rr < r + 4; rr++) tile1x1(y, x, w, wt, in, out, rr, t);
        }
        for (; r < r1; r++)
            for (int t = c0; t < c1; t++) tile1x1(y, x, w, wt, in, out, r, t);
    }
}

// (T, in) -> per 32-block evens then odds; the tail beyond the last block is copied.
static void permute_even_odd(float *xp, const float *x, int T, int in) {
    int nb = in / 32;
    for (int t = 0; t < T; t++) {
        const float *s = x + (size_t)t * in;
        float *d = xp + (size_t)t * in;
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < 16; j++) {
                d[32 * b + j] = s[32 * b + 2 * j];
                d[32 * b + 16 + j] = s[32 * b + 2 * j + 1];
            }
        for (int k = 32 * nb; k < in; k++) d[k] = s[k];
    }
}

size_t kvq_matmul_scratch(kvq_dtype wt, int T, int in) {
    return wt == KVQ_DTYPE_BF16 && in >= 32 ? (size_t)T * in : 0;
}

void kvq_matmul(float *y, const float *x, const void *w, kvq_dtype wt, int T, int in, int out,
                float *scratch, int n_threads) {
    KVQ_ASSERT(wt == KVQ_DTYPE_F32 || wt == KVQ_DTYPE_BF16);
    const float *xs = x;
    if (kvq_matmul_scratch(wt, T, in)) {
        KVQ_ASSERT(scratch);
        permute_even_odd(scratch, x, T, in);
        xs = scratch;
    }
    const int bs = 16; // rows per work item
    int nb = (out + bs - 1) / bs;
#pragma omp parallel for schedule(dynamic, 1) num_threads(kvq_nthreads(n_threads)) \
    if (nb > 1 && (long)T * in * out > 32768)
    for (int b = 0; b < nb; b++) {
        int r0 = b * bs, r1 = r0 + bs < out ? r0 + bs : out;
        rows_block(y, xs, w, wt, T, in, out, r0, r1);
    }
}

CLONES static uint64_t sum_words(const uint64_t *p, size_t n) {
    uint64_t s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

uint64_t kvq_stream_read(const void *p, size_t bytes, int n_threads) {
    size_t n = bytes / 8, blk = 1 << 14; // 128 KiB per work item
    uint64_t s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s) num_threads(kvq_nthreads(n_threads))
    for (size_t b = 0; b < (n + blk - 1) / blk; b++) {
        size_t i0 = b * blk, i1 = i0 + blk < n ? i0 + blk : n;
        s += sum_words((const uint64_t *)p + i0, i1 - i0);
    }
    for (size_t i = n * 8; i < bytes; i++) s += ((const uint8_t *)p)[i];
    return s;
}

void kvq_matmul_decoded_rows(void (*row)(const void *w, int64_t r, float *out), const void *w, int64_t rows,
                             int64_t cols, int block, const float *x, int T, float *y, int64_t ldy, float *scratch,
                             int n_threads) {
    const int nt = kvq_nthreads(n_threads);
    float *wb = scratch, *yb = scratch + (size_t)block * cols;
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
        const int nb = (int)(rows - r0 < block ? rows - r0 : block);
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int i = 0; i < nb; i++) row(w, r0 + i, wb + (size_t)i * cols);
        kvq_matmul(yb, x, wb, KVQ_DTYPE_F32, T, (int)cols, nb, NULL, nt);
        for (int k = 0; k < T; k++) memcpy(y + k * ldy + r0, yb + (size_t)k * nb, sizeof(float) * nb);
    }
}
