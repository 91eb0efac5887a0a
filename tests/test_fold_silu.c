// The SiLU fold's counting (kernels/cuda/hqx_gemv1.cu, KVQ_CUDA_FOLD_SILU) emulated on the
// host: the gate/up product's rows, numbered part after part as the persistent kernel takes
// them (warp w: rows w, w + W, ...), each add 1 to the counter of the down tile they feed
// (kvq_cuda_fold_tile), in any order; the increment that finds kvq_cuda_fold_target − 1
// prepares the tile and sets the counter back to 0. Every tile must be prepared exactly once a
// launch, after all its rows, and every counter be 0 again for the next launch (a graph replay).
// The device suites compare the kernel's bits (test_cuda_hqx, test_cuda_model).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/cuda/hqx.h"
#include "tests/testrng.h"

// One launch over n parts (rows[p] rows at gu column row0[p]) by W warps into the counters cnt
// (tiles of 2^tsh over cols): the rows' increments in a random order (seed). done[j] counts the
// tiles' preparations; a preparation must find all of the tile's rows counted (seen[j]).
static void launch(int n, const int64_t *rows, const int64_t *row0, int64_t cols, int tsh, int64_t W, uint32_t *cnt,
                   int *done, uint64_t *seed) {
    int64_t rtot = 0, rb[4] = {0};
    for (int p = 0; p < n; p++) rb[p + 1] = rb[p] + rows[p], rtot += rows[p];
    const int64_t tiles = (cols + ((int64_t)1 << tsh) - 1) >> tsh;
    // the rows in the kernel's order (warp by warp), then shuffled: atomics land in any order
    int64_t *order = malloc(sizeof(int64_t) * (size_t)rtot);
    int64_t k = 0;
    for (int64_t w = 0; w < W; w++)
        for (int64_t r = w; r < rtot; r += W) order[k++] = r;
    assert_int_equal(k, rtot);
    for (int64_t i = rtot - 1; i > 0; i--) {
        const int64_t j = (int64_t)(rng_next(seed) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    uint32_t *seen = calloc((size_t)tiles, sizeof(uint32_t));
    for (int64_t i = 0; i < rtot; i++) {
        const int64_t r = order[i];
        int p = 0;
        while (r >= rb[p + 1]) p++;
        const int64_t col = row0[p] + (r - rb[p]);
        assert_true(col >= 0 && col < 2 * cols);
        const int64_t j = kvq_cuda_fold_tile(col, cols, tsh);
        assert_true(j >= 0 && j < tiles);
        seen[j]++;
        const uint32_t old = cnt[j]++;
        if (old == kvq_cuda_fold_target(j, cols, tsh) - 1) {
            assert_int_equal(seen[j], kvq_cuda_fold_target(j, cols, tsh)); // every row of the tile is in
            done[j]++;
            cnt[j] = 0;
        }
    }
    free(seen);
    free(order);
}

static void test_counting(void **state) {
    (void)state;
    uint64_t seed = 12;
    for (int c = 0; c < 300; c++) {
        const int tsh = 6 + (int)(rng_next(&seed) % 3); // tiles 64, 128, 256
        const int64_t T = (int64_t)1 << tsh;
        const int64_t cols = c == 0 ? 14336 : c == 1 ? 1000 : 1 + (int64_t)(rng_next(&seed) % 5000);
        const int64_t cols_p = (cols + T - 1) / T * T, tiles = cols_p / T;
        // parts: one fused gate_up, gate + up in either order, or three pieces
        const int n = 1 + (int)(rng_next(&seed) % 3);
        int64_t rows[3], row0[3];
        if (n == 1) rows[0] = 2 * cols, row0[0] = 0;
        else if (n == 2) {
            const int upf = (int)(rng_next(&seed) & 1);
            rows[0] = rows[1] = cols;
            row0[0] = upf ? cols : 0, row0[1] = upf ? 0 : cols;
        } else {
            const int64_t a = 1 + (int64_t)(rng_next(&seed) % (uint64_t)(2 * cols - 1)), b = 2 * cols - a;
            rows[0] = b, row0[0] = a; // the tail first, then the head split in two when it can be
            if (a >= 2) rows[1] = a / 2, row0[1] = 0, rows[2] = a - a / 2, row0[2] = a / 2;
            else rows[1] = a, row0[1] = 0, rows[2] = 0;
        }
        const int np = n == 3 && rows[2] == 0 ? 2 : n;
        assert_true(kvq_cuda_fold_shape_ok(np, rows, row0, cols, cols_p, (int)T));
        uint64_t sum = 0;
        for (int64_t j = 0; j < tiles; j++) {
            assert_true(kvq_cuda_fold_target(j, cols, tsh) >= 2);
            sum += kvq_cuda_fold_target(j, cols, tsh);
        }
        assert_int_equal(sum, (uint64_t)(2 * cols)); // every row counted once
        const int64_t W = 1 + (int64_t)(rng_next(&seed) % 4224);
        uint32_t *cnt = calloc((size_t)tiles, sizeof(uint32_t));
        int *done = calloc((size_t)tiles, sizeof(int));
        for (int l = 1; l <= 3; l++) { // launches in a row: nothing resets the counters but the fold
            launch(np, rows, row0, cols, tsh, W, cnt, done, &seed);
            for (int64_t j = 0; j < tiles; j++) {
                assert_int_equal(done[j], l);
                assert_int_equal(cnt[j], 0);
            }
        }
        free(cnt);
        free(done);
    }
}

// The shape condition refuses what would leave a counter short of its target or overshoot it.
static void test_shapes(void **state) {
    (void)state;
    const int64_t cols = 1000, cols_p = 1024;
    const int64_t rows2[2] = {1000, 1000}, ok2[2] = {0, 1000}, swap2[2] = {1000, 0}, over[2] = {0, 999}, gap[2] = {0, 1001};
    assert_true(kvq_cuda_fold_shape_ok(2, rows2, ok2, cols, cols_p, 128));
    assert_true(kvq_cuda_fold_shape_ok(2, rows2, swap2, cols, cols_p, 128));
    assert_false(kvq_cuda_fold_shape_ok(2, rows2, over, cols, cols_p, 128)); // overlap
    assert_false(kvq_cuda_fold_shape_ok(2, rows2, gap, cols, cols_p, 128));  // past 2·cols
    assert_false(kvq_cuda_fold_shape_ok(1, rows2, ok2, cols, cols_p, 128));  // half of gate | up
    assert_false(kvq_cuda_fold_shape_ok(2, rows2, ok2, cols, 1152, 128));    // a tile of padding only
    assert_false(kvq_cuda_fold_shape_ok(2, rows2, ok2, cols, cols_p, 96));   // not a power of two
    assert_false(kvq_cuda_fold_shape_ok(2, rows2, ok2, cols, cols_p, 32));
    assert_false(kvq_cuda_fold_shape_ok(0, rows2, ok2, cols, cols_p, 128));
    const int64_t rows4[4] = {500, 500, 500, 500}, r04[4] = {0, 500, 1000, 1500};
    assert_false(kvq_cuda_fold_shape_ok(4, rows4, r04, cols, cols_p, 128)); // more parts than a launch holds
    assert_false(kvq_cuda_fold_shape_ok(3, rows4, r04 + 1, 750, 768, 256)); // rows 500..2000 of 1500
    const int64_t rows3[3] = {500, 500, 500}, r03[3] = {1000, 0, 500};
    assert_true(kvq_cuda_fold_shape_ok(3, rows3, r03, 750, 768, 256));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_counting), cmocka_unit_test(test_shapes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
