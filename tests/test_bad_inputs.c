// The kept corpus of broken inputs (libzip regress/ style): every case of tests/data/bad/cases.txt
// runs one tool on one broken input (a file kept in tests/data/bad/, a .kvq made from a good one
// by changing its manifest, a checkpoint directory with one file replaced, a truncated file, or
// a bad option value) and must end with the expected exit code, nothing on stdout, exactly one
// line on stderr holding the expected text (and, for a file input, the file's name), and no file
// left in the output directory. The format of cases.txt is described at its top.
#include <dirent.h>
#include <libgen.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "formats/kvqfile.h"
#include "tests/testutil.h"

#define BAD "tests/data/bad"
#define FIXTURE "tests/fixtures/st/sharded_ok"

static char g_build[256], g_dir[64], g_base[128], g_tokbase[128], g_hqbase[128];

// Sets (or, for value "~", deletes) the value at a '/'-separated path of object keys and array
// indices. @return 0, or -1 when the path does not lead anywhere.
static int json_set_path(json_t *root, const char *path, json_t *val) {
    char *p = strdup(path), *save = NULL, *seg = strtok_r(p, "/", &save), *next;
    json_t *cur = root;
    int rc = -1;
    while (seg) {
        next = strtok_r(NULL, "/", &save);
        int is_idx = json_is_array(cur);
        size_t idx = is_idx ? strtoul(seg, NULL, 10) : 0;
        if (!next) {
            if (!val) rc = is_idx ? json_array_remove(cur, idx) : json_object_del(cur, seg);
            else rc = is_idx ? json_array_set(cur, idx, val) : json_object_set(cur, seg, val);
            break;
        }
        cur = is_idx ? json_array_get(cur, idx) : json_object_get(cur, seg);
        if (!cur) break;
        seg = next;
    }
    free(p);
    return rc;
}

// Makes the case's input; writes its path into in ("" for none).
static void make_input(const char *name, const char *spec, char *in, size_t cap) {
    in[0] = 0;
    if (!strcmp(spec, "-")) return;
    if (!strncmp(spec, "file:", 5)) {
        snprintf(in, cap, BAD "/%s", spec + 5);
        assert_int_equal(access(in, R_OK), 0);
    } else if (!strncmp(spec, "bytes:", 6)) {
        snprintf(in, cap, "%s/%s.kvq", g_dir, name);
        assert_int_equal(run("head -c %ld %s > %s", strtol(spec + 6, NULL, 10), g_base, in), 0);
    } else if (!strncmp(spec, "kvq:", 4) || !strncmp(spec, "hqb:", 4)) { // hqb: the row-blocked base
        snprintf(in, cap, "%s/%s.kvq", g_dir, name);
        assert_int_equal(run("cp %s %s", spec[0] == 'h' ? g_hqbase : g_base, in), 0);
        kvq_file *f = NULL;
        kvq_err err = {0};
        assert_int_equal(kvq_file_open(in, &f, &err), KVQ_OK);
        json_t *m = json_deep_copy(kvq_file_manifest(f));
        kvq_file_close(f);
        char *s = strdup(spec + 4), *save = NULL;
        for (char *op = strtok_r(s, ";", &save); op; op = strtok_r(NULL, ";", &save)) {
            char *eq = strchr(op, '=');
            assert_non_null(eq);
            *eq = 0;
            json_t *v = NULL; // JSON, ~ (delete) or @PATH (a copy of the value at PATH)
            if (eq[1] == '@') {
                char *path = strdup(eq + 2), *sv = NULL;
                json_t *cur = m;
                for (char *seg = strtok_r(path, "/", &sv); seg && cur; seg = strtok_r(NULL, "/", &sv))
                    cur = json_is_array(cur) ? json_array_get(cur, strtoul(seg, NULL, 10)) : json_object_get(cur, seg);
                free(path);
                v = json_deep_copy(cur);
            } else if (strcmp(eq + 1, "~")) {
                v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
            }
            if (strcmp(eq + 1, "~")) assert_non_null(v);
            if (json_set_path(m, op, v)) fail_msg("case %s: no path %s in the manifest", name, op);
            json_decref(v);
        }
        free(s);
        assert_int_equal(kvq_file_rewrite_manifest(in, m, &err), KVQ_OK);
        json_decref(m);
    } else if (!strncmp(spec, "entry:", 6)) { // ENTRY=NAME: the base with a tokenizer, one entry's bytes replaced
        snprintf(in, cap, "%s/%s.kvq", g_dir, name);
        char *s = strdup(spec + 6), *eq = strchr(s, '='), src[300];
        assert_non_null(eq);
        *eq = 0;
        snprintf(src, sizeof src, BAD "/%s", eq + 1);
        size_t bn = 0;
        char *bytes = slurp(src, &bn);
        assert_non_null(bytes);
        kvq_file *f = NULL;
        kvq_writer *w = NULL;
        kvq_err err = {0};
        assert_int_equal(kvq_file_open(g_tokbase, &f, &err), KVQ_OK);
        json_t *m = json_deep_copy(kvq_file_manifest(f));
        json_object_del(m, "entries"); // the writer makes the table (sizes, digests) anew
        assert_int_equal(kvq_writer_open(in, &w, &err), KVQ_OK);
        int replaced = 0;
        const char *en;
        json_t *ev;
        json_object_foreach(json_object_get(kvq_file_manifest(f), "entries"), en, ev) {
            const void *d = bytes;
            size_t n = bn;
            int mine = !strcmp(en, s);
            if (!mine && kvq_file_entry(f, en, &d, &n, &err)) fail_msg("case %s: %s", name, err.msg);
            kvq_entry_mode mode = json_is_true(json_object_get(ev, "zstd")) ? KVQ_ENTRY_ZSTD_AUTO : KVQ_ENTRY_RAW;
            if (kvq_writer_add(w, en, d, n, mode, NULL, &err)) fail_msg("case %s: %s", name, err.msg);
            replaced += mine;
        }
        if (replaced != 1) fail_msg("case %s: no entry '%s' in the base", name, s);
        if (kvq_writer_commit(w, m, &err)) fail_msg("case %s: %s", name, err.msg);
        json_decref(m);
        kvq_file_close(f);
        free(bytes);
        free(s);
    } else if (!strncmp(spec, "ckpt:", 5)) { // FILE=NAME[;FILE=NAME...] over a copy of the fixture
        snprintf(in, cap, "%s/%s", g_dir, name);
        assert_int_equal(run("rm -rf %s && cp -r " FIXTURE " %s", in, in), 0);
        char *s = strdup(spec + 5), *save = NULL;
        for (char *op = strtok_r(s, ";", &save); op; op = strtok_r(NULL, ";", &save)) {
            char *eq = strchr(op, '=');
            assert_non_null(eq);
            *eq = 0;
            if (!strcmp(eq + 1, "~")) assert_int_equal(run("rm -f %s/%s", in, op), 0);
            else assert_int_equal(run("cp " BAD "/%s %s/%s", eq + 1, in, op), 0); // NAME relative to BAD
        }
        free(s);
    } else {
        fail_msg("case %s: unknown input kind '%s'", name, spec);
    }
}

