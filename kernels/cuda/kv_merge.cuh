// The merge of kvq_gkv_attend's split blocks (kernels/cuda/kv_attn.cu, kv_attn_tc.cu): the chunks'
// (max, sum, Σ p·V) of a (sequence, query head) combined with weights 2^(m_s − M), and the values'
// rotation undone once for the chunks that summed rotated values (TurboQuant, HyperQuant-KV). Run
// either by attn_merge (a launch after the split launches, a block per (sequence, query head)) or,
// fused (issue 20, KVQ_CUDA_KV_FUSE_MERGE), by the last split block to finish for a (sequence, KV
// head) — counted by an atomic, as attend_split_k in kernels/cuda/attention.cu does — for its G query
// heads at once. One function, the same operations in the same order per output: the same bits.
#ifndef KVQ_CUDA_KV_MERGE_CUH
#define KVQ_CUDA_KV_MERGE_CUH

#include <math.h>

#include "kernels/cuda/kv_attn_tc.cuh"

#define KVQ_GKV_MERGE_MAX 1024 // chunks one merge takes (its weights sit in shared memory)
#define KVQ_GKV_MERGE_TC 256   // chunks the tensor-core kernels' fused merge takes (in their red array: no more shared memory)
#define KVQ_GKV_CNT_MAX 4096   // (sequence, KV head) pairs a fused merge counts (kvq_gkv_cnt)

/** The blocks of the final split launch that have finished, per (sequence, KV head) (b · n_kv + g).
 *  Zero when the module loads, and back to zero after every launch (the last block resets its
 *  count), so a captured graph replays with no reset of its own. A device array rather than the
 *  caller's scratch: no allocation (none is allowed while a graph is captured) and no zeroing
 *  contract for the callers. One per translation unit that includes this header (each launch
 *  counts in its own kernel's); attends run one at a time on the stream (as attention.cu's). */
static __device__ unsigned kvq_gkv_cnt[KVQ_GKV_CNT_MAX];

/** In-place orthonormal Walsh–Hadamard transform of nvec vectors of head_dim floats in shared
 *  memory (the CPU butterfly's matrix, scaled by 1/√d), all threads of the block. */
