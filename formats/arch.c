// config.json -> kvq_arch for the five supported HF decoder families, accepting both the
// transformers-5 spelling (`rope_parameters`) and the 4.x one (top-level `rope_theta`,
// `rope_scaling` with `type` or `rope_type`). Optional fields take the defaults of the
// family's transformers config class; structural fields are required. Also the
// manifest form (kvq_arch_to_json / kvq_arch_from_manifest).
#include "formats/arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *hf_class, *name;
    int max_pos;       // transformers default max_position_embeddings
    double eps;        // default rms_norm_eps
    int head_dim;      // default head_dim when absent (0: hidden / heads)
} fam[KVQ_ARCH_COUNT] = {
    [KVQ_ARCH_LLAMA] = {"LlamaForCausalLM", "llama", 2048, 1e-6, 0},
    [KVQ_ARCH_MISTRAL] = {"MistralForCausalLM", "mistral", 4096 * 32, 1e-6, 0},
    [KVQ_ARCH_QWEN2] = {"Qwen2ForCausalLM", "qwen2", 32768, 1e-6, 0},
    [KVQ_ARCH_QWEN3] = {"Qwen3ForCausalLM", "qwen3", 32768, 1e-6, 128},
    [KVQ_ARCH_PHI3] = {"Phi3ForCausalLM", "phi3", 4096, 1e-5, 0},
};

static const char *rope_names[] = {"default", "linear", "llama3"};

const char *kvq_arch_family_name(kvq_arch_family f) {
    return f < KVQ_ARCH_COUNT ? fam[f].name : "?";
}

// ---- field readers ----------------------------------------------------------------

// A required or optional positive int. Absent or null: *out = dflt, or MISSING if dflt < 0.
static kvq_status get_int(const json_t *o, const char *key, int dflt, int *out, const char *what,
                          kvq_err *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (dflt < 0)
            return kvq_err_set(err, KVQ_ERR_MISSING, "%s: required field '%s' is missing", what, key);
        *out = dflt;
        return KVQ_OK;
    }
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : NAN;
    if (!(d >= 1 && d <= 2147483647.0) || d != floor(d))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: field '%s' must be a positive integer", what, key);
    *out = (int)d;
    return KVQ_OK;
}

// An optional positive finite number.
static kvq_status get_num(const json_t *o, const char *key, double dflt, double *out,
                          const char *what, kvq_err *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (isnan(dflt))
            return kvq_err_set(err, KVQ_ERR_MISSING, "%s: required field '%s' is missing", what, key);
        *out = dflt;
        return KVQ_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v)))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: field '%s' must be a positive number", what, key);
    *out = json_number_value(v);
    return KVQ_OK;
}

static kvq_status get_bool(const json_t *o, const char *key, bool dflt, bool *out, const char *what,
                           kvq_err *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return KVQ_OK;
    }
    if (!json_is_boolean(v))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: field '%s' must be true or false", what, key);
    *out = json_is_true(v);
    return KVQ_OK;
}

// bos/eos: an int, a list of ints (first is kept), or null/absent (-1).
static kvq_status get_token(const json_t *o, const char *key, int *out, const char *what, kvq_err *err) {
    const json_t *v = json_object_get(o, key);
    *out = -1;
    if (json_is_array(v)) v = json_array_size(v) ? json_array_get(v, 0) : NULL;
    if (!v || json_is_null(v)) return KVQ_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 2147483647)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: field '%s' must be a token id, a list or null", what, key);
    *out = (int)json_integer_value(v);
    return KVQ_OK;
}

