// PQ and QET products on the GPU from the pqx execution layout (pqx.h, kernels/pq_layout.h;
// each thread's arithmetic is kernels/cuda/pqx_lane.h, which the host runs in tests/test_pqx_lanes.c):
// the arrays the CPU kernels read, uploaded as they are, never decoded to dense weights.
//
// PQ (levels 0), per batch of nb <= 8 tokens (two kernels):
//   pqx_lut:  one thread per table entry (stage s, subspace j, centroid c):
//             L_s[j][c] = (…(C[j][0][c]·x[jw] + C[j][1][c]·x[jw+1]) + …) + C[j][w−1][c]·x[jw+w−1],
//             each product and sum rounded (no FMA): kvq_pqx_lut's tables bit for bit. Token t of
//             entry e at L[e·nb + t] (a lookup of several tokens reads one 32-byte sector).
//   pqx_rows: one block of 4 warps per block of 8 rows. Lane l of warp v takes row 8·rb + (l & 7)
//             and phase u = 4v + (l >> 3): its partial p_u adds, stage 1 then stage 2, the entries
//             of subspaces j ≡ u (mod 16) in increasing j (lane-packed: of the index groups
//             g ≡ u (mod 16), each group's fields in order), left to right from 0; then
//             y = (P_0 + P_1) + (P_2 + P_3), P_v = (p_4v + p_4v+1) + (p_4v+2 + p_4v+3).
//             The CPU adds the entries in one left-to-right chain: the same terms, another order,
//             so the two agree within float summation rounding (tests/test_cuda_pq.c bounds it).
// QET (levels 3), by default (KVQ_CUDA_QET=expand or unset; session 14) two kernels:
//   qetx_expand: once per product (not per token batch), one thread per codebook entry (stage s,
//             slot (g, t), centroid c): its 8 values as kvq_qetx_cb decodes them, group by group
//             with the 8 slots' centroid c side by side, E_s[((g·k_s + c)·8 + t)·8 + q], in the
//             caller's scratch (kvq_cuda_pqx_scratch_bytes).
//   qetx_rows_x: one warp per 4 rows, 8 lanes a row; lane i takes blocks b = 8g + i, g = 0..G−1:
//             the block's switch field (two aligned words, a funnel shift), the group's 8 indices a
//             stage (one 4-, 8- or 16-byte load, shared by the 8 lanes), v_t = E_1[c_1] (+ E_2[c_2]),
//             the 8 lanes of a slot reading one 32-byte sector, the swap tree undone on v in registers
//             (12 conditional swaps), then acc = fma(w[q], x[8b + q], acc), q = 0..7, x read as two
//             16-byte loads a token; then a butterfly over the row's 8 lanes (xor 4, 2, 1).
//             kvq_pql_qetx / kvq_pql_qetx_combine (pqx_lane.h) are its lanes and its tree.
// KVQ_CUDA_QET=smem (session 14, helper i12s; session 15's default): qetx_rows_s, a block
//   per (column group, row chunk) with the group's codebooks staged in shared memory as 16-bit words,
//   a thread per (row, group) partial; qetx_sum adds a row's partials in group order (see below).
// KVQ_CUDA_QET=smem2 (session 15, helper 43; the default since session 16): qetx_rows_s2 + qetx_sum2, the same
//   tables, partials and bits, rebuilt for latency (prefetched index words, no I2F; see below).
// The previous kernel stays for A/B (KVQ_CUDA_QET=decode; also taken when x is not 16-byte
// aligned): qetx_rows, one warp per row; lane l
//   takes the blocks b ≡ l (mod 32) in increasing b: σ from the block's switch field, then for
//   leaf t = 0..7 the weight v = c_1 (+ c_2, one rounding: the decoder's value) of slot (b/8, t),
//   coordinate b mod 8, decoded from the codebook blob as kvq_qetx_cb decodes it, and
//   acc = fma(v, x[8b + σ(t)], acc); then a butterfly sum over the warp (xor 16, 8, 4, 2, 1).
//   The CPU sums per block in two FMA chains and a fixed tree: the same weights, another order.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/pqx.h"
#include "kernels/cuda/pqx_lane.h"

#define PQX_TB 8                              // tokens per table batch / QET launch
#define PQX_SCRATCH_CAP ((size_t)256 << 20)   // a batch's tables stay under this (fewer tokens if not)

// KVQ_CUDA_QET=decode | expand | smem (session 15's default: 1.7-1.9x the expanded kernel at one
// token, docs/RESULTS.md; layouts it does not hold run expand) | smem2 (the same bits, built for
// latency: session 15, helper 43; the default since the H100 run of session 16: 1.4-1.5x smem at
// one token; layouts it does not hold run smem, then expand)
enum { QET_DECODE = 0, QET_EXPAND = 1, QET_SMEM = 2, QET_SMEM2 = 3 };
#define QETS_THREADS 512 // qetx_rows_s: threads a block (one block an SM when the tables are large)

struct kvq_cuda_pqx {
    kvq_pqx d;      // the host layout's scalars; its array pointers are device pointers
    size_t bytes;   // device bytes of the arrays
    int64_t lut;    // PQ: floats of one token's tables, Σ_s m·k_s; QET expand: Σ_s m·k_s·8
    int nb;         // tokens per batch
    int qet;        // QET: QET_DECODE, QET_EXPAND, QET_SMEM or QET_SMEM2 (read from the environment at upload)
    int qs_cb;      // QET_SMEM(2): 0 CQO codes, 1 bf16 words in the shared tables
    int qs_chunks;  // QET_SMEM(2): row chunks (gridDim.y); any number gives the same bits
    size_t qs_smem; // QET_SMEM(2): dynamic shared bytes a block at 8 tokens
};

// ---- PQ (the per-thread arithmetic is kernels/cuda/pqx_lane.h's)

// Tables of NB tokens (rows of ldx floats) for every entry of every stage; n0 = m·k_1.
template <int NB>
__global__ void __launch_bounds__(256) pqx_lut(kvq_pqx p, const float *__restrict__ x, int64_t ldx,
                                               float *__restrict__ L, int64_t n0, int64_t n_all) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_all) return;
    float acc[NB];
    kvq_pql_entry(&p, x, ldx, NB, e, n0, acc);
    float *o = L + e * NB;
#pragma unroll
    for (int t = 0; t < NB; t++) o[t] = acc[t];
}

// y (NB tokens, row stride ldy) (+)= the lookups of one block of 8 rows (see the top comment).
template <int NB>
__global__ void __launch_bounds__(128) pqx_rows(kvq_pqx p, const float *__restrict__ L, int64_t n0,
                                                float *__restrict__ y, int64_t ldy, int accumulate) {
    __shared__ float part[4][8][NB];
    const int lane = threadIdx.x & 31, v = threadIdx.x >> 5, i = lane & 7, u = 4 * v + (lane >> 3);
    const int64_t rb = blockIdx.x; // rows 8·rb..: padding rows (< rows_p) hold valid indices
    float acc[NB];
    kvq_pql_rows(&p, L, n0, NB, rb, i, u, acc);
#pragma unroll
    for (int t = 0; t < NB; t++) {
        acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], 8);
        acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], 16);
    }
    if (lane < 8)
