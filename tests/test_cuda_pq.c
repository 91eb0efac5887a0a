// GPU products from the PQ execution layout (kernels/cuda/pqx.cu) against the CPU reference
// kernels (kernels/cpu/pq.c, qetx.c, plain reference path) on seeded random layouts: PQ with 1
// and 2 stages, every codebook type (bf16, f16, f32, CQO), uint8 / uint16 / lane-packed indices
// (one word and, built here, two words a group with straddling fields), padded rows; QET
// (3-level swap trees) with bf16, f32 and CQO codebooks of 7..24 bits, 4/8/16-bit indices, under
// the four QET kernels (expanded codebooks, the default; KVQ_CUDA_QET=smem, shared-memory
// tables; KVQ_CUDA_QET=smem2, the same bits by another kernel, also compared with smem bit for
// bit; KVQ_CUDA_QET=decode); for
// 1, 3, 8 and 13 tokens (two batches), and several blocks accumulating into one output. Then
// small models converted with pq:4 and qet:4 on the GPU backend against the CPU backend.
// Skips (saying why) without a GPU.
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

#include "kernels/cpu/hqx.h"
#include "kernels/cpu/pq.h"
#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/pqx.h"
#include "libconv/convert/convert.h"
#include "libconv/runtime/backend.h"
#include "libconv/runtime/model.h"
#include "tests/pqx_rand.h"
#include "tests/testrng.h"

#define TINY "tests/models/kvq-tiny-llama"

static int have_gpu(void) {
    char why[256] = "";
    if (kvq_cuda_device_count(why, sizeof why) > 0) return 1;
    printf("  test_cuda_pq: skipped: %s\n", why);
    return 0;
}

// Stage s of p re-laid lane-packed over two 32-bit words a row and group (fields of b bits may
// straddle the two words): a layout kvq_pqx_pack_lanes does not build today but the readers
// (kvq_pqx_idx, and the GPU's generic path) take.
static void pack_two_words(kvq_pqx *p, int s) {
    int b = 0;
    while (((int64_t)1 << b) < p->k[s]) b++;
    if (b == 0) b = 1;
    const int per = 64 / b;
    const int64_t G = (p->m + per - 1) / per;
    uint32_t *q = kvq_hqx_alloc((size_t)(p->rows_p * G) * 2 * 4);
    memset(q, 0, (size_t)(p->rows_p * G) * 2 * 4);
    kvq_pqx t = *p;
    t.pbits[s] = b, t.pper[s] = per, t.pwords[s] = 2, t.pgroups[s] = G, t.idx[s] = q;
    for (int64_t r = 0; r < p->rows_p; r++)
        for (int64_t j = 0; j < p->m; j++) {
            const uint64_t a = kvq_pqx_idx(p, s, r, j);
            const int64_t g = j / per;
            const int o = (int)(j - g * per) * b;
            uint32_t *d = q + kvq_pqx_pk_at(&t, s, r, g) + (o >> 5) * KVQ_PQX_RB;
            d[0] |= (uint32_t)(a << (o & 31));
            if ((o & 31) + b > 32) d[KVQ_PQX_RB] |= (uint32_t)(a >> (32 - (o & 31)));
        }
    kvq_hqx_dealloc(p->idx[s]);
    *p = t;
}

// ---- the GPU product against the CPU reference

