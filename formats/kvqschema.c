// The .kvq manifest checked against its schema (docs/FORMAT.md), field by field with
// jansson, by kvq_file_open for every tool (kvq-inspect, kvq-run, kvq-verify): required keys and their types, the tensor table, source, tokenizer and
// the entry table's cross-references. The first problem is named with its JSON path
// ("tensors[3].shape[1]: expected a non-negative integer, got string").
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "formats/arch.h"
#include "formats/dtype.h"
#include "formats/kvqfile.h"

typedef struct {
    const char *path; // file name for messages
    kvq_err *err;
} sctx;

static const char *jtype(const json_t *j) {
    if (!j) return "nothing (missing)";
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "real";
    case JSON_TRUE: case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

static kvq_status bad(sctx *c, const char *where, const char *want, const json_t *got) {
    return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s: expected %s, got %s", c->path, where, want,
                       jtype(got));
}

static int is_hex(const char *s, size_t n) {
    if (!s || strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

// Typed field getters: each names the path when the field is missing or mistyped.
static kvq_status need(sctx *c, const json_t *o, const char *at, const char *key, json_type t, const json_t **out) {
    char where[512];
    snprintf(where, sizeof where, "%s%s%s", at, *at ? "." : "", key);
    const json_t *v = json_object_get(o, key);
    int ok = v && (json_typeof(v) == t || (t == JSON_REAL && json_is_number(v)) ||
                   (t == JSON_TRUE && json_is_boolean(v)));
    if (!ok) {
        const char *want = t == JSON_OBJECT ? "an object" : t == JSON_ARRAY ? "an array" : t == JSON_STRING ? "a string"
                         : t == JSON_INTEGER ? "an integer" : t == JSON_REAL ? "a number" : "a boolean";
        return bad(c, where, want, v);
    }
    if (out) *out = v;
    return KVQ_OK;
}

#define NEED(o, at, key, t, out) do { kvq_status s_ = need(c, o, at, key, t, out); if (s_) return s_; } while (0)

// "files": name -> entry name, every entry in the table.
static kvq_status check_file_map(sctx *c, const json_t *map, const char *at, const json_t *entries) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)map, k, v) {
        char w[256];
        snprintf(w, sizeof w, "%s.%s", at, k);
        if (!json_is_string(v)) return bad(c, w, "a string (entry name)", v);
        if (!json_object_get(entries, json_string_value(v)))
            return kvq_err_set(c->err, KVQ_ERR_MISSING, "%s: manifest.json: %s names entry '%s', which is not in the entry table",
                               c->path, w, json_string_value(v));
    }
    return KVQ_OK;
}

