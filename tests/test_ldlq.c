// Tests for LDLQ in the HyperQuant encoder (hq_ldlq.c, docs/HYPERQUANT.md "LDLQ"): with an identity
// covariance it writes the plain encoder's bytes; with a correlated one it lowers the proxy error
// tr(E H Eᵀ) at the same rate and both decoders reproduce the encoder's reconstruction; the spec's
// option and its refusals; the calibration keeps no covariance for an embedding (a lookup).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <libgen.h>

#include "libconv/codec/hyperquant/hq_impl.h"
#include "libconv/codec/hyperquant/hyperquant.h"
#include "formats/kvqfile.h"
#include "libconv/convert/alloc.h"
#include "tests/testrng.h"

static void views(const kvq_encoded *e, kvq_blob_view *v) {
    for (int i = 0; i < e->n_blob; i++) v[i] = (kvq_blob_view){e->blob[i].role, e->blob[i].data, e->blob[i].size};
}

// Encodes (rows, cols) x with o and covariance H (may be NULL) into e, recon.
static void enc(const kvq_hq_opts *o, const float *x, int64_t rows, int64_t cols, const double *H, kvq_encoded *e,
                float *recon, kvq_hq_stats *st) {
    kvq_codec_input in = {NULL, x, rows, cols, 77, 2, H};
    kvq_err err = {0};
    kvq_status s = kvq_hq_encode(o, &in, e, recon, st, &err);
    if (s) fprintf(stderr, "encode: %s\n", err.msg);
    assert_int_equal(s, KVQ_OK);
}

static int same_bytes(const kvq_encoded *a, const kvq_encoded *b) {
    if (a->n_blob != b->n_blob) return 0;
    for (int i = 0; i < a->n_blob; i++)
        if (a->blob[i].size != b->blob[i].size || memcmp(a->blob[i].data, b->blob[i].data, a->blob[i].size)) return 0;
    char *pa = json_dumps(a->params, JSON_COMPACT | JSON_SORT_KEYS), *pb = json_dumps(b->params, JSON_COMPACT | JSON_SORT_KEYS);
    int same = !strcmp(pa, pb);
    free(pa), free(pb);
    return same;
}

// tr(E H Eᵀ) / rows, E = x − r.
static double proxy(const float *x, const float *r, const double *H, int64_t rows, int64_t cols) {
    double tot = 0.0, *e = malloc(sizeof(double) * (size_t)cols);
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < cols; j++) e[j] = (double)x[i * cols + j] - (double)r[i * cols + j];
        for (int64_t a = 0; a < cols; a++) {
            double s = 0.0;
            for (int64_t b = 0; b < cols; b++) s += H[a * cols + b] * e[b];
            tot += e[a] * s;
        }
    }
    free(e);
    return tot / (double)rows;
}

static float *gauss_matrix(int64_t rows, int64_t cols, uint64_t seed) {
    float *x = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) x[i] = (float)gauss(&seed);
    return x;
}

// H = I (and 3·I): every lattice gives the plain encoder's bytes, at a rate and at a fixed SNR.
static void test_identity_bitexact(void **state) {
    (void)state;
    const int64_t rows = 48, cols = 256;
    float *x = gauss_matrix(rows, cols, 1);
    double *H = calloc((size_t)(cols * cols), sizeof(double));
    const kvq_lattice lats[] = {KVQ_LAT_E8, KVQ_LAT_D4, KVQ_LAT_A2, KVQ_LAT_Z};
    for (int scale = 1; scale <= 3; scale += 2) {
        for (int64_t i = 0; i < cols; i++) H[i * cols + i] = scale;
        for (int li = 0; li < 4; li++)
            for (int mode = 0; mode < 2; mode++) {
                kvq_hq_opts o = kvq_hq_opts_default(lats[li], mode ? NAN : 3.5);
                if (mode) o.snr_db = 17.0;
                kvq_encoded a, b;
                enc(&o, x, rows, cols, NULL, &a, NULL, NULL);
                o.ldlq = 1;
                enc(&o, x, rows, cols, H, &b, NULL, NULL);
                assert_true(same_bytes(&a, &b));
                kvq_encoded_free(&a);
                kvq_encoded_free(&b);
            }
    }
    free(H);
    free(x);
}

