// Tests for the QET / PQ codec (libconv/codec/qet/qet.c, qet_swap.c, kmeans.c, codec_qet.c):
// lossless swap trees, the paper's hand-made example, exact predicted MSE, the budget
// never exceeded, determinism across seeds and thread counts, clear errors on bad shapes
// and specs. k-means has its own suite (test_kmeans.c).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <omp.h>

#include "libconv/codec/qet/qet.h"

static uint64_t rng_state = 12345;
static double urand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}
static double nrand(void) {
    double u = urand(), v = urand();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}
static float *randmat(int64_t n, int64_t d, uint64_t seed) {
    rng_state = seed;
    float *x = malloc(sizeof(float) * (size_t)(n * d));
    for (int64_t i = 0; i < n * d; i++) x[i] = (float)nrand();
    return x;
}

static void views(const kvq_encoded *e, kvq_blob_view *v) {
    for (int i = 0; i < e->n_blob; i++) v[i] = (kvq_blob_view){e->blob[i].role, e->blob[i].data, e->blob[i].size};
}

static double mse(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return s / (double)n;
}

// ---- swap tree

static void test_swap_roundtrip_and_ref(void **state) {
    int64_t n = 37, d = 64;
    float *x = randmat(n, d, 1);
    x[5] = x[4]; // a tie
    for (int l = 0; l <= 6; l++) {
        float *xs = malloc(sizeof(float) * n * d), *xr = malloc(sizeof(float) * n * d), *back = malloc(sizeof(float) * n * d);
        uint8_t *b = calloc(n * l * d / 2 + 1, 1), *br = calloc(n * l * d / 2 + 1, 1);
        assert_int_equal(kvq_qet_swap_forward(x, n, d, l, xs, b), 0);
        assert_int_equal(kvq_qet_swap_forward_ref(x, n, d, l, xr, br), 0);
        assert_memory_equal(xs, xr, sizeof(float) * n * d);
        assert_memory_equal(b, br, n * l * d / 2 + 1);
        assert_int_equal(kvq_qet_swap_inverse(xs, b, n, d, l, back), 0);
        assert_memory_equal(back, x, sizeof(float) * n * d);
        if (l >= 1) // level 1: left half of every row is the pairwise min, right half the max
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < d / 2 && l == 1; j++) {
                    float u = x[i * d + 2 * j], v = x[i * d + 2 * j + 1];
                    assert_true(xs[i * d + j] == fminf(u, v) && xs[i * d + d / 2 + j] == fmaxf(u, v));
                }
        free(xs); free(xr); free(back); free(b); free(br);
    }
    free(x);
}

// Paper, section 1: [[1,2],[2,1]] needs two vectors; reordered to [[1,2],[1,2]] one suffices.
static void test_paper_example(void **state) {
    float x[4] = {1, 2, 2, 1}, xs[4];
    uint8_t b[2];
    kvq_qet_swap_forward(x, 2, 2, 1, xs, b);
    float want[4] = {1, 2, 1, 2};
    assert_memory_equal(xs, want, sizeof want);
    assert_int_equal(b[0], 0);
    assert_int_equal(b[1], 1);

    kvq_qet_config q = kvq_qet_config_vanilla(0); // no budget: one centroid, 2-wide subspace
    q.levels = 1; q.width = 2; q.k_fixed[0] = 1;
    kvq_qet_config p = q;
    p.levels = 0;
    kvq_encoded eq, ep;
    kvq_err err;
    assert_int_equal(kvq_qet_encode(&q, KVQ_DTYPE_F32, x, 2, 2, 7, 0, &eq, &err), KVQ_OK);
    assert_int_equal(kvq_qet_encode(&p, KVQ_DTYPE_F32, x, 2, 2, 7, 0, &ep, &err), KVQ_OK);
    assert_true(eq.predicted_mse == 0.0);
    assert_true(fabs(ep.predicted_mse - 0.25) < 1e-12); // centroid (1.5, 1.5)
    kvq_blob_view v[KVQ_MAX_BLOBS];
    float out[4];
    views(&eq, v);
    assert_int_equal(kvq_qet_decode(eq.params, v, eq.n_blob, 2, 2, out, &err), KVQ_OK);
    assert_memory_equal(out, x, sizeof x);
    kvq_encoded_free(&eq);
    kvq_encoded_free(&ep);
}

