// HyperQuant-KV (paper 001, sections 3.4, 4.2-4.4, 5.2, appendix A): per-vector fp32
// norm, optional rotation (none, ±1 signs, or a Haar orthogonal matrix from the seed),
// α scaling to the lattice's calibration radius for the target rate (hqcal table),
// optional subtractive dither U ~ Uniform(V(Λ)) drawn exactly (uniform point of the
// fundamental parallelepiped reduced mod Λ) from (seed, 16-bit token counter), lattice
// nearest point, strip, Rice with the best parameter per symbol class per token.
// Layout: fp32 γ | [dither: u16 counter] | 5-bit k per class | Rice symbols (d of them)
// Attention reads tokens in the rotated frame: scores against S q, values summed there and
// rotated back once per query.
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kvcodes.h"
#include "kernels/cpu/kvexec.h"
#include "kernels/kv_hqkv.h"
#include "kernels/splitmix.h"
#include "libconv/codec/hyperquant/hqcal.h"
#include "libconv/kv/kv_hqkv.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/quant/lattice.h"
#include "libconv/quant/rice.h"

typedef struct {
    kvq_lattice lat;
    int n, nb, classes, rot, dither, maxb;
    double bps, snr, alpha, scale; // target bits per sample; scale = α√d
    float *signs;               // (d) rot=signs
    float *Q;                   // (d, d) Haar orthogonal, rot=qjl (regenerated from the seed)
    float *emb;                 // (d) A2 only: √3 at each block's first coordinate (embed), else NULL
    int nzb;                    // nonzero generator entries, in hk_dither's order (i, then j)
    uint8_t zi[64], zj[64];
    float zv[64];
    float B[KVQ_LAT_MAX_DIM][KVQ_LAT_MAX_DIM]; // generator rows (real coordinates)
    uint32_t ctr;               // next dither counter (running state)
} hk_st;

static void gen_matrix(kvq_lattice l, float B[8][8]) {
    memset(B, 0, sizeof(float) * 64);
    switch (l) {
    case KVQ_LAT_Z: B[0][0] = 1; break;
    case KVQ_LAT_A2: B[0][0] = KVQ_SQRT3_F, B[0][1] = 1, B[1][1] = 2; break; // (ny,nx)=(1,1),(0,2)
    case KVQ_LAT_D4:
        B[0][0] = 2;
        for (int i = 1; i < 4; i++) B[i][0] = 1, B[i][i] = 1;
        break;
    default: // 2·E8 with the standard E8 basis
        B[0][0] = 4;
        for (int i = 1; i < 7; i++) B[i][i - 1] = -2, B[i][i] = 2;
        for (int j = 0; j < 8; j++) B[7][j] = 1;
        break;
    }
}

static void hk_dither(const kvq_kvcodec *c, uint32_t ctr, float *U) {
    const hk_st *s = c->st;
    kvq_kvrng r = {c->seed ^ (0xD17E5ull + ((uint64_t)ctr << 20))};
    kvq_kvrng_u64(&r);
    for (int b = 0; b < s->nb; b++) {
        float z[8] = {0}, y[8];
        int32_t q[8];
        for (int i = 0; i < s->n; i++) {
            float u = (float)kvq_kvrng_unif(&r);
            for (int j = 0; j < s->n; j++) z[j] += u * s->B[i][j];
        }
        kvq_lattice_nearest(s->lat, z, q);
        kvq_lattice_embed(s->lat, q, y);
        for (int j = 0; j < s->n; j++) U[b * s->n + j] = z[j] - y[j];
    }
}

// The row's options (hqkv:<lattice>:<bps>[:rot=none|signs|qjl][:dither]): private to this file.
typedef struct {
    char lattice[8]; // lattice name
    double bps;      // target bits per sample
    int rot;         // rotation: 0 none, 1 signs (default), 2 qjl (Haar orthogonal)
    int dither;      // subtractive dither
} hqkv_opts;
KVQ_KV_OPTS(hqkv_opts);

