// GPU encoders of the rotated KV codecs (issue 20), appending positions from the fp16 window
// ring into the GPU layout (kv_attn.h, docs/KV.md): TurboQuant and qturbo (enc_turbo),
// turboquant-prod keys (enc_tprod), OCTOPUS keys with or without the QJL plane (enc_oct),
// HyperQuant-KV (enc_hqkv), HQMQ without outliers (enc_hqmq) and with them (enc_hqmqo: one block
// per sequence and KV head walking its positions in order, for the running median). Otherwise one
// block of D = head_dim threads (64 or 128: every kernel a template on D) per (position, sequence and
// KV head), thread i = dim i. Each repeats its
// CPU encoder's float operations in the CPU's order (kv_turbo.c turbo_enc, kv_octopus.c
// oct_enc, kv_hqkv.c hk_enc, kv_hqmq.c hq_enc): explicitly rounded intrinsics, because nvcc contracts a·b + c into FMAs and the CPU
// build (x86-64-v2, no FMA) never does; the double norms summed in index order by one thread;
// the WHT as the CPU's butterfly (stages h = 1..D/2, each value one a+b or a−b, then × the float
// 1/√D). So the packed bytes equal the CPU encoder's record repacked by libconv/kv/kv_gpu.c
// (tests/test_cuda_kv.c compares them).
#include <math.h>
#include <stdint.h>

#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kv_enc.cuh"
#include "kernels/kv_enc.h"
#include "kernels/kv_hqkv.h"
#include "kernels/kv_hqmq.h"

#define ROWB(B) ((B) / 2 * (D / 4) + ((B) & 1) * (D / 8)) // D: the head_dim template parameter in scope
#define OCT_NW(B) ((6 * (3 * (B) + 1) + 31) / 32) // kvq_gkv_oct_words
#define FM __fmul_rn
#define FA __fadd_rn
#define FS __fsub_rn

struct enc_p {
    const __half *ring; // (batch · n_kv, wcap, D)
    int wcap, p0, n_kv;
    const int *d_p0;    // NULL, or a device int added to p0 (a graph-captured step: p0 = −window)
    const int *d_seq;   // NULL, or a step of several sequences' rows (d_p0 one int a row; kvq_gkv_enc_region)
    uint8_t *base; // region of (sequence 0, head 0)
    size_t region, side_off;
    const float *cb, *rho, *signs, *quat, *mat, *cxi; // per KV head (kvq_gkv_side)
    int round;
    const uint64_t *seeds; // HQKV
    int lat, rot, dither;  // HQKV
    double scale;          // HQKV: α√d
    int n_sec, ibits;      // HQMQ: S, index bits
    double med;            // HQMQO: the outlier multiplier C
    size_t pool_off, state_off, pool_n; // HQMQO: the pool's and the encoder state's offsets, the pool's chunks
    int n_pos;             // HQMQO: positions a launch encodes in order (one block per region)
};

// Σ (double)x_k·x_k for k in index order (each product is exact in double, so only the order
// of the sums matters), by thread 0, for every thread. x in shared memory, written before a
// barrier. Ends with a barrier.
template <int D>
__device__ double norm2_d(const float *x, double *sh) {
    if (threadIdx.x == 0) {
        double g = 0.0;
        for (int k = 0; k < D; k++) {
            const double a = (double)x[k];
            g = __dadd_rn(g, __dmul_rn(a, a));
        }
        *sh = g;
    }
    __syncthreads();
    return *sh;
}

