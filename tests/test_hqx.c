// Tests for HyperQuant's execution layout (kernels/hq_layout.h "hqx", hq_pack.c) and the
// products from it (kernels/cpu/hqx.c): for every lattice and several rates (nibbles with
// escapes, and bytes), W·x from the packed form against W decoded by the reference decoder
// and multiplied in double; exact mode within 1e-5, int8 mode within its bound; every ISA
// path against the scalar reference on the same inputs; batches of 1..7 tokens; padded
// columns; zero tiles; corrupt streams and unpackable tensors refused.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <cmocka.h>

#include "kernels/cpu/hqx.h"
#include "libconv/codec/hyperquant/hq_pack.h"
#include "libconv/codec/hyperquant/hyperquant.h"
#include "libconv/codec/rtn.h"
#include "tests/testrng.h"

typedef struct {
    kvq_encoded e;
    kvq_hq_header h;
    kvq_blob_view v[KVQ_MAX_BLOBS];
    float *w; // decoded (rows, cols)
} enc_t;

static void encode(enc_t *E, kvq_lattice lat, double bps, const float *x, int64_t rows, int64_t cols, uint64_t seed) {
    kvq_hq_opts o = kvq_hq_opts_default(lat, bps);
    kvq_codec_input in = {NULL, x, rows, cols, seed, 1, NULL};
    kvq_err err = {0};
    assert_int_equal(kvq_hq_encode(&o, &in, &E->e, NULL, NULL, &err), KVQ_OK);
    assert_int_equal(kvq_hq_header_parse(E->e.params, rows, cols, &E->h, &err), KVQ_OK);
    for (int i = 0; i < E->e.n_blob; i++) E->v[i] = (kvq_blob_view){E->e.blob[i].role, E->e.blob[i].data, E->e.blob[i].size};
    E->w = malloc(sizeof(float) * rows * cols);
    assert_int_equal(kvq_hq_decode_ref(&E->h, E->v, E->e.n_blob, E->w, &err), KVQ_OK);
}

static void enc_free(enc_t *E) {
    kvq_encoded_free(&E->e);
    free(E->w);
}

// Relative L2 error of y against the double reference yr over n values.
static double rel_err(const float *y, const double *yr, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (y[i] - yr[i]) * (y[i] - yr[i]);
        den += yr[i] * yr[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

// Packs, runs every mode × ISA on n_tok tokens and checks the bounds. Returns the number of
// escapes so callers can check that the case exercised them.
static uint32_t check_packed(kvq_hqx w, const float *Wd, int n_tok, uint64_t seed, double int8_bound);
static int g_t128_checked; // layouts whose two AVX2 one-token bodies were compared

static uint32_t check_products(enc_t *E, int vbits, int n_tok, uint64_t seed, double int8_bound) {
    kvq_err err = {0};
    kvq_hqx w;
    assert_int_equal(kvq_hq_pack(&E->h, E->v, E->e.n_blob, vbits, 2, &w, &err), KVQ_OK);
    if (vbits) assert_int_equal(w.vbits, vbits);
    return check_packed(w, E->w, n_tok, seed, int8_bound);
}

// Every product of packed w against Wd (the codec's own decode) × x in double; frees w.
static uint32_t check_packed(kvq_hqx w, const float *Wd, int n_tok, uint64_t seed, double int8_bound) {
    const int64_t rows = w.rows, cols = w.cols;
    float *x = malloc(sizeof(float) * cols * n_tok);
    for (int64_t i = 0; i < cols * n_tok; i++) x[i] = (float)gauss(&seed);
    double *yr = malloc(sizeof(double) * rows * n_tok);
    for (int k = 0; k < n_tok; k++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t c = 0; c < cols; c++) s += (double)Wd[r * cols + c] * x[k * cols + c];
            yr[k * rows + r] = s;
        }
    size_t ab = kvq_hqx_act_bytes(&w);
    uint8_t *buf = aligned_alloc(64, ab * n_tok);
    kvq_hqx_act *act = malloc(sizeof *act * n_tok);
    for (int k = 0; k < n_tok; k++) {
        kvq_hqx_act_init(&w, buf + ab * k, &act[k]);
        kvq_hqx_prep(&w, x + k * cols, &act[k]);
    }
    float *y = malloc(sizeof(float) * rows * n_tok), *yref = malloc(sizeof(float) * rows * n_tok);
    kvq_hqx_isa best = kvq_hqx_isa_best();
    for (int mode = 0; mode < 2; mode++) {
        kvq_hqx_matmul(&w, act, n_tok, yref, rows, mode, KVQ_HQX_ISA_REF, 1);
        double e = rel_err(yref, yr, (size_t)rows * n_tok);
        if (mode == KVQ_HQX_EXACT) assert_true(e <= 2e-6);
        else assert_true(e <= int8_bound);
        for (int isa = KVQ_HQX_ISA_AVX2; isa <= (int)best; isa++) {
            memset(y, 0xff, sizeof(float) * rows * n_tok);
            kvq_hqx_matmul(&w, act, n_tok, y, rows, mode, isa, 2);
            // same integer tile sums: only the float order over tiles differs
            double d = 0, n = 0;
            for (int64_t i = 0; i < rows * n_tok; i++) {
                d += ((double)y[i] - yref[i]) * ((double)y[i] - yref[i]);
                n += (double)yref[i] * yref[i];
            }
            if (sqrt(d / (n > 0 ? n : 1)) > 2e-6) fprintf(stderr, "lat %d vbits %d mode %d isa %d tok %d err %g y0 %g ref %g\n", w.lat, w.vbits, mode, isa, n_tok, sqrt(d / (n > 0 ? n : 1)), y[0], yref[0]);
            assert_true(sqrt(d / (n > 0 ? n : 1)) <= 2e-6);
        }
    }
    // the AVX2 one-token product's two bodies (generic, tile 128): the same bits
    if (best >= KVQ_HQX_ISA_AVX2 && w.tile == 128) {
        const int was = kvq_hqx_avx2_t128(0);
        for (int k = 0; k < n_tok; k++) kvq_hqx_matmul(&w, &act[k], 1, yref + k * rows, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_AVX2, 1);
        kvq_hqx_avx2_t128(1);
        memset(y, 0xff, sizeof(float) * rows * n_tok);
        for (int k = 0; k < n_tok; k++) kvq_hqx_matmul(&w, &act[k], 1, y + k * rows, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_AVX2, 2);
        kvq_hqx_avx2_t128(was);
        assert_memory_equal(y, yref, sizeof(float) * rows * n_tok);
        g_t128_checked++;
    }
    // AUTO takes the one-token body of the cpuid rule (kvq_hqx_isa_one_token): the same bits
    if (best >= KVQ_HQX_ISA_AVX2) {
        kvq_hqx_matmul(&w, act, 1, yref, rows, KVQ_HQX_INT8, kvq_hqx_isa_one_token(), 1);
        memset(y, 0xff, sizeof(float) * rows);
        kvq_hqx_matmul(&w, act, 1, y, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_AUTO, 2);
        assert_memory_equal(y, yref, sizeof(float) * rows);
    }
    // the batched VNNI product (tokens in the lanes): the reference int8 outputs bit for bit
    // (GCC keeps the reference's separate multiply and add; clang may contract them into an
    // FMA there, so under clang the bound is the float order's)
    if (kvq_hqx_gemm_ok(&w)) {
        kvq_hqx_matmul(&w, act, n_tok, yref, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_REF, 1);
        void *gs = aligned_alloc(64, (kvq_hqx_gemm_scratch(&w, n_tok) + 63) / 64 * 64);
        void *tb = aligned_alloc(64, (kvq_hqx_gemm_thread_bytes(&w, n_tok) + 63) / 64 * 64);
        kvq_hqx_gemm_pack(&w, act, n_tok, gs);
        memset(y, 0xff, sizeof(float) * rows * n_tok);
        kvq_hqx_gemm_rows(&w, act, n_tok, gs, y, rows, 0, 4 * (rows / 8), tb); // two calls: row ranges
        kvq_hqx_gemm_rows(&w, act, n_tok, gs, y, rows, 4 * (rows / 8), rows, tb);
#ifdef __clang__
        double d = 0, n2 = 0;
        for (int64_t i = 0; i < rows * n_tok; i++) {
            d += ((double)y[i] - yref[i]) * ((double)y[i] - yref[i]);
            n2 += (double)yref[i] * yref[i];
        }
        assert_true(sqrt(d / (n2 > 0 ? n2 : 1)) <= 1e-6);
#else
        assert_memory_equal(y, yref, sizeof(float) * rows * n_tok);
#endif
        free(gs);
        free(tb);
    }
    // row lookups (packed embeddings) are bit-identical to the reference decoder
    float *row = malloc(sizeof(float) * cols);
    for (int64_t r = 0; r < rows; r++) {
        kvq_hqx_row_f32(&w, r, row);
        assert_memory_equal(row, Wd + r * cols, sizeof(float) * cols);
    }
    free(row);
    uint32_t n_esc = w.esc_row[rows];
    // memory held: the arrays the layout promises, nothing else
    size_t n = (size_t)(rows * w.cols_p);
    size_t expect = (w.vbits == 8 ? n : n / 2) + n / 8 * (size_t)kvq_hqx_planes(w.vbits) + (w.cb ? n / 64 : 0) +
                    n / w.tile * (w.scode ? 1 : 4) + (w.scode ? 1024 : 0) + (w.zero ? n / w.tile * 4 : 0) +
                    (size_t)(rows + 1) * 4 + (size_t)n_esc * 4;
    assert_int_equal(kvq_hqx_bytes(&w), expect);
    kvq_hqx_free(&w);
    free(x); free(yr); free(buf); free(act); free(y); free(yref);
    return n_esc;
}

static float *gauss_matrix(int64_t rows, int64_t cols, uint64_t seed) {
    float *x = malloc(sizeof(float) * rows * cols);
    for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)(0.02 * gauss(&seed));
    return x;
}

