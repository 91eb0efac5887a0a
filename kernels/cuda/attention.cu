// Attention on the GPU with an fp32 KV cache (ops.h). Store: one block per (token, KV
// head). Attend: one block of 256 threads per (query head, token): the query in shared
// memory, one thread per position for the scores (K rows read with 16-byte loads), the
// softmax over the scores held in shared memory, then warp w sums the positions p ≡ w (mod 8)
// with lanes across head_dim (coalesced rows of V) and the 8 partial sums meet in shared
// memory.
#include <math.h>
#include <stdlib.h>

#include <type_traits>

#include "kernels/cuda/cuda_check.cuh"
#ifdef KVQ_ATT_STAMPS
// the measuring build's clocks inside o's tile preparation (hqx_prep.cuh's KVQ_PREP_MARK): thread 0 of the merging
// block (warp 0's tile) stores x to shared memory (the store waits for x) and then reads its clock into att_pm[k]
__shared__ long long att_pm[4];
__shared__ float att_px[4];
#define KVQ_PREP_MARK(k_, x_)                                                                                               \
    do {                                                                                                                 \
        if (threadIdx.x == 0) {                                                                                          \
            long long c_;                                                                                                \
            asm volatile("st.shared.f32 [%0], %1;" ::"r"((uint32_t)__cvta_generic_to_shared(att_px + (k_))), "f"(x_)     \
                         : "memory");                                                                                    \
            asm volatile("mov.u64 %0, %%clock64;" : "=l"(c_)::"memory");                                                \
            att_pm[k_] = c_;                                                                                              \
        }                                                                                                                \
    } while (0)
#endif
#include "kernels/cuda/hqx_prep.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/seqs.cuh"

#define ATT_THREADS 256
#define ATT_SMEM_MAX (227 * 1024) // H100's opt-in shared memory per block
#define ATT_MAX_HD 512

__global__ void kv_store_k(const float *__restrict__ k, const float *__restrict__ v, float *__restrict__ kc,
                           float *__restrict__ vc, int pos, const int *dpos, const SeqK sq, int n_kv, int hd, int max_ctx) {
    if (dpos) pos = *dpos;
    const int t = blockIdx.x / n_kv, g = blockIdx.x % n_kv, p = seq_pos(sq, pos, t);
    const float *ks = k + ((int64_t)t * n_kv + g) * hd, *vs = v + ((int64_t)t * n_kv + g) * hd;
    float *kd = kc + seq_off(sq, t) + ((int64_t)g * max_ctx + p) * hd, *vd = vc + seq_off(sq, t) + ((int64_t)g * max_ctx + p) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) { kd[i] = ks[i]; vd[i] = vs[i]; }
}

__global__ void __launch_bounds__(ATT_THREADS) attend_k(const float *__restrict__ q, const float *__restrict__ kc,
                                                        const float *__restrict__ vc, float *__restrict__ out, int pos,
                                                        const int *dpos, const SeqK sq, int n_heads, int n_kv, int hd, int max_ctx,
                                                        float scale) {
    extern __shared__ float sm[]; // q (hd), scores (n_ctx), the warps' partial outputs (8, hd)
    __shared__ float red[ATT_THREADS / 32];
    if (dpos) pos = *dpos;
    const int h = blockIdx.x, t = blockIdx.y, g = h / (n_heads / n_kv);
    const int n_ctx = seq_pos(sq, pos, t) + 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = ATT_THREADS / 32;
    float *qs = sm, *s = sm + hd;
    const float *qr = q + ((int64_t)t * n_heads + h) * hd;
    for (int i = threadIdx.x; i < hd; i += ATT_THREADS) qs[i] = qr[i];
    __syncthreads();
    const float *K = kc + seq_off(sq, t) + (int64_t)g * max_ctx * hd, *V = vc + seq_off(sq, t) + (int64_t)g * max_ctx * hd;
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

// The attention block's inputs from the fused q/k/v rows (kvq_cuda_attn_in): one warp per
// (token, head slot), slots 0..n_heads−1 the query heads, then the KV heads' k, then their v.
// The head's values (+ bias) into the warp's shared row, the per-head RMSNorm (q_norm/k_norm),
// RoPE, then q to its buffer and k, v into the cache at the token's position — in the order and
// with the formulas of qkv_split_k, rmsnorm_k and rope_k.
#define AIN_WARPS 4
// One head of the attention inputs, by one warp: the head's values from the fused row (+ bias)
// into v (hd floats of shared memory), the per-head RMSNorm (nw: NULL for none), RoPE at
// position p (rot), into dst.
// rc, rs: the rotation's cos and sin at p for i < rot_dim / 2 when computed before (the split
// kernel's table, made before griddepcontrol.wait), else NULL: computed here (the same expression).
// dst2: NULL, or where the result also goes (the split kernel keeps its token's k and v rows in
// shared memory).
__device__ __forceinline__ float ain_cos(int p, float f) { return (float)cos((double)__fmul_rn((float)p, f)); }
__device__ __forceinline__ float ain_sin(int p, float f) { return (float)sin((double)__fmul_rn((float)p, f)); }
__device__ __forceinline__ void ain_head(const float *__restrict__ row, const float *__restrict__ bias, int off,
                                         const float *__restrict__ nw, float eps, bool rot, float *dst, float *v, int lane,
                                         int hd, int rot_dim, int p, const float *__restrict__ inv_freq,
                                         const float *rc = NULL, const float *rs = NULL, float *dst2 = NULL) {
    const float *src = row + off;
    for (int i = lane; i < hd; i += 32) v[i] = bias ? __fadd_rn(src[i], bias[off + i]) : src[i];
    __syncwarp();
    if (nw) {
        float ss = 0.0f;
        for (int i = lane; i < hd; i += 32) ss = fmaf(v[i], v[i], ss);
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float r = 1.0f / sqrtf(ss / (float)hd + eps);
        for (int i = lane; i < hd; i += 32) v[i] = nw[i] * (v[i] * r);
        __syncwarp();
    }
    const int half = rot ? rot_dim / 2 : 0;
    for (int i = lane; i < half; i += 32) {
        const float c = rc ? rc[i] : ain_cos(p, inv_freq[i]), sn = rs ? rs[i] : ain_sin(p, inv_freq[i]);
        const float x0 = v[i], x1 = v[i + half];
        const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn)), y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, sn));
        dst[i] = y0;
        dst[i + half] = y1;
        if (dst2) dst2[i] = y0, dst2[i + half] = y1;
    }
    for (int i = 2 * half + lane; i < hd; i += 32) {
        dst[i] = v[i];
        if (dst2) dst2[i] = v[i];
    }
    __syncwarp();
}

// The attention inputs a one-token split attend computes itself (kvq_cuda_attend_set_inputs).
struct AinK {
    const float *qkv, *bias, *qn, *kn, *inv_freq;
    float eps;
    int rot_dim, on;
};

