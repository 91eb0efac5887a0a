// Export of a model (.kvq or source checkpoint) as an HF checkpoint directory that
// transformers can load: model.safetensors, config.json, tokenizer files. Lossless
// tensors keep their source dtype; lossy ones are written as F32 so the file holds
// exactly the values kvq decodes (transformers upcasts the rest when loading in F32).
#include "libconv/convert/convert.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/checkpoint.h"
#include "formats/kvqfile.h"
#include "formats/safetensors.h"
#include "libconv/runtime/weights.h"

// dir/name via a temporary name and rename.
static kvq_status put_file(const char *dir, const char *name, const void *data, size_t n, kvq_err *err) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) return kvq_err_set(err, KVQ_ERR_IO, "%s: %s", tmp, strerror(errno));
    size_t put = fwrite(data, 1, n, fp);
    if (fclose(fp) != 0 || put != n || rename(tmp, path) != 0) {
        unlink(tmp);
        return kvq_err_set(err, KVQ_ERR_IO, "%s: write failed", path);
    }
    return KVQ_OK;
}

static kvq_status copy_file(const char *src, const char *dir, const char *name, kvq_err *err) {
    FILE *fp = fopen(src, "rb");
    if (!fp) return kvq_err_set(err, KVQ_ERR_IO, "%s: %s", src, strerror(errno));
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    void *d = malloc(n > 0 ? (size_t)n : 1);
    size_t got = d && n >= 0 ? fread(d, 1, (size_t)n, fp) : 0;
    fclose(fp);
    kvq_status s;
    if (!d) s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for %ld bytes", src, n);
    else if (n < 0 || got != (size_t)n) s = kvq_err_set(err, KVQ_ERR_IO, "%s: read failed", src);
    else s = put_file(dir, name, d, got, err);
    free(d);
    return s;
}

// config.json for a source without one (llama2.c): the Llama fields transformers needs.
static json_t *config_from_arch(const kvq_arch *a) {
    return json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:b,s:b,s:s,s:s,s:o,s:o}",
                     "architectures", a->hf_class[0] ? a->hf_class : "LlamaForCausalLM", "model_type", "llama",
                     "hidden_size", a->hidden_size, "intermediate_size", a->intermediate_size,
                     "num_hidden_layers", a->n_layers, "num_attention_heads", a->n_heads,
                     "num_key_value_heads", a->n_kv_heads, "head_dim", a->head_dim, "vocab_size", a->vocab_size,
                     "max_position_embeddings", a->max_position_embeddings, "rms_norm_eps", a->rms_norm_eps,
                     "rope_theta", a->rope_theta, "tie_word_embeddings", a->tie_word_embeddings,
                     "attention_bias", a->attention_bias, "hidden_act", "silu", "torch_dtype", "float32",
                     "bos_token_id", a->bos_token_id >= 0 ? json_integer(a->bos_token_id) : json_null(),
                     "eos_token_id", a->eos_token_id >= 0 ? json_integer(a->eos_token_id) : json_null());
}

static kvq_status put_json(const char *dir, const char *name, json_t *j, kvq_err *err) {
    char *s = json_dumps(j, JSON_INDENT(2));
    kvq_status st = s ? put_file(dir, name, s, strlen(s), err)
                    : kvq_err_set(err, KVQ_ERR_NOMEM, "%s/%s: out of memory", dir, name);
    free(s);
    return st;
}

// A source checkpoint: tensor views straight from the mmap, files copied.
static kvq_status export_source(const char *model, const char *dir, kvq_err *err) {
    kvq_ckpt *ck;
    kvq_status s = kvq_ckpt_open(model, &ck, err);
    if (s != KVQ_OK) return s;
    size_t n = kvq_ckpt_count(ck);
    kvq_tensor *ts = malloc((n ? n : 1) * sizeof *ts);
    if (!ts) s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for %zu tensor views", model, n);
    for (size_t i = 0; s == KVQ_OK && i < n; i++) ts[i] = *kvq_ckpt_tensor(ck, i);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (s == KVQ_OK) s = kvq_st_write(path, ts, n, NULL, err);
    int have_config = 0;
    for (size_t i = 0; s == KVQ_OK && i < kvq_ckpt_nfiles(ck); i++) {
        const kvq_srcfile *f = kvq_ckpt_file(ck, i);
        if (!strcmp(f->role, "config")) have_config = 1;
        if (strcmp(f->role, "weights") && strcmp(f->role, "index")) s = copy_file(f->path, dir, f->name, err);
    }
    const char *tok = kvq_ckpt_tokenizer_path(ck);
    if (s == KVQ_OK && tok) {
        const char *b = strrchr(tok, '/');
        s = copy_file(tok, dir, b ? b + 1 : tok, err);
    }
    if (s == KVQ_OK && !have_config) {
        json_t *c = config_from_arch(kvq_ckpt_arch(ck));
        s = put_json(dir, "config.json", c, err);
        json_decref(c);
    }
    free(ts);
    kvq_ckpt_close(ck);
    return s;
}

