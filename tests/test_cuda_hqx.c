// GPU products from the hqx execution layout (kernels/cuda/hqx_matvec.cu) against the CPU
// reference (kernels/cpu/hqx.c, exact mode, scalar path) on seeded random tensors: every
// lattice, widths 4..8 with escapes, RTN at several widths and groups, padded columns,
// tiles 64..1024, both paths of the one-token int8 product. Skips without a GPU.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu/hqx.h"
#include "kernels/cpu/hqx_esc16.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/hqx.h"
#include "kernels/cuda/ops.h"
#include "libconv/codec/hyperquant/hq_pack.h"
#include "libconv/codec/rtn.h"
#include "tests/testrng.h"

static int have_gpu(void) {
    char why[256] = "";
    if (kvq_cuda_device_count(why, sizeof why) > 0) return 1;
    fprintf(stderr, "test_cuda_hqx: skipped: %s\n", why);
    return 0;
}

static double rel_err(const float *g, const float *c, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)g[i] - c[i]) * ((double)g[i] - c[i]);
        den += (double)c[i] * c[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

// The product with its input op fused into the activation preparation
// (kvq_cuda_hqx_matmul_parts_in: RMSNorm, silu_mul; none) against the CPU: the op by its
// reference (kernels/cpu), then the CPU int8 product. The transformed rows the preparation also
// writes equal the reference op's within float rounding (the norm's sum runs in another order),
// so an int8 code may land one step away where a rounding boundary falls between the two: the
// products agree to ~1e-3 (a code step over an activation), not to 1e-5 as with the same
// floats. One token gives the same bits as the first of three (a decode step = a prefill row).
// Each preparation kernel (kvq_cuda_hqx_set_prep 0-3: hqx_prep_i8, hqx_prep_i8h plain, as a
// programmatic dependent, without shared memory) gives the same bits: products, written rows.
static void compare_xin(kvq_cuda_hqx *t, const kvq_hqx *w, kvq_hqx_act *a, uint64_t seed) {
    enum { NT = 3 };
    const int64_t cols = w->cols, rows = w->rows;
    float *X = malloc(sizeof(float) * 2 * cols * NT), *XT = malloc(sizeof(float) * cols * NT),
          *nw = malloc(sizeof(float) * cols), *R = malloc(sizeof(float) * rows * NT), *Y = malloc(sizeof(float) * rows * NT),
          *Y1 = malloc(sizeof(float) * rows), *G = malloc(sizeof(float) * cols * NT),
          *Y0 = malloc(sizeof(float) * rows * NT * 2), *G0 = malloc(sizeof(float) * cols * NT * 2);
    for (int64_t i = 0; i < 2 * cols * NT; i++) X[i] = (float)(1.5 * gauss(&seed));
    for (int64_t i = 0; i < cols; i++) nw[i] = (float)(1.0 + 0.3 * gauss(&seed));
    for (int kind = KVQ_CUDA_XIN_NONE; kind <= KVQ_CUDA_XIN_SILU_MUL; kind++) {
        const int64_t in_cols = kind == KVQ_CUDA_XIN_SILU_MUL ? 2 * cols : cols;
        const char *name = kind == KVQ_CUDA_XIN_RMSNORM ? "rmsnorm" : kind == KVQ_CUDA_XIN_SILU_MUL ? "silu_mul" : "none";
        for (int k = 0; k < NT; k++) {
            const float *xr = X + k * in_cols;
            if (kind == KVQ_CUDA_XIN_RMSNORM) kvq_rmsnorm_ref(XT + k * cols, xr, nw, (int)cols, 1e-5f);
            else if (kind == KVQ_CUDA_XIN_SILU_MUL) kvq_silu_mul_ref(XT + k * cols, xr, xr + cols, (int)cols);
            else memcpy(XT + k * cols, xr, sizeof(float) * cols);
            kvq_hqx_prep(w, XT + k * cols, a);
            kvq_hqx_matmul(w, a, 1, R + k * rows, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_REF, 1);
        }
        for (int om = 0; om < 8; om++) { // off 1: rows one float past 16-byte alignment (the scalar sums)
            const int off = om / 4, mode = om % 4;
            kvq_cuda_hqx_set_prep(mode);
            for (int nt = 1; nt <= NT; nt += NT - 1) {
                void *dx = NULL, *dy = NULL, *dt = NULL, *dw = NULL;
                kvq_err err = {0};
                kvq_status st = kvq_cuda_malloc(&dx, sizeof(float) * (in_cols * nt + 1), &err);
                if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * rows * nt, &err);
                if (!st) st = kvq_cuda_malloc(&dt, sizeof(float) * cols * nt, &err);
                if (!st) st = kvq_cuda_malloc(&dw, sizeof(float) * cols, &err);
                float *xo = (float *)dx + off;
                if (!st) st = kvq_cuda_copy(xo, X, sizeof(float) * in_cols * nt, 1, &err);
                if (!st) st = kvq_cuda_copy(dw, nw, sizeof(float) * cols, 1, &err);
                if (!st && kind == KVQ_CUDA_XIN_NONE) st = kvq_cuda_copy(dt, XT, sizeof(float) * cols * nt, 1, &err); // unwritten
                const kvq_cuda_xin in = {(kvq_cuda_xin_kind)kind, kind == KVQ_CUDA_XIN_RMSNORM ? dw : NULL, 1e-5f,
                                         kind == KVQ_CUDA_XIN_NONE ? NULL : dt};
                const int64_t r0 = 0;
                if (!st) st = kvq_cuda_hqx_matmul_parts_in(&t, 1, &r0, xo, &in, nt, dy, rows, 0, &err);
                if (!st) st = kvq_cuda_sync(&err);
                if (!st) st = kvq_cuda_copy(Y, dy, sizeof(float) * rows * nt, 0, &err);
                if (!st) st = kvq_cuda_copy(G, dt, sizeof(float) * cols * nt, 0, &err);
                if (st) fprintf(stderr, "xin: %s\n", err.msg);
                assert_int_equal(st, KVQ_OK);
                const double ry = rel_err(Y, R, (size_t)rows * nt), rt = rel_err(G, XT, (size_t)cols * nt);
                fprintf(stderr, "test_cuda_hqx: %-22s %s+product x%d prep %d offset %d: rows written rel %.2e, product rel %.2e\n",
                        "", name, nt, mode, off, rt, ry);
                assert_true(rt <= 1e-6 * (cols > 4096 ? cols / 4096.0 : 1.0)); // (a sum of cols squares in another order)
                assert_true(ry <= 2e-3);
                if (nt == 1) memcpy(Y1, Y, sizeof(float) * rows);
                else assert_memory_equal(Y1, Y, sizeof(float) * rows);
                float *y0 = Y0 + (nt == 1 ? 0 : rows * NT), *g0 = G0 + (nt == 1 ? 0 : cols * NT);
                if (mode == 0) {
                    memcpy(y0, Y, sizeof(float) * rows * nt);
                    memcpy(g0, G, sizeof(float) * cols * nt);
                } else { // the same bits as hqx_prep_i8's on the same rows
                    assert_memory_equal(y0, Y, sizeof(float) * rows * nt);
                    assert_memory_equal(g0, G, sizeof(float) * cols * nt);
                }
                kvq_cuda_free(dx); kvq_cuda_free(dy); kvq_cuda_free(dt); kvq_cuda_free(dw);
            }
        }
        kvq_cuda_hqx_set_prep(-1);
    }
    free(X); free(XT); free(nw); free(R); free(Y); free(Y1); free(G); free(Y0); free(G0);
}

// The tensor-core path (hqx_tc.cu). (1) The rotated-domain values it decodes, fp32, turned back
// into weights on the CPU (W = sign ⊙ H·(g ⊙ wr) per tile; RTN: W = wr) against the reference
// decoder's rows, each row within 1e-5 (a wrong code or escape moves a row by far more).
// (2) The product of NTC tokens, accumulating, against the CPU exact mode: bf16 operands, so
// ~1e-3 relative, bound 1e-2; row blocks of 5 rows (several cuBLAS calls) give the same
// result within 1e-5 (cuBLAS reorders fp32 sums). Skipped, saying so, without cuBLAS.
static void compare_tc(kvq_cuda_hqx *t, const kvq_hqx *w, kvq_hqx_act *a, uint64_t seed, const char *what) {
    kvq_err err = {0};
    const int64_t rows = w->rows, cols = w->cols, cp = w->cols_p, T = w->tile;
    void *dw = NULL;
    assert_int_equal(kvq_cuda_malloc(&dw, sizeof(float) * rows * cp, &err), KVQ_OK);
    assert_int_equal(kvq_cuda_hqx_decode_rot(t, 0, rows, dw, 0, &err), KVQ_OK);
    float *wr = malloc(sizeof(float) * rows * cp), *ref = malloc(sizeof(float) * cols), *tile = malloc(sizeof(float) * T);
    assert_int_equal(kvq_cuda_sync(&err), KVQ_OK);
    assert_int_equal(kvq_cuda_copy(wr, dw, sizeof(float) * rows * cp, 0, &err), KVQ_OK);
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        kvq_hqx_row_f32(w, r, ref);
        double num = 0, den = 0;
        for (int64_t j = 0; j < cp / T; j++) {
            for (int64_t i = 0; i < T; i++) {
                double v = wr[r * cp + j * T + i];
                if (w->rotate && w->lat == KVQ_HQ_LAT_A2 && !(i & 1)) v *= KVQ_HQ_SQRT3_F;
                tile[i] = (float)v;
            }
            if (w->rotate)
                for (int64_t h = 1; h < T; h <<= 1)
                    for (int64_t i = 0; i < T; i++)
                        if (!(i & h)) {
                            float x0 = tile[i], x1 = tile[i + h];
                            tile[i] = x0 + x1;
                            tile[i + h] = x0 - x1;
                        }
            for (int64_t i = 0; i < T && j * T + i < cols; i++) {
                double v = tile[i];
                if (w->rotate && (kvq_hq_sign_word(w->seed, (uint64_t)j, (uint64_t)(i / 64)) >> (i % 64)) & 1) v = -v;
                const double want = ref[j * T + i];
                num += (v - want) * (v - want);
                den += want * want;
            }
        }
        const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        worst = rel > worst ? rel : worst;
    }
    fprintf(stderr, "test_cuda_hqx: %-22s tc decoded rows vs reference decoder: worst row rel err %.2e\n", what, worst);
    assert_true(worst <= 1e-5);
    kvq_cuda_free(dw);
    free(wr); free(ref); free(tile);
    char why[256];
    if (!kvq_cuda_tc_available(why, sizeof why)) {
        fprintf(stderr, "test_cuda_hqx: tensor-core product skipped: %s\n", why);
        return;
    }
    enum { NTC = 37 };
    float *X = malloc(sizeof(float) * cols * NTC), *R = malloc(sizeof(float) * rows * NTC),
          *Y = malloc(sizeof(float) * rows * NTC), *Y2 = malloc(sizeof(float) * rows * NTC);
    for (int64_t i = 0; i < cols * NTC; i++) X[i] = (float)gauss(&seed);
    for (int k = 0; k < NTC; k++) {
        kvq_hqx_prep(w, X + k * cols, a);
        kvq_hqx_matmul(w, a, 1, R + k * rows, rows, KVQ_HQX_EXACT, KVQ_HQX_ISA_REF, 1);
    }
    void *dx = NULL, *dy = NULL;
    assert_int_equal(kvq_cuda_malloc(&dx, sizeof(float) * cols * NTC, &err), KVQ_OK);
    assert_int_equal(kvq_cuda_malloc(&dy, sizeof(float) * rows * NTC, &err), KVQ_OK);
    assert_int_equal(kvq_cuda_copy(dx, X, sizeof(float) * cols * NTC, 1, &err), KVQ_OK);
    for (int pass = 0; pass < 2; pass++) {
        float *out = pass ? Y2 : Y;
        for (int64_t i = 0; i < rows * NTC; i++) out[i] = 1.0f;
        kvq_cuda_hqx_set_tc_block(pass ? 5 * cp : 0);
        const int64_t r0 = 0;
        kvq_status st = kvq_cuda_copy(dy, out, sizeof(float) * rows * NTC, 1, &err);
        if (!st) st = kvq_cuda_hqx_matmul_tc(&t, 1, &r0, dx, NTC, dy, rows, 1, &err);
        if (!st) st = kvq_cuda_sync(&err);
        if (!st) st = kvq_cuda_copy(out, dy, sizeof(float) * rows * NTC, 0, &err);
        if (st) fprintf(stderr, "tc: %s\n", err.msg);
        assert_int_equal(st, KVQ_OK);
    }
    kvq_cuda_hqx_set_tc_block(0);
    double num = 0, den = 0, d2 = 0;
    for (int64_t i = 0; i < rows * NTC; i++) {
        const double want = 1.0 + R[i];
        num += (Y[i] - want) * (Y[i] - want);
        den += (double)R[i] * R[i];
        d2 += ((double)Y2[i] - Y[i]) * ((double)Y2[i] - Y[i]);
    }
    const double rel = sqrt(num / (den > 0 ? den : 1)), rel2 = sqrt(d2 / (den > 0 ? den : 1));
    fprintf(stderr, "test_cuda_hqx: %-22s tc x%d (+=) vs exact: rel err %.2e, 5-row blocks vs one: %.2e\n", what, NTC, rel,
            rel2);
    assert_true(rel <= 1e-2);
    assert_true(rel2 <= 1e-5); // cuBLAS picks other kernels (split-K) for other row counts: fp32 sums reorder
    kvq_cuda_free(dx);
    kvq_cuda_free(dy);
    free(X); free(R); free(Y); free(Y2);
}

