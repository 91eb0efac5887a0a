// Products straight from the general QET layout (kernels/pq_layout.h, qetg: swap trees of any
// depth l and subspace width w, which the qetx kernels do not take). Per product the codebooks
// are expanded to float (the held copy stays as the file stores it); then each row is rebuilt
// once into a per-thread buffer — X* as the decoder sums it, then the l levels of the inverse
// swap tree from the row's indicator bits (AVX2: 8 pairs a step, blends on the bits, one
// interleave) — and multiplied by every token of the batch. Reference loops first, then AVX2,
// then the threaded driver.
//
// Summation order (every path): per row and token two 8-lane accumulators a0, a1; chunk i of 8
// columns goes to a_{i mod 2} (a[l] = fmaf(W[8i + l], x[8i + l], a[l])), a tail of cols mod 8
// columns to a0's first lanes; then v = a0 + a1, y = ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
// The weights are the decoder's bit for bit (kvq_qet_decode); the decoded model multiplies them
// in the dense kernel's order (not the same bits; both within the float summation bound).
#include "kernels/cpu/pq.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/threads.h"

#define QG_AVX2 __attribute__((target("avx2,fma")))

static int64_t exp_off(const kvq_pqx *w, int s) {
    int64_t o = 0;
    for (int i = 0; i < s; i++) o += w->m * w->k[i] * w->w;
    return o;
}

size_t kvq_qetg_expand_floats(const kvq_pqx *w) { return (size_t)exp_off(w, w->stages); }

size_t kvq_qetg_buf_floats(const kvq_pqx *w) { return 2 * (size_t)w->cols + 2 * (size_t)w->m; }

static kvq_pqx_isa resolve(kvq_pqx_isa isa) {
    const kvq_pqx_isa best = kvq_cpu_features() & KVQ_CPU_AVX2 ? KVQ_PQX_ISA_AVX2 : KVQ_PQX_ISA_REF;
    return isa == KVQ_PQX_ISA_AUTO || (isa == KVQ_PQX_ISA_AVX2 && best != KVQ_PQX_ISA_AVX2) ? best : isa;
}

// CQO codes of cb_bits bits from bit position pos on (LSB-first), n of them, as min + (float)code·step
// (the decoder's two roundings): one 64-bit window per code, min and step read once per subspace.
static void expand_cqo(const uint8_t *codes, uint64_t pos, int bits, float mn, float step, int64_t n, float *out) {
    const uint64_t mask = (1ull << bits) - 1u;
    for (int64_t i = 0; i < n; i++, pos += (uint64_t)bits) {
        uint64_t v;
        memcpy(&v, codes + (pos >> 3), 8); // (the blob has 16 bytes of padding)
        const float t = (float)(uint32_t)((v >> (pos & 7)) & mask) * step;
        out[i] = mn + t;
    }
}

void kvq_qetg_expand(const kvq_pqx *w, float *cbf, int64_t j0, int64_t j1) {
    for (int s = 0; s < w->stages; s++) {
        float *E = cbf + exp_off(w, s);
        const int64_t k = w->k[s], kw = k * w->w;
        const uint8_t *b = (const uint8_t *)w->cb[s];
        for (int64_t j = j0; j < j1; j++) {
            float *o = E + j * kw;
            if (w->cb_type == KVQ_PQX_CB_CQO) {
                float mn, step;
                memcpy(&mn, b + 8 * j, 4);
                memcpy(&step, b + 8 * j + 4, 4);
                expand_cqo(b + 8 * w->m, (uint64_t)(j * kw) * (uint64_t)w->cb_bits, w->cb_bits, mn, step, kw, o);
            } else if (w->cb_type == KVQ_PQX_CB_F32) memcpy(o, b + 4 * j * kw, sizeof(float) * (size_t)kw);
            else if (w->cb_type == KVQ_PQX_CB_BF16)
                for (int64_t i = 0; i < kw; i++) {
                    uint16_t h;
                    memcpy(&h, b + 2 * (j * kw + i), 2);
                    const uint32_t u = (uint32_t)h << 16;
                    memcpy(o + i, &u, 4);
                }
            else
                for (int64_t c = 0; c < k; c++)
                    for (int q = 0; q < w->w; q++) o[c * w->w + q] = kvq_qetg_cb(w, s, j, c, q);
        }
    }
}

