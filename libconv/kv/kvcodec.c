// The KV codec registry, the `--kv` spec parser, multi-token encode/decode wrappers
// and state serialization (JSON params + one float32 blob per table).
#include "libconv/kv/kvcodec.h"
#include "kernels/splitmix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

extern const kvq_kvcodec_vt kvq_kv_fp16_vt, kvq_kv_int_vt, kvq_kv_kivi_vt, kvq_kv_hqmq_vt,
    kvq_kv_octopus_vt, kvq_kv_turbo_vt, kvq_kv_hqkv_vt, kvq_kv_vgroup_vt;

static const char *const kv_names[] = {"fp16", "int", "kivi", "hqmq", "octopus",
                                       "turboquant", "turboquant-prod", "qturbo", "hqkv"};

static const kvq_kvcodec_vt *kv_vt_for(const kvq_kvspec *s, int role) {
    const char *n = s->name;
    if (!strcmp(n, "fp16")) return &kvq_kv_fp16_vt;
    if (!strcmp(n, "int")) return &kvq_kv_int_vt;
    if (!strcmp(n, "kivi")) return role == KVQ_KV_K ? &kvq_kv_kivi_vt : &kvq_kv_vgroup_vt;
    if (!strcmp(n, "hqmq")) return &kvq_kv_hqmq_vt;
    if (!strcmp(n, "octopus")) return role == KVQ_KV_K ? &kvq_kv_octopus_vt : &kvq_kv_vgroup_vt;
    if (!strcmp(n, "turboquant") || !strcmp(n, "turboquant-prod") || !strcmp(n, "qturbo"))
        return &kvq_kv_turbo_vt;
    if (!strcmp(n, "hqkv")) return &kvq_kv_hqkv_vt;
    return NULL;
}

// ---- spec strings ----

static int parse_int(const char *s, int lo, int hi, int *v) {
    char *e;
    long x = strtol(s, &e, 10);
    if (e == s || *e || x < lo || x > hi) return -1;
    *v = (int)x;
    return 0;
}

kvq_status kvq_kvspec_parse(const char *spec, kvq_kvspec *o, kvq_err *err) {
    memset(o, 0, sizeof *o);
    o->oct_delta = 1;
    o->oct_round = 3;
    o->rot = 1;
    char buf[128];
    if (!spec || strlen(spec) >= sizeof buf)
        return kvq_err_set(err, KVQ_ERR_ARG, "--kv: missing or overlong spec");
    strcpy(buf, spec);
    char *fld[8];
    int nf = 0;
    for (char *p = buf, *t; nf < 8 && (t = strsep(&p, ":"));) fld[nf++] = t;
    int known = 0;
    for (size_t i = 0; i < sizeof kv_names / sizeof *kv_names; i++) known |= !strcmp(fld[0], kv_names[i]);
    if (!known)
        return kvq_err_set(err, KVQ_ERR_ARG,
                           "--kv '%s': unknown codec '%s' (fp16, int, kivi, hqmq, octopus, "
                           "turboquant, turboquant-prod, qturbo, hqkv)", spec, fld[0]);
    snprintf(o->name, sizeof o->name, "%s", fld[0]);
    const char *n = o->name;
    if (!strcmp(n, "fp16")) {
        if (nf != 1) return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': fp16 takes no arguments", spec);
        o->bits = 16;
        return KVQ_OK;
    }
    if (!strcmp(n, "hqmq")) {
        if (nf < 3 || nf > 4 || fld[1][0] != 's' || fld[2][0] != 'r' ||
            parse_int(fld[1] + 1, 1, 1 << 16, &o->hqmq_s) || parse_int(fld[2] + 1, 1, 16, &o->hqmq_br))
            return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': expected hqmq:s<S>:r<b_r>[:med<C>]", spec);
        if (nf == 4) {
            char *e;
            o->hqmq_med = strncmp(fld[3], "med", 3) ? -1 : strtod(fld[3] + 3, &e);
            if (o->hqmq_med <= 1 || *e)
                return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': bad outlier option '%s' (med<C>, C > 1)",
                                   spec, fld[3]);
        }
        return KVQ_OK;
    }
    if (!strcmp(n, "hqkv")) {
        if (nf < 3) return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': expected hqkv:<lattice>:<bps>[:rot=none|signs|qjl][:dither]", spec);
        snprintf(o->lattice, sizeof o->lattice, "%s", fld[1]);
        char *e;
        o->bps = strtod(fld[2], &e);
        if (*e || !(o->bps > 0 && o->bps <= 16))
            return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': bad bits per sample '%s'", spec, fld[2]);
        for (int i = 3; i < nf; i++) {
            if (!strcmp(fld[i], "dither")) o->dither = 1;
            else if (!strcmp(fld[i], "rot=none")) o->rot = 0;
            else if (!strcmp(fld[i], "rot=signs")) o->rot = 1;
            else if (!strcmp(fld[i], "rot=qjl")) o->rot = 2;
            else return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': unknown option '%s'", spec, fld[i]);
        }
        return KVQ_OK;
    }
    // int, kivi, octopus, turboquant*, qturbo: name:<b>[:options]
    int maxb = 8;
    int minb = !strcmp(n, "int") ? 2 : !strcmp(n, "turboquant-prod") ? 2 : 1;
    if (nf < 2 || parse_int(fld[1], minb, maxb, &o->bits))
        return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': expected %s:<bits> with bits in [%d, %d]", spec,
                           n, minb, maxb);
    for (int i = 2; i < nf; i++) {
        if (!strcmp(n, "octopus") && !strcmp(fld[i], "qjl")) o->qjl = 1;
        else if (!strcmp(n, "octopus") && !strncmp(fld[i], "split=", 6) &&
                 !parse_int(fld[i] + 6, -3, 3, &o->oct_delta)) {
        } else if (!strcmp(n, "octopus") && !strncmp(fld[i], "round=", 6)) {
            const char *r = fld[i] + 6;
            o->oct_round = !strcmp(r, "scalar") ? 0 : !strcmp(r, "2x2") ? 2 : !strcmp(r, "3x3") ? 3
                         : !strcmp(r, "full") ? 9 : -1;
            if (o->oct_round < 0) return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': rounding '%s' (scalar, 2x2, 3x3, full)", spec, r);
        } else
            return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': unknown option '%s'", spec, fld[i]);
    }
    if (!strcmp(n, "octopus")) {
        int bd = o->bits + o->oct_delta, bn = o->bits - o->oct_delta;
        if (bd < 1 || bn < 0 || bd > 10 || bn > 10)
            return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': split gives b_dir=%d b_norm=%d (need b_dir>=1, b_norm>=0)", spec, bd, bn);
    }
    return KVQ_OK;
}

