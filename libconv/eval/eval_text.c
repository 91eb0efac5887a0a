// Perplexity of a text file: read, tokenize whole (as HF tokenizes the held-out text
// for the cards: one encode call, no special tokens), then kvq_eval_tokens.
#include <stdio.h>
#include <stdlib.h>

#include "libconv/eval/eval.h"

kvq_status kvq_eval_tokenize_file(const kvq_tokenizer *tok, const char *path, int32_t **ids,
                                  size_t *n, kvq_err *err) {
    *ids = NULL;
    *n = 0;
    char *buf;
    size_t len;
    kvq_status r = kvq_tok_text_read(path, &buf, &len, err);
    if (r) return r;
    r = kvq_tok_encode(tok, buf, len, 0, ids, n, err);
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
