// The conversion plan: a YAML recipe (libyaml), `--set key=value` overrides and CLI options,
// turned into one plan entry per tensor (codec spec, rate, why) with every codec spec parsed
// once up front, plus the KV-cache codec and its policy. Precedence: libconv/convert/convert.h.
// Recipe format: recipes/README.md and docs/FORMAT.md ("Recipes").
#include "libconv/convert/convert.h"
#include "libconv/kv/kvcodec.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <yaml.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

typedef struct {
    char *spec;
    const kvq_codec_traits *codec;
    json_t *cfg;
} plan_spec;

typedef struct {
    char *pattern;      // glob (match) or regular expression (regex)
    pcre2_code *re;     // compiled regex, NULL for a glob
    char *codec;        // spec, or NULL: the recipe's weights codec (with bits)
    double bits;        // rate in bits per weight, NAN: the codec spec's own
    char where[160];    // "recipe.yaml: line 12" or "--set rules=..."
    unsigned long line; // in the recipe file, 0 for a --set
} plan_rule;

struct kvq_plan {
    char *recipe_path;
    uint64_t seed;
    int quantize_embeddings;
    char *weights_spec;     // resolved default codec for 2-D weights
    int weights;            // index into specs
    int none;               // index of "none" in specs
    char **keep;
    size_t n_keep;
    plan_rule *rules;
    size_t n_rules;
    plan_spec *specs;
    size_t n_specs;
    char **sets;            // the --set overrides applied, in order (recorded in the manifest)
    size_t n_sets;
    // KV cache
    char *kv_codec;         // canonical spec, or NULL: no KV codec stored
    int kv_window, kv_boundary;
    uint64_t kv_seed;
    int kv_seed_set;
    // whole-model budget (alloc.c)
    double target_bpw;      // NAN: none
    char *calib_text;       // calibration text, NULL: text the model samples itself
    int calib_tokens;       // 0: default
    int calib_probe;        // kvq_probe_kind
    double block_floor;     // row blocks' rates within this many bits of the table's highest; INFINITY: none
    double block_floor_cap; // ... or at least this rate, whichever is lower; INFINITY: no cap
    char *calib_from;       // sensitivities from this .kvq, NULL: measure
    int budget_uniform;     // the budget was met with one rate (kvq_plan_set_budget)
    int budget_default;     // the tool's default budget
    int ldlq_auto;          // the budget's HyperQuant rounds with LDLQ by default (kvq_plan_set_ldlq)
};

static void free_rules(kvq_plan *p) {
    for (size_t i = 0; i < p->n_rules; i++) {
        free(p->rules[i].pattern);
        free(p->rules[i].codec);
        pcre2_code_free(p->rules[i].re);
    }
    free(p->rules);
    p->rules = NULL;
    p->n_rules = 0;
}

static void free_strs(char ***l, size_t *n) {
    for (size_t i = 0; i < *n; i++) free((*l)[i]);
    free(*l);
    *l = NULL;
    *n = 0;
}

void kvq_plan_free(kvq_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_specs; i++) { free(p->specs[i].spec); json_decref(p->specs[i].cfg); }
    free_rules(p);
    free_strs(&p->keep, &p->n_keep);
    free_strs(&p->sets, &p->n_sets);
    free(p->specs);
    free(p->recipe_path);
    free(p->weights_spec);
    free(p->kv_codec);
    free(p->calib_text);
    free(p->calib_from);
    free(p);
}

