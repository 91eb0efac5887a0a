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

#endif
