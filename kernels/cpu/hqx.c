// Products from the hqx execution layout (see hqx.h, kernels/hq_layout.h): activation
// preparation (per-tile sign flip, Walsh–Hadamard, A2 √3 fold, int8 quantization), the
// plain reference, and AVX2 / AVX-512-VNNI paths chosen at run time by cpuid. The integer
// paths compute the same per-tile integer sums D_t as the reference; only the float
// accumulation order over tiles differs.
#include "kernels/cpu/hqx.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/wht.h"

#pragma GCC diagnostic ignored "-Wpsabi"

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t kvq_hqx_act_bytes(const kvq_hqx *w) {
    size_t cp = (size_t)w->cols_p, nt = cp / (size_t)w->tile;
    return al64(cp * 4) + al64(cp) + al64(nt * 4) + al64(cp / 8 * 4) + al64(nt * 4) + al64(nt * 32) + al64(cp) +
           al64(nt * 64) + al64(nt * 4);
}

void kvq_hqx_act_init(const kvq_hqx *w, void *buf, kvq_hqx_act *a) {
    size_t cp = (size_t)w->cols_p, nt = cp / (size_t)w->tile;
    uint8_t *p = buf;
    a->xr = (float *)p, p += al64(cp * 4);
    a->xq = (int8_t *)p, p += al64(cp);
    a->sx = (float *)p, p += al64(nt * 4);
    a->s8 = (int32_t *)p, p += al64(cp / 8 * 4);
    a->zt = (int32_t *)p, p += al64(nt * 4);
    a->zl = (int32_t *)p, p += al64(nt * 32);
    a->xp = (int8_t *)p, p += al64(cp);
    a->zw = (int32_t *)p, p += al64(nt * 64);
    a->xs = (float *)p;
}

// Offset added to stored values (nibble: v + 8; byte: v + 128).
static inline int hqx_off(const kvq_hqx *w) { return w->rotate ? kvq_hqx_off(w->vbits) : 0; }

// The integer side data of tile column j from its int8 codes a->xq: 8-vector sums, the
// offset's share per tile and per SIMD lane (zt, zl, zw), and the 512-bit path's permutation.
static void prep_side(const kvq_hqx *w, kvq_hqx_act *a, int64_t j) {
    const int T = w->tile, m = kvq_hqx_mult(w->lat), off = hqx_off(w);
    const int8_t *xq = a->xq + j * T;
    int32_t g4[KVQ_HQ_MAX_TILE / 4], sum = 0;
    for (int q = 0; q < T / 4; q++) g4[q] = xq[4 * q] + xq[4 * q + 1] + xq[4 * q + 2] + xq[4 * q + 3];
    for (int v = 0; v < T / 8; v++) {
        a->s8[(j * T) / 8 + v] = g4[2 * v] + g4[2 * v + 1];
        sum += g4[2 * v] + g4[2 * v + 1];
    }
    a->zt[j] = -off * m * sum;
    if (T % 128 == 0)
        for (int b = 0; b < T; b += 128) {
            int8_t *dst = a->xp + j * T + b;
            memcpy(dst, xq + b, 32);
            memcpy(dst + 32, xq + b + 64, 32);
            memcpy(dst + 64, xq + b + 32, 32);
            memcpy(dst + 96, xq + b + 96, 32);
        }
    int32_t *zl = a->zl + 8 * j, *zw = a->zw + 16 * j;
    for (int l = 0; l < 8; l++) zl[l] = 0;
    for (int l = 0; l < 16; l++) zw[l] = 0;
    for (int q = 0; q < T / 4; q++) { // 4-coordinate group q holds coordinates 4q..4q+3
        zl[q % 8] += g4[q];
        zw[((4 * q % 128) / 64) * 8 + q % 8] += g4[q];
    }
    for (int l = 0; l < 8; l++) zl[l] *= -off * m;
    for (int l = 0; l < 16; l++) zw[l] *= -off * m;
}

// xr of tile column j: the padded activation, sign-flipped and rotated (HyperQuant) or as is
// (RTN, with its sum for the zero points), A2's ny coordinates scaled by √3.
static void prep_rotate(const kvq_hqx *w, const float *x, kvq_hqx_act *a, int64_t j) {
    const int T = w->tile;
    float *xr = a->xr + j * T;
    if (!w->rotate) {
        for (int i = 0; i < T; i++) xr[i] = j * T + i < w->cols ? x[j * T + i] : 0.0f;
        float xs = 0.0f;
        for (int i = 0; i < T; i++) xs += xr[i];
        a->xs[j] = xs;
    } else {
        for (int wd = 0; wd < T / 64; wd++) {
            uint64_t bits = kvq_hq_sign_word(w->seed, (uint64_t)j, (uint64_t)wd);
            const int64_t c0 = j * T + 64 * wd;
            uint32_t *o = (uint32_t *)(xr + 64 * wd);
            if (c0 + 64 <= w->cols) { // a sign flip is an exact negation
                memcpy(o, x + c0, 256);
                for (int i = 0; i < 64; i++) o[i] ^= (uint32_t)((bits >> i) & 1) << 31;
            } else
                for (int i = 0; i < 64; i++) {
                    float v = c0 + i < w->cols ? x[c0 + i] : 0.0f;
                    xr[64 * wd + i] = ((bits >> i) & 1) ? -v : v;
                }
        }
        kvq_wht(xr, T);
        a->xs[j] = 0.0f;
    }
    if (w->lat == KVQ_HQ_LAT_A2)
        for (int i = 0; i < T; i += 2) xr[i] *= KVQ_HQ_SQRT3_F;
}

// int8 codes of tile column j, scalar: amax ignores NaN (fmaxf), NaN codes are 0, rounding to
// nearest even (lrintf) after clamping to ±127.
static void prep_quant_scalar(const kvq_hqx *w, kvq_hqx_act *a, int64_t j) {
    const int T = w->tile;
    const float *xr = a->xr + j * T;
    float amax = 0.0f;
    for (int i = 0; i < T; i++) {
        float v = fabsf(xr[i]);
        amax = v > amax ? v : amax;
    }
    // NaN activations propagate through the exact path; the int8 path maps them to 0.
    const int ok = amax > 0.0f && isfinite(amax);
    const float inv = ok ? 127.0f / amax : 0.0f;
    a->sx[j] = ok ? amax / 127.0f : 0.0f;
    for (int i = 0; i < T; i++) {
        float f = xr[i] * inv;
        f = f == f ? f : 0.0f;
        f = f > 127.0f ? 127.0f : f < -127.0f ? -127.0f : f;
        a->xq[j * T + i] = (int8_t)_mm_cvtss_si32(_mm_set_ss(f));
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void prep_quant_avx512(const kvq_hqx *w, kvq_hqx_act *a,
                                                                                 int64_t j) {
    const int T = w->tile;
    const float *xr = a->xr + j * T;
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    __m512 mx = _mm512_setzero_ps();
    for (int i = 0; i < T; i += 16) mx = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(xr + i)), absm)), mx); // NaN: keeps mx
    const float amax = _mm512_reduce_max_ps(mx);
    const int ok = amax > 0.0f && isfinite(amax);
    const __m512 inv = _mm512_set1_ps(ok ? 127.0f / amax : 0.0f);
    a->sx[j] = ok ? amax / 127.0f : 0.0f;
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    for (int i = 0; i < T; i += 16) {
        __m512 f = _mm512_mul_ps(_mm512_loadu_ps(xr + i), inv);
        f = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(f, f, _CMP_ORD_Q), f);
        f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
        _mm_storeu_si128((__m128i *)(a->xq + j * T + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(f)));
    }
}

void kvq_hqx_prep_tiles(const kvq_hqx *w, const float *x, kvq_hqx_act *a, int64_t j0, int64_t j1, kvq_hqx_isa isa) {
    if (isa == KVQ_HQX_ISA_AUTO) isa = kvq_cpu_features() & KVQ_CPU_AVX512 ? KVQ_HQX_ISA_VNNI : KVQ_HQX_ISA_REF;
    for (int64_t j = j0; j < j1; j++) {
        prep_rotate(w, x, a, j);
        if (isa == KVQ_HQX_ISA_VNNI && w->tile % 16 == 0) prep_quant_avx512(w, a, j);
        else prep_quant_scalar(w, a, j);
        prep_side(w, a, j);
    }
}

void kvq_hqx_prep(const kvq_hqx *w, const float *x, kvq_hqx_act *a) {
    kvq_hqx_prep_tiles(w, x, a, 0, w->cols_p / w->tile, KVQ_HQX_ISA_AUTO);
}

