// Baseline KV codecs: fp16; int:<b> (per token and head, symmetric absmax, fp16
// scale); per-token group-32 asymmetric int (KIVI values, OCTOPUS values); KIVI keys
// (per channel over groups of 32 tokens, fp16 scale and zero). Attention reads them without
// decoding: scores as s·(q·c − qmax·Σq) (int) and (q⊙s)·c + q·z per 32-token group (KIVI keys),
// values as Σ (p·s)·c plus the scale- or zero-weighted sums added once per row.
// Layouts (LSB-first bit packing):
//   fp16  : d × fp16
//   int   : fp16 scale | d × b-bit (q + qmax)
//   vgroup: ceil(d/32) × (fp16 scale, fp16 zero) | d × b-bit q
//   kivi K: one group of 32 tokens: d × (fp16 scale, fp16 zero) | 32·d × b-bit q (token-major)
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cpu/kvcodes.h"
#include "libconv/kv/kvcodec.h"

#define KIVI_G 32

static void put16(uint8_t *p, float f) {
    uint16_t h = kvq_f32_to_f16(f);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}
static float get16(const uint8_t *p) { return kvq_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static float r16(float f) { return kvq_f16_to_f32(kvq_f32_to_f16(f)); }

// Code i of a b-bit (b ≤ 8) LSB-first stream, read directly (the same value kvq_bitr_get gives
// in sequence): decoding every cached token each step made the bit reader a quarter of a
// decode step with int:4.
static inline uint32_t code_at(const uint8_t *p, int b, int i) {
    const int bit = i * b, k = bit >> 3, off = bit & 7;
    uint32_t v = p[k] >> off;
    if (off + b > 8) v |= (uint32_t)p[k + 1] << (8 - off);
    return v & ((1u << b) - 1u);
}

static kvq_status plain_init(kvq_kvcodec *c, kvq_err *err) { return KVQ_OK; }

// The options of int:<b> and kivi:<b> (fp16 has none): private to this file.
typedef struct {
    int bits;
} int_opts;
KVQ_KV_OPTS(int_opts);
static int opt_bits(const kvq_kvcodec *c) { return opts_of(&c->spec).bits; }

// ---- fp16 ----

static size_t fp16_max(const kvq_kvcodec *c) { return 2 * (size_t)c->d; }
static kvq_status fp16_enc(kvq_kvcodec *c, const float *x, uint8_t *o, size_t *n, kvq_err *err) {
    for (int i = 0; i < c->d; i++) put16(o + 2 * i, x[i]);
    *n = 2 * (size_t)c->d;
    return KVQ_OK;
}
static void fp16_dec(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out) {
    for (int i = 0; i < c->d; i++) out[i] = get16(in + 2 * i);
}
static double fp16_bits(const kvq_kvcodec *c) { return 16.0; }

const kvq_kvcodec_vt kvq_kv_fp16_vt = {.name = "fp16", .init = plain_init, .max_bytes = fp16_max,
                                        .encode = fp16_enc, .decode = fp16_dec, .bits_formula = fp16_bits};

// ---- int:<b> symmetric ----

static size_t int_max(const kvq_kvcodec *c) { return 2 + ((size_t)c->d * opt_bits(c) + 7) / 8; }
static kvq_status int_enc(kvq_kvcodec *c, const float *x, uint8_t *o, size_t *n, kvq_err *err) {
    memset(o, 0, int_max(c));
    int b = opt_bits(c), qmax = (1 << (b - 1)) - 1;
    float amax = 0;
    for (int i = 0; i < c->d; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = r16(amax / qmax);
    put16(o, s);
    kvq_bitw w = {o + 2, 0};
    for (int i = 0; i < c->d; i++) {
        int q = s > 0 ? (int)lrintf(x[i] / s) : 0;
        q = q < -qmax ? -qmax : q > qmax ? qmax : q;
        kvq_bitw_put(&w, (uint32_t)(q + qmax), b);
    }
    *n = int_max(c);
    return KVQ_OK;
}
static void int_dec(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out) {
    int b = opt_bits(c), qmax = (1 << (b - 1)) - 1;
    float s = get16(in);
    const uint8_t *p = in + 2;
    for (int i = 0; i < c->d; i++) out[i] = s * (float)((int)code_at(p, b, i) - qmax);
}
static double int_bits(const kvq_kvcodec *c) { return opt_bits(c) + 16.0 / c->d; }

// Rows of weights (queries) at a time the sums keep their per-row state for.
#define VS_ROWS 8

// k = s·(c − qmax): <q, k> = s·(q·c − qmax·Σq)
static void int_score(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *const *rec, const uint32_t *len,
                      int nt, float *sc, int lds) {
    const int b = opt_bits(c), qmax = (1 << (b - 1)) - 1, d = c->d;
    uint8_t cd[4096];
    for (int i0 = 0; i0 < n_q; i0 += VS_ROWS) {
        const int nr = n_q - i0 < VS_ROWS ? n_q - i0 : VS_ROWS;
        float qsum[VS_ROWS] = {0};
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < d; j++) qsum[i] += q[(size_t)(i0 + i) * d + j];
        for (int t = 0; t < nt; t++) {
            const float s = get16(rec[t]);
            kvq_codes_unpack(rec[t] + 2, b, d, cd);
            for (int i = 0; i < nr; i++)
                sc[(size_t)(i0 + i) * lds + t] = s * (kvq_codes_dot(q + (size_t)(i0 + i) * d, cd, d) - (float)qmax * qsum[i]);
        }
    }
}

// Σ_t p_t s_t (c_t − qmax) = Σ_t (p_t s_t) c_t − qmax Σ_t p_t s_t
static void int_vsum(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *const *rec,
                     const uint32_t *len, int nt, float *out) {
    const int b = opt_bits(c), qmax = (1 << (b - 1)) - 1, d = c->d;
    uint8_t cd[4096];
    for (int i0 = 0; i0 < n_q; i0 += VS_ROWS) {
        const int nr = n_q - i0 < VS_ROWS ? n_q - i0 : VS_ROWS;
        float zs[VS_ROWS] = {0}, *o = out + (size_t)i0 * d;
        memset(o, 0, sizeof(float) * nr * d);
        for (int t = 0; t < nt; t++) {
            const float s = get16(rec[t]);
            kvq_codes_unpack(rec[t] + 2, b, d, cd);
            for (int i = 0; i < nr; i++) {
                const float w = p[(size_t)(i0 + i) * ldp + t] * s;
                if (w == 0) continue;
                kvq_codes_axpy(o + (size_t)i * d, w, cd, d);
                zs[i] += w;
            }
        }
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < d; j++) o[(size_t)i * d + j] -= (float)qmax * zs[i];
    }
}

