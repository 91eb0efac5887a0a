// What one GPU thread of kernels/cuda/pqx.cu computes, written once as C99 that also compiles
// as CUDA (as kernels/pq_layout.h), so that the host can run the same arithmetic in the same
// order (tests/test_pqx_lanes.c emulates every lane and the kernels' reduction trees on the CPU
// and checks them against the CPU kernels; the GPU suite compares the device's bits with it).
// Values are the codec decoder's, as kvq_pqx_cb / kvq_qetx_cb compute them, with every product
// and sum rounded on its own (no contraction to FMA; the QET product's FMA is explicit).
#ifndef KVQ_CUDA_PQX_LANE_H
#define KVQ_CUDA_PQX_LANE_H

#include <math.h>
#include <stdint.h>

#include "kernels/pq_layout.h"

#ifdef __CUDA_ARCH__
#define KVQ_PQL_LD(p) __ldg(p)
#define KVQ_PQL_MUL(a, b) __fmul_rn(a, b)
#define KVQ_PQL_ADD(a, b) __fadd_rn(a, b)
#else
#define KVQ_PQL_LD(p) (*(p))
#define KVQ_PQL_MUL(a, b) ((a) * (b))
#define KVQ_PQL_ADD(a, b) ((a) + (b))
#endif

#define KVQ_PQL_PHASES 16 // PQ: lanes sharing a row (4 warps × 4 lanes), each a residue of j mod 16

/** PQ codebook value of stage s, subspace j at element offset o = (j·w + q)·k + c. */
KVQ_PQ_HD static inline float kvq_pql_cb(const kvq_pqx *p, int s, int64_t j, int64_t o) {
    const uint16_t *h = (const uint16_t *)p->cb[s];
    if (p->cb_type == KVQ_PQX_CB_F32) return KVQ_PQL_LD((const float *)p->cb[s] + o);
    if (p->cb_type == KVQ_PQX_CB_F16) return kvq_pqx_f16(KVQ_PQL_LD(h + o));
    if (p->cb_type == KVQ_PQX_CB_CQO) {
        const float mn = KVQ_PQL_LD(p->cb_ms[s] + 2 * j), st = KVQ_PQL_LD(p->cb_ms[s] + 2 * j + 1);
        return KVQ_PQL_ADD(mn, KVQ_PQL_MUL((float)KVQ_PQL_LD(h + o), st));
    }
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)KVQ_PQL_LD(h + o) << 16;
    return v.f;
}

/** Table entry e (stage 1's m·k_1 entries first: n0 = m·k_1) of nb <= 8 tokens (rows of ldx
 *  floats of x): out[t] = ⟨C_s[j][c], x_t,j⟩ summed over the w coordinates left to right. */
KVQ_PQ_HD static inline void kvq_pql_entry(const kvq_pqx *p, const float *x, int64_t ldx, int nb, int64_t e, int64_t n0,
                                           float *out) {
    const int s = e >= n0;
    const int64_t el = e - (s ? n0 : 0), k = p->k[s], j = el / k, c = el - j * k;
    const int W = p->w;
    const float *xj = x + j * W;
    {
        const float v = kvq_pql_cb(p, s, j, j * W * k + c);
        for (int t = 0; t < nb; t++) out[t] = KVQ_PQL_MUL(v, KVQ_PQL_LD(xj + t * ldx));
    }
    for (int q = 1; q < W; q++) {
        const float v = kvq_pql_cb(p, s, j, (j * W + q) * k + c);
        for (int t = 0; t < nb; t++) out[t] = KVQ_PQL_ADD(out[t], KVQ_PQL_MUL(v, KVQ_PQL_LD(xj + t * ldx + q)));
    }
}

/** acc[t] += the nb tokens of one table entry (e: its first float; nb floats, 4·nb-byte aligned). */
KVQ_PQ_HD static inline void kvq_pql_add(float *acc, const float *e, int nb) {
#ifdef __CUDA_ARCH__
    if (nb == 8) {
        const float4 a = __ldg((const float4 *)e), b = __ldg((const float4 *)e + 1);
        acc[0] += a.x; acc[1] += a.y; acc[2] += a.z; acc[3] += a.w;
        acc[4] += b.x; acc[5] += b.y; acc[6] += b.z; acc[7] += b.w;
        return;
    }
    if (nb == 4) {
        const float4 a = __ldg((const float4 *)e);
        acc[0] += a.x; acc[1] += a.y; acc[2] += a.z; acc[3] += a.w;
        return;
    }
    if (nb == 2) {
        const float2 a = __ldg((const float2 *)e);
        acc[0] += a.x; acc[1] += a.y;
        return;
    }
#endif
    for (int t = 0; t < nb; t++) acc[t] += KVQ_PQL_LD(e + t);
}

