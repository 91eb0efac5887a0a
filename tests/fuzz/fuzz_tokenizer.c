// Fuzz target: tokenizer loading (tokenizer.json or llama2.c tokenizer.bin, sniffed:
// libconv/tokenizer/) on arbitrary bytes; an accepted tokenizer then encodes a fixed text,
// decodes what it encoded and every id up to 300 (and a few out of range), and gives pieces.
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "libconv/tokenizer/tokenizer.h"

static const char text[] = "Once upon a time, there was a little girl named Lily. \xc3\xa9t\xc3\xa9 42 <s>\n\t  x";

KVQ_FUZZ_TARGET(tokenizer) {
    kvq_tokenizer *t = NULL;
    kvq_err err = {0};
    if (kvq_tok_open_mem("tokenizer", data, size, NULL, 0, &t, &err) != KVQ_OK) {
        KVQ_FUZZ_CHECK(err.msg[0]);
        return 0;
    }
    int V = kvq_tok_vocab_size(t);
    KVQ_FUZZ_CHECK(V > 0);
    int32_t *ids = NULL;
    size_t n = 0;
    char *s = NULL;
    if (kvq_tok_encode(t, text, sizeof text - 1, 1, &ids, &n, &err) == KVQ_OK) {
        for (size_t i = 0; i < n; i++) KVQ_FUZZ_CHECK(ids[i] >= 0 && ids[i] < V);
        if (kvq_tok_decode(t, ids, n, 1, &s, &err) == KVQ_OK) free(s);
        free(ids);
    }
    int32_t all[304];
    int m = V < 300 ? V : 300;
    for (int i = 0; i < m; i++) all[i] = i;
    all[m] = -1, all[m + 1] = V, all[m + 2] = INT32_MAX, all[m + 3] = INT32_MIN;
    if (kvq_tok_decode(t, all, (size_t)m, 0, &s, &err) == KVQ_OK) free(s);
    for (int j = 0; j < 4; j++) // out of range: an error, never a read outside the vocabulary
        if (kvq_tok_decode(t, all + m + j, 1, 0, &s, &err) == KVQ_OK) free(s);
    char buf[64];
    for (int i = -1; i <= m; i++) {
        int r = kvq_tok_piece(t, i - 1, i, buf, sizeof buf);
        KVQ_FUZZ_CHECK(r <= (int)sizeof buf);
    }
    KVQ_FUZZ_CHECK(kvq_tok_piece(t, -1, V, buf, sizeof buf) == -1);
    kvq_tok_close(t);
    return 0;
}
