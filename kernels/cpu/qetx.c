// Products straight from the QET execution layout (kernels/pq_layout.h, levels == 3): per
// product the codebooks are expanded to float in slot order (the held copy stays as the file
// stores it). Per token the activations of each group of 8 blocks are transposed once (lane i =
// block i, vector q = coordinate q: shared by every row). A row then takes, per group, the 8
// centroid vectors of its slots as they are (vector t = leaf t of the 8 blocks, lane i = block
// i), and brings each block's activations into leaf order with its own butterfly: 3 levels of
// 8 blends whose lane masks are the blocks' switch bits (moved to the sign bit by one shift
// each). Reference loops first, then AVX2, then the threaded driver.
//
// Summation order (every path; see pq.h): per row and token two 8-lane accumulators a0, a1
// (lane i = block b mod 8); for g = 0, 1, … and t = 0..7, a_{t mod 2}[i] = fma(X*[8g + i + t·D],
// x[8b + σ_b(t)], a_{t mod 2}[i]) with b = 8g + i (one rounding per weight); then v = a0 + a1
// and y = ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). X*[p] = c_1 (+ c_2): the
// decoder's stage sum, so the weights are the decoder's bit for bit.
#include "kernels/cpu/pq.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "formats/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/threads.h"

static int64_t exp_off(const kvq_pqx *w, int s) {
    int64_t o = 0;
    for (int i = 0; i < s; i++) o += w->m * w->k[i] * 8;
    return o;
}


size_t kvq_qetx_expand_floats(const kvq_pqx *w) { return (size_t)exp_off(w, w->stages); }

// AUTO → AVX2 where the CPU has it (kvq_pqx_isa_best's rule; pq.c calls this file, not back).
static kvq_pqx_isa resolve(kvq_pqx_isa isa) {
    const kvq_pqx_isa best = kvq_cpu_features() & KVQ_CPU_AVX2 ? KVQ_PQX_ISA_AVX2 : KVQ_PQX_ISA_REF;
    return isa == KVQ_PQX_ISA_AUTO || (isa == KVQ_PQX_ISA_AVX2 && best != KVQ_PQX_ISA_AVX2) ? best : isa;
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
    for (int64_t r = r0; r < r1; r++)
        for (int tk = 0; tk < n_tok; tk++) {
            const float *xt = x + tk * ldx;
            float a[2][8] = {{0}};
            for (int64_t g = 0; g < w->groups; g++)
                for (int t = 0; t < 8; t++) {
                    const uint32_t c0 = kvq_qetx_idx(w, 0, r, g, t), c1 = w->stages > 1 ? kvq_qetx_idx(w, 1, r, g, t) : 0;
                    for (int i = 0; i < 8; i++) {
                        const int64_t b = 8 * g + i;
                        const uint32_t perm = kvq_qetx_sigma(kvq_qetx_field(w, r, b));
                        float v = cbf[((g * 8 + t) * w->k[0] + c0) * 8 + i];
                        if (w->stages > 1) v = v + cbf[exp_off(w, 1) + ((g * 8 + t) * w->k[1] + c1) * 8 + i];
                        a[t & 1][i] = fmaf(v, xt[8 * b + ((perm >> 3 * t) & 7)], a[t & 1][i]);
                    }
                }
            float v[8];
            for (int i = 0; i < 8; i++) v[i] = a[0][i] + a[1][i];
            y[tk * ldy + r] = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
        }
}

// ---- AVX2

