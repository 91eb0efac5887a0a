// Faults while writing: a tool killed (SIGKILL) at many points through `kvq-verify --record`,
// `kvq-convert --export-hf` and `kvq-run --logits` leaves at each destination either the
// previous complete file or the new complete one, never a partial one; two conversions to one
// output at once: the second is refused (exit 2, one line) and the first's file is intact. Kill
// points spread over an unkilled run's measured duration, so they land inside the run on any
// machine. What a kill leaves beside a destination is removed by the next run of the same
// command (formats/tmpfile.h). Needs tests/models/kvq-tiny-llama (../shared); skips without it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <libgen.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "formats/kvqfile.h"
#include "formats/safetensors.h"
#include "tests/testutil.h"

#define TINY "tests/models/kvq-tiny-llama"
#define POINTS 12

static char g_build[256], g_top[64], g_dir[80];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Runs cmd to completion; its wall time in seconds (asserting exit 0).
static double timed(const char *cmd) {
    double t0 = now();
    assert_int_equal(run("%s > /dev/null 2>&1", cmd), 0);
    return now() - t0;
}

// Starts cmd, SIGKILLs it after us microseconds (if still running), waits for it.
static void kill_after(const char *cmd, long us) {
    assert_int_equal(run("%s > /dev/null 2>&1 & p=$!; sleep %ld.%06ld; kill -9 $p 2>/dev/null; wait $p 2>/dev/null; true",
                         cmd, us / 1000000, us % 1000000), 0);
}

static int same_file(const char *a, const char *b) { return run("cmp -s %s %s", a, b) == 0; }

// Names a killed writer left beside its destination (temporary files: names that were not in
// dir before the run, other than the destination itself): counted, reported and removed, so each
// point starts clean. snap() records the names before the run.
static void snap(const char *dir) { assert_int_equal(run("ls -A %s > %s/../faults-before.txt", dir, dir), 0); }

static int stray(const char *dir, const char *dest) {
    char list[300];
    snprintf(list, sizeof list, "%s/../faults-new.txt", dir);
    assert_int_equal(run("ls -A %s | grep -vxF -f %s/../faults-before.txt | grep -vx '%s' > %s; true", dir, dir, dest, list), 0);
    int n = run("exit $(wc -l < %s)", list);
    if (n > 0) {
        run("sed 's/^/  left by a kill: /' %s", list);
        assert_int_equal(run("cd %s && xargs rm -rf < %s", dir, list), 0);
    }
    return n;
}

// What a kill left (names, counted as stray() does but kept), then the next, unkilled run
// (next: a command): it removes the killed run's temporaries (formats/tmpfile.h), so that
// nothing new is left after it, which is asserted. @return the names the kill left.
static int left_then_next_run(const char *dir, const char *dest, const char *next) {
    char list[300];
    snprintf(list, sizeof list, "%s/../faults-new.txt", dir);
    assert_int_equal(run("ls -A %s | grep -vxF -f %s/../faults-before.txt | grep -vx '%s' > %s; true", dir, dir, dest, list), 0);
    int n = run("exit $(wc -l < %s)", list);
    if (n > 0) {
        run("sed 's/^/  left by a kill: /' %s", list);
        assert_int_equal(run("%s > /dev/null 2>&1", next), 0);
        int after = stray(dir, dest);
        if (after) fail_msg("the next run left %d names beside %s/%s", after, dir, dest);
    }
    return n;
}

static int have_model(void) {
    if (access(TINY "/config.json", R_OK) == 0) return 1;
    print_message("skipped: " TINY " absent (../shared)\n");
    return 0;
}

// kvq-verify --record rewrites the .kvq in place with a verification record (--no-source: the
// integrity check, then the rewrite, which then takes a good share of the run).
static void test_kill_verify_record(void **st) {
    if (!have_model()) { skip(); return; }
    char m[128], prev[128], cmd[1024];
    snprintf(m, sizeof m, "%s/m.kvq", g_dir);
    snprintf(prev, sizeof prev, "%s/prev.kvq", g_dir);
    assert_int_equal(run("%s/kvq-convert -q " TINY " %s --weights rtn:4:g128 > /dev/null", g_build, prev), 0);
    snprintf(cmd, sizeof cmd, "%s/kvq-verify %s --record -q --no-source", g_build, m);
    assert_int_equal(run("cp %s %s", prev, m), 0);
    double T = timed(cmd);
    int old = 0, recorded = 0, left = 0;
    for (int k = 0; k < POINTS; k++) {
        assert_int_equal(run("cp %s %s", prev, m), 0);
        snap(g_dir);
        kill_after(cmd, (long)(1e6 * T * (k + 0.5) / (POINTS - 2)));
        kvq_file *f = NULL;
        kvq_err err = {0};
        if (kvq_file_open(m, &f, &err) != KVQ_OK) fail_msg("killed at point %d: %s", k, err.msg);
        assert_int_equal(kvq_file_verify(f, &err), KVQ_OK);
        int has = json_object_get(kvq_file_manifest(f), "verification") != NULL;
        kvq_file_close(f);
        if (!has) assert_true(same_file(m, prev)); // untouched, byte for byte
        old += !has, recorded += has;
        char next[1200];
        snprintf(next, sizeof next, "cp %s %s && %s", prev, m, cmd);
        left += left_then_next_run(g_dir, "m.kvq", next);
    }
    print_message("verify --record (%.2f s unkilled), %d kills: %d previous file, %d with the record, %d temporary names "
                  "left by kills, all removed by the next run\n",
                  T, POINTS, old, recorded, left);
}

