// Products straight from the QET execution layout (kernels/pq_layout.h, levels == 3): per
// product the codebooks are expanded to float in slot order (the held copy stays as the file
// stores it), then every row rebuilds its X* values from the centroids one group of 64 weights
// at a time, transposes them so that each block's 8 leaves share a vector, permutes the
// block's 8 activations by the block's σ (a 4096-entry table by its 12 switch bits) and
// multiply-adds. Reference loops first, then AVX2, then the threaded driver.
//
// Summation order (every path; see kvq_qetx_gemm_rows in pq.h): per row and token, two
// 8-lane accumulators (lane = leaf t), block b into a[b & 1] in block order with one fused
// multiply-add per weight, a[t] = fma(X*[b + t·D], x[8b + σ_b(t)], a[t]); then
// v = a0 + a1 and y = ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
// X*[p] = c_1 (+ c_2): the decoder's stage sum, so the weights are the decoder's bit for bit.
#include "kernels/cpu/pq.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/threads.h"

static uint32_t perm_tab[4096];
static pthread_once_t perm_once = PTHREAD_ONCE_INIT;
static void perm_init(void) {
    for (uint32_t f = 0; f < 4096; f++) perm_tab[f] = kvq_qetx_sigma(f);
}
static const uint32_t *perms(void) {
    pthread_once(&perm_once, perm_init);
    return perm_tab;
}

static int64_t exp_off(const kvq_pqx *w, int s) {
    int64_t o = 0;
    for (int i = 0; i < s; i++) o += w->m * w->k[i] * 8;
    return o;
}

size_t kvq_qetx_expand_floats(const kvq_pqx *w) { return (size_t)exp_off(w, w->stages); }

static kvq_pqx_isa resolve(kvq_pqx_isa isa) {
    if (isa == KVQ_PQX_ISA_AUTO || (isa == KVQ_PQX_ISA_AVX2 && !(kvq_cpu_features() & KVQ_CPU_AVX2)))
        return kvq_pqx_isa_best();
    return isa;
}

// The 8 indices of stage s for row r, group g (slot order t = 0..7).
static inline void idx8(const kvq_pqx *w, int s, int64_t r, int64_t g, uint32_t c[8]) {
    const int64_t o = (r * w->groups + g) * 8;
    uint64_t v;
    if (w->qbits[s] == 4) {
        uint32_t u;
        memcpy(&u, (const uint8_t *)w->idx[s] + o / 2, 4);
        for (int t = 0; t < 8; t++) c[t] = (u >> 4 * t) & 15u;
    } else if (w->qbits[s] == 8) {
        memcpy(&v, (const uint8_t *)w->idx[s] + o, 8);
        for (int t = 0; t < 8; t++) c[t] = (uint32_t)(v >> 8 * t) & 255u;
    } else {
        const uint16_t *p = (const uint16_t *)w->idx[s] + o;
        for (int t = 0; t < 8; t++) c[t] = p[t];
    }
}

// ---- plain reference

static void expand_ref(const kvq_pqx *w, float *cbf, int64_t sl0, int64_t sl1) {
    for (int s = 0; s < w->stages; s++) {
        float *E = cbf + exp_off(w, s);
        const int64_t k = w->k[s];
        for (int64_t sl = sl0; sl < sl1; sl++) {
            const int64_t j = sl / 8 + (sl % 8) * w->groups;
            for (int64_t c = 0; c < k; c++)
                for (int q = 0; q < 8; q++) E[(sl * k + c) * 8 + q] = kvq_qetx_cb(w, s, j, c, q);
        }
    }
}

static void gemm_ref(const kvq_pqx *w, const float *cbf, const float *x, int n_tok, int64_t ldx, float *y, int64_t ldy,
                     int64_t r0, int64_t r1) {
    const int64_t D = w->cols / 8;
    for (int64_t r = r0; r < r1; r++)
        for (int tk = 0; tk < n_tok; tk++) {
            const float *xt = x + tk * ldx;
            float a[2][8] = {{0}};
            for (int64_t b = 0; b < D; b++) {
                const int64_t g = b / 8;
                const int i = (int)(b % 8);
                const uint32_t perm = kvq_qetx_sigma(kvq_qetx_field(w, r, b));
                uint32_t c[2][8];
                for (int s = 0; s < w->stages; s++) idx8(w, s, r, g, c[s]);
                for (int t = 0; t < 8; t++) {
                    float v = cbf[((g * 8 + t) * w->k[0] + c[0][t]) * 8 + i];
                    if (w->stages > 1) v = v + cbf[exp_off(w, 1) + ((g * 8 + t) * w->k[1] + c[1][t]) * 8 + i];
                    a[b & 1][t] = fmaf(v, xt[8 * b + ((perm >> 3 * t) & 7)], a[b & 1][t]);
                }
            }
            float v[8];
            for (int t = 0; t < 8; t++) v[t] = a[0][t] + a[1][t];
            y[tk * ldy + r] = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
        }
}

