// kvq-verify's scoring on the GPU (issue 12): kernels/cuda/verify_score.cu against the host's
// sequential reference (tests/vscore_check.h's bounds) on seeded random logits up to the 8B
// vocabulary, on a real window of kvq-tiny-llama and a 2-bit RTN conversion kept on the device
// (kvq_model_forward_keep + kvq_model_vscore), and kvq_verify_run --gpu with device scoring
// against host scoring (KVQ_VERIFY_DEVICE_SCORE=1 vs 0). Skips (with the reason) without a device.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/testutil.h"
#include "tests/testrng.h"
#include "tests/vscore_check.h"

#include "kernels/cpu/verify_score.h"
#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/verify_score.h"
#include "libconv/convert/convert.h"
#include "libconv/runtime/backend.h"
#include "libconv/runtime/model.h"
#include "libconv/verify/verify.h"

#define TINY "tests/models/kvq-tiny-llama"
#define TEXT "tests/tokenizer/heldout_start.txt"

static char g_dir[64], g_rtn[128]; // a 2-bit RTN conversion of TINY (setup, only with a device)

static int have_gpu(void) {
    char why[256];
    if (kvq_cuda_device_count(why, sizeof why) > 0) return 1;
    printf("  skip: %s\n", why);
    return 0;
}