template <int DD = KVQ_GKV_HEAD_DIM>
__device__ inline void kvq_gkv_wht(float *x, int nvec) {
    for (int h = 1; h < DD; h <<= 1) {
        __syncthreads();
        for (int e = threadIdx.x; e < nvec * DD / 2; e += blockDim.x) {
            const int v = e / (DD / 2), j = e % (DD / 2), i = (j / h) * 2 * h + (j % h);
            float *y = x + v * DD;
            const float a = y[i], b = y[i + h];
            y[i] = a + b, y[i + h] = a - b;
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nvec * DD; e += blockDim.x) x[e] *= rsqrtf((float)DD);
    __syncthreads();
}

template <bool CG>
__device__ __forceinline__ float kvq_gkv_ld(const float *p) { return CG ? __ldcg(p) : *p; }
// V consecutive floats (V = 1 or 4, 16-byte aligned for 4).
template <bool CG, int V>
__device__ __forceinline__ void kvq_gkv_ldv(const float *p, float (&t)[V]) {
    if constexpr (V == 4) {
        const float4 f = CG ? __ldcg((const float4 *)p) : *(const float4 *)p;
        t[0] = f.x, t[1] = f.y, t[2] = f.z, t[3] = f.w;
    } else {
#pragma unroll
        for (int v = 0; v < V; v++) t[v] = kvq_gkv_ld<CG>(p + v);
    }
}

/** Merges the chunks of the NH rows bh0 .. bh0 + NH − 1 of (sequence, query head) (the query
 *  heads of KV head g: NH = 1, or all G of it) into out (rows of head_dim). po (rows, stride, d)
 *  and pml (rows, stride, 2) hold the chunks' Σ p·V and (max, sum); n_slot of the stride hold
 *  chunks (≤ MM), pp.n_rot of them first in the values' rotated frame. Needs blockDim.x = head_dim
 *  and shared memory w (NH · MM floats), x (NH · head_dim), red (NH · head_dim / 32).
 *  Weights 2^(m_s − M) once per chunk (a thread per chunk), M and the sum reduced by shuffles then
 *  warps in order; then each output's sum over the chunks in chunk order, with independent loads
 *  (a loop whose loads sat behind a branch on the chunk's sum took one memory latency per chunk:
 *  ~15 µs for 43 chunks). A thread sums NH consecutive dims of one row (float4 loads at NH = 4).
 *  ROT: the rotation back is compiled in (pp.kind 1 TurboQuant: WHT, signs, r* per 4-chunk for
 *  qturbo; 2 HQKV signs; 3 HQKV Qᵀ); without it pp.kind must be 0. CG: the partial results are
 *  read through L2 (written by other blocks of the same launch: the fused merge). */
template <int NH, int MM, bool ROT, bool CG, int DD = KVQ_GKV_HEAD_DIM>
__device__ __forceinline__ void kvq_gkv_merge(const float *po, const float *pml, float *out, int n_slot, int stride, int bh0, int g,
                                              const kvq_gkv_post &pp, float *w, float *x, float *red) {
    constexpr int NWM = DD / 32, V = NH;
    static_assert(DD % V == 0, "a thread's dims stay in one row");
    const int i = threadIdx.x, lane = i & 31, wp = i >> 5;
    float M[NH], l[NH];
#pragma unroll
    for (int h = 0; h < NH; h++) M[h] = -INFINITY, l[h] = 0.0f;
    for (int s = i; s < n_slot; s += DD)
#pragma unroll
        for (int h = 0; h < NH; h++) {
            const float *ml = pml + ((size_t)(bh0 + h) * stride + s) * 2;
            const float2 v = CG ? __ldcg((const float2 *)ml) : *(const float2 *)ml;
            w[h * MM + s] = v.y > 0.0f ? v.x : -INFINITY;
            M[h] = fmaxf(M[h], w[h * MM + s]);
        }
#pragma unroll
    for (int h = 0; h < NH; h++) {
        for (int k = 16; k > 0; k >>= 1) M[h] = fmaxf(M[h], __shfl_xor_sync(0xffffffffu, M[h], k));
        if (lane == 0) red[h * NWM + wp] = M[h];
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < NH; h++) {
        M[h] = red[h * NWM];
        for (int k = 1; k < NWM; k++) M[h] = fmaxf(M[h], red[h * NWM + k]);
    }
    __syncthreads();
    for (int s = i; s < n_slot; s += DD)
#pragma unroll
        for (int h = 0; h < NH; h++) {
            const float ws = w[h * MM + s] == -INFINITY ? 0.0f : exp2f(w[h * MM + s] - M[h]);
            w[h * MM + s] = ws;
            l[h] = fmaf(ws, kvq_gkv_ld<CG>(pml + ((size_t)(bh0 + h) * stride + s) * 2 + 1), l[h]);
        }
#pragma unroll
    for (int h = 0; h < NH; h++) {
        for (int k = 16; k > 0; k >>= 1) l[h] += __shfl_xor_sync(0xffffffffu, l[h], k);
        if (lane == 0) red[h * NWM + wp] = l[h];
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < NH; h++) {
        l[h] = 0.0f;
        for (int k = 0; k < NWM; k++) l[h] += red[h * NWM + k];
    }
    // this thread's V dims d0.. of row h
    const int h = i * V / DD, d0 = i * V % DD;
    float lh = l[0];
#pragma unroll
    for (int hh = 1; hh < NH; hh++)
        if (hh == h) lh = l[hh];
    const float *o = po + (size_t)(bh0 + h) * stride * DD + d0, *wh = w + h * MM;
    const int nr = pp.kind ? pp.n_rot : 0;
    float y[V], yp[V];
#pragma unroll
    for (int v = 0; v < V; v++) y[v] = 0.0f, yp[v] = 0.0f;
#pragma unroll 8
    for (int s = 0; s < nr; s++) {
        float t[V];
        kvq_gkv_ldv<CG, V>(o + (size_t)s * DD, t);
#pragma unroll
        for (int v = 0; v < V; v++) y[v] = fmaf(wh[s], t[v], y[v]);
    }
#pragma unroll 8
    for (int s = nr; s < n_slot; s++) {
        float t[V];
        kvq_gkv_ldv<CG, V>(o + (size_t)s * DD, t);
#pragma unroll
        for (int v = 0; v < V; v++) yp[v] = fmaf(wh[s], t[v], yp[v]);
    }
    float *xh = x + h * DD;
    if (ROT && pp.kind == 1) {
#pragma unroll
        for (int v = 0; v < V; v++) xh[d0 + v] = y[v];
        kvq_gkv_wht<DD>(x, NH);
#pragma unroll
        for (int v = 0; v < V; v++) y[v] = __fmul_rn(xh[d0 + v], pp.signs[(size_t)g * DD + d0 + v]);
        if (pp.quat) { // r* = (r0, −r1, −r2, −r3) left-multiplies each 4-chunk
            __syncthreads();
#pragma unroll
            for (int v = 0; v < V; v++) xh[d0 + v] = y[v];
            __syncthreads();
            const float *r = pp.quat + (size_t)g * 4;
            const float a0 = r[0], a1 = -r[1], a2 = -r[2], a3 = -r[3];
#pragma unroll
            for (int v = 0; v < V; v++) {
                const float *b4 = xh + ((d0 + v) & ~3);
                const int c = (d0 + v) & 3;
                // (r* x)_c for c = 0..3 (the 4-chunk's product row c), no contraction into FMAs
                const float p0 = __fmul_rn(a0, b4[c]), p1 = __fmul_rn(a1, b4[c ^ 1]), p2 = __fmul_rn(a2, b4[c ^ 2]), p3 = __fmul_rn(a3, b4[c ^ 3]);
                y[v] = c == 0 ? __fsub_rn(__fsub_rn(__fsub_rn(p0, p1), p2), p3)
                       : c == 1 ? __fsub_rn(__fadd_rn(__fadd_rn(p0, p1), p2), p3)
                       : c == 2 ? __fadd_rn(__fadd_rn(__fsub_rn(p0, p1), p2), p3)
                                : __fadd_rn(__fsub_rn(__fadd_rn(p0, p1), p2), p3);
            }
        }
    } else if (ROT && pp.kind == 2) {
#pragma unroll
        for (int v = 0; v < V; v++) y[v] = __fmul_rn(y[v], pp.signs[(size_t)g * DD + d0 + v]);
    } else if (ROT && pp.kind == 3) { // Qᵀ y: out_i = Σ_k Q[k][i] y_k
#pragma unroll
        for (int v = 0; v < V; v++) xh[d0 + v] = y[v];
        __syncthreads();
        const float *Q = pp.mat + (size_t)g * DD * DD;
#pragma unroll
        for (int v = 0; v < V; v++) y[v] = 0.0f;
        for (int k = 0; k < DD; k++)
#pragma unroll
            for (int v = 0; v < V; v++) y[v] = fmaf(Q[(size_t)k * DD + d0 + v], xh[k], y[v]);
    }
#pragma unroll
    for (int v = 0; v < V; v++) {
        const float r = __fadd_rn(y[v], yp[v]); // explicit roundings: no FMA contraction that could differ between instantiations
        out[(size_t)(bh0 + h) * DD + d0 + v] = lh > 0.0f ? r / lh : 0.0f;
    }
}

/** The fused merge's end of a split block (every block of the final split launch calls it once,
 *  also those with no chunk): with p.fz.on, the block is counted for its (sequence b, KV head g)
 *  and the last of the launch's gridDim.x blocks — all partial results of the attend written by
 *  then: the earlier launches finished before this one started — merges the G query heads of g
 *  into p.fz.out, as attn_merge would (the plan from the device's position under p.dyn.d_pos).
 *  P: either split kernel's parameters (po, pml, H, n_kv, n_slot, dyn, fz). w, x, red: shared
 *  memory for kvq_gkv_merge with NH = G and MM (free by the time the block is counted); the host
 *  fuses only attends of at most MM chunks. */
template <bool ROT, int MM, class P>
__device__ __forceinline__ void kvq_gkv_merge_last(const P &p, int b, int g, float *w, float *x, float *red) {
    if (!p.fz.on) return;
    __shared__ int last;
    __threadfence(); // this thread's partial results visible device-wide before the block is counted
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *cnt = kvq_gkv_cnt + (size_t)b * p.n_kv + g;
        last = kvq_gkv_fuse_last(atomicAdd(cnt, 1u), gridDim.x);
        if (last) *cnt = 0; // every block of (b, g) has counted: ready for the next launch or replay
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    int n_slot = p.n_slot;
    kvq_gkv_post pp = p.fz.pp;
    if (p.dyn.d_pos || p.dyn.rows) { // (rows mode never fuses the merge: kvq_gkv_attend_rows)
        const kvq_gkv_plan pl = kvq_gkv_dyn_plan(p.dyn, b);
        n_slot = pl.na + pl.nb + pl.nc;
        pp.n_rot = pl.na + pl.nb;
    }
    kvq_gkv_merge<KVQ_GKV_GROUP, MM, ROT, true>(p.po, p.pml, p.fz.out, n_slot, p.n_slot, b * p.H + g * KVQ_GKV_GROUP, g, pp, w, x, red);
}

#endif