int kvq_kvspec_format(const kvq_kvspec *s, char *buf, size_t n) {
    const char *nm = s->name;
    if (!strcmp(nm, "fp16")) return snprintf(buf, n, "fp16");
    if (!strcmp(nm, "hqmq")) {
        if (s->hqmq_med > 0) return snprintf(buf, n, "hqmq:s%d:r%d:med%g", s->hqmq_s, s->hqmq_br, s->hqmq_med);
        return snprintf(buf, n, "hqmq:s%d:r%d", s->hqmq_s, s->hqmq_br);
    }
    if (!strcmp(nm, "hqkv"))
        return snprintf(buf, n, "hqkv:%s:%g:rot=%s%s", s->lattice, s->bps,
                        s->rot == 0 ? "none" : s->rot == 1 ? "signs" : "qjl", s->dither ? ":dither" : "");
    if (!strcmp(nm, "octopus")) {
        const char *r = s->oct_round == 0 ? "scalar" : s->oct_round == 2 ? "2x2" : s->oct_round == 9 ? "full" : "3x3";
        int k = snprintf(buf, n, "octopus:%d%s", s->bits, s->qjl ? ":qjl" : "");
        if (s->oct_delta != 1) k += snprintf(buf + k, n > (size_t)k ? n - k : 0, ":split=%d", s->oct_delta);
        if (s->oct_round != 3) k += snprintf(buf + k, n > (size_t)k ? n - k : 0, ":round=%s", r);
        return k;
    }
    return snprintf(buf, n, "%s:%d", nm, s->bits);
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

kvq_status kvq_kvcodec_new(const kvq_kvspec *spec, int d, kvq_kv_role role, uint64_t seed,
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
    kvq_status st = vt->init(c, err);
    if (st) {
        kvq_err_prefix(err, "kv codec '%s' (head_dim %d, %s)", spec->name, d, role ? "V" : "K");
        kvq_kvcodec_free(c);
        return st;
    }
    *out = c;
    return KVQ_OK;
}

void kvq_kvcodec_free(kvq_kvcodec *c) {
    if (!c) return;
    if (c->vt && c->vt->free) c->vt->free(c);
    free(c);
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
    kvq_kvcodec *c;
    st = kvq_kvcodec_new(&s, d, strcmp(role, "V") ? KVQ_KV_K : KVQ_KV_V, sd, &c, err);
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
    if (c->vt->refresh) c->vt->refresh(c);
    *out = c;
    return KVQ_OK;
}
