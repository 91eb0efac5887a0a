// The GPU backend (backend.h) over kernels/cuda's launchers: weights uploaded as they load
// (packed HyperQuant/RTN tensors in the hqx execution layout, products from the codes with
// the activation rotated once per input; PQ/QET tensors in the pqx execution layout, products
// from per-token tables or the swap tree (kernels/cuda/pqx.cu); dense ones as bf16/fp32), fp32 activations and an
// fp32 KV cache in device memory. Ops are asynchronous on the default stream; the first
// failure is kept and reported by sync. Plain C: it links against build/libkvqcuda.a or,
// without nvcc, kernels/cuda/no_cuda.c (every call then reports "built without CUDA").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/hqx.h"
#include "kernels/cpu/pq.h"
#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/hqx.h"
#include "kernels/cuda/kv_attn.h"
#include "kernels/cuda/pqx.h"
#include "kernels/cuda/verify_score.h"
#include "kernels/cuda/ops.h"
#include "libconv/kv/kv_gpu.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/runtime/backend.h"

// Decode steps (one token, with logits) run as a CUDA graph: the first is captured while the
// model issues its ops, later ones replay it (the model's op calls are then skipped) with
// the position in device memory. KVQ_CUDA_GRAPHS=0 launches every kernel instead.
typedef enum { DIRECT = 0, CAPTURE, REPLAY } mode;

// Rows mode's default group: a prefill chunk's tokens attend to a KV codec cache 64 at a time
// (kvq_gkv_attend_rows; KVQ_CUDA_KV_ROWS). The scratch it needs: 64 · n_heads · (the packed chunks'
// grid at the capacity + 2·⌈wcap/32⌉ + 2) · 130 floats (~0.2 GB at 128k for the 8B shape).
#define KV_ROWS 64

typedef struct {
    kvq_backend b;
    kvq_err first; // the first failure since the last sync
    float *kc, *vc; // (n_layers, n_kv_heads, max_ctx, head_dim) each; NULL when a KV codec runs
                    // (kv.on) or the context exceeds the fp32 attention kernel's
    size_t kv_floats;
    // A KV codec on the device (kv_codec): one packed cache per (sequence, layer) (kernels/cuda/kv_attn.h,
    // batch 1 each: sequences sit at different positions, a batched cache shares one n_tok;
    // sequences 1.. share sequence 0's per-head tables; a layer's sequences are views into one array
    // per side and ring, kv_resize, which a batched step reads as one cache: kv_attention_batched),
    // appended and attended by kvq_gkv_append / kvq_gkv_attend; a one-token decode step runs
    // as a graph too (kvq_gkv_append_step / kvq_gkv_attend_step: the kernels take the position
    // from d_pos and derive the ring slot, the flushes and the chunks from it) whenever the
    // cache's counts are those of a sequence grown from 0 (kvq_gkv_step_ready); a replay
    // advances the host's counts (kvq_gkv_advance). KVQ_CUDA_KV_GRAPHS=0: such steps launch
    // every kernel (the same kernels' host-planned launches, the same bits).
    // A prefill chunk of T > 1 tokens attends in rows mode (kvq_gkv_attend_rows): groups of up to
    // rows tokens, each group one set of launches (KVQ_CUDA_KV_ROWS=<n> the group, 0 = one attend a
    // token, the loop rows mode replaces: the same bits).
    struct {
        int on, window, graphs, rows;
        int batched;      // a step of several sequences in one set of launches a layer (KVQ_CUDA_KV_SEQS_BATCHED, default
                          // 1 since session 17's H100 A/B; 0 off: a set per sequence): 1 its appends and attends (kvq_gkv_append_seqs, kvq_gkv_attend_seqs over the layer's
                          // batched view), 2 its attends only (the appends per sequence)
        int hqmqo;        // a side is hqmq with outliers: sync checks the pools after a replayed step (kv_pool_check)
        kvq_gkv_cache *c; // (n_seq, n_layers): kv_cache()
        int n_seq;
        void *scratch;
        size_t scratch_bytes; // its size: one attend's (kvq_gkv_scratch_bytes) or a group of rows' (kvq_gkv_rows_scratch_bound)
        size_t bytes;     // device bytes of the packed sides (the cache proper)
        size_t aux;       // and of the fp16 rings, the codecs' per-head tables and the attention's scratch
        size_t seq_bytes, seq_rings, tables; // one sequence's packed sides and rings; the tables (held once)
        char spec[64];
    } kv;
    int *d_pos;     // the position a graph reads
    int pos;        // its host copy (the source of the asynchronous copy)
    // Several sequences (seqs): the fp32 cache holds n of them, kv_floats floats apart; cur is
    // the one a chunk begun by step uses. A step of several (step_seqs) has T tokens, token t
    // at position h[KVQ_MODEL_MAX_SEQS + t] of sequence h[t]; d is their device copy, which the
    // kernels read (so a captured step replays at later positions); view: what they are given.
    struct { int n, cur, on, T; int h[2 * KVQ_MODEL_MAX_SEQS]; int *d; kvq_cuda_seqs view; } sq;
    int graphs;     // use graphs
    mode mode;
    void *graph[4]; // the decode steps' executable graphs: ending in logits, in their argmax; then
                    // the same two for a step of several sequences (of graph_T[2..3] tokens; with a KV
                    // codec, of the sequences graph_seq[2..3], whose caches' addresses the graph holds)
    int graph_T[4];
    int graph_seq[4][KVQ_MODEL_MAX_SEQS];
    int variant;    // which of them this step uses
    int *d_top1;    // the argmax op's answers on the device (KVQ_CUDA_ARGMAX_ROWS),
    int h_top1[KVQ_CUDA_ARGMAX_ROWS]; // their host copy (the asynchronous copy's destination)
    int32_t *top1;  // and where sync delivers them (NULL: no argmax queued)
    struct { int32_t *t; kvq_vscore *o; int cap; } vs; // vscore's targets and answers on the device (cap rows)
    int top1_rows;
    // Queued ops, fused with what follows when it allows (KVQ_CUDA_FUSE=0: never): at most one
    // of these is pending at a time; any other op first launches it as it was asked for.
    int fuse;
    // Products of at least tc_min tokens (prefill, verification) run on tensor cores
    // (gemm_tc.cu, hqx_tc.cu) when cuBLAS loads: tc = 1. KVQ_CUDA_TC=0 keeps the CUDA-core
    // kernels; KVQ_CUDA_TC_MIN sets the threshold. Not in exact mode (it promises the CPU's
    // exact products within float rounding; bf16 operands round at ~1e-3).
    // Dense bf16 products take tensor cores from tc_min_dense tokens (2: a decode step of several
    // sequences reads its bf16 weights once through cuBLAS instead of dense_matmul.cu's 8-token
    // passes; KVQ_CUDA_TC_MIN_DENSE).
    int tc, tc_min, tc_min_dense;
    struct { int on; float *y; const float *x; const kvq_mat *w; int T; kvq_cuda_xin in; } pend; // a product
    // an RMSNorm or silu_mul whose output the next packed product's activation preparation
    // computes instead (kvq_cuda_hqx_matmul_parts_in)
    struct { int on; kvq_cuda_xin_kind kind; float *y; const float *x, *w; int rows, n; float eps; } pin;
    // the attention block's inputs: qkv_split, the q/k norms, the two ropes, run by
    // attention() as one kernel (kvq_cuda_attn_in); has: which of them were queued
    struct {
        int on, has_qn, has_kn, has_rq, has_rk;
        const float *qkv, *bias, *qn, *kn, *inv_freq;
        float *q, *k, *v, eps;
        int T, q_dim, kv_dim, qn_rows, qn_n, kn_rows, kn_n, nh, nkv, hd, rot, pos;
    } ain;
    // a one-token attend whose output the next op's packed product reads: launched by
    // matmul() with the product's activation preparation folded in (kvq_cuda_hqx_attend_prep),
    // else by flush() as it was asked for
    struct { int on; const float *q, *kc, *vc; float *out; int pos, nh, nkv, hd; float scale; int has_in; kvq_cuda_ain in; } pat;
    // KVQ_CUDA_PROFILE=1: graphs off, every op synchronized and timed, totals on stderr at close
    int profile;
    struct { char key[48]; double s; long n; } prof[64];
    int n_prof;
    double t0;
    // KVQ_CUDA_TIMELINE=1: graphs on, timing events captured between the decode step's ops
    // (kvq_cuda_tl_mark), read after every run of the graph into the same totals
    int ain_fuse;  // one-token attention inputs computed by the attention kernel (KVQ_CUDA_AIN_FUSE=0: off)
    int kv_rows;   // rows mode's group for a KV codec cache (KVQ_CUDA_KV_ROWS, default KV_ROWS; 0 off)
    int timeline, tl_n[2];
    short tl_key[2][2048]; // prof slot of the op that ends at mark i (mark 0: the step's start)
    // PQ/QET matrices (n_pq) stay packed (kernels/cuda/pqx.h); their products share one table
    // scratch of the largest need, allocated by ready(). KVQ_CUDA_PQ_DENSE=1: decoded to dense
    // at upload instead (the former path, for comparisons).
    int pq_dense;
    size_t pq_need;
    void *pq_scratch;
} gpu;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void prof_begin(gpu *g) {
    if (!g->profile) return;
    kvq_err e = {0};
    kvq_cuda_stream_sync(&e);
    g->t0 = now_s();
}
// The totals' slot of key (created on first use); -1 when the table is full.
static int prof_slot(gpu *g, const char *key) {
    int i = 0;
    while (i < g->n_prof && strcmp(g->prof[i].key, key)) i++;
    if (i == g->n_prof) {
        if (i == 64) return -1;
        snprintf(g->prof[i].key, sizeof g->prof[i].key, "%s", key);
        g->n_prof++;
    }
    return i;
}
// A timeline mark while the step is captured: the op that ends here is key.
static void tl_mark(gpu *g, int slot) {
    if (g->variant >= 2) return; // steps of several sequences are not on the timeline
    int *n = &g->tl_n[g->variant];
    if (*n >= 2048) return;
    kvq_err e = {0};
    if (kvq_cuda_tl_mark(g->variant, *n, &e) == KVQ_OK) g->tl_key[g->variant][(*n)++] = (short)slot;
}
static void prof_end(gpu *g, const char *key) {
    if (g->timeline) {
        if (g->mode == CAPTURE) tl_mark(g, prof_slot(g, key));
        return;
    }
    if (!g->profile) return;
    kvq_err e = {0};
    kvq_cuda_stream_sync(&e);
    double dt = now_s() - g->t0;
    int i = prof_slot(g, key);
    if (i < 0) return;
    g->prof[i].s += dt;
    g->prof[i].n++;
}
// After a run of the captured step: the time between marks into the ops' totals.
static void tl_read(gpu *g) {
    if (g->variant >= 2) return;
    for (int i = 1; i < g->tl_n[g->variant]; i++) {
        float ms = 0;
        kvq_err e = {0};
        const int k = g->tl_key[g->variant][i];
        if (k < 0 || kvq_cuda_tl_elapsed(g->variant, i, &ms, &e) != KVQ_OK) continue;
        g->prof[k].s += 1e-3 * ms;
        g->prof[k].n++;
    }
}

