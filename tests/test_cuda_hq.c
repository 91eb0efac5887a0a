// GPU HyperQuant decoder (kernels/cuda/hq_decode.cu) against the CPU decoders: seeded
// random tensors of several shapes (tile 16..128, padded widths, partial last groups),
// all four lattices, several rates; decode must be bit-identical (fp32, and bf16 as the
// RNE of the CPU floats), the fused matvec within a rounding bound derived in
// docs/CUDA.md, corrupt streams reported as the CPU reports them. Skips without a GPU.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/dtype.h"
#include "kernels/cuda/hq_decode.h"
#include "libconv/codec/hyperquant/hq_impl.h"
#include "libconv/codec/hyperquant/hyperquant.h"
#include "tests/testrng.h"


static int have_gpu(void) {
    char why[256] = "";
    if (kvq_cuda_device_count(why, sizeof why) > 0) return 1;
    fprintf(stderr, "test_cuda_hq: skipped: %s\n", why);
    return 0;
}

typedef struct {
    kvq_encoded e;
    kvq_hq_header h;
    const kvq_blob_view *codes, *norms, *offs;
    kvq_blob_view v[KVQ_MAX_BLOBS];
    int64_t rows, cols;
} enc_t;

// Heavy-tailed-ish rows (per-row scale, a few zero rows so zero tiles occur).
static void encode(enc_t *E, kvq_lattice l, double bps, int64_t rows, int64_t cols, uint64_t seed) {
    float *x = malloc(sizeof(float) * rows * cols);
    uint64_t s = seed;
    for (int64_t r = 0; r < rows; r++) {
        double sc = r % 7 == 3 ? 0.0 : exp(gauss(&s));
        for (int64_t c = 0; c < cols; c++) x[r * cols + c] = (float)(sc * gauss(&s));
    }
    kvq_hq_opts o = kvq_hq_opts_default(l, bps);
    kvq_codec_input in = {NULL, x, rows, cols, seed, 0, NULL};
    kvq_err err = {0};
    kvq_status st = kvq_hq_encode(&o, &in, &E->e, NULL, NULL, &err);
    if (st) fprintf(stderr, "encode: %s\n", err.msg);
    assert_int_equal(st, KVQ_OK);
    assert_int_equal(kvq_hq_header_parse(E->e.params, rows, cols, &E->h, &err), KVQ_OK);
    for (int i = 0; i < E->e.n_blob; i++)
        E->v[i] = (kvq_blob_view){E->e.blob[i].role, E->e.blob[i].data, E->e.blob[i].size};
    E->codes = kvq_blob_find(E->v, E->e.n_blob, "codes");
    E->norms = kvq_blob_find(E->v, E->e.n_blob, "norms");
    E->offs = kvq_blob_find(E->v, E->e.n_blob, "offsets");
    assert_non_null(E->codes);
    assert_non_null(E->norms);
    assert_non_null(E->offs);
    E->rows = rows;
    E->cols = cols;
    free(x);
}

static kvq_cuda_hq_desc desc_of(const kvq_hq_header *h) {
    kvq_cuda_hq_desc d = {h->lat, h->int8, h->cast, h->tile, h->rows, h->cols, h->cols_p, h->norm_bits,
                          h->norm_exp, h->alpha, {h->k[0], h->k[1]}, h->seed};
    return d;
}

static kvq_status upload(const enc_t *E, const uint8_t *codes, kvq_cuda_hq **t, kvq_err *err) {
    kvq_cuda_hq_desc d = desc_of(&E->h);
    return kvq_cuda_hq_upload(&d, codes, E->codes->size, E->norms->data, E->norms->size, E->offs->data,
                              E->offs->size, t, err);
}

