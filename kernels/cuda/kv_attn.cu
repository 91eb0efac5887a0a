// Split-K decode attention over a packed KV cache, and its encoders (kv_attn.h; layout in
// docs/KV.md "GPU execution layout"). The split kernels are templates in kv_split.cuh, instantiated
// here for head_dim 128 with 4 query heads per KV head (every variant, the description below) and
// in kv_attn_d64.cu / kv_attn_d128.cu for the other built shapes (plain fp32 kernels: at head_dim
// 64 a lane's 16 dims are a quarter of a position, 8 positions a warp pass; 8 query heads per KV
// head are two blocks of 4); this file dispatches between them.
//
// attn_split: one block of 128 threads (4 warps) per (chunk, KV head, sequence). A lane owns
// 16 consecutive dims of one position (8 lanes a position at head_dim 128, 4 positions a
// warp per pass) and holds the 4 query heads' 16 coordinates in registers, so one read of
// a key serves every query head of its KV head (GQA). Warp w takes the 32-position groups
// w, w+4, ... of the chunk (a KIVI key group's scales are loaded once per group), loads
// the 8 passes of a group before using them, and a position's score is the sum over its 8
// lanes (3 shuffles). Codes become floats four at a time: the b-bit codes of dims
// (k, k+4, k+8, k+12) are gathered into the 4 bytes of a word from the bit planes, and each
// byte is turned into 2^23 + c with one byte permute. Scores (chunk × 4, in shared memory)
// → the chunk's max and sum per head → Σ p·V with the same lane mapping, the per-position
// scale folded into p and the zero points into one extra sum per head. TurboQuant: q is
// rotated once per block and the centroids are looked up in the rotated frame; the output
// is rotated back once, in the merge.
// The merge of the chunks' (max, sum, Σ p·V) (kv_merge.cuh): by the last block of the final split
// launch to finish for a (sequence, KV head) (fused, KVQ_CUDA_KV_FUSE_MERGE=1), or attn_merge, one
// block per (sequence, query head) after the splits (the default: the fused merge measured 1-7 %
// slower on the H100, session 11).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kv_attn.h"
#include "kernels/cuda/kv_attn_oct.cuh"
#include "kernels/cuda/kv_attn_tc.cuh"
#include "kernels/cuda/kv_enc.cuh"
#include "kernels/cuda/kv_merge.cuh"
#include "kernels/kv_hqkv.h"
#include "kernels/kv_hqmq.h"

#include "kernels/cuda/kv_split.cuh"

// ---- encoders (the CPU's float operations, kv_int.c, from the window's fp16 values)

__device__ __forceinline__ float r16(float f) { return __half2float(__float2half_rn(f)); }

// d_pos: NULL, or the device int that holds pos0 (a graph-captured step). d_seq: NULL, or a step of
// several sequences (kvq_gkv_append_seqs): token t is row t, for sequence d_seq[t] (its nb regions) at
// position d_pos[t]. D threads a block.
template <int D>
__global__ void enc_ring(const float *__restrict__ k, const float *__restrict__ v, __half *wk, __half *wv, int wcap, int pos0, int nb,
                         const int *d_pos, const int *d_seq) {
    const int t = blockIdx.x / nb, ri = blockIdx.x % nb, pos = d_seq ? d_pos[t] : (d_pos ? *d_pos : pos0) + t;
    const size_t dri = d_seq ? (size_t)d_seq[t] * nb + ri : (size_t)ri;
    const size_t src = ((size_t)t * nb + ri) * D + threadIdx.x, dst = (dri * wcap + pos % wcap) * D + threadIdx.x;
    wk[dst] = __float2half_rn(k[src]);
    wv[dst] = __float2half_rn(v[src]);
}

// One position per block (thread = dim): int:<b> (symmetric, fp16 scale), KIVI values
// (per 32 channels: fp16 scale and zero), or the fp16 copy (boundary keys). d_p0: NULL, or a
// device int added to p0 (a graph-captured step: p0 = −window; a block whose position is
// negative has none to encode); d_seq: a step of several sequences' rows (kvq_gkv_enc_region).
template <int KIND, int B, int D>
__global__ void __launch_bounds__(D) enc_pos(const __half *__restrict__ ring, int wcap, uint8_t *base, size_t region,
                                             size_t side_off, int p0, const int *d_p0, const int *d_seq, int n_kv) {
    __shared__ uint8_t c[D];
    __shared__ float red[D / 32];
    const int pos = kvq_gkv_enc_p0(d_p0, d_seq, n_kv, p0) + blockIdx.x, ri = kvq_gkv_enc_region(d_seq, n_kv), i = threadIdx.x,
              lane = i & 31, w = i >> 5;
    if (pos < 0) return;
    const __half hx = ring[((size_t)ri * wcap + pos % wcap) * D + i];
    uint8_t *reg = base + (size_t)ri * region;
    if (KIND == KVQ_GKV_F16) {
        ((__half *)reg)[(size_t)pos * D + i] = hx;
        return;
    }
    const float x = __half2float(hx);
    if (KIND == KVQ_GKV_INT) {
        const int qmax = QMAX(B);
        float a = fabsf(x);
        for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        if (lane == 0) red[w] = a;
        __syncthreads();
        a = red[0];
        for (int k = 1; k < D / 32; k++) a = fmaxf(a, red[k]);
        const float s = r16(__fdiv_rn(a, (float)qmax));
        int q = s > 0.0f ? __float2int_rn(__fdiv_rn(x, s)) : 0;
        q = q < -qmax ? -qmax : q > qmax ? qmax : q;
        c[i] = (uint8_t)(q + qmax);
        if (i == 0) *(__half *)(reg + side_off + (size_t)pos * 2) = __float2half_rn(s);
    } else { // KIVI values: warp w = the 32 channels of group w
        const int Lq = (1 << B) - 1;
        float mn = x, mx = x;
        for (int o = 16; o > 0; o >>= 1) {
            mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        }
        const float z = r16(mn), s = r16(__fdiv_rn(mx - z, (float)Lq));
        int q = s > 0.0f ? __float2int_rn(__fdiv_rn(x - z, s)) : 0;
        q = q < 0 ? 0 : q > Lq ? Lq : q;
        c[i] = (uint8_t)q;
        if (lane == 0) *(__half2 *)(reg + side_off + ((size_t)pos * (D / 32) + w) * 4) = __halves2half2(__float2half_rn(s), __float2half_rn(z));
    }
    __syncthreads();
    kvq_gkv_write_row<B, D>(reg + (size_t)pos * ROWB(B), c, i);
}

// KIVI keys: one group of 32 positions per block, thread = channel (per-channel fp16 scale
// and zero over the group). d_p0: NULL, or a device int added to p0 (a graph-captured step:
// p0 = 1 − window − 32, the group that the step's position completes, if any: a start that is
// negative or not a multiple of 32 means none); d_seq: a step of several sequences' rows.
template <int B, int D>
__global__ void __launch_bounds__(D) enc_kivi_k(const __half *__restrict__ ring, int wcap, uint8_t *base, size_t region,
                                                size_t side_off, int p0, const int *d_p0, const int *d_seq, int n_kv) {
    __shared__ uint8_t c[32][D];
    const int pos0 = kvq_gkv_enc_p0(d_p0, d_seq, n_kv, p0) + 32 * blockIdx.x, ri = kvq_gkv_enc_region(d_seq, n_kv), i = threadIdx.x,
              Lq = (1 << B) - 1;
    if (d_p0 && (pos0 < 0 || pos0 % 32)) return;
    uint8_t *reg = base + (size_t)ri * region;
    float x[32];
#pragma unroll
    for (int t = 0; t < 32; t++) x[t] = __half2float(ring[((size_t)ri * wcap + (pos0 + t) % wcap) * D + i]);
    float mn = x[0], mx = x[0];
#pragma unroll
    for (int t = 1; t < 32; t++) mn = fminf(mn, x[t]), mx = fmaxf(mx, x[t]);
    const float z = r16(mn), s = r16(__fdiv_rn(mx - z, (float)Lq));
    *(__half2 *)(reg + side_off + ((size_t)(pos0 / 32) * D + i) * 4) = __halves2half2(__float2half_rn(s), __float2half_rn(z));
#pragma unroll
    for (int t = 0; t < 32; t++) {
        int q = s > 0.0f ? __float2int_rn(__fdiv_rn(x[t] - z, s)) : 0;
        c[t][i] = (uint8_t)(q < 0 ? 0 : q > Lq ? Lq : q);
    }
    __syncthreads();
    for (int t = 0; t < 32; t++) kvq_gkv_write_row<B, D>(reg + (size_t)(pos0 + t) * ROWB(B), c[t], i);
}

