// kvq_verify_run: integrity (container, digests, manifest schema, stale record, every
// tensor decodes finite), per-tensor error against the source, then perplexity and
// KLD of the converted model(s) against the source in lockstep (verify_eval.c), and
// the thresholds. Problems in the file are results (rep->pass = 0), not errors.
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <openssl/evp.h>

#include "formats/checkpoint.h"
#include "formats/kvqfile.h"
#include "libconv/tokenizer/tokenizer.h"
#include "libconv/verify/verify_internal.h"
#include "libconv/runtime/weights.h"

kvq_verify_limits kvq_verify_limits_none(void) {
    return (kvq_verify_limits){NAN, 0, NAN, NAN, NAN, NAN, NAN, NAN};
}

kvq_verify_opts kvq_verify_opts_default(void) {
    kvq_verify_opts o;
    memset(&o, 0, sizeof o);
    o.proto = kvq_eval_protocol_card();
    o.limits = kvq_verify_limits_none();
    return o;
}

kvq_status kvq_verify_parse_delta(const char *s, double *v, int *rel, kvq_err *err) {
    char *end = NULL;
    errno = 0;
    double x = s ? strtod(s, &end) : NAN;
    if (!s || end == s || errno || !isfinite(x) || x < 0)
        return kvq_err_set(err, KVQ_ERR_ARG, "ppl delta limit '%s': expected a non-negative number, e.g. 2%% or 0.5", s ? s : "");
    if (*end == '%' && end[1] == 0) { *v = x / 100.0; *rel = 1; return KVQ_OK; }
    if (*end) return kvq_err_set(err, KVQ_ERR_ARG, "ppl delta limit '%s': unexpected '%s' (write 2%% or 0.5)", s, end);
    *v = x;
    *rel = 0;
    return KVQ_OK;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void progress(const kvq_verify_opts *o, const char *stage, size_t done, size_t total, double t0) {
    if (!o->progress) return;
    kvq_verify_progress p = {done, total, stage, now_s() - t0};
    o->progress(o->progress_ud, &p);
}

// A file problem becomes the report's integrity finding; I/O and memory stay errors.
static int is_file_problem(kvq_status s) {
    return s == KVQ_ERR_FORMAT || s == KVQ_ERR_DIGEST || s == KVQ_ERR_VERSION || s == KVQ_ERR_MISSING ||
           s == KVQ_ERR_NUMERIC || s == KVQ_ERR_UNSUPPORTED;
}

static void integrity_fail(kvq_verify_report *rep, const kvq_err *e) {
    if (!rep->integrity_ok) return; // keep the first
    rep->integrity_ok = 0;
    snprintf(rep->integrity_msg, sizeof rep->integrity_msg, "%s", e->msg);
}

// ---- source checkpoint -------------------------------------------------------

// Path of a recorded source file inside the source given (a directory or a .bin).
static void source_file_path(const char *src, const char *name, char *out, size_t cap) {
    struct stat st;
    if (stat(src, &st) == 0 && S_ISDIR(st.st_mode)) { snprintf(out, cap, "%s/%s", src, name); return; }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", src);
    snprintf(out, cap, "%s/%s", dirname(tmp), name);
}

// The source must be the checkpoint the file was converted from: same weight files.
static kvq_status check_source_files(const json_t *man, const char *src, kvq_err *err) {
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(json_object_get(man, "source"), "files"), i, f) {
        const char *role = json_string_value(json_object_get(f, "role"));
        if (!role || strcmp(role, "weights")) continue;
        const char *name = json_string_value(json_object_get(f, "name"));
        const char *want = json_string_value(json_object_get(f, "sha256"));
        char p[4096], hex[65];
        source_file_path(src, name, p, sizeof p);
        kvq_status s = kvq_sha256_file(p, hex, err);
        if (s) {
            kvq_err_prefix(err, "source %s", src);
            return s;
        }
        if (strcmp(hex, want))
            return kvq_err_set(err, KVQ_ERR_ARG, "source %s: %s has sha256 %.16s..., the file was converted from %.16s... "
                               "(a different checkpoint)", src, name, hex, want);
    }
    return KVQ_OK;
}

// ---- per-tensor pass: decode every tensor, compare with the source -------------