// Decodes on the GPU into a poisoned device buffer; returns the status of the check.
static kvq_status gpu_decode(kvq_cuda_hq *t, int64_t n, kvq_cuda_dtype dt, void *host, kvq_err *err) {
    size_t sz = (size_t)n * (dt == KVQ_CUDA_BF16 ? 2 : 4);
    void *d = NULL;
    assert_int_equal(kvq_cuda_malloc(&d, sz, err), KVQ_OK);
    assert_int_equal(kvq_cuda_memset(d, 0xff, sz, err), KVQ_OK); // NaN / all-ones poison
    kvq_status st = kvq_cuda_hq_decode(t, d, dt, err);
    if (!st) st = kvq_cuda_hq_check(t, err);
    if (!st) assert_int_equal(kvq_cuda_copy(host, d, sz, 0, err), KVQ_OK);
    kvq_cuda_free(d);
    return st;
}

static const int64_t SHAPES[][2] = {
    {64, 1024}, // T 128, 512 tiles = 32 groups: one full block
    {37, 384},  // T 128, 111 tiles: partial last group
    {33, 200},  // T 128 after zero padding to 256
    {17, 96},   // T 32
    {9, 48},    // T 16
    {70, 4096}, // T 128, 2240 tiles = 140 groups: several blocks
};
static const double RATES[] = {3.0, 4.0, 6.0};

// ---- bit-exact decode, every lattice, rate and shape

static void test_decode_bitexact(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    int n_cases = 0;
    for (int l = 0; l < KVQ_LAT_COUNT; l++)
        for (size_t ri = 0; ri < sizeof RATES / sizeof *RATES; ri++)
            for (size_t si = 0; si < sizeof SHAPES / sizeof *SHAPES; si++) {
                const int64_t rows = SHAPES[si][0], cols = SHAPES[si][1], n = rows * cols;
                enc_t E;
                encode(&E, (kvq_lattice)l, RATES[ri], rows, cols, 1000 + 97 * l + 13 * ri + si);
                kvq_err err = {0};
                float *ref = malloc(sizeof(float) * n), *fast = malloc(sizeof(float) * n),
                      *gpu = malloc(sizeof(float) * n);
                uint16_t *gb = malloc(2 * n);
                assert_int_equal(kvq_hq_decode_ref(&E.h, E.v, E.e.n_blob, ref, &err), KVQ_OK);
                assert_int_equal(kvq_hq_decode(&E.h, E.v, E.e.n_blob, fast, 2, &err), KVQ_OK);
                assert_memory_equal(ref, fast, sizeof(float) * n);
                kvq_cuda_hq *t = NULL;
                kvq_status st = upload(&E, E.codes->data, &t, &err);
                if (st) fprintf(stderr, "upload: %s\n", err.msg);
                assert_int_equal(st, KVQ_OK);
                st = gpu_decode(t, n, KVQ_CUDA_F32, gpu, &err);
                if (st) fprintf(stderr, "decode: %s\n", err.msg);
                assert_int_equal(st, KVQ_OK);
                int64_t diff = 0;
                for (int64_t i = 0; i < n; i++) diff += memcmp(&ref[i], &gpu[i], 4) != 0;
                if (diff)
                    fprintf(stderr, "%s %.1f bps %lldx%lld (T %d): %lld of %lld floats differ\n",
                            kvq_lattice_name(l), RATES[ri], (long long)rows, (long long)cols, E.h.tile,
                            (long long)diff, (long long)n);
                assert_int_equal(diff, 0);
                assert_int_equal(gpu_decode(t, n, KVQ_CUDA_BF16, gb, &err), KVQ_OK);
                for (int64_t i = 0; i < n; i++) assert_int_equal(gb[i], kvq_f32_to_bf16(ref[i]));
                kvq_cuda_hq_free(t);
                kvq_encoded_free(&E.e);
                free(ref);
                free(fast);
                free(gpu);
                free(gb);
                n_cases++;
            }
    fprintf(stderr, "test_cuda_hq: %d tensors decoded bit-identically (fp32 and bf16)\n", n_cases);
}

// ---- fused matvec vs CPU decode + fp64 matvec
// Bound (docs/CUDA.md): |y - y_ref| <= (log2 T + T + tpr + 8)·u·Σ_t ||W_t||₂·||x_t||₂, u = 2^-24,
// W_t the full (padded) decoded tile: rotation error, sequential FMA over a tile, the scale,
// the sequential row sum, and the CPU's own rounding of W.