__global__ void __launch_bounds__(AIN_WARPS * 32) attn_in_k(const float *__restrict__ qkv, const float *__restrict__ bias,
                                                              const float *__restrict__ q_norm, const float *__restrict__ k_norm,
                                                              float eps, float *__restrict__ q, float *__restrict__ kc,
                                                              float *__restrict__ vc, int T, int pos, const int *dpos, const SeqK sq,
                                                              int n_heads, int n_kv, int hd, int rot_dim,
                                                              const float *__restrict__ inv_freq, int max_ctx, int rows) {
    extern __shared__ float ain_sm[];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int slots = n_heads + 2 * n_kv;
    const int64_t gslot = (int64_t)blockIdx.x * AIN_WARPS + wi;
    if (gslot >= (int64_t)T * slots) return;
    if (dpos) pos = *dpos;
    const int t = (int)(gslot / slots), s = (int)(gslot % slots), p = seq_pos(sq, pos, t);
    const int64_t so = seq_off(sq, t);
    const int q_dim = n_heads * hd, kv_dim = n_kv * hd, W = q_dim + 2 * kv_dim;
    int off; // the head's first column in the fused row
    const float *nw = NULL;
    float *dst;
    bool rot = true;
    if (s < n_heads) {
        off = s * hd;
        nw = q_norm;
        dst = q + ((int64_t)t * n_heads + s) * hd;
    } else if (s < n_heads + n_kv) {
        const int g = s - n_heads;
        off = q_dim + g * hd;
        nw = k_norm;
        dst = rows ? kc + ((int64_t)t * n_kv + g) * hd : kc + so + ((int64_t)g * max_ctx + p) * hd;
    } else {
        const int g = s - n_heads - n_kv;
        off = q_dim + kv_dim + g * hd;
        rot = false;
        dst = rows ? vc + ((int64_t)t * n_kv + g) * hd : vc + so + ((int64_t)g * max_ctx + p) * hd;
    }
    ain_head(qkv + (int64_t)t * W, bias, off, nw, eps, rot, dst, ain_sm + wi * hd, lane, hd, rot_dim, p, inv_freq);
}

// Split attention (kvq_cuda_attend's fast path; head_dim a multiple of 32 up to 256, at most 8
// query heads per KV head). Block (s, g, t): split s of n_s over token t's positions [0, n_ctx)
// (chunks of ceil(n_ctx / n_s), so a step and a prefill row split alike and round alike), for
// all the query heads of KV head g (each K and V row read once for the group). Warp w takes
// the chunk's positions w, w+8, ...; lane l holds coordinates l·D.. of the heads' q, and of the
// row; per position: the G dots by shuffles, then the online softmax update of the warp's
// running max, sum and output. The warps meet in shared memory; the block's (max, sum,
// output) go to scratch; the block that finishes last for (t, g) (an atomic count) merges the
// n_s splits in their order and writes the output, so the result does not depend on which
// block finished last.
// n_s (issue 12, session 19): at_splits — at least cmin positions a split, at most ATS splits
// (KVQ_CUDA_ATTN_CMIN; default 0: always ATS, the earlier kernel's bits — cmin 64 measured slower on the
// H100, session 19 call D: the 8B decode 1.5 % slower, attend 13.4 → 16.8 µs a layer). A function of
// n_ctx alone, so every path that splits (one-token step, prefill rows, several sequences,
// a replayed graph) splits a token alike. The grid keeps ATS blocks per (KV head, token) —
// a captured step's grid fits every position, n_ctx read on the device — and blocks s >= n_s
// return at once. (The reading that fewer splits would save the blocks' fixed work and the 16-way
// merge at short contexts did not hold: each warp's positions are a serial chain.)
// Session 25 (H200, the 8B shape at T ~ 180..440, phase clocks of every decode launch:
// tests/bench/att_stamps_build.sh): the positions loop sums the G dots together (at_allsum) with
// no branch between heads (4149 → 2493 cycles a block); the softmax factors are computed once a
// warp / a split, not once an output; a block is counted by one acq_rel atomic after a barrier
// (no fence by every thread); the final merge loads every split's (max, sum) and outputs in one
// round trip; the token's own k, v rows and the merged output stay in shared memory for the
// positions and o's tiles. Every change keeps the bits (the sums in the same order, the same
// pairs). Also cmin 32 / 64 measured again on the H200: slower (the 8B decode 386.6 / 382.8 tok/s
// against 396.1 at the default, call A).
#define ATS 16     // splits of the positions per (token, KV head), at most
#define AT_CMIN 0  // positions a split at least, by default (0: ATS splits always)
#define AT_GMAX 8  // query heads per KV head
#define AT_TT 16   // tokens per launch (the scratch's size)
#define AT_HB 4    // query heads merged per pair of block barriers

// Splits of n_ctx positions with at least cmin positions a split (cmin <= 0: ATS).
__host__ __device__ __forceinline__ int at_splits(int n_ctx, int cmin) {
    if (cmin <= 0) return ATS;
    const int n = n_ctx / cmin + (n_ctx % cmin != 0); // ceil without overflow near 2^31
    return n < 1 ? 1 : n > ATS ? ATS : n;
}

static float *g_part = NULL; // (AT_TT, n_kv, ATS, G, hd + 2): output, max, sum
static int *g_cnt = NULL;    // (AT_TT, n_kv) blocks done
static size_t g_part_cap = 0, g_cnt_cap = 0;

