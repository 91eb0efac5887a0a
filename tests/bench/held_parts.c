// Where the bytes of the packed execution layouts go (issue 19's ≤ 1.3× cap): for every tensor
// of a .kvq that loads as hqx (HyperQuant, RTN) or pqx/qetx (PQ, QET), the held bytes split by
// component (kvq_hqx_bytes / kvq_pqx_bytes, whose parts these are) against its stored bytes
// split by entry (zstd frames as stored, + the params JSON), summed per tensor kind and overall.
// hqx tensors are counted as the CPU runtime holds them (kvq_hqx_compact), and as packed.
// usage: build/bench/held_parts FILE.kvq [-v]   (-v: one line per tensor too)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/kvqfile.h"
#include "kernels/cpu/hqx.h"
#include "kernels/cpu/pq.h"
#include "libconv/runtime/weights.h"

enum { NPART = 12, NKIND = 16 };
static const char *part_name[NPART] = {
    "hqx nibbles (q)", "hqx bit planes (hb)", "hqx E8 coset bytes (cb)", "hqx tile scale codes / floats",
    "hqx scale table (lut)", "hqx RTN zero points", "hqx escape row index (esc_row)", "hqx escapes (esc)",
    "pq indices", "pq codebooks", "pq CQO (min, step) / qet switch fields", "pq row padding (rows_p > rows)"};

typedef struct {
    char name[48];
    double held[NPART], stored, stored_raw, n_t, weights;
} kind;

static kind kinds[NKIND + 1];
static int n_kinds;
static struct { char role[24]; double stored, raw; } roles[NKIND];
static double packed_form, compact_form; // hqx escape index + scale table, packer's form and compact
static int n_roles;

static kind *kind_of(const char *t) {
    const char *p = strrchr(t, '.'), *q = p;
    char k[48];
    if (p && !strcmp(p, ".weight")) { // the component before ".weight": q_proj, embed_tokens, ...
        for (q = p - 1; q > t && q[-1] != '.'; q--) {}
        snprintf(k, sizeof k, "%.*s", (int)(p - q), q);
    } else snprintf(k, sizeof k, "%s", t);
    for (int i = 0; i < n_kinds; i++)
        if (!strcmp(kinds[i].name, k)) return &kinds[i];
    kind *o = &kinds[n_kinds < NKIND ? n_kinds++ : NKIND];
    if (!o->name[0]) snprintf(o->name, sizeof o->name, "%s", n_kinds <= NKIND ? k : "(other)");
    return o;
}

static void hqx_parts(const kvq_hqx *w, double *h) {
    const double n = (double)(w->rows * w->cols_p), tiles = n / w->tile;
    h[0] += w->vbits == 8 ? n : n / 2;
    h[1] += n / 8 * kvq_hqx_planes(w->vbits);
    h[2] += w->cb ? n / 64 : 0;
    h[3] += w->scode ? tiles : 4 * tiles;
    h[4] += w->scode ? 4.0 * w->n_lut : 0;
    h[5] += w->zero ? 4 * tiles : 0;
    h[6] += kvq_hqx_esc_row_bytes(w);
    h[7] += 4.0 * kvq_hqx_esc_count(w);
}

static void pqx_parts(const kvq_pqx *w, double *h) {
    for (int s = 0; s < w->stages; s++) {
        if (w->levels) {
            h[8] += (double)(w->rows * w->m) * w->qbits[s] / 8;
            h[9] += (double)w->cb_size[s];
            continue;
        }
        const double ib = (double)kvq_pqx_idx_bytes(w, s), pad = ib * (double)(w->rows_p - w->rows) / (double)w->rows_p;
        h[8] += ib - pad;
        h[11] += pad;
        h[9] += kvq_pqx_cb_bytes(w, s);
        h[10] += w->cb_ms[s] ? 8.0 * (double)w->m : 0;
    }
    if (w->qetg) h[10] += (double)(((size_t)w->rows * (size_t)w->levels * (size_t)(w->cols / 2) + 7) / 8); // indicator bits as stored
    else if (w->levels) h[10] += (double)(w->rows * w->groups) * KVQ_QETX_SW_BYTES;
}

