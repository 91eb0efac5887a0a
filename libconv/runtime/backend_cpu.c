// The CPU backend (backend.h): host memory, kernels/cpu, the model's kvq_kvcache (so every
// KV codec runs here). Products: dense fp32/bf16 (kvq_matmul) and packed HyperQuant/RTN
// (kvq_hqx_matmul with int8 or exact activations; prefill of >= KVQ_PREFILL_DENSE_MIN
// tokens through decoded row blocks and the dense kernel) and packed PQ (kvq_pqx_matmul:
// per-token tables and lookups, float sums, the same in every exec mode).
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/hqx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pq.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/verify_score.h"
#include "libconv/runtime/backend.h"

// From this many tokens a product decodes row blocks and runs the dense kernel (prefill):
// measured on kvq-small-llama E8 4.0 at 2 threads, 91-token prompts prefill at ~1350 tok/s
// either way, 512-token chunks at ~1900 dense against ~1100 through the int8 kernel.
#define KVQ_PREFILL_DENSE_MIN 64
// From this many tokens int8 mode runs packed products as batched VNNI products with the
// tokens in the vector lanes (kernels/cpu/hqx_gemm.c) where every part allows it: measured
// with build/bench/hqx_bench 2048 2048 N 1 (E8 4.0, one loaded core) at 16 tokens 5.8 G w/s
// against 4.4 for the one-token kernel, at 64 17.2 against 6.2 for the dense path, at 256
// 25.3 against 10.9 (docs/EXECUTION.md). On AVX2 (maddubs, 8 tokens a vector) it wins from 5
// tokens: hqx_bench 2048 2048 N 1 4.0, G weights per CPU-second, one-token kernel against
// batched: N 4 15.9 / 16.7, 5 13.6 / 15.3, 6 13.5 / 21.1, 8 15.5 / 30.4, 15 16.0 / 40.5.
#define KVQ_PREFILL_GEMM_MIN 16
#define KVQ_PREFILL_GEMM_MIN_AVX2 5
static int gemm_min(void) { return kvq_hqx_isa_best() == KVQ_HQX_ISA_AVX2 ? KVQ_PREFILL_GEMM_MIN_AVX2 : KVQ_PREFILL_GEMM_MIN; }

typedef struct {
    kvq_backend b;
    // sizes recorded while matrices are adopted
    size_t act_bytes; // widest packed tensor's prepared activation (per token)
    size_t xperm_floats;
    int64_t widest;   // widest packed tensor (rows of a dense prefill block)
    int any_packed;
    int max_part;     // most row blocks of one packed matrix (fused q/k/v: 3)
    int any_pq;       // some matrix is in the PQ layout
    size_t pq_floats; // the largest PQ matrix's table scratch (kvq_pqx_scratch)
    // scratch
    uint8_t *act_buf;  // (max_part, max_batch) prepared activations of act_bytes each
    kvq_hqx_act *acts; // (max_part, max_batch)
    float *dense;      // prefill: a block of decoded rows and its products
    float *pq_lut;     // PQ products: tables of up to 8 tokens for every block of a matrix
    float *xperm;      // dense bf16 products: kvq_matmul's scratch for max_batch tokens
    // batched int8 products (int8 mode, a VNNI CPU): packed activations per part, and each
    // thread's accumulators
    uint8_t *gemm, *gemm_thread;
    size_t gemm_bytes, gemm_thread_bytes;
    int gemm_threads;
    int prep_in_team; // KVQ_CPU_PREP_TEAM=1: one token's preparation shared by the team (before)
    // a chunk of several sequences (step_seqs): token t at pos[t] of caches[seq[t]]
    struct { int on; const int *seq, *pos; kvq_kvcache *const *caches; } sq;
} cpu;

void kvq_mat_free_host(kvq_mat *m) {
    free(m->data);
    m->data = NULL;
    for (int i = 0; i < m->n_part; i++) kvq_hqx_free(&m->part[i]);
    for (int i = 0; i < m->n_pq; i++) kvq_pqx_free(&m->pq[i]);
}

