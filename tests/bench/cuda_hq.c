// GPU HyperQuant benchmark: decode throughput (fp32 and bf16 output) and fused matvec
// time against the memory floor (bytes moved / measured device-to-device copy bandwidth),
// for realistic shapes at 4.0 bits, E8 and Z; the CPU decoder on all cores for scale.
// Checks bit-exactness and the matvec error first. Usage: cuda_hq [rows cols ...]
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/dtype.h"
#include "kernels/cuda/hq_decode.h"
#include "libconv/codec/hyperquant/hq_impl.h"
#include "libconv/codec/hyperquant/hyperquant.h"
#include "tests/testrng.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define OK(call) do { if ((call) != KVQ_OK) DIE("%s:%d: %s", __FILE__, __LINE__, err.msg); } while (0)

enum { OP_F32, OP_BF16, OP_MATVEC };

// Median seconds per call over 9 batches of `per` calls, cycling over n copies of the
// tensor so that repeated calls do not read the compact form from L2.
static double time_op(kvq_cuda_hq **t, int n, int op, void *out, const float *dx) {
    kvq_err err = {0};
    double ts[9];
    const int per = 10;
    for (int b = -1; b < 9; b++) { // batch -1 warms up
        OK(kvq_cuda_sync(&err));
        double t0 = now();
        for (int i = 0; i < per; i++) {
            kvq_cuda_hq *c = t[(b * per + i + 1000) % n];
            if (op == OP_MATVEC) OK(kvq_cuda_hq_matvec(c, dx, (float *)out, &err));
            else OK(kvq_cuda_hq_decode(c, out, op == OP_BF16 ? KVQ_CUDA_BF16 : KVQ_CUDA_F32, &err));
        }
        OK(kvq_cuda_sync(&err));
        if (b >= 0) ts[b] = (now() - t0) / per;
    }
    for (int i = 0; i < n; i++) OK(kvq_cuda_hq_check(t[i], &err));
    qsort(ts, 9, sizeof *ts, cmpd);
    return ts[4];
}

