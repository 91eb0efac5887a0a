// Internal types of the HF tokenizer.json back end, shared by its loader
// (tokenizer_hf_load.c) and its encode/decode pipeline (tokenizer_hf.c).
#ifndef KVQ_TOKENIZER_HF_H
#define KVQ_TOKENIZER_HF_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include "libconv/tokenizer/tokenizer_internal.h"

enum { HF_REMOVED, HF_ISOLATED, HF_MERGED_PREV, HF_MERGED_NEXT, HF_CONTIGUOUS }; // Split behaviour
enum { HF_PREPEND_ALWAYS, HF_PREPEND_FIRST, HF_PREPEND_NEVER };                  // Metaspace

typedef enum {
    HF_N_NFC, HF_N_NFD, HF_N_NFKC, HF_N_NFKD, HF_N_LOWER, HF_N_REPLACE, HF_N_PREPEND, HF_N_STRIP,
    HF_N_STRIP_ACCENTS, HF_N_SEQ
} hf_norm_type;
typedef struct hf_norm {
    hf_norm_type type;
    pcre2_code *re;          // Replace
    char *content;           // Replace / Prepend
    size_t clen;
    int left, right;         // Strip
    struct hf_norm *sub;     // Sequence
    int n_sub;
} hf_norm;

typedef enum { HF_P_SPLIT, HF_P_BYTELEVEL, HF_P_METASPACE, HF_P_SEQ } hf_pretok_type;
typedef struct hf_pretok {
    hf_pretok_type type;
    pcre2_code *re;          // Split pattern; Metaspace: the replacement as a literal
    int behavior, invert;    // Split
    int add_prefix_space, use_regex; // ByteLevel
    char repl[8];            // Metaspace replacement (UTF-8)
    int repl_len, scheme, split;
    struct hf_pretok *sub;
    int n_sub;
} hf_pretok;

typedef enum {
    HF_D_BYTELEVEL, HF_D_METASPACE, HF_D_BYTEFALLBACK, HF_D_FUSE, HF_D_STRIP, HF_D_REPLACE, HF_D_SEQ
} hf_dec_type;
typedef struct hf_dec {
    hf_dec_type type;
    char repl[8];            // Metaspace
    int repl_len, scheme;
    pcre2_code *re;          // Replace
    char *content;           // Replace, Strip
    size_t clen;
    int start, stop;         // Strip
    struct hf_dec *sub;
    int n_sub;
} hf_dec;

typedef struct {
    int32_t id;
    char *content, *ncontent; // ncontent: content after the normalizer (for normalized tokens)
    size_t len, nlen;
    int special, lstrip, rstrip, single_word, normalized;
} hf_added;

// Added tokens of one kind (normalized or not), chained by first byte, longest first.
typedef struct {
    int n;
    int first[256];
    int *next, *order; // (n)
} hf_added_index;

typedef struct {
    kvq_tok_strtab vocab;                   // model vocab (not the added tokens)
    int32_t n_ids;                     // = kvq_tokenizer.n_vocab
    uint64_t *mkey;                    // merges: (a << 32 | b), UINT64_MAX = empty slot
    uint32_t *mrank;
    int32_t *mnew;
    size_t mmask;
    int byte_fallback, ignore_merges, fuse_unk;
    int32_t unk;
    char *prefix, *suffix;             // continuing_subword_prefix, end_of_word_suffix
    size_t prefix_len, suffix_len;
    hf_norm *norm;
    hf_pretok *pre;
    hf_dec *dec;
    hf_added *added;
    int n_added;
    int32_t *added_of;                 // (n_ids) index into added, or -1
    hf_added_index aix[2];             // [0] matched on raw text, [1] on normalized text
    int32_t *pre_ids, *post_ids;       // post-processor template around the sequence
    int n_pre, n_post;
    pcre2_code *bl_re;                 // the GPT-2 regex of ByteLevel(use_regex)
    pcre2_code *word_re;               // one Rust-regex \w character (single_word added tokens)
    unsigned char bl_enc[256][3];      // byte -> UTF-8 of its stand-in char (NUL padded)
    int16_t bl_dec[324];               // stand-in code point -> byte, -1 if none
} hf_tok;

// ---- encode/decode scratch, one per call (so the handle stays read-only and shareable)
typedef struct {
    size_t off, len;
    int32_t id;  // >= 0: an added token, final
    int origin;  // starts at offset 0 of the original text (Metaspace prepend_scheme "first")
} hf_piece;
typedef struct {
    hf_piece *v;
    size_t n, cap;
} hf_pieces;
typedef struct {
    size_t s, e;
    int m;
} hf_span;
typedef struct {
    uint64_t hash;
    size_t off, ids_off;
    uint32_t len, n_ids; // len UINT32_MAX: empty
} hf_cache_slot;
#define HF_CACHE_MAX_WORD 256

typedef struct {
    kvq_tok_buf arena;                     // all piece strings of this call
    kvq_tok_buf scratch, scratch2, spans, sym, links, heap, ids, cache_ids;
    hf_cache_slot *cache;
    size_t cmask, cache_used;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
} hf_ctx;

extern const kvq_tok_ops kvq_tok_hf_ops;
/** Encodes text with the HF pipeline (tokenizer_hf.c); the ops' encode. */
kvq_status kvq_tok_hf_encode(const kvq_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                             size_t *n_ids, kvq_err *err);

// shared by tokenizer_hf.c and tokenizer_hf_decode.c (0 = ok, -1 = out of memory, -2 = regex failure)
int kvq_tok_hf_ctx_init(hf_ctx *c, size_t cache_slots);
void kvq_tok_hf_ctx_free(hf_ctx *c);
int32_t kvq_tok_hf_cp_at(const char *s, size_t n, size_t *len); // code point at s (valid UTF-8), its length
int kvq_tok_hf_pieces_push(hf_pieces *p, size_t off, size_t len, int32_t id, int origin);
int kvq_tok_hf_push_new(hf_ctx *c, hf_pieces *out, const char *s, size_t n, int origin); // copies s into the arena
int kvq_tok_hf_replace_all(hf_ctx *c, const pcre2_code *re, const char *s, size_t n, const char *rep, size_t rn,
                      kvq_tok_buf *out);
kvq_status kvq_tok_hf_decode(const kvq_tokenizer *t, const int32_t *ids, size_t n_ids, int skip_special,
                        char **text, kvq_err *err);
int kvq_tok_hf_piece(const kvq_tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap);
void kvq_tok_hf_free(hf_tok *h);
/** Runs the normalizer over s in place (no-op without one). 0, -1 no memory, -2 failure. */
int kvq_tok_hf_normalize(const hf_tok *h, kvq_tok_buf *s);

#endif
