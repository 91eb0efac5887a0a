// Transformer forward pass (see model.h). Weights are decoded once at load into fp32
// or bf16 matrices; q/k/v (or Phi-3's qkv_proj) are held as one fused matrix and
// gate/up as another, so each layer runs three big matmuls plus o_proj. Activations
// live in a per-model arena sized for max_batch tokens.
#include "libconv/runtime/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cpu/hqx.h"
#include "kernels/cpu/pq.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rope.h"
#include "libconv/runtime/backend.h"
#include "libconv/kv/kvcache_default.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/kv/kvsynth.h"
#include "libconv/runtime/weights.h"

typedef kvq_mat mat;

typedef struct {
    float *attn_norm, *ffn_norm;  // (d)
    float *q_norm, *k_norm;       // (head_dim), Qwen3
    float *qkv_bias;              // (q_dim + 2 kv_dim) or NULL
    mat qkv, o, gate_up, down;    // (q+2kv, d), (d, q), (2 ffn, d), (d, ffn)
} layer;

struct kvq_model {
    kvq_arch a;
    kvq_model_opts o;
    kvq_backend *be;
    int q_dim, kv_dim, qkv_dim, rot_dim;
    float *inv_freq;    // backend memory, like the norms and biases below
    mat embed, lm_head; // lm_head.data == embed.data when tied; embed is looked up on the host
    int tied;
    float *final_norm;
    layer *L;
    kvq_kvcache *cache;      // the CPU backend's cache (codecs plug in here); NULL on a device
    kvq_kvcache *kv_desc;    // a device running a KV codec: the codec cache it was built from
                             // (its states, for reports); the device holds the cache itself
    kvq_weights *src;        // kept open: the tokenizer is opened from it (a .kvq's from its bytes)
    const char *tok_path; // borrowed from src
    // activation arena for max_batch tokens (backend memory)
    float *x, *xn, *qkv, *q, *k, *v, *att, *gu, *h;
    float *xh;            // host embeddings of a chunk (== x on a host backend)
    float *lg;            // device backends: logits of a chunk
    size_t lg_cap;
    float *lg1;           // device backends: logits of one token (a decode step; fixed for graphs)
    float *lgh;           // host backends: logits kvq_model_forward_argmax reduces (lgh_rows × vocab floats)
    int lgh_rows;
    // several sequences (kvq_model_set_seqs): n_seq caches, cur_seq the one chunks of one
    // sequence use; on a host backend the model holds them (seqc, owned; cache == seqc[cur_seq]),
    // a device backend its own
    int n_seq, cur_seq;
    kvq_kvcache **seqc;
    float *lgs;           // device backends: logits of a step of several sequences (fixed for graphs)
    float *lk;            // logits kvq_model_forward_keep leaves in backend memory (lk_cap floats)
    size_t lk_cap;
};

kvq_model_opts kvq_model_opts_default(void) {
    return (kvq_model_opts){.store = KVQ_WEIGHTS_AUTO, .n_threads = 0, .max_ctx = 0, .kv_fp16 = 0, .max_batch = 0,
                            .exec = KVQ_EXEC_INT8};
}

// ---- loading

static void mat_free(mat *m) {
    kvq_mat_free_host(m);
    m->n_part = 0;
    m->n_pq = 0;
}

// Hands a loaded matrix to the backend (which may upload it and free the host arrays).
static kvq_status adopt(kvq_model *md, kvq_weights *s, mat *m, int keep_host, const char *name, kvq_err *err) {
    kvq_status r = md->be->ops->mat_adopt(md->be, m, keep_host, err);
    if (r) kvq_err_prefix(err, "%s: '%s'", kvq_weights_path(s), name);
    return r;
}

// Moves a host vector of n floats into backend memory (a host backend keeps it).
static kvq_status to_backend(kvq_model *m, float **v, size_t n, kvq_err *err) {
    if (!*v || m->be->ops->host) return KVQ_OK;
    float *d = m->be->ops->alloc(m->be, n);
    if (!d) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of %s memory for a vector of %zu floats", m->be->ops->name, n);
    kvq_status r = m->be->ops->upload(m->be, d, *v, n, err);
    free(*v);
    *v = d;
    return r;
}

enum { KIND_HQX = 1, KIND_PQX = 2, KIND_QETX = 3, KIND_QETG = 4 }; // QETX: pqx blocks with the 3-level swap
                                                                  // tree; QETG: with any other (qetg)

// Packs tensor `name` into block i of m when the model runs packed and the tensor has an
// execution layout: hqx (HyperQuant/RTN) into m->part[i], else pqx (PQ) into m->pq[i]; *kind
// says which. @return KVQ_OK (packed), KVQ_ERR_UNSUPPORTED (decode it instead) or an error.
static kvq_status try_pack(const kvq_model *md, kvq_weights *s, const char *name, int rows, int cols, mat *m, int i,
                           int *kind, kvq_err *err) {
    if (md->o.exec == KVQ_EXEC_DECODED) return KVQ_ERR_UNSUPPORTED;
    kvq_err e2 = {0};
    int64_t hr, hc;
    kvq_status r = kvq_weights_get_hqx(s, name, &m->part[i], &e2);
    if (r == KVQ_OK) *kind = KIND_HQX, hr = m->part[i].rows, hc = m->part[i].cols;
    else if (r == KVQ_ERR_UNSUPPORTED) {
        r = kvq_weights_get_pqx(s, name, &m->pq[i], &e2);
        if (r == KVQ_ERR_UNSUPPORTED) return r;
        *kind = m->pq[i].qetg ? KIND_QETG : m->pq[i].levels ? KIND_QETX : KIND_PQX, hr = m->pq[i].rows, hc = m->pq[i].cols;
    }
    if (r) { *err = e2; return r; }
    if (hr != rows || hc != cols) {
        kvq_hqx_free(&m->part[i]);
        kvq_pqx_free(&m->pq[i]);
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' has shape (%lld, %lld), expected (%d, %d)",
                           kvq_weights_path(s), name, (long long)hr, (long long)hc, rows, cols);
    }
    return KVQ_OK;
}

// Takes ownership of f (rows × cols fp32) and stores it as the policy says.
static kvq_status mat_from_f32(mat *m, float *f, int rows, int cols, kvq_weight_store st) {
    size_t n = (size_t)rows * cols;
    int bf = st == KVQ_WEIGHTS_BF16;
    if (st == KVQ_WEIGHTS_AUTO) {
        bf = 1;
        for (size_t i = 0; i < n && bf; i++) bf = kvq_bf16_to_f32(kvq_f32_to_bf16(f[i])) == f[i] || isnan(f[i]);
    }
    m->rows = rows;
    m->cols = cols;
    if (!bf) { m->dt = KVQ_DTYPE_F32; m->data = f; return KVQ_OK; }
    uint16_t *b = malloc(n * 2);
    if (!b) { free(f); return KVQ_ERR_NOMEM; }
    kvq_dtype_from_f32(KVQ_DTYPE_BF16, f, n, b);
    free(f);
    m->dt = KVQ_DTYPE_BF16;
    m->data = b;
    return KVQ_OK;
}