// ---- launchers

static side_p side_of(const kvq_gkv_cache *c, const kvq_gkv_side *s) {
    side_p r;
    r.base = (const uint8_t *)s->data;
    r.region = kvq_gkv_region_bytes(s->kind, s->bits, c->head_dim, c->cap, s->role);
    r.side_off = kvq_gkv_side_offset(s->kind, s->bits, c->head_dim, c->cap);
    r.cb = s->cb;
    r.rho = s->rho;
    r.signs = s->signs;
    r.quat = s->quat;
    r.mat = s->mat;
    r.seeds = s->seeds;
    r.lat = s->lat, r.rot = s->rot, r.dither = s->dither;
    r.inv_scale = s->scale > 0.0f ? 1.0f / s->scale : 0.0f;
    if (s->kind == KVQ_GKV_HQMQ || s->kind == KVQ_GKV_HQMQO) // lat carries the index bits; the radius step 1 / (2^b_r − 1)
        r.lat = s->ibits, r.inv_scale = 1.0f / (float)((1 << (s->bits - s->ibits)) - 1);
    r.ring = 0;
    r.m_out = s->kind == KVQ_GKV_HQMQO ? 24 * s->n_sec : 0;
    r.pool_off = s->kind == KVQ_GKV_HQMQO ? kvq_gkv_hqmqo_pool_offset(s->bits, c->head_dim, c->cap) : 0;
    return r;
}
static side_p ring_of(const kvq_gkv_cache *c, const void *ring) {
    side_p r = {(const uint8_t *)ring, (size_t)c->wcap * c->head_dim * 2, 0, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0.0f, c->wcap, 0, 0};
    return r;
}
// HQMQ with outliers: the kernels need the outlier codes' start M = 24·S (n_sec) and the index bits.
static kvq_status check_hqmqo(const kvq_gkv_side *s, const char *what, kvq_err *err) {
    if (s->kind == KVQ_GKV_HQMQO && (s->n_sec <= 0 || s->ibits <= 0 || s->ibits >= s->bits || 24 * s->n_sec + 1 > 1 << s->ibits))
        return kvq_err_set(err, KVQ_ERR_ARG, "%s: hqmq with outliers: %d secondary quaternions with %d index bits of %d (the outlier codes start at 24·S)",
                           what, s->n_sec, s->ibits, s->bits);
    return KVQ_OK;
}

typedef void (*split_fn)(attn_p);

// 1 when c has the shape every kernel variant is built for (head_dim 128, 4 query heads per KV head:
// the tensor-core, int8-query and half-value kernels, the fused merge); the other built shapes
// (kvq_gkv_shape_built) run the plain fp32 kernels.
static int shape84(const kvq_gkv_cache *c) { return c->head_dim == KVQ_GKV_HEAD_DIM && c->n_heads == KVQ_GKV_GROUP * c->n_kv; }

