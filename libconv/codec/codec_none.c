// The lossless codec: the tensor's source bytes stored as they are (the container
// may zstd them). Decoding converts the source dtype to float32.
#include <stdlib.h>
#include <string.h>

#include "libconv/codec/codec.h"

static kvq_status none_parse(const char *args, json_t **cfg, kvq_err *err) {
    if (args && *args)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'none' takes no arguments (got '%s')", args);
    *cfg = json_object();
    return KVQ_OK;
}

static kvq_status none_encode(const json_t *cfg, const kvq_codec_input *in, kvq_encoded *out,
                              kvq_err *err) {
    const kvq_tensor *t = in->src;
    void *copy = malloc(t->nbytes ? t->nbytes : 1);
    if (!copy) return kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", t->name);
    memcpy(copy, t->data, t->nbytes);
    kvq_encoded_add_blob(out, "raw", copy, t->nbytes, 1);
    out->params = json_pack("{s:s}", "dtype", kvq_dtype_name(t->dtype));
    out->code_bits_per_weight = 8.0 * (double)kvq_dtype_size(t->dtype);
    out->predicted_mse = 0.0;
    kvq_encoded_add_part(out, "raw", 8.0 * (double)t->nbytes);
    char *js = json_dumps(out->params, JSON_COMPACT); // the parts sum to the stored bytes
    kvq_encoded_add_part(out, "header", js ? 8.0 * (double)strlen(js) : 0.0);
    free(js);
    return KVQ_OK;
}

static kvq_status none_check(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows,
                             int64_t cols, kvq_err *err) {
    const char *dt = json_string_value(json_object_get(params, "dtype"));
    kvq_dtype t;
    if (!dt || kvq_dtype_parse(dt, &t) != 0)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "codec 'none': bad or missing dtype '%s'", dt ? dt : "(null)");
    const kvq_blob_view *raw = kvq_blob_find(blobs, n_blobs, "raw");
    size_t need = (size_t)rows * (size_t)cols * kvq_dtype_size(t);
    if (!raw || raw->size != need)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "codec 'none': raw payload is %zu bytes, expected %zu",
                           raw ? raw->size : 0, need);
    return KVQ_OK;
}

static kvq_status none_decode(const json_t *params, const kvq_blob_view *blobs, int n_blobs,
                              int64_t rows, int64_t cols, float *out, kvq_err *err) {
    kvq_status s = none_check(params, blobs, n_blobs, rows, cols, err);
    if (s) return s;
    kvq_dtype t;
    kvq_dtype_parse(json_string_value(json_object_get(params, "dtype")), &t);
    kvq_dtype_to_f32(t, kvq_blob_find(blobs, n_blobs, "raw")->data, (size_t)rows * (size_t)cols, out);
    return KVQ_OK;
}

const kvq_codec_traits kvq_codec_none = {
    .name = "none",
    .summary = "lossless: tensors stored as in the source (zstd where it helps)",
    .lossless = 1,
    .parse = none_parse,
    .encode = none_encode,
    .check = none_check,
    .decode = none_decode,
    .example_args = "",
    .max_rel_err = 0,
};
