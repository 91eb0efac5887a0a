// Products from the PQ execution layout (see pq.h for the summation order every path keeps):
// per-token tables, then one table lookup per (row, subspace). Reference loops first, then
// the AVX2 bodies (gathers for one token; for 8 tokens one 8-float load per lookup), then the
// driver that splits tables and rows over an OpenMP team.
#include "kernels/cpu/pq.h"

#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/hqx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/threads.h"

kvq_pqx_isa kvq_pqx_isa_best(void) { return kvq_cpu_features() & KVQ_CPU_AVX2 ? KVQ_PQX_ISA_AVX2 : KVQ_PQX_ISA_REF; }

const char *kvq_pqx_isa_name(kvq_pqx_isa isa) {
    return isa == KVQ_PQX_ISA_AVX2 ? "avx2" : isa == KVQ_PQX_ISA_REF ? "ref" : "auto";
}

// AUTO → the best path; a path the CPU lacks → the reference.
static kvq_pqx_isa resolve(kvq_pqx_isa isa) {
    if (isa == KVQ_PQX_ISA_AUTO || (isa == KVQ_PQX_ISA_AVX2 && !(kvq_cpu_features() & KVQ_CPU_AVX2)))
        return kvq_pqx_isa_best();
    return isa;
}

// First table entry of stage s (one token's tables: stage 1's m·k_1 entries, then stage 2's).
static int64_t stage_off(const kvq_pqx *w, int s) {
    int64_t o = 0;
    for (int i = 0; i < s; i++) o += w->m * w->k[i];
    return o;
}

size_t kvq_pqx_lut_floats(const kvq_pqx *w) { return (size_t)stage_off(w, w->stages); }

// ---- plain reference

static void lut_ref(const kvq_pqx *w, const float *x, float *lut, int64_t j0, int64_t j1) {
    for (int s = 0; s < w->stages; s++) {
        float *L = lut + stage_off(w, s);
        const int64_t k = w->k[s];
        for (int64_t j = j0; j < j1; j++) {
            const float *xj = x + j * w->w;
            for (int64_t c = 0; c < k; c++) {
                float acc = kvq_pqx_cb(w, s, j, 0, c) * xj[0];
                for (int q = 1; q < w->w; q++) {
                    float p = kvq_pqx_cb(w, s, j, q, c) * xj[q];
                    acc = acc + p;
                }
                L[j * k + c] = acc;
            }
        }
    }
}

static void matvec_ref(const kvq_pqx *w, const float *lut, float *y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        float acc = 0.0f;
        for (int s = 0; s < w->stages; s++) {
            const float *L = lut + stage_off(w, s);
            for (int64_t j = 0; j < w->m; j++) acc = acc + L[j * w->k[s] + kvq_pqx_idx(w, s, r, j)];
        }
        y[r] = acc;
    }
}

static void lutb_ref(const kvq_pqx *w, const float *x, int n_tok, int64_t ldx, float *lutb, int64_t j0, int64_t j1) {
    for (int s = 0; s < w->stages; s++) {
        float *L = lutb + KVQ_PQX_TB * stage_off(w, s);
        const int64_t k = w->k[s];
        for (int64_t j = j0; j < j1; j++)
            for (int64_t c = 0; c < k; c++)
                for (int t = 0; t < KVQ_PQX_TB; t++) {
                    float acc = 0.0f;
                    if (t < n_tok) {
                        const float *xj = x + t * ldx + j * w->w;
                        acc = kvq_pqx_cb(w, s, j, 0, c) * xj[0];
                        for (int q = 1; q < w->w; q++) {
                            float p = kvq_pqx_cb(w, s, j, q, c) * xj[q];
                            acc = acc + p;
                        }
                    }
                    L[(j * k + c) * KVQ_PQX_TB + t] = acc;
                }
    }
}

static void gemm_ref(const kvq_pqx *w, const float *lutb, int n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
        for (int t = 0; t < n_tok; t++) {
            float acc = 0.0f;
            for (int s = 0; s < w->stages; s++) {
                const float *L = lutb + KVQ_PQX_TB * stage_off(w, s);
                for (int64_t j = 0; j < w->m; j++)
                    acc = acc + L[(j * w->k[s] + kvq_pqx_idx(w, s, r, j)) * KVQ_PQX_TB + t];
            }
            y[t * ldy + r] = acc;
        }
}

// ---- AVX2

#define PQ_AVX2 __attribute__((target("avx2,fma")))

// 8 codebook values of subspace j at element offset o of stage s, as floats (bf16: widened
// exactly; CQO: min + code·step, the product rounded first, as kvq_pqx_cb; split CQO codes: o is
// the padded order's offset, cb8_split).
PQ_AVX2 static inline __m256 cb8(const kvq_pqx *w, int s, int64_t j, int64_t o) {
    if (w->cb_type == KVQ_PQX_CB_F32) return _mm256_loadu_ps((const float *)w->cb[s] + o);
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w->cb[s] + o)));
    if (w->cb_type == KVQ_PQX_CB_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    if (w->cb_type == KVQ_PQX_CB_F16) { // kvq_pqx_f16 in integers (no F16C needed); codebooks are finite
        const __m256i em = _mm256_and_si256(h, _mm256_set1_epi32(0x7fff));
        const __m256i sg = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
        const __m256 nrm = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(em, 13), _mm256_set1_epi32(112 << 23)));
        const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(em), _mm256_set1_ps(0x1p-24f));
        const __m256 v = _mm256_blendv_ps(nrm, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x400), em)));
        return _mm256_or_ps(v, _mm256_castsi256_ps(sg));
    }
    const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(h), _mm256_set1_ps(w->cb_ms[s][2 * j + 1]));
    return _mm256_add_ps(_mm256_set1_ps(w->cb_ms[s][2 * j]), t);
}

