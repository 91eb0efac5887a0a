// Bits per parameter of a .kvq from its manifest (kvqfile.h): the one definition kvq-convert,
// kvq-inspect and kvq-verify report (docs/FORMAT.md "Bits per parameter").
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/kvqfile.h"

uint64_t kvq_file_tensor_numel(const json_t *t) {
    const json_t *sh = json_object_get(t, "shape"), *d;
    size_t i;
    uint64_t n = 1;
    json_array_foreach(sh, i, d) n *= (uint64_t)json_integer_value(d);
    return n;
}

void kvq_file_bits(const json_t *manifest, kvq_bits *out) {
    memset(out, 0, sizeof *out);
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(manifest, "tensors"), i, t) {
        const uint64_t n = kvq_file_tensor_numel(t), b = (uint64_t)json_integer_value(json_object_get(t, "bytes"));
        out->params += n;
        out->bytes += b;
        if (!json_is_true(json_object_get(json_object_get(t, "codec"), "lossless"))) {
            out->lossy_params += n;
            out->lossy_bytes += b;
        }
    }
    out->bits_per_param = out->params ? 8.0 * (double)out->bytes / (double)out->params : NAN;
    out->lossy_bits_per_weight = out->lossy_params ? 8.0 * (double)out->lossy_bytes / (double)out->lossy_params : NAN;
}

uint64_t kvq_file_tensor_bytes(const json_t *manifest, const json_t *tensor) {
    const json_t *tab = json_object_get(manifest, "entries");
    uint64_t bytes = 0;
    const char *role;
    json_t *ev;
    json_object_foreach((json_t *)json_object_get(tensor, "entries"), role, ev)
        bytes += (uint64_t)json_integer_value(json_object_get(json_object_get(tab, json_string_value(ev)), "stored_size"));
    const json_t *params = json_object_get(json_object_get(tensor, "codec"), "params");
    if (params && !json_is_null(params)) { // kvq-convert counts what it writes: compact JSON
        char *pj = json_dumps(params, JSON_COMPACT);
        bytes += pj ? strlen(pj) : 0;
        free(pj);
    }
    return bytes;
}
