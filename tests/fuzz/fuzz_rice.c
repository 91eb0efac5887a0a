// Fuzz target: the Rice reader of libconv/quant/rice.h and the 64-bit word reader of
// kernels/bitword.h (the fast decoders' codewords) on arbitrary bit streams. The first byte
// gives k (0..24); both readers must read the same symbols, stop at the
// same malformed codeword, and never read past the stream.
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "libconv/quant/rice.h"

KVQ_FUZZ_TARGET(rice) {
    if (size < 1) return 0;
    int k = data[0] % (KVQ_RICE_KMAX + 1);
    const uint8_t *s = data + 1;
    size_t n = size - 1;
    kvq_bitreader r;
    kvq_br_init(&r, s, n);
    // the word reader, refilled a byte at a time (zeros past the end), as the host decoder's tail
    kvq_bitword w = {0, 0};
    size_t p = 0; // bytes pulled into the window (zeros once past the end)
    for (int i = 0; i < 100000; i++) {
        uint32_t a = kvq_br_rice(&r, k);
        if (r.err) break;
        KVQ_FUZZ_CHECK(r.bitpos <= 8 * (uint64_t)n);
        uint64_t q = 0;
        uint32_t b = 0;
        int bad = 0, len;
        while (w.n <= 55) kvq_bitword_push(&w, p < n ? s[p] : 0, 8), p++;
        if (!kvq_bitword_rice(&w, k, 0x80000000u, &b, &len, &bad)) {
            while (kvq_bitword_skip_zeros(&w, &q)) {
                KVQ_FUZZ_CHECK(8 * (uint64_t)p - (uint64_t)w.n <= 8 * (uint64_t)n); // a valid codeword ended inside
                while (w.n <= 55) kvq_bitword_push(&w, p < n ? s[p] : 0, 8), p++;
            }
            kvq_bitword_end_run(&w, &q);
            while (w.n <= 55) kvq_bitword_push(&w, p < n ? s[p] : 0, 8), p++;
            b = kvq_bitword_rice_low(&w, k, q, 0x80000000u, &bad);
        }
        if (a < 0x80000000u) {
            KVQ_FUZZ_CHECK(!bad && a == b);
            KVQ_FUZZ_CHECK(8 * (uint64_t)p - (uint64_t)w.n == r.bitpos);
        }
        if (a >= 0x80000000u || bad) break;
    }
    return 0;
}