// o's heads for the attention tests (head_dim hd): nh = cols / hd, and the query-head group G
// the largest of 8, 4, 2, 1 whose columns are whole tiles; 0 when attention cannot prepare t.
static int attend_group(kvq_cuda_hqx *t, const kvq_hqx *w, int hd, int *nh, int *G) {
    *nh = (int)(w->cols / hd);
    *G = 0;
    for (int c = 8; c >= 1 && !*G; c /= 2)
        if (*nh % c == 0 && (c * hd) % w->tile == 0) *G = c;
    return w->cols % hd == 0 && *G && kvq_cuda_hqx_attend_can_prep(t, *nh, *nh / *G, hd);
}

// GPU against the CPU exact reference on one packed tensor; frees w.
// Decode attention whose merging blocks prepare o's activation (kvq_cuda_hqx_attend_prep, then
// the product with KVQ_CUDA_XIN_PREPARED) against attention, then the product with its own
// preparation: the same attention output and the same product, bit for bit. t is o (cols =
// n_heads · 128); the query-head group is the largest of 8, 4, 2, 1 whose columns are whole
// tiles. Between the two, a product on other inputs overwrites the scratch.
static void compare_attend_prep(kvq_cuda_hqx *t, const kvq_hqx *w, uint64_t seed, const char *what) {
    enum { HD = 128, CTX = 64, POS = 37 };
    int nh, G;
    if (!attend_group(t, w, HD, &nh, &G)) return;
    const int nkv = nh / G;
    kvq_err err = {0};
    assert_int_equal(kvq_cuda_attention_init(nh, nkv, HD, CTX, &err), KVQ_OK);
    const size_t nq = (size_t)nh * HD, nc = (size_t)nkv * CTX * HD;
    float *h = malloc(sizeof(float) * (nq + 2 * nc)), *ya = malloc(sizeof(float) * w->rows),
          *yb = malloc(sizeof(float) * w->rows), *oa = malloc(sizeof(float) * nq), *ob = malloc(sizeof(float) * nq);
    for (size_t i = 0; i < nq + 2 * nc; i++) h[i] = (float)gauss(&seed);
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dy = NULL, *dz = NULL;
    kvq_status st = kvq_cuda_malloc(&dq, sizeof(float) * nq, &err);
    if (!st) st = kvq_cuda_malloc(&dk, sizeof(float) * nc, &err);
    if (!st) st = kvq_cuda_malloc(&dv, sizeof(float) * nc, &err);
    if (!st) st = kvq_cuda_malloc(&dout, sizeof(float) * nq, &err);
    if (!st) st = kvq_cuda_malloc(&dz, sizeof(float) * nq, &err);
    if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * w->rows, &err);
    if (!st) st = kvq_cuda_copy(dq, h, sizeof(float) * nq, 1, &err);
    if (!st) st = kvq_cuda_copy(dk, h + nq, sizeof(float) * nc, 1, &err);
    if (!st) st = kvq_cuda_copy(dv, h + nq + nc, sizeof(float) * nc, 1, &err);
    if (!st) st = kvq_cuda_copy(dz, h + nq + 7, sizeof(float) * nq, 1, &err); // other inputs
    const float scale = 1.0f / sqrtf((float)HD);
    const int64_t r0 = 0;
    const kvq_cuda_xin prepared = {KVQ_CUDA_XIN_PREPARED, NULL, 0.0f, NULL};
    // A: attention, then the product with its preparation kernel
    if (!st) st = kvq_cuda_attend(dq, dk, dv, dout, 1, POS, NULL, NULL, nh, nkv, HD, CTX, scale, &err);
    if (!st) st = kvq_cuda_hqx_matmul_parts_in(&t, 1, &r0, dout, NULL, 1, dy, w->rows, 0, &err);
    if (!st) st = kvq_cuda_sync(&err);
    if (!st) st = kvq_cuda_copy(oa, dout, sizeof(float) * nq, 0, &err);
    if (!st) st = kvq_cuda_copy(ya, dy, sizeof(float) * w->rows, 0, &err);
    // the scratch overwritten by a product on other inputs
    if (!st) st = kvq_cuda_hqx_matmul_parts_in(&t, 1, &r0, dz, NULL, 1, dy, w->rows, 0, &err);
    // B: attention that prepares the product's activation, the product without preparation
    if (!st) st = kvq_cuda_hqx_attend_prep(dq, dk, dv, dout, POS, NULL, nh, nkv, HD, CTX, scale, t, &err);
    if (!st) st = kvq_cuda_hqx_matmul_parts_in(&t, 1, &r0, dout, &prepared, 1, dy, w->rows, 0, &err);
    if (!st) st = kvq_cuda_sync(&err);
    if (!st) st = kvq_cuda_copy(ob, dout, sizeof(float) * nq, 0, &err);
    if (!st) st = kvq_cuda_copy(yb, dy, sizeof(float) * w->rows, 0, &err);
    if (st) fprintf(stderr, "attend_prep: %s\n", err.msg);
    assert_int_equal(st, KVQ_OK);
    fprintf(stderr, "test_cuda_hqx: %-22s attention + prepared product (%d heads, %d KV heads, tile %d): %s\n", what, nh,
            nkv, w->tile, memcmp(ya, yb, sizeof(float) * w->rows) || memcmp(oa, ob, sizeof(float) * nq) ? "DIFFER" : "same bits");
    assert_memory_equal(oa, ob, sizeof(float) * nq);
    assert_memory_equal(ya, yb, sizeof(float) * w->rows);
    kvq_cuda_free(dq); kvq_cuda_free(dk); kvq_cuda_free(dv); kvq_cuda_free(dout); kvq_cuda_free(dz); kvq_cuda_free(dy);
    free(h); free(ya); free(yb); free(oa); free(ob);
}