static void test_matvec_bound(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    double worst = 0, worst_rel = 0;
    for (int l = 0; l < KVQ_LAT_COUNT; l++)
        for (size_t ri = 0; ri < sizeof RATES / sizeof *RATES; ri += 1)
            for (size_t si = 0; si < sizeof SHAPES / sizeof *SHAPES; si++) {
                const int64_t rows = SHAPES[si][0], cols = SHAPES[si][1];
                enc_t E;
                encode(&E, (kvq_lattice)l, RATES[ri], rows, cols, 5000 + 31 * l + 7 * ri + si);
                const int64_t cp = E.h.cols_p, T = E.h.tile, tpr = cp / T;
                kvq_err err = {0};
                kvq_hq_header hf = E.h; // full padded width: the tiles the kernel really uses
                hf.cols = cp;
                float *wf = malloc(sizeof(float) * rows * cp), *x = malloc(sizeof(float) * cols),
                      *y = malloc(sizeof(float) * rows);
                assert_int_equal(kvq_hq_decode(&hf, E.v, E.e.n_blob, wf, 2, &err), KVQ_OK);
                uint64_t s = 77 + l + 10 * si + 100 * ri;
                for (int64_t c = 0; c < cols; c++) x[c] = (float)gauss(&s);
                kvq_cuda_hq *t = NULL;
                assert_int_equal(upload(&E, E.codes->data, &t, &err), KVQ_OK);
                float *dx, *dy;
                assert_int_equal(kvq_cuda_malloc((void **)&dx, sizeof(float) * cols, &err), KVQ_OK);
                assert_int_equal(kvq_cuda_malloc((void **)&dy, sizeof(float) * rows, &err), KVQ_OK);
                assert_int_equal(kvq_cuda_copy(dx, x, sizeof(float) * cols, 1, &err), KVQ_OK);
                assert_int_equal(kvq_cuda_memset(dy, 0xff, sizeof(float) * rows, &err), KVQ_OK);
                assert_int_equal(kvq_cuda_hq_matvec(t, dx, dy, &err), KVQ_OK);
                assert_int_equal(kvq_cuda_hq_check(t, &err), KVQ_OK);
                assert_int_equal(kvq_cuda_copy(y, dy, sizeof(float) * rows, 0, &err), KVQ_OK);
                const double u = 0x1.0p-24, K = log2((double)T) + (double)T + (double)tpr + 8;
                double num = 0, den = 0;
                for (int64_t r = 0; r < rows; r++) {
                    double yr = 0, B = 0;
                    for (int64_t j = 0; j < tpr; j++) {
                        double wn = 0, xn = 0;
                        for (int64_t i = 0; i < T; i++) {
                            int64_t c = j * T + i;
                            double w = wf[r * cp + c], xv = c < cols ? x[c] : 0.0;
                            yr += w * xv; // the CPU decode restricted to cols (padding x is 0)
                            wn += w * w;
                            xn += xv * xv;
                        }
                        B += sqrt(wn) * sqrt(xn);
                    }
                    assert_false(isnan(y[r]));
                    double e = fabs((double)y[r] - yr), bound = K * u * B;
                    if (e > bound)
                        fprintf(stderr, "%s %.1f %lldx%lld row %lld: |%.9g - %.9g| = %.3g > bound %.3g\n",
                                kvq_lattice_name(l), RATES[ri], (long long)rows, (long long)cols, (long long)r,
                                (double)y[r], yr, e, bound);
                    assert_true(e <= bound);
                    if (B > 0 && e / (u * B) > worst) worst = e / (u * B);
                    num += e * e;
                    den += yr * yr;
                }
                if (den > 0 && sqrt(num / den) > worst_rel) worst_rel = sqrt(num / den);
                kvq_cuda_free(dx);
                kvq_cuda_free(dy);
                kvq_cuda_hq_free(t);
                kvq_encoded_free(&E.e);
                free(wf);
                free(x);
                free(y);
            }
    fprintf(stderr, "test_cuda_hq: matvec worst error %.2f u·B (bound allows log2T+T+tpr+8), worst ||Δy||/||y|| %.2e\n",
            worst, worst_rel);
    assert_true(worst_rel < 1e-5); // fp32: far under 1e-3
}

