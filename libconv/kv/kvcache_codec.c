// The runtime KV cache (libconv/kvcache.h ops) on top of any KV codec. Per (layer,
// KV head, K/V): a ring of fp16 tokens not yet encoded (the residual window plus an
// incomplete KIVI key group) and a store of encoded groups with their lengths.
// Boundary protection: K of the first and last layer use the fp16 codec. attend reads the
// packed records (the codecs' score and vsum) and takes its scratch from a pool the cache owns
// (one block per concurrent caller, each sized once).
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cpu/attention.h"
#include "libconv/kv/kvcodec.h"

typedef struct {
    kvq_kvcodec *codec;
    uint8_t *store;    // (max_groups, stride) encoded groups; NULL when xs holds them
    uint32_t *len;     // (max_groups) bytes used by each group
    size_t stride;
    uint16_t *ring;    // (cap, d) fp16 tokens at positions [n_enc, n_tok), slot pos % cap
    float *shadow;     // (max_ctx, d) decoded tokens [0, n_enc) when policy.shadow
    uint8_t *xs;       // (max_ctx, xstride) execution form of the encoded tokens, in place of the
                       // records, for the codecs that have one (HQMQ without outliers, HyperQuant-KV;
                       // not with the shadow): what attend reads. The record lives only while its
                       // token is encoded (its length stays in len, for the bits)
    size_t xstride;
    int n_enc;         // encoded prefix, a multiple of codec->group
} kv_slot;

// The scratch of one attend call, sized once for max_ctx (one allocation). attend may run on
// several threads at once: each caller takes a block from the cache's pool and gives it back.
typedef struct kv_scratch {
    struct kv_scratch *next; // the pool's free list
    float *kk, *vv;          // (max_ctx, d) keys and values as fp32 (positions the codec paths do not cover)
    float *sc;               // (ATT_ROWS, max_ctx) scores, then probabilities, of a block of queries
    float *grp;              // (grp_rows, d) one decoded group, or a block of rounded queries
    const uint8_t **rec;     // (max_ctx) the key records (one per group) the codec's score path reads
    const uint8_t **vrec;    // (max_ctx) the value records its vsum path reads
} kv_scratch;

// Largest record kept only while its token is encoded (execution form in its place); codecs
// with longer records keep them.
#define KVC_REC_MAX 4096

// Queries attended together: the value records are read once per block of this many.
#define ATT_ROWS 8

typedef struct {
    kvq_kvcache base;
    kvq_kvspec spec;
    kvq_kvcache_policy pol;
    int cap;
    int gmax;          // largest codec group (tokens)
    int *n_tok;        // (n_layers)
    kv_slot *slot;     // (n_layers, n_kv_heads, 2)
    pthread_mutex_t pool_lock; // guards pool
    kv_scratch *pool;  // free scratch blocks; they grow to the peak number of concurrent attends
    int sim_q8;        // KVQ_KV_SIM_Q8=1: int keys scored as the GPU's int8 kernel does (q8_round)
    int sim_q8_group;  // dims a q scale covers (KVQ_KV_SIM_Q8_GROUP; head_dim by default)
} kvc;

static kv_slot *slot_at(const kvc *c, int l, int h, int r) {
    return &c->slot[((size_t)l * c->base.n_kv_heads + h) * 2 + r];
}

static void ring_get(const kvc *c, const kv_slot *s, int pos, float *x) {
    const uint16_t *p = s->ring + (size_t)(pos % c->cap) * c->base.head_dim;
    for (int i = 0; i < c->base.head_dim; i++) x[i] = kvq_f16_to_f32(p[i]);
}
static void ring_put(const kvc *c, kv_slot *s, int pos, const float *x) {
    uint16_t *p = s->ring + (size_t)(pos % c->cap) * c->base.head_dim;
    for (int i = 0; i < c->base.head_dim; i++) p[i] = kvq_f32_to_f16(x[i]);
}

// One group's rows as the evaluation caches hold them: keys by score_vec where the codec has
// one (⟨q, k̃⟩ is its score estimator), otherwise decoded. The shadow and attend_chunk's rows.
static void slot_decode(const kv_slot *s, const uint8_t *p, size_t n, float *out) {
    if (s->codec->role == KVQ_KV_K && s->codec->vt->score_vec && s->codec->group == 1) s->codec->vt->score_vec(s->codec, p, out);
    else s->codec->vt->decode(s->codec, p, n, out);
}

