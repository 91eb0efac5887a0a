// Tests for the .kvq container (formats/kvqfile.c): round trip, 64-byte alignment
// of every entry checked against libzip's own reading of the archive, zstd marking,
// determinism, manifest rewrite, broken files (flipped byte, truncation, unknown
// version, manifest not JSON), kvq's own zip structure check (formats/zipcheck.c) against
// the writer's table and under every single-byte change of the central directory, and that
// failed or aborted writes leave no files.
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>
#include <cmocka.h>

#include "formats/kvqfile.h"
#include "formats/zipcheck.h"
#include "kernels/splitmix.h"

typedef struct {
    char dir[64];
    char path[128];
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/kvq-test-XXXXXX");
    if (!mkdtemp(fx->dir)) return -1;
    snprintf(fx->path, sizeof fx->path, "%s/x.kvq", fx->dir);
    *state = fx;
    return 0;
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static int teardown(void **state) {
    fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", fx->dir, e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(p);
    }
    if (d) closedir(d);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

static uint64_t rng(uint64_t *s) { return kvq_splitmix64_next(s); }

#define N_ENT 40
typedef struct {
    char name[96];
    uint8_t *data;
    size_t n;
    kvq_entry_mode mode;
} payload;

// 40 entries with name lengths 1..80 (every padding case), random, compressible
// and empty payloads.
static void make_payloads(payload *p) {
    uint64_t s = 42;
    for (int i = 0; i < N_ENT; i++) {
        int len = 1 + (i * 79) / (N_ENT - 1);
        for (int k = 0; k < len; k++) p[i].name[k] = (char)('a' + (k + i) % 26);
        p[i].name[len] = 0;
        p[i].name[0] = (char)('A' + i % 26); // distinct prefixes keep names unique
        snprintf(p[i].name + (len > 3 ? len - 2 : len), 3, "%02d", i);
        p[i].n = i == 7 ? 0 : (size_t)(rng(&s) % 5000);
        p[i].data = malloc(p[i].n + 1);
        int compressible = i % 3 == 0;
        for (size_t k = 0; k < p[i].n; k++) p[i].data[k] = compressible ? (uint8_t)(k / 64) : (uint8_t)rng(&s);
        p[i].mode = i % 2 ? KVQ_ENTRY_ZSTD_AUTO : KVQ_ENTRY_RAW;
    }
}

static void free_payloads(payload *p) {
    for (int i = 0; i < N_ENT; i++) free(p[i].data);
}

static json_t *base_manifest(int version) {
    return json_pack("{s:s,s:i,s:s}", "format", "kvq", "format_version", version, "note", "hello");
}

static void write_file(const char *path, payload *p, int version, kvq_entry_info *info) {
    kvq_writer *w;
    kvq_err err = {0};
    assert_int_equal(kvq_writer_open(path, &w, &err), KVQ_OK);
    for (int i = 0; i < N_ENT; i++) {
        kvq_status s = kvq_writer_add(w, p[i].name, p[i].data, p[i].n, p[i].mode, info ? &info[i] : NULL, &err);
        if (s != KVQ_OK) fail_msg("%s", err.msg);
    }
    json_t *m = base_manifest(version);
    kvq_status s = kvq_writer_commit(w, m, &err);
    if (s != KVQ_OK) fail_msg("%s", err.msg);
    assert_null(json_object_get(m, "entries")); // the caller's manifest is not modified
    json_decref(m);
}

static void test_round_trip(void **state) {
    fixture *fx = *state;
    payload p[N_ENT];
    kvq_entry_info info[N_ENT];
    make_payloads(p);
    write_file(fx->path, p, KVQ_FORMAT_VERSION, info);
    assert_int_equal(count_files(fx->dir), 1); // no temp or spool left behind

    kvq_file *f;
    kvq_err err = {0};
    if (kvq_file_open_container(fx->path, &f, &err) != KVQ_OK) fail_msg("%s", err.msg);
    assert_string_equal(json_string_value(json_object_get(kvq_file_manifest(f), "note")), "hello");
    int n_zstd = 0;
    for (int i = 0; i < N_ENT; i++) {
        const void *d;
        size_t n;
        if (kvq_file_entry(f, p[i].name, &d, &n, &err) != KVQ_OK) fail_msg("%s", err.msg);
        assert_int_equal(n, p[i].n);
        if (n) assert_memory_equal(d, p[i].data, n);
        const json_t *e = json_object_get(json_object_get(kvq_file_manifest(f), "entries"), p[i].name);
        assert_non_null(e);
        int z = json_is_true(json_object_get(e, "zstd"));
        assert_int_equal(z, info[i].zstd);
        // zstd only when asked for and when it saves at least 5 %
        if (z) {
            n_zstd++;
            assert_int_equal(p[i].mode, KVQ_ENTRY_ZSTD_AUTO);
            assert_true(info[i].stored_size <= 0.95 * p[i].n);
        } else {
            assert_int_equal(info[i].stored_size, p[i].n);
            if (p[i].mode == KVQ_ENTRY_ZSTD_AUTO && p[i].n > 100 && i % 3 == 0) fail_msg("compressible entry %d not zstd", i);
        }
    }
    assert_true(n_zstd >= 5);
    // released zstd buffers are decompressed again on the next access
    for (int i = 0; i < N_ENT; i++) {
        kvq_file_release(f, p[i].name);
        const void *d;
        size_t n;
        assert_int_equal(kvq_file_entry(f, p[i].name, &d, &n, &err), KVQ_OK);
        assert_int_equal(n, p[i].n);
        if (n) assert_memory_equal(d, p[i].data, n);
    }
    assert_int_equal(kvq_file_verify(f, &err), KVQ_OK);
    assert_int_equal(kvq_file_entry(f, "nope", NULL, NULL, &err), KVQ_ERR_MISSING);
    kvq_file_close(f);
    free_payloads(p);
}

// Every entry's data offset is a multiple of 64, and libzip (an independent
// reader of the zip structure) finds at that offset exactly the stored bytes.
static void test_alignment(void **state) {
    fixture *fx = *state;
    payload p[N_ENT];
    make_payloads(p);
    write_file(fx->path, p, KVQ_FORMAT_VERSION, NULL);
    kvq_file *f;
    kvq_err err = {0};
    assert_int_equal(kvq_file_open_container(fx->path, &f, &err), KVQ_OK);
    FILE *fp = fopen(fx->path, "rb");
    fseek(fp, 0, SEEK_END);
    long fsize = ftell(fp);
    uint8_t *all = malloc((size_t)fsize);
    fseek(fp, 0, SEEK_SET);
    assert_int_equal(fread(all, 1, (size_t)fsize, fp), (size_t)fsize);
    fclose(fp);
    int ze;
    zip_t *za = zip_open(fx->path, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    assert_non_null(za);
    assert_int_equal(zip_get_num_entries(za, 0), N_ENT + 1);
    const json_t *tab = json_object_get(kvq_file_manifest(f), "entries");
    const char *name;
    json_t *e;
    int checked = 0;
    json_object_foreach((json_t *)tab, name, e) {
        uint64_t off = (uint64_t)json_integer_value(json_object_get(e, "offset"));
        uint64_t stored = (uint64_t)json_integer_value(json_object_get(e, "stored_size"));
        assert_int_equal(off % 64, 0);
        zip_stat_t st;
        assert_int_equal(zip_stat(za, name, 0, &st), 0);
        assert_int_equal(st.comp_method, ZIP_CM_STORE);
        assert_int_equal(st.size, stored);
        uint8_t *buf = malloc(stored + 1);
        zip_file_t *zf = zip_fopen(za, name, 0);
        assert_int_equal(zip_fread(zf, buf, stored), (zip_int64_t)stored);
        zip_fclose(zf);
        if (stored) assert_memory_equal(buf, all + off, stored);
        free(buf);
        checked++;
    }
    assert_int_equal(checked, N_ENT);
    // manifest.json is plain JSON (readable with unzip -p) and also aligned.
    zip_stat_t st;
    assert_int_equal(zip_stat(za, "manifest.json", 0, &st), 0);
    char *mj = malloc(st.size + 1);
    zip_file_t *zf = zip_fopen(za, "manifest.json", 0);
    assert_int_equal(zip_fread(zf, mj, st.size), (zip_int64_t)st.size);
    zip_fclose(zf);
    mj[st.size] = 0;
    char *at = memmem(all, (size_t)fsize, mj, st.size);
    assert_non_null(at);
    assert_int_equal((at - (char *)all) % 64, 0);
    free(mj);
    zip_close(za);
    free(all);
    kvq_file_close(f);
    free_payloads(p);
}

static void read_bytes(const char *path, uint8_t **d, size_t *n) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    *d = malloc(*n);
    assert_int_equal(fread(*d, 1, *n, fp), *n);
    fclose(fp);
}

static void write_bytes(const char *path, const uint8_t *d, size_t n) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(d, 1, n, fp), n);
    fclose(fp);
}