#pragma unroll
        for (int t = 0; t < NB; t++) part[v][i][t] = acc[t];
    __syncthreads();
    for (int o = threadIdx.x; o < 8 * NB; o += blockDim.x) {
        const int ii = o / NB, t = o % NB;
        const int64_t row = rb * 8 + ii;
        if (row >= p.rows) continue;
        const float val = (part[0][ii][t] + part[1][ii][t]) + (part[2][ii][t] + part[3][ii][t]);
        float *yo = y + t * ldy + row;
        *yo = accumulate ? *yo + val : val;
    }
}

// ---- QET

template <int NB>
__global__ void __launch_bounds__(128) qetx_rows(kvq_pqx p, const float *__restrict__ x, int64_t ldx,
                                                 float *__restrict__ y, int64_t ldy, int accumulate) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (r >= p.rows) return; // the whole warp
    float acc[NB];
    kvq_pql_qet(&p, x, ldx, NB, r, lane, acc);
#pragma unroll
    for (int tk = 0; tk < NB; tk++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[tk] += __shfl_xor_sync(0xffffffffu, acc[tk], o);
    if (lane < NB) { // lane t writes token t
        float val = acc[0];
#pragma unroll
        for (int tk = 1; tk < NB; tk++)
            if (lane == tk) val = acc[tk];
        float *yo = y + lane * ldy + r;
        *yo = accumulate ? *yo + val : val;
    }
}

// Stage s's entries in kvq_pql_qexp's order (entries of stage 0 first: n0 = m·k_0), 8 floats each.
__global__ void __launch_bounds__(256) qetx_expand(kvq_pqx p, float *__restrict__ E, int64_t n0, int64_t n_all) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_all) return;
    float v[8];
    const int s = e >= n0;
    kvq_pql_qexp(&p, s, e - (s ? n0 : 0), v);
    float4 *o = (float4 *)(E + 8 * e);
    o[0] = make_float4(v[0], v[1], v[2], v[3]);
    o[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// y (NB tokens, row stride ldy) (+)= 4 rows a warp, 16 a block (see the top comment). Rows past
// the end compute row rows − 1's value (the shuffles want every lane) and write nothing.
template <int NB, int Q0, int Q1>
__global__ void __launch_bounds__(128) qetx_rows_x(kvq_pqx p, const float *__restrict__ E0, const float *__restrict__ E1,
                                                   const float *__restrict__ x, int64_t ldx, float *__restrict__ y,
                                                   int64_t ldy, int accumulate) {
    const int i = threadIdx.x & 7;
    const int64_t r0 = (int64_t)blockIdx.x * 16 + (threadIdx.x >> 3), r = r0 < p.rows ? r0 : p.rows - 1;
    const float *E[2] = {E0, E1};
    float acc[NB];
    kvq_pql_qetx(&p, E, x, ldx, NB, Q0, Q1, r, i, acc);
#pragma unroll
    for (int tk = 0; tk < NB; tk++)
#pragma unroll
        for (int o = 4; o > 0; o >>= 1) acc[tk] += __shfl_xor_sync(0xffffffffu, acc[tk], o);
    if (r0 < p.rows && i < NB) { // lane i writes token i
        float val = acc[0];
#pragma unroll
        for (int tk = 1; tk < NB; tk++)
            if (i == tk) val = acc[tk];
        float *yo = y + i * ldy + r;
        *yo = accumulate ? *yo + val : val;
    }
}

// ---- QET from shared-memory tables (KVQ_CUDA_QET=smem; helper i12s, session 14)
// qetx_rows_s: block (g, chunk) owns column group g for rows chunk·R .. (chunk+1)·R − 1. It stages
// group g's codebooks once, as the stored 16-bit words (CQO codes or bf16 bits: exact, half the
// bytes of floats), the 8 slots' min/step (CQO) and x's 64 columns of the group; then a thread
// takes one row at a time: the 8 indices a stage (one load), the 12 bytes of switch fields, per
// stage and slot t the centroid's 8 words as one 16-byte shared load, and for block i = 0..7 the
// decoder's values (CQO: min + (float)code·step, each rounded; bf16: the bits << 16), the swap tree
// undone in registers and acc = fma(w[q], x[q], acc) (kvq_pql_qets, the host's form). Partial
// P[(g·NB + t)·rows + r]; qetx_sum adds a row's G partials left to right (kvq_pql_qets_sum).
// Table entry (c, t) (8 words, 16 bytes) sits at kvq_pql_qets_at(c, t): for one slot t the
// threads' random centroids spread over the 8 16-byte bank quads instead of sharing one.
template <int NB, int CB, int S2>
__global__ void __launch_bounds__(QETS_THREADS, 1) qetx_rows_s(kvq_pqx p, const float *__restrict__ x, int64_t ldx,
                                                               float *__restrict__ P, int64_t rows_per) {
    extern __shared__ __align__(16) unsigned char qs_sm[];
    const int64_t g = blockIdx.x, G = p.groups, rows = p.rows;
    const int k0 = (int)p.k[0], k1 = S2 ? (int)p.k[1] : 0;
    uint16_t *T0 = (uint16_t *)qs_sm, *T1 = T0 + 64 * k0;         // (k_s, 8 slots, 8) words, swizzled
    float *ms = (float *)(T1 + 64 * k1), *xs = ms + 32;           // ms (2, 8, 2); xs (NB, 64)
    // slot (s, t) is one run of 8·k_s values in the blob (subspace j = g + t·G): ol = 8c + q
    for (int st = 0; st < 8 * (1 + S2); st++) {
        const int s = st >> 3, t = st & 7, n = 8 * (s ? k1 : k0);
        uint16_t *T = s ? T1 : T0;
        for (int ol = threadIdx.x; ol < n; ol += blockDim.x) T[kvq_pql_qets_at(ol >> 3, t) + (ol & 7)] = kvq_pql_qets_word(&p, CB, s, g, t, ol);
    }
    if (CB == 0 && threadIdx.x < 32) { // min and step of slot (g, t), stage s
        const int s = threadIdx.x >> 4, t = (threadIdx.x >> 1) & 7;
        if (s < 1 + S2) ms[threadIdx.x] = __ldg((const float *)p.cb[s] + 2 * (g + t * G) + (threadIdx.x & 1));
    }
    for (int e = threadIdx.x; e < 64 * NB; e += blockDim.x) xs[e] = __ldg(x + (e >> 6) * ldx + 64 * g + (e & 63));
    __syncthreads();
    const int64_t r_lo = blockIdx.y * rows_per, r_hi = r_lo + rows_per < rows ? r_lo + rows_per : rows;
    for (int64_t r = r_lo + threadIdx.x; r < r_hi; r += blockDim.x) {
        uint32_t c0[8], c1[8], sw[4];
        if (p.qbits[0] == 16) kvq_pql_qidx8(&p, 0, 16, r, g, c0);
        else if (p.qbits[0] == 8) kvq_pql_qidx8(&p, 0, 8, r, g, c0);
        else kvq_pql_qidx8(&p, 0, 4, r, g, c0);
        if (S2) {
            if (p.qbits[1] == 16) kvq_pql_qidx8(&p, 1, 16, r, g, c1);
            else if (p.qbits[1] == 8) kvq_pql_qidx8(&p, 1, 8, r, g, c1);
            else kvq_pql_qidx8(&p, 1, 4, r, g, c1);
        }
        const uint32_t *f32 = (const uint32_t *)(p.sw + (r * G + g) * KVQ_QETX_SW_BYTES);
        sw[0] = __ldg(f32), sw[1] = __ldg(f32 + 1), sw[2] = __ldg(f32 + 2), sw[3] = 0;
        uint4 a0[8], a1[8];
#pragma unroll
        for (int t = 0; t < 8; t++) {
            a0[t] = *(const uint4 *)(T0 + kvq_pql_qets_at((int)c0[t], t));
            if (S2) a1[t] = *(const uint4 *)(T1 + kvq_pql_qets_at((int)c1[t], t));
        }
        float acc[NB];
#pragma unroll
        for (int tk = 0; tk < NB; tk++) acc[tk] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float v[8];
#pragma unroll
            for (int t = 0; t < 8; t++) {
#pragma unroll
                for (int s = 0; s < 1 + S2; s++) {
                    const uint4 a = s ? a1[t] : a0[t];
                    const uint32_t wd = (i >> 1) == 0 ? a.x : (i >> 1) == 1 ? a.y : (i >> 1) == 2 ? a.z : a.w;
                    // (CQO: I2F is quarter rate, but 2^23 + code − 2^23 by a byte permute cost more issue slots)
                    const float val = CB == 1 ? kvq_pql_qets_val(1, wd, i & 1, 0.0f, 0.0f)
                                              : kvq_pql_qets_val(0, wd, i & 1, ms[(8 * s + t) * 2], ms[(8 * s + t) * 2 + 1]);
                    v[t] = s ? __fadd_rn(v[t], val) : val;
                }
            }
            const uint32_t f = __funnelshift_r(sw[(12 * i) >> 5], sw[((12 * i) >> 5) + 1], (12 * i) & 31) & 0xfffu;
            kvq_pql_qets_blk(f, v, xs + 8 * i, 64, NB, acc);
        }
#pragma unroll
        for (int tk = 0; tk < NB; tk++) P[(g * NB + tk) * rows + r] = acc[tk];
    }
}

