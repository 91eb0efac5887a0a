// Fuzz target: config.json -> kvq_arch (formats/arch.c), parsed as kvq_arch_from_config does,
// then the limits, the manifest form (which must read back to the same architecture) and the
// expected-shape table.
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "formats/arch.h"

KVQ_FUZZ_TARGET(config) {
    json_error_t je;
    json_t *cfg = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!cfg) return 0;
    kvq_arch a, b;
    kvq_err err = {0};
    if (kvq_arch_from_json(cfg, "config.json", &a, &err) == KVQ_OK &&
        kvq_arch_check_limits(&a, "config.json", &err) == KVQ_OK) {
        json_t *m = kvq_arch_to_json(&a);
        KVQ_FUZZ_CHECK(m != NULL);
        KVQ_FUZZ_CHECK(kvq_arch_from_manifest(m, &b, &err) == KVQ_OK);
        KVQ_FUZZ_CHECK(b.n_layers == a.n_layers && b.head_dim == a.head_dim && b.vocab_size == a.vocab_size &&
                       b.n_kv_heads == a.n_kv_heads && b.family == a.family);
        json_decref(m);
        static const char *const names[] = {"model.embed_tokens.weight", "lm_head.weight",
                                            "model.layers.0.self_attn.q_proj.weight",
                                            "model.layers.0.self_attn.qkv_proj.weight",
                                            "model.layers.0.mlp.gate_up_proj.weight",
                                            "model.layers.99999999999.mlp.down_proj.weight",
                                            "model.layers.0.self_attn.k_norm.weight"};
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            int64_t shape[2];
            int nd = 0;
            if (kvq_arch_expected_shape(&a, names[i], shape, &nd) == 1)
                KVQ_FUZZ_CHECK(nd >= 1 && nd <= 2 && shape[0] > 0 && (nd == 1 || shape[1] > 0));
        }
    } else {
        KVQ_FUZZ_CHECK(err.msg[0]);
    }
    json_decref(cfg);
    return 0;
}
