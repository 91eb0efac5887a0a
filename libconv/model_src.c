// kvq_msrc over a source checkpoint (kvq_ckpt). When libconv/weights.c lands this
// becomes a forwarder to kvq_weights_*, which also opens .kvq files.
#include "libconv/model_src.h"

#include <stdlib.h>
#include <string.h>

#include "formats/checkpoint.h"
#include "formats/dtype.h"

struct kvq_msrc {
    kvq_ckpt *ck;
    char *path;
};

kvq_status kvq_msrc_open(const char *path, kvq_msrc **out, kvq_err *err) {
    *out = NULL;
    kvq_msrc *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) { free(s); return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path); }
    kvq_status r = kvq_ckpt_open(path, &s->ck, err);
    if (r) { kvq_msrc_close(s); return r; }
    *out = s;
    return KVQ_OK;
}

void kvq_msrc_close(kvq_msrc *s) {
    if (!s) return;
    kvq_ckpt_close(s->ck);
    free(s->path);
    free(s);
}

const kvq_arch *kvq_msrc_arch(const kvq_msrc *s) { return kvq_ckpt_arch(s->ck); }
const char *kvq_msrc_path(const kvq_msrc *s) { return s->path; }
const char *kvq_msrc_tokenizer_path(kvq_msrc *s) { return kvq_ckpt_tokenizer_path(s->ck); }
int kvq_msrc_has(kvq_msrc *s, const char *name) { return kvq_ckpt_find(s->ck, name) != NULL; }

kvq_status kvq_msrc_get_f32(kvq_msrc *s, const char *name, float **out, int64_t *numel, kvq_err *err) {
    *out = NULL;
    const kvq_tensor *t = kvq_ckpt_find(s->ck, name);
    if (!t) return kvq_err_set(err, KVQ_ERR_MISSING, "%s: tensor '%s' not found", s->path, name);
    int64_t n = kvq_tensor_numel(t);
    if (n <= 0 || (size_t)n > SIZE_MAX / sizeof(float))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' has %lld elements", s->path, name, (long long)n);
    if (!(*out = malloc(sizeof(float) * (size_t)n)))
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for tensor '%s'", s->path, name);
    kvq_dtype_to_f32(t->dtype, t->data, (size_t)n, *out);
    *numel = n;
    return KVQ_OK;
}
