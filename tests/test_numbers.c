// The numbers people compare between two files, each checked against an independent
// computation and across every tool that prints it: whole-model bits per parameter (from the
// zip's own entry sizes and the config's parameter count, on kvq-small-qwen3 with its tied
// embedding), KV-cache bits per element (docs/KV.md's formula; kvq-inspect, kvq-verify and
// kvq-run print one number), and the standard errors behind every ± (direct two-pass sums).
#include <libgen.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/testutil.h"
#include <jansson.h>
#include <zip.h>

#include "formats/kvqfile.h"
#include "libconv/eval/eval.h"
#include "libconv/runtime/model.h"
#include "libconv/tokenizer/tokenizer.h"
#include "libconv/verify/verify.h"

#define TINY "tests/models/kvq-tiny-llama"
#define TEXT "tests/tokenizer/heldout_start.txt"

static char g_build[512] = "build";
static char g_dir[64]; // one temporary directory for the suite

static const char *shared_dir(void) {
    const char *s = getenv("KVQ_SHARED");
    return s && *s ? s : "../shared";
}

// The number printed right after the first occurrence of `key` in file g_dir/name; NaN when absent.
static double number_after(const char *name, const char *key) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "rb");
    if (!f) return NAN;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *at = strstr(buf, key);
    double v;
    if (!at || sscanf(at + strlen(key), "%lf", &v) != 1) {
        print_message("%s: no number after '%s'\n", name, key);
        return NAN;
    }
    return v;
}

static json_t *load_json(const char *name) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) print_message("%s: %s\n", p, je.text);
    assert_non_null(j);
    return j;
}

static double jnum(const json_t *j, const char *a, const char *b) {
    return json_number_value(json_object_get(json_object_get(j, a), b));
}

// printed with 3 decimals: within half a unit of the last digit (and a hair of rounding)
static void assert_printed(double printed, double want) {
    if (!(fabs(printed - want) <= 0.0005 + 1e-9)) print_message("printed %.6f, expected %.6f\n", printed, want);
    assert_true(fabs(printed - want) <= 0.0005 + 1e-9);
}

// ---- whole-model bits per parameter ------------------------------------------------

// Parameters of a Llama/Qwen3 checkpoint from its config.json alone: embedding (once when
// tied), per layer q/k/v/o, gate/up/down, two RMSNorms (+ q_norm/k_norm for Qwen3), final norm.
static uint64_t params_from_config(const char *path, int *tied) {
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    assert_non_null(c);
#define CI(k) (uint64_t)json_integer_value(json_object_get(c, k))
    const uint64_t h = CI("hidden_size"), L = CI("num_hidden_layers"), nh = CI("num_attention_heads"),
                   nkv = CI("num_key_value_heads"), f = CI("intermediate_size"), V = CI("vocab_size");
    const uint64_t hd = json_is_integer(json_object_get(c, "head_dim")) ? CI("head_dim") : h / nh;
#undef CI
    const int qwen3 = !strcmp(json_string_value(json_object_get(c, "model_type")), "qwen3");
    *tied = json_is_true(json_object_get(c, "tie_word_embeddings"));
    json_decref(c);
    const uint64_t layer = h * nh * hd + 2 * h * nkv * hd + nh * hd * h + 3 * h * f + 2 * h + (qwen3 ? 2 * hd : 0);
    return V * h * (*tied ? 1 : 2) + L * layer + h;
}