static const json_t *tensor_record(const json_t *man, const char *name) {
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(man, "tensors"), i, r)
        if (!strcmp(json_string_value(json_object_get(r, "name")) ?: "", name)) return r;
    return NULL;
}

// A .kvq: every tensor decoded (lossless ones back to their source dtype).
static kvq_status export_kvq(const char *model, const char *dir, kvq_err *err) {
    kvq_weights *w;
    kvq_status s = kvq_weights_open(model, &w, err);
    if (s != KVQ_OK) return s;
    const json_t *man = kvq_weights_manifest(w);
    size_t n = kvq_weights_count(w);
    kvq_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    void **bufs = calloc(n ? n : 1, sizeof *bufs);
    if (!ts || !bufs) s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for %zu tensors", model, n);
    for (size_t i = 0; s == KVQ_OK && i < n; i++) {
        const char *name = kvq_weights_name(w, i);
        const json_t *r = tensor_record(man, name);
        float *x;
        int64_t numel;
        if ((s = kvq_weights_get_f32(w, name, &x, &numel, err)) != KVQ_OK) break;
        kvq_dtype dt = KVQ_DTYPE_F32;
        const char *sd = json_string_value(json_object_get(r, "source_dtype"));
        if (json_is_true(json_object_get(json_object_get(r, "codec"), "lossless")) && sd && kvq_dtype_parse(sd, &dt) != 0)
            dt = KVQ_DTYPE_F32;
        kvq_tensor *t = &ts[i];
        t->name = name;
        t->dtype = dt;
        kvq_weights_has(w, name, &t->ndim, t->shape);
        t->nbytes = (size_t)numel * kvq_dtype_size(dt);
        if (dt == KVQ_DTYPE_F32) bufs[i] = x;
        else {
            bufs[i] = malloc(t->nbytes ? t->nbytes : 1);
            if (bufs[i]) kvq_dtype_from_f32(dt, x, (size_t)numel, bufs[i]); // exact: widened from dt
            free(x);
            if (!bufs[i]) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name); break; }
        }
        t->data = bufs[i];
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[] = {"format", "pt", "kvq_source", model, NULL};
    if (s == KVQ_OK) s = kvq_st_write(path, ts, n, meta, err);
    // tokenizer and config files stored in the container
    kvq_file *kf = NULL;
    if (s == KVQ_OK) s = kvq_file_open(model, &kf, err);
    int have_config = 0;
    for (int g = 0; g < 2 && s == KVQ_OK; g++) {
        const json_t *files = json_object_get(man, g ? "tokenizer" : "config_files");
        if (g) files = json_object_get(files, "files");
        const char *fname;
        json_t *ev;
        json_object_foreach((json_t *)files, fname, ev) {
            const void *d;
            size_t sz;
            if (strchr(fname, '/') || !json_string_value(ev)) continue;
            if ((s = kvq_file_entry(kf, json_string_value(ev), &d, &sz, err)) != KVQ_OK) break;
            if ((s = put_file(dir, fname, d, sz, err)) != KVQ_OK) break;
            if (!strcmp(fname, "config.json")) have_config = 1;
        }
    }
    if (s == KVQ_OK && !have_config) {
        json_t *c = config_from_arch(kvq_weights_arch(w));
        s = put_json(dir, "config.json", c, err);
        json_decref(c);
    }
    kvq_file_close(kf);
    for (size_t i = 0; bufs && i < n; i++) free(bufs[i]);
    free(bufs);
    free(ts);
    kvq_weights_close(w);
    return s;
}

kvq_status kvq_export_hf(const char *model, const char *dir, kvq_err *err) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return kvq_err_set(err, KVQ_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    struct stat st;
    if (stat(model, &st) != 0) return kvq_err_set(err, KVQ_ERR_IO, "%s: %s", model, strerror(errno));
    FILE *fp = S_ISREG(st.st_mode) ? fopen(model, "rb") : NULL;
    unsigned char m[4] = {0};
    int zip = fp && fread(m, 1, 4, fp) == 4 && m[0] == 'P' && m[1] == 'K' && m[2] == 3 && m[3] == 4;
    if (fp) fclose(fp);
    return zip ? export_kvq(model, dir, err) : export_source(model, dir, err);
}