// cb8 for split CQO codes (cbq_bits): o8 = (j·w + q)·k8 + c, the padded order's offset with c a
// multiple of 8, so the 8 codes are one whole group: 8 low bytes, then h = cbq_bits − 8 high bits
// each from the group's h bytes (4 loaded for h <= 4; else 8, lanes 4..7 from the upper 4h bits).
PQ_AVX2 static inline __m256 cb8_split(const kvq_pqx *w, int s, int64_t j, int64_t o8) {
    __m256i code = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((const uint8_t *)w->cb[s] + o8)));
    if (w->cbq_bits > 8) {
        const int h = w->cbq_bits - 8;
        const uint8_t *g = w->cb_hi[s] + (o8 >> 3) * h;
        __m256i hv, sh;
        if (h <= 4) {
            int32_t v;
            memcpy(&v, g, 4);
            hv = _mm256_set1_epi32(v);
            sh = _mm256_setr_epi32(0, h, 2 * h, 3 * h, 4 * h, 5 * h, 6 * h, 7 * h);
        } else {
            uint64_t v;
            memcpy(&v, g, 8);
            hv = _mm256_set_m128i(_mm_set1_epi32((int)(uint32_t)(v >> (4 * h))), _mm_set1_epi32((int)(uint32_t)v));
            sh = _mm256_setr_epi32(0, h, 2 * h, 3 * h, 0, h, 2 * h, 3 * h);
        }
        const __m256i hb = _mm256_and_si256(_mm256_srlv_epi32(hv, sh), _mm256_set1_epi32((1 << h) - 1));
        code = _mm256_or_si256(code, _mm256_slli_epi32(hb, 8));
    }
    const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(code), _mm256_set1_ps(w->cb_ms[s][2 * j + 1]));
    return _mm256_add_ps(_mm256_set1_ps(w->cb_ms[s][2 * j]), t);
}

// 8 indices (one row block, subspace j) of stage s as int32.
PQ_AVX2 static inline __m256i idx8(const kvq_pqx *w, int s, int64_t rb, int64_t j) {
    const int64_t o = ((rb / KVQ_PQX_RB) * w->m + j) * KVQ_PQX_RB;
    if (w->ib[s] == 1) return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((const uint8_t *)w->idx[s] + o)));
    return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w->idx[s] + o)));
}

// 8 indices of a lane-packed stage (one row block; q: its group's word 0): the b-bit field at bit o
// of each lane's words, which may straddle two of them.
PQ_AVX2 static inline __m256i pk8(const uint32_t *q, int o, int b, __m256i mask) {
    const int u = o >> 5, sh = o & 31;
    __m256i v = _mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(q + u * KVQ_PQX_RB)), _mm_cvtsi32_si128(sh));
    if (sh + b > 32)
        v = _mm256_or_si256(v, _mm256_sll_epi32(_mm256_loadu_si256((const __m256i *)(q + (u + 1) * KVQ_PQX_RB)),
                                                _mm_cvtsi32_si128(32 - sh)));
    return _mm256_and_si256(v, mask);
}

// 8 indices of a split stage (one row block, subspace j; lo: its 8 low bytes, hi: its h bytes of
// high bits, 4 bytes loaded): lo | ((hi >> h·lane) & mask) << 8.
PQ_AVX2 static inline __m256i sp8(const uint8_t *lo, const uint8_t *hi, __m256i shv, __m256i mask) {
    int32_t hv;
    memcpy(&hv, hi, 4);
    const __m256i h = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(hv), shv), mask);
    return _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)lo)), _mm256_slli_epi32(h, 8));
}
PQ_AVX2 static inline __m256i sp_shifts(int h) { return _mm256_setr_epi32(0, h, 2 * h, 3 * h, 4 * h, 5 * h, 6 * h, 7 * h); }

PQ_AVX2 static void lut_avx2(const kvq_pqx *w, const float *x, float *lut, int64_t j0, int64_t j1) {
    const int W = w->w;
    for (int s = 0; s < w->stages; s++) {
        float *L = lut + stage_off(w, s);
        const int64_t k = w->k[s];
        for (int64_t j = j0; j < j1; j++) {
            const float *xj = x + j * W;
            int64_t c = 0;
            for (; c + 8 <= k; c += 8) {
                __m256 acc;
                if (w->cbq_bits) { // split CQO codes, read at the padded stride k8 (kernels/pq_layout.h)
                    const int64_t k8 = (k + 7) & ~(int64_t)7;
                    acc = _mm256_mul_ps(cb8_split(w, s, j, (j * W) * k8 + c), _mm256_set1_ps(xj[0]));
                    for (int q = 1; q < W; q++)
                        acc = _mm256_add_ps(acc, _mm256_mul_ps(cb8_split(w, s, j, (j * W + q) * k8 + c), _mm256_set1_ps(xj[q])));
                } else {
                    acc = _mm256_mul_ps(cb8(w, s, j, (j * W) * k + c), _mm256_set1_ps(xj[0]));
                    for (int q = 1; q < W; q++)
                        acc = _mm256_add_ps(acc, _mm256_mul_ps(cb8(w, s, j, (j * W + q) * k + c), _mm256_set1_ps(xj[q])));
                }
                _mm256_storeu_ps(L + j * k + c, acc);
            }
            for (; c < k; c++) {
                float acc = kvq_pqx_cb(w, s, j, 0, c) * xj[0];
                for (int q = 1; q < W; q++) {
                    float p = kvq_pqx_cb(w, s, j, q, c) * xj[q];
                    acc = acc + p;
                }
                L[j * k + c] = acc;
            }
        }
    }
}