// Tensor payload bytes straight from the zip's central directory (every entry is stored, so
// the compressed size is the bytes on disk), plus each codec's params as compact JSON (what
// FORMAT.md counts as side information), split into all tensors and the lossy ones.
static void bytes_from_zip(const char *kvq, uint64_t *all, uint64_t *lossy, uint64_t *lossy_params) {
    int ze = 0;
    zip_t *z = zip_open(kvq, ZIP_RDONLY, &ze);
    assert_non_null(z);
    zip_stat_t st;
    assert_int_equal(zip_stat(z, "manifest.json", 0, &st), 0);
    char *mj = malloc(st.size + 1);
    zip_file_t *zf = zip_fopen(z, "manifest.json", 0);
    assert_int_equal(zip_fread(zf, mj, st.size), (zip_int64_t)st.size);
    zip_fclose(zf);
    mj[st.size] = 0;
    json_error_t je;
    json_t *m = json_loads(mj, 0, &je);
    free(mj);
    assert_non_null(m);
    *all = *lossy = *lossy_params = 0;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(m, "tensors"), i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        const int is_lossy = !json_is_true(json_object_get(json_object_get(t, "codec"), "lossless"));
        char prefix[600];
        snprintf(prefix, sizeof prefix, "t/%s/", name);
        uint64_t b = 0, n = 1;
        for (zip_int64_t k = 0; k < zip_get_num_entries(z, 0); k++) {
            assert_int_equal(zip_stat_index(z, (zip_uint64_t)k, 0, &st), 0);
            if (!strncmp(st.name, prefix, strlen(prefix)) && !strchr(st.name + strlen(prefix), '/')) b += st.comp_size;
        }
        const json_t *params = json_object_get(json_object_get(t, "codec"), "params");
        if (params && !json_is_null(params)) {
            char *pj = json_dumps(params, JSON_COMPACT);
            b += strlen(pj);
            free(pj);
        }
        size_t d;
        json_t *x;
        json_array_foreach(json_object_get(t, "shape"), d, x) n *= (uint64_t)json_integer_value(x);
        *all += b;
        if (is_lossy) { *lossy += b; *lossy_params += n; }
    }
    json_decref(m);
    zip_close(z);
}

// kvq-small-qwen3 (tied embedding, kept at bf16) at "4 bits": the whole model is ~5.5 bits per
// parameter. Every tool prints the same two numbers, clearly named, and they equal an
// independent count: parameters from config.json, bytes from the zip's entries.
static void test_whole_model_bits(void **state) {
    (void)state;
    char src[512], cfg[600];
    snprintf(src, sizeof src, "%s/models/kvq-small-qwen3", shared_dir());
    snprintf(cfg, sizeof cfg, "%s/config.json", src);
    if (access(cfg, R_OK)) {
        print_message("skipped: %s not found (shared models absent)\n", cfg);
        skip();
    }
    const char *B = g_build, *D = g_dir;
    assert_int_equal(run("%s/kvq-convert --weights hyperquant:e8:4.0 %s %s/q3.kvq 2> %s/convert.txt", B, src, D, D), 0);
    char kvq[128];
    snprintf(kvq, sizeof kvq, "%s/q3.kvq", D);
    int tied = 0;
    const uint64_t params = params_from_config(cfg, &tied);
    uint64_t all, lossy, lossy_params;
    bytes_from_zip(kvq, &all, &lossy, &lossy_params);
    const double want = 8.0 * (double)all / (double)params, want_q = 8.0 * (double)lossy / (double)lossy_params;
    print_message("kvq-small-qwen3 hyperquant:e8:4.0: %llu params, %llu tensor bytes: whole model %.4f bits/param, "
                  "quantized tensors %.4f bits/w\n", (unsigned long long)params, (unsigned long long)all, want, want_q);
    assert_true(tied);
    assert_true(want > 5.0 && want_q < 4.01); // the bf16 embedding is a third of the parameters

    // the library's one definition
    kvq_file *f = NULL;
    kvq_err err = {0};
    assert_int_equal(kvq_file_open(kvq, &f, &err), KVQ_OK);
    kvq_bits kb;
    kvq_file_bits(kvq_file_manifest(f), &kb);
    kvq_file_close(f);
    assert_true(kb.params == params && kb.bytes == all && kb.lossy_params == lossy_params);
    assert_true(fabs(kb.bits_per_param - want) < 1e-12 && fabs(kb.lossy_bits_per_weight - want_q) < 1e-12);

    // kvq-convert's summary, kvq-inspect (text, JSON), kvq-verify (text, JSON)
    assert_printed(number_after("convert.txt", "whole model "), want);
    assert_printed(number_after("convert.txt", "quantized at "), want_q);
    assert_int_equal(run("%s/kvq-inspect %s > %s/inspect.txt", B, kvq, D), 0);
    assert_printed(number_after("inspect.txt", "whole model "), want);
    assert_true(number_after("inspect.txt", "bits/param over ") == (double)params);
    assert_printed(number_after("inspect.txt", "quantized tensors "), want_q);
    assert_int_equal(run("%s/kvq-inspect --json %s > %s/inspect.json", B, kvq, D), 0);
    json_t *ji = load_json("inspect.json");
    assert_true(fabs(jnum(ji, "totals", "bits_per_param") - want) < 1e-9);
    assert_true(fabs(jnum(ji, "totals", "bits_per_weight") - want_q) < 1e-9);
    assert_true(jnum(ji, "totals", "params") == (double)params);
    json_decref(ji);
    assert_int_equal(run("%s/kvq-verify -q --no-source %s > %s/verify.txt", B, kvq, D), 0);
    assert_printed(number_after("verify.txt", "bits: whole model "), want);
    assert_printed(number_after("verify.txt", "; quantized tensors "), want_q);
    assert_int_equal(run("%s/kvq-verify -q --no-source --json %s > %s/verify.json", B, kvq, D), 0);
    json_t *jv = load_json("verify.json");
    assert_true(fabs(jnum(jv, "tensors_summary", "bits_per_param") - want) < 1e-9);
    json_decref(jv);

    // the verification record carries it, and kvq-inspect shows it from the record
    assert_int_equal(run("%s/kvq-verify -q --no-source --record %s > /dev/null", B, kvq), 0);
    assert_int_equal(run("%s/kvq-inspect %s > %s/inspect.txt && %s/kvq-inspect --json %s > %s/inspect.json", B, kvq, D, B,
                         kvq, D), 0);
    assert_printed(number_after("inspect.txt", "  bits: whole model "), want);
    ji = load_json("inspect.json");
    assert_true(fabs(jnum(json_object_get(ji, "verification"), "tensors_summary", "bits_per_param") - want) < 1e-9);
    json_decref(ji);
}

