// The prepared activation's layouts and the folded one-token product's plan
// (kernels/cuda/hqx_lay.h, the functions the kernels run) checked on the host: the one-token
// lane order is a permutation of the codes and of the 8-vector sums within their regions; the
// folded block's shared memory (the prepared activation, then the raw row) has disjoint,
// 16-byte aligned regions and fits the budget for the model shapes; the block split gives each
// part its blocks (at least one, none idle, no more than the grid) and the warps' row walks
// cover every row of every part exactly once, each block only its own part's rows.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cuda/hqx_lay.h"
#include "tests/testrng.h"

// kvq_gemv1_xq_at maps [0, cols_p) onto [0, cols_p) one to one, kvq_gemv1_s8_at [0, cols_p/8)
// onto itself (they index regions of exactly that size: xq padded to whole steps of 1024).
static void test_lane_order(void **state) {
    (void)state;
    for (int64_t cols_p = 1024; cols_p <= 16384; cols_p += 1024) {
        unsigned char *seen = calloc((size_t)cols_p, 1);
        for (int64_t i = 0; i < cols_p; i++) {
            const int64_t k = kvq_gemv1_xq_at(i);
            assert_true(k >= 0 && k < cols_p);
            assert_int_equal(seen[k], 0);
            seen[k] = 1;
        }
        memset(seen, 0, (size_t)cols_p);
        for (int64_t v = 0; v < cols_p / 8; v++) {
            const int64_t k = kvq_gemv1_s8_at(v);
            assert_true(k >= 0 && k < cols_p / 8);
            assert_int_equal(seen[k], 0);
            seen[k] = 1;
        }
        free(seen);
    }
}

// The folded block's shared memory: sx, xs (a float a tile), s8 (an int a vector of 8), xq (a
// byte a coordinate), then the row (cols floats), each 16-byte aligned (float4 and int4 loads,
// cp.async of 16 bytes), in this order without overlap; the total is kvq_hqx_fold_smem's. The
// model shapes fit (4096 and 8192 columns at tiles 64..256); tiles outside 64..256, cols not a
// multiple of 4, partial steps and too wide rows are refused (0).
static void test_fold_smem(void **state) {
    (void)state;
    const int tiles[] = {64, 128, 256};
    for (int ti = 0; ti < 3; ti++) {
        const int T = tiles[ti];
        for (int64_t cols_p = 1024; cols_p <= 16384; cols_p += 1024) {
            for (int64_t cols = cols_p - 2 * T + 4; cols <= cols_p; cols += 4) {
                if (cols <= 0 || (cols_p - cols) >= T) continue; // cols_p: cols padded to whole tiles
                const size_t b = kvq_hqx_fold_smem(cols, cols_p, T);
                const Lay L = lay(cols_p, T, 1);
                const size_t tl = (size_t)(cols_p / T), row = L.total, want = L.total + 4 * (size_t)cols;
                assert_true(L.sx == 0 && L.xs >= L.sx + 4 * tl && L.s8 >= L.xs + 4 * tl && L.xq >= L.s8 + 4 * (size_t)(cols_p / 8));
                assert_true(row >= L.xq + (size_t)cols_p);
                assert_true(L.xs % 16 == 0 && L.s8 % 16 == 0 && L.xq % 16 == 0 && row % 16 == 0);
                if (want <= KVQ_HQX_FOLD_SMEM) assert_int_equal(b, want);
                else assert_int_equal(b, 0);
                if (cols_p <= 8192) assert_true(b > 0); // the 8B shape's 4096, and up to 8192 columns
            }
        }
    }
    assert_int_equal(kvq_hqx_fold_smem(4096, 4096, 512), 0);  // a lane would hold 16 coordinates
    assert_int_equal(kvq_hqx_fold_smem(4096, 4096, 32), 0);
    assert_int_equal(kvq_hqx_fold_smem(4094, 4096, 128), 0);  // not whole float4s
    assert_int_equal(kvq_hqx_fold_smem(3968, 3968, 128), 0);  // a partial step
    assert_int_equal(kvq_hqx_fold_smem(14336, 14336, 128), 0); // too wide (the down product's input)
    assert_int_equal(kvq_hqx_fold_smem(4097, 4096, 128), 0);
    assert_int_equal(kvq_hqx_fold_smem(0, 1024, 128), 0);
}

