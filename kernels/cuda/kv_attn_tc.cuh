// The tensor-core split-K kernels of kernels/cuda/kv_attn_tc.cu (int and KIVI at 2 and 4 bits,
// keys and values alike), called by kvq_gkv_attend (kv_attn.cu) for the packed chunks when
// kvq_gkv_set_tc / KVQ_CUDA_KV_TC turn them on; they write the same per-chunk partial results
// (Σ p·V, max, sum) as attn_split, which attn_merge merges.
#ifndef KVQ_CUDA_KV_ATTN_TC_CUH
#define KVQ_CUDA_KV_ATTN_TC_CUH

#include <cuda_runtime.h>

#include "kernels/cuda/kv_attn.h"

struct kvq_tc_args {
    const float *q;                // (batch, n_heads, D) fp32
    const uint8_t *kbase, *vbase;  // regions of (sequence 0, KV head 0)
    size_t kregion, vregion;       // bytes a region
    size_t kside, vside;           // offsets of the fp16 scales in a region
    int n_kv, H, t_begin, t_end, chunk, n_slot, slot0;
    float sl2;                     // scale · log2(e)
    float *po, *pml;               // partial sums (batch, H, n_slot, D) and (max, sum) (batch, H, n_slot, 2)
};

/** The kernel for keys kind/bits and values kind/bits, or NULL (int:2, int:4, kivi:2, kivi:4 on
 *  both sides are built). variant 1: the next tile's loads in flight (int: 4 blocks an SM);
 *  2: the next two tiles' (more bytes in flight, 3 blocks an SM). */
const void *kvq_gkv_tc_kernel(int kk, int kb, int vk, int vb, int variant);
/** Launches it over grid (n_chunks, n_kv, batch) on stream sm. @return KVQ_OK or a launch error. */
kvq_status kvq_gkv_tc_launch(const void *fn, const kvq_tc_args *a, int n_chunks, int batch, cudaStream_t sm, kvq_err *err);
/** A split block's Σ p·V written out (both split kernels): the NW warps' rows red[w][h][·] summed
 *  in warp order into po[h · n_slot · dh + i] for the g heads, the block's NT threads striding. */
template <int NW, int NT, typename Red>
__device__ __forceinline__ void kvq_gkv_split_out(const Red &red, float *po, int g, int dh, int n_slot) {
    for (int e = threadIdx.x; e < g * dh; e += NT) {
        const int h = e / dh, i = e % dh;
        float y = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) y += red[w][h][i];
        po[(size_t)h * n_slot * dh + i] = y;
    }
}

/** Threads a block of the tensor-core kernels (for the occupancy query). */
#define KVQ_GKV_TC_THREADS 128

#endif
