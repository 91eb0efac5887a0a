// The bit and fragment arithmetic of the tensor-core decode-attention kernels for int:2 and
// int:4 (kernels/cuda/kv_attn_tc.cu), shared with the host so that tests/test_cuda_kv.c can
// run the same integer code on the CPU and check it against plain decoding (docs/KV.md
// "Tensor-core kernels"). Plain C (plus __host__ __device__ under nvcc); no CUDA types.
//
// A 32-bit word of one two-bit plane holds 16 dims of a row (dim i at bits 2i, 2i+1, the
// GPU layout of kv_attn.h). kvq_tc_dq turns the word(s) of the 16 dims (4 bits: the low and
// the high plane's words) into 8 fp16 pairs, each the raw bits of (1024 + m·c_lo, 1024 + m·c_hi)
// for the codes of dims (kvq_tc_dim(j), kvq_tc_dim(j) + 8), m = 2^kvq_tc_shift(j), by masks and
// 0x6400 (fp16 1024) in the exponent: no per-code conversion. One fp16 FMA by (1/m, −1024/m − qmax)
// then gives c − qmax exactly (every value involved is an integer below 2048).
#ifndef KVQ_CUDA_KV_TC_H
#define KVQ_CUDA_KV_TC_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define KVQ_TC_FN static __host__ __device__ __forceinline__
#else
#define KVQ_TC_FN static inline
#endif

/** (a & m) | x. lean (session 14, helper i20d): on the device one lop3 (inline PTX), because
 *  nvcc, given the mask and x = 0x64006400 as two immediates, emits an AND and an OR (LOP3 takes
 *  one immediate): 2 instructions a pair where one will do. The same bits either way; on the host
 *  plain C. */
KVQ_TC_FN uint32_t kvq_tc_andor(int lean, uint32_t a, uint32_t m, uint32_t x) {
#if defined(__CUDA_ARCH__)
    if (lean) {
        uint32_t r;
        asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(m), "r"(x)); // 0xEA: (a & b) | c
        return r;
    }
#else
    (void)lean;
#endif
    return (a & m) | x;
}
/** (a & m) | (b & ~m), the bit select that merges two planes: on the device one lop3 (inline PTX; nvcc
 *  emits an AND and an AND-OR for the C form; session 20, helper i20v), on the host plain C. */
KVQ_TC_FN uint32_t kvq_tc_sel(uint32_t a, uint32_t b, uint32_t m) {
#if defined(__CUDA_ARCH__)
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(r) : "r"(a), "r"(b), "r"(m)); // 0xE4: (a & c) | (b & ~c)
    return r;
#else
    return (a & m) | (b & ~m);
#endif
}
/** The 8 raw fp16 pairs of a word's 16 dims: bits 2 (lo only) or 4 (lo = the low plane's
 *  word, hi = the high plane's). 4 bits: the planes are first merged into nibbles, e = the
 *  even dims (nibble n = dim 2n), o = the odd dims. lean: the masks as single lop3s
 *  (kvq_tc_andor) and the merges as bit selects (kvq_tc_sel, session 20), the same result. */
