// The whole-model budget (alloc.h): calibration pass, per-tensor sensitivity, and the
// equal-slope allocation of HyperQuant rates. docs/ALLOCATION.md says why this model of the
// error and what it was validated against.
#include "kernels/cpu/softmax.h"
#include "libconv/convert/alloc.h"

#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/kvqfile.h"
#include "libconv/codec/hyperquant/hqcal.h"
#include "libconv/codec/hyperquant/hyperquant.h"
#include "libconv/runtime/model.h"
#include "libconv/runtime/sample.h"

// ---- calibration -------------------------------------------------------------------

#define N_SITES 5   // kvq_model_site's products (KVQ_SITE_EMBED is a lookup)
#define N_PROBE 256 // tokens each sensitivity probe runs
#define PROBE_SNR_DB 20.0

// A sensitivity probe: a random weight error ΔW of one tensor, Gaussian with HyperQuant's
// error energy per tile (‖w_tile‖²/T per weight at the probe's SNR), applied to the real input:
// δy_t = ΔW·x_t added to that tensor's output rows [r0, r0 + rows) at one site, and ΔW's row of
// each looked-up id added to the embedding lookup (both for a tied embedding). One ΔW for every
// token, as a stored weight error is: tokens with like inputs get like errors.
typedef struct {
    int layer, site;          // site -1: none
    int r0, rows, cols;
    float *dw;                // (rows, cols) the weight error
    float *x;                 // (max_batch, max cols): the current chunk's input to the target
    int embed;                // also perturb the embedding lookup (tied or embed_tokens)
    int head;                 // also / only the lm_head product
    const int32_t *ids;       // the chunk's token ids (embedding lookup)
} probe_t;

struct kvq_calib {
    int n_layers, vocab, d;
    int cols[N_SITES];        // input width per site
    double *m[N_SITES];       // (n_layers or 1, cols): Σ x_j² per layer (lm_head: one row)
    double n_seen[N_SITES];   // tokens each site saw (per layer; the same for every layer)
    double *freq;             // (vocab) embedding lookups per id
    size_t n_tokens;
    int q_dim, kv_dim, ffn, max_batch;
    kvq_model *model;         // kept open for the probes
    int32_t *probe_ids;       // (n_probe) the first calibration tokens
    int n_probe;
    float *ref;               // (n_probe, vocab) the source's log-probabilities
    float *logits;            // (n_probe, vocab) scratch
    int stats;                // 1: the statistics pass (observe accumulates)
    probe_t pr;
};

void kvq_calib_free(kvq_calib *c) {
    if (!c) return;
    for (int i = 0; i < N_SITES; i++) free(c->m[i]);
    free(c->freq);
    kvq_model_close(c->model);
    free(c->probe_ids);
    free(c->ref);
    free(c->logits);
    free(c->pr.x);
    free(c);
}

size_t kvq_calib_tokens(const kvq_calib *c) { return c->n_tokens; }

static void observe(void *ud, int layer, kvq_model_site site, const float *x, int T, int cols) {
    kvq_calib *c = ud;
    if ((int)site < 0 || site >= N_SITES || cols != c->cols[site]) return;
    if (!c->stats) { // a probe: keep the target's input for perturb
        probe_t *p = &c->pr;
        if (p->site != (int)site || (site != KVQ_SITE_LM_HEAD && p->layer != layer) || cols != p->cols) return;
        memcpy(p->x, x, sizeof(float) * (size_t)T * cols);
        return;
    }
    double *m = c->m[site] + (size_t)(site == KVQ_SITE_LM_HEAD ? 0 : layer) * cols;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < cols; j++) m[j] += (double)x[(size_t)t * cols + j] * (double)x[(size_t)t * cols + j];
    if (layer <= 0) c->n_seen[site] += T; // layer 0 (lm_head: -1) counts for all
}

