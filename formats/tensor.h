// A read-only view of one named tensor in a checkpoint: dtype, shape and raw bytes.
// Views point into memory owned by whatever produced them (an mmapped safetensors
// file, a llama2.c loader) and stay valid until that owner is closed.
#ifndef KVQ_TENSOR_H
#define KVQ_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"

#define KVQ_MAX_DIMS 8

typedef struct {
    const char *name;           // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
    kvq_dtype dtype;
    int ndim;
    int64_t shape[KVQ_MAX_DIMS]; // row-major; shape[ndim-1] is the contiguous (input) axis
    const void *data;           // little-endian elements, nbytes long
    size_t nbytes;
} kvq_tensor;

/** Number of elements (product of the shape; 1 for ndim 0). */
int64_t kvq_tensor_numel(const kvq_tensor *t);

#endif