/** PQ: the partial of phase u (0..15) of row 8·rb + i: acc[t] (from 0) adds, stage 1 then 2,
 *  the entries L[(off_s + j·k_s + idx)·nb + t] of the subspaces j ≡ u (mod 16) in increasing j
 *  (lane-packed in one word a group: of the groups g ≡ u (mod 16), each group's fields in order). */
KVQ_PQ_HD static inline void kvq_pql_rows(const kvq_pqx *p, const float *L, int64_t n0, int nb, int64_t rb, int i, int u,
                                          float *acc) {
    const int64_t r = rb * KVQ_PQX_RB + i, m = p->m;
    for (int t = 0; t < nb; t++) acc[t] = 0.0f;
    for (int s = 0; s < p->stages; s++) {
        const float *Ls = L + (s ? n0 : 0) * nb;
        const int64_t k = p->k[s];
        if (p->pbits[s] && p->pwords[s] == 1) {
            const int b = p->pbits[s], P = p->pper[s];
            const uint32_t mask = (1u << b) - 1u;
            const uint32_t *q = (const uint32_t *)p->idx[s] + rb * p->pgroups[s] * KVQ_PQX_RB + i;
            for (int64_t g = u; g < p->pgroups[s]; g += KVQ_PQL_PHASES) {
                const uint32_t wd = KVQ_PQL_LD(q + g * KVQ_PQX_RB);
                const int64_t j0 = g * P;
                const int nf = m - j0 < P ? (int)(m - j0) : P;
                for (int f = 0; f < nf; f++) kvq_pql_add(acc, Ls + ((j0 + f) * k + ((wd >> (f * b)) & mask)) * nb, nb);
            }
        } else if (p->pbits[s]) { // several words a group (fields may straddle two)
            for (int64_t j = u; j < m; j += KVQ_PQL_PHASES) kvq_pql_add(acc, Ls + (j * k + kvq_pqx_idx(p, s, r, j)) * nb, nb);
        } else if (p->ib[s] == 1) {
            const uint8_t *q = (const uint8_t *)p->idx[s] + rb * m * KVQ_PQX_RB + i;
            for (int64_t j = u; j < m; j += KVQ_PQL_PHASES) kvq_pql_add(acc, Ls + (j * k + KVQ_PQL_LD(q + j * KVQ_PQX_RB)) * nb, nb);
        } else {
            const uint16_t *q = (const uint16_t *)p->idx[s] + rb * m * KVQ_PQX_RB + i;
            for (int64_t j = u; j < m; j += KVQ_PQL_PHASES) kvq_pql_add(acc, Ls + (j * k + KVQ_PQL_LD(q + j * KVQ_PQX_RB)) * nb, nb);
        }
    }
}

/** PQ: a row's value from its 16 partials (phase u = 4v + q): (P_0 + P_1) + (P_2 + P_3),
 *  P_v = (p_4v + p_4v+1) + (p_4v+2 + p_4v+3): the kernel's shuffles (xor 8, 16) and block sum. */
KVQ_PQ_HD static inline float kvq_pql_combine(const float *pu) {
    float P[4];
    for (int v = 0; v < 4; v++) P[v] = (pu[4 * v] + pu[4 * v + 1]) + (pu[4 * v + 2] + pu[4 * v + 3]);
    return (P[0] + P[1]) + (P[2] + P[3]);
}

/** QET codebook value of stage s, subspace j, centroid c, coordinate q (the blob as stored;
 *  CQO codes read as a 64-bit window of two aligned words: blobs carry 16 bytes of padding). */
KVQ_PQ_HD static inline float kvq_pql_qcb(const kvq_pqx *p, int s, int64_t j, int64_t c, int q) {
    const uint8_t *B = (const uint8_t *)p->cb[s];
    const int64_t e = (j * p->k[s] + c) * 8 + q;
    union { uint32_t u; float f; } v;
    if (p->cb_type == KVQ_PQX_CB_BF16) {
        v.u = (uint32_t)KVQ_PQL_LD((const uint16_t *)B + e) << 16;
        return v.f;
    }
    if (p->cb_type == KVQ_PQX_CB_F32) return KVQ_PQL_LD((const float *)B + e);
    const float mn = KVQ_PQL_LD((const float *)B + 2 * j), st = KVQ_PQL_LD((const float *)B + 2 * j + 1);
    const uint64_t pos = (uint64_t)e * (uint64_t)p->cb_bits;
    const uint32_t *cw = (const uint32_t *)(B + 8 * p->m) + (pos >> 5);
    const uint64_t win = (uint64_t)KVQ_PQL_LD(cw) | (uint64_t)KVQ_PQL_LD(cw + 1) << 32;
    const uint32_t code = (uint32_t)(win >> (pos & 31)) & ((1u << p->cb_bits) - 1u);
    return KVQ_PQL_ADD(mn, KVQ_PQL_MUL((float)code, st));
}

