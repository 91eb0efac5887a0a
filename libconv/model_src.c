// kvq_msrc forwards to kvq_weights, which opens source checkpoints (HF dir, llama2.c
// .bin) and .kvq files alike, decoding codec payloads to fp32.
#include "libconv/model_src.h"

#include <stdlib.h>
#include <string.h>

#include "libconv/weights.h"

struct kvq_msrc {
    kvq_weights *w;
    char *path;
};

kvq_status kvq_msrc_open(const char *path, kvq_msrc **out, kvq_err *err) {
    *out = NULL;
    kvq_msrc *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) { free(s); return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path); }
    kvq_status r = kvq_weights_open(path, &s->w, err);
    if (r) { kvq_msrc_close(s); return r; }
    *out = s;
    return KVQ_OK;
}

void kvq_msrc_close(kvq_msrc *s) {
    if (!s) return;
    kvq_weights_close(s->w);
    free(s->path);
    free(s);
}

const kvq_arch *kvq_msrc_arch(const kvq_msrc *s) { return kvq_weights_arch(s->w); }
const char *kvq_msrc_path(const kvq_msrc *s) { return s->path; }
const char *kvq_msrc_tokenizer_path(kvq_msrc *s) { return kvq_weights_tokenizer_path(s->w); }
int kvq_msrc_has(kvq_msrc *s, const char *name) { return kvq_weights_has(s->w, name, NULL, NULL); }

kvq_status kvq_msrc_get_f32(kvq_msrc *s, const char *name, float **out, int64_t *numel, kvq_err *err) {
    *out = NULL;
    if (!kvq_weights_has(s->w, name, NULL, NULL))
        return kvq_err_set(err, KVQ_ERR_MISSING, "%s: tensor '%s' not found", s->path, name);
    return kvq_weights_get_f32(s->w, name, out, numel, err);
}
