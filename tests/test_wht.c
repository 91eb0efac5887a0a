// Tests for kernels/cpu/wht: the fast butterfly against the O(n²) definition (within
// float rounding), bit-identity with the plain scalar butterfly, and H·H = n·I.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/cpu/wht.h"

static void scalar_butterfly(float *x, int n) {
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

static void test_wht(void **st) {
    uint64_t s = 5;
    for (int n = 1; n <= 1024; n <<= 1) {
        float x[1024], y[1024], z[1024];
        double r[1024];
        for (int i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(s >> 11) * 0x1.0p-53 * 2 - 1);
        }
        memcpy(y, x, sizeof(float) * n);
        memcpy(z, x, sizeof(float) * n);
        kvq_wht(y, n); // the AVX2 path where the CPU has it
        scalar_butterfly(z, n);
        assert_memory_equal(y, z, sizeof(float) * n);
        memcpy(z, x, sizeof(float) * n);
        kvq_wht_portable(z, n); // SSE2 / scalar
        assert_memory_equal(y, z, sizeof(float) * n);
        for (int rep = 0; rep < 8; rep++) { // wide magnitudes, where any reordering would round differently
            float u[1024], w[1024];
            for (int i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                u[i] = ldexpf((float)((double)(s >> 11) * 0x1.0p-53 * 2 - 1), (int)(s % 40) - 20);
            }
            memcpy(w, u, sizeof(float) * n);
            kvq_wht(u, n);
            scalar_butterfly(w, n);
            assert_memory_equal(u, w, sizeof(float) * n);
        }
        kvq_wht_ref(x, r, n);
        for (int i = 0; i < n; i++) assert_true(fabs(y[i] - r[i]) <= 1e-5 * n);
        kvq_wht(y, n); // H·H = n·I
        for (int i = 0; i < n; i++) assert_true(fabs(y[i] / n - x[i]) <= 1e-5);
    }
}

static void test_wht_i32(void **st) {
    uint64_t s = 9;
    for (int n = 1; n <= 1024; n <<= 1)
        for (int rep = 0; rep < 20; rep++) {
            int32_t x[1024], y[1024];
            float f[1024];
            double r[1024];
            for (int i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                x[i] = (int32_t)((s >> 33) % 4001) - 2000;
                f[i] = (float)x[i];
            }
            int32_t z[1024];
            memcpy(y, x, sizeof(int32_t) * n);
            memcpy(z, x, sizeof(int32_t) * n);
            kvq_wht_i32(y, n);          // the AVX2 path where the CPU has it
            kvq_wht_i32_portable(z, n); // SSE2 / scalar
            kvq_wht_ref(f, r, n); // exact in double for these magnitudes
            for (int i = 0; i < n; i++) assert_true((double)y[i] == r[i] && (double)z[i] == r[i]);
            // full-range values: both paths wrap the same way mod 2^32
            for (int i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                y[i] = z[i] = (int32_t)(uint32_t)(s >> 32);
            }
            kvq_wht_i32(y, n);
            kvq_wht_i32_portable(z, n);
            assert_memory_equal(y, z, sizeof(int32_t) * n);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_wht), cmocka_unit_test(test_wht_i32)};
    return cmocka_run_group_tests_name("wht", tests, NULL, NULL);
}