// The attention inputs computed by the attention kernel itself (kvq_cuda_attend_set_inputs):
// from one fused q/k/v row (bias, q/k norms, RoPE over rot of the 128 dims), the attention
// inputs' kernel then the attend (with o's preparation, and without) against the armed
// attend on a fresh copy of the caches: the same output, product and caches, bit for bit.
static void compare_attend_inputs(kvq_cuda_hqx *t, const kvq_hqx *w, uint64_t seed, const char *what) {
    enum { HD = 128, CTX = 64, POS = 37 };
    int nh, G;
    if (!attend_group(t, w, HD, &nh, &G)) return;
    const int nkv = nh / G, rot = seed & 1 ? 64 : HD;
    kvq_err err = {0};
    assert_int_equal(kvq_cuda_attention_init(nh, nkv, HD, CTX, &err), KVQ_OK);
    const size_t nq = (size_t)nh * HD, nc = (size_t)nkv * CTX * HD, nr = nq + 2 * (size_t)nkv * HD;
    const size_t nh_all = 2 * nc + 2 * nr + 2 * HD + HD / 2;
    float *h = malloc(sizeof(float) * nh_all);
    for (size_t i = 0; i < nh_all; i++) h[i] = (float)gauss(&seed);
    float *hk = h, *hv = h + nc, *hrow = h + 2 * nc, *hbias = hrow + nr, *hqn = hbias + nr, *hkn = hqn + HD, *hf = hkn + HD;
    for (int i = 0; i < HD; i++) hqn[i] = 1.0f + 0.1f * hqn[i], hkn[i] = 1.0f + 0.1f * hkn[i];
    for (int i = 0; i < HD / 2; i++) hf[i] = powf(10000.0f, -2.0f * (float)i / HD);
    float *o[4], *y[2], *kc[2], *vc[2];
    for (int i = 0; i < 4; i++) o[i] = malloc(sizeof(float) * nq);
    for (int i = 0; i < 2; i++) y[i] = malloc(sizeof(float) * w->rows), kc[i] = malloc(sizeof(float) * nc), vc[i] = malloc(sizeof(float) * nc);
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dy = NULL, *drow = NULL, *dbias = NULL, *dqn = NULL, *dkn = NULL, *df = NULL;
    kvq_status st = kvq_cuda_malloc(&dq, sizeof(float) * nq, &err);
    if (!st) st = kvq_cuda_malloc(&dk, sizeof(float) * nc, &err);
    if (!st) st = kvq_cuda_malloc(&dv, sizeof(float) * nc, &err);
    if (!st) st = kvq_cuda_malloc(&dout, sizeof(float) * nq, &err);
    if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * w->rows, &err);
    if (!st) st = kvq_cuda_malloc(&drow, sizeof(float) * nr, &err);
    if (!st) st = kvq_cuda_malloc(&dbias, sizeof(float) * nr, &err);
    if (!st) st = kvq_cuda_malloc(&dqn, sizeof(float) * HD, &err);
    if (!st) st = kvq_cuda_malloc(&dkn, sizeof(float) * HD, &err);
    if (!st) st = kvq_cuda_malloc(&df, sizeof(float) * HD / 2, &err);
    if (!st) st = kvq_cuda_copy(drow, hrow, sizeof(float) * nr, 1, &err);
    if (!st) st = kvq_cuda_copy(dbias, hbias, sizeof(float) * nr, 1, &err);
    if (!st) st = kvq_cuda_copy(dqn, hqn, sizeof(float) * HD, 1, &err);
    if (!st) st = kvq_cuda_copy(dkn, hkn, sizeof(float) * HD, 1, &err);
    if (!st) st = kvq_cuda_copy(df, hf, sizeof(float) * HD / 2, 1, &err);
    const float scale = 1.0f / sqrtf((float)HD), eps = 1e-6f;
    const int64_t r0 = 0;
    const kvq_cuda_xin prepared = {KVQ_CUDA_XIN_PREPARED, NULL, 0.0f, NULL};
    const kvq_cuda_ain in = {drow, dbias, dqn, dkn, df, eps, rot};
    for (int pass = 0; pass < 2 && !st; pass++) { // 0: inputs' kernel, then attend; 1: armed attend
        for (int prep = 0; prep < 2 && !st; prep++) {
            st = kvq_cuda_copy(dk, hk, sizeof(float) * nc, 1, &err);
            if (!st) st = kvq_cuda_copy(dv, hv, sizeof(float) * nc, 1, &err);
            if (!st) st = kvq_cuda_copy(dq, hrow + 3, sizeof(float) * nq, 1, &err); // not q: the armed attend must not read it
            if (!st && pass == 0)
                st = kvq_cuda_attn_in(drow, dbias, dqn, dkn, eps, dq, dk, dv, 1, POS, NULL, NULL, nh, nkv, HD, rot, df, CTX, &err);
            if (!st && pass == 1) kvq_cuda_attend_set_inputs(&in);
            if (!st && prep) st = kvq_cuda_hqx_attend_prep(dq, dk, dv, dout, POS, NULL, nh, nkv, HD, CTX, scale, t, &err);
            if (!st && prep) st = kvq_cuda_hqx_matmul_parts_in(&t, 1, &r0, dout, &prepared, 1, dy, w->rows, 0, &err);
            if (!st && !prep) st = kvq_cuda_attend(dq, dk, dv, dout, 1, POS, NULL, NULL, nh, nkv, HD, CTX, scale, &err);
            if (!st) st = kvq_cuda_sync(&err);
            if (!st) st = kvq_cuda_copy(o[2 * pass + prep], dout, sizeof(float) * nq, 0, &err);
            if (!st && prep) st = kvq_cuda_copy(y[pass], dy, sizeof(float) * w->rows, 0, &err);
            if (!st && prep) st = kvq_cuda_copy(kc[pass], dk, sizeof(float) * nc, 0, &err);
            if (!st && prep) st = kvq_cuda_copy(vc[pass], dv, sizeof(float) * nc, 0, &err);
        }
    }
    if (st) fprintf(stderr, "attend_inputs: %s\n", err.msg);
    assert_int_equal(st, KVQ_OK);
    const int same = !memcmp(o[0], o[2], sizeof(float) * nq) && !memcmp(o[1], o[3], sizeof(float) * nq) &&
                     !memcmp(y[0], y[1], sizeof(float) * w->rows) && !memcmp(kc[0], kc[1], sizeof(float) * nc) &&
                     !memcmp(vc[0], vc[1], sizeof(float) * nc);
    fprintf(stderr, "test_cuda_hqx: %-22s attention computing its inputs (%d heads, %d KV heads, rot %d): %s\n", what, nh, nkv,
            rot, same ? "same bits" : "DIFFER");
    assert_memory_equal(o[0], o[2], sizeof(float) * nq);
    assert_memory_equal(o[1], o[3], sizeof(float) * nq);
    assert_memory_equal(y[0], y[1], sizeof(float) * w->rows);
    assert_memory_equal(kc[0], kc[1], sizeof(float) * nc);
    assert_memory_equal(vc[0], vc[1], sizeof(float) * nc);
    // the new token's row was written (not the cache's old contents)
    assert_true(memcmp(kc[0] + (size_t)POS * HD, hk + (size_t)POS * HD, sizeof(float) * HD) != 0);
    kvq_cuda_free(dq); kvq_cuda_free(dk); kvq_cuda_free(dv); kvq_cuda_free(dout); kvq_cuda_free(dy);
    kvq_cuda_free(drow); kvq_cuda_free(dbias); kvq_cuda_free(dqn); kvq_cuda_free(dkn); kvq_cuda_free(df);
    for (int i = 0; i < 4; i++) free(o[i]);
    for (int i = 0; i < 2; i++) free(y[i]), free(kc[i]), free(vc[i]);
    free(h);
}

