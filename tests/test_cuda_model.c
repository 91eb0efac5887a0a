// The GPU backend against the CPU: each kernels/cuda op against its CPU reference on seeded
// random inputs, then whole models (every oracle checkpoint, every shared model, .kvq files
// converted here with HyperQuant E8 4.0/3.0 and RTN 4, embeddings packed too) run by
// kvq_model_forward on both backends: logits within 1e-3 relative (fp32 activations give
// ~1e-6), the transformers oracles within 1e-3, greedy text equal for 32 tokens, and GPU
// prefill equal to GPU token-by-token decode. Skips (with the reason) without a device.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/testutil.h"

#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/hqx.h"
#include "kernels/cuda/kv_attn.h"
#include "kernels/cuda/ops.h"
#include "libconv/convert/convert.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/runtime/backend.h"
#include "libconv/runtime/model.h"
#include "tests/testrng.h"

#define TINY "tests/models/kvq-tiny-llama"

static const char *shared(void) {
    const char *s = getenv("KVQ_SHARED");
    return s && *s ? s : "../shared";
}
static int is_dir(const char *p) { struct stat s; return stat(p, &s) == 0 && S_ISDIR(s.st_mode); }
static int exists(const char *p) { struct stat s; return stat(p, &s) == 0; }

static int have_gpu(void) {
    char why[256];
    if (kvq_cuda_device_count(why, sizeof why) > 0) return 1;
    printf("  skip: %s\n", why);
    return 0;
}

// ---- device buffers
static float *dev(const float *h, size_t n) {
    void *d = NULL;
    kvq_err e = {0};
    if (kvq_cuda_malloc(&d, sizeof(float) * (n ? n : 1), &e)) fail_msg("%s", e.msg);
    if (h && kvq_cuda_copy(d, h, sizeof(float) * n, 1, &e)) fail_msg("%s", e.msg);
    return d;
}
static void back(float *h, const float *d, size_t n) {
    kvq_err e = {0};
    if (kvq_cuda_sync(&e) || kvq_cuda_copy(h, d, sizeof(float) * n, 0, &e)) fail_msg("%s", e.msg);
}
static float *rnd(uint64_t *r, size_t n, float s) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = s * (float)gauss(r);
    return p;
}
#define OK(call)                                                   \
    do {                                                           \
        kvq_err e_ = {0};                                          \
        if ((call) != KVQ_OK) fail_msg("%s: %s", #call, e_.msg);   \
    } while (0)
#define E (&e_)

// The fp32 cache's context limit (no device needed): the split and tiled kernels hold no
// per-position state on chip, so shapes they take run any context the memory holds (the 8B
// shape at 128k); other shapes keep the one-block kernel's shared-memory bound.
static void test_max_ctx(void **st) {
    (void)st;
    if (kvq_cuda_attention_max_ctx(32, 8, 128) == 0) skip(); // built without CUDA
    assert_true(kvq_cuda_attention_max_ctx(32, 8, 128) >= 1 << 20); // Llama-3-8B: split kernel
    assert_true(kvq_cuda_attention_max_ctx(9, 3, 64) >= 1 << 20);   // SmolLM2
    const int fb = kvq_cuda_attention_max_ctx(32, 32, 80);           // head_dim 80: the one-block kernel
    assert_true(fb > 4096 && fb < 1 << 17);
    assert_int_equal(kvq_cuda_attention_max_ctx(64, 4, 128), fb + 80 * 9 - 128 * 9); // 16 heads a KV head
}

static void test_ops(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    uint64_t r;
    r = 7;
    { // rmsnorm
        const int rows = 5, n = 200;
        float *x = rnd(&r, rows * n, 2), *w = rnd(&r, n, 1), *y = malloc(sizeof(float) * rows * n),
              *g = malloc(sizeof(float) * rows * n);
        for (int i = 0; i < rows; i++) kvq_rmsnorm_ref(y + i * n, x + i * n, w, n, 1e-5f);
        float *dx = dev(x, rows * n), *dw = dev(w, n);
        OK(kvq_cuda_rmsnorm(dx, dx, dw, rows, n, 1e-5f, E));
        back(g, dx, rows * n);
        printf("  rmsnorm rel %.3g\n", rel_err(g, y, rows * n));
        assert_true(rel_err(g, y, rows * n) < 1e-6);
        free(x); free(w); free(y); free(g); kvq_cuda_free(dx); kvq_cuda_free(dw);
    }
    { // rope, partial rotation, llama3 scaling
        const int T = 3, nh = 4, hd = 64, rot = 48, pos = 1000;
        float inv[32];
        kvq_rope_params p = {.type = KVQ_ROPE_SCALE_LLAMA3, .theta = 500000, .factor = 8, .low_freq_factor = 1,
                             .high_freq_factor = 4, .original_max_position = 8192};
        kvq_rope_freqs(inv, rot, &p);
        float *x = rnd(&r, T * nh * hd, 1), *g = malloc(sizeof(float) * T * nh * hd);
        float *dx = dev(x, T * nh * hd), *di = dev(inv, rot / 2);
        for (int t = 0; t < T; t++) kvq_rope_ref(x + t * nh * hd, nh, hd, rot, pos + t, inv);
        OK(kvq_cuda_rope(dx, T, nh, hd, rot, pos, NULL, NULL, di, E));
        back(g, dx, T * nh * hd);
        printf("  rope rel %.3g\n", rel_err(g, x, T * nh * hd));
        assert_true(rel_err(g, x, T * nh * hd) < 1e-6);
        free(x); free(g); kvq_cuda_free(dx); kvq_cuda_free(di);
    }
    { // qkv split with bias, silu_mul, add
        const int T = 3, qd = 96, kd = 32, w = qd + 2 * kd, ffn = 50;
        float *qkv = rnd(&r, T * w, 1), *b = rnd(&r, w, 1), *q = malloc(sizeof(float) * T * w);
        float *dq = dev(NULL, T * qd), *dk = dev(NULL, T * kd), *dv = dev(NULL, T * kd), *dqkv = dev(qkv, T * w),
              *db = dev(b, w);
        OK(kvq_cuda_qkv_split(dqkv, db, dq, dk, dv, T, qd, kd, E));
        back(q, dq, T * qd);
        back(q + T * qd, dk, T * kd);
        back(q + T * qd + T * kd, dv, T * kd);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < w; i++) {
                float want = qkv[t * w + i] + b[i];
                float got = i < qd ? q[t * qd + i] : i < qd + kd ? q[T * qd + t * kd + i - qd] : q[T * qd + T * kd + t * kd + i - qd - kd];
                assert_true(got == want);
            }
        float *gu = rnd(&r, T * 2 * ffn, 3), *h = malloc(sizeof(float) * T * ffn), *hg = malloc(sizeof(float) * T * ffn);
        for (int t = 0; t < T; t++) kvq_silu_mul_ref(h + t * ffn, gu + t * 2 * ffn, gu + t * 2 * ffn + ffn, ffn);
        float *dgu = dev(gu, T * 2 * ffn), *dh = dev(NULL, T * ffn);
        OK(kvq_cuda_silu_mul(dh, dgu, T, ffn, E));
        back(hg, dh, T * ffn);
        assert_true(rel_err(hg, h, T * ffn) < 1e-6);
        OK(kvq_cuda_add(dh, dh, T * ffn, E));
        back(hg, dh, T * ffn);
        for (int i = 0; i < T * ffn; i++) assert_true(hg[i] == (float)(h[i] + h[i]) || fabsf(hg[i] - 2 * h[i]) <= 1e-6f * fabsf(h[i]));
        free(qkv); free(b); free(q); free(gu); free(h); free(hg);
        kvq_cuda_free(dq); kvq_cuda_free(dk); kvq_cuda_free(dv); kvq_cuda_free(dqkv); kvq_cuda_free(db);
        kvq_cuda_free(dgu); kvq_cuda_free(dh);
    }
    // dense products: bf16 and fp32, vector and odd widths, 1 to 19 tokens
    const int shapes[][3] = {{1, 256, 37}, {3, 512, 130}, {9, 264, 64}, {19, 100, 33}, {8, 1024, 300}, {1, 1000, 77}, {1, 4104, 203}};
    for (int s = 0; s < 7; s++)
        for (int bf = 0; bf < 2; bf++) {
            const int T = shapes[s][0], cols = shapes[s][1], rows = shapes[s][2];
            float *w = rnd(&r, (size_t)rows * cols, 1), *x = rnd(&r, (size_t)T * cols, 1);
            float *y = malloc(sizeof(float) * T * rows), *g = malloc(sizeof(float) * T * rows);
            uint16_t *wb = malloc(2 * (size_t)rows * cols);
            if (bf) kvq_dtype_from_f32(KVQ_DTYPE_BF16, w, (size_t)rows * cols, wb);
            kvq_matmul_ref(y, x, bf ? (void *)wb : (void *)w, bf ? KVQ_DTYPE_BF16 : KVQ_DTYPE_F32, T, cols, rows);
            void *dw = NULL;
            kvq_err e = {0};
            if (kvq_cuda_malloc(&dw, (size_t)rows * cols * (bf ? 2 : 4), &e) ||
                kvq_cuda_copy(dw, bf ? (void *)wb : (void *)w, (size_t)rows * cols * (bf ? 2 : 4), 1, &e))
                fail_msg("%s", e.msg);
            float *dx = dev(x, (size_t)T * cols), *dy = dev(NULL, (size_t)T * rows);
            OK(kvq_cuda_dense_matmul(dw, bf, dx, dy, T, cols, rows, 0, E));
            back(g, dy, (size_t)T * rows);
            double re = rel_err(g, y, (size_t)T * rows);
            printf("  dense %s T=%d %dx%d rel %.3g\n", bf ? "bf16" : "f32", T, rows, cols, re);
            assert_true(re < 1e-5);
            // every one-token kernel (kvq_cuda_dense_set_variant 0..N) gives the default's bits, accumulating too
            if (T == 1) {
                float *y0 = rnd(&r, (size_t)rows, 1), *ga = malloc(sizeof(float) * rows), *g2 = malloc(sizeof(float) * rows),
                      *g3 = malloc(sizeof(float) * rows);
                kvq_cuda_copy(dy, y0, sizeof(float) * rows, 1, &e);
                OK(kvq_cuda_dense_matmul(dw, bf, dx, dy, T, cols, rows, 1, E)); // the default, accumulating
                back(ga, dy, (size_t)rows);
                for (int v = 0; v <= KVQ_CUDA_DENSE_VARIANTS; v++) {
                    kvq_cuda_dense_set_variant(v);
                    OK(kvq_cuda_dense_matmul(dw, bf, dx, dy, T, cols, rows, 0, E));
                    back(g2, dy, (size_t)rows);
                    kvq_cuda_copy(dy, y0, sizeof(float) * rows, 1, &e);
                    OK(kvq_cuda_dense_matmul(dw, bf, dx, dy, T, cols, rows, 1, E));
                    back(g3, dy, (size_t)rows);
                    int diff = 0;
                    for (int i = 0; i < rows; i++) diff += g2[i] != g[i] || g3[i] != ga[i];
                    printf("    one-token kernel %d: %d of %d rows not the default's bits\n", v, diff, rows);
                    assert_int_equal(diff, 0);
                }
                kvq_cuda_dense_set_variant(-1);
                free(y0); free(ga); free(g2); free(g3);
            }
            free(w); free(x); free(y); free(g); free(wb);
            kvq_cuda_free(dw); kvq_cuda_free(dx); kvq_cuda_free(dy);
        }
    // attention: GQA, prefill of T tokens after pos cached ones, against the reference: the
    // split kernel (head_dim 32·D ≤ 256, ≤ 8 query heads a KV head; contexts shorter than one
    // split's 64 positions too) and the one-block-a-head kernel it falls back to (12 query heads a KV head)
    const int acs[][6] = {{8, 2, 64, 300, 200, 5}, {32, 8, 128, 1100, 1000, 1}, {4, 4, 96, 40, 2, 3},
                          {16, 2, 128, 64, 0, 1}, {12, 1, 64, 300, 100, 2}, {8, 2, 256, 40, 17, 20}};
    for (int ac = 0; ac < 6; ac++) {
        const int nh = acs[ac][0], nkv = acs[ac][1], hd = acs[ac][2], max_ctx = acs[ac][3], pos = acs[ac][4], T = acs[ac][5];
        const float scale = 1.0f / sqrtf((float)hd);
        float *K = rnd(&r, (size_t)nkv * max_ctx * hd, 1), *V = rnd(&r, (size_t)nkv * max_ctx * hd, 1);
        float *q = rnd(&r, (size_t)T * nh * hd, 1), *k = rnd(&r, (size_t)T * nkv * hd, 1), *v = rnd(&r, (size_t)T * nkv * hd, 1);
        for (int t = 0; t < T; t++) // the reference cache: new rows at pos + t
            for (int g = 0; g < nkv; g++) {
                memcpy(K + ((size_t)g * max_ctx + pos + t) * hd, k + ((size_t)t * nkv + g) * hd, sizeof(float) * hd);
                memcpy(V + ((size_t)g * max_ctx + pos + t) * hd, v + ((size_t)t * nkv + g) * hd, sizeof(float) * hd);
            }
        float *dK = dev(K, (size_t)nkv * max_ctx * hd), *dV = dev(V, (size_t)nkv * max_ctx * hd);
        // overwrite the new rows on the device with garbage: the kernel must store them
        float *junk = rnd(&r, (size_t)hd, 100);
        for (int t = 0; t < T; t++) {
            kvq_err e = {0};
            kvq_cuda_copy(dK + ((size_t)(nkv - 1) * max_ctx + pos + t) * hd, junk, sizeof(float) * hd, 1, &e);
        }
        float *dq = dev(q, (size_t)T * nh * hd), *dk = dev(k, (size_t)T * nkv * hd), *dv = dev(v, (size_t)T * nkv * hd),
              *dout = dev(NULL, (size_t)T * nh * hd);
        OK(kvq_cuda_attention(dq, dk, dv, dK, dV, dout, T, pos, NULL, NULL, nh, nkv, hd, max_ctx, scale, E));
        float *g = malloc(sizeof(float) * T * nh * hd), *y = malloc(sizeof(float) * T * nh * hd);
        back(g, dout, (size_t)T * nh * hd);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++) {
                int kv = h / (nh / nkv);
                kvq_attention_ref(y + ((size_t)t * nh + h) * hd, q + ((size_t)t * nh + h) * hd, K + (size_t)kv * max_ctx * hd,
                                  V + (size_t)kv * max_ctx * hd, pos + t + 1, hd, scale);
            }
        printf("  attention %d/%d heads, head_dim %d, pos %d, T %d: rel %.3g\n", nh, nkv, hd, pos, T,
               rel_err(g, y, (size_t)T * nh * hd));
        assert_true(rel_err(g, y, (size_t)T * nh * hd) < 1e-5);
        free(K); free(V); free(q); free(k); free(v); free(junk); free(g); free(y);
        kvq_cuda_free(dK); kvq_cuda_free(dV); kvq_cuda_free(dq); kvq_cuda_free(dk); kvq_cuda_free(dv); kvq_cuda_free(dout);
    }
    // the attention block's inputs in one kernel (kvq_cuda_attn_in) against the reference ops:
    // split + bias, per-head RMSNorm of q and k, RoPE (partial; position from device memory in
    // the second case), k and v stored in the cache; the cache's other rows untouched
    for (int c0 = 0; c0 < 3; c0++) {
        const int c = c0 == 1, cr = c0 == 2; // 2: case 0 through the rows variant
        const int T = c ? 1 : 3, nh = 8, nkv = 2, hd = 64, rot = c ? 64 : 48, pos = c ? 150 : 100, max_ctx = 200;
        const int qd = nh * hd, kd = nkv * hd, W = qd + 2 * kd;
        const float eps = 1e-6f;
        float inv[32];
        kvq_rope_params p = {.type = KVQ_ROPE_SCALE_NONE, .theta = 10000};
        kvq_rope_freqs(inv, rot, &p);
        float *qkv = rnd(&r, (size_t)T * W, 1), *b = c ? NULL : rnd(&r, W, 1), *qn = c ? NULL : rnd(&r, hd, 1),
              *kn = c ? NULL : rnd(&r, hd, 1);
        const size_t cache = (size_t)nkv * max_ctx * hd;
        float *K = rnd(&r, cache, 1), *V = rnd(&r, cache, 1), *Q = malloc(sizeof(float) * T * qd);
        float *dK = dev(K, cache), *dV = dev(V, cache), *dqkv = dev(qkv, (size_t)T * W), *db = b ? dev(b, W) : NULL,
              *dqn = qn ? dev(qn, hd) : NULL, *dkn = kn ? dev(kn, hd) : NULL, *di = dev(inv, rot / 2),
              *dq = dev(NULL, (size_t)T * qd);
        for (int t = 0; t < T; t++) { // the reference, in the model's order
            float row[1024];
            for (int i = 0; i < W; i++) row[i] = b ? qkv[t * W + i] + b[i] : qkv[t * W + i];
            for (int h = 0; h < nh + nkv; h++)
                if (qn) kvq_rmsnorm_ref(row + h * hd, row + h * hd, h < nh ? qn : kn, hd, eps);
            kvq_rope_ref(row, nh, hd, rot, pos + t, inv);
            kvq_rope_ref(row + qd, nkv, hd, rot, pos + t, inv);
            memcpy(Q + (size_t)t * qd, row, sizeof(float) * qd);
            for (int g = 0; g < nkv; g++) {
                memcpy(K + ((size_t)g * max_ctx + pos + t) * hd, row + qd + g * hd, sizeof(float) * hd);
                memcpy(V + ((size_t)g * max_ctx + pos + t) * hd, row + qd + kd + g * hd, sizeof(float) * hd);
            }
        }
        int *dpos = NULL;
        if (c) {
            kvq_err e = {0};
            if (kvq_cuda_malloc((void **)&dpos, sizeof(int), &e) || kvq_cuda_copy(dpos, &pos, sizeof(int), 1, &e))
                fail_msg("%s", e.msg);
        }
        if (cr) { // the rows variant (a KV codec cache appends k and v itself): k, v as (T, kv_dim) rows
            float *dkr = dev(NULL, (size_t)T * kd), *dvr = dev(NULL, (size_t)T * kd), *kr = malloc(sizeof(float) * T * kd),
                  *vr = malloc(sizeof(float) * T * kd), *rk = malloc(sizeof(float) * T * kd), *rv = malloc(sizeof(float) * T * kd);
            OK(kvq_cuda_attn_in_rows(dqkv, db, dqn, dkn, eps, dq, dkr, dvr, T, pos, NULL, NULL, nh, nkv, hd, rot, di, E));
            back(kr, dkr, (size_t)T * kd);
            back(vr, dvr, (size_t)T * kd);
            for (int t = 0; t < T; t++)
                for (int g = 0; g < nkv; g++) {
                    memcpy(rk + (size_t)t * kd + g * hd, K + ((size_t)g * max_ctx + pos + t) * hd, sizeof(float) * hd);
                    memcpy(rv + (size_t)t * kd + g * hd, V + ((size_t)g * max_ctx + pos + t) * hd, sizeof(float) * hd);
                }
            float *gq = malloc(sizeof(float) * T * qd);
            back(gq, dq, (size_t)T * qd);
            const double rq = rel_err(gq, Q, (size_t)T * qd), rkr = rel_err(kr, rk, (size_t)T * kd);
            printf("  attn_in rows: q rel %.3g, k rows rel %.3g, v rows %s\n", rq, rkr,
                   memcmp(vr, rv, sizeof(float) * T * kd) ? "differ" : "equal");
            assert_true(rq < 1e-6 && rkr < 1e-6);
            assert_memory_equal(vr, rv, sizeof(float) * T * kd);
            free(kr), free(vr), free(rk), free(rv), free(gq);
            kvq_cuda_free(dkr), kvq_cuda_free(dvr);
            free(qkv); free(b); free(qn); free(kn); free(K); free(V); free(Q);
            kvq_cuda_free(dK); kvq_cuda_free(dV); kvq_cuda_free(dqkv); kvq_cuda_free(db); kvq_cuda_free(dqn);
            kvq_cuda_free(dkn); kvq_cuda_free(di); kvq_cuda_free(dq);
            continue;
        }
        OK(kvq_cuda_attn_in(dqkv, db, dqn, dkn, eps, dq, dK, dV, T, c ? 0 : pos, dpos, NULL, nh, nkv, hd, rot, di, max_ctx, E));
        float *g = malloc(sizeof(float) * cache);
        back(g, dq, (size_t)T * qd);
        const double rq = rel_err(g, Q, (size_t)T * qd);
        back(g, dK, cache);
        const double rk = rel_err(g, K, cache);
        for (size_t i = 0; i < cache; i++) { // rows outside [pos, pos+T) bit for bit
            const size_t p_ = (i / hd) % max_ctx;
            if (p_ < (size_t)pos || p_ >= (size_t)(pos + T)) assert_true(g[i] == K[i]);
        }
        back(g, dV, cache);
        const double rv = rel_err(g, V, cache);
        printf("  attn_in %s: q rel %.3g, k cache rel %.3g, v cache rel %.3g\n", c ? "no bias/norm, d_pos" : "bias+qk norm",
               rq, rk, rv);
        assert_true(rq < 1e-6 && rk < 1e-6);
        assert_true(rv == 0.0);
        free(qkv); free(b); free(qn); free(kn); free(K); free(V); free(Q); free(g);
        kvq_cuda_free(dK); kvq_cuda_free(dV); kvq_cuda_free(dqkv); kvq_cuda_free(db); kvq_cuda_free(dqn);
        kvq_cuda_free(dkn); kvq_cuda_free(di); kvq_cuda_free(dq); kvq_cuda_free(dpos);
    }
}

