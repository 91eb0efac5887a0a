// The GPU execution layout of a KV cache (kernels/cuda/kv_attn.h, docs/KV.md): which GPU
// kind a codec state maps to, and the repacking of the CPU codec's records into that
// layout and back (host images of a region), so a cache encoded on the CPU can be uploaded
// and the GPU encoders can be checked byte for byte against the CPU's.
#ifndef KVQ_KV_GPU_H
#define KVQ_KV_GPU_H

#include <stdint.h>

#include "kernels/cuda/kv_attn.h"
#include "libconv/kv/kvcodec.h"

/** The GPU kind of a codec state (fp16, int:<b>, kivi:<b>, turboquant:<b>) with its bits
 *  in *bits. @return KVQ_OK, or KVQ_ERR_UNSUPPORTED naming the spec when no GPU kernel reads it. */
kvq_status kvq_gkv_kind_of(const kvq_kvcodec *c, kvq_gkv_kind *kind, int *bits, kvq_err *err);
/** Writes one encoded group (c->group positions from pos; KIVI keys: pos a multiple of 32)
 *  into the host image of one (sequence, KV head) region of cap positions. */
void kvq_gkv_pack(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, const uint8_t *rec, int pos, uint8_t *region, int cap);
/** The CPU record (c->vt->max_bytes(c) bytes) of the group at pos of a region image. */
void kvq_gkv_unpack(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, const uint8_t *region, int cap, int pos, uint8_t *rec);

#endif
