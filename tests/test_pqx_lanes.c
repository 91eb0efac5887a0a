// The GPU PQ/QET products' arithmetic (kernels/cuda/pqx_lane.h: what each thread of
// kernels/cuda/pqx.cu computes) run on the host, every lane and the kernels' reduction trees
// (tests/pqx_rand.h pqx_emulate), against the CPU kernels (kernels/cpu/pq.c, qetx.c, reference
// path) on seeded random layouts: the GPU's tables equal kvq_pqx_lutb's bit for bit, the
// codebook readers equal kvq_pqx_cb / kvq_qetx_cb bit for bit, the swap-tree permutation equals
// kvq_qetx_sigma for all 4096 fields (and the expanded kernel's in-register undo of it puts
// every leaf there), the expanded QET tables hold kvq_qetx_cb's values, and every product row of
// the three QET kernels (decode, expanded, shared-memory tables) is within the float summation
// bound of the CPU's; the shared-memory kernel's staged tables decode to kvq_qetx_cb's values, smem2's
// staging builds the same tables, its decode gives smem's bits. No device needed: the index and codebook arithmetic of the GPU path is checked
// here in `make test`; tests/test_cuda_pq.c checks the device against it.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/pqx_rand.h"

static void test_sigma(void **st) {
    (void)st;
    for (uint32_t f = 0; f < 4096; f++) assert_int_equal(kvq_pql_sigma(f), kvq_qetx_sigma(f));
}

// The in-register undo of the swap tree (the expanded kernel's) puts leaf t at σ(t), for every
// field: w[σ(t)] = v[t] with distinct leaf values.
static void test_unswap(void **st) {
    (void)st;
    const float v[8] = {1.5f, -2.0f, 3.25f, 4.0f, -5.5f, 6.0f, 7.75f, -8.0f};
    for (uint32_t f = 0; f < 4096; f++) {
        float w[8];
        kvq_pql_unswap(f, v, w);
        const uint32_t perm = kvq_qetx_sigma(f);
        for (int t = 0; t < 8; t++) assert_memory_equal(&w[(perm >> (3 * t)) & 7u], &v[t], sizeof(float));
    }
}

// The emulated GPU product of T tokens in batches of nb against the CPU reference, per row
// within 2·γ_N·Σ|c·x|.
static void check_k(const kvq_pqx *p, int T, int nb, int qk, uint64_t *seed, const char *what) {
    const int64_t rows = p->rows, cols = p->cols;
    float *x = randvec(T * cols, seed), *yc = malloc(sizeof(float) * (size_t)(T * rows)),
          *ye = malloc(sizeof(float) * (size_t)(T * rows)), *wrow = malloc(sizeof(float) * (size_t)cols);
    float *sc = malloc(sizeof(float) * kvq_pqx_scratch(p, 1));
    const int row0 = 0;
    kvq_pqx_matmul(p, 1, &row0, x, T, yc, rows, sc, KVQ_PQX_ISA_REF, 1);
    pqx_emulate_k(p, x, T, nb, qk, ye);
    const double gam = pqx_gamma(p);
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int64_t r = 0; r < rows; r++) {
            const double mag = pqx_row_mag(p, r, x + t * cols, wrow), d = fabs((double)ye[t * rows + r] - yc[t * rows + r]);
            if (mag > 0 && d / mag > worst) worst = d / mag;
            if (!(d <= 2 * gam * mag))
                fail_msg("%s: token %d row %lld: emulated gpu %.9g cpu %.9g (bound %.3g)", what, t, (long long)r,
                         ye[t * rows + r], yc[t * rows + r], 2 * gam * mag);
        }
    printf("  %-34s T %2d nb %d%s: max |gpu-cpu|/Σ|c·x| %.2g (bound %.2g)\n", what, T, nb,
           p->levels ? (qk == 3 ? " smem2   " : qk == 2 ? " smem    " : qk ? " expanded" : " decode  ") : "", worst, 2 * gam);
    free(x); free(yc); free(ye); free(wrow); free(sc);
}
static void check(const kvq_pqx *p, int T, int nb, uint64_t *seed, const char *what) { check_k(p, T, nb, 1, seed, what); }

typedef struct {
    int64_t rows, cols;
    int w, stages, cb_type;
    int64_t k[2];
} shape;

