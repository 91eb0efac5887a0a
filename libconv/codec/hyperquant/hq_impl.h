// Internal pieces shared by the HyperQuant encoder and decoders (not a public API): the
// per-tile reconstruction that both the encoder's reference and the decoders run, sign
// diagonals, and norm-code conversion.
#ifndef KVQ_HQ_IMPL_H
#define KVQ_HQ_IMPL_H

#include <math.h>
#include <stdint.h>

#include "kernels/hq_layout.h"
#include "libconv/quant/bits.h"
#include "libconv/codec/hyperquant/hyperquant.h"

/** Fills sgn[0..cols_p) with ±1.0f: tile column j uses sgn[j*T .. j*T+T). */
void kvq_hq_signs(uint64_t seed, int T, int64_t cols_p, float *sgn);

/** Decoded norm of a (non-zero) norm code. */
static inline double kvq_hq_norm_value(const kvq_hq_header *h, uint32_t code) {
    return exp2((double)h->norm_exp - (double)code / (double)(1 << (h->norm_bits - 5)));
}

/** Reads norm code t from the packed norms blob (caller checked the size). */
static inline uint32_t kvq_hq_norm_code(const uint8_t *norms, int nb, int64_t t) {
    kvq_bitr r = {norms, (size_t)((uint64_t)t * (uint64_t)nb)};
    return kvq_bitr_get(&r, nb);
}


/** Reconstructs one tile from its T integer codes c (clobbered: used as integer scratch).
 *  No cast: z = H_T·c in exact int32 arithmetic (A2: H·nx-part and H·ny-part separately),
 *  then dst[i] = ((float)z_i · s) · sign_i with s = (float)(n̂/(α·T)) — independent of the
 *  butterfly order, so any implementation reproduces it bit for bit. With a cast: y =
 *  embed(c)·(float)(n̂/(α√T)), cast, float butterfly, ·(float)(1/√T), ·sign. y is T floats of
 *  scratch. Zero tiles: code = kvq_hq_norm_zero. Used by the encoder and both decoders. */
void kvq_hq_tile_recon(const kvq_hq_header *h, int32_t *c, uint32_t code, const float *sgn, float *y,
                       float *dst, int ncopy);

/** Multi-codeword Rice table of the fast decoders: entry w (the next KVQ_HQ_TAB_BITS bits of
 *  the stream) holds the symbols of the whole codewords that start the window (up to 6, each
 *  below 256; bytes 0..5), their number (byte 6, 0 when the first codeword does not fit or its
 *  symbol is >= 256: the one-codeword reader takes it) and the bits they use (byte 7). Built
 *  for one Rice parameter; on = 0 when the header's classes use different parameters (D4, A2
 *  with k0 != k1), and the decoders then read one codeword at a time. */
#define KVQ_HQ_TAB_BITS 12
typedef struct {
    uint64_t e[1 << KVQ_HQ_TAB_BITS];
    int on;
} kvq_hq_rice_tab;

/** Fills t for h's Rice parameters. */
void kvq_hq_rice_tab_init(kvq_hq_rice_tab *t, const kvq_hq_header *h);

/** The lattice codes of random-access group g (Rice mode): its tiles' T codes each, in
 *  order, into c (KVQ_HQ_GROUP_TILES × T; zero tiles get zeros), with the fast reader and
 *  tab (from kvq_hq_rice_tab_init on h). Offsets must have been checked. @return 0, or 1 if
 *  the group's stream is corrupt. */
int kvq_hq_group_codes(const kvq_hq_header *h, const kvq_hq_rice_tab *tab, const uint8_t *codes,
                       const uint8_t *norms, const uint8_t *offs, int64_t g, int64_t n_tiles, int32_t *c);

/** Checks blob sizes and the group offsets against h; returns the codes, norms and
 *  offsets (NULL in int8 mode) views. */
kvq_status kvq_hq_check_blobs(const kvq_hq_header *h, const kvq_blob_view *b, int nb, const uint8_t **codes,
                              size_t *ncodes, const uint8_t **norms, const uint8_t **offs, kvq_err *err);

/** E8 quantization of nv vectors (nv a multiple of 8) of r·g, eight at a time with AVX2: the
 *  codes into c, the stripped symbols into s (8·nv each) and, added to *tn in vector order, each
 *  vector's squared error Σ(r·g − c)² summed in coordinate order — exactly what kvq_e8_nearest,
 *  kvq_lattice_strip and the encoder's plain loop give. @return 0, or −1 without AVX2 (nothing
 *  written). The encoder's fast path; exported for its test. */
int kvq_hq_e8_quant8(const float *r, float g, int nv, int32_t *c, uint32_t *s, double *tn);

/** LDLQ's error-feedback coefficients (hq_ldlq.c) for rows of cols_p rotated coordinates in blocks
 *  of n: H (cols × cols, symmetric PSD, any scale) padded with zeros to cols_p, rotated as the
 *  encoder rotates a row (tiles of T, signs sgn), damped by damp × its mean diagonal, factored
 *  H_rot = U D Uᵀ (U unit block-upper triangular). *out (malloc'd, caller frees): for each block
 *  k ≥ 1 the (k·n × n) row-major matrix A_k = U_{<k,k}, at offset n²·k(k−1)/2, so that block k's
 *  target is y_k + A_kᵀ e_{<k}. KVQ_ERR_NUMERIC when the damped matrix is not positive definite. */
kvq_status kvq_hq_ldlq_feedback(const double *H, int64_t cols, int64_t cols_p, int T, const float *sgn, double damp,
                                int n, float **out, kvq_err *err);

#endif
