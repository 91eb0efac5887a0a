// CPU kernels: every fast path against its plain reference on seeded random inputs
// (shapes with ragged tails, fp32 and bf16 weights, fp16 K/V), plus exact known values.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/fastexp.h"
#include "kernels/cpu/kvcodes.h"
#include "kernels/cpu/kvexec.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/swiglu.h"

static uint64_t rng_state;
static float frand(void) { // uniform [-1, 1), xorshift64*
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}
static float *rnd(size_t n) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}
static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) { d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); r += (double)b[i] * b[i]; }
    return sqrt(d / (r > 0 ? r : 1));
}

static void test_matmul(void **st) {
    (void)st;
    rng_state = 42;
    const int shapes[][3] = {{1, 64, 64}, {1, 172, 64}, {5, 64, 172}, {7, 512, 37}, {64, 256, 96}, {130, 48, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int T = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        float *x = rnd((size_t)T * in), *w = rnd((size_t)out * in);
        uint16_t *wb = malloc((size_t)out * in * 2);
        kvq_dtype_from_f32(KVQ_DTYPE_BF16, w, (size_t)out * in, wb);
        float *y0 = malloc(sizeof(float) * T * out), *y1 = malloc(sizeof(float) * T * out);
        assert_int_equal(kvq_matmul_scratch(KVQ_DTYPE_F32, T, in), 0);
        assert_int_equal(kvq_matmul_scratch(KVQ_DTYPE_BF16, T, in), in >= 32 ? (size_t)T * in : 0);
        float *xp = malloc(sizeof(float) * T * in); // the bf16 path's scratch
        for (int threads = 1; threads <= 2; threads++) {
            kvq_matmul_ref(y0, x, w, KVQ_DTYPE_F32, T, in, out);
            kvq_matmul(y1, x, w, KVQ_DTYPE_F32, T, in, out, NULL, threads);
            assert_true(rel_err(y1, y0, (size_t)T * out) < 1e-6);
            kvq_matmul_ref(y0, x, wb, KVQ_DTYPE_BF16, T, in, out);
            kvq_matmul(y1, x, wb, KVQ_DTYPE_BF16, T, in, out, xp, threads);
            assert_true(rel_err(y1, y0, (size_t)T * out) < 1e-6);
        }
        // a known product: W = identity rows, X·Wᵀ picks columns
        if (in >= out) {
            memset(w, 0, sizeof(float) * out * in);
            for (int o = 0; o < out; o++) w[(size_t)o * in + o] = 1.0f;
            kvq_matmul(y1, x, w, KVQ_DTYPE_F32, T, in, out, NULL, 2);
            for (int t = 0; t < T; t++)
                for (int o = 0; o < out; o++) assert_true(y1[(size_t)t * out + o] == x[(size_t)t * in + o]);
        }
        free(x); free(w); free(wb); free(y0); free(y1); free(xp);
    }
}

static void test_rmsnorm(void **st) {
    (void)st;
    rng_state = 7;
    int rows = 33, n = 200;
    float *x = rnd((size_t)rows * n), *w = rnd(n), *a = malloc(sizeof(float) * rows * n), *b = malloc(sizeof(float) * rows * n);
    for (int r = 0; r < rows; r++) kvq_rmsnorm_ref(a + r * n, x + r * n, w, n, 1e-5f);
    kvq_rmsnorm(b, x, w, rows, n, 1e-5f, 2);
    assert_true(rel_err(b, a, (size_t)rows * n) < 1e-6);
    float v[2] = {3, 4}, one[2] = {1, 1}, o[2];
    kvq_rmsnorm_ref(o, v, one, 2, 0.0f); // rms = sqrt(12.5)
    assert_float_equal(o[0], 3 / sqrt(12.5), 1e-6);
    assert_float_equal(o[1], 4 / sqrt(12.5), 1e-6);
    free(x); free(w); free(a); free(b);
}

static void test_softmax(void **st) {
    (void)st;
    float v[2] = {0.0f, logf(3.0f)};
    double lse = kvq_softmax(v, 2);
    assert_float_equal(v[0], 0.25, 1e-6);
    assert_float_equal(v[1], 0.75, 1e-6);
    assert_float_equal(lse, log(4.0), 1e-6);
    rng_state = 9;
    float *a = rnd(1000), *b = malloc(4000);
    for (int i = 0; i < 1000; i++) a[i] *= 30;
    memcpy(b, a, 4000);
    double l0 = kvq_logsumexp(a, 1000);
    assert_float_equal(l0, kvq_softmax_ref(a, 1000), 1e-4);
    kvq_softmax(b, 1000);
    assert_true(rel_err(b, a, 1000) < 1e-6);
    free(a); free(b);
}

static void test_fast_expf(void **st) {
    (void)st;
    double mx = 0;
    for (float x = -87.0f; x < 88.0f; x += 0.00731f) {
        double e = fabs(kvq_fast_expf(x) / exp((double)x) - 1);
        if (e > mx) mx = e;
    }
    assert_true(mx < 3e-7);
    assert_true(kvq_fast_expf(0.0f) == 1.0f);
    assert_true(kvq_fast_expf(-1000.0f) == 0.0f);
    // NaN in, NaN out; infinities saturate (no float-to-int conversion of NaN: UBSan-clean)
    assert_true(isnan(kvq_fast_expf(NAN)));
    assert_true(kvq_fast_expf(-INFINITY) == 0.0f);
    assert_true(kvq_fast_expf(INFINITY) == kvq_fast_expf(88.0f));
}

static void test_swiglu(void **st) {
    (void)st;
    rng_state = 11;
    int rows = 9, n = 70;
    float *gu = rnd((size_t)rows * 2 * n), *a = malloc(sizeof(float) * rows * n), *b = malloc(sizeof(float) * rows * n);
    for (int r = 0; r < rows; r++) kvq_silu_mul_ref(a + r * n, gu + r * 2 * n, gu + r * 2 * n + n, n);
    kvq_silu_mul_fused(b, gu, rows, n, 2);
    assert_true(rel_err(b, a, (size_t)rows * n) < 1e-6);
    float g = 1.0f, u = 2.0f, o;
    kvq_silu_mul_ref(&o, &g, &u, 1);
    assert_float_equal(o, 2.0 / (1.0 + exp(-1.0)), 1e-6);
    free(gu); free(a); free(b);
}

static void test_rope(void **st) {
    (void)st;
    kvq_rope_params p = {.type = KVQ_ROPE_SCALE_NONE, .theta = 10000.0};
    float f[16];
    kvq_rope_freqs(f, 32, &p);
    assert_float_equal(f[0], 1.0, 0);
    assert_float_equal(f[8], 0.01, 1e-8); // 10000^(-16/32)
    // llama3: frequencies with wavelength beyond original/low are divided by factor,
    // those below original/high untouched (values from the formula by hand)
    kvq_rope_params l3 = {.type = KVQ_ROPE_SCALE_LLAMA3, .theta = 500000.0, .factor = 8,
                          .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position = 256};
    float g[16];
    kvq_rope_freqs(g, 32, &l3);
    kvq_rope_freqs(f, 32, &(kvq_rope_params){.type = KVQ_ROPE_SCALE_NONE, .theta = 500000.0});
    for (int i = 0; i < 16; i++) {
        double wl = 2 * M_PI / f[i];
        if (wl < 64) assert_true(g[i] == f[i]);
        else if (wl > 256) assert_float_equal(g[i], f[i] / 8, 1e-12);
        else {
            double s = (256 / wl - 1) / 3;
            assert_float_equal(g[i], (1 - s) * f[i] / 8 + s * f[i], 1e-6 * f[i]);
        }
    }
    rng_state = 13;
    int T = 11, H = 3, hd = 16;
    for (int rot = 8; rot <= 16; rot += 8) {
        float *x = rnd((size_t)T * H * hd), *y = malloc(sizeof(float) * T * H * hd);
        memcpy(y, x, sizeof(float) * T * H * hd);
        float inv[8];
        kvq_rope_freqs(inv, rot, &p);
        for (int t = 0; t < T; t++) kvq_rope_ref(x + t * H * hd, H, hd, rot, 5 + t, inv);
        kvq_rope(y, T, H, hd, rot, 5, inv, 2);
        assert_true(rel_err(y, x, (size_t)T * H * hd) < 1e-6);
        free(x); free(y);
    }
    // rotation by angle pos·1 of the pair (1, 0) at i = 0 gives (cos, sin)
    float v[4] = {1, 0, 0, 0}, inv1[2] = {1.0f, 0.5f};
    kvq_rope_ref(v, 1, 4, 4, 2, inv1);
    assert_float_equal(v[0], cos(2.0), 1e-6);
    assert_float_equal(v[2], sin(2.0), 1e-6);
}

static void test_attention(void **st) {
    (void)st;
    rng_state = 17;
    // head counts around the fast path's blocks (8 heads for scores, 4 for values), head
    // dims of one and two 64-channel blocks and one it leaves to the plain body (48)
    const int nqs[] = {4, 1, 3, 8, 9}, hds[] = {64, 128, 48};
    for (int cfg = 0; cfg < 7; cfg++) {
    const int n_q = cfg < 5 ? nqs[cfg] : 4, hd = cfg < 5 ? 64 : hds[cfg - 4];
    for (int n_ctx = 1; n_ctx <= 300; n_ctx += 99) {
        float *q = rnd((size_t)n_q * hd), *K = rnd((size_t)n_ctx * hd), *V = rnd((size_t)n_ctx * hd);
        float *a = malloc(sizeof(float) * n_q * hd), *b = malloc(sizeof(float) * n_q * hd);
        float *sc = malloc(sizeof(float) * n_q * n_ctx);
        int ld = n_ctx + 5; // transposed keys with a row stride beyond n_ctx
        float *Kt = malloc(sizeof(float) * hd * ld);
        uint16_t *Kth = malloc(2 * (size_t)hd * ld);
        for (int j = 0; j < n_ctx; j++)
            for (int i = 0; i < hd; i++) Kt[(size_t)i * ld + j] = K[(size_t)j * hd + i];
        for (int h = 0; h < n_q; h++) kvq_attention_ref(a + h * hd, q + h * hd, K, V, n_ctx, hd, 0.125f);
        kvq_attention_gqa(b, q, n_q, Kt, ld, V, KVQ_DTYPE_F32, n_ctx, hd, 0.125f, sc);
        assert_true(rel_err(b, a, (size_t)n_q * hd) < 1e-6);
        // fp16 K/V: the reference on the rounded values
        uint16_t *Kh = malloc((size_t)n_ctx * hd * 2), *Vh = malloc((size_t)n_ctx * hd * 2);
        kvq_dtype_from_f32(KVQ_DTYPE_F16, K, (size_t)n_ctx * hd, Kh);
        kvq_dtype_from_f32(KVQ_DTYPE_F16, V, (size_t)n_ctx * hd, Vh);
        kvq_dtype_to_f32(KVQ_DTYPE_F16, Kh, (size_t)n_ctx * hd, K);
        kvq_dtype_to_f32(KVQ_DTYPE_F16, Vh, (size_t)n_ctx * hd, V);
        for (int j = 0; j < n_ctx; j++)
            for (int i = 0; i < hd; i++) Kth[(size_t)i * ld + j] = Kh[(size_t)j * hd + i];
        for (int h = 0; h < n_q; h++) kvq_attention_ref(a + h * hd, q + h * hd, K, V, n_ctx, hd, 0.125f);
        kvq_attention_gqa(b, q, n_q, Kth, ld, Vh, KVQ_DTYPE_F16, n_ctx, hd, 0.125f, sc);
        assert_true(rel_err(b, a, (size_t)n_q * hd) < 1e-6);
        if (n_ctx == 1) assert_true(rel_err(b, V, hd) < 1e-7); // one position: out = V
        free(q); free(K); free(V); free(a); free(b); free(sc); free(Kh); free(Vh); free(Kt); free(Kth);
    }
    }
}

// One query against row-stored keys with the first t0 scores given by the caller (as a KV
// codec's packed keys give them): equal to the reference on the whole history.
static void test_attention_rows(void **st) {
    (void)st;
    rng_state = 23;
    const int hds[] = {64, 128, 48};
    for (int c = 0; c < 3; c++)
        for (int n_ctx = 1; n_ctx <= 300; n_ctx += 61) {
            const int hd = hds[c], t0 = n_ctx / 3;
            float *q = rnd((size_t)hd), *K = rnd((size_t)n_ctx * hd), *V = rnd((size_t)n_ctx * hd);
            float *a = malloc(sizeof(float) * hd), *b = malloc(sizeof(float) * hd), *sc = malloc(sizeof(float) * n_ctx);
            kvq_attention_ref(a, q, K, V, n_ctx, hd, 0.125f);
            for (int t = 0; t < t0; t++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)q[i] * K[(size_t)t * hd + i];
                sc[t] = (float)d;
            }
            kvq_attention_rows(b, q, K, V, n_ctx, t0, hd, 0.125f, sc);
            assert_true(rel_err(b, a, (size_t)hd) < 1e-6);
            double z = 0;
            for (int t = 0; t < n_ctx; t++) z += sc[t];
            assert_true(fabs(z - 1) < 1e-5); // sc holds the probabilities
            float *p2 = malloc(sizeof(float) * n_ctx); // kvq_attention_probs: the same probabilities
            for (int t = 0; t < t0; t++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)q[i] * K[(size_t)t * hd + i];
                p2[t] = (float)d;
            }
            kvq_attention_probs(q, K, n_ctx, t0, hd, 0.125f, p2);
            assert_memory_equal(p2, sc, sizeof(float) * n_ctx);
            free(p2);
            free(q); free(K); free(V); free(a); free(b); free(sc);
        }
}

