// Tests for libconv/rice: exact bit layout of known codewords, encode/decode round trips
// of random geometric symbol streams for every k, exact parameter choice against a
// direct count, reads past the end flagged as errors, and the fast decoders' word reader
// (kernels/bitword.h) against the reference.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "libconv/quant/lattice.h"
#include "libconv/quant/rice.h"
#include "tests/testrng.h"


static void test_known_bits(void **st) {
    uint8_t buf[4];
    kvq_bitwriter w;
    kvq_bw_init(&w, buf, sizeof buf);
    kvq_bw_rice(&w, 5, 1); // q=2: 0,0,1 then low bit 1 -> bits 0011 -> 0x0C
    assert_int_equal(kvq_bw_bits(&w), 4);
    kvq_bw_rice(&w, 0, 0); // a single 1 bit at position 4 -> 0x1C
    assert_int_equal(kvq_bw_finish(&w), 1);
    assert_int_equal(buf[0], 0x1C);
    kvq_bitreader r;
    kvq_br_init(&r, buf, 1);
    assert_int_equal(kvq_br_rice(&r, 1), 5);
    assert_int_equal(kvq_br_rice(&r, 0), 0);
    assert_int_equal(r.err, 0);
    (void)kvq_br_rice(&r, 0); // only zero padding left: unary runs past the end
    assert_int_equal(r.err, 1);
}

static void test_roundtrip_random(void **st) {
    uint64_t s = 7;
    enum { N = 20000 };
    uint32_t *v = malloc(N * sizeof *v);
    uint8_t *buf = malloc(N * 8);
    for (int k = 0; k <= 12; k++) {
        uint64_t want_bits = 0;
        for (int i = 0; i < N; i++) {
            // geometric-ish with scale ~2^k, plus rare huge values (long unary runs)
            uint64_t r = rng_next(&s);
            uint32_t g = (uint32_t)__builtin_ctzll(r | (1ull << 40));
            v[i] = (uint32_t)((g << k) + (r >> 48) % (1u << k));
            if (i % 997 == 0) v[i] = (uint32_t)(rng_next(&s) % 5000);
            want_bits += kvq_rice_len(v[i], k);
        }
        kvq_bitwriter w;
        kvq_bw_init(&w, buf, N * 8);
        for (int i = 0; i < N; i++) kvq_bw_rice(&w, v[i], k);
        assert_int_equal(kvq_bw_bits(&w), want_bits);
        size_t nb = kvq_bw_finish(&w);
        assert_int_equal(nb, (want_bits + 7) / 8);
        assert_int_equal(w.overflow, 0);
        kvq_bitreader r;
        kvq_br_init(&r, buf, nb);
        for (int i = 0; i < N; i++) assert_int_equal(kvq_br_rice(&r, k), v[i]);
        assert_int_equal(r.err, 0);
    }
    free(v);
    free(buf);
}

// The word reader of the fast decoders (kernels/bitword.h) against the reference reader, fed
// the two ways its users feed it: 32-bit words with zeros above the valid bits (the GPU's
// refill) and 8-byte loads leaving lookahead above them (the CPU's). Same symbols and bits
// consumed, across every k, long unary runs (over 64 bits) and symbols at the limit.
typedef struct {
    const uint8_t *buf;
    size_t size, next; // bytes; next byte to load
    kvq_bitword w;
    int wide;          // 1: 8-byte loads with lookahead; 0: 32-bit words, zeros above n
} word_feed;

static void feed_refill(word_feed *f) {
    if (f->wide) {
        if (f->w.n >= 32) return;
        uint64_t v = 0;
        for (int i = 0; i < 8; i++) v |= (uint64_t)(f->next + i < f->size ? f->buf[f->next + i] : 0) << (8 * i);
        f->w.buf |= v << f->w.n; // bits above the new n: the next bytes (lookahead)
        f->next += (size_t)((63 - f->w.n) >> 3);
        f->w.n |= 56;
    } else if (f->w.n < 32) {
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) v |= (uint32_t)(f->next + i < f->size ? f->buf[f->next + i] : 0) << (8 * i);
        kvq_bitword_push(&f->w, v, 32);
        f->next += 4;
    }
}

