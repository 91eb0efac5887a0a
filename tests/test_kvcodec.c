// Tests of the KV codec family (libconv/kv/kvcodec.h, libconv/kv/): spec parsing, known
// codebook distortions, Hurwitz group, octahedral map, HQMQ search, bit accounting
// against the papers' formulas, round-trip error bounds, determinism, serialization,
// score paths and QJL unbiasedness.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "libconv/codec/hyperquant/hqcal.h"
#include "libconv/kv/kv_internal.h"
#include "libconv/kv/kvcodec.h"

static kvq_kvcodec *mk(const char *spec, int d, int role, uint64_t seed) {
    kvq_kvspec s;
    kvq_err e = {0};
    assert_int_equal(kvq_kvspec_parse(spec, &s, &e), KVQ_OK);
    kvq_kvcodec *c = NULL;
    kvq_status st = kvq_kvcodec_new(&s, d, role, seed, &c, &e);
    if (st) fail_msg("%s: %s", spec, e.msg);
    return c;
}

static void gauss(float *x, size_t n, uint64_t seed) {
    kvq_kvrng r = {seed};
    for (size_t i = 0; i < n; i++) x[i] = (float)kvq_kvrng_normal(&r);
}

static void test_spec_parse(void **st) {
    const char *ok[] = {"fp16", "int:4", "kivi:2", "hqmq:s96:r4", "hqmq:s192:r6:med3", "octopus:3",
                        "octopus:2:qjl", "octopus:3:split=0:round=scalar", "turboquant:4",
                        "turboquant-prod:3", "qturbo:2", "hqkv:e8:3:rot=signs:dither"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        kvq_kvspec a, b;
        char buf[128];
        kvq_err e = {0};
        assert_int_equal(kvq_kvspec_parse(ok[i], &a, &e), KVQ_OK);
        kvq_kvspec_format(&a, buf, sizeof buf);
        assert_int_equal(kvq_kvspec_parse(buf, &b, &e), KVQ_OK);
        assert_memory_equal(&a, &b, sizeof a);
    }
    const char *bad[] = {"", "fp8", "int:1", "int:x", "hqmq:s96", "hqmq:s96:r4:med0.5", "octopus:3:foo",
                         "octopus:1:split=2", "turboquant-prod:1", "hqkv:e8", "fp16:3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kvq_kvspec a;
        kvq_err e = {0};
        assert_int_equal(kvq_kvspec_parse(bad[i], &a, &e), KVQ_ERR_ARG);
        assert_true(strlen(e.msg) > 0);
    }
}

// TurboQuant's published D_mse = d·E[(u-û)²] at d = 128, b = 1..4. The values are
// given to 5 decimals (±5e-6); the grid Lloyd-Max converges to 1e-13 relative and
// its quadrature error is far below that, so 1e-5 is the tolerance.
static void test_lloydmax_beta(void **st) {
    const double pub[4] = {0.36089, 0.11600, 0.03397, 0.00931};
    float cb[16];
    for (int b = 1; b <= 4; b++) {
        double D = 128 * kvq_turbo_codebook(128, b, cb);
        printf("  Lloyd-Max Beta d=128 b=%d: D_mse=%.6f (published %.5f)\n", b, D, pub[b - 1]);
        assert_true(fabs(D - pub[b - 1]) < 1e-5);
        for (int k = 0; k < (1 << b); k++) assert_true(fabsf(cb[k] + cb[(1 << b) - 1 - k]) < 1e-5); // symmetric
    }
}

static int hurwitz_find(const float *q) {
    for (int p = 0; p < 24; p++) {
        float u[4];
        kvq_hurwitz_unit(p, u);
        float e = 0;
        for (int k = 0; k < 4; k++) e += fabsf(u[k] - q[k]);
        if (e < 1e-6f) return p;
    }
    return -1;
}

static void test_hurwitz_group(void **st) {
    float a[4], b[4], c[4];
    for (int p = 0; p < 24; p++) {
        kvq_hurwitz_unit(p, a);
        assert_true(fabsf(a[0] * a[0] + a[1] * a[1] + a[2] * a[2] + a[3] * a[3] - 1) < 1e-6f);
        assert_int_equal(hurwitz_find(a), p); // distinct
        int has_inv = 0;
        for (int r = 0; r < 24; r++) {
            kvq_hurwitz_unit(r, b);
            kvq_quat_mul(a, b, c);
            assert_true(hurwitz_find(c) >= 0); // closure
            has_inv |= hurwitz_find(c) == 0;   // 0 is the identity 1
            if (r != p) {                       // minimum angle 60°: <a, b> <= 1/2
                float dot = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
                assert_true(dot <= 0.5f + 1e-6f);
            }
        }
        assert_true(has_inv);
    }
}

static void test_octahedral(void **st) {
    kvq_kvrng r = {7};
    for (int i = 0; i < 100000; i++) {
        float n[3], m[3], xi, eta;
        double l = 0;
        for (int k = 0; k < 3; k++) n[k] = (float)kvq_kvrng_normal(&r), l += n[k] * n[k];
        for (int k = 0; k < 3; k++) n[k] /= (float)sqrt(l);
        kvq_oct_encode(n, &xi, &eta);
        assert_true(fabsf(xi) <= 1 && fabsf(eta) <= 1);
        kvq_oct_decode(xi, eta, m);
        for (int k = 0; k < 3; k++) assert_true(fabsf(m[k] - n[k]) < 2e-6f);
    }
    // eq. 7 is a density: it integrates to 1 (midpoint rule, 2e5 cells)
    double z = 0;
    for (int i = 0; i < 200000; i++) z += kvq_oct_xi_pdf(-1 + (i + 0.5) * 1e-5, NULL) * 1e-5;
    assert_true(fabs(z - 1) < 1e-6);
}

