// HyperQuant weight payload layout: the one definition shared by the C codec and any
// CUDA decoder (plain C99, no libc beyond stdint). A tensor (rows, cols) is cut into
// tiles of T (power of two, ≤ cols) along cols after padding cols to cols_p; tile t is
// row t / (cols_p/T), tile column t % (cols_p/T). Three blobs plus JSON params:
//
//   "codes"   Rice mode: tiles in order, grouped KVQ_HQ_GROUP_TILES at a time; each group
//             starts on a byte boundary, tiles inside a group are back to back. A tile is
//             T/n lattice vectors, each as n stripped zig-zag symbols (lattice.h) coded
//             with Rice parameter k[class] (rice.h: LSB-first bits, q zeros, a one, k
//             low bits). Zero tiles (norm code = all ones) have no symbols.
//             int8 mode: one int8 per code coordinate (raw lattice code, A2: ny,nx), no
//             stripping, rows × cols_p bytes.
//   "norms"   one norm code of nb bits per tile, packed LSB-first (tile t at bit t·nb):
//             norm = 2^(norm_exp − code / 2^(nb−5)), code 2^nb − 1 = zero tile.
//   "offsets" Rice mode only: (n_groups + 1) little-endian uint32 byte offsets into
//             "codes" of each group's first byte; the last equals the codes size.
//
// Decode of a tile (bit-exact on any implementation): z = H_T·c in int32 (unnormalized
// Walsh–Hadamard, exact, so the butterfly order does not matter; A2: z = H·(nx part) and
// w = H·(ny part), value (float)z + √3f·(float)w); x_i = ((float)z_i · s) · sign_j[i] with
// s = (float)(norm / (α·T)) and sign_j the seeded ±1 diagonal of tile column j
// (kvq_hq_sign_word). With a simulated MMA cast the tile is cast in the rotated float
// domain before a float butterfly instead (docs/HYPERQUANT.md).
#ifndef KVQ_HQ_LAYOUT_H
#define KVQ_HQ_LAYOUT_H

#include <stdint.h>

#include "kernels/splitmix.h"

// The header is also compiled as CUDA C++ (kernels/cuda): C++ spells the static assertion
// static_assert, and the sign function must exist on the device too.
#ifdef __cplusplus
#define KVQ_HQ_STATIC_ASSERT static_assert
#else
#define KVQ_HQ_STATIC_ASSERT _Static_assert
#endif
#ifdef __CUDACC__
#define KVQ_HQ_HD __host__ __device__
#else
#define KVQ_HQ_HD
#endif

#define KVQ_HQ_FORMAT_VERSION 1
#define KVQ_HQ_GROUP_TILES 16    // tiles per random-access group (one offset each)
#define KVQ_HQ_MAX_TILE 1024
#define KVQ_HQ_MIN_TILE 16

// Lattice ids as stored in a payload's "lattice" parameter (libconv/quant/lattice.h's
// kvq_lattice takes its values from these).
#define KVQ_HQ_LAT_E8 0
#define KVQ_HQ_LAT_D4 1
#define KVQ_HQ_LAT_A2 2
#define KVQ_HQ_LAT_Z 3
#define KVQ_HQ_SQRT3_F 1.7320508075688772f // A2's second basis coordinate scale

/** Largest stripped symbol a valid stream holds (|codes| stay below 2^14 for SNR <= 50 dB and
 *  tiles <= 1024); decoders treat larger ones as corruption. */
#define KVQ_HQ_SYM_LIMIT (1u << 24)

typedef uint32_t kvq_hq_offset;  // one per group, + 1 sentinel
KVQ_HQ_STATIC_ASSERT(sizeof(kvq_hq_offset) == 4, "offsets are 4-byte little-endian");
KVQ_HQ_STATIC_ASSERT((KVQ_HQ_GROUP_TILES & (KVQ_HQ_GROUP_TILES - 1)) == 0, "group is a power of two");
// Offset overhead at the default tile 128: 32 / (16·128) = 0.0156 bits per weight.
KVQ_HQ_STATIC_ASSERT(32 * 1000 / (KVQ_HQ_GROUP_TILES * 128) <= 50, "index overhead must stay <= 0.05 bpw");