/** kvq_qetx_sigma without indexed arrays (the tree's three levels on packed 3-bit fields). */
KVQ_PQ_HD static inline uint32_t kvq_pql_sigma(uint32_t f) {
    uint32_t u = 0, v = 0, perm = 0;
    for (int j = 0; j < 4; j++) { // level 1: pairs (2j, 2j+1) → S j, L 4 + j
        const uint32_t sw = (f >> j) & 1u;
        u |= (2u * j + sw) << (3 * j);
        u |= (2u * j + 1u - sw) << (3 * (4 + j));
    }
    for (int h = 0; h < 2; h++) // level 2, inside each half
        for (int j = 0; j < 2; j++) {
            const uint32_t sw = (f >> (4 + 2 * h + j)) & 1u;
            const uint32_t a0 = (u >> (3 * (4 * h + 2 * j))) & 7u, a1 = (u >> (3 * (4 * h + 2 * j + 1))) & 7u;
            v |= (sw ? a1 : a0) << (3 * (4 * h + j));
            v |= (sw ? a0 : a1) << (3 * (4 * h + 2 + j));
        }
    for (int q = 0; q < 4; q++) { // level 3, inside each quarter
        const uint32_t sw = (f >> (8 + q)) & 1u;
        const uint32_t a0 = (v >> (6 * q)) & 7u, a1 = (v >> (6 * q + 3)) & 7u;
        perm |= (sw ? a1 : a0) << (6 * q);
        perm |= (sw ? a0 : a1) << (6 * q + 3);
    }
    return perm;
}

/** QET: lane l's (0..31) partial of row r for nb <= 8 tokens: blocks b ≡ l (mod 32) in
 *  increasing b, leaves t = 0..7: acc[t'] = fma(c_1 (+ c_2), x_t'[8b + σ_b(t)], acc[t']). */
KVQ_PQ_HD static inline void kvq_pql_qet(const kvq_pqx *p, const float *x, int64_t ldx, int nb, int64_t r, int lane,
                                         float *acc) {
    const int64_t D = p->cols / 8, G = p->groups;
    for (int t = 0; t < nb; t++) acc[t] = 0.0f;
    for (int64_t b = lane; b < D; b += 32) {
        const int64_t g = b >> 3;
        const int i = (int)(b & 7);
        const uint32_t perm = kvq_pql_sigma(kvq_qetx_field(p, r, b));
        for (int t = 0; t < 8; t++) {
            const int64_t j = g + t * G;
            float w = kvq_pql_qcb(p, 0, j, kvq_qetx_idx(p, 0, r, g, t), i);
            if (p->stages > 1) w = KVQ_PQL_ADD(w, kvq_pql_qcb(p, 1, j, kvq_qetx_idx(p, 1, r, g, t), i));
            const float *xc = x + 8 * b + ((perm >> (3 * t)) & 7u);
            for (int tk = 0; tk < nb; tk++) acc[tk] = fmaf(w, KVQ_PQL_LD(xc + tk * ldx), acc[tk]);
        }
    }
}

// ---- QET from expanded codebooks (the default kernel since 2026-11-27, session 14)
// Per product, the codebooks are expanded once to float by group (kvq_pql_qexp, one thread
// an entry); per row, each weight is then one float load a stage from that table, one add, and a
// multiply-add; the swap tree is undone on the 8 values of a block in registers (kvq_pql_unswap)
// so the activations are read in input order, 8 contiguous floats a block and token.

#ifdef __CUDACC__
#define KVQ_PQL_UNROLL _Pragma("unroll")
#else
#define KVQ_PQL_UNROLL
#endif

/** Entry e = (g·k_s + c)·8 + t of stage s's expanded table (group g, centroid c, slot t: the 8
 *  slots' centroid c side by side, so a slot is an immediate offset from its group's centroid):
 *  out[q] = kvq_qetx_cb(p, s, g + t·G, c, q), q = 0..7. */
