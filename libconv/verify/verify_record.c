// kvq-verify's JSON: the full report (--json, docs/FORMAT.md "kvq-verify --json") and
// the verification record stored in the .kvq manifest under "verification", with the
// sha256 binding that makes a record stale once the file's content changes.
#include <math.h>
#include <string.h>
#include <time.h>
#include <openssl/evp.h>

#include "formats/kvqfile.h"
#include "libconv/verify/verify.h"

// The run thresholds apply to: the file as users run it (weights and KV codec). */
const kvq_verify_eval *kvq_verify_final_run(const kvq_verify_report *rep) {
    if (!rep->evaluated) return NULL;
    return rep->run[2].done ? &rep->run[2] : &rep->run[0];
}

int kvq_verify_check_conclusive(const kvq_verify_check *c) {
    return !(fabs(c->value - c->limit) < c->se); // NaN se: conclusive
}

// JSON has no Inf/NaN: those become null.
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static const char *bos_name(kvq_bos_mode b) {
    return b == KVQ_BOS_PREPEND ? "prepend" : b == KVQ_BOS_REPLACE ? "replace" : "none";
}

static json_t *protocol_json(const kvq_verify_report *r) {
    const kvq_eval_protocol *p = &r->proto;
    char desc[256];
    kvq_eval_protocol_str(p, desc, sizeof desc);
    size_t n = strlen(desc);
    if (r->max_windows) n += (size_t)snprintf(desc + n, sizeof desc - n, ", first %zu windows only", r->max_windows);
    if (p->max_tokens) snprintf(desc + n, sizeof desc - n, ", first %zu tokens only", p->max_tokens);
    const char *base = strrchr(r->text_path, '/');
    return json_pack("{s:i,s:i,s:s,s:b,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "context", p->ctx, "stride",
                     p->stride > 0 ? p->stride : p->ctx - (p->bos == KVQ_BOS_PREPEND), "bos_mode", bos_name(p->bos),
                     "bos", p->bos != KVQ_BOS_NONE, "scored",
                     p->score == KVQ_SCORE_SECOND_HALF ? "second-half" : "all-but-first", "description", desc, "text",
                     base ? base + 1 : r->text_path, "text_sha256", r->text_sha256, "text_bytes",
                     (json_int_t)r->text_bytes, "tokens", (json_int_t)r->n_tokens, "tokens_used",
                     (json_int_t)r->n_tokens_used, "windows", (json_int_t)r->n_windows, "max_windows",
                     (json_int_t)r->max_windows, "max_tokens", (json_int_t)p->max_tokens, "scored_positions",
                     (json_int_t)r->n_scored);
}

static json_t *kld_json(const kvq_kld_stats *k) {
    json_t *o = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I}", "mean", num(k->mean), "median",
                          num(k->median), "p90", num(k->p90), "p99", num(k->p99), "p999", num(k->p999), "max",
                          num(k->max), "min", num(k->min), "top1_agreement", num(k->top1), "rms_dp", num(k->rms_dp),
                          "mean_dp", num(k->mean_dp), "max_abs_dp", num(k->max_abs_dp), "positions", (json_int_t)k->n);
    json_object_set_new(o, "mean_se", num(k->mean_se));
    json_object_set_new(o, "top1_agreement_se", num(k->top1_se));
    json_object_set_new(o, "mean_dp_se", num(k->mean_dp_se));
    json_object_set_new(o, "rms_dp_se", num(k->rms_dp_se));
    return o;
}

static json_t *run_json(const kvq_verify_eval *e) {
    return json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o}", "label", e->label, "what", e->what, "ppl", num(e->ppl),
                     "ppl_se", num(e->ppl_se), "ppl_delta", num(e->dppl), "ppl_delta_se", num(e->dppl_se),
                     "ppl_delta_rel", num(e->dppl_rel), "kld", kld_json(&e->kld));
}

static json_t *tensor_json(const kvq_verify_tensor *t) {
    return json_pack("{s:s,s:s,s:b,s:I,s:o,s:b,s:b,s:o,s:o,s:o}", "name", t->name, "codec", t->codec, "lossless",
                     t->lossless, "numel", (json_int_t)t->numel, "bits_per_weight", num(t->bpw), "compared",
                     t->compared, "exact", t->exact, "snr_db", num(t->snr_db), "rel_err", num(t->rel_err), "max_abs",
                     num(t->max_abs));
}

static json_t *checks_json(const kvq_verify_report *r) {
    json_t *a = json_array();
    for (int i = 0; i < r->n_checks; i++) {
        const kvq_verify_check *c = &r->checks[i];
        json_array_append_new(a, json_pack("{s:s,s:s,s:o,s:o,s:o,s:b,s:b}", "name", c->name, "subject", c->subject, "value",
                                           num(c->value), "se", num(c->se), "limit", num(c->limit), "pass", c->pass,
                                           "conclusive", kvq_verify_check_conclusive(c)));
    }
    return a;
}