// Two row blocks at a time (two independent sums: the gathers overlap), each lane one row.
// Subspaces run in chunks whose tables take at most PQ_CHUNK_BYTES (half a 512 KB L2): every
// row's running sum is kept in y between chunks, so each row still adds its entries in
// subspace order. Measured (pq_bench, one loaded core, lookups only, ms): 8192 x 2048 k 1343
// 4.4 unchunked, 10.1-11.0 at 16-32 KB, 3.3 at 256 KB; 2048 x 8192 k 367 4.1 / 2.1-4.9 / 1.6.
#define PQ_CHUNK_BYTES 262144
PQ_AVX2 static void matvec_avx2(const kvq_pqx *w, const float *lut, float *y, int64_t r0, int64_t r1) {
    for (int s = 0; s < w->stages; s++) {
        const float *L = lut + stage_off(w, s);
        const int64_t k = w->k[s];
        const __m256i step = _mm256_set1_epi32((int)k);
        int64_t jc = PQ_CHUNK_BYTES / (4 * k);
        if (jc < 1) jc = 1;
        for (int64_t j0 = 0; j0 < w->m; j0 += jc) {
            const int64_t j1 = j0 + jc < w->m ? j0 + jc : w->m;
            const int first = s == 0 && j0 == 0;
            for (int64_t rb = r0; rb < r1; rb += 2 * KVQ_PQX_RB) {
                const int two = rb + KVQ_PQX_RB < r1;
                const int64_t n = r1 - rb < 2 * KVQ_PQX_RB ? r1 - rb : 2 * KVQ_PQX_RB;
                float t[2 * KVQ_PQX_RB] = {0};
                if (!first) memcpy(t, y + rb, sizeof(float) * (size_t)n);
                __m256 a0 = _mm256_loadu_ps(t), a1 = _mm256_loadu_ps(t + KVQ_PQX_RB);
                __m256i off = _mm256_set1_epi32((int)(j0 * k));
                if (w->pbits[s]) { // lane-packed: the same lookups in the same order
                    const int b = w->pbits[s], P = w->pper[s];
                    const int64_t gw = (int64_t)w->pwords[s] * KVQ_PQX_RB; // uint32 per group
                    const __m256i mask = _mm256_set1_epi32((1 << b) - 1);
                    const uint32_t *q0 = (const uint32_t *)w->idx[s] + kvq_pqx_pk_at(w, s, rb, j0 / P);
                    const uint32_t *q1 = q0 + w->pgroups[s] * gw;
                    int p = (int)(j0 % P);
                    for (int64_t j = j0; j < j1; j++) {
                        const int o = p * b;
                        a0 = _mm256_add_ps(a0, _mm256_i32gather_ps(L, _mm256_add_epi32(pk8(q0, o, b, mask), off), 4));
                        if (two) a1 = _mm256_add_ps(a1, _mm256_i32gather_ps(L, _mm256_add_epi32(pk8(q1, o, b, mask), off), 4));
                        off = _mm256_add_epi32(off, step);
                        if (++p == P) p = 0, q0 += gw, q1 += gw;
                    }
                } else if (w->hbits[s]) { // split: low bytes + high bits, the same lookups in the same order
                    const int h = w->hbits[s];
                    const __m256i shv = sp_shifts(h), mask = _mm256_set1_epi32((1 << h) - 1);
                    const uint8_t *l0 = (const uint8_t *)w->idx[s] + ((rb / KVQ_PQX_RB) * w->m + j0) * KVQ_PQX_RB;
                    const uint8_t *h0 = w->hi[s] + ((rb / KVQ_PQX_RB) * w->m + j0) * h;
                    const int64_t ld = w->m * KVQ_PQX_RB, hd = w->m * h; // to the next row block
                    for (int64_t j = j0; j < j1; j++, l0 += KVQ_PQX_RB, h0 += h) {
                        a0 = _mm256_add_ps(a0, _mm256_i32gather_ps(L, _mm256_add_epi32(sp8(l0, h0, shv, mask), off), 4));
                        if (two)
                            a1 = _mm256_add_ps(a1, _mm256_i32gather_ps(L, _mm256_add_epi32(sp8(l0 + ld, h0 + hd, shv, mask), off), 4));
                        off = _mm256_add_epi32(off, step);
                    }
                } else
                for (int64_t j = j0; j < j1; j++) {
                    a0 = _mm256_add_ps(a0, _mm256_i32gather_ps(L, _mm256_add_epi32(idx8(w, s, rb, j), off), 4));
                    if (two)
                        a1 = _mm256_add_ps(a1, _mm256_i32gather_ps(L, _mm256_add_epi32(idx8(w, s, rb + KVQ_PQX_RB, j), off), 4));
                    off = _mm256_add_epi32(off, step);
                }
                _mm256_storeu_ps(t, a0);
                _mm256_storeu_ps(t + KVQ_PQX_RB, a1);
                memcpy(y + rb, t, sizeof(float) * (size_t)n);
            }
        }
    }
}