static const shape shapes[] = {
    {37, 64, 8, 1, KVQ_PQX_CB_BF16, {50, 0}},   {24, 64, 8, 1, KVQ_PQX_CB_F32, {257, 0}},
    {100, 96, 4, 2, KVQ_PQX_CB_BF16, {13, 300}}, {61, 160, 16, 2, KVQ_PQX_CB_F32, {9, 7}},
    {17, 40, 1, 1, KVQ_PQX_CB_BF16, {3, 0}},    {45, 96, 8, 2, KVQ_PQX_CB_CQO, {37, 11}},
    {48, 512, 8, 1, KVQ_PQX_CB_BF16, {26, 0}},  {33, 184, 8, 2, KVQ_PQX_CB_CQO, {367, 20}},
    {40, 64, 4, 1, KVQ_PQX_CB_F16, {11, 0}},    {64, 256, 8, 2, KVQ_PQX_CB_F16, {300, 26}},
};

static void test_pq(void **st) {
    (void)st;
    uint64_t s = 31;
    int n_lane = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *sh = &shapes[i];
        for (int packed = 0; packed < 2; packed++) {
            kvq_pqx p;
            rand_pqx(&p, sh->rows, sh->cols, sh->w, sh->stages, sh->k, sh->cb_type, 0, &s);
            if (packed) {
                assert_int_equal(kvq_pqx_pack_lanes(&p, 1), 0);
                n_lane += p.pbits[0] > 0;
            }
            // the GPU's tables (3 tokens, nb = 3 a entry) equal the CPU's batched tables
            const int T = 3;
            float *x = randvec(T * sh->cols, &s);
            const size_t nl = kvq_pqx_lut_floats(&p);
            float *lb = malloc(sizeof(float) * nl * KVQ_PQX_TB), *lg = malloc(sizeof(float) * nl * T);
            kvq_pqx_lutb(&p, x, T, sh->cols, lb, 0, p.m, KVQ_PQX_ISA_REF);
            for (size_t e = 0; e < nl; e++) kvq_pql_entry(&p, x, sh->cols, T, (int64_t)e, p.m * p.k[0], lg + e * T);
            for (size_t e = 0; e < nl; e++)
                for (int t = 0; t < T; t++) assert_memory_equal(&lg[e * T + t], &lb[e * KVQ_PQX_TB + t], sizeof(float));
            // codebook values as the CPU accessor gives them
            for (int sg = 0; sg < p.stages; sg++)
                for (int64_t o = 0; o < p.m * p.w * p.k[sg]; o += 7) {
                    const int64_t j = o / (p.w * p.k[sg]), q = (o / p.k[sg]) % p.w, c = o % p.k[sg];
                    const float a = kvq_pql_cb(&p, sg, j, o), b = kvq_pqx_cb(&p, sg, j, (int)q, c);
                    assert_memory_equal(&a, &b, sizeof(float));
                }
            free(x); free(lb); free(lg);
            char what[80];
            snprintf(what, sizeof what, "pq w%d r%d cb%d k%lld,%lld%s", sh->w, sh->stages, sh->cb_type, (long long)sh->k[0],
                     (long long)sh->k[1], packed ? " lanes" : "");
            check(&p, 1, 8, &s, what);
            check(&p, 11, 8, &s, what);
            kvq_pqx_free(&p);
        }
    }
    assert_true(n_lane >= 4);
}

static const qshape qshapes[] = {
    {37, 64, 2, KVQ_PQX_CB_CQO, 10, {50, 12}},  {64, 128, 1, KVQ_PQX_CB_BF16, 0, {256, 0}},
    {24, 192, 2, KVQ_PQX_CB_F32, 0, {300, 16}}, {9, 64, 2, KVQ_PQX_CB_CQO, 24, {1, 17}},
    {70, 256, 2, KVQ_PQX_CB_CQO, 7, {122, 9}},  {16, 64, 1, KVQ_PQX_CB_CQO, 16, {40, 0}},
    {20, 2048, 1, KVQ_PQX_CB_CQO, 25, {3, 0}},
};