// kvq-convert --export-hf --force over a previous export of another model: each file of the
// directory is the previous one or the new one, whole.
static void test_kill_export_hf(void **st) {
    if (!have_model()) { skip(); return; }
    char a[128], b[128], ra[128], rb[128], out[128], cmd[1024];
    snprintf(a, sizeof a, "%s/a.kvq", g_dir);
    snprintf(b, sizeof b, "%s/b.kvq", g_dir);
    snprintf(ra, sizeof ra, "%s/ref-a", g_dir);
    snprintf(rb, sizeof rb, "%s/ref-b", g_dir);
    snprintf(out, sizeof out, "%s/hf", g_dir);
    assert_int_equal(run("%s/kvq-convert -q " TINY " %s --weights none > /dev/null", g_build, a), 0);
    assert_int_equal(run("%s/kvq-convert -q " TINY " %s --weights rtn:4:g128 > /dev/null", g_build, b), 0);
    assert_int_equal(run("%s/kvq-convert -q --export-hf %s %s && %s/kvq-convert -q --export-hf %s %s", g_build, ra, a,
                         g_build, rb, b), 0);
    char fa[300], fb[300];
    snprintf(fa, sizeof fa, "%s/model.safetensors", ra);
    snprintf(fb, sizeof fb, "%s/model.safetensors", rb);
    assert_false(same_file(fa, fb)); // the two exports differ, so a mix would show
    snprintf(cmd, sizeof cmd, "%s/kvq-convert -q --force --export-hf %s %s", g_build, out, b);
    assert_int_equal(run("rm -rf %s && cp -r %s %s", out, ra, out), 0);
    double T = timed(cmd);
    static const char *const files[] = {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json"};
    int n_old = 0, n_new = 0, n_none = 0, left = 0;
    for (int k = 0; k < POINTS; k++) {
        assert_int_equal(run("rm -rf %s && cp -r %s %s", out, ra, out), 0);
        snap(out);
        kill_after(cmd, (long)(1e6 * T * (k + 0.5) / (POINTS - 2)));
        for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
            char p[300], pa[300], pb[300];
            snprintf(p, sizeof p, "%s/%s", out, files[i]);
            snprintf(pa, sizeof pa, "%s/%s", ra, files[i]);
            snprintf(pb, sizeof pb, "%s/%s", rb, files[i]);
            if (access(p, F_OK)) { n_none++; continue; }
            int is_old = same_file(p, pa), is_new = same_file(p, pb);
            if (!is_old && !is_new) fail_msg("killed at point %d: %s is neither the previous nor the new file", k, p);
            n_old += is_old && !is_new, n_new += is_new && !is_old;
        }
        left += left_then_next_run(out, "", cmd);
    }
    print_message("export-hf (%.2f s unkilled), %d kills x 5 files: %d previous, %d new (files that differ between the "
                  "two exports), %d absent, %d temporary names left by kills, all removed by the next run\n",
                  T, POINTS, n_old, n_new, n_none, left);
    assert_true(n_old > 0); // some kills came before the export replaced anything
}

// kvq-run --logits over a previous logits file of fewer tokens.
static void test_kill_run_logits(void **st) {
    if (!have_model()) { skip(); return; }
    char m[128], ids[128], ids2[128], lg[128], ref[128], prev[128], cmd[1024];
    snprintf(m, sizeof m, "%s/r.kvq", g_dir);
    snprintf(ids, sizeof ids, "%s/ids.bin", g_dir);
    snprintf(ids2, sizeof ids2, "%s/ids2.bin", g_dir);
    snprintf(lg, sizeof lg, "%s/lg.bin", g_dir);
    snprintf(ref, sizeof ref, "%s/lg-ref.bin", g_dir);
    snprintf(prev, sizeof prev, "%s/lg-prev.bin", g_dir);
    assert_int_equal(run("%s/kvq-convert -q " TINY " %s --weights none > /dev/null", g_build, m), 0);
    assert_int_equal(run("head -c 512 tests/models/kvq-tiny-llama/reference/tokens_i32.bin > %s 2>/dev/null || "
                         "python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack(\"<128i\", *range(1, 129)))' > %s",
                         ids, ids), 0);
    assert_int_equal(run("head -c 16 %s > %s", ids, ids2), 0);
    assert_int_equal(run("%s/kvq-run %s --tokens %s --logits %s > /dev/null 2>&1 && "
                         "%s/kvq-run %s --tokens %s --logits %s > /dev/null 2>&1", g_build, m, ids, ref, g_build, m, ids2, prev), 0);
    assert_false(same_file(ref, prev));
    snprintf(cmd, sizeof cmd, "%s/kvq-run %s --tokens %s --logits %s -t 1", g_build, m, ids, lg);
    assert_int_equal(run("cp %s %s", prev, lg), 0);
    double T = timed(cmd);
    assert_true(same_file(lg, ref)); // -t 1 gives the same logits
    int old = 0, fresh = 0, left = 0;
    for (int k = 0; k < POINTS; k++) {
        assert_int_equal(run("cp %s %s", prev, lg), 0);
        snap(g_dir);
        kill_after(cmd, (long)(1e6 * T * (k + 0.5) / (POINTS - 2)));
        int is_old = same_file(lg, prev), is_new = same_file(lg, ref);
        if (!is_old && !is_new) fail_msg("killed at point %d: %s is neither the previous nor the new logits", k, lg);
        old += is_old, fresh += is_new;
        left += left_then_next_run(g_dir, "lg.bin", cmd);
    }
    print_message("run --logits (%.2f s unkilled), %d kills: %d previous file, %d new, %d temporary names left by kills, "
                  "all removed by the next run\n", T, POINTS,
                  old, fresh, left);
}

