// Where a model's weights come from, behind one handle: a source checkpoint (HF dir,
// llama2.c .bin) or a converted .kvq whose tensors are decoded through the codec
// table. The runtime and kvq-verify load models only through this.
#ifndef KVQ_WEIGHTS_H
#define KVQ_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/arch.h"
#include "formats/error.h"
#include "formats/tensor.h"
#include "kernels/hq_layout.h"
#include "kernels/pq_layout.h"
#include "libconv/tokenizer/tokenizer.h"

typedef struct kvq_weights kvq_weights;

/** The meaning of an opened .kvq beyond its container and manifest schema (kvq_file_open,
 *  formats/kvqschema.c), checked without decoding a weight: every tensor's codec parameters
 *  against its shape and entry sizes (kvq_codec_check_file), and the KV section's states
 *  rebuilt from their stored tables and checked (kvq_kv_open_from_file; nothing is trained),
 *  and the stored tokenizer parsed and checked against the vocabulary (as kvq-convert checks a
 *  source's). Every tool runs it after kvq_file_open, so none accepts what kvq-run refuses at
 *  load. A payload whose digest disagrees gives KVQ_ERR_DIGEST. */
struct kvq_file;
kvq_status kvq_weights_check_file(struct kvq_file *f, kvq_err *err);

/** Opens path: a directory or .bin (source checkpoint) or a .kvq file (kvq_weights_check_file
 *  included). */
kvq_status kvq_weights_open(const char *path, kvq_weights **out, kvq_err *err);
void kvq_weights_close(kvq_weights *w); // NULL is a no-op

const kvq_arch *kvq_weights_arch(const kvq_weights *w);
/** The path as opened (borrowed until close). */
const char *kvq_weights_path(const kvq_weights *w);
/** 1 if the tensor exists (and fills ndim/shape when non-NULL), else 0. */
int kvq_weights_has(const kvq_weights *w, const char *name, int *ndim, int64_t shape[8]);
/** Number of tensors and the i-th name (sorted by name; borrowed until close). */
size_t kvq_weights_count(const kvq_weights *w);
const char *kvq_weights_name(const kvq_weights *w, size_t i);
/** Decodes a tensor to float32 into a malloc'd buffer the caller frees. */
kvq_status kvq_weights_get_f32(kvq_weights *w, const char *name, float **out, int64_t *numel,
                               kvq_err *err);
/** A tensor held as bf16 where it is stored so (a .kvq's `none` codec over a bf16 source, or a bf16
 *  tensor of a source checkpoint): its bits copied into a malloc'd buffer the caller frees, no trip
 *  through float32 (the same values kvq_weights_get_f32 gives, rounded back: bf16 holds them
 *  exactly). A .kvq's non-finite value is refused as kvq_weights_get_f32 refuses it.
 *  @return KVQ_ERR_UNSUPPORTED when the tensor is stored otherwise (read it as float32 then);
 *  other errors name the file and tensor. */
kvq_status kvq_weights_get_bf16(kvq_weights *w, const char *name, uint16_t **out, int64_t *numel, kvq_err *err);
/** kvq_weights_get_bf16 into dst, which holds n elements (a tensor of another count: KVQ_ERR_FORMAT, naming
 *  the file, the tensor and both counts): row blocks concatenated where they are read (fused qkv, gate_up). */
kvq_status kvq_weights_read_bf16(kvq_weights *w, const char *name, uint16_t *dst, int64_t n, kvq_err *err);
/** The execution layout (kernels/hq_layout.h) of a .kvq's HyperQuant tensor, built from its
 *  Rice stream; arrays owned by *out (kvq_hqx_free). @return KVQ_ERR_UNSUPPORTED when the
 *  tensor has no such layout (another codec, a source checkpoint, a cast...): decode it with
 *  kvq_weights_get_f32 instead; other errors name the file and tensor. */
kvq_status kvq_weights_get_hqx(kvq_weights *w, const char *name, kvq_hqx *out, kvq_err *err);
/** A row-blocked HyperQuant tensor (docs/FORMAT.md "Row-blocked HyperQuant") as at most max row-block
 *  layouts (kvq_hq_pack_block_parts): out[0..*n) from rows row0[..]. *n = 0 (nothing packed) when
 *  the tensor is not row-blocked: kvq_weights_get_hqx then. Arrays owned by out (kvq_hqx_free). */
kvq_status kvq_weights_get_hqx_parts(kvq_weights *w, const char *name, kvq_hqx *out, int max, int *n, int64_t *row0,
                                     kvq_err *err);
/** The PQ execution layout (kernels/pq_layout.h) of a .kvq's `pq` tensor (or `qet` without swap
 *  trees); arrays owned by *out (kvq_pqx_free). @return KVQ_ERR_UNSUPPORTED when the tensor
 *  has no such layout (decode it with kvq_weights_get_f32); other errors name the file and
 *  tensor. */
kvq_status kvq_weights_get_pqx(kvq_weights *w, const char *name, kvq_pqx *out, kvq_err *err);
/** Bytes a .kvq stores for tensor name (its record's "bytes"); 0 for sources or unknown. */
size_t kvq_weights_stored_bytes(const kvq_weights *w, const char *name);
/** Opens the model's tokenizer: a source's tokenizer.json / tok*.bin, or the one a .kvq stores,
 *  read from the container's bytes (no temporary files; the first call takes the one
 *  kvq_weights_open parsed). *out: caller closes (kvq_tok_close).
 *  @return KVQ_ERR_MISSING when there is none; errors reading stored entries name the file
 *  and entry. */
kvq_status kvq_weights_tokenizer(kvq_weights *w, kvq_tokenizer **out, kvq_err *err);
/** Path of a source checkpoint's tokenizer file (borrowed), or NULL (none, or a .kvq). */
const char *kvq_weights_tokenizer_path(const kvq_weights *w);
/** The .kvq manifest (borrowed) when opened from a .kvq, else NULL. */
const json_t *kvq_weights_manifest(const kvq_weights *w);

#endif
