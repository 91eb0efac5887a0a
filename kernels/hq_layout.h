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
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (1 + j * 64 + w);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