// Two conversions to one output at once: the later one finds the first's journal locked and
// stops with one line (exit 2); the first finishes and its file is whole. Repeated with the
// second started at several offsets.
static void test_two_writers(void **st) {
    if (!have_model()) { skip(); return; }
    char o[128];
    snprintf(o, sizeof o, "%s/two.kvq", g_dir);
    int refused = 0, both = 0;
    for (int k = 0; k < 4; k++) {
        assert_int_equal(run("rm -f %s", o), 0);
        // k = 0 does not depend on timing: the first stops itself holding the journal's lock
        // (KVQ_TEST_STOP_LOCKED; polling for the journal raced a fast first writer on a loaded
        // box), the second runs, the first is continued; k = 1..3 start the second after a sleep
        int rc = k == 0 ? run("KVQ_TEST_STOP_LOCKED=1 %s/kvq-convert -q " TINY " %s --weights rtn:4:g128 > /dev/null 2> %s/a.err & p=$!; "
                              "i=0; while [ $i -lt 3000 ] && [ \"$(cut -d' ' -f3 /proc/$p/stat)\" != T ]; do i=$((i+1)); sleep 0.02; done; "
                              "%s/kvq-convert -q " TINY " %s --weights none > /dev/null 2> %s/b.err; b=$?; kill -CONT $p; wait $p; a=$?; "
                              "exit $((a * 16 + b))", g_build, o, g_dir, g_build, o, g_dir)
                        : run("%s/kvq-convert -q " TINY " %s --weights rtn:4:g128 > /dev/null 2> %s/a.err & p=$!; sleep 0.%d; "
                              "%s/kvq-convert -q " TINY " %s --weights none > /dev/null 2> %s/b.err; b=$?; wait $p; a=$?; "
                              "exit $((a * 16 + b))", g_build, o, g_dir, 2 * k - 1, g_build, o, g_dir);
        int a = rc / 16, b = rc % 16;
        assert_int_equal(a, 0);
        if (k == 0) assert_int_equal(b, 2); // it ran while the first was stopped mid-write
        if (b == 2) {
            refused++;
            assert_int_equal(run("test $(wc -l < %s/b.err) -eq 1 && grep -q 'another kvq-convert is writing this output' %s/b.err",
                                 g_dir, g_dir), 0);
            kvq_file *f = NULL;
            kvq_err err = {0};
            assert_int_equal(kvq_file_open(o, &f, &err), KVQ_OK);
            assert_int_equal(kvq_file_verify(f, &err), KVQ_OK);
            size_t i;
            const json_t *t;
            int n_rtn = 0; // the first's file (rtn), not the second's (none)
            json_array_foreach(json_object_get(kvq_file_manifest(f), "tensors"), i, t)
                n_rtn += !strcmp(json_string_value(json_object_get(json_object_get(t, "codec"), "name")), "rtn");
            assert_true(n_rtn > 0);
            kvq_file_close(f);
        } else {
            assert_int_equal(b, 0); // the first had finished: the second is an ordinary later conversion
            both++;
        }
        assert_int_equal(run("test -z \"$(ls -A %s | grep '^\\.two')\"", g_dir), 0); // no journal left
    }
    print_message("two writers: %d refused, %d ran after the first finished\n", refused, both);
    assert_true(refused > 0);
}

static int setup(void **st) {
    snprintf(g_top, sizeof g_top, "/tmp/kvq-faults-XXXXXX"); // g_dir inside, the name lists beside it
    if (!mkdtemp(g_top)) return -1;
    snprintf(g_dir, sizeof g_dir, "%s/w", g_top);
    return mkdir(g_dir, 0700);
}

static int teardown(void **st) { return run("rm -rf %s", g_top); }

int main(int argc, char **argv) {
    (void)argc;
    char *a = strdup(argv[0]);
    snprintf(g_build, sizeof g_build, "%s", dirname(dirname(a)));
    free(a);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_verify_record), cmocka_unit_test(test_kill_export_hf),
        cmocka_unit_test(test_kill_run_logits),    cmocka_unit_test(test_two_writers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
