// The KV-codec section of a .kvq: the converter writes the codec states (manifest
// "kv" object + one float32 entry "kv/tables"), the runtime rebuilds the cache from
// them. Layout of the section: docs/KV.md.
#include <stdlib.h>
#include <string.h>

#include "formats/kvqfile.h"
#include "libconv/kv/kvcodec.h"

#define KV_ENTRY "kv/tables"

kvq_status kvq_kv_build_section(const char *spec, int n_layers, int n_kv_heads, int head_dim, int n_ctx, int window,
                                int boundary, uint64_t seed, json_t **section, float **blob, size_t *n_floats,
                                kvq_err *err) {
    kvq_kvcache_policy pol = {window, boundary, seed, 0, 0};
    kvq_kvcache *c = NULL;
    kvq_status s = kvq_kvcache_codec_new(spec, n_layers, n_kv_heads, head_dim, 1, &pol, &c, err);
    if (s) return s;
    s = kvq_kvcache_codec_save(c, n_ctx, section, blob, n_floats, err);
    c->ops->free(c);
    if (s == KVQ_OK) json_object_set_new(*section, "entry", json_string(KV_ENTRY));
    return s;
}

kvq_status kvq_kv_write_section(kvq_writer *w, json_t *manifest, const char *spec, int n_layers,
                                int n_kv_heads, int head_dim, int n_ctx, int window, int boundary,
                                uint64_t seed, kvq_err *err) {
    json_t *sec = NULL;
    float *blob = NULL;
    size_t nf = 0;
    kvq_status s = kvq_kv_build_section(spec, n_layers, n_kv_heads, head_dim, n_ctx, window, boundary, seed, &sec,
                                        &blob, &nf, err);
    if (s) return s;
    // float32 little-endian on every platform kvq targets (x86-64, aarch64)
    s = kvq_writer_add(w, KV_ENTRY, blob, nf * sizeof(float), KVQ_ENTRY_ZSTD_AUTO, NULL, err);
    free(blob);
    if (s) { json_decref(sec); return s; }
    json_object_set_new(manifest, "kv", sec);
    return KVQ_OK;
}

kvq_status kvq_kv_open_from_file(kvq_file *f, int max_ctx, int eval, kvq_kvcache **out, kvq_err *err) {
    *out = NULL;
    const json_t *sec = json_object_get(kvq_file_manifest(f), "kv");
    if (!sec) return KVQ_OK;
    const char *entry = json_string_value(json_object_get(sec, "entry"));
    if (!entry) return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: manifest kv section has no \"entry\"", kvq_file_path(f));
    const void *data;
    size_t n;
    kvq_status s = kvq_file_entry(f, entry, &data, &n, err);
    if (s) return s;
    if (n % sizeof(float))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: entry '%s' has %zu bytes, not a multiple of 4", kvq_file_path(f), entry, n);
    float *blob = malloc(n ? n : 1);
    if (!blob) return kvq_err_set(err, KVQ_ERR_NOMEM, "kv section: out of memory");
    memcpy(blob, data, n);
    kvq_file_release(f, entry);
    s = kvq_kvcache_codec_load(sec, blob, n / sizeof(float), max_ctx, eval, out, err);
    free(blob);
    if (s) kvq_err_prefix(err, "%s", kvq_file_path(f));
    return s;
}