// A tensor record whose "bytes" disagrees with its entries fails kvq-verify's integrity
// (the whole-model number is then a claim, not a count), naming the tensor.
static void test_bytes_bound_to_payloads(void **state) {
    (void)state;
    const char *B = g_build, *D = g_dir;
    assert_int_equal(run("%s/kvq-convert -q --weights rtn:4:g128 " TINY " %s/t.kvq 2> /dev/null", B, D), 0);
    char kvq[128];
    snprintf(kvq, sizeof kvq, "%s/t.kvq", D);
    assert_int_equal(run("%s/kvq-verify -q --no-source %s > /dev/null", B, kvq), 0);
    kvq_file *f = NULL;
    kvq_err err = {0};
    assert_int_equal(kvq_file_open(kvq, &f, &err), KVQ_OK);
    json_t *m = json_deep_copy(kvq_file_manifest(f));
    kvq_file_close(f);
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(m, "tensors"), i, t) {
        assert_true(kvq_file_tensor_bytes(m, t) == (uint64_t)json_integer_value(json_object_get(t, "bytes")));
        if (!strcmp(json_string_value(json_object_get(t, "name")), "model.layers.1.mlp.up_proj.weight"))
            json_object_set_new(t, "bytes", json_integer(json_integer_value(json_object_get(t, "bytes")) / 2));
    }
    assert_int_equal(kvq_file_rewrite_manifest(kvq, m, &err), KVQ_OK);
    json_decref(m);
    assert_int_equal(run("%s/kvq-verify -q --no-source %s > %s/v.txt", B, kvq, D), 1);
    assert_int_equal(run("grep -q \"integrity: FAILED: .*tensor 'model.layers.1.mlp.up_proj.weight': manifest bytes\" "
                         "%s/v.txt", D), 0);
}

// ---- KV-cache bits per element ------------------------------------------------------

// docs/KV.md's formulas for octopus:b at head_dim d (default split: direction b+1, norm b−1
// bits per triple; V per-token groups of 32 with an fp16 scale and zero), each token's record
// rounded up to whole bytes as the cache stores it, a residual window of W fp16 tokens, at N
// positions: the one number every tool prints.
static double octopus_bits(int b, int d, int W, int N) {
    const int ntri = (d + 2) / 3, kbits = ntri * (3 * b + 1) + 32, vbits = b * d + 32 * ((d + 31) / 32);
    const double k = 8.0 * ((kbits + 7) / 8) / d, v = 8.0 * ((vbits + 7) / 8) / d;
    return (((N - W) * k + W * 16.0) / N + ((N - W) * v + W * 16.0) / N) / 2;
}