KVQ_PQ_HD static inline void kvq_pql_qexp(const kvq_pqx *p, int s, int64_t e, float *out) {
    const int64_t gc = e >> 3, g = gc / p->k[s], c = gc - g * p->k[s], j = g + (e & 7) * p->groups;
    for (int q = 0; q < 8; q++) out[q] = kvq_pql_qcb(p, s, j, c, q);
}

/** The swap tree of field f undone on one block: w[σ(t)] = v[t] (kvq_pql_sigma's σ), i.e. the
 *  block's weights in input order from its 8 leaves, by 12 conditional swaps (level 3, 2, then 1;
 *  values are only moved, never rounded). */
KVQ_PQ_HD static inline void kvq_pql_unswap(uint32_t f, const float *v, float *w) {
    float V[8], U[8];
    KVQ_PQL_UNROLL
    for (int q = 0; q < 4; q++) { // level 3: leaves (2q, 2q+1) of quarter q
        const int sw = (f >> (8 + q)) & 1u;
        V[2 * q] = sw ? v[2 * q + 1] : v[2 * q];
        V[2 * q + 1] = sw ? v[2 * q] : v[2 * q + 1];
    }
    KVQ_PQL_UNROLL
    for (int h = 0; h < 2; h++) // level 2: S/L halves of half h back to pairs
        KVQ_PQL_UNROLL
        for (int j = 0; j < 2; j++) {
            const int sw = (f >> (4 + 2 * h + j)) & 1u;
            const float a = V[4 * h + j], b = V[4 * h + 2 + j];
            U[4 * h + 2 * j] = sw ? b : a;
            U[4 * h + 2 * j + 1] = sw ? a : b;
        }
    KVQ_PQL_UNROLL
    for (int j = 0; j < 4; j++) { // level 1: S j and L 4 + j back to the pair (2j, 2j+1)
        const int sw = (f >> j) & 1u;
        const float a = U[j], b = U[4 + j];
        w[2 * j] = sw ? b : a;
        w[2 * j + 1] = sw ? a : b;
    }
}

/** The 8 indices of stage s for (row r, group g), slot t = 0..7, at qb = p->qbits[s] bits (the
 *  kernel passes it as a constant): one 4-, 8- or 16-byte load, one byte permute a slot. */
KVQ_PQ_HD static inline void kvq_pql_qidx8(const kvq_pqx *p, int s, int qb, int64_t r, int64_t g, uint32_t *c) {
#ifdef __CUDA_ARCH__
    const int64_t o = r * p->groups + g;
    if (qb == 16) {
        const uint4 u = __ldg((const uint4 *)p->idx[s] + o);
        const uint32_t a[4] = {u.x, u.y, u.z, u.w};
        KVQ_PQL_UNROLL
        for (int t = 0; t < 8; t++) c[t] = __byte_perm(a[t >> 1], 0, t & 1 ? 0x4432 : 0x4410);
    } else if (qb == 8) {
        const uint2 u = __ldg((const uint2 *)p->idx[s] + o);
        KVQ_PQL_UNROLL
        for (int t = 0; t < 8; t++) c[t] = __byte_perm(t < 4 ? u.x : u.y, 0, 0x4440 | (t & 3));
    } else {
        const uint32_t u = __ldg((const uint32_t *)p->idx[s] + o);
        KVQ_PQL_UNROLL
        for (int t = 0; t < 8; t++) c[t] = (u >> (4 * t)) & 15u;
    }
#else
    (void)qb;
    for (int t = 0; t < 8; t++) c[t] = kvq_qetx_idx(p, s, r, g, t);
#endif
}

/** The 12-bit switch field of block 8g + i of row r (two aligned 32-bit loads on the device: a
 *  group's 12 bytes start 4-aligned and the array has 8 bytes of padding). */
KVQ_PQ_HD static inline uint32_t kvq_pql_field(const kvq_pqx *p, int64_t r, int64_t g, int i) {
#ifdef __CUDA_ARCH__
    const uint32_t *w = (const uint32_t *)(p->sw + (r * p->groups + g) * KVQ_QETX_SW_BYTES) + ((12 * i) >> 5);
    return __funnelshift_r(__ldg(w), __ldg(w + 1), (12 * i) & 31) & 0xfffu;
#else
    return kvq_qetx_field(p, r, 8 * g + i);
#endif
}

