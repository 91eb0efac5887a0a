// The conversion plan: a YAML recipe (libyaml) plus CLI overrides, turned into a
// codec choice per tensor (precedence in libconv/convert.h), with every codec spec
// parsed once up front. Recipe format: recipes/default.yaml and docs/FORMAT.md.
#include "libconv/convert/convert.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <string.h>
#include <xxhash.h>
#include <yaml.h>

typedef struct {
    char *spec;
    const kvq_codec_traits *codec;
    json_t *cfg;
} plan_spec;

typedef struct {
    char *match;
    int spec;           // index into specs
} plan_rule;

struct kvq_plan {
    char *recipe_path;
    uint64_t seed;
    int quantize_embeddings;
    int weights;        // index into specs
    int none;           // index of "none" in specs
    char **keep;
    size_t n_keep;
    plan_rule *rules;
    size_t n_rules;
    plan_spec *specs;
    size_t n_specs;
};

void kvq_plan_free(kvq_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_specs; i++) { free(p->specs[i].spec); json_decref(p->specs[i].cfg); }
    for (size_t i = 0; i < p->n_rules; i++) free(p->rules[i].match);
    for (size_t i = 0; i < p->n_keep; i++) free(p->keep[i]);
    free(p->specs);
    free(p->rules);
    free(p->keep);
    free(p->recipe_path);
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

// ---- recipe file -----------------------------------------------------------

typedef struct {
    const char *path;
    yaml_document_t *doc;
    kvq_err *err;
} yctx;

