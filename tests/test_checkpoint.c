// Checkpoint tests: config.json parsing (both transformers spellings), HF directories
// single-file and sharded (good and broken indexes), llama2.c files (shapes, and wq/wk
// permutation against numpy's transcription of HF's permute), sha256 against published
// vectors. Every model in $KVQ_SHARED (default ../shared) opens with the expected tensor
// set derived from its architecture; those tests skip when shared data is absent.
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "formats/checkpoint.h"

#define FIX "tests/fixtures/st/"
#define L2C "tests/fixtures/l2c/"
#define TINY "tests/models/kvq-tiny-llama"

static const char *shared_dir(void) {
    const char *s = getenv("KVQ_SHARED");
    return s && *s ? s : "../shared";
}

// Path under shared/, or skips the test when shared/ is absent.
#define SHARED_PATH(buf, rel)                                                           \
    do {                                                                                \
        struct stat sb_;                                                                \
        snprintf(buf, sizeof buf, "%s/%s", shared_dir(), rel);                          \
        if (stat(buf, &sb_) != 0) {                                                     \
            print_message("skipped: %s not found (set KVQ_SHARED)\n", buf);             \
            skip();                                                                     \
        }                                                                               \
    } while (0)

static json_t *parse(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) fail_msg("bad test JSON: %s", je.text);
    return j;
}

// ---- expected tensor set from the architecture ----------------------------------

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
} want_t;

static int add_want(want_t *w, int n, const char *name, int64_t r, int64_t c) {
    snprintf(w[n].name, sizeof w[n].name, "%s", name);
    w[n].ndim = c ? 2 : 1;
    w[n].shape[0] = r;
    w[n].shape[1] = c;
    return n + 1;
}

// Every tensor the family's HF modelling code expects, with shapes from the arch.
static int expected_tensors(const kvq_arch *a, want_t *w) {
    int n = 0;
    int64_t H = a->hidden_size, F = a->intermediate_size, q = (int64_t)a->n_heads * a->head_dim,
            kv = (int64_t)a->n_kv_heads * a->head_dim;
    char nm[96];
    n = add_want(w, n, "model.embed_tokens.weight", a->vocab_size, H);
    n = add_want(w, n, "model.norm.weight", H, 0);
    if (!a->tie_word_embeddings) n = add_want(w, n, "lm_head.weight", a->vocab_size, H);
    for (int l = 0; l < a->n_layers; l++) {
#define W(suffix, r, c) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix), n = add_want(w, n, nm, r, c))
        W("input_layernorm.weight", H, 0);
        W("post_attention_layernorm.weight", H, 0);
        W("self_attn.o_proj.weight", H, q);
        W("mlp.down_proj.weight", H, F);
        if (a->family == KVQ_ARCH_PHI3) {
            W("self_attn.qkv_proj.weight", q + 2 * kv, H);
            W("mlp.gate_up_proj.weight", 2 * F, H);
            continue;
        }
        W("self_attn.q_proj.weight", q, H);
        W("self_attn.k_proj.weight", kv, H);
        W("self_attn.v_proj.weight", kv, H);
        W("mlp.gate_proj.weight", F, H);
        W("mlp.up_proj.weight", F, H);
        if (a->attention_bias) {
            W("self_attn.q_proj.bias", q, 0);
            W("self_attn.k_proj.bias", kv, 0);
            W("self_attn.v_proj.bias", kv, 0);
        }
        if (a->qk_norm) {
            W("self_attn.q_norm.weight", a->head_dim, 0);
            W("self_attn.k_norm.weight", a->head_dim, 0);
        }
#undef W
    }
    return n;
}

static void check_tensor_set(const kvq_ckpt *c) {
    static want_t w[4096];
    int n = expected_tensors(kvq_ckpt_arch(c), w);
    assert_int_equal(kvq_ckpt_count(c), n);
    for (int i = 0; i < n; i++) {
        const kvq_tensor *t = kvq_ckpt_find(c, w[i].name);
        if (!t) fail_msg("tensor %s missing", w[i].name);
        assert_int_equal(t->ndim, w[i].ndim);
        for (int d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], w[i].shape[d]);
        assert_int_equal(t->nbytes, (size_t)kvq_tensor_numel(t) * kvq_dtype_size(t->dtype));
    }
    for (size_t i = 1; i < kvq_ckpt_count(c); i++) // sorted by name
        assert_true(strcmp(kvq_ckpt_tensor(c, i - 1)->name, kvq_ckpt_tensor(c, i)->name) < 0);
    assert_null(kvq_ckpt_tensor(c, kvq_ckpt_count(c)));
}

