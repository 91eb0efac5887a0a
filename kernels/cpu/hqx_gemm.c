// Batched int8 products from the hqx layout (hqx.h, "prefill"): the int8 mode's integer tile
// sums for many tokens at once with AVX-512 VNNI or AVX2, tokens in the vector lanes.
//
// Each weight's integer code is c = m·(u − off) + cb (u the stored value, cb E8's coset bit of
// its 8-vector), so a tile's sum ⟨c, xq⟩ = ⟨u', xq⟩ + zt with u' = m·u + cb ≥ 0 (a byte when
// m·(2^vbits − 1) + 1 ≤ 255) and zt = −m·off·Σ xq (the prepared activation's). A row's tile is
// unpacked once into u' bytes; the tokens' int8 activations are packed as (tile column,
// 4-coordinate group, 16 tokens, 4 bytes), and one `vpdpbusd` multiplies 4 bytes of u'
// (broadcast) with 4 coordinates of 16 tokens. Four rows share each activation load. Escapes
// are added to their tile's integer sums. Per tile the float work is the reference's,
// acc += scale · (sx · (float)d), in tile order, so every output equals the reference int8
// path's (hqx.c, hqx_row_ref) bit for bit. RTN (no rotation, off = 0, m = 1, no coset bits)
// takes the same path: its per-tile zero point adds zero[t]·Σx (the prepared xs) after the
// scale's term, again in the reference's order.
//
// AVX2 (no VNNI): the same packed activations, 8 tokens per 256-bit vector (the low or high
// half of a 16-token group); `vpmaddubsw` multiplies the broadcast u' bytes with the tokens'
// int8 pairs into int16, K groups' int16 sums are added before `vpmaddwd` widens them to int32
// (K = the most that cannot overflow: maddubs lanes are at most 2·u'max·127, and u'max ≤ 129
// keeps even one exact, which E8 meets up to width 6 and the other lattices up to 7).
#include "kernels/cpu/hqx.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_features.h"

#define G_TOK 16 // tokens per vector (lanes)
#define G_ROWS 4 // rows sharing an activation load

static int gemm_shape_ok(const kvq_hqx *w) {
    const int m = kvq_hqx_mult(w->lat), e8 = w->lat == KVQ_HQ_LAT_E8;
    return (w->rotate || w->zero) && w->vbits >= 4 && w->vbits <= 7 && w->tile % KVQ_HQX_CHUNK == 0 &&
           m * ((1 << w->vbits) - 1) + e8 <= 255;
}

// Largest u' = m·u + cb of the layout.
static int gemm_umax(const kvq_hqx *w) {
    return kvq_hqx_mult(w->lat) * ((1 << w->vbits) - 1) + (w->lat == KVQ_HQ_LAT_E8);
}

int kvq_hqx_gemm_ok(const kvq_hqx *w) {
    const kvq_hqx_isa isa = kvq_hqx_isa_best();
    return gemm_shape_ok(w) && (isa == KVQ_HQX_ISA_VNNI || (isa == KVQ_HQX_ISA_AVX2 && gemm_umax(w) <= 129));
}

static int64_t n_blocks(int n_tok) { return (n_tok + G_TOK - 1) / G_TOK; }

size_t kvq_hqx_gemm_scratch(const kvq_hqx *w, int n_tok) {
    const int64_t tiles = w->cols_p / w->tile;
    // per token block: the codes (cols_p × 16 bytes), zt, sx and xs per tile column (16 lanes each)
    return (size_t)n_blocks(n_tok) * ((size_t)w->cols_p * G_TOK + (size_t)tiles * G_TOK * 12) + 64;
}

// The scratch's parts for token block b.
typedef struct {
    int8_t *xq;  // (tiles, T/4, 16, 4)
    int32_t *zt; // (tiles, 16)
    float *sx;   // (tiles, 16)
    float *xs;   // (tiles, 16): RTN's activation sums per tile (the zero points' factor)
} gblock;

static gblock block_at(const kvq_hqx *w, void *scratch, int64_t b) {
    const int64_t tiles = w->cols_p / w->tile;
    uint8_t *base = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    base += (size_t)b * ((size_t)w->cols_p * G_TOK + (size_t)tiles * G_TOK * 12);
    gblock g = {(int8_t *)base, (int32_t *)(base + (size_t)w->cols_p * G_TOK),
                (float *)(base + (size_t)w->cols_p * G_TOK + (size_t)tiles * G_TOK * 4),
                (float *)(base + (size_t)w->cols_p * G_TOK + (size_t)tiles * G_TOK * 8)};
    return g;
}