// Per row and token: |gpu − cpu| <= 2·γ_N·mag (pqx_row_mag, pqx_gamma: each path's float sum of
// the same terms is within γ_N·mag of the exact value). A wrong index or codebook value moves a
// row by ~|c·x|, far beyond the bound. The host's emulation of the kernels (pqx_emulate) gives
// the bits the device should: how many outputs differ from it is printed (0 expected).
// One layout: products of 1, 3, 8 and 13 tokens on the GPU against the CPU reference; then the
// layout twice as two blocks of one output (row stride 2·rows) accumulated onto random values.
static void check_layout(const kvq_pqx *p, const char *what, uint64_t *seed) {
    enum { TMAX = 13 };
    const int64_t rows = p->rows, cols = p->cols;
    float *x = randvec(TMAX * cols, seed), *yc = malloc(sizeof(float) * (size_t)(TMAX * rows));
    float *yg = malloc(sizeof(float) * (size_t)(TMAX * rows)), *wrow = malloc(sizeof(float) * (size_t)cols);
    float *sc = malloc(sizeof(float) * kvq_pqx_scratch(p, 1));
    const int row0 = 0;
    kvq_pqx_matmul(p, 1, &row0, x, TMAX, yc, rows, sc, KVQ_PQX_ISA_REF, 1);
    kvq_cuda_pqx *t = NULL;
    kvq_err err = {0};
    if (kvq_cuda_pqx_upload(p, &t, &err)) fail_msg("%s: upload: %s", what, err.msg);
    // device bytes: the host layout's arrays (QET: + 16 bytes of codebook padding a stage and
    // the switch fields' 8); never a dense copy
    const size_t hb = kvq_pqx_bytes(p), db = kvq_cuda_pqx_bytes(t);
    assert_true(db >= hb && db <= hb + 64);
    const double gam = pqx_gamma(p);
    float *ye = malloc(sizeof(float) * (size_t)(TMAX * rows));
    long n_bits_differ = 0;
    const int toks[] = {1, 3, 8, TMAX};
    double worst = 0, nmse_worst = 0;
    for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
        const int T = toks[ti];
        memset(yg, 0xff, sizeof(float) * (size_t)(T * rows));
        if (kvq_cuda_pqx_matmul_host(t, x, T, yg, &err)) fail_msg("%s: %d tokens: %s", what, T, err.msg);
        pqx_emulate_k(p, x, T, kvq_cuda_pqx_batch(t), kvq_cuda_pqx_qet_kernel(t), ye);
        for (int64_t o = 0; o < T * rows; o++) n_bits_differ += memcmp(&ye[o], &yg[o], sizeof(float)) != 0;
        double num = 0, den = 0;
        for (int tk = 0; tk < T; tk++)
            for (int64_t r = 0; r < rows; r++) {
                const double mag = pqx_row_mag(p, r, x + tk * cols, wrow);
                const double g = yg[tk * rows + r], c = yc[tk * rows + r], d = fabs(g - c);
                num += d * d;
                den += c * c;
                if (mag > 0 && d / mag > worst) worst = d / mag;
                if (!(d <= 2 * gam * mag))
                    fail_msg("%s: %d tokens, token %d row %lld: gpu %.9g cpu %.9g (|diff| %.3g > bound %.3g)", what, T, tk,
                             (long long)r, g, c, d, 2 * gam * mag);
            }
        const double nmse = den > 0 ? num / den : num;
        if (nmse > nmse_worst) nmse_worst = nmse;
        assert_true(nmse <= 1e-10);
    }
    // two blocks (a fused q/k/v-like output), accumulate onto y0, 3 tokens
    {
        const int T = 3;
        kvq_cuda_pqx *two[2] = {t, t};
        const int64_t r0[2] = {0, rows};
        float *y0 = randvec(T * 2 * rows, seed), *y2 = malloc(sizeof(float) * (size_t)(T * 2 * rows));
        void *dx = NULL, *dy = NULL, *ds = NULL;
        kvq_status st = kvq_cuda_malloc(&dx, sizeof(float) * (size_t)(T * cols), &err);
        if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * (size_t)(T * 2 * rows), &err);
        if (!st && kvq_cuda_pqx_scratch_bytes(t)) st = kvq_cuda_malloc(&ds, kvq_cuda_pqx_scratch_bytes(t), &err);
        if (!st) st = kvq_cuda_copy(dx, x, sizeof(float) * (size_t)(T * cols), 1, &err);
        if (!st) st = kvq_cuda_copy(dy, y0, sizeof(float) * (size_t)(T * 2 * rows), 1, &err);
        if (!st) st = kvq_cuda_pqx_matmul(two, 2, r0, dx, T, dy, 2 * rows, 1, ds, &err);
        if (!st) st = kvq_cuda_sync(&err);
        if (!st) st = kvq_cuda_copy(y2, dy, sizeof(float) * (size_t)(T * 2 * rows), 0, &err);
        if (st) fail_msg("%s: two blocks: %s", what, err.msg);
        if (kvq_cuda_pqx_matmul_host(t, x, T, yg, &err)) fail_msg("%s: %s", what, err.msg);
        for (int tk = 0; tk < T; tk++)
            for (int b = 0; b < 2; b++)
                for (int64_t r = 0; r < rows; r++) {
                    const float want = y0[tk * 2 * rows + b * rows + r] + yg[tk * rows + r]; // the kernel's one add
                    assert_memory_equal(&y2[tk * 2 * rows + b * rows + r], &want, sizeof(float));
                }
        kvq_cuda_free(dx); kvq_cuda_free(dy); kvq_cuda_free(ds);
        free(y0); free(y2);
    }
    printf("  %-40s %4lld x %-4lld GPU %8zu B (host %8zu B, scratch %8zu B), batch %d: max |gpu-cpu|/Σ|c·x| %.2g (bound %.2g), NMSE %.2g, "
           "%ld outputs not the emulation's bits\n", what, (long long)rows, (long long)cols, db, hb, kvq_cuda_pqx_scratch_bytes(t),
           kvq_cuda_pqx_batch(t), worst,
           2 * gam, nmse_worst, n_bits_differ);
    free(ye);
    kvq_cuda_pqx_free(t);
    free(x); free(yc); free(yg); free(wrow); free(sc);
}

