// Export of a model (.kvq or source checkpoint) as an HF checkpoint directory that
// transformers can load as it would one written by save_pretrained: safetensors shards of at
// most max_shard_bytes with model.safetensors.index.json (one model.safetensors when it fits),
// every tensor in the one dtype config.json states (bf16 by default, the rounding of decoded
// values measured; or float32, exact), config.json and the tokenizer files. One shard is in
// memory at a time.
#include "libconv/convert/convert.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/checkpoint.h"
#include "formats/kvqfile.h"
#include "formats/safetensors.h"
#include "formats/tmpfile.h"
#include "libconv/runtime/weights.h"

// dir/name via a temporary name and rename (fopen: 0666 & ~umask).
static kvq_status put_file(const char *dir, const char *name, const void *data, size_t n, kvq_err *err) {
    char path[4096], *tmp = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = kvq_tmp_create(path, &tmp); // formats/tmpfile.h: locked, 0666 & ~umask
    FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!fp) {
        kvq_status s = errno == EISDIR ? kvq_err_set(err, KVQ_ERR_IO, "%s: is a directory; name the output file", path)
                                       : kvq_err_set(err, KVQ_ERR_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
        if (fd >= 0) close(fd), unlink(tmp);
        free(tmp);
        return s;
    }
    size_t put = fwrite(data, 1, n, fp);
    if (fclose(fp) != 0 || put != n || rename(tmp, path) != 0) {
        unlink(tmp);
        free(tmp);
        return kvq_err_set(err, KVQ_ERR_IO, "%s: write failed", path);
    }
    free(tmp);
    return KVQ_OK;
}

static kvq_status read_whole(const char *src, void **d, size_t *n, kvq_err *err) {
    FILE *fp = fopen(src, "rb");
    if (!fp) return kvq_err_set(err, KVQ_ERR_IO, "%s: %s", src, strerror(errno));
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    *d = malloc(len > 0 ? (size_t)len : 1);
    size_t got = *d && len >= 0 ? fread(*d, 1, (size_t)len, fp) : 0;
    fclose(fp);
    if (!*d) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for %ld bytes", src, len);
    if (len < 0 || got != (size_t)len) { free(*d); *d = NULL; return kvq_err_set(err, KVQ_ERR_IO, "%s: read failed", src); }
    *n = got;
    return KVQ_OK;
}

// config.json for a source without one (llama2.c): the Llama fields transformers needs.
static json_t *config_from_arch(const kvq_arch *a) {
    return json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:b,s:b,s:s,s:o,s:o}",
                     "architectures", a->hf_class[0] ? a->hf_class : "LlamaForCausalLM", "model_type", "llama",
                     "hidden_size", a->hidden_size, "intermediate_size", a->intermediate_size,
                     "num_hidden_layers", a->n_layers, "num_attention_heads", a->n_heads,
                     "num_key_value_heads", a->n_kv_heads, "head_dim", a->head_dim, "vocab_size", a->vocab_size,
                     "max_position_embeddings", a->max_position_embeddings, "rms_norm_eps", a->rms_norm_eps,
                     "rope_theta", a->rope_theta, "tie_word_embeddings", a->tie_word_embeddings,
                     "attention_bias", a->attention_bias, "hidden_act", "silu",
                     "bos_token_id", a->bos_token_id >= 0 ? json_integer(a->bos_token_id) : json_null(),
                     "eos_token_id", a->eos_token_id >= 0 ? json_integer(a->eos_token_id) : json_null());
}

static kvq_status put_json(const char *dir, const char *name, const json_t *j, kvq_err *err) {
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    kvq_status st = s ? put_file(dir, name, s, strlen(s), err)
                      : kvq_err_set(err, KVQ_ERR_NOMEM, "%s/%s: out of memory", dir, name);
    free(s);
    return st;
}

// ---- the directory -------------------------------------------------------------------

static int is_checkpoint_file(const char *n) {
    return !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") ||
           !strcmp(n, "pytorch_model.bin.index.json") || fnmatch("*.safetensors", n, 0) == 0 ||
           fnmatch("pytorch_model*.bin", n, 0) == 0;
}