// kvq_kv_wht (kernels/cpu/wht.c + libconv/kv/kvutil.c) on y[D] in shared memory: the butterfly
// stages h = 1, 2, ..., D/2 (thread t < D/2 takes pair (j, j+h), j = (t/h)·2h + t%h), then every
// value × 1.0f/sqrtf(D) as the CPU forms it. Starts and ends with a barrier; returns y[threadIdx.x].
template <int D>
__device__ float wht_cpu(float *y) {
    const int i = threadIdx.x;
    for (int h = 1; h < D; h <<= 1) {
        __syncthreads();
        if (i < D / 2) {
            const int j = kvq_ke_wht_j(h, i);
            const float a = y[j], b = y[j + h];
            y[j] = FA(a, b);
            y[j + h] = FS(a, b);
        }
    }
    __syncthreads();
    y[i] = FM(y[i], kvq_ke_wht_scale(D));
    __syncthreads();
    return y[i];
}

// The first position of the launch (the host's, or the captured step's from the device).
__device__ __forceinline__ int enc_p0(const enc_p &p) { return kvq_gkv_enc_p0(p.d_p0, p.d_seq, p.n_kv, p.p0); }
// The block's region (kvq_gkv_enc_region).
__device__ __forceinline__ int enc_ri(const enc_p &p) { return kvq_gkv_enc_region(p.d_seq, p.n_kv); }

template <int D>
__device__ __forceinline__ float ring_x(const enc_p &p, int ri, int pos) {
    return __half2float(p.ring[((size_t)ri * p.wcap + pos % p.wcap) * D + threadIdx.x]);
}

// turbo_enc's unit vector rotated (turbo_rotate): u = x·(float)(1/‖x‖) (0 when ‖x‖ ≤ 1e-30),
// [qturbo: each 4-chunk left-multiplied by the head's quaternion], × the signs, the WHT. x is
// this thread's dim; y, t shared scratch (y holds the result). Returns the thread's rotated
// coordinate and ‖x‖ (double) in *g.
template <int D>
__device__ float turbo_rot(const enc_p &p, int hd, float x, float *y, float *t, double *sh, double *g) {
    const int i = threadIdx.x;
    y[i] = x;
    __syncthreads();
    *g = __dsqrt_rn(norm2_d<D>(y, sh));
    const float inv = *g > 1e-30 ? __double2float_rn(__ddiv_rn(1.0, *g)) : 0.0f;
    float u = FM(x, inv);
    if (p.quat) { // uniform over the block
        t[i] = u;
        __syncthreads();
        u = kvq_ke_quat_comp(p.quat + 4 * hd, t + (i & ~3), i & 3);
    }
    y[i] = FM(u, __ldg(p.signs + (size_t)hd * D + i));
    return wht_cpu<D>(y);
}

// ⟨row, v⟩ of a D-float matrix row with a shared-memory vector, each product rounded then added
// in coordinate order (the CPU codecs' order: the encoders are theirs byte for byte).
template <int D>
static __device__ __forceinline__ float row_dot(const float *row, const float *v) {
    float a = 0.0f;
    for (int k = 0; k < D; k += 4) {
        const float4 w4 = __ldg((const float4 *)(row + k));
        a = FA(a, FM(w4.x, v[k]));
        a = FA(a, FM(w4.y, v[k + 1]));
        a = FA(a, FM(w4.z, v[k + 2]));
        a = FA(a, FM(w4.w, v[k + 3]));
    }
    return a;
}

// turboquant:<B> / qturbo:<B>: fp16 ‖x‖ to the side, the B-bit index of the nearest centroid
// per rotated coordinate to the row.
template <int B, int D>
__global__ void __launch_bounds__(D) enc_turbo(enc_p p) {
    __shared__ float y[D], t[D];
    __shared__ double sh;
    __shared__ uint8_t c[D];
    const int pos = enc_p0(p) + blockIdx.x, ri = enc_ri(p), i = threadIdx.x, hd = ri % p.n_kv;
    if (pos < 0) return; // a captured step with no position leaving the window
    uint8_t *reg = p.base + (size_t)ri * p.region;
    double g;
    const float u = turbo_rot<D>(p, hd, ring_x<D>(p, ri, pos), y, t, &sh, &g);
    c[i] = (uint8_t)kvq_ke_nearest(p.cb + ((size_t)hd << B), 1 << B, u);
    if (i == 0) *(__half *)(reg + p.side_off + (size_t)pos * 2) = __float2half_rn(__double2float_rn(g));
    __syncthreads();
    kvq_gkv_write_row<B, D>(reg + (size_t)pos * ROWB(B), c, i);
}

