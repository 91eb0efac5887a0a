// Internals shared by the tokenizer back ends (tokenizer_hf.c, tokenizer_llama2c.c):
// the handle's dispatch table, a growable byte buffer, an id <-> string table with an
// xxhash open-addressing index, and UTF-8 helpers. Not a public interface.
#ifndef KVQ_TOKENIZER_INTERNAL_H
#define KVQ_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"
#include "libconv/tokenizer/tokenizer.h"

typedef struct {
    kvq_status (*encode)(const kvq_tokenizer *t, const char *text, size_t len, int add_special,
                         int32_t **ids, size_t *n_ids, kvq_err *err);
    kvq_status (*decode)(const kvq_tokenizer *t, const int32_t *ids, size_t n_ids,
                         int skip_special, char **text, kvq_err *err);
    int (*piece)(const kvq_tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap);
    void (*close)(void *impl);
} kvq_tok_ops;

struct kvq_tokenizer {
    const kvq_tok_ops *ops;
    void *impl;
    int32_t n_vocab; // max id + 1 over model vocab and added tokens
    int32_t bos, eos;
};

// ---- growable buffer (bytes or any POD element type via kvq_tok_buf_put)
typedef struct {
    char *b;
    size_t n, cap;
} kvq_tok_buf;
int kvq_tok_buf_reserve(kvq_tok_buf *b, size_t extra); // 0 or -1 (out of memory)
int kvq_tok_buf_put(kvq_tok_buf *b, const void *p, size_t n);
void kvq_tok_buf_free(kvq_tok_buf *b);

// ---- id <-> string table. Strings may contain any bytes (lengths are explicit).
typedef struct {
    kvq_tok_buf data;     // all strings, each followed by a NUL
    uint64_t *off;   // (n_ids) offset in data, UINT64_MAX when the id has no string
    uint32_t *len;   // (n_ids)
    int32_t n_ids;
    uint32_t *slots; // open addressing: id + 1, 0 = empty
    size_t mask;
} kvq_tok_strtab;
int kvq_tok_strtab_init(kvq_tok_strtab *st, int32_t n_ids);
int kvq_tok_strtab_set(kvq_tok_strtab *st, int32_t id, const char *s, size_t n); // before index
int kvq_tok_strtab_index(kvq_tok_strtab *st); // builds the hash index; on duplicate strings the lowest id wins
int32_t kvq_tok_strtab_find(const kvq_tok_strtab *st, const char *s, size_t n); // -1 if absent
static inline const char *kvq_tok_strtab_get(const kvq_tok_strtab *st, int32_t id, size_t *n) {
    if (id < 0 || id >= st->n_ids || st->off[id] == UINT64_MAX) return NULL;
    *n = st->len[id];
    return st->data.b + st->off[id];
}
void kvq_tok_strtab_free(kvq_tok_strtab *st);

// ---- UTF-8
/** Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid / truncated. */
int kvq_tok_utf8_len(const unsigned char *s, size_t n);
/** Offset of the first invalid byte, or n if s is valid UTF-8. */
size_t kvq_tok_utf8_check(const char *s, size_t n);
/** Appends s to out, replacing each maximal invalid subsequence with U+FFFD (as Rust's
 *  String::from_utf8_lossy, which HF decoders use). */
int kvq_tok_utf8_lossy(kvq_tok_buf *out, const char *s, size_t n);
int kvq_tok_utf8_put(kvq_tok_buf *out, int32_t cp);

// ---- back ends (file content already read; path only for messages)
/** config: the bytes of tokenizer_config.json (bos/eos names), or NULL. */
kvq_status kvq_tok_hf_open(const char *path, const char *data, size_t n, const char *config, size_t config_n,
                           kvq_tokenizer *t, kvq_err *err);
kvq_status kvq_tok_llama2c_open(const char *path, const char *data, size_t n, kvq_tokenizer *t,
                           kvq_err *err);

#endif