static double gauss(uint64_t *s) { // splitmix64 + Box–Muller
    uint64_t a = (*s += 0x9E3779B97F4A7C15ull), b = (*s += 0x9E3779B97F4A7C15ull);
    a = (a ^ (a >> 30)) * 0xBF58476D1CE4E5B9ull, a = (a ^ (a >> 27)) * 0x94D049BB133111EBull, a ^= a >> 31;
    b = (b ^ (b >> 30)) * 0xBF58476D1CE4E5B9ull, b = (b ^ (b >> 27)) * 0x94D049BB133111EBull, b ^= b >> 31;
    double u = ((double)(a >> 11) + 0.5) / 9007199254740992.0, v = (double)(b >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void perturb(void *ud, int layer, kvq_model_site site, float *y, int T, int rows) {
    kvq_calib *c = ud;
    probe_t *p = &c->pr;
    if (c->stats) return;
    if (site == KVQ_SITE_EMBED) { // the looked-up row's own error
        if (!p->embed) return;
        for (int t = 0; t < T; t++) {
            const float *dw = p->dw + (size_t)p->ids[t] * p->cols;
            for (int j = 0; j < rows; j++) y[(size_t)t * rows + j] += dw[j];
        }
        return;
    }
    if ((int)site != p->site || (site != KVQ_SITE_LM_HEAD && layer != p->layer) || (site == KVQ_SITE_LM_HEAD && !p->head)) return;
    const int nr = p->rows, nc = p->cols, r0 = p->r0;
    const float *x = p->x, *dw = p->dw;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < nr; r++) {
        const float *w = dw + (size_t)r * nc;
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * nc;
            float acc = 0.0f;
            for (int j = 0; j < nc; j++) acc += w[j] * xt[j];
            y[(size_t)t * rows + r0 + r] += acc;
        }
    }
}

