// Helpers every tokenizer back end uses: the growable byte buffer, the hashed string table,
// UTF-8 length/validation/lossy repair. Apart from the front end (tokenizer.c) so the back
// ends depend on them without depending on the front end that dispatches to them.
#include "libconv/tokenizer/tokenizer_internal.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

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