static int skip(const gpu *g) { return g->mode == REPLAY; }
#define TIMED(g, key, stmt) do { prof_begin(g); stmt; prof_end(g, key); } while (0)
static const int *dpos(const gpu *g) { return g->mode == DIRECT ? NULL : g->d_pos; }
// The sequences of the step (NULL: one sequence, the cache of sq.cur).
static const kvq_cuda_seqs *seqs_of(const gpu *g) { return g->sq.on ? &g->sq.view : NULL; }
// Layer l's fp32 K and V caches as the kernels take them: sequence cur's, or in a step of
// several sequences sequence 0's (each token's found through seqs_of).
static float *kc_of(const gpu *g, int l) {
    const size_t per_layer = g->kv_floats / g->b.arch.n_layers;
    return g->kc + (g->sq.on ? 0 : (size_t)g->sq.cur * g->kv_floats) + per_layer * l;
}
static float *vc_of(const gpu *g, int l) { return g->vc + (kc_of(g, l) - g->kc); }

static void note(gpu *g, kvq_status s, const kvq_err *e) {
    if (s && !g->first.code) g->first = *e;
}
#define RUN(g, call)                     \
    do {                                 \
        kvq_err e_ = {0};                \
        kvq_status s_ = (call);          \
        note((g), s_, &e_);              \
    } while (0)
#define ERR (&e_)

static void side_free(kvq_gkv_side *s) {
    kvq_cuda_free(s->data);
    kvq_gkv_side_free_tables(s);
}

// Layer l's codec cache of sequence s.
static kvq_gkv_cache *kv_cache(const gpu *g, int s, int l) { return &g->kv.c[(size_t)s * g->b.arch.n_layers + l]; }

// Frees the codec caches' device arrays: each layer's are sequence 0's (every sequence's cache a
// view into them, kv_resize), the tables with them.
static void kv_layers_free(gpu *g, kvq_gkv_cache *c) {
    for (int l = 0; c && l < g->b.arch.n_layers; l++) {
        kvq_gkv_cache *x = &c[l];
        side_free(&x->k), side_free(&x->v);
        kvq_cuda_free(x->wk);
        kvq_cuda_free(x->wv);
    }
}

static void kv_free(gpu *g) {
    kv_layers_free(g, g->kv.c);
    free(g->kv.c);
    kvq_cuda_free(g->kv.scratch);
    memset(&g->kv, 0, sizeof g->kv);
}

static void destroy(kvq_backend *b) {
    gpu *g = (gpu *)b;
    double tot = 0;
    for (int i = 0; i < g->n_prof; i++) tot += g->prof[i].s;
    for (int i = 0; i < g->n_prof; i++)
        if (g->prof[i].n)
            fprintf(stderr, "kvq cuda profile: %-40s %8ld calls %9.3f ms %6.1f us/call %5.1f %%\n", g->prof[i].key,
                g->prof[i].n, 1e3 * g->prof[i].s, 1e6 * g->prof[i].s / g->prof[i].n, 100 * g->prof[i].s / tot);
    for (int i = 0; i < 4; i++) kvq_cuda_graph_free(g->graph[i]);
    kvq_cuda_free(g->d_top1);
    kvq_cuda_free(g->vs.t);
    kvq_cuda_free(g->vs.o);
    kvq_cuda_free(g->sq.d);
    kvq_cuda_free(g->kc);
    kvq_cuda_free(g->vc);
    kvq_cuda_free(g->d_pos);
    kvq_cuda_free(g->pq_scratch);
    kv_free(g);
    free(g);
}

static float *alloc(kvq_backend *b, size_t n) {
    (void)b;
    void *p = NULL;
    kvq_err e = {0};
    return kvq_cuda_malloc(&p, sizeof(float) * (n ? n : 1), &e) ? NULL : p;
}
static void release(kvq_backend *b, float *p) { (void)b; if (p) kvq_cuda_free(p); }
static void flush(gpu *g);
static kvq_status upload(kvq_backend *b, float *dst, const float *src, size_t n, kvq_err *err) {
    flush((gpu *)b);
    return kvq_cuda_copy_async(dst, src, sizeof(float) * n, 1, err);
}
static kvq_status download(kvq_backend *b, float *dst, const float *src, size_t n, kvq_err *err) {
    flush((gpu *)b);
    kvq_status s = kvq_cuda_copy_async(dst, src, sizeof(float) * n, 0, err);
    return s ? s : kvq_cuda_stream_sync(err);
}

// Frees a packed part's host arrays, keeping its scalars (shape, tile, lattice).
static void drop_host_part(kvq_hqx *p) {
    kvq_hqx keep = *p;
    kvq_hqx_free(p);
    *p = keep;
    p->q = NULL; p->hb = NULL; p->cb = NULL; p->scale = NULL; p->scode = NULL; p->zero = NULL;
    p->esc_row = NULL; p->esc = NULL;
    p->lut = NULL; p->esc_bits = NULL; p->esc_r = NULL; // freed with the arrays (lut lives in scode's)
}

// KVQ_CUDA_PQ_DENSE=1 only (PQ and QET run packed otherwise, pq_upload): a PQ/QET matrix
// decoded on the host (kvq_pqx_row_f32 gives the codec decoder's floats), to bf16 when every
// value is one (a bf16 source's codebooks, one stage), else fp32, into *data.
static kvq_status pq_decode(const kvq_mat *w, void **data, kvq_dtype *dt, kvq_err *err) {
    const size_t n = (size_t)w->rows * w->cols;
    float *f = malloc(sizeof(float) * (n ? n : 1));
    if (!f) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory decoding a PQ matrix of %zu weights", n);
    for (int p = 0; p < w->n_pq; p++) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < w->pq[p].rows; r++) kvq_pqx_row_f32(&w->pq[p], r, f + (size_t)(w->row0[p] + r) * w->cols);
    }
    int bf = 1;
    for (size_t i = 0; i < n && bf; i++) bf = kvq_bf16_to_f32(kvq_f32_to_bf16(f[i])) == f[i];
    void *out = f;
    if (bf) {
        uint16_t *h = malloc(2 * (n ? n : 1));
        if (!h) { free(f); return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory decoding a PQ matrix of %zu weights", n); }
        kvq_dtype_from_f32(KVQ_DTYPE_BF16, f, n, h);
        free(f);
        out = h;
    }
    *data = out;
    *dt = bf ? KVQ_DTYPE_BF16 : KVQ_DTYPE_F32;
    return KVQ_OK;
}

// Frees a pqx block's host arrays, keeping its scalars (shape, stages, k, index widths).
static void drop_host_pq(kvq_pqx *p) {
    kvq_pqx keep = *p;
    kvq_pqx_free(p);
    *p = keep;
    for (int s = 0; s < KVQ_PQX_MAX_STAGES; s++) p->idx[s] = p->cb[s] = NULL, p->cb_ms[s] = NULL;
    p->sw = NULL;
}

// A PQ/QET matrix uploaded in its pqx layout: one device tensor per block; held counts the
// packed device bytes; the largest table scratch is remembered for ready().
static kvq_status pq_upload(gpu *g, kvq_mat *w, int keep_host, kvq_err *err) {
    kvq_cuda_pqx **parts = calloc(3, sizeof *parts);
    if (!parts) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    w->held = 0;
    for (int p = 0; p < w->n_pq; p++) {
        kvq_status s = kvq_cuda_pqx_upload(&w->pq[p], &parts[p], err);
        if (s) {
            for (int k = 0; k < p; k++) kvq_cuda_pqx_free(parts[k]);
            free(parts);
            return s;
        }
        w->held += kvq_cuda_pqx_bytes(parts[p]);
        const size_t need = kvq_cuda_pqx_scratch_bytes(parts[p]);
        if (need > g->pq_need) g->pq_need = need;
    }
    w->dev = parts;
    if (!keep_host)
        for (int p = 0; p < w->n_pq; p++) drop_host_pq(&w->pq[p]);
    return KVQ_OK;
}

// Whether w's device copy is the pqx layout (else dense, or hqx parts).
// General QET (qetg: swap trees other than l = 3, w = 8) has no device kernel: decoded at upload.
static int pq_packed(const gpu *g, const kvq_mat *w) { return w->n_pq && !g->pq_dense && !w->pq[0].qetg; }

static kvq_status mat_adopt(kvq_backend *b, kvq_mat *w, int keep_host, kvq_err *err) {
    gpu *g = (gpu *)b;
    if (pq_packed(g, w)) return pq_upload(g, w, keep_host, err);
    if (w->n_pq) { // KVQ_CUDA_PQ_DENSE=1: decoded to dense at upload; the host copy is temporary
        kvq_mat d = *w;
        d.n_pq = 0;
        kvq_status s = pq_decode(w, &d.data, &d.dt, err);
        if (s) return s;
        if ((s = mat_adopt(b, &d, 0, err))) { free(d.data); return s; }
        w->dev = d.dev;
        w->held = d.held;
        w->dt = d.dt; // the device copy's dtype (products read it; n_part stays 0: a dense product)
        if (!keep_host) { // the layout is no longer needed: the matrix is dense from here on
            for (int p = 0; p < w->n_pq; p++) kvq_pqx_free(&w->pq[p]);
            w->n_pq = 0;
        }
        return KVQ_OK;
    }
    if (!w->n_part) {
        const size_t bytes = (size_t)w->rows * w->cols * kvq_dtype_size(w->dt);
        if (w->dt != KVQ_DTYPE_BF16 && w->dt != KVQ_DTYPE_F32)
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: dense weights of dtype %s", kvq_dtype_name(w->dt));
        kvq_status s = kvq_cuda_malloc(&w->dev, bytes, err);
        if (!s) s = kvq_cuda_copy(w->dev, w->data, bytes, 1, err);
        if (s) { kvq_cuda_free(w->dev); w->dev = NULL; return s; }
        w->held = bytes;
        if (!keep_host) { free(w->data); w->data = NULL; }
        return KVQ_OK;
    }
    kvq_cuda_hqx **parts = calloc(3, sizeof *parts);
    if (!parts) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    w->held = 0;
    for (int p = 0; p < w->n_part; p++) {
        kvq_status s = kvq_cuda_hqx_upload(&w->part[p], &parts[p], err);
        if (s) {
            for (int k = 0; k < p; k++) kvq_cuda_hqx_free(parts[k]);
            free(parts);
            return s;
        }
        w->held += kvq_cuda_hqx_bytes(parts[p]);
    }
    w->dev = parts;
    if (!keep_host)
        for (int p = 0; p < w->n_part; p++) drop_host_part(&w->part[p]);
    return KVQ_OK;
}

