// Fuzz target: the .kvq reader (formats/kvqfile.c + zipcheck.c + kvqschema.c) on arbitrary file
// bytes: zip structure, manifest, entry table, zstd members; then, on an accepted file, the
// tools' shared meaning check (kvq_weights_check_file: codec sizes, KV tables, the stored
// tokenizer), every entry, the digest check, bits, the verification record's state and the KV
// section's cache.
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "formats/kvqfile.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/runtime/weights.h"
#include "libconv/verify/verify.h"

KVQ_FUZZ_TARGET(kvqfile) {
    char path[512];
    if (!kvq_fuzz_file("x.kvq", data, size, path, sizeof path)) return 0;
    kvq_file *f = NULL;
    kvq_err err = {0};
    if (kvq_file_open(path, &f, &err) != KVQ_OK) {
        KVQ_FUZZ_CHECK(err.msg[0]);
        return 0;
    }
    if (kvq_weights_check_file(f, &err) != KVQ_OK) KVQ_FUZZ_CHECK(err.msg[0]);
    const json_t *m = kvq_file_manifest(f);
    json_t *entries = json_object_get(m, "entries");
    const char *name;
    json_t *v;
    json_object_foreach(entries, name, v) {
        const void *p;
        size_t n;
        if (kvq_file_entry(f, name, &p, &n, &err) == KVQ_OK) {
            volatile uint8_t sink = n ? ((const uint8_t *)p)[n - 1] : 0;
            (void)sink;
        }
        kvq_file_release(f, name);
    }
    (void)kvq_file_verify(f, &err);
    kvq_bits b;
    kvq_file_bits(m, &b);
    char msg[KVQ_ERR_MSG_MAX];
    (void)kvq_verify_record_check(m, msg, sizeof msg);
    kvq_kvcache *c = NULL;
    if (kvq_kv_open_from_file(f, 64, 0, &c, &err) == KVQ_OK && c) c->ops->free(c);
    kvq_file_close(f);
    return 0;
}
