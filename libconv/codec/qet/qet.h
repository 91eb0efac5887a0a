// QET (Quantum Entanglement Trees, paper 004) as a plain matrix codec: per-row swap
// trees with bit-packed indicator maps, grouped k-means over 8-column subspaces,
// residual (RQO) and codebook (CQO) quantization, under a bit budget that counts
// everything stored. Used by the `qet` and `pq` weight codecs (codec_qet.c) and,
// offline, on K/V matrices (n tokens × d channels). See docs/QET.md.
#ifndef KVQ_QET_H
#define KVQ_QET_H

#include <stdint.h>
#include <jansson.h>

#include "formats/dtype.h"
#include "formats/error.h"
#include "kernels/pq_layout.h"
#include "libconv/codec/codec.h"

#define KVQ_QET_MAX_LEVELS 12  // swap-tree levels l
#define KVQ_QET_MAX_STAGES 2   // r: quantization stages (1 = no RQO, 2 = one residual stage)

typedef struct {
    double ratio;     // target compression ratio against the source dtype; 0 = no budget (fixed k only)
    int levels;       // swap-tree levels l (0 = plain PQ); default 3
    int stages;       // r: 1 (no RQO) or 2 (RQO: residual quantized once more); default 2
    double split;     // R1: share of the post-indicator budget given to stage 1; default 0.7
    int width;        // subspace width d/m; default 8
    int iters;        // Lloyd iteration bound; default 25
    int cb_bits;      // CQO: codebook RTN bits a' (default 10); 0 = codebooks in the source dtype
    int64_t k_fixed[KVQ_QET_MAX_STAGES]; // clusters per stage; 0 = chosen by the budget solver
} kvq_qet_config;

/** QET defaults of the paper (section 4.1): l=3, r=2, R1=0.7, d/m=8, a'=10. */
kvq_qet_config kvq_qet_config_default(double ratio);
/** "Vanilla" (no RQO, no CQO) and plain PQ (no swap tree, no RQO, no CQO). */
kvq_qet_config kvq_qet_config_vanilla(double ratio);
kvq_qet_config kvq_qet_config_pq(double ratio);

/** Parses "<ratio>[:opt,opt...]" (the part after "qet:" or "pq:"); starts from the
 *  QET or PQ defaults per `pq`. Options: l=N, r=1|2, split=F, w=N, iters=N, cb=N,
 *  k1=N, k2=N, vanilla. Errors name the offending option. */
kvq_status kvq_qet_parse(const char *args, int pq, kvq_qet_config *cfg, kvq_err *err);
/** Config ↔ JSON (the traits table's cfg object). */
json_t *kvq_qet_config_to_json(const kvq_qet_config *cfg);
kvq_status kvq_qet_config_from_json(const json_t *j, kvq_qet_config *cfg, kvq_err *err);

// ---- swap tree

/** Forward swap tree on each row of x (n × d, d a multiple of 2^l): writes the locally
 *  ordered X* into xs (n × d) and the indicator bits (one byte 0/1 each) into bits,
 *  laid out (n, l, d/2): bit 1 means the pair (left, right) had left > right and was
 *  swapped. OpenMP over rows. */
/** @return 0, or −1 when out of memory for the per-thread row buffer. */
int kvq_qet_swap_forward(const float *x, int64_t n, int64_t d, int l, float *xs, uint8_t *bits);
/** Inverse of kvq_qet_swap_forward: rebuilds x (n × d) from xs and bits. */
int kvq_qet_swap_inverse(const float *xs, const uint8_t *bits, int64_t n, int64_t d, int l, float *x); // 0 or −1 (OOM)
/** Plain reference of the forward tree, written as the paper's S/L matrices per level.
 *  @return 0, or −1 when out of memory (xs then undefined). */
int kvq_qet_swap_forward_ref(const float *x, int64_t n, int64_t d, int l, float *xs, uint8_t *bits);

// ---- budget

/** The solved rate plan for an n × d matrix (all sizes in bits, byte-rounded per blob). */
typedef struct {
    int stages;                          // stages actually used
    int64_t k[KVQ_QET_MAX_STAGES];       // clusters per stage
    int idx_bits[KVQ_QET_MAX_STAGES];    // ceil(log2 k) bits per index
    uint64_t target_bits;                // floor(n·d·a / ratio), or UINT64_MAX with no budget
    uint64_t indicator_bits, header_bits;
    uint64_t index_bits[KVQ_QET_MAX_STAGES], codebook_bits[KVQ_QET_MAX_STAGES];
    uint64_t total_bits;
} kvq_qet_plan;