// y[t·ldy + r] (+)= the G partials of (row r, token t) added left to right (kvq_pql_qets_sum).
__global__ void __launch_bounds__(256) qetx_sum(const float *__restrict__ P, int64_t rows, int64_t G, int nb,
                                                float *__restrict__ y, int64_t ldy, int accumulate) {
    const int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= rows * nb) return;
    const int64_t t = o / rows, r = o - t * rows;
    const float v = kvq_pql_qets_sum(P + t * rows + r, G, nb * rows);
    float *yo = y + t * ldy + r;
    *yo = accumulate ? *yo + v : v;
}

// ---- QET from shared-memory tables, second form (KVQ_CUDA_QET=smem2; session 15, helper 43)
// qetx_rows_s's blocks, tables, partials and order (the same bits: tests/test_cuda_pq.c compares the
// two), rebuilt for latency, which is what bounds qetx_rows_s (Nsight Compute, H100, 28672×4096, one
// token: 16 warps an SM, ~0.35 instructions a cycle a scheduler, DRAM at 13 % of its bandwidth):
// - the next row's index and switch words are loaded at the top of the current row (the first
//   row's before the staging), so no row waits for DRAM; qetx_rows_s's SASS issued its three loads
//   one after another, each behind the extraction of the one before (index-width branches);
// - CQO values without I2F (an eighth of the FP32 rate): kvq_pql_qets2_val, a byte permute and
//   fma(F, step, −2^23·step), the decoder's bits; min, step, −2^23·step of the group's 16 slots in
//   shared memory;
// - a row's values slot by slot (v[i][t]), so a slot's words and min/step live only while it is
//   decoded (128 registers, the cap of 512 threads, without spills at one token);
// - the staging (kvq_pql_qets2_stage) takes two words a thread at a time and loads
//   KVQ_PQL_STAGE pairs before it stores any (qetx_rows_s: one round trip to L2 a word, ~140 a
//   thread at k 1074/32; here ~9).
// P and the row chunks as qetx_rows_s's; qetx_sum2 adds the partials in qetx_sum's order.
static_assert(QETS_THREADS % 32 == 0, "kvq_pql_qets2_stage steps table positions by 16·blockDim.x");

// A row's global words: indices of stage 0 and 1 (qb bytes each at qb = 16, 8, 4 bits) and the 12
// bytes of switch fields.
struct qets2_raw {
    uint4 i0, i1;
    uint32_t f0, f1, f2;
};
__device__ __forceinline__ uint4 qets2_ldidx(const void *base, int qb, int64_t o) {
    if (qb == 16) return __ldg((const uint4 *)base + o);
    if (qb == 8) { const uint2 u = __ldg((const uint2 *)base + o); return make_uint4(u.x, u.y, 0u, 0u); }
    return make_uint4(__ldg((const uint32_t *)base + o), 0u, 0u, 0u);
}
template <int S2> __device__ __forceinline__ qets2_raw qets2_load(const kvq_pqx &p, int64_t r, int64_t g) {
    qets2_raw w;
    const int64_t o = r * p.groups + g;
    w.i0 = qets2_ldidx(p.idx[0], p.qbits[0], o);
    w.i1 = S2 ? qets2_ldidx(p.idx[1], p.qbits[1], o) : make_uint4(0u, 0u, 0u, 0u);
    const uint32_t *f = (const uint32_t *)(p.sw + o * KVQ_QETX_SW_BYTES);
    w.f0 = __ldg(f), w.f1 = __ldg(f + 1), w.f2 = __ldg(f + 2);
    return w;
}
// The 8 indices of a stage from its words (kvq_pql_qidx8's extraction).
__device__ __forceinline__ void qets2_split(int qb, uint4 u, uint32_t *c) {
    if (qb == 16) {
        const uint32_t a[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int t = 0; t < 8; t++) c[t] = __byte_perm(a[t >> 1], 0, t & 1 ? 0x4432 : 0x4410);
    } else if (qb == 8) {
#pragma unroll
        for (int t = 0; t < 8; t++) c[t] = __byte_perm(t < 4 ? u.x : u.y, 0, 0x4440 | (t & 3));
    } else {
#pragma unroll
        for (int t = 0; t < 8; t++) c[t] = (u.x >> (4 * t)) & 15u;
    }
}

// kvq_pql_qets2_val with 2^23's bits read from the slot's entry (m.w) rather than written as a
// constant: as a constant it took PRMT's immediate operand, and each selector then cost a move.
__device__ __forceinline__ float qets2_val(uint32_t wd, int hi, float4 m) {
    const float F = __uint_as_float(__byte_perm(wd, __float_as_uint(m.w), hi ? 0x7632 : 0x7610));
    return __fadd_rn(m.x, __fmaf_rn(F, m.y, m.z));
}