// kvq-inspect (text, JSON), kvq-verify (text, JSON, record) and kvq-run print one KV number for
// a file converted with --kv: the stored bits at the model's max_position_embeddings. (The issue
// this answers: octopus:4 was 4.98 by kvq-inspect's count and 5.00 by kvq-verify's; the K
// record is 318 bits by the formula and 40 bytes stored.) Without a window, what kvq-verify
// measures over its own run is that same number.
static void test_kv_bits_one_number(void **state) {
    (void)state;
    const char *B = g_build, *D = g_dir;
    const int windows[2] = {0, 32};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(run("%s/kvq-convert -q --weights none --kv octopus:4 --kv-window %d " TINY " %s/kv.kvq 2> /dev/null", B,
                             windows[i], D), 0);
        const double want = octopus_bits(4, 64, windows[i], 2048); // kvq-tiny-llama: head_dim 64, 2048 positions
        char kvq[128];
        snprintf(kvq, sizeof kvq, "%s/kv.kvq", D);
        assert_int_equal(run("%s/kvq-inspect %s > %s/inspect.txt && %s/kvq-inspect --json %s > %s/inspect.json", B, kvq,
                             D, B, kvq, D), 0);
        assert_int_equal(run("%s/kvq-verify -q %s --text " TEXT " --ctx 64 --windows 1 --record > %s/verify.txt && "
                             "%s/kvq-verify -q %s --text " TEXT " --ctx 64 --windows 1 --json > %s/verify.json", B, kvq, D,
                             B, kvq, D), 0);
        assert_int_equal(run("%s/kvq-run %s -p hi -n 1 > /dev/null 2> %s/run.txt", B, kvq, D), 0);
        assert_printed(number_after("inspect.txt", "boundary none: "), want);
        assert_printed(number_after("verify.txt", "KV codec: octopus:4: "), want);
        assert_printed(number_after("run.txt", "KV cache from the .kvq: "), want);
        if (windows[i] == 0) assert_printed(number_after("verify.txt", "positions (as kvq-inspect reports); "), want);
        if (windows[i] == 0) assert_true(fabs(want - 5.0) < 1e-12); // head_dim 64: K 40 bytes, V 40 bytes a token
        json_t *ji = load_json("inspect.json"), *jv = load_json("verify.json");
        assert_true(fabs(jnum(ji, "kv", "bits_per_element") - want) < 1e-12);
        assert_true(fabs(jnum(jv, "kv", "bits_per_element") - want) < 1e-12);
        json_decref(ji);
        json_decref(jv);
        kvq_file *f = NULL;
        kvq_err err = {0};
        assert_int_equal(kvq_file_open(kvq, &f, &err), KVQ_OK);
        const json_t *rec = json_object_get(kvq_file_manifest(f), "verification");
        assert_true(fabs(jnum(rec, "kv", "bits_per_element") - want) < 1e-12);
        kvq_file_close(f);
    }
}

// ---- standard errors -------------------------------------------------------------------

// SE of the mean, two-pass: sqrt(Σ(x − m)² / n / (n − 1)) (llama-perplexity's).
static double se_direct(const double *x, size_t n) {
    double m = 0, v = 0;
    for (size_t i = 0; i < n; i++) m += x[i];
    m /= (double)n;
    for (size_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    return sqrt(v / (double)n / (double)(n - 1));
}

static void close_rel(double got, double want, double tol, const char *what) {
    if (!(fabs(got - want) <= tol * fabs(want))) print_message("%s: %.10g, direct %.10g\n", what, got, want);
    assert_true(fabs(got - want) <= tol * fabs(want));
}

typedef struct { double *nll; size_t n, cap; } nll_log;

static int collect_nll(void *user, const kvq_eval_pos *p) {
    nll_log *L = user;
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 1024;
        L->nll = realloc(L->nll, L->cap * sizeof *L->nll);
    }
    L->nll[L->n++] = p->lse_a - (double)p->logits_a[p->target];
    return 0;
}

