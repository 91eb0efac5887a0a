// HQMQ (paper 000, section 3, appendices B, D): 4-element chunks as quaternions;
// direction = argmax over the 24·S products q_p·q_s (2T Hurwitz units × S Haar-random
// secondary quaternions per state), radius uniform b_r bits on a per-token-max fp16
// scale, indices packed at their fractional rate log2(24S) by one mixed-radix integer
// per token; optional Med<C>× outliers (fp16 chunk + 1-bit flag) against a running
// median of chunk norms (log-histogram, docs/KV.md).
// Layout: fp16 σ | [med: nch flag bits] | mixed-radix idx of the n_in inlier chunks
//         (bitlen(M^n_in - 1) bits, M = 24S) | n_in × b_r radius | n_out × 4 fp16
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cpu/kvcodes.h"
#include "kernels/cpu/kvexec.h"
#include "kernels/kv_hqmq.h"
#include "libconv/kv/kv_internal.h"
#include "libconv/kv/kvcodec.h"

#define HQ_HBINS KVQ_HQMQ_HBINS
#define HQ_MAXCH 1024

typedef struct {
    int S, M, br, nch;
    double med;          // outlier multiplier C (0 = off)
    float *sec;          // (S, 4) secondary codebook
    float *cb;           // (S·24, 4) joint codebook, index s·24 + p (derived)
    int *nbits;          // (nch + 1) bits of M^n - 1
    uint32_t *hist;      // running median histogram
    uint64_t hist_n;
} hq_st;

/** The 24 Hurwitz units 2T in index order: 0..7 = ±1, ±i, ±j, ±k (2k + neg);
 *  8..23 = (±1 ±i ±j ±k)/2 with bit k of (idx-8) set for a negative component. */
void kvq_hurwitz_unit(int p, float *q) {
    memset(q, 0, 4 * sizeof(float));
    if (p < 8) q[p >> 1] = (p & 1) ? -1.0f : 1.0f;
    else
        for (int k = 0; k < 4; k++) q[k] = ((p - 8) >> k & 1) ? -0.5f : 0.5f;
}

// ---- bignum (little-endian uint32 limbs) ----
static int bn_mul_add(uint32_t *a, int n, uint32_t m, uint32_t add) {
    uint64_t carry = add;
    for (int i = 0; i < n; i++) {
        uint64_t t = (uint64_t)a[i] * m + carry;
        a[i] = (uint32_t)t;
        carry = t >> 32;
    }
    if (carry) a[n++] = (uint32_t)carry;
    return n;
}
static uint32_t bn_divmod(uint32_t *a, int n, uint32_t m) {
    uint64_t r = 0;
    for (int i = n - 1; i >= 0; i--) {
        uint64_t t = (r << 32) | a[i];
        a[i] = (uint32_t)(t / m);
        r = t % m;
    }
    return (uint32_t)r;
}
static int bn_bitlen(const uint32_t *a, int n) {
    while (n > 0 && a[n - 1] == 0) n--;
    if (!n) return 0;
    return 32 * (n - 1) + (32 - __builtin_clz(a[n - 1]));
}

#define BN_LIMBS (HQ_MAXCH * 16 / 32 + 4)

static void hq_refresh(kvq_kvcodec *c) {
    hq_st *s = c->st;
    for (int si = 0; si < s->S; si++)
        for (int p = 0; p < 24; p++) {
            float u[4];
            kvq_hurwitz_unit(p, u);
            kvq_quat_mul(u, s->sec + 4 * si, s->cb + 4 * (si * 24 + p));
        }
}

// The row's options (hqmq:s<S>:r<b_r>[:med<C>]): private to this file.
typedef struct {
    int S;      // secondary codebook size
    int br;     // radius bits
    double med; // Med<C>x outlier multiplier; 0 = off
} hqmq_opts;
KVQ_KV_OPTS(hqmq_opts);