static size_t count_role(const kvq_ckpt *c, const char *role) {
    size_t n = 0;
    for (size_t i = 0; i < kvq_ckpt_nfiles(c); i++) n += strcmp(kvq_ckpt_file(c, i)->role, role) == 0;
    return n;
}

static void assert_arch_equal(const kvq_arch *a, const kvq_arch *b) {
    assert_int_equal(a->family, b->family);
    assert_string_equal(a->hf_class, b->hf_class);
    assert_int_equal(a->hidden_size, b->hidden_size);
    assert_int_equal(a->intermediate_size, b->intermediate_size);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_int_equal(a->n_heads, b->n_heads);
    assert_int_equal(a->n_kv_heads, b->n_kv_heads);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->vocab_size, b->vocab_size);
    assert_int_equal(a->max_position_embeddings, b->max_position_embeddings);
    assert_true(a->rms_norm_eps == b->rms_norm_eps);
    assert_true(a->rope_theta == b->rope_theta);
    assert_int_equal(a->rope_type, b->rope_type);
    assert_true(a->rope_factor == b->rope_factor);
    assert_true(a->rope_low_freq_factor == b->rope_low_freq_factor);
    assert_true(a->rope_high_freq_factor == b->rope_high_freq_factor);
    assert_int_equal(a->rope_original_max_position, b->rope_original_max_position);
    assert_true(a->partial_rotary_factor == b->partial_rotary_factor);
    assert_int_equal(a->tie_word_embeddings, b->tie_word_embeddings);
    assert_int_equal(a->attention_bias, b->attention_bias);
    assert_int_equal(a->qk_norm, b->qk_norm);
    assert_int_equal(a->bos_token_id, b->bos_token_id);
    assert_int_equal(a->eos_token_id, b->eos_token_id);
}

// The manifest form reads back to the same struct.
static void check_manifest_roundtrip(const kvq_arch *a) {
    json_t *j = kvq_arch_to_json(a);
    assert_non_null(j);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    json_t *back = parse(text); // through text, as a manifest would be
    free(text);
    kvq_arch b;
    kvq_err err = {0};
    assert_int_equal(kvq_arch_from_manifest(back, &b, &err), KVQ_OK);
    assert_arch_equal(a, &b);
    json_decref(back);
}

// ---- bundled model and fixtures ---------------------------------------------------

static void test_bundled_tiny(void **state) {
    kvq_ckpt *c;
    kvq_err err = {0};
    assert_int_equal(kvq_ckpt_open(TINY, &c, &err), KVQ_OK);
    assert_int_equal(kvq_ckpt_get_kind(c), KVQ_CKPT_HF);
    const kvq_arch *a = kvq_ckpt_arch(c);
    assert_int_equal(a->family, KVQ_ARCH_LLAMA);
    assert_string_equal(kvq_arch_family_name(a->family), "llama");
    assert_int_equal(a->hidden_size, 256);
    assert_int_equal(a->intermediate_size, 704);
    assert_int_equal(a->n_layers, 4);
    assert_int_equal(a->n_heads, 4);
    assert_int_equal(a->n_kv_heads, 2);
    assert_int_equal(a->head_dim, 64);
    assert_int_equal(a->vocab_size, 4096);
    assert_int_equal(a->max_position_embeddings, 2048);
    assert_true(a->rms_norm_eps == 1e-5);
    assert_true(a->rope_theta == 500000.0);
    assert_int_equal(a->rope_type, KVQ_ROPE_DEFAULT);
    assert_true(a->partial_rotary_factor == 1.0);
    assert_false(a->tie_word_embeddings);
    assert_false(a->attention_bias);
    assert_false(a->qk_norm);
    assert_int_equal(a->bos_token_id, 0);
    assert_int_equal(a->eos_token_id, 1);
    check_tensor_set(c);
    assert_int_equal(kvq_ckpt_count(c), 39);
    assert_int_equal(kvq_ckpt_tensor(c, 0)->dtype, KVQ_DTYPE_BF16);
    assert_int_equal(count_role(c, "config"), 1);
    assert_int_equal(count_role(c, "weights"), 1);
    assert_int_equal(count_role(c, "index"), 0);
    assert_int_equal(count_role(c, "tokenizer"), 1);
    assert_int_equal(count_role(c, "tokenizer_config"), 1);
    assert_int_equal(count_role(c, "generation_config"), 1);
    assert_string_equal(kvq_ckpt_tokenizer_path(c), TINY "/tokenizer.json");
    for (size_t i = 0; i < kvq_ckpt_nfiles(c); i++) {
        const kvq_srcfile *f = kvq_ckpt_file(c, i);
        struct stat sb;
        assert_int_equal(stat(f->path, &sb), 0);
        assert_int_equal(f->size, (uint64_t)sb.st_size);
        assert_ptr_equal(strstr(f->path, f->name) + strlen(f->name), f->path + strlen(f->path));
    }
    check_manifest_roundtrip(a);
    kvq_ckpt_close(c);
    kvq_ckpt_close(NULL);
}