void kvq_hqx_gemm_pack(const kvq_hqx *w, const kvq_hqx_act *act, int n_tok, void *scratch) {
    const int64_t tiles = w->cols_p / w->tile, T = w->tile;
    for (int64_t b = 0; b < n_blocks(n_tok); b++) {
        gblock g = block_at(w, scratch, b);
        for (int l = 0; l < G_TOK; l++) {
            const int64_t k = b * G_TOK + l;
            const kvq_hqx_act *a = k < n_tok ? &act[k] : NULL;
            for (int64_t j = 0; j < tiles; j++) {
                g.zt[j * G_TOK + l] = a ? a->zt[j] : 0;
                g.sx[j * G_TOK + l] = a ? a->sx[j] : 0.0f;
                g.xs[j * G_TOK + l] = a ? a->xs[j] : 0.0f;
                int8_t *dst = g.xq + (j * T) * G_TOK + 4 * l; // group 0 of tile j, lane l
                for (int64_t q4 = 0; q4 < T / 4; q4++)
                    for (int e = 0; e < 4; e++) dst[q4 * 4 * G_TOK + e] = a ? a->xq[j * T + 4 * q4 + e] : 0;
            }
        }
    }
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))

// u' = m·u + cb of row r, tile column j (T bytes), as the reference reads u (hqx_u) and cb
// (hqx_cb), with AVX-512: per chunk the 32 nibble bytes split into 64 values, each plane
// word added as a byte mask, then m·u (m is 1 or 2) and the coset bits of the 8-vectors.
VNNI_TARGET static void tile_codes_512(const kvq_hqx *w, int64_t r, int64_t j, uint8_t *u) {
    const int64_t T = w->tile, cpt = T / KVQ_HQX_CHUNK, tiles = w->cols_p / T;
    const int m = kvq_hqx_mult(w->lat), np = kvq_hqx_planes(w->vbits), e8 = w->lat == KVQ_HQ_LAT_E8;
    const __m512i lo4 = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1);
    for (int64_t c = 0; c < cpt; c++) {
        const int64_t ch = (r * tiles + j) * cpt + c;
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w->q + ch * 32));
        const __m512i qq = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
        __m512i v = _mm512_and_si512(qq, lo4); // bytes 0..31: low nibbles, 32..63: high ones
        for (int p = 0; p < np; p++)
            v = _mm512_mask_add_epi8(v, (__mmask64)w->hb[ch * np + p], v, _mm512_set1_epi8((char)(16 << p)));
        if (m == 2) v = _mm512_add_epi8(v, v);
        if (e8) {
            const uint64_t cb = w->cb[ch];
            uint64_t mk = 0;
            for (int b = 0; b < 8; b++)
                if ((cb >> b) & 1) mk |= 0xffull << (8 * b);
            v = _mm512_mask_add_epi8(v, (__mmask64)mk, v, one);
        }
        _mm512_storeu_si512((void *)(u + c * KVQ_HQX_CHUNK), v);
    }
}