// Theorem 2's ingredient: max of two iid N(0,1) has variance 1 - 1/pi = 0.6817.
static void test_larger_half_variance(void **state) {
    int64_t n = 4096, d = 128;
    float *x = randmat(n, d, 3), *xs = malloc(sizeof(float) * n * d);
    uint8_t *b = malloc(n * d / 2);
    kvq_qet_swap_forward(x, n, d, 1, xs, b);
    double s = 0, s2 = 0, cnt = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = d / 2; j < d; j++) { s += xs[i * d + j]; s2 += (double)xs[i * d + j] * xs[i * d + j]; cnt++; }
    double mean = s / cnt, var = s2 / cnt - mean * mean;
    assert_true(fabs(mean - 0.5642) < 0.01); // 1/sqrt(pi)
    assert_true(fabs(var - (1 - 1 / M_PI)) < 0.01);
    free(x); free(xs); free(b);
}

// ---- codec round trips

static void roundtrip(const kvq_qet_config *c, kvq_dtype src, int64_t n, int64_t d, uint64_t seed) {
    float *x = randmat(n, d, seed), *out = malloc(sizeof(float) * n * d);
    if (src != KVQ_DTYPE_F32) { // make the input representable in the source dtype
        uint16_t *h = malloc(2 * n * d);
        kvq_dtype_from_f32(src, x, n * d, h);
        kvq_dtype_to_f32(src, h, n * d, x);
        free(h);
    }
    kvq_encoded e;
    kvq_err err;
    kvq_status s = kvq_qet_encode(c, src, x, n, d, seed, 0, &e, &err);
    if (s) fail_msg("%s", err.msg);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    views(&e, v);
    assert_int_equal(kvq_qet_decode(e.params, v, e.n_blob, n, d, out, &err), KVQ_OK);
    double m = mse(x, out, n * d);
    assert_true(fabs(m - e.predicted_mse) <= 1e-9 * e.predicted_mse + 1e-15);
    assert_true(m > 0 && m < 1.0); // lossy but far better than nothing on N(0,1)
    double a = 8.0 * kvq_dtype_size(src), target = floor((double)(n * d) * a / c->ratio);
    assert_true(8.0 * kvq_encoded_bytes(&e) <= target);
    double parts = 0;
    for (int i = 0; i < e.n_part; i++) parts += e.part[i].bits;
    assert_true(parts == 8.0 * kvq_encoded_bytes(&e)); // the breakdown covers every byte
    kvq_encoded_free(&e);
    free(x); free(out);
}

static void test_roundtrip_predicted_mse(void **state) {
    kvq_qet_config c = kvq_qet_config_default(4);
    roundtrip(&c, KVQ_DTYPE_F32, 256, 64, 11);
    roundtrip(&c, KVQ_DTYPE_BF16, 512, 128, 12);
    c = kvq_qet_config_vanilla(4);
    roundtrip(&c, KVQ_DTYPE_F32, 256, 64, 13);
    roundtrip(&c, KVQ_DTYPE_BF16, 256, 64, 14);
    c = kvq_qet_config_pq(8);
    roundtrip(&c, KVQ_DTYPE_F16, 300, 96, 15);
    c = kvq_qet_config_default(3);
    c.levels = 1; c.width = 4;
    roundtrip(&c, KVQ_DTYPE_F32, 200, 32, 16);
}

// QET's point: on N(0,1) rows at the same budget, swap trees + RQO + CQO beat plain PQ.
static void test_qet_beats_pq(void **state) {
    int64_t n = 1024, d = 64;
    float *x = randmat(n, d, 21);
    kvq_err err;
    kvq_encoded a, b;
    kvq_qet_config q = kvq_qet_config_default(4), p = kvq_qet_config_pq(4);
    assert_int_equal(kvq_qet_encode(&q, KVQ_DTYPE_F32, x, n, d, 1, 0, &a, &err), KVQ_OK);
    assert_int_equal(kvq_qet_encode(&p, KVQ_DTYPE_F32, x, n, d, 1, 0, &b, &err), KVQ_OK);
    assert_true(a.predicted_mse < b.predicted_mse);
    kvq_encoded_free(&a); kvq_encoded_free(&b);
    free(x);
}

