// The RTN baseline's execution layout: rtn:<bits>:g<group> tensors held packed in the hqx
// layout (kernels/hq_layout.h, rotate = 0) instead of decoded floats.
#ifndef KVQ_RTN_H
#define KVQ_RTN_H

#include "kernels/hq_layout.h"
#include "libconv/codec/codec.h"

/** Builds *out (arrays malloc'd; kvq_hqx_free) from an RTN tensor's params and blobs.
 *  @return KVQ_OK; KVQ_ERR_UNSUPPORTED for 8 bits or groups that are not a multiple of 64
 *  (decode those instead); KVQ_ERR_FORMAT for bad blobs; KVQ_ERR_NOMEM. */
kvq_status kvq_rtn_pack(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows, int64_t cols,
                        kvq_hqx *out, kvq_err *err);

#endif