static void mat_release(kvq_backend *b, kvq_mat *w) {
    if (!w->dev) return;
    if (pq_packed((const gpu *)b, w)) {
        kvq_cuda_pqx **parts = w->dev;
        for (int p = 0; p < w->n_pq; p++) kvq_cuda_pqx_free(parts[p]);
        free(parts);
    } else if (w->n_part) {
        kvq_cuda_hqx **parts = w->dev;
        for (int p = 0; p < w->n_part; p++) kvq_cuda_hqx_free(parts[p]);
        free(parts);
    } else kvq_cuda_free(w->dev);
    w->dev = NULL;
}

static kvq_status ready(kvq_backend *b, kvq_err *err) {
    gpu *g = (gpu *)b;
    const kvq_arch *a = &b->arch;
    kvq_status s = KVQ_OK;
    if (b->max_ctx <= kvq_cuda_attention_max_ctx(a->n_heads, a->n_kv_heads, a->head_dim)) { // else only a KV codec (kv_codec) can run
        g->kv_floats = (size_t)a->n_layers * a->n_kv_heads * (size_t)b->max_ctx * a->head_dim;
        s = kvq_cuda_malloc((void **)&g->kc, sizeof(float) * g->kv_floats, err);
        if (!s) s = kvq_cuda_malloc((void **)&g->vc, sizeof(float) * g->kv_floats, err);
        if (s) kvq_err_prefix(err, "the KV cache (%d positions)", b->max_ctx);
    }
    if (!s) s = kvq_cuda_malloc((void **)&g->d_pos, sizeof(int), err);
    if (!s) s = kvq_cuda_malloc((void **)&g->d_top1, sizeof(int) * KVQ_CUDA_ARGMAX_ROWS, err);
    if (!s) s = kvq_cuda_malloc((void **)&g->sq.d, sizeof g->sq.h, err);
    g->sq.n = 1;
    if (!s) s = kvq_cuda_attention_init(a->n_heads, a->n_kv_heads, a->head_dim, b->max_ctx, err);
    if (!s) s = kvq_cuda_hqx_fused_init(err);
    if (!s && g->pq_need && !g->pq_scratch) {
        s = kvq_cuda_malloc(&g->pq_scratch, g->pq_need, err);
        if (s) kvq_err_prefix(err, "the PQ product tables (%zu bytes)", g->pq_need);
    }
    return s;
}

// Whether a one-token step of each of the n sequences seq[i] at pos[i] can run as a kv graph
// (every layer's counts those of a sequence of pos[i] positions grown from 0; pos 0 restarts
// that sequence's caches, as kv_attention would).
static int kv_step_ready(gpu *g, int n, const int *seq, const int *pos) {
    if (!g->kv.graphs) return 0;
    for (int i = 0; i < n; i++)
        for (int l = 0; l < g->b.arch.n_layers; l++)
            if (!kvq_gkv_step_ready(kv_cache(g, seq[i], l), pos[i], g->kv.window)) return 0;
    for (int i = 0; i < n; i++)
        for (int l = 0; l < g->b.arch.n_layers && pos[i] == 0; l++) {
            kvq_gkv_cache *c = kv_cache(g, seq[i], l);
            c->n_tok = c->n_enc_k = c->n_enc_v = 0;
        }
    return 1;
}
// The host's counts of the n sequences' caches after a replayed step (whose kernels appended one
// position to each).
static void kv_step_advance(gpu *g, int n, const int *seq) {
    for (int i = 0; i < n; i++)
        for (int l = 0; l < g->b.arch.n_layers; l++) kvq_gkv_advance(kv_cache(g, seq[i], l), 1, g->kv.window);
}

static void step(kvq_backend *b, int T, int pos, int logits) {
    gpu *g = (gpu *)b;
    g->mode = DIRECT;
    g->sq.on = 0;
    if (!g->graphs || T != 1 || !logits || g->first.code || (g->kv.on && !kv_step_ready(g, 1, &g->sq.cur, &pos))) return;
    kvq_err e = {0};
    g->pos = pos;
    g->variant = logits == 2;
    kvq_status s = kvq_cuda_copy_async(g->d_pos, &g->pos, sizeof(int), 1, &e);
    if (!s && !g->graph[g->variant]) s = kvq_cuda_capture_begin(&e);
    if (s) { note(g, s, &e); return; }
    g->mode = g->graph[g->variant] ? REPLAY : CAPTURE;
    if (g->kv.on && g->mode == REPLAY) kv_step_advance(g, 1, &g->sq.cur); // the model's ops are skipped: the counts the graph's kernels will leave
    if (g->timeline && g->mode == CAPTURE) {
        g->tl_n[g->variant] = 0;
        tl_mark(g, -1);
    }
}

// A step of T sequences: their ids and positions copied to the device, where the kernels read
// them; with logits, captured as a graph (variants 2, 3) on its first run and replayed after
// (again captured when T changes). With a KV codec the graph holds the T sequences' caches (and
// takes each token's position from the device: kvq_gkv_append_step/attend_step): captured again
// when the sequences change too, and only while their counts are those of grown sequences
// (kv_step_ready; else the step launches directly).
static void step_seqs(kvq_backend *b, int T, const int *seq, const int *pos, kvq_kvcache *const *caches, int logits) {
    (void)caches;
    gpu *g = (gpu *)b;
    g->mode = DIRECT;
    g->sq.on = 1;
    g->sq.T = T;
    for (int t = 0; t < T; t++) g->sq.h[t] = seq[t], g->sq.h[KVQ_MODEL_MAX_SEQS + t] = pos[t];
    g->sq.view = (kvq_cuda_seqs){g->sq.d, g->sq.d + KVQ_MODEL_MAX_SEQS, (int64_t)g->kv_floats};
    kvq_err e = {0};
    kvq_status s = kvq_cuda_copy_async(g->sq.d, g->sq.h, sizeof g->sq.h, 1, &e);
    if (!s && g->graphs && logits && !g->first.code && (!g->kv.on || kv_step_ready(g, T, seq, pos))) {
        g->variant = 2 + (logits == 2);
        if (g->graph[g->variant] && (g->graph_T[g->variant] != T ||
                                     (g->kv.on && memcmp(g->graph_seq[g->variant], seq, sizeof *seq * T))))
            kvq_cuda_graph_free(g->graph[g->variant]), g->graph[g->variant] = NULL;
        if (!g->graph[g->variant]) s = kvq_cuda_capture_begin(&e);
        if (!s) {
            g->mode = g->graph[g->variant] ? REPLAY : CAPTURE;
            g->graph_T[g->variant] = T;
            memcpy(g->graph_seq[g->variant], seq, sizeof *seq * T);
            if (g->kv.on && g->mode == REPLAY) kv_step_advance(g, T, seq);
        }
    }
    note(g, s, &e);
}

static kvq_status kv_resize(gpu *g, int n, kvq_err *err);

static kvq_status seqs(kvq_backend *b, int n, kvq_err *err) {
    gpu *g = (gpu *)b;
    if (g->kv.on) { // a codec cache per sequence (kv_resize)
        kvq_status s = kv_resize(g, n, err);
        if (s) {
            kvq_err_prefix(err, "the GPU KV cache %s of %d sequences", g->kv.spec, n);
            return s;
        }
        g->sq.n = n;
        g->sq.cur = 0;
        for (int i = 0; i < 4; i++) kvq_cuda_graph_free(g->graph[i]), g->graph[i] = NULL;
        return KVQ_OK;
    }
    if (!g->kc)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--gpu: %d sequences at a context of %d positions: beyond the fp32 "
                           "attention kernel's %d", n, b->max_ctx, kvq_cuda_attention_max_ctx(b->arch.n_heads, b->arch.n_kv_heads, b->arch.head_dim));
    float *kc = NULL, *vc = NULL;
    kvq_status s = kvq_cuda_malloc((void **)&kc, sizeof(float) * g->kv_floats * n, err);
    if (!s) s = kvq_cuda_malloc((void **)&vc, sizeof(float) * g->kv_floats * n, err);
    if (s) {
        kvq_cuda_free(kc);
        kvq_err_prefix(err, "the KV cache of %d sequences (%d positions each)", n, b->max_ctx);
        return s;
    }
    kvq_cuda_free(g->kc);
    kvq_cuda_free(g->vc);
    g->kc = kc;
    g->vc = vc;
    g->sq.n = n;
    g->sq.cur = 0;
    for (int i = 0; i < 4; i++) kvq_cuda_graph_free(g->graph[i]), g->graph[i] = NULL; // they hold the old cache's address
    return KVQ_OK;
}

static void seq_use(kvq_backend *b, int s) {
    gpu *g = (gpu *)b;
    if (s == g->sq.cur) return;
    g->sq.cur = s;
    for (int i = 0; i < 2; i++) kvq_cuda_graph_free(g->graph[i]), g->graph[i] = NULL; // captured with the other cache
}

// Runs a product now; acc = 1 adds it into y.
// Whether a product of T tokens with w runs on tensor cores.
static int use_tc(const gpu *g, const kvq_mat *w, int T) {
    if (!g->tc || pq_packed(g, w)) return 0; // PQ/QET: the table and swap-tree kernels at every size
    // packed: not in a step of several sequences, whose weights hqx_tc.cu would decode to bf16 at
    // every step (16 sequences: 58 ms a step on the 8B shape, against 10.7 for 8 in one pass of
    // the several-token kernel)
    return w->n_part ? T >= g->tc_min && !g->sq.on && g->b.exec != KVQ_EXEC_EXACT
                     : T >= g->tc_min_dense && w->dt == KVQ_DTYPE_BF16;
}

