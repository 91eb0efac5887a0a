// Fixed-width codes of the KV codecs (b <= 8 bits each, LSB-first, code i at bit i·b) read
// without a bit cursor: unpacked to bytes eight at a time (BMI2 pdep where the CPU has it), and
// the sums attention takes from them: Σ q·c for scores from the codes, acc += w·c for the
// value side summed from the codes, and both through a small table (TurboQuant's centroids).
#ifndef KVQ_KERNELS_KVCODES_H
#define KVQ_KERNELS_KVCODES_H

#include <stddef.h>
#include <stdint.h>

/** The n codes of b bits (1..8) at p (reads exactly ceil(n·b/8) bytes) into c (n bytes). */
void kvq_codes_unpack(const uint8_t *p, int b, int n, uint8_t *c);
/** The same for codes starting at bit bit0 of p (reads bytes [bit0/8, ceil((bit0 + n·b)/8))). */
void kvq_codes_unpack_at(const uint8_t *p, size_t bit0, int b, int n, uint8_t *c);
/** Plain reference of kvq_codes_unpack_at (one bit at a time). */
void kvq_codes_unpack_ref(const uint8_t *p, int bit0, int b, int n, uint8_t *c);

/** acc[i] += w · c[i] for i < n (AVX-512 or AVX2 where the CPU has it; FMA, so not bit-equal to
 *  acc + w·c rounded twice). */
void kvq_codes_axpy(float *acc, float w, const uint8_t *c, int n);
/** Σ_i q[i] · c[i], i < n (vector partial sums: the order differs from a plain loop). */
float kvq_codes_dot(const float *q, const uint8_t *c, int n);
/** acc[i] += w · lut[c[i]] (lut holds every code's value: 2^b floats). */
void kvq_codes_lut_axpy(float *acc, float w, const float *lut, int nlut, const uint8_t *c, int n);
/** Σ_i q[i] · lut[c[i]]. */
float kvq_codes_lut_dot(const float *q, const float *lut, int nlut, const uint8_t *c, int n);

/** Σ_i a[i] · b[i] and acc[i] += w · x[i] over float rows (the codecs that rebuild a token in
 *  their own frame first: OCTOPUS, HQMQ, HyperQuant-KV). */
float kvq_codes_fdot(const float *a, const float *b, int n);
void kvq_codes_faxpy(float *acc, float w, const float *x, int n);

#endif