// ---- whole models

// tc: the GPU's tensor-core products for chunks of 16 tokens and more (gemm_tc.cu, hqx_tc.cu),
// and the whole prompt in one chunk; else the CUDA-core kernels (KVQ_CUDA_TC=0) and chunks of 32.
static kvq_model *open_tc(const char *path, int gpu, kvq_exec ex, int tc) {
    kvq_model_opts o = kvq_model_opts_default();
    o.max_ctx = 256;
    o.exec = ex;
    o.max_batch = tc ? 128 : 32; // prefill in several chunks, each below the CPU's dense-prefill
                      // switch (64 tokens), so both backends take int8 products from the same integers
    if (gpu) o.backend = kvq_backend_cuda_new;
    kvq_model *m = NULL;
    kvq_err e = {0};
    if (!tc) setenv("KVQ_CUDA_TC", "0", 1);
    kvq_status s = kvq_model_open(path, &o, &m, &e);
    unsetenv("KVQ_CUDA_TC");
    if (s) fail_msg("%s", e.msg);
    return m;
}
static kvq_model *open_on(const char *path, int gpu, kvq_exec ex) { return open_tc(path, gpu, ex, 0); }

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

// The device argmax (argmax.cu: many blocks, the last one reduces) against the host's rule on
// random vectors: the largest value, the first index among equals (ties planted across blocks),
// -inf everywhere, and -1 for any NaN.
static void test_argmax(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    const int ns[] = {1, 7, 1000, 32768 + 5, 128256, 300001};
    uint64_t r = 99;
    int *dout = NULL;
    kvq_err e = {0};
    if (kvq_cuda_malloc((void **)&dout, sizeof(int), &e)) fail_msg("%s", e.msg);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        const int n = ns[a];
        for (int kind = 0; kind < 4; kind++) {
            float *h = rnd(&r, (size_t)n, 1.0f);
            int want;
            if (kind == 1 && n > 1) { // the maximum twice, far apart: the first wins
                const int i = (int)(n * 0.7), j = (int)(n * 0.2);
                h[i] = h[j] = 50.0f;
            }
            if (kind == 2) for (int i = 0; i < n; i++) h[i] = -INFINITY;
            if (kind == 3) h[n / 2] = NAN;
            want = kind == 3 ? -1 : kind == 2 ? 0 : argmax(h, n);
            if (kind == 1 && n > 1) assert_int_equal(want, (int)(n * 0.2));
            float *d = dev(h, (size_t)n);
            int got = -2;
            if (kvq_cuda_argmax(d, 1, n, dout, &e) || kvq_cuda_sync(&e) || kvq_cuda_copy(&got, dout, sizeof(int), 0, &e))
                fail_msg("%s", e.msg);
            if (got != want) fail_msg("argmax n=%d kind %d: device %d, host %d", n, kind, got, want);
            kvq_cuda_free(d);
            free(h);
        }
    }
    fprintf(stderr, "test_cuda_model: argmax: %zu sizes x 4 kinds equal to the host\n", sizeof ns / sizeof ns[0]);
    kvq_cuda_free(dout);
}

// One query head's attention over n positions in double (the reference of the split-attention
// tests): out = softmax(q·K^T · scale)·V over rows of hd; sc: n doubles of scratch. Returns max |out|.
static double ref_head(const float *q, const float *K, const float *V, int n, int hd, float scale, double *sc, double *out) {
    double mx = -INFINITY, sum = 0, amax = 0;
    for (int p = 0; p < n; p++) {
        double d = 0;
        for (int i = 0; i < hd; i++) d += (double)q[i] * K[(size_t)p * hd + i];
        sc[p] = d * scale;
        mx = sc[p] > mx ? sc[p] : mx;
    }
    for (int p = 0; p < n; p++) sum += sc[p] = exp(sc[p] - mx);
    for (int i = 0; i < hd; i++) {
        double o = 0;
        for (int p = 0; p < n; p++) o += sc[p] * V[(size_t)p * hd + i];
        out[i] = o / sum;
        amax = fmax(amax, fabs(o / sum));
    }
    return amax;
}

// The tiled prefill attention (a chunk of >= 16 tokens of one sequence) and the split kernel
// against a double-precision host attention: shapes with 1, 2, 4 and 8 query heads a KV head,
// head_dim 64 and 128, chunks that start at 0 or later, end inside a block's tokens and span
// several tiles of positions. Cache rows past the chunk's last position are NaN, so a kernel
// that read past them would fail.
static void test_prefill_tile(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    enum { CTX = 640 };
    const int shp[][3] = {{8, 2, 128}, {8, 8, 64}, {16, 2, 64}, {4, 2, 128}}; // heads, KV heads, head_dim
    const int span[][2] = {{37, 50}, {200, 0}, {16, 0}, {70, 300}, {512, 128}};  // T, pos
    uint64_t r = 777;
    double worst[2] = {0, 0};
    for (size_t a = 0; a < sizeof shp / sizeof shp[0]; a++) {
        const int NH = shp[a][0], NKV = shp[a][1], HD = shp[a][2], G = NH / NKV;
        const float scale = 1.0f / sqrtf((float)HD);
        for (size_t b = 0; b < sizeof span / sizeof span[0]; b++) {
            const int T = span[b][0], pos = span[b][1];
            const size_t nc = (size_t)NKV * CTX * HD, nq = (size_t)T * NH * HD;
            float *K = rnd(&r, nc, 1.0f), *V = rnd(&r, nc, 1.0f), *q = rnd(&r, nq, 1.0f);
            for (int g = 0; g < NKV; g++)
                for (int p = pos + T; p < CTX; p++)
                    for (int i = 0; i < HD; i++) K[((size_t)g * CTX + p) * HD + i] = V[((size_t)g * CTX + p) * HD + i] = NAN;
            double *want = malloc(sizeof(double) * nq), *sc = malloc(sizeof(double) * CTX), amax = 0;
            for (int t = 0; t < T; t++)
                for (int h = 0; h < NH; h++)
                    amax = fmax(amax, ref_head(q + ((size_t)t * NH + h) * HD, K + (size_t)(h / G) * CTX * HD, V + (size_t)(h / G) * CTX * HD,
                                               pos + t + 1, HD, scale, sc, want + ((size_t)t * NH + h) * HD));
            float *dK = dev(K, nc), *dV = dev(V, nc), *dq = dev(q, nq), *dout = dev(NULL, nq), *got = malloc(sizeof(float) * nq);
            for (int tile = 1; tile >= 0; tile--) {
                kvq_cuda_attend_set_tile(tile);
                OK(kvq_cuda_attend(dq, dK, dV, dout, T, pos, NULL, NULL, NH, NKV, HD, CTX, scale, E));
                back(got, dout, nq);
                double err = 0;
                for (size_t i = 0; i < nq; i++) err = fmax(err, fabs(got[i] - want[i]) / amax); // NaN fails below
                if (!(err <= 1e-5))
                    fail_msg("%s attention, %d heads / %d KV heads, head_dim %d, T %d at %d: error %.3g of the largest output",
                             tile ? "tiled" : "split", NH, NKV, HD, T, pos, err);
                worst[tile] = fmax(worst[tile], err);
            }
            kvq_cuda_attend_set_tile(-1);
            kvq_cuda_free(dK); kvq_cuda_free(dV); kvq_cuda_free(dq); kvq_cuda_free(dout);
            free(K); free(V); free(q); free(want); free(sc); free(got);
        }
    }
    fprintf(stderr, "test_cuda_model: prefill attention, 4 shapes x 5 chunks: tiled %.3g, split %.3g of the largest output "
            "against the host in double\n", worst[1], worst[0]);
}

// ---- the split attention's split count (issue 12, session 19)

