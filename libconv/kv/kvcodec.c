// The KV codec table (rows live in the codecs' files), the `--kv` spec front end,
// multi-token encode/decode wrappers and state serialization (JSON params + one float32
// blob per table).
#include "libconv/kv/kvcodec.h"
#include "kernels/splitmix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- the table: one row per codec, defined in the codec's own file

extern const kvq_kvcodec_traits kvq_kv_fp16_row, kvq_kv_int_row, kvq_kv_kivi_row, kvq_kv_hqmq_row, kvq_kv_octopus_row,
    kvq_kv_turbo_row, kvq_kv_turbo_prod_row, kvq_kv_qturbo_row, kvq_kv_hqkv_row;

static const kvq_kvcodec_traits *const kv_table[] = {
    &kvq_kv_fp16_row,    &kvq_kv_int_row,   &kvq_kv_kivi_row,       &kvq_kv_hqmq_row,   &kvq_kv_octopus_row,
    &kvq_kv_turbo_row,   &kvq_kv_turbo_prod_row, &kvq_kv_qturbo_row, &kvq_kv_hqkv_row,
};

int kvq_kvcodec_count(void) { return (int)(sizeof kv_table / sizeof kv_table[0]); }

const kvq_kvcodec_traits *kvq_kvcodec_at(int i) { return i >= 0 && i < kvq_kvcodec_count() ? kv_table[i] : NULL; }

const kvq_kvcodec_traits *kvq_kvcodec_find(const char *name) {
    for (int i = 0; name && i < kvq_kvcodec_count(); i++)
        if (!strcmp(kv_table[i]->name, name)) return kv_table[i];
    return NULL;
}

static const kvq_kvcodec_vt *kv_vt_for(const kvq_kvspec *s, int role) {
    const kvq_kvcodec_traits *t = kvq_kvcodec_find(s->name);
    return !t ? NULL : role == KVQ_KV_K ? t->vt_k : t->vt_v;
}

// ---- spec strings: split, look the name up, let its row parse the rest