// Encodes ready groups: those entirely older than the window.
static kvq_status slot_flush(kvc *c, kv_slot *s, int n_tok) {
    int d = c->base.head_dim, g = s->codec->group, W = c->pol.window;
    float buf[32 * 512];
    uint8_t rec[KVC_REC_MAX]; // one record, when the execution form is kept in its place
    while (n_tok - s->n_enc > W && n_tok - W - s->n_enc >= g) {
        if ((size_t)g * d > sizeof buf / sizeof *buf)
            return kvq_kvcache_fail(&c->base, KVQ_ERR_ARG, "group of %d x %d values exceeds the encode buffer", g, d);
        for (int t = 0; t < g; t++) ring_get(c, s, s->n_enc + t, buf + (size_t)t * d);
        size_t n = 0;
        int gi = s->n_enc / g;
        kvq_err e = {0};
        uint8_t *p = s->xs ? rec : s->store + (size_t)gi * s->stride;
        kvq_status st = s->codec->vt->encode(s->codec, buf, p, &n, &e);
        if (st) return kvq_kvcache_fail(&c->base, st, "%s", e.msg[0] ? e.msg : kvq_strerror(st));
        s->len[gi] = (uint32_t)n;
        if (s->xs) s->codec->vt->xform(s->codec, p, n, s->xs + (size_t)gi * s->xstride);
        if (s->shadow) slot_decode(s, p, n, s->shadow + (size_t)s->n_enc * d);
        s->n_enc += g;
    }
    return KVQ_OK;
}

static void layer_truncate(kvc *c, int l, int pos) {
    kvq_kvcache *base = &c->base;
    int d = base->head_dim;
    if (c->n_tok[l] > pos) c->n_tok[l] = pos;
    for (int h = 0; h < base->n_kv_heads; h++)
        for (int r = 0; r < 2; r++) {
            kv_slot *s = slot_at(c, l, h, r);
            int g = s->codec->group;
            if (pos == 0 && s->codec->vt->reset) s->codec->vt->reset(s->codec);
            if (s->n_enc <= pos) continue;
            int ne = pos / g * g;
            if (ne < pos) { // a group cut in two: its surviving tokens go back to the ring
                float buf[32 * 512];
                int gi = ne / g;
                s->codec->vt->decode(s->codec, s->store + (size_t)gi * s->stride, s->len[gi], buf);
                for (int t = ne; t < pos; t++) ring_put(c, s, t, buf + (size_t)(t - ne) * d);
            }
            s->n_enc = ne;
        }
}

static void kvc_truncate(kvq_kvcache *base, int pos) {
    for (int l = 0; l < base->n_layers; l++) layer_truncate((kvc *)base, l, pos < 0 ? 0 : pos);
}

static kvq_status kvc_append(kvq_kvcache *base, int layer, int pos, const float *k, const float *v) {
    kvc *c = (kvc *)base;
    if (layer < 0 || layer >= base->n_layers || pos < 0 || pos >= base->max_ctx || pos > c->n_tok[layer])
        return kvq_kvcache_fail(base, KVQ_ERR_ARG, "KV cache '%s' layer %d: position %d outside [0, %d) or beyond the %d stored",
                                c->spec.name, layer, pos, base->max_ctx,
                                layer >= 0 && layer < base->n_layers ? c->n_tok[layer] : 0);
    if (pos < c->n_tok[layer]) layer_truncate(c, layer, pos); // rewriting history
    int d = base->head_dim;
    for (int h = 0; h < base->n_kv_heads; h++)
        for (int r = 0; r < 2; r++) {
            kv_slot *s = slot_at(c, layer, h, r);
            ring_put(c, s, pos, (r ? v : k) + (size_t)h * d);
        }
    c->n_tok[layer] = pos + 1;
    for (int h = 0; h < base->n_kv_heads; h++)
        for (int r = 0; r < 2; r++) {
            kvq_status st = slot_flush(c, slot_at(c, layer, h, r), pos + 1);
            if (st) { // name the place and the codec before the cause slot_flush recorded
                char cause[KVQ_ERR_MSG_MAX];
                snprintf(cause, sizeof cause, "%s", base->err.msg);
                return kvq_kvcache_fail(base, st, "KV cache layer %d head %d %s (%s): %s", layer, h, r ? "V" : "K",
                                        slot_at(c, layer, h, r)->codec->vt->name, cause);
            }
        }
    return KVQ_OK;
}

// Rows [0, n) of a slot as fp32 (decoding whole groups as the shadow does, slot_decode; tmp holds
// one group). Never reaches an encoded token of a slot held as execution rows (those always take
// xscore / xvsum).
static void slot_rows(const kvc *c, const kv_slot *s, int n, float *out, float *tmp) {
    int d = c->base.head_dim, g = s->codec->group;
    int ne = s->n_enc < n ? s->n_enc : n;
    if (s->shadow) {
        memcpy(out, s->shadow, sizeof(float) * ne * d);
        for (int t = ne; t < n; t++) ring_get(c, s, t, out + (size_t)t * d);
        return;
    }
    for (int gi = 0; gi * g < ne; gi++) {
        const uint8_t *p = s->store + (size_t)gi * s->stride;
        if (g == 1) slot_decode(s, p, s->len[gi], out + (size_t)gi * d);
        else {
            slot_decode(s, p, s->len[gi], tmp);
            int m = ne - gi * g < g ? ne - gi * g : g;
            memcpy(out + (size_t)gi * g * d, tmp, sizeof(float) * m * d);
        }
    }
    for (int t = ne; t < n; t++) ring_get(c, s, t, out + (size_t)t * d);
}