static kvq_status read_text(const char *path, size_t cap, char **out, size_t *n, kvq_err *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return kvq_err_set(err, KVQ_ERR_IO, "%s: cannot open calibration text: %s", path, strerror(errno));
    char *b = malloc(cap + 1);
    if (!b) { fclose(fp); return kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory", path); }
    *n = fread(b, 1, cap, fp);
    int bad = ferror(fp);
    fclose(fp);
    if (bad) { free(b); return kvq_err_set(err, KVQ_ERR_IO, "%s: read error", path); }
    while (*n > 0 && ((unsigned char)b[*n - 1] & 0xC0) == 0x80) (*n)--; // no UTF-8 sequence cut in two
    if (*n > 0 && (unsigned char)b[*n - 1] >= 0xC0) (*n)--;
    b[*n] = 0;
    kvq_status s = kvq_tok_text_check(b, *n, err);
    if (s) {
        free(b);
        kvq_err_prefix(err, "%s", path);
        return s;
    }
    *out = b;
    return KVQ_OK;
}

// Forward of the probe tokens (one window from position 0) into c->logits, as log-probabilities.
static kvq_status probe_forward(kvq_calib *c, kvq_err *err) {
    kvq_status s = KVQ_OK;
    for (int c0 = 0; c0 < c->n_probe && !s; c0 += c->max_batch) {
        int cn = c->n_probe - c0 < c->max_batch ? c->n_probe - c0 : c->max_batch;
        c->pr.ids = c->probe_ids + c0;
        s = kvq_model_forward(c->model, c->probe_ids + c0, cn, c0, c->logits + (size_t)c0 * c->vocab, 1, err);
    }
    if (!s) kvq_log_softmax_rows(c->logits, c->n_probe, c->vocab);
    return s;
}

// Reports the statistics pass's tokens done of total.
static void pass_progress(kvq_calib_progress_fn fn, void *ud, size_t done, size_t total) {
    if (!fn) return;
    kvq_calib_progress p = {.event = KVQ_CALIB_PASS, .index = done, .count = total};
    fn(ud, &p);
}

kvq_status kvq_calib_run(const char *src, const char *text_path, int n_tokens, uint64_t seed, int n_threads,
                         kvq_calib_progress_fn progress, void *ud, kvq_calib **out, kvq_err *err) {
    *out = NULL;
    kvq_calib *c = calloc(1, sizeof *c);
    if (!c) return kvq_err_set(err, KVQ_ERR_NOMEM, "calibration: out of memory");
    c->stats = 1;
    c->pr.site = -1;
    kvq_model_opts mo = kvq_model_opts_default();
    mo.n_threads = n_threads;
    mo.observe = observe;
    mo.perturb = perturb;
    mo.observe_ud = c;
    mo.max_batch = c->max_batch = 128;
    mo.store = KVQ_WEIGHTS_F32;
    kvq_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    kvq_sampler *smp = NULL;
    size_t n_ids = 0;
    kvq_status s = kvq_model_open(src, &mo, &c->model, err);
    if (s) { kvq_err_prefix(err, "calibration"); goto done; }
    kvq_model *m = c->model;
    const kvq_arch *a = kvq_model_arch(m);
    c->n_layers = a->n_layers, c->vocab = a->vocab_size, c->d = a->hidden_size;
    c->q_dim = a->n_heads * a->head_dim, c->kv_dim = a->n_kv_heads * a->head_dim, c->ffn = a->intermediate_size;
    c->cols[KVQ_SITE_QKV] = c->cols[KVQ_SITE_GATE_UP] = c->cols[KVQ_SITE_LM_HEAD] = a->hidden_size;
    c->cols[KVQ_SITE_O] = c->q_dim;
    c->cols[KVQ_SITE_DOWN] = a->intermediate_size;
    for (int i = 0; i < N_SITES; i++)
        if (!(c->m[i] = calloc((size_t)(i == KVQ_SITE_LM_HEAD ? 1 : a->n_layers) * c->cols[i], sizeof(double)))) s = KVQ_ERR_NOMEM;
    const int ctx = kvq_model_max_ctx(m) < 512 ? kvq_model_max_ctx(m) : 512;
    c->n_probe = ctx < N_PROBE ? ctx : N_PROBE;
    if (s || !(c->freq = calloc(a->vocab_size, sizeof(double))) ||
        !(c->logits = malloc(sizeof(float) * (size_t)a->vocab_size * (c->n_probe > c->max_batch ? c->n_probe : c->max_batch)))) {
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "calibration: out of memory");
        goto done;
    }
    if (text_path) {
        size_t n = 0;
        // ~4 bytes a token in English BPE; 16 leaves room for any tokenizer
        if ((s = read_text(text_path, (size_t)n_tokens * 16 + 64, &text, &n, err))) goto done;
        if ((s = kvq_model_tokenizer(m, &tok, err))) { kvq_err_prefix(err, "calibration text %s", text_path); goto done; }
        if ((s = kvq_tok_encode(tok, text, n, 0, &ids, &n_ids, err))) { kvq_err_prefix(err, "%s", text_path); goto done; }
        if (n_ids < 2) { s = kvq_err_set(err, KVQ_ERR_ARG, "%s: calibration text has %zu tokens (need 2 or more)", text_path, n_ids); goto done; }
        if (n_ids > (size_t)n_tokens) n_ids = (size_t)n_tokens;
        for (size_t t0 = 0; t0 < n_ids && !s; t0 += ctx) { // windows of ctx, chunks of max_batch
            size_t wn = n_ids - t0 < (size_t)ctx ? n_ids - t0 : (size_t)ctx;
            for (size_t c0 = 0; c0 < wn && !s; c0 += c->max_batch) {
                int cn = (int)(wn - c0 < (size_t)c->max_batch ? wn - c0 : (size_t)c->max_batch);
                s = kvq_model_forward(m, ids + t0 + c0, cn, (int)c0, c->logits, 1, err);
                if (!s) pass_progress(progress, ud, t0 + c0 + (size_t)cn, n_ids);
            }
        }
    } else { // the model's own text: no data needed, and in the model's own distribution
        if ((s = kvq_sampler_new(1.0f, 0.95f, seed, a->vocab_size, &smp, err))) goto done;
        if (!(ids = malloc(sizeof *ids * (size_t)n_tokens))) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "calibration: out of memory"); goto done; }
        int32_t bos = a->bos_token_id >= 0 && a->bos_token_id < a->vocab_size ? a->bos_token_id : 0;
        int pos = 0;
        for (n_ids = 0; n_ids < (size_t)n_tokens && !s; n_ids++) {
            if (pos == ctx) pos = 0;
            if (pos == 0) ids[n_ids] = bos;
            s = kvq_model_forward(m, ids + n_ids, 1, pos, c->logits, 0, err);
            int32_t next = s ? 0 : kvq_sample(smp, c->logits, a->vocab_size);
            if (!s && next < 0) s = kvq_err_set(err, KVQ_ERR_NUMERIC, "calibration: the source model's logits hold NaN");
            if (n_ids + 1 < (size_t)n_tokens) ids[n_ids + 1] = next;
            pos++;
            if (!s && ((n_ids + 1) % 64 == 0 || n_ids + 1 == (size_t)n_tokens)) pass_progress(progress, ud, n_ids + 1, (size_t)n_tokens);
        }
    }
    if (s) goto done;
    for (size_t i = 0; i < n_ids; i++) c->freq[ids[i]] += 1.0;
    c->n_tokens = n_ids;
    // the probes' tokens and the source's log-probabilities on them
    c->stats = 0;
    if ((size_t)c->n_probe > n_ids) c->n_probe = (int)n_ids;
    if (!(c->probe_ids = malloc(sizeof(int32_t) * c->n_probe)) || !(c->ref = malloc(sizeof(float) * (size_t)c->n_probe * c->vocab)) ||
        !(c->pr.x = malloc(sizeof(float) * (size_t)c->max_batch * (size_t)(c->d > c->ffn ? (c->d > c->q_dim ? c->d : c->q_dim)
                                                                                           : (c->ffn > c->q_dim ? c->ffn : c->q_dim))))) {
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "calibration: out of memory");
        goto done;
    }
    memcpy(c->probe_ids, ids, sizeof(int32_t) * c->n_probe);
    if ((s = probe_forward(c, err))) goto done;
    memcpy(c->ref, c->logits, sizeof(float) * (size_t)c->n_probe * c->vocab);
