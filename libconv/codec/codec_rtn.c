// The round-to-nearest baseline "rtn:<bits>:g<group>": per group of `group` consecutive
// weights along cols, asymmetric uniform quantization with an fp16 scale and an fp16 zero
// (the group minimum): x̂ = zero + q·scale, q in [0, 2^bits − 1]. Codes are packed
// LSB-first, row-major; "scales" holds (scale, zero) fp16 pairs per group.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/hqx.h"
#include "libconv/codec/codec.h"
#include "libconv/codec/rtn.h"
#include "libconv/quant/rice.h"

static kvq_status rtn_parse(const char *args, json_t **cfg, kvq_err *err) {
    int bits = 0, group = 128, n = 0;
    if (!args || sscanf(args, "%d%n", &bits, &n) != 1)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'rtn:%s': expected rtn:<bits>:g<group>", args ? args : "");
    const char *rest = args + n;
    if (*rest) {
        int m = 0;
        if (sscanf(rest, ":g%d%n", &group, &m) != 1 || rest[m])
            return kvq_err_set(err, KVQ_ERR_ARG, "codec 'rtn:%s': expected rtn:<bits>:g<group>", args);
    }
    if (bits < 1 || bits > 8) return kvq_err_set(err, KVQ_ERR_ARG, "codec 'rtn:%s': bits must be 1..8", args);
    if (group < 1 || group > (1 << 20))
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'rtn:%s': group must be 1..1048576", args);
    *cfg = json_pack("{s:i,s:i}", "bits", bits, "group", group);
    return KVQ_OK;
}

static kvq_status rtn_encode(const json_t *cfg, const kvq_codec_input *in, kvq_encoded *out, kvq_err *err) {
    const char *name = in->src && in->src->name ? in->src->name : "(unnamed)";
    int bits = (int)json_integer_value(json_object_get(cfg, "bits"));
    int64_t g = json_integer_value(json_object_get(cfg, "group")), rows = in->rows, cols = in->cols;
    int64_t gpr = (cols + g - 1) / g, numel = rows * cols;
    uint32_t qmax = (1u << bits) - 1u;
    size_t cbytes = (size_t)((numel * bits + 7) / 8), sbytes = (size_t)(rows * gpr * 4);
    memset(out, 0, sizeof *out);
    for (int64_t i = 0; i < numel; i++)
        if (!isfinite(in->x[i]))
            return kvq_err_set(err, KVQ_ERR_NUMERIC, "tensor '%s': non-finite value %g at [%lld, %lld]", name,
                               (double)in->x[i], (long long)(i / cols), (long long)(i % cols));
    uint8_t *codes = malloc(cbytes ? cbytes : 1), *sc = malloc(sbytes ? sbytes : 1);
    if (!codes || !sc) { free(codes); free(sc); return kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name); }
    kvq_bitwriter w;
    kvq_bw_init(&w, codes, cbytes);
    double se = 0.0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < gpr; j++) {
            const float *x = in->x + r * cols + j * g;
            int64_t len = (j + 1) * g <= cols ? g : cols - j * g;
            float mn = x[0], mx = x[0];
            for (int64_t i = 1; i < len; i++) { mn = fminf(mn, x[i]); mx = fmaxf(mx, x[i]); }
            uint16_t hs = kvq_f32_to_f16((mx - mn) / (float)qmax), hz = kvq_f32_to_f16(mn);
            float s = kvq_f16_to_f32(hs), z = kvq_f16_to_f32(hz);
            if (!isfinite(s) || !isfinite(z)) {
                free(codes); free(sc);
                return kvq_err_set(err, KVQ_ERR_NUMERIC, "tensor '%s': row %lld group %lld range [%g, %g] exceeds fp16",
                                   name, (long long)r, (long long)j, (double)mn, (double)mx);
            }
            uint8_t *p = sc + 4 * (r * gpr + j);
            p[0] = (uint8_t)hs; p[1] = (uint8_t)(hs >> 8); p[2] = (uint8_t)hz; p[3] = (uint8_t)(hz >> 8);
            for (int64_t i = 0; i < len; i++) {
                float q = s > 0.0f ? rintf((x[i] - z) / s) : 0.0f;
                q = fminf(fmaxf(q, 0.0f), (float)qmax);
                kvq_bw_put(&w, (uint32_t)q, bits);
                double d = (double)x[i] - (double)(q * s + z);
                se += d * d;
            }
        }
    kvq_bw_finish(&w);
    kvq_encoded_add_blob(out, "codes", codes, cbytes, 0);
    kvq_encoded_add_blob(out, "scales", sc, sbytes, 0);
    out->params = json_pack("{s:i,s:i,s:i}", "v", 1, "bits", bits, "group", (int)g);
    char *js = json_dumps(out->params, JSON_COMPACT);
    size_t jl = js ? strlen(js) : 0;
    free(js);
    kvq_encoded_add_part(out, "codes", 8.0 * (double)cbytes);
    kvq_encoded_add_part(out, "scales", 8.0 * (double)sbytes);
    kvq_encoded_add_part(out, "header", 8.0 * (double)jl);
    out->code_bits_per_weight = (double)bits;
    out->predicted_mse = se / (double)numel;
    return KVQ_OK;
}

