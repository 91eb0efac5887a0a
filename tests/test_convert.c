// Tests for the converter (libconv/convert/convert.c, plan.c, export.c, weights.c) and the
// tools' exit codes: lossless conversion of the bundled model and of every model in
// $KVQ_SHARED/models is bit-identical to the source when read back through the
// container + codec and through kvq_weights; the manifest's sha256 of each source
// file matches OpenSSL's; recipes parse or fail with the file and line; HF export
// round-trips; failures leave no output file.
#include <dirent.h>
#include <libgen.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <xxhash.h>
#include <cmocka.h>

#include "tests/testutil.h"

#include "formats/checkpoint.h"
#include "formats/kvqfile.h"
#include "formats/safetensors.h"
#include "libconv/convert/convert.h"
#include "libconv/runtime/weights.h"

#define TINY "tests/models/kvq-tiny-llama"

static char g_build[512] = "build"; // from argv[0]: <build>/tests/test_convert

static const char *shared_dir(void) {
    const char *s = getenv("KVQ_SHARED");
    return s && *s ? s : "../shared";
}

static void tmpdir(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/kvq-conv-XXXXXX");
    assert_non_null(mkdtemp(buf));
}

static void rmtree(const char *dir) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rmtree(p);
        else unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

// sha256 with OpenSSL directly (independent of kvq_sha256_file).
static void sha256_hex(const char *path, char hex[65]) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    unsigned char buf[1 << 16], md[32];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, fp)) > 0) EVP_DigestUpdate(ctx, buf, k);
    unsigned int ml;
    EVP_DigestFinal_ex(ctx, md, &ml);
    EVP_MD_CTX_free(ctx);
    fclose(fp);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
}

static kvq_convert_opts none_opts(void) {
    kvq_convert_opts o = {0};
    o.plan.quantize_embeddings = -1;
    o.plan.weights = "none";
    return o;
}

// Converts src losslessly and checks every tensor three ways: raw entry bytes ==
// source bytes, codec decode == source widened to f32, kvq_weights == the same.
static void check_lossless(const char *src, size_t want_tensors) {
    char dir[64], out[128];
    tmpdir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/m.kvq", dir);
    kvq_err err = {0};
    kvq_convert_opts o = none_opts();
    kvq_convert_summary sum;
    if (kvq_convert(src, out, &o, &sum, &err) != KVQ_OK) fail_msg("%s", err.msg);
    assert_int_equal(count_files(dir), 1);

    kvq_ckpt *ck;
    assert_int_equal(kvq_ckpt_open(src, &ck, &err), KVQ_OK);
    size_t n = kvq_ckpt_count(ck);
    if (want_tensors) assert_int_equal(n, want_tensors);
    assert_int_equal(sum.n_tensors, n);
    assert_int_equal(sum.n_quantized, 0);
    assert_true(isnan(sum.bits_per_weight));

    kvq_file *f;
    if (kvq_file_open(out, &f, &err) != KVQ_OK) fail_msg("%s", err.msg);
    assert_int_equal(kvq_file_verify(f, &err), KVQ_OK);
    const json_t *man = kvq_file_manifest(f);
    const json_t *tensors = json_object_get(man, "tensors");
    assert_int_equal(json_array_size(tensors), n);
    kvq_weights *w;
    if (kvq_weights_open(out, &w, &err) != KVQ_OK) fail_msg("%s", err.msg);
    assert_int_equal(kvq_weights_count(w), n);
    for (size_t i = 0; i < n; i++) {
        const kvq_tensor *t = kvq_ckpt_tensor(ck, i);
        const json_t *r = json_array_get(tensors, i);
        assert_string_equal(json_string_value(json_object_get(r, "name")), t->name);
        assert_string_equal(json_string_value(json_object_get(r, "source_dtype")), kvq_dtype_name(t->dtype));
        const json_t *shape = json_object_get(r, "shape");
        assert_int_equal(json_array_size(shape), t->ndim);
        for (int d = 0; d < t->ndim; d++) assert_int_equal(json_integer_value(json_array_get(shape, d)), t->shape[d]);
        // 1. the stored bytes are the source bytes
        const char *entry = json_string_value(json_object_get(json_object_get(r, "entries"), "raw"));
        assert_non_null(entry);
        const void *d;
        size_t sz;
        if (kvq_file_entry(f, entry, &d, &sz, &err) != KVQ_OK) fail_msg("%s", err.msg);
        assert_int_equal(sz, t->nbytes);
        assert_memory_equal(d, t->data, t->nbytes);
        // 2./3. decoded float32 equals the source widened to float32, bit for bit
        int64_t numel = kvq_tensor_numel(t), got_n;
        float *ref = malloc((size_t)numel * sizeof *ref), *x;
        kvq_dtype_to_f32(t->dtype, t->data, (size_t)numel, ref);
        if (kvq_weights_get_f32(w, t->name, &x, &got_n, &err) != KVQ_OK) fail_msg("%s", err.msg);
        assert_int_equal(got_n, numel);
        assert_memory_equal(x, ref, (size_t)numel * sizeof *ref);
        free(x);
        free(ref);
        int nd;
        int64_t sh[8];
        assert_true(kvq_weights_has(w, t->name, &nd, sh));
        assert_int_equal(nd, t->ndim);
    }
    assert_false(kvq_weights_has(w, "no.such.tensor", NULL, NULL));
    // source files: sha256 recomputed with OpenSSL, sizes from stat
    const json_t *files = json_object_get(json_object_get(man, "source"), "files");
    assert_true(json_array_size(files) >= 1);
    size_t i;
    json_t *fr;
    int n_weights = 0;
    json_array_foreach(files, i, fr) {
        const char *name = json_string_value(json_object_get(fr, "name"));
        char path[1024], hex[65];
        struct stat st;
        char *c = strdup(src);
        assert_int_equal(stat(src, &st), 0); // a .bin source: its files live beside it
        snprintf(path, sizeof path, "%s/%s", S_ISDIR(st.st_mode) ? src : dirname(c), name);
        free(c);
        sha256_hex(path, hex);
        assert_string_equal(json_string_value(json_object_get(fr, "sha256")), hex);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(json_integer_value(json_object_get(fr, "size")), st.st_size);
        if (!strcmp(json_string_value(json_object_get(fr, "role")), "weights")) n_weights++;
    }
    assert_true(n_weights >= 1);
    // tokenizer: stored, and opened from the container's bytes (no file, no temporary
    // directory) into a tokenizer that encodes exactly as the source's
    assert_null(kvq_weights_tokenizer_path(w));
    const char *src_tok = kvq_ckpt_tokenizer_path(ck);
    if (src_tok) {
        kvq_tokenizer *ta = NULL, *tb = NULL;
        assert_int_equal(kvq_weights_tokenizer(w, &ta, &err), KVQ_OK);
        assert_int_equal(kvq_tok_open(src_tok, &tb, &err), KVQ_OK);
        assert_int_equal(kvq_tok_vocab_size(ta), kvq_tok_vocab_size(tb));
        assert_int_equal(kvq_tok_bos(ta), kvq_tok_bos(tb));
        assert_int_equal(kvq_tok_eos(ta), kvq_tok_eos(tb));
        const char *txt = "It was a dark and stormy night; the rain fell in torrents — 1848.";
        int32_t *ia, *ib;
        size_t na, nb;
        assert_int_equal(kvq_tok_encode(ta, txt, strlen(txt), 1, &ia, &na, &err), KVQ_OK);
        assert_int_equal(kvq_tok_encode(tb, txt, strlen(txt), 1, &ib, &nb, &err), KVQ_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(ia, ib, sizeof(int32_t) * na);
        free(ia);
        free(ib);
        kvq_tok_close(ta);
        kvq_tok_close(tb);
    }
    kvq_weights_close(w);
    kvq_file_close(f);
    kvq_ckpt_close(ck);
    rmtree(dir);
}

static void test_tiny_lossless(void **state) { check_lossless(TINY, 0); }

// kvq_weights over a source checkpoint: same names, values widened from the source.
static void test_weights_source(void **state) {
    kvq_err err = {0};
    kvq_weights *w;
    kvq_ckpt *ck;
    if (kvq_weights_open(TINY, &w, &err) != KVQ_OK) fail_msg("%s", err.msg);
    assert_int_equal(kvq_ckpt_open(TINY, &ck, &err), KVQ_OK);
    assert_null(kvq_weights_manifest(w));
    assert_int_equal(kvq_weights_count(w), kvq_ckpt_count(ck));
    assert_int_equal(kvq_weights_arch(w)->hidden_size, kvq_ckpt_arch(ck)->hidden_size);
    assert_string_equal(kvq_weights_tokenizer_path(w), kvq_ckpt_tokenizer_path(ck));
    const kvq_tensor *t = kvq_ckpt_find(ck, "model.embed_tokens.weight");
    assert_non_null(t);
    float *x;
    int64_t n;
    assert_int_equal(kvq_weights_get_f32(w, t->name, &x, &n, &err), KVQ_OK);
    assert_int_equal(n, kvq_tensor_numel(t));
    uint16_t h;
    memcpy(&h, (const uint8_t *)t->data + 2 * 12345, 2);
    assert_true(t->dtype == KVQ_DTYPE_BF16);
    assert_true(x[12345] == kvq_bf16_to_f32(h));
    free(x);
    assert_int_equal(kvq_weights_get_f32(w, "nope", &x, &n, &err), KVQ_ERR_MISSING);
    assert_null(kvq_weights_name(w, kvq_weights_count(w)));
    kvq_ckpt_close(ck);
    kvq_weights_close(w);
}

static void test_shared_models_lossless(void **state) {
    char p[1024];
    const char *models[] = {"kvq-small-llama", "kvq-small-qwen3", "kvq-tiny-llama", "stories260K/stories260K.bin"};
    const size_t want[] = {57, 0, 0, 0};
    snprintf(p, sizeof p, "%s/models", shared_dir());
    struct stat st;
    if (stat(p, &st) != 0) { print_message("skipped: %s not found (set KVQ_SHARED)\n", p); skip(); }
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/models/%s", shared_dir(), models[i]);
        print_message("  lossless round trip: %s\n", p);
        check_lossless(p, want[i]);
    }
}

