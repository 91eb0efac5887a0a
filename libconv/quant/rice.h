// Bit writer/reader and Rice (Golomb power-of-two) codes, as used by HyperQuant.
// Stream convention (also in docs/HYPERQUANT.md): bits are packed LSB-first into bytes
// (bit i of the stream is bit i%8 of byte i/8). A Rice codeword for symbol v with
// parameter k is q = v>>k zero bits, one 1 bit, then the k low bits of v (LSB first);
// length q+1+k. Parameter choice is exact: minimise total bits over a histogram.
#ifndef KVQ_RICE_H
#define KVQ_RICE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KVQ_RICE_KMAX 24     // largest Rice parameter considered
#define KVQ_RICE_HIST 1024   // exact histogram bins; larger symbols kept as sums

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
/** Appends one Rice codeword. */
void kvq_bw_rice(kvq_bitwriter *w, uint32_t v, int k);
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
/** Reads one Rice codeword with parameter k. Sets err (returns 0) if the unary part
 *  runs past the end or the value would not fit 32 bits. */
uint32_t kvq_br_rice(kvq_bitreader *r, int k);

/** Length in bits of the Rice codeword of v with parameter k. */
static inline uint64_t kvq_rice_len(uint32_t v, int k) { return (uint64_t)(v >> k) + 1u + (uint64_t)k; }

// ---- parameter choice by exact bit count
typedef struct {
    uint64_t h[KVQ_RICE_HIST];      // h[v] = count of symbol v (v < KVQ_RICE_HIST)
    uint64_t big_n;                 // count of symbols >= KVQ_RICE_HIST
    uint64_t big_q[KVQ_RICE_KMAX + 1]; // Σ (v >> k) over those symbols, per k
} kvq_rice_hist;

void kvq_rice_hist_clear(kvq_rice_hist *h);
void kvq_rice_hist_add(kvq_rice_hist *h, uint32_t v);
/** a += b. */
void kvq_rice_hist_merge(kvq_rice_hist *a, const kvq_rice_hist *b);
/** Total bits of all symbols in h coded with parameter k. */
uint64_t kvq_rice_hist_bits(const kvq_rice_hist *h, int k);
/** The k in [0, KVQ_RICE_KMAX] minimising kvq_rice_hist_bits (smallest on ties);
 *  writes the bit count to *bits if non-NULL. */
int kvq_rice_best_k(const kvq_rice_hist *h, uint64_t *bits);
/** Shannon entropy of the histogram's symbols in bits (symbols >= KVQ_RICE_HIST are
 *  lumped, so this is a lower estimate when they occur). */
double kvq_rice_hist_entropy(const kvq_rice_hist *h);

#endif