size_t kvq_mat_host_bytes(const kvq_mat *m) {
    if (m->n_pq) {
        size_t b = 0;
        for (int i = 0; i < m->n_pq; i++) b += kvq_pqx_bytes(&m->pq[i]);
        return b;
    }
    if (!m->n_part) return (size_t)m->rows * m->cols * kvq_dtype_size(m->dt);
    size_t b = 0;
    for (int i = 0; i < m->n_part; i++) b += kvq_hqx_bytes(&m->part[i]);
    return b;
}

static void destroy(kvq_backend *b) {
    cpu *c = (cpu *)b;
    free(c->act_buf);
    free(c->acts);
    free(c->dense);
    free(c->pq_lut);
    free(c->gemm);
    free(c->gemm_thread);
    free(c->xperm);
    free(c);
}

static float *alloc(kvq_backend *b, size_t n) {
    (void)b;
    return malloc(sizeof(float) * (n ? n : 1));
}
static void release(kvq_backend *b, float *p) { (void)b; free(p); }
static kvq_status copy(kvq_backend *b, float *dst, const float *src, size_t n, kvq_err *err) {
    (void)b; (void)err;
    if (dst != src) memcpy(dst, src, sizeof(float) * n);
    return KVQ_OK;
}

static kvq_status mat_adopt(kvq_backend *b, kvq_mat *w, int keep_host, kvq_err *err) {
    (void)err;
    cpu *c = (cpu *)b;
    // Packed HyperQuant / RTN blocks in their compact CPU form (a bit per row for escapes, the
    // scale table's used entries: kvq_hqx_compact); not when the arrays stay shared with the host
    // copy (keep_host: a tied embedding, looked up through the same arrays).
    for (int p = 0; p < w->n_part && !keep_host; p++) kvq_hqx_compact(&w->part[p]);
    w->held = kvq_mat_host_bytes(w);
    if (w->n_pq) {
        const size_t sc = kvq_pqx_scratch(w->pq, w->n_pq);
        if (sc > c->pq_floats) c->pq_floats = sc;
        if (w->cols > c->widest) c->widest = w->cols;
        c->any_pq = 1;
        return KVQ_OK;
    }
    if (!w->n_part) {
        size_t xp = kvq_matmul_scratch(w->dt, b->max_batch, w->cols);
        if (xp > c->xperm_floats) c->xperm_floats = xp;
        return KVQ_OK;
    }
    c->any_packed = 1;
    for (int p = 0; p < w->n_part; p++) {
        size_t ab = kvq_hqx_act_bytes(&w->part[p]);
        if (ab > c->act_bytes) c->act_bytes = ab;
        if (kvq_hqx_gemm_ok(&w->part[p])) {
            const size_t gb = (kvq_hqx_gemm_scratch(&w->part[p], b->max_batch) + 63) / 64 * 64,
                         tb = (kvq_hqx_gemm_thread_bytes(&w->part[p], b->max_batch) + 63) / 64 * 64;
            if (gb > c->gemm_bytes) c->gemm_bytes = gb;
            if (tb > c->gemm_thread_bytes) c->gemm_thread_bytes = tb;
        }
    }
    if (w->n_part > c->max_part) c->max_part = w->n_part;
    if (w->cols > c->widest) c->widest = w->cols;
    return KVQ_OK;
}
static void mat_release(kvq_backend *b, kvq_mat *w) { (void)b; (void)w; }