// ---- budget

static void test_budget_never_exceeds(void **state) {
    const int64_t shapes[][2] = {{64, 64}, {128, 512}, {512, 128}, {1408, 512}, {100, 48}, {4096, 4096}, {7, 16}, {1024, 128}};
    const double ratios[] = {1.5, 2, 3, 4, 5.33, 6, 8, 10, 12, 16, 20};
    const kvq_dtype dts[] = {KVQ_DTYPE_F32, KVQ_DTYPE_BF16};
    int solved = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ri = 0; ri < sizeof ratios / sizeof ratios[0]; ri++)
            for (int di = 0; di < 2; di++)
                for (int mode = 0; mode < 3; mode++) {
                    kvq_qet_config c = mode == 0 ? kvq_qet_config_default(ratios[ri])
                                     : mode == 1 ? kvq_qet_config_vanilla(ratios[ri]) : kvq_qet_config_pq(ratios[ri]);
                    kvq_qet_plan p;
                    kvq_err err;
                    int64_t n = shapes[si][0], d = shapes[si][1];
                    if (kvq_qet_solve(&c, dts[di], n, d, 120, &p, &err) != KVQ_OK) {
                        assert_non_null(strstr(err.msg, "ratio")); // only a too-high ratio may fail
                        continue;
                    }
                    solved++;
                    assert_true(p.total_bits <= p.target_bits);
                    uint64_t sum = p.indicator_bits + p.header_bits;
                    for (int s = 0; s < p.stages; s++) sum += p.index_bits[s] + p.codebook_bits[s];
                    assert_true(sum == p.total_bits);
                    assert_true(p.k[0] >= 1 && p.k[0] <= n);
                    // maximality: one more centroid in the last stage would not fit (unless k = n)
                    int s = p.stages - 1;
                    if (p.k[s] < n) {
                        kvq_qet_config c2 = c;
                        for (int t = 0; t < p.stages; t++) c2.k_fixed[t] = p.k[t];
                        c2.k_fixed[s] = p.k[s] + 1;
                        c2.stages = p.stages;
                        kvq_qet_plan p2;
                        assert_int_not_equal(kvq_qet_solve(&c2, dts[di], n, d, 120, &p2, &err), KVQ_OK);
                    }
                }
    assert_true(solved > 200);
    // full encodes: the stored bytes (incl. params JSON) stay under the target
    const double few[] = {2, 3.2, 4, 7, 12};
    for (int i = 0; i < 5; i++) {
        kvq_qet_config c = kvq_qet_config_default(few[i]);
        roundtrip(&c, KVQ_DTYPE_F32, 128, 32, 30 + i);
    }
}

// ---- determinism

static void test_determinism(void **state) {
    int64_t n = 512, d = 64;
    float *x = randmat(n, d, 41);
    kvq_qet_config c = kvq_qet_config_default(4);
    kvq_encoded e[3];
    kvq_err err;
    assert_int_equal(kvq_qet_encode(&c, KVQ_DTYPE_F32, x, n, d, 99, 1, &e[0], &err), KVQ_OK);
    assert_int_equal(kvq_qet_encode(&c, KVQ_DTYPE_F32, x, n, d, 99, 2, &e[1], &err), KVQ_OK);
    assert_int_equal(kvq_qet_encode(&c, KVQ_DTYPE_F32, x, n, d, 100, 2, &e[2], &err), KVQ_OK);
    assert_int_equal(e[0].n_blob, e[1].n_blob);
    int differs = 0;
    for (int i = 0; i < e[0].n_blob; i++) {
        assert_int_equal(e[0].blob[i].size, e[1].blob[i].size);
        assert_memory_equal(e[0].blob[i].data, e[1].blob[i].data, e[0].blob[i].size);
        if (e[0].blob[i].size != e[2].blob[i].size || memcmp(e[0].blob[i].data, e[2].blob[i].data, e[0].blob[i].size)) differs = 1;
    }
    assert_true(differs); // the seed matters
    for (int i = 0; i < 3; i++) kvq_encoded_free(&e[i]);
    free(x);
}

