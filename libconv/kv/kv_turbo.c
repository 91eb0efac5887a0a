// TurboQuant family (paper 003 section 2.1 and 3.1): sign-flipped WHT rotation,
// per-vector norm, Lloyd-Max on the exact Beta marginal f(u) ∝ (1-u²)^((d-3)/2).
//   turboquant:<b>      b-bit MSE codebook per rotated coordinate
//   turboquant-prod:<b> keys: (b-1)-bit MSE + 1-bit QJL sign sketch of the residual
//                       (Gaussian S, d×d, from the seed) + fp16 residual norm; values: as turboquant:<b>
//   qturbo:<b>          a fixed Haar unit quaternion left-multiplies each 4-chunk first
// Layout: fp16 norm | d × b_mse-bit idx | [prod: fp16 γ_r | d sign bits]
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cpu/kvcodes.h"
#include "libconv/kv/kv_internal.h"
#include "libconv/kv/kvcodec.h"

typedef struct {
    int bm, prod, quat, K;
    float *signs;  // (d) ±1
    float *cb;     // (K) Lloyd-Max centroids on the Beta marginal
    float quatr[4];
    float *S;      // (d, d) QJL Gaussian projection, regenerated from the seed (prod only)
    double D;      // Lloyd-Max E[(u-û)²]
} turbo_st;

static double beta_pdf(double u, const void *arg) {
    double d = *(const double *)arg, t = 1.0 - u * u;
    return t <= 0 ? 0 : exp(0.5 * (d - 3.0) * log(t));
}

/** Lloyd-Max for one coordinate of a uniform point on S^{d-1}. */
double kvq_turbo_codebook(int d, int bits, float *cb) {
    double dd = d;
    return kvq_lloydmax(beta_pdf, &dd, -1.0, 1.0, 1 << bits, cb);
}

// The options of turboquant:<b>, turboquant-prod:<b> and qturbo:<b> (the variant is the
// row's name): private to this file.
typedef struct {
    int bits;
} turbo_opts;
KVQ_KV_OPTS(turbo_opts);
static int opt_bits(const kvq_kvspec *s) { return opts_of(s).bits; }

static kvq_status turbo_init(kvq_kvcodec *c, kvq_err *err) {
    if (!kvq_is_pow2(c->d))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "head_dim %d is not a power of two (WHT)", c->d);
    turbo_st *s = calloc(1, sizeof *s);
    if (!s) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    c->st = s;
    const char *n = c->spec.name;
    s->prod = !strcmp(n, "turboquant-prod") && c->role == KVQ_KV_K;
    s->quat = !strcmp(n, "qturbo");
    s->bm = opt_bits(&c->spec) - s->prod;
    if (s->quat && c->d % 4)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "head_dim %d not a multiple of 4 (quaternions)", c->d);
    s->K = 1 << s->bm;
    s->signs = malloc(sizeof(float) * c->d);
    s->cb = malloc(sizeof(float) * s->K);
    if (!s->signs || !s->cb) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    kvq_kvrng r = {c->seed};
    for (int i = 0; i < c->d; i++) s->signs[i] = (kvq_kvrng_u64(&r) >> 63) ? -1.0f : 1.0f;
    double nq = 0;
    for (int i = 0; i < 4; i++) s->quatr[i] = (float)kvq_kvrng_normal(&r), nq += s->quatr[i] * s->quatr[i];
    for (int i = 0; i < 4; i++) s->quatr[i] /= (float)sqrt(nq);
    if (!s->quat) s->quatr[0] = 1, s->quatr[1] = s->quatr[2] = s->quatr[3] = 0;
    if (s->prod) {
        s->S = malloc(sizeof(float) * c->d * c->d);
        if (!s->S) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
        kvq_kvrng r2 = {c->seed ^ 0x514a4cull};
        for (int i = 0; i < c->d * c->d; i++) s->S[i] = (float)kvq_kvrng_normal(&r2);
    }
    if (c->stored) { // the stored codebook replaces it (checked by turbo_check): no training
        memset(s->cb, 0, sizeof(float) * s->K);
        return KVQ_OK;
    }
    s->D = kvq_turbo_codebook(c->d, s->bm, s->cb);
    if (s->D < 0) return kvq_err_set(err, KVQ_ERR_NOMEM, "turboquant: out of memory for the Lloyd-Max grid");
    return KVQ_OK;
}