// The batched VNNI product over several 16-token blocks (37 tokens: a partial last block),
// widths 4 (with escapes) and 5, E8 and D4, tiles of 128 and 256.
static void test_gemm_many_tokens(void **state) {
    (void)state;
    float *x = gauss_matrix(30, 512, 13);
    const kvq_lattice lats[] = {KVQ_LAT_E8, KVQ_LAT_D4};
    for (int l = 0; l < 2; l++) {
        enc_t E;
        encode(&E, lats[l], 4.0, x, 30, 512, 200 + l);
        check_products(&E, 4, 37, 31, 0.02);
        check_products(&E, 5, 37, 32, 0.02);
        check_products(&E, 0, 16, 33, 0.02);
        enc_free(&E);
    }
    free(x);
    if (kvq_hqx_isa_best() == KVQ_HQX_ISA_REF) printf("  (neither AVX2 nor AVX-512 VNNI here: the batched product was not run)\n");
    else printf("  (batched product on %s)\n", kvq_hqx_isa_name(kvq_hqx_isa_best()));
}

static void test_every_lattice_and_rate(void **state) {
    (void)state;
    const kvq_lattice lats[] = {KVQ_LAT_E8, KVQ_LAT_D4, KVQ_LAT_A2, KVQ_LAT_Z};
    const double rates[] = {2.0, 4.0, 6.0};
    float *x = gauss_matrix(24, 256, 11);
    for (int l = 0; l < 4; l++)
        for (int r = 0; r < 3; r++) {
            enc_t E;
            encode(&E, lats[l], rates[r], x, 24, 256, 100 + l);
            for (int tok = 1; tok <= 5; tok += 4) {
                check_products(&E, 0, tok, 7 + tok, 0.02);
                check_products(&E, 5, tok, 8 + tok, 0.02);
                check_products(&E, 6, tok, 10 + tok, 0.02);
                check_products(&E, 7, tok, 11 + tok, 0.02);
                check_products(&E, 8, tok, 9 + tok, 0.02);
            }
            enc_free(&E);
        }
    free(x);
    if (kvq_hqx_isa_best() >= KVQ_HQX_ISA_AVX2) assert_true(g_t128_checked > 0);
    printf("  (AVX2 one-token bodies, generic and tile-128, compared on %d layouts)\n", g_t128_checked);
}

