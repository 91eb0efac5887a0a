// kvq-inspect: what a .kvq holds. A human table (architecture, size against the
// source, one row per tensor) or, with --json, the stable JSON document specified
// in docs/FORMAT.md ("kvq-inspect --json"). Reads only the manifest and the archive
// structure; payload digests are checked by kvq-verify.
// Exit status: 0 success, 2 error (1 is reserved for verification failures).
#include <math.h>
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

#include "tools/opt.h"
#include "formats/kvqfile.h"
#include "libconv/runtime/weights.h"
#include "libconv/verify/layers.h"
#include "libconv/verify/verify.h"
#include "tools/plot.h"

static json_t *tensor_json(const json_t *r) {
    const json_t *codec = json_object_get(r, "codec");
    json_t *o = json_pack("{s:O,s:O,s:O,s:O,s:O,s:O}", "name", json_object_get(r, "name"), "shape",
                          json_object_get(r, "shape"), "source_dtype", json_object_get(r, "source_dtype"),
                          "codec", json_object_get(codec, "name"), "bits_per_weight",
                          json_object_get(r, "bits_per_weight"), "bytes", json_object_get(r, "bytes"));
    if (!o) return NULL;
    const char *extra[] = {"code_bits_per_weight", "predicted_mse", "rate", "entries", "allocation", NULL};
    for (int i = 0; extra[i]; i++)
        if (json_object_get(r, extra[i])) json_object_set(o, extra[i], json_object_get(r, extra[i]));
    json_object_set(o, "codec_spec", json_object_get(codec, "spec"));
    json_object_set(o, "codec_params", json_object_get(codec, "params"));
    json_object_set(o, "lossless", json_object_get(codec, "lossless"));
    return o;
}

static uint64_t source_bytes(const json_t *m) {
    uint64_t n = 0;
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(json_object_get(m, "source"), "files"), i, f)
        if (!strcmp(json_string_value(json_object_get(f, "role")) ?: "", "weights"))
            n += (uint64_t)json_integer_value(json_object_get(f, "size"));
    return n;
}

// Totals (kvq_file_bits, the definition every tool shares): bits_per_weight over the lossy
// tensors (null when none), bits_per_param over the whole model.
static json_t *totals(const json_t *m, uint64_t fsize) {
    kvq_bits kb;
    kvq_file_bits(m, &kb);
    return json_pack("{s:I,s:I,s:o,s:o,s:I,s:I}", "bytes", (json_int_t)fsize, "source_bytes", (json_int_t)source_bytes(m),
                     "bits_per_weight", kb.lossy_params ? json_real(kb.lossy_bits_per_weight) : json_null(),
                     "bits_per_param", kb.params ? json_real(kb.bits_per_param) : json_null(), "params",
                     (json_int_t)kb.params, "tensors", (json_int_t)json_array_size(json_object_get(m, "tensors")));
}

static int print_json(const kvq_file *f) {
    const json_t *m = kvq_file_manifest(f);
    json_t *ts = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(m, "tensors"), i, r) json_array_append_new(ts, tensor_json(r));
    json_t *o = json_pack("{s:O,s:s,s:O,s:o,s:o}", "format_version", json_object_get(m, "format_version"),
                          "file", kvq_file_path(f), "architecture", json_object_get(m, "architecture"),
                          "tensors", ts, "totals", totals(m, kvq_file_size(f)));
    const char *pass[] = {"recipe", "source", "kv", "verification", "kvq_version", "created_by", NULL};
    for (int k = 0; o && pass[k]; k++)
        if (json_object_get(m, pass[k])) json_object_set(o, pass[k], json_object_get(m, pass[k]));
    if (o && json_object_get(m, "verification")) { // does the record still match the manifest?
        kvq_record_state rs = kvq_verify_record_check(m, NULL, 0);
        json_object_set_new(o, "verification_state", json_string(rs == KVQ_RECORD_MATCH ? "match"
                                                                 : rs == KVQ_RECORD_MISMATCH ? "mismatch" : "malformed"));
    }
    if (!o || json_dumpf(o, stdout, JSON_INDENT(2)) != 0) { json_decref(o); return -1; }
    putchar('\n');
    json_decref(o);
    return 0;
}

static void shape_str(const json_t *r, char *buf, size_t cap) {
    size_t i, n = 0;
    json_t *d;
    buf[0] = 0;
    json_array_foreach(json_object_get(r, "shape"), i, d)
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%" JSON_INTEGER_FORMAT, i ? "x" : "", json_integer_value(d));
    if (!buf[0]) snprintf(buf, cap, "scalar");
}