// ---- attend and its scratch pool

// grp's rows: one decoded group, or a block of queries rounded by q8_round (KVQ_KV_SIM_Q8).
static int grp_rows(const kvc *c) { return c->gmax > ATT_ROWS ? c->gmax : ATT_ROWS; }
static kv_scratch *scratch_new(const kvc *c) {
    const size_t n = (size_t)c->base.max_ctx, d = (size_t)c->base.head_dim;
    const size_t floats = 2 * n * d + ATT_ROWS * n + (size_t)grp_rows(c) * d;
    kv_scratch *w = malloc(sizeof *w + 2 * sizeof(const uint8_t *) * n + sizeof(float) * floats);
    if (!w) return NULL;
    w->next = NULL;
    w->rec = (const uint8_t **)(w + 1);
    w->vrec = w->rec + n;
    w->kk = (float *)(w->vrec + n);
    w->vv = w->kk + n * d;
    w->sc = w->vv + n * d;
    w->grp = w->sc + ATT_ROWS * n;
    return w;
}

// A free block of the pool, or a new one when every block is in use (it joins the pool when
// given back, so blocks are allocated only up to the peak number of concurrent callers).
static kv_scratch *scratch_take(kvc *c) {
    pthread_mutex_lock(&c->pool_lock);
    kv_scratch *w = c->pool;
    if (w) c->pool = w->next;
    pthread_mutex_unlock(&c->pool_lock);
    return w ? w : scratch_new(c);
}

static void scratch_give(kvc *c, kv_scratch *w) {
    pthread_mutex_lock(&c->pool_lock);
    w->next = c->pool;
    c->pool = w;
    pthread_mutex_unlock(&c->pool_lock);
}

// q as the GPU's integer tensor-core kernel takes it for the scores of int keys (KVQ_CUDA_KV_TC_Q8,
// kernels/cuda/kv_tc.h): rounded to int8 per query head — scale max |q| / 127 (1 for a zero q), to
// nearest with ties to even, clamped to ±127 — the products then exact. With KVQ_KV_SIM_Q8=1 the
// encoded int keys are scored with it (attend and attend_chunk; the window's keys keep q): kvq-verify
// measures on the CPU what the rounding costs in KLD on any model, also on head shapes the GPU
// kernel is not built for, and test_cuda_model holds the GPU to it (docs/KV.md).
// KVQ_KV_SIM_Q8_GROUP=g (measurements, session 23): one scale per g consecutive dims instead of per head — what a
// GPU cache layout regrouped so that a k-step's 32 dims are consecutive would allow (today's kernel interleaves them:
// docs/KV.md); g divides head_dim.
static void q8_round(const float *q, int d, int g, float *qr) {
    for (int j0 = 0; j0 < d; j0 += g) {
        float m = 0.0f;
        for (int j = j0; j < j0 + g; j++) m = fmaxf(m, fabsf(q[j]));
        const float s = m > 0.0f ? m / 127.0f : 1.0f, inv = 1.0f / s;
        for (int j = j0; j < j0 + g; j++) {
            const float v = rintf(q[j] * inv);
            qr[j] = (v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v) * s;
        }
    }
}
static int sim_q8(const kvc *c, const kv_slot *sk) { return c->sim_q8 && !strcmp(sk->codec->vt->name, "int"); }