static kvq_status check_tensor(sctx *c, const json_t *t, size_t i, const json_t *entries, int64_t *numel_out) {
    char at[96];
    snprintf(at, sizeof at, "tensors[%zu]", i);
    if (!json_is_object(t)) return bad(c, at, "an object", t);
    const json_t *name, *shape, *dt, *codec, *ents, *v;
    NEED(t, at, "name", JSON_STRING, &name);
    const char *nm = json_string_value(name);
    if (!*nm) return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.name is empty", c->path, at);
    NEED(t, at, "shape", JSON_ARRAY, &shape);
    if (json_array_size(shape) > 8)
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s ('%s').shape has %zu dimensions (at most 8)",
                           c->path, at, nm, json_array_size(shape));
    int64_t numel = 1;
    for (size_t k = 0; k < json_array_size(shape); k++) {
        const json_t *d = json_array_get(shape, k);
        char w[160];
        snprintf(w, sizeof w, "%s ('%s').shape[%zu]", at, nm, k);
        if (!json_is_integer(d) || json_integer_value(d) < 0) return bad(c, w, "a non-negative integer", d);
        if (__builtin_mul_overflow(numel, (int64_t)json_integer_value(d), &numel) || numel > ((int64_t)1 << 40))
            return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s ('%s'): shape has more than 2^40 elements",
                               c->path, at, nm);
    }
    NEED(t, at, "source_dtype", JSON_STRING, &dt);
    kvq_dtype dtype;
    if (kvq_dtype_parse(json_string_value(dt), &dtype) != 0)
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s ('%s').source_dtype '%s' is not F32, F16 or BF16",
                           c->path, at, nm, json_string_value(dt));
    char cat[160];
    snprintf(cat, sizeof cat, "%s ('%s').codec", at, nm);
    NEED(t, at, "codec", JSON_OBJECT, &codec);
    const json_t *cn;
    NEED(codec, cat, "name", JSON_STRING, &cn);
    if (!kvq_file_codec_known(json_string_value(cn)))
        return kvq_err_set(c->err, KVQ_ERR_UNSUPPORTED, "%s: manifest.json: %s.name '%s' is not a codec this kvq knows",
                           c->path, cat, json_string_value(cn));
    NEED(codec, cat, "spec", JSON_STRING, NULL);
    NEED(codec, cat, "lossless", JSON_TRUE, NULL);
    v = json_object_get(codec, "params");
    if (v && !json_is_object(v) && !json_is_null(v)) {
        char w[200];
        snprintf(w, sizeof w, "%s.params", cat);
        return bad(c, w, "an object or null", v);
    }
    char tat[160];
    snprintf(tat, sizeof tat, "%s ('%s')", at, nm);
    NEED(t, tat, "entries", JSON_OBJECT, &ents);
    if (json_object_size(ents) == 0 && numel > 0)
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.entries is empty", c->path, tat);
    char eat[200];
    snprintf(eat, sizeof eat, "%s.entries", tat);
    kvq_status es = check_file_map(c, ents, eat, entries);
    if (es != KVQ_OK) return es;
    const char *role;
    json_t *ev;
    uint64_t declared = 0; // uncompressed bytes of the tensor's entries
    json_object_foreach((json_t *)ents, role, ev) {
        char w[256];
        snprintf(w, sizeof w, "%s.%s", eat, role);
        size_t nl = strlen(nm);
        const char *en = json_string_value(ev);
        if (strncmp(en, "t/", 2) != 0 || strncmp(en + 2, nm, nl) != 0 || en[2 + nl] != '/')
            return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s is '%s', expected 't/%s/<role>'", c->path, w,
                               en, nm);
        const json_t *sz = json_object_get(json_object_get(entries, en), "size");
        if (json_is_integer(sz) && json_integer_value(sz) > 0) declared += (uint64_t)json_integer_value(sz);
    }
    // No codec stores more than 8 bytes per weight (fp32 raw is 4) plus small tables: a
    // payload declaring more is refused before anything is inflated (a zstd bomb).
    if (declared > (uint64_t)numel * 8 + (1u << 20))
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s's entries declare %" PRIu64 " bytes for %" PRId64
                           " weights (more than 8 bytes per weight + 1 MiB)", c->path, tat, declared, numel);
    NEED(t, tat, "bytes", JSON_INTEGER, &v);
    if (json_integer_value(v) < 0)
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.bytes is negative", c->path, tat);
    // (bytes against the entries' stored bytes: kvq-verify's integrity check, kvq_file_tensor_bytes:
    // a disagreement fails the check, exit 1, rather than being an unreadable file)
    const char *bpw[] = {"bits_per_weight", "code_bits_per_weight"};
    for (int k = 0; k < 2; k++) {
        const json_t *b;
        NEED(t, tat, bpw[k], JSON_REAL, &b);
        if (json_number_value(b) < 0)
            return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.%s is negative", c->path, tat, bpw[k]);
    }
    NEED(t, tat, "rate", JSON_OBJECT, &v);
    const char *part;
    json_t *pv;
    json_object_foreach((json_t *)v, part, pv) {
        char w[256];
        snprintf(w, sizeof w, "%s.rate.%s", tat, part);
        if (!json_is_number(pv)) return bad(c, w, "a number", pv);
    }
    v = json_object_get(t, "predicted_mse");
    if (!v || !(json_is_number(v) || json_is_null(v))) {
        char w[200];
        snprintf(w, sizeof w, "%s.predicted_mse", tat);
        return bad(c, w, "a number or null", v);
    }
    v = json_object_get(t, "allocation"); // optional: a tensor rated by the whole-model budget
    if (v) {
        char w[200];
        snprintf(w, sizeof w, "%s.allocation", tat);
        if (!json_is_object(v)) return bad(c, w, "an object {sensitivity, output_error}", v);
        static const char *const keys[] = {"sensitivity", "output_error"};
        for (int k = 0; k < 2; k++) {
            const json_t *sv = json_object_get(v, keys[k]);
            snprintf(w, sizeof w, "%s.allocation.%s", tat, keys[k]);
            if (!json_is_number(sv) || !isfinite(json_number_value(sv)) || json_number_value(sv) < 0)
                return bad(c, w, "a finite number >= 0", sv);
        }
        // optional (since 2026-11-26, session 11): row blocks' rows and shares of the sensitivity
        const json_t *br = json_object_get(v, "block_rows"), *bs = json_object_get(v, "block_shares");
        if (br || bs) {
            snprintf(w, sizeof w, "%s.allocation.block_rows", tat);
            if (!json_is_integer(br) || json_integer_value(br) < 1) return bad(c, w, "an integer >= 1", br);
            snprintf(w, sizeof w, "%s.allocation.block_shares", tat);
            if (!json_is_array(bs) || json_array_size(bs) < 1 || json_array_size(bs) > 64)
                return bad(c, w, "an array of 1 to 64 numbers", bs);
            double sum = 0.0;
            for (size_t k = 0; k < json_array_size(bs); k++) {
                const json_t *x = json_array_get(bs, k);
                if (!json_is_number(x) || !isfinite(json_number_value(x)) || json_number_value(x) <= 0)
                    return bad(c, w, "finite numbers > 0", x);
                sum += json_number_value(x);
            }
            // one share per block of the table's rows (the first dimension of a matrix), summing to 1
            const int64_t brows = json_integer_value(br), rows = json_array_size(shape) == 2
                                                                     ? json_integer_value(json_array_get(shape, 0)) : -1;
            if (rows < 0)
                return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s: row blocks on a tensor of %zu dimensions",
                                   c->path, w, json_array_size(shape));
            if (brows > rows || (rows + brows - 1) / brows != (int64_t)json_array_size(bs))
                return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s: %zu shares for %lld rows in blocks of "
                                   "%lld", c->path, w, json_array_size(bs), (long long)rows, (long long)brows);
            if (fabs(sum - 1.0) > 1e-6)
                return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s: the shares sum to %.9g, not 1", c->path,
                                   w, sum);
        }
    }
    NEED(t, tat, "seed", JSON_STRING, &v);
    if (!is_hex(json_string_value(v), 16))
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.seed '%s' is not 16 lowercase hex digits",
                           c->path, tat, json_string_value(v));
    *numel_out = numel;
    return KVQ_OK;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