// Whether tensor `name` has exactly rows × cols elements (cols == 0: a vector of rows).
static kvq_status count_check(kvq_weights *s, const char *name, int64_t n, int rows, int cols, kvq_err *err) {
    int64_t want = (int64_t)rows * (cols ? cols : 1);
    return n == want ? KVQ_OK
                     : kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' has %lld elements, the architecture needs %lld",
                                   kvq_weights_path(s), name, (long long)n, (long long)want);
}
// Reads tensor `name` as fp32, count_check'd.
static kvq_status get(kvq_weights *s, const char *name, int rows, int cols, float **out, kvq_err *err) {
    int64_t n = 0;
    *out = NULL;
    if (!kvq_weights_has(s, name, NULL, NULL))
        return kvq_err_set(err, KVQ_ERR_MISSING, "%s: tensor '%s' not found", kvq_weights_path(s), name);
    kvq_status st = kvq_weights_get_f32(s, name, out, &n, err);
    if (!st && (st = count_check(s, name, n, rows, cols, err))) free(*out), *out = NULL;
    return st;
}

// A tensor stored as bf16 (kvq_weights_get_bf16), held as it is unless the policy is fp32: the values
// get + mat_from_f32 would give, without their trip through float32 (an 8B bf16 .kvq loaded in 116 s on
// the GPU machine, 2 minutes of conversions: session 23). Into dst (rows × cols elements) when given, else a
// buffer of its own in *out. KVQ_ERR_UNSUPPORTED (err untouched): read it with get.
static kvq_status get_bf16(kvq_weights *s, const char *name, int rows, int cols, kvq_weight_store st, uint16_t *dst,
                           uint16_t **out, kvq_err *err) {
    if (out) *out = NULL;
    if (st == KVQ_WEIGHTS_F32 || !kvq_weights_has(s, name, NULL, NULL)) return KVQ_ERR_UNSUPPORTED;
    int64_t n = (int64_t)rows * (cols ? cols : 1);
    kvq_err e2 = {0};
    kvq_status r = dst ? kvq_weights_read_bf16(s, name, dst, n, &e2) : kvq_weights_get_bf16(s, name, out, &n, &e2);
    if (r == KVQ_ERR_UNSUPPORTED) return r;
    if (r) { *err = e2; return r; }
    if (!dst && (r = count_check(s, name, n, rows, cols, err))) free(*out), *out = NULL;
    return r;
}

static kvq_status get_mat(const kvq_model *md, kvq_weights *s, const char *name, int rows, int cols,
                          kvq_weight_store st, mat *m, kvq_err *err) {
    float *f;
    m->rows = rows;
    m->cols = cols;
    int kind = 0;
    if (md->o.exec != KVQ_EXEC_DECODED) { // a row-blocked tensor (embedding, lm_head): up to 3 row-block parts
        int np = 0;
        int64_t r0[3];
        kvq_status r = kvq_weights_get_hqx_parts(s, name, m->part, 3, &np, r0, err);
        if (r != KVQ_OK && r != KVQ_ERR_UNSUPPORTED) return r;
        if (r == KVQ_OK && np > 0) {
            int64_t got = 0;
            for (int p = 0; p < np; p++) got += m->part[p].rows, m->row0[p] = (int)r0[p];
            m->n_part = np;
            if (got != rows || m->part[0].cols != cols) {
                mat_free(m);
                return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: tensor '%s' is %lld x %lld, the architecture needs %d x %d",
                                   kvq_weights_path(s), name, (long long)got, (long long)m->part[0].cols, rows, cols);
            }
            m->stored = kvq_weights_stored_bytes(s, name);
            return KVQ_OK;
        }
    }
    kvq_status r = try_pack(md, s, name, rows, cols, m, 0, &kind, err);
    if (r == KVQ_OK) {
        *(kind == KIND_HQX ? &m->n_part : &m->n_pq) = 1;
        m->stored = kvq_weights_stored_bytes(s, name);
        return KVQ_OK;
    }
    if (r != KVQ_ERR_UNSUPPORTED) return r;
    uint16_t *b;
    r = get_bf16(s, name, rows, cols, st, NULL, &b, err);
    if (r == KVQ_OK) {
        m->dt = KVQ_DTYPE_BF16;
        m->data = b;
        return KVQ_OK;
    }
    if (r != KVQ_ERR_UNSUPPORTED) return r;
    r = get(s, name, rows, cols, &f, err);
    if (r) return r;
    if ((r = mat_from_f32(m, f, rows, cols, st))) return kvq_err_set(err, r, "%s: out of memory for '%s'", kvq_weights_path(s), name);
    return KVQ_OK;
}

// get_mat, then the matrix goes to the backend.
static kvq_status get_mat_be(kvq_model *md, kvq_weights *s, const char *name, int rows, int cols, kvq_weight_store st,
                             mat *m, kvq_err *err) {
    kvq_status r = get_mat(md, s, name, rows, cols, st, m, err);
    return r ? r : adopt(md, s, m, 0, name, err);
}

// Concatenates row blocks of several tensors into one matrix (fused qkv / gate_up).
static kvq_status get_cat(kvq_model *md, kvq_weights *s, const char *const *names, const int *rows, int n,
                          int cols, kvq_weight_store st, mat *m, kvq_err *err) {
    int total = 0;
    for (int i = 0; i < n; i++) total += rows[i];
    m->rows = total;
    m->cols = cols;
    // packed only when every block is, in the same layout (one product per block)
    int kind0 = 0;
    for (int i = 0; i < n; i++) {
        int kind = 0;
        kvq_status r = try_pack(md, s, names[i], rows[i], cols, m, i, &kind, err);
        if (r == KVQ_OK && (i == 0 || kind == kind0)) {
            kind0 = kind;
            m->row0[i] = i ? m->row0[i - 1] + rows[i - 1] : 0;
            *(kind == KIND_HQX ? &m->n_part : &m->n_pq) = i + 1;
            m->stored += kvq_weights_stored_bytes(s, names[i]);
            continue;
        }
        if (r == KVQ_OK) { // mixed layouts: this block is not counted yet, free it too
            kvq_hqx_free(&m->part[i]);
            kvq_pqx_free(&m->pq[i]);
            r = KVQ_ERR_UNSUPPORTED;
        }
        mat_free(m);
        m->stored = 0;
        if (r != KVQ_ERR_UNSUPPORTED) return r;
        break;
    }
    if (m->n_part == n || m->n_pq == n) return adopt(md, s, m, 0, names[0], err);
    if (st != KVQ_WEIGHTS_F32) { // every block stored as bf16 (get_bf16): concatenated as they are
        uint16_t *b = malloc(sizeof(uint16_t) * total * (size_t)cols);
        if (!b) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for '%s'", kvq_weights_path(s), names[0]);
        size_t o = 0;
        kvq_status r = KVQ_OK;
        for (int i = 0; i < n && !r; i++) { // (a missing block: UNSUPPORTED here, get names it below)
            r = get_bf16(s, names[i], rows[i], cols, st, b + o, NULL, err);
            o += (size_t)rows[i] * cols;
        }
        if (!r) {
            m->dt = KVQ_DTYPE_BF16;
            m->data = b;
            return adopt(md, s, m, 0, names[0], err);
        }
        free(b);
        if (r != KVQ_ERR_UNSUPPORTED) return r;
    }
    float *f = malloc(sizeof(float) * total * (size_t)cols);
    if (!f) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for '%s'", kvq_weights_path(s), names[0]);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        float *p;
        kvq_status r = get(s, names[i], rows[i], cols, &p, err);
        if (r) { free(f); return r; }
        memcpy(f + o, p, sizeof(float) * rows[i] * (size_t)cols);
        o += (size_t)rows[i] * cols;
        free(p);
    }
    kvq_status r = mat_from_f32(m, f, total, cols, st);
    if (r) return kvq_err_set(err, r, "%s: out of memory for '%s'", kvq_weights_path(s), names[0]);
    return adopt(md, s, m, 0, names[0], err);
}

