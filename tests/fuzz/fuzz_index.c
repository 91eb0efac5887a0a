// Fuzz target: the sharded-checkpoint index (model.safetensors.index.json, formats/checkpoint.c)
// on arbitrary bytes, beside the two valid shards and config.json of
// tests/fixtures/st/sharded_ok (copied once into a private directory; run from the repository
// root). Accepted tensors must resolve by name.
#include "tests/fuzz/fuzz.h"

#include <string.h>
#include <sys/stat.h>

#include "formats/checkpoint.h"

#define FIXTURE "tests/fixtures/st/sharded_ok"

static const char *const files[] = {"config.json", "model-00001-of-00002.safetensors",
                                    "model-00002-of-00002.safetensors"};

static int copy(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    char buf[4096];
    size_t n;
    int ok = a && b;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0) ok = fwrite(buf, 1, n, b) == n;
    if (a) fclose(a);
    if (b && fclose(b)) ok = 0;
    return ok;
}

KVQ_FUZZ_TARGET(index) {
    static char dir[300];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/ckpt", kvq_fuzz_dir());
        mkdir(dir, 0700);
        for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
            char a[600], b[600];
            snprintf(a, sizeof a, "%s/%s", FIXTURE, files[i]);
            snprintf(b, sizeof b, "%s/%s", dir, files[i]);
            if (!copy(a, b)) {
                fprintf(stderr, "fuzz_index: cannot copy %s (run from the repository root)\n", a);
                abort();
            }
        }
    }
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    kvq_ckpt *c = NULL;
    kvq_err err = {0};
    if (kvq_ckpt_open(dir, &c, &err) != KVQ_OK) {
        KVQ_FUZZ_CHECK(err.msg[0]);
        return 0;
    }
    for (size_t i = 0; i < kvq_ckpt_count(c); i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(c, i);
        KVQ_FUZZ_CHECK(kvq_ckpt_find(c, t->name) == t);
    }
    for (size_t i = 0; i < kvq_ckpt_nfiles(c); i++) KVQ_FUZZ_CHECK(kvq_ckpt_file(c, i)->name != NULL);
    kvq_ckpt_close(c);
    return 0;
}