// The load-time transcoder's AVX2 chunk path gives the scalar loop's bytes: every array of
// the layout, for every lattice, rates 2..6, widths 4..8 (escapes at the narrow ones), a
// padded width (300 columns), 1 and 2 threads.
static void test_pack_simd(void **state) {
    (void)state;
    const kvq_lattice lats[] = {KVQ_LAT_E8, KVQ_LAT_D4, KVQ_LAT_A2, KVQ_LAT_Z};
    const double rates[] = {2.0, 3.0, 4.0, 6.0};
    const int64_t shapes[][2] = {{24, 256}, {9, 300}};
    int compared = 0, with_esc = 0;
    for (int si = 0; si < 2; si++) {
        float *x = gauss_matrix(shapes[si][0], shapes[si][1], 41 + si);
        for (int l = 0; l < 4; l++)
            for (int r = 0; r < 4; r++) {
                enc_t E;
                encode(&E, lats[l], rates[r], x, shapes[si][0], shapes[si][1], 300 + l);
                for (int vb = 4; vb <= 8; vb++) {
                    kvq_hqx a, b;
                    kvq_err err = {0};
                    const int was = kvq_hq_pack_simd(0);
                    kvq_status sa = kvq_hq_pack(&E.h, E.v, E.e.n_blob, vb, 1, &a, &err);
                    kvq_hq_pack_simd(1);
                    kvq_status sb = kvq_hq_pack(&E.h, E.v, E.e.n_blob, vb, 2, &b, &err);
                    kvq_hq_pack_simd(was);
                    assert_int_equal(sa, sb);
                    if (sa) continue; // values beyond this width's escapes: refused by both
                    const size_t n = (size_t)(a.rows * a.cols_p), tiles = n / (size_t)a.tile;
                    assert_memory_equal(a.q, b.q, a.vbits == 8 ? n : n / 2);
                    if (kvq_hqx_planes(a.vbits)) assert_memory_equal(a.hb, b.hb, n / 64 * 8 * (size_t)kvq_hqx_planes(a.vbits));
                    if (a.cb) assert_memory_equal(a.cb, b.cb, n / 64);
                    if (a.scode) assert_memory_equal(a.scode, b.scode, tiles);
                    else assert_memory_equal(a.scale, b.scale, tiles * sizeof(float));
                    assert_memory_equal(a.esc_row, b.esc_row, (size_t)(a.rows + 1) * 4);
                    if (a.esc_row[a.rows]) assert_memory_equal(a.esc, b.esc, (size_t)a.esc_row[a.rows] * 4);
                    with_esc += a.esc_row[a.rows] > 0;
                    compared++;
                    kvq_hqx_free(&a);
                    kvq_hqx_free(&b);
                }
                enc_free(&E);
            }
        free(x);
    }
    assert_true(compared > 100 && with_esc > 5);
    printf("  (%d layouts transcoded both ways, %d with escapes)\n", compared, with_esc);
}

// The automatic width is the narrowest whose escapes stay within n/400, found by trying every
// width in full; the sampling that skips widths the sample rules out (hq_pack.c first_width)
// must not change it: small tensors (every group sampled) and larger ones (one group in 32).
static void test_auto_width(void **state) {
    (void)state;
    const kvq_lattice lats[] = {KVQ_LAT_E8, KVQ_LAT_D4, KVQ_LAT_Z};
    const double rates[] = {3.0, 3.5, 4.0, 5.0};
    const int64_t shapes[][2] = {{24, 256}, {512, 1024}};
    int skipped = 0;
    for (int si = 0; si < 2; si++) {
        float *x = gauss_matrix(shapes[si][0], shapes[si][1], 77 + si);
        for (int l = 0; l < 3; l++)
            for (int r = 0; r < 4; r++) {
                enc_t E;
                encode(&E, lats[l], rates[r], x, shapes[si][0], shapes[si][1], 500 + l);
                const int64_t n = E.h.rows * E.h.cols_p;
                kvq_err err = {0};
                int expect = 0;
                for (int vb = 4; vb <= 8 && !expect; vb++) {
                    kvq_hqx t;
                    if (kvq_hq_pack(&E.h, E.v, E.e.n_blob, vb, 1, &t, &err) != KVQ_OK) continue;
                    if (vb == 8 || t.esc_row[t.rows] <= n / 400) expect = vb;
                    skipped += vb == 4 && !expect;
                    kvq_hqx_free(&t);
                }
                kvq_hqx a;
                assert_int_equal(kvq_hq_pack(&E.h, E.v, E.e.n_blob, 0, 2, &a, &err), KVQ_OK);
                assert_int_equal(a.vbits, expect);
                kvq_hqx_free(&a);
                enc_free(&E);
            }
        free(x);
    }
    assert_true(skipped > 0); // some cases need more than nibbles (E8 at 4 bits)
}

// At 4 bits E8's nibbles overflow for about 1 % of weights: the escapes must be exercised.
static void test_escapes_and_heavy_tails(void **state) {
    (void)state;
    uint64_t s = 5;
    int64_t rows = 16, cols = 512;
    float *x = malloc(sizeof(float) * rows * cols);
    for (int64_t i = 0; i < rows * cols; i++) {
        double g = gauss(&s);
        x[i] = (float)(i % 97 == 0 ? 30 * g : g); // outliers, as real weights have
    }
    enc_t E;
    encode(&E, KVQ_LAT_E8, 5.0, x, rows, cols, 3);
    uint32_t n_esc = check_products(&E, 4, 3, 21, 0.02);
    assert_true(n_esc > 0);
    assert_true(check_products(&E, 4, 1, 23, 0.02) > 0); // the one-token decode kernels
    assert_true(check_products(&E, 5, 3, 22, 0.02) > 0);
    enc_free(&E);
    free(x);
}

// y of every mode and ISA path (one token and n_tok, the batched VNNI product where the CPU has
// it, row lookups) from layout a and from layout b: the same bits.
static void same_products(const kvq_hqx *a, const kvq_hqx *b, int n_tok, uint64_t seed) {
    const int64_t rows = a->rows, cols = a->cols;
    float *x = malloc(sizeof(float) * cols * n_tok), *ya = malloc(sizeof(float) * rows * n_tok),
          *yb = malloc(sizeof(float) * rows * n_tok), *ra = malloc(sizeof(float) * cols), *rb = malloc(sizeof(float) * cols);
    for (int64_t i = 0; i < cols * n_tok; i++) x[i] = (float)gauss(&seed);
    const size_t ab = kvq_hqx_act_bytes(a);
    uint8_t *buf = aligned_alloc(64, ab * n_tok);
    kvq_hqx_act *act = malloc(sizeof *act * n_tok);
    for (int k = 0; k < n_tok; k++) {
        kvq_hqx_act_init(a, buf + ab * k, &act[k]);
        kvq_hqx_prep(a, x + k * cols, &act[k]);
    }
    for (int mode = 0; mode < 2; mode++)
        for (int isa = KVQ_HQX_ISA_REF; isa <= (int)kvq_hqx_isa_best(); isa++)
            for (int nt = 1; nt <= n_tok; nt += n_tok - 1 > 0 ? n_tok - 1 : 1) {
                memset(ya, 0xff, sizeof(float) * rows * n_tok);
                memset(yb, 0xff, sizeof(float) * rows * n_tok);
                kvq_hqx_matmul(a, act, nt, ya, rows, mode, isa, 2);
                kvq_hqx_matmul(b, act, nt, yb, rows, mode, isa, 2);
                assert_memory_equal(ya, yb, sizeof(float) * rows * nt);
            }
    if (kvq_hqx_gemm_ok(a)) {
        void *gs = aligned_alloc(64, (kvq_hqx_gemm_scratch(a, n_tok) + 63) / 64 * 64);
        void *tb = aligned_alloc(64, (kvq_hqx_gemm_thread_bytes(a, n_tok) + 63) / 64 * 64);
        kvq_hqx_gemm_pack(a, act, n_tok, gs);
        kvq_hqx_gemm_rows(a, act, n_tok, gs, ya, rows, 0, rows, tb);
        kvq_hqx_gemm_rows(b, act, n_tok, gs, yb, rows, 0, rows, tb);
        assert_memory_equal(ya, yb, sizeof(float) * rows * n_tok);
        free(gs);
        free(tb);
    }
    for (int64_t r = 0; r < rows; r++) {
        kvq_hqx_row_f32(a, r, ra);
        kvq_hqx_row_f32(b, r, rb);
        assert_memory_equal(ra, rb, sizeof(float) * cols);
    }
    free(x); free(ya); free(yb); free(ra); free(rb); free(buf); free(act);
}