// The record kvq-verify --record stored (libconv/verify/verify.h), and whether it still
// matches the manifest; payload digests themselves are kvq-verify's to check.
// Prints the value of key in o (× scale, fmt; none when key is NULL), then " ± se" when o holds
// key_se (records written before kvq-verify reported standard errors do not).
static void put_pm(const json_t *o, const char *key, const char *key_se, double scale, const char *fmt) {
    if (key) printf(fmt, scale * json_number_value(json_object_get(o, key)));
    const json_t *se = json_object_get(o, key_se);
    if (json_is_number(se)) {
        printf(" ± ");
        printf(fmt, scale * json_number_value(se));
    }
}

static void print_verification(const json_t *m) {
    const json_t *v = json_object_get(m, "verification");
    if (!v) return;
    kvq_record_state rs = kvq_verify_record_check(m, NULL, 0);
    printf("\nverification: %s by %s %s on %s; %s\n", json_is_true(json_object_get(v, "pass")) ? "PASS" : "FAIL",
           json_string_value(json_object_get(v, "tool")) ?: "?", json_string_value(json_object_get(v, "kvq_version")) ?: "?",
           json_string_value(json_object_get(v, "date")) ?: "?",
           rs == KVQ_RECORD_MATCH      ? "the record matches this file's manifest"
           : rs == KVQ_RECORD_MISMATCH ? "the record DOES NOT MATCH this file: it changed after verification"
                                       : "the record is malformed");
    const json_t *c = json_object_get(v, "corpus"), *p = json_object_get(v, "protocol");
    if (json_is_object(c) && json_is_object(p))
        printf("  corpus %s (sha256 %.16s..., %" JSON_INTEGER_FORMAT " tokens); %s\n",
               json_string_value(json_object_get(c, "file")) ?: "?", json_string_value(json_object_get(c, "sha256")) ?: "?",
               json_integer_value(json_object_get(c, "tokens")), json_string_value(json_object_get(p, "description")) ?: "?");
    const json_t *cv = json_object_get(v, "converted"), *k = json_object_get(v, "kld");
    if (json_is_object(cv)) {
        printf("  ppl: source ");
        put_pm(json_object_get(v, "source"), "ppl", "ppl_se", 1, "%.4f");
        printf(", converted ");
        put_pm(cv, "ppl", "ppl_se", 1, "%.4f");
        printf(" (");
        printf("%+.4f", json_number_value(json_object_get(cv, "ppl_delta")));
        put_pm(cv, NULL, "ppl_delta_se", 1, "%.4f");
        printf(", %+.3f %%, run %s)\n", 100 * json_number_value(json_object_get(cv, "ppl_delta_rel")),
               json_string_value(json_object_get(cv, "run")) ?: "?");
    }
    if (json_is_object(k)) {
        printf("  KLD mean ");
        put_pm(k, "mean", "mean_se", 1, "%.6f");
        printf(", median %.6f, p99 %.6f, max %.6f; top-1 agreement ", json_number_value(json_object_get(k, "median")),
               json_number_value(json_object_get(k, "p99")), json_number_value(json_object_get(k, "max")));
        put_pm(k, "top1_agreement", "top1_agreement_se", 100, "%.2f");
        printf(" %%; RMS dp ");
        put_pm(k, "rms_dp", "rms_dp_se", 100, "%.3f");
        printf(" %%\n");
    }
    const json_t *ts = json_object_get(v, "tensors_summary");
    if (json_is_number(json_object_get(ts, "bits_per_param"))) // records written before it lack the key
        printf("  bits: whole model %.3f bits/param\n", json_number_value(json_object_get(ts, "bits_per_param")));
    if (json_is_number(json_object_get(ts, "min_snr_db")))
        printf("  tensors: min SNR %.2f dB, quantized tensors %.3f bits/w realized\n",
               json_number_value(json_object_get(ts, "min_snr_db")), json_number_value(json_object_get(ts, "lossy_bits_per_weight")));
}

