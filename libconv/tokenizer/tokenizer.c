// Tokenizer front end: reads the file, picks the back end by content (a JSON object is
// an HF tokenizer.json, anything else is tried as a llama2.c tokenizer.bin), and holds
// the helpers both back ends share (byte buffer, hashed string table, UTF-8).
#include "libconv/tokenizer/tokenizer_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>
#include <xxhash.h>

// ---------------------------------------------------------------- buffer

int kvq_tok_buf_reserve(kvq_tok_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->n) return -1;
    size_t need = b->n + extra;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = realloc(b->b, cap);
    if (!p) return -1;
    b->b = p;
    b->cap = cap;
    return 0;
}

int kvq_tok_buf_put(kvq_tok_buf *b, const void *p, size_t n) {
    if (kvq_tok_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->b + b->n, p, n);
    b->n += n;
    return 0;
}

void kvq_tok_buf_free(kvq_tok_buf *b) {
    free(b->b);
    b->b = NULL;
    b->n = b->cap = 0;
}

// ---------------------------------------------------------------- string table

int kvq_tok_strtab_init(kvq_tok_strtab *st, int32_t n_ids) {
    memset(st, 0, sizeof *st);
    if (n_ids < 0) return -1;
    st->n_ids = n_ids;
    st->off = malloc(((size_t)n_ids + 1) * sizeof *st->off);
    st->len = calloc((size_t)n_ids + 1, sizeof *st->len);
    if (!st->off || !st->len) return -1;
    for (int32_t i = 0; i < n_ids; i++) st->off[i] = UINT64_MAX;
    return 0;
}

int kvq_tok_strtab_set(kvq_tok_strtab *st, int32_t id, const char *s, size_t n) {
    if (id < 0 || id >= st->n_ids || n > UINT32_MAX - 1) return -1;
    st->off[id] = st->data.n;
    st->len[id] = (uint32_t)n;
    if (kvq_tok_buf_put(&st->data, s, n) || kvq_tok_buf_put(&st->data, "", 1)) return -1;
    return 0;
}

int kvq_tok_strtab_index(kvq_tok_strtab *st) {
    size_t cap = 16;
    while (cap < 2 * (size_t)st->n_ids + 16) cap *= 2;
    free(st->slots);
    st->slots = calloc(cap, sizeof *st->slots);
    if (!st->slots) return -1;
    st->mask = cap - 1;
    for (int32_t id = 0; id < st->n_ids; id++) {
        if (st->off[id] == UINT64_MAX) continue;
        const char *s = st->data.b + st->off[id];
        size_t n = st->len[id];
        size_t h = (size_t)XXH3_64bits(s, n) & st->mask;
        for (;; h = (h + 1) & st->mask) {
            uint32_t v = st->slots[h];
            if (v == 0) {
                st->slots[h] = (uint32_t)id + 1;
                break;
            }
            if (st->len[v - 1] == n && memcmp(st->data.b + st->off[v - 1], s, n) == 0) break;
        }
    }
    return 0;
}

int32_t kvq_tok_strtab_find(const kvq_tok_strtab *st, const char *s, size_t n) {
    if (!st->slots) return -1;
    size_t h = (size_t)XXH3_64bits(s, n) & st->mask;
    for (;; h = (h + 1) & st->mask) {
        uint32_t v = st->slots[h];
        if (v == 0) return -1;
        if (st->len[v - 1] == n && memcmp(st->data.b + st->off[v - 1], s, n) == 0)
            return (int32_t)v - 1;
    }
}

void kvq_tok_strtab_free(kvq_tok_strtab *st) {
    kvq_tok_buf_free(&st->data);
    free(st->off);
    free(st->len);
    free(st->slots);
    memset(st, 0, sizeof *st);
}

// ---------------------------------------------------------------- UTF-8

// Length of the valid UTF-8 character at s (utf8proc rejects overlong forms, surrogates
// and truncated sequences), or 0 if there is none.
int kvq_tok_utf8_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    utf8proc_int32_t cp;
    utf8proc_ssize_t l = utf8proc_iterate(s, n > 4 ? 4 : (utf8proc_ssize_t)n, &cp);
    return l > 0 ? (int)l : 0;
}

size_t kvq_tok_utf8_check(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int l = kvq_tok_utf8_len(u + i, n - i);
        if (!l) return i;
        i += (size_t)l;
    }
    return n;
}

// Length of the maximal prefix of a (truncated or broken) sequence at s that could start a
// valid character: Unicode's "maximal subpart", replaced by a single U+FFFD.
static size_t utf8_bad_prefix(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 1;
    size_t i = 1;
    if (i < n && s[i] >= lo && s[i] <= hi) {
        i++;
        while (i < (size_t)len && i < n && (s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

int kvq_tok_utf8_lossy(kvq_tok_buf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n) {
            if (u[j] < 0x80) {
                j++;
                continue;
            }
            int l = kvq_tok_utf8_len(u + j, n - j);
            if (!l) break;
            j += (size_t)l;
        }
        if (kvq_tok_buf_put(out, s + i, j - i)) return -1;
        if (j == n) break;
        if (kvq_tok_buf_put(out, "\xEF\xBF\xBD", 3)) return -1;
        i = j + utf8_bad_prefix(u + j, n - j);
    }
    return 0;
}

int kvq_tok_utf8_put(kvq_tok_buf *out, int32_t cp) {
    unsigned char b[4];
    int n;
    if (cp < 0x80) b[0] = (unsigned char)cp, n = 1;
    else if (cp < 0x800) b[0] = 0xC0 | (cp >> 6), b[1] = 0x80 | (cp & 0x3F), n = 2;
    else if (cp < 0x10000)
        b[0] = 0xE0 | (cp >> 12), b[1] = 0x80 | ((cp >> 6) & 0x3F), b[2] = 0x80 | (cp & 0x3F), n = 3;
    else
        b[0] = 0xF0 | (cp >> 18), b[1] = 0x80 | ((cp >> 12) & 0x3F),
        b[2] = 0x80 | ((cp >> 6) & 0x3F), b[3] = 0x80 | (cp & 0x3F), n = 4;
    return kvq_tok_buf_put(out, b, (size_t)n);
}

// ---------------------------------------------------------------- public entry points

static kvq_status read_file(const char *path, char **data, size_t *n, kvq_err *err) {
    FILE *f = fopen(path, "rb");
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
    int bad = ferror(f);
    fclose(f);
    if (bad || kvq_tok_buf_put(&b, "", 1)) {
        kvq_tok_buf_free(&b);
        return kvq_err_set(err, KVQ_ERR_IO, "%s: read error", path);
    }
    *data = b.b;
    *n = b.n - 1;
    return KVQ_OK;
}

kvq_status kvq_tok_open(const char *path, kvq_tokenizer **out, kvq_err *err) {
    KVQ_ASSERT(path && out);
    *out = NULL;
    char *data;
    size_t n;
    kvq_status st = read_file(path, &data, &n, err);
    if (st) return st;
    kvq_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        free(data);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    }
    t->bos = t->eos = -1;
    size_t i = 0;
    while (i < n && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r')) i++;
    if (i < n && data[i] == '{') st = kvq_tok_hf_open(path, data, n, t, err);
    else st = kvq_tok_llama2c_open(path, data, n, t, err);
    free(data);
    if (st) {
        kvq_tok_close(t);
        return st;
    }
    *out = t;
    return KVQ_OK;
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
