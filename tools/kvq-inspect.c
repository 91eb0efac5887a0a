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
#include "libconv/verify/verify.h"

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

static int64_t numel_of(const json_t *r) {
    int64_t n = 1;
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(r, "shape"), i, d) n *= json_integer_value(d);
    return n;
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
    if (json_is_object(tb)) // an allocated conversion (docs/ALLOCATION.md)
        printf("  target_bpw: %.3f bits/param, rates by measured sensitivity (calibration: %s, %" JSON_INTEGER_FORMAT " tokens)\n",
               json_number_value(json_object_get(tb, "bits_per_param")),
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
            double n = (double)numel_of(r);
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

// ---- --layers: layers × tensor roles, bits per weight in each cell, the layer's bytes

// "model.layers.12.self_attn.q_proj.weight" -> layer 12, role "q_proj"; -1 when not a layer's.
static int layer_role(const char *name, char *role, size_t cap) {
    int l = -1, used = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &used) != 1 || !used) return -1;
    const char *r = name + used, *dot = strrchr(r, '.');
    const char *base = r;
    for (const char *p = r; p < (dot ? dot : r + strlen(r)); p++)
        if (*p == '.') base = p + 1; // the last component before ".weight"/".bias"
    size_t n = (size_t)((dot ? dot : r + strlen(r)) - base);
    if (dot && strcmp(dot, ".weight")) { // biases keep their suffix
        snprintf(role, cap, "%.*s%s", (int)n, base, dot);
        return l;
    }
    snprintf(role, cap, "%.*s", (int)n, base);
    return l;
}

static void print_layers(const kvq_file *f) {
    const json_t *m = kvq_file_manifest(f), *ts = json_object_get(m, "tensors");
    const json_t *a = json_object_get(m, "architecture");
    const int L = (int)json_integer_value(json_object_get(a, "n_layers"));
    enum { MAXR = 24 };
    char roles[MAXR][48];
    int nr = 0;
    size_t i;
    json_t *t;
    json_array_foreach(ts, i, t) { // roles in the order of a fixed preference, then first seen
        char r[48];
        if (layer_role(json_string_value(json_object_get(t, "name")), r, sizeof r) < 0) continue;
        int k = 0;
        while (k < nr && strcmp(roles[k], r)) k++;
        if (k == nr && nr < MAXR) snprintf(roles[nr++], sizeof roles[0], "%s", r);
    }
    static const char *pref[] = {"q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj",
                                 "gate_up_proj", "down_proj"};
    char ordered[MAXR][48];
    int no = 0;
    for (size_t p = 0; p < sizeof pref / sizeof pref[0]; p++)
        for (int k = 0; k < nr; k++)
            if (!strcmp(roles[k], pref[p])) snprintf(ordered[no++], sizeof ordered[0], "%s", roles[k]);
    for (int k = 0; k < nr; k++) {
        int seen = 0;
        for (int j = 0; j < no; j++) seen |= !strcmp(ordered[j], roles[k]);
        if (!seen) snprintf(ordered[no++], sizeof ordered[0], "%s", roles[k]);
    }
    printf("bits per weight by layer and tensor role (whole tensors: codes and side information)\n%-6s", "layer");
    for (int k = 0; k < no; k++) printf(" %*.*s", 9, 9, ordered[k]);
    printf(" %12s\n", "bytes");
    for (int l = 0; l < L && l < 4096; l++) {
        double bpw[MAXR];
        for (int k = 0; k < no; k++) bpw[k] = NAN;
        uint64_t bytes = 0;
        json_array_foreach(ts, i, t) {
            char r[48];
            if (layer_role(json_string_value(json_object_get(t, "name")), r, sizeof r) != l) continue;
            bytes += (uint64_t)json_integer_value(json_object_get(t, "bytes"));
            for (int k = 0; k < no; k++)
                if (!strcmp(ordered[k], r)) bpw[k] = json_number_value(json_object_get(t, "bits_per_weight"));
        }
        printf("%-6d", l);
        for (int k = 0; k < no; k++) isnan(bpw[k]) ? printf(" %9s", "-") : printf(" %9.3f", bpw[k]);
        printf(" %12" PRIu64 "\n", bytes);
    }
    printf("outside the layers:");
    json_array_foreach(ts, i, t) {
        char r[48];
        const char *nm = json_string_value(json_object_get(t, "name"));
        if (layer_role(nm, r, sizeof r) >= 0) continue;
        printf(" %s %.3f bits/w;", nm, json_number_value(json_object_get(t, "bits_per_weight")));
    }
    kvq_bits kb;
    kvq_file_bits(m, &kb);
    printf("\nwhole model %.3f bits/param", kb.bits_per_param);
    if (kb.lossy_params) printf("; quantized tensors %.3f bits/w", kb.lossy_bits_per_weight);
    printf("\n");
}

int main(int argc, char **argv) {
    if (kvq_tool_start("kvq-inspect", argc, argv)) return 0; // SIGXFSZ ignored, --version
    int as_json = 0, layers = 0;
    static const struct option lo[] = {{"json", no_argument, 0, 'j'}, {"layers", no_argument, 0, 'l'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *use = "usage: kvq-inspect [--json | --layers] FILE.kvq\n"
                      "  --layers  bits per weight by layer and tensor role, and each layer's bytes\n";
    int c;
    while ((c = getopt_long(argc, argv, "jlh", lo, NULL)) != -1) {
        if (c == 'j') as_json = 1;
        else if (c == 'l') layers = 1;
        else if (c == 'h') {
            printf("%sexit status: 0 ok, 2 error\n", use);
            return 0;
        } else {
            fputs(use, stderr);
            return 2;
        }
    }
    if (argc - optind != 1 || (as_json && layers)) { fputs(use, stderr); return 2; }
    kvq_file *f;
    kvq_err err = {0};
    if (kvq_file_open(argv[optind], &f, &err) != KVQ_OK) {
        fprintf(stderr, "kvq-inspect: %s\n", err.msg);
        return 2;
    }
    int rc = 0;
    if (as_json) rc = print_json(f) ? 2 : 0;
    else if (layers) print_layers(f);
    else print_human(f);
    if (rc) fprintf(stderr, "kvq-inspect: %s: cannot write JSON\n", argv[optind]);
    kvq_file_close(f);
    return rc;
}
