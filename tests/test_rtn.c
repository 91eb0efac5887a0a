// Tests for the RTN baseline codec (rtn:<bits>:g<group>): decode equals an independent
// evaluation of the documented formula, the error stays within half a step (plus fp16
// rounding of scale/zero), exact effective-bit accounting, partial last groups, bad specs.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "libconv/codec/codec.h"

static double urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) * 0x1.0p-53;
}

static void check(int bits, int group, int64_t rows, int64_t cols) {
    char spec[64];
    snprintf(spec, sizeof spec, "rtn:%d:g%d", bits, group);
    const kvq_codec_traits *c;
    json_t *cfg;
    kvq_err err;
    assert_int_equal(kvq_codec_parse_spec(spec, &c, &cfg, &err), KVQ_OK);
    int64_t n = rows * cols;
    float *x = malloc(sizeof(float) * n), *d = malloc(sizeof(float) * n);
    uint64_t s = (uint64_t)bits * 1000 + (uint64_t)group;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((urand(&s) - 0.3) * (1 + (i / cols) % 5));
    kvq_codec_input in = {NULL, x, rows, cols, 0, 0, NULL};
    kvq_encoded e;
    assert_int_equal(c->encode(cfg, &in, &e, &err), KVQ_OK);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int b = 0; b < e.n_blob; b++) v[b] = (kvq_blob_view){e.blob[b].role, e.blob[b].data, e.blob[b].size};
    assert_int_equal(c->decode(e.params, v, e.n_blob, rows, cols, d, &err), KVQ_OK);
    int64_t gpr = (cols + group - 1) / group;
    int qmax = (1 << bits) - 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < gpr; j++) {
            int64_t a = j * group, len = a + group <= cols ? group : cols - a;
            float mn = x[r * cols + a], mx = mn;
            for (int64_t i = 0; i < len; i++) { mn = fminf(mn, x[r * cols + a + i]); mx = fmaxf(mx, x[r * cols + a + i]); }
            float sc = kvq_f16_to_f32(kvq_f32_to_f16((mx - mn) / (float)qmax)), z = kvq_f16_to_f32(kvq_f32_to_f16(mn));
            for (int64_t i = 0; i < len; i++) {
                float xi = x[r * cols + a + i];
                float q = fminf(fmaxf(rintf((xi - z) / sc), 0.0f), (float)qmax);
                assert_true(d[r * cols + a + i] == q * sc + z); // the documented formula, bit for bit
                double tol = 0.5 * sc + fabs(mn - z) + qmax * fabs((mx - mn) / qmax - sc) + 1e-6;
                assert_true(fabs(xi - d[r * cols + a + i]) <= tol);
            }
        }
    // effective bits = bits + 32 / group (+ JSON) exactly as stored
    double want = (8.0 * (double)((n * bits + 7) / 8) + 32.0 * rows * gpr) / n;
    double got = kvq_encoded_bpw(&e, n);
    assert_true(got >= want && got < want + 8.0 * 64 / n);
    kvq_encoded_free(&e);
    json_decref(cfg);
    free(x);
    free(d);
}

static void test_rtn_roundtrip(void **st) {
    check(4, 128, 16, 512);
    check(3, 64, 7, 300); // partial last group
    check(2, 32, 5, 96);
    check(8, 128, 3, 128);
    check(1, 16, 4, 33);
    check(5, 128, 2, 1000);
}

static void test_rtn_snr(void **st) {
    // 4-bit g128 on Gaussian data: about 20 dB (uniform step over ~±2.6σ)
    const int64_t rows = 64, cols = 1024, n = rows * cols;
    float *x = malloc(sizeof(float) * n), *d = malloc(sizeof(float) * n);
    uint64_t s = 3;
    for (int64_t i = 0; i < n; i++) {
        double u1 = urand(&s) + 1e-12, u2 = urand(&s);
        x[i] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
    const kvq_codec_traits *c;
    json_t *cfg;
    kvq_err err;
    assert_int_equal(kvq_codec_parse_spec("rtn:4:g128", &c, &cfg, &err), KVQ_OK);
    kvq_codec_input in = {NULL, x, rows, cols, 0, 0, NULL};
    kvq_encoded e;
    assert_int_equal(c->encode(cfg, &in, &e, &err), KVQ_OK);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int b = 0; b < e.n_blob; b++) v[b] = (kvq_blob_view){e.blob[b].role, e.blob[b].data, e.blob[b].size};
    assert_int_equal(c->decode(e.params, v, e.n_blob, rows, cols, d, &err), KVQ_OK);
    double sx = 0, se = 0;
    for (int64_t i = 0; i < n; i++) { sx += x[i] * x[i]; se += (x[i] - d[i]) * (x[i] - d[i]); }
    double snr = 10 * log10(sx / se);
    assert_true(snr > 19.0 && snr < 22.0);
    assert_true(fabs(e.predicted_mse - se / n) < 1e-6 * (se / n) + 1e-12);
    kvq_encoded_free(&e);
    json_decref(cfg);
    free(x);
    free(d);
}

static void test_rtn_bad(void **st) {
    const kvq_codec_traits *c;
    json_t *cfg;
    kvq_err err;
    const char *bad[] = {"rtn", "rtn:0:g128", "rtn:9:g128", "rtn:4:g0", "rtn:4:128", "rtn:4:g128x"};
    for (int i = 0; i < 6; i++) assert_int_equal(kvq_codec_parse_spec(bad[i], &c, &cfg, &err), KVQ_ERR_ARG);
    assert_int_equal(kvq_codec_parse_spec("rtn:4", &c, &cfg, &err), KVQ_OK); // group defaults to 128
    assert_int_equal(json_integer_value(json_object_get(cfg, "group")), 128);
    json_decref(cfg);
    // wrong blob size is refused
    json_t *p = json_pack("{s:i,s:i,s:i}", "v", 1, "bits", 4, "group", 128);
    uint8_t codes[10] = {0}, sc[4] = {0};
    kvq_blob_view v[2] = {{"codes", codes, 10}, {"scales", sc, 4}};
    float out[128];
    assert_int_equal(kvq_codec_find("rtn")->decode(p, v, 2, 1, 128, out, &err), KVQ_ERR_FORMAT);
    json_decref(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rtn_roundtrip),
        cmocka_unit_test(test_rtn_snr),
        cmocka_unit_test(test_rtn_bad),
    };
    return cmocka_run_group_tests_name("rtn", tests, NULL, NULL);
}