static void turbo_free(kvq_kvcodec *c) {
    turbo_st *s = c->st;
    if (!s) return;
    free(s->signs), free(s->cb), free(s->S), free(s);
}

static size_t turbo_max(const kvq_kvcodec *c) {
    const turbo_st *s = c->st;
    size_t bits = 16 + (size_t)c->d * s->bm + (s->prod ? 16 + (size_t)c->d : 0);
    return (bits + 7) / 8;
}

// x (unit, original frame) -> rotated frame, in place: quaternion, signs, WHT
static void turbo_rotate(const turbo_st *s, float *x, int d) {
    if (s->quat)
        for (int i = 0; i < d; i += 4) {
            float t[4];
            kvq_quat_mul(s->quatr, x + i, t);
            memcpy(x + i, t, sizeof t);
        }
    for (int i = 0; i < d; i++) x[i] *= s->signs[i];
    kvq_kv_wht(x, d);
}

static void turbo_unrotate(const turbo_st *s, float *x, int d) {
    kvq_kv_wht(x, d);
    for (int i = 0; i < d; i++) x[i] *= s->signs[i];
    if (s->quat) {
        float cj[4] = {s->quatr[0], -s->quatr[1], -s->quatr[2], -s->quatr[3]};
        for (int i = 0; i < d; i += 4) {
            float t[4];
            kvq_quat_mul(cj, x + i, t);
            memcpy(x + i, t, sizeof t);
        }
    }
}

static void put16(uint8_t *p, float f) {
    uint16_t h = kvq_f32_to_f16(f);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}
