// Token-id counts of a text slice (issue 22 diagnostics: how skewed an embedding's or lm_head's
// row sensitivities are). Prints "id count" lines for every id of the vocabulary.
// Run: build/bench/tok_counts TOKENIZER.json TEXT [OFFSET] [BYTES] [IDS.bin] > counts.txt
// (IDS.bin: also the ids, int32 LE, for kvq-run --tokens)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libconv/tokenizer/tokenizer.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tok_counts TOKENIZER.json TEXT [OFFSET] [BYTES] [IDS.bin]\n");
        return 2;
    }
    kvq_err e;
    kvq_tokenizer *t;
    char *text;
    size_t len;
    if (kvq_tok_open(argv[1], &t, &e) || kvq_tok_text_read(argv[2], &text, &len, &e)) {
        fprintf(stderr, "tok_counts: %s\n", e.msg);
        return 1;
    }
    size_t off = argc > 3 ? strtoull(argv[3], NULL, 10) : 0, n = argc > 4 ? strtoull(argv[4], NULL, 10) : len;
    if (off > len) off = len;
    if (n > len - off) n = len - off;
    while (off < len && n && (text[off] & 0xC0) == 0x80) off++, n--; // start on a character
    while (n && off + n < len && (text[off + n] & 0xC0) == 0x80) n--;
    int32_t *ids;
    size_t n_ids;
    if (kvq_tok_encode(t, text + off, n, 0, &ids, &n_ids, &e)) {
        fprintf(stderr, "tok_counts: %s\n", e.msg);
        return 1;
    }
    int V = kvq_tok_vocab_size(t);
    long *cnt = calloc((size_t)V, sizeof *cnt);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= 0 && ids[i] < V) cnt[ids[i]]++;
    for (int i = 0; i < V; i++) printf("%d %ld\n", i, cnt[i]);
    if (argc > 5) {
        FILE *f = fopen(argv[5], "wb");
        if (!f || fwrite(ids, sizeof *ids, n_ids, f) != n_ids || fclose(f)) {
            fprintf(stderr, "tok_counts: %s: cannot write\n", argv[5]);
            return 1;
        }
    }
    fprintf(stderr, "tok_counts: %zu bytes, %zu tokens, vocab %d\n", n, n_ids, V);
    free(cnt), free(ids), free(text), kvq_tok_close(t);
    return 0;
}