static void test_deterministic(void **state) {
    fixture *fx = *state;
    payload p[N_ENT];
    make_payloads(p);
    char other[160];
    snprintf(other, sizeof other, "%s/y.kvq", fx->dir);
    write_file(fx->path, p, KVQ_FORMAT_VERSION, NULL);
    sleep(0);
    write_file(other, p, KVQ_FORMAT_VERSION, NULL);
    uint8_t *a, *b;
    size_t na, nb;
    read_bytes(fx->path, &a, &na);
    read_bytes(other, &b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    free_payloads(p);
}

static void test_flipped_byte(void **state) {
    fixture *fx = *state;
    payload p[N_ENT];
    make_payloads(p);
    write_file(fx->path, p, KVQ_FORMAT_VERSION, NULL);
    kvq_file *f;
    kvq_err err = {0};
    assert_int_equal(kvq_file_open_container(fx->path, &f, &err), KVQ_OK);
    // a raw entry (even index) with data
    const char *victim = p[4].name;
    uint64_t off = (uint64_t)json_integer_value(
        json_object_get(json_object_get(json_object_get(kvq_file_manifest(f), "entries"), victim), "offset"));
    kvq_file_close(f);
    uint8_t *d;
    size_t n;
    read_bytes(fx->path, &d, &n);
    d[off + 3] ^= 0x10;
    write_bytes(fx->path, d, n);
    free(d);
    assert_int_equal(kvq_file_open_container(fx->path, &f, &err), KVQ_OK); // bounds fine; digest checked on access
    const void *data;
    assert_int_equal(kvq_file_entry(f, p[0].name, &data, NULL, &err), KVQ_OK);
    assert_int_equal(kvq_file_entry(f, victim, &data, NULL, &err), KVQ_ERR_DIGEST);
    assert_non_null(strstr(err.msg, victim));
    assert_non_null(strstr(err.msg, "x.kvq"));
    assert_int_equal(kvq_file_verify(f, &err), KVQ_ERR_DIGEST);
    assert_non_null(strstr(err.msg, victim));
    kvq_file_close(f);
    free_payloads(p);
}

static void test_truncated(void **state) {
    fixture *fx = *state;
    payload p[N_ENT];
    make_payloads(p);
    write_file(fx->path, p, KVQ_FORMAT_VERSION, NULL);
    uint8_t *d;
    size_t n;
    read_bytes(fx->path, &d, &n);
    size_t cuts[] = {n - 1, n - 30, n / 2, 100, 0};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_bytes(fx->path, d, cuts[i]);
        kvq_file *f = (kvq_file *)1;
        kvq_err err = {0};
        kvq_status s = kvq_file_open_container(fx->path, &f, &err);
        assert_true(s < 0);
        assert_null(f);
        assert_non_null(strstr(err.msg, "x.kvq"));
    }
    free(d);
    free_payloads(p);
}

