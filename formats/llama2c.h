// Internal to formats/: reader for llama2.c .bin checkpoints (7 × int32 header, then fp32
// arrays in llama2.c's order). Exposes the tensors under HF names, as F32, with wq/wk
// permuted from llama2.c's interleaved rotary pairs to HF's half-split layout.
#ifndef KVQ_LLAMA2C_H
#define KVQ_LLAMA2C_H

#include "formats/arch.h"
#include "formats/error.h"
#include "formats/tensor.h"

typedef struct kvq_l2c kvq_l2c;

/** Opens and validates path (file size must match the header exactly).
 *  @return KVQ_OK and *out (close with kvq_l2c_close), or an error naming the file. */
kvq_status kvq_l2c_open(const char *path, kvq_l2c **out, kvq_err *err);
void kvq_l2c_close(kvq_l2c *m); // NULL is a no-op; invalidates every view
const kvq_arch *kvq_l2c_arch(const kvq_l2c *m);
size_t kvq_l2c_count(const kvq_l2c *m);
/** i-th tensor in file order; views into the mmap (wq/wk: into owned permuted copies). */
const kvq_tensor *kvq_l2c_tensor(const kvq_l2c *m, size_t i);

#endif
