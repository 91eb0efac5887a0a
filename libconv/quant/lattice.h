// Integer realizations of the four HyperQuant lattices (paper section 4.5, Table 3):
// E8int = 2E8 ⊂ Z^8, D4int = D4 ⊂ Z^4 (checkerboard), A2int = {(√3·ny, nx): ny+nx even},
// Zint = Z. Conway–Sloane nearest-point decoders, lattice constants (G, covolume), and the
// lossless bit-stripping transform of section 4.6 (strip -> zig-zag symbols and back).
// Shared by the HyperQuant weight codec and the HyperQuant-KV codec.
#ifndef KVQ_LATTICE_H
#define KVQ_LATTICE_H

#include "kernels/hq_layout.h"

#include <stdint.h>

typedef enum {
    KVQ_LAT_E8 = KVQ_HQ_LAT_E8,
    KVQ_LAT_D4 = KVQ_HQ_LAT_D4,
    KVQ_LAT_A2 = KVQ_HQ_LAT_A2,
    KVQ_LAT_Z = KVQ_HQ_LAT_Z,
    KVQ_LAT_COUNT
} kvq_lattice;

#define KVQ_LAT_MAX_DIM 8
#define KVQ_LAT_MAX_CLASSES 2 // symbol classes = independent Rice parameters
#define KVQ_SQRT3_F KVQ_HQ_SQRT3_F

/** "e8", "d4", "a2", "z". */
const char *kvq_lattice_name(kvq_lattice l);
/** Parses a lattice name (case-insensitive). @return 0, or -1 if unknown. */
int kvq_lattice_parse(const char *s, kvq_lattice *out);
/** Dimension n of the lattice (8, 4, 2, 1). */
int kvq_lattice_dim(kvq_lattice l);
/** Normalized second moment G(Λ) (Table 2; scale invariant). */
double kvq_lattice_G(kvq_lattice l);
/** Covolume V of the integer realization: 2^8, 2, 2√3, 1. */
double kvq_lattice_covolume(kvq_lattice l);
/** Number of Rice symbol classes after stripping (E8 1, D4 2, A2 2, Z 1). */
int kvq_lattice_classes(kvq_lattice l);
/** Class (0 or 1) of the i-th stripped symbol of a vector: D4 symbol 3 (t) and A2
 *  symbol 1 (nx) are class 1, all others class 0. */
int kvq_lattice_symbol_class(kvq_lattice l, int i);

// ---- nearest points. Input x is in the lattice's real coordinates (for A2: x[0] is the
// √3-scaled axis, x[1] the unit axis); output c is the integer code vector (for A2:
// c[0]=ny, c[1]=nx). Exact Conway–Sloane closest point; |x_i| must be < 2^30.

/** Nearest point of 2E8: best of 2D8 (even coords, sum ≡ 0 mod 4) and 2D8+1 (SSE4.1 when
 *  available; identical results to kvq_e8_nearest_ref, ties included). */
void kvq_e8_nearest(const float x[8], int32_t c[8]);
/** Plain scalar reference of kvq_e8_nearest. */
void kvq_e8_nearest_ref(const float x[8], int32_t c[8]);
/** Nearest point of D4 = {c ∈ Z^4 : Σc even}: round, fix parity on the worst coordinate. */
void kvq_d4_nearest(const float x[4], int32_t c[4]);
/** Nearest point of A2int: best of the two rectangular cosets (ny,nx both even / both odd). */
void kvq_a2_nearest(const float x[2], int32_t c[2]);
/** Nearest integer (ties to even). */
void kvq_z_nearest(const float x[1], int32_t c[1]);
/** Dispatches on l; x and c hold kvq_lattice_dim(l) values. */
void kvq_lattice_nearest(kvq_lattice l, const float *x, int32_t *c);
/** Real coordinates of code c (A2 multiplies ny by √3 in float); n values. */
void kvq_lattice_embed(kvq_lattice l, const int32_t *c, float *y);
/** 1 if c is a point of the integer realization, else 0. */
int kvq_lattice_member(kvq_lattice l, const int32_t *c);

// ---- strip / unstrip (section 4.6), including the final zig-zag.
// E8: cb=c0&1, s_i=(c_i-cb)/2, p=(s0+..+s6)&1, t=(s7-p)/2 -> zz(s0..s6), 2·zz(t)+cb.
// D4: p=(c0+c1+c2)&1, t=(c3-p)/2 -> zz(c0),zz(c1),zz(c2),zz(t).
// A2: p=nx&1, ty=(ny-p)/2 -> zz(ty), zz(nx).   Z: zz(c).
// Always n symbols in, n symbols out.

static inline uint32_t kvq_zigzag(int32_t v) { return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31); }
static inline int32_t kvq_unzigzag(uint32_t u) { return (int32_t)(u >> 1) ^ -(int32_t)(u & 1); }

/** Strips a lattice point c (must be a member) into n zig-zag symbols. */
void kvq_lattice_strip(kvq_lattice l, const int32_t *c, uint32_t *sym);
/** Inverse of kvq_lattice_strip: symbols -> lattice point (always a member). */
void kvq_lattice_unstrip(kvq_lattice l, const uint32_t *sym, int32_t *c);

#endif