static void test_sharded_fixture(void **state) {
    kvq_ckpt *c;
    kvq_err err = {0};
    assert_int_equal(kvq_ckpt_open(FIX "sharded_ok", &c, &err), KVQ_OK);
    const kvq_arch *a = kvq_ckpt_arch(c);
    assert_true(a->tie_word_embeddings);
    assert_int_equal(a->eos_token_id, 2); // first of [2, 3]
    assert_int_equal(a->head_dim, 4);     // derived: 8 / 2
    assert_int_equal(kvq_ckpt_count(c), 11); // a whole one-layer model
    assert_int_equal(count_role(c, "weights"), 2);
    assert_int_equal(count_role(c, "index"), 1);
    assert_null(kvq_ckpt_tokenizer_path(c));
    const kvq_tensor *t = kvq_ckpt_find(c, "model.layers.0.input_layernorm.weight");
    assert_non_null(t);
    for (int i = 0; i < 8; i++) assert_true(((const float *)t->data)[i] == 0.5f);
    assert_non_null(kvq_ckpt_find(c, "model.embed_tokens.weight"));
    assert_null(kvq_ckpt_find(c, "lm_head.weight"));
    kvq_ckpt_close(c);
}

typedef struct {
    const char *path;
    kvq_status code;
    const char *has;
} bad_ckpt;

static void test_broken_checkpoints(void **state) {
    static const bad_ckpt B[] = {
        {FIX "sharded_missing_shard", KVQ_ERR_MISSING,
         "model.safetensors.index.json: shard 'model-00002-of-00002.safetensors' is listed in the index but missing"},
        {FIX "sharded_wrong_map", KVQ_ERR_MISSING,
         "tensor 'model.norm.weight' is mapped to shard 'model-00001-of-00002.safetensors', which does not "
         "contain it; it is in model-00002-of-00002.safetensors"},
        {FIX "sharded_duplicate", KVQ_ERR_FORMAT, "tensor 'model.norm.weight' is present in two shards"},
        {FIX "sharded_unlisted", KVQ_ERR_FORMAT,
         "holds tensor 'model.layers.0.input_layernorm.weight' that the index does not list"},
        {FIX "config_missing_field", KVQ_ERR_MISSING,
         "config_missing_field/config.json: required field 'num_hidden_layers' is missing"},
        {FIX "no_such_dir", KVQ_ERR_MISSING, "no_such_dir"},
        {"tests/fixtures", KVQ_ERR_MISSING, "no config.json"},
        {FIX "bad_short.safetensors", KVQ_ERR_ARG, "bad_short.safetensors: pass the checkpoint directory"},
        {FIX "config_vocab_mismatch", KVQ_ERR_FORMAT,
         "tensor 'model.embed_tokens.weight' has shape [10, 8], config says vocab_size 12 × hidden_size 8"},
    };
    for (size_t i = 0; i < sizeof B / sizeof *B; i++) {
        kvq_ckpt *c = (kvq_ckpt *)1;
        kvq_err err = {0};
        kvq_status s = kvq_ckpt_open(B[i].path, &c, &err);
        print_message("%-40s -> %s\n", B[i].path, err.msg);
        assert_int_equal(s, B[i].code);
        assert_null(c);
        assert_non_null(strstr(err.msg, B[i].has));
    }
}