done:
    kvq_sampler_free(smp);
    free(text);
    free(ids);
    kvq_tok_close(tok);
    if (s) { kvq_calib_free(c); return s; }
    *out = c;
    return KVQ_OK;
}

// ---- sensitivity -------------------------------------------------------------------

// Site and layer of a tensor name; -1 when the runtime has no product for it.
static int site_of(const char *name, int *layer) {
    *layer = -1;
    if (!strcmp(name, "lm_head.weight")) return KVQ_SITE_LM_HEAD;
    int l, k = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &k) != 1 || k == 0) return -1;
    const char *r = name + k;
    static const struct { const char *suffix; int site; } map[] = {
        {"self_attn.q_proj.weight", KVQ_SITE_QKV},  {"self_attn.k_proj.weight", KVQ_SITE_QKV},
        {"self_attn.v_proj.weight", KVQ_SITE_QKV},  {"self_attn.qkv_proj.weight", KVQ_SITE_QKV},
        {"self_attn.o_proj.weight", KVQ_SITE_O},    {"mlp.gate_proj.weight", KVQ_SITE_GATE_UP},
        {"mlp.up_proj.weight", KVQ_SITE_GATE_UP},   {"mlp.gate_up_proj.weight", KVQ_SITE_GATE_UP},
        {"mlp.down_proj.weight", KVQ_SITE_DOWN}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(r, map[i].suffix)) { *layer = l; return map[i].site; }
    return -1;
}

static int is_embedding(const char *name) {
    size_t n = strlen(name);
    const char *suf = "embed_tokens.weight";
    return n >= strlen(suf) && !strcmp(name + n - strlen(suf), suf);
}

// Σ_rows Σ_tiles ‖w_tile‖²/T · Σ_{j∈tile} m_j / n: the product's error energy per token at 0 dB.
static double linear_sensitivity(const double *m, double n, const float *w, int64_t rows, int64_t cols) {
    int64_t cols_p;
    int T = kvq_hq_tile_for(cols, 128, &cols_p);
    int64_t tpr = cols_p / T;
    double *msum = calloc((size_t)tpr, sizeof *msum);
    if (!msum) return NAN;
    for (int64_t j = 0; j < cols; j++) msum[j / T] += m[j] / n;
    double *row = malloc(sizeof(double) * (size_t)(rows > 0 ? rows : 1)), s = 0.0;
    if (!row) { free(msum); return NAN; }
#pragma omp parallel for
    for (int64_t r = 0; r < rows; r++) {
        const float *x = w + (size_t)r * cols;
        double sr = 0.0;
        for (int64_t t = 0; t < tpr; t++) {
            double e = 0.0;
            for (int64_t j = t * T; j < (t + 1) * T && j < cols; j++) e += (double)x[j] * (double)x[j];
            sr += e / T * msum[t];
        }
        row[r] = sr;
    }
    for (int64_t r = 0; r < rows; r++) s += row[r]; // in order: the same sum for any thread count
    free(row);
    free(msum);
    return s;
}

double kvq_calib_sensitivity(const kvq_calib *c, const char *name, const float *w, int64_t rows, int64_t cols,
                             int tied) {
    if (!c->n_tokens) return NAN;
    if (is_embedding(name)) {
        if (rows != c->vocab || cols != c->d) return NAN;
        double s = 0.0;
        for (int64_t v = 0; v < rows; v++) {
            if (c->freq[v] == 0) continue;
            double e = 0.0;
            for (int64_t j = 0; j < cols; j++) e += (double)w[v * cols + j] * (double)w[v * cols + j];
            s += c->freq[v] / (double)c->n_tokens * e;
        }
        if (tied && c->n_seen[KVQ_SITE_LM_HEAD] > 0)
            s += linear_sensitivity(c->m[KVQ_SITE_LM_HEAD], c->n_seen[KVQ_SITE_LM_HEAD], w, rows, cols);
        return s;
    }
    int layer, site = site_of(name, &layer);
    if (site < 0 || cols != c->cols[site] || c->n_seen[site] <= 0) return NAN;
    if (site != KVQ_SITE_LM_HEAD && (layer < 0 || layer >= c->n_layers)) return NAN;
    const double *m = c->m[site] + (size_t)(site == KVQ_SITE_LM_HEAD ? 0 : layer) * cols;
    return linear_sensitivity(m, c->n_seen[site], w, rows, cols);
}