static void compare(kvq_hqx *w, uint64_t seed, const char *what) {
    kvq_err err = {0};
    kvq_cuda_hqx *t = NULL;
    kvq_status st = kvq_cuda_hqx_upload(w, &t, &err);
    if (st) fprintf(stderr, "upload: %s\n", err.msg);
    assert_int_equal(st, KVQ_OK);
    float *x = malloc(sizeof(float) * w->cols), *yg = malloc(sizeof(float) * w->rows), *yc = malloc(sizeof(float) * w->rows);
    for (int64_t i = 0; i < w->cols; i++) x[i] = (float)gauss(&seed);
    uint8_t *buf = aligned_alloc(64, kvq_hqx_act_bytes(w));
    kvq_hqx_act a;
    kvq_hqx_act_init(w, buf, &a);
    kvq_hqx_prep(w, x, &a);
    // float; int8 by the one-token product (hqx_gemv1.cu) with 1 (the default), 2 and 4 rows
    // a warp, with the run-time-decided variant instead of the E8/RTN specializations, and
    // (E8/RTN with whole steps) the persistent variant with rings of 2 (the default), 4 and 3
    // steps and the per-warp kernel instead, and (E8 widths 4 and 5, rows of an even number of
    // steps: the lean kernel by default) the ring of 2 in hqx_gemv1p_k and the lean kernel with
    // each warp's first 3 rows prefetched into L2: the same bits each time
    // 10: the lean kernel with the run-time step count where a compile-time one applies (rows of 4096 columns)
    float *y1 = malloc(sizeof(float) * w->rows);
    for (int mode = 0; mode < 11; mode++) {
        const int int8 = mode > 0;
        kvq_cuda_hqx_set_decode(mode == 2 ? 2 : mode == 3 ? 4 : 1);
        kvq_cuda_hqx_set_decode_general(mode == 4);
        kvq_cuda_hqx_set_persist(mode == 5 ? 4 : mode == 6 ? 0 : mode == 7 ? 3 : 2);
        kvq_cuda_hqx_set_lean(mode == 8 ? 0 : -1);
        kvq_cuda_hqx_set_lean_pf(mode == 9 ? 3 : -1); // 9: each warp's first 3 rows prefetched into L2
        kvq_cuda_hqx_set_lean_sc(mode == 10 ? 0 : -1);
        kvq_hqx_matmul(w, &a, 1, yc, w->rows, int8 ? KVQ_HQX_INT8 : KVQ_HQX_EXACT, KVQ_HQX_ISA_REF, 1);
        memset(yg, 0xff, sizeof(float) * w->rows); // poisoned: every row must be written
        const long lean0 = kvq_cuda_hqx_lean_launches(), sc0 = kvq_cuda_hqx_lean_sc_launches();
        st = kvq_cuda_hqx_matvec_host(t, x, yg, int8, &err);
        // the lean kernel ran exactly where it applies (E8 widths 4 and 5 with scale codes, rows of an even number of
        // steps, the default one-token route) and nowhere else
        const char *eg = getenv("KVQ_CUDA_G1S"), *ep = getenv("KVQ_CUDA_ESC_PF");
        const int lean_applies = (mode == 1 || mode == 9 || mode == 10) && w->lat == KVQ_HQ_LAT_E8 && w->scode && (w->vbits == 4 || w->vbits == 5) && w->cols_p % 2048 == 0 &&
                                 !(eg && !strcmp(eg, "0")) && !(ep && !strcmp(ep, "1"));
        assert_int_equal(kvq_cuda_hqx_lean_launches() - lean0, lean_applies);
        // the compile-time step count where it applies: the default escape modes' instances keep to registers (ptxas
        // 13.0; one that spilled would not be taken, and this would fail)
        const char *es = getenv("KVQ_CUDA_G1SC");
        const int sc_applies = lean_applies && mode != 10 && w->cols_p == 4096 && !(es && !strcmp(es, "0")) && !(ep && *ep);
        assert_int_equal(kvq_cuda_hqx_lean_sc_launches() - sc0, sc_applies);
        if (st) fprintf(stderr, "matvec: %s\n", err.msg);
        assert_int_equal(st, KVQ_OK);
        double num = 0, den = 0;
        for (int64_t r = 0; r < w->rows; r++) {
            num += ((double)yg[r] - yc[r]) * ((double)yg[r] - yc[r]);
            den += (double)yc[r] * yc[r];
        }
        double rel = sqrt(num / (den > 0 ? den : 1));
        fprintf(stderr, "test_cuda_hqx: %-22s %s rows %4lld cols %5lld T %4d vbits %d: rel err %.2e\n", what,
                mode == 0 ? "float" : mode == 1 ? "int8 " : mode == 2 ? "int8/2" : mode == 3 ? "int8/4" : mode == 4 ? "int8/g" : mode == 5 ? "int8/p4" : mode == 6 ? "int8/w" : mode == 7 ? "int8/p3" : mode == 8 ? "int8/p2" : mode == 9 ? "int8/pf" : "int8/rs", (long long)w->rows, (long long)w->cols, w->tile,
                w->vbits, rel);
        assert_true(rel <= 1e-5);
        if (mode == 1) memcpy(y1, yg, sizeof(float) * w->rows);
        if (mode > 1) assert_memory_equal(y1, yg, sizeof(float) * w->rows);
    }
    kvq_cuda_hqx_set_decode(0);
    kvq_cuda_hqx_set_decode_general(0);
    kvq_cuda_hqx_set_persist(-1);
    kvq_cuda_hqx_set_lean(-1);
    kvq_cuda_hqx_set_lean_pf(-1);
    kvq_cuda_hqx_set_lean_sc(-1);
    // the fused int8 product (hqx_fused.cu): several tokens per launch (11 > 8: two launches),
    // accumulating into y, against the CPU int8 reference token by token; one token (the
    // one-token kernel) gives the same bits as the first token of three (the batched kernel):
    // a decode step rounds like a prefill row
    enum { NT = 11 };
    float *Y1 = malloc(sizeof(float) * w->rows);
    float *X = malloc(sizeof(float) * w->cols * NT), *Y = malloc(sizeof(float) * w->rows * NT),
          *R = malloc(sizeof(float) * w->rows * NT);
    for (int64_t i = 0; i < w->cols * NT; i++) X[i] = (float)gauss(&seed);
    for (int k = 0; k < NT; k++) {
        kvq_hqx_prep(w, X + k * w->cols, &a);
        kvq_hqx_matmul(w, &a, 1, R + k * w->rows, w->rows, KVQ_HQX_INT8, KVQ_HQX_ISA_REF, 1);
    }
    // (2..8 tokens: by the persistent one-token kernel for all tokens at once where it takes the
    // tensor, E8/RTN with whole steps, every token then in one-token bits; and by the batched
    // kernel, kvq_cuda_hqx_set_tokens(0))
    // (E8 with whole steps: 2..8 tokens on tensor cores, hqx_mma.cu; runs 6 and 7 take the
    // one-token kernel's several-token loop instead, kvq_cuda_hqx_set_mma(0): the same bits)
    const int nts[] = {1, 3, NT, 8, 3, NT, 3, 8};
    float *Ym[2] = {malloc(sizeof(float) * w->rows * 8), malloc(sizeof(float) * w->rows * 8)};
    for (int q = 0; q < 8; q++) {
        const int nt = nts[q];
        kvq_cuda_hqx_set_tokens(q < 4 || q >= 6);
        kvq_cuda_hqx_set_mma(q < 6);
        void *dx = NULL, *dy = NULL;
        for (int64_t i = 0; i < w->rows * nt; i++) Y[i] = 1.0f;
        st = kvq_cuda_malloc(&dx, sizeof(float) * w->cols * nt, &err);
        if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * w->rows * nt, &err);
        if (!st) st = kvq_cuda_copy(dx, X, sizeof(float) * w->cols * nt, 1, &err);
        if (!st) st = kvq_cuda_copy(dy, Y, sizeof(float) * w->rows * nt, 1, &err);
        if (!st) st = kvq_cuda_hqx_matmul(t, dx, nt, dy, w->rows, 1, &err);
        if (!st) st = kvq_cuda_sync(&err);
        if (!st) st = kvq_cuda_copy(Y, dy, sizeof(float) * w->rows * nt, 0, &err);
        if (st) fprintf(stderr, "fused: %s\n", err.msg);
        assert_int_equal(st, KVQ_OK);
        double num = 0, den = 0;
        for (int64_t i = 0; i < w->rows * nt; i++) {
            double want = 1.0 + R[i];
            num += (Y[i] - want) * (Y[i] - want);
            den += (double)R[i] * R[i];
        }
        double rel = sqrt(num / (den > 0 ? den : 1));
        fprintf(stderr, "test_cuda_hqx: %-22s %s int8 x%-2d (+=) tile %4d: rel err %.2e\n", what,
                q < 4 ? "tokens" : q < 6 ? "fused " : "tokens/loop", nt, w->tile, rel);
        assert_true(rel <= 1e-5);
        if (nt == 1) memcpy(Y1, Y, sizeof(float) * w->rows);
        if (nt > 1) assert_memory_equal(Y1, Y, sizeof(float) * w->rows); // a decode step = a prefill row
        if (q == 1 || q == 3) memcpy(Ym[q == 3], Y, sizeof(float) * w->rows * nt);
        if (q >= 6) assert_memory_equal(Ym[q == 7], Y, sizeof(float) * w->rows * nt);
        if (q == 2 || q == 3) { // 11 and 8 tokens: each in its one-token bits (a batch of sequences = each alone)
            for (int k = 1; k < nt; k++) {
                float *yk = malloc(sizeof(float) * w->rows);
                for (int64_t i = 0; i < w->rows; i++) yk[i] = 1.0f;
                void *ex = NULL, *ey = NULL;
                st = kvq_cuda_malloc(&ex, sizeof(float) * w->cols, &err);
                if (!st) st = kvq_cuda_malloc(&ey, sizeof(float) * w->rows, &err);
                if (!st) st = kvq_cuda_copy(ex, X + k * w->cols, sizeof(float) * w->cols, 1, &err);
                if (!st) st = kvq_cuda_copy(ey, yk, sizeof(float) * w->rows, 1, &err);
                if (!st) st = kvq_cuda_hqx_matmul(t, ex, 1, ey, w->rows, 1, &err);
                if (!st) st = kvq_cuda_sync(&err);
                if (!st) st = kvq_cuda_copy(yk, ey, sizeof(float) * w->rows, 0, &err);
                assert_int_equal(st, KVQ_OK);
                assert_memory_equal(yk, Y + k * w->rows, sizeof(float) * w->rows);
                kvq_cuda_free(ex); kvq_cuda_free(ey); free(yk);
            }
        }
        kvq_cuda_free(dx);
        kvq_cuda_free(dy);
    }
    kvq_cuda_hqx_set_tokens(-1);
    kvq_cuda_hqx_set_mma(-1);
    free(X); free(Y); free(R); free(Y1); free(y1); free(Ym[0]); free(Ym[1]);
    compare_xin(t, w, &a, seed);
    compare_attend_prep(t, w, seed, what);
    compare_attend_inputs(t, w, seed + 1, what);
    compare_tc(t, w, &a, seed, what);
    kvq_cuda_hqx_free(t);
    kvq_hqx_free(w);
    free(x); free(yg); free(yc); free(buf);
}

static float *matrix(int64_t rows, int64_t cols, uint64_t seed) {
    float *x = malloc(sizeof(float) * rows * cols);
    for (int64_t r = 0; r < rows; r++) {
        double sc = r % 7 == 3 ? 0.0 : exp(gauss(&seed));
        for (int64_t c = 0; c < cols; c++) x[r * cols + c] = (float)(sc * (c % 97 == 5 ? 20 : 1) * gauss(&seed));
    }
    return x;
}

static void test_hyperquant(void **state) {
    (void)state;
    if (!have_gpu()) { skip(); return; }
    const struct { kvq_lattice l; double bps; int64_t rows, cols; int vbits; } cs[] = {
        {KVQ_LAT_E8, 4.0, 96, 512, 0},  {KVQ_LAT_E8, 3.0, 37, 300, 0}, {KVQ_LAT_E8, 4.0, 40, 1408, 4},
        {KVQ_LAT_E8, 5.0, 33, 768, 0},  {KVQ_LAT_E8, 4.0, 20, 256, 8}, {KVQ_LAT_D4, 4.0, 50, 1408, 0},
        {KVQ_LAT_A2, 4.0, 33, 256, 0},  {KVQ_LAT_Z, 5.0, 40, 384, 0},  {KVQ_LAT_E8, 4.0, 17, 4096, 7},
        {KVQ_LAT_E8, 4.0, 20, 2048, 0}, {KVQ_LAT_D4, 3.0, 20, 3000, 0}, {KVQ_LAT_E8, 4.0, 9, 1100, 0},
        {KVQ_LAT_E8, 4.0, 70, 2048, 0}, {KVQ_LAT_E8, 3.0, 33, 1024, 0}, {KVQ_LAT_E8, 4.0, 21, 3072, 6},
        {KVQ_LAT_D4, 4.0, 19, 1024, 8},  {KVQ_LAT_E8, 4.0, 24, 8192, 4}, {KVQ_LAT_E8, 4.0, 40, 4096, 5},
        {KVQ_LAT_E8, 4.0, 30, 4096, 4},  {KVQ_LAT_E8, 4.0, 12, 14336, 5},
    };
    // 0: the encoder's choice; cases 13-16 have whole steps of 1024 columns (E8 4.0 and 3.0
    // there take the one-token product's branch-free specialization); 8192 columns: nibbles with
    // ~1.3 % escapes (~100 a row, several per lane in the one-token product's escape loop)
    // (the last three: the 8B's rows of 4096 columns, whose lean instances know the row's steps at compile time, and of
    // 14336, the down rows, whose do not)
    const int max_tile[] = {0, 0, 0, 0, 0, 0, 0, 0, 256, 1024, 512, 64, 0, 0, 64, 256, 0, 128, 128, 128};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        float *x = matrix(cs[i].rows, cs[i].cols, 10 + i);
        kvq_hq_opts o = kvq_hq_opts_default(cs[i].l, cs[i].bps);
        if (max_tile[i]) o.max_tile = max_tile[i];
        kvq_codec_input in = {NULL, x, cs[i].rows, cs[i].cols, 20 + i, 0, NULL};
        kvq_encoded e;
        kvq_err err = {0};
        kvq_hq_header h;
        assert_int_equal(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err), KVQ_OK);
        assert_int_equal(kvq_hq_header_parse(e.params, cs[i].rows, cs[i].cols, &h, &err), KVQ_OK);
        kvq_blob_view v[KVQ_MAX_BLOBS];
        for (int k = 0; k < e.n_blob; k++) v[k] = (kvq_blob_view){e.blob[k].role, e.blob[k].data, e.blob[k].size};
        kvq_hqx w;
        assert_int_equal(kvq_hq_pack(&h, v, e.n_blob, cs[i].vbits, 0, &w, &err), KVQ_OK);
        char what[64];
        snprintf(what, sizeof what, "hyperquant %s %.1f", kvq_lattice_name(cs[i].l), cs[i].bps);
        compare(&w, 30 + i, what);
        kvq_encoded_free(&e);
        free(x);
    }
}

