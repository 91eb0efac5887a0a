// Y = X·Wᵀ for fp32 or bf16 weights: the reference and the tiled, vectorized,
// OpenMP fast path (see matmul.h). Vectors use GCC vector extensions so one source
// compiles to AVX-512, AVX2 and baseline clones selected at load time (ifunc).
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/threads.h"

#include <stdint.h>
#include <string.h>

#include "formats/error.h"

#pragma GCC diagnostic ignored "-Wpsabi" // v16 never crosses a non-inlined call

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

typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef uint16_t v16h __attribute__((vector_size(32), aligned(2)));
typedef uint32_t v16u __attribute__((vector_size(64)));

#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

static inline __attribute__((always_inline)) v16 load_w(const void *w, kvq_dtype wt, size_t i) {
    if (wt == KVQ_DTYPE_BF16) {
        v16u u = __builtin_convertvector(*(const v16h *)((const uint16_t *)w + i), v16u) << 16;
        v16 f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return *(const v16 *)((const float *)w + i);
}

static inline __attribute__((always_inline)) float hsum(const v16 *v) {
    float s = 0.0f;
    for (int j = 0; j < 16; j++) s += (*v)[j];
    return s;
}

// Rows [r0, r0+nr) (nr <= 4) × tokens [t0, t0+nt) (nt <= 4). nr, nt are constant
// after inlining in the common 4×4 and r×1 cases.
static inline __attribute__((always_inline)) void tile(float *y, const float *x, const void *w,
                                                       kvq_dtype wt, int in, int out, int r0,
                                                       int nr, int t0, int nt) {
    v16 acc[4][4];
    memset(acc, 0, sizeof acc);
    int k = 0;
    for (; k + 16 <= in; k += 16) {
        v16 wv[4], xv[4];
        for (int r = 0; r < nr; r++) wv[r] = load_w(w, wt, (size_t)(r0 + r) * in + k);
        for (int t = 0; t < nt; t++) xv[t] = *(const v16 *)(x + (size_t)(t0 + t) * in + k);
        for (int r = 0; r < nr; r++)
            for (int t = 0; t < nt; t++) acc[r][t] += wv[r] * xv[t];
    }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) {
            float s = hsum(&acc[r][t]);
            for (int kk = k; kk < in; kk++)
                s += x[(size_t)(t0 + t) * in + kk] * w_at(w, wt, (size_t)(r0 + r) * in + kk);
            y[(size_t)(t0 + t) * out + r0 + r] = s;
        }
}

// One block of output rows [r0, r1) for all tokens; X is walked in chunks of 64
// tokens so the chunk stays in L2 while the block's weight rows stay in L1.
CLONES static void rows_block(float *y, const float *x, const void *w, kvq_dtype wt, int T,
                              int in, int out, int r0, int r1) {
    for (int c0 = 0; c0 < T; c0 += 64) {
        int c1 = c0 + 64 < T ? c0 + 64 : T;
        for (int r = r0; r < r1; r += 4) {
            int nr = r1 - r < 4 ? r1 - r : 4;
            int t = c0;
            if (nr == 4) {
                for (; t + 4 <= c1; t += 4) tile(y, x, w, wt, in, out, r, 4, t, 4);
                for (; t < c1; t++) tile(y, x, w, wt, in, out, r, 4, t, 1);
            } else {
                for (; t < c1; t++) tile(y, x, w, wt, in, out, r, nr, t, 1);
            }
        }
    }
}

void kvq_matmul(float *y, const float *x, const void *w, kvq_dtype wt, int T, int in, int out,
                int n_threads) {
    KVQ_ASSERT(wt == KVQ_DTYPE_F32 || wt == KVQ_DTYPE_BF16);
    const int bs = 16; // rows per work item
    int nb = (out + bs - 1) / bs;
#pragma omp parallel for schedule(dynamic, 1) num_threads(kvq_nthreads(n_threads)) \
    if (nb > 1 && (long)T * in * out > 32768)
    for (int b = 0; b < nb; b++) {
        int r0 = b * bs, r1 = r0 + bs < out ? r0 + bs : out;
        rows_block(y, x, w, wt, T, in, out, r0, r1);
    }
}
