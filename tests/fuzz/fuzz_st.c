// Fuzz target: the safetensors reader (formats/safetensors.c) on arbitrary file bytes.
// Every tensor it accepts must lie inside the file.
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "formats/dtype.h"
#include "formats/safetensors.h"

KVQ_FUZZ_TARGET(st) {
    char path[512];
    if (!kvq_fuzz_file("x.safetensors", data, size, path, sizeof path)) return 0;
    kvq_st *st = NULL;
    kvq_err err = {0};
    if (kvq_st_open(path, &st, &err) != KVQ_OK) {
        KVQ_FUZZ_CHECK(err.msg[0] && strlen(err.msg) < KVQ_ERR_MSG_MAX);
        return 0;
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < kvq_st_count(st); i++) {
        const kvq_tensor *t = kvq_st_tensor(st, i);
        KVQ_FUZZ_CHECK(t && kvq_st_find(st, t->name) == t);
        if (t->nbytes) sink ^= ((const uint8_t *)t->data)[t->nbytes - 1]; // in the mapping
    }
    (void)kvq_st_metadata(st, "format");
    (void)sink;
    kvq_st_close(st);
    return 0;
}