VNNI_TARGET static void gemm_rows_vnni(const kvq_hqx *w, int n_tok, void *scratch, const kvq_hqx_act *act, float *y,
                                       int64_t ldy, int64_t r0, int64_t r1, float *yacc, uint8_t *ub) {
    const int64_t T = w->tile, tiles = w->cols_p / T, nb = n_blocks(n_tok);
    const int m = kvq_hqx_mult(w->lat), sh = __builtin_ctz((unsigned)T);
    for (int64_t rb = r0; rb < r1; rb += G_ROWS) {
        const int nr = r1 - rb < G_ROWS ? (int)(r1 - rb) : G_ROWS;
        memset(yacc, 0, sizeof(float) * G_ROWS * nb * G_TOK);
        for (int64_t j = 0; j < tiles; j++) {
            for (int i = 0; i < G_ROWS; i++) {
                if (i < nr) tile_codes_512(w, rb + i, j, ub + i * T);
                else memset(ub + i * T, 0, (size_t)T);
            }
            float sc[G_ROWS];
            for (int i = 0; i < G_ROWS; i++) sc[i] = i < nr ? kvq_hqx_scale(w, (rb + i) * tiles + j) : 0.0f;
            const uint32_t *u0 = (const uint32_t *)ub, *u1 = (const uint32_t *)(ub + T), *u2 = (const uint32_t *)(ub + 2 * T),
                           *u3 = (const uint32_t *)(ub + 3 * T);
            for (int64_t b = 0; b < nb; b++) {
                const gblock g = block_at(w, scratch, b);
                const __m512i *xv = (const __m512i *)(g.xq + j * T * G_TOK);
                __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
                for (int64_t q4 = 0; q4 < T / 4; q4++) {
                    const __m512i x = _mm512_load_si512(xv + q4);
                    a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32((int)u0[q4]), x);
                    a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32((int)u1[q4]), x);
                    a2 = _mm512_dpbusd_epi32(a2, _mm512_set1_epi32((int)u2[q4]), x);
                    a3 = _mm512_dpbusd_epi32(a3, _mm512_set1_epi32((int)u3[q4]), x);
                }
                const __m512i zt = _mm512_load_si512(g.zt + j * G_TOK);
                const __m512 sx = _mm512_load_ps(g.sx + j * G_TOK);
                __m512i d[G_ROWS] = {_mm512_add_epi32(a0, zt), _mm512_add_epi32(a1, zt), _mm512_add_epi32(a2, zt),
                                     _mm512_add_epi32(a3, zt)};
                for (int i = 0; i < nr; i++) {
                    const int64_t r = rb + i;
                    uint32_t e0_, e1_;
                    kvq_hqx_esc_range(w, r, &e0_, &e1_);
                    for (uint32_t e = e0_; e < e1_; e++) { // rare: their tile's sums
                        const uint32_t col = kvq_hqx_esc_col(w->esc[e]);
                        if ((int64_t)(col >> sh) != j) continue;
                        int32_t add[G_TOK];
                        const int dl = m * kvq_hqx_esc_delta(w->esc[e]);
                        for (int l = 0; l < G_TOK; l++) {
                            const int64_t k = b * G_TOK + l;
                            add[l] = k < n_tok ? dl * act[k].xq[col] : 0;
                        }
                        d[i] = _mm512_add_epi32(d[i], _mm512_loadu_si512(add));
                    }
                    float *ya = yacc + ((int64_t)i * nb + b) * G_TOK;
                    // the reference's order and roundings: scale · (sx · (float)d), then the add
                    const __m512 p = _mm512_mul_ps(_mm512_set1_ps(sc[i]), _mm512_mul_ps(sx, _mm512_cvtepi32_ps(d[i])));
                    __m512 acc = _mm512_add_ps(_mm512_load_ps(ya), p);
                    if (w->zero) // RTN: then the zero point's share, as the reference adds it
                        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(w->zero[r * tiles + j]),
                                                               _mm512_load_ps(g.xs + j * G_TOK)));
                    _mm512_store_ps(ya, acc);
                }
            }
        }
        for (int i = 0; i < nr; i++)
            for (int k = 0; k < n_tok; k++) y[(int64_t)k * ldy + rb + i] = yacc[((int64_t)i * nb + k / G_TOK) * G_TOK + k % G_TOK];
    }
}
#define AVX2_TARGET __attribute__((target("avx2,fma")))