// The rule (no device needed): kvq_cuda_attend_splits against clamp(ceil(n / cmin), 1, 16)
// written out here, for the setter's values and the environment's (KVQ_CUDA_ATTN_CMIN; a value
// that is not a count keeps the default 0, i.e. 16 splits); every split count covers n_ctx and the token's own
// position lies in a split that runs.
static void test_split_rule(void **st) {
    (void)st;
    if (kvq_cuda_attend_splits(1) == 0) { printf("  skip: built without CUDA (no split kernel)\n"); skip(); }
    const int cm[] = {64, 0, 32, 1, 7, 1000};
    const int ns_[] = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 200, 438, 1023, 1024, 1025, 5000, 1 << 30};
    for (size_t a = 0; a < sizeof cm / sizeof cm[0]; a++) {
        kvq_cuda_attend_set_cmin(cm[a]);
        for (size_t b = 0; b < sizeof ns_ / sizeof ns_[0]; b++) {
            const long n = ns_[b], c = cm[a];
            long want = c == 0 ? 16 : (n + c - 1) / c;
            want = want < 1 ? 1 : want > 16 ? 16 : want;
            const int got = kvq_cuda_attend_splits((int)n);
            if (got != want) fail_msg("cmin %ld, n_ctx %ld: %d splits, want %ld", c, n, got, want);
            const long chunk = (n + got - 1) / got;
            assert_true(chunk * got >= n && (n - 1) / chunk < got);
        }
    }
    const struct { const char *env; int want; } ev[] = {{"32", 7}, {"0", 16}, {"128", 2}, {"64", 4}, {"x", 16}, {"-5", 16}, {"", 16}, {NULL, 16}};
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) { // 200 positions
        if (ev[i].env) setenv("KVQ_CUDA_ATTN_CMIN", ev[i].env, 1);
        else unsetenv("KVQ_CUDA_ATTN_CMIN");
        kvq_cuda_attend_set_cmin(-1);
        if (kvq_cuda_attend_splits(200) != ev[i].want)
            fail_msg("KVQ_CUDA_ATTN_CMIN=%s: %d splits of 200, want %d", ev[i].env ? ev[i].env : "(unset)", kvq_cuda_attend_splits(200),
                     ev[i].want);
    }
    unsetenv("KVQ_CUDA_ATTN_CMIN");
    kvq_cuda_attend_set_cmin(-1);
}

// A float buffer of NaN on the stream (an output a launch must overwrite).
static void nan_fill(float *d, size_t n) {
    float *h = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    OK(kvq_cuda_copy_async(d, h, sizeof(float) * n, 1, E));
    OK(kvq_cuda_stream_sync(E));
    free(h);
}

// The split attention with a context-dependent split count (kvq_cuda_attend_set_cmin 64, 0 and
// 32) against a double-precision host attention, one token at n_ctx = 1 .. 5000 (both sides of
// the split boundaries): error <= 1e-5 of the largest output (a merge over a wrong split count
// drops or adds whole chunks, or, with a wrong last-block count, leaves the NaN the output was
// filled with). The launches alternate settings and contexts, so a counter left nonzero or a
// stale split would show. At each n_ctx: a captured graph (position from device memory, the
// setting captured) replayed gives the direct launch's bits; a prefill chunk's rows (split
// kernel) the bits of one-token launches at their positions; and the fused attention inputs
// (kvq_cuda_attend_set_inputs: the block holding the token's position writes k and v) the bits
// and cache rows of kvq_cuda_attn_in then the attend.
static void test_split_attend(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    enum { CTX = 5008 };
    // heads, KV heads, head_dim: query heads a KV head 4, 1, 8, 3, 6 — the position loop's head slots S = 4, 1, 8, 4
    // and 8 (at_allsum; S > G: unused slots) — session 25 added the last three
    const int shp[][3] = {{8, 2, 128}, {4, 4, 64}, {16, 2, 64}, {6, 2, 128}, {12, 2, 64}};
    const int nctx[] = {1, 2, 17, 63, 64, 65, 200, 1023, 1024, 1025, 5000};
    const int cm[] = {64, 0, 32};
    const int chunks[][2] = {{40, 40}, {20, 1010}}; // prefill rows: T, pos
    enum { NN = sizeof nctx / sizeof nctx[0] };
    uint64_t r = 1212;
    double worst = 0;
    int *dpos = NULL;
    { kvq_err e = {0}; if (kvq_cuda_malloc((void **)&dpos, sizeof(int), &e)) fail_msg("%s", e.msg); }
    for (size_t a = 0; a < sizeof shp / sizeof shp[0]; a++) {
        const int NH = shp[a][0], NKV = shp[a][1], HD = shp[a][2], G = NH / NKV;
        const float scale = 1.0f / sqrtf((float)HD);
        const size_t nc = (size_t)NKV * CTX * HD, qd = (size_t)NH * HD, kd = (size_t)NKV * HD, W = qd + 2 * kd;
        float *K = rnd(&r, nc, 1.0f), *V = rnd(&r, nc, 1.0f), *q = rnd(&r, qd * 40, 1.0f), *qkv = rnd(&r, W, 1.0f);
        float *inv = malloc(sizeof(float) * HD / 2);
        for (int i = 0; i < HD / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / HD);
        // the host's outputs for q's row 0 at each n_ctx
        double *want = malloc(sizeof(double) * qd * NN), *sc = malloc(sizeof(double) * CTX), amax[NN] = {0};
        for (int b = 0; b < NN; b++)
            for (int h = 0; h < NH; h++)
                amax[b] = fmax(amax[b], ref_head(q + (size_t)h * HD, K + (size_t)(h / G) * CTX * HD, V + (size_t)(h / G) * CTX * HD, nctx[b], HD,
                                                 scale, sc, want + b * qd + (size_t)h * HD));
        float *dK = dev(K, nc), *dV = dev(V, nc), *aK = dev(K, nc), *aV = dev(V, nc), *dq = dev(q, qd * 40), *dqkv = dev(qkv, W);
        float *dinv = dev(inv, HD / 2), *dout = dev(NULL, qd * 40), *dout2 = dev(NULL, qd * 40);
        float *got = malloc(sizeof(float) * qd * 40), *g2 = malloc(sizeof(float) * qd * 40);
        float *kr = malloc(sizeof(float) * HD), *kr2 = malloc(sizeof(float) * HD);
        kvq_cuda_attend_set_tile(0); // prefill rows through the split kernel
        OK(kvq_cuda_stream_init(E)); // (the capture below needs the library's stream; session 19 call D failed here)
        for (size_t c = 0; c < sizeof cm / sizeof cm[0]; c++) {
            kvq_cuda_attend_set_cmin(cm[c]);
            OK(kvq_cuda_attend(dq, dK, dV, dout, 1, 0, NULL, NULL, NH, NKV, HD, CTX, scale, E)); // scratch sized
            void *graph = NULL;
            OK(kvq_cuda_stream_sync(E));
            OK(kvq_cuda_capture_begin(E));
            kvq_err ce = {0};
            kvq_status cs = kvq_cuda_attend(dq, dK, dV, dout2, 1, 0, dpos, NULL, NH, NKV, HD, CTX, scale, &ce);
            OK(kvq_cuda_capture_end(cs != KVQ_OK, &graph, E));
            if (cs) fail_msg("capture: %s", ce.msg);
            assert_non_null(graph);
            for (int b = 0; b < NN; b++) {
                const int n = nctx[b], p = n - 1;
                nan_fill(dout, qd);
                OK(kvq_cuda_attend(dq, dK, dV, dout, 1, p, NULL, NULL, NH, NKV, HD, CTX, scale, E));
                back(got, dout, qd);
                double err = 0;
                for (size_t i = 0; i < qd; i++) err = fmax(err, fabs(got[i] - want[b * qd + i]) / amax[b]); // NaN fails below
                if (!(err <= 1e-5))
                    fail_msg("split attention, cmin %d (%d splits), %d heads / %d KV heads, head_dim %d, n_ctx %d: error %.3g of the "
                             "largest output", cm[c], kvq_cuda_attend_splits(n), NH, NKV, HD, n, err);
                worst = fmax(worst, err);
                // the captured step replayed at this position
                nan_fill(dout2, qd);
                OK(kvq_cuda_copy_async(dpos, &p, sizeof(int), 1, E));
                OK(kvq_cuda_graph_launch(graph, E));
                back(g2, dout2, qd);
                if (memcmp(got, g2, sizeof(float) * qd)) fail_msg("cmin %d, n_ctx %d: the replayed graph's bits differ", cm[c], n);
                // the fused attention inputs: the token's k, v written by the block whose split holds it
                if (p + 1 < CTX && (n == 1 || n == 65 || n == 200 || n == 1025 || n == 5000)) {
                    kvq_cuda_ain in = {dqkv, NULL, NULL, NULL, dinv, 1e-6f, HD};
                    nan_fill(aK + (size_t)p * HD, HD); // KV head 0's row: the fused kernel must write it
                    OK(kvq_cuda_attn_in(dqkv, NULL, NULL, NULL, 1e-6f, dout2 + qd, dK, dV, 1, p, NULL, NULL, NH, NKV, HD, HD, dinv, CTX, E));
                    OK(kvq_cuda_attend(dout2 + qd, dK, dV, dout, 1, p, NULL, NULL, NH, NKV, HD, CTX, scale, E));
                    kvq_cuda_attend_set_inputs(&in);
                    OK(kvq_cuda_attend(dout2 + 2 * qd, aK, aV, dout2, 1, p, NULL, NULL, NH, NKV, HD, CTX, scale, E));
                    back(got, dout, qd);
                    back(g2, dout2, qd);
                    if (memcmp(got, g2, sizeof(float) * qd)) fail_msg("cmin %d, n_ctx %d: fused inputs' output differs", cm[c], n);
                    for (int g = 0; g < NKV; g++) {
                        back(kr, dK + ((size_t)g * CTX + p) * HD, HD);
                        back(kr2, aK + ((size_t)g * CTX + p) * HD, HD);
                        if (memcmp(kr, kr2, sizeof(float) * HD)) fail_msg("cmin %d, n_ctx %d: KV head %d's k row differs", cm[c], n, g);
                        back(kr, dV + ((size_t)g * CTX + p) * HD, HD);
                        back(kr2, aV + ((size_t)g * CTX + p) * HD, HD);
                        if (memcmp(kr, kr2, sizeof(float) * HD)) fail_msg("cmin %d, n_ctx %d: KV head %d's v row differs", cm[c], n, g);
                    }
                    // both caches back to K, V (row p was overwritten alike)
                    OK(kvq_cuda_copy(dK, K, sizeof(float) * nc, 1, E));
                    OK(kvq_cuda_copy(dV, V, sizeof(float) * nc, 1, E));
                    OK(kvq_cuda_copy(aK, K, sizeof(float) * nc, 1, E));
                    OK(kvq_cuda_copy(aV, V, sizeof(float) * nc, 1, E));
                }
            }
            kvq_cuda_graph_free(graph);
            // prefill rows (positions pos .. pos + T - 1 across a split boundary) against one-token launches
            for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
                const int T = chunks[k][0], pos = chunks[k][1];
                nan_fill(dout, qd * T);
                OK(kvq_cuda_attend(dq, dK, dV, dout, T, pos, NULL, NULL, NH, NKV, HD, CTX, scale, E));
                back(got, dout, qd * T);
                nan_fill(dout2, qd * T);
                for (int t = 0; t < T; t++)
                    OK(kvq_cuda_attend(dq + t * qd, dK, dV, dout2 + t * qd, 1, pos + t, NULL, NULL, NH, NKV, HD, CTX, scale, E));
                back(g2, dout2, qd * T);
                for (int t = 0; t < T; t++)
                    if (memcmp(got + t * qd, g2 + t * qd, sizeof(float) * qd))
                        fail_msg("cmin %d: prefill row at position %d differs from its one-token launch", cm[c], pos + t);
            }
        }
        kvq_cuda_attend_set_cmin(-1);
        kvq_cuda_attend_set_tile(-1);
        kvq_cuda_free(dK); kvq_cuda_free(dV); kvq_cuda_free(aK); kvq_cuda_free(aV); kvq_cuda_free(dq); kvq_cuda_free(dqkv);
        kvq_cuda_free(dinv); kvq_cuda_free(dout); kvq_cuda_free(dout2);
        free(K); free(V); free(q); free(qkv); free(inv); free(want); free(sc); free(got); free(g2); free(kr); free(kr2);
    }
    kvq_cuda_free(dpos);
    fprintf(stderr, "test_cuda_model: split attention, cmin 64/0/32, 5 shapes x %d contexts: %.3g of the largest output against "
            "the host in double; graph replays, prefill rows and fused inputs bit-equal\n", NN, worst);
}

// A model of its own (opened now: graphs captured with the process's current settings) against
// the default's prefill logits lg (T rows) and one-token decode logits ld: the rows that differ
// in any bit (ls: a row of scratch).
static int rows_differ(const char *path, kvq_exec ex, const int32_t *ids, int T, int V, const float *lg, const float *ld,
                       float *ls, const char *what, int mode) {
    kvq_err e = {0};
    kvq_model *gp = open_on(path, 1, ex);
    float *lp = malloc(sizeof(float) * T * V);
    if (kvq_model_forward(gp, ids, T, 0, lp, 1, &e)) fail_msg("%s %d: %s", what, mode, e.msg);
    int n = memcmp(lp, lg, sizeof(float) * T * V) != 0;
    free(lp);
    for (int t = 0; t < T; t++) {
        if (kvq_model_forward(gp, ids + t, 1, t, ls, 0, &e)) fail_msg("%s %d: %s", what, mode, e.msg);
        n += memcmp(ls, ld + (size_t)t * V, sizeof(float) * V) != 0;
    }
    kvq_model_close(gp);
    return n;
}

