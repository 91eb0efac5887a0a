// The tensor-core split-K kernels of kernels/cuda/kv_attn_tc.cu (int and KIVI at 2 and 4 bits,
// keys and values alike), called by kvq_gkv_attend (kv_attn.cu) for the packed chunks when
// kvq_gkv_set_tc / KVQ_CUDA_KV_TC turn them on; they write the same per-chunk partial results
// (Σ p·V, max, sum) as attn_split, which attn_merge merges, or the final launch's last block per
// (sequence, KV head) (kv_merge.cuh).
#ifndef KVQ_CUDA_KV_ATTN_TC_CUH
#define KVQ_CUDA_KV_ATTN_TC_CUH

#include <cuda_runtime.h>

#include "kernels/cuda/kv_attn.h"

/** A launch that plans on the device. A graph-captured step (kvq_gkv_attend_step): d_pos non-NULL;
 *  the kernel plans from the position: n_tok = *d_pos + 1, the sides' counts kvq_gkv_enc_count(kivi_k
 *  / 0, n_tok, window). Rows mode (kvq_gkv_attend_rows): rows > 0 query rows, row t's plan
 *  kvq_gkv_row_plan(n_enc_k, n_enc_v, pos0, t) (batch 1: every row reads sequence 0's regions; q,
 *  out and the scratch are indexed by the row where a batch's are by the sequence; block x of a
 *  launch is chunk x / rows of row x % rows). Either: the plan with per and chunk_req, and its part
 *  (0 packed, 1 window keys, 2 window) — block s of the launch takes that part's chunk s, or exits
 *  when there is none. Neither (d_pos NULL, rows 0): a host-planned launch (t_begin, t_end, chunk,
 *  slot0 of the arguments hold). */
struct kvq_gkv_dyn {
    const int *d_pos;
    int window, kivi_k, per, chunk_req, part;
    int rows, pos0, n_enc_k, n_enc_v; // rows mode
    const int *d_seq; // a step of several sequences (kvq_gkv_attend_seqs): row b reads sequence d_seq[b]'s
                      // regions, at position d_pos[b] (d_pos then an array, one a row); NULL otherwise
};
/** The device's plan of row `row` (rows mode; a step of several sequences: from that row's position)
 *  or of the step's position (row unused): kvq_gkv_pos_plan. */
__device__ __forceinline__ kvq_gkv_plan kvq_gkv_dyn_plan(const kvq_gkv_dyn &d, int row) {
    if (d.rows) return kvq_gkv_row_plan(d.n_enc_k, d.n_enc_v, d.pos0, row, d.per, d.chunk_req);
    return kvq_gkv_pos_plan(d.d_seq ? d.d_pos[row] : *d.d_pos, d.window, d.kivi_k, d.per, d.chunk_req);
}
/** Who a split block is: s its chunk in the launch's part, b the row of q, of the scratch and of out
 *  (the sequence; in rows mode the query row), r the sequence whose cache regions it reads. The
 *  decode launches keep (blockIdx.x, blockIdx.z, blockIdx.z) (a step of several sequences: r =
 *  d_seq[blockIdx.z]); rows mode (kvq_gkv_row_block) puts the
 *  row in blockIdx.x, so that the rows of one chunk are consecutive blocks. */
struct kvq_gkv_blk {
    int s, b, r;
};
__device__ __forceinline__ kvq_gkv_blk kvq_gkv_block_of(const kvq_gkv_dyn &d) {
    kvq_gkv_blk k = {(int)blockIdx.x, (int)blockIdx.z, (int)blockIdx.z};
    if (d.rows) kvq_gkv_row_block((int)blockIdx.x, d.rows, &k.s, &k.b), k.r = 0;
    else if (d.d_seq) k.r = d.d_seq[blockIdx.z];
    return k;
}
/** Block s's range [*t0, *t1) (chunk positions from *t0), from the launch's values or, under
 *  d.d_pos / d.rows, the device's plan (of row b); false when the block has no chunk (it writes
 *  nothing). */