static kvq_status ready(kvq_backend *b, kvq_err *err) {
    cpu *c = (cpu *)b;
    const size_t B = (size_t)b->max_batch;
    if (c->xperm_floats && !(c->xperm = malloc(sizeof(float) * c->xperm_floats)))
        return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for %zu floats of product scratch", c->xperm_floats);
    if (c->any_pq) {
        c->pq_lut = aligned_alloc(64, (sizeof(float) * c->pq_floats + 63) / 64 * 64);
        if (!c->pq_lut)
            return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the PQ products' tables (%zu floats)", c->pq_floats);
        if (!c->any_packed && b->prefill_decoded &&
            !(c->dense = malloc(sizeof(float) * ((size_t)KVQ_PQX_DENSE_BLOCK * (size_t)c->widest + B * KVQ_PQX_DENSE_BLOCK))))
            return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the decoded prefill's scratch (%zu tokens)", B);
    }
    if (!c->any_packed) return KVQ_OK;
    c->act_buf = aligned_alloc(64, c->act_bytes * B * (size_t)c->max_part);
    c->acts = calloc(B * (size_t)c->max_part, sizeof *c->acts);
    c->dense = malloc(sizeof(float) * ((size_t)KVQ_HQX_DENSE_BLOCK * (size_t)c->widest + B * KVQ_HQX_DENSE_BLOCK));
    if (!c->act_buf || !c->acts || !c->dense)
        return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the packed products' scratch (%zu tokens)", B);
    if (c->gemm_bytes && b->exec == KVQ_EXEC_INT8 && B >= (size_t)gemm_min()) {
        c->gemm_threads = kvq_nthreads(b->n_threads);
        c->gemm = aligned_alloc(64, c->gemm_bytes * (size_t)c->max_part);
        c->gemm_thread = aligned_alloc(64, c->gemm_thread_bytes * (size_t)c->gemm_threads);
        if (!c->gemm || !c->gemm_thread)
            return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the batched products' scratch (%zu tokens)", B);
    }
    return KVQ_OK;
}

// Products of a packed matrix for T < KVQ_PREFILL_DENSE_MIN tokens in one parallel region:
// the threads first prepare every (block, token, tile column) of the activations, then take
// contiguous shares of all blocks' rows (groups of 4), so a fused q/k/v or gate/up costs one
// fork and one barrier, and no preparation runs on one thread while the others wait.
static void matmul_packed(cpu *c, float *y, const float *x, const kvq_mat *w, int T) {
    const kvq_hqx_mode mode = c->b.exec == KVQ_EXEC_EXACT ? KVQ_HQX_EXACT : KVQ_HQX_INT8;
    const kvq_hqx_isa isa = T == 1 && mode == KVQ_HQX_INT8 ? kvq_hqx_isa_one_token() : kvq_hqx_isa_best();
    int64_t prep_end[3], unit_end[3], n_prep = 0, n_unit = 0, work = 0; // running totals over blocks
    for (int p = 0; p < w->n_part; p++) {
        const kvq_hqx *hw = &w->part[p];
        prep_end[p] = n_prep += (int64_t)T * (hw->cols_p / hw->tile);
        unit_end[p] = n_unit += (hw->rows + 3) / 4;
        work += hw->rows * hw->cols_p * T;
    }
    for (int p = 0; p < w->n_part; p++) // carve each block's buffers (the sizes are the block's)
        for (int k = 0; k < T; k++)
            kvq_hqx_act_init(&w->part[p], c->act_buf + c->act_bytes * (size_t)(p * c->b.max_batch + k),
                             &c->acts[p * c->b.max_batch + k]);
    // One token (decode): the calling thread prepares it before the fork, so the team meets
    // once per product (at the join) instead of twice. The preparation is a few µs (one
    // Hadamard per tile column), and on a busy machine every meeting can wait a whole time
    // slice for a descheduled thread: kvq-small-llama E8 4.0 at 2 threads, docs/RESULTS.md.
    const int prep_first = T == 1 && !c->prep_in_team;
    if (prep_first)
        for (int p = 0; p < w->n_part; p++)
            kvq_hqx_prep_tiles(&w->part[p], x, &c->acts[p * c->b.max_batch], 0, w->part[p].cols_p / w->part[p].tile,
                               KVQ_HQX_ISA_AUTO);
#pragma omp parallel num_threads(kvq_nthreads(c->b.n_threads)) if (work > 32768)
    {
        const int64_t nth = omp_get_num_threads(), id = omp_get_thread_num();
        for (int64_t i = n_prep * id / nth, i1 = n_prep * (id + 1) / nth; !prep_first && i < i1;) {
            int p = 0;
            while (i >= prep_end[p]) p++;
            const kvq_hqx *hw = &w->part[p];
            const int64_t tpr = hw->cols_p / hw->tile, k = (i - (p ? prep_end[p - 1] : 0)) / tpr;
            const int64_t j0 = (i - (p ? prep_end[p - 1] : 0)) % tpr, n = tpr - j0 < i1 - i ? tpr - j0 : i1 - i;
            kvq_hqx_prep_tiles(hw, x + (size_t)k * w->cols, &c->acts[p * c->b.max_batch + k], j0, j0 + n,
                               KVQ_HQX_ISA_AUTO);
            i += n;
        }
        if (!prep_first) {
#pragma omp barrier
        }
        for (int64_t u = n_unit * id / nth, u1 = n_unit * (id + 1) / nth; u < u1;) {
            int p = 0;
            while (u >= unit_end[p]) p++;
            const kvq_hqx *hw = &w->part[p];
            const int64_t g0 = u - (p ? unit_end[p - 1] : 0), n = unit_end[p] - u < u1 - u ? unit_end[p] - u : u1 - u;
            const int64_t r1 = 4 * (g0 + n) < hw->rows ? 4 * (g0 + n) : hw->rows;
            kvq_hqx_matmul_rows(hw, &c->acts[p * c->b.max_batch], T, y + w->row0[p], w->rows, mode, isa, 4 * g0, r1);
            u += n;
        }
    }
}

