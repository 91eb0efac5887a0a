// Writes a synthetic HF Llama checkpoint with real models' names and shapes and random bf16
// weights (Gaussian, std 0.02; norms 1), sharded one file per layer by the project's own
// safetensors writer, with config.json (transformers 5 form) and a tokenizer copied from a
// small model (its ids are all below the vocabulary). For runtime and conversion benchmarks
// where decode must be memory-bound as on real models.
// usage: make_synth_llama 1b|8b|t128|t3g|t1k OUTDIR [TOKENIZER_DIR] [SEED] [LAYERS]
//   LAYERS: fewer layers than the preset (same tensor shapes; config.json says so), for a
//   checkpoint of a chosen size: 8b with 5 layers is 4.3 GB, its largest tensors 1.05 GB.
//   1b: Llama-3.2-1B (2048, 16 layers, 32/8 heads, ffn 8192, vocab 128256, tied, llama3 RoPE)
//   8b: Llama-3-8B   (4096, 32 layers, 32/8 heads, ffn 14336, vocab 128256, untied)
//   t128: a 17 MB model with the 8B's head shape (head_dim 128, 4 query heads per KV head: 512,
//         2 layers, 4/1 heads, ffn 1024, vocab 4096 — give kvq-tiny-llama's tokenizer), for the
//         GPU KV-codec tests (test_cuda_model)
//   t3g: as t128 but 384 wide, 6/2 heads (head_dim 64, 3 query heads per KV head: a shape the GPU
//        KV-codec kernels refuse; test_cuda_model checks the refusal)
//   t1k: as t128 but 1024 wide, 8/2 heads, ffn 2048: the narrowest shape whose q/k/v and
//        gate/up inputs are whole steps of the one-token product (its persistent kernel and the
//        fold, KVQ_CUDA_FOLD; test_cuda_model)
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/dtype.h"
#include "formats/safetensors.h"
#include "tests/testrng.h"

typedef struct {
    const char *name;
    int d, layers, heads, kv, ffn, vocab, tied;
} preset;

static const preset P1B = {"1b", 2048, 16, 32, 8, 8192, 128256, 1};
static const preset P8B = {"8b", 4096, 32, 32, 8, 14336, 128256, 0};
static const preset PT128 = {"t128", 512, 2, 4, 1, 1024, 4096, 0};
static const preset PT3G = {"t3g", 384, 2, 6, 2, 768, 4096, 0};
static const preset PT1K = {"t1k", 1024, 2, 8, 2, 2048, 4096, 0};

// A bf16 tensor of rows × cols (cols 0: a norm vector of ones).
static kvq_tensor make(char *name, int64_t rows, int64_t cols, uint64_t *rng) {
    int64_t n = cols ? rows * cols : rows;
    uint16_t *b = malloc(2 * (size_t)n);
    if (!b) { fprintf(stderr, "make_synth_llama: out of memory for %s\n", name); exit(1); }
    // chunks of 2^20 values, each from its own splitmix stream seeded by (tensor draw, chunk),
    // so the threads fill the tensor in parallel and the values do not depend on their number
    const uint64_t base = rng_next(rng);
    const int64_t chunk = 1 << 20, nc = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic)
    for (int64_t c = 0; c < nc; c++) {
        uint64_t s = base ^ (0x9E3779B97F4A7C15ull * (uint64_t)(c + 1));
        const int64_t e = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (int64_t i = c * chunk; i < e; i++) b[i] = kvq_f32_to_bf16(cols ? (float)(0.02 * gauss(&s)) : 1.0f);
    }
    kvq_tensor t = {name, KVQ_DTYPE_BF16, cols ? 2 : 1, {rows, cols}, b, 2 * (size_t)n};
    if (!cols) t.shape[1] = 0;
    return t;
}

