// The conversion loop: source checkpoint -> .kvq. One tensor at a time: choose the
// codec (plan), widen to float32, encode, hand the blobs to the container writer
// (which spools them to disk), free, next. Then the tokenizer and config files, and
// the manifest (schema in docs/FORMAT.md).
#include "libconv/convert/convert.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/tokenizer/tokenizer.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/checkpoint.h"
#include "formats/kvqfile.h"

static const char *tokenizer_role(const char *role) {
    return !strcmp(role, "tokenizer") || !strcmp(role, "tokenizer_config") ? "tokenizer"
         : !strcmp(role, "config") || !strcmp(role, "generation_config") ? "config"
         : NULL;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

// Reads a whole (small) file: tokenizer and config files.
static kvq_status slurp(const char *path, void **data, size_t *n, kvq_err *err) {
    FILE *fp = fopen(path, "rb");
    struct stat st;
    if (!fp || fstat(fileno(fp), &st) != 0) {
        if (fp) fclose(fp);
        return kvq_err_set(err, KVQ_ERR_IO, "%s: %s", path, strerror(errno));
    }
    *n = (size_t)st.st_size;
    *data = malloc(*n ? *n : 1);
    if (!*data) {
        fclose(fp);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for %zu bytes", path, *n);
    }
    size_t got = fread(*data, 1, *n, fp);
    fclose(fp);
    if (got != *n) {
        free(*data);
        return kvq_err_set(err, KVQ_ERR_IO, "%s: short read", path);
    }
    return KVQ_OK;
}

static kvq_status add_file_entry(kvq_writer *w, const char *path, const char *entry, kvq_err *err) {
    void *d = NULL;
    size_t n = 0;
    kvq_status s = slurp(path, &d, &n, err);
    if (s != KVQ_OK) return s;
    s = kvq_writer_add(w, entry, d, n, KVQ_ENTRY_ZSTD_AUTO, NULL, err);
    free(d);
    return s;
}

// The "source" section and the stored tokenizer/config entries.
static kvq_status source_and_files(kvq_ckpt *ck, const char *src, kvq_writer *w, json_t *man,
                                   uint64_t *weight_bytes, kvq_err *err) {
    json_t *files = json_array(), *tok = json_object(), *cfg = json_object();
    json_object_set_new(man, "source", json_pack("{s:s,s:s,s:o}", "kind",
                        kvq_ckpt_get_kind(ck) == KVQ_CKPT_LLAMA2C ? "llama2c" : "hf", "path", src, "files", files));
    json_t *tokenizer = json_pack("{s:o,s:n}", "files", tok, "main");
    json_object_set_new(man, "tokenizer", tokenizer);
    json_object_set_new(man, "config_files", cfg);
    *weight_bytes = 0;
    const char *tokpath = kvq_ckpt_tokenizer_path(ck);
    int tok_seen = 0;
    for (size_t i = 0; i < kvq_ckpt_nfiles(ck); i++) {
        const kvq_srcfile *f = kvq_ckpt_file(ck, i);
        char hex[65];
        kvq_status s = kvq_sha256_file(f->path, hex, err);
        if (s != KVQ_OK) return s;
        json_array_append_new(files, json_pack("{s:s,s:I,s:s,s:s}", "name", f->name, "size", (json_int_t)f->size,
                                               "sha256", hex, "role", f->role));
        if (!strcmp(f->role, "weights")) *weight_bytes += f->size;
        const char *kind = tokenizer_role(f->role);
        if (!kind) continue;
        char entry[512];
        snprintf(entry, sizeof entry, "%s/%s", kind, f->name);
        if ((s = add_file_entry(w, f->path, entry, err)) != KVQ_OK) return s;
        json_object_set_new(!strcmp(kind, "tokenizer") ? tok : cfg, f->name, json_string(entry));
        if (tokpath && !strcmp(base_name(tokpath), f->name) && !strcmp(f->role, "tokenizer")) {
            json_object_set_new(tokenizer, "main", json_string(f->name));
            tok_seen = 1;
        }
    }
    if (tokpath && !tok_seen) { // a tokenizer the file list does not name (e.g. llama2.c tok*.bin)
        char entry[512], hex[65];
        snprintf(entry, sizeof entry, "tokenizer/%s", base_name(tokpath));
        kvq_status s = kvq_sha256_file(tokpath, hex, err);
        if (s == KVQ_OK) s = add_file_entry(w, tokpath, entry, err);
        if (s != KVQ_OK) return s;
        struct stat st;
        stat(tokpath, &st);
        json_array_append_new(files, json_pack("{s:s,s:I,s:s,s:s}", "name", base_name(tokpath), "size",
                                               (json_int_t)st.st_size, "sha256", hex, "role", "tokenizer"));
        json_object_set_new(tok, base_name(tokpath), json_string(entry));
        json_object_set_new(tokenizer, "main", json_string(base_name(tokpath)));
    }
    return KVQ_OK;
}

// Tells the kernel the source pages of a converted tensor can go, so resident memory
// follows the tensor being converted rather than the whole mmapped model. PAGEOUT
// never loses data (clean file pages are re-read if touched again).
static void release_source(const kvq_tensor *t) {
#ifdef MADV_PAGEOUT
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)t->data + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    uintptr_t b = ((uintptr_t)t->data + t->nbytes) & ~(uintptr_t)(pg - 1);
    if (pg > 0 && b > a) madvise((void *)a, b - a, MADV_PAGEOUT);
#else
    (void)t;
#endif
}

