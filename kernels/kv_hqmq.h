// HQMQ's per-chunk code, the one definition the GPU layout (kernels/cuda/kv_attn.h, repacked
// by libconv/kv/kv_gpu.c) and the CPU cache's execution form (kernels/cpu/kvexec.c) share: the
// record's mixed-radix index (libconv/kv/kv_hqmq.c) taken apart once per token into
// code = joint index | radius << ib, ib = ⌈log2 24S⌉ (13, 16, 19 bits for s24:r3, s96:r4, s192:r6).
// CPU execution row (docs/KV.md "Execution form"), 4-byte aligned:
//   fp32 σ/(2^b_r − 1) | nch codes, each uint16 when ib + b_r <= 16, else uint32
#ifndef KVQ_KV_HQMQ_LAYOUT_H
#define KVQ_KV_HQMQ_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KVQ_HQ_HD static __host__ __device__ __forceinline__
#else
#define KVQ_HQ_HD static inline
#endif

/** The chunk code of joint index idx (< 2^ib) and radius step rad. */
KVQ_HQ_HD uint32_t kvq_hqmq_code(uint32_t idx, uint32_t rad, int ib) { return idx | rad << ib; }
KVQ_HQ_HD uint32_t kvq_hqmq_code_idx(uint32_t code, int ib) { return code & ((1u << ib) - 1u); }
KVQ_HQ_HD uint32_t kvq_hqmq_code_rad(uint32_t code, int ib) { return code >> ib; }

/** CPU execution row: bytes of the fp32 scale that opens it, and of the whole row for nch chunks
 *  of bits-wide codes (stored 16 or 32 bits wide). */
#define KVQ_HQMQ_XHEAD 4
KVQ_HQ_HD int kvq_hqmq_xwide(int bits) { return bits > 16; }
KVQ_HQ_HD size_t kvq_hqmq_xbytes(int nch, int bits) { return KVQ_HQMQ_XHEAD + (size_t)nch * (kvq_hqmq_xwide(bits) ? 4 : 2); }

#endif
