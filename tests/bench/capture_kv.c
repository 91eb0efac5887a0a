// K/V matrices from kvq's own runtime (issue 4's K/V benchmark): a recording cache
// wraps the default fp32 cache through libconv/kv/kvcache.h, the model runs the first
// `windows` non-overlapping 512-token windows of a text (cards' protocol, no BOS), and
// every appended K (post-RoPE, as cached) and V is kept per (layer, KV head) as an
// (n tokens × head_dim) matrix. Then MSE at compression ratios 4 and 8 for the offline
// matrix codecs (QET, Vanilla QET, PQ; ratio against fp16 and, for reference, fp32) and
// the online KV codecs (per-token encode/decode). Prints markdown; asserts nothing.
// Usage: build/bench/capture_kv MODEL TEXT [windows=4] [dump.f32] [threads]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "libconv/eval/eval.h"
#include "libconv/kv/kvcache_default.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/runtime/model.h"
#include "libconv/codec/qet/qet.h"
#include "libconv/tokenizer/tokenizer.h"

#define CTX 512

typedef struct {
    kvq_kvcache base;       // must be first: the model sees this
    kvq_kvcache *inner;     // the default cache doing the real work
    float *k, *v;           // [layer][head][cap][d]
    int cap, offset;        // rows per matrix; rows of earlier windows
    int n_rows;             // rows filled (max over appends)
} rec_cache;

static kvq_status rec_append(kvq_kvcache *c, int layer, int pos, const float *k, const float *v) {
    rec_cache *r = (rec_cache *)c;
    int row = r->offset + pos, H = c->n_kv_heads, d = c->head_dim;
    if (row < r->cap)
        for (int h = 0; h < H; h++) {
            size_t o = (((size_t)layer * H + h) * r->cap + row) * d;
            memcpy(r->k + o, k + (size_t)h * d, sizeof(float) * d);
            memcpy(r->v + o, v + (size_t)h * d, sizeof(float) * d);
        }
    if (row + 1 > r->n_rows) r->n_rows = row + 1;
    return r->inner->ops->append(r->inner, layer, pos, k, v);
}
static kvq_status rec_attend(kvq_kvcache *c, int layer, int kv_head, const float *q, int n_q, int n_ctx,
                             float scale, float *out) {
    rec_cache *r = (rec_cache *)c;
    return r->inner->ops->attend(r->inner, layer, kv_head, q, n_q, n_ctx, scale, out);
}
static void rec_truncate(kvq_kvcache *c, int pos) {
    rec_cache *r = (rec_cache *)c;
    r->inner->ops->truncate(r->inner, pos);
}
static double rec_bits(const kvq_kvcache *c) {
    const rec_cache *r = (const rec_cache *)c;
    return r->inner->ops->bits_per_element(r->inner);
}
static void rec_free(kvq_kvcache *c) {
    rec_cache *r = (rec_cache *)c;
    r->inner->ops->free(r->inner);
    free(r->k);
    free(r->v);
    free(r);
}
static const kvq_kvcache_ops rec_ops = {rec_append, rec_attend, rec_truncate, rec_bits, rec_free, NULL, NULL, NULL};

static void die(const char *what, const kvq_err *e) {
    fprintf(stderr, "capture_kv: %s: %s\n", what, e ? e->msg : "");
    exit(2);
}

// mean squared error and mean square of x over n elements
static void err_acc(const float *x, const float *y, size_t n, double *se, double *ss) {
    for (size_t i = 0; i < n; i++) {
        double t = (double)x[i] - y[i];
        *se += t * t;
        *ss += (double)x[i] * x[i];
    }
}

typedef struct { double se, ss, bits; size_t n; int fail; } acc;

// offline matrix codec on one matrix: kind 0 QET, 1 Vanilla, 2 PQ
static void offline(int kind, double ratio, kvq_dtype src, const float *x, int n, int d, float *y,
                    acc *a) {
    kvq_qet_config c = kind == 0 ? kvq_qet_config_default(ratio)
                     : kind == 1 ? kvq_qet_config_vanilla(ratio) : kvq_qet_config_pq(ratio);
    kvq_encoded e;
    kvq_err err = {0};
    if (kvq_qet_encode(&c, src, x, n, d, 1, 0, &e, &err)) {
        if (!a->fail) fprintf(stderr, "  (%s)\n", err.msg);
        a->fail = 1;
        return;
    }
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
    if (kvq_qet_decode(e.params, v, e.n_blob, n, d, y, &err)) die("qet decode", &err);
    a->bits += kvq_encoded_bpw(&e, (int64_t)n * d) * n * d;
    kvq_encoded_free(&e);
    err_acc(x, y, (size_t)n * d, &a->se, &a->ss);
    a->n += (size_t)n * d;
}

