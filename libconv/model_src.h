// Where the runtime reads a model's tensors from: a thin wrapper so the model code
// does not care whether weights come from a source checkpoint (formats/checkpoint.h)
// or, through libconv/weights.h, from a .kvq. Internal to the runtime.
#ifndef KVQ_MODEL_SRC_H
#define KVQ_MODEL_SRC_H

#include <stdint.h>

#include "formats/arch.h"
#include "formats/error.h"

typedef struct kvq_msrc kvq_msrc;

/** Opens path (HF dir, llama2.c .bin, or .kvq). */
kvq_status kvq_msrc_open(const char *path, kvq_msrc **out, kvq_err *err);
void kvq_msrc_close(kvq_msrc *s); // NULL is a no-op
const kvq_arch *kvq_msrc_arch(const kvq_msrc *s);
const char *kvq_msrc_path(const kvq_msrc *s);
const char *kvq_msrc_tokenizer_path(kvq_msrc *s); // borrowed, may be NULL
int kvq_msrc_has(kvq_msrc *s, const char *name);
/** Tensor as fp32 in a malloc'd buffer (caller frees); a missing tensor is an error
 *  naming the file and the tensor. */
kvq_status kvq_msrc_get_f32(kvq_msrc *s, const char *name, float **out, int64_t *numel, kvq_err *err);

#endif
