// The whole-model budget (alloc.h): calibration pass, per-tensor sensitivity, and the
// equal-slope allocation of HyperQuant rates. docs/ALLOCATION.md says why this model of the
// error and what it was validated against.
#include "kernels/cpu/matmul.h"
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

// A sensitivity probe: random weight errors ΔW of one or more tensors (a layer's, at once, for
// the layer probe), each Gaussian with HyperQuant's error energy per tile (‖w_tile‖²/T per weight
// at the probe's SNR), applied to the real input: δy_t = ΔW·x_t added to the tensor's output rows
// [r0, r0 + rows) at its site, and the embedding's ΔW row of each looked-up id added to the
// lookup (both for a tied embedding). One ΔW for every token, as a stored weight error is: tokens
// with like inputs get like errors.
#define MAX_TARGETS 8
typedef struct {
    int layer, site;          // site KVQ_SITE_LM_HEAD: layer -1
    int r0, rows, cols;
    float *dw;                // (rows, cols) the weight error
    float *x;                 // (max_batch, max cols): the current chunk's input to the target
} target_t;

typedef struct {
    target_t tg[MAX_TARGETS];
    int n;
    const float *emb_dw;      // (vocab, d): the embedding's error on lookups, or NULL
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
    float *H;                 // (n_layers + 1, n_probe, d): the source's residual stream before each layer
    float *h;                 // (n_probe, d) scratch: a probed residual stream
    float *ytmp;              // (max_batch, widest target's rows) scratch: a target's ΔW·x
    int stats;                // 1: the statistics pass (observe accumulates)
    int n_threads;            // the model's (0: OpenMP default)
    kvq_probe_kind kind;      // how kvq_alloc_apply measures (alloc.h)
    double *lp;               // (n_layers + 1) parameters per layer, [n_layers] the head's: the probes' work
    double work_done;         // parameter-tokens the probes ran so far
    probe_t pr;
    // input covariances for LDLQ (kvq_calib_run with hessian): per site (n_layers or 1, cols, cols)
    // Σ x xᵀ in double, the statistics pass's inputs buffered XB tokens at a time per layer and site
    double *cov[N_SITES];
    float *xb[N_SITES];       // (n_layers or 1, XB, cols) buffered inputs
    int *xn[N_SITES];         // (n_layers or 1) tokens buffered
    float *xt, *ctmp;         // scratch: (max cols, XB) transposed inputs, (max cols, max cols) their product
};
#define XB 128

void kvq_calib_free(kvq_calib *c) {
    if (!c) return;
    for (int i = 0; i < N_SITES; i++) free(c->m[i]), free(c->cov[i]), free(c->xb[i]), free(c->xn[i]);
    free(c->xt);
    free(c->ctmp);
    free(c->freq);
    kvq_model_close(c->model);
    free(c->probe_ids);
    free(c->ref);
    free(c->logits);
    free(c->H);
    free(c->h);
    free(c->ytmp);
    free(c->lp);
    for (int i = 0; i < MAX_TARGETS; i++) free(c->pr.tg[i].x);
    free(c);
}

size_t kvq_calib_tokens(const kvq_calib *c) { return c->n_tokens; }

// Adds the buffered inputs of (site, layer slot l) to its covariance: their XᵀX in fp32 by the
// runtime's product (at most XB tokens: no precision to speak of lost), then into the double sums.
static void cov_flush(kvq_calib *c, int site, int l) {
    const int cols = c->cols[site], n = c->xn[site][l];
    if (n == 0) return;
    const float *x = c->xb[site] + (size_t)l * XB * cols;
    for (int t = 0; t < n; t++)
        for (int j = 0; j < cols; j++) c->xt[(size_t)j * n + t] = x[(size_t)t * cols + j];
    kvq_matmul(c->ctmp, c->xt, c->xt, KVQ_DTYPE_F32, cols, n, cols, NULL, c->n_threads);
    double *h = c->cov[site] + (size_t)l * cols * cols;
    for (size_t i = 0; i < (size_t)cols * cols; i++) h[i] += (double)c->ctmp[i];
    c->xn[site][l] = 0;
}

static void observe(void *ud, int layer, kvq_model_site site, const float *x, int T, int cols) {
    kvq_calib *c = ud;
    if ((int)site < 0 || site >= N_SITES || cols != c->cols[site]) return;
    if (!c->stats) { // a probe: keep the targets' inputs for perturb
        probe_t *p = &c->pr;
        for (int i = 0; i < p->n; i++) {
            target_t *g = &p->tg[i];
            if (g->site == (int)site && (site == KVQ_SITE_LM_HEAD || g->layer == layer) && cols == g->cols)
                memcpy(g->x, x, sizeof(float) * (size_t)T * cols);
        }
        return;
    }
    const int ls = site == KVQ_SITE_LM_HEAD ? 0 : layer;
    if (c->cov[site])
        for (int t = 0; t < T; t++) {
            memcpy(c->xb[site] + ((size_t)ls * XB + c->xn[site][ls]) * cols, x + (size_t)t * cols, sizeof(float) * cols);
            if (++c->xn[site][ls] == XB) cov_flush(c, site, ls);
        }
    double *m = c->m[site] + (size_t)ls * cols;
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
        if (!p->emb_dw) return;
        for (int t = 0; t < T; t++) {
            const float *dw = p->emb_dw + (size_t)p->ids[t] * rows;
            for (int j = 0; j < rows; j++) y[(size_t)t * rows + j] += dw[j];
        }
        return;
    }
    for (int i = 0; i < p->n; i++) {
        const target_t *g = &p->tg[i];
        if (g->site != (int)site || (site != KVQ_SITE_LM_HEAD && layer != g->layer)) continue;
        kvq_alloc_add_dwx(y, rows, g->r0, g->dw, g->x, T, g->rows, g->cols, c->ytmp, c->n_threads);
    }
}

