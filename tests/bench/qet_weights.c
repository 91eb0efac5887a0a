// QET on real weights: every linear layer (*_proj.weight) of a checkpoint (default
// $KVQ_SHARED/models/kvq-small-llama) at 4 and 3 effective bits against a bf16 source:
// MSE of QET (paper defaults), Vanilla, PQ, QET with a 1-level tree, and RTN
// (asymmetric, fp16 scale+zero per group of g along the contraction axis), plus the
// table's hyperquant:e8:<bits> and rtn:<bits>:g128 codecs when they are registered.
// --f32: the paper's setting instead (source counted as 32-bit, ratios 4 and 8: QET,
// Vanilla, PQ and the Vanilla+RQO / Vanilla+CQO ablations), to compare with its "QET = 5.05 % of PQ's MSE at ratio 4".
// Usage: build/bench/qet_weights [checkpoint] [--per-layer] [--f32]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "formats/checkpoint.h"
#include "libconv/codec/codec.h"
#include "libconv/codec/qet/qet.h"

static kvq_dtype g_src = KVQ_DTYPE_BF16;

static double run_qet(const kvq_qet_config *c, const float *x, int64_t n, int64_t d, float *out, double *bpw) {
    kvq_encoded e;
    kvq_err err;
    if (kvq_qet_encode(c, g_src, x, n, d, 1, 0, &e, &err)) { fprintf(stderr, "%s\n", err.msg); *bpw = NAN; return NAN; }
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
    if (kvq_qet_decode(e.params, v, e.n_blob, n, d, out, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    double se = 0;
    for (int64_t i = 0; i < n * d; i++) se += ((double)x[i] - out[i]) * ((double)x[i] - out[i]);
    if (fabs(se / (n * d) - e.predicted_mse) > 1e-9 * e.predicted_mse) { fprintf(stderr, "predicted mse mismatch\n"); exit(1); }
    *bpw = kvq_encoded_bpw(&e, n * d);
    kvq_encoded_free(&e);
    return se / (double)(n * d);
}

// Through the traits table (e.g. "hyperquant:e8"), when that codec is registered.
static double run_spec(const char *spec, const kvq_tensor *t, const float *x, int64_t n, int64_t d, float *out, double *bpw) {
    const kvq_codec_traits *c;
    json_t *cfg;
    kvq_err err;
    if (kvq_codec_parse_spec(spec, &c, &cfg, &err)) return NAN;
    kvq_codec_input in = {.src = t, .x = x, .rows = n, .cols = d, .seed = 1};
    kvq_encoded e;
    double m = NAN;
    if (c->encode(cfg, &in, &e, &err) == KVQ_OK) {
        kvq_blob_view v[KVQ_MAX_BLOBS];
        for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
        if (c->decode(e.params, v, e.n_blob, n, d, out, &err) == KVQ_OK) {
            double se = 0;
            for (int64_t i = 0; i < n * d; i++) se += ((double)x[i] - out[i]) * ((double)x[i] - out[i]);
            m = se / (double)(n * d);
            *bpw = kvq_encoded_bpw(&e, n * d);
        }
        kvq_encoded_free(&e);
    } else fprintf(stderr, "%s: %s\n", spec, err.msg);
    json_decref(cfg);
    return m;
}

static double rtn(const float *x, int64_t n, int64_t d, int b, int g, double *bpw) {
    double se = 0;
    int64_t qmax = (1LL << b) - 1;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j0 = 0; j0 < d; j0 += g) {
            int64_t j1 = j0 + g < d ? j0 + g : d;
            float mn = x[i * d + j0], mx = mn;
            for (int64_t j = j0; j < j1; j++) { mn = fminf(mn, x[i * d + j]); mx = fmaxf(mx, x[i * d + j]); }
            float sc = kvq_f16_to_f32(kvq_f32_to_f16((mx - mn) / (float)qmax)), z = kvq_f16_to_f32(kvq_f32_to_f16(mn));
            for (int64_t j = j0; j < j1; j++) {
                double q = sc > 0 ? rint((x[i * d + j] - z) / sc) : 0;
                q = q < 0 ? 0 : q > qmax ? qmax : q;
                double t = x[i * d + j] - (z + q * sc);
                se += t * t;
            }
        }
    *bpw = b + 32.0 / g;
    return se / (double)(n * d);
}

#define NCOL 9
int main(int argc, char **argv) {
    const char *sh = getenv("KVQ_SHARED");
    char def[1024];
    snprintf(def, sizeof def, "%s/models/kvq-small-llama", sh ? sh : "../shared");
    const char *path = argc > 1 && argv[1][0] != '-' ? argv[1] : def;
    int per_layer = 0, f32 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--per-layer")) per_layer = 1;
        if (!strcmp(argv[i], "--f32")) f32 = 1;
    }
    if (f32) g_src = KVQ_DTYPE_F32;
    const char *names_f32[NCOL] = {"QET", "Vanilla", "PQ", "Vanilla+RQO", "Vanilla+CQO", "-", "-", "-", "-"};
    const char *names_bf[NCOL] = {"QET", "Vanilla", "PQ", "QET-l1", "QET-l0", "RTN-g128", "RTN(b-1)-g32", "HQ-e8", "rtn-codec"};
    const char *const *names = f32 ? names_f32 : names_bf;
    kvq_ckpt *ck;
    kvq_err err;
    if (kvq_ckpt_open(path, &ck, &err)) { printf("qet_weights: skipped: %s\n", err.msg); return 0; }
    int have_hq = kvq_codec_find("hyperquant") != NULL;
    printf("%s, %d threads; MSE over all *_proj.weight elements (%s source); bpw = realized bits/weight\n", path,
           omp_get_max_threads(), f32 ? "counted as 32-bit" : "bf16");
    for (int bits = f32 ? 8 : 4; bits >= (f32 ? 4 : 3); bits -= f32 ? 4 : 1) {
        double ratio = (f32 ? 32.0 : 16.0) / bits, se[NCOL] = {0}, bw[NCOL] = {0}, cnt = 0, x2 = 0;
        printf("\n== %d effective bits (ratio %.4g)\n", bits, ratio);
        if (per_layer) {
            printf("%-44s", "tensor");
            for (int c = 0; c < NCOL; c++) printf(" %12s", names[c]);
            printf("\n");
        }
        for (size_t ti = 0; ti < kvq_ckpt_count(ck); ti++) {
            const kvq_tensor *t = kvq_ckpt_tensor(ck, ti);
            if (t->ndim != 2 || !strstr(t->name, "_proj.weight")) continue;
            int64_t n = t->shape[0], d = t->shape[1];
            float *x = malloc(sizeof(float) * n * d), *out = malloc(sizeof(float) * n * d);
            kvq_dtype_to_f32(t->dtype, t->data, (size_t)(n * d), x);
            double m[NCOL], b[NCOL];
            kvq_qet_config q = kvq_qet_config_default(ratio), v = kvq_qet_config_vanilla(ratio), p = kvq_qet_config_pq(ratio);
            kvq_qet_config q1 = q, q0 = q;
            q1.levels = 1;
            q0.levels = 0;
            m[0] = run_qet(&q, x, n, d, out, &b[0]);
            m[1] = run_qet(&v, x, n, d, out, &b[1]);
            m[2] = run_qet(&p, x, n, d, out, &b[2]);
            for (int c = 3; c < NCOL; c++) m[c] = b[c] = NAN;
            if (f32) { // the section 4.3 ablations instead: Vanilla+RQO, Vanilla+CQO
                kvq_qet_config vr = v, vc = v;
                vr.stages = 2;
                vc.cb_bits = 10;
                m[3] = run_qet(&vr, x, n, d, out, &b[3]);
                m[4] = run_qet(&vc, x, n, d, out, &b[4]);
            } else {
            m[3] = run_qet(&q1, x, n, d, out, &b[3]);
            m[4] = run_qet(&q0, x, n, d, out, &b[4]);
            m[5] = rtn(x, n, d, bits, 128, &b[5]);
            m[6] = rtn(x, n, d, bits - 1, 32, &b[6]);
            }
            char spec[64];
            snprintf(spec, sizeof spec, "hyperquant:e8:%d", bits);
            if (have_hq && !f32) m[7] = run_spec(spec, t, x, n, d, out, &b[7]);
            snprintf(spec, sizeof spec, "rtn:%d:g128", bits); // the rtn codec of the table, if registered
            if (kvq_codec_find("rtn") && !f32) m[8] = run_spec(spec, t, x, n, d, out, &b[8]);
            for (int64_t i = 0; i < n * d; i++) x2 += (double)x[i] * x[i];
            for (int c = 0; c < NCOL; c++) { se[c] += m[c] * (double)(n * d); bw[c] += b[c] * (double)(n * d); }
            cnt += (double)(n * d);
            if (per_layer) {
                printf("%-44s", t->name);
                for (int c = 0; c < NCOL; c++) printf(" %12.4g", m[c]);
                printf("\n");
            }
            free(x); free(out);
        }
        printf("%-14s %14s %14s %10s\n", "codec", "MSE", "MSE/E[x^2]", "bpw");
        for (int c = 0; c < NCOL; c++)
            if (strcmp(names[c], "-"))
                printf("%-14s %14.5g %14.5g %10.4f\n", names[c], se[c] / cnt, se[c] / x2, bw[c] / cnt);
    }
    kvq_ckpt_close(ck);
    return 0;
}