// Index of spec in the plan's table, parsing it the first time it is seen.
static int intern_spec(kvq_plan *p, const char *spec, const char *where, kvq_err *err) {
    for (size_t i = 0; i < p->n_specs; i++)
        if (strcmp(p->specs[i].spec, spec) == 0) return (int)i;
    plan_spec *s = realloc(p->specs, (p->n_specs + 1) * sizeof *s);
    if (!s) { kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for codec '%s'", where, spec); return -1; }
    p->specs = s;
    plan_spec *n = &s[p->n_specs];
    memset(n, 0, sizeof *n);
    if (kvq_codec_parse_spec(spec, &n->codec, &n->cfg, err) != KVQ_OK) {
        kvq_err_prefix(err, "%s", where);
        return -1;
    }
    if (!(n->spec = strdup(spec))) {
        json_decref(n->cfg);
        kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for codec '%s'", where, spec);
        return -1;
    }
    return (int)p->n_specs++;
}

static int add_str(char ***list, size_t *n, const char *s) {
    char **l = realloc(*list, (*n + 1) * sizeof *l);
    if (!l) return -1;
    *list = l;
    if (!(l[*n] = strdup(s))) return -1;
    (*n)++;
    return 0;
}

static int set_str(char **dst, const char *s) {
    char *c = s ? strdup(s) : NULL;
    if (s && !c) return -1;
    free(*dst);
    *dst = c;
    return 0;
}

// ---- recipe documents --------------------------------------------------------
// The recipe file and each --set are libyaml documents read by the same code, in order; a
// later value replaces an earlier one (a list — keep, rules — is replaced whole).

typedef struct {
    const char *label;      // file path, or "--set 'k=v'"
    int has_lines;          // a file: errors name the line
    yaml_document_t *doc;
    kvq_err *err;
} yctx;

static const char *scalar(yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static kvq_status ybad(yctx *y, yaml_node_t *n, const char *what) {
    if (!y->has_lines) return kvq_err_set(y->err, KVQ_ERR_ARG, "%s: %s", y->label, what);
    return kvq_err_set(y->err, KVQ_ERR_FORMAT, "%s: line %lu: %s", y->label,
                       n ? (unsigned long)n->start_mark.line + 1 : 0ul, what);
}

static void where_of(yctx *y, yaml_node_t *n, char *buf, size_t len) {
    if (y->has_lines) snprintf(buf, len, "%s: line %lu", y->label, n ? (unsigned long)n->start_mark.line + 1 : 0ul);
    else snprintf(buf, len, "%s", y->label);
}

// A key given twice in a mapping (the YAML spec forbids it; libyaml keeps both and the second
// would silently win or lose) is an error naming its line.
static kvq_status no_duplicate_keys(yctx *y, yaml_node_t *map) {
    for (yaml_node_pair_t *a = map->data.mapping.pairs.start; a < map->data.mapping.pairs.top; a++)
        for (yaml_node_pair_t *b = a + 1; b < map->data.mapping.pairs.top; b++) {
            yaml_node_t *ka = yaml_document_get_node(y->doc, a->key), *kb = yaml_document_get_node(y->doc, b->key);
            const char *sa = scalar(ka), *sb = scalar(kb);
            if (sa && sb && !strcmp(sa, sb)) {
                char what[200];
                snprintf(what, sizeof what, "key '%.100s' given twice (first on line %lu)", sa,
                         (unsigned long)ka->start_mark.line + 1);
                return ybad(y, kb, what);
            }
        }
    return KVQ_OK;
}

static int parse_bool(const char *s, int *v) {
    if (!s) return -1;
    if (!strcmp(s, "true") || !strcmp(s, "yes")) { *v = 1; return 0; }
    if (!strcmp(s, "false") || !strcmp(s, "no")) { *v = 0; return 0; }
    return -1;
}

static int parse_u63(const char *v, uint64_t *out) {
    char *end;
    if (!v || !*v || *v == '-') return -1;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (*end || errno || x > INT64_MAX) return -1;
    *out = x;
    return 0;
}

static int parse_int(const char *v, int lo, int hi, int *out) {
    char *end;
    if (!v || !*v) return -1;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end || errno || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

static int parse_rate(const char *v, double *out) {
    char *end;
    if (!v || !*v) return -1;
    double x = strtod(v, &end);
    if (*end || !(x > 0 && x <= 32)) return -1;
    *out = x;
    return 0;
}

// 'none' (INFINITY: no bound) or a number of bits in [0, hi] (block_floor, block_floor_cap).
static int parse_bits_or_none(const char *v, double hi, double *out) {
    char *end;
    if (!v || !*v) return -1;
    if (!strcmp(v, "none")) { *out = INFINITY; return 0; }
    double x = strtod(v, &end);
    if (*end || !(x >= 0.0 && x <= hi)) return -1;
    *out = x;
    return 0;
}

// One rule {match|regex, codec?, bits?}: checked here (the regex compiles, the codec spec
// parses, the rate applies to it) so a bad rule fails naming its line before any output.
static kvq_status read_rule(kvq_plan *p, yctx *y, yaml_node_t *rn, plan_rule *r) {
    memset(r, 0, sizeof *r);
    r->bits = NAN;
    if (rn->type != YAML_MAPPING_NODE) return ybad(y, rn, "each rule must be a mapping {match|regex, codec, bits}");
    kvq_status s = no_duplicate_keys(y, rn);
    if (s) return s;
    const char *glob = NULL, *regex = NULL, *codec = NULL, *bits = NULL;
    for (yaml_node_pair_t *e = rn->data.mapping.pairs.start; e < rn->data.mapping.pairs.top; e++) {
        yaml_node_t *kn = yaml_document_get_node(y->doc, e->key), *vn = yaml_document_get_node(y->doc, e->value);
        const char *k = scalar(kn), *v = scalar(vn);
        if (!k) return ybad(y, kn, "rule keys must be strings");
        if (!v) return ybad(y, vn, "rule values must be strings or numbers");
        if (!strcmp(k, "match")) glob = v;
        else if (!strcmp(k, "regex")) regex = v;
        else if (!strcmp(k, "codec")) codec = v;
        else if (!strcmp(k, "bits")) bits = v;
        else {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown rule key '%.60s' (known: match, regex, codec, bits)", k);
            return ybad(y, kn, msg);
        }
    }
    if (!glob == !regex) return ybad(y, rn, "a rule needs exactly one of 'match' (glob) and 'regex'");
    if (!codec && !bits) return ybad(y, rn, "a rule needs 'codec', 'bits' or both");
    if (bits && parse_rate(bits, &r->bits)) return ybad(y, rn, "rule 'bits' must be a number in (0, 32]");
    where_of(y, rn, r->where, sizeof r->where);
    r->line = y->has_lines ? (unsigned long)rn->start_mark.line + 1 : 0;
    if (regex) {
        int ec;
        PCRE2_SIZE eo;
        r->re = pcre2_compile((PCRE2_SPTR)regex, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
        if (!r->re) {
            PCRE2_UCHAR m[160];
            pcre2_get_error_message(ec, m, sizeof m);
            char msg[300];
            snprintf(msg, sizeof msg, "bad regex '%.80s' at offset %zu: %s", regex, (size_t)eo, (char *)m);
            return ybad(y, rn, msg);
        }
    }
    if (!(r->pattern = strdup(glob ? glob : regex)) || (codec && !(r->codec = strdup(codec))))
        return kvq_err_set(y->err, KVQ_ERR_NOMEM, "%s: out of memory", y->label);
    if (codec && intern_spec(p, codec, r->where, y->err) < 0) return y->err ? y->err->code : KVQ_ERR_ARG;
    if (codec && !isnan(r->bits)) { // the rate must apply to this codec (checked for a BF16 tensor)
        char spec[300];
        if ((s = kvq_codec_spec_with_rate(codec, r->bits, KVQ_DTYPE_BF16, spec, sizeof spec, y->err))) {
            kvq_err_prefix(y->err, "%s", r->where);
            return s;
        }
    }
    return KVQ_OK;
}

static kvq_status read_kv(kvq_plan *p, yctx *y, yaml_node_t *vn) {
    if (vn->type != YAML_MAPPING_NODE) return ybad(y, vn, "kv must be a mapping {codec, window, boundary, seed}");
    kvq_status s = no_duplicate_keys(y, vn);
    for (yaml_node_pair_t *e = vn->data.mapping.pairs.start; s == KVQ_OK && e < vn->data.mapping.pairs.top; e++) {
        yaml_node_t *kn = yaml_document_get_node(y->doc, e->key), *n = yaml_document_get_node(y->doc, e->value);
        const char *k = scalar(kn), *v = scalar(n);
        if (!k) s = ybad(y, kn, "kv keys must be strings");
        else if (!strcmp(k, "codec")) {
            if (!v || !*v) { s = ybad(y, n, "kv.codec must be a KV codec spec (docs/KV.md) or none"); break; }
            if (!strcmp(v, "none")) { free(p->kv_codec); p->kv_codec = NULL; continue; }
            kvq_kvspec ks;
            char canon[128];
            if ((s = kvq_kvspec_parse(v, &ks, y->err))) {
                char where[200];
                where_of(y, n, where, sizeof where);
                kvq_err_prefix(y->err, "%s: kv.codec", where);
                break;
            }
            kvq_kvspec_format(&ks, canon, sizeof canon);
            if (set_str(&p->kv_codec, canon)) s = kvq_err_set(y->err, KVQ_ERR_NOMEM, "%s: out of memory", y->label);
        } else if (!strcmp(k, "window")) {
            if (parse_int(v, 0, 1 << 24, &p->kv_window)) s = ybad(y, n, "kv.window must be an integer in [0, 16777216]");
        } else if (!strcmp(k, "boundary")) {
            if (parse_bool(v, &p->kv_boundary)) s = ybad(y, n, "kv.boundary must be true or false");
        } else if (!strcmp(k, "seed")) {
            if (v && !strcmp(v, "recipe")) p->kv_seed_set = 0;
            else if (parse_u63(v, &p->kv_seed)) s = ybad(y, n, "kv.seed must be an integer in [0, 2^63) or 'recipe'");
            else p->kv_seed_set = 1;
        } else {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown kv key '%.60s' (known: codec, window, boundary, seed)", k);
            s = ybad(y, kn, msg);
        }
    }
    return s;
}

// Applies one document's top-level mapping to the plan.
static kvq_status apply_doc(kvq_plan *p, yctx *y) {
    kvq_status s = KVQ_OK;
    yaml_node_t *root = yaml_document_get_root_node(y->doc);
    if (!root || root->type != YAML_MAPPING_NODE) return ybad(y, root, "recipe must be a mapping");
    if ((s = no_duplicate_keys(y, root))) return s;
    for (yaml_node_pair_t *kv = root->data.mapping.pairs.start; kv < root->data.mapping.pairs.top && s == KVQ_OK; kv++) {
        yaml_node_t *kn = yaml_document_get_node(y->doc, kv->key), *vn = yaml_document_get_node(y->doc, kv->value);
        const char *k = scalar(kn), *v = scalar(vn);
        if (!k) s = ybad(y, kn, "keys must be strings");
        else if (!strcmp(k, "seed")) {
            if (parse_u63(v, &p->seed)) s = ybad(y, vn, "seed must be an integer in [0, 2^63)");
        } else if (!strcmp(k, "weights")) {
            char where[200];
            where_of(y, vn, where, sizeof where);
            if (!v) s = ybad(y, vn, "weights must be a codec spec string");
            else if (intern_spec(p, v, where, y->err) < 0) s = y->err ? y->err->code : KVQ_ERR_ARG;
            else if (set_str(&p->weights_spec, v)) s = kvq_err_set(y->err, KVQ_ERR_NOMEM, "%s: out of memory", y->label);
        } else if (!strcmp(k, "quantize_embeddings")) {
            if (parse_bool(v, &p->quantize_embeddings)) s = ybad(y, vn, "quantize_embeddings must be true or false");
        } else if (!strcmp(k, "keep")) {
            if (vn->type != YAML_SEQUENCE_NODE) { s = ybad(y, vn, "keep must be a list of patterns"); break; }
            free_strs(&p->keep, &p->n_keep);
            for (yaml_node_item_t *it = vn->data.sequence.items.start; it < vn->data.sequence.items.top && s == KVQ_OK; it++) {
                const char *pat = scalar(yaml_document_get_node(y->doc, *it));
                if (!pat) s = ybad(y, vn, "keep entries must be strings");
                else if (add_str(&p->keep, &p->n_keep, pat))
                    s = kvq_err_set(y->err, KVQ_ERR_NOMEM, "%s: out of memory for keep patterns", y->label);
            }
        } else if (!strcmp(k, "rules")) {
            if (vn->type != YAML_SEQUENCE_NODE) { s = ybad(y, vn, "rules must be a list of {match|regex, codec, bits}"); break; }
            free_rules(p);
            for (yaml_node_item_t *it = vn->data.sequence.items.start; it < vn->data.sequence.items.top && s == KVQ_OK; it++) {
                plan_rule *rules = realloc(p->rules, (p->n_rules + 1) * sizeof *rules);
                if (!rules) { s = kvq_err_set(y->err, KVQ_ERR_NOMEM, "%s: out of memory for rules", y->label); break; }
                p->rules = rules;
                s = read_rule(p, y, yaml_document_get_node(y->doc, *it), &rules[p->n_rules]);
                p->n_rules++; // freed by free_rules even when half-read (fields zeroed first)
            }
        } else if (!strcmp(k, "kv")) {
            s = read_kv(p, y, vn);
        } else if (!strcmp(k, "target_bpw")) {
            double x;
            if (v && !strcmp(v, "none")) p->target_bpw = NAN;
            else if (parse_rate(v, &x) || x < 1.0) s = ybad(y, vn, "target_bpw must be 'none' or a number in [1, 32] (whole-model bits per parameter)");
            else p->target_bpw = x;
        } else if (!strcmp(k, "calib_text")) {
            if (!v) s = ybad(y, vn, "calib_text must be a file path or 'model' (text the model samples)");
            else if (!strcmp(v, "model")) { free(p->calib_text); p->calib_text = NULL; }
            else if (set_str(&p->calib_text, v)) s = kvq_err_set(y->err, KVQ_ERR_NOMEM, "%s: out of memory", y->label);
        } else if (!strcmp(k, "calib_tokens")) {
            if (parse_int(v, 16, 1 << 20, &p->calib_tokens)) s = ybad(y, vn, "calib_tokens must be an integer in [16, 1048576]");
        } else if (!strcmp(k, "calib_probe")) {
            if (!v || (strcmp(v, "layer") && strcmp(v, "full"))) s = ybad(y, vn, "calib_probe must be 'layer' or 'full'");
            else p->calib_probe = !strcmp(v, "full") ? KVQ_PROBE_FULL : KVQ_PROBE_LAYER;
        } else if (!strcmp(k, "block_floor")) {
            if (parse_bits_or_none(v, 8.0, &p->block_floor)) s = ybad(y, vn, "block_floor must be 'none' or a number of bits in [0, 8]");
        } else if (!strcmp(k, "block_floor_cap")) {
            if (parse_bits_or_none(v, 16.0, &p->block_floor_cap))
                s = ybad(y, vn, "block_floor_cap must be 'none' or a rate in bits in [0, 16]");
        } else {
            char msg[300];
            snprintf(msg, sizeof msg, "unknown key '%.60s' (known: seed, weights, quantize_embeddings, keep, rules, kv, "
                                      "target_bpw, calib_text, calib_tokens, calib_probe, block_floor, block_floor_cap)", k);
            s = ybad(y, kn, msg);
        }
    }
    return s;
}

static kvq_status read_recipe_file(kvq_plan *p, const char *path, kvq_err *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return kvq_err_set(err, KVQ_ERR_IO, "%s: cannot open recipe: %s", path, strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, fp);
    if (!yaml_parser_load(&parser, &doc)) {
        kvq_status s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: line %lu: YAML error: %s", path,
                                   (unsigned long)parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
        yaml_parser_delete(&parser);
        fclose(fp);
        return s;
    }
    { // one document only: a second one would be silently ignored
        yaml_document_t more;
        int ok = yaml_parser_load(&parser, &more);
        int extra = ok && yaml_document_get_root_node(&more) != NULL;
        unsigned long line = ok && extra ? (unsigned long)yaml_document_get_root_node(&more)->start_mark.line + 1
                                         : (unsigned long)parser.problem_mark.line + 1;
        if (ok) yaml_document_delete(&more);
        if (!ok || extra) {
            kvq_status s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: line %lu: %s", path, line,
                                       !ok ? (parser.problem ? parser.problem : "YAML error")
                                           : "a second YAML document (a recipe is one mapping)");
            yaml_document_delete(&doc);
            yaml_parser_delete(&parser);
            fclose(fp);
            return s;
        }
    }
    yaml_parser_delete(&parser);
    fclose(fp);
    yctx y = {path, 1, &doc, err};
    kvq_status s = apply_doc(p, &y);
    yaml_document_delete(&doc);
    return s;
}

// Copies node n of src into dst (recursively); returns its id in dst.
static int copy_node(yaml_document_t *dst, yaml_document_t *src, int n) {
    yaml_node_t *x = yaml_document_get_node(src, n);
    if (x->type == YAML_SCALAR_NODE)
        return yaml_document_add_scalar(dst, NULL, x->data.scalar.value, (int)x->data.scalar.length, x->data.scalar.style);
    if (x->type == YAML_SEQUENCE_NODE) {
        int q = yaml_document_add_sequence(dst, NULL, YAML_FLOW_SEQUENCE_STYLE);
        for (yaml_node_item_t *it = x->data.sequence.items.start; it < x->data.sequence.items.top; it++)
            yaml_document_append_sequence_item(dst, q, copy_node(dst, src, *it));
        return q;
    }
    int m = yaml_document_add_mapping(dst, NULL, YAML_FLOW_MAPPING_STYLE);
    for (yaml_node_pair_t *e = x->data.mapping.pairs.start; e < x->data.mapping.pairs.top; e++) {
        int k = copy_node(dst, src, e->key);
        yaml_document_append_mapping_pair(dst, m, k, copy_node(dst, src, e->value));
    }
    return m;
}

// "--set key=value" as a one-key document: a dotted key (kv.window) becomes nested mappings;
// a value starting with '[' or '{' is YAML flow (keep=["*.bias"], rules=[{regex: ..., bits: 5}]),
// any other value one scalar taken verbatim (globs with '*' need no quoting).
static kvq_status apply_set(kvq_plan *p, const char *set, kvq_err *err) {
    char label[600];
    snprintf(label, sizeof label, "--set '%.560s'", set);
    const char *eq = strchr(set, '=');
    if (!eq || eq == set) return kvq_err_set(err, KVQ_ERR_ARG, "%s: expected key=value", label);
    yaml_document_t doc, flow;
    int have_flow = 0;
    const char *val = eq + 1;
    if (!yaml_document_initialize(&doc, NULL, NULL, NULL, 1, 1))
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", label);
    int root = yaml_document_add_mapping(&doc, NULL, YAML_BLOCK_MAPPING_STYLE), map = root, vnode = 0;
    kvq_status s = KVQ_OK;
    char key[256];
    size_t klen = (size_t)(eq - set);
    if (klen >= sizeof key) { yaml_document_delete(&doc); return kvq_err_set(err, KVQ_ERR_ARG, "%s: key too long", label); }
    memcpy(key, set, klen);
    key[klen] = 0;
    if (val[0] == '[' || val[0] == '{') { // parse the flow value, then copy it into doc
        yaml_parser_t ps;
        yaml_parser_initialize(&ps);
        yaml_parser_set_input_string(&ps, (const unsigned char *)val, strlen(val));
        if (!yaml_parser_load(&ps, &flow) || !yaml_document_get_root_node(&flow)) {
            s = kvq_err_set(err, KVQ_ERR_ARG, "%s: YAML error in the value: %s", label, ps.problem ? ps.problem : "empty");
            yaml_parser_delete(&ps);
            yaml_document_delete(&doc);
            return s;
        }
        yaml_parser_delete(&ps);
        have_flow = 1;
    }
    char *save = NULL, *part = strtok_r(key, ".", &save);
    while (part) {
        char *next = strtok_r(NULL, ".", &save);
        int kn = yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)part, -1, YAML_PLAIN_SCALAR_STYLE);
        if (next) vnode = yaml_document_add_mapping(&doc, NULL, YAML_BLOCK_MAPPING_STYLE);
        else if (have_flow) vnode = copy_node(&doc, &flow, 1); // node 1 is the root
        else vnode = yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)val, -1, YAML_PLAIN_SCALAR_STYLE);
        yaml_document_append_mapping_pair(&doc, map, kn, vnode);
        map = vnode;
        part = next;
    }
    if (have_flow) yaml_document_delete(&flow);
    yctx y = {label, 0, &doc, err};
    s = apply_doc(p, &y);
    yaml_document_delete(&doc);
    if (s == KVQ_OK && add_str(&p->sets, &p->n_sets, set)) s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", label);
    return s;
}