static void launch_mm(gpu *g, float *y, const float *x, const kvq_mat *w, int T, int acc) {
    const kvq_cuda_xin in = g->pend.in; // the queued product's input transform (none unless fused)
    g->pend.in.kind = KVQ_CUDA_XIN_NONE;
    const int tc = use_tc(g, w, T);
    char key[48];
    if (g->profile || g->timeline)
        snprintf(key, sizeof key, "%s%smatmul %s %dx%d T%s%s", tc ? "tc " : "",
                 in.kind == KVQ_CUDA_XIN_RMSNORM ? "rmsnorm+" : in.kind == KVQ_CUDA_XIN_SILU_MUL ? "silu_mul+" : "",
                 pq_packed(g, w) ? (w->pq[0].levels ? "qet" : "pq") : w->n_part ? "packed" : w->dt == KVQ_DTYPE_BF16 ? "bf16" : "f32",
                 w->rows, w->cols, T == 1 ? "=1" : ">1", acc ? " +=" : "");
    prof_begin(g);
    if (pq_packed(g, w)) {
        const int64_t r0[3] = {w->row0[0], w->row0[1], w->row0[2]};
        RUN(g, kvq_cuda_pqx_matmul(w->dev, w->n_pq, r0, x, T, y, w->rows, acc, g->pq_scratch, ERR));
        prof_end(g, key);
        return;
    }
    if (tc) {
        if (!w->n_part) {
            RUN(g, kvq_cuda_dense_matmul_tc(w->dev, x, y, T, w->cols, w->rows, w->rows, acc, ERR));
        } else {
            const int64_t r0[3] = {w->row0[0], w->row0[1], w->row0[2]};
            RUN(g, kvq_cuda_hqx_matmul_tc(w->dev, w->n_part, r0, x, T, y, w->rows, acc, ERR));
        }
        prof_end(g, key);
        return;
    }
    if (!w->n_part) {
        RUN(g, kvq_cuda_dense_matmul(w->dev, w->dt == KVQ_DTYPE_BF16, x, y, T, w->cols, w->rows, acc, ERR));
    } else {
        kvq_cuda_hqx *const *parts = w->dev;
        if (g->b.exec != KVQ_EXEC_EXACT) { // every block in one launch
            const int64_t r0[3] = {w->row0[0], w->row0[1], w->row0[2]};
            RUN(g, kvq_cuda_hqx_matmul_parts_in(parts, w->n_part, r0, x, &in, T, y, w->rows, acc, ERR));
            prof_end(g, key);
            return;
        }
        for (int p = 0; p < w->n_part; p++) {
            for (int t = 0; t < T; t++) // exact mode: float activations, one token at a time
                RUN(g, kvq_cuda_hqx_matvec(parts[p], x + (size_t)t * w->cols, y + (size_t)t * w->rows + w->row0[p], 0,
                                           ERR));
        }
    }
    prof_end(g, key);
}

static void launch_rmsnorm(gpu *g, float *y, const float *x, const float *w, int rows, int n, float eps) {
    TIMED(g, "rmsnorm", RUN(g, kvq_cuda_rmsnorm(y, x, w, rows, n, eps, ERR)));
}
static void launch_rope(gpu *g, float *x, int T, int n_heads, int hd, int rot, int pos, const float *inv_freq) {
    TIMED(g, "rope", RUN(g, kvq_cuda_rope(x, T, n_heads, hd, rot, pos, dpos(g), seqs_of(g), inv_freq, ERR)));
}

// The queued ops, launched as they were asked for (in that order; at most one is pending).
// A queued product is launched by the next op, or, when that op adds it to the residual
// stream (add(x, y)), launched to accumulate into x directly (y is then not written).
static void launch_attend(gpu *g) {
    g->pat.on = 0;
    if (g->pat.has_in) kvq_cuda_attend_set_inputs(&g->pat.in); // the attention computes its own inputs
    prof_begin(g);
    RUN(g, kvq_cuda_attend(g->pat.q, g->pat.kc, g->pat.vc, g->pat.out, 1, g->pat.pos, dpos(g), NULL, g->pat.nh, g->pat.nkv,
                           g->pat.hd, g->b.max_ctx, g->pat.scale, ERR));
    prof_end(g, "attend T=1");
}

static void flush(gpu *g) {
    if (g->pat.on) launch_attend(g);
    if (g->ain.on) {
        g->ain.on = 0;
        TIMED(g, "qkv_split", RUN(g, kvq_cuda_qkv_split(g->ain.qkv, g->ain.bias, g->ain.q, g->ain.k, g->ain.v, g->ain.T,
                                                      g->ain.q_dim, g->ain.kv_dim, ERR)));
        if (g->ain.has_qn) launch_rmsnorm(g, g->ain.q, g->ain.q, g->ain.qn, g->ain.qn_rows, g->ain.qn_n, g->ain.eps);
        if (g->ain.has_kn) launch_rmsnorm(g, g->ain.k, g->ain.k, g->ain.kn, g->ain.kn_rows, g->ain.kn_n, g->ain.eps);
        if (g->ain.has_rq) launch_rope(g, g->ain.q, g->ain.T, g->ain.nh, g->ain.hd, g->ain.rot, g->ain.pos, g->ain.inv_freq);
        if (g->ain.has_rk) launch_rope(g, g->ain.k, g->ain.T, g->ain.nkv, g->ain.hd, g->ain.rot, g->ain.pos, g->ain.inv_freq);
    }
    if (g->pin.on) {
        g->pin.on = 0;
        if (g->pin.kind == KVQ_CUDA_XIN_RMSNORM) launch_rmsnorm(g, g->pin.y, g->pin.x, g->pin.w, g->pin.rows, g->pin.n, g->pin.eps);
        else TIMED(g, "silu_mul", RUN(g, kvq_cuda_silu_mul(g->pin.y, g->pin.x, g->pin.rows, g->pin.n, ERR)));
    }
    if (g->pend.on) {
        g->pend.on = 0;
        launch_mm(g, g->pend.y, g->pend.x, g->pend.w, g->pend.T, 0);
    }
}

// Whether the queued RMSNorm/silu_mul can be computed by w's product's preparation instead:
// its output is the product's input, the row counts agree, and the product is the int8 one
// whose preparation kernel reads the activations (packed weights, not exact mode).
static int absorbs(const gpu *g, const float *x, const kvq_mat *w, int T) {
    return g->pin.on && g->pin.y == x && g->pin.y != g->pin.x && g->pin.rows == T && g->pin.n == w->cols && w->n_part &&
           g->b.exec != KVQ_EXEC_EXACT && !use_tc(g, w, T);
}

static void matmul(kvq_backend *b, float *y, const float *x, const kvq_mat *w, int T) {
    gpu *g = (gpu *)b;
    if (skip(g)) return;
    kvq_cuda_xin in = {KVQ_CUDA_XIN_NONE, NULL, 0.0f, NULL};
    if (g->pat.on && x == g->pat.out && T == 1 && w->n_part == 1 && g->b.exec != KVQ_EXEC_EXACT && !use_tc(g, w, T) &&
        kvq_cuda_hqx_attend_can_prep(((kvq_cuda_hqx **)w->dev)[0], g->pat.nh, g->pat.nkv, g->pat.hd)) {
        g->pat.on = 0; // the attention's merging blocks prepare the product's activation
        if (g->pat.has_in) kvq_cuda_attend_set_inputs(&g->pat.in);
        prof_begin(g);
        RUN(g, kvq_cuda_hqx_attend_prep(g->pat.q, g->pat.kc, g->pat.vc, g->pat.out, g->pat.pos, dpos(g), g->pat.nh,
                                        g->pat.nkv, g->pat.hd, g->b.max_ctx, g->pat.scale, ((kvq_cuda_hqx **)w->dev)[0],
                                        ERR));
        prof_end(g, "attend T=1 +prep");
        in.kind = KVQ_CUDA_XIN_PREPARED;
    } else if (absorbs(g, x, w, T)) {
        in = (kvq_cuda_xin){g->pin.kind, g->pin.w, g->pin.eps, g->pin.y};
        x = g->pin.x; // the queued op's input rows (silu_mul: gate | up)
        g->pin.on = 0;
    }
    flush(g);
    g->pend.on = 1; g->pend.y = y; g->pend.x = x; g->pend.w = w; g->pend.T = T; g->pend.in = in;
}

static void rmsnorm(kvq_backend *b, float *y, const float *x, const float *w, int rows, int n, float eps) {
    gpu *g = (gpu *)b;
    if (skip(g)) return;
    if (g->ain.on && y == x && (y == g->ain.q || y == g->ain.k)) { // the per-head q/k norms
        if (y == g->ain.q && !g->ain.has_qn && !g->ain.has_kn && !g->ain.has_rq) {
            g->ain.has_qn = 1; g->ain.qn = w; g->ain.qn_rows = rows; g->ain.qn_n = n; g->ain.eps = eps;
            return;
        }
        if (y == g->ain.k && g->ain.has_qn && !g->ain.has_kn && g->ain.eps == eps && !g->ain.has_rq) {
            g->ain.has_kn = 1; g->ain.kn = w; g->ain.kn_rows = rows; g->ain.kn_n = n;
            return;
        }
    }
    flush(g);
    if (g->fuse) {
        g->pin.on = 1; g->pin.kind = KVQ_CUDA_XIN_RMSNORM;
        g->pin.y = y; g->pin.x = x; g->pin.w = w; g->pin.rows = rows; g->pin.n = n; g->pin.eps = eps;
        return;
    }
    launch_rmsnorm(g, y, x, w, rows, n, eps);
}
static void qkv_split(kvq_backend *b, const float *qkv, const float *bias, float *q, float *k, float *v, int T,
                      int q_dim, int kv_dim) {
    gpu *g = (gpu *)b;
    if (skip(g)) return;
    flush(g);
    if (g->fuse) {
        memset(&g->ain, 0, sizeof g->ain);
        g->ain.on = 1; g->ain.qkv = qkv; g->ain.bias = bias; g->ain.q = q; g->ain.k = k; g->ain.v = v;
        g->ain.T = T; g->ain.q_dim = q_dim; g->ain.kv_dim = kv_dim;
        return;
    }
    TIMED(g, "qkv_split", RUN(g, kvq_cuda_qkv_split(qkv, bias, q, k, v, T, q_dim, kv_dim, ERR)));
}
static void rope(kvq_backend *b, float *x, int T, int n_heads, int head_dim, int rot_dim, int pos,
                 const float *inv_freq) {
    gpu *g = (gpu *)b;
    if (skip(g)) return;
    if (g->ain.on && T == g->ain.T) {
        if (x == g->ain.q && !g->ain.has_rq && g->ain.has_qn == g->ain.has_kn) {
            g->ain.has_rq = 1; g->ain.nh = n_heads; g->ain.hd = head_dim; g->ain.rot = rot_dim; g->ain.pos = pos;
            g->ain.inv_freq = inv_freq;
            return;
        }
        if (x == g->ain.k && g->ain.has_rq && !g->ain.has_rk && head_dim == g->ain.hd && rot_dim == g->ain.rot &&
            pos == g->ain.pos && inv_freq == g->ain.inv_freq) {
            g->ain.has_rk = 1; g->ain.nkv = n_heads;
            return;
        }
    }
    flush(g);
    launch_rope(g, x, T, n_heads, head_dim, rot_dim, pos, inv_freq);
}
// Whether the queued attention inputs (split, norms, ropes) are those of this attention call,
// so that one kernel (attn_in) can compute them.
static int ain_matches(const gpu *g, const float *q, const float *k, const float *v, int T, int pos, const kvq_attn_shape *s) {
    const int hd = s->head_dim;
    return g->ain.on && g->ain.has_rq && g->ain.has_rk && q == g->ain.q && k == g->ain.k && v == g->ain.v && T == g->ain.T &&
           pos == g->ain.pos && s->n_heads == g->ain.nh && s->n_kv_heads == g->ain.nkv && hd == g->ain.hd &&
           g->ain.q_dim == s->n_heads * hd && g->ain.kv_dim == s->n_kv_heads * hd &&
           (!g->ain.has_qn || (g->ain.qn_n == hd && g->ain.qn_rows == T * s->n_heads)) &&
           (!g->ain.has_kn || (g->ain.kn_n == hd && g->ain.kn_rows == T * s->n_kv_heads));
}