// turboquant-prod:<B> keys: (B−1)-bit centroid codes as turboquant, the residual r = u − c[k],
// γ_r = ‖r‖ (double, index order), σ_j = [S_j·r ≥ 0] with the float sum in index order (thread
// j); side (fp16 γ, fp16 γ_r); row = the codes' planes, then the sign plane.
template <int B, int D>
__global__ void __launch_bounds__(D) enc_tprod(enc_p p) {
    __shared__ float y[D], t[D], r[D];
    __shared__ double sh;
    __shared__ uint8_t c[D], sg[D];
    const int pos = enc_p0(p) + blockIdx.x, ri = enc_ri(p), i = threadIdx.x, hd = ri % p.n_kv;
    if (pos < 0) return; // a captured step with no position leaving the window
    uint8_t *reg = p.base + (size_t)ri * p.region;
    double g;
    const float u = turbo_rot<D>(p, hd, ring_x<D>(p, ri, pos), y, t, &sh, &g);
    const float *cb = p.cb + ((size_t)hd << (B - 1));
    const int k = kvq_ke_nearest(cb, 1 << (B - 1), u);
    c[i] = (uint8_t)k;
    r[i] = FS(u, __ldg(cb + k));
    __syncthreads();
    const double rn = norm2_d<D>(r, &sh);
    const float z = row_dot<D>(p.mat + ((size_t)hd * D + i) * D, r);
    sg[i] = z >= 0.0f;
    if (i == 0)
        *(__half2 *)(reg + p.side_off + (size_t)pos * 4) =
            __halves2half2(__float2half_rn(__double2float_rn(g)), __float2half_rn(__double2float_rn(__dsqrt_rn(rn))));
    __syncthreads();
    uint8_t *row = reg + (size_t)pos * ROWB(B);
    kvq_gkv_write_row<B - 1, D>(row, c, i);
    kvq_gkv_write_row<1, D>(row + ROWB(B - 1), sg, i);
}

// ---- OCTOPUS keys (oct_enc, default split b_dir = B+1, b_norm = B−1)