// ---- run-time ISA choice

kvq_hqx_isa kvq_hqx_isa_best(void) {
    const int f = kvq_cpu_features();
    return f & KVQ_CPU_VNNI ? KVQ_HQX_ISA_VNNI : f & KVQ_CPU_AVX2 ? KVQ_HQX_ISA_AVX2 : KVQ_HQX_ISA_REF;
}

static kvq_hqx_isa one_token_forced = KVQ_HQX_ISA_AUTO;

void kvq_hqx_set_one_token(kvq_hqx_isa isa) { one_token_forced = isa; }

kvq_hqx_isa kvq_hqx_isa_one_token(void) {
    const kvq_hqx_isa best = kvq_hqx_isa_best();
    if (one_token_forced != KVQ_HQX_ISA_AUTO) return one_token_forced < best ? one_token_forced : best;
    if (best == KVQ_HQX_ISA_VNNI && __builtin_cpu_is("intel")) return KVQ_HQX_ISA_AVX2;
    return best;
}

const char *kvq_hqx_isa_name(kvq_hqx_isa isa) {
    switch (isa) {
    case KVQ_HQX_ISA_REF: return "ref";
    case KVQ_HQX_ISA_AVX2: return "avx2";
    case KVQ_HQX_ISA_VNNI: return "avx512-vnni";
    default: return "auto";
    }
}

// ---- reference

static inline int hqx_u(const kvq_hqx *w, int64_t gi) { // stored value of padded index gi
    if (w->vbits == 8) return w->q[gi];
    int64_t ch = gi / 64, b = gi % 64;
    uint8_t byte = w->q[ch * 32 + (b & 31)];
    int u = b < 32 ? (byte & 15) : (byte >> 4);
    for (int p = 0, np = kvq_hqx_planes(w->vbits); p < np; p++) u |= (int)((w->hb[ch * np + p] >> b) & 1) << (4 + p);
    return u;
}

static inline int hqx_cb(const kvq_hqx *w, int64_t gi) {
    if (w->lat != KVQ_HQ_LAT_E8) return 0;
    return (w->cb[gi / 64] >> ((gi % 64) / 8)) & 1;
}

// Whether row r has escapes (either form of the index: kernels/hq_layout.h).
static inline int hqx_has_esc(const kvq_hqx *w, int64_t r) {
    if (w->esc_row) return w->esc_row[r] < w->esc_row[r + 1];
    return w->esc_bits && ((w->esc_bits[r >> 3] >> (r & 7)) & 1);
}

// Escape corrections of row r for one token, exact mode (the int8 paths add them to the
// tiles' integer sums instead).
static float hqx_escapes(const kvq_hqx *w, int64_t r, const kvq_hqx_act *a, kvq_hqx_mode mode) {
    const int m = kvq_hqx_mult(w->lat), sh = __builtin_ctz((unsigned)w->tile);
    const int64_t t0 = r * (w->cols_p >> sh);
    float acc = 0.0f;
    uint32_t e0_, e1_;
    kvq_hqx_esc_range(w, r, &e0_, &e1_);
    for (uint32_t e = e0_; e < e1_; e++) {
        uint32_t col = kvq_hqx_esc_col(w->esc[e]);
        acc += kvq_hqx_scale(w, t0 + (col >> sh)) * ((float)(kvq_hqx_esc_delta(w->esc[e]) * m) * a->xr[col]);
    }
    (void)mode;
    return acc;
}

// Escape corrections of row r in int8 mode, in float (the 512-bit decode path adds them
// after its exact tile sums; rare by construction).
static float hqx_escapes_int8(const kvq_hqx *w, int64_t r, const kvq_hqx_act *a) {
    const int m = kvq_hqx_mult(w->lat), sh = __builtin_ctz((unsigned)w->tile);
    const int64_t t0 = r * (w->cols_p >> sh);
    float acc = 0.0f;
    uint32_t e0_, e1_;
    kvq_hqx_esc_range(w, r, &e0_, &e1_);
    for (uint32_t e = e0_; e < e1_; e++) {
        uint32_t col = kvq_hqx_esc_col(w->esc[e]);
        acc += kvq_hqx_scale(w, t0 + (col >> sh)) * (a->sx[col >> sh] * (float)(kvq_hqx_esc_delta(w->esc[e]) * m * a->xq[col]));
    }
    return acc;
}

static void hqx_row_ref(const kvq_hqx *w, int64_t r, const kvq_hqx_act *act, int n_tok, float *y, int64_t ldy,
                        kvq_hqx_mode mode) {
    const int T = w->tile, m = kvq_hqx_mult(w->lat), off = hqx_off(w);
    const int64_t tpr = w->cols_p / T;
    for (int k = 0; k < n_tok; k++) {
        const kvq_hqx_act *a = &act[k];
        float acc = 0.0f;
        for (int64_t j = 0; j < tpr; j++) {
            int64_t t = r * tpr + j, g0 = t * T;
            if (mode == KVQ_HQX_EXACT) {
                float d = 0.0f;
                for (int i = 0; i < T; i++) {
                    int c = m * (hqx_u(w, g0 + i) - off) + hqx_cb(w, g0 + i);
                    d += (float)c * a->xr[j * T + i];
                }
                acc += kvq_hqx_scale(w, t) * d;
                if (w->zero) acc += w->zero[t] * a->xs[j];
            } else {
                int32_t d = a->zt[j];
                uint32_t e0_, e1_;
                kvq_hqx_esc_range(w, r, &e0_, &e1_);
                for (uint32_t e = e0_; e < e1_; e++) // escapes of this tile
                    if (kvq_hqx_esc_col(w->esc[e]) / T == j)
                        d += m * kvq_hqx_esc_delta(w->esc[e]) * a->xq[kvq_hqx_esc_col(w->esc[e])];
                for (int i = 0; i < T; i++) d += m * hqx_u(w, g0 + i) * a->xq[j * T + i];
                if (w->lat == KVQ_HQ_LAT_E8)
                    for (int v = 0; v < T / 8; v++)
                        if (hqx_cb(w, g0 + 8 * v)) d += a->s8[(j * T) / 8 + v];
                acc += kvq_hqx_scale(w, t) * (a->sx[j] * (float)d);
                if (w->zero) acc += w->zero[t] * a->xs[j];
            }
        }
        y[k * ldy + r] = mode == KVQ_HQX_EXACT ? acc + hqx_escapes(w, r, a, mode) : acc;
    }
}

// ---- exact mode, vectorized by the compiler (float dot products per 64-coordinate chunk)

#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#ifndef __clang__ // clang: no contraction here (the exact mode's bound holds either way)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
#endif
CLONES static void hqx_row_exact(const kvq_hqx *w, int64_t r, const kvq_hqx_act *act, int n_tok, float *y,
                                 int64_t ldy) {
    const int T = w->tile, m = kvq_hqx_mult(w->lat), off = hqx_off(w), e8 = w->lat == KVQ_HQ_LAT_E8;
    const int64_t tpr = w->cols_p / T;
    float c[KVQ_HQX_CHUNK];
    for (int k = 0; k < n_tok; k++) y[k * ldy + r] = 0.0f;
    for (int64_t j = 0; j < tpr; j++) {
        int64_t t = r * tpr + j;
        float d[4] = {0, 0, 0, 0};
        for (int ch = 0; ch < T / 64; ch++) {
            int64_t g = (t * T) / 64 + ch;
            uint8_t cbb = e8 ? w->cb[g] : 0;
            if (w->vbits != 8) {
                const uint8_t *q = w->q + g * 32;
                const int np = kvq_hqx_planes(w->vbits);
                for (int b = 0; b < 32; b++) {
                    int u0 = q[b] & 15, u1 = q[b] >> 4;
                    for (int p = 0; p < np; p++) {
                        u0 |= (int)((w->hb[g * np + p] >> b) & 1) << (4 + p);
                        u1 |= (int)((w->hb[g * np + p] >> (b + 32)) & 1) << (4 + p);
                    }
                    c[b] = (float)(m * (u0 - off) + ((cbb >> (b / 8)) & 1));
                    c[b + 32] = (float)(m * (u1 - off) + ((cbb >> (4 + b / 8)) & 1));
                }
            } else {
                const uint8_t *q = w->q + g * 64;
                for (int b = 0; b < 64; b++) c[b] = (float)(m * (q[b] - off) + ((cbb >> (b / 8)) & 1));
            }
            for (int k = 0; k < n_tok && k < 4; k++) {
                const float *xr = act[k].xr + j * T + 64 * ch;
                float s = 0.0f;
                for (int i = 0; i < 64; i++) s += c[i] * xr[i];
                d[k] += s;
            }
        }
        for (int k = 0; k < n_tok && k < 4; k++)
            y[k * ldy + r] += kvq_hqx_scale(w, t) * d[k] + (w->zero ? w->zero[t] * act[k].xs[j] : 0.0f);
    }
}
#ifndef __clang__
#pragma GCC pop_options
#endif

