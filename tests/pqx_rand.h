// Seeded random PQ / QET execution layouts (kernels/pq_layout.h) — the one copy, for the CPU
// suite (tests/test_pq.c), the GPU suites and the GPU benchmark (tests/test_pqx_lanes.c,
// test_cuda_pq.c, bench/cuda_pq.c) — and the GPU products emulated on the host (pqx_emulate):
// indices uniform in [0, k), codebook values normal (bf16-rounded, f16 with some subnormal and
// zero halves, float), or CQO codes with a random (min, step) per subspace.
#ifndef KVQ_TESTS_PQX_RAND_H
#define KVQ_TESTS_PQX_RAND_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cpu/hqx.h"
#include "kernels/cpu/pq.h"
#include "kernels/cuda/pqx_lane.h"
#include "tests/testrng.h"

static inline float *randvec(int64_t n, uint64_t *s) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = (float)gauss(s);
    return x;
}

/** A PQ layout (levels 0) with unpacked uint8 / uint16 indices (kvq_pqx_pack_lanes packs them):
 *  indices uniform in [0, k), codebook values normal (bf16-rounded, f16, float), or CQO codes of
 *  cbits bits (0: 10) uniform in [0, 2^cbits) with a random (min, step) per subspace. */
static inline void rand_pqx(kvq_pqx *p, int64_t rows, int64_t cols, int w, int stages, const int64_t *k, int cb_type,
                            int cbits, uint64_t *s) {
    if (!cbits) cbits = 10;
    *p = (kvq_pqx){.stages = stages, .w = w, .cb_type = cb_type, .rows = rows, .cols = cols, .m = cols / w,
                   .rows_p = (rows + 7) / 8 * 8, .cb_bits = cb_type == KVQ_PQX_CB_CQO ? cbits : 0};
    for (int st = 0; st < stages; st++) {
        p->k[st] = k[st];
        p->ib[st] = k[st] <= 256 ? 1 : 2;
        p->idx[st] = kvq_hqx_alloc((size_t)(p->rows_p * p->m) * (size_t)p->ib[st]);
        memset(p->idx[st], 0, (size_t)(p->rows_p * p->m) * (size_t)p->ib[st]);
        p->cb[st] = kvq_hqx_alloc((size_t)(p->m * w * k[st]) * (cb_type == KVQ_PQX_CB_F32 ? 4 : 2));
        if (cb_type == KVQ_PQX_CB_CQO) {
            p->cb_ms[st] = kvq_hqx_alloc(8 * (size_t)p->m);
            for (int64_t j = 0; j < p->m; j++) {
                p->cb_ms[st][2 * j] = (float)gauss(s) - 2.0f;
                p->cb_ms[st][2 * j + 1] = (float)(4.0 / ((1 << cbits) - 1) * (1 + 0.1 * gauss(s)));
            }
        }
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < p->m; j++) {
                uint32_t a = (uint32_t)(rng_next(s) % (uint64_t)k[st]);
                int64_t o = kvq_pqx_idx_at(p, r, j);
                if (p->ib[st] == 1) ((uint8_t *)p->idx[st])[o] = (uint8_t)a;
                else ((uint16_t *)p->idx[st])[o] = (uint16_t)a;
            }
        for (int64_t i = 0; i < p->m * w * k[st]; i++) {
            float v = (float)gauss(s) * (st ? 0.1f : 1.0f);
            if (cb_type == KVQ_PQX_CB_F32) ((float *)p->cb[st])[i] = v;
            else if (cb_type == KVQ_PQX_CB_F16) // some subnormal, zero and negative-zero halves too
                ((uint16_t *)p->cb[st])[i] = kvq_f32_to_f16(i % 7 == 3 ? v * 1e-6f : i % 31 == 5 ? -0.0f : v);
            else if (cb_type == KVQ_PQX_CB_CQO) ((uint16_t *)p->cb[st])[i] = (uint16_t)(rng_next(s) % (1u << cbits));
            else ((uint16_t *)p->cb[st])[i] = kvq_f32_to_bf16(v);
        }
    }
}

/** A random qetx layout's shape, as the QET suites list them (rand_qetx's arguments). */
typedef struct {
    int64_t rows, cols;
    int stages, cb_type, cb_bits;
    int64_t k[2];
} qshape;

/** A QET layout (levels 3): switch fields and indices uniform, codebook blobs of the given type
 *  (CQO: random (min, step) per subspace and codes of cb_bits; raw: normal bf16 or f32 values). */
