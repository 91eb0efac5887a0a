// Speed of the QET products (kernels/cpu/qetx.c) on a random matrix encoded by the codec (QET
// defaults: l=3, two stages, 10-bit CQO codebooks; fixed k, 2 Lloyd steps to keep it quick)
// against the dense fp32 product of its decoded weights: codebook expansion, one token
// (reference and AVX2), batched tokens, in G weights per second, medians of REPS (default 7).
// usage: build/bench/qet_bench [ROWS COLS K1 K2 [TOKENS [THREADS]]]   (default 512 512 50 12 16 1)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pq.h"
#include "libconv/codec/qet/qet.h"
#include "tests/bench/bench_time.h"
#include "tests/testrng.h"


int main(int argc, char **argv) {
    const int64_t rows = argc > 1 ? atoll(argv[1]) : 512, cols = argc > 2 ? atoll(argv[2]) : 512;
    const int64_t k1 = argc > 3 ? atoll(argv[3]) : 50, k2 = argc > 4 ? atoll(argv[4]) : 12;
    const int T = argc > 5 ? atoi(argv[5]) : 16, nt = argc > 6 ? atoi(argv[6]) : 1;
    int reps = getenv("REPS") ? atoi(getenv("REPS")) : 7;
    if (reps < 1 || reps > REPS_MAX) reps = 7;
    uint64_t s = 1;
    float *w = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) w[i] = (float)gauss(&s);
    kvq_qet_config cfg = kvq_qet_config_default(0);
    cfg.k_fixed[0] = k1, cfg.k_fixed[1] = k2, cfg.iters = 2;
    kvq_encoded enc;
    kvq_err e = {0};
    if (kvq_qet_encode(&cfg, KVQ_DTYPE_BF16, w, rows, cols, 1, 0, &enc, &e)) { fprintf(stderr, "qet_bench: %s\n", e.msg); return 1; }
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int i = 0; i < enc.n_blob; i++) v[i] = (kvq_blob_view){enc.blob[i].role, enc.blob[i].data, enc.blob[i].size};
    kvq_pqx p;
    if (kvq_qet_pack_pqx(enc.params, v, enc.n_blob, rows, cols, &p, &e)) { fprintf(stderr, "qet_bench: %s\n", e.msg); return 1; }
    for (int64_t r = 0; r < rows; r++) kvq_pqx_row_f32(&p, r, w + r * cols); // the decoded weights
    float *x = malloc(sizeof(float) * (size_t)(T * cols)), *y = malloc(sizeof(float) * (size_t)(T * rows));
    for (int64_t i = 0; i < T * cols; i++) x[i] = (float)gauss(&s);
    const size_t ne = kvq_qetx_expand_floats(&p);
    float *cbf = malloc(sizeof(float) * ne), *sc = malloc(sizeof(float) * kvq_pqx_scratch(&p, 1));
    float *dsc = malloc(sizeof(float) * kvq_matmul_scratch(KVQ_DTYPE_F32, T, (int)cols));
    const double W = (double)(rows * cols);
    double t;
    const int row0 = 0;
    printf("qet %lld x %lld, k %lld/%lld, held %zu bytes (%.2f bits/w), expanded codebooks %zu KB, %d thread(s)\n",
           (long long)rows, (long long)cols, (long long)k1, (long long)k2, kvq_pqx_bytes(&p), 8.0 * kvq_pqx_bytes(&p) / W,
           ne * 4 / 1024, nt);
    TIME(t, reps, kvq_qetx_expand(&p, cbf, 0, p.m, KVQ_PQX_ISA_REF));
    printf("  expand ref        %8.3f ms\n", 1e3 * t);
    TIME(t, reps, kvq_qetx_expand(&p, cbf, 0, p.m, KVQ_PQX_ISA_AVX2));
    printf("  expand avx2       %8.3f ms\n", 1e3 * t);
    TIME(t, reps, kvq_qetx_gemm_rows(&p, cbf, x, 1, cols, y, 1, 0, rows, KVQ_PQX_ISA_REF));
    printf("  1 token ref       %8.3f ms  %6.2f G w/s (rows only)\n", 1e3 * t, W / t * 1e-9);
    TIME(t, reps, kvq_qetx_gemm_rows(&p, cbf, x, 1, cols, y, 1, 0, rows, KVQ_PQX_ISA_AVX2));
    printf("  1 token avx2      %8.3f ms  %6.2f G w/s (rows only)\n", 1e3 * t, W / t * 1e-9);
    TIME(t, reps, kvq_pqx_matmul(&p, 1, &row0, x, 1, y, rows, sc, KVQ_PQX_ISA_AUTO, nt));
    printf("  1 token product   %8.3f ms  %6.2f G w/s (expansion included)\n", 1e3 * t, W / t * 1e-9);
    TIME(t, reps, kvq_matmul(y, x, w, KVQ_DTYPE_F32, 1, (int)cols, (int)rows, dsc, nt));
    printf("  1 token dense f32 %8.3f ms  %6.2f G w/s\n", 1e3 * t, W / t * 1e-9);
    TIME(t, reps, kvq_pqx_matmul(&p, 1, &row0, x, T, y, rows, sc, KVQ_PQX_ISA_AUTO, nt));
    printf("  %d tokens product %8.3f ms  %6.2f G w/s·tok\n", T, 1e3 * t, W * T / t * 1e-9);
    TIME(t, reps, kvq_matmul(y, x, w, KVQ_DTYPE_F32, T, (int)cols, (int)rows, dsc, nt));
    printf("  %d tokens dense   %8.3f ms  %6.2f G w/s·tok\n", T, 1e3 * t, W * T / t * 1e-9);
    kvq_pqx_free(&p);
    kvq_encoded_free(&enc);
    free(w); free(x); free(y); free(cbf); free(sc); free(dsc);
    return 0;
}