typedef struct {
    const char **names; // sorted
    size_t n;
} name_set;

static int has_name(const char *name, void *ud) {
    const name_set *ns = ud;
    return ns->n && bsearch(&name, ns->names, ns->n, sizeof *ns->names, name_cmp) != NULL;
}

static kvq_status check_tensors(sctx *c, const json_t *m, const json_t *entries, const kvq_arch *a) {
    const json_t *ts;
    NEED(m, "", "tensors", JSON_ARRAY, &ts);
    size_t n = json_array_size(ts);
    if (n == 0) return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: tensors is empty", c->path);
    const char **names = malloc(n * sizeof *names);
    if (!names) return kvq_err_set(c->err, KVQ_ERR_NOMEM, "%s: out of memory", c->path);
    kvq_status s = KVQ_OK;
    for (size_t i = 0; i < n && !s; i++) {
        int64_t numel = 0;
        s = check_tensor(c, json_array_get(ts, i), i, entries, &numel);
        if (!s) names[i] = json_string_value(json_object_get(json_array_get(ts, i), "name"));
        if (!s) { // the shape the architecture implies for the names it knows
            const json_t *sh = json_object_get(json_array_get(ts, i), "shape");
            int64_t shape[8] = {0};
            const int nd = (int)json_array_size(sh);
            for (int k = 0; k < nd && k < 8; k++) shape[k] = json_integer_value(json_array_get(sh, k));
            char what[600];
            snprintf(what, sizeof what, "%s: manifest.json", c->path);
            s = kvq_arch_check_shape(a, names[i], shape, nd, what, c->err);
        }
    }
    if (!s) {
        qsort(names, n, sizeof *names, name_cmp);
        for (size_t i = 1; i < n && !s; i++)
            if (!strcmp(names[i], names[i - 1]))
                s = kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: tensor '%s' is listed twice", c->path, names[i]);
    }
    if (!s) { // every tensor the runtime needs of the architecture (names are sorted now)
        name_set ns = {names, n};
        char what[600];
        snprintf(what, sizeof what, "%s: manifest.json", c->path);
        s = kvq_arch_check_tensor_set(a, has_name, &ns, what, c->err);
    }
    free(names);
    return s;
}

