// Tests for the HyperQuant weight codec: bit-exact round trips (bitstream decode == the
// encoder's reconstruction from the lattice codes, fast == reference decoder) for every
// lattice on random and adversarial matrices, determinism, rate control to ±0.01 bits,
// realized SNR near the calibrated target, NaN/Inf rejection, int8 and cast modes, odd
// widths, corrupt payloads, and the codec table entry.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "formats/checkpoint.h"
#include "kernels/cpu/wht.h"
#include "kernels/hq_layout.h"
#include "libconv/codec/hyperquant/hqcal.h"
#include "libconv/quant/rice.h"
#include "libconv/codec/hyperquant/hyperquant.h"
#include "libconv/codec/hyperquant/hq_impl.h"
#include "tests/testrng.h"
#include <xxhash.h>


static void views(const kvq_encoded *e, kvq_blob_view *v) {
    for (int i = 0; i < e->n_blob; i++) v[i] = (kvq_blob_view){e->blob[i].role, e->blob[i].data, e->blob[i].size};
}

// Encodes x, decodes with both decoders, checks bit-exactness against the encoder's
// reconstruction and returns the stats.
static kvq_hq_stats roundtrip(const kvq_hq_opts *o, const float *x, int64_t rows, int64_t cols, uint64_t seed) {
    kvq_codec_input in = {NULL, x, rows, cols, seed, 0, NULL};
    kvq_encoded e;
    kvq_err err = {0};
    kvq_hq_stats st;
    float *rec = malloc(sizeof(float) * rows * cols), *d1 = malloc(sizeof(float) * rows * cols),
          *d2 = malloc(sizeof(float) * rows * cols);
    kvq_status s = kvq_hq_encode(o, &in, &e, rec, &st, &err);
    if (s) fprintf(stderr, "encode: %s\n", err.msg);
    assert_int_equal(s, KVQ_OK);
    kvq_hq_header h;
    assert_int_equal(kvq_hq_header_parse(e.params, rows, cols, &h, &err), KVQ_OK);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    views(&e, v);
    memset(d1, 0xff, sizeof(float) * rows * cols);
    memset(d2, 0xff, sizeof(float) * rows * cols);
    assert_int_equal(kvq_hq_decode_ref(&h, v, e.n_blob, d1, &err), KVQ_OK);
    assert_int_equal(kvq_hq_decode(&h, v, e.n_blob, d2, 2, &err), KVQ_OK);
    assert_memory_equal(d1, rec, sizeof(float) * rows * cols);
    assert_memory_equal(d2, rec, sizeof(float) * rows * cols);
    // rate parts sum to the stored size
    double sum = 0;
    for (int i = 0; i < e.n_part; i++) sum += e.part[i].bits;
    assert_true(fabs(sum - 8.0 * (double)kvq_encoded_bytes(&e)) < 1e-6);
    kvq_encoded_free(&e);
    free(rec);
    free(d1);
    free(d2);
    return st;
}

static float *gauss_matrix(int64_t rows, int64_t cols, uint64_t seed, double sd) {
    float *x = malloc(sizeof(float) * rows * cols);
    for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)(sd * gauss(&seed));
    return x;
}

static void test_roundtrip_rate_all_lattices(void **state) {
    const int64_t rows = 96, cols = 512;
    float *x = gauss_matrix(rows, cols, 5, 0.02);
    const double targets[] = {3.0, 4.0, 5.0};
    for (int l = 0; l < KVQ_LAT_COUNT; l++)
        for (int ti = 0; ti < 3; ti++) {
            kvq_hq_opts o = kvq_hq_opts_default((kvq_lattice)l, targets[ti]);
            kvq_hq_stats st = roundtrip(&o, x, rows, cols, 77);
            assert_true(fabs(st.eff_bpw - targets[ti]) <= 0.01);
            // Gaussian data: realized SNR within 0.3 dB of what the SNR target promises
            assert_true(fabs(st.snr_real_db - st.snr_target_db) < 0.3);
        }
    free(x);
}

static void test_determinism(void **state) {
    const int64_t rows = 16, cols = 256;
    float *x = gauss_matrix(rows, cols, 9, 1.0);
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 4.0);
    kvq_codec_input in = {NULL, x, rows, cols, 1234, 1, NULL};
    kvq_encoded a, b;
    kvq_err err;
    assert_int_equal(kvq_hq_encode(&o, &in, &a, NULL, NULL, &err), KVQ_OK);
    in.n_threads = 2;
    assert_int_equal(kvq_hq_encode(&o, &in, &b, NULL, NULL, &err), KVQ_OK);
    assert_int_equal(a.n_blob, b.n_blob);
    for (int i = 0; i < a.n_blob; i++) {
        assert_int_equal(a.blob[i].size, b.blob[i].size);
        assert_memory_equal(a.blob[i].data, b.blob[i].data, a.blob[i].size);
    }
    assert_true(json_equal(a.params, b.params));
    // a different seed gives different codes
    kvq_encoded c;
    in.seed = 1235;
    assert_int_equal(kvq_hq_encode(&o, &in, &c, NULL, NULL, &err), KVQ_OK);
    assert_true(c.blob[0].size != a.blob[0].size || memcmp(c.blob[0].data, a.blob[0].data, a.blob[0].size));
    kvq_encoded_free(&a);
    kvq_encoded_free(&b);
    kvq_encoded_free(&c);
    free(x);
}