// Where a chunk at pos writes layer l's codec cache: at its end, from 0 (a new sequence), or cut
// back to pos inside the window (dropping positions not yet encoded); anything else is refused.
static kvq_status kv_seek(const gpu *g, kvq_gkv_cache *c, int l, int pos, kvq_err *e) {
    if (pos == c->n_tok) return KVQ_OK;
    const int enc = c->n_enc_k > c->n_enc_v ? c->n_enc_k : c->n_enc_v;
    if (pos == 0) c->n_tok = c->n_enc_k = c->n_enc_v = 0;
    else if (pos < c->n_tok && pos >= enc) c->n_tok = pos;
    else
        return kvq_err_set(e, KVQ_ERR_ARG,
                           "gpu KV cache %s, layer %d: position %d after %d stored positions (%d encoded): a sequence "
                           "continues at its end or restarts at 0", g->kv.spec, l, pos, c->n_tok, enc);
    return KVQ_OK;
}

// kvq_model_fill_kv: T tokens into layer l's codec cache at [pos, pos + T) by kvq_gkv_append, the
// encoders a prefill chunk's attention runs (so the same packed codes, side data and window
// ring a prefill leaves), nothing attended. The fp32 cache has no such path.
static kvq_status kv_append(kvq_backend *b, kvq_kvcache *c, int l, const float *k, const float *v, int T, int pos,
                            kvq_err *err) {
    (void)c;
    gpu *g = (gpu *)b;
    if (!g->kv.on)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--gpu: only a KV cache codec on the device can be filled (--kv fp16, "
                           "int, kivi, ...), not the fp32 cache");
    flush(g);
    kvq_gkv_cache *gc = kv_cache(g, g->sq.cur, l);
    kvq_status st = kv_seek(g, gc, l, pos, err);
    if (!st && (st = kvq_gkv_append(gc, k, v, T, g->kv.window, err))) kvq_err_prefix(err, "layer %d", l);
    return st;
}

// Whether layer l's part of a step of T sequences runs batched (KVQ_CUDA_KV_SEQS_BATCHED=1 or 2): the
// tokens' sequences distinct and each one's cache that of a sequence grown from 0 to its position
// (kvq_gkv_step_ready; a captured step has checked it for every layer: kv_step_ready); a token at
// position 0 restarts its sequence (as kv_seek does).
static int kv_seqs_batched(gpu *g, int l, int T) {
    if (!g->kv.batched || T > g->kv.n_seq) return 0;
    for (int t = 0; t < T; t++) {
        const int sq = g->sq.h[t], pos = g->sq.h[KVQ_MODEL_MAX_SEQS + t];
        if (sq < 0 || sq >= g->kv.n_seq) return 0;
        for (int u = 0; u < t; u++)
            if (g->sq.h[u] == sq) return 0;
        if (g->mode == DIRECT && !kvq_gkv_step_ready(kv_cache(g, sq, l), pos, g->kv.window)) return 0;
    }
    return 1;
}
// A step of T sequences, batched (kv_seqs_batched held): every token appended to its sequence's cache
// in one set of launches (kvq_gkv_append_seqs over layer l's batched view, the rows' sequences and
// positions from the device: sq.d; batched 2: by the one-token step's kernels on each sequence's cache,
// kvq_gkv_append_step), then every token attends in one set of launches (kvq_gkv_attend_seqs): the
// bits of the per-token path below.
static kvq_status kv_attention_batched(gpu *g, int l, const float *q, const float *k, const float *v, float *out, int T,
                                       const kvq_attn_shape *s, kvq_err *e) {
    const size_t kd = (size_t)s->n_kv_heads * s->head_dim;
    const int *d_seq = g->sq.d, *d_pos = g->sq.d + KVQ_MODEL_MAX_SEQS;
    kvq_gkv_cache lay = *kv_cache(g, 0, l); // the layer's n_seq sequences as one batched cache (kv_resize)
    lay.batch = g->kv.n_seq;
    kvq_status st = KVQ_OK;
    for (int t = 0; t < T; t++)
        if (g->sq.h[KVQ_MODEL_MAX_SEQS + t] == 0) { // a restart (kv_seek)
            kvq_gkv_cache *c = kv_cache(g, g->sq.h[t], l);
            c->n_tok = c->n_enc_k = c->n_enc_v = 0;
        }
    if (g->kv.batched == 1) {
        st = kvq_gkv_append_seqs(&lay, k, v, g->kv.window, T, d_seq, d_pos, e);
        for (int t = 0; t < T && !st; t++) kvq_gkv_advance(kv_cache(g, g->sq.h[t], l), 1, g->kv.window);
    } else
        for (int t = 0; t < T && !st; t++) {
            st = kvq_gkv_append_step(kv_cache(g, g->sq.h[t], l), k + t * kd, v + t * kd, g->kv.window, d_pos + t, e);
            if (st) kvq_err_prefix(e, "sequence %d", g->sq.h[t]);
        }
    for (int t = 0; t < T && !st && g->kv.hqmqo && g->mode == DIRECT; t++) // (a replayed step's: sync)
        if ((st = kvq_gkv_pool_check(kv_cache(g, g->sq.h[t], l), e))) kvq_err_prefix(e, "sequence %d", g->sq.h[t]);
    if (!st)
        st = kvq_gkv_attend_seqs(&lay, q, out, s->scale, g->kv.window, T, g->sq.d, g->sq.d + KVQ_MODEL_MAX_SEQS, g->kv.scratch,
                                 g->kv.scratch_bytes, e);
    return st;
}

// A step of several sequences (step_seqs) through their codec caches: token t (sequence h[t] at
// position h[KVQ_MODEL_MAX_SEQS + t]) appended to its sequence's cache of layer l and attending
// there — one batch-1 append and attend per token, the kernels and bits of that sequence's
// one-token step alone. In a captured step each token's position comes from its device copy
// (sq.d), as the one-sequence graph's from d_pos. Queued attention inputs (split, norms, ropes)
// run as that step runs them, by kvq_cuda_attn_in_rows (one launch, each token at its sequence's
// position from the device: the bits of a one-token call); anything else queued is launched as
// it was asked for (flush: the ropes take each token's position from the step).
static kvq_status kv_attention_seqs(gpu *g, int l, const float *q, const float *k, const float *v, float *out, int T,
                                    int pos0, const kvq_attn_shape *s) {
    kvq_err e = {0};
    kvq_status st = KVQ_OK;
    const size_t qd = (size_t)s->n_heads * s->head_dim, kd = (size_t)s->n_kv_heads * s->head_dim;
    const int ain = ain_matches(g, q, k, v, T, pos0, s);
    if (ain) {
        g->ain.on = 0;
        prof_begin(g);
        st = kvq_cuda_attn_in_rows(g->ain.qkv, g->ain.bias, g->ain.has_qn ? g->ain.qn : NULL, g->ain.has_kn ? g->ain.kn : NULL,
                                   g->ain.eps, g->ain.q, g->ain.k, g->ain.v, T, pos0, NULL, seqs_of(g), s->n_heads,
                                   s->n_kv_heads, s->head_dim, g->ain.rot, g->ain.inv_freq, &e);
        prof_end(g, "attn_in rows seqs");
    }
    flush(g);
    prof_begin(g);
    if (!st && kv_seqs_batched(g, l, T)) {
        st = kv_attention_batched(g, l, q, k, v, out, T, s, &e);
        prof_end(g, "kv codec attention seqs batched");
        if (st) kvq_err_prefix(&e, "layer %d", l);
        note(g, st, &e);
        return st;
    }
    for (int t = 0; t < T && !st; t++) {
        const int sq = g->sq.h[t], pos = g->sq.h[KVQ_MODEL_MAX_SEQS + t];
        kvq_gkv_cache *c = kv_cache(g, sq, l);
        if (g->mode != DIRECT) { // kv_step_ready held for every token's sequence
            const int *dp = g->sq.d + KVQ_MODEL_MAX_SEQS + t;
            st = kvq_gkv_append_step(c, k + t * kd, v + t * kd, g->kv.window, dp, &e);
            if (!st) st = kvq_gkv_attend_step(c, q + t * qd, out + t * qd, s->scale, g->kv.window, dp, g->kv.scratch, &e);
        } else {
            st = kv_seek(g, c, l, pos, &e);
            if (!st) st = kvq_gkv_append(c, k + t * kd, v + t * kd, 1, g->kv.window, &e);
            if (!st) st = kvq_gkv_attend(c, q + t * qd, out + t * qd, s->scale, 0, g->kv.scratch, &e);
        }
        if (st) kvq_err_prefix(&e, "sequence %d", sq);
    }
    prof_end(g, "kv codec attention seqs");
    if (st) kvq_err_prefix(&e, "layer %d", l);
    note(g, st, &e);
    return st;
}