static int write_shard(const char *dir, int idx, int total, kvq_tensor *t, int n, FILE *index, int *first) {
    char path[4096], fname[64];
    snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", idx, total);
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    const char *meta[] = {"format", "pt", NULL};
    kvq_err err = {0};
    if (kvq_st_write(path, t, (size_t)n, meta, &err)) { fprintf(stderr, "make_synth_llama: %s\n", err.msg); return -1; }
    for (int i = 0; i < n; i++) {
        fprintf(index, "%s\n    \"%s\": \"%s\"", *first ? "" : ",", t[i].name, fname);
        *first = 0;
        free((void *)t[i].data);
        free((void *)t[i].name);
    }
    return 0;
}

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    if (!a || !b) { if (a) fclose(a); fprintf(stderr, "make_synth_llama: %s: %s\n", a ? to : from, strerror(errno)); return -1; }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    return fclose(b) ? -1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[1], "1b") && strcmp(argv[1], "8b") && strcmp(argv[1], "t128") && strcmp(argv[1], "t3g") &&
                     strcmp(argv[1], "t1k"))) {
        fprintf(stderr, "usage: make_synth_llama 1b|8b|t128|t3g|t1k OUTDIR [TOKENIZER_DIR] [SEED] [LAYERS]\n");
        return 2;
    }
    preset P = !strcmp(argv[1], "1b")    ? P1B
               : !strcmp(argv[1], "8b")  ? P8B
               : !strcmp(argv[1], "t3g") ? PT3G
               : !strcmp(argv[1], "t1k") ? PT1K
                                         : PT128;
    if (argc > 5) {
        int l = atoi(argv[5]);
        if (l < 1 || l > P.layers) { fprintf(stderr, "make_synth_llama: LAYERS must be 1..%d\n", P.layers); return 2; }
        P.layers = l;
    }
    const preset *p = &P;
    const char *dir = argv[2], *tokdir = argc > 3 ? argv[3] : "../shared/models/kvq-small-llama";
    uint64_t rng = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
    if (mkdir(dir, 0755) && errno != EEXIST) { fprintf(stderr, "make_synth_llama: %s: %s\n", dir, strerror(errno)); return 2; }
    const int hd = p->d / p->heads, total = p->layers + 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *index = fopen(path, "w");
    if (!index) { fprintf(stderr, "make_synth_llama: %s: %s\n", path, strerror(errno)); return 2; }
    fprintf(index, "{\n  \"metadata\": {},\n  \"weight_map\": {");
    int first = 1;
    kvq_tensor t[12];
    int n = 0;
    t[n++] = make(strdup("model.embed_tokens.weight"), p->vocab, p->d, &rng);
    t[n++] = make(strdup("model.norm.weight"), p->d, 0, &rng);
    if (!p->tied) t[n++] = make(strdup("lm_head.weight"), p->vocab, p->d, &rng);
    if (write_shard(dir, 1, total, t, n, index, &first)) return 1;
    for (int l = 0; l < p->layers; l++) {
        const struct { const char *s; int64_t r, c; } w[] = {
            {"input_layernorm.weight", p->d, 0},
            {"post_attention_layernorm.weight", p->d, 0},
            {"self_attn.q_proj.weight", (int64_t)p->heads * hd, p->d},
            {"self_attn.k_proj.weight", (int64_t)p->kv * hd, p->d},
            {"self_attn.v_proj.weight", (int64_t)p->kv * hd, p->d},
            {"self_attn.o_proj.weight", p->d, (int64_t)p->heads * hd},
            {"mlp.gate_proj.weight", p->ffn, p->d},
            {"mlp.up_proj.weight", p->ffn, p->d},
            {"mlp.down_proj.weight", p->d, p->ffn},
        };
        n = 0;
        for (int i = 0; i < 9; i++) {
            char nm[128];
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, w[i].s);
            t[n++] = make(strdup(nm), w[i].r, w[i].c, &rng);
        }
        if (write_shard(dir, l + 2, total, t, n, index, &first)) return 1;
        fprintf(stderr, "\rmake_synth_llama: layer %d/%d", l + 1, p->layers);
    }
    fprintf(index, "\n  }\n}\n");
    fclose(index);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *c = fopen(path, "w");
    if (!c) { fprintf(stderr, "make_synth_llama: %s: %s\n", path, strerror(errno)); return 2; }
    fprintf(c,
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"hidden_size\": %d,\n"
            "  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
            "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n  \"vocab_size\": %d,\n  \"tie_word_embeddings\": %s,\n"
            "  \"rms_norm_eps\": 1e-05,\n  \"max_position_embeddings\": 131072,\n  \"hidden_act\": \"silu\",\n"
            "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"bos_token_id\": 0,\n  \"eos_token_id\": 1,\n"
            "  \"dtype\": \"bfloat16\",\n  \"rope_parameters\": %s\n}\n",
            p->d, p->ffn, p->layers, p->heads, p->kv, hd, p->vocab, p->tied ? "true" : "false",
            p->tied ? "{\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
                      "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"
                    : "{\"rope_theta\": 500000.0, \"rope_type\": \"default\"}");
    fclose(c);
    char from[4096];
    const char *tf[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s", tokdir, tf[i]);
        snprintf(path, sizeof path, "%s/%s", dir, tf[i]);
        if (copy_file(from, path)) return 1;
    }
    fprintf(stderr, "\nmake_synth_llama: %s-shaped checkpoint in %s\n", p->name, dir);
    return 0;
}