// A row-blocked HyperQuant tensor (hq_blocks.c: the embedding's and lm_head's form under
// --target-bpw): one layout with float tile scales (no scale codes), the widest block's width;
// the device's products against the CPU's, as every case above. Blocks at 2.5, 5.0, 3.5 and 4.0
// bits; 1024 columns (the one-token product's whole-step case, which then takes its generic path).
static void test_row_blocks(void **state) {
    (void)state;
    if (!have_gpu()) { skip(); return; }
    const int64_t rows = 200, cols = 1024, br = 64;
    const double bps[4] = {2.5, 5.0, 3.5, 4.0};
    float *x = matrix(rows, cols, 77);
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 3.0);
    kvq_codec_input in = {NULL, x, rows, cols, 5, 0, NULL};
    kvq_encoded e;
    kvq_err err = {0};
    assert_int_equal(kvq_hq_encode_blocks(&o, bps, 4, br, &in, &e, NULL, &err), KVQ_OK);
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int k = 0; k < e.n_blob; k++) v[k] = (kvq_blob_view){e.blob[k].role, e.blob[k].data, e.blob[k].size};
    kvq_hq_block *bk = malloc(sizeof *bk * KVQ_HQ_MAX_BLOCKS);
    int n = 0;
    assert_int_equal(kvq_hq_blocks_parse(e.params, rows, cols, v, e.n_blob, bk, &n, &err), KVQ_OK);
    kvq_hqx w;
    assert_int_equal(kvq_hq_pack_blocks(bk, n, 0, 0, &w, &err), KVQ_OK);
    assert_null(w.scode);
    compare(&w, 90, "hyperquant e8 row blocks");
    free(bk);
    kvq_encoded_free(&e);
    free(x);
}

static void test_rtn(void **state) {
    (void)state;
    if (!have_gpu()) { skip(); return; }
    const char *specs[] = {"4:g128", "3:g64", "5:g128", "7:g64", "2:g256"};
    for (int i = 0; i < 5; i++) {
        int64_t rows = 45, cols = i == 1 ? 300 : 1024;
        float *x = matrix(rows, cols, 50 + i);
        const kvq_codec_traits *c = kvq_codec_find("rtn");
        json_t *cfg = NULL;
        kvq_err err = {0};
        assert_int_equal(c->parse(specs[i], &cfg, &err), KVQ_OK);
        kvq_codec_input in = {NULL, x, rows, cols, 1, 0, NULL};
        kvq_encoded e;
        assert_int_equal(c->encode(cfg, &in, &e, &err), KVQ_OK);
        kvq_blob_view v[KVQ_MAX_BLOBS];
        for (int k = 0; k < e.n_blob; k++) v[k] = (kvq_blob_view){e.blob[k].role, e.blob[k].data, e.blob[k].size};
        kvq_hqx w;
        assert_int_equal(kvq_rtn_pack(e.params, v, e.n_blob, rows, cols, &w, &err), KVQ_OK);
        char what[64];
        snprintf(what, sizeof what, "rtn %s", specs[i]);
        compare(&w, 60 + i, what);
        kvq_encoded_free(&e);
        json_decref(cfg);
        free(x);
    }
}

// ---- the fold (kvq_cuda_hqx_set_fold, KVQ_CUDA_FOLD=1): the one-token product prepares its
// RMSNorm input itself (hqx_gemv1.cu FOLD, hqx_prep.cuh prep_fold) instead of after hqx_prep_i8h

// A packed tensor: HyperQuant (lat, bps, max_tile 0: the encoder's; vbits 0: its width) or, lat
// < 0, RTN 4-bit in groups of 128; seed: its sign seed (the rotation differs per seed, as q, k
// and v's do). e: the encoding, kept until w is freed.
static void fold_tensor(int lat, double bps, int64_t rows, int64_t cols, int max_tile, int vbits, uint64_t seed, kvq_hqx *w,
                        kvq_encoded *e, json_t **cfg) {
    float *x = matrix(rows, cols, seed);
    kvq_err err = {0};
    kvq_codec_input in = {NULL, x, rows, cols, seed, 0, NULL};
    kvq_blob_view v[KVQ_MAX_BLOBS];
    *cfg = NULL;
    if (lat < 0) {
        const kvq_codec_traits *c = kvq_codec_find("rtn");
        assert_int_equal(c->parse("4:g128", cfg, &err), KVQ_OK);
        assert_int_equal(c->encode(*cfg, &in, e, &err), KVQ_OK);
        for (int k = 0; k < e->n_blob; k++) v[k] = (kvq_blob_view){e->blob[k].role, e->blob[k].data, e->blob[k].size};
        assert_int_equal(kvq_rtn_pack(e->params, v, e->n_blob, rows, cols, w, &err), KVQ_OK);
    } else {
        kvq_hq_opts o = kvq_hq_opts_default((kvq_lattice)lat, bps);
        if (max_tile) o.max_tile = max_tile;
        kvq_hq_header h;
        assert_int_equal(kvq_hq_encode(&o, &in, e, NULL, NULL, &err), KVQ_OK);
        assert_int_equal(kvq_hq_header_parse(e->params, rows, cols, &h, &err), KVQ_OK);
        for (int k = 0; k < e->n_blob; k++) v[k] = (kvq_blob_view){e->blob[k].role, e->blob[k].data, e->blob[k].size};
        assert_int_equal(kvq_hq_pack(&h, v, e->n_blob, vbits, 0, w, &err), KVQ_OK);
    }
    free(x);
}

// One token through kvq_cuda_hqx_matmul_parts_in with an RMSNorm input: parts' rows one after
// another in y (row0: their first rows), acc: accumulated onto y's 1.0s; x one float past
// 16-byte alignment when off. Y (rows), G (the normalized row also written): the results.
static void fold_run(kvq_cuda_hqx **t, int n, const int64_t *row0, int64_t rows, int64_t cols, const float *X, const float *nw,
                     int acc, int off, float *Y, float *G) {
    void *dx = NULL, *dy = NULL, *dg = NULL, *dw = NULL;
    kvq_err err = {0};
    for (int64_t i = 0; i < rows; i++) Y[i] = 1.0f;
    kvq_status st = kvq_cuda_malloc(&dx, sizeof(float) * (cols + 4), &err);
    if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * rows, &err);
    if (!st) st = kvq_cuda_malloc(&dg, sizeof(float) * cols, &err);
    if (!st) st = kvq_cuda_malloc(&dw, sizeof(float) * cols, &err);
    float *xo = (float *)dx + off;
    if (!st) st = kvq_cuda_copy(xo, X, sizeof(float) * cols, 1, &err);
    if (!st) st = kvq_cuda_copy(dw, nw, sizeof(float) * cols, 1, &err);
    if (!st) st = kvq_cuda_copy(dy, Y, sizeof(float) * rows, 1, &err);
    const kvq_cuda_xin in = {KVQ_CUDA_XIN_RMSNORM, dw, 1e-5f, dg};
    if (!st) st = kvq_cuda_hqx_matmul_parts_in(t, n, row0, xo, &in, 1, dy, rows, acc, &err);
    if (!st) st = kvq_cuda_sync(&err);
    if (!st) st = kvq_cuda_copy(Y, dy, sizeof(float) * rows, 0, &err);
    if (!st) st = kvq_cuda_copy(G, dg, sizeof(float) * cols, 0, &err);
    if (st) fprintf(stderr, "fold: %s\n", err.msg);
    assert_int_equal(st, KVQ_OK);
    kvq_cuda_free(dx); kvq_cuda_free(dy); kvq_cuda_free(dg); kvq_cuda_free(dw);
}

// The fold against the default path (hqx_prep_i8h as a programmatic dependent, then the
// product): the same bits, products and normalized rows, on q/k/v-like parts (three tensors,
// each with its own sign seed; of one width: one launch, or of two: two launches, the first
// writing the row) and gate/up-like pairs (RTN too) at tiles 64, 128, 256 and 1024..4096
// columns; accumulating and not; the whole grid (one block an SM, rows a warp or fewer) and
// grids capped at 3 and 7 blocks (a warp walking several rows, a block serving a part's rows
// among few). Each folded run is counted (kvq_cuda_hqx_fold_launches: the fold ran); a row
// one float past alignment is not folded, and still gives the same bits. The default path is
// checked against the CPU int8 reference on the normalized row (kvq_rmsnorm_ref: another sum
// order, so within 2e-3 as compare_xin) so that the comparison is with a right answer.
static void test_fold(void **state) {
    (void)state;
    if (!have_gpu()) { skip(); return; }
    const struct { int lat; double bps; int n; int64_t rows[3], cols; int max_tile, vbits[3]; } cs[] = {
        {KVQ_LAT_E8, 4.0, 3, {256, 64, 64}, 4096, 128, {4, 4, 4}},   // the 8B's q/k/v shape, narrowed
        {KVQ_LAT_E8, 4.0, 3, {128, 32, 32}, 4096, 128, {5, 5, 5}},   // and at the default width
        {KVQ_LAT_E8, 4.0, 3, {300, 70, 45}, 1024, 64, {0, 0, 0}},    // the encoder's widths
        {KVQ_LAT_E8, 4.0, 2, {90, 90}, 2048, 256, {4, 6, 0}},        // gate/up of two widths: two launches
        {KVQ_LAT_E8, 3.0, 3, {64, 32, 32}, 8192, 128, {4, 5, 4}},    // the widest row the fold takes
        {-1, 4.0, 2, {70, 70}, 1024, 0, {0, 0, 0}},                  // RTN 4:g128
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int n = cs[ci].n;
        const int64_t cols = cs[ci].cols;
        kvq_hqx w[3];
        kvq_encoded e[3];
        json_t *cfg[3];
        kvq_cuda_hqx *t[3] = {NULL, NULL, NULL};
        int64_t row0[3] = {0, 0, 0}, rows = 0;
        kvq_err err = {0};
        for (int p = 0; p < n; p++) {
            fold_tensor(cs[ci].lat, cs[ci].bps, cs[ci].rows[p], cols, cs[ci].max_tile, cs[ci].vbits[p], 100 + 10 * ci + p, &w[p],
                        &e[p], &cfg[p]);
            assert_int_equal(kvq_cuda_hqx_upload(&w[p], &t[p], &err), KVQ_OK);
            row0[p] = rows;
            rows += cs[ci].rows[p];
        }
        uint64_t seed = 7 + ci;
        float *X = malloc(sizeof(float) * cols), *nw = malloc(sizeof(float) * cols), *XT = malloc(sizeof(float) * cols);
        float *R = malloc(sizeof(float) * rows), *Y0 = malloc(sizeof(float) * rows), *Y = malloc(sizeof(float) * rows);
        float *G0 = malloc(sizeof(float) * cols), *G = malloc(sizeof(float) * cols);
        for (int64_t i = 0; i < cols; i++) X[i] = (float)(1.5 * gauss(&seed)), nw[i] = (float)(1.0 + 0.3 * gauss(&seed));
        kvq_rmsnorm_ref(XT, X, nw, (int)cols, 1e-5f);
        for (int p = 0; p < n; p++) {
            uint8_t *buf = aligned_alloc(64, kvq_hqx_act_bytes(&w[p]));
            kvq_hqx_act a;
            kvq_hqx_act_init(&w[p], buf, &a);
            kvq_hqx_prep(&w[p], XT, &a);
            kvq_hqx_matmul(&w[p], &a, 1, R + row0[p], cs[ci].rows[p], KVQ_HQX_INT8, KVQ_HQX_ISA_REF, 1);
            free(buf);
        }
        for (int acc = 0; acc < 2; acc++) {
            kvq_cuda_hqx_set_fold(0);
            fold_run(t, n, row0, rows, cols, X, nw, acc, 0, Y0, G0);
            for (int64_t i = 0; i < rows; i++) Y[i] = Y0[i] - (acc ? 1.0f : 0.0f);
            const double ry = rel_err(Y, R, (size_t)rows), rg = rel_err(G0, XT, (size_t)cols);
            assert_true(ry <= 2e-3 && rg <= 1e-6);
            const int folds[] = {1, 3, 7, 1, 1, 3, 1};
            for (int f = 0; f < 7; f++) {
                const int off = f == 3; // not 16-byte aligned: the preparation kernel
                kvq_cuda_hqx_set_fold(folds[f]);
                kvq_cuda_hqx_set_lean(f == 4 || f == 5 ? 0 : -1); // 4, 5: hqx_gemv1p_k where the lean kernel would run
                kvq_cuda_hqx_set_lean_pf(f == 1 || f == 2 ? f : -1); // 1, 2: each warp's first 1 or 2 rows prefetched
                kvq_cuda_hqx_set_lean_sc(f == 6 ? 0 : -1); // 6: the run-time step count where a compile-time one applies
                const long before = kvq_cuda_hqx_fold_launches();
                fold_run(t, n, row0, rows, cols, X, nw, acc, off, Y, G);
                const long ran = kvq_cuda_hqx_fold_launches() - before;
                fprintf(stderr, "test_cuda_hqx: fold case %zu (%d parts, %lld rows, %lld cols, tile %d)%s fold %d offset %d: "
                        "%ld folded launches, product rel %.2e vs CPU, same bits %s\n", ci, n, (long long)rows, (long long)cols,
                        w[0].tile, acc ? " +=" : "", folds[f], off, ran, ry,
                        !memcmp(Y, Y0, sizeof(float) * rows) && !memcmp(G, G0, sizeof(float) * cols) ? "yes" : "NO");
                if (off) assert_int_equal(ran, 0);
                else assert_true(ran >= 1);
                assert_memory_equal(Y, Y0, sizeof(float) * rows);
                assert_memory_equal(G, G0, sizeof(float) * cols);
            }
        }
        kvq_cuda_hqx_set_fold(-1);
        kvq_cuda_hqx_set_lean(-1);
        kvq_cuda_hqx_set_lean_pf(-1);
        kvq_cuda_hqx_set_lean_sc(-1);
        for (int p = 0; p < n; p++) {
            kvq_cuda_hqx_free(t[p]);
            kvq_hqx_free(&w[p]);
            kvq_encoded_free(&e[p]);
            if (cfg[p]) json_decref(cfg[p]);
        }
        free(X); free(nw); free(XT); free(R); free(Y0); free(Y); free(G0); free(G);
    }
}

