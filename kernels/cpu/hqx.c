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

#include "kernels/cpu/threads.h"
#include "kernels/cpu/wht.h"

#pragma GCC diagnostic ignored "-Wpsabi"

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t kvq_hqx_act_bytes(const kvq_hqx *w) {
    size_t cp = (size_t)w->cols_p, nt = cp / (size_t)w->tile;
    return al64(cp * 4) + al64(cp) + al64(nt * 4) + al64(cp / 8 * 4) + al64(nt * 4) + al64(nt * 32);
}

void kvq_hqx_act_init(const kvq_hqx *w, void *buf, kvq_hqx_act *a) {
    size_t cp = (size_t)w->cols_p, nt = cp / (size_t)w->tile;
    uint8_t *p = buf;
    a->xr = (float *)p, p += al64(cp * 4);
    a->xq = (int8_t *)p, p += al64(cp);
    a->sx = (float *)p, p += al64(nt * 4);
    a->s8 = (int32_t *)p, p += al64(cp / 8 * 4);
    a->zt = (int32_t *)p, p += al64(nt * 4);
    a->zl = (int32_t *)p;
}

// Offset added to stored values (nibble: v + 8; byte: v + 128).
static inline int hqx_off(const kvq_hqx *w) { return w->vbits == 4 ? 8 : 128; }

void kvq_hqx_prep(const kvq_hqx *w, const float *x, kvq_hqx_act *a) {
    const int T = w->tile, m = kvq_hqx_mult(w->lat), off = hqx_off(w);
    const int64_t tpr = w->cols_p / T;
    for (int64_t j = 0; j < tpr; j++) {
        float *xr = a->xr + j * T;
        for (int wd = 0; wd < T / 64; wd++) {
            uint64_t bits = kvq_hq_sign_word(w->seed, (uint64_t)j, (uint64_t)wd);
            for (int i = 0; i < 64; i++) {
                int64_t col = j * T + 64 * wd + i;
                float v = col < w->cols ? x[col] : 0.0f;
                xr[64 * wd + i] = ((bits >> i) & 1) ? -v : v;
            }
        }
        kvq_wht(xr, T);
        if (w->lat == KVQ_HQ_LAT_A2)
            for (int i = 0; i < T; i += 2) xr[i] *= KVQ_HQ_SQRT3_F;
        float amax = 0.0f;
        for (int i = 0; i < T; i++) amax = fmaxf(amax, fabsf(xr[i]));
        // NaN activations propagate through the exact path; the int8 path maps them to 0.
        float inv = amax > 0.0f && isfinite(amax) ? 127.0f / amax : 0.0f;
        a->sx[j] = amax > 0.0f && isfinite(amax) ? amax / 127.0f : 0.0f;
        int32_t sum = 0;
        for (int v = 0; v < T / 8; v++) {
            int32_t s = 0;
            for (int i = 8 * v; i < 8 * v + 8; i++) {
                float f = xr[i] * inv;
                int q = f >= 127.0f ? 127 : f <= -127.0f ? -127 : (int)lrintf(f == f ? f : 0.0f);
                a->xq[j * T + i] = (int8_t)q;
                s += q;
            }
            a->s8[(j * T) / 8 + v] = s;
            sum += s;
        }
        a->zt[j] = -off * m * sum;
        int32_t *zl = a->zl + 8 * j;
        for (int l = 0; l < 8; l++) zl[l] = 0;
        for (int i = 0; i < T; i++) zl[(i % 32) / 4] += a->xq[j * T + i];
        for (int l = 0; l < 8; l++) zl[l] *= -off * m;
    }
}

// ---- run-time ISA choice

kvq_hqx_isa kvq_hqx_isa_best(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw"))
        return KVQ_HQX_ISA_VNNI;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KVQ_HQX_ISA_AVX2;
    return KVQ_HQX_ISA_REF;
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
    return b < 32 ? (byte & 15) : (byte >> 4);
}

static inline int hqx_cb(const kvq_hqx *w, int64_t gi) {
    if (w->lat != KVQ_HQ_LAT_E8) return 0;
    return (w->cb[gi / 64] >> ((gi % 64) / 8)) & 1;
}

