// The int8 activation preparation's RMSNorm sum of squares (kernels/cuda/hqx_prep.cuh) emulated
// on the host, lane by lane: hqx_prep_i8's row_rinv (batches of 16 float4s a lane, zero-padded),
// hqx_prep_i8h's row_rinv_wide (batches of 8 or 32) and row_rinv_smem (warp 0 over the row in
// shared memory, no padding) must give every warp the same 1/rms bits, whatever the row length,
// so KVQ_CUDA_PREP can switch kernels without moving a code. The device suites compare the
// kernels themselves (test_cuda_hqx, test_cuda_model); this checks the order argument offline.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/testrng.h"

// 1/sqrt(mean(x²) + eps) from 32 lanes' partial sums: the xor tree of __shfl_xor_sync (every
// lane adds its partner's value of the stage before), lane 0's result (all lanes agree).
static float rinv_of(float *ss, int64_t n, float eps) {
    for (int o = 16; o > 0; o >>= 1) {
        float nx[32];
        for (int l = 0; l < 32; l++) nx[l] = ss[l] + ss[l ^ o];
        memcpy(ss, nx, sizeof nx);
    }
    for (int l = 1; l < 32; l++) assert_memory_equal(&ss[l], &ss[0], sizeof(float));
    return 1.0f / sqrtf(ss[0] / (float)n + eps);
}

// Batches of rb float4s a lane, out-of-row ones read as zeros (row_rinv: rb 16; row_rinv_wide:
// rb); rb 0: lane l's float4s l, l+32, ... < n/4 only (row_rinv_smem).
static float rinv_batched(const float *x, int64_t n, float eps, int rb) {
    const int64_t n4 = n / 4;
    float ss[32];
    for (int l = 0; l < 32; l++) {
        float s = 0.0f;
        const int64_t step = rb ? 32 * (int64_t)rb : 32, per = rb ? rb : 1;
        for (int64_t c0 = l; c0 < n4; c0 += step)
            for (int64_t k = 0; k < per; k++) {
                const int64_t c = c0 + 32 * k;
                for (int e = 0; e < 4; e++) {
                    const float v = c < n4 ? x[4 * c + e] : 0.0f;
                    s = fmaf(v, v, s);
                }
            }
        ss[l] = s;
    }
    return rinv_of(ss, n, eps);
}

// Lane l's float4s in descending order: another order, to show the comparison can fail.
static float rinv_reversed(const float *x, int64_t n, float eps) {
    const int64_t n4 = n / 4;
    float ss[32];
    for (int l = 0; l < 32; l++) {
        float s = 0.0f;
        for (int64_t c = n4 - 1; c >= 0; c--)
            if (c % 32 == l)
                for (int e = 0; e < 4; e++) s = fmaf(x[4 * c + e], x[4 * c + e], s);
        ss[l] = s;
    }
    return rinv_of(ss, n, eps);
}

static void test_same_bits(void **state) {
    (void)state;
    uint64_t seed = 12;
    const int64_t ns[] = {4, 128, 300, 2048, 2052, 3072, 4096, 5120, 8192, 12288, 14336};
    int reversed_differs = 0;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        const int64_t n = ns[i];
        float *x = malloc(sizeof(float) * n);
        for (int rep = 0; rep < 20; rep++) {
            // magnitudes over six decades, so a sum in another order rounds differently
            for (int64_t c = 0; c < n; c++) x[c] = (float)(gauss(&seed) * pow(10.0, 3.0 * gauss(&seed) / 2.0));
            const float r16 = rinv_batched(x, n, 1e-5f, 16);
            const float r8 = rinv_batched(x, n, 1e-5f, 8), r32 = rinv_batched(x, n, 1e-5f, 32),
                        rsm = rinv_batched(x, n, 1e-5f, 0);
            assert_memory_equal(&r8, &r16, sizeof(float));
            assert_memory_equal(&r32, &r16, sizeof(float));
            assert_memory_equal(&rsm, &r16, sizeof(float));
            const float rr = rinv_reversed(x, n, 1e-5f);
            reversed_differs += memcmp(&rr, &r16, sizeof(float)) != 0;
        }
        free(x);
    }
    assert_true(reversed_differs > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_same_bits)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