// RoPE settings from a rope_parameters (v5) or rope_scaling (v4) object, or NULL.
static kvq_status read_rope(const json_t *cfg, kvq_arch *a, const char *what, kvq_err *err) {
    const json_t *rp = json_object_get(cfg, "rope_parameters");
    const char *src = "rope_parameters";
    kvq_status s;
    if (rp && !json_is_null(rp)) {
        if (!json_is_object(rp))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: 'rope_parameters' is not an object", what);
        // theta lives inside rope_parameters in v5; fall back to a top-level one.
        if ((s = get_num(cfg, "rope_theta", 10000.0, &a->rope_theta, what, err))) return s;
        if ((s = get_num(rp, "rope_theta", a->rope_theta, &a->rope_theta, what, err))) return s;
    } else {
        if ((s = get_num(cfg, "rope_theta", 10000.0, &a->rope_theta, what, err))) return s;
        rp = json_object_get(cfg, "rope_scaling");
        src = "rope_scaling";
        if (rp && !json_is_null(rp) && !json_is_object(rp))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: 'rope_scaling' is not an object", what);
    }
    if ((s = get_num(cfg, "partial_rotary_factor", 1.0, &a->partial_rotary_factor, what, err))) return s;
    a->rope_type = KVQ_ROPE_DEFAULT;
    a->rope_factor = 1.0;
    if (!rp || json_is_null(rp)) return KVQ_OK;
    if ((s = get_num(rp, "partial_rotary_factor", a->partial_rotary_factor, &a->partial_rotary_factor,
                     what, err)))
        return s;
    const json_t *jt = json_object_get(rp, "rope_type");
    if (!jt) jt = json_object_get(rp, "type");
    const char *type = json_is_string(jt) ? json_string_value(jt) : NULL;
    if (!type)
        return kvq_err_set(err, KVQ_ERR_MISSING, "%s: required field '%s.rope_type' is missing", what, src);
    if (strcmp(type, "default") == 0) return KVQ_OK;
    if (strcmp(type, "linear") == 0) {
        a->rope_type = KVQ_ROPE_LINEAR;
        return get_num(rp, "factor", NAN, &a->rope_factor, what, err);
    }
    if (strcmp(type, "llama3") == 0) {
        a->rope_type = KVQ_ROPE_LLAMA3;
        if ((s = get_num(rp, "factor", NAN, &a->rope_factor, what, err)) ||
            (s = get_num(rp, "low_freq_factor", NAN, &a->rope_low_freq_factor, what, err)) ||
            (s = get_num(rp, "high_freq_factor", NAN, &a->rope_high_freq_factor, what, err)) ||
            (s = get_int(rp, "original_max_position_embeddings", -1, &a->rope_original_max_position,
                         what, err)))
            return s;
        return KVQ_OK;
    }
    return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                       "%s: %s rope_type '%s' is not supported (kvq handles default, linear, llama3)",
                       what, src, type);
}

// ---- config.json ------------------------------------------------------------------