// The resolved recipe the converter recorded (recipes/README.md): one line per field.
static void print_recipe(const json_t *r) {
    if (!json_is_object(r)) return;
    char *keep = json_dumps(json_object_get(r, "keep"), JSON_COMPACT), *set = json_dumps(json_object_get(r, "set"), JSON_COMPACT);
    printf("recipe: %s; weights %s, seed %" JSON_INTEGER_FORMAT ", quantize_embeddings %s, keep %s",
           json_string_value(json_object_get(r, "file")) ?: "(none)", json_string_value(json_object_get(r, "weights")) ?: "?",
           json_integer_value(json_object_get(r, "seed")), json_is_true(json_object_get(r, "quantize_embeddings")) ? "true" : "false",
           keep ? keep : "[]");
    if (set && strcmp(set, "[]")) printf(", --set %s", set);
    printf("\n");
    const json_t *tb = json_object_get(r, "target_bpw");
    const char *whose = json_is_true(json_object_get(tb, "default")) ? " (kvq-convert's default)" : "";
    if (json_is_object(tb) && !strcmp(json_string_value(json_object_get(tb, "rates")) ?: "", "uniform"))
        printf("  target_bpw: %.3f bits/param%s, one rate for every rated tensor (not calibrated: over the default's work limit)\n",
               json_number_value(json_object_get(tb, "bits_per_param")), whose);
    else if (json_is_object(tb)) // an allocated conversion (docs/ALLOCATION.md)
        printf("  target_bpw: %.3f bits/param%s, rates by measured sensitivity (calibration: %s, %" JSON_INTEGER_FORMAT " tokens)\n",
               json_number_value(json_object_get(tb, "bits_per_param")), whose,
               json_string_value(json_object_get(tb, "calib_text")) ?: "?", json_integer_value(json_object_get(tb, "calib_tokens")));
    if (json_is_object(tb) && json_string_value(json_object_get(tb, "calib_from")))
        printf("  sensitivities taken from %s\n", json_string_value(json_object_get(tb, "calib_from")));
    free(keep);
    free(set);
    size_t i;
    json_t *rule;
    json_array_foreach(json_object_get(r, "rules"), i, rule) {
        const char *glob = json_string_value(json_object_get(rule, "match")), *re = json_string_value(json_object_get(rule, "regex"));
        printf("  rule %zu: %s '%s' -> %s", i + 1, glob ? "match" : "regex", glob ? glob : re ? re : "?",
               json_string_value(json_object_get(rule, "codec")) ?: "(weights codec)");
        if (json_is_number(json_object_get(rule, "bits"))) printf(" at %g bits/w", json_number_value(json_object_get(rule, "bits")));
        printf("\n");
    }
    const json_t *kv = json_object_get(r, "kv");
    if (json_is_object(kv))
        printf("  kv: %s, window %" JSON_INTEGER_FORMAT ", boundary %s, seed %" JSON_INTEGER_FORMAT "\n",
               json_string_value(json_object_get(kv, "codec")) ?: "?", json_integer_value(json_object_get(kv, "window")),
               json_is_true(json_object_get(kv, "boundary")) ? "true" : "false", json_integer_value(json_object_get(kv, "seed")));
    else if (json_object_get(r, "kv")) printf("  kv: none\n");
}