kvq_status kvq_plan_build(const kvq_plan_opts *o, kvq_plan **out, kvq_err *err) {
    *out = NULL;
    kvq_plan *p = calloc(1, sizeof *p);
    if (!p) return kvq_err_set(err, KVQ_ERR_NOMEM, "plan: out of memory");
    p->target_bpw = NAN;
    p->block_floor = KVQ_ALLOC_BLOCK_FLOOR;
    p->block_floor_cap = KVQ_ALLOC_BLOCK_FLOOR_CAP;
    kvq_status s = KVQ_OK;
    if (o->recipe_path) {
        if (!(p->recipe_path = strdup(o->recipe_path))) s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", o->recipe_path);
        else s = read_recipe_file(p, o->recipe_path, err);
    }
    for (size_t i = 0; s == KVQ_OK && o->sets && o->sets[i]; i++) s = apply_set(p, o->sets[i], err);
    if (s == KVQ_OK && o->weights) {
        if (intern_spec(p, o->weights, "--weights", err) < 0) s = err ? err->code : KVQ_ERR_ARG;
        else if (set_str(&p->weights_spec, o->weights)) s = kvq_err_set(err, KVQ_ERR_NOMEM, "--weights: out of memory");
    }
    if (s == KVQ_OK && o->seed_set) {
        if (o->seed > INT64_MAX) s = kvq_err_set(err, KVQ_ERR_ARG, "--seed %" PRIu64 ": must be below 2^63", o->seed);
        p->seed = o->seed;
    }
    if (o->quantize_embeddings >= 0) p->quantize_embeddings = o->quantize_embeddings > 0;
    if (s == KVQ_OK && o->target_bpw != 0) {
        if (!(o->target_bpw >= 1.0 && o->target_bpw <= 32.0) && !isnan(o->target_bpw))
            s = kvq_err_set(err, KVQ_ERR_ARG, "--target-bpw %g: expected whole-model bits per parameter in [1, 32]", o->target_bpw);
        p->target_bpw = o->target_bpw;
    }
    if (s == KVQ_OK && o->calib_text && set_str(&p->calib_text, o->calib_text)) s = kvq_err_set(err, KVQ_ERR_NOMEM, "plan: out of memory");
    if (o->calib_tokens > 0) p->calib_tokens = o->calib_tokens;
    if (o->calib_probe) p->calib_probe = o->calib_probe - 1;
    if (s == KVQ_OK && o->calib_from && set_str(&p->calib_from, o->calib_from)) s = kvq_err_set(err, KVQ_ERR_NOMEM, "plan: out of memory");
    for (size_t i = 0; s == KVQ_OK && o->keep && o->keep[i]; i++)
        if (add_str(&p->keep, &p->n_keep, o->keep[i]))
            s = kvq_err_set(err, KVQ_ERR_NOMEM, "--keep '%s': out of memory", o->keep[i]);
    if (s == KVQ_OK && (p->none = intern_spec(p, "none", "built-in", err)) < 0) s = err ? err->code : KVQ_ERR_ARG;
    if (s == KVQ_OK && !p->weights_spec && set_str(&p->weights_spec, "none")) s = kvq_err_set(err, KVQ_ERR_NOMEM, "plan: out of memory");
    if (s == KVQ_OK && (p->weights = intern_spec(p, p->weights_spec, "weights", err)) < 0) s = err ? err->code : KVQ_ERR_ARG;
    for (size_t i = 0; s == KVQ_OK && i < p->n_rules; i++) { // a rate without a codec needs a weights codec with one
        const plan_rule *r = &p->rules[i];
        char spec[300];
        if (!r->codec && (s = kvq_codec_spec_with_rate(p->weights_spec, r->bits, KVQ_DTYPE_BF16, spec, sizeof spec, err)))
            kvq_err_prefix(err, "%s: 'bits' without 'codec' applies to weights", r->where);
    }
    if (s != KVQ_OK) { kvq_plan_free(p); return s; }
    *out = p;
    return KVQ_OK;
}