// ---- bad input

static void test_bad_shapes_and_specs(void **state) {
    kvq_err err;
    kvq_encoded e;
    float *x = randmat(64, 60, 60);
    kvq_qet_config c = kvq_qet_config_default(4);
    assert_int_equal(kvq_qet_encode(&c, KVQ_DTYPE_F32, x, 64, 60, 1, 0, &e, &err), KVQ_ERR_ARG); // 60 % 8
    assert_non_null(strstr(err.msg, "multiple of 2^l"));
    c.levels = 2;
    assert_int_equal(kvq_qet_encode(&c, KVQ_DTYPE_F32, x, 64, 60, 1, 0, &e, &err), KVQ_ERR_ARG); // 60 % w
    assert_non_null(strstr(err.msg, "subspace width"));
    c = kvq_qet_config_default(16); // bf16 at ratio 16 = 1 bit/weight < 1.5 bits of indicator maps
    assert_int_equal(kvq_qet_encode(&c, KVQ_DTYPE_BF16, x, 64, 56, 1, 0, &e, &err), KVQ_ERR_ARG);
    assert_non_null(strstr(err.msg, "indicator maps"));
    x[7] = NAN;
    c = kvq_qet_config_default(4);
    assert_int_equal(kvq_qet_encode(&c, KVQ_DTYPE_F32, x, 64, 56, 1, 0, &e, &err), KVQ_ERR_NUMERIC);
    free(x);
    // fewer rows than clusters: k is capped at n (one centroid per row) — exact with raw codebooks
    x = randmat(5, 16, 61);
    kvq_qet_config v = kvq_qet_config_vanilla(0);
    v.k_fixed[0] = 50;
    assert_int_equal(kvq_qet_encode(&v, KVQ_DTYPE_F32, x, 5, 16, 1, 0, &e, &err), KVQ_OK);
    assert_true(e.predicted_mse == 0.0);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(e.params, "k"), 0)), 5);
    // a decoder given the wrong shape or a truncated blob refuses it
    kvq_blob_view bv[KVQ_MAX_BLOBS];
    views(&e, bv);
    float out[5 * 16 * 2];
    assert_int_not_equal(kvq_qet_decode(e.params, bv, e.n_blob, 6, 16, out, &err), KVQ_OK);
    bv[1].size--;
    assert_int_equal(kvq_qet_decode(e.params, bv, e.n_blob, 5, 16, out, &err), KVQ_ERR_FORMAT);
    kvq_encoded_free(&e);
    free(x);

    // an index past k (k = 5 uses 3 bits; 7 is not a centroid) is refused, not clamped
    x = randmat(40, 16, 62);
    v = kvq_qet_config_vanilla(0);
    v.k_fixed[0] = 5;
    assert_int_equal(kvq_qet_encode(&v, KVQ_DTYPE_F32, x, 40, 16, 1, 0, &e, &err), KVQ_OK);
    for (int i = 0; i < e.n_blob; i++)
        if (!strcmp(e.blob[i].role, "idx.1")) memset(e.blob[i].data, 0xff, e.blob[i].size);
    views(&e, bv);
    float *o2 = malloc(sizeof(float) * 40 * 16);
    assert_int_equal(kvq_qet_decode(e.params, bv, e.n_blob, 40, 16, o2, &err), KVQ_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "out of range"));
    free(o2);
    kvq_encoded_free(&e);
    free(x);

    kvq_qet_config p;
    assert_int_equal(kvq_qet_parse("", 0, &p, &err), KVQ_ERR_ARG);
    assert_int_equal(kvq_qet_parse("abc", 0, &p, &err), KVQ_ERR_ARG);
    assert_int_equal(kvq_qet_parse("4:l=3,bogus=1", 0, &p, &err), KVQ_ERR_ARG);
    assert_non_null(strstr(err.msg, "bogus"));
    assert_int_equal(kvq_qet_parse("4:l=99", 0, &p, &err), KVQ_ERR_ARG);
    assert_int_equal(kvq_qet_parse("4:l=2,r=1,split=0.6,w=4,iters=5,cb=8", 0, &p, &err), KVQ_OK);
    assert_true(p.levels == 2 && p.stages == 1 && p.width == 4 && p.iters == 5 && p.cb_bits == 8 && p.ratio == 4);
    assert_int_equal(kvq_qet_parse("6:vanilla", 0, &p, &err), KVQ_OK);
    assert_true(p.stages == 1 && p.cb_bits == 0 && p.levels == 3);
    assert_int_equal(kvq_qet_parse("6", 1, &p, &err), KVQ_OK);
    assert_true(p.levels == 0 && p.stages == 1 && p.cb_bits == 0);
    assert_int_equal(kvq_qet_parse("6:l=2", 1, &p, &err), KVQ_ERR_ARG); // pq has no swap tree
}

