// Bits per parameter of a .kvq from its manifest (kvqfile.h): the one definition kvq-convert,
// kvq-inspect and kvq-verify report (docs/FORMAT.md "Bits per parameter").
#include <math.h>
#include <string.h>

#include "formats/kvqfile.h"

static uint64_t numel(const json_t *t) {
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
        const uint64_t n = numel(t), b = (uint64_t)json_integer_value(json_object_get(t, "bytes"));
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