// ---- choosing ----------------------------------------------------------------

static int is_embedding(const char *name) {
    size_t n = strlen(name);
    const char *suf = "embed_tokens.weight";
    return strcmp(name, "lm_head.weight") == 0 || (n >= strlen(suf) && strcmp(name + n - strlen(suf), suf) == 0);
}

static int rule_matches(const plan_rule *r, const char *name) {
    if (!r->re) return fnmatch(r->pattern, name, 0) == 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->re, NULL);
    int rc = md ? pcre2_match(r->re, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    return rc >= 0;
}

// The entry's codec fields from spec index si.
static void entry_use(const kvq_plan *p, kvq_plan_entry *e, int si) {
    e->codec = p->specs[si].codec;
    e->cfg = p->specs[si].cfg;
    e->spec = p->specs[si].spec;
    double bits = kvq_codec_predict_bits(e->codec, e->cfg, e->rows, e->cols, e->dtype);
    e->rate = e->numel > 0 ? bits / (double)e->numel : NAN;
}

kvq_status kvq_plan_resolve(kvq_plan *p, const kvq_tensor *t, kvq_plan_entry *e, kvq_err *err) {
    memset(e, 0, sizeof *e);
    e->sensitivity = e->output_error = NAN;
    e->name = t->name;
    e->dtype = t->dtype;
    e->numel = kvq_tensor_numel(t);
    e->cols = t->ndim ? t->shape[t->ndim - 1] : 1;
    e->rows = e->cols ? e->numel / e->cols : 0;
    e->seed = kvq_plan_tensor_seed(p, t->name);
    int si = -1;
    for (size_t i = 0; i < p->n_keep && si < 0; i++)
        if (fnmatch(p->keep[i], t->name, 0) == 0) {
            si = p->none;
            snprintf(e->why, sizeof e->why, "keep '%.40s'", p->keep[i]);
        }
    for (size_t i = 0; i < p->n_rules && si < 0; i++) {
        const plan_rule *r = &p->rules[i];
        if (!rule_matches(r, t->name)) continue;
        const char *base = r->codec ? r->codec : p->weights_spec;
        char spec[300];
        if (!isnan(r->bits)) {
            kvq_status s = kvq_codec_spec_with_rate(base, r->bits, t->dtype, spec, sizeof spec, err);
            if (s) { kvq_err_prefix(err, "tensor '%s': rule at %s", t->name, r->where); return s; }
            base = spec;
        }
        if ((si = intern_spec(p, base, r->where, err)) < 0) return err ? err->code : KVQ_ERR_ARG;
        if (r->line) snprintf(e->why, sizeof e->why, "rule %zu (line %lu)", i + 1, r->line);
        else snprintf(e->why, sizeof e->why, "rule %zu (--set)", i + 1);
    }
    if (si < 0) {
        int two_d = t->ndim >= 2, emb = is_embedding(t->name);
        si = two_d && (!emb || p->quantize_embeddings) ? p->weights : p->none;
        snprintf(e->why, sizeof e->why, "%s", !two_d ? "built-in: 1-D" : emb && !p->quantize_embeddings ? "built-in: embedding"
                                                                                                          : "weights");
    }
    entry_use(p, e, si);
    return KVQ_OK;
}