// Batched tables of stage s for subspaces [j0, j1).
PQ_AVX2 static void lutb_avx2_stage(const kvq_pqx *w, int s, const float *x, int n_tok, int64_t ldx, float *lutb,
                                    int64_t j0, int64_t j1) {
    const int W = w->w;
    float *L = lutb + KVQ_PQX_TB * stage_off(w, s);
    const int64_t k = w->k[s];
    __m256 xt[KVQ_PQX_MAX_W];
    for (int64_t j = j0; j < j1; j++) {
        for (int q = 0; q < W; q++) {
            float v[KVQ_PQX_TB] = {0};
            for (int t = 0; t < n_tok; t++) v[t] = x[t * ldx + j * W + q];
            xt[q] = _mm256_loadu_ps(v);
        }
        for (int64_t c = 0; c < k; c++) {
            __m256 acc = _mm256_mul_ps(_mm256_set1_ps(kvq_pqx_cb(w, s, j, 0, c)), xt[0]);
            for (int q = 1; q < W; q++)
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(kvq_pqx_cb(w, s, j, q, c)), xt[q]));
            _mm256_storeu_ps(L + (j * k + c) * KVQ_PQX_TB, acc);
        }
    }
}

PQ_AVX2 static void lutb_avx2(const kvq_pqx *w, const float *x, int n_tok, int64_t ldx, float *lutb, int64_t j0,
                              int64_t j1) {
    for (int s = 0; s < w->stages; s++) lutb_avx2_stage(w, s, x, n_tok, ldx, lutb, j0, j1);
}

// Rows [r0, r1) of stage s over subspaces [j0, j1) for n_tok tokens: each row block's 8 rows
// are 8 vectors of 8 token lanes, continuing the running sums in y (first: from 0).
PQ_AVX2 static void gemm_avx2_part(const kvq_pqx *w, int s, const float *lutb, int n_tok, float *y, int64_t ldy,
                                   int64_t r0, int64_t r1, int64_t j0, int64_t j1, int first) {
    const float *L = lutb + KVQ_PQX_TB * stage_off(w, s);
    const int64_t k = w->k[s];
    for (int64_t rb = r0; rb < r1; rb += KVQ_PQX_RB) {
        const int nr = r1 - rb < KVQ_PQX_RB ? (int)(r1 - rb) : KVQ_PQX_RB;
        float t[KVQ_PQX_RB][KVQ_PQX_TB] = {{0}};
        if (!first)
            for (int i = 0; i < nr; i++)
                for (int tk = 0; tk < n_tok; tk++) t[i][tk] = y[tk * ldy + rb + i];
        __m256 a[KVQ_PQX_RB];
        for (int i = 0; i < KVQ_PQX_RB; i++) a[i] = _mm256_loadu_ps(t[i]);
        const int64_t o = ((rb / KVQ_PQX_RB) * w->m + j0) * KVQ_PQX_RB;
        if (w->pbits[s]) { // lane-packed: the 8 rows' indices of subspace j, then as below
            const int b = w->pbits[s], P = w->pper[s];
            const int64_t gw = (int64_t)w->pwords[s] * KVQ_PQX_RB;
            const __m256i mask = _mm256_set1_epi32((1 << b) - 1);
            const uint32_t *q = (const uint32_t *)w->idx[s] + kvq_pqx_pk_at(w, s, rb, j0 / P);
            int p = (int)(j0 % P);
            int32_t ip[KVQ_PQX_RB];
            for (int64_t j = j0; j < j1; j++) {
                _mm256_storeu_si256((__m256i *)ip, pk8(q, p * b, b, mask));
                const float *Lj = L + j * k * KVQ_PQX_TB;
                for (int i = 0; i < KVQ_PQX_RB; i++)
                    a[i] = _mm256_add_ps(a[i], _mm256_loadu_ps(Lj + (int64_t)ip[i] * KVQ_PQX_TB));
                if (++p == P) p = 0, q += gw;
            }
        } else if (w->hbits[s]) { // split: the 8 rows' indices of subspace j, then as below
            const int h = w->hbits[s];
            const __m256i shv = sp_shifts(h), mask = _mm256_set1_epi32((1 << h) - 1);
            const uint8_t *lo = (const uint8_t *)w->idx[s] + o, *hi = w->hi[s] + ((rb / KVQ_PQX_RB) * w->m + j0) * h;
            int32_t ip[KVQ_PQX_RB];
            for (int64_t j = j0; j < j1; j++, lo += KVQ_PQX_RB, hi += h) {
                _mm256_storeu_si256((__m256i *)ip, sp8(lo, hi, shv, mask));
                const float *Lj = L + j * k * KVQ_PQX_TB;
                for (int i = 0; i < KVQ_PQX_RB; i++)
                    a[i] = _mm256_add_ps(a[i], _mm256_loadu_ps(Lj + (int64_t)ip[i] * KVQ_PQX_TB));
            }
        } else if (w->ib[s] == 1) {
            const uint8_t *ip = (const uint8_t *)w->idx[s] + o;
            for (int64_t j = j0; j < j1; j++, ip += KVQ_PQX_RB) {
                const float *Lj = L + j * k * KVQ_PQX_TB;
                for (int i = 0; i < KVQ_PQX_RB; i++)
                    a[i] = _mm256_add_ps(a[i], _mm256_loadu_ps(Lj + (int64_t)ip[i] * KVQ_PQX_TB));
            }
        } else {
            const uint16_t *ip = (const uint16_t *)w->idx[s] + o;
            for (int64_t j = j0; j < j1; j++, ip += KVQ_PQX_RB) {
                const float *Lj = L + j * k * KVQ_PQX_TB;
                for (int i = 0; i < KVQ_PQX_RB; i++)
                    a[i] = _mm256_add_ps(a[i], _mm256_loadu_ps(Lj + (int64_t)ip[i] * KVQ_PQX_TB));
            }
        }
        for (int i = 0; i < nr; i++) {
            _mm256_storeu_ps(t[i], a[i]);
            for (int tk = 0; tk < n_tok; tk++) y[tk * ldy + rb + i] = t[i][tk];
        }
    }
}