kvq_status kvq_arch_from_json(const json_t *cfg, const char *what, kvq_arch *arch, kvq_err *err) {
    kvq_arch a;
    memset(&a, 0, sizeof a);
    if (!json_is_object(cfg))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: config is not a JSON object", what);
    const json_t *archs = json_object_get(cfg, "architectures");
    const json_t *a0 = json_is_array(archs) ? json_array_get(archs, 0) : NULL;
    if (!json_is_string(a0))
        return kvq_err_set(err, KVQ_ERR_MISSING, "%s: required field 'architectures' is missing", what);
    const char *cls = json_string_value(a0);
    int f = 0;
    while (f < KVQ_ARCH_COUNT && strcmp(fam[f].hf_class, cls) != 0) f++;
    if (f == KVQ_ARCH_COUNT)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                           "%s: architecture '%s' is not supported (kvq reads Llama, Mistral, Qwen2, "
                           "Qwen3, Phi3 ForCausalLM)", what, cls);
    a.family = (kvq_arch_family)f;
    snprintf(a.hf_class, sizeof a.hf_class, "%s", cls);
    kvq_status s;
    if ((s = get_int(cfg, "hidden_size", -1, &a.hidden_size, what, err)) ||
        (s = get_int(cfg, "intermediate_size", -1, &a.intermediate_size, what, err)) ||
        (s = get_int(cfg, "num_hidden_layers", -1, &a.n_layers, what, err)) ||
        (s = get_int(cfg, "num_attention_heads", -1, &a.n_heads, what, err)) ||
        (s = get_int(cfg, "vocab_size", -1, &a.vocab_size, what, err)) ||
        (s = get_int(cfg, "num_key_value_heads", a.n_heads, &a.n_kv_heads, what, err)) ||
        (s = get_int(cfg, "max_position_embeddings", fam[f].max_pos, &a.max_position_embeddings,
                     what, err)) ||
        (s = get_num(cfg, "rms_norm_eps", fam[f].eps, &a.rms_norm_eps, what, err)) ||
        (s = get_bool(cfg, "tie_word_embeddings", false, &a.tie_word_embeddings, what, err)) ||
        (s = get_token(cfg, "bos_token_id", &a.bos_token_id, what, err)) ||
        (s = get_token(cfg, "eos_token_id", &a.eos_token_id, what, err)) ||
        (s = read_rope(cfg, &a, what, err)))
        return s;
    int hd_default = fam[f].head_dim;
    if (!hd_default) {
        if (a.hidden_size % a.n_heads)
            return kvq_err_set(err, KVQ_ERR_FORMAT,
                               "%s: hidden_size %d is not a multiple of num_attention_heads %d", what,
                               a.hidden_size, a.n_heads);
        hd_default = a.hidden_size / a.n_heads;
    }
    if ((s = get_int(cfg, "head_dim", hd_default, &a.head_dim, what, err))) return s;
    if (a.n_heads % a.n_kv_heads)
        return kvq_err_set(err, KVQ_ERR_FORMAT,
                           "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                           what, a.n_heads, a.n_kv_heads);
    if (a.partial_rotary_factor > 1.0)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: partial_rotary_factor %g exceeds 1", what,
                           a.partial_rotary_factor);
    switch (a.family) {
    case KVQ_ARCH_QWEN2: a.attention_bias = true; break; // Qwen2Attention always has q/k/v biases
    case KVQ_ARCH_LLAMA:
    case KVQ_ARCH_QWEN3:
        if ((s = get_bool(cfg, "attention_bias", false, &a.attention_bias, what, err))) return s;
        break;
    default: a.attention_bias = false; break;
    }
    a.qk_norm = a.family == KVQ_ARCH_QWEN3;
    // kvq_arch has no sliding-window field: refuse configs whose attention uses one on
    // some layers (Qwen2/3 use_sliding_window), rather than silently computing another model.
    const json_t *sw = json_object_get(cfg, "use_sliding_window");
    if ((a.family == KVQ_ARCH_QWEN2 || a.family == KVQ_ARCH_QWEN3) && json_is_true(sw))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "%s: use_sliding_window true is not supported", what);
    *arch = a;
    return KVQ_OK;
}

kvq_status kvq_arch_from_config(const char *config_path, kvq_arch *arch, kvq_err *err) {
    json_error_t je;
    json_t *cfg = json_load_file(config_path, JSON_REJECT_DUPLICATES, &je);
    if (!cfg) {
        FILE *f = fopen(config_path, "rb");
        if (!f)
            return kvq_err_set(err, KVQ_ERR_MISSING, "%s: cannot open config", config_path);
        fclose(f);
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: not valid JSON (line %d): %s", config_path,
                           je.line, je.text);
    }
    kvq_status s = kvq_arch_from_json(cfg, config_path, arch, err);
    json_decref(cfg);
    return s;
}

// ---- manifest form ----------------------------------------------------------------

json_t *kvq_arch_to_json(const kvq_arch *a) {
    json_t *rope = json_pack("{s:s, s:f, s:f, s:f, s:f, s:i, s:f}", "type", rope_names[a->rope_type],
                             "theta", a->rope_theta, "factor", a->rope_factor, "low_freq_factor",
                             a->rope_low_freq_factor, "high_freq_factor", a->rope_high_freq_factor,
                             "original_max_position_embeddings", a->rope_original_max_position,
                             "partial_rotary_factor", a->partial_rotary_factor);
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:o, s:b, s:b, s:b, "
                     "s:i, s:i}",
                     "family", fam[a->family].name, "hf_class", a->hf_class, "hidden_size",
                     a->hidden_size, "intermediate_size", a->intermediate_size, "n_layers",
                     a->n_layers, "n_heads", a->n_heads, "n_kv_heads", a->n_kv_heads, "head_dim",
                     a->head_dim, "vocab_size", a->vocab_size, "max_position_embeddings",
                     a->max_position_embeddings, "rms_norm_eps", a->rms_norm_eps, "rope", rope,
                     "tie_word_embeddings", a->tie_word_embeddings, "attention_bias",
                     a->attention_bias, "qk_norm", a->qk_norm, "bos_token_id", a->bos_token_id,
                     "eos_token_id", a->eos_token_id);
}