kvq_status kvq_plan_entry_set_spec(kvq_plan *p, kvq_plan_entry *e, const char *spec, const char *why, kvq_err *err) {
    int si = intern_spec(p, spec, e->name, err);
    if (si < 0) return err ? err->code : KVQ_ERR_ARG;
    entry_use(p, e, si);
    if (why) snprintf(e->why, sizeof e->why, "%s", why);
    return KVQ_OK;
}

kvq_status kvq_plan_entry_set_rate(kvq_plan *p, kvq_plan_entry *e, double bits, const char *why, kvq_err *err) {
    char spec[300];
    kvq_status s = kvq_codec_spec_with_rate(e->spec, bits, e->dtype, spec, sizeof spec, err);
    if (s) { kvq_err_prefix(err, "tensor '%s'", e->name); return s; }
    return kvq_plan_entry_set_spec(p, e, spec, why, err);
}

kvq_status kvq_plan_choose(kvq_plan *p, const kvq_tensor *t, const kvq_codec_traits **codec,
                           const json_t **cfg, const char **spec, kvq_err *err) {
    kvq_plan_entry e;
    kvq_status s = kvq_plan_resolve(p, t, &e, err);
    if (s) return s;
    *codec = e.codec;
    *cfg = e.cfg;
    *spec = e.spec;
    return KVQ_OK;
}