// Batched int8 products of T tokens, tokens in the vector lanes: the activations are prepared
// and packed per part, then the threads take contiguous shares of all parts' rows (groups of 4).
static void matmul_gemm(cpu *c, float *y, const float *x, const kvq_mat *w, int T) {
    for (int p = 0; p < w->n_part; p++) {
        const kvq_hqx *hw = &w->part[p];
        kvq_hqx_act *act = &c->acts[p * c->b.max_batch];
        const int64_t tpr = hw->cols_p / hw->tile;
        for (int k = 0; k < T; k++)
            kvq_hqx_act_init(hw, c->act_buf + c->act_bytes * (size_t)(p * c->b.max_batch + k), &act[k]);
#pragma omp parallel for schedule(static) num_threads(kvq_nthreads(c->b.n_threads))
        for (int64_t i = 0; i < (int64_t)T * tpr; i += tpr) // a token's tiles at a time
            kvq_hqx_prep_tiles(hw, x + (size_t)(i / tpr) * w->cols, &act[i / tpr], 0, tpr, KVQ_HQX_ISA_AUTO);
        kvq_hqx_gemm_pack(hw, act, T, c->gemm + c->gemm_bytes * p);
    }
    int64_t unit_end[3], n_unit = 0;
    for (int p = 0; p < w->n_part; p++) unit_end[p] = n_unit += (w->part[p].rows + 3) / 4;
    const int nthr = kvq_nthreads(c->b.n_threads) < c->gemm_threads ? kvq_nthreads(c->b.n_threads) : c->gemm_threads;
#pragma omp parallel num_threads(nthr)
    {
        const int64_t nth = omp_get_num_threads(), id = omp_get_thread_num();
        void *tb = c->gemm_thread + c->gemm_thread_bytes * id;
        for (int64_t u = n_unit * id / nth, u1 = n_unit * (id + 1) / nth; u < u1;) {
            int p = 0;
            while (u >= unit_end[p]) p++;
            const kvq_hqx *hw = &w->part[p];
            const int64_t g0 = u - (p ? unit_end[p - 1] : 0), n = unit_end[p] - u < u1 - u ? unit_end[p] - u : u1 - u;
            const int64_t r1 = 4 * (g0 + n) < hw->rows ? 4 * (g0 + n) : hw->rows;
            kvq_hqx_gemm_rows(hw, &c->acts[p * c->b.max_batch], T, c->gemm + c->gemm_bytes * p, y + w->row0[p], w->rows,
                              4 * g0, r1, tb);
            u += n;
        }
    }
}

static int gemm_ok(const cpu *c, const kvq_mat *w, int T) {
    static int off = -1; // KVQ_CPU_GEMM=0: the previous paths (for side-by-side measurements)
    if (off < 0) off = getenv("KVQ_CPU_GEMM") && !strcmp(getenv("KVQ_CPU_GEMM"), "0");
    if (off || c->b.exec != KVQ_EXEC_INT8 || T < gemm_min() || !c->gemm ||
        (c->b.prefill_decoded && T >= KVQ_PREFILL_DENSE_MIN))
        return 0;
    for (int p = 0; p < w->n_part; p++)
        if (!kvq_hqx_gemm_ok(&w->part[p])) return 0;
    return 1;
}