void kvq_alloc_add_dwx(float *y, int64_t ldy, int r0, const float *dw, const float *x, int T, int rows, int cols,
                       float *tmp, int n_threads) {
    kvq_matmul(tmp, x, dw, KVQ_DTYPE_F32, T, cols, rows, NULL, n_threads); // fp32 weights: no scratch
    for (int t = 0; t < T; t++) {
        float *yt = y + (size_t)t * ldy + r0;
        const float *d = tmp + (size_t)t * rows;
        for (int r = 0; r < rows; r++) yt[r] += d[r];
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

// The probe tokens (one window from position 0) through layers [l0, l1): entering with the
// residual stream h_in (n_probe, d) before layer l0, or with the tokens' embeddings (h_in NULL,
// l0 = 0); the stream after layer l1 − 1 into h_out, or (h_out NULL, l1 the last layer) the
// log-probabilities into c->logits. The same chunks as a whole forward, so the same numbers.
static kvq_status probe_run(kvq_calib *c, const float *h_in, int l0, int l1, float *h_out, kvq_err *err) {
    kvq_status s = KVQ_OK;
    const int L = c->n_layers, head = !h_out && l1 == L;
    for (int c0 = 0; c0 < c->n_probe && !s; c0 += c->max_batch) {
        int cn = c->n_probe - c0 < c->max_batch ? c->n_probe - c0 : c->max_batch;
        c->pr.ids = c->probe_ids + c0;
        s = kvq_model_forward_layers(c->model, c->probe_ids + c0, h_in ? h_in + (size_t)c0 * c->d : NULL, l0, l1, cn, c0,
                                     h_out ? h_out + (size_t)c0 * c->d : NULL,
                                     head ? c->logits + (size_t)c0 * c->vocab : NULL, err);
    }
    for (int l = l0; c->lp && l <= l1 && l <= L; l++) // what kvq_alloc_work counts: the layers run, the head
        if (l < l1 || head) c->work_done += c->lp[l] * c->n_probe;
    if (!s && head) kvq_log_softmax_rows(c->logits, c->n_probe, c->vocab);
    return s;
}

// The source's residual stream before every layer and after the last (c->H), and its
// log-probabilities (c->ref), on the probe tokens.
static kvq_status probe_reference(kvq_calib *c, kvq_err *err) {
    const size_t hs = (size_t)c->n_probe * c->d;
    kvq_status s = probe_run(c, NULL, 0, 0, c->H, err);
    for (int l = 0; l < c->n_layers && !s; l++) s = probe_run(c, c->H + l * hs, l, l + 1, c->H + (l + 1) * hs, err);
    if (!s) s = probe_run(c, c->H + (size_t)c->n_layers * hs, c->n_layers, c->n_layers, NULL, err);
    if (!s) memcpy(c->ref, c->logits, sizeof(float) * (size_t)c->n_probe * c->vocab);
    return s;
}

// Reports the statistics pass's tokens done of total.
static void pass_progress(kvq_calib_progress_fn fn, void *ud, size_t done, size_t total) {
    if (!fn) return;
    kvq_calib_progress p = {.event = KVQ_CALIB_PASS, .index = done, .count = total};
    fn(ud, &p);
}

// (kvq_mem_available) Bytes of memory this process may still take: KVQ_MEM_AVAILABLE_MB when set (tests, containers whose
// /proc/meminfo describes the host), else MemAvailable of /proc/meminfo; 0 when unknown (no check).
double kvq_calib_ldlq_bytes(const kvq_arch *a) {
    const double d = a->hidden_size, q = (double)a->n_heads * a->head_dim, f = a->intermediate_size, nl = a->n_layers;
    const double w[N_SITES] = {[KVQ_SITE_QKV] = d, [KVQ_SITE_O] = q, [KVQ_SITE_GATE_UP] = d, [KVQ_SITE_DOWN] = f, [KVQ_SITE_LM_HEAD] = d};
    double mc = 0.0, need = 0.0;
    for (int i = 0; i < N_SITES; i++) {
        const double ns = i == KVQ_SITE_LM_HEAD ? 1.0 : nl;
        need += ns * (w[i] * w[i] * sizeof(double) + XB * w[i] * sizeof(float) + sizeof(int));
        mc = w[i] > mc ? w[i] : mc;
    }
    return need + mc * XB * sizeof(float) + mc * mc * sizeof(float);
}

double kvq_mem_available(void) {
    const char *ev = getenv("KVQ_MEM_AVAILABLE_MB");
    if (ev && *ev) {
        char *end = NULL;
        const double mb = strtod(ev, &end);
        if (end != ev && *end == 0 && mb > 0) return mb * 1048576.0;
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0.0;
    char line[256];
    double kb = 0.0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024.0;
}

kvq_status kvq_calib_run(const char *src, const char *text_path, int n_tokens, uint64_t seed, int n_threads, int hessian,
                         kvq_calib_progress_fn progress, void *ud, kvq_calib **out, kvq_err *err) {
    *out = NULL;
    kvq_calib *c = calloc(1, sizeof *c);
    if (!c) return kvq_err_set(err, KVQ_ERR_NOMEM, "calibration: out of memory");
    c->stats = 1, c->n_threads = n_threads;
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
    if (hessian && !s) {
        int mc = 0;
        for (int i = 0; i < N_SITES; i++) mc = c->cols[i] > mc ? c->cols[i] : mc;
        const size_t nl = (size_t)a->n_layers;
        // every layer's covariances are held at once (~65 GB at the 8B shape): refused in one line when they do not
        // fit the memory left after the model, instead of failing mid-pass or being killed
        const double need = kvq_calib_ldlq_bytes(a);
        const double avail = kvq_mem_available();
        if (avail > 0 && need > 0.9 * avail) {
            s = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: ldlq's input covariances need %.2f GB (Σ x xᵀ in double for %d layers, "
                            "inputs up to %d wide) and %.2f GB of memory is available: drop ':ldlq' from the weights spec, "
                            "or convert on a machine with more memory", src, need / 1e9, a->n_layers, mc, avail / 1e9);
            goto done;
        }
        for (int i = 0; i < N_SITES && !s; i++) {
            const size_t ns = i == KVQ_SITE_LM_HEAD ? 1 : nl, w = (size_t)c->cols[i];
            if (!(c->cov[i] = calloc(ns * w * w, sizeof(double))) || !(c->xb[i] = malloc(sizeof(float) * ns * XB * w)) ||
                !(c->xn[i] = calloc(ns, sizeof(int))))
                s = KVQ_ERR_NOMEM;
        }
        if (!s && (!(c->xt = malloc(sizeof(float) * (size_t)mc * XB)) || !(c->ctmp = malloc(sizeof(float) * (size_t)mc * mc))))
            s = KVQ_ERR_NOMEM;
    }
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
    for (int i = 0; i < N_SITES; i++) // the covariances' last partial buffers
        for (int l = 0; c->cov[i] && l < (i == KVQ_SITE_LM_HEAD ? 1 : c->n_layers); l++) cov_flush(c, i, l);
    for (int i = 0; i < N_SITES; i++) free(c->xb[i]), c->xb[i] = NULL;
    // the probes' tokens and the source's log-probabilities on them
    c->stats = 0;
    if ((size_t)c->n_probe > n_ids) c->n_probe = (int)n_ids;
    const int maxc = c->d > c->ffn ? (c->d > c->q_dim ? c->d : c->q_dim) : (c->ffn > c->q_dim ? c->ffn : c->q_dim);
    int ok = (c->probe_ids = malloc(sizeof(int32_t) * c->n_probe)) && (c->ref = malloc(sizeof(float) * (size_t)c->n_probe * c->vocab)) &&
             (c->H = malloc(sizeof(float) * (size_t)(c->n_layers + 1) * c->n_probe * c->d)) &&
             (c->h = malloc(sizeof(float) * (size_t)c->n_probe * c->d));
    int maxr = c->vocab > c->d ? c->vocab : c->d; // a target's rows: lm_head's, qkv's, gate_up's at most
    if (c->q_dim + 2 * c->kv_dim > maxr) maxr = c->q_dim + 2 * c->kv_dim;
    if (2 * c->ffn > maxr) maxr = 2 * c->ffn;
    ok = ok && (c->ytmp = malloc(sizeof(float) * (size_t)c->max_batch * maxr)) != NULL;
    for (int i = 0; i < MAX_TARGETS && ok; i++) ok = (c->pr.tg[i].x = malloc(sizeof(float) * (size_t)c->max_batch * maxc)) != NULL;
    if (!ok) {
        s = kvq_err_set(err, KVQ_ERR_NOMEM, "calibration: out of memory");
        goto done;
    }
    memcpy(c->probe_ids, ids, sizeof(int32_t) * c->n_probe);
    if ((s = probe_reference(c, err))) goto done;
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

const double *kvq_calib_hessian(const kvq_calib *c, const char *name, int64_t rows, int64_t cols) {
    int layer;
    if (is_embedding(name)) return NULL; // a lookup: its error is not a product's (a tied table too)
    int site = site_of(name, &layer);
    if (site < 0 || !c->cov[site] || cols != c->cols[site] || c->n_seen[site] <= 0) return NULL;
    if (site != KVQ_SITE_LM_HEAD && (layer < 0 || layer >= c->n_layers)) return NULL;
    return c->cov[site] + (size_t)(site == KVQ_SITE_LM_HEAD ? 0 : layer) * cols * cols;
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

// HyperQuant's error shape for w (rows, cols) at the probe's SNR: Gaussian, each weight of a tile
// with variance ε · ‖w_tile‖²/T, each row from its own stream (the same ΔW for any thread count).
static float *probe_dw(const float *w, int64_t rows, int64_t cols, uint64_t seed) {
    int64_t cols_p;
    const int T = kvq_hq_tile_for(cols, 128, &cols_p);
    const double eps = pow(10.0, -PROBE_SNR_DB / 10.0);
    float *dw = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    if (!dw) return NULL;
#pragma omp parallel for
    for (int64_t r = 0; r < rows; r++) {
        uint64_t rng = seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(r + 1));
        for (int64_t j0 = 0; j0 < cols; j0 += T) {
            int64_t j1 = j0 + T < cols ? j0 + T : cols;
            double e = 0.0;
            for (int64_t j = j0; j < j1; j++) e += (double)w[r * cols + j] * w[r * cols + j];
            const double sd = sqrt(eps * e / T);
            for (int64_t j = j0; j < j1; j++) dw[r * cols + j] = (float)(sd * gauss(&rng));
        }
    }
    return dw;
}

// Where tensor `name` enters the forward: *l0 the first layer a probe must run (n_layers: only the
// lm_head; 0 for an embedding, whose probe starts at the lookup); target g (site -1: no product,
// an untied embedding's lookup only). -1 when the runtime has no product for it.
static int probe_target(const kvq_calib *c, const char *name, int64_t rows, int64_t cols, int tied, target_t *g, int *l0) {
    int layer = -1, r0 = 0, site;
    if (is_embedding(name)) {
        if (rows != c->vocab || cols != c->d) return -1;
        site = tied ? KVQ_SITE_LM_HEAD : -1;
        *l0 = 0;
    } else {
        if ((site = locate(c, name, rows, &layer, &r0)) < 0 || cols != c->cols[site]) return -1;
        *l0 = site == KVQ_SITE_LM_HEAD ? c->n_layers : layer;
    }
    g->site = site, g->layer = site == KVQ_SITE_LM_HEAD ? -1 : layer, g->r0 = r0, g->rows = (int)rows, g->cols = (int)cols;
    return 0;
}

// Mean KL divergence (nats per token, source ‖ probed) of c->logits against c->ref.
static double probe_kld(const kvq_calib *c) {
    double kld = 0.0;
    for (int t = 0; t < c->n_probe; t++) {
        const float *a = c->ref + (size_t)t * c->vocab, *b = c->logits + (size_t)t * c->vocab;
        double k = 0.0;
        for (int v = 0; v < c->vocab; v++) k += exp((double)a[v]) * ((double)a[v] - (double)b[v]);
        kld += k;
    }
    return kld / c->n_probe;
}

// The probed residual stream c->h after layer l − 1 against the source's: the mean over tokens of
// ‖δh_t‖² / ‖h_t‖² (rel), and of ‖δh_t‖² (abs).
static void probe_resid_err(const kvq_calib *c, int l, double *rel, double *abs_) {
    const float *H = c->H + (size_t)l * c->n_probe * c->d;
    double r = 0.0, a = 0.0;
    for (int t = 0; t < c->n_probe; t++) {
        double e = 0.0, h2 = 0.0;
        for (int j = 0; j < c->d; j++) {
            double dv = (double)c->h[(size_t)t * c->d + j] - H[(size_t)t * c->d + j];
            e += dv * dv, h2 += (double)H[(size_t)t * c->d + j] * H[(size_t)t * c->d + j];
        }
        a += e, r += e / (h2 > 1e-30 ? h2 : 1e-30);
    }
    *rel = r / c->n_probe, *abs_ = a / c->n_probe;
}

// Points the probe at targets g[0..n) with errors dw[0..n) (emb_dw: the embedding's, or NULL).
static void probe_set(kvq_calib *c, const target_t *g, float *const *dw, int n, const float *emb_dw) {
    probe_t *p = &c->pr;
    p->n = 0;
    for (int i = 0; i < n; i++) {
        if (g[i].site < 0) continue;
        target_t *t = &p->tg[p->n++];
        t->site = g[i].site, t->layer = g[i].layer, t->r0 = g[i].r0, t->rows = g[i].rows, t->cols = g[i].cols;
        t->dw = dw[i];
    }
    p->emb_dw = emb_dw;
}

static void probe_clear(kvq_calib *c) { c->pr.n = 0, c->pr.emb_dw = NULL; }

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
    int nb;            // > 0: the tensor's rows in nb blocks (embedding, lm_head), each its own unit
    int64_t brows;     // rows per block (the last may have fewer)
    double share[KVQ_ALLOC_BLOCKS], bnumel[KVQ_ALLOC_BLOCKS], bside[KVQ_ALLOC_BLOCKS];
    int bchoice[KVQ_ALLOC_BLOCKS];
    size_t d0;         // first row of the part's distortion table (nb rows when blocked, else one)
} part_t;

// Distortion of tensor p at effective rate r: sens · 10^(-SNR(code rate)/10).
static double distortion(const part_t *p, kvq_lattice lat, double r) {
    double snr = kvq_hqcal_snr_for_rate(lat, r - p->side);
    return p->sens * pow(10.0, -snr / 10.0);
}

// The best grid rate of one unit (distortion row d, n weights) at slope lambda; *cost its cost.
static int best_rate(const double *d, double n, double lambda, double *cost) {
    int best = 0;
    double bc = d[0] + lambda * R_LO * n;
    for (int g = 1; g < N_GRID; g++) {
        double c = d[g] + lambda * (R_LO + g * R_STEP) * n;
        if (c < bc) bc = c, best = g;
    }
    *cost = bc;
    return best;
}

double kvq_alloc_window_choose(const double *cost, int nb, int ng, int fg, int ga, int *choice) {
    double *tot = calloc((size_t)ng, sizeof *tot);
    int *arg = malloc(sizeof(int) * (size_t)ng * (size_t)nb), *dq = malloc(sizeof(int) * (size_t)ng);
    double best_cost = NAN;
    if (tot && arg && dq && ng > 0) {
        for (int b = 0; b < nb; b++) {
            const double *c = cost + (size_t)b * ng;
            int head = 0, tail = 0; // dq[head..tail): grid points of the window, costs increasing
            for (int t = 0; t < ng; t++) {
                const int lo = t - fg < ga ? t - fg : ga; // the window's lowest point: nondecreasing in t
                while (tail > head && c[dq[tail - 1]] >= c[t]) tail--;
                dq[tail++] = t;
                while (dq[head] < lo) head++;
                arg[(size_t)b * ng + t] = dq[head];
                tot[t] += c[dq[head]];
            }
        }
        int best = 0;
        for (int t = 1; t < ng; t++)
            if (tot[t] < tot[best]) best = t;
        for (int b = 0; b < nb; b++) choice[b] = arg[(size_t)b * ng + best];
        best_cost = tot[best];
    }
    free(tot);
    free(arg);
    free(dq);
    return best_cost;
}

// A blocked tensor's blocks at slope lambda with none more than fg grid steps below the highest
// or below grid point ga, whichever is lower (kvq_alloc_window_choose over their costs); *cost
// their cost, unchanged if out of memory.
static void choose_floored(part_t *p, const double *D, double lambda, int fg, int ga, double *cost) {
    double c[KVQ_ALLOC_BLOCKS * N_GRID];
    for (int b = 0; b < p->nb; b++)
        for (int g = 0; g < N_GRID; g++)
            c[b * N_GRID + g] = D[(p->d0 + b) * N_GRID + g] + lambda * (R_LO + g * R_STEP) * p->bnumel[b];
    double tc = kvq_alloc_window_choose(c, p->nb, N_GRID, fg, ga, p->bchoice);
    if (!isnan(tc)) *cost = tc;
}

// Each tensor's best option at slope lambda (distortion per bit); returns the total bits. A
// blocked tensor's blocks choose their rates independently (none below the highest − bfloor or
// bcap bits, whichever is lower),
// and keeping the tensor (embeddings) is weighed against all its blocks' cost together.
static double choose(part_t *P, size_t np, const double *D, double lambda, double bfloor, double bcap) {
    const int fg = isinf(bfloor) ? N_GRID : (int)(bfloor / R_STEP + 0.5),
              ga = isinf(bcap) ? N_GRID : bcap <= R_LO ? 0 : (int)((bcap - R_LO) / R_STEP + 0.5);
    double bits = 0.0;
    for (size_t k = 0; k < np; k++) {
        part_t *p = &P[k];
        double bc = 0.0, qb = 0.0;
        if (p->nb > 0) {
            for (int b = 0; b < p->nb; b++) {
                double c;
                p->bchoice[b] = best_rate(D + (p->d0 + b) * N_GRID, p->bnumel[b], lambda, &c);
                bc += c;
            }
            int lo = N_GRID, hi = 0;
            for (int b = 0; b < p->nb; b++)
                lo = p->bchoice[b] < lo ? p->bchoice[b] : lo, hi = p->bchoice[b] > hi ? p->bchoice[b] : hi;
            if (lo < (hi - fg < ga ? hi - fg : ga)) choose_floored(p, D, lambda, fg, ga, &bc);
            for (int b = 0; b < p->nb; b++) qb += (R_LO + p->bchoice[b] * R_STEP) * p->bnumel[b];
            p->choice = 0;
        } else {
            p->choice = best_rate(D + p->d0 * N_GRID, p->numel, lambda, &bc);
            qb = (R_LO + p->choice * R_STEP) * p->numel;
        }
        if (p->can_keep && lambda * p->keep_bits < bc) p->choice = -1;
        bits += p->choice < 0 ? p->keep_bits : qb;
    }
    return bits;
}

// Cuts part p (rows × cols) into blocks of brows rows with the given shares of its sensitivity;
// each block's side bits count its own params record (a block is its own HyperQuant stream).
static void set_blocks(part_t *p, int64_t rows, int64_t cols, int64_t brows, const double *share, int nb) {
    int64_t cols_p;
    int T = kvq_hq_tile_for(cols, 128, &cols_p);
    p->nb = nb, p->brows = brows;
    for (int b = 0; b < nb; b++) {
        int64_t r0 = b * brows, nr = rows - r0 < brows ? rows - r0 : brows;
        p->share[b] = share[b];
        p->bnumel[b] = (double)(nr * cols);
        p->bside[b] = ((8.0 + 2.0) / T) * (double)cols_p / (double)cols + 0.002 + 3600.0 / p->bnumel[b]; // + its record's keys
    }
}

// The rows of an embedding or lm_head (rows = vocabulary) in KVQ_ALLOC_BLOCKS blocks, each block's
// share of the tensor's sensitivity ∝ Σ over its rows of p̄_r · ‖w_r‖²: an embedding row's error
// costs when its token is read, an lm_head row's (its logit's) in proportion to the token's
// probability, and HyperQuant's error in a row is ∝ the row's energy. p̄: the source's mean
// next-token probability over the probe tokens (c->ref), the model's own estimate of how often
// each token comes. docs/ALLOCATION.md, "Row blocks".
static void block_shares(const kvq_calib *c, const kvq_tensor *t, int64_t rows, int64_t cols, part_t *p) {
    // blocks of at least 2^16 weights: each carries its own params record (~400 bytes), which on
    // a toy model's table (stories260K: 512 × 64) would cost more than the split buys
    if (!c || !c->ref || rows != c->vocab || rows < KVQ_ALLOC_BLOCKS || rows * cols < (int64_t)KVQ_ALLOC_BLOCKS << 16) return;
    double *pb = calloc((size_t)rows, sizeof *pb);
    float *w = malloc(sizeof(float) * (size_t)cols);
    if (pb && w) {
        for (int i = 0; i < c->n_probe; i++)
            for (int64_t r = 0; r < rows; r++) pb[r] += exp((double)c->ref[(size_t)i * c->vocab + r]);
        const int64_t brows = (rows + KVQ_ALLOC_BLOCKS - 1) / KVQ_ALLOC_BLOCKS;
        const int nb = (int)((rows + brows - 1) / brows);
        double share[KVQ_ALLOC_BLOCKS] = {0}, tot = 0.0;
        const size_t es = kvq_dtype_size(t->dtype);
        for (int64_t r = 0; r < rows; r++) {
            kvq_dtype_to_f32(t->dtype, (const uint8_t *)t->data + (size_t)(r * cols) * es, (size_t)cols, w);
            double e2 = 0.0;
            for (int64_t j = 0; j < cols; j++) e2 += (double)w[j] * (double)w[j];
            share[r / brows] += pb[r] * e2, tot += pb[r] * e2;
        }
        if (tot > 0) {
            for (int b = 0; b < nb; b++) share[b] = share[b] / tot > 1e-9 ? share[b] / tot : 1e-9;
            set_blocks(p, rows, cols, brows, share, nb);
        }
    }
    free(pb);
    free(w);
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

// The layers whose probe also measures the direct writers' share (up to four, evenly spaced).
static int sampled_layer(int l, int nl) { return nl <= 4 || l == 0 || l == nl - 1 || l == (nl - 1) / 3 || l == 2 * (nl - 1) / 3; }

// Parameters per layer P[0..L) and the head's P[L] (a tied embedding's, else lm_head's): what a
// probe token runs through in each; returns all parameters.
static double layer_params(const kvq_plan_entry *e, size_t n, int L, double *P) {
    int tied = 1;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(e[i].name, "lm_head.weight")) tied = 0;
    double emb = 0.0, all = 0.0;
    for (size_t i = 0; i < n; i++) {
        all += (double)e[i].numel;
        int l;
        if (sscanf(e[i].name, "model.layers.%d.", &l) == 1 && l >= 0 && l < L) P[l] += (double)e[i].numel;
        else if (!strcmp(e[i].name, "lm_head.weight")) P[L] += (double)e[i].numel;
        else if (is_embedding(e[i].name)) emb = (double)e[i].numel;
    }
    if (tied) P[L] += emb;
    return all;
}

void kvq_alloc_work(const kvq_ckpt *ck, const kvq_plan_entry *e, size_t n, int n_tokens, kvq_probe_kind kind,
                    kvq_alloc_work_t *w) {
    memset(w, 0, sizeof *w);
    const int L = kvq_ckpt_arch(ck)->n_layers > 0 ? kvq_ckpt_arch(ck)->n_layers : 0;
    double *P = calloc((size_t)L + 1, sizeof *P); // parameters per layer; P[L]: the lm_head's
    int *nq = calloc((size_t)L + 1, sizeof *nq);  // rated tensors per layer
    int *nqk = calloc((size_t)L + 1, sizeof *nqk); // of them q_proj, k_proj
    if (!P || !nq || !nqk) { free(P), free(nq), free(nqk); return; }
    w->params = layer_params(e, n, L, P);
    // kvq_calib_run's windows: the model's context (kvq_model_open's default), at most 512
    const int mpe = kvq_ckpt_arch(ck)->max_position_embeddings;
    int ctx = mpe > 0 && mpe < 4096 ? mpe : 4096;
    ctx = ctx < 512 ? ctx : 512;
    int pt = ctx < N_PROBE ? ctx : N_PROBE;
    w->probe_tokens = pt < n_tokens ? pt : n_tokens;
    double fwd = 0.0, probes = 0.0; // parameters a probe token runs through: all of them, summed over probes
    for (int l = 0; l <= L; l++) fwd += P[l];
    for (size_t i = 0; i < n; i++) {
        if (!takes_part(kvq_ckpt_tensor(ck, i), &e[i])) continue;
        w->n_probes++;
        int l = -1, site = is_embedding(e[i].name) ? -1 : site_of(e[i].name, &l);
        if (site == KVQ_SITE_LM_HEAD) l = L;
        else if (l < 0 || l >= L) l = 0; // an embedding: from the lookup
        if (kind == KVQ_PROBE_LAYER && l < L && !is_embedding(e[i].name)) {
            nq[l]++, nqk[l] += strstr(e[i].name, ".q_proj.") || strstr(e[i].name, ".k_proj.");
            continue;
        }
        for (int j = l; j <= L; j++) probes += P[j];
    }
    for (int l = 0; l < L; l++) { // each tensor through its layer, then the layer's errors through the rest
        if (!nq[l]) continue;
        probes += nq[l] * P[l];
        // all at once; q/k at once; in the sampled layers the direct writers at once
        const int runs = 1 + (nqk[l] > 0 && nqk[l] < nq[l]) + (sampled_layer(l, L) && nq[l] > 1);
        for (int j = l; j <= L; j++) probes += P[j] * runs;
    }
    w->forwards = fwd > 0 ? probes / fwd : 0.0;
    w->probe_work = probes * w->probe_tokens;
    // the statistics pass, the probes' reference (one forward), the probes
    w->work = w->params * (double)n_tokens + (fwd + probes) * w->probe_tokens;
    free(P);
    free(nq);
    free(nqk);
}

static kvq_status budget_parts(kvq_plan *pl, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, double target_bpw,
                               budget_t *B, kvq_err *err) {
    memset(B, 0, sizeof *B);
    kvq_plan_budget_t b;
    kvq_plan_budget(pl, &b);
    B->base = b.weights_spec && strcmp(b.weights_spec, "none") ? b.weights_spec : b.ldlq ? "hyperquant:e8:4.0:ldlq" : "hyperquant:e8:4.0";
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
            const json_t *bs = json_object_get(al, "block_shares");
            const int64_t brows = json_integer_value(json_object_get(al, "block_rows"));
            const int nb = (int)json_array_size(bs);
            double share[KVQ_ALLOC_BLOCKS];
            int ok = nb > 0 && nb <= KVQ_ALLOC_BLOCKS && brows > 0 && (e[p->i].rows + brows - 1) / brows == nb;
            for (int b = 0; ok && b < nb; b++)
                ok = (share[b] = json_number_value(json_array_get(bs, b))) > 0 && isfinite(share[b]);
            if (ok) set_blocks(p, e[p->i].rows, e[p->i].cols, brows, share, nb); // else: one rate, as the file had
        }
    }
    kvq_file_close(f);
    return solve(pl, e, &B, s, target_bpw, err);
}