kvq_status kvq_export_check_dir(const char *dir, int force, kvq_err *err) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return KVQ_OK;
        return kvq_err_set(err, KVQ_ERR_IO, "%s: %s", dir, strerror(errno));
    }
    char found[256] = "";
    for (struct dirent *e; (e = readdir(d));)
        if (is_checkpoint_file(e->d_name) && strlen(found) + strlen(e->d_name) + 3 < sizeof found)
            snprintf(found + strlen(found), sizeof found - strlen(found), "%s%s", found[0] ? ", " : "", e->d_name);
    closedir(d);
    if (found[0] && !force)
        return kvq_err_set(err, KVQ_ERR_ARG,
                           "%s already holds a checkpoint (%s): refusing to mix the export with it (a reader would "
                           "load a mixture); use another directory, or --force to replace it", dir, found);
    return KVQ_OK;
}

// Under --force: weight files of an earlier checkpoint that the export did not write go, so
// that transformers cannot load them (it prefers an index, or model.safetensors, over ours).
static int remove_stale(const char *dir, char **ours, int n_ours) {
    DIR *d = opendir(dir);
    int removed = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        int weights = !strcmp(n, "model.safetensors.index.json") || !strcmp(n, "pytorch_model.bin.index.json") ||
                      fnmatch("*.safetensors", n, 0) == 0 || fnmatch("pytorch_model*.bin", n, 0) == 0;
        int mine = 0;
        for (int i = 0; i < n_ours; i++) mine |= !strcmp(ours[i], n);
        if (!weights || mine) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, n);
        if (unlink(p) == 0) removed++;
    }
    if (d) closedir(d);
    return removed;
}

// ---- tensors ---------------------------------------------------------------------------

typedef struct {
    kvq_weights *w;
    const json_t *man;              // NULL for a source checkpoint
    kvq_ckpt *ck;                   // a source checkpoint
} model_t;

// Natural order ("layers.2" before "layers.10"): shards then hold the layers in sequence.
static int natcmp(const void *pa, const void *pb) {
    const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            char *ea, *eb;
            unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
            if (x != y) return x < y ? -1 : 1;
            a = ea, b = eb;
        } else {
            if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
            a++, b++;
        }
    }
    return (unsigned char)*a - (unsigned char)*b;
}