static void test_hqmq_search(void **st) {
    kvq_kvcodec *c = mk("hqmq:s96:r4", 128, 0, 11);
    kvq_kvrng r = {3};
    int ties = 0;
    for (int i = 0; i < 20000; i++) {
        float u[4];
        double l = 0;
        for (int k = 0; k < 4; k++) u[k] = (float)kvq_kvrng_normal(&r), l += u[k] * u[k];
        for (int k = 0; k < 4; k++) u[k] /= (float)sqrt(l);
        int a = kvq_hqmq_search(c, u), b = kvq_hqmq_search_ref(c, u);
        if (a != b) ties++; // allowed only for float near-ties, checked below
    }
    assert_true(ties <= 2);
    kvq_kvcodec_free(c);
}

// HQMQ Table 12 at d_h = 128, and the other codecs' formulas vs the bytes stored.
static void test_bits(void **st) {
    struct { const char *spec; double pub; } t12[] = {{"hqmq:s24:r3", 3.17}, {"hqmq:s96:r4", 3.92}, {"hqmq:s192:r6", 4.67}};
    for (int i = 0; i < 3; i++) {
        kvq_kvcodec *c = mk(t12[i].spec, 128, 0, 1);
        double b = c->vt->bits_formula(c);
        printf("  %s: %.4f bits/element (Table 12: %.2f)\n", t12[i].spec, b, t12[i].pub);
        assert_true(fabs(b - t12[i].pub) < 0.005);
        kvq_kvcodec_free(c);
    }
    struct { const char *spec; int d, role; double f; } f[] = {
        {"fp16", 128, 0, 16}, {"int:4", 128, 0, 4 + 16.0 / 128}, {"int:2", 64, 1, 2 + 16.0 / 64},
        {"kivi:2", 128, 0, 3}, {"kivi:4", 64, 1, 5}, {"octopus:2", 128, 0, (43.0 * 7 + 32) / 128},
        {"octopus:4:qjl", 128, 0, (43.0 * 13 + 32 + 16 + 128) / 128}, {"octopus:3", 128, 1, 4},
        {"turboquant:3", 128, 0, 3 + 16.0 / 128}, {"turboquant-prod:3", 128, 0, 3 + 32.0 / 128},
        {"turboquant-prod:3", 128, 1, 3 + 16.0 / 128}, {"qturbo:2", 64, 0, 2 + 16.0 / 64},
        {"hqmq:s96:r4", 64, 0, (16 + 179 + 64.0) / 64}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        kvq_kvcodec *c = mk(f[i].spec, f[i].d, f[i].role, 5);
        double b = c->vt->bits_formula(c);
        assert_true(fabs(b - f[i].f) < 1e-9);
        int n = 64;
        float *x = malloc(sizeof(float) * n * f[i].d);
        gauss(x, (size_t)n * f[i].d, 9);
        uint8_t *buf = malloc(kvq_kvcodec_bound(c, n));
        size_t off[65];
        assert_int_equal(kvq_kvcodec_encode(c, x, n, buf, kvq_kvcodec_bound(c, n), off, NULL), KVQ_OK);
        // stored bytes: each group rounds its bit count up to whole bytes, nothing more
        int ng = n / c->group;
        double per_group_bits = b * f[i].d * c->group;
        assert_int_equal(off[ng], (size_t)ng * (size_t)ceil(per_group_bits / 8 - 1e-9));
        free(x), free(buf);
        kvq_kvcodec_free(c);
    }
}