typedef struct {
    int64_t rows, cols;
    int w, stages, cb_type;
    int64_t k[2];
} shape;

static const shape shapes[] = {
    // uint8 / uint16 indices, padded rows (37, 61, 17, 45, 33), one and two stages, w = 1..16
    {37, 64, 8, 1, KVQ_PQX_CB_BF16, {50, 0}},  {64, 128, 8, 1, KVQ_PQX_CB_BF16, {256, 0}},
    {24, 64, 8, 1, KVQ_PQX_CB_F32, {257, 0}},  {100, 96, 4, 2, KVQ_PQX_CB_BF16, {13, 300}},
    {8, 8, 8, 1, KVQ_PQX_CB_BF16, {1, 0}},     {61, 160, 16, 2, KVQ_PQX_CB_F32, {9, 7}},
    {17, 40, 1, 1, KVQ_PQX_CB_BF16, {3, 0}},   {256, 512, 8, 1, KVQ_PQX_CB_BF16, {100, 0}},
    {45, 96, 8, 2, KVQ_PQX_CB_CQO, {37, 11}},  {64, 64, 4, 1, KVQ_PQX_CB_CQO, {300, 0}},
    {40, 512, 8, 2, KVQ_PQX_CB_BF16, {1100, 600}}, {48, 512, 8, 1, KVQ_PQX_CB_BF16, {26, 0}},
    {24, 512, 8, 1, KVQ_PQX_CB_BF16, {1343, 0}}, {33, 184, 8, 2, KVQ_PQX_CB_CQO, {367, 20}},
    {40, 64, 4, 1, KVQ_PQX_CB_F16, {11, 0}},   {64, 256, 8, 2, KVQ_PQX_CB_F16, {300, 26}},
    {300, 1024, 8, 1, KVQ_PQX_CB_BF16, {1343, 0}},
};

static void test_pq_products(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    uint64_t s = 2024;
    int n_lane = 0, n_two = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *sh = &shapes[i];
        char what[96];
        for (int v = 0; v < 3; v++) { // as built; lane-packed (pack_lanes, wide); two-word groups
            kvq_pqx p;
            rand_pqx(&p, sh->rows, sh->cols, sh->w, sh->stages, sh->k, sh->cb_type, 0, &s);
            if (v == 1) {
                assert_int_equal(kvq_pqx_pack_lanes(&p, 1), 0);
                if (!p.pbits[0] && (p.stages < 2 || !p.pbits[1])) { kvq_pqx_free(&p); continue; }
                n_lane++;
            }
            if (v == 2) {
                pack_two_words(&p, 0);
                n_two++;
            }
            snprintf(what, sizeof what, "pq w%d r%d cb%d k%lld,%lld%s", sh->w, sh->stages, sh->cb_type, (long long)sh->k[0],
                     (long long)sh->k[1], v == 1 ? " lanes" : v == 2 ? " 2 words" : "");
            check_layout(&p, what, &s);
            kvq_pqx_free(&p);
        }
    }
    printf("  (%d lane-packed and %d two-word layouts among them)\n", n_lane, n_two);
    assert_true(n_lane >= 6 && n_two >= 6);
}

