// The tensor-core split-K kernel for OCTOPUS keys (kernels/cuda/kv_attn_oct.cu: octopus:2 and :4,
// with or without :qjl, KIVI values of the same width), called by kvq_gkv_attend (kv_attn.cu) for the packed
// chunks in place of attn_tc when kvq_gkv_set_tc_oct / KVQ_CUDA_KV_TC_OCT leave it on; the same
// partial results and fused merge as kv_attn_tc.cu's kernels.
#ifndef KVQ_CUDA_KV_ATTN_OCT_CUH
#define KVQ_CUDA_KV_ATTN_OCT_CUH

#include "kernels/cuda/kv_attn_tc.cuh"

/** The kernel for OCTOPUS keys of kb bits (qjl: with the QJL sign plane, KVQ_GKV_OCTQ) with values kind
 *  vk / vb bits, or NULL: built for kb = 2 and 4 with KIVI values of kb bits (octopus:2, octopus:4, and
 *  :qjl); variant 1: q's fragments in shared memory, 4 blocks an SM (:qjl: 3); 2: in registers, 3 blocks
 *  an SM (the same results, bit for bit; :qjl has variant 1 only, given for both); each keeps the next
 *  tile's loads in flight; no cp.async pipeline. */
const void *kvq_gkv_tc_oct_kernel(int kb, int qjl, int vk, int vb, int variant);
/** Launches it over grid (n_chunks, n_kv, batch) on stream sm: a's fields as for kvq_gkv_tc_launch
 *  (kcb: the direction table (n_kv, 2^(2b+2), 3), ksigns: s1 and s2 (n_kv, 2·d)); rho the triplet-norm
 *  centroids (n_kv, 2^(b−1)), device. @return KVQ_OK or a launch error. */
kvq_status kvq_gkv_tc_oct_launch(const void *fn, const kvq_tc_args *a, const float *rho, int n_chunks, int batch, cudaStream_t sm,
                                 kvq_err *err);

#endif