static void test_unknown_version(void **state) {
    fixture *fx = *state;
    payload p[N_ENT];
    make_payloads(p);
    write_file(fx->path, p, 7, NULL);
    kvq_file *f;
    kvq_err err = {0};
    assert_int_equal(kvq_file_open_container(fx->path, &f, &err), KVQ_ERR_VERSION);
    assert_non_null(strstr(err.msg, "version 7"));
    free_payloads(p);
}

// A zip with manifest.json that is not JSON, and one that is a JSON array.
static void test_manifest_not_json(void **state) {
    fixture *fx = *state;
    const char *bodies[] = {"{\"format\": \"kvq\", oops", "[1,2,3]", "{\"format\":\"gguf\",\"format_version\":1}"};
    kvq_status want[] = {KVQ_ERR_FORMAT, KVQ_ERR_FORMAT, KVQ_ERR_FORMAT};
    const char *needle[] = {"not a JSON object", "not a JSON object", "gguf"};
    for (int i = 0; i < 3; i++) {
        unlink(fx->path);
        int ze;
        zip_t *za = zip_open(fx->path, ZIP_CREATE | ZIP_EXCL, &ze);
        assert_non_null(za);
        zip_source_t *src = zip_source_buffer(za, bodies[i], strlen(bodies[i]), 0);
        zip_int64_t idx = zip_file_add(za, "manifest.json", src, 0);
        assert_true(idx >= 0);
        assert_int_equal(zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0), 0); // as a .kvq stores it
        assert_int_equal(zip_close(za), 0);
        kvq_file *f;
        kvq_err err = {0};
        assert_int_equal(kvq_file_open_container(fx->path, &f, &err), want[i]);
        assert_non_null(strstr(err.msg, needle[i]));
    }
    // a directory, then not a zip at all
    kvq_file *fd;
    kvq_err derr = {0};
    assert_int_equal(kvq_file_open_container(fx->dir, &fd, &derr), KVQ_ERR_IO);
    assert_non_null(strstr(derr.msg, "not a regular file"));
    write_bytes(fx->path, (const uint8_t *)"hello world", 11);
    kvq_file *f;
    kvq_err err = {0};
    assert_int_equal(kvq_file_open_container(fx->path, &f, &err), KVQ_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "not a valid zip"));
}

