// The GPU's 16-bit escapes (kernels/cpu/hqx_esc16.h) against the packer's 32-bit entries on the
// host, through the accessor the kernels run (kvq_hqx_esc16_get): random rows over 1..8
// segments (columns at and around the 4096 boundaries, empty rows and empty segments), deltas at
// the code's limits and beyond (the big list), every reason a tensor keeps the 32-bit form, the
// byte counts, and a packed E8 4.0 width-4 tensor (the packer's own order and deltas).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu/hqx_esc16.h"
#include "libconv/codec/hyperquant/hq_pack.h"
#include "tests/testrng.h"

// A bare layout holding only what the converter reads: rows, columns, escapes.
static kvq_hqx bare(int64_t rows, int64_t cols_p) {
    kvq_hqx w;
    memset(&w, 0, sizeof w);
    w.rows = rows;
    w.cols = w.cols_p = cols_p;
    w.tile = 64;
    w.vbits = 4;
    w.esc_row = calloc((size_t)rows + 1, sizeof(uint32_t));
    return w;
}
static void bare_free(kvq_hqx *w) {
    free(w->esc_row);
    free(w->esc);
}

// Whether entry e gets a big delta: runs of 3 at every big_in-th entry when big_in is a
// multiple of 900 (adjacent big entries), else every big_in-th (0: none).
static int is_big(uint32_t e, int big_in) {
    if (!big_in) return 0;
    const uint32_t k = e % (uint32_t)big_in, h = (uint32_t)big_in / 2;
    return k >= h && k < h + (big_in % 900 ? 1u : 3u);
}

// The delta of entry e: small (the code's range, its limits -8, -1, 1, 7 often) or, where
// is_big, beyond it (8, -9, 0, ±2047 and between).
static int32_t draw_delta(uint64_t *s, uint32_t e, int big_in) {
    static const int32_t lim[] = {-8, -1, 1, 7};
    static const int32_t far[] = {8, -9, 0, 2047, -2047, 100, -100, 9};
    const uint64_t u = rng_next(s);
    if (is_big(e, big_in)) return far[(u >> 20) % 8];
    if ((u >> 8) % 4 == 0) return lim[(u >> 12) % 4];
    int32_t d = (int32_t)((u >> 16) % 15) - 8; // -8..6, 0 skipped to 7
    return d ? d : 7;
}

// Escapes of every row of w, ascending columns: row r takes counts[r % nc] (capped at cols_p),
// columns drawn at random, or (r % 5 == 1) crowded at the segment boundaries 4096·s − 1, 4096·s
// and the last column.
static void fill(kvq_hqx *w, const int *counts, int nc, int big_in, uint64_t seed) {
    int64_t tot = 0;
    for (int64_t r = 0; r < w->rows; r++) tot += counts[r % nc] < w->cols_p ? counts[r % nc] : w->cols_p;
    w->esc = malloc(sizeof(uint32_t) * (size_t)(tot ? tot : 1));
    uint8_t *used = malloc((size_t)w->cols_p);
    uint32_t e = 0;
    for (int64_t r = 0; r < w->rows; r++) {
        const int64_t k = counts[r % nc] < w->cols_p ? counts[r % nc] : w->cols_p;
        memset(used, 0, (size_t)w->cols_p);
        int64_t placed = 0;
        if (r % 5 == 1) // the boundaries first
            for (int64_t c = KVQ_HQX_ESC16_SEG - 1; c < w->cols_p && placed < k; c += KVQ_HQX_ESC16_SEG) {
                used[c] = 1, placed++;
                if (c + 1 < w->cols_p && placed < k) used[c + 1] = 1, placed++;
            }
        if (placed < k && !used[w->cols_p - 1]) used[w->cols_p - 1] = 1, placed++;
        for (; placed < k; placed++) {
            int64_t c = (int64_t)(rng_next(&seed) % (uint64_t)w->cols_p);
            while (used[c]) c = (c + 1) % w->cols_p;
            used[c] = 1;
        }
        w->esc_row[r] = e;
        for (int64_t c = 0; c < w->cols_p; c++)
            if (used[c]) w->esc[e] = kvq_hqx_esc_pack((uint32_t)c, draw_delta(&seed, e, big_in)), e++;
    }
    w->esc_row[w->rows] = e;
    w->n_esc = e;
    free(used);
}

