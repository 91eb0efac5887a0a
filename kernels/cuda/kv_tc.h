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

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define KVQ_TC_FN static __host__ __device__ __forceinline__
#else
#define KVQ_TC_FN static inline
#endif

/** The 8 raw fp16 pairs of a word's 16 dims: bits 2 (lo only) or 4 (lo = the low plane's
 *  word, hi = the high plane's). 4 bits: the planes are first merged into nibbles, e = the
 *  even dims (nibble n = dim 2n), o = the odd dims. */
KVQ_TC_FN void kvq_tc_dq(int bits, uint32_t lo, uint32_t hi, uint32_t h[8]) {
    const uint32_t X = 0x64006400u;
    if (bits == 4) {
        const uint32_t e = (lo & 0x33333333u) | ((hi << 2) & 0xCCCCCCCCu), o = ((lo >> 2) & 0x33333333u) | (hi & 0xCCCCCCCCu);
        const uint32_t e8 = e >> 8, o8 = o >> 8;
        h[0] = (e & 0x000F000Fu) | X, h[1] = (e & 0x00F000F0u) | X, h[2] = (e8 & 0x000F000Fu) | X, h[3] = (e8 & 0x00F000F0u) | X;
        h[4] = (o & 0x000F000Fu) | X, h[5] = (o & 0x00F000F0u) | X, h[6] = (o8 & 0x000F000Fu) | X, h[7] = (o8 & 0x00F000F0u) | X;
    } else {
        const uint32_t w8 = lo >> 8;
        (void)hi;
        h[0] = (lo & 0x00030003u) | X, h[1] = (lo & 0x000C000Cu) | X, h[2] = (lo & 0x00300030u) | X, h[3] = (lo & 0x00C000C0u) | X;
        h[4] = (w8 & 0x00030003u) | X, h[5] = (w8 & 0x000C000Cu) | X, h[6] = (w8 & 0x00300030u) | X, h[7] = (w8 & 0x00C000C0u) | X;
    }
}
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