static const qshape qshapes[] = {
    {37, 64, 2, KVQ_PQX_CB_CQO, 10, {50, 12}},  {64, 128, 1, KVQ_PQX_CB_BF16, 0, {256, 0}},
    {24, 192, 2, KVQ_PQX_CB_F32, 0, {300, 16}}, {9, 64, 2, KVQ_PQX_CB_CQO, 24, {1, 17}},
    {128, 512, 2, KVQ_PQX_CB_CQO, 10, {15, 4}}, {70, 256, 2, KVQ_PQX_CB_CQO, 7, {122, 9}},
    {33, 128, 2, KVQ_PQX_CB_CQO, 13, {20, 3}},  {16, 64, 1, KVQ_PQX_CB_CQO, 16, {40, 0}},
    {130, 2048, 2, KVQ_PQX_CB_CQO, 10, {700, 64}}, {50, 4096, 1, KVQ_PQX_CB_CQO, 25, {3, 0}},
    // the remaining (stage 1, stage 2) index widths of the expanded kernel's instances: 8/8 (the 8B
    // q/o/down plan, k 256/49), 16/-, 8/16, 4/16, 16/16
    {48, 512, 2, KVQ_PQX_CB_CQO, 10, {256, 49}}, {40, 256, 1, KVQ_PQX_CB_CQO, 10, {400, 0}},
    {21, 128, 2, KVQ_PQX_CB_BF16, 0, {100, 300}}, {19, 64, 2, KVQ_PQX_CB_CQO, 12, {10, 260}},
    {26, 192, 2, KVQ_PQX_CB_F32, 0, {1074, 257}},
    // KVQ_CUDA_QET=smem: the 8B gate/up plan's k (1074/32: 141 KB of shared tables), and a layout
    // of 1100 rows and small tables that it splits into 3 row chunks (blocks of 367 rows)
    {600, 256, 2, KVQ_PQX_CB_CQO, 10, {1074, 32}}, {1100, 64, 1, KVQ_PQX_CB_BF16, 0, {20, 0}},
};

// Activations 4 bytes off a 16-byte boundary: the expanded kernel's 16-byte loads cannot take them,
// so the call falls back to the per-weight decode; the result is still the product (2 tokens, row
// stride cols + 1 floats: also not a multiple of 4).
static void check_misaligned(const kvq_pqx *p, const char *what, uint64_t *seed) {
    const int64_t rows = p->rows, cols = p->cols, ld = cols + 1;
    float *x = randvec(2 * ld + 1, seed), *xc = malloc(sizeof(float) * (size_t)(2 * cols));
    float *yc = malloc(sizeof(float) * (size_t)(2 * rows)), *yg = malloc(sizeof(float) * (size_t)(2 * rows));
    float *wrow = malloc(sizeof(float) * (size_t)cols), *sc = malloc(sizeof(float) * kvq_pqx_scratch(p, 1));
    for (int t = 0; t < 2; t++) memcpy(xc + t * cols, x + 1 + t * ld, sizeof(float) * (size_t)cols);
    const int row0 = 0;
    kvq_pqx_matmul(p, 1, &row0, xc, 2, yc, rows, sc, KVQ_PQX_ISA_REF, 1);
    kvq_cuda_pqx *t = NULL;
    kvq_err err = {0};
    void *dx = NULL, *dy = NULL, *ds = NULL;
    kvq_status st = kvq_cuda_pqx_upload(p, &t, &err);
    if (!st) st = kvq_cuda_malloc(&dx, sizeof(float) * (size_t)(2 * ld + 1), &err);
    if (!st) st = kvq_cuda_malloc(&dy, sizeof(float) * (size_t)(2 * rows), &err);
    if (!st && kvq_cuda_pqx_scratch_bytes(t)) st = kvq_cuda_malloc(&ds, kvq_cuda_pqx_scratch_bytes(t), &err);
    if (!st) st = kvq_cuda_copy(dx, x, sizeof(float) * (size_t)(2 * ld + 1), 1, &err);
    if (st) fail_msg("%s: misaligned: %s", what, err.msg);
    // two calls of one token each: kvq_cuda_pqx_matmul takes rows of cols floats, so token 1 is its own call
    const int64_t r0 = 0;
    for (int tk = 0; tk < 2 && !st; tk++)
        st = kvq_cuda_pqx_matmul(&t, 1, &r0, (const float *)dx + 1 + tk * ld, 1, (float *)dy + tk * rows, rows, 0, ds, &err);
    if (!st) st = kvq_cuda_sync(&err);
    if (!st) st = kvq_cuda_copy(yg, dy, sizeof(float) * (size_t)(2 * rows), 0, &err);
    if (st) fail_msg("%s: misaligned: %s", what, err.msg);
    const double gam = pqx_gamma(p);
    for (int tk = 0; tk < 2; tk++)
        for (int64_t r = 0; r < rows; r++) {
            const double mag = pqx_row_mag(p, r, xc + tk * cols, wrow), d = fabs((double)yg[tk * rows + r] - yc[tk * rows + r]);
            if (!(d <= 2 * gam * mag))
                fail_msg("%s: misaligned x, token %d row %lld: gpu %.9g cpu %.9g", what, tk, (long long)r, yg[tk * rows + r],
                         yc[tk * rows + r]);
        }
    printf("  %-40s activations 4 bytes off 16: within the bound (the per-weight kernel's fallback)\n", what);
    kvq_cuda_free(dx); kvq_cuda_free(dy); kvq_cuda_free(ds);
    kvq_cuda_pqx_free(t);
    free(x); free(xc); free(yc); free(yg); free(wrow); free(sc);
}