KVQ_TC_FN void kvq_tc_dq_as(int lean, int bits, uint32_t lo, uint32_t hi, uint32_t h[8]) {
    const uint32_t X = 0x64006400u;
    if (bits == 4) {
        const uint32_t e = lean ? kvq_tc_sel(lo, hi << 2, 0x33333333u) : (lo & 0x33333333u) | ((hi << 2) & 0xCCCCCCCCu);
        const uint32_t o = lean ? kvq_tc_sel(lo >> 2, hi, 0x33333333u) : ((lo >> 2) & 0x33333333u) | (hi & 0xCCCCCCCCu);
        const uint32_t e8 = e >> 8, o8 = o >> 8;
        h[0] = kvq_tc_andor(lean, e, 0x000F000Fu, X), h[1] = kvq_tc_andor(lean, e, 0x00F000F0u, X);
        h[2] = kvq_tc_andor(lean, e8, 0x000F000Fu, X), h[3] = kvq_tc_andor(lean, e8, 0x00F000F0u, X);
        h[4] = kvq_tc_andor(lean, o, 0x000F000Fu, X), h[5] = kvq_tc_andor(lean, o, 0x00F000F0u, X);
        h[6] = kvq_tc_andor(lean, o8, 0x000F000Fu, X), h[7] = kvq_tc_andor(lean, o8, 0x00F000F0u, X);
    } else {
        const uint32_t w8 = lo >> 8;
        (void)hi;
        h[0] = kvq_tc_andor(lean, lo, 0x00030003u, X), h[1] = kvq_tc_andor(lean, lo, 0x000C000Cu, X);
        h[2] = kvq_tc_andor(lean, lo, 0x00300030u, X), h[3] = kvq_tc_andor(lean, lo, 0x00C000C0u, X);
        h[4] = kvq_tc_andor(lean, w8, 0x00030003u, X), h[5] = kvq_tc_andor(lean, w8, 0x000C000Cu, X);
        h[6] = kvq_tc_andor(lean, w8, 0x00300030u, X), h[7] = kvq_tc_andor(lean, w8, 0x00C000C0u, X);
    }
}
KVQ_TC_FN void kvq_tc_dq(int bits, uint32_t lo, uint32_t hi, uint32_t h[8]) { kvq_tc_dq_as(0, bits, lo, hi, h); }
/** The dim (0..7 in the word's 16) of pair j's low half; the high half is that + 8. */
KVQ_TC_FN int kvq_tc_dim(int bits, int j) { return bits == 4 ? ((j & 3) << 1) | (j >> 2) : j; }
/** log2 of pair j's multiplier m (the code sits m times above the fp16 1024). */
KVQ_TC_FN int kvq_tc_shift(int bits, int j) { return bits == 4 ? 4 * (j & 1) : 2 * (j & 3); }

/** Scores (keys as the mma's A operand, 16 positions × 16 dims a k-step; q as B, 8 columns
 *  of which the 4 query heads are 0..3): lane tig = lane & 3 of a quad holds 32 dims of its
 *  positions, dims 32·tig.. (8 bytes of each plane); its pair jj = 0..15 (word jj >> 3) covers
 *  the dims returned here (low half; + 8 for the high half); k-step ks uses pairs 2ks
 *  (a0/a1, b0) and 2ks + 1 (a2/a3, b1). */
KVQ_TC_FN int kvq_tc_kdim(int bits, int tig, int jj) { return 32 * tig + 16 * (jj >> 3) + kvq_tc_dim(bits, jj & 7); }
/** Σ p·V (values transposed as the A operand: 16 dims × 16 positions; p as B): the quad
 *  g = lane >> 2 holds dims 16g.. (4 bytes of each plane) of positions 2tig, 2tig + 1, 2tig + 8,
 *  2tig + 9 of the tile; m-tile j's rows g and g + 8 are these dims. */
KVQ_TC_FN int kvq_tc_vdim(int bits, int g, int j, int hi) { return 16 * g + kvq_tc_dim(bits, j) + 8 * hi; }

/* ---- int keys on integer tensor cores (KVQ_CUDA_KV_TC_Q8; session 20, helper i20v): the scores by
 * mma.m16n8k32 (u8 codes × s8 q, s32 accumulators). A lane's A fragment holds bytes, 4 a register,
 * unpacked from the planes by masks alone (no fp16 pairing, no fix-up FMA): registers 0, 1 hold codes c,
 * registers 2, 3 codes times M = 2^bits (the masks leave them in place, saving a shift each), so a
 * k-step takes registers (0, 1) or (2, 3) and its products go to one of two accumulators: the lane's
 * score times M is M·(low chain) + (high chain), one LEA. q is int8 per query head (max |q| / 127,
 * round to nearest; kvq_tc_q8_round) and the zero point folds in int32: Σ (c − qmax)·q8 = Σ c·q8 −
 * qmax·Σ q8 (the low chain starts at −qmax·Σ q8). The k order inside a k-step is ours to choose as
 * long as A and B agree (kvq_tc_q8_kdim). */

