// safetensors reader/writer tests: files written by the real Python `safetensors`
// package (tests/fixtures/st, made by make_safetensors_fixtures.py) read back with known
// values; every broken fixture gives its own status and message; the writer produces
// byte-identical files to the Python package for the same tensors and is atomic.
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "formats/safetensors.h"

#define FIX "tests/fixtures/st/"

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static size_t count_entries(const char *dir) {
    DIR *d = opendir(dir);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

// ---- the values make_safetensors_fixtures.py wrote into good_mixed ----------------

static const float W_F32[6] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
static const float B_F16[4] = {1.0f, -2.0f, 0.5f, 65504.0f};
static const float N_BF16[6] = {1.0f, -3.5f, 0.15625f, 256.0f, -0.0f, 7.0f};
static const float SCALE = 3.25f;

static void check_values(const kvq_tensor *t, const float *want, size_t n) {
    assert_non_null(t);
    assert_int_equal(kvq_tensor_numel(t), n);
    assert_int_equal(t->nbytes, n * kvq_dtype_size(t->dtype));
    float got[8];
    kvq_dtype_to_f32(t->dtype, t->data, n, got);
    for (size_t i = 0; i < n; i++) {
        assert_memory_equal(&got[i], &want[i], 4); // bitwise: -0.0 must stay -0.0
    }
}

static void test_read_mixed(void **state) {
    kvq_st *st;
    kvq_err err = {0};
    assert_int_equal(kvq_st_open(FIX "good_mixed.safetensors", &st, &err), KVQ_OK);
    assert_int_equal(kvq_st_count(st), 5);
    const kvq_tensor *w = kvq_st_find(st, "layer.weight");
    assert_int_equal(w->dtype, KVQ_DTYPE_F32);
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->shape[0], 2);
    assert_int_equal(w->shape[1], 3);
    check_values(w, W_F32, 6);
    const kvq_tensor *b = kvq_st_find(st, "layer.bias");
    assert_int_equal(b->dtype, KVQ_DTYPE_F16);
    check_values(b, B_F16, 4);
    const kvq_tensor *nw = kvq_st_find(st, "norm.weight");
    assert_int_equal(nw->dtype, KVQ_DTYPE_BF16);
    assert_int_equal(nw->shape[0], 3);
    assert_int_equal(nw->shape[1], 2);
    check_values(nw, N_BF16, 6);
    const kvq_tensor *s = kvq_st_find(st, "scale");
    assert_int_equal(s->ndim, 0);
    check_values(s, &SCALE, 1);
    const kvq_tensor *e = kvq_st_find(st, "empty");
    assert_non_null(e);
    assert_int_equal(e->ndim, 2);
    assert_int_equal(e->shape[0], 0);
    assert_int_equal(e->shape[1], 4);
    assert_int_equal(e->nbytes, 0);
    assert_null(kvq_st_find(st, "missing"));
    assert_string_equal(kvq_st_metadata(st, "format"), "pt");
    assert_null(kvq_st_metadata(st, "nope"));
    // File order is by data offset.
    const char *order[] = {"empty", "layer.weight", "scale", "norm.weight", "layer.bias"};
    for (size_t i = 0; i < 5; i++) assert_string_equal(kvq_st_tensor(st, i)->name, order[i]);
    assert_null(kvq_st_tensor(st, 5));
    // Views point into the file: the last tensor's bytes end where the file does.
    size_t n;
    unsigned char *raw = slurp(FIX "good_mixed.safetensors", &n);
    assert_memory_equal((const char *)b->data, raw + n - 8, 8);
    free(raw);
    kvq_st_close(st);
    kvq_st_close(NULL);
}

static void test_read_metadata(void **state) {
    kvq_st *st;
    kvq_err err = {0};
    assert_int_equal(kvq_st_open(FIX "good_meta.safetensors", &st, &err), KVQ_OK);
    assert_string_equal(kvq_st_metadata(st, "format"), "pt");
    assert_string_equal(kvq_st_metadata(st, "note"), "two keys");
    const float want[2] = {1.5f, -2.5f};
    check_values(kvq_st_find(st, "w"), want, 2);
    kvq_st_close(st);
}

// ---- broken inputs ----------------------------------------------------------------

typedef struct {
    const char *file;
    kvq_status code;
    const char *has;     // distinctive substring of the message
    const char *lacks;   // substring that must not appear, or NULL
} bad_case;