// CPU and GPU logits for ids; the GPU's prefill against its own token-by-token decode;
// greedy continuations of n_greedy tokens. ref: HF logits (or NULL). The GPU's decode steps
// run as a captured CUDA graph replayed at each position.
static void compare(const char *path, const int32_t *ids, int T, const float *ref, int n_greedy, kvq_exec ex) {
    kvq_model *c = open_on(path, 0, ex), *g = open_on(path, 1, ex);
    const int V = kvq_model_arch(c)->vocab_size;
    float *lc = malloc(sizeof(float) * T * V), *lg = malloc(sizeof(float) * T * V), *ls = malloc(sizeof(float) * V);
    kvq_err e = {0};
    if (kvq_model_forward(c, ids, T, 0, lc, 1, &e) || kvq_model_forward(g, ids, T, 0, lg, 1, &e)) fail_msg("%s", e.msg);
    double r = rel_err(lg, lc, (size_t)T * V), rh = ref ? rel_err(lg, ref, (size_t)T * V) : 0;
    // int8 activations: a rounding boundary crossed differently (float sums in another order)
    // moves a code by one step, so the GPU's int8 logits differ from the CPU's by about the
    // int8 noise itself; measured here as the CPU's int8 against its exact mode
    double noise = 0;
    float *le = NULL; // the CPU's exact logits (int8 mode), else lc
    if (ex == KVQ_EXEC_INT8) {
        kvq_model *ce = open_on(path, 0, KVQ_EXEC_EXACT);
        le = malloc(sizeof(float) * T * V);
        if (kvq_model_forward(ce, ids, T, 0, le, 1, &e)) fail_msg("%s", e.msg);
        noise = rel_err(lc, le, (size_t)T * V);
        kvq_model_close(ce);
    }
    // the tensor-core prefill (bf16 operands, fp32 accumulation: whole prompt in one chunk)
    // against the CPU's exact products: bound 1e-2, measured and printed
    double rt = -1, rth = -1;
    char why[256];
    if (ex != KVQ_EXEC_EXACT && kvq_cuda_tc_available(why, sizeof why)) {
        kvq_model *gt = open_tc(path, 1, ex, 1);
        float *lt = malloc(sizeof(float) * T * V);
        if (kvq_model_forward(gt, ids, T, 0, lt, 1, &e)) fail_msg("%s", e.msg);
        rt = rel_err(lt, le ? le : lc, (size_t)T * V);
        rth = ref ? rel_err(lt, ref, (size_t)T * V) : -1;
        kvq_model_close(gt);
        free(lt);
        assert_true(rt <= 1e-2);
    } else if (ex != KVQ_EXEC_EXACT) printf("  tensor-core prefill not checked: %s\n", why);
    free(le);
    const double lim = noise > 0 ? fmax(1e-3, 2 * noise) : 1e-3;
    // the GPU backend's fused ops (norm/silu into the products' preparation, the attention
    // inputs in one kernel) against the same ops launched one by one (KVQ_CUDA_FUSE=0)
    double rf = 0;
    {
        setenv("KVQ_CUDA_FUSE", "0", 1);
        kvq_model *gu = open_on(path, 1, ex);
        unsetenv("KVQ_CUDA_FUSE");
        float *lu = malloc(sizeof(float) * T * V);
        if (kvq_model_forward(gu, ids, T, 0, lu, 1, &e)) fail_msg("%s", e.msg);
        rf = rel_err(lg, lu, (size_t)T * V);
        kvq_model_close(gu);
        free(lu);
    }
    double rs = 0;
    float *ld = malloc(sizeof(float) * T * V);
    for (int t = 0; t < T; t++) { // decode steps on the GPU
        if (kvq_model_forward(g, ids + t, 1, t, ls, 0, &e)) fail_msg("%s", e.msg);
        double x = rel_err(ls, lg + (size_t)t * V, V);
        if (x > rs) rs = x;
        memcpy(ld + (size_t)t * V, ls, sizeof(float) * V);
    }
    // the other activation preparation kernels (kvq_cuda_hqx_set_prep 1-3; 2: each a programmatic
    // dependent of the kernel before it, in the captured graphs too) give the default's prefill
    // and decode logits bit for bit, each on a model of its own (graphs captured with it)
    int prep_diff = 0;
    for (int mode = 1; mode <= 3 && ex == KVQ_EXEC_INT8; mode++) { // the int8 products prepare
        kvq_cuda_hqx_set_prep(mode);
        prep_diff += rows_differ(path, ex, ids, T, V, lg, ld, ls, "prep", mode);
        kvq_cuda_hqx_set_prep(-1);
    }
    // the decode step's launch overlap (the split attention a programmatic dependent, the
    // products letting the kernel after them launch at their start; both on by default) changes
    // no bit: both off, and each alone
    for (int mode = 0; mode <= 2 && ex == KVQ_EXEC_INT8; mode++) {
        kvq_cuda_attn_set_pdl(mode & 1);
        kvq_cuda_hqx_set_trig(mode >> 1);
        prep_diff += rows_differ(path, ex, ids, T, V, lg, ld, ls, "overlap", mode);
        kvq_cuda_attn_set_pdl(-1);
        kvq_cuda_hqx_set_trig(-1);
    }
    free(ld);
    // the greedy choice made on the device (a graph of its own, replayed at each position)
    // equals the argmax of the same step's logits; the two graphs alternate
    for (int t = 0; t < T && t < 8; t++) {
        int32_t top = -2;
        if (kvq_model_forward(g, ids + t, 1, t, ls, 0, &e) || kvq_model_forward_argmax(g, ids + t, 1, t, &top, &e))
            fail_msg("%s", e.msg);
        assert_int_equal(top, argmax(ls, V));
    }
    int same = 0;
    if (n_greedy) {
        int32_t nc = argmax(lc + (size_t)(T - 1) * V, V), ng = argmax(lg + (size_t)(T - 1) * V, V);
        for (int i = 0; i < n_greedy && nc == ng; i++, same++) {
            if (kvq_model_forward(c, &nc, 1, T + i, lc, 0, &e) || kvq_model_forward(g, &ng, 1, T + i, lg, 0, &e))
                fail_msg("%s", e.msg);
            nc = argmax(lc, V);
            ng = argmax(lg, V);
        }
    }
    kvq_model_mem mm;
    kvq_model_memory(g, &mm);
    printf("  %-58s %-5s T=%d gpu/cpu %.3g (cpu int8/exact %.3g) gpu/hf %.3g decode/prefill %.3g fused/unfused %.3g "
           "greedy %d/%d tc/exact %.3g tc/hf %.3g prep 1-3 + overlap 0-2: prefills+steps differing %d (GPU %.1f MB)\n", path,
           ex == KVQ_EXEC_EXACT ? "exact" : ex == KVQ_EXEC_DECODED ? "dec" : "int8", T, r, noise, rh, rs, rf, same, n_greedy, rt,
           rth, prep_diff, mm.device / 1e6);
    assert_int_equal(prep_diff, 0);
    assert_true(rf <= lim);
    assert_true(r <= lim);
    assert_true(rh <= 1e-3);
    assert_true(rs <= (noise > 0 ? lim : 1e-4)); // a graph-replayed step rounds like a prefill row
    if (noise == 0) assert_int_equal(same, n_greedy); // int8: greedy agreement is reported only
    kvq_model_close(c);
    kvq_model_close(g);
    free(lc); free(lg); free(ls);
}

static void test_oracles(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    const char *names[] = {"llama", "llama3-ropescale", "llama3-ropescale-v4config", "mistral",
                           "phi3", "qwen2", "qwen2-v4config", "qwen3"};
    char d[512], t[600], l[600];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(d, sizeof d, "%s/oracle/%s", shared(), names[i]);
        if (!is_dir(d)) { printf("  skip %s: not found\n", d); continue; }
        snprintf(t, sizeof t, "%s/tokens_i32.bin", d);
        snprintf(l, sizeof l, "%s/logits_f32.bin", d);
        size_t nt, nl;
        int32_t *ids = slurp(t, &nt);
        float *ref = slurp(l, &nl);
        assert_non_null(ids);
        assert_non_null(ref);
        compare(d, ids, (int)(nt / 4), ref, 0, KVQ_EXEC_INT8);
        free(ids); free(ref);
    }
}

// src converted to path with the weight spec (embeddings packed too with emb); a failure fails the test.
static void convert_or_fail(const char *src, const char *path, const char *spec, int emb) {
    kvq_convert_opts co = {0};
    co.plan.weights = spec;
    co.plan.quantize_embeddings = emb;
    kvq_err e = {0};
    if (kvq_convert(src, path, &co, NULL, &e)) fail_msg("%s", e.msg);
}

static const char *synth_model(const char *kind, char *dir, size_t n);

static void test_shared_and_converted(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = 1 + (i * 37) % 250; // in every shared vocabulary
    char d[512];
    const char *models[] = {"kvq-small-llama", "kvq-small-qwen3", "kvq-tiny-llama", "stories260K/stories260K.bin"};
    for (int i = 0; i < 4; i++) {
        snprintf(d, sizeof d, "%s/models/%s", shared(), models[i]);
        if (!exists(d)) { printf("  skip %s: not found\n", d); continue; }
        compare(d, ids, 100, NULL, 32, KVQ_EXEC_INT8);
    }
    // converted files: packed HyperQuant (E8 4.0, 3.0; embeddings packed too), RTN 4
    mkdir("build", 0755);
    mkdir("build/tests", 0755);
    char out[] = "build/tests/cuda-model-XXXXXX";
    assert_non_null(mkdtemp(out));
    { // make_synth_llama's t1k in E8 4.0: the 8B shape's attention (head_dim 128, 4 query heads a KV head) whose
      // merging blocks prepare o's input (o's tile, 128, is a head; o 1024 wide) — kvq-tiny-llama's heads are 64 wide
        static char t1k[512];
        synth_model("t1k", t1k, sizeof t1k);
        char path[600];
        snprintf(path, sizeof path, "%s/t1k.kvq", out);
        convert_or_fail(t1k, path, "hyperquant:e8:4.0", 0);
        compare(path, ids, 100, NULL, 16, KVQ_EXEC_INT8);
        remove(path);
    }
    snprintf(d, sizeof d, "%s/models/kvq-small-llama", shared());
    const char *src = is_dir(d) ? d : TINY;
    const struct { const char *spec; int emb; } conv[] = {
        {"hyperquant:e8:4.0", 0}, {"hyperquant:e8:3.0", 1}, {"rtn:4:g128", 0}, {"hyperquant:d4:4.0", 0}};
    for (int i = 0; i < 4; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/m%d.kvq", out, i);
        convert_or_fail(src, path, conv[i].spec, conv[i].emb);
        compare(path, ids, 100, NULL, 32, KVQ_EXEC_INT8);
        compare(path, ids, 100, NULL, 32, KVQ_EXEC_EXACT);
        if (i == 0) compare(path, ids, 100, NULL, 0, KVQ_EXEC_DECODED);
        remove(path);
    }
    rmdir(out);
}


// ---- several sequences (kvq_model_forward_seqs)

// The kernels with several sequences (ops.h kvq_cuda_seqs): a step of B tokens, each in its own
// sequence's cache at its own position (the attention inputs from fused rows stored there, then
// the split attention; and the store + attend of kvq_cuda_attention), against B one-token calls
// on each sequence alone: the same bits. Then the argmax of several rows against the host's.
static void seqs_kernels(void) {
    enum { B = 5, NH = 8, NKV = 2, HD = 64, CTX = 160 };
    const int seq[B] = {3, 0, 4, 1, 2}, pos[B] = {0, 17, 159, 64, 100};
    const size_t per = (size_t)NKV * CTX * HD, qd = (size_t)NH * HD, kd = (size_t)NKV * HD, W = qd + 2 * kd;
    const float scale = 1.0f / sqrtf((float)HD);
    uint64_t r = 4242;
    float *K = rnd(&r, per * B, 1), *V = rnd(&r, per * B, 1), *qkv = rnd(&r, W * B, 1), *inv = malloc(sizeof(float) * HD / 2);
    for (int i = 0; i < HD / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / HD);
    float *dqkv = dev(qkv, W * B), *dinv = dev(inv, HD / 2), *dq = dev(NULL, qd * B), *dout = dev(NULL, qd * B);
    int *dsq = NULL;
    kvq_err e = {0};
    int hsq[2 * B];
    for (int t = 0; t < B; t++) hsq[t] = seq[t], hsq[B + t] = pos[t];
    if (kvq_cuda_malloc((void **)&dsq, sizeof hsq, &e) || kvq_cuda_copy(dsq, hsq, sizeof hsq, 1, &e)) fail_msg("%s", e.msg);
    const kvq_cuda_seqs sq = {dsq, dsq + B, (int64_t)per};
    for (int path = 0; path < 2; path++) { // 0: attn_in then attend; 1: qkv split on the host, kvq_cuda_attention
        float *dK = dev(K, per * B), *dV = dev(V, per * B), *rK = dev(K, per * B), *rV = dev(V, per * B);
        float *got = malloc(sizeof(float) * qd * B), *want = malloc(sizeof(float) * qd * B);
        float *gK = malloc(sizeof(float) * per * B), *wK = malloc(sizeof(float) * per * B);
        float *dk = dev(NULL, kd * B), *dv = dev(NULL, kd * B);
        if (path == 1) { // q, k, v rows from the fused rows (no norms, no rope: the store and attend alone)
            OK(kvq_cuda_qkv_split(dqkv, NULL, dq, dk, dv, B, (int)qd, (int)kd, E));
            OK(kvq_cuda_attention(dq, dk, dv, dK, dV, dout, B, 0, NULL, &sq, NH, NKV, HD, CTX, scale, E));
        } else {
            OK(kvq_cuda_attn_in(dqkv, NULL, NULL, NULL, 1e-6f, dq, dK, dV, B, 0, NULL, &sq, NH, NKV, HD, HD, dinv, CTX, E));
            OK(kvq_cuda_attend(dq, dK, dV, dout, B, 0, NULL, &sq, NH, NKV, HD, CTX, scale, E));
        }
        back(got, dout, qd * B);
        back(gK, dK, per * B);
        for (int t = 0; t < B; t++) { // alone: one token of sequence seq[t] at pos[t]
            float *kc = rK + seq[t] * per, *vc = rV + seq[t] * per;
            if (path == 1)
                OK(kvq_cuda_attention(dq + t * qd, dk + t * kd, dv + t * kd, kc, vc, dout + t * qd, 1, pos[t], NULL, NULL, NH, NKV,
                                      HD, CTX, scale, E));
            else {
                OK(kvq_cuda_attn_in(dqkv + t * W, NULL, NULL, NULL, 1e-6f, dq + t * qd, kc, vc, 1, pos[t], NULL, NULL, NH, NKV, HD,
                                    HD, dinv, CTX, E));
                OK(kvq_cuda_attend(dq + t * qd, kc, vc, dout + t * qd, 1, pos[t], NULL, NULL, NH, NKV, HD, CTX, scale, E));
            }
        }
        back(want, dout, qd * B);
        back(wK, rK, per * B);
        assert_memory_equal(got, want, sizeof(float) * qd * B);
        assert_memory_equal(gK, wK, sizeof(float) * per * B); // each row stored in its own sequence only
        printf("  %d sequences, positions 0..159, %s: outputs and caches equal to one-token calls\n", B,
               path ? "store + attend" : "attention inputs + attend");
        free(got); free(want); free(gK); free(wK);
        kvq_cuda_free(dK); kvq_cuda_free(dV); kvq_cuda_free(rK); kvq_cuda_free(rV); kvq_cuda_free(dk); kvq_cuda_free(dv);
    }
    { // the rows variant (a KV codec cache's step, backend_cuda.c kv_attention_seqs): token t rotated at pos[t] in one
      // launch, the bits of one-token calls at pos[t]; and not those of one sequence at positions 0..B-1
        float *r1 = dev(NULL, (qd + 2 * kd) * B), *r2 = dev(NULL, (qd + 2 * kd) * B), *r3 = dev(NULL, (qd + 2 * kd) * B);
        OK(kvq_cuda_attn_in_rows(dqkv, NULL, NULL, NULL, 1e-6f, r1, r1 + qd * B, r1 + (qd + kd) * B, B, 0, NULL, &sq, NH, NKV,
                                 HD, HD, dinv, E));
        for (int t = 0; t < B; t++)
            OK(kvq_cuda_attn_in_rows(dqkv + t * W, NULL, NULL, NULL, 1e-6f, r2 + t * qd, r2 + qd * B + t * kd,
                                     r2 + (qd + kd) * B + t * kd, 1, pos[t], NULL, NULL, NH, NKV, HD, HD, dinv, E));
        OK(kvq_cuda_attn_in_rows(dqkv, NULL, NULL, NULL, 1e-6f, r3, r3 + qd * B, r3 + (qd + kd) * B, B, 0, NULL, NULL, NH, NKV,
                                 HD, HD, dinv, E));
        const size_t n = (qd + 2 * kd) * B;
        float *h1 = malloc(sizeof(float) * n), *h2 = malloc(sizeof(float) * n), *h3 = malloc(sizeof(float) * n);
        back(h1, r1, n);
        back(h2, r2, n);
        back(h3, r3, n);
        assert_memory_equal(h1, h2, sizeof(float) * n);
        assert_true(memcmp(h1, h3, sizeof(float) * qd * B) != 0); // q rotated at the sequences' positions
        assert_memory_equal(h1 + (qd + kd) * B, h3 + (qd + kd) * B, sizeof(float) * kd * B); // v: no rotation
        printf("  attention inputs as rows, %d sequences' positions in one launch: equal to one-token calls\n", B);
        free(h1); free(h2); free(h3);
        kvq_cuda_free(r1); kvq_cuda_free(r2); kvq_cuda_free(r3);
    }
    // the argmax of several rows (one launch) against the host's, ties and a NaN row included
    enum { R = 7, N = 128256 };
    float *x = rnd(&r, (size_t)R * N, 1.0f);
    x[2 * N + 5] = x[2 * N + 90000] = 60.0f; // a tie: the first
    x[4 * N + 77] = NAN;
    int *dtop = NULL, top[R];
    float *dx = dev(x, (size_t)R * N);
    if (kvq_cuda_malloc((void **)&dtop, sizeof top, &e) || kvq_cuda_argmax(dx, R, N, dtop, &e) || kvq_cuda_sync(&e) ||
        kvq_cuda_copy(top, dtop, sizeof top, 0, &e))
        fail_msg("%s", e.msg);
    for (int i = 0; i < R; i++) assert_int_equal(top[i], i == 4 ? -1 : argmax(x + (size_t)i * N, N));
    assert_int_equal(top[2], 5);
    assert_int_equal(kvq_cuda_argmax(dx, KVQ_CUDA_ARGMAX_ROWS + 1, N, dtop, &e), KVQ_ERR_ARG);
    kvq_cuda_free(dtop); kvq_cuda_free(dx); free(x);
    kvq_cuda_free(dsq); kvq_cuda_free(dqkv); kvq_cuda_free(dinv); kvq_cuda_free(dq); kvq_cuda_free(dout);
    free(K); free(V); free(qkv); free(inv);
}