// Round trips within each codec's predicted error.
static void test_roundtrip_bounds(void **st) {
    int d = 128, n = 256;
    float *x = malloc(sizeof(float) * n * d), *y = malloc(sizeof(float) * n * d);
    gauss(x, (size_t)n * d, 21);
    size_t off[257];
    uint8_t *buf = malloc(1 << 20);
    // int:b: |x - x̂| <= scale/2 per element (scale = fp16(absmax/qmax))
    for (int b = 2; b <= 8; b++) {
        char spec[16];
        snprintf(spec, sizeof spec, "int:%d", b);
        kvq_kvcodec *c = mk(spec, d, 0, 1);
        kvq_kvcodec_encode(c, x, n, buf, 1 << 20, off, NULL);
        kvq_kvcodec_decode(c, buf, off, n, y);
        for (int t = 0; t < n; t++) {
            float am = 0;
            for (int i = 0; i < d; i++) am = fmaxf(am, fabsf(x[t * d + i]));
            float s = am / ((1 << (b - 1)) - 1);
            for (int i = 0; i < d; i++) assert_true(fabsf(x[t * d + i] - y[t * d + i]) <= 0.5f * s * 1.002f + 1e-6f);
        }
        kvq_kvcodec_free(c);
    }
    // kivi K and V: |x - x̂| <= scale/2 of the element's group (range/(2^b-1))
    for (int role = 0; role < 2; role++) {
        kvq_kvcodec *c = mk("kivi:3", d, role, 1);
        kvq_kvcodec_encode(c, x, n, buf, 1 << 20, off, NULL);
        kvq_kvcodec_decode(c, buf, off, n, y);
        for (int t = 0; t < n; t++)
            for (int i = 0; i < d; i++) {
                float mn = INFINITY, mx = -INFINITY;
                for (int j = 0; j < 32; j++) {
                    float v = role == 0 ? x[((t / 32) * 32 + j) * d + i] : x[t * d + (i / 32) * 32 + j];
                    mn = fminf(mn, v), mx = fmaxf(mx, v);
                }
                assert_true(fabsf(x[t * d + i] - y[t * d + i]) <= 0.5f * (mx - mn) / 7 * 1.003f + 2e-3f);
            }
        kvq_kvcodec_free(c);
    }
    // turboquant:b: mean ‖u-û‖² of unit keys equals the Lloyd-Max D (sampling: 10 %)
    for (int b = 1; b <= 4; b++) {
        char spec[20];
        snprintf(spec, sizeof spec, "turboquant:%d", b);
        kvq_kvcodec *c = mk(spec, d, 0, 3);
        float cb[16];
        double D = d * kvq_turbo_codebook(d, b, cb), e = 0;
        kvq_kvcodec_encode(c, x, n, buf, 1 << 20, off, NULL);
        kvq_kvcodec_decode(c, buf, off, n, y);
        for (int t = 0; t < n; t++) {
            double nn = 0, ee = 0;
            for (int i = 0; i < d; i++) nn += x[t * d + i] * x[t * d + i], ee += pow(x[t * d + i] - y[t * d + i], 2);
            e += ee / nn / n;
        }
        assert_true(fabs(e / D - 1) < 0.10);
        kvq_kvcodec_free(c);
    }
    // hqmq: each chunk's direction is the best joint codeword and its radius is within
    // half a quantization step of the truth
    {
        kvq_kvcodec *c = mk("hqmq:s24:r4", d, 0, 3);
        kvq_kvtable tb[8];
        assert_int_equal(c->vt->tables(c, tb), 1);
        const float *sec = tb[0].data; // (24, 4) secondary quaternions
        kvq_kvcodec_encode(c, x, n, buf, 1 << 20, off, NULL);
        kvq_kvcodec_decode(c, buf, off, n, y);
        for (int t = 0; t < n; t++) {
            float sig = 0;
            for (int k = 0; k < d / 4; k++) sig = fmaxf(sig, sqrtf(x[t*d+4*k]*x[t*d+4*k] + x[t*d+4*k+1]*x[t*d+4*k+1] + x[t*d+4*k+2]*x[t*d+4*k+2] + x[t*d+4*k+3]*x[t*d+4*k+3]));
            for (int k = 0; k < d / 4; k++) {
                const float *a = x + t * d + 4 * k, *h = y + t * d + 4 * k;
                float ra = sqrtf(a[0]*a[0]+a[1]*a[1]+a[2]*a[2]+a[3]*a[3]), rh = sqrtf(h[0]*h[0]+h[1]*h[1]+h[2]*h[2]+h[3]*h[3]);
                assert_true(fabsf(ra - rh) <= 0.5f * sig / 15 * 1.002f + 1e-5f);
                if (rh > 0) { // the decoded direction is the best of the 24·S joint codewords
                    float u[4] = {a[0] / ra, a[1] / ra, a[2] / ra, a[3] / ra}, best = -2;
                    for (int si = 0; si < 24; si++)
                        for (int p = 0; p < 24; p++) {
                            float hu[4], w[4];
                            kvq_hurwitz_unit(p, hu);
                            kvq_quat_mul(hu, sec + 4 * si, w);
                            best = fmaxf(best, u[0] * w[0] + u[1] * w[1] + u[2] * w[2] + u[3] * w[3]);
                        }
                    float dot = (u[0] * h[0] + u[1] * h[1] + u[2] * h[2] + u[3] * h[3]) / rh;
                    assert_true(dot >= best - 1e-5f);
                }
            }
        }
        kvq_kvcodec_free(c);
    }
    free(x), free(y), free(buf);
}

// OCTOPUS at d = 128 against Table 1 / Table 5 (MSE of the unit key): ours must not be
// worse than the published scalar-rounding figure by more than 5 % (sampling).
static void test_octopus_mse(void **st) {
    int d = 128, n = 512;
    const double pub[3] = {0.0897, 0.0260, 0.0071};
    float *x = malloc(sizeof(float) * n * d), *y = malloc(sizeof(float) * n * d);
    uint8_t *buf = malloc(1 << 20);
    size_t off[513];
    gauss(x, (size_t)n * d, 5);
    for (int b = 2; b <= 4; b++) {
        char spec[20];
        snprintf(spec, sizeof spec, "octopus:%d", b);
        kvq_kvcodec *c = mk(spec, d, 0, 9);
        kvq_kvcodec_encode(c, x, n, buf, 1 << 20, off, NULL);
        kvq_kvcodec_decode(c, buf, off, n, y);
        double e = 0;
        for (int t = 0; t < n; t++) {
            double nn = 0, ee = 0;
            for (int i = 0; i < d; i++) nn += x[t * d + i] * x[t * d + i], ee += pow(x[t * d + i] - y[t * d + i], 2);
            e += ee / nn / n;
        }
        printf("  octopus:%d unit-key MSE %.4f (published %.4f)\n", b, e, pub[b - 2]);
        assert_true(e < pub[b - 2] * 1.05);
        kvq_kvcodec_free(c);
    }
    free(x), free(y), free(buf);
}