// Attention through the device's KV codec cache: the chunk's tokens appended (encoded as they
// leave the window), then each token attends to positions [0, pos + t] of the cache, as the
// CPU's codec cache does (backend_cpu.c: append all, then attend). A sequence continues at its
// end or restarts at 0 (dropping window positions not yet encoded is also allowed). T > 1: the
// tokens attend in groups of up to g->kv.rows rows (kvq_gkv_attend_rows: one set of launches a
// group, the views and bits of the one-token attends), smaller where a group's scratch would
// exceed g->kv.scratch; without rows mode (or where one row does not fit), one attend a token.
static kvq_status kv_attention(gpu *g, int l, const float *q, const float *k, const float *v, float *out, int T, int pos,
                               const kvq_attn_shape *s) {
    if (g->sq.on) return kv_attention_seqs(g, l, q, k, v, out, T, pos, s);
    kvq_err e = {0};
    kvq_status st = KVQ_OK;
    if (ain_matches(g, q, k, v, T, pos, s)) { // split, norms and ropes in one kernel, k and v as rows
        g->ain.on = 0;
        prof_begin(g);
        st = kvq_cuda_attn_in_rows(g->ain.qkv, g->ain.bias, g->ain.has_qn ? g->ain.qn : NULL,
                                   g->ain.has_kn ? g->ain.kn : NULL, g->ain.eps, g->ain.q, g->ain.k, g->ain.v, T, pos, dpos(g),
                                   NULL, s->n_heads, s->n_kv_heads, s->head_dim, g->ain.rot, g->ain.inv_freq, &e);
        prof_end(g, "attn_in rows");
    }
    flush(g); // anything else queued, as it was asked for
    kvq_gkv_cache *c = kv_cache(g, g->sq.cur, l);
    if (!st) st = kv_seek(g, c, l, pos, &e);
    prof_begin(g);
    const int captured = !st && dpos(g); // a captured step (T = 1, kv_step_ready): positions from d_pos
    if (captured) {
        st = kvq_gkv_append_step(c, k, v, g->kv.window, dpos(g), &e);
        if (!st) st = kvq_gkv_attend_step(c, q, out, s->scale, g->kv.window, dpos(g), g->kv.scratch, &e);
    } else if (!st) st = kvq_gkv_append(c, k, v, T, g->kv.window, &e);
    const size_t qd = (size_t)s->n_heads * s->head_dim;
    for (int t = 0; t < T && !st && !captured;) {
        int n = T > 1 && g->kv.rows > 0 ? (T - t < g->kv.rows ? T - t : g->kv.rows) : 0; // rows of this group (0: none)
        while (n > 1 && kvq_gkv_rows_scratch_bytes(c, pos + t, n) > g->kv.scratch_bytes) n = (n + 1) / 2;
        if (n > 0 && kvq_gkv_rows_scratch_bytes(c, pos + t, n) <= g->kv.scratch_bytes) {
            st = kvq_gkv_attend_rows(c, q + t * qd, out + t * qd, s->scale, pos + t, n, g->kv.scratch, g->kv.scratch_bytes, &e);
            t += n;
            continue;
        }
        kvq_gkv_cache view = *c; // the positions token t sees
        view.n_tok = pos + t + 1;
        if (view.n_enc_k > view.n_tok) view.n_enc_k = view.n_tok;
        if (view.n_enc_v > view.n_tok) view.n_enc_v = view.n_tok;
        st = kvq_gkv_attend(&view, q + t * qd, out + t * qd, s->scale, 0, g->kv.scratch, &e);
        t++;
    }
    prof_end(g, T == 1 ? "kv codec attention T=1" : "kv codec attention T>1");
    if (st) kvq_err_prefix(&e, "layer %d", l);
    note(g, st, &e);
    return st;
}

static kvq_status attention(kvq_backend *b, kvq_kvcache *c, int l, const float *q, const float *k, const float *v,
                            float *out, int T, int pos, const kvq_attn_shape *s) {
    (void)c;
    gpu *g = (gpu *)b;
    if (skip(g)) return KVQ_OK;
    if (g->kv.on) return kv_attention(g, l, q, k, v, out, T, pos, s);
    if (!g->kc) {
        flush(g);
        kvq_err e = {0};
        kvq_status st = kvq_err_set(&e, KVQ_ERR_UNSUPPORTED,
                                    "--gpu: a context of %d positions exceeds the fp32 attention kernel's %d; a KV cache "
                                    "on the device has no such limit (--kv fp16, int, kivi, turboquant, qturbo, turboquant-prod, octopus, hqkv or hqmq; head_dim 64 or 128)",
                                    b->max_ctx, kvq_cuda_attention_max_ctx(s->n_heads, s->n_kv_heads, s->head_dim));
        note(g, st, &e);
        return st;
    }
    kvq_err e = {0};
    const int hd = s->head_dim;
    float *kc = kc_of(g, l), *vc = vc_of(g, l);
    const kvq_cuda_seqs *sq = seqs_of(g);
    if (ain_matches(g, q, k, v, T, pos, s)) {
        g->ain.on = 0; // split, norms, ropes and the cache store in one kernel, then attend
        kvq_status st = KVQ_OK;
        if (T == 1 && !sq && g->fuse && b->exec != KVQ_EXEC_EXACT && g->ain_fuse && g->ain.rot <= hd && !(g->ain.rot & 1)) {
            // one token: the attention kernel computes them itself (kvq_cuda_attend_set_inputs)
            g->pat.on = 1; g->pat.q = q; g->pat.kc = kc; g->pat.vc = vc;
            g->pat.out = out; g->pat.pos = pos; g->pat.nh = s->n_heads; g->pat.nkv = s->n_kv_heads; g->pat.hd = hd;
            g->pat.scale = s->scale;
            g->pat.has_in = 1;
            g->pat.in = (kvq_cuda_ain){g->ain.qkv, g->ain.bias, g->ain.has_qn ? g->ain.qn : NULL, g->ain.has_kn ? g->ain.kn : NULL,
                                       g->ain.inv_freq, g->ain.eps, g->ain.rot};
            return KVQ_OK;
        }
        prof_begin(g);
        st = kvq_cuda_attn_in(g->ain.qkv, g->ain.bias, g->ain.has_qn ? g->ain.qn : NULL, g->ain.has_kn ? g->ain.kn : NULL,
                              g->ain.eps, g->ain.q, kc, vc, T, pos, dpos(g), sq, s->n_heads, s->n_kv_heads, hd, g->ain.rot,
                              g->ain.inv_freq, b->max_ctx, &e);
        prof_end(g, "attn_in");
        if (!st && T == 1 && !sq && g->fuse && b->exec != KVQ_EXEC_EXACT) { // queued: the o product may fold its preparation in
            g->pat.has_in = 0;
            g->pat.on = 1; g->pat.q = q; g->pat.kc = kc; g->pat.vc = vc;
            g->pat.out = out; g->pat.pos = pos; g->pat.nh = s->n_heads; g->pat.nkv = s->n_kv_heads; g->pat.hd = hd;
            g->pat.scale = s->scale;
        } else if (!st) {
            prof_begin(g);
            st = kvq_cuda_attend(q, kc, vc, out, T, pos, dpos(g), sq, s->n_heads, s->n_kv_heads, hd, b->max_ctx, s->scale, &e);
            prof_end(g, sq ? "attend seqs" : T == 1 ? "attend T=1" : "attend T>1");
        }
        note(g, st, &e);
        return st;
    }
    flush(g);
    prof_begin(g);
    kvq_status st = kvq_cuda_attention(q, k, v, kc, vc, out, T, pos, dpos(g), sq, s->n_heads, s->n_kv_heads, s->head_dim,
                                       b->max_ctx, s->scale, &e);
    note(g, st, &e);
    prof_end(g, T == 1 ? "attention T=1" : "attention T>1");
    return st;
}
static void silu_mul(kvq_backend *b, float *h, const float *gu, int T, int ffn) {
    gpu *g = (gpu *)b;
    if (skip(g)) return;
    flush(g);
    if (g->fuse) {
        g->pin.on = 1; g->pin.kind = KVQ_CUDA_XIN_SILU_MUL;
        g->pin.y = h; g->pin.x = gu; g->pin.w = NULL; g->pin.rows = T; g->pin.n = ffn; g->pin.eps = 0.0f;
        return;
    }
    TIMED(g, "silu_mul", RUN(g, kvq_cuda_silu_mul(h, gu, T, ffn, ERR)));
}
static void add(kvq_backend *b, float *x, const float *y, size_t n) {
    gpu *g = (gpu *)b;
    if (skip(g)) return;
    if (g->pend.on && g->pend.y == y && n == (size_t)g->pend.T * g->pend.w->rows &&
        (!g->pend.w->n_part || g->b.exec != KVQ_EXEC_EXACT)) { // the product lands in x
        g->pend.on = 0;
        launch_mm(g, x, g->pend.x, g->pend.w, g->pend.T, 1);
        return;
    }
    flush(g);
    TIMED(g, "add", RUN(g, kvq_cuda_add(x, y, n, ERR)));
}

static kvq_status argmax(kvq_backend *b, const float *x, int rows, int n, int32_t *out, kvq_err *err) {
    gpu *g = (gpu *)b;
    if (rows < 1 || rows > KVQ_CUDA_ARGMAX_ROWS)
        return kvq_err_set(err, KVQ_ERR_ARG, "--gpu: the greedy choice of %d rows (at most %d)", rows, KVQ_CUDA_ARGMAX_ROWS);
    g->top1 = out; // delivered by sync, after the graph (if any) has run
    g->top1_rows = rows;
    if (skip(g)) return KVQ_OK;
    flush(g);
    TIMED(g, "argmax", RUN(g, kvq_cuda_argmax(x, rows, n, g->d_top1, ERR)));
    return KVQ_OK;
}