// Indexes that are malformed in themselves, built at run time beside a copy of a config.
static void test_bad_index_files(void **state) {
    static const struct { const char *index; kvq_status code; const char *has; } I[] = {
        {"{\"weight_map\": {\"model.norm.weight\": \"../model.safetensors\"}}", KVQ_ERR_FORMAT,
         "tensor 'model.norm.weight' maps to '../model.safetensors', not a file name in the checkpoint directory"},
        {"{\"weight_map\": {}}", KVQ_ERR_MISSING, "'weight_map' is missing or empty"},
        {"{\"metadata\": {}}", KVQ_ERR_MISSING, "'weight_map' is missing or empty"},
        {"{\"weight_map\": {\"a\": \"x.safetensors\", \"a\": \"y.safetensors\"}}", KVQ_ERR_FORMAT, "duplicate"},
        {"not json", KVQ_ERR_FORMAT, "model.safetensors.index.json: not valid JSON"},
    };
    char dir[] = "/tmp/kvq_idx_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cfg[128], idx[128];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    FILE *in = fopen(FIX "sharded_ok/config.json", "rb"), *out = fopen(cfg, "wb");
    int ch;
    while ((ch = fgetc(in)) != EOF) fputc(ch, out);
    fclose(in);
    fclose(out);
    for (size_t i = 0; i < sizeof I / sizeof *I; i++) {
        FILE *f = fopen(idx, "wb");
        fputs(I[i].index, f);
        fclose(f);
        kvq_ckpt *c;
        kvq_err err = {0};
        kvq_status s = kvq_ckpt_open(dir, &c, &err);
        print_message("%s\n", err.msg);
        assert_int_equal(s, I[i].code);
        assert_non_null(strstr(err.msg, I[i].has));
        assert_non_null(strstr(err.msg, dir));
    }
    unlink(idx);
    unlink(cfg);
    rmdir(dir);
}

// ---- config.json parsing ------------------------------------------------------------

static kvq_status arch_of(const char *text, kvq_arch *a, kvq_err *err) {
    json_t *j = parse(text);
    kvq_status s = kvq_arch_from_json(j, "cfg.json", a, err);
    json_decref(j);
    return s;
}

#define BASE "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, " \
             "\"num_attention_heads\": 4, \"vocab_size\": 100"

static void test_config_variants(void **state) {
    kvq_arch a;
    kvq_err err = {0};
    // Minimal llama: defaults from LlamaConfig.
    assert_int_equal(arch_of("{\"architectures\": [\"LlamaForCausalLM\"], " BASE "}", &a, &err), KVQ_OK);
    assert_int_equal(a.n_kv_heads, 4);
    assert_int_equal(a.head_dim, 16);
    assert_true(a.rope_theta == 10000.0);
    assert_true(a.rms_norm_eps == 1e-6);
    assert_int_equal(a.max_position_embeddings, 2048);
    assert_int_equal(a.bos_token_id, -1);
    assert_int_equal(a.eos_token_id, -1);
    // v4 linear scaling with "type"; eos list.
    assert_int_equal(arch_of("{\"architectures\": [\"LlamaForCausalLM\"], " BASE ", \"rope_theta\": 5e5, "
                             "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}, "
                             "\"eos_token_id\": [7, 8], \"torch_dtype\": \"float16\"}", &a, &err), KVQ_OK);
    assert_int_equal(a.rope_type, KVQ_ROPE_LINEAR);
    assert_true(a.rope_factor == 2.0);
    assert_true(a.rope_theta == 5e5);
    assert_int_equal(a.eos_token_id, 7);
    // v5 linear.
    assert_int_equal(arch_of("{\"architectures\": [\"MistralForCausalLM\"], " BASE ", \"rope_parameters\": "
                             "{\"rope_type\": \"linear\", \"factor\": 4, \"rope_theta\": 1e6}}", &a, &err), KVQ_OK);
    assert_int_equal(a.family, KVQ_ARCH_MISTRAL);
    assert_int_equal(a.rope_type, KVQ_ROPE_LINEAR);
    assert_true(a.rope_factor == 4.0);
    assert_true(a.rope_theta == 1e6);
    // Qwen3 without head_dim takes Qwen3Config's default 128, not hidden/heads.
    assert_int_equal(arch_of("{\"architectures\": [\"Qwen3ForCausalLM\"], " BASE "}", &a, &err), KVQ_OK);
    assert_int_equal(a.head_dim, 128);
    assert_true(a.qk_norm);
    // Qwen2 has q/k/v biases whatever attention_bias says.
    assert_int_equal(arch_of("{\"architectures\": [\"Qwen2ForCausalLM\"], " BASE ", \"attention_bias\": false}",
                             &a, &err), KVQ_OK);
    assert_true(a.attention_bias);
    // Llama may have them.
    assert_int_equal(arch_of("{\"architectures\": [\"LlamaForCausalLM\"], " BASE ", \"attention_bias\": true}",
                             &a, &err), KVQ_OK);
    assert_true(a.attention_bias);
    // partial_rotary_factor: v4 top level, v5 inside rope_parameters.
    assert_int_equal(arch_of("{\"architectures\": [\"Phi3ForCausalLM\"], " BASE ", \"partial_rotary_factor\": 0.5}",
                             &a, &err), KVQ_OK);
    assert_true(a.partial_rotary_factor == 0.5);
    assert_true(a.rms_norm_eps == 1e-5);
    assert_int_equal(arch_of("{\"architectures\": [\"Phi3ForCausalLM\"], " BASE ", \"rope_parameters\": "
                             "{\"rope_type\": \"default\", \"rope_theta\": 1e4, \"partial_rotary_factor\": 0.75}}",
                             &a, &err), KVQ_OK);
    assert_true(a.partial_rotary_factor == 0.75);
}