static int g_q8 = 0, g_vh = 0, g_tc = -1, g_pipe = -1, g_fuse = -1, g_tcq = -1, g_lean = -1;
static float g_waves = -1.0f;
extern "C" void kvq_gkv_set_int8_query(int on) { g_q8 = on != 0; }
extern "C" void kvq_gkv_set_fuse_merge(int on) { g_fuse = on < 0 ? -1 : on != 0; }
extern "C" void kvq_gkv_set_waves(float waves) { g_waves = waves > 0.0f ? std::min(8.0f, std::max(0.125f, waves)) : -1.0f; }
// The merge fused into the final split launch (g_fuse, or KVQ_CUDA_KV_FUSE_MERGE=1 read once;
// default 0: measured 1-7 % slower than the separate launch on the H100, session 11 call N), where
// its counters cover the (sequence, KV head) pairs.
static int fuse_merge(const kvq_gkv_cache *c) {
    if (g_fuse < 0) {
        const char *e = getenv("KVQ_CUDA_KV_FUSE_MERGE");
        g_fuse = e && !strcmp(e, "1");
    }
    return g_fuse && (size_t)c->batch * c->n_kv <= KVQ_GKV_CNT_MAX;
}
// The attend's launches after its first as programmatic dependents (g_kvpdl, or
// KVQ_CUDA_KV_PDL=0 read once turns it off; default on since the H100 A/B of session 16: about
// 1 µs less a call at 4k-128k, 7 % at 4k), not with the fused merge or rows mode.
static int g_kvpdl = -1;
extern "C" void kvq_gkv_set_pdl(int on) { g_kvpdl = on < 0 ? -1 : on != 0; }
static int kv_pdl(void) {
    if (g_kvpdl < 0) {
        const char *e = getenv("KVQ_CUDA_KV_PDL");
        g_kvpdl = !(e && !strcmp(e, "0"));
    }
    return g_kvpdl;
}
extern "C" int kvq_gkv_merge_fused(const kvq_gkv_cache *c) { return shape84(c) && fuse_merge(c); } // (128, 4) only
// Waves of resident blocks the packed launch fills (g_waves, or KVQ_CUDA_KV_WAVES=<x> read once,
// 0.125..8; default 1).
static float waves(void) {
    if (g_waves <= 0.0f) {
        const char *e = getenv("KVQ_CUDA_KV_WAVES");
        const float w = e ? (float)atof(e) : 0.0f;
        g_waves = w > 0.0f ? std::min(8.0f, std::max(0.125f, w)) : 1.0f;
    }
    return g_waves;
}
extern "C" void kvq_gkv_set_half_values(int on) { g_vh = on != 0; }
extern "C" void kvq_gkv_set_tc(int on) { g_tc = on < 0 ? -1 : on > 3 ? 3 : on; }
extern "C" void kvq_gkv_set_tc_turbo(int on) { g_tcq = on < 0 ? -1 : on != 0; }
// A switch that is on unless set to 0: *g, or (when *g < 0) the environment's name=0 read once.
static int on_unless_0(int *g, const char *name) {
    if (*g < 0) {
        const char *e = getenv(name);
        *g = !(e && !strcmp(e, "0"));
    }
    return *g;
}
// TurboQuant / qturbo on the tensor cores: g_tcq, or KVQ_CUDA_KV_TC_TURBO=0; default 1 (session 14,
// H100: 1.15-1.9x faster than the fp32 kernel at 32k-128k, NMSE vs the CPU <= 7.3e-7; docs/RESULTS.md).
static int tc_turbo(void) { return on_unless_0(&g_tcq, "KVQ_CUDA_KV_TC_TURBO"); }
// turboquant-prod on the tensor cores (session 17, helper i20p): g_tcp, or KVQ_CUDA_KV_TC_TPROD=0; default 1.
static int g_tcp = -1;
extern "C" void kvq_gkv_set_tc_tprod(int on) { g_tcp = on < 0 ? -1 : on != 0; }
static int tc_tprod(void) { return on_unless_0(&g_tcp, "KVQ_CUDA_KV_TC_TPROD"); }
// turboquant-prod's prelude (R q, S R q, the B fragments) once per (row, KV head) before the split launch
// (kvq_gkv_tp_pre_launch; session 18): g_tpre, or KVQ_CUDA_KV_TPROD_PRE=0 (every block forms it, session 17's
// kernel); default 1. The same bits either way.
static int g_tpre = -1;
extern "C" void kvq_gkv_set_tprod_pre(int on) { g_tpre = on < 0 ? -1 : on != 0; }
// TurboQuant's and qturbo's (R q's B fragments; session 18, helper i20q): g_qpre, or KVQ_CUDA_KV_TURBO_PRE=0; default 1;
// the register-prefetch variants only (tc_stages 0: the pipelined kernels form it per block).
static int g_qpre = -1;
extern "C" void kvq_gkv_set_turbo_pre(int on) { g_qpre = on < 0 ? -1 : on != 0; }
static int tc_stages(const kvq_gkv_cache *c);
static int q_prelude(const kvq_gkv_cache *c) { // the query's prelude launch before the tensor-core one: turboquant-prod, TurboQuant/qturbo
    if (c->k.kind == KVQ_GKV_TURBO) return on_unless_0(&g_qpre, "KVQ_CUDA_KV_TURBO_PRE") && tc_stages(c) == 0;
    return c->k.kind == KVQ_GKV_TPROD && on_unless_0(&g_tpre, "KVQ_CUDA_KV_TPROD_PRE");
}
// OCTOPUS keys (octopus:2 / :4, with or without :qjl) on the tensor cores (kv_attn_oct.cu): g_tco, or
// KVQ_CUDA_KV_TC_OCT=0; default 1 (session 17, helper i20c). Variant 1 (q in shared memory, 4 blocks an
// SM) unless KVQ_CUDA_KV_TC / kvq_gkv_set_tc ask for 2 (q in registers, 3 blocks); no cp.async stages.
// NULL where not built.
static int g_tco = -1;
extern "C" void kvq_gkv_set_tc_oct(int on) { g_tco = on < 0 ? -1 : on != 0; }
static int oct_keys(const kvq_gkv_cache *c) { return c->k.kind == KVQ_GKV_OCT || c->k.kind == KVQ_GKV_OCTQ; }
static const void *tc_oct_kernel(const kvq_gkv_cache *c, int variant) {
    if (!oct_keys(c) || !variant || !on_unless_0(&g_tco, "KVQ_CUDA_KV_TC_OCT")) return NULL;
    return kvq_gkv_tc_oct_kernel(c->k.bits, c->k.kind == KVQ_GKV_OCTQ, c->v.kind, c->v.bits, variant);
}
extern "C" void kvq_gkv_set_tc_pipe(int stages) { g_pipe = stages < 0 ? -1 : stages == 3 || stages == 4 ? stages : 0; }
// The cp.async stages of the tensor-core kernel: g_pipe, or KVQ_CUDA_KV_PIPE=0|3|4 (read once;
// default 0, the register-prefetch variants), and 0 where a side's regions are not 16-byte
// aligned (the 16-byte copies; cudaMalloc'd regions always are).
static int tc_stages(const kvq_gkv_cache *c) {
    if (g_pipe < 0) {
        const char *e = getenv("KVQ_CUDA_KV_PIPE");
        g_pipe = e && (!strcmp(e, "3") || !strcmp(e, "4")) ? *e - '0' : 0;
    }
    if (((uintptr_t)c->k.data | (uintptr_t)c->v.data) & 15) return 0;
    return g_pipe;
}
extern "C" void kvq_gkv_set_tc_lean(int on) { g_lean = on < 0 ? -1 : on != 0; }
// The tensor-core kernels' lean instantiations (fewer instructions a tile, the same bits; session 14,
// helper i20d): g_lean, or KVQ_CUDA_KV_TC_LEAN=0; default 1 since the H100 run of session 15 (int:4
// tc/tc2 6-9 %, int:2 tc 9-11 % faster at 32k/128k; int:2 pipe4, not a default, 9 % slower at 32k; docs/RESULTS.md).
static int tc_lean(void) { return on_unless_0(&g_lean, "KVQ_CUDA_KV_TC_LEAN"); }
// int:2 / int:4 scores on integer tensor cores (int8 q, u8 codes, mma.m16n8k32; session 20, helper i20v):
// g_tq8, or KVQ_CUDA_KV_TC_Q8=1 (read once); default 0: 0.83-0.85x the fp16 scores' time at 32k/128k (H100,
// session 21 call B), but q's rounding costs KLD on a real model — SmolLM2-135M int:4 0.2963 -> 0.3030 (+2.3 %,
// top-1 -1.1 points), kvq-small-qwen3 +0.5 % (within its error), measured on the CPU with KVQ_KV_SIM_Q8, which
// the kernel matches (test_attend_tc_q8; docs/KV.md). With the lean kernels only (tc_lean).
static int g_tq8 = -1;
extern "C" void kvq_gkv_set_tc_q8(int on) { g_tq8 = on < 0 ? -1 : on != 0; }
static int tc_q8(const kvq_gkv_cache *c) {
    if (g_tq8 < 0) {
        const char *e = getenv("KVQ_CUDA_KV_TC_Q8");
        g_tq8 = e && !strcmp(e, "1");
    }
    return g_tq8 && c->k.kind == KVQ_GKV_INT && tc_lean();
}
// The tensor-core kernel for the packed chunks of this cache, when on and built for its kinds;
// NULL otherwise. g_tc: 0 off, 1 or 2 that variant, 3 (the default) the faster variant per kind:
// two tiles in flight (2) for KIVI 4-bit keys (session 14), one (1) for KIVI 2-bit, TurboQuant/qturbo
// and, since session 21, int keys at both widths (H100 call A, int:4 at 32k / 128k: variant 1 0.0255 /
// 0.0769 ms against 0.0260 / 0.0834 with fp16 scores, 0.0207 / 0.0659 against 0.0217 / 0.0732 with
// int8 scores; the same within NMSE, not bit for bit at 4 bits); KVQ_CUDA_KV_TC=0|1|2 in the environment overrides. With
// tc_stages 3 or 4 the pipelined kernel replaces variants 1/2 (same results, bit for bit).
static const void *tc_kernel(const kvq_gkv_cache *c) {
    if (!shape84(c)) return NULL; // the tensor-core kernels are built for (128, 4) only
    if (g_tc < 0) {
        const char *e = getenv("KVQ_CUDA_KV_TC");
        g_tc = e && (!strcmp(e, "0") || !strcmp(e, "1") || !strcmp(e, "2")) ? *e - '0' : 3;
    }
    const int v = g_tc == 3 ? (c->k.bits == 4 && c->k.kind == KVQ_GKV_KIVI ? 2 : 1) : g_tc;
    if (c->k.kind == KVQ_GKV_TURBO && !tc_turbo()) return NULL; // (and qturbo: the same kind)
    if (c->k.kind == KVQ_GKV_TPROD && !tc_tprod()) return NULL;
    if (oct_keys(c)) return tc_oct_kernel(c, g_tc == 3 ? 1 : g_tc);
    return v ? kvq_gkv_tc_kernel(c->k.kind, c->k.bits, c->v.kind, c->v.bits, v, tc_stages(c), tc_lean(), q_prelude(c), tc_q8(c)) : NULL;
}
extern "C" int kvq_gkv_tc_active(const kvq_gkv_cache *c) { return tc_kernel(c) != NULL; }
extern "C" int kvq_gkv_tc_q8(const kvq_gkv_cache *c) { return tc_kernel(c) && tc_q8(c); } // (int:2, int:4: the kinds built)
extern "C" int kvq_gkv_tc_stages(const kvq_gkv_cache *c) { return tc_kernel(c) && c->k.kind != KVQ_GKV_TPROD && !oct_keys(c) ? tc_stages(c) : 0; } // (TPROD, OCTOPUS: none)

