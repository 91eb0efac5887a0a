// Tokenizer front end: reads the file, picks the back end by content (a JSON object is
// an HF tokenizer.json, anything else is tried as a llama2.c tokenizer.bin), and holds
// the helpers both back ends share (byte buffer, hashed string table, UTF-8).
#include "libconv/tokenizer/tokenizer_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>
#include <xxhash.h>

// ---------------------------------------------------------------- buffer

// optional: a file that does not exist gives KVQ_OK and *data NULL.
static kvq_status read_file(const char *path, int optional, char **data, size_t *n, kvq_err *err) {
    *data = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f && optional && errno == ENOENT) return KVQ_OK;
    if (!f) return kvq_err_set(err, KVQ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    kvq_tok_buf b = {0};
    char chunk[1 << 16];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (kvq_tok_buf_put(&b, chunk, r)) {
            fclose(f);
            kvq_tok_buf_free(&b);
            return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory reading the file", path);
        }
    }
    int bad = ferror(f) ? errno : 0;
    fclose(f);
    if (bad) {
        kvq_tok_buf_free(&b);
        return kvq_err_set(err, KVQ_ERR_IO, "%s: read error: %s", path, strerror(bad));
    }
    if (kvq_tok_buf_put(&b, "", 1)) {
        kvq_tok_buf_free(&b);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory reading the file", path);
    }
    *data = b.b;
    *n = b.n - 1;
    return KVQ_OK;
}

kvq_status kvq_tok_open_mem(const char *name, const void *data, size_t n, const void *config, size_t config_n,
                            kvq_tokenizer **out, kvq_err *err) {
    KVQ_ASSERT(name && out && (data || n == 0));
    *out = NULL;
    kvq_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", name);
    t->bos = t->eos = -1;
    const char *d = data;
    size_t i = 0;
    while (i < n && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r')) i++;
    kvq_status st = i < n && d[i] == '{' ? kvq_tok_hf_open(name, d, n, config, config_n, t, err)
                                         : kvq_tok_llama2c_open(name, d, n, t, err);
    if (st) {
        kvq_tok_close(t);
        return st;
    }
    *out = t;
    return KVQ_OK;
}

kvq_status kvq_tok_open(const char *path, kvq_tokenizer **out, kvq_err *err) {
    KVQ_ASSERT(path && out);
    *out = NULL;
    char *data, *cfg = NULL;
    size_t n, cn = 0;
    kvq_status st = read_file(path, 0, &data, &n, err);
    if (st) return st;
    // tokenizer_config.json beside an HF tokenizer names bos/eos: optional, but one that is
    // there and cannot be read is an error (a silently lost eos would change generation)
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path + 1) : 0;
    char *cp = malloc(dl + sizeof "tokenizer_config.json");
    if (!cp) {
        free(data);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(cp, path, dl);
    strcpy(cp + dl, "tokenizer_config.json");
    st = read_file(cp, 1, &cfg, &cn, err);
    free(cp);
    if (st == KVQ_OK) st = kvq_tok_open_mem(path, data, n, cfg, cn, out, err);
    free(data);
    free(cfg);
    return st;
}

void kvq_tok_close(kvq_tokenizer *t) {
    if (!t) return;
    if (t->ops && t->impl) t->ops->close(t->impl);
    free(t);
}

kvq_status kvq_tok_encode(const kvq_tokenizer *t, const char *text, size_t len, int add_special,
                          int32_t **ids, size_t *n_ids, kvq_err *err) {
    KVQ_ASSERT(t && ids && n_ids && (text || len == 0));
    *ids = NULL;
    *n_ids = 0;
    size_t bad = kvq_tok_utf8_check(text ? text : "", len);
    if (bad != len)
        return kvq_err_set(err, KVQ_ERR_ARG, "tokenizer: input text is not valid UTF-8 at byte %zu",
                           bad);
    return t->ops->encode(t, text ? text : "", len, add_special, ids, n_ids, err);
}

kvq_status kvq_tok_text_check(const char *text, size_t len, kvq_err *err) {
    const char *z = len ? memchr(text, 0, len) : NULL;
    if (z) return kvq_err_set(err, KVQ_ERR_ARG, "byte %zu is a NUL byte: not a text file", (size_t)(z - text));
    size_t bad = kvq_tok_utf8_check(len ? text : "", len);
    if (bad != len) return kvq_err_set(err, KVQ_ERR_ARG, "not valid UTF-8 at byte %zu", bad);
    return KVQ_OK;
}

kvq_status kvq_tok_text_read(const char *path, char **text, size_t *len, kvq_err *err) {
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kvq_err_set(err, KVQ_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (size_t r = 1; r;) {
        if (n == cap) {
            char *p = cap > ((size_t)1 << 40) ? NULL : realloc(buf, (cap = cap ? 2 * cap : (size_t)1 << 20) + 1);
            if (!p) { free(buf); fclose(f); return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path); }
            buf = p;
        }
        n += r = fread(buf + n, 1, cap - n, f);
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return kvq_err_set(err, KVQ_ERR_IO, "%s: read error", path); }
    buf[n] = 0;
    kvq_status s = kvq_tok_text_check(buf, n, err);
    if (s) { free(buf); kvq_err_prefix(err, "%s", path); return s; }
    *text = buf;
    *len = n;
    return KVQ_OK;
}

kvq_status kvq_tok_decode(const kvq_tokenizer *t, const int32_t *ids, size_t n_ids,
                          int skip_special, char **text, kvq_err *err) {
    KVQ_ASSERT(t && text && (ids || n_ids == 0));
    *text = NULL;
    return t->ops->decode(t, ids, n_ids, skip_special, text, err);
}

int kvq_tok_piece(const kvq_tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap) {
    KVQ_ASSERT(t && (buf || cap == 0));
    if (id < 0 || id >= t->n_vocab) return -1;
    return t->ops->piece(t, prev, id, buf, cap);
}

int kvq_tok_vocab_size(const kvq_tokenizer *t) { return t->n_vocab; }
int32_t kvq_tok_bos(const kvq_tokenizer *t) { return t->bos; }
int32_t kvq_tok_eos(const kvq_tokenizer *t) { return t->eos; }