// The smem2 kernel (KVQ_CUDA_QET=smem2) against the smem kernel on the device, bit for bit: 1, 8 and
// 13 tokens (two batches), the same layout uploaded under each. @return 1 if smem2 ran.
static int compare_smem2(const kvq_pqx *p, const char *what, uint64_t *seed) {
    enum { TMAX = 13 };
    kvq_cuda_pqx *t[2] = {NULL, NULL};
    kvq_err err = {0};
    for (int v = 0; v < 2; v++) {
        setenv("KVQ_CUDA_QET", v ? "smem2" : "smem", 1);
        if (kvq_cuda_pqx_upload(p, &t[v], &err)) fail_msg("%s: upload: %s", what, err.msg);
    }
    const int ran = kvq_cuda_pqx_qet_kernel(t[1]) == 3;
    float *x = randvec(TMAX * p->cols, seed), *y[2];
    for (int v = 0; v < 2; v++) y[v] = malloc(sizeof(float) * (size_t)(TMAX * p->rows));
    long differ = 0;
    const int toks[] = {1, 8, TMAX};
    for (int ti = 0; ti < 3; ti++) {
        for (int v = 0; v < 2; v++) {
            memset(y[v], 0xff, sizeof(float) * (size_t)(toks[ti] * p->rows));
            if (kvq_cuda_pqx_matmul_host(t[v], x, toks[ti], y[v], &err)) fail_msg("%s: %s", what, err.msg);
        }
        for (int64_t o = 0; o < toks[ti] * p->rows; o++) differ += memcmp(&y[0][o], &y[1][o], sizeof(float)) != 0;
    }
    printf("  %-40s smem2 (kernel %d) against smem (kernel %d), 1/8/13 tokens: %ld outputs differ\n", what,
           kvq_cuda_pqx_qet_kernel(t[1]), kvq_cuda_pqx_qet_kernel(t[0]), differ);
    assert_int_equal(differ, 0);
    for (int v = 0; v < 2; v++) { kvq_cuda_pqx_free(t[v]); free(y[v]); }
    free(x);
    unsetenv("KVQ_CUDA_QET");
    return ran;
}