// Where tensor `name`'s output lands: site, layer, first row and rows of the site's output.
static int locate(const kvq_calib *c, const char *name, int64_t rows, int *layer, int *r0) {
    int site = site_of(name, layer);
    *r0 = 0;
    if (site < 0) return -1;
    int64_t want = rows;
    const char *r = strstr(name, "layers.") ? strchr(strchr(name, '.') + 1, '.') : NULL; // after "model.layers"
    (void)r;
    if (strstr(name, ".q_proj.")) want = c->q_dim;
    else if (strstr(name, ".k_proj.")) want = c->kv_dim, *r0 = c->q_dim;
    else if (strstr(name, ".v_proj.")) want = c->kv_dim, *r0 = c->q_dim + c->kv_dim;
    else if (strstr(name, ".qkv_proj.")) want = c->q_dim + 2 * c->kv_dim;
    else if (strstr(name, ".gate_proj.")) want = c->ffn;
    else if (strstr(name, ".up_proj.")) want = c->ffn, *r0 = c->ffn;
    else if (strstr(name, ".gate_up_proj.")) want = 2 * c->ffn;
    else if (strstr(name, ".o_proj.") || strstr(name, ".down_proj.")) want = c->d;
    else if (site == KVQ_SITE_LM_HEAD) want = c->vocab;
    return want == rows ? site : -1;
}

/** Measured sensitivity: the mean KL divergence (nats per token, source ‖ probed) over the
 *  probe tokens when tensor name's weights carry a random error shaped as its HyperQuant error
 *  (Gaussian, per row and tile the tile's weight energy per weight) at PROBE_SNR_DB, applied to
 *  the real inputs (probe_t), divided by that SNR's 10^(-SNR/10): KLD at SNR s ≈ this · 10^(-s/10). */
static kvq_status probe_tensor(kvq_calib *c, const char *name, const float *w, int64_t rows, int64_t cols, int tied,
                               uint64_t seed, double *out, kvq_err *err) {
    *out = NAN;
    probe_t *p = &c->pr;
    float *xkeep = p->x;
    memset(p, 0, sizeof *p);
    p->x = xkeep;
    p->site = -1;
    int layer = -1, r0 = 0, site;
    if (is_embedding(name)) {
        if (rows != c->vocab || cols != c->d) return KVQ_OK;
        site = tied ? KVQ_SITE_LM_HEAD : -2;
    } else if ((site = locate(c, name, rows, &layer, &r0)) < 0 || cols != c->cols[site])
        return KVQ_OK;
    int64_t cols_p;
    const int T = kvq_hq_tile_for(cols, 128, &cols_p);
    const double eps = pow(10.0, -PROBE_SNR_DB / 10.0);
    float *dw = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    if (!dw) return kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", name);
#pragma omp parallel for
    for (int64_t r = 0; r < rows; r++) { // each row its own stream: the same ΔW for any thread count
        uint64_t rng = seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(r + 1));
        for (int64_t j0 = 0; j0 < cols; j0 += T) {
            int64_t j1 = j0 + T < cols ? j0 + T : cols;
            double e = 0.0;
            for (int64_t j = j0; j < j1; j++) e += (double)w[r * cols + j] * w[r * cols + j];
            const double sd = sqrt(eps * e / T);
            for (int64_t j = j0; j < j1; j++) dw[r * cols + j] = (float)(sd * gauss(&rng));
        }
    }
    p->site = site, p->layer = layer, p->r0 = r0, p->rows = (int)rows, p->cols = (int)cols;
    p->embed = is_embedding(name);
    p->head = site == KVQ_SITE_LM_HEAD;
    p->dw = dw;
    kvq_status s = probe_forward(c, err);
    p->site = -1, p->embed = 0, p->dw = NULL;
    free(dw);
    if (s) { kvq_err_prefix(err, "sensitivity probe of '%s'", name); return s; }
    double kld = 0.0;
    for (int t = 0; t < c->n_probe; t++) {
        const float *a = c->ref + (size_t)t * c->vocab, *b = c->logits + (size_t)t * c->vocab;
        double k = 0.0;
        for (int v = 0; v < c->vocab; v++) k += exp((double)a[v]) * ((double)a[v] - (double)b[v]);
        kld += k;
    }
    kld /= c->n_probe;
    *out = (kld > 1e-12 ? kld : 1e-12) / eps;
    return KVQ_OK;
}

// ---- allocation --------------------------------------------------------------------

#define R_LO 1.5
#define R_HI 8.0
#define R_STEP 0.005
#define N_GRID ((int)((R_HI - R_LO) / R_STEP + 0.5) + 1)

typedef struct {
    size_t i;          // entry index
    double numel;
    double sens;       // sensitivity (output-error energy per token at 0 dB)
    double side;       // bits per weight that are not codes (norms, offsets, alignment, params)
    int can_keep;      // embeddings and lm_head may stay at source precision
    double keep_bits;  // their stored bits then
    int choice;        // grid index, or -1: kept
    double rate;       // final rate (bits per weight); NAN when kept
} part_t;

