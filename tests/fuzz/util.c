// Helpers of the fuzz targets (fuzz.h): a private temporary directory, the record cutter and
// the framed codec input.
#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];

static void rm_dir(void) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    struct dirent *e;
    char p[600];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
        if (unlink(p)) { // one level of subdirectories (fuzz_index's checkpoint)
            DIR *s = opendir(p);
            struct dirent *f;
            char q[900];
            while (s && (f = readdir(s)))
                if (strcmp(f->d_name, ".") && strcmp(f->d_name, "..")) {
                    snprintf(q, sizeof q, "%s/%s", p, f->d_name);
                    unlink(q);
                }
            if (s) closedir(s);
            rmdir(p);
        }
    }
    closedir(d);
    rmdir(g_dir);
}

const char *kvq_fuzz_dir(void) {
    if (!g_dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/kvq-fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(g_dir)) {
            perror("kvq-fuzz: mkdtemp");
            abort();
        }
        atexit(rm_dir);
    }
    return g_dir;
}

const char *kvq_fuzz_file(const char *name, const void *data, size_t size, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", kvq_fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    int ok = fwrite(data, 1, size, f) == size;
    ok &= fclose(f) == 0;
    return ok ? path : NULL;
}

int kvq_fuzz_take(kvq_fuzz_in *in, const uint8_t **p, size_t *n) {
    if (in->left < 2) return 0;
    size_t len = (size_t)in->p[0] | (size_t)in->p[1] << 8;
    in->p += 2;
    in->left -= 2;
    if (len > in->left) len = in->left;
    *p = in->p;
    *n = len;
    in->p += len;
    in->left -= len;
    return 1;
}

unsigned kvq_fuzz_byte(kvq_fuzz_in *in) {
    if (!in->left) return 0;
    in->left--;
    return *in->p++;
}

json_t *kvq_fuzz_codec_input(const uint8_t *data, size_t size, const char *const *roles, int nroles,
                             int64_t *rows, int64_t *cols, kvq_blob_view *views, int *nviews) {
    if (size < 4) return NULL;
    *rows = data[0] | data[1] << 8;
    *cols = data[2] | data[3] << 8;
    kvq_fuzz_in in = {data + 4, size - 4};
    const uint8_t *p;
    size_t n;
    if (!kvq_fuzz_take(&in, &p, &n)) return NULL;
    json_t *params = json_loadb((const char *)p, n, 0, NULL);
    if (!params) return NULL;
    *nviews = 0;
    for (int i = 0; i < nroles && kvq_fuzz_take(&in, &p, &n); i++)
        if (n) views[(*nviews)++] = (kvq_blob_view){roles[i], p, n};
    return params;
}
