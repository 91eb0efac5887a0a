// Real-model KV-codec benchmark: perplexity and KL divergence of a model run with a
// codec-backed KV cache against the same model with the fp16 default cache, on the
// start of a text file, under the model cards' protocol (512-token windows, no BOS).
// Usage: [KVQ_KV_SEED=n] bench_kv_model MODEL_DIR TEXT N_TOKENS WINDOW BOUNDARY SPEC...
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libconv/eval/eval.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/runtime/model.h"
#include "libconv/tokenizer/tokenizer.h"

typedef struct { double kl; size_t n; } kl_acc;

static int kl_cb(void *user, const kvq_eval_pos *p) {
    kl_acc *a = user;
    double kl = 0;
    for (int i = 0; i < p->vocab; i++) {
        double la = p->logits_a[i] - p->lse_a, lb = p->logits_b[i] - p->lse_b;
        kl += exp(la) * (la - lb);
    }
    a->kl += kl, a->n++;
    return 0;
}

static void die(const char *what, const kvq_err *e) {
    fprintf(stderr, "bench_kv_model: %s: %s\n", what, e->msg);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: bench_kv_model MODEL_DIR TEXT N_TOKENS WINDOW BOUNDARY SPEC...\n");
        return 2;
    }
    const char *dir = argv[1], *text = argv[2];
    size_t ntok = strtoull(argv[3], NULL, 10);
    int window = atoi(argv[4]), boundary = atoi(argv[5]);
    kvq_err e = {0};
    kvq_model_opts o = kvq_model_opts_default();
    o.max_ctx = 512;
    o.kv_fp16 = 1;
    kvq_model *a, *b;
    if (kvq_model_open(dir, &o, &a, &e)) die(dir, &e);
    if (kvq_model_open(dir, &o, &b, &e)) die(dir, &e);
    const kvq_arch *ar = kvq_model_arch(a);
    kvq_tokenizer *tk;
    char tp[4096];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", dir);
    if (kvq_tok_open(tp, &tk, &e)) die(tp, &e);
    FILE *f = fopen(text, "rb");
    if (!f) { fprintf(stderr, "bench_kv_model: %s: cannot open\n", text); return 1; }
    fseek(f, 0, SEEK_END);
    long fl = ftell(f);
    fseek(f, 0, SEEK_SET);
    size_t want = (size_t)fl < ntok * 12 ? (size_t)fl : ntok * 12; // enough bytes for ntok tokens
    char *buf = malloc(want + 1);
    want = fread(buf, 1, want, f);
    fclose(f);
    int32_t *ids;
    size_t n_ids;
    if (kvq_tok_encode(tk, buf, want, 0, &ids, &n_ids, &e)) die(text, &e);
    kvq_eval_protocol p = kvq_eval_protocol_card();
    p.max_tokens = ntok < n_ids ? ntok : n_ids;
    char ps[256];
    int L = ar->n_layers, H = ar->n_kv_heads, D = ar->head_dim;
    printf("<!-- %s: %zu tokens, %s, window %d, boundary %d, threads %d -->\n", dir, p.max_tokens,
           kvq_eval_protocol_str(&p, ps, sizeof ps), window, boundary, omp_get_max_threads());
    printf("| model | KV spec | W | bnd | bits (formula, 512 ctx) | bits stored (last window) | bytes/token | PPL fp16 cache | PPL codec | ΔPPL | KLD (nats) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    const char *mname = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    for (int i = 6; i < argc; i++) {
        kvq_kvcache *c;
        const char *se = getenv("KVQ_KV_SEED"); // codec seed (default 1234)
        kvq_kvcache_policy pol = {window, boundary, se ? strtoull(se, NULL, 10) : 1234, 1, 0};
        if (kvq_kvcache_codec_new(argv[i], L, H, D, 512, &pol, &c, &e)) die(argv[i], &e);
        if (kvq_model_set_kvcache(b, c, &e)) die(argv[i], &e);
        kl_acc acc = {0};
        kvq_eval_result ra, rb;
        double t0 = omp_get_wtime();
        if (kvq_eval_tokens(a, b, ids, p.max_tokens, &p, kl_cb, &acc, &ra, &rb, &e)) die(argv[i], &e);
        kvq_kvcache *cc = kvq_model_kvcache(b);
        double bits = kvq_kvcache_codec_formula_bits(cc, 512), bits_run = cc->ops->bits_per_element(cc);
        printf("| %s | `%s` | %d | %d | %.3f | %.3f | %.0f | %.3f | %.3f | %+.2f%% | %.5f |\n", mname, argv[i], window,
               boundary, bits, bits_run, bits_run * 2 * L * H * D / 8, ra.ppl, rb.ppl, 100 * (rb.ppl / ra.ppl - 1), acc.kl / acc.n);
        fprintf(stderr, "%s: %.1f s, stored bits of the last window %.3f\n", argv[i], omp_get_wtime() - t0, bits_run);
        fflush(stdout);
    }
    free(ids), free(buf);
    kvq_tok_close(tk);
    kvq_model_close(a), kvq_model_close(b);
    return 0;
}