static void compare(kvq_verify_tensor *t, const float *x, const float *y, int64_t n) {
    double sx = 0, sd = 0, mx = 0;
    int exact = 1;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)y[i] - (double)x[i];
        exact &= memcmp(&x[i], &y[i], sizeof(float)) == 0;
        sx += (double)x[i] * x[i];
        sd += d * d;
        if (fabs(d) > mx) mx = fabs(d);
    }
    t->compared = 1;
    t->exact = exact;
    t->max_abs = mx;
    t->rel_err = sx > 0 ? sqrt(sd / sx) : (sd > 0 ? INFINITY : 0);
    t->snr_db = sd > 0 ? (sx > 0 ? 10 * log10(sx / sd) : -INFINITY) : INFINITY;
}

static int tensor_cmp(const void *a, const void *b) { // worst (lowest SNR) first, then name
    const kvq_verify_tensor *x = a, *y = b;
    double sx = x->compared ? x->snr_db : INFINITY, sy = y->compared ? y->snr_db : INFINITY;
    if (sx != sy) return sx < sy ? -1 : 1;
    if (x->lossless != y->lossless) return x->lossless - y->lossless;
    return strcmp(x->name, y->name);
}

static kvq_status tensor_pass(const kvq_verify_opts *o, kvq_verify_report *rep, const json_t *man,
                              kvq_weights *src, kvq_err *err) {
    const char *path = o->kvq_path;
    kvq_weights *w = NULL;
    kvq_err e = {0};
    kvq_status s = kvq_weights_open(path, &w, &e);
    if (s) {
        if (!is_file_problem(s)) { *err = e; return s; }
        integrity_fail(rep, &e);
        return KVQ_OK;
    }
    const json_t *ts = json_object_get(man, "tensors");
    size_t n = json_array_size(ts);
    rep->tensors = calloc(n ? n : 1, sizeof *rep->tensors);
    if (!rep->tensors) { kvq_weights_close(w); return kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory"); }
    double t0 = now_s(), lossy_bits = 0, lossy_n = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *r = json_array_get(ts, i);
        kvq_verify_tensor *t = &rep->tensors[rep->n_tensors++];
        const char *name = json_string_value(json_object_get(r, "name"));
        const json_t *codec = json_object_get(r, "codec");
        t->name = strdup(name);
        t->codec = strdup(json_string_value(json_object_get(codec, "spec")));
        t->lossless = json_is_true(json_object_get(codec, "lossless"));
        t->snr_db = t->rel_err = t->max_abs = NAN;
        if (!t->name || !t->codec) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory"); break; }
        float *x = NULL, *y = NULL;
        int64_t nx = 0, ny = 0;
        if ((s = kvq_weights_get_f32(w, name, &x, &nx, &e))) {
            if (!is_file_problem(s)) { *err = e; break; }
            integrity_fail(rep, &e);
            s = KVQ_OK;
            continue;
        }
        t->numel = nx;
        const uint64_t tb = kvq_file_tensor_bytes(man, r); // the file's payloads, not the record's claim
        t->bpw = nx ? 8.0 * (double)tb / (double)nx : 0;
        if (tb != (uint64_t)json_integer_value(json_object_get(r, "bytes"))) {
            kvq_err_set(&e, KVQ_ERR_FORMAT, "%s: tensor '%s': manifest bytes %" JSON_INTEGER_FORMAT ", its entries and "
                        "codec params hold %" PRIu64, path, name, json_integer_value(json_object_get(r, "bytes")), tb);
            integrity_fail(rep, &e);
        }
        if (!t->lossless) { lossy_bits += t->bpw * (double)nx; lossy_n += (double)nx; }
        for (int64_t k = 0; k < nx; k++)
            if (!isfinite(x[k])) {
                kvq_err_set(&e, KVQ_ERR_NUMERIC, "%s: tensor '%s' decodes to %s at element %lld", path, name,
                            isnan(x[k]) ? "NaN" : "Inf", (long long)k);
                integrity_fail(rep, &e);
                break;
            }
        if (src) {
            int nd;
            int64_t sh[8];
            if (!kvq_weights_has(src, name, &nd, sh)) {
                kvq_err_set(&e, KVQ_ERR_MISSING, "%s: tensor '%s' is not in the source %s", path, name, rep->source_path);
                integrity_fail(rep, &e);
            } else if ((s = kvq_weights_get_f32(src, name, &y, &ny, err))) {
                free(x);
                break;
            } else if (ny != nx) {
                kvq_err_set(&e, KVQ_ERR_FORMAT, "%s: tensor '%s' decodes to %lld values, the source has %lld", path, name,
                            (long long)nx, (long long)ny);
                integrity_fail(rep, &e);
            } else compare(t, y, x, nx);
        }
        free(x);
        free(y);
        progress(o, "tensors", i + 1, n, t0);
    }
    if (!s && src) { // source tensors the file lacks
        for (size_t i = 0; i < kvq_weights_count(src); i++) {
            const char *nm = kvq_weights_name(src, i);
            if (!kvq_weights_has(w, nm, NULL, NULL)) {
                kvq_err_set(&e, KVQ_ERR_MISSING, "%s: source tensor '%s' is missing from the file", path, nm);
                integrity_fail(rep, &e);
                break;
            }
        }
    }
    kvq_weights_close(w);
    rep->lossy_bpw = lossy_n > 0 ? lossy_bits / lossy_n : NAN;
    rep->min_snr = NAN;
    for (size_t i = 0; i < rep->n_tensors; i++) {
        const kvq_verify_tensor *t = &rep->tensors[i];
        if (t->compared && !t->lossless && !(t->snr_db >= rep->min_snr)) rep->min_snr = t->snr_db;
    }
    qsort(rep->tensors, rep->n_tensors, sizeof *rep->tensors, tensor_cmp);
    rep->seconds_tensors = now_s() - t0;
    return s;
}