template <int NB, int CB, int S2>
__global__ void __launch_bounds__(QETS_THREADS, 1) qetx_rows_s2(kvq_pqx p, const float *__restrict__ x, int64_t ldx,
                                                                float *__restrict__ P, int64_t rows_per) {
    extern __shared__ __align__(16) unsigned char qs_sm[];
    const int64_t g = blockIdx.x, G = p.groups, rows = p.rows;
    const int k0 = (int)p.k[0], k1 = S2 ? (int)p.k[1] : 0, qb0 = p.qbits[0], qb1 = S2 ? p.qbits[1] : 0;
    uint16_t *T0 = (uint16_t *)qs_sm, *T1 = T0 + 64 * k0; // (k_s, 8 slots, 8) words, swizzled
    float4 *ms = (float4 *)(T1 + 64 * k1);                 // (2, 8): min, step, −2^23·step, 2^23
    float *xs = (float *)(ms + 16);                        // (NB, 64)
    const int64_t r_lo = blockIdx.y * rows_per, r_hi = r_lo + rows_per < rows ? r_lo + rows_per : rows;
    int64_t r = r_lo + threadIdx.x;
    qets2_raw nx = {};
    if (r < r_hi) nx = qets2_load<S2>(p, r, g); // the first row's words travel during the staging
    kvq_pql_qets2_stage(&p, CB, 0, g, threadIdx.x, blockDim.x, T0);
    if (S2) kvq_pql_qets2_stage(&p, CB, 1, g, threadIdx.x, blockDim.x, T1);
    if (CB == 0 && threadIdx.x < 16) { // slot (s, t) = threadIdx.x
        const int s = threadIdx.x >> 3, t = threadIdx.x & 7;
        if (s < 1 + S2) {
            const float *m = (const float *)p.cb[s] + 2 * (g + t * G);
            const float mn = __ldg(m), st = __ldg(m + 1);
            ms[threadIdx.x] = make_float4(mn, st, __fmul_rn(-0x1p23f, st), __uint_as_float(0x4B000000u));
        }
    }
    for (int e = threadIdx.x; e < 64 * NB; e += blockDim.x) xs[e] = __ldg(x + (e >> 6) * ldx + 64 * g + (e & 63));
    __syncthreads();
    for (; r < r_hi; r += blockDim.x) {
        const qets2_raw cu = nx;
        if (r + blockDim.x < r_hi) nx = qets2_load<S2>(p, r + blockDim.x, g);
        uint32_t c0[8], c1[8];
        qets2_split(qb0, cu.i0, c0);
        if (S2) qets2_split(qb1, cu.i1, c1);
        float v[8][8]; // (block i, slot t): the decoder's values, stages added
#pragma unroll
        for (int t = 0; t < 8; t++) {
#pragma unroll
            for (int s = 0; s < 1 + S2; s++) {
                const uint4 a = *(const uint4 *)((s ? T1 : T0) + kvq_pql_qets_at((int)(s ? c1[t] : c0[t]), t));
                float4 m = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (CB == 0) m = ms[8 * s + t];
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const uint32_t wd = (i >> 1) == 0 ? a.x : (i >> 1) == 1 ? a.y : (i >> 1) == 2 ? a.z : a.w;
                    const float val = CB == 1 ? kvq_pql_qets_val(1, wd, i & 1, 0.0f, 0.0f) : qets2_val(wd, i & 1, m);
                    v[i][t] = s ? __fadd_rn(v[i][t], val) : val;
                }
            }
        }
        const uint32_t sw[4] = {cu.f0, cu.f1, cu.f2, 0u};
        float acc[NB];
#pragma unroll
        for (int tk = 0; tk < NB; tk++) acc[tk] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t f = __funnelshift_r(sw[(12 * i) >> 5], sw[((12 * i) >> 5) + 1], (12 * i) & 31) & 0xfffu;
            kvq_pql_qets_blk(f, v[i], xs + 8 * i, 64, NB, acc);
        }
#pragma unroll
        for (int tk = 0; tk < NB; tk++) P[(g * NB + tk) * rows + r] = acc[tk];
    }
}

// qetx_sum's sums (the same order, the same bits) with 16 loads a thread in flight and blocks of
// 128 threads (rows·T threads in all: 28,672 at one token, ~7 warps an SM).
__global__ void __launch_bounds__(128) qetx_sum2(const float *__restrict__ P, int64_t rows, int64_t G, int nb,
                                                 float *__restrict__ y, int64_t ldy, int accumulate) {
    const int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= rows * nb) return;
    const int64_t t = o / rows, r = o - t * rows, st = nb * rows;
    const float *q = P + t * rows + r;
    float v = __ldg(q);
    int64_t g = 1;
    for (; g + 16 <= G; g += 16) {
        float u[16];
#pragma unroll
        for (int j = 0; j < 16; j++) u[j] = __ldg(q + (g + j) * st);
#pragma unroll
        for (int j = 0; j < 16; j++) v = __fadd_rn(v, u[j]);
    }
    for (; g < G; g++) v = __fadd_rn(v, __ldg(q + g * st));
    float *yo = y + t * ldy + r;
    *yo = accumulate ? *yo + v : v;
}

template <int NB, int CB, int S2> static int qets_attr(size_t smem) {
    return cudaFuncSetAttribute(qetx_rows_s<NB, CB, S2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess;
}
// Allows the layout's shared bytes for all 8 token counts of its instance (at upload); 0 if all took.
// The attribute is the function's, not the layout's: a model's layouts share instances, so it only
// ever rises (a smaller table uploaded after a larger one must not lower it: the larger one's launch
// would then fail with "invalid argument", as the first H100 run of the models showed, session 15).
static size_t g_qs_attr[2][2]; // [CB][S2]: the bytes allowed so far
template <int CB, int S2> static int qets_attrs(size_t smem) {
    if (smem <= g_qs_attr[CB][S2]) return 0;
    const int bad = qets_attr<1, CB, S2>(smem) | qets_attr<2, CB, S2>(smem) | qets_attr<3, CB, S2>(smem) | qets_attr<4, CB, S2>(smem) |
                    qets_attr<5, CB, S2>(smem) | qets_attr<6, CB, S2>(smem) | qets_attr<7, CB, S2>(smem) | qets_attr<8, CB, S2>(smem);
    if (!bad) g_qs_attr[CB][S2] = smem;
    return bad;
}
template <int CB, int S2> static cudaError_t qets_occ(int *n, size_t smem) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, qetx_rows_s<1, CB, S2>, QETS_THREADS, smem - sizeof(float) * 64 * (PQX_TB - 1));
}
template <int NB>
static void launch_s(const kvq_cuda_pqx *t, const float *x, int64_t ldx, float *P, cudaStream_t st) {
    const kvq_pqx &p = t->d;
    const dim3 grid((unsigned)p.groups, (unsigned)t->qs_chunks);
    const int64_t per = (p.rows + t->qs_chunks - 1) / t->qs_chunks;
    const size_t sm = t->qs_smem - sizeof(float) * 64 * (PQX_TB - NB);
    if (t->qs_cb == 1 && p.stages > 1) qetx_rows_s<NB, 1, 1><<<grid, QETS_THREADS, sm, st>>>(p, x, ldx, P, per);
    else if (t->qs_cb == 1) qetx_rows_s<NB, 1, 0><<<grid, QETS_THREADS, sm, st>>>(p, x, ldx, P, per);
    else if (p.stages > 1) qetx_rows_s<NB, 0, 1><<<grid, QETS_THREADS, sm, st>>>(p, x, ldx, P, per);
    else qetx_rows_s<NB, 0, 0><<<grid, QETS_THREADS, sm, st>>>(p, x, ldx, P, per);
}