/** The 4 u8 registers of a word's 16 dims (bits 2: lo; 4: lo and hi the two planes' words): byte i of
 *  register j is the code of dim 4i + kvq_tc_u8_dim(bits, j), times 2^bits for j = 2, 3. 4 bits: the
 *  planes merged into nibbles (e: even dims, o: odd, as kvq_tc_dq; one shift and one lop3 each), then
 *  the low nibbles (j = 0: e, 1: o) and the high nibbles in place (2: e, 3: o); 2 bits: the crumbs 0
 *  and 1 of each byte of lo (j = 0, 2) and of lo >> 4 (j = 1, 3), in place. */
KVQ_TC_FN void kvq_tc_u8(int bits, uint32_t lo, uint32_t hi, uint32_t a[4]) {
    if (bits == 4) {
        const uint32_t e = kvq_tc_sel(lo, hi << 2, 0x33333333u), o = kvq_tc_sel(lo >> 2, hi, 0x33333333u);
        a[0] = e & 0x0F0F0F0Fu, a[1] = o & 0x0F0F0F0Fu, a[2] = e & 0xF0F0F0F0u, a[3] = o & 0xF0F0F0F0u;
        return;
    }
    (void)hi;
    const uint32_t l4 = lo >> 4;
    a[0] = lo & 0x03030303u, a[1] = l4 & 0x03030303u, a[2] = lo & 0x0C0C0C0Cu, a[3] = l4 & 0x0C0C0C0Cu;
}
/** The dim (0..3, + 4i for byte i) of kvq_tc_u8's register j. */
KVQ_TC_FN int kvq_tc_u8_dim(int bits, int j) { return bits == 4 ? j : 2 * (j & 1) + (j >> 1); }
/** The dim of byte i (0..3) of lane tig's B register r (0: b0, k = 4·tig + i; 1: b1, k = 16 + 4·tig + i)
 *  in k-step ks (0..3) of the scores: k-step ks = 2u + v takes word u (dims 32·tig + 16u ..) of the
 *  lane's rows, kvq_tc_u8's registers 2v (a0, a1: rows g, g + 8) and 2v + 1 (a2, a3) — v = 0 the codes,
 *  v = 1 the codes times 2^bits (the high chain). */
KVQ_TC_FN int kvq_tc_q8_kdim(int bits, int tig, int ks, int r, int i) {
    return 32 * tig + 16 * (ks >> 1) + 4 * i + kvq_tc_u8_dim(bits, 2 * (ks & 1) + r);
}
/** q's int8 value at scale inv = 1 / s (s = max |q| / 127 of its query head, 1 when q is all zero):
 *  round to nearest even, clamped to ±127 (the dp4a kernel's, kv_split.cuh). */
KVQ_TC_FN int kvq_tc_q8_round(float q, float inv) {
#if defined(__CUDA_ARCH__)
    const int v = __float2int_rn(q * inv);
#else
    const int v = (int)rintf(q * inv); /* ties to even in the default rounding mode, as cvt.rni */
#endif
    return v < -127 ? -127 : v > 127 ? 127 : v;
}

/* ---- TurboQuant and qturbo at 2 and 4 bits (session 14): each code is a centroid index, so a pair's
 * fp16 values come from the head's codebook (rounded to fp16 once per block) held in registers, by
 * byte permutes (kvq_tc_prmt) instead of kvq_tc_dq's masks; the pairs' dims differ from int's
 * (kvq_tc_tq_dim), the fragment arithmetic is the same. Every selector nibble whose byte is used
 * has its msb clear, so the result does not depend on prmt's sign-replication bit. */

/** The byte permute: __byte_perm on the device; on the host PTX prmt's generic form (selector
 *  nibble n: bits 0-2 pick byte n of {a, b}, bit 3 replicates its sign). */
KVQ_TC_FN uint32_t kvq_tc_prmt(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(a, b, s);
#else
    const uint64_t v = (uint64_t)b << 32 | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        const uint32_t n = (s >> (4 * i)) & 0xFu, x = (uint32_t)(v >> (8 * (n & 7))) & 0xFFu;
        r |= (n & 8 ? (x & 0x80u ? 0xFFu : 0u) : x) << (8 * i);
    }
    return r;
#endif
}
/** The registers of a 2^bits-entry fp16 codebook (cb16: the fp16 bits): 2 bits: tab[0] = entries
 *  (0, 1), tab[1] = (2, 3) as fp16 pairs; 4 bits: tab[i] (i < 4) the low bytes of entries 4i..4i+3,
 *  tab[4 + i] their high bytes. */