// The sums over a warp's 32 lanes of S values a lane (S = 1, 2, 4, 8), every sum on every lane
// in v[0..S) on return, with the bits of S separate butterflies (dt += shfl_xor(dt, o), o = 16, 8,
// .., 1): at each stage a lane keeps half of its slots and adds its partner's copy of them (the
// same pair of numbers the butterfly adds, a + b = b + a), so after the stages that halve the
// slots each lane holds one slot's butterfly sum; the last stages sum that one slot; then each
// slot's sum is read from a lane that holds it. S − 1 + 5 − log2 S + S shuffles instead of 5·S, in
// 6 dependent steps instead of 5 a value.
template <int S>
__device__ __forceinline__ void at_allsum(float (&v)[S], int lane) {
    constexpr int LS = S >= 8 ? 3 : S >= 4 ? 2 : S >= 2 ? 1 : 0;
#pragma unroll
    for (int k = 0; k < 5; k++) {
        const int o = 16 >> k, n = S >> k; // n: slots still held
        if (n > 1) {
            const bool hi = lane & o; // this lane keeps the upper half
#pragma unroll
            for (int i = 0; i < n / 2; i++) {
                const float send = hi ? v[i] : v[i + n / 2], keep = hi ? v[i + n / 2] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
        }
    }
    if constexpr (S > 1) {
        const float r = v[0]; // slot (lane >> (5 − LS)) of S, as the halvings chose
#pragma unroll
        for (int h = 0; h < S; h++) v[h] = __shfl_sync(0xffffffffu, r, h << (5 - LS));
    }
}

// KVQ_ATT_STAMPS (a measuring build only, never the shipped one; tests/bench/att_stamps_build.sh): thread 0 of each
// block of a one-token decode launch with o's preparation (pfs) reads its SM's clock at the kernel's phases, and
// the sums go to att_st, printed at exit (att_st_print): where a decode step's attention spends its
// time. Phases: 0 entry, 1 after griddepcontrol.wait (also %globaltimer), 2 the inputs done and q in registers,
// 3 the positions done (every warp), 4 the block's merge written, 5 the block counted; the merging block: 6 the
// splits merged, 7 o's tiles prepared (also %globaltimer: the span from the earliest wait of its KV head).
#ifdef KVQ_ATT_STAMPS
__device__ unsigned long long att_st[20], att_st_first[64]; // first: ~(earliest wait's globaltimer), by atomicMax
__device__ __forceinline__ unsigned long long att_gt() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define ATT_STAMP(k) do { if (pfs && threadIdx.x == 0) st_c[k] = clock64(); } while (0)
#else
#define ATT_STAMP(k) do { } while (0)
#endif

template <int D>
__global__ void __launch_bounds__(ATT_THREADS) attend_split_k(const float *__restrict__ q, float *kc,
                                                              float *vc, float *__restrict__ out, int pos,
                                                              const int *dpos, int t0, int n_heads, int n_kv, int max_ctx,
                                                              float scale, float *part, int *cnt, const Dev pd,
                                                              unsigned char *pfs, const AinK ain, const SeqK sq, int cmin, int pf) {
    constexpr int HD = 32 * D, NW = ATT_THREADS / 32;
    // with pfs: o's one-token product follows as a programmatic dependent (it reads what the
    // merging blocks prepare only after this grid has completed)
    if (pfs) asm volatile("griddepcontrol.launch_dependents;");
#ifdef KVQ_ATT_STAMPS
    long long st_c[8] = {};
    unsigned long long st_g1 = 0;
#endif
    ATT_STAMP(0);
    __shared__ float sm_m[NW][AT_GMAX], sm_l[NW][AT_GMAX];
    __shared__ float sm_o[NW][AT_HB][HD];
    __shared__ float sm_c[AT_HB][NW], sm_M[AT_HB];
    __shared__ float sm_kv[2][HD]; // with ain: the token's own k and v rows (ld_row reads them here)
    __shared__ int last;
    if (dpos) pos = *dpos;
    const int s = blockIdx.x, g = blockIdx.y, tl = blockIdx.z, t = t0 + tl, G = n_heads / n_kv;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int n_ctx = seq_pos(sq, pos, t) + 1, ns = at_splits(n_ctx, cmin), chunk = (n_ctx + ns - 1) / ns;
    // a block past the splits: nothing to do. It has made (with pfs) the launch_dependents
    // call above, as every block must before the dependent may start (an exit counts too); the
    // dependent's griddepcontrol.wait still waits for this whole grid. The blocks s < n_s
    // (s = 0 always) wait for the kernel before, so the grid never completes ahead of it. The
    // token's own position n_ctx − 1 lies in split (n_ctx − 1) / chunk < n_s: its k/v are
    // written below as before.
    if (s >= ns) return;
    const int p0 = s * chunk, p1 = min(n_ctx, p0 + chunk);
    // with ain (one token): the inputs of this KV head's group computed here, as attn_in_k
    // computes them (ain_head): the G query heads into shared memory, and, by the block whose
    // split holds the token's own position, k and v into the cache there
    // Before griddepcontrol.wait (a programmatic dependent of the q/k/v product; at once
    // otherwise) only what no kernel of this step writes: the rotation's cos and sin at the
    // token's position, and the first cache row of each warp below the token's own position
    // (earlier steps wrote it).
    __shared__ float sm_rc[HD / 2], sm_rs[HD / 2];
    const bool rtab = ain.on && ain.rot_dim <= HD;
    if (rtab)
        for (int i = threadIdx.x; i < ain.rot_dim / 2; i += ATT_THREADS) {
            const float f = __ldg(ain.inv_freq + i);
            sm_rc[i] = ain_cos(pos, f);
            sm_rs[i] = ain_sin(pos, f);
        }
    const float *K = kc + seq_off(sq, t) + (int64_t)g * max_ctx * HD, *V = vc + seq_off(sq, t) + (int64_t)g * max_ctx * HD;
    // pf > 0 (one token a launch): the split's first pf positions' K and V rows (contiguous: one
    // range each) fetched into L2 at once, before the wait (rows earlier steps wrote; the token's
    // own row, written below, goes to L2 as any store does), so the warps' loads below find them in
    // L2. Measured neutral (session 25 call B, PF=0 against 64: the positions were waiting on the
    // heads' serial chain, not on memory — fixed since by the loop below); left on, not re-measured.
    if (pf > 0 && gridDim.z == 1 && p1 > p0 && threadIdx.x == 0) { // (a split past n_ctx has p1 <= p0)
        const unsigned bytes = (unsigned)min(p1 - p0, pf) * (unsigned)(HD * sizeof(float));
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(K + (int64_t)p0 * HD), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(V + (int64_t)p0 * HD), "r"(bytes) : "memory");
    }
    // the next position's K and V rows are loaded before this one's are used (a warp takes
    // only a few positions at short contexts: each used to wait a whole load latency)
    float kr[D], vr[D], kn[D], vn[D];
    auto ld_row = [&](int p, float *kd, float *vd) {
        if (ain.on && p == pos) { // computed by this block: the copy it kept in shared memory
#pragma unroll
            for (int d = 0; d < D; d++) { kd[d] = sm_kv[0][lane * D + d]; vd[d] = sm_kv[1][lane * D + d]; }
        } else if constexpr (D == 4) {
            const float4 a = __ldg((const float4 *)(K + (int64_t)p * HD) + lane), b = __ldg((const float4 *)(V + (int64_t)p * HD) + lane);
            kd[0] = a.x, kd[1] = a.y, kd[2] = a.z, kd[3] = a.w;
            vd[0] = b.x, vd[1] = b.y, vd[2] = b.z, vd[3] = b.w;
        } else {
#pragma unroll
            for (int d = 0; d < D; d++) { kd[d] = __ldg(K + (int64_t)p * HD + lane * D + d); vd[d] = __ldg(V + (int64_t)p * HD + lane * D + d); }
        }
    };
    const bool early = ain.on && p0 + w < p1 && p0 + w != pos; // with ain the cache holds every earlier position
    if (early) ld_row(p0 + w, kr, vr);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    ATT_STAMP(1);
#ifdef KVQ_ATT_STAMPS
    if (pfs && threadIdx.x == 0) st_g1 = att_gt();
#endif
    const float *qsrc = q + (int64_t)t * n_heads * HD + (int64_t)g * G * HD;
    if (ain.on) {
        if (rtab) __syncthreads(); // the rotation's table
        float *scr = &sm_o[0][0][0]; // rows 0..G+1: the slots' values; G+2..2G+1: the q heads
        const int mine = p0 <= pos && pos < p1, nslot = G + (mine ? 2 : 0), q_dim = n_heads * HD, kv_dim = n_kv * HD;
        for (int sl = w; sl < nslot; sl += NW) {
            int off = (g * G + sl) * HD;
            const float *nw = ain.qn;
            float *dst = scr + (int64_t)(G + 2 + sl) * HD;
            bool rot = true;
            float *dst2 = NULL; // k and v also into sm_kv
            if (sl == G) off = q_dim + g * HD, nw = ain.kn, dst = kc + ((int64_t)g * max_ctx + pos) * HD, dst2 = sm_kv[0];
            else if (sl == G + 1)
                off = q_dim + kv_dim + g * HD, nw = NULL, rot = false, dst = vc + ((int64_t)g * max_ctx + pos) * HD, dst2 = sm_kv[1];
            ain_head(ain.qkv, ain.bias, off, nw, ain.eps, rot, dst, scr + (int64_t)sl * HD, lane, HD, ain.rot_dim, pos, ain.inv_freq,
                     rtab ? sm_rc : NULL, rtab ? sm_rs : NULL, dst2);
        }
        __syncthreads();
        qsrc = scr + (int64_t)(G + 2) * HD;
    }
    float qv[AT_GMAX][D], acc[AT_GMAX][D], m[AT_GMAX], l[AT_GMAX];
#pragma unroll
    for (int h = 0; h < AT_GMAX; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int d = 0; d < D; d++) {
            acc[h][d] = 0.0f;
            qv[h][d] = h < G ? qsrc[h * HD + lane * D + d] : 0.0f;
        }
    }
    if (ain.on) __syncthreads(); // q read before the merge reuses the shared rows
    ATT_STAMP(2);
    if (p0 + w < p1 && !early) ld_row(p0 + w, kr, vr);
    // The positions, with S = G rounded up to 1, 2, 4 or 8 head slots, a compile-time count: the
    // slots' dots summed together (at_allsum: the butterfly's sums, half the shuffles, no chain
    // per head) and the slots' softmax updates without a branch between them, so their chains
    // overlap (session 25: the loop with a break at G ran the heads one after another, ~1700
    // cycles a position for G = 4). Slots past G hold q = 0 and states no one reads.
    auto walk = [&](auto s_) {
        constexpr int S = decltype(s_)::value;
        for (int p = p0 + w; p < p1; p += NW) {
            if (p + NW < p1) ld_row(p + NW, kn, vn);
            float sc[S];
#pragma unroll
            for (int h = 0; h < S; h++) {
                float dt = 0.0f;
#pragma unroll
                for (int d = 0; d < D; d++) dt = fmaf(qv[h][d], kr[d], dt);
                sc[h] = dt;
            }
            at_allsum<S>(sc, lane);
#pragma unroll
            for (int h = 0; h < S; h++) {
                const float x = sc[h] * scale, mn = fmaxf(m[h], x);
                const float corr = expf(m[h] - mn), e = expf(x - mn); // m = -inf at first: corr 0
                l[h] = fmaf(l[h], corr, e);
#pragma unroll
                for (int d = 0; d < D; d++) acc[h][d] = fmaf(acc[h][d], corr, e * vr[d]);
                m[h] = mn;
            }
#pragma unroll
            for (int d = 0; d < D; d++) kr[d] = kn[d], vr[d] = vn[d];
        }
    };
    if (G <= 1) walk(std::integral_constant<int, 1>{});
    else if (G <= 2) walk(std::integral_constant<int, 2>{});
    else if (G <= 4) walk(std::integral_constant<int, 4>{});
    else walk(std::integral_constant<int, 8>{});
    // the warps' (max, sum, output) merged in warp order, AT_HB heads at a time (one pair of
    // barriers for each AT_HB heads, not each head; the same sums per output). Each warp's
    // factor exp(m_w − M) is computed once per head (sm_c), not once per output coordinate:
    // the same value, so the same sums.
    float *pb = part + ((((int64_t)tl * n_kv + g) * ATS + s) * AT_GMAX) * (HD + 2);