#define QX_AVX2 __attribute__((target("avx2,fma")))
#define QX_INLINE static inline __attribute__((always_inline))

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
            // CQO: a centroid's 8 codes are nb consecutive bytes (8 · nb bits, byte-aligned): for
            // nb <= 16 one 16-byte load, a byte shuffle putting each code's bytes in its lane, a
            // shift and a mask; wider codes: one gather of 32-bit words at their byte offsets
            float mn, st;
            memcpy(&mn, B + 8 * j, 4);
            memcpy(&st, B + 8 * j + 4, 4);
            const __m256 vmn = _mm256_set1_ps(mn), vst = _mm256_set1_ps(st);
            const int nb = w->cb_bits;
            const __m256i mask = _mm256_set1_epi32((int)((1u << nb) - 1u));
            const uint8_t *codes = B + 8 * w->m;
            if (nb <= 16) {
                int8_t ctl[32];
                int32_t sh[8];
                for (int q = 0; q < 8; q++) {
                    const int b0 = (q * nb) >> 3;
                    sh[q] = (q * nb) & 7;
                    for (int u = 0; u < 4; u++) ctl[4 * q + u] = (int8_t)(u < 3 && b0 + u <= 15 ? b0 + u : -1);
                }
                const __m256i vctl = _mm256_loadu_si256((const __m256i *)ctl), vsh = _mm256_loadu_si256((const __m256i *)sh);
                const uint8_t *cp = codes + j * k * nb;
                for (int64_t c = 0; c < k; c++, cp += nb) {
                    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)cp));
                    const __m256i code = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(b, vctl), vsh), mask);
                    const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(code), vst);
                    _mm256_storeu_ps(o + 8 * c, _mm256_add_ps(vmn, t));
                }
                continue;
            }
            const __m256i sev = _mm256_set1_epi32(7);
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
QX_AVX2 QX_INLINE void transpose8(__m256 *V) {
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

// Transposed activations of n_tok <= 8 tokens for groups [g0, g1): xt[(tk·G + g)·64 + 8q + i]
// = x[tk·ldx + 64g + 8i + q].
QX_AVX2 static void xt_avx2(const kvq_pqx *w, const float *x, int n_tok, int64_t ldx, float *xt, int64_t g0, int64_t g1) {
    for (int tk = 0; tk < n_tok; tk++)
        for (int64_t g = g0; g < g1; g++) {
            __m256 V[8];
            for (int i = 0; i < 8; i++) V[i] = _mm256_loadu_ps(x + tk * ldx + 64 * g + 8 * i);
            transpose8(V);
            for (int q = 0; q < 8; q++) _mm256_storeu_ps(xt + (tk * w->groups + g) * 64 + 8 * q, V[q]);
        }
}

// Sign-bit shifts: mask j of lane i = field bit j (the field sits at bit 0 or 4 of lane i's
// dword after the byte shuffle), moved to bit 31.
static const int32_t qx_shl[12][8] = {
#define QX_ROW(j) {31 - (j), 27 - (j), 31 - (j), 27 - (j), 31 - (j), 27 - (j), 31 - (j), 27 - (j)}
    QX_ROW(0), QX_ROW(1), QX_ROW(2), QX_ROW(3), QX_ROW(4), QX_ROW(5),
    QX_ROW(6), QX_ROW(7), QX_ROW(8), QX_ROW(9), QX_ROW(10), QX_ROW(11),
#undef QX_ROW
};

// The 8 blocks' switch fields of a group, lane i = block i (bytes ⌊1.5i⌋, ⌊1.5i⌋ + 1).
QX_AVX2 QX_INLINE __m256i group_fields(const uint8_t *f) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)f));
    const __m256i ctl = _mm256_setr_epi8(0, 1, -1, -1, 1, 2, -1, -1, 3, 4, -1, -1, 4, 5, -1, -1,
                                         6, 7, -1, -1, 7, 8, -1, -1, 9, 10, -1, -1, 10, 11, -1, -1);
    return _mm256_shuffle_epi8(b, ctl);
}
QX_AVX2 QX_INLINE __m256 qx_mask(__m256i F, int j) {
    return _mm256_castsi256_ps(_mm256_sllv_epi32(F, _mm256_loadu_si256((const __m256i *)qx_shl[j])));
}

// Q[t] lane i = x[8b + σ_b(t)], b = 8g + i: the forward swap tree of every block at once on its
// transposed activations X (X[q] lane i = x[8b + q]).
QX_AVX2 QX_INLINE void butterfly(__m256i F, const float *X, __m256 *Q) {
    __m256 N[8], S[8];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 4; j++) {
        const __m256 m = qx_mask(F, j), a = _mm256_loadu_ps(X + 16 * j), b = _mm256_loadu_ps(X + 16 * j + 8);
        N[j] = _mm256_blendv_ps(a, b, m);
        N[4 + j] = _mm256_blendv_ps(b, a, m);
    }
    _Pragma("GCC unroll 8")
    for (int h = 0; h < 2; h++)
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 2; j++) {
            const __m256 m = qx_mask(F, 4 + 2 * h + j);
            S[4 * h + j] = _mm256_blendv_ps(N[4 * h + 2 * j], N[4 * h + 2 * j + 1], m);
            S[4 * h + 2 + j] = _mm256_blendv_ps(N[4 * h + 2 * j + 1], N[4 * h + 2 * j], m);
        }
    _Pragma("GCC unroll 8")
    for (int q = 0; q < 4; q++) {
        const __m256 m = qx_mask(F, 8 + q);
        Q[2 * q] = _mm256_blendv_ps(S[2 * q], S[2 * q + 1], m);
        Q[2 * q + 1] = _mm256_blendv_ps(S[2 * q + 1], S[2 * q], m);
    }
}

QX_AVX2 QX_INLINE uint32_t idx_at(const void *p, int qbits, int64_t o) {
    if (qbits == 8) return ((const uint8_t *)p)[o];
    if (qbits == 4) return (((const uint8_t *)p)[o >> 1] >> (4 * (o & 1))) & 15u;
    return ((const uint16_t *)p)[o];
}

