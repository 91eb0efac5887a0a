// Decode speed at long context without the long prefill (issue 20's end-to-end rows at 128k): a
// model opened as `kvq-run --gpu` opens it, each --kv SPEC's cache filled at positions [0, T)
// with seeded synthetic keys and values through the codec's own encoders (kvq_model_fill_kv), a
// short prompt of seeded token ids at position T, then N greedy tokens. The decode figure is
// kvq-run's: the tokens after the prompt's first, over the wall time from the prompt's end to
// the last step (every step kvq_model_forward_argmax, as kvq-run's greedy loop); it does not
// stop at EOS. One line per spec on stdout. --cpu runs the CPU backend (checking the bench here).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/splitmix.h"
#include "libconv/kv/kvcache_default.h"
#include "libconv/kv/kvcodec.h"
#include "libconv/runtime/backend.h"
#include "libconv/runtime/model.h"
#include "tools/opt.h"

#define T_ "cuda_decode_fill"
#define MAX_SPECS 32

static const char *usage =
    "usage: cuda_decode_fill MODEL --fill T --kv SPEC [--kv SPEC ...] [--ctx-max N] [-n 64] [--prompt-len 8]\n"
    "                        [--seed 1] [--kv-window N] [--kv-boundary] [-t N] [--cpu]\n"
    "  each SPEC (docs/KV.md; fp32: the default cache, CPU only) in turn on the one loaded model: its cache\n"
    "  filled at [0, T) with synthetic keys/values (seed), a prompt of --prompt-len seeded ids at T, then\n"
    "  -n greedy tokens; --ctx-max (default T + prompt + n) sizes the cache as kvq-run's does\n";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int die(int rc, const char *fmt, const char *a) {
    fprintf(stderr, T_ ": ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return rc;
}

// The cache of spec on m (fp32: the CPU's default cache), as kvq-run --kv sets it.
static kvq_status set_cache(kvq_model *m, const char *spec, int gpu, int window, int boundary, uint64_t seed, kvq_err *err) {
    const kvq_arch *a = kvq_model_arch(m);
    kvq_kvcache *c = NULL;
    kvq_status r;
    if (!strcmp(spec, "fp32")) r = kvq_kvcache_default_new(a->n_layers, a->n_kv_heads, a->head_dim, kvq_model_max_ctx(m), 0, &c, err);
    else {
        kvq_kvcache_policy pol = {window, boundary, seed, 0, 0};
        r = kvq_kvcache_codec_new(spec, a->n_layers, a->n_kv_heads, a->head_dim, gpu ? 1 : kvq_model_max_ctx(m), &pol, &c, err);
    }
    if (!r && (r = kvq_model_set_kvcache(m, c, err))) c->ops->free(c);
    return r;
}

int main(int argc, char **argv) {
    const char *model = NULL, *specs[MAX_SPECS];
    int n_spec = 0, T = 0, ctx = 0, n_gen = 64, np = 8, window = 0, boundary = 0, threads = 0, cpu = 0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && (v || (die(2, "option %s needs a value", a), exit(2), 0)) && ++i)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); return 0; }
        else if (ARG("--fill")) { if (kvq_opt_int(T_, a, v, 1, 1 << 24, &T)) return 2; }
        else if (ARG("--ctx-max")) { if (kvq_opt_int(T_, a, v, 1, 1 << 24, &ctx)) return 2; }
        else if (ARG("-n")) { if (kvq_opt_int(T_, a, v, 2, 1 << 20, &n_gen)) return 2; }
        else if (ARG("--prompt-len")) { if (kvq_opt_int(T_, a, v, 1, 4096, &np)) return 2; }
        else if (ARG("--seed")) { if (kvq_opt_u64(T_, a, v, &seed)) return 2; }
        else if (ARG("--kv-window")) { if (kvq_opt_int(T_, a, v, 0, 1 << 20, &window)) return 2; }
        else if (ARG("-t")) { if (kvq_opt_int(T_, a, v, 0, 4096, &threads)) return 2; }
        else if (!strcmp(a, "--kv-boundary")) boundary = 1;
        else if (!strcmp(a, "--cpu")) cpu = 1;
        else if (ARG("--kv")) {
            if (n_spec == MAX_SPECS) return die(2, "more than %s --kv specs", "32");
            specs[n_spec++] = v;
        } else if (a[0] == '-' && a[1]) return die(2, "unknown option %s (see --help)", a);
        else if (!model) model = a;
        else return die(2, "unexpected argument %s", a);