// A correlated SPD H (inputs x = z·B with scaled columns): LDLQ's proxy error below the plain
// encoder's at the same effective rate, the rate met, the bitstream decoding to the encoder's
// reconstruction (both decoders); without a covariance ldlq is the plain encoder.
static void test_proxy_lower(void **state) {
    (void)state;
    const int64_t rows = 96, cols = 256, N = 2048;
    float *w = gauss_matrix(rows, cols, 2);
    uint64_t sd = 3;
    double *B = malloc(sizeof(double) * (size_t)(cols * cols)), *X = malloc(sizeof(double) * (size_t)(N * cols));
    double *H = calloc((size_t)(cols * cols), sizeof(double));
    for (int64_t i = 0; i < cols * cols; i++) B[i] = gauss(&sd) / sqrt((double)cols);
    for (int64_t i = 0; i < cols; i++) B[i * cols + i] += 1.0;
    for (int64_t t = 0; t < N; t++) {
        double z[256];
        for (int64_t j = 0; j < cols; j++) z[j] = gauss(&sd) * (j % 7 == 0 ? 4.0 : 1.0);
        for (int64_t j = 0; j < cols; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < cols; k++) s += z[k] * B[k * cols + j];
            X[t * cols + j] = s;
        }
    }
    for (int64_t t = 0; t < N; t++)
        for (int64_t a = 0; a < cols; a++)
            for (int64_t b = 0; b < cols; b++) H[a * cols + b] += X[t * cols + a] * X[t * cols + b];
    float *r0 = malloc(sizeof(float) * (size_t)(rows * cols)), *r1 = malloc(sizeof(float) * (size_t)(rows * cols));
    float *d = malloc(sizeof(float) * (size_t)(rows * cols));
    const kvq_lattice lats[] = {KVQ_LAT_E8, KVQ_LAT_D4};
    const double rates[] = {3.0, 4.0};
    for (int li = 0; li < 2; li++)
        for (int ri = 0; ri < 2; ri++) {
            kvq_hq_opts o = kvq_hq_opts_default(lats[li], rates[ri]);
            kvq_encoded a, b, c;
            kvq_hq_stats sa, sb;
            enc(&o, w, rows, cols, H, &a, r0, &sa); // ldlq off: H ignored
            o.ldlq = 1;
            enc(&o, w, rows, cols, H, &b, r1, &sb);
            enc(&o, w, rows, cols, NULL, &c, NULL, NULL);
            assert_true(same_bytes(&a, &c)); // no covariance: the plain encoder
            const double pa = proxy(w, r0, H, rows, cols), pb = proxy(w, r1, H, rows, cols);
            const double ea = kvq_encoded_bpw(&a, rows * cols), eb = kvq_encoded_bpw(&b, rows * cols);
            printf("lattice %s rate %.1f: proxy plain %.4g ldlq %.4g (%.1f %%), bits %.4f / %.4f, SNR %.2f / %.2f dB\n",
                   kvq_lattice_name(lats[li]), rates[ri], pa, pb, 100.0 * (pb / pa - 1.0), ea, eb, sa.snr_real_db,
                   sb.snr_real_db);
            assert_true(fabs(ea - rates[ri]) < 0.01 && fabs(eb - rates[ri]) < 0.01);
            assert_true(pb < 0.5 * pa); // measured 0.31–0.33 of the plain proxy
            kvq_hq_header h;
            kvq_err err = {0};
            kvq_blob_view v[KVQ_MAX_BLOBS];
            views(&b, v);
            assert_int_equal(kvq_hq_header_parse(b.params, rows, cols, &h, &err), KVQ_OK);
            assert_int_equal(kvq_hq_decode_ref(&h, v, b.n_blob, d, &err), KVQ_OK);
            assert_memory_equal(d, r1, sizeof(float) * (size_t)(rows * cols));
            memset(d, 0xff, sizeof(float) * (size_t)(rows * cols));
            assert_int_equal(kvq_hq_decode(&h, v, b.n_blob, d, 2, &err), KVQ_OK);
            assert_memory_equal(d, r1, sizeof(float) * (size_t)(rows * cols));
            kvq_encoded_free(&a);
            kvq_encoded_free(&b);
            kvq_encoded_free(&c);
        }
    free(r0), free(r1), free(d), free(B), free(X), free(H), free(w);
}