static json_t *limits_json(const kvq_verify_limits *L) {
    return json_pack("{s:o,s:b,s:o,s:o,s:o,s:o,s:o,s:o}", "max_ppl_delta", num(L->max_ppl_delta), "ppl_delta_relative",
                     L->ppl_delta_rel, "max_kld", num(L->max_kld), "max_kld_p99", num(L->max_kld_p99), "min_top1",
                     num(L->min_top1), "max_rms_dp", num(L->max_rms_dp), "min_snr_db", num(L->min_snr), "max_rel_err",
                     num(L->max_rel_err));
}

static const char *record_name(kvq_record_state s) {
    return s == KVQ_RECORD_MATCH ? "match" : s == KVQ_RECORD_MISMATCH ? "mismatch" : s == KVQ_RECORD_MALFORMED ? "malformed" : "none";
}

// Results shared by the report and the record: protocol, source, converted, kld, runs.
static void add_results(json_t *o, const kvq_verify_report *r) {
    const kvq_verify_eval *fin = kvq_verify_final_run(r);
    json_object_set_new(o, "protocol", r->evaluated ? protocol_json(r) : json_null());
    json_object_set_new(o, "source", json_pack("{s:o,s:o,s:o}", "path", r->source_path ? json_string(r->source_path) : json_null(),
                                               "ppl", r->evaluated ? num(r->source_ppl) : json_null(), "ppl_se",
                                               r->evaluated ? num(r->source_ppl_se) : json_null()));
    json_object_set_new(o, "converted", fin ? json_pack("{s:o,s:o,s:o,s:o,s:o,s:s}", "ppl", num(fin->ppl), "ppl_se",
                                                        num(fin->ppl_se), "ppl_delta", num(fin->dppl), "ppl_delta_se",
                                                        num(fin->dppl_se), "ppl_delta_rel", num(fin->dppl_rel), "run",
                                                        fin->label)
                                            : json_null());
    json_object_set_new(o, "kld", fin ? kld_json(&fin->kld) : json_null());
    json_t *runs = json_array();
    for (int k = 0; k < 3; k++)
        if (r->run[k].done) json_array_append_new(runs, run_json(&r->run[k]));
    json_object_set_new(o, "runs", runs);
    json_object_set_new(o, "kv", r->kv_spec[0] ? json_pack("{s:s,s:o,s:i,s:o,s:i,s:b,s:s}", "spec", r->kv_spec, "bits_per_element", num(r->kv_bits), "positions", r->kv_positions, "bits_per_element_run", num(r->kv_bits_run), "window", r->kv_window, "boundary", r->kv_boundary, "from", r->kv_from) : json_null());
    json_object_set_new(o, "tensors_summary", json_pack("{s:I,s:o,s:o,s:o,s:I}", "tensors", (json_int_t)r->n_tensors,
                                                        "lossy_bits_per_weight", num(r->lossy_bpw), "min_snr_db",
                                                        num(r->min_snr), "bits_per_param", num(r->model_bpp),
                                                        "params", (json_int_t)r->params));
    json_object_set_new(o, "limits", limits_json(&r->limits));
    json_object_set_new(o, "checks", checks_json(r));
    json_object_set_new(o, "pass", json_boolean(r->pass));
}

json_t *kvq_verify_report_json(const kvq_verify_report *r) {
    json_t *o = json_object();
    json_object_set_new(o, "file", json_string(r->kvq_path ? r->kvq_path : ""));
    json_object_set_new(o, "kvq_version", json_string(KVQ_VERSION));
    json_object_set_new(o, "integrity", json_pack("{s:b,s:o,s:I}", "ok", r->integrity_ok, "error",
                                                  r->integrity_ok ? json_null() : json_string(r->integrity_msg),
                                                  "entries", (json_int_t)r->n_entries));
    json_object_set_new(o, "record", json_pack("{s:s,s:s}", "state", record_name(r->record), "message", r->record_msg));
    add_results(o, r);
    json_t *ts = json_array();
    for (size_t i = 0; i < r->n_tensors; i++) json_array_append_new(ts, tensor_json(&r->tensors[i]));
    json_object_set_new(o, "tensors", ts);
    json_object_set_new(o, "seconds", json_pack("{s:f,s:f,s:f}", "integrity", r->seconds_integrity, "tensors",
                                                r->seconds_tensors, "eval", r->seconds_eval));
    return o;
}

// ---- the record and its binding ---------------------------------------------------

static kvq_status sha256_update_json(EVP_MD_CTX *ctx, const json_t *j, kvq_err *err) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (!s) return kvq_err_set(err, KVQ_ERR_NOMEM, "verify: cannot serialise JSON for the record digest");
    EVP_DigestUpdate(ctx, s, strlen(s));
    free(s);
    return KVQ_OK;
}