// kvq-verify's scores (issue 12): the two rows' logits stay here, 56 bytes a position come back.
static kvq_status sync(kvq_backend *b, kvq_err *err);
static kvq_status vscore(kvq_backend *b, const float *ref, const float *q, const int32_t *target, int rows, int n,
                         kvq_vscore *out, kvq_err *err) {
    gpu *g = (gpu *)b;
    for (int r = 0; r < rows; r++)
        if (target[r] < 0 || target[r] >= n)
            return kvq_err_set(err, KVQ_ERR_ARG, "verify scores: target %d of row %d outside [0, %d)", target[r], r, n);
    kvq_status s = sync(b, err); // the model's queued work (and any error it met) first
    if (s || rows <= 0) return s;
    if (rows > g->vs.cap) {
        kvq_cuda_free(g->vs.t);
        kvq_cuda_free(g->vs.o);
        g->vs.t = NULL, g->vs.o = NULL, g->vs.cap = 0;
        if ((s = kvq_cuda_malloc((void **)&g->vs.t, sizeof(int32_t) * rows, err)) ||
            (s = kvq_cuda_malloc((void **)&g->vs.o, sizeof(kvq_vscore) * rows, err)))
            return s;
        g->vs.cap = rows;
    }
    if ((s = kvq_cuda_copy_async(g->vs.t, target, sizeof(int32_t) * rows, 1, err)) ||
        (s = kvq_cuda_verify_score(ref, q, g->vs.t, rows, n, g->vs.o, err)) ||
        (s = kvq_cuda_copy_async(out, g->vs.o, sizeof(kvq_vscore) * rows, 0, err)))
        return s;
    return kvq_cuda_stream_sync(err);
}

// hqmq:…:med<C>: whether a graph step's encoder filled an outlier pool (kvq_gkv_append checks its
// own; a captured kvq_gkv_append_step cannot): every cache's flags, once the stream has finished.
static kvq_status kv_pool_check(gpu *g, kvq_err *err) {
    const int L = g->b.arch.n_layers;
    for (int sq = 0; sq < g->kv.n_seq; sq++)
        for (int l = 0; l < L; l++) {
            kvq_status s = kvq_gkv_pool_check(kv_cache(g, sq, l), err);
            if (s) {
                kvq_err_prefix(err, "sequence %d, layer %d", sq, l);
                return s;
            }
        }
    return KVQ_OK;
}

static kvq_status sync(kvq_backend *b, kvq_err *err) {
    gpu *g = (gpu *)b;
    flush(g);
    kvq_err e = {0};
    kvq_status s = KVQ_OK;
    void **graph = &g->graph[g->variant];
    if (g->mode == CAPTURE) { // the step's ops are recorded: make the graph, then run it
        s = kvq_cuda_capture_end(g->first.code != 0, graph, &e);
        note(g, s, &e);
    }
    const int ran = g->mode != DIRECT && *graph && !g->first.code;
    if (ran) {
        s = kvq_cuda_graph_launch(*graph, &e);
        note(g, s, &e);
    }
    g->mode = DIRECT;
    if (g->top1 && !g->first.code) {
        s = kvq_cuda_copy_async(g->h_top1, g->d_top1, sizeof(int) * g->top1_rows, 0, &e);
        note(g, s, &e);
    }
    s = kvq_cuda_stream_sync(err);
    if (ran && !s && !g->first.code && g->kv.on && g->kv.hqmqo) s = kv_pool_check(g, err);
    if (ran && g->timeline && !s) tl_read(g);
    if (g->top1) {
        for (int r = 0; r < g->top1_rows; r++) g->top1[r] = g->first.code ? -1 : g->h_top1[r];
        g->top1 = NULL;
    }
    if (g->first.code) {
        s = g->first.code;
        if (err) *err = g->first;
        memset(&g->first, 0, sizeof g->first);
    }
    return s;
}

static size_t scratch_bytes(const kvq_backend *b) {
    const gpu *g = (const gpu *)b;
    return kvq_cuda_tc_scratch_bytes() + g->kv.aux + (g->pq_scratch ? g->pq_need : 0);
}
static size_t kv_bytes(const kvq_backend *b) {
    const gpu *g = (const gpu *)b;
    return g->kv.on ? g->kv.bytes : 2 * sizeof(float) * g->kv_floats * (size_t)(g->sq.n > 1 ? g->sq.n : 1);
}

// The per-KV-head tables the encoder and the attention of layer l's side r read (centroids,
// signs, qturbo's quaternion, turboquant-prod's QJL matrix, OCTOPUS's direction table, ρ and ξ
// centroids, HyperQuant-KV's Q and seeds, HQMQ's joint codebook and secondary quaternions:
// kvq_gkv_tables_of), gathered over the heads from the codec states (so a loaded .kvq's tables
// are used) and uploaded into the side; their bytes are added to *bytes.
static kvq_status side_tables(const kvq_kvcache *kc, int l, int r, int nkv, const char *spec, kvq_gkv_side *sd, size_t *bytes,
                              kvq_err *err) {
    const kvq_kvcodec **st = malloc(sizeof *st * nkv);
    if (!st) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    for (int h = 0; h < nkv; h++) st[h] = kvq_kvcache_codec_state(kc, l, h, r);
    kvq_status s = kvq_gkv_side_tables(sd, st, nkv, bytes, err);
    free(st);
    if (s) kvq_err_prefix(err, "--gpu --kv %s: layer %d %s", spec, l, r ? "V" : "K");
    return s;
}

// The codec caches hold n sequences from now on, every one empty: per layer one array per side and
// one per ring holding the n sequences' regions sequence-major — a batched cache of n sequences, as
// kvq_gkv_attend_seqs reads a step's sequences (KVQ_CUDA_KV_SEQS_BATCHED) — and sequence s's cache the
// batch-1 view of its regions (the same kinds, tables and capacities as sequence 0's before; the
// tables kept). The bytes counted again, the scratch grown for a batched step of n rows when that
// is on. On failure nothing changes.
static kvq_status kv_resize(gpu *g, int n, kvq_err *err) {
    const int L = g->b.arch.n_layers;
    kvq_gkv_cache *c = calloc((size_t)n * L, sizeof *c);
    if (!c) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for %d sequences' KV caches", n);
    kvq_status st = KVQ_OK;
    size_t scr = g->kv.scratch_bytes;
    for (int l = 0; l < L && !st; l++) {
        kvq_gkv_cache *x = &c[l];
        *x = *kv_cache(g, 0, l);
        x->k.data = x->v.data = x->wk = x->wv = NULL;
        x->n_tok = x->n_enc_k = x->n_enc_v = 0;
        size_t reg[2];
        for (int r = 0; r < 2 && !st; r++) {
            kvq_gkv_side *sd = r ? &x->v : &x->k;
            reg[r] = (size_t)x->n_kv * kvq_gkv_region_bytes(sd->kind, sd->bits, x->head_dim, x->cap, r);
            st = kvq_cuda_malloc(&sd->data, (size_t)n * reg[r], err);
        }
        const size_t ring = (size_t)x->n_kv * x->wcap * x->head_dim * 2;
        if (!st) st = kvq_cuda_malloc(&x->wk, (size_t)n * ring, err);
        if (!st) st = kvq_cuda_malloc(&x->wv, (size_t)n * ring, err);
        for (int s = 1; s < n && !st; s++) { // the views
            kvq_gkv_cache *y = &c[(size_t)s * L + l];
            *y = *x;
            y->k.data = (uint8_t *)x->k.data + (size_t)s * reg[0];
            y->v.data = (uint8_t *)x->v.data + (size_t)s * reg[1];
            y->wk = (uint8_t *)x->wk + (size_t)s * ring;
            y->wv = (uint8_t *)x->wv + (size_t)s * ring;
        }
        const size_t sb = g->kv.batched ? kvq_gkv_seqs_scratch_bytes(x, n) : 0;
        if (sb > scr) scr = sb;
    }
    void *scratch = NULL;
    if (!st && scr > g->kv.scratch_bytes) st = kvq_cuda_malloc(&scratch, scr, err);
    if (st) {
        for (int l = 0; l < L; l++) // (the tables are sequence 0's, kept)
            kvq_cuda_free(c[l].k.data), kvq_cuda_free(c[l].v.data), kvq_cuda_free(c[l].wk), kvq_cuda_free(c[l].wv);
        free(c);
        return st;
    }
    for (int l = 0; l < L; l++) {
        kvq_gkv_cache *x = kv_cache(g, 0, l);
        kvq_cuda_free(x->k.data), kvq_cuda_free(x->v.data), kvq_cuda_free(x->wk), kvq_cuda_free(x->wv);
    }
    if (scratch) {
        kvq_cuda_free(g->kv.scratch);
        g->kv.scratch = scratch;
        g->kv.scratch_bytes = scr;
    }
    free(g->kv.c);
    g->kv.c = c;
    g->kv.n_seq = n;
    g->kv.bytes = (size_t)n * g->kv.seq_bytes;
    g->kv.aux = (size_t)n * g->kv.seq_rings + g->kv.tables + g->kv.scratch_bytes;
    return KVQ_OK;
}

