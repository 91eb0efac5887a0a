// safetensors reader (mmap, validated header) and writer (atomic temp + rename).
// Reader checks: 8-byte LE header length within the file, JSON header, known dtypes,
// data_offsets inside the data area, ordered, non-overlapping, equal to numel × size.
#ifndef KVQ_SAFETENSORS_H
#define KVQ_SAFETENSORS_H

#include "formats/error.h"
#include "formats/tensor.h"

typedef struct kvq_st kvq_st;

/** Opens and validates a .safetensors file; tensors are views into its mmap (data is
 *  only as aligned as the file makes it: 8 bytes for files the Python package wrote).
 *  Rules and choices: docs/CHECKPOINTS.md.
 *  @return KVQ_OK and *out (close with kvq_st_close), or an error naming path. */
kvq_status kvq_st_open(const char *path, kvq_st **out, kvq_err *err);
void kvq_st_close(kvq_st *st); // NULL is a no-op; invalidates every view

size_t kvq_st_count(const kvq_st *st);
/** i-th tensor in file order (by data offset). */
const kvq_tensor *kvq_st_tensor(const kvq_st *st, size_t i);
/** Tensor by name, or NULL. */
const kvq_tensor *kvq_st_find(const kvq_st *st, const char *name);
/** A string from __metadata__, or NULL. */
const char *kvq_st_metadata(const kvq_st *st, const char *key);
const char *kvq_st_path(const kvq_st *st);

/** Writes tensors to path via a temporary file in the same directory, fsync and rename.
 *  meta: NULL or a NULL-terminated list of key, value, key, value... for __metadata__.
 *  Layout: F32, then BF16, then F16 tensors, each group by name, header padded with spaces
 *  to 8 bytes: the Python package's bytes for the same tensors, whatever the input order.
 *  The caller keeps ownership of tensors; nothing is left under a temporary name on failure. */
kvq_status kvq_st_write(const char *path, const kvq_tensor *tensors, size_t n,
                        const char *const *meta, kvq_err *err);

#endif