// tile_codes_512's result with AVX2: per chunk the low and the high nibbles (coordinates 0..31
// and 32..63), each plane word's bits expanded to byte masks, m·u, then the coset bits.
AVX2_TARGET static void tile_codes_avx2(const kvq_hqx *w, int64_t r, int64_t j, uint8_t *u) {
    const int64_t T = w->tile, cpt = T / KVQ_HQX_CHUNK, tiles = w->cols_p / T;
    const int m = kvq_hqx_mult(w->lat), np = kvq_hqx_planes(w->vbits), e8 = w->lat == KVQ_HQ_LAT_E8;
    const __m256i lo4 = _mm256_set1_epi8(15);
    const __m256i sel_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                            3, 3, 3, 3, 3, 3);
    const __m256i sel_hi = _mm256_add_epi8(sel_lo, _mm256_set1_epi8(4));
    const __m256i bm = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    // coset bit k/8 of byte k (low half: bits 0..3, high half: bits 4..7)
    const __m256i cb_lo = _mm256_setr_epi8(1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4, 4, 8, 8, 8,
                                           8, 8, 8, 8, 8);
    const __m256i cb_hi = _mm256_slli_epi16(cb_lo, 4);
    for (int64_t c = 0; c < cpt; c++) {
        const int64_t ch = (r * tiles + j) * cpt + c;
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w->q + ch * 32));
        __m256i lo = _mm256_and_si256(q, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
        for (int p = 0; p < np; p++) {
            const __m256i wv = _mm256_set1_epi64x((long long)w->hb[ch * np + p]), add = _mm256_set1_epi8((char)(16 << p));
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(wv, sel_lo), bm), bm), add));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(wv, sel_hi), bm), bm), add));
        }
        if (m == 2) lo = _mm256_add_epi8(lo, lo), hi = _mm256_add_epi8(hi, hi);
        if (e8) { // + 1 where the 8-vector's coset bit is set (the mask is −1 there)
            const __m256i cbv = _mm256_set1_epi8((char)w->cb[ch]);
            lo = _mm256_sub_epi8(lo, _mm256_cmpeq_epi8(_mm256_and_si256(cbv, cb_lo), cb_lo));
            hi = _mm256_sub_epi8(hi, _mm256_cmpeq_epi8(_mm256_and_si256(cbv, cb_hi), cb_hi));
        }
        _mm256_storeu_si256((__m256i *)(u + c * KVQ_HQX_CHUNK), lo);
        _mm256_storeu_si256((__m256i *)(u + c * KVQ_HQX_CHUNK + 32), hi);
    }
}

// The four rows' integer sums of one tile for the 8 tokens of xv (T/4 groups, 64 bytes apart:
// one half of the 16-token group), K groups added in int16 before widening.
AVX2_TARGET __attribute__((always_inline)) static inline void
gemm_tile_avx2_k(const uint32_t *const *u, const int8_t *xv, int64_t n4, __m256i *d, const int K) {
    const __m256i one = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t q0 = 0; q0 < n4; q0 += K) {
        __m256i p0 = _mm256_setzero_si256(), p1 = p0, p2 = p0, p3 = p0;
        _Pragma("GCC unroll 8") for (int k = 0; k < K; k++) {
            const __m256i x = _mm256_load_si256((const __m256i *)(xv + (q0 + k) * 4 * G_TOK));
            p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(_mm256_set1_epi32((int)u[0][q0 + k]), x));
            p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(_mm256_set1_epi32((int)u[1][q0 + k]), x));
            p2 = _mm256_add_epi16(p2, _mm256_maddubs_epi16(_mm256_set1_epi32((int)u[2][q0 + k]), x));
            p3 = _mm256_add_epi16(p3, _mm256_maddubs_epi16(_mm256_set1_epi32((int)u[3][q0 + k]), x));
        }
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(p0, one));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(p1, one));
        a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(p2, one));
        a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(p3, one));
    }
    d[0] = a0, d[1] = a1, d[2] = a2, d[3] = a3;
}