uint64_t kvq_plan_seed(const kvq_plan *p) { return p->seed; }

uint64_t kvq_plan_tensor_seed(const kvq_plan *p, const char *name) {
    return XXH3_64bits_withSeed(name, strlen(name), p->seed);
}

void kvq_plan_budget(const kvq_plan *p, kvq_plan_budget_t *b) {
    b->target_bpw = p->target_bpw;
    b->calib_text = p->calib_text;
    b->calib_tokens = p->calib_tokens > 0 ? p->calib_tokens : KVQ_CALIB_TOKENS_DEFAULT;
    b->calib_probe = (kvq_probe_kind)p->calib_probe;
    b->block_floor = p->block_floor;
    b->block_floor_cap = p->block_floor_cap;
    b->calib_from = p->calib_from;
    b->quantize_embeddings = p->quantize_embeddings;
    b->weights_spec = p->weights_spec;
    b->ldlq = p->ldlq_auto;
}

void kvq_plan_set_budget(kvq_plan *p, double target_bpw, int uniform, int is_default) {
    p->target_bpw = target_bpw;
    p->budget_uniform = uniform;
    p->budget_default = is_default;
}

void kvq_plan_set_ldlq(kvq_plan *p, int on) { p->ldlq_auto = on != 0; }

void kvq_plan_kv(const kvq_plan *p, kvq_plan_kv_policy *kv) {
    kv->spec = p->kv_codec;
    kv->window = p->kv_window;
    kv->boundary = p->kv_boundary;
    kv->seed = p->kv_seed_set ? p->kv_seed : p->seed;
}

