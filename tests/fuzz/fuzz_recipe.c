// Fuzz target: the recipe parser and plan (libconv/convert/plan.c) on an arbitrary YAML file:
// kvq_plan_build, then every tensor of a small Llama resolved, the KV policy and the plan's
// JSON. An accepted plan must give every tensor a codec.
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "libconv/convert/convert.h"

static const char *const names[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                                    "model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight",
                                    "model.layers.1.input_layernorm.weight"};

KVQ_FUZZ_TARGET(recipe) {
    char path[512];
    if (!kvq_fuzz_file("recipe.yaml", data, size, path, sizeof path)) return 0;
    kvq_plan_opts o = {.recipe_path = path, .quantize_embeddings = -1};
    kvq_plan *p = NULL;
    kvq_err err = {0};
    if (kvq_plan_build(&o, &p, &err) != KVQ_OK) {
        KVQ_FUZZ_CHECK(err.msg[0]);
        return 0;
    }
    static float w[64 * 64];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        kvq_tensor t = {.name = names[i], .dtype = KVQ_DTYPE_F32, .ndim = strstr(names[i], "norm") ? 1 : 2,
                        .shape = {64, 64}, .data = w};
        t.nbytes = (size_t)kvq_tensor_numel(&t) * 4;
        kvq_plan_entry e;
        if (kvq_plan_resolve(p, &t, &e, &err) == KVQ_OK) KVQ_FUZZ_CHECK(e.codec && e.spec);
    }
    kvq_plan_kv_policy kv;
    kvq_plan_kv(p, &kv);
    json_t *j = kvq_plan_to_json(p);
    KVQ_FUZZ_CHECK(j != NULL);
    json_decref(j);
    kvq_plan_free(p);
    return 0;
}