static inline void rand_qetx(kvq_pqx *p, int64_t rows, int64_t cols, int stages, const int64_t *k, int cb_type, int cb_bits,
                      uint64_t *s) {
    *p = (kvq_pqx){.stages = stages, .w = 8, .cb_type = cb_type, .rows = rows, .cols = cols, .m = cols / 8,
                   .rows_p = rows, .levels = 3, .cb_bits = cb_type == KVQ_PQX_CB_CQO ? cb_bits : 0, .groups = cols / 64};
    const size_t swn = (size_t)(rows * p->groups) * KVQ_QETX_SW_BYTES;
    p->sw = kvq_hqx_alloc(swn + KVQ_QETX_SW_PAD);
    memset(p->sw, 0, swn + KVQ_QETX_SW_PAD);
    for (size_t i = 0; i < swn; i++) p->sw[i] = (uint8_t)rng_next(s);
    for (int st = 0; st < stages; st++) {
        p->k[st] = k[st];
        p->qbits[st] = k[st] <= 16 ? 4 : k[st] <= 256 ? 8 : 16;
        const size_t nidx = (size_t)(rows * p->m) * (size_t)p->qbits[st] / 8 + 1;
        p->idx[st] = kvq_hqx_alloc(nidx);
        memset(p->idx[st], 0, nidx);
        for (int64_t o = 0; o < rows * p->m; o++) {
            const uint32_t a = (uint32_t)(rng_next(s) % (uint64_t)k[st]);
            if (p->qbits[st] == 4) ((uint8_t *)p->idx[st])[o >> 1] |= (uint8_t)(a << (4 * (o & 1)));
            else if (p->qbits[st] == 8) ((uint8_t *)p->idx[st])[o] = (uint8_t)a;
            else ((uint16_t *)p->idx[st])[o] = (uint16_t)a;
        }
        const int64_t nv = p->m * k[st] * 8;
        size_t n = cb_type == KVQ_PQX_CB_F32 ? 4 * (size_t)nv : cb_type == KVQ_PQX_CB_BF16 ? 2 * (size_t)nv
                                                                                            : 8 * (size_t)p->m + ((size_t)nv * (size_t)cb_bits + 7) / 8;
        uint8_t *b = kvq_hqx_alloc(n + 16);
        memset(b, 0, n + 16);
        p->cb[st] = b;
        p->cb_size[st] = n;
        for (int64_t i = 0; i < nv; i++) {
            const float v = (float)gauss(s) * (st ? 0.1f : 1.0f);
            if (cb_type == KVQ_PQX_CB_F32) memcpy(b + 4 * i, &v, 4);
            else if (cb_type == KVQ_PQX_CB_BF16) {
                const uint16_t h = kvq_f32_to_bf16(v);
                memcpy(b + 2 * i, &h, 2);
            }
        }
        if (cb_type == KVQ_PQX_CB_CQO) {
            for (int64_t j = 0; j < p->m; j++) {
                const float mn = (float)gauss(s) - 2.0f, step = (float)(4.0 / ((1 << cb_bits) - 1) * (1 + 0.1 * gauss(s)));
                memcpy(b + 8 * j, &mn, 4);
                memcpy(b + 8 * j + 4, &step, 4);
            }
            for (int64_t i = 0; i < nv; i++) {
                const uint32_t c = (uint32_t)(rng_next(s) % (1u << cb_bits));
                for (int q = 0; q < cb_bits; q++)
                    if (c >> q & 1) b[8 * p->m + ((uint64_t)i * cb_bits + q) / 8] |= (uint8_t)(1u << (((uint64_t)i * cb_bits + q) % 8));
            }
        }
    }
}

/** A general QET layout (qetg, kernels/cpu/qetg.c): a swap tree of `levels` levels, subspaces of
 *  width w, indicator bits and indices uniform, codebooks as rand_qetx's (plus raw f16 values, some
 *  subnormal). cols must be a multiple of w and of 2^levels. */