static kvq_status hk_init(kvq_kvcodec *c, kvq_err *err) {
    hk_st *s = calloc(1, sizeof *s);
    if (!s) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    c->st = s;
    c->fixed = 0;
    const hqkv_opts o = opts_of(&c->spec);
    if (kvq_lattice_parse(o.lattice, &s->lat))
        return kvq_err_set(err, KVQ_ERR_ARG, "unknown lattice '%s' (e8, d4, a2, z)", o.lattice);
    s->n = kvq_lattice_dim(s->lat);
    if (c->d % s->n) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "head_dim %d not a multiple of %d", c->d, s->n);
    s->nb = c->d / s->n;
    s->classes = kvq_lattice_classes(s->lat);
    s->rot = o.rot, s->dither = o.dither, s->bps = o.bps;
    s->snr = kvq_hqcal_snr_for_rate(s->lat, o.bps);
    s->alpha = kvq_hq_alpha(s->lat, s->snr);
    s->scale = s->alpha * sqrt((double)c->d);
    gen_matrix(s->lat, s->B);
    for (int i = 0; i < s->n; i++)
        for (int j = 0; j < s->n; j++)
            if (s->B[i][j] != 0) s->zi[s->nzb] = (uint8_t)i, s->zj[s->nzb] = (uint8_t)j, s->zv[s->nzb++] = s->B[i][j];
    kvq_kvrng r = {c->seed};
    s->signs = malloc(sizeof(float) * c->d);
    if (!s->signs) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    for (int i = 0; i < c->d; i++) s->signs[i] = (kvq_kvrng_u64(&r) >> 63) ? -1.0f : 1.0f;
    if (s->rot == 2) { // Haar: Gram-Schmidt of a Gaussian matrix (rows), sign-fixed
        int d = c->d;
        double *G = malloc(sizeof(double) * d * d);
        s->Q = malloc(sizeof(float) * d * d);
        if (!G || !s->Q) return free(G), kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
        for (int i = 0; i < d * d; i++) G[i] = kvq_kvrng_normal(&r);
        for (int i = 0; i < d; i++) {
            double *gi = G + (size_t)i * d;
            for (int j = 0; j < i; j++) {
                const double *gj = G + (size_t)j * d;
                double p = 0;
                for (int k = 0; k < d; k++) p += gi[k] * gj[k];
                for (int k = 0; k < d; k++) gi[k] -= p * gj[k];
            }
            double nn = 0;
            for (int k = 0; k < d; k++) nn += gi[k] * gi[k];
            nn = sqrt(nn);
            for (int k = 0; k < d; k++) gi[k] /= nn;
        }
        for (int i = 0; i < d * d; i++) s->Q[i] = (float)G[i];
        free(G);
    }
    // symbol bound: |x̃_i + U_i| <= α√d + 2, lattice point within a covering radius (<= 2)
    double vmax = 2.0 * (s->scale + 6.0) + 2.0;
    int kb = 1;
    while ((double)(1u << kb) <= vmax && kb < 30) kb++;
    s->maxb = 4 + 2 + 1 + (int)(((size_t)c->d * (2 + kb) + 7) / 8);
    if (s->lat == KVQ_LAT_A2) {
        s->emb = malloc(sizeof(float) * c->d);
        if (!s->emb) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
        for (int i = 0; i < c->d; i++) s->emb[i] = i % 2 ? 1.0f : KVQ_SQRT3_F;
    }
    return KVQ_OK;
}

static void hk_free(kvq_kvcodec *c) {
    hk_st *s = c->st;
    if (!s) return;
    free(s->signs), free(s->Q), free(s->emb), free(s);
}

static void hk_reset(kvq_kvcodec *c) { ((hk_st *)c->st)->ctr = 0; }

static size_t hk_max(const kvq_kvcodec *c) { return (size_t)((const hk_st *)c->st)->maxb; }