// A model's batched steps of several sequences on the GPU (each step a captured graph, replayed;
// recaptured when the step's size changes) against each sequence run alone on the GPU (its own
// one-token graphs): bound 1e-6 (the batched products give the one-token kernel's bits, the
// attention the same splits), and, dense, alone on the CPU within 1e-5. Steps alternate logits
// and the device's greedy choice; the last four take two of the four sequences.
static void seqs_model(const char *path, kvq_exec ex, int cpu_too) {
    enum { NS = 4, STEPS = 10 };
    const int plen[NS] = {3, 17, 40, 9};
    kvq_model *m = open_on(path, 1, ex), *ref = open_on(path, 1, ex), *c = cpu_too ? open_on(path, 0, ex) : NULL;
    const int V = kvq_model_arch(m)->vocab_size;
    kvq_err e = {0};
    if (kvq_model_set_seqs(m, NS, &e) || kvq_model_set_seqs(ref, NS, &e) || (c && kvq_model_set_seqs(c, NS, &e)))
        fail_msg("%s", e.msg);
    int32_t ids[NS][64];
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < 64; i++) ids[s][i] = 1 + (i * 37 + s * 11) % 250;
    float *lg = malloc(sizeof(float) * NS * V), *lr = malloc(sizeof(float) * V), *lc = malloc(sizeof(float) * V);
    kvq_model *all[3] = {m, ref, c};
    for (int s = 0; s < NS; s++)
        for (int k = 0; k < 3; k++)
            if (all[k] && (kvq_model_use_seq(all[k], s, &e) || kvq_model_forward(all[k], ids[s], plen[s], 0, lr, 0, &e)))
                fail_msg("%s", e.msg);
    double worst = 0, worst_cpu = 0;
    int pos[NS] = {plen[0], plen[1], plen[2], plen[3]}, agree = 0;
    for (int k = 0; k < STEPS; k++) {
        const int n = k < 6 ? NS : 2;
        int seq[NS] = {0, 1, 2, 3}, p[NS];
        if (n == 2) seq[0] = 3, seq[1] = 1;
        int32_t tok[NS], next[NS];
        for (int t = 0; t < n; t++) tok[t] = ids[seq[t]][pos[seq[t]]], p[t] = pos[seq[t]];
        if (kvq_model_forward_seqs(m, tok, seq, p, n, k & 1 ? NULL : lg, k & 1 ? next : NULL, &e)) fail_msg("%s", e.msg);
        for (int t = 0; t < n; t++) {
            if (kvq_model_use_seq(ref, seq[t], &e) || kvq_model_forward(ref, &tok[t], 1, p[t], lr, 0, &e)) fail_msg("%s", e.msg);
            if (c && (kvq_model_use_seq(c, seq[t], &e) || kvq_model_forward(c, &tok[t], 1, p[t], lc, 0, &e))) fail_msg("%s", e.msg);
            if (k & 1) {
                assert_int_equal(next[t], argmax(lr, V));
                agree++;
            } else {
                worst = fmax(worst, rel_err(lg + (size_t)t * V, lr, V));
                if (c) worst_cpu = fmax(worst_cpu, rel_err(lg + (size_t)t * V, lc, V));
            }
            pos[seq[t]]++;
        }
    }
    printf("  %-58s %s: %d sequences, batched GPU steps vs alone on the GPU %.3g%s%.3g, %d greedy choices equal\n", path,
           ex == KVQ_EXEC_EXACT ? "exact" : "int8", NS, worst, c ? ", vs the CPU " : "", c ? worst_cpu : 0.0, agree);
    assert_true(worst <= 1e-6);
    assert_true(worst_cpu <= 1e-5);
    for (int k = 0; k < 3; k++) kvq_model_close(all[k]);
    free(lg); free(lr); free(lc);
}

static void test_seqs(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    seqs_kernels();
    char d[512];
    snprintf(d, sizeof d, "%s/models/kvq-small-llama", shared());
    const char *src = is_dir(d) ? d : TINY;
    seqs_model(src, KVQ_EXEC_INT8, 1);
    mkdir("build", 0755);
    mkdir("build/tests", 0755);
    char out[] = "build/tests/cuda-seqs-XXXXXX";
    assert_non_null(mkdtemp(out));
    char path[600];
    snprintf(path, sizeof path, "%s/m.kvq", out);
    convert_or_fail(src, path, "hyperquant:e8:4.0", 1);
    seqs_model(path, KVQ_EXEC_INT8, 0);
    seqs_model(path, KVQ_EXEC_EXACT, 0);
    remove(path);
    rmdir(out);
}

// ---- KV codecs on the device (kernels/cuda/kv_attn.cu through the GPU backend's kv_codec)

// make_synth_llama's model KIND written once into dir (a caller's static buffer) under TMPDIR
// (KVQ_SYNTH names the tool; default build/bench/...).
static const char *synth_model(const char *kind, char *dir, size_t n) {
    if (dir[0]) return dir;
    const char *tool = getenv("KVQ_SYNTH");
    if (!tool || !*tool) tool = "build/bench/make_synth_llama";
    if (access(tool, X_OK)) fail_msg("%s: not found (set KVQ_SYNTH to make_synth_llama)", tool);
    snprintf(dir, n, "%s/kvq-%s-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", kind, (int)getpid());
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' '%s' 5 >/dev/null 2>&1", tool, kind, dir, TINY);
    if (system(cmd)) fail_msg("%s failed", cmd);
    return dir;
}
// A model with the device kernels' head shape (head_dim 128, 4 query heads per KV head).
static const char *t128_model(void) {
    static char dir[512];
    return synth_model("t128", dir, sizeof dir);
}
// make_synth_llama's t3g: head_dim 64 with 3 query heads per KV head (a shape the GPU KV kernels refuse).
static const char *t3g_model(void) {
    static char dir[512];
    return synth_model("t3g", dir, sizeof dir);
}

// The fold (kvq_cuda_hqx_set_fold, KVQ_CUDA_FOLD=1; hqx_gemv1.cu): make_synth_llama's t1k (1024
// wide, so its q/k/v, gate/up and lm_head inputs are whole steps of the one-token product)
// converted to E8 4.0, decoded greedily on two models of their own, without the fold and with
// it (graphs captured with each): the prefill's and every step's logits equal bit for bit, the
// steps replayed from captured graphs (the folded products' programmatic-dependent launches in
// them), and the folded products did run (kvq_cuda_hqx_fold_launches).
static void test_fold_model(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    static char dir[512];
    synth_model("t1k", dir, sizeof dir);
    mkdir("build", 0755);
    mkdir("build/tests", 0755);
    char out[] = "build/tests/cuda-fold-XXXXXX", path[600];
    assert_non_null(mkdtemp(out));
    snprintf(path, sizeof path, "%s/m.kvq", out);
    convert_or_fail(dir, path, "hyperquant:e8:4.0", 0);
    kvq_err e = {0};
    enum { T = 12, STEPS = 24 };
    int32_t ids[T + STEPS];
    for (int i = 0; i < T; i++) ids[i] = 1 + (i * 37) % 250;
    float *lg[2] = {NULL, NULL};
    int V = 0;
    long folds = 0, graphs = 0;
    for (int f = 0; f < 2; f++) {
        kvq_cuda_hqx_set_fold(f);
        kvq_model *m = open_on(path, 1, KVQ_EXEC_INT8);
        V = kvq_model_arch(m)->vocab_size;
        lg[f] = malloc(sizeof(float) * (size_t)V * (T + STEPS));
        const long f0 = kvq_cuda_hqx_fold_launches(), g0 = kvq_cuda_graph_launches();
        if (kvq_model_forward(m, ids, T, 0, lg[f], 1, &e)) fail_msg("fold %d: %s", f, e.msg);
        for (int t = 0; t < STEPS; t++) { // greedy from the run without the fold: both runs read the same tokens
            float *l = lg[f] + (size_t)(T + t) * V, *prev = lg[0] + (size_t)(T - 1 + t) * V;
            if (f == 0) {
                int best = 0;
                for (int i = 1; i < V; i++) best = prev[i] > prev[best] ? i : best;
                ids[T + t] = best;
            }
            if (kvq_model_forward(m, ids + T + t, 1, T + t, l, 0, &e)) fail_msg("fold %d step %d: %s", f, t, e.msg);
        }
        if (f) folds = kvq_cuda_hqx_fold_launches() - f0, graphs = kvq_cuda_graph_launches() - g0;
        else assert_int_equal(kvq_cuda_hqx_fold_launches(), f0);
        kvq_model_close(m);
    }
    kvq_cuda_hqx_set_fold(-1);
    int diff = 0;
    for (int t = 0; t < T + STEPS; t++) diff += memcmp(lg[0] + (size_t)t * V, lg[1] + (size_t)t * V, sizeof(float) * V) != 0;
    printf("  fold: t1k E8 4.0, prefill %d + %d steps: %d of %d logit rows differ, %ld folded launches, %ld graph launches\n", T,
           STEPS, diff, T + STEPS, folds, graphs);
    assert_int_equal(diff, 0);
    assert_true(folds > 0);
    assert_true(graphs > 0);
    free(lg[0]);
    free(lg[1]);
    remove(path);
    rmdir(out);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) printf("  could not remove %s\n", dir);
}

static kvq_model *open_kv(const char *path, int gpu, const char *spec, int window, int boundary) {
    kvq_model *m;
    const char *mb = getenv("KVQ_TEST_KV_BATCH"); // diagnosis: prefill chunks of this many tokens
    if (mb && *mb) {
        kvq_model_opts o = kvq_model_opts_default();
        o.max_ctx = 256;
        o.exec = KVQ_EXEC_EXACT;
        o.max_batch = atoi(mb);
        if (gpu) o.backend = kvq_backend_cuda_new;
        kvq_err e = {0};
        setenv("KVQ_CUDA_TC", "0", 1);
        if (kvq_model_open(path, &o, &m, &e)) fail_msg("%s", e.msg);
        unsetenv("KVQ_CUDA_TC");
    } else m = open_on(path, gpu, KVQ_EXEC_EXACT);
    if (!spec) return m;
    const kvq_arch *a = kvq_model_arch(m);
    kvq_kvcache_policy pol = {window, boundary, 7, 0, 0};
    kvq_kvcache *c = NULL;
    kvq_err e = {0};
    if (kvq_kvcache_codec_new(spec, a->n_layers, a->n_kv_heads, a->head_dim, kvq_model_max_ctx(m), &pol, &c, &e) ||
        kvq_model_set_kvcache(m, c, &e))
        fail_msg("%s: %s", spec, e.msg);
    return m;
}