// ---- AVX2

#define QX_AVX2 __attribute__((target("avx2,fma")))

QX_AVX2 static void expand_avx2(const kvq_pqx *w, float *cbf, int64_t sl0, int64_t sl1) {
    if (w->cb_type == KVQ_PQX_CB_F32) { expand_ref(w, cbf, sl0, sl1); return; } // a copy
    const __m256i q8 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int s = 0; s < w->stages; s++) {
        float *E = cbf + exp_off(w, s);
        const int64_t k = w->k[s];
        const uint8_t *B = (const uint8_t *)w->cb[s];
        for (int64_t sl = sl0; sl < sl1; sl++) {
            const int64_t j = sl / 8 + (sl % 8) * w->groups;
            float *o = E + sl * k * 8;
            if (w->cb_type == KVQ_PQX_CB_BF16) {
                const uint16_t *h = (const uint16_t *)B + j * k * 8;
                for (int64_t c = 0; c < k; c++) {
                    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + 8 * c)));
                    _mm256_storeu_ps(o + 8 * c, _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)));
                }
                continue;
            }
            // CQO: 8 codes of cb_bits from one gather of 32-bit words at their byte offsets
            float mn, st;
            memcpy(&mn, B + 8 * j, 4);
            memcpy(&st, B + 8 * j + 4, 4);
            const __m256 vmn = _mm256_set1_ps(mn), vst = _mm256_set1_ps(st);
            const int nb = w->cb_bits;
            const __m256i mask = _mm256_set1_epi32((int)((1u << nb) - 1u)), sev = _mm256_set1_epi32(7);
            const uint8_t *codes = B + 8 * w->m;
            __m256i pos = _mm256_mullo_epi32(_mm256_add_epi32(_mm256_set1_epi32((int)(j * k * 8)), q8), _mm256_set1_epi32(nb));
            const __m256i step = _mm256_set1_epi32(8 * nb);
            for (int64_t c = 0; c < k; c++, pos = _mm256_add_epi32(pos, step)) {
                const __m256i wd = _mm256_i32gather_epi32((const int *)codes, _mm256_srli_epi32(pos, 3), 1);
                const __m256i code = _mm256_and_si256(_mm256_srlv_epi32(wd, _mm256_and_si256(pos, sev)), mask);
                const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(code), vst);
                _mm256_storeu_ps(o + 8 * c, _mm256_add_ps(vmn, t));
            }
        }
    }
}