// Every QET layout under the four kernels: the shared-memory tables (the default: KVQ_CUDA_QET
// unset, or =smem for every other layout; layouts it does not hold run the expanded kernel: f32
// codebooks, CQO codes over 16 bits), their second form (KVQ_CUDA_QET=smem2; also compared bit for
// bit with smem on the device), the expanded-codebook one (KVQ_CUDA_QET=expand) and the per-weight
// decode (KVQ_CUDA_QET=decode), each against the CPU and its own emulation.
static void test_qet_products(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    int n_smem = 0, n_smem2 = 0, n_same = 0;
    static const char *env[] = {"decode", "expand", "smem", "smem2"};
    for (int qk = 3; qk >= 0; qk--) {
        uint64_t s = 77;
        for (size_t i = 0; i < sizeof qshapes / sizeof qshapes[0]; i++) {
            const qshape *sh = &qshapes[i];
            if (qk == 2 && i % 2) unsetenv("KVQ_CUDA_QET");
            else setenv("KVQ_CUDA_QET", env[qk], 1);
            kvq_pqx p;
            rand_qetx(&p, sh->rows, sh->cols, sh->stages, sh->k, sh->cb_type, sh->cb_bits, &s);
            char what[96];
            snprintf(what, sizeof what, "qet r%d cb%d/%d bits k%lld,%lld %s", sh->stages, sh->cb_type, sh->cb_bits,
                     (long long)sh->k[0], (long long)sh->k[1], qk == 1 ? "expanded" : env[qk]);
            kvq_cuda_pqx *t = NULL;
            kvq_err err = {0};
            if (kvq_cuda_pqx_upload(&p, &t, &err)) fail_msg("%s: upload: %s", what, err.msg);
            const int held = sh->cb_type != KVQ_PQX_CB_F32 && (sh->cb_type != KVQ_PQX_CB_CQO || sh->cb_bits <= 16);
            // unset: the default, smem2 since session 16 (this check still said smem until session 22's
            // first whole run of the suite since then)
            assert_int_equal(kvq_cuda_pqx_qet_kernel(t), qk >= 2 && !held ? 1 : qk == 2 && i % 2 ? 3 : qk);
            n_smem += kvq_cuda_pqx_qet_kernel(t) == 2;
            n_smem2 += kvq_cuda_pqx_qet_kernel(t) == 3;
            kvq_cuda_pqx_free(t);
            check_layout(&p, what, &s);
            uint64_t ms = 99 + i; // its own stream: both passes see the same layouts
            if (qk && i < 2) check_misaligned(&p, what, &ms);
            if (qk == 3 && held) n_same += compare_smem2(&p, what, &ms);
            kvq_pqx_free(&p);
        }
    }
    assert_true(n_smem >= 4 && n_smem2 >= 8 && n_same >= 8); // the shared-memory kernels ran, not only their fallbacks
    unsetenv("KVQ_CUDA_QET");
}

// The shared-memory kernel's instances are shared by a model's layouts: a layout with small tables
// uploaded after one with large tables (the same instance: CQO codes, two stages) must leave the
// large one runnable (the first H100 run of the models failed with "invalid argument" there).
static void test_qet_shared_bytes(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    uint64_t s = 31;
    const int64_t kb[2] = {1074, 32}, ks[2] = {50, 12};
    kvq_pqx big, small;
    rand_qetx(&big, 600, 256, 2, kb, KVQ_PQX_CB_CQO, 10, &s);
    rand_qetx(&small, 37, 64, 2, ks, KVQ_PQX_CB_CQO, 10, &s);
    for (int kk = 2; kk <= 3; kk++) { // smem, then smem2 (the default: unset)
        if (kk == 2) setenv("KVQ_CUDA_QET", "smem", 1);
        else unsetenv("KVQ_CUDA_QET");
        kvq_cuda_pqx *tb = NULL, *ts = NULL;
        kvq_err err = {0};
        if (kvq_cuda_pqx_upload(&big, &tb, &err) || kvq_cuda_pqx_upload(&small, &ts, &err)) fail_msg("upload: %s", err.msg);
        assert_int_equal(kvq_cuda_pqx_qet_kernel(tb), kk);
        assert_int_equal(kvq_cuda_pqx_qet_kernel(ts), kk);
        for (int T = 1; T <= 8; T += 7) {
            float *x = randvec(T * big.cols, &s), *yg = malloc(sizeof(float) * (size_t)(T * big.rows));
            float *ye = malloc(sizeof(float) * (size_t)(T * big.rows));
            if (kvq_cuda_pqx_matmul_host(tb, x, T, yg, &err)) fail_msg("large tables after small ones, %d tokens: %s", T, err.msg);
            pqx_emulate_k(&big, x, T, kvq_cuda_pqx_batch(tb), kk, ye);
            assert_memory_equal(yg, ye, sizeof(float) * (size_t)(T * big.rows));
            free(x); free(yg); free(ye);
        }
        kvq_cuda_pqx_free(tb); kvq_cuda_pqx_free(ts);
    }
    unsetenv("KVQ_CUDA_QET");
    printf("  large tables (141 KB) run after a small layout of the same instance was uploaded (smem, smem2): the emulation's bits\n");
    kvq_pqx_free(&big); kvq_pqx_free(&small);
}

