// The "hyperquant" entry of the codec table: spec parsing
//   hyperquant:<lattice>:<bps>[:int8][:cast=int8|fp8|nvfp4|mxfp4][:nb=6|8|10|12|16][:tile=N][:table]
//              [:blocks=<R>@<bps1>/<bps2>/...][:ldlq[=<damp>]]
// (<bps> may instead be "<x>db" for a fixed SNR), and the encode/decode adapters. blocks= cuts
// the matrix into blocks of R rows, each at its own rate (hq_blocks.c; <bps> is then the
// tensor's mean, the blocks' rates weighted by their rows, for size predictions).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "libconv/codec/hyperquant/hq_impl.h"
#include "libconv/codec/hyperquant/hyperquant.h"

static kvq_status hq_parse(const char *args, json_t **cfg, kvq_err *err) {
    char buf[2048];
    if (!args || !*args || strlen(args) >= sizeof buf)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': expected hyperquant:<lattice>:<bps>[:options]",
                           args ? args : "");
    strcpy(buf, args);
    char *save = NULL, *tok = strtok_r(buf, ":", &save);
    kvq_lattice lat;
    if (!tok || kvq_lattice_parse(tok, &lat))
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': unknown lattice '%s' (e8, d4, a2, z)", args,
                           tok ? tok : "");
    kvq_hq_opts o = kvq_hq_opts_default(lat, NAN);
    json_t *blocks = NULL;
    long long block_rows = 0;
    tok = strtok_r(NULL, ":", &save);
    char *end = NULL;
    double v = tok ? strtod(tok, &end) : NAN;
    if (!tok || end == tok) return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': missing <bps>", args);
    if (strcasecmp(end, "db") == 0) {
        if (!(v >= 0 && v <= 50)) return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': SNR must be in [0, 50] dB", args);
        o.snr_db = v;
    } else if (*end == 0) {
        if (!(v >= 1.0 && v <= 8.5))
            return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': bps %g outside [1, 8.5]", args, v);
        o.bps = v;
    } else {
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': bad rate '%s'", args, tok);
    }
    while ((tok = strtok_r(NULL, ":", &save))) {
        if (strcmp(tok, "int8") == 0) o.int8 = 1;
        else if (strcmp(tok, "ldlq") == 0) o.ldlq = 1;
        else if (strncmp(tok, "ldlq=", 5) == 0) {
            char *e2 = NULL;
            o.ldlq = 1, o.ldlq_damp = strtod(tok + 5, &e2);
            if (e2 == tok + 5 || *e2 || !(o.ldlq_damp > 0.0 && o.ldlq_damp <= 10.0)) {
                json_decref(blocks);
                return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': ldlq damping must be a number in (0, 10]", args);
            }
        }
        else if (strcmp(tok, "table") == 0) o.table_only = 1;
        else if (strncmp(tok, "cast=", 5) == 0) {
            if (kvq_cast_parse(tok + 5, &o.cast))
                return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': unknown cast '%s'", args, tok + 5);
        } else if (strncmp(tok, "nb=", 3) == 0) {
            o.norm_bits = atoi(tok + 3);
            if (o.norm_bits != 6 && o.norm_bits != 8 && o.norm_bits != 10 && o.norm_bits != 12 && o.norm_bits != 16)
                return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': nb must be 6, 8, 10, 12 or 16", args);
        } else if (strncmp(tok, "tile=", 5) == 0) {
            o.max_tile = atoi(tok + 5);
            if (o.max_tile < 16 || o.max_tile > 1024 || (o.max_tile & (o.max_tile - 1)))
                return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': tile must be a power of two in [16, 1024]", args);
        } else if (strncmp(tok, "blocks=", 7) == 0) {
            char *e2 = NULL;
            block_rows = strtoll(tok + 7, &e2, 10);
            if (blocks || block_rows < 1 || *e2 != '@') {
                json_decref(blocks);
                return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': expected blocks=<rows>@<bps>/<bps>/...", args);
            }
            blocks = json_array();
            for (char *q = e2 + 1;;) {
                double r = strtod(q, &e2);
                if (e2 == q || !(r >= 1.0 && r <= 8.5) || (*e2 && *e2 != '/') || json_array_size(blocks) >= KVQ_HQ_MAX_BLOCKS) {
                    json_decref(blocks);
                    return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': block rates must be 1 to %d numbers in [1, 8.5] "
                                       "separated by '/'", args, KVQ_HQ_MAX_BLOCKS);
                }
                json_array_append_new(blocks, json_real(r));
                if (!*e2) break;
                q = e2 + 1;
            }
        } else {
            json_decref(blocks);
            return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': unknown option '%s'", args, tok);
        }
    }
    if (blocks && (o.int8 || isnan(o.bps))) {
        json_decref(blocks);
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': blocks= needs a rate and Rice mode", args);
    }
    if (o.ldlq && o.int8) {
        json_decref(blocks);
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': ldlq needs Rice mode (not int8)", args);
    }
    if (o.int8 && isnan(o.bps) && isnan(o.snr_db))
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': missing rate", args);
    *cfg = json_pack("{s:s,s:f,s:f,s:i,s:i,s:b,s:b,s:s}", "lattice", kvq_lattice_name(lat), "bps",
                     isnan(o.bps) ? -1.0 : o.bps, "snr_db", isnan(o.snr_db) ? -1.0 : o.snr_db, "tile", o.max_tile,
                     "norm_bits", o.norm_bits, "int8", o.int8, "table", o.table_only, "cast", kvq_cast_name(o.cast));
    if (*cfg && o.ldlq) json_object_set_new(*cfg, "ldlq", json_real(o.ldlq_damp));
    if (*cfg && blocks) {
        json_object_set_new(*cfg, "block_rows", json_integer(block_rows));
        json_object_set_new(*cfg, "block_bps", blocks);
    } else json_decref(blocks);
    return *cfg ? KVQ_OK : kvq_err_set(err, KVQ_ERR_NOMEM, "codec 'hyperquant:%s': out of memory", args);
}