// ATT_ROWS queries at a time. Keys: scored from their records when the codec can (score, each
// record read once for the block), the rest (window, fp16) from fp32 rows. Values: summed from
// their records when the codec can (vsum, likewise), plus the fp16 window's rows; otherwise
// decoded to rows (the shadow, fp16).
static kvq_status kvc_attend(kvq_kvcache *base, int layer, int head, const float *q, int n_q, int n_ctx,
                             float scale, float *out) {
    kvc *c = (kvc *)base;
    int d = base->head_dim;
    const kv_slot *sk = slot_at(c, layer, head, 0), *sv = slot_at(c, layer, head, 1);
    kv_scratch *w = scratch_take(c);
    if (!w)
        return kvq_kvcache_fail(base, KVQ_ERR_NOMEM, "KV cache layer %d head %d (%s): out of memory attending to %d positions",
                                layer, head, sk->codec->vt->name, n_ctx);
    float *kk = w->kk, *vv = w->vv;
    const int n = base->max_ctx, gk = sk->codec->group;
    int ne = sk->n_enc < n_ctx ? sk->n_enc : n_ctx;
    int use_score = !sk->shadow && (sk->codec->vt->score || sk->xs) && ne > 0;
    if (use_score) { // keys [0, ne) are scored from their records (or execution form), [ne, n_ctx) from the ring
        if (!sk->xs)
            for (int g = 0; g * gk < ne; g++) w->rec[g] = sk->store + (size_t)g * sk->stride;
        for (int t = ne; t < n_ctx; t++) ring_get(c, sk, t, kk + (size_t)t * d);
    } else {
        slot_rows(c, sk, n_ctx, kk, w->grp);
        ne = 0;
    }
    int nv = sv->n_enc < n_ctx ? sv->n_enc : n_ctx;
    const int use_vsum = !sv->shadow && (sv->codec->vt->vsum || sv->xs) && sv->codec->group == 1 && nv > 0;
    if (use_vsum) { // values [0, nv) are summed from their records (or execution form), [nv, n_ctx) from the ring
        if (!sv->xs)
            for (int t = 0; t < nv; t++) w->vrec[t] = sv->store + (size_t)t * sv->stride;
        for (int t = nv; t < n_ctx; t++) ring_get(c, sv, t, vv + (size_t)t * d);
    } else {
        slot_rows(c, sv, n_ctx, vv, w->grp);
        nv = 0;
    }
    const int sim = use_score && sim_q8(c, sk);
    float *qr = w->grp; // (grp_rows: a block of queries)
    for (int i0 = 0; i0 < n_q; i0 += ATT_ROWS) {
        const int nb = n_q - i0 < ATT_ROWS ? n_q - i0 : ATT_ROWS;
        const float *qs = q + (size_t)i0 * d; // the encoded keys' scores take q8_round's q
        if (sim)
            for (int i = 0; i < nb; i++) q8_round(q + (size_t)(i0 + i) * d, d, c->sim_q8_group, qr + (size_t)i * d);
        if (sim) qs = qr;
        if (use_score && sk->xs) sk->codec->vt->xscore(sk->codec, qs, nb, sk->xs, ne, w->sc, n);
        else if (use_score) sk->codec->vt->score(sk->codec, qs, nb, w->rec, sk->len, ne, w->sc, n);
        for (int i = 0; i < nb; i++) {
            const float *qi = q + (size_t)(i0 + i) * d;
            float *sc = w->sc + (size_t)i * n, *oi = out + (size_t)(i0 + i) * d;
            if (use_vsum) kvq_attention_probs(qi, kk, n_ctx, ne, d, scale, sc);
            else kvq_attention_rows(oi, qi, kk, vv, n_ctx, ne, d, scale, sc); // scores [ne, n_ctx), softmax, ·V
        }
        if (!use_vsum) continue;
        float *ob = out + (size_t)i0 * d;
        if (sv->xs) sv->codec->vt->xvsum(sv->codec, w->sc, n, nb, sv->xs, nv, ob);
        else sv->codec->vt->vsum(sv->codec, w->sc, n, nb, w->vrec, sv->len, nv, ob);
        for (int i = 0; i < nb; i++)
            for (int t = nv; t < n_ctx; t++) {
                const float p = w->sc[(size_t)i * n + t], *v = vv + (size_t)t * d;
                for (int j = 0; j < d; j++) ob[(size_t)i * d + j] += p * v[j];
            }
    }
    scratch_give(c, w);
    return KVQ_OK;
}

// T query tokens at [pos, pos + T) (policy.chunks, kvq-verify): the slot's rows [0, pos + T) —
// encoded tokens decoded once for the whole chunk, as the shadow holds them, the rest from the
// ring — go into this call's scratch, and every query attends them with kvq_attention_rows, as
// the shadow path does: the same rows, the same kernel, so the shadow's results bit for bit. The
// cache stays packed; the decoded rows live only in the scratch (one block per concurrent caller).
static kvq_status kvc_attend_chunk(kvq_kvcache *base, int layer, int head, const float *q, size_t q_stride, int n_q,
                                   int T, int pos, float scale, float *out, size_t out_stride) {
    kvc *c = (kvc *)base;
    const int d = base->head_dim, n = pos + T;
    const kv_slot *sk = slot_at(c, layer, head, 0), *sv = slot_at(c, layer, head, 1);
    if (pos < 0 || T < 1 || n > c->n_tok[layer])
        return kvq_kvcache_fail(base, KVQ_ERR_ARG, "KV cache layer %d head %d (%s): chunk [%d, %d) beyond the %d tokens stored",
                                layer, head, sk->codec->vt->name, pos, n, c->n_tok[layer]);
    if (sk->xs || sv->xs) { // execution rows have no decoder (not made with policy.chunks): token by token
        for (int t = 0; t < T; t++) {
            kvq_status st = kvc_attend(base, layer, head, q + (size_t)t * q_stride, n_q, pos + t + 1, scale, out + (size_t)t * out_stride);
            if (st) return st;
        }
        return KVQ_OK;
    }
    kv_scratch *w = scratch_take(c);
    if (!w)
        return kvq_kvcache_fail(base, KVQ_ERR_NOMEM, "KV cache layer %d head %d (%s): out of memory attending to %d positions",
                                layer, head, sk->codec->vt->name, n);
    slot_rows(c, sk, n, w->kk, w->grp);
    slot_rows(c, sv, n, w->vv, w->grp);
    const int sim = sim_q8(c, sk);
    float *qr = w->grp; // (free again: q8_round's)
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n_q; i++) {
            const float *qi = q + (size_t)t * q_stride + (size_t)i * d;
            const int ne = sim ? (sk->n_enc < pos + t + 1 ? sk->n_enc : pos + t + 1) : 0; // the encoded keys it sees
            if (ne) q8_round(qi, d, c->sim_q8_group, qr);
            for (int u = 0; u < ne; u++) { // their scores with the rounded q (then the window's with q)
                float a = 0.0f;
                for (int j = 0; j < d; j++) a += qr[j] * w->kk[(size_t)u * d + j];
                w->sc[u] = a;
            }
            kvq_attention_rows(out + (size_t)t * out_stride + (size_t)i * d, qi, w->kk, w->vv, pos + t + 1, ne, d, scale, w->sc);
        }
    scratch_give(c, w);
    return KVQ_OK;
}