/** Chooses k per stage by bisection (largest k whose stage cost fits its share), with a
 *  header allowance of header_bytes. Fails with a message when even k=1 does not fit. */
/** Bits the encoder will store for an n × d matrix (kvq_qet_solve's total with the encoder's
 *  header allowance; zstd may shrink the compressible blobs a little), or NAN when the
 *  configuration cannot encode that shape. */
double kvq_qet_predict_bits(const kvq_qet_config *cfg, kvq_dtype src, int64_t n, int64_t d);
kvq_status kvq_qet_solve(const kvq_qet_config *cfg, kvq_dtype src, int64_t n, int64_t d,
                         uint64_t header_bytes, kvq_qet_plan *plan, kvq_err *err);

// ---- matrix codec

/** Encodes x (n × d float32, from a source of dtype src) into out: blobs "indicators",
 *  "idx.<s>", "cb.<s>", params (shape-free), rate parts, predicted_mse (the exact MSE the
 *  decoder will reproduce). n_threads 0 = OpenMP default. The encoding never exceeds the
 *  target ratio. On error out is left empty. */
kvq_status kvq_qet_encode(const kvq_qet_config *cfg, kvq_dtype src, const float *x, int64_t n,
                          int64_t d, uint64_t seed, int n_threads, kvq_encoded *out, kvq_err *err);
/** kvq_qet_encode that also reports seconds spent in times[0] swap tree, times[1]
 *  clustering (all stages, incl. codebook rounding), times[2] packing. */
kvq_status kvq_qet_encode_timed(const kvq_qet_config *cfg, kvq_dtype src, const float *x, int64_t n,
                                int64_t d, uint64_t seed, int n_threads, kvq_encoded *out,
                                double times[3], kvq_err *err);
/** The plain serial reference of kvq_qet_encode: whole-matrix swap tree
 *  (kvq_qet_swap_forward_ref), kvq_kmeans_ref, re-assignment by kvq_kmeans_nearest, bit-by-bit
 *  packing, one thread. Same contract and the same bytes as kvq_qet_encode for any thread
 *  count (tests/test_qet_fast.c); slow, for tests. */
kvq_status kvq_qet_encode_ref(const kvq_qet_config *cfg, kvq_dtype src, const float *x, int64_t n, int64_t d,
                              uint64_t seed, kvq_encoded *out, kvq_err *err);
/** Checks params and blob sizes against an n × d tensor (blob data may be NULL: sizes only);
 *  what kvq_qet_decode checks before it reads a payload byte. */
kvq_status kvq_qet_check(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t n, int64_t d,
                         kvq_err *err);
/** Decodes into out (n × d, caller-allocated). */
kvq_status kvq_qet_decode(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t n,
                          int64_t d, float *out, kvq_err *err);

/** The PQ execution layout (kernels/pq_layout.h) of an n × d tensor stored without swap trees
 *  (`pq`, or `qet` with l=0), built from its blobs; arrays owned by *out (kvq_pqx_free).
 *  Codebooks stay bf16 when stored as bf16, else become float32. @return KVQ_ERR_UNSUPPORTED
 *  for swap trees (l > 0) or shapes outside the layout (decode those instead); other errors
 *  as kvq_qet_decode's (*out then empty). */
kvq_status kvq_qet_pack_pqx(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t n, int64_t d,
                            kvq_pqx *out, kvq_err *err);

/** Offline matrix codec for K/V matrices (n tokens × d channels): encodes x with the QET
 *  defaults at `ratio` against `src` and decodes into xhat (caller-allocated n × d).
 *  *bpw (if non-NULL) gets the realized effective bits per element. */
kvq_status kvq_qet_matrix_roundtrip(const float *x, int64_t n, int64_t d, kvq_dtype src,
                                    double ratio, uint64_t seed, float *xhat, double *bpw,
                                    kvq_err *err);

/** Bits [pos, pos + nb) of an LSB-first bitstream (the payloads' packed fields), nb <= 32. */
static inline uint32_t kvq_qet_get_bits(const uint8_t *buf, uint64_t pos, int nb) {
    uint32_t v = 0;
    for (int b = 0; b < nb; b++, pos++) v |= (uint32_t)((buf[pos >> 3] >> (pos & 7)) & 1u) << b;
    return v;
}
/** Bits of an index into k entries: the smallest b with 2^b >= k. */
static inline int kvq_qet_ceil_log2(int64_t k) {
    int b = 0;
    while (((int64_t)1 << b) < k) b++;
    return b;
}

#endif
