// llama2.c checkpoint reader (the "legacy" version-0 .bin that run.c reads): header of
// 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; negative
// vocab = unshared classifier), then fp32 arrays in run.c's memory_map_weights order.
// Tensors get HF names; wq/wk are un-interleaved into HF's rotary layout.
#include "formats/llama2c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    kvq_tensor t;
    char name[96];
} l2c_tensor;

struct kvq_l2c {
    kvq_arch arch;
    void *map;
    size_t map_len;
    float *perm;          // permuted wq then wk for all layers, owned
    size_t n;
    l2c_tensor *t;
};

static void add(kvq_l2c *m, const char *name, const float *data, int64_t rows, int64_t cols) {
    l2c_tensor *x = &m->t[m->n++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->t.name = x->name;
    x->t.dtype = KVQ_DTYPE_F32;
    x->t.ndim = cols ? 2 : 1;
    x->t.shape[0] = rows;
    if (cols) x->t.shape[1] = cols;
    x->t.data = data;
    x->t.nbytes = (size_t)(rows * (cols ? cols : 1)) * sizeof(float);
}

// llama2.c (Meta) keeps each head's rotary pairs interleaved (x0,x1),(x2,x3)...; HF keeps
// the first halves then the second halves. HF's permute():
//   w.view(n_heads, rows/n_heads/2, 2, cols).transpose(1, 2).reshape(rows, cols)
// so HF row h*hd + i*(hd/2) + j is llama2.c row h*hd + 2*j + i.
static void permute_rows(float *dst, const float *src, int n_heads, int head_dim, int cols) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < half; j++)
                memcpy(dst + ((size_t)h * head_dim + (size_t)i * half + j) * cols,
                       src + ((size_t)h * head_dim + 2 * (size_t)j + i) * cols, (size_t)cols * sizeof(float));
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