static double kvc_bits(const kvq_kvcache *base) {
    const kvc *c = (const kvc *)base;
    double bits = 0, elems = 0;
    for (int l = 0; l < base->n_layers; l++)
        for (int h = 0; h < base->n_kv_heads; h++)
            for (int r = 0; r < 2; r++) {
                const kv_slot *s = slot_at(c, l, h, r);
                int g = s->codec->group;
                for (int gi = 0; gi < s->n_enc / g; gi++)
                    bits += 8.0 * s->len[gi] + (s->codec->fixed ? 0 : KVQ_KV_LEN_BITS);
                bits += 16.0 * (c->n_tok[l] - s->n_enc) * base->head_dim;
                elems += (double)c->n_tok[l] * base->head_dim;
            }
    if (elems == 0) return kvq_kvcache_codec_formula_bits(base, base->max_ctx);
    return bits / elems;
}

double kvq_kvcache_codec_formula_bits(const kvq_kvcache *base, int n_ctx) {
    const kvc *c = (const kvc *)base;
    double bits = 0;
    int n = 0;
    for (int l = 0; l < base->n_layers; l++)
        for (int r = 0; r < 2; r++) {
            const kv_slot *s = slot_at(c, l, 0, r);
            int g = s->codec->group, W = c->pol.window;
            int ne = n_ctx > W ? (n_ctx - W) / g * g : 0;
            // fixed-size codecs: the whole bytes each group is stored in (what the cache holds,
            // the formula rounded up per token); variable-length ones: the formula + the length field
            double cb = s->codec->fixed ? 8.0 * (double)s->codec->vt->max_bytes(s->codec) / ((double)g * base->head_dim)
                                        : s->codec->vt->bits_formula(s->codec) + (double)KVQ_KV_LEN_BITS / (g * base->head_dim);
            bits += (ne * cb + (n_ctx - ne) * 16.0) / n_ctx;
            n++;
        }
    return bits / n;
}

static void kvc_free(kvq_kvcache *base) {
    kvc *c = (kvc *)base;
    if (!c) return;
    if (c->slot)
        for (size_t i = 0; i < (size_t)base->n_layers * base->n_kv_heads * 2; i++) {
            kvq_kvcodec_free(c->slot[i].codec);
            free(c->slot[i].store), free(c->slot[i].len), free(c->slot[i].ring), free(c->slot[i].shadow), free(c->slot[i].xs);
        }
    for (kv_scratch *w = c->pool, *nx; w; w = nx) nx = w->next, free(w); // no attend is in flight
    pthread_mutex_destroy(&c->pool_lock);
    free(c->slot), free(c->n_tok), free(c);
}

static size_t kvc_exec_bytes(const kvq_kvcache *base) {
    const kvc *c = (const kvc *)base;
    size_t b = 0;
    for (size_t i = 0; i < (size_t)base->n_layers * base->n_kv_heads * 2; i++)
        if (c->slot[i].xs) b += c->slot[i].xstride * (size_t)base->max_ctx;
    return b;
}

static size_t kvc_held_bytes(const kvq_kvcache *base) {
    const kvc *c = (const kvc *)base;
    const size_t d = (size_t)base->head_dim, n = (size_t)base->max_ctx;
    size_t b = 0;
    for (size_t i = 0; i < (size_t)base->n_layers * base->n_kv_heads * 2; i++) {
        const kv_slot *s = &c->slot[i];
        const size_t ng = (n + s->codec->group - 1) / s->codec->group;
        b += (s->store ? s->stride * ng : 0) + sizeof(uint32_t) * ng + sizeof(uint16_t) * c->cap * d +
             (s->xs ? s->xstride * n : 0) + (s->shadow ? sizeof(float) * ng * s->codec->group * d : 0);
    }
    pthread_mutex_lock((pthread_mutex_t *)&c->pool_lock); // (the lock is the cache's, not its contents)
    for (const kv_scratch *w = c->pool; w; w = w->next)
        b += 2 * sizeof(const uint8_t *) * n + sizeof(float) * (2 * n * d + ATT_ROWS * n + (size_t)grp_rows(c) * d);
    pthread_mutex_unlock((pthread_mutex_t *)&c->pool_lock);
    return b;
}