static void read_all(const char *path, uint8_t **d, size_t *n) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    *d = malloc(*n);
    assert_int_equal(fread(*d, 1, *n, fp), *n);
    fclose(fp);
}

static void test_deterministic_and_failures(void **state) {
    char dir[64], a[128], b[128];
    tmpdir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a.kvq", dir);
    snprintf(b, sizeof b, "%s/b.kvq", dir);
    kvq_err err = {0};
    kvq_convert_opts o = none_opts();
    assert_int_equal(kvq_convert(TINY, a, &o, NULL, &err), KVQ_OK);
    assert_int_equal(kvq_convert(TINY, b, &o, NULL, &err), KVQ_OK);
    uint8_t *da, *db;
    size_t na, nb;
    read_all(a, &da, &na);
    read_all(b, &db, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na); // same input + recipe => same bytes
    free(da);
    free(db);
    unlink(b);
    // bad spec: fails before writing anything
    o.plan.weights = "nosuchcodec:bits=3";
    assert_int_equal(kvq_convert(TINY, b, &o, NULL, &err), KVQ_ERR_ARG);
    assert_non_null(strstr(err.msg, "nosuchcodec"));
    // missing source
    o = none_opts();
    assert_true(kvq_convert("/nonexistent/model", b, &o, NULL, &err) < 0);
    assert_non_null(strstr(err.msg, "/nonexistent/model"));
    assert_int_equal(count_files(dir), 1); // only a.kvq
    rmtree(dir);
}

static void write_text(const char *path, const char *s) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(s, fp);
    fclose(fp);
}