static void test_config_errors(void **state) {
    static const struct { const char *json; kvq_status code; const char *has; } E[] = {
        {"{\"architectures\": [\"GPT2LMHeadModel\"], " BASE "}", KVQ_ERR_UNSUPPORTED,
         "cfg.json: architecture 'GPT2LMHeadModel' is not supported"},
        {"{" BASE "}", KVQ_ERR_MISSING, "cfg.json: required field 'architectures' is missing"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4}", KVQ_ERR_MISSING,
         "cfg.json: required field 'vocab_size' is missing"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", "
         "\"factor\": 4}}", KVQ_ERR_UNSUPPORTED, "rope_scaling rope_type 'yarn' is not supported"},
        {"{\"architectures\": [\"Phi3ForCausalLM\"], " BASE ", \"rope_parameters\": {\"rope_type\": \"longrope\"}}",
         KVQ_ERR_UNSUPPORTED, "rope_parameters rope_type 'longrope' is not supported"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", "
         "\"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4}}", KVQ_ERR_MISSING,
         "'original_max_position_embeddings' is missing"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " BASE ", \"num_key_value_heads\": 3}", KVQ_ERR_FORMAT,
         "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " BASE ", \"num_key_value_heads\": -2}", KVQ_ERR_FORMAT,
         "'num_key_value_heads' must be a positive integer"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 63, \"intermediate_size\": 128, "
         "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}", KVQ_ERR_FORMAT,
         "hidden_size 63 is not a multiple of num_attention_heads 4"},
        {"{\"architectures\": [\"LlamaForCausalLM\"], " BASE ", \"tie_word_embeddings\": \"yes\"}", KVQ_ERR_FORMAT,
         "'tie_word_embeddings' must be true or false"},
        {"{\"architectures\": [\"Qwen2ForCausalLM\"], " BASE ", \"use_sliding_window\": true}", KVQ_ERR_UNSUPPORTED,
         "use_sliding_window true is not supported"},
    };
    for (size_t i = 0; i < sizeof E / sizeof *E; i++) {
        kvq_arch a;
        kvq_err err = {0};
        kvq_status s = arch_of(E[i].json, &a, &err);
        print_message("%s\n", err.msg);
        assert_int_equal(s, E[i].code);
        assert_non_null(strstr(err.msg, E[i].has));
    }
    // Config file that is not JSON, and one that does not exist.
    kvq_arch a;
    kvq_err err = {0};
    assert_int_equal(kvq_arch_from_config(FIX "good_mixed.safetensors", &a, &err), KVQ_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "good_mixed.safetensors: not valid JSON"));
    assert_int_equal(kvq_arch_from_config(FIX "nope.json", &a, &err), KVQ_ERR_MISSING);
    // Manifest with an unknown family.
    json_t *j = kvq_arch_to_json(&(kvq_arch){.family = KVQ_ARCH_LLAMA, .hidden_size = 8, .intermediate_size = 8,
                                             .n_layers = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = 8,
                                             .vocab_size = 4});
    json_object_set_new(j, "family", json_string("gpt2"));
    assert_int_equal(kvq_arch_from_manifest(j, &a, &err), KVQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'gpt2'"));
    json_object_del(j, "family");
    assert_int_equal(kvq_arch_from_manifest(j, &a, &err), KVQ_ERR_FORMAT);
    json_decref(j);
}

// ---- shared: oracle and models ------------------------------------------------------

typedef struct {
    const char *dir;
    kvq_arch_family family;
    int n_kv_heads, head_dim, ntensors;
    double theta, eps;
    bool tie, bias, qk_norm;
    int bos, eos;
} oracle_case;

