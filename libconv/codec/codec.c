// The codec traits table and the bookkeeping shared by every codec.
// New codecs: define `const kvq_codec_traits kvq_codec_<name>` and add it below.
#include "libconv/codec/codec.h"

#include <math.h>
#include <string.h>

extern const kvq_codec_traits kvq_codec_none;
extern const kvq_codec_traits kvq_codec_hyperquant;
extern const kvq_codec_traits kvq_codec_rtn;
extern const kvq_codec_traits kvq_codec_qet;
extern const kvq_codec_traits kvq_codec_pq;

static const kvq_codec_traits *const codec_table[] = {
    &kvq_codec_none,
    &kvq_codec_hyperquant,
    &kvq_codec_rtn,
    &kvq_codec_qet,
    &kvq_codec_pq,
};

int kvq_codec_count(void) { return (int)(sizeof codec_table / sizeof codec_table[0]); }

const kvq_codec_traits *kvq_codec_at(int i) {
    return i >= 0 && i < kvq_codec_count() ? codec_table[i] : NULL;
}

const kvq_codec_traits *kvq_codec_find(const char *name) {
    for (int i = 0; i < kvq_codec_count(); i++)
        if (strcmp(codec_table[i]->name, name) == 0) return codec_table[i];
    return NULL;
}

kvq_status kvq_codec_parse_spec(const char *spec, const kvq_codec_traits **codec, json_t **cfg,
                                kvq_err *err) {
    char name[64];
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n == 0 || n >= sizeof name)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec spec '%s': missing or overlong codec name", spec);
    memcpy(name, spec, n);
    name[n] = 0;
    const kvq_codec_traits *c = kvq_codec_find(name);
    if (!c) {
        char known[256] = "";
        for (int i = 0; i < kvq_codec_count(); i++) {
            strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
            strncat(known, codec_table[i]->name, sizeof known - strlen(known) - 1);
        }
        return kvq_err_set(err, KVQ_ERR_ARG, "codec spec '%s': unknown codec '%s' (known: %s)", spec,
                           name, known);
    }
    kvq_status s = c->parse(colon ? colon + 1 : "", cfg, err);
    if (s != KVQ_OK) return s;
    *codec = c;
    return KVQ_OK;
}

double kvq_codec_predict_bits(const kvq_codec_traits *c, const json_t *cfg, int64_t rows, int64_t cols,
                              kvq_dtype src) {
    if (c->predict_bits) return c->predict_bits(cfg, rows, cols, src);
    return 8.0 * (double)kvq_dtype_size(src) * (double)rows * (double)cols;
}

kvq_status kvq_codec_spec_with_rate(const char *spec, double bits, kvq_dtype src, char *out, size_t n,
                                    kvq_err *err) {
    const kvq_codec_traits *c;
    json_t *cfg = NULL;
    kvq_status s = kvq_codec_parse_spec(spec, &c, &cfg, err);
    json_decref(cfg);
    if (s) return s;
    if (!c->with_rate)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec spec '%s': codec '%s' has no rate to set to %g bits", spec,
                           c->name, bits);
    if (!(bits > 0 && bits <= 32))
        return kvq_err_set(err, KVQ_ERR_ARG, "codec spec '%s': rate %g bits/weight outside (0, 32]", spec, bits);
    const char *colon = strchr(spec, ':');
    char args[256];
    s = c->with_rate(colon ? colon + 1 : "", bits, src, args, sizeof args, err);
    if (s) return s;
    if ((size_t)snprintf(out, n, "%s:%s", c->name, args) >= n)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec spec '%s': too long at rate %g", spec, bits);
    // the result must parse: the codec's own range checks apply
    if ((s = kvq_codec_parse_spec(out, &c, &cfg, err)) == KVQ_OK) json_decref(cfg);
    return s;
}

kvq_status kvq_codec_check_file(kvq_file *f, kvq_err *err) {
    const char *path = kvq_file_path(f);
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(kvq_file_manifest(f), "tensors"), i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        const json_t *codec = json_object_get(t, "codec"), *sh = json_object_get(t, "shape");
        const kvq_codec_traits *c = kvq_codec_find(json_string_value(json_object_get(codec, "name")));
        if (!c) // the schema admits only names of this table (test_codec_table keeps them equal)
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "%s: tensor '%s': codec not in this build", path, name);
        if (json_is_true(json_object_get(codec, "lossless")) != (c->lossless != 0))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s': codec.lossless is %s, codec '%s' is %s", path, name,
                               json_is_true(json_object_get(codec, "lossless")) ? "true" : "false", c->name,
                               c->lossless ? "lossless" : "lossy");
        // (rows, cols) as the runtime decodes it: cols the last dimension (schema: numel ≤ 2^40)
        const size_t nd = json_array_size(sh);
        const int64_t n = (int64_t)kvq_file_tensor_numel(t), cols = nd ? json_integer_value(json_array_get(sh, nd - 1)) : 1,
                      rows = cols ? n / cols : 0;
        kvq_blob_view v[KVQ_MAX_BLOBS];
        int nv = 0;
        const char *role;
        json_t *ev;
        const json_t *ents = json_object_get(t, "entries");
        if (json_object_size(ents) > KVQ_MAX_BLOBS)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s': %zu entries (a codec stores at most %d)", path, name,
                               json_object_size(ents), KVQ_MAX_BLOBS);
        const char *read = NULL; // the entry whose data check reads (c->check_data)
        json_object_foreach((json_t *)ents, role, ev) {
            uint64_t size = 0;
            const void *data = NULL;
            if (kvq_file_entry_size(f, json_string_value(ev), &size) != KVQ_OK)
                return kvq_err_set(err, KVQ_ERR_MISSING, "%s: tensor '%s': no entry '%s'", path, name, json_string_value(ev));
            if (c->check_data && !strcmp(role, c->check_data)) {
                size_t got = 0;
                kvq_status es = kvq_file_entry(f, json_string_value(ev), &data, &got, err);
                if (es) {
                    kvq_err_prefix(err, "%s: tensor '%s'", path, name);
                    return es;
                }
                read = json_string_value(ev);
            }
            v[nv++] = (kvq_blob_view){role, data, (size_t)size};
        }
        kvq_status s = c->check ? c->check(json_object_get(codec, "params"), v, nv, rows, cols, err) : KVQ_OK;
        if (read) kvq_file_release(f, read);
        if (s) {
            kvq_err_prefix(err, "%s: tensor '%s'", path, name);
            return s;
        }
    }
    return KVQ_OK;
}