// Replaces every {in}, {out}, {T} (the scratch directory) and {base} (a good .kvq) of cmd.
static void expand(const char *cmd, const char *in, const char *out, char *dst, size_t cap) {
    size_t n = 0;
    for (const char *p = cmd; *p && n + 1 < cap;) {
        const char *rep = NULL;
        size_t skip = 0;
        if (!strncmp(p, "{in}", 4)) rep = in, skip = 4;
        else if (!strncmp(p, "{out}", 5)) rep = out, skip = 5;
        else if (!strncmp(p, "{T}", 3)) rep = g_dir, skip = 3;
        else if (!strncmp(p, "{base}", 6)) rep = g_base, skip = 6;
        if (rep) {
            n += (size_t)snprintf(dst + n, cap - n, "%s", rep);
            p += skip;
        } else {
            dst[n++] = *p++;
        }
    }
    dst[n < cap ? n : cap - 1] = 0;
}

// For a ckpt: input, a line naming one of the replaced files (a shard's messages name the shard,
// as safetensors.c writes them) names the input too.
static int names_replaced(const char *spec, const char *line) {
    if (strncmp(spec, "ckpt:", 5)) return 0;
    char *s = strdup(spec + 5), *save = NULL;
    int hit = 0;
    for (char *op = strtok_r(s, ";", &save); op && !hit; op = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(op, '=');
        if (eq) *eq = 0;
        hit = strstr(line, op) != NULL;
    }
    free(s);
    return hit;
}