__device__ __forceinline__ bool kvq_gkv_block_range(const kvq_gkv_dyn &d, int b, int t_begin, int t_end, int chunk, int s, int *t0,
                                                    int *t1) {
    if (d.d_pos || d.rows) {
        const kvq_gkv_plan pl = kvq_gkv_dyn_plan(d, b);
        int slot0;
        return kvq_gkv_part_block(&pl, d.part, s, t0, t1, &slot0) != 0;
    }
    *t0 = t_begin + s * chunk;
    *t1 = min(t_end, *t0 + chunk);
    return true;
}
/** Block s's scratch slot (of its partial results): the launch's slot0 + s, or under d.d_pos / d.rows
 *  the part's first slot of the device's plan (of row b) + s (computed again where it is written, so
 *  that it is not held in a register through the block's loop). */
__device__ __forceinline__ int kvq_gkv_block_slot(const kvq_gkv_dyn &d, int b, int slot0, int s) {
    if (d.d_pos || d.rows) {
        const kvq_gkv_plan pl = kvq_gkv_dyn_plan(d, b);
        int t0, t1;
        kvq_gkv_part_block(&pl, d.part, s, &t0, &t1, &slot0);
    }
    return slot0 + s;
}
/** An empty chunk's partial results (block s of row b — the sequence, or rows mode's query row —, KV
 *  head g, its G query heads of D values; NT threads): output 0, max −inf, sum 0 — weight 0 in the
 *  merge. P: either split
 *  kernel's parameters (po, pml, H, n_slot, slot0, dyn). */
template <int G, int D, int NT, class P>
__device__ __forceinline__ void kvq_gkv_empty_split(const P &p, int b, int g, int s) {
    const int slot = kvq_gkv_block_slot(p.dyn, b, p.slot0, s);
    float *po = p.po + (((size_t)b * p.H + g * G) * p.n_slot + slot) * D;
    float *pml = p.pml + (((size_t)b * p.H + g * G) * p.n_slot + slot) * 2;
    for (int e = threadIdx.x; e < G * D; e += NT) po[(size_t)(e / D) * p.n_slot * D + e % D] = 0.0f;
    if (threadIdx.x < G) pml[(size_t)threadIdx.x * p.n_slot * 2] = -INFINITY, pml[(size_t)threadIdx.x * p.n_slot * 2 + 1] = 0.0f;
}

/** The values' way back from a rotated frame, applied once per (sequence, query head) in the
 *  merge (kv_merge.cuh): kind 0 none, 1 TurboQuant (WHT, signs, then r* per 4-chunk for qturbo),
 *  2 HyperQuant-KV signs, 3 HyperQuant-KV Qᵀ. Chunks [0, n_rot) hold rotated sums (the stored
 *  values), the rest the window's plain ones. */
struct kvq_gkv_post {
    int kind;
    const float *signs, *quat, *mat; // the values' side tables (kvq_gkv_side)
    int n_rot;
};
/** A split launch's fused merge (kvq_gkv_merge_last): on = 1 for the attend's final split
 *  launch when the merge is fused; its last block per (sequence, KV head) writes out. */
struct kvq_gkv_fuse {
    float *out; // (batch, n_heads, D) fp32
    kvq_gkv_post pp;
    int on;
};