static kvq_status check_arch(const kvq_arch *a, const char *path, kvq_err *err) {
    if (a->hidden_size <= 0 || a->n_layers <= 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 ||
        a->head_dim <= 0 || a->vocab_size <= 0 || a->intermediate_size <= 0)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: architecture has a non-positive dimension", path);
    if (a->n_heads % a->n_kv_heads)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                           path, a->n_heads, a->n_kv_heads);
    if ((int64_t)a->n_heads * a->head_dim > (1 << 20) || (int64_t)a->intermediate_size > (1 << 22) ||
        (int64_t)a->hidden_size > (1 << 20) || a->vocab_size > (1 << 24))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "%s: dimensions too large for this runtime", path);
    return KVQ_OK;
}

static kvq_status alloc_arena(kvq_model *m) {
    size_t B = m->o.max_batch, d = m->a.hidden_size, ffn = m->a.intermediate_size;
    float **bufs[] = {&m->x, &m->xn, &m->qkv, &m->q, &m->k, &m->v, &m->att, &m->gu, &m->h};
    size_t sizes[] = {d, d, m->qkv_dim, m->q_dim, m->kv_dim, m->kv_dim, m->q_dim, 2 * ffn, ffn};
    for (int i = 0; i < 9; i++)
        if (!(*bufs[i] = m->be->ops->alloc(m->be, B * sizes[i]))) return KVQ_ERR_NOMEM;
    if (m->be->ops->host) m->xh = m->x;
    else if (!(m->xh = malloc(sizeof(float) * B * d)) || !(m->lg1 = m->be->ops->alloc(m->be, m->a.vocab_size)))
        return KVQ_ERR_NOMEM;
    return KVQ_OK;
}

// Norm weights, biases and RoPE frequencies go to the backend's memory.
static kvq_status vectors_to_backend(kvq_model *m, kvq_err *err) {
    const size_t d = m->a.hidden_size, hd = m->a.head_dim;
    kvq_status r = to_backend(m, &m->final_norm, d, err);
    if (!r) r = to_backend(m, &m->inv_freq, m->rot_dim / 2 + 1, err);
    for (int l = 0; l < m->a.n_layers && !r; l++) {
        layer *L = &m->L[l];
        if (!r) r = to_backend(m, &L->attn_norm, d, err);
        if (!r) r = to_backend(m, &L->ffn_norm, d, err);
        if (!r) r = to_backend(m, &L->q_norm, hd, err);
        if (!r) r = to_backend(m, &L->k_norm, hd, err);
        if (!r) r = to_backend(m, &L->qkv_bias, m->qkv_dim, err);
    }
    return r;
}

static kvq_status load(kvq_model *m, kvq_weights *s, kvq_err *err) {
    const kvq_arch *a = &m->a;
    const char *path = kvq_weights_path(s);
    int d = a->hidden_size, ffn = a->intermediate_size, hd = a->head_dim;
    kvq_weight_store st = m->o.store;
    kvq_status r;
    char n[4][160];

    // The embedding is looked up on the host (a row per token); the lm_head is a product.
    if ((r = get_mat(m, s, "model.embed_tokens.weight", a->vocab_size, d, st, &m->embed, err))) return r;
    m->tied = !kvq_weights_has(s, "lm_head.weight", NULL, NULL);
    if (m->tied && !a->tie_word_embeddings) // an untied model without its output matrix
        return kvq_err_set(err, KVQ_ERR_MISSING, "%s: tensor 'lm_head.weight' not found (tie_word_embeddings is false)",
                           path);
    if (m->tied) {
        m->lm_head = m->embed;
        if ((r = adopt(m, s, &m->lm_head, 1, "model.embed_tokens.weight", err))) return r;
    } else if ((r = get_mat_be(m, s, "lm_head.weight", a->vocab_size, d, st, &m->lm_head, err)))
        return r;
    if (!m->tied) // the embedding's own packed arrays, only looked up on the host: their compact form
        for (int p = 0; p < m->embed.n_part; p++) kvq_hqx_compact(&m->embed.part[p]);
    m->embed.held = kvq_mat_host_bytes(&m->embed);
    if ((r = get(s, "model.norm.weight", d, 0, &m->final_norm, err))) return r;
    if (!(m->L = calloc(a->n_layers, sizeof *m->L))) return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path);

    for (int l = 0; l < a->n_layers; l++) {
        layer *L = &m->L[l];
        char p[96];
        snprintf(p, sizeof p, "model.layers.%d.", l);
#define NM(i, suffix) (snprintf(n[i], sizeof n[i], "%s%s", p, suffix), n[i])
        if ((r = get(s, NM(0, "input_layernorm.weight"), d, 0, &L->attn_norm, err))) return r;
        if ((r = get(s, NM(0, "post_attention_layernorm.weight"), d, 0, &L->ffn_norm, err))) return r;
        if (a->family == KVQ_ARCH_PHI3 || kvq_weights_has(s, NM(0, "self_attn.qkv_proj.weight"), NULL, NULL)) {
            if ((r = get_mat_be(m, s, NM(0, "self_attn.qkv_proj.weight"), m->qkv_dim, d, st, &L->qkv, err))) return r;
        } else {
            const char *names[3] = {NM(0, "self_attn.q_proj.weight"), NM(1, "self_attn.k_proj.weight"),
                                    NM(2, "self_attn.v_proj.weight")};
            const int rows[3] = {m->q_dim, m->kv_dim, m->kv_dim};
            if ((r = get_cat(m, s, names, rows, 3, d, st, &L->qkv, err))) return r;
        }
        if (kvq_weights_has(s, NM(0, "self_attn.q_proj.bias"), NULL, NULL) || a->attention_bias || a->family == KVQ_ARCH_QWEN2) {
            if (!(L->qkv_bias = malloc(sizeof(float) * m->qkv_dim)))
                return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for layer %d's biases", path, l);
            const char *bn[3] = {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"};
            const int rows[3] = {m->q_dim, m->kv_dim, m->kv_dim};
            for (int i = 0, o = 0; i < 3; o += rows[i], i++) {
                float *b;
                if ((r = get(s, NM(0, bn[i]), rows[i], 0, &b, err))) return r;
                memcpy(L->qkv_bias + o, b, sizeof(float) * rows[i]);
                free(b);
            }
        }
        if (a->qk_norm || a->family == KVQ_ARCH_QWEN3) {
            if ((r = get(s, NM(0, "self_attn.q_norm.weight"), hd, 0, &L->q_norm, err))) return r;
            if ((r = get(s, NM(0, "self_attn.k_norm.weight"), hd, 0, &L->k_norm, err))) return r;
        }
        if ((r = get_mat_be(m, s, NM(0, "self_attn.o_proj.weight"), d, m->q_dim, st, &L->o, err))) return r;
        if (kvq_weights_has(s, NM(0, "mlp.gate_up_proj.weight"), NULL, NULL)) {
            if ((r = get_mat_be(m, s, NM(0, "mlp.gate_up_proj.weight"), 2 * ffn, d, st, &L->gate_up, err))) return r;
        } else {
            const char *names[2] = {NM(0, "mlp.gate_proj.weight"), NM(1, "mlp.up_proj.weight")};
            const int rows[2] = {ffn, ffn};
            if ((r = get_cat(m, s, names, rows, 2, d, st, &L->gate_up, err))) return r;
        }
        if ((r = get_mat_be(m, s, NM(0, "mlp.down_proj.weight"), d, ffn, st, &L->down, err))) return r;
#undef NM
    }
    return KVQ_OK;
}