// Escape corrections of row r for one token.
static float hqx_escapes(const kvq_hqx *w, int64_t r, const kvq_hqx_act *a, kvq_hqx_mode mode) {
    const int T = w->tile, m = kvq_hqx_mult(w->lat);
    const int64_t tpr = w->cols_p / T;
    float acc = 0.0f;
    for (uint32_t e = w->esc_row[r]; e < w->esc_row[r + 1]; e++) {
        uint32_t col = kvq_hqx_esc_col(w->esc[e]);
        int32_t d = kvq_hqx_esc_delta(w->esc[e]) * m;
        int64_t j = col / T;
        float s = w->scale[r * tpr + j];
        if (mode == KVQ_HQX_EXACT) acc += s * ((float)d * a->xr[col]);
        else acc += s * (a->sx[j] * (float)(d * a->xq[col]));
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
                acc += w->scale[t] * d;
            } else {
                int32_t d = a->zt[j];
                for (int i = 0; i < T; i++) d += m * hqx_u(w, g0 + i) * a->xq[j * T + i];
                if (w->lat == KVQ_HQ_LAT_E8)
                    for (int v = 0; v < T / 8; v++)
                        if (hqx_cb(w, g0 + 8 * v)) d += a->s8[(j * T) / 8 + v];
                acc += w->scale[t] * (a->sx[j] * (float)d);
            }
        }
        y[k * ldy + r] = acc + hqx_escapes(w, r, a, mode);
    }
}

// ---- exact mode, vectorized by the compiler (float dot products per 64-coordinate chunk)

#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
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
            if (w->vbits == 4) {
                const uint8_t *q = w->q + g * 32;
                for (int b = 0; b < 32; b++) {
                    c[b] = (float)(m * ((q[b] & 15) - off) + ((cbb >> (b / 8)) & 1));
                    c[b + 32] = (float)(m * ((q[b] >> 4) - off) + ((cbb >> (4 + b / 8)) & 1));
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
        for (int k = 0; k < n_tok && k < 4; k++) y[k * ldy + r] += w->scale[t] * d[k];
    }
}
#pragma GCC pop_options

// ---- int8 paths: the same body for AVX2 (maddubs) and AVX-512 VNNI (dpbusd) on 256-bit
// vectors. One 64-coordinate chunk: 32 nibble bytes, low nibbles ↔ xq[0..31], high ↔ xq[32..63].

#define HQX_HSUM8(v)                                                                            \
    ({                                                                                          \
        __m128 s_ = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));       \
        s_ = _mm_add_ps(s_, _mm_movehl_ps(s_, s_));                                             \
        s_ = _mm_add_ss(s_, _mm_movehdup_ps(s_));                                               \
        _mm_cvtss_f32(s_);                                                                      \
    })