// ---- through the traits table

static void test_traits(void **state) {
    const kvq_codec_traits *q = kvq_codec_find("qet"), *p = kvq_codec_find("pq");
    assert_non_null(q);
    assert_non_null(p);
    int64_t n = 256, d = 128;
    float *x = randmat(n, d, 70), *out = malloc(sizeof(float) * n * d);
    uint16_t *raw = malloc(2 * n * d);
    kvq_dtype_from_f32(KVQ_DTYPE_BF16, x, n * d, raw);
    kvq_dtype_to_f32(KVQ_DTYPE_BF16, raw, n * d, x);
    kvq_tensor t = {.name = "w", .dtype = KVQ_DTYPE_BF16, .ndim = 2, .shape = {n, d}, .data = raw, .nbytes = 2 * n * d};
    kvq_codec_input in = {.src = &t, .x = x, .rows = n, .cols = d, .seed = 5};
    const char *specs[] = {"qet:4", "qet:5.33:vanilla", "pq:4"};
    for (int i = 0; i < 3; i++) {
        const kvq_codec_traits *c;
        json_t *cfg;
        kvq_err err;
        assert_int_equal(kvq_codec_parse_spec(specs[i], &c, &cfg, &err), KVQ_OK);
        kvq_encoded e;
        kvq_status s = c->encode(cfg, &in, &e, &err);
        if (s) fail_msg("%s", err.msg);
        double ratio = atof(specs[i] + (i == 2 ? 3 : 4));
        assert_true(kvq_encoded_bpw(&e, n * d) <= 16.0 / ratio);
        kvq_blob_view v[KVQ_MAX_BLOBS];
        views(&e, v);
        assert_int_equal(c->decode(e.params, v, e.n_blob, n, d, out, &err), KVQ_OK);
        assert_true(fabs(mse(x, out, n * d) - e.predicted_mse) <= 1e-9 * e.predicted_mse);
        kvq_encoded_free(&e);
        json_decref(cfg);
    }
    free(x); free(out); free(raw);
}

// The offline K/V matrix API: n tokens × d channels, fp16 source, default QET.
static void test_matrix_api(void **state) {
    int64_t n = 512, d = 64;
    float *x = randmat(n, d, 80), *out = malloc(sizeof(float) * n * d);
    double bpw = 0;
    kvq_err err;
    assert_int_equal(kvq_qet_matrix_roundtrip(x, n, d, KVQ_DTYPE_F16, 4, 3, out, &bpw, &err), KVQ_OK);
    assert_true(bpw <= 4.0 && bpw > 3.5);
    double m = mse(x, out, n * d);
    assert_true(m > 0 && m < 0.5);
    assert_int_equal(kvq_qet_matrix_roundtrip(x, n, d, KVQ_DTYPE_F16, 12, 3, out, &bpw, &err), KVQ_ERR_ARG);
    free(x); free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_swap_roundtrip_and_ref),
        cmocka_unit_test(test_paper_example),
        cmocka_unit_test(test_larger_half_variance),
        cmocka_unit_test(test_roundtrip_predicted_mse),
        cmocka_unit_test(test_qet_beats_pq),
        cmocka_unit_test(test_budget_never_exceeds),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_bad_shapes_and_specs),
        cmocka_unit_test(test_traits),
        cmocka_unit_test(test_matrix_api),
    };
    return cmocka_run_group_tests_name("qet", tests, NULL, NULL);
}