// A GPU model of the t128 shape with a KV codec cache (exact products, fp32 kernels off tensor cores), the environment
// variable env set to val while it opens and its cache is set (NULL: none).
static kvq_model *open_kv_env(const char *path, const char *spec, int window, int boundary, int max_ctx, int max_batch,
                              const char *env, const char *val) {
    kvq_model_opts o = kvq_model_opts_default();
    o.max_ctx = max_ctx;
    o.exec = KVQ_EXEC_EXACT;
    o.max_batch = max_batch;
    o.backend = kvq_backend_cuda_new;
    kvq_model *m = NULL;
    kvq_err e = {0};
    setenv("KVQ_CUDA_TC", "0", 1);
    if (env) setenv(env, val, 1);
    if (kvq_model_open(path, &o, &m, &e)) fail_msg("%s", e.msg);
    const kvq_arch *a = kvq_model_arch(m);
    kvq_kvcache_policy pol = {window, boundary, 7, 0, 0};
    kvq_kvcache *c = NULL;
    if (kvq_kvcache_codec_new(spec, a->n_layers, a->n_kv_heads, a->head_dim, kvq_model_max_ctx(m), &pol, &c, &e) ||
        kvq_model_set_kvcache(m, c, &e))
        fail_msg("%s: %s", spec, e.msg);
    unsetenv("KVQ_CUDA_TC");
    if (env) unsetenv(env);
    return m;
}

// ... graphs 0 sets KVQ_CUDA_KV_GRAPHS=0 (its one-token steps then launch every kernel).
static kvq_model *open_kv_graphs(const char *path, const char *spec, int window, int boundary, int graphs, int max_ctx) {
    return open_kv_env(path, spec, window, boundary, max_ctx, 32, graphs ? NULL : "KVQ_CUDA_KV_GRAPHS", "0");
}

// One step (T tokens at pos, logits of the last) on the graph model g and the direct one d: the
// logits compared bit for bit (*n_diff counts the steps that differ, *maxd their largest
// difference); graph launches of each model added to *lg, *ld.
static void kvg_step(kvq_model *g, kvq_model *d, const int32_t *ids, int T, int pos, float *xg, float *xd, int V, int *n_diff,
                     double *maxd, long *lg, long *ld, const char *spec) {
    kvq_err e = {0};
    long l0 = kvq_cuda_graph_launches();
    if (kvq_model_forward(g, ids, T, pos, xg, 0, &e)) fail_msg("%s (graphs) pos %d: %s", spec, pos, e.msg);
    long l1 = kvq_cuda_graph_launches();
    if (kvq_model_forward(d, ids, T, pos, xd, 0, &e)) fail_msg("%s (direct) pos %d: %s", spec, pos, e.msg);
    long l2 = kvq_cuda_graph_launches();
    *lg += l1 - l0, *ld += l2 - l1;
    if (memcmp(xg, xd, sizeof(float) * V)) {
        (*n_diff)++;
        for (int i = 0; i < V; i++) *maxd = fmax(*maxd, fabs((double)xg[i] - xd[i]));
    }
}

// Decode steps with a KV codec on the device run as a CUDA graph (captured once, replayed with
// the position in device memory: kvq_gkv_append_step / kvq_gkv_attend_step) and give the same
// logits, bit for bit, as the same steps launched one kernel at a time (KVQ_CUDA_KV_GRAPHS=0),
// for every codec the device runs (both attention kernels for int/KIVI at 2 and 4 bits, windows
// 0/16/40, boundary layers): a 40-token prompt, 230 one-token steps (past KIVI's key groups of
// 32 seven times, the windows' fill and flushes, the packed range from empty on), 8 steps
// through kvq_model_forward_argmax (the second graph; tokens equal), where a window allows a cut
// back of 2 positions (counts that are not a grown sequence's: direct launches, then graphs
// again), and a restart at position 0 by one-token steps (the graph from an empty cache). The
// graph model must have replayed graphs (≥ 270 launches) and the direct one none.
static void test_kv_graphs(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    const char *path = t128_model();
    const struct { const char *spec; int window, boundary, tc; } cs[] = {
        {"fp16", 0, 0, -1}, {"int:4", 0, 0, -1}, {"int:4", 16, 0, 0}, {"int:3", 0, 1, -1}, {"int:2", 16, 0, -1},
        {"kivi:2", 16, 0, -1}, {"kivi:2", 0, 0, 0}, {"kivi:4", 0, 1, -1}, {"kivi:4", 40, 0, 0}, {"kivi:3", 40, 0, -1},
        {"turboquant:3", 0, 0, -1}, {"qturbo:2", 16, 0, -1}, {"turboquant-prod:4", 0, 1, -1}, {"octopus:3", 0, 0, -1},
        {"octopus:2:qjl", 16, 0, -1}, {"hqkv:e8:3:dither", 16, 0, -1}, {"hqkv:d4:4:rot=qjl", 0, 1, -1}, {"hqmq:s96:r4", 0, 0, -1},
        {"hqmq:s24:r3:med3", 16, 0, -1}, // with outliers: the step's encoder fills the pool, the sync checks it
    };
    enum { P = 40, NDEC = 230, NARG = 8, NRE = 40, CTX = 320 };
    uint64_t r = 23;
    int32_t ids[CTX];
    for (int i = 0; i < CTX; i++) ids[i] = (int32_t)(rng_next(&r) % 4000);
    int n_fail = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        kvq_gkv_set_tc(cs[i].tc);
        kvq_model *g = open_kv_graphs(path, cs[i].spec, cs[i].window, cs[i].boundary, 1, CTX);
        kvq_model *d = open_kv_graphs(path, cs[i].spec, cs[i].window, cs[i].boundary, 0, CTX);
        const int V = kvq_model_arch(g)->vocab_size;
        float *xg = malloc(sizeof(float) * V), *xd = malloc(sizeof(float) * V);
        int n_diff = 0, n_steps = 0, n_top = 0, pos = 0;
        double maxd = 0;
        long lg = 0, ld = 0;
        kvg_step(g, d, ids, P, 0, xg, xd, V, &n_diff, &maxd, &lg, &ld, cs[i].spec); // the prompt (direct in both)
        for (pos = P; pos < P + NDEC; pos++, n_steps++) kvg_step(g, d, ids + pos, 1, pos, xg, xd, V, &n_diff, &maxd, &lg, &ld, cs[i].spec);
        kvq_err e = {0};
        for (int t = 0; t < NARG; t++, pos++) { // the argmax graph
            int32_t tg = -2, td = -3;
            if (kvq_model_forward_argmax(g, ids + pos, 1, pos, &tg, &e) || kvq_model_forward_argmax(d, ids + pos, 1, pos, &td, &e))
                fail_msg("%s argmax pos %d: %s", cs[i].spec, pos, e.msg);
            n_top += tg != td;
        }
        if (cs[i].window >= 2) { // cut back inside the window, then on
            pos -= 2;
            for (int t = 0; t < 4; t++, pos++, n_steps++) kvg_step(g, d, ids + pos, 1, pos, xg, xd, V, &n_diff, &maxd, &lg, &ld, cs[i].spec);
        }
        for (pos = 0; pos < NRE; pos++, n_steps++) // a new sequence, one token at a time from position 0
            kvg_step(g, d, ids + 100 + pos, 1, pos, xg, xd, V, &n_diff, &maxd, &lg, &ld, cs[i].spec);
        // every one-token logits step replays (or captures, then launches) the graph but the two
        // after a cut back, which launch directly until the sequence has grown past the cut (the
        // argmax steps run outside kvg_step: not counted here); measured on the H100: 270 / 272
        const int ok = n_diff == 0 && n_top == 0 && ld == 0 && lg == NDEC + NRE + (cs[i].window >= 2 ? 2 : 0);
        printf("  kv graphs %-18s window %2d boundary %d tc %2d: %d steps, %d differ (max |diff| %.3g), argmax %d differ; "
               "graph launches %ld (direct model %ld): %s\n", cs[i].spec, cs[i].window, cs[i].boundary, cs[i].tc, n_steps + 1, n_diff,
               maxd, n_top, lg, ld, ok ? "PASS" : "FAIL");
        n_fail += !ok;
        free(xg), free(xd);
        kvq_model_close(g);
        kvq_model_close(d);
        kvq_gkv_set_tc(-1);
    }
    assert_int_equal(n_fail, 0);
}

// ... prefill chunks of up to max_batch tokens, rows mode's group set by KVQ_CUDA_KV_ROWS=rows ("0": one attend a token).
static kvq_model *open_kv_rows(const char *path, const char *spec, int window, int boundary, const char *rows, int max_batch) {
    return open_kv_env(path, spec, window, boundary, 512, max_batch, "KVQ_CUDA_KV_ROWS", rows);
}

// Prefill attention in rows mode (kvq_gkv_attend_rows, backend_cuda.c's kv_attention: a chunk's
// tokens in groups of KVQ_CUDA_KV_ROWS, default 64) against one attend a token
// (KVQ_CUDA_KV_ROWS=0): a 200-token prompt in one chunk (groups 64, 64, 64, 8), a 50-token chunk
// at 200, 5 decode steps and a 130-token chunk at 255: the logits of each step's last token bit
// for bit equal, for a set of codecs (both attention kernels of int/KIVI, windows
// 0/16/40, boundary layers), and with groups of 7 (KVQ_CUDA_KV_ROWS=7: groups that end inside a
// KIVI key group) for two. A bad KVQ_CUDA_KV_ROWS is refused when the model opens.
static void test_kv_rows(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    const char *path = t128_model();
    const struct { const char *spec; int window, boundary, tc; const char *rows; } cs[] = {
        {"int:4", 0, 0, -1, "64"}, {"int:4", 16, 0, 0, "64"}, {"int:3", 0, 1, -1, "64"}, {"int:2", 40, 0, -1, "7"},
        {"kivi:2", 16, 0, -1, "64"}, {"kivi:4", 40, 0, 0, "7"}, {"kivi:3", 0, 0, -1, "64"}, {"turboquant:3", 0, 0, -1, "64"},
        {"qturbo:2", 16, 0, -1, "64"}, {"turboquant-prod:4", 0, 1, -1, "64"}, {"octopus:2:qjl", 16, 0, -1, "64"},
        {"hqkv:e8:3:dither", 16, 0, -1, "64"}, {"hqmq:s96:r4", 0, 0, -1, "64"}, {"hqmq:s96:r4:med3", 0, 0, -1, "64"},
        {"fp16", 0, 0, -1, "64"},
    };
    const struct { int T, pos; } steps[] = {{200, 0}, {50, 200}, {1, 250}, {1, 251}, {1, 252}, {1, 253}, {1, 254}, {130, 255}};
    uint64_t r = 29;
    int32_t ids[400];
    for (int i = 0; i < 400; i++) ids[i] = (int32_t)(rng_next(&r) % 4000);
    int n_fail = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        kvq_gkv_set_tc(cs[i].tc);
        kvq_model *mr = open_kv_rows(path, cs[i].spec, cs[i].window, cs[i].boundary, cs[i].rows, 256);
        kvq_model *mt = open_kv_rows(path, cs[i].spec, cs[i].window, cs[i].boundary, "0", 256);
        const int V = kvq_model_arch(mr)->vocab_size;
        float *xr = malloc(sizeof(float) * V), *xt = malloc(sizeof(float) * V);
        int n_diff = 0;
        double maxd = 0;
        for (size_t k = 0; k < sizeof steps / sizeof *steps; k++) {
            kvq_err e = {0};
            if (kvq_model_forward(mr, ids + steps[k].pos, steps[k].T, steps[k].pos, xr, 0, &e) ||
                kvq_model_forward(mt, ids + steps[k].pos, steps[k].T, steps[k].pos, xt, 0, &e))
                fail_msg("%s pos %d: %s", cs[i].spec, steps[k].pos, e.msg);
            if (memcmp(xr, xt, sizeof(float) * V)) {
                n_diff++;
                for (int j = 0; j < V; j++) maxd = fmax(maxd, fabs((double)xr[j] - xt[j]));
            }
        }
        printf("  kv rows %-18s window %2d boundary %d tc %2d groups %-2s: %zu chunks, %d differ from one attend a token (max |diff| %.3g): %s\n",
               cs[i].spec, cs[i].window, cs[i].boundary, cs[i].tc, cs[i].rows, sizeof steps / sizeof *steps, n_diff, maxd, n_diff ? "FAIL" : "PASS");
        n_fail += n_diff != 0;
        free(xr), free(xt);
        kvq_model_close(mr);
        kvq_model_close(mt);
        kvq_gkv_set_tc(-1);
    }
    // a bad group size: one line, the model not opened
    kvq_model_opts o = kvq_model_opts_default();
    o.backend = kvq_backend_cuda_new;
    kvq_model *m = NULL;
    kvq_err e = {0};
    setenv("KVQ_CUDA_KV_ROWS", "x", 1);
    assert_int_equal(kvq_model_open(path, &o, &m, &e), KVQ_ERR_ARG);
    unsetenv("KVQ_CUDA_KV_ROWS");
    assert_non_null(strstr(e.msg, "KVQ_CUDA_KV_ROWS"));
    setenv("KVQ_CUDA_ATTN_CMIN", "-1", 1); // the split attention's positions a split: the same
    assert_int_equal(kvq_model_open(path, &o, &m, &e), KVQ_ERR_ARG);
    unsetenv("KVQ_CUDA_ATTN_CMIN");
    assert_non_null(strstr(e.msg, "KVQ_CUDA_ATTN_CMIN"));
    const char *bad_env[][2] = {{"KVQ_CUDA_KV_CFLOOR", "48"}, {"KVQ_CUDA_KV_CFLOOR", "2048"}, {"KVQ_CUDA_ESC_PF", "3"}, {"KVQ_CUDA_ESC_PF", "on"},
                                {"KVQ_CUDA_ESC16", "3"}, {"KVQ_CUDA_ESC16", "on"}, {"KVQ_CUDA_KV_TC_Q8", "yes"}, {"KVQ_CUDA_KV_TC_LEAN", "1 "},
                                {"KVQ_CUDA_ATTN_PF", "5000"}, {"KVQ_CUDA_ATTN_PF", "all"}, {"KVQ_CUDA_G1S", "2"}, {"KVQ_CUDA_G1PF", "9"}, {"KVQ_CUDA_DENSE", "6"},
                                {"KVQ_CUDA_G1SC", "on"}};
    for (size_t i = 0; i < sizeof bad_env / sizeof bad_env[0]; i++) { // the codec attends' chunk floor, the escape mode: the same
        setenv(bad_env[i][0], bad_env[i][1], 1);
        assert_int_equal(kvq_model_open(path, &o, &m, &e), KVQ_ERR_ARG);
        unsetenv(bad_env[i][0]);
        assert_non_null(strstr(e.msg, bad_env[i][0]));
    }
    assert_int_equal(n_fail, 0);
}