// Two tables: attend_chunk only where the policy asks for it (kvq-run's prefill keeps the
// codecs' score/vsum paths token by token).
static const kvq_kvcache_ops kvc_ops = {kvc_append, kvc_attend, kvc_truncate, kvc_bits, kvc_free, kvc_exec_bytes,
                                        NULL, kvc_held_bytes};
static const kvq_kvcache_ops kvc_ops_chunks = {kvc_append, kvc_attend, kvc_truncate, kvc_bits, kvc_free, kvc_exec_bytes,
                                               kvc_attend_chunk, kvc_held_bytes};

static int is_codec_cache(const kvq_kvcache *base) { return base->ops == &kvc_ops || base->ops == &kvc_ops_chunks; }

const kvq_kvcodec *kvq_kvcache_codec_state(const kvq_kvcache *base, int layer, int head, int role) {
    if (!is_codec_cache(base)) return NULL;
    return slot_at((const kvc *)base, layer, head, role)->codec;
}

const kvq_kvcache_policy *kvq_kvcache_codec_policy(const kvq_kvcache *base) {
    return is_codec_cache(base) ? &((const kvc *)base)->pol : NULL;
}

// stored: every state's tables will be replaced by stored ones (kvq_kvcache_codec_load), so
// nothing is trained (kvq_kvcodec_new_stored).
static kvq_status cache_new(const char *spec, int n_layers, int n_kv_heads, int head_dim, int max_ctx,
                            const kvq_kvcache_policy *pol, int stored, kvq_kvcache **out, kvq_err *err) {
    *out = NULL;
    kvq_kvspec sp, fp;
    kvq_status st = kvq_kvspec_parse(spec, &sp, err);
    if (st) return st;
    kvq_kvspec_parse("fp16", &fp, NULL);
    if (n_layers < 1 || n_kv_heads < 1 || max_ctx < 1 || pol->window < 0 || head_dim > 512)
        return kvq_err_set(err, KVQ_ERR_ARG, "kv cache '%s': bad shape (layers %d, heads %d, head_dim %d, ctx %d, window %d)",
                           spec, n_layers, n_kv_heads, head_dim, max_ctx, pol->window);
    kvc *c = calloc(1, sizeof *c);
    if (!c) return kvq_err_set(err, KVQ_ERR_NOMEM, "kv cache: out of memory");
    c->base = (kvq_kvcache){pol->chunks && !pol->shadow ? &kvc_ops_chunks : &kvc_ops, n_layers, n_kv_heads, head_dim, max_ctx, {0}};
    c->spec = sp;
    c->pol = *pol;
    if (pol->shadow) c->pol.chunks = 0;
    pthread_mutex_init(&c->pool_lock, NULL);
    c->n_tok = calloc(n_layers, sizeof(int));
    c->slot = calloc((size_t)n_layers * n_kv_heads * 2, sizeof(kv_slot));
    if (!c->n_tok || !c->slot) {
        kvc_free(&c->base);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "kv cache: out of memory");
    }
    int gmax = 1;
    for (int l = 0; l < n_layers; l++)
        for (int h = 0; h < n_kv_heads; h++)
            for (int r = 0; r < 2; r++) {
                kv_slot *s = slot_at(c, l, h, r);
                int bnd = pol->boundary && r == KVQ_KV_K && (l == 0 || l == n_layers - 1);
                st = (stored ? kvq_kvcodec_new_stored : kvq_kvcodec_new)(bnd ? &fp : &sp, head_dim, r,
                                                                               kvq_kv_seed(pol->seed, l, h, r), &s->codec, err);
                if (st) {
                    kvq_err_prefix(err, "kv cache layer %d head %d", l, h);
                    kvc_free(&c->base);
                    return st;
                }
                if (s->codec->group > gmax) gmax = s->codec->group;
            }
    c->cap = pol->window + gmax;
    c->gmax = gmax;
    // KVQ_KV_EXEC=0 (measurements, docs/KV.md): records and their score/vsum paths, no execution rows
    const int exec = !(getenv("KVQ_KV_EXEC") && !strcmp(getenv("KVQ_KV_EXEC"), "0"));
    const char *sq8 = getenv("KVQ_KV_SIM_Q8");
    if (sq8 && strcmp(sq8, "0") && strcmp(sq8, "1")) {
        kvc_free(&c->base);
        return kvq_err_set(err, KVQ_ERR_ARG, "KVQ_KV_SIM_Q8='%.16s': expected 0 or 1", sq8);
    }
    c->sim_q8 = sq8 && !strcmp(sq8, "1");
    const char *sg = getenv("KVQ_KV_SIM_Q8_GROUP");
    char *end = NULL;
    const long g = sg && *sg ? strtol(sg, &end, 10) : head_dim;
    if (sg && (!*sg || *end || g < 1 || g > head_dim || head_dim % g)) {
        kvc_free(&c->base);
        return kvq_err_set(err, KVQ_ERR_ARG, "KVQ_KV_SIM_Q8_GROUP='%.16s': expected a divisor of head_dim %d", sg, head_dim);
    }
    c->sim_q8_group = (int)g;
    for (size_t i = 0; i < (size_t)n_layers * n_kv_heads * 2; i++) {
        kv_slot *s = &c->slot[i];
        int ng = (max_ctx + s->codec->group - 1) / s->codec->group;
        s->stride = s->codec->vt->max_bytes(s->codec);
        s->xstride = exec && !pol->shadow && !pol->chunks && s->codec->group == 1 && s->stride <= KVC_REC_MAX ? kvq_kvcodec_xbytes(s->codec) : 0;
        if (s->xstride) s->xs = malloc(s->xstride * (size_t)max_ctx);
        else s->store = malloc(s->stride * ng);
        s->len = calloc(ng, sizeof(uint32_t));
        s->ring = malloc(sizeof(uint16_t) * c->cap * head_dim);
        if (pol->shadow) s->shadow = malloc(sizeof(float) * (size_t)ng * s->codec->group * head_dim);
        if ((!s->store && !s->xs) || !s->len || !s->ring || (pol->shadow && !s->shadow) || (s->xstride && !s->xs)) {
            kvc_free(&c->base);
            return kvq_err_set(err, KVQ_ERR_NOMEM, "kv cache '%s': out of memory for %d tokens", spec, max_ctx);
        }
    }
    *out = &c->base;
    return KVQ_OK;
}