void kvq_calib_set_probe(kvq_calib *c, kvq_probe_kind kind) { c->kind = kind; }

// One rated tensor's probe material: its weight error and target.
typedef struct {
    size_t k;        // index in the parts
    float *dw;
    target_t g;
    int l0;          // first layer its probe runs (probe_target)
} probing_t;

// Full probe of q: its error alone, from the layer it enters to the logits (KLD per token).
static kvq_status probe_full(kvq_calib *c, const probing_t *q, int is_emb, double *kld, kvq_err *err) {
    const size_t hs = (size_t)c->n_probe * c->d;
    probe_set(c, &q->g, &q->dw, 1, is_emb ? q->dw : NULL);
    kvq_status s = probe_run(c, is_emb ? NULL : c->H + (size_t)q->l0 * hs, q->l0, c->n_layers, NULL, err);
    probe_clear(c);
    *kld = s ? NAN : probe_kld(c);
    return s;
}

// Whether a tensor writes the residual stream directly (o_proj, down_proj: its error lands there
// as it is) rather than through another product of its layer (q/k/v, gate/up).
static int writes_residual(const target_t *g) { return g->site == KVQ_SITE_O || g->site == KVQ_SITE_DOWN; }

// Whether a tensor feeds the attention's logits (q_proj, k_proj; not a fused qkv_proj): its error
// acts through the softmax, whose cost per unit error differs from layer to layer.
static int feeds_softmax(const kvq_calib *c, const target_t *g) {
    return g->site == KVQ_SITE_QKV && g->r0 + g->rows <= c->q_dim + c->kv_dim;
}