static kvq_status rtn_check(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows,
                            int64_t cols, kvq_err *err) {
    json_t *jb = json_object_get(params, "bits"), *jg = json_object_get(params, "group");
    if (json_integer_value(json_object_get(params, "v")) != 1)
        return kvq_err_set(err, KVQ_ERR_VERSION, "rtn: missing or unknown params version");
    if (!json_is_integer(jb) || !json_is_integer(jg) || json_integer_value(jb) < 1 || json_integer_value(jb) > 8 ||
        json_integer_value(jg) < 1 || json_integer_value(jg) > (1 << 20))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "rtn: bad bits or group in params");
    int bits = (int)json_integer_value(jb);
    int64_t g = json_integer_value(jg), gpr = (cols + g - 1) / g, numel = rows * cols;
    const kvq_blob_view *c = kvq_blob_find(blobs, n_blobs, "codes"), *s = kvq_blob_find(blobs, n_blobs, "scales");
    if (!c || !s || c->size != (size_t)((numel * bits + 7) / 8) || s->size != (size_t)(rows * gpr * 4))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "rtn: codes/scales blobs missing or of the wrong size");
    return KVQ_OK;
}

static kvq_status rtn_decode(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows,
                             int64_t cols, float *out, kvq_err *err) {
    kvq_status st = rtn_check(params, blobs, n_blobs, rows, cols, err);
    if (st) return st;
    int bits = (int)json_integer_value(json_object_get(params, "bits"));
    int64_t g = json_integer_value(json_object_get(params, "group")), gpr = (cols + g - 1) / g;
    const uint8_t *cb = kvq_blob_find(blobs, n_blobs, "codes")->data, *sb = kvq_blob_find(blobs, n_blobs, "scales")->data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        kvq_bitr rd = {cb, (size_t)((uint64_t)(r * cols) * (uint64_t)bits)}; // this row's codes
        for (int64_t i = 0; i < cols; i++) {
            int64_t idx = r * cols + i, j = i / g;
            float q = (float)kvq_bitr_get(&rd, bits);
            const uint8_t *p = sb + 4 * (r * gpr + j);
            float sc = kvq_f16_to_f32((uint16_t)(p[0] | p[1] << 8)), z = kvq_f16_to_f32((uint16_t)(p[2] | p[3] << 8));
            out[idx] = q * sc + z;
        }
    }
    return KVQ_OK;
}

// Exact: packed codes, (scale, zero) fp16 pairs per group, the params JSON.
static double rtn_predict_bits(const json_t *cfg, int64_t rows, int64_t cols, kvq_dtype src) {
    int bits = (int)json_integer_value(json_object_get(cfg, "bits"));
    int64_t g = json_integer_value(json_object_get(cfg, "group")), gpr = (cols + g - 1) / g;
    char js[96];
    int jl = snprintf(js, sizeof js, "{\"v\":1,\"bits\":%d,\"group\":%d}", bits, (int)g);
    return 8.0 * (double)((rows * cols * bits + 7) / 8) + 32.0 * (double)(rows * gpr) + 8.0 * jl;
}

// bits per weight = code bits + 32 / group: the code bits are the rest, rounded.
static kvq_status rtn_with_rate(const char *args, double bits, kvq_dtype src, char *out, size_t n, kvq_err *err) {
    int b = 0, group = 128, k = 0;
    if (sscanf(args, "%d%n", &b, &k) != 1) return kvq_err_set(err, KVQ_ERR_ARG, "codec 'rtn:%s': expected rtn:<bits>:g<group>", args);
    if (args[k] && sscanf(args + k, ":g%d", &group) != 1)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'rtn:%s': expected rtn:<bits>:g<group>", args);
    int nb = (int)lround(bits - 32.0 / (double)(group > 0 ? group : 128));
    if (nb < 1 || nb > 8)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'rtn:%s': rate %g bits/weight needs %d-bit codes (1..8)", args, bits, nb);
    snprintf(out, n, "%d:g%d", nb, group);
    return KVQ_OK;
}