static kvq_status hq_encode(const json_t *cfg, const kvq_codec_input *in, kvq_encoded *out, kvq_err *err) {
    kvq_lattice lat;
    if (kvq_lattice_parse(json_string_value(json_object_get(cfg, "lattice")), &lat))
        return kvq_err_set(err, KVQ_ERR_ARG, "hyperquant: bad config");
    double bps = json_number_value(json_object_get(cfg, "bps")), snr = json_number_value(json_object_get(cfg, "snr_db"));
    kvq_hq_opts o = kvq_hq_opts_default(lat, bps >= 0 ? bps : NAN);
    o.snr_db = snr >= 0 ? snr : NAN;
    o.max_tile = (int)json_integer_value(json_object_get(cfg, "tile"));
    o.norm_bits = (int)json_integer_value(json_object_get(cfg, "norm_bits"));
    o.int8 = json_is_true(json_object_get(cfg, "int8"));
    o.table_only = json_is_true(json_object_get(cfg, "table"));
    if (json_is_number(json_object_get(cfg, "ldlq"))) o.ldlq = 1, o.ldlq_damp = json_number_value(json_object_get(cfg, "ldlq"));
    if (kvq_cast_parse(json_string_value(json_object_get(cfg, "cast")), &o.cast))
        return kvq_err_set(err, KVQ_ERR_ARG, "hyperquant: bad config");
    json_t *bb = json_object_get(cfg, "block_bps");
    if (!bb) return kvq_hq_encode(&o, in, out, NULL, NULL, err);
    double bps_b[KVQ_HQ_MAX_BLOCKS];
    int n = (int)json_array_size(bb);
    for (int i = 0; i < n && i < KVQ_HQ_MAX_BLOCKS; i++) bps_b[i] = json_number_value(json_array_get(bb, i));
    return kvq_hq_encode_blocks(&o, bps_b, n, json_integer_value(json_object_get(cfg, "block_rows")), in, out, NULL, err);
}

