// Fuzz target: encode and decode with real tokenizers on arbitrary input. The first byte picks
// the tokenizer (the byte-level BPE of tests/tokenizer/bl_gpt2.json with the Llama-3 split, or
// stories260K's llama2.c tok512.bin when ../shared is there); the rest is encoded as text and
// also read as int32 ids to decode. Encoded ids must be in the vocabulary and decode back.
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "libconv/tokenizer/tokenizer.h"

static const char *const paths[] = {"tests/tokenizer/bl_gpt2.json", "tests/tokenizer/bl_digits.json",
                                    "../shared/models/stories260K/tok512.bin",
                                    "../shared/models/kvq-small-qwen3/tokenizer.json"};
#define NTOK (sizeof paths / sizeof *paths)

KVQ_FUZZ_TARGET(tok_text) {
    static kvq_tokenizer *tok[NTOK];
    static int loaded;
    if (!loaded) {
        loaded = 1;
        for (size_t i = 0; i < NTOK; i++) {
            kvq_err e = {0};
            if (kvq_tok_open(paths[i], &tok[i], &e) != KVQ_OK) tok[i] = NULL; // ../shared absent
        }
        if (!tok[0]) {
            fprintf(stderr, "fuzz_tok_text: cannot open %s (run from the repository root)\n", paths[0]);
            abort();
        }
    }
    if (!size) return 0;
    kvq_tokenizer *t = tok[data[0] % NTOK];
    if (!t) t = tok[0];
    data++, size--;
    kvq_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    char *s = NULL;
    int V = kvq_tok_vocab_size(t);
    if (kvq_tok_encode(t, (const char *)data, size, size & 1, &ids, &n, &err) == KVQ_OK) {
        for (size_t i = 0; i < n; i++) KVQ_FUZZ_CHECK(ids[i] >= 0 && ids[i] < V);
        KVQ_FUZZ_CHECK(kvq_tok_decode(t, ids, n, 1, &s, &err) == KVQ_OK);
        free(s);
        free(ids);
    }
    size_t m = size / 4;
    int32_t *raw = malloc(m * sizeof *raw + 1);
    if (!raw) return 0;
    memcpy(raw, data, m * sizeof *raw);
    int in_range = 1;
    for (size_t i = 0; i < m; i++) {
        if (data[0] & 1) raw[i] = (int32_t)((uint32_t)raw[i] % (uint32_t)(V + 2)) - 1; // mostly valid ids
        in_range &= raw[i] >= 0 && raw[i] < V;
    }
    kvq_status st = kvq_tok_decode(t, raw, m, (int)(size & 2), &s, &err);
    if (st == KVQ_OK) free(s);
    if (in_range) KVQ_FUZZ_CHECK(st == KVQ_OK);
    char buf[16];
    for (size_t i = 0; i < m; i++) KVQ_FUZZ_CHECK(kvq_tok_piece(t, i ? raw[i - 1] : -1, raw[i], buf, sizeof buf) <= 16);
    free(raw);
    return 0;
}