// ---- int8 paths: one body for AVX2 (maddubs) and AVX-512 VNNI (dpbusd) on 256-bit vectors.
// Nibble chunk (64 coordinates): 32 bytes, low nibbles ↔ xq[0..31], high ↔ xq[32..63]; byte
// chunk: 64 bytes ↔ xq[0..63]. Lane l of an accumulator sums coordinates 4l..4l+3 and
// 32+4l..32+4l+3 of each chunk, the split zl follows. Two accumulators per token (low and
// high halves) keep the dependency chains short; NB (1..4) tokens share each weight load.

#define HQX_HSUM8(v)                                                                            \
    ({                                                                                          \
        __m128 s_ = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));       \
        s_ = _mm_add_ps(s_, _mm_movehl_ps(s_, s_));                                             \
        s_ = _mm_add_ss(s_, _mm_movehdup_ps(s_));                                               \
        _mm_cvtss_f32(s_);                                                                      \
    })

// One tile's chunks for NB tokens: LOADW(ch, lo, hi) yields the two weight vectors of chunk ch.
#define HQX_TILE_CHUNKS(NB, DOT, LOADW)                                                         \
    for (int ch = 0; ch < nch; ch++) {                                                          \
        __m256i lo, hi;                                                                         \
        LOADW(ch, lo, hi);                                                                      \
        const size_t xo = (size_t)j * T + 64 * (size_t)ch;                                      \
        _Pragma("GCC unroll 4") for (int k = 0; k < NB; k++) {                                  \
            dpa[k] = DOT(dpa[k], lo, _mm256_loadu_si256((const __m256i *)(xk[k] + xo)));        \
            dpb[k] = DOT(dpb[k], hi, _mm256_loadu_si256((const __m256i *)(xk[k] + xo + 32)));   \
        }                                                                                       \
        if (e8) {                                                                               \
            CB_PREP(cbp[ch]);                                                                   \
            _Pragma("GCC unroll 4") for (int k = 0; k < NB; k++)                                \
                cbv[k] = CB_ADD(cbv[k], _mm256_loadu_si256((const __m256i *)(sk[k] + xo / 8)));  \
        }                                                                                       \
    }

#define HQX_LOAD_NIB(ch, lo, hi)                                                                \
    do {                                                                                        \
        __m256i by_ = _mm256_loadu_si256((const __m256i *)(qt + 32 * (ch)));                   \
        lo = _mm256_and_si256(by_, m0f);                                                        \
        hi = _mm256_and_si256(_mm256_srli_epi16(by_, 4), m0f);                                  \
    } while (0)
// vbits 5: nibbles plus bit 4 from the chunk's plane word (HQX_HIBIT per ISA).
#define HQX_LOAD_NIB5(ch, lo, hi)                                                               \
    do {                                                                                        \
        HQX_LOAD_NIB(ch, lo, hi);                                                               \
        for (int p_ = 0; p_ < np; p_++) {                                                       \
            const uint64_t hw_ = hbt[ch * np + p_];                                             \
            lo = HQX_HIBIT(lo, (uint32_t)hw_, 16 << p_);                                        \
            hi = HQX_HIBIT(hi, (uint32_t)(hw_ >> 32), 16 << p_);                                \
        }                                                                                       \
    } while (0)
#define HQX_LOAD_BYTE(ch, lo, hi)                                                               \
    do {                                                                                        \
        lo = _mm256_loadu_si256((const __m256i *)(qt + 64 * (ch)));                             \
        hi = _mm256_loadu_si256((const __m256i *)(qt + 64 * (ch) + 32));                        \
    } while (0)

// Row r, tokens k0..k0+NB. USE_ZL(vbits) says whether the offset share is added (the AVX2
// byte path multiplies signed values and has none).
#define HQX_ESC_BLOCK 256
#define HQX_ROW_BODY(NB, DOT, BDOT, USE_ZL)                                                     \
    const int T = w->tile, nch = T / 64, e8 = w->lat == KVQ_HQ_LAT_E8, mul = e8 ? 2 : 1;       \
    const int sh = __builtin_ctz((unsigned)T), nib = w->vbits == 4, use_zl = USE_ZL;          \
    const int np = kvq_hqx_planes(w->vbits);                                                   \
    const int64_t tpr = w->cols_p / T;                                                          \
    const __m256i m0f = _mm256_set1_epi8(15);                                                   \
    const __m256i bitv = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);                        \
    (void)bitv;                                                                                 \
    uint32_t e, e1;                                                                             \
    kvq_hqx_esc_range(w, r, &e, &e1);                                                           \
    __m256 facc[4];                                                                             \
    float zacc[4] = {0, 0, 0, 0};                                                               \
    const int8_t *xk[4];                                                                        \
    const int32_t *sk[4];                                                                       \
    _Pragma("GCC unroll 4") for (int k = 0; k < NB; k++) {                                      \
        facc[k] = _mm256_setzero_ps();                                                          \
        xk[k] = act[k0 + k].xq;                                                                 \
        sk[k] = act[k0 + k].s8;                                                                 \
    }                                                                                           \
    int32_t esb[HQX_ESC_BLOCK][4];                                                              \
    for (int64_t j = 0; j < tpr; j++) {                                                         \
        const int64_t t = r * tpr + j;                                                          \
        if (j % HQX_ESC_BLOCK == 0) { /* escapes of the next block of tiles: a branch-free tile loop */ \
            memset(esb, 0, sizeof esb[0] * (size_t)(tpr - j < HQX_ESC_BLOCK ? tpr - j : HQX_ESC_BLOCK)); \
            for (; e < e1 && (int64_t)(kvq_hqx_esc_col(w->esc[e]) >> sh) < j + HQX_ESC_BLOCK; e++) { \
                const uint32_t col = kvq_hqx_esc_col(w->esc[e]);                                \
                const int32_t dl = mul * kvq_hqx_esc_delta(w->esc[e]);                          \
                _Pragma("GCC unroll 4") for (int k = 0; k < NB; k++)                            \
                    esb[(col >> sh) - j][k] += dl * xk[k][col];                                 \
            }                                                                                   \
        }                                                                                       \
        const uint8_t *qt = w->q + (w->vbits != 8 ? t * (T / 2) : t * T);                       \
        const uint8_t *cbp = e8 ? w->cb + t * nch : NULL;                                       \
        __m256i dpa[4], dpb[4], cbv[4];                                                         \
        _Pragma("GCC unroll 4") for (int k = 0; k < NB; k++) dpa[k] = dpb[k] = cbv[k] = _mm256_setzero_si256(); \
        if (nib) { HQX_TILE_CHUNKS(NB, DOT, HQX_LOAD_NIB) }                                     \
        else if (np) {                                                                          \
            const uint64_t *hbt = w->hb + t * nch * np;                                         \
            HQX_TILE_CHUNKS(NB, DOT, HQX_LOAD_NIB5)                                             \
        } else { HQX_TILE_CHUNKS(NB, BDOT, HQX_LOAD_BYTE) }                                     \
        const int32_t *es = esb[j % HQX_ESC_BLOCK];                                             \
        const float ws = kvq_hqx_scale(w, t);                                                   \
        _Pragma("GCC unroll 4") for (int k = 0; k < NB; k++) {                                  \
            __m256i d = _mm256_add_epi32(dpa[k], dpb[k]);                                       \
            if (e8) d = _mm256_add_epi32(_mm256_slli_epi32(d, 1), cbv[k]);                      \
            if (use_zl) d = _mm256_add_epi32(d, _mm256_loadu_si256((const __m256i *)(act[k0 + k].zl + 8 * j))); \
            d = _mm256_add_epi32(d, _mm256_zextsi128_si256(_mm_cvtsi32_si128(es[k])));          \
            facc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(ws * act[k0 + k].sx[j]), facc[k]); \
            if (w->zero) zacc[k] += w->zero[t] * act[k0 + k].xs[j];                             \
        }                                                                                       \
    }                                                                                           \
    _Pragma("GCC unroll 4") for (int k = 0; k < NB; k++) y[(k0 + k) * ldy + r] = HQX_HSUM8(facc[k]) + zacc[k];