// U[i][t] = V[t][i]
QX_AVX2 static inline void transpose8(__m256 *V) {
    const __m256 t0 = _mm256_unpacklo_ps(V[0], V[1]), t1 = _mm256_unpackhi_ps(V[0], V[1]);
    const __m256 t2 = _mm256_unpacklo_ps(V[2], V[3]), t3 = _mm256_unpackhi_ps(V[2], V[3]);
    const __m256 t4 = _mm256_unpacklo_ps(V[4], V[5]), t5 = _mm256_unpackhi_ps(V[4], V[5]);
    const __m256 t6 = _mm256_unpacklo_ps(V[6], V[7]), t7 = _mm256_unpackhi_ps(V[6], V[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    V[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    V[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    V[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    V[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    V[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    V[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    V[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    V[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// The group's 64 X* values, transposed: U[i] holds block 8g + i's 8 leaves.
QX_AVX2 static inline void group_weights(const kvq_pqx *w, const float *cbf, int64_t r, int64_t g, __m256 *U) {
    uint32_t c[8];
    idx8(w, 0, r, g, c);
    const int64_t k0 = w->k[0];
    const float *E = cbf + g * 8 * k0 * 8;
    for (int t = 0; t < 8; t++) U[t] = _mm256_loadu_ps(E + ((int64_t)t * k0 + c[t]) * 8);
    if (w->stages > 1) {
        idx8(w, 1, r, g, c);
        const int64_t k1 = w->k[1];
        const float *E2 = cbf + exp_off(w, 1) + g * 8 * k1 * 8;
        for (int t = 0; t < 8; t++) U[t] = _mm256_add_ps(U[t], _mm256_loadu_ps(E2 + ((int64_t)t * k1 + c[t]) * 8));
    }
    transpose8(U);
}

// The 8 σ of a group as vpermps index vectors (vpermps reads the low 3 bits of each lane).
QX_AVX2 static inline void group_perms(const kvq_pqx *w, const uint32_t *PT, int64_t r, int64_t g, __m256i *P) {
    const uint8_t *f = w->sw + (r * w->groups + g) * KVQ_QETX_SW_BYTES;
    uint64_t fa, fb;
    memcpy(&fa, f, 8);
    memcpy(&fb, f + 6, 8);
    const __m256i sh = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
    for (int i = 0; i < 4; i++) {
        P[i] = _mm256_srlv_epi32(_mm256_set1_epi32((int)PT[(fa >> 12 * i) & 0xfff]), sh);
        P[4 + i] = _mm256_srlv_epi32(_mm256_set1_epi32((int)PT[(fb >> 12 * i) & 0xfff]), sh);
    }
}

QX_AVX2 static inline float hsum8(__m256 a0, __m256 a1) {
    const __m256 v = _mm256_add_ps(a0, a1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); // v0+v4, v1+v5, v2+v6, v3+v7
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                     // (v0+v4)+(v2+v6), (v1+v5)+(v3+v7)
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

QX_AVX2 static void matvec_avx2(const kvq_pqx *w, const float *cbf, const float *x, float *y, int64_t r0, int64_t r1) {
    const uint32_t *PT = perms();
    const int64_t G = w->groups;
    for (int64_t r = r0; r < r1; r++) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int64_t g = 0; g < G; g++) {
            __m256 U[8];
            __m256i P[8];
            group_weights(w, cbf, r, g, U);
            group_perms(w, PT, r, g, P);
            const float *xg = x + 64 * g;
            for (int i = 0; i < 8; i += 2) {
                a0 = _mm256_fmadd_ps(U[i], _mm256_permutevar8x32_ps(_mm256_loadu_ps(xg + 8 * i), P[i]), a0);
                a1 = _mm256_fmadd_ps(U[i + 1], _mm256_permutevar8x32_ps(_mm256_loadu_ps(xg + 8 * i + 8), P[i + 1]), a1);
            }
        }
        y[r] = hsum8(a0, a1);
    }
}

// n_tok tokens: each group's weights and permutations are built once and used by up to 8 tokens.
QX_AVX2 static void gemm_avx2(const kvq_pqx *w, const float *cbf, const float *x, int n_tok, int64_t ldx, float *y,
                              int64_t ldy, int64_t r0, int64_t r1) {
    const uint32_t *PT = perms();
    const int64_t G = w->groups;
    for (int64_t r = r0; r < r1; r++)
        for (int t0 = 0; t0 < n_tok; t0 += 8) {
            const int nb = n_tok - t0 < 8 ? n_tok - t0 : 8;
            __m256 A[8][2];
            for (int tk = 0; tk < nb; tk++) A[tk][0] = A[tk][1] = _mm256_setzero_ps();
            for (int64_t g = 0; g < G; g++) {
                __m256 U[8];
                __m256i P[8];
                group_weights(w, cbf, r, g, U);
                group_perms(w, PT, r, g, P);
                for (int tk = 0; tk < nb; tk++) {
                    const float *xg = x + (t0 + tk) * ldx + 64 * g;
                    __m256 a0 = A[tk][0], a1 = A[tk][1];
                    for (int i = 0; i < 8; i += 2) {
                        a0 = _mm256_fmadd_ps(U[i], _mm256_permutevar8x32_ps(_mm256_loadu_ps(xg + 8 * i), P[i]), a0);
                        a1 = _mm256_fmadd_ps(U[i + 1], _mm256_permutevar8x32_ps(_mm256_loadu_ps(xg + 8 * i + 8), P[i + 1]), a1);
                    }
                    A[tk][0] = a0, A[tk][1] = a1;
                }
            }
            for (int tk = 0; tk < nb; tk++) y[(t0 + tk) * ldy + r] = hsum8(A[tk][0], A[tk][1]);
        }
}

// ---- entry points

void kvq_qetx_expand(const kvq_pqx *w, float *cbf, int64_t sl0, int64_t sl1, kvq_pqx_isa isa) {
    if (resolve(isa) == KVQ_PQX_ISA_AVX2) expand_avx2(w, cbf, sl0, sl1);
    else expand_ref(w, cbf, sl0, sl1);
}

void kvq_qetx_gemm_rows(const kvq_pqx *w, const float *cbf, const float *x, int n_tok, int64_t ldx, float *y,
                        int64_t ldy, int64_t r0, int64_t r1, kvq_pqx_isa isa) {
    if (resolve(isa) != KVQ_PQX_ISA_AVX2) gemm_ref(w, cbf, x, n_tok, ldx, y, ldy, r0, r1);
    else if (n_tok == 1) matvec_avx2(w, cbf, x, y, r0, r1);
    else gemm_avx2(w, cbf, x, n_tok, ldx, y, ldy, r0, r1);
}

static int part_of(const int64_t *end, int64_t i) {
    int p = 0;
    while (i >= end[p]) p++;
    return p;
}

void kvq_qetx_matmul(const kvq_pqx *parts, int n_part, const int *row0, const float *x, int n_tok, float *y,
                     int64_t ldy, float *scratch, kvq_pqx_isa isa, int n_threads) {
    isa = resolve(isa);
    enum { MAXP = 3 };
    size_t off[MAXP];
    int64_t sl_end[MAXP], row_end[MAXP], n_sl = 0, n_rows = 0, work = 0;
    size_t o = 0;
    for (int p = 0; p < n_part && p < MAXP; p++) {
        off[p] = o;
        o += kvq_qetx_expand_floats(&parts[p]);
        sl_end[p] = n_sl += parts[p].m;
        row_end[p] = n_rows += parts[p].rows;
        work += parts[p].rows * parts[p].cols;
    }
    const int nt = kvq_nthreads(n_threads);
    const int64_t cols = parts[0].cols;
#pragma omp parallel num_threads(nt) if (work * n_tok > 65536)
    {
        const int64_t nth = omp_get_num_threads(), id = omp_get_thread_num();
        for (int64_t i = n_sl * id / nth, i1 = n_sl * (id + 1) / nth; i < i1;) {
            const int p = part_of(sl_end, i);
            const int64_t s0 = i - (p ? sl_end[p - 1] : 0), n = sl_end[p] - i < i1 - i ? sl_end[p] - i : i1 - i;
            kvq_qetx_expand(&parts[p], scratch + off[p], s0, s0 + n, isa);
            i += n;
        }
#pragma omp barrier
        for (int64_t u = n_rows * id / nth, u1 = n_rows * (id + 1) / nth; u < u1;) {
            const int p = part_of(row_end, u);
            const int64_t ra = u - (p ? row_end[p - 1] : 0), n = row_end[p] - u < u1 - u ? row_end[p] - u : u1 - u;
            kvq_qetx_gemm_rows(&parts[p], scratch + off[p], x, n_tok, cols, y + row0[p], ldy, ra, ra + n, isa);
            u += n;
        }
    }
}

void kvq_qetx_row_f32(const kvq_pqx *w, int64_t r, float *out) {
    const int64_t D = w->cols / 8, G = w->groups;
    for (int64_t b = 0; b < D; b++) {
        const int64_t g = b / 8;
        const uint32_t perm = kvq_qetx_sigma(kvq_qetx_field(w, r, b));
        for (int t = 0; t < 8; t++) {
            const int64_t j = g + t * G;
            float v = kvq_qetx_cb(w, 0, j, kvq_qetx_idx(w, 0, r, g, t), (int)(b % 8));
            if (w->stages > 1) v = v + kvq_qetx_cb(w, 1, j, kvq_qetx_idx(w, 1, r, g, t), (int)(b % 8));
            out[8 * b + ((perm >> 3 * t) & 7)] = v;
        }
    }
}

size_t kvq_qetx_bytes(const kvq_pqx *w) {
    size_t b = (size_t)(w->rows * w->groups) * KVQ_QETX_SW_BYTES;
    for (int s = 0; s < w->stages; s++) b += (size_t)(w->rows * w->m) * (size_t)w->qbits[s] / 8 + w->cb_size[s];
    return b;
}