KVQ_TC_FN void kvq_tc_tq_table(int bits, const uint16_t *cb16, uint32_t tab[8]) {
    for (int i = 0; i < 8; i++) tab[i] = 0;
    if (bits == 2) {
        tab[0] = cb16[0] | (uint32_t)cb16[1] << 16, tab[1] = cb16[2] | (uint32_t)cb16[3] << 16;
        return;
    }
    for (int e = 0; e < 16; e++) {
        tab[e >> 2] |= (uint32_t)(cb16[e] & 0xFFu) << (8 * (e & 3));
        tab[4 + (e >> 2)] |= (uint32_t)(cb16[e] >> 8) << (8 * (e & 3));
    }
}
/** The dim (0..15 in the word's 16) of pair j's half hi (0 low, 1 high): 2 bits: pair 2k + u =
 *  dims (k + 8u, k + 8u + 4); 4 bits: pair 4u + 2v + w = dims (u + 8v + 4w, + 2) (u: even / odd
 *  dims, v: the nibbles 0-3 or 4-7, w: the word's bytes 0-1 or 2-3). */
KVQ_TC_FN int kvq_tc_tq_dim(int bits, int j, int hi) {
    return bits == 4 ? (j >> 2) + 8 * ((j >> 1) & 1) + 4 * (j & 1) + 2 * hi : (j >> 1) + 8 * (j & 1) + 4 * hi;
}
/** The 8 fp16 pairs (cb[c(kvq_tc_tq_dim(j, 0))], cb[c(kvq_tc_tq_dim(j, 1))]) of a word's 16 dims
 *  (bits 2: lo; 4: lo and hi the two planes' words). 2 bits: the codes of dims k, k+4, k+8, k+12
 *  into bytes (a shift and a mask), × 0x22 + 0x10 a byte = the selector nibbles (2c, 2c + 1) of
 *  entry c in tab[0..1]: one permute a pair. 4 bits: the planes merged into nibbles (e: even dims,
 *  o: odd, as kvq_tc_dq), the low bytes of 4 codes from entries 0-7 and 8-15 (two permutes,
 *  the second with the msb masked off) merged by each code's bit 3 (a third), likewise the high
 *  bytes; one permute interleaves them into two pairs. */
KVQ_TC_FN void kvq_tc_tq_dq(int bits, uint32_t lo, uint32_t hi, const uint32_t tab[8], uint32_t h[8]) {
    if (bits == 2) {
        (void)hi;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int k = 0; k < 4; k++) {
            const uint32_t sel = ((lo >> (2 * k)) & 0x03030303u) * 0x22u + 0x10101010u;
            h[2 * k] = kvq_tc_prmt(tab[0], tab[1], sel), h[2 * k + 1] = kvq_tc_prmt(tab[0], tab[1], sel >> 16);
        }
        return;
    }
    const uint32_t e = (lo & 0x33333333u) | ((hi << 2) & 0xCCCCCCCCu), o = ((lo >> 2) & 0x33333333u) | (hi & 0xCCCCCCCCu);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int u = 0; u < 2; u++) {
        const uint32_t n = u ? o : e, nm = n & 0x77777777u, S = ((n >> 1) & 0x44444444u) | 0x32103210u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int v = 0; v < 2; v++) {
            const uint32_t s = n >> (16 * v), sm = nm >> (16 * v), sl = S >> (16 * v);
            const uint32_t L = kvq_tc_prmt(kvq_tc_prmt(tab[0], tab[1], s), kvq_tc_prmt(tab[2], tab[3], sm), sl);
            const uint32_t H = kvq_tc_prmt(kvq_tc_prmt(tab[4], tab[5], s), kvq_tc_prmt(tab[6], tab[7], sm), sl);
            h[4 * u + 2 * v] = kvq_tc_prmt(L, H, 0x5140u), h[4 * u + 2 * v + 1] = kvq_tc_prmt(L, H, 0x7362u);
        }
    }
}
/** kvq_tc_kdim and kvq_tc_vdim for these pairs (both halves: hi). */
KVQ_TC_FN int kvq_tc_tq_kdim(int bits, int tig, int jj, int hi) { return 32 * tig + 16 * (jj >> 3) + kvq_tc_tq_dim(bits, jj & 7, hi); }
KVQ_TC_FN int kvq_tc_tq_vdim(int bits, int g, int j, int hi) { return 16 * g + kvq_tc_tq_dim(bits, j, hi); }