kvq_status kvq_model_open(const char *path, const kvq_model_opts *opts, kvq_model **out, kvq_err *err) {
    *out = NULL;
    kvq_weights *s = NULL;
    kvq_status r = kvq_weights_open(path, &s, err);
    if (r) return r;
    kvq_model *m = calloc(1, sizeof *m);
    if (!m) { kvq_weights_close(s); return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path); }
    m->a = *kvq_weights_arch(s);
    m->o = opts ? *opts : kvq_model_opts_default();
    const kvq_arch *a = &m->a;
    if ((r = check_arch(a, path, err))) goto fail;
    if (m->o.max_batch <= 0) m->o.max_batch = 512;
    if (m->o.max_ctx <= 0) // a 128k-position default would allocate tens of GB of cache
        m->o.max_ctx = a->max_position_embeddings > 0 && a->max_position_embeddings < 4096 ? a->max_position_embeddings : 4096;
    m->q_dim = a->n_heads * a->head_dim;
    m->kv_dim = a->n_kv_heads * a->head_dim;
    m->qkv_dim = m->q_dim + 2 * m->kv_dim;
    double prf = a->partial_rotary_factor > 0 ? a->partial_rotary_factor : 1.0;
    m->rot_dim = (int)(a->head_dim * prf);
    m->rot_dim -= m->rot_dim % 2;
    if (!(m->inv_freq = malloc(sizeof(float) * (m->rot_dim / 2 + 1)))) { r = KVQ_ERR_NOMEM; goto nomem; }
    kvq_rope_params rp = {.type = a->rope_type == KVQ_ROPE_LINEAR   ? KVQ_ROPE_SCALE_LINEAR
                                  : a->rope_type == KVQ_ROPE_LLAMA3 ? KVQ_ROPE_SCALE_LLAMA3
                                                                    : KVQ_ROPE_SCALE_NONE,
                          .theta = a->rope_theta, .factor = a->rope_factor,
                          .low_freq_factor = a->rope_low_freq_factor, .high_freq_factor = a->rope_high_freq_factor,
                          .original_max_position = a->rope_original_max_position};
    if (rp.type != KVQ_ROPE_SCALE_NONE && !(rp.factor > 0)) {
        r = kvq_err_set(err, KVQ_ERR_FORMAT, "%s: rope scaling factor %g must be positive", path, rp.factor);
        goto fail;
    }
    kvq_rope_freqs(m->inv_freq, m->rot_dim, &rp);
    if ((r = (m->o.backend ? m->o.backend : kvq_backend_cpu_new)(&m->o, a, &m->be, err))) {
        kvq_err_prefix(err, "%s", path);
        goto fail;
    }
    if ((r = load(m, s, err))) goto fail;
    m->tok_path = kvq_weights_tokenizer_path(s);
    if ((r = vectors_to_backend(m, err)) || (r = m->be->ops->ready(m->be, err))) {
        kvq_err_prefix(err, "%s", path);
        goto fail;
    }
    if ((r = alloc_arena(m))) goto nomem;
    if (m->be->ops->host &&
        (r = kvq_kvcache_default_new(a->n_layers, a->n_kv_heads, a->head_dim, m->o.max_ctx, m->o.kv_fp16, &m->cache,
                                     err))) {
        kvq_err_prefix(err, "%s", path);
        goto fail;
    }
    m->src = s;
    m->n_seq = 1;
    *out = m;
    return KVQ_OK;
nomem:
    kvq_err_set(err, r, "%s: out of memory loading the model", path);
fail:
    kvq_weights_close(s);
    kvq_model_close(m);
    return r;
}

// Frees a matrix: the backend's copy, then the host arrays.
static void mat_drop(kvq_model *m, mat *w, int host) {
    if (m->be) m->be->ops->mat_release(m->be, w);
    if (host) mat_free(w);
}

void kvq_model_close(kvq_model *m) {
    if (!m) return;
    // vectors live in backend memory once moved there; before that (a failed open) on the host
    void (*rel)(kvq_backend *, float *) = m->be ? m->be->ops->release : NULL;
#define VFREE(p) (rel ? rel(m->be, p) : free(p))
    if (m->L)
        for (int l = 0; l < m->a.n_layers; l++) {
            layer *L = &m->L[l];
            VFREE(L->attn_norm); VFREE(L->ffn_norm); VFREE(L->q_norm); VFREE(L->k_norm); VFREE(L->qkv_bias);
            mat_drop(m, &L->qkv, 1); mat_drop(m, &L->o, 1); mat_drop(m, &L->gate_up, 1); mat_drop(m, &L->down, 1);
        }
    free(m->L);
    mat_drop(m, &m->lm_head, !m->tied);
    mat_free(&m->embed);
    VFREE(m->final_norm);
    VFREE(m->inv_freq);
    kvq_weights_close(m->src);
    float *bufs[] = {m->x, m->xn, m->qkv, m->q, m->k, m->v, m->att, m->gu, m->h, m->lg, m->lg1, m->lgs, m->lk};
    for (int i = 0; i < 13; i++) VFREE(bufs[i]);
#undef VFREE
    if (m->be && !m->be->ops->host) free(m->xh);
    free(m->lgh);
    if (m->seqc) { // m->cache is one of them
        for (int i = 0; i < m->n_seq; i++) m->seqc[i]->ops->free(m->seqc[i]);
        free(m->seqc);
    } else if (m->cache) m->cache->ops->free(m->cache);
    if (m->kv_desc) m->kv_desc->ops->free(m->kv_desc);
    if (m->be) m->be->ops->destroy(m->be);
    free(m);
}

const kvq_arch *kvq_model_arch(const kvq_model *m) { return &m->a; }
const char *kvq_model_tokenizer_path(const kvq_model *m) { return m->tok_path; }
kvq_status kvq_model_tokenizer(const kvq_model *m, kvq_tokenizer **out, kvq_err *err) {
    return kvq_weights_tokenizer(m->src, out, err);
}
void kvq_model_set_threads(kvq_model *m, int n) { m->o.n_threads = n; }
kvq_kvcache *kvq_model_kvcache(kvq_model *m) { return m->cache; }
const kvq_kvcache *kvq_model_kvcache_desc(const kvq_model *m) { return m->cache ? m->cache : m->kv_desc; }
int kvq_model_max_ctx(const kvq_model *m) { return m->cache ? m->cache->max_ctx : m->be->max_ctx; }
const char *kvq_model_backend_name(const kvq_model *m) { return m->be->ops->name; }

static size_t mat_bytes(const mat *x) { return x->held; }

// Reads a matrix's held bytes (the packed codes: what a decode step streams); host only.
static uint64_t mat_stream(const mat *x, int nt) {
    if (x->n_pq) {
        uint64_t s = 0;
        for (int i = 0; i < x->n_pq; i++) {
            const kvq_pqx *p = &x->pq[i];
            for (int k = 0; k < p->stages; k++) {
                if (p->idx[k]) s += kvq_stream_read(p->idx[k], kvq_pqx_idx_bytes(p, k) - kvq_pqx_hi_bytes(p, k), nt);
                if (p->hi[k]) s += kvq_stream_read(p->hi[k], kvq_pqx_hi_bytes(p, k), nt);
            }
        }
        return s;
    }
    if (!x->n_part) return x->data ? kvq_stream_read(x->data, mat_bytes(x), nt) : 0;
    uint64_t s = 0;
    for (int i = 0; i < x->n_part; i++) {
        const kvq_hqx *p = &x->part[i];
        if (p->q) s += kvq_stream_read(p->q, (size_t)(p->rows * p->cols_p) * p->vbits / 8, nt);
    }
    return s;
}