kvq_status kvq_arch_from_manifest(const json_t *j, kvq_arch *arch, kvq_err *err) {
    kvq_arch a;
    memset(&a, 0, sizeof a);
    const char *family, *cls, *rtype;
    int tie, bias, qkn;
    json_error_t je;
    if (json_unpack_ex((json_t *)j, &je, JSON_STRICT,
                       "{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:F, "
                       "s:{s:s, s:F, s:F, s:F, s:F, s:i, s:F}, s:b, s:b, s:b, s:i, s:i}",
                       "family", &family, "hf_class", &cls, "hidden_size", &a.hidden_size,
                       "intermediate_size", &a.intermediate_size, "n_layers", &a.n_layers,
                       "n_heads", &a.n_heads, "n_kv_heads", &a.n_kv_heads, "head_dim",
                       &a.head_dim, "vocab_size", &a.vocab_size, "max_position_embeddings",
                       &a.max_position_embeddings, "rms_norm_eps", &a.rms_norm_eps, "rope", "type",
                       &rtype, "theta", &a.rope_theta, "factor", &a.rope_factor, "low_freq_factor",
                       &a.rope_low_freq_factor, "high_freq_factor", &a.rope_high_freq_factor,
                       "original_max_position_embeddings", &a.rope_original_max_position,
                       "partial_rotary_factor", &a.partial_rotary_factor, "tie_word_embeddings",
                       &tie, "attention_bias", &bias, "qk_norm", &qkn, "bos_token_id",
                       &a.bos_token_id, "eos_token_id", &a.eos_token_id) != 0)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest architecture: %s", je.text);
    int f = 0;
    while (f < KVQ_ARCH_COUNT && strcmp(fam[f].name, family) != 0) f++;
    if (f == KVQ_ARCH_COUNT)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "manifest architecture: unknown family '%s'", family);
    int r = 0;
    while (r < 3 && strcmp(rope_names[r], rtype) != 0) r++;
    if (r == 3)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "manifest architecture: unknown rope type '%s'", rtype);
    if (a.hidden_size <= 0 || a.intermediate_size <= 0 || a.n_layers <= 0 || a.n_heads <= 0 ||
        a.n_kv_heads <= 0 || a.head_dim <= 0 || a.vocab_size <= 0 || a.n_heads % a.n_kv_heads)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest architecture: non-positive or inconsistent sizes");
    a.family = (kvq_arch_family)f;
    a.rope_type = (kvq_rope_type)r;
    snprintf(a.hf_class, sizeof a.hf_class, "%s", cls);
    a.tie_word_embeddings = tie;
    a.attention_bias = bias;
    a.qk_norm = qkn;
    *arch = a;
    return KVQ_OK;
}

// ---- limits and the shapes an architecture implies