// fp32 γ; u = WHT(x·(float)(1/γ)·s1), zero-padded to 43 triplets; per triplet (thread t < 43)
// the octahedral (ξ, η), their nearest centroids, the best direction of the rounding window by
// t·n̂, ρ̂ nearest clip(best, 0, 1) (scalar mode: nearest ‖t‖); the codes into the lanes' words
// (lane L: triplets 6L..6L+5, code j at bit j·(3B+1)). Q (qjl): r = u − ρ̂ n̂ (dims < 128), γ_r =
// ‖r‖ (double), σ = [WHT(r ⊙ s2) ≥ 0] as a one-bit plane after the words; side (γ, fp16 γ_r, 0).
template <int B, bool Q, int D>
__global__ void __launch_bounds__(D) enc_oct(enc_p p) {
    constexpr int BD = B + 1, BN = B - 1, KD = 1 << BD, KN = 1 << BN, NTRI = (D + 2) / 3, CW = 2 * BD + BN, NWd = OCT_NW(B);
    constexpr int LP = D / 16, RB = 4 * LP * NWd + (Q ? D / 8 : 0); // LP lanes of NWd words [, the sign plane]
    __shared__ float y[3 * NTRI], uh[3 * NTRI], res[D];
    __shared__ double sh;
    __shared__ uint32_t code[6 * LP];
    __shared__ uint8_t sg[D];
    const int pos = enc_p0(p) + blockIdx.x, ri = enc_ri(p), i = threadIdx.x, hd = ri % p.n_kv;
    if (pos < 0) return; // a captured step with no position leaving the window
    uint8_t *reg = p.base + (size_t)ri * p.region, *row = reg + (size_t)pos * RB;
    const float x = ring_x<D>(p, ri, pos);
    y[i] = x;
    __syncthreads();
    const double g = __dsqrt_rn(norm2_d<D>(y, &sh));
    const float inv = g > 1e-30 ? __double2float_rn(__ddiv_rn(1.0, g)) : 0.0f;
    const float *s1 = p.signs + (size_t)hd * 2 * D, *s2 = s1 + D;
    y[i] = FM(FM(x, inv), __ldg(s1 + i));
    const float u = wht_cpu<D>(y);
    if (i < 3 * NTRI - D) y[D + i] = 0.0f;
    __syncthreads();
    if (i < NTRI) {
        const float *dirs = p.cb + (size_t)hd * 3 * KD * KD;
        int dir, jn;
        code[i] = kvq_ke_oct_triplet(y + 3 * i, dirs, p.cxi + (size_t)hd * KD, p.rho + (size_t)hd * KN, BD, BN, p.round, &dir, &jn);
        if (Q) {
            const float rh = p.rho[(size_t)hd * KN + jn], *nd = dirs + 3 * dir;
#pragma unroll
            for (int k = 0; k < 3; k++) uh[3 * i + k] = FM(rh, nd[k]);
        }
    } else if (i < 6 * LP) code[i] = 0;
    __syncthreads();
    if (i < LP * NWd) { // word w of lane L (= word i of the row): the bits [32w, 32w + 32) of its six codes
        ((uint32_t *)row)[i] = kvq_ke_lane_word(code, 6, i / NWd, i % NWd, CW);
    }
    uint8_t *sd = reg + p.side_off + (size_t)pos * (Q ? 8 : 4);
    if (!Q) {
        if (i == 0) *(float *)sd = __double2float_rn(g);
        return;
    }
    const float rr = FS(u, uh[i]);
    res[i] = rr;
    __syncthreads();
    const double rn = norm2_d<D>(res, &sh);
    uh[i] = FM(rr, __ldg(s2 + i)); // every read of uh[i] was this thread's own (rr above)
    sg[i] = wht_cpu<D>(uh) >= 0.0f;
    if (i == 0) {
        *(float *)sd = __double2float_rn(g);
        *(__half *)(sd + 4) = __float2half_rn(__double2float_rn(__dsqrt_rn(rn)));
        *(uint16_t *)(sd + 6) = 0;
    }
    __syncthreads();
    kvq_gkv_write_row<1, D>(row + 4 * LP * NWd, sg, i);
}

// ---- HyperQuant-KV (hk_enc) and HQMQ without outliers (hq_enc)