// Stage s's indices of row r as uint32 (m of them).
static void row_idx(const kvq_pqx *w, int s, int64_t r, uint32_t *ix) {
    const int64_t m = w->m, o0 = r * m;
    if (w->qbits[s] == 8) {
        const uint8_t *p = (const uint8_t *)w->idx[s] + o0;
        for (int64_t j = 0; j < m; j++) ix[j] = p[j];
    } else if (w->qbits[s] == 16) {
        const uint16_t *p = (const uint16_t *)w->idx[s] + o0;
        for (int64_t j = 0; j < m; j++) ix[j] = p[j];
    } else if ((o0 & 1) == 0) { // nibbles from a whole byte on: two a byte
        const uint8_t *p = (const uint8_t *)w->idx[s] + (o0 >> 1);
        int64_t j = 0;
        for (; j + 2 <= m; j += 2) ix[j] = p[j >> 1] & 15u, ix[j + 1] = p[j >> 1] >> 4;
        if (j < m) ix[j] = p[j >> 1] & 15u;
    } else
        for (int64_t j = 0; j < m; j++) {
            const int64_t o = o0 + j;
            ix[j] = (((const uint8_t *)w->idx[s])[o >> 1] >> (4 * (o & 1))) & 15u;
        }
}

// X* of row r from the expanded codebooks: the decoder's stage sum (c_1, then + c_2). ix: m
// uint32 of scratch for a stage's indices of the row.
static void xstar(const kvq_pqx *w, const float *cbf, int64_t r, float *xs, uint32_t *ix) {
    const int W = w->w;
    for (int s = 0; s < w->stages; s++) {
        const float *E = cbf + exp_off(w, s);
        const int64_t k = w->k[s];
        row_idx(w, s, r, ix);
        for (int64_t j = 0; j < w->m; j++) {
            const float *c = E + (j * k + ix[j]) * W;
            float *o = xs + j * W;
            if (s == 0)
                for (int q = 0; q < W; q++) o[q] = c[q];
            else
                for (int q = 0; q < W; q++) o[q] = o[q] + c[q];
        }
    }
}

// ---- plain reference

// Row r of W from X* (xs, overwritten) by the inverse swap tree, level l-1 down to 0 (as
// kvq_qet_swap_inverse): inside blocks of W = cols >> k, out[2j] = swapped ? L[j] : S[j] and
// out[2j + 1] the other. Result in xs or tmp: returns which.
static void unswap_level_ref(const kvq_pqx *w, int64_t r, int k, const float *a, float *b) {
    const int64_t d = w->cols, W = d >> k, h = W / 2;
    for (int64_t blk = 0; blk < d; blk += W)
        for (int64_t j = 0; j < h; j++) {
            const int sw = kvq_qetg_bit(w, r, k, blk / 2 + j);
            const float S = a[blk + j], L = a[blk + h + j];
            b[blk + 2 * j] = sw ? L : S;
            b[blk + 2 * j + 1] = sw ? S : L;
        }
}

static float *unswap_ref(const kvq_pqx *w, int64_t r, float *xs, float *tmp) {
    float *a = xs, *b = tmp;
    for (int k = w->levels - 1; k >= 0; k--) {
        unswap_level_ref(w, r, k, a, b);
        float *t = a;
        a = b, b = t;
    }
    return a;
}