static void test_adversarial(void **state) {
    const int64_t rows = 8, cols = 256;
    float *x = calloc(rows * cols, sizeof(float));
    for (int l = 0; l < KVQ_LAT_COUNT; l++) {
        kvq_hq_opts o = kvq_hq_opts_default((kvq_lattice)l, NAN);
        o.snr_db = 25.0; // fixed SNR: rate targets are meaningless on degenerate data
        memset(x, 0, sizeof(float) * rows * cols);
        roundtrip(&o, x, rows, cols, 1); // all zeros
        x[3 * cols + 17] = 1000.0f;     // single spike
        kvq_hq_stats st = roundtrip(&o, x, rows, cols, 1);
        assert_true(st.snr_real_db > 20.0);
        uint64_t s = 3;
        for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)(1e30 * gauss(&s)); // huge
        st = roundtrip(&o, x, rows, cols, 2);
        assert_true(fabs(st.snr_real_db - 25.0) < 1.0);
        for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)(1e-30 * gauss(&s)); // tiny
        st = roundtrip(&o, x, rows, cols, 3);
        assert_true(fabs(st.snr_real_db - 25.0) < 1.0);
        for (int64_t i = 0; i < rows * cols; i++) // rows spanning 2^±60 and exact ±1 patterns
            x[i] = (float)ldexp(gauss(&s), (int)((i / cols) * 16 - 60));
        for (int64_t i = 0; i < cols; i++) x[i] = (i & 1) ? 1.0f : -1.0f;
        roundtrip(&o, x, rows, cols, 4);
        // Rice mode at a rate target on the spike matrix (mostly zero tiles)
        memset(x, 0, sizeof(float) * rows * cols);
        x[5] = -3.0f;
        kvq_hq_opts r = kvq_hq_opts_default((kvq_lattice)l, 4.0);
        roundtrip(&r, x, rows, cols, 5);
    }
    free(x);
}

static void test_nonfinite_rejected(void **state) {
    const int64_t rows = 4, cols = 128;
    float *x = gauss_matrix(rows, cols, 1, 1.0);
    kvq_tensor t = {.name = "model.layers.0.mlp.up_proj.weight"};
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 4.0);
    kvq_encoded e;
    kvq_err err = {0};
    x[2 * cols + 5] = NAN;
    kvq_codec_input in = {&t, x, rows, cols, 1, 0, NULL};
    assert_int_equal(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err), KVQ_ERR_NUMERIC);
    assert_non_null(strstr(err.msg, "model.layers.0.mlp.up_proj.weight"));
    assert_non_null(strstr(err.msg, "[2, 5]"));
    x[2 * cols + 5] = INFINITY;
    assert_int_equal(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err), KVQ_ERR_NUMERIC);
    // and through the rtn table entry
    const kvq_codec_traits *c;
    json_t *cfg;
    assert_int_equal(kvq_codec_parse_spec("rtn:4:g128", &c, &cfg, &err), KVQ_OK);
    assert_int_equal(c->encode(cfg, &in, &e, &err), KVQ_ERR_NUMERIC);
    assert_non_null(strstr(err.msg, "up_proj"));
    json_decref(cfg);
    free(x);
}

// Encodes (x or src) with o; returns the encoding (caller frees).
static void enc_with(const kvq_hq_opts *o, const kvq_tensor *src, const float *x, int64_t rows, int64_t cols, int nt,
                     kvq_encoded *e) {
    kvq_codec_input in = {src, x, rows, cols, 4321, nt, NULL};
    kvq_err err = {0};
    kvq_status s = kvq_hq_encode(o, &in, e, NULL, NULL, &err);
    if (s) fprintf(stderr, "encode: %s\n", err.msg);
    assert_int_equal(s, KVQ_OK);
}

static void assert_same_encoding(const kvq_encoded *a, const kvq_encoded *b) {
    assert_int_equal(a->n_blob, b->n_blob);
    for (int i = 0; i < a->n_blob; i++) {
        assert_int_equal(a->blob[i].size, b->blob[i].size);
        assert_memory_equal(a->blob[i].data, b->blob[i].data, a->blob[i].size);
    }
    assert_true(json_equal(a->params, b->params));
    assert_true(a->predicted_mse == b->predicted_mse);
}

// The streaming encoder gives the same bytes whether the rotated tiles are cached or
// recomputed every pass, whatever the thread count, and whether it reads a float32 copy or
// the bf16/f16/f32 source bytes themselves (x = NULL); a NaN in the source bytes is named.
static void test_streaming_identical(void **state) {
    const int64_t rows = 40;
    const int64_t widths[] = {512, 200, 1000};
    const char *specs[][2] = {{"e8", ""}, {"d4", ""}, {"a2", ""}, {"z", ""}, {"e8", "int8"}, {"d4", "cast"}};
    uint64_t seed = 99;
    for (int wi = 0; wi < 3; wi++) {
        const int64_t cols = widths[wi];
        float *x = gauss_matrix(rows, cols, 17 + wi, 0.03);
        x[7] = 0.5f; // an outlier tile
        for (int64_t c = 0; c < cols; c++) x[3 * cols + c] = 0.0f; // zero tiles
        uint16_t *b16 = malloc(sizeof(uint16_t) * (size_t)(rows * cols)), *h16 = malloc(sizeof(uint16_t) * (size_t)(rows * cols));
        float *xb = malloc(sizeof(float) * rows * cols), *xh = malloc(sizeof(float) * rows * cols);
        for (int64_t i = 0; i < rows * cols; i++) {
            b16[i] = kvq_f32_to_bf16(x[i]);
            h16[i] = kvq_f32_to_f16(x[i]);
        }
        kvq_dtype_to_f32(KVQ_DTYPE_BF16, b16, (size_t)(rows * cols), xb);
        kvq_dtype_to_f32(KVQ_DTYPE_F16, h16, (size_t)(rows * cols), xh);
        kvq_tensor tb = {.name = "tb", .dtype = KVQ_DTYPE_BF16, .ndim = 2, .shape = {rows, cols}, .data = b16,
                         .nbytes = (size_t)(2 * rows * cols)};
        kvq_tensor th = tb, tf = tb;
        th.dtype = KVQ_DTYPE_F16; th.data = h16;
        tf.dtype = KVQ_DTYPE_F32; tf.data = x; tf.nbytes = (size_t)(4 * rows * cols);
        for (int si = 0; si < 6; si++) {
            kvq_lattice lat;
            assert_int_equal(kvq_lattice_parse(specs[si][0], &lat), 0);
            kvq_hq_opts o = kvq_hq_opts_default(lat, 2.0 + (double)(rng_next(&seed) % 5));
            if (!strcmp(specs[si][1], "int8")) o.int8 = 1;
            if (!strcmp(specs[si][1], "cast")) o.cast = KVQ_CAST_FP8;
            if (wi == 2) o.max_tile = 256;
            kvq_encoded ref, e;
            enc_with(&o, NULL, x, rows, cols, 1, &ref);
            kvq_hq_opts nc = o;
            nc.rot_cache = 0;
            for (int nt = 1; nt <= 3; nt++) {
                enc_with(&nc, NULL, x, rows, cols, nt, &e); // recomputed tiles
                assert_same_encoding(&ref, &e);
                kvq_encoded_free(&e);
                enc_with(&nc, &tf, NULL, rows, cols, nt, &e); // f32 source bytes
                assert_same_encoding(&ref, &e);
                kvq_encoded_free(&e);
            }
            kvq_encoded_free(&ref);
            const kvq_tensor *srcs[2] = {&tb, &th};
            const float *xs[2] = {xb, xh};
            for (int k = 0; k < 2; k++) {
                enc_with(&o, NULL, xs[k], rows, cols, 2, &ref);
                enc_with(&o, srcs[k], NULL, rows, cols, 2, &e);
                assert_same_encoding(&ref, &e);
                kvq_encoded_free(&e);
                enc_with(&nc, srcs[k], NULL, rows, cols, 2, &e);
                assert_same_encoding(&ref, &e);
                kvq_encoded_free(&e);
                kvq_encoded_free(&ref);
            }
        }
        // a NaN in the bf16 bytes: refused, naming the element
        b16[5 * cols + 3] = 0x7fc0;
        kvq_codec_input in = {&tb, NULL, rows, cols, 1, 2, NULL};
        kvq_encoded e;
        kvq_err err = {0};
        kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 4.0);
        o.rot_cache = 0;
        assert_int_equal(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err), KVQ_ERR_NUMERIC);
        assert_non_null(strstr(err.msg, "[5, 3]"));
        // a source too short for rows × cols: refused
        tb.nbytes = 10;
        assert_int_equal(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err), KVQ_ERR_ARG);
        free(b16); free(h16); free(xb); free(xh); free(x);
    }
}