/** QET, expanded: lane i (0..7) of row r's partial for nb <= 8 tokens. E[s]: stage s's expanded
 *  table (kvq_pql_qexp's order); q0, q1: p->qbits[0] and, with two stages, p->qbits[1], else 0. Blocks b = 8g + i, g = 0..G−1 in order: v_t = E_0[c_0] (+ E_1[c_1],
 *  one rounding: the decoder's value), w = unswap(v), then acc[tk] = fma(w[q], x_tk[8b + q],
 *  acc[tk]) for q = 0..7. x: rows of ldx floats, 16-byte aligned (ldx a multiple of 4). */
KVQ_PQ_HD static inline void kvq_pql_qetx(const kvq_pqx *p, const float *const *E, const float *x, int64_t ldx, int nb,
                                          int q0, int q1, int64_t r, int i, float *acc) {
    const int64_t G = p->groups;
    const uint32_t k0 = (uint32_t)p->k[0], k1 = q1 ? (uint32_t)p->k[1] : 0;
    const float *e0 = E[0] + i, *e1 = q1 ? E[1] + i : NULL;
    KVQ_PQL_UNROLL
    for (int t = 0; t < 8; t++)
        if (t < nb) acc[t] = 0.0f;
    for (int64_t g = 0; g < G; g++) {
        uint32_t c0[8], c1[8];
        float v[8], w[8];
        const uint32_t f = kvq_pql_field(p, r, g, i);
        // group g's table, coordinate i: value (c, t) at e + c·64 + t·8 (t·8: an immediate offset)
        // e0, e1: group g's tables at coordinate i (running pointers): value (c, t) at c·64 + t·8
        kvq_pql_qidx8(p, 0, q0, r, g, c0);
        KVQ_PQL_UNROLL
        for (int t = 0; t < 8; t++) v[t] = KVQ_PQL_LD(e0 + (uint64_t)c0[t] * 64 + t * 8);
        e0 += 64 * (uint64_t)k0;
        if (q1) {
            kvq_pql_qidx8(p, 1, q1, r, g, c1);
            KVQ_PQL_UNROLL
            for (int t = 0; t < 8; t++) v[t] = KVQ_PQL_ADD(v[t], KVQ_PQL_LD(e1 + (uint64_t)c1[t] * 64 + t * 8));
            e1 += 64 * (uint64_t)k1;
        }
        kvq_pql_unswap(f, v, w);
        const float *xb = x + 8 * (8 * g + i);
        KVQ_PQL_UNROLL
        for (int tk = 0; tk < 8; tk++) {
            if (tk >= nb) break;
#ifdef __CUDA_ARCH__
            const float4 a = __ldg((const float4 *)(xb + tk * ldx)), b = __ldg((const float4 *)(xb + tk * ldx) + 1);
            const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#else
            const float *xs = xb + tk * ldx;
#endif
            KVQ_PQL_UNROLL
            for (int q = 0; q < 8; q++) acc[tk] = fmaf(w[q], xs[q], acc[tk]);
        }
    }
}

/** QET, expanded: a row's value from its 8 lanes' partials as the kernel's butterfly (xor 4, 2, 1)
 *  leaves it in every lane. v is overwritten. */
KVQ_PQ_HD static inline float kvq_pql_qetx_combine(float *v) {
    for (int o = 4; o > 0; o >>= 1) {
        float n[8];
        for (int l = 0; l < 8; l++) n[l] = v[l] + v[l ^ o];
        for (int l = 0; l < 8; l++) v[l] = n[l];
    }
    return v[0];
}

// ---- QET from shared-memory tables (KVQ_CUDA_QET=smem; 2026-11-27, session 14, helper i12s)
// A thread block owns one column group g (its codebooks staged once in shared memory as the
// stored 16-bit words) across many rows; a thread takes one (row r, group g) partial at a time,
// blocks b = 8g + i, i = 0..7 in order; the row's G partials are added afterwards in a fixed order.

/** Shared-table position (in 16-bit words) of entry (centroid c, slot t): 8 words a centroid,
 *  the 8 slots of c side by side, slot t at quad t xor (c mod 8) (so the threads' random
 *  centroids of one slot spread over the 8 16-byte bank quads). */
KVQ_PQ_HD static inline int kvq_pql_qets_at(int c, int t) { return (c * 8 + (t ^ (c & 7))) * 8; }

/** The stored 16-bit word ol = 8c + q of slot (stage s, group g, slot t): slot t of group g is
 *  subspace j = g + t·G, a run of 8·k_s words in the blob (CQO: codes of cb_bits <= 16 read from
 *  two aligned words, as the staging loop does; bf16 (p->cb_type bf16, a constant in the kernel):
 *  its bits). */