// Encodes one tensor and writes its blobs; returns its manifest record.
static kvq_status convert_tensor(const kvq_tensor *t, const kvq_plan *plan, kvq_writer *w, int n_threads,
                                 json_t **rec, uint64_t *bytes, int *lossy, const char **codec_name,
                                 kvq_err *err) {
    const kvq_codec_traits *codec;
    const json_t *cfg;
    const char *spec;
    kvq_status s = kvq_plan_choose(plan, t, &codec, &cfg, &spec, err);
    if (s != KVQ_OK) return s;
    int64_t numel = kvq_tensor_numel(t);
    int64_t cols = t->ndim ? t->shape[t->ndim - 1] : 1;
    int64_t rows = cols ? numel / cols : 0;
    float *x = malloc((size_t)(numel ? numel : 1) * sizeof *x);
    if (!x) return kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory for %" PRId64 " floats", t->name, numel);
    kvq_dtype_to_f32(t->dtype, t->data, (size_t)numel, x);
    int64_t bad = numel; // NaN/Inf in a source are refused, whatever the codec (docs/CHECKPOINTS.md)
#pragma omp parallel for reduction(min : bad) num_threads(n_threads > 0 ? n_threads : omp_get_max_threads())
    for (int64_t i = 0; i < numel; i++)
        if (!isfinite(x[i]) && i < bad) bad = i;
    if (bad < numel) {
        kvq_status r = kvq_err_set(err, KVQ_ERR_NUMERIC, "tensor '%s': non-finite value %g at index %" PRId64
                                   " (row %" PRId64 ", column %" PRId64 "): the source holds NaN or Inf",
                                   t->name, (double)x[bad], bad, cols ? bad / cols : 0, cols ? bad % cols : bad);
        free(x);
        return r;
    }
    uint64_t seed = kvq_plan_tensor_seed(plan, t->name);
    kvq_codec_input in = {.src = t, .x = x, .rows = rows, .cols = cols, .seed = seed, .n_threads = n_threads};
    kvq_encoded enc = {0};
    enc.predicted_mse = NAN;
    s = codec->encode(cfg, &in, &enc, err);
    free(x);
    if (s != KVQ_OK) {
        kvq_encoded_free(&enc);
        kvq_err_prefix(err, "tensor '%s' (codec %s)", t->name, spec);
        return s;
    }
    json_t *entries = json_object(), *rate = json_object(), *shape = json_array();
    uint64_t stored = 0;
    for (int i = 0; i < enc.n_blob && s == KVQ_OK; i++) {
        char entry[1024];
        snprintf(entry, sizeof entry, "t/%s/%s", t->name, enc.blob[i].role);
        kvq_entry_info info = {0};
        s = kvq_writer_add(w, entry, enc.blob[i].data, enc.blob[i].size,
                           enc.blob[i].compressible ? KVQ_ENTRY_ZSTD_AUTO : KVQ_ENTRY_RAW, &info, err);
        stored += info.stored_size;
        json_object_set_new(entries, enc.blob[i].role, json_string(entry));
    }
    char *pj = enc.params ? json_dumps(enc.params, JSON_COMPACT) : NULL;
    stored += pj ? strlen(pj) : 0;
    free(pj);
    for (int i = 0; i < enc.n_part; i++) json_object_set_new(rate, enc.part[i].name, json_real(enc.part[i].bits));
    for (int i = 0; i < t->ndim; i++) json_array_append_new(shape, json_integer(t->shape[i]));
    char seedhex[17];
    snprintf(seedhex, sizeof seedhex, "%016" PRIx64, seed);
    double bpw = numel ? 8.0 * (double)stored / (double)numel : 0.0;
    *rec = json_pack("{s:s,s:o,s:s,s:{s:s,s:s,s:O?,s:b},s:o,s:I,s:f,s:f,s:o,s:o,s:s}",
                     "name", t->name, "shape", shape, "source_dtype", kvq_dtype_name(t->dtype),
                     "codec", "name", codec->name, "spec", spec, "params", enc.params, "lossless", codec->lossless,
                     "entries", entries, "bytes", (json_int_t)stored, "bits_per_weight", bpw,
                     "code_bits_per_weight", enc.code_bits_per_weight, "rate", rate,
                     "predicted_mse", isfinite(enc.predicted_mse) ? json_real(enc.predicted_mse) : json_null(),
                     "seed", seedhex);
    kvq_encoded_free(&enc);
    *bytes = stored;
    *lossy = !codec->lossless;
    *codec_name = codec->name;
    if (s == KVQ_OK && !*rec) s = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': cannot build its record", t->name);
    return s;
}