// The compact CPU form (kvq_hqx_compact: a bit per row for escapes, the scale table's used
// entries) gives the packed form's products bit for bit on random matrices, with escapes in some
// rows and none in others, and with none at all; its bytes are the packed form's less the
// (rows + 1)-word escape index and the unused table entries.
static void test_compact(void **state) {
    (void)state;
    uint64_t s = 9;
    const int64_t rows = 37, cols = 512;
    float *x = malloc(sizeof(float) * rows * cols);
    for (int64_t i = 0; i < rows * cols; i++) {
        const double g = gauss(&s);
        x[i] = (float)((i / cols) % 3 == 1 ? 0.0 : g); // every third row zero: zero tiles, no escapes there
    }
    const struct { int lat; double rate; int vbits; } cases[] = {
        {KVQ_LAT_E8, 5.0, 4}, {KVQ_LAT_E8, 4.0, 4}, {KVQ_LAT_E8, 4.0, 5}, {KVQ_LAT_D4, 4.0, 0}, {KVQ_LAT_E8, 3.0, 8}};
    int with_esc = 0, without = 0, partial = 0; // partial: escapes in some rows only
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        enc_t E;
        encode(&E, cases[c].lat, cases[c].rate, x, rows, cols, 5 + c);
        kvq_err err = {0};
        kvq_hqx a, b;
        assert_int_equal(kvq_hq_pack(&E.h, E.v, E.e.n_blob, cases[c].vbits, 2, &a, &err), KVQ_OK);
        assert_int_equal(kvq_hq_pack(&E.h, E.v, E.e.n_blob, cases[c].vbits, 2, &b, &err), KVQ_OK);
        const size_t before = kvq_hqx_bytes(&b);
        assert_int_equal(kvq_hqx_compact(&b), 0);
        assert_int_equal(kvq_hqx_compact(&b), 0); // a second call changes nothing
        assert_null(b.esc_row);
        assert_true(b.n_lut >= 1 && b.n_lut <= 256);
        const int64_t ne = kvq_hqx_esc_count(&a);
        assert_int_equal(kvq_hqx_esc_count(&b), ne);
        assert_int_equal(kvq_hqx_bytes(&b), before - (size_t)(rows + 1) * 4 - 4 * (size_t)(256 - b.n_lut) +
                                                (ne ? (size_t)(rows + 7) / 8 + 4 * (size_t)ne : 0));
        int rows_esc = 0;
        for (int64_t r = 0; r < rows; r++) { // both indices give each row the same escapes
            uint32_t a0, a1, b0, b1;
            assert_int_equal(kvq_hqx_esc_range(&a, r, &a0, &a1), kvq_hqx_esc_range(&b, r, &b0, &b1));
            assert_int_equal(a1 - a0, b1 - b0); // the same entries (an empty range may start anywhere)
            if (a1 > a0) assert_int_equal(a0, b0);
            rows_esc += a1 > a0;
        }
        if (ne) assert_true(rows_esc > 0);
        with_esc += ne > 0, without += ne == 0, partial += ne > 0 && rows_esc < rows;
        same_products(&a, &b, 19, 40 + c);
        kvq_hqx_free(&a);
        kvq_hqx_free(&b);
        enc_free(&E);
    }
    printf("  (compact form: %d layouts with escapes, %d with rows without, %d with none)\n", with_esc, partial, without);
    assert_true(with_esc >= 2 && partial >= 1 && without >= 1);
    free(x);
}

// The integer sums at their extremes, where int16 partial sums (AVX2 maddubs) would overflow
// first: hand-made layouts whose every stored value is the largest (or smallest) the width
// holds, coset bits all set, against activations of all +127, all −127, alternating and
// random int8 codes. Every ISA path, one token (decode kernels) and 19 tokens (the batched
// product), equals the reference; the batched product bit for bit under GCC.
// The decode product's body: the best ISA except AVX2 on Intel CPUs with VNNI (measured
// faster there); an override takes a body the CPU has, AUTO restores the rule.
static void test_one_token_rule(void **state) {
    (void)state;
    const kvq_hqx_isa best = kvq_hqx_isa_best(), rule = kvq_hqx_isa_one_token();
    assert_true(rule <= best);
    assert_int_equal(rule, best == KVQ_HQX_ISA_VNNI && __builtin_cpu_is("intel") ? KVQ_HQX_ISA_AVX2 : best);
    kvq_hqx_set_one_token(KVQ_HQX_ISA_AVX2);
    assert_int_equal(kvq_hqx_isa_one_token(), best >= KVQ_HQX_ISA_AVX2 ? KVQ_HQX_ISA_AVX2 : best);
    kvq_hqx_set_one_token(KVQ_HQX_ISA_VNNI);
    assert_int_equal(kvq_hqx_isa_one_token(), best);
    kvq_hqx_set_one_token(KVQ_HQX_ISA_AUTO);
    assert_int_equal(kvq_hqx_isa_one_token(), rule);
    printf("  one-token product on %s (best ISA %s)\n", kvq_hqx_isa_name(rule), kvq_hqx_isa_name(best));
}