static kvq_status check_source(sctx *c, const json_t *m) {
    const json_t *src, *kind, *files;
    NEED(m, "", "source", JSON_OBJECT, &src);
    NEED(src, "source", "kind", JSON_STRING, &kind);
    if (strcmp(json_string_value(kind), "hf") && strcmp(json_string_value(kind), "llama2c"))
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: source.kind '%s' is not 'hf' or 'llama2c'", c->path,
                           json_string_value(kind));
    NEED(src, "source", "path", JSON_STRING, NULL);
    NEED(src, "source", "files", JSON_ARRAY, &files);
    for (size_t i = 0; i < json_array_size(files); i++) {
        const json_t *f = json_array_get(files, i), *v;
        char at[64];
        snprintf(at, sizeof at, "source.files[%zu]", i);
        if (!json_is_object(f)) return bad(c, at, "an object", f);
        NEED(f, at, "name", JSON_STRING, NULL);
        NEED(f, at, "size", JSON_INTEGER, &v);
        if (json_integer_value(v) < 0)
            return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.size is negative", c->path, at);
        NEED(f, at, "role", JSON_STRING, NULL);
        NEED(f, at, "sha256", JSON_STRING, &v);
        if (!is_hex(json_string_value(v), 64))
            return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.sha256 is not 64 lowercase hex digits",
                               c->path, at);
    }
    return KVQ_OK;
}


static kvq_status check_tokenizer(sctx *c, const json_t *m, const json_t *entries) {
    const json_t *tok, *files, *mainj, *cf;
    NEED(m, "", "tokenizer", JSON_OBJECT, &tok);
    NEED(tok, "tokenizer", "files", JSON_OBJECT, &files);
    kvq_status s = check_file_map(c, files, "tokenizer.files", entries);
    if (s) return s;
    mainj = json_object_get(tok, "main");
    if (!mainj || !(json_is_string(mainj) || json_is_null(mainj))) return bad(c, "tokenizer.main", "a string or null", mainj);
    if (json_is_string(mainj) && !json_object_get(files, json_string_value(mainj)))
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: tokenizer.main '%s' is not in tokenizer.files",
                           c->path, json_string_value(mainj));
    NEED(m, "", "config_files", JSON_OBJECT, &cf);
    return check_file_map(c, cf, "config_files", entries);
}