KVQ_PQ_HD static inline uint16_t kvq_pql_qets_word(const kvq_pqx *p, int bf16, int s, int64_t g, int t, int ol) {
    const int64_t o0 = (g + t * p->groups) * 8 * p->k[s];
    if (bf16) return KVQ_PQL_LD((const uint16_t *)p->cb[s] + o0 + ol);
    const uint32_t cb = (uint32_t)p->cb_bits;
    const uint64_t p0 = (uint64_t)o0 * cb;
    const uint32_t pos = (uint32_t)(p0 & 31) + (uint32_t)ol * cb; // < 32 + 8·k·16 bits
    const uint32_t *cw = (const uint32_t *)((const uint8_t *)p->cb[s] + 8 * p->m) + (p0 >> 5) + (pos >> 5);
#ifdef __CUDA_ARCH__
    const uint32_t v = __funnelshift_r(__ldg(cw), __ldg(cw + 1), pos & 31);
#else
    const uint32_t v = (uint32_t)((((uint64_t)cw[1] << 32) | cw[0]) >> (pos & 31));
#endif
    return (uint16_t)(v & ((1u << cb) - 1u));
}

/** The decoder's value from a pair of stored words wd (word 2h in the low half): the high half if
 *  hi. CQO (bf16 = 0): mn + (float)code·st, each rounded (kvq_qetx_cb); bf16: its bits << 16. */
KVQ_PQ_HD static inline float kvq_pql_qets_val(int bf16, uint32_t wd, int hi, float mn, float st) {
    union { uint32_t u; float f; } v;
    if (bf16) {
        v.u = hi ? wd & 0xffff0000u : wd << 16;
        return v.f;
    }
    return KVQ_PQL_ADD(mn, KVQ_PQL_MUL((float)(hi ? wd >> 16 : wd & 0xffffu), st));
}

/** One block's term of a partial: w = unswap(f, v) (v: the block's 8 leaf values, the decoder's),
 *  then acc[tk] = fma(w[q], xb[tk·ldx + q], acc[tk]) for tk < nb, q = 0..7. */
KVQ_PQ_HD static inline void kvq_pql_qets_blk(uint32_t f, const float *v, const float *xb, int ldx, int nb, float *acc) {
    float w[8];
    kvq_pql_unswap(f, v, w);
    KVQ_PQL_UNROLL
    for (int tk = 0; tk < 8; tk++) {
        if (tk >= nb) break;
        KVQ_PQL_UNROLL
        for (int q = 0; q < 8; q++) acc[tk] = fmaf(w[q], xb[tk * ldx + q], acc[tk]);
    }
}

/** QET, shared-memory kernel: the partial of (row r, group g) for nb <= 8 tokens, from 0:
 *  blocks i = 0..7, v_t = c_1 (+ c_2, one rounding) of slot (g, t) at coordinate i, then
 *  kvq_pql_qets_blk. The host's form (values from kvq_pql_qcb); the device reads the same
 *  values from its shared tables (kernels/cuda/pqx.cu qetx_rows_s) in the same order. */
KVQ_PQ_HD static inline void kvq_pql_qets(const kvq_pqx *p, const float *x, int64_t ldx, int nb, int64_t r, int64_t g,
                                          float *acc) {
    const int64_t G = p->groups;
    uint32_t c0[8], c1[8];
    for (int t = 0; t < nb; t++) acc[t] = 0.0f;
    kvq_pql_qidx8(p, 0, p->qbits[0], r, g, c0);
    if (p->stages > 1) kvq_pql_qidx8(p, 1, p->qbits[1], r, g, c1);
    for (int i = 0; i < 8; i++) {
        float v[8];
        for (int t = 0; t < 8; t++) {
            v[t] = kvq_pql_qcb(p, 0, g + t * G, c0[t], i);
            if (p->stages > 1) v[t] = KVQ_PQL_ADD(v[t], kvq_pql_qcb(p, 1, g + t * G, c1[t], i));
        }
        kvq_pql_qets_blk(kvq_pql_field(p, r, g, i), v, x + 64 * g + 8 * i, (int)ldx, nb, acc);
    }
}

// ---- QET from shared-memory tables, second form (KVQ_CUDA_QET=smem2; 2026-11-27, session 15, helper 43)
// The same tables, partials and sums as the smem kernel, bit for bit; what changes is how a CQO code
// becomes the decoder's value: (float)code by a byte permute (F = 2^23 + code: the code in the low
// mantissa bits of 0x4B000000) and fl(code·step) as one fused multiply-add fma(F, step, −2^23·step):
// F·step − 2^23·step is code·step exactly, rounded once, as the decoder's product. No I2F (an
// eighth of the FP32 rate on sm_90), the same number of instructions.