struct kvq_tc_args {
    const float *q;                // (batch, n_heads, D) fp32
    const uint8_t *kbase, *vbase;  // regions of (sequence 0, KV head 0)
    size_t kregion, vregion;       // bytes a region
    size_t kside, vside;           // offsets of the fp16 scales in a region
    int n_kv, H, t_begin, t_end, chunk, n_slot, slot0;
    float sl2;                     // scale · log2(e)
    float *po, *pml;               // partial sums (batch, H, n_slot, D) and (max, sum) (batch, H, n_slot, 2)
    kvq_gkv_dyn dyn;               // a graph-captured step: the range from the position (d_pos NULL: the fields above)
    kvq_gkv_fuse fz;               // the fused merge (fz.on: this is the final split launch)
    const float *kcb, *vcb;        // TURBO: the sides' centroids (n_kv, 2^bits) fp32
    const float *ksigns, *kquat;   // TURBO: the keys' sign vectors (n_kv, D) and qturbo's quaternions (n_kv, 4) or NULL
    const float *kmat;             // TPROD: the keys' QJL matrices S (n_kv, D, D) fp32 row-major
    uint4 *tpre;                   // TPROD with the prelude (kvq_gkv_tp_pre_launch): (rows, n_kv, KVQ_GKV_TP_PRE_U4, 32) in the
                                   // scratch after the partial results, 16-byte aligned; NULL: each block forms it
};
/** uint4 a lane of turboquant-prod's prelude a (row, KV head): the scores' B fragments (16 + 16 words)
 *  and 2 floats, padded: 32 · 9 · 16 = 4608 bytes. */
#define KVQ_GKV_TP_PRE_U4 9
/** TURBO's (TurboQuant, qturbo; session 18, helper i20q): the B fragments alone (16 words), 32 · 4 · 16 = 2048 bytes. */
#define KVQ_GKV_TQ_PRE_U4 4

/** The kernel for keys kind/bits and values kind/bits, or NULL (int:2, int:4, kivi:2, kivi:4,
 *  turboquant/qturbo:2 and :4 on both sides are built, and turboquant-prod:2/3/4 — TPROD keys with
 *  TURBO values of the same bits, variants 1 and 2, stages ignored (no pipelined kernel); TURBO: q rotated into the keys' frame once
 *  per block, the values' rotation undone in the merge). TPROD's pre 1: the kernel that reads kvq_gkv_tp_pre_launch's
 *  prelude, 0: the one that forms it in every block; TURBO's likewise for stages 0 (the pipelined kernels
 *  form it per block whatever pre says); int and KIVI ignore pre. stages 0: variant 1, the next tile's loads in flight in registers
 *  (int: 4 blocks an SM), or 2, the next two tiles' (more bytes in flight, 3 blocks an SM);
 *  stages 3 or 4: the cp.async pipeline (the next stages − 1 tiles of each warp copied into
 *  shared memory; variant ignored), bit-identical results; other stage counts: NULL. lean 1: the
 *  same kernels with fewer instructions a tile and the same bits (session 14, helper i20d: one lop3 a
 *  code pair, no rescale of Σ p·V when no running max moved; docs/KV.md). q8 1 (int:2 and int:4 with lean 1;
 *  session 20, helper i20v): the scores on integer tensor cores — q in int8 per query head, the codes as
 *  u8, mma.m16n8k32, the zero point folded in int32 — every variant and stage count; ignored elsewhere. */
const void *kvq_gkv_tc_kernel(int kk, int kb, int vk, int vb, int variant, int stages, int lean, int pre, int q8);
/** Launches it over grid (n_chunks, n_kv, batch) on stream sm; pdl: as a programmatic dependent of the
 *  launch before it (cudaLaunchAttributeProgrammaticStreamSerialization). @return KVQ_OK or a launch error. */
kvq_status kvq_gkv_tc_launch(const void *fn, const kvq_tc_args *a, int n_chunks, int batch, cudaStream_t sm, int pdl, kvq_err *err);
/** turboquant-prod's prelude (session 18): for each of nrow rows of q (a->q; a row as the split blocks'
 *  b: the sequence, a step's row or rows mode's query row) and each KV head, q rotated into the keys'
 *  frame, S R q and the scores' B fragments of every lane, into a->tpre (KVQ_GKV_TP_PRE_U4 · 32 uint4 a
 *  (row, KV head)), what kvq_gkv_tc_kernel(TPROD, bits, …, pre 1)'s blocks read instead of forming them
 *  (pre 0: every block forms them, the same bits). kind KVQ_GKV_TURBO (TurboQuant, qturbo at 2 or 4 bits;
 *  session 18, helper i20q): R q's B fragments alone (KVQ_GKV_TQ_PRE_U4 · 32 uint4 a (row, KV head)). Grid
 *  (n_kv, nrow), a plain launch on sm; the tensor-core launch after it may be its programmatic dependent.
 *  @return KVQ_OK, KVQ_ERR_ARG (another kind, bits not built, no a->tpre) or a launch error. */