static float dot_ref(const float *wr, const float *x, int64_t d) {
    float a[2][8] = {{0}};
    const int64_t d8 = d / 8 * 8;
    for (int64_t i = 0; i < d8; i += 8)
        for (int l = 0; l < 8; l++) a[(i / 8) & 1][l] = fmaf(wr[i + l], x[i + l], a[(i / 8) & 1][l]);
    for (int64_t c = d8; c < d; c++) a[0][c - d8] = fmaf(wr[c], x[c], a[0][c - d8]);
    float v[8];
    for (int l = 0; l < 8; l++) v[l] = a[0][l] + a[1][l];
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

static void rows_ref(const kvq_pqx *w, const float *cbf, const float *x, int n_tok, int64_t ldx, float *y, int64_t ldy,
                     int64_t r0, int64_t r1, float *buf) {
    for (int64_t r = r0; r < r1; r++) {
        xstar(w, cbf, r, buf, (uint32_t *)(buf + 2 * w->cols));
        const float *wr = unswap_ref(w, r, buf, buf + w->cols);
        for (int t = 0; t < n_tok; t++) y[t * ldy + r] = dot_ref(wr, x + t * ldx, w->cols);
    }
}

// ---- AVX2

// One level of the inverse tree for blocks whose half h is a multiple of 8 (and cols a multiple
// of 16, so a level's bits start on a byte): 8 pairs a step, their 8 indicator bits one byte.
QG_AVX2 static void unswap_level_avx2(const kvq_pqx *w, int64_t r, int k, const float *a, float *b) {
    const int64_t d = w->cols, W = d >> k, h = W / 2;
    const uint8_t *bits = w->sw + (((uint64_t)r * (uint64_t)w->levels + (uint64_t)k) * (uint64_t)(d / 2) >> 3);
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (int64_t blk = 0; blk < d; blk += W)
        for (int64_t j = 0; j < h; j += 8) {
            const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits[(blk / 2 + j) >> 3]), sel), sel);
            const __m256 S = _mm256_loadu_ps(a + blk + j), L = _mm256_loadu_ps(a + blk + h + j);
            const __m256 ev = _mm256_blendv_ps(S, L, _mm256_castsi256_ps(m)), od = _mm256_blendv_ps(L, S, _mm256_castsi256_ps(m));
            const __m256 lo = _mm256_unpacklo_ps(ev, od), hi = _mm256_unpackhi_ps(ev, od); // e0 o0 e1 o1 | e4 o4 e5 o5 ; e2 o2 e3 o3 | e6 o6 e7 o7
            _mm256_storeu_ps(b + blk + 2 * j, _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_storeu_ps(b + blk + 2 * j + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        }
}

// Levels l-1 down to k_end (0: the whole tree).
QG_AVX2 static float *unswap_avx2(const kvq_pqx *w, int64_t r, float *xs, float *tmp, int k_end) {
    const int64_t d = w->cols;
    float *a = xs, *b = tmp;
    for (int k = w->levels - 1; k >= k_end; k--) {
        const int64_t h = (d >> k) / 2;
        if (h % 8 == 0 && d % 16 == 0) unswap_level_avx2(w, r, k, a, b);
        else unswap_level_ref(w, r, k, a, b);
        float *t = a;
        a = b, b = t;
    }
    return a;
}

QG_AVX2 static float dot_avx2(const float *wr, const float *x, int64_t d) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    const int64_t d16 = d / 16 * 16, d8 = d / 8 * 8;
    for (int64_t i = 0; i < d16; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    if (d8 > d16) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + d16), _mm256_loadu_ps(x + d16), a0);
    float A[8], v[8];
    _mm256_storeu_ps(A, a0);
    for (int64_t c = d8; c < d; c++) A[c - d8] = fmaf(wr[c], x[c], A[c - d8]);
    _mm256_storeu_ps(v, _mm256_add_ps(_mm256_loadu_ps(A), a1));
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

