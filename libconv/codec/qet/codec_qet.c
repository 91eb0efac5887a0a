// Weight-codec entries for QET (`qet:<ratio>[:options]`) and its plain product-
// quantization baseline (`pq:<ratio>[:options]`): thin adapters from the traits table
// to the matrix codec in qet.c. A weight (rows = output features, cols = contraction
// axis) is the paper's n × d matrix: swaps and subspaces run along each row.
#include "libconv/codec/qet/qet.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static kvq_status parse_common(const char *args, int pq, json_t **cfg, kvq_err *err) {
    kvq_qet_config c;
    kvq_status s = kvq_qet_parse(args, pq, &c, err);
    if (s) return s;
    *cfg = kvq_qet_config_to_json(&c);
    return *cfg ? KVQ_OK : kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", pq ? "pq" : "qet");
}

static kvq_status qet_parse(const char *args, json_t **cfg, kvq_err *err) { return parse_common(args, 0, cfg, err); }
static kvq_status pq_parse(const char *args, json_t **cfg, kvq_err *err) { return parse_common(args, 1, cfg, err); }

static kvq_status qet_encode(const json_t *cfgj, const kvq_codec_input *in, kvq_encoded *out, kvq_err *err) {
    kvq_qet_config c;
    kvq_status s = kvq_qet_config_from_json(cfgj, &c, err);
    if (s) return s;
    kvq_dtype src = in->src ? in->src->dtype : KVQ_DTYPE_F32;
    s = kvq_qet_encode(&c, src, in->x, in->rows, in->cols, in->seed, in->n_threads, out, err);
    if (s && in->src && in->src->name) kvq_err_prefix(err, "tensor '%s'", in->src->name);
    return s;
}

static kvq_status qet_decode(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows,
                             int64_t cols, float *out, kvq_err *err) {
    return kvq_qet_decode(params, blobs, n_blobs, rows, cols, out, err);
}

static kvq_status qet_check(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows, int64_t cols,
                            kvq_err *err) {
    return kvq_qet_check(params, blobs, n_blobs, rows, cols, err);
}

static double qet_predict_bits(const json_t *cfgj, int64_t rows, int64_t cols, kvq_dtype src) {
    kvq_qet_config c;
    if (kvq_qet_config_from_json(cfgj, &c, NULL)) return NAN;
    return kvq_qet_predict_bits(&c, src, rows, cols);
}

// ratio = source bits / bits, replacing the first field of "<ratio>[:options]".
static kvq_status qet_with_rate(const char *args, double bits, kvq_dtype src, char *out, size_t n, kvq_err *err) {
    const char *c1 = strchr(args, ':');
    double ratio = 8.0 * (double)kvq_dtype_size(src) / bits;
    if ((size_t)snprintf(out, n, "%.6g%s", ratio, c1 ? c1 : "") >= n)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec '%s': too long", args);
    return KVQ_OK;
}

const kvq_codec_traits kvq_codec_qet = {
    .name = "qet",
    .summary = "QET swap trees + grouped k-means + residual/codebook quantization; qet:<ratio>[:l=3,r=2,split=0.7,w=8,iters=25,cb=10,vanilla]",
    .lossless = 0,
    .parse = qet_parse,
    .encode = qet_encode,
    .check = qet_check,
    .decode = qet_decode,
    .example_args = "4",
    .max_rel_err = 0.3,
    .predict_bits = qet_predict_bits,
    .with_rate = qet_with_rate,
};

const kvq_codec_traits kvq_codec_pq = {
    .name = "pq",
    .summary = "plain product quantization (k-means per 8-column subspace); pq:<ratio>[:w=8,iters=25,cb=0,r=1]",
    .lossless = 0,
    .parse = pq_parse,
    .encode = qet_encode,
    .check = qet_check,
    .decode = qet_decode,
    .example_args = "4",
    .max_rel_err = 0.8,
    .predict_bits = qet_predict_bits,
    .with_rate = qet_with_rate,
};
