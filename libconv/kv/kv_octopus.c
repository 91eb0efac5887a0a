// OCTOPUS keys (paper 002, section 3, appendices A, C-E): sign-flipped normalized WHT,
// fp32 global norm, triplets (zero-padded), octahedral map (eqs. 5-6, sign(0)=+1),
// Lloyd-Max codebooks for the triplet norm (eq. 4) and the octahedral coordinate
// (eq. 7), the (b+1, b-1) split, joint rounding (Algorithm 1) and the optional 1-bit
// QJL residual (second sign seed, fp16 residual norm). Values use the per-token groups of
// kvq_kv_vgroup_* (kv_int.c) at the same bits, summed from their codes (kvq_kv_vgroup_vsum).
// Layout: fp32 γ | n_tri × (2 b_dir)-bit (ξ, η) idx | n_tri × b_norm-bit ρ idx
//         | [qjl: fp16 γ_r | d sign bits]
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cpu/kvcodes.h"
#include "libconv/kv/kv_internal.h"
#include "libconv/kv/kvcodec.h"

// The row's options (octopus:<b>[:qjl][:split=<d>][:round=...]): private to this file.
typedef struct {
    int bits;
    int qjl;   // 1-bit QJL residual
    int delta; // split offset: (b+delta, b-delta); default +1
    int round; // rounding: 0 scalar, 2 local 2x2, 3 local 3x3 (default), 9 full
} oct_opts;
KVQ_KV_OPTS(oct_opts);

typedef struct {
    int bdir, bnorm, Kd, Kn, ntri, qjl, round;
    float *s1, *s2;  // (d) sign vectors: rotation, QJL rotation
    float *cxi;      // (Kd) octahedral coordinate centroids
    float *crho;     // (Kn) triplet norm centroids
    float *dirs;     // (Kd, Kd, 3) Oct^{-1}(cxi[i], cxi[j]), derived
    double Dxi, Drho;
} oct_st;

static float sgn(float x) { return x >= 0 ? 1.0f : -1.0f; }

/** Octahedral map, eq. 5 (n need not be normalized). */
void kvq_oct_encode(const float *n, float *xi, float *eta) {
    float l = fabsf(n[0]) + fabsf(n[1]) + fabsf(n[2]);
    if (l < 1e-30f) l = 1e-30f;
    float px = n[0] / l, py = n[1] / l, pz = n[2] / l;
    if (pz >= 0) *xi = px, *eta = py;
    else *xi = sgn(px) * (1 - fabsf(py)), *eta = sgn(py) * (1 - fabsf(px));
}

/** Inverse octahedral map, eq. 6: unit vector n. */
void kvq_oct_decode(float xi, float eta, float *n) {
    float z = 1 - fabsf(xi) - fabsf(eta), x = xi, y = eta;
    if (z < 0) x = sgn(xi) * (1 - fabsf(eta)), y = sgn(eta) * (1 - fabsf(xi));
    float r = sqrtf(x * x + y * y + z * z);
    n[0] = x / r, n[1] = y / r, n[2] = z / r;
}

/** Eq. 7: marginal of ξ for n uniform on S². */
double kvq_oct_xi_pdf(double xi, const void *arg) {
    double a = fabs(xi);
    return 1.0 / (M_PI * sqrt(a * a + (1 - a) * (1 - a))) *
           ((1 - a) / (1 - 2 * a + 3 * a * a) + a / (2 - 4 * a + 3 * a * a));
}

/** Eq. 4 up to normalization: r² (1-r²)^((d-5)/2). */
double kvq_oct_rho_pdf(double r, const void *arg) {
    double d = *(const double *)arg, t = 1 - r * r;
    return t <= 0 ? 0 : r * r * exp(0.5 * (d - 5) * log(t));
}

static void oct_refresh(kvq_kvcodec *c) {
    oct_st *s = c->st;
    for (int i = 0; i < s->Kd; i++)
        for (int j = 0; j < s->Kd; j++) kvq_oct_decode(s->cxi[i], s->cxi[j], s->dirs + 3 * (i * s->Kd + j));
}