// KVQ_CUDA_QET=smem on this layout: its shared bytes, instance and row chunks, or QET_EXPAND when
// the tables cannot be held as exact 16-bit words in one block's shared memory: f32 codebooks
// (fp16 is not exact for them, fp32 tables would not fit for the plans' k), CQO codes over 16 bits,
// or Σ_s k_s·128 bytes over the device's per-block limit.
static int qets_plan(kvq_cuda_pqx *t) {
    const kvq_pqx &p = t->d;
    if (p.cb_type == KVQ_PQX_CB_F32 || (p.cb_type == KVQ_PQX_CB_CQO && p.cb_bits > 16)) return QET_EXPAND;
    int dev = 0, optin = 0, n_sm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return QET_EXPAND;
    int64_t ks = 0;
    for (int s = 0; s < p.stages; s++) ks += p.k[s];
    const size_t sm = 128 * (size_t)ks + sizeof(float) * (32 + 64 * PQX_TB);
    if (sm > (size_t)optin) return QET_EXPAND;
    t->qs_cb = p.cb_type == KVQ_PQX_CB_BF16;
    t->qs_smem = sm;
    const int bad = t->qs_cb ? (p.stages > 1 ? qets_attrs<1, 1>(sm) : qets_attrs<1, 0>(sm))
                             : (p.stages > 1 ? qets_attrs<0, 1>(sm) : qets_attrs<0, 0>(sm));
    if (bad) { cudaGetLastError(); return QET_EXPAND; } // a refused attribute is not a sticky error: clear it
    // Row chunks: the count c of 1..16 with the least modelled time, waves × (staging + rows / c),
    // in warp-instructions of a block at one token (SASS: ~20 a table word, 64·Σk words, by 512
    // threads: ~42·Σk; ~990 a (row, group) by 32 lanes: ~31 a row, in passes of 512 rows); waves
    // from the blocks an SM the occupancy calculator gives at one token (registers allow one block
    // of 512 threads at 78–128 registers: 16 warps an SM). A model to check on the device; the
    // bits do not depend on c.
    int occ = 1;
    const cudaError_t oe = t->qs_cb ? (p.stages > 1 ? qets_occ<1, 1>(&occ, sm) : qets_occ<1, 0>(&occ, sm))
                                    : (p.stages > 1 ? qets_occ<0, 1>(&occ, sm) : qets_occ<0, 0>(&occ, sm));
    if (oe != cudaSuccess) cudaGetLastError(), occ = 1;
    const int64_t cap = (int64_t)n_sm * std::max(occ, 1);
    double best = 0;
    t->qs_chunks = 1;
    for (int64_t c = 1; c <= 16 && c <= p.rows; c++) {
        const int64_t passes = ((p.rows + c - 1) / c + QETS_THREADS - 1) / QETS_THREADS; // rows a thread
        const double cost = (double)((p.groups * c + cap - 1) / cap) * (42.0 * (double)ks + 31.0 * QETS_THREADS * (double)passes);
        if (c == 1 || cost < best) best = cost, t->qs_chunks = (int)c;
    }
    return QET_SMEM;
}

template <int NB, int CB, int S2> static int qets2_attr(size_t smem) {
    return cudaFuncSetAttribute(qetx_rows_s2<NB, CB, S2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess;
}
static size_t g_qs2_attr[2][2]; // as g_qs_attr: the attribute only ever rises
template <int CB, int S2> static int qets2_attrs(size_t smem) {
    if (smem <= g_qs2_attr[CB][S2]) return 0;
    const int bad = qets2_attr<1, CB, S2>(smem) | qets2_attr<2, CB, S2>(smem) | qets2_attr<3, CB, S2>(smem) | qets2_attr<4, CB, S2>(smem) |
                    qets2_attr<5, CB, S2>(smem) | qets2_attr<6, CB, S2>(smem) | qets2_attr<7, CB, S2>(smem) | qets2_attr<8, CB, S2>(smem);
    if (!bad) g_qs2_attr[CB][S2] = smem;
    return bad;
}
template <int CB, int S2> static cudaError_t qets2_occ(int *n, size_t smem) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, qetx_rows_s2<1, CB, S2>, QETS_THREADS, smem - sizeof(float) * 64 * (PQX_TB - 1));
}
template <int NB>
static void launch_s2(const kvq_cuda_pqx *t, const float *x, int64_t ldx, float *P, cudaStream_t st) {
    const kvq_pqx &p = t->d;
    const dim3 grid((unsigned)p.groups, (unsigned)t->qs_chunks);
    const int64_t per = (p.rows + t->qs_chunks - 1) / t->qs_chunks;
    const size_t sm = t->qs_smem - sizeof(float) * 64 * (PQX_TB - NB);
    if (t->qs_cb == 1 && p.stages > 1) qetx_rows_s2<NB, 1, 1><<<grid, QETS_THREADS, sm, st>>>(p, x, ldx, P, per);
    else if (t->qs_cb == 1) qetx_rows_s2<NB, 1, 0><<<grid, QETS_THREADS, sm, st>>>(p, x, ldx, P, per);
    else if (p.stages > 1) qetx_rows_s2<NB, 0, 1><<<grid, QETS_THREADS, sm, st>>>(p, x, ldx, P, per);
    else qetx_rows_s2<NB, 0, 0><<<grid, QETS_THREADS, sm, st>>>(p, x, ldx, P, per);
}