static void test_oracle_models(void **state) {
    static const oracle_case O[] = {
        {"llama", KVQ_ARCH_LLAMA, 2, 32, 21, 1e4, 1e-5, false, false, false, 1, 2},
        {"llama3-ropescale", KVQ_ARCH_LLAMA, 2, 32, 20, 5e5, 1e-5, true, false, false, 1, 2},
        {"llama3-ropescale-v4config", KVQ_ARCH_LLAMA, 2, 32, 20, 5e5, 1e-5, true, false, false, 1, 2},
        {"mistral", KVQ_ARCH_MISTRAL, 2, 32, 21, 1e4, 1e-5, false, false, false, 1, 2},
        {"qwen2", KVQ_ARCH_QWEN2, 2, 32, 26, 1e6, 1e-6, true, true, false, -1, -1},
        {"qwen2-v4config", KVQ_ARCH_QWEN2, 2, 32, 26, 1e6, 1e-6, true, true, false, -1, -1},
        {"qwen3", KVQ_ARCH_QWEN3, 2, 64, 24, 1e6, 1e-6, true, false, true, -1, -1},
        {"phi3", KVQ_ARCH_PHI3, 4, 32, 15, 1e4, 1e-5, false, false, false, 1, 32000},
    };
    char path[512];
    SHARED_PATH(path, "oracle");
    for (size_t i = 0; i < sizeof O / sizeof *O; i++) {
        snprintf(path, sizeof path, "%s/oracle/%s", shared_dir(), O[i].dir);
        kvq_ckpt *c;
        kvq_err err = {0};
        if (kvq_ckpt_open(path, &c, &err) != KVQ_OK) fail_msg("%s", err.msg);
        const kvq_arch *a = kvq_ckpt_arch(c);
        print_message("%-26s %-20s %zu tensors\n", O[i].dir, a->hf_class, kvq_ckpt_count(c));
        assert_int_equal(a->family, O[i].family);
        assert_int_equal(a->hidden_size, 128);
        assert_int_equal(a->intermediate_size, 352);
        assert_int_equal(a->n_layers, 2);
        assert_int_equal(a->n_heads, 4);
        assert_int_equal(a->n_kv_heads, O[i].n_kv_heads);
        assert_int_equal(a->head_dim, O[i].head_dim);
        assert_int_equal(a->vocab_size, 1000);
        assert_int_equal(a->max_position_embeddings, 4096);
        assert_true(a->rope_theta == O[i].theta);
        assert_true(a->rms_norm_eps == O[i].eps);
        assert_int_equal(a->tie_word_embeddings, O[i].tie);
        assert_int_equal(a->attention_bias, O[i].bias);
        assert_int_equal(a->qk_norm, O[i].qk_norm);
        assert_int_equal(a->bos_token_id, O[i].bos);
        assert_int_equal(a->eos_token_id, O[i].eos);
        assert_true(a->partial_rotary_factor == 1.0);
        if (strncmp(O[i].dir, "llama3", 6) == 0) {
            assert_int_equal(a->rope_type, KVQ_ROPE_LLAMA3);
            assert_true(a->rope_factor == 8.0);
            assert_true(a->rope_low_freq_factor == 1.0);
            assert_true(a->rope_high_freq_factor == 4.0);
            assert_int_equal(a->rope_original_max_position, 256);
        } else {
            assert_int_equal(a->rope_type, KVQ_ROPE_DEFAULT);
        }
        assert_int_equal(kvq_ckpt_count(c), O[i].ntensors);
        check_tensor_set(c);
        check_manifest_roundtrip(a);
        kvq_ckpt_close(c);
    }
}

// transformers-4 and -5 spellings of the same model give the same kvq_arch.
static void test_v4_twins(void **state) {
    char p5[512], p4[512];
    SHARED_PATH(p5, "oracle");
    const char *twins[] = {"llama3-ropescale", "qwen2"};
    for (int i = 0; i < 2; i++) {
        snprintf(p5, sizeof p5, "%s/oracle/%s/config.json", shared_dir(), twins[i]);
        snprintf(p4, sizeof p4, "%s/oracle/%s-v4config/config.json", shared_dir(), twins[i]);
        kvq_arch a5, a4;
        kvq_err err = {0};
        assert_int_equal(kvq_arch_from_config(p5, &a5, &err), KVQ_OK);
        assert_int_equal(kvq_arch_from_config(p4, &a4, &err), KVQ_OK);
        assert_arch_equal(&a5, &a4);
    }
}

