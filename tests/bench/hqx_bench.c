// Benchmark: y = W·x straight from HyperQuant's execution layout (kernels/cpu/hqx.c) against
// the dense bf16 and fp32 products of kernels/cpu/matmul.c on the same shape, side by side.
// usage: hqx_bench [rows cols tokens threads bps lattice]  (default 2048 2048 1 1 4.0 e8)
// Prints the median of 15 runs of each path in ms and G weights/s, and beside them the median
// CPU time of the process per run (all threads; robust to other jobs sharing the cores) and the
// G weights/s per CPU second. HQX_BENCH_REPS=N: N runs instead of 15 (the reference path: 3). HQX_BENCH_PATHS=1,4 runs
// only those paths (0 dense fp32, 1 dense bf16, 2 hqx ref, 3 avx2, 4 vnni, 5 exact, 6 the batched
// product with tokens in the lanes (hqx_gemm.c: VNNI or AVX2), 7 decoded row blocks × dense fp32 (the
// runtime's prefill path before 6)); 6 and 7 include the activations' preparation. HQX_BENCH_T128=0 runs the
// generic AVX2 one-token body on tiles of 128 instead of the tile-128 one (kvq_hqx_avx2_t128).
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/dtype.h"
#include "kernels/cpu/hqx.h"
#include "kernels/cpu/matmul.h"
#include "libconv/codec/hyperquant/hq_pack.h"
#include "tests/testrng.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int64_t rows = argc > 1 ? atoll(argv[1]) : 2048, cols = argc > 2 ? atoll(argv[2]) : 2048;
    int ntok = argc > 3 ? atoi(argv[3]) : 1, nt = argc > 4 ? atoi(argv[4]) : 1;
    double bps = argc > 5 ? atof(argv[5]) : 4.0;
    kvq_lattice lat = KVQ_LAT_E8;
    if (argc > 6 && kvq_lattice_parse(argv[6], &lat)) { fprintf(stderr, "bad lattice %s\n", argv[6]); return 2; }
    uint64_t s = 1;
    float *w = malloc(sizeof(float) * rows * cols), *x = malloc(sizeof(float) * cols * ntok);
    for (int64_t i = 0; i < rows * cols; i++) w[i] = (float)(0.02 * gauss(&s));
    for (int64_t i = 0; i < cols * ntok; i++) x[i] = (float)gauss(&s);
    kvq_hq_opts o = kvq_hq_opts_default(lat, bps);
    kvq_codec_input in = {NULL, w, rows, cols, 7, 0, NULL};
    kvq_encoded e;
    kvq_err err = {0};
    kvq_hq_header h;
    kvq_hqx q;
    if (kvq_hq_encode(&o, &in, &e, NULL, NULL, &err) || kvq_hq_header_parse(e.params, rows, cols, &h, &err)) {
        fprintf(stderr, "encode: %s\n", err.msg);
        return 1;
    }
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
    if (kvq_hq_pack(&h, v, e.n_blob, getenv("HQX_BENCH_VBITS") ? atoi(getenv("HQX_BENCH_VBITS")) : 0, 0, &q, &err)) { fprintf(stderr, "pack: %s\n", err.msg); return 1; }
    uint16_t *wb = malloc(2 * rows * cols);
    kvq_dtype_from_f32(KVQ_DTYPE_BF16, w, rows * cols, wb);
    size_t ab = kvq_hqx_act_bytes(&q);
    uint8_t *buf = aligned_alloc(64, ab * ntok);
    kvq_hqx_act *act = malloc(sizeof *act * ntok);
    float *y = malloc(sizeof(float) * rows * ntok);
    float *xp = malloc(sizeof(float) * kvq_matmul_scratch(KVQ_DTYPE_BF16, ntok, (int)cols));
    printf("shape %lld x %lld, %d token(s), %d thread(s), %s %.2f bits: stored %.3f bits/w, held %.3f bits/w "
           "(vbits %d, %u escapes = %.2f %%), best ISA %s\n",
           (long long)rows, (long long)cols, ntok, nt, kvq_lattice_name(lat), bps, 8.0 * kvq_encoded_bytes(&e) / (rows * cols),
           8.0 * kvq_hqx_bytes(&q) / (rows * cols), q.vbits, q.esc_row[rows], 100.0 * q.esc_row[rows] / (rows * cols),
           kvq_hqx_isa_name(kvq_hqx_isa_best()));
    const char *names[] = {"dense fp32", "dense bf16", "hqx int8 ref", "hqx int8 avx2", "hqx int8 vnni", "hqx exact",
                           "hqx gemm", "hqx dense prefill"};
    void *gs = aligned_alloc(64, (kvq_hqx_gemm_scratch(&q, ntok) + 63) / 64 * 64);
    const size_t gtb = kvq_hqx_gemm_thread_bytes(&q, ntok);
    uint8_t *gtbuf = aligned_alloc(64, (gtb * (nt > 0 ? nt : omp_get_max_threads()) + 63) / 64 * 64);
    float *dsc = malloc(sizeof(float) * kvq_hqx_dense_scratch(&q, ntok));
    for (int p = 0; p < 8; p++) {
        if (p == 4 && kvq_hqx_isa_best() != KVQ_HQX_ISA_VNNI) continue;
        if (p == 6 && !kvq_hqx_gemm_ok(&q)) continue;
        if (getenv("HQX_BENCH_T128")) kvq_hqx_avx2_t128(atoi(getenv("HQX_BENCH_T128"))); // 0: the generic AVX2 body
        const char *only = getenv("HQX_BENCH_PATHS");
        if (only && !strchr(only, '0' + p)) continue;
        const int nrep = getenv("HQX_BENCH_REPS") ? atoi(getenv("HQX_BENCH_REPS")) : 15;
        double *t = malloc(sizeof(double) * (nrep > 15 ? nrep : 15)), *tc = malloc(sizeof(double) * (nrep > 15 ? nrep : 15));
        int reps = p == 2 ? 3 : nrep > 0 ? nrep : 15;
        for (int r = 0; r < reps; r++) {
            double t0 = omp_get_wtime(), c0 = cpu_s();
            if (p == 0) kvq_matmul(y, x, w, KVQ_DTYPE_F32, ntok, cols, rows, NULL, nt);
            else if (p == 1) kvq_matmul(y, x, wb, KVQ_DTYPE_BF16, ntok, cols, rows, xp, nt);
            else if (p == 7) kvq_hqx_matmul_dense(&q, x, ntok, y, rows, dsc, nt);
            else if (p == 6) {
                for (int k = 0; k < ntok; k++) {
                    kvq_hqx_act_init(&q, buf + ab * k, &act[k]);
                    kvq_hqx_prep(&q, x + k * cols, &act[k]);
                }
                kvq_hqx_gemm_pack(&q, act, ntok, gs);
                const int64_t groups = (rows + 3) / 4;
#pragma omp parallel num_threads(nt > 0 ? nt : omp_get_max_threads())
                {
                    const int64_t n = omp_get_num_threads(), id = omp_get_thread_num();
                    const int64_t g0 = groups * id / n, g1 = groups * (id + 1) / n;
                    kvq_hqx_gemm_rows(&q, act, ntok, gs, y, rows, 4 * g0, 4 * g1 < rows ? 4 * g1 : rows, gtbuf + gtb * id);
                }
            } else {
                for (int k = 0; k < ntok; k++) {
                    kvq_hqx_act_init(&q, buf + ab * k, &act[k]);
                    kvq_hqx_prep(&q, x + k * cols, &act[k]);
                }
                kvq_hqx_isa isa = p == 2 ? KVQ_HQX_ISA_REF : p == 3 ? KVQ_HQX_ISA_AVX2 : KVQ_HQX_ISA_VNNI;
                kvq_hqx_matmul(&q, act, ntok, y, rows, p == 5 ? KVQ_HQX_EXACT : KVQ_HQX_INT8,
                               p == 5 ? kvq_hqx_isa_best() : isa, nt);
            }
            t[r] = omp_get_wtime() - t0;
            tc[r] = cpu_s() - c0;
        }
        qsort(t, reps, sizeof *t, cmpd);
        qsort(tc, reps, sizeof *tc, cmpd);
        double med = t[reps / 2], cmed = tc[reps / 2];
        printf("  %-14s %8.3f ms  %7.2f G weights/s  (CPU %8.3f ms, %7.2f G weights per CPU-s)\n", names[p], 1e3 * med,
               rows * cols * ntok / med / 1e9, 1e3 * cmed, rows * cols * ntok / cmed / 1e9);
        free(t);
        free(tc);
    }
    return 0;
}