const kvq_kvcodec_vt kvq_kv_int_vt = {.name = "int", .init = plain_init, .max_bytes = int_max,
                                       .encode = int_enc, .decode = int_dec, .score = int_score,
                                       .vsum = int_vsum, .bits_formula = int_bits};

// ---- asymmetric helpers ----

static void asym_params(float mn, float mx, int L, float *scale, float *zero) {
    *zero = r16(mn);
    *scale = r16((mx - *zero) / L);
}
static int asym_q(float x, float scale, float zero, int L) {
    int q = scale > 0 ? (int)lrintf((x - zero) / scale) : 0;
    return q < 0 ? 0 : q > L ? L : q;
}

// ---- per-token group-32 asymmetric (values): plain functions of (d, b), kvcodec.h ----

static int vg_ngroups(int d) { return (d + KIVI_G - 1) / KIVI_G; }
size_t kvq_kv_vgroup_max(int d, int b) { return 4 * (size_t)vg_ngroups(d) + ((size_t)d * b + 7) / 8; }
void kvq_kv_vgroup_encode(int d, int b, const float *x, uint8_t *o) {
    memset(o, 0, kvq_kv_vgroup_max(d, b));
    int L = (1 << b) - 1, ng = vg_ngroups(d);
    kvq_bitw w = {o + 4 * ng, 0};
    for (int g = 0; g < ng; g++) {
        int a = g * KIVI_G, e = a + KIVI_G < d ? a + KIVI_G : d;
        float mn = x[a], mx = x[a], s, z;
        for (int i = a; i < e; i++) mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]);
        asym_params(mn, mx, L, &s, &z);
        put16(o + 4 * g, s);
        put16(o + 4 * g + 2, z);
        for (int i = a; i < e; i++) kvq_bitw_put(&w, (uint32_t)asym_q(x[i], s, z, L), b);
    }
}
void kvq_kv_vgroup_decode(int d, int b, const uint8_t *in, float *out) {
    int ng = vg_ngroups(d);
    const uint8_t *p = in + 4 * ng;
    for (int g = 0; g < ng; g++) {
        int a = g * KIVI_G, e = a + KIVI_G < d ? a + KIVI_G : d;
        float s = get16(in + 4 * g), z = get16(in + 4 * g + 2);
        for (int i = a; i < e; i++) out[i] = z + s * (float)code_at(p, b, i);
    }
}
double kvq_kv_vgroup_bits(int d, int b) { return b + 32.0 * vg_ngroups(d) / d; }