// 64-bit digest of an encoding: every blob (role, size, bytes), the params as sorted JSON and
// the predicted MSE's bits.
static uint64_t encoding_digest(const kvq_encoded *e) {
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    for (int i = 0; i < e->n_blob; i++) {
        uint64_t sz = e->blob[i].size;
        XXH64_update(h, e->blob[i].role, strlen(e->blob[i].role));
        XXH64_update(h, &sz, sizeof sz);
        XXH64_update(h, e->blob[i].data, e->blob[i].size);
    }
    char *pj = json_dumps(e->params, JSON_COMPACT | JSON_SORT_KEYS);
    XXH64_update(h, pj, strlen(pj));
    free(pj);
    XXH64_update(h, &e->predicted_mse, sizeof e->predicted_mse);
    uint64_t d = XXH64_digest(h);
    XXH64_freeState(h);
    return d;
}

static void test_golden_digests(void **state) {
    // The encoder's bytes against digests recorded from the encoder as it was before its
    // fast paths of issue 14 (commit d86865c): every speed-up must leave the bytes unchanged.
    // Sources: f32 values, f32/bf16 bytes; E8/D4/A2/Z, int8, a cast, padded widths, a zero row,
    // an outlier, 1 and 2 threads, the rotated-tile cache on and off.
    static const uint64_t want[] = {
        0xf9e99ce7f9ff38d7ull, 0x3bcead560b805a03ull, 0xc145e4d48365af86ull, 0x1c80b3333e92a60dull,
        0x74a849378a245d2aull, 0x68c2d6032e40cac2ull, 0x0916553bfd7bc6bfull, 0xd1af5d1a2b918c65ull,
        0x0e86233ef90f5259ull, 0x5e456d8883a026a4ull,
    };
    const struct { const char *lat; double bps; int64_t rows, cols; int mode, tile, nt, cache; } cs[] = {
        {"e8", 4.0, 64, 1024, 0, 128, 1, 1}, {"e8", 4.0, 64, 1024, 1, 128, 2, 0}, {"e8", 3.0, 48, 768, 2, 128, 2, 1},
        {"e8", 5.0, 40, 1000, 0, 256, 1, 0}, {"d4", 3.5, 64, 512, 0, 128, 1, 1}, {"a2", 2.5, 64, 512, 2, 128, 2, 0},
        {"z", 4.0, 32, 384, 0, 128, 1, 1},   {"e8", 6.0, 32, 512, 3, 128, 2, 1}, {"d4", 3.0, 32, 200, 4, 64, 1, 0},
        {"e8", 2.0, 16, 4096, 1, 128, 1, 1},
    };
    const size_t nc = sizeof cs / sizeof cs[0];
    int print = sizeof want / sizeof want[0] != nc;
    for (size_t i = 0; i < nc; i++) {
        const int64_t rows = cs[i].rows, cols = cs[i].cols;
        float *x = gauss_matrix(rows, cols, 1000 + i, 0.02);
        x[11] = 0.4f;                                            // an outlier
        for (int64_t c = 0; c < cols; c++) x[2 * cols + c] = 0.0f; // a zero row
        uint16_t *b16 = malloc(sizeof(uint16_t) * (size_t)(rows * cols));
        for (int64_t j = 0; j < rows * cols; j++) b16[j] = kvq_f32_to_bf16(x[j]);
        kvq_tensor tf = {.name = "t", .dtype = KVQ_DTYPE_F32, .ndim = 2, .shape = {rows, cols}, .data = x,
                         .nbytes = (size_t)(4 * rows * cols)};
        kvq_tensor tb = tf;
        tb.dtype = KVQ_DTYPE_BF16; tb.data = b16; tb.nbytes = (size_t)(2 * rows * cols);
        kvq_lattice lat;
        assert_int_equal(kvq_lattice_parse(cs[i].lat, &lat), 0);
        kvq_hq_opts o = kvq_hq_opts_default(lat, cs[i].bps);
        o.max_tile = cs[i].tile;
        if (!cs[i].cache) o.rot_cache = 0;
        if (cs[i].mode == 3) o.int8 = 1;
        if (cs[i].mode == 4) o.cast = KVQ_CAST_FP8;
        kvq_encoded e;
        enc_with(&o, cs[i].mode == 1 ? &tf : cs[i].mode == 2 ? &tb : NULL, cs[i].mode == 1 || cs[i].mode == 2 ? NULL : x,
                 rows, cols, cs[i].nt, &e);
        uint64_t d = encoding_digest(&e);
        if (print) printf("0x%016llxull,\n", (unsigned long long)d);
        else assert_true(d == want[i]);
        kvq_encoded_free(&e);
        free(x); free(b16);
    }
    assert_false(print); // digests missing: printed above
}