// KV code unpacking (pdep / shifts) against the one-bit-at-a-time reference for every width and
// ragged lengths, from buffers of exactly ceil(n·b/8) bytes (ASan sees any over-read); the sums
// over codes against plain double loops.
static void test_kv_codes(void **st) {
    (void)st;
    rng_state = 77;
    const int ns[] = {1, 5, 7, 8, 9, 16, 37, 63, 64, 65, 100, 128, 513};
    for (int b = 1; b <= 8; b++)
        for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
            const int n = ns[k];
            const size_t bytes = ((size_t)n * b + 7) / 8;
            uint8_t *p = malloc(bytes), *c = malloc(n), *r = malloc(n);
            for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)(frand() * 128 + 128);
            kvq_codes_unpack(p, b, n, c);
            kvq_codes_unpack_ref(p, 0, b, n, r);
            assert_memory_equal(c, r, (size_t)n);
            for (int bit0 = 1; bit0 < 20; bit0 += 3) { // codes from an odd bit: exactly the bytes they touch
                const size_t nb = (bit0 + (size_t)n * b + 7) / 8;
                uint8_t *p2 = malloc(nb), *c2 = malloc(n), *r2 = malloc(n);
                for (size_t i = 0; i < nb; i++) p2[i] = (uint8_t)(frand() * 128 + 128);
                kvq_codes_unpack_at(p2, (size_t)bit0, b, n, c2);
                kvq_codes_unpack_ref(p2, bit0, b, n, r2);
                assert_memory_equal(c2, r2, (size_t)n);
                free(p2), free(c2), free(r2);
            }
            for (int i = 0; i < n; i++) assert_true(r[i] < (1u << b));
            float *q = rnd((size_t)n), *acc = rnd((size_t)n), *lut = rnd((size_t)1 << b);
            double dref = 0, lref = 0;
            for (int i = 0; i < n; i++) dref += (double)q[i] * c[i], lref += (double)q[i] * lut[c[i]];
            double mag = 0, lmag = 0;
            for (int i = 0; i < n; i++) mag += fabs(q[i]) * c[i], lmag += fabs(q[i] * lut[c[i]]);
            assert_true(fabs(kvq_codes_dot(q, c, n) - dref) <= 1e-6 * mag + 1e-30);
            assert_true(fabs(kvq_codes_lut_dot(q, lut, 1 << b, c, n) - lref) <= 1e-6 * lmag + 1e-30);
            float *a1 = malloc(sizeof(float) * n), *a2 = malloc(sizeof(float) * n);
            memcpy(a1, acc, sizeof(float) * n), memcpy(a2, acc, sizeof(float) * n);
            kvq_codes_axpy(a1, 0.37f, c, n);
            kvq_codes_lut_axpy(a2, -1.5f, lut, 1 << b, c, n);
            for (int i = 0; i < n; i++) {
                const double e1 = (double)acc[i] + 0.37 * c[i], e2 = (double)acc[i] - 1.5 * lut[c[i]];
                assert_true(fabs(a1[i] - e1) <= 1e-6 * (fabs(acc[i]) + 0.37 * c[i]) + 1e-30);
                assert_true(fabs(a2[i] - e2) <= 1e-6 * (fabs(acc[i]) + fabs(1.5 * lut[c[i]])) + 1e-30);
            }
            free(p), free(c), free(r), free(q), free(acc), free(lut), free(a1), free(a2);
        }
}