static void rotate(const hk_st *s, const float *x, float *y, int d, int inverse) {
    if (s->rot == 0) memcpy(y, x, sizeof(float) * d);
    else if (s->rot == 1)
        for (int i = 0; i < d; i++) y[i] = x[i] * s->signs[i];
    else
        for (int i = 0; i < d; i++) {
            float a = 0;
            if (!inverse)
                for (int k = 0; k < d; k++) a += s->Q[(size_t)i * d + k] * x[k];
            else
                for (int k = 0; k < d; k++) a += s->Q[(size_t)k * d + i] * x[k];
            y[i] = a;
        }
}

static kvq_status hk_write(const kvq_kvcodec *c, float gf, uint16_t ctr, const uint32_t *sym, uint8_t *o, size_t *nout,
                           kvq_err *err);

static kvq_status hk_enc(kvq_kvcodec *c, const float *x, uint8_t *o, size_t *nout, kvq_err *err) {
    hk_st *s = c->st;
    int d = c->d;
    float y[4096], U[4096];
    uint32_t sym[4096];
    double g = 0;
    for (int i = 0; i < d; i++) g += (double)x[i] * x[i];
    g = sqrt(g);
    rotate(s, x, y, d, 0);
    double f = g > 1e-30 ? s->scale / g : 0;
    uint16_t ctr = (uint16_t)s->ctr;
    if (s->dither) hk_dither(c, ctr, U), s->ctr++;
    for (int b = 0; b < s->nb; b++) {
        float z[8];
        int32_t q[8];
        for (int j = 0; j < s->n; j++) z[j] = (float)(y[b * s->n + j] * f) + (s->dither ? U[b * s->n + j] : 0.0f);
        kvq_lattice_nearest(s->lat, z, q);
        kvq_lattice_strip(s->lat, q, sym + b * s->n);
    }
    return hk_write(c, (float)g, ctr, sym, o, nout, err);
}

// The record of one token from its stripped symbols: fp32 γ | [u16 counter] | 5-bit k per
// class (the best Rice parameter of the token's symbols of that class) | Rice symbols.
static kvq_status hk_write(const kvq_kvcodec *c, float gf, uint16_t ctr, const uint32_t *sym, uint8_t *o, size_t *nout,
                           kvq_err *err) {
    const hk_st *s = c->st;
    const int d = c->d;
    int k[2] = {0, 0};
    for (int cl = 0; cl < s->classes; cl++) {
        kvq_rice_hist h;
        kvq_rice_hist_clear(&h);
        for (int i = 0; i < d; i++)
            if (kvq_lattice_symbol_class(s->lat, i % s->n) == cl) kvq_rice_hist_add(&h, sym[i]);
        k[cl] = kvq_rice_best_k(&h, NULL);
        if (k[cl] > 31) k[cl] = 31;
    }
    memcpy(o, &gf, 4);
    size_t pos = 4;
    if (s->dither) o[4] = (uint8_t)ctr, o[5] = (uint8_t)(ctr >> 8), pos = 6;
    kvq_bitwriter w;
    kvq_bw_init(&w, o + pos, (size_t)s->maxb - pos);
    for (int cl = 0; cl < s->classes; cl++) kvq_bw_put(&w, (uint32_t)k[cl], 5);
    for (int i = 0; i < d; i++) kvq_bw_rice(&w, sym[i], k[kvq_lattice_symbol_class(s->lat, i % s->n)]);
    size_t nb = kvq_bw_finish(&w);
    if (w.overflow)
        return kvq_err_set(err, KVQ_ERR_NUMERIC, "hqkv: token code exceeds its %d-byte bound", s->maxb);
    *nout = pos + nb;
    return KVQ_OK;
}