// hqkv:<lattice>:<bps>: γ = ‖x‖ (double), y = S x (none; ± signs; Q x with the float sum in index
// order, thread i), z = (float)(y·(α√d/γ)) with the factor in double, + U (the dither of counter
// = position mod 2^16: the CPU state's counter for a sequence encoded from position 0), the
// nearest lattice point per block (thread b < D/n, kernels/kv_hqkv.h), codes + 2^(B−1) as B-bit
// codes; side (fp32 γ, u32 counter, 0 without dither).
template <int B, int D>
__global__ void __launch_bounds__(D) enc_hqkv(enc_p p) {
    __shared__ float y[D], z[D];
    __shared__ double sh;
    __shared__ uint8_t c[D];
    const int pos = enc_p0(p) + blockIdx.x, ri = enc_ri(p), i = threadIdx.x, hd = ri % p.n_kv;
    if (pos < 0) return; // a captured step with no position leaving the window
    uint8_t *reg = p.base + (size_t)ri * p.region;
    const float x = ring_x<D>(p, ri, pos);
    y[i] = x;
    __syncthreads();
    const double g = __dsqrt_rn(norm2_d<D>(y, &sh));
    float yr = x;
    if (p.rot == 1) yr = FM(x, __ldg(p.signs + (size_t)hd * D + i));
    else if (p.rot == 2) {
        yr = row_dot<D>(p.mat + ((size_t)hd * D + i) * D, y);
    }
    const double f = g > 1e-30 ? __ddiv_rn(p.scale, g) : 0.0;
    z[i] = __double2float_rn(__dmul_rn((double)yr, f));
    __syncthreads();
    const int n = kvq_hk_dim(p.lat);
    const uint32_t ctr = p.dither ? (uint32_t)(pos & 0xFFFF) : 0u;
    if (i < D / n) {
        float zb[8], U[8];
        int32_t q[8];
        if (p.dither) kvq_hk_dither(p.lat, p.seeds[hd], ctr, i * n, n, U);
        for (int j = 0; j < n; j++) zb[j] = FA(z[i * n + j], p.dither ? U[j] : 0.0f);
        kvq_hk_nearest(p.lat, zb, q);
        for (int j = 0; j < n; j++) c[i * n + j] = (uint8_t)(q[j] + (1 << (B - 1)));
    }
    if (i == 0) {
        uint8_t *sd = reg + p.side_off + (size_t)pos * 8;
        *(float *)sd = __double2float_rn(g);
        *(uint32_t *)(sd + 4) = ctr;
    }
    __syncthreads();
    kvq_gkv_write_row<B, D>(reg + (size_t)pos * ROWB(B), c, i);
}

// A chunk's norm ‖x4‖ (double, in order, as kv_hqmq.c), and its code given the token's σ (fp32; the
// fp16 rounding is applied here) and L = 2^b_r − 1: the direction index of x4 / r by
// kvq_ke_hqmq_search, the radius round(r·L / fp16(σ)) capped at L — enc_hqmq's and enc_hqmqo's inliers.
__device__ __forceinline__ float hqmq_chunk_norm(const float *x4) {
    double n2 = 0.0;
    for (int j = 0; j < 4; j++) {
        const double a = (double)x4[j];
        n2 = __dadd_rn(n2, __dmul_rn(a, a));
    }
    return __double2float_rn(__dsqrt_rn(n2));
}
__device__ __forceinline__ uint32_t hqmq_chunk_code(const enc_p &p, int hd, const float *x4, float rk, float sig, int L) {
    const float sq = __half2float(__float2half_rn(sig));
    float u[4] = {1.0f, 0.0f, 0.0f, 0.0f};
    if (rk > 0)
        for (int j = 0; j < 4; j++) u[j] = __fdiv_rn(x4[j], rk);
    const int idx = kvq_ke_hqmq_search(p.cxi + (size_t)hd * p.n_sec * 4, p.n_sec, u);
    int q = sq > 0 ? __float2int_rn(__fdiv_rn(FM(rk, (float)L), sq)) : 0;
    q = q > L ? L : q;
    return (uint32_t)idx | (uint32_t)q << p.ibits;
}

// hqmq:s<S>:r<b_r> (no outliers), B = index bits + b_r: per chunk k (thread k < 32) r = ‖chunk‖
// (double, in order), σ = max r, fp16; the direction index by kvq_ke_hqmq_search of chunk / r,
// the radius lrintf(r·(2^b_r − 1)/fp16(σ)) capped; codes idx | radius << ibits into the lanes'
// words (lane L: chunks 4L..4L+3, chunk j at bit j·B); side the fp16 σ.
template <int B, int D>
__global__ void __launch_bounds__(D) enc_hqmq(enc_p p) {
    constexpr int NWd = (4 * B + 31) / 32, NCH = D / 4;
    __shared__ float xs[D], r[NCH];
    __shared__ uint32_t code[NCH];
    __shared__ float sh_sig;
    const int pos = enc_p0(p) + blockIdx.x, ri = enc_ri(p), i = threadIdx.x, hd = ri % p.n_kv;
    if (pos < 0) return; // a captured step with no position leaving the window
    uint8_t *reg = p.base + (size_t)ri * p.region;
    xs[i] = ring_x<D>(p, ri, pos);
    __syncthreads();
    if (i < NCH) r[i] = hqmq_chunk_norm(xs + 4 * i);
    __syncthreads();
    if (i == 0) {
        float sg = 0.0f;
        for (int k = 0; k < NCH; k++) sg = fmaxf(sg, r[k]);
        sh_sig = sg;
        *(__half *)(reg + p.side_off + (size_t)pos * 2) = __float2half_rn(sg);
    }
    __syncthreads();
    const int br = B - p.ibits, L = (1 << br) - 1;
    if (i < NCH) code[i] = hqmq_chunk_code(p, hd, xs + 4 * i, r[i], sh_sig, L);
    __syncthreads();
    if (i < (D / 16) * NWd) ((uint32_t *)(reg + (size_t)pos * 4 * (D / 16) * NWd))[i] = kvq_ke_lane_word(code, 4, i / NWd, i % NWd, B);
}