static uint32_t feed_rice(word_feed *f, int k, uint32_t limit, int *bad) {
    feed_refill(f);
    uint32_t v;
    int len;
    if (kvq_bitword_rice(&f->w, k, limit, &v, &len, bad)) return v;
    uint64_t q = 0;
    while (kvq_bitword_skip_zeros(&f->w, &q)) feed_refill(f);
    kvq_bitword_end_run(&f->w, &q);
    feed_refill(f);
    return kvq_bitword_rice_low(&f->w, k, q, limit, bad);
}

static void test_word_reader(void **st) {
    uint64_t s = 11;
    enum { N = 4000 };
    const uint32_t limit = 1u << 24;
    uint32_t *v = malloc(N * sizeof *v);
    uint8_t *buf = malloc(N * 8 + 64);
    for (int k = 0; k <= 24; k++) {
        for (int i = 0; i < N; i++) {
            uint64_t r = rng_next(&s);
            uint32_t g = (uint32_t)__builtin_ctzll(r | (1ull << 20));
            v[i] = (uint32_t)((((uint64_t)g << k) + (r >> 40) % (1ull << k)) % limit);
            if (i % 97 == 0) // unary runs of up to 300 bits
                v[i] = (uint32_t)(((rng_next(&s) % 300) << k | (rng_next(&s) % (1ull << k))) % limit);
            if (i % 389 == 0 && k >= 16) v[i] = limit - 1; // the largest valid symbol
        }
        kvq_bitwriter w;
        kvq_bw_init(&w, buf, N * 8 + 64);
        for (int i = 0; i < N; i++) kvq_bw_rice(&w, v[i], k);
        uint64_t bits = kvq_bw_bits(&w);
        size_t nb = kvq_bw_finish(&w);
        assert_int_equal(w.overflow, 0);
        for (int wide = 0; wide < 2; wide++) {
            word_feed f = {buf, nb, 0, {0, 0}, wide};
            int bad = 0;
            for (int i = 0; i < N; i++) assert_int_equal(feed_rice(&f, k, limit, &bad), v[i]);
            assert_int_equal(bad, 0);
            assert_int_equal(8 * (uint64_t)f.next - (uint64_t)f.w.n, bits); // bits consumed
        }
    }
    // a symbol at or over the limit is corruption on both paths: the fast one masks it, the
    // slow one returns 0, and both flag it
    for (int k = 0; k <= 24; k += 24) {
        const uint32_t lim = k ? limit : 64, sym = k ? limit : 100; // k = 24: a 26-bit codeword; k = 0: 100 zeros
        kvq_bitwriter w;
        kvq_bw_init(&w, buf, 64);
        kvq_bw_rice(&w, sym, k);
        size_t nb = kvq_bw_finish(&w);
        for (int wide = 0; wide < 2; wide++) {
            word_feed f = {buf, nb, 0, {0, 0}, wide};
            int bad = 0;
            uint32_t got = feed_rice(&f, k, lim, &bad);
            assert_int_equal(bad, 1);
            assert_int_equal(got, 0); // masked (2^24 & (2^24 - 1)) or refused
        }
    }
    free(v);
    free(buf);
}