static kvq_status hq_decode(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows,
                            int64_t cols, float *out, kvq_err *err) {
    if (kvq_hq_is_blocked(params)) return kvq_hq_blocks_decode(params, blobs, n_blobs, rows, cols, out, 0, err);
    kvq_hq_header h;
    kvq_status s = kvq_hq_header_parse(params, rows, cols, &h, err);
    if (s) return s;
    return kvq_hq_decode(&h, blobs, n_blobs, out, 0, err);
}

static kvq_status hq_check(const json_t *params, const kvq_blob_view *blobs, int n_blobs, int64_t rows, int64_t cols,
                           kvq_err *err) {
    if (kvq_hq_is_blocked(params)) return kvq_hq_blocks_check(params, blobs, n_blobs, rows, cols, err);
    kvq_hq_header h;
    const uint8_t *codes, *norms, *offs;
    size_t ncodes;
    kvq_status s = kvq_hq_header_parse(params, rows, cols, &h, err);
    return s ? s : kvq_hq_check_blobs(&h, blobs, n_blobs, &codes, &ncodes, &norms, &offs, err);
}

// The encoder calibrates to its bps over everything it stores (codes, norms, offsets, params):
// 3.000 / 3.999 bits/w measured over kvq-small-qwen3's 42 matrices at e8:3.0 / e8:4.0. A fixed
// SNR has no rate known before encoding (NAN).
static double hq_predict_bits(const json_t *cfg, int64_t rows, int64_t cols, kvq_dtype src) {
    double bps = json_number_value(json_object_get(cfg, "bps"));
    json_t *bb = json_object_get(cfg, "block_bps");
    int64_t br = json_integer_value(json_object_get(cfg, "block_rows"));
    if (bb && br > 0) { // the blocks' rates over their rows (a count that does not fit fails at encode)
        double bits = 0;
        for (size_t i = 0; i < json_array_size(bb); i++) {
            int64_t r0 = (int64_t)i * br, nr = rows - r0 < br ? rows - r0 : br;
            if (nr > 0) bits += json_number_value(json_array_get(bb, i)) * (double)nr * (double)cols;
        }
        return bits;
    }
    return bps > 0 ? bps * (double)rows * (double)cols : NAN;
}

// Replaces the <bps> field (the second) of "<lattice>:<bps>[:options]"; a blocks= option goes (one
// rate for the whole tensor is what a rate means).
static kvq_status hq_with_rate(const char *args, double bits, kvq_dtype src, char *out, size_t n, kvq_err *err) {
    const char *c1 = strchr(args, ':');
    if (!c1) return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': expected <lattice>:<bps>", args);
    const char *c2 = strchr(c1 + 1, ':');
    if ((size_t)snprintf(out, n, "%.*s:%.4g%s", (int)(c1 - args), args, bits, c2 ? c2 : "") >= n)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec 'hyperquant:%s': too long", args);
    char *b = strstr(out, ":blocks=");
    if (b) {
        char *e = strchr(b + 1, ':');
        memmove(b, e ? e : b + strlen(b), strlen(e ? e : b + strlen(b)) + 1);
    }
    return KVQ_OK;
}

const kvq_codec_traits kvq_codec_hyperquant = {
    .name = "hyperquant",
    .summary = "HyperQuant: RHT + E8/D4/A2/Z lattice + strip + Rice at any rate, e.g. hyperquant:e8:4.0",
    .lossless = 0,
    .reads_source = 1,
    .parse = hq_parse,
    .encode = hq_encode,
    .check = hq_check,
    .check_data = "offsets",
    .decode = hq_decode,
    .example_args = "e8:4.0",
    .max_rel_err = 0.1,
    .predict_bits = hq_predict_bits,
    .with_rate = hq_with_rate,
};