// AVX2: u8·s8 pairs summed in int16 (|u| ≤ 15: no saturation), pairs of int16 into int32.
#define AVX2_DOT(acc, u, s) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
// Bytes v + 128 would saturate maddubs' int16: signed v = u ^ 0x80 with the abs/sign trick.
#define AVX2_BDOT(acc, u, s)                                                                    \
    ({                                                                                          \
        __m256i v_ = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80));                         \
        AVX2_DOT(acc, _mm256_abs_epi8(v_), _mm256_sign_epi8(s, v_));                            \
    })
#define VNNI_DOT(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)

#define HQX_TGT_AVX2 __attribute__((target("avx2,fma")))
#define HQX_TGT_VNNI __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512vnni")))

// E8 coset bits: add the 8-vector sums s8 of the lanes whose bit is set.
// bit i of m32 -> +16 on byte i: bytes pick their mask byte, test their bit.
#define HQX_HIBIT(v, m32, add)                                                                  \
    ({                                                                                          \
        __m256i b_ = _mm256_shuffle_epi8(_mm256_set1_epi32((int)(m32)),                         \
                                         _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, \
                                                          2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)); \
        const __m256i bm_ = _mm256_set1_epi64x((long long)0x8040201008040201ull);              \
        __m256i s_ = _mm256_cmpeq_epi8(_mm256_and_si256(b_, bm_), bm_);                         \
        _mm256_or_si256(v, _mm256_and_si256(s_, _mm256_set1_epi8((char)(add))));                \
    })
#define CB_PREP(byte) const __m256i sel_ = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(byte), bitv), bitv)
#define CB_ADD(acc, s8) _mm256_add_epi32(acc, _mm256_and_si256(sel_, s8))
HQX_TGT_AVX2 __attribute__((always_inline)) static inline void
hqx_rows_avx2_nb(const kvq_hqx *w, int64_t r, const kvq_hqx_act *act, int k0, const int NB, float *y, int64_t ldy) {
    HQX_ROW_BODY(NB, AVX2_DOT, AVX2_BDOT, w->vbits != 8)
}
#undef CB_PREP
#undef CB_ADD
#undef HQX_HIBIT
#define HQX_HIBIT(v, m32, add) _mm256_mask_add_epi8(v, (__mmask32)(m32), v, _mm256_set1_epi8((char)(add)))
#define CB_PREP(byte) const __mmask8 sel_ = (__mmask8)(byte)
#define CB_ADD(acc, s8) _mm256_mask_add_epi32(acc, sel_, acc, s8)
HQX_TGT_VNNI __attribute__((always_inline)) static inline void
hqx_rows_vnni_nb(const kvq_hqx *w, int64_t r, const kvq_hqx_act *act, int k0, const int NB, float *y, int64_t ldy) {
    HQX_ROW_BODY(NB, VNNI_DOT, VNNI_DOT, 1)
}

// ---- decode (one token), AVX-512 VNNI on 512-bit vectors, 4 rows at a time: activation
// vectors are loaded once per 128 coordinates and shared by the rows. Per tile a row's
// integer sums stay in 16 int32 lanes (each exact: the stored offset's share is split per
// lane, act->zw), are converted and multiply-added into 16 float lanes with the tile's
// scale, and the lanes are summed once per row at the end: no horizontal reduction per
// tile. Tiles of a multiple of 128, nibbles (vbits 4..7); escapes are added afterwards in
// float (they are rare by construction).
HQX_TGT_VNNI __attribute__((always_inline)) static inline void
hqx_rows4_vnni512_np(const kvq_hqx *w, int64_t r0, const kvq_hqx_act *a, float *y, const int NP, const int E8) {
    const int T = w->tile, nb = T / 128;
    const int64_t tpr = w->cols_p / T, cpr = w->cols_p / 64; // tiles, chunks per row
    const __m512i m0f = _mm512_set1_epi8(15), b16 = _mm512_set1_epi8(16);
    const uint8_t *qr[4], *cr[4];
    const uint64_t *hr[4];
    _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++) { // each row's first chunk
        qr[rr] = w->q + (size_t)((r0 + rr) * cpr) * 32;
        hr[rr] = NP ? w->hb + (size_t)((r0 + rr) * cpr) * NP : NULL;
        cr[rr] = E8 ? w->cb + (size_t)((r0 + rr) * cpr) : NULL;
    }
    const size_t qrow = (size_t)cpr * 32, hrow = (size_t)cpr * NP; // bytes / words per row
    if (w->scode)
        for (int64_t k = 0; k < 4 * tpr; k += 64) _mm_prefetch((const char *)(w->scode + (r0 + 4) * tpr + k), _MM_HINT_T0);
    __m512 facc[4];
    float zacc[4] = {0, 0, 0, 0};
    _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++) facc[rr] = _mm512_setzero_ps();
    for (int64_t j = 0; j < tpr; j++) {
        const __m512i zw = _mm512_load_si512(a->zw + 16 * j);
        __m512i acc[4], cacc[4];
        _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++) {
            acc[rr] = E8 ? _mm512_setzero_si512() : zw;
            cacc[rr] = zw;
        }
        for (int b = 0; b < nb; b++) {
            const size_t xo = (size_t)j * T + 128 * (size_t)b, g = xo / 64; // chunk index within the row
            const __m512i xl = _mm512_load_si512(a->xp + xo), xh = _mm512_load_si512(a->xp + xo + 64);
            const __m512i s8 = E8 ? _mm512_load_si512(a->s8 + xo / 8) : _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++) {
                const __m512i by = _mm512_loadu_si512(qr[rr] + g * 32);
                // the next group of 4 rows, streamed in while this one is multiplied: its
                // nibbles line by line (64 bytes per row and block here, 4 rows' worth per
                // block), its plane words, coset bytes and scale codes
                _mm_prefetch((const char *)(qr[0] + 4 * qrow) + (g / 2 * 4 + rr) * 64, _MM_HINT_T0);
                if (NP && rr < NP) _mm_prefetch((const char *)(hr[0] + 4 * hrow) + (g / 2 * NP + rr) * 64, _MM_HINT_T0);
                if (E8 && rr == 3) _mm_prefetch((const char *)(cr[0] + 4 * cpr) + g * 4, _MM_HINT_T0);
                __m512i lo = _mm512_and_si512(by, m0f), hi = _mm512_and_si512(_mm512_srli_epi16(by, 4), m0f);
                _Pragma("GCC unroll 3") for (int p = 0; p < NP; p++) { // bit planes of chunks g and g + 1
                    const uint64_t w0 = hr[rr][g * NP + p], w1 = hr[rr][(g + 1) * NP + p];
                    const __m512i bp = _mm512_slli_epi16(b16, p);
                    lo = _mm512_mask_add_epi8(lo, (__mmask64)((w0 & 0xffffffffu) | (w1 << 32)), lo, bp);
                    hi = _mm512_mask_add_epi8(hi, (__mmask64)((w0 >> 32) | (w1 & 0xffffffff00000000ull)), hi, bp);
                }
                acc[rr] = _mm512_dpbusd_epi32(acc[rr], lo, xl);
                acc[rr] = _mm512_dpbusd_epi32(acc[rr], hi, xh);
                if (E8) { // coset bits: the 8-vector sums of the set bits (not doubled)
                    uint16_t cm;
                    memcpy(&cm, cr[rr] + g, 2);
                    cacc[rr] = _mm512_mask_add_epi32(cacc[rr], (__mmask16)cm, cacc[rr], s8);
                }
            }
        }
        const float sj = a->sx[j];
        _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++) {
            const __m512i s = E8 ? _mm512_add_epi32(_mm512_slli_epi32(acc[rr], 1), cacc[rr]) : acc[rr];
            const int64_t t = (r0 + rr) * tpr + j;
            facc[rr] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(kvq_hqx_scale(w, t) * sj), facc[rr]);
            if (w->zero) zacc[rr] += w->zero[t] * a->xs[j];
        }
    }
    _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++)
        y[r0 + rr] = _mm512_reduce_add_ps(facc[rr]) + zacc[rr] + hqx_escapes_int8(w, r0 + rr, a);
}

