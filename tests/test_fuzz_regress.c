// Replays every kept fuzz input (tests/fuzz/regress/<target>/: the inputs that once crashed a
// target, crash-*, and small valid seeds, seed-*) through the fuzz targets' own entry points,
// compiled here without libFuzzer (tests/fuzz/fuzz.h), so gcc and `make asan` run them too.
// A target aborts on a broken invariant; ASan/UBSan report what the fixes removed. Each
// target's directory must hold at least one input.
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/fuzz/fuzz.h"
#include "tests/testutil.h"

typedef int (*target_fn)(const uint8_t *, size_t);

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void replay(const char *name, target_fn fn) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fuzz/regress/%s", name);
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *files[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512)
        if (e->d_name[0] != '.') files[n++] = strdup(e->d_name);
    closedir(d);
    qsort(files, n, sizeof *files, name_cmp);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        size_t sz = 0;
        uint8_t *p = slurp(path, &sz);
        assert_non_null(p);
        assert_int_equal(fn(p, sz), 0);
        free(p);
        free(files[i]);
    }
    print_message("fuzz_%s: %d inputs replayed\n", name, n);
}

#define KVQ_FUZZ_TEST_FN(name) \
    static void test_##name(void **st) { replay(#name, kvq_fuzz_##name); }
KVQ_FUZZ_LIST(KVQ_FUZZ_TEST_FN)
#define KVQ_FUZZ_TEST_ENTRY(name) cmocka_unit_test(test_##name),

int main(void) {
    const struct CMUnitTest tests[] = {KVQ_FUZZ_LIST(KVQ_FUZZ_TEST_ENTRY)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