// ---- evaluation ----------------------------------------------------------------

static kvq_status read_text(const char *path, char **text, size_t *n, char hex[65], kvq_err *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return kvq_err_set(err, KVQ_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        return kvq_err_set(err, KVQ_ERR_IO, "%s: not a regular file", path);
    }
    *n = (size_t)st.st_size;
    *text = malloc(*n + 1);
    if (!*text) {
        fclose(fp);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for %zu bytes", path, *n);
    }
    size_t got = fread(*text, 1, *n, fp);
    fclose(fp);
    if (got != *n) {
        free(*text);
        *text = NULL;
        return kvq_err_set(err, KVQ_ERR_IO, "%s: short read", path);
    }
    (*text)[*n] = 0;
    kvq_status s = kvq_tok_text_check(*text, *n, err);
    if (s) {
        free(*text);
        *text = NULL;
        kvq_err_prefix(err, "%s", path);
        return s;
    }
    unsigned char md[32];
    unsigned int ml = 0;
    EVP_Digest(*text, *n, md, &ml, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return KVQ_OK;
}

// How the codec cache is evaluated (docs/KV.md "kvq-verify's cache"): KVQ_VERIFY_KV=chunks
// (default: packed, each chunk of queries decodes the cache once into scratch), shadow (a dense
// fp32 copy of every encoded token, the behaviour before 2026-11-26; same results bit for bit)
// or tokens (packed, attended token by token through the codecs' score/vsum, as kvq-run).
static kvq_status kv_eval_mode(int *mode, kvq_err *err) {
    const char *e = getenv("KVQ_VERIFY_KV");
    *mode = KVQ_KV_EVAL_CHUNKS;
    if (!e || !*e || !strcmp(e, "chunks")) return KVQ_OK;
    if (!strcmp(e, "shadow")) *mode = KVQ_KV_EVAL_SHADOW;
    else if (!strcmp(e, "tokens")) *mode = KVQ_KV_EVAL_NONE;
    else return kvq_err_set(err, KVQ_ERR_ARG, "KVQ_VERIFY_KV=%s: expected chunks, shadow or tokens", e);
    return KVQ_OK;
}

// The KV codec to measure: --kv, else the manifest's "kv" section (its stored states,
// rebuilt by kvq_kv_open_from_file as the runtime does). Returns 1 when from the file.
// mode: kv_eval_mode's.
static int kv_choice(const kvq_verify_opts *o, const json_t *man, int mode, kvq_verify_report *rep,
                     kvq_kvcache_policy *pol) {
    rep->kv_spec[0] = 0;
    memset(pol, 0, sizeof *pol);
    pol->shadow = mode == KVQ_KV_EVAL_SHADOW;
    pol->chunks = mode == KVQ_KV_EVAL_CHUNKS;
    if (o->no_kv) return 0;
    if (o->kv_spec) {
        snprintf(rep->kv_spec, sizeof rep->kv_spec, "%s", o->kv_spec);
        pol->window = o->kv_policy.window;
        pol->boundary = o->kv_policy.boundary;
        pol->seed = o->kv_policy.seed;
        rep->kv_window = pol->window;
        rep->kv_boundary = pol->boundary;
        snprintf(rep->kv_from, sizeof rep->kv_from, "command line");
        return 0;
    }
    const json_t *kv = json_object_get(man, "kv");
    const char *spec = json_string_value(json_object_get(kv, "spec"));
    if (!spec) return 0;
    snprintf(rep->kv_spec, sizeof rep->kv_spec, "%s", spec);
    rep->kv_window = (int)json_integer_value(json_object_get(kv, "window"));
    const json_t *b = json_object_get(kv, "boundary");
    rep->kv_boundary = json_is_true(b) || (json_is_integer(b) && json_integer_value(b) != 0);
    snprintf(rep->kv_from, sizeof rep->kv_from, "file");
    return 1;
}

// A model with the default cache, a codec cache from spec, or the file's own KV section.
static kvq_status open_model(const char *path, const kvq_verify_opts *o, const char *kv, const kvq_kvcache_policy *pol,
                             int kv_from_file, kvq_model **m, kvq_err *err) {
    kvq_model_opts mo = kvq_model_opts_default();
    mo.n_threads = o->n_threads;
    mo.max_ctx = o->proto.ctx;
    mo.backend = o->backend;
    mo.prefill_decoded = 1; // windows score the decoded model (docs/VERIFY.md), not int8 activations
    kvq_status s = kvq_model_open(path, &mo, m, err);
    if (s || !kv) return s;
    const kvq_arch *a = kvq_model_arch(*m);
    kvq_kvcache *c = NULL;
    if (kv_from_file) {
        kvq_file *f = NULL;
        if (!(s = kvq_file_open(o->kvq_path, &f, err))) {
            s = kvq_kv_open_from_file(f, o->proto.ctx, pol->shadow ? KVQ_KV_EVAL_SHADOW : pol->chunks ? KVQ_KV_EVAL_CHUNKS : KVQ_KV_EVAL_NONE, &c, err);
            if (!s && !c) s = kvq_err_set(err, KVQ_ERR_MISSING, "%s: no KV section", o->kvq_path);
        }
        kvq_file_close(f);
    } else {
        s = kvq_kvcache_codec_new(kv, a->n_layers, a->n_kv_heads, a->head_dim, o->proto.ctx, pol, &c, err);
    }
    if (!s) s = kvq_model_set_kvcache(*m, c, err);
    else if (c) c->ops->free(c);
    if (s) {
        kvq_model_close(*m);
        *m = NULL;
    }
    return s;
}

// text: the --text file's nb bytes, read and checked by kvq_verify_run (read_text).
static kvq_status eval_pass(const kvq_verify_opts *o, kvq_verify_report *rep, const json_t *man, const char *text,
                            size_t nb, kvq_err *err) {
    double t0 = now_s();
    size_t nid = 0;
    int32_t *ids = NULL;
    kvq_tokenizer *tok = NULL;
    kvq_weights *w = NULL;
    kvq_model *ref = NULL, *q[3] = {NULL, NULL, NULL};
    kvq_status s = KVQ_OK;
    snprintf(rep->text_path, sizeof rep->text_path, "%s", o->text_path);
    rep->text_bytes = nb;
    // The tokenizer shipped in the file (what users will run), else the source's.
    if ((s = kvq_weights_open(o->kvq_path, &w, err))) goto done;
    kvq_weights *sw = NULL;
    s = kvq_weights_tokenizer(w, &tok, err);
    if (s == KVQ_ERR_MISSING) {
        if ((s = kvq_weights_open(rep->source_path, &sw, err))) goto done;
        s = kvq_weights_tokenizer(sw, &tok, err);
        if (s == KVQ_ERR_MISSING)
            s = kvq_err_set(err, KVQ_ERR_MISSING, "%s: no tokenizer in the file or its source", o->kvq_path);
    }
    kvq_weights_close(sw);
    if (s) goto done;
    if ((s = kvq_tok_encode(tok, text, nb, 0, &ids, &nid, err))) goto done;
    rep->n_tokens = nid;

    kvq_kvcache_policy pol;
    int kv_mode;
    if ((s = kv_eval_mode(&kv_mode, err))) goto done;
    int kv_file = kv_choice(o, man, kv_mode, rep, &pol);
    snprintf(rep->kv_mode, sizeof rep->kv_mode, "%s", kv_mode == KVQ_KV_EVAL_SHADOW ? "shadow" : kv_mode == KVQ_KV_EVAL_CHUNKS ? "chunks" : "tokens");
    const char *kv = rep->kv_spec[0] ? rep->kv_spec : NULL;
    int nq = 0;
    kvq_verify_eval *R = rep->run;
    R[0].label = "weights";
    R[0].what = "converted weights, fp32 KV cache (as the source)";
    R[1].label = "kv";
    R[1].what = "source weights, the KV codec";
    R[2].label = "weights+kv";
    R[2].what = "converted weights and the KV codec";
    if ((s = open_model(rep->source_path, o, NULL, NULL, 0, &ref, err))) goto done;
    if ((s = open_model(o->kvq_path, o, NULL, NULL, 0, &q[0], err))) goto done;
    nq = 1;
    if (kv) {
        if ((s = open_model(rep->source_path, o, kv, &pol, kv_file, &q[1], err))) goto done;
        if ((s = open_model(o->kvq_path, o, kv, &pol, kv_file, &q[2], err))) goto done;
        nq = 3;
    }
    vf_lockstep ls;
    s = kvq_verify_lockstep(ref, q, nq, ids, nid, &o->proto, o->max_windows, &ls, R, o, err);
    if (s) goto done;
    rep->evaluated = 1;
    rep->n_windows = ls.n_windows;
    rep->n_scored = ls.n_scored;
    rep->n_tokens_used = ls.n_used;
    rep->source_ppl = ls.ref_ppl;
    rep->source_ppl_se = ls.ref_ppl_se;
    rep->source_nll_sum = ls.ref_nll;
    if (q[1]) {
        const kvq_kvcache *c = kvq_model_kvcache_desc(q[1]);
        const kvq_arch *qa = kvq_model_arch(q[1]);
        rep->kv_positions = qa->max_position_embeddings;
        rep->kv_bits = kvq_kvcache_codec_formula_bits(c, rep->kv_positions);
        if (kvq_model_kvcache(q[1])) {
            rep->kv_bits_run = c->ops->bits_per_element(c);
            rep->kv_held_bytes = c->ops->held_bytes ? c->ops->held_bytes(c) : 0;
        }
        else { // a device holds the cache in its own layout: the bits of its packed cache per element
            kvq_model_mem mm;
            kvq_model_memory(q[1], &mm);
            rep->kv_bits_run = 8.0 * (double)mm.kv /
                               (2.0 * qa->n_layers * qa->n_kv_heads * qa->head_dim * (double)kvq_model_max_ctx(q[1]));
        }
    }
done:
    rep->seconds_eval = now_s() - t0;
    for (int k = 0; k < 3; k++) kvq_model_close(q[k]);
    kvq_model_close(ref);
    kvq_tok_close(tok);
    kvq_weights_close(w);
    free(ids);
    return s;
}

// ---- thresholds ----------------------------------------------------------------

static void add_check(kvq_verify_report *rep, const char *name, const char *subject, double value, double limit,
                      int pass) {
    if (rep->n_checks >= KVQ_VERIFY_MAX_CHECKS) return;
    kvq_verify_check *c = &rep->checks[rep->n_checks++];
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->subject, sizeof c->subject, "%s", subject ? subject : "");
    c->value = value;
    c->limit = limit;
    c->se = NAN;
    c->pass = pass;
}