PQ_AVX2 static void gemm_avx2(const kvq_pqx *w, const float *lutb, int n_tok, float *y, int64_t ldy, int64_t r0,
                              int64_t r1) {
    for (int s = 0; s < w->stages; s++) gemm_avx2_part(w, s, lutb, n_tok, y, ldy, r0, r1, 0, w->m, s == 0);
}

// ---- entry points

void kvq_pqx_lut(const kvq_pqx *w, const float *x, float *lut, int64_t j0, int64_t j1, kvq_pqx_isa isa) {
    if (resolve(isa) == KVQ_PQX_ISA_AVX2) lut_avx2(w, x, lut, j0, j1);
    else lut_ref(w, x, lut, j0, j1);
}

void kvq_pqx_matvec_rows(const kvq_pqx *w, const float *lut, float *y, int64_t r0, int64_t r1, kvq_pqx_isa isa) {
    if (resolve(isa) == KVQ_PQX_ISA_AVX2) matvec_avx2(w, lut, y, r0, r1);
    else matvec_ref(w, lut, y, r0, r1);
}

void kvq_pqx_lutb(const kvq_pqx *w, const float *x, int n_tok, int64_t ldx, float *lutb, int64_t j0, int64_t j1,
                  kvq_pqx_isa isa) {
    if (resolve(isa) == KVQ_PQX_ISA_AVX2) lutb_avx2(w, x, n_tok, ldx, lutb, j0, j1);
    else lutb_ref(w, x, n_tok, ldx, lutb, j0, j1);
}

void kvq_pqx_gemm_rows(const kvq_pqx *w, const float *lutb, int n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1,
                       kvq_pqx_isa isa) {
    if (resolve(isa) == KVQ_PQX_ISA_AVX2) gemm_avx2(w, lutb, n_tok, y, ldy, r0, r1);
    else gemm_ref(w, lutb, n_tok, y, ldy, r0, r1);
}

size_t kvq_pqx_scratch(const kvq_pqx *parts, int n_part) {
    if (n_part && parts[0].qetg) return kvq_qetg_scratch(parts, n_part);
    if (n_part && parts[0].levels) return kvq_qetx_scratch(parts, n_part);
    size_t n = 0;
    for (int p = 0; p < n_part; p++) n += KVQ_PQX_TB * kvq_pqx_lut_floats(&parts[p]);
    return n;
}

// Finds the block p whose running total end[p] first exceeds i.
static int block_of(const int64_t *end, int64_t i) {
    int p = 0;
    while (i >= end[p]) p++;
    return p;
}

// Batched products with the tables built and read one chunk of subspaces at a time (per part
// and stage, in order, so every row's sum keeps the stated order): tables of the chunk split
// over the team by subspace, a barrier, its lookups split by row blocks, a barrier.
static void matmul_chunked(const kvq_pqx *parts, int n_part, const int *row0, const float *x, int n_tok, float *y,
                           int64_t ldy, float *scratch, const size_t *off, int nt) {
    const int64_t cols = parts[0].cols;
    for (int t0 = 0; t0 < n_tok; t0 += KVQ_PQX_TB) {
        const int nb = n_tok - t0 < KVQ_PQX_TB ? n_tok - t0 : KVQ_PQX_TB;
        const float *xb = x + (size_t)t0 * cols;
        float *yb = y + (size_t)t0 * ldy;
#pragma omp parallel num_threads(nt)
        {
            const int64_t nth = omp_get_num_threads(), id = omp_get_thread_num();
            for (int p = 0; p < n_part; p++) {
                const kvq_pqx *w = &parts[p];
                const int64_t nblk = (w->rows + KVQ_PQX_RB - 1) / KVQ_PQX_RB;
                for (int s = 0; s < w->stages; s++) {
                    int64_t jc = PQ_CHUNK_BYTES / (4 * KVQ_PQX_TB * w->k[s]);
                    if (jc < 1) jc = 1;
                    for (int64_t j0 = 0; j0 < w->m; j0 += jc) {
                        const int64_t j1 = j0 + jc < w->m ? j0 + jc : w->m, nj = j1 - j0;
                        lutb_avx2_stage(w, s, xb, nb, cols, scratch + off[p], j0 + nj * id / nth, j0 + nj * (id + 1) / nth);
#pragma omp barrier
                        const int64_t b0 = nblk * id / nth, b1 = nblk * (id + 1) / nth;
                        const int64_t rz = KVQ_PQX_RB * b1 < w->rows ? KVQ_PQX_RB * b1 : w->rows;
                        if (b0 < b1)
                            gemm_avx2_part(w, s, scratch + off[p], nb, yb + row0[p], ldy, KVQ_PQX_RB * b0, rz, j0, j1,
                                           s == 0 && j0 == 0);
#pragma omp barrier
                    }
                }
            }
        }
    }
}

