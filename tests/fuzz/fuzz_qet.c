// Fuzz target: the QET/PQ decoder (kvq_qet_decode, libconv/codec/qet/) on arbitrary params,
// indicator maps, index streams and codebooks (framed input, fuzz.h).
#include "tests/fuzz/fuzz.h"

#include "libconv/codec/qet/qet.h"

static const char *const roles[] = {"indicators", "idx.1", "idx.2", "cb.1", "cb.2"};

KVQ_FUZZ_TARGET(qet) {
    int64_t rows, cols;
    kvq_blob_view v[5];
    int nv;
    json_t *params = kvq_fuzz_codec_input(data, size, roles, 5, &rows, &cols, v, &nv);
    if (!params) return 0;
    if (rows >= 1 && cols >= 1 && rows * cols <= (1 << 16)) {
        float *out = malloc((size_t)(rows * cols) * sizeof *out);
        kvq_err err = {0};
        if (out && kvq_qet_decode(params, v, nv, rows, cols, out, &err) != KVQ_OK) KVQ_FUZZ_CHECK(err.msg[0]);
        free(out);
    }
    json_decref(params);
    return 0;
}