static const bad_case BAD[] = {
    {"bad_truncated.safetensors", KVQ_ERR_FORMAT, "file truncated: tensor 'layer.bias'", NULL},
    {"bad_short.safetensors", KVQ_ERR_FORMAT, "too short for the 8-byte header length", NULL},
    {"bad_hdrlen_past_eof.safetensors", KVQ_ERR_FORMAT, "header length 408 runs past the end", NULL},
    {"bad_hdrlen_2p63.safetensors", KVQ_ERR_FORMAT, "header length 9223372036854775808 is absurd", NULL},
    {"bad_not_json.safetensors", KVQ_ERR_FORMAT, "header is not valid JSON", NULL},
    {"bad_dtype_f8.safetensors", KVQ_ERR_UNSUPPORTED, "tensor 'w8': unsupported dtype 'F8_E4M3'", NULL},
    {"bad_offsets_range.safetensors", KVQ_ERR_FORMAT,
     "tensor 'layer.weight': data_offsets [1024, 99999999] exceed data size 48", "truncated"},
    {"bad_overlap.safetensors", KVQ_ERR_FORMAT, "tensor 'b': data_offsets [0, 8] overlap tensor 'a'", NULL},
    {"bad_shape_bytes.safetensors", KVQ_ERR_FORMAT,
     "tensor 'layer.weight': shape [2, 4] × F32 needs 32 bytes but data_offsets [0, 24] hold 24", NULL},
    {"bad_duplicate.safetensors", KVQ_ERR_FORMAT, "duplicate tensor name", NULL},
    {"bad_gap.safetensors", KVQ_ERR_FORMAT, "leave a gap of 4 bytes", NULL},
    {"bad_trailing.safetensors", KVQ_ERR_FORMAT, "8 trailing bytes", NULL},
    {"bad_negative_shape.safetensors", KVQ_ERR_FORMAT, "shape[0] is not a non-negative integer", NULL},
    {"bad_shape_overflow.safetensors", KVQ_ERR_FORMAT, "size overflows", NULL},
    {"bad_ndim.safetensors", KVQ_ERR_UNSUPPORTED, "9 dimensions", NULL},
    {"bad_metadata.safetensors", KVQ_ERR_FORMAT, "__metadata__ value for 'format' is not a string", NULL},
    {"does_not_exist.safetensors", KVQ_ERR_MISSING, "cannot open", NULL},
};

static void test_broken(void **state) {
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s", BAD[i].file);
        kvq_st *st = (kvq_st *)1;
        kvq_err err = {0};
        kvq_status s = kvq_st_open(path, &st, &err);
        print_message("%-34s -> %s\n", BAD[i].file, err.msg);
        assert_int_equal(s, BAD[i].code);
        assert_int_equal(err.code, BAD[i].code);
        assert_null(st);
        assert_non_null(strstr(err.msg, BAD[i].has));
        assert_non_null(strstr(err.msg, BAD[i].file)); // names the file
        assert_null(strchr(err.msg, '\n'));            // one line
        if (BAD[i].lacks) assert_null(strstr(err.msg, BAD[i].lacks));
    }
    // Every broken case has its own message.
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++)
        for (size_t j = 0; j < i; j++) assert_string_not_equal(BAD[i].has, BAD[j].has);
}

// ---- writer -----------------------------------------------------------------------

static kvq_tensor mk(const char *name, kvq_dtype dt, int ndim, const int64_t *shape, const void *data) {
    kvq_tensor t = {.name = name, .dtype = dt, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    t.nbytes = (size_t)kvq_tensor_numel(&t) * kvq_dtype_size(dt);
    return t;
}

// The tensors of good_mixed, built here from the constants above (in a scrambled order).
static void mixed_tensors(kvq_tensor t[5], uint16_t f16[4], uint16_t bf[6]) {
    kvq_dtype_from_f32(KVQ_DTYPE_F16, B_F16, 4, f16);
    kvq_dtype_from_f32(KVQ_DTYPE_BF16, N_BF16, 6, bf);
    static const int64_t s23[] = {2, 3}, s4[] = {4}, s32[] = {3, 2}, s04[] = {0, 4};
    t[0] = mk("norm.weight", KVQ_DTYPE_BF16, 2, s32, bf);
    t[1] = mk("layer.bias", KVQ_DTYPE_F16, 1, s4, f16);
    t[2] = mk("scale", KVQ_DTYPE_F32, 0, NULL, &SCALE);
    t[3] = mk("layer.weight", KVQ_DTYPE_F32, 2, s23, W_F32);
    t[4] = mk("empty", KVQ_DTYPE_F32, 2, s04, NULL);
}

static char tmpdir[64];

static int setup_tmp(void **state) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kvq_st_test_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state) {
    rm_dir(tmpdir);
    return 0;
}