static void test_e8_simd_vs_plain(void **state) {
    // The AVX2 E8 quantizer (eight vectors at a time) against the plain per-vector loop, byte
    // for byte: tiles 16..1024 (16 and 32 never take the fast path), rates from 1 to 9 bits
    // (gains whose codes reach the long-codeword and large-symbol paths), heavy outliers,
    // exact ties (values on the half-integer grid after scaling are unlikely; integer-valued
    // inputs make them frequent), f32 and bf16 sources, 1 and 2 threads.
    uint64_t seed = 555;
    for (int t = 0; t < 14; t++) {
        const int64_t rows = 24 + t, cols = t % 3 == 0 ? 1024 : (t % 3 == 1 ? 768 : 200);
        float *x = gauss_matrix(rows, cols, 900 + t, 0.02);
        for (int64_t i = 0; i < rows * cols; i++) {
            if (t % 4 == 1 && i % 37 == 0) x[i] *= 40.0f;             // outliers
            if (t % 4 == 2) x[i] = (float)((int)(x[i] * 200.0f)) / 8.0f; // a coarse grid: ties
        }
        kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 1.0 + (double)(rng_next(&seed) % 9));
        const int tiles[] = {16, 32, 64, 128, 256, 1024};
        o.max_tile = tiles[t % 6];
        if (t % 5 == 4) o.rot_cache = 0;
        kvq_hq_opts op = o;
        op.no_simd = 1;
        kvq_encoded a, b;
        enc_with(&op, NULL, x, rows, cols, 1, &a);
        enc_with(&o, NULL, x, rows, cols, 1 + t % 2, &b);
        assert_same_encoding(&a, &b);
        assert_true(a.predicted_mse == b.predicted_mse);
        kvq_encoded_free(&a);
        kvq_encoded_free(&b);
        free(x);
    }
}

static void test_e8_quant8_vs_plain(void **state) {
    // The encoder's eight-at-a-time E8 quantizer against kvq_e8_nearest + kvq_lattice_strip and
    // the plain error sum, on inputs that hit every rule: integer points with odd and even
    // coordinate sums (zero rounding error: the parity fix-up's direction test), half-integers
    // (round-half-even ties), points equidistant from both cosets, zeros, random values at
    // scales 0.01..300 (symbols past 64, long codewords).
    if (!__builtin_cpu_supports("avx2")) {
        printf("no AVX2: the fast E8 quantizer is not used on this CPU, nothing to compare\n");
        return;
    }
    const int nv = 64;
    float *r = malloc(sizeof(float) * nv * 8);
    int32_t *c1 = malloc(sizeof(int32_t) * nv * 8), *c2 = malloc(sizeof(int32_t) * nv * 8);
    uint32_t *s1 = malloc(sizeof(uint32_t) * nv * 8), *s2 = malloc(sizeof(uint32_t) * nv * 8);
    uint64_t seed = 77;
    for (int kind = 0; kind < 8; kind++)
        for (int rep = 0; rep < 20; rep++) {
            const float g = kind == 7 ? 0.25f : 1.0f;
            for (int i = 0; i < nv * 8; i++) {
                double z = gauss(&seed);
                switch (kind) {
                case 0: r[i] = (float)(z * 0.01); break;
                case 1: r[i] = (float)(z * 3.0); break;
                case 2: r[i] = (float)(z * 300.0); break;
                case 3: r[i] = (float)lrint(z * 3.0); break;          // integers: zero error, odd sums
                case 4: r[i] = (float)lrint(z * 4.0) * 0.5f; break;   // half-integers: rounding ties
                case 5: r[i] = (rng_next(&seed) & 1) ? 0.5f : -0.5f; break; // both cosets equally near
                case 6: r[i] = (i / 8) % 3 == 0 ? 0.0f : (float)lrint(z) * 2.0f; break;
                default: r[i] = (float)lrint(z * 8.0); break;        // × 0.25: quarter-integers
                }
            }
            double tn1 = 0.0, tn2 = 0.0;
            assert_int_equal(kvq_hq_e8_quant8(r, g, nv, c1, s1, &tn1), 0);
            for (int v = 0; v < nv * 8; v += 8) {
                float u[8], vn = 0.0f;
                for (int i = 0; i < 8; i++) u[i] = r[v + i] * g;
                kvq_e8_nearest(u, c2 + v);
                for (int i = 0; i < 8; i++) {
                    float d = u[i] - (float)c2[v + i];
                    vn += d * d;
                }
                tn2 += (double)vn;
                kvq_lattice_strip(KVQ_LAT_E8, c2 + v, s2 + v);
            }
            assert_memory_equal(c1, c2, sizeof(int32_t) * nv * 8);
            assert_memory_equal(s1, s2, sizeof(uint32_t) * nv * 8);
            assert_true(tn1 == tn2);
        }
    free(r); free(c1); free(c2); free(s1); free(s2);
}