// Distortion of tensor p at effective rate r: sens · 10^(-SNR(code rate)/10).
static double distortion(const part_t *p, kvq_lattice lat, double r) {
    double snr = kvq_hqcal_snr_for_rate(lat, r - p->side);
    return p->sens * pow(10.0, -snr / 10.0);
}

// Each tensor's best option at slope lambda (distortion per bit); returns the total bits.
static double choose(part_t *P, size_t np, const double *D, double lambda) {
    double bits = 0.0;
    for (size_t k = 0; k < np; k++) {
        part_t *p = &P[k];
        const double *d = D + k * N_GRID;
        int best = 0;
        double bc = d[0] + lambda * R_LO * p->numel;
        for (int g = 1; g < N_GRID; g++) {
            double c = d[g] + lambda * (R_LO + g * R_STEP) * p->numel;
            if (c < bc) bc = c, best = g;
        }
        p->choice = best;
        if (p->can_keep && lambda * p->keep_bits < bc) p->choice = -1;
        bits += p->choice < 0 ? p->keep_bits : (R_LO + p->choice * R_STEP) * p->numel;
    }
    return bits;
}

// What the budget pays first (fixed_bits: tensors that do not take part, as planned) and the
// tensors that take part (P, np; sens not yet measured), with the base HyperQuant spec.
typedef struct {
    const char *base;
    kvq_lattice lat;
    double params, fixed_bits, lo_bits, hi_bits; // lo/hi: the fewest / most bits of the parts
    part_t *P;
    size_t np;
    int tied;
} budget_t;

static double lossless_bits(const kvq_tensor *t) {
    char pj[64];
    return 8.0 * (double)(kvq_entry_stored_estimate(t->data, t->nbytes, KVQ_ENTRY_ZSTD_AUTO) +
                          (uint64_t)snprintf(pj, sizeof pj, "{\"dtype\":\"%s\"}", kvq_dtype_name(t->dtype)));
}

// A tensor the budget rates (the rest is paid first, as planned).
static int takes_part(const kvq_tensor *t, const kvq_plan_entry *e) {
    return t->ndim >= 2 && e->numel > 0 && (!strcmp(e->why, "weights") || !strcmp(e->why, "built-in: embedding"));
}

void kvq_alloc_work(const kvq_ckpt *ck, const kvq_plan_entry *e, size_t n, int n_tokens, kvq_alloc_work_t *w) {
    memset(w, 0, sizeof *w);
    for (size_t i = 0; i < n; i++) {
        w->params += (double)e[i].numel;
        if (takes_part(kvq_ckpt_tensor(ck, i), &e[i])) w->n_probes++;
    }
    // kvq_calib_run's windows: the model's context (kvq_model_open's default), at most 512
    const int mpe = kvq_ckpt_arch(ck)->max_position_embeddings;
    int ctx = mpe > 0 && mpe < 4096 ? mpe : 4096;
    ctx = ctx < 512 ? ctx : 512;
    int pt = ctx < N_PROBE ? ctx : N_PROBE;
    w->probe_tokens = pt < n_tokens ? pt : n_tokens;
    w->work = w->params * ((double)n_tokens + (double)w->n_probes * w->probe_tokens);
}