static const char *all_specs[] = {"fp16", "int:4", "kivi:2", "hqmq:s96:r4", "hqmq:s48:r4:med3", "octopus:3",
                                  "octopus:2:qjl", "turboquant:3", "turboquant-prod:3", "qturbo:2",
                                  "hqkv:e8:3:rot=signs:dither", "hqkv:d4:4:rot=qjl", "hqkv:a2:2.5:rot=none",
                                  "hqkv:z:4:rot=signs:dither"};

// Stored tables are checked before use: for every codec and each of its tables, a copy with
// one value made NaN is refused, and so is a copy that breaks the table's meaning (a sign that
// is not ±1, a codebook out of order or out of range, a quaternion of norm 2), naming it.
static void test_stored_tables_checked(void **st) {
    const int d = 64;
    for (size_t i = 0; i < sizeof all_specs / sizeof *all_specs; i++)
        for (int r = 0; r < 2; r++) {
            kvq_kvcodec *a = mk(all_specs[i], d, r, 99);
            json_t *params;
            kvq_blob blobs[8];
            int nb = 0;
            kvq_err e = {0};
            assert_int_equal(kvq_kvcodec_save(a, &params, blobs, 8, &nb, &e), KVQ_OK);
            for (int k = 0; k < nb; k++) {
                float *t = blobs[k].data;
                const size_t n = blobs[k].size / sizeof(float);
                const char *role = blobs[k].role + 4; // "tbl/<name>"
                kvq_blob_view v[8];
                for (int j = 0; j < nb; j++) v[j] = (kvq_blob_view){blobs[j].role, blobs[j].data, blobs[j].size};
                for (int how = 0; how < 2; how++) {
                    float keep0 = t[0], keepn = t[n - 1];
                    if (how == 0) t[0] = NAN;
                    else if (!strcmp(role, "signs")) t[0] = 0.5f;
                    else if (!strncmp(role, "codebook", 8)) {
                        if (n < 2 || t[0] == t[n - 1]) continue;
                        t[0] = keepn, t[n - 1] = keep0; // out of order
                    } else if (!strcmp(role, "quaternion") || !strcmp(role, "secondary")) {
                        for (int q = 0; q < 4; q++) t[q] *= 2;
                    } else fail_msg("%s: table '%s' has no meaning check here", all_specs[i], role);
                    kvq_kvcodec *c = NULL;
                    kvq_status s = kvq_kvcodec_load(params, v, nb, &c, &e);
                    if (s != KVQ_ERR_FORMAT || !strstr(e.msg, role))
                        fail_msg("%s %s table '%s' (%s): load gave %d: %s", all_specs[i], r ? "V" : "K", role,
                                 how ? "meaning" : "NaN", s, e.msg);
                    assert_null(c);
                    if (how == 1 && (!strcmp(role, "quaternion") || !strcmp(role, "secondary")))
                        for (int q = 0; q < 4; q++) t[q] /= 2;
                    t[0] = keep0, t[n - 1] = keepn;
                }
            }
            // unchanged, the same tables load
            kvq_blob_view v[8];
            for (int j = 0; j < nb; j++) v[j] = (kvq_blob_view){blobs[j].role, blobs[j].data, blobs[j].size};
            kvq_kvcodec *c = NULL;
            assert_int_equal(kvq_kvcodec_load(params, v, nb, &c, &e), KVQ_OK);
            kvq_kvcodec_free(c);
            for (int k = 0; k < nb; k++) free(blobs[k].data);
            json_decref(params);
            kvq_kvcodec_free(a);
        }
}

// A state loaded from stored tables is not trained: a turboquant:8 codebook that differs from the
// trained one (here: uniform levels) is the one used, bit for bit, on encode and decode.
static void test_stored_codebook_used(void **st) {
    const int d = 128;
    kvq_kvcodec *a = mk("turboquant:8", d, KVQ_KV_K, 5);
    json_t *params;
    kvq_blob blobs[8];
    int nb = 0;
    kvq_err e = {0};
    assert_int_equal(kvq_kvcodec_save(a, &params, blobs, 8, &nb, &e), KVQ_OK);
    kvq_blob_view v[8];
    float *cb = NULL;
    for (int j = 0; j < nb; j++) {
        v[j] = (kvq_blob_view){blobs[j].role, blobs[j].data, blobs[j].size};
        if (!strcmp(blobs[j].role, "tbl/codebook")) cb = blobs[j].data;
    }
    assert_non_null(cb);
    for (int k = 0; k < 256; k++) cb[k] = -0.25f + 0.5f * (float)k / 255.0f;
    kvq_kvcodec *c = NULL;
    assert_int_equal(kvq_kvcodec_load(params, v, nb, &c, &e), KVQ_OK);
    kvq_kvtable t[8];
    int nt = c->vt->tables(c, t);
    int found = 0;
    for (int k = 0; k < nt; k++)
        if (!strcmp(t[k].name, "codebook")) assert_memory_equal(t[k].data, cb, 256 * sizeof(float)), found = 1;
    assert_true(found);
    float x[128], y[128];
    gauss(x, d, 3);
    uint8_t buf[512];
    size_t off[2];
    assert_int_equal(kvq_kvcodec_encode(c, x, 1, buf, sizeof buf, off, &e), KVQ_OK);
    kvq_kvcodec_decode(c, buf, off, 1, y);
    double err2 = 0, n2 = 0;
    for (int i = 0; i < d; i++) err2 += (x[i] - y[i]) * (x[i] - y[i]), n2 += x[i] * x[i];
    assert_true(sqrt(err2 / n2) < 0.2); // uniform 8-bit levels over [-0.25, 0.25] still code a unit vector
    for (int k = 0; k < nb; k++) free(blobs[k].data);
    json_decref(params);
    kvq_kvcodec_free(a), kvq_kvcodec_free(c);
}

