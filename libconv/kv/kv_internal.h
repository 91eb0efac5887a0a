// Internal pieces of the KV codecs that tests reach (not a public API): codebook and
// geometry helpers of TurboQuant, HQMQ and OCTOPUS, and HQMQ's fast search with its
// reference. Declared once here instead of by hand in the tests.
#ifndef KVQ_KV_INTERNAL_H
#define KVQ_KV_INTERNAL_H

#include "libconv/kv/kvcodec.h"

/** TurboQuant's Lloyd-Max codebook for the coordinate law at dimension d (2^bits levels into
 *  cb). @return its mean squared error (kv_turbo.c). */
double kvq_turbo_codebook(int d, int bits, float *cb);
/** turboquant-prod keys: the state's QJL matrix S (d, d) row-major, regenerated from the seed
 *  (owned by the state); NULL for any other state. */
const float *kvq_kv_turbo_qjl(const kvq_kvcodec *c);
/** The p-th unit Hurwitz quaternion (kv_hqmq.c). */
void kvq_hurwitz_unit(int p, float *q);
/** HQMQ codeword search: fast path and plain reference (same result). */
int kvq_hqmq_search(const kvq_kvcodec *c, const float *u);
int kvq_hqmq_search_ref(const kvq_kvcodec *c, const float *u);
/** OCTOPUS octahedral map of a unit 3-vector to (xi, eta) and back, and the density of xi
 *  (kv_octopus.c). */
void kvq_oct_encode(const float *n, float *xi, float *eta);
void kvq_oct_decode(float xi, float eta, float *n);
/** An octopus key state's layout and tables (pointers into the state, which owns them);
 *  @return 0, or -1 for any other state. */
typedef struct {
    int bdir, bnorm, ntri, qjl;
    const float *s1, *s2;  // (d) rotation and QJL sign vectors
    const float *crho;     // (2^bnorm)
    const float *dirs;     // (2^bdir, 2^bdir, 3) Oct⁻¹(cξ[a], cξ[b])
    const float *cxi;      // (2^bdir) the octahedral coordinate centroids cξ
    int round;             // rounding: 0 scalar, 2 local 2x2, 3 local 3x3 (default), 9 full
} kvq_kv_octopus_info;
int kvq_kv_octopus_info_of(const kvq_kvcodec *c, kvq_kv_octopus_info *o);
/** An hqmq state: M = 24S joint directions, ib = ⌈log2 M⌉ index bits, br radius bits, nch
 *  chunks, med (outliers on), the joint codebook (M, 4) (owned by the state). @return 0, or -1. */
typedef struct {
    int M, ib, br, nch, med;
    const float *cb;
    const float *sec; // (M / 24, 4) the secondary quaternions (the encoder's search reads them)
    double medc;      // the outlier multiplier C (0 = no outliers)
} kvq_kv_hqmq_info;
int kvq_kv_hqmq_info_of(const kvq_kvcodec *c, kvq_kv_hqmq_info *o);
/** hqmq without outliers: a record → its raw fp16 σ, nch joint indices and radii. @return 0, or
 *  -1 with outliers (med). */
int kvq_kv_hqmq_codes(const kvq_kvcodec *c, const uint8_t *rec, uint16_t *sig, int *idx, int *rad);
/** The record (max_bytes) the encoder writes for those codes (no outliers). */
void kvq_kv_hqmq_record(const kvq_kvcodec *c, uint16_t sig, const int *idx, const int *rad, uint8_t *rec);
/** hqmq with outliers (med): a record → its raw fp16 σ, nch outlier flags out, the inlier chunks'
 *  joint indices and radii at their chunk (0 at an outlier's) and the outliers' raw fp16 chunks in
 *  chunk order into och (4 each). @return the number of outliers, or -1 without outliers. */
int kvq_kv_hqmq_codes_med(const kvq_kvcodec *c, const uint8_t *rec, uint16_t *sig, uint8_t *out, int *idx, int *rad,
                          uint16_t *och);
/** The record (max_bytes, zero-padded) the encoder writes for those (med); @return its length. */
size_t kvq_kv_hqmq_record_med(const kvq_kvcodec *c, uint16_t sig, const uint8_t *out, const int *idx, const int *rad,
                              const uint16_t *och, uint8_t *rec);
double kvq_oct_xi_pdf(double xi, const void *arg);

#endif