static void test_extreme_sums(void **state) {
    (void)state;
    const int cases[][2] = {{KVQ_HQ_LAT_E8, 4}, {KVQ_HQ_LAT_E8, 5}, {KVQ_HQ_LAT_E8, 6}, {KVQ_HQ_LAT_E8, 7},
                            {KVQ_HQ_LAT_D4, 4}, {KVQ_HQ_LAT_D4, 6}, {KVQ_HQ_LAT_D4, 7}, {KVQ_HQ_LAT_Z, 5}};
    // tiles of 512 (8 chunks: the generic AVX2 body's int16 flushes) and of 128 (the tile-128
    // body's single widening of two chunks)
    for (int ti = 0; ti < 16; ti++) {
    const int ci = ti % 8;
    const int64_t rows = 12, cols = 1024, T = ti < 8 ? 512 : 128, tiles = cols / T, n_tok = 19;
    {
        kvq_hqx w;
        memset(&w, 0, sizeof w);
        w.lat = cases[ci][0], w.rotate = 1, w.tile = (int)T, w.vbits = cases[ci][1];
        w.rows = rows, w.cols = w.cols_p = cols, w.seed = 9;
        const int np = kvq_hqx_planes(w.vbits), m = kvq_hqx_mult(w.lat), off = kvq_hqx_off(w.vbits);
        const size_t nq = (size_t)(rows * cols) / 2, nch = (size_t)(rows * cols) / 64;
        w.q = kvq_hqx_alloc(nq);
        w.hb = np ? kvq_hqx_alloc(nch * np * 8) : NULL;
        w.cb = w.lat == KVQ_HQ_LAT_E8 ? malloc(nch) : NULL;
        w.scale = malloc(sizeof(float) * rows * tiles);
        w.esc_row = calloc(rows + 1, 4);
        w.esc = malloc(4);
        for (int64_t r = 0; r < rows; r++) { // rows alternate: all largest, all smallest, mixed
            const int kind = r % 3;
            for (size_t b = 0; b < nq / rows; b++) w.q[r * (nq / rows) + b] = kind == 0 ? 0xff : kind == 1 ? 0 : 0x0f;
            for (size_t c = 0; c < nch / rows * np; c++) w.hb[r * (nch / rows * np) + c] = kind == 0 ? ~0ull : kind == 1 ? 0 : 0xffffffffull;
            if (w.cb)
                for (size_t c = 0; c < nch / rows; c++) w.cb[r * (nch / rows) + c] = kind == 1 ? 0 : 0xff;
            for (int64_t j = 0; j < tiles; j++) w.scale[r * tiles + j] = 0.001f * (float)(1 + j + r);
        }
        // activations: prepared from random x, then the int8 codes overwritten and the side
        // data recomputed from its definition (test_prep_paths checks prep against it)
        const size_t ab = kvq_hqx_act_bytes(&w);
        uint8_t *buf = aligned_alloc(64, ab * n_tok);
        kvq_hqx_act *act = malloc(sizeof *act * n_tok);
        float *x = malloc(sizeof(float) * cols);
        uint64_t seed = 7;
        for (int k = 0; k < n_tok; k++) {
            for (int64_t i = 0; i < cols; i++) x[i] = (float)gauss(&seed);
            kvq_hqx_act_init(&w, buf + ab * k, &act[k]);
            kvq_hqx_prep(&w, x, &act[k]);
            kvq_hqx_act *a = &act[k];
            for (int64_t i = 0; i < cols; i++)
                a->xq[i] = (int8_t)(k % 4 == 0 ? 127 : k % 4 == 1 ? -127 : k % 4 == 2 ? (i % 2 ? 127 : -127) : a->xq[i]);
            for (int64_t j = 0; j < tiles; j++) {
                int32_t sum = 0;
                a->sx[j] = 1.0f / 127;
                for (int l = 0; l < 8; l++) a->zl[8 * j + l] = 0;
                for (int l = 0; l < 16; l++) a->zw[16 * j + l] = 0;
                for (int i = 0; i < T; i++) {
                    const int q = a->xq[j * T + i];
                    sum += q;
                    a->zl[8 * j + (i % 32) / 4] += -off * m * q;
                    a->zw[16 * j + ((i % 128) / 64) * 8 + (i % 32) / 4] += -off * m * q;
                    const int b = i % 128, src = b < 32 ? b : b < 64 ? b + 32 : b < 96 ? b - 32 : b;
                    a->xp[j * T + i] = a->xq[j * T + (i - b) + src];
                }
                for (int v = 0; v < T / 8; v++) {
                    int32_t s8 = 0;
                    for (int i = 0; i < 8; i++) s8 += a->xq[j * T + 8 * v + i];
                    a->s8[(j * T) / 8 + v] = s8;
                }
                a->zt[j] = -off * m * sum;
            }
        }
        float *y = malloc(sizeof(float) * rows * n_tok), *yref = malloc(sizeof(float) * rows * n_tok);
        kvq_hqx_matmul(&w, act, (int)n_tok, yref, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_REF, 1);
        // the reference against an independent sum of c·xq in int64
        for (int k = 0; k < n_tok; k++)
            for (int64_t r = 0; r < rows; r++) {
                double acc = 0;
                for (int64_t j = 0; j < tiles; j++) {
                    int64_t d = 0;
                    for (int i = 0; i < T; i++) {
                        const int64_t gi = r * cols + j * T + i, ch = gi / 64, b = gi % 64;
                        int u = b < 32 ? (w.q[ch * 32 + b] & 15) : (w.q[ch * 32 + b - 32] >> 4);
                        for (int p = 0; p < np; p++) u |= (int)((w.hb[ch * np + p] >> b) & 1) << (4 + p);
                        const int cb = w.cb ? (w.cb[ch] >> (b / 8)) & 1 : 0;
                        d += (int64_t)(m * (u - off) + cb) * act[k].xq[j * T + i];
                    }
                    acc += (double)w.scale[r * tiles + j] * ((double)act[k].sx[j] * (double)d);
                }
                assert_true(fabs(yref[k * rows + r] - acc) <= 1e-5 * (fabs(acc) + 1));
            }
        for (int isa = KVQ_HQX_ISA_AVX2; isa <= (int)kvq_hqx_isa_best(); isa++)
            for (int k = 0; k < n_tok; k++) { // one token at a time: the decode kernels
                float y1[12];
                kvq_hqx_matmul(&w, &act[k], 1, y1, rows, KVQ_HQX_INT8, isa, 1);
                // the float order over lanes and tiles differs (a few ulps of the large terms);
                // one int16 overflow would be off by 2^16 · scale · sx ≥ 0.5
                for (int64_t r = 0; r < rows; r++) assert_true(fabsf(y1[r] - yref[k * rows + r]) <= 1e-5f * (fabsf(yref[k * rows + r]) + 1.0f));
            }
        if (kvq_hqx_gemm_ok(&w)) {
            void *gs = aligned_alloc(64, (kvq_hqx_gemm_scratch(&w, (int)n_tok) + 63) / 64 * 64);
            void *tb = aligned_alloc(64, (kvq_hqx_gemm_thread_bytes(&w, (int)n_tok) + 63) / 64 * 64);
            kvq_hqx_gemm_pack(&w, act, (int)n_tok, gs);
            kvq_hqx_gemm_rows(&w, act, (int)n_tok, gs, y, rows, 0, rows, tb);
            for (int64_t i = 0; i < rows * n_tok; i++)
                assert_true(fabsf(y[i] - yref[i]) <= 1e-6f * (fabsf(yref[i]) + 1e-3f));
#ifndef __clang__
            assert_memory_equal(y, yref, sizeof(float) * rows * n_tok);
#endif
            free(gs);
            free(tb);
        } else // the batched product takes every width but E8's 7 on AVX2 (u' up to 255)
            assert_true(kvq_hqx_isa_best() == KVQ_HQX_ISA_REF || (w.lat == KVQ_HQ_LAT_E8 && w.vbits == 7 &&
                                                                  kvq_hqx_isa_best() == KVQ_HQX_ISA_AVX2));
        kvq_hqx_free(&w);
        free(buf); free(act); free(x); free(y); free(yref);
    }
    }
}