static inline void rand_qetg(kvq_pqx *p, int64_t rows, int64_t cols, int levels, int w, int stages, const int64_t *k,
                             int cb_type, int cb_bits, uint64_t *s) {
    *p = (kvq_pqx){.stages = stages, .w = w, .cb_type = cb_type, .rows = rows, .cols = cols, .m = cols / w,
                   .rows_p = rows, .levels = levels, .qetg = 1, .cb_bits = cb_type == KVQ_PQX_CB_CQO ? cb_bits : 0};
    const size_t swn = ((size_t)rows * (size_t)levels * (size_t)(cols / 2) + 7) / 8;
    p->sw = kvq_hqx_alloc(swn + 8);
    memset(p->sw, 0, swn + 8);
    for (size_t i = 0; i < swn; i++) p->sw[i] = (uint8_t)rng_next(s);
    for (int st = 0; st < stages; st++) {
        p->k[st] = k[st];
        p->qbits[st] = k[st] <= 16 ? 4 : k[st] <= 256 ? 8 : 16;
        const size_t nidx = ((size_t)(rows * p->m) * (size_t)p->qbits[st] + 7) / 8 + 1;
        p->idx[st] = kvq_hqx_alloc(nidx);
        memset(p->idx[st], 0, nidx);
        for (int64_t o = 0; o < rows * p->m; o++) {
            const uint32_t a = (uint32_t)(rng_next(s) % (uint64_t)k[st]);
            if (p->qbits[st] == 4) ((uint8_t *)p->idx[st])[o >> 1] |= (uint8_t)(a << (4 * (o & 1)));
            else if (p->qbits[st] == 8) ((uint8_t *)p->idx[st])[o] = (uint8_t)a;
            else ((uint16_t *)p->idx[st])[o] = (uint16_t)a;
        }
        const int64_t nv = p->m * k[st] * w;
        size_t n = cb_type == KVQ_PQX_CB_F32 ? 4 * (size_t)nv : cb_type != KVQ_PQX_CB_CQO ? 2 * (size_t)nv
                                                                                          : 8 * (size_t)p->m + ((size_t)nv * (size_t)cb_bits + 7) / 8;
        uint8_t *b = kvq_hqx_alloc(n + 16);
        memset(b, 0, n + 16);
        p->cb[st] = b;
        p->cb_size[st] = n;
        for (int64_t i = 0; i < nv && cb_type != KVQ_PQX_CB_CQO; i++) {
            const float v = (float)gauss(s) * (st ? 0.1f : 1.0f);
            uint16_t h = 0;
            if (cb_type == KVQ_PQX_CB_F32) memcpy(b + 4 * i, &v, 4);
            else {
                h = cb_type == KVQ_PQX_CB_BF16 ? kvq_f32_to_bf16(v) : kvq_f32_to_f16(i % 7 == 3 ? v * 1e-6f : v);
                memcpy(b + 2 * i, &h, 2);
            }
        }
        if (cb_type == KVQ_PQX_CB_CQO) {
            for (int64_t j = 0; j < p->m; j++) {
                const float mn = (float)gauss(s) - 2.0f, step = (float)(4.0 / ((1 << cb_bits) - 1) * (1 + 0.1 * gauss(s)));
                memcpy(b + 8 * j, &mn, 4);
                memcpy(b + 8 * j + 4, &step, 4);
            }
            for (int64_t i = 0; i < nv; i++) {
                const uint32_t c = (uint32_t)(rng_next(s) % (1u << cb_bits));
                for (int q = 0; q < cb_bits; q++)
                    if (c >> q & 1) b[8 * p->m + ((uint64_t)i * cb_bits + q) / 8] |= (uint8_t)(1u << (((uint64_t)i * cb_bits + q) % 8));
            }
        }
    }
}

// ---- the GPU product on the host

/** y (n_tok, rows) = x (n_tok, cols) · Wᵀ as kernels/cuda/pqx.cu computes it, in batches of nb
 *  tokens (its kvq_cuda_pqx_batch; 8 for the layouts of the tests): every lane's arithmetic
 *  (kernels/cuda/pqx_lane.h) in the same order and the kernels' reduction trees, so the device
 *  should give these bits. qet_kernel (QET layouts): 1 the expanded-codebook kernel (the default),
 *  0 the per-weight decode (KVQ_CUDA_QET=decode), 2 the shared-memory tables (KVQ_CUDA_QET=smem),
 *  3 their second form (KVQ_CUDA_QET=smem2: values from the staged words, CQO without I2F);
 *  kvq_cuda_pqx_qet_kernel says which ran. */