// Specializations by bit planes (0..3) and coset bits, so the inner loops have no run-time
// trip counts or tests.
HQX_TGT_VNNI static void hqx_rows4_vnni512(const kvq_hqx *w, int64_t r0, const kvq_hqx_act *a, float *y) {
    const int np = kvq_hqx_planes(w->vbits), e8 = w->lat == KVQ_HQ_LAT_E8;
    switch (np * 2 + e8) {
    case 0: hqx_rows4_vnni512_np(w, r0, a, y, 0, 0); break;
    case 1: hqx_rows4_vnni512_np(w, r0, a, y, 0, 1); break;
    case 2: hqx_rows4_vnni512_np(w, r0, a, y, 1, 0); break;
    case 3: hqx_rows4_vnni512_np(w, r0, a, y, 1, 1); break;
    case 4: hqx_rows4_vnni512_np(w, r0, a, y, 2, 0); break;
    case 5: hqx_rows4_vnni512_np(w, r0, a, y, 2, 1); break;
    case 6: hqx_rows4_vnni512_np(w, r0, a, y, 3, 0); break;
    default: hqx_rows4_vnni512_np(w, r0, a, y, 3, 1); break;
    }
}

// ---- decode (one token), AVX2, 4 rows at a time: the VNNI kernel's design on 256-bit
// vectors. The activation's two 32-byte halves of each chunk are loaded once and shared by
// the rows; u8·s8 products are summed by maddubs into int16 lanes, and several chunks' int16
// sums are added before one madd widens them to int32 (as many as cannot overflow: a maddubs
// lane is at most 2·(2^vbits − 1)·127, so 4 chunks for vbits 4, 2 for 5, 1 for 6, and for 7
// each product is widened alone). Per tile a row's sums stay in 8 exact int32 lanes (the
// offset's share split per lane, act->zl), are converted and multiply-added with the tile's
// scale into 8 float lanes, summed once per row. Bit plane words expand to byte masks by one
// shuffle of the word broadcast from memory; E8 coset bytes select the 8-vector sums s8 through
// a table of lane masks. The next group of 4 rows is prefetched while this one is multiplied.
// Tiles of a multiple of 64, nibbles (vbits 4..7); escapes are added afterwards in float.
#define HQX_CBM(b, v) (((b) >> (v)) & 1 ? -1 : 0)
#define HQX_CBM8(b) {HQX_CBM(b, 0), HQX_CBM(b, 1), HQX_CBM(b, 2), HQX_CBM(b, 3), HQX_CBM(b, 4), HQX_CBM(b, 5), HQX_CBM(b, 6), HQX_CBM(b, 7)}
#define HQX_CBM_4(b) HQX_CBM8(b), HQX_CBM8((b) + 1), HQX_CBM8((b) + 2), HQX_CBM8((b) + 3)
#define HQX_CBM_16(b) HQX_CBM_4(b), HQX_CBM_4((b) + 4), HQX_CBM_4((b) + 8), HQX_CBM_4((b) + 12)
#define HQX_CBM_64(b) HQX_CBM_16(b), HQX_CBM_16((b) + 16), HQX_CBM_16((b) + 32), HQX_CBM_16((b) + 48)
// lane v of entry b: −1 where bit v of the coset byte b is set (8 KiB)
static const int32_t hqx_cb_lanes[256][8] __attribute__((aligned(32))) = {HQX_CBM_64(0), HQX_CBM_64(64), HQX_CBM_64(128),
                                                                          HQX_CBM_64(192)};

#ifndef HQX_AVX2_NR
#define HQX_AVX2_NR 4 // rows per pass (divides 4)
#endif
#ifndef HQX_AVX2_PF
#define HQX_AVX2_PF 1
#endif
HQX_TGT_AVX2 __attribute__((always_inline)) static inline void
hqx_rowsn_avx2_np(const kvq_hqx *w, int64_t r0, const kvq_hqx_act *a, float *y, const int NP, const int E8,
                  const int ZR) {
    enum { NR = HQX_AVX2_NR };
    const int T = w->tile, nch = T / 64, KF = NP == 0 ? 4 : NP == 1 ? 2 : 1; // chunks per int16 flush
    const int64_t tpr = w->cols_p / T, cpr = w->cols_p / 64; // tiles, chunks per row
    const __m256i m0f = _mm256_set1_epi8(15);
    const __m256i mw = _mm256_set1_epi16(E8 ? 2 : 1); // E8's codes are 2u: doubled as they widen
    // byte k of the low (high) half's mask takes byte k/8 (4 + k/8) of the broadcast plane word
    const __m256i sel_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                            3, 3, 3, 3, 3, 3);
    const __m256i sel_hi = _mm256_add_epi8(sel_lo, _mm256_set1_epi8(4));
    const __m256i bm = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const uint8_t *qr[NR], *cr[NR];
    const uint64_t *hr[NR];
    _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) { // each row's first chunk
        qr[rr] = w->q + (size_t)((r0 + rr) * cpr) * 32;
        hr[rr] = NP ? w->hb + (size_t)((r0 + rr) * cpr) * NP : NULL;
        cr[rr] = E8 ? w->cb + (size_t)((r0 + rr) * cpr) : NULL;
    }
    const size_t qrow = (size_t)cpr * 32, hrow = (size_t)cpr * NP; // bytes / words per row
    const char *qn = (const char *)(qr[0] + NR * qrow), *hn = NP ? (const char *)(hr[0] + NR * hrow) : NULL,
               *cn = E8 ? (const char *)(cr[0] + NR * cpr) : NULL; // the next group of rows
    if (w->scode)
        for (int64_t k = 0; k < NR * tpr; k += 64) _mm_prefetch((const char *)(w->scode + (r0 + NR) * tpr + k), _MM_HINT_T0);
    float facc[NR][8] __attribute__((aligned(32)));
    float zacc[NR];
    _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) {
        _mm256_store_ps(facc[rr], _mm256_setzero_ps());
        zacc[rr] = 0.0f;
    }
    for (int64_t j = 0; j < tpr; j++) {
        const __m256i zl = _mm256_load_si256((const __m256i *)(a->zl + 8 * j));
        __m256i acc[NR], p16[NR];
        _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) {
            acc[rr] = zl;
            p16[rr] = _mm256_setzero_si256();
        }
        for (int c = 0; c < nch; c++) {
            const size_t g = (size_t)j * nch + c, xo = 64 * g; // chunk within the row, coordinate
            const __m256i xl = _mm256_load_si256((const __m256i *)(a->xq + xo)),
                          xh = _mm256_load_si256((const __m256i *)(a->xq + xo + 32));
            // the next NR rows: 32·NR bytes of nibbles, 8·NR·NP bytes of planes, NR coset bytes per chunk
            if (HQX_AVX2_PF) {
            _Pragma("GCC unroll 4") for (int l = 0; l < NR / 2; l++) _mm_prefetch(qn + 32 * NR * g + 64 * l, _MM_HINT_T0);
            if (NP && (NR * NP * g) % 8 == 0) _mm_prefetch(hn + 8 * NR * NP * g, _MM_HINT_T0);
            if (E8 && (NR * g) % 64 == 0) _mm_prefetch(cn + NR * g, _MM_HINT_T0);
            }
            _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) {
                const __m256i by = _mm256_loadu_si256((const __m256i *)(qr[rr] + 32 * g));
                __m256i lo = _mm256_and_si256(by, m0f), hi = _mm256_and_si256(_mm256_srli_epi16(by, 4), m0f);
                _Pragma("GCC unroll 3") for (int p = 0; p < NP; p++) {
                    const __m256i wv = _mm256_set1_epi64x((long long)hr[rr][g * NP + p]);
                    const __m256i add = _mm256_set1_epi8((char)(16 << p));
                    const __m256i ml = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(wv, sel_lo), bm), bm);
                    const __m256i mh = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(wv, sel_hi), bm), bm);
                    lo = _mm256_or_si256(lo, _mm256_and_si256(ml, add));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(mh, add));
                }
                if (NP == 3) { // products up to 2·127·127: each widened alone
                    acc[rr] = _mm256_add_epi32(acc[rr], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), mw));
                    acc[rr] = _mm256_add_epi32(acc[rr], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), mw));
                } else {
                    p16[rr] = _mm256_add_epi16(p16[rr], _mm256_maddubs_epi16(lo, xl));
                    p16[rr] = _mm256_add_epi16(p16[rr], _mm256_maddubs_epi16(hi, xh));
                }
                if (E8) // coset bits: the 8-vector sums of the set bits (not doubled)
                    acc[rr] = _mm256_add_epi32(acc[rr], _mm256_and_si256(_mm256_load_si256((const __m256i *)hqx_cb_lanes[cr[rr][g]]),
                                                                         _mm256_load_si256((const __m256i *)(a->s8 + xo / 8))));
            }
            if (NP != 3 && ((c + 1) % KF == 0 || c == nch - 1))
                _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) {
                    acc[rr] = _mm256_add_epi32(acc[rr], _mm256_madd_epi16(p16[rr], mw));
                    p16[rr] = _mm256_setzero_si256();
                }
        }
        const float sj = a->sx[j];
        _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) {
            const int64_t t = (r0 + rr) * tpr + j;
            _mm256_store_ps(facc[rr], _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[rr]), _mm256_set1_ps(kvq_hqx_scale(w, t) * sj),
                                                      _mm256_load_ps(facc[rr])));
            if (ZR) zacc[rr] += w->zero[t] * a->xs[j];
        }
    }
    _Pragma("GCC unroll 4") for (int rr = 0; rr < NR; rr++) {
        const __m256 f = _mm256_load_ps(facc[rr]);
        y[r0 + rr] = HQX_HSUM8(f) + zacc[rr] + (hqx_has_esc(w, r0 + rr) ? hqx_escapes_int8(w, r0 + rr, a) : 0.0f);
    }
}