const kvq_codec_traits kvq_codec_rtn = {
    .name = "rtn",
    .summary = "round-to-nearest baseline: per-group asymmetric ints, fp16 scale+zero, e.g. rtn:4:g128",
    .lossless = 0,
    .parse = rtn_parse,
    .encode = rtn_encode,
    .check = rtn_check,
    .decode = rtn_decode,
    .example_args = "4:g128",
    .max_rel_err = 0.15,
    .predict_bits = rtn_predict_bits,
    .with_rate = rtn_with_rate,
};

// ---- execution layout (kernels/hq_layout.h, rotate = 0): the codes as nibbles (plus bit
// planes for 5..7 bits), scale and zero per group; products run on the hqx kernels.

kvq_status kvq_rtn_pack(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows, int64_t cols,
                        kvq_hqx *out, kvq_err *err) {
    memset(out, 0, sizeof *out);
    kvq_status st = rtn_check(params, blobs, n_blobs, rows, cols, err); // what decode checks, first
    if (st) return st;
    int bits = (int)json_integer_value(json_object_get(params, "bits"));
    int64_t g = json_integer_value(json_object_get(params, "group"));
    if (bits < 1 || bits > 7 || g % KVQ_HQX_CHUNK || g < KVQ_HQX_CHUNK || g > KVQ_HQ_MAX_TILE || cols < 1 ||
        ((cols + g - 1) / g) * g >= ((int64_t)1 << KVQ_HQX_ESC_COL_BITS))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "rtn: no execution layout for %d bits in groups of %lld",
                           bits, (long long)g);
    const int64_t gpr = (cols + g - 1) / g, numel = rows * cols, cols_p = gpr * g, n = rows * cols_p;
    const kvq_blob_view *c = kvq_blob_find(blobs, n_blobs, "codes"), *s = kvq_blob_find(blobs, n_blobs, "scales");
    (void)numel;
    for (int64_t k = 0; k < 2 * rows * gpr; k++) { // fp16 (scale, zero) pairs: an Inf or NaN poisons every product
        const uint8_t *p = (const uint8_t *)s->data + 2 * k;
        if (!isfinite(kvq_f16_to_f32((uint16_t)(p[0] | p[1] << 8))))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "rtn: group %lld's %s is not finite", (long long)(k / 2),
                               k % 2 ? "zero" : "scale");
    }
    const int vbits = bits < 4 ? 4 : bits, np = kvq_hqx_planes(vbits);
    out->lat = KVQ_HQ_LAT_Z;
    out->rotate = 0;
    out->tile = (int)g;
    out->vbits = vbits;
    out->rows = rows;
    out->cols = cols;
    out->cols_p = cols_p;
    out->q = kvq_hqx_alloc((size_t)n / 2);
    out->hb = np ? kvq_hqx_alloc((size_t)n / 64 * (size_t)np * 8) : NULL;
    out->scale = malloc(sizeof(float) * (size_t)(rows * gpr));
    out->zero = malloc(sizeof(float) * (size_t)(rows * gpr));
    out->esc_row = calloc((size_t)rows + 1, 4);
    if (!out->q || (np && !out->hb) || !out->scale || !out->zero || !out->esc_row) {
        kvq_hqx_free(out);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "rtn: out of memory for the execution layout (%lld weights)", (long long)n);
    }
    const uint8_t *cb = c->data, *sb = s->data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < gpr; j++) {
            const uint8_t *p = sb + 4 * (r * gpr + j);
            out->scale[r * gpr + j] = kvq_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
            out->zero[r * gpr + j] = kvq_f16_to_f32((uint16_t)(p[2] | p[3] << 8));
        }
        kvq_bitr rd = {cb, (size_t)((uint64_t)(r * cols) * (uint64_t)bits)};
        for (int64_t i = 0; i < cols; i++) {
            uint32_t q = kvq_bitr_get(&rd, bits);
            int64_t gi = (r * cols_p + i) / 64, b = (r * cols_p + i) % 64;
            out->q[gi * 32 + (b & 31)] |= (uint8_t)((q & 15) << (b < 32 ? 0 : 4));
            for (int pl = 0; pl < np; pl++) out->hb[gi * np + pl] |= (uint64_t)((q >> (4 + pl)) & 1) << b;
        }
    }
    return KVQ_OK;
}
