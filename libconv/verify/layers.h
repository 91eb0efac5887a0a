// The per-layer view of a .kvq: layers × tensor roles (q_proj, k_proj, ..., down_proj and the
// norms), each cell a tensor's bits per weight and bytes, and, when per-tensor errors are
// attached (the verification record's "tensors", or a kvq-verify report), its SNR and relative
// error. kvq-inspect --layers prints it, --plot draws it; kvq-verify --report draws it too.
#ifndef KVQ_VERIFY_LAYERS_H
#define KVQ_VERIFY_LAYERS_H

#include <stdint.h>
#include <jansson.h>

#include "formats/error.h"

#define KVQ_LAYERS_MAX_ROLES 24

typedef struct {
    int present;        // the layer has a tensor of this role
    int lossless;       // its codec's claim
    double bpw;         // the manifest's bits per weight
    uint64_t bytes;
    int64_t numel;
    int has_error;      // snr_db/rel_err were attached
    double snr_db;      // INFINITY when exact; NAN when unknown
    double rel_err;
} kvq_layer_cell;

typedef struct {
    char name[160];
    kvq_layer_cell c;
} kvq_layer_outside;

typedef struct {
    int n_layers, n_roles;
    char roles[KVQ_LAYERS_MAX_ROLES][48]; // projections in the usual order, then the rest as first seen
    kvq_layer_cell *cells;                // (n_layers, n_roles)
    kvq_layer_outside *outside;           // tensors of no layer (embedding, final norm, lm_head)
    size_t n_outside;
    int n_errors;                         // cells and outside tensors with errors attached
} kvq_layer_table;

/** "model.layers.12.self_attn.q_proj.weight" -> 12, role "q_proj" (biases keep ".bias");
 *  -1 when the name is not a layer's. */
int kvq_layer_role(const char *name, char *role, size_t cap);

/** Builds the table from a manifest (tensors, architecture.n_layers; at most 4096 layers).
 *  The caller frees it with kvq_layers_free (also after an error). */
kvq_status kvq_layers_from_manifest(const json_t *manifest, kvq_layer_table *t, kvq_err *err);

/** Attaches one tensor's error; 0 when the name is in the table, -1 otherwise. */
int kvq_layers_set_error(kvq_layer_table *t, const char *name, double snr_db, double rel_err);

/** Attaches the errors of a verification record's "tensors" array (null snr_db of an exact
 *  tensor becomes INFINITY); @return how many were attached. */
size_t kvq_layers_add_record(kvq_layer_table *t, const json_t *record_tensors);

/** The cell of layer l, role k. */
static inline const kvq_layer_cell *kvq_layers_cell(const kvq_layer_table *t, int l, int k) {
    return &t->cells[(size_t)l * (size_t)t->n_roles + (size_t)k];
}

/** The layer's bits per weight as a whole (8 · its bytes / its weights) and its bytes. */
double kvq_layers_layer_bpw(const kvq_layer_table *t, int l, uint64_t *bytes);

void kvq_layers_free(kvq_layer_table *t);

#endif