// The same product for tiles of 128 (two chunks a tile: the default tile), with the chunk loop
// written out. The generic body above decides per chunk at run time whether to widen the int16
// sums and which prefetches to issue, keeps int16 and int32 accumulators for every row across
// the chunks of a tile, and spills them (callgrind: a third of its instructions were loop
// control, flush tests, accumulator moves and prefetch tests). Here a tile's activation (two
// chunks: four 32-byte halves, and the 8-vector sums for E8) is loaded once into registers and
// the rows are taken one after another inside the tile: each row's tile sum is formed and
// consumed at once. The int16 widening is fixed by the width: one madd per tile for vbits 4
// and 5 (two chunks of maddubs pairs stay below 2^15: 4·3810, 4·7874 ≤ 32767 — see above), one
// per chunk for 6, one per product for 7. The integer tile sums, and so the float work and
// its order, are the generic body's: the outputs are equal bit for bit (test_hqx asserts it).
static int hqx_avx2_t128_on = 1;
int kvq_hqx_avx2_t128(int on) {
    int was = hqx_avx2_t128_on;
    if (on >= 0) hqx_avx2_t128_on = on != 0;
    return was;
}

HQX_TGT_AVX2 __attribute__((always_inline)) static inline __m256i hqx_plane_add(__m256i v, uint64_t word, int half, int p) {
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                                         3, 3, 3, 3);
    const __m256i bm = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i wv = _mm256_set1_epi64x((long long)word);
    const __m256i m = _mm256_cmpeq_epi8(
        _mm256_and_si256(_mm256_shuffle_epi8(wv, half ? _mm256_add_epi8(sel, _mm256_set1_epi8(4)) : sel), bm), bm);
    return _mm256_or_si256(v, _mm256_and_si256(m, _mm256_set1_epi8((char)(16 << p))));
}

HQX_TGT_AVX2 __attribute__((always_inline)) static inline void
hqx_rows4_avx2_t128_np(const kvq_hqx *w, int64_t r0, const kvq_hqx_act *a, float *y, const int NP, const int E8,
                       const int ZR) {
    const int64_t tpr = w->cols_p / 128, cpr = w->cols_p / 64;
    const __m256i m0f = _mm256_set1_epi8(15);
    const __m256i mw = _mm256_set1_epi16(E8 ? 2 : 1);
    const size_t qrow = (size_t)cpr * 32, hrow = (size_t)cpr * NP; // bytes / words per row
    const uint8_t *q0 = w->q + (size_t)(r0 * cpr) * 32;
    const uint64_t *h0 = NP ? w->hb + (size_t)(r0 * cpr) * NP : NULL;
    const uint8_t *c0 = E8 ? w->cb + (size_t)(r0 * cpr) : NULL;
    const char *qn = (const char *)(q0 + 4 * qrow), *hn = NP ? (const char *)(h0 + 4 * hrow) : NULL,
               *cn = E8 ? (const char *)(c0 + 4 * cpr) : NULL; // the next group of rows
    if (w->scode)
        for (int64_t k = 0; k < 4 * tpr; k += 64) _mm_prefetch((const char *)(w->scode + (r0 + 4) * tpr + k), _MM_HINT_T0);
    float facc[4][8] __attribute__((aligned(32)));
    float zacc[4];
    _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++) {
        _mm256_store_ps(facc[rr], _mm256_setzero_ps());
        zacc[rr] = 0.0f;
    }
    for (int64_t j = 0; j < tpr; j++) {
        const size_t g = 2 * (size_t)j, xo = 128 * (size_t)j; // first chunk of the tile, its coordinate
        // the next 4 rows' share of this tile: 256 bytes of nibbles, 64·NP of planes, 8 coset bytes
        _Pragma("GCC unroll 4") for (int l = 0; l < 4; l++) _mm_prefetch(qn + 256 * j + 64 * l, _MM_HINT_T0);
        _Pragma("GCC unroll 3") for (int p = 0; p < NP; p++) _mm_prefetch(hn + 64 * NP * j + 64 * p, _MM_HINT_T0);
        if (E8 && (j & 7) == 0) _mm_prefetch(cn + 8 * j, _MM_HINT_T0);
        const __m256i xl0 = _mm256_load_si256((const __m256i *)(a->xq + xo)),
                      xh0 = _mm256_load_si256((const __m256i *)(a->xq + xo + 32)),
                      xl1 = _mm256_load_si256((const __m256i *)(a->xq + xo + 64)),
                      xh1 = _mm256_load_si256((const __m256i *)(a->xq + xo + 96));
        const __m256i zl = _mm256_load_si256((const __m256i *)(a->zl + 8 * j));
        const float sj = a->sx[j];
        _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++) {
            const uint8_t *q = q0 + rr * qrow + 32 * g;
            const __m256i b0 = _mm256_loadu_si256((const __m256i *)q), b1 = _mm256_loadu_si256((const __m256i *)(q + 32));
            __m256i lo0 = _mm256_and_si256(b0, m0f), hi0 = _mm256_and_si256(_mm256_srli_epi16(b0, 4), m0f);
            __m256i lo1 = _mm256_and_si256(b1, m0f), hi1 = _mm256_and_si256(_mm256_srli_epi16(b1, 4), m0f);
            _Pragma("GCC unroll 3") for (int p = 0; p < NP; p++) {
                const uint64_t *h = h0 + rr * hrow + g * NP;
                lo0 = hqx_plane_add(lo0, h[p], 0, p);
                hi0 = hqx_plane_add(hi0, h[p], 1, p);
                lo1 = hqx_plane_add(lo1, h[NP + p], 0, p);
                hi1 = hqx_plane_add(hi1, h[NP + p], 1, p);
            }
            __m256i acc;
            if (NP == 3) // products up to 2·127·127: each widened alone
                acc = _mm256_add_epi32(
                    _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo0, xl0), mw), _mm256_madd_epi16(_mm256_maddubs_epi16(hi0, xh0), mw)),
                    _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo1, xl1), mw), _mm256_madd_epi16(_mm256_maddubs_epi16(hi1, xh1), mw)));
            else if (NP == 2) // one chunk's two products per widening
                acc = _mm256_add_epi32(
                    _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo0, xl0), _mm256_maddubs_epi16(hi0, xh0)), mw),
                    _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo1, xl1), _mm256_maddubs_epi16(hi1, xh1)), mw));
            else // vbits 4, 5: the tile's four products in one widening
                acc = _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo0, xl0), _mm256_maddubs_epi16(hi0, xh0)),
                                                         _mm256_add_epi16(_mm256_maddubs_epi16(lo1, xl1), _mm256_maddubs_epi16(hi1, xh1))),
                                        mw);
            acc = _mm256_add_epi32(acc, zl);
            if (E8) { // coset bits: the 8-vector sums of the set bits (not doubled)
                const uint8_t *c = c0 + rr * (size_t)cpr + g;
                acc = _mm256_add_epi32(
                    acc, _mm256_add_epi32(_mm256_and_si256(_mm256_load_si256((const __m256i *)hqx_cb_lanes[c[0]]),
                                                           _mm256_load_si256((const __m256i *)(a->s8 + xo / 8))),
                                          _mm256_and_si256(_mm256_load_si256((const __m256i *)hqx_cb_lanes[c[1]]),
                                                           _mm256_load_si256((const __m256i *)(a->s8 + xo / 8 + 8)))));
            }
            const int64_t t = (r0 + rr) * tpr + j;
            _mm256_store_ps(facc[rr], _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(kvq_hqx_scale(w, t) * sj),
                                                      _mm256_load_ps(facc[rr])));
            if (ZR) zacc[rr] += w->zero[t] * a->xs[j];
        }
    }
    _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++) {
        const __m256 f = _mm256_load_ps(facc[rr]);
        y[r0 + rr] = HQX_HSUM8(f) + zacc[rr] + (hqx_has_esc(w, r0 + rr) ? hqx_escapes_int8(w, r0 + rr, a) : 0.0f);
    }
}

