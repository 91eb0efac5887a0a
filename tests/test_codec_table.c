// Table-driven tests over every row of both codec tables (ggml's test-quantize-fns), so a
// codec added later is tested without anyone remembering to:
//   weight codecs (libconv/codec/codec.h): the row's example parses, bad arguments are
//     refused, encode → decode stays within the row's bound (bit-exact when lossless), and the
//     rate parts sum to the stored bytes;
//   KV codecs (libconv/kv/kvcodec.h): the example parses and formats back to itself, bad
//     arguments are refused, K and V coders round-trip Gaussian tokens within the row's
//     bound, every group fits the coder's bound, and kvq_kvcodec_bits_stored equals the bytes
//     actually stored (plus the length fields of variable-length codecs).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "formats/kvqfile.h"
#include "libconv/codec/codec.h"
#include "libconv/kv/kvcodec.h"
#include "tests/testrng.h"

static double rel_err(const float *x, const float *y, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        den += (double)x[i] * x[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void test_weight_codecs(void **state) {
    (void)state;
    const int64_t rows = 64, cols = 256;
    float *x = malloc(sizeof(float) * rows * cols), *y = malloc(sizeof(float) * rows * cols);
    uint64_t s = 3;
    for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)(0.02 * gauss(&s));
    assert_true(kvq_codec_count() >= 5);
    // the manifest schema's list of codec names (formats/kvqschema.c) is the table's, both ways
    const char *schema_names[] = {"none", "rtn", "hyperquant", "qet", "pq"};
    int known = 0;
    for (size_t i = 0; i < sizeof schema_names / sizeof schema_names[0]; i++) {
        assert_true(kvq_file_codec_known(schema_names[i]));
        assert_non_null(kvq_codec_find(schema_names[i]));
    }
    for (int i = 0; i < kvq_codec_count(); i++) known += kvq_file_codec_known(kvq_codec_at(i)->name);
    assert_int_equal(known, kvq_codec_count());
    assert_int_equal(kvq_codec_count(), (int)(sizeof schema_names / sizeof schema_names[0]));
    assert_false(kvq_file_codec_known("bogus"));
    for (int i = 0; i < kvq_codec_count(); i++) {
        const kvq_codec_traits *c = kvq_codec_at(i);
        kvq_err err = {0};
        json_t *cfg = NULL;
        assert_non_null(c->example_args);
        if (c->parse(c->example_args, &cfg, &err)) fail_msg("%s: example '%s' refused: %s", c->name, c->example_args, err.msg);
        json_t *bad = NULL;
        assert_int_not_equal(c->parse("zz:-1:??", &bad, &err), KVQ_OK);
        assert_null(bad);
        kvq_tensor src = {"table.weight", KVQ_DTYPE_F32, 2, {rows, cols}, x, sizeof(float) * (size_t)(rows * cols)};
        kvq_codec_input in = {&src, x, rows, cols, 11, 1, NULL};
        kvq_encoded e;
        memset(&e, 0, sizeof e); // as the converter hands it over
        if (c->encode(cfg, &in, &e, &err)) fail_msg("%s: encode: %s", c->name, err.msg);
        kvq_blob_view v[KVQ_MAX_BLOBS];
        for (int k = 0; k < e.n_blob; k++) v[k] = (kvq_blob_view){e.blob[k].role, e.blob[k].data, e.blob[k].size};
        memset(y, 0xff, sizeof(float) * rows * cols);
        if (c->decode(e.params, v, e.n_blob, rows, cols, y, &err)) fail_msg("%s: decode: %s", c->name, err.msg);
        double re = rel_err(x, y, (size_t)(rows * cols));
        print_message("weight codec %-10s %-8s rel. error %.4f (bound %.4f), %.3f bits/w\n", c->name, c->example_args, re,
                      c->max_rel_err, 8.0 * kvq_encoded_bytes(&e) / (double)(rows * cols));
        if (c->lossless) assert_memory_equal(x, y, sizeof(float) * rows * cols);
        else assert_true(re <= c->max_rel_err);
        // check(): the sizes alone (data NULL, as kvq_codec_check_file passes all but check_data) are accepted;
        // each blob one byte longer, or the params without each of their keys, or another shape,
        // is refused where decode would refuse it
        assert_non_null(c->check);
        kvq_blob_view sz[KVQ_MAX_BLOBS];
        for (int k = 0; k < e.n_blob; k++) sz[k] = (kvq_blob_view){e.blob[k].role, NULL, e.blob[k].size};
        if (c->check(e.params, sz, e.n_blob, rows, cols, &err)) fail_msg("%s: check: %s", c->name, err.msg);
        for (int k = 0; k < e.n_blob; k++) {
            sz[k].size++;
            // (HyperQuant's Rice codes have no length of their own: the last group offset, read at
            // decode, must equal it)
            if (!c->check(e.params, sz, e.n_blob, rows, cols, &err) && strcmp(e.blob[k].role, "codes"))
                fail_msg("%s: check accepts blob '%s' one byte longer", c->name, e.blob[k].role);
            sz[k].size--;
        }
        // check_data: with that blob's bytes (as kvq_codec_check_file reads them) check accepts the
        // encoder's blob and refuses it with one entry changed (HyperQuant: a group offset past the
        // codes, which only decode saw before)
        for (int k = 0; k < e.n_blob; k++) {
            if (!c->check_data || strcmp(e.blob[k].role, c->check_data)) continue;
            uint8_t *d = malloc(e.blob[k].size);
            memcpy(d, e.blob[k].data, e.blob[k].size);
            sz[k].data = d;
            if (c->check(e.params, sz, e.n_blob, rows, cols, &err)) fail_msg("%s: check with '%s': %s", c->name, c->check_data, err.msg);
            assert_true(e.blob[k].size >= 8);
            memset(d + 4, 0xff, 4); // offsets: group 1 starting past the codes
            assert_int_not_equal(c->check(e.params, sz, e.n_blob, rows, cols, &err), KVQ_OK);
            sz[k].data = NULL;
            free(d);
        }
        float *y2 = malloc(sizeof(float) * (size_t)(rows + 1) * cols);
        assert_int_not_equal(c->decode(e.params, v, e.n_blob, rows + 1, cols, y2, &err), KVQ_OK);
        free(y2);
        const char *key;
        json_t *val;
        float *y3 = malloc(sizeof(float) * (size_t)rows * cols);
        json_object_foreach(e.params, key, val) { // check and decode agree on every key's need
            json_t *p2 = json_deep_copy(e.params);
            json_object_del(p2, key);
            kvq_status cs = c->check(p2, sz, e.n_blob, rows, cols, &err),
                       ds = c->decode(p2, v, e.n_blob, rows, cols, y3, &err);
            if (cs != ds) fail_msg("%s: without '%s', check gives %d and decode %d", c->name, key, cs, ds);
            if (!ds) assert_memory_equal(y, y3, sizeof(float) * (size_t)rows * cols); // an informational key
            json_decref(p2);
        }
        free(y3);
        assert_int_not_equal(c->check(e.params, sz, e.n_blob, rows + 1, cols, &err), KVQ_OK);
        double parts = 0;
        for (int k = 0; k < e.n_part; k++) parts += e.part[k].bits;
        if (e.n_part) assert_true(fabs(parts - 8.0 * (double)kvq_encoded_bytes(&e)) < 1e-6);
        kvq_encoded_free(&e);
        json_decref(cfg);
    }
    free(x);
    free(y);
}

static void test_kv_codecs(void **state) {
    (void)state;
    const int d = 128, n = 64; // 64 tokens: whole groups for every codec (KIVI keys: 32)
    float *x = malloc(sizeof(float) * n * d), *y = malloc(sizeof(float) * n * d);
    uint64_t s = 5;
    for (int i = 0; i < n * d; i++) x[i] = (float)gauss(&s);
    assert_true(kvq_kvcodec_count() >= 9);
    for (int i = 0; i < kvq_kvcodec_count(); i++) {
        const kvq_kvcodec_traits *t = kvq_kvcodec_at(i);
        kvq_err err = {0};
        kvq_kvspec sp, sp2;
        if (kvq_kvspec_parse(t->example, &sp, &err)) fail_msg("%s: example '%s' refused: %s", t->name, t->example, err.msg);
        char fmt[128];
        kvq_kvspec_format(&sp, fmt, sizeof fmt);
        assert_int_equal(kvq_kvspec_parse(fmt, &sp2, &err), KVQ_OK);
        char fmt2[128];
        kvq_kvspec_format(&sp2, fmt2, sizeof fmt2);
        assert_string_equal(fmt, fmt2);
        // the row's private options survive the round trip byte for byte (specs compare by bytes)
        assert_memory_equal(&sp, &sp2, sizeof sp);
        char bad[64];
        snprintf(bad, sizeof bad, "%s:zz:!", t->name);
        assert_int_equal(kvq_kvspec_parse(bad, &sp2, &err), KVQ_ERR_ARG);
        assert_non_null(strstr(err.msg, bad));
        for (int role = 0; role < 2; role++) {
            kvq_kvcodec *c = NULL;
            if (kvq_kvcodec_new(&sp, d, role, 77, &c, &err)) fail_msg("%s: %s", t->example, err.msg);
            size_t cap = kvq_kvcodec_bound(c, n), off[65];
            uint8_t *buf = malloc(cap);
            if (kvq_kvcodec_encode(c, x, n, buf, cap, off, &err)) fail_msg("%s: encode: %s", t->example, err.msg);
            int ng = n / c->group;
            for (int g = 0; g < ng; g++) assert_true(off[g + 1] - off[g] <= c->vt->max_bytes(c)); // bound respected
            memset(y, 0xff, sizeof(float) * n * d);
            kvq_kvcodec_decode(c, buf, off, n, y);
            double re = rel_err(x, y, (size_t)n * d);
            double want = (8.0 * (double)(off[ng] - off[0]) + (c->fixed ? 0.0 : (double)ng * KVQ_KV_LEN_BITS)) / ((double)n * d);
            double got = kvq_kvcodec_bits_stored(c, off, n);
            print_message("kv codec %-18s %s rel. error %.4f (bound %.4f), %.3f bits/element stored\n", t->example,
                          role ? "V" : "K", re, t->max_rel_err, got);
            assert_true(re <= t->max_rel_err);
            assert_true(fabs(got - want) < 1e-9);
            free(buf);
            kvq_kvcodec_free(c);
        }
    }
    free(x);
    free(y);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_weight_codecs), cmocka_unit_test(test_kv_codecs)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