static void test_recipes(void **state) {
    char dir[64], path[128];
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/r.yaml", dir);
    kvq_err err = {0};
    kvq_plan *p;
    // the shipped default recipe parses
    kvq_plan_opts o = {.recipe_path = "recipes/default.yaml", .quantize_embeddings = -1};
    if (kvq_plan_build(&o, &p, &err) != KVQ_OK) fail_msg("%s", err.msg);
    json_t *j = kvq_plan_to_json(p);
    assert_string_equal(json_string_value(json_object_get(j, "weights")), "none");
    assert_int_equal(json_array_size(json_object_get(j, "rules")), 1);
    json_decref(j);
    kvq_tensor t = {.name = "model.norm.weight", .dtype = KVQ_DTYPE_F32, .ndim = 1, .shape = {4}};
    const kvq_codec_traits *c;
    const json_t *cfg;
    const char *spec;
    assert_int_equal(kvq_plan_choose(p, &t, &c, &cfg, &spec, &err), KVQ_OK);
    assert_string_equal(c->name, "none");
    // per-tensor seed: XXH3-64(name, seed = recipe seed), recipe seed 0 here
    assert_true(kvq_plan_tensor_seed(p, "a.weight") == XXH3_64bits_withSeed("a.weight", 8, 0));
    kvq_plan_free(p);
    // CLI seed overrides the file's
    write_text(path, "seed: 17\nweights: none\nquantize_embeddings: true\nkeep: [\"*.bias\"]\nrules:\n  - match: \"*.mlp.*\"\n    codec: none\n");
    o = (kvq_plan_opts){.recipe_path = path, .quantize_embeddings = -1};
    assert_int_equal(kvq_plan_build(&o, &p, &err), KVQ_OK);
    j = kvq_plan_to_json(p);
    assert_int_equal(json_integer_value(json_object_get(j, "seed")), 17);
    assert_true(json_is_true(json_object_get(j, "quantize_embeddings")));
    assert_int_equal(json_array_size(json_object_get(j, "keep")), 1);
    json_decref(j);
    assert_true(kvq_plan_tensor_seed(p, "x") == XXH3_64bits_withSeed("x", 1, 17));
    kvq_plan_free(p);
    o.seed = 5, o.seed_set = 1;
    assert_int_equal(kvq_plan_build(&o, &p, &err), KVQ_OK);
    assert_true(kvq_plan_tensor_seed(p, "x") == XXH3_64bits_withSeed("x", 1, 5));
    kvq_plan_free(p);
    // errors name the file and line
    struct { const char *text, *needle; } bad[] = {
        {"weights: none\nbogus: 1\n", "unknown key 'bogus'"},
        {"rules:\n  - match: \"*\"\n    codec: nosuch:3\n", "line 2"},
        {"seed: -4\n", "seed"},
        {"rules: [\n", "YAML error"},
        {"rules:\n  - match: \"*\"\n", "a rule needs 'codec', 'bits' or both"},
        {"weights: none\nweights: rtn:4:g128\n", "line 2: key 'weights' given twice (first on line 1)"},
        {"rules:\n  - match: \"*\"\n    match: \"x\"\n    codec: none\n", "key 'match' given twice"},
        {"weights: none\n---\nweights: rtn:4:g128\n", "line 3: a second YAML document"},
        {"rules:\n  - regex: \"a(\"\n    codec: none\n", "line 2: bad regex"},
        {"rules:\n  - match: \"*\"\n    regex: \"x\"\n    codec: none\n", "exactly one of 'match'"},
        {"rules:\n  - match: \"*\"\n    bits: lots\n", "line 2: rule 'bits' must be a number"},
        {"weights: none\nrules:\n  - match: \"*\"\n    bits: 3\n", "line 3: 'bits' without 'codec'"},
        {"rules:\n  - match: \"*\"\n    codec: rtn:4:g128\n    bits: 40\n", "r.yaml"},
        {"kv:\n  codec: nosuch:3\n", "line 2: kv.codec"},
        {"kv:\n  window: -1\n", "line 2: kv.window"},
        {"kv:\n  codec: int:4\n  colour: red\n", "line 3: unknown kv key 'colour'"},
        {"rules:\n  - match: \"*\"\n    codec: none\n    rate: 3\n", "unknown rule key 'rate'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(path, bad[i].text);
        assert_true(kvq_plan_build(&o, &p, &err) < 0);
        assert_null(p);
        if (!strstr(err.msg, bad[i].needle) || !strstr(err.msg, "r.yaml")) fail_msg("case %zu: '%s'", i, err.msg);
    }
    // rules: glob or regex, codec and/or rate, first match wins; --set overrides any field
    write_text(path, "seed: 3\nweights: hyperquant:e8:4.0\nrules:\n  - regex: \"layers\\\\.(0|3)\\\\.\"\n    bits: 5\n"
                     "  - match: \"*.down_proj.weight\"\n    codec: rtn:4:g128\n    bits: 3.25\n"
                     "  - match: \"*.up_proj.weight\"\n    codec: qet:4\nkv:\n  codec: octopus:3\n  window: 32\n");
    const char *sets[] = {"kv.boundary=true", "seed=9", NULL};
    o = (kvq_plan_opts){.recipe_path = path, .quantize_embeddings = -1, .sets = sets};
    if (kvq_plan_build(&o, &p, &err) != KVQ_OK) fail_msg("%s", err.msg);
    struct { const char *name; const char *spec; } want[] = {
        {"model.layers.0.mlp.down_proj.weight", "hyperquant:e8:5"},   // rule 1 wins over rule 2
        {"model.layers.1.mlp.down_proj.weight", "rtn:3:g128"},        // 3.25 bits = 3-bit codes + 0.25 of scales
        {"model.layers.1.mlp.up_proj.weight", "qet:4"},
        {"model.layers.1.self_attn.q_proj.weight", "hyperquant:e8:4.0"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        kvq_tensor tt = {.name = want[i].name, .dtype = KVQ_DTYPE_BF16, .ndim = 2, .shape = {256, 256}};
        kvq_plan_entry e;
        assert_int_equal(kvq_plan_resolve(p, &tt, &e, &err), KVQ_OK);
        if (strcmp(e.spec, want[i].spec)) fail_msg("%s: %s, expected %s (%s)", want[i].name, e.spec, want[i].spec, e.why);
        assert_true(e.seed == XXH3_64bits_withSeed(want[i].name, strlen(want[i].name), 9));
        // an allocator's per-entry rate
        assert_int_equal(kvq_plan_entry_set_rate(p, &e, 2.5, "allocator", &err), KVQ_OK);
        assert_string_equal(e.why, "allocator");
        assert_true(fabs(e.rate - 2.5) < 0.3);
    }
    kvq_plan_kv_policy kv;
    kvq_plan_kv(p, &kv);
    assert_string_equal(kv.spec, "octopus:3");
    assert_int_equal(kv.window, 32);
    assert_int_equal(kv.boundary, 1);
    assert_true(kv.seed == 9);
    j = kvq_plan_to_json(p);
    assert_int_equal(json_array_size(json_object_get(j, "set")), 2);
    assert_true(json_is_true(json_object_get(json_object_get(j, "kv"), "boundary")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "rules"), 0), "regex")),
                        "layers\\.(0|3)\\.");
    json_decref(j);
    kvq_plan_free(p);
    // a bad --set names itself
    const char *badsets[] = {"kv.window=abc", NULL};
    o.sets = badsets;
    assert_true(kvq_plan_build(&o, &p, &err) < 0);
    if (!strstr(err.msg, "--set 'kv.window=abc'")) fail_msg("%s", err.msg);
    rmtree(dir);
}

// Every shipped recipe converts the bundled model; --dry-run's predicted file size is within 1 %
// of the real file and its whole-model bits/param within 1 % of kvq_file_bits'; the KV codec of
// the recipe is the one stored.
static void test_shipped_recipes(void **state) {
    char dir[64], out[128];
    tmpdir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/r.kvq", dir);
    DIR *d = opendir("recipes");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".yaml")) continue;
        char rp[300];
        snprintf(rp, sizeof rp, "recipes/%s", de->d_name);
        kvq_err err = {0};
        kvq_convert_opts o = {0};
        o.plan.quantize_embeddings = -1;
        o.plan.recipe_path = rp;
        o.plan.calib_tokens = 32; // the budgeted recipes' calibration, kept short (test_alloc measures it)
        kvq_convert_prediction P;
        if (kvq_convert_predict(TINY, &o, &P, &err) != KVQ_OK) fail_msg("%s: %s", rp, err.msg);
        assert_int_equal(count_files(dir), 0); // a dry run writes nothing
        kvq_convert_summary sum;
        if (kvq_convert(TINY, out, &o, &sum, &err) != KVQ_OK) fail_msg("%s: %s", rp, err.msg);
        double rel = fabs((double)P.file_bytes - (double)sum.bytes) / (double)sum.bytes;
        print_message("  %-32s predicted %10llu bytes, real %10llu (%+.3f %%), %.3f vs %.3f bits/param, kv %s\n", de->d_name,
                      (unsigned long long)P.file_bytes, (unsigned long long)sum.bytes,
                      100.0 * ((double)P.file_bytes - (double)sum.bytes) / (double)sum.bytes, P.bits_per_param,
                      sum.bits_per_param, sum.kv_spec[0] ? sum.kv_spec : "none");
        assert_true(rel < 0.01);
        assert_true(fabs(P.bits_per_param - sum.bits_per_param) < 0.01 * sum.bits_per_param);
        assert_string_equal(P.kv_spec, sum.kv_spec);
        kvq_file *f;
        if (kvq_file_open(out, &f, &err) != KVQ_OK) fail_msg("%s", err.msg);
        const json_t *m = kvq_file_manifest(f), *kv = json_object_get(m, "kv");
        if (sum.kv_spec[0]) {
            assert_non_null(kv);
            assert_string_equal(json_string_value(json_object_get(kv, "spec")), sum.kv_spec);
            assert_int_equal(json_integer_value(json_object_get(kv, "window")), sum.kv_window);
        } else assert_null(kv);
        assert_string_equal(json_string_value(json_object_get(json_object_get(m, "recipe"), "file")), rp);
        kvq_file_close(f);
        kvq_convert_prediction_free(&P);
        unlink(out);
        n++;
    }
    closedir(d);
    assert_true(n >= 10);
    rmtree(dir);
}