// One group of 4 rows with the body for its specialization: tile-128 or generic (rows per pass
// HQX_AVX2_NR), one switch over bit planes, coset bits and zero points for both.
HQX_TGT_AVX2 __attribute__((always_inline)) static inline void hqx_rows4_avx2_np(const kvq_hqx *w, int64_t r0,
                                                                                const kvq_hqx_act *a, float *y, int t128,
                                                                                const int NP, const int E8, const int ZR) {
    if (t128) hqx_rows4_avx2_t128_np(w, r0, a, y, NP, E8, ZR);
    else
        for (int64_t r = r0; r < r0 + 4; r += HQX_AVX2_NR) hqx_rowsn_avx2_np(w, r, a, y, NP, E8, ZR);
}

HQX_TGT_AVX2 static void hqx_rows4_avx2(const kvq_hqx *w, int64_t r0, const kvq_hqx_act *a, float *y, int t128) {
    const int np = kvq_hqx_planes(w->vbits), e8 = w->lat == KVQ_HQ_LAT_E8;
    if (w->zero) switch (np) { // RTN: zero points, no coset bits
        case 0: hqx_rows4_avx2_np(w, r0, a, y, t128, 0, 0, 1); break;
        case 1: hqx_rows4_avx2_np(w, r0, a, y, t128, 1, 0, 1); break;
        case 2: hqx_rows4_avx2_np(w, r0, a, y, t128, 2, 0, 1); break;
        default: hqx_rows4_avx2_np(w, r0, a, y, t128, 3, 0, 1); break;
        }
    else switch (np * 2 + e8) {
        case 0: hqx_rows4_avx2_np(w, r0, a, y, t128, 0, 0, 0); break;
        case 1: hqx_rows4_avx2_np(w, r0, a, y, t128, 0, 1, 0); break;
        case 2: hqx_rows4_avx2_np(w, r0, a, y, t128, 1, 0, 0); break;
        case 3: hqx_rows4_avx2_np(w, r0, a, y, t128, 1, 1, 0); break;
        case 4: hqx_rows4_avx2_np(w, r0, a, y, t128, 2, 0, 0); break;
        case 5: hqx_rows4_avx2_np(w, r0, a, y, t128, 2, 1, 0); break;
        case 6: hqx_rows4_avx2_np(w, r0, a, y, t128, 3, 0, 0); break;
        default: hqx_rows4_avx2_np(w, r0, a, y, t128, 3, 1, 0); break;
        }
}

#define HQX_ROW_FN(ISA)                                                                         \
    HQX_TGT_##ISA static void hqx_row_##ISA(const kvq_hqx *w, int64_t r, const kvq_hqx_act *act, int n_tok, \
                                            float *y, int64_t ldy) {                           \
        int k0 = 0;                                                                             \
        for (; k0 + 4 <= n_tok; k0 += 4) hqx_rows_##ISA##_nb(w, r, act, k0, 4, y, ldy);        \
        switch (n_tok - k0) {                                                                   \
        case 3: hqx_rows_##ISA##_nb(w, r, act, k0, 3, y, ldy); break;                           \
        case 2: hqx_rows_##ISA##_nb(w, r, act, k0, 2, y, ldy); break;                           \
        case 1: hqx_rows_##ISA##_nb(w, r, act, k0, 1, y, ldy); break;                           \
        default: break;                                                                         \
        }                                                                                       \
    }
#define hqx_rows_AVX2_nb hqx_rows_avx2_nb
#define hqx_rows_VNNI_nb hqx_rows_vnni_nb
HQX_ROW_FN(AVX2)
HQX_ROW_FN(VNNI)

void kvq_hqx_matmul_rows(const kvq_hqx *w, const kvq_hqx_act *act, int n_tok, float *y, int64_t ldy,
                         kvq_hqx_mode mode, kvq_hqx_isa isa, int64_t r0, int64_t r1) {
    if (isa == KVQ_HQX_ISA_AUTO) isa = n_tok == 1 && mode == KVQ_HQX_INT8 ? kvq_hqx_isa_one_token() : kvq_hqx_isa_best();
    int64_t r = r0;
    if (isa == KVQ_HQX_ISA_VNNI && mode == KVQ_HQX_INT8 && n_tok == 1 && w->tile % 128 == 0 && w->vbits != 8)
        for (; r + 4 <= r1; r += 4) hqx_rows4_vnni512(w, r, act, y);
    if (isa == KVQ_HQX_ISA_AVX2 && mode == KVQ_HQX_INT8 && n_tok == 1 && w->vbits != 8) {
        const int t128 = w->tile == 128 && hqx_avx2_t128_on;
        for (; r + 4 <= r1; r += 4) hqx_rows4_avx2(w, r, act, y, t128);
    }
    for (; r < r1; r++) {
        if (isa == KVQ_HQX_ISA_REF) hqx_row_ref(w, r, act, n_tok, y, ldy, mode);
        else if (mode == KVQ_HQX_EXACT) {
            for (int k0 = 0; k0 < n_tok; k0 += 4) {
                int nb = n_tok - k0 < 4 ? n_tok - k0 : 4;
                hqx_row_exact(w, r, act + k0, nb, y + k0 * ldy, ldy);
                for (int k = 0; k < nb; k++) y[(k0 + k) * ldy + r] += hqx_escapes(w, r, &act[k0 + k], mode);
            }
        } else if (isa == KVQ_HQX_ISA_VNNI) hqx_row_VNNI(w, r, act, n_tok, y, ldy);
        else hqx_row_AVX2(w, r, act, n_tok, y, ldy);
    }
}

void kvq_hqx_matmul(const kvq_hqx *w, const kvq_hqx_act *act, int n_tok, float *y, int64_t ldy,
                    kvq_hqx_mode mode, kvq_hqx_isa isa, int n_threads) {
    if (isa == KVQ_HQX_ISA_AUTO) isa = n_tok == 1 && mode == KVQ_HQX_INT8 ? kvq_hqx_isa_one_token() : kvq_hqx_isa_best();
    const int64_t units = (w->rows + 3) / 4; // groups of 4 rows
    const int nt = kvq_nthreads(n_threads);
#pragma omp parallel for schedule(static) num_threads(nt) if (w->rows * w->cols_p * n_tok > 32768)
    for (int64_t u = 0; u < units; u++)
        kvq_hqx_matmul_rows(w, act, n_tok, y, ldy, mode, isa, 4 * u, 4 * u + 4 < w->rows ? 4 * u + 4 : w->rows);
}

// The codes c of tile t (T values) with the row's escapes from *e on applied.
__attribute__((always_inline)) static inline void hqx_tile_codes(const kvq_hqx *w, int64_t t, int64_t c0, int32_t *c, uint32_t *e, uint32_t e1) {
    const int T = w->tile, m = kvq_hqx_mult(w->lat), off = hqx_off(w), e8 = w->lat == KVQ_HQ_LAT_E8;
    for (int ch = 0; ch < T / 64; ch++) {
        int32_t *cc = c + 64 * ch;
        if (w->vbits != 8) {
            const uint8_t *q = w->q + (size_t)t * (T / 2) + 32 * ch;
            for (int b = 0; b < 32; b++) {
                cc[b] = m * ((q[b] & 15) - off);
                cc[b + 32] = m * ((q[b] >> 4) - off);
            }
            for (int p = 0, np = kvq_hqx_planes(w->vbits); p < np; p++) {
                uint64_t hb = w->hb[((size_t)t * (T / 64) + ch) * np + p];
                for (int i = 0; i < 64; i++) cc[i] += m * (16 << p) * (int)((hb >> i) & 1);
            }
        } else {
            const uint8_t *q = w->q + (size_t)t * T + 64 * ch;
            for (int b = 0; b < 64; b++) cc[b] = m * (q[b] - off);
        }
        if (e8) {
            uint8_t cbb = w->cb[(size_t)t * (T / 64) + ch];
            for (int i = 0; i < 64; i++) cc[i] += (cbb >> (i >> 3)) & 1;
        }
    }
    for (; *e < e1 && kvq_hqx_esc_col(w->esc[*e]) < (uint32_t)(c0 + T); (*e)++)
        c[kvq_hqx_esc_col(w->esc[*e]) - c0] += m * kvq_hqx_esc_delta(w->esc[*e]);
}