/* ---- turboquant-prod keys (KVQ_GKV_TPROD) and 3-bit TurboQuant codes (session 17, helper i20p): the
 * keys' (b−1)-bit centroid codes (1, 2 or 3 bits) and their one-bit QJL sign plane, and turboquant:3
 * values (turboquant-prod:3's). A one-bit plane holds dim 16j + 4n + k at bit 16j + 4k + n
 * (kvq_gkv_bit1_pos): a lane's 32-bit word of it covers 32 dims, the 16-bit half j its block j. */

/** The dim (0..15 in a 16-dim block) of one-bit pair p: bit p = 4k + n of each half is dim 4n + k;
 *  the pair's low half is block 0's, its high half block 1's (that dim + 16). */
KVQ_TC_FN int kvq_tc_b1_dim(int p) { return 4 * (p & 3) + (p >> 2); }
/** Pairs p = 8u .. 8u + 7 of a one-bit plane's word w (32 dims) as fp16 ±1 (+1 where the bit is set):
 *  the bits p and p + 16 shifted onto the halves' sign bits (15, 31), then (~x & 0x80008000) |
 *  0x3C003C00 — on the device one shift and one lop3 a pair (inline PTX: nvcc would emit a NOT and an
 *  AND-OR), exact. So 2σ − 1 directly: Σ (2σ − 1)·y needs no Σ y. */
KVQ_TC_FN uint32_t kvq_tc_sgnpair(uint32_t x) {
#if defined(__CUDA_ARCH__)
    uint32_t r;
    asm("lop3.b32 %0, %1, 0x80008000, %2, 0xAE;" : "=r"(r) : "r"(x), "r"(0x3C003C00u)); // 0xAE: (~a & b) | c
    return r;
#else
    return (~x & 0x80008000u) | 0x3C003C00u;
#endif
}
KVQ_TC_FN void kvq_tc_b1_pm(uint32_t w, int u, uint32_t h[8]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < 8; i++) h[i] = kvq_tc_sgnpair(w << (15 - (8 * u + i)));
}
/** The 4 registers of an 8-entry fp16 codebook (cb16): tab[0] the low bytes of entries 0-3, tab[1] of
 *  entries 4-7, tab[2] and tab[3] their high bytes. */
KVQ_TC_FN void kvq_tc_tq3_table(const uint16_t *cb16, uint32_t tab[4]) {
    for (int i = 0; i < 4; i++) tab[i] = 0;
    for (int e = 0; e < 8; e++) {
        tab[e >> 2] |= (uint32_t)(cb16[e] & 0xFFu) << (8 * (e & 3));
        tab[2 + (e >> 2)] |= (uint32_t)(cb16[e] >> 8) << (8 * (e & 3));
    }
}
/** The dim (0..15 in the 16) of 3-bit pair j's half hi: pair 4v + 2w + e = dims 8w + 2v + 4e (+ 1). */
KVQ_TC_FN int kvq_tc_tq3_dim(int j, int hi) { return 8 * ((j >> 1) & 1) + 2 * (j >> 2) + 4 * (j & 1) + hi; }
/** The 8 fp16 pairs (cb[c(kvq_tc_tq3_dim(j, 0))], cb[c(kvq_tc_tq3_dim(j, 1))]) of 16 dims of 3-bit codes
 *  stored as a two-bit plane's word lo (dim i at bits 2i: the codes' bits 0-1) and a one-bit plane's
 *  block h (bits 0-15: bit 2). For v = 0, 1 the codes of dims 4n + 2v, 4n + 2v + 1 become the nibbles
 *  2n, 2n + 1 of a word (the plane bits by masks, bit 2 spread from h by one multiply a nibble: bit n
 *  → 8n + 2, bit 4 + n → 8n + 6 by × Σ 2^(7i+2), no carries), each < 8; each 4 of them select the low
 *  bytes (one permute of tab[0..1]) and the high bytes (of tab[2..3]), which two permutes interleave
 *  into two pairs: 4 permutes a 4 codes. */