// Padded widths (cols not a multiple of the tile), T = 64 and 7 tokens (a 4-block and a 3-block).
static void test_padding_and_batches(void **state) {
    (void)state;
    const int64_t widths[] = {300, 192, 1408};
    for (int i = 0; i < 3; i++) {
        float *x = gauss_matrix(9, widths[i], 40 + i);
        enc_t E;
        encode(&E, KVQ_LAT_E8, 4.0, x, 9, widths[i], 1);
        for (int tok = 1; tok <= 7; tok++) check_products(&E, 0, tok, 50 + tok, 0.02);
        enc_free(&E);
        free(x);
    }
}

// Zero rows produce zero tiles (scale 0): outputs exactly 0 there.
static void test_zero_tiles(void **state) {
    (void)state;
    float *x = gauss_matrix(8, 128, 77);
    memset(x + 3 * 128, 0, sizeof(float) * 128);
    enc_t E;
    encode(&E, KVQ_LAT_E8, 4.0, x, 8, 128, 2);
    check_products(&E, 0, 2, 5, 0.02);
    kvq_hqx w;
    kvq_err err = {0};
    assert_int_equal(kvq_hq_pack(&E.h, E.v, E.e.n_blob, 0, 1, &w, &err), KVQ_OK);
    assert_true(kvq_hqx_scale(&w, 3) == 0.0f);
    kvq_hqx_free(&w);
    enc_free(&E);
    free(x);
}

// RTN tensors run on the same kernels without rotation: every width the layout takes
// (1..7 bits), groups of 64 and 128, padded widths, 1, 6 and 37 tokens (the batched product
// with zero points, bit for bit); 8 bits and odd groups are refused.
static void test_rtn(void **state) {
    (void)state;
    const int bits[] = {2, 3, 4, 5, 7};
    const int64_t widths[] = {256, 300};
    for (int b = 0; b < 5; b++)
        for (int wi = 0; wi < 2; wi++)
            for (int g = 64; g <= 128; g += 64) {
                int64_t rows = 13, cols = widths[wi];
                float *x = gauss_matrix(rows, cols, 90 + b);
                char spec[32];
                snprintf(spec, sizeof spec, "%d:g%d", bits[b], g);
                json_t *cfg = NULL;
                kvq_err err = {0};
                assert_int_equal(kvq_codec_find("rtn")->parse(spec, &cfg, &err), KVQ_OK);
                kvq_codec_input in = {NULL, x, rows, cols, 1, 1, NULL};
                kvq_encoded e;
                assert_int_equal(kvq_codec_find("rtn")->encode(cfg, &in, &e, &err), KVQ_OK);
                kvq_blob_view v[KVQ_MAX_BLOBS];
                for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
                float *Wd = malloc(sizeof(float) * rows * cols);
                assert_int_equal(kvq_codec_find("rtn")->decode(e.params, v, e.n_blob, rows, cols, Wd, &err), KVQ_OK);
                kvq_hqx w;
                assert_int_equal(kvq_rtn_pack(e.params, v, e.n_blob, rows, cols, &w, &err), KVQ_OK);
                assert_int_equal(w.vbits, bits[b] < 4 ? 4 : bits[b]);
                check_packed(w, Wd, 1, 5, 0.03);
                assert_int_equal(kvq_rtn_pack(e.params, v, e.n_blob, rows, cols, &w, &err), KVQ_OK);
                check_packed(w, Wd, 6, 6, 0.03);
                // the batched int8 product takes RTN's zero points (every width but 8):
                // 37 tokens, three 16-token blocks, the last one partial
                assert_int_equal(kvq_rtn_pack(e.params, v, e.n_blob, rows, cols, &w, &err), KVQ_OK);
                if (kvq_hqx_isa_best() != KVQ_HQX_ISA_REF) assert_true(kvq_hqx_gemm_ok(&w));
                check_packed(w, Wd, 37, 7, 0.03);
                free(Wd);
                kvq_encoded_free(&e);
                json_decref(cfg);
                free(x);
            }
    // 8 bits and a group of 32 have no layout
    const char *bad[] = {"8:g128", "4:g32", "4:g96"};
    for (int i = 0; i < 3; i++) {
        float *x = gauss_matrix(4, 192, 3);
        json_t *cfg = NULL;
        kvq_err err = {0};
        assert_int_equal(kvq_codec_find("rtn")->parse(bad[i], &cfg, &err), KVQ_OK);
        kvq_codec_input in = {NULL, x, 4, 192, 1, 1, NULL};
        kvq_encoded e;
        assert_int_equal(kvq_codec_find("rtn")->encode(cfg, &in, &e, &err), KVQ_OK);
        kvq_blob_view v[KVQ_MAX_BLOBS];
        for (int k = 0; k < e.n_blob; k++) v[k] = (kvq_blob_view){e.blob[k].role, e.blob[k].data, e.blob[k].size};
        kvq_hqx w;
        assert_int_equal(kvq_rtn_pack(e.params, v, e.n_blob, 4, 192, &w, &err), KVQ_ERR_UNSUPPORTED);
        kvq_encoded_free(&e);
        json_decref(cfg);
        free(x);
    }
}