kvq_status kvq_kvspec_parse(const char *spec, kvq_kvspec *o, kvq_err *err) {
    memset(o, 0, sizeof *o);
    char buf[128];
    if (!spec || strlen(spec) >= sizeof buf)
        return kvq_err_set(err, KVQ_ERR_ARG, "--kv: missing or overlong spec");
    strcpy(buf, spec);
    char *fld[8];
    int nf = 0;
    for (char *p = buf, *t; nf < 8 && (t = strsep(&p, ":"));) fld[nf++] = t;
    const kvq_kvcodec_traits *t = kvq_kvcodec_find(fld[0]);
    if (!t) {
        char names[256] = "";
        for (int i = 0; i < kvq_kvcodec_count(); i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", kv_table[i]->name);
        return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': unknown codec '%s' (%s)", spec, fld[0], names);
    }
    snprintf(o->name, sizeof o->name, "%s", t->name);
    return t->parse(spec, fld, nf, o, err);
}

int kvq_kvspec_format(const kvq_kvspec *s, char *buf, size_t n) {
    const kvq_kvcodec_traits *t = kvq_kvcodec_find(s->name);
    return t ? t->format(s, buf, n) : snprintf(buf, n, "%s", s->name);
}

// ---- states ----

uint64_t kvq_kv_seed(uint64_t seed, int layer, int head, int role) {
    kvq_kvrng r = {seed ^ 0x6b7671ull};
    kvq_kvrng_u64(&r);
    r.s ^= (uint64_t)(layer + 1) * KVQ_SPLITMIX_GOLDEN;
    kvq_kvrng_u64(&r);
    r.s ^= (uint64_t)(head + 1) * 0xC2B2AE3D27D4EB4Full;
    kvq_kvrng_u64(&r);
    r.s ^= (uint64_t)(role + 1) * 0x165667B19E3779F9ull;
    return kvq_kvrng_u64(&r);
}

static kvq_status codec_new(const kvq_kvspec *spec, int d, kvq_kv_role role, uint64_t seed, int stored,
                            kvq_kvcodec **out, kvq_err *err) {
    *out = NULL;
    const kvq_kvcodec_vt *vt = kv_vt_for(spec, role);
    if (!vt) return kvq_err_set(err, KVQ_ERR_ARG, "kv codec '%s': unknown", spec->name);
    if (d < 4 || d > 4096)
        return kvq_err_set(err, KVQ_ERR_ARG, "kv codec '%s': head_dim %d out of range [4, 4096]", spec->name, d);
    kvq_kvcodec *c = calloc(1, sizeof *c);
    if (!c) return kvq_err_set(err, KVQ_ERR_NOMEM, "kv codec: out of memory");
    c->vt = vt;
    c->spec = *spec;
    c->d = d;
    c->role = role;
    c->seed = seed;
    c->group = 1;
    c->fixed = 1;
    c->stored = stored;
    kvq_status st = vt->init(c, err);
    if (st) {
        kvq_err_prefix(err, "kv codec '%s' (head_dim %d, %s)", spec->name, d, role ? "V" : "K");
        kvq_kvcodec_free(c);
        return st;
    }
    *out = c;
    return KVQ_OK;
}

kvq_status kvq_kvcodec_new(const kvq_kvspec *spec, int d, kvq_kv_role role, uint64_t seed, kvq_kvcodec **out,
                           kvq_err *err) {
    return codec_new(spec, d, role, seed, 0, out, err);
}

kvq_status kvq_kvcodec_new_stored(const kvq_kvspec *spec, int d, kvq_kv_role role, uint64_t seed, kvq_kvcodec **out,
                                  kvq_err *err) {
    return codec_new(spec, d, role, seed, 1, out, err);
}

kvq_status kvq_kvcodec_check_tables(const kvq_kvcodec *c, kvq_err *err) {
    kvq_kvtable t[8];
    int nt = c->vt->tables ? c->vt->tables(c, t) : 0;
    for (int i = 0; i < nt; i++)
        for (size_t k = 0; k < t[i].count; k++)
            if (!isfinite(t[i].data[k]))
                return kvq_err_set(err, KVQ_ERR_FORMAT, "table '%s': value %zu is not finite", t[i].name, k);
    return c->vt->check_tables ? c->vt->check_tables(c, err) : KVQ_OK;
}

void kvq_kvcodec_free(kvq_kvcodec *c) {
    if (!c) return;
    if (c->vt && c->vt->free) c->vt->free(c);
    free(c);
}

size_t kvq_kvcodec_xbytes(const kvq_kvcodec *c) {
    return c->vt->xbytes && c->vt->xform && c->vt->xscore && c->vt->xvsum ? c->vt->xbytes(c) : 0;
}

size_t kvq_kvcodec_bound(const kvq_kvcodec *c, int n) {
    return c->vt->max_bytes(c) * (size_t)((n + c->group - 1) / c->group);
}

kvq_status kvq_kvcodec_encode(kvq_kvcodec *c, const float *x, int n, uint8_t *out, size_t cap,
                              size_t *off, kvq_err *err) {
    if (n % c->group)
        return kvq_err_set(err, KVQ_ERR_ARG, "kv codec '%s': %d tokens is not a multiple of the group %d",
                           c->spec.name, n, c->group);
    size_t mb = c->vt->max_bytes(c), pos = 0;
    off[0] = 0;
    for (int g = 0; g < n / c->group; g++) {
        if (pos + mb > cap)
            return kvq_err_set(err, KVQ_ERR_ARG, "kv codec '%s': output buffer of %zu bytes too small",
                               c->spec.name, cap);
        size_t len = 0;
        kvq_status st = c->vt->encode(c, x + (size_t)g * c->group * c->d, out + pos, &len, err);
        if (st) return st;
        pos += len;
        off[g + 1] = pos;
    }
    return KVQ_OK;
}

void kvq_kvcodec_decode(const kvq_kvcodec *c, const uint8_t *in, const size_t *off, int n, float *out) {
    for (int g = 0; g < n / c->group; g++)
        c->vt->decode(c, in + off[g], off[g + 1] - off[g], out + (size_t)g * c->group * c->d);
}

double kvq_kvcodec_bits_stored(const kvq_kvcodec *c, const size_t *off, int n) {
    int ng = n / c->group;
    double bits = 8.0 * (double)off[ng];
    if (!c->fixed) bits += (double)ng * KVQ_KV_LEN_BITS;
    return bits / ((double)n * c->d);
}

// ---- serialization ----

kvq_status kvq_kvcodec_save(const kvq_kvcodec *c, json_t **params, kvq_blob *blobs, int max_blobs,
                            int *n_blobs, kvq_err *err) {
    char spec[128];
    kvq_kvspec_format(&c->spec, spec, sizeof spec);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    *params = json_pack("{s:s, s:i, s:s, s:s, s:f}", "spec", spec, "head_dim", c->d, "role",
                        c->role ? "V" : "K", "seed", seed, "bits_formula", c->vt->bits_formula(c));
    if (!*params) return kvq_err_set(err, KVQ_ERR_NOMEM, "kv codec: cannot build params");
    kvq_kvtable t[8];
    int nt = c->vt->tables ? c->vt->tables(c, t) : 0;
    *n_blobs = 0;
    for (int i = 0; i < nt; i++) {
        if (*n_blobs >= max_blobs) {
            json_decref(*params);
            return kvq_err_set(err, KVQ_ERR_ARG, "kv codec '%s': more than %d tables", spec, max_blobs);
        }
        kvq_blob *b = &blobs[(*n_blobs)++];
        memset(b, 0, sizeof *b);
        snprintf(b->role, sizeof b->role, "tbl/%s", t[i].name);
        b->size = t[i].count * sizeof(float);
        b->data = malloc(b->size ? b->size : 1);
        if (!b->data) return kvq_err_set(err, KVQ_ERR_NOMEM, "kv codec: out of memory");
        memcpy(b->data, t[i].data, b->size);
    }
    return KVQ_OK;
}

kvq_status kvq_kvcodec_load(const json_t *params, const kvq_blob_view *blobs, int n_blobs,
                            kvq_kvcodec **out, kvq_err *err) {
    *out = NULL;
    const char *spec = NULL, *role = NULL, *seed = NULL;
    int d = 0;
    if (json_unpack((json_t *)params, "{s:s, s:i, s:s, s:s}", "spec", &spec, "head_dim", &d, "role",
                    &role, "seed", &seed))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "kv params: need spec, head_dim, role, seed");
    kvq_kvspec s;
    kvq_status st = kvq_kvspec_parse(spec, &s, err);
    if (st) return st;
    char *e;
    unsigned long long sd = strtoull(seed, &e, 10);
    if (*e) return kvq_err_set(err, KVQ_ERR_FORMAT, "kv params: bad seed '%s'", seed);
    if (strcmp(role, "K") && strcmp(role, "V")) return kvq_err_set(err, KVQ_ERR_FORMAT, "kv params: role '%s' is not K or V", role);
    kvq_kvcodec *c;
    st = kvq_kvcodec_new_stored(&s, d, strcmp(role, "V") ? KVQ_KV_K : KVQ_KV_V, sd, &c, err);
    if (st) return st;
    kvq_kvtable t[8];
    int nt = c->vt->tables ? c->vt->tables(c, t) : 0;
    for (int i = 0; i < nt; i++) {
        char r[40];
        snprintf(r, sizeof r, "tbl/%s", t[i].name);
        const kvq_blob_view *b = kvq_blob_find(blobs, n_blobs, r);
        if (!b) {
            kvq_kvcodec_free(c);
            return kvq_err_set(err, KVQ_ERR_MISSING, "kv state '%s': table blob '%s' missing", spec, r);
        }
        if (b->size != t[i].count * sizeof(float)) {
            kvq_kvcodec_free(c);
            return kvq_err_set(err, KVQ_ERR_FORMAT, "kv state '%s': blob '%s' has %zu bytes, expected %zu",
                               spec, r, b->size, t[i].count * sizeof(float));
        }
        memcpy(t[i].data, b->data, b->size);
    }
    if ((st = kvq_kvcodec_check_tables(c, err))) {
        kvq_err_prefix(err, "kv state '%s'", spec);
        kvq_kvcodec_free(c);
        return st;
    }
    if (c->vt->refresh) c->vt->refresh(c);
    *out = c;
    return KVQ_OK;
}
