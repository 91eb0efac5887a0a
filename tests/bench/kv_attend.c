// Attention time per decode step of the KV-codec cache alone (no model): kvq-small-llama's
// shape (6 layers, 2 KV heads of head_dim 64, 4 query heads each), Gaussian tokens with one
// outlier channel appended up to each context length, then one step = attend for every layer
// and KV head with 4 queries. Prints, per spec and context, the median over rounds of the
// thread CPU time and the wall time of one step (single thread). Builds against any tree with
// the kvcache API, so one source times old and new libraries (docs/RESULTS.md).
// Usage: kv_attend [ROUNDS] SPEC...   (contexts 128, 512, 1024)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libconv/kv/kvcodec.h"

enum { L = 6, H = 2, D = 64, NQ = 4, CTX = 1024 };

static double now(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static void gauss(float *x, size_t n, uint64_t seed) {
    kvq_kvrng r = {seed};
    for (size_t i = 0; i < n; i++) x[i] = (float)kvq_kvrng_normal(&r);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 0, a0 = 2;
    if (rounds <= 0) rounds = 7, a0 = 1;
    if (a0 >= argc) {
        fprintf(stderr, "usage: kv_attend [ROUNDS] SPEC...\n");
        return 2;
    }
    const int ctxs[] = {128, 512, 1024};
    float *k = malloc(sizeof(float) * H * D), *v = malloc(sizeof(float) * H * D), q[NQ * D], out[NQ * D];
    gauss(q, NQ * D, 7);
    printf("| KV cache | context | CPU ms / step (median of %d) | wall ms / step |\n|---|---|---|---|\n", rounds);
    for (int a = a0; a < argc; a++) {
        kvq_kvcache *c = NULL;
        kvq_err e = {0};
        kvq_kvcache_policy p = {0, 0, 42, 0, 0};
        if (kvq_kvcache_codec_new(argv[a], L, H, D, CTX, &p, &c, &e)) {
            fprintf(stderr, "kv_attend: %s: %s\n", argv[a], e.msg);
            return 2;
        }
        int n = 0;
        for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
            for (; n < ctxs[ci]; n++)
                for (int l = 0; l < L; l++) {
                    gauss(k, H * D, 1000 + 2 * (uint64_t)n * L + l);
                    gauss(v, H * D, 1001 + 2 * (uint64_t)n * L + l);
                    for (int i = 0; i < H * D; i++) k[i] += (i % D == 3) * 4.0f; // an outlier channel
                    if (c->ops->append(c, l, n, k, v)) {
                        fprintf(stderr, "kv_attend: %s: %s\n", argv[a], c->err.msg);
                        return 1;
                    }
                }
            // steps per round: about 20 ms of work at the old speeds
            const int reps = 8 + 4096 / ctxs[ci];
            double cpu[64], wall[64];
            for (int r = 0; r < rounds && r < 64; r++) {
                const double c0 = now(CLOCK_THREAD_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
                for (int s = 0; s < reps; s++)
                    for (int l = 0; l < L; l++)
                        for (int h = 0; h < H; h++) c->ops->attend(c, l, h, q, NQ, n, 0.125f, out);
                cpu[r] = (now(CLOCK_THREAD_CPUTIME_ID) - c0) / reps * 1e3, wall[r] = (now(CLOCK_MONOTONIC) - w0) / reps * 1e3;
            }
            qsort(cpu, rounds, sizeof *cpu, cmpd), qsort(wall, rounds, sizeof *wall, cmpd);
            printf("| %s | %d | %.3f | %.3f |\n", argv[a], n, cpu[rounds / 2], wall[rounds / 2]);
            fflush(stdout);
        }
        c->ops->free(c);
    }
    free(k), free(v);
    return 0;
}