// The SE helper on a small array; ppl ± = ppl · SE(mean NLL) against the per-position NLLs of a
// run; kvq-verify's KLD ± against its per-position KLDs; kvq-run --ppl and kvq-verify print the
// same ± for the same model and protocol.
static void test_standard_errors_direct(void **state) {
    (void)state;
    const double x[5] = {3.0, 1.0, 4.0, 1.0, 5.0};
    double s1 = 0, s2 = 0;
    for (int i = 0; i < 5; i++) { s1 += x[i]; s2 += x[i] * x[i]; }
    close_rel(kvq_mean_se(s1, s2, 5), se_direct(x, 5), 1e-12, "kvq_mean_se");
    assert_true(fabs(kvq_mean_se(s1, s2, 5) - 0.8) < 1e-12); // by hand: m 2.8, Σ(x − m)² 12.8, sqrt(12.8 / 5 / 4)

    // perplexity of the source over TEXT at ctx 64, every scored NLL logged
    kvq_err err = {0};
    kvq_tokenizer *tok = NULL;
    assert_int_equal(kvq_tok_open(TINY "/tokenizer.json", &tok, &err), KVQ_OK);
    int32_t *ids = NULL;
    size_t nid = 0;
    assert_int_equal(kvq_eval_tokenize_file(tok, TEXT, &ids, &nid, &err), KVQ_OK);
    kvq_model_opts mo = kvq_model_opts_default();
    mo.max_ctx = 64;
    mo.n_threads = 2;
    kvq_model *m = NULL;
    assert_int_equal(kvq_model_open(TINY, &mo, &m, &err), KVQ_OK);
    kvq_eval_protocol p = kvq_eval_protocol_card();
    p.ctx = 64;
    nll_log L = {0};
    kvq_eval_result ra;
    assert_int_equal(kvq_eval_tokens(m, NULL, ids, nid, &p, collect_nll, &L, &ra, NULL, &err), KVQ_OK);
    assert_int_equal(L.n, ra.n_scored);
    double mean = 0;
    for (size_t i = 0; i < L.n; i++) mean += L.nll[i];
    mean /= (double)L.n;
    close_rel(ra.ppl, exp(mean), 1e-6, "ppl");
    const double ppl_se = exp(mean) * se_direct(L.nll, L.n);
    close_rel(ra.ppl_se, ppl_se, 1e-6, "ppl_se");
    free(L.nll);
    kvq_model_close(m);
    kvq_tok_close(tok);
    free(ids);

    // kvq-run --ppl prints the same ppl ± for the same protocol
    const char *B = g_build, *D = g_dir;
    assert_int_equal(run("%s/kvq-run " TINY " --ppl " TEXT " --ctx 64 > %s/run.txt 2> /dev/null", B, D), 0);
    close_rel(number_after("run.txt", "ppl "), ra.ppl, 1e-6, "kvq-run ppl");
    assert_true(fabs(number_after("run.txt", " ± ") - ppl_se) < 1e-6);

    // kvq-verify: the source's ± is the same; KLD ± against its per-position values
    assert_int_equal(run("%s/kvq-convert -q --weights rtn:2:g64 " TINY " %s/r2.kvq 2> /dev/null", B, D), 0);
    char kvq[128];
    snprintf(kvq, sizeof kvq, "%s/r2.kvq", D);
    assert_int_equal(run("%s/kvq-verify -q %s --text " TEXT " --ctx 64 --json > %s/verify.json", B, kvq, D), 0);
    json_t *jv = load_json("verify.json");
    close_rel(jnum(jv, "source", "ppl"), ra.ppl, 1e-9, "verify source ppl");
    close_rel(jnum(jv, "source", "ppl_se"), ppl_se, 1e-6, "verify source ppl_se");
    const json_t *run0 = json_array_get(json_object_get(jv, "runs"), 0);
    close_rel(jnum(jv, "converted", "ppl_se"), json_number_value(json_object_get(run0, "ppl_se")), 1e-12, "converted.ppl_se");
    close_rel(jnum(jv, "converted", "ppl_delta_se"), json_number_value(json_object_get(run0, "ppl_delta_se")), 1e-12,
              "converted.ppl_delta_se");
    json_decref(jv);
    kvq_verify_opts o = kvq_verify_opts_default();
    o.kvq_path = kvq;
    o.source = TINY;
    o.text_path = TEXT;
    o.proto.ctx = 64;
    o.n_threads = 2;
    kvq_verify_report r;
    assert_int_equal(kvq_verify_run(&o, &r, &err), KVQ_OK);
    const kvq_verify_eval *e = &r.run[0];
    assert_true(e->done && e->kld.n == r.n_scored && e->kld_pos);
    double *k = malloc(e->kld.n * sizeof *k), top = 0;
    for (size_t i = 0; i < e->kld.n; i++) k[i] = e->kld_pos[i];
    close_rel(e->kld.mean_se, se_direct(k, e->kld.n), 1e-4, "KLD mean_se"); // per-position values are kept as float
    top = e->kld.top1;
    close_rel(e->kld.top1_se, sqrt(top * (1 - top) / (double)(e->kld.n - 1)), 1e-9, "top-1 se"); // binomial
    close_rel(r.source_ppl_se, ppl_se, 1e-6, "report source_ppl_se");
    free(k);
    kvq_verify_report_free(&r);
}