// One layer's measurements (probe_layer).
typedef struct {
    int nq;
    double e[MAX_TARGETS];     // each tensor's error alone: the residual stream's relative error after the layer
    double e_abs[MAX_TARGETS]; // the same, absolute (‖δh‖² per token; for the debug lines)
    double kld, e_all;         // all of them at once: KLD at the logits, relative error after the layer
    int sampled;               // the direct writers' share measured too:
    double kld_w, e_w;         // o_proj and down_proj at once
    int has_qk;                // q_proj and k_proj measured at once through the rest:
    double kld_qk, e_qk;
} layer_meas;

// The layer probe of layer l's rated tensors Q[0..nq): each one's error alone through layer l only
// (the residual stream's relative error e_i after it: one layer of work each), then all of them at
// once through the rest of the model (KLD_l, and e_l after layer l); q_proj and k_proj at once
// through the rest (KLD_qk, e_qk: their cost per unit error is the layer's own); with `sample`,
// also the direct writers (o_proj, down_proj) at once through the rest (KLD_w, e_w).
// docs/ALLOCATION.md, "The layer probe".
static kvq_status probe_layer(kvq_calib *c, int l, probing_t *Q, int nq, int sample, layer_meas *M, kvq_err *err) {
    const size_t hs = (size_t)c->n_probe * c->d;
    kvq_status s = KVQ_OK;
    memset(M, 0, sizeof *M);
    M->nq = nq;
    for (int i = 0; i < nq && !s; i++) {
        probe_set(c, &Q[i].g, &Q[i].dw, 1, NULL);
        s = probe_run(c, c->H + (size_t)l * hs, l, l + 1, c->h, err);
        if (!s) probe_resid_err(c, l + 1, &M->e[i], &M->e_abs[i]);
    }
    for (int pass = 0; pass < 3 && !s; pass++) { // 0: all of them; 1: q/k; 2: the direct writers
        if (pass == 2 && !sample) break;
        target_t g[MAX_TARGETS];
        float *dw[MAX_TARGETS];
        int ng = 0;
        for (int i = 0; i < nq; i++)
            if (pass == 0 || (pass == 1 && feeds_softmax(c, &Q[i].g)) || (pass == 2 && writes_residual(&Q[i].g)))
                g[ng] = Q[i].g, dw[ng++] = Q[i].dw;
        if (pass > 0 && (!ng || ng == nq)) continue; // one group only: nothing to split
        probe_set(c, g, dw, ng, NULL);
        double e, ea;
        s = probe_run(c, c->H + (size_t)l * hs, l, l + 1, c->h, err);
        if (!s) probe_resid_err(c, l + 1, &e, &ea);
        probe_clear(c);
        if (!s) s = probe_run(c, c->h, l + 1, c->n_layers, NULL, err);
        if (s) break;
        double k = probe_kld(c);
        if (pass == 0) M->kld = k, M->e_all = e;
        else if (pass == 1) M->kld_qk = k, M->e_qk = e, M->has_qk = 1;
        else M->kld_w = k, M->e_w = e, M->sampled = 1;
    }
    probe_clear(c);
    return s;
}