size_t kvq_model_weight_bytes(const kvq_model *m) {
    size_t d = m->a.hidden_size, b = mat_bytes(&m->lm_head) + d * 4;
    for (int l = 0; l < m->a.n_layers; l++) {
        const layer *L = &m->L[l];
        b += mat_bytes(&L->qkv) + mat_bytes(&L->o) + mat_bytes(&L->gate_up) + mat_bytes(&L->down) + 2 * d * 4;
    }
    return b;
}

static void mem_add(kvq_model_mem *o, const mat *x) {
    size_t b = mat_bytes(x);
    o->held += b;
    if (x->n_part || x->n_pq) { o->packed += b; o->packed_stored += x->stored; }
    else o->dense += b;
}

void kvq_model_memory(const kvq_model *m, kvq_model_mem *o) {
    memset(o, 0, sizeof *o);
    const size_t d = m->a.hidden_size;
    mem_add(o, &m->embed);
    if (!m->tied || !m->be->ops->host) mem_add(o, &m->lm_head); // a device holds its own copy
    o->held += d * 4;
    for (int l = 0; l < m->a.n_layers; l++) {
        const layer *L = &m->L[l];
        mem_add(o, &L->qkv); mem_add(o, &L->o); mem_add(o, &L->gate_up); mem_add(o, &L->down);
        o->held += 2 * d * 4 + (L->q_norm ? 2 * (size_t)m->a.head_dim * 4 : 0) + (L->qkv_bias ? (size_t)m->qkv_dim * 4 : 0);
    }
    o->scratch = m->be->ops->scratch_bytes(m->be);
    if (!m->be->ops->host) o->device = o->held - m->embed.held;
    const kvq_kvcache *c = m->cache;
    o->kv = c ? (size_t)(c->ops->bits_per_element(c) / 8.0 * 2.0 * c->n_layers * c->n_kv_heads * c->head_dim *
                         (double)c->max_ctx)
              : m->be->ops->kv_bytes(m->be);
    if (c && m->seqc) o->kv *= (size_t)m->n_seq; // the sequences' caches are alike
    o->kv_exec = c && c->ops->exec_bytes ? c->ops->exec_bytes(c) : 0;
}

uint64_t kvq_model_stream_weights(const kvq_model *m) {
    int nt = m->o.n_threads;
    uint64_t s = mat_stream(&m->lm_head, nt);
    for (int l = 0; l < m->a.n_layers; l++) {
        const layer *L = &m->L[l];
        s += mat_stream(&L->qkv, nt) + mat_stream(&L->o, nt) + mat_stream(&L->gate_up, nt) + mat_stream(&L->down, nt);
    }
    return s;
}

// An empty codec cache with c's codec, policy and states (tables included: a .kvq's stored ones
// stay), for another sequence: c's manifest section and tables saved, then loaded
// (kvq_kvcache_codec_save / _load, the .kvq round trip) at max_ctx positions.
static kvq_status codec_clone(const kvq_kvcache *c, int max_ctx, kvq_kvcache **out, kvq_err *err) {
    const kvq_kvcache_policy *pol = kvq_kvcache_codec_policy(c);
    json_t *sec = NULL;
    float *blob = NULL;
    size_t nf = 0;
    kvq_status r = kvq_kvcache_codec_save(c, max_ctx, &sec, &blob, &nf, err);
    if (!r)
        r = kvq_kvcache_codec_load(sec, blob, nf, max_ctx,
                                   pol->shadow ? KVQ_KV_EVAL_SHADOW : pol->chunks ? KVQ_KV_EVAL_CHUNKS : KVQ_KV_EVAL_NONE, out, err);
    json_decref(sec);
    free(blob);
    return r;
}

// n caches for several sequences on a host backend: c0 first, then n - 1 new ones like it (a
// codec's clones, else default caches). On failure every new one is freed and c0 is kept.
static kvq_status seq_caches(const kvq_model *m, kvq_kvcache *c0, int n, kvq_kvcache ***out, kvq_err *err) {
    const kvq_arch *a = &m->a;
    kvq_kvcache **c = calloc((size_t)n, sizeof *c);
    if (!c) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for %d sequences", n);
    c[0] = c0;
    kvq_status r = KVQ_OK;
    for (int i = 1; i < n && !r; i++)
        r = kvq_kvcache_codec_policy(c0) ? codec_clone(c0, m->o.max_ctx, &c[i], err)
                                         : kvq_kvcache_default_new(a->n_layers, a->n_kv_heads, a->head_dim, m->o.max_ctx,
                                                                   m->o.kv_fp16, &c[i], err);
    if (r) {
        for (int i = 1; i < n; i++)
            if (c[i]) c[i]->ops->free(c[i]);
        free(c);
        return r;
    }
    *out = c;
    return KVQ_OK;
}

kvq_status kvq_model_set_kvcache(kvq_model *m, kvq_kvcache *c, kvq_err *err) {
    if (!c || c->n_layers != m->a.n_layers || c->n_kv_heads != m->a.n_kv_heads || c->head_dim != m->a.head_dim)
        return kvq_err_set(err, KVQ_ERR_ARG, "KV cache shape (%d layers, %d heads, dim %d) does not match the model (%d, %d, %d)",
                           c ? c->n_layers : 0, c ? c->n_kv_heads : 0, c ? c->head_dim : 0,
                           m->a.n_layers, m->a.n_kv_heads, m->a.head_dim);
    if (!m->cache) { // a device backend builds its own cache in the codec's device layout, one per sequence
        if (!m->be->ops->kv_codec)
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "KV-cache codecs do not run on the %s backend", m->be->ops->name);
        kvq_status r = m->be->ops->kv_codec(m->be, c, err);
        if (r) return r;
        if (m->kv_desc) m->kv_desc->ops->free(m->kv_desc);
        m->kv_desc = c;
        return KVQ_OK;
    }
    if (m->n_seq > 1) { // every sequence gets a clone of the codec cache, sequence 0 c itself
        if (!kvq_kvcache_codec_policy(c))
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "replacing the KV cache with %d sequences set: only by a codec "
                               "cache (cloned for each sequence)", m->n_seq);
        kvq_kvcache **sc = NULL;
        kvq_status r = seq_caches(m, c, m->n_seq, &sc, err);
        if (r) return r;
        for (int i = 0; i < m->n_seq; i++) m->seqc[i]->ops->free(m->seqc[i]);
        free(m->seqc);
        m->seqc = sc;
        m->cache = sc[m->cur_seq];
        return KVQ_OK;
    }
    m->cache->ops->free(m->cache);
    m->cache = c;
    return KVQ_OK;
}

kvq_status kvq_model_fill_kv(kvq_model *m, int T, uint64_t seed, kvq_err *err) {
    const kvq_backend_ops *op = m->be->ops;
    const int max_ctx = kvq_model_max_ctx(m), B = m->o.max_batch;
    if (T < 1 || T > max_ctx)
        return kvq_err_set(err, KVQ_ERR_ARG, "filling %d positions of a KV cache of %d positions", T, max_ctx);
    if (m->n_seq > 1)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "filling the KV cache with %d sequences set (one only)", m->n_seq);
    if (!op->kv_append) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "the %s backend cannot fill its KV cache", op->name);
    const size_t kvd = m->kv_dim;
    float *hk = m->k, *hv = m->v; // a host backend's arena; a device's rows are made on the host, then uploaded there
    if (!op->host && !(hk = malloc(sizeof(float) * 2 * (size_t)B * kvd)))
        return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for %d positions of keys and values", B);
    if (!op->host) hv = hk + (size_t)B * kvd;
    if (m->cache) m->cache->ops->truncate(m->cache, 0);
    m->be->n_threads = m->o.n_threads;
    kvq_status r = KVQ_OK;
    for (int l = 0; l < m->a.n_layers && !r; l++)
        for (int t0 = 0; t0 < T && !r; t0 += B) {
            const int n = T - t0 < B ? T - t0 : B;
            if ((r = kvq_kvsynth_rows(seed, l, t0, n, m->a.n_kv_heads, m->a.head_dim, hk, hv, m->o.n_threads))) {
                kvq_err_set(err, r, "out of memory for the synthetic keys' statistics");
                break;
            }
            if (!op->host && ((r = op->upload(m->be, m->k, hk, n * kvd, err)) || (r = op->upload(m->be, m->v, hv, n * kvd, err))))
                break;
            if ((r = op->kv_append(m->be, m->cache, l, m->k, m->v, n, t0, err)))
                kvq_err_prefix(err, "filling positions [%d, %d)", t0, t0 + n);
        }
    kvq_err e2 = {0};
    kvq_status rs = op->sync(m->be, &e2); // the device's queued encoders; their first error
    if (!r && rs) *err = e2, r = rs;
    if (!op->host) free(hk);
    return r;
}