// The KV cache in the codec of kc on the device: per layer, each side's GPU kind (fp16 for a
// boundary layer's keys), a packed region per KV head for max_ctx positions (rounded up to
// 32), and fp16 rings for the window, the KIVI key group waiting to fill, and a chunk of
// max_batch new tokens. Replaces the fp32 cache (freed).
static kvq_status kv_codec(kvq_backend *b, const kvq_kvcache *kc, kvq_err *err) {
    gpu *g = (gpu *)b;
    const kvq_arch *a = &b->arch;
    const kvq_kvcache_policy *pol = kvq_kvcache_codec_policy(kc);
    const kvq_kvcodec *s0 = pol ? kvq_kvcache_codec_state(kc, 0, 0, 1) : NULL; // values: never a boundary's fp16
    if (!s0) return kvq_err_set(err, KVQ_ERR_ARG, "--gpu: the KV cache is not a codec cache");
    char spec[64];
    kvq_kvspec_format(&s0->spec, spec, sizeof spec);
    if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads || !kvq_gkv_shape_built(a->head_dim, a->n_heads / a->n_kv_heads))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                           "--gpu --kv %s: the GPU KV kernels are built for head_dim 64 or 128 with 1, 2, 4 or 8 query heads per KV head; "
                           "this model has head_dim %d and %d query over %d KV heads (drop --gpu to run the codec on the CPU)",
                           spec, a->head_dim, a->n_heads, a->n_kv_heads);
    kv_free(g);
    const int L = a->n_layers, nkv = a->n_kv_heads, hd = a->head_dim, cap = (b->max_ctx + 31) / 32 * 32;
    const int wcap = pol->window + 32 + b->max_batch;
    if (!(g->kv.c = calloc(L, sizeof *g->kv.c))) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory");
    g->kv.n_seq = 1;
    size_t bytes = 0, scr = 0, tables = 0, rings = 0;
    kvq_status s = KVQ_OK;
    for (int l = 0; l < L && !s; l++) {
        kvq_gkv_cache *c = &g->kv.c[l];
        *c = (kvq_gkv_cache){.batch = 1, .n_kv = nkv, .n_heads = a->n_heads, .head_dim = hd, .cap = cap, .wcap = wcap};
        for (int r = 0; r < 2 && !s; r++) {
            kvq_gkv_side *sd = r ? &c->v : &c->k;
            const kvq_kvcodec *st = kvq_kvcache_codec_state(kc, l, 0, r);
            s = kvq_gkv_kind_of(st, &sd->kind, &sd->bits, err);
            if (!s && !kvq_gkv_can_encode(sd->kind, sd->bits))
                s = kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                                "--gpu --kv %s: no GPU encoder for this codec (fp16, int, kivi, turboquant, qturbo, "
                                "turboquant-prod, octopus at 2-4 bits, hqkv up to 8-bit codes and hqmq s24:r3, s96:r4, s192:r6 "
                                "with or without med<C> have one); drop --gpu to run it on the CPU", spec);
            if (!s && sd->kind == KVQ_GKV_HQMQO) g->kv.hqmqo = 1;
            sd->role = r;
            const size_t rb = (size_t)nkv * kvq_gkv_region_bytes(sd->kind, sd->bits, hd, cap, r);
            if (!s) s = kvq_cuda_malloc(&sd->data, rb, err);
            bytes += rb;
            if (!s) s = side_tables(kc, l, r, nkv, spec, sd, &tables, err);
        }
        const size_t ring = (size_t)nkv * wcap * hd * 2;
        if (!s) s = kvq_cuda_malloc(&c->wk, ring, err);
        if (!s) s = kvq_cuda_malloc(&c->wv, ring, err);
        rings += 2 * ring;
        size_t sb = kvq_gkv_scratch_bytes(c, 0);
        if (sb > scr) scr = sb;
        // rows mode's groups (a prefill chunk's tokens, at most max_batch of them)
        const int rows = g->kv_rows < b->max_batch ? g->kv_rows : b->max_batch;
        if (rows > 1 && (sb = kvq_gkv_rows_scratch_bound(c, rows)) > scr) scr = sb;
    }
    if (!s) s = kvq_cuda_malloc(&g->kv.scratch, scr, err);
    g->kv.seq_bytes = bytes;
    g->kv.seq_rings = rings;
    g->kv.tables = tables;
    g->kv.scratch_bytes = scr;
    g->kv.bytes = bytes;
    g->kv.aux = rings + tables + scr;
    const int n_seq = g->sq.n > 1 ? g->sq.n : 1; // kvq_model_set_seqs before the codec: a cache each
    const char *kb = getenv("KVQ_CUDA_KV_SEQS_BATCHED");
    g->kv.batched = kb && (!strcmp(kb, "0") || !strcmp(kb, "2")) ? *kb - '0' : 1; // default 1 (session 17's A/B)
    if (!s && n_seq > 1) s = kv_resize(g, n_seq, err);
    if (s) {
        kv_free(g);
        if (s == KVQ_ERR_NOMEM || s == KVQ_ERR_IO) kvq_err_prefix(err, "the GPU KV cache %s (%d positions, %d sequences)", spec, cap, n_seq);
        return s;
    }
    g->kv.rows = g->kv_rows;
    g->kv.window = pol->window;
    const char *kg = getenv("KVQ_CUDA_KV_GRAPHS");
    g->kv.graphs = !(kg && !strcmp(kg, "0"));
    snprintf(g->kv.spec, sizeof g->kv.spec, "%s", spec);
    g->kv.on = 1;
    kvq_cuda_free(g->kc);
    kvq_cuda_free(g->vc);
    g->kc = g->vc = NULL;
    g->kv_floats = 0;
    for (int i = 0; i < 4; i++) kvq_cuda_graph_free(g->graph[i]), g->graph[i] = NULL;
    return KVQ_OK;
}

static const kvq_backend_ops gpu_ops = {
    .name = "cuda", .host = 0, .destroy = destroy, .alloc = alloc, .release = release, .upload = upload,
    .download = download, .mat_adopt = mat_adopt, .mat_release = mat_release, .step = step, .step_seqs = step_seqs,
    .seqs = seqs, .seq_use = seq_use, .ready = ready, .matmul = matmul,
    .rmsnorm = rmsnorm, .qkv_split = qkv_split, .rope = rope, .attention = attention, .kv_append = kv_append,
    .silu_mul = silu_mul, .add = add, .argmax = argmax, .sync = sync, .scratch_bytes = scratch_bytes, .kv_bytes = kv_bytes,
    .kv_codec = kv_codec, .vscore = vscore,
};

// A count from the environment: unset or empty leaves *out as it is; else a whole number in
// [lo, hi] into *out, or KVQ_ERR_ARG "NAME=value: not a <what>".
static kvq_status env_count(const char *name, long lo, long hi, const char *what, int *out, kvq_err *err) {
    const char *v = getenv(name);
    if (!v || !*v) return KVQ_OK;
    char *end = NULL;
    const long n = strtol(v, &end, 10);
    if (*end || n < lo || n > hi) return kvq_err_set(err, KVQ_ERR_ARG, "%s=%s: not a %s", name, v, what);
    *out = (int)n;
    return KVQ_OK;
}

// A switch the kernel libraries read as the exact string "0" or "1": anything else refused in one line.
static kvq_status env_switch(const char *name, const char *what, kvq_err *err) {
    const char *v = getenv(name);
    if (!v || !*v || !strcmp(v, "0") || !strcmp(v, "1")) return KVQ_OK;
    return kvq_err_set(err, KVQ_ERR_ARG, "%s=%s: not a %s", name, v, what);
}

kvq_status kvq_backend_cuda_new(const kvq_model_opts *o, const kvq_arch *a, kvq_backend **out, kvq_err *err) {
    char why[256];
    if (kvq_cuda_device_count(why, sizeof why) <= 0) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--gpu: %s", why);
    if (o->kv_fp16)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--gpu: the default GPU KV cache is fp32 (an fp16 cache on the device: --kv fp16)");
    kvq_status s = kvq_cuda_stream_init(err);
    if (s) return s;
    gpu *g = calloc(1, sizeof *g);
    if (!g) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the GPU backend");
    const char *ev = getenv("KVQ_CUDA_GRAPHS"), *pv = getenv("KVQ_CUDA_PROFILE"), *fv = getenv("KVQ_CUDA_FUSE");
    g->profile = pv && !strcmp(pv, "1");
    const char *av = getenv("KVQ_CUDA_AIN_FUSE");
    g->ain_fuse = !(av && !strcmp(av, "0"));
    const char *lv = getenv("KVQ_CUDA_TIMELINE");
    g->timeline = lv && !strcmp(lv, "1") && !g->profile;
    g->graphs = !(ev && !strcmp(ev, "0")) && !g->profile;
    g->fuse = !(fv && !strcmp(fv, "0"));
    const char *qv = getenv("KVQ_CUDA_PQ_DENSE");
    g->pq_dense = qv && !strcmp(qv, "1");
    const char *tv = getenv("KVQ_CUDA_TC");
    g->tc = !(tv && !strcmp(tv, "0")) && kvq_cuda_tc_available(NULL, 0);
    g->tc_min = 16;
    g->tc_min_dense = 2;
    g->kv_rows = KV_ROWS;
    // read by the kernel libraries themselves (attention.cu, kv_attn.cu, hqx_gemv1.cu); checked here, where a
    // value they would quietly replace by their default is refused (issues 12, 20)
    int cmin = 0, cfl = 0, epf = 0, esc16 = 0, apf = 0, g1pf = 0, dvar = -1;
    if ((s = env_count("KVQ_CUDA_KV_ROWS", 0, 4096, "group size (0 = off, 1..4096)", &g->kv_rows, err)) ||
        (s = env_count("KVQ_CUDA_ATTN_CMIN", 0, 1 << 30, "position count (0 = 16 splits, 1..1073741824)", &cmin, err)) ||
        (s = env_count("KVQ_CUDA_ATTN_PF", 0, 4096, "position count (0 = no prefetch, 1..4096)", &apf, err)) ||
        (s = env_switch("KVQ_CUDA_G1S", "switch (0 the persistent kernel, 1 the lean one)", err)) ||
        (s = env_count("KVQ_CUDA_G1PF", 0, 8, "row count (0 = no prefetch, 1..8)", &g1pf, err)) ||
        (s = env_switch("KVQ_CUDA_G1SC", "switch (0 the run-time step count, 1 compile-time where it applies)", err)) ||
        (s = env_count("KVQ_CUDA_KV_CFLOOR", 0, 1024, "chunk floor (0 = none, a multiple of 32 up to 1024)", &cfl, err)) ||
        (s = env_count("KVQ_CUDA_ESC_PF", 0, 2, "mode (0 off, 1 prefetch, 2 batched row end)", &epf, err)) ||
        (s = env_count("KVQ_CUDA_ESC16", 0, 2, "form (0 32-bit escapes, 1 16-bit, 2 16-bit in one-segment rows)", &esc16, err)) ||
        (s = env_switch("KVQ_CUDA_KV_TC_Q8", "switch (0 fp16 scores, 1 int8 scores)", err)) ||
        (s = env_switch("KVQ_CUDA_KV_TC_LEAN", "switch (0 off, 1 the lean kernels)", err)) ||
        (s = env_count("KVQ_CUDA_TC_MIN", 1, 1 << 20, "token count (1..1048576)", &g->tc_min, err)) ||
        (s = env_count("KVQ_CUDA_TC_MIN_DENSE", 1, 1 << 20, "token count (1..1048576)", &g->tc_min_dense, err)) ||
        (s = env_count("KVQ_CUDA_DENSE", 0, KVQ_CUDA_DENSE_VARIANTS, "kernel (0 dense_k, 1..5 the one-token kernels; default 2)", &dvar, err)))
        return free(g), s;
    if (dvar >= 0) kvq_cuda_dense_set_variant(dvar); // the one-token bf16 product's kernel (the same bits)
    if (cfl % 32)
        return free(g), kvq_err_set(err, KVQ_ERR_ARG, "KVQ_CUDA_KV_CFLOOR=%s: not a chunk floor (0 = none, a multiple of 32 up to 1024)",
                                    getenv("KVQ_CUDA_KV_CFLOOR"));
    g->b = (kvq_backend){.ops = &gpu_ops, .exec = o->exec, .n_threads = o->n_threads, .max_batch = o->max_batch,
                         .max_ctx = o->max_ctx, .arch = *a};
    *out = &g->b;
    return KVQ_OK;
}
