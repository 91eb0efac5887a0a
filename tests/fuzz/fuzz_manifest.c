// Fuzz target: the manifest schema (kvq_file_check_manifest, formats/kvqschema.c) on arbitrary
// JSON, reaching what a zip-level mutation rarely does; an accepted manifest then goes through
// every reader of its meaning: bits, per-tensor bytes, the architecture, the verification
// record's state and binding, the KV section.
#include "tests/fuzz/fuzz.h"

#include <math.h>
#include <string.h>

#include "formats/arch.h"
#include "formats/kvqfile.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/verify/verify.h"

KVQ_FUZZ_TARGET(manifest) {
    json_error_t je;
    json_t *m = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!m) return 0;
    kvq_err err = {0};
    if (kvq_file_check_manifest(m, "manifest.json", &err) != KVQ_OK) {
        KVQ_FUZZ_CHECK(err.msg[0]);
        json_decref(m);
        return 0;
    }
    kvq_bits b;
    kvq_file_bits(m, &b);
    KVQ_FUZZ_CHECK(b.lossy_params <= b.params);
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(m, "tensors"), i, t) (void)kvq_file_tensor_bytes(m, t);
    kvq_arch a;
    KVQ_FUZZ_CHECK(kvq_arch_from_manifest(json_object_get(m, "architecture"), &a, &err) == KVQ_OK);
    char msg[KVQ_ERR_MSG_MAX], hex[65];
    (void)kvq_verify_record_check(m, msg, sizeof msg);
    json_t *rec = json_object_get(m, "verification");
    if (rec) (void)kvq_verify_record_binding(m, rec, hex, &err);
    json_t *kv = json_object_get(m, "kv");
    if (kv) { // the cache the section declares, over tables of ones (the blob lives in the file):
              // valid signs and codebooks, so the loader's checks pass for most codecs and its later
              // states are reached (quaternions of ones are not unit: qturbo/hqmq stop at their check)
        size_t nf = 1u << 16;
        float *blob = malloc(nf * sizeof *blob);
        for (size_t i = 0; blob && i < nf; i++) blob[i] = 1.0f;
        kvq_kvcache *c = NULL;
        if (blob && kvq_kvcache_codec_load(kv, blob, nf, 64, 0, &c, &err) == KVQ_OK) c->ops->free(c);
        free(blob);
    }
    json_decref(m);
    return 0;
}
