// The fast QET encoder (kvq_qet_encode: parallel swap tree, the fast k-means with its
// seeded first pass and AVX2 sums, word-wise packing) against its plain serial reference
// (kvq_qet_encode_ref) on seeded random matrices: the same blobs byte for byte, the same
// params and the same predicted MSE, at 1 and 2 threads, for several shapes and specs.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "libconv/codec/qet/qet.h"

static uint64_t rng_state;
static double urand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

// kind 0: N(0,1) rounded to bf16 (many ties after the swap tree); 1: N(0,1) in f32 with
// a few large outliers; 2: few distinct values (duplicate points, ties in every distance).
static float *randmat(int64_t n, int64_t d, uint64_t seed, int kind) {
    rng_state = seed;
    float *x = malloc(sizeof(float) * (size_t)(n * d));
    for (int64_t i = 0; i < n * d; i++) {
        double u = urand(), v = urand();
        float g = (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
        if (kind == 0) x[i] = kvq_bf16_to_f32(kvq_f32_to_bf16(g));
        else if (kind == 1) x[i] = urand() < 1e-3 ? 50.0f * g : g;
        else x[i] = (float)((int)(urand() * 4.0)) * 0.5f;
    }
    return x;
}

static void assert_same(const kvq_encoded *a, const kvq_encoded *b) {
    assert_int_equal(a->n_blob, b->n_blob);
    for (int i = 0; i < a->n_blob; i++) {
        assert_string_equal(a->blob[i].role, b->blob[i].role);
        assert_int_equal(a->blob[i].size, b->blob[i].size);
        assert_memory_equal(a->blob[i].data, b->blob[i].data, a->blob[i].size);
    }
    char *pa = json_dumps(a->params, JSON_COMPACT | JSON_SORT_KEYS), *pb = json_dumps(b->params, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(pa, pb);
    free(pa);
    free(pb);
    assert_true(a->predicted_mse == b->predicted_mse);
}

typedef struct {
    int64_t n, d;
    int kind;
    kvq_dtype src;
    const char *spec; // qet or pq spec after the codec name
    int pq;
} fast_case;

static void test_fast_vs_ref(void **state) {
    const fast_case cases[] = {
        {64, 64, 0, KVQ_DTYPE_BF16, "4", 0},
        {300, 96, 0, KVQ_DTYPE_BF16, "4", 0},      // rows not a power of 2
        {257, 128, 1, KVQ_DTYPE_F32, "4", 0},      // f32 source: 8 bits, larger k
        {200, 64, 2, KVQ_DTYPE_BF16, "3", 0},      // duplicates and ties
        {130, 48, 0, KVQ_DTYPE_BF16, "4:l=2,w=4", 0},
        {150, 64, 1, KVQ_DTYPE_BF16, "4:vanilla", 0},
        {120, 32, 0, KVQ_DTYPE_BF16, "1:k1=150,k2=3", 0}, // k capped at n: every row its own centroid
        {180, 64, 1, KVQ_DTYPE_BF16, "4", 1},      // pq: no swap tree, raw codebooks
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const fast_case *fc = &cases[c];
        kvq_qet_config cfg;
        kvq_err err;
        assert_int_equal(kvq_qet_parse(fc->spec, fc->pq, &cfg, &err), KVQ_OK);
        float *x = randmat(fc->n, fc->d, 1000 + c, fc->kind);
        kvq_encoded r, f;
        kvq_status st = kvq_qet_encode_ref(&cfg, fc->src, x, fc->n, fc->d, 7 + c, &r, &err);
        if (st) print_error("case %zu: %s\n", c, err.msg);
        assert_int_equal(st, KVQ_OK);
        for (int t = 1; t <= 2; t++) {
            assert_int_equal(kvq_qet_encode(&cfg, fc->src, x, fc->n, fc->d, 7 + c, t, &f, &err), KVQ_OK);
            assert_same(&r, &f);
            kvq_encoded_free(&f);
        }
        kvq_encoded_free(&r);
        free(x);
    }
}

// The reference refuses what the fast path refuses, with the same message.
static void test_ref_refuses_nonfinite(void **state) {
    int64_t n = 16, d = 16;
    float *x = randmat(n, d, 5, 0);
    x[3 * d + 5] = NAN;
    x[9 * d + 1] = INFINITY;
    kvq_qet_config cfg = kvq_qet_config_default(4);
    kvq_encoded e;
    kvq_err e1, e2;
    assert_int_equal(kvq_qet_encode_ref(&cfg, KVQ_DTYPE_BF16, x, n, d, 1, &e, &e1), KVQ_ERR_NUMERIC);
    assert_int_equal(kvq_qet_encode(&cfg, KVQ_DTYPE_BF16, x, n, d, 1, 2, &e, &e2), KVQ_ERR_NUMERIC);
    assert_string_equal(e1.msg, e2.msg);
    assert_non_null(strstr(e1.msg, "row 3, column 5")); // the first one
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_vs_ref),
        cmocka_unit_test(test_ref_refuses_nonfinite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
