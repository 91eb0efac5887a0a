// Tokenizer benchmark: open time and whole heldout-books.txt encode/decode time for the kvq
// models' tokenizers and the real Qwen3 tokenizer (best of 3 runs each). Prints figures,
// asserts nothing. Run: KVQ_SHARED=/work/shared build/bench/bench_tokenizer
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libconv/tokenizer/tokenizer.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
    const char *sh = getenv("KVQ_SHARED");
    if (!sh || !*sh) sh = "../shared";
    char path[4096];
    snprintf(path, sizeof path, "%s/data/heldout-books.txt", sh);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_tokenizer: %s not found (set KVQ_SHARED)\n", path);
        return 0;
    }
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n + 1);
    if (!text || fread(text, 1, n, f) != n) return 1;
    fclose(f);
    const char *toks[] = {"models/kvq-tiny-llama/tokenizer.json", "models/kvq-small-llama/tokenizer.json",
                          "models/kvq-small-qwen3/tokenizer.json", "tokenizers/qwen3/tokenizer.json"};
    printf("heldout-books.txt: %zu bytes; best of 3 runs\n", n);
    printf("%-40s %9s %9s %9s %10s %9s\n", "tokenizer", "open s", "tokens", "encode s", "MB/s", "decode s");
    for (size_t k = 0; k < sizeof toks / sizeof *toks; k++) {
        snprintf(path, sizeof path, "%s/%s", sh, toks[k]);
        double best_open = 1e9, best_enc = 1e9, best_dec = 1e9;
        size_t n_ids = 0;
        for (int rep = 0; rep < 3; rep++) {
            kvq_err e;
            kvq_tokenizer *t;
            double t0 = now();
            if (kvq_tok_open(path, &t, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            double t1 = now();
            int32_t *ids;
            if (kvq_tok_encode(t, text, n, 0, &ids, &n_ids, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            double t2 = now();
            char *back;
            if (kvq_tok_decode(t, ids, n_ids, 0, &back, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            double t3 = now();
            if (t1 - t0 < best_open) best_open = t1 - t0;
            if (t2 - t1 < best_enc) best_enc = t2 - t1;
            if (t3 - t2 < best_dec) best_dec = t3 - t2;
            free(back);
            free(ids);
            kvq_tok_close(t);
        }
        printf("%-40s %9.3f %9zu %9.3f %10.2f %9.3f\n", toks[k], best_open, n_ids, best_enc,
               (double)n / 1e6 / best_enc, best_dec);
    }
    free(text);
    return 0;
}
