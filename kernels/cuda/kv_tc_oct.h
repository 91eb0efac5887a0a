// The fragment and table arithmetic of the tensor-core kernel for OCTOPUS keys
// (kernels/cuda/kv_attn_oct.cu), shared with the host so that tests/test_cuda_kv.c
// (test_oct_tc_emulated) runs the same index code on the CPU against plain sums (docs/KV.md
// "OCTOPUS keys on the tensor cores"). Plain C (plus __host__ __device__ under nvcc).
//
// A position's key in the rotated frame is û = (ρ̂_i·n̂_i) over its triplets i (dims 3i..3i+2;
// head_dim 128: 43 triplets, the last one's third dim the padding dim 128). Lane t of a quad
// takes the code words of the GPU layout's lanes 2t and 2t+1 — triplets 12t..12t+11, dims
// 36t..36t+35 — so the score is an m16n8k16 product over 9 k-steps (144 dims, q_rot zero past
// 128) with A built in registers: pair jj (0..17) of the lane holds dims (36t + 2jj, + 1),
// k-step ks its pairs 2ks (a0/a1) and 2ks + 1 (a2/a3). Two triplets a = 2m, b = 2m + 1 give the
// pairs 3m..3m+2 = (x_a, y_a), (z_a, x_b), (y_b, z_b) from a shared-memory table of fp16
// directions with two layouts per entry: E = (x, y | z, 0) for a, O = (0, x | y, z) for b —
// (z_a·ρ̂_a, 0) + (0, x_b·ρ̂_b) is one HFMA2, no byte permute.
#ifndef KVQ_CUDA_KV_TC_OCT_H
#define KVQ_CUDA_KV_TC_OCT_H

#include "kernels/cuda/kv_tc.h"

/** 32-bit code words of one GPU-layout lane (kvq_gkv_oct_words). */
#define KVQ_TC_OCT_NW(bits) ((6 * (3 * (bits) + 1) + 31) / 32)
/** k-steps of the scores (144 dims) and a lane's fp16 pairs per position. */
#define KVQ_TC_OCT_KSTEPS 9
#define KVQ_TC_OCT_PAIRS 18

/** Bits [p, p + n) of the words w[0..nw) (LSB first) as bits [s, s + n) of the result, OR base (whose
 *  bits [s, s + n) are 0: a table's shared-memory address aligned past the offsets; n + s ≤ 32): on the
 *  device one shift or funnel shift and one lop3 (kvq_tc_andor). */
KVQ_TC_FN uint32_t kvq_tc_oct_field(const uint32_t *w, int nw, int p, int n, int s, uint32_t base) {
    const int q = p - s, i = q < 0 ? 0 : q >> 5, r = q & 31;
    uint32_t v;
    if (q < 0) v = w[0] << -q;
    else if (p + n > 32 * (i + 1) && i + 1 < nw) { // the field spans words i and i + 1
#if defined(__CUDA_ARCH__)
        v = __funnelshift_r(w[i], w[i + 1], r);
#else
        v = (uint32_t)(((uint64_t)w[i + 1] << 32 | w[i]) >> r);
#endif
    } else v = w[i] >> r;
    return kvq_tc_andor(1, v, ((1u << n) - 1u) << s, base);
}
/** Code j (0..5) of a GPU-layout lane's words lw (code j at bit j·(3b+1): the direction index
 *  a·2^bdir + b in 2(b+1) bits, then the ρ index in b−1): the byte offset of its direction's table
 *  entry (16 bytes an entry) OR dbase (*dir), of its (ρ̂, ρ̂) pair (4 bytes) OR rbase (*rho). */
KVQ_TC_FN void kvq_tc_oct_offs(int bits, const uint32_t *lw, int j, uint32_t dbase, uint32_t rbase, uint32_t *dir, uint32_t *rho) {
    const int nw = KVQ_TC_OCT_NW(bits), p = j * (3 * bits + 1), nd = 2 * bits + 2;
    *dir = kvq_tc_oct_field(lw, nw, p, nd, 4, dbase), *rho = kvq_tc_oct_field(lw, nw, p + nd, bits - 1, 2, rbase);
}
/** Triplet i (0..11) of lane tig's 12: its GPU-layout lane is 2·tig + i/6, its code i % 6, its
 *  triplet index 12·tig + i (dims 36·tig + 3i ..). */
KVQ_TC_FN int kvq_tc_oct_lane(int tig, int i) { return 2 * tig + i / 6; }
/** The dim of half hi (0 low, 1 high) of lane tig's pair jj (0..17); ≥ 128: padding (q_rot 0). */
KVQ_TC_FN int kvq_tc_oct_kdim(int tig, int jj, int hi) { return 36 * tig + 2 * jj + hi; }
/** The 4 words (16 bytes) of the table entry of direction (x, y, z) (fp16 bits): E = words 0-1
 *  (x, y | z, 0), O = words 2-3 (0, x | y, z). */
KVQ_TC_FN void kvq_tc_oct_entry(uint16_t x, uint16_t y, uint16_t z, uint32_t e[4]) {
    e[0] = x | (uint32_t)y << 16, e[1] = z, e[2] = (uint32_t)x << 16, e[3] = y | (uint32_t)z << 16;
}


/* ---- :qjl: the sign plane's word of lane tig (dims 32·tig .. + 31 of a position; the one-bit plane's
 * order, dim 16h + 4n + k of the word's half h at bit 16h + 4k + n) as 8 more k-steps: pair j (0..15)
 * of the word is bits j and 16 + j as ±1 fp16 values (σ = 1: +1) against R′q_rot in B. */
/** The dim of half hi of lane tig's sign pair j (0..15). */
KVQ_TC_FN int kvq_tc_oct_sdim(int tig, int j, int hi) { return 32 * tig + 16 * hi + 4 * (j & 3) + (j >> 2); }
/** The ±1 fp16 pair of sign pair j of the word w: bits j and 16 + j to the sign bits of 0xBC00 (−1),
 *  flipped (σ = 1 → +1): one shift and one lop3. */
KVQ_TC_FN uint32_t kvq_tc_oct_sgn(uint32_t w, int j) { return ((w << (15 - j)) & 0x80008000u) ^ 0xBC00BC00u; }

#endif