/** Norm code of the zero tile for nb-bit norms. */
KVQ_HQ_HD static inline uint32_t kvq_hq_norm_zero(int nb) { return (1u << nb) - 1u; }

/** 64 sign bits number w of tile column j (bit i set = sign −1 for coordinate 64w+i):
 *  splitmix64 of (seed, j, w). Identical on CPU and GPU. */
KVQ_HQ_HD static inline uint64_t kvq_hq_sign_word(uint64_t seed, uint64_t j, uint64_t w) {
    return kvq_splitmix64_mix(seed + KVQ_SPLITMIX_GOLDEN * (1 + j * 64 + w));
}

// ---- Execution layout "hqx" (v1): what the CPU and GPU kernels read at run time.
// Built from the stored Rice stream at load (libconv/codec/hyperquant/hq_pack.c) and never
// written to a file, so the file format does not change. Decided by measurement
// (docs/EXECUTION.md): on kvq-small-llama E8 4.0 the stripped values fit a signed nibble
// for 98.7 % of weights; nibbles + coset bits + escapes hold 1.2× the Rice bytes.
//
// Weight value of tile t = (row r, tile column j), coordinate i (0 ≤ i < T):
//   W[r][jT+i] = scale[t] · sign_j[i] · (H_T · u)_i,   u_i = g_i · c_i,
//   c_i = m·v_i + cb  (E8: m = 2, cb = the 8-vector's coset bit; other lattices m = 1, cb = 0),
//   g_i = √3 on even i for A2 (its ny axis), else 1.
// So W·x = Σ_t scale[t] · Σ_i c_i · xr_i with xr = g ⊙ H_T·(sign_j ⊙ x_j): the activation is
// rotated once per input, and the kernels take integer dot products with the codes.
// RTN tensors (rtn:<bits>:g<group>, group a multiple of 64) use the same storage without the
// rotation (rotate = 0: xr = x), without an offset (u = the stored integer q, c = q) and with
// a per-tile zero point: W[r][jT+i] = q_i·scale[t] + zero[t], exactly the RTN decoder's floats.
// Storage, all tile-major (t = r·(cols_p/T) + j), in chunks of 64 coordinates:
//   q      vbits 4: 32 bytes per chunk; byte b holds u_b = v_b + 8 in its low nibble and u_{b+32}
//          in its high nibble (v ∈ [-8, 7]).  vbits 5..7: the same nibbles of the low 4 bits
//          of u = v + 2^(vbits-1) and, in hb, vbits − 4 bit planes: word hb[g·(vbits−4) + p]
//          of chunk g has bit i = bit 4+p of u_i.  vbits 8: 64 bytes per chunk, u = v + 128.
//   cb     E8: one byte per chunk, bit k = coset bit of the chunk's k-th 8-vector; else absent.
//   scale  per tile (float)(norm / (α·T)), 0 for zero tiles: with norm codes of ≤ 8 bits, the
//          code itself (scode, one byte per tile) into a table lut of n_lut floats; else a float.
//          As the packer builds it, lut has 256 entries and lives in scode's allocation (after
//          the codes, 64-byte aligned), so freeing scode frees it. kvq_hqx_compact (the CPU
//          backend) rebases the codes to the smallest one used and keeps only the entries used.
//   escapes values outside the vbits range are stored clamped in q, and the difference in a
//          per-row list (CSR): esc_row[rows + 1] start indices into esc[], each entry
//          col | (delta << 20) with col < 2^20 the padded column and delta a signed 12-bit
//          difference v − clamp(v). Compacted (kvq_hqx_compact; CPU only, esc_row NULL): a bit
//          per row (esc_bits, bit r%8 of byte r/8: the row has escapes; NULL when the tensor has
//          none) and the row of every escape (esc_r, ascending, n_esc entries): 1 bit a row instead
//          of 32. kvq_hqx_esc_range reads either form.
#define KVQ_HQX_VERSION 1
#define KVQ_HQX_CHUNK 64        // coordinates per chunk (tiles must hold whole chunks)
#define KVQ_HQX_ESC_COL_BITS 20
#define KVQ_HQX_ESC_MAX_DELTA 2047

