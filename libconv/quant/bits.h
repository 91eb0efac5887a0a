// The project's one family of LSB-first bit streams (bit i of a stream is bit i % 8 of byte
// i / 8), in two flavours:
//   kvq_bitwriter / kvq_bitreader (kvq_bw_*, kvq_br_*): streaming, bounds-checked, with the
//     Rice codes of rice.h on top (HyperQuant's entropy-coded payloads);
//   kvq_bitw / kvq_bitr: a cursor at any bit position of a buffer the caller sized and zeroed,
//     writes OR-ed in (fixed-width fields of the KV codecs and RTN: several cursors may share
//     a buffer at different offsets);
//   kvq_bitword (kernels/bitword.h, included here): the 64-bit window and Rice codewords of the
//     fast decoders, one definition for C and CUDA (HyperQuant's fast CPU decoder and the GPU).
#ifndef KVQ_BITS_H
#define KVQ_BITS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/bitword.h"

// ---- bit writer into a caller-sized buffer (no growth; the caller knows the size)
typedef struct {
    uint8_t *buf;   // borrowed, zero-initialised by kvq_bw_init up to cap bytes
    size_t cap;     // bytes
    size_t pos;     // bytes fully written
    uint64_t acc;   // pending bits (LSB first)
    int n;          // number of pending bits (< 64)
    int overflow;   // set if a write went past cap (nothing written past it)
} kvq_bitwriter;

/** Starts writing at buf (cap bytes, zeroed here). */
void kvq_bw_init(kvq_bitwriter *w, void *buf, size_t cap);
/** Appends the low nbits (0..32) of v. */
void kvq_bw_put(kvq_bitwriter *w, uint32_t v, int nbits);
/** Flushes pending bits (zero-padded to a byte). @return total bytes written. */
size_t kvq_bw_finish(kvq_bitwriter *w);
/** Bits written so far. */
static inline uint64_t kvq_bw_bits(const kvq_bitwriter *w) { return 8 * (uint64_t)w->pos + (uint64_t)w->n; }

// ---- bit reader over [buf, buf+size); reads past the end set err and return zeros.
typedef struct {
    const uint8_t *buf;
    size_t size;      // bytes
    uint64_t bitpos;  // next bit to read
    int err;          // 1 once a read went past the end or a codeword was malformed
} kvq_bitreader;

void kvq_br_init(kvq_bitreader *r, const void *buf, size_t size);
/** Reads nbits (0..32), LSB first. */
uint32_t kvq_br_get(kvq_bitreader *r, int nbits);
// ---- positional cursors
typedef struct { uint8_t *p; size_t bit; } kvq_bitw;
typedef struct { const uint8_t *p; size_t bit; } kvq_bitr;

/** ORs the low nbits (0..32) of v in at the cursor and advances it. */
static inline void kvq_bitw_put(kvq_bitw *w, uint32_t v, int nbits) {
    while (nbits > 0) {
        size_t byte = w->bit >> 3;
        int off = (int)(w->bit & 7), take = 8 - off < nbits ? 8 - off : nbits;
        w->p[byte] |= (uint8_t)((v & ((1u << take) - 1u)) << off);
        v >>= take;
        nbits -= take;
        w->bit += take;
    }
}

/** Reads nbits (0..32) at the cursor and advances it (the caller checked the size). */
static inline uint32_t kvq_bitr_get(kvq_bitr *r, int nbits) {
    uint32_t v = 0;
    int got = 0;
    while (got < nbits) {
        int off = (int)(r->bit & 7), take = 8 - off < nbits - got ? 8 - off : nbits - got;
        v |= (uint32_t)((r->p[r->bit >> 3] >> off) & ((1u << take) - 1u)) << got;
        got += take;
        r->bit += take;
    }
    return v;
}

#endif
