// QET encode/decode speed on an n × d N(0,1) matrix (default 4096 × 4096) at ratio 4 against
// a bf16 source (4 effective bits), with the encode time split between swap tree,
// clustering (both stages) and packing. Usage: build/bench/qet_speed [n] [ratio] [d]
// (n rows = output features, d columns = the swapped and grouped axis; d defaults to n;
// 14336 4 4096 is Llama-3-8B's gate/up, 4096 4 14336 its down). Threads: OMP_NUM_THREADS.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>

#include "libconv/codec/qet/qet.h"

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 4096;
    double ratio = argc > 2 ? atof(argv[2]) : 4.0;
    int64_t d = argc > 3 ? atoll(argv[3]) : n;
    if (n < 1 || d < 1 || ratio < 1) { fprintf(stderr, "usage: qet_speed [n] [ratio] [d]\n"); return 2; }
    float *x = malloc(sizeof(float) * n * d), *out = malloc(sizeof(float) * n * d);
    if (!x || !out) { fprintf(stderr, "qet_speed: out of memory for %lld x %lld\n", (long long)n, (long long)d); return 1; }
    uint64_t s = 1;
    for (int64_t i = 0; i < n * d; i++) { // N(0,1) by Box-Muller, rounded to bf16
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = ((double)(s >> 11) + 0.5) * 0x1.0p-53;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double v = (double)(s >> 11) * 0x1.0p-53;
        x[i] = kvq_bf16_to_f32(kvq_f32_to_bf16((float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v))));
    }
    kvq_qet_config c = kvq_qet_config_default(ratio);
    kvq_encoded e;
    kvq_err err;
    double t[3], t0 = omp_get_wtime();
    if (kvq_qet_encode_timed(&c, KVQ_DTYPE_BF16, x, n, d, 1, 0, &e, t, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double tenc = omp_get_wtime() - t0;
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
    t0 = omp_get_wtime();
    if (kvq_qet_decode(e.params, v, e.n_blob, n, d, out, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double tdec = omp_get_wtime() - t0;
    char *pj = json_dumps(e.params, JSON_COMPACT);
    printf("qet:%g on %lld x %lld bf16, %d threads: %.4f bits/weight, mse %.5g, params %s\n", ratio, (long long)n,
           (long long)d, omp_get_max_threads(), kvq_encoded_bpw(&e, n * d), e.predicted_mse, pj);
    printf("encode %.2f s = swap tree %.2f s + clustering %.2f s + packing %.2f s (+ %.2f s validation/alloc); decode %.2f s\n",
           tenc, t[0], t[1], t[2], tenc - t[0] - t[1] - t[2], tdec);
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a over every blob: old and new encoders must agree
    for (int i = 0; i < e.n_blob; i++)
        for (size_t b = 0; b < e.blob[i].size; b++) h = (h ^ ((const uint8_t *)e.blob[i].data)[b]) * 0x100000001b3ull;
    printf("blobs fnv1a %016llx\n", (unsigned long long)h);
    for (int i = 0; i < e.n_part; i++) printf("  %-12s %8.4f bits/weight\n", e.part[i].name, e.part[i].bits / (double)(n * d));
    free(pj);
    kvq_encoded_free(&e);
    free(x); free(out);
    return 0;
}