static void test_export_hf(void **state) {
    char dir[64], out[128], hf[128];
    tmpdir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/m.kvq", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    kvq_err err = {0};
    kvq_convert_opts o = none_opts();
    assert_int_equal(kvq_convert(TINY, out, &o, NULL, &err), KVQ_OK);
    kvq_export_report rep;
    if (kvq_export_hf(out, hf, NULL, &rep, &err) != KVQ_OK) fail_msg("%s", err.msg);
    assert_int_equal(rep.n_rounded, 0); // a bf16 source stored losslessly: nothing to round
    kvq_ckpt *a, *b;
    assert_int_equal(kvq_ckpt_open(TINY, &a, &err), KVQ_OK);
    if (kvq_ckpt_open(hf, &b, &err) != KVQ_OK) fail_msg("%s", err.msg);
    assert_int_equal(kvq_ckpt_count(a), kvq_ckpt_count(b));
    for (size_t i = 0; i < kvq_ckpt_count(a); i++) {
        const kvq_tensor *x = kvq_ckpt_tensor(a, i), *y = kvq_ckpt_tensor(b, i);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->dtype, y->dtype); // lossless: source dtype kept
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, x->nbytes);
    }
    assert_memory_equal(kvq_ckpt_arch(a), kvq_ckpt_arch(b), sizeof(kvq_arch));
    assert_non_null(kvq_ckpt_tokenizer_path(b));
    kvq_ckpt_close(a);
    kvq_ckpt_close(b);
    rmtree(dir);
}

// A Python with the real safetensors package and numpy: $KVQ_PYTHON, else python3 if it has them,
// else <build>/venv-st (made here with pip the first time; that needs the network, and the test
// skips, saying so, when it cannot). Returns 0 and the interpreter, or -1.
static int find_python(char *py, size_t n) {
    const char *e = getenv("KVQ_PYTHON");
    if (e && *e) { snprintf(py, n, "%s", e); return 0; }
    if (run("python3 -c 'import safetensors, numpy' 2>/dev/null") == 0) { snprintf(py, n, "python3"); return 0; }
    snprintf(py, n, "%s/venv-st/bin/python", g_build);
    if (run("%s -c 'import safetensors, numpy' 2>/dev/null", py) == 0) return 0;
    print_message("  creating %s/venv-st with pip install safetensors numpy\n", g_build);
    if (run("python3 -m venv %s/venv-st >/dev/null 2>&1 && timeout 300 %s/venv-st/bin/pip install -q safetensors numpy "
            ">/dev/null 2>&1", g_build, g_build) == 0 && run("%s -c 'import safetensors, numpy' 2>/dev/null", py) == 0)
        return 0;
    return -1;
}

// kvq-convert --export-hf as people use it: an existing .kvq exported alone (it was misread as a
// llama2.c file), bf16 by default and sharded with an index when --max-shard-size asks, f32 on
// request, both loaded by the real safetensors package (tests/check_export_hf.py: dtypes as
// config.json states them, index consistent, bf16 = f32 rounded to nearest even); a directory
// holding a checkpoint refused (exit 2, one line) unless --force, which also removes the old
// index; the KV codec that HF cannot express is named.
static void test_export_hf_python(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-exp-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(run("%s/kvq-convert -q -r recipes/hyperquant-e8-4.0.yaml " TINY " %s/m.kvq", g_build, dir), 0);
    assert_int_equal(run("%s/kvq-convert --export-hf %s/bf --max-shard-size 3MB %s/m.kvq 2> %s/log.txt", g_build, dir, dir,
                         dir), 0);
    assert_int_equal(run("grep -q '4 shards' %s/log.txt && grep -q 'bf16 rounding of 28 tensors' %s/log.txt && "
                         "grep -q 'KV-cache codec hqkv:e8:3:rot=signs' %s/log.txt && test -f %s/bf/model.safetensors.index.json",
                         dir, dir, dir, dir), 0);
    assert_int_equal(run("%s/kvq-convert -q --export-hf %s/f32 --export-dtype f32 %s/m.kvq", g_build, dir, dir), 0);
    // our reader loads both: same arch, every tensor in the stated dtype
    kvq_ckpt *a;
    kvq_err err = {0};
    char p[300];
    snprintf(p, sizeof p, "%s/bf", dir);
    if (kvq_ckpt_open(p, &a, &err) != KVQ_OK) fail_msg("%s", err.msg);
    for (size_t i = 0; i < kvq_ckpt_count(a); i++) assert_int_equal(kvq_ckpt_tensor(a, i)->dtype, KVQ_DTYPE_BF16);
    kvq_ckpt_close(a);
    // refused into a checkpoint directory, nothing changed; --force replaces (the index goes)
    assert_int_equal(run("cp %s/bf/model.safetensors.index.json %s/idx.bak", dir, dir), 0);
    assert_int_equal(run("%s/kvq-convert --export-hf %s/bf %s/m.kvq 2> %s/e.txt", g_build, dir, dir, dir), 2);
    assert_int_equal(run("test $(wc -l < %s/e.txt) -eq 1 && grep -q 'already holds a checkpoint' %s/e.txt && "
                         "cmp -s %s/idx.bak %s/bf/model.safetensors.index.json", dir, dir, dir, dir), 0);
    assert_int_equal(run("%s/kvq-convert -q --export-hf %s/bf --force %s/m.kvq && test ! -e %s/bf/model.safetensors.index.json "
                         "&& test ! -e %s/bf/model-00001-of-00004.safetensors && test -f %s/bf/model.safetensors",
                         g_build, dir, dir, dir, dir, dir), 0);
    assert_int_equal(run("%s/kvq-convert -q --export-hf %s/bf2 --max-shard-size 3MB %s/m.kvq", g_build, dir, dir), 0);
    char py[600];
    if (find_python(py, sizeof py) != 0) {
        assert_int_equal(run("rm -rf %s", dir), 0);
        print_message("skipped: no Python with safetensors and numpy (set KVQ_PYTHON; pip install needs the network)\n");
        skip();
    }
    int r = run("%s tests/check_export_hf.py %s/bf2 %s/f32", py, dir, dir);
    assert_int_equal(r, 0);
    assert_int_equal(run("rm -rf %s", dir), 0);
}