kvq_status kvq_arch_check_limits(const kvq_arch *a, const char *what, kvq_err *err) {
    const struct { const char *k; int64_t v, max; } lim[] = {
        {"hidden_size", a->hidden_size, 1 << 16}, {"n_layers", a->n_layers, 1024},
        {"n_heads", a->n_heads, 1024},            {"n_kv_heads", a->n_kv_heads, 1024},
        {"head_dim", a->head_dim, 4096},          {"vocab_size", a->vocab_size, 1 << 22},
        {"intermediate_size", a->intermediate_size, 1 << 20}};
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (lim[i].v < 1 || lim[i].v > lim[i].max)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: architecture.%s %lld outside [1, %lld]", what, lim[i].k,
                               (long long)lim[i].v, (long long)lim[i].max);
    if (a->n_heads % a->n_kv_heads)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: architecture: %d attention heads are not a multiple of %d key/value heads",
                           what, a->n_heads, a->n_kv_heads);
    if (a->head_dim % 2) // rotary embeddings turn channel pairs: an odd head_dim has no model behind it
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: architecture.head_dim %d is odd (rotary embeddings need pairs)",
                           what, a->head_dim);
    if (a->max_position_embeddings < 1)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: architecture.max_position_embeddings %d is not positive", what,
                           a->max_position_embeddings);
    // The numbers the runtime computes with (a manifest is not parsed by kvq_arch_from_json's
    // getters): finite, and where the formulas mean something.
    const struct { const char *k; double v, lo, hi; } num[] = {
        {"rms_norm_eps", a->rms_norm_eps, 0, 1},      {"rope.theta", a->rope_theta, 0, 1e12},
        {"rope.factor", a->rope_factor, 0, 1e6},      {"rope.partial_rotary_factor", a->partial_rotary_factor, 0, 1}};
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++)
        if (!(num[i].v > num[i].lo && num[i].v <= num[i].hi)) // NaN fails too
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: architecture.%s %g outside (%g, %g]", what, num[i].k, num[i].v,
                               num[i].lo, num[i].hi);
    if ((int)(a->head_dim * a->partial_rotary_factor) < 2)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: architecture: partial_rotary_factor %g leaves no rotary pair of "
                           "head_dim %d", what, a->partial_rotary_factor, a->head_dim);
    if (a->rope_type == KVQ_ROPE_LLAMA3 &&
        !(a->rope_low_freq_factor > 0 && a->rope_high_freq_factor > a->rope_low_freq_factor &&
          a->rope_high_freq_factor < 1e6 && a->rope_original_max_position >= 1))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: architecture: llama3 rope needs 0 < low_freq_factor < "
                           "high_freq_factor and original_max_position_embeddings >= 1 (got %g, %g, %d)", what,
                           a->rope_low_freq_factor, a->rope_high_freq_factor, a->rope_original_max_position);
    const struct { const char *k; int v; } tok[] = {{"bos_token_id", a->bos_token_id}, {"eos_token_id", a->eos_token_id}};
    for (int i = 0; i < 2; i++)
        if (tok[i].v < -1 || tok[i].v >= a->vocab_size) // -1: none
            return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: architecture.%s %d is not an id of the %d-token vocabulary", what,
                               tok[i].k, tok[i].v, a->vocab_size);
    return KVQ_OK;
}

kvq_status kvq_arch_check_tensor_set(const kvq_arch *a, int (*has)(const char *name, void *ud), void *ud,
                                     const char *what, kvq_err *err) {
    char n[160];
#define NEED_T(...) do { snprintf(n, sizeof n, __VA_ARGS__); if (!has(n, ud)) goto missing; } while (0)
    NEED_T("model.embed_tokens.weight");
    if (!a->tie_word_embeddings && !has("lm_head.weight", ud))
        return kvq_err_set(err, KVQ_ERR_MISSING, "%s: no tensor 'lm_head.weight' and tie_word_embeddings is false", what);
    NEED_T("model.norm.weight");
    for (int l = 0; l < a->n_layers; l++) {
        const char *p = "model.layers";
        NEED_T("%s.%d.input_layernorm.weight", p, l);
        NEED_T("%s.%d.post_attention_layernorm.weight", p, l);
        snprintf(n, sizeof n, "%s.%d.self_attn.qkv_proj.weight", p, l);
        if (!(a->family == KVQ_ARCH_PHI3 || has(n, ud))) {
            NEED_T("%s.%d.self_attn.q_proj.weight", p, l);
            NEED_T("%s.%d.self_attn.k_proj.weight", p, l);
            NEED_T("%s.%d.self_attn.v_proj.weight", p, l);
        } else NEED_T("%s.%d.self_attn.qkv_proj.weight", p, l);
        snprintf(n, sizeof n, "%s.%d.self_attn.q_proj.bias", p, l);
        if (has(n, ud) || a->attention_bias || a->family == KVQ_ARCH_QWEN2) {
            NEED_T("%s.%d.self_attn.q_proj.bias", p, l);
            NEED_T("%s.%d.self_attn.k_proj.bias", p, l);
            NEED_T("%s.%d.self_attn.v_proj.bias", p, l);
        }
        if (a->qk_norm || a->family == KVQ_ARCH_QWEN3) {
            NEED_T("%s.%d.self_attn.q_norm.weight", p, l);
            NEED_T("%s.%d.self_attn.k_norm.weight", p, l);
        }
        NEED_T("%s.%d.self_attn.o_proj.weight", p, l);
        snprintf(n, sizeof n, "%s.%d.mlp.gate_up_proj.weight", p, l);
        if (!has(n, ud)) {
            NEED_T("%s.%d.mlp.gate_proj.weight", p, l);
            NEED_T("%s.%d.mlp.up_proj.weight", p, l);
        }
        NEED_T("%s.%d.mlp.down_proj.weight", p, l);
    }
#undef NEED_T
    return KVQ_OK;
missing:
    return kvq_err_set(err, KVQ_ERR_MISSING, "%s: no tensor '%s' (the architecture needs it)", what, n);
}