// The verdict text uses the ±: a limit inside one standard error of the value is called not
// conclusive in the check's line, in the result line and in the JSON; a limit far outside is not.
static void test_verdict_uses_se(void **state) {
    (void)state;
    const char *B = g_build, *D = g_dir;
    assert_int_equal(run("%s/kvq-convert -q --weights rtn:2:g64 " TINY " %s/r2.kvq 2> /dev/null", B, D), 0);
    char kvq[128];
    snprintf(kvq, sizeof kvq, "%s/r2.kvq", D);
    assert_int_equal(run("%s/kvq-verify -q %s --text " TEXT " --ctx 64 --json > %s/verify.json", B, kvq, D), 0);
    json_t *jv = load_json("verify.json");
    const double kld = jnum(jv, "kld", "mean"), se = jnum(jv, "kld", "mean_se");
    json_decref(jv);
    assert_true(kld > 0 && se > 0 && se < kld);
    // limit = value + se/2: passes, but not conclusively
    assert_int_equal(run("%s/kvq-verify -q %s --text " TEXT " --ctx 64 --max-kld %.9g > %s/v.txt", B, kvq, kld + se / 2, D), 0);
    assert_int_equal(run("grep -q 'max_kld .*±.*not conclusive' %s/v.txt && grep -q '^result: PASS (1 check within one "
                         "standard error of the limit: not conclusive' %s/v.txt", D, D), 0);
    assert_int_equal(run("%s/kvq-verify -q %s --text " TEXT " --ctx 64 --max-kld %.9g --json > %s/v.json", B, kvq, kld + se / 2,
                         D), 0);
    jv = load_json("v.json");
    const json_t *c = json_array_get(json_object_get(jv, "checks"), 1);
    assert_string_equal(json_string_value(json_object_get(c, "name")), "max_kld");
    assert_true(json_is_false(json_object_get(c, "conclusive")) && json_is_true(json_object_get(c, "pass")));
    close_rel(json_number_value(json_object_get(c, "se")), se, 1e-12, "check se");
    json_decref(jv);
    // limit = value − se/2: fails, not conclusively either
    assert_int_equal(run("%s/kvq-verify -q %s --text " TEXT " --ctx 64 --max-kld %.9g > %s/v.txt", B, kvq, kld - se / 2, D), 1);
    assert_int_equal(run("grep -q '^result: FAIL (1 check within one standard error' %s/v.txt", D), 0);
    // limit = value + 10 se: a plain PASS
    assert_int_equal(run("%s/kvq-verify -q %s --text " TEXT " --ctx 64 --max-kld %.9g > %s/v.txt", B, kvq, kld + 10 * se, D), 0);
    assert_int_equal(run("grep -q '^result: PASS$' %s/v.txt && ! grep -q 'not conclusive' %s/v.txt", D, D), 0);
}

// ---- setup ---------------------------------------------------------------------------

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvq-num-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return run("rm -rf %s", g_dir);
}

int main(int argc, char **argv) {
    (void)argc;
    char *a = strdup(argv[0]);
    snprintf(g_build, sizeof g_build, "%s", dirname(dirname(a)));
    free(a);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_model_bits),
        cmocka_unit_test(test_bytes_bound_to_payloads),
        cmocka_unit_test(test_kv_bits_one_number),
        cmocka_unit_test(test_standard_errors_direct),
        cmocka_unit_test(test_verdict_uses_se),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
