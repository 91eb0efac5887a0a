// The conversion loop: source checkpoint -> .kvq. One tensor at a time: choose the
// codec (plan), widen to float32, encode, hand the blobs to the container writer
// (which spools them to disk), free, next. Then the tokenizer and config files, and
// the manifest (schema in docs/FORMAT.md).
#include "libconv/convert/convert.h"
#include "libconv/convert/alloc.h"
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
#include <xxhash.h>

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

// Encodes one tensor as its plan entry says and writes its blobs; returns its manifest record.

// A tensor's "allocation" record: its sensitivity, output error and, for row blocks, their rows and
// shares of the sensitivity (a later --calib-from reads them back).
static json_t *alloc_record(const kvq_plan_entry *pe) {
    json_t *a = json_pack("{s:f,s:f}", "sensitivity", pe->sensitivity, "output_error",
                          isfinite(pe->output_error) ? pe->output_error : 0.0);
    if (a && pe->n_blocks > 0) {
        json_t *sh = json_array();
        for (int b = 0; b < pe->n_blocks; b++) json_array_append_new(sh, json_real(pe->block_share[b]));
        json_object_set_new(a, "block_rows", json_integer(pe->block_rows));
        json_object_set_new(a, "block_shares", sh);
    }
    return a;
}

static kvq_status convert_tensor(const kvq_tensor *t, const kvq_plan_entry *pe, kvq_writer *w, int n_threads,
                                 const kvq_calib *calib, json_t **rec, double *snr_db, kvq_err *err) {
    const kvq_codec_traits *codec = pe->codec;
    int64_t numel = pe->numel, cols = pe->cols, rows = pe->rows;
    // Lossless codecs store the source bytes and codecs that read the source themselves stream
    // it: neither gets a float32 copy (x = NULL); the finiteness check then widens 1 Mi values
    // at a time, so a 1 GB embedding costs no 2 GB buffer.
    const int stream = codec->lossless || (codec->reads_source && (t->dtype == KVQ_DTYPE_F32 || t->dtype == KVQ_DTYPE_F16 ||
                                                                   t->dtype == KVQ_DTYPE_BF16));
    const int64_t chunk = stream ? (int64_t)1 << 20 : numel;
    float *x = malloc((size_t)(chunk > 0 ? chunk : 1) * sizeof *x);
    if (!x) return kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory for %" PRId64 " floats", t->name, chunk);
    int64_t bad = numel; // NaN/Inf in a source are refused, whatever the codec (docs/CHECKPOINTS.md)
    double sx = 0.0;
    float badv = 0.0f;
    for (int64_t c0 = 0; c0 < numel && bad == numel; c0 += chunk) {
        int64_t len = numel - c0 < chunk ? numel - c0 : chunk;
        kvq_dtype_to_f32(t->dtype, (const uint8_t *)t->data + (size_t)c0 * kvq_dtype_size(t->dtype), (size_t)len, x);
        int64_t b = len;
#pragma omp parallel for reduction(min : b) reduction(+ : sx) num_threads(n_threads > 0 ? n_threads : omp_get_max_threads())
        for (int64_t i = 0; i < len; i++) {
            if (!isfinite(x[i]) && i < b) b = i;
            sx += (double)x[i] * (double)x[i];
        }
        if (b < len) bad = c0 + b, badv = x[b];
    }
    if (bad < numel) {
        kvq_status r = kvq_err_set(err, KVQ_ERR_NUMERIC, "tensor '%s': non-finite value %g at index %" PRId64
                                   " (row %" PRId64 ", column %" PRId64 "): the source holds NaN or Inf",
                                   t->name, (double)badv, bad, cols ? bad / cols : 0, cols ? bad % cols : bad);
        free(x);
        return r;
    }
    if (stream) { free(x); x = NULL; }
    else release_source(t); // the codec reads the float32 copy only: the mapped source bytes can go now
    kvq_codec_input in = {.src = t, .x = x, .rows = rows, .cols = cols, .seed = pe->seed, .n_threads = n_threads};
    if (calib && pe->spec && strstr(pe->spec, ":ldlq")) in.hess = kvq_calib_hessian(calib, t->name, rows, cols);
    kvq_encoded enc = {0};
    enc.predicted_mse = NAN;
    kvq_status s = codec->encode(pe->cfg, &in, &enc, err);
    free(x);
    if (s != KVQ_OK) {
        kvq_encoded_free(&enc);
        kvq_err_prefix(err, "tensor '%s' (codec %s)", t->name, pe->spec);
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
    snprintf(seedhex, sizeof seedhex, "%016" PRIx64, pe->seed);
    double bpw = numel ? 8.0 * (double)stored / (double)numel : 0.0;
    *rec = json_pack("{s:s,s:o,s:s,s:{s:s,s:s,s:O?,s:b},s:o,s:I,s:f,s:f,s:o,s:o,s:s}",
                     "name", t->name, "shape", shape, "source_dtype", kvq_dtype_name(t->dtype),
                     "codec", "name", codec->name, "spec", pe->spec, "params", enc.params, "lossless", codec->lossless,
                     "entries", entries, "bytes", (json_int_t)stored, "bits_per_weight", bpw,
                     "code_bits_per_weight", enc.code_bits_per_weight, "rate", rate,
                     "predicted_mse", isfinite(enc.predicted_mse) ? json_real(enc.predicted_mse) : json_null(),
                     "seed", seedhex);
    if (*rec && isfinite(pe->sensitivity)) // an allocated tensor: what the budget was spent by
        json_object_set_new(*rec, "allocation", alloc_record(pe));
    double mse = codec->lossless ? 0.0 : enc.predicted_mse;
    *snr_db = !isfinite(mse) || numel == 0 ? NAN : mse <= 0 ? INFINITY : 10.0 * log10(sx / (double)numel / mse);
    kvq_encoded_free(&enc);
    if (s == KVQ_OK && !*rec) s = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': cannot build its record", t->name);
    return s;
}

// What every reader of the .kvq will check, checked on the source before anything is written:
// the architecture's limits, every known tensor's shape against the architecture (a head_dim
// that disagrees with the projections, a layer beyond num_hidden_layers), tensor names that
// stay inside the archive's namespace, and a tokenizer that parses.
static int ckpt_has(const char *name, void *ck) { return kvq_ckpt_find(ck, name) != NULL; }

static kvq_status check_source(const char *src, const kvq_ckpt *ck, kvq_err *err) {
    const kvq_arch *a = kvq_ckpt_arch(ck);
    kvq_status s = kvq_arch_check_limits(a, src, err);
    for (size_t i = 0; i < kvq_ckpt_count(ck) && !s; i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        if (t->name[0] == '/' || strstr(t->name, "..") || strchr(t->name, '\\'))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor name '%s' would leave the archive's namespace", src, t->name);
        s = kvq_arch_check_shape(a, t->name, t->shape, t->ndim, src, err);
    }
    if (!s) s = kvq_arch_check_tensor_set(a, ckpt_has, (void *)ck, src, err); // what a reader will need
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

// What kvq_convert and kvq_convert_predict share: the plan, the source, one plan entry per
// tensor (after the adjust hook) and the KV codec.
typedef struct {
    kvq_plan *plan;
    kvq_ckpt *ck;
    kvq_plan_entry *e;
    size_t n;
    kvq_plan_kv_policy kv;
    double target_bpw;      // NAN: no budget
    size_t calib_tokens;    // tokens the calibration pass saw (budget only)
    int uniform;            // the budget met with one rate (the default over its work limit)
    int hessian;            // some spec asks for LDLQ (":ldlq"): the calibration keeps input covariances
    kvq_calib *calib;       // that calibration, kept for the encoders (NULL: none)
} setup_t;

static void setup_free(setup_t *S) {
    free(S->e);
    kvq_calib_free(S->calib);
    kvq_ckpt_close(S->ck);
    kvq_plan_free(S->plan);
    memset(S, 0, sizeof *S);
}

static void calib_note(const kvq_convert_opts *o, const char *note) {
    if (!o->calib_progress) return;
    kvq_calib_progress p = {.event = KVQ_CALIB_NOTE, .note = note};
    o->calib_progress(o->calib_ud, &p);
}

// Meets the plan's whole-model budget b (alloc.h): measured sensitivities (a calibration pass
// and one probe per rated tensor, or those an earlier file stored); for the tool's default
// budget, uniform rates when that calibration is over the work limit, and the plan as it
// stands (lossless under the built-in rules) when the budget is out of the model's reach.
static kvq_status budget(const char *src, const kvq_convert_opts *o, setup_t *S, const kvq_plan_budget_t *b, kvq_err *err) {
    char note[1024];
    kvq_status s = kvq_alloc_check(S->plan, S->ck, S->e, S->n, b->target_bpw, err);
    if (s == KVQ_ERR_ARG && o->budget_default) { // the default budget does not fit: nothing rated
        snprintf(note, sizeof note, "%s: the default budget does not fit this model (%s): storing it as its rules say "
                 "(pass --target-bpw X in that range, or --weights SPEC)", src, err->msg);
        calib_note(o, note);
        kvq_plan_set_budget(S->plan, NAN, 0, 0);
        S->target_bpw = NAN;
        return KVQ_OK;
    }
    if (s) return s;
    if (b->calib_from) return kvq_alloc_apply_from(S->plan, S->ck, S->e, S->n, b->calib_from, b->target_bpw, err);
    kvq_alloc_work_t W;
    kvq_alloc_work(S->ck, S->e, S->n, b->calib_tokens, b->calib_probe, &W);
    const double limit = o->calib_work_limit > 0 ? o->calib_work_limit : o->calib_work_limit < 0 ? INFINITY : KVQ_CALIB_WORK_LIMIT;
    if (o->budget_default && W.work > limit) { // too long for a default: one rate, no calibration
        snprintf(note, sizeof note, "%s: %.0f parameters, %zu tensors to probe: calibrating the default %.2f bits/param budget "
                 "would run %.2g parameter-tokens (~%.2g CPU-minutes), over the default's limit of %.2g; writing uniform "
                 "rates at that budget instead (pass --target-bpw %.2f to calibrate anyway, --weights none for a lossless file)",
                 src, W.params, W.n_probes, b->target_bpw, W.work, W.work / KVQ_CALIB_RATE / 60.0, limit < 1 ? 0.0 : limit,
                 b->target_bpw);
        calib_note(o, note);
        kvq_plan_set_budget(S->plan, b->target_bpw, 1, 1);
        S->uniform = 1;
        return kvq_alloc_uniform(S->plan, S->ck, S->e, S->n, b->target_bpw, err);
    }
    if (o->budget_default) kvq_plan_set_budget(S->plan, b->target_bpw, 0, 1);
    if (o->calib_progress) {
        kvq_calib_progress p = {.event = KVQ_CALIB_START, .count = W.n_probes, .tokens = (size_t)b->calib_tokens,
                                .probe_tokens = W.probe_tokens, .params = W.params, .work = W.work, .text = b->calib_text,
                                .forwards = W.forwards, .probe = b->calib_probe};
        o->calib_progress(o->calib_ud, &p);
    }
    kvq_calib *c = NULL;
    s = kvq_calib_run(src, b->calib_text, b->calib_tokens, kvq_plan_seed(S->plan), o->n_threads, S->hessian,
                      o->calib_progress, o->calib_ud, &c, err);
    if (s == KVQ_OK) S->calib_tokens = kvq_calib_tokens(c), kvq_calib_set_probe(c, b->calib_probe);
    if (s == KVQ_OK)
        s = kvq_alloc_apply(S->plan, S->ck, S->e, S->n, c, b->target_bpw, o->n_threads, o->calib_progress, o->calib_ud, err);
    if (s == KVQ_OK && S->hessian) S->calib = c; // the covariances, for LDLQ's encoders
    else kvq_calib_free(c);
    return s;
}

// LDLQ by default (docs/HYPERQUANT.md "LDLQ by default"), for a plan whose specs ask for no LDLQ: a budget calibrating
// on a text the user gave, the codec left to the budget (no --weights), enough tokens asked for the widest input and
// covariances that fit half the memory left. Decided for --dry-run too (the specs it shows); the covariances kept only
// when encoding (hessian). Returns the tokens it needs (0: not on; why in note when it would have applied).
static int64_t ldlq_default(const char *src, const kvq_plan_budget_t *b, setup_t *S, int hessian, char *note, size_t nn) {
    if (isnan(b->target_bpw) || !b->calib_text || (b->weights_spec && strcmp(b->weights_spec, "none"))) return 0;
    const kvq_arch *a = kvq_ckpt_arch(S->ck);
    int64_t w = a->hidden_size > (int64_t)a->n_heads * a->head_dim ? a->hidden_size : (int64_t)a->n_heads * a->head_dim;
    w = a->intermediate_size > w ? a->intermediate_size : w;
    const double bytes = kvq_calib_ldlq_bytes(a), avail = kvq_mem_available();
    if (b->calib_tokens < KVQ_LDLQ_TOKENS_PER_COL * w) {
        snprintf(note, nn, "%s: rounding without LDLQ: the calibration text would shape it with --calib-tokens %lld or more "
                 "(%d asked for)", src, (long long)(KVQ_LDLQ_TOKENS_PER_COL * w), b->calib_tokens);
        return 0;
    }
    if (avail > 0 && bytes > 0.5 * avail) {
        snprintf(note, nn, "%s: rounding without LDLQ: its input covariances would need %.2f GB, %.2f GB of memory is "
                 "available", src, bytes / 1e9, avail / 1e9);
        return 0;
    }
    kvq_plan_set_ldlq(S->plan, 1);
    S->hessian = hessian;
    return KVQ_LDLQ_TOKENS_PER_COL * w;
}

// Takes LDLQ by default back after its calibration: every entry's spec without ":ldlq" (the default's has no "=damp"),
// the covariances freed.
static kvq_status ldlq_undo(const char *src, setup_t *S, kvq_err *err) {
    kvq_status s = KVQ_OK;
    kvq_plan_set_ldlq(S->plan, 0);
    for (size_t i = 0; i < S->n && s == KVQ_OK; i++) {
        const char *sp = S->e[i].spec, *l = sp ? strstr(sp, ":ldlq") : NULL;
        if (!l) continue;
        char plain[1024];
        if (snprintf(plain, sizeof plain, "%.*s%s", (int)(l - sp), sp, l + 5) >= (int)sizeof plain)
            s = kvq_err_set(err, KVQ_ERR_ARG, "%s: tensor '%s': spec too long", src, S->e[i].name);
        else s = kvq_plan_entry_set_spec(S->plan, &S->e[i], plain, NULL, err);
    }
    kvq_calib_free(S->calib);
    S->calib = NULL, S->hessian = 0;
    return s;
}

// hessian: the conversion will encode (not a prediction), so specs asking for LDLQ get their input
// covariances from a calibration pass: the budget's, or one of its own (no probes needed).
static kvq_status setup(const char *src, const kvq_convert_opts *o, int hessian, setup_t *S, kvq_err *err) {
    memset(S, 0, sizeof *S);
    kvq_status s = kvq_plan_build(&o->plan, &S->plan, err);
    if (s == KVQ_OK) s = kvq_ckpt_open(src, &S->ck, err);
    if (s == KVQ_OK) s = check_source(src, S->ck, err);
    if (s != KVQ_OK) return s;
    S->n = kvq_ckpt_count(S->ck);
    if (!(S->e = calloc(S->n ? S->n : 1, sizeof *S->e))) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", src);
    for (size_t i = 0; i < S->n && s == KVQ_OK; i++) s = kvq_plan_resolve(S->plan, kvq_ckpt_tensor(S->ck, i), &S->e[i], err);
    kvq_plan_budget_t b;
    kvq_plan_budget(S->plan, &b);
    S->target_bpw = b.target_bpw;
    int any_ldlq = 0;
    for (size_t i = 0; i < S->n; i++) any_ldlq |= S->e[i].spec && strstr(S->e[i].spec, ":ldlq") != NULL;
    S->hessian = hessian && any_ldlq;
    char auto_note[512] = ""; // said once setup succeeded (an error then stays the one line on stderr)
    const int64_t auto_need = s == KVQ_OK && !any_ldlq ? ldlq_default(src, &b, S, hessian, auto_note, sizeof auto_note) : 0;
    int64_t wide = 0; // LDLQ's widest input: too few calibration tokens for it give a rank-deficient covariance, and
                      // LDLQ then loses to plain rounding (docs/HYPERQUANT.md "LDLQ": +45 % KLD measured)
    for (size_t i = 0; i < S->n && S->hessian; i++)
        if (S->e[i].spec && strstr(S->e[i].spec, ":ldlq") && S->e[i].cols > wide) wide = S->e[i].cols;
    const int64_t need = KVQ_LDLQ_TOKENS_PER_COL * wide,
                  asked = b.calib_tokens > 0 ? b.calib_tokens : KVQ_CALIB_TOKENS_DEFAULT;
    if (s == KVQ_OK && S->hessian && asked < need) // refused before any calibration runs
        return kvq_err_set(err, KVQ_ERR_ARG, "%s: ldlq needs a calibration of at least %lld tokens (%d per column of the "
                           "widest input, %lld) and %lld are asked for: pass --calib FILE --calib-tokens N (N >= %lld)",
                           src, (long long)need, KVQ_LDLQ_TOKENS_PER_COL, (long long)wide, (long long)asked, (long long)need);
    if (s == KVQ_OK && !isnan(b.target_bpw)) s = budget(src, o, S, &b, err); // the whole-model budget (alloc.h)
    if (s == KVQ_OK && S->hessian && !S->calib) // no calibration ran (--calib-from, or no budget): one for LDLQ
        s = kvq_calib_run(src, b.calib_text, b.calib_tokens > 0 ? b.calib_tokens : KVQ_CALIB_TOKENS_DEFAULT,
                          kvq_plan_seed(S->plan), o->n_threads, 1, NULL, NULL, &S->calib, err);
    if (s == KVQ_OK && S->calib && auto_need && (int64_t)kvq_calib_tokens(S->calib) < auto_need) {
        // LDLQ by default on a text shorter than asked for: plain rounding instead (fewer tokens than 2 a column make
        // it worse than plain), said in a note
        snprintf(auto_note, sizeof auto_note, "%s: rounding without LDLQ: the calibration text holds %zu tokens, LDLQ needs "
                 "%lld", src, kvq_calib_tokens(S->calib), (long long)auto_need);
        s = ldlq_undo(src, S, err);
    }
    if (s == KVQ_OK && S->calib && (int64_t)kvq_calib_tokens(S->calib) < need) // the text may hold fewer tokens than asked for
        s = kvq_err_set(err, KVQ_ERR_ARG, "%s: ldlq needs a calibration of at least %lld tokens (%d per column of the "
                        "widest input, %lld) and this one has %zu: pass --calib FILE --calib-tokens N (N >= %lld)", src,
                        (long long)need, KVQ_LDLQ_TOKENS_PER_COL, (long long)wide, kvq_calib_tokens(S->calib), (long long)need);
    if (s == KVQ_OK && o->adjust) s = o->adjust(o->adjust_ud, S->plan, S->e, S->n, err);
    if (s == KVQ_OK && auto_note[0]) calib_note(o, auto_note);
    kvq_plan_kv(S->plan, &S->kv);
    if (o->kv_spec) S->kv.spec = o->kv_spec, S->kv.window = o->kv_window, S->kv.boundary = o->kv_boundary;
    return s;
}

static json_t *manifest_head(const setup_t *S, const kvq_convert_opts *o) {
    char created[128];
    snprintf(created, sizeof created, "kvq %s", KVQ_VERSION);
    json_t *man = json_object();
    json_object_set_new(man, "format", json_string(KVQ_FORMAT_NAME));
    json_object_set_new(man, "format_version", json_integer(KVQ_FORMAT_VERSION));
    json_object_set_new(man, "kvq_version", json_string(KVQ_VERSION));
    json_object_set_new(man, "created_by", json_string(o->created_by ? o->created_by : created));
    json_object_set_new(man, "architecture", kvq_arch_to_json(kvq_ckpt_arch(S->ck)));
    json_t *recipe = kvq_plan_to_json(S->plan);
    if (o->kv_spec) // --kv replaced the recipe's KV codec: record what is stored
        json_object_set_new(recipe, "kv", json_pack("{s:s,s:i,s:b,s:I}", "codec", o->kv_spec, "window", o->kv_window,
                                                    "boundary", o->kv_boundary, "seed", (json_int_t)S->kv.seed));
    json_object_set_new(man, "recipe", recipe);
    return man;
}

static void kv_summary(const kvq_plan_kv_policy *kv, char *spec, size_t n, int *window, int *boundary) {
    snprintf(spec, n, "%s", kv->spec ? kv->spec : "");
    *window = kv->window;
    *boundary = kv->boundary;
}

kvq_status kvq_convert(const char *src, const char *out, const kvq_convert_opts *o,
                       kvq_convert_summary *sum, kvq_err *err) {
    setup_t S;
    kvq_writer *w = NULL;
    json_t *man = NULL, *tensors = json_array();
    kvq_convert_summary R = {.bits_per_weight = NAN, .bits_per_param = NAN, .target_bpw = NAN};
    double lossy_bits = 0, lossy_numel = 0;
    kvq_status s = setup(src, o, 1, &S, err);
    if (s == KVQ_OK) s = kvq_writer_open_journal(out, o->resume, &w, err);
    if (s != KVQ_OK) goto done;
    man = manifest_head(&S, o);
    kv_summary(&S.kv, R.kv_spec, sizeof R.kv_spec, &R.kv_window, &R.kv_boundary);
    R.target_bpw = S.target_bpw;
    R.calib_tokens = S.calib_tokens;
    R.uniform = S.uniform;

    R.n_tensors = S.n;
    uint64_t src_total = 0, src_done = 0;
    for (size_t i = 0; i < S.n; i++) src_total += kvq_ckpt_tensor(S.ck, i)->nbytes;
    // --resume: the journal's groups, in order, as long as each is this tensor converted the same
    // way (name, spec, seed, and the source bytes' digest); the rest is cut and redone.
    size_t n_journal = kvq_writer_journal_count(w);
    for (size_t i = 0; i < S.n && s == KVQ_OK; i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(S.ck, i);
        char hex[17], seedhex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, XXH3_64bits(t->data, t->nbytes));
        snprintf(seedhex, sizeof seedhex, "%016" PRIx64, S.e[i].seed);
        json_t *rec = NULL;
        double snr = NAN;
        int reused = 0;
        if (i < n_journal && i == R.n_reused) {
            json_t *note = json_loads(kvq_writer_journal_text(w, i), 0, NULL);
            const char *ns = json_string_value(json_object_get(note, "name")), *sp = json_string_value(json_object_get(note, "spec")),
                       *sd = json_string_value(json_object_get(note, "seed")), *sh = json_string_value(json_object_get(note, "source_xxh3"));
            if (ns && sp && sd && sh && !strcmp(ns, t->name) && !strcmp(sp, S.e[i].spec) && !strcmp(sd, seedhex) &&
                !strcmp(sh, hex) && json_is_object(json_object_get(note, "record"))) {
                s = kvq_writer_journal_adopt(w, i, err);
                rec = json_incref(json_object_get(note, "record"));
                snr = json_number_value(json_object_get(note, "snr_db"));
                if (json_is_null(json_object_get(note, "snr_db"))) snr = NAN;
                else if (json_is_string(json_object_get(note, "snr_db"))) snr = INFINITY;
                reused = 1;
                R.n_reused++;
            }
            json_decref(note);
            if (s) { json_decref(rec); break; }
        }
        if (!reused) {
            if (i == R.n_reused && (s = kvq_writer_journal_cut(w, err))) break; // first tensor converted anew
            s = convert_tensor(t, &S.e[i], w, o->n_threads, S.calib, &rec, &snr, err);
            if (s != KVQ_OK) { json_decref(rec); break; }
            json_t *note = json_pack("{s:s,s:s,s:s,s:s,s:O}", "name", t->name, "spec", S.e[i].spec, "seed", seedhex,
                                     "source_xxh3", hex, "record", rec);
            json_object_set_new(note, "snr_db", isnan(snr) ? json_null() : isinf(snr) ? json_string("exact") : json_real(snr));
            char *text = note ? json_dumps(note, JSON_COMPACT) : NULL;
            s = text ? kvq_writer_journal_note(w, text, err) : kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
            free(text);
            json_decref(note);
            if (s) { json_decref(rec); break; }
        }
        json_array_append_new(tensors, rec);
        release_source(t);
        uint64_t bytes = (uint64_t)json_integer_value(json_object_get(rec, "bytes"));
        if (!S.e[i].codec->lossless) { R.n_quantized++; lossy_bits += 8.0 * (double)bytes; lossy_numel += (double)S.e[i].numel; }
        src_done += t->nbytes;
        if (o->progress) {
            kvq_convert_progress p = {i, S.n, t->name, S.e[i].codec->name, S.e[i].spec,
                                      S.e[i].numel ? 8.0 * (double)bytes / (double)S.e[i].numel : 0.0, bytes, snr, reused,
                                      src_done, src_total};
            o->progress(o->progress_ud, &p);
        }
    }
    if (s == KVQ_OK && R.n_reused == S.n) s = kvq_writer_journal_cut(w, err); // everything reused: drop the tail
    if (s == KVQ_OK && S.kv.spec) { // after the tensors, so that the journal holds only tensor groups
        const kvq_arch *ar = kvq_ckpt_arch(S.ck);
        s = kvq_kv_write_section(w, man, S.kv.spec, ar->n_layers, ar->n_kv_heads, ar->head_dim,
                                 ar->max_position_embeddings, S.kv.window, S.kv.boundary, S.kv.seed, err);
    }
    if (s == KVQ_OK) s = source_and_files(S.ck, src, w, man, &R.source_bytes, err);
    if (s != KVQ_OK) goto done;
    json_object_set(man, "tensors", tensors);
    s = kvq_writer_commit(w, man, err);
    w = NULL;
    if (s == KVQ_OK) {
        struct stat st;
        R.bytes = stat(out, &st) == 0 ? (uint64_t)st.st_size : 0;
        if (lossy_numel > 0) R.bits_per_weight = lossy_bits / lossy_numel;
        kvq_bits kb; // the definition every tool shares, from the manifest just written
        kvq_file_bits(man, &kb);
        R.bits_per_param = kb.bits_per_param;
        if (sum) *sum = R;
    }
done:
    kvq_writer_abort(w);
    setup_free(&S);
    json_decref(tensors);
    json_decref(man);
    return s;
}

// ---- prediction (--dry-run) ----------------------------------------------------------

// Bytes a zip entry adds beyond its payload: local header (30 + name + the 64-alignment extra
// field: 4 + 2 + padding, 32 on average) and its central directory record (46 + name).
static uint64_t zip_overhead(const char *name) { return 30 + 6 + 32 + 46 + 2 * (uint64_t)strlen(name); }

// A stand-in entry-table row with realistic widths (offsets of the predicted size).
static json_t *fake_entry(uint64_t at, uint64_t size, uint64_t stored, int zstd) {
    return json_pack("{s:I,s:I,s:I,s:I,s:b,s:s}", "header", (json_int_t)at, "offset", (json_int_t)(at + 64),
                     "size", (json_int_t)size, "stored_size", (json_int_t)stored, "zstd", zstd, "xxh3", "0123456789abcdef");
}

static kvq_status predict_file(const char *path, const char *entry, json_t *tab, uint64_t *pos, kvq_err *err) {
    void *d = NULL;
    size_t n = 0;
    kvq_status s = slurp(path, &d, &n, err);
    if (s) return s;
    uint64_t st = kvq_entry_stored_estimate(d, n, KVQ_ENTRY_ZSTD_AUTO);
    free(d);
    json_object_set_new(tab, entry, fake_entry(*pos, n, st, st < n));
    *pos += st + zip_overhead(entry);
    return KVQ_OK;
}

kvq_status kvq_convert_predict(const char *src, const kvq_convert_opts *o, kvq_convert_prediction *P, kvq_err *err) {
    memset(P, 0, sizeof *P);
    setup_t S;
    kvq_status s = setup(src, o, 0, &S, err);
    if (s != KVQ_OK) { setup_free(&S); return s; }
    json_t *man = manifest_head(&S, o), *tensors = json_array(), *tab = json_object();
    uint64_t pos = 0;
    kv_summary(&S.kv, P->kv_spec, sizeof P->kv_spec, &P->kv_window, &P->kv_boundary);
    P->target_bpw = S.target_bpw;
    P->calib_tokens = S.calib_tokens;
    P->uniform = S.uniform;
    if (S.kv.spec) {
        const kvq_arch *ar = kvq_ckpt_arch(S.ck);
        json_t *sec = NULL;
        float *blob = NULL;
        size_t nf = 0;
        s = kvq_kv_build_section(S.kv.spec, ar->n_layers, ar->n_kv_heads, ar->head_dim, ar->max_position_embeddings,
                                 S.kv.window, S.kv.boundary, S.kv.seed, &sec, &blob, &nf, err);
        if (s == KVQ_OK) {
            P->kv_bytes = kvq_entry_stored_estimate(blob, nf * sizeof(float), KVQ_ENTRY_ZSTD_AUTO);
            json_object_set_new(tab, "kv/tables", fake_entry(pos, nf * sizeof(float), P->kv_bytes, 1));
            pos += P->kv_bytes + zip_overhead("kv/tables");
            json_object_set_new(man, "kv", sec);
        }
        free(blob);
    }
    for (size_t i = 0; i < S.n && s == KVQ_OK; i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(S.ck, i);
        kvq_plan_entry *e = &S.e[i];
        uint64_t b;
        json_t *ents = json_object();
        char en[1024];
        if (e->codec->lossless) { // the container's zstd on the source bytes, as the writer will do it
            uint64_t st = kvq_entry_stored_estimate(t->data, t->nbytes, KVQ_ENTRY_ZSTD_AUTO);
            char pj[64];
            b = st + (uint64_t)snprintf(pj, sizeof pj, "{\"dtype\":\"%s\"}", kvq_dtype_name(t->dtype));
            snprintf(en, sizeof en, "t/%s/raw", t->name);
            json_object_set_new(ents, "raw", json_string(en));
            json_object_set_new(tab, en, fake_entry(pos, t->nbytes, st, st < t->nbytes));
            pos += st + zip_overhead(en);
        } else {
            double bits = kvq_codec_predict_bits(e->codec, e->cfg, e->rows, e->cols, e->dtype);
            if (!isfinite(bits)) P->unknown++, bits = 0;
            b = (uint64_t)llround(bits / 8.0);
            // three blobs (codes, scales/norms, offsets) is the common case
            static const char *roles[] = {"codes", "norms", "offsets"};
            for (int r = 0; r < 3; r++) {
                snprintf(en, sizeof en, "t/%s/%s", t->name, roles[r]);
                json_object_set_new(ents, roles[r], json_string(en));
                json_object_set_new(tab, en, fake_entry(pos, b / 3, b / 3, 0));
                pos += b / 3 + zip_overhead(en);
            }
        }
        e->predicted_bytes = b;
        P->tensor_bytes += b;
        P->params += (uint64_t)e->numel;
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        // the record as convert_tensor writes it, params and rate parts stood in by strings of
        // a typical length
        json_array_append_new(tensors, json_pack("{s:s,s:o,s:s,s:{s:s,s:s,s:s,s:b},s:o,s:I,s:f,s:f,s:{s:f,s:f,s:f,s:f},s:f,s:s}",
            "name", t->name, "shape", shape, "source_dtype", kvq_dtype_name(t->dtype), "codec", "name", e->codec->name,
            "spec", e->spec, "params", e->codec->lossless ? "{\"dtype\":\"BF16\"}" : "{\"v\":1,\"lattice\":\"e8\",\"bps\":4.0,\"tile\":256,\"nb\":8,\"seed\":\"0123456789abcdef\",\"rice\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22],\"snr\":20.1234567}",
            "lossless", e->codec->lossless, "entries", ents, "bytes", (json_int_t)b, "bits_per_weight", 4.0123456789012345,
            "code_bits_per_weight", 4.0123456789012345, "rate", "codes", 1234567.0, "norms", 12345.0, "offsets", 1234.0,
            "header", 1234.0, "predicted_mse", 1.2345678901234567e-05, "seed", "0123456789abcdef"));
        if (isfinite(e->sensitivity))
            json_object_set_new(json_array_get(tensors, json_array_size(tensors) - 1), "allocation", alloc_record(e));
    }
    uint64_t srcb = 0;
    if (s == KVQ_OK) { // tokenizer and config files, as source_and_files stores them
        const char *tokpath = kvq_ckpt_tokenizer_path(S.ck);
        int tok_seen = 0;
        json_t *files = json_array();
        for (size_t i = 0; i < kvq_ckpt_nfiles(S.ck) && s == KVQ_OK; i++) {
            const kvq_srcfile *f = kvq_ckpt_file(S.ck, i);
            json_array_append_new(files, json_pack("{s:s,s:I,s:s,s:s}", "name", f->name, "size", (json_int_t)f->size,
                                                   "sha256", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                                                   "role", f->role));
            if (!strcmp(f->role, "weights")) srcb += f->size;
            const char *kind = tokenizer_role(f->role);
            if (!kind) continue;
            char entry[512];
            snprintf(entry, sizeof entry, "%s/%s", kind, f->name);
            s = predict_file(f->path, entry, tab, &pos, err);
            if (tokpath && !strcmp(base_name(tokpath), f->name)) tok_seen = 1;
        }
        if (s == KVQ_OK && tokpath && !tok_seen) {
            char entry[512];
            snprintf(entry, sizeof entry, "tokenizer/%s", base_name(tokpath));
            s = predict_file(tokpath, entry, tab, &pos, err);
        }
        json_object_set_new(man, "source", json_pack("{s:s,s:s,s:o}", "kind", "hf", "path", src, "files", files));
        json_object_set_new(man, "tokenizer", json_pack("{s:{s:s,s:s},s:s}", "files", "tokenizer.json",
                                                        "tokenizer/tokenizer.json", "tokenizer_config.json",
                                                        "tokenizer/tokenizer_config.json", "main", "tokenizer.json"));
        json_object_set_new(man, "config_files", json_pack("{s:s,s:s}", "config.json", "config/config.json",
                                                           "generation_config.json", "config/generation_config.json"));
    }
    if (s == KVQ_OK) {
        json_object_set_new(man, "tensors", tensors);
        tensors = NULL;
        json_object_set_new(man, "entries", tab);
        tab = NULL;
        char *text = json_dumps(man, JSON_INDENT(1));
        uint64_t mlen = text ? strlen(text) : 0;
        free(text);
        P->file_bytes = pos + mlen + zip_overhead("manifest.json") + 22; // + end of central directory
        kvq_bits kb;
        kvq_file_bits(man, &kb);
        P->bits_per_param = kb.bits_per_param;
        P->lossy_bits_per_weight = kb.lossy_bits_per_weight;
        P->entries = S.e;
        P->n = S.n;
        P->plan_ = S.plan;
        P->ckpt_ = S.ck;
        S.e = NULL, S.plan = NULL, S.ck = NULL;
    }
    (void)srcb;
    json_decref(tensors);
    json_decref(tab);
    json_decref(man);
    setup_free(&S);
    return s;
}

void kvq_convert_prediction_free(kvq_convert_prediction *P) {
    if (!P) return;
    free(P->entries);
    kvq_ckpt_close(P->ckpt_);
    kvq_plan_free(P->plan_);
    memset(P, 0, sizeof *P);
}