// The standard error of the check just added.
static void last_se(kvq_verify_report *rep, double se) {
    if (rep->n_checks > 0) rep->checks[rep->n_checks - 1].se = se;
}

static void thresholds(kvq_verify_report *rep) {
    const kvq_verify_limits *L = &rep->limits;
    add_check(rep, "integrity", "", rep->integrity_ok, 1, rep->integrity_ok);
    if ((rep->record != KVQ_RECORD_NONE && !rep->replace_record) || rep->require_record) add_check(rep, "record", "", rep->record == KVQ_RECORD_MATCH, 1, rep->record == KVQ_RECORD_MATCH);
    if (!isnan(L->min_snr) || !isnan(L->max_rel_err)) {
        // worst lossy tensor by each measure; no compared lossy tensor means nothing to fail
        const kvq_verify_tensor *ws = NULL, *wr = NULL;
        for (size_t i = 0; i < rep->n_tensors; i++) {
            const kvq_verify_tensor *t = &rep->tensors[i];
            if (!t->compared || t->lossless) continue;
            if (!ws || t->snr_db < ws->snr_db) ws = t;
            if (!wr || t->rel_err > wr->rel_err) wr = t;
        }
        if (!isnan(L->min_snr)) add_check(rep, "min_snr_db", ws ? ws->name : "", ws ? ws->snr_db : NAN, L->min_snr, !ws || ws->snr_db >= L->min_snr);
        if (!isnan(L->max_rel_err)) add_check(rep, "max_rel_err", wr ? wr->name : "", wr ? wr->rel_err : NAN, L->max_rel_err, !wr || wr->rel_err <= L->max_rel_err);
    }
    const kvq_verify_eval *e = kvq_verify_final_run(rep);
    if (e) {
        if (!isnan(L->max_ppl_delta)) {
            double v = L->ppl_delta_rel ? e->dppl_rel : e->dppl;
            add_check(rep, L->ppl_delta_rel ? "max_ppl_delta_rel" : "max_ppl_delta", e->label, v, L->max_ppl_delta, v <= L->max_ppl_delta);
            last_se(rep, L->ppl_delta_rel ? e->dppl_se / (e->ppl - e->dppl) : e->dppl_se);
        }
        if (!isnan(L->max_kld)) {
            add_check(rep, "max_kld", e->label, e->kld.mean, L->max_kld, e->kld.mean <= L->max_kld);
            last_se(rep, e->kld.mean_se);
        }
        if (!isnan(L->max_kld_p99)) add_check(rep, "max_kld_p99", e->label, e->kld.p99, L->max_kld_p99, e->kld.p99 <= L->max_kld_p99);
        if (!isnan(L->min_top1)) {
            add_check(rep, "min_top1", e->label, e->kld.top1, L->min_top1, e->kld.top1 >= L->min_top1);
            last_se(rep, e->kld.top1_se);
        }
        if (!isnan(L->max_rms_dp)) {
            add_check(rep, "max_rms_dp", e->label, e->kld.rms_dp, L->max_rms_dp, e->kld.rms_dp <= L->max_rms_dp);
            last_se(rep, e->kld.rms_dp_se);
        }
    } else if (!isnan(L->max_ppl_delta) || !isnan(L->max_kld) || !isnan(L->max_kld_p99) || !isnan(L->min_top1) ||
               !isnan(L->max_rms_dp)) {
        add_check(rep, "evaluation", "", 0, 1, 0); // limits were asked for but nothing was measured
    }
    rep->pass = 1;
    for (int i = 0; i < rep->n_checks; i++) rep->pass &= rep->checks[i].pass;
}

