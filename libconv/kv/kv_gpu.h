// The GPU execution layout of a KV cache (kernels/cuda/kv_attn.h, docs/KV.md): which GPU
// kind a codec state maps to, and the repacking of the CPU codec's records into that
// layout and back (host images of a region), so a cache encoded on the CPU can be uploaded
// and the GPU encoders can be checked byte for byte against the CPU's.
#ifndef KVQ_KV_GPU_H
#define KVQ_KV_GPU_H

#include <stdint.h>

#include "kernels/cuda/kv_attn.h"
#include "libconv/kv/kvcodec.h"

/** The GPU kind of a codec state (fp16, int:<b>, kivi:<b>, turboquant:<b>, qturbo:<b>,
 *  turboquant-prod:<b> values, hqkv, hqmq with or without outliers) with its bits (HQKV: the code width)
 *  in *bits. @return KVQ_OK, or KVQ_ERR_UNSUPPORTED naming the spec when no GPU kernel reads it. */
kvq_status kvq_gkv_kind_of(const kvq_kvcodec *c, kvq_gkv_kind *kind, int *bits, kvq_err *err);
/** Writes one encoded group (c->group positions from pos; KIVI keys: pos a multiple of 32)
 *  into the host image of one (sequence, KV head) region of cap positions. */
void kvq_gkv_pack(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, const uint8_t *rec, int pos, uint8_t *region, int cap);
/** kvq_gkv_pack for a record of n bytes (HQKV's are variable length: give the length the
 *  encoder returned). @return 0, or -1 when the record is damaged or a code does not fit the
 *  layout (HQKV; the row is then zeros), or the outlier pool is full (HQMQO; the token is then
 *  stored without its outlier chunks). HQMQO positions must be packed in order from 0 (a
 *  token's pool offset follows the previous one's). */
int kvq_gkv_pack_n(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, const uint8_t *rec, size_t n, int pos, uint8_t *region, int cap);
/** HQKV: the code width of the GPU layout for lattice lat (kernels/kv_hqkv.h ids) and α√d =
 *  scale: every code the encoder can emit, offset by 2^(width-1), fits (docs/KV.md). */
int kvq_gkv_hqkv_width(int lat, double scale);
/** HQKV: sets the side's lattice, rotation, dither, scale and enc_scale from state c (the
 *  device arrays — signs, Q, seeds — are the caller's). No-op for other codecs. */
void kvq_gkv_hqkv_side(const kvq_kvcodec *c, kvq_gkv_side *s);
/** One per-KV-head table of a GPU side: floats owned by the codec state, n of them. */
typedef struct {
    const float *p;
    size_t n;    // floats of the state's table
    size_t slot; // floats per head in the device array (≥ n; the rest zero: HQMQ's padded codebook)
} kvq_gkv_tab;
/** The tables a GPU side of one state reads (kvq_gkv_side's cb, rho, signs, quat, mat, cxi,
 *  one head's slice each; a table the kind does not read is {NULL, 0, 0}): TURBO cb = the 2^bits
 *  centroids, signs (d), quat (4, qturbo only); TPROD cb = the 2^(bits−1) centroids, signs, mat
 *  = the d×d QJL matrix (regenerated from the seed by the state); OCT/OCTQ cb = the direction
 *  table Oct⁻¹(cξ[a], cξ[b]) (2^(2(bits+1))·3), rho (2^(bits−1)), signs (2d: s1, then s2),
 *  cxi (2^(bits+1)), and the rounding mode in round; HQKV signs (d), mat = Q (d×d, rot=qjl
 *  only), the state's seed in seed (the side's lattice, rotation, dither and scales:
 *  kvq_gkv_hqkv_side); HQMQ cb = the joint codebook (24S rows of 4, in slots of 2^ibits rows),
 *  cxi = the S secondary quaternions (S·4), S in n_sec, the index bits in ibits; HQMQO
 *  the same and the outlier multiplier C in med. */
typedef struct {
    kvq_gkv_tab cb, rho, signs, quat, mat, cxi;
    int round, n_sec, ibits;
    uint64_t seed;
    double med; // HQMQO: the outlier multiplier C
} kvq_gkv_tables;
/** Fills t for state c of GPU kind/bits (kvq_gkv_kind_of). @return 0, or -1 when the kind
 *  reads no tables (fp16, int, kivi) or the state does not match the kind. */
int kvq_gkv_tables_of(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, kvq_gkv_tables *t);
/** Uploads the tables of one side (kind and bits set) gathered over the KV heads' states
 *  st[0..n_kv) (kvq_gkv_tables_of, one slot per head) into new device arrays of sd (cb, rho,
 *  signs, quat, mat, cxi, seeds), and sets its round, n_sec, ibits and HQKV parameters; device
 *  bytes added to *bytes (may be NULL). Nothing for fp16, int, kivi. The arrays are freed by
 *  kvq_gkv_side_free_tables (also after a failure). @return KVQ_OK, KVQ_ERR_UNSUPPORTED when a
 *  state's tables do not fit the kind or differ in shape between heads, or a device error. */
kvq_status kvq_gkv_side_tables(kvq_gkv_side *sd, const kvq_kvcodec *const *st, int n_kv, size_t *bytes, kvq_err *err);
/** Frees the device tables kvq_gkv_side_tables set (not sd->data) and clears them. */
void kvq_gkv_side_free_tables(kvq_gkv_side *sd);
/** The CPU record (c->vt->max_bytes(c) bytes) of the group at pos of a region image. */
void kvq_gkv_unpack(const kvq_kvcodec *c, kvq_gkv_kind kind, int bits, const uint8_t *region, int cap, int pos, uint8_t *rec);

#endif