#define OK(call)                                                   \
    do {                                                           \
        kvq_err e_ = {0};                                          \
        if ((call) != KVQ_OK) fail_msg("%s: %s", #call, e_.msg);   \
    } while (0)
#define E (&e_)

static void *dev(const void *h, size_t bytes) {
    void *d = NULL;
    OK(kvq_cuda_malloc(&d, bytes ? bytes : 1, E));
    if (h) OK(kvq_cuda_copy(d, h, bytes, 1, E));
    return d;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Random rows as tests/test_verify.c's test_score_order draws them (noise levels, ties, an
// identical pair, logits far from 0), on the device; every row within the bounds, the C
// reference's order matched to the device's exp/log ulps (reported: rows bit-equal).
static void test_random(void **state) {
    (void)state;
    if (!have_gpu()) return;
    static const int vocab[] = {1, 255, 256, 257, 32000, 128256};
    uint64_t rng = 20261127;
    vscore_err w = {0};
    long same_bits = 0, rows_all = 0;
    for (size_t iv = 0; iv < sizeof vocab / sizeof *vocab; iv++) {
        const int V = vocab[iv], R = 24;
        float *a = malloc(sizeof(float) * V * R), *b = malloc(sizeof(float) * V * R);
        int32_t tg[24];
        kvq_vscore got[24], ref[24];
        for (int r = 0; r < R; r++) {
            const int kind = r % 6;
            const double scale = kind == 3 ? 12 : 3, noise = kind == 1 ? 0 : kind == 2 ? 3 : 0.05 * (kind + 1);
            for (int v = 0; v < V; v++) {
                float x = (float)(scale * gauss(&rng));
                if (kind == 4) x = (float)(v % 5);
                if (kind == 5) x += 40;
                a[(size_t)r * V + v] = x;
                b[(size_t)r * V + v] = kind == 1 ? x : (float)(x + noise * gauss(&rng));
            }
            tg[r] = (int32_t)(rng_next(&rng) % (uint64_t)V);
        }
        float *da = dev(a, sizeof(float) * V * R), *db = dev(b, sizeof(float) * V * R);
        int32_t *dt = dev(tg, sizeof tg);
        kvq_vscore *dout = dev(NULL, sizeof got);
        OK(kvq_cuda_verify_score(da, db, dt, R, V, dout, E));
        OK(kvq_cuda_sync(E));
        OK(kvq_cuda_copy(got, dout, sizeof got, 0, E));
        kvq_verify_score_ref(a, b, tg, R, V, ref);
        for (int r = 0; r < R; r++) {
            if (!vscore_check(a + (size_t)r * V, b + (size_t)r * V, tg[r], V, &got[r], &w))
                fail_msg("vocab %d row %d: device scores outside the bound (kld %.17g, host ref %.17g)", V, r, got[r].kld,
                         ref[r].kld);
            if (r % 6 == 1) assert_true(got[r].kld == 0.0 && got[r].dp == 0.0);
            same_bits += !memcmp(&got[r], &ref[r], sizeof got[r]);
            rows_all++;
        }
        kvq_cuda_free(da); kvq_cuda_free(db); kvq_cuda_free(dt); kvq_cuda_free(dout);
        free(a);
        free(b);
    }
    printf("  device vs host: %ld rows, worst/bound lse %.3g kld %.3g dp %.3g nll %.3g; bit-equal to the C order: %ld of %ld\n",
           w.n, w.lse, w.kld, w.dp, w.nll, same_bits, rows_all);
}

// One window of 512 positions at the 8B vocabulary: the kernel's time against the download it
// replaces (a figure for docs/RESULTS.md, not a test).
static void test_timing(void **state) {
    (void)state;
    if (!have_gpu()) return;
    const int V = 128256, R = 512;
    const size_t n = (size_t)V * R;
    uint64_t rng = 7;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    int32_t *tg = malloc(sizeof(int32_t) * R);
    for (size_t i = 0; i < n; i++) a[i] = (float)(3 * gauss(&rng)), b[i] = a[i] + 0.1f * (float)gauss(&rng);
    for (int r = 0; r < R; r++) tg[r] = (int32_t)(rng_next(&rng) % V);
    float *da = dev(a, sizeof(float) * n), *db = dev(b, sizeof(float) * n);
    int32_t *dt = dev(tg, sizeof(int32_t) * R);
    kvq_vscore *dout = dev(NULL, sizeof(kvq_vscore) * R);
    OK(kvq_cuda_verify_score(da, db, dt, R, V, dout, E)); // warm
    OK(kvq_cuda_sync(E));
    double t0 = now_s();
    for (int i = 0; i < 10; i++) OK(kvq_cuda_verify_score(da, db, dt, R, V, dout, E));
    OK(kvq_cuda_sync(E));
    double t_k = (now_s() - t0) / 10;
    t0 = now_s();
    OK(kvq_cuda_copy(a, da, sizeof(float) * n, 0, E)); // one model's window of logits, pageable memory
    double t_d = now_s() - t0;
    printf("  512 x 128256: score kernel %.3f ms a pair; one model's logits download %.3f ms (%.0f MB)\n", 1e3 * t_k,
           1e3 * t_d, sizeof(float) * n / 1e6);
    kvq_cuda_free(da); kvq_cuda_free(db); kvq_cuda_free(dt); kvq_cuda_free(dout);
    free(a); free(b); free(tg);
}

// A real window: TINY and its 2-bit RTN conversion on the GPU, logits kept there; the device
// scores against the host's on the same (downloaded) logits.
static void test_tiny_window(void **state) {
    (void)state;
    if (!have_gpu()) return;
    kvq_model_opts o = kvq_model_opts_default();
    o.backend = kvq_backend_cuda_new;
    kvq_model *src, *q;
    OK(kvq_model_open(TINY, &o, &src, E));
    OK(kvq_model_open(g_rtn, &o, &q, E));
    const int V = kvq_model_arch(src)->vocab_size, T = 64;
    int32_t tok[65];
    uint64_t rng = 99;
    for (int i = 0; i < T + 1; i++) tok[i] = (int32_t)(rng_next(&rng) % (uint64_t)V);
    const float *ls, *lq;
    OK(kvq_model_forward_keep(src, tok, T, 0, &ls, E));
    OK(kvq_model_forward_keep(q, tok, T, 0, &lq, E));
    kvq_vscore got[64];
    OK(kvq_model_vscore(q, ls, lq, tok + 1, T, got, E));
    float *hs = malloc(sizeof(float) * V * T), *hq = malloc(sizeof(float) * V * T), *hd = malloc(sizeof(float) * V * T);
    OK(kvq_cuda_copy(hs, ls, sizeof(float) * V * T, 0, E));
    OK(kvq_cuda_copy(hq, lq, sizeof(float) * V * T, 0, E));
    vscore_err w = {0};
    for (int i = 0; i < T; i++)
        if (!vscore_check(hs + (size_t)i * V, hq + (size_t)i * V, tok[i + 1], V, &got[i], &w))
            fail_msg("position %d: device scores outside the bound (kld %.17g)", i, got[i].kld);
    // The kept logits against the downloaded ones of the same forward (reported: a GPU forward that
    // is not deterministic would show here, not in the scores).
    OK(kvq_model_forward(q, tok, T, 0, hd, 1, E));
    double dmax = 0;
    for (size_t i = 0; i < (size_t)V * T; i++) dmax = fmax(dmax, fabs((double)hd[i] - hq[i]));
    printf("  tiny window: %d positions within the bounds (worst/bound kld %.3g lse %.3g); kept vs downloaded logits max |diff| %g\n",
           T, w.kld, w.lse, dmax);
    free(hs); free(hq); free(hd);
    kvq_model_close(src);
    kvq_model_close(q);
}

// kvq_verify_run --gpu: device scoring (the default there) against host scoring of the same GPU logits.
static void test_verify_gpu(void **state) {
    (void)state;
    if (!have_gpu()) return;
    kvq_verify_opts o = kvq_verify_opts_default();
    o.kvq_path = g_rtn;
    o.source = TINY;
    o.text_path = TEXT;
    o.proto.ctx = 64;
    o.max_windows = 3;
    o.backend = kvq_backend_cuda_new;
    kvq_verify_report h, d;
    setenv("KVQ_VERIFY_DEVICE_SCORE", "0", 1);
    OK(kvq_verify_run(&o, &h, E));
    unsetenv("KVQ_VERIFY_DEVICE_SCORE"); // the default on a GPU: on the device
    OK(kvq_verify_run(&o, &d, E));
    const kvq_verify_eval *a = &h.run[0], *b = &d.run[0];
    printf("  verify --gpu: kld mean host %.17g device %.17g (rel %.2g), ppl %.9g vs %.9g, top1 %.6f vs %.6f\n", a->kld.mean,
           b->kld.mean, fabs(a->kld.mean - b->kld.mean) / a->kld.mean, a->ppl, b->ppl, a->kld.top1, b->kld.top1);
    assert_int_equal(h.n_scored, d.n_scored);
    assert_true(a->kld.mean > 1e-3);
    assert_true(fabs(a->kld.mean - b->kld.mean) <= 1e-12 * a->kld.mean);
    assert_true(a->kld.top1 == b->kld.top1);
    assert_true(fabs(a->kld.mean_dp - b->kld.mean_dp) <= 1e-13);
    assert_true(fabs(a->ppl - b->ppl) <= 1e-6 * a->ppl);
    assert_true(fabs(h.source_ppl - d.source_ppl) <= 1e-6 * h.source_ppl);
    kvq_verify_report_free(&h);
    kvq_verify_report_free(&d);
}

static int setup(void **state) {
    (void)state;
    char why[256];
    if (kvq_cuda_device_count(why, sizeof why) <= 0) return 0; // the tests skip
    snprintf(g_dir, sizeof g_dir, "/tmp/kvq-cvfy-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_rtn, sizeof g_rtn, "%s/rtn2.kvq", g_dir);
    kvq_convert_opts co = {0};
    co.plan.weights = "rtn:2:g64";
    co.plan.quantize_embeddings = -1;
    kvq_err e = {0};
    if (kvq_convert(TINY, g_rtn, &co, NULL, &e)) { printf("convert: %s\n", e.msg); return -1; }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (g_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd)) printf("  could not remove %s\n", g_dir);
    }
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_timing),
        cmocka_unit_test(test_tiny_window),
        cmocka_unit_test(test_verify_gpu),
    };
    const char *f = getenv("KVQ_TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
    return cmocka_run_group_tests(tests, setup, teardown);
}
