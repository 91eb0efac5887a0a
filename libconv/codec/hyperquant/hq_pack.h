// HyperQuant's execution layout built at load (kernels/hq_layout.h, "hqx"): what kvq-run
// holds for a HyperQuant tensor instead of decoded floats. Design: docs/EXECUTION.md.
#ifndef KVQ_HQ_PACK_H
#define KVQ_HQ_PACK_H

#include "kernels/cpu/hqx.h"
#include "libconv/codec/hyperquant/hyperquant.h"

/** 1 if the tensor can use the execution layout: Rice mode, no cast, tiles a multiple of
 *  64, fewer than 2^20 padded columns. Others are decoded to floats at load. */
int kvq_hq_packable(const kvq_hq_header *h);

/** Transcodes the stored blobs into *out (arrays malloc'd; free with kvq_hqx_free).
 *  vbits 4..8, or 0: the narrowest whose escapes stay under 0.25 % of the values.
 *  n_threads <= 0: OpenMP default. @return KVQ_OK; KVQ_ERR_UNSUPPORTED (not packable, or
 *  values beyond the escapes' range: decode instead); KVQ_ERR_FORMAT (corrupt stream, naming
 *  the group); KVQ_ERR_NOMEM. */
kvq_status kvq_hq_pack(const kvq_hq_header *h, const kvq_blob_view *blobs, int n_blobs, int vbits, int n_threads,
                       kvq_hqx *out, kvq_err *err);

/** One execution layout for a row-blocked tensor (blocks from kvq_hq_blocks_parse): every block
 *  packed at one width (vbits, or the widest any block needs when 0) and concatenated, tile
 *  scales as floats (scode NULL: each block's α is folded into its scales). */
kvq_status kvq_hq_pack_blocks(const kvq_hq_block *blocks, int n, int vbits, int n_threads, kvq_hqx *out, kvq_err *err);

/** The runtime's form of a row-blocked tensor: at most max_parts layouts, each a run of adjacent
 *  blocks at one width (a single block keeps its own scale table and width, the fastest products);
 *  out[g] holds rows from row0[g]. *n_out layouts (caller frees each with kvq_hqx_free). */
kvq_status kvq_hq_pack_block_parts(const kvq_hq_block *blocks, int n, int max_parts, int n_threads, kvq_hqx *out,
                                   int64_t *row0, int *n_out, kvq_err *err);

/** The chunk transcoder's AVX2 path (the same bytes as its scalar loop): on = 0 / 1 turns it
 *  off / on (default on, where the CPU has AVX2), on < 0 only asks; for tests and side-by-side
 *  runs. @return the previous setting. Not thread-safe: set it before packing. */
int kvq_hq_pack_simd(int on);

#endif