// Padded rows (cols = 200: tiles of 128, 56 zero columns): the covariance is padded with zeros and
// damped; the bitstream still decodes to the encoder's reconstruction and the proxy still falls.
static void test_padded(void **state) {
    (void)state;
    const int64_t rows = 40, cols = 200, N = 1024;
    float *w = gauss_matrix(rows, cols, 12);
    uint64_t sd = 13;
    double *H = calloc((size_t)(cols * cols), sizeof(double)), *x = malloc(sizeof(double) * (size_t)cols);
    for (int64_t t = 0; t < N; t++) {
        double z = gauss(&sd);
        for (int64_t j = 0; j < cols; j++) x[j] = 0.9 * z + 0.45 * gauss(&sd); // strongly correlated inputs
        for (int64_t a = 0; a < cols; a++)
            for (int64_t b = 0; b < cols; b++) H[a * cols + b] += x[a] * x[b];
    }
    float *r0 = malloc(sizeof(float) * (size_t)(rows * cols)), *r1 = malloc(sizeof(float) * (size_t)(rows * cols)),
          *d = malloc(sizeof(float) * (size_t)(rows * cols));
    kvq_hq_opts o = kvq_hq_opts_default(KVQ_LAT_E8, 3.5);
    kvq_encoded a, b;
    enc(&o, w, rows, cols, NULL, &a, r0, NULL);
    o.ldlq = 1;
    enc(&o, w, rows, cols, H, &b, r1, NULL);
    const double pa = proxy(w, r0, H, rows, cols), pb = proxy(w, r1, H, rows, cols);
    printf("padded: proxy plain %.4g ldlq %.4g (%.1f %%)\n", pa, pb, 100.0 * (pb / pa - 1.0));
    assert_true(pb < 0.5 * pa);
    kvq_hq_header h;
    kvq_err err = {0};
    kvq_blob_view v[KVQ_MAX_BLOBS];
    views(&b, v);
    assert_int_equal(kvq_hq_header_parse(b.params, rows, cols, &h, &err), KVQ_OK);
    assert_int_equal(h.cols_p, 256);
    assert_int_equal(kvq_hq_decode(&h, v, b.n_blob, d, 2, &err), KVQ_OK);
    assert_memory_equal(d, r1, sizeof(float) * (size_t)(rows * cols));
    kvq_encoded_free(&a);
    kvq_encoded_free(&b);
    free(r0), free(r1), free(d), free(H), free(x), free(w);
}

