// The GPU backend (backend.h) over kernels/cuda's launchers: weights uploaded as they load
// (packed HyperQuant/RTN tensors in the hqx execution layout, products from the codes with
// the activation rotated once per input; dense ones as bf16/fp32), fp32 activations and an
// fp32 KV cache in device memory. Ops are asynchronous on the default stream; the first
// failure is kept and reported by sync. Plain C: it links against build/libkvqcuda.a or,
// without nvcc, kernels/cuda/no_cuda.c (every call then reports "built without CUDA").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/hqx.h"
#include "kernels/cuda/hq_decode.h"
#include "kernels/cuda/hqx.h"
#include "kernels/cuda/ops.h"
#include "libconv/runtime/backend.h"

// Decode steps (one token, with logits) run as a CUDA graph: the first is captured while the
// model issues its ops, later ones replay it (the model's op calls are then skipped) with
// the position in device memory. KVQ_CUDA_GRAPHS=0 launches every kernel instead.
typedef enum { DIRECT = 0, CAPTURE, REPLAY } mode;

typedef struct {
    kvq_backend b;
    kvq_err first; // the first failure since the last sync
    float *kc, *vc; // (n_layers, n_kv_heads, max_ctx, head_dim) each
    size_t kv_floats;
    int *d_pos;     // the position a graph reads
    int pos;        // its host copy (the source of the asynchronous copy)
    int graphs;     // use graphs
    mode mode;
    void *graph;    // the decode step's executable graph
    struct { int on; float *y; const float *x; const kvq_mat *w; int T; } pend; // a queued product
    // KVQ_CUDA_PROFILE=1: graphs off, every op synchronized and timed, totals on stderr at close
    int profile;
    struct { char key[48]; double s; long n; } prof[64];
    int n_prof;
    double t0;
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
static void prof_end(gpu *g, const char *key) {
    if (!g->profile) return;
    kvq_err e = {0};
    kvq_cuda_stream_sync(&e);
    double dt = now_s() - g->t0;
    int i = 0;
    while (i < g->n_prof && strcmp(g->prof[i].key, key)) i++;
    if (i == g->n_prof) {
        if (i == 64) return;
        snprintf(g->prof[i].key, sizeof g->prof[i].key, "%s", key);
        g->n_prof++;
    }
    g->prof[i].s += dt;
    g->prof[i].n++;
}

static int skip(const gpu *g) { return g->mode == REPLAY; }
#define TIMED(g, key, stmt) do { prof_begin(g); stmt; prof_end(g, key); } while (0)
static const int *dpos(const gpu *g) { return g->mode == DIRECT ? NULL : g->d_pos; }

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

static void destroy(kvq_backend *b) {
    gpu *g = (gpu *)b;
    double tot = 0;
    for (int i = 0; i < g->n_prof; i++) tot += g->prof[i].s;
    for (int i = 0; i < g->n_prof; i++)
        fprintf(stderr, "kvq cuda profile: %-40s %8ld calls %9.3f ms %6.1f us/call %5.1f %%\n", g->prof[i].key,
                g->prof[i].n, 1e3 * g->prof[i].s, 1e6 * g->prof[i].s / g->prof[i].n, 100 * g->prof[i].s / tot);
    kvq_cuda_graph_free(g->graph);
    kvq_cuda_free(g->kc);
    kvq_cuda_free(g->vc);
    kvq_cuda_free(g->d_pos);
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
}

static kvq_status mat_adopt(kvq_backend *b, kvq_mat *w, int keep_host, kvq_err *err) {
    (void)b;
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
    (void)b;
    if (!w->dev) return;
    if (w->n_part) {
        kvq_cuda_hqx **parts = w->dev;
        for (int p = 0; p < w->n_part; p++) kvq_cuda_hqx_free(parts[p]);
        free(parts);
    } else kvq_cuda_free(w->dev);
    w->dev = NULL;
}

static kvq_status ready(kvq_backend *b, kvq_err *err) {
    gpu *g = (gpu *)b;
    const kvq_arch *a = &b->arch;
    g->kv_floats = (size_t)a->n_layers * a->n_kv_heads * (size_t)b->max_ctx * a->head_dim;
    kvq_status s = kvq_cuda_malloc((void **)&g->kc, sizeof(float) * g->kv_floats, err);
    if (!s) s = kvq_cuda_malloc((void **)&g->vc, sizeof(float) * g->kv_floats, err);
    if (s) kvq_err_prefix(err, "the KV cache (%d positions)", b->max_ctx);
    if (!s) s = kvq_cuda_malloc((void **)&g->d_pos, sizeof(int), err);
    if (!s) s = kvq_cuda_attention_init(a->head_dim, b->max_ctx, err);
    if (!s) s = kvq_cuda_hqx_fused_init(err);
    return s;
}

static void step(kvq_backend *b, int T, int pos, int logits) {
    gpu *g = (gpu *)b;
    g->mode = DIRECT;
    if (!g->graphs || T != 1 || !logits || g->first.code) return;
    kvq_err e = {0};
    g->pos = pos;
    kvq_status s = kvq_cuda_copy_async(g->d_pos, &g->pos, sizeof(int), 1, &e);
    if (!s && !g->graph) s = kvq_cuda_capture_begin(&e);
    if (s) { note(g, s, &e); return; }
    g->mode = g->graph ? REPLAY : CAPTURE;
}

// Runs a product now; acc = 1 adds it into y.
static void launch_mm(gpu *g, float *y, const float *x, const kvq_mat *w, int T, int acc) {
    char key[48];
    if (g->profile)
        snprintf(key, sizeof key, "matmul %s %dx%d T%s%s", w->n_part ? "packed" : w->dt == KVQ_DTYPE_BF16 ? "bf16" : "f32",
                 w->rows, w->cols, T == 1 ? "=1" : ">1", acc ? " +=" : "");
    prof_begin(g);
    if (!w->n_part) {
        RUN(g, kvq_cuda_dense_matmul(w->dev, w->dt == KVQ_DTYPE_BF16, x, y, T, w->cols, w->rows, acc, ERR));
    } else {
        kvq_cuda_hqx *const *parts = w->dev;
        if (g->b.exec != KVQ_EXEC_EXACT) { // every block in one launch
            const int64_t r0[3] = {w->row0[0], w->row0[1], w->row0[2]};
            RUN(g, kvq_cuda_hqx_matmul_parts(parts, w->n_part, r0, x, T, y, w->rows, acc, ERR));
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

// The product queued by matmul: launched by the next op, or, when that op adds it to the
// residual stream (add(x, y)), launched to accumulate into x directly (y is then not written).
static void flush(gpu *g) {
    if (!g->pend.on) return;
    g->pend.on = 0;
    launch_mm(g, g->pend.y, g->pend.x, g->pend.w, g->pend.T, 0);
}

static void matmul(kvq_backend *b, float *y, const float *x, const kvq_mat *w, int T) {
    gpu *g = (gpu *)b;
    if (skip(g)) return;
    flush(g);
    g->pend.on = 1; g->pend.y = y; g->pend.x = x; g->pend.w = w; g->pend.T = T;
}

static void rmsnorm(kvq_backend *b, float *y, const float *x, const float *w, int rows, int n, float eps) {
    flush((gpu *)b);
    if (!skip((gpu *)b)) TIMED((gpu *)b, "rmsnorm", RUN((gpu *)b, kvq_cuda_rmsnorm(y, x, w, rows, n, eps, ERR)));
}
static void qkv_split(kvq_backend *b, const float *qkv, const float *bias, float *q, float *k, float *v, int T,
                      int q_dim, int kv_dim) {
    flush((gpu *)b);
    if (!skip((gpu *)b)) TIMED((gpu *)b, "qkv_split", RUN((gpu *)b, kvq_cuda_qkv_split(qkv, bias, q, k, v, T, q_dim, kv_dim, ERR)));
}
static void rope(kvq_backend *b, float *x, int T, int n_heads, int head_dim, int rot_dim, int pos,
                 const float *inv_freq) {
    gpu *g = (gpu *)b;
    flush(g);
    if (!skip(g)) TIMED(g, "rope", RUN(g, kvq_cuda_rope(x, T, n_heads, head_dim, rot_dim, pos, dpos(g), inv_freq, ERR)));
}
static kvq_status attention(kvq_backend *b, kvq_kvcache *c, int l, const float *q, const float *k, const float *v,
                            float *out, int T, int pos, const kvq_attn_shape *s) {
    (void)c;
    gpu *g = (gpu *)b;
    flush(g);
    if (skip(g)) return KVQ_OK;
    const size_t per_layer = (size_t)s->n_kv_heads * (size_t)b->max_ctx * s->head_dim;
    kvq_err e = {0};
    prof_begin(g);
    kvq_status st = kvq_cuda_attention(q, k, v, g->kc + per_layer * l, g->vc + per_layer * l, out, T, pos, dpos(g), s->n_heads,
                                       s->n_kv_heads, s->head_dim, b->max_ctx, s->scale, &e);
    note(g, st, &e);
    prof_end(g, T == 1 ? "attention T=1" : "attention T>1");
    return st;
}
static void silu_mul(kvq_backend *b, float *h, const float *gu, int T, int ffn) {
    flush((gpu *)b);
    if (!skip((gpu *)b)) TIMED((gpu *)b, "silu_mul", RUN((gpu *)b, kvq_cuda_silu_mul(h, gu, T, ffn, ERR)));
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

static kvq_status sync(kvq_backend *b, kvq_err *err) {
    gpu *g = (gpu *)b;
    flush(g);
    kvq_err e = {0};
    kvq_status s = KVQ_OK;
    if (g->mode == CAPTURE) { // the step's ops are recorded: make the graph, then run it
        s = kvq_cuda_capture_end(g->first.code != 0, &g->graph, &e);
        note(g, s, &e);
    }
    if (g->mode != DIRECT && g->graph && !g->first.code) {
        s = kvq_cuda_graph_launch(g->graph, &e);
        note(g, s, &e);
    }
    g->mode = DIRECT;
    s = kvq_cuda_stream_sync(err);
    if (g->first.code) {
        s = g->first.code;
        if (err) *err = g->first;
        memset(&g->first, 0, sizeof g->first);
    }
    return s;
}

static size_t scratch_bytes(const kvq_backend *b) { (void)b; return 0; }
static size_t kv_bytes(const kvq_backend *b) { return 2 * sizeof(float) * ((const gpu *)b)->kv_floats; }

static const kvq_backend_ops gpu_ops = {
    .name = "cuda", .host = 0, .destroy = destroy, .alloc = alloc, .release = release, .upload = upload,
    .download = download, .mat_adopt = mat_adopt, .mat_release = mat_release, .step = step, .ready = ready, .matmul = matmul,
    .rmsnorm = rmsnorm, .qkv_split = qkv_split, .rope = rope, .attention = attention, .silu_mul = silu_mul,
    .add = add, .sync = sync, .scratch_bytes = scratch_bytes, .kv_bytes = kv_bytes,
};

kvq_status kvq_backend_cuda_new(const kvq_model_opts *o, const kvq_arch *a, kvq_backend **out, kvq_err *err) {
    char why[256];
    if (kvq_cuda_device_count(why, sizeof why) <= 0) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--gpu: %s", why);
    if (o->max_ctx > kvq_cuda_attention_max_ctx(a->head_dim))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--gpu: a context of %d positions exceeds the attention kernel's %d",
                           o->max_ctx, kvq_cuda_attention_max_ctx(a->head_dim));
    if (o->kv_fp16)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "--gpu: the GPU KV cache is fp32 (--kv-fp16 runs on the CPU)");
    kvq_status s = kvq_cuda_stream_init(err);
    if (s) return s;
    gpu *g = calloc(1, sizeof *g);
    if (!g) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the GPU backend");
    const char *ev = getenv("KVQ_CUDA_GRAPHS"), *pv = getenv("KVQ_CUDA_PROFILE");
    g->profile = pv && !strcmp(pv, "1");
    g->graphs = !(ev && !strcmp(ev, "0")) && !g->profile;
    g->b = (kvq_backend){.ops = &gpu_ops, .exec = o->exec, .n_threads = o->n_threads, .max_batch = o->max_batch,
                         .max_ctx = o->max_ctx, .arch = *a};
    *out = &g->b;
    return KVQ_OK;
}
