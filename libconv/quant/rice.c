// Reference Rice coding over the bit streams of bits.c (stream convention in bits.h / rice.h),
// plus exact Rice-parameter selection from a symbol histogram. The codecs' fast decode
// loops inline their own readers and are tested against these.
#include "libconv/quant/rice.h"

#include <math.h>

void kvq_bw_rice(kvq_bitwriter *w, uint32_t v, int k) {
    uint32_t q = v >> k;
    while (q >= 32) { kvq_bw_put(w, 0, 32); q -= 32; }
    kvq_bw_put(w, 1u << q, (int)q + 1); // q zeros then a one
    kvq_bw_put(w, v, k);
}

uint32_t kvq_br_rice(kvq_bitreader *r, int k) {
    uint64_t q = 0;
    for (;;) {
        uint64_t b = r->bitpos++;
        if (b >= 8 * (uint64_t)r->size) { r->err = 1; return 0; }
        if ((r->buf[b >> 3] >> (b & 7)) & 1) break;
        if (++q > (0xffffffffull >> k)) { r->err = 1; return 0; }
    }
    uint32_t lo = kvq_br_get(r, k);
    return (uint32_t)(q << k) | lo;
}

void kvq_rice_hist_clear(kvq_rice_hist *h) { memset(h, 0, sizeof *h); }

void kvq_rice_hist_add(kvq_rice_hist *h, uint32_t v) {
    if (v < KVQ_RICE_HIST) { h->h[v]++; return; }
    h->big_n++;
    for (int k = 0; k <= KVQ_RICE_KMAX; k++) h->big_q[k] += v >> k;
}

void kvq_rice_hist_merge(kvq_rice_hist *a, const kvq_rice_hist *b) {
    for (int i = 0; i < KVQ_RICE_HIST; i++) a->h[i] += b->h[i];
    a->big_n += b->big_n;
    for (int k = 0; k <= KVQ_RICE_KMAX; k++) a->big_q[k] += b->big_q[k];
}

uint64_t kvq_rice_hist_bits(const kvq_rice_hist *h, int k) {
    uint64_t bits = 0, n = h->big_n;
    for (uint32_t v = 0; v < KVQ_RICE_HIST; v++) {
        bits += h->h[v] * (uint64_t)(v >> k);
        n += h->h[v];
    }
    return bits + h->big_q[k] + n * (uint64_t)(k + 1);
}

int kvq_rice_best_k(const kvq_rice_hist *h, uint64_t *bits) {
    int best = 0;
    uint64_t bb = kvq_rice_hist_bits(h, 0);
    for (int k = 1; k <= KVQ_RICE_KMAX; k++) {
        uint64_t b = kvq_rice_hist_bits(h, k);
        if (b < bb) { bb = b; best = k; }
    }
    if (bits) *bits = bb;
    return best;
}

double kvq_rice_hist_entropy(const kvq_rice_hist *h) {
    uint64_t n = h->big_n;
    for (int i = 0; i < KVQ_RICE_HIST; i++) n += h->h[i];
    if (!n) return 0.0;
    double e = 0.0;
    for (int i = 0; i < KVQ_RICE_HIST; i++)
        if (h->h[i]) { double p = (double)h->h[i] / (double)n; e -= (double)h->h[i] * log2(p); }
    if (h->big_n) { double p = (double)h->big_n / (double)n; e -= (double)h->big_n * log2(p); }
    return e;
}
