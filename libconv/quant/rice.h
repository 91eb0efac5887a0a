// Rice (Golomb power-of-two) codes over the bit streams of bits.h, as used by HyperQuant.
// Stream convention (also in docs/HYPERQUANT.md): bits are packed LSB-first into bytes
// (bit i of the stream is bit i%8 of byte i/8). A Rice codeword for symbol v with
// parameter k is q = v>>k zero bits, one 1 bit, then the k low bits of v (LSB first);
// length q+1+k. Parameter choice is exact: minimise total bits over a histogram.
#ifndef KVQ_RICE_H
#define KVQ_RICE_H

#include <stddef.h>
#include <stdint.h>

#include "libconv/quant/bits.h"
#include <string.h>

#define KVQ_RICE_KMAX 24     // largest Rice parameter considered
#define KVQ_RICE_HIST 1024   // exact histogram bins; larger symbols kept as sums

/** Appends one Rice codeword. */
void kvq_bw_rice(kvq_bitwriter *w, uint32_t v, int k);
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