// Stored bytes of a tensor from the manifest's entry table, and the same before zstd.
static void stored_of(const json_t *man, const char *name, double *st, double *raw) {
    const json_t *ts = json_object_get(man, "tensors"), *tab = json_object_get(man, "entries"), *rec = NULL;
    size_t i;
    json_t *v;
    json_array_foreach(ts, i, v) if (!strcmp(json_string_value(json_object_get(v, "name")), name)) rec = v;
    *st = rec ? (double)kvq_file_tensor_bytes(man, rec) : 0;
    *raw = 0;
    const char *role;
    json_t *en;
    json_object_foreach(json_object_get(rec, "entries"), role, en) {
        const json_t *e = json_object_get(tab, json_string_value(en));
        *raw += (double)json_integer_value(json_object_get(e, "size"));
        int r = 0;
        while (r < n_roles && strcmp(roles[r].role, role)) r++;
        if (r == n_roles && n_roles < NKIND) snprintf(roles[n_roles++].role, sizeof roles[r].role, "%s", role);
        if (r < n_roles) {
            roles[r].stored += (double)json_integer_value(json_object_get(e, "stored_size"));
            roles[r].raw += (double)json_integer_value(json_object_get(e, "size"));
        }
    }
    char *pj = json_dumps(json_object_get(json_object_get(rec, "codec"), "params"), JSON_COMPACT);
    *raw += pj ? (double)strlen(pj) : 0;
    free(pj);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) { fprintf(stderr, "usage: held_parts FILE.kvq [-v]\n"); return 2; }
    const int verbose = argc == 3 && !strcmp(argv[2], "-v");
    kvq_weights *w;
    kvq_err e = {0};
    if (kvq_weights_open(argv[1], &w, &e)) { fprintf(stderr, "held_parts: %s\n", e.msg); return 1; }
    const json_t *man = kvq_weights_manifest(w);
    for (size_t i = 0; i < kvq_weights_count(w); i++) {
        const char *name = kvq_weights_name(w, i);
        double h[NPART] = {0}, st, raw;
        int64_t rows, cols;
        kvq_hqx x;
        kvq_pqx p;
        kvq_status s = kvq_weights_get_hqx(w, name, &x, &e);
        if (s == KVQ_OK) {
            double hp[NPART] = {0}; // as packed (the CUDA upload's form): its escape index and table
            hqx_parts(&x, hp);
            packed_form += hp[4] + hp[6];
            if (kvq_hqx_compact(&x)) { fprintf(stderr, "held_parts: out of memory\n"); return 1; }
            hqx_parts(&x, h);
            compact_form += h[4] + h[6];
            rows = x.rows, cols = x.cols;
            if (verbose) printf("%s: hqx vbits %d, %lld escapes, %d table entries used, held %zu\n", name, x.vbits, (long long)kvq_hqx_esc_count(&x), x.n_lut, kvq_hqx_bytes(&x));
            kvq_hqx_free(&x);
        } else if (s == KVQ_ERR_UNSUPPORTED && (s = kvq_weights_get_pqx(w, name, &p, &e)) == KVQ_OK) {
            pqx_parts(&p, h);
            rows = p.rows, cols = p.cols;
            if (verbose) printf("%s: pqx k %lld/%lld, index bits %d/%d, held %zu\n", name, (long long)p.k[0], (long long)p.k[1],
                                kvq_pqx_idx_bits(&p, 0), p.stages > 1 ? kvq_pqx_idx_bits(&p, 1) : 0, kvq_pqx_bytes(&p));
            kvq_pqx_free(&p);
        } else if (s == KVQ_ERR_UNSUPPORTED) continue;
        else { fprintf(stderr, "held_parts: %s\n", e.msg); return 1; }
        stored_of(man, name, &st, &raw);
        kind *k = kind_of(name);
        for (int c = 0; c < NPART; c++) k->held[c] += h[c], kinds[NKIND].held[c] += h[c];
        k->stored += st, k->stored_raw += raw, k->n_t++, k->weights += (double)(rows * cols);
        kinds[NKIND].stored += st, kinds[NKIND].stored_raw += raw, kinds[NKIND].n_t++;
        kinds[NKIND].weights += (double)(rows * cols);
    }
    snprintf(kinds[NKIND].name, sizeof kinds[NKIND].name, "all");
    printf("%s\n\n| kind | tensors | stored (zstd) | before zstd | held | held/stored | bits/w stored | bits/w held |\n"
           "|---|---|---|---|---|---|---|---|\n", argv[1]);
    for (int i = 0; i <= NKIND; i++) {
        const kind *k = &kinds[i];
        if (!k->n_t) continue;
        double h = 0;
        for (int c = 0; c < NPART; c++) h += k->held[c];
        printf("| %s | %.0f | %.0f | %.0f | %.0f | %.4f | %.3f | %.3f |\n", k->name, k->n_t, k->stored, k->stored_raw, h,
               h / k->stored, 8 * k->stored / k->weights, 8 * h / k->weights);
    }
    printf("\nHeld components (all tensors above), against the stored bytes:\n\n| component | bytes | bits/w | "
           "fraction of stored |\n|---|---|---|---|\n");
    const kind *a = &kinds[NKIND];
    for (int c = 0; c < NPART; c++)
        if (a->held[c] > 0)
            printf("| %s | %.0f | %.4f | %.4f |\n", part_name[c], a->held[c], 8 * a->held[c] / a->weights, a->held[c] / a->stored);
    if (packed_form > 0)
        printf("\nhqx tensors are counted in the compact form the CPU runtime holds (kvq_hqx_compact); as packed\n"
               "(the form a CUDA upload reads: esc_row of rows + 1 words, 256-entry tables) their escape index and\n"
               "tables take %.0f bytes instead of %.0f (held/stored %.4f instead).\n", packed_form, compact_form,
               0.0 + (packed_form - compact_form) / a->stored + (a->held[0] + a->held[1] + a->held[2] + a->held[3] + a->held[4] +
                      a->held[5] + a->held[6] + a->held[7] + a->held[8] + a->held[9] + a->held[10] + a->held[11]) / a->stored);
    printf("\nStored, per entry role (all tensors above; the rest of the stored bytes is the params JSON):\n\n"
           "| role | stored (zstd) | before zstd | fraction of stored |\n|---|---|---|---|\n");
    for (int r = 0; r < n_roles; r++)
        printf("| %s | %.0f | %.0f | %.4f |\n", roles[r].role, roles[r].stored, roles[r].raw, roles[r].stored / a->stored);
    for (int i = 0; i < n_kinds; i++) {
        printf("\n%s, per component (fraction of its stored bytes):", kinds[i].name);
        for (int c = 0; c < NPART; c++)
            if (kinds[i].held[c] > 0) printf(" %s %.4f;", part_name[c], kinds[i].held[c] / kinds[i].stored);
    }
    printf("\n");
    kvq_weights_close(w);
    return 0;
}