// xstar for widths 4, 8 and 16 (a constant in each copy) and at most two stages: vector loads
// and adds (the same single rounding per element as the scalar sum). ix: 2·m uint32.
#define QG_XSTAR(W)                                                                                                  \
    QG_AVX2 static void xstar_avx2_##W(const kvq_pqx *w, const float *cbf, int64_t r, float *xs, uint32_t *ix) {     \
        const int two = w->stages > 1;                                                                               \
        const int64_t m = w->m, k0 = w->k[0], k1 = two ? w->k[1] : 0;                                               \
        const float *E0 = cbf, *E1 = cbf + m * k0 * W;                                                               \
        uint32_t *i0 = ix, *i1 = ix + m;                                                                             \
        row_idx(w, 0, r, i0);                                                                                        \
        if (two) row_idx(w, 1, r, i1);                                                                               \
        for (int64_t j = 0; j < m; j++) {                                                                            \
            const float *a = E0 + (j * k0 + i0[j]) * W, *b = E1 + (j * k1 + (two ? i1[j] : 0)) * W;                   \
            float *o = xs + j * W;                                                                                   \
            if (W == 4) {                                                                                            \
                __m128 v = _mm_loadu_ps(a);                                                                          \
                if (two) v = _mm_add_ps(v, _mm_loadu_ps(b));                                                         \
                _mm_storeu_ps(o, v);                                                                                 \
            } else                                                                                                   \
                for (int q = 0; q < W; q += 8) {                                                                     \
                    __m256 v = _mm256_loadu_ps(a + q);                                                               \
                    if (two) v = _mm256_add_ps(v, _mm256_loadu_ps(b + q));                                           \
                    _mm256_storeu_ps(o + q, v);                                                                      \
                }                                                                                                    \
        }                                                                                                            \
    }
QG_XSTAR(4)
QG_XSTAR(8)
QG_XSTAR(16)

static void xstar_avx2(const kvq_pqx *w, const float *cbf, int64_t r, float *xs, uint32_t *ix) {
    if (w->stages > 2) xstar(w, cbf, r, xs, ix);
    else if (w->w == 8) xstar_avx2_8(w, cbf, r, xs, ix);
    else if (w->w == 4) xstar_avx2_4(w, cbf, r, xs, ix);
    else if (w->w == 16) xstar_avx2_16(w, cbf, r, xs, ix);
    else xstar(w, cbf, r, xs, ix);
}

// One token: the last level of the tree (k = 0, one block of all cols) fused with the dot. Its 8
// pairs j..j+7 give columns 2j..2j+15, i.e. chunks 2c (→ a0) and 2c + 1 (→ a1) of dot_avx2's
// order, so the sums are dot_avx2's bit for bit, without storing the row. cols % 16 == 0.
QG_AVX2 static float last_level_dot_avx2(const kvq_pqx *w, int64_t r, const float *a, const float *x) {
    const int64_t d = w->cols, h = d / 2;
    const uint8_t *bits = w->sw + (((uint64_t)r * (uint64_t)w->levels) * (uint64_t)h >> 3);
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int64_t j = 0; j < h; j += 8) {
        const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits[j >> 3]), sel), sel);
        const __m256 S = _mm256_loadu_ps(a + j), L = _mm256_loadu_ps(a + h + j);
        const __m256 ev = _mm256_blendv_ps(S, L, _mm256_castsi256_ps(m)), od = _mm256_blendv_ps(L, S, _mm256_castsi256_ps(m));
        const __m256 lo = _mm256_unpacklo_ps(ev, od), hi = _mm256_unpackhi_ps(ev, od);
        a0 = _mm256_fmadd_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_loadu_ps(x + 2 * j), a0);
        a1 = _mm256_fmadd_ps(_mm256_permute2f128_ps(lo, hi, 0x31), _mm256_loadu_ps(x + 2 * j + 8), a1);
    }
    float v[8];
    _mm256_storeu_ps(v, _mm256_add_ps(a0, a1));
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

QG_AVX2 static void rows_avx2(const kvq_pqx *w, const float *cbf, const float *x, int n_tok, int64_t ldx, float *y,
                              int64_t ldy, int64_t r0, int64_t r1, float *buf) {
    const int fuse = n_tok == 1 && w->cols % 16 == 0 && w->levels >= 1;
    for (int64_t r = r0; r < r1; r++) {
        xstar_avx2(w, cbf, r, buf, (uint32_t *)(buf + 2 * w->cols));
        if (fuse) { // levels l-1 .. 1 into a row, level 0 with the dot
            y[r] = last_level_dot_avx2(w, r, unswap_avx2(w, r, buf, buf + w->cols, 1), x);
            continue;
        }
        const float *wr = unswap_avx2(w, r, buf, buf + w->cols, 0);
        for (int t = 0; t < n_tok; t++) y[t * ldy + r] = dot_avx2(wr, x + t * ldx, w->cols);
    }
}

// ---- entry points