// What layer l's tensors other than q/k cost at the logits and their relative error after the layer:
// all of them at once less q/k at once (errors add), kept to at least a quarter of the layer's.
static void layer_rest(const layer_meas *m, double *kld, double *e) {
    *kld = m->kld, *e = m->e_all;
    if (!m->has_qk) return;
    const double k = m->kld - m->kld_qk, x = m->e_all - m->e_qk;
    *kld = k > 0.25 * m->kld ? k : 0.25 * m->kld;
    *e = x > 0.25 * m->e_all ? x : 0.25 * m->e_all;
}

// Part k's weight error (q->dw), drawn when first needed from the source's weights, so that only
// the tensors being probed hold one.
static kvq_status want_dw(const kvq_ckpt *ck, const kvq_plan_entry *e, size_t i, probing_t *q, kvq_err *err) {
    if (q->dw) return KVQ_OK;
    const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
    float *w = malloc(sizeof(float) * (size_t)e[i].numel);
    if (!w) return kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", e[i].name);
    kvq_dtype_to_f32(t->dtype, t->data, (size_t)e[i].numel, w);
    q->dw = probe_dw(w, e[i].rows, e[i].cols, e[i].seed);
    free(w);
    return q->dw ? KVQ_OK : kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", e[i].name);
}

// Layer l's tensors' sensitivities from its measurements M and the groups' factors (gw: o_proj and
// down_proj, gr: the others); the progress line of each; with KVQ_ALLOC_DEBUG=1 also each one's
// full probe, printed beside it on stderr (validation: docs/ALLOCATION.md).
static kvq_status layer_finish(kvq_calib *c, const kvq_plan_entry *e, part_t *P, const probing_t *L, const layer_meas *m,
                               double gw, double gr, const char *dbg, kvq_calib_progress_fn progress, void *ud,
                               size_t *done, size_t count, double work_total, int l, kvq_err *err) {
    const double eps = pow(10.0, -PROBE_SNR_DB / 10.0);
    for (int j = 0; j < m->nq; j++) {
        part_t *p = &P[L[j].k];
        double kr, er, v;
        layer_rest(m, &kr, &er);
        if (m->has_qk && feeds_softmax(c, &L[j].g)) // q/k: their own measured cost, shared by error
            v = m->e_qk > 0 ? m->kld_qk * m->e[j] / m->e_qk : 0.0;
        else
            v = er > 0 ? (kr > 1e-12 ? kr : 1e-12) * (writes_residual(&L[j].g) ? gw : gr) * m->e[j] / er : 0.0;
        p->sens = (v > 1e-12 ? v : 1e-12) / eps;
        if (dbg && *dbg == '1') {
            double kf;
            kvq_status s = probe_full(c, &L[j], 0, &kf, err);
            if (s) return s;
            fprintf(stderr, "probe-debug %s layer %d full %.6g layer %.6g e_rel %.6g e_abs %.6g kld_l %.6g e_l %.6g "
                    "kld_w %.6g e_w %.6g gw %.4g gr %.4g kld_qk %.6g e_qk %.6g\n", e[p->i].name, l, (kf > 1e-12 ? kf : 1e-12) / eps,
                    p->sens, m->e[j], m->e_abs[j], m->kld, m->e_all, m->kld_w, m->e_w, gw, gr, m->kld_qk, m->e_qk);
        }
        if (progress) {
            kvq_calib_progress pg = {.event = KVQ_CALIB_PROBE, .index = (*done)++, .count = count, .name = e[p->i].name,
                                     .sensitivity = p->sens, .work_done = c->work_done, .work_total = work_total};
            progress(ud, &pg);
        }
    }
    return KVQ_OK;
}