// ---- escapes fetched during a row's steps (kvq_cuda_hqx_set_esc_pf, KVQ_CUDA_ESC_PF; hqx_gemv1.cu PF)

// w's escapes replaced by a chosen number a row: row r takes n[r % nn] (0, 1, 31, 32, 33, 63,
// 64, 65, 100, 130: the prefetched rounds of 32 and 64, one beyond, several more) at distinct
// ascending columns below cols, deltas ±(8..71). The stored values are unchanged, so the weights
// become v + delta there: another valid layout, the same for the CPU reference and the GPU.
// small: deltas the 16-bit form codes (kernels/cpu/hqx_esc16.h: [-8, 7] without 0, its limits
// -8 and 7 one time in four) but every 300th entry's, which is one of 8, -9, ±2047, ±100 (the
// form's big list).
static void esc_set_d(kvq_hqx *w, const int *n, int nn, uint64_t seed, int small) {
    uint32_t tot = 0;
    for (int64_t r = 0; r < w->rows; r++) tot += (uint32_t)(n[r % nn] < w->cols ? n[r % nn] : w->cols);
    free(w->esc_row);
    free(w->esc);
    w->esc_row = malloc(sizeof(uint32_t) * (w->rows + 1));
    w->esc = malloc(sizeof(uint32_t) * (tot ? tot : 1));
    uint8_t *used = calloc((size_t)w->cols, 1);
    uint32_t e = 0;
    for (int64_t r = 0; r < w->rows; r++) {
        const int64_t k = n[r % nn] < w->cols ? n[r % nn] : w->cols;
        memset(used, 0, (size_t)w->cols);
        for (int64_t i = 0; i < k; i++) { // k distinct columns
            int64_t c = (int64_t)(rng_next(&seed) % (uint64_t)w->cols);
            while (used[c]) c = (c + 1) % w->cols;
            used[c] = 1;
        }
        w->esc_row[r] = e;
        for (int64_t c = 0; c < w->cols; c++) {
            if (!used[c]) continue;
            const uint64_t u = rng_next(&seed);
            static const int32_t far[6] = {8, -9, 2047, -2047, 100, -100};
            int32_t d = (int32_t)(8 + u % 64) * (u & 64 ? -1 : 1);
            if (small) d = e % 300 == 150 ? far[(u >> 8) % 6] : (u >> 8) % 4 == 0 ? ((u >> 12) & 1 ? 7 : -8) : (int32_t)((u >> 16) % 15) - 8;
            if (small && !d) d = 7;
            w->esc[e++] = kvq_hqx_esc_pack((uint32_t)c, d);
        }
    }
    w->esc_row[w->rows] = e;
    w->n_esc = e;
    free(used);
}
static void esc_set(kvq_hqx *w, const int *n, int nn, uint64_t seed) { esc_set_d(w, n, nn, seed, 0); }

// One token's product through kvq_cuda_hqx_matvec_host (int8) with the escape prefetch pf and the
// persistent kernel's ring (persist 2) or the per-warp kernel (0).
static void esc_matvec(kvq_cuda_hqx *t, const float *x, float *y, int64_t rows, int pf, int persist) {
    kvq_err err = {0};
    kvq_cuda_hqx_set_esc_pf(pf);
    kvq_cuda_hqx_set_persist(persist);
    memset(y, 0xff, sizeof(float) * rows);
    const kvq_status st = kvq_cuda_hqx_matvec_host(t, x, y, 1, &err);
    if (st) fprintf(stderr, "esc matvec: %s\n", err.msg);
    assert_int_equal(st, KVQ_OK);
}

// nt tokens (rows of X) through kvq_cuda_hqx_matmul, the persistent kernel's several-token loop
// (tensor cores off), into Y (nt rows of rows).
static void esc_tokens(kvq_cuda_hqx *t, const float *X, float *Y, int64_t rows, int64_t cols, int nt, int pf) {
    kvq_err err = {0};
    void *dx = NULL, *dy = NULL;
    kvq_cuda_hqx_set_esc_pf(pf);
    kvq_cuda_hqx_set_tokens(1);
    kvq_cuda_hqx_set_mma(0);
    kvq_status st = kvq_cuda_malloc(&dx, sizeof(float) * cols * nt, &err);
    if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * rows * nt, &err);
    if (!st) st = kvq_cuda_copy(dx, X, sizeof(float) * cols * nt, 1, &err);
    if (!st) st = kvq_cuda_hqx_matmul(t, dx, nt, dy, rows, 0, &err);
    if (!st) st = kvq_cuda_sync(&err);
    if (!st) st = kvq_cuda_copy(Y, dy, sizeof(float) * rows * nt, 0, &err);
    if (st) fprintf(stderr, "esc tokens: %s\n", err.msg);
    assert_int_equal(st, KVQ_OK);
    kvq_cuda_free(dx);
    kvq_cuda_free(dy);
    kvq_cuda_hqx_set_tokens(-1);
    kvq_cuda_hqx_set_mma(-1);
}