static void test_int8_and_casts(void **state) {
    const int64_t rows = 32, cols = 256;
    float *x = gauss_matrix(rows, cols, 11, 0.05);
    for (int l = 0; l < KVQ_LAT_COUNT; l++) {
        kvq_hq_opts o = kvq_hq_opts_default((kvq_lattice)l, 4.0);
        o.int8 = 1;
        kvq_hq_stats st = roundtrip(&o, x, rows, cols, 3);
        assert_true(st.code_bpw == 8.0);
        assert_int_equal(st.clipped, 0);
        for (int c = KVQ_CAST_INT8; c < KVQ_CAST_COUNT; c++) {
            kvq_hq_opts oc = kvq_hq_opts_default((kvq_lattice)l, 4.0);
            oc.cast = (kvq_cast)c;
            kvq_hq_stats sc = roundtrip(&oc, x, rows, cols, 3);
            // the cast only adds error; INT8/FP8 little, FP4 a lot
            assert_true(sc.snr_real_db < sc.snr_target_db + 0.3);
            if (c == KVQ_CAST_INT8 || c == KVQ_CAST_FP8) assert_true(sc.snr_real_db > sc.snr_target_db - 3.0);
            else assert_true(sc.snr_real_db < 20.0 && sc.snr_real_db > 10.0);
        }
    }
    free(x);
}

static void test_odd_widths(void **state) {
    const int64_t shapes[][2] = {{5, 704}, {3, 100}, {7, 1000}, {2, 16}, {4, 24}, {1, 8}, {3, 1}};
    int64_t cp;
    assert_int_equal(kvq_hq_tile_for(704, 128, &cp), 64);
    assert_int_equal(cp, 704);
    assert_int_equal(kvq_hq_tile_for(100, 128, &cp), 128);
    assert_int_equal(cp, 128);
    assert_int_equal(kvq_hq_tile_for(1000, 128, &cp), 128);
    assert_int_equal(cp, 1024);
    assert_int_equal(kvq_hq_tile_for(4096, 128, &cp), 128);
    for (int i = 0; i < 7; i++)
        for (int l = 0; l < KVQ_LAT_COUNT; l++) {
            float *x = gauss_matrix(shapes[i][0], shapes[i][1], 21 + i, 1.0);
            kvq_hq_opts o = kvq_hq_opts_default((kvq_lattice)l, NAN);
            o.snr_db = 20.0;
            roundtrip(&o, x, shapes[i][0], shapes[i][1], 8);
            free(x);
        }
}

static void test_corrupt_payload(void **state) {
    const int64_t rows = 64, cols = 256;
    float *x = gauss_matrix(rows, cols, 13, 1.0);
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 4.0);
    kvq_codec_input in = {NULL, x, rows, cols, 1, 0, NULL};
    kvq_encoded e;
    kvq_err err;
    kvq_hq_header h;
    assert_int_equal(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err), KVQ_OK);
    assert_int_equal(kvq_hq_header_parse(e.params, rows, cols, &h, &err), KVQ_OK);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    views(&e, v);
    float *d = malloc(sizeof(float) * rows * cols);
    // truncated codes
    v[0].size -= 3;
    assert_int_equal(kvq_hq_decode(&h, v, e.n_blob, d, 1, &err), KVQ_ERR_FORMAT);
    assert_int_equal(kvq_hq_decode_ref(&h, v, e.n_blob, d, &err), KVQ_ERR_FORMAT);
    v[0].size += 3;
    // a group offset moved: the groups around it no longer decode to their exact length
    uint8_t *off = e.blob[2].data;
    off[4] ^= 1;
    assert_int_equal(kvq_hq_decode(&h, v, e.n_blob, d, 1, &err), KVQ_ERR_FORMAT);
    assert_int_equal(kvq_hq_decode_ref(&h, v, e.n_blob, d, &err), KVQ_ERR_FORMAT);
    off[4] ^= 1;
    // all-zero code bytes: unary runs past the group end
    memset(e.blob[0].data, 0, e.blob[0].size);
    assert_int_equal(kvq_hq_decode(&h, v, e.n_blob, d, 1, &err), KVQ_ERR_FORMAT);
    assert_int_equal(kvq_hq_decode_ref(&h, v, e.n_blob, d, &err), KVQ_ERR_FORMAT);
    // bad params
    json_object_set_new(e.params, "lattice", json_string("e9"));
    assert_int_equal(kvq_hq_header_parse(e.params, rows, cols, &h, &err), KVQ_ERR_FORMAT);
    kvq_encoded_free(&e);
    free(d);
    free(x);
}

// Random byte corruptions of every blob: the decoders return OK or KVQ_ERR_FORMAT and never
// read out of bounds (run under `make asan` too).
static void test_fuzz_corruption(void **state) {
    const int64_t rows = 24, cols = 256;
    float *x = gauss_matrix(rows, cols, 31, 1.0), *d = malloc(sizeof(float) * rows * cols);
    for (int l = 0; l < KVQ_LAT_COUNT; l++) {
        kvq_hq_opts o = kvq_hq_opts_default((kvq_lattice)l, 3.0);
        kvq_codec_input in = {NULL, x, rows, cols, 5, 1, NULL};
        kvq_encoded e;
        kvq_err err;
        kvq_hq_header h;
        assert_int_equal(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err), KVQ_OK);
        assert_int_equal(kvq_hq_header_parse(e.params, rows, cols, &h, &err), KVQ_OK);
        kvq_blob_view v[KVQ_MAX_BLOBS];
        views(&e, v);
        uint64_t s = 100 + (uint64_t)l;
        for (int t = 0; t < 300; t++) {
            int b = (int)(rng_next(&s) % (uint64_t)e.n_blob);
            uint8_t *p = e.blob[b].data;
            size_t at = (size_t)(rng_next(&s) % e.blob[b].size);
            uint8_t old = p[at];
            p[at] ^= (uint8_t)(1u << (rng_next(&s) % 8));
            kvq_status s1 = kvq_hq_decode(&h, v, e.n_blob, d, 1, &err);
            kvq_status s2 = kvq_hq_decode_ref(&h, v, e.n_blob, d, &err);
            assert_true(s1 == KVQ_OK || s1 == KVQ_ERR_FORMAT);
            assert_true(s2 == KVQ_OK || s2 == KVQ_ERR_FORMAT);
            p[at] = old;
        }
        assert_int_equal(kvq_hq_decode(&h, v, e.n_blob, d, 1, &err), KVQ_OK);
        kvq_encoded_free(&e);
    }
    free(x);
    free(d);
}