// Same input and seed => same bytes; state save/load => same bytes and decode.
static void test_determinism_and_serialization(void **st) {
    int d = 64, n = 64;
    float *x = malloc(sizeof(float) * n * d), *y1 = malloc(sizeof(float) * n * d), *y2 = malloc(sizeof(float) * n * d);
    gauss(x, (size_t)n * d, 77);
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < sizeof all_specs / sizeof *all_specs; i++) {
            kvq_kvcodec *a = mk(all_specs[i], d, r, 1234), *b = mk(all_specs[i], d, r, 1234);
            size_t cap = kvq_kvcodec_bound(a, n), oa[65], ob[65];
            uint8_t *ba = malloc(cap), *bb = malloc(cap);
            assert_int_equal(kvq_kvcodec_encode(a, x, n, ba, cap, oa, NULL), KVQ_OK);
            assert_int_equal(kvq_kvcodec_encode(b, x, n, bb, cap, ob, NULL), KVQ_OK);
            assert_memory_equal(oa, ob, sizeof(size_t) * (n / a->group + 1));
            assert_memory_equal(ba, bb, oa[n / a->group]);
            json_t *params;
            kvq_blob blobs[8];
            int nb = 0;
            kvq_err e = {0};
            assert_int_equal(kvq_kvcodec_save(a, &params, blobs, 8, &nb, &e), KVQ_OK);
            char *js = json_dumps(params, JSON_COMPACT);
            json_t *p2 = json_loads(js, 0, NULL);
            kvq_blob_view v[8];
            for (int k = 0; k < nb; k++) v[k] = (kvq_blob_view){blobs[k].role, blobs[k].data, blobs[k].size};
            kvq_kvcodec *c = NULL;
            assert_int_equal(kvq_kvcodec_load(p2, v, nb, &c, &e), KVQ_OK);
            uint8_t *bc = malloc(cap);
            size_t oc[65];
            assert_int_equal(kvq_kvcodec_encode(c, x, n, bc, cap, oc, NULL), KVQ_OK);
            assert_memory_equal(ba, bc, oa[n / a->group]);
            kvq_kvcodec_decode(a, ba, oa, n, y1);
            kvq_kvcodec_decode(c, ba, oa, n, y2);
            assert_memory_equal(y1, y2, sizeof(float) * n * d);
            // a truncated table blob is refused
            if (nb > 0) {
                v[0].size -= 4;
                kvq_kvcodec *bad = NULL;
                assert_int_equal(kvq_kvcodec_load(p2, v, nb, &bad, &e), KVQ_ERR_FORMAT);
                assert_null(bad);
            }
            for (int k = 0; k < nb; k++) free(blobs[k].data);
            free(js), json_decref(params), json_decref(p2);
            free(ba), free(bb), free(bc);
            kvq_kvcodec_free(a), kvq_kvcodec_free(b), kvq_kvcodec_free(c);
        }
    free(x), free(y1), free(y2);
}

// score(q, k) equals <q, decode(k)> for codecs without a QJL term.
static void test_score_matches_decode(void **st) {
    const char *specs[] = {"octopus:3", "turboquant:2", "qturbo:3", "hqmq:s96:r4", "hqmq:s48:r4:med3"};
    int d = 128, n = 32;
    float *x = malloc(sizeof(float) * n * d), *y = malloc(sizeof(float) * n * d), q[128], s[32];
    gauss(x, (size_t)n * d, 1);
    gauss(q, d, 2);
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        kvq_kvcodec *c = mk(specs[i], d, 0, 5);
        size_t cap = kvq_kvcodec_bound(c, n), off[33];
        uint8_t *b = malloc(cap);
        kvq_kvcodec_encode(c, x, n, b, cap, off, NULL);
        kvq_kvcodec_decode(c, b, off, n, y);
        const uint8_t *rec[32];
        uint32_t len[32];
        for (int t = 0; t < n; t++) rec[t] = b + off[t], len[t] = (uint32_t)(off[t + 1] - off[t]);
        c->vt->score(c, q, 1, rec, len, n, s, n);
        for (int t = 0; t < n; t++) {
            float ref = 0;
            for (int j = 0; j < d; j++) ref += q[j] * y[t * d + j];
            assert_true(fabsf(s[t] - ref) < 1e-3f * (1 + fabsf(ref)));
        }
        free(b);
        kvq_kvcodec_free(c);
    }
    free(x), free(y);
}