// The instantiated (K kind, K bits, V kind, V bits) combinations: the dense baselines, each
// codec on both sides, and the boundary layers' fp16 keys with each codec's values.
static split_fn pick(int kk, int kb, int vk, int vb) {
    if (kk == KVQ_GKV_BF16 && vk == KVQ_GKV_BF16) return attn_split<KVQ_GKV_BF16, 0, KVQ_GKV_BF16, 0>;
    if (kk == KVQ_GKV_F16 && vk == KVQ_GKV_F16) return attn_split<KVQ_GKV_F16, 0, KVQ_GKV_F16, 0>;
#define SAME(KIND, B) \
    if (kk == KIND && vk == KIND && kb == B && vb == B) return attn_split<KIND, B, KIND, B>;
#define F16K(KIND, B) \
    if (kk == KVQ_GKV_F16 && vk == KIND && vb == B) return attn_split<KVQ_GKV_F16, 0, KIND, B>;
#define SAMEQ8(KIND, B) \
    if (g_q8 && g_vh && kk == KIND && vk == KIND && kb == B && vb == B) return attn_split<KQ8, B, KIND, B, true>; \
    if (g_q8 && kk == KIND && vk == KIND && kb == B && vb == B) return attn_split<KQ8, B, KIND, B>;
#define SAMEVH(KIND, B) \
    if (g_vh && kk == KIND && vk == KIND && kb == B && vb == B) return attn_split<KIND, B, KIND, B, true>;
    KV_BITS(SAMEQ8, KVQ_GKV_INT) // before SAMEVH: int keys with both knobs take the dp4a kernel
#undef SAMEQ8
    KV_BITS(SAMEVH, KVQ_GKV_INT)
    KV_BITS(SAMEVH, KVQ_GKV_KIVI)
#undef SAMEVH
    KV_BITS(SAME, KVQ_GKV_INT)
    KV_BITS(SAME, KVQ_GKV_KIVI)
    KV_BITS(SAME, KVQ_GKV_TURBO)
    KV_BITS(F16K, KVQ_GKV_INT)
    KV_BITS(F16K, KVQ_GKV_KIVI)
    KV_BITS(F16K, KVQ_GKV_TURBO)
    HQ_BITS(SAME, KVQ_GKV_HQKV)
    SAME(KVQ_GKV_HQMQ, 13) SAME(KVQ_GKV_HQMQ, 16) SAME(KVQ_GKV_HQMQ, 19) // hqmq s24:r3, s96:r4, s192:r6
    F16K(KVQ_GKV_HQMQ, 13) F16K(KVQ_GKV_HQMQ, 16) F16K(KVQ_GKV_HQMQ, 19)
    SAME(KVQ_GKV_HQMQO, 13) SAME(KVQ_GKV_HQMQO, 16) SAME(KVQ_GKV_HQMQO, 19) // hqmq with outliers: the same rows, the pool
    F16K(KVQ_GKV_HQMQO, 13) F16K(KVQ_GKV_HQMQO, 16) F16K(KVQ_GKV_HQMQO, 19)
#define TPK(KIND, B) \
    if (kk == KVQ_GKV_TPROD && vk == KIND && kb == B && vb == B) return attn_split<KVQ_GKV_TPROD, B, KIND, B>;
    KV_BITS(TPK, KVQ_GKV_TURBO) // turboquant-prod: its keys, turboquant values
#undef TPK
#define OCTK_(KIND, B) \
    if (kk == KIND && vk == KVQ_GKV_KIVI && kb == B && vb == B) return attn_split<KIND, B, KVQ_GKV_KIVI, B>;
    KV_BITS(OCTK_, KVQ_GKV_OCT) // OCTOPUS keys; its values are KIVI's per-token groups
    KV_BITS(OCTK_, KVQ_GKV_OCTQ)
#undef OCTK_
    HQ_BITS(F16K, KVQ_GKV_HQKV)
#undef SAME
#undef F16K
    return NULL;
}

// The split kernel for c's shape: pick's at (128, 4); the plain kernels of kv_attn_d64.cu and
// kv_attn_d128.cu for the other built shapes (the int8-query and half-value knobs do not apply there).
static split_fn pick_for(const kvq_gkv_cache *c, int kk, int kb, int vk, int vb) {
    if (shape84(c)) return pick(kk, kb, vk, vb);
    if (c->n_kv <= 0 || c->n_heads % c->n_kv || !kvq_gkv_shape_built(c->head_dim, c->n_heads / c->n_kv)) return NULL;
    const int grp = c->n_heads / c->n_kv;
    return c->head_dim == 64 ? kvq_gkv_pick_d64(grp, kk, kb, vk, vb) : kvq_gkv_pick_d128(grp, kk, kb, vk, vb);
}
// The split launches' blocks per KV head (grid y = n_kv times this): 2 at 8 query heads per KV head
// (two blocks of 4), else 1.
static int blocks_per_kv(const kvq_gkv_cache *c) { return c->n_heads == 8 * c->n_kv ? 2 : 1; }

static int n_chunks(int len, int chunk) { return kvq_gkv_n_chunks(len, chunk); }

// Chunks so that the blocks of the main launch fill whole waves: as many chunks per (sequence,
// KV head) as the SMs hold resident blocks of the kernel (or a multiple of that when chunks
// would exceed KVQ_GKV_MAX_CHUNK). A wave and a third left 70 % of the second wave idle (ncu:
// bf16 at 32k, 512 blocks on 396 slots). KVQ_CUDA_KV_WAVES scales that (more, shorter chunks at
// short contexts now that the merge costs no launch; measured by tests/bench/gpu_kv_fuse_ab.sh).
// The blocks per (sequence, KV head) of the packed chunks' launch (kvq_gkv_plan_of's per).
static int splits_per_head(const kvq_gkv_cache *c) {
    split_fn f = pick_for(c, c->k.kind, c->k.bits, c->v.kind, c->v.bits);
    const void *ft = tc_kernel(c);
    int per_sm = 4, sms = 132, dev = 0;
    if (ft && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ft, KVQ_GKV_TC_THREADS, 0) != cudaSuccess) per_sm = 4;
    else if (!ft && f && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, NT, 0) != cudaSuccess) per_sm = 4;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) sms = 132;
    (void)cudaGetLastError();
    const int pairs = std::max(1, c->batch * c->n_kv * blocks_per_kv(c)), base = std::max(1, per_sm * sms / pairs);
    if (waves() == 1.0f) return base;
    // at most 512 (or one wave's, if more) so that the chunks stay within the merge's 1024
    return std::min(std::max(1, (int)(waves() * (float)(per_sm * sms) / (float)pairs)), std::max(base, 512));
}
// The automatic chunks' floor (kvq_gkv_plan_of's chunk_req < 0; session 19): a short context in at most
// KVQ_GKV_MIN_SPLITS chunks of at most 256 positions for the tensor-core kernels (int, KIVI, TurboQuant/qturbo,
// turboquant-prod, OCTOPUS without QJL), 64 for the others — the H100 sweep of the split count over 1k-128k
// (docs/results/s19/B_table.md): at 4k int:4 tc 0.0135 → 0.0097 ms, at 1k the fp32 kernels 0.90-0.94×; the
// chunks of a longer context are the automatic ones. g_cfl (kvq_gkv_set_chunk_floor), or
// KVQ_CUDA_KV_CFLOOR=<positions> (0: none, the chunks as before; a multiple of 32 up to KVQ_GKV_MAX_CHUNK; read once).
static int g_cfl = -2; // -2: the environment not read yet; -1: the default; >= 0: that floor
extern "C" void kvq_gkv_set_chunk_floor(int positions) {
    g_cfl = positions < -1 ? -2 : positions >= 0 && (positions % 32 || positions > KVQ_GKV_MAX_CHUNK) ? -1 : positions;
}
static int chunk_floor(const kvq_gkv_cache *c) {
    if (g_cfl == -2) {
        const char *e = getenv("KVQ_CUDA_KV_CFLOOR");
        const int v = e ? atoi(e) : -1;
        g_cfl = e && v >= 0 && v % 32 == 0 && v <= KVQ_GKV_MAX_CHUNK ? v : -1;
    }
    if (g_cfl >= 0) return g_cfl;
    return tc_kernel(c) && c->k.kind != KVQ_GKV_OCTQ ? 256 : 64;
}
// chunk_req of the plans of an attend asked for chunk (0: automatic, with the floor)
static int chunk_req_of(const kvq_gkv_cache *c, int chunk) { return chunk ? chunk : -chunk_floor(c); }
extern "C" int kvq_gkv_auto_chunk(const kvq_gkv_cache *c) {
    return kvq_gkv_plan_of(c->n_tok, c->n_enc_k, c->n_enc_v, splits_per_head(c), chunk_req_of(c, 0)).chunk;
}