static void test_shared_models(void **state) {
    char path[512];
    SHARED_PATH(path, "models");
    static const struct { const char *dir; int ntensors, nshards, head_dim; bool tie, qk; } M[] = {
        {"kvq-small-llama", 57, 4, 64, false, false},
        {"kvq-small-qwen3", 68, 4, 128, true, true},
        {"kvq-tiny-llama", 39, 1, 64, false, false},
    };
    for (size_t i = 0; i < sizeof M / sizeof *M; i++) {
        snprintf(path, sizeof path, "%s/models/%s", shared_dir(), M[i].dir);
        kvq_ckpt *c;
        kvq_err err = {0};
        if (kvq_ckpt_open(path, &c, &err) != KVQ_OK) fail_msg("%s", err.msg);
        const kvq_arch *a = kvq_ckpt_arch(c);
        assert_int_equal(kvq_ckpt_count(c), M[i].ntensors);
        assert_int_equal(count_role(c, "weights"), M[i].nshards);
        assert_int_equal(count_role(c, "index"), M[i].nshards > 1);
        assert_int_equal(a->head_dim, M[i].head_dim);
        assert_int_equal(a->tie_word_embeddings, M[i].tie);
        assert_int_equal(a->qk_norm, M[i].qk);
        assert_int_equal(a->hidden_size, i < 2 ? 512 : 256);
        assert_non_null(kvq_ckpt_tokenizer_path(c));
        check_tensor_set(c);
        kvq_ckpt_close(c);
    }
    // The shared tiny model is the bundled one.
    char a[65], b[65];
    kvq_err err = {0};
    snprintf(path, sizeof path, "%s/models/kvq-tiny-llama/model.safetensors", shared_dir());
    assert_int_equal(kvq_sha256_file(path, a, &err), KVQ_OK);
    assert_int_equal(kvq_sha256_file(TINY "/model.safetensors", b, &err), KVQ_OK);
    assert_string_equal(a, b);
}

// ---- llama2.c ---------------------------------------------------------------------

// Compares the rows listed in an expect JSON (numpy's reading of the file) with ours.
static void check_expect(const kvq_ckpt *c, const char *expect_path) {
    json_error_t je;
    json_t *e = json_load_file(expect_path, 0, &je);
    if (!e) fail_msg("%s: %s", expect_path, je.text);
    const char *tname;
    json_t *rowsj;
    size_t nchecked = 0;
    json_object_foreach(json_object_get(e, "tensors"), tname, rowsj) {
        const kvq_tensor *t = kvq_ckpt_find(c, tname);
        if (!t) fail_msg("%s missing", tname);
        assert_int_equal(t->dtype, KVQ_DTYPE_F32);
        int64_t cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
        const char *rk;
        json_t *vals;
        json_object_foreach(rowsj, rk, vals) {
            long r = strtol(rk, NULL, 10);
            const float *row = (const float *)t->data + r * cols;
            for (size_t k = 0; k < json_array_size(vals); k++) {
                float want = (float)json_real_value(json_array_get(vals, k));
                if (row[k] != want) fail_msg("%s[%ld][%zu]: %g != %g", tname, r, k, row[k], want);
                nchecked++;
            }
        }
    }
    assert_true(nchecked > 100);
    json_decref(e);
}

static void test_stories260k(void **state) {
    char path[512];
    SHARED_PATH(path, "models/stories260K/stories260K.bin");
    kvq_ckpt *c;
    kvq_err err = {0};
    if (kvq_ckpt_open(path, &c, &err) != KVQ_OK) fail_msg("%s", err.msg);
    assert_int_equal(kvq_ckpt_get_kind(c), KVQ_CKPT_LLAMA2C);
    const kvq_arch *a = kvq_ckpt_arch(c);
    assert_int_equal(a->family, KVQ_ARCH_LLAMA);
    assert_int_equal(a->hidden_size, 64);
    assert_int_equal(a->intermediate_size, 172);
    assert_int_equal(a->n_layers, 5);
    assert_int_equal(a->n_heads, 8);
    assert_int_equal(a->n_kv_heads, 4);
    assert_int_equal(a->head_dim, 8);
    assert_int_equal(a->vocab_size, 512);
    assert_int_equal(a->max_position_embeddings, 512);
    assert_true(a->rope_theta == 10000.0);
    assert_true(a->rms_norm_eps == 1e-5);
    assert_true(a->tie_word_embeddings);
    assert_int_equal(a->bos_token_id, 1);
    assert_int_equal(a->eos_token_id, 2);
    assert_int_equal(kvq_ckpt_count(c), 47);
    check_tensor_set(c);
    check_expect(c, L2C "stories260K_expect.json");
    const char *tok = kvq_ckpt_tokenizer_path(c);
    assert_non_null(tok);
    assert_non_null(strstr(tok, "tok512.bin"));
    assert_int_equal(count_role(c, "tokenizer"), 1);
    // sha256 of a file larger than the 1 MiB read buffer, against Python's hashlib.
    json_t *e = json_load_file(L2C "stories260K_expect.json", 0, NULL);
    char hex[65];
    assert_int_equal(kvq_sha256_file(path, hex, &err), KVQ_OK);
    assert_string_equal(hex, json_string_value(json_object_get(e, "sha256")));
    json_decref(e);
    check_manifest_roundtrip(a);
    kvq_ckpt_close(c);
}

