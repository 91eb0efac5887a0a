// The weight-codec interface and its traits table (ggml type_traits style). A codec
// turns one tensor, seen as a (rows, cols) float32 matrix with cols the contraction
// axis, into named blobs plus a small JSON object of decode parameters, and back.
// Tools and tests loop over kvq_codec_at(i) so every codec gets the same treatment.
#ifndef KVQ_CODEC_H
#define KVQ_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "formats/error.h"
#include "formats/kvqfile.h"
#include "formats/tensor.h"

#define KVQ_MAX_BLOBS 8
#define KVQ_MAX_PARTS 8

typedef struct {
    char role[24];       // stored as entry "t/<tensor>/<role>" (e.g. "raw", "codes", "norms")
    void *data;          // owned by the kvq_encoded (malloc)
    size_t size;
    int compressible;    // hint to the container: try zstd
} kvq_blob;

typedef struct {
    const char *role;
    const void *data;    // borrowed (mmap or container buffer)
    size_t size;
} kvq_blob_view;

typedef struct {
    char name[24];       // "codes", "norms", "rice_params", "index", "indicators", "codebooks", ...
    double bits;         // total bits this part occupies for the tensor
} kvq_rate_part;

/** One encoded tensor. Everything decode needs is in blob[] and params. */
typedef struct {
    kvq_blob blob[KVQ_MAX_BLOBS];
    int n_blob;
    json_t *params;              // decode parameters (owned); small scalars only
    kvq_rate_part part[KVQ_MAX_PARTS]; // rate breakdown; sums to 8 × stored bytes
    int n_part;
    double code_bits_per_weight; // bits of the codes alone (lossless: source bits)
    double predicted_mse;        // encoder's own prediction of mean squared error, or NAN
} kvq_encoded;

/** Frees blobs and params; the struct itself is the caller's. */
void kvq_encoded_free(kvq_encoded *e);
/** Appends a blob, taking ownership of data (malloc'd). @return index or -1 if full. */
int kvq_encoded_add_blob(kvq_encoded *e, const char *role, void *data, size_t size, int compressible);
void kvq_encoded_add_part(kvq_encoded *e, const char *name, double bits);
/** Bytes stored for the tensor: blobs + compact JSON of params. */
size_t kvq_encoded_bytes(const kvq_encoded *e);
/** Effective bits per weight: 8 × kvq_encoded_bytes / numel. */
double kvq_encoded_bpw(const kvq_encoded *e, int64_t numel);

/** What encode sees: the source tensor (raw bytes, for lossless codecs) and its
 *  float32 values as a (rows, cols) matrix. */
typedef struct {
    const kvq_tensor *src;
    const float *x;      // (rows, cols) row-major float32; NULL for lossless codecs (they store src's bytes)
                         // and for codecs with reads_source (they read src's f32/f16/bf16 values)
    int64_t rows, cols;
    uint64_t seed;       // per-tensor seed derived from the recipe seed and the name
    int n_threads;       // 0 = OpenMP default
    const double *hess;  // (cols, cols) the product's input covariance Σ x xᵀ from a calibration pass, or NULL;
                         // only codecs asked for Hessian-aware rounding read it (hyperquant's ldlq)
} kvq_codec_input;

typedef struct {
    const char *name;    // spec prefix: "none", "rtn", "hyperquant", "qet", ...
    const char *summary; // one line for --help
    int lossless;
    int reads_source;    // encode accepts x = NULL and reads the values from src itself, a tile at a time
                         // (no float32 copy of the tensor: memory stays near the source's bytes)
    /** Parses the part of the spec after "name:" (may be "") into a config object
     *  (new reference). Errors name the spec. */
    kvq_status (*parse)(const char *args, json_t **cfg, kvq_err *err);
    /** Encodes one tensor. On error *out is left empty. */
    kvq_status (*encode)(const json_t *cfg, const kvq_codec_input *in, kvq_encoded *out,
                         kvq_err *err);
    /** Checks params and the blobs against a rows × cols tensor without decoding: everything
     *  decode refuses before it reads a payload byte (versions, ranges, blob sizes). A view's
     *  data may be NULL (sizes only: what a manifest's entry table says); decode runs it first,
     *  and kvq_codec_check_file runs it on every tensor of a file at open. */
    kvq_status (*check)(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows, int64_t cols,
                        kvq_err *err);
    /** The role of a small blob whose data kvq_codec_check_file reads for check (the others:
     *  sizes only), so that every tool refuses what it holds at open: HyperQuant's group
     *  offsets. NULL: none. */
    const char *check_data;
    /** Decodes into out (rows × cols float32, caller-allocated). */
    kvq_status (*decode)(const json_t *params, const kvq_blob_view *blobs, int n_blobs,
                         int64_t rows, int64_t cols, float *out, kvq_err *err);
    /** What tests/test_codec_table.c runs for this row: representative args, and the bound
     *  on ‖x − x̂‖ / ‖x‖ over a Gaussian 64 × 256 matrix (0 for lossless: bit-exact). */
    const char *example_args;
    double max_rel_err;
    /** Predicted bits of everything encode stores for a rows × cols tensor of source dtype src
     *  (blobs before the container's zstd, plus the params JSON): what --dry-run and a rate
     *  allocator plan with. NULL: the source bytes (lossless codecs). */
    double (*predict_bits)(const json_t *cfg, int64_t rows, int64_t cols, kvq_dtype src);
    /** Writes into out the spec arguments (the part after "name:") that turn this codec's rate
     *  knob to about `bits` per weight for a tensor of source dtype src, keeping its other
     *  options: hyperquant's bps, rtn's integer bits (bits less its scales' share, rounded),
     *  qet/pq's ratio (source bits / bits). NULL: the codec has no rate (lossless). Errors name
     *  the spec and the rate. */
    kvq_status (*with_rate)(const char *args, double bits, kvq_dtype src, char *out, size_t n, kvq_err *err);
} kvq_codec_traits;

/** Number of registered codecs and the i-th. */
int kvq_codec_count(void);
const kvq_codec_traits *kvq_codec_at(int i);
const kvq_codec_traits *kvq_codec_find(const char *name);
/** Splits "name:args" and parses args with that codec. */
kvq_status kvq_codec_parse_spec(const char *spec, const kvq_codec_traits **codec, json_t **cfg,
                                kvq_err *err);
/** Predicted stored bits of one tensor under (codec, cfg): the codec's predict_bits, or the
 *  source bytes when it has none. */
double kvq_codec_predict_bits(const kvq_codec_traits *c, const json_t *cfg, int64_t rows, int64_t cols,
                              kvq_dtype src);
/** "name:args" with the codec's rate set to `bits` per weight (see with_rate) into out.
 *  KVQ_ERR_ARG naming the spec when the codec has no rate. */
kvq_status kvq_codec_spec_with_rate(const char *spec, double bits, kvq_dtype src, char *out, size_t n,
                                    kvq_err *err);
/** The codec parameters of every tensor record of an opened .kvq, checked by its codec's check
 *  against the record's shape and its entries' sizes from the entry table (nothing inflated):
 *  what kvq-run's decode would refuse, refused at open by every tool. Errors name the file and
 *  the tensor. */
kvq_status kvq_codec_check_file(kvq_file *f, kvq_err *err);
/** Finds a blob by role in a view list, or NULL. */
const kvq_blob_view *kvq_blob_find(const kvq_blob_view *v, int n, const char *role);

#endif