static kvq_status check_entries(sctx *c, const json_t *m, const json_t **out) {
    const json_t *tab;
    NEED(m, "", "entries", JSON_OBJECT, &tab);
    const char *k;
    json_t *e;
    json_object_foreach((json_t *)tab, k, e) {
        char at[600];
        snprintf(at, sizeof at, "entries['%s']", k);
        if (!json_is_object(e)) return bad(c, at, "an object", e);
        const char *ints[] = {"header", "offset", "size", "stored_size"};
        for (int i = 0; i < 4; i++) {
            const json_t *v;
            NEED(e, at, ints[i], JSON_INTEGER, &v);
            if (json_integer_value(v) < 0)
                return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.%s is negative", c->path, at, ints[i]);
        }
        const json_t *h;
        NEED(e, at, "zstd", JSON_TRUE, NULL);
        NEED(e, at, "xxh3", JSON_STRING, &h);
        if (!is_hex(json_string_value(h), 16))
            return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.xxh3 is not 16 lowercase hex digits", c->path, at);
        // Names stay inside the archive's namespace (no "..", no absolute paths), and an
        // entry that is not a tensor payload (tokenizer, config, KV tables) holds at most
        // 1 GiB once inflated: a bomb is refused before it is inflated.
        if (k[0] == '/' || strstr(k, "..") || strchr(k, '\\'))
            return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: entry name '%s' leaves the archive's namespace",
                               c->path, k);
        if (strncmp(k, "t/", 2) && json_integer_value(json_object_get(e, "size")) > (json_int_t)1 << 30)
            return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s declares %" JSON_INTEGER_FORMAT
                               " bytes (more than 1 GiB)", c->path, at, json_integer_value(json_object_get(e, "size")));
    }
    *out = tab;
    return KVQ_OK;
}

// Every "t/<tensor>/..." entry belongs to a tensor record (no orphaned payloads).
static kvq_status check_orphans(sctx *c, const json_t *m, const json_t *entries) {
    json_t *used = json_object();
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(m, "tensors"), i, t) {
        const char *r;
        json_t *ev;
        json_object_foreach(json_object_get(t, "entries"), r, ev) json_object_set_new(used, json_string_value(ev), json_true());
    }
    const char *k;
    json_t *e;
    kvq_status s = KVQ_OK;
    json_object_foreach((json_t *)entries, k, e)
        if (!strncmp(k, "t/", 2) && !json_object_get(used, k)) {
            s = kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: entry '%s' belongs to no tensor record", c->path, k);
            break;
        }
    json_decref(used);
    return s;
}