// Cases with q8 set run int keys' scores on the integer tensor cores (kvq_gkv_set_tc_q8(1); off by default,
// KVQ_CUDA_KV_TC_Q8) where the model has the (128, 4) shape, and their CPU side rounds q as the kernel does
// (KVQ_KV_SIM_Q8). The two backends' q still differ by ~1e-7, and an element at a rounding boundary takes
// the other int8 step (1/127 of its head's max |q|): the score moves by that step times the key's channel,
// and every later position sees it, as a flipped code does (KIVI's limit below). Measured on the H100
// (session 21 call C, t128): int:4 3.9e-3 / 3.1e-3, int:2 1.3e-2 / 6.9e-3 (prompt / decode), far below the
// codecs' own error against the fp32 cache (0.17, 0.97); limit Q8_LIM. The kernel itself is held to the CPU
// given the same rounded q at NMSE ≤ 1e-5 (test_cuda_kv, test_attend_tc_q8: 3.7e-8 measured).
#define Q8_LIM 3e-2
static int q8_case(const char *spec, int tc, int q8, int shape84) {
    return q8 && shape84 && tc != 0 && (!strcmp(spec, "int:4") || !strcmp(spec, "int:2"));
}
// The CPU model of a case, rounding q as the GPU's int8 scores do where q8 (q8_case).
static kvq_model *open_kv_cpu(const char *path, const char *spec, int window, int boundary, int q8) {
    if (q8) setenv("KVQ_KV_SIM_Q8", "1", 1);
    kvq_model *m = open_kv(path, 0, spec, window, boundary);
    unsetenv("KVQ_KV_SIM_Q8");
    return m;
}

// kvq_model_fill_kv on the device (backend_cuda.c's kv_append: kvq_gkv_append, the encoders a
// prefill chunk runs) against the CPU's fill with the same synthetic rows, for every codec the
// device encodes: 200 positions in chunks of 32 on the t128 model, then an 8-token chunk at 200
// (every token's logits) and 16 decode steps (the CPU's greedy token fed to both). The inputs of
// the encoders are the same floats on both sides, so the same codes (test_cuda_kv); the logits
// within test_kv_codecs' limits (1e-4; KIVI, the rotated codecs and the tensor-core kernels 1e-2),
// and further from an unfilled GPU model's (the chunk at position 0) than 10x the backends'
// difference. Every decode step must run as a CUDA graph: the fill leaves the counts of a
// sequence grown from 0, so the steps run as kvq-run's do after a real prefill (the premise of
// tests/bench/cuda_decode_fill.c). The device's fp32 cache is refused in one line.
static void test_kv_fill(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    const char *path = t128_model();
    const struct { const char *spec; int window, boundary, tc, q8; } cs[] = {
        {"fp16", 0, 0, -1}, {"int:4", 0, 0, -1}, {"int:4", 16, 0, 0}, {"int:2", 16, 0, -1}, {"int:4", 0, 0, -1, 1},
        {"int:2", 16, 0, -1, 1}, {"kivi:4", 0, 1, -1},
        {"kivi:2", 40, 0, -1}, {"turboquant:4", 0, 0, -1}, {"turboquant:2", 16, 0, -1}, {"qturbo:4", 0, 0, -1},
        {"turboquant-prod:4", 0, 1, -1}, {"octopus:4", 0, 0, -1}, {"octopus:2:qjl", 16, 0, -1}, {"hqkv:e8:4", 0, 0, -1},
        {"hqkv:e8:3:dither", 16, 0, -1}, {"hqmq:s96:r4", 0, 0, -1}, {"hqmq:s24:r3:med3", 16, 0, -1},
    };
    enum { T = 200, NP = 8, NDEC = 16 };
    uint64_t r = 31;
    int32_t ids[NP + NDEC];
    for (int i = 0; i < NP; i++) ids[i] = (int32_t)(rng_next(&r) % 4000);
    kvq_err e = {0};
    int n_fail = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        kvq_gkv_set_tc(cs[i].tc);
        const int q8 = q8_case(cs[i].spec, cs[i].tc, cs[i].q8, 1); // (t128: the (128, 4) shape)
        kvq_gkv_set_tc_q8(q8);
        kvq_model *c = open_kv_cpu(path, cs[i].spec, cs[i].window, cs[i].boundary, q8);
        kvq_model *g = open_kv(path, 1, cs[i].spec, cs[i].window, cs[i].boundary);
        kvq_model *u = open_kv(path, 1, cs[i].spec, cs[i].window, cs[i].boundary);
        const int V = kvq_model_arch(g)->vocab_size;
        float *lc = malloc(sizeof(float) * NP * V), *lg = malloc(sizeof(float) * NP * V), *lu = malloc(sizeof(float) * NP * V);
        if (kvq_model_fill_kv(c, T, 5, &e) || kvq_model_fill_kv(g, T, 5, &e)) fail_msg("%s fill: %s", cs[i].spec, e.msg);
        if (kvq_model_forward(c, ids, NP, T, lc, 1, &e) || kvq_model_forward(g, ids, NP, T, lg, 1, &e) ||
            kvq_model_forward(u, ids, NP, 0, lu, 1, &e))
            fail_msg("%s: %s", cs[i].spec, e.msg);
        const double rp = rel_err(lg, lc, (size_t)NP * V), ru = rel_err(lu, lg, (size_t)NP * V);
        double rd = 0;
        long launches = 0;
        for (int t = 0; t < NDEC; t++) {
            ids[NP + t] = argmax(lc + (size_t)(t ? 0 : NP - 1) * V, V);
            const long l0 = kvq_cuda_graph_launches();
            if (kvq_model_forward(g, ids + NP + t, 1, T + NP + t, lg, 0, &e)) fail_msg("%s decode %d: %s", cs[i].spec, t, e.msg);
            launches += kvq_cuda_graph_launches() - l0;
            if (kvq_model_forward(c, ids + NP + t, 1, T + NP + t, lc, 0, &e)) fail_msg("%s decode %d: %s", cs[i].spec, t, e.msg);
            rd = fmax(rd, rel_err(lg, lc, V));
        }
        const int rot = strncmp(cs[i].spec, "int", 3) && strncmp(cs[i].spec, "kivi", 4) && strcmp(cs[i].spec, "fp16");
        const int tc = cs[i].tc != 0 && (!strcmp(cs[i].spec, "int:4") || !strcmp(cs[i].spec, "int:2") ||
                                          !strcmp(cs[i].spec, "kivi:4") || !strcmp(cs[i].spec, "kivi:2"));
        const double lim = q8 ? Q8_LIM : !strncmp(cs[i].spec, "kivi", 4) || rot || tc ? 1e-2 : 1e-4;
        // The decode steps quantize the new tokens' keys and values, which each backend computed
        // (~1e-7 apart): one code at a rounding boundary moves the logits by a step of the filled
        // rows' scale (the synthetic keys' channels spread over > 4x): 5.3e-4 for int:4 on the
        // exact kernel on the H100 (5.1e-4 on tensor cores), so every quantizing codec's decode
        // limit is 1e-2; fp16 quantizes nothing: 1e-4.
        const double lim_d = q8 ? Q8_LIM : strcmp(cs[i].spec, "fp16") ? 1e-2 : 1e-4;
        const int ok = rp <= lim && rd <= lim_d && ru > 10 * rp && launches == NDEC;
        printf("  kv fill %-18s window %2d boundary %d tc %2d%s: gpu/cpu after %d filled positions: prompt %.3g decode %.3g "
               "(limits %.0e / %.0e); vs unfilled %.3g; %ld of %d decode steps as graphs: %s\n", cs[i].spec, cs[i].window,
               cs[i].boundary, cs[i].tc, q8 ? " q8" : "", T, rp, rd, lim, lim_d, ru, launches, NDEC, ok ? "PASS" : "FAIL");
        n_fail += !ok;
        free(lc), free(lg), free(lu);
        kvq_model_close(c), kvq_model_close(g), kvq_model_close(u);
        kvq_gkv_set_tc(-1), kvq_gkv_set_tc_q8(-1);
    }
    kvq_model *f32 = open_on(path, 1, KVQ_EXEC_EXACT); // the device's fp32 cache: no fill
    memset(&e, 0, sizeof e);
    assert_int_equal(kvq_model_fill_kv(f32, 10, 5, &e), KVQ_ERR_UNSUPPORTED);
    printf("  refused: %s\n", e.msg);
    assert_non_null(strstr(e.msg, "fp32"));
    assert_null(strchr(e.msg, '\n'));
    kvq_model_close(f32);
    assert_int_equal(n_fail, 0);
}

// Every codec the device encodes (fp16, int, kivi, turboquant, qturbo, turboquant-prod, octopus
// with and without qjl, hqkv, hqmq), with and without a window and the boundary layers' fp16 keys:
// a prompt of 80 tokens (chunks of 32: each token attends to the cache as the chunk left it),
// then 24 decode steps, then a new sequence from position 0 — logits on the GPU against the
// CPU's codec cache (libconv/kv/kvcache_codec.c: same encoders, bit for bit; attention in
// another float order), within 1e-4 relative (KIVI and the rotated codecs 1e-2: below); and each codec's logits must differ from the
// fp32 cache's by more than the two backends differ (the codec is really in use). On the model at path (shape84: head_dim 128
// with 4 query heads per KV head, where the tensor-core kernels can run); the codecs cs[0, n). @return the codecs that failed.
typedef struct {
    const char *spec;
    int window, boundary, tc, q8; // q8: int8 scores (q8_case)
} kv_case;
static int kv_codecs_on(const char *path, const kv_case *cs, size_t n, int shape84) {
    enum { T = 80, NDEC = 24, T2 = 45 };
    uint64_t r = 11;
    int32_t ids[T + NDEC], ids2[T2];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)(rng_next(&r) % 4000);
    for (int i = 0; i < T2; i++) ids2[i] = (int32_t)(rng_next(&r) % 4000);
    kvq_model *f32 = open_on(path, 1, KVQ_EXEC_EXACT);
    const int V = kvq_model_arch(f32)->vocab_size;
    float *l32 = malloc(sizeof(float) * T * V), *lc = malloc(sizeof(float) * T * V), *lg = malloc(sizeof(float) * T * V);
    kvq_err e = {0};
    if (kvq_model_forward(f32, ids, T, 0, l32, 1, &e)) fail_msg("%s", e.msg);
    int n_fail = 0;
    const kvq_arch *ar = kvq_model_arch(f32);
    printf("  kv codecs on %s (head_dim %d, %d query heads over %d KV heads)\n", path, ar->head_dim, ar->n_heads, ar->n_kv_heads);
    for (size_t i = 0; i < n; i++) {
        kvq_gkv_set_tc(cs[i].tc);
        const int q8 = q8_case(cs[i].spec, cs[i].tc, cs[i].q8, shape84);
        kvq_gkv_set_tc_q8(q8);
        kvq_model *c = open_kv_cpu(path, cs[i].spec, cs[i].window, cs[i].boundary, q8);
        kvq_model *g = open_kv(path, 1, cs[i].spec, cs[i].window, cs[i].boundary);
        if (kvq_model_forward(c, ids, T, 0, lc, 1, &e) || kvq_model_forward(g, ids, T, 0, lg, 1, &e))
            fail_msg("%s: %s", cs[i].spec, e.msg);
        const double rp = rel_err(lg, lc, (size_t)T * V), ru = rel_err(lg, l32, (size_t)T * V);
        if (getenv("KVQ_TEST_KV_DIAG")) // per position: where the backends part
            for (int t = 0; t < T; t++) printf("    %s t %d: %.3g\n", cs[i].spec, t, rel_err(lg + (size_t)t * V, lc + (size_t)t * V, V));
        double rd = 0;
        for (int t = 0; t < NDEC; t++) { // decode: the CPU's greedy token fed to both
            ids[T + t] = argmax(lc + (size_t)(t ? 0 : T - 1) * V, V);
            if (kvq_model_forward(c, ids + T + t, 1, T + t, lc, 0, &e) || kvq_model_forward(g, ids + T + t, 1, T + t, lg, 0, &e))
                fail_msg("%s decode %d: %s", cs[i].spec, t, e.msg);
            rd = fmax(rd, rel_err(lg, lc, V));
        }
        // a new sequence at position 0 (the device's cache restarts)
        if (kvq_model_forward(c, ids2, T2, 0, lc, 1, &e) || kvq_model_forward(g, ids2, T2, 0, lg, 1, &e))
            fail_msg("%s restart: %s", cs[i].spec, e.msg);
        const double rr = rel_err(lg, lc, (size_t)T2 * V);
        kvq_model_mem mc, mg;
        kvq_model_memory(c, &mc);
        kvq_model_memory(g, &mg);
        const int tc = shape84 && cs[i].tc != 0 && (!strcmp(cs[i].spec, "int:4") || !strcmp(cs[i].spec, "int:2") ||
                                          !strcmp(cs[i].spec, "kivi:4") || !strcmp(cs[i].spec, "kivi:2"));
        printf("  kv %-7s%s window %2d boundary %d: gpu/cpu prompt %.3g decode %.3g restart %.3g; vs fp32 cache %.3g; "
               "cache on the device %.2f MB (cpu %.2f MB)\n", cs[i].spec, q8 ? " (tc q8)" : tc ? " (tc)" : cs[i].tc == 0 ? " (fp32)" : "",
               cs[i].window, cs[i].boundary, rp, rd, rr, ru, mg.kv / 1e6, mc.kv / 1e6);
        // the encoders are the CPU's bit for bit (test_cuda_kv), but they quantize keys and values
        // the GPU computed, which differ from the CPU's by ~1e-7: where one sits at a rounding
        // boundary its code differs by one step, and every later query sees it. KIVI's keys share
        // a scale per channel over 32 tokens (one min/max moved by an fp16 ulp moves 32 codes),
        // so single flips show there: measured 3e-4..3e-3 from the position of the flip on.
        // turboquant, qturbo, turboquant-prod, octopus, hqkv, hqmq (GPU encoders of kv_enc.cu, byte for
        // byte the CPU's on the same inputs: test_cuda_kv): a code flips where a rotated coordinate, a
        // QJL projection, a direction score or a lattice coordinate sits at a decision boundary.
        // Measured on the H100 (2026-11-26): most ≤ 6e-6; hqkv:d4:4:rot=qjl 5.7e-4/7.4e-4, octopus:3
        // 1.4e-3/2.5e-3 (prompt/decode) where a flip happened, restart ≤ 1e-5. The limit is KIVI's,
        // 1e-2: a single flip's size, far below the codecs' own error (ru > 10·rp below).
        const int rot = strncmp(cs[i].spec, "int", 3) && strncmp(cs[i].spec, "kivi", 4) && strcmp(cs[i].spec, "fp16");
        // The tensor-core kernels round q (KIVI: q ⊙ scale), p and the values to fp16 before the mma
        // (fp32 sums; test_cuda_kv: NMSE ≤ 1.7e-6 per attention against decode-then-attend): through
        // the model measured on the H100 int:4 2.9e-3/3.2e-3, int:2 1.5e-4, kivi:4 3.3e-4/5.3e-4
        // (prompt/decode), again far below the codecs' own error; limit 1e-2, and the same caches
        // with the fp32 kernels (tc 0) keep theirs.
        const double lim = q8 ? Q8_LIM : !strncmp(cs[i].spec, "kivi", 4) || rot || tc ? 1e-2 : 1e-4;
        // the codec's own error shows, far above the backends' difference; every codec runs, then
        // the test fails if any did. fp16 is nearly lossless: on kvq-tiny-llama its own error
        // (1.5e-4 against the fp32 cache) is not 10x the backends' (2.2e-5; H100, session 15),
        // so it is held to the limit alone.
        const int margin = !strcmp(cs[i].spec, "fp16") || ru > 10 * rp;
        const int ok = rp <= lim && rd <= lim && rr <= lim && margin && mg.kv > 0;
        printf("  kv %s window %d boundary %d: %s (limit %.0e)\n", cs[i].spec, cs[i].window, cs[i].boundary, ok ? "PASS" : "FAIL", lim);
        n_fail += !ok;
        kvq_model_close(c);
        kvq_model_close(g);
        kvq_gkv_set_tc(-1), kvq_gkv_set_tc_q8(-1);
    }
    kvq_model_close(f32);
    free(l32), free(lc), free(lg);
    return n_fail;
}