// The feedback against a plain reference: H_rot built by explicit matrices (R = blockdiag(H_T D_j)),
// its U D Uᵀ factor by the textbook recursion from the last block, U's blocks compared with
// kvq_hq_ldlq_feedback's.
static void test_feedback_reference(void **state) {
    (void)state;
    const int C = 64, T = 32, n = 8, K = C / n;
    uint64_t sd = 9;
    double H[64 * 64] = {0}, G[64 * 64], R[64 * 64] = {0}, Hr[64 * 64], tmp[64 * 64];
    for (int i = 0; i < C * C; i++) G[i] = gauss(&sd);
    for (int a = 0; a < C; a++)
        for (int b = 0; b < C; b++)
            for (int k = 0; k < C; k++) H[a * C + b] += G[a * C + k] * G[b * C + k];
    float sgn[64];
    kvq_hq_signs(5, T, C, sgn);
    for (int j0 = 0; j0 < C; j0 += T) // R[i][k] = H_T[i][k] · s_k (Sylvester: (−1)^popcount(i&k))
        for (int i = 0; i < T; i++)
            for (int k = 0; k < T; k++) R[(j0 + i) * C + j0 + k] = (__builtin_popcount(i & k) & 1 ? -1.0 : 1.0) * sgn[j0 + k];
    for (int a = 0; a < C; a++)
        for (int b = 0; b < C; b++) {
            double s = 0.0;
            for (int k = 0; k < C; k++) s += R[a * C + k] * H[k * C + b];
            tmp[a * C + b] = s;
        }
    double tr = 0.0;
    for (int a = 0; a < C; a++)
        for (int b = 0; b < C; b++) {
            double s = 0.0;
            for (int k = 0; k < C; k++) s += tmp[a * C + k] * R[b * C + k];
            Hr[a * C + b] = s;
        }
    for (int a = 0; a < C; a++) tr += Hr[a * C + a];
    for (int a = 0; a < C; a++) Hr[a * C + a] += 0.05 * tr / C;
    // U D Uᵀ by blocks from the last: D_k = S_kk, U_ik = S_ik D_k⁻¹, S ← S − U_ik D_k U_jkᵀ (i, j < k)
    double S[64 * 64];
    memcpy(S, Hr, sizeof S);
    float *A = NULL;
    kvq_err err = {0};
    assert_int_equal(kvq_hq_ldlq_feedback(H, C, C, T, sgn, 0.05, n, &A, &err), KVQ_OK);
    double maxd = 0.0;
    for (int k = K - 1; k >= 1; k--) {
        const int b0 = k * n;
        double Dinv[64], M[8 * 8];
        for (int r = 0; r < n; r++)
            for (int c = 0; c < n; c++) M[r * n + c] = S[(b0 + r) * C + b0 + c];
        // Gauss–Jordan inverse of the n × n block
        double aug[8][16];
        for (int r = 0; r < n; r++)
            for (int c = 0; c < 2 * n; c++) aug[r][c] = c < n ? M[r * n + c] : (c - n == r);
        for (int p = 0; p < n; p++) {
            double piv = aug[p][p];
            for (int c = 0; c < 2 * n; c++) aug[p][c] /= piv;
            for (int r = 0; r < n; r++)
                if (r != p) {
                    double f = aug[r][p];
                    for (int c = 0; c < 2 * n; c++) aug[r][c] -= f * aug[p][c];
                }
        }
        for (int r = 0; r < n; r++)
            for (int c = 0; c < n; c++) Dinv[r * n + c] = aug[r][n + c];
        const float *Ak = A + (size_t)(n * n) * (size_t)(k * (k - 1) / 2);
        double U[64 * 8];
        for (int i = 0; i < b0; i++)
            for (int c = 0; c < n; c++) {
                double s = 0.0;
                for (int q = 0; q < n; q++) s += S[i * C + b0 + q] * Dinv[q * n + c];
                U[i * n + c] = s;
                double dd = fabs(s - (double)Ak[i * n + c]);
                if (dd > maxd) maxd = dd;
            }
        for (int i = 0; i < b0; i++) // Schur complement on the blocks before k
            for (int j = 0; j < b0; j++) {
                double s = 0.0;
                for (int q = 0; q < n; q++) s += U[i * n + q] * S[j * C + b0 + q];
                S[i * C + j] -= s;
            }
    }
    assert_true(maxd < 1e-4);
    free(A);
    // a matrix that is not positive definite (no damping, rank 0) is refused
    double Z[16 * 16] = {0};
    float s16[16];
    kvq_hq_signs(1, 16, 16, s16);
    assert_int_equal(kvq_hq_ldlq_feedback(Z, 16, 16, 16, s16, 0.0, 8, &A, &err), KVQ_ERR_NUMERIC);
    assert_null(A);
}

// The spec: ldlq and ldlq=<damp> parse, bad damping and int8 are refused.
static void test_spec(void **state) {
    (void)state;
    const kvq_codec_traits *c = kvq_codec_find("hyperquant");
    json_t *cfg = NULL;
    kvq_err err = {0};
    assert_int_equal(c->parse("e8:3.5:ldlq", &cfg, &err), KVQ_OK);
    assert_true(fabs(json_number_value(json_object_get(cfg, "ldlq")) - 0.01) < 1e-12);
    json_decref(cfg);
    assert_int_equal(c->parse("e8:3.5:ldlq=0.1", &cfg, &err), KVQ_OK);
    assert_true(fabs(json_number_value(json_object_get(cfg, "ldlq")) - 0.1) < 1e-12);
    json_decref(cfg);
    assert_int_equal(c->parse("e8:3.5", &cfg, &err), KVQ_OK);
    assert_null(json_object_get(cfg, "ldlq"));
    json_decref(cfg);
    const char *bad[] = {"e8:3.5:ldlq=0", "e8:3.5:ldlq=x", "e8:3.5:ldlq=-1", "e8:3.5:int8:ldlq"};
    for (int i = 0; i < 4; i++) {
        cfg = NULL;
        assert_int_equal(c->parse(bad[i], &cfg, &err), KVQ_ERR_ARG);
        assert_null(cfg);
    }
    char out[256];
    assert_int_equal(c->with_rate("e8:3.5:ldlq=0.1", 4.25, KVQ_DTYPE_BF16, out, sizeof out, &err), KVQ_OK);
    assert_string_equal(out, "e8:4.25:ldlq=0.1");
}