// smem2's guard: a CQO step it cannot decode exactly (infinite, or 2^100 and over: −2^23·step would
// not be finite, inf − inf) makes the upload take the smem kernel, whose products stay the CPU's.
static void test_smem2_guard(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    uint64_t s = 12;
    const int64_t k[2] = {50, 12};
    const float bad[] = {INFINITY, 0x1p100f};
    for (int b = 0; b < 2; b++) {
        kvq_pqx p;
        rand_qetx(&p, 37, 128, 2, k, KVQ_PQX_CB_CQO, 10, &s);
        memcpy((uint8_t *)p.cb[1] + 8 * 5 + 4, &bad[b], 4); // stage 2, subspace 5's step
        setenv("KVQ_CUDA_QET", "smem2", 1);
        kvq_cuda_pqx *t = NULL;
        kvq_err err = {0};
        if (kvq_cuda_pqx_upload(&p, &t, &err)) fail_msg("smem2 guard: upload: %s", err.msg);
        assert_int_equal(kvq_cuda_pqx_qet_kernel(t), 2);
        kvq_cuda_pqx_free(t);
        if (b) check_layout(&p, "qet smem2 guard: a step of 2^100", &s); // (an infinite one has no finite bound)
        unsetenv("KVQ_CUDA_QET");
        kvq_pqx_free(&p);
    }
}

// Layouts the GPU file does not run are refused with KVQ_ERR_UNSUPPORTED (no device needed to
// get there only after the device check: with a device, a QET layout of 2 levels); an unknown
// KVQ_CUDA_QET value with KVQ_ERR_ARG.
static void test_refusals(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    uint64_t s = 5;
    const int64_t k[2] = {20, 0};
    kvq_pqx p;
    rand_qetx(&p, 8, 64, 1, k, KVQ_PQX_CB_BF16, 0, &s);
    p.levels = 2;
    kvq_cuda_pqx *t = NULL;
    kvq_err err = {0};
    assert_int_equal(kvq_cuda_pqx_upload(&p, &t, &err), KVQ_ERR_UNSUPPORTED);
    assert_null(t);
    p.levels = 3;
    setenv("KVQ_CUDA_QET", "fast", 1); // not a kernel's name: refused, saying so
    assert_int_equal(kvq_cuda_pqx_upload(&p, &t, &err), KVQ_ERR_ARG);
    assert_null(t);
    assert_non_null(strstr(err.msg, "KVQ_CUDA_QET=fast"));
    unsetenv("KVQ_CUDA_QET");
    kvq_pqx_free(&p);
}

// ---- whole models: converted with pq:4 and qet:4, GPU backend against the CPU backend

static const char *shared(void) {
    const char *v = getenv("KVQ_SHARED");
    return v && *v ? v : "../shared";
}
static int is_dir(const char *p) { struct stat s; return stat(p, &s) == 0 && S_ISDIR(s.st_mode); }