typedef struct {
    int lat;                  // KVQ_HQ_LAT_* (RTN: KVQ_HQ_LAT_Z, codes c = v)
    int rotate;               // 1: HyperQuant (signs, Hadamard); 0: RTN, W = scale·c + zero
    int tile;                 // T, a multiple of KVQ_HQX_CHUNK (RTN: the group)
    int vbits;                // 4..8
    int64_t rows, cols, cols_p;
    uint64_t seed;            // sign-diagonal seed (kvq_hq_sign_word)
    uint8_t *q;               // rows · cols_p / 2 bytes (vbits 4, 5) or rows · cols_p (8)
    uint64_t *hb;             // vbits 5..7: (vbits − 4) · rows · cols_p / 64 plane words, else NULL
    uint8_t *cb;              // E8: rows · cols_p / 64 bytes, else NULL
    float *scale;             // rows · cols_p / T floats, or NULL when scode is used
    uint8_t *scode;           // rows · cols_p / T codes into lut, or NULL
    float *lut;               // with scode: n_lut floats (256 in scode's allocation, or the
                              // compacted table, which is its own allocation); else NULL
    float *zero;              // RTN: per-tile zero point (W = q·scale + zero); else NULL
    uint32_t *esc_row;        // rows + 1, or NULL once compacted
    uint32_t *esc;            // n_esc entries
    // appended for the compacted CPU form (C readers only; CUDA uploads the packer's form)
    int n_lut;                // entries of lut (256 as packed)
    int lut_own;              // 1: lut is its own allocation (compacted), freed with the layout
    int64_t n_esc;            // escapes (esc_row[rows] as packed)
    uint8_t *esc_bits;        // compacted: (rows + 7) / 8 bytes, or NULL (no escapes / not compacted)
    uint32_t *esc_r;          // compacted: the row of each escape, or NULL
} kvq_hqx;

/** The GPU's order of a plane word (issue 12, 2026-11-26 evening; kvq_cuda_hqx_upload transposes
 *  every word once on the device, the CPU keeps coordinate order): coordinate
 *  c = 32·hi + 16·h + 4·k + i of the chunk (hi: the high nibbles, h: the one-token product's
 *  lane half, k: the 4-coordinate word of the half, i: its byte) at bit 32·h + 8·i + 4·hi + k.
 *  A lane then takes its half's 32 bits, and the 4 plane bits of word k reach bit 4 of the
 *  word's 4 bytes by one shift and one masked OR, where coordinate order needs a shift, a mask,
 *  a multiply and a masked OR. */