// Same tensors, same metadata -> the same bytes the Python package wrote.
static void test_write_matches_python(void **state) {
    kvq_tensor t[5];
    uint16_t f16[4], bf[6];
    mixed_tensors(t, f16, bf);
    char out[128];
    snprintf(out, sizeof out, "%s/mixed.safetensors", tmpdir);
    const char *meta[] = {"format", "pt", NULL};
    kvq_err err = {0};
    assert_int_equal(kvq_st_write(out, t, 5, meta, &err), KVQ_OK);
    size_t na, nb;
    unsigned char *a = slurp(out, &na), *b = slurp(FIX "good_mixed.safetensors", &nb);
    assert_non_null(a);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    assert_int_equal(count_entries(tmpdir), 1); // no temporary left behind
    // And our reader reads what we wrote.
    kvq_st *st;
    assert_int_equal(kvq_st_open(out, &st, &err), KVQ_OK);
    check_values(kvq_st_find(st, "norm.weight"), N_BF16, 6);
    kvq_st_close(st);
    unlink(out);
}

// A real checkpoint (bundled kvq-tiny-llama, written by transformers) rewritten by us
// is byte-identical.
static void test_write_real_model(void **state) {
    const char *src = "tests/models/kvq-tiny-llama/model.safetensors";
    kvq_st *st;
    kvq_err err = {0};
    assert_int_equal(kvq_st_open(src, &st, &err), KVQ_OK);
    size_t n = kvq_st_count(st);
    kvq_tensor *t = calloc(n, sizeof *t);
    for (size_t i = 0; i < n; i++) t[n - 1 - i] = *kvq_st_tensor(st, i); // reversed input order
    char out[128];
    snprintf(out, sizeof out, "%s/tiny.safetensors", tmpdir);
    const char *meta[] = {"format", "pt", NULL};
    assert_int_equal(kvq_st_write(out, t, n, meta, &err), KVQ_OK);
    size_t na, nb;
    unsigned char *a = slurp(out, &na), *b = slurp(src, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    free(t);
    kvq_st_close(st);
    unlink(out);
}

static void test_write_errors(void **state) {
    kvq_tensor t[5];
    uint16_t f16[4], bf[6];
    mixed_tensors(t, f16, bf);
    kvq_err err = {0};
    char out[128];
    snprintf(out, sizeof out, "%s/bad.safetensors", tmpdir);
    // Wrong byte count: refused before any file is created.
    t[1].nbytes = 6;
    assert_int_equal(kvq_st_write(out, t, 5, NULL, &err), KVQ_ERR_ARG);
    assert_non_null(strstr(err.msg, "tensor 'layer.bias'"));
    t[1].nbytes = 8;
    // Duplicate names.
    t[2].name = "layer.weight";
    assert_int_equal(kvq_st_write(out, t, 5, NULL, &err), KVQ_ERR_ARG);
    assert_non_null(strstr(err.msg, "repeated"));
    t[2].name = "scale";
    assert_int_equal(count_entries(tmpdir), 0);
    // Unwritable destination: I/O error, nothing left behind.
    assert_int_equal(kvq_st_write("/nonexistent-dir/x.safetensors", t, 5, NULL, &err), KVQ_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.safetensors"));
    // Overwriting an existing file replaces it whole.
    FILE *f = fopen(out, "wb");
    fputs("old contents", f);
    fclose(f);
    assert_int_equal(kvq_st_write(out, t, 5, NULL, &err), KVQ_OK);
    kvq_st *st;
    assert_int_equal(kvq_st_open(out, &st, &err), KVQ_OK);
    assert_null(kvq_st_metadata(st, "format"));
    assert_int_equal(kvq_st_count(st), 5);
    kvq_st_close(st);
    assert_int_equal(count_entries(tmpdir), 1);
    unlink(out);
}

// Seeded random tensors of every dtype and rank: write, read back, bit-identical.
static void test_write_roundtrip_random(void **state) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    enum { N = 12 };
    kvq_tensor t[N];
    char names[N][32];
    unsigned char *bufs[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "t.%02d", (i * 7) % N);
        int64_t shape[4];
        int nd = i % 5 == 4 ? 0 : 1 + i % 4;
        for (int d = 0; d < nd; d++) shape[d] = 1 + (int64_t)((x = x * 6364136223846793005ull + 1) >> 60);
        kvq_dtype dt = (kvq_dtype)(i % 3);
        t[i] = mk(names[i], dt, nd, shape, NULL);
        bufs[i] = malloc(t[i].nbytes);
        for (size_t b = 0; b < t[i].nbytes; b++) bufs[i][b] = (unsigned char)((x = x * 6364136223846793005ull + 1) >> 56);
        t[i].data = bufs[i];
    }
    char out[128];
    snprintf(out, sizeof out, "%s/rand.safetensors", tmpdir);
    kvq_err err = {0};
    assert_int_equal(kvq_st_write(out, t, N, NULL, &err), KVQ_OK);
    kvq_st *st;
    assert_int_equal(kvq_st_open(out, &st, &err), KVQ_OK);
    assert_int_equal(kvq_st_count(st), N);
    for (int i = 0; i < N; i++) {
        const kvq_tensor *r = kvq_st_find(st, names[i]);
        assert_non_null(r);
        assert_int_equal(r->dtype, t[i].dtype);
        assert_int_equal(r->ndim, t[i].ndim);
        for (int d = 0; d < r->ndim; d++) assert_int_equal(r->shape[d], t[i].shape[d]);
        assert_int_equal(r->nbytes, t[i].nbytes);
        assert_memory_equal(r->data, bufs[i], r->nbytes);
        free(bufs[i]);
    }
    kvq_st_close(st);
    unlink(out);
}