// The KV section (docs/KV.md): its shape is the architecture's, its window and boundary in
// range, and it holds one state per (layer, head, K/V), each once, whose tables lie inside the
// float32 entry it names. The codec states' own meaning (the spec, table sizes and values) is
// checked where they are rebuilt (libconv/kv, kvq_kv_check_file), by every tool.
static kvq_status check_kv(sctx *c, const json_t *m, const json_t *entries, const kvq_arch *a) {
    const json_t *kv = json_object_get(m, "kv"), *e, *v, *states;
    if (!kv) return KVQ_OK;
    if (!json_is_object(kv)) return bad(c, "kv", "an object", kv);
    NEED(kv, "kv", "spec", JSON_STRING, NULL);
    NEED(kv, "kv", "entry", JSON_STRING, &e);
    const json_t *ent = json_object_get(entries, json_string_value(e));
    if (!ent)
        return kvq_err_set(c->err, KVQ_ERR_MISSING, "%s: manifest.json: kv.entry names entry '%s', which is not in the entry table",
                           c->path, json_string_value(e));
    const json_int_t nfloats = json_integer_value(json_object_get(ent, "size")) / 4;
    const struct { const char *k; json_int_t want; } shp[] = {
        {"n_layers", a->n_layers}, {"n_kv_heads", a->n_kv_heads}, {"head_dim", a->head_dim}};
    for (int i = 0; i < 3; i++) {
        char w[64];
        snprintf(w, sizeof w, "kv.%s", shp[i].k);
        NEED(kv, "kv", shp[i].k, JSON_INTEGER, &v);
        if (json_integer_value(v) != shp[i].want)
            return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s is %" JSON_INTEGER_FORMAT
                               ", the architecture's is %" JSON_INTEGER_FORMAT, c->path, w, json_integer_value(v), shp[i].want);
    }
    NEED(kv, "kv", "window", JSON_INTEGER, &v);
    if (json_integer_value(v) < 0 || json_integer_value(v) > (1 << 24)) // kvq-run --kv-window's range
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: kv.window %" JSON_INTEGER_FORMAT
                           " outside [0, 2^24]", c->path, json_integer_value(v));
    NEED(kv, "kv", "boundary", JSON_INTEGER, &v);
    if (json_integer_value(v) != 0 && json_integer_value(v) != 1)
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: kv.boundary %" JSON_INTEGER_FORMAT " is not 0 or 1",
                           c->path, json_integer_value(v));
    NEED(kv, "kv", "seed", JSON_STRING, NULL);
    NEED(kv, "kv", "states", JSON_ARRAY, &states);
    const size_t want = (size_t)a->n_layers * (size_t)a->n_kv_heads * 2;
    if (json_array_size(states) != want)
        return kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: kv.states has %zu states, the architecture needs "
                           "%zu (layers × KV heads × K/V)", c->path, json_array_size(states), want);
    uint8_t *seen = calloc(want, 1);
    if (!seen) return kvq_err_set(c->err, KVQ_ERR_NOMEM, "%s: out of memory", c->path);
    kvq_status s = KVQ_OK;
    for (size_t i = 0; i < want && !s; i++) {
        const json_t *st = json_array_get(states, i), *jl, *jh, *jr, *tabs;
        char at[64];
        snprintf(at, sizeof at, "kv.states[%zu]", i);
        if (!json_is_object(st)) { s = bad(c, at, "an object", st); break; }
        if ((s = need(c, st, at, "layer", JSON_INTEGER, &jl)) || (s = need(c, st, at, "head", JSON_INTEGER, &jh)) ||
            (s = need(c, st, at, "role", JSON_STRING, &jr)) || (s = need(c, st, at, "params", JSON_OBJECT, NULL)) ||
            (s = need(c, st, at, "tables", JSON_ARRAY, &tabs)))
            break;
        const json_int_t l = json_integer_value(jl), h = json_integer_value(jh);
        const char *r = json_string_value(jr);
        if (l < 0 || l >= a->n_layers || h < 0 || h >= a->n_kv_heads || (strcmp(r, "K") && strcmp(r, "V"))) {
            s = kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s: layer %" JSON_INTEGER_FORMAT " head %"
                            JSON_INTEGER_FORMAT " role '%s' is not a state of %d layers × %d KV heads × K/V", c->path, at,
                            l, h, r, a->n_layers, a->n_kv_heads);
            break;
        }
        const size_t slot = ((size_t)l * (size_t)a->n_kv_heads + (size_t)h) * 2 + (r[0] == 'V');
        if (seen[slot]++) {
            s = kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s: layer %" JSON_INTEGER_FORMAT " head %"
                            JSON_INTEGER_FORMAT " %s is listed twice", c->path, at, l, h, r);
            break;
        }
        for (size_t k = 0; k < json_array_size(tabs) && !s; k++) {
            const json_t *t = json_array_get(tabs, k), *jo, *jc;
            char tw[96];
            snprintf(tw, sizeof tw, "%s.tables[%zu]", at, k);
            if (!json_is_object(t)) { s = bad(c, tw, "an object", t); break; }
            if ((s = need(c, t, tw, "name", JSON_STRING, NULL)) || (s = need(c, t, tw, "offset", JSON_INTEGER, &jo)) ||
                (s = need(c, t, tw, "count", JSON_INTEGER, &jc)))
                break;
            const json_int_t o = json_integer_value(jo), n = json_integer_value(jc);
            if (o < 0 || n < 0 || o > nfloats || n > nfloats - o)
                s = kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s: floats [%" JSON_INTEGER_FORMAT ", +%"
                                JSON_INTEGER_FORMAT ") lie outside entry '%s' (%" JSON_INTEGER_FORMAT " floats)", c->path,
                                tw, o, n, json_string_value(e), nfloats);
        }
    }
    free(seen);
    return s;
}