// KVQ_CUDA_QET=smem2 on host layout w (uploaded as t): qets_plan's conditions, and every CQO step
// one that kvq_pql_qets2_val decodes exactly (finite, under 2^100; else the smem kernel runs: the
// same bits). Row chunks as qets_plan's, from this kernel's model (SASS, docs/RESULTS.md 2026-11-27
// session 15): staging ~9·Σk cycles of a scheduler (~35 instructions a pair of words, 32·Σk pairs,
// 16 warps) plus ~600 a round trip of KVQ_PQL_STAGE pairs a thread; ~3800 cycles a pass of 512 rows at
// one token (4 warps a scheduler, ~960 instructions a (row, group)); waves from the occupancy
// calculator.
static int qets2_plan(kvq_cuda_pqx *t, const kvq_pqx *w) {
    if (qets_plan(t) != QET_SMEM) return QET_EXPAND;
    const kvq_pqx &p = t->d;
    if (p.cb_type == KVQ_PQX_CB_CQO)
        for (int s = 0; s < p.stages; s++)
            for (int64_t j = 0; j < p.m; j++) {
                float st;
                memcpy(&st, (const uint8_t *)w->cb[s] + 8 * j + 4, 4);
                if (!kvq_pql_qets2_step_ok(st)) return QET_SMEM;
            }
    int dev = 0, optin = 0, n_sm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return QET_SMEM;
    int64_t ks = 0;
    for (int s = 0; s < p.stages; s++) ks += p.k[s];
    const size_t sm = 128 * (size_t)ks + sizeof(float) * (64 + 64 * PQX_TB);
    if (sm > (size_t)optin) return QET_SMEM;
    const int bad = t->qs_cb ? (p.stages > 1 ? qets2_attrs<1, 1>(sm) : qets2_attrs<1, 0>(sm))
                             : (p.stages > 1 ? qets2_attrs<0, 1>(sm) : qets2_attrs<0, 0>(sm));
    if (bad) { cudaGetLastError(); return QET_SMEM; }
    t->qs_smem = sm;
    int occ = 1;
    const cudaError_t oe = t->qs_cb ? (p.stages > 1 ? qets2_occ<1, 1>(&occ, sm) : qets2_occ<1, 0>(&occ, sm))
                                    : (p.stages > 1 ? qets2_occ<0, 1>(&occ, sm) : qets2_occ<0, 0>(&occ, sm));
    if (oe != cudaSuccess) cudaGetLastError(), occ = 1;
    const int64_t cap = (int64_t)n_sm * std::max(occ, 1);
    const int64_t trips = (32 * ks + QETS_THREADS * KVQ_PQL_STAGE - 1) / (QETS_THREADS * KVQ_PQL_STAGE);
    const double stage = 9.0 * (double)ks + 600.0 * (double)trips;
    double best = 0;
    t->qs_chunks = 1;
    for (int64_t c = 1; c <= 16 && c <= p.rows; c++) {
        const int64_t passes = ((p.rows + c - 1) / c + QETS_THREADS - 1) / QETS_THREADS;
        const double cost = (double)((p.groups * c + cap - 1) / cap) * (stage + 3800.0 * (double)passes);
        if (c == 1 || cost < best) best = cost, t->qs_chunks = (int)c;
    }
    return QET_SMEM2;
}

// ---- host side

static kvq_status up(void **dst, const void *src, size_t n, size_t pad, size_t *bytes, kvq_err *err) {
    *dst = NULL;
    if (!src || !n) return KVQ_OK;
    CU_TRY(cudaMalloc(dst, n + pad));
    CU_TRY(cudaMemcpy(*dst, src, n, cudaMemcpyHostToDevice));
    if (pad) CU_TRY(cudaMemset((char *)*dst + n, 0, pad));
    *bytes += n + pad;
    return KVQ_OK;
}

extern "C" void kvq_cuda_pqx_free(kvq_cuda_pqx *t) {
    if (!t) return;
    for (int s = 0; s < KVQ_PQX_MAX_STAGES; s++) {
        if (t->d.idx[s]) cudaFree(t->d.idx[s]);
        if (t->d.cb[s]) cudaFree(t->d.cb[s]);
        if (t->d.cb_ms[s]) cudaFree(t->d.cb_ms[s]);
    }
    if (t->d.sw) cudaFree(t->d.sw);
    free(t);
}

static kvq_status pqx_upload_plain(const kvq_pqx *w, kvq_cuda_pqx **out, kvq_err *err) {
    *out = NULL;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: no device");
    if ((w->levels != 0 && w->levels != KVQ_QETX_LEVELS) || w->stages < 1 || w->stages > KVQ_PQX_MAX_STAGES ||
        (w->levels && (w->w != 8 || w->cols % 64 || w->cb_type == KVQ_PQX_CB_F16)) || (!w->levels && w->rows_p % KVQ_PQX_RB))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: pqx layout (levels %d, w %d, %lld columns, cb type %d) not supported",
                           w->levels, w->w, (long long)w->cols, w->cb_type);
    kvq_cuda_pqx *t = (kvq_cuda_pqx *)calloc(1, sizeof *t);
    if (!t) return kvq_err_set(err, KVQ_ERR_NOMEM, "cuda: out of memory");
    t->d = *w;
    for (int s = 0; s < KVQ_PQX_MAX_STAGES; s++) t->d.idx[s] = t->d.cb[s] = NULL, t->d.cb_ms[s] = NULL;
    t->d.sw = NULL;
    kvq_status st = KVQ_OK;
    size_t b = 0;
    for (int s = 0; s < w->stages && !st; s++) {
        if (w->levels) {
            st = up(&t->d.idx[s], w->idx[s], (size_t)(w->rows * w->m) * (size_t)w->qbits[s] / 8 + 1, 0, &b, err);
            if (!st) st = up(&t->d.cb[s], w->cb[s], w->cb_size[s], 16, &b, err);
            continue;
        }
        const size_t ib = w->pbits[s] ? (size_t)(w->rows_p * w->pgroups[s]) * (size_t)w->pwords[s] * 4
                                       : (size_t)(w->rows_p * w->m) * (size_t)w->ib[s];
        st = up(&t->d.idx[s], w->idx[s], ib, 0, &b, err);
        if (!st) st = up(&t->d.cb[s], w->cb[s], (size_t)(w->m * w->w * w->k[s]) * (w->cb_type == KVQ_PQX_CB_F32 ? 4u : 2u), 0, &b, err);
        if (!st && w->cb_type == KVQ_PQX_CB_CQO) {
            void *ms = NULL;
            st = up(&ms, w->cb_ms[s], 8 * (size_t)w->m, 0, &b, err);
            t->d.cb_ms[s] = (float *)ms;
        }
    }
    if (!st && w->levels) st = up((void **)&t->d.sw, w->sw, (size_t)(w->rows * w->groups) * KVQ_QETX_SW_BYTES, KVQ_QETX_SW_PAD, &b, err);
    t->bytes = b;
    if (!w->levels) {
        for (int s = 0; s < w->stages; s++) t->lut += w->m * w->k[s];
        const size_t one = sizeof(float) * (size_t)t->lut;
        t->nb = (int)std::max<size_t>(1, std::min<size_t>(PQX_TB, PQX_SCRATCH_CAP / (one ? one : 1)));
    } else {
        t->nb = PQX_TB;
        const char *e = getenv("KVQ_CUDA_QET");
        t->qet = QET_EXPAND;
        if (e && !strcmp(e, "smem")) t->qet = st ? QET_EXPAND : qets_plan(t);
        else if (!e || !*e || !strcmp(e, "smem2")) t->qet = st ? QET_EXPAND : qets2_plan(t, w);
        else if (!strcmp(e, "decode")) t->qet = QET_DECODE;
        else if (strcmp(e, "expand") && !st)
            st = kvq_err_set(err, KVQ_ERR_ARG, "cuda: KVQ_CUDA_QET=%s (expected smem, smem2, expand or decode)", e);
        if (t->qet >= QET_SMEM) t->lut = w->rows * w->groups * PQX_TB; // the partials (rows, groups, 8 tokens)
        else
            for (int s = 0; s < w->stages; s++) t->lut += w->m * w->k[s] * 8;
    }
    if (st) { kvq_cuda_pqx_free(t); return st; }
    *out = t;
    return KVQ_OK;
}