// One tensor in the export dtype: decoded (or the source's values) and converted; the rounding
// against the float32 values it had is accumulated into rep.
static kvq_status load_tensor(model_t *M, const char *name, kvq_dtype out_dt, kvq_tensor *t, void **buf,
                              double *sse, double *ssx, kvq_export_report *rep, kvq_err *err) {
    float *x = NULL;
    int64_t numel = 0;
    kvq_status s = kvq_weights_get_f32(M->w, name, &x, &numel, err);
    if (s) return s;
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = out_dt;
    kvq_weights_has(M->w, name, &t->ndim, t->shape);
    t->nbytes = (size_t)numel * kvq_dtype_size(out_dt);
    if (out_dt == KVQ_DTYPE_F32) { *buf = x; t->data = x; return KVQ_OK; }
    void *b = malloc(t->nbytes ? t->nbytes : 1);
    if (!b) { free(x); return kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name); }
    kvq_dtype_from_f32(out_dt, x, (size_t)numel, b);
    float *back = malloc(sizeof(float) * (size_t)(numel ? numel : 1));
    if (!back) { free(x); free(b); return kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name); }
    kvq_dtype_to_f32(out_dt, b, (size_t)numel, back);
    double e2 = 0, x2 = 0, mx = 0;
    for (int64_t i = 0; i < numel; i++) {
        double d = (double)back[i] - (double)x[i];
        e2 += d * d, x2 += (double)x[i] * (double)x[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    if (e2 > 0) {
        rep->n_rounded++;
        *sse += e2, *ssx += x2;
        if (mx > rep->round_max_abs) rep->round_max_abs = mx;
    }
    free(back);
    free(x);
    *buf = b;
    t->data = b;
    return KVQ_OK;
}

kvq_status kvq_export_hf(const char *model, const char *dir, const kvq_export_opts *o, kvq_export_report *rep,
                         kvq_err *err) {
    kvq_export_opts def = {.dtype = KVQ_DTYPE_BF16, .max_shard_bytes = 5000000000ull};
    if (!o) o = &def;
    memset(rep, 0, sizeof *rep);
    rep->dtype = o->dtype;
    if (o->dtype != KVQ_DTYPE_BF16 && o->dtype != KVQ_DTYPE_F32)
        return kvq_err_set(err, KVQ_ERR_ARG, "--export-hf: dtype %s: expected BF16 or F32", kvq_dtype_name(o->dtype));
    kvq_status s = kvq_export_check_dir(dir, o->force, err);
    if (s) return s;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return kvq_err_set(err, KVQ_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    model_t M = {0};
    if ((s = kvq_weights_open(model, &M.w, err))) return s;
    M.man = kvq_weights_manifest(M.w);
    if (!M.man && (s = kvq_ckpt_open(model, &M.ck, err))) { kvq_weights_close(M.w); return s; }

    // tensors in natural name order, cut into shards as save_pretrained does: a tensor that
    // would take the shard over the limit starts the next one (a larger tensor is alone).
    size_t n = kvq_weights_count(M.w);
    const char **names = calloc(n ? n : 1, sizeof *names);
    int *shard = calloc(n ? n : 1, sizeof *shard);
    char **files = NULL;
    if (!names || !shard) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", model); goto out; }
    for (size_t i = 0; i < n; i++) names[i] = kvq_weights_name(M.w, i);
    qsort(names, n, sizeof *names, natcmp);
    int n_shards = 0;
    uint64_t cur = 0, total = 0, params = 0;
    for (size_t i = 0; i < n; i++) {
        int nd;
        int64_t sh[8], numel = 1;
        kvq_weights_has(M.w, names[i], &nd, sh);
        for (int d = 0; d < nd; d++) numel *= sh[d];
        uint64_t b = (uint64_t)numel * kvq_dtype_size(o->dtype);
        if (n_shards == 0 || (cur > 0 && cur + b > o->max_shard_bytes)) n_shards++, cur = 0;
        cur += b, total += b, params += (uint64_t)numel;
        shard[i] = n_shards - 1;
    }
    if (n_shards == 0) n_shards = 1;
    if (!(files = calloc((size_t)n_shards, sizeof *files))) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory"); goto out; }
    for (int k = 0; k < n_shards; k++) {
        char f[64];
        if (n_shards == 1) snprintf(f, sizeof f, "model.safetensors");
        else snprintf(f, sizeof f, "model-%05d-of-%05d.safetensors", k + 1, n_shards);
        if (!(files[k] = strdup(f))) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory"); goto out; }
    }
    const json_t *kv = M.man ? json_object_get(M.man, "kv") : NULL;
    if (kv) {
        snprintf(rep->kv_spec, sizeof rep->kv_spec, "%s", json_string_value(json_object_get(kv, "spec")) ?: "?");
        rep->kv_window = (int)json_integer_value(json_object_get(kv, "window"));
        rep->kv_boundary = (int)json_integer_value(json_object_get(kv, "boundary"));
    }
    const char *meta[] = {"format", "pt", "kvq_source", model, kv ? "kvq_kv_cache" : NULL, rep->kv_spec, NULL};
    double sse = 0, ssx = 0;
    json_t *wmap = json_object();
    for (int k = 0; k < n_shards && s == KVQ_OK; k++) {
        size_t lo = 0, hi;
        while (lo < n && shard[lo] != k) lo++;
        for (hi = lo; hi < n && shard[hi] == k; hi++) {}
        kvq_tensor *ts = calloc(hi - lo + 1, sizeof *ts);
        void **bufs = calloc(hi - lo + 1, sizeof *bufs);
        if (!ts || !bufs) s = kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
        for (size_t i = lo; i < hi && s == KVQ_OK; i++) {
            s = load_tensor(&M, names[i], o->dtype, &ts[i - lo], &bufs[i - lo], &sse, &ssx, rep, err);
            json_object_set_new(wmap, names[i], json_string(files[k]));
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        if (s == KVQ_OK) s = kvq_st_write(path, ts, hi - lo, meta, err);
        for (size_t i = 0; bufs && i < hi - lo; i++) free(bufs[i]);
        free(bufs);
        free(ts);
    }
    if (s == KVQ_OK && n_shards > 1) { // the index, as save_pretrained writes it
        json_t *idx = json_pack("{s:{s:I,s:I},s:O}", "metadata", "total_parameters", (json_int_t)params, "total_size",
                                (json_int_t)total, "weight_map", wmap);
        s = put_json(dir, "model.safetensors.index.json", idx, err);
        json_decref(idx);
    }
    json_decref(wmap);
    rep->n_shards = n_shards;
    rep->n_tensors = n;
    rep->total_bytes = total;
    rep->round_rel_rms = ssx > 0 ? sqrt(sse / ssx) : 0.0;

    // config.json (dtype stated), generation config and tokenizer files
    json_t *config = NULL;
    if (s == KVQ_OK && M.man) {
        kvq_file *kf = NULL;
        s = kvq_file_open(model, &kf, err);
        for (int g = 0; g < 2 && s == KVQ_OK; g++) {
            const json_t *fl = json_object_get(M.man, g ? "tokenizer" : "config_files");
            if (g) fl = json_object_get(fl, "files");
            const char *fname;
            json_t *ev;
            json_object_foreach((json_t *)fl, fname, ev) {
                const void *d;
                size_t sz;
                if (strchr(fname, '/') || !json_string_value(ev)) continue;
                if ((s = kvq_file_entry(kf, json_string_value(ev), &d, &sz, err)) != KVQ_OK) break;
                if (!strcmp(fname, "config.json")) {
                    json_error_t je;
                    if (!(config = json_loadb(d, sz, JSON_PRESERVE_ORDER, &je)))
                        s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: config.json: %s", model, je.text);
                } else s = put_file(dir, fname, d, sz, err);
                if (s) break;
            }
        }
        kvq_file_close(kf);
    } else if (s == KVQ_OK) {
        for (size_t i = 0; s == KVQ_OK && i < kvq_ckpt_nfiles(M.ck); i++) {
            const kvq_srcfile *f = kvq_ckpt_file(M.ck, i);
            if (!strcmp(f->role, "weights") || !strcmp(f->role, "index")) continue;
            void *d = NULL;
            size_t sz = 0;
            if ((s = read_whole(f->path, &d, &sz, err))) break;
            if (!strcmp(f->role, "config")) {
                json_error_t je;
                if (!(config = json_loadb(d, sz, JSON_PRESERVE_ORDER, &je)))
                    s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: %s", f->path, je.text);
            } else s = put_file(dir, f->name, d, sz, err);
            free(d);
        }
        const char *tok = kvq_ckpt_tokenizer_path(M.ck);
        if (s == KVQ_OK && tok && !strstr(tok, ".json")) { // a llama2.c tok*.bin beside the .bin
            const char *b = strrchr(tok, '/');
            void *d = NULL;
            size_t sz = 0;
            if ((s = read_whole(tok, &d, &sz, err)) == KVQ_OK) s = put_file(dir, b ? b + 1 : tok, d, sz, err);
            free(d);
        }
    }
    if (s == KVQ_OK) {
        if (!config || !json_is_object(config)) {
            json_decref(config);
            config = config_from_arch(kvq_weights_arch(M.w));
        }
        const char *dt = o->dtype == KVQ_DTYPE_BF16 ? "bfloat16" : "float32";
        json_object_set_new(config, "dtype", json_string(dt)); // transformers 5
        if (json_object_get(config, "torch_dtype")) json_object_set_new(config, "torch_dtype", json_string(dt)); // 4.x
        s = put_json(dir, "config.json", config, err);
    }
    json_decref(config);
    if (s == KVQ_OK && o->force) rep->n_removed = remove_stale(dir, files, n_shards);
out:
    for (int k = 0; files && k < n_shards; k++) free(files[k]);
    free(files);
    free(names);
    free(shard);
    kvq_ckpt_close(M.ck);
    kvq_weights_close(M.w);
    return s;
}