// turboquant-prod's prelude for nrow rows (kvq_gkv_tp_pre_launch), after the partial results in the
// scratch, 16-byte aligned: where the cache could run on the tensor cores (its kind, the (128, 4)
// shape), whatever the switches say (a buffer sized once, a captured graph, stay valid); else 0.
// TurboQuant / qturbo at 2 and 4 bits (session 18, helper i20q): KVQ_GKV_TQ_PRE_U4 a lane, likewise.
static size_t tp_pre_bytes(const kvq_gkv_cache *c, int nrow) {
    const int tq = c->k.kind == KVQ_GKV_TURBO && c->v.kind == KVQ_GKV_TURBO && c->k.bits == c->v.bits && (c->k.bits == 2 || c->k.bits == 4);
    const int u4 = c->k.kind == KVQ_GKV_TPROD ? KVQ_GKV_TP_PRE_U4 : tq ? KVQ_GKV_TQ_PRE_U4 : 0;
    return nrow > 0 && shape84(c) && u4 ? 16 + (size_t)nrow * c->n_kv * u4 * 32 * 16 : 0;
}

extern "C" size_t kvq_gkv_scratch_bytes(const kvq_gkv_cache *c, int chunk) {
    if (chunk <= 0) chunk = 32;
    const size_t slots = (size_t)n_chunks(c->cap, chunk) + 2 * (size_t)n_chunks(c->wcap > 0 ? c->wcap : 1, chunk) + 2;
    return sizeof(float) * (size_t)c->batch * c->n_heads * slots * (c->head_dim + 2) + tp_pre_bytes(c, c->batch);
}

static kvq_status check_shape(const kvq_gkv_cache *c, kvq_err *err) {
    if (c->n_kv <= 0 || c->n_heads % c->n_kv || !kvq_gkv_shape_built(c->head_dim, c->n_heads / c->n_kv) || c->cap % 32 || c->batch <= 0)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                           "gpu kv attention: head_dim %d, %d query heads over %d KV heads, capacity %d: only head_dim 64 or 128 with 1, 2, 4 or 8 query heads per KV head and a capacity multiple of 32 are built",
                           c->head_dim, c->n_heads, c->n_kv, c->cap);
    return KVQ_OK;
}