// One token in the rotated frame: y = γ/(α√d)·(embed(c) − U); the token is Sᵀy.
static void hk_rotated(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *y) {
    const hk_st *s = c->st;
    const int d = c->d;
    float gf, U[4096];
    size_t pos = s->dither ? 6 : 4;
    if (n < pos) { // shorter than its header (a damaged record): zeros, not a read past n (fuzz_kvcodec)
        for (int i = 0; i < d; i++) y[i] = 0.0f;
        return;
    }
    memcpy(&gf, in, 4);
    pos = 4;
    if (s->dither) hk_dither(c, (uint32_t)(in[4] | in[5] << 8), U), pos = 6;
    kvq_bitreader r;
    kvq_br_init(&r, in + pos, n - pos);
    int k[2] = {0, 0};
    for (int cl = 0; cl < s->classes; cl++) k[cl] = (int)kvq_br_get(&r, 5);
    double f = s->scale > 0 ? gf / s->scale : 0;
    for (int b = 0; b < s->nb; b++) {
        uint32_t sym[8];
        int32_t q[8];
        float e[8];
        uint32_t big = 0;
        for (int j = 0; j < s->n; j++) big |= sym[j] = kvq_br_rice(&r, k[kvq_lattice_symbol_class(s->lat, j)]);
        // A damaged record (symbols past 2^24, as HyperQuant's limit, or a stream cut short):
        // zeros. Larger symbols overflow int in kvq_lattice_unstrip (UBSan, fuzz_kvcodec).
        if (r.err || big >= (1u << 24)) {
            for (int i = 0; i < d; i++) y[i] = 0.0f;
            return;
        }
        kvq_lattice_unstrip(s->lat, sym, q);
        kvq_lattice_embed(s->lat, q, e);
        for (int j = 0; j < s->n; j++) y[b * s->n + j] = (float)((e[j] - (s->dither ? U[b * s->n + j] : 0.0f)) * f);
    }
}

static void hk_dec(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out) {
    float y[4096];
    hk_rotated(c, in, n, y);
    rotate(c->st, y, out, c->d, 1);
}

// Keys: <q, Sᵀy> = <S q, y>, S q once per query instead of Sᵀ once per token; each token's
// symbols decoded once for all queries.
static void hk_score(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *const *rec, const uint32_t *len,
                     int nt, float *sc, int lds) {
    const int d = c->d, rows = 8192 / d;
    float qy[8192], y[4096];
    for (int i0 = 0; i0 < n_q; i0 += rows) {
        const int nr = n_q - i0 < rows ? n_q - i0 : rows;
        for (int i = 0; i < nr; i++) rotate(c->st, q + (size_t)(i0 + i) * d, qy + (size_t)i * d, d, 0);
        for (int t = 0; t < nt; t++) {
            hk_rotated(c, rec[t], len[t], y);
            for (int i = 0; i < nr; i++) sc[(size_t)(i0 + i) * lds + t] = kvq_codes_fdot(qy + (size_t)i * d, y, d);
        }
    }
}

// Values: Σ_t p_t y_t in the rotated frame, Sᵀ once per row.
static void hk_vsum(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *const *rec,
                    const uint32_t *len, int nt, float *out) {
    const int d = c->d;
    float y[4096], acc[4096];
    memset(out, 0, sizeof(float) * n_q * d);
    for (int t = 0; t < nt; t++) {
        hk_rotated(c, rec[t], len[t], y);
        for (int i = 0; i < n_q; i++) {
            const float w = p[(size_t)i * ldp + t];
            float *o = out + (size_t)i * d;
            if (w != 0) kvq_codes_faxpy(o, w, y, d);
        }
    }
    for (int i = 0; i < n_q; i++) {
        memcpy(acc, out + (size_t)i * d, sizeof(float) * d);
        rotate(c->st, acc, out + (size_t)i * d, d, 1);
    }
}

// ---- execution form (kernels/kv_hqkv.h): the Rice symbols decoded once, when the cache stores
// the token, into int8 (int16 past 8 bits) lattice codes after the GPU layout's side data
// (fp32 γ, u32 counter). With dither, U = z − Q_Λ(z) (z = Σ u_i b_i from the counter's stream),
// and the token is γ/(α√d)·(embed(c) − U) = γ/(α√d)·(embed(c + Q_Λ(z)) − z): the row stores
// c + Q_Λ(z), found once, so a step regenerates only z (the draws and a sparse sum, no nearest
// point search).