// BODY(NB): rows r, NB tokens from k0; DOT(acc, u8, s8) accumulates Σ u·s into int32 lanes;
// SDOT(acc, s8a, s8b) the signed-by-signed version for byte values (AVX2 only needs it).
#define HQX_INT_BODY(NB, DOT, BYTES_DOT)                                                        \
    const int T = w->tile, e8 = w->lat == KVQ_HQ_LAT_E8;                                       \
    const int64_t tpr = w->cols_p / T;                                                          \
    const __m256i m0f = _mm256_set1_epi8(15);                                                   \
    const __m256i bitv = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);                        \
    __m256 facc[NB];                                                                            \
    for (int k = 0; k < NB; k++) facc[k] = _mm256_setzero_ps();                                 \
    for (int64_t j = 0; j < tpr; j++) {                                                         \
        int64_t t = r * tpr + j;                                                                \
        __m256i dp[NB], cbv[NB];                                                                \
        for (int k = 0; k < NB; k++) dp[k] = cbv[k] = _mm256_setzero_si256();                  \
        for (int ch = 0; ch < T / 64; ch++) {                                                   \
            int64_t g = (t * T) / 64 + ch;                                                      \
            int64_t xo = j * T + 64 * ch;                                                       \
            if (w->vbits == 4) {                                                                \
                __m256i by = _mm256_loadu_si256((const __m256i *)(w->q + g * 32));              \
                __m256i lo = _mm256_and_si256(by, m0f);                                         \
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(by, 4), m0f);                   \
                for (int k = 0; k < NB; k++) {                                                  \
                    __m256i x0 = _mm256_loadu_si256((const __m256i *)(act[k0 + k].xq + xo));    \
                    __m256i x1 = _mm256_loadu_si256((const __m256i *)(act[k0 + k].xq + xo + 32)); \
                    dp[k] = DOT(dp[k], lo, x0);                                                 \
                    dp[k] = DOT(dp[k], hi, x1);                                                 \
                }                                                                               \
            } else {                                                                            \
                __m256i u0 = _mm256_loadu_si256((const __m256i *)(w->q + g * 64));              \
                __m256i u1 = _mm256_loadu_si256((const __m256i *)(w->q + g * 64 + 32));         \
                for (int k = 0; k < NB; k++) {                                                  \
                    __m256i x0 = _mm256_loadu_si256((const __m256i *)(act[k0 + k].xq + xo));    \
                    __m256i x1 = _mm256_loadu_si256((const __m256i *)(act[k0 + k].xq + xo + 32)); \
                    dp[k] = BYTES_DOT(dp[k], u0, x0);                                           \
                    dp[k] = BYTES_DOT(dp[k], u1, x1);                                           \
                }                                                                               \
            }                                                                                   \
            if (e8) {                                                                           \
                __m256i bc = _mm256_set1_epi32(w->cb[g]);                                       \
                __m256i sel = _mm256_cmpeq_epi32(_mm256_and_si256(bc, bitv), bitv);             \
                for (int k = 0; k < NB; k++)                                                    \
                    cbv[k] = _mm256_add_epi32(                                                  \
                        cbv[k], _mm256_and_si256(sel, _mm256_loadu_si256(                       \
                                                          (const __m256i *)(act[k0 + k].s8 + xo / 8)))); \
            }                                                                                   \
        }                                                                                       \
        for (int k = 0; k < NB; k++) {                                                          \
            __m256i d = e8 ? _mm256_slli_epi32(dp[k], 1) : dp[k];                               \
            d = _mm256_add_epi32(d, cbv[k]);                                                    \
            d = HQX_ZL(d, k);                                                                   \
            float f = w->scale[t] * act[k0 + k].sx[j];                                          \
            facc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(f), facc[k]);      \
        }                                                                                       \
    }                                                                                           \
    for (int k = 0; k < NB; k++)                                                                \
        y[(k0 + k) * ldy + r] = HQX_HSUM8(facc[k]) + hqx_escapes(w, r, &act[k0 + k], KVQ_HQX_INT8);

// AVX2: u8·s8 pairs summed in int16 (no saturation: |u| ≤ 15 or the byte path below), then
// pairs of int16 into int32.
#define AVX2_DOT(acc, u, s) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
// Byte values v + 128 would overflow maddubs' int16: use signed v = u ^ 0x80 and the
// abs/sign trick, so the AVX2 byte path computes Σ v·x (no offset share: zt not added).
#define AVX2_BDOT(acc, u, s)                                                                    \
    ({                                                                                          \
        __m256i v_ = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80));                         \
        AVX2_DOT(acc, _mm256_abs_epi8(v_), _mm256_sign_epi8(s, v_));                            \
    })
#define VNNI_DOT(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)

#define HQX_ZL(d, k)                                                                            \
    (w->vbits == 4 ? _mm256_add_epi32(d, _mm256_loadu_si256((const __m256i *)(act[k0 + (k)].zl + 8 * j))) : (d))
