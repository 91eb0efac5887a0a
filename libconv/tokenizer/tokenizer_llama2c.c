// llama2.c tokenizer.bin back end (e.g. stories260K's tok512.bin). File: int32
// max_token_length, then per token float32 score, int32 len, len bytes; ids are positions.
// Encoding and decoding follow run.c's encode() and decode(): dummy-prefix " ", code points
// looked up whole or as <0xXX> byte tokens (id 3 + byte), then greedy best-score merges.
#include "libconv/tokenizer/tokenizer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { L2C_UNK = 0, L2C_BOS = 1, L2C_EOS = 2, L2C_BYTE0 = 3 };

typedef struct {
    kvq_tok_strtab vocab;
    float *score; // (n)
    int32_t n;
} l2c_tok;

static void l2c_close(void *impl) {
    l2c_tok *l = impl;
    if (!l) return;
    kvq_tok_strtab_free(&l->vocab);
    free(l->score);
    free(l);
}

// Looks up the concatenation of tokens a and b (run.c: sprintf "%s%s" + str_lookup).
static int32_t pair_id(const l2c_tok *l, int32_t a, int32_t b, kvq_tok_buf *tmp) {
    size_t na = 0, nb = 0;
    const char *sa = kvq_tok_strtab_get(&l->vocab, a, &na), *sb = kvq_tok_strtab_get(&l->vocab, b, &nb);
    tmp->n = 0;
    if (!sa || !sb || kvq_tok_buf_put(tmp, sa, na) || kvq_tok_buf_put(tmp, sb, nb)) return -1;
    return kvq_tok_strtab_find(&l->vocab, tmp->b, tmp->n);
}

static kvq_status l2c_encode(const kvq_tokenizer *t, const char *text, size_t len, int add_special,
                             int32_t **ids, size_t *n_ids, kvq_err *err) {
    const l2c_tok *l = t->impl;
    kvq_tok_buf v = {0}, pid = {0}, tmp = {0};
    int rc = 0;
    int32_t id;
    if (add_special) rc |= kvq_tok_buf_put(&v, &(int32_t){L2C_BOS}, sizeof(int32_t));
    if (len > 0 && (id = kvq_tok_strtab_find(&l->vocab, " ", 1)) >= 0) rc |= kvq_tok_buf_put(&v, &id, sizeof id);
    const size_t start = 0; // merges run over the whole list, BOS included, as in run.c
    for (size_t i = 0; i < len && !rc;) {
        size_t n = 1; // a lead byte plus up to 3 continuation bytes
        while (i + n < len && ((unsigned char)text[i + n] & 0xC0) == 0x80 && n < 4) n++;
        if ((id = kvq_tok_strtab_find(&l->vocab, text + i, n)) >= 0) rc |= kvq_tok_buf_put(&v, &id, sizeof id);
        else
            for (size_t k = 0; k < n; k++) {
                int32_t b = (unsigned char)text[i + k] + L2C_BYTE0;
                rc |= kvq_tok_buf_put(&v, &b, sizeof b);
            }
        i += n;
    }
    // greedy merges: repeatedly the adjacent pair whose merge has the highest score (leftmost on
    // ties). Each pair's merge is cached, so a step is a scan plus two lookups.
    int32_t *tok = (int32_t *)v.b;
    size_t nt = v.n / sizeof(int32_t);
    if (!rc && nt > 1) rc = kvq_tok_buf_reserve(&pid, nt * sizeof(int32_t));
    int32_t *pm = (int32_t *)pid.b;
    for (size_t i = start; !rc && i + 1 < nt; i++) pm[i] = pair_id(l, tok[i], tok[i + 1], &tmp);
    while (!rc && nt > 1) {
        float best = -1e10f;
        size_t bi = SIZE_MAX;
        for (size_t i = start; i + 1 < nt; i++)
            if (pm[i] >= 0 && l->score[pm[i]] > best) best = l->score[pm[i]], bi = i;
        if (bi == SIZE_MAX) break;
        tok[bi] = pm[bi];
        memmove(tok + bi + 1, tok + bi + 2, (nt - bi - 2) * sizeof *tok);
        memmove(pm + bi + 1, pm + bi + 2, (nt - bi - 2) * sizeof *pm);
        nt--;
        if (bi > start) pm[bi - 1] = pair_id(l, tok[bi - 1], tok[bi], &tmp);
        if (bi + 1 < nt) pm[bi] = pair_id(l, tok[bi], tok[bi + 1], &tmp);
    }
    kvq_tok_buf_free(&pid);
    kvq_tok_buf_free(&tmp);
    if (rc) {
        kvq_tok_buf_free(&v);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "tokenizer: out of memory encoding %zu bytes", len);
    }
    *n_ids = nt;
    *ids = v.b ? (int32_t *)v.b : malloc(sizeof(int32_t));
    if (!*ids) return kvq_err_set(err, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    return KVQ_OK;
}