static void matmul(kvq_backend *b, float *y, const float *x, const kvq_mat *w, int T) {
    cpu *c = (cpu *)b;
    const int nt = b->n_threads;
    if (w->n_pq) {
        if (b->prefill_decoded && T >= KVQ_PREFILL_DENSE_MIN) // the decoded model's products (kvq-verify)
            for (int p = 0; p < w->n_pq; p++) kvq_pqx_matmul_dense(&w->pq[p], x, T, y + w->row0[p], w->rows, c->dense, nt);
        else kvq_pqx_matmul(w->pq, w->n_pq, w->row0, x, T, y, w->rows, c->pq_lut, KVQ_PQX_ISA_AUTO, nt);
        return;
    }
    if (!w->n_part) {
        kvq_matmul(y, x, w->data, w->dt, T, w->cols, w->rows, c->xperm, nt);
        return;
    }
    if (gemm_ok(c, w, T)) {
        matmul_gemm(c, y, x, w, T);
        return;
    }
    if (T < KVQ_PREFILL_DENSE_MIN) {
        matmul_packed(c, y, x, w, T);
        return;
    }
    for (int p = 0; p < w->n_part; p++) // prefill: the dense kernel on decoded row blocks wins
        kvq_hqx_matmul_dense(&w->part[p], x, T, y + w->row0[p], w->rows, c->dense, nt);
}

static void rmsnorm(kvq_backend *b, float *y, const float *x, const float *w, int rows, int n, float eps) {
    kvq_rmsnorm(y, x, w, rows, n, eps, b->n_threads);
}

static void qkv_split(kvq_backend *b, const float *qkv, const float *bias, float *q, float *k, float *v, int T,
                      int q_dim, int kv_dim) {
    (void)b;
    const int w = q_dim + 2 * kv_dim;
    for (int t = 0; t < T; t++) {
        const float *r = qkv + (size_t)t * w;
        float *o[3] = {q + (size_t)t * q_dim, k + (size_t)t * kv_dim, v + (size_t)t * kv_dim};
        const int n[3] = {q_dim, kv_dim, kv_dim};
        for (int s = 0, off = 0; s < 3; off += n[s], s++) {
            if (bias)
                for (int i = 0; i < n[s]; i++) o[s][i] = r[off + i] + bias[off + i];
            else memcpy(o[s], r + off, sizeof(float) * n[s]);
        }
    }
}

static void rope(kvq_backend *b, float *x, int T, int n_heads, int head_dim, int rot_dim, int pos,
                 const float *inv_freq) {
    const cpu *c = (const cpu *)b;
    if (!c->sq.on) {
        kvq_rope(x, T, n_heads, head_dim, rot_dim, pos, inv_freq, b->n_threads);
        return;
    }
    for (int t = 0; t < T; t++) // each token at its sequence's position
        kvq_rope(x + (size_t)t * n_heads * head_dim, 1, n_heads, head_dim, rot_dim, c->sq.pos[t], inv_freq, b->n_threads);
}

static kvq_status attention_seq(kvq_backend *b, kvq_kvcache *c, int l, const float *q, const float *k, const float *v,
                                float *out, int T, int pos, const kvq_attn_shape *s);

static kvq_status attention(kvq_backend *b, kvq_kvcache *c, int l, const float *q, const float *k, const float *v,
                            float *out, int T, int pos, const kvq_attn_shape *s) {
    const cpu *cb = (const cpu *)b;
    if (!cb->sq.on) return attention_seq(b, c, l, q, k, v, out, T, pos, s);
    const size_t q_dim = (size_t)s->n_heads * s->head_dim, kv_dim = (size_t)s->n_kv_heads * s->head_dim;
    for (int t = 0; t < T; t++) { // several sequences: each token within its own cache
        kvq_status r = attention_seq(b, cb->sq.caches[cb->sq.seq[t]], l, q + t * q_dim, k + t * kv_dim, v + t * kv_dim,
                                     out + t * q_dim, 1, cb->sq.pos[t], s);
        if (r) return r;
    }
    return KVQ_OK;
}