// The verification record (libconv/verify/verify_record.c) is bound to the file by its own
// digest; here: its shape where tools read it field by field. "tensors" (per-tensor errors,
// optional: records before it lack it) names each tensor of the manifest at most once.
static kvq_status check_verification(sctx *c, const json_t *m) {
    const json_t *v = json_object_get(m, "verification"), *ts;
    if (!v) return KVQ_OK;
    if (!json_is_object(v)) return bad(c, "verification", "an object", v);
    if (!(ts = json_object_get(v, "tensors"))) return KVQ_OK;
    if (!json_is_array(ts)) return bad(c, "verification.tensors", "an array", ts);
    json_t *seen = json_object(), *known = json_object();
    if (!seen || !known) {
        json_decref(seen);
        json_decref(known);
        return kvq_err_set(c->err, KVQ_ERR_NOMEM, "%s: out of memory", c->path);
    }
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(m, "tensors"), i, t) json_object_set_new(known, json_string_value(json_object_get(t, "name")), json_true());
    kvq_status s = KVQ_OK;
    json_array_foreach(ts, i, t) {
        char at[64];
        snprintf(at, sizeof at, "verification.tensors[%zu]", i);
        const json_t *nm;
        if (!json_is_object(t)) { s = bad(c, at, "an object", t); break; }
        if ((s = need(c, t, at, "name", JSON_STRING, &nm)) || (s = need(c, t, at, "exact", JSON_TRUE, NULL))) break;
        const char *name = json_string_value(nm);
        if (!json_object_get(known, name)) {
            s = kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s.name '%s' is not a tensor of this file", c->path, at, name);
            break;
        }
        if (json_object_get(seen, name)) {
            s = kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s: tensor '%s' is listed twice", c->path, at, name);
            break;
        }
        json_object_set_new(seen, name, json_true());
        const char *nums[] = {"snr_db", "rel_err", "max_abs"};
        for (int k = 0; k < 3 && !s; k++) { // null: exact (snr_db) or not finite
            const json_t *x = json_object_get(t, nums[k]);
            char w[96];
            snprintf(w, sizeof w, "%s.%s", at, nums[k]);
            if (!x || !(json_is_number(x) || json_is_null(x))) s = bad(c, w, "a number or null", x);
            else if (k && json_is_number(x) && json_number_value(x) < 0)
                s = kvq_err_set(c->err, KVQ_ERR_FORMAT, "%s: manifest.json: %s is negative", c->path, w);
        }
        if (s) break;
    }
    json_decref(seen);
    json_decref(known);
    return s;
}

// The weight codecs a manifest may name: the names of libconv/codec's table (tests/
// test_codec_table.c checks that the two lists agree both ways).
static const char *const known_codecs[] = {"none", "rtn", "hyperquant", "qet", "pq"};

int kvq_file_codec_known(const char *name) {
    for (size_t i = 0; i < sizeof known_codecs / sizeof known_codecs[0]; i++)
        if (name && !strcmp(name, known_codecs[i])) return 1;
    return 0;
}

kvq_status kvq_file_check_manifest(const json_t *m, const char *path, kvq_err *err) {
    sctx cc = {path, err}, *c = &cc;
    if (!json_is_object(m)) return bad(c, "(top level)", "an object", m);
    const json_t *v, *entries = NULL;
    NEED(m, "", "format", JSON_STRING, &v);
    if (strcmp(json_string_value(v), "kvq"))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: manifest.json: format is '%s', expected 'kvq'", path, json_string_value(v));
    NEED(m, "", "format_version", JSON_INTEGER, NULL);
    NEED(m, "", "kvq_version", JSON_STRING, NULL);
    NEED(m, "", "created_by", JSON_STRING, NULL);
    NEED(m, "", "architecture", JSON_OBJECT, &v);
    kvq_arch a;
    kvq_status s = kvq_arch_from_manifest(v, &a, err);
    if (s) {
        kvq_err_prefix(err, "%s: manifest.json: architecture", path);
        return s;
    }
    char what[600];
    snprintf(what, sizeof what, "%s: manifest.json", path);
    if ((s = kvq_arch_check_limits(&a, what, err))) return s;
    NEED(m, "", "recipe", JSON_OBJECT, NULL);
    if ((s = check_entries(c, m, &entries))) return s;
    if ((s = check_tensors(c, m, entries, &a))) return s;
    if ((s = check_orphans(c, m, entries))) return s;
    if ((s = check_source(c, m))) return s;
    if ((s = check_tokenizer(c, m, entries))) return s;
    if ((s = check_kv(c, m, entries, &a))) return s;
    return check_verification(c, m);
}