// Every numeric option of every tool is validated by tools/opt.h: a bad value is one line on
// stderr naming the option and exit status 2, never a silent 0.
static void test_numeric_options(void **state) {
    char bin[600];
    snprintf(bin, sizeof bin, "%s/kvq-run", g_build);
    if (access(bin, X_OK) != 0) { print_message("skipped: %s not built\n", bin); skip(); }
    const char *run_bad[] = {"-n abc", "-n 5x", "--temp abc", "--temp nan", "--top-p 2", "-t -1", "--seed -3",
                             "--ctx 0", "--stride x", "--ctx-max 1e3", "--kv-window -2", "--max-tokens q"};
    for (size_t i = 0; i < sizeof run_bad / sizeof run_bad[0]; i++) {
        int r = run("%s/kvq-run %s -p hi %s >/dev/null 2>&1", g_build, TINY, run_bad[i]);
        if (r != 2) print_message("kvq-run %s: exit %d\n", run_bad[i], r);
        assert_int_equal(r, 2);
    }
    assert_int_equal(run("%s/kvq-run %s -p hi -n 2 --temp 0 -t 1 >/dev/null 2>&1", g_build, TINY), 0);
    { // --prompt-file gives what -p gives for the same text (newline and non-ASCII included)
        char dir[512];
        tmpdir(dir, sizeof dir);
        assert_int_equal(run("printf 'Once upon a time,\\nthe caf\\303\\251 was quiet' > %s/p.txt", dir), 0);
        assert_int_equal(run("%s/kvq-run %s --prompt-file %s/p.txt -n 8 --temp 0 -t 1 > %s/a.txt 2>/dev/null", g_build, TINY,
                             dir, dir), 0);
        assert_int_equal(run("%s/kvq-run %s -p \"$(cat %s/p.txt)\" -n 8 --temp 0 -t 1 > %s/b.txt 2>/dev/null", g_build,
                             TINY, dir, dir), 0);
        assert_int_equal(run("test -s %s/a.txt && cmp -s %s/a.txt %s/b.txt", dir, dir, dir), 0);
        assert_int_equal(run("rm -rf %s", dir), 0);
    }
    assert_int_equal(run("%s/kvq-convert -t x %s /tmp/kvq-never.kvq 2>/dev/null", g_build, TINY), 2);
    assert_int_equal(run("%s/kvq-convert --seed -1 %s /tmp/kvq-never.kvq 2>/dev/null", g_build, TINY), 2);
    assert_int_equal(run("%s/kvq-convert --kv-window 1.5 %s /tmp/kvq-never.kvq 2>/dev/null", g_build, TINY), 2);
    assert_int_equal(access("/tmp/kvq-never.kvq", F_OK), -1);
    assert_int_equal(run("%s/kvq-verify %s --max-kld abc >/dev/null 2>&1", g_build, TINY), 2);
    assert_int_equal(run("%s/kvq-verify %s --ctx 12x >/dev/null 2>&1", g_build, TINY), 2);
}

// A recipe's seed reaches the KV codec (it used to reach only the weight codecs: kv.seed 0).
static void test_recipe_seed_reaches_kv(void **state) {
    char bin[600], dir[64], path[128];
    snprintf(bin, sizeof bin, "%s/kvq-convert", g_build);
    if (access(bin, X_OK) != 0) { print_message("skipped: %s not built\n", bin); skip(); }
    tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/r.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("seed: 77\nweights: none\n", f);
    fclose(f);
    assert_int_equal(run("%s/kvq-convert -q --recipe %s --kv octopus:4 %s %s/a.kvq 2>/dev/null", g_build, path, TINY, dir), 0);
    snprintf(path, sizeof path, "%s/a.kvq", dir);
    kvq_file *kf;
    kvq_err err = {0};
    assert_int_equal(kvq_file_open(path, &kf, &err), KVQ_OK);
    const json_t *m = kvq_file_manifest(kf);
    assert_string_equal(json_string_value(json_object_get(json_object_get(m, "kv"), "seed")), "77"); // decimal string: 64-bit safe
    assert_int_equal(json_integer_value(json_object_get(json_object_get(m, "recipe"), "seed")), 77);
    kvq_file_close(kf);
    rmtree(dir);
}

static void test_tools(void **state) {
    char bin[600], dir[64];
    snprintf(bin, sizeof bin, "%s/kvq-convert", g_build);
    if (access(bin, X_OK) != 0) { print_message("skipped: %s not built\n", bin); skip(); }
    tmpdir(dir, sizeof dir);
    assert_int_equal(run("%s/kvq-convert --help >/dev/null", g_build), 0);
    assert_int_equal(run("%s/kvq-convert -q --weights none %s %s/t.kvq 2>/dev/null", g_build, TINY, dir), 0);
    assert_int_equal(run("%s/kvq-inspect %s/t.kvq >/dev/null", g_build, dir), 0);
    assert_int_equal(run("%s/kvq-inspect --json %s/t.kvq > %s/t.json", g_build, dir, dir), 0);
    char jp[128];
    snprintf(jp, sizeof jp, "%s/t.json", dir);
    json_error_t je;
    json_t *j = json_load_file(jp, 0, &je);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "format_version")), KVQ_FORMAT_VERSION);
    assert_true(json_is_object(json_object_get(j, "architecture")));
    json_t *t0 = json_array_get(json_object_get(j, "tensors"), 0);
    const char *keys[] = {"name", "shape", "source_dtype", "codec", "bits_per_weight", "bytes"};
    for (int i = 0; i < 6; i++) assert_non_null(json_object_get(t0, keys[i]));
    assert_true(json_is_string(json_object_get(t0, "codec")));
    json_t *tot = json_object_get(j, "totals");
    assert_true(json_integer_value(json_object_get(tot, "bytes")) > 0);
    assert_true(json_integer_value(json_object_get(tot, "source_bytes")) > 0);
    assert_true(json_is_null(json_object_get(tot, "bits_per_weight"))); // nothing lossy
    json_decref(j);
    // errors: exit 2 and one line naming the file
    write_text(jp, "garbage");
    assert_int_equal(run("%s/kvq-inspect %s 2>/dev/null", g_build, jp), 2);
    assert_int_equal(run("%s/kvq-inspect 2>/dev/null", g_build), 2);
    assert_int_equal(run("%s/kvq-convert --weights bogus %s %s/u.kvq 2>/dev/null", g_build, TINY, dir), 2);
    assert_int_equal(run("%s/kvq-convert /nonexistent %s/u.kvq 2>/dev/null", g_build, dir), 2);
    assert_int_equal(access(jp, F_OK), 0);
    char u[128];
    snprintf(u, sizeof u, "%s/u.kvq", dir);
    assert_int_not_equal(access(u, F_OK), 0);
    rmtree(dir);
}