// T tokens of one sequence at [pos, pos + T) of cache c.
static kvq_status attention_seq(kvq_backend *b, kvq_kvcache *c, int l, const float *q, const float *k, const float *v,
                                float *out, int T, int pos, const kvq_attn_shape *s) {
    const int hd = s->head_dim, nkv = s->n_kv_heads, nrep = s->n_heads / nkv;
    const size_t q_dim = (size_t)s->n_heads * hd, kv_dim = (size_t)nkv * hd;
    for (int t = 0; t < T; t++) {
        kvq_status r = c->ops->append(c, l, pos + t, k + (size_t)t * kv_dim, v + (size_t)t * kv_dim);
        if (r) return r;
    }
    kvq_status ar = KVQ_OK;
    if (T > 1 && c->ops->attend_chunk) { // a cache that reads a chunk at once (kvq-verify's codec caches)
        // tasks (KV head, block of tokens): blocks only to give every thread a task, since each
        // block decodes the cache prefix it reads
        const int nth = kvq_nthreads(b->n_threads), nb = nkv >= nth ? 1 : (nth + nkv - 1) / nkv < T ? (nth + nkv - 1) / nkv : T;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nth)
        for (int g = 0; g < nkv; g++)
            for (int j = 0; j < nb; j++) {
                const int t0 = (int)((int64_t)T * j / nb), t1 = (int)((int64_t)T * (j + 1) / nb);
                const size_t o = (size_t)t0 * q_dim + (size_t)g * nrep * hd;
                kvq_status st = c->ops->attend_chunk(c, l, g, q + o, q_dim, nrep, t1 - t0, pos + t0, s->scale, out + o, q_dim);
                if (st) {
#pragma omp atomic write
                    ar = st;
                }
            }
        return ar;
    }
    // one token: the heads in parallel once the context makes them worth a fork
    const int par = T > 1 || (int64_t)(pos + 1) * hd * s->n_heads > 65536;
#pragma omp parallel for collapse(2) schedule(dynamic, T > 1 ? 4 : 1) num_threads(kvq_nthreads(b->n_threads)) if (par)
    for (int t = 0; t < T; t++)
        for (int g = 0; g < nkv; g++) {
            size_t o = (size_t)t * q_dim + (size_t)g * nrep * hd;
            kvq_status st = c->ops->attend(c, l, g, q + o, nrep, pos + t + 1, s->scale, out + o);
            if (st) {
#pragma omp atomic write
                ar = st;
            }
        }
    return ar;
}

// kvq_model_fill_kv: T tokens into c at [pos, pos + T) through its append, nothing attended.
static kvq_status kv_append(kvq_backend *b, kvq_kvcache *c, int l, const float *k, const float *v, int T, int pos,
                            kvq_err *err) {
    const size_t kv_dim = (size_t)b->arch.n_kv_heads * b->arch.head_dim;
    for (int t = 0; t < T; t++) {
        kvq_status r = c->ops->append(c, l, pos + t, k + t * kv_dim, v + t * kv_dim);
        if (r) return kvq_err_set(err, r, "%s", c->err.msg[0] ? c->err.msg : kvq_strerror(r));
    }
    return KVQ_OK;
}

static void silu_mul(kvq_backend *b, float *h, const float *gu, int T, int ffn) {
    kvq_silu_mul_fused(h, gu, T, ffn, b->n_threads);
}

