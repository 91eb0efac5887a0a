// Tokenizers: HF tokenizer.json (byte-level BPE with Split/PCRE2 pre-tokenizers, NFC,
// added/special tokens, SentencePiece-style Metaspace/byte_fallback, post-processor
// template) and the llama2.c tokenizer.bin format. Chosen by the file's content.
#ifndef KVQ_TOKENIZER_H
#define KVQ_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"

typedef struct kvq_tokenizer kvq_tokenizer;

/** Opens tokenizer.json or a llama2.c tokenizer.bin, with the tokenizer_config.json beside it
 *  when there is one (HF bos/eos names). *out: caller closes. @return KVQ_OK, or an error
 *  naming the file: unreadable (the config too, when present), malformed, unsupported. */
kvq_status kvq_tok_open(const char *path, kvq_tokenizer **out, kvq_err *err);
/** Opens a tokenizer from bytes in memory (a tokenizer.json or a llama2.c tok*.bin; the
 *  kind is sniffed). name appears in messages. config: tokenizer_config.json's bytes (HF
 *  bos/eos names; consulted when the post-processor names no BOS/EOS, and then it must be
 *  valid JSON), or NULL. The bytes stay the caller's; *out: caller closes. */
kvq_status kvq_tok_open_mem(const char *name, const void *data, size_t n, const void *config, size_t config_n,
                            kvq_tokenizer **out, kvq_err *err);
void kvq_tok_close(kvq_tokenizer *t); // NULL is a no-op

/** Encodes UTF-8 text. add_special: apply the post-processor template (BOS/EOS) as
 *  HF's encode(add_special_tokens=True) does. *ids is malloc'd (caller frees). */
kvq_status kvq_tok_encode(const kvq_tokenizer *t, const char *text, size_t len, int add_special,
                          int32_t **ids, size_t *n_ids, kvq_err *err);

/** Checks that bytes read from a text file are a text: valid UTF-8 and no NUL byte (a binary
 *  file given as a text would otherwise be scored or calibrated on as if it were one). The
 *  message names the first offending byte; the caller prefixes the file's name. Every tool
 *  that reads a text file calls it (kvq-verify --text, kvq-run --ppl, the calibration text). */
kvq_status kvq_tok_text_check(const char *text, size_t len, kvq_err *err);
/** Reads a whole text file into *text (malloc'd, NUL-terminated, *len bytes) and checks it
 *  with kvq_tok_text_check; every error names the file. On error *text is NULL. */
kvq_status kvq_tok_text_read(const char *path, char **text, size_t *len, kvq_err *err);

/** Decodes ids to NUL-terminated UTF-8 (malloc'd), as HF decode(skip_special_tokens). */
kvq_status kvq_tok_decode(const kvq_tokenizer *t, const int32_t *ids, size_t n_ids,
                          int skip_special, char **text, kvq_err *err);

/** Raw bytes one token contributes to the output (for streaming); prev is the id
 *  before it or -1 (SentencePiece-style tokenizers drop a leading space after BOS).
 *  @return number of bytes written (at most cap), or -1 for an invalid id. */
int kvq_tok_piece(const kvq_tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap);

int kvq_tok_vocab_size(const kvq_tokenizer *t);
int32_t kvq_tok_bos(const kvq_tokenizer *t); // -1 if none
int32_t kvq_tok_eos(const kvq_tokenizer *t); // -1 if none

#endif
