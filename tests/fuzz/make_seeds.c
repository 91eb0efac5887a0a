// Writes seed inputs for the codec fuzz targets (fuzz_hq, fuzz_qet, fuzz_kvcodec) into
// DIR/<target>/: real encodings of seeded random matrices and tokens, framed as the targets
// read them (fuzz.h), so the fuzzer starts from valid streams. Usage: make_seeds DIR
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libconv/codec/codec.h"
#include "libconv/kv/kvcodec.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float gauss(void) {
    double u = 0, v = 0;
    for (int i = 0; i < 12; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        u += (double)(rng >> 11) / 9007199254740992.0;
    }
    (void)v;
    return (float)(u - 6.0);
}

static void rec(FILE *f, const void *p, size_t n) {
    if (n > 65535) { fprintf(stderr, "make_seeds: record of %zu bytes\n", n); exit(1); }
    fputc((int)(n & 255), f);
    fputc((int)(n >> 8), f);
    fwrite(p, 1, n, f);
}

static void codec_seed(const char *dir, const char *name, const char *spec, int rows, int cols,
                       const char *const *roles, int nroles) {
    const kvq_codec_traits *c;
    json_t *cfg;
    kvq_err err = {0};
    if (kvq_codec_parse_spec(spec, &c, &cfg, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    float *x = malloc((size_t)rows * cols * sizeof *x);
    for (int i = 0; i < rows * cols; i++) x[i] = gauss();
    kvq_tensor t = {.name = "w", .dtype = KVQ_DTYPE_F32, .ndim = 2, .shape = {rows, cols}, .data = x,
                    .nbytes = (size_t)rows * cols * 4};
    kvq_codec_input in = {.src = &t, .x = x, .rows = rows, .cols = cols, .seed = 7, .n_threads = 1};
    kvq_encoded e = {0};
    if (c->encode(cfg, &in, &e, &err)) { fprintf(stderr, "%s: %s\n", spec, err.msg); exit(1); }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    unsigned char hdr[4] = {rows & 255, rows >> 8, cols & 255, cols >> 8};
    fwrite(hdr, 1, 4, f);
    char *p = json_dumps(e.params, JSON_COMPACT);
    rec(f, p, strlen(p));
    free(p);
    for (int i = 0; i < nroles; i++) {
        int j = 0;
        while (j < e.n_blob && strcmp(e.blob[j].role, roles[i])) j++;
        rec(f, j < e.n_blob ? e.blob[j].data : "", j < e.n_blob ? e.blob[j].size : 0);
    }
    fclose(f);
    kvq_encoded_free(&e);
    json_decref(cfg);
    free(x);
}

static void kv_seed(const char *dir, int row, int dlog, int role, int load) {
    const kvq_kvcodec_traits *t = kvq_kvcodec_at(row);
    kvq_kvspec s;
    kvq_kvcodec *c;
    kvq_err err = {0};
    int d = 8 << dlog;
    if (kvq_kvspec_parse(t->example, &s, &err) || kvq_kvcodec_new(&s, d, role, 1234, &c, &err)) return;
    size_t cap = kvq_kvcodec_bound(c, c->group), off[2];
    float *x = malloc((size_t)c->group * d * sizeof *x);
    uint8_t *buf = malloc(cap);
    for (int i = 0; i < c->group * d; i++) x[i] = gauss();
    if (kvq_kvcodec_encode(c, x, c->group, buf, cap, off, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    char path[512];
    snprintf(path, sizeof path, "%s/%s-d%d-%c%s", dir, t->name, d, role ? 'V' : 'K', load ? "-load" : "");
    FILE *f = fopen(path, "wb");
    static const char *const names[] = {"tbl/signs", "tbl/codebook", "tbl/secondary", "tbl/codebook_xi",
                                        "tbl/codebook_rho", "tbl/quaternion"};
    if (!load) {
        unsigned char hdr[4] = {(unsigned char)row, (unsigned char)dlog, (unsigned char)role, 0};
        fwrite(hdr, 1, 4, f);
    } else {
        json_t *params;
        kvq_blob b[8];
        int nb = 0;
        if (kvq_kvcodec_save(c, &params, b, 8, &nb, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
        unsigned char hdr[4] = {(unsigned char)row, (unsigned char)dlog, (unsigned char)role, 1 | 6 << 1};
        fwrite(hdr, 1, 4, f);
        char *p = json_dumps(params, JSON_COMPACT);
        rec(f, p, strlen(p));
        free(p);
        for (int i = 0; i < 6; i++) {
            int j = 0;
            while (j < nb && strcmp(b[j].role, names[i])) j++;
            rec(f, j < nb ? b[j].data : "", j < nb ? b[j].size : 0);
        }
        for (int j = 0; j < nb; j++) free(b[j].data);
        json_decref(params);
    }
    fwrite(buf, 1, off[1], f);
    fclose(f);
    free(x);
    free(buf);
    kvq_kvcodec_free(c);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: make_seeds DIR\n"); return 2; }
    char d[512];
    static const char *const hq_roles[] = {"codes", "norms", "offsets"};
    static const char *const qet_roles[] = {"indicators", "idx.1", "idx.2", "cb.1", "cb.2"};
    snprintf(d, sizeof d, "%s/hq", argv[1]);
    mkdir(d, 0755);
    codec_seed(d, "e8-4.0", "hyperquant:e8:4.0", 16, 256, hq_roles, 3);
    codec_seed(d, "e8-2.5", "hyperquant:e8:2.5", 8, 128, hq_roles, 3);
    codec_seed(d, "d4-3.0-tile32", "hyperquant:d4:3.0:tile=32", 8, 96, hq_roles, 3);
    codec_seed(d, "d4-int8", "hyperquant:d4:21db:int8", 4, 64, hq_roles, 3);
    codec_seed(d, "e8-cols40", "hyperquant:e8:4.0", 8, 40, hq_roles, 3);
    codec_seed(d, "e8-blocks", "hyperquant:e8:3:blocks=8@2.5/4.5/3", 20, 64, hq_roles, 3); // params v 2
    snprintf(d, sizeof d, "%s/qet", argv[1]);
    mkdir(d, 0755);
    codec_seed(d, "qet-4", "qet:4", 64, 64, qet_roles, 5);
    codec_seed(d, "qet-8-l2", "qet:8:l=2", 32, 64, qet_roles, 5);
    codec_seed(d, "pq-4", "pq:4", 64, 32, qet_roles, 5);
    codec_seed(d, "qet-4-r1-cb0", "qet:4:r=1,cb=0", 32, 32, qet_roles, 5);
    snprintf(d, sizeof d, "%s/kvcodec", argv[1]);
    mkdir(d, 0755);
    for (int r = 0; r < kvq_kvcodec_count(); r++)
        for (int role = 0; role < 2; role++) {
            kv_seed(d, r, 3, role, 0);
            kv_seed(d, r, 4, role, role);
        }
    return 0;
}