static void add(kvq_backend *b, float *x, const float *y, size_t n) {
    (void)b;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static kvq_status sync(kvq_backend *b, kvq_err *err) { (void)b; (void)err; return KVQ_OK; }
static void step(kvq_backend *b, int T, int pos, int logits) {
    (void)T; (void)pos; (void)logits;
    ((cpu *)b)->sq.on = 0;
}
static void step_seqs(kvq_backend *b, int T, const int *seq, const int *pos, kvq_kvcache *const *caches, int logits) {
    (void)T; (void)logits;
    cpu *c = (cpu *)b;
    c->sq.on = 1; c->sq.seq = seq; c->sq.pos = pos; c->sq.caches = caches;
}

static size_t scratch_bytes(const kvq_backend *b) {
    const cpu *c = (const cpu *)b;
    const size_t B = (size_t)b->max_batch;
    return sizeof(float) * c->xperm_floats + sizeof(float) * c->pq_floats +
           (!c->any_packed && c->dense ? sizeof(float) * ((size_t)KVQ_PQX_DENSE_BLOCK * (size_t)c->widest + B * KVQ_PQX_DENSE_BLOCK) : 0) +
           (c->any_packed ? c->act_bytes * B * (size_t)c->max_part + sizeof(float) * ((size_t)KVQ_HQX_DENSE_BLOCK * (size_t)c->widest +
                                                                 B * KVQ_HQX_DENSE_BLOCK)
                          : 0) +
           (c->gemm ? c->gemm_bytes * (size_t)c->max_part + c->gemm_thread_bytes * (size_t)c->gemm_threads : 0);
}
static size_t kv_bytes(const kvq_backend *b) { (void)b; return 0; }
// The GPU kernel's C reference: the plumbing of kvq-verify's backend scoring runs (and is tested)
// on the host too.
static kvq_status vscore(kvq_backend *b, const float *ref, const float *q, const int32_t *target, int rows, int n,
                         kvq_vscore *out, kvq_err *err) {
    (void)b;
    for (int r = 0; r < rows; r++)
        if (target[r] < 0 || target[r] >= n)
            return kvq_err_set(err, KVQ_ERR_ARG, "verify scores: target %d of row %d outside [0, %d)", target[r], r, n);
    kvq_verify_score_ref(ref, q, target, rows, n, out);
    return KVQ_OK;
}

static const kvq_backend_ops cpu_ops = {
    .name = "cpu", .host = 1, .destroy = destroy, .alloc = alloc, .release = release, .upload = copy,
    .download = copy, .mat_adopt = mat_adopt, .mat_release = mat_release, .step = step, .step_seqs = step_seqs,
    .ready = ready, .matmul = matmul,
    .rmsnorm = rmsnorm, .qkv_split = qkv_split, .rope = rope, .attention = attention, .kv_append = kv_append,
    .silu_mul = silu_mul, .add = add, .sync = sync, .scratch_bytes = scratch_bytes, .kv_bytes = kv_bytes,
    .vscore = vscore,
};

kvq_status kvq_backend_cpu_new(const kvq_model_opts *o, const kvq_arch *a, kvq_backend **out, kvq_err *err) {
    cpu *c = calloc(1, sizeof *c);
    if (!c) return kvq_err_set(err, KVQ_ERR_NOMEM, "out of memory for the CPU backend");
    c->b = (kvq_backend){.ops = &cpu_ops, .exec = o->exec, .prefill_decoded = o->prefill_decoded, .n_threads = o->n_threads, .max_batch = o->max_batch,
                         .max_ctx = o->max_ctx, .arch = *a};
    c->prep_in_team = getenv("KVQ_CPU_PREP_TEAM") && !strcmp(getenv("KVQ_CPU_PREP_TEAM"), "1");
    // KVQ_PQ_LUT_TEAM=0|1: PQ decode tables built by the team (1, default) or before the fork
    const char *lt = getenv("KVQ_PQ_LUT_TEAM");
    if (lt && *lt) {
        if (strcmp(lt, "0") && strcmp(lt, "1")) {
            free(c);
            return kvq_err_set(err, KVQ_ERR_ARG, "KVQ_PQ_LUT_TEAM=%s: expected 0 or 1", lt);
        }
        kvq_pqx_lut_team(*lt == '1');
    }
    // KVQ_HQX_ONE_TOKEN=avx2|vnni: the decode product's body instead of the cpuid rule
    // (kvq_hqx_isa_one_token), for side-by-side measurements
    const char *ot = getenv("KVQ_HQX_ONE_TOKEN");
    if (ot && *ot) {
        if (strcmp(ot, "avx2") && strcmp(ot, "vnni")) {
            free(c);
            return kvq_err_set(err, KVQ_ERR_ARG, "KVQ_HQX_ONE_TOKEN=%s: expected avx2 or vnni", ot);
        }
        kvq_hqx_set_one_token(!strcmp(ot, "avx2") ? KVQ_HQX_ISA_AVX2 : KVQ_HQX_ISA_VNNI);
    }
    *out = &c->b;
    return KVQ_OK;
}