// Every entry through the accessor equals the packer's; the segment starts are the rows' first
// entries at or past each boundary; the big list holds exactly the entries beyond the code.
static void check_same(const kvq_hqx *w, const kvq_hqx_esc16 *x) {
    assert_int_equal(x->used, 1);
    int64_t nb = 0;
    for (int64_t r = 0; r < w->rows; r++) {
        for (uint32_t e = w->esc_row[r]; e < w->esc_row[r + 1]; e++) {
            const uint32_t got = kvq_hqx_esc16_get(x->e16, x->seg, x->s1, x->big, (uint32_t)x->n_big, r, e);
            if (got != w->esc[e])
                fail_msg("row %lld entry %u: 0x%08x, want 0x%08x (col %u delta %d)", (long long)r, e, got, w->esc[e],
                         kvq_hqx_esc_col(w->esc[e]), kvq_hqx_esc_delta(w->esc[e]));
        }
        // the one-token kernel's batches (hqx_gemv1.cu) decode (col, delta) from the entry itself and
        // take a big entry's delta from the row's run of big pairs, which starts where
        // kvq_hqx_esc16_lower puts the row's first big entry: the same, sequentially
        uint32_t bnext = UINT32_MAX;
        for (uint32_t e = w->esc_row[r]; e < w->esc_row[r + 1]; e++) {
            const uint32_t v = x->e16[e];
            const uint32_t col = kvq_hqx_esc16_col(v, kvq_hqx_esc16_hi(x->seg, x->s1, r, e));
            int32_t dl = kvq_hqx_esc16_dcode(v);
            if (!dl) {
                if (bnext == UINT32_MAX) bnext = kvq_hqx_esc16_lower(x->big, (uint32_t)x->n_big, e);
                assert_true(bnext < (uint32_t)x->n_big);
                dl = kvq_hqx_esc_delta(x->big[2 * bnext++ + 1]);
            }
            if (col != kvq_hqx_esc_col(w->esc[e]) || dl != kvq_hqx_esc_delta(w->esc[e]))
                fail_msg("row %lld entry %u counted: col %u delta %d, want col %u delta %d", (long long)r, e, col, dl,
                         kvq_hqx_esc_col(w->esc[e]), kvq_hqx_esc_delta(w->esc[e]));
        }
        for (int s = 1; s <= x->s1; s++) {
            uint32_t want = w->esc_row[r + 1];
            for (uint32_t e = w->esc_row[r]; e < w->esc_row[r + 1]; e++)
                if (kvq_hqx_esc_col(w->esc[e]) >= (uint32_t)s * KVQ_HQX_ESC16_SEG) { want = e; break; }
            assert_int_equal(x->seg[(size_t)r * x->s1 + s - 1], want);
        }
        for (uint32_t e = w->esc_row[r]; e < w->esc_row[r + 1]; e++) {
            const int32_t d = kvq_hqx_esc_delta(w->esc[e]);
            nb += d < -8 || d > 7 || d == 0;
        }
    }
    assert_int_equal(x->n_big, nb);
    const size_t rows = (size_t)w->rows, n = w->esc_row[rows];
    assert_int_equal(kvq_hqx_esc_dev_bytes(w, x), 4 * (rows + 1) + 2 * n + 4 * rows * (size_t)x->s1 + 8 * (size_t)x->n_big);
    assert_int_equal(kvq_hqx_esc_dev_bytes(w, NULL), 4 * (rows + 1) + 4 * n);
    assert_true(kvq_hqx_esc_dev_bytes(w, x) < kvq_hqx_esc_dev_bytes(w, NULL));
}

// Random rows over 1 to 8 segments (64 .. 32768 columns; cols_p not a multiple of 4096 too):
// every entry read back exactly, small deltas only and with big ones (every 300th entry, or
// runs of 3 every 900: the binary search among neighbours).
static void test_random_rows(void **state) {
    (void)state;
    static const int counts[] = {0, 1, 2, 31, 32, 33, 64, 130, 300, 0, 7};
    static const int64_t colss[] = {64, 1024, 4096, 4160, 8192, 12288, 14336, 28672, 32768};
    for (size_t ci = 0; ci < sizeof colss / sizeof colss[0]; ci++)
        for (int big = 0; big < 3; big++) {
            static const int every[3] = {0, 300, 900};
            kvq_hqx w = bare(97, colss[ci]);
            fill(&w, counts, 11, every[big], 1000 + 10 * ci + big);
            kvq_hqx_esc16 x;
            kvq_err err = {0};
            assert_int_equal(kvq_hqx_esc16_build(&w, &x, &err), KVQ_OK);
            if (!x.used) fail_msg("cols %lld big %d: 32-bit form kept (%u escapes)", (long long)colss[ci], big, w.esc_row[w.rows]);
            assert_int_equal(x.s1, (int)((colss[ci] + 4095) / 4096 - 1));
            check_same(&w, &x);
            int64_t want = 0;
            for (uint32_t e = 0; e < w.esc_row[w.rows]; e++) want += is_big(e, every[big]);
            assert_int_equal(x.n_big, want);
            if (big) assert_true(want > 0);
            if (!big) assert_int_equal(x.n_big, 0);
            kvq_hqx_esc16_free(&x);
            bare_free(&w);
        }
}