// ---- forward

// The index of the largest of n floats (the first of equals), -1 when one is NaN.
static int32_t argmax_or_nan(const float *x, int n) {
    int32_t b = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) return -1;
        if (x[i] > x[b]) b = i;
    }
    return b;
}

// Calibration: a product's input, seen on a host backend once the queued ops have run.
#define OBSERVE(l, site, x, T, cols)                                                        \
    do {                                                                                    \
        if (m->o.observe && op->host) {                                                     \
            if ((r = op->sync(be, err))) return r;                                          \
            m->o.observe(m->o.observe_ud, (l), (site), (x), (T), (cols));                   \
        }                                                                                   \
    } while (0)

#define PERTURB(l, site, y, T, rows)                                                        \
    do {                                                                                    \
        if (m->o.perturb && op->host) {                                                     \
            if ((r = op->sync(be, err))) return r;                                          \
            m->o.perturb(m->o.observe_ud, (l), (site), (y), (T), (rows));                   \
        }                                                                                   \
    } while (0)

// The end of a step of T sequences (forward_chunk_range with sseq): every token's final norm and
// lm_head, then its logits (T, vocab; host memory) or its argmax (top1, T), reduced on the
// device when the backend can.
static kvq_status seqs_end(kvq_model *m, int T, float *logits, int32_t *top1, kvq_err *err) {
    const kvq_backend_ops *op = m->be->ops;
    kvq_backend *be = m->be;
    const int V = m->a.vocab_size;
    kvq_status r;
    float *out = op->host ? (logits ? logits : m->lgh) : m->lgs;
    op->rmsnorm(be, m->xn, m->x, m->final_norm, T, m->a.hidden_size, (float)m->a.rms_norm_eps);
    op->matmul(be, out, m->xn, &m->lm_head, T);
    if (top1 && op->argmax) {
        if ((r = op->argmax(be, out, T, V, top1, err))) return r;
        return op->sync(be, err);
    }
    if ((r = op->sync(be, err))) return r;
    if (!op->host) {
        float *dst = logits ? logits : m->lgh;
        if ((r = op->download(be, dst, out, (size_t)T * V, err))) return r;
        out = dst;
    }
    for (int t = 0; top1 && t < T; t++) top1[t] = argmax_or_nan(out + (size_t)t * V, V);
    return KVQ_OK;
}

// One chunk of T <= max_batch tokens at positions [pos, pos+T); logits is host memory.
// top1 (host; with logits NULL): the last token's logits reduced to their argmax instead.
// h_in (host, T × hidden; NULL: tok's embeddings) enters layer l0, layers [l0, l1) run, h_out (host;
// may be NULL) gets the residual stream after layer l1 − 1; the final norm and lm_head run only
// when l1 is the last layer (kvq_model_forward_layers). sseq (NULL: one sequence): token t is the
// next token of sequence sseq[t] at position spos[t] (kvq_model_forward_seqs), pos is unused, and
// every token's logits (all_logits) or argmax (top1, T of them) is what the chunk ends with.
// all_logits == 2 (kvq_model_forward_keep): logits is backend memory, every token's logits are
// written there and stay (no graph: a captured step would keep writing where it was captured).
static kvq_status forward_chunk_range(kvq_model *m, const int32_t *tok, const float *h_in, int l0, int l1, int T,
                                      int pos, float *logits, int all_logits, int32_t *top1, float *h_out,
                                      const int *sseq, const int *spos, kvq_err *err) {
    const kvq_arch *a = &m->a;
    const kvq_backend_ops *op = m->be->ops;
    kvq_backend *be = m->be;
    const int d = a->hidden_size, hd = a->head_dim, ffn = a->intermediate_size;
    const float eps = (float)a->rms_norm_eps;
    const kvq_attn_shape as = {a->n_heads, a->n_kv_heads, hd, 1.0f / sqrtf((float)hd)};
    kvq_status r;

    for (int t = 0; t < T && !h_in; t++) {
        float *x = m->xh + (size_t)t * d;
        if (m->embed.n_part) { // the row's block (a row-blocked embedding has up to 3)
            int p = m->embed.n_part - 1;
            while (p > 0 && tok[t] < m->embed.row0[p]) p--;
            kvq_hqx_row_f32(&m->embed.part[p], tok[t] - m->embed.row0[p], x);
        }
        else if (m->embed.n_pq) kvq_pqx_row_f32(&m->embed.pq[0], tok[t], x);
        else if (m->embed.dt == KVQ_DTYPE_BF16) kvq_dtype_to_f32(KVQ_DTYPE_BF16, (uint16_t *)m->embed.data + (size_t)tok[t] * d, d, x);
        else memcpy(x, (float *)m->embed.data + (size_t)tok[t] * d, sizeof(float) * d);
    }
    if (h_in) memcpy(m->xh, h_in, sizeof(float) * (size_t)T * d);
    else if (m->o.perturb && op->host) m->o.perturb(m->o.observe_ud, -1, KVQ_SITE_EMBED, m->xh, T, d);
    if ((r = op->upload(be, m->x, m->xh, (size_t)T * d, err))) return r;
    if (sseq) op->step_seqs(be, T, sseq, spos, op->host ? m->seqc : NULL, logits ? 1 : top1 ? 2 : 0);
    else op->step(be, T, pos, logits && all_logits != 2 ? 1 : top1 ? 2 : 0);
    for (int l = l0; l < l1; l++) {
        layer *L = &m->L[l];
        op->rmsnorm(be, m->xn, m->x, L->attn_norm, T, d, eps);
        OBSERVE(l, KVQ_SITE_QKV, m->xn, T, d);
        op->matmul(be, m->qkv, m->xn, &L->qkv, T);
        PERTURB(l, KVQ_SITE_QKV, m->qkv, T, m->qkv_dim);
        op->qkv_split(be, m->qkv, L->qkv_bias, m->q, m->k, m->v, T, m->q_dim, m->kv_dim);
        if (L->q_norm) {
            op->rmsnorm(be, m->q, m->q, L->q_norm, T * a->n_heads, hd, eps);
            op->rmsnorm(be, m->k, m->k, L->k_norm, T * a->n_kv_heads, hd, eps);
        }
        op->rope(be, m->q, T, a->n_heads, hd, m->rot_dim, pos, m->inv_freq);
        op->rope(be, m->k, T, a->n_kv_heads, hd, m->rot_dim, pos, m->inv_freq);
        if ((r = op->attention(be, m->cache, l, m->q, m->k, m->v, m->att, T, pos, &as))) {
            // the cache's error channel names layer, head, codec and cause
            for (int t = 0; sseq && op->host && t < T; t++)
                if (m->seqc[sseq[t]]->err.msg[0]) return kvq_err_set(err, r, "sequence %d: %s", sseq[t], m->seqc[sseq[t]]->err.msg);
            if (m->cache && m->cache->err.msg[0]) return kvq_err_set(err, r, "%s", m->cache->err.msg);
            return op->sync(be, err) ? err->code : kvq_err_set(err, r, "attention: %s", kvq_strerror(r));
        }
        OBSERVE(l, KVQ_SITE_O, m->att, T, m->q_dim);
        op->matmul(be, m->xn, m->att, &L->o, T);
        PERTURB(l, KVQ_SITE_O, m->xn, T, d);
        op->add(be, m->x, m->xn, (size_t)T * d);
        op->rmsnorm(be, m->xn, m->x, L->ffn_norm, T, d, eps);
        OBSERVE(l, KVQ_SITE_GATE_UP, m->xn, T, d);
        op->matmul(be, m->gu, m->xn, &L->gate_up, T);
        PERTURB(l, KVQ_SITE_GATE_UP, m->gu, T, 2 * ffn);
        op->silu_mul(be, m->h, m->gu, T, ffn);
        OBSERVE(l, KVQ_SITE_DOWN, m->h, T, ffn);
        op->matmul(be, m->xn, m->h, &L->down, T);
        PERTURB(l, KVQ_SITE_DOWN, m->xn, T, d);
        op->add(be, m->x, m->xn, (size_t)T * d);
    }
    if (h_out && (r = op->download(be, h_out, m->x, (size_t)T * d, err))) return r;
    if (l1 < a->n_layers) return op->sync(be, err);
    if (sseq) return seqs_end(m, T, logits, top1, err);
    if (top1) { // the last token's logits, reduced where they are
        const int V = a->vocab_size;
        float *out = op->host ? m->lgh : m->lg1;
        op->rmsnorm(be, m->xn, m->x + (size_t)(T - 1) * d, m->final_norm, 1, d, eps);
        op->matmul(be, out, m->xn, &m->lm_head, 1);
        if (op->argmax) {
            if ((r = op->argmax(be, out, 1, V, top1, err))) return r;
            return op->sync(be, err); // *top1 is set once the queue has run
        }
        if ((r = op->sync(be, err))) return r;
        if (!op->host) {
            if (!m->lgh && !(m->lgh = malloc(sizeof(float) * V)))
                return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the logits");
            if ((r = op->download(be, m->lgh, out, V, err))) return r;
        }
        *top1 = argmax_or_nan(m->lgh, V);
        return KVQ_OK;
    }
    if (logits) {
        const size_t V = a->vocab_size;
        const int n = all_logits ? T : 1;
        float *out = logits;
        if (all_logits == 2) out = logits; // kvq_model_forward_keep's buffer (backend memory)
        else if (!op->host && n == 1) out = m->lg1;
        else if (!op->host) { // the device writes its own buffer, copied out below
            if (m->lg_cap < (size_t)n * V) {
                op->release(be, m->lg);
                m->lg_cap = 0;
                if (!(m->lg = op->alloc(be, (size_t)n * V)))
                    return kvq_err_set(err, KVQ_ERR_NOMEM, "out of %s memory for %d tokens' logits", op->name, n);
                m->lg_cap = (size_t)n * V;
            }
            out = m->lg;
        }
        const float *x = all_logits ? m->x : m->x + (size_t)(T - 1) * d;
        op->rmsnorm(be, m->xn, x, m->final_norm, n, d, eps);
        OBSERVE(-1, KVQ_SITE_LM_HEAD, m->xn, n, d);
        op->matmul(be, out, m->xn, &m->lm_head, n);
        if (op->host) PERTURB(-1, KVQ_SITE_LM_HEAD, out, n, (int)V);
        if ((r = op->sync(be, err))) return r;
        if (all_logits == 2) return KVQ_OK;
        return op->download(be, logits, out, (size_t)n * V, err); // waits for its copy
    }
    return op->sync(be, err);
}