static kvq_status budget_parts(kvq_plan *pl, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, double target_bpw,
                               budget_t *B, kvq_err *err) {
    memset(B, 0, sizeof *B);
    kvq_plan_budget_t b;
    kvq_plan_budget(pl, &b);
    B->base = b.weights_spec && strcmp(b.weights_spec, "none") ? b.weights_spec : "hyperquant:e8:4.0";
    if (strncmp(B->base, "hyperquant:", 11))
        return kvq_err_set(err, KVQ_ERR_ARG, "--target-bpw allocates HyperQuant rates: the weights codec '%s' is not "
                           "hyperquant (use --weights hyperquant:e8:4.0 or leave weights unset)", B->base);
    char latname[8] = {0};
    sscanf(B->base + 11, "%7[^:]", latname);
    if (kvq_lattice_parse(latname, &B->lat)) return kvq_err_set(err, KVQ_ERR_ARG, "weights codec '%s': unknown lattice", B->base);
    if (strstr(B->base, "db"))
        return kvq_err_set(err, KVQ_ERR_ARG, "--target-bpw: the weights codec '%s' has a fixed SNR, not a rate", B->base);
    if (!(B->P = calloc(n ? n : 1, sizeof *B->P))) return kvq_err_set(err, KVQ_ERR_NOMEM, "allocation: out of memory");
    B->tied = 1;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(e[i].name, "lm_head.weight")) B->tied = 0;
    for (size_t i = 0; i < n; i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        B->params += (double)e[i].numel;
        int emb = is_embedding(e[i].name) || !strcmp(e[i].name, "lm_head.weight");
        if (!takes_part(t, &e[i])) { // paid first: what the entry stores as planned
            double bits = e[i].codec->lossless ? lossless_bits(t)
                                               : kvq_codec_predict_bits(e[i].codec, e[i].cfg, e[i].rows, e[i].cols, e[i].dtype);
            if (!isfinite(bits))
                return kvq_err_set(err, KVQ_ERR_ARG, "--target-bpw: tensor '%s' has codec %s whose size is known only "
                                   "after encoding (fixed SNR): give it a rate", e[i].name, e[i].spec);
            B->fixed_bits += bits;
            continue;
        }
        part_t *p = &B->P[B->np++];
        p->i = i;
        p->numel = (double)e[i].numel;
        int64_t cols_p;
        int T = kvq_hq_tile_for(e[i].cols, 128, &cols_p);
        // norms (8 bits a tile), offsets (32 bits per 16 tiles), alignment, params JSON (~400 bytes)
        p->side = ((8.0 + 2.0) / T) * (double)cols_p / (double)e[i].cols + 0.002 + 3200.0 / p->numel;
        p->can_keep = emb;
        if (emb) p->keep_bits = lossless_bits(t);
        B->lo_bits += R_LO * p->numel;
        B->hi_bits += emb && p->keep_bits > R_HI * p->numel ? p->keep_bits : R_HI * p->numel;
    }
    double budget = target_bpw * B->params - B->fixed_bits;
    if (B->np == 0 || budget < B->lo_bits || budget > B->hi_bits + 1e-9 * B->params)
        return kvq_err_set(err, KVQ_ERR_ARG, "--target-bpw %g: this model can be stored in %.3f to %.3f bits per parameter "
                           "with these rules (rates %.1f to %.1f bits/w, embeddings at most at source precision)",
                           target_bpw, (B->lo_bits + B->fixed_bits) / B->params, (B->hi_bits + B->fixed_bits) / B->params,
                           R_LO, R_HI);
    return KVQ_OK;
}

kvq_status kvq_alloc_check(kvq_plan *pl, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, double target_bpw, kvq_err *err) {
    budget_t B;
    kvq_status s = budget_parts(pl, ck, e, n, target_bpw, &B, err);
    free(B.P);
    return s;
}

static kvq_status solve(kvq_plan *pl, kvq_plan_entry *e, budget_t *B, kvq_status s, double target_bpw, kvq_err *err);

kvq_status kvq_alloc_apply_from(kvq_plan *pl, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, const char *from,
                                double target_bpw, kvq_err *err) {
    budget_t B;
    kvq_status s = budget_parts(pl, ck, e, n, target_bpw, &B, err);
    kvq_file *f = NULL;
    if (!s) s = kvq_file_open(from, &f, err);
    const json_t *ts = f ? json_object_get(kvq_file_manifest(f), "tensors") : NULL;
    for (size_t k = 0; k < B.np && !s; k++) {
        part_t *p = &B.P[k];
        const kvq_tensor *t = kvq_ckpt_tensor(ck, p->i);
        const json_t *rec = NULL, *x;
        size_t j;
        json_array_foreach(ts, j, x)
            if (!strcmp(json_string_value(json_object_get(x, "name")), t->name)) { rec = x; break; }
        const json_t *al = json_object_get(rec, "allocation"), *sh = json_object_get(rec, "shape");
        int same = rec && json_array_size(sh) == (size_t)t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = json_integer_value(json_array_get(sh, d)) == t->shape[d];
        if (!same || !al)
            s = kvq_err_set(err, KVQ_ERR_ARG, "%s: no stored sensitivity for tensor '%s' of this source (%s): calibrate "
                            "instead of --calib-from", from, t->name, !rec ? "no such tensor" : !same ? "another shape"
                                                                                                       : "not allocated");
        else {
            p->sens = json_number_value(json_object_get(al, "sensitivity"));
            e[p->i].output_error = json_number_value(json_object_get(al, "output_error"));
        }
    }
    kvq_file_close(f);
    return solve(pl, e, &B, s, target_bpw, err);
}