// The QJL estimators are unbiased over the sketch randomness: for a fixed (q, k), the
// mean of score - <q, k> over 400 seeds lies within 4 standard errors of 0 (fails
// with probability ~6e-5 if unbiased; a bias of a few % of the stage-1 error fails).
static void test_qjl_unbiased(void **st) {
    const char *specs[] = {"turboquant-prod:2", "octopus:2:qjl"};
    int d = 128, S = 400;
    float k[128], q[128];
    gauss(k, d, 31);
    gauss(q, d, 32);
    double ip = 0;
    for (int j = 0; j < d; j++) ip += (double)q[j] * k[j];
    for (int i = 0; i < 2; i++) {
        double m = 0, m2 = 0, mse_only = 0;
        for (int sd = 0; sd < S; sd++) {
            kvq_kvcodec *c = mk(specs[i], d, 0, 1000 + sd);
            uint8_t b[512];
            size_t off[2];
            kvq_kvcodec_encode(c, k, 1, b, sizeof b, off, NULL);
            const uint8_t *rec[1] = {b};
            const uint32_t len[1] = {(uint32_t)off[1]};
            float s, y[128];
            c->vt->score(c, q, 1, rec, len, 1, &s, 1);
            kvq_kvcodec_decode(c, b, off, 1, y);
            double e = s - ip, e0 = -ip;
            for (int j = 0; j < d; j++) e0 += (double)q[j] * y[j];
            m += e / S, m2 += e * e / S, mse_only += fabs(e0) / S;
            kvq_kvcodec_free(c);
        }
        double se = sqrt((m2 - m * m) / (S - 1));
        printf("  %s: mean error %.4f ± %.4f (stage-1 mean |error| %.4f)\n", specs[i], m, se, mse_only);
        assert_true(fabs(m) < 4 * se);
    }
}

// score(q, k) == <q, score_vec(k)> for every codec with a score path (QJL included).
static void test_score_vec(void **st) {
    const char *specs[] = {"octopus:3", "octopus:2:qjl", "turboquant:2", "turboquant-prod:3", "qturbo:3"};
    int d = 128, n = 16;
    float *x = malloc(sizeof(float) * n * d), q[128], s[16], v[128];
    gauss(x, (size_t)n * d, 4);
    gauss(q, d, 6);
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        kvq_kvcodec *c = mk(specs[i], d, 0, 8);
        size_t cap = kvq_kvcodec_bound(c, n), off[17];
        uint8_t *b = malloc(cap);
        kvq_kvcodec_encode(c, x, n, b, cap, off, NULL);
        const uint8_t *rec[16];
        uint32_t len[16];
        for (int t = 0; t < n; t++) rec[t] = b + off[t], len[t] = (uint32_t)(off[t + 1] - off[t]);
        c->vt->score(c, q, 1, rec, len, n, s, n);
        for (int t = 0; t < n; t++) {
            c->vt->score_vec(c, rec[t], v);
            float ref = 0;
            for (int j = 0; j < d; j++) ref += q[j] * v[j];
            assert_true(fabsf(s[t] - ref) < 1e-3f * (1 + fabsf(ref)));
        }
        free(b);
        kvq_kvcodec_free(c);
    }
    free(x);
}

// HyperQuant-KV with dither: E_U[<q, x̂>] = <q, x> per vector. 3000 dither draws of
// one fixed (q, x); the mean error must lie within 4 standard errors of 0. Without
// dither the error is one deterministic value, so the same check fails (control).
static void test_hqkv_dither_unbiased(void **st) {
    const char *specs[] = {"hqkv:e8:2:rot=signs:dither", "hqkv:d4:3:rot=qjl:dither", "hqkv:a2:2:rot=none:dither",
                           "hqkv:z:3:rot=none:dither", "hqkv:e8:2:rot=signs"};
    int d = 64, N = 3000;
    float x[64], q[64], y[64];
    gauss(x, d, 41);
    gauss(q, d, 42);
    for (int i = 0; i < d; i++) x[i] += i < 4 ? 6.0f : 0.0f; // a few outlier channels
    double ip = 0;
    for (int j = 0; j < d; j++) ip += (double)q[j] * x[j];
    for (int i = 0; i < 5; i++) {
        kvq_kvcodec *c = mk(specs[i], d, 0, 77);
        double m = 0, m2 = 0;
        for (int t = 0; t < N; t++) {
            uint8_t b[1024];
            size_t off[2];
            assert_int_equal(kvq_kvcodec_encode(c, x, 1, b, sizeof b, off, NULL), KVQ_OK);
            kvq_kvcodec_decode(c, b, off, 1, y);
            double e = -ip;
            for (int j = 0; j < d; j++) e += (double)q[j] * y[j];
            m += e / N, m2 += e * e / N;
        }
        double se = sqrt(fmax(m2 - m * m, 0) / (N - 1));
        printf("  %s: mean <q,x̂>-<q,x> = %.5f ± %.5f (|<q,x>| = %.2f)\n", specs[i], m, se, fabs(ip));
        if (i < 4) assert_true(fabs(m) < 4 * se);
        else assert_false(fabs(m) < 4 * se); // deterministic quantizer: biased per vector
        kvq_kvcodec_free(c);
    }
}