// ---- corrupt streams: the GPU flags exactly what the CPU decoders flag, and decodes the
// rest identically; bad offsets are refused at upload.

static void test_corrupt(void **state) {
    (void)state;
    if (!have_gpu()) skip();
    int flagged = 0, trials = 0;
    for (int l = 0; l < KVQ_LAT_COUNT; l++) {
        enc_t E;
        encode(&E, (kvq_lattice)l, 4.0, 37, 384, 9000 + l);
        const int64_t n = E.rows * E.cols;
        uint8_t *bad = malloc(E.codes->size);
        float *cpu = malloc(sizeof(float) * n), *gpu = malloc(sizeof(float) * n);
        uint64_t s = 4242 + l;
        for (int trial = 0; trial < 12; trial++) {
            memcpy(bad, E.codes->data, E.codes->size);
            int nflip = 1 + trial % 4;
            for (int f = 0; f < nflip; f++) {
                size_t at = rng_next(&s) % E.codes->size;
                bad[at] = trial % 3 == 0 ? 0 : (uint8_t)(bad[at] ^ (1u << (rng_next(&s) % 8)));
            }
            if (trial == 11) memset(bad + E.codes->size / 2, 0, E.codes->size / 2); // long unary runs
            kvq_blob_view v[KVQ_MAX_BLOBS];
            memcpy(v, E.v, sizeof v);
            for (int i = 0; i < E.e.n_blob; i++)
                if (!strcmp(v[i].role, "codes")) v[i].data = bad;
            kvq_err e1 = {0}, e2 = {0};
            kvq_status sc = kvq_hq_decode(&E.h, v, E.e.n_blob, cpu, 2, &e1);
            kvq_cuda_hq *t = NULL;
            assert_int_equal(upload(&E, bad, &t, &e2), KVQ_OK);
            kvq_status sg = gpu_decode(t, n, KVQ_CUDA_F32, gpu, &e2);
            if (sc != sg) fprintf(stderr, "%s trial %d: cpu '%s' gpu '%s'\n", kvq_lattice_name(l), trial, e1.msg, e2.msg);
            assert_int_equal(sc, sg);
            if (sc == KVQ_OK) assert_memory_equal(cpu, gpu, sizeof(float) * n);
            else {
                flagged++;
                assert_non_null(strstr(e2.msg, "corrupt Rice stream"));
                // the matvec flags it too
                float *x = calloc(E.cols, sizeof(float)), *y = malloc(sizeof(float) * E.rows);
                assert_int_equal(kvq_cuda_hq_matvec_host(t, x, y, &e2), KVQ_ERR_FORMAT);
                free(x);
                free(y);
            }
            kvq_cuda_hq_free(t);
            trials++;
        }
        // offsets out of order / past the end are refused before any device work
        uint8_t *offs = malloc(E.offs->size);
        memcpy(offs, E.offs->data, E.offs->size);
        offs[4] = 0xff, offs[5] = 0xff, offs[6] = 0xff;
        kvq_cuda_hq_desc d = desc_of(&E.h);
        kvq_cuda_hq *t = NULL;
        kvq_err err = {0};
        assert_int_equal(kvq_cuda_hq_upload(&d, E.codes->data, E.codes->size, E.norms->data, E.norms->size, offs,
                                            E.offs->size, &t, &err),
                         KVQ_ERR_FORMAT);
        assert_null(t);
        assert_non_null(strstr(err.msg, "offset"));
        assert_int_equal(kvq_cuda_hq_upload(&d, E.codes->data, E.codes->size, E.norms->data, E.norms->size - 1,
                                            E.offs->data, E.offs->size, &t, &err),
                         KVQ_ERR_FORMAT);
        free(offs);
        free(bad);
        free(cpu);
        free(gpu);
        kvq_encoded_free(&E.e);
    }
    fprintf(stderr, "test_cuda_hq: %d of %d corrupted streams flagged by both CPU and GPU, the rest decoded identically\n",
            flagged, trials);
    assert_true(flagged > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_bitexact),
        cmocka_unit_test(test_matvec_bound),
        cmocka_unit_test(test_corrupt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