/** Whether a CQO step lets kvq_pql_qets2_val give the decoder's bits: finite and |step| < 2^100
 *  (so that −2^23·step is exact and finite; an infinite step would give inf − inf). */
KVQ_PQ_HD static inline int kvq_pql_qets2_step_ok(float st) { return st == st && st < 0x1p100f && st > -0x1p100f; }

/** kvq_pql_qets_val's CQO value from the same word pair, without an int→float conversion:
 *  mn + fma(F, st, nst), F = 2^23 + code, nst = −2^23·st (exact). Equal to kvq_pql_qets_val bit for
 *  bit where kvq_pql_qets2_step_ok(st) (a zero product may carry the other sign, which no partial
 *  can show: a partial starts at +0 and a sum that is exactly zero is +0). */
KVQ_PQ_HD static inline float kvq_pql_qets2_val(uint32_t wd, int hi, float mn, float st, float nst) {
    union { uint32_t u; float f; } F;
#ifdef __CUDA_ARCH__
    F.u = __byte_perm(wd, 0x4B000000u, hi ? 0x7632 : 0x7610);
    return __fadd_rn(mn, __fmaf_rn(F.f, st, nst));
#else
    F.u = 0x4B000000u | (hi ? wd >> 16 : wd & 0xffffu);
    return mn + fmaf(F.f, st, nst);
#endif
}

#define KVQ_PQL_STAGE 8 // kvq_pql_qets2_stage: word pairs a thread loads before it stores them

/** smem2's staging: thread tid of nthr (a multiple of 32) writes its share of stage s's 8 slots of
 *  group g into T (kvq_pql_qets_at positions; the words kvq_pql_qets_word reads), two words (ol,
 *  ol + 1; ol even) at a time, KVQ_PQL_STAGE pairs loaded before any is stored: pair e of the 4·n
 *  (n = 8·k_s words a slot) is slot 2e / n, words 2e mod n. CQO (bf16 = 0; cb_bits <= 16): the two
 *  codes lie in one 64-bit window of two aligned words ((pos mod 32) + 2·cb <= 63) and go to T as one
 *  32-bit word (the pair is adjacent there); bf16: one 32-bit load and store. A thread's pair
 *  advances by nthr (its word by 2·nthr, a multiple of 64: its bit position by 2·nthr·cb, its table
 *  position by 16·nthr); only when it passes into the next slot (at most 8 times) are its run's start
 *  (64-bit arithmetic) and positions worked out again. Threads of one T write disjoint words. */
KVQ_PQ_HD static inline void kvq_pql_qets2_stage(const kvq_pqx *p, int bf16, int s, int64_t g, int tid, int nthr, uint16_t *T) {
    const int n = 8 * (int)p->k[s], step = 2 * nthr;
    const uint32_t cb = bf16 ? 16u : (uint32_t)p->cb_bits, mask = (1u << cb) - 1u;
    const uint32_t *cw0 = (const uint32_t *)((const uint8_t *)p->cb[s] + 8 * p->m); // CQO: the code stream
    const uint16_t *hw0 = (const uint16_t *)p->cb[s];                               // bf16: the words
    const uint32_t *cw = cw0;
    const uint16_t *hw = hw0;
    uint32_t pos = 0; // CQO: bit of word ol from cw
    int t = 0, ol = 2 * tid, at = 0; // at: table position of word ol (even)
    while (ol >= n && t < 8) ol -= n, t++;
    int moved = 1;
    while (t < 8) {
        uint32_t lo[KVQ_PQL_STAGE], hi[KVQ_PQL_STAGE], sh[KVQ_PQL_STAGE];
        int to[KVQ_PQL_STAGE];
        KVQ_PQL_UNROLL
        for (int u = 0; u < KVQ_PQL_STAGE; u++) {
            to[u] = -1;
#ifndef __CUDA_ARCH__
            lo[u] = hi[u] = sh[u] = 0u; // (read only where to[u] >= 0; set for the host compiler's warnings)
#endif
            if (t >= 8) continue;
            if (moved) { // slot t's run: words (g + t·G)·n.., bits ·cb
                const uint64_t o0 = (uint64_t)(g + (int64_t)t * p->groups) * (uint64_t)n;
                if (bf16) hw = hw0 + o0;
                else cw = cw0 + ((o0 * cb) >> 5), pos = ((uint32_t)(o0 * cb) & 31u) + (uint32_t)ol * cb;
                at = kvq_pql_qets_at(ol >> 3, t) + (ol & 7);
                moved = 0;
            }
            if (bf16) lo[u] = KVQ_PQL_LD((const uint32_t *)(hw + ol)); // run start and ol even: 4-byte aligned
            else lo[u] = KVQ_PQL_LD(cw + (pos >> 5)), hi[u] = KVQ_PQL_LD(cw + (pos >> 5) + 1), sh[u] = pos & 31u;
            to[u] = at;
            ol += step, pos += (uint32_t)step * cb, at += 8 * step;
            while (ol >= n && t < 8) ol -= n, t++, moved = 1;
        }
        KVQ_PQL_UNROLL
        for (int u = 0; u < KVQ_PQL_STAGE; u++) {
            if (to[u] < 0) continue;
            uint32_t v = lo[u];
            if (!bf16) {
                const uint64_t w = (uint64_t)hi[u] << 32 | lo[u];
                v = ((uint32_t)(w >> sh[u]) & mask) | ((uint32_t)(w >> (sh[u] + cb)) & mask) << 16;
            }
#ifdef __CUDA_ARCH__
            *(uint32_t *)(T + to[u]) = v;
#else
            T[to[u]] = (uint16_t)v, T[to[u] + 1] = (uint16_t)(v >> 16);
#endif
        }
    }
}

