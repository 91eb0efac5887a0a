// The streaming bit writer and reader of bits.h (the positional cursors are inline there).
#include "libconv/quant/bits.h"

#include <string.h>

void kvq_bw_init(kvq_bitwriter *w, void *buf, size_t cap) {
    w->buf = buf;
    w->cap = cap;
    w->pos = 0;
    w->acc = 0;
    w->n = 0;
    w->overflow = 0;
    if (cap) memset(buf, 0, cap);
}

static void bw_drain(kvq_bitwriter *w) {
    while (w->n >= 8) {
        if (w->pos < w->cap) w->buf[w->pos] = (uint8_t)w->acc;
        else w->overflow = 1;
        w->pos++;
        w->acc >>= 8;
        w->n -= 8;
    }
}

void kvq_bw_put(kvq_bitwriter *w, uint32_t v, int nbits) {
    if (nbits <= 0) return;
    uint64_t m = nbits >= 32 ? 0xffffffffull : ((1ull << nbits) - 1);
    w->acc |= ((uint64_t)v & m) << w->n;
    w->n += nbits;
    bw_drain(w);
}

size_t kvq_bw_finish(kvq_bitwriter *w) {
    bw_drain(w);
    if (w->n > 0) { // fewer than 8 bits left: one zero-padded byte
        w->n = 8;
        bw_drain(w);
        w->n = 0;
    }
    w->acc = 0;
    return w->pos;
}

void kvq_br_init(kvq_bitreader *r, const void *buf, size_t size) {
    r->buf = buf;
    r->size = size;
    r->bitpos = 0;
    r->err = 0;
}

uint32_t kvq_br_get(kvq_bitreader *r, int nbits) {
    uint32_t v = 0;
    for (int i = 0; i < nbits; i++) {
        uint64_t b = r->bitpos++;
        if (b >= 8 * (uint64_t)r->size) { r->err = 1; return 0; }
        v |= (uint32_t)((r->buf[b >> 3] >> (b & 7)) & 1) << i;
    }
    return v;
}