// hqmq:s<S>:r<b_r>:med<C> (KVQ_GKV_HQMQO; docs/KV.md "HQMQ with outliers on the GPU"): one block
// per (sequence, KV head), its n_pos positions in order, since the running median makes each
// depend on all before it. tests/test_cuda_kv.c emu_encode_hqmqo is this kernel on the host, step
// by step; the decisions are kernels/kv_hqmq.h's, the CPU encoder's own functions.
template <int B, int D>
__global__ void __launch_bounds__(D) enc_hqmqo(enc_p p) {
    constexpr int NWd = (4 * B + 31) / 32, NCH = D / 4, PER = KVQ_HQMQ_HBINS / D;
    __shared__ float xs[D], r[NCH];
    __shared__ uint32_t code[NCH];
    __shared__ unsigned long long part[D];
    __shared__ int ord[NCH], sh_full;
    __shared__ float sh_m, sh_sig;
    __shared__ uint32_t sh_off;
    const int ri = enc_ri(p), i = threadIdx.x, hd = ri % p.n_kv, M = 24 * p.n_sec, L = (1 << (B - p.ibits)) - 1;
    uint8_t *reg = p.base + (size_t)ri * p.region;
    uint32_t *hist = (uint32_t *)(reg + p.state_off);
    unsigned long long *hn = (unsigned long long *)(hist + KVQ_HQMQ_HBINS);
    uint32_t *full_flag = (uint32_t *)(hn + 1);
    for (int t = 0; t < p.n_pos; t++) {
        const int pos = enc_p0(p) + t;
        if (pos < 0) continue; // a captured step with no position leaving the window (the same for every thread)
        if (pos == 0) { // a new sequence: the CPU state's reset
            for (int b = i; b < KVQ_HQMQ_HBINS; b += D) hist[b] = 0;
            if (i == 0) *hn = 0, *full_flag = 0;
        }
        xs[i] = ring_x<D>(p, ri, pos);
        __syncthreads();
        if (i < NCH) {
            r[i] = hqmq_chunk_norm(xs + 4 * i);
            if (r[i] > 0) atomicAdd(&hist[kvq_hqmq_bin(r[i])], 1u), atomicAdd(hn, 1ull); // integers: order-free
        }
        __syncthreads();
        unsigned long long sp = 0;
        for (int b = 0; b < PER; b++) sp += hist[i * PER + b];
        part[i] = sp;
        __syncthreads();
        if (i == 0) { // the median: the (n+1)/2-th norm's bin, as kv_hqmq.c's serial scan finds it
            const unsigned long long cnt = *hn, half = (cnt + 1) / 2;
            unsigned long long cum = 0;
            float m = 0.0f;
            for (int k = 0; k < D && cnt; k++) {
                if (cum + part[k] < half) {
                    cum += part[k];
                    continue;
                }
                for (int b = k * PER;; b++) {
                    const uint32_t hb = hist[b];
                    if (cum + hb >= half) {
                        m = kvq_hqmq_median_at(b, half - cum, hb);
                        break;
                    }
                    cum += hb;
                }
                break;
            }
            sh_m = m;
        }
        __syncthreads();
        if (i == 0) { // flags, σ over the inliers, the outliers numbered in chunk order, the pool offset
            float sg = 0.0f;
            int no = 0;
            for (int k = 0; k < NCH; k++) {
                const int o = kvq_hqmq_is_out(r[k], sh_m, p.med);
                if (!o) sg = fmaxf(sg, r[k]);
                ord[k] = o ? no++ : -1;
            }
            uint8_t *sd = reg + p.side_off + (size_t)pos * 8;
            uint32_t off = 0;
            if (pos > 0) off = *(const uint32_t *)(sd - 4) + *(const uint16_t *)(sd - 6);
            const int full = (size_t)off + no > p.pool_n;
            if (full) no = 0, *full_flag = 1;
            *(__half *)sd = __float2half_rn(sg);
            *(uint16_t *)(sd + 2) = (uint16_t)no;
            *(uint32_t *)(sd + 4) = off;
            sh_sig = sg, sh_off = off, sh_full = full;
        }
        __syncthreads();
        if (i < NCH) {
            if (ord[i] >= 0) { // an outlier: code M + j, its 4 values (fp16 already: the ring's) into the pool
                code[i] = kvq_hqmq_out_code(M, sh_full ? 0 : ord[i]);
                if (!sh_full) {
                    __half *o = (__half *)(reg + p.pool_off + ((size_t)sh_off + ord[i]) * 8);
                    for (int j = 0; j < 4; j++) o[j] = __float2half_rn(xs[4 * i + j]);
                }
            } else code[i] = hqmq_chunk_code(p, hd, xs + 4 * i, r[i], sh_sig, L);
        }
        __syncthreads();
        if (i < (D / 16) * NWd) ((uint32_t *)(reg + (size_t)pos * 4 * (D / 16) * NWd))[i] = kvq_ke_lane_word(code, 4, i / NWd, i % NWd, B);
        __syncthreads();
    }
}