static void test_qet(void **st) {
    (void)st;
    uint64_t s = 47;
    int n_staged = 0;
    for (size_t i = 0; i < sizeof qshapes / sizeof qshapes[0]; i++) {
        const qshape *sh = &qshapes[i];
        kvq_pqx p;
        rand_qetx(&p, sh->rows, sh->cols, sh->stages, sh->k, sh->cb_type, sh->cb_bits, &s);
        for (int sg = 0; sg < p.stages; sg++)
            for (int64_t j = 0; j < p.m; j += 3)
                for (int64_t c = 0; c < p.k[sg]; c += 5)
                    for (int q = 0; q < 8; q++) {
                        const float a = kvq_pql_qcb(&p, sg, j, c, q), b = kvq_qetx_cb(&p, sg, j, c, q);
                        assert_memory_equal(&a, &b, sizeof(float));
                    }
        // the expanded tables (slot order) hold kvq_qetx_cb's values bit for bit
        for (int sg = 0; sg < p.stages; sg++)
            for (int64_t e = 0; e < p.m * p.k[sg]; e += 3) {
                float v[8];
                kvq_pql_qexp(&p, sg, e, v);
                const int64_t g = e / 8 / p.k[sg], c = e / 8 % p.k[sg], j = g + (e % 8) * p.groups;
                for (int q = 0; q < 8; q++) {
                    const float b = kvq_qetx_cb(&p, sg, j, c, q);
                    assert_memory_equal(&v[q], &b, sizeof(float));
                }
            }
        // the shared-memory kernel's tables (KVQ_CUDA_QET=smem; layouts it holds: bf16, CQO <= 16 bits):
        // staged words at kvq_pql_qets_at (a bijection onto the group's 64·k words), read back as
        // 32-bit pairs as the kernel does and decoded, equal kvq_qetx_cb bit for bit
        if (p.cb_type == KVQ_PQX_CB_BF16 || (p.cb_type == KVQ_PQX_CB_CQO && p.cb_bits <= 16))
            for (int sg = 0; sg < p.stages; sg++) {
                const int k = (int)p.k[sg], bf = p.cb_type == KVQ_PQX_CB_BF16;
                uint16_t *T = malloc(sizeof(uint16_t) * 64 * (size_t)k), *T2 = malloc(sizeof(uint16_t) * 64 * (size_t)k);
                uint8_t *hit = calloc(64 * (size_t)k, 1);
                for (int64_t g = 0; g < p.groups; g += 2) {
                    for (int t = 0; t < 8; t++)
                        for (int ol = 0; ol < 8 * k; ol++) {
                            const int at = kvq_pql_qets_at(ol >> 3, t) + (ol & 7);
                            assert_true(at >= 0 && at < 64 * k);
                            hit[at] = 1;
                            T[at] = kvq_pql_qets_word(&p, bf, sg, g, t, ol);
                        }
                    for (int e = 0; e < 64 * k; e++) assert_int_equal(hit[e], 1);
                    // smem2's staging (every thread of 512, and of 32: more pairs a thread, slot
                    // changes inside a batch) builds the same table
                    for (int nthr = 32; nthr <= 512; nthr *= 16) {
                        memset(T2, 0xa5, sizeof(uint16_t) * 64 * (size_t)k);
                        for (int tid = 0; tid < nthr; tid++) kvq_pql_qets2_stage(&p, bf, sg, g, tid, nthr, T2);
                        assert_memory_equal(T2, T, sizeof(uint16_t) * 64 * (size_t)k);
                        n_staged++;
                    }
                    for (int c = 0; c < k; c++)
                        for (int t = 0; t < 8; t++) {
                            const int64_t j = g + t * p.groups;
                            float ms[2] = {0, 0};
                            if (!bf) memcpy(ms, (const float *)p.cb[sg] + 2 * j, sizeof ms);
                            for (int i = 0; i < 8; i++) {
                                uint32_t wd;
                                memcpy(&wd, T + kvq_pql_qets_at(c, t) + 2 * (i >> 1), 4);
                                const float a = kvq_pql_qets_val(bf, wd, i & 1, ms[0], ms[1]), b = kvq_qetx_cb(&p, sg, j, c, i);
                                assert_memory_equal(&a, &b, sizeof(float));
                            }
                        }
                }
                free(T);
                free(T2);
                free(hit);
            }
        char what[80];
        snprintf(what, sizeof what, "qet r%d cb%d/%d k%lld,%lld", sh->stages, sh->cb_type, sh->cb_bits, (long long)sh->k[0],
                 (long long)sh->k[1]);
        const int held = p.cb_type == KVQ_PQX_CB_BF16 || (p.cb_type == KVQ_PQX_CB_CQO && p.cb_bits <= 16);
        for (int qk = 0; qk < 3 + held; qk++) { // per-weight decode, expanded, shared-memory tables (and smem2 where held)
            check_k(&p, 1, 8, qk, &s, what);
            check_k(&p, 10, 8, qk, &s, what);
            check_k(&p, 5, 3, qk, &s, what);
        }
        // smem2 gives smem's bits on the layouts both hold (10 tokens in batches of 8, and 5 in 3)
        if (held)
            for (int T = 5; T <= 10; T += 5) {
                float *x = randvec(T * p.cols, &s), *y2 = malloc(sizeof(float) * (size_t)(T * p.rows)),
                      *y3 = malloc(sizeof(float) * (size_t)(T * p.rows));
                pqx_emulate_k(&p, x, T, T == 5 ? 3 : 8, 2, y2);
                pqx_emulate_k(&p, x, T, T == 5 ? 3 : 8, 3, y3);
                assert_memory_equal(y2, y3, sizeof(float) * (size_t)(T * p.rows));
                free(x); free(y2); free(y3);
            }
        kvq_pqx_free(&p);
    }
    printf("  smem2 staging: %d tables equal to the reference's\n", n_staged);
    assert_true(n_staged == 16); // the 4 layouts smem holds, every other group, both thread counts
}