KVQ_HQ_HD static inline int kvq_hqx_gpu_pbit(int c) {
    return (((c >> 4) & 1) << 5) | ((c & 3) << 3) | (((c >> 5) & 1) << 2) | ((c >> 2) & 3);
}
/** 4×4 bit transpose of a 16-bit value: bit 4r + c ↔ bit 4c + r. */
KVQ_HQ_HD static inline uint32_t kvq_hqx_t44(uint32_t x) {
    uint32_t t = (x ^ (x >> 3)) & 0x0A0Au;
    x ^= t ^ (t << 3);
    t = (x ^ (x >> 6)) & 0x00CCu;
    return x ^ t ^ (t << 6);
}
/** Nibble n of a 16-bit value to the low nibble of byte n of a 32-bit one, and back. */
KVQ_HQ_HD static inline uint32_t kvq_hqx_nib_spread(uint32_t x) {
    x = (x | (x << 8)) & 0x00FF00FFu;
    return (x | (x << 4)) & 0x0F0F0F0Fu;
}
KVQ_HQ_HD static inline uint32_t kvq_hqx_nib_gather(uint32_t x) {
    x &= 0x0F0F0F0Fu;
    x = (x | (x >> 4)) & 0x00FF00FFu;
    return (x | (x >> 8)) & 0xFFFFu;
}
/** A plane word from coordinate order to the GPU's (kvq_hqx_gpu_pbit), and back. */
KVQ_HQ_HD static inline uint64_t kvq_hqx_hb_gpu(uint64_t w) {
    uint64_t g = 0;
    for (int h = 0; h < 2; h++) {
        const uint32_t lo = (uint32_t)(w >> (16 * h)) & 0xFFFFu, hi = (uint32_t)(w >> (32 + 16 * h)) & 0xFFFFu;
        const uint32_t p = kvq_hqx_nib_spread(kvq_hqx_t44(lo)) | (kvq_hqx_nib_spread(kvq_hqx_t44(hi)) << 4);
        g |= (uint64_t)p << (32 * h);
    }
    return g;
}
KVQ_HQ_HD static inline uint64_t kvq_hqx_hb_std(uint64_t g) {
    uint64_t w = 0;
    for (int h = 0; h < 2; h++) {
        const uint32_t p = (uint32_t)(g >> (32 * h));
        w |= (uint64_t)kvq_hqx_t44(kvq_hqx_nib_gather(p)) << (16 * h);
        w |= (uint64_t)kvq_hqx_t44(kvq_hqx_nib_gather(p >> 4)) << (32 + 16 * h);
    }
    return w;
}

/** Scale of tile t. */
KVQ_HQ_HD static inline float kvq_hqx_scale(const kvq_hqx *w, int64_t t) {
    return w->scode ? w->lut[w->scode[t]] : w->scale[t];
}
/** Escapes of row r: esc[*e0 .. *e1); @return 1 when there are any. Both forms (esc_row, or the
 *  compacted bit per row with the escapes' rows: a bit test, and a search only in marked rows). */
KVQ_HQ_HD static inline int kvq_hqx_esc_range(const kvq_hqx *w, int64_t r, uint32_t *e0, uint32_t *e1) {
    if (w->esc_row) {
        *e0 = w->esc_row[r], *e1 = w->esc_row[r + 1];
        return *e0 < *e1;
    }
    *e0 = *e1 = 0;
    if (!w->esc_bits || !((w->esc_bits[r >> 3] >> (r & 7)) & 1)) return 0;
    uint32_t lo = 0, hi = (uint32_t)w->n_esc;
    while (lo < hi) { // first escape of row r
        const uint32_t mid = lo + (hi - lo) / 2;
        if ((int64_t)w->esc_r[mid] < r) lo = mid + 1;
        else hi = mid;
    }
    *e0 = hi = lo;
    while (hi < (uint32_t)w->n_esc && (int64_t)w->esc_r[hi] == r) hi++;
    *e1 = hi;
    return *e0 < *e1;
}
/** Stored offset of HyperQuant values: u = v + off (RTN stores q itself: no offset). */
KVQ_HQ_HD static inline int kvq_hqx_off(int vbits) { return 1 << (vbits - 1); }
/** Bit planes above the nibbles (0 for vbits 4 and 8). */
KVQ_HQ_HD static inline int kvq_hqx_planes(int vbits) { return vbits > 4 && vbits < 8 ? vbits - 4 : 0; }
/** Code multiplier m (2 for E8's 2E8 realization, else 1). */
KVQ_HQ_HD static inline int kvq_hqx_mult(int lat) { return lat == KVQ_HQ_LAT_E8 ? 2 : 1; }
/** Escape entry: padded column and signed delta. */
KVQ_HQ_HD static inline uint32_t kvq_hqx_esc_pack(uint32_t col, int32_t delta) {
    return col | ((uint32_t)delta << KVQ_HQX_ESC_COL_BITS);
}
KVQ_HQ_HD static inline uint32_t kvq_hqx_esc_col(uint32_t e) { return e & ((1u << KVQ_HQX_ESC_COL_BITS) - 1u); }
KVQ_HQ_HD static inline int32_t kvq_hqx_esc_delta(uint32_t e) { return (int32_t)e >> KVQ_HQX_ESC_COL_BITS; }

#endif