// ---- launcher

typedef void (*enc_fn)(enc_p);

template <int D>
static enc_fn pick_d(kvq_gkv_kind kind, int bits) {
#define K3(F)                 \
    if (bits == 2) return F<2, D>; \
    if (bits == 3) return F<3, D>; \
    if (bits == 4) return F<4, D>;
    if (kind == KVQ_GKV_TURBO) { K3(enc_turbo) }
    if (kind == KVQ_GKV_TPROD) { K3(enc_tprod) }
#undef K3
    if (kind == KVQ_GKV_HQKV) {
        if (bits == 5) return enc_hqkv<5, D>;
        if (bits == 6) return enc_hqkv<6, D>;
        if (bits == 7) return enc_hqkv<7, D>;
        if (bits == 8) return enc_hqkv<8, D>;
    }
    if (kind == KVQ_GKV_HQMQO) {
        if (bits == 13) return enc_hqmqo<13, D>;
        if (bits == 16) return enc_hqmqo<16, D>;
        if (bits == 19) return enc_hqmqo<19, D>;
    }
    if (kind == KVQ_GKV_HQMQ) {
        if (bits == 13) return enc_hqmq<13, D>;
        if (bits == 16) return enc_hqmq<16, D>;
        if (bits == 19) return enc_hqmq<19, D>;
    }
    if (kind == KVQ_GKV_OCT || kind == KVQ_GKV_OCTQ) {
        const bool q = kind == KVQ_GKV_OCTQ;
        if (bits == 2) return q ? enc_oct<2, true, D> : enc_oct<2, false, D>;
        if (bits == 3) return q ? enc_oct<3, true, D> : enc_oct<3, false, D>;
        if (bits == 4) return q ? enc_oct<4, true, D> : enc_oct<4, false, D>;
    }
    return NULL;
}
// head_dim 128 or 64 (the attend's check_shape has passed)
static enc_fn pick(kvq_gkv_kind kind, int bits, int d) { return d == 64 ? pick_d<64>(kind, bits) : pick_d<128>(kind, bits); }

