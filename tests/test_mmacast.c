// Tests for libconv/mmacast: FP8-E4M3 and FP4-E2M1 rounding against brute force over every
// representable value (ties to the even code), hand-checked values, and the block/scale
// structure of each simulated cast (INT8 levels, NVFP4 E4M3 block scales, MXFP4 powers of 2).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "libconv/quant/mmacast.h"

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

// All non-negative finite E4M3 values in code order (code = exp<<3 | mantissa; 0x7f is NaN).
static int e4m3_values(float *v) {
    int n = 0;
    for (int code = 0; code < 0x7f; code++) {
        int e = code >> 3, m = code & 7;
        v[n++] = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    }
    return n;
}

// Brute-force nearest in a sorted table; ties go to the even code; beyond the top: saturate.
static float brute(const float *v, int n, float x) {
    float a = fabsf(x);
    int best = 0;
    for (int i = 1; i < n; i++) {
        float d = fabsf(v[i] - a), db = fabsf(v[best] - a);
        if (d < db || (d == db && (i & 1) == 0)) best = i;
    }
    return copysignf(v[best], x);
}

static void test_e4m3_brute(void **st) {
    float v[128];
    int n = e4m3_values(v);
    assert_true(v[n - 1] == 448.0f);
    uint64_t s = 1;
    for (int t = 0; t < 100000; t++) {
        float x = (float)ldexp((double)rng(&s) * 0x1.0p-53 * 2 - 1, (int)(rng(&s) % 24) - 14);
        assert_true(kvq_e4m3_round(x) == brute(v, n, x));
    }
    for (int i = 0; i + 1 < n; i++) { // exact midpoints: ties to even
        float mid = 0.5f * (v[i] + v[i + 1]);
        assert_true(kvq_e4m3_round(mid) == v[(i & 1) ? i + 1 : i]);
    }
    assert_true(kvq_e4m3_round(1.0625f) == 1.0f);
    assert_true(kvq_e4m3_round(1.1875f) == 1.25f);
    assert_true(kvq_e4m3_round(0x1p-10f) == 0.0f);
    assert_true(kvq_e4m3_round(-500.0f) == -448.0f);
}

static void test_e2m1(void **st) {
    const float v[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    uint64_t s = 2;
    for (int t = 0; t < 100000; t++) {
        float x = (float)(((double)rng(&s) * 0x1.0p-53 * 2 - 1) * 8.0);
        assert_true(kvq_e2m1_round(x) == brute(v, 8, x));
    }
    assert_true(kvq_e2m1_round(0.25f) == 0.0f);
    assert_true(kvq_e2m1_round(0.75f) == 1.0f);
    assert_true(kvq_e2m1_round(2.5f) == 2.0f);
    assert_true(kvq_e2m1_round(5.0f) == 4.0f);
    assert_true(kvq_e2m1_round(-7.0f) == -6.0f);
}

static void test_cast_structure(void **st) {
    uint64_t s = 3;
    float y[128], x[128];
    for (int i = 0; i < 128; i++) x[i] = (float)(((double)rng(&s) * 0x1.0p-53 - 0.5) * (i == 5 ? 40 : 3));
    float am = 0;
    for (int i = 0; i < 128; i++) am = fmaxf(am, fabsf(x[i]));
    // INT8: every value is an integer multiple (|q| <= 127) of amax/127, error <= half a step
    for (int i = 0; i < 128; i++) y[i] = x[i];
    kvq_cast_apply(KVQ_CAST_INT8, y, 128);
    for (int i = 0; i < 128; i++) {
        float q = y[i] / (am / 127.0f);
        assert_true(fabsf(q - rintf(q)) < 1e-3f && fabsf(q) <= 127.001f);
        assert_true(fabsf(y[i] - x[i]) <= 0.5f * am / 127.0f * 1.0001f);
    }
    // MXFP4: per 32-block, y / 2^(floor(log2 amax_b) - 2) is an E2M1 value
    for (int i = 0; i < 128; i++) y[i] = x[i];
    kvq_cast_apply(KVQ_CAST_MXFP4, y, 128);
    for (int b = 0; b < 128; b += 32) {
        float bm = 0;
        for (int i = b; i < b + 32; i++) bm = fmaxf(bm, fabsf(x[i]));
        float sc = ldexpf(1.0f, (int)floorf(log2f(bm)) - 2);
        for (int i = b; i < b + 32; i++) assert_true(y[i] / sc == kvq_e2m1_round(x[i] / sc));
    }
    // NVFP4: per 16-block, the scale is an E4M3 value times the per-tile fp32 scale
    for (int i = 0; i < 128; i++) y[i] = x[i];
    kvq_cast_apply(KVQ_CAST_NVFP4, y, 128);
    float ts = am / (6.0f * 448.0f);
    for (int b = 0; b < 128; b += 16) {
        float bm = 0;
        for (int i = b; i < b + 16; i++) bm = fmaxf(bm, fabsf(x[i]));
        float bs = kvq_e4m3_round(bm / 6.0f / ts) * ts;
        for (int i = b; i < b + 16; i++) assert_true(y[i] == kvq_e2m1_round(x[i] / bs) * bs);
    }
    // FP8: amax maps to 448 exactly; all-zero tiles stay zero
    for (int i = 0; i < 128; i++) y[i] = x[i];
    kvq_cast_apply(KVQ_CAST_FP8, y, 128);
    assert_true(fabsf(y[5]) == am || fabsf(fabsf(y[5]) - am) < 1e-6f * am);
    for (int i = 0; i < 128; i++) y[i] = 0.0f;
    for (int c = KVQ_CAST_INT8; c < KVQ_CAST_COUNT; c++) {
        kvq_cast_apply((kvq_cast)c, y, 128);
        for (int i = 0; i < 128; i++) assert_true(y[i] == 0.0f);
    }
    kvq_cast k;
    assert_int_equal(kvq_cast_parse("nvfp4", &k), 0);
    assert_int_equal(k, KVQ_CAST_NVFP4);
    assert_int_equal(kvq_cast_parse("fp6", &k), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_brute),
        cmocka_unit_test(test_e2m1),
        cmocka_unit_test(test_cast_structure),
    };
    return cmocka_run_group_tests_name("mmacast", tests, NULL, NULL);
}