// kv_codecs_on for the t128 model (the 8B's head shape: every codec, both attention kernels of int and
// KIVI), the bundled kvq-tiny-llama (head_dim 64, 2 query heads per KV head: every codec, the fp32
// split kernels) and, where $KVQ_SHARED has them, kvq-small-llama (64, 4) and kvq-small-qwen3 (128,
// 2) (issue 20, session 15: a codec of each kind); then refusals.
// ---- several sequences with a KV codec cache on the device (issues 20 and 12, session 15)

// A GPU model of the t128 shape with the codec spec (window, no boundary) and n_seq sequences, set
// before the codec (seqs_first) or after it (kvq-run's order); exact products, KVQ_CUDA_TC=0, as
// open_kv_env.
static kvq_model *open_kv_seqs(const char *path, const char *spec, int window, int n_seq, int seqs_first) {
    kvq_model_opts o = kvq_model_opts_default();
    o.max_ctx = 256;
    o.exec = KVQ_EXEC_EXACT;
    o.max_batch = 32;
    o.backend = kvq_backend_cuda_new;
    kvq_model *m = NULL;
    kvq_err e = {0};
    setenv("KVQ_CUDA_TC", "0", 1);
    if (kvq_model_open(path, &o, &m, &e)) fail_msg("%s", e.msg);
    unsetenv("KVQ_CUDA_TC");
    if (seqs_first && n_seq > 1 && kvq_model_set_seqs(m, n_seq, &e)) fail_msg("%s: %d sequences: %s", spec, n_seq, e.msg);
    const kvq_arch *a = kvq_model_arch(m);
    kvq_kvcache_policy pol = {window, 0, 7, 0, 0};
    kvq_kvcache *c = NULL;
    if (kvq_kvcache_codec_new(spec, a->n_layers, a->n_kv_heads, a->head_dim, kvq_model_max_ctx(m), &pol, &c, &e) ||
        kvq_model_set_kvcache(m, c, &e))
        fail_msg("%s: %s", spec, e.msg);
    if (!seqs_first && n_seq > 1 && kvq_model_set_seqs(m, n_seq, &e)) fail_msg("%s: %d sequences: %s", spec, n_seq, e.msg);
    return m;
}

// kvq_model_forward_seqs with a KV codec cache on the device (backend_cuda.c: one packed cache per
// (sequence, layer), a step's tokens appended and attending in their own sequence's caches, the
// step a CUDA graph holding those caches): NS = 3 sequences with different prompts (5, 37, 70
// tokens, prefilled one by one through kvq_model_use_seq: rows mode on each sequence's caches)
// decoded together for STEPS steps, logits and greedy choices alternating, the last 8 steps two of
// them in the other order (a new graph) — against each sequence decoded alone on its own
// one-sequence GPU model with the same codec: logits within 1e-6 (exact products; each token's
// attention inputs, append and attend are the one-sequence step's kernels: the same bits
// expected) and the same greedy choices. With a window, sequence 2 is cut back 2 positions at the
// switch (those 2 steps launch directly, as test_kv_graphs's). Every other step must be a graph
// launch. The memory accounting counts every sequence's cache (NS × one sequence's).
// KVQ_CUDA_KV_SEQS_BATCHED=1 (batched 1; issues 20/12, session 16): a step's tokens appended in one
// set of launches a layer and attending in another (kvq_gkv_append_seqs, kvq_gkv_attend_seqs over the
// layer's sequences as one batched cache; batched 2: the appends per sequence by the one-token step's
// kernels): the same bits expected, graphs or direct launches
// (KVQ_CUDA_KV_GRAPHS=0: graphs 0, no graph launch expected); sequence 2 cut back falls back to the
// per-token path for those 2 steps.
static void test_kv_seqs(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    const char *path = t128_model();
    static const struct { const char *spec; int window, seqs_first, batched, graphs; } cs[] = {
        {"int:4", 0, 0, 0, 1}, {"turboquant:4", 0, 1, 0, 1}, {"kivi:2", 16, 0, 0, 1}, {"int:4", 16, 1, 0, 1},
        {"int:4", 0, 0, 1, 1}, {"turboquant:4", 0, 1, 1, 1}, {"kivi:2", 16, 0, 1, 1}, {"int:4", 16, 1, 1, 1},
        {"kivi:3", 16, 0, 1, 0}, {"octopus:3", 0, 1, 1, 1}, {"hqmq:s24:r3:med3", 16, 0, 1, 1}, {"hqkv:e8:3:dither", 16, 0, 1, 0},
        {"int:4", 16, 0, 2, 1}, {"kivi:2", 16, 1, 2, 0}, // the attends batched, the appends per sequence
    };
    enum { NS = 3, STEPS = 48, CTX = 256 };
    const int plen[NS] = {5, 37, 70};
    uint64_t r = 91;
    int32_t ids[NS][CTX];
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < CTX; i++) ids[s][i] = (int32_t)(rng_next(&r) % 4000);
    int n_fail = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        setenv("KVQ_CUDA_KV_SEQS_BATCHED", cs[i].batched == 1 ? "1" : cs[i].batched == 2 ? "2" : "0", 1); // 1: the default
        if (!cs[i].graphs) setenv("KVQ_CUDA_KV_GRAPHS", "0", 1);
        kvq_model *m = open_kv_seqs(path, cs[i].spec, cs[i].window, NS, cs[i].seqs_first), *ref[NS];
        unsetenv("KVQ_CUDA_KV_SEQS_BATCHED");
        unsetenv("KVQ_CUDA_KV_GRAPHS");
        for (int s = 0; s < NS; s++) ref[s] = open_kv_seqs(path, cs[i].spec, cs[i].window, 1, 0);
        kvq_model_mem mm, m1;
        kvq_model_memory(m, &mm);
        kvq_model_memory(ref[0], &m1);
        const int mem_ok = mm.kv == NS * m1.kv && mm.kv > 0 && mm.scratch > m1.scratch;
        const int V = kvq_model_arch(m)->vocab_size;
        float *lg = malloc(sizeof(float) * NS * V), *lr = malloc(sizeof(float) * V);
        kvq_err e = {0};
        double worst = 0;
        for (int s = 0; s < NS; s++) { // the prompts, one sequence at a time
            if (kvq_model_use_seq(m, s, &e) || kvq_model_forward(m, ids[s], plen[s], 0, lg, 0, &e) ||
                kvq_model_forward(ref[s], ids[s], plen[s], 0, lr, 0, &e))
                fail_msg("%s prompt %d: %s", cs[i].spec, s, e.msg);
            worst = fmax(worst, rel_err(lg, lr, V));
        }
        int pos[NS] = {plen[0], plen[1], plen[2]}, n_top = 0, n_agree = 0, cut = 0;
        long launches = 0;
        for (int k = 0; k < STEPS; k++) {
            const int n = k < STEPS - 8 ? NS : 2;
            int seq[NS] = {0, 1, 2}, p[NS];
            if (n == 2) seq[0] = 2, seq[1] = 0;
            if (k == STEPS - 8 && cs[i].window >= 2) pos[2] -= 2, cut = 1;
            int32_t tok[NS], next[NS];
            for (int t = 0; t < n; t++) tok[t] = ids[seq[t]][pos[seq[t]]], p[t] = pos[seq[t]];
            const long l0 = kvq_cuda_graph_launches();
            if (kvq_model_forward_seqs(m, tok, seq, p, n, k & 1 ? NULL : lg, k & 1 ? next : NULL, &e))
                fail_msg("%s step %d: %s", cs[i].spec, k, e.msg);
            launches += kvq_cuda_graph_launches() - l0;
            for (int t = 0; t < n; t++) {
                if (kvq_model_forward(ref[seq[t]], &tok[t], 1, p[t], lr, 0, &e)) fail_msg("%s alone: %s", cs[i].spec, e.msg);
                if (k & 1) n_top += next[t] != argmax(lr, V), n_agree++;
                else worst = fmax(worst, rel_err(lg + (size_t)t * V, lr, V));
                pos[seq[t]]++;
            }
        }
        const int want = cs[i].graphs ? STEPS - 2 * cut : 0;
        const int ok = worst <= 1e-6 && n_top == 0 && launches == want && mem_ok;
        printf("  kv seqs %-16s window %2d (%s first)%s%s: %d sequences, %d steps, batched vs alone max rel err %.3g, greedy "
               "%d/%d differ, graph launches %ld (expected %d), kv %zu bytes = %d x %zu: %s\n", cs[i].spec, cs[i].window,
               cs[i].seqs_first ? "seqs" : "codec", cs[i].batched == 1 ? " batched" : cs[i].batched ? " attends batched" : "",
               cs[i].graphs ? "" : " no graphs", NS, STEPS,
               worst, n_top, n_agree, launches, want, mm.kv, NS, m1.kv, ok ? "PASS" : "FAIL");
        n_fail += !ok;
        free(lg), free(lr);
        kvq_model_close(m);
        for (int s = 0; s < NS; s++) kvq_model_close(ref[s]);
    }
    assert_int_equal(n_fail, 0);
}

static void test_kv_codecs(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    const char *path = t128_model();
    // tc: −1 the default (int and KIVI at 2 and 4 bits attend on tensor cores), 0 the fp32 kernels
    static const kv_case cs[] = {
        {"fp16", 0, 0, -1}, {"int:4", 0, 0, -1}, {"int:4", 0, 0, 0}, {"int:3", 0, 1, -1}, {"int:2", 16, 0, -1}, {"int:2", 16, 0, 0},
        {"int:4", 0, 0, -1, 1}, {"int:2", 16, 0, -1, 1}, // int8 scores
        {"kivi:2", 16, 0, -1}, {"kivi:4", 0, 1, -1}, {"kivi:4", 0, 1, 0}, {"kivi:3", 40, 0, -1},
        {"turboquant:3", 0, 0, -1}, {"qturbo:2", 16, 0, -1}, {"turboquant-prod:4", 0, 1, -1}, {"octopus:3", 0, 0, -1},
        {"octopus:2:qjl", 16, 0, -1}, {"hqkv:e8:3:dither", 16, 0, -1}, {"hqkv:d4:4:rot=qjl", 0, 1, -1}, {"hqmq:s96:r4", 0, 0, -1},
        {"hqmq:s96:r4:med3", 0, 0, -1}, {"hqmq:s24:r3:med3", 16, 1, -1}, // with outliers (KVQ_GKV_HQMQO)
    };
    static const kv_case few[] = {
        {"int:4", 0, 0, -1}, {"kivi:2", 16, 0, -1}, {"turboquant:4", 0, 0, -1}, {"octopus:3", 0, 0, -1},
        {"hqkv:e8:3:dither", 16, 0, -1}, {"hqmq:s96:r4", 0, 0, -1}, {"hqmq:s96:r4:med3", 0, 0, -1},
    };
    int n_fail = kv_codecs_on(path, cs, sizeof cs / sizeof *cs, 1);
    n_fail += kv_codecs_on(TINY, cs, sizeof cs / sizeof *cs, 0);
    const char *sh[] = {"kvq-small-llama", "kvq-small-qwen3"};
    for (int i = 0; i < 2; i++) {
        char d[512];
        snprintf(d, sizeof d, "%s/models/%s", shared(), sh[i]);
        if (is_dir(d)) n_fail += kv_codecs_on(d, few, sizeof few / sizeof *few, 0);
        else printf("  skip %s: not found\n", d);
    }
    // what the device cannot run is refused, in one line naming the codec (a synthetic model with 3
    // query heads per KV head: a shape the GPU KV kernels are not built for; hqmq:…:med<C>, refused
    // here until session 16, now runs above)
    const char *g3 = t3g_model();
    const struct { const char *model, *spec, *msg; } bad[] = {
        {g3, "int:4", "head_dim 64 or 128 with 1, 2, 4 or 8"},
    };
    kvq_err e = {0};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kvq_model *g = open_on(bad[i].model, 1, KVQ_EXEC_EXACT);
        const kvq_arch *a = kvq_model_arch(g);
        kvq_kvcache_policy pol = {0, 0, 7, 0, 0};
        kvq_kvcache *c = NULL;
        if (kvq_kvcache_codec_new(bad[i].spec, a->n_layers, a->n_kv_heads, a->head_dim, 1, &pol, &c, &e)) fail_msg("%s", e.msg);
        memset(&e, 0, sizeof e);
        assert_int_equal(kvq_model_set_kvcache(g, c, &e), KVQ_ERR_UNSUPPORTED);
        printf("  refused: %s\n", e.msg);
        assert_non_null(strstr(e.msg, bad[i].msg));
        assert_null(strchr(e.msg, '\n'));
        c->ops->free(c);
        kvq_model_close(g);
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", path, g3);
    if (system(cmd)) printf("  could not remove %s, %s\n", path, g3);
    assert_int_equal(n_fail, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_ctx),
        cmocka_unit_test(test_ops),
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_prefill_tile),
        cmocka_unit_test(test_split_rule),
        cmocka_unit_test(test_split_attend),
        cmocka_unit_test(test_seqs),
        cmocka_unit_test(test_kv_graphs), // before test_kv_codecs, which removes the t128 model
        cmocka_unit_test(test_kv_rows),
        cmocka_unit_test(test_kv_fill), // before test_kv_codecs too
        cmocka_unit_test(test_kv_seqs), // before test_kv_codecs too
        cmocka_unit_test(test_kv_codecs),
        cmocka_unit_test(test_oracles),
        cmocka_unit_test(test_shared_and_converted),
        cmocka_unit_test(test_fold_model),
    };
    // KVQ_TEST_FILTER="test_kv_rows": only the tests matching the pattern (cmocka's * and ?), for a short device call
    const char *f = getenv("KVQ_TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