static kvq_status hq_init(kvq_kvcodec *c, kvq_err *err) {
    hq_st *s = calloc(1, sizeof *s);
    if (!s) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    c->st = s;
    const hqmq_opts o = opts_of(&c->spec);
    s->S = o.S, s->br = o.br, s->med = o.med;
    if ((int64_t)s->S * 24 > 65536) return kvq_err_set(err, KVQ_ERR_ARG, "S=%d too large (24S <= 65536)", s->S);
    s->M = 24 * s->S;
    s->nch = (c->d + 3) / 4; // U.1 padding wrapper when d % 4 != 0
    if (s->nch > HQ_MAXCH) return kvq_err_set(err, KVQ_ERR_ARG, "head_dim %d too large", c->d);
    c->fixed = s->med == 0;
    s->sec = malloc(sizeof(float) * 4 * s->S);
    s->cb = malloc(sizeof(float) * 4 * s->M);
    s->nbits = malloc(sizeof(int) * (s->nch + 1));
    s->hist = calloc(HQ_HBINS, sizeof(uint32_t));
    if (!s->sec || !s->cb || !s->nbits || !s->hist) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    kvq_kvrng r = {c->seed};
    for (int i = 0; i < s->S; i++) {
        double n2 = 0;
        float *q = s->sec + 4 * i;
        for (int k = 0; k < 4; k++) q[k] = (float)kvq_kvrng_normal(&r), n2 += (double)q[k] * q[k];
        for (int k = 0; k < 4; k++) q[k] = (float)(q[k] / sqrt(n2));
    }
    uint32_t a[BN_LIMBS] = {1};
    int na = 1;
    for (int n = 0; n <= s->nch; n++) {
        uint32_t b[BN_LIMBS];
        memcpy(b, a, sizeof(uint32_t) * na);
        int i = 0;  // b = a - 1
        while (b[i] == 0) b[i++] = 0xffffffffu;
        b[i]--;
        s->nbits[n] = bn_bitlen(b, na);
        na = bn_mul_add(a, na, (uint32_t)s->M, 0);
    }
    hq_refresh(c);
    return KVQ_OK;
}

static void hq_free(kvq_kvcodec *c) {
    hq_st *s = c->st;
    if (!s) return;
    free(s->sec), free(s->cb), free(s->nbits), free(s->hist), free(s);
}

static void hq_reset(kvq_kvcodec *c) {
    hq_st *s = c->st;
    memset(s->hist, 0, HQ_HBINS * sizeof(uint32_t));
    s->hist_n = 0;
}

static size_t hq_max(const kvq_kvcodec *c) {
    const hq_st *s = c->st;
    size_t in = 16 + (s->med ? s->nch : 0) + s->nbits[s->nch] + (size_t)s->nch * s->br;
    size_t all_out = s->med ? 16 + (size_t)s->nch + (size_t)s->nch * 64 : 0;
    return ((in > all_out ? in : all_out) + 7) / 8;
}

/** Exhaustive direction search: argmax over all 24·S joint codewords. */
int kvq_hqmq_search_ref(const kvq_kvcodec *c, const float *u) {
    const hq_st *s = c->st;
    int best = 0;
    float bs = -INFINITY;
    for (int i = 0; i < s->M; i++) {
        const float *q = s->cb + 4 * i;
        float v = u[0] * q[0] + u[1] * q[1] + u[2] * q[2] + u[3] * q[3];
        if (v > bs) bs = v, best = i;
    }
    return best;
}

/** Fast search: <u, q_p q_s> = <u q_s*, q_p>, and the best q_p in 2T for w = u q_s*
 *  is the largest |w_k| (axis units) or all four signs of w (half units). */
int kvq_hqmq_search(const kvq_kvcodec *c, const float *u) {
    const hq_st *s = c->st;
    int best = 0;
    float bs = -INFINITY;
    for (int si = 0; si < s->S; si++) {
        const float *q = s->sec + 4 * si;
        float cj[4] = {q[0], -q[1], -q[2], -q[3]}, w[4];
        kvq_quat_mul(u, cj, w);
        int k = 0, neg = 0;
        float a = 0, l1 = 0;
        for (int j = 0; j < 4; j++) {
            float f = fabsf(w[j]);
            l1 += f;
            neg |= (w[j] < 0) << j;
            if (f > a) a = f, k = j;
        }
        int p;
        float v;
        if (0.5f * l1 > a) v = 0.5f * l1, p = 8 + neg;
        else v = a, p = 2 * k + (w[k] < 0);
        if (v > bs) bs = v, best = si * 24 + p;
    }
    return best;
}