// What every reader of the .kvq will check, checked on the source before anything is written:
// the architecture's limits, every known tensor's shape against the architecture (a head_dim
// that disagrees with the projections, a layer beyond num_hidden_layers), tensor names that
// stay inside the archive's namespace, and a tokenizer that parses.
static kvq_status check_source(const char *src, const kvq_ckpt *ck, kvq_err *err) {
    const kvq_arch *a = kvq_ckpt_arch(ck);
    kvq_status s = kvq_arch_check_limits(a, src, err);
    for (size_t i = 0; i < kvq_ckpt_count(ck) && !s; i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        if (t->name[0] == '/' || strstr(t->name, "..") || strchr(t->name, '\\'))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor name '%s' would leave the archive's namespace", src, t->name);
        s = kvq_arch_check_shape(a, t->name, t->shape, t->ndim, src, err);
    }
    const char *tp = kvq_ckpt_tokenizer_path(ck);
    if (!s && tp) { // stored only once it parses: a reader must be able to use it
        kvq_tokenizer *tok = NULL;
        s = kvq_tok_open(tp, &tok, err);
        if (!s && kvq_tok_vocab_size(tok) > a->vocab_size) // ids the model cannot embed
            s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: the tokenizer has %d ids, more than the model's vocab_size %d", tp,
                            kvq_tok_vocab_size(tok), a->vocab_size);
        kvq_tok_close(tok);
    }
    return s;
}

kvq_status kvq_convert(const char *src, const char *out, const kvq_convert_opts *o,
                       kvq_convert_summary *sum, kvq_err *err) {
    kvq_plan *plan = NULL;
    kvq_ckpt *ck = NULL;
    kvq_writer *w = NULL;
    json_t *man = json_object(), *tensors = json_array();
    kvq_convert_summary S = {.bits_per_weight = NAN, .bits_per_param = NAN};
    double lossy_bits = 0, lossy_numel = 0;
    kvq_status s = kvq_plan_build(&o->plan, &plan, err);
    if (s == KVQ_OK) s = kvq_ckpt_open(src, &ck, err);
    if (s == KVQ_OK) s = check_source(src, ck, err);
    if (s == KVQ_OK) s = kvq_writer_open(out, &w, err);
    if (s != KVQ_OK) goto done;

    char created[128];
    snprintf(created, sizeof created, "kvq %s", KVQ_VERSION);
    json_object_set_new(man, "format", json_string(KVQ_FORMAT_NAME));
    json_object_set_new(man, "format_version", json_integer(KVQ_FORMAT_VERSION));
    json_object_set_new(man, "kvq_version", json_string(KVQ_VERSION));
    json_object_set_new(man, "created_by", json_string(o->created_by ? o->created_by : created));
    json_object_set_new(man, "architecture", kvq_arch_to_json(kvq_ckpt_arch(ck)));
    json_object_set_new(man, "recipe", kvq_plan_to_json(plan));
    if (o->kv_spec) {
        const kvq_arch *ar = kvq_ckpt_arch(ck);
        s = kvq_kv_write_section(w, man, o->kv_spec, ar->n_layers, ar->n_kv_heads, ar->head_dim,
                                 ar->max_position_embeddings, o->kv_window, o->kv_boundary,
                                 kvq_plan_seed(plan), err);
        if (s != KVQ_OK) goto done;
    }

    S.n_tensors = kvq_ckpt_count(ck);
    for (size_t i = 0; i < S.n_tensors && s == KVQ_OK; i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        json_t *rec = NULL;
        uint64_t bytes = 0;
        int lossy = 0;
        const char *cname = "?";
        s = convert_tensor(t, plan, w, o->n_threads, &rec, &bytes, &lossy, &cname, err);
        if (s != KVQ_OK) { json_decref(rec); break; }
        json_array_append_new(tensors, rec);
        release_source(t);
        int64_t numel = kvq_tensor_numel(t);
        if (lossy) { S.n_quantized++; lossy_bits += 8.0 * (double)bytes; lossy_numel += (double)numel; }
        if (o->progress) {
            kvq_convert_progress p = {i, S.n_tensors, t->name, cname,
                                      numel ? 8.0 * (double)bytes / (double)numel : 0.0, bytes};
            o->progress(o->progress_ud, &p);
        }
    }
    if (s == KVQ_OK) s = source_and_files(ck, src, w, man, &S.source_bytes, err);
    if (s != KVQ_OK) goto done;
    json_object_set(man, "tensors", tensors);
    s = kvq_writer_commit(w, man, err);
    w = NULL;
    if (s == KVQ_OK) {
        struct stat st;
        S.bytes = stat(out, &st) == 0 ? (uint64_t)st.st_size : 0;
        if (lossy_numel > 0) S.bits_per_weight = lossy_bits / lossy_numel;
        kvq_bits kb; // the definition every tool shares, from the manifest just written
        kvq_file_bits(man, &kb);
        S.bits_per_param = kb.bits_per_param;
        if (sum) *sum = S;
    }
done:
    kvq_writer_abort(w);
    kvq_ckpt_close(ck);
    kvq_plan_free(plan);
    json_decref(tensors);
    json_decref(man);
    return s;
}