kvq_status kvq_l2c_open(const char *path, kvq_l2c **out, kvq_err *err) {
    *out = NULL;
    const char *bn = base_name(path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        kvq_status s = kvq_err_set(err, fd < 0 && errno == ENOENT ? KVQ_ERR_MISSING : KVQ_ERR_IO,
                                   "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return s;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    int32_t h[7];
    if (fsize < sizeof h || pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        close(fd);
        return kvq_err_set(err, KVQ_ERR_FORMAT, "%s: file truncated: %llu bytes, llama2.c header needs 28",
                           bn, (unsigned long long)fsize);
    }
    if ((uint32_t)h[0] == 0x616b3432u) { // llama2.c export.py version 1/2 files start "24ka"
        close(fd);
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                           "%s: llama2.c version %d export (magic 'ak42') is not supported; kvq reads the "
                           "legacy (version 0) format that run.c uses", bn, h[1]);
    }
    int dim = h[0], hidden = h[1], L = h[2], nh = h[3], nkv = h[4], vocab = h[5], seq = h[6];
    int shared = vocab > 0;
    if (vocab < 0 && vocab != INT32_MIN) vocab = -vocab;
    if (dim <= 0 || hidden <= 0 || L <= 0 || nh <= 0 || nkv <= 0 || vocab <= 0 || seq <= 0 ||
        dim % nh || nh % nkv || (dim / nh) % 2) {
        close(fd);
        return kvq_err_set(err, KVQ_ERR_FORMAT,
                           "%s: bad llama2.c header (dim %d, hidden_dim %d, n_layers %d, n_heads %d, "
                           "n_kv_heads %d, vocab_size %d, seq_len %d)",
                           bn, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
    }
    uint64_t hd = (uint64_t)(dim / nh), kvd = hd * (uint64_t)nkv, D = (uint64_t)dim;
    // Floats per part; all operands < 2^31 so products of two fit, sums are checked.
    uint64_t per_layer[] = {D, D * D, D * kvd, D * kvd, D * D, D, (uint64_t)hidden * D,
                            (uint64_t)hidden * D, (uint64_t)hidden * D};
    uint64_t total = (uint64_t)vocab * D, lay = 0;
    int ovf = 0;
    for (size_t i = 0; i < sizeof per_layer / sizeof *per_layer; i++)
        ovf |= __builtin_add_overflow(lay, per_layer[i], &lay);
    uint64_t x;
    ovf |= __builtin_mul_overflow(lay, (uint64_t)L, &x) || __builtin_add_overflow(total, x, &total);
    ovf |= __builtin_add_overflow(total, D + (uint64_t)seq * hd, &total); // rms_final, freq_cis
    if (!shared) ovf |= __builtin_add_overflow(total, (uint64_t)vocab * D, &total);
    uint64_t want;
    ovf |= __builtin_mul_overflow(total, (uint64_t)4, &want) || __builtin_add_overflow(want, 28, &want);
    if (ovf || want != fsize) {
        close(fd);
        return kvq_err_set(err, KVQ_ERR_FORMAT,
                           "%s: file size %llu does not match the llama2.c header (expects %llu bytes "
                           "for dim %d, n_layers %d, vocab %d%s)",
                           bn, (unsigned long long)fsize, ovf ? 0ull : (unsigned long long)want, dim, L,
                           vocab, shared ? "" : ", unshared classifier");
    }
    kvq_l2c *m = calloc(1, sizeof *m);
    size_t ntensors = 1 + 9 * (size_t)L + 1 + (shared ? 0 : 1);
    if (m) m->t = calloc(ntensors, sizeof *m->t);
    if (m) m->perm = malloc((size_t)L * (D * D + D * kvd) * sizeof(float));
    if (!m || !m->t || !m->perm) {
        close(fd);
        kvq_l2c_close(m);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", bn);
    }
    m->map_len = (size_t)fsize;
    m->map = mmap(NULL, m->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        kvq_l2c_close(m);
        return kvq_err_set(err, KVQ_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    }

    const float *p = (const float *)((const char *)m->map + 28);
    const float *emb = p;
    p += (uint64_t)vocab * D;
    const float *rms_att = p, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3;
    p += L * D;
    wq = p; p += L * D * D;
    wk = p; p += L * D * kvd;
    wv = p; p += L * D * kvd;
    wo = p; p += L * D * D;
    rms_ffn = p; p += L * D;
    w1 = p; p += (uint64_t)L * hidden * D;
    w2 = p; p += (uint64_t)L * hidden * D;
    w3 = p; p += (uint64_t)L * hidden * D;
    const float *rms_final = p;
    p += D + (uint64_t)seq * hd; // freq_cis_real / imag: seq_len * head_dim/2 each, unused
    const float *wcls = shared ? NULL : p;

    float *pq = m->perm, *pk = m->perm + (size_t)L * D * D;
    char nm[96];
    add(m, "model.embed_tokens.weight", emb, vocab, dim);
    for (int l = 0; l < L; l++) {
        permute_rows(pq + l * D * D, wq + l * D * D, nh, (int)hd, dim);
        permute_rows(pk + l * D * kvd, wk + l * D * kvd, nkv, (int)hd, dim);
#define LAYER(suffix, ptr, r, c)                                       \
    snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix);          \
    add(m, nm, ptr, r, c)
        LAYER("input_layernorm.weight", rms_att + l * D, dim, 0);
        LAYER("self_attn.q_proj.weight", pq + l * D * D, dim, dim);
        LAYER("self_attn.k_proj.weight", pk + l * D * kvd, (int64_t)kvd, dim);
        LAYER("self_attn.v_proj.weight", wv + l * D * kvd, (int64_t)kvd, dim);
        LAYER("self_attn.o_proj.weight", wo + l * D * D, dim, dim);
        LAYER("post_attention_layernorm.weight", rms_ffn + l * D, dim, 0);
        LAYER("mlp.gate_proj.weight", w1 + (uint64_t)l * hidden * D, hidden, dim);
        LAYER("mlp.down_proj.weight", w2 + (uint64_t)l * hidden * D, dim, hidden);
        LAYER("mlp.up_proj.weight", w3 + (uint64_t)l * hidden * D, hidden, dim);
#undef LAYER
    }
    add(m, "model.norm.weight", rms_final, dim, 0);
    if (wcls) add(m, "lm_head.weight", wcls, vocab, dim);

    kvq_arch *a = &m->arch;
    a->family = KVQ_ARCH_LLAMA;
    snprintf(a->hf_class, sizeof a->hf_class, "LlamaForCausalLM");
    a->hidden_size = dim;
    a->intermediate_size = hidden;
    a->n_layers = L;
    a->n_heads = nh;
    a->n_kv_heads = nkv;
    a->head_dim = (int)hd;
    a->vocab_size = vocab;
    a->max_position_embeddings = seq;
    a->rms_norm_eps = 1e-5;
    a->rope_theta = 10000.0;
    a->rope_type = KVQ_ROPE_DEFAULT;
    a->rope_factor = 1.0;
    a->partial_rotary_factor = 1.0;
    a->tie_word_embeddings = shared;
    a->bos_token_id = 1;
    a->eos_token_id = 2;
    *out = m;
    return KVQ_OK;
}

void kvq_l2c_close(kvq_l2c *m) {
    if (!m) return;
    if (m->map) munmap(m->map, m->map_len);
    free(m->perm);
    free(m->t);
    free(m);
}

const kvq_arch *kvq_l2c_arch(const kvq_l2c *m) { return &m->arch; }
size_t kvq_l2c_count(const kvq_l2c *m) { return m->n; }
const kvq_tensor *kvq_l2c_tensor(const kvq_l2c *m, size_t i) { return i < m->n ? &m->t[i].t : NULL; }
