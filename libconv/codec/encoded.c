// The encoded-tensor container every codec fills (blobs, rate parts) and blob lookup: kept
// apart from the codec table (codec.c) so the codecs depend on it without depending on the
// table that lists them.
#include "libconv/codec/codec.h"
#include <math.h>
#include <string.h>

const kvq_blob_view *kvq_blob_find(const kvq_blob_view *v, int n, const char *role) {
    for (int i = 0; i < n; i++)
        if (strcmp(v[i].role, role) == 0) return &v[i];
    return NULL;
}

void kvq_encoded_free(kvq_encoded *e) {
    if (!e) return;
    for (int i = 0; i < e->n_blob; i++) free(e->blob[i].data);
    json_decref(e->params);
    memset(e, 0, sizeof *e);
}

int kvq_encoded_add_blob(kvq_encoded *e, const char *role, void *data, size_t size, int compressible) {
    if (e->n_blob >= KVQ_MAX_BLOBS) return -1;
    kvq_blob *b = &e->blob[e->n_blob];
    snprintf(b->role, sizeof b->role, "%s", role);
    b->data = data;
    b->size = size;
    b->compressible = compressible;
    return e->n_blob++;
}

void kvq_encoded_add_part(kvq_encoded *e, const char *name, double bits) {
    if (e->n_part >= KVQ_MAX_PARTS) return;
    snprintf(e->part[e->n_part].name, sizeof e->part[0].name, "%s", name);
    e->part[e->n_part++].bits = bits;
}

size_t kvq_encoded_bytes(const kvq_encoded *e) {
    size_t n = 0;
    for (int i = 0; i < e->n_blob; i++) n += e->blob[i].size;
    if (e->params) {
        char *s = json_dumps(e->params, JSON_COMPACT);
        if (s) { n += strlen(s); free(s); }
    }
    return n;
}

double kvq_encoded_bpw(const kvq_encoded *e, int64_t numel) {
    return numel > 0 ? 8.0 * (double)kvq_encoded_bytes(e) / (double)numel : NAN;
}