// v_i = z_g + s_g c_i per 32-channel group g: Σ_t p_t v_t,i = Σ_t (p_t s_t,g) c_t,i + Σ_t p_t z_t,g
void kvq_kv_vgroup_vsum(int d, int b, const float *p, int ldp, int n_q, const uint8_t *const *rec, int nt, float *out) {
    const int ng = vg_ngroups(d);
    uint8_t cd[4096];
    float zs[VS_ROWS * (4096 / KIVI_G)];
    for (int i0 = 0; i0 < n_q; i0 += VS_ROWS) {
        const int nr = n_q - i0 < VS_ROWS ? n_q - i0 : VS_ROWS;
        float *o = out + (size_t)i0 * d;
        memset(o, 0, sizeof(float) * nr * d);
        memset(zs, 0, sizeof(float) * nr * ng);
        for (int t = 0; t < nt; t++) {
            const uint8_t *in = rec[t];
            kvq_codes_unpack(in + 4 * ng, b, d, cd);
            for (int g = 0; g < ng; g++) {
                const int a = g * KIVI_G, e = a + KIVI_G < d ? a + KIVI_G : d;
                const float s = get16(in + 4 * g), z = get16(in + 4 * g + 2);
                for (int i = 0; i < nr; i++) {
                    const float pt = p[(size_t)(i0 + i) * ldp + t];
                    if (pt == 0) continue;
                    kvq_codes_axpy(o + (size_t)i * d + a, pt * s, cd + a, e - a);
                    zs[i * ng + g] += pt * z;
                }
            }
        }
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < d; j++) o[(size_t)i * d + j] += zs[i * ng + j / KIVI_G];
    }
}

// KIVI's values: per-token groups at kivi's bits.
static size_t kivi_v_max(const kvq_kvcodec *c) { return kvq_kv_vgroup_max(c->d, opt_bits(c)); }
static kvq_status kivi_v_enc(kvq_kvcodec *c, const float *x, uint8_t *o, size_t *n, kvq_err *err) {
    kvq_kv_vgroup_encode(c->d, opt_bits(c), x, o);
    *n = kivi_v_max(c);
    return KVQ_OK;
}
static void kivi_v_dec(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out) {
    kvq_kv_vgroup_decode(c->d, opt_bits(c), in, out);
}
static double kivi_v_bits(const kvq_kvcodec *c) { return kvq_kv_vgroup_bits(c->d, opt_bits(c)); }

static void kivi_v_vsum(const kvq_kvcodec *c, const float *p, int ldp, int n_q, const uint8_t *const *rec,
                        const uint32_t *len, int nt, float *out) {
    kvq_kv_vgroup_vsum(c->d, opt_bits(c), p, ldp, n_q, rec, nt, out);
}

static const kvq_kvcodec_vt kivi_v_vt = {.name = "vgroup", .init = plain_init, .max_bytes = kivi_v_max,
                                         .encode = kivi_v_enc, .decode = kivi_v_dec, .vsum = kivi_v_vsum,
                                         .bits_formula = kivi_v_bits};

// ---- KIVI keys: per channel over a group of 32 tokens ----

static kvq_status kivi_init(kvq_kvcodec *c, kvq_err *err) {
    c->group = KIVI_G;
    return KVQ_OK;
}
static size_t kivi_max(const kvq_kvcodec *c) {
    return 4 * (size_t)c->d + ((size_t)KIVI_G * c->d * opt_bits(c) + 7) / 8;
}
static kvq_status kivi_enc(kvq_kvcodec *c, const float *x, uint8_t *o, size_t *n, kvq_err *err) {
    memset(o, 0, kivi_max(c));
    int b = opt_bits(c), L = (1 << b) - 1, d = c->d;
    float s[4096], z[4096]; // per channel; d <= 4096 (kvq_kvcodec_new)
    for (int i = 0; i < d; i++) {
        float mn = x[i], mx = x[i];
        for (int t = 1; t < KIVI_G; t++) mn = fminf(mn, x[t * d + i]), mx = fmaxf(mx, x[t * d + i]);
        asym_params(mn, mx, L, &s[i], &z[i]);
        put16(o + 4 * i, s[i]);
        put16(o + 4 * i + 2, z[i]);
    }
    kvq_bitw w = {o + 4 * d, 0};
    for (int t = 0; t < KIVI_G; t++)
        for (int i = 0; i < d; i++) kvq_bitw_put(&w, (uint32_t)asym_q(x[t * d + i], s[i], z[i], L), b);
    *n = kivi_max(c);
    return KVQ_OK;
}
static void kivi_dec(const kvq_kvcodec *c, const uint8_t *in, size_t n, float *out) {
    int b = opt_bits(c), d = c->d;
    kvq_bitr r = {in + 4 * d, 0};
    for (int t = 0; t < KIVI_G; t++)
        for (int i = 0; i < d; i++)
            out[t * d + i] = get16(in + 4 * i + 2) + get16(in + 4 * i) * (float)kvq_bitr_get(&r, b);
}
static double kivi_bits(const kvq_kvcodec *c) { return opt_bits(c) + 32.0 / KIVI_G; }