// One attend: the host's plan of c's counts (d_pos NULL, rows 0: grids of exactly the chunks there
// are), or a graph-captured step's (d_pos: the kernels plan from the position, grids sized for any
// position up to the capacity; kvq_gkv_attend_step), or rows mode's (rows > 0 query rows from pos0,
// batch 1: the kernels plan each row's view, grids of the most chunks a row has, x = chunk · rows +
// row; kvq_gkv_attend_rows), or a step of several sequences' (d_seq: n_seq rows, row t sequence
// d_seq[t] at position d_pos[t], each planned as its batch-1 step; kvq_gkv_attend_seqs). All give the
// same chunks, so the same partial sums in the same slots and order.
static kvq_status attend(const kvq_gkv_cache *c, const float *q, float *out, float scale, int chunk, void *scratch, const int *d_pos,
                         int window, int rows, int pos0, size_t scratch_size, const int *d_seq, int n_seq, kvq_err *err) {
    kvq_status st = check_shape(c, err);
    if (!st) st = check_hqmqo(&c->k, "gpu kv attention: keys", err);
    if (!st) st = check_hqmqo(&c->v, "gpu kv attention: values", err);
    if (st) return st;
    if (chunk < 0 || chunk % 32 || chunk > KVQ_GKV_MAX_CHUNK)
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: chunk %d is not a multiple of 32 up to %d", chunk, KVQ_GKV_MAX_CHUNK);
    kvq_gkv_cache c1 = *c; // a step of several sequences: blocks per head of one sequence's batch-1 cache (its chunks, its bits)
    c1.batch = 1;
    const int per = chunk ? 1 : splits_per_head(d_seq ? &c1 : c), kivi_k = kvq_gkv_kivi_k(&c->k);
    const int creq = chunk_req_of(c, chunk); // the plans' chunk_req: chunk, or automatic with the floor
    int ga, gb, gc; // blocks per (sequence, KV head) of the three launches (rows mode: per row)
    int n_slot = 0; // the scratch's slots per (sequence, query head)
    if (rows) {
        if (c->batch != 1) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: batch %d (rows mode is for batch 1)", c->batch);
        if (pos0 < 0 || pos0 + rows > c->n_tok)
            return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: rows at positions [%d, %d) but %d positions stored", pos0, pos0 + rows,
                               c->n_tok);
        for (int t = 0; t < rows; t++) { // each row's view passes the token loop's checks, and its window is still in the ring
            const kvq_gkv_plan pl = kvq_gkv_row_plan(c->n_enc_k, c->n_enc_v, pos0, t, per, creq);
            if (pl.n_tok > pl.e && (!c->wk || pl.n_tok - pl.e > c->wcap || pl.e < c->n_tok - c->wcap))
                return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: row %d's window positions [%d, %d) are not in the ring of %d (%d stored)",
                                   t, pl.e, pl.n_tok, c->wcap, c->n_tok);
            if (pl.nb && std::min(c->n_enc_k, pl.n_tok) > std::min(c->n_enc_v, pl.n_tok))
                return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: values behind keys");
        }
        int gr[3];
        kvq_gkv_rows_grids(c->n_enc_k, c->n_enc_v, pos0, rows, per, creq, gr, &n_slot);
        ga = gr[0], gb = gr[1], gc = gr[2];
    } else if (!d_pos) {
        const kvq_gkv_plan pl = kvq_gkv_plan_of(c->n_tok, c->n_enc_k, c->n_enc_v, per, creq);
        if (c->n_tok > pl.e && (!c->wk || c->n_tok - pl.e > c->wcap))
            return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: %d window positions but a ring of %d", c->n_tok - pl.e, c->wcap);
        if (pl.nb && c->n_enc_k > c->n_enc_v) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: values behind keys");
        ga = pl.na, gb = pl.nb, gc = pl.nc;
    } else {
        // packed: at most per·k chunks for k = ⌈n/(per·1024)⌉ (kvq_gkv_plan_of), and ⌈cap/32⌉;
        // window keys: KIVI's incomplete group (< 32 positions) is one chunk; window: ≤ window
        // positions (the values' side packs every position that left it); test_step_plan checks
        if (!c->wk || !c->wv || c->wcap < window + 33)
            return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention step: a ring of %d positions, need window %d + 33", c->wcap, window);
        int gr[3];
        kvq_gkv_step_grids(c->cap, window, kivi_k, per, creq, gr);
        ga = gr[0], gb = gr[1], gc = gr[2];
    }
    if (!rows) n_slot = ga + gb + gc;
    const int nrow = rows ? rows : d_seq ? n_seq : c->batch; // rows of q, out and the scratch
    if (n_slot == 0) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: empty cache");
    if (n_slot > KVQ_GKV_MERGE_MAX) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: %d chunks exceed %d (a larger chunk)", n_slot, KVQ_GKV_MERGE_MAX);
    const int hd = c->head_dim;
    if ((size_t)sizeof(float) * nrow * c->n_heads * n_slot * (hd + 2) + tp_pre_bytes(c, nrow) >
        (rows || d_seq ? scratch_size : kvq_gkv_scratch_bytes(c, chunk)))
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: scratch too small for %d rows of %d chunks", nrow, n_slot);
    const kvq_gkv_plan hp = d_pos || rows ? kvq_gkv_plan{} : kvq_gkv_plan_of(c->n_tok, c->n_enc_k, c->n_enc_v, per, creq);
    const kvq_gkv_dyn dyn0 = {d_pos, window, kivi_k, per, creq, 0, rows, pos0, c->n_enc_k, c->n_enc_v, d_seq};
    // the launches' grids: (chunks, KV heads, sequences or a step's rows), rows mode (chunks · rows, KV heads, 1)
    const int gx = rows ? rows : 1, gy = c->n_kv * blocks_per_kv(c), gz = rows ? 1 : nrow;
    attn_p p;
    p.q = q;
    p.n_kv = c->n_kv;
    p.H = c->n_heads;
    p.chunk = hp.chunk;
    p.n_slot = n_slot;
    p.sl2 = scale * LOG2E;
    p.po = (float *)scratch;
    p.pml = p.po + (size_t)nrow * c->n_heads * n_slot * hd;
    p.dyn = dyn0;
    // rotated values (TurboQuant, HyperQuant-KV) sit in the chunks of the stored values,
    // [0, na + nb); the window's chunks after them are in the original frame
    kvq_gkv_post pp = {0, c->v.signs, c->v.quat, c->v.mat, ga + gb};
    if (c->v.kind == KVQ_GKV_TURBO) pp.kind = 1;
    else if (c->v.kind == KVQ_GKV_HQKV && c->v.rot == 1) pp.kind = 2;
    else if (c->v.kind == KVQ_GKV_HQKV && c->v.rot == 2) pp.kind = 3;
    const void *ft = ga ? tc_kernel(c) : NULL; // the packed chunks on tensor cores
    // the merge fused into the last of the split launches (every block of it counts, spare ones
    // too; the launches before it have finished when it starts), or attn_merge after them. The
    // last launch's kernel has the rotation back whenever pp.kind needs it: rotated values are
    // TurboQuant's / HQKV's (attn_split with ROT), the window keys' kernel has those values, the
    // window's is the fp16 one (ROT), the tensor-core kernels have int / KIVI values (kind 0).
    // At most KVQ_GKV_MERGE_MAX chunks (the split kernels' score array holds the weights), 256 when
    // the tensor-core kernel merges (its red array, unenlarged); else the separate merge launch.
    // Rows mode never fuses: the rows' last launches differ (a row may have no window chunk) and the
    // counters are per (sequence, KV head).
    const int last = kvq_gkv_fuse_part(ga, gb, gc), fuse = !rows && shape84(c) && fuse_merge(c) && n_slot <= (last == 0 && ft ? KVQ_GKV_MERGE_TC : KVQ_GKV_MERGE_MAX);
    const kvq_gkv_fuse fz0 = {out, pp, 0}, fz1 = {out, pp, 1};
    p.fz = fz0;
    p.wait_end = 0;
    cudaStream_t sm = kvq_cuda_stream();
    // KVQ_CUDA_KV_PDL: every launch after this call's first a programmatic dependent of the one
    // before (window chunks overlap the packed ones' tail, the merge launches while they end);
    // the first is a plain launch, so whatever the kernels before the attend wrote is complete
    const int pdl = !rows && !fuse && kv_pdl();
    int launched = 0;
    cudaLaunchAttribute pat;
    pat.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pat.val.programmaticStreamSerializationAllowed = 1;
    auto cfg = [&](dim3 grid, int nt) {
        cudaLaunchConfig_t k = {};
        k.gridDim = grid;
        k.blockDim = dim3(nt);
        k.stream = sm;
        k.attrs = &pat;
        k.numAttrs = pdl && launched ? 1 : 0;
        return k;
    };
    if (ft) { // int / KIVI / TurboQuant at 2 and 4 bits, turboquant-prod at 2-4, on tensor cores (kv_attn_tc.cu), the same partial results
        // turboquant-prod's / TurboQuant's prelude (kvq_gkv_set_tprod_pre, _turbo_pre): after the partial results, one launch before, the
        // tensor-core launch its programmatic dependent (under KVQ_CUDA_KV_PDL)
        const int pre = q_prelude(c); // (turboquant-prod and TurboQuant/qturbo keys)
        uint4 *tpre = pre ? (uint4 *)(((uintptr_t)(p.pml + (size_t)nrow * c->n_heads * n_slot * 2) + 15) & ~(uintptr_t)15) : NULL;
        const kvq_tc_args ta = {q, (const uint8_t *)c->k.data, (const uint8_t *)c->v.data,
                                kvq_gkv_region_bytes(c->k.kind, c->k.bits, hd, c->cap, 0), kvq_gkv_region_bytes(c->v.kind, c->v.bits, hd, c->cap, 1),
                                kvq_gkv_side_offset(c->k.kind, c->k.bits, hd, c->cap), kvq_gkv_side_offset(c->v.kind, c->v.bits, hd, c->cap),
                                c->n_kv, c->n_heads, 0, hp.a, hp.chunk, n_slot, 0, p.sl2, p.po, p.pml, dyn0,
                                fuse && last == 0 ? fz1 : fz0, c->k.cb, c->v.cb, c->k.signs, c->k.quat, c->k.mat, tpre};
        if (pre) {
            st = kvq_gkv_tp_pre_launch(&ta, c->k.kind, c->k.bits, nrow, sm, err);
            if (st) return st;
            launched = 1;
        }
        st = oct_keys(c) ? kvq_gkv_tc_oct_launch(ft, &ta, c->k.rho, ga * gx, gz, sm, err)
                         : kvq_gkv_tc_launch(ft, &ta, ga * gx, gz, sm, pdl && launched, err);
        if (st) return st;
        launched = 1;
    } else if (ga) {
        split_fn f = pick_for(c, c->k.kind, c->k.bits, c->v.kind, c->v.bits);
        if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv attention: no kernel for keys kind %d/%d bits, values kind %d/%d bits",
                                   c->k.kind, c->k.bits, c->v.kind, c->v.bits);
        p.k = side_of(c, &c->k);
        p.v = side_of(c, &c->v);
        p.t_begin = 0, p.t_end = hp.a, p.slot0 = 0;
        p.fz = fuse && last == 0 ? fz1 : fz0;
        f<<<dim3(ga * gx, gy, gz), NT, 0, sm>>>(p);
        CU_LAUNCHED("attn_split");
        launched = 1;
    }
    if (gb) { // keys in the window, values stored (KIVI's incomplete key group)
        split_fn f = pick_for(c, KVQ_GKV_F16, 0, c->v.kind, c->v.bits);
        if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv attention: no kernel for fp16 keys with values kind %d", c->v.kind);
        p.k = ring_of(c, c->wk);
        p.v = side_of(c, &c->v);
        p.t_begin = hp.a, p.t_end = hp.e, p.slot0 = ga;
        p.dyn.part = 1;
        p.fz = fuse && last == 1 ? fz1 : fz0;
        const cudaLaunchConfig_t kc = cfg(dim3(gb * gx, gy, gz), NT);
        p.wait_end = kc.numAttrs;
        const cudaError_t e = cudaLaunchKernelEx(&kc, f, p);
        if (e != cudaSuccess) return cu_fail(err, e, "launch attn_split (window keys)");
        launched = 1;
    }
    if (gc) {
        p.k = ring_of(c, c->wk);
        p.v = ring_of(c, c->wv);
        p.t_begin = hp.e, p.t_end = c->n_tok, p.slot0 = ga + gb;
        p.dyn.part = 2;
        p.fz = fuse ? fz1 : fz0;
        split_fn f = shape84(c) ? attn_split<KVQ_GKV_F16, 0, KVQ_GKV_F16, 0> : pick_for(c, KVQ_GKV_F16, 0, KVQ_GKV_F16, 0);
        if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv attention: no fp16 window kernel at head_dim %d", hd);
        const cudaLaunchConfig_t kc = cfg(dim3(gc * gx, gy, gz), NT);
        p.wait_end = kc.numAttrs;
        const cudaError_t e = cudaLaunchKernelEx(&kc, f, p);
        if (e != cudaSuccess) return cu_fail(err, e, "launch attn_split (window)");
        launched = 1;
    }
    if (fuse) return KVQ_OK;
    kvq_gkv_merge_fn mf = shape84(c) ? attn_merge<KVQ_GKV_HEAD_DIM, KVQ_GKV_GROUP>
                          : hd == 64 ? kvq_gkv_merge_d64(c->n_heads / c->n_kv) : kvq_gkv_merge_d128(c->n_heads / c->n_kv);
    if (!mf) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv attention: no merge kernel at head_dim %d", hd);
    const cudaLaunchConfig_t kc = cfg(dim3(nrow * c->n_heads), hd);
    const cudaError_t e = cudaLaunchKernelEx(&kc, mf, (const float *)p.po, (const float *)p.pml, out, n_slot, n_slot, c->n_heads, pp, dyn0);
    if (e != cudaSuccess) return cu_fail(err, e, "launch attn_merge");
    return KVQ_OK;
}

