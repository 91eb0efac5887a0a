// The word reader of the fast Rice decoders, one definition for the CPU
// (libconv/codec/hyperquant/hyperquant_dec.c) and the GPU (kernels/cuda/hq_common.cuh): a 64-bit
// window over an LSB-first bit stream (bit i of the stream is bit i % 8 of byte i / 8, the layout
// of libconv/quant/bits.h) and the Rice codewords (q zeros, a one, k low bits; rice.h) cut from
// it. Plain C99, also compiled as CUDA C++. Where the window's bits come from is each side's
// refill (unaligned 8-byte loads on the host, aligned 32-bit words with prefetch on the device).
#ifndef KVQ_BITWORD_H
#define KVQ_BITWORD_H

#include <stdint.h>

#ifdef __CUDACC__
#define KVQ_BITWORD_FN __host__ __device__ static __forceinline__
#else
#define KVQ_BITWORD_FN static inline
#endif

typedef struct {
    uint64_t buf; // the next bits of the stream, bit 0 first; bits [0, n) are valid
    int n;        // valid bits, 0..63; bits at and above n are what the refill left there
                  // (lookahead on the host, zeros on the device)
} kvq_bitword;

/** Index of the lowest set bit of x (x != 0). */
KVQ_BITWORD_FN int kvq_bitword_ctz64(uint64_t x) {
#ifdef __CUDA_ARCH__
    return __ffsll((long long)x) - 1;
#else
    return __builtin_ctzll(x);
#endif
}

/** Appends the low nbits of word above the n valid bits (n + nbits <= 64; word has no bits
 *  above nbits). */
KVQ_BITWORD_FN void kvq_bitword_push(kvq_bitword *w, uint64_t word, int nbits) {
    w->buf |= word << w->n;
    w->n += nbits;
}

/** Where the fast path looks for a codeword's one bit: the whole word on the host (one tzcnt;
 *  the set top bit stops the scan, and a codeword ending there never fits n <= 63 bits), the
 *  low 32 bits on the device (one ffs; -1 when they are all zeros). Either way the fast path
 *  takes only codewords within the n valid bits and leaves the rest to the slow path, so the
 *  two scans decode the same symbols. */
KVQ_BITWORD_FN int kvq_bitword_scan(uint64_t buf) {
#ifdef __CUDA_ARCH__
    return __ffs((unsigned)buf) - 1;
#else
    return __builtin_ctzll(buf | (1ull << 63));
#endif
}

/** Fast path: when the Rice codeword (parameter k <= 24) at the window's start lies within
 *  the n valid bits (the caller refilled to n >= 32), consumes it and returns 1, with its
 *  length in *len, the symbol masked to limit (a power of two) in *v, and *bad set when it
 *  reached limit (corrupt: the mask keeps later arithmetic in range). Otherwise returns 0
 *  and consumes nothing: the caller's slow path (kvq_bitword_skip_zeros, kvq_bitword_end_run,
 *  kvq_bitword_rice_low)
 *  takes it. */
KVQ_BITWORD_FN int kvq_bitword_rice(kvq_bitword *w, int k, uint32_t limit, uint32_t *v, int *len, int *bad) {
    const int z = kvq_bitword_scan(w->buf);
    const int l = z + 1 + k;
    if (z < 0 || l > w->n) return 0;
    const uint32_t s = ((uint32_t)z << k) | (uint32_t)((w->buf >> (z + 1)) & ((1ull << k) - 1));
    w->buf >>= l; // l <= n <= 63
    w->n -= l;
    *bad |= (int)(s >= limit);
    *v = s & (limit - 1);
    *len = l;
    return 1;
}

/** Slow path, a run of zeros longer than the window: when the n valid bits are all zeros,
 *  consumes them, adds n to *q and returns 1 (the window is emptied, lookahead included:
 *  refill from where the valid bits ended, check *q, call again); otherwise returns 0. */
KVQ_BITWORD_FN int kvq_bitword_skip_zeros(kvq_bitword *w, uint64_t *q) {
    if (w->buf & ((1ull << w->n) - 1)) return 0;
    *q += (uint64_t)w->n;
    w->buf = 0;
    w->n = 0;
    return 1;
}

/** Slow path, the end of the quotient (after kvq_bitword_skip_zeros returned 0, so a valid
 *  bit is one): consumes the zeros before it and the one, adding the zeros to *q. */
KVQ_BITWORD_FN void kvq_bitword_end_run(kvq_bitword *w, uint64_t *q) {
    const int z = kvq_bitword_ctz64(w->buf); // < n
    *q += (uint64_t)z;
    w->buf >>= z + 1; // z + 1 <= n <= 63
    w->n -= z + 1;
}

/** Slow path, the remainder: takes the k low bits that close a codeword of quotient q (the
 *  caller refilled to n >= k). @return the symbol, or 0 with *bad set when it does not fit
 *  32 bits or reaches limit. */
KVQ_BITWORD_FN uint32_t kvq_bitword_rice_low(kvq_bitword *w, int k, uint64_t q, uint32_t limit, int *bad) {
    const uint32_t lo = (uint32_t)(w->buf & ((1ull << k) - 1));
    w->buf >>= k;
    w->n -= k;
    if (q > (0xffffffffull >> k)) {
        *bad = 1;
        return 0;
    }
    const uint32_t v = (uint32_t)(q << k) | lo;
    if (v >= limit) {
        *bad = 1;
        return 0;
    }
    return v;
}

#endif