static void print_human(const kvq_file *f) {
    const json_t *m = kvq_file_manifest(f), *a = json_object_get(m, "architecture");
    printf("%s: kvq format %" JSON_INTEGER_FORMAT ", written by %s\n", kvq_file_path(f),
           json_integer_value(json_object_get(m, "format_version")),
           json_string_value(json_object_get(m, "created_by")) ?: "?");
#define AI(k) json_integer_value(json_object_get(a, k))
    printf("architecture: %s, hidden %" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT " layers, %" JSON_INTEGER_FORMAT
           " heads (%" JSON_INTEGER_FORMAT " kv, dim %" JSON_INTEGER_FORMAT "), ffn %" JSON_INTEGER_FORMAT ", vocab %"
           JSON_INTEGER_FORMAT ", context %" JSON_INTEGER_FORMAT "%s\n",
           json_string_value(json_object_get(a, "hf_class")) ?: "?", AI("hidden_size"), AI("n_layers"), AI("n_heads"),
           AI("n_kv_heads"), AI("head_dim"), AI("intermediate_size"), AI("vocab_size"), AI("max_position_embeddings"),
           json_is_true(json_object_get(a, "tie_word_embeddings")) ? ", tied embeddings" : "");
#undef AI
    const json_t *src = json_object_get(m, "source");
    uint64_t sb = source_bytes(m), fb = kvq_file_size(f);
    printf("source: %s %s\n", json_string_value(json_object_get(src, "kind")) ?: "?",
           json_string_value(json_object_get(src, "path")) ?: "?");
    printf("size: %" PRIu64 " bytes = %.2f MiB; source weights %" PRIu64 " bytes (%.1f %%)\n", fb,
           (double)fb / 1048576.0, sb, sb ? 100.0 * (double)fb / (double)sb : 0.0);
    print_recipe(json_object_get(m, "recipe"));
    printf("\n%-52s %-16s %-6s %-20s %9s %12s\n", "tensor", "shape", "dtype", "codec", "bits/w", "bytes");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(m, "tensors"), i, r) {
        char shape[96];
        shape_str(r, shape, sizeof shape);
        const json_t *codec = json_object_get(r, "codec");
        printf("%-52s %-16s %-6s %-20s %9.3f %12" JSON_INTEGER_FORMAT "\n", json_string_value(json_object_get(r, "name")),
               shape, json_string_value(json_object_get(r, "source_dtype")) ?: "?",
               json_string_value(json_object_get(codec, "spec")) ?: json_string_value(json_object_get(codec, "name")),
               json_real_value(json_object_get(r, "bits_per_weight")), json_integer_value(json_object_get(r, "bytes")));
        if (!json_is_true(json_object_get(codec, "lossless"))) { // rate breakdown, bits per weight
            const char *part;
            json_t *bits;
            double n = (double)kvq_file_tensor_numel(r);
            printf("    rate:");
            json_object_foreach((json_t *)json_object_get(r, "rate"), part, bits)
                printf(" %s %.3f", part, n > 0 ? json_number_value(bits) / n : 0.0);
            printf(" bits/w\n");
        }
        const json_t *al = json_object_get(r, "allocation");
        if (json_is_object(al)) // KLD per token at 0 dB (KLD at SNR s = this · 10^(-s/10)), and the output-error proxy
            printf("    allocation: rate %.3f bits/w, sensitivity %.4g nats at 0 dB, output error %.4g at 0 dB\n",
                   json_real_value(json_object_get(r, "bits_per_weight")), json_number_value(json_object_get(al, "sensitivity")),
                   json_number_value(json_object_get(al, "output_error")));
    }
    json_t *t = totals(m, fb);
    printf("\ntotal: %" JSON_INTEGER_FORMAT " tensors, %" PRIu64 " bytes; ", json_integer_value(json_object_get(t, "tensors")), fb);
    if (!json_is_null(json_object_get(t, "bits_per_param")))
        printf("whole model %.3f bits/param over %" JSON_INTEGER_FORMAT " parameters; ",
               json_real_value(json_object_get(t, "bits_per_param")), json_integer_value(json_object_get(t, "params")));
    if (json_is_null(json_object_get(t, "bits_per_weight"))) printf("no lossy-quantized tensors\n");
    else printf("quantized tensors %.3f bits/w\n", json_real_value(json_object_get(t, "bits_per_weight")));
    json_decref(t);
    const json_t *kv = json_object_get(m, "kv");
    if (kv) // the KV-cache codec the model runs with (docs/KV.md)
        printf("kv cache: %s, window %" JSON_INTEGER_FORMAT ", boundary %s: %.3f bits/element, %.0f bytes/token "
               "(at %" JSON_INTEGER_FORMAT " positions, this model's shape)\n",
               json_string_value(json_object_get(kv, "spec")) ?: "?", json_integer_value(json_object_get(kv, "window")),
               json_integer_value(json_object_get(kv, "boundary")) ? "fp16 K in first/last layer" : "none",
               json_number_value(json_object_get(kv, "bits_per_element")), json_number_value(json_object_get(kv, "bytes_per_token")),
               json_integer_value(json_object_get(json_object_get(m, "architecture"), "max_position_embeddings")));
    else printf("kv cache: not declared (runtime default fp32/fp16)\n");
    print_verification(m);
}

// ---- --layers and --plot: layers × tensor roles (libconv/verify/layers.h)

// The table, with the per-tensor errors of the file's verification record when it has them.
// *state says where the errors came from ("" when none).
static int layer_table(const kvq_file *f, kvq_layer_table *t, const char **state) {
    const json_t *m = kvq_file_manifest(f), *v = json_object_get(m, "verification");
    kvq_err err = {0};
    *state = "";
    if (kvq_layers_from_manifest(m, t, &err)) {
        fprintf(stderr, "kvq-inspect: %s: %s\n", kvq_file_path(f), err.msg);
        return -1;
    }
    if (json_object_get(v, "tensors")) {
        kvq_record_state rs = kvq_verify_record_check(m, NULL, 0);
        kvq_layers_add_record(t, json_object_get(v, "tensors"));
        *state = rs == KVQ_RECORD_MATCH ? "the verification record (it matches this file)"
                                        : "the verification record, which DOES NOT MATCH this file (changed after verification)";
    }
    return 0;
}