extern "C" kvq_status kvq_gkv_attend(const kvq_gkv_cache *c, const float *q, float *out, float scale, int chunk, void *scratch,
                                     kvq_err *err) {
    return attend(c, q, out, scale, chunk > 0 ? chunk : 0, scratch, NULL, 0, 0, 0, 0, NULL, 0, err);
}

extern "C" kvq_status kvq_gkv_attend_step(const kvq_gkv_cache *c, const float *q, float *out, float scale, int window, const int *d_pos,
                                          void *scratch, kvq_err *err) {
    if (!d_pos) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention step: no device position");
    return attend(c, q, out, scale, 0, scratch, d_pos, window, 0, 0, 0, NULL, 0, err);
}

extern "C" kvq_status kvq_gkv_attend_rows(const kvq_gkv_cache *c, const float *q, float *out, float scale, int pos0, int T, void *scratch,
                                          size_t scratch_bytes, kvq_err *err) {
    if (T < 1) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: %d rows", T);
    return attend(c, q, out, scale, 0, scratch, NULL, 0, T, pos0, scratch_bytes, NULL, 0, err);
}

extern "C" kvq_status kvq_gkv_attend_seqs(const kvq_gkv_cache *c, const float *q, float *out, float scale, int window, int T, const int *d_seq,
                                          const int *d_pos, void *scratch, size_t scratch_bytes, kvq_err *err) {
    if (!d_seq || !d_pos) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention seqs: no device sequences or positions");
    if (T < 1 || T > c->batch) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention seqs: %d rows over a cache of %d sequences", T, c->batch);
    return attend(c, q, out, scale, 0, scratch, d_pos, window, 0, 0, scratch_bytes, d_seq, T, err);
}

extern "C" size_t kvq_gkv_seqs_scratch_bytes(const kvq_gkv_cache *c, int T) {
    kvq_gkv_cache c1 = *c;
    c1.batch = 1;
    return (size_t)(T > 0 ? T : 0) * kvq_gkv_scratch_bytes(&c1, 0);
}

extern "C" size_t kvq_gkv_rows_scratch_bytes(const kvq_gkv_cache *c, int pos0, int T) {
    int gr[3], n_slot = 0;
    kvq_gkv_rows_grids(c->n_enc_k, c->n_enc_v, pos0, T, splits_per_head(c), chunk_req_of(c, 0), gr, &n_slot); // the chunks attend plans (floored)
    return sizeof(float) * (size_t)(T > 0 ? T : 0) * c->n_heads * n_slot * (c->head_dim + 2) + tp_pre_bytes(c, T);
}

extern "C" size_t kvq_gkv_rows_scratch_bound(const kvq_gkv_cache *c, int T) {
    const size_t slots = (size_t)kvq_gkv_rows_slot_bound(c->cap, c->wcap, splits_per_head(c));
    return sizeof(float) * (size_t)(T > 0 ? T : 0) * c->n_heads * slots * (c->head_dim + 2) + tp_pre_bytes(c, T);
}

typedef void (*enc_fn)(const __half *, int, uint8_t *, size_t, size_t, int, const int *, const int *, int);
template <int D>
static enc_fn pick_enc_d(int kind, int bits) {
    if (kind == KVQ_GKV_F16) return enc_pos<KVQ_GKV_F16, 2, D>;
#define EP(KIND, B) \
    if (kind == KIND && bits == B) return enc_pos<KIND, B, D>;
    KV_BITS(EP, KVQ_GKV_INT)
    KV_BITS(EP, KVQ_GKV_KIVI)
#undef EP
    return NULL;
}
template <int D>
static enc_fn pick_kivi_k_d(int bits) { return bits == 2 ? enc_kivi_k<2, D> : bits == 3 ? enc_kivi_k<3, D> : bits == 4 ? enc_kivi_k<4, D> : NULL; }
// head_dim 128 or 64 (check_shape has passed)
static enc_fn pick_enc(int kind, int bits, int d) { return d == 64 ? pick_enc_d<64>(kind, bits) : pick_enc_d<128>(kind, bits); }
static enc_fn pick_kivi_k(int bits, int d) { return d == 64 ? pick_kivi_k_d<64>(bits) : pick_kivi_k_d<128>(bits); }
typedef void (*ring_fn)(const float *, const float *, __half *, __half *, int, int, int, const int *, const int *);
static ring_fn pick_ring(int d) { return d == 64 ? enc_ring<64> : enc_ring<128>; }

// Encodes side r's positions: host (d_pos NULL) [p0, p0 + n) (KIVI keys: n/32 groups from p0);
// a captured step (d_pos) the one position *d_pos + p0 (KIVI keys: the group from there, when
// complete; n = 1), the kernels deciding; a step of several sequences (d_seq: rows of them, d_pos
// one int a row) each row's d_pos[row] + p0 in its sequence's regions.
static kvq_status encode_side(const kvq_gkv_cache *c, const kvq_gkv_side *s, const void *ring, int p0, int n, const int *d_pos,
                              const int *d_seq, int rows, kvq_err *err) {
    const int nb = (d_seq ? rows : c->batch) * c->n_kv;
    const int hd = c->head_dim;
    const size_t region = kvq_gkv_region_bytes(s->kind, s->bits, hd, c->cap, s->role);
    const size_t so = kvq_gkv_side_offset(s->kind, s->bits, hd, c->cap);
    cudaStream_t sm = kvq_cuda_stream();
    if (kvq_gkv_kivi_k(s)) {
        const int ng = d_pos ? 1 : n / 32;
        enc_fn f = pick_kivi_k(s->bits, hd);
        if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv append: kivi keys at %d bits are not built", s->bits);
        if (!ng) return KVQ_OK;
        f<<<dim3(ng, nb), hd, 0, sm>>>((const __half *)ring, c->wcap, (uint8_t *)s->data, region, so, p0, d_pos, d_seq, c->n_kv);
        CU_LAUNCHED("enc_kivi_k");
    } else if (s->kind == KVQ_GKV_TURBO || s->kind == KVQ_GKV_TPROD || s->kind == KVQ_GKV_OCT || s->kind == KVQ_GKV_OCTQ ||
               s->kind == KVQ_GKV_HQKV || s->kind == KVQ_GKV_HQMQ || s->kind == KVQ_GKV_HQMQO) {
        return kvq_gkv_encode_rot(c, s, ring, p0, n, d_pos, d_seq, rows, err); // kv_enc.cu
    } else {
        enc_fn f = pick_enc(s->kind, s->bits, hd);
        if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv append: kind %d at %d bits has no GPU encoder (upload its records)",
                                   s->kind, s->bits);
        if (n <= 0) return KVQ_OK;
        f<<<dim3(n, nb), hd, 0, sm>>>((const __half *)ring, c->wcap, (uint8_t *)s->data, region, so, p0, d_pos, d_seq, c->n_kv);
        CU_LAUNCHED("enc_pos");
    }
    return KVQ_OK;
}