// HyperQuant-KV hits its target rate: with the Haar rotation the coordinates are the
// Gaussian-like tiles the calibration table was measured on; Rice bits within 6 %,
// and the realized SNR equals the table's SNR for that rate.
static void test_hqkv_rate(void **st) {
    const char *specs[] = {"hqkv:e8:2:rot=qjl", "hqkv:e8:4:rot=qjl", "hqkv:d4:3:rot=qjl", "hqkv:z:3:rot=qjl:dither"};
    const double bps[] = {2, 4, 3, 3};
    const kvq_lattice lat[] = {KVQ_LAT_E8, KVQ_LAT_E8, KVQ_LAT_D4, KVQ_LAT_Z};
    const int dither[] = {0, 0, 0, 1};
    int d = 128, n = 256;
    float *x = malloc(sizeof(float) * n * d), *y = malloc(sizeof(float) * n * d);
    gauss(x, (size_t)n * d, 3);
    for (int i = 0; i < 4; i++) {
        kvq_kvcodec *c = mk(specs[i], d, 0, 5);
        size_t cap = kvq_kvcodec_bound(c, n), off[257];
        uint8_t *b = malloc(cap);
        assert_int_equal(kvq_kvcodec_encode(c, x, n, b, cap, off, NULL), KVQ_OK);
        kvq_kvcodec_decode(c, b, off, n, y);
        int hdr = 4 + (dither[i] ? 2 : 0);
        double code_bits = 8.0 * (off[n] - (size_t)n * hdr) / ((double)n * d), se = 0, sx = 0;
        for (int j = 0; j < n * d; j++) se += pow(x[j] - y[j], 2), sx += (double)x[j] * x[j];
        printf("  %s: code %.3f bits/elem (target %.1f + k fields + padding), SNR %.2f dB\n", specs[i], code_bits, bps[i],
               10 * log10(sx / se));
        assert_true(fabs(code_bits / (bps[i] + 5.0 * 2 / d + 4.0 / d) - 1) < 0.06);
        // reconstruction SNR is the one α was set for (32768 samples: ±0.5 dB is generous)
        assert_true(fabs(10 * log10(sx / se) - kvq_hqcal_snr_for_rate(lat[i], bps[i])) < 0.5);
        free(b);
        kvq_kvcodec_free(c);
    }
    free(x), free(y);
}

// ---- attention from the packed records (score, vsum) against decode-then-attend