typedef enum { COL_BPW, COL_SNR, COL_REL } col_kind;

static void cell_str(const kvq_layer_cell *c, col_kind k, char *b, size_t n) {
    if (!c->present || (k != COL_BPW && !c->has_error)) snprintf(b, n, "-");
    else if (k == COL_BPW) snprintf(b, n, "%.3f", c->bpw);
    else if (k == COL_SNR) isinf(c->snr_db) && c->snr_db > 0 ? snprintf(b, n, "exact") : isnan(c->snr_db) ? snprintf(b, n, "?")
                                                                                         : snprintf(b, n, "%.2f", c->snr_db);
    else c->rel_err == 0 ? snprintf(b, n, "0") : snprintf(b, n, "%.3g", c->rel_err);
}

static void grid(const kvq_layer_table *t, col_kind k, const char *title) {
    printf("%s\n%-6s", title, "layer");
    for (int r = 0; r < t->n_roles; r++) printf(" %*.*s", 9, 9, t->roles[r]);
    printf(k == COL_BPW ? " %9s %12s\n" : "\n", "layer b/w", "bytes");
    for (int l = 0; l < t->n_layers; l++) {
        printf("%-6d", l);
        for (int r = 0; r < t->n_roles; r++) {
            char b[32];
            cell_str(kvq_layers_cell(t, l, r), k, b, sizeof b);
            printf(" %9s", b);
        }
        if (k == COL_BPW) {
            uint64_t bytes;
            const double lb = kvq_layers_layer_bpw(t, l, &bytes);
            printf(" %9.3f %12" PRIu64, lb, bytes);
        }
        printf("\n");
    }
}

static int print_layers(const kvq_file *f) {
    kvq_layer_table t;
    const char *from;
    if (layer_table(f, &t, &from)) { kvq_layers_free(&t); return -1; }
    grid(&t, COL_BPW, "bits per weight by layer and tensor role (whole tensors: codes and side information)");
    printf("outside the layers:");
    for (size_t i = 0; i < t.n_outside; i++) printf(" %s %.3f bits/w;", t.outside[i].name, t.outside[i].c.bpw);
    kvq_bits kb;
    kvq_file_bits(kvq_file_manifest(f), &kb);
    printf("\nwhole model %.3f bits/param", kb.bits_per_param);
    if (kb.lossy_params) printf("; quantized tensors %.3f bits/w", kb.lossy_bits_per_weight);
    printf("\n");
    if (!t.n_errors) {
        printf("\nper-tensor SNR: not in this file (kvq-verify --record, with the source, stores it)\n");
        kvq_layers_free(&t);
        return 0;
    }
    printf("\nper-tensor error against the source, from %s\n", from);
    grid(&t, COL_SNR, "SNR in dB (10 log10 |x|^2/|x - x'|^2; exact = bit-identical), by layer and role");
    grid(&t, COL_REL, "relative error |x - x'| / |x|, by layer and role");
    printf("outside the layers:");
    for (size_t i = 0; i < t.n_outside; i++) {
        char b[32], c[32];
        cell_str(&t.outside[i].c, COL_SNR, b, sizeof b);
        cell_str(&t.outside[i].c, COL_REL, c, sizeof c);
        printf(" %s SNR %s, rel err %s;", t.outside[i].name, b, c);
    }
    printf("\n");
    kvq_layers_free(&t);
    return 0;
}

static int plot(const kvq_file *f, const char *path) {
    kvq_layer_table t;
    const char *from;
    if (layer_table(f, &t, &from)) { kvq_layers_free(&t); return -1; }
    const char *base = strrchr(kvq_file_path(f), '/');
    kvq_bits kb;
    kvq_file_bits(kvq_file_manifest(f), &kb);
    char title[512], msg[1024];
    snprintf(title, sizeof title, "%s: %.3f bits/param as a whole, per layer", base ? base + 1 : kvq_file_path(f),
             kb.bits_per_param);
    int rc = kvq_plot_file(&t, NULL, title, path, msg, sizeof msg);
    if (rc) fprintf(stderr, "kvq-inspect: %s\n", msg);
    kvq_layers_free(&t);
    return rc;
}