// run.c decode(): drop a leading space after BOS (here also at the start of the text, prev
// -1), and turn "<0xXX>" into its raw byte.
static int l2c_piece_str(const l2c_tok *l, int32_t prev, int32_t id, const char **s, size_t *n,
                         unsigned char *byte) {
    const char *p = kvq_tok_strtab_get(&l->vocab, id, n);
    if (!p) return -1;
    if ((prev == L2C_BOS || prev < 0) && *n > 0 && p[0] == ' ') p++, (*n)--;
    unsigned v;
    char close;
    if (*n == 6 && sscanf(p, "<0x%02X%c", &v, &close) == 2 && close == '>') {
        *byte = (unsigned char)v;
        p = (const char *)byte;
        *n = 1;
    }
    *s = p;
    return 0;
}

static int l2c_piece(const kvq_tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap) {
    const char *s;
    size_t n;
    unsigned char byte;
    if (l2c_piece_str(t->impl, prev, id, &s, &n, &byte)) return -1;
    if (n > cap) n = cap;
    memcpy(buf, s, n);
    return (int)n;
}

static kvq_status l2c_decode(const kvq_tokenizer *t, const int32_t *ids, size_t n_ids,
                             int skip_special, char **text, kvq_err *err) {
    kvq_tok_buf raw = {0}, out = {0};
    int rc = 0;
    for (size_t i = 0; i < n_ids && !rc; i++) {
        const char *s;
        size_t n;
        unsigned char byte;
        if (skip_special && ids[i] >= L2C_UNK && ids[i] <= L2C_EOS) continue;
        if (l2c_piece_str(t->impl, i ? ids[i - 1] : -1, ids[i], &s, &n, &byte)) continue;
        rc = kvq_tok_buf_put(&raw, s, n);
    }
    if (!rc) rc = kvq_tok_utf8_lossy(&out, raw.b, raw.n);
    if (!rc) rc = kvq_tok_buf_put(&out, "", 1);
    kvq_tok_buf_free(&raw);
    if (rc) {
        kvq_tok_buf_free(&out);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "tokenizer: out of memory decoding %zu ids", n_ids);
    }
    *text = out.b;
    return KVQ_OK;
}

static const kvq_tok_ops l2c_ops = {l2c_encode, l2c_decode, l2c_piece, l2c_close};

kvq_status kvq_tok_llama2c_open(const char *path, const char *data, size_t n, kvq_tokenizer *t,
                           kvq_err *err) {
    const char *what = "neither a tokenizer.json (JSON object) nor a llama2.c tokenizer.bin";
    int32_t maxlen;
    if (n < 4) return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: %s: only %zu bytes", path, what, n);
    memcpy(&maxlen, data, 4);
    if (maxlen <= 0 || maxlen > (1 << 20))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: %s: max_token_length %d", path, what, maxlen);
    // first pass: count and check the records
    int32_t count = 0;
    for (size_t at = 4; at < n; count++) {
        int32_t len;
        if (n - at < 8)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: %s: token %d record truncated at byte %zu", path, what, count, at);
        memcpy(&len, data + at + 4, 4);
        float score;
        memcpy(&score, data + at, 4);
        if (!isfinite(score)) // merges pick the highest score: a NaN has no order
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: %s: token %d score is not finite", path, what, count);
        if (len < 0 || len > maxlen || (size_t)len > n - at - 8)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: %s: token %d length %d (max_token_length %d, %zu bytes left)",
                               path, what, count, len, maxlen, n - at - 8);
        at += 8 + (size_t)len;
        if (count == INT32_MAX - 1) return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: too many tokens", path);
    }
    if (count < L2C_BYTE0 + 256)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: %s: %d tokens, fewer than the 259 (specials + bytes) it needs",
                           path, what, count);
    l2c_tok *l = calloc(1, sizeof *l);
    if (!l) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    t->ops = &l2c_ops;
    t->impl = l;
    l->n = count;
    l->score = malloc((size_t)count * sizeof *l->score);
    if (!l->score || kvq_tok_strtab_init(&l->vocab, count))
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    size_t at = 4;
    for (int32_t i = 0; i < count; i++) {
        int32_t len;
        memcpy(&l->score[i], data + at, 4);
        memcpy(&len, data + at + 4, 4);
        if (kvq_tok_strtab_set(&l->vocab, i, data + at + 8, (size_t)len))
            return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
        at += 8 + (size_t)len;
    }
    if (kvq_tok_strtab_index(&l->vocab)) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    t->n_vocab = count;
    t->bos = L2C_BOS;
    t->eos = L2C_EOS;
    return KVQ_OK;
}