static void test_cases(void **st) {
    FILE *f = fopen(BAD "/cases.txt", "r");
    assert_non_null(f);
    char line[2048];
    int n = 0, lineno = 0, failed = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        char *fld[5], *save = NULL;
        int nf = 0;
        for (char *t = strtok_r(line, "\t", &save); t && nf < 5; t = strtok_r(NULL, "\t", &save)) fld[nf++] = t;
        if (nf != 5) fail_msg("cases.txt:%d: expected 5 tab-separated fields, got %d", lineno, nf);
        const char *name = fld[0], *expect = fld[2];
        int want = atoi(fld[1]);
        char in[512], out[512], cmd[4096], full[8192];
        make_input(name, fld[3], in, sizeof in);
        snprintf(out, sizeof out, "%s/out/%s.kvq", g_dir, name);
        expand(fld[4], in, out, cmd, sizeof cmd);
        assert_int_equal(run("rm -rf %s/out && mkdir %s/out", g_dir, g_dir), 0);
        snprintf(full, sizeof full, "( %s/%s ) > %s/stdout 2> %s/stderr", g_build, cmd, g_dir, g_dir);
        int rc = run("%s", full);
        char path[300];
        snprintf(path, sizeof path, "%s/stderr", g_dir);
        size_t en = 0;
        char *err = slurp(path, &en);
        assert_non_null(err);
        err = realloc(err, en + 1);
        err[en] = 0;
        int lines = 0;
        for (size_t i = 0; i < en; i++) lines += err[i] == '\n';
        const char *why = NULL;
        char *bn = in[0] ? strdup(in) : NULL;
        if (rc != want) why = "exit code";
        else if (run("test ! -s %s/stdout", g_dir)) why = "output on stdout";
        else if (lines != 1 || err[en - 1] != '\n') why = "not exactly one line on stderr";
        else if (!strstr(err, expect)) why = "expected text missing";
        else if (want && bn && !strstr(err, basename(bn)) && !names_replaced(fld[3], err)) why = "the input file is not named";
        else if (run("test -z \"$(ls -A %s/out)\"", g_dir)) why = "a file was left in the output directory";
        err[strcspn(err, "\n")] = 0;
        print_message("bad\t%s\t%d\t%s\n", name, rc, err);
        if (why) {
            print_message("  FAILED (%s): %s: want exit %d and '%s'\n", why, cmd, want, expect);
            failed++;
        }
        free(bn);
        free(err);
        n++;
    }
    fclose(f);
    print_message("%d bad-input cases, %d failed\n", n, failed);
    assert_true(n > 0);
    assert_int_equal(failed, 0);
}

static int setup(void **st) {
    snprintf(g_dir, sizeof g_dir, "/tmp/kvq-bad-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_base, sizeof g_base, "%s/base.kvq", g_dir);
    snprintf(g_tokbase, sizeof g_tokbase, "%s/tokbase.kvq", g_dir);
    snprintf(g_hqbase, sizeof g_hqbase, "%s/hqbase.kvq", g_dir);
    // the row-blocked base: the tied 10 × 8 table as HyperQuant params v 2, blocks of 4, 4 and 2
    // rows, with an allocation record (block_rows, block_shares); checked good by all three tools
    // (and a tokenizer, so that kvq-run gets as far as the weights)
    if (run("cp -r " FIXTURE " %s/hqfix && cp " BAD "/tokenizer-good.json %s/hqfix/tokenizer.json && "
            "%s/kvq-convert -q --weights none --quantize-embeddings --set 'rules=[{regex: embed_tokens, codec: "
            "\"hyperquant:e8:3:blocks=4@3/4/5\"}]' %s/hqfix %s && rm -r %s/hqfix", g_dir, g_dir, g_build, g_dir, g_hqbase, g_dir))
        return -1;
    kvq_file *f = NULL;
    kvq_err err = {0};
    if (kvq_file_open(g_hqbase, &f, &err)) return -1;
    json_t *m = json_deep_copy(kvq_file_manifest(f));
    kvq_file_close(f);
    json_t *t0 = json_array_get(json_object_get(m, "tensors"), 0);
    json_object_set_new(t0, "allocation", json_pack("{s:f,s:f,s:i,s:[f,f,f]}", "sensitivity", 1.5, "output_error", 0.25,
                                                    "block_rows", 4, "block_shares", 0.5, 0.375, 0.125));
    int bad = strcmp(json_string_value(json_object_get(t0, "name")), "model.embed_tokens.weight") ||
              kvq_file_rewrite_manifest(g_hqbase, m, &err);
    json_decref(m);
    if (bad || run("%s/kvq-verify -q %s --no-source > /dev/null && %s/kvq-inspect %s > /dev/null && "
                   "%s/kvq-run %s -p hi -n 1 > /dev/null 2>&1", g_build, g_hqbase, g_build, g_hqbase, g_build, g_hqbase))
        return -1;
    return run("%s/kvq-convert -q --weights none --kv qturbo:3 " FIXTURE " %s", g_build, g_base) || // with a KV section
           run("cp -r " FIXTURE " %s/tokfix && cp " BAD "/tokenizer-good.json %s/tokfix/tokenizer.json && "
               "%s/kvq-convert -q --weights none %s/tokfix %s && rm -r %s/tokfix", g_dir, g_dir, g_build, g_dir, g_tokbase, g_dir);
}

static int teardown(void **st) { return run("rm -rf %s", g_dir); }

int main(int argc, char **argv) {
    (void)argc;
    char *a = strdup(argv[0]);
    snprintf(g_build, sizeof g_build, "%s", dirname(dirname(a)));
    free(a);
    if (g_build[0] != '/') { // the commands run from the repository root, as the suites do
        char cwd[200];
        if (getcwd(cwd, sizeof cwd)) {
            char t[256];
            snprintf(t, sizeof t, "%s/%s", cwd, g_build);
            snprintf(g_build, sizeof g_build, "%s", t);
        }
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cases)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