// smem2's CQO decode (kvq_pql_qets2_val: a byte permute and fma(2^23 + code, step, −2^23·step), then
// + min) against the smem kernel's (kvq_pql_qets_val: min + (float)code·step, each rounded) for every
// 16-bit code, both halves of the word, on steps of every scale the guard admits (random, powers of
// two, subnormal, negative, near 2^100) and mins including ±0: the same bits, except that a zero
// may carry the other sign (which no partial shows: they start at +0). The guard refuses infinite,
// NaN and huge steps, where the identity fails (inf − inf).
static void test_qets2_val(void **st) {
    (void)st;
    uint64_t s = 4242;
    float steps[64];
    int ns = 0;
    const float fixed[] = {1.0f, -1.0f, 0x1p-20f, 0x1p-126f, 0x1p-140f, -0x1p-149f, 0x1.fffffep99f, -0x1.8p99f, 3.0e-3f, 0.0f, -0.0f};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) steps[ns++] = fixed[i];
    while (ns < 64) steps[ns++] = (float)(gauss(&s) * ldexp(1.0, (int)(rng_next(&s) % 80) - 60));
    const float mins[] = {0.0f, -0.0f, 1.5f, -2.25f, 1e-30f, -3.0e5f};
    long n = 0, zero_sign = 0;
    for (int i = 0; i < ns; i++) {
        assert_true(kvq_pql_qets2_step_ok(steps[i]));
        const float nst = -0x1p23f * steps[i];
        for (size_t j = 0; j < sizeof mins / sizeof mins[0]; j++)
            for (uint32_t code = 0; code < 65536; code += 1 + (i > 8) * 6) {
                const uint32_t wd = code | (65535u - code) << 16;
                for (int hi = 0; hi < 2; hi++) {
                    const float a = kvq_pql_qets_val(0, wd, hi, mins[j], steps[i]);
                    const float b = kvq_pql_qets2_val(wd, hi, mins[j], steps[i], nst);
                    n++;
                    if (a == 0.0f && b == 0.0f) { zero_sign += memcmp(&a, &b, 4) != 0; continue; }
                    if (memcmp(&a, &b, 4))
                        fail_msg("code %u step %a min %a: smem %a smem2 %a", hi ? 65535u - code : code, steps[i], mins[j], a, b);
                }
            }
    }
    printf("  smem2 decode: %ld values equal to the smem kernel's bit for bit (%ld zeros of the other sign)\n", n - zero_sign, zero_sign);
    const float bad[] = {INFINITY, -INFINITY, NAN, 0x1p100f, -0x1p101f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_false(kvq_pql_qets2_step_ok(bad[i]));
    // why the guard: an infinite step gives inf − inf = NaN where the decoder gives inf
    const float a = kvq_pql_qets_val(0, 5u, 0, 0.0f, INFINITY), b = kvq_pql_qets2_val(5u, 0, 0.0f, INFINITY, -INFINITY);
    assert_true(isinf(a) && isnan(b));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigma),
        cmocka_unit_test(test_unswap),
        cmocka_unit_test(test_pq),
        cmocka_unit_test(test_qet),
        cmocka_unit_test(test_qets2_val),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
