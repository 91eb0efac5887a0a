// The per-layer table of a .kvq (layers.h): tensors grouped by layer and role from their
// names, with per-tensor errors attached from a verification record or a kvq-verify report.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/kvqfile.h"
#include "libconv/verify/layers.h"

int kvq_layer_role(const char *name, char *role, size_t cap) {
    int l = -1, used = 0;
    if (!name || sscanf(name, "model.layers.%d.%n", &l, &used) != 1 || !used || l < 0) return -1;
    const char *r = name + used, *dot = strrchr(r, '.'), *end = dot ? dot : r + strlen(r);
    const char *base = r;
    for (const char *p = r; p < end; p++)
        if (*p == '.') base = p + 1; // the last component before ".weight"/".bias"
    const int n = (int)(end - base);
    if (dot && strcmp(dot, ".weight")) snprintf(role, cap, "%.*s%s", n, base, dot); // biases keep their suffix
    else snprintf(role, cap, "%.*s", n, base);
    return l;
}

static void fill(kvq_layer_cell *c, const json_t *r) {
    c->present = 1;
    c->lossless = json_is_true(json_object_get(json_object_get(r, "codec"), "lossless"));
    c->bpw = json_number_value(json_object_get(r, "bits_per_weight"));
    c->bytes = (uint64_t)json_integer_value(json_object_get(r, "bytes"));
    c->numel = (int64_t)kvq_file_tensor_numel(r);
    c->snr_db = c->rel_err = NAN;
}

kvq_status kvq_layers_from_manifest(const json_t *m, kvq_layer_table *t, kvq_err *err) {
    memset(t, 0, sizeof *t);
    const json_t *ts = json_object_get(m, "tensors");
    const json_int_t L = json_integer_value(json_object_get(json_object_get(m, "architecture"), "n_layers"));
    if (L < 0 || L > 4096) return kvq_err_set(err, KVQ_ERR_FORMAT, "layers: %lld layers (at most 4096)", (long long)L);
    static const char *pref[] = {"q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj",
                                 "gate_up_proj", "down_proj"};
    char seen[KVQ_LAYERS_MAX_ROLES][48];
    int ns = 0;
    size_t i;
    json_t *r;
    json_array_foreach(ts, i, r) { // roles first seen, then ordered: projections first
        char role[48];
        if (kvq_layer_role(json_string_value(json_object_get(r, "name")), role, sizeof role) < 0) continue;
        int k = 0;
        while (k < ns && strcmp(seen[k], role)) k++;
        if (k == ns && ns < KVQ_LAYERS_MAX_ROLES) snprintf(seen[ns++], sizeof seen[0], "%s", role);
    }
    for (size_t p = 0; p < sizeof pref / sizeof pref[0]; p++)
        for (int k = 0; k < ns; k++)
            if (!strcmp(seen[k], pref[p])) snprintf(t->roles[t->n_roles++], sizeof t->roles[0], "%s", seen[k]);
    for (int k = 0; k < ns; k++) {
        int dup = 0;
        for (int j = 0; j < t->n_roles; j++) dup |= !strcmp(t->roles[j], seen[k]);
        if (!dup) snprintf(t->roles[t->n_roles++], sizeof t->roles[0], "%s", seen[k]);
    }
    t->n_layers = (int)L;
    t->cells = calloc((size_t)(L ? L : 1) * (size_t)(t->n_roles ? t->n_roles : 1), sizeof *t->cells);
    t->outside = calloc(json_array_size(ts) + 1, sizeof *t->outside);
    if (!t->cells || !t->outside) return kvq_err_set(err, KVQ_ERR_NOMEM, "layers: out of memory");
    json_array_foreach(ts, i, r) {
        const char *name = json_string_value(json_object_get(r, "name"));
        char role[48];
        const int l = kvq_layer_role(name, role, sizeof role);
        int k = 0;
        while (l >= 0 && k < t->n_roles && strcmp(t->roles[k], role)) k++;
        if (l >= 0 && l < t->n_layers && k < t->n_roles) {
            fill(&t->cells[(size_t)l * (size_t)t->n_roles + (size_t)k], r);
            continue;
        }
        kvq_layer_outside *o = &t->outside[t->n_outside++]; // beyond n_layers or the role cap too
        snprintf(o->name, sizeof o->name, "%s", name ? name : "?");
        fill(&o->c, r);
    }
    return KVQ_OK;
}

static kvq_layer_cell *find(kvq_layer_table *t, const char *name) {
    char role[48];
    const int l = kvq_layer_role(name, role, sizeof role);
    if (l >= 0 && l < t->n_layers)
        for (int k = 0; k < t->n_roles; k++)
            if (!strcmp(t->roles[k], role)) {
                kvq_layer_cell *c = &t->cells[(size_t)l * (size_t)t->n_roles + (size_t)k];
                return c->present ? c : NULL;
            }
    for (size_t i = 0; i < t->n_outside; i++)
        if (!strcmp(t->outside[i].name, name)) return &t->outside[i].c;
    return NULL;
}

int kvq_layers_set_error(kvq_layer_table *t, const char *name, double snr_db, double rel_err) {
    kvq_layer_cell *c = name ? find(t, name) : NULL;
    if (!c) return -1;
    t->n_errors += !c->has_error;
    c->has_error = 1;
    c->snr_db = snr_db;
    c->rel_err = rel_err;
    return 0;
}

size_t kvq_layers_add_record(kvq_layer_table *t, const json_t *rt) {
    size_t i, n = 0;
    json_t *e;
    json_array_foreach(rt, i, e) {
        const json_t *snr = json_object_get(e, "snr_db"), *rel = json_object_get(e, "rel_err");
        const int exact = json_is_true(json_object_get(e, "exact"));
        double s = json_is_number(snr) ? json_number_value(snr) : exact ? INFINITY : NAN;
        double re = json_is_number(rel) ? json_number_value(rel) : exact ? 0.0 : NAN;
        n += kvq_layers_set_error(t, json_string_value(json_object_get(e, "name")), s, re) == 0;
    }
    return n;
}

double kvq_layers_layer_bpw(const kvq_layer_table *t, int l, uint64_t *bytes) {
    uint64_t b = 0;
    int64_t n = 0;
    for (int k = 0; k < t->n_roles; k++) {
        const kvq_layer_cell *c = kvq_layers_cell(t, l, k);
        if (!c->present) continue;
        b += c->bytes;
        n += c->numel;
    }
    if (bytes) *bytes = b;
    return n > 0 ? 8.0 * (double)b / (double)n : NAN;
}

void kvq_layers_free(kvq_layer_table *t) {
    if (!t) return;
    free(t->cells);
    free(t->outside);
    memset(t, 0, sizeof *t);
}