// The KV execution forms' sums (kvexec.c, AVX2 here) against their plain references on random
// rows: HQMQ chunk codes at 16 and 32 bits (index bits 5..16, radius bits 2..8), lattice codes at
// int8 and int16 with and without the A2 embedding and a dither; ragged chunk counts and head
// dims, 1..11 queries, rows further apart than they are long, buffers of exactly nt rows (ASan
// sees an over-read), zero weights. Bound: 1e-5 of the sum of the terms' magnitudes.
static void test_kv_exec(void **st) {
    (void)st;
    rng_state = 4242;
    const int nqs[] = {1, 3, 4, 8, 11}, nts[] = {1, 6, 33};
    int checked = 0;
    double worst = 0;
    // HQMQ: (index bits, radius bits)
    const int hb[][2] = {{5, 3}, {12, 4}, {13, 6}, {16, 8}, {11, 2}};
    const int nchs[] = {1, 2, 3, 7, 8, 9, 16, 17, 32};
    for (size_t h = 0; h < sizeof hb / sizeof *hb; h++)
        for (size_t a = 0; a < sizeof nchs / sizeof *nchs; a++) {
            const int ib = hb[h][0], br = hb[h][1], nch = nchs[a], wide = ib + br > 16, M = (1 << ib) - (ib > 5 ? 7 : 0);
            const size_t xs = 4 + (size_t)nch * (wide ? 4 : 2) + 4 * (a & 1); // odd rows: 4 bytes of padding
            float *cb = rnd(4 * (size_t)M);
            for (size_t ni = 0; ni < sizeof nts / sizeof *nts; ni++) {
                const int nt = nts[ni];
                uint8_t *x = malloc(xs * nt);
                for (int t = 0; t < nt; t++) {
                    uint8_t *row = x + (size_t)t * xs;
                    const float sc = 0.1f + frand() * frand();
                    memcpy(row, &sc, 4);
                    for (int k = 0; k < nch; k++) {
                        const uint32_t idx = (uint32_t)((frand() + 1) * 0.5f * M) % (uint32_t)M,
                                       r = (uint32_t)((frand() + 1) * 0.5f * (1 << br)) % (1u << br);
                        const uint32_t code = idx | r << ib;
                        if (wide) memcpy(row + 4 + 4 * k, &code, 4);
                        else { const uint16_t c16 = (uint16_t)code; memcpy(row + 4 + 2 * k, &c16, 2); }
                    }
                }
                for (size_t qi = 0; qi < sizeof nqs / sizeof *nqs; qi++) {
                    const int nq = nqs[qi], dp = 4 * nch, ld = nt + 3;
                    float *q = rnd((size_t)nq * dp), *s1 = malloc(sizeof(float) * nq * ld), *s2 = malloc(sizeof(float) * nq * ld);
                    float *p = rnd((size_t)nq * ld), *o1 = rnd((size_t)nq * dp), *o2 = malloc(sizeof(float) * nq * dp);
                    for (int i = 0; i < nq * ld; i++) if (i % 5 == 2) p[i] = 0;
                    memcpy(o2, o1, sizeof(float) * nq * dp);
                    kvq_kvx_hqmq_score(cb, ib, wide, nch, x, xs, nt, q, nq, dp, s1, ld);
                    kvq_kvx_hqmq_score_ref(cb, ib, wide, nch, x, xs, nt, q, nq, dp, s2, ld);
                    kvq_kvx_hqmq_vsum(cb, ib, wide, nch, x, xs, nt, p, ld, nq, o1);
                    kvq_kvx_hqmq_vsum_ref(cb, ib, wide, nch, x, xs, nt, p, ld, nq, o2);
                    for (int i = 0; i < nq; i++)
                        for (int t = 0; t < nt; t++) {
                            const uint8_t *row = x + (size_t)t * xs;
                            float sc;
                            memcpy(&sc, row, 4);
                            double mag = 0;
                            for (int k = 0; k < nch; k++) {
                                uint32_t c = 0;
                                memcpy(&c, row + 4 + (wide ? 4 : 2) * k, wide ? 4 : 2);
                                for (int j = 0; j < 4; j++) mag += fabs(sc * (double)(c >> ib) * q[i * dp + 4 * k + j] * cb[4 * (c & ((1u << ib) - 1)) + j]);
                            }
                            const double e = fabs(s1[i * ld + t] - s2[i * ld + t]) / (mag + 1e-30);
                            if (e > 1e-5) fail_msg("hqmq score ib=%d br=%d nch=%d nq=%d nt=%d: %g vs %g", ib, br, nch, nq, nt, s1[i * ld + t], s2[i * ld + t]);
                            worst = fmax(worst, e);
                        }
                    for (int i = 0; i < nq; i++) { // magnitude: Σ_t |p|·scale·max r·max|cb| bounds every entry
                        double mag = 0;
                        for (int t = 0; t < nt; t++) {
                            float sc;
                            memcpy(&sc, x + (size_t)t * xs, 4);
                            mag += fabs(p[i * ld + t] * sc) * (1 << br);
                        }
                        for (int j = 0; j < dp; j++) {
                            const double e = fabs(o1[i * dp + j] - o2[i * dp + j]) / (mag + fabs(o2[i * dp + j]) + 1e-30);
                            if (e > 1e-5) fail_msg("hqmq vsum ib=%d br=%d nch=%d nq=%d nt=%d: %g vs %g", ib, br, nch, nq, nt, o1[i * dp + j], o2[i * dp + j]);
                            worst = fmax(worst, e);
                        }
                    }
                    checked++;
                    free(q), free(s1), free(s2), free(p), free(o1), free(o2);
                }
                free(x);
            }
            free(cb);
        }
    // lattice codes: head dims, int8 / int16, embedding (A2's √3) and dither on or off
    const int ds[] = {1, 2, 8, 20, 37, 64, 128};
    for (size_t di = 0; di < sizeof ds / sizeof *ds; di++)
        for (int var = 0; var < 8; var++) {
            const int d = ds[di], wide = var & 1, use_emb = var >> 1 & 1, use_u = var >> 2 & 1, lim = wide ? 3000 : 127;
            const size_t xs = 8 + (size_t)d * (wide ? 2 : 1) + 4 * (var == 3);
            float *emb = use_emb ? rnd((size_t)d) : NULL;
            for (size_t ni = 0; ni < sizeof nts / sizeof *nts; ni++) {
                const int nt = nts[ni];
                uint8_t *x = malloc(xs * nt);
                for (int t = 0; t < nt; t++) {
                    uint8_t *row = x + (size_t)t * xs;
                    const float g = 0.5f + frand();
                    const uint32_t ctr = (uint32_t)t;
                    memcpy(row, &g, 4), memcpy(row + 4, &ctr, 4);
                    for (int j = 0; j < d; j++) {
                        const int c = (int)(frand() * lim);
                        if (wide) { const int16_t c16 = (int16_t)c; memcpy(row + 8 + 2 * j, &c16, 2); }
                        else row[8 + j] = (uint8_t)(int8_t)c;
                    }
                }
                float *U = use_u ? rnd((size_t)nt * d) : NULL;
                for (size_t qi = 0; qi < sizeof nqs / sizeof *nqs; qi++) {
                    const int nq = nqs[qi], ld = nt + 2;
                    const float gmul = 0.037f;
                    float *q = rnd((size_t)nq * d), *s1 = malloc(sizeof(float) * nq * ld), *s2 = malloc(sizeof(float) * nq * ld);
                    float *p = rnd((size_t)nq * ld), *o1 = rnd((size_t)nq * d), *o2 = malloc(sizeof(float) * nq * d);
                    for (int i = 0; i < nq * ld; i++) if (i % 4 == 1) p[i] = 0;
                    memcpy(o2, o1, sizeof(float) * nq * d);
                    kvq_kvx_lat_score(x, xs, wide, d, nt, gmul, emb, U, q, nq, d, s1, ld);
                    kvq_kvx_lat_score_ref(x, xs, wide, d, nt, gmul, emb, U, q, nq, d, s2, ld);
                    kvq_kvx_lat_vsum(x, xs, wide, d, nt, gmul, emb, U, p, ld, nq, o1);
                    kvq_kvx_lat_vsum_ref(x, xs, wide, d, nt, gmul, emb, U, p, ld, nq, o2);
                    for (int i = 0; i < nq; i++) {
                        double vmag = 0;
                        for (int t = 0; t < nt; t++) {
                            const uint8_t *row = x + (size_t)t * xs;
                            float g;
                            memcpy(&g, row, 4);
                            double mag = 0;
                            for (int j = 0; j < d; j++) {
                                int c;
                                if (wide) { int16_t c16; memcpy(&c16, row + 8 + 2 * j, 2); c = c16; }
                                else c = (int8_t)row[8 + j];
                                const double v = (double)c * (emb ? emb[j] : 1) - (U ? U[t * d + j] : 0);
                                mag += fabs(q[i * d + j] * v) * g * gmul;
                                vmag = fmax(vmag, fabs(p[i * ld + t] * v * g * gmul));
                            }
                            const double e = fabs(s1[i * ld + t] - s2[i * ld + t]) / (mag + 1e-30);
                            if (e > 1e-5) fail_msg("lattice score d=%d var=%d nq=%d nt=%d: %g vs %g", d, var, nq, nt, s1[i * ld + t], s2[i * ld + t]);
                            worst = fmax(worst, e);
                        }
                        for (int j = 0; j < d; j++) {
                            const double e = fabs(o1[i * d + j] - o2[i * d + j]) / (nt * vmag + fabs(o2[i * d + j]) + 1e-30);
                            if (e > 1e-5) fail_msg("lattice vsum d=%d var=%d nq=%d nt=%d: %g vs %g", d, var, nq, nt, o1[i * d + j], o2[i * d + j]);
                            worst = fmax(worst, e);
                        }
                    }
                    checked++;
                    free(q), free(s1), free(s2), free(p), free(o1), free(o2);
                }
                free(x), free(U);
            }
            free(emb);
        }
    // HyperQuant-KV's E8 dither z: the vector draws and sums equal the scalar ones bit for bit
    for (int r = 0; r < 200; r++) {
        const uint64_t s0 = (uint64_t)r * 0x9e3779b97f4a7c15ull ^ ((uint64_t)(frand() * 1e9) << 20);
        const int nb = 1 + r % 16;
        float z1[128], z2[128];
        kvq_kvx_e8_dither_z(s0, nb, z1);
        kvq_kvx_e8_dither_z_ref(s0, nb, z2);
        assert_memory_equal(z1, z2, sizeof(float) * 8 * nb);
        for (int i = 0; i < 8 * nb; i++) assert_true(z2[i] > -2.0f && z2[i] < 7.0f); // inside the parallelepiped
        checked++;
    }
    printf("  %d execution-form cases: worst relative difference fast vs reference %.2e\n", checked, worst);
    assert_true(checked > 100);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul), cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_swiglu), cmocka_unit_test(test_fast_expf), cmocka_unit_test(test_rope), cmocka_unit_test(test_attention), cmocka_unit_test(test_attention_rows),
        cmocka_unit_test(test_kv_codes), cmocka_unit_test(test_kv_exec),
    };
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