static void online(const char *spec, int role, uint64_t seed, const float *x, int n, int d, float *y,
                   acc *a) {
    kvq_kvspec s;
    kvq_err err = {0};
    kvq_kvcodec *c = NULL;
    if (kvq_kvspec_parse(spec, &s, &err) || kvq_kvcodec_new(&s, d, role, seed, &c, &err)) {
        if (!a->fail) fprintf(stderr, "  (%s: %s)\n", spec, err.msg);
        a->fail = 1;
        return;
    }
    int m = n / c->group * c->group;
    size_t cap = kvq_kvcodec_bound(c, m), *off = malloc(sizeof(size_t) * (m / c->group + 1));
    uint8_t *b = calloc(cap, 1);
    if (kvq_kvcodec_encode(c, x, m, b, cap, off, &err)) die(spec, &err);
    kvq_kvcodec_decode(c, b, off, m, y);
    double bits = kvq_kvcodec_bits_stored(c, off, m);
    if (!c->fixed) bits += (double)KVQ_KV_LEN_BITS * (m / c->group) / ((double)m * d);
    a->bits += bits * m * d;
    err_acc(x, y, (size_t)m * d, &a->se, &a->ss);
    a->n += (size_t)m * d;
    free(off);
    free(b);
    kvq_kvcodec_free(c);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: capture_kv MODEL TEXT [windows=4] [dump.f32] [threads]\n");
        return 2;
    }
    int windows = argc > 3 ? atoi(argv[3]) : 4;
    const char *dump = argc > 4 && strcmp(argv[4], "-") ? argv[4] : NULL;
    int threads = argc > 5 ? atoi(argv[5]) : 2;
    kvq_err err = {0};
    kvq_model *m = NULL;
    kvq_model_opts o = kvq_model_opts_default();
    o.n_threads = threads;
    if (kvq_model_open(argv[1], &o, &m, &err)) die(argv[1], &err);
    kvq_kvcache *def = kvq_model_kvcache(m);
    int L = def->n_layers, H = def->n_kv_heads, d = def->head_dim;
    kvq_tokenizer *tok = NULL;
    if (kvq_model_tokenizer(m, &tok, &err)) die("tokenizer", &err);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (kvq_eval_tokenize_file(tok, argv[2], &ids, &n_ids, &err)) die(argv[2], &err);
    if (n_ids < (size_t)windows * CTX) windows = (int)(n_ids / CTX);
    int N = windows * CTX;

    rec_cache *r = calloc(1, sizeof *r);
    r->base = (kvq_kvcache){&rec_ops, L, H, d, CTX, {0}};
    if (kvq_kvcache_default_new(L, H, d, CTX, 0, &r->inner, &err)) die("kv cache", &err);
    r->cap = N;
    r->k = malloc(sizeof(float) * (size_t)L * H * N * d);
    r->v = malloc(sizeof(float) * (size_t)L * H * N * d);
    if (!r->inner || !r->k || !r->v) die("out of memory", NULL);
    if (kvq_model_set_kvcache(m, &r->base, &err)) die("set_kvcache", &err);
    double t0 = omp_get_wtime();
    for (int w = 0; w < windows; w++) {
        r->offset = w * CTX;
        if (kvq_model_forward(m, ids + (size_t)w * CTX, CTX, 0, NULL, 0, &err)) die("forward", &err);
    }
    printf("# K/V capture: %s, %s, %d windows x %d tokens (no BOS, fp32 runtime, K post-RoPE) "
           "= %d rows per matrix; %d layers x %d KV heads x head_dim %d; %.1f s\n\n",
           argv[1], argv[2], windows, CTX, r->n_rows, L, H, d, omp_get_wtime() - t0);
    if (dump) {
        FILE *f = fopen(dump, "wb");
        int hdr[4] = {L, H, N, d};
        if (!f || fwrite(hdr, sizeof hdr, 1, f) != 1 ||
            fwrite(r->k, sizeof(float), (size_t)L * H * N * d, f) != (size_t)L * H * N * d ||
            fwrite(r->v, sizeof(float), (size_t)L * H * N * d, f) != (size_t)L * H * N * d || fclose(f))
            die(dump, NULL);
        printf("dumped to %s: int32 {L,H,N,d} then K[L][H][N][d], V[L][H][N][d] float32\n\n", dump);
    }

    // statistics of the matrices
    for (int role = 0; role < 2; role++) {
        const float *X = role ? r->v : r->k;
        double ss = 0, mx = 0;
        for (size_t i = 0; i < (size_t)L * H * N * d; i++) { ss += (double)X[i] * X[i]; mx = fmax(mx, fabs(X[i])); }
        printf("%s: mean square %.5g, max |x| %.4g\n", role ? "V" : "K", ss / ((double)L * H * N * d), mx);
    }
    printf("\nMSE pooled over all %d (layer, head) matrices of %d x %d; rel = MSE / mean square. "
           "bits = realized effective bits per element. 'vs PQ' = MSE / PQ's MSE at the same ratio "
           "and source convention.\n\n", L * H, N, d);
    printf("| ratio | codec | source | K bits | K MSE | K rel | K vs PQ | V bits | V MSE | V rel | V vs PQ | s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    float *y = malloc(sizeof(float) * (size_t)N * d);
    const char *on4[] = {"int:4", "kivi:4", "kivi:3", "turboquant:4", "octopus:3", "hqmq:s96:r4", "hqkv:e8:3.5", NULL};
    const char *on8[] = {"int:2", "kivi:2", "kivi:1", "turboquant:2", "octopus:2", "hqmq:s6:r2", "hqkv:e8:1.5", NULL};
    double ratios[2] = {4, 8};
    for (int ri = 0; ri < 2; ri++) {
        double ratio = ratios[ri];
        for (int srci = 0; srci < 2; srci++) {
            kvq_dtype src = srci ? KVQ_DTYPE_F32 : KVQ_DTYPE_F16;
            double pq_mse[2] = {0, 0};
            for (int kind = 2; kind >= 0; kind--) {   // PQ first: the others are shown against it
                acc a[2] = {{0}};
                double t = omp_get_wtime();
                for (int role = 0; role < 2; role++)
                    for (int l = 0; l < L; l++)
                        for (int h = 0; h < H; h++)
                            offline(kind, ratio, src, (role ? r->v : r->k) + ((size_t)l * H + h) * N * d, N, d,
                                    y, &a[role]);
                const char *nm = kind == 0 ? "QET" : kind == 1 ? "Vanilla QET" : "PQ";
                printf("| %g | %s | %s |", ratio, nm, srci ? "fp32" : "fp16");
                for (int role = 0; role < 2; role++) {
                    if (a[role].fail || !a[role].n) { printf(" - | - | - | - |"); continue; }
                    double mse = a[role].se / a[role].n;
                    if (kind == 2) pq_mse[role] = mse;
                    printf(" %.3f | %.4g | %.4f | %.3f |", a[role].bits / a[role].n, mse, a[role].se / a[role].ss,
                           pq_mse[role] > 0 ? mse / pq_mse[role] : NAN);
                }
                printf(" %.1f |\n", omp_get_wtime() - t);
                fflush(stdout);
            }
            if (srci == 0) {
                // online codecs at about 16/ratio bits against the fp16 cache
                const char **sp = ri ? on8 : on4;
                for (int s = 0; sp[s]; s++) {
                    acc a[2] = {{0}};
                    double t = omp_get_wtime();
                    for (int role = 0; role < 2; role++)
                        for (int l = 0; l < L; l++)
                            for (int h = 0; h < H; h++)
                                online(sp[s], role, kvq_kv_seed(7, l, h, role),
                                       (role ? r->v : r->k) + ((size_t)l * H + h) * N * d, N, d, y, &a[role]);
                    printf("| %g | %s | online |", ratio, sp[s]);
                    for (int role = 0; role < 2; role++) {
                        if (a[role].fail || !a[role].n) { printf(" - | - | - | - |"); continue; }
                        double mse = a[role].se / a[role].n;
                        printf(" %.3f | %.4g | %.4f | %.3f |", a[role].bits / a[role].n, mse, a[role].se / a[role].ss,
                               pq_mse[role] > 0 ? mse / pq_mse[role] : NAN);
                    }
                    printf(" %.1f |\n", omp_get_wtime() - t);
                    fflush(stdout);
                }
            }
        }
    }
    free(y);
    free(ids);
    kvq_tok_close(tok);
    kvq_model_close(m);
    return 0;
}