static double rel_err(const float *g, const float *c, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)g[i] - c[i]) * ((double)g[i] - c[i]);
        den += (double)c[i] * c[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static kvq_model *open_on(const char *path, int gpu) {
    kvq_model_opts o = kvq_model_opts_default();
    o.max_ctx = 256;
    o.max_batch = 32;
    if (gpu) o.backend = kvq_backend_cuda_new;
    kvq_model *m = NULL;
    kvq_err e = {0};
    setenv("KVQ_CUDA_TC", "0", 1); // the dense bf16 lm_head on CUDA cores too (cuBLAS rounds x to bf16)
    kvq_status s = kvq_model_open(path, &o, &m, &e);
    unsetenv("KVQ_CUDA_TC");
    if (s) fail_msg("%s", e.msg);
    return m;
}

// Logits of 100 tokens (chunks of 32) on both backends within 1e-3 relative (the bound
// test_cuda_model.c holds every codec to; PQ/QET have no int8 mode, both sides multiply float
// activations, so the measured figure is ~1e-6); the GPU's one-token decode steps (captured and
// replayed as a graph) against its own prefill rows within 1e-4; greedy text equal for 32
// tokens; and the GPU holds the packed layout: its packed bytes are the CPU's (the same arrays,
// within the QET padding), far below a dense bf16 copy.
static void compare(const char *path) {
    enum { T = 100, NG = 32 };
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = 1 + (i * 37) % 250;
    kvq_model *c = open_on(path, 0), *g = open_on(path, 1);
    const int V = kvq_model_arch(c)->vocab_size;
    float *lc = malloc(sizeof(float) * T * V), *lg = malloc(sizeof(float) * T * V), *ls = malloc(sizeof(float) * V);
    kvq_err e = {0};
    if (kvq_model_forward(c, ids, T, 0, lc, 1, &e) || kvq_model_forward(g, ids, T, 0, lg, 1, &e)) fail_msg("%s", e.msg);
    const double r = rel_err(lg, lc, (size_t)T * V);
    double rs = 0;
    for (int t = 0; t < T; t++) {
        if (kvq_model_forward(g, ids + t, 1, t, ls, 0, &e)) fail_msg("%s", e.msg);
        rs = fmax(rs, rel_err(ls, lg + (size_t)t * V, V));
    }
    int same = 0;
    int32_t nc = argmax(lc + (size_t)(T - 1) * V, V), ng = argmax(lg + (size_t)(T - 1) * V, V);
    for (int i = 0; i < NG && nc == ng; i++, same++) {
        if (kvq_model_forward(c, &nc, 1, T + i, lc, 0, &e) || kvq_model_forward(g, &ng, 1, T + i, lg, 0, &e))
            fail_msg("%s", e.msg);
        nc = argmax(lc, V);
        ng = argmax(lg, V);
    }
    kvq_model_mem mc, mg;
    kvq_model_memory(c, &mc);
    kvq_model_memory(g, &mg);
    printf("  %-48s gpu/cpu %.3g decode/prefill %.3g greedy %d/%d; packed matrices: GPU %.2f MB, CPU %.2f MB, "
           "GPU weights %.2f MB\n", path, r, rs, same, NG, mg.packed / 1e6, mc.packed / 1e6, mg.device / 1e6);
    assert_true(mg.packed > 0);
    assert_true(mg.packed >= mc.packed && mg.packed <= mc.packed + mc.packed / 100 + 4096);
    assert_true(r <= 1e-3);
    assert_true(rs <= 1e-4);
    assert_int_equal(same, NG);
    kvq_model_close(c);
    kvq_model_close(g);
    free(lc); free(lg); free(ls);
}

static void test_models(void **st) {
    (void)st;
    if (!have_gpu()) skip();
    mkdir("build", 0755);
    mkdir("build/tests", 0755);
    char out[] = "build/tests/cuda-pq-XXXXXX";
    assert_non_null(mkdtemp(out));
    char d[512];
    snprintf(d, sizeof d, "%s/models/kvq-small-llama", shared());
    const char *src = getenv("KVQ_CUDA_PQ_SMALL") && is_dir(d) ? d : TINY; // the tiny model by default: k-means is slow
    const char *specs[] = {"pq:4", "qet:4"};
    for (int i = 0; i < 2; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/m%d.kvq", out, i);
        kvq_convert_opts co = {0};
        co.plan.weights = specs[i];
        kvq_err e = {0};
        if (kvq_convert(src, path, &co, NULL, &e)) fail_msg("%s", e.msg);
        printf("  %s from %s:\n", specs[i], src);
        compare(path);
        remove(path);
    }
    rmdir(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pq_products),
        cmocka_unit_test(test_qet_products),
        cmocka_unit_test(test_qet_shared_bytes),
        cmocka_unit_test(test_smem2_guard),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_models),
    };
    // KVQ_TEST_FILTER="test_qet*": only the tests matching the pattern (cmocka's * and ?), for a short device call
    const char *f = getenv("KVQ_TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