static const char *scalar(yctx *y, yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static kvq_status ybad(yctx *y, yaml_node_t *n, const char *what) {
    return kvq_err_set(y->err, KVQ_ERR_FORMAT, "%s: line %lu: %s", y->path,
                       n ? (unsigned long)n->start_mark.line + 1 : 0ul, what);
}

// A key given twice in a mapping (the YAML spec forbids it; libyaml keeps both and the second
// would silently win or lose) is an error naming its line.
static kvq_status no_duplicate_keys(yctx *y, yaml_node_t *map) {
    for (yaml_node_pair_t *a = map->data.mapping.pairs.start; a < map->data.mapping.pairs.top; a++)
        for (yaml_node_pair_t *b = a + 1; b < map->data.mapping.pairs.top; b++) {
            yaml_node_t *ka = yaml_document_get_node(y->doc, a->key), *kb = yaml_document_get_node(y->doc, b->key);
            const char *sa = scalar(y, ka), *sb = scalar(y, kb);
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

// Recipe keys: seed, weights, quantize_embeddings, keep (list), rules (list of
// {match, codec}). Values given on the command line win over the file's.
static kvq_status read_recipe(kvq_plan *p, const kvq_plan_opts *o, const char **weights,
                              int *qe, kvq_err *err) {
    FILE *fp = fopen(o->recipe_path, "rb");
    if (!fp) return kvq_err_set(err, KVQ_ERR_IO, "%s: cannot open recipe: %s", o->recipe_path, strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, fp);
    if (!yaml_parser_load(&parser, &doc)) {
        kvq_status s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: line %lu: YAML error: %s", o->recipe_path,
                                   (unsigned long)parser.problem_mark.line + 1,
                                   parser.problem ? parser.problem : "?");
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
            kvq_status s = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: line %lu: %s", o->recipe_path, line,
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
    yctx y = {o->recipe_path, &doc, err};
    kvq_status s = KVQ_OK;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) { s = ybad(&y, root, "recipe must be a mapping"); goto out; }
    if ((s = no_duplicate_keys(&y, root))) goto out;
    for (yaml_node_pair_t *kv = root->data.mapping.pairs.start; kv < root->data.mapping.pairs.top && s == KVQ_OK; kv++) {
        yaml_node_t *kn = yaml_document_get_node(&doc, kv->key), *vn = yaml_document_get_node(&doc, kv->value);
        const char *k = scalar(&y, kn), *v = scalar(&y, vn);
        char *end;
        if (!k) s = ybad(&y, kn, "keys must be strings");
        else if (!strcmp(k, "seed")) {
            if (!v || !*v || (p->seed = strtoull(v, &end, 0), *end) || p->seed > INT64_MAX) s = ybad(&y, vn, "seed must be an integer in [0, 2^63)");
        } else if (!strcmp(k, "weights")) {
            if (!v) s = ybad(&y, vn, "weights must be a codec spec string");
            else if (!*weights) *weights = v;
        } else if (!strcmp(k, "quantize_embeddings")) {
            int b;
            if (parse_bool(v, &b)) s = ybad(&y, vn, "quantize_embeddings must be true or false");
            else if (*qe < 0) *qe = b;
        } else if (!strcmp(k, "keep")) {
            if (vn->type != YAML_SEQUENCE_NODE) { s = ybad(&y, vn, "keep must be a list of patterns"); break; }
            for (yaml_node_item_t *it = vn->data.sequence.items.start; it < vn->data.sequence.items.top && s == KVQ_OK; it++) {
                const char *pat = scalar(&y, yaml_document_get_node(&doc, *it));
                if (!pat) s = ybad(&y, vn, "keep entries must be strings");
                else if (add_str(&p->keep, &p->n_keep, pat))
                    s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for keep patterns", o->recipe_path);
            }
        } else if (!strcmp(k, "rules")) {
            if (vn->type != YAML_SEQUENCE_NODE) { s = ybad(&y, vn, "rules must be a list of {match, codec}"); break; }
            for (yaml_node_item_t *it = vn->data.sequence.items.start; it < vn->data.sequence.items.top && s == KVQ_OK; it++) {
                yaml_node_t *rn = yaml_document_get_node(&doc, *it);
                const char *match = NULL, *codec = NULL;
                if (rn->type != YAML_MAPPING_NODE) { s = ybad(&y, rn, "each rule must be a mapping {match, codec}"); break; }
                if ((s = no_duplicate_keys(&y, rn))) break;
                for (yaml_node_pair_t *r = rn->data.mapping.pairs.start; r < rn->data.mapping.pairs.top; r++) {
                    const char *rk = scalar(&y, yaml_document_get_node(&doc, r->key));
                    const char *rv = scalar(&y, yaml_document_get_node(&doc, r->value));
                    if (rk && !strcmp(rk, "match")) match = rv;
                    else if (rk && !strcmp(rk, "codec")) codec = rv;
                    else { s = ybad(&y, rn, "rule keys are 'match' and 'codec'"); break; }
                }
                if (s != KVQ_OK) break;
                if (!match || !codec) { s = ybad(&y, rn, "a rule needs both 'match' and 'codec' strings"); break; }
                plan_rule *rules = realloc(p->rules, (p->n_rules + 1) * sizeof *rules);
                if (!rules) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for rules", o->recipe_path); break; }
                p->rules = rules;
                char where[600];
                snprintf(where, sizeof where, "%s: line %lu", o->recipe_path, (unsigned long)rn->start_mark.line + 1);
                int si = intern_spec(p, codec, where, err);
                if (si < 0) { s = err ? err->code : KVQ_ERR_ARG; break; }
                if (!(rules[p->n_rules].match = strdup(match))) {
                    s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for rules", o->recipe_path);
                    break;
                }
                rules[p->n_rules++].spec = si;
            }
        } else {
            char msg[300];
            snprintf(msg, sizeof msg, "unknown key '%s' (known: seed, weights, quantize_embeddings, keep, rules)", k);
            s = ybad(&y, kn, msg);
        }
    }
    // weights points into the document: intern it before the document goes.
    if (s == KVQ_OK && *weights) {
        int si = intern_spec(p, *weights, o->recipe_path, err);
        if (si < 0) s = err ? err->code : KVQ_ERR_ARG;
        else p->weights = si, *weights = NULL;
    }
out:
    yaml_document_delete(&doc);
    return s;
}

kvq_status kvq_plan_build(const kvq_plan_opts *o, kvq_plan **out, kvq_err *err) {
    *out = NULL;
    kvq_plan *p = calloc(1, sizeof *p);
    if (!p) return kvq_err_set(err, KVQ_ERR_NOMEM, "plan: out of memory");
    p->weights = -1;
    const char *weights = o->weights;
    int qe = o->quantize_embeddings;
    kvq_status s = KVQ_OK;
    if (o->weights) {
        int si = intern_spec(p, o->weights, "--weights", err);
        if (si < 0) { kvq_plan_free(p); return err ? err->code : KVQ_ERR_ARG; }
        p->weights = si;
    }
    if (o->recipe_path) {
        if (!(p->recipe_path = strdup(o->recipe_path))) s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", o->recipe_path);
        else s = read_recipe(p, o, &weights, &qe, err);
    }
    if (s == KVQ_OK && (p->none = intern_spec(p, "none", "built-in", err)) < 0) s = err ? err->code : KVQ_ERR_ARG;
    if (s == KVQ_OK && p->weights < 0) p->weights = p->none;
    if (s == KVQ_OK && o->seed_set) {
        if (o->seed > INT64_MAX) s = kvq_err_set(err, KVQ_ERR_ARG, "--seed %" PRIu64 ": must be below 2^63", o->seed);
        p->seed = o->seed;
    }
    for (size_t i = 0; s == KVQ_OK && o->keep && o->keep[i]; i++)
        if (add_str(&p->keep, &p->n_keep, o->keep[i]))
            s = kvq_err_set(err, KVQ_ERR_NOMEM, "--keep '%s': out of memory", o->keep[i]);
    p->quantize_embeddings = qe > 0;
    if (s != KVQ_OK) { kvq_plan_free(p); return s; }
    *out = p;
    return KVQ_OK;
}

static int is_embedding(const char *name) {
    size_t n = strlen(name);
    const char *suf = "embed_tokens.weight";
    return strcmp(name, "lm_head.weight") == 0 ||
           (n >= strlen(suf) && strcmp(name + n - strlen(suf), suf) == 0);
}

kvq_status kvq_plan_choose(const kvq_plan *p, const kvq_tensor *t, const kvq_codec_traits **codec,
                           const json_t **cfg, const char **spec, kvq_err *err) {
    int si = -1;
    for (size_t i = 0; i < p->n_keep && si < 0; i++)
        if (fnmatch(p->keep[i], t->name, 0) == 0) si = p->none;
    for (size_t i = 0; i < p->n_rules && si < 0; i++)
        if (fnmatch(p->rules[i].match, t->name, 0) == 0) si = p->rules[i].spec;
    if (si < 0) si = t->ndim >= 2 && (!is_embedding(t->name) || p->quantize_embeddings) ? p->weights : p->none;
    *codec = p->specs[si].codec;
    *cfg = p->specs[si].cfg;
    *spec = p->specs[si].spec;
    return KVQ_OK;
}

uint64_t kvq_plan_seed(const kvq_plan *p) { return p->seed; }

uint64_t kvq_plan_tensor_seed(const kvq_plan *p, const char *name) {
    return XXH3_64bits_withSeed(name, strlen(name), p->seed);
}

json_t *kvq_plan_to_json(const kvq_plan *p) {
    json_t *keep = json_array(), *rules = json_array();
    for (size_t i = 0; i < p->n_keep; i++) json_array_append_new(keep, json_string(p->keep[i]));
    for (size_t i = 0; i < p->n_rules; i++)
        json_array_append_new(rules, json_pack("{s:s,s:s}", "match", p->rules[i].match, "codec",
                                               p->specs[p->rules[i].spec].spec));
    return json_pack("{s:s?,s:s,s:I,s:b,s:o,s:o,s:s}", "file", p->recipe_path, "weights",
                     p->specs[p->weights].spec, "seed", (json_int_t)p->seed, "quantize_embeddings",
                     p->quantize_embeddings, "keep", keep, "rules", rules, "tensor_seed",
                     "xxh3_64(tensor name, seed=recipe seed)");
}