// The z of every block of the token with counter ctr: hk_dither's draws and float sums (the
// generator's zero entries skipped: adding +0 changes no sum), without its nearest point. The
// 53-bit draw converts through int64 (exact, one instruction; unsigned needs a branchy sequence).
static void hk_dither_z(const kvq_kvcodec *c, uint32_t ctr, float *Z) {
    const hk_st *s = c->st;
    uint64_t st = c->seed ^ (0xD17E5ull + ((uint64_t)ctr << 20));
    if (s->lat == KVQ_LAT_E8) { // the same draws and sums, eight lanes at a time (kernels/cpu/kvexec.c)
        kvq_kvx_e8_dither_z(st, s->nb, Z);
        return;
    }
    kvq_splitmix64_next(&st);
    for (int b = 0; b < s->nb; b++) {
        float u[8], *z = Z + b * s->n;
        for (int i = 0; i < s->n; i++) u[i] = (float)((double)(int64_t)(kvq_splitmix64_next(&st) >> 11) * 0x1.0p-53), z[i] = 0.0f;
        for (int e = 0; e < s->nzb; e++) z[s->zj[e]] += u[s->zi[e]] * s->zv[e];
    }
}

// |Q_Λ(z)_j| bound: |z_j| <= Σ_i |b_ij| (E8 7, D4 5, A2 3, Z 1) plus the covering radius.
static int hk_width(const kvq_kvcodec *c) {
    const hk_st *s = c->st;
    static const double zq[4] = {9.0, 6.0, 4.2, 1.5};
    return kvq_hk_width((int)s->lat, s->scale + (s->dither ? zq[s->lat] : 0.0));
}

static size_t hk_xbytes(const kvq_kvcodec *c) {
    const int w = hk_width(c);
    return w > 16 ? 0 : kvq_hk_xbytes(c->d, w);
}

// A record the decoder reads as zeros (damaged), or with a code outside the width the encoder
// never emits, becomes γ = 0: a zero token.
static void hk_xform(const kvq_kvcodec *c, const uint8_t *rec, size_t n, uint8_t *x) {
    const int d = c->d, w = hk_width(c), wide = w > 8;
    const int32_t lim = 1 << (w - 1);
    int32_t code[4096];
    float g = 0;
    uint32_t ctr = 0;
    int bad = kvq_kv_hqkv_codes(c, rec, n, &g, &ctr, code) != 0;
    const hk_st *s = c->st;
    if (s->dither && !bad) { // c + Q_Λ(z)
        float z[4096];
        hk_dither_z(c, ctr, z);
        for (int b = 0; b < s->nb; b++) {
            int32_t qz[8];
            kvq_lattice_nearest(s->lat, z + b * s->n, qz);
            for (int j = 0; j < s->n; j++) code[b * s->n + j] += qz[j];
        }
    }
    for (int j = 0; j < d && !bad; j++) bad = code[j] < -lim || code[j] >= lim;
    if (bad) g = 0, memset(code, 0, sizeof(int32_t) * d);
    memcpy(x, &g, 4), memcpy(x + 4, &ctr, 4);
    for (int j = 0; j < d; j++) {
        if (wide) {
            const int16_t h = (int16_t)code[j];
            memcpy(x + KVQ_HK_XSIDE + 2 * (size_t)j, &h, 2);
        } else x[KVQ_HK_XSIDE + j] = (uint8_t)(int8_t)code[j];
    }
}

// The z of tokens [t0, t0 + n) of the rows, (n, d): what the kernels subtract.
static void hk_xdither(const kvq_kvcodec *c, const uint8_t *x, size_t xs, int t0, int n, float *U) {
    for (int t = 0; t < n; t++) {
        uint32_t ctr;
        memcpy(&ctr, x + (size_t)(t0 + t) * xs + 4, 4);
        hk_dither_z(c, ctr, U + (size_t)t * c->d);
    }
}