static void test_llama2c_unshared(void **state) {
    kvq_ckpt *c;
    kvq_err err = {0};
    assert_int_equal(kvq_ckpt_open(L2C "tiny_unshared.bin", &c, &err), KVQ_OK);
    const kvq_arch *a = kvq_ckpt_arch(c);
    assert_false(a->tie_word_embeddings);
    assert_int_equal(a->vocab_size, 6);
    assert_int_equal(a->head_dim, 4);
    assert_int_equal(kvq_ckpt_count(c), 2 * 9 + 3);
    check_tensor_set(c);
    check_expect(c, L2C "tiny_unshared_expect.json");
    assert_null(kvq_ckpt_tokenizer_path(c));
    kvq_ckpt_close(c);
}

static void test_llama2c_broken(void **state) {
    char tmp[] = "/tmp/kvq_l2c_XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char p[128];
    snprintf(p, sizeof p, "%s/model.bin", tmp);
    FILE *in = fopen(L2C "tiny_unshared.bin", "rb");
    unsigned char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    kvq_ckpt *c;
    kvq_err err = {0};
    // One float short.
    FILE *f = fopen(p, "wb");
    fwrite(buf, 1, n - 4, f);
    fclose(f);
    assert_int_equal(kvq_ckpt_open(p, &c, &err), KVQ_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "model.bin: file size 4472 does not match the llama2.c header (expects 4476"));
    // Heads that do not divide dim.
    int32_t h[7] = {8, 12, 2, 3, 1, 6, 4};
    memcpy(buf, h, sizeof h);
    f = fopen(p, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    assert_int_equal(kvq_ckpt_open(p, &c, &err), KVQ_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "bad llama2.c header (dim 8, hidden_dim 12, n_layers 2, n_heads 3"));
    // Absurd sizes must not overflow into a match.
    int32_t big[7] = {1 << 30, 1 << 30, 1 << 30, 2, 1, -(1 << 30), 1 << 30};
    memcpy(buf, big, sizeof big);
    f = fopen(p, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    assert_int_equal(kvq_ckpt_open(p, &c, &err), KVQ_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "does not match the llama2.c header"));
    // A version-2 export (export.py --version 2): magic then version.
    int32_t v2[2] = {0x616b3432, 2};
    memcpy(buf, v2, sizeof v2);
    f = fopen(p, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    assert_int_equal(kvq_ckpt_open(p, &c, &err), KVQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "llama2.c version 2 export (magic 'ak42') is not supported"));
    unlink(p);
    rmdir(tmp);
}

// ---- sha256 -------------------------------------------------------------------------

static void test_sha256(void **state) {
    // FIPS 180-2 vectors: "abc", "", and one million 'a'.
    static const struct { size_t n; const char *text, *hex; } V[] = {
        {3, "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {0, "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {1000000, NULL, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    char tmp[] = "/tmp/kvq_sha_XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    close(fd);
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(tmp, "wb");
        if (V[i].text) fwrite(V[i].text, 1, V[i].n, f);
        else for (size_t k = 0; k < V[i].n; k++) fputc('a', f);
        fclose(f);
        char hex[65];
        kvq_err err = {0};
        assert_int_equal(kvq_sha256_file(tmp, hex, &err), KVQ_OK);
        assert_string_equal(hex, V[i].hex);
    }
    unlink(tmp);
    char hex[65];
    kvq_err err = {0};
    assert_int_equal(kvq_sha256_file("/nonexistent/x", hex, &err), KVQ_ERR_MISSING);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundled_tiny),
        cmocka_unit_test(test_sharded_fixture),
        cmocka_unit_test(test_broken_checkpoints),
        cmocka_unit_test(test_bad_index_files),
        cmocka_unit_test(test_config_variants),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_oracle_models),
        cmocka_unit_test(test_v4_twins),
        cmocka_unit_test(test_shared_models),
        cmocka_unit_test(test_stories260k),
        cmocka_unit_test(test_llama2c_unshared),
        cmocka_unit_test(test_llama2c_broken),
        cmocka_unit_test(test_sha256),
    };
    return cmocka_run_group_tests_name("checkpoint", tests, NULL, NULL);
}