kvq_status kvq_gkv_encode_rot(const kvq_gkv_cache *c, const kvq_gkv_side *s, const void *ring, int p0, int n, const int *d_p0,
                              const int *d_seq, int rows, kvq_err *err) {
    enc_fn f = pick(s->kind, s->bits, c->head_dim);
    if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv append: kind %d at %d bits has no GPU encoder", s->kind, s->bits);
    const int oct = s->kind == KVQ_GKV_OCT || s->kind == KVQ_GKV_OCTQ;
    if (s->kind == KVQ_GKV_HQKV) {
        if ((s->rot == 1 && !s->signs) || (s->rot == 2 && !s->mat) || (s->dither && !s->seeds) || !(s->enc_scale > 0) ||
            s->lat < KVQ_HK_E8 || s->lat > KVQ_HK_Z)
            return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: hqkv: the side's parameters are not set (rotation, seeds, scale)");
    } else if (s->kind == KVQ_GKV_HQMQ || s->kind == KVQ_GKV_HQMQO) {
        if (s->kind == KVQ_GKV_HQMQO && !(s->med > 1))
            return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: hqmq with outliers: the multiplier C (%g) is not set", s->med);
        if (!s->cxi || s->n_sec <= 0 || s->ibits <= 0 || s->ibits >= s->bits || 24 * s->n_sec > 1 << s->ibits)
            return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: hqmq: the secondary quaternions or their count are not set");
    } else if (!s->cb || !s->signs || (s->kind == KVQ_GKV_TPROD && !s->mat) || (oct && (!s->rho || !s->cxi)))
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: kind %d: the side's tables are not set (centroids, signs%s)", s->kind,
                           s->kind == KVQ_GKV_TPROD ? ", QJL matrix" : oct ? ", ρ and ξ centroids" : "");
    if (oct && s->round != 0 && s->round != 2 && s->round != 3 && s->round != 9)
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: octopus rounding mode %d", s->round);
    if (n <= 0) return KVQ_OK;
    enc_p p;
    p.ring = (const __half *)ring;
    p.wcap = c->wcap, p.p0 = p0, p.n_kv = c->n_kv, p.d_p0 = d_p0, p.d_seq = d_seq;
    p.base = (uint8_t *)s->data;
    p.region = kvq_gkv_region_bytes(s->kind, s->bits, c->head_dim, c->cap, s->role);
    p.side_off = kvq_gkv_side_offset(s->kind, s->bits, c->head_dim, c->cap);
    p.cb = s->cb, p.rho = s->rho, p.signs = s->signs, p.quat = s->kind == KVQ_GKV_TURBO ? s->quat : NULL, p.mat = s->mat;
    p.cxi = s->cxi, p.round = s->round;
    p.seeds = s->seeds, p.lat = s->lat, p.rot = s->rot, p.dither = s->dither, p.scale = s->enc_scale;
    p.n_sec = s->n_sec, p.ibits = s->ibits;
    p.med = s->med, p.n_pos = n;
    p.pool_off = kvq_gkv_hqmqo_pool_offset(s->bits, c->head_dim, c->cap), p.state_off = kvq_gkv_hqmqo_state_offset(s->bits, c->head_dim, c->cap);
    p.pool_n = kvq_gkv_hqmqo_pool_chunks(c->head_dim, c->cap);
    // HQMQO: one block per region walks its positions in order (the running median); the others a block a position
    f<<<dim3(s->kind == KVQ_GKV_HQMQO ? 1 : n, (d_seq ? rows : c->batch) * c->n_kv), c->head_dim, 0, kvq_cuda_stream()>>>(p);
    CU_LAUNCHED("kv encoder (turboquant / turboquant-prod / octopus / hqkv / hqmq)");
    return KVQ_OK;
}
