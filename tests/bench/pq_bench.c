// Speed of the PQ products (kernels/cpu/pq.c) on a random layout of a given shape against the
// dense bf16 product of the same matrix: one token (tables, then lookups: reference and
// AVX2; the product with the tables built by the team, then by the calling thread before the
// fork) and batched tokens, in G weights per second, medians of REPS (default 7) timings.
// usage: [PQ_LANES=1] [PQ_SPLIT=1] [PQ_CB=f16|f32|cqo] build/bench/pq_bench [ROWS COLS K [TOKENS [THREADS]]]   (default 2048 2048 350 16 1)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "formats/dtype.h"
#include "kernels/cpu/hqx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pq.h"
#include "tests/bench/bench_time.h"
#include "tests/testrng.h"


int main(int argc, char **argv) {
    const int64_t rows = argc > 1 ? atoll(argv[1]) : 2048, cols = argc > 2 ? atoll(argv[2]) : 2048;
    const int64_t k = argc > 3 ? atoll(argv[3]) : 350;
    const int T = argc > 4 ? atoi(argv[4]) : 16, nt = argc > 5 ? atoi(argv[5]) : 1;
    int reps = getenv("REPS") ? atoi(getenv("REPS")) : 7;
    if (reps < 1 || reps > REPS_MAX) reps = 7;
    uint64_t s = 1;
    kvq_pqx p = {.stages = 1, .w = 8, .rows = rows, .cols = cols, .m = cols / 8, .rows_p = (rows + 7) / 8 * 8};
    p.k[0] = k;
    p.ib[0] = k <= 256 ? 1 : 2;
    p.idx[0] = kvq_hqx_alloc((size_t)(p.rows_p * p.m) * (size_t)p.ib[0]);
    // PQ_CB=f16|f32: codebooks of that type (an f16 / f32 source) instead of bf16, same values
    const char *cbt = getenv("PQ_CB") ? getenv("PQ_CB") : "bf16";
    // PQ_CB=cqo: 10-bit CQO codes (`cb=10`) with a (min, step) per subspace
    p.cb_type = !strcmp(cbt, "f16") ? KVQ_PQX_CB_F16 : !strcmp(cbt, "f32") ? KVQ_PQX_CB_F32
                : !strcmp(cbt, "cqo")                  ? KVQ_PQX_CB_CQO
                                                       : KVQ_PQX_CB_BF16;
    p.cb[0] = kvq_hqx_alloc((size_t)(p.m * 8 * k) * (p.cb_type == KVQ_PQX_CB_F32 ? 4 : 2));
    if (p.cb_type == KVQ_PQX_CB_CQO) {
        p.cb_bits = 10;
        p.cb_ms[0] = kvq_hqx_alloc(8 * (size_t)p.m);
        for (int64_t j = 0; j < p.m; j++) p.cb_ms[0][2 * j] = -2.0f + 0.1f * (float)gauss(&s), p.cb_ms[0][2 * j + 1] = 4.0f / 1023;
    }
    for (int64_t i = 0; i < p.rows_p * p.m; i++) {
        uint32_t a = (uint32_t)(rng_next(&s) % (uint64_t)k);
        if (p.ib[0] == 1) ((uint8_t *)p.idx[0])[i] = (uint8_t)a;
        else ((uint16_t *)p.idx[0])[i] = (uint16_t)a;
    }
    for (int64_t i = 0; i < p.m * 8 * k; i++) {
        const float v = kvq_f16_to_f32(kvq_f32_to_f16((float)gauss(&s))); // a value every type holds
        if (p.cb_type == KVQ_PQX_CB_CQO) ((uint16_t *)p.cb[0])[i] = (uint16_t)(rng_next(&s) % 1024);
        else if (p.cb_type == KVQ_PQX_CB_F32) ((float *)p.cb[0])[i] = v;
        else ((uint16_t *)p.cb[0])[i] = p.cb_type == KVQ_PQX_CB_F16 ? kvq_f32_to_f16(v) : kvq_f32_to_bf16(v);
    }
    // PQ_LANES=1: the indices lane-packed as the loader holds them (kvq_pqx_pack_lanes), same values
    const int lanes = getenv("PQ_LANES") && atoi(getenv("PQ_LANES")) == 1;
    if (lanes && kvq_pqx_pack_lanes(&p, 1)) { fprintf(stderr, "pq_bench: out of memory\n"); return 1; }
    // PQ_SPLIT=1: uint16 indices (k = 257..4096) split into low bytes + high bits and CQO codes held
    // at 10 bits, as the loader holds them since 2026-11-26 (kvq_pqx_split_wide, _split_codes), same values
    const int split = getenv("PQ_SPLIT") && atoi(getenv("PQ_SPLIT")) == 1;
    if (split && (kvq_pqx_split_wide(&p) || kvq_pqx_split_codes(&p))) { fprintf(stderr, "pq_bench: out of memory\n"); return 1; }
    float *x = malloc(sizeof(float) * (size_t)(T * cols)), *y = malloc(sizeof(float) * (size_t)(T * rows));
    for (int64_t i = 0; i < T * cols; i++) x[i] = (float)gauss(&s);
    float *lut = malloc(sizeof(float) * kvq_pqx_lut_floats(&p)), *sc = malloc(sizeof(float) * kvq_pqx_scratch(&p, 1));
    uint16_t *wd = malloc(2 * (size_t)(rows * cols));
    float *wr = malloc(sizeof(float) * (size_t)cols);
    for (int64_t r = 0; r < rows; r++) {
        kvq_pqx_row_f32(&p, r, wr);
        kvq_dtype_from_f32(KVQ_DTYPE_BF16, wr, (size_t)cols, wd + r * cols);
    }
    float *xp = malloc(sizeof(float) * (kvq_matmul_scratch(KVQ_DTYPE_BF16, T, (int)cols) + 1));
    const double nw = (double)rows * (double)cols;
    printf("pq_bench: %lld x %lld, k %lld, %s codebooks (%s indices, %d-bit fields), held %.2f MB (dense bf16 %.2f MB), %d thread(s), AVX2 %s\n",
           (long long)rows, (long long)cols, (long long)k, cbt, p.pbits[0] ? "lane-packed" : p.hbits[0] ? "split" : p.ib[0] == 1 ? "uint8" : "uint16",
           kvq_pqx_idx_bits(&p, 0), kvq_pqx_bytes(&p) / 1e6,
           2 * nw / 1e6, nt, kvq_pqx_isa_best() == KVQ_PQX_ISA_AVX2 ? "yes" : "no");
    double t;
    TIME(t, reps, kvq_pqx_lut(&p, x, lut, 0, p.m, KVQ_PQX_ISA_REF));
    printf("  one token: tables ref          %8.3f ms\n", 1e3 * t);
    TIME(t, reps, kvq_pqx_lut(&p, x, lut, 0, p.m, KVQ_PQX_ISA_AVX2));
    printf("  one token: tables avx2         %8.3f ms\n", 1e3 * t);
    TIME(t, reps, kvq_pqx_matvec_rows(&p, lut, y, 0, rows, KVQ_PQX_ISA_REF));
    printf("  one token: lookups ref         %8.3f ms\n", 1e3 * t);
    TIME(t, reps, kvq_pqx_matvec_rows(&p, lut, y, 0, rows, KVQ_PQX_ISA_AVX2));
    printf("  one token: lookups avx2        %8.3f ms\n", 1e3 * t);
    const int row0 = 0;
    TIME(t, reps, kvq_pqx_matmul(&p, 1, &row0, x, 1, y, rows, sc, KVQ_PQX_ISA_AUTO, nt));
    printf("  one token: product (auto)      %8.3f ms  %6.2f G w/s\n", 1e3 * t, nw / t / 1e9);
    const int was = kvq_pqx_lut_team(0); // the tables on the calling thread before the fork
    TIME(t, reps, kvq_pqx_matmul(&p, 1, &row0, x, 1, y, rows, sc, KVQ_PQX_ISA_AUTO, nt));
    kvq_pqx_lut_team(was);
    printf("  one token: product, tables before the fork %8.3f ms  %6.2f G w/s\n", 1e3 * t, nw / t / 1e9);
    TIME(t, reps, kvq_matmul(y, x, wd, KVQ_DTYPE_BF16, 1, (int)cols, (int)rows, xp, nt));
    printf("  one token: dense bf16          %8.3f ms  %6.2f G w/s\n", 1e3 * t, nw / t / 1e9);
    TIME(t, reps, kvq_pqx_matmul(&p, 1, &row0, x, T, y, rows, sc, KVQ_PQX_ISA_AUTO, nt));
    printf("  %3d tokens: product (auto)     %8.3f ms  %6.2f G w/s\n", T, 1e3 * t, T * nw / t / 1e9);
    TIME(t, reps, kvq_pqx_matmul(&p, 1, &row0, x, T, y, rows, sc, KVQ_PQX_ISA_REF, nt));
    printf("  %3d tokens: product (ref)      %8.3f ms  %6.2f G w/s\n", T, 1e3 * t, T * nw / t / 1e9);
    TIME(t, reps, kvq_matmul(y, x, wd, KVQ_DTYPE_BF16, T, (int)cols, (int)rows, xp, nt));
    printf("  %3d tokens: dense bf16         %8.3f ms  %6.2f G w/s\n", T, 1e3 * t, T * nw / t / 1e9);
    kvq_pqx_free(&p);
    free(x); free(y); free(lut); free(sc); free(wd); free(wr); free(xp);
    return 0;
}
