// HQMQ's per-chunk code, the one definition the GPU layout (kernels/cuda/kv_attn.h, repacked
// by libconv/kv/kv_gpu.c) and the CPU cache's execution form (kernels/cpu/kvexec.c) share: the
// record's mixed-radix index (libconv/kv/kv_hqmq.c) taken apart once per token into
// code = joint index | radius << ib, ib = ⌈log2 24S⌉ (13, 16, 19 bits for s24:r3, s96:r4, s192:r6).
// CPU execution row (docs/KV.md "Execution form"), 4-byte aligned:
//   fp32 σ/(2^b_r − 1) | nch codes, each uint16 when ib + b_r <= 16, else uint32
#ifndef KVQ_KV_HQMQ_LAYOUT_H
#define KVQ_KV_HQMQ_LAYOUT_H

#include <math.h>
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


// ---- hqmq:…:med<C> (outliers): the running median's decisions, one source for the CPU encoder
// (libconv/kv/kv_hqmq.c), the GPU encoder and its host emulation (tests/test_cuda_kv.c). Every
// double operation is explicitly rounded on the device (no FMA contraction); exp2/log2 are the
// only library calls (glibc's and CUDA's agree to the double's last bits, and a result is then
// floored or rounded to float, so they differ only within ~1e-16 of a bin edge or float midpoint).
#define KVQ_HQMQ_HBINS 4096 // log2-norm histogram: 64 bins per octave over [-32, 32)
#ifdef __CUDA_ARCH__
#define KVQ_HQ_DADD(a, b) __dadd_rn(a, b)
#define KVQ_HQ_DMUL(a, b) __dmul_rn(a, b)
#define KVQ_HQ_DDIV(a, b) __ddiv_rn(a, b)
#else
#define KVQ_HQ_DADD(a, b) ((a) + (b))
#define KVQ_HQ_DMUL(a, b) ((a) * (b))
#define KVQ_HQ_DDIV(a, b) ((a) / (b))
#endif
/** The histogram bin of a chunk norm r > 0: ⌊(log2 r + 32)·64⌋ clamped to [0, HBINS). */
KVQ_HQ_HD int kvq_hqmq_bin(float r) {
    int b = (int)floor(KVQ_HQ_DMUL(KVQ_HQ_DADD(log2((double)r), 32.0), 64.0));
    return b < 0 ? 0 : b >= KVQ_HQMQ_HBINS ? KVQ_HQMQ_HBINS - 1 : b;
}
/** The median read from bin b where the (n+1)/2-th norm falls: need = (n+1)/2 − the count below
 *  b, cnt = the bin's count; linear inside the bin. */
KVQ_HQ_HD float kvq_hqmq_median_at(int b, uint64_t need, uint32_t cnt) {
    const double f = cnt ? KVQ_HQ_DDIV((double)need, (double)cnt) : 0.5;
    return (float)exp2(KVQ_HQ_DADD(KVQ_HQ_DDIV(KVQ_HQ_DADD((double)b, f), 64.0), -32.0));
}
/** Whether a chunk of norm r is an outlier against median m with multiplier C (> 1). */
KVQ_HQ_HD int kvq_hqmq_is_out(float r, float m, double C) { return m > 0 && (double)r > KVQ_HQ_DMUL(C, (double)m); }
/** GPU layout (kernels/cuda/kv_attn.h KVQ_GKV_HQMQO): the chunk code of the token's j-th outlier,
 *  M = 24S: an index past the joint codebook (whose padded rows are zero), radius 0. Needs
 *  M + nch <= 2^ib (the built S: 576 + 32 <= 1024, 2304 + 32 <= 4096, 4608 + 32 <= 8192). */
KVQ_HQ_HD uint32_t kvq_hqmq_out_code(int M, int j) { return (uint32_t)(M + j); }

#endif