KVQ_TC_FN void kvq_tc_tq3_dq(uint32_t lo, uint32_t h, const uint32_t tab[4], uint32_t out[8]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int v = 0; v < 2; v++) {
        const uint32_t l = lo >> (4 * v), hb = h >> (8 * v);
        const uint32_t a = (l & 0x03030303u) | ((l << 2) & 0x30303030u);
        const uint32_t m = (((hb & 0x0Fu) * 0x810204u) & 0x04040404u) | (((hb & 0xF0u) * 0x810204u) & 0x40404040u);
        const uint32_t s = a | m;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (int w = 0; w < 2; w++) {
            const uint32_t sel = s >> (16 * w);
            const uint32_t L = kvq_tc_prmt(tab[0], tab[1], sel), H = kvq_tc_prmt(tab[2], tab[3], sel);
            out[4 * v + 2 * w] = kvq_tc_prmt(L, H, 0x5140u), out[4 * v + 2 * w + 1] = kvq_tc_prmt(L, H, 0x7362u);
        }
    }
}
/** turboquant-prod keys' centroid pairs (mb = b − 1 bits): the dim (of the lane's 32 from 32·tig) of
 *  pair jj's half hi — mb 1: one-bit pairs (kvq_tc_b1_dim), 2: TurboQuant's 2-bit pairs, 3: the 3-bit
 *  pairs above; the QJL signs: kvq_tc_tp_sdim. */
KVQ_TC_FN int kvq_tc_tp_kdim(int mb, int tig, int jj, int hi) {
    if (mb == 1) return 32 * tig + kvq_tc_b1_dim(jj) + 16 * hi;
    if (mb == 2) return kvq_tc_tq_kdim(2, tig, jj, hi);
    return 32 * tig + 16 * (jj >> 3) + kvq_tc_tq3_dim(jj & 7, hi);
}
KVQ_TC_FN int kvq_tc_tp_sdim(int tig, int jj, int hi) { return 32 * tig + kvq_tc_b1_dim(jj) + 16 * hi; }
/** TurboQuant values' pairs at 2, 3 or 4 bits: the dim of m-tile j's row half hi for the quad g. */
KVQ_TC_FN int kvq_tc_tqv_dim(int bits, int g, int j, int hi) { return bits == 3 ? 16 * g + kvq_tc_tq3_dim(j, hi) : kvq_tc_tq_vdim(bits, g, j, hi); }

/* ---- the pipelined kernels' stages (ST > 0 in kv_attn_tc.cu): a warp's ring of stages in shared
 * memory, one 16-position tile a stage, filled by 16-byte cp.async copies and read as load_tile
 * reads global memory. A stage: the keys' codes (16 rows of RB = 16·bits bytes), the values' codes
 * (the same), then int: the keys' 16 fp16 scales and the values' 16; KIVI: the values' (scale,
 * zero) of the 16 positions' 4 channel groups (16 bytes a position), then the key group's (scale,
 * zero) per channel (512 bytes, copied with a group's first tile). Code rows are XOR-swizzled in
 * 32-byte units within each 128-byte line (kvq_tc_swz) so that the fragment reads (keys 8 bytes a
 * lane, rows g and g + 8; values 4 bytes a lane, rows 2t + c) hit distinct banks. */

/** Bytes of one stage. */
KVQ_TC_FN int kvq_tc_stage_bytes(int kivi, int bits) { return 2 * 16 * 16 * bits + (kivi ? 256 + 512 : 64); }
/** The swizzled offset of byte o of a side's 16 code rows: 4 bits: line bits 0-1 into bits 5-6;
 *  2 bits: line bit 0 into bit 5 (a bijection within each 128-byte line; 16-byte pieces whole). */
