// The split-K KV attention kernels (kv_split.cuh) at head_dim 128 with 1, 2 or 8 query heads per KV
// head (issue 20, session 15: the shared models' shapes; head_dim 128 with 4 is kv_attn.cu's). The plain
// fp32 kernels only: the tensor-core, int8-query and half-value variants stay (128, 4)'s. A file of
// its own so that the instantiations build in parallel with kv_attn.cu.
#include "kernels/cuda/kv_split.cuh"

kvq_gkv_split_fn kvq_gkv_pick_d128(int grp, int kk, int kb, int vk, int vb) {
    if (grp == 1) return kvq_gkv_pick_plain<128, 1, 1>(kk, kb, vk, vb);
    if (grp == 2) return kvq_gkv_pick_plain<128, 2, 1>(kk, kb, vk, vb);
    if (grp == 8) return kvq_gkv_pick_plain<128, 4, 2>(kk, kb, vk, vb);
    return NULL;
}

kvq_gkv_merge_fn kvq_gkv_merge_d128(int grp) {
    if (grp == 1) return attn_merge<128, 1>;
    if (grp == 2) return attn_merge<128, 2>;
    if (grp == 8) return attn_merge<128, 8>;
    return NULL;
}