#ifdef __clang__
#define HQX_O3
#else
#define HQX_O3 optimize("O3")
#endif
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), HQX_O3))
static void hqx_row_f32_impl(const kvq_hqx *w, int64_t r, float *out) {
    const int T = w->tile;
    const int64_t tpr = w->cols_p / T;
    int32_t c[KVQ_HQ_MAX_TILE], b[KVQ_HQ_MAX_TILE];
    uint32_t e, e1;
    kvq_hqx_esc_range(w, r, &e, &e1);
    for (int64_t j = 0; j < tpr; j++) {
        int64_t t = r * tpr + j, c0 = j * T;
        int n = c0 + T <= w->cols ? T : (int)(w->cols - c0);
        if (n <= 0) break;
        hqx_tile_codes(w, t, c0, c, &e, e1);
        const float s = kvq_hqx_scale(w, t);
        if (!w->rotate) { // RTN: q·scale + zero, the decoder's expression
            for (int i = 0; i < n; i++) out[c0 + i] = (float)c[i] * s + w->zero[t];
            continue;
        }
        if (s == 0.0f) { memset(out + c0, 0, sizeof(float) * (size_t)n); continue; }
        if (w->lat == KVQ_HQ_LAT_A2) { // as the decoder: √3·H·(ny part) + H·(nx part), exact integers
            for (int i = 0; i < T; i += 2) { b[i] = c[i]; b[i + 1] = 0; c[i] = 0; }
            kvq_wht_i32(c, T);
            kvq_wht_i32(b, T);
            for (int i = 0; i < n; i++) out[c0 + i] = ((float)c[i] + KVQ_HQ_SQRT3_F * (float)b[i]) * s;
        } else {
            kvq_wht_i32(c, T);
            for (int i = 0; i < n; i++) out[c0 + i] = (float)c[i] * s;
        }
        // ·(±1) as a sign flip: the same bits as the decoder's multiplication
        for (int wd = 0; wd * 64 < n; wd++) {
            uint64_t bits = kvq_hq_sign_word(w->seed, (uint64_t)j, (uint64_t)wd);
            uint32_t *o = (uint32_t *)(out + c0 + 64 * wd);
            int lim = n - 64 * wd < 64 ? n - 64 * wd : 64;
            for (int i = 0; i < lim; i++) o[i] ^= (uint32_t)((bits >> i) & 1) << 31;
        }
    }
}

void kvq_hqx_row_f32(const kvq_hqx *w, int64_t r, float *out) { hqx_row_f32_impl(w, r, out); }

size_t kvq_hqx_dense_scratch(const kvq_hqx *w, int n_tok) {
    return (size_t)KVQ_HQX_DENSE_BLOCK * (size_t)w->cols + (size_t)n_tok * KVQ_HQX_DENSE_BLOCK;
}

static void hqx_row_cb(const void *w, int64_t r, float *out) { kvq_hqx_row_f32((const kvq_hqx *)w, r, out); }

void kvq_hqx_matmul_dense(const kvq_hqx *w, const float *x, int n_tok, float *y, int64_t ldy, float *scratch,
                          int n_threads) {
    kvq_matmul_decoded_rows(hqx_row_cb, w, w->rows, w->cols, KVQ_HQX_DENSE_BLOCK, x, n_tok, y, ldy, scratch, n_threads);
}

size_t kvq_hqx_bytes(const kvq_hqx *w) {
    size_t n = (size_t)(w->rows * w->cols_p);
    return n * (w->vbits == 8 ? 2 : 1) / 2 + n / 8 * (size_t)kvq_hqx_planes(w->vbits) + (w->cb ? n / 64 : 0) +
           n / (size_t)w->tile * (w->scode ? 1 : sizeof(float)) + (w->scode ? sizeof(float) * (size_t)w->n_lut : 0) +
           (w->zero ? n / (size_t)w->tile * sizeof(float) : 0) +
           kvq_hqx_esc_row_bytes(w) + (size_t)kvq_hqx_esc_count(w) * 4;
}

int64_t kvq_hqx_esc_count(const kvq_hqx *w) { return w->n_esc; }
size_t kvq_hqx_esc_row_bytes(const kvq_hqx *w) {
    if (w->esc_row) return (size_t)(w->rows + 1) * 4;
    return (w->esc_bits ? (size_t)(w->rows + 7) / 8 : 0) + (w->esc_r ? 4 * (size_t)w->n_esc : 0);
}

int kvq_hqx_compact(kvq_hqx *w) {
    if (w->esc_row) { // a bit per row and the escapes' rows (ascending: esc is in row order)
        uint8_t *bits = NULL;
        uint32_t *er = NULL;
        if (w->n_esc) {
            bits = calloc((size_t)(w->rows + 7) / 8, 1);
            er = malloc(4 * (size_t)w->n_esc);
            if (!bits || !er) { free(bits); free(er); return -1; }
            for (int64_t r = 0; r < w->rows; r++)
                for (uint32_t e = w->esc_row[r]; e < w->esc_row[r + 1]; e++) {
                    er[e] = (uint32_t)r;
                    bits[r >> 3] |= (uint8_t)(1u << (r & 7));
                }
        }
        free(w->esc_row);
        w->esc_row = NULL;
        w->esc_bits = bits;
        w->esc_r = er;
    }
    if (w->scode && !w->lut_own) { // the table's used entries only, codes rebased to the smallest
        const int64_t nt = w->rows * (w->cols_p / w->tile);
        int lo = 255, hi = 0;
        for (int64_t t = 0; t < nt; t++) {
            if (w->scode[t] < lo) lo = w->scode[t];
            if (w->scode[t] > hi) hi = w->scode[t];
        }
        if (nt == 0) lo = hi = 0;
        float *lut = malloc(sizeof(float) * (size_t)(hi - lo + 1));
        uint8_t *sc = malloc((size_t)(nt ? nt : 1));
        if (!lut || !sc) { free(lut); free(sc); return -1; }
        memcpy(lut, w->lut + lo, sizeof(float) * (size_t)(hi - lo + 1));
        for (int64_t t = 0; t < nt; t++) sc[t] = (uint8_t)(w->scode[t] - lo);
        free(w->scode); // the packer's table went with it
        w->scode = sc;
        w->lut = lut;
        w->n_lut = hi - lo + 1;
        w->lut_own = 1;
    }
    return 0;
}

// Arrays carry a 64-byte header just before them: how they were obtained. Large ones (4 MiB
// and more) are their own anonymous mapping, 2 MiB-aligned and marked for transparent huge
// pages: the decode kernels stream every row group once per token, and with 4 KiB pages
// (or only partly huge ones, as when calloc's mapping is advised after the fact) a 43 MB
// product from DRAM ran at 25-26 against 29-30 G weights/s. Fresh mappings are zero and
// take memory only where written.
typedef struct { void *base; size_t len; int mapped; } hqx_hdr;
_Static_assert(sizeof(hqx_hdr) <= 64, "header fits its slot");
#define HQX_HUGE ((size_t)2 << 20)

void *kvq_hqx_alloc(size_t bytes) {
    hqx_hdr h = {NULL, 0, 0};
    uint8_t *p;
    if (bytes >= 2 * HQX_HUGE) {
        h.len = bytes + 2 * HQX_HUGE;
        void *m = mmap(NULL, h.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        h.base = m, h.mapped = 1;
        p = (uint8_t *)(((uintptr_t)m + 64 + HQX_HUGE - 1) & ~(uintptr_t)(HQX_HUGE - 1));
        madvise(p, (bytes + HQX_HUGE - 1) & ~(HQX_HUGE - 1), MADV_HUGEPAGE); // advice only
    } else {
        if (!(h.base = aligned_alloc(64, ((bytes + 63) & ~(size_t)63) + 64))) return NULL;
        p = (uint8_t *)h.base + 64;
        memset(p, 0, bytes);
    }
    memcpy(p - 64, &h, sizeof h);
    return p;
}

void kvq_hqx_dealloc(void *p) {
    if (!p) return;
    hqx_hdr h;
    memcpy(&h, (uint8_t *)p - 64, sizeof h);
    if (h.mapped) munmap(h.base, h.len);
    else free(h.base);
}

void kvq_hqx_free(kvq_hqx *w) {
    if (!w) return;
    kvq_hqx_dealloc(w->q);
    free(w->cb);
    free(w->scale);
    free(w->scode);
    kvq_hqx_dealloc(w->hb);
    free(w->zero);
    free(w->esc_row);
    free(w->esc);
    if (w->lut_own) free(w->lut);
    free(w->esc_bits);
    free(w->esc_r);
    memset(w, 0, sizeof *w);
}