// Width-4 layouts (E8 4.0 forced to nibbles, RTN 4:g128) with chosen escape counts a row, rows of
// 1, 2, 4 and 14 steps of 1024 columns: the persistent product with the prefetch (on, the
// default) and without give the same bits as each other and as the per-warp kernel (its own row
// end, untouched), one token and 8 (each token its one-token bits), folded (the RMSNorm input
// prepared in the product; rows up to 8192 columns, whole grid and 3 blocks: warps walking
// several rows) and not; the one-token product is within 1e-5 of the CPU int8 reference, and the
// escapes matter: against the reference without them most rows with escapes move by more than
// 1e-4 of their terms' magnitude Σ|W·x| (the GPU must match the reference within 1e-5 of it, row
// by row: a prefetch that took a wrong escape, or none, fails). One case has 6000 rows of one
// step, more than the persistent grid's warps (some walk two rows, the next row's first step in
// flight at a row's end).
static void test_esc_prefetch(void **state) {
    (void)state;
    if (!have_gpu()) { skip(); return; }
    static const int counts[] = {0, 1, 31, 32, 33, 63, 64, 65, 100, 130};
    const int nn = (int)(sizeof counts / sizeof counts[0]);
    const struct { int lat; int64_t rows, cols; } cs[] = {
        {KVQ_LAT_E8, 40, 1024}, {KVQ_LAT_E8, 30, 2048}, {KVQ_LAT_E8, 40, 4096}, {KVQ_LAT_E8, 20, 14336},
        {-1, 30, 1024},         {-1, 20, 2048},         {-1, 40, 4096},         {-1, 20, 14336},
        {KVQ_LAT_E8, 6000, 1024},
    };
    enum { NT = 8 };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int64_t rows = cs[ci].rows, cols = cs[ci].cols;
        kvq_hqx w;
        kvq_encoded e;
        json_t *cfg;
        kvq_err err = {0};
        fold_tensor(cs[ci].lat, 4.0, rows, cols, 128, 4, 300 + ci, &w, &e, &cfg);
        assert_int_equal(w.vbits, 4);
        esc_set(&w, counts, nn, 400 + ci);
        kvq_cuda_hqx *t = NULL;
        assert_int_equal(kvq_cuda_hqx_upload(&w, &t, &err), KVQ_OK);
        uint64_t seed = 500 + ci;
        float *X = malloc(sizeof(float) * cols * NT), *nw = malloc(sizeof(float) * cols);
        float *R = malloc(sizeof(float) * rows), *Rn = malloc(sizeof(float) * rows), *Y[4], *YT[2];
        for (int k = 0; k < 4; k++) Y[k] = malloc(sizeof(float) * rows);
        for (int k = 0; k < 2; k++) YT[k] = malloc(sizeof(float) * rows * NT);
        for (int64_t i = 0; i < cols * NT; i++) X[i] = (float)gauss(&seed);
        for (int64_t i = 0; i < cols; i++) nw[i] = (float)(1.0 + 0.3 * gauss(&seed));
        uint8_t *buf = aligned_alloc(64, kvq_hqx_act_bytes(&w));
        kvq_hqx_act a;
        kvq_hqx_act_init(&w, buf, &a);
        kvq_hqx_prep(&w, X, &a);
        kvq_hqx_matmul(&w, &a, 1, R, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_REF, 1);
        { // the reference without escapes
            uint32_t *er = w.esc_row;
            w.esc_row = calloc((size_t)rows + 1, sizeof(uint32_t));
            kvq_hqx_matmul(&w, &a, 1, Rn, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_REF, 1);
            free(w.esc_row);
            w.esc_row = er;
        }
        // one token: prefetch on, off; the per-warp kernel
        esc_matvec(t, X, Y[0], rows, 1, 2);
        esc_matvec(t, X, Y[1], rows, 0, 2);
        esc_matvec(t, X, Y[2], rows, 1, 0);
        esc_matvec(t, X, Y[3], rows, 2, 2); // the row end's loads batched (KVQ_CUDA_ESC_PF=2)
        // per row, against its terms' magnitude s = Σ|W·x| (zero rows: none): the float orders
        // differ by ~1e-7·s, one escape moves a row by ~1e-3·s or more
        int with = 0, moved = 0, bad = 0;
        float *wr = malloc(sizeof(float) * cols);
        for (int64_t r = 0; r < rows; r++) {
            kvq_hqx_row_f32(&w, r, wr);
            double sr = 0;
            for (int64_t j = 0; j < cols; j++) sr += fabs((double)wr[j] * X[j]);
            if (fabs((double)Y[0][r] - R[r]) > 1e-5 * sr) bad++;
            if (w.esc_row[r + 1] == w.esc_row[r] || sr == 0) continue;
            with++;
            moved += fabs((double)R[r] - Rn[r]) > 1e-4 * sr;
        }
        free(wr);
        const double rel = rel_err(Y[0], R, (size_t)rows);
        const int same = !memcmp(Y[0], Y[1], sizeof(float) * rows) && !memcmp(Y[0], Y[2], sizeof(float) * rows) && !memcmp(Y[0], Y[3], sizeof(float) * rows);
        fprintf(stderr, "test_cuda_hqx: esc case %zu (%s, %lld x %lld, %u escapes): one token rel %.2e vs CPU, %d rows off, "
                "%d of %d rows with escapes moved by them, prefetch on/off/batched/per-warp %s\n", ci, cs[ci].lat < 0 ? "rtn 4:g128" : "e8 4.0 w4",
                (long long)rows, (long long)cols, w.esc_row[rows], rel, bad, moved, with, same ? "same bits" : "DIFFER");
        assert_true(rel <= 1e-5);
        assert_int_equal(bad, 0);
        assert_true(with > 0 && moved * 2 > with);
        assert_memory_equal(Y[0], Y[1], sizeof(float) * rows);
        assert_memory_equal(Y[0], Y[2], sizeof(float) * rows);
        assert_memory_equal(Y[0], Y[3], sizeof(float) * rows);
        // NT tokens: on and off the same bits, each token its one-token bits (the one-token
        // product through the same entry point; token 0 within 1e-5 of the CPU)
        if (rows <= 1000) {
            kvq_cuda_hqx_set_persist(-1);
            esc_tokens(t, X, YT[0], rows, cols, NT, 1);
            esc_tokens(t, X, YT[1], rows, cols, NT, 0);
            assert_memory_equal(YT[0], YT[1], sizeof(float) * rows * NT);
            esc_tokens(t, X, YT[1], rows, cols, NT, 2);
            assert_memory_equal(YT[0], YT[1], sizeof(float) * rows * NT);
            for (int k = 0; k < NT; k++) {
                esc_tokens(t, X + k * cols, Y[1], rows, cols, 1, 1);
                if (k == 0) assert_true(rel_err(Y[1], R, (size_t)rows) <= 1e-5);
                assert_memory_equal(YT[0] + k * rows, Y[1], sizeof(float) * rows);
            }
            fprintf(stderr, "test_cuda_hqx: esc case %zu: %d tokens, prefetch on/off and one token each: same bits\n", ci, NT);
        }
        // the fold (RMSNorm input): prefetch on and off, whole grid and 3 blocks, against the
        // preparation kernel + product with the prefetch off
        if (rows <= 1000) {
            const int64_t row0 = 0;
            float *G0 = malloc(sizeof(float) * cols), *G = malloc(sizeof(float) * cols);
            kvq_cuda_hqx_set_persist(-1);
            kvq_cuda_hqx_set_fold(0);
            kvq_cuda_hqx_set_esc_pf(0);
            fold_run(&t, 1, &row0, rows, cols, X, nw, 0, 0, Y[2], G0);
            long ran = 0;
            const int folds[] = {1, 3};
            for (int f = 0; f < 6; f++) {
                kvq_cuda_hqx_set_fold(folds[f / 3]);
                kvq_cuda_hqx_set_esc_pf(f % 3);
                const long before = kvq_cuda_hqx_fold_launches();
                fold_run(&t, 1, &row0, rows, cols, X, nw, 0, 0, Y[0], G);
                ran += kvq_cuda_hqx_fold_launches() - before;
                assert_memory_equal(Y[0], Y[2], sizeof(float) * rows);
                assert_memory_equal(G, G0, sizeof(float) * cols);
            }
            fprintf(stderr, "test_cuda_hqx: esc case %zu: RMSNorm input, %ld of 6 runs folded, prefetch off/on/batched: same bits\n", ci, ran);
            if (cols <= 8192) assert_int_equal(ran, 6); // the fold takes rows up to 8192 columns
            kvq_cuda_hqx_set_fold(-1);
            free(G0); free(G);
        }
        kvq_cuda_hqx_set_esc_pf(-1);
        kvq_cuda_hqx_set_persist(-1);
        kvq_cuda_hqx_free(t);
        kvq_hqx_free(&w);
        kvq_encoded_free(&e);
        if (cfg) json_decref(cfg);
        free(X); free(nw); free(R); free(Rn); free(buf);
        for (int k = 0; k < 4; k++) free(Y[k]);
        for (int k = 0; k < 2; k++) free(YT[k]);
    }
}

// ---- escapes in 16 bits on the device (kvq_cuda_hqx_set_esc16, KVQ_CUDA_ESC16; kernels/cpu/hqx_esc16.h)

enum { E16_X = 40 }; // tokens of X

// Product k (0, 1, ...) of t, one that reads escapes, into out: the floats written, 0 when it
// does not apply, -1 past the last; *name: which. X: E16_X rows of cols; nw: RMSNorm weights.
static long esc16_run(int k, kvq_cuda_hqx *t, const kvq_hqx *w, const float *X, const float *nw, float *out, const char **name) {
    const int64_t rows = w->rows, cols = w->cols, cp = w->cols_p;
    kvq_err err = {0};
    kvq_status st = KVQ_OK;
    static const struct { int persist, pf, general; const char *name; } one[] = {
        {2, 0, 0, "float"},                       // (k 0: the float product, hqx_matvec.cu)
        {2, 0, 0, "one token"},                   {2, 1, 0, "one token, prefetch"},
        {2, 2, 0, "one token, batched row end"},  {3, 1, 0, "one token, ring 3, prefetch"},
        {0, 0, 0, "one token, per-warp kernel"},  {2, 0, 1, "one token, run-time variant"},
    };
    const int n1 = (int)(sizeof one / sizeof one[0]);
    if (k < n1) {
        *name = one[k].name;
        kvq_cuda_hqx_set_persist(one[k].persist);
        kvq_cuda_hqx_set_esc_pf(one[k].pf);
        kvq_cuda_hqx_set_decode_general(one[k].general);
        memset(out, 0xff, sizeof(float) * rows);
        st = kvq_cuda_hqx_matvec_host(t, X, out, k > 0, &err);
        kvq_cuda_hqx_set_persist(-1);
        kvq_cuda_hqx_set_esc_pf(-1);
        kvq_cuda_hqx_set_decode_general(0);
        if (st) fprintf(stderr, "esc16 %s: %s\n", *name, err.msg);
        assert_int_equal(st, KVQ_OK);
        return (long)rows;
    }
    k -= n1;
    static const struct { int nt, tokens, mma, pf; const char *name; } many[] = {
        {3, 1, 1, 0, "3 tokens, tensor cores"},        {8, 1, 1, 0, "8 tokens, tensor cores"},
        {3, 1, 0, 0, "3 tokens, persistent loop"},     {8, 1, 0, 1, "8 tokens, persistent loop, prefetch"},
        {8, 1, 0, 2, "8 tokens, persistent loop, batched row end"},
        {3, 0, 0, 0, "3 tokens, batched kernel"},      {11, 1, 1, 0, "11 tokens"},
    };
    const int n2 = (int)(sizeof many / sizeof many[0]);
    if (k < n2) {
        const int nt = many[k].nt;
        void *dx = NULL, *dy = NULL;
        *name = many[k].name;
        kvq_cuda_hqx_set_tokens(many[k].tokens);
        kvq_cuda_hqx_set_mma(many[k].mma);
        kvq_cuda_hqx_set_esc_pf(many[k].pf);
        st = kvq_cuda_malloc(&dx, sizeof(float) * cols * nt, &err);
        if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * rows * nt, &err);
        if (!st) st = kvq_cuda_copy(dx, X, sizeof(float) * cols * nt, 1, &err);
        if (!st) st = kvq_cuda_hqx_matmul(t, dx, nt, dy, rows, 0, &err);
        if (!st) st = kvq_cuda_sync(&err);
        if (!st) st = kvq_cuda_copy(out, dy, sizeof(float) * rows * nt, 0, &err);
        kvq_cuda_hqx_set_tokens(-1);
        kvq_cuda_hqx_set_mma(-1);
        kvq_cuda_hqx_set_esc_pf(-1);
        kvq_cuda_free(dx);
        kvq_cuda_free(dy);
        if (st) fprintf(stderr, "esc16 %s: %s\n", *name, err.msg);
        assert_int_equal(st, KVQ_OK);
        return (long)(rows * nt);
    }
    k -= n2;
    if (k < 3) { // an RMSNorm input: folded (prefetch off, on; 3 blocks, batched row end) where the fold takes t
        static const char *fn[3] = {"RMSNorm input, fold", "RMSNorm input, fold, prefetch", "RMSNorm input, fold of 3 blocks"};
        const int64_t row0 = 0;
        *name = fn[k];
        kvq_cuda_hqx_set_fold(k == 2 ? 3 : 1);
        kvq_cuda_hqx_set_esc_pf(k);
        fold_run(&t, 1, &row0, rows, cols, X, nw, 0, 0, out, out + rows);
        kvq_cuda_hqx_set_fold(-1);
        kvq_cuda_hqx_set_esc_pf(-1);
        return (long)(rows + cols);
    }
    k -= 3;
    if (k < 2) { // the tensor-core path's decoded rows, fp32 then bf16
        void *dw = NULL;
        *name = k ? "decoded rows (bf16)" : "decoded rows (fp32)";
        const size_t b = (k ? 2 : 4) * (size_t)(rows * cp);
        st = kvq_cuda_malloc(&dw, b, &err);
        if (!st) st = kvq_cuda_hqx_decode_rot(t, 0, rows, dw, k, &err);
        if (!st) st = kvq_cuda_sync(&err);
        if (!st) st = kvq_cuda_copy(out, dw, b, 0, &err);
        kvq_cuda_free(dw);
        if (st) fprintf(stderr, "esc16 %s: %s\n", *name, err.msg);
        assert_int_equal(st, KVQ_OK);
        return (long)(b / 4);
    }
    k -= 2;
    if (k == 0) { // the tensor-core product of E16_X tokens (cuBLAS)
        *name = "tensor-core product";
        if (!kvq_cuda_tc_available(NULL, 0)) return 0;
        void *dx = NULL, *dy = NULL;
        const int64_t r0 = 0;
        st = kvq_cuda_malloc(&dx, sizeof(float) * cols * E16_X, &err);
        if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * rows * E16_X, &err);
        if (!st) st = kvq_cuda_copy(dx, X, sizeof(float) * cols * E16_X, 1, &err);
        if (!st) st = kvq_cuda_hqx_matmul_tc(&t, 1, &r0, dx, E16_X, dy, rows, 0, &err);
        if (!st) st = kvq_cuda_sync(&err);
        if (!st) st = kvq_cuda_copy(out, dy, sizeof(float) * rows * E16_X, 0, &err);
        kvq_cuda_free(dx);
        kvq_cuda_free(dy);
        if (st) fprintf(stderr, "esc16 %s: %s\n", *name, err.msg);
        assert_int_equal(st, KVQ_OK);
        return (long)(rows * E16_X);
    }
    return -1;
}

