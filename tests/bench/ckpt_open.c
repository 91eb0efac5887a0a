// Benchmark (prints, asserts nothing): time to open and validate each checkpoint given on
// the command line (default: the bundled kvq-tiny-llama), and sha256 throughput over its
// source files. Run: build/bench/ckpt_open [PATH...]
#include <stdio.h>
#include <time.h>

#include "formats/checkpoint.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *def[] = {"tests/models/kvq-tiny-llama"};
    const char **paths = argc > 1 ? (const char **)argv + 1 : def;
    int n = argc > 1 ? argc - 1 : 1;
    for (int i = 0; i < n; i++) {
        kvq_err err = {0};
        kvq_ckpt *c;
        const int reps = 20;
        double t0 = now();
        for (int r = 0; r < reps; r++) {
            if (kvq_ckpt_open(paths[i], &c, &err) != KVQ_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            if (r < reps - 1) kvq_ckpt_close(c);
        }
        double t_open = (now() - t0) / reps;
        uint64_t bytes = 0;
        char hex[65];
        t0 = now();
        for (size_t k = 0; k < kvq_ckpt_nfiles(c); k++) {
            if (kvq_sha256_file(kvq_ckpt_file(c, k)->path, hex, &err) != KVQ_OK) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            bytes += kvq_ckpt_file(c, k)->size;
        }
        double t_sha = now() - t0;
        printf("%-45s %3zu tensors %2zu files  open %.3f ms  sha256 %.1f MB in %.3f s (%.0f MB/s)\n", paths[i],
               kvq_ckpt_count(c), kvq_ckpt_nfiles(c), t_open * 1e3, bytes / 1e6, t_sha, bytes / 1e6 / t_sha);
        kvq_ckpt_close(c);
    }
    return 0;
}