// The calibration's covariances (kvq-tiny-llama, 32 tokens): one for each product, symmetric with
// the diagonal the per-column Σx² the pass also keeps; none for the embedding (tied or not) nor for
// an unknown name.
static void test_calib_hessian(void **state) {
    (void)state;
    const char *src = "tests/models/kvq-tiny-llama";
    kvq_calib *c = NULL;
    kvq_err err = {0};
    kvq_status s = kvq_calib_run(src, NULL, 32, 1, 2, 1, NULL, NULL, &c, &err);
    if (s) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(s, KVQ_OK);
    const double *h = kvq_calib_hessian(c, "model.layers.1.mlp.down_proj.weight", 256, 704);
    assert_non_null(h);
    assert_non_null(kvq_calib_hessian(c, "model.layers.0.self_attn.q_proj.weight", 256, 256));
    assert_null(kvq_calib_hessian(c, "model.embed_tokens.weight", 4096, 256));
    assert_null(kvq_calib_hessian(c, "model.layers.0.mlp.down_proj.weight", 256, 100)); // wrong width
    assert_null(kvq_calib_hessian(c, "model.norm.weight", 1, 256));
    double asym = 0.0, dmin = INFINITY;
    for (int a = 0; a < 704; a++) {
        if (h[a * 704 + a] < dmin) dmin = h[a * 704 + a];
        for (int b = 0; b < a; b++) asym = fmax(asym, fabs(h[a * 704 + b] - h[b * 704 + a]) / (fabs(h[a * 704 + b]) + 1e-30));
    }
    assert_true(dmin >= 0.0 && asym < 1e-5);
    kvq_calib_free(c);
}

static char g_build[512] = "build"; // from argv[0]: <build>/tests/test_ldlq

// kvq-convert (env, then --weights hyperquant:e8:4:ldlq and args, into d/out) refused: its exit status passes `test $?
// <status>`, nothing is left at d/out, stderr is one line matching the pattern (and the second one, when given).
static void refused(const char *d, const char *env, const char *args, const char *out, const char *status, const char *re,
                    const char *re2) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s/kvq-convert -q --weights hyperquant:e8:4:ldlq %s %s/%s 2> %s/err; test $? %s && test ! "
             "-e %s/%s && test $(wc -l < %s/err) -eq 1 && grep -q \"%s\" %s/err && grep -q \"%s\" %s/err", env, g_build, args, d,
             out, d, status, d, out, d, re, d, re2 ? re2 : "", d);
    assert_int_equal(system(cmd), 0);
}

// kvq-convert: ldlq on a calibration too short for the widest input (kvq-tiny-llama's down_proj,
// 704 columns: 512 sampled tokens < 1408) is one line and exit 2, nothing written, before any
// calibration runs (and after it when the text holds fewer tokens than asked for); with enough
// text tokens it converts, and the file decodes (kvq-verify's integrity check); covariances that do not
// fit the memory left are refused in one line before the pass.
static void test_cli(void **state) {
    (void)state;
    char cmd[2048], d[] = "/tmp/kvq-ldlq-XXXXXX";
    assert_non_null(mkdtemp(d));
    refused(d, "", "tests/models/kvq-tiny-llama", "a.kvq", "-eq 2", "ldlq needs a calibration of at least 1408 tokens",
            "512 are asked for");
    // enough tokens asked for, but the text holds fewer: refused after the calibration pass
    snprintf(cmd, sizeof cmd, "head -c 2000 tests/data/heldout-sample.txt > %s/short.txt", d);
    assert_int_equal(system(cmd), 0);
    char args[512];
    snprintf(args, sizeof args, "--calib %s/short.txt --calib-tokens 4000 tests/models/kvq-tiny-llama", d);
    refused(d, "", args, "s.kvq", "-eq 2", "at least 1408 tokens .* and this one has", NULL);
    // the covariances do not fit the memory left (KVQ_MEM_AVAILABLE_MB stands for /proc/meminfo's MemAvailable): one
    // line naming the need, before any pass, nothing written
    refused(d, "KVQ_MEM_AVAILABLE_MB=5", "--calib tests/data/heldout-sample.txt --calib-tokens 2000 tests/models/kvq-tiny-llama",
            "m.kvq", "-ne 0", "ldlq's input covariances need 0.03 GB .* and 0.01 GB of memory is available", NULL);
    snprintf(cmd, sizeof cmd, "%s/kvq-convert -q --weights hyperquant:e8:4:ldlq --calib tests/data/heldout-sample.txt "
             "--calib-tokens 2000 tests/models/kvq-tiny-llama %s/b.kvq && %s/kvq-convert -q --weights hyperquant:e8:4 "
             "tests/models/kvq-tiny-llama %s/c.kvq && ! cmp -s %s/b.kvq %s/c.kvq && %s/kvq-verify -q --windows 1 --ctx 64 "
             "--text tests/data/heldout-sample.txt %s/b.kvq > /dev/null", g_build, d, g_build, d, d, d, g_build, d);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", d);
    assert_int_equal(system(cmd), 0);
}