// An independent decoder written from the layout comment in kernels/hq_layout.h alone
// (reference bit reader, O(T²) double Hadamard, the documented scale formula) must match
// kvq_hq_decode bit for bit: the stored format is fully specified by that comment.
static void test_layout_spec(void **state) {
    const int64_t rows = 10, cols = 384;
    float *x = gauss_matrix(rows, cols, 41, 0.05), *d = malloc(sizeof(float) * rows * cols),
          *want = malloc(sizeof(float) * rows * cols);
    for (int l = 0; l < KVQ_LAT_COUNT; l++) {
        kvq_hq_opts o = kvq_hq_opts_default((kvq_lattice)l, 3.5);
        kvq_codec_input in = {NULL, x, rows, cols, 0xabcdefull, 1, NULL};
        kvq_encoded e;
        kvq_err err;
        assert_int_equal(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err), KVQ_OK);
        json_t *p = e.params;
        int T = (int)json_integer_value(json_object_get(p, "tile")), nb = (int)json_integer_value(json_object_get(p, "norm_bits"));
        int ne = (int)json_integer_value(json_object_get(p, "norm_exp"));
        double alpha = json_number_value(json_object_get(p, "alpha"));
        uint64_t seed = strtoull(json_string_value(json_object_get(p, "seed")), NULL, 16);
        int k[2] = {(int)json_integer_value(json_array_get(json_object_get(p, "k"), 0)),
                    (int)json_integer_value(json_array_get(json_object_get(p, "k"), 1))};
        const uint8_t *codes = e.blob[0].data, *norms = e.blob[1].data, *offs = e.blob[2].data;
        int n = kvq_lattice_dim((kvq_lattice)l);
        int64_t tpr = cols / T;
        for (int64_t t = 0; t < rows * tpr; t++) {
            kvq_bitreader nr;
            kvq_br_init(&nr, norms, e.blob[1].size);
            nr.bitpos = (uint64_t)t * nb;
            uint32_t code = kvq_br_get(&nr, nb);
            int64_t g = t / KVQ_HQ_GROUP_TILES;
            static kvq_bitreader r;
            if (t % KVQ_HQ_GROUP_TILES == 0) {
                uint32_t o0 = offs[4 * g] | offs[4 * g + 1] << 8 | offs[4 * g + 2] << 16 | (uint32_t)offs[4 * g + 3] << 24;
                kvq_br_init(&r, codes + o0, e.blob[0].size - o0);
            }
            float *dst = want + (t / tpr) * cols + (t % tpr) * T;
            if (code == (1u << nb) - 1) { for (int i = 0; i < T; i++) dst[i] = 0; continue; }
            int32_t c[1024];
            for (int v = 0; v < T; v += n) {
                uint32_t sy[8];
                for (int i = 0; i < n; i++) sy[i] = kvq_br_rice(&r, k[kvq_lattice_symbol_class((kvq_lattice)l, i)]);
                kvq_lattice_unstrip((kvq_lattice)l, sy, c + v);
            }
            float cz[1024], cw[1024];
            double z[1024], w[1024];
            for (int i = 0; i < T; i++) {
                int ny_part = l == KVQ_LAT_A2 && !(i & 1);
                cz[i] = ny_part ? 0.0f : (float)c[i];
                cw[i] = ny_part ? (float)c[i] : 0.0f;
            }
            kvq_wht_ref(cz, z, T);
            kvq_wht_ref(cw, w, T);
            float s = (float)(exp2((double)ne - (double)code / (double)(1 << (nb - 5))) / (alpha * T));
            int64_t j = t % tpr;
            for (int i = 0; i < T; i++) {
                uint64_t sb = kvq_hq_sign_word(seed, (uint64_t)j, (uint64_t)(i / 64));
                float sg = ((sb >> (i % 64)) & 1) ? -1.0f : 1.0f;
                float val = l == KVQ_LAT_A2 ? (float)z[i] + KVQ_SQRT3_F * (float)w[i] : (float)z[i];
                dst[i] = (val * s) * sg;
            }
        }
        kvq_hq_header h;
        assert_int_equal(kvq_hq_header_parse(p, rows, cols, &h, &err), KVQ_OK);
        kvq_blob_view v[KVQ_MAX_BLOBS];
        views(&e, v);
        assert_int_equal(kvq_hq_decode(&h, v, e.n_blob, d, 2, &err), KVQ_OK);
        assert_memory_equal(d, want, sizeof(float) * rows * cols);
        kvq_encoded_free(&e);
    }
    free(x);
    free(d);
    free(want);
}

static void test_codec_table(void **state) {
    const kvq_codec_traits *c;
    json_t *cfg;
    kvq_err err;
    assert_int_equal(kvq_codec_parse_spec("hyperquant:e8:4.0", &c, &cfg, &err), KVQ_OK);
    assert_string_equal(c->name, "hyperquant");
    const int64_t rows = 64, cols = 384;
    float *x = gauss_matrix(rows, cols, 17, 0.01), *d = malloc(sizeof(float) * rows * cols);
    kvq_codec_input in = {NULL, x, rows, cols, 99, 0, NULL};
    kvq_encoded e;
    assert_int_equal(c->encode(cfg, &in, &e, &err), KVQ_OK);
    assert_true(fabs(kvq_encoded_bpw(&e, rows * cols) - 4.0) <= 0.01);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    views(&e, v);
    assert_int_equal(c->decode(e.params, v, e.n_blob, rows, cols, d, &err), KVQ_OK);
    double se = 0, sx = 0;
    for (int64_t i = 0; i < rows * cols; i++) { se += (x[i] - d[i]) * (x[i] - d[i]); sx += x[i] * x[i]; }
    assert_true(10 * log10(sx / se) > 20.0);
    assert_true(fabs(se / (rows * cols) - e.predicted_mse) < 1e-3 * e.predicted_mse);
    kvq_encoded_free(&e);
    json_decref(cfg);
    const char *bad[] = {"hyperquant", "hyperquant:e9:4", "hyperquant:e8", "hyperquant:e8:0.2",
                         "hyperquant:e8:4:cast=fp6", "hyperquant:e8:4:nb=9", "hyperquant:e8:4:tile=100",
                         "hyperquant:e8:4:bogus", "rtn:9:g128", "rtn:4:x128"};
    for (int i = 0; i < 10; i++) assert_int_equal(kvq_codec_parse_spec(bad[i], &c, &cfg, &err), KVQ_ERR_ARG);
    assert_int_equal(kvq_codec_parse_spec("hyperquant:d4:21db:int8:cast=fp8:nb=12:tile=256", &c, &cfg, &err), KVQ_OK);
    json_decref(cfg);
    free(x);
    free(d);
}