static kvq_status oct_init(kvq_kvcodec *c, kvq_err *err) {
    if (!kvq_is_pow2(c->d))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "head_dim %d is not a power of two (WHT)", c->d);
    oct_st *s = calloc(1, sizeof *s);
    if (!s) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    c->st = s;
    const oct_opts o = opts_of(&c->spec);
    s->bdir = o.bits + o.delta;
    s->bnorm = o.bits - o.delta;
    if (s->bdir < 1 || s->bdir > 8 || s->bnorm < 0 || s->bnorm > 12)
        return kvq_err_set(err, KVQ_ERR_ARG, "split b_dir=%d b_norm=%d unsupported", s->bdir, s->bnorm);
    s->Kd = 1 << s->bdir, s->Kn = 1 << s->bnorm;
    s->ntri = (c->d + 2) / 3;
    s->qjl = o.qjl;
    s->round = o.round;
    s->s1 = malloc(sizeof(float) * 2 * c->d);
    s->cxi = malloc(sizeof(float) * s->Kd);
    s->crho = malloc(sizeof(float) * s->Kn);
    s->dirs = malloc(sizeof(float) * 3 * s->Kd * s->Kd);
    if (!s->s1 || !s->cxi || !s->crho || !s->dirs) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    s->s2 = s->s1 + c->d;
    kvq_kvrng r = {c->seed};
    for (int i = 0; i < 2 * c->d; i++) s->s1[i] = (kvq_kvrng_u64(&r) >> 63) ? -1.0f : 1.0f;
    if (c->stored) { // the stored codebooks replace them (oct_check, then oct_refresh): no training
        memset(s->cxi, 0, sizeof(float) * s->Kd);
        memset(s->crho, 0, sizeof(float) * s->Kn);
        return KVQ_OK;
    }
    double dd = c->d;
    s->Dxi = kvq_lloydmax(kvq_oct_xi_pdf, NULL, -1, 1, s->Kd, s->cxi);
    s->Drho = kvq_lloydmax(kvq_oct_rho_pdf, &dd, 0, 1, s->Kn, s->crho);
    if (s->Dxi < 0 || s->Drho < 0) return kvq_err_set(err, KVQ_ERR_NOMEM, "octopus: out of memory for the Lloyd-Max grid");
    oct_refresh(c);
    return KVQ_OK;
}

static void oct_free(kvq_kvcodec *c) {
    oct_st *s = c->st;
    if (!s) return;
    free(s->s1), free(s->cxi), free(s->crho), free(s->dirs), free(s);
}

static size_t oct_idx_bytes(const kvq_kvcodec *c) {
    const oct_st *s = c->st;
    return ((size_t)s->ntri * (2 * s->bdir + s->bnorm) + 7) / 8;
}
static size_t oct_max(const kvq_kvcodec *c) {
    const oct_st *s = c->st;
    return 4 + oct_idx_bytes(c) + (s->qjl ? 2 + ((size_t)c->d + 7) / 8 : 0);
}

static void put16(uint8_t *p, float f) {
    uint16_t h = kvq_f32_to_f16(f);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}
