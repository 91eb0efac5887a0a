// A source checkpoint, whatever its on-disk form: an HF directory (config.json,
// model.safetensors or model.safetensors.index.json + shards, tokenizer.json) or a
// llama2.c .bin file (tok*.bin beside it). Tensors carry HF names; llama2.c wq/wk
// are permuted to HF's half-split rotary layout so one forward pass serves both.
#ifndef KVQ_CHECKPOINT_H
#define KVQ_CHECKPOINT_H

#include <stdint.h>

#include "formats/arch.h"
#include "formats/error.h"
#include "formats/tensor.h"

typedef struct kvq_ckpt kvq_ckpt;

typedef enum { KVQ_CKPT_HF = 0, KVQ_CKPT_LLAMA2C = 1 } kvq_ckpt_kind;

typedef struct {
    const char *path;    // as opened
    const char *name;    // base name, as recorded in the manifest
    uint64_t size;
    const char *role;    // "weights", "index", "config", "tokenizer", "tokenizer_config", "generation_config"
} kvq_srcfile;

/** Opens a checkpoint directory or llama2.c .bin file and reads its architecture.
 *  Tensors stay mmapped (HF) or are held once in fp32 (llama2.c). */
kvq_status kvq_ckpt_open(const char *path, kvq_ckpt **out, kvq_err *err);
void kvq_ckpt_close(kvq_ckpt *c); // NULL is a no-op

kvq_ckpt_kind kvq_ckpt_get_kind(const kvq_ckpt *c);
const kvq_arch *kvq_ckpt_arch(const kvq_ckpt *c);
size_t kvq_ckpt_count(const kvq_ckpt *c);
/** i-th tensor, in a stable order (sorted by name). Valid until kvq_ckpt_close. */
const kvq_tensor *kvq_ckpt_tensor(const kvq_ckpt *c, size_t i);
const kvq_tensor *kvq_ckpt_find(const kvq_ckpt *c, const char *name);

/** Source files (weights, index, config, tokenizer...) for the manifest. */
size_t kvq_ckpt_nfiles(const kvq_ckpt *c);
const kvq_srcfile *kvq_ckpt_file(const kvq_ckpt *c, size_t i);
/** Path of tokenizer.json (HF) or tok*.bin (llama2.c), or NULL if there is none. */
const char *kvq_ckpt_tokenizer_path(const kvq_ckpt *c);

/** sha256 of a file as 64 lowercase hex chars + NUL (OpenSSL EVP). */
kvq_status kvq_sha256_file(const char *path, char hex[65], kvq_err *err);

#endif