AVX2_TARGET static void gemm_rows_avx2(const kvq_hqx *w, int n_tok, void *scratch, const kvq_hqx_act *act, float *y,
                                       int64_t ldy, int64_t r0, int64_t r1, float *yacc, uint8_t *ub) {
    const int64_t T = w->tile, tiles = w->cols_p / T, nb = n_blocks(n_tok), n4 = T / 4;
    const int m = kvq_hqx_mult(w->lat), sh = __builtin_ctz((unsigned)T);
    const int lim = 32767 / (2 * 127 * gemm_umax(w)); // maddubs sums that fit int16 (≥ 1)
    const int K = lim >= 8 && n4 % 8 == 0 ? 8 : lim >= 4 && n4 % 4 == 0 ? 4 : lim >= 2 && n4 % 2 == 0 ? 2 : 1;
    for (int64_t rb = r0; rb < r1; rb += G_ROWS) {
        const int nr = r1 - rb < G_ROWS ? (int)(r1 - rb) : G_ROWS;
        memset(yacc, 0, sizeof(float) * G_ROWS * nb * G_TOK);
        for (int64_t j = 0; j < tiles; j++) {
            for (int i = 0; i < G_ROWS; i++) {
                if (i < nr) tile_codes_avx2(w, rb + i, j, ub + i * T);
                else memset(ub + i * T, 0, (size_t)T);
            }
            float sc[G_ROWS];
            for (int i = 0; i < G_ROWS; i++) sc[i] = i < nr ? kvq_hqx_scale(w, (rb + i) * tiles + j) : 0.0f;
            const uint32_t *u[G_ROWS] = {(const uint32_t *)ub, (const uint32_t *)(ub + T), (const uint32_t *)(ub + 2 * T),
                                         (const uint32_t *)(ub + 3 * T)};
            for (int64_t b = 0; b < nb; b++) {
                const gblock g = block_at(w, scratch, b);
                for (int h = 0; h < G_TOK / 8; h++) { // 8 tokens of the block at a time
                    if (b * G_TOK + 8 * h >= n_tok) break;
                    const int8_t *xv = g.xq + j * T * G_TOK + 32 * h;
                    __m256i d[G_ROWS];
                    switch (K) {
                    case 8: gemm_tile_avx2_k(u, xv, n4, d, 8); break;
                    case 4: gemm_tile_avx2_k(u, xv, n4, d, 4); break;
                    case 2: gemm_tile_avx2_k(u, xv, n4, d, 2); break;
                    default: gemm_tile_avx2_k(u, xv, n4, d, 1); break;
                    }
                    const __m256i zt = _mm256_load_si256((const __m256i *)(g.zt + j * G_TOK + 8 * h));
                    const __m256 sx = _mm256_load_ps(g.sx + j * G_TOK + 8 * h);
                    for (int i = 0; i < nr; i++) {
                        const int64_t r = rb + i;
                        __m256i di = _mm256_add_epi32(d[i], zt);
                        uint32_t e0_, e1_;
                        kvq_hqx_esc_range(w, r, &e0_, &e1_);
                        for (uint32_t e = e0_; e < e1_; e++) { // rare: their tile's sums
                            const uint32_t col = kvq_hqx_esc_col(w->esc[e]);
                            if ((int64_t)(col >> sh) != j) continue;
                            int32_t add[8];
                            const int dl = m * kvq_hqx_esc_delta(w->esc[e]);
                            for (int l = 0; l < 8; l++) {
                                const int64_t k = b * G_TOK + 8 * h + l;
                                add[l] = k < n_tok ? dl * act[k].xq[col] : 0;
                            }
                            di = _mm256_add_epi32(di, _mm256_loadu_si256((const __m256i *)add));
                        }
                        float *ya = yacc + ((int64_t)i * nb + b) * G_TOK + 8 * h;
                        // the reference's order and roundings: scale · (sx · (float)d), then the add
                        const __m256 p = _mm256_mul_ps(_mm256_set1_ps(sc[i]), _mm256_mul_ps(sx, _mm256_cvtepi32_ps(di)));
                        __m256 acc = _mm256_add_ps(_mm256_load_ps(ya), p);
                        if (w->zero) // RTN: then the zero point's share, as the reference adds it
                            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(w->zero[r * tiles + j]),
                                                                   _mm256_load_ps(g.xs + j * G_TOK + 8 * h)));
                        _mm256_store_ps(ya, acc);
                    }
                }
            }
        }
        for (int i = 0; i < nr; i++)
            for (int k = 0; k < n_tok; k++) y[(int64_t)k * ldy + rb + i] = yacc[((int64_t)i * nb + k / G_TOK) * G_TOK + k % G_TOK];
    }
}
#endif

size_t kvq_hqx_gemm_thread_bytes(const kvq_hqx *w, int n_tok) {
    return sizeof(float) * G_ROWS * (size_t)n_blocks(n_tok) * G_TOK + (size_t)G_ROWS * w->tile + 128;
}

void kvq_hqx_gemm_rows(const kvq_hqx *w, const kvq_hqx_act *act, int n_tok, void *scratch, float *y, int64_t ldy,
                       int64_t r0, int64_t r1, void *thread_buf) {
#if defined(__x86_64__) || defined(__i386__)
    float *yacc = (float *)(((uintptr_t)thread_buf + 63) & ~(uintptr_t)63);
    uint8_t *ub = (uint8_t *)(yacc + G_ROWS * n_blocks(n_tok) * G_TOK);
    if (kvq_hqx_isa_best() == KVQ_HQX_ISA_VNNI) gemm_rows_vnni(w, n_tok, scratch, act, y, ldy, r0, r1, yacc, ub);
    else gemm_rows_avx2(w, n_tok, scratch, act, y, ldy, r0, r1, yacc, ub);
#else
    (void)w; (void)act; (void)n_tok; (void)scratch; (void)y; (void)ldy; (void)r0; (void)r1; (void)thread_buf;
#endif
}