// The CPU's split forms (kvq_pqx_split_wide: indices of 9..12 bits as a low byte + high bits;
// kvq_pqx_split_codes: CQO codes at their stored width) are widened back to uint16 for the
// device, whose kernels read the unsplit form: the GPU holds those indices and codes at 16 bits
// (the CPU at the file's width).
extern "C" kvq_status kvq_cuda_pqx_upload(const kvq_pqx *w, kvq_cuda_pqx **out, kvq_err *err) {
    int split = 0;
    for (int s = 0; s < w->stages && s < KVQ_PQX_MAX_STAGES; s++) split |= w->hbits[s] != 0;
    if (!w->levels && w->cb_type == KVQ_PQX_CB_CQO && w->cbq_bits) split = 1;
    if (w->levels || !split) return pqx_upload_plain(w, out, err);
    kvq_pqx h = *w;
    uint16_t *tmp[2 * KVQ_PQX_MAX_STAGES] = {NULL};
    kvq_status st = KVQ_OK;
    for (int s = 0; s < w->stages && !st; s++) {
        if (w->hbits[s]) {
            uint16_t *ix = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(w->rows_p * w->m));
            if (!ix) { st = kvq_err_set(err, KVQ_ERR_NOMEM, "cuda: out of memory widening PQ indices"); break; }
            for (int64_t r = 0; r < w->rows_p; r++)
                for (int64_t j = 0; j < w->m; j++) ix[kvq_pqx_idx_at(w, r, j)] = (uint16_t)kvq_pqx_idx(w, s, r, j);
            tmp[s] = ix;
            h.idx[s] = ix;
            h.ib[s] = 2;
            h.hbits[s] = 0;
            h.hi[s] = NULL;
            h.pbits[s] = 0;
        }
        if (w->cb_type == KVQ_PQX_CB_CQO && w->cbq_bits) {
            const int64_t k8 = (w->k[s] + 7) & ~(int64_t)7, n = w->m * w->w * w->k[s];
            uint16_t *cb = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)n);
            if (!cb) { st = kvq_err_set(err, KVQ_ERR_NOMEM, "cuda: out of memory widening CQO codes"); break; }
            for (int64_t jq = 0; jq < w->m * w->w; jq++)
                for (int64_t c = 0; c < w->k[s]; c++) cb[jq * w->k[s] + c] = (uint16_t)kvq_pqx_cqo_split_code(w, s, jq * k8 + c);
            tmp[KVQ_PQX_MAX_STAGES + s] = cb;
            h.cb[s] = cb;
            h.cb_hi[s] = NULL;
        }
    }
    if (w->cb_type == KVQ_PQX_CB_CQO) h.cbq_bits = 0;
    if (!st) st = pqx_upload_plain(&h, out, err);
    for (int i = 0; i < 2 * KVQ_PQX_MAX_STAGES; i++) free(tmp[i]);
    return st;
}

extern "C" size_t kvq_cuda_pqx_bytes(const kvq_cuda_pqx *t) { return t ? t->bytes : 0; }
extern "C" size_t kvq_cuda_pqx_scratch_bytes(const kvq_cuda_pqx *t) {
    if (t && t->d.levels) return t->qet != QET_DECODE ? sizeof(float) * (size_t)t->lut : 0;
    return t ? sizeof(float) * (size_t)t->lut * (size_t)t->nb : 0;
}
extern "C" int kvq_cuda_pqx_qet_kernel(const kvq_cuda_pqx *t) { return t && t->d.levels ? t->qet : -1; }
extern "C" int kvq_cuda_pqx_batch(const kvq_cuda_pqx *t) { return t ? t->nb : 0; }

// The expanded kernel for this layout's index widths (a constant each: no per-block branches).
template <int NB, int Q0>
static void launch_x1(const kvq_pqx &p, const float *L, const float *x, int64_t ldx, float *y, int64_t ldy, int acc, cudaStream_t st) {
    const unsigned nblk = (unsigned)((p.rows + 15) / 16);
    const float *L1 = L + p.m * p.k[0] * 8;
    if (p.stages < 2) qetx_rows_x<NB, Q0, 0><<<nblk, 128, 0, st>>>(p, L, L1, x, ldx, y, ldy, acc);
    else if (p.qbits[1] == 4) qetx_rows_x<NB, Q0, 4><<<nblk, 128, 0, st>>>(p, L, L1, x, ldx, y, ldy, acc);
    else if (p.qbits[1] == 8) qetx_rows_x<NB, Q0, 8><<<nblk, 128, 0, st>>>(p, L, L1, x, ldx, y, ldy, acc);
    else qetx_rows_x<NB, Q0, 16><<<nblk, 128, 0, st>>>(p, L, L1, x, ldx, y, ldy, acc);
}
template <int NB>
static void launch_x(const kvq_pqx &p, const float *L, const float *x, int64_t ldx, float *y, int64_t ldy, int acc, cudaStream_t st) {
    if (p.qbits[0] == 4) launch_x1<NB, 4>(p, L, x, ldx, y, ldy, acc, st);
    else if (p.qbits[0] == 8) launch_x1<NB, 8>(p, L, x, ldx, y, ldy, acc, st);
    else launch_x1<NB, 16>(p, L, x, ldx, y, ldy, acc, st);
}