static void hk_xscore(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *x, int nt, float *sc, int lds) {
    const hk_st *s = c->st;
    const int d = c->d, rows = 8192 / d, tile = 8192 / d;
    const size_t xs = hk_xbytes(c);
    const float gmul = (float)(1.0 / s->scale);
    float qy[8192], U[8192];
    for (int i0 = 0; i0 < n_q; i0 += rows) {
        const int nr = n_q - i0 < rows ? n_q - i0 : rows;
        for (int i = 0; i < nr; i++) rotate(s, q + (size_t)(i0 + i) * d, qy + (size_t)i * d, d, 0);
        if (!s->dither) {
            kvq_kvx_lat_score(x, xs, hk_width(c) > 8, d, nt, gmul, s->emb, NULL, qy, nr, d, sc + (size_t)i0 * lds, lds);
            continue;
        }
        for (int t0 = 0; t0 < nt; t0 += tile) {
            const int n = nt - t0 < tile ? nt - t0 : tile;
            hk_xdither(c, x, xs, t0, n, U);
            kvq_kvx_lat_score(x + (size_t)t0 * xs, xs, hk_width(c) > 8, d, n, gmul, s->emb, U, qy, nr, d,
                              sc + (size_t)i0 * lds + t0, lds);
        }
    }
}

static void hk_xvsum(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *x, int nt, float *out) {
    const hk_st *s = c->st;
    const int d = c->d, tile = 8192 / d;
    const size_t xs = hk_xbytes(c);
    const float gmul = (float)(1.0 / s->scale);
    float U[8192], acc[4096];
    memset(out, 0, sizeof(float) * n_q * d);
    if (!s->dither) kvq_kvx_lat_vsum(x, xs, hk_width(c) > 8, d, nt, gmul, s->emb, NULL, p, ldp, n_q, out);
    else
        for (int t0 = 0; t0 < nt; t0 += tile) {
            const int n = nt - t0 < tile ? nt - t0 : tile;
            hk_xdither(c, x, xs, t0, n, U);
            kvq_kvx_lat_vsum(x + (size_t)t0 * xs, xs, hk_width(c) > 8, d, n, gmul, s->emb, U, p + t0, ldp, n_q, out);
        }
    for (int i = 0; i < n_q; i++) {
        memcpy(acc, out + (size_t)i * d, sizeof(float) * d);
        rotate(s, acc, out + (size_t)i * d, d, 1);
    }
}

static double hk_bits(const kvq_kvcodec *c) {
    const hk_st *s = c->st;
    return s->bps + (32.0 + (s->dither ? 16 : 0) + 5.0 * s->classes) / c->d;
}

static int hk_tables(const kvq_kvcodec *c, kvq_kvtable *t) {
    hk_st *s = c->st;
    t[0] = (kvq_kvtable){"signs", s->signs, (size_t)c->d};
    return 1; // the Haar matrix (rot=qjl) is regenerated from the seed
}

static kvq_status hk_check(const kvq_kvcodec *c, kvq_err *err) {
    return kvq_kv_check_signs("signs", ((const hk_st *)c->st)->signs, (size_t)c->d, err);
}

const kvq_kvcodec_vt kvq_kv_hqkv_vt = {.check_tables = hk_check, .name = "hqkv", .init = hk_init, .free = hk_free, .max_bytes = hk_max,
                                        .encode = hk_enc, .decode = hk_dec, .score = hk_score, .vsum = hk_vsum,
                                        .xbytes = hk_xbytes, .xform = hk_xform, .xscore = hk_xscore, .xvsum = hk_xvsum,
                                        .bits_formula = hk_bits,
                                        .tables = hk_tables, .reset = hk_reset};

// ---- the record as lattice codes, for the GPU execution layout (libconv/kv/kv_gpu.c)