static float get16(const uint8_t *p) { return kvq_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static kvq_status turbo_enc(kvq_kvcodec *c, const float *x, uint8_t *o, size_t *n, kvq_err *err) {
    memset(o, 0, turbo_max(c));
    const turbo_st *s = c->st;
    int d = c->d;
    float u[4096], r[4096];
    double g = 0;
    for (int i = 0; i < d; i++) g += (double)x[i] * x[i];
    g = sqrt(g);
    float inv = g > 1e-30 ? (float)(1.0 / g) : 0.0f;
    for (int i = 0; i < d; i++) u[i] = x[i] * inv;
    turbo_rotate(s, u, d);
    put16(o, (float)g);
    kvq_bitw w = {o + 2, 0};
    double rn = 0;
    for (int i = 0; i < d; i++) {
        int k = kvq_nearest_sorted(s->cb, s->K, u[i]);
        kvq_bitw_put(&w, (uint32_t)k, s->bm);
        r[i] = u[i] - s->cb[k];
        rn += (double)r[i] * r[i];
    }
    if (s->prod) {
        uint8_t *p2 = o + 2 + ((size_t)d * s->bm + 7) / 8;
        put16(p2, (float)sqrt(rn));
        kvq_bitw w2 = {p2 + 2, 0};
        for (int j = 0; j < d; j++) {
            const float *Sj = s->S + (size_t)j * d;
            float z = 0;
            for (int i = 0; i < d; i++) z += Sj[i] * r[i];
            kvq_bitw_put(&w2, z >= 0, 1);
        }
    }
    *n = turbo_max(c);
    return KVQ_OK;
}

static void turbo_dec(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out) {
    const turbo_st *s = c->st;
    int d = c->d;
    float g = get16(in);
    kvq_bitr r = {in + 2, 0};
    for (int i = 0; i < d; i++) out[i] = s->cb[kvq_bitr_get(&r, s->bm)];
    turbo_unrotate(s, out, d);
    for (int i = 0; i < d; i++) out[i] *= g;
}

// û + sqrt(π/2)/d · γ_r · Sᵀσ in the rotated frame, unrotated and scaled: <q, k̃> = score
static void turbo_score_vec(const kvq_kvcodec *c, const uint8_t *in, float *out) {
    const turbo_st *s = c->st;
    int d = c->d;
    float g = get16(in);
    kvq_bitr r = {in + 2, 0};
    for (int i = 0; i < d; i++) out[i] = s->cb[kvq_bitr_get(&r, s->bm)];
    if (s->prod) {
        const uint8_t *p2 = in + 2 + ((size_t)d * s->bm + 7) / 8;
        float k = (float)(sqrt(M_PI / 2.0) / d) * get16(p2);
        kvq_bitr r2 = {p2 + 2, 0};
        for (int j = 0; j < d; j++) {
            float sg = kvq_bitr_get(&r2, 1) ? k : -k;
            const float *Sj = s->S + (size_t)j * d;
            for (int i = 0; i < d; i++) out[i] += sg * Sj[i];
        }
    }
    turbo_unrotate(s, out, d);
    for (int i = 0; i < d; i++) out[i] *= g;
}

// <q, k>: γ <R q, û> plus, for prod, γ · sqrt(π/2)/d · γ_r · <S R q, σ> (with σ in {0, 1} stored:
// <S R q, 2σ − 1> = 2 <S R q, σ> − Σ S R q). R q (and S R q) once per query, each token's codes
// unpacked once for all queries.
static void turbo_score(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *const *rec, const uint32_t *len,
                        int nt, float *sc, int lds) {
    const turbo_st *s = c->st;
    const int d = c->d, rows = 8192 / d;
    float qr[8192], sq[8192], sqsum[8192];
    uint8_t cd[4096], sg[4096];
    const float kq = (float)(sqrt(M_PI / 2.0) / d);
    for (int i0 = 0; i0 < n_q; i0 += rows) {
        const int nr = n_q - i0 < rows ? n_q - i0 : rows;
        for (int i = 0; i < nr; i++) {
            float *qi = qr + (size_t)i * d;
            memcpy(qi, q + (size_t)(i0 + i) * d, sizeof(float) * d);
            turbo_rotate(s, qi, d);
            if (!s->prod) continue;
            sqsum[i] = 0;
            for (int j = 0; j < d; j++) {
                float z = 0;
                for (int k = 0; k < d; k++) z += s->S[(size_t)j * d + k] * qi[k];
                sq[(size_t)i * d + j] = z, sqsum[i] += z;
            }
        }
        for (int t = 0; t < nt; t++) {
            const uint8_t *in = rec[t], *p2 = in + 2 + ((size_t)d * s->bm + 7) / 8;
            const float g = get16(in);
            kvq_codes_unpack(in + 2, s->bm, d, cd);
            if (s->prod) kvq_codes_unpack(p2 + 2, 1, d, sg);
            for (int i = 0; i < nr; i++) {
                float acc = kvq_codes_lut_dot(qr + (size_t)i * d, s->cb, s->K, cd, d);
                if (s->prod) acc += kq * get16(p2) * (2 * kvq_codes_dot(sq + (size_t)i * d, sg, d) - sqsum[i]);
                sc[(size_t)(i0 + i) * lds + t] = g * acc;
            }
        }
    }
}

// Values: Σ_t p_t γ_t cb[c_t] in the rotated frame, rotated back once per row (decode is
// γ·R⁻¹ cb[c], linear in the centroids).
static void turbo_vsum(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *const *rec,
                       const uint32_t *len, int nt, float *out) {
    const turbo_st *s = c->st;
    const int d = c->d;
    uint8_t cd[4096];
    memset(out, 0, sizeof(float) * n_q * d);
    for (int t = 0; t < nt; t++) {
        const float g = get16(rec[t]);
        kvq_codes_unpack(rec[t] + 2, s->bm, d, cd);
        for (int i = 0; i < n_q; i++) {
            const float w = p[(size_t)i * ldp + t] * g;
            if (w != 0) kvq_codes_lut_axpy(out + (size_t)i * d, w, s->cb, s->K, cd, d);
        }
    }
    for (int i = 0; i < n_q; i++) turbo_unrotate(s, out + (size_t)i * d, d);
}

static double turbo_bits(const kvq_kvcodec *c) {
    const turbo_st *s = c->st;
    return s->bm + 16.0 / c->d + (s->prod ? 1.0 + 16.0 / c->d : 0.0);
}

static int turbo_tables(const kvq_kvcodec *c, kvq_kvtable *t) {
    turbo_st *s = c->st;
    int n = 0;
    t[n++] = (kvq_kvtable){"signs", s->signs, (size_t)c->d};
    t[n++] = (kvq_kvtable){"codebook", s->cb, (size_t)s->K};
    if (s->quat) t[n++] = (kvq_kvtable){"quaternion", s->quatr, 4};
    return n; // the QJL matrix S is regenerated from the seed (d² floats)
}

// Stored tables: what init builds has ±1 signs, a codebook strictly increasing inside [-1, 1]
// (kvq_nearest_sorted's precondition; coordinates of a unit vector) and a unit quaternion.
static kvq_status turbo_check(const kvq_kvcodec *c, kvq_err *err) {
    const turbo_st *s = c->st;
    kvq_status st = kvq_kv_check_signs("signs", s->signs, (size_t)c->d, err);
    if (!st) st = kvq_kv_check_increasing("codebook", s->cb, (size_t)s->K, -1.0f, 1.0f, err);
    if (!st && s->quat) st = kvq_kv_check_unit("quaternion", s->quatr, 1, err);
    return st;
}

const kvq_kvcodec_vt kvq_kv_turbo_vt = {.check_tables = turbo_check, .name = "turboquant", .init = turbo_init, .free = turbo_free,
                                         .max_bytes = turbo_max, .encode = turbo_enc, .decode = turbo_dec,
                                         .score = turbo_score, .score_vec = turbo_score_vec, .vsum = turbo_vsum,
                                         .bits_formula = turbo_bits,
                                         .tables = turbo_tables};

const float *kvq_kv_turbo_qjl(const kvq_kvcodec *c) {
    return c->vt == &kvq_kv_turbo_vt ? ((const turbo_st *)c->st)->S : NULL;
}

// ---- table rows (kvcodec.h): turboquant:<b>, turboquant-prod:<b>, qturbo:<b>

static kvq_status turbo_parse(const char *spec, char *const *fld, int nf, kvq_kvspec *o, kvq_err *err) {
    turbo_opts to = {0};
    kvq_status st = kvq_kvspec_bits(spec, fld, nf, !strcmp(o->name, "turboquant-prod") ? 2 : 1, 8, 0, &to.bits, err);
    if (!st) kvq_kvspec_opts_set(o, &to, sizeof to);
    return st;
}
static int turbo_format(const kvq_kvspec *s, char *buf, size_t n) { return snprintf(buf, n, "%s:%d", s->name, opt_bits(s)); }
const kvq_kvcodec_traits kvq_kv_turbo_row = {"turboquant", turbo_parse, turbo_format, &kvq_kv_turbo_vt,
                                             &kvq_kv_turbo_vt, "turboquant:4", 0.15};
const kvq_kvcodec_traits kvq_kv_turbo_prod_row = {"turboquant-prod", turbo_parse, turbo_format, &kvq_kv_turbo_vt,
                                                  &kvq_kv_turbo_vt, "turboquant-prod:4", 0.28};
const kvq_kvcodec_traits kvq_kv_qturbo_row = {"qturbo", turbo_parse, turbo_format, &kvq_kv_turbo_vt,
                                              &kvq_kv_turbo_vt, "qturbo:4", 0.15};