static inline void pqx_emulate_k(const kvq_pqx *p, const float *x, int n_tok, int nb_max, int qet_kernel, float *y) {
    const int64_t rows = p->rows, cols = p->cols;
    float *E[2] = {NULL, NULL};
    if (p->levels && qet_kernel == 1) // the tables qetx_expand writes, once per product
        for (int s = 0; s < p->stages; s++) {
            E[s] = malloc(sizeof(float) * (size_t)(p->m * p->k[s] * 8));
            for (int64_t e = 0; e < p->m * p->k[s]; e++) kvq_pql_qexp(p, s, e, E[s] + 8 * e);
        }
    for (int t0 = 0; t0 < n_tok; t0 += nb_max) {
        const int nb = n_tok - t0 < nb_max ? n_tok - t0 : nb_max;
        const float *xb = x + (size_t)t0 * (size_t)cols;
        float *yb = y + (size_t)t0 * (size_t)rows;
        if (p->levels && qet_kernel >= 2) { // qetx_rows_s(2)'s partials (G, nb, rows), then qetx_sum(2)
            const int64_t G = p->groups;
            float *P = malloc(sizeof(float) * (size_t)(G * nb * rows)), acc[8];
            for (int64_t g = 0; g < G; g++)
                for (int64_t r = 0; r < rows; r++) {
                    if (qet_kernel == 3) kvq_pql_qets2(p, xb, cols, nb, r, g, acc);
                    else kvq_pql_qets(p, xb, cols, nb, r, g, acc);
                    for (int t = 0; t < nb; t++) P[(g * nb + t) * rows + r] = acc[t];
                }
            for (int t = 0; t < nb; t++)
                for (int64_t r = 0; r < rows; r++) yb[t * rows + r] = kvq_pql_qets_sum(P + t * rows + r, G, nb * rows);
            free(P);
            continue;
        }
        if (p->levels && qet_kernel == 1) {
            float acc[8][8], v[8];
            const float *const Ec[2] = {E[0], E[1]};
            for (int64_t r = 0; r < rows; r++) {
                for (int i = 0; i < 8; i++)
                    kvq_pql_qetx(p, Ec, xb, cols, nb, p->qbits[0], p->stages > 1 ? p->qbits[1] : 0, r, i, acc[i]);
                for (int t = 0; t < nb; t++) {
                    for (int i = 0; i < 8; i++) v[i] = acc[i][t];
                    yb[t * rows + r] = kvq_pql_qetx_combine(v);
                }
            }
            continue;
        }
        if (p->levels) {
            float acc[32][8], v[32];
            for (int64_t r = 0; r < rows; r++) {
                for (int l = 0; l < 32; l++) kvq_pql_qet(p, xb, cols, nb, r, l, acc[l]);
                for (int t = 0; t < nb; t++) {
                    for (int l = 0; l < 32; l++) v[l] = acc[l][t];
                    yb[t * rows + r] = kvq_pql_qet_combine(v);
                }
            }
            continue;
        }
        int64_t n_all = 0;
        for (int s = 0; s < p->stages; s++) n_all += p->m * p->k[s];
        float *L = malloc(sizeof(float) * (size_t)(n_all * nb));
        for (int64_t e = 0; e < n_all; e++) kvq_pql_entry(p, xb, cols, nb, e, p->m * p->k[0], L + e * nb);
        float pu[KVQ_PQL_PHASES][8], c[KVQ_PQL_PHASES];
        for (int64_t rb = 0; rb < p->rows_p / KVQ_PQX_RB; rb++)
            for (int i = 0; i < KVQ_PQX_RB; i++) {
                const int64_t r = rb * KVQ_PQX_RB + i;
                if (r >= rows) break;
                for (int u = 0; u < KVQ_PQL_PHASES; u++) kvq_pql_rows(p, L, p->m * p->k[0], nb, rb, i, u, pu[u]);
                for (int t = 0; t < nb; t++) {
                    for (int u = 0; u < KVQ_PQL_PHASES; u++) c[u] = pu[u][t];
                    yb[t * rows + r] = kvq_pql_combine(c);
                }
            }
        free(L);
    }
    free(E[0]);
    free(E[1]);
}

/** Σ over the terms of row r's product of |c·x| (PQ: every stage's centroid coordinate times its
 *  activation; QET: the decoded weights times theirs): any float summation of those terms is
 *  within γ_N of it. wrow: cols floats of scratch. */
static inline double pqx_row_mag(const kvq_pqx *p, int64_t r, const float *x, float *wrow) {
    double mag = 0;
    if (p->levels) {
        kvq_pqx_row_f32(p, r, wrow);
        for (int64_t c = 0; c < p->cols; c++) mag += fabs((double)wrow[c] * x[c]);
        return mag;
    }
    for (int s = 0; s < p->stages; s++)
        for (int64_t j = 0; j < p->m; j++) {
            const uint32_t c = kvq_pqx_idx(p, s, r, j);
            for (int q = 0; q < p->w; q++) mag += fabs((double)kvq_pqx_cb(p, s, j, q, c) * x[j * p->w + q]);
        }
    return mag;
}

/** The bound's γ_N: N = w + stages·m table additions (PQ), cols + 8 fused multiply-adds and
 *  tree additions (QET): looser than either the CPU's or the GPU's order needs. */
static inline double pqx_gamma(const kvq_pqx *p) {
    const double u = 0x1.0p-24, N = p->levels ? (double)p->cols + 8 : (double)p->w + (double)p->stages * (double)p->m;
    return N * u / (1 - N * u);
}

#endif