// One split and walk: the blocks' parts, then every warp's rows.
static void check_plan(const int64_t *rows, int n, int grid) {
    int nb[3] = {-1, -1, -1};
    const int tot = kvq_hqx_fold_split(rows, n, grid, nb);
    assert_true(tot >= n && tot <= grid);
    int sum = 0;
    int64_t all = 0;
    for (int p = 0; p < 3; p++) {
        if (p >= n) {
            assert_int_equal(nb[p], 0);
            continue;
        }
        assert_true(nb[p] >= 1);
        assert_true((int64_t)(nb[p] - 1) * KVQ_HQX_FOLD_WARPS < rows[p]); // no block without a row
        sum += nb[p];
        all += rows[p];
    }
    assert_int_equal(sum, tot);
    // a grid left partly empty only where every part has a warp a row (or more blocks than rows)
    if (tot < grid)
        for (int p = 0; p < n; p++) assert_true((int64_t)nb[p] * KVQ_HQX_FOLD_WARPS >= rows[p]);
    const uint32_t b1 = (uint32_t)nb[0], b2 = (uint32_t)(nb[0] + nb[1]);
    const uint32_t rb1 = (uint32_t)rows[0], rb2 = rb1 + (uint32_t)(n > 1 ? rows[1] : 0), rtot = (uint32_t)all;
    unsigned char *seen = calloc((size_t)all, 1);
    for (uint32_t b = 0; b < (uint32_t)tot; b++) {
        for (uint32_t w = 0; w < KVQ_HQX_FOLD_WARPS; w++) {
            const kvq_hqx_fold_walk fw = kvq_hqx_fold_rows(b, w, (uint32_t)tot, b1, b2, rb1, rb2, rtot);
            const int want = b >= b2 ? 2 : b >= b1 ? 1 : 0;
            assert_int_equal(fw.part, want);
            const uint32_t lo = want == 0 ? 0 : want == 1 ? rb1 : rb2, hi = want == 0 ? rb1 : want == 1 ? rb2 : rtot;
            assert_int_equal(fw.end, hi);
            assert_int_equal(fw.stride, (uint32_t)nb[want] * KVQ_HQX_FOLD_WARPS);
            for (uint32_t r = fw.first; r < fw.end; r += fw.stride) {
                assert_true(r >= lo && r < hi);
                assert_int_equal(seen[r], 0);
                seen[r] = 1;
            }
        }
    }
    for (int64_t r = 0; r < all; r++) assert_int_equal(seen[r], 1);
    free(seen);
}

// The 8B shape's q/k/v (4096, 1024, 1024 rows) and gate/up (14336 each) on the H100's 132 SMs
// and on small grids (the tests' cap), tiny parts, then seeded random shapes.
static void test_fold_plan(void **state) {
    (void)state;
    const int64_t qkv[3] = {4096, 1024, 1024}, gu[2] = {14336, 14336}, tiny[3] = {5, 1, 300}, one[1] = {33};
    const int grids[] = {3, 4, 7, 66, 132, 264};
    for (int g = 0; g < 6; g++) {
        check_plan(qkv, 3, grids[g]);
        check_plan(gu, 2, grids[g]);
        check_plan(tiny, 3, grids[g]);
        check_plan(one, 1, grids[g]);
    }
    int nb[3];
    assert_int_equal(kvq_hqx_fold_split(qkv, 3, 132, nb), 132); // the H100: every SM a block
    assert_true(nb[0] == 88 && nb[1] == 22 && nb[2] == 22);     // by rows: 4096 : 1024 : 1024
    assert_int_equal(kvq_hqx_fold_split(qkv, 3, 2, nb), 0);     // fewer blocks than parts
    uint64_t s = 12;
    for (int it = 0; it < 300; it++) {
        const int n = 1 + (int)(rng_next(&s) % 3), grid = n + (int)(rng_next(&s) % 300);
        int64_t rows[3] = {0, 0, 0};
        for (int p = 0; p < n; p++) rows[p] = 1 + (int64_t)(rng_next(&s) % (it % 2 ? 200 : 20000));
        check_plan(rows, n, grid);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lane_order), cmocka_unit_test(test_fold_smem),
                                       cmocka_unit_test(test_fold_plan)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