// Every delta of the code's range, one row each column, and the ones just beyond it.
static void test_delta_limits(void **state) {
    (void)state;
    kvq_hqx w = bare(3, 14336);
    w.esc = malloc(sizeof(uint32_t) * 64);
    uint32_t e = 0;
    for (int32_t d = -8; d <= 7; d++) // row 0: every small delta, one per segment in turn
        if (d) w.esc[e++] = kvq_hqx_esc_pack((uint32_t)(4095 + (d + 8) * 300), d);
    w.esc_row[1] = e;
    w.esc_row[2] = e; // row 1: none
    for (int k = 0; k < 40; k++) w.esc[e++] = kvq_hqx_esc_pack((uint32_t)(k * 350), k == 7 ? 8 : k == 30 ? -9 : -1);
    w.esc_row[3] = e;
    kvq_hqx_esc16 x;
    kvq_err err = {0};
    // 2 big entries of 55: more than one in 64 (the 32-bit form), then again with 600 rows of
    // small deltas after them (2 in ~10k: the 16-bit form, the big ones through the list)
    assert_int_equal(kvq_hqx_esc16_build(&w, &x, &err), KVQ_OK);
    assert_int_equal(x.used, 0);
    assert_null(x.e16);
    kvq_hqx w2 = bare(603, 14336);
    w2.esc = malloc(sizeof(uint32_t) * (e + 600 * 17));
    memcpy(w2.esc, w.esc, sizeof(uint32_t) * e);
    memcpy(w2.esc_row, w.esc_row, sizeof(uint32_t) * 4);
    for (int64_t r = 3; r < 603; r++) {
        for (int k = 0; k < 17; k++) w2.esc[e++] = kvq_hqx_esc_pack((uint32_t)(k * 843 + r % 7), 1 - 2 * (k & 1));
        w2.esc_row[r + 1] = e;
    }
    assert_int_equal(kvq_hqx_esc16_build(&w2, &x, &err), KVQ_OK);
    check_same(&w2, &x);
    assert_int_equal(x.n_big, 2);
    for (int32_t d = -8; d <= 7; d++) // the code's range, and only it, fits 16 bits
        if (d) assert_int_not_equal(kvq_hqx_esc16_pack(5, d) >> KVQ_HQX_ESC16_SEG_BITS, 0);
    const int32_t far[] = {0, 8, -9, 2047, -2047};
    for (int i = 0; i < 5; i++) assert_int_equal(kvq_hqx_esc16_pack(5, far[i]), 5);
    kvq_hqx_esc16_free(&x);
    bare_free(&w);
    bare_free(&w2);
}

