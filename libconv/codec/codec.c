// The codec traits table and the bookkeeping shared by every codec.
// New codecs: define `const kvq_codec_traits kvq_codec_<name>` and add it below.
#include "libconv/codec/codec.h"

#include <math.h>
#include <string.h>

extern const kvq_codec_traits kvq_codec_none;
extern const kvq_codec_traits kvq_codec_hyperquant;
extern const kvq_codec_traits kvq_codec_rtn;
extern const kvq_codec_traits kvq_codec_qet;
extern const kvq_codec_traits kvq_codec_pq;

static const kvq_codec_traits *const codec_table[] = {
    &kvq_codec_none,
    &kvq_codec_hyperquant,
    &kvq_codec_rtn,
    &kvq_codec_qet,
    &kvq_codec_pq,
};

int kvq_codec_count(void) { return (int)(sizeof codec_table / sizeof codec_table[0]); }

const kvq_codec_traits *kvq_codec_at(int i) {
    return i >= 0 && i < kvq_codec_count() ? codec_table[i] : NULL;
}

const kvq_codec_traits *kvq_codec_find(const char *name) {
    for (int i = 0; i < kvq_codec_count(); i++)
        if (strcmp(codec_table[i]->name, name) == 0) return codec_table[i];
    return NULL;
}

kvq_status kvq_codec_parse_spec(const char *spec, const kvq_codec_traits **codec, json_t **cfg,
                                kvq_err *err) {
    char name[64];
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n == 0 || n >= sizeof name)
        return kvq_err_set(err, KVQ_ERR_ARG, "codec spec '%s': missing or overlong codec name", spec);
    memcpy(name, spec, n);
    name[n] = 0;
    const kvq_codec_traits *c = kvq_codec_find(name);
    if (!c) {
        char known[256] = "";
        for (int i = 0; i < kvq_codec_count(); i++) {
            strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
            strncat(known, codec_table[i]->name, sizeof known - strlen(known) - 1);
        }
        return kvq_err_set(err, KVQ_ERR_ARG, "codec spec '%s': unknown codec '%s' (known: %s)", spec,
                           name, known);
    }
    kvq_status s = c->parse(colon ? colon + 1 : "", cfg, err);
    if (s != KVQ_OK) return s;
    *codec = c;
    return KVQ_OK;
}