#pragma unroll
    for (int h0 = 0; h0 < AT_GMAX; h0 += AT_HB) { // static indices: the arrays stay in registers
        if (h0 >= G) break;
#pragma unroll
        for (int hh = 0; hh < AT_HB; hh++) {
            const int h = h0 + hh;
            if (h >= G) break;
            if (lane == 0) { sm_m[w][h] = m[h]; sm_l[w][h] = l[h]; }
#pragma unroll
            for (int d = 0; d < D; d++) sm_o[w][hh][lane * D + d] = acc[h][d];
        }
        __syncthreads();
        ATT_STAMP(3);
        const int nh = min(AT_HB, G - h0);
        if (threadIdx.x < nh * NW) { // (head, warp): the warp's factor; head's max M and sum L (warp 0's thread)
            const int hh = threadIdx.x / NW, k = threadIdx.x % NW, h = h0 + hh;
            float M = -INFINITY;
            for (int i = 0; i < NW; i++) M = fmaxf(M, sm_m[i][h]);
            sm_c[hh][k] = sm_m[k][h] == -INFINITY ? 0.0f : expf(sm_m[k][h] - M);
            if (k == 0) sm_M[hh] = M;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < nh * HD; i += ATT_THREADS) {
            const int hh = i / HD, h = h0 + hh, d = i % HD;
            float L = 0.0f, O = 0.0f;
#pragma unroll
            for (int k = 0; k < NW; k++) {
                const float c = sm_c[hh][k];
                L = fmaf(sm_l[k][h], c, L);
                O = fmaf(sm_o[k][hh][d], c, O);
            }
            float *ph = pb + (int64_t)h * (HD + 2);
            ph[d] = O;
            if (d == 0) { ph[HD] = sm_M[hh]; ph[HD + 1] = L; }
        }
        __syncthreads();
    }
    ATT_STAMP(4);
#ifdef KVQ_ATT_STAMPS
    if (pfs && threadIdx.x == 0) atomicMax(att_st_first + g, ~st_g1); // before the block is counted
#endif
    // the last of the n_s blocks of (t, g) merges the splits (only they count: the counter is
    // back at 0 after every launch, as the merging block resets it). One thread counts the
    // block, after the barrier that orders every thread's partials before it: its atomic
    // add releases them (and acquires the other blocks' when it is the last) at the GPU's
    // scope, and the barrier after it passes that on to the block's threads (the pattern of a
    // split-K semaphore; no fence by every thread).
    __syncthreads();
    if (threadIdx.x == 0) {
        int old;
        asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(cnt + tl * n_kv + g) : "memory");
        last = old == ns - 1;
    }
    __syncthreads();
    ATT_STAMP(5);
#ifdef KVQ_ATT_STAMPS
    if (pfs && threadIdx.x == 0) {
        for (int k = 1; k < 5; k++) atomicAdd(att_st + k, (unsigned long long)(st_c[k + 1] - st_c[k]));
        atomicAdd(att_st + 0, 1ull);
    }
#endif
    if (!last) return;
    const float *pg = part + (((int64_t)tl * n_kv + g) * ATS) * AT_GMAX * (HD + 2);
    // each thread two adjacent coordinates of a head: the n_s splits' (max, sum) and outputs
    // loaded together (one round trip through L2, 8-byte loads), the head's max, each split's
    // factor exp(m_k − M), the sums in split order — the values of the formula every output
    // used before, so the same bits. With pfs the block keeps its output in shared memory
    // (sm_o, free now) for o's tiles below.
    float *xo = &sm_o[0][0][0];
    for (int i = threadIdx.x; i < G * HD / 2; i += ATT_THREADS) {
        const int h = i / (HD / 2), d = 2 * (i % (HD / 2));
        float2 o[ATS], ml[ATS];
#pragma unroll
        for (int k = 0; k < ATS; k++)
            if (k < ns) {
                const float *ph = pg + ((int64_t)k * AT_GMAX + h) * (HD + 2);
                ml[k] = __ldcg((const float2 *)(ph + HD));
                o[k] = __ldcg((const float2 *)(ph + d));
            }
        float M = -INFINITY;
#pragma unroll
        for (int k = 0; k < ATS; k++)
            if (k < ns) M = fmaxf(M, ml[k].x);
#ifdef KVQ_ATT_STAMPS
        if (i == threadIdx.x) KVQ_PREP_MARK(0, M + o[0].x + o[0].y); // the splits' loads arrived (att_pm[0])
#endif
        float L = 0.0f, O0 = 0.0f, O1 = 0.0f;
#pragma unroll
        for (int k = 0; k < ATS; k++)
            if (k < ns) {
                const float c = ml[k].x == -INFINITY ? 0.0f : expf(ml[k].x - M);
                L = fmaf(ml[k].y, c, L);
                O0 = fmaf(o[k].x, c, O0);
                O1 = fmaf(o[k].y, c, O1);
            }
        const float r0 = O0 / L, r1 = O1 / L;
        float *od = out + ((int64_t)t * n_heads + g * G + h) * HD + d;
        od[0] = r0;
        od[1] = r1;
        if (pfs) xo[h * HD + d] = r0, xo[h * HD + d + 1] = r1;
    }
    ATT_STAMP(6);