// Every linear weight (or the first max_tensors) of a checkpoint: rate within ±0.01 of
// the target effective bits and bit-exact decode.
static void real_tensors(const char *dir, kvq_lattice lat, double bps, int max_tensors) {
    kvq_ckpt *ck;
    kvq_err err;
    assert_int_equal(kvq_ckpt_open(dir, &ck, &err), KVQ_OK);
    int done = 0;
    for (size_t i = 0; i < kvq_ckpt_count(ck) && done < max_tensors; i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        if (t->ndim != 2 || (max_tensors < 1000 && !strstr(t->name, "layers."))) continue;
        int64_t rows = t->shape[0], cols = t->shape[1];
        float *x = malloc(sizeof(float) * rows * cols);
        kvq_dtype_to_f32(t->dtype, t->data, (size_t)(rows * cols), x);
        kvq_hq_opts o = kvq_hq_opts_default(lat, bps);
        kvq_hq_stats st = roundtrip(&o, x, rows, cols, 1000 + i);
        if (fabs(st.eff_bpw - bps) > 0.01) fprintf(stderr, "%s: %s at %.2f -> %.4f\n", dir, t->name, bps, st.eff_bpw);
        assert_true(fabs(st.eff_bpw - bps) <= 0.01);
        free(x);
        done++;
    }
    assert_true(done > 0);
    kvq_ckpt_close(ck);
}

static void test_real_tiny_llama(void **state) {
    real_tensors("tests/models/kvq-tiny-llama", KVQ_LAT_E8, 4.0, 1000);
    real_tensors("tests/models/kvq-tiny-llama", KVQ_LAT_Z, 3.0, 6);
}

static void test_real_shared_models(void **state) {
    const char *sh = getenv("KVQ_SHARED") ? getenv("KVQ_SHARED") : "../shared";
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/models/kvq-small-llama", sh);
    snprintf(b, sizeof b, "%s/models/kvq-small-qwen3", sh);
    FILE *f = fopen(a, "r"), *g = fopen(b, "r");
    if (!f || !g) {
        if (f) fclose(f);
        if (g) fclose(g);
        printf("skipping: %s or %s not found (set KVQ_SHARED)\n", a, b);
        skip();
    }
    fclose(f);
    fclose(g);
    real_tensors(a, KVQ_LAT_E8, 4.0, 4);
    real_tensors(a, KVQ_LAT_D4, 3.5, 2);
    real_tensors(b, KVQ_LAT_E8, 4.0, 4);
    real_tensors(b, KVQ_LAT_A2, 5.0, 2);
}


// ---- row blocks (hq_blocks.c) ------------------------------------------------------------