// Every proper prefix of a valid file is refused (the format covers the file exactly), and
// seeded random byte corruptions are either refused or yield views inside the file.
static void test_prefixes_and_corruption(void **state) {
    size_t n;
    unsigned char *good = slurp(FIX "good_mixed.safetensors", &n);
    assert_non_null(good);
    char out[128];
    snprintf(out, sizeof out, "%s/cut.safetensors", tmpdir);
    for (size_t len = 0; len < n; len++) {
        FILE *f = fopen(out, "wb");
        fwrite(good, 1, len, f);
        fclose(f);
        kvq_st *st;
        kvq_err err = {0};
        kvq_status s = kvq_st_open(out, &st, &err);
        if (s == KVQ_OK) fail_msg("prefix of %zu bytes accepted", len);
        assert_int_equal(s, KVQ_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "cut.safetensors"));
    }
    uint64_t x = 12345;
    unsigned char *buf = malloc(n);
    int accepted = 0;
    for (int it = 0; it < 600; it++) {
        memcpy(buf, good, n);
        int flips = 1 + it % 3;
        for (int k = 0; k < flips; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)((x >> 33) % (8 + 352)); // length field and header text
            buf[pos] = (unsigned char)(x >> 13);
        }
        FILE *f = fopen(out, "wb");
        fwrite(buf, 1, n, f);
        fclose(f);
        kvq_st *st;
        kvq_err err = {0};
        if (kvq_st_open(out, &st, &err) != KVQ_OK) {
            assert_true(err.msg[0] != 0);
            continue;
        }
        accepted++;
        struct stat sb;
        stat(out, &sb);
        const unsigned char *lo = (const unsigned char *)kvq_st_tensor(st, 0)->data;
        for (size_t i = 0; i < kvq_st_count(st); i++) {
            const kvq_tensor *t = kvq_st_tensor(st, i);
            assert_true((const unsigned char *)t->data >= lo);
            assert_true((const unsigned char *)t->data + t->nbytes <= lo + (size_t)sb.st_size);
            assert_int_equal(t->nbytes, (size_t)kvq_tensor_numel(t) * kvq_dtype_size(t->dtype));
        }
        kvq_st_close(st);
    }
    print_message("corruptions accepted as valid files: %d of 600\n", accepted);
    free(buf);
    free(good);
    unlink(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_mixed),
        cmocka_unit_test(test_read_metadata),
        cmocka_unit_test(test_broken),
        cmocka_unit_test(test_write_matches_python),
        cmocka_unit_test(test_write_real_model),
        cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_write_roundtrip_random),
        cmocka_unit_test(test_prefixes_and_corruption),
    };
    return cmocka_run_group_tests_name("safetensors", tests, setup_tmp, teardown_tmp);
}