json_t *kvq_plan_to_json(const kvq_plan *p) {
    json_t *keep = json_array(), *rules = json_array(), *sets = json_array();
    for (size_t i = 0; i < p->n_keep; i++) json_array_append_new(keep, json_string(p->keep[i]));
    for (size_t i = 0; i < p->n_sets; i++) json_array_append_new(sets, json_string(p->sets[i]));
    for (size_t i = 0; i < p->n_rules; i++) {
        const plan_rule *r = &p->rules[i];
        json_t *j = json_pack("{s:s}", r->re ? "regex" : "match", r->pattern);
        if (r->codec) json_object_set_new(j, "codec", json_string(r->codec));
        if (!isnan(r->bits)) json_object_set_new(j, "bits", json_real(r->bits));
        json_array_append_new(rules, j);
    }
    json_t *kv = p->kv_codec ? json_pack("{s:s,s:i,s:b,s:I}", "codec", p->kv_codec, "window", p->kv_window, "boundary",
                                         p->kv_boundary, "seed", (json_int_t)(p->kv_seed_set ? p->kv_seed : p->seed))
                             : json_null();
    json_t *r = json_pack("{s:s?,s:s,s:I,s:b,s:o,s:o,s:o,s:o,s:s}", "file", p->recipe_path, "weights",
                          p->specs[p->weights].spec, "seed", (json_int_t)p->seed, "quantize_embeddings",
                          p->quantize_embeddings, "keep", keep, "rules", rules, "kv", kv, "set", sets, "tensor_seed",
                          "xxh3_64(tensor name, seed=recipe seed)");
    if (r && !isnan(p->target_bpw)) // only an allocated conversion records its budget
        json_object_set_new(r, "target_bpw", json_pack("{s:f,s:s,s:i}", "bits_per_param", p->target_bpw, "calib_text",
                                                       p->calib_text ? p->calib_text : "model",
                                                       "calib_tokens", p->calib_tokens > 0 ? p->calib_tokens : KVQ_CALIB_TOKENS_DEFAULT));
    if (r && !isnan(p->target_bpw) && p->calib_from) // sensitivities taken from an earlier file
        json_object_set_new(json_object_get(r, "target_bpw"), "calib_from", json_string(p->calib_from));
    if (r && !isnan(p->target_bpw)) { // how the rates were chosen, and whose budget it was
        json_t *tb = json_object_get(r, "target_bpw");
        json_object_set_new(tb, "rates", json_string(p->budget_uniform ? "uniform" : "sensitivity"));
        json_object_set_new(tb, "default", json_boolean(p->budget_default));
        if (!p->budget_uniform) {
            json_object_set_new(tb, "block_floor", isinf(p->block_floor) ? json_string("none") : json_real(p->block_floor));
            json_object_set_new(tb, "block_floor_cap",
                                isinf(p->block_floor_cap) ? json_string("none") : json_real(p->block_floor_cap));
        }
        if (!p->budget_uniform && !p->calib_from)
            json_object_set_new(tb, "probe", json_string(p->calib_probe == KVQ_PROBE_FULL ? "full" : "layer"));
        if (p->ldlq_auto) json_object_set_new(tb, "ldlq", json_string("auto")); // LDLQ on the calibration text by default
        if (p->budget_uniform) { // nothing was calibrated
            json_object_set_new(tb, "calib_tokens", json_integer(0));
            json_object_set_new(tb, "calib_text", json_string("none"));
        }
    }
    return r;
}
