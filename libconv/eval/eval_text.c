// Perplexity of a text file: read, tokenize whole (as HF tokenizes the held-out text
// for the cards: one encode call, no special tokens), then kvq_eval_tokens.
#include <stdio.h>
#include <stdlib.h>

#include "libconv/eval/eval.h"

kvq_status kvq_eval_tokenize_file(const kvq_tokenizer *tok, const char *path, int32_t **ids,
                                  size_t *n, kvq_err *err) {
    *ids = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kvq_err_set(err, KVQ_ERR_IO, "%s: cannot open", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *p = realloc(buf, cap);
            if (!p) { free(buf); fclose(f); return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path); }
            buf = p;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return kvq_err_set(err, KVQ_ERR_IO, "%s: read error", path); }
    kvq_status r = kvq_tok_text_check(buf, len, err);
    if (!r) r = kvq_tok_encode(tok, buf, len, 0, ids, n, err);
    free(buf);
    if (r) kvq_err_prefix(err, "%s", path);
    return r;
}

kvq_status kvq_eval_text(kvq_model *a, kvq_model *b, const kvq_tokenizer *tok, const char *path,
                         const kvq_eval_protocol *p, kvq_eval_cb cb, void *user,
                         kvq_eval_result *ra, kvq_eval_result *rb, size_t *n_text_tokens,
                         kvq_err *err) {
    int32_t *ids;
    size_t n;
    kvq_status r = kvq_eval_tokenize_file(tok, path, &ids, &n, err);
    if (r) return r;
    if (n_text_tokens) *n_text_tokens = n;
    r = kvq_eval_tokens(a, b, ids, n, p, cb, user, ra, rb, err);
    if (r) kvq_err_prefix(err, "%s", path);
    free(ids);
    return r;
}