kvq_status kvq_verify_record_binding(const json_t *manifest, const json_t *record, char hex[65], kvq_err *err) {
    json_t *m = json_deep_copy(manifest), *rec = json_deep_copy(record);
    kvq_status s = KVQ_OK;
    if (!m || !rec) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory"); goto done; }
    json_object_del(m, "verification");
    const char *k;
    json_t *e;
    json_object_foreach(json_object_get(m, "entries"), k, e) { // positions may move on rewrite
        json_object_del(e, "header");
        json_object_del(e, "offset");
    }
    json_object_del(rec, "binding");
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory"); goto done; }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    s = sha256_update_json(ctx, m, err);
    if (!s) {
        EVP_DigestUpdate(ctx, "\n", 1);
        s = sha256_update_json(ctx, rec, err);
    }
    unsigned char md[32];
    unsigned int ml = 0;
    EVP_DigestFinal_ex(ctx, md, &ml);
    EVP_MD_CTX_free(ctx);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
done:
    json_decref(m);
    json_decref(rec);
    return s;
}

json_t *kvq_verify_record_make(const kvq_verify_report *r, const json_t *manifest, kvq_err *err) {
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *o = json_pack("{s:s,s:s,s:s}", "tool", "kvq-verify", "kvq_version", KVQ_VERSION, "date", date);
    if (!o) { kvq_err_set(err, KVQ_ERR_NOMEM, "verify: out of memory"); return NULL; }
    if (r->evaluated)
        json_object_set_new(o, "corpus", json_pack("{s:s,s:s,s:I,s:I}", "file", strrchr(r->text_path, '/') ? strrchr(r->text_path, '/') + 1 : r->text_path,
                                                   "sha256", r->text_sha256, "bytes", (json_int_t)r->text_bytes, "tokens",
                                                   (json_int_t)r->n_tokens));
    add_results(o, r);
    json_t *worst = json_array();
    for (size_t i = 0; i < r->n_tensors && json_array_size(worst) < 8; i++)
        if (r->tensors[i].compared && !r->tensors[i].lossless) json_array_append_new(worst, tensor_json(&r->tensors[i]));
    json_object_set_new(o, "worst_tensors", worst);
    // Every compared tensor's error, worst first (kvq-inspect --layers and --plot show them per
    // layer): name, exact, snr_db (null when exact), rel_err, max_abs. Checked by the schema
    // (formats/kvqschema.c).
    json_t *all = json_array();
    for (size_t i = 0; i < r->n_tensors; i++) {
        const kvq_verify_tensor *t = &r->tensors[i];
        if (t->compared)
            json_array_append_new(all, json_pack("{s:s,s:b,s:o,s:o,s:o}", "name", t->name, "exact", t->exact, "snr_db",
                                                 num(t->snr_db), "rel_err", num(t->rel_err), "max_abs", num(t->max_abs)));
    }
    json_object_set_new(o, "tensors", all);
    char hex[65];
    if (kvq_verify_record_binding(manifest, o, hex, err)) { json_decref(o); return NULL; }
    json_object_set_new(o, "binding", json_pack("{s:s,s:s,s:s}", "alg", "sha256", "covers",
                                                "canonical manifest without 'verification' and entry offsets, newline, canonical record without 'binding'",
                                                "digest", hex));
    return o;
}

kvq_record_state kvq_verify_record_check(const json_t *manifest, char *msg, size_t cap) {
    char dummy[8];
    if (!msg) { msg = dummy; cap = sizeof dummy; }
    const json_t *rec = json_object_get(manifest, "verification");
    if (!rec) { snprintf(msg, cap, "no verification record"); return KVQ_RECORD_NONE; }
    const char *want = json_string_value(json_object_get(json_object_get(rec, "binding"), "digest"));
    const char *date = json_string_value(json_object_get(rec, "date"));
    if (!json_is_object(rec) || !want || strlen(want) != 64) {
        snprintf(msg, cap, "verification record is malformed (no binding digest)");
        return KVQ_RECORD_MALFORMED;
    }
    char hex[65];
    kvq_err e;
    if (kvq_verify_record_binding(manifest, rec, hex, &e)) { snprintf(msg, cap, "%s", e.msg); return KVQ_RECORD_MALFORMED; }
    if (strcmp(hex, want)) {
        snprintf(msg, cap, "verification record of %s does not match this file: it changed after verification "
                 "(binding %.12s..., content now %.12s...)", date ? date : "?", want, hex);
        return KVQ_RECORD_MISMATCH;
    }
    snprintf(msg, cap, "verification record of %s matches this file (%s)", date ? date : "?",
             json_is_true(json_object_get(rec, "pass")) ? "passed" : "failed");
    return KVQ_RECORD_MATCH;
}

kvq_status kvq_verify_record_store(const char *path, const kvq_verify_report *rep, kvq_err *err) {
    if (!rep->integrity_ok)
        return kvq_err_set(err, KVQ_ERR_ARG, "%s: not recording a verification of a file that failed integrity", path);
    kvq_file *f;
    kvq_status s = kvq_file_open(path, &f, err);
    if (s) return s;
    json_t *m = json_deep_copy(kvq_file_manifest(f));
    kvq_file_close(f);
    if (!m) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);
    json_object_del(m, "verification");
    json_t *rec = kvq_verify_record_make(rep, m, err);
    if (!rec) { json_decref(m); return err->code ? err->code : KVQ_ERR_NOMEM; }
    json_object_set_new(m, "verification", rec);
    s = kvq_file_rewrite_manifest(path, m, err);
    json_decref(m);
    return s;
}