// The activation preparation: the AVX-512 quantizer (where the CPU has it) gives the same
// bytes as the scalar one, on ordinary, padded, zero, huge and non-finite inputs, and the
// side data (8-vector sums, the offset's share per tile and per SIMD lane, the 512-bit
// permutation) equals its definition computed here from the int8 codes.
static void test_prep_paths(void **state) {
    (void)state;
    const kvq_lattice lats[] = {KVQ_LAT_E8, KVQ_LAT_A2, KVQ_LAT_Z};
    const int64_t widths[] = {256, 300, 1024};
    for (int l = 0; l < 3; l++)
        for (int wi = 0; wi < 3; wi++) {
            const int64_t cols = widths[wi];
            float *wm = gauss_matrix(4, cols, 90 + l);
            enc_t E;
            encode(&E, lats[l], 4.0, wm, 4, cols, 5);
            kvq_hqx w;
            kvq_err err = {0};
            assert_int_equal(kvq_hq_pack(&E.h, E.v, E.e.n_blob, 0, 1, &w, &err), KVQ_OK);
            const int64_t tpr = w.cols_p / w.tile;
            uint64_t seed = 300 + wi;
            float *x = malloc(sizeof(float) * cols);
            for (int kind = 0; kind < 4; kind++) {
                for (int64_t i = 0; i < cols; i++) x[i] = (float)gauss(&seed);
                if (kind == 1) for (int64_t i = 0; i < cols && i < 128; i++) x[i] = 0.0f; // a zero tile
                if (kind == 2) { x[3] = NAN; x[cols - 1] = INFINITY; }
                if (kind == 3) for (int64_t i = 0; i < cols; i++) x[i] *= 1e30f;
                size_t ab = kvq_hqx_act_bytes(&w);
                uint8_t *b0 = aligned_alloc(64, ab), *b1 = aligned_alloc(64, ab);
                memset(b0, 0, ab);
                memset(b1, 0, ab);
                kvq_hqx_act a0, a1;
                kvq_hqx_act_init(&w, b0, &a0);
                kvq_hqx_act_init(&w, b1, &a1);
                kvq_hqx_prep_tiles(&w, x, &a0, 0, tpr, KVQ_HQX_ISA_REF);
                kvq_hqx_prep_tiles(&w, x, &a1, 0, tpr / 2, KVQ_HQX_ISA_AUTO); // in two ranges, as threads do
                kvq_hqx_prep_tiles(&w, x, &a1, tpr / 2, tpr, KVQ_HQX_ISA_AUTO);
                assert_memory_equal(b0, b1, ab);
                const int m = w.lat == KVQ_HQ_LAT_E8 ? 2 : 1, off = kvq_hqx_off(w.vbits), T = w.tile;
                for (int64_t j = 0; j < tpr; j++) {
                    int32_t zl[8] = {0}, zw[16] = {0}, sum = 0;
                    for (int i = 0; i < T; i++) {
                        int q = a0.xq[j * T + i];
                        assert_true(q >= -127 && q <= 127);
                        if (kind == 2 && j * T + i == 3) assert_int_equal(q, 0); // NaN -> 0
                        zl[(i % 32) / 4] += q;
                        zw[((i % 128) / 64) * 8 + (i % 32) / 4] += q;
                        sum += q;
                        if (i % 8 == 7) {
                            int32_t s8 = 0;
                            for (int k = i - 7; k <= i; k++) s8 += a0.xq[j * T + k];
                            assert_int_equal(a0.s8[(j * T + i) / 8], s8);
                        }
                        if (T % 128 == 0) { // xp: [0..31], [64..95], [32..63], [96..127] of each 128
                            int b = i % 128, src = b < 32 ? b : b < 64 ? b + 32 : b < 96 ? b - 32 : b;
                            assert_int_equal(a0.xp[j * T + i], a0.xq[j * T + (i - b) + src]);
                        }
                    }
                    assert_int_equal(a0.zt[j], -off * m * sum);
                    for (int k = 0; k < 8; k++) assert_int_equal(a0.zl[8 * j + k], -off * m * zl[k]);
                    for (int k = 0; k < 16; k++) assert_int_equal(a0.zw[16 * j + k], -off * m * zw[k]);
                }
                free(b0);
                free(b1);
            }
            free(x);
            kvq_hqx_free(&w);
            enc_free(&E);
            free(wm);
        }
}