/** QET, smem2: the partial of (row r, group g) as qetx_rows_s2 computes it: kvq_pql_qets's order,
 *  each value read as the staged word pair (kvq_pql_qets_word) and decoded by kvq_pql_qets2_val
 *  (CQO) or kvq_pql_qets_val (bf16). */
KVQ_PQ_HD static inline void kvq_pql_qets2(const kvq_pqx *p, const float *x, int64_t ldx, int nb, int64_t r, int64_t g,
                                           float *acc) {
    const int64_t G = p->groups;
    const int bf = p->cb_type == KVQ_PQX_CB_BF16;
    uint32_t c[2][8];
    for (int t = 0; t < nb; t++) acc[t] = 0.0f;
    for (int s = 0; s < p->stages; s++) kvq_pql_qidx8(p, s, p->qbits[s], r, g, c[s]);
    for (int i = 0; i < 8; i++) {
        float v[8];
        for (int t = 0; t < 8; t++)
            for (int s = 0; s < p->stages; s++) {
                const int ol = 8 * (int)c[s][t] + (i & ~1);
                const uint32_t wd = kvq_pql_qets_word(p, bf, s, g, t, ol) | (uint32_t)kvq_pql_qets_word(p, bf, s, g, t, ol + 1) << 16;
                float val;
                if (bf) val = kvq_pql_qets_val(1, wd, i & 1, 0.0f, 0.0f);
                else {
                    const float *ms = (const float *)p->cb[s] + 2 * (g + t * G);
                    val = kvq_pql_qets2_val(wd, i & 1, KVQ_PQL_LD(ms), KVQ_PQL_LD(ms + 1), KVQ_PQL_MUL(-0x1p23f, KVQ_PQL_LD(ms + 1)));
                }
                v[t] = s ? KVQ_PQL_ADD(v[t], val) : val;
            }
        kvq_pql_qets_blk(kvq_pql_field(p, r, g, i), v, x + 64 * g + 8 * i, (int)ldx, nb, acc);
    }
}

/** QET, shared-memory kernel: a row's value from its G partials, P_g at P[g·stride]: left to
 *  right, ((P_0 + P_1) + P_2) + … (qetx_sum). */
KVQ_PQ_HD static inline float kvq_pql_qets_sum(const float *P, int64_t G, int64_t stride) {
    float s = P[0];
    for (int64_t g = 1; g < G; g++) s = KVQ_PQL_ADD(s, P[g * stride]);
    return s;
}

/** QET: a row's value from its 32 lanes' partials as the kernel's butterfly (xor 16, 8, 4, 2, 1)
 *  leaves it in lane 0. v is overwritten. */
KVQ_PQ_HD static inline float kvq_pql_qet_combine(float *v) {
    for (int o = 16; o > 0; o >>= 1) {
        float n[32];
        for (int l = 0; l < 32; l++) n[l] = v[l] + v[l ^ o];
        for (int l = 0; l < 32; l++) v[l] = n[l];
    }
    return v[0];
}

#endif