#undef ARG
    }
    if (!model || !T || !n_spec) { fputs(usage, stderr); return 2; }
    const int need = T + np + n_gen - 1; // the last token is not fed back
    if (!ctx) ctx = need;
    char num[256];
    if (need > ctx) {
        snprintf(num, sizeof num, "--fill %d + --prompt-len %d + -n %d - 1 exceeds --ctx-max %d", T, np, n_gen, ctx);
        return die(2, "%s", num);
    }
    for (int i = 0; i < n_spec; i++) { // every spec checked before the model loads
        kvq_kvspec ks;
        kvq_err e = {0};
        if (!strcmp(specs[i], "fp32")) {
            if (!cpu) return die(2, "--kv fp32: the device's fp32 cache cannot be filled (a device cache: --kv fp16)%s", "");
        } else if (kvq_kvspec_parse(specs[i], &ks, &e)) return die(2, "%s", e.msg);
    }

    kvq_model_opts mo = kvq_model_opts_default();
    mo.max_ctx = ctx;
    mo.n_threads = threads;
    if (!cpu) mo.backend = kvq_backend_cuda_new;
    kvq_model *m = NULL;
    kvq_err err = {0};
    const double t0 = now();
    if (kvq_model_open(model, &mo, &m, &err)) return die(2, "%s", err.msg);
    const kvq_arch *ar = kvq_model_arch(m);
    fprintf(stderr, T_ ": %s: %d layers, %d KV heads, head_dim %d, loaded in %.2f s on the %s backend, --ctx-max %d\n", model,
            ar->n_layers, ar->n_kv_heads, ar->head_dim, now() - t0, kvq_model_backend_name(m), ctx);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)np);
    if (!ids) { kvq_model_close(m); return die(1, "out of memory%s", ""); }
    uint64_t s = seed ^ 0x70726f6d7074ull; // the prompt: seeded ids, the same for every spec
    for (int i = 0; i < np; i++) ids[i] = (int32_t)(kvq_splitmix64_next(&s) % (uint64_t)ar->vocab_size);
    int rc = 0;
    for (int i = 0; i < n_spec && !rc; i++) {
        const char *spec = specs[i];
        double ts = now();
        if (set_cache(m, spec, !cpu, window, boundary, seed, &err)) {
            rc = die(err.code == KVQ_ERR_UNSUPPORTED || err.code == KVQ_ERR_ARG ? 2 : 1, "%s", err.msg);
            break;
        }
        const double t_set = now() - ts;
        ts = now();
        if (kvq_model_fill_kv(m, T, seed, &err)) { rc = die(err.code == KVQ_ERR_UNSUPPORTED ? 2 : 1, "%s", err.msg); break; }
        const double t_fill = now() - ts;
        kvq_model_mem mm;
        kvq_model_memory(m, &mm);
        const kvq_kvcache *desc = kvq_model_kvcache_desc(m);
        const double bits = strcmp(spec, "fp32") ? kvq_kvcache_codec_formula_bits(desc, T) : 32.0;
        // as kvq-run: the prompt's forward gives the first token; the steps after it are timed
        int32_t top1 = -1, next;
        uint64_t h = 0xcbf29ce484222325ull; // FNV-1a of the greedy ids (the same run gives the same text)
        const double t1 = now();
        kvq_status r = kvq_model_forward_argmax(m, ids, np, T, &top1, &err);
        const double t2 = now();
        double t_fwd = 0;
        int pos = T + np, produced = 0;
        for (; !r && produced < n_gen; produced++) {
            if (top1 < 0) {
                snprintf(num, sizeof num, "%s: the logits at position %d are NaN", spec, pos);
                r = kvq_err_set(&err, KVQ_ERR_FORMAT, "%s", num);
                break;
            }
            next = top1;
            h = (h ^ (uint32_t)next) * 0x100000001b3ull;
            if (produced + 1 == n_gen) { produced++; break; }
            const double tf = now();
            r = kvq_model_forward_argmax(m, &next, 1, pos++, &top1, &err);
            t_fwd += now() - tf;
        }
        const double t3 = now();
        if (r) { rc = die(1, "%s", err.msg); break; }
        printf("fill %-18s T %d: decode %d tokens %.1f tok/s (%.3f ms a token in the forward pass); KV cache %.1f MB "
               "(%.3f bits/element at T), scratch %.1f MB; prompt %d tokens %.3f s; fill %.2f s, cache set %.2f s; "
               "ids %016llx; %s, --ctx-max %d\n",
               spec, T, produced, (produced - 1) / (t3 - t2), 1e3 * t_fwd / (produced - 1), mm.kv / 1e6, bits,
               mm.scratch / 1e6, np, t2 - t1, t_fill, t_set, (unsigned long long)h, kvq_model_backend_name(m), ctx);
        fflush(stdout);
    }
    free(ids);
    kvq_model_close(m);
    return rc;
}