kvq_status kvq_alloc_apply(kvq_plan *pl, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, kvq_calib *c,
                           double target_bpw, int n_threads, kvq_calib_progress_fn progress, void *ud, kvq_err *err) {
    budget_t B;
    kvq_status s = budget_parts(pl, ck, e, n, target_bpw, &B, err);
    part_t *P = B.P;
    const double eps = pow(10.0, -PROBE_SNR_DB / 10.0);
    const char *dbg = getenv("KVQ_ALLOC_DEBUG"); // 1: the layer probe also runs every full probe and prints both
    probing_t *Q = s ? NULL : calloc(B.np ? B.np : 1, sizeof *Q);
    if (!s && !Q) s = kvq_err_set(err, KVQ_ERR_NOMEM, "allocation: out of memory");
    size_t done = 0;
    kvq_alloc_work_t W;
    kvq_alloc_work(ck, e, n, c->n_probe, c->kind, &W);
    c->work_done = 0.0;
    if (!s && !c->lp) {
        if (!(c->lp = calloc((size_t)c->n_layers + 1, sizeof *c->lp))) s = kvq_err_set(err, KVQ_ERR_NOMEM, "allocation: out of memory");
        else layer_params(e, n, c->n_layers, c->lp);
    }
    const double work_total = W.probe_work;
    // every part's weight error and target; a tensor the runtime has no product for is refused
    for (size_t k = 0; k < B.np && !s; k++) {
        part_t *p = &P[k];
        size_t i = p->i;
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        int tie = B.tied && is_embedding(e[i].name);
        Q[k].k = k;
        if (probe_target(c, e[i].name, e[i].rows, e[i].cols, tie, &Q[k].g, &Q[k].l0) ||
            (!is_embedding(e[i].name) && Q[k].g.site != KVQ_SITE_LM_HEAD && (Q[k].l0 < 0 || Q[k].l0 >= c->n_layers))) {
            s = kvq_err_set(err, KVQ_ERR_ARG, "--target-bpw: tensor '%s' (%" PRId64 " x %" PRId64 ") is no product the "
                            "calibration pass runs, so it has no measured sensitivity: give it a rule or --keep it",
                            e[i].name, e[i].rows, e[i].cols);
            break;
        }
        float *w = malloc(sizeof(float) * (size_t)e[i].numel);
        if (!w) { s = kvq_err_set(err, KVQ_ERR_NOMEM, "tensor '%s': out of memory", e[i].name); break; }
        kvq_dtype_to_f32(t->dtype, t->data, (size_t)e[i].numel, w);
        e[i].output_error = kvq_calib_sensitivity(c, e[i].name, w, e[i].rows, e[i].cols, tie);
        free(w);
    }
    // full probes: every tensor (KVQ_PROBE_FULL), else those outside the layers (embeddings, lm_head)
    for (size_t k = 0; k < B.np && !s; k++) {
        part_t *p = &P[k];
        const int emb = is_embedding(e[p->i].name), layered = !emb && Q[k].g.site != KVQ_SITE_LM_HEAD;
        if (c->kind == KVQ_PROBE_LAYER && layered) continue;
        double kld;
        if ((s = want_dw(ck, e, p->i, &Q[k], err))) break;
        s = probe_full(c, &Q[k], emb, &kld, err);
        free(Q[k].dw), Q[k].dw = NULL;
        if (s) { kvq_err_prefix(err, "sensitivity probe of '%s'", e[p->i].name); break; }
        p->sens = (kld > 1e-12 ? kld : 1e-12) / eps;
        if (progress) {
            kvq_calib_progress pg = {.event = KVQ_CALIB_PROBE, .index = done++, .count = B.np, .name = e[p->i].name,
                                     .sensitivity = p->sens, .work_done = c->work_done, .work_total = work_total};
            progress(ud, &pg);
        }
    }
    // layer probes: the layers that also measure the direct writers' share first (up to four, evenly
    // spaced), then the rest; sensitivity_i = KLD_l · γ_group · e_i / e_l / ε
    const int nl = c->n_layers;
    layer_meas *M = s ? NULL : calloc(nl > 0 ? nl : 1, sizeof *M);
    probing_t *QL = s ? NULL : calloc((size_t)(nl > 0 ? nl : 1) * MAX_TARGETS, sizeof *QL);
    if (!s && (!M || !QL)) s = kvq_err_set(err, KVQ_ERR_NOMEM, "allocation: out of memory");
    double lw = 0.0, lr = 0.0, gw = 1.0, gr = 1.0; // Σ log of the direct writers' / the others' cost per unit error
    int nsamp = 0;
    for (int pass = 0; pass < 2 && !s && c->kind == KVQ_PROBE_LAYER; pass++) {
        for (int l = 0; l < nl && !s; l++) {
            const int sample = sampled_layer(l, nl);
            if (sample != (pass == 0)) continue;
            probing_t *L = QL + (size_t)l * MAX_TARGETS;
            int nq = 0;
            for (size_t k = 0; k < B.np; k++)
                if (!is_embedding(e[P[k].i].name) && Q[k].g.site != KVQ_SITE_LM_HEAD && Q[k].l0 == l) {
                    if (nq == MAX_TARGETS) {
                        s = kvq_err_set(err, KVQ_ERR_ARG, "--target-bpw: layer %d has more than %d rated tensors", l, MAX_TARGETS);
                        break;
                    }
                    if ((s = want_dw(ck, e, P[k].i, &Q[k], err))) break;
                    L[nq++] = Q[k];
                }
            if (s || !nq) continue;
            if ((s = probe_layer(c, l, L, nq, sample, &M[l], err))) { kvq_err_prefix(err, "layer probe of layer %d", l); break; }
            const layer_meas *m = &M[l];
            double kr, er;
            layer_rest(m, &kr, &er);
            if (m->sampled && kr > m->kld_w && er > m->e_w && m->kld_w > 0 && m->e_w > 0) {
                const double u = kr / er;
                lw += log(m->kld_w / m->e_w / u), lr += log((kr - m->kld_w) / (er - m->e_w) / u), nsamp++;
            }
            if (pass == 1) s = layer_finish(c, e, P, L, m, gw, gr, dbg, progress, ud, &done, B.np, work_total, l, err);
            for (int j = 0; pass == 1 && j < nq; j++) free(Q[L[j].k].dw), Q[L[j].k].dw = NULL; // one layer's at a time
        }
        if (pass == 0 && nsamp) gw = exp(lw / nsamp), gr = exp(lr / nsamp);
        for (int l = 0; pass == 0 && l < nl && !s; l++) // the sampled layers' sensitivities, now that γ is known
            if (M[l].nq && sampled_layer(l, nl))
                s = layer_finish(c, e, P, QL + (size_t)l * MAX_TARGETS, &M[l], gw, gr, dbg, progress, ud, &done, B.np, work_total, l, err);
        for (size_t k = 0; pass == 0 && k < B.np; k++) free(Q[k].dw), Q[k].dw = NULL;
    }
    free(M);
    free(QL);
    for (size_t k = 0; Q && k < B.np; k++) free(Q[k].dw);
    free(Q);
    for (size_t k = 0; k < B.np && !s; k++) // the embedding's and lm_head's row blocks
        if (is_embedding(e[P[k].i].name) || !strcmp(e[P[k].i].name, "lm_head.weight"))
            block_shares(c, kvq_ckpt_tensor(ck, P[k].i), e[P[k].i].rows, e[P[k].i].cols, &P[k]);
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
    size_t nu = 0; // distortion rows: one per tensor, one per block of a blocked one
    for (size_t k = 0; k < np; k++) P[k].d0 = nu, nu += P[k].nb > 0 ? (size_t)P[k].nb : 1;
    double *D = s ? NULL : malloc(sizeof(double) * (nu ? nu : 1) * N_GRID);
    if (!s && !D) s = kvq_err_set(err, KVQ_ERR_NOMEM, "allocation: out of memory");
    const double budget = target_bpw * params - fixed_bits;
    kvq_plan_budget_t pb;
    kvq_plan_budget(pl, &pb);
    if (!s) {
        for (size_t k = 0; k < np; k++) {
            part_t *p = &P[k];
            if (p->nb == 0)
                for (int g = 0; g < N_GRID; g++) D[p->d0 * N_GRID + g] = distortion(p, lat, R_LO + g * R_STEP);
            for (int b = 0; b < p->nb; b++) {
                part_t q = *p;
                q.sens = p->sens * p->share[b], q.side = p->bside[b];
                for (int g = 0; g < N_GRID; g++) D[(p->d0 + b) * N_GRID + g] = distortion(&q, lat, R_LO + g * R_STEP);
            }
        }
    }
    if (!s) {
        // Bisection on log λ: the largest total not above the budget.
        double llo = -400.0, lhi = 400.0; // λ = 10^x; llo gives too many bits, lhi few enough
        for (int it = 0; it < 200; it++) {
            double mid = 0.5 * (llo + lhi);
            if (choose(P, np, D, pow(10.0, mid), pb.block_floor, pb.block_floor_cap) > budget) llo = mid;
            else lhi = mid;
        }
        double bits = choose(P, np, D, pow(10.0, lhi), pb.block_floor, pb.block_floor_cap);
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
            } else if (p->nb > 0) { // one rate per block: blocks=<rows>@<r1>/<r2>/..., the mean as the rate
                char spec[600], rates[400];
                size_t at = 0;
                double mean = 0.0;
                for (int b = 0; b < p->nb; b++) {
                    double r = R_LO + p->bchoice[b] * R_STEP + extra;
                    r = r < 1.0 ? 1.0 : r > 8.5 ? 8.5 : r;
                    mean += r * p->bnumel[b];
                    at += (size_t)snprintf(rates + at, sizeof rates - at, "%s%.4f", b ? "/" : "", r);
                }
                snprintf(why, sizeof why, "target_bpw");
                s = kvq_codec_spec_with_rate(base, mean / p->numel, en->dtype, spec, sizeof spec - 200, err);
                if (!s && strstr(spec, ":blocks="))
                    s = kvq_err_set(err, KVQ_ERR_ARG, "--target-bpw: the weights codec '%s' has its own blocks", base);
                if (!s) {
                    size_t l = strlen(spec);
                    snprintf(spec + l, sizeof spec - l, ":blocks=%lld@%s", (long long)p->brows, rates);
                    s = kvq_plan_entry_set_spec(pl, en, spec, why, err);
                }
                en->n_blocks = p->nb, en->block_rows = p->brows;
                for (int b = 0; b < p->nb; b++) en->block_share[b] = p->share[b];
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