// Sources a reader would refuse are refused before anything is written, each with one line
// naming the source: a config whose head_dim disagrees with the projections, a layer count
// beyond the limits (2^30), a tokenizer that does not parse.
static void test_source_checks(void **st) {
    (void)st;
    const struct { const char *sed, *file, *expect; } cases[] = {
        {"s/\"head_dim\": 64/\"head_dim\": 32/", "config.json", "the architecture (config) implies"},
        {"s/\"num_hidden_layers\": 4/\"num_hidden_layers\": 1073741824/", "config.json", "n_layers 1073741824 outside"},
        {"s/\"merges\"/\"merges_gone\"/", "tokenizer.json", "tokenizer.json"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char dir[] = "/tmp/kvq-srcchk-XXXXXX";
        assert_non_null(mkdtemp(dir));
        assert_int_equal(run("cp -r " TINY "/. %s/ && sed -i '%s' %s/%s", dir, cases[c].sed, dir, cases[c].file), 0);
        assert_int_equal(run("%s/kvq-convert %s %s/out.kvq > %s/o.txt 2> %s/e.txt", g_build, dir, dir, dir, dir), 2);
        assert_int_equal(run("test ! -e %s/out.kvq && test $(wc -l < %s/e.txt) -eq 1 && grep -q '%s' %s/e.txt", dir, dir,
                             cases[c].expect, dir),
                         0);
        assert_int_equal(run("rm -rf %s", dir), 0);
    }
}

// Killed at any moment (SIGKILL at 12 points through a conversion), the destination holds the
// previous complete file or nothing: never a partial one.
static void test_kill_anywhere(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-kill-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char out[300], ref[300];
    snprintf(out, sizeof out, "%s/o.kvq", dir);
    snprintf(ref, sizeof ref, "%s/ref.kvq", dir);
    for (int prev = 0; prev < 2; prev++)
        for (int k = 0; k < 12; k++) {
            if (prev) assert_int_equal(run("%s/kvq-convert " TINY " %s --weights none > /dev/null 2>&1 && cp %s %s", g_build,
                                           out, out, ref), 0);
            else assert_int_equal(run("rm -f %s", out), 0);
            // start, wait k·15 ms, SIGKILL (the conversion takes ~100-200 ms here)
            assert_int_equal(run("%s/kvq-convert " TINY " %s --weights rtn:4:g128 > /dev/null 2>&1 & p=$!; sleep 0.%03d; "
                                 "kill -9 $p 2>/dev/null; wait $p 2>/dev/null; true", g_build, out, 15 * k + 5), 0);
            struct stat sb;
            if (stat(out, &sb) != 0) { assert_false(prev); continue; } // nothing: fine without a previous file
            kvq_file *f = NULL;
            kvq_err err = {0};
            if (kvq_file_open(out, &f, &err) != KVQ_OK) fail_msg("after a kill at %d ms: %s", 15 * k + 5, err.msg);
            assert_int_equal(kvq_file_verify(f, &err), KVQ_OK); // complete: every digest holds
            kvq_file_close(f);
        }
    assert_int_equal(run("rm -rf %s", dir), 0);
}

// A source file that shrinks during the conversion (its mapped pages past the new end raise
// SIGBUS): one line naming the source, exit 2, no output; the next conversion of the restored
// source to the same output succeeds and removes what the stopped one left. The cut does not
// depend on timing: the converter is stopped (SIGSTOP) as soon as the shard appears in its
// mappings, the shard is cut, and it is continued, so it meets the cut with its tensors unread
// (a fixed sleep stopped nothing once the encoder got fast: the conversion is ~0.2 s here).
static void test_source_shrinks(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-shrink-XXXXXX";
    assert_non_null(mkdtemp(dir));
    int sigbus = 0;
    for (int k = 0; k < 3; k++) {
        assert_int_equal(run("rm -rf %s/src && cp -r " TINY " %s/src", dir, dir), 0);
        int rc = run("%s/kvq-convert -q -t 1 --weights hyperquant:e8:4.0 %s/src %s/o.kvq > %s/out.txt 2> %s/err.txt & p=$!; i=0; "
                     "while [ $i -lt 3000 ] && ! grep -q model.safetensors /proc/$p/maps 2>/dev/null; do i=$((i+1)); done; "
                     "kill -STOP $p 2>/dev/null; truncate -s 3000000 %s/src/model.safetensors; kill -CONT $p 2>/dev/null; wait $p",
                     g_build, dir, dir, dir, dir, dir);
        if (rc == 0) continue; // finished before it was stopped: counted below, as no SIGBUS
        assert_int_equal(rc, 2);
        assert_int_equal(run("test ! -s %s/out.txt && test $(wc -l < %s/err.txt) -eq 1 && grep -q 'src' %s/err.txt && "
                             "test ! -e %s/o.kvq", dir, dir, dir, dir), 0);
        sigbus += run("grep -q SIGBUS %s/err.txt", dir) == 0;
    }
    print_message("source cut during conversion: %d of 3 runs stopped by SIGBUS with one line\n", sigbus);
    assert_true(sigbus >= 2);
    assert_int_equal(run("rm -rf %s/src && cp -r " TINY " %s/src && %s/kvq-convert -q -t 1 --weights rtn:4:g128 %s/src %s/o.kvq && "
                         "test $(ls -A %s | grep -c kvq) -eq 1", dir, dir, g_build, dir, dir, dir), 0);
    assert_int_equal(run("rm -rf %s", dir), 0);
}

// A directory in the output's place: refused before any tensor is converted (-v prints no
// tensor line), one line naming it, exit 2, the directory left as it was.
static void test_output_is_directory(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-odir-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(run("mkdir %s/o.kvq && %s/kvq-convert -v --weights rtn:4:g128 " TINY " %s/o.kvq > %s/out.txt 2> %s/err.txt",
                         dir, g_build, dir, dir, dir), 2);
    assert_int_equal(run("test ! -s %s/out.txt && test $(wc -l < %s/err.txt) -eq 1 && grep -q 'o.kvq: is a directory' %s/err.txt && "
                         "test -d %s/o.kvq && test -z \"$(ls -A %s/o.kvq)\" && test $(ls -A %s | wc -l) -eq 3",
                         dir, dir, dir, dir, dir, dir), 0);
    assert_int_equal(run("rm -rf %s", dir), 0);
}

// No space for the output (a file-size limit, RLIMIT_FSIZE): one line naming the file, exit 2,
// nothing left in the directory (no output, no temporary file).
static void test_write_limit(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-fsize-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(run("(ulimit -f 1000; %s/kvq-convert " TINY " %s/o.kvq --weights rtn:4:g128 > %s/out.txt 2> /tmp/kvq-fsize-err.txt)",
                         g_build, dir, dir), 2);
    assert_int_equal(run("test $(wc -l < /tmp/kvq-fsize-err.txt) -eq 1 && grep -q 'o.kvq.*File too large' /tmp/kvq-fsize-err.txt"), 0);
    assert_int_equal(run("test $(ls -A %s | wc -l) -eq 1", dir), 0); // only out.txt
    assert_int_equal(run("rm -rf %s /tmp/kvq-fsize-err.txt", dir), 0);
}

// A full disk and a read-only destination, on small tmpfs mounts (skipped, saying so, where the
// test cannot mount one: it needs root and a mount namespace that allows it): one line naming the
// output and the system's reason, exit 2, nothing left on the mount.
static void test_full_and_readonly(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-mnt-XXXXXX";
    assert_non_null(mkdtemp(dir));
    if (run("mount -t tmpfs -o size=256k tmpfs %s 2>/dev/null", dir) != 0) {
        rmdir(dir);
        print_message("skipped: cannot mount a tmpfs here (needs root)\n");
        skip();
    }
    // ~5 MB of output into 256 KiB
    int full = run("%s/kvq-convert -q --weights rtn:4:g128 " TINY " %s/o.kvq > /tmp/kvq-mnt-out.txt 2> /tmp/kvq-mnt-err.txt",
                   g_build, dir);
    int left_full = run("test -z \"$(ls -A %s)\"", dir);
    int ro = run("mount -o remount,ro %s && %s/kvq-convert -q --weights rtn:4:g128 " TINY " %s/o.kvq 2> /tmp/kvq-mnt-err2.txt",
                 dir, g_build, dir);
    int left_ro = run("test -z \"$(ls -A %s)\"", dir);
    assert_int_equal(run("umount %s && rmdir %s", dir, dir), 0);
    assert_int_equal(full, 2);
    assert_int_equal(left_full, 0);
    assert_int_equal(run("test ! -s /tmp/kvq-mnt-out.txt && test $(wc -l < /tmp/kvq-mnt-err.txt) -eq 1 && "
                         "grep -q 'o.kvq.*No space left on device' /tmp/kvq-mnt-err.txt"), 0);
    assert_int_equal(ro, 2);
    assert_int_equal(left_ro, 0);
    assert_int_equal(run("test $(wc -l < /tmp/kvq-mnt-err2.txt) -eq 1 && grep -q 'o.kvq.*Read-only file system' "
                         "/tmp/kvq-mnt-err2.txt && rm -f /tmp/kvq-mnt-out.txt /tmp/kvq-mnt-err.txt /tmp/kvq-mnt-err2.txt"), 0);
}

// Files written keep ordinary permissions, 0666 less the umask (mkstemp's 0600 fixed): the .kvq,
// its --record rewrite, kvq-run's logits and the exported model.safetensors, under umask 027.
static void test_permissions(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-perm-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(run("cd %s && printf '\\001\\000\\000\\000' > ids.bin", dir), 0);
    assert_int_equal(run("umask 027 && %s/kvq-convert --weights none " TINY " %s/m.kvq --export-hf %s/hf > /dev/null 2>&1 && "
                         "%s/kvq-verify %s/m.kvq --no-source --record -q > /dev/null 2>&1 && "
                         "%s/kvq-run " TINY " --tokens %s/ids.bin --logits %s/lg.bin > /dev/null 2>&1",
                         g_build, dir, dir, g_build, dir, g_build, dir, dir), 0);
    assert_int_equal(run("umask 027 && %s/kvq-convert -q --export-hf %s/hf2 --max-shard-size 2MB %s/m.kvq", g_build, dir, dir), 0);
    const char *files[] = {"m.kvq", "hf/model.safetensors", "hf/config.json", "lg.bin", "hf2/model.safetensors.index.json",
                           "hf2/model-00001-of-00006.safetensors", "hf2/tokenizer.json"};
    for (int i = 0; i < 7; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        struct stat sb;
        assert_int_equal(stat(p, &sb), 0);
        if ((sb.st_mode & 0777) != 0640) fail_msg("%s: mode %o, expected 640", files[i], sb.st_mode & 0777);
    }
    assert_int_equal(run("rm -rf %s", dir), 0);
}

// A source weight that is NaN (or Inf) is refused naming the tensor and the first index, for a
// lossless codec too (before, "none" stored it and the runtime produced NaN logits).
static void test_nonfinite_source(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-nan-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(run("cp " TINY "/*.json %s/", dir), 0);
    kvq_ckpt *ck = NULL;
    kvq_err err = {0};
    assert_int_equal(kvq_ckpt_open(TINY, &ck, &err), KVQ_OK);
    const size_t n = kvq_ckpt_count(ck);
    kvq_tensor *ts = calloc(n, sizeof *ts);
    void **bufs = calloc(n, sizeof *bufs);
    for (size_t i = 0; i < n; i++) {
        ts[i] = *kvq_ckpt_tensor(ck, i);
        bufs[i] = malloc(ts[i].nbytes);
        memcpy(bufs[i], ts[i].data, ts[i].nbytes);
        ts[i].data = bufs[i];
        if (!strcmp(ts[i].name, "model.layers.1.mlp.up_proj.weight")) {
            assert_int_equal(ts[i].dtype, KVQ_DTYPE_BF16);
            ((uint16_t *)bufs[i])[3 * ts[i].shape[1] + 7] = 0x7fc0; // NaN at row 3, column 7
        }
    }
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[] = {"format", "pt", NULL};
    assert_int_equal(kvq_st_write(path, ts, n, meta, &err), KVQ_OK);
    for (size_t i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(ts);
    kvq_ckpt_close(ck);
    const char *specs[] = {"none", "rtn:4:g128"};
    for (int k = 0; k < 2; k++) {
        char out[300];
        snprintf(out, sizeof out, "%s/o.kvq", dir);
        kvq_convert_opts o = {0};
        o.plan.weights = specs[k];
        o.plan.quantize_embeddings = -1;
        assert_int_equal(kvq_convert(dir, out, &o, NULL, &err), KVQ_ERR_NUMERIC);
        if (!strstr(err.msg, "model.layers.1.mlp.up_proj.weight") || !strstr(err.msg, "row 3, column 7"))
            fail_msg("%s", err.msg);
        struct stat sb;
        assert_int_not_equal(stat(out, &sb), 0); // nothing written
    }
    assert_int_equal(run("rm -rf %s", dir), 0);
}

// --resume: a conversion killed (SIGKILL) at several points, then run again with --resume, writes
// the same bytes as an uninterrupted run, reusing the tensors the journal holds (at least one kill
// point must have left some); no journal is left afterwards. A damaged journal tail and a journal
// written under another recipe are reused only as far as they are valid and the same.
static void test_resume(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-resume-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *args = "-r recipes/hyperquant-e8-4.0.yaml --set 'rules=[{match: \"*.up_proj.weight\", codec: \"qet:4\"}]' " TINY;
    assert_int_equal(run("%s/kvq-convert -q %s %s/ref.kvq", g_build, args, dir), 0);
    uint8_t *ref, *got;
    size_t nref, ngot;
    char p[300], jp[300];
    snprintf(p, sizeof p, "%s/ref.kvq", dir);
    read_all(p, &ref, &nref);
    snprintf(p, sizeof p, "%s/o.kvq", dir);
    snprintf(jp, sizeof jp, "%s/.o.kvq.partial", dir);
    int reused_somewhere = 0;
    // kills at fixed times, and one (k = 5) as soon as the journal holds 3 MiB, which does not
    // depend on the machine's speed: two frames are then complete (the first, the embeddings, is
    // 1.6 MB; a kill inside it leaves nothing to reuse), so tensors are always reused
    const int ms[] = {40, 120, 250, 400, 600, 0};
    for (int k = 0; k < 6; k++) {
        if (ms[k]) assert_int_equal(run("rm -f %s; %s/kvq-convert -q %s %s & p=$!; sleep 0.%03d; kill -9 $p 2>/dev/null; wait $p 2>/dev/null; true",
                                        p, g_build, args, p, ms[k]), 0);
        else assert_int_equal(run("rm -f %s; %s/kvq-convert -q %s %s & p=$!; i=0; while [ $i -lt 20000 ] && "
                                  "[ $(stat -c %%s %s 2>/dev/null || echo 0) -lt 3145728 ]; do i=$((i+1)); done; "
                                  "kill -9 $p 2>/dev/null; wait $p 2>/dev/null; true", p, g_build, args, p, jp), 0);
        struct stat sb;
        int had_journal = stat(jp, &sb) == 0;
        assert_int_equal(run("%s/kvq-convert --resume -v %s %s 2> %s/log.txt", g_build, args, p, dir), 0);
        read_all(p, &got, &ngot);
        assert_int_equal(ngot, nref);
        if (memcmp(got, ref, nref)) fail_msg("resumed after a kill at %d ms: the bytes differ", ms[k]);
        free(got);
        assert_int_not_equal(stat(jp, &sb), 0); // the journal is gone
        int reused = run("grep -q '(resumed)' %s/log.txt", dir) == 0;
        if (ms[k]) print_message("  kill at %d ms: journal %s, tensors reused: %s\n", ms[k], had_journal ? "left" : "none",
                                 reused ? "yes" : "no");
        else {
            print_message("  kill at 3 MiB of journal: tensors reused: %s\n", reused ? "yes" : "no");
            assert_true(reused);
        }
        reused_somewhere |= reused;
    }
    assert_true(reused_somewhere);
    // a journal cut short in the middle of a frame, then one written under another weights codec
    assert_int_equal(run("%s/kvq-convert -q %s %s & p=$!; sleep 0.25; kill -9 $p; wait $p 2>/dev/null; "
                         "test -f %s && truncate -s -1000 %s; true", g_build, args, p, jp, jp), 0);
    assert_int_equal(run("%s/kvq-convert -q --resume %s %s", g_build, args, p), 0);
    read_all(p, &got, &ngot);
    assert_true(ngot == nref && !memcmp(got, ref, nref));
    free(got);
    assert_int_equal(run("rm -f %s; %s/kvq-convert -q --weights rtn:4:g128 " TINY " %s & p=$!; sleep 0.1; kill -9 $p; "
                         "wait $p 2>/dev/null; true", p, g_build, p), 0);
    assert_int_equal(run("%s/kvq-convert -q --resume %s %s", g_build, args, p), 0);
    read_all(p, &got, &ngot);
    assert_true(ngot == nref && !memcmp(got, ref, nref));
    free(got);
    free(ref);
    assert_int_equal(run("rm -rf %s", dir), 0);
}

// Progress as people see it: not on a terminal, one line per tensor (index, name, spec, bits, SNR)
// and a summary naming the KV codec; -q prints nothing; on a terminal (script(1) gives one) a bar
// redrawn in place with tensors, bytes, rate and ETA.
static void test_progress(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-prog-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(run("%s/kvq-convert --weights rtn:4:g128 --kv octopus:3 --kv-window 32 " TINY " %s/a.kvq 2> %s/e.txt",
                         g_build, dir, dir), 0);
    assert_int_equal(run("test $(grep -c '^\\[ *[0-9]*/39\\] ' %s/e.txt) -eq 39 && "
                         "grep -q 'model.layers.0.mlp.down_proj.weight *rtn:4:g128 *4.2[0-9]* bits/w  SNR  *[0-9.]* dB' %s/e.txt && "
                         "grep -q 'model.norm.weight .*SNR *exact' %s/e.txt && "
                         "tail -1 %s/e.txt | grep -q 'KV cache octopus:3 (window 32)'", dir, dir, dir, dir), 0);
    assert_int_equal(run("%s/kvq-convert -q --weights rtn:4:g128 " TINY " %s/b.kvq 2> %s/q.txt && test ! -s %s/q.txt", g_build,
                         dir, dir, dir), 0);
    if (run("command -v script >/dev/null") == 0) {
        assert_int_equal(run("script -qc '%s/kvq-convert --weights rtn:4:g128 " TINY " %s/c.kvq' /dev/null > %s/t.txt", g_build,
                             dir, dir), 0);
        assert_int_equal(run("grep -q '39/39 tensors  10.1/10.1 MB .* MB/s  ETA 0:00' %s/t.txt && ! grep -q '^\\[ *1/39\\] ' %s/t.txt",
                             dir, dir), 0);
    } else print_message("  script(1) not found: the terminal bar is not checked\n");
    assert_int_equal(run("rm -rf %s", dir), 0);
}

// -t N spreads the codecs over N threads; the bytes written do not depend on N (every codec at
// once: hyperquant, qet, rtn, none, and a KV codec).
static void test_threads_identical(void **st) {
    (void)st;
    char dir[] = "/tmp/kvq-thr-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const int nt[] = {1, 2, 3};
    for (int i = 0; i < 3; i++)
        assert_int_equal(run("%s/kvq-convert -q -t %d --weights hyperquant:e8:4.0 --quantize-embeddings --set 'rules=[{match: \"*.up_proj.weight\", "
                             "codec: \"qet:4\"}, {match: \"*.down_proj.weight\", codec: \"rtn:4:g128\"}]' --kv octopus:3 "
                             TINY " %s/t%d.kvq", g_build, nt[i], dir, nt[i]), 0);
    uint8_t *a, *b;
    size_t na, nb;
    char p[300];
    snprintf(p, sizeof p, "%s/t1.kvq", dir);
    read_all(p, &a, &na);
    for (int i = 1; i < 3; i++) {
        snprintf(p, sizeof p, "%s/t%d.kvq", dir, nt[i]);
        read_all(p, &b, &nb);
        assert_int_equal(na, nb);
        if (memcmp(a, b, na)) fail_msg("-t 1 and -t %d wrote different bytes", nt[i]);
        free(b);
    }
    free(a);
    assert_int_equal(run("rm -rf %s", dir), 0);
}

int main(int argc, char **argv) {
    (void)argc;
    char *a = strdup(argv[0]);
    snprintf(g_build, sizeof g_build, "%s", dirname(dirname(a))); // <build>/tests/test_convert
    free(a);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_lossless),
        cmocka_unit_test(test_weights_source),
        cmocka_unit_test(test_shared_models_lossless),
        cmocka_unit_test(test_deterministic_and_failures),
        cmocka_unit_test(test_recipes),
        cmocka_unit_test(test_shipped_recipes),
        cmocka_unit_test(test_threads_identical),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_progress),
        cmocka_unit_test(test_export_hf),
        cmocka_unit_test(test_export_hf_python),
        cmocka_unit_test(test_tools),
        cmocka_unit_test(test_source_checks),
        cmocka_unit_test(test_nonfinite_source),
        cmocka_unit_test(test_kill_anywhere),
        cmocka_unit_test(test_source_shrinks),
        cmocka_unit_test(test_output_is_directory),
        cmocka_unit_test(test_write_limit),
        cmocka_unit_test(test_full_and_readonly),
        cmocka_unit_test(test_permissions),
        cmocka_unit_test(test_numeric_options),
        cmocka_unit_test(test_recipe_seed_reaches_kv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