// A row-blocked tensor is its blocks encoded alone, concatenated: the same reconstruction bit for
// bit, the same bytes; both decoders reproduce it; the codec table's spec gives the same bytes;
// an unblocked reader refuses it; broken block records are refused.
static void test_row_blocks(void **state) {
    const int64_t rows = 100, cols = 256, br = 32; // blocks of 32, 32, 32, 4 rows
    const double bps[4] = {2.5, 4.0, 3.0, 5.5};
    float *x = gauss_matrix(rows, cols, 11, 0.02);
    for (int64_t r = 0; r < rows; r++) // rows of unlike scale, as an embedding's are
        for (int64_t j = 0; j < cols; j++) x[r * cols + j] *= (float)(1 + r % 7);
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 3.0);
    kvq_codec_input in = {NULL, x, rows, cols, 99, 1, NULL};
    kvq_encoded e;
    kvq_err err = {0};
    float *rec = malloc(sizeof(float) * rows * cols), *d = malloc(sizeof(float) * rows * cols),
          *one = malloc(sizeof(float) * br * cols);
    assert_int_equal(kvq_hq_encode_blocks(&o, bps, 4, br, &in, &e, rec, &err), KVQ_OK);
    assert_true(kvq_hq_is_blocked(e.params));
    kvq_blob_view v[KVQ_MAX_BLOBS];
    views(&e, v);
    // each block alone: same reconstruction and the same stream bytes at the same place
    size_t at[3] = {0, 0, 0};
    const char *roles[3] = {"codes", "norms", "offsets"};
    double bits = 0;
    for (int i = 0; i < 4; i++) {
        int64_t r0 = i * br, nr = rows - r0 < br ? rows - r0 : br;
        kvq_hq_opts ob = kvq_hq_opts_default(KVQ_LAT_E8, bps[i]);
        kvq_codec_input bi = {NULL, x + r0 * cols, nr, cols, 99, 1, NULL};
        kvq_encoded eb;
        kvq_hq_stats st;
        assert_int_equal(kvq_hq_encode(&ob, &bi, &eb, one, &st, &err), KVQ_OK);
        assert_true(fabs(st.eff_bpw - bps[i]) <= 0.01 || nr < br); // a 4-row block's header dominates its rate
        assert_memory_equal(one, rec + r0 * cols, sizeof(float) * nr * cols);
        for (int r = 0; r < 3; r++) {
            const kvq_blob_view *w = kvq_blob_find(v, e.n_blob, roles[r]);
            for (int j = 0; j < eb.n_blob; j++)
                if (!strcmp(eb.blob[j].role, roles[r])) {
                    assert_memory_equal((const uint8_t *)w->data + at[r], eb.blob[j].data, eb.blob[j].size);
                    at[r] += eb.blob[j].size;
                }
        }
        bits += bps[i] * (double)(nr * cols);
        kvq_encoded_free(&eb);
    }
    // both decoders, and the codec table's decode
    memset(d, 0xff, sizeof(float) * rows * cols);
    assert_int_equal(kvq_hq_blocks_decode(e.params, v, e.n_blob, rows, cols, d, -1, &err), KVQ_OK);
    assert_memory_equal(d, rec, sizeof(float) * rows * cols);
    memset(d, 0xff, sizeof(float) * rows * cols);
    assert_int_equal(kvq_hq_blocks_decode(e.params, v, e.n_blob, rows, cols, d, 2, &err), KVQ_OK);
    assert_memory_equal(d, rec, sizeof(float) * rows * cols);
    const kvq_codec_traits *c = kvq_codec_find("hyperquant");
    memset(d, 0xff, sizeof(float) * rows * cols);
    assert_int_equal(c->decode(e.params, v, e.n_blob, rows, cols, d, &err), KVQ_OK);
    assert_memory_equal(d, rec, sizeof(float) * rows * cols);
    assert_int_equal(c->check(e.params, v, e.n_blob, rows, cols, &err), KVQ_OK);
    // the rate parts sum to the stored size; the size is the blocks' rates plus their records
    double sum = 0;
    for (int i = 0; i < e.n_part; i++) sum += e.part[i].bits;
    assert_true(fabs(sum - 8.0 * (double)kvq_encoded_bytes(&e)) < 1e-6);
    assert_true(8.0 * (double)kvq_encoded_bytes(&e) > bits && 8.0 * (double)kvq_encoded_bytes(&e) < bits + 8.0 * 1200);
    // a reader of unblocked tensors refuses it (params "v" 2)
    kvq_hq_header h;
    assert_int_equal(kvq_hq_header_parse(e.params, rows, cols, &h, &err), KVQ_ERR_VERSION);
    // the spec: the same bytes through the codec table, with a src (bf16-free f32 view) instead of x
    json_t *cfg = NULL;
    assert_int_equal(c->parse("e8:3:blocks=32@2.5/4/3/5.5", &cfg, &err), KVQ_OK);
    kvq_tensor src = {"t", KVQ_DTYPE_F32, 2, {rows, cols}, x, sizeof(float) * rows * cols};
    kvq_codec_input ins = {&src, NULL, rows, cols, 99, 1, NULL};
    kvq_encoded e2;
    assert_int_equal(c->encode(cfg, &ins, &e2, &err), KVQ_OK);
    assert_int_equal(e2.n_blob, e.n_blob);
    for (int i = 0; i < e.n_blob; i++) {
        assert_int_equal(e2.blob[i].size, e.blob[i].size);
        assert_memory_equal(e2.blob[i].data, e.blob[i].data, e.blob[i].size);
    }
    assert_true(json_equal(e2.params, e.params));
    assert_true(fabs(c->predict_bits(cfg, rows, cols, KVQ_DTYPE_F32) - bits) < 1e-6);
    kvq_encoded_free(&e2);
    json_decref(cfg);
    assert_int_equal(c->parse("e8:3:blocks=32@3/3", &cfg, &err), KVQ_OK); // 2 rates for 4 blocks
    assert_int_equal(c->encode(cfg, &ins, &e2, &err), KVQ_ERR_ARG);
    assert_non_null(strstr(err.msg, "4 blocks"));
    json_decref(cfg);
    const char *bad[] = {"e8:3:blocks=0@3", "e8:3:blocks=32@", "e8:3:blocks=32@3/9", "e8:3:blocks=32", "e8:3:blocks=32@3//3",
                         "e8:3:int8:blocks=32@3", "e8:20db:blocks=32@3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cfg = NULL;
        assert_int_not_equal(c->parse(bad[i], &cfg, &err), KVQ_OK);
        assert_null(cfg);
    }
    char spec[256];
    assert_int_equal(c->with_rate("e8:3:blocks=32@2.5/4/3/5.5:nb=10", 4.0, KVQ_DTYPE_F32, spec, sizeof spec, &err), KVQ_OK);
    assert_string_equal(spec, "e8:4:nb=10"); // one rate for the tensor: the blocks go
    // broken records
    const char *keys[] = {"rows", "codes", "seed"};
    for (int k = 0; k < 3; k++) {
        json_t *p = json_deep_copy(e.params), *b1 = json_array_get(json_object_get(p, "blocks"), 1);
        if (k == 2) json_object_set_new(b1, "seed", json_string("0000000000000001"));
        else json_object_set_new(b1, keys[k], json_integer(json_integer_value(json_object_get(b1, keys[k])) + 1));
        assert_int_equal(c->decode(p, v, e.n_blob, rows, cols, d, &err), KVQ_ERR_FORMAT);
        assert_int_equal(c->check(p, v, e.n_blob, rows, cols, &err), KVQ_ERR_FORMAT);
        json_decref(p);
    }
    kvq_encoded_free(&e);
    free(x), free(rec), free(d), free(one);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_rate_all_lattices),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_adversarial),
        cmocka_unit_test(test_nonfinite_rejected),
        cmocka_unit_test(test_streaming_identical),
        cmocka_unit_test(test_golden_digests),
        cmocka_unit_test(test_e8_simd_vs_plain),
        cmocka_unit_test(test_e8_quant8_vs_plain),
        cmocka_unit_test(test_int8_and_casts),
        cmocka_unit_test(test_odd_widths),
        cmocka_unit_test(test_corrupt_payload),
        cmocka_unit_test(test_codec_table),
        cmocka_unit_test(test_fuzz_corruption),
        cmocka_unit_test(test_layout_spec),
        cmocka_unit_test(test_real_tiny_llama),
        cmocka_unit_test(test_real_shared_models),
        cmocka_unit_test(test_row_blocks),
    };
    return cmocka_run_group_tests_name("hyperquant", tests, NULL, NULL);
}