int kvq_kv_hqkv_info_of(const kvq_kvcodec *c, kvq_kv_hqkv_info *o) {
    if (c->vt != &kvq_kv_hqkv_vt) return -1;
    const hk_st *s = c->st;
    *o = (kvq_kv_hqkv_info){(int)s->lat, s->n, s->rot, s->dither, s->scale, c->seed, s->signs, s->Q};
    return 0;
}

int kvq_kv_hqkv_codes(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *gamma, uint32_t *ctr, int32_t *codes) {
    const hk_st *s = c->st;
    const size_t pos = s->dither ? 6 : 4;
    if (n < pos) return -1;
    memcpy(gamma, in, 4);
    *ctr = s->dither ? (uint32_t)(in[4] | in[5] << 8) : 0;
    kvq_bitreader r;
    kvq_br_init(&r, in + pos, n - pos);
    int k[2] = {0, 0};
    for (int cl = 0; cl < s->classes; cl++) k[cl] = (int)kvq_br_get(&r, 5);
    for (int b = 0; b < s->nb; b++) {
        uint32_t sym[8], big = 0;
        for (int j = 0; j < s->n; j++) big |= sym[j] = kvq_br_rice(&r, k[kvq_lattice_symbol_class(s->lat, j)]);
        if (r.err || big >= (1u << 24)) return -1; // damaged (hk_rotated's rule)
        kvq_lattice_unstrip(s->lat, sym, codes + b * s->n);
    }
    return 0;
}

kvq_status kvq_kv_hqkv_record(const kvq_kvcodec *c, float gamma, uint32_t ctr, const int32_t *codes, uint8_t *rec, size_t *n,
                              kvq_err *err) {
    const hk_st *s = c->st;
    uint32_t sym[4096];
    for (int b = 0; b < s->nb; b++) {
        if (!kvq_lattice_member(s->lat, codes + b * s->n))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "hqkv: block %d of a token is not a lattice point", b);
        kvq_lattice_strip(s->lat, codes + b * s->n, sym + b * s->n);
    }
    memset(rec, 0, (size_t)s->maxb);
    return hk_write(c, gamma, (uint16_t)ctr, sym, rec, n, err);
}

// ---- table row (kvcodec.h): hqkv:<lattice>:<bps>[:rot=none|signs|qjl][:dither]

static kvq_status hqkv_parse(const char *spec, char *const *fld, int nf, kvq_kvspec *out, kvq_err *err) {
    if (nf < 3) return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': expected hqkv:<lattice>:<bps>[:rot=none|signs|qjl][:dither]", spec);
    hqkv_opts o;
    memset(&o, 0, sizeof o); // the lattice name's tail too: specs compare by bytes
    o.rot = 1;
    snprintf(o.lattice, sizeof o.lattice, "%s", fld[1]);
    char *e;
    o.bps = strtod(fld[2], &e);
    if (*e || !(o.bps > 0 && o.bps <= 16))
        return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': bad bits per sample '%s'", spec, fld[2]);
    for (int i = 3; i < nf; i++) {
        if (!strcmp(fld[i], "dither")) o.dither = 1;
        else if (!strcmp(fld[i], "rot=none")) o.rot = 0;
        else if (!strcmp(fld[i], "rot=signs")) o.rot = 1;
        else if (!strcmp(fld[i], "rot=qjl")) o.rot = 2;
        else return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': unknown option '%s'", spec, fld[i]);
    }
    kvq_kvspec_opts_set(out, &o, sizeof o);
    return KVQ_OK;
}
static int hqkv_format(const kvq_kvspec *s, char *buf, size_t n) {
    const hqkv_opts o = opts_of(s);
    return snprintf(buf, n, "hqkv:%s:%g:rot=%s%s", o.lattice, o.bps, o.rot == 0 ? "none" : o.rot == 1 ? "signs" : "qjl",
                    o.dither ? ":dither" : "");
}
const kvq_kvcodec_traits kvq_kv_hqkv_row = {"hqkv", hqkv_parse, hqkv_format, &kvq_kv_hqkv_vt, &kvq_kv_hqkv_vt,
                                            "hqkv:e8:3", 0.23};
