// Batched int8 products from the hqx layout (hqx.h, "prefill"): the int8 mode's integer tile
// sums for many tokens at once with AVX-512 VNNI, tokens in the vector lanes.
//
// Each weight's integer code is c = m·(u − off) + cb (u the stored value, cb E8's coset bit of
// its 8-vector), so a tile's sum ⟨c, xq⟩ = ⟨u', xq⟩ + zt with u' = m·u + cb ≥ 0 (a byte when
// m·(2^vbits − 1) + 1 ≤ 255) and zt = −m·off·Σ xq (the prepared activation's). A row's tile is
// unpacked once into u' bytes; the tokens' int8 activations are packed as (tile column,
// 4-coordinate group, 16 tokens, 4 bytes), and one `vpdpbusd` multiplies 4 bytes of u'
// (broadcast) with 4 coordinates of 16 tokens. Four rows share each activation load. Escapes
// are added to their tile's integer sums. Per tile the float work is the reference's,
// acc += scale · (sx · (float)d), in tile order, so every output equals the reference int8
// path's (hqx.c, hqx_row_ref) bit for bit.
#include "kernels/cpu/hqx.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_features.h"

#define G_TOK 16 // tokens per vector (lanes)
#define G_ROWS 4 // rows sharing an activation load

static int gemm_shape_ok(const kvq_hqx *w) {
    const int m = kvq_hqx_mult(w->lat), e8 = w->lat == KVQ_HQ_LAT_E8;
    return w->rotate && !w->zero && w->vbits >= 4 && w->vbits <= 7 && w->tile % KVQ_HQX_CHUNK == 0 &&
           m * ((1 << w->vbits) - 1) + e8 <= 255;
}

int kvq_hqx_gemm_ok(const kvq_hqx *w) { return gemm_shape_ok(w) && kvq_hqx_isa_best() == KVQ_HQX_ISA_VNNI; }

static int64_t n_blocks(int n_tok) { return (n_tok + G_TOK - 1) / G_TOK; }

size_t kvq_hqx_gemm_scratch(const kvq_hqx *w, int n_tok) {
    const int64_t tiles = w->cols_p / w->tile;
    // per token block: the codes (cols_p × 16 bytes), zt and sx per tile column (16 lanes each)
    return (size_t)n_blocks(n_tok) * ((size_t)w->cols_p * G_TOK + (size_t)tiles * G_TOK * 8) + 64;
}

// The scratch's parts for token block b.
typedef struct {
    int8_t *xq;  // (tiles, T/4, 16, 4)
    int32_t *zt; // (tiles, 16)
    float *sx;   // (tiles, 16)
} gblock;

static gblock block_at(const kvq_hqx *w, void *scratch, int64_t b) {
    const int64_t tiles = w->cols_p / w->tile;
    uint8_t *base = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    base += (size_t)b * ((size_t)w->cols_p * G_TOK + (size_t)tiles * G_TOK * 8);
    gblock g = {(int8_t *)base, (int32_t *)(base + (size_t)w->cols_p * G_TOK),
                (float *)(base + (size_t)w->cols_p * G_TOK + (size_t)tiles * G_TOK * 4)};
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
                    for (uint32_t e = w->esc_row[r]; e < w->esc_row[r + 1]; e++) { // rare: their tile's sums
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
                    _mm512_store_ps(ya, _mm512_add_ps(_mm512_load_ps(ya), p));
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
    gemm_rows_vnni(w, n_tok, scratch, act, y, ldy, r0, r1, yacc, ub);
#else
    (void)w; (void)act; (void)n_tok; (void)scratch; (void)y; (void)ldy; (void)r0; (void)r1; (void)thread_buf;
#endif
}
