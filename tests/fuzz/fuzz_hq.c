// Fuzz target: HyperQuant's decoders (libconv/codec/hyperquant/hyperquant_dec.c: Rice codes,
// bit stripping, norms, group offsets) on arbitrary params and bit streams (framed input,
// fuzz.h). The plain reference and the fast decoder must agree: both refuse, or both give the
// same bytes. Row-blocked params ("v": 2) go through kvq_hq_blocks_parse, the parser every tool
// uses, then both decoders block by block.
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "libconv/codec/hyperquant/hyperquant.h"

static const char *const roles[] = {"codes", "norms", "offsets"};

KVQ_FUZZ_TARGET(hq) {
    int64_t rows, cols;
    kvq_blob_view v[3];
    int nv;
    json_t *params = kvq_fuzz_codec_input(data, size, roles, 3, &rows, &cols, v, &nv);
    if (!params) return 0;
    kvq_hq_header h;
    kvq_err e1 = {0}, e2 = {0};
    const int blocked = kvq_hq_is_blocked(params);
    if (rows < 1 || cols < 1 || rows * cols > (1 << 16) ||
        (!blocked && kvq_hq_header_parse(params, rows, cols, &h, &e1))) {
        json_decref(params);
        return 0;
    }
    size_t n = (size_t)(rows * cols);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    if (a && b) {
        memset(a, 0, n * 4);
        memset(b, 0, n * 4);
        kvq_status s1 = blocked ? kvq_hq_blocks_decode(params, v, nv, rows, cols, a, -1, &e1)
                                : kvq_hq_decode_ref(&h, v, nv, a, &e1);
        kvq_status s2 = blocked ? kvq_hq_blocks_decode(params, v, nv, rows, cols, b, 1, &e2)
                                : kvq_hq_decode(&h, v, nv, b, 1, &e2);
        if ((s1 == KVQ_OK) != (s2 == KVQ_OK))
            fprintf(stderr, "ref: %d %s\nfast: %d %s\n", s1, e1.msg, s2, e2.msg);
        KVQ_FUZZ_CHECK((s1 == KVQ_OK) == (s2 == KVQ_OK));
        if (s1 == KVQ_OK) KVQ_FUZZ_CHECK(memcmp(a, b, n * 4) == 0);
    }
    free(a);
    free(b);
    json_decref(params);
    return 0;
}