static int lut_team = 1;
int kvq_pqx_lut_team(int on) {
    const int was = lut_team;
    if (on >= 0) lut_team = on != 0;
    return was;
}

void kvq_pqx_matmul(const kvq_pqx *parts, int n_part, const int *row0, const float *x, int n_tok, float *y,
                    int64_t ldy, float *scratch, kvq_pqx_isa isa, int n_threads) {
    if (parts[0].qetg) {
        kvq_qetg_matmul(parts, n_part, row0, x, n_tok, y, ldy, scratch, isa, n_threads);
        return;
    }
    if (parts[0].levels) {
        kvq_qetx_matmul(parts, n_part, row0, x, n_tok, y, ldy, scratch, isa, n_threads);
        return;
    }
    isa = resolve(isa);
    enum { MAXP = 3 };
    size_t off[MAXP];
    int64_t sub_end[MAXP], blk_end[MAXP], n_sub = 0, n_blk = 0, work = 0;
    const int64_t cols = parts[0].cols;
    size_t o = 0;
    for (int p = 0; p < n_part && p < MAXP; p++) {
        const kvq_pqx *w = &parts[p];
        off[p] = o;
        o += KVQ_PQX_TB * kvq_pqx_lut_floats(w);
        sub_end[p] = n_sub += w->m;
        blk_end[p] = n_blk += (w->rows + 2 * KVQ_PQX_RB - 1) / (2 * KVQ_PQX_RB); // pairs of row blocks
        work += w->rows * w->m * w->stages + (int64_t)kvq_pqx_lut_floats(w) * w->w;
    }
    const int nt = kvq_nthreads(n_threads);
    // Batched tables larger than the chunk budget (k in the hundreds to thousands on wide
    // matrices: 8192 x 2048 at pq:4 has k = 1343, 11 MB of tables for 8 tokens) are built and
    // read a chunk of subspaces at a time (AVX2 path).
    int chunked = 0;
    for (int p = 0; p < n_part; p++) chunked |= KVQ_PQX_TB * 4 * kvq_pqx_lut_floats(&parts[p]) > 2 * PQ_CHUNK_BYTES;
    if (n_tok > 1 && chunked && isa == KVQ_PQX_ISA_AVX2) {
        matmul_chunked(parts, n_part, row0, x, n_tok, y, ldy, scratch, off, nt);
        return;
    }
    for (int t0 = 0; t0 < n_tok; t0 += KVQ_PQX_TB) {
        const int nb = n_tok - t0 < KVQ_PQX_TB ? n_tok - t0 : KVQ_PQX_TB;
        const float *xb = x + (size_t)t0 * cols;
        float *yb = y + (size_t)t0 * ldy;
        // One token: its tables are built by the team, a share of the subspaces each, then a
        // barrier (kvq_pqx_lut_team(0): by the calling thread before the fork, so the team meets
        // once per product); read with the gather kernel. Same tables either way.
        const int team_lut = nb > 1 || (lut_team && nt > 1);
        if (!team_lut)
            for (int p = 0; p < n_part; p++) kvq_pqx_lut(&parts[p], xb, scratch + off[p], 0, parts[p].m, isa);
#pragma omp parallel num_threads(nt) if (work * nb > 65536)
        {
            const int64_t nth = omp_get_num_threads(), id = omp_get_thread_num();
            if (team_lut) {
                for (int64_t i = n_sub * id / nth, i1 = n_sub * (id + 1) / nth; i < i1;) {
                    const int p = block_of(sub_end, i);
                    const int64_t j0 = i - (p ? sub_end[p - 1] : 0), n = sub_end[p] - i < i1 - i ? sub_end[p] - i : i1 - i;
                    if (nb == 1) kvq_pqx_lut(&parts[p], xb, scratch + off[p], j0, j0 + n, isa);
                    else kvq_pqx_lutb(&parts[p], xb, nb, cols, scratch + off[p], j0, j0 + n, isa);
                    i += n;
                }
#pragma omp barrier
            }
            for (int64_t u = n_blk * id / nth, u1 = n_blk * (id + 1) / nth; u < u1;) {
                const int p = block_of(blk_end, u);
                const kvq_pqx *w = &parts[p];
                const int64_t g0 = u - (p ? blk_end[p - 1] : 0), n = blk_end[p] - u < u1 - u ? blk_end[p] - u : u1 - u;
                const int64_t ra = 2 * KVQ_PQX_RB * g0, rz = 2 * KVQ_PQX_RB * (g0 + n) < w->rows ? 2 * KVQ_PQX_RB * (g0 + n) : w->rows;
                if (nb == 1) kvq_pqx_matvec_rows(w, scratch + off[p], yb + row0[p], ra, rz, isa);
                else kvq_pqx_gemm_rows(w, scratch + off[p], nb, yb + row0[p], ldy, ra, rz, isa);
                u += n;
            }
        }
    }
}