static float hq_median(const hq_st *s) {
    uint64_t half = (s->hist_n + 1) / 2, cum = 0;
    for (int b = 0; b < HQ_HBINS; b++) {
        if (cum + s->hist[b] >= half) return kvq_hqmq_median_at(b, half - cum, s->hist[b]);
        cum += s->hist[b];
    }
    return 0;
}

static void put16(uint8_t *p, float f) {
    uint16_t h = kvq_f32_to_f16(f);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

static kvq_status hq_enc(kvq_kvcodec *c, const float *x, uint8_t *o, size_t *n, kvq_err *err) {
    memset(o, 0, hq_max(c));
    hq_st *s = c->st;
    int nch = s->nch, L = (1 << s->br) - 1;
    float ch[HQ_MAXCH][4], r[HQ_MAXCH];
    uint8_t out[HQ_MAXCH];
    for (int k = 0; k < nch; k++) {
        double n2 = 0;
        for (int j = 0; j < 4; j++) {
            int i = 4 * k + j;
            ch[k][j] = i < c->d ? x[i] : 0.0f;
            n2 += (double)ch[k][j] * ch[k][j];
        }
        r[k] = (float)sqrt(n2);
        out[k] = 0;
    }
    if (s->med > 0) { // running median of chunk norms, this token included
        for (int k = 0; k < nch; k++) {
            if (!(r[k] > 0)) continue;
            s->hist[kvq_hqmq_bin(r[k])]++, s->hist_n++;
        }
        float m = hq_median(s);
        for (int k = 0; k < nch; k++) out[k] = (uint8_t)kvq_hqmq_is_out(r[k], m, s->med);
    }
    float sig = 0;
    for (int k = 0; k < nch; k++)
        if (!out[k]) sig = fmaxf(sig, r[k]);
    put16(o, sig);
    float sq = kvq_f16_to_f32(kvq_f32_to_f16(sig));
    kvq_bitw w = {o + 2, 0};
    if (s->med > 0)
        for (int k = 0; k < nch; k++) kvq_bitw_put(&w, out[k], 1);
    uint32_t a[BN_LIMBS] = {0};
    int na = 1, nin = 0;
    int idx[HQ_MAXCH], rq[HQ_MAXCH];
    for (int k = 0; k < nch; k++) {
        if (out[k]) continue;
        float u[4] = {1, 0, 0, 0};
        if (r[k] > 0)
            for (int j = 0; j < 4; j++) u[j] = ch[k][j] / r[k];
        idx[nin] = kvq_hqmq_search(c, u);
        int q = sq > 0 ? (int)lrintf(r[k] * L / sq) : 0;
        rq[nin++] = q > L ? L : q;
    }
    for (int i = nin - 1; i >= 0; i--) na = bn_mul_add(a, na, (uint32_t)s->M, (uint32_t)idx[i]);
    for (int b = 0; b < s->nbits[nin]; b += 16) {
        int take = s->nbits[nin] - b < 16 ? s->nbits[nin] - b : 16;
        kvq_bitw_put(&w, (a[b >> 5] >> (b & 31)) & 0xffffu, take);
    }
    for (int i = 0; i < nin; i++) kvq_bitw_put(&w, (uint32_t)rq[i], s->br);
    size_t pos = 2 + (w.bit + 7) / 8;
    for (int k = 0; k < nch; k++)
        if (out[k])
            for (int j = 0; j < 4; j++, pos += 2) put16(o + pos, ch[k][j]);
    *n = s->med > 0 ? pos : hq_max(c);
    if (s->med == 0) memset(o + pos, 0, *n - pos);
    return KVQ_OK;
}

// Reconstructs the chunks of one token into ch (nch, 4).
static void hq_chunks(const hq_st *s, const uint8_t *in, float (*ch)[4]) {
    int nch = s->nch, L = (1 << s->br) - 1;
    float sig = kvq_f16_to_f32((uint16_t)(in[0] | in[1] << 8));
    kvq_bitr r = {in + 2, 0};
    uint8_t out[HQ_MAXCH];
    int nin = 0;
    for (int k = 0; k < nch; k++) {
        out[k] = s->med > 0 ? (uint8_t)kvq_bitr_get(&r, 1) : 0;
        nin += !out[k];
    }
    uint32_t a[BN_LIMBS] = {0};
    for (int b = 0; b < s->nbits[nin]; b += 16) {
        int take = s->nbits[nin] - b < 16 ? s->nbits[nin] - b : 16;
        a[b >> 5] |= kvq_bitr_get(&r, take) << (b & 31);
    }
    // digits least significant first; two per long division when M² fits 32 bits, the number's
    // top limbs dropped as they empty (together ~3.4x fewer limb divisions at d = 64, S = 96)
    int na = (s->nbits[nin] + 31) / 32, i = 0;
    int idx[HQ_MAXCH];
    const uint64_t M = (uint64_t)s->M, M2 = M * M;
    if (M2 <= 0xffffffffu)
        for (; i + 1 < nin; i += 2) {
            while (na > 0 && a[na - 1] == 0) na--;
            const uint32_t r = bn_divmod(a, na, (uint32_t)M2);
            idx[i] = (int)(r % M), idx[i + 1] = (int)(r / M);
        }
    for (; i < nin; i++) {
        while (na > 0 && a[na - 1] == 0) na--;
        idx[i] = (int)bn_divmod(a, na, (uint32_t)M);
    }
    size_t pos = 2 + (r.bit + (size_t)nin * s->br + 7) / 8;
    for (int k = 0, i = 0; k < nch; k++) {
        if (out[k]) {
            for (int j = 0; j < 4; j++, pos += 2) ch[k][j] = kvq_f16_to_f32((uint16_t)(in[pos] | in[pos + 1] << 8));
            continue;
        }
        float rr = (float)kvq_bitr_get(&r, s->br) * sig / L;
        const float *q = s->cb + 4 * idx[i++];
        for (int j = 0; j < 4; j++) ch[k][j] = rr * q[j];
    }
}

static void hq_dec(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out) {
    const hq_st *s = c->st;
    float ch[HQ_MAXCH][4];
    hq_chunks(s, in, ch);
    for (int i = 0; i < c->d; i++) out[i] = ch[i >> 2][i & 3];
}

// Joint-codebook gather: Σ_chunks r̂ <q_c, C[idx]> with the 24S products precomputed; each
// token's chunks rebuilt once for all queries.
static void hq_score(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *const *rec, const uint32_t *len,
                     int nt, float *sc, int lds) {
    const hq_st *s = c->st;
    float ch[HQ_MAXCH][4];
    for (int t = 0; t < nt; t++) {
        hq_chunks(s, rec[t], ch);
        for (int i = 0; i < n_q; i++) sc[(size_t)i * lds + t] = kvq_codes_fdot(q + (size_t)i * c->d, &ch[0][0], c->d);
    }
}

// Values: Σ_t p_t r̂ C[idx] chunk by chunk, straight into each row (no decoded row kept). The
// mixed-radix index still has to be taken apart per token; that is what HQMQ's speed is made of.
static void hq_vsum(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *const *rec,
                    const uint32_t *len, int nt, float *out) {
    const hq_st *s = c->st;
    const int d = c->d;
    float ch[HQ_MAXCH][4];
    memset(out, 0, sizeof(float) * n_q * d);
    for (int t = 0; t < nt; t++) {
        hq_chunks(s, rec[t], ch);
        const float *x = &ch[0][0];
        for (int i = 0; i < n_q; i++) {
            const float w = p[(size_t)i * ldp + t];
            float *o = out + (size_t)i * d;
            if (w == 0) continue;
            kvq_codes_faxpy(o, w, x, d);
        }
    }
}

// ---- execution form (kernels/kv_hqmq.h): the mixed-radix index taken apart once, when the
// cache stores the token; without outliers only (an outlier chunk is 4 fp16 in place).

static int hq_ibits(const hq_st *s) {
    int ib = 0;
    while ((1 << ib) < s->M) ib++;
    return ib;
}

static size_t hq_xbytes(const kvq_kvcodec *c) {
    const hq_st *s = c->st;
    return s->med > 0 ? 0 : kvq_hqmq_xbytes(s->nch, hq_ibits(s) + s->br);
}

static void hq_xform(const kvq_kvcodec *c, const uint8_t *rec, size_t n, uint8_t *x) {
    const hq_st *s = c->st;
    const int ib = hq_ibits(s), wide = kvq_hqmq_xwide(ib + s->br);
    int idx[HQ_MAXCH], rad[HQ_MAXCH];
    uint16_t sig;
    kvq_kv_hqmq_codes(c, rec, &sig, idx, rad);
    const float sc = kvq_f16_to_f32(sig) / (float)((1 << s->br) - 1);
    memcpy(x, &sc, 4);
    for (int k = 0; k < s->nch; k++) {
        const uint32_t code = kvq_hqmq_code((uint32_t)idx[k], (uint32_t)rad[k], ib);
        if (wide) memcpy(x + KVQ_HQMQ_XHEAD + 4 * (size_t)k, &code, 4);
        else {
            const uint16_t h = (uint16_t)code;
            memcpy(x + KVQ_HQMQ_XHEAD + 2 * (size_t)k, &h, 2);
        }
    }
}

// Scores and values from the rows (kernels/cpu/kvexec.c); a head_dim that is not a multiple of 4
// goes one query at a time through a zero-padded copy.
static void hq_xscore(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *x, int nt, float *sc, int lds) {
    const hq_st *s = c->st;
    const int d = c->d, ib = hq_ibits(s), wide = kvq_hqmq_xwide(ib + s->br);
    const size_t xs = hq_xbytes(c);
    if (d % 4 == 0) {
        kvq_kvx_hqmq_score(s->cb, ib, wide, s->nch, x, xs, nt, q, n_q, d, sc, lds);
        return;
    }
    float qp[HQ_MAXCH * 4];
    for (int i = 0; i < n_q; i++) {
        memset(qp, 0, sizeof(float) * 4 * s->nch);
        memcpy(qp, q + (size_t)i * d, sizeof(float) * d);
        kvq_kvx_hqmq_score(s->cb, ib, wide, s->nch, x, xs, nt, qp, 1, 4 * s->nch, sc + (size_t)i * lds, lds);
    }
}

static void hq_xvsum(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *x, int nt, float *out) {
    const hq_st *s = c->st;
    const int d = c->d, ib = hq_ibits(s), wide = kvq_hqmq_xwide(ib + s->br);
    const size_t xs = hq_xbytes(c);
    if (d % 4 == 0) {
        memset(out, 0, sizeof(float) * n_q * d);
        kvq_kvx_hqmq_vsum(s->cb, ib, wide, s->nch, x, xs, nt, p, ldp, n_q, out);
        return;
    }
    float op[HQ_MAXCH * 4];
    for (int i = 0; i < n_q; i++) {
        memset(op, 0, sizeof(float) * 4 * s->nch);
        kvq_kvx_hqmq_vsum(s->cb, ib, wide, s->nch, x, xs, nt, p + (size_t)i * ldp, ldp, 1, op);
        memcpy(out + (size_t)i * d, op, sizeof(float) * d);
    }
}

static double hq_bits(const kvq_kvcodec *c) {
    const hq_st *s = c->st;
    return (16.0 + (s->med ? s->nch : 0) + s->nbits[s->nch] + (double)s->nch * s->br) / c->d;
}

static int hq_tables(const kvq_kvcodec *c, kvq_kvtable *t) {
    hq_st *s = c->st;
    t[0] = (kvq_kvtable){"secondary", s->sec, 4 * (size_t)s->S};
    return 1;
}

static kvq_status hq_check(const kvq_kvcodec *c, kvq_err *err) {
    const hq_st *s = c->st;
    return kvq_kv_check_unit("secondary", s->sec, s->S, err);
}

const kvq_kvcodec_vt kvq_kv_hqmq_vt = {.check_tables = hq_check, .name = "hqmq", .init = hq_init, .free = hq_free,
                                        .max_bytes = hq_max, .encode = hq_enc, .decode = hq_dec,
                                        .score = hq_score, .vsum = hq_vsum, .xbytes = hq_xbytes, .xform = hq_xform,
                                        .xscore = hq_xscore, .xvsum = hq_xvsum, .bits_formula = hq_bits, .tables = hq_tables,
                                        .reset = hq_reset, .refresh = hq_refresh};

// ---- per-chunk codes, for the GPU execution layout (libconv/kv/kv_gpu.c)

int kvq_kv_hqmq_info_of(const kvq_kvcodec *c, kvq_kv_hqmq_info *o) {
    if (c->vt != &kvq_kv_hqmq_vt) return -1;
    const hq_st *s = c->st;
    int ib = 0;
    while ((1 << ib) < s->M) ib++;
    *o = (kvq_kv_hqmq_info){s->M, ib, s->br, s->nch, s->med > 0, s->cb, s->sec, s->med};
    return 0;
}

int kvq_kv_hqmq_codes(const kvq_kvcodec *c, const uint8_t *in, uint16_t *sig, int *idx, int *rad) {
    const hq_st *s = c->st;
    if (s->med > 0) return -1;
    const int nch = s->nch;
    *sig = (uint16_t)(in[0] | in[1] << 8);
    kvq_bitr r = {in + 2, 0};
    uint32_t a[BN_LIMBS] = {0};
    for (int b = 0; b < s->nbits[nch]; b += 16) {
        int take = s->nbits[nch] - b < 16 ? s->nbits[nch] - b : 16;
        a[b >> 5] |= kvq_bitr_get(&r, take) << (b & 31);
    }
    int na = (s->nbits[nch] + 31) / 32;
    for (int i = 0; i < nch; i++) {
        while (na > 0 && a[na - 1] == 0) na--;
        idx[i] = (int)bn_divmod(a, na, (uint32_t)s->M);
    }
    for (int i = 0; i < nch; i++) rad[i] = (int)kvq_bitr_get(&r, s->br);
    return 0;
}

void kvq_kv_hqmq_record(const kvq_kvcodec *c, uint16_t sig, const int *idx, const int *rad, uint8_t *o) {
    const hq_st *s = c->st;
    const int nch = s->nch;
    memset(o, 0, hq_max(c));
    o[0] = (uint8_t)sig, o[1] = (uint8_t)(sig >> 8);
    kvq_bitw w = {o + 2, 0};
    uint32_t a[BN_LIMBS] = {0};
    int na = 1;
    for (int i = nch - 1; i >= 0; i--) na = bn_mul_add(a, na, (uint32_t)s->M, (uint32_t)idx[i]);
    for (int b = 0; b < s->nbits[nch]; b += 16) {
        int take = s->nbits[nch] - b < 16 ? s->nbits[nch] - b : 16;
        kvq_bitw_put(&w, (a[b >> 5] >> (b & 31)) & 0xffffu, take);
    }
    for (int i = 0; i < nch; i++) kvq_bitw_put(&w, (uint32_t)rad[i], s->br);
}

// With outliers (the GPU layout KVQ_GKV_HQMQO): the record's flags, the inliers' codes at their
// chunks (0 at an outlier's) and the outliers' raw fp16 in chunk order; and back.
int kvq_kv_hqmq_codes_med(const kvq_kvcodec *c, const uint8_t *in, uint16_t *sig, uint8_t *out, int *idx, int *rad,
                          uint16_t *och) {
    const hq_st *s = c->st;
    const int nch = s->nch;
    if (!(s->med > 0)) return -1;
    *sig = (uint16_t)(in[0] | in[1] << 8);
    kvq_bitr r = {in + 2, 0};
    int nin = 0;
    for (int k = 0; k < nch; k++) out[k] = (uint8_t)kvq_bitr_get(&r, 1), nin += !out[k];
    uint32_t a[BN_LIMBS] = {0};
    for (int b = 0; b < s->nbits[nin]; b += 16) {
        int take = s->nbits[nin] - b < 16 ? s->nbits[nin] - b : 16;
        a[b >> 5] |= kvq_bitr_get(&r, take) << (b & 31);
    }
    int na = (s->nbits[nin] + 31) / 32, ii[HQ_MAXCH];
    for (int i = 0; i < nin; i++) {
        while (na > 0 && a[na - 1] == 0) na--;
        ii[i] = (int)bn_divmod(a, na, (uint32_t)s->M);
    }
    size_t pos = 2 + (r.bit + (size_t)nin * s->br + 7) / 8;
    for (int k = 0, i = 0, j = 0; k < nch; k++) {
        idx[k] = rad[k] = 0;
        if (out[k]) {
            for (int e = 0; e < 4; e++, pos += 2) och[4 * j + e] = (uint16_t)(in[pos] | in[pos + 1] << 8);
            j++;
        } else idx[k] = ii[i++], rad[k] = (int)kvq_bitr_get(&r, s->br);
    }
    return nch - nin;
}

size_t kvq_kv_hqmq_record_med(const kvq_kvcodec *c, uint16_t sig, const uint8_t *out, const int *idx, const int *rad,
                              const uint16_t *och, uint8_t *o) {
    const hq_st *s = c->st;
    const int nch = s->nch;
    memset(o, 0, hq_max(c));
    o[0] = (uint8_t)sig, o[1] = (uint8_t)(sig >> 8);
    kvq_bitw w = {o + 2, 0};
    int nin = 0;
    for (int k = 0; k < nch; k++) kvq_bitw_put(&w, out[k] ? 1u : 0u, 1), nin += !out[k];
    uint32_t a[BN_LIMBS] = {0};
    int na = 1;
    for (int k = nch - 1; k >= 0; k--)
        if (!out[k]) na = bn_mul_add(a, na, (uint32_t)s->M, (uint32_t)idx[k]);
    for (int b = 0; b < s->nbits[nin]; b += 16) {
        int take = s->nbits[nin] - b < 16 ? s->nbits[nin] - b : 16;
        kvq_bitw_put(&w, (a[b >> 5] >> (b & 31)) & 0xffffu, take);
    }
    for (int k = 0; k < nch; k++)
        if (!out[k]) kvq_bitw_put(&w, (uint32_t)rad[k], s->br);
    size_t pos = 2 + (w.bit + 7) / 8;
    for (int j = 0; j < 4 * (nch - nin); j++, pos += 2) o[pos] = (uint8_t)och[j], o[pos + 1] = (uint8_t)(och[j] >> 8);
    return pos;
}

// ---- table row (kvcodec.h): hqmq:s<S>:r<b_r>[:med<C>]

static kvq_status hqmq_parse(const char *spec, char *const *fld, int nf, kvq_kvspec *out, kvq_err *err) {
    char *e = NULL;
    long S = nf >= 3 && fld[1][0] == 's' ? strtol(fld[1] + 1, &e, 10) : 0;
    int ok = nf >= 3 && nf <= 4 && e && e != fld[1] + 1 && !*e && S >= 1 && S <= (1 << 16);
    long R = ok && fld[2][0] == 'r' ? strtol(fld[2] + 1, &e, 10) : 0;
    ok = ok && fld[2][0] == 'r' && e != fld[2] + 1 && !*e && R >= 1 && R <= 16;
    if (!ok) return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': expected hqmq:s<S>:r<b_r>[:med<C>]", spec);
    hqmq_opts o = {.S = (int)S, .br = (int)R};
    if (nf == 4) {
        o.med = strncmp(fld[3], "med", 3) ? -1 : strtod(fld[3] + 3, &e);
        if (o.med <= 1 || *e)
            return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': bad outlier option '%s' (med<C>, C > 1)", spec, fld[3]);
    }
    kvq_kvspec_opts_set(out, &o, sizeof o);
    return KVQ_OK;
}
static int hqmq_format(const kvq_kvspec *s, char *buf, size_t n) {
    const hqmq_opts o = opts_of(s);
    if (o.med > 0) return snprintf(buf, n, "hqmq:s%d:r%d:med%g", o.S, o.br, o.med);
    return snprintf(buf, n, "hqmq:s%d:r%d", o.S, o.br);
}
const kvq_kvcodec_traits kvq_kv_hqmq_row = {"hqmq", hqmq_parse, hqmq_format, &kvq_kv_hqmq_vt, &kvq_kv_hqmq_vt,
                                            "hqmq:s96:r4", 0.19};