// -v: each tensor's archive entries (stored and inflated sizes, xxh3) and codec parameters.
static void print_entries(const kvq_file *f) {
    const json_t *m = kvq_file_manifest(f), *tab = json_object_get(m, "entries");
    printf("\nentries by tensor (-v): stored bytes, inflated bytes, xxh3; codec parameters\n");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(m, "tensors"), i, r) {
        printf("%s\n", json_string_value(json_object_get(r, "name")));
        const char *role;
        json_t *ev;
        json_object_foreach(json_object_get(r, "entries"), role, ev) {
            const json_t *e = json_object_get(tab, json_string_value(ev));
            printf("    %-56s %12" JSON_INTEGER_FORMAT " %12" JSON_INTEGER_FORMAT " %s\n", json_string_value(ev),
                   json_integer_value(json_object_get(e, "stored_size")), json_integer_value(json_object_get(e, "size")),
                   json_string_value(json_object_get(e, "xxh3")) ?: "?");
        }
        const json_t *params = json_object_get(json_object_get(r, "codec"), "params");
        if (json_is_object(params) && json_object_size(params)) {
            char *s = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
            printf("    params %s\n", s ? s : "?");
            free(s);
        }
    }
}

int main(int argc, char **argv) {
    if (kvq_tool_start("kvq-inspect", argc, argv)) return 0; // SIGXFSZ ignored, --version
    int as_json = 0, layers = 0, verbose = 0;
    const char *plot_path = NULL;
    static const struct option lo[] = {{"json", no_argument, 0, 'j'}, {"layers", no_argument, 0, 'l'},
                                       {"plot", required_argument, 0, 'p'}, {"verbose", no_argument, 0, 'v'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *use = "usage: kvq-inspect [--json | --layers | --plot FILE.png|FILE.svg] [-v] FILE.kvq\n"
                      "  --json      the stable JSON document (docs/FORMAT.md)\n"
                      "  --layers    bits per weight by layer and tensor role, each layer's bytes; with a\n"
                      "              verification record (kvq-verify --record), SNR and relative error too\n"
                      "  --plot F    draw per-layer bits and SNR into F (PNG or SVG, by its extension)\n"
                      "  -v          (default view) also list each tensor's archive entries (stored and inflated bytes,\n"
                      "              xxh3) and codec parameters\n"
                      "  --version   print the version\n";
    int c;
    opterr = 0; // errors are reported in one line below
    while ((c = getopt_long(argc, argv, "jlvh", lo, NULL)) != -1) {
        if (c == 'j') as_json = 1;
        else if (c == 'l') layers = 1;
        else if (c == 'p') plot_path = optarg;
        else if (c == 'v') verbose = 1;
        else if (c == 'h') {
            printf("%sexit status: 0 ok, 2 error\n", use);
            return 0;
        } else {
            fprintf(stderr, "kvq-inspect: %s: unknown option or missing value (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (as_json + layers + (plot_path != NULL) > 1) {
        fprintf(stderr, "kvq-inspect: --json, --layers and --plot exclude each other (see --help)\n");
        return 2;
    }
    if (argc - optind != 1) {
        if (argc == optind) fprintf(stderr, "kvq-inspect: no FILE.kvq given (see --help)\n");
        else fprintf(stderr, "kvq-inspect: unexpected argument '%s' (one FILE.kvq; see --help)\n", argv[optind + 1]);
        return 2;
    }
    kvq_plot_format pf;
    if (plot_path && kvq_plot_format_of(plot_path, &pf)) {
        fprintf(stderr, "kvq-inspect: --plot %s: the name must end in .png or .svg (the format)\n", plot_path);
        return 2;
    }
    kvq_file *f;
    kvq_err err = {0};
    kvq_tool_input("kvq-inspect", argv[optind]);
    if (kvq_file_open(argv[optind], &f, &err) != KVQ_OK || kvq_weights_check_file(f, &err) != KVQ_OK) {
        kvq_file_close(f);
        fprintf(stderr, "kvq-inspect: %s\n", err.msg);
        return 2;
    }
    int rc = 0;
    if (as_json) {
        rc = print_json(f) ? 2 : 0;
        if (rc) fprintf(stderr, "kvq-inspect: %s: cannot write JSON\n", argv[optind]);
    } else if (layers) rc = print_layers(f) ? 2 : 0;
    else if (plot_path) {
        rc = plot(f, plot_path) ? 2 : 0;
        kvq_plot_done();
        if (!rc && verbose) fprintf(stderr, "kvq-inspect: wrote %s\n", plot_path);
    } else {
        print_human(f);
        if (verbose) print_entries(f);
    }
    kvq_file_close(f);
    return rc;
}