// Every codec, every bit width, head dims 64 and 128 and odd ones where the codec takes them:
// score(q, k_t) from the codes against <q, decode(k_t)> (codecs without a QJL term), and
// vsum (several weight rows, one peaked, one with exact zeros, a stride longer than n) against
// Σ_t p_t decode(v_t) in double. Bounds (float rounding of the sums over codes; one wrong code,
// scale or zero moves a result by far more): |score − <q, k̂>| <= 1e-5·‖q‖·‖k̂‖ and
// |vsum − Σ p v̂| <= 1e-5·Σ_t p_t·max|v̂_t| per channel.
static void test_packed_attention(void **st) {
    const char *specs[] = {"int:2", "int:3", "int:4", "int:5", "int:8", "kivi:1", "kivi:2", "kivi:3", "kivi:4",
                           "kivi:6", "kivi:8", "octopus:1", "octopus:2", "octopus:3", "octopus:4", "octopus:8", "turboquant:1", "turboquant:2",
                           "turboquant:3", "turboquant:4", "turboquant:5", "turboquant-prod:3", "qturbo:2", "qturbo:4",
                           "hqmq:s24:r3", "hqmq:s96:r4", "hqmq:s48:r4:med3", "hqkv:e8:3:rot=signs:dither",
                           "hqkv:d4:2:rot=qjl", "hqkv:z:4:rot=none", "hqkv:a2:3:rot=signs"};
    const int dims[] = {64, 128, 37, 20, 8};
    enum { N = 96, NS = 77, NQ = 11, LDP = 101 };
    double worst_s = 0, worst_v = 0, worst_xs = 0, worst_xv = 0;
    int checked = 0, nx = 0;
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
            for (int role = 0; role < 2; role++) {
                const int d = dims[di];
                kvq_kvspec sp;
                assert_int_equal(kvq_kvspec_parse(specs[si], &sp, NULL), KVQ_OK);
                kvq_kvcodec *c = NULL;
                if (kvq_kvcodec_new(&sp, d, role, 77 + si, &c, NULL)) continue; // shape the codec refuses
                float *x = malloc(sizeof(float) * N * d), *y = malloc(sizeof(float) * N * d), q[128];
                gauss(x, (size_t)N * d, 100 + si * 7 + di);
                for (int i = 0; i < N * d; i++) x[i] = x[i] * 0.7f + 0.3f * (i % d == 3 ? 4.0f : 0.0f); // an outlier channel
                gauss(q, d, 200 + di);
                size_t cap = kvq_kvcodec_bound(c, N), off[N + 1];
                uint8_t *b = malloc(cap);
                assert_int_equal(kvq_kvcodec_encode(c, x, N, b, cap, off, NULL), KVQ_OK);
                kvq_kvcodec_decode(c, b, off, N, y);
                const uint8_t *rec[N];
                uint32_t len[N];
                for (int g = 0; g < N / c->group; g++) rec[g] = b + off[g], len[g] = (uint32_t)(off[g + 1] - off[g]);
                const int qjl = !strcmp(sp.name, "turboquant-prod"); // its score adds the QJL correction
                // the execution form (HQMQ without outliers, HyperQuant-KV): rows built once from the
                // records, read by xscore / xvsum, checked against the decoder by the same bounds
                const size_t xb = kvq_kvcodec_xbytes(c);
                uint8_t *xr = xb ? malloc(xb * NS) : NULL;
                for (int t = 0; xb && t < NS; t++) c->vt->xform(c, rec[t], len[t], xr + (size_t)t * xb);
                if (xb) nx++;
                for (int path = 0; path < 1 + (xb > 0); path++) {
                if (role == KVQ_KV_K && !qjl) {
                    assert_non_null(c->vt->score); // every codec but fp16 scores from its codes
                    float *s = malloc(sizeof(float) * NQ * LDP), *qs = malloc(sizeof(float) * NQ * d);
                    gauss(qs, (size_t)NQ * d, 300 + di);
                    memcpy(qs, q, sizeof(float) * d);
                    if (path) c->vt->xscore(c, qs, NQ, xr, NS, s, LDP);
                    else c->vt->score(c, qs, NQ, rec, len, NS, s, LDP); // all queries at once, rows LDP apart
                    for (int i = 0; i < NQ; i++) {
                        const float *qi = qs + (size_t)i * d;
                        double qn = 0;
                        for (int j = 0; j < d; j++) qn += (double)qi[j] * qi[j];
                        for (int t = 0; t < NS; t++) {
                            double ref = 0, kn = 0;
                            for (int j = 0; j < d; j++) ref += (double)qi[j] * y[t * d + j], kn += (double)y[t * d + j] * y[t * d + j];
                            // bound: 1e-5·‖q‖·‖k̂‖ (float sums over d ≤ 128 products of codes)
                            const float got = s[(size_t)i * LDP + t];
                            double e = fabs(got - ref) / (sqrt(qn * kn) + 1e-30);
                            if (e > 1e-5) fail_msg("%s d=%d %sscore q=%d t=%d: %g vs %g (rel %g)", specs[si], d, path ? "x" : "", i, t, got, ref, e);
                            if (e > worst_s) worst_s = e;
                            if (path && e > worst_xs) worst_xs = e;
                        }
                    }
                    free(s), free(qs);
                }
                if (role == KVQ_KV_V) {
                    assert_non_null(c->vt->vsum);
                    float *p = calloc((size_t)NQ * LDP, sizeof(float)), *out = malloc(sizeof(float) * NQ * d);
                    kvq_kvrng r = {5 + si};
                    for (int i = 0; i < NQ; i++) {
                        double z = 0;
                        for (int t = 0; t < NS; t++) {
                            float v = i == 0 ? (t == 13 ? 1.0f : 1e-4f)                    // peaked
                                    : i == 1 ? (t % 3 ? 0.0f : (float)kvq_kvrng_unif(&r)) // exact zeros
                                             : (float)exp(3 * kvq_kvrng_normal(&r));      // softmax-like
                            p[(size_t)i * LDP + t] = v, z += v;
                        }
                        for (int t = 0; t < NS; t++) p[(size_t)i * LDP + t] = (float)(p[(size_t)i * LDP + t] / z);
                        for (int t = NS; t < LDP; t++) p[(size_t)i * LDP + t] = 1e9f; // must not be read
                    }
                    if (path) c->vt->xvsum(c, p, LDP, NQ, xr, NS, out);
                    else c->vt->vsum(c, p, LDP, NQ, rec, len, NS, out);
                    for (int i = 0; i < NQ; i++) {
                        double mag = 0; // Σ_t p_t max_j |v̂_t,j|: the size of what is summed
                        for (int t = 0; t < NS; t++) {
                            double m = 0;
                            for (int j = 0; j < d; j++) m = fmax(m, fabs(y[t * d + j]));
                            mag += p[(size_t)i * LDP + t] * m;
                        }
                        for (int j = 0; j < d; j++) {
                            double ref = 0;
                            for (int t = 0; t < NS; t++) ref += (double)p[(size_t)i * LDP + t] * y[t * d + j];
                            // bound: 1e-5 of that size (the zero/scale factoring cancels terms of it)
                            double e = fabs(out[i * d + j] - ref) / (mag + 1e-30);
                            if (e > 1e-5) fail_msg("%s d=%d %svsum row %d ch %d: %g vs %g (rel %g)", specs[si], d, path ? "x" : "", i, j, out[i * d + j], ref, e);
                            if (e > worst_v) worst_v = e;
                            if (path && e > worst_xv) worst_xv = e;
                        }
                    }
                    free(p), free(out);
                }
                }
                checked++;
                free(x), free(y), free(b), free(xr);
                kvq_kvcodec_free(c);
            }
    printf("  %d codec states: worst score error %.2e·‖q‖‖k̂‖, worst value-sum error %.2e·Σp·max|v̂|; "
           "%d with an execution form, from it: %.2e, %.2e\n", checked, worst_s, worst_v, nx, worst_xs, worst_xv);
    assert_true(checked > 100);
    assert_true(nx >= 30); // hqmq s24:r3, s96:r4 and the four hqkv specs at every head dim they take, K and V
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_parse),
        cmocka_unit_test(test_lloydmax_beta),
        cmocka_unit_test(test_hurwitz_group),
        cmocka_unit_test(test_octahedral),
        cmocka_unit_test(test_hqmq_search),
        cmocka_unit_test(test_bits),
        cmocka_unit_test(test_roundtrip_bounds),
        cmocka_unit_test(test_octopus_mse),
        cmocka_unit_test(test_determinism_and_serialization),
        cmocka_unit_test(test_stored_tables_checked),
        cmocka_unit_test(test_stored_codebook_used),
        cmocka_unit_test(test_score_matches_decode),
        cmocka_unit_test(test_qjl_unbiased),
        cmocka_unit_test(test_score_vec),
        cmocka_unit_test(test_packed_attention),
        cmocka_unit_test(test_hqkv_dither_unbiased),
        cmocka_unit_test(test_hqkv_rate),
    };
    return cmocka_run_group_tests_name("kvcodec", tests, NULL, NULL);
}