#ifdef KVQ_ATT_STAMPS
    const long long st_ld = att_pm[0]; // read before the preparation's marks reuse att_pm
    long long st_p0 = 0;
#endif
    if (pfs) { // one token: the tiles of this group's output columns, as hqx_prep_i8 would
        __syncthreads(); // the block's output in xo
#ifdef KVQ_ATT_STAMPS
        st_p0 = clock64();
#endif
        const int64_t j0 = (int64_t)g * G * HD / pd.T, nj = (int64_t)G * HD / pd.T;
        for (int64_t j = w; j < nj; j += NW) kvq_hqx_prep1_tile_sm(pd, pfs, xo + j * pd.T, lane, j0 + j);
    }
#ifdef KVQ_ATT_STAMPS
    __syncthreads();
    ATT_STAMP(7);
    if (pfs && threadIdx.x == 0) { // the merging block: its own phases, and the span from its KV head's earliest wait
        const unsigned long long g7 = att_gt(), first = ~atomicExch(att_st_first + g, 0ull);
        atomicAdd(att_st + 5, (unsigned long long)(st_c[6] - st_c[5]));
        atomicAdd(att_st + 6, (unsigned long long)(st_c[7] - st_c[6]));
        atomicAdd(att_st + 7, g7 - first);
        atomicAdd(att_st + 8, g7 - st_g1);
        atomicAdd(att_st + 9, 1ull);
        // the tail's parts: the splits' loads, the merge's arithmetic and stores, the barrier before o's tiles, warp 0's
        // tile rotated, its amax/sum, its codes, the wait for the other warps' tiles
        atomicAdd(att_st + 10, (unsigned long long)(st_ld - st_c[5]));
        atomicAdd(att_st + 11, (unsigned long long)(st_c[6] - st_ld));
        atomicAdd(att_st + 12, (unsigned long long)(st_p0 - st_c[6]));
        atomicAdd(att_st + 13, (unsigned long long)(att_pm[1] - st_p0));
        atomicAdd(att_st + 14, (unsigned long long)(att_pm[2] - att_pm[1]));
        atomicAdd(att_st + 15, (unsigned long long)(att_pm[3] - att_pm[2]));
        atomicAdd(att_st + 16, (unsigned long long)(st_c[7] - att_pm[3]));
    }
#endif
    if (threadIdx.x == 0) cnt[tl * n_kv + g] = 0; // ready for the next launch (or graph replay)
}

// Scratch for n_kv KV heads of head_dim (not while a graph is being captured: sized by init).
static kvq_status split_scratch(int n_kv, int head_dim, kvq_err *err) {
    const size_t pn = (size_t)AT_TT * n_kv * ATS * AT_GMAX * (head_dim + 2), cn = (size_t)AT_TT * n_kv;
    if (pn <= g_part_cap && cn <= g_cnt_cap) return KVQ_OK;
    cudaFree(g_part);
    cudaFree(g_cnt);
    g_part = NULL; g_cnt = NULL; g_part_cap = g_cnt_cap = 0;
    CU_TRY(cudaMalloc((void **)&g_part, sizeof(float) * pn));
    CU_TRY(cudaMalloc((void **)&g_cnt, sizeof(int) * cn));
    CU_TRY(cudaMemset(g_cnt, 0, sizeof(int) * cn));
    g_part_cap = pn;
    g_cnt_cap = cn;
    return KVQ_OK;
}

static int g_cmin = -1; // kvq_cuda_attend_set_cmin; -1: unset (KVQ_CUDA_ATTN_CMIN, else AT_CMIN)

extern "C" void kvq_cuda_attend_set_cmin(int cmin) { g_cmin = cmin < 0 ? -1 : cmin; }

// A count from the environment, at most hi; unset or not a count: def (the backend refuses such a
// value in one line before a model runs: backend_cuda.c's env_count; the tests and benchmarks that
// call the launchers directly get the default).
static int env_count_or(const char *name, long hi, int def) {
    const char *e = getenv(name);
    char *end = NULL;
    const long v = e && *e ? strtol(e, &end, 10) : -1;
    return v >= 0 && end && *end == 0 ? (int)(v > hi ? hi : v) : def;
}

static int cmin_get(void) {
    if (g_cmin < 0) g_cmin = env_count_or("KVQ_CUDA_ATTN_CMIN", 1 << 30, AT_CMIN);
    return g_cmin;
}

// Positions of a one-token launch's split fetched into L2 before the wait (the kernel's pf;
// KVQ_CUDA_ATTN_PF=n, 0 none; default AT_PF).
#define AT_PF 64
static int g_pf = -1;
static int pf_get(void) {
    if (g_pf < 0) g_pf = env_count_or("KVQ_CUDA_ATTN_PF", 4096, AT_PF);
    return g_pf;
}

extern "C" int kvq_cuda_attend_splits(int n_ctx) { return at_splits(n_ctx, cmin_get()); }

static int split_ok(int n_heads, int n_kv, int head_dim) {
    const char *e = getenv("KVQ_CUDA_ATTN_SPLIT");
    if (e && *e == '0') return 0;
    return head_dim % 32 == 0 && head_dim <= 256 && n_kv > 0 && n_heads % n_kv == 0 && n_heads / n_kv <= AT_GMAX;
}

static int smem_set = 0; // the 48 KiB default raised (once, never while a graph is captured)