void kvq_pqx_row_f32(const kvq_pqx *w, int64_t r, float *out) {
    if (w->qetg) {
        kvq_qetg_row_f32(w, r, out);
        return;
    }
    if (w->levels) {
        kvq_qetx_row_f32(w, r, out);
        return;
    }
    for (int64_t j = 0; j < w->m; j++)
        for (int s = 0; s < w->stages; s++) {
            const uint32_t c = kvq_pqx_idx(w, s, r, j);
            float *o = out + j * w->w;
            for (int q = 0; q < w->w; q++) {
                const float v = kvq_pqx_cb(w, s, j, q, c);
                o[q] = s == 0 ? v : o[q] + v; // the decoder's order: stage 1, then + stage 2
            }
        }
}

size_t kvq_pqx_dense_scratch(const kvq_pqx *w, int n_tok) {
    return (size_t)KVQ_PQX_DENSE_BLOCK * (size_t)w->cols + (size_t)n_tok * KVQ_PQX_DENSE_BLOCK;
}

static void pqx_row_cb(const void *w, int64_t r, float *out) { kvq_pqx_row_f32((const kvq_pqx *)w, r, out); }

void kvq_pqx_matmul_dense(const kvq_pqx *w, const float *x, int n_tok, float *y, int64_t ldy, float *scratch,
                          int n_threads) {
    kvq_matmul_decoded_rows(pqx_row_cb, w, w->rows, w->cols, KVQ_PQX_DENSE_BLOCK, x, n_tok, y, ldy, scratch, n_threads);
}

size_t kvq_pqx_bytes(const kvq_pqx *w) {
    if (w->qetg) return kvq_qetg_bytes(w);
    if (w->levels) return kvq_qetx_bytes(w);
    size_t b = 0;
    for (int s = 0; s < w->stages; s++)
        b += kvq_pqx_idx_bytes(w, s) + kvq_pqx_cb_bytes(w, s) + (w->cb_ms[s] ? 8u * (size_t)w->m : 0);
    return b;
}

size_t kvq_pqx_idx_bytes(const kvq_pqx *w, int s) {
    if (w->levels) return (size_t)(w->rows * w->m) * (size_t)w->qbits[s] / 8;
    if (w->pbits[s]) return (size_t)(w->rows_p * w->pgroups[s]) * (size_t)w->pwords[s] * 4;
    if (w->hbits[s]) return (size_t)(w->rows_p * w->m) + kvq_pqx_hi_bytes(w, s);
    return (size_t)(w->rows_p * w->m) * (size_t)w->ib[s];
}

#ifndef PQ_LANE_WORDS
#define PQ_LANE_WORDS 1
#endif
int kvq_pqx_pack_lanes(kvq_pqx *w, int wide) {
    if (w->levels) return 0;
    for (int s = 0; s < w->stages; s++) {
        if (w->pbits[s] || w->hbits[s] || (w->ib[s] == 2 && !wide)) continue;
        int b = 0;
        while (((int64_t)1 << b) < w->k[s]) b++;
        if (b == 0 || b >= 16) continue;
        // the fewest bytes over 1..PQ_LANE_WORDS words a row and group (ties: fewer words), if fewer
        // than now. One word (no field straddles two): with 2-word groups (fields straddling, 11-bit
        // fields at 11.6 bits) the one-token product of 8192 x 2048 at k = 1343 took 9.8-15.9 ms
        // against 6.5-7.1 unpacked (pq_bench, loaded box), so straddling layouts are not built.
        int per = 0, words = 0;
        int64_t best = w->m * w->ib[s]; // bytes a row
        for (int v = 1; v <= PQ_LANE_WORDS; v++) {
            const int pv = 32 * v / b;
            const int64_t by = (w->m + pv - 1) / pv * v * 4;
            if (by < best) best = by, per = pv, words = v;
        }
        if (!per) continue;
        const int64_t G = (w->m + per - 1) / per;
        uint32_t *q = kvq_hqx_alloc((size_t)(w->rows_p * G) * (size_t)words * 4);
        if (!q) return -1;
        kvq_pqx t = *w;
        t.pbits[s] = b, t.pper[s] = per, t.pwords[s] = words, t.pgroups[s] = G, t.idx[s] = q;
        for (int64_t r = 0; r < w->rows_p; r++)
            for (int64_t j = 0; j < w->m; j++) {
                const uint64_t a = kvq_pqx_idx(w, s, r, j);
                const int64_t g = j / per;
                const int o = (int)(j - g * per) * b;
                uint32_t *d = q + kvq_pqx_pk_at(&t, s, r, g) + (o >> 5) * KVQ_PQX_RB;
                d[0] |= (uint32_t)(a << (o & 31));
                if ((o & 31) + b > 32) d[KVQ_PQX_RB] |= (uint32_t)(a >> (32 - (o & 31)));
            }
        kvq_hqx_dealloc(w->idx[s]);
        *w = t;
    }
    return 0;
}
size_t kvq_pqx_hi_bytes(const kvq_pqx *w, int s) {
    return w->hbits[s] ? (size_t)(w->rows_p / KVQ_PQX_RB * w->m) * (size_t)w->hbits[s] + KVQ_PQX_HI_PAD : 0;
}

