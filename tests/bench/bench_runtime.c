// Runtime speed: prefill and decode tokens/s per model and thread count, and the decode
// memory roofline — the time to stream the held weights once, measured in the same
// run — with the ratio decode step / stream (target <= 1.5).
// usage: build/bench/bench_runtime [-t 1,2] [-n 64] [--prefill 128] [MODEL...]
//        (default models: $KVQ_SHARED/models/{kvq-tiny-llama,kvq-small-llama,kvq-small-qwen3,
//        stories260K/stories260K.bin}, else the bundled tests/models/kvq-tiny-llama)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "libconv/runtime/model.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) { qsort(v, n, sizeof *v, cmpd); return v[n / 2]; }

static int bench(const char *path, int threads, int n_dec, int n_pre) {
    kvq_model_opts o = kvq_model_opts_default();
    o.n_threads = threads;
    const int n_ids = (n_pre > 16 ? n_pre : 16) + n_dec; // decode runs after a 16-token prompt
    o.max_ctx = n_ids + 8;
    kvq_model *m;
    kvq_err e = {0};
    if (kvq_model_open(path, &o, &m, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    const kvq_arch *a = kvq_model_arch(m);
    int V = a->vocab_size;
    float *lg = malloc(sizeof(float) * V * (size_t)n_pre);
    int32_t *ids = malloc(sizeof(int32_t) * n_ids);
    for (int i = 0; i < n_ids; i++) ids[i] = (int32_t)((i * 7919u + 13) % (unsigned)V);
    // prefill: n_pre tokens, last-token logits (as generation does), best of 3
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        if (kvq_model_forward(m, ids, n_pre, 0, lg, 0, &e)) { fprintf(stderr, "prefill: %s\n", e.msg); return 1; }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    double pre_tps = n_pre / best;
    // decode: n_dec single-token steps after a 16-token prompt; median step
    double *step = malloc(sizeof(double) * n_dec), *st = malloc(sizeof(double) * 15);
    if (kvq_model_forward(m, ids, 16, 0, lg, 0, &e)) { fprintf(stderr, "prompt: %s\n", e.msg); return 1; }
    for (int i = 0; i < n_dec; i++) {
        double t0 = now();
        if (kvq_model_forward(m, ids + 16 + i, 1, 16 + i, lg, 0, &e)) { fprintf(stderr, "decode: %s\n", e.msg); return 1; }
        step[i] = now() - t0;
    }
    double dec = median(step, n_dec);
    volatile uint64_t sink = 0;
    for (int i = 0; i < 15; i++) {
        double t0 = now();
        sink = sink + kvq_model_stream_weights(m);
        st[i] = now() - t0;
    }
    double stream = median(st, 15);
    size_t wb = kvq_model_weight_bytes(m);
    printf("%-44s t=%d  prefill %8.1f tok/s (T=%d)  decode %8.1f tok/s  step %7.3f ms  stream %7.3f ms "
           "(%6.1f MB, %5.1f GB/s)  step/stream %.2f\n",
           path, threads, pre_tps, n_pre, 1.0 / dec, dec * 1e3, stream * 1e3, wb / 1e6, wb / stream / 1e9, dec / stream);
    fflush(stdout);
    free(step); free(st); free(lg); free(ids);
    kvq_model_close(m);
    return 0;
}

int main(int argc, char **argv) {
    int th[8] = {1, 2}, nth = 2, n_dec = 64, n_pre = 128;
    const char *models[32];
    int nm = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            nth = 0;
            for (char *p = strtok(argv[++i], ","); p && nth < 8; p = strtok(NULL, ",")) th[nth++] = atoi(p);
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_dec = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) n_pre = atoi(argv[++i]);
        else if (nm < 32) models[nm++] = argv[i];
    }
    static char buf[4][512];
    if (!nm) {
        const char *sh = getenv("KVQ_SHARED") ? getenv("KVQ_SHARED") : "../shared";
        const char *names[4] = {"kvq-tiny-llama", "kvq-small-llama", "kvq-small-qwen3", "stories260K/stories260K.bin"};
        struct stat s;
        for (int i = 0; i < 4; i++) {
            snprintf(buf[i], sizeof buf[i], "%s/models/%s", sh, names[i]);
            if (stat(buf[i], &s) == 0) models[nm++] = buf[i];
        }
        if (!nm) models[nm++] = "tests/models/kvq-tiny-llama";
    }
    int rc = 0;
    for (int i = 0; i < nm; i++)
        for (int j = 0; j < nth; j++) rc |= bench(models[i], th[j], n_dec, n_pre);
    return rc;
}