// The layout's array allocator: zeroed, 64-byte aligned, 2 MiB-aligned from 4 MiB on (its own
// huge-page mapping), writable to the last byte, released by kvq_hqx_dealloc (ASan checks).
static void test_alloc(void **state) {
    (void)state;
    const size_t sizes[] = {1, 63, 4096, ((size_t)4 << 20) - 1, (size_t)4 << 20, ((size_t)9 << 20) + 7};
    for (int i = 0; i < 6; i++) {
        uint8_t *p = kvq_hqx_alloc(sizes[i]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        if (sizes[i] >= ((size_t)4 << 20)) assert_int_equal((uintptr_t)p % ((size_t)2 << 20), 0);
        for (size_t j = 0; j < sizes[i]; j += 4093) assert_int_equal(p[j], 0);
        assert_int_equal(p[sizes[i] - 1], 0);
        memset(p, 0xab, sizes[i]);
        kvq_hqx_dealloc(p);
    }
    kvq_hqx_dealloc(NULL);
}

// The GPU's plane-word order (kvq_hqx_gpu_pbit): a bijection of the 64 bit positions; the fast
// transform (nibble transposes) puts every coordinate's bit where kvq_hqx_gpu_pbit says, the
// inverse gives the word back, on single bits and on random words.
static void test_gpu_plane_order(void **state) {
    (void)state;
    uint64_t seen = 0;
    for (int c = 0; c < 64; c++) {
        const int b = kvq_hqx_gpu_pbit(c);
        assert_true(b >= 0 && b < 64);
        assert_true(!((seen >> b) & 1));
        seen |= 1ull << b;
        assert_true(kvq_hqx_hb_gpu(1ull << c) == 1ull << b);
        assert_true(kvq_hqx_hb_std(1ull << b) == 1ull << c);
    }
    assert_true(seen == ~0ull);
    uint64_t z = 0x9E3779B97F4A7C15ull;
    for (int n = 0; n < 1000; n++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t w = z ^ (z >> 29), g = kvq_hqx_hb_gpu(w);
        uint64_t slow = 0;
        for (int c = 0; c < 64; c++) slow |= ((w >> c) & 1) << kvq_hqx_gpu_pbit(c);
        assert_true(g == slow);
        assert_true(kvq_hqx_hb_std(g) == w);
    }
}

static void test_refusals(void **state) {
    (void)state;
    float *x = gauss_matrix(8, 128, 78);
    enc_t E;
    encode(&E, KVQ_LAT_E8, 4.0, x, 8, 128, 2);
    kvq_hqx w;
    kvq_err err = {0};
    // a flipped codes byte must be reported as corruption or at least never read out of bounds
    kvq_blob_view v[KVQ_MAX_BLOBS];
    memcpy(v, E.v, sizeof v);
    for (int i = 0; i < E.e.n_blob; i++)
        if (!strcmp(v[i].role, "codes")) {
            uint8_t *bad = malloc(v[i].size);
            memset(bad, 0, v[i].size); // all zero bits: unary runs longer than any symbol
            v[i].data = bad;
        }
    assert_int_equal(kvq_hq_pack(&E.h, v, E.e.n_blob, 0, 1, &w, &err), KVQ_ERR_FORMAT);
    for (int i = 0; i < E.e.n_blob; i++)
        if (!strcmp(v[i].role, "codes")) free((void *)v[i].data);
    // a cast or int8 mode has no execution layout
    kvq_hq_header h = E.h;
    h.cast = KVQ_CAST_FP8;
    assert_false(kvq_hq_packable(&h));
    assert_int_equal(kvq_hq_pack(&h, E.v, E.e.n_blob, 0, 1, &w, &err), KVQ_ERR_UNSUPPORTED);
    h = E.h;
    h.int8 = 1;
    assert_int_equal(kvq_hq_pack(&h, E.v, E.e.n_blob, 0, 1, &w, &err), KVQ_ERR_UNSUPPORTED);
    enc_free(&E);
    free(x);
}


// A row-blocked tensor (hq_blocks.c: blocks at 2.5, 5.0 and 3.5 bits, so their own widths differ
// and the first block has escapes at nibbles) packs into one layout whose products, in every mode
// and ISA, match the tensor decoded by the codec; the tile scales are floats (one α per block).
// The width is the narrowest whose escapes stay under 0.25 % of the tensor's values, or the one
// asked for. The runtime's parts (kvq_hq_pack_block_parts: up to max layouts of adjacent blocks)
// each match their rows.
static void test_row_blocks_packed(void **state) {
    (void)state;
    const int64_t rows = 72, cols = 512, br = 32; // 32, 32, 8
    const double bps[3] = {2.5, 5.0, 3.5};
    float *x = gauss_matrix(rows, cols, 41);
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 3.0);
    kvq_codec_input in = {NULL, x, rows, cols, 5, 1, NULL};
    kvq_encoded e;
    kvq_err err = {0};
    assert_int_equal(kvq_hq_encode_blocks(&o, bps, 3, br, &in, &e, NULL, &err), KVQ_OK);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
    float *W = malloc(sizeof(float) * rows * cols);
    assert_int_equal(kvq_hq_blocks_decode(e.params, v, e.n_blob, rows, cols, W, -1, &err), KVQ_OK);
    kvq_hq_block *bk = malloc(sizeof *bk * KVQ_HQ_MAX_BLOCKS);
    int n = 0;
    assert_int_equal(kvq_hq_blocks_parse(e.params, rows, cols, v, e.n_blob, bk, &n, &err), KVQ_OK);
    assert_int_equal(n, 3);
    int widest = 0;
    for (int i = 0; i < n; i++) {
        kvq_hqx one;
        assert_int_equal(kvq_hq_pack(&bk[i].h, bk[i].v, bk[i].nv, 0, 1, &one, &err), KVQ_OK);
        if (one.vbits > widest) widest = one.vbits;
        kvq_hqx_free(&one);
    }
    assert_true(widest > 4); // the 5-bit block alone needs more than nibbles
    for (int vb = 0; vb <= 4; vb += 4) { // automatic, and nibbles forced (escapes in every block)
        kvq_hqx w;
        assert_int_equal(kvq_hq_pack_blocks(bk, n, vb, 2, &w, &err), KVQ_OK);
        // automatic: an unblocked tensor's rule over the whole tensor (escapes under 0.25 % of the
        // values), so never wider than the widest block needs alone
        if (vb) assert_int_equal(w.vbits, vb);
        else assert_true(w.vbits <= widest && w.n_esc <= rows * cols / 400);
        assert_int_equal(w.rows, rows);
        assert_null(w.scode);
        assert_non_null(w.scale);
        uint32_t n_esc = check_packed(w, W, 5, 70 + vb, 0.03); // frees w
        if (vb) assert_true(n_esc > 0);
    }
    // the runtime's parts: at most 3 layouts of adjacent blocks, each checked against its rows
    for (int maxp = 1; maxp <= 3; maxp++) {
        kvq_hqx parts[3];
        int64_t row0[3];
        int np = 0;
        assert_int_equal(kvq_hq_pack_block_parts(bk, n, maxp, 2, parts, row0, &np, &err), KVQ_OK);
        assert_true(np >= 1 && np <= maxp);
        int64_t at = 0;
        for (int p = 0; p < np; p++) {
            assert_int_equal(row0[p], at);
            at += parts[p].rows;
            check_packed(parts[p], W + row0[p] * cols, 3, 90 + p, 0.03); // frees the part
        }
        assert_int_equal(at, rows);
        if (maxp == 3) assert_int_equal(np, 3); // three blocks of three natural widths: one part each
    }
    free(bk);
    free(W);
    free(x);
    kvq_encoded_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_lattice_and_rate),
        cmocka_unit_test(test_row_blocks_packed), cmocka_unit_test(test_gemm_many_tokens), cmocka_unit_test(test_escapes_and_heavy_tails),
        cmocka_unit_test(test_extreme_sums), cmocka_unit_test(test_one_token_rule), cmocka_unit_test(test_pack_simd), cmocka_unit_test(test_auto_width),
        cmocka_unit_test(test_padding_and_batches),    cmocka_unit_test(test_compact),    cmocka_unit_test(test_zero_tiles),
        cmocka_unit_test(test_refusals), cmocka_unit_test(test_gpu_plane_order), cmocka_unit_test(test_prep_paths), cmocka_unit_test(test_alloc),    cmocka_unit_test(test_rtn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