kvq_status kvq_alloc_apply(kvq_plan *pl, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, kvq_calib *c,
                           double target_bpw, int n_threads, kvq_calib_progress_fn progress, void *ud, kvq_err *err) {
    budget_t B;
    kvq_status s = budget_parts(pl, ck, e, n, target_bpw, &B, err);
    part_t *P = B.P;
    for (size_t k = 0; k < B.np && !s; k++) { // the probes
        part_t *p = &P[k];
        size_t i = p->i;
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        float *w = malloc(sizeof(float) * (size_t)e[i].numel);
        if (!w) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", e[i].name); break; }
        kvq_dtype_to_f32(t->dtype, t->data, (size_t)e[i].numel, w);
        int tie = B.tied && is_embedding(e[i].name);
        e[i].output_error = kvq_calib_sensitivity(c, e[i].name, w, e[i].rows, e[i].cols, tie);
        s = probe_tensor(c, e[i].name, w, e[i].rows, e[i].cols, tie, e[i].seed, &p->sens, err);
        free(w);
        if (!s && !isfinite(p->sens))
            s = kvq_err_set(err, KVQ_ERR_ARG, "--target-bpw: tensor '%s' (%" PRId64 " x %" PRId64 ") is no product the "
                            "calibration pass runs, so it has no measured sensitivity: give it a rule or --keep it",
                            e[i].name, e[i].rows, e[i].cols);
        if (!s && progress) {
            kvq_calib_progress pg = {.event = KVQ_CALIB_PROBE, .index = k, .count = B.np, .name = e[i].name,
                                     .sensitivity = p->sens};
            progress(ud, &pg);
        }
    }
    (void)n_threads;
    return solve(pl, e, &B, s, target_bpw, err);
}

kvq_status kvq_alloc_uniform(kvq_plan *pl, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, double target_bpw, kvq_err *err) {
    budget_t B;
    kvq_status s = budget_parts(pl, ck, e, n, target_bpw, &B, err);
    double qn = 0.0;
    for (size_t k = 0; k < B.np; k++) qn += B.P[k].numel;
    // HyperQuant's rate counts every stored bit of the tensor, so one rate meets the budget
    double r = qn > 0 ? (target_bpw * B.params - B.fixed_bits) / qn : R_LO;
    r = r < R_LO ? R_LO : r > R_HI ? R_HI : r;
    for (size_t k = 0; k < B.np && !s; k++) {
        kvq_plan_entry *en = &e[B.P[k].i];
        char spec[300];
        s = kvq_codec_spec_with_rate(B.base, r, en->dtype, spec, sizeof spec, err);
        if (!s) s = kvq_plan_entry_set_spec(pl, en, spec, "target_bpw: uniform", err);
    }
    free(B.P);
    return s;
}

// The equal-slope choice over B's parts (sensitivities measured), written into the entries.
static kvq_status solve(kvq_plan *pl, kvq_plan_entry *e, budget_t *B, kvq_status s, double target_bpw, kvq_err *err) {
    part_t *P = B->P;
    const size_t np = B->np;
    const double params = B->params, fixed_bits = B->fixed_bits;
    const char *base = B->base;
    const kvq_lattice lat = B->lat;
    double *D = s ? NULL : malloc(sizeof(double) * (np ? np : 1) * N_GRID);
    if (!s && !D) s = kvq_err_set(err, KVQ_ERR_NOMEM, "allocation: out of memory");
    const double budget = target_bpw * params - fixed_bits;
    if (!s) {
        for (size_t k = 0; k < np; k++)
            for (int g = 0; g < N_GRID; g++) D[k * N_GRID + g] = distortion(&P[k], lat, R_LO + g * R_STEP);
    }
    if (!s) {
        // Bisection on log λ: the largest total not above the budget.
        double llo = -400.0, lhi = 400.0; // λ = 10^x; llo gives too many bits, lhi few enough
        for (int it = 0; it < 200; it++) {
            double mid = 0.5 * (llo + lhi);
            if (choose(P, np, D, pow(10.0, mid)) > budget) llo = mid;
            else lhi = mid;
        }
        double bits = choose(P, np, D, pow(10.0, lhi));
        // The grid's leftover, spread evenly over the quantized tensors' rates (continuous rates).
        double qn = 0.0;
        for (size_t k = 0; k < np; k++)
            if (P[k].choice >= 0) qn += P[k].numel;
        double extra = qn > 0 ? (budget - bits) / qn : 0.0;
        for (size_t k = 0; k < np && !s; k++) {
            part_t *p = &P[k];
            kvq_plan_entry *en = &e[p->i];
            char why[64];
            if (p->choice < 0) {
                snprintf(why, sizeof why, "target_bpw: kept");
                s = kvq_plan_entry_set_spec(pl, en, "none", why, err);
            } else {
                double r = R_LO + p->choice * R_STEP + extra;
                r = r < 1.0 ? 1.0 : r > 8.5 ? 8.5 : r;
                char spec[300];
                snprintf(why, sizeof why, "target_bpw");
                s = kvq_codec_spec_with_rate(base, r, en->dtype, spec, sizeof spec, err);
                if (!s) s = kvq_plan_entry_set_spec(pl, en, spec, why, err);
            }
            en->sensitivity = p->sens;
        }
    }
    free(D);
    free(P);
    return s;
}