static float get16(const uint8_t *p) { return kvq_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

// Candidate window along one coordinate for the rounding modes of App. E.
static void oct_window(const oct_st *s, float v, int j, int *lo, int *hi) {
    if (s->round == 9) { *lo = 0, *hi = s->Kd - 1; return; }
    if (s->round == 3) { *lo = j - 1, *hi = j + 1; }
    else if (s->round == 2) { // the two centroids bracketing v
        if (v >= s->cxi[j]) *lo = j, *hi = j + 1;
        else *lo = j - 1, *hi = j;
    } else *lo = *hi = j;
    if (*lo < 0) *lo = 0;
    if (*hi > s->Kd - 1) *hi = s->Kd - 1;
}

static kvq_status oct_enc(kvq_kvcodec *c, const float *x, uint8_t *o, size_t *n, kvq_err *err) {
    memset(o, 0, oct_max(c));
    const oct_st *s = c->st;
    int d = c->d;
    float u[4096 + 3], uh[4096 + 3];
    double g = 0;
    for (int i = 0; i < d; i++) g += (double)x[i] * x[i];
    g = sqrt(g);
    float inv = g > 1e-30 ? (float)(1.0 / g) : 0.0f;
    for (int i = 0; i < d; i++) u[i] = x[i] * inv * s->s1[i];
    kvq_kv_wht(u, d);
    for (int i = d; i < 3 * s->ntri; i++) u[i] = 0;
    float gf = (float)g;
    memcpy(o, &gf, 4);
    kvq_bitw wd = {o + 4, 0}, wn = {o + 4, (size_t)s->ntri * 2 * s->bdir};
    for (int t = 0; t < s->ntri; t++) {
        const float *tv = u + 3 * t;
        float xi, eta;
        kvq_oct_encode(tv, &xi, &eta);
        int jx = kvq_nearest_sorted(s->cxi, s->Kd, xi), jy = kvq_nearest_sorted(s->cxi, s->Kd, eta);
        int x0, x1, y0, y1;
        oct_window(s, xi, jx, &x0, &x1);
        oct_window(s, eta, jy, &y0, &y1);
        float best = -INFINITY;
        int bx = jx, by = jy;
        if (s->round == 0) {
            const float *nd = s->dirs + 3 * (jx * s->Kd + jy);
            best = tv[0] * nd[0] + tv[1] * nd[1] + tv[2] * nd[2];
        } else
            for (int a = x0; a <= x1; a++)
                for (int b = y0; b <= y1; b++) {
                    const float *nd = s->dirs + 3 * (a * s->Kd + b);
                    float sc = tv[0] * nd[0] + tv[1] * nd[1] + tv[2] * nd[2];
                    if (sc > best) best = sc, bx = a, by = b;
                }
        // scalar mode rounds ρ to the nearest centroid of the true norm (legacy baseline)
        float target = s->round == 0 ? sqrtf(tv[0] * tv[0] + tv[1] * tv[1] + tv[2] * tv[2])
                                     : fminf(fmaxf(best, 0.0f), 1.0f);
        int jn = kvq_nearest_sorted(s->crho, s->Kn, target);
        kvq_bitw_put(&wd, (uint32_t)bx, s->bdir);
        kvq_bitw_put(&wd, (uint32_t)by, s->bdir);
        kvq_bitw_put(&wn, (uint32_t)jn, s->bnorm);
        const float *nd = s->dirs + 3 * (bx * s->Kd + by);
        for (int k = 0; k < 3; k++) uh[3 * t + k] = s->crho[jn] * nd[k];
    }
    if (s->qjl) {
        uint8_t *p2 = o + 4 + oct_idx_bytes(c);
        double rn = 0;
        for (int i = 0; i < d; i++) {
            uh[i] = u[i] - uh[i];
            rn += (double)uh[i] * uh[i];
            uh[i] *= s->s2[i];
        }
        put16(p2, (float)sqrt(rn));
        kvq_kv_wht(uh, d);
        kvq_bitw w2 = {p2 + 2, 0};
        for (int i = 0; i < d; i++) kvq_bitw_put(&w2, uh[i] >= 0, 1);
    }
    *n = oct_max(c);
    return KVQ_OK;
}

// rotated-frame reconstruction û (3·ntri); the index fields unpacked 8 at a time when they are
// at most 8 bits wide (every b up to 7 with the default split)
static void oct_uhat(const oct_st *s, const uint8_t *in, float *uh) {
    if (s->bdir <= 8 && s->bnorm <= 8) {
        uint8_t cd[2 * 1366], cn[1366] = {0}; // ntri <= ceil(4096 / 3)
        kvq_codes_unpack(in + 4, s->bdir, 2 * s->ntri, cd);
        if (s->bnorm) kvq_codes_unpack_at(in + 4, (size_t)s->ntri * 2 * s->bdir, s->bnorm, s->ntri, cn);
        for (int t = 0; t < s->ntri; t++) {
            const float rho = s->crho[cn[t]], *nd = s->dirs + 3 * (cd[2 * t] * s->Kd + cd[2 * t + 1]);
            for (int k = 0; k < 3; k++) uh[3 * t + k] = rho * nd[k];
        }
        return;
    }
    kvq_bitr rd = {in + 4, 0}, rn = {in + 4, (size_t)s->ntri * 2 * s->bdir};
    for (int t = 0; t < s->ntri; t++) {
        int a = (int)kvq_bitr_get(&rd, s->bdir), b = (int)kvq_bitr_get(&rd, s->bdir);
        float rho = s->crho[kvq_bitr_get(&rn, s->bnorm)];
        const float *nd = s->dirs + 3 * (a * s->Kd + b);
        for (int k = 0; k < 3; k++) uh[3 * t + k] = rho * nd[k];
    }
}

static void oct_dec(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out) {
    const oct_st *s = c->st;
    int d = c->d;
    float uh[4096 + 3], g;
    memcpy(&g, in, 4);
    oct_uhat(s, in, uh);
    kvq_kv_wht(uh, d);
    for (int i = 0; i < d; i++) out[i] = g * s->s1[i] * uh[i];
}

// û + sqrt(π/(2d)) γ_r R'ᵀσ in the rotated frame, then unrotated: <q, k̃> = score
static void oct_score_vec(const kvq_kvcodec *c, const uint8_t *in, float *out) {
    const oct_st *s = c->st;
    int d = c->d;
    float uh[4096 + 3], sg[4096], g;
    memcpy(&g, in, 4);
    oct_uhat(s, in, uh);
    if (s->qjl) {
        const uint8_t *p2 = in + 4 + oct_idx_bytes(c);
        kvq_bitr r2 = {p2 + 2, 0};
        float k = sqrtf((float)M_PI / (2.0f * d)) * get16(p2);
        for (int i = 0; i < d; i++) sg[i] = kvq_bitr_get(&r2, 1) ? k : -k;
        kvq_kv_wht(sg, d); // R'ᵀσ = diag(s2) H σ
        for (int i = 0; i < d; i++) uh[i] += s->s2[i] * sg[i];
    }
    kvq_kv_wht(uh, d);
    for (int i = 0; i < d; i++) out[i] = g * s->s1[i] * uh[i];
}

// Eq. 13 (+ QJL correction): γ Σ_i ρ̂_i <q_rot,i, n̂_i> + γ sqrt(π/(2d)) γ_r <R' q_rot, σ>. Each
// token's triplets ρ̂_i n̂_i are read once into û (rotated frame) and scored against every rotated
// query; the sign bits likewise (σ in {0, 1}: <x, 2σ − 1> = 2 <x, σ> − Σx).
static void oct_score(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *const *rec, const uint32_t *len,
                      int nt, float *sc, int lds) {
    const oct_st *s = c->st;
    const int d = c->d, n3 = 3 * s->ntri, rows = 8192 / (n3 + 3);
    float qr[8192], q2[8192], q2sum[8192], uh[4096 + 3];
    uint8_t sg[4096];
    for (int i0 = 0; i0 < n_q; i0 += rows) {
        const int nr = n_q - i0 < rows ? n_q - i0 : rows;
        for (int i = 0; i < nr; i++) {
            float *qi = qr + (size_t)i * n3;
            for (int j = 0; j < d; j++) qi[j] = q[(size_t)(i0 + i) * d + j] * s->s1[j];
            kvq_kv_wht(qi, d);
            for (int j = d; j < n3; j++) qi[j] = 0;
            if (!s->qjl) continue;
            float *q2i = q2 + (size_t)i * d;
            for (int j = 0; j < d; j++) q2i[j] = qi[j] * s->s2[j];
            kvq_kv_wht(q2i, d);
            q2sum[i] = 0;
            for (int j = 0; j < d; j++) q2sum[i] += q2i[j];
        }
        const float kq = sqrtf((float)M_PI / (2.0f * d));
        for (int t = 0; t < nt; t++) {
            const uint8_t *in = rec[t], *p2 = in + 4 + oct_idx_bytes(c);
            float g;
            memcpy(&g, in, 4);
            oct_uhat(s, in, uh);
            if (s->qjl) kvq_codes_unpack(p2 + 2, 1, d, sg);
            for (int i = 0; i < nr; i++) {
                float acc = kvq_codes_fdot(qr + (size_t)i * n3, uh, n3);
                if (s->qjl) acc += kq * get16(p2) * (2 * kvq_codes_dot(q2 + (size_t)i * d, sg, d) - q2sum[i]);
                sc[(size_t)(i0 + i) * lds + t] = g * acc;
            }
        }
    }
}

static double oct_bits(const kvq_kvcodec *c) {
    const oct_st *s = c->st;
    return ((double)s->ntri * (2 * s->bdir + s->bnorm) + 32 + (s->qjl ? 16 + c->d : 0)) / c->d;
}

static int oct_tables(const kvq_kvcodec *c, kvq_kvtable *t) {
    oct_st *s = c->st;
    t[0] = (kvq_kvtable){"signs", s->s1, 2 * (size_t)c->d};
    t[1] = (kvq_kvtable){"codebook_xi", s->cxi, (size_t)s->Kd};
    t[2] = (kvq_kvtable){"codebook_rho", s->crho, (size_t)s->Kn};
    return 3;
}

static kvq_status oct_check(const kvq_kvcodec *c, kvq_err *err) {
    const oct_st *s = c->st;
    kvq_status st = kvq_kv_check_signs("signs", s->s1, 2 * (size_t)c->d, err);
    if (!st) st = kvq_kv_check_increasing("codebook_xi", s->cxi, (size_t)s->Kd, -1.0f, 1.0f, err);
    if (!st) st = kvq_kv_check_increasing("codebook_rho", s->crho, (size_t)s->Kn, 0.0f, 1.0f, err);
    return st;
}

const kvq_kvcodec_vt kvq_kv_octopus_vt = {.check_tables = oct_check, .name = "octopus", .init = oct_init, .free = oct_free,
                                           .max_bytes = oct_max, .encode = oct_enc, .decode = oct_dec,
                                           .score = oct_score, .score_vec = oct_score_vec, .bits_formula = oct_bits,
                                           .tables = oct_tables, .refresh = oct_refresh};

int kvq_kv_octopus_info_of(const kvq_kvcodec *c, kvq_kv_octopus_info *o) {
    if (c->vt != &kvq_kv_octopus_vt) return -1;
    const oct_st *s = c->st;
    *o = (kvq_kv_octopus_info){s->bdir, s->bnorm, s->ntri, s->qjl, s->s1, s->s2, s->crho, s->dirs, s->cxi, s->round};
    return 0;
}

// ---- values: per-token groups (kvq_kv_vgroup_*, kv_int.c) at octopus's bits

static kvq_status octv_init(kvq_kvcodec *c, kvq_err *err) { return KVQ_OK; }
static size_t octv_max(const kvq_kvcodec *c) { return kvq_kv_vgroup_max(c->d, opts_of(&c->spec).bits); }
static kvq_status octv_enc(kvq_kvcodec *c, const float *x, uint8_t *o, size_t *n, kvq_err *err) {
    kvq_kv_vgroup_encode(c->d, opts_of(&c->spec).bits, x, o);
    *n = octv_max(c);
    return KVQ_OK;
}
static void octv_dec(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out) {
    kvq_kv_vgroup_decode(c->d, opts_of(&c->spec).bits, in, out);
}
static double octv_bits(const kvq_kvcodec *c) { return kvq_kv_vgroup_bits(c->d, opts_of(&c->spec).bits); }

static void octv_vsum(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *const *rec,
                      const uint32_t *len, int nt, float *out) {
    kvq_kv_vgroup_vsum(c->d, opts_of(&c->spec).bits, p, ldp, n_q, rec, nt, out);
}

static const kvq_kvcodec_vt octv_vt = {.name = "vgroup", .init = octv_init, .max_bytes = octv_max,
                                       .encode = octv_enc, .decode = octv_dec, .vsum = octv_vsum,
                                       .bits_formula = octv_bits};

// ---- table row (kvcodec.h): octopus:<b>[:qjl][:split=<d>][:round=scalar|2x2|3x3|full]

static kvq_status octopus_parse(const char *spec, char *const *fld, int nf, kvq_kvspec *out, kvq_err *err) {
    oct_opts o = {.delta = 1, .round = 3};
    kvq_status st = kvq_kvspec_bits(spec, fld, nf, 1, 8, 1, &o.bits, err);
    if (st) return st;
    for (int i = 2; i < nf; i++) {
        char *e = NULL;
        long v;
        if (!strcmp(fld[i], "qjl")) o.qjl = 1;
        else if (!strncmp(fld[i], "split=", 6) && (v = strtol(fld[i] + 6, &e, 10), e != fld[i] + 6 && !*e) && v >= -3 && v <= 3)
            o.delta = (int)v;
        else if (!strncmp(fld[i], "round=", 6)) {
            const char *r = fld[i] + 6;
            o.round = !strcmp(r, "scalar") ? 0 : !strcmp(r, "2x2") ? 2 : !strcmp(r, "3x3") ? 3 : !strcmp(r, "full") ? 9 : -1;
            if (o.round < 0) return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': rounding '%s' (scalar, 2x2, 3x3, full)", spec, r);
        } else
            return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': unknown option '%s'", spec, fld[i]);
    }
    int bd = o.bits + o.delta, bn = o.bits - o.delta;
    if (bd < 1 || bn < 0 || bd > 10 || bn > 10)
        return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': split gives b_dir=%d b_norm=%d (need b_dir>=1, b_norm>=0)", spec, bd, bn);
    kvq_kvspec_opts_set(out, &o, sizeof o);
    return KVQ_OK;
}
static int octopus_format(const kvq_kvspec *s, char *buf, size_t n) {
    const oct_opts o = opts_of(s);
    const char *r = o.round == 0 ? "scalar" : o.round == 2 ? "2x2" : o.round == 9 ? "full" : "3x3";
    int k = snprintf(buf, n, "octopus:%d%s", o.bits, o.qjl ? ":qjl" : "");
    if (o.delta != 1) k += snprintf(buf + k, n > (size_t)k ? n - k : 0, ":split=%d", o.delta);
    if (o.round != 3) k += snprintf(buf + k, n > (size_t)k ? n - k : 0, ":round=%s", r);
    return k;
}
const kvq_kvcodec_traits kvq_kv_octopus_row = {"octopus", octopus_parse, octopus_format, &kvq_kv_octopus_vt,
                                               &octv_vt, "octopus:4", 0.13};