// Per group of 32 tokens, k_t,i = z_i + s_i c_t,i: <q, k_t> = q·z + (q⊙s)·c_t, q⊙s and q·z once
// per group and query. Token t's codes start at bit t·d·b.
static void kivi_score(const kvq_kvcodec *c, const float *q, int n_q, const uint8_t *const *rec, const uint32_t *len,
                       int nt, float *sc, int lds) {
    const int b = opt_bits(c), d = c->d, rows = 8192 / d;
    float qs[8192], qz[8192];
    uint8_t cd[4096];
    for (int i0 = 0; i0 < n_q; i0 += rows) {
        const int nr = n_q - i0 < rows ? n_q - i0 : rows;
        for (int g = 0; g * KIVI_G < nt; g++) {
            const uint8_t *in = rec[g], *codes = in + 4 * d;
            for (int i = 0; i < nr; i++) {
                const float *qi = q + (size_t)(i0 + i) * d;
                qz[i] = 0;
                for (int j = 0; j < d; j++) qs[i * d + j] = qi[j] * get16(in + 4 * j), qz[i] += qi[j] * get16(in + 4 * j + 2);
            }
            const int m = nt - g * KIVI_G < KIVI_G ? nt - g * KIVI_G : KIVI_G;
            for (int t = 0; t < m; t++) {
                kvq_codes_unpack_at(codes, (size_t)t * d * b, b, d, cd);
                for (int i = 0; i < nr; i++)
                    sc[(size_t)(i0 + i) * lds + g * KIVI_G + t] = qz[i] + kvq_codes_dot(qs + (size_t)i * d, cd, d);
            }
        }
    }
}

const kvq_kvcodec_vt kvq_kv_kivi_vt = {.name = "kivi", .init = kivi_init, .max_bytes = kivi_max,
                                        .encode = kivi_enc, .decode = kivi_dec, .score = kivi_score,
                                        .bits_formula = kivi_bits};

// ---- table rows (kvcodec.h): fp16, int:<b>, kivi:<b>

static kvq_status fp16_parse(const char *spec, char *const *fld, int nf, kvq_kvspec *o, kvq_err *err) {
    (void)fld;
    if (nf != 1) return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': fp16 takes no arguments", spec);
    return KVQ_OK;
}
static int fp16_format(const kvq_kvspec *s, char *buf, size_t n) { (void)s; return snprintf(buf, n, "fp16"); }
static kvq_status bits_parse(const char *spec, char *const *fld, int nf, int lo, kvq_kvspec *o, kvq_err *err) {
    int_opts io = {0};
    kvq_status st = kvq_kvspec_bits(spec, fld, nf, lo, 8, 0, &io.bits, err);
    if (!st) kvq_kvspec_opts_set(o, &io, sizeof io);
    return st;
}
static kvq_status int_parse(const char *spec, char *const *fld, int nf, kvq_kvspec *o, kvq_err *err) {
    return bits_parse(spec, fld, nf, 2, o, err);
}
static kvq_status kivi_parse(const char *spec, char *const *fld, int nf, kvq_kvspec *o, kvq_err *err) {
    return bits_parse(spec, fld, nf, 1, o, err);
}
static int bits_format(const kvq_kvspec *s, char *buf, size_t n) {
    return snprintf(buf, n, "%s:%d", s->name, opts_of(s).bits);
}

const kvq_kvcodec_traits kvq_kv_fp16_row = {"fp16", fp16_parse, fp16_format, &kvq_kv_fp16_vt, &kvq_kv_fp16_vt, "fp16", 1e-3};
const kvq_kvcodec_traits kvq_kv_int_row = {"int", int_parse, bits_format, &kvq_kv_int_vt, &kvq_kv_int_vt, "int:4", 0.18};
const kvq_kvcodec_traits kvq_kv_kivi_row = {"kivi", kivi_parse, bits_format, &kvq_kv_kivi_vt, &kivi_v_vt, "kivi:4", 0.12};