// HQMQ with outliers: the device encoder's pool-full flag of every region of a side (a u32 in the
// encoder's state after the pool, kv_enc.cu enc_hqmqo), one strided copy of batch · n_kv words.
extern "C" kvq_status kvq_gkv_pool_check(const kvq_gkv_cache *c, kvq_err *err) {
    const kvq_gkv_side *sd[2] = {&c->k, &c->v};
    const int ne[2] = {c->n_enc_k, c->n_enc_v}, nb = c->batch * c->n_kv;
    for (int r = 0; r < 2; r++) {
        const kvq_gkv_side *s = sd[r];
        if (s->kind != KVQ_GKV_HQMQO || ne[r] <= 0 || nb <= 0) continue; // (a restarted sequence's flag is reset at its position 0)
        const size_t region = kvq_gkv_region_bytes(s->kind, s->bits, c->head_dim, c->cap, s->role);
        const size_t flag = kvq_gkv_hqmqo_state_offset(s->bits, c->head_dim, c->cap) + 4 * KVQ_HQMQ_HBINS + 8;
        std::vector<uint32_t> f(nb);
        CU_TRY(cudaMemcpy2DAsync(f.data(), 4, (const uint8_t *)s->data + flag, region, 4, nb, cudaMemcpyDeviceToHost, kvq_cuda_stream()));
        CU_TRY(cudaStreamSynchronize(kvq_cuda_stream()));
        for (int i = 0; i < nb; i++)
            if (f[i])
                return kvq_err_set(err, KVQ_ERR_NUMERIC,
                                   "gpu kv append: hqmq with outliers: the %s outlier pool of sequence %d, KV head %d is full (%zu chunks for "
                                   "%d positions, 1/%d of their chunks) at or before position %d: more outlier chunks than it holds",
                                   r ? "V" : "K", i / c->n_kv, i % c->n_kv, kvq_gkv_hqmqo_pool_chunks(c->head_dim, c->cap), c->cap,
                                   KVQ_GKV_HQMQO_POOL_DIV, ne[r] - 1);
    }
    return KVQ_OK;
}

extern "C" kvq_status kvq_gkv_append(kvq_gkv_cache *c, const float *k, const float *v, int T, int window, kvq_err *err) {
    kvq_status st = check_shape(c, err);
    if (st) return st;
    if (T <= 0) return KVQ_OK;
    if (!c->wk || c->wcap < window + 32 + T)
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: a ring of %d positions, need window %d + 32 + %d", c->wcap, window, T);
    if (c->n_tok + T > c->cap) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: %d positions exceed the capacity %d", c->n_tok + T, c->cap);
    const int nb = c->batch * c->n_kv;
    pick_ring(c->head_dim)<<<T * nb, c->head_dim, 0, kvq_cuda_stream()>>>(k, v, (__half *)c->wk, (__half *)c->wv, c->wcap, c->n_tok, nb, NULL, NULL);
    CU_LAUNCHED("enc_ring");
    const kvq_gkv_side *sd[2] = {&c->k, &c->v};
    void *rings[2] = {c->wk, c->wv};
    const int ne[2] = {c->n_enc_k, c->n_enc_v};
    kvq_gkv_advance(c, T, window); // the counts after this append
    const int na[2] = {c->n_enc_k, c->n_enc_v};
    int hqmqo = 0;
    for (int r = 0; r < 2; r++) {
        if (na[r] > ne[r] && (st = encode_side(c, sd[r], rings[r], ne[r], na[r] - ne[r], NULL, NULL, 0, err))) return st;
        hqmqo |= na[r] > ne[r] && sd[r]->kind == KVQ_GKV_HQMQO;
    }
    return hqmqo ? kvq_gkv_pool_check(c, err) : KVQ_OK; // a pool that filled: one line, not outliers read as zeros
}

extern "C" kvq_status kvq_gkv_append_step(kvq_gkv_cache *c, const float *k, const float *v, int window, const int *d_pos, kvq_err *err) {
    kvq_status st = check_shape(c, err);
    if (st) return st;
    if (!d_pos) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append step: no device position");
    if (!c->wk || !c->wv || c->wcap < window + 33)
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append step: a ring of %d positions, need window %d + 33", c->wcap, window);
    if (c->n_tok + 1 > c->cap) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: %d positions exceed the capacity %d", c->n_tok + 1, c->cap);
    const int nb = c->batch * c->n_kv;
    pick_ring(c->head_dim)<<<nb, c->head_dim, 0, kvq_cuda_stream()>>>(k, v, (__half *)c->wk, (__half *)c->wv, c->wcap, 0, nb, d_pos, NULL);
    CU_LAUNCHED("enc_ring");
    // the position that leaves the window: *d_pos − window (KIVI keys: the group it completes
    // starts at *d_pos + 1 − window − 32)
    const kvq_gkv_side *sd[2] = {&c->k, &c->v};
    void *rings[2] = {c->wk, c->wv};
    for (int r = 0; r < 2; r++)
        if ((st = encode_side(c, sd[r], rings[r], kvq_gkv_kivi_k(sd[r]) ? 1 - window - 32 : -window, 1, d_pos, NULL, 0, err))) return st;
    kvq_gkv_advance(c, 1, window);
    return KVQ_OK;
}

extern "C" kvq_status kvq_gkv_append_seqs(const kvq_gkv_cache *c, const float *k, const float *v, int window, int T, const int *d_seq,
                                          const int *d_pos, kvq_err *err) {
    kvq_status st = check_shape(c, err);
    if (st) return st;
    if (!d_seq || !d_pos) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append seqs: no device sequences or positions");
    if (T < 1 || T > c->batch) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append seqs: %d rows over a cache of %d sequences", T, c->batch);
    if (!c->wk || !c->wv || c->wcap < window + 33)
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append seqs: a ring of %d positions, need window %d + 33", c->wcap, window);
    pick_ring(c->head_dim)<<<T * c->n_kv, c->head_dim, 0, kvq_cuda_stream()>>>(k, v, (__half *)c->wk, (__half *)c->wv, c->wcap, 0, c->n_kv,
                                                                               d_pos, d_seq);
    CU_LAUNCHED("enc_ring");
    // each row's position leaving the window, d_pos[row] − window (KIVI keys: the group it completes), as kvq_gkv_append_step's
    const kvq_gkv_side *sd[2] = {&c->k, &c->v};
    void *rings[2] = {c->wk, c->wv};
    for (int r = 0; r < 2; r++)
        if ((st = encode_side(c, sd[r], rings[r], kvq_gkv_kivi_k(sd[r]) ? 1 - window - 32 : -window, 1, d_pos, d_seq, T, err))) return st;
    return KVQ_OK;
}

extern "C" kvq_status kvq_gkv_time(const kvq_gkv_cache *caches, int rotate, const float *q, float *out, float scale, int chunk,
                                   void *scratch, int reps, int graph_calls, double *ms, kvq_err *err) {
    if (rotate < 1) rotate = 1;
    cudaStream_t sm = kvq_cuda_stream();
    cudaGraphExec_t ge = NULL;
    if (graph_calls > 0) { // graph_calls attends (cycling over the copies) captured once
        if (!sm) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv timing: graphs need kvq_cuda_stream_init");
        cudaGraph_t g;
        CU_TRY(cudaStreamBeginCapture(sm, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < graph_calls; i++) {
            kvq_status st = kvq_gkv_attend(&caches[i % rotate], q, out, scale, chunk, scratch, err);
            if (st) {
                cudaStreamEndCapture(sm, &g);
                return st;
            }
        }
        CU_TRY(cudaStreamEndCapture(sm, &g));
        CU_TRY(cudaGraphInstantiate(&ge, g, 0));
        cudaGraphDestroy(g);
    }
    cudaEvent_t e0, e1;
    CU_TRY(cudaEventCreate(&e0));
    CU_TRY(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int i = 0; i < reps + 3; i++) {
        CU_TRY(cudaEventRecord(e0, sm));
        if (ge) CU_TRY(cudaGraphLaunch(ge, sm));
        else {
            kvq_status st = kvq_gkv_attend(&caches[i % rotate], q, out, scale, chunk, scratch, err);
            if (st) return st;
        }
        CU_TRY(cudaEventRecord(e1, sm));
        CU_TRY(cudaEventSynchronize(e1));
        float m;
        CU_TRY(cudaEventElapsedTime(&m, e0, e1));
        if (i >= 3) t.push_back(ge ? m / graph_calls : m);
    }
    std::sort(t.begin(), t.end());
    *ms = t[t.size() / 2];
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (ge) cudaGraphExecDestroy(ge);
    return KVQ_OK;
}