static kvq_status raise_smem(kvq_err *err) {
    if (smem_set) return KVQ_OK;
    CU_TRY(cudaFuncSetAttribute(attend_k, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM_MAX - 1024));
    smem_set = 1;
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_attention_init(int n_heads, int n_kv_heads, int head_dim, int max_ctx, kvq_err *err) {
    if (split_ok(n_heads, n_kv_heads, head_dim)) {
        kvq_status s = split_scratch(n_kv_heads, head_dim, err);
        if (s) return s;
    }
    if (sizeof(float) * ((size_t)head_dim * (1 + ATT_THREADS / 32) + (size_t)max_ctx) > 48 * 1024) return raise_smem(err);
    return KVQ_OK;
}

extern "C" int kvq_cuda_attention_max_ctx(int n_heads, int n_kv_heads, int head_dim) {
    if (split_ok(n_heads, n_kv_heads, head_dim)) return 1 << 30; // positions are ints, offsets int64
    if (head_dim > ATT_MAX_HD) return 0;
    return (int)((ATT_SMEM_MAX - 1024) / sizeof(float)) - head_dim * (1 + ATT_THREADS / 32);
}

// With sq (several sequences) the positions are the caller's to check: only the kernels' limit.
static kvq_status check_span(int T, int pos, const kvq_cuda_seqs *sq, int n_heads, int n_kv, int head_dim, int max_ctx,
                             kvq_err *err) {
    if (sq) pos = 0, T = max_ctx;
    if (pos + T > max_ctx || pos + T > kvq_cuda_attention_max_ctx(n_heads, n_kv, head_dim))
        return kvq_err_set(err, KVQ_ERR_ARG, "cuda attention: positions up to %d exceed the cache (%d)", pos + T, max_ctx);
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_attn_in(const float *qkv, const float *bias, const float *q_norm, const float *k_norm,
                                       float eps, float *q, float *kc, float *vc, int T, int pos, const int *d_pos,
                                       const kvq_cuda_seqs *sq, int n_heads, int n_kv_heads, int head_dim, int rot_dim,
                                       const float *inv_freq, int max_ctx, kvq_err *err) {
    if (T <= 0) return KVQ_OK;
    if (head_dim > ATT_MAX_HD || rot_dim > head_dim || (rot_dim & 1))
        return kvq_err_set(err, KVQ_ERR_ARG, "cuda attention input: head_dim %d, rotary %d", head_dim, rot_dim);
    kvq_status s = check_span(T, pos, sq, n_heads, n_kv_heads, head_dim, max_ctx, err);
    if (s) return s;
    const int64_t slots = (int64_t)T * (n_heads + 2 * n_kv_heads);
    attn_in_k<<<(unsigned)((slots + AIN_WARPS - 1) / AIN_WARPS), AIN_WARPS * 32, sizeof(float) * AIN_WARPS * head_dim,
                kvq_cuda_stream()>>>(qkv, bias, q_norm, k_norm, eps, q, kc, vc, T, pos, d_pos, seqk_of(sq), n_heads, n_kv_heads,
                                     head_dim, rot_dim, inv_freq, max_ctx, 0);
    CU_LAUNCHED("attn_in");
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_attn_in_rows(const float *qkv, const float *bias, const float *q_norm, const float *k_norm,
                                            float eps, float *q, float *k, float *v, int T, int pos, const int *d_pos,
                                            const kvq_cuda_seqs *sq, int n_heads, int n_kv_heads, int head_dim, int rot_dim,
                                            const float *inv_freq, kvq_err *err) {
    if (T <= 0) return KVQ_OK;
    if (head_dim > ATT_MAX_HD || rot_dim > head_dim || (rot_dim & 1))
        return kvq_err_set(err, KVQ_ERR_ARG, "cuda attention input: head_dim %d, rotary %d", head_dim, rot_dim);
    const int64_t slots = (int64_t)T * (n_heads + 2 * n_kv_heads);
    attn_in_k<<<(unsigned)((slots + AIN_WARPS - 1) / AIN_WARPS), AIN_WARPS * 32, sizeof(float) * AIN_WARPS * head_dim,
                kvq_cuda_stream()>>>(qkv, bias, q_norm, k_norm, eps, q, k, v, T, pos, d_pos, seqk_of(sq), n_heads, n_kv_heads,
                                     head_dim, rot_dim, inv_freq, 0, 1); // rows: the sequences' offsets unused
    CU_LAUNCHED("attn_in rows");
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_attention(const float *q, const float *k, const float *v, float *kc, float *vc,
                                         float *out, int T, int pos, const int *d_pos, const kvq_cuda_seqs *sq, int n_heads,
                                         int n_kv_heads, int head_dim, int max_ctx, float scale, kvq_err *err) {
    if (T <= 0) return KVQ_OK;
    kvq_status s = check_span(T, pos, sq, n_heads, n_kv_heads, head_dim, max_ctx, err);
    if (s) return s;
    kv_store_k<<<T * n_kv_heads, 128, 0, kvq_cuda_stream()>>>(k, v, kc, vc, pos, d_pos, seqk_of(sq), n_kv_heads, head_dim,
                                                              max_ctx);
    CU_LAUNCHED("kv_store");
    return kvq_cuda_attend(q, kc, vc, out, T, pos, d_pos, sq, n_heads, n_kv_heads, head_dim, max_ctx, scale, err);
}

// ---- Prefill of one sequence (issue 12, session 11): a chunk of T >= TA_MIN tokens at
// consecutive positions [pos, pos + T). The split kernel above reads every position's K and V
// rows once per token, so a prompt of n tokens reads ~n²/2 rows per KV head (a 32k prompt on
// the 8B shape: ~4 TB a layer: it did not finish). Here a block takes TA_ROWS query rows — the
// G query heads of one KV head for TA_ROWS / G consecutive tokens — and walks the positions the
// block's last token sees in tiles of TA_P positions staged in shared memory, so every K/V row
// a block loads serves all its rows. Warp w owns rows w·TA_R..: lane l scores positions l and
// l + 32 of the tile against each row (q rows broadcast from shared memory, K rows padded to
// HD + 4 floats: the lanes' 16-byte reads meet no bank twice), a running max and lane-local sum
// per row (flash attention's online softmax; the sums meet once at the end), then the tile's
// probabilities from shared memory (broadcast) times V with lane l holding dimensions l + 32i.
// fp32 throughout; the order of the sums differs from the split kernel's (results within
// float rounding of it: test_cuda_model's test_prefill_tile). Below TA_CTX a prefill row keeps
// the split kernel, so it has the bits of the same token decoded alone (the decode/prefill
// invariant test_shared_and_converted asserts; with int8 activations a float-rounding
// difference can move a code, measured 0.107 relative on a 2-bit model at 100 tokens); from
// TA_CTX on, where the split kernel's n²/2 rows cost more than the products (a 2048-token
// prompt: ~17 GB of K/V reads a layer on the 8B shape), the tiled kernel.
#define TA_W 4                  // warps per block
#define TA_R 8                  // query rows per warp
#define TA_ROWS (TA_W * TA_R)   // query rows per block
#define TA_P 64                 // positions per tile
#define TA_MIN 16               // tokens from which a chunk may take this kernel
#define TA_CTX 2048             // by default, chunks that reach this position

template <int D> static constexpr size_t ta_smem() {
    return sizeof(float) * ((size_t)TA_ROWS * 32 * D + (size_t)TA_P * (32 * D + 4) + (size_t)TA_P * 32 * D + (size_t)TA_W * TA_R * TA_P);
}

template <int D>
__global__ void __launch_bounds__(TA_W * 32, 2) attend_tile_k(const float *__restrict__ q, const float *__restrict__ kc,
                                                             const float *__restrict__ vc, float *__restrict__ out, int pos,
                                                             int T, int n_heads, int n_kv, int max_ctx, float scale) {
    constexpr int HD = 32 * D, KS = HD + 4;
    extern __shared__ float4 ta_sm4[];
    float *qs = (float *)ta_sm4, *ks = qs + TA_ROWS * HD, *vs = ks + TA_P * KS, *ps = vs + TA_P * HD;
    const int G = n_heads / n_kv, qt = TA_ROWS / G, g = blockIdx.y, t0 = blockIdx.x * qt, tn = min(qt, T - t0);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    // row r: token t0 + r / G, query head g·G + r % G (rows past the chunk read zeros)
    for (int i = threadIdx.x; i < TA_ROWS * HD / 4; i += TA_W * 32) {
        const int r = i / (HD / 4), c = i % (HD / 4), tl = r / G;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (tl < tn) v = __ldg((const float4 *)(q + ((int64_t)(t0 + tl) * n_heads + g * G + r % G) * HD) + c);
        ((float4 *)qs)[i] = v;
    }
    const float *K = kc + (int64_t)g * max_ctx * HD, *V = vc + (int64_t)g * max_ctx * HD;
    const int end = pos + t0 + tn; // positions the block's last token sees
    float m[TA_R], l[TA_R], acc[TA_R][D];
    int lim[TA_R]; // a row's positions: [0, lim); rows past the chunk see position 0 only
#pragma unroll
    for (int r = 0; r < TA_R; r++) {
        const int tl = (w * TA_R + r) / G;
        lim[r] = tl < tn ? pos + t0 + tl + 1 : 1;
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < D; i++) acc[r][i] = 0.0f;
    }
    const float *qw = qs + w * TA_R * HD;
    float *pw = ps + w * TA_R * TA_P;
    for (int p0 = 0; p0 < end; p0 += TA_P) {
        __syncthreads(); // the last tile used (and, the first time, q stored)
        for (int i = threadIdx.x; i < TA_P * HD / 4; i += TA_W * 32) {
            const int j = i / (HD / 4), c = i % (HD / 4);
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
            if (p0 + j < end) {
                a = __ldg((const float4 *)(K + (int64_t)(p0 + j) * HD) + c);
                b = __ldg((const float4 *)(V + (int64_t)(p0 + j) * HD) + c);
            }
            ((float4 *)(ks + j * KS))[c] = a;
            ((float4 *)(vs + j * HD))[c] = b;
        }
        __syncthreads();
        float s0[TA_R], s1[TA_R];
#pragma unroll
        for (int r = 0; r < TA_R; r++) s0[r] = s1[r] = 0.0f;
        const float *k0 = ks + lane * KS, *k1 = ks + (lane + 32) * KS;
#pragma unroll 4
        for (int d = 0; d < HD; d += 4) {
            const float4 a = *(const float4 *)(k0 + d), b = *(const float4 *)(k1 + d);
#pragma unroll
            for (int r = 0; r < TA_R; r++) {
                const float4 x = *(const float4 *)(qw + r * HD + d);
                s0[r] = fmaf(x.x, a.x, s0[r]); s0[r] = fmaf(x.y, a.y, s0[r]);
                s0[r] = fmaf(x.z, a.z, s0[r]); s0[r] = fmaf(x.w, a.w, s0[r]);
                s1[r] = fmaf(x.x, b.x, s1[r]); s1[r] = fmaf(x.y, b.y, s1[r]);
                s1[r] = fmaf(x.z, b.z, s1[r]); s1[r] = fmaf(x.w, b.w, s1[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < TA_R; r++) {
            const float a = p0 + lane < lim[r] ? s0[r] * scale : -INFINITY, b = p0 + lane + 32 < lim[r] ? s1[r] * scale : -INFINITY;
            float mx = fmaxf(a, b);
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            // position 0 is in every row's first tile, so mn is finite; m = -inf at first: corr 0
            const float mn = fmaxf(m[r], mx), corr = expf(m[r] - mn), ea = expf(a - mn), eb = expf(b - mn);
            l[r] = fmaf(l[r], corr, ea + eb);
#pragma unroll
            for (int i = 0; i < D; i++) acc[r][i] *= corr;
            m[r] = mn;
            pw[r * TA_P + lane] = ea;
            pw[r * TA_P + lane + 32] = eb;
        }
        __syncwarp();
        const int np = min(TA_P, end - p0); // positions past end have p = 0 and zero rows
        for (int j = 0; j < np; j += 4) {
            float v[4][D];
#pragma unroll
            for (int jj = 0; jj < 4; jj++)
#pragma unroll
                for (int i = 0; i < D; i++) v[jj][i] = vs[(j + jj) * HD + lane + 32 * i];
#pragma unroll
            for (int r = 0; r < TA_R; r++) {
                const float4 pp = *(const float4 *)(pw + r * TA_P + j);
#pragma unroll
                for (int i = 0; i < D; i++) {
                    float a = acc[r][i];
                    a = fmaf(pp.x, v[0][i], a); a = fmaf(pp.y, v[1][i], a);
                    a = fmaf(pp.z, v[2][i], a); a = fmaf(pp.w, v[3][i], a);
                    acc[r][i] = a;
                }
            }
        }
        __syncwarp(); // the probabilities read before the next tile's are written
    }
#pragma unroll
    for (int r = 0; r < TA_R; r++) {
        const int row = w * TA_R + r, tl = row / G;
        float lt = l[r];
        for (int o = 16; o > 0; o >>= 1) lt += __shfl_xor_sync(0xffffffffu, lt, o);
        if (tl >= tn) continue;
        float *o = out + ((int64_t)(t0 + tl) * n_heads + g * G + row % G) * HD;
        const float inv = 1.0f / lt;
#pragma unroll
        for (int i = 0; i < D; i++) o[lane + 32 * i] = acc[r][i] * inv;
    }
}

static int g_tile = -1; // kvq_cuda_attend_set_tile: 1 always, 0 never, 2 from TA_CTX; -1: unset

extern "C" void kvq_cuda_attend_set_tile(int on) { g_tile = on < 0 ? -1 : on; }

static int tile_ok(int T, int pos, const int *d_pos, const kvq_cuda_seqs *sq, int n_heads, int n_kv, int head_dim) {
    if (g_tile < 0) { // KVQ_CUDA_ATT_TILE=0: never, =1: every chunk of TA_MIN tokens; else from TA_CTX
        const char *e = getenv("KVQ_CUDA_ATT_TILE");
        g_tile = e && *e == '0' ? 0 : e && *e == '1' ? 1 : 2;
    }
    const int G = n_kv > 0 && n_heads % n_kv == 0 ? n_heads / n_kv : 0;
    return g_tile && (g_tile == 1 || pos + T >= TA_CTX) && T >= TA_MIN && !d_pos && !sq &&
           (G == 1 || G == 2 || G == 4 || G == 8) && (head_dim == 64 || head_dim == 128);
}

static kvq_status tile_launch(const float *q, const float *kc, const float *vc, float *out, int T, int pos, int n_heads,
                              int n_kv, int head_dim, int max_ctx, float scale, kvq_err *err) {
    static int set = 0; // the shared-memory limit raised once (prefill is never captured)
    if (!set) {
        CU_TRY(cudaFuncSetAttribute(attend_tile_k<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ta_smem<2>()));
        CU_TRY(cudaFuncSetAttribute(attend_tile_k<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ta_smem<4>()));
        set = 1;
    }
    const int qt = TA_ROWS / (n_heads / n_kv);
    const dim3 grid((unsigned)((T + qt - 1) / qt), (unsigned)n_kv);
    if (head_dim == 64)
        attend_tile_k<2><<<grid, TA_W * 32, ta_smem<2>(), kvq_cuda_stream()>>>(q, kc, vc, out, pos, T, n_heads, n_kv, max_ctx, scale);
    else
        attend_tile_k<4><<<grid, TA_W * 32, ta_smem<4>(), kvq_cuda_stream()>>>(q, kc, vc, out, pos, T, n_heads, n_kv, max_ctx, scale);
    CU_LAUNCHED("attend_tile");
    return KVQ_OK;
}

// Inputs armed for the next one-token split attend (kvq_cuda_attend_set_inputs).
static AinK g_ain = {};
static AinK ain_take(int fusable) {
    AinK a = {};
    if (fusable && g_ain.on) a = g_ain, g_ain.on = 0;
    return a;
}
extern "C" void kvq_cuda_attend_set_inputs(const kvq_cuda_ain *in) {
    g_ain = AinK{};
    if (!in) return;
    g_ain.qkv = in->qkv; g_ain.bias = in->bias; g_ain.qn = in->q_norm; g_ain.kn = in->k_norm; g_ain.inv_freq = in->inv_freq;
    g_ain.eps = in->eps; g_ain.rot_dim = in->rot_dim; g_ain.on = 1;
}

extern "C" kvq_status kvq_cuda_attend(const float *q, const float *kc, const float *vc, float *out, int T, int pos,
                                      const int *d_pos, const kvq_cuda_seqs *sq, int n_heads, int n_kv_heads, int head_dim,
                                      int max_ctx, float scale, kvq_err *err) {
    if (T <= 0) return KVQ_OK;
    kvq_status cs = check_span(T, pos, sq, n_heads, n_kv_heads, head_dim, max_ctx, err);
    if (cs) return cs;
    const AinK ain = ain_take(T == 1 && !sq && split_ok(n_heads, n_kv_heads, head_dim));
    if (!ain.on && g_ain.on) { // armed but not fusable here: the inputs' own kernel first
        g_ain.on = 0;
        cs = kvq_cuda_attn_in(g_ain.qkv, g_ain.bias, g_ain.qn, g_ain.kn, g_ain.eps, (float *)q, (float *)kc, (float *)vc, T, pos,
                              d_pos, sq, n_heads, n_kv_heads, head_dim, g_ain.rot_dim, g_ain.inv_freq, max_ctx, err);
        if (cs) return cs;
    }
    if (tile_ok(T, pos, d_pos, sq, n_heads, n_kv_heads, head_dim))
        return tile_launch(q, kc, vc, out, T, pos, n_heads, n_kv_heads, head_dim, max_ctx, scale, err);
    if (split_ok(n_heads, n_kv_heads, head_dim)) {
        if ((cs = split_scratch(n_kv_heads, head_dim, err))) return cs;
        const int cmin = cmin_get();
        for (int t0 = 0; t0 < T; t0 += AT_TT) {
            const int tt = T - t0 < AT_TT ? T - t0 : AT_TT;
            const dim3 grid(ATS, (unsigned)n_kv_heads, (unsigned)tt);
            switch (head_dim / 32) {
#define AT_CASE(D) case D: attend_split_k<D><<<grid, ATT_THREADS, 0, kvq_cuda_stream()>>>(q, (float *)kc, (float *)vc, out, pos, d_pos, t0, n_heads, n_kv_heads, max_ctx, scale, g_part, g_cnt, Dev{}, NULL, ain, seqk_of(sq), cmin, pf_get()); break;
                AT_CASE(1) AT_CASE(2) AT_CASE(3) AT_CASE(4) AT_CASE(5) AT_CASE(6) AT_CASE(7) AT_CASE(8)
#undef AT_CASE
            }
            CU_LAUNCHED("attend_split");
        }
        return KVQ_OK;
    }
    // scores of pos + T positions; with d_pos (a graph replayed at later positions) of max_ctx
    const size_t smem = sizeof(float) * ((size_t)head_dim * (1 + ATT_THREADS / 32) + (size_t)(d_pos || sq ? max_ctx : pos + T));
    if (smem > 48 * 1024) {
        kvq_status s = raise_smem(err);
        if (s) return s;
    }
    attend_k<<<dim3((unsigned)n_heads, (unsigned)T), ATT_THREADS, smem, kvq_cuda_stream()>>>(q, kc, vc, out, pos, d_pos, seqk_of(sq), n_heads,
                                                                          n_kv_heads, head_dim, max_ctx, scale);
    CU_LAUNCHED("attend");
    return KVQ_OK;
}

static int g_attn_pdl = -1; // KVQ_CUDA_ATTN_PDL (default on: hqx.h kvq_cuda_attn_set_pdl)
extern "C" void kvq_cuda_attn_set_pdl(int on) {
    if (on < 0) {
        const char *e = getenv("KVQ_CUDA_ATTN_PDL");
        on = !(e && *e == '0');
    }
    g_attn_pdl = on ? 1 : 0;
}

extern "C" int kvq_cuda_hqx_attend_can_prep(const kvq_cuda_hqx *o, int n_heads, int n_kv_heads, int head_dim) {
    if (!o || !split_ok(n_heads, n_kv_heads, head_dim)) return 0;
    const int64_t group = (int64_t)(n_heads / n_kv_heads) * head_dim, T = o->h.tile;
    // one group's columns are whole tiles, the row is unpadded and in whole steps of 1024
    return o->h.cols == (int64_t)n_heads * head_dim && o->h.cols_p == o->h.cols && o->h.cols % 1024 == 0 &&
           T >= 64 && T <= 1024 && (T & (T - 1)) == 0 && group % T == 0;
}

#ifdef KVQ_ATT_STAMPS
#include <stdio.h>
static void att_st_print(void) {
    unsigned long long v[20];
    if (cudaMemcpyFromSymbol(v, att_st, sizeof v) != cudaSuccess || !v[0] || !v[9]) return;
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
    const double b = (double)v[0], m = (double)v[9], ns = khz > 0 ? 1e6 / khz : 0.0; // ns a cycle at the rated clock
    fprintf(stderr, "att_stamps: %.0f blocks, %.0f merging blocks (%d MHz rated); a block's mean cycles: inputs %.0f, positions %.0f, "
            "block merge %.0f, count %.0f; the merging block's: splits merge %.0f, o prep %.0f; span from the KV head's earliest wait "
            "%.0f ns, the merging block's own from its wait %.0f ns (%.0f ns a cycle)\n", b, m, khz / 1000, v[1] / b, v[2] / b, v[3] / b,
            v[4] / b, v[5] / m, v[6] / m, v[7] / m, v[8] / m, ns);
    fprintf(stderr, "att_stamps: the merging block's tail (mean cycles): splits' loads %.0f, merge arithmetic and stores %.0f, "
            "barrier before o's tiles %.0f, warp 0's tile: rotation %.0f, amax/sum %.0f, codes %.0f; wait for the other tiles %.0f\n",
            v[10] / m, v[11] / m, v[12] / m, v[13] / m, v[14] / m, v[15] / m, v[16] / m);
}
#endif

extern "C" kvq_status kvq_cuda_hqx_attend_prep(const float *q, const float *kc, const float *vc, float *out, int pos,
                                               const int *d_pos, int n_heads, int n_kv_heads, int head_dim, int max_ctx,
                                               float scale, kvq_cuda_hqx *o, kvq_err *err) {
    if (!kvq_cuda_hqx_attend_can_prep(o, n_heads, n_kv_heads, head_dim))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: attention cannot prepare this o projection's input");
    kvq_status cs = check_span(1, pos, NULL, n_heads, n_kv_heads, head_dim, max_ctx, err);
    if (!cs) cs = split_scratch(n_kv_heads, head_dim, err);
    if (cs) return cs;
    const AinK ain = ain_take(1);
    const Dev pd = dev_of(o);
#ifdef KVQ_ATT_STAMPS
    static int st_reg = 0;
    if (!st_reg) st_reg = 1, atexit(att_st_print);
#endif
    // KVQ_CUDA_ATTN_PDL (default on): a programmatic dependent of the kernel before (the q/k/v product):
    // launched while it ends, the rotation's table and the first cache rows loaded before
    // griddepcontrol.wait
    if (g_attn_pdl < 0) kvq_cuda_attn_set_pdl(-1);
    const int pdl = g_attn_pdl, cmin = cmin_get();
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at;
    cfg.gridDim = dim3(ATS, (unsigned)n_kv_heads, 1);
    cfg.blockDim = dim3(ATT_THREADS);
    cfg.stream = kvq_cuda_stream();
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &at;
    cfg.numAttrs = pdl ? 1 : 0;
    cudaError_t e = cudaSuccess;
    switch (head_dim / 32) {
#define AT_CASE(D) case D: e = cudaLaunchKernelEx(&cfg, attend_split_k<D>, q, (float *)kc, (float *)vc, out, pos, d_pos, 0, n_heads, n_kv_heads, max_ctx, scale, g_part, g_cnt, pd, o->fs, ain, SeqK{}, cmin, pf_get()); break;
        AT_CASE(1) AT_CASE(2) AT_CASE(3) AT_CASE(4) AT_CASE(5) AT_CASE(6) AT_CASE(7) AT_CASE(8)
#undef AT_CASE
    }
    if (e != cudaSuccess) return cu_fail(err, e, "launch attend_split+prep");
    CU_LAUNCHED("attend_split+prep");
    return KVQ_OK;
}