static void bench(kvq_lattice lat, double bps, int64_t rows, int64_t cols, double bw) {
    kvq_err err = {0};
    const int64_t n = rows * cols;
    float *x = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n), *gpu = malloc(sizeof(float) * n);
    uint64_t s = 12345;
    for (int64_t i = 0; i < n; i++) x[i] = (float)gauss(&s);
    kvq_hq_opts o = kvq_hq_opts_default(lat, bps);
    kvq_codec_input in = {NULL, x, rows, cols, 99, 0, NULL};
    kvq_encoded e;
    double te = now();
    OK(kvq_hq_encode(&o, &in, &e, NULL, NULL, &err));
    te = now() - te;
    kvq_hq_header h;
    OK(kvq_hq_header_parse(e.params, rows, cols, &h, &err));
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
    const kvq_blob_view *bc = kvq_blob_find(v, e.n_blob, "codes"), *bn = kvq_blob_find(v, e.n_blob, "norms"),
                        *bo = kvq_blob_find(v, e.n_blob, "offsets");
    // CPU decode, all cores, median of 5
    double tc[5];
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        OK(kvq_hq_decode(&h, v, e.n_blob, ref, 0, &err));
        tc[r] = now() - t0;
    }
    qsort(tc, 5, sizeof *tc, cmpd);
    kvq_cuda_hq_desc d = {h.lat, h.int8, h.cast, h.tile, h.rows, h.cols, h.cols_p, h.norm_bits, h.norm_exp,
                          h.alpha, {h.k[0], h.k[1]}, h.seed};
    kvq_cuda_hq *t[16];
    int nc = 0;
    OK(kvq_cuda_hq_upload(&d, bc->data, bc->size, bn->data, bn->size, bo->data, bo->size, &t[nc++], &err));
    const size_t compact = kvq_cuda_hq_compact_bytes(t[0]);
    while (nc < 16 && (size_t)nc * compact < ((size_t)256 << 20))
        OK(kvq_cuda_hq_upload(&d, bc->data, bc->size, bn->data, bn->size, bo->data, bo->size, &t[nc++], &err));
    void *dout;
    float *dx, *dy;
    OK(kvq_cuda_malloc(&dout, sizeof(float) * n, &err));
    OK(kvq_cuda_malloc((void **)&dx, sizeof(float) * cols, &err));
    OK(kvq_cuda_malloc((void **)&dy, sizeof(float) * rows, &err));
    // correctness first: fp32 and bf16 bit-exact, matvec relative error vs fp64 of the CPU decode
    OK(kvq_cuda_memset(dout, 0xff, sizeof(float) * n, &err));
    OK(kvq_cuda_hq_decode(t[nc - 1], dout, KVQ_CUDA_F32, &err));
    OK(kvq_cuda_hq_check(t[nc - 1], &err));
    OK(kvq_cuda_copy(gpu, dout, sizeof(float) * n, 0, &err));
    int exact = memcmp(gpu, ref, sizeof(float) * n) == 0;
    OK(kvq_cuda_memset(dout, 0xff, sizeof(float) * n, &err));
    OK(kvq_cuda_hq_decode(t[0], dout, KVQ_CUDA_BF16, &err));
    OK(kvq_cuda_hq_check(t[0], &err));
    OK(kvq_cuda_copy(gpu, dout, 2 * (size_t)n, 0, &err));
    const uint16_t *gb = (const uint16_t *)gpu;
    int exact16 = 1;
    for (int64_t i = 0; i < n && exact16; i++) exact16 = gb[i] == kvq_f32_to_bf16(ref[i]);
    float *xv = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * rows);
    for (int64_t c = 0; c < cols; c++) xv[c] = (float)gauss(&s);
    OK(kvq_cuda_copy(dx, xv, sizeof(float) * cols, 1, &err));
    OK(kvq_cuda_memset(dy, 0xff, sizeof(float) * rows, &err));
    OK(kvq_cuda_hq_matvec(t[0], dx, dy, &err));
    OK(kvq_cuda_hq_check(t[0], &err));
    OK(kvq_cuda_copy(y, dy, sizeof(float) * rows, 0, &err));
    double num = 0, den = 0;
    for (int64_t r = 0; r < rows; r++) {
        double acc = 0;
        for (int64_t c = 0; c < cols; c++) acc += (double)ref[r * cols + c] * xv[c];
        num += (y[r] - acc) * (y[r] - acc);
        den += acc * acc;
    }
    const double t32 = time_op(t, nc, OP_F32, dout, NULL), t16 = time_op(t, nc, OP_BF16, dout, NULL),
                 tmv = time_op(t, nc, OP_MATVEC, dy, dx);
    const double eff = 8.0 * (double)kvq_encoded_bytes(&e) / (double)n;
    printf("%-2s %5lldx%-5lld eff %.3f bpw, compact %.1f MB, %d copies rotated; encode %.2f s; "
           "fp32 bit-exact %s, bf16 bit-exact %s, matvec rel err %.2e\n",
           kvq_lattice_name(lat), (long long)rows, (long long)cols, eff, compact / 1e6, nc, te,
           exact ? "yes" : "NO", exact16 ? "yes" : "NO", sqrt(num / den));
    const double b32 = (double)compact + 4.0 * n, b16 = (double)compact + 2.0 * n, bmv = (double)compact + 4.0 * (cols + rows);
    printf("   CPU decode %d threads: %8.3f ms  %7.2f Gw/s\n", omp_get_max_threads(), 1e3 * tc[2], n / tc[2] / 1e9);
    printf("   GPU decode fp32:       %8.3f ms  %7.2f Gw/s  %7.1f GB/s  floor %.3f ms (%.1fx)\n", 1e3 * t32,
           n / t32 / 1e9, b32 / t32 / 1e9, 1e3 * b32 / bw, t32 / (b32 / bw));
    printf("   GPU decode bf16:       %8.3f ms  %7.2f Gw/s  %7.1f GB/s  floor %.3f ms (%.1fx)\n", 1e3 * t16,
           n / t16 / 1e9, b16 / t16 / 1e9, 1e3 * b16 / bw, t16 / (b16 / bw));
    printf("   GPU fused matvec:      %8.3f ms  %7.2f Gw/s  %7.1f GB/s  floor %.3f ms (%.1fx)\n", 1e3 * tmv,
           n / tmv / 1e9, bmv / tmv / 1e9, 1e3 * bmv / bw, tmv / (bmv / bw));
    fflush(stdout);
    for (int i = 0; i < nc; i++) kvq_cuda_hq_free(t[i]);
    kvq_cuda_free(dout);
    kvq_cuda_free(dx);
    kvq_cuda_free(dy);
    kvq_encoded_free(&e);
    free(x);
    free(ref);
    free(gpu);
    free(xv);
    free(y);
}

int main(int argc, char **argv) {
    char why[256] = "", name[256];
    if (!kvq_cuda_device_count(why, sizeof why)) {
        printf("cuda_hq: skipped: %s\n", why);
        return 0;
    }
    kvq_cuda_device_name(name, sizeof name);
    kvq_err err = {0};
    double bw;
    OK(kvq_cuda_copy_bandwidth((size_t)1 << 30, 20, &bw, &err));
    printf("device: %s; device-to-device copy %.0f GB/s (read + write, 1 GiB, median of 20)\n", name, bw / 1e9);
    int64_t shapes[8][2] = {{4096, 4096}, {8192, 8192}};
    int ns = 2;
    if (argc >= 3) {
        ns = 0;
        for (int i = 1; i + 1 < argc && ns < 8; i += 2, ns++) {
            shapes[ns][0] = atoll(argv[i]);
            shapes[ns][1] = atoll(argv[i + 1]);
        }
    }
    for (int si = 0; si < ns; si++) {
        bench(KVQ_LAT_E8, 4.0, shapes[si][0], shapes[si][1], bw);
        bench(KVQ_LAT_Z, 4.0, shapes[si][0], shapes[si][1], bw);
    }
    return 0;
}