KVQ_TC_FN int kvq_tc_swz(int bits, int o) { return o ^ ((o >> 2) & (bits == 4 ? 0x60 : 0x20)); }
/** Copies a lane issues a tile, at most (j = 0 .. kvq_tc_ncopy − 1 of kvq_tc_copy). */
KVQ_TC_FN int kvq_tc_ncopy(int bits) { return 2 * (bits / 2) + 2; }
/** Lane `lane`'s j-th 16-byte copy for the tile at position tb of a chunk ending at t1: 0 when it
 *  has none; else the stage offset *dst, the source region *side (0 keys, 1 values), the byte
 *  offset *off in that region (kside / vside: the side data's offsets) and the source bytes *n
 *  (0..16; the rest of the 16 zero-filled): rows past t1 read nothing and are zeros, int scales past
 *  t1 likewise (by the byte) — what load_tile gives for them. KIVI keys come in whole 32-position
 *  groups (the group's scales are there whenever its first tile is). */
KVQ_TC_FN int kvq_tc_copy(int kivi, int bits, int lane, int j, int tb, int t1, size_t kside, size_t vside, int *dst, int *side, size_t *off,
                          int *n) {
    const int RB = 16 * bits, KC = 16 * RB, nc = bits / 2; /* nc: a lane's code copies per side */
    if (j < 2 * nc) { /* codes: keys j < nc, values after */
        const int v = j >= nc, o = 16 * (lane + 32 * (j - v * nc));
        *dst = v * KC + kvq_tc_swz(bits, o), *side = v, *off = (size_t)tb * RB + o, *n = tb + o / RB < t1 ? 16 : 0;
        return 1;
    }
    if (j == 2 * nc && !kivi) { /* lanes 0, 1: the keys' scales of positions tb + 8·lane..; 2, 3: the values' */
        if (lane >= 4) return 0;
        const int h = lane & 1, left = 2 * (t1 - (tb + 8 * h));
        *dst = 2 * KC + 16 * lane, *side = lane >= 2, *off = (lane >= 2 ? vside : kside) + 2 * (size_t)(tb + 8 * h);
        *n = left < 0 ? 0 : left > 16 ? 16 : left;
        return 1;
    }
    if (j == 2 * nc) { /* KIVI values: lane < 16, position tb + lane's 4 groups */
        if (lane >= 16) return 0;
        *dst = 2 * KC + 16 * lane, *side = 1, *off = vside + (size_t)(tb + lane) * 16, *n = tb + lane < t1 ? 16 : 0;
        return 1;
    }
    if (j == 2 * nc + 1 && kivi && tb % 32 == 0) { /* KIVI keys: the group's (scale, zero) per channel */
        *dst = 2 * KC + 256 + 16 * lane, *side = 0, *off = kside + (size_t)(tb / 32) * 512 + 16 * lane, *n = 16;
        return 1;
    }
    return 0;
}
/** Stage offsets of lane (g, t)'s fragment (load_tile's fields): keys' plane pl of row g + 8r (8
 *  bytes), values' plane pl of row 2t + (r & 1) + 8(r >> 1) (4 bytes), int scales (2 bytes), KIVI
 *  value (scale, zero) of the lane's group (4 bytes), KIVI key group (128 × 4 bytes). */
KVQ_TC_FN int kvq_tc_rd_k(int bits, int g, int t, int r, int pl) { return kvq_tc_swz(bits, (g + 8 * r) * 16 * bits + pl * 32 + 8 * t); }
KVQ_TC_FN int kvq_tc_vrow(int t, int r) { return 2 * t + (r & 1) + 8 * (r >> 1); }
KVQ_TC_FN int kvq_tc_rd_v(int bits, int g, int t, int r, int pl) {
    return 16 * 16 * bits + kvq_tc_swz(bits, kvq_tc_vrow(t, r) * 16 * bits + pl * 32 + 4 * g);
}
KVQ_TC_FN int kvq_tc_rd_ks(int bits, int g, int r) { return 2 * 16 * 16 * bits + 2 * (g + 8 * r); }
KVQ_TC_FN int kvq_tc_rd_vs(int kivi, int bits, int g, int t, int r) {
    return 2 * 16 * 16 * bits + (kivi ? (kvq_tc_vrow(t, r) * 4 + (g >> 1)) * 4 : 32 + 2 * kvq_tc_vrow(t, r));
}
KVQ_TC_FN int kvq_tc_rd_kz(int bits) { return 2 * 16 * 16 * bits + 256; }

#endif