static void test_abort_and_failure_leave_nothing(void **state) {
    fixture *fx = *state;
    kvq_writer *w;
    kvq_err err = {0};
    uint8_t data[1000] = {1, 2, 3};
    // abort after adding entries
    assert_int_equal(kvq_writer_open(fx->path, &w, &err), KVQ_OK);
    assert_int_equal(kvq_writer_add(w, "t/a/raw", data, sizeof data, KVQ_ENTRY_ZSTD_AUTO, NULL, &err), KVQ_OK);
    kvq_writer_abort(w);
    assert_int_equal(count_files(fx->dir), 0);
    // duplicate entry name is refused; the failed commit (manifest not an object) cleans up
    assert_int_equal(kvq_writer_open(fx->path, &w, &err), KVQ_OK);
    assert_int_equal(kvq_writer_add(w, "t/a/raw", data, sizeof data, KVQ_ENTRY_RAW, NULL, &err), KVQ_OK);
    assert_int_equal(kvq_writer_add(w, "t/a/raw", data, sizeof data, KVQ_ENTRY_RAW, NULL, &err), KVQ_ERR_ARG);
    assert_int_equal(kvq_writer_add(w, "manifest.json", data, 1, KVQ_ENTRY_RAW, NULL, &err), KVQ_ERR_ARG);
    json_t *notobj = json_array();
    assert_int_equal(kvq_writer_commit(w, notobj, &err), KVQ_ERR_ARG);
    json_decref(notobj);
    assert_int_equal(count_files(fx->dir), 0);
    // a previous file under the final name survives a failed write untouched
    write_bytes(fx->path, (const uint8_t *)"old", 3);
    assert_int_equal(kvq_writer_open(fx->path, &w, &err), KVQ_OK);
    kvq_writer_abort(w);
    assert_int_equal(count_files(fx->dir), 1);
    uint8_t *d;
    size_t n;
    read_bytes(fx->path, &d, &n);
    assert_int_equal(n, 3);
    free(d);
    // destination directory missing
    assert_true(kvq_writer_open("/nonexistent-kvq-dir/x.kvq", &w, &err) == KVQ_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-kvq-dir/x.kvq"));
}

static void test_rewrite_manifest(void **state) {
    fixture *fx = *state;
    payload p[N_ENT];
    make_payloads(p);
    write_file(fx->path, p, KVQ_FORMAT_VERSION, NULL);
    kvq_file *f;
    kvq_err err = {0};
    assert_int_equal(kvq_file_open_container(fx->path, &f, &err), KVQ_OK);
    json_t *m = json_deep_copy(kvq_file_manifest(f));
    kvq_file_close(f);
    json_object_set_new(m, "verification", json_pack("{s:b}", "passed", 1));
    if (kvq_file_rewrite_manifest(fx->path, m, &err) != KVQ_OK) fail_msg("%s", err.msg);
    json_decref(m);
    assert_int_equal(count_files(fx->dir), 1);
    assert_int_equal(kvq_file_open_container(fx->path, &f, &err), KVQ_OK);
    assert_true(json_is_object(json_object_get(kvq_file_manifest(f), "verification")));
    for (int i = 0; i < N_ENT; i++) {
        const void *d;
        size_t n;
        if (kvq_file_entry(f, p[i].name, &d, &n, &err) != KVQ_OK) fail_msg("%s", err.msg);
        assert_int_equal(n, p[i].n);
        if (n) assert_memory_equal(d, p[i].data, n);
    }
    kvq_file_close(f);
    free_payloads(p);
}

// What kvq_zipcheck accepts must be sound: members inside the file, before the central
// directory, not overlapping, names unique.
static void assert_members_sound(const kvq_zip_member *m, size_t n, uint64_t size) {
    for (size_t i = 0; i < n; i++) {
        assert_true(m[i].data >= m[i].header + 30 && m[i].data <= size && m[i].csize <= size - m[i].data);
        assert_int_equal(m[i].method, 0);
        if (i) assert_true(strcmp(m[i - 1].name, m[i].name) < 0);
        for (size_t j = 0; j < n; j++)
            if (j != i && m[j].header >= m[i].header) assert_true(m[j].header >= m[i].data + m[i].csize);
    }
}

// kvq_zipcheck on what the writer wrote: every entry's local header and data where the manifest
// says. Then every byte of the central directory and end record changed in turn (XOR 0xff and
// +1): each result is refused with a message naming the file, or accepted and sound. The crafted
// zip64 file (tests/data/bad/make_zip_cases.py) opens as a container.
static void test_zipcheck(void **state) {
    fixture *fx = *state;
    payload p[N_ENT];
    make_payloads(p);
    write_file(fx->path, p, KVQ_FORMAT_VERSION, NULL);
    uint8_t *all;
    size_t n;
    read_bytes(fx->path, &all, &n);
    kvq_zip_member *m;
    size_t nm;
    kvq_err err = {0};
    assert_int_equal(kvq_zipcheck(all, n, fx->path, &m, &nm, &err), KVQ_OK);
    assert_int_equal(nm, N_ENT + 1);
    assert_members_sound(m, nm, n);
    kvq_file *f;
    assert_int_equal(kvq_file_open_container(fx->path, &f, &err), KVQ_OK);
    const char *name;
    json_t *e;
    json_object_foreach(json_object_get(kvq_file_manifest(f), "entries"), name, e) {
        const kvq_zip_member *z = kvq_zipcheck_find(m, nm, name);
        assert_non_null(z);
        assert_int_equal(z->header, json_integer_value(json_object_get(e, "header")));
        assert_int_equal(z->data, json_integer_value(json_object_get(e, "offset")));
        assert_int_equal(z->csize, json_integer_value(json_object_get(e, "stored_size")));
    }
    kvq_file_close(f);
    uint64_t cd = 0; // where the members end: the central directory
    for (size_t i = 0; i < nm; i++)
        if (m[i].data + m[i].csize > cd) cd = m[i].data + m[i].csize;
    kvq_zipcheck_free(m, nm);
    int refused = 0, accepted = 0;
    for (size_t at = (size_t)cd; at < n; at++) {
        for (int k = 0; k < 2; k++) {
            uint8_t old = all[at];
            all[at] = k ? (uint8_t)(old + 1) : (uint8_t)(old ^ 0xff);
            kvq_err e2 = {0};
            kvq_status s = kvq_zipcheck(all, n, fx->path, &m, &nm, &e2);
            if (s == KVQ_OK) {
                assert_members_sound(m, nm, n);
                kvq_zipcheck_free(m, nm);
                accepted++;
            } else {
                assert_int_equal(s, KVQ_ERR_FORMAT);
                assert_non_null(strstr(e2.msg, fx->path));
                assert_null(strchr(e2.msg, '\n'));
                refused++;
            }
            all[at] = old;
        }
    }
    print_message("zipcheck: %d changed directories refused, %d accepted (times, versions, attributes)\n", refused,
                  accepted);
    assert_true(refused > 0 && accepted > 0);
    free(all);
    free_payloads(p);

    assert_int_equal(kvq_file_open_container("tests/data/bad/zip-good-zip64.kvq", &f, &err), KVQ_OK);
    uint64_t size = 0;
    assert_int_equal(kvq_file_entry_size(f, "t/a/raw", &size), KVQ_OK);
    assert_int_equal(size, 200);
    kvq_file_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alignment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deterministic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_not_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abort_and_failure_leave_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewrite_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zipcheck, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