template <int NB> static kvq_status launch_nb(const kvq_cuda_pqx *t, const float *x, int64_t ldx, float *y, int64_t ldy,
                                              int accumulate, float *L, kvq_err *err) {
    const kvq_pqx &p = t->d;
    cudaStream_t st = kvq_cuda_stream();
    if (p.levels && t->qet == QET_SMEM2) { // L: the partials
        launch_s2<NB>(t, x, ldx, L, st);
        CU_LAUNCHED("qetx_rows_s2");
        qetx_sum2<<<(unsigned)((p.rows * NB + 127) / 128), 128, 0, st>>>(L, p.rows, p.groups, NB, y, ldy, accumulate);
        CU_LAUNCHED("qetx_sum2");
        return KVQ_OK;
    }
    if (p.levels && t->qet == QET_SMEM) { // L: the partials
        launch_s<NB>(t, x, ldx, L, st);
        CU_LAUNCHED("qetx_rows_s");
        qetx_sum<<<(unsigned)((p.rows * NB + 255) / 256), 256, 0, st>>>(L, p.rows, p.groups, NB, y, ldy, accumulate);
        CU_LAUNCHED("qetx_sum");
        return KVQ_OK;
    }
    if (p.levels && t->qet == QET_EXPAND && !((uintptr_t)x & 15) && !(ldx & 3)) { // L: the expanded tables
        launch_x<NB>(p, L, x, ldx, y, ldy, accumulate, st);
        CU_LAUNCHED("qetx_rows_x");
        return KVQ_OK;
    }
    if (p.levels) {
        qetx_rows<NB><<<(unsigned)((p.rows + 3) / 4), 128, 0, st>>>(p, x, ldx, y, ldy, accumulate);
        CU_LAUNCHED("qetx_rows");
        return KVQ_OK;
    }
    const int64_t n0 = p.m * p.k[0], n_all = t->lut;
    pqx_lut<NB><<<(unsigned)((n_all + 255) / 256), 256, 0, st>>>(p, x, ldx, L, n0, n_all);
    CU_LAUNCHED("pqx_lut");
    pqx_rows<NB><<<(unsigned)(p.rows_p / 8), 128, 0, st>>>(p, L, n0, y, ldy, accumulate);
    CU_LAUNCHED("pqx_rows");
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_pqx_matmul(kvq_cuda_pqx *const *t, int n, const int64_t *row0, const float *d_x, int n_tok,
                                          float *d_y, int64_t ldy, int accumulate, void *d_scratch, kvq_err *err) {
    if (n < 1 || n > 3) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: pqx product of %d blocks (1 to 3)", n);
    const int64_t cols = t[0]->d.cols;
    for (int p = 0; p < n; p++) {
        if (t[p]->d.cols != cols) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: pqx blocks differ in columns");
        if (kvq_cuda_pqx_scratch_bytes(t[p]) && !d_scratch) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: pqx product without its table scratch");
    }
    for (int p = 0; p < n; p++) {
        const int nb = t[p]->nb;
        if (t[p]->d.levels && t[p]->qet == QET_EXPAND && n_tok > 0) { // the tables once for all batches
            const int64_t n0 = t[p]->d.m * t[p]->d.k[0], n_all = t[p]->lut / 8;
            qetx_expand<<<(unsigned)((n_all + 255) / 256), 256, 0, kvq_cuda_stream()>>>(t[p]->d, (float *)d_scratch, n0, n_all);
            CU_LAUNCHED("qetx_expand");
        }
        for (int t0 = 0; t0 < n_tok; t0 += nb) {
            const int m = n_tok - t0 < nb ? n_tok - t0 : nb;
            const float *x = d_x + (size_t)t0 * cols;
            float *y = d_y + (size_t)t0 * ldy + row0[p], *L = (float *)d_scratch;
            kvq_status s = KVQ_OK;
            switch (m) {
            case 1: s = launch_nb<1>(t[p], x, cols, y, ldy, accumulate, L, err); break;
            case 2: s = launch_nb<2>(t[p], x, cols, y, ldy, accumulate, L, err); break;
            case 3: s = launch_nb<3>(t[p], x, cols, y, ldy, accumulate, L, err); break;
            case 4: s = launch_nb<4>(t[p], x, cols, y, ldy, accumulate, L, err); break;
            case 5: s = launch_nb<5>(t[p], x, cols, y, ldy, accumulate, L, err); break;
            case 6: s = launch_nb<6>(t[p], x, cols, y, ldy, accumulate, L, err); break;
            case 7: s = launch_nb<7>(t[p], x, cols, y, ldy, accumulate, L, err); break;
            default: s = launch_nb<8>(t[p], x, cols, y, ldy, accumulate, L, err); break;
            }
            if (s) return s;
        }
    }
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_pqx_matmul_host(kvq_cuda_pqx *t, const float *h_x, int n_tok, float *h_y, kvq_err *err) {
    float *dx = NULL, *dy = NULL;
    void *sc = NULL;
    const size_t nx = (size_t)t->d.cols * n_tok, ny = (size_t)t->d.rows * n_tok, ns = kvq_cuda_pqx_scratch_bytes(t);
    kvq_status s = KVQ_OK;
    cudaError_t e = cudaMalloc((void **)&dx, sizeof(float) * (nx ? nx : 1));
    if (e == cudaSuccess) e = cudaMalloc((void **)&dy, sizeof(float) * (ny ? ny : 1));
    if (e == cudaSuccess && ns) e = cudaMalloc(&sc, ns);
    if (e == cudaSuccess) e = cudaMemcpy(dx, h_x, sizeof(float) * nx, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) s = cu_fail(err, e, "pqx matmul_host setup");
    const int64_t r0 = 0;
    if (!s) s = kvq_cuda_pqx_matmul(&t, 1, &r0, dx, n_tok, dy, t->d.rows, 0, sc, err);
    if (!s) {
        e = cudaStreamSynchronize(kvq_cuda_stream());
        if (e == cudaSuccess) e = cudaMemcpy(h_y, dy, sizeof(float) * ny, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) s = cu_fail(err, e, "pqx matmul_host run");
    }
    if (dx) cudaFree(dx);
    if (dy) cudaFree(dy);
    if (sc) cudaFree(sc);
    return s;
}

extern "C" kvq_status kvq_cuda_pqx_time(kvq_cuda_pqx *t, int n_tok, int reps, double *ms, kvq_err *err) {
    float *dx = NULL, *dy = NULL;
    void *sc = NULL;
    const size_t nx = (size_t)t->d.cols * n_tok, ny = (size_t)t->d.rows * n_tok, ns = kvq_cuda_pqx_scratch_bytes(t);
    CU_TRY(cudaMalloc((void **)&dx, sizeof(float) * nx));
    CU_TRY(cudaMalloc((void **)&dy, sizeof(float) * ny));
    if (ns) CU_TRY(cudaMalloc(&sc, ns));
    {
        std::vector<float> hx(nx);
        uint64_t z = 12345;
        for (auto &v : hx) { z = z * 6364136223846793005ull + 1442695040888963407ull; v = (float)((int64_t)(z >> 33) % 2001 - 1000) / 1000.0f; }
        CU_TRY(cudaMemcpy(dx, hx.data(), sizeof(float) * nx, cudaMemcpyHostToDevice));
    }
    cudaEvent_t a, b;
    CU_TRY(cudaEventCreate(&a));
    CU_TRY(cudaEventCreate(&b));
    std::vector<float> tv;
    kvq_status s = KVQ_OK;
    const int64_t r0 = 0;
    for (int r = 0; r < reps + 3 && !s; r++) {
        cudaEventRecord(a, kvq_cuda_stream());
        s = kvq_cuda_pqx_matmul(&t, 1, &r0, dx, n_tok, dy, t->d.rows, 0, sc, err);
        cudaEventRecord(b, kvq_cuda_stream());
        cudaEventSynchronize(b);
        float f = 0.0f;
        cudaEventElapsedTime(&f, a, b);
        if (r >= 3) tv.push_back(f); // warm-up first
    }
    const cudaError_t e = cudaGetLastError();
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(dx);
    cudaFree(dy);
    if (sc) cudaFree(sc);
    if (s) return s;
    if (e != cudaSuccess) return cu_fail(err, e, "pqx time");
    std::sort(tv.begin(), tv.end());
    *ms = tv.empty() ? 0.0 : tv[tv.size() / 2];
    return KVQ_OK;
}
