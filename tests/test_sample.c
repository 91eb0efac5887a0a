// Samplers: greedy is argmax, same seed gives the same draws, empirical frequencies
// follow softmax(logits / T), and top-p never leaves the nucleus.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "libconv/runtime/sample.h"

static void test_greedy(void **st) {
    (void)st;
    float l[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
    assert_int_equal(kvq_sample_argmax(l, 5), 1);
    kvq_sampler *s;
    kvq_err e = {0};
    assert_int_equal(kvq_sampler_new(0.0f, 1.0f, 1, 5, &s, &e), KVQ_OK);
    for (int i = 0; i < 10; i++) assert_int_equal(kvq_sample(s, l, 5), 1);
    kvq_sampler_free(s);
    assert_int_equal(kvq_sampler_new(1.0f, 0.0f, 1, 5, &s, &e), KVQ_ERR_ARG);
    assert_int_equal(kvq_sampler_new(1.0f, 1.5f, 1, 5, &s, &e), KVQ_ERR_ARG);
}

static void test_temperature_frequencies(void **st) {
    (void)st;
    float l[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)}; // p = 0.1 0.2 0.3 0.4 at T = 1
    kvq_sampler *s, *s2;
    kvq_err e = {0};
    assert_int_equal(kvq_sampler_new(1.0f, 1.0f, 1234, 4, &s, &e), KVQ_OK);
    assert_int_equal(kvq_sampler_new(1.0f, 1.0f, 1234, 4, &s2, &e), KVQ_OK);
    int cnt[4] = {0};
    const int N = 200000;
    for (int i = 0; i < N; i++) {
        int a = kvq_sample(s, l, 4);
        assert_int_equal(a, kvq_sample(s2, l, 4)); // same seed, same stream
        cnt[a]++;
    }
    for (int k = 0; k < 4; k++) assert_true(fabs(cnt[k] / (double)N - 0.1 * (k + 1)) < 0.005);
    kvq_sampler_free(s);
    kvq_sampler_free(s2);
    // T = 0.5 squares the odds: p ∝ 1, 4, 9, 16
    assert_int_equal(kvq_sampler_new(0.5f, 1.0f, 99, 4, &s, &e), KVQ_OK);
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < N; i++) cnt[kvq_sample(s, l, 4)]++;
    for (int k = 0; k < 4; k++) assert_true(fabs(cnt[k] / (double)N - (k + 1) * (k + 1) / 30.0) < 0.005);
    kvq_sampler_free(s);
}

static void test_top_p(void **st) {
    (void)st;
    float l[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)};
    kvq_sampler *s;
    kvq_err e = {0};
    // top-p 0.5: nucleus {3 (0.4), 2 (0.3)} (mass 0.7 > 0.5); renormalized 4/7, 3/7
    assert_int_equal(kvq_sampler_new(1.0f, 0.5f, 7, 4, &s, &e), KVQ_OK);
    int cnt[4] = {0};
    const int N = 100000;
    for (int i = 0; i < N; i++) cnt[kvq_sample(s, l, 4)]++;
    assert_int_equal(cnt[0] + cnt[1], 0);
    assert_true(fabs(cnt[3] / (double)N - 4.0 / 7) < 0.01);
    kvq_sampler_free(s);
    assert_int_equal(kvq_sampler_new(1.0f, 0.3f, 7, 4, &s, &e), KVQ_OK); // 0.4 alone exceeds 0.3
    for (int i = 0; i < 1000; i++) assert_int_equal(kvq_sample(s, l, 4), 3);
    kvq_sampler_free(s);
}

// NaN logits (a checkpoint whose weights are NaN), NaN/negative/infinite temperatures, a
// top_p below 1/vocab on a flat distribution: no out-of-bounds read, a clear result.
static void test_hostile(void **st) {
    (void)st;
    kvq_sampler *s = NULL;
    kvq_err e = {0};
    assert_int_equal(kvq_sampler_new(NAN, 0.9f, 1, 8, &s, &e), KVQ_ERR_ARG);
    assert_int_equal(kvq_sampler_new(-1.0f, 0.9f, 1, 8, &s, &e), KVQ_ERR_ARG);
    assert_int_equal(kvq_sampler_new(INFINITY, 0.9f, 1, 8, &s, &e), KVQ_ERR_ARG);
    assert_int_equal(kvq_sampler_new(NAN, NAN, 1, 8, &s, &e), KVQ_ERR_ARG);
    float nan8[8], flat[8], inf8[8];
    for (int i = 0; i < 8; i++) { nan8[i] = i == 3 ? NAN : (float)i; flat[i] = 1.0f; inf8[i] = i == 5 ? INFINITY : 0.0f; }
    const float tps[] = {1.0f, 0.9f, 1e-9f};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(kvq_sampler_new(0.8f, tps[k], 7, 8, &s, &e), KVQ_OK);
        assert_int_equal(kvq_sample(s, nan8, 8), -1);
        for (int i = 0; i < 50; i++) {
            int32_t a = kvq_sample(s, flat, 8);
            assert_true(a >= 0 && a < 8);
        }
        assert_int_equal(kvq_sample(s, inf8, 8), 5);
        kvq_sampler_free(s);
    }
    assert_int_equal(kvq_sampler_new(0.0f, 1.0f, 7, 8, &s, &e), KVQ_OK); // greedy too
    assert_int_equal(kvq_sample(s, nan8, 8), -1);
    kvq_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_greedy), cmocka_unit_test(test_temperature_frequencies),
                                       cmocka_unit_test(test_top_p), cmocka_unit_test(test_hostile)};
    return cmocka_run_group_tests_name("sample", tests, NULL, NULL);
}