__attribute__((target("avx2,fma"), always_inline)) static inline void
hqx_rows_avx2_nb(const kvq_hqx *w, int64_t r, const kvq_hqx_act *act, int k0, const int NB, float *y, int64_t ldy) {
    HQX_INT_BODY(NB, AVX2_DOT, AVX2_BDOT)
}
#undef HQX_ZL
#define HQX_ZL(d, k) _mm256_add_epi32(d, _mm256_loadu_si256((const __m256i *)(act[k0 + (k)].zl + 8 * j)))
__attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512vnni"), always_inline)) static inline void
hqx_rows_vnni_nb(const kvq_hqx *w, int64_t r, const kvq_hqx_act *act, int k0, const int NB, float *y, int64_t ldy) {
    HQX_INT_BODY(NB, VNNI_DOT, VNNI_DOT)
}
#undef HQX_ZL

__attribute__((target("avx2,fma"))) static void hqx_row_avx2(const kvq_hqx *w, int64_t r, const kvq_hqx_act *act,
                                                            int n_tok, float *y, int64_t ldy) {
    int k0 = 0;
    for (; k0 + 4 <= n_tok; k0 += 4) hqx_rows_avx2_nb(w, r, act, k0, 4, y, ldy);
    switch (n_tok - k0) {
    case 3: hqx_rows_avx2_nb(w, r, act, k0, 3, y, ldy); break;
    case 2: hqx_rows_avx2_nb(w, r, act, k0, 2, y, ldy); break;
    case 1: hqx_rows_avx2_nb(w, r, act, k0, 1, y, ldy); break;
    default: break;
    }
}

__attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512vnni"))) static void
hqx_row_vnni(const kvq_hqx *w, int64_t r, const kvq_hqx_act *act, int n_tok, float *y, int64_t ldy) {
    int k0 = 0;
    for (; k0 + 4 <= n_tok; k0 += 4) hqx_rows_vnni_nb(w, r, act, k0, 4, y, ldy);
    switch (n_tok - k0) {
    case 3: hqx_rows_vnni_nb(w, r, act, k0, 3, y, ldy); break;
    case 2: hqx_rows_vnni_nb(w, r, act, k0, 2, y, ldy); break;
    case 1: hqx_rows_vnni_nb(w, r, act, k0, 1, y, ldy); break;
    default: break;
    }
}

void kvq_hqx_matmul(const kvq_hqx *w, const kvq_hqx_act *act, int n_tok, float *y, int64_t ldy,
                    kvq_hqx_mode mode, kvq_hqx_isa isa, int n_threads) {
    if (isa == KVQ_HQX_ISA_AUTO) isa = kvq_hqx_isa_best();
    const int64_t rows = w->rows;
    const int nt = kvq_nthreads(n_threads);
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * w->cols_p * n_tok > 32768)
    for (int64_t r = 0; r < rows; r++) {
        if (isa == KVQ_HQX_ISA_REF) hqx_row_ref(w, r, act, n_tok, y, ldy, mode);
        else if (mode == KVQ_HQX_EXACT) {
            for (int k0 = 0; k0 < n_tok; k0 += 4) {
                int nb = n_tok - k0 < 4 ? n_tok - k0 : 4;
                hqx_row_exact(w, r, act + k0, nb, y + k0 * ldy, ldy);
                for (int k = 0; k < nb; k++) y[(k0 + k) * ldy + r] += hqx_escapes(w, r, &act[k0 + k], mode);
            }
        } else if (isa == KVQ_HQX_ISA_VNNI) hqx_row_vnni(w, r, act, n_tok, y, ldy);
        else hqx_row_avx2(w, r, act, n_tok, y, ldy);
    }
}

size_t kvq_hqx_bytes(const kvq_hqx *w) {
    size_t n = (size_t)(w->rows * w->cols_p);
    return n * (size_t)w->vbits / 8 + (w->cb ? n / 64 : 0) + n / (size_t)w->tile * sizeof(float) +
           (size_t)(w->rows + 1) * 4 + (size_t)w->esc_row[w->rows] * 4;
}

void kvq_hqx_free(kvq_hqx *w) {
    if (!w) return;
    free(w->q);
    free(w->cb);
    free(w->scale);
    free(w->esc_row);
    free(w->esc);
    memset(w, 0, sizeof *w);
}