static void test_best_k(void **st) {
    uint64_t s = 11;
    for (int scale = 0; scale < 12; scale++) {
        kvq_rice_hist h;
        kvq_rice_hist_clear(&h);
        enum { N = 5000 };
        static uint32_t v[N];
        for (int i = 0; i < N; i++) {
            v[i] = (uint32_t)((rng_next(&s) % 1000) * (1u << scale) / 300);
            kvq_rice_hist_add(&h, v[i]);
        }
        uint64_t best_bits = UINT64_MAX;
        int best = -1;
        for (int k = 0; k <= KVQ_RICE_KMAX; k++) {
            uint64_t b = 0;
            for (int i = 0; i < N; i++) b += kvq_rice_len(v[i], k);
            assert_int_equal(kvq_rice_hist_bits(&h, k), b);
            if (b < best_bits) { best_bits = b; best = k; }
        }
        uint64_t got_bits;
        assert_int_equal(kvq_rice_best_k(&h, &got_bits), best);
        assert_int_equal(got_bits, best_bits);
    }
}

static void test_writer_overflow(void **st) {
    uint8_t buf[2];
    kvq_bitwriter w;
    kvq_bw_init(&w, buf, 2);
    kvq_bw_put(&w, 0xffffffffu, 32);
    kvq_bw_finish(&w);
    assert_int_equal(w.overflow, 1);
}

// Lattice points -> strip -> Rice (per-class parameters chosen by exact count) -> decode
// -> unstrip gives the same points, and the stream length is the predicted bit count.
static void test_strip_rice_stream(void **st) {
    uint64_t s = 21;
    enum { NV = 4000 };
    static int32_t pts[NV * 8];
    static uint32_t sym[NV * 8];
    static uint8_t buf[NV * 8 * 8];
    for (int l = 0; l < KVQ_LAT_COUNT; l++) {
        int n = kvq_lattice_dim((kvq_lattice)l);
        double scale = 2.0 + 10.0 * l;
        kvq_rice_hist h[2];
        kvq_rice_hist_clear(&h[0]);
        kvq_rice_hist_clear(&h[1]);
        for (int v = 0; v < NV; v++) {
            float x[8];
            for (int i = 0; i < n; i++) x[i] = (float)(((double)(rng_next(&s) >> 11) * 0x1.0p-53 - 0.5) * scale);
            if (v % 500 == 0) x[0] = 3000.0f; // an outlier: long unary run
            kvq_lattice_nearest((kvq_lattice)l, x, pts + v * n);
            kvq_lattice_strip((kvq_lattice)l, pts + v * n, sym + v * n);
            for (int i = 0; i < n; i++) kvq_rice_hist_add(&h[kvq_lattice_symbol_class((kvq_lattice)l, i)], sym[v * n + i]);
        }
        int k[2] = {kvq_rice_best_k(&h[0], NULL), kvq_rice_best_k(&h[1], NULL)};
        uint64_t want = kvq_rice_hist_bits(&h[0], k[0]) + (kvq_lattice_classes((kvq_lattice)l) > 1 ? kvq_rice_hist_bits(&h[1], k[1]) : 0);
        kvq_bitwriter w;
        kvq_bw_init(&w, buf, sizeof buf);
        for (int j = 0; j < NV * n; j++) kvq_bw_rice(&w, sym[j], k[kvq_lattice_symbol_class((kvq_lattice)l, j % n)]);
        assert_int_equal(kvq_bw_bits(&w), want);
        size_t nb = kvq_bw_finish(&w);
        kvq_bitreader r;
        kvq_br_init(&r, buf, nb);
        for (int v = 0; v < NV; v++) {
            uint32_t sy[8];
            int32_t c[8];
            for (int i = 0; i < n; i++) sy[i] = kvq_br_rice(&r, k[kvq_lattice_symbol_class((kvq_lattice)l, i)]);
            kvq_lattice_unstrip((kvq_lattice)l, sy, c);
            for (int i = 0; i < n; i++) assert_int_equal(c[i], pts[v * n + i]);
        }
        assert_int_equal(r.err, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_bits),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_word_reader),
        cmocka_unit_test(test_best_k),
        cmocka_unit_test(test_writer_overflow),
        cmocka_unit_test(test_strip_rice_stream),
    };
    return cmocka_run_group_tests_name("rice", tests, NULL, NULL);
}
