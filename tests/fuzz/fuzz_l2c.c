// Fuzz target: the llama2.c checkpoint reader (formats/llama2c.c) on arbitrary file bytes.
// Every tensor it exposes must lie inside the file (or its permuted copies).
#include "tests/fuzz/fuzz.h"

#include "formats/llama2c.h"

KVQ_FUZZ_TARGET(l2c) {
    char path[512];
    if (!kvq_fuzz_file("model.bin", data, size, path, sizeof path)) return 0;
    kvq_l2c *m = NULL;
    kvq_err err = {0};
    if (kvq_l2c_open(path, &m, &err) != KVQ_OK) {
        KVQ_FUZZ_CHECK(err.msg[0]);
        return 0;
    }
    const kvq_arch *a = kvq_l2c_arch(m);
    KVQ_FUZZ_CHECK(a->n_layers > 0 && a->hidden_size > 0 && a->vocab_size > 0);
    volatile float sink = 0;
    size_t total = 0;
    for (size_t i = 0; i < kvq_l2c_count(m); i++) {
        const kvq_tensor *t = kvq_l2c_tensor(m, i);
        KVQ_FUZZ_CHECK(t->nbytes == (size_t)kvq_tensor_numel(t) * 4);
        if (t->nbytes) sink += ((const float *)t->data)[t->nbytes / 4 - 1];
        total += t->nbytes;
    }
    KVQ_FUZZ_CHECK(total <= size + size); // wq/wk copies at most double what is mapped
    (void)sink;
    kvq_l2c_close(m);
    return 0;
}