// The reasons a tensor keeps the 32-bit form: nothing allocated, used = 0.
static void test_fallback(void **state) {
    (void)state;
    static const int counts[] = {40, 3, 0}, many[] = {300};
    kvq_err err = {0};
    kvq_hqx_esc16 x;
    for (int why = 0; why < 7; why++) {
        const int64_t cols = why == 2 ? 32768 : 14336, rows = why == 5 ? 2000 : 50;
        kvq_hqx w = bare(rows, cols);
        if (why == 0) { // no escapes at all
            w.esc = malloc(4);
        } else if (why == 2) { // 300 escapes a row over 8 segments: taken; then cols_p 32800 (9): kept
            fill(&w, many, 1, 0, 52);
            assert_int_equal(kvq_hqx_esc16_build(&w, &x, &err), KVQ_OK);
            assert_int_equal(x.used, 1);
            kvq_hqx_esc16_free(&x);
            w.cols = w.cols_p = 32800;
        } else if (why == 5) { // 1 escape a row over 4 segments: 3 starts a row cost more than 2 bytes an entry save
            static const int one[] = {1};
            fill(&w, one, 1, 0, 77);
        } else {
            fill(&w, counts, 3, why == 4 ? 20 : 0, 50 + why);
        }
        if (why == 1 || why == 3) { // the same tensor unchanged takes the 16-bit form
            assert_int_equal(kvq_hqx_esc16_build(&w, &x, &err), KVQ_OK);
            assert_int_equal(x.used, 1);
            kvq_hqx_esc16_free(&x);
        }
        if (why == 1) { // a row's entries out of segment order
            w.esc[w.esc_row[0] + 5] = kvq_hqx_esc_pack((uint32_t)cols - 2, 1); // then back to lower segments
        }
        if (why == 3) // row 3's last entry at a column beyond the last segment
            w.esc[w.esc_row[4] - 1] = kvq_hqx_esc_pack(4 * KVQ_HQX_ESC16_SEG + 5, 1);
        if (why == 6) { // the CPU's compacted form
            free(w.esc_row);
            w.esc_row = NULL;
        }
        assert_int_equal(kvq_hqx_esc16_build(&w, &x, &err), KVQ_OK);
        if (x.used) fail_msg("case %d: the 16-bit form was built", why);
        assert_null(x.e16);
        assert_null(x.seg);
        assert_null(x.big);
        if (w.esc_row) assert_int_equal(kvq_hqx_esc_dev_bytes(&w, &x), kvq_hqx_esc_dev_bytes(&w, NULL));
        bare_free(&w);
    }
    // entries within a segment need not ascend (the order is kept, read back as it is)
    kvq_hqx w = bare(50, 14336);
    fill(&w, counts, 3, 0, 99);
    const uint32_t t = w.esc[w.esc_row[0]];
    w.esc[w.esc_row[0]] = w.esc[w.esc_row[0] + 1];
    w.esc[w.esc_row[0] + 1] = t;
    const int same_seg = kvq_hqx_esc_col(w.esc[w.esc_row[0]]) >> 12 == kvq_hqx_esc_col(t) >> 12;
    assert_int_equal(kvq_hqx_esc16_build(&w, &x, &err), KVQ_OK);
    if (same_seg) check_same(&w, &x);
    else assert_int_equal(x.used, 0);
    kvq_hqx_esc16_free(&x);
    kvq_hqx_esc16_free(NULL);
    bare_free(&w);
}

// The packer's own escapes: E8 4.0 at width 4 on a 64 × 14336 Gaussian tensor (the 8B's down
// shape, narrowed): the 16-bit form taken, every entry read back exactly; the device bytes of
// both forms (kvq_hqx_gpu_bytes) differ by the escapes' alone.
static void test_packed(void **state) {
    (void)state;
    const int64_t rows = 64, cols = 14336;
    float *x = malloc(sizeof(float) * rows * cols);
    uint64_t s = 7;
    for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)(0.02 * gauss(&s));
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 4.0);
    kvq_codec_input in = {NULL, x, rows, cols, 1, 0, NULL};
    kvq_encoded e;
    kvq_err err = {0};
    kvq_hq_header h;
    assert_int_equal(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err), KVQ_OK);
    assert_int_equal(kvq_hq_header_parse(e.params, rows, cols, &h, &err), KVQ_OK);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int k = 0; k < e.n_blob; k++) v[k] = (kvq_blob_view){e.blob[k].role, e.blob[k].data, e.blob[k].size};
    kvq_hqx w;
    assert_int_equal(kvq_hq_pack(&h, v, e.n_blob, 4, 0, &w, &err), KVQ_OK);
    kvq_hqx_esc16 x16;
    assert_int_equal(kvq_hqx_esc16_build(&w, &x16, &err), KVQ_OK);
    const int64_t n = w.esc_row[rows];
    fprintf(stderr, "test_hqx_esc16: packed e8 4.0 w4 %lld x %lld: %lld escapes (%.2f %%), %lld big; device bytes %zu -> %zu\n",
            (long long)rows, (long long)cols, (long long)n, 100.0 * (double)n / (double)(rows * cols), (long long)x16.n_big,
            kvq_hqx_gpu_bytes(&w, NULL), kvq_hqx_gpu_bytes(&w, &x16));
    assert_true(n > rows * cols / 100);
    check_same(&w, &x16);
    assert_int_equal(kvq_hqx_gpu_bytes(&w, NULL) - kvq_hqx_gpu_bytes(&w, &x16),
                     kvq_hqx_esc_dev_bytes(&w, NULL) - kvq_hqx_esc_dev_bytes(&w, &x16));
    kvq_hqx_esc16_free(&x16);
    kvq_hqx_free(&w);
    kvq_encoded_free(&e);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_random_rows), cmocka_unit_test(test_delta_limits),
                                       cmocka_unit_test(test_fallback), cmocka_unit_test(test_packed)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