static kvq_status forward_chunk(kvq_model *m, const int32_t *tok, int T, int pos, float *logits, int all_logits,
                                int32_t *top1, kvq_err *err) {
    return forward_chunk_range(m, tok, NULL, 0, m->a.n_layers, T, pos, logits, all_logits, top1, NULL, NULL, NULL, err);
}

static kvq_status forward(kvq_model *m, const int32_t *tokens, int T, int pos, float *logits, int all_logits,
                          int32_t *top1, kvq_err *err);

kvq_status kvq_model_forward_layers(kvq_model *m, const int32_t *tokens, const float *h_in, int l0, int l1, int T,
                                    int pos, float *h_out, float *logits, kvq_err *err) {
    const int L = m->a.n_layers, d = m->a.hidden_size;
    if (!m->be->ops->host) return kvq_err_set(err, KVQ_ERR_ARG, "forward from a layer: host backends only");
    if (l0 < 0 || l1 < l0 || l1 > L || (!h_in && (l0 != 0 || !tokens)) || (logits && l1 != L))
        return kvq_err_set(err, KVQ_ERR_ARG, "forward of layers [%d, %d) of %d: bad range or input", l0, l1, L);
    if (T <= 0 || pos < 0 || (int64_t)pos + T > kvq_model_max_ctx(m))
        return kvq_err_set(err, KVQ_ERR_ARG, "positions [%d, %lld) outside the KV cache's %d positions", pos,
                           (long long)pos + T, kvq_model_max_ctx(m));
    for (int t = 0; !h_in && t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= m->a.vocab_size)
            return kvq_err_set(err, KVQ_ERR_ARG, "token id %d at index %d outside the vocabulary [0, %d)", tokens[t], t,
                               m->a.vocab_size);
    if (m->cache) m->cache->ops->truncate(m->cache, pos);
    m->be->n_threads = m->o.n_threads;
    const size_t V = m->a.vocab_size;
    for (int t0 = 0; t0 < T; t0 += m->o.max_batch) {
        int n = T - t0 < m->o.max_batch ? T - t0 : m->o.max_batch;
        kvq_err e2 = {0};
        kvq_status r = forward_chunk_range(m, h_in ? NULL : tokens + t0, h_in ? h_in + (size_t)t0 * d : NULL, l0, l1, n,
                                           pos + t0, logits ? logits + (size_t)t0 * V : NULL, 1, NULL,
                                           h_out ? h_out + (size_t)t0 * d : NULL, NULL, NULL, &e2);
        if (r) return kvq_err_set(err, r, "%s (positions [%d, %d))", e2.msg[0] ? e2.msg : kvq_strerror(r), pos + t0, pos + t0 + n);
    }
    return KVQ_OK;
}

kvq_status kvq_model_forward(kvq_model *m, const int32_t *tokens, int T, int pos, float *logits,
                             int all_logits, kvq_err *err) {
    return forward(m, tokens, T, pos, logits, all_logits != 0, NULL, err); // 2 is kvq_model_forward_keep's
}

kvq_status kvq_model_forward_keep(kvq_model *m, const int32_t *tokens, int T, int pos, const float **logits,
                                  kvq_err *err) {
    *logits = NULL;
    const kvq_backend_ops *op = m->be->ops;
    const size_t need = (size_t)(T > 0 ? T : 1) * (size_t)m->a.vocab_size;
    if (m->lk_cap < need) {
        op->release(m->be, m->lk);
        m->lk_cap = 0;
        if (!(m->lk = op->alloc(m->be, need)))
            return kvq_err_set(err, KVQ_ERR_NOMEM, "out of %s memory for %d tokens' logits", op->name, T);
        m->lk_cap = need;
    }
    kvq_status r = forward(m, tokens, T, pos, m->lk, 2, NULL, err);
    if (!r) *logits = m->lk;
    return r;
}