// ---- manifest section ----

kvq_status kvq_kvcache_codec_save(const kvq_kvcache *base, int n_ctx, json_t **section, float **blob,
                                  size_t *blob_floats, kvq_err *err) {
    *section = NULL, *blob = NULL, *blob_floats = 0;
    if (!is_codec_cache(base)) return kvq_err_set(err, KVQ_ERR_ARG, "kv save: not a codec cache");
    const kvc *c = (const kvc *)base;
    char spec[128], seed[32];
    kvq_kvspec_format(&c->spec, spec, sizeof spec);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->pol.seed);
    double bits = kvq_kvcache_codec_formula_bits(base, n_ctx);
    json_t *states = json_array(), *sec = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f}", "spec", spec,
                                                    "n_layers", base->n_layers, "n_kv_heads", base->n_kv_heads,
                                                    "head_dim", base->head_dim, "window", c->pol.window, "boundary",
                                                    c->pol.boundary, "seed", seed, "bits_per_element", bits,
                                                    "bytes_per_token", bits * 2 * base->n_layers * base->n_kv_heads * base->head_dim / 8);
    size_t total = 0;
    for (size_t i = 0; i < (size_t)base->n_layers * base->n_kv_heads * 2; i++) {
        kvq_kvtable t[8];
        int nt = c->slot[i].codec->vt->tables ? c->slot[i].codec->vt->tables(c->slot[i].codec, t) : 0;
        for (int k = 0; k < nt; k++) total += t[k].count;
    }
    float *b = malloc(sizeof(float) * (total ? total : 1));
    if (!states || !sec || !b) {
        json_decref(states), json_decref(sec), free(b);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "kv save: out of memory");
    }
    size_t off = 0;
    for (int l = 0; l < base->n_layers; l++)
        for (int h = 0; h < base->n_kv_heads; h++)
            for (int r = 0; r < 2; r++) {
                const kvq_kvcodec *cd = slot_at(c, l, h, r)->codec;
                json_t *params;
                kvq_blob dummy[8];
                int nb = 0;
                kvq_status st = kvq_kvcodec_save(cd, &params, dummy, 8, &nb, err);
                if (st) { json_decref(states), json_decref(sec), free(b); return st; }
                for (int k = 0; k < nb; k++) free(dummy[k].data);
                kvq_kvtable t[8];
                int nt = cd->vt->tables ? cd->vt->tables(cd, t) : 0;
                json_t *tj = json_array();
                for (int k = 0; k < nt; k++) {
                    memcpy(b + off, t[k].data, sizeof(float) * t[k].count);
                    json_array_append_new(tj, json_pack("{s:s, s:I, s:I}", "name", t[k].name, "offset", (json_int_t)off,
                                                        "count", (json_int_t)t[k].count));
                    off += t[k].count;
                }
                json_array_append_new(states, json_pack("{s:i, s:i, s:s, s:o, s:o}", "layer", l, "head", h, "role",
                                                        r ? "V" : "K", "params", params, "tables", tj));
            }
    json_object_set_new(sec, "states", states);
    *section = sec, *blob = b, *blob_floats = total;
    return KVQ_OK;
}

kvq_status kvq_kvcache_codec_new(const char *spec, int n_layers, int n_kv_heads, int head_dim, int max_ctx,
                                 const kvq_kvcache_policy *pol, kvq_kvcache **out, kvq_err *err) {
    return cache_new(spec, n_layers, n_kv_heads, head_dim, max_ctx, pol, 0, out, err);
}

