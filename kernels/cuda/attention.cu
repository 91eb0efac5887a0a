// Attention on the GPU with an fp32 KV cache (ops.h). Store: one block per (token, KV
// head). Attend: one block of 256 threads per (query head, token): the query in shared
// memory, one thread per position for the scores (K rows read with 16-byte loads), the
// softmax over the scores held in shared memory, then warp w sums the positions p ≡ w (mod 8)
// with lanes across head_dim (coalesced rows of V) and the 8 partial sums meet in shared
// memory.
#include <math.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

#define ATT_THREADS 256
#define ATT_SMEM_MAX (227 * 1024) // H100's opt-in shared memory per block
#define ATT_MAX_HD 512

__global__ void kv_store_k(const float *__restrict__ k, const float *__restrict__ v, float *__restrict__ kc,
                           float *__restrict__ vc, int pos, const int *dpos, int n_kv, int hd, int max_ctx) {
    if (dpos) pos = *dpos;
    const int t = blockIdx.x / n_kv, g = blockIdx.x % n_kv;
    const float *ks = k + ((int64_t)t * n_kv + g) * hd, *vs = v + ((int64_t)t * n_kv + g) * hd;
    float *kd = kc + ((int64_t)g * max_ctx + pos + t) * hd, *vd = vc + ((int64_t)g * max_ctx + pos + t) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) { kd[i] = ks[i]; vd[i] = vs[i]; }
}

__global__ void __launch_bounds__(ATT_THREADS) attend_k(const float *__restrict__ q, const float *__restrict__ kc,
                                                        const float *__restrict__ vc, float *__restrict__ out, int pos,
                                                        const int *dpos, int n_heads, int n_kv, int hd, int max_ctx, float scale) {
    extern __shared__ float sm[]; // q (hd), scores (n_ctx), the warps' partial outputs (8, hd)
    __shared__ float red[ATT_THREADS / 32];
    if (dpos) pos = *dpos;
    const int h = blockIdx.x, t = blockIdx.y, g = h / (n_heads / n_kv);
    const int n_ctx = pos + t + 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = ATT_THREADS / 32;
    float *qs = sm, *s = sm + hd;
    const float *qr = q + ((int64_t)t * n_heads + h) * hd;
    for (int i = threadIdx.x; i < hd; i += ATT_THREADS) qs[i] = qr[i];
    __syncthreads();
    const float *K = kc + (int64_t)g * max_ctx * hd, *V = vc + (int64_t)g * max_ctx * hd;
    // scores: one thread per position (its K row read with 16-byte loads when head_dim allows),
    // so a block covers 128 positions per pass instead of 4
    float mx = -INFINITY;
    const bool v4 = (hd & 3) == 0;
    for (int p = threadIdx.x; p < n_ctx; p += ATT_THREADS) {
        const float *kr = K + (int64_t)p * hd;
        float d = 0.0f;
        if (v4) {
            for (int i = 0; i < hd; i += 4) {
                const float4 k4 = __ldg((const float4 *)(kr + i));
                d = fmaf(qs[i], k4.x, d); d = fmaf(qs[i + 1], k4.y, d);
                d = fmaf(qs[i + 2], k4.z, d); d = fmaf(qs[i + 3], k4.w, d);
            }
        } else {
            for (int i = 0; i < hd; i++) d = fmaf(qs[i], kr[i], d);
        }
        d *= scale;
        s[p] = d;
        mx = fmaxf(mx, d);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    mx = red[0];
    for (int k = 1; k < nw; k++) mx = fmaxf(mx, red[k]);
    __syncthreads();
    float z = 0.0f;
    for (int p = threadIdx.x; p < n_ctx; p += ATT_THREADS) {
        const float e = expf(s[p] - mx);
        s[p] = e;
        z += e;
    }
    for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    if (lane == 0) red[warp] = z;
    __syncthreads();
    z = 0.0f;
    for (int k = 0; k < nw; k++) z += red[k];
    const float inv = 1.0f / z;
    // out: warp w sums positions p ≡ w (mod 8), lane l coordinates l, l+32, ... (rows of V read
    // whole by a warp), then the warps' partial sums meet in shared memory
    float *part = s + n_ctx; // (nw, hd), after the scores
    float o[ATT_MAX_HD / 32];
#pragma unroll
    for (int k = 0; k < ATT_MAX_HD / 32; k++) o[k] = 0.0f;
#pragma unroll 8
    for (int p = warp; p < n_ctx; p += nw) {
        const float sp = s[p], *vr = V + (int64_t)p * hd;
#pragma unroll
        for (int k = 0; k < ATT_MAX_HD / 32; k++)
            if (lane + 32 * k < hd) o[k] = fmaf(sp, vr[lane + 32 * k], o[k]);
    }
#pragma unroll
    for (int k = 0; k < ATT_MAX_HD / 32; k++)
        if (lane + 32 * k < hd) part[warp * hd + lane + 32 * k] = o[k];
    __syncthreads();
    float *out_r = out + ((int64_t)t * n_heads + h) * hd;
    for (int i = threadIdx.x; i < hd; i += ATT_THREADS) {
        float a = 0.0f;
        for (int w = 0; w < nw; w++) a += part[w * hd + i];
        out_r[i] = a * inv;
    }
}

static int smem_set = 0; // the 48 KiB default raised (once, never while a graph is captured)

static kvq_status raise_smem(kvq_err *err) {
    if (smem_set) return KVQ_OK;
    CU_TRY(cudaFuncSetAttribute(attend_k, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM_MAX - 1024));
    smem_set = 1;
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_attention_init(int head_dim, int max_ctx, kvq_err *err) {
    if (sizeof(float) * ((size_t)head_dim * (1 + ATT_THREADS / 32) + (size_t)max_ctx) > 48 * 1024) return raise_smem(err);
    return KVQ_OK;
}

extern "C" int kvq_cuda_attention_max_ctx(int head_dim) {
    if (head_dim > ATT_MAX_HD) return 0;
    return (int)((ATT_SMEM_MAX - 1024) / sizeof(float)) - head_dim * (1 + ATT_THREADS / 32);
}

extern "C" kvq_status kvq_cuda_attention(const float *q, const float *k, const float *v, float *kc, float *vc,
                                         float *out, int T, int pos, const int *d_pos, int n_heads, int n_kv_heads, int head_dim,
                                         int max_ctx, float scale, kvq_err *err) {
    if (T <= 0) return KVQ_OK;
    if (pos + T > max_ctx || pos + T > kvq_cuda_attention_max_ctx(head_dim))
        return kvq_err_set(err, KVQ_ERR_ARG, "cuda attention: positions up to %d exceed the cache (%d)", pos + T, max_ctx);
    kv_store_k<<<T * n_kv_heads, 128, 0, kvq_cuda_stream()>>>(k, v, kc, vc, pos, d_pos, n_kv_heads, head_dim, max_ctx);
    CU_LAUNCHED("kv_store");
    // scores of pos + T positions; with d_pos (a graph replayed at later positions) of max_ctx
    const size_t smem = sizeof(float) * ((size_t)head_dim * (1 + ATT_THREADS / 32) + (size_t)(d_pos ? max_ctx : pos + T));
    if (smem > 48 * 1024) {
        kvq_status s = raise_smem(err);
        if (s) return s;
    }
    attend_k<<<dim3((unsigned)n_heads, (unsigned)T), ATT_THREADS, smem, kvq_cuda_stream()>>>(q, kc, vc, out, pos, d_pos, n_heads, n_kv_heads,
                                                                          head_dim, max_ctx, scale);
    CU_LAUNCHED("attend");
    return KVQ_OK;
}