// The 16-bit escapes (KVQ_CUDA_ESC16=1; default off since session 20) against the packer's 32-bit ones (kvq_cuda_hqx_set_esc16(0)):
// the same tensor uploaded both ways gives the same bits in every product that reads escapes
// (esc16_run: float; one token through the persistent kernel with rings 2 and 3 and each
// escape mode, the per-warp kernel, the run-time variant; 3, 8 and 11 tokens on tensor cores,
// in the persistent kernel's loop and in the batched kernel; the fold; the tensor-core path's
// decoded rows and product), at width 4 (E8 4.0's own escapes; chosen ones on E8 and RTN
// 4:g128) and 5 (chosen ones), rows of 1024 to 14336 columns (1 to 4 segments of 4096).
// Chosen escapes (esc_set_d small): 0 to 300 a row, deltas at the code's limits and every
// 300th beyond it (the big list, searched on the device). The 16-bit form is taken
// (kvq_cuda_hqx_esc16) and holds the bytes kvq_hqx_gpu_bytes computes on the host, fewer than the
// 32-bit form's (which also holds its kvq_hqx_gpu_bytes); the one-token product is within 1e-5
// of the CPU int8 reference, and the escapes matter there (without them the reference moves by
// more than 1e-4).
static void test_esc16(void **state) {
    (void)state;
    if (!have_gpu()) { skip(); return; }
    static const int counts[] = {0, 1, 31, 32, 33, 64, 65, 130, 300, 2};
    const struct { int lat; int64_t rows, cols; int vbits, chosen; } cs[] = {
        {KVQ_LAT_E8, 40, 4096, 4, 0},  {KVQ_LAT_E8, 24, 14336, 4, 0}, {KVQ_LAT_E8, 30, 1408, 4, 0},
        {KVQ_LAT_E8, 20, 14336, 4, 1}, {KVQ_LAT_E8, 20, 14336, 5, 1}, {KVQ_LAT_E8, 30, 4096, 5, 1},
        {KVQ_LAT_E8, 30, 8192, 4, 1},  {-1, 20, 14336, 0, 1},         {-1, 30, 2048, 0, 1},
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int64_t rows = cs[ci].rows, cols = cs[ci].cols;
        kvq_hqx w;
        kvq_encoded e;
        json_t *cfg;
        kvq_err err = {0};
        fold_tensor(cs[ci].lat, 4.0, rows, cols, 128, cs[ci].vbits, 700 + ci, &w, &e, &cfg);
        if (cs[ci].vbits) assert_int_equal(w.vbits, cs[ci].vbits);
        if (cs[ci].chosen) esc_set_d(&w, counts, (int)(sizeof counts / sizeof counts[0]), 800 + ci, 1);
        kvq_hqx_esc16 x;
        assert_int_equal(kvq_hqx_esc16_build(&w, &x, &err), KVQ_OK);
        kvq_cuda_hqx *t[2] = {NULL, NULL}; // 32-bit, 16-bit
        for (int f = 0; f < 2; f++) {
            kvq_cuda_hqx_set_esc16(f);
            const kvq_status st = kvq_cuda_hqx_upload(&w, &t[f], &err);
            if (st) fprintf(stderr, "esc16 upload: %s\n", err.msg);
            assert_int_equal(st, KVQ_OK);
            assert_int_equal(kvq_cuda_hqx_esc16(t[f]), f);
        }
        kvq_cuda_hqx *t2 = NULL; // mode 2: 16 bits only where a row is one segment (no segment starts)
        kvq_cuda_hqx_set_esc16(2);
        assert_int_equal(kvq_cuda_hqx_upload(&w, &t2, &err), KVQ_OK);
        assert_int_equal(kvq_cuda_hqx_esc16(t2), w.cols_p <= KVQ_HQX_ESC16_SEG);
        assert_int_equal(kvq_cuda_hqx_bytes(t2), kvq_cuda_hqx_bytes(t[w.cols_p <= KVQ_HQX_ESC16_SEG]));
        kvq_cuda_hqx_free(t2);
        kvq_cuda_hqx_set_esc16(-1);
        assert_int_equal(x.used, 1);
        if (cs[ci].chosen) assert_true(x.n_big > 0);
        const size_t b32 = kvq_cuda_hqx_bytes(t[0]), b16 = kvq_cuda_hqx_bytes(t[1]);
        assert_int_equal(b32, kvq_hqx_gpu_bytes(&w, NULL));
        assert_int_equal(b16, kvq_hqx_gpu_bytes(&w, &x));
        assert_true(b16 < b32);
        uint64_t seed = 900 + ci;
        float *X = malloc(sizeof(float) * cols * E16_X), *nw = malloc(sizeof(float) * cols);
        for (int64_t i = 0; i < cols * E16_X; i++) X[i] = (float)gauss(&seed);
        for (int64_t i = 0; i < cols; i++) nw[i] = (float)(1.0 + 0.3 * gauss(&seed));
        const size_t nout = (size_t)(rows * w.cols_p + rows * E16_X + cols);
        float *o[2] = {malloc(sizeof(float) * nout), malloc(sizeof(float) * nout)};
        // the one-token product against the CPU int8 reference, with and without the escapes
        float *R = malloc(sizeof(float) * rows), *Rn = malloc(sizeof(float) * rows);
        uint8_t *buf = aligned_alloc(64, kvq_hqx_act_bytes(&w));
        kvq_hqx_act a;
        kvq_hqx_act_init(&w, buf, &a);
        kvq_hqx_prep(&w, X, &a);
        kvq_hqx_matmul(&w, &a, 1, R, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_REF, 1);
        uint32_t *er = w.esc_row;
        w.esc_row = calloc((size_t)rows + 1, sizeof(uint32_t));
        kvq_hqx_matmul(&w, &a, 1, Rn, rows, KVQ_HQX_INT8, KVQ_HQX_ISA_REF, 1);
        free(w.esc_row);
        w.esc_row = er;
        const char *name = NULL;
        assert_true(esc16_run(1, t[1], &w, X, nw, o[1], &name) == rows);
        const double rel = rel_err(o[1], R, (size_t)rows), moved = rel_err(Rn, R, (size_t)rows);
        int same = 0, ran = 0;
        for (int k = 0;; k++) {
            const long n0 = esc16_run(k, t[0], &w, X, nw, o[0], &name);
            if (n0 < 0) break;
            const long n1 = esc16_run(k, t[1], &w, X, nw, o[1], &name);
            assert_true(n0 == n1);
            if (!n0) continue;
            ran++;
            const int eq = !memcmp(o[0], o[1], sizeof(float) * (size_t)n0);
            same += eq;
            if (!eq) fprintf(stderr, "test_cuda_hqx: esc16 case %zu: %s: the forms DIFFER\n", ci, name);
        }
        fprintf(stderr, "test_cuda_hqx: esc16 case %zu (%s w%d, %lld x %lld, %s escapes: %u, %lld big): device bytes %zu -> %zu "
                "(%.3f -> %.3f bits/w); one token rel %.2e vs CPU (escapes move it %.2e); %d of %d products same bits\n",
                ci, cs[ci].lat < 0 ? "rtn 4:g128" : "e8 4.0", w.vbits, (long long)rows, (long long)cols,
                cs[ci].chosen ? "chosen" : "packer's", w.esc_row[rows], (long long)x.n_big, b32, b16,
                8.0 * (double)b32 / (double)(rows * cols), 8.0 * (double)b16 / (double)(rows * cols), rel, moved, same, ran);
        assert_true(rel <= 1e-5);
        assert_true(moved > 1e-4);
        assert_true(ran >= 16);
        assert_int_equal(same, ran);
        kvq_hqx_esc16_free(&x);
        for (int f = 0; f < 2; f++) kvq_cuda_hqx_free(t[f]), free(o[f]);
        kvq_hqx_free(&w);
        kvq_encoded_free(&e);
        if (cfg) json_decref(cfg);
        free(X); free(nw); free(R); free(Rn); free(buf);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_hyperquant), cmocka_unit_test(test_rtn),
                                        cmocka_unit_test(test_row_blocks), cmocka_unit_test(test_fold),
                                        cmocka_unit_test(test_esc_prefetch), cmocka_unit_test(test_esc16)};
    // KVQ_TEST_FILTER="test_fold": only the tests matching the pattern (as test_cuda_model), for a short device call
    const char *f = getenv("KVQ_TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