// Centroid vector of leaf t (lane i = block i's value): stage 1 (+ stage 2).
QX_AVX2 QX_INLINE __m256 leaf(const kvq_pqx *w, const float *E0, const float *E1, int64_t o, int t, int q0, int q1) {
    __m256 v = _mm256_loadu_ps(E0 + ((int64_t)t * w->k[0] + idx_at(w->idx[0], q0, o + t)) * 8);
    if (q1) v = _mm256_add_ps(v, _mm256_loadu_ps(E1 + ((int64_t)t * w->k[1] + idx_at(w->idx[1], q1, o + t)) * 8));
    return v;
}

QX_AVX2 QX_INLINE float hsum8(__m256 a0, __m256 a1) {
    const __m256 v = _mm256_add_ps(a0, a1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); // v0+v4, v1+v5, v2+v6, v3+v7
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                     // (v0+v4)+(v2+v6), (v1+v5)+(v3+v7)
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

// Rows [r0, r1) for n_tok <= 8 tokens whose transposed activations are in xt; q0, q1 the
// stages' index bits (q1 = 0: one stage), constants in each instance.
QX_AVX2 QX_INLINE void rows_body(const kvq_pqx *w, const float *cbf, const float *xt, int n_tok, float *y, int64_t ldy,
                                 int64_t r0, int64_t r1, int q0, int q1) {
    const int64_t G = w->groups;
    const float *E1 = cbf + exp_off(w, 1);
    if (n_tok == 1) { // decode: the row's accumulators stay in registers
        for (int64_t r = r0; r < r1; r++) {
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            for (int64_t g = 0; g < G; g++) {
                const int64_t o = (r * G + g) * 8;
                const float *e0 = cbf + g * 8 * w->k[0] * 8, *e1 = q1 ? E1 + g * 8 * w->k[1] * 8 : NULL;
                __m256 Q[8];
                butterfly(group_fields(w->sw + (r * G + g) * KVQ_QETX_SW_BYTES), xt + g * 64, Q);
                _Pragma("GCC unroll 8")
                for (int t = 0; t < 8; t += 2) {
                    a0 = _mm256_fmadd_ps(leaf(w, e0, e1, o, t, q0, q1), Q[t], a0);
                    a1 = _mm256_fmadd_ps(leaf(w, e0, e1, o, t + 1, q0, q1), Q[t + 1], a1);
                }
            }
            y[r] = hsum8(a0, a1);
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        __m256 A[8][2];
        for (int tk = 0; tk < n_tok; tk++) A[tk][0] = A[tk][1] = _mm256_setzero_ps();
        for (int64_t g = 0; g < G; g++) {
            const int64_t o = (r * G + g) * 8;
            const __m256i F = group_fields(w->sw + (r * G + g) * KVQ_QETX_SW_BYTES);
            const float *e0 = cbf + g * 8 * w->k[0] * 8, *e1 = q1 ? E1 + g * 8 * w->k[1] * 8 : NULL;
            __m256 V[8];
            _Pragma("GCC unroll 8")
            for (int t = 0; t < 8; t++) V[t] = leaf(w, e0, e1, o, t, q0, q1);
            for (int tk = 0; tk < n_tok; tk++) {
                __m256 Q[8];
                butterfly(F, xt + (tk * G + g) * 64, Q);
                __m256 a0 = A[tk][0], a1 = A[tk][1];
                _Pragma("GCC unroll 8")
                for (int t = 0; t < 8; t += 2) {
                    a0 = _mm256_fmadd_ps(V[t], Q[t], a0);
                    a1 = _mm256_fmadd_ps(V[t + 1], Q[t + 1], a1);
                }
                A[tk][0] = a0, A[tk][1] = a1;
            }
        }
        for (int tk = 0; tk < n_tok; tk++) y[tk * ldy + r] = hsum8(A[tk][0], A[tk][1]);
    }
}

#define QX_INST(a, b)                                                                                              \
    QX_AVX2 static void rows_##a##_##b(const kvq_pqx *w, const float *cbf, const float *xt, int n_tok, float *y,     \
                                       int64_t ldy, int64_t r0, int64_t r1) {                                      \
        rows_body(w, cbf, xt, n_tok, y, ldy, r0, r1, a, b);                                                         \
    }
QX_INST(4, 0) QX_INST(8, 0) QX_INST(16, 0)
QX_INST(4, 4) QX_INST(8, 4) QX_INST(16, 4)
QX_INST(4, 8) QX_INST(8, 8) QX_INST(16, 8)
QX_INST(4, 16) QX_INST(8, 16) QX_INST(16, 16)

QX_AVX2 static void rows_avx2(const kvq_pqx *w, const float *cbf, const float *xt, int n_tok, float *y, int64_t ldy,
                              int64_t r0, int64_t r1) {
    typedef void (*fn)(const kvq_pqx *, const float *, const float *, int, float *, int64_t, int64_t, int64_t);
    static const fn tab[4][3] = {{rows_4_0, rows_8_0, rows_16_0},
                                 {rows_4_4, rows_8_4, rows_16_4},
                                 {rows_4_8, rows_8_8, rows_16_8},
                                 {rows_4_16, rows_8_16, rows_16_16}};
    const int a = w->qbits[0] == 4 ? 0 : w->qbits[0] == 8 ? 1 : 2;
    const int b = w->stages < 2 ? 0 : w->qbits[1] == 4 ? 1 : w->qbits[1] == 8 ? 2 : 3;
    tab[b][a](w, cbf, xt, n_tok, y, ldy, r0, r1);
}

// ---- entry points

void kvq_qetx_expand(const kvq_pqx *w, float *cbf, int64_t sl0, int64_t sl1, kvq_pqx_isa isa) {
    if (resolve(isa) == KVQ_PQX_ISA_AVX2) expand_avx2(w, cbf, sl0, sl1);
    else expand_ref(w, cbf, sl0, sl1);
}

void kvq_qetx_gemm_rows(const kvq_pqx *w, const float *cbf, const float *x, int n_tok, int64_t ldx, float *y,
                        int64_t ldy, int64_t r0, int64_t r1, kvq_pqx_isa isa) {
    if (resolve(isa) != KVQ_PQX_ISA_AVX2) {
        gemm_ref(w, cbf, x, n_tok, ldx, y, ldy, r0, r1);
        return;
    }
    float *xt = malloc(sizeof(float) * 8 * (size_t)w->cols); // tests and benchmarks; the driver uses its scratch
    KVQ_ASSERT(xt);
    for (int t0 = 0; t0 < n_tok; t0 += 8) {
        const int nb = n_tok - t0 < 8 ? n_tok - t0 : 8;
        xt_avx2(w, x + t0 * ldx, nb, ldx, xt, 0, w->groups);
        rows_avx2(w, cbf, xt, nb, y + t0 * ldy, ldy, r0, r1);
    }
    free(xt);
}

size_t kvq_qetx_scratch(const kvq_pqx *parts, int n_part) {
    size_t n = 8 * (size_t)parts[0].cols;
    for (int p = 0; p < n_part; p++) n += kvq_qetx_expand_floats(&parts[p]);
    return n;
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
    float *xt = scratch + o; // 8 tokens' transposed activations, shared by the blocks (same input)
    const int nt = kvq_nthreads(n_threads);
    const int64_t cols = parts[0].cols, G = parts[0].groups;
#pragma omp parallel num_threads(nt) if (work * n_tok > 65536)
    {
        const int64_t nth = omp_get_num_threads(), id = omp_get_thread_num();
        for (int64_t i = n_sl * id / nth, i1 = n_sl * (id + 1) / nth; i < i1;) {
            const int p = part_of(sl_end, i);
            const int64_t s0 = i - (p ? sl_end[p - 1] : 0), n = sl_end[p] - i < i1 - i ? sl_end[p] - i : i1 - i;
            kvq_qetx_expand(&parts[p], scratch + off[p], s0, s0 + n, isa);
            i += n;
        }
        for (int t0 = 0; t0 < n_tok; t0 += 8) {
            const int nb = n_tok - t0 < 8 ? n_tok - t0 : 8;
            if (isa == KVQ_PQX_ISA_AVX2) xt_avx2(&parts[0], x + t0 * cols, nb, cols, xt, G * id / nth, G * (id + 1) / nth);
#pragma omp barrier
            for (int64_t u = n_rows * id / nth, u1 = n_rows * (id + 1) / nth; u < u1;) {
                const int p = part_of(row_end, u);
                const int64_t ra = u - (p ? row_end[p - 1] : 0), n = row_end[p] - u < u1 - u ? row_end[p] - u : u1 - u;
                if (isa == KVQ_PQX_ISA_AVX2) rows_avx2(&parts[p], scratch + off[p], xt, nb, y + t0 * ldy + row0[p], ldy, ra, ra + n);
                else gemm_ref(&parts[p], scratch + off[p], x + t0 * cols, nb, cols, y + t0 * ldy + row0[p], ldy, ra, ra + n);
                u += n;
            }
            if (t0 + 8 < n_tok) { // the next chunk overwrites xt (the region's end is a barrier too)
#pragma omp barrier
            }
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