// LDLQ by default: --target-bpw with a calibration text of enough tokens (kvq-tiny-llama: 2 × 704) rounds its HyperQuant
// with LDLQ and says so in the manifest (recipe.target_bpw.ldlq = "auto", ":ldlq" in the tensors' specs); not with too few
// tokens asked for, not when the covariances would not fit the memory left (a note, no refusal), and not when the text
// holds fewer tokens than asked for (the specs taken back to plain rounding after the pass).
static int auto_ldlq(const char *out, int tokens, const char *text, int *n_ldlq) {
    kvq_convert_opts o = {0};
    o.plan.quantize_embeddings = -1;
    o.plan.target_bpw = 4.0;
    o.plan.calib_text = text;
    o.plan.calib_tokens = tokens;
    kvq_err err = {0};
    kvq_convert_summary sum;
    kvq_status s = kvq_convert("tests/models/kvq-tiny-llama", out, &o, &sum, &err);
    if (s) print_message("%s\n", err.msg);
    assert_int_equal(s, KVQ_OK);
    kvq_file *f = NULL;
    assert_int_equal(kvq_file_open(out, &f, &err), KVQ_OK);
    const json_t *m = kvq_file_manifest(f), *t;
    size_t i;
    *n_ldlq = 0;
    json_array_foreach(json_object_get(m, "tensors"), i, t) {
        const char *sp = json_string_value(json_object_get(json_object_get(t, "codec"), "spec"));
        *n_ldlq += sp && strstr(sp, ":ldlq") != NULL;
    }
    const json_t *l = json_object_get(json_object_get(json_object_get(m, "recipe"), "target_bpw"), "ldlq");
    const int on = l && json_is_string(l) && !strcmp(json_string_value(l), "auto");
    kvq_file_close(f);
    return on;
}

static void test_auto(void **state) {
    (void)state;
    char d[] = "/tmp/kvq-ldlq-auto-XXXXXX", a[256], b[256], c[256], e[256], sh[256], cmd[512];
    assert_non_null(mkdtemp(d));
    snprintf(a, sizeof a, "%s/a.kvq", d), snprintf(b, sizeof b, "%s/b.kvq", d), snprintf(c, sizeof c, "%s/c.kvq", d);
    snprintf(e, sizeof e, "%s/e.kvq", d), snprintf(sh, sizeof sh, "%s/short.txt", d);
    int n = 0;
    assert_true(auto_ldlq(a, 2000, "tests/data/heldout-sample.txt", &n)); // enough tokens: LDLQ
    assert_true(n >= 10);                                                    // every linear layer (no embedding)
    assert_false(auto_ldlq(b, 64, "tests/data/heldout-sample.txt", &n));    // too few asked for: plain
    assert_int_equal(n, 0);
    setenv("KVQ_MEM_AVAILABLE_MB", "5", 1); // covariances of 0.03 GB against 5 MB: plain, converted all the same
    assert_false(auto_ldlq(c, 2000, "tests/data/heldout-sample.txt", &n));
    unsetenv("KVQ_MEM_AVAILABLE_MB");
    assert_int_equal(n, 0);
    snprintf(cmd, sizeof cmd, "head -c 2000 tests/data/heldout-sample.txt > %s", sh);
    assert_int_equal(system(cmd), 0);
    assert_false(auto_ldlq(e, 2000, sh, &n)); // asked for enough, the text holds fewer: back to plain
    assert_int_equal(n, 0);
    snprintf(cmd, sizeof cmd, "! cmp -s %s %s && rm -rf %s", a, c, d); // LDLQ changed the codes
    assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv) {
    char *a = strdup(argv[0]);
    snprintf(g_build, sizeof g_build, "%s", dirname(dirname(a))); // <build>/tests/test_ldlq
    free(a);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_bitexact),
        cmocka_unit_test(test_proxy_lower),
        cmocka_unit_test(test_padded),
        cmocka_unit_test(test_feedback_reference),
        cmocka_unit_test(test_spec),
        cmocka_unit_test(test_calib_hessian),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