kvq_status kvq_model_vscore(kvq_model *m, const float *ref, const float *q, const int32_t *target, int rows,
                            kvq_vscore *out, kvq_err *err) {
    const kvq_backend_ops *op = m->be->ops;
    if (!op->vscore) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "the %s backend does not score logits", op->name);
    return op->vscore(m->be, ref, q, target, rows, m->a.vocab_size, out, err);
}

kvq_status kvq_model_forward_argmax(kvq_model *m, const int32_t *tokens, int T, int pos, int32_t *next, kvq_err *err) {
    if (m->be->ops->host && !m->lgh && !(m->lgh = malloc(sizeof(float) * m->a.vocab_size)))
        return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the logits");
    return forward(m, tokens, T, pos, NULL, 0, next, err);
}

// ---- several sequences

kvq_status kvq_model_set_seqs(kvq_model *m, int n_seq, kvq_err *err) {
    const kvq_arch *a = &m->a;
    if (n_seq < 1 || n_seq > KVQ_MODEL_MAX_SEQS)
        return kvq_err_set(err, KVQ_ERR_ARG, "%d sequences: expected 1..%d", n_seq, KVQ_MODEL_MAX_SEQS);
    if (n_seq == m->n_seq) return KVQ_OK;
    const kvq_backend_ops *op = m->be->ops;
    const int rows = n_seq < m->o.max_batch ? n_seq : m->o.max_batch; // tokens a step can take
    kvq_status r;
    if (op->host) {
        float *lgh = malloc(sizeof(float) * (size_t)rows * a->vocab_size);
        if (!lgh) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for %d sequences", n_seq);
        kvq_kvcache **c = NULL; // the sequence the model held so far stays sequence 0; a codec is cloned for the others
        if ((r = seq_caches(m, m->cache, n_seq, &c, err))) {
            free(lgh);
            return r;
        }
        for (int i = 0; i < m->n_seq && m->seqc; i++)
            if (m->seqc[i] != m->cache) m->seqc[i]->ops->free(m->seqc[i]);
        free(m->seqc);
        free(m->lgh);
        m->seqc = c;
        m->lgh = lgh;
        m->lgh_rows = rows;
    } else {
        if (!op->seqs)
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "the %s backend runs one sequence at a time", op->name);
        float *lgs = op->alloc(m->be, (size_t)rows * a->vocab_size);
        if (!lgs) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of %s memory for %d sequences' logits", op->name, rows);
        if ((r = op->seqs(m->be, n_seq, err))) { op->release(m->be, lgs); return r; }
        op->release(m->be, m->lgs);
        m->lgs = lgs;
        if (!m->lgh_rows || m->lgh_rows < rows) {
            float *h = realloc(m->lgh, sizeof(float) * (size_t)rows * a->vocab_size);
            if (!h) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for %d sequences' logits", rows);
            m->lgh = h;
            m->lgh_rows = rows;
        }
    }
    m->n_seq = n_seq;
    m->cur_seq = 0;
    return KVQ_OK;
}

int kvq_model_n_seqs(const kvq_model *m) { return m->n_seq; }

kvq_status kvq_model_use_seq(kvq_model *m, int s, kvq_err *err) {
    if (s < 0 || s >= m->n_seq) return kvq_err_set(err, KVQ_ERR_ARG, "sequence %d of %d", s, m->n_seq);
    if (m->be->ops->host) m->cache = m->seqc ? m->seqc[s] : m->cache;
    else if (m->be->ops->seq_use) m->be->ops->seq_use(m->be, s);
    m->cur_seq = s;
    return KVQ_OK;
}

kvq_status kvq_model_forward_seqs(kvq_model *m, const int32_t *tokens, const int *seq, const int *pos, int n, float *logits,
                                  int32_t *next, kvq_err *err) {
    const int max_ctx = kvq_model_max_ctx(m);
    const int cap = m->n_seq < m->o.max_batch ? m->n_seq : m->o.max_batch;
    if (n < 1 || n > cap)
        return kvq_err_set(err, KVQ_ERR_ARG, "a step of %d sequences: expected 1..%d (%d sequences set, %d tokens a chunk)", n,
                           cap, m->n_seq, m->o.max_batch);
    if (!logits && !next) return kvq_err_set(err, KVQ_ERR_ARG, "a step of %d sequences with neither logits nor choices", n);
    for (int t = 0; t < n; t++) {
        if (seq[t] < 0 || seq[t] >= m->n_seq)
            return kvq_err_set(err, KVQ_ERR_ARG, "token %d: sequence %d of %d", t, seq[t], m->n_seq);
        for (int u = 0; u < t; u++)
            if (seq[u] == seq[t]) return kvq_err_set(err, KVQ_ERR_ARG, "sequence %d twice in one step (tokens %d and %d)", seq[t], u, t);
        if (pos[t] < 0 || pos[t] >= max_ctx)
            return kvq_err_set(err, KVQ_ERR_ARG, "sequence %d: position %d outside the KV cache's %d positions", seq[t], pos[t],
                               max_ctx);
        if (tokens[t] < 0 || tokens[t] >= m->a.vocab_size)
            return kvq_err_set(err, KVQ_ERR_ARG, "sequence %d: token id %d outside the vocabulary [0, %d)", seq[t], tokens[t],
                               m->a.vocab_size);
    }
    for (int t = 0; t < n && m->seqc; t++) m->seqc[seq[t]]->ops->truncate(m->seqc[seq[t]], pos[t]);
    m->be->n_threads = m->o.n_threads;
    kvq_err e2 = {0};
    kvq_status r = forward_chunk_range(m, tokens, NULL, 0, m->a.n_layers, n, 0, logits, 1, next, NULL, seq, pos, &e2);
    if (r) return kvq_err_set(err, r, "%s (a step of %d sequences)", e2.msg[0] ? e2.msg : kvq_strerror(r), n);
    return KVQ_OK;
}

static kvq_status forward(kvq_model *m, const int32_t *tokens, int T, int pos, float *logits, int all_logits,
                          int32_t *top1, kvq_err *err) {
    const int max_ctx = kvq_model_max_ctx(m);
    if (T <= 0 || pos < 0 || (int64_t)pos + T > max_ctx)
        return kvq_err_set(err, KVQ_ERR_ARG, "positions [%d, %lld) outside the KV cache's %d positions", pos,
                           (long long)pos + T, max_ctx);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= m->a.vocab_size)
            return kvq_err_set(err, KVQ_ERR_ARG, "token id %d at index %d outside the vocabulary [0, %d)", tokens[t], t,
                               m->a.vocab_size);
    if (m->cache) m->cache->ops->truncate(m->cache, pos);
    m->be->n_threads = m->o.n_threads;
    size_t V = m->a.vocab_size;
    for (int t0 = 0; t0 < T; t0 += m->o.max_batch) {
        int n = T - t0 < m->o.max_batch ? T - t0 : m->o.max_batch;
        int last = t0 + n == T;
        float *lg = !logits ? NULL : all_logits ? logits + (size_t)t0 * V : last ? logits : NULL;
        kvq_err e2 = {0};
        kvq_status r = forward_chunk(m, tokens + t0, n, pos + t0, lg, all_logits, last ? top1 : NULL, &e2);
        if (r) return kvq_err_set(err, r, "%s (positions [%d, %d))", e2.msg[0] ? e2.msg : kvq_strerror(r), pos + t0, pos + t0 + n);
    }
    return KVQ_OK;
}