kvq_status kvq_kvcache_codec_load(const json_t *sec, const float *blob, size_t nf, int max_ctx, int eval,
                                  kvq_kvcache **out, kvq_err *err) {
    *out = NULL;
    const char *spec, *seed;
    int L, H, D, W, B;
    json_t *states;
    if (json_unpack((json_t *)sec, "{s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:o}", "spec", &spec, "n_layers", &L, "n_kv_heads",
                    &H, "head_dim", &D, "window", &W, "boundary", &B, "seed", &seed, "states", &states) ||
        !json_is_array(states))
        return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest kv section: missing spec/shape/window/boundary/seed/states");
    char *e;
    unsigned long long sd = strtoull(seed, &e, 10);
    if (*e) return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest kv section: bad seed '%s'", seed);
    // The shape first: a state per (layer, head, role) before anything is built for them.
    if (L < 1 || H < 1 || L > 1024 || H > 1024 || json_array_size(states) != (size_t)L * H * 2)
        return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest kv section: %zu states for %d layers × %d heads × K/V",
                           json_array_size(states), L, H);
    kvq_kvcache_policy pol = {W, B, sd, eval == KVQ_KV_EVAL_SHADOW, eval == KVQ_KV_EVAL_CHUNKS};
    kvq_kvcache *cache;
    kvq_status st = cache_new(spec, L, H, D, max_ctx, &pol, 1, &cache, err); // every table is replaced below

    if (st) return st;
    kvc *c = (kvc *)cache;
    uint8_t *seen = calloc((size_t)L * H * 2, 1);
    if (!seen) {
        cache->ops->free(cache);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "kv section: out of memory");
    }
    size_t i;
    json_t *sj;
    json_array_foreach(states, i, sj) {
        int l, h;
        const char *role, *pseed;
        json_t *tj, *params;
        if (json_unpack(sj, "{s:i, s:i, s:s, s:o, s:o}", "layer", &l, "head", &h, "role", &role, "params", &params, "tables", &tj) ||
            l < 0 || l >= L || h < 0 || h >= H || (strcmp(role, "K") && strcmp(role, "V")) ||
            json_unpack(params, "{s:s}", "seed", &pseed) || seen[((size_t)l * H + h) * 2 + (role[0] == 'V')]++) {
            free(seen);
            cache->ops->free(cache);
            return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest kv state %zu: bad or repeated layer/head/role, or bad params", i);
        }
        kvq_kvcodec *cd = slot_at(c, l, h, strcmp(role, "V") ? 0 : 1)->codec;
        char want[128];
        kvq_kvspec_format(&cd->spec, want, sizeof want);
        const char *pspec = json_string_value(json_object_get(params, "spec")),
                   *prole = json_string_value(json_object_get(params, "role"));
        const json_t *pd = json_object_get(params, "head_dim");
        if (!pspec || strcmp(pspec, want) || !prole || strcmp(prole, role) || !json_is_integer(pd) ||
            json_integer_value(pd) != D) {
            free(seen);
            cache->ops->free(cache);
            return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest kv state layer %d head %d %s: params (spec '%s', role '%s', "
                               "head_dim %" JSON_INTEGER_FORMAT ") are not the section's ('%s', %s, %d)", l, h, role,
                               pspec ? pspec : "?", prole ? prole : "?", json_integer_value(pd), want, role, D);
        }
        if (strtoull(pseed, NULL, 10) != cd->seed) {
            free(seen);
            cache->ops->free(cache);
            return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest kv state layer %d head %d %s: seed %s does not match the section seed", l, h, role, pseed);
        }
        kvq_kvtable t[8];
        int nt = cd->vt->tables ? cd->vt->tables(cd, t) : 0;
        if ((int)json_array_size(tj) != nt) {
            free(seen);
            cache->ops->free(cache);
            return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest kv state layer %d head %d %s: %zu tables, expected %d", l, h, role, json_array_size(tj), nt);
        }
        for (int k = 0; k < nt; k++) {
            const char *name;
            json_int_t off, cnt;
            if (json_unpack(json_array_get(tj, k), "{s:s, s:I, s:I}", "name", &name, "offset", &off, "count", &cnt) ||
                strcmp(name, t[k].name) || cnt != (json_int_t)t[k].count || off < 0 || (size_t)off > nf || (size_t)cnt > nf - (size_t)off) {
                free(seen);
                cache->ops->free(cache);
                return kvq_err_set(err, KVQ_ERR_FORMAT, "manifest kv state layer %d head %d %s: table %d ('%s') does not match the codec or lies outside the %zu-float blob", l, h, role, k, t[k].name, nf);
            }
            memcpy(t[k].data, blob + off, sizeof(float) * cnt);
        }
        if ((st = kvq_kvcodec_check_tables(cd, err))) {
            kvq_err_prefix(err, "manifest kv state layer %d head %d %s", l, h, role);
            free(seen);
            cache->ops->free(cache);
            return st;
        }
        if (cd->vt->refresh) cd->vt->refresh(cd);
    }
    free(seen); // (the count matched and none repeated: every state was replaced)
    *out = cache;
    return KVQ_OK;
}