kvq_status kvq_gkv_tp_pre_launch(const kvq_tc_args *a, int kind, int bits, int nrow, cudaStream_t sm, kvq_err *err);
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

/** A tensor-core block's end (kv_attn_tc.cu, kv_attn_oct.cu): the warps' running (max mx, sum ls,
 *  Σ p·V acc) merged with weights 2^(m_w − M) through wm, wl and red (acc[j] columns at the value dims
 *  vd(j, 0), vd(j, 1) of the lane's fragment), then the block's partial results written to its slot
 *  (Σ p·V by kvq_gkv_split_out; max and sum per head). warp, g = lane/4, t = lane%4; b, gk, s: the
 *  block's row, KV head and chunk. */
template <int NR, class VD>
__device__ __forceinline__ void kvq_tc_chunk_out(const kvq_tc_args &p, float (&red)[NR][KVQ_GKV_GROUP][KVQ_GKV_HEAD_DIM],
                                                 float (&wm)[KVQ_GKV_TC_THREADS / 32][KVQ_GKV_GROUP],
                                                 float (&wl)[KVQ_GKV_TC_THREADS / 32][KVQ_GKV_GROUP], const float (&acc)[8][4],
                                                 const float (&mx)[2], float (&ls)[2], int warp, int g, int t, int b, int gk,
                                                 int s, VD vd) {
    constexpr int G = KVQ_GKV_GROUP, D = KVQ_GKV_HEAD_DIM, TNT = KVQ_GKV_TC_THREADS, TNW = TNT / 32;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        ls[e] += __shfl_xor_sync(0xffffffffu, ls[e], 4);
        ls[e] += __shfl_xor_sync(0xffffffffu, ls[e], 8);
        ls[e] += __shfl_xor_sync(0xffffffffu, ls[e], 16);
    }
    if (g == 0 && t < G / 2) wm[warp][2 * t] = mx[0], wm[warp][2 * t + 1] = mx[1], wl[warp][2 * t] = ls[0], wl[warp][2 * t + 1] = ls[1];
    __syncthreads();
    if (t < G / 2) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int h = 2 * t + e;
            float M = -INFINITY;
#pragma unroll
            for (int w = 0; w < TNW; w++) M = fmaxf(M, wm[w][h]);
            const float f = mx[e] == -INFINITY ? 0.0f : exp2f(mx[e] - M);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                red[warp][h][vd(j, 0)] = acc[j][e] * f;
                red[warp][h][vd(j, 1)] = acc[j][e + 2] * f;
            }
        }
    }
    __syncthreads();
    // the block's slot of the partial results (formed here, not kept live through the loop)
    const int slot = kvq_gkv_block_slot(p.dyn, b, p.slot0, s);
    float *po = p.po + (((size_t)b * p.H + gk * G) * p.n_slot + slot) * D;
    float *pml = p.pml + (((size_t)b * p.H + gk * G) * p.n_slot + slot) * 2;
    kvq_gkv_split_out<TNW, TNT>(red, po, G, D, p.n_slot);
    if (threadIdx.x < G) {
        const int h = threadIdx.x;
        float M = -INFINITY, l = 0.0f;
        for (int w = 0; w < TNW; w++) M = fmaxf(M, wm[w][h]);
        for (int w = 0; w < TNW; w++)
            if (wm[w][h] != -INFINITY) l = fmaf(exp2f(wm[w][h] - M), wl[w][h], l);
        pml[(size_t)h * p.n_slot * 2] = M, pml[(size_t)h * p.n_slot * 2 + 1] = l;
    }
}

#endif