void kvq_qetg_rows(const kvq_pqx *w, const float *cbf, const float *x, int n_tok, int64_t ldx, float *y, int64_t ldy,
                   int64_t r0, int64_t r1, float *buf, kvq_pqx_isa isa) {
    if (resolve(isa) == KVQ_PQX_ISA_AVX2) rows_avx2(w, cbf, x, n_tok, ldx, y, ldy, r0, r1, buf);
    else rows_ref(w, cbf, x, n_tok, ldx, y, ldy, r0, r1, buf);
}

size_t kvq_qetg_scratch(const kvq_pqx *parts, int n_part) {
    size_t n = (size_t)KVQ_QETG_MAX_THREADS * kvq_qetg_buf_floats(&parts[0]);
    for (int p = 0; p < n_part; p++) n += kvq_qetg_expand_floats(&parts[p]);
    return n;
}

void kvq_qetg_matmul(const kvq_pqx *parts, int n_part, const int *row0, const float *x, int n_tok, float *y,
                     int64_t ldy, float *scratch, kvq_pqx_isa isa, int n_threads) {
    enum { MAXP = 3 };
    size_t off[MAXP];
    int64_t j_end[MAXP], row_end[MAXP], n_j = 0, n_rows = 0, work = 0;
    size_t o = 0;
    for (int p = 0; p < n_part && p < MAXP; p++) {
        off[p] = o;
        o += kvq_qetg_expand_floats(&parts[p]);
        j_end[p] = n_j += parts[p].m;
        row_end[p] = n_rows += parts[p].rows;
        work += parts[p].rows * parts[p].cols;
    }
    float *bufs = scratch + o; // a row, its swap buffer and its indices per thread
    int nt = kvq_nthreads(n_threads);
    if (nt > KVQ_QETG_MAX_THREADS) nt = KVQ_QETG_MAX_THREADS;
    const int64_t cols = parts[0].cols;
#pragma omp parallel num_threads(nt) if (work * n_tok > 65536)
    {
        const int64_t nth = omp_get_num_threads(), id = omp_get_thread_num();
        for (int64_t i = n_j * id / nth, i1 = n_j * (id + 1) / nth; i < i1;) {
            int p = 0;
            while (i >= j_end[p]) p++;
            const int64_t j0 = i - (p ? j_end[p - 1] : 0), n = j_end[p] - i < i1 - i ? j_end[p] - i : i1 - i;
            kvq_qetg_expand(&parts[p], scratch + off[p], j0, j0 + n);
            i += n;
        }
#pragma omp barrier
        float *buf = bufs + (size_t)id * kvq_qetg_buf_floats(&parts[0]);
        for (int64_t u = n_rows * id / nth, u1 = n_rows * (id + 1) / nth; u < u1;) {
            int p = 0;
            while (u >= row_end[p]) p++;
            const int64_t ra = u - (p ? row_end[p - 1] : 0), n = row_end[p] - u < u1 - u ? row_end[p] - u : u1 - u;
            kvq_qetg_rows(&parts[p], scratch + off[p], x, n_tok, cols, y + row0[p], ldy, ra, ra + n, buf, isa);
            u += n;
        }
    }
}

void kvq_qetg_row_f32(const kvq_pqx *w, int64_t r, float *out) {
    for (int64_t c = 0; c < w->cols; c++) {
        const int64_t p = kvq_qetg_pos(w, r, c), j = p / w->w;
        const int q = (int)(p % w->w);
        float v = kvq_qetg_cb(w, 0, j, kvq_qetg_idx(w, 0, r, j), q);
        for (int s = 1; s < w->stages; s++) v = v + kvq_qetg_cb(w, s, j, kvq_qetg_idx(w, s, r, j), q);
        out[c] = v;
    }
}

size_t kvq_qetg_bytes(const kvq_pqx *w) {
    size_t b = ((size_t)w->rows * (size_t)w->levels * (size_t)(w->cols / 2) + 7) / 8;
    for (int s = 0; s < w->stages; s++) b += ((size_t)(w->rows * w->m) * (size_t)w->qbits[s] + 7) / 8 + w->cb_size[s];
    return b;
}