// ---- the whole run -------------------------------------------------------------

kvq_status kvq_verify_run(const kvq_verify_opts *o, kvq_verify_report *rep, kvq_err *err) {
    memset(rep, 0, sizeof *rep);
    rep->integrity_ok = 1;
    rep->lossy_bpw = rep->min_snr = rep->source_ppl = rep->kv_bits = rep->model_bpp = rep->kv_bits_run = NAN;
    rep->proto = o->proto;
    rep->max_windows = o->max_windows;
    rep->limits = o->limits;
    rep->require_record = o->require_record;
    rep->replace_record = o->replace_record;
    if (!o->kvq_path) return kvq_err_set(err, KVQ_ERR_ARG, "verify: no .kvq file given");
    if (!(rep->kvq_path = strdup(o->kvq_path))) return kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory");
    double t0 = now_s();
    kvq_file *f = NULL;
    kvq_weights *src = NULL;
    kvq_err e = {0};
    // A file that cannot be read as a .kvq (not a zip, truncated, a manifest that breaks the
    // schema, a meaning kvq-run would refuse at load) is an input error (the tool exits 2 with
    // one line); a readable file whose digests disagree fails the integrity check (exit 1).
    // Every payload's digest and zstd frame is checked before the meaning (which reads the KV
    // tables and the tokenizer), so a damaged payload is always the integrity failure.
    kvq_status s;
    char *text = NULL; // --text: read and checked first, so a text that is not one is refused before
    size_t nb = 0;     // the (long) passes, not after them
    if (o->text_path && (s = read_text(o->text_path, &text, &nb, rep->text_sha256, err))) return s;
    s = kvq_file_open(o->kvq_path, &f, &e);
    if (s) { free(text); *err = e; return s; }
    const json_t *man = kvq_file_manifest(f);
    {
        kvq_bits kb;
        kvq_file_bits(man, &kb);
        rep->model_bpp = kb.bits_per_param;
        rep->params = kb.params;
    }
    json_t *mcopy = NULL;
    rep->n_entries = json_object_size(json_object_get(man, "entries"));
    // (no progress line until the file is validated: a refusal is the run's only line)
    if ((s = kvq_file_check_manifest(man, o->kvq_path, &e))) {
        *err = e;
        goto out;
    }
    if ((s = kvq_file_verify(f, &e))) {
        if (!is_file_problem(s)) { *err = e; goto out; }
        integrity_fail(rep, &e);
        s = KVQ_OK;
        goto finish; // nothing else can be trusted
    }
    if ((s = kvq_weights_check_file(f, &e))) { // the meaning beyond the schema (weights.h)
        *err = e;
        goto out;
    }
    rep->record = kvq_verify_record_check(man, rep->record_msg, sizeof rep->record_msg);
    rep->seconds_integrity = now_s() - t0;
    progress(o, "integrity", 1, 1, t0);
    // Keep a private copy: f is closed before the (long) evaluation.
    if (!(mcopy = json_deep_copy(man))) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory"); goto out; }
    kvq_file_close(f);
    f = NULL;
    man = mcopy;

    const char *sp = o->source ? o->source : json_string_value(json_object_get(json_object_get(man, "source"), "path"));
    char beside[4096] = "";
    if (!o->no_source && sp) {
        struct stat st;
        // A recorded relative path is relative to where kvq-convert ran: tried as is, then
        // relative to the .kvq's directory (both named if neither exists).
        if (!o->source && sp[0] != '/' && stat(sp, &st) != 0) {
            const char *slash = strrchr(o->kvq_path, '/');
            if (slash) {
                snprintf(beside, sizeof beside, "%.*s/%s", (int)(slash - o->kvq_path), o->kvq_path, sp);
                if (stat(beside, &st) == 0) sp = beside;
            }
        }
        if (!(rep->source_path = strdup(sp))) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory"); goto out; }
        if (stat(sp, &st) != 0) {
            s = kvq_err_set(err, KVQ_ERR_IO, "source %s%s%s%s: %s (give --source DIR, or --no-source)", sp,
                            o->source ? "" : " (recorded in the file, relative to where kvq-convert ran)",
                            beside[0] && sp != beside ? "; also tried " : "", beside[0] && sp != beside ? beside : "",
                            strerror(errno));
            goto out;
        }
        // KVQ_VERIFY_ANY_SOURCE=1: score against this source even if the file was converted from another
        // checkpoint (experiments only: tests/bench/alloc_rowsplit.sh converts an edited copy of a model
        // and measures it against the original). Never set by the tools.
        const char *any = getenv("KVQ_VERIFY_ANY_SOURCE");
        if (!(any && !strcmp(any, "1")) && (s = check_source_files(man, sp, err))) goto out;
        if ((s = kvq_weights_open(sp, &src, err))) goto out;
    }
    if ((s = tensor_pass(o, rep, man, src, err))) goto out;
    kvq_weights_close(src);
    src = NULL;
    if (rep->integrity_ok && o->text_path) {
        if (!rep->source_path) {
            s = kvq_err_set(err, KVQ_ERR_ARG, "verify: perplexity and KLD need the source (--source DIR)");
            goto out;
        }
        if ((s = eval_pass(o, rep, man, text, nb, err))) goto out;
    }
finish:
    thresholds(rep);
out:
    free(text);
    kvq_weights_close(src);
    kvq_file_close(f);
    json_decref(mcopy);
    return s;
}

void kvq_verify_report_free(kvq_verify_report *rep) {
    if (!rep) return;
    for (size_t i = 0; i < rep->n_tensors; i++) {
        free(rep->tensors[i].name);
        free(rep->tensors[i].codec);
    }
    free(rep->tensors);
    for (int k = 0; k < 3; k++) free(rep->run[k].kld_pos);
    free(rep->kvq_path);
    free(rep->source_path);
    memset(rep, 0, sizeof *rep);
}