int kvq_pqx_split_wide(kvq_pqx *w) {
    if (w->levels) return 0;
    for (int s = 0; s < w->stages; s++) {
        if (w->ib[s] != 2 || w->pbits[s] || w->hbits[s]) continue;
        int b = 0;
        while (((int64_t)1 << b) < w->k[s]) b++;
        if (b <= 8 || b > 12) continue;
        const int h = b - 8;
        kvq_pqx t = *w;
        t.hbits[s] = h;
        uint8_t *lo = kvq_hqx_alloc((size_t)(w->rows_p * w->m));
        t.hi[s] = kvq_hqx_alloc(kvq_pqx_hi_bytes(&t, s)); // zeroed
        if (!lo || !t.hi[s]) {
            kvq_hqx_dealloc(lo);
            kvq_hqx_dealloc(t.hi[s]);
            return -1;
        }
        t.idx[s] = lo;
        for (int64_t r = 0; r < w->rows_p; r++)
            for (int64_t j = 0; j < w->m; j++) {
                const uint32_t a = kvq_pqx_idx(w, s, r, j);
                const int64_t o = kvq_pqx_idx_at(w, r, j);
                lo[o] = (uint8_t)a;
                const int bit = h * (int)(r % KVQ_PQX_RB);
                uint8_t *q = t.hi[s] + ((r / KVQ_PQX_RB) * w->m + j) * h;
                for (int i = 0; i < h; i++)
                    if ((a >> (8 + i)) & 1u) q[(bit + i) >> 3] |= (uint8_t)(1u << ((bit + i) & 7));
            }
        kvq_hqx_dealloc(w->idx[s]);
        *w = t;
    }
    return 0;
}

int kvq_pqx_split_codes(kvq_pqx *w) {
    if (w->levels || w->cb_type != KVQ_PQX_CB_CQO || w->cbq_bits || w->cb_bits < 1 || w->cb_bits > 15) return 0;
    const int B = w->cb_bits, h = B > 8 ? B - 8 : 0;
    uint8_t *lo[KVQ_PQX_MAX_STAGES] = {0}, *hi[KVQ_PQX_MAX_STAGES] = {0};
    int ok = 1;
    for (int s = 0; s < w->stages; s++) {
        const size_t n8 = (size_t)(w->m * w->w) * (size_t)((w->k[s] + 7) & ~(int64_t)7);
        lo[s] = kvq_hqx_alloc(n8); // zeroed: the padding codes stay 0
        if (h) hi[s] = kvq_hqx_alloc(n8 / 8 * (size_t)h + KVQ_PQX_CB_HI_PAD);
        if (!lo[s] || (h && !hi[s])) ok = 0;
    }
    if (!ok) {
        for (int s = 0; s < w->stages; s++) kvq_hqx_dealloc(lo[s]), kvq_hqx_dealloc(hi[s]);
        return -1;
    }
    for (int s = 0; s < w->stages; s++) {
        const uint16_t *c = (const uint16_t *)w->cb[s];
        const int64_t k = w->k[s], k8 = (k + 7) & ~(int64_t)7;
        for (int64_t row = 0; row < w->m * w->w; row++)
            for (int64_t i = 0; i < k; i++) {
                const uint32_t v = c[row * k + i];
                const int64_t e = row * k8 + i;
                lo[s][e] = (uint8_t)v;
                const int bit = h * (int)(e & 7);
                uint8_t *g = h ? hi[s] + (e >> 3) * h : NULL;
                for (int b = 0; b < h; b++)
                    if ((v >> (8 + b)) & 1u) g[(bit + b) >> 3] |= (uint8_t)(1u << ((bit + b) & 7));
            }
        kvq_hqx_dealloc(w->cb[s]);
        w->cb[s] = lo[s], w->cb_hi[s] = hi[s];
    }
    w->cbq_bits = B;
    return 0;
}

size_t kvq_pqx_cb_bytes(const kvq_pqx *w, int s) {
    if (w->levels) return w->cb_size[s];
    if (w->cbq_bits) {
        const size_t n8 = (size_t)(w->m * w->w) * (size_t)((w->k[s] + 7) & ~(int64_t)7);
        return n8 + (w->cbq_bits > 8 ? n8 / 8 * (size_t)(w->cbq_bits - 8) + KVQ_PQX_CB_HI_PAD : 0);
    }
    return (size_t)(w->m * w->w * w->k[s]) * (w->cb_type == KVQ_PQX_CB_F32 ? 4u : 2u);
}
int kvq_pqx_idx_bits(const kvq_pqx *w, int s) {
    return w->levels ? w->qbits[s] : w->pbits[s] ? w->pbits[s] : w->hbits[s] ? 8 + w->hbits[s] : 8 * w->ib[s];
}

void kvq_pqx_free(kvq_pqx *w) {
    if (!w) return;
    for (int s = 0; s < KVQ_PQX_MAX_STAGES; s++) {
        kvq_hqx_dealloc(w->idx[s]);
        kvq_hqx_dealloc(w->cb[s]);
        kvq_hqx_dealloc(w->cb_ms[s]);
        kvq_hqx_dealloc(w->hi[s]);
        kvq_hqx_dealloc(w->cb_hi[s]);
    }
    kvq_hqx_dealloc(w->sw);
    memset(w, 0, sizeof *w);
}