int kvq_arch_expected_shape(const kvq_arch *a, const char *name, int64_t shape[2], int *ndim) {
    const int64_t d = a->hidden_size, q = (int64_t)a->n_heads * a->head_dim, kv = (int64_t)a->n_kv_heads * a->head_dim,
                  f = a->intermediate_size, V = a->vocab_size, hd = a->head_dim;
    const struct { const char *n; int64_t r, c; } top[] = {
        {"model.embed_tokens.weight", V, d}, {"lm_head.weight", V, d}, {"model.norm.weight", d, 0}};
    for (size_t i = 0; i < 3; i++)
        if (!strcmp(name, top[i].n)) {
            shape[0] = top[i].r, shape[1] = top[i].c, *ndim = top[i].c ? 2 : 1;
            return 1;
        }
    int layer = -1, used = 0;
    if (sscanf(name, "model.layers.%d.%n", &layer, &used) != 1 || used == 0) return 0;
    const char *rest = name + used;
    const struct { const char *n; int64_t r, c; } per[] = {
        {"input_layernorm.weight", d, 0},        {"post_attention_layernorm.weight", d, 0},
        {"self_attn.q_proj.weight", q, d},       {"self_attn.k_proj.weight", kv, d},
        {"self_attn.v_proj.weight", kv, d},      {"self_attn.o_proj.weight", d, q},
        {"self_attn.qkv_proj.weight", q + 2 * kv, d},
        {"self_attn.q_proj.bias", q, 0},         {"self_attn.k_proj.bias", kv, 0},
        {"self_attn.v_proj.bias", kv, 0},        {"self_attn.q_norm.weight", hd, 0},
        {"self_attn.k_norm.weight", hd, 0},      {"mlp.gate_proj.weight", f, d},
        {"mlp.up_proj.weight", f, d},            {"mlp.down_proj.weight", d, f},
        {"mlp.gate_up_proj.weight", 2 * f, d}};
    for (size_t i = 0; i < sizeof per / sizeof per[0]; i++)
        if (!strcmp(rest, per[i].n)) {
            if (layer < 0 || layer >= a->n_layers) return -1;
            shape[0] = per[i].r, shape[1] = per[i].c, *ndim = per[i].c ? 2 : 1;
            return 1;
        }
    return 0;
}

kvq_status kvq_arch_check_shape(const kvq_arch *a, const char *name, const int64_t *shape, int ndim, const char *what,
                                kvq_err *err) {
    int64_t want[2];
    int wn = 0;
    const int k = kvq_arch_expected_shape(a, name, want, &wn);
    if (k < 0)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' belongs to a layer the architecture does not have (%d layers)",
                           what, name, a->n_layers);
    if (k == 0) return KVQ_OK;
    if (ndim != wn || shape[0] != want[0] || (wn == 2 && shape[1] != want[1])) {
        char got[64], exp[64];
        if (ndim == 1) snprintf(got, sizeof got, "(%lld)", (long long)shape[0]);
        else if (ndim == 2) snprintf(got, sizeof got, "(%lld, %lld)", (long long)shape[0], (long long)shape[1]);
        else snprintf(got, sizeof got, "%d dimensions", ndim);
        if (wn == 1) snprintf(exp, sizeof exp, "(%lld)", (long long)want[0]);
        else snprintf(exp, sizeof exp, "(%lld, %lld)", (long long)want[0], (long long)want[1]);
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' has shape %s, the architecture (config) implies %s", what,
                           name, got, exp);
    }
    return KVQ_OK;
}
